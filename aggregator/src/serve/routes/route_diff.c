/* Query API route /api/v1/diff (api_int.h): two versions or two time ranges of a service,
 * compared per function with a significance test, optionally as a CI gate. On a PostgreSQL
 * store the test side may be read on a second handle, on a thread of its own (h_diff).
 * Threading: any thread, on the request's leased store handle (api->qs). */
#define _GNU_SOURCE
#include "api_int.h"

#include "cm/error.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    agg_diff_t *d;
    size_t limit;
} dp_ctx_t;
static void print_diff(FILE *f, void *c) {
    agg_diff_print(f, ((dp_ctx_t *)c)->d, ((dp_ctx_t *)c)->limit);
}

/* One side of a diff read on a thread of its own (h_diff), with its own store handle and
 * reply (an error is written there). */
typedef struct {
    agg_api_t view; /* view.qs: the side's handle */
    const args_t *a;
    const char *vparam, *from_p, *to_p;
    int mode, per_request;
    agg_http_reply_t r;
    agg_profile_t *p;
    json_t *meta;
} diff_side_t;

static void *diff_side_run(void *arg) {
    diff_side_t *s = arg;
    filt_t none = {.any = 0};
    s->p = query_profile(&s->view, s->a, &s->r, s->vparam, s->from_p, s->to_p, s->mode,
                         s->per_request, &none, &s->meta);
    return NULL;
}

/* What a diff asks for (diff_parse). */
typedef struct {
    filt_t ft;
    long long limit;
    double gate, q; /* gate: fail_on_regression, < 0 without it; q: the FDR */
    const char *format;
    int by_time; /* two time ranges (base_from, test_from), else two versions (base, test) */
    int inclusive, mode, per_request;
    const char *endpoint; /* endpoint=: per call of the endpoint's requests, else NULL */
} diff_req_t;

/* Parses and checks a diff's parameters into d. Returns 0, or -1 with a 400 written. */
static int diff_parse(const args_t *a, agg_http_reply_t *r, diff_req_t *d) {
    d->gate = -1;
    d->format = arg(a, "format");
    d->format = d->format && *d->format ? d->format : "json";
    if (strcmp(d->format, "json") && strcmp(d->format, "text")) {
        reply_err(r, 400, "format", "format '%s' is not json or text", d->format);
        return -1;
    }
    if (parse_filter(a, r, &d->ft) || parse_uint(a, "limit", 100, 100000, r, &d->limit) ||
        parse_double(a, "fail_on_regression", -1, -1, 1000, r, &d->gate) ||
        parse_double(a, "q", 0.01, 1e-9, 0.5, r, &d->q))
        return -1;
    const char *base = arg(a, "base"), *test = arg(a, "test");
    d->by_time = arg(a, "base_from") || arg(a, "test_from");
    if (!d->by_time && (!base || !*base || !test || !*test)) {
        reply_err(r, 400, !base || !*base ? "base" : "test",
                  "a diff needs 'base' and 'test' versions, or the time ranges "
                  "base_from/base_to and test_from/test_to");
        return -1;
    }
    if (d->by_time && (!arg(a, "base_from") || !arg(a, "test_from"))) {
        reply_err(r, 400, arg(a, "base_from") ? "test_from" : "base_from",
                  "a time-range diff needs both base_from and test_from (and optionally "
                  "base_to, test_to)");
        return -1;
    }
    const char *inc = arg(a, "inclusive");
    d->inclusive = inc && !strcmp(inc, "1");
    /* a self-cost diff reads per-leaf replicates; filters and inclusive cost need each
     * replicate's stacks */
    d->mode = d->ft.any || d->inclusive ? AGG_QREP_STACKS : AGG_QREP_LEAVES;
    /* the unit of work: a second of process wall time, or one unit the application counted
     * with fleetprof_work_done() (requests) */
    const char *per = arg(a, "per");
    per = per && *per ? per : "second";
    if (strcmp(per, "second") && strcmp(per, "request")) {
        reply_err(r, 400, "per", "per '%s' is not 'second' or 'request'", per);
        return -1;
    }
    d->per_request = !strcmp(per, "request");
    /* endpoint=: each side the samples of the endpoint's requests, its replicates their calls
     * (agg_qstore_endpoint_query): values per call */
    d->endpoint = arg(a, "endpoint");
    d->endpoint = d->endpoint && *d->endpoint ? d->endpoint : NULL;
    if (d->endpoint && d->per_request) {
        reply_err(r, 400, "per", "with endpoint, a diff is per call of the endpoint: leave out "
                  "per=request");
        return -1;
    }
    return 0;
}

/* Reads the base side (*pb, its metadata *mb) and the test side (*pt, *mt) of the diff; a side
 * left NULL has its error written to r.
 * PostgreSQL: the test side on a second handle of the pool, on a thread of its own, while
 * this one reads the base side, so the two sides' waits for the server overlap; without a
 * free handle, or with filters, one after the other. Not on SQLite: a side is CPU work in
 * this process, a gain only with an idle core (measured: none on a busy host), and the
 * second handle's caches would be filled too. */
