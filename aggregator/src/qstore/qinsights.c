/* The insight rules' input from the stores (qinsights.h): merged profiles through the
 * planner of qstore_profile.c; the live heap per bucket from the `profile` rows (fine and
 * downsampled: every sample is in exactly one), each bucket a replicate keyed by its start in
 * ms whose work is the heap snapshots (chunks) the `totals` row of that bucket counts; the
 * processes' time, CPU and the agent's CPU from `intervals`; losses from `drops`; the I/O split
 * by the io-target dimension (agg_qstore_groups).
 * Threading: the handle's thread. */
#include "qinsights.h"

#include "batch.h"
#include "qstore_int.h"

#include "cm/error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    uint64_t stack;
    int64_t bucket;
    uint64_t weight, count;
} hrow_t;

typedef AGG_VEC(hrow_t) hrows_t;

/* Prepares sql with the window bound: ?1 service, ?2 event type, ?3/?4 buckets, ?5 version
 * (0: all). Returns 0 or a CM_E* code. */
static int prep_window(qdb_t *d, const char *sql, const int64_t *b, int64_t type, int64_t ver,
                       agg_qxst_t **st) {
    int rc = agg_qs_prep(d, sql, st);
    if (rc)
        return rc;
    B64(*st, 1, b[0]);
    B64(*st, 2, type);
    B64(*st, 3, b[1]);
    B64(*st, 4, b[2]);
    B64(*st, 5, ver);
    return 0;
}

/* Replicate per bucket: key = bucket start in ms, work = snapshots in it (at least 1). */
static int heap_buckets(qdb_t *d, agg_profile_t *p, const int64_t *b, int64_t ver) {
    agg_qxst_t *st;
    int rc = prep_window(d,
                         "SELECT bucket, SUM(chunks) FROM totals WHERE service=?1 AND type=?2 AND "
                         "(?5=0 OR version=?5) AND bucket>=?3 AND bucket<?4 GROUP BY bucket",
                         b, CM_EV_INUSE, ver, &st);
    if (rc)
        return rc;
    int s;
    while ((s = agg_qx_step(st)) == 1) {
        char key[32];
        snprintf(key, sizeof key, "%" PRId64, agg_qx_int64(st, 0) * 1000);
        int64_t n = agg_qx_int64(st, 1);
        int64_t r = agg_profile_replicate(p, key, (double)(n > 0 ? n : 1));
        if (r < 0) {
            rc = (int)r;
            break;
        }
    }
    return agg_qs_end(st, s, rc);
}

/* The live-heap rows of one store into p, one replicate per bucket. */
static int heap_rows(qdb_t *d, agg_profile_t *p, const int64_t *b, int64_t ver) {
    hrows_t h = {0};
    agg_hmap_t stacks;
    agg_hmap_init(&stacks, sizeof(uint64_t), sizeof(stackmap_t));
    agg_qxst_t *st;
    int rc = heap_buckets(d, p, b, ver), s = 0;
    if (!rc)
        rc = prep_window(d,
                         "SELECT stack, bucket, SUM(weight), SUM(count) FROM profile WHERE "
                         "service=?1 AND type=?2 AND (?5=0 OR version=?5) AND bucket>=?3 AND "
                         "bucket<?4 GROUP BY stack, bucket",
                         b, CM_EV_INUSE, ver, &st);
    if (rc)
        goto out;
    while (!rc && (s = agg_qx_step(st)) == 1) {
        hrow_t r = {(uint64_t)agg_qx_int64(st, 0), agg_qx_int64(st, 1),
                    (uint64_t)agg_qx_int64(st, 2), (uint64_t)agg_qx_int64(st, 3)};
        hrow_t *slot = AGG_VEC_PUSH(h);
        if (slot)
            *slot = r;
        if (!slot || !agg_hmap_upsert(&stacks, &r.stack, NULL))
            rc = CM_ENOMEM;
    }
    if ((rc = agg_qs_end(st, s, rc)) || !h.n || (rc = agg_qs_resolve_stacks(d, p, &stacks, 0)))
        goto out;
    for (size_t i = 0; !rc && i < h.n; i++) {
        stackmap_t *m = agg_hmap_find(&stacks, &h.v[i].stack);
        char key[32];
        snprintf(key, sizeof key, "%" PRId64, h.v[i].bucket * 1000);
        int64_t rep = agg_profile_replicate(p, key, 0);
        if (rep < 0)
            rc = (int)rep;
        else if (m && m->resolved)
            rc = agg_profile_add(p, m->stack, h.v[i].weight, h.v[i].count, (uint32_t)rep, 0);
    }
out:
    free(h.v);
    agg_hmap_free(&stacks);
    return rc;
}

