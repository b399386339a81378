/* KPM sums of one chunk (kpm.h). The CPU samples are split by the categories of the insight
 * rules (agg_insight_categories, aggregator/query/insights/insights.c): a sample is in the allocator
 * or in exception unwinding when a frame of its stack is, in memory copying or in the kernel
 * when its leaf frame is a copy routine or a system call wrapper, in the agent when a frame is
 * in libfleetprof. A function's categories are cached per thread by the hash of its name
 * (65,536 direct-mapped slots: RE2 runs once per name, not per chunk).
 * Threading: consume thread. */
#include "kpm.h"

#include "insights.h"
#include "intern.h"

#include "cm/error.h"

#include <stdlib.h>
#include <string.h>

#define CAT_SLOTS 65536
static _Thread_local struct {
    uint64_t key;
    uint32_t mask; /* categories + 1u << 31 (a filled slot) */
} *tl_cats;

static uint32_t fn_categories(const char *name) {
    if (!tl_cats && !(tl_cats = calloc(CAT_SLOTS, sizeof *tl_cats)))
        return agg_insight_categories(name);
    uint64_t k = agg_intern_string_id(name, strlen(name));
    size_t i = (size_t)(k & (CAT_SLOTS - 1));
    if (tl_cats[i].key != k || !tl_cats[i].mask) {
        tl_cats[i].key = k;
        tl_cats[i].mask = agg_insight_categories(name) | 1u << 31;
    }
    return tl_cats[i].mask;
}

enum { K_ALLOC = 1, K_EXCEPT = 2, K_COPY = 4, K_KERNEL = 8, K_AGENT = 16, K_DONE = 32 };

static int in_agent(const cm_dict_t *d, uint32_t loc) {
    uint32_t m = loc < d->n_locations ? d->location_mapping[loc] : 0;
    if (!m || m >= d->n_mappings || !d->mappings[m].filename)
        return 0;
    const char *f = d->strings[d->mappings[m].filename].ptr, *s = strrchr(f, '/');
    return !strncmp(s ? s + 1 : f, "libfleetprof", 12);
}

static uint32_t loc_categories(const cm_dict_t *d, uint32_t loc) {
    uint32_t f = loc < d->n_locations ? d->location_function[loc] : 0;
    if (!f || f >= d->n_functions || !d->function_name[f])
        return 0;
    return fn_categories(d->strings[d->function_name[f]].ptr);
}

/* The K_* bits of stack st. */
static uint32_t stack_kind(const cm_dict_t *d, uint32_t st) {
    uint32_t k = 0, lo = d->stack_off[st], hi = d->stack_off[st + 1];
    for (uint32_t i = lo; i < hi; i++) {
        uint32_t loc = d->stack_frames[i], m = loc_categories(d, loc);
        if (m & AGG_INSIGHT_CAT_ALLOC)
            k |= K_ALLOC;
        if (m & AGG_INSIGHT_CAT_EXCEPT)
            k |= K_EXCEPT;
        if (i == hi - 1 && (m & AGG_INSIGHT_CAT_COPY))
            k |= K_COPY;
        if (i == hi - 1 && (m & AGG_INSIGHT_CAT_KERNEL))
            k |= K_KERNEL;
        if (in_agent(d, loc))
            k |= K_AGENT;
    }
    return k | K_DONE;
}

static int cpu_split(const cm_chunk_t *c, agg_kpm_ent_t *e) {
    const cm_samples_t *s = &c->samples[CM_EV_CPU];
    const cm_dict_t *d = &c->dict;
    uint8_t *kind = calloc((size_t)d->n_stacks + 1, 1);
    if (!kind)
        return CM_ENOMEM;
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t st = s->stack[i];
        if (st >= d->n_stacks)
            continue;
        if (!kind[st])
            kind[st] = (uint8_t)stack_kind(d, st);
        int64_t w = (int64_t)s->weight[i];
        e->cpu_sampled_ns += w;
        e->cpu_alloc_ns += kind[st] & K_ALLOC ? w : 0;
        e->cpu_unwind_ns += kind[st] & K_EXCEPT ? w : 0;
        e->cpu_copy_ns += kind[st] & K_COPY ? w : 0;
        e->cpu_kernel_ns += kind[st] & K_KERNEL ? w : 0;
        e->cpu_agent_ns += kind[st] & K_AGENT ? w : 0;
    }
    free(kind);
    return 0;
}

static void sums(const cm_samples_t *s, int64_t *weight, int64_t *count, int64_t *size) {
    for (uint32_t i = 0; i < s->n; i++) {
        *weight += (int64_t)s->weight[i];
        if (count)
            *count += (int64_t)cm_samples_count(s, i);
        if (size)
            *size += (int64_t)CM_COL(s, size, i);
    }
}

int agg_kpm_chunk(agg_batch_t *b, const cm_chunk_t *c, uint64_t service, uint64_t version,
                  uint64_t width, uint64_t bucket) {
    const cm_header_t *h = &c->header;
    agg_kpm_key_t k = {service, version, width, bucket,
                       agg_intern_string_id(h->host.ptr ? h->host.ptr : "", h->host.len),
                       h->pid};
    agg_kpm_ent_t *e = agg_hmap_upsert(&b->kpm, &k, NULL);
    if (!e)
        return CM_ENOMEM;
    e->chunks++;
    e->duration_ns += h->end_unix_ns > h->start_unix_ns
                          ? (int64_t)(h->end_unix_ns - h->start_unix_ns) : 0;
    e->cpu_ns += (int64_t)h->process_cpu_ns;
    e->agent_cpu_ns += (int64_t)h->agent_cpu_ns;
    e->threads += c->dict.n_threads;
    for (uint32_t i = 0; i < h->n_drops; i++)
        if (agg_insight_drop_counts(h->drops[i].reason))
            e->dropped += (int64_t)h->drops[i].count;
    sums(&c->samples[CM_EV_ALLOC], &e->alloc_bytes, &e->alloc_count, NULL);
    sums(&c->samples[CM_EV_INUSE], &e->inuse_bytes, NULL, NULL);
    sums(&c->samples[CM_EV_LOCK], &e->lock_wait_ns, &e->lock_count, NULL);
    sums(&c->samples[CM_EV_IO], &e->io_wait_ns, &e->io_count, &e->io_bytes);
    return cpu_split(c, e);
}
