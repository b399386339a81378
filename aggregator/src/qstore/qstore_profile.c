/* The query store's merged profiles (query_store.h), part 2: the planner that reads a range
 * from the per-stack tiers where whole tiles cover it and from the fine rows elsewhere, the
 * replicates of the diff (per (version, width, bucket), from the per-stack rows or the per-leaf
 * rollup), and the split of a profile's samples by a label or dimension.
 * Threading: a handle is used by one thread at a time. */
#define _GNU_SOURCE
#include "dims.h"
#include "qstore_int.h"

#include "cm/error.h"
#include "cm/log.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- merged profiles ---- */


typedef struct {
    int64_t v, w, b; /* version id, width, bucket */
} bkey_t;

typedef struct {
    bkey_t key;
    double work; /* process-seconds */
} bucket_t;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Maps bucket key k to replicate id in reps. */
static int rep_set(agg_hmap_t *reps, const bkey_t *k, int64_t id) {
    uint32_t *e = agg_hmap_upsert(reps, k, NULL);
    if (!e)
        return CM_ENOMEM;
    e[sizeof(bkey_t) / sizeof *e] = (uint32_t)id;
    return 0;
}

static int64_t rep_new(agg_profile_t *p, const bkey_t *k, double work) {
    char key[96];
    snprintf(key, sizeof key, "%llx/%lld/%lld", (unsigned long long)k->v, (long long)k->w,
             (long long)k->b);
    return agg_profile_replicate(p, key, work);
}

/* Interns one replicate per bucket of bks (ordered by version, width, bucket), merging buckets
 * with less than half their version's median work into the previous full bucket of the version
 * (the leading ones into the first full one; when none is full each keeps its own). Every
 * bucket's work is added exactly once. Fills reps: bkey_t -> replicate id. */
static int assign_replicates(agg_profile_t *p, const bucket_t *bks, size_t n, agg_hmap_t *reps) {
    double *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!tmp)
        return CM_ENOMEM;
    int rc = 0;
    for (size_t i = 0; i < n && !rc;) {
        size_t j = i;
        while (j < n && bks[j].key.v == bks[i].key.v)
            j++;
        for (size_t k = i; k < j; k++)
            tmp[k - i] = bks[k].work;
        qsort(tmp, j - i, sizeof *tmp, cmp_double);
        double median = tmp[(j - i) / 2];
        int64_t prev = -1; /* replicate of the last full bucket */
        for (size_t k = i; k < j && !rc; k++) {
            int64_t id;
            if (bks[k].work < 0.5 * median) {
                if (prev < 0)
                    continue; /* leading small bucket: goes to the first full one below */
                id = agg_profile_replicate(p, p->replicates[prev].key, bks[k].work);
            } else {
                id = rep_new(p, &bks[k].key, bks[k].work);
                for (size_t s = i; prev < 0 && s < k && id >= 0 && !rc; s++) /* leading ones */
                    if ((rc = rep_set(reps, &bks[s].key, id)) == 0)
                        id = agg_profile_replicate(p, p->replicates[id].key, bks[s].work);
                prev = id;
            }
            if (!rc && id < 0)
                rc = (int)id;
            if (!rc)
                rc = rep_set(reps, &bks[k].key, id);
        }
        for (size_t k = i; prev < 0 && k < j && !rc; k++) { /* every bucket small: own ids */
            int64_t id = rep_new(p, &bks[k].key, bks[k].work);
            rc = id < 0 ? (int)id : rep_set(reps, &bks[k].key, id);
        }
        i = j;
    }
    free(tmp);
    return rc;
}


void agg_qs_bind_parts(agg_qxst_t *st, const agg_qspec_t *q, const qparts_t *qp) {
    B64(st, 1, agg_qs_sid(q->service));
    B64(st, 2, q->type);
    (void)q;
    if (*qp->lab)
        agg_dims_filter_bind(st, qp->filt, qp->nfilt, QFILTER_PARAM);
    for (size_t i = 0; i < qp->nv; i++)
        B64(st, (int)(10 + i), qp->vid[i]);
    for (size_t i = 0; i < qp->nw; i++)
        B64(st, (int)(300 + i), qp->widths[i]);
}

/* Prepares the statement that fmt prints, whose parameters are ?1 the service, ?2 the type, ?3
 * and ?4 the bucket range and qp's versions, widths and label filter, and binds them with the
 * range [from, to). CM_EINVAL when the SQL does not fit its buffer. */
__attribute__((format(printf, 7, 8))) static int
prep_range(qdb_t *d, const agg_qspec_t *q, const qparts_t *qp, int64_t from, int64_t to,
           agg_qxst_t **st, const char *fmt, ...) {
    char sql[8192];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof sql)
        return CM_EINVAL;
    int rc = agg_qs_prep(d, sql, st);
    if (rc)
        return rc;
    agg_qs_bind_parts(*st, q, qp);
    B64(*st, 3, from);
    B64(*st, 4, to);
    return 0;
}

/* Rebuilds qp->win from qp->widths. */
static void parts_widths(qparts_t *qp) {
    size_t n = (size_t)snprintf(qp->win, sizeof qp->win, " AND width IN (");
    for (size_t i = 0; i < qp->nw; i++)
        n += (size_t)snprintf(qp->win + n, sizeof qp->win - n, "%s?%zu", i ? "," : "", 300 + i);
    snprintf(qp->win + n, sizeof qp->win - n, ")");
}

