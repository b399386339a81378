/* pprof export: builds a perftools.profiles.Profile with protobuf-c and gzips it with zlib.
 * Threading: reads the profile only. */
#include "export.h"
#include "internal.h"

#include "cm/error.h"
#include "profile.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include <zlib.h>

/* n_<field> and <field> of a protobuf-c message: the n entries at arr. */
#define SET_LIST(msg, field, arr, n) ((msg)->n_##field = (n), (msg)->field = (arr))

#define HEX_SPAN 33 /* offset of the span id in a context's label strings (after the trace id) */

/* pprof's sample types per event type: the count's name, the value's name and unit. */
static const struct {
    const char *count, *value, *unit;
} sample_types[CM_EV_COUNT] = {
    [CM_EV_CPU] = {"samples", "cpu", "nanoseconds"},
    [CM_EV_WALL] = {"samples", "wall", "nanoseconds"},
    [CM_EV_ALLOC] = {"alloc_objects", "alloc_space", "bytes"},
    [CM_EV_INUSE] = {"inuse_objects", "inuse_space", "bytes"},
    [CM_EV_LOCK] = {"contentions", "delay", "nanoseconds"},
    [CM_EV_IO] = {"io_ops", "io_time", "nanoseconds"},
};

void agg_pprof_sample_types(cm_event_type_t type, const char *names[2], const char *units[2]) {
    int known = (unsigned)type < CM_EV_COUNT && sample_types[type].count;
    names[0] = known ? sample_types[type].count : "samples";
    names[1] = known ? sample_types[type].value : "value";
    units[0] = "count";
    units[1] = known ? sample_types[type].unit : "count";
}

/* The string table: index 0 is "" as pprof requires. Strings point into the profile (or are
 * static), so the table stores pointers only; h indexes them by hash (internal.h). */
typedef struct {
    char **s;
    size_t n, cap;
    agg_idtab_t h;
} strtab_t;

static int64_t strtab_get(strtab_t *t, const char *str) {
    uint64_t h = XXH3_64bits(str, strlen(str));
    for (size_t j = h & (t->h.cap - 1); t->h.cap && t->h.id[j]; j = (j + 1) & (t->h.cap - 1))
        if (t->h.hash[j] == h && strcmp(t->s[t->h.id[j] - 1], str) == 0)
            return t->h.id[j] - 1;
    if (t->n == t->cap) {
        size_t ncap = t->cap ? 2 * t->cap : 256;
        char **ns = realloc(t->s, ncap * sizeof *ns);
        if (!ns)
            return CM_ENOMEM;
        t->s = ns;
        t->cap = ncap;
    }
    if (agg_idtab_insert(&t->h, h, (uint32_t)t->n))
        return CM_ENOMEM;
    t->s[t->n] = (char *)str;
    return (int64_t)t->n++;
}

/* A frame that arrived without a function name and was not named since: its name is the one
 * the store gives it, "module+0xADDR" or "0xADDR" with its own address. */
static int frame_unnamed(const agg_frame_t *f) {
    char buf[320];
    if (f->module[0])
        snprintf(buf, sizeof buf, "%s+0x%llx", f->module, (unsigned long long)f->address);
    else
        snprintf(buf, sizeof buf, "0x%llx", (unsigned long long)f->address);
    return strcmp(buf, f->name) == 0;
}

static _Thread_local const agg_row_t *tl_rows;

static int cmp_row(const void *a, const void *b) {
    const agg_row_t *x = &tl_rows[*(const size_t *)a], *y = &tl_rows[*(const size_t *)b];
    if (x->stack != y->stack)
        return x->stack < y->stack ? -1 : 1;
    return x->context < y->context ? -1 : x->context > y->context;
}

static int gzip_buf(const uint8_t *in, size_t len, uint8_t **out, size_t *out_len) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return CM_ECOMPRESS;
    size_t cap = deflateBound(&zs, len) + 64;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        deflateEnd(&zs);
        return CM_ENOMEM;
    }
    zs.next_in = (Bytef *)in;
    zs.avail_in = (uInt)len;
    zs.next_out = buf;
    zs.avail_out = (uInt)cap;
    int zr = deflate(&zs, Z_FINISH);
    *out_len = zs.total_out;
    deflateEnd(&zs);
    if (zr != Z_STREAM_END) {
        free(buf);
        return CM_ECOMPRESS;
    }
    *out = buf;
    return 0;
}

