/* GET /api/v1/kpm and /api/v1/search (serve_kpm.h) over the store's KPM sums (qstore/qkpm.c)
 * and the KPM library (aggregator/query/insights/kpms.h).
 *   kpm: version, host, pid (filters), by=service (default: one point per bucket, the
 *        service's values from its processes') or by=process; format=prometheus: the
 *        service's latest interval as `fleetprof_kpm_<name>{service="S"} value` lines.
 *   search: kpm (required), top (10, at most 1000), rise=1 (against the process's median),
 *        version, host, pid; each result links to its process's profile of that interval.
 * Threading: the request's thread and store handle. */
#include "serve_kpm.h"

#include "kpms.h"
#include "qkpm.h"

#include "cm/chunk.h"
#include "cm/error.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void reply(agg_http_reply_t *r, int status, const char *type, char *body) {
    r->status = body ? status : 500;
    r->content_type = type;
    r->body = body ? body : strdup("{\"error\":\"out of memory\",\"status\":500}");
    r->len = r->body ? strlen(r->body) : 0;
}

static void reply_json(agg_http_reply_t *r, int status, json_t *o) {
    char *b = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(o);
    reply(r, status, "application/json", b);
}

static void reply_err(agg_http_reply_t *r, int status, const char *param, const char *msg) {
    json_t *o = json_pack("{s:s,s:i}", "error", msg, "status", status);
    if (o && param)
        json_object_set_new(o, "parameter", json_string(param));
    reply_json(r, status, o);
}

static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *values_json(const double *v) {
    json_t *o = json_object();
    for (int k = 0; o && k < AGG_KPM_N; k++)
        json_object_set_new(o, agg_kpm_defs[k].name, num(v[k]));
    return o;
}

/* Reads the process-intervals of q (filters from the parameters). 0 or -1 (reply written). */
static int read_points(agg_qstore_t *qs, const agg_kpm_req_t *q, agg_http_reply_t *r,
                       agg_kpm_point_t **pts, size_t *n) {
    const char *pid = q->get(q->ctx, "pid"), *ver = q->get(q->ctx, "version");
    const char *host = q->get(q->ctx, "host");
    char *end = NULL;
    long long p = pid && *pid ? strtoll(pid, &end, 10) : 0;
    if (pid && *pid && (*end || p <= 0)) {
        reply_err(r, 400, "pid", "pid is not a process id (a positive integer)");
        return -1;
    }
    agg_kpmq_t kq = {q->service, ver && *ver ? ver : NULL, host && *host ? host : NULL, p,
                     q->from_s, q->to_s};
    int rc = agg_qstore_kpm(qs, &kq, pts, n);
    if (rc) {
        char m[128];
        snprintf(m, sizeof m, "store read failed: %s", cm_strerror(rc));
        reply_err(r, 500, NULL, m);
        return -1;
    }
    return 0;
}

static int cmp_bucket(const void *a, const void *b) {
    const agg_kpm_point_t *x = a, *y = b;
    return x->bucket < y->bucket ? -1 : x->bucket > y->bucket;
}

/* The service's points: one per bucket, values from its processes' (pts re-sorted). */
static json_t *by_service(agg_kpm_point_t *pts, size_t n, double *last) {
    json_t *arr = json_array();
    if (n)
        qsort(pts, n, sizeof *pts, cmp_bucket);
    agg_kpm_sums_t *s = malloc((n + 1) * sizeof *s);
    double prev = NAN, v[AGG_KPM_N];
    int64_t prev_b = 0;
    for (size_t lo = 0, hi; s && arr && lo < n; lo = hi) {
        for (hi = lo; hi < n && pts[hi].bucket == pts[lo].bucket; hi++)
            s[hi - lo] = pts[hi].s;
        agg_kpm_service_values(s, hi - lo, v);
        v[AGG_KPM_HEAP_GROWTH] = lo ? (v[AGG_KPM_HEAP_LIVE] - prev) /
                                          (double)(pts[lo].bucket - prev_b) : NAN;
        prev = v[AGG_KPM_HEAP_LIVE];
        prev_b = pts[lo].bucket;
        json_array_append_new(arr, json_pack("{s:I,s:I,s:I,s:o}", "bucket",
                                             (json_int_t)pts[lo].bucket, "width",
                                             (json_int_t)pts[lo].width, "processes",
                                             (json_int_t)(hi - lo), "values", values_json(v)));
        if (last)
            memcpy(last, v, sizeof v);
    }
    free(s);
    return arr;
}