/* Fills qp; *empty = 1 when the service has no data for these versions at all. */
int agg_qs_query_parts(qdb_t *d, const agg_qspec_t *q, qparts_t *qp, int *empty) {
    agg_qxst_t *st = NULL;
    int rc, s;
    qp->nv = qp->nw = 0;
    *empty = 0;
    if (q->versions && q->n_versions) {
        for (size_t i = 0; i < q->n_versions; i++)
            qp->vid[qp->nv++] = agg_qs_sid(q->versions[i]);
    } else {
        if ((rc = agg_qs_prep(d, "SELECT version FROM versions WHERE service=?1", &st)))
            return rc;
        B64(st, 1, agg_qs_sid(q->service));
        while ((s = agg_qx_step(st)) == 1 && qp->nv < AGG_QMAX_VERSIONS)
            qp->vid[qp->nv++] = (uint64_t)agg_qx_int64(st, 0);
        if ((rc = agg_qs_done(st, s)))
            return rc;
    }
    if ((rc = agg_qs_prep(d, "SELECT DISTINCT width FROM intervals WHERE service=?1", &st)))
        return rc;
    B64(st, 1, agg_qs_sid(q->service));
    while ((s = agg_qx_step(st)) == 1) {
        if (qp->nw == QMAX_WIDTHS) { /* never a silently partial answer */
            CM_WARN("query: %s: service '%s' has more than %d bucket widths", d->path,
                    q->service, QMAX_WIDTHS);
            agg_qs_done(st, s);
            return CM_ETOOBIG;
        }
        qp->widths[qp->nw++] = agg_qx_int64(st, 0);
    }
    if ((rc = agg_qs_done(st, s)))
        return rc;
    *empty = !qp->nv || !qp->nw;
    size_t n = (size_t)snprintf(qp->vin, sizeof qp->vin, " AND version IN (");
    for (size_t i = 0; i < qp->nv; i++)
        n += (size_t)snprintf(qp->vin + n, sizeof qp->vin - n, "%s?%zu", i ? "," : "", 10 + i);
    snprintf(qp->vin + n, sizeof qp->vin - n, ")");
    parts_widths(qp);
    qp->nfilt = 0;
    if (q->label_key && q->label_value)
        qp->filt[qp->nfilt++] = (agg_qfilter_t){q->label_key, q->label_value};
    for (size_t i = 0; i < q->n_filters && qp->nfilt <= AGG_QMAX_FILTERS; i++)
        qp->filt[qp->nfilt++] = q->filters[i];
    if (q->n_filters > AGG_QMAX_FILTERS ||
        agg_dims_filter_sql(qp->labbuf, sizeof qp->labbuf, "labels", qp->filt, qp->nfilt,
                            QFILTER_PARAM) < 0)
        return CM_EINVAL;
    qp->lab = qp->labbuf;
    return 0;
}

/* Adds the rows of `table` (profile or profile_coarse) with bucket in [from, to) to the
 * per-stack sums in stacks (fine rows: width among qp's widths; coarse rows: width = cw). */
static int sum_stacks(qdb_t *d, const agg_qspec_t *q, const qparts_t *qp, const char *table,
                      int64_t cw, int64_t from, int64_t to, agg_hmap_t *stacks, size_t *nrows) {
    if (from >= to)
        return 0;
    agg_qxst_t *st = NULL;
    int s, rc = prep_range(d, q, qp, from, to, &st,
                           "SELECT stack, weight, count FROM %s WHERE service=?1 AND type=?2%s%s "
                           "AND bucket>=?3 AND bucket<?4%s",
                           table, qp->vin, cw ? " AND width=?7" : qp->win, qp->lab);
    if (rc)
        return rc;
    if (cw)
        B64(st, 7, cw);
    /* rows stream in primary-key order without GROUP BY (SQLite would sort them) */
    while ((s = agg_qx_step(st)) == 1) {
        uint64_t sk = (uint64_t)agg_qx_int64(st, 0);
        stackmap_t *m = agg_hmap_upsert(stacks, &sk, NULL);
        if (!m) {
            rc = CM_ENOMEM;
            break;
        }
        m->weight += (uint64_t)agg_qx_int64(st, 1);
        m->count += (uint64_t)agg_qx_int64(st, 2);
        (*nrows)++;
    }
    return agg_qs_end(st, s, rc);
}

static int cmp_bucket(const void *a, const void *b) {
    const bkey_t *x = &((const bucket_t *)a)->key, *y = &((const bucket_t *)b)->key;
    if (x->v != y->v)
        return x->v < y->v ? -1 : 1;
    if (x->w != y->w)
        return x->w < y->w ? -1 : 1;
    return x->b < y->b ? -1 : x->b > y->b;
}

/* Parses "a,b,c" into v (at most max); returns the count (0: absent). */
static int parse_list(const char *text, int64_t *v, int max) {
    char buf[256];
    int n = 0;
    snprintf(buf, sizeof buf, "%s", text);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < max;
         t = strtok_r(NULL, ",", &save))
        v[n++] = atoll(t);
    return n;
}

/* What a profile read needs of one store, read once per request (agg_qstore_profile): the
 * SQL parts, the tiers of its per-stack rollup with the marks below which each is complete
 * (store/tiers.c, agg_tiers_marks), widest (the coarse width) first, nt 0 when it has none (then
 * every query reads the fine rows), and the per-leaf rollup's replicate width (0: none). */
typedef struct {
    qparts_t qp;
    int empty; /* the service has no data for these versions in this store */
    int nt;
    int64_t tiers[AGG_QMAX_TIERS], done[AGG_QMAX_TIERS];
    int64_t rw;
} splan_t;

