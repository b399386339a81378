/* The insight rules (insights.h): each reads one or two profiles of the input, measures one
 * thing (a share of CPU, of wall time, a growth rate, a call rate) and fires when it reaches
 * its threshold, with the sites that make it up as evidence. The share rules
 * share one walk (category_sites): a stack belongs to a category when a frame matches the
 * category's names, and its site is the frame that called into the category (the caller of
 * the outermost matching frame). The leak rule is in insights_leak.c.
 * Threading: the category patterns are compiled once (pthread_once) and only matched after;
 * nothing else is global. */
#include "insights_int.h"

#include "cm/error.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const agg_insight_rules[] = {"lock_contention", "alloc_churn",  "leak_candidate",
                                         "small_io",        "busy_wait",    "exception_heavy",
                                         "memory_copy",     "agent_overhead", NULL};

void agg_insights_defaults(agg_insight_limits_t *lim) {
    lim->lock_share = 0.10;
    lim->alloc_share = 0.20;
    lim->leak_rate = 128.0 * 1024;
    lim->small_io_rate = 2000;
    lim->small_io_bytes = 512;
    lim->small_io_wait = 200e3;
    lim->spin_share = 0.10;
    lim->except_share = 0.05;
    lim->copy_share = 0.15;
    lim->agent_share = 0.03;
    lim->drop_share = 0.01;
    lim->min_cpu_samples = 100;
}

/* Function names of each category (matched against the function alone, anchored). */
const char *const ins_cat_src[INS_CAT_N] = {
    [INS_CAT_ALLOC] = "^(malloc|free|calloc|realloc|reallocarray|posix_memalign|aligned_alloc|"
                      "memalign|valloc|pvalloc|cfree|__libc_(malloc|free|calloc|realloc|memalign)|"
                      "_int_(malloc|free|realloc|memalign)|_int_free_.*|malloc_consolidate|"
                      "sysmalloc|tcache_.*|unlink_chunk.*|operator new.*|operator delete.*|"
                      "_Zn[wa]m.*|_Zd[la]Pv.*|je_.*|tc_.*|mi_(malloc|free|calloc|realloc).*)"
                      "(@plt)?$",
    [INS_CAT_LOCK] = "^(pthread_mutex_(timed)?lock|pthread_rwlock_(timed)?(rd|wr)lock|"
                     "pthread_spin_lock|___?pthread_mutex_(timed)?lock.*|__lll_lock_wait.*|"
                     "lll_lock_wait.*|futex_.*wait.*|__futex_abstimed_wait.*|std::mutex::lock.*|"
                     "std::__mutex_base.*|std::unique_lock.*lock.*|std::lock_guard.*)(@plt)?$",
    [INS_CAT_IO] = "^(_*(libc_|GI_+)*_*(read|write|pread|pwrite|readv|writev|preadv2?|"
                   "pwritev2?|send|recv|sendto|recvfrom|sendmsg|recvmsg|sendmmsg|recvmmsg|"
                   "fsync|fdatasync)(64)?(_nocancel)?|fwrite|fread|fflush|fputs|fputc|putc|"
                   "fgets|fgetc|getc|_IO_.*|new_do_write)(@plt)?$",
    [INS_CAT_SPIN] = "^(sched_yield|__sched_yield|pthread_yield|thrd_yield|"
                     "pthread_spin_(lock|trylock)|std::this_thread::yield.*)(@plt)?$",
    [INS_CAT_EXCEPT] = "^(__cxa_throw|__cxa_rethrow|__cxa_allocate_exception|"
                       "__cxa_begin_catch|__cxa_end_catch|__cxa_free_exception|"
                       "_Unwind_RaiseException|_Unwind_Resume(_or_Rethrow)?|"
                       "_Unwind_ForcedUnwind|__gxx_personality_v0|std::rethrow_exception.*)"
                       "(@plt)?$",
    [INS_CAT_COPY] = "^(memcpy|memmove|mempcpy|bcopy|wmemcpy|wmemmove|__memcpy.*|__memmove.*|"
                     "__mempcpy.*|__wmemcpy.*|copy_user_.*|_copy_(to|from)_user|"
                     "rep_movs_alternative|copyin|copyout)(@plt)?$",
    /* system call wrappers besides the I/O ones (INS_CAT_IO counts too): CPU samples whose
     * leaf is one were taken in the kernel */
    [INS_CAT_KERNEL] = "^(syscall|_*(libc_|GI_+)*_*(mmap|munmap|mprotect|madvise|mremap|brk|"
                       "futex|epoll_wait|epoll_pwait|epoll_ctl|poll|ppoll|select|pselect|"
                       "nanosleep|clock_nanosleep|sched_yield|open|openat|close|f?stat|fstatat|"
                       "newfstatat|lstat|statx|lseek|ioctl|fcntl|accept4?|connect|socket|bind|"
                       "listen|getdents|kill|tgkill|(rt_)?sigprocmask|pipe2?|dup[23]?|"
                       "unlink(at)?|rename|mkdir|access|getrandom|clone3?|fork|execve|wait4|"
                       "waitpid|prctl|[gs]etsockopt|shutdown|sendfile|splice|f?truncate)"
                       "(64)?(_nocancel)?)(@plt)?$",
};