typedef Perftools__Profiles__Profile Profile;
typedef Perftools__Profiles__ValueType ValueType;
typedef Perftools__Profiles__Sample Sample;
typedef Perftools__Profiles__Label Label;
typedef Perftools__Profiles__Mapping Mapping;
typedef Perftools__Profiles__Location Location;
typedef Perftools__Profiles__Line Line;
typedef Perftools__Profiles__Function Function;

/* The Profile message under construction and every array it points into, sized from the
 * profile up front (own()). Released with exp_free(). */
typedef struct {
    const agg_profile_t *p;
    strtab_t st;
    Profile prof;
    ValueType vt[3], *vtp[2];
    Function *fn, **fnp;
    size_t nfn;
    uint32_t *fnid; /* frame -> function id, 0: unnamed */
    uint64_t *fhkey; /* (name, file) string ids -> function */
    uint32_t *fhval;
    Mapping *map, **mapp;
    size_t nmap;
    uint32_t *frame_map; /* frame -> mapping id, 0 none */
    /* locations: one per run of frames at one address (a frame and the frames inlined into
     * it), at most one per frame of a stack; lines: one per frame of a location */
    Location *loc, **locp;
    size_t nloc;
    Line *line, **linep;
    size_t nline;
    uint32_t *runs;   /* locations' frames, root-first */
    size_t *runoff;   /* location i: runs[off[i]..off[i+1]) */
    uint32_t *lhash;  /* run -> location index + 1 */
    size_t lhcap;     /* slots of lhash, fhkey, fhval */
    uint64_t *locids; /* per stack frame slot: the stack's location ids, leaf first */
    uint32_t *nlocs_of; /* per stack: how many location ids */
    Sample *smp, **smpp;
    size_t ns;
    int64_t *vals;
    uint64_t *sw0, *sc0; /* per stack: weight and count of the rows without a context */
    size_t *order;       /* rows with a context, sorted by (stack, context) */
    Label *lab, **labp;
    size_t nlab;
    /* per context: trace id (32 hex + NUL) at 0, span id (16 hex + NUL) at HEX_SPAN */
    char (*hex)[HEX_SPAN + 17];
    void *owned[32]; /* every array above (26), freed by exp_free */
    size_t n_owned;
    int oom; /* an allocation failed */
} exp_t;

/* Keeps p for exp_free, or notes that its allocation failed (or that owned[] is full, which
 * the arrays above never make it: failing beats leaking if one is added). Returns p or NULL. */
static void *own(exp_t *x, void *p) {
    if (p && x->n_owned == sizeof x->owned / sizeof x->owned[0]) {
        free(p);
        p = NULL;
    }
    if (!p)
        x->oom = 1;
    else
        x->owned[x->n_owned++] = p;
    return p;
}

static void exp_free(exp_t *x) {
    free(x->st.s);
    free(x->st.h.hash);
    free(x->st.h.id);
    for (size_t i = 0; i < x->n_owned; i++)
        free(x->owned[i]);
}

/* Sizes every array from the profile. 0 or CM_ENOMEM. */
static int exp_alloc(exp_t *x, const agg_profile_t *p) {
    size_t nf = p->n_frames, nr = p->n_rows;
    size_t nsf = (size_t)p->stack_off[p->n_stacks] + nf + 1;
    x->fn = own(x, calloc(nf + 1, sizeof *x->fn));
    x->fnp = own(x, calloc(nf + 1, sizeof *x->fnp));
    x->loc = own(x, calloc(nsf, sizeof *x->loc));
    x->locp = own(x, calloc(nsf, sizeof *x->locp));
    x->line = own(x, calloc(nsf, sizeof *x->line));
    x->linep = own(x, calloc(nsf, sizeof *x->linep));
    x->fnid = own(x, calloc(nf + 1, sizeof *x->fnid));
    x->runs = own(x, malloc(nsf * sizeof *x->runs));
    x->runoff = own(x, malloc((nsf + 1) * sizeof *x->runoff));
    x->lhcap = 16;
    while (x->lhcap < 2 * nsf)
        x->lhcap *= 2;
    x->lhash = own(x, calloc(x->lhcap, sizeof *x->lhash));
    x->fhkey = own(x, calloc(x->lhcap, sizeof *x->fhkey));
    x->fhval = own(x, calloc(x->lhcap, sizeof *x->fhval));
    x->map = own(x, calloc(nf + 1, sizeof *x->map));
    x->mapp = own(x, calloc(nf + 1, sizeof *x->mapp));
    x->frame_map = own(x, calloc(nf + 1, sizeof *x->frame_map));
    x->order = own(x, malloc((nr + 1) * sizeof *x->order));
    size_t nsmax = nr + p->n_stacks + 1;
    x->smp = own(x, calloc(nsmax, sizeof *x->smp));
    x->smpp = own(x, calloc(nsmax, sizeof *x->smpp));
    x->vals = own(x, calloc(2 * nsmax, sizeof *x->vals));
    x->sw0 = own(x, calloc((size_t)p->n_stacks + 1, sizeof *x->sw0));
    x->sc0 = own(x, calloc((size_t)p->n_stacks + 1, sizeof *x->sc0));
    x->lab = own(x, calloc(2 * nr + 2, sizeof *x->lab));
    x->labp = own(x, calloc(2 * nr + 2, sizeof *x->labp));
    x->locids = own(x, malloc(((size_t)p->stack_off[p->n_stacks] + 1) * sizeof *x->locids));
    x->nlocs_of = own(x, calloc((size_t)p->n_stacks + 1, sizeof *x->nlocs_of));
    x->hex = own(x, calloc((size_t)p->n_contexts + 1, sizeof *x->hex));
    if (x->oom)
        return CM_ENOMEM;
    if (strtab_get(&x->st, "") != 0)
        return CM_ENOMEM;
    return 0;
}