/* Fills sp for q on d: the parts, then the three meta keys in one statement. */
static int store_plan(qdb_t *d, const agg_qspec_t *q, splan_t *sp) {
    int rc = agg_qs_query_parts(d, q, &sp->qp, &sp->empty);
    sp->nt = 0;
    sp->rw = 0;
    if (rc || sp->empty)
        return rc;
    agg_qxst_t *st = NULL;
    int nt = 0, nd = -1, s;
    if ((rc = agg_qs_prep(d, "SELECT key, value FROM meta WHERE key IN (?1, ?2, ?3)", &st)))
        return rc;
    agg_qx_bind_text(st, 1, "tiers");
    agg_qx_bind_text(st, 2, "tiers_done");
    agg_qx_bind_text(st, 3, "replicate_width");
    while ((s = agg_qx_step(st)) == 1) {
        const char *k = agg_qx_text(st, 0), *v = agg_qx_text(st, 1);
        if (!k || !v)
            continue;
        if (!strcmp(k, "tiers"))
            nt = parse_list(v, sp->tiers, AGG_QMAX_TIERS);
        else if (!strcmp(k, "tiers_done"))
            nd = parse_list(v, sp->done, AGG_QMAX_TIERS);
        else if (parse_list(v, &sp->rw, 1) != 1 || sp->rw < 0)
            sp->rw = 0;
    }
    if ((rc = agg_qs_done(st, s)))
        return rc;
    if (nd != nt)
        nt = 0;
    for (int i = 0; i < nt; i++)
        if (sp->tiers[i] <= 0)
            nt = 0;
    for (int i = 0; i < nt / 2; i++) { /* stored narrowest first */
        int64_t x = sp->tiers[i], y = sp->done[i];
        sp->tiers[i] = sp->tiers[nt - 1 - i];
        sp->done[i] = sp->done[nt - 1 - i];
        sp->tiers[nt - 1 - i] = x;
        sp->done[nt - 1 - i] = y;
    }
    sp->nt = q->exact ? 0 : nt;
    return 0;
}

/* Per-stack sums of [from, to) from the tiles of tier `level` and below: the whole tiles of
 * tiers[level] inside the range, the rest at its two ends from the narrower tiers, the fine
 * rows last. At most two partial tiles per tier: an hour not aligned to anything reads at most
 * ~5 ten-minute, ~18 one-minute and ~10 fine buckets. *coarse_end: where the coarse tiles (level
 * 0) end, or from when there are none. */
static int plan_stacks(qdb_t *d, const agg_qspec_t *q, const qparts_t *fine, const int64_t *tiers,
                       const int64_t *done, int nt, int level, int64_t from, int64_t to,
                       agg_hmap_t *stacks, size_t *nrows, int64_t *coarse_end) {
    if (level == 0)
        *coarse_end = from;
    if (from >= to)
        return 0;
    if (level == nt)
        return fine->nw ? sum_stacks(d, q, fine, "profile", 0, from, to, stacks, nrows) : 0;
    int64_t w = tiers[level];
    int64_t a = from <= 0 ? 0 : ((from + w - 1) / w) * w, b = to - to % w;
    int64_t ignore;
    if (b > done[level]) /* the tier holds its tiles below its compaction mark only */
        b = done[level];
    if (a >= b)
        return plan_stacks(d, q, fine, tiers, done, nt, level + 1, from, to, stacks, nrows,
                           &ignore);
    if (level == 0)
        *coarse_end = b;
    int rc = sum_stacks(d, q, fine, "profile_coarse", w, a, b, stacks, nrows);
    if (!rc)
        rc = plan_stacks(d, q, fine, tiers, done, nt, level + 1, from, a, stacks, nrows, &ignore);
    if (!rc)
        rc = plan_stacks(d, q, fine, tiers, done, nt, level + 1, b, to, stacks, nrows, &ignore);
    return rc;
}

/* The replicates: the work of each (version, width, bucket) in [from, to), buckets narrower
 * than rw merged into rw-wide ones (rw 0: none), then assign_replicates. Fills reps. */
static int read_replicates(qdb_t *d, const agg_qspec_t *q, const qparts_t *qp, agg_profile_t *p,
                           agg_hmap_t *reps, int64_t from, int64_t to, int64_t rw) {
    qparts_t nolab = *qp;
    nolab.lab = "";
    agg_qxst_t *st = NULL;
    int s, rc = prep_range(d, q, &nolab, from, to, &st,
                           "SELECT version, width, bucket, SUM(%s) FROM intervals WHERE "
                           "service=?1%s%s AND bucket>=?3 AND bucket<?4 GROUP BY version, "
                           "width, bucket ORDER BY version, width, bucket",
                           q->per_request ? agg_qs_work_units_col(d) : "duration_ns", qp->vin,
                           qp->win);
    if (rc)
        return rc;
    bucket_t *bks = NULL;
    size_t nbk = 0, ncap = 0;
    while ((s = agg_qx_step(st)) == 1) {
        if (nbk == ncap && agg_vec_grow((void **)&bks, &ncap, sizeof *bks)) {
            rc = CM_ENOMEM;
            break;
        }
        bucket_t *k = &bks[nbk++];
        k->key.v = agg_qx_int64(st, 0);
        k->key.w = agg_qx_int64(st, 1);
        k->key.b = agg_qx_int64(st, 2);
        k->work = (double)agg_qx_int64(st, 3) / (q->per_request ? 1 : 1e9);
        if (rw > 0 && k->key.w < rw) {
            k->key.b -= k->key.b % rw;
            k->key.w = rw;
        }
    }
    if (!(rc = agg_qs_end(st, s, rc)) && rw > 0 && nbk) { /* merge the buckets that became one */
        qsort(bks, nbk, sizeof *bks, cmp_bucket);
        size_t o = 0;
        for (size_t i = 1; i < nbk; i++) {
            if (!cmp_bucket(&bks[o], &bks[i]))
                bks[o].work += bks[i].work;
            else
                bks[++o] = bks[i];
        }
        nbk = o + 1;
    }
    if (!rc)
        rc = assign_replicates(p, bks, nbk, reps);
    free(bks);
    return rc;
}

