/* The query store's requests (query_store.h): the spans the application named, with their
 * real durations (table `requests`, one row per span), their sampled costs (table `spans`)
 * and their stacks (table `span_stacks`); endpoints are requests grouped by name.
 * Threading: the query store's (one caller at a time). */
#include "qstore_int.h"

#include "cm/array.h"
#include "cm/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A request's columns (read_req) and its sampled cost, before the WHERE of each query. */
#define REQ_SELECT                                                                                 \
    "SELECT r.trace, r.span, COALESCE(n.s, ''), r.start_ns, r.end_ns, r.ended, r.tid, "            \
    "COALESCE(c.cpu, 0), COALESCE(c.wall, 0), COALESCE(c.alloc, 0), COALESCE(c.inuse, 0), "       \
    "COALESCE(c.lock, 0), COALESCE(c.io, 0) FROM requests r LEFT JOIN strings n ON n.id = r.name " \
    "LEFT JOIN spans c ON c.trace = r.trace AND c.span = r.span "
#define REQ_COLS REQ_SELECT "WHERE r.service = ?1 "

static int cmp_req(const void *a, const void *b) {
    const agg_request_t *x = a, *y = b;
    int c = CM_CMP(y->end_ns - y->start_ns, x->end_ns - x->start_ns); /* longest first */
    if (!c)
        c = memcmp(x->trace_id, y->trace_id, 16);
    return c ? c : memcmp(x->span_id, y->span_id, 8);
}

static void read_req(agg_qxst_t *st, agg_request_t *r) {
    memset(r, 0, sizeof *r);
    agg_qs_col_ids(st, 0, r->trace_id, r->span_id);
    const char *nm = agg_qx_text(st, 2);
    snprintf(r->name, sizeof r->name, "%s", nm ? nm : "");
    r->start_ns = agg_qx_int64(st, 3);
    r->end_ns = agg_qx_int64(st, 4);
    r->ended = agg_qx_int64(st, 5) != 0;
    r->tid = agg_qx_int64(st, 6);
    for (int t = 1; t <= CM_EV_MAX; t++)
        r->cost[t] = (uint64_t)agg_qx_int64(st, 6 + t);
}

int agg_qstore_requests(agg_qstore_t *qs, const agg_reqq_t *q, agg_request_t **out, size_t *n) {
    agg_request_t *v = NULL;
    size_t nv = 0, cap = 0;
    *out = NULL;
    *n = 0;
    int rc = agg_qs_refresh(qs);
    char sql[1024];
    /* stuck: not ended, seen active at a cut since from_ns, running min_ns by that cut */
    /* parameters numbered without gaps (PostgreSQL types each one from its use) */
    int pv = q->name ? 5 : 4;
    char vcond[32] = "";
    if (q->version)
        snprintf(vcond, sizeof vcond, " AND r.version = ?%d", pv);
    snprintf(sql, sizeof sql, "%s%s%s%s", REQ_COLS,
             q->stuck ? "AND r.ended = 0 AND r.end_ns >= ?2 AND r.end_ns - r.start_ns >= ?3"
                      : "AND r.ended = 1 AND r.end_ns >= ?2 AND r.end_ns < ?3",
             q->name ? " AND n.s = ?4" : "", vcond);
    for (size_t i = 0; !rc && i < qs->n; i++) {
        agg_qxst_t *st;
        if ((rc = agg_qs_prep(&qs->dbs[i], sql, &st)))
            break;
        B64(st, 1, agg_qs_sid(q->service));
        B64(st, 2, q->from_ns);
        B64(st, 3, q->stuck ? q->min_ns : q->to_ns);
        if (q->name)
            agg_qx_bind_text(st, 4, q->name);
        if (q->version)
            B64(st, pv, agg_qs_sid(q->version));
        int s;
        while ((s = agg_qx_step(st)) == 1 && nv < AGG_REQ_MAX) {
            if (nv == cap && agg_vec_grow((void **)&v, &cap, sizeof *v)) {
                rc = CM_ENOMEM;
                break;
            }
            read_req(st, &v[nv++]);
        }
        rc = agg_qs_end(st, s, rc);
    }
    if (rc) {
        free(v);
        return rc;
    }
    if (nv)
        qsort(v, nv, sizeof *v, cmp_req);
    *out = v;
    *n = q->limit && q->limit < nv ? q->limit : nv;
    return 0;
}