/* The string id of str in x's table; returns CM_ENOMEM from the calling function on failure. */
#define S(str)                                                                                     \
    ({                                                                                             \
        int64_t i_ = strtab_get(&x->st, (str));                                                    \
        if (i_ < 0)                                                                                \
            return CM_ENOMEM;                                                                      \
        i_;                                                                                        \
    })

/* Sample and period types, time and duration. */
static int exp_sample_types(exp_t *x) {
    const agg_profile_t *p = x->p;
    ValueType init = PERFTOOLS__PROFILES__VALUE_TYPE__INIT, *vt = x->vt;
    const char *names[2], *units[2];
    agg_pprof_sample_types(p->type, names, units);
    vt[0] = vt[1] = vt[2] = init;
    vt[0].type = S(names[0]);
    vt[0].unit = S(units[0]);
    vt[1].type = S(names[1]);
    vt[1].unit = S(units[1]);
    vt[2].type = vt[1].type;
    vt[2].unit = vt[1].unit;
    x->vtp[0] = &vt[0];
    x->vtp[1] = &vt[1];
    SET_LIST(&x->prof, sample_type, x->vtp, 2);
    x->prof.period_type = &vt[2];
    x->prof.default_sample_type = vt[1].type;
    x->prof.time_nanos = (int64_t)p->time_start_ns;
    x->prof.duration_nanos =
        p->time_end_ns > p->time_start_ns ? (int64_t)(p->time_end_ns - p->time_start_ns) : 0;
    return 0;
}

/* pprof takes the first mapping for the main program (`pprof BINARY PROFILE` applies
 * BINARY to it): move the first one that is not a shared library ("*.so*") there. */
static void exp_main_mapping_first(exp_t *x) {
    Mapping *map = x->map;
    for (size_t k = 1; k < x->nmap; k++) {
        if (!strstr(x->st.s[map[0].filename], ".so") || strstr(x->st.s[map[k].filename], ".so"))
            continue;
        Mapping t = map[0];
        map[0] = map[k];
        map[k] = t;
        map[0].id = 1;
        map[k].id = k + 1;
        for (size_t f = 0; f < x->p->n_frames; f++)
            x->frame_map[f] = x->frame_map[f] == 1       ? (uint32_t)(k + 1)
                              : x->frame_map[f] == k + 1 ? 1u
                                                         : x->frame_map[f];
        break;
    }
}

/* Mappings: one per distinct (module, build id) of frames with a module. Addresses are the
 * binary's own (ELF vaddrs, what the store keeps), so each mapping spans the whole address
 * space from 0 with offset 0: pprof then symbolizes an address as it is (elfexec.GetBase's
 * "already adjusted" case), whether the binary is PIE, a library or fixed-address. A
 * mapping with an unnamed frame says has_functions = 0 so that pprof symbolizes it. */
static int exp_mappings(exp_t *x) {
    Mapping *map = x->map;
    for (size_t f = 0; f < x->p->n_frames; f++) {
        const agg_frame_t *fr = &x->p->frames[f];
        if (!fr->module[0])
            continue;
        size_t m;
        for (m = 0; m < x->nmap; m++) /* few mappings per profile: linear search is fine */
            if (strcmp(x->st.s[map[m].filename], fr->module) == 0 &&
                strcmp(x->st.s[map[m].build_id], fr->build_id) == 0)
                break;
        if (m == x->nmap) {
            Mapping init = PERFTOOLS__PROFILES__MAPPING__INIT;
            map[m] = init;
            map[m].id = m + 1;
            map[m].filename = S(fr->module);
            map[m].build_id = S(fr->build_id);
            map[m].memory_start = 0;
            map[m].memory_limit = UINT64_MAX;
            map[m].file_offset = 0;
            map[m].has_functions = 1;
            x->mapp[m] = &map[m];
            x->nmap++;
        }
        if (frame_unnamed(fr))
            map[m].has_functions = 0;
        x->frame_map[f] = (uint32_t)(m + 1);
    }
    exp_main_mapping_first(x);
    return 0;
}

