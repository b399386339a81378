/* The batch as rows of the store's tables (batch.h): which map or vector of agg_batch_t fills
 * which table, each column from which field, in the order the store writes them (dictionaries
 * first, then the rollups, whose tiers are derived once the dictionaries are in; the chunk ids
 * last). Maps are written in key order: B-tree inserts in key order touch each page once, and
 * concurrent PostgreSQL writers take row locks in one order.
 * Threading: constant. */
#include "batch.h"

#include <stddef.h>
#include <stdlib.h>

#define I(T, f) {AGG_BC_I64, offsetof(T, f), 0}
#define F(T, f) {AGG_BC_F64, offsetof(T, f), 0}
#define VEC(m, T) offsetof(agg_batch_t, m), sizeof(T), 0, 0, 0
#define MAP(m, nblob, nint) offsetof(agg_batch_t, m), 0, nblob, nint, 0
/* a vector whose rows flag the keys new to the store (agg_btable_t.fresh_off) */
#define VEC_FRESH(m, T, f) offsetof(agg_batch_t, m), sizeof(T), 0, 0, offsetof(T, f)
/* profile, profile_coarse and profile_leaf (whose `stack` holds the leaf's location id) */
#define PROF_COLS                                                                                  \
    {I(agg_prof_ent_t, k.service), I(agg_prof_ent_t, k.version), I(agg_prof_ent_t, k.type),        \
     I(agg_prof_ent_t, k.width), I(agg_prof_ent_t, k.bucket), I(agg_prof_ent_t, k.labels),         \
     I(agg_prof_ent_t, k.stack), I(agg_prof_ent_t, weight), I(agg_prof_ent_t, count),              \
     I(agg_prof_ent_t, rows), I(agg_prof_ent_t, chunks)}
#define SPAN_W(t) {AGG_BC_I64, offsetof(agg_span_ent_t, weight) + 8 * (t), 0}

