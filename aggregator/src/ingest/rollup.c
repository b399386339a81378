/* Rollup of one chunk into batch deltas (see rollup.h).
 *
 * Replicate statistics: for every event type present in a chunk, with T the chunk's total
 * weight of that type, each function f gets x_incl = (weight of the stacks containing f,
 * recursion counted once) / T and x_self = (weight of the stacks whose leaf is f) / T; the batch
 * adds x and x^2 per (service, version, type, coarse bucket of the chunk start, function):
 * replicates are kept at the coarse width (1 h by default) because a diff compares versions
 * over hours, and per-fine-bucket rows would cost as much as the profiles themselves. Functions
 * absent from a chunk contribute x = 0, so with n = the number of chunks (totals.chunks), the
 * per-version mean and variance of a function's share follow: the chunk is the replicate of a
 * Welch test in a diff (REFERENCE.md, "Comparing two profiles").
 *
 * Threading: consume thread only. */
#include "rollup.h"
#include "kpm.h"
#include "spanindex.h"

#include "cm/array.h"
#include "cm/error.h"

#include <stdlib.h>
#include <string.h>

void agg_rollup_init(agg_rollup_t *r, const agg_rollup_cfg_t *cfg) {
    memset(r, 0, sizeof *r);
    r->cfg = *cfg;
    if (r->cfg.fine_width_s <= 0)
        r->cfg.fine_width_s = 10;
    if (r->cfg.coarse_width_s <= 0)
        r->cfg.coarse_width_s = 3600;
    /* replicate width: a multiple of the fine width dividing the coarse one, else the fine one */
    int64_t rw = r->cfg.replicate_width_s;
    if (rw <= 0 || rw % r->cfg.fine_width_s || r->cfg.coarse_width_s % rw)
        r->cfg.replicate_width_s = r->cfg.fine_width_s;
}

void agg_rollup_free(agg_rollup_t *r) {
    free(r->stack_w);
    free(r->stack_seen);
    free(r->fn_incl);
    free(r->fn_self);
    free(r->fn_stamp);
    free(r->fn_touch);
    free(r->touched_stacks);
    free(r->touched_fns);
    memset(r, 0, sizeof *r);
}

static int ensure(agg_rollup_t *r, size_t nstacks, size_t nfns) {
    if (nstacks > r->stack_cap) {
        if (CM_RESIZE(&r->stack_w, nstacks) || CM_RESIZE(&r->stack_seen, nstacks) ||
            CM_RESIZE(&r->touched_stacks, nstacks))
            return CM_ENOMEM;
        memset(r->stack_seen, 0, nstacks * 4);
        r->stack_cap = nstacks;
        r->gen = 0;
    }
    if (nfns > r->fn_cap) {
        if (CM_RESIZE(&r->fn_incl, nfns) || CM_RESIZE(&r->fn_self, nfns) ||
            CM_RESIZE(&r->fn_stamp, nfns) || CM_RESIZE(&r->fn_touch, nfns) ||
            CM_RESIZE(&r->touched_fns, nfns))
            return CM_ENOMEM;
        memset(r->fn_stamp, 0, nfns * 4);
        memset(r->fn_touch, 0, nfns * 4);
        r->fn_cap = nfns;
        r->gen = 0;
    }
    if (r->gen > 0xF0000000u) {
        memset(r->stack_seen, 0, r->stack_cap * 4);
        memset(r->fn_stamp, 0, r->fn_cap * 4);
        memset(r->fn_touch, 0, r->fn_cap * 4);
        r->gen = 0;
    }
    return 0;
}

static inline void prof_add(agg_prof_ent_t *pe, int64_t w, int64_t cnt, uint64_t tag) {
    pe->weight += w;
    pe->count += cnt;
    pe->rows++;
    if (pe->last_chunk != tag) {
        pe->last_chunk = tag;
        pe->chunks++;
    }
}

static uint64_t bucket_of(uint64_t t_ns, int64_t width_s) {
    uint64_t s = t_ns / 1000000000ull;
    return s - s % (uint64_t)width_s;
}