/* Work in [from, to): process-seconds (the intervals' pro-rata chunk durations), or units of
 * work the application counted (q->per_request). */
static int read_work(qdb_t *d, const agg_qspec_t *q, const qparts_t *qp, double *work) {
    qparts_t nolab = *qp;
    nolab.lab = "";
    agg_qxst_t *st = NULL;
    int s, rc = prep_range(
        d, q, &nolab, q->from_s, q->to_s, &st,
        "SELECT SUM(%s) FROM intervals WHERE service=?1%s%s AND bucket>=?3 AND bucket<?4",
        q->per_request ? agg_qs_work_units_col(d) : "duration_ns", qp->vin, qp->win);
    if (rc)
        return rc;
    if ((s = agg_qx_step(st)) == 1)
        *work += (double)agg_qx_int64(st, 0) / (q->per_request ? 1 : 1e9);
    return agg_qs_done(st, s);
}

/* The replicate of the current row of st, whose (version, width, bucket) are columns col..col+2
 * (interning one when the intervals had none). Rows come in key order: the last bucket's
 * replicate is remembered in *c (start with c->key.v = -1). Returns it or a CM_E* code. */
typedef struct {
    bkey_t key;
    int64_t rep;
} repcur_t;

static int64_t key_replicate(agg_profile_t *p, agg_hmap_t *reps, repcur_t *c, bkey_t k) {
    if (k.v == c->key.v && k.w == c->key.w && k.b == c->key.b)
        return c->rep;
    uint32_t *known = agg_hmap_find(reps, &k);
    int64_t r = known ? (int64_t)known[sizeof k / sizeof *known] : rep_new(p, &k, 0);
    if (r >= 0) {
        c->key = k;
        c->rep = r;
    }
    return r;
}

static int64_t row_replicate(agg_profile_t *p, agg_hmap_t *reps, repcur_t *c, agg_qxst_t *st,
                             int col) {
    bkey_t k = {agg_qx_int64(st, col), agg_qx_int64(st, col + 1), agg_qx_int64(st, col + 2)};
    return key_replicate(p, reps, c, k);
}

typedef struct {
    uint64_t leaf, weight, count;
    uint32_t replicate;
} leafrow_t;

/* Leaf-replicate form: each replicate's cost per leaf location from profile_leaf. */
/* The profile frame of each leaf location in leaves (its entries' second word set to their
 * index), into *frame (malloc'ed; AGG_NONE for a location missing from the store). The
 * locations not in d's cache yet are loaded first. Returns 0 or a CM_E* code. */
static int leaf_frames(qdb_t *d, agg_profile_t *p, agg_hmap_t *leaves, uint32_t **frame_out) {
    size_t nm = 0;
    int rc = 0;
    uint32_t *frame = NULL;
    uint64_t *missing = malloc((leaves->n ? leaves->n : 1) * sizeof *missing);
    if (!missing)
        return CM_ENOMEM;
    for (size_t i = 0; i < leaves->n; i++) {
        uint64_t *id = agg_hmap_entry(leaves, i);
        if (!agg_hmap_find(&d->locidx, id))
            missing[nm++] = *id;
    }
    if (nm && (rc = agg_qs_cache_fill_locs(d, missing, nm)))
        goto out;
    frame = malloc((leaves->n ? leaves->n : 1) * sizeof *frame);
    if (!frame) {
        rc = CM_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < leaves->n; i++) {
        uint64_t *e = agg_hmap_entry(leaves, i);
        uint64_t *li = agg_hmap_find(&d->locidx, e);
        frame[i] = AGG_NONE;
        e[1] = i;
        if (!li)
            continue; /* a location missing from the store: like a broken stack, skipped */
        cloc_t *c = &d->locs[li[1]];
        agg_qs_cloc_symbolize(c);
        int64_t fr = agg_qs_cloc_frame(p, c);
        if (fr < 0) {
            rc = (int)fr;
            goto out;
        }
        frame[i] = (uint32_t)fr;
    }
out:
    free(missing);
    if (rc)
        free(frame);
    else
        *frame_out = frame;
    return rc;
}