int ins_cats_compile(ins_ctx_t *x) {
    char err[256];
    for (int c = 0; c < INS_CAT_N; c++) {
        int rc = agg_pattern_compile(ins_cat_src[c], &x->cat[c], err, sizeof err);
        if (rc)
            return rc;
    }
    return 0;
}

/* The categories, compiled once for the process (agg_insights_run, agg_insight_categories;
 * matching is thread-safe) and never freed. */
static ins_ctx_t g_cats;
static int g_cats_rc;
static pthread_once_t g_cats_once = PTHREAD_ONCE_INIT;
static void cats_init(void) { g_cats_rc = ins_cats_compile(&g_cats); }

uint32_t agg_insight_categories(const char *function) {
    pthread_once(&g_cats_once, cats_init);
    uint32_t m = 0;
    for (int c = 0; !g_cats_rc && c < INS_CAT_N; c++)
        if (agg_pattern_match(g_cats.cat[c], function))
            m |= 1u << c;
    return m & AGG_INSIGHT_CAT_IO ? m | AGG_INSIGHT_CAT_KERNEL : m;
}

/* A frame's function alone ("memcpy" of "memcpy string.S:12" with lines). */
static int frame_is(const ins_ctx_t *x, int cat, const agg_frame_t *f) {
    return agg_pattern_match(x->cat[cat], f->function ? f->function : f->name);
}

static int cmp_site(const void *a, const void *b) {
    const ins_site_t *x = a, *y = b;
    if (x->weight != y->weight)
        return x->weight < y->weight ? 1 : -1;
    return x->frame < y->frame ? -1 : x->frame > y->frame;
}

/* The site of stack s in category cat: the caller of its outermost frame of the category (leaf
 * mode: of the run of category frames ending at the leaf). Returns the frame id (the matching
 * frame itself when it is the root), AGG_NONE when the stack is not in the category;
 * fallback_leaf: a stack without a category frame has its leaf as site. */
static uint32_t stack_site(const agg_profile_t *p, uint32_t s, int mode, const uint8_t *is) {
    const uint32_t *fr = p->stack_frames + p->stack_off[s];
    uint32_t n = p->stack_off[s + 1] - p->stack_off[s];
    if (n == 0)
        return AGG_NONE;
    uint32_t first = AGG_NONE;
    if (mode == INS_LEAF) {
        uint32_t k = n;
        while (k > 0 && is[fr[k - 1]])
            k--;
        first = k < n ? k : AGG_NONE;
    } else {
        for (uint32_t k = 0; k < n && first == AGG_NONE; k++)
            if (is[fr[k]])
                first = k;
    }
    if (first == AGG_NONE)
        return mode == INS_FALLBACK_LEAF ? fr[n - 1] : AGG_NONE;
    return first > 0 ? fr[first - 1] : fr[first];
}