/* Function shares of one chunk and type, from the per-stack weights gathered by the caller. */
static int fn_stats(agg_rollup_t *r, agg_batch_t *b, const cm_chunk_t *c,
                    const agg_chunk_ids_t *ids, uint32_t type, uint32_t nstacks, int64_t total,
                    uint64_t bucket) {
    const cm_dict_t *d = &c->dict;
    uint32_t touch_gen = ++r->gen, nf = 0;
    for (uint32_t k = 0; k < nstacks; k++) {
        uint32_t s = r->touched_stacks[k];
        int64_t w = r->stack_w[s];
        uint32_t stamp = ++r->gen, lo = d->stack_off[s], hi = d->stack_off[s + 1];
        for (uint32_t j = lo; j < hi; j++) {
            uint32_t f = d->location_function[d->stack_frames[j]];
            if (!f)
                continue;
            if (r->fn_touch[f] != touch_gen) {
                r->fn_touch[f] = touch_gen;
                r->fn_incl[f] = r->fn_self[f] = 0;
                r->touched_fns[nf++] = f;
            }
            if (r->fn_stamp[f] != stamp) {
                r->fn_stamp[f] = stamp;
                r->fn_incl[f] += w;
            }
        }
        if (hi > lo) {
            uint32_t leaf = d->location_function[d->stack_frames[hi - 1]];
            if (leaf)
                r->fn_self[leaf] += w;
        }
    }
    double inv = 1.0 / (double)total;
    for (uint32_t k = 0; k < nf; k++) {
        uint32_t f = r->touched_fns[k];
        agg_fn_key_t key = {ids->service, ids->version, type, (uint64_t)r->cfg.coarse_width_s,
                            bucket, ids->fn[f]};
        agg_fn_ent_t *e = agg_hmap_upsert(&b->fn, &key, NULL);
        if (!e)
            return CM_ENOMEM;
        double xi = (double)r->fn_incl[f] * inv, xs = (double)r->fn_self[f] * inv;
        e->chunks++;
        e->incl += xi;
        e->incl2 += xi * xi;
        e->self += xs;
        e->self2 += xs * xs;
    }
    return 0;
}

/* The samples of one event type t of chunk c: profile and totals deltas per fine bucket, the
 * span index, the per-function statistics. */
static int rollup_type(agg_rollup_t *r, agg_batch_t *b, const cm_chunk_t *c,
                       const agg_chunk_ids_t *ids, uint32_t t, uint64_t tag) {
    const cm_dict_t *d = &c->dict;
    const cm_samples_t *s = &c->samples[t];
    uint64_t width = (uint64_t)r->cfg.fine_width_s;
    uint32_t stack_gen = ++r->gen, nstacks = 0;
    int64_t total = 0;
    agg_tot_ent_t *te = NULL;
    uint64_t te_bucket = UINT64_MAX;
    int rc;
    for (uint32_t i = 0; i < s->n; i++) {
        uint64_t bucket = bucket_of(s->time_ns[i], r->cfg.fine_width_s);
        uint32_t st = s->stack[i];
        int64_t w = (int64_t)s->weight[i], cnt = (int64_t)cm_samples_count(s, i);
        uint64_t base = s->labels ? ids->labels[s->labels[i]] : 0;
        uint64_t lab = ids->row_labels && ids->row_labels[t] ? ids->row_labels[t][i] : base;
        agg_prof_key_t pk = {ids->service, ids->version, t, width, bucket, lab, ids->stack[st]};
        agg_prof_ent_t *pe = agg_hmap_upsert(&b->prof, &pk, NULL);
        if (!pe)
            return CM_ENOMEM;
        if (!pe->rows) { /* new: its leaf and base labels, for agg_batch_derive */
            pe->leaf = d->stack_off[st + 1] > d->stack_off[st]
                           ? ids->loc[d->stack_frames[d->stack_off[st + 1] - 1]]
                           : 0;
            pe->base = base;
        }
        prof_add(pe, w, cnt, tag);
        if (bucket != te_bucket) { /* rows are mostly in time order: reuse the entry */
            agg_tot_key_t tk = {ids->service, ids->version, t, width, bucket};
            te = agg_hmap_upsert(&b->tot, &tk, NULL);
            if (!te)
                return CM_ENOMEM;
            te_bucket = bucket;
            if (te->last_chunk != tag) {
                te->last_chunk = tag;
                te->chunks++;
            }
        }
        te->weight += w;
        te->count += cnt;
        te->rows++;
        total += w;
        if (r->stack_seen[st] != stack_gen) {
            r->stack_seen[st] = stack_gen;
            r->stack_w[st] = 0;
            r->touched_stacks[nstacks++] = st;
        }
        r->stack_w[st] += w;
        if (r->cfg.span_index && s->context && s->context[i] &&
            (rc = agg_spanindex_row(b, c, ids, s, i)))
            return rc;
    }
    if (r->cfg.fn_stats && total > 0 &&
        (rc = fn_stats(r, b, c, ids, t, nstacks, total,
                       bucket_of(c->header.start_unix_ns, r->cfg.coarse_width_s))))
        return rc;
    return 0;
}

/* The chunk's interval: chunk count, CPU figures and drops in its start bucket, its wall time
 * and units of work spread over the fine buckets it overlaps. */