const agg_btable_t agg_batch_tables[] = {
    {"strings", VEC(strs, agg_new_str_t), 0, 2,
     {I(agg_new_str_t, id),
      {AGG_BC_ARENA, offsetof(agg_new_str_t, off), offsetof(agg_new_str_t, len)}}},
    {"mappings", VEC(maps, agg_new_map_t), 0, 3,
     {I(agg_new_map_t, id), I(agg_new_map_t, filename),
      {AGG_BC_VAR, offsetof(agg_new_map_t, build_id), offsetof(agg_new_map_t, build_id_len)}}},
    {"functions", VEC(fns, agg_new_fn_t), 0, 4,
     {I(agg_new_fn_t, id), I(agg_new_fn_t, name), I(agg_new_fn_t, system_name),
      I(agg_new_fn_t, filename)}},
    {"locations", VEC(locs, agg_new_loc_t), 0, 5,
     {I(agg_new_loc_t, id), I(agg_new_loc_t, function), I(agg_new_loc_t, mapping),
      I(agg_new_loc_t, address), I(agg_new_loc_t, line)}},
    {"stacks", VEC(stacks, agg_new_stack_t), 0, 4,
     {I(agg_new_stack_t, id), I(agg_new_stack_t, parent), I(agg_new_stack_t, location),
      I(agg_new_stack_t, depth)}},
    {"labelsets", VEC(labelsets, uint64_t), 0, 1, {{AGG_BC_I64, 0, 0}}},
    {"labels", VEC_FRESH(labels, agg_new_label_t, fresh), 0, 3,
     {I(agg_new_label_t, key), I(agg_new_label_t, value), I(agg_new_label_t, set)}},
    {"labelset_base", VEC(labelbase, agg_new_label_t), 0, 2,
     {I(agg_new_label_t, set), I(agg_new_label_t, value)}},
    {"profile", MAP(prof, 0, 7), 1, 11,
     PROF_COLS},
    {"profile_coarse", MAP(profc, 0, 7), 0, 11,
     PROF_COLS},
    {"profile_leaf", MAP(leaf, 0, 7), 0, 11,
     PROF_COLS},
    {"totals", MAP(tot, 0, 5), 0, 9,
     {I(agg_tot_ent_t, k.service), I(agg_tot_ent_t, k.version), I(agg_tot_ent_t, k.type),
      I(agg_tot_ent_t, k.width), I(agg_tot_ent_t, k.bucket), I(agg_tot_ent_t, weight),
      I(agg_tot_ent_t, count), I(agg_tot_ent_t, rows), I(agg_tot_ent_t, chunks)}},
    {"intervals", MAP(ival, 0, 4), 0, 10,
     {I(agg_ival_ent_t, k.service), I(agg_ival_ent_t, k.version), I(agg_ival_ent_t, k.width),
      I(agg_ival_ent_t, k.bucket), I(agg_ival_ent_t, chunks), I(agg_ival_ent_t, duration_ns),
      I(agg_ival_ent_t, agent_cpu_ns), I(agg_ival_ent_t, process_cpu_ns),
      I(agg_ival_ent_t, dropped), I(agg_ival_ent_t, work_units)}},
    {"drops", MAP(drop, 0, 6), 0, 7,
     {I(agg_drop_ent_t, k.service), I(agg_drop_ent_t, k.version), I(agg_drop_ent_t, k.width),
      I(agg_drop_ent_t, k.bucket), I(agg_drop_ent_t, k.reason), I(agg_drop_ent_t, k.type),
      I(agg_drop_ent_t, count)}},
    {"kpm", MAP(kpm, 0, 6), 0, 26,
     {I(agg_kpm_ent_t, k.service), I(agg_kpm_ent_t, k.version), I(agg_kpm_ent_t, k.width),
      I(agg_kpm_ent_t, k.bucket), I(agg_kpm_ent_t, k.host), I(agg_kpm_ent_t, k.pid),
      I(agg_kpm_ent_t, chunks), I(agg_kpm_ent_t, duration_ns), I(agg_kpm_ent_t, cpu_ns),
      I(agg_kpm_ent_t, agent_cpu_ns), I(agg_kpm_ent_t, cpu_sampled_ns),
      I(agg_kpm_ent_t, cpu_alloc_ns), I(agg_kpm_ent_t, cpu_kernel_ns),
      I(agg_kpm_ent_t, cpu_copy_ns), I(agg_kpm_ent_t, cpu_unwind_ns),
      I(agg_kpm_ent_t, cpu_agent_ns), I(agg_kpm_ent_t, alloc_bytes),
      I(agg_kpm_ent_t, alloc_count), I(agg_kpm_ent_t, inuse_bytes),
      I(agg_kpm_ent_t, lock_wait_ns), I(agg_kpm_ent_t, lock_count), I(agg_kpm_ent_t, io_wait_ns),
      I(agg_kpm_ent_t, io_bytes), I(agg_kpm_ent_t, io_count), I(agg_kpm_ent_t, threads),
      I(agg_kpm_ent_t, dropped)}},
    {"versions", MAP(ver, 0, 2), 0, 6,
     {I(agg_ver_ent_t, k.service), I(agg_ver_ent_t, k.version), I(agg_ver_ent_t, first_ns),
      I(agg_ver_ent_t, last_ns), I(agg_ver_ent_t, chunks), I(agg_ver_ent_t, rows)}},
    {"fn_stats", MAP(fn, 0, 6), 0, 11,
     {I(agg_fn_ent_t, k.service), I(agg_fn_ent_t, k.version), I(agg_fn_ent_t, k.type),
      I(agg_fn_ent_t, k.width), I(agg_fn_ent_t, k.bucket), I(agg_fn_ent_t, k.function),
      I(agg_fn_ent_t, chunks), F(agg_fn_ent_t, incl), F(agg_fn_ent_t, incl2),
      F(agg_fn_ent_t, self), F(agg_fn_ent_t, self2)}},
    /* the weights per event type: cpu, wall, alloc, inuse, lock, io (CM_EV_CPU..CM_EV_MAX) */
    {"spans", MAP(span, 24, 0), 0, 13,
     {{AGG_BC_BYTES, offsetof(agg_span_ent_t, k.trace), 16},
      {AGG_BC_BYTES, offsetof(agg_span_ent_t, k.span), 8}, I(agg_span_ent_t, service),
      I(agg_span_ent_t, version), I(agg_span_ent_t, first_ns), I(agg_span_ent_t, last_ns),
      SPAN_W(1), SPAN_W(2), SPAN_W(3), SPAN_W(4), SPAN_W(5), SPAN_W(6),
      I(agg_span_ent_t, rows)}},
    {"span_stacks", MAP(spanstk, 24, 2), 0, 7,
     {{AGG_BC_BYTES, offsetof(agg_spanstk_ent_t, k.trace), 16},
      {AGG_BC_BYTES, offsetof(agg_spanstk_ent_t, k.span), 8}, I(agg_spanstk_ent_t, k.type),
      I(agg_spanstk_ent_t, k.stack), I(agg_spanstk_ent_t, weight),
      I(agg_spanstk_ent_t, count), I(agg_spanstk_ent_t, rows)}},
    {"requests", MAP(req, 24, 0), 0, 9,
     {{AGG_BC_BYTES, offsetof(agg_req_ent_t, k.trace), 16},
      {AGG_BC_BYTES, offsetof(agg_req_ent_t, k.span), 8}, I(agg_req_ent_t, service),
      I(agg_req_ent_t, version), I(agg_req_ent_t, name), I(agg_req_ent_t, start_ns),
      I(agg_req_ent_t, end_ns), I(agg_req_ent_t, ended), I(agg_req_ent_t, tid)}},
    {"incidents", MAP(inc, CM_INCIDENT_ID_LEN, 0), 0, 13,
     {{AGG_BC_BYTES, offsetof(agg_inc_ent_t, k.id), CM_INCIDENT_ID_LEN},
      I(agg_inc_ent_t, service), I(agg_inc_ent_t, version), I(agg_inc_ent_t, host),
      I(agg_inc_ent_t, pid), I(agg_inc_ent_t, trigger), I(agg_inc_ent_t, threshold),
      I(agg_inc_ent_t, value), I(agg_inc_ent_t, trigger_ns), I(agg_inc_ent_t, start_ns),
      I(agg_inc_ent_t, end_ns), I(agg_inc_ent_t, parts), I(agg_inc_ent_t, chunks)}},
    {"incident_chunks", MAP(incchunk, CM_INCIDENT_ID_LEN, 1), 0, 3,
     {{AGG_BC_BYTES, offsetof(agg_incchunk_ent_t, k.id), CM_INCIDENT_ID_LEN},
      I(agg_incchunk_ent_t, k.part),
      {AGG_BC_ARENA, offsetof(agg_incchunk_ent_t, off), offsetof(agg_incchunk_ent_t, len)}}},
    {"rejects", MAP(rej, 0, 0), 0, 2,
     {{AGG_BC_CSTR, offsetof(agg_rej_ent_t, k.reason), 0}, I(agg_rej_ent_t, count)}},
    {"seen_chunks", MAP(seen, 0, 0), 0, 2,
     {{AGG_BC_BYTES, offsetof(agg_seen_ent_t, k.id), CM_CHUNK_ID_LEN},
      {AGG_BC_NOW, offsetof(agg_seen_ent_t, ts_ns), 0}}},
};
const int agg_batch_ntables = (int)(sizeof agg_batch_tables / sizeof agg_batch_tables[0]);