int ins_stack_sites(const ins_ctx_t *x, const agg_profile_t *p, int cat, int mode,
                    uint32_t **out) {
    uint32_t *site = malloc(((size_t)p->n_stacks + 1) * sizeof *site);
    uint8_t *is = calloc((size_t)p->n_frames + 1, 1);
    if (!site || !is) {
        free(site), free(is);
        return CM_ENOMEM;
    }
    for (uint32_t f = 0; f < p->n_frames; f++)
        is[f] = (uint8_t)frame_is(x, cat, &p->frames[f]);
    for (uint32_t s = 0; s < p->n_stacks; s++)
        site[s] = stack_site(p, s, mode, is);
    free(is);
    *out = site;
    return 0;
}

int ins_sites(const ins_ctx_t *x, const agg_profile_t *p, int cat, int mode, ins_split_t *out) {
    memset(out, 0, sizeof *out);
    uint64_t *sw = malloc(((size_t)p->n_stacks + 1) * sizeof *sw);
    uint64_t *sc = malloc(((size_t)p->n_stacks + 1) * sizeof *sc);
    ins_site_t *acc = calloc((size_t)p->n_frames + 1, sizeof *acc);
    uint32_t *site = NULL;
    int rc = sw && sc && acc ? ins_stack_sites(x, p, cat, mode, &site) : CM_ENOMEM;
    if (rc) {
        free(sw), free(sc), free(acc);
        return rc;
    }
    for (uint32_t f = 0; f < p->n_frames; f++)
        acc[f].frame = f;
    agg_profile_stack_sums(p, sw, sc);
    for (uint32_t s = 0; s < p->n_stacks; s++) {
        out->total += sw[s];
        out->total_count += sc[s];
        if (site[s] == AGG_NONE)
            continue;
        out->in_cat += sw[s];
        out->in_cat_count += sc[s];
        acc[site[s]].weight += sw[s];
        acc[site[s]].count += sc[s];
    }
    size_t n = 0;
    for (uint32_t f = 0; f < p->n_frames; f++)
        if (acc[f].weight || acc[f].count)
            acc[n++] = acc[f];
    qsort(acc, n, sizeof *acc, cmp_site);
    out->sites = acc;
    out->n_sites = n;
    free(sw), free(sc), free(site);
    return 0;
}

/* An include pattern selecting exactly this function: "(^|!)NAME$" with ERE specials escaped. */
char *ins_include_for(const char *name) {
    size_t n = strlen(name);
    char *s = malloc(2 * n + 16);
    if (!s)
        return NULL;
    size_t k = (size_t)sprintf(s, "(^|!)");
    for (size_t i = 0; i < n; i++) {
        if (strchr("\\^$.|?*+()[]{}", name[i]))
            s[k++] = '\\';
        s[k++] = name[i];
    }
    s[k++] = '$';
    s[k] = 0;
    return s;
}

int ins_evidence(agg_insight_t *ins, const char *name, double share, double value, int pattern) {
    if (ins->n_ev >= AGG_INSIGHT_MAX_EVIDENCE)
        return 0;
    agg_evidence_t *e = &ins->ev[ins->n_ev];
    e->name = strdup(name);
    e->include = pattern ? ins_include_for(name) : NULL;
    e->io_target = NULL;
    if (!e->name || (pattern && !e->include)) {
        free(e->name);
        free(e->include);
        return CM_ENOMEM;
    }
    e->share = share;
    e->value = value;
    ins->n_ev++;
    return 0;
}