/* Functions: one per (function, source file) of the named frames. */
static int exp_functions(exp_t *x) {
    size_t mask = x->lhcap - 1;
    for (size_t f = 0; f < x->p->n_frames; f++) {
        const agg_frame_t *fr = &x->p->frames[f];
        if (frame_unnamed(fr))
            continue; /* an address with its mapping (build id): no function, no line */
        int64_t ni = S(fr->function ? fr->function : fr->name), fi = S(fr->file ? fr->file : "");
        uint64_t key = ((uint64_t)ni << 32) | (uint64_t)fi;
        size_t j = (size_t)XXH3_64bits(&key, sizeof key) & mask;
        while (x->fhval[j] && x->fhkey[j] != key)
            j = (j + 1) & mask;
        if (!x->fhval[j]) {
            Function init = PERFTOOLS__PROFILES__FUNCTION__INIT, *fn = &x->fn[x->nfn];
            *fn = init;
            fn->id = x->nfn + 1;
            fn->name = fn->system_name = ni;
            fn->filename = fi;
            x->fnp[x->nfn] = fn;
            x->fhkey[j] = key;
            x->fhval[j] = (uint32_t)++x->nfn;
        }
        x->fnid[f] = x->fhval[j];
    }
    return 0;
}

/* The location of a run of rl frames (root-first), added if new; returns its id. Its lines
 * list the innermost frame first, as pprof wants; an unnamed frame's location has none. */
static uint32_t exp_location(exp_t *x, const uint32_t *run, size_t rl) {
    const agg_profile_t *p = x->p;
    size_t mask = x->lhcap - 1, j = (size_t)XXH3_64bits(run, rl * sizeof *run) & mask;
    for (; x->lhash[j]; j = (j + 1) & mask) {
        size_t li = x->lhash[j] - 1;
        if (x->runoff[li + 1] - x->runoff[li] == rl &&
            !memcmp(x->runs + x->runoff[li], run, rl * sizeof *run))
            return x->lhash[j];
    }
    size_t n = x->nloc;
    memcpy(x->runs + x->runoff[n], run, rl * sizeof *run);
    x->runoff[n + 1] = x->runoff[n] + rl;
    Location init = PERFTOOLS__PROFILES__LOCATION__INIT, *loc = &x->loc[n];
    *loc = init;
    loc->id = n + 1;
    loc->mapping_id = x->frame_map[run[0]];
    loc->address = p->frames[run[rl - 1]].address;
    x->locp[n] = loc;
    if (x->fnid[run[0]]) {
        SET_LIST(loc, line, &x->linep[x->nline], rl);
        for (size_t q = 0; q < rl; q++) {
            Line ln = PERFTOOLS__PROFILES__LINE__INIT;
            ln.function_id = x->fnid[run[rl - 1 - q]];
            ln.line = p->frames[run[rl - 1 - q]].line;
            x->line[x->nline] = ln;
            x->linep[x->nline] = &x->line[x->nline];
            x->nline++;
        }
    }
    return x->lhash[j] = (uint32_t)++x->nloc;
}

/* Locations, and the location ids of each stack, leaf first: a frame and the frames inlined
 * into it (root-first: those after it with `inlined`) are one location. */
static void exp_locations(exp_t *x) {
    const agg_profile_t *p = x->p;
    x->runoff[0] = 0;
    for (uint32_t s = 0; s < p->n_stacks; s++) {
        uint32_t a = p->stack_off[s], b = p->stack_off[s + 1], nl = 0;
        for (uint32_t k = a; k < b;) {
            uint32_t e = k + 1;
            while (e < b && (p->frames[p->stack_frames[e]].inlined & AGG_FRAME_INLINED) &&
                   x->fnid[p->stack_frames[e]] && x->fnid[p->stack_frames[k]])
                e++;
            x->locids[a + nl++] = exp_location(x, p->stack_frames + k, e - k); /* root-first */
            k = e;
        }
        for (uint32_t i = 0, j = nl ? nl - 1 : 0; i < j; i++, j--) { /* leaf first */
            uint64_t t = x->locids[a + i];
            x->locids[a + i] = x->locids[a + j];
            x->locids[a + j] = t;
        }
        x->nlocs_of[s] = nl;
    }
}