/* Process time, CPU, agent CPU (intervals), samples kept (totals) and lost (drops). */
static int interval_sums(qdb_t *d, agg_insight_input_t *in, const int64_t *b, int64_t ver) {
    static const char *const sql[3] = {
        "SELECT SUM(duration_ns), SUM(agent_cpu_ns), SUM(process_cpu_ns) FROM intervals WHERE "
        "service=?1 AND (?5=0 OR version=?5) AND bucket>=?3 AND bucket<?4",
        "SELECT SUM(rows), 0, 0 FROM totals WHERE service=?1 AND (?5=0 OR version=?5) AND "
        "bucket>=?3 AND bucket<?4",
        "SELECT reason, SUM(count), 0 FROM drops WHERE service=?1 AND (?5=0 OR version=?5) AND "
        "bucket>=?3 AND bucket<?4 GROUP BY reason"};
    int rc = 0;
    for (int q = 0; !rc && q < 3; q++) {
        agg_qxst_t *st;
        if ((rc = prep_window(d, sql[q], b, 0, ver, &st))) /* ?2 unused */
            break;
        int s;
        while ((s = agg_qx_step(st)) == 1) {
            int64_t c0 = agg_qx_int64(st, 0), c1 = agg_qx_int64(st, 1);
            if (q == 0) {
                in->process_seconds += (double)c0 / 1e9;
                in->agent_cpu_ns += (uint64_t)c1;
                in->process_cpu_ns += (uint64_t)agg_qx_int64(st, 2);
            } else if (q == 1) {
                in->samples += (uint64_t)c0;
            } else {
                agg_insight_add_drop(in, (uint32_t)c0, (uint64_t)c1);
            }
        }
        rc = agg_qs_done(st, s);
    }
    return rc;
}

static int merged_profiles(agg_qstore_t *qs, const char *service, const char *version,
                           int64_t from_s, int64_t to_s, agg_qinsight_t *out) {
    static const cm_event_type_t types[] = {CM_EV_CPU, CM_EV_WALL, CM_EV_ALLOC, CM_EV_LOCK,
                                            CM_EV_IO};
    const char *vv[1] = {version};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        agg_qspec_t q = {.service = service, .versions = version ? vv : NULL,
                         .n_versions = version ? 1 : 0, .type = types[i], .from_s = from_s,
                         .to_s = to_s};
        int rc = agg_qstore_profile(qs, &q, &out->prof[types[i]]);
        if (rc)
            return rc;
    }
    return 0;
}

/* The I/O of the window split by target (samples without one left out). */
static int io_targets(agg_qstore_t *qs, const char *service, const char *version,
                      int64_t from_s, int64_t to_s, agg_qinsight_t *out) {
    const char *vv[1] = {version};
    agg_qspec_t q = {.service = service, .versions = version ? vv : NULL,
                     .n_versions = version ? 1 : 0, .type = CM_EV_IO, .from_s = from_s,
                     .to_s = to_s};
    int rc = agg_qstore_groups(qs, &q, agg_dim_names[AGG_DIM_IO_TARGET], &out->targets,
                               &out->n_targets);
    if (rc)
        return rc;
    out->tv = calloc(out->n_targets + 1, sizeof *out->tv);
    if (!out->tv)
        return CM_ENOMEM;
    for (size_t i = 0; i < out->n_targets; i++)
        if (out->targets[i].value)
            out->tv[out->in.n_io_targets++] = (agg_insight_target_t){
                out->targets[i].value, out->targets[i].weight, out->targets[i].count};
    out->in.io_targets = out->tv;
    return 0;
}

int agg_qstore_insight_input(agg_qstore_t *qs, const char *service, const char *version,
                             int64_t from_s, int64_t to_s, agg_qinsight_t *out) {
    memset(out, 0, sizeof *out);
    int rc = merged_profiles(qs, service, version, from_s, to_s, out);
    if (!rc)
        rc = io_targets(qs, service, version, from_s, to_s, out);
    if (!rc && !(out->prof[CM_EV_INUSE] = agg_profile_new(CM_EV_INUSE)))
        rc = CM_ENOMEM;
    if (!rc)
        rc = agg_qs_refresh(qs);
    int64_t b[3] = {(int64_t)agg_qs_sid(service), from_s, to_s};
    int64_t ver = version ? (int64_t)agg_qs_sid(version) : 0;
    for (size_t i = 0; !rc && i < qs->n; i++) {
        rc = heap_rows(&qs->dbs[i], out->prof[CM_EV_INUSE], b, ver);
        if (!rc)
            rc = interval_sums(&qs->dbs[i], &out->in, b, ver);
    }
    if (!rc)
        rc = agg_profile_seal(out->prof[CM_EV_INUSE]);
    agg_insight_input_t *in = &out->in;
    in->cpu = out->prof[CM_EV_CPU];
    in->wall = out->prof[CM_EV_WALL];
    in->alloc = out->prof[CM_EV_ALLOC];
    in->lock = out->prof[CM_EV_LOCK];
    in->io = out->prof[CM_EV_IO];
    in->inuse = out->prof[CM_EV_INUSE];
    return rc;
}

void agg_qinsight_free(agg_qinsight_t *x) {
    for (int t = 0; t < CM_EV_COUNT; t++)
        agg_profile_free(x->prof[t]);
    agg_qgroups_free(x->targets, x->n_targets);
    free(x->tv);
    memset(x, 0, sizeof *x);
}