int agg_qstore_request(agg_qstore_t *qs, const char *service, const uint8_t trace[16],
                       const uint8_t span[8], agg_request_t *out, int *found) {
    *found = 0;
    int rc = agg_qs_refresh(qs);
    /* the ids are the key; the service a condition only when given */
    char sql[600];
    snprintf(sql, sizeof sql, REQ_SELECT "WHERE r.trace = ?1 AND r.span = ?2%s",
             service ? " AND r.service = ?3" : "");
    for (size_t i = 0; !rc && !*found && i < qs->n; i++) {
        agg_qxst_t *st;
        if ((rc = agg_qs_prep(&qs->dbs[i], sql, &st)))
            break;
        agg_qx_bind_blob(st, 1, trace, 16);
        agg_qx_bind_blob(st, 2, span, 8);
        if (service)
            B64(st, 3, agg_qs_sid(service));
        int s = agg_qx_step(st);
        if (s == 1) {
            read_req(st, out);
            *found = 1;
        }
        rc = agg_qs_done(st, s);
    }
    return rc;
}

static int cmp_name_dur(const void *a, const void *b) {
    const agg_request_t *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    int64_t dx = x->end_ns - x->start_ns, dy = y->end_ns - y->start_ns;
    return dx < dy ? -1 : dx > dy;
}

