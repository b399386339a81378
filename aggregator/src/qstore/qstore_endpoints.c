/* The query store's endpoints (query_store.h: agg_qstore_endpoints): the named spans of a
 * service grouped by name.
 *
 * An agent of chunk format minor 4 counts every span that ended in its endpoint's histogram
 * (table endpoint_hist, cm/hist.h buckets) and keeps a request row (table requests) only for
 * the spans that matter one by one: a sample landed in it, it was slow, or it is still
 * active. So an endpoint with histogram rows in the window takes its calls and percentiles
 * from the merged histograms alone (the rows' spans are counted there too: never added twice),
 * its slowest call from the rows when one is in the top bucket; an endpoint without any (an
 * older agent's) from its rows, as before. Sampled costs are always the rows' (every span a
 * sample landed in has one), divided by the calls. The histograms are kept per fine bucket of
 * the chunk's end: a window selects the buckets it overlaps (its edges are as fine as that).
 * Threading: the query store's (one caller at a time). */
#include "qstore_int.h"

#include "cm/array.h"
#include "cm/error.h"
#include "cm/hist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One endpoint's merged histogram. */
typedef struct {
    char name[AGG_REQ_NAME_MAX + 1];
    uint64_t n;
    uint64_t *h; /* CM_HIST_BUCKETS counts */
} ephist_t;

typedef struct {
    ephist_t *v;
    size_t n, cap;
} ephists_t;

static void ephists_free(ephists_t *e) {
    for (size_t i = 0; i < e->n; i++)
        free(e->v[i].h);
    free(e->v);
}

static ephist_t *ephist_of(ephists_t *e, const char *name) {
    for (size_t i = 0; i < e->n; i++)
        if (!strcmp(e->v[i].name, name))
            return &e->v[i];
    if (e->n == e->cap && agg_vec_grow((void **)&e->v, &e->cap, sizeof *e->v))
        return NULL;
    ephist_t *x = &e->v[e->n];
    memset(x, 0, sizeof *x);
    if (!(x->h = calloc(CM_HIST_BUCKETS, sizeof *x->h)))
        return NULL;
    snprintf(x->name, sizeof x->name, "%s", name);
    e->n++;
    return x;
}

/* Every store's histogram rows of service (version) whose fine bucket overlaps the window,
 * merged per name. */