static void diff_read(agg_api_t *api, const args_t *a, diff_req_t *d, agg_http_reply_t *r,
                      agg_profile_t **pb, json_t **mb, agg_profile_t **pt, json_t **mt) {
    int by_time = d->by_time;
    diff_side_t side = {.view = *api, .a = a, .mode = d->mode, .per_request = d->per_request,
                        .vparam = by_time ? "version" : "test",
                        .from_p = by_time ? "test_from" : "from",
                        .to_p = by_time ? "test_to" : "to"};
    pthread_t th;
    int par = api->split_diff && !d->ft.any && agg_qpool_try_acquire(api->pool, &side.view.qs) == 0;
    if (par && pthread_create(&th, NULL, diff_side_run, &side)) {
        agg_qpool_release(api->pool, side.view.qs);
        par = 0;
    }
    *pb = query_profile(api, a, r, by_time ? "version" : "base", by_time ? "base_from" : "from",
                        by_time ? "base_to" : "to", d->mode, d->per_request, &d->ft, mb);
    if (par) {
        pthread_join(th, NULL);
        agg_qpool_release(api->pool, side.view.qs);
        *pt = side.p;
        *mt = side.meta;
        if (*pb && !*pt) { /* the test side's error is the answer */
            if (!r->body_static)
                free(r->body);
            r->status = side.r.status;
            r->content_type = side.r.content_type;
            r->body = side.r.body;
            r->len = side.r.len;
            r->body_static = side.r.body_static;
        } else if (!side.r.body_static) {
            free(side.r.body);
        }
        free(side.r.headers);
    } else if (*pb) {
        *pt = query_profile(api, a, r, side.vparam, side.from_p, side.to_p, d->mode,
                            d->per_request, &d->ft, mt);
    }
}

/* Replies with the diff in the format asked: text, or JSON with both sides' metadata (mb, mt)
 * and the test used; with fail_on_regression, the gate's verdict. */
static void diff_reply(const args_t *a, const diff_req_t *dr, agg_diff_t *d, json_t *mb,
                       json_t *mt, agg_http_reply_t *r) {
    char why[1024] = "";
    int failed = dr->gate >= 0 ? agg_diff_gate(d, dr->gate, why, sizeof why) : 0;
    if (!strcmp(dr->format, "text")) {
        dp_ctx_t c = {d, (size_t)dr->limit};
        size_t len;
        char *buf = memstream_text(print_diff, &c, &len);
        if (failed && buf) {
            char *nb = NULL;
            if (asprintf(&nb, "%sGATE FAILED: %s\n", buf, why) > 0) {
                free(buf);
                buf = nb;
                len = strlen(nb);
            }
        }
        reply_buf(r, "text/plain; charset=utf-8", buf, len);
        return;
    }
    json_t *o2 = agg_diff_json(d, (size_t)dr->limit);
    if (o2) {
        json_object_set_new(o2, "service", json_string(arg(a, "service")));
        if (dr->endpoint)
            json_object_set_new(o2, "endpoint", json_string(dr->endpoint));
        json_object_set(o2, "base", mb);
        json_object_set(o2, "test", mt);
        json_object_set_new(o2, "test_used", json_string(
            dr->endpoint ? "per call of the endpoint: its requests' samples, replicates = its "
                           "requests by end time (work = calls), common factor removed, "
                           "Benjamini-Hochberg FDR"
            : dr->per_request ? "Welch's t-test on per-bucket rates (time buckets as replicates, "
                              "work = units of work counted), common factor removed, "
                              "Benjamini-Hochberg FDR"
                            : "Welch's t-test on per-bucket rates (time buckets as replicates, "
                              "work = process-seconds), common factor removed, "
                              "Benjamini-Hochberg FDR"));
        if (dr->gate >= 0)
            json_object_set_new(o2, "gate", json_pack("{s:f, s:b, s:s}", "pct", dr->gate,
                                                      "failed", failed, "why", why));
    }
    reply_json(r, 200, o2);
}

void h_diff(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)url;
    diff_req_t dr;
    if (diff_parse(a, r, &dr))
        return;
    int by_time = dr.by_time;
    agg_profile_t *pb = NULL, *pt = NULL;
    json_t *mb = NULL, *mt = NULL;
    diff_read(api, a, &dr, r, &pb, &mb, &pt, &mt);
    if (!pb || !pt)
        goto out;
    if (!pb->n_rows || !pt->n_rows) {
        const char *t = arg(a, "type");
        reply_err(r, 404, !pb->n_rows ? (by_time ? "base_from" : "base")
                                      : (by_time ? "test_from" : "test"),
                  "no %s samples on the %s side of the diff", t && *t ? t : "cpu",
                  !pb->n_rows ? "base" : "test");
        goto out;
    }
    agg_diff_opts_t o;
    agg_diff_opts_default(&o);
    o.q = dr.q;
    if (dr.per_request) {
        double wb, wt;
        agg_profile_totals(pb, NULL, NULL, &wb);
        agg_profile_totals(pt, NULL, NULL, &wt);
        if (pb->work_total > 0)
            wb = pb->work_total;
        if (pt->work_total > 0)
            wt = pt->work_total;
        if (!(wb > 0) || !(wt > 0)) {
            reply_err(r, 404, "per", "no units of work were counted on the %s side: its "
                      "processes do not call fleetprof_work_done(); use per=second",
                      !(wb > 0) ? "base" : "test");
            goto out;
        }
        o.work_unit = "request";
    }
    if (dr.endpoint)
        o.work_unit = "call";
    o.test_inclusive = dr.inclusive;
    agg_diff_t d;
    int rc = agg_diff_compute(pb, pt, &o, &d);
    if (rc) {
        reply_err(r, 500, NULL, "diff failed: %s", cm_strerror(rc));
        goto out;
    }
    diff_reply(a, &dr, &d, mb, mt, r);
    agg_diff_free(&d);
out:
    json_decref(mb);
    json_decref(mt);
    agg_profile_free(pb);
    agg_profile_free(pt);
}