static int read_leaves(qdb_t *d, const agg_qspec_t *q, const qparts_t *qp, agg_profile_t *p,
                       agg_hmap_t *reps, int64_t from, int64_t to, int64_t rw) {
    agg_qxst_t *st = NULL;
    leafrow_t *rows = NULL;
    uint32_t *frame = NULL;
    size_t n = 0, cap = 0;
    int rc = 0, s;
    agg_hmap_t leaves; /* leaf location id -> (uint64) index into the location cache */
    agg_hmap_init(&leaves, sizeof(uint64_t), 2 * sizeof(uint64_t));
    /* the leaf rows: replicate-width ones, and downsampled ones (the intervals' wider widths) */
    qparts_t lp = *qp;
    size_t nw = 0;
    lp.widths[nw++] = rw;
    for (size_t i = 0; i < qp->nw && nw < sizeof lp.widths / sizeof *lp.widths; i++)
        if (qp->widths[i] > rw)
            lp.widths[nw++] = qp->widths[i];
    lp.nw = nw;
    parts_widths(&lp);
    /* one version and one width (the usual diff side): they are not read back with every row */
    int one = lp.nv == 1 && lp.nw == 1;
    if ((rc = prep_range(d, q, &lp, from, to, &st,
                         "SELECT leaf, weight, count, bucket%s FROM profile_leaf WHERE "
                         "service=?1 AND type=?2%s%s AND bucket>=?3 AND bucket<?4%s",
                         one ? "" : ", version, width", lp.vin, lp.win, lp.lab)))
        goto out;
    repcur_t cur = {{-1, -1, -1}, 0};
    while ((s = agg_qx_step(st)) == 1) {
        uint64_t leaf = (uint64_t)agg_qx_int64(st, 0);
        if (!leaf)
            continue; /* the empty stack: no self cost to anyone */
        bkey_t k = {one ? (int64_t)lp.vid[0] : agg_qx_int64(st, 4),
                    one ? lp.widths[0] : agg_qx_int64(st, 5), agg_qx_int64(st, 3)};
        int64_t rep = key_replicate(p, reps, &cur, k);
        if (rep < 0) {
            rc = (int)rep;
            break;
        }
        if (n == cap && agg_vec_grow((void **)&rows, &cap, sizeof *rows)) {
            rc = CM_ENOMEM;
            break;
        }
        rows[n++] = (leafrow_t){leaf, (uint64_t)agg_qx_int64(st, 1),
                                (uint64_t)agg_qx_int64(st, 2), (uint32_t)rep};
        int fresh = 0;
        if (!agg_hmap_upsert(&leaves, &leaf, &fresh)) {
            rc = CM_ENOMEM;
            break;
        }
    }
    {
        if ((rc = agg_qs_end(st, s, rc)))
            goto out;
    }
    if ((rc = leaf_frames(d, p, &leaves, &frame)))
        goto out;
    for (size_t i = 0; i < n; i++) {
        uint64_t *e = agg_hmap_find(&leaves, &rows[i].leaf);
        uint32_t fr = frame[e[1]];
        if (fr != AGG_NONE &&
            (rc = agg_profile_add_leaf(p, fr, rows[i].weight, rows[i].count, rows[i].replicate)))
            goto out;
    }
out:
    agg_hmap_free(&leaves);
    free(rows);
    free(frame);
    return rc;
}

/* The diff's replicates are processes x buckets (q->by_process): each bucket replicate whose
 * rows all carry a pid becomes one replicate per pid, in the group of that pid (one group id
 * per pid, agg_profile_replicate_group), with the bucket's work split by the pids' samples (the
 * intervals keep no per-process work; the diff's test uses samples as exposure, the work only
 * scales values). A bucket with rows without a pid (dimensions off) stays whole. Rewrites the
 * rows' replicates. Returns 0 or a CM_E* code. */
typedef struct {
    uint32_t rep, pad; /* the key: (bucket replicate, pid) */
    int64_t pid;
    double count;   /* the pid's samples in the bucket */
    int64_t id;     /* the new replicate */
    uint32_t group; /* the pid's group */
} rp_t;

static int cmp_rp_pid(const void *a, const void *b) {
    const rp_t *x = *(rp_t *const *)a, *y = *(rp_t *const *)b;
    return x->pid != y->pid ? (x->pid < y->pid ? -1 : 1) : (x->rep > y->rep) - (x->rep < y->rep);
}

static int cmp_rp_rep(const void *a, const void *b) {
    const rp_t *x = *(rp_t *const *)a, *y = *(rp_t *const *)b;
    return x->rep != y->rep ? (x->rep < y->rep ? -1 : 1) : (x->pid > y->pid) - (x->pid < y->pid);
}

/* Creates the per-process replicates of m's entries (bucket, pid) in a fixed order whatever
 * the rows' order (the backends return rows in different orders; the diff's sums over
 * replicates must not differ): groups numbered by pid (a string id, the same on every
 * backend), replicates by (bucket, pid). A bucket's work is shared by its pids' samples, the
 * last pid taking the rest so that the bucket's work is kept; units of work (whole_units:
 * requests) are shared in whole units, so that sums of them stay exact. */
static int make_process_replicates(agg_profile_t *p, agg_hmap_t *m, const double *tot,
                                   const uint8_t *whole, int whole_units) {
    rp_t **ord = malloc((m->n + 1) * sizeof *ord);
    if (!ord)
        return CM_ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < m->n; i++) {
        rp_t *e = agg_hmap_entry(m, i);
        if (!whole[e->rep] && tot[e->rep] > 0)
            ord[k++] = e;
    }
    qsort(ord, k, sizeof *ord, cmp_rp_pid);
    for (size_t i = 0, g = 0; i < k; i++) {
        g += i > 0 && ord[i]->pid != ord[i - 1]->pid;
        ord[i]->group = (uint32_t)g;
    }
    qsort(ord, k, sizeof *ord, cmp_rp_rep);
    int rc = 0;
    char name[160];
    double given = 0; /* of the current bucket's work */
    for (size_t i = 0; i < k && !rc; i++) {
        rp_t *e = ord[i];
        double w = p->replicates[e->rep].work, share = w * e->count / tot[e->rep];
        if (whole_units) /* requests: whole units, so the sums stay exact */
            share = floor(share);
        if (i + 1 == k || ord[i + 1]->rep != e->rep) /* the bucket's last: the rest, exactly */
            share = w - given;
        given = i + 1 == k || ord[i + 1]->rep != e->rep ? 0 : given + share;
        snprintf(name, sizeof name, "%s|pid%lld", p->replicates[e->rep].key, (long long)e->pid);
        e->id = agg_profile_replicate(p, name, share);
        rc = e->id < 0 ? (int)e->id : agg_profile_replicate_group(p, (uint32_t)e->id, e->group);
    }
    free(ord);
    return rc;
}