/* Evidence from the top sites of a split: share of the category, value in unit `scale` x weight. */
int ins_evidence_sites(agg_insight_t *ins, const agg_profile_t *p, const ins_split_t *sp,
                       double scale, size_t max) {
    for (size_t i = 0; i < sp->n_sites && i < max; i++) {
        const ins_site_t *s = &sp->sites[i];
        double share = sp->in_cat ? (double)s->weight / (double)sp->in_cat : 0;
        if (share < 0.01 && i > 0)
            break;
        const agg_frame_t *f = &p->frames[s->frame];
        int rc = ins_evidence(ins, f->function ? f->function : f->name, share,
                              (double)s->weight * scale, 1);
        if (rc)
            return rc;
    }
    return 0;
}

int ins_push(agg_insights_t *r, agg_insight_t *ins) {
    agg_insight_t *v = realloc(r->v, (r->n + 1) * sizeof *v);
    if (!v) {
        ins_insight_clear(ins);
        return CM_ENOMEM;
    }
    r->v = v;
    r->v[r->n++] = *ins;
    return 0;
}

void ins_insight_clear(agg_insight_t *ins) {
    for (size_t i = 0; i < ins->n_ev; i++) {
        free(ins->ev[i].name);
        free(ins->ev[i].include);
        free(ins->ev[i].io_target);
    }
    ins->n_ev = 0;
}

void agg_insights_free(agg_insights_t *r) {
    for (size_t i = 0; i < r->n; i++)
        ins_insight_clear(&r->v[i]);
    free(r->v);
    memset(r, 0, sizeof *r);
}

static int cmp_ins(const void *a, const void *b) {
    const agg_insight_t *x = a, *y = b;
    double rx = x->threshold > 0 ? x->score / x->threshold : x->score;
    double ry = y->threshold > 0 ? y->score / y->threshold : y->score;
    if (rx != ry)
        return rx < ry ? 1 : -1;
    return strcmp(x->rule, y->rule);
}

int agg_insights_run(const agg_insight_input_t *in, const agg_insight_limits_t *lim,
                     agg_insights_t *out) {
    memset(out, 0, sizeof *out);
    agg_insight_limits_t def;
    if (!lim) {
        agg_insights_defaults(&def);
        lim = &def;
    }
    ins_ctx_t x = {.in = in, .lim = lim, .out = out};
    pthread_once(&g_cats_once, cats_init); /* compiled once, matched from any thread */
    int rc = g_cats_rc;
    memcpy(x.cat, g_cats.cat, sizeof x.cat);
    if (!rc)
        rc = ins_rules_share(&x);
    if (!rc)
        rc = ins_rule_leak(&x);
    if (!rc)
        rc = ins_rule_agent(&x);
    if (rc) {
        agg_insights_free(out);
        return rc;
    }
    if (out->n)
        qsort(out->v, out->n, sizeof *out->v, cmp_ins);
    return 0;
}

json_t *agg_insights_json(const agg_insights_t *r) {
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < r->n; i++) {
        const agg_insight_t *s = &r->v[i];
        json_t *ev = json_array();
        for (size_t k = 0; ev && k < s->n_ev; k++) {
            const agg_evidence_t *e = &s->ev[k];
            json_array_append_new(
                ev, json_pack("{s:s,s:f,s:f,s:o,s:s?}", "name", e->name, "share", e->share,
                              "value", e->value, "include",
                              e->include ? json_string(e->include) : json_null(), "io_target",
                              e->io_target));
        }
        json_t *o = json_pack("{s:s,s:s,s:s,s:f,s:f,s:s,s:s,s:s,s:s,s:o}", "rule", s->rule,
                              "title", s->title, "unit", s->unit, "score",
                              isfinite(s->score) ? s->score : 0.0, "threshold", s->threshold,
                              "type", cm_event_name(s->type), "summary", s->summary, "explain",
                              s->explain, "fix", s->fix, "evidence", ev ? ev : json_array());
        if (!o || json_array_append_new(arr, o)) {
            json_decref(arr);
            return NULL;
        }
    }
    if (!arr)
        return NULL;
    return json_pack("{s:o,s:I}", "insights", arr, "evaluated", (json_int_t)r->evaluated);
}