static int rollup_interval(agg_rollup_t *r, agg_batch_t *b, const cm_header_t *h,
                           const agg_chunk_ids_t *ids) {
    uint64_t width = (uint64_t)r->cfg.fine_width_s;
    uint64_t cbucket = bucket_of(h->start_unix_ns, r->cfg.fine_width_s);
    agg_ival_key_t ik = {ids->service, ids->version, width, cbucket};
    agg_ival_ent_t *ie = agg_hmap_upsert(&b->ival, &ik, NULL);
    if (!ie)
        return CM_ENOMEM;
    ie->chunks++;
    ie->agent_cpu_ns += (int64_t)h->agent_cpu_ns;
    ie->process_cpu_ns += (int64_t)h->process_cpu_ns;
    for (uint32_t i = 0; i < h->n_drops; i++) {
        ie->dropped += (int64_t)h->drops[i].count;
        agg_drop_key_t dk = {ids->service, ids->version, width, cbucket, h->drops[i].reason,
                             h->drops[i].type};
        agg_drop_ent_t *de = agg_hmap_upsert(&b->drop, &dk, NULL);
        if (!de)
            return CM_ENOMEM;
        de->count += (int64_t)h->drops[i].count;
    }
    /* The chunk's wall time (the work the diff normalises by) goes to the fine buckets it
     * overlaps, pro rata, as its samples go to the buckets of their own times: per-bucket
     * process-seconds then match the samples each bucket holds, also for the partial buckets
     * where a process starts or stops. (Chunk count and CPU figures stay with the start bucket.)
     * A chunk spanning more than 64 buckets (a clock jump) stays in its start bucket. */
    uint64_t t0 = h->start_unix_ns, t1 = h->end_unix_ns > t0 ? h->end_unix_ns : t0;
    uint64_t wns = width * 1000000000ull;
    if (t1 - t0 > 64 * wns || t1 == t0) {
        agg_ival_ent_t *e0 = agg_hmap_upsert(&b->ival, &ik, NULL);
        if (!e0)
            return CM_ENOMEM;
        e0->duration_ns += (int64_t)(t1 - t0);
        e0->work_units += (int64_t)h->work_units;
        return 0;
    }
    /* units of work pro rata too: the cumulative share rounded down, so the pieces sum to the
     * chunk's count exactly */
    unsigned __int128 units = h->work_units, dur = t1 - t0;
    uint64_t given = 0;
    for (uint64_t t = t0; t < t1;) {
        uint64_t bk = bucket_of(t, r->cfg.fine_width_s);
        uint64_t end = (bk + width) * 1000000000ull;
        end = end < t1 ? end : t1;
        agg_ival_key_t k2 = {ids->service, ids->version, width, bk};
        agg_ival_ent_t *e2 = agg_hmap_upsert(&b->ival, &k2, NULL);
        if (!e2)
            return CM_ENOMEM;
        e2->duration_ns += (int64_t)(end - t);
        uint64_t upto = (uint64_t)(units * (end - t0) / dur);
        e2->work_units += (int64_t)(upto - given);
        given = upto;
        t = end > t ? end : t1;
    }
    return 0;
}

int agg_rollup_chunk(agg_rollup_t *r, agg_batch_t *b, const cm_chunk_t *c,
                     const agg_chunk_ids_t *ids) {
    const cm_header_t *h = &c->header;
    const cm_dict_t *d = &c->dict;
    uint64_t tag = ++b->chunk_tag;
    /* tiers of the per-stack rollup: 1 min and 10 min where they fit between the fine and the
     * coarse width, then the coarse width */
    static const int64_t mid[] = {60, 600};
    b->n_tiers = 0;
    for (size_t i = 0; i < sizeof mid / sizeof mid[0]; i++)
        if (mid[i] > r->cfg.fine_width_s && mid[i] % r->cfg.fine_width_s == 0 &&
            mid[i] < r->cfg.coarse_width_s && r->cfg.coarse_width_s % mid[i] == 0)
            b->tiers[b->n_tiers++] = mid[i];
    b->tiers[b->n_tiers++] = r->cfg.coarse_width_s;
    b->replicate_width = r->cfg.replicate_width_s;
    int64_t rows_all = 0;
    int rc = ensure(r, d->n_stacks + 1, d->n_functions + 1);
    if (rc)
        return rc;
    for (uint32_t t = 1; t <= CM_EV_MAX; t++) {
        if (!c->samples[t].n)
            continue;
        if ((rc = rollup_type(r, b, c, ids, t, tag)))
            return rc;
        rows_all += c->samples[t].n;
    }
    if (r->cfg.span_index && (rc = agg_spanindex_requests(b, c, ids)))
        return rc;
    if ((rc = rollup_interval(r, b, h, ids)))
        return rc;
    if ((rc = agg_kpm_chunk(b, c, ids->service, ids->version, (uint64_t)r->cfg.fine_width_s,
                            bucket_of(h->start_unix_ns, r->cfg.fine_width_s))))
        return rc;
    agg_ver_key_t vk = {ids->service, ids->version};
    int fresh;
    agg_ver_ent_t *ve = agg_hmap_upsert(&b->ver, &vk, &fresh);
    if (!ve)
        return CM_ENOMEM;
    if (fresh || (int64_t)h->start_unix_ns < ve->first_ns)
        ve->first_ns = (int64_t)h->start_unix_ns;
    if (fresh || (int64_t)h->end_unix_ns > ve->last_ns)
        ve->last_ns = (int64_t)h->end_unix_ns;
    ve->chunks++;
    ve->rows += rows_all;
    b->chunks++;
    b->samples += (uint64_t)rows_all;
    return 0;
}