static int split_by_process(agg_profile_t *p, rawrow_t *rows, const int64_t *pid, size_t n,
                            int per_request) {
    int rc = CM_ENOMEM;
    uint32_t nrep = p->n_replicates;
    double *tot = calloc((size_t)nrep + 1, sizeof *tot);
    uint8_t *whole = calloc((size_t)nrep + 1, 1); /* a row without a pid: keep it whole */
    agg_hmap_t m;
    agg_hmap_init(&m, 16, sizeof(rp_t));
    if (!tot || !whole)
        goto out;
    for (size_t i = 0; i < n; i++) {
        uint32_t r = rows[i].replicate;
        tot[r] += (double)rows[i].count;
        if (pid[i] < 0) {
            whole[r] = 1;
            continue;
        }
        rp_t key = {r, 0, pid[i], 0, 0, 0}, *e = agg_hmap_upsert(&m, &key, NULL);
        if (!e)
            goto out;
        e->count += (double)rows[i].count;
    }
    if ((rc = make_process_replicates(p, &m, tot, whole, per_request)))
        goto out;
    for (uint32_t r = 0; r < nrep; r++)
        if (!whole[r] && tot[r] > 0)
            p->replicates[r].work = 0; /* its work went to its processes */
    for (size_t i = 0; i < n; i++) {
        if (pid[i] < 0 || whole[rows[i].replicate])
            continue;
        rp_t key = {rows[i].replicate, 0, pid[i], 0, 0, 0}, *e = agg_hmap_find(&m, &key);
        rows[i].replicate = (uint32_t)e->id;
    }
    rc = 0;
out:
    free(tot);
    free(whole);
    agg_hmap_free(&m);
    return rc;
}

/* Per-stack replicates (filters and inclusive tests need each replicate's stacks): every fine
 * row of [from, to) with the replicate of its bucket. */
static int stack_replicates(qdb_t *d, const agg_qspec_t *q, const qparts_t *qp, agg_profile_t *p,
                            agg_hmap_t *reps) {
    int rc = 0, s;
    agg_qxst_t *st = NULL;
    rawrow_t *rows = NULL;
    size_t nrows = 0, cap = 0;
    agg_hmap_t stacks;
    agg_hmap_init(&stacks, sizeof(uint64_t), sizeof(stackmap_t));
    int64_t *pid = NULL; /* per row with q->by_process: the pid label's string id, -1 none */
    int by = q->by_process;
    if ((rc = prep_range(d, q, qp, q->from_s, q->to_s, &st,
                         "SELECT stack, weight, count, version, width, bucket%s FROM profile%s "
                         "WHERE service=?1 AND type=?2%s%s AND bucket>=?3 AND bucket<?4%s",
                         by ? ", COALESCE(l.value, 0), CASE WHEN l.value IS NULL THEN 1 ELSE "
                              "0 END" : "",
                         by ? " LEFT JOIN labels l ON l.labelset=profile.labels AND l.key=?8"
                            : "",
                         qp->vin, qp->win, qp->lab)))
        goto out;
    if (q->by_process)
        B64(st, 8, agg_qs_sid(agg_dim_names[AGG_DIM_PID]));
    repcur_t cur = {{-1, -1, -1}, 0};
    while ((s = agg_qx_step(st)) == 1) {
        if (nrows == cap) {
            size_t nc = cap ? cap * 2 : 4096;
            rawrow_t *nr = realloc(rows, nc * sizeof *nr);
            int64_t *np = q->by_process ? realloc(pid, nc * sizeof *np) : NULL;
            if (nr)
                rows = nr;
            if (np)
                pid = np;
            if (!nr || (q->by_process && !np)) {
                rc = CM_ENOMEM;
                break;
            }
            cap = nc;
        }
        if (q->by_process)
            pid[nrows] = agg_qx_int64(st, 7) ? -1 : agg_qx_int64(st, 6) & INT64_MAX;
        rawrow_t *r = &rows[nrows++];
        r->stack = (uint64_t)agg_qx_int64(st, 0);
        r->weight = (uint64_t)agg_qx_int64(st, 1);
        r->count = (uint64_t)agg_qx_int64(st, 2);
        int64_t rep = row_replicate(p, reps, &cur, st, 3);
        if (rep < 0) {
            rc = (int)rep;
            break;
        }
        r->replicate = (uint32_t)rep;
        if (!agg_hmap_upsert(&stacks, &r->stack, NULL)) {
            rc = CM_ENOMEM;
            break;
        }
    }
    {
        rc = agg_qs_end(st, s, rc);
        st = NULL;
        if (rc)
            goto out;
    }
    if (!nrows || (rc = agg_qs_resolve_stacks(d, p, &stacks, q->lines)))
        goto out;
    if (q->by_process && (rc = split_by_process(p, rows, pid, nrows, q->per_request)))
        goto out;
    for (size_t i = 0; i < nrows; i++) {
        stackmap_t *m = agg_hmap_find(&stacks, &rows[i].stack);
        if (!m || !m->resolved)
            continue;
        if ((rc = agg_profile_add(p, m->stack, rows[i].weight, rows[i].count, rows[i].replicate,
                                  0)))
            goto out;
    }
out:
    free(rows);
    free(pid);
    agg_hmap_free(&stacks);
    return rc;
}