static int read_hists(agg_qstore_t *qs, const char *service, const char *version,
                      int64_t from_ns, int64_t to_ns, ephists_t *out) {
    char sql[400];
    snprintf(sql, sizeof sql,
             "SELECT COALESCE(n.s, ''), h.hb, SUM(h.count) FROM endpoint_hist h LEFT JOIN "
             "strings n ON n.id = h.name WHERE h.service = ?1 AND h.bucket < ?3 AND h.bucket + "
             "h.width > ?2%s GROUP BY 1, 2",
             version ? " AND h.version = ?4" : "");
    int64_t from_s = from_ns / 1000000000, to_s = to_ns / 1000000000 + (to_ns % 1000000000 != 0);
    int rc = 0;
    for (size_t i = 0; !rc && i < qs->n; i++) {
        agg_qxst_t *st;
        if ((rc = agg_qs_prep(&qs->dbs[i], sql, &st)))
            break;
        B64(st, 1, agg_qs_sid(service));
        B64(st, 2, from_s);
        B64(st, 3, to_s);
        if (version)
            B64(st, 4, agg_qs_sid(version));
        int s;
        while (!rc && (s = agg_qx_step(st)) == 1) {
            const char *nm = agg_qx_text(st, 0);
            int64_t hb = agg_qx_int64(st, 1), c = agg_qx_int64(st, 2);
            ephist_t *x = ephist_of(out, nm ? nm : "");
            if (!x)
                rc = CM_ENOMEM;
            else if (hb >= 0 && hb < CM_HIST_BUCKETS && c > 0) {
                x->h[hb] += (uint64_t)c;
                x->n += (uint64_t)c;
            }
        }
        rc = agg_qs_end(st, s, rc);
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

/* x's calls and percentiles from its histogram h; its slowest call: the slowest row when that
 * row is in the top bucket, else the top bucket's midpoint. */
static void figures_from_hist(agg_endpoint_t *x, const ephist_t *h) {
    x->calls = h->n;
    x->p50_ns = (int64_t)cm_hist_quantile(h->h, h->n, 0.50);
    x->p90_ns = (int64_t)cm_hist_quantile(h->h, h->n, 0.90);
    x->p99_ns = (int64_t)cm_hist_quantile(h->h, h->n, 0.99);
    uint32_t top = CM_HIST_BUCKETS - 1;
    while (top && !h->h[top])
        top--;
    if (x->max_ns < (int64_t)cm_hist_lower(top))
        x->max_ns = (int64_t)cm_hist_mid(top);
}

/* Endpoints of the rows r[0..nr) (sorted by name, duration) and of the histograms: every name
 * of either, its figures from its histogram when it has one. Returns the count filled in e
 * (room for nr + hs->n). */
static size_t merge_endpoints(const agg_request_t *r, size_t nr, const ephists_t *hs,
                              agg_endpoint_t *e) {
    size_t ne = 0;
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
    }
    size_t nrows = ne;
    for (size_t k = 0; k < hs->n; k++) {
        agg_endpoint_t *x = NULL;
        for (size_t i = 0; i < nrows && !x; i++)
            if (!strcmp(e[i].name, hs->v[k].name))
                x = &e[i];
        if (!x) {
            x = &e[ne++];
            snprintf(x->name, sizeof x->name, "%s", hs->v[k].name);
        }
        if (hs->v[k].n)
            figures_from_hist(x, &hs->v[k]);
    }
    return ne;
}

int agg_qstore_endpoints(agg_qstore_t *qs, const char *service, const char *version,
                         int64_t from_ns, int64_t to_ns, agg_endpoint_t **out, size_t *n) {
    agg_reqq_t q = {.service = service, .version = version, .from_ns = from_ns, .to_ns = to_ns};
    agg_request_t *r;
    size_t nr;
    ephists_t hs = {0};
    *out = NULL;
    *n = 0;
    int rc = agg_qstore_requests(qs, &q, &r, &nr);
    if (rc)
        return rc;
    if ((rc = read_hists(qs, service, version, from_ns, to_ns, &hs))) {
        free(r);
        ephists_free(&hs);
        return rc;
    }
    if (nr)
        qsort(r, nr, sizeof *r, cmp_name_dur);
    agg_endpoint_t *e = calloc(nr + hs.n ? nr + hs.n : 1, sizeof *e);
    size_t ne = e ? merge_endpoints(r, nr, &hs, e) : 0;
    free(r);
    ephists_free(&hs);
    if (!e)
        return CM_ENOMEM;
    double cpu_all = 0;
    for (size_t k = 0; k < ne; k++)
        cpu_all += e[k].cost_per_call[CM_EV_CPU];
    for (size_t k = 0; k < ne; k++) {
        e[k].cpu_share = cpu_all > 0 ? e[k].cost_per_call[CM_EV_CPU] / cpu_all : 0;
        for (int t = 1; t <= CM_EV_MAX; t++)
            e[k].cost_per_call[t] /= e[k].calls ? (double)e[k].calls : 1.0;
    }
    if (ne)
        qsort(e, ne, sizeof *e, cmp_endpoint);
    *out = e;
    *n = ne;
    return 0;
}

/* The calls of r[0..nr) without a row, of the endpoint histogram h: per bucket, its count less
 * the rows of that name in it, appended to *v (duration the bucket's midpoint, no sampled
 * cost: a call a sample landed in has a row). */
static int add_unrowed(const agg_request_t *r, size_t nr, const ephist_t *h, agg_request_t **v,
                       size_t *nv, size_t *cap) {
    uint64_t *left = malloc(CM_HIST_BUCKETS * sizeof *left);
    if (!left)
        return CM_ENOMEM;
    memcpy(left, h->h, CM_HIST_BUCKETS * sizeof *left);
    for (size_t i = 0; i < nr; i++) {
        uint32_t b = cm_hist_index((uint64_t)(r[i].end_ns - r[i].start_ns));
        if (!strcmp(r[i].name, h->name) && left[b])
            left[b]--;
    }
    int rc = 0;
    for (uint32_t b = 0; b < CM_HIST_BUCKETS && !rc; b++)
        for (uint64_t k = 0; k < left[b] && !rc; k++) {
            if (*nv >= AGG_REQ_MAX)
                break;
            if (*nv == *cap && agg_vec_grow((void **)v, cap, sizeof **v)) {
                rc = CM_ENOMEM;
                break;
            }
            agg_request_t *x = &(*v)[(*nv)++];
            memset(x, 0, sizeof *x);
            snprintf(x->name, sizeof x->name, "%s", h->name);
            x->end_ns = (int64_t)cm_hist_mid(b);
            x->ended = 1;
        }
    free(left);
    return rc;
}

int agg_qstore_endpoint_calls(agg_qstore_t *qs, const char *service, const char *version,
                              int64_t from_ns, int64_t to_ns, agg_request_t **out, size_t *n) {
    agg_reqq_t q = {.service = service, .version = version, .from_ns = from_ns, .to_ns = to_ns};
    ephists_t hs = {0};
    int rc = agg_qstore_requests(qs, &q, out, n);
    if (!rc)
        rc = read_hists(qs, service, version, from_ns, to_ns, &hs);
    size_t nr = *n, cap = *n;
    for (size_t k = 0; !rc && k < hs.n; k++)
        rc = add_unrowed(*out, nr, &hs.v[k], out, n, &cap);
    ephists_free(&hs);
    if (rc) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

int agg_qs_endpoint_hist_work(qdb_t *d, const char *service, const char *name, const char *ver,
                              int64_t from_ns, int64_t to_ns, int64_t lo, int64_t w,
                              double *work, size_t nb, double *total) {
    char sql[400];
    snprintf(sql, sizeof sql,
             "SELECT h.bucket, h.width, SUM(h.count) FROM endpoint_hist h JOIN strings n ON "
             "n.id = h.name WHERE h.service = ?1 AND n.s = ?2 AND h.bucket < ?4 AND h.bucket + "
             "h.width > ?3%s GROUP BY h.bucket, h.width",
             ver ? " AND h.version = ?5" : "");
    agg_qxst_t *st;
    int rc = agg_qs_prep(d, sql, &st), s = 0;
    if (rc)
        return rc;
    B64(st, 1, agg_qs_sid(service));
    agg_qx_bind_text(st, 2, name);
    B64(st, 3, from_ns / 1000000000);
    B64(st, 4, to_ns / 1000000000 + (to_ns % 1000000000 != 0));
    if (ver)
        B64(st, 5, agg_qs_sid(ver));
    *total = 0;
    while ((s = agg_qx_step(st)) == 1) {
        int64_t t = (agg_qx_int64(st, 0) * 2 + agg_qx_int64(st, 1)) * 500000000ll; /* middle */
        int64_t b = w > 0 ? (t - lo) / w : 0;
        double c = (double)agg_qx_int64(st, 2);
        work[b < 0 ? 0 : (size_t)b >= nb ? nb - 1 : (size_t)b] += c;
        *total += c;
    }
    return agg_qs_end(st, s, 0);
}