_Static_assert(CM_EV_MAX == 6, "spans has one weight column per event type");

void **agg_batch_rows(const agg_batch_t *b, const agg_btable_t *d, size_t *n, void ***buf,
                      size_t *cap) {
    const char *src = (const char *)b + d->src;
    if (!d->elem) {
        const agg_hmap_t *m = (const agg_hmap_t *)src;
        *n = m->n;
        if (d->nblob || d->nint)
            return agg_hmap_ordered(m, d->nblob, d->nint, buf, cap);
    } else {
        *n = ((const AGG_VEC(char) *)src)->n;
    }
    static void *none[1];
    if (!*n)
        return none;
    if (*n > *cap) {
        void **o = realloc(*buf, *n * sizeof *o);
        if (!o)
            return NULL;
        *buf = o;
        *cap = *n;
    }
    for (size_t i = 0; i < *n; i++)
        (*buf)[i] = d->elem ? ((const AGG_VEC(char) *)src)->v + i * d->elem
                            : agg_hmap_entry((const agg_hmap_t *)src, i);
    return *buf;
}

const void *agg_bcol_bytes(const agg_batch_t *b, const agg_bcol_t *c, const void *row,
                           size_t *len) {
    const char *p = (const char *)row + c->off;
    uint32_t u;
    size_t off;
    switch (c->kind) {
    case AGG_BC_VAR:
        memcpy(&u, (const char *)row + c->aux, 4);
        *len = u;
        return p;
    case AGG_BC_ARENA:
        memcpy(&off, p, sizeof off);
        memcpy(&u, (const char *)row + c->aux, 4);
        *len = u;
        return b->str_arena + off;
    case AGG_BC_CSTR:
        *len = strlen(p);
        return p;
    default:
        *len = c->aux;
        return p;
    }
}
