/* Chunk generators for tests and benchmarks. Names look like C++ methods, stacks share root
 * prefixes (built by extending random earlier stacks), sample popularity is Zipf-like, rows are
 * grouped by thread and ordered in time as the agent writes them. */
#include "chunkgen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    void **ptrs;
    size_t n, cap;
} gen_owner_t;

static void *galloc(gen_owner_t *o, size_t size) {
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 64;
        o->ptrs = realloc(o->ptrs, o->cap * sizeof *o->ptrs);
    }
    void *p = calloc(1, size ? size : 1);
    o->ptrs[o->n++] = p;
    return p;
}

uint64_t ts_rand(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
uint64_t ts_randn(uint64_t *s, uint64_t n) { return n ? ts_rand(s) % n : 0; }
static double randu(uint64_t *s) { return (ts_rand(s) >> 11) * (1.0 / 9007199254740992.0); }

ts_gen_params_t ts_gen_realistic(void) {
    return (ts_gen_params_t){.samples = 10000,
                             .stacks = 500,
                             .min_depth = 20,
                             .max_depth = 40,
                             .functions = 600,
                             .threads = 8,
                             .context_frac = 0.2,
                             .contexts = 200,
                             .label_sets = 0,
                             .types_mask = 1u << CM_EV_CPU,
                             .time_unit_ns = 100000,
                             .interval_ns = 10000000000ull,
                             .call_graph = 1};
}

ts_gen_params_t ts_gen_random_params(uint64_t *r) {
    ts_gen_params_t p;
    p.samples = (uint32_t)ts_randn(r, 3) == 0 ? (uint32_t)ts_randn(r, 5) : (uint32_t)ts_randn(r, 3000);
    p.stacks = 1 + (uint32_t)ts_randn(r, 300);
    p.min_depth = (uint32_t)ts_randn(r, 10);
    p.max_depth = p.min_depth + (uint32_t)ts_randn(r, ts_randn(r, 4) == 0 ? CM_MAX_STACK_DEPTH - p.min_depth : 40);
    p.functions = 1 + (uint32_t)ts_randn(r, 500);
    p.threads = 1 + (uint32_t)ts_randn(r, 40);
    p.context_frac = randu(r);
    p.contexts = (uint32_t)ts_randn(r, 100);
    p.label_sets = (uint32_t)ts_randn(r, 10);
    p.types_mask = (uint32_t)ts_randn(r, 1u << CM_EV_COUNT) & ~1u;
    static const uint32_t units[] = {1, 1000, 100000, 1000000};
    p.time_unit_ns = units[ts_randn(r, 4)];
    p.interval_ns = ts_randn(r, 8) == 0 ? 0 : 1 + ts_randn(r, 20000000000ull);
    p.call_graph = (int)ts_randn(r, 2);
    return p;
}

static const char *const words[] = {"Widget", "Parser", "Engine", "Buffer", "Stream",  "Cache",
                                    "Index",  "Query",  "Thread", "Socket", "Session", "Codec",
                                    "handle", "process", "read",  "write",  "encode",  "decode",
                                    "lookup", "insert", "flush",  "run",    "poll",    "send"};
#define NWORDS (sizeof words / sizeof words[0])

/* Keeps only the locations, functions and strings that stacks reference (as an agent's
 * dictionaries hold only what its samples use), renumbering references in order. Runs before
 * labels, threads and sample targets exist, so those reference strings added later. */
static uint32_t *prune_dict(gen_owner_t *o, cm_dict_t *d) {
    uint32_t *lmap = galloc(o, 4 * d->n_locations), *fmap = galloc(o, 4 * d->n_functions);
    uint32_t *smap = galloc(o, 4 * d->n_strings);
    uint32_t nl = 1, nf = 1, ns = 1;
    for (uint32_t i = 0; i < d->stack_off[d->n_stacks]; i++) {
        uint32_t l = d->stack_frames[i];
        if (!lmap[l]) {
            lmap[l] = nl++;
            uint32_t f = d->location_function[l];
            if (f && !fmap[f])
                fmap[f] = nf++;
        }
        d->stack_frames[i] = lmap[l];
    }
    for (uint32_t i = 1; i < d->n_strings; i++) /* keep non-function strings (files, labels) */
        if (i >= d->n_functions)
            smap[i] = 1;
    for (uint32_t f = 1; f < d->n_functions; f++)
        if (fmap[f])
            smap[d->function_name[f]] = 1;
    for (uint32_t i = 1; i < d->n_strings; i++)
        if (smap[i]) {
            d->strings[ns] = d->strings[i];
            smap[i] = ns++;
        }
    uint32_t *lm = galloc(o, 4 * nl), *lf = galloc(o, 4 * nl), *ll = galloc(o, 4 * nl);
    uint64_t *la = galloc(o, 8 * nl);
    for (uint32_t l = 1; l < d->n_locations; l++) {
        uint32_t k = lmap[l];
        if (!k)
            continue;
        lm[k] = d->location_mapping[l];
        lf[k] = fmap[d->location_function[l]];
        ll[k] = d->location_line[l];
        la[k] = d->location_address[l];
    }
    uint32_t *fnm = galloc(o, 4 * nf), *ffl = galloc(o, 4 * nf);
    for (uint32_t f = 1; f < d->n_functions; f++) {
        uint32_t k = fmap[f];
        if (!k)
            continue;
        fnm[k] = smap[d->function_name[f]];
        ffl[k] = smap[d->function_filename[f]];
    }
    for (uint32_t m = 1; m < d->n_mappings; m++)
        d->mappings[m].filename = smap[d->mappings[m].filename];
    d->location_mapping = lm;
    d->location_function = lf;
    d->location_line = ll;
    d->location_address = la;
    d->n_locations = nl;
    d->function_name = fnm;
    d->function_filename = ffl;
    d->n_functions = nf;
    d->n_strings = ns;
    return smap;
}

/* Minor 2: one span per context (up to 2000), named after one of 4 endpoints (the IO targets'
 * strings serve as names), ended inside the interval or active at its end (every 5th). */
static void gen_spans(cm_chunk_t *c, gen_owner_t *o, uint64_t *r, uint32_t name0) {
    cm_spans_t *sp = &c->spans;
    const cm_header_t *h = &c->header;
    uint32_t n = c->dict.n_contexts > 1 ? c->dict.n_contexts - 1 : 0;
    if (n > 2000)
        n = 2000;
    if (n == 0 || name0 + 4 > c->dict.n_strings)
        return;
    sp->n = n;
    sp->context = galloc(o, 4 * n);
    sp->name = galloc(o, 4 * n);
    sp->start_unix_ns = galloc(o, 8 * n);
    sp->duration_ns = galloc(o, 8 * n);
    sp->thread = galloc(o, 4 * n);
    sp->flags = galloc(o, 4 * n);
    uint64_t len = h->end_unix_ns - h->start_unix_ns;
    for (uint32_t i = 0; i < n; i++) {
        sp->context[i] = 1 + i;
        sp->name[i] = name0 + (uint32_t)ts_randn(r, 4);
        sp->thread[i] = (uint32_t)ts_randn(r, c->dict.n_threads);
        sp->flags[i] = i % 5 == 4 ? CM_SPF_ACTIVE : 0;
        uint64_t end = sp->flags[i] ? h->end_unix_ns : h->start_unix_ns + ts_randn(r, len + 1);
        sp->start_unix_ns[i] = end - ts_randn(r, 60000000000ull);
        sp->duration_ns[i] = end - sp->start_unix_ns[i];
    }
}

cm_chunk_t *ts_gen_chunk(const ts_gen_params_t *p, uint64_t seed) {
    uint64_t r = seed * 0x2545F4914F6CDD1Dull + 1;
    gen_owner_t *o = calloc(1, sizeof *o);
    cm_chunk_t *c = galloc(o, sizeof *c);
    c->owner_ = o;
    cm_header_t *h = &c->header;
    cm_dict_t *d = &c->dict;

    /* strings: 0 "", then names; a small pool of file names and label keys/values */
    uint32_t nfn = p->functions ? p->functions : 1;
    uint32_t ns = 1 + nfn + 8 + 2 * (p->label_sets + 1) + 4;
    d->strings = galloc(o, sizeof(cm_str_t) * ns);
    d->strings[0] = (cm_str_t){"", 0};
    uint32_t si = 1;
    for (uint32_t i = 0; i < nfn; i++) {
        char *s = galloc(o, 96);
        int n = snprintf(s, 96, "ns%u::%s%s::%s_%u(int, %s const&)", (unsigned)(i % 7),
                         words[ts_randn(&r, NWORDS)], words[ts_randn(&r, NWORDS)],
                         words[ts_randn(&r, NWORDS)], i, words[ts_randn(&r, NWORDS)]);
        d->strings[si++] = (cm_str_t){s, (uint32_t)n};
    }
    uint32_t file0 = si;
    for (uint32_t i = 0; i < 8; i++) {
        char *s = galloc(o, 64);
        int n = snprintf(s, 64, "/usr/lib/x86_64-linux-gnu/lib%s.so.%u", words[i], i);
        d->strings[si++] = (cm_str_t){s, (uint32_t)n};
    }
    uint32_t lab0 = si;
    for (uint32_t i = 0; i < 2 * (p->label_sets + 1); i++) {
        char *s = galloc(o, 32);
        int n = snprintf(s, 32, i % 2 ? "/api/v%u/%s" : "key%u%s", i, i % 2 ? words[i % NWORDS] : "");
        d->strings[si++] = (cm_str_t){s, (uint32_t)n};
    }
    uint32_t tgt0 = si;
    for (uint32_t i = 0; i < 4; i++) {
        char *s = galloc(o, 48);
        int n = snprintf(s, 48, i % 2 ? "127.0.0.1:%u" : "/var/data/file%u.db", 9000 + i);
        d->strings[si++] = (cm_str_t){s, (uint32_t)n};
    }
    d->n_strings = si;

    d->n_mappings = 9;
    d->mappings = galloc(o, sizeof(cm_mapping_t) * d->n_mappings);
    for (uint32_t i = 1; i < d->n_mappings; i++) {
        uint8_t *bid = galloc(o, 20);
        for (int k = 0; k < 20; k++)
            bid[k] = (uint8_t)ts_rand(&r);
        d->mappings[i] = (cm_mapping_t){0x7f0000000000ull + i * 0x1000000ull,
                                        0x7f0000000000ull + i * 0x1000000ull + 0x800000ull,
                                        0x1000ull * i, file0 + i - 1, bid, 20};
    }

    d->n_functions = nfn + 1;
    d->function_name = galloc(o, 4 * d->n_functions);
    d->function_filename = galloc(o, 4 * d->n_functions);
    for (uint32_t i = 1; i < d->n_functions; i++) {
        d->function_name[i] = i;
        d->function_filename[i] = ts_randn(&r, 3) ? file0 + (uint32_t)ts_randn(&r, 8) : 0;
    }
    /* one location per function, plus a few extra call sites */
    d->n_locations = d->n_functions + d->n_functions / 4;
    d->location_mapping = galloc(o, 4 * d->n_locations);
    d->location_function = galloc(o, 4 * d->n_locations);
    d->location_line = galloc(o, 4 * d->n_locations);
    d->location_address = galloc(o, 8 * d->n_locations);
    for (uint32_t i = 1; i < d->n_locations; i++) {
        uint32_t f = i < d->n_functions ? i : 1 + (uint32_t)ts_randn(&r, nfn);
        d->location_function[i] = f;
        d->location_mapping[i] = 1 + f % 8;
        d->location_address[i] = 0x1000 + 64ull * f + ts_randn(&r, 64);
        d->location_line[i] = (uint32_t)ts_randn(&r, 2000);
    }

    /* stacks. Realistic (p->call_graph): frames follow a call graph in which each location
     * calls 1-6 fixed callees, and a new stack continues an earlier one, diverging a few frames
     * (geometric, mean 5) above its leaf, as distinct stacks of a real service mostly differ
     * near the leaves. Otherwise: frames are uniformly random locations (a pessimistic bound). */
    uint32_t nst = p->stacks + 1;
    d->n_stacks = nst;
    d->stack_off = galloc(o, 4 * (nst + 1));
    d->stack_flags = galloc(o, 4 * nst);
    uint32_t cap = nst * (p->max_depth + 1) + 1;
    d->stack_frames = galloc(o, 4 * cap);
    uint32_t pos = 0, nloc = d->n_locations - 1;
    d->stack_off[0] = d->stack_off[1] = 0;
    for (uint32_t i = 1; i < nst; i++) {
        uint32_t depth = p->min_depth + (uint32_t)ts_randn(&r, p->max_depth - p->min_depth + 1);
        uint32_t keep = 0;
        if (i > 1) {
            uint32_t b = 1 + (uint32_t)ts_randn(&r, i - 1);
            uint32_t bd = d->stack_off[b + 1] - d->stack_off[b];
            uint32_t lim = bd < depth ? bd : depth;
            if (p->call_graph) {
                uint32_t back = 1;
                while (randu(&r) < 0.8)
                    back++;
                keep = back < lim ? lim - back : 0;
            } else {
                keep = (uint32_t)ts_randn(&r, lim + 1);
            }
            memcpy(d->stack_frames + pos, d->stack_frames + d->stack_off[b], 4 * keep);
        }
        for (uint32_t k = keep; k < depth; k++) {
            uint32_t loc;
            if (!p->call_graph)
                loc = 1 + (uint32_t)ts_randn(&r, nloc);
            else if (k == 0)
                loc = 1 + (uint32_t)ts_randn(&r, nloc < 3 ? nloc : 3); /* main, thread roots */
            else {
                uint64_t caller = d->stack_frames[pos + k - 1];
                uint64_t fan = 1 + (caller * 0x9E3779B97F4A7C15ull >> 61) % 6;
                uint64_t hc = (caller * 31 + ts_randn(&r, fan) + 1) * 0xD6E8FEB86659FD93ull;
                loc = 1 + (uint32_t)((hc >> 32) % nloc);
            }
            d->stack_frames[pos + k] = loc;
        }
        pos += depth;
        d->stack_off[i + 1] = pos;
        d->stack_flags[i] = depth >= CM_MAX_STACK_DEPTH ? CM_STF_TRUNCATED : 0;
    }

    uint32_t *smap = prune_dict(o, d); /* strings after the function names keep their order */
    file0 = smap[file0];
    lab0 = smap[lab0];
    tgt0 = smap[tgt0];

    d->n_contexts = p->contexts + 1;
    uint8_t *ctx = galloc(o, (size_t)CM_CONTEXT_SIZE * d->n_contexts);
    for (size_t i = CM_CONTEXT_SIZE; i < (size_t)CM_CONTEXT_SIZE * d->n_contexts; i++)
        ctx[i] = (uint8_t)ts_rand(&r);
    d->contexts = ctx;
    d->n_label_sets = p->label_sets + 1;
    d->label_off = galloc(o, 4 * (d->n_label_sets + 1));
    d->label_kv = galloc(o, 4 * 2 * CM_MAX_LABELS_PER_SET * d->n_label_sets);
    uint32_t lp = 0;
    for (uint32_t i = 0; i < d->n_label_sets; i++) {
        d->label_off[i] = lp;
        uint32_t nl = i ? 1 + (uint32_t)ts_randn(&r, 3) : 0;
        for (uint32_t k = 0; k < nl; k++) {
            d->label_kv[2 * lp] = lab0 + 2 * (uint32_t)ts_randn(&r, p->label_sets + 1);
            d->label_kv[2 * lp + 1] = d->label_kv[2 * lp] + 1;
            lp++;
        }
    }
    d->label_off[d->n_label_sets] = lp;
    d->n_threads = p->threads + 1;
    d->thread_tid = galloc(o, 4 * d->n_threads);
    d->thread_name = galloc(o, 4 * d->n_threads);
    for (uint32_t i = 1; i < d->n_threads; i++) {
        d->thread_tid[i] = 1000 + i * 7;
        d->thread_name[i] = ts_randn(&r, 2) ? file0 : 0;
    }

    uint64_t now = 1790000000000000000ull + ts_randn(&r, 1000000000000ull);
    h->service = (cm_str_t){"checkout-api", 12};
    h->version = (cm_str_t){"v2.3.1", 6};
    h->host = (cm_str_t){"node-17.prod", 12};
    h->agent_version = (cm_str_t){"0.1.0", 5};
    h->pid = 4242;
    h->process_start_unix_ns = now - 3600000000000ull;
    h->time_unit_ns = p->time_unit_ns ? p->time_unit_ns : 1;
    h->start_unix_ns = now - now % h->time_unit_ns;
    h->end_unix_ns = h->start_unix_ns + p->interval_ns;
    for (int i = 0; i < 16; i++)
        h->chunk_id[i] = (uint8_t)ts_rand(&r);
    h->sequence = ts_randn(&r, 1000);
    h->agent_cpu_ns = ts_randn(&r, 100000000);
    h->process_cpu_ns = h->agent_cpu_ns * 100;
    h->work_units = ts_randn(&r, 3) ? ts_randn(&r, 100000) : 0;
    h->n_sampling = 0;
    h->sampling = galloc(o, sizeof(cm_sampling_t) * CM_EV_COUNT);
    h->drops = galloc(o, sizeof(cm_drop_t) * 3);
    h->n_drops = (uint32_t)ts_randn(&r, 4);
    for (uint32_t i = 0; i < h->n_drops; i++)
        h->drops[i] = (cm_drop_t){1 + i, CM_EV_CPU, ts_randn(&r, 1000)};

    uint64_t units = p->interval_ns / h->time_unit_ns;
    for (uint32_t t = 1; t <= CM_EV_MAX; t++) {
        if (!(p->types_mask & (1u << t)))
            continue;
        cm_samples_t *s = &c->samples[t];
        h->sampling[h->n_sampling++] =
            (cm_sampling_t){(cm_event_type_t)t, 10000000, t >= CM_EV_LOCK ? 10000000 : 0, 100,
                            p->samples * 3ull, p->samples};
        uint32_t n = p->samples;
        if (n == 0)
            continue;
        s->type = (cm_event_type_t)t;
        s->n = n;
        s->stack = galloc(o, 4 * n);
        s->time_ns = galloc(o, 8 * n);
        s->weight = galloc(o, 8 * n);
        s->thread = galloc(o, 4 * n);
        s->context = galloc(o, 4 * n);
        s->labels = galloc(o, 4 * n);
        s->flags = galloc(o, 4 * n);
        if (t == CM_EV_ALLOC || t == CM_EV_INUSE || t == CM_EV_LOCK || t == CM_EV_IO)
            s->count = galloc(o, 8 * n);
        if (t == CM_EV_ALLOC || t == CM_EV_IO)
            s->size = galloc(o, 8 * n);
        if (t == CM_EV_LOCK)
            s->address = galloc(o, 8 * n);
        if (t == CM_EV_IO) {
            s->io_kind = galloc(o, 4 * n);
            s->fd_kind = galloc(o, 4 * n);
            s->target = galloc(o, 4 * n);
        }
        /* rows grouped by thread, in time order within a thread */
        uint32_t per = n / (p->threads ? p->threads : 1) + 1;
        uint64_t period = 10000000;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t th = 1 + i / per;
            uint32_t k = i % per;
            uint64_t tu = units ? (uint64_t)((double)units * k / per) + ts_randn(&r, units / per + 1) : 0;
            if (tu > units)
                tu = units;
            /* Zipf-like stack popularity: rank = floor(nst^u) */
            uint32_t rank = (uint32_t)pow((double)(nst - 1), randu(&r) * randu(&r));
            s->stack[i] = 1 + (rank < nst - 1 ? rank : nst - 2);
            s->time_ns[i] = h->start_unix_ns + tu * h->time_unit_ns;
            if (ts_randn(&r, 500) == 0)
                period = 5000000 + ts_randn(&r, 10000000);
            s->weight[i] = t == CM_EV_CPU || t == CM_EV_WALL ? period : 1 + ts_randn(&r, 1u << 20);
            s->thread[i] = th < d->n_threads ? th : d->n_threads - 1;
            s->context[i] = d->n_contexts > 1 && randu(&r) < p->context_frac
                                ? 1 + (uint32_t)ts_randn(&r, d->n_contexts - 1)
                                : 0;
            s->labels[i] = (uint32_t)ts_randn(&r, d->n_label_sets);
            s->flags[i] = t == CM_EV_WALL ? (uint32_t)ts_randn(&r, 2) * CM_SF_ON_CPU : 0;
            if (s->count)
                s->count[i] = CM_COUNT_ONE + ts_randn(&r, 5000);
            if (s->size)
                s->size[i] = ts_randn(&r, 1u << 22);
            if (s->address)
                s->address[i] = 0x7ffd0000 + 64 * ts_randn(&r, 8);
            if (s->io_kind) {
                s->io_kind[i] = 1 + (uint32_t)ts_randn(&r, 6);
                s->fd_kind[i] = 1 + (uint32_t)ts_randn(&r, 4);
                s->target[i] = tgt0 + (uint32_t)ts_randn(&r, 4);
            }
        }
    }
    gen_spans(c, o, &r, tgt0);
    return c;
}