/* A sample of the given stack: count rounded to events, weight as is. */
static Sample *exp_sample(exp_t *x, uint32_t stack, uint64_t count, uint64_t weight) {
    Sample init = PERFTOOLS__PROFILES__SAMPLE__INIT, *sm = &x->smp[x->ns];
    *sm = init;
    SET_LIST(sm, location_id, x->locids + x->p->stack_off[stack], x->nlocs_of[stack]);
    SET_LIST(sm, value, x->vals + 2 * x->ns, 2);
    sm->value[0] = (int64_t)((count + CM_COUNT_ONE / 2) / CM_COUNT_ONE);
    sm->value[1] = (int64_t)weight;
    x->smpp[x->ns++] = sm;
    return sm;
}

/* Samples: rows merged by (stack, context). Rows without a context are summed per stack
 * (an array); only rows with a context are sorted, and carry trace_id and span_id labels. */
static int exp_samples(exp_t *x) {
    const agg_profile_t *p = x->p;
    int64_t k_trace = S("trace_id"), k_span = S("span_id");
    for (uint32_t c = 1; c < p->n_contexts; c++) {
        cm_hex(p->contexts[c].trace_id, 16, x->hex[c]);
        cm_hex(p->contexts[c].span_id, 8, x->hex[c] + HEX_SPAN);
    }
    size_t nctx = 0;
    for (size_t i = 0; i < p->n_rows; i++) {
        const agg_row_t *r = &p->rows[i];
        if (r->context)
            x->order[nctx++] = i;
        else {
            x->sw0[r->stack] += r->weight;
            x->sc0[r->stack] += r->count;
        }
    }
    tl_rows = p->rows;
    qsort(x->order, nctx, sizeof *x->order, cmp_row);
    for (uint32_t s = 0; s < p->n_stacks; s++)
        if (x->sw0[s] || x->sc0[s])
            exp_sample(x, s, x->sc0[s], x->sw0[s]);
    for (size_t i = 0; i < nctx;) {
        const agg_row_t *r = &p->rows[x->order[i]];
        uint64_t w = 0, c = 0;
        size_t j = i;
        for (; j < nctx && p->rows[x->order[j]].stack == r->stack &&
               p->rows[x->order[j]].context == r->context;
             j++) {
            w += p->rows[x->order[j]].weight;
            c += p->rows[x->order[j]].count;
        }
        i = j;
        if (!w && !c)
            continue;
        Sample *sm = exp_sample(x, r->stack, c, w);
        Label init = PERFTOOLS__PROFILES__LABEL__INIT, *lab = &x->lab[x->nlab];
        lab[0] = lab[1] = init;
        lab[0].key = k_trace;
        lab[0].str = S(x->hex[r->context]);
        lab[1].key = k_span;
        lab[1].str = S(x->hex[r->context] + HEX_SPAN);
        x->labp[x->nlab] = &lab[0];
        x->labp[x->nlab + 1] = &lab[1];
        SET_LIST(sm, label, &x->labp[x->nlab], 2);
        x->nlab += 2;
    }
    return 0;
}
#undef S

/* Serializes the profile and gzips it into *out. */
static int exp_pack(exp_t *x, uint8_t **out, size_t *out_len) {
    Profile *prof = &x->prof;
    SET_LIST(prof, sample, x->smpp, x->ns);
    SET_LIST(prof, mapping, x->mapp, x->nmap);
    SET_LIST(prof, location, x->locp, x->nloc);
    SET_LIST(prof, function, x->fnp, x->nfn);
    SET_LIST(prof, string_table, x->st.s, x->st.n);
    size_t len = perftools__profiles__profile__get_packed_size(prof);
    uint8_t *raw = malloc(len + 1);
    if (!raw)
        return CM_ENOMEM;
    perftools__profiles__profile__pack(prof, raw);
    int rc = gzip_buf(raw, len, out, out_len);
    free(raw);
    return rc;
}

int agg_export_pprof(const agg_profile_t *p, uint8_t **out, size_t *out_len) {
    exp_t x = {.p = p, .prof = PERFTOOLS__PROFILES__PROFILE__INIT};
    int rc;
    if (!(rc = exp_alloc(&x, p)) && !(rc = exp_sample_types(&x)) && !(rc = exp_mappings(&x)) &&
        !(rc = exp_functions(&x))) {
        exp_locations(&x);
        if (!(rc = exp_samples(&x)))
            rc = exp_pack(&x, out, out_len);
    }
    exp_free(&x);
    return rc;
}