static int cmp_endpoint(const void *a, const void *b) {
    const agg_endpoint_t *x = a, *y = b;
    if (x->p99_ns != y->p99_ns)
        return x->p99_ns > y->p99_ns ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Nearest rank: the smallest duration with at least q of the calls at or below it. */
static int64_t rank_q(const agg_request_t *r, size_t n, double q) {
    size_t k = (size_t)(q * (double)n + 0.999999);
    k = k ? k - 1 : 0;
    return r[k < n ? k : n - 1].end_ns - r[k < n ? k : n - 1].start_ns;
}

int agg_qstore_endpoints(agg_qstore_t *qs, const char *service, const char *version,
                         int64_t from_ns, int64_t to_ns, agg_endpoint_t **out, size_t *n) {
    agg_reqq_t q = {.service = service, .version = version, .from_ns = from_ns, .to_ns = to_ns};
    agg_request_t *r;
    size_t nr;
    *out = NULL;
    *n = 0;
    int rc = agg_qstore_requests(qs, &q, &r, &nr);
    if (rc)
        return rc;
    if (nr)
        qsort(r, nr, sizeof *r, cmp_name_dur);
    agg_endpoint_t *e = calloc(nr ? nr : 1, sizeof *e);
    if (!e) {
        free(r);
        return CM_ENOMEM;
    }
    size_t ne = 0;
    double cpu_all = 0;
    for (size_t i = 0, j; i < nr; i = j) {
        for (j = i; j < nr && !strcmp(r[j].name, r[i].name); j++)
            ;
        agg_endpoint_t *x = &e[ne++];
        snprintf(x->name, sizeof x->name, "%s", r[i].name);
        x->calls = j - i;
        x->p50_ns = rank_q(r + i, j - i, 0.50);
        x->p90_ns = rank_q(r + i, j - i, 0.90);
        x->p99_ns = rank_q(r + i, j - i, 0.99);
        x->max_ns = r[j - 1].end_ns - r[j - 1].start_ns;
        for (size_t k = i; k < j; k++)
            for (int t = 1; t <= CM_EV_MAX; t++)
                x->cost_per_call[t] += (double)r[k].cost[t];
        cpu_all += x->cost_per_call[CM_EV_CPU];
    }
    for (size_t k = 0; k < ne; k++) {
        e[k].cpu_share = cpu_all > 0 ? e[k].cost_per_call[CM_EV_CPU] / cpu_all : 0;
        for (int t = 1; t <= CM_EV_MAX; t++)
            e[k].cost_per_call[t] /= (double)e[k].calls;
    }
    free(r);
    if (ne)
        qsort(e, ne, sizeof *e, cmp_endpoint);
    *out = e;
    *n = ne;
    return 0;
}

/* An endpoint's ended requests in a range: ?1 the service, ?2 the name, ?3 and ?4 the range. */
#define EP_COND "r.service = ?1 AND n.s = ?2 AND r.ended = 1 AND r.end_ns >= ?3 AND r.end_ns < ?4"
#define EP_WHERE "FROM requests r JOIN strings n ON n.id = r.name WHERE " EP_COND
/* The same requests' stacks (ss) of those a sample landed in, driven by `spans` (the
 * service's sampled spans, a fraction of its requests: most are shorter than a sampling
 * period) so that stacks are looked up for sampled requests only, not for every request. The
 * spans are those whose last sample fell in [?A, ?B] (the %d, %d of the caller): the requests'
 * earliest start and latest end, widened by EP_SKEW_NS (samples and spans are stamped by
 * the same agent, converted to real time apart). CROSS JOIN holds SQLite's planner to that
 * order; PostgreSQL plans its own. */
#define EP_STACKS                                                                                  \
    "FROM spans s CROSS JOIN requests r CROSS JOIN span_stacks ss JOIN strings n ON n.id = "       \
    "r.name WHERE s.service = ?1 AND s.last_ns >= ?%d AND s.last_ns <= ?%d AND r.trace = "        \
    "s.trace AND r.span = s.span AND ss.trace = s.trace AND ss.span = s.span AND " EP_COND
#define EP_SKEW_NS 60000000000ll
/* Its requests' extent: count, earliest start, latest end, earliest end (ep_one's lo). */
#define EP_EXTENT "SELECT COUNT(*), MIN(r.start_ns), MAX(r.end_ns), MIN(r.end_ns) " EP_WHERE

int agg_qstore_endpoint_profile(agg_qstore_t *qs, const char *service, const char *version,
                                const char *name, int64_t from_ns, int64_t to_ns,
                                cm_event_type_t type, agg_profile_t **out, int *found) {
    *found = 0;
    agg_profile_t *p;
    int64_t rep;
    int rc = agg_qs_profile_begin(qs, type, "endpoint", &p, &rep);
    if (rc)
        return rc;
    char sql_n[512], sql[1024];
    /* the version is ?5 in the extent, ?6 in the profile statement (?5: type, ?7 ?8 bounds) */
    snprintf(sql_n, sizeof sql_n, EP_EXTENT "%s", version ? " AND r.version = ?5" : "");
    int a = version ? 7 : 6;
    snprintf(sql, sizeof sql,
             "SELECT ss.stack, SUM(ss.weight), SUM(ss.count) " EP_STACKS "%s AND ss.type = ?5 "
             "GROUP BY ss.stack ORDER BY ss.stack",
             a, a + 1, version ? " AND r.version = ?6" : "");
    for (size_t i = 0; !rc && i < qs->n; i++) {
        int64_t lo = 0, hi = -1; /* the sampled spans' bounds: none when no request */
        for (int k = 0; !rc && k < 2 && (!k || lo <= hi); k++) {
            agg_qxst_t *st;
            if ((rc = agg_qs_prep(&qs->dbs[i], k ? sql : sql_n, &st)))
                break;
            B64(st, 1, agg_qs_sid(service));
            agg_qx_bind_text(st, 2, name);
            B64(st, 3, from_ns);
            B64(st, 4, to_ns);
            if (version)
                B64(st, k ? 6 : 5, agg_qs_sid(version));
            if (k == 0) {
                int s = agg_qx_step(st);
                if (s == 1 && agg_qx_int64(st, 0) > 0) {
                    *found = 1;
                    lo = agg_qx_int64(st, 1) - EP_SKEW_NS;
                    hi = agg_qx_int64(st, 2) + EP_SKEW_NS;
                }
                rc = agg_qs_done(st, s == 1 ? 0 : s);
            } else {
                B64(st, 5, type);
                B64(st, a, lo);
                B64(st, a + 1, hi);
                rc = agg_qs_add_stack_rows(&qs->dbs[i], p, st, (uint32_t)rep, 0);
                agg_qx_finalize(st);
            }
        }
    }
    return agg_qs_profile_end(p, rc, out);
}

/* Replicates of an endpoint's profile (agg_qstore_endpoint_query): the requests of one version
 * by their end time, in at most EP_REPS buckets of at least EP_MIN_WIDTH. */
#define EP_REPS 30
#define EP_MIN_WIDTH 1000000000ll


/* Binds the parameters every statement of ep_one shares: ?1-?4, the version ?5 (when given),
 * then those of `extra` from the next number on. */
static void ep_bind(agg_qxst_t *st, const agg_qspec_t *q, const char *name, const char *ver,
                    const int64_t *extra, int n_extra) {
    B64(st, 1, agg_qs_sid(q->service));
    agg_qx_bind_text(st, 2, name);
    B64(st, 3, q->from_s * 1000000000ll);
    B64(st, 4, q->to_s >= INT64_MAX / 1000000000ll ? INT64_MAX : q->to_s * 1000000000ll);
    int k = 5;
    if (ver)
        B64(st, k++, agg_qs_sid(ver));
    for (int i = 0; i < n_extra; i++)
        B64(st, k++, extra[i]);
}

/* The requests' calls per bucket of width w from lo: one replicate each (work = its calls). */
static int ep_replicates(qdb_t *d, const agg_qspec_t *q, const char *name, const char *ver,
                         const char *vc, int64_t lo, int64_t w, agg_profile_t *p, uint32_t *reps,
                         size_t nb) {
    char sql[700];
    int k = ver ? 6 : 5;
    snprintf(sql, sizeof sql, "SELECT (r.end_ns - ?%d) / ?%d, COUNT(*) " EP_WHERE "%s GROUP BY 1",
             k, k + 1, vc);
    agg_qxst_t *st;
    int rc = agg_qs_prep(d, sql, &st), s = 0;
    if (rc)
        return rc;
    int64_t ex[2] = {lo, w};
    ep_bind(st, q, name, ver, ex, 2);
    while (!rc && (s = agg_qx_step(st)) == 1) {
        int64_t b = agg_qx_int64(st, 0);
        char key[300];
        snprintf(key, sizeof key, "endpoint %s %s %lld", name, ver ? ver : "", (long long)b);
        int64_t id = agg_profile_replicate(p, key, (double)agg_qx_int64(st, 1));
        if (id < 0)
            rc = (int)id;
        else if (b >= 0 && (size_t)b < nb)
            reps[b] = (uint32_t)id;
    }
    return agg_qs_end(st, s, rc);
}

/* One store and one version (NULL: all) of agg_qstore_endpoint_query. */
static int ep_one(qdb_t *d, const agg_qspec_t *q, const char *name, const char *ver,
                  agg_profile_t *p, int *found) {
    const char *vc = ver ? " AND r.version = ?5" : "";
    char sql[1200];
    snprintf(sql, sizeof sql, EP_EXTENT "%s", vc);
    agg_qxst_t *st;
    int rc = agg_qs_prep(d, sql, &st);
    if (rc)
        return rc;
    ep_bind(st, q, name, ver, NULL, 0);
    int s = agg_qx_step(st);
    int64_t n = s == 1 ? agg_qx_int64(st, 0) : 0, start = n ? agg_qx_int64(st, 1) : 0,
            hi = n ? agg_qx_int64(st, 2) : 0, lo = n ? agg_qx_int64(st, 3) : 0;
    if ((rc = agg_qs_done(st, s == 1 ? 0 : s)) || !n)
        return rc;
    *found = 1;
    /* one replicate (views), or the diff's: buckets of the requests' end times */
    int64_t w = q->replicates == AGG_QREP_NONE ? hi - lo + 1 : (hi - lo) / EP_REPS + 1;
    if (q->replicates != AGG_QREP_NONE && w < EP_MIN_WIDTH)
        w = EP_MIN_WIDTH;
    size_t nb = (size_t)((hi - lo) / w + 1);
    uint32_t reps[EP_REPS + 2] = {0};
    if ((rc = ep_replicates(d, q, name, ver, vc, lo, w, p, reps, nb)))
        return rc;
    int k = ver ? 6 : 5;
    snprintf(sql, sizeof sql,
             "SELECT (r.end_ns - ?%d) / ?%d, ss.stack, SUM(ss.weight), SUM(ss.count) " EP_STACKS
             "%s AND ss.type = ?%d GROUP BY 1, ss.stack ORDER BY 1, ss.stack",
             k, k + 1, k + 3, k + 4, vc, k + 2);
    if ((rc = agg_qs_prep(d, sql, &st)))
        return rc;
    int64_t ex[5] = {lo, w, q->type, start - EP_SKEW_NS, hi + EP_SKEW_NS};
    ep_bind(st, q, name, ver, ex, 5);
    rc = agg_qs_add_bucket_rows(d, p, st, reps, nb, q->lines);
    agg_qx_finalize(st);
    return rc;
}

int agg_qstore_endpoint_query(agg_qstore_t *qs, const agg_qspec_t *q, const char *name,
                              agg_profile_t **out, int *found) {
    *found = 0;
    *out = NULL;
    int rc = agg_qs_refresh(qs);
    if (rc)
        return rc;
    agg_profile_t *p = agg_profile_new(q->type);
    if (!p)
        return CM_ENOMEM;
    size_t nv = q->n_versions ? q->n_versions : 1;
    for (size_t v = 0; !rc && v < nv; v++)
        for (size_t i = 0; !rc && i < qs->n; i++)
            rc = ep_one(&qs->dbs[i], q, name, q->n_versions ? q->versions[v] : NULL, p, found);
    if (!rc && !p->n_replicates) { /* no request: an empty profile, as a profile query gives */
        int64_t rep = agg_profile_replicate(p, "endpoint", 0);
        rc = rep < 0 ? (int)rep : 0;
    }
    return agg_qs_profile_end(p, rc, out);
}