void ts_gen_free(cm_chunk_t *c) {
    if (!c)
        return;
    gen_owner_t *o = c->owner_;
    for (size_t i = o->n; i-- > 0;)
        free(o->ptrs[i]);
    free(o->ptrs);
    free(o);
}

#define DIFF(cond, ...)                                                                            \
    do {                                                                                           \
        if (cond) {                                                                                \
            snprintf(why, why_size, __VA_ARGS__);                                                  \
            return 0;                                                                              \
        }                                                                                          \
    } while (0)

static int str_eq(cm_str_t a, cm_str_t b) {
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}
#define OPT32(p, col, i) ((p)->col ? (p)->col[i] : 0u)

int ts_chunk_equal(const cm_chunk_t *a, const cm_chunk_t *b, char *why, size_t why_size) {
    const cm_header_t *ha = &a->header, *hb = &b->header;
    DIFF(!str_eq(ha->service, hb->service) || !str_eq(ha->version, hb->version) ||
             !str_eq(ha->host, hb->host) || !str_eq(ha->agent_version, hb->agent_version),
         "header strings differ");
    DIFF(ha->pid != hb->pid || ha->process_start_unix_ns != hb->process_start_unix_ns ||
             ha->start_unix_ns != hb->start_unix_ns || ha->end_unix_ns != hb->end_unix_ns ||
             memcmp(ha->chunk_id, hb->chunk_id, 16) || ha->sequence != hb->sequence ||
             ha->agent_cpu_ns != hb->agent_cpu_ns || ha->process_cpu_ns != hb->process_cpu_ns ||
             ha->work_units != hb->work_units ||
             ha->time_unit_ns != hb->time_unit_ns,
         "header numbers differ");
    DIFF(ha->n_sampling != hb->n_sampling || ha->n_drops != hb->n_drops, "header table sizes");
    for (uint32_t i = 0; i < ha->n_sampling; i++)
        DIFF(memcmp(&ha->sampling[i], &hb->sampling[i], sizeof(cm_sampling_t)) &&
                 (ha->sampling[i].type != hb->sampling[i].type ||
                  ha->sampling[i].period != hb->sampling[i].period ||
                  ha->sampling[i].threshold_ns != hb->sampling[i].threshold_ns ||
                  ha->sampling[i].target_per_sec != hb->sampling[i].target_per_sec ||
                  ha->sampling[i].events_seen != hb->sampling[i].events_seen ||
                  ha->sampling[i].samples_kept != hb->sampling[i].samples_kept),
             "sampling[%u] differs", i);
    for (uint32_t i = 0; i < ha->n_drops; i++)
        DIFF(ha->drops[i].reason != hb->drops[i].reason || ha->drops[i].type != hb->drops[i].type ||
                 ha->drops[i].count != hb->drops[i].count,
             "drops[%u] differs", i);
    const cm_dict_t *da = &a->dict, *db = &b->dict;
    DIFF(da->n_strings != db->n_strings, "n_strings %u vs %u", da->n_strings, db->n_strings);
    for (uint32_t i = 0; i < da->n_strings; i++)
        DIFF(!str_eq(da->strings[i], db->strings[i]), "string %u differs", i);
    DIFF(da->n_mappings != db->n_mappings, "n_mappings");
    for (uint32_t i = 0; i < da->n_mappings; i++) {
        const cm_mapping_t *x = &da->mappings[i], *y = &db->mappings[i];
        DIFF(x->start != y->start || x->limit != y->limit || x->file_offset != y->file_offset ||
                 x->filename != y->filename || x->build_id_len != y->build_id_len ||
                 (x->build_id_len && memcmp(x->build_id, y->build_id, x->build_id_len)),
             "mapping %u differs", i);
    }
    DIFF(da->n_functions != db->n_functions || da->n_locations != db->n_locations ||
             da->n_stacks != db->n_stacks || da->n_contexts != db->n_contexts ||
             da->n_label_sets != db->n_label_sets || da->n_threads != db->n_threads,
         "dictionary sizes differ");
    for (uint32_t i = 0; i < da->n_functions; i++)
        DIFF(da->function_name[i] != db->function_name[i] ||
                 OPT32(da, function_system_name, i) != OPT32(db, function_system_name, i) ||
                 OPT32(da, function_filename, i) != OPT32(db, function_filename, i),
             "function %u differs", i);
    for (uint32_t i = 0; i < da->n_locations; i++)
        DIFF(da->location_mapping[i] != db->location_mapping[i] ||
                 da->location_function[i] != db->location_function[i] ||
                 da->location_address[i] != db->location_address[i] ||
                 OPT32(da, location_line, i) != OPT32(db, location_line, i),
             "location %u differs", i);
    for (uint32_t i = 0; i < da->n_stacks; i++) {
        uint32_t la = cm_stack_depth(da, i), lb = cm_stack_depth(db, i);
        DIFF(la != lb || memcmp(da->stack_frames + da->stack_off[i],
                                db->stack_frames + db->stack_off[i], 4 * (size_t)la) ||
                 OPT32(da, stack_flags, i) != OPT32(db, stack_flags, i),
             "stack %u differs", i);
    }
    DIFF(memcmp(da->contexts, db->contexts, (size_t)CM_CONTEXT_SIZE * da->n_contexts),
         "contexts differ");
    for (uint32_t i = 0; i <= da->n_label_sets; i++)
        DIFF(da->label_off[i] != db->label_off[i], "label set %u differs", i);
    for (uint32_t i = 0; i < 2 * da->label_off[da->n_label_sets]; i++)
        DIFF(da->label_kv[i] != db->label_kv[i], "label kv %u differs", i);
    for (uint32_t i = 0; i < da->n_threads; i++)
        DIFF(da->thread_tid[i] != db->thread_tid[i] ||
                 OPT32(da, thread_name, i) != OPT32(db, thread_name, i),
             "thread %u differs", i);
    for (uint32_t t = 1; t <= CM_EV_MAX; t++) {
        const cm_samples_t *x = &a->samples[t], *y = &b->samples[t];
        DIFF(x->n != y->n, "samples[%s]: %u vs %u rows", cm_event_name(t), x->n, y->n);
        for (uint32_t i = 0; i < x->n; i++) {
            DIFF(x->stack[i] != y->stack[i] || x->time_ns[i] != y->time_ns[i] ||
                     x->weight[i] != y->weight[i] ||
                     cm_samples_count(x, i) != cm_samples_count(y, i) ||
                     OPT32(x, thread, i) != OPT32(y, thread, i) ||
                     OPT32(x, context, i) != OPT32(y, context, i) ||
                     OPT32(x, labels, i) != OPT32(y, labels, i) ||
                     OPT32(x, flags, i) != OPT32(y, flags, i) ||
                     CM_COL(x, size, i) != CM_COL(y, size, i) ||
                     CM_COL(x, address, i) != CM_COL(y, address, i) ||
                     OPT32(x, io_kind, i) != OPT32(y, io_kind, i) ||
                     OPT32(x, fd_kind, i) != OPT32(y, fd_kind, i) ||
                     OPT32(x, target, i) != OPT32(y, target, i),
                 "samples[%s] row %u differs", cm_event_name(t), i);
        }
    }
    const cm_spans_t *sa = &a->spans, *sb = &b->spans;
    DIFF(sa->n != sb->n, "spans: %u vs %u rows", sa->n, sb->n);
    for (uint32_t i = 0; i < sa->n; i++)
        DIFF(sa->context[i] != sb->context[i] || sa->name[i] != sb->name[i] ||
                 sa->start_unix_ns[i] != sb->start_unix_ns[i] ||
                 sa->duration_ns[i] != sb->duration_ns[i] || sa->thread[i] != sb->thread[i] ||
                 OPT32(sa, flags, i) != OPT32(sb, flags, i),
             "spans row %u differs", i);
    return 1;
}