/* One store's part of a profile. Plan:
 *  - per-stack replicates (q->replicates == AGG_QREP_STACKS, or a store without coarse rollups):
 *    every fine row of the range;
 *  - otherwise the per-stack sums come from profile_coarse for the whole coarse buckets inside
 *    [from, to) and from the fine rows only for the partial ones at the edges: an hour of 10,000
 *    stacks is 10,000 coarse rows instead of 360 x 10,000 fine ones. The result is the same (the
 *    coarse rows are sums of the fine ones, written in the same transaction). With
 *    AGG_QREP_LEAVES, the replicates come from profile_leaf (one row per bucket and leaf). */
static int profile_one(qdb_t *d, const agg_qspec_t *q, const splan_t *sp, agg_profile_t *p) {
    int rc = 0;
    size_t nrows = 0;
    agg_hmap_t stacks, reps;
    if (sp->empty)
        return 0;
    qparts_t qp = sp->qp;
    agg_hmap_init(&stacks, sizeof(uint64_t), sizeof(stackmap_t));
    agg_hmap_init(&reps, sizeof(bkey_t), sizeof(bkey_t) + sizeof(uint64_t));
    const int64_t *tiers = sp->tiers, *done = sp->done;
    int nt = sp->nt;
    if (q->replicates == AGG_QREP_STACKS || (q->replicates == AGG_QREP_LEAVES && !nt)) {
        if ((rc = read_replicates(d, q, &qp, p, &reps, q->from_s, q->to_s, 0)))
            goto out;
        rc = stack_replicates(d, q, &qp, p, &reps);
        goto out;
    }
    if (!nt) { /* a store without the tiers: every fine row */
        if ((rc = sum_stacks(d, q, &qp, "profile", 0, q->from_s, q->to_s, &stacks, &nrows)))
            goto out;
    } else {
        /* fine rows at the tiles' edges: the widths below the coarse one; rows downsampled to
         * the coarse width (older than --downsample-after) where no coarse tile covers them */
        int64_t coarse = tiers[0];
        qparts_t fine = qp, big = qp;
        fine.nw = big.nw = 0;
        for (size_t i = 0; i < qp.nw; i++) {
            if (qp.widths[i] < coarse)
                fine.widths[fine.nw++] = qp.widths[i];
            else
                big.widths[big.nw++] = qp.widths[i];
        }
        parts_widths(&fine);
        parts_widths(&big);
        int64_t hb;
        if ((rc = plan_stacks(d, q, &fine, tiers, done, nt, 0, q->from_s, q->to_s, &stacks,
                              &nrows, &hb)) ||
            (big.nw && (rc = sum_stacks(d, q, &big, "profile", 0, hb, q->to_s, &stacks, &nrows))))
            goto out;
    }
    if (!nrows)
        goto out;
    int64_t all = agg_profile_replicate(p, "all", 0);
    if (all < 0) {
        rc = (int)all;
        goto out;
    }
    if ((rc = agg_qs_resolve_stacks(d, p, &stacks, q->lines)))
        goto out;
    size_t *order = agg_qs_stack_order(&stacks);
    if (!order) {
        rc = CM_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < stacks.n && !rc; i++) {
        stackmap_t *m = agg_hmap_entry(&stacks, order[i]);
        if (m->resolved)
            rc = agg_profile_add(p, m->stack, m->weight, m->count, (uint32_t)all, 0);
    }
    free(order);
    if (rc)
        goto out;
    if (q->replicates == AGG_QREP_LEAVES) {
        /* replicates: whole replicate-width buckets over the range; their leaf rows; the
         * totals stay those of the exact range, with its work */
        int64_t rw = sp->rw, rfrom, rto;
        if (rw <= 0) {
            rc = CM_EFORMAT;
            goto out;
        }
        /* the replicate-width buckets holding a fine bucket that starts in [from, to) */
        int64_t fine = qp.widths[0];
        for (size_t i = 1; i < qp.nw; i++)
            fine = qp.widths[i] < fine ? qp.widths[i] : fine;
        rfrom = q->from_s % fine ? q->from_s + (fine - q->from_s % fine) : q->from_s;
        rfrom -= rfrom % rw;
        rto = q->to_s % rw ? q->to_s + (rw - q->to_s % rw) : q->to_s;
        agg_profile_use_leaf_replicates(p);
        if ((rc = read_work(d, q, &qp, &p->work_total)) ||
            (rc = read_replicates(d, q, &qp, p, &reps, rfrom, rto, rw)) ||
            (rc = read_leaves(d, q, &qp, p, &reps, rfrom, rto, rw)))
            goto out;
    }
out:
    agg_hmap_free(&stacks);
    agg_hmap_free(&reps);
    return rc;
}