static void prometheus(agg_http_reply_t *r, const char *svc, const double *v) {
    size_t cap = 8192, o = 0;
    char *b = malloc(cap);
    for (int k = 0; b && k < AGG_KPM_N; k++)
        o += (size_t)snprintf(b + o, cap - o,
                              "# HELP fleetprof_kpm_%s %s (%s)\n# TYPE fleetprof_kpm_%s gauge\n"
                              "fleetprof_kpm_%s{service=\"%s\"} %.9g\n",
                              agg_kpm_defs[k].name, agg_kpm_defs[k].help, agg_kpm_defs[k].unit,
                              agg_kpm_defs[k].name, agg_kpm_defs[k].name, svc,
                              isfinite(v[k]) ? v[k] : 0.0);
    reply(r, 200, "text/plain; version=0.0.4", b);
}

void agg_serve_kpm(agg_qstore_t *qs, const agg_kpm_req_t *q, agg_http_reply_t *r) {
    const char *by = q->get(q->ctx, "by"), *fmt = q->get(q->ctx, "format");
    const char *one = q->get(q->ctx, "kpm");
    int per_process = by && !strcmp(by, "process");
    if (by && *by && !per_process && strcmp(by, "service"))
        return reply_err(r, 400, "by", "by must be service or process");
    if (one && *one && agg_kpm_find(one) < 0)
        return reply_err(r, 400, "kpm", "kpm must name a KPM (see GET /api/v1/kpm: kpms)");
    agg_kpm_point_t *pts = NULL;
    size_t n = 0;
    if (read_points(qs, q, r, &pts, &n))
        return;
    double last[AGG_KPM_N];
    for (int k = 0; k < AGG_KPM_N; k++)
        last[k] = NAN;
    json_t *arr = json_array();
    if (per_process) {
        for (size_t i = 0; arr && i < n; i++)
            json_array_append_new(
                arr, json_pack("{s:I,s:I,s:s,s:I,s:s,s:I,s:o}", "bucket",
                               (json_int_t)pts[i].bucket, "width", (json_int_t)pts[i].width,
                               "host", pts[i].host, "pid", (json_int_t)pts[i].pid, "version",
                               pts[i].version, "chunks", (json_int_t)pts[i].s.chunks, "values",
                               values_json(pts[i].v)));
    } else {
        json_decref(arr);
        arr = by_service(pts, n, last);
    }
    free(pts);
    if (fmt && !strcmp(fmt, "prometheus")) {
        json_decref(arr);
        return prometheus(r, q->service, last);
    }
    reply_json(r, 200, json_pack("{s:s,s:s,s:o,s:o,s:s?}", "service", q->service, "by",
                                 per_process ? "process" : "service", "kpms",
                                 agg_kpm_catalogue(), "points", arr, "kpm",
                                 one && *one ? one : NULL));
}

static json_t *result_json(const agg_kpm_req_t *q, const agg_kpm_point_t *p, int k, double base) {
    char link[1024];
    snprintf(link, sizeof link,
             "/api/v1/profile?service=%s&type=%s&pid=%lld&from=%lld&to=%lld", q->service,
             cm_event_name((uint32_t)agg_kpm_defs[k].type), (long long)p->pid,
             (long long)p->bucket, (long long)(p->bucket + p->width));
    return json_pack("{s:I,s:I,s:s,s:I,s:s,s:o,s:o,s:s}", "bucket", (json_int_t)p->bucket,
                     "width", (json_int_t)p->width, "host", p->host, "pid", (json_int_t)p->pid,
                     "version", p->version, "value", num(p->v[k]), "baseline", num(base),
                     "link", link);
}

void agg_serve_search(agg_qstore_t *qs, const agg_kpm_req_t *q, agg_http_reply_t *r) {
    const char *name = q->get(q->ctx, "kpm"), *top = q->get(q->ctx, "top");
    const char *rise = q->get(q->ctx, "rise");
    int k = name ? agg_kpm_find(name) : -1;
    if (k < 0)
        return reply_err(r, 400, "kpm", "kpm must name a KPM (see GET /api/v1/kpm: kpms)");
    char *end = NULL;
    long t = top && *top ? strtol(top, &end, 10) : 10;
    if ((end && *end) || t < 1 || t > 1000)
        return reply_err(r, 400, "top", "top must be an integer from 1 to 1000");
    agg_kpm_point_t *pts = NULL;
    size_t n = 0, *idx = NULL, ni = 0;
    double *base = NULL;
    if (read_points(qs, q, r, &pts, &n))
        return;
    int is_rise = rise && !strcmp(rise, "1");
    if (agg_kpm_search(pts, n, k, is_rise, (size_t)t, &idx, &base, &ni)) {
        free(pts);
        return reply_err(r, 500, NULL, "out of memory");
    }
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < ni; i++)
        json_array_append_new(arr, result_json(q, &pts[idx[i]], k, base[idx[i]]));
    reply_json(r, 200, json_pack("{s:s,s:s,s:s,s:s,s:o}", "service", q->service, "kpm",
                                 agg_kpm_defs[k].name, "unit", agg_kpm_defs[k].unit, "ranked_by",
                                 is_rise ? "rise over the process's median" : "value",
                                 "results", arr));
    free(idx);
    free(base);
    free(pts);
}