int agg_qstore_profile(agg_qstore_t *qs, const agg_qspec_t *qin, agg_profile_t **out) {
    int rc = agg_qs_refresh(qs);
    if (rc)
        return rc;
    agg_qspec_t qc = *qin;
    const agg_qspec_t *q = &qc;
    /* the tiers and the per-leaf rollup do not keep the dimensions: fine rows only */
    if (agg_dims_filtered(qin->label_key, qin->filters, qin->n_filters))
        qc.exact = 1;
    /* one form for the whole profile: leaf replicates only when every store holding data of
     * the service has the leaf rollup */
    if (q->n_versions > AGG_QMAX_VERSIONS)
        return CM_EINVAL;
    splan_t *plan = malloc((qs->n ? qs->n : 1) * sizeof *plan);
    if (!plan)
        return CM_ENOMEM;
    for (size_t i = 0; i < qs->n && !rc; i++)
        rc = store_plan(&qs->dbs[i], q, &plan[i]);
    for (size_t i = 0; i < qs->n && !rc && qc.replicates == AGG_QREP_LEAVES; i++)
        if (!plan[i].empty && (qc.exact || !plan[i].nt || !plan[i].rw))
            qc.replicates = AGG_QREP_STACKS;
    agg_profile_t *p = rc ? NULL : agg_profile_new(q->type);
    if (!p) {
        free(plan);
        return rc ? rc : CM_ENOMEM;
    }
    for (size_t i = 0; i < qs->n && !rc; i++)
        rc = profile_one(&qs->dbs[i], q, &plan[i], p);
    if (!rc && qc.replicates == AGG_QREP_LEAVES) {
        /* a short range has few replicate-width buckets: its fine buckets make more
         * replicates, and reading its per-stack fine rows is cheap */
        uint32_t used = 0;
        for (uint32_t r = 0; r < p->n_replicates; r++)
            used += p->replicates[r].work > 0;
        if (used < AGG_QMIN_LEAF_REPLICATES) {
            agg_profile_free(p);
            qc.replicates = AGG_QREP_STACKS;
            if (!(p = agg_profile_new(q->type))) {
                free(plan);
                return CM_ENOMEM;
            }
            for (size_t i = 0; i < qs->n && !rc; i++)
                rc = profile_one(&qs->dbs[i], q, &plan[i], p);
        }
    }
    free(plan);
    if (!rc && q->from_s > 0 && q->to_s < INT64_MAX / 1000000000) {
        p->time_start_ns = (uint64_t)q->from_s * 1000000000ull;
        p->time_end_ns = (uint64_t)q->to_s * 1000000000ull;
    }
    return agg_qs_profile_end(p, rc, out);
}


/* ---- split by a label or dimension (dims.h) ---- */

void agg_qgroups_free(agg_qgroup_t *g, size_t n) {
    for (size_t i = 0; g && i < n; i++)
        free(g[i].value);
    free(g);
}

static int cmp_group(const void *a, const void *b) {
    const agg_qgroup_t *x = a, *y = b;
    if (x->weight != y->weight)
        return x->weight > y->weight ? -1 : 1;
    if (!x->value || !y->value)
        return !x->value - !y->value;
    return strcmp(x->value, y->value);
}

/* The fine and downsampled rows of `profile` hold every sample exactly once (the tiers are
 * derived copies), so the split sums them, joined to the label of `key` (none: NULL). */
int agg_qstore_groups(agg_qstore_t *qs, const agg_qspec_t *q, const char *key,
                      agg_qgroup_t **out, size_t *n_out) {
    int rc = agg_qs_refresh(qs);
    if (rc)
        return rc;
    agg_qgroup_t *g = NULL;
    size_t n = 0, cap = 0;
    agg_hmap_t idx; /* value string id -> index + 1 into g */
    agg_hmap_init(&idx, sizeof(uint64_t), 2 * sizeof(uint64_t));
    for (size_t i = 0; i < qs->n && !rc; i++) {
        qdb_t *d = &qs->dbs[i];
        qparts_t qp;
        int empty, s;
        if ((rc = agg_qs_query_parts(d, q, &qp, &empty)) || empty)
            continue;
        agg_qxst_t *st = NULL;
        if ((rc = prep_range(d, q, &qp, q->from_s, q->to_s, &st,
                             "SELECT l.value, v.s, SUM(weight), SUM(count), SUM(rows) FROM "
                             "profile LEFT JOIN labels l ON l.labelset=profile.labels AND "
                             "l.key=?8 LEFT JOIN strings v ON v.id=l.value WHERE service=?1 AND "
                             "type=?2%s%s AND bucket>=?3 AND bucket<?4%s GROUP BY l.value, v.s",
                             qp.vin, qp.win, qp.lab)))
            break;
        B64(st, 8, agg_qs_sid(key));
        while ((s = agg_qx_step(st)) == 1) {
            uint64_t vid = (uint64_t)agg_qx_int64(st, 0);
            int fresh;
            uint64_t *e = agg_hmap_upsert(&idx, &vid, &fresh);
            if (!e) {
                rc = CM_ENOMEM;
                break;
            }
            if (fresh) {
                if (n == cap) {
                    size_t nc = cap ? 2 * cap : 64;
                    agg_qgroup_t *ng = realloc(g, nc * sizeof *ng);
                    if (!ng) {
                        rc = CM_ENOMEM;
                        break;
                    }
                    g = ng;
                    cap = nc;
                }
                const char *v = agg_qx_text(st, 1);
                g[n] = (agg_qgroup_t){vid ? strdup(v ? (const char *)v : "") : NULL, 0, 0, 0};
                if (vid && !g[n].value) {
                    rc = CM_ENOMEM;
                    break;
                }
                e[1] = ++n;
            }
            agg_qgroup_t *x = &g[e[1] - 1];
            x->weight += (uint64_t)agg_qx_int64(st, 2);
            x->count += (uint64_t)agg_qx_int64(st, 3);
            x->rows += (uint64_t)agg_qx_int64(st, 4);
        }
        rc = agg_qs_end(st, s, rc);
    }
    agg_hmap_free(&idx);
    if (rc) {
        agg_qgroups_free(g, n);
        return rc;
    }
    if (n)
        qsort(g, n, sizeof *g, cmp_group);
    *out = g;
    *n_out = n;
    return 0;
}

