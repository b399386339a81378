/* Query API routes of spans and requests (api_int.h): /api/v1/spans (ranked), /span (the
 * profile of one span or trace), /endpoints, /endpoint (the profile of one endpoint's
 * requests), /requests (named spans with real durations, or those stuck now), /endpoint-diff
 * (each endpoint's latency and cost per call in two versions, tested). A request's /span and an
 * endpoint's /endpoint list the incidents overlapping them ("incidents": links).
 * Threading: any thread, on the request's leased store handle (api->qs). */
#define _GNU_SOURCE
#include "api_int.h"
#include "serve_incidents.h"

#include "cm/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void h_spans(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)url;
    const char *svc;
    cm_event_type_t type;
    int64_t from, to;
    long long limit;
    if (need_service(a, r, &svc) || parse_type(a, "type", r, &type) ||
        parse_time(a, "from", 0, r, &from) || parse_time(a, "to", INT64_MAX / 4, r, &to) ||
        parse_uint(a, "limit", 20, 10000, r, &limit))
        return;
    agg_qversion_t *v;
    size_t n;
    if (load_service(api, svc, r, &v, &n))
        return;
    agg_qversions_free(v, n);
    agg_span_cost_t *s = NULL;
    size_t ns = 0;
    /* one more than the limit: whether the limit cut the list ("more": a reader is told) */
    size_t want = limit ? (size_t)limit : 10000;
    int rc = agg_qstore_spans(api->qs, svc, s_to_ns(from), s_to_ns(to), type, want + 1, &s, &ns);
    if (rc) {
        reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
        return;
    }
    int more = ns > want;
    json_t *arr = agg_span_json(s, more ? want : ns, type);
    free(s);
    reply_json(r, 200, json_pack("{s:s, s:s, s:o, s:b}", "service", svc, "ranked_by",
                                 cm_event_name(type), "spans", arr, "more", more));
}

static json_t *request_json(const agg_request_t *q) {
    char tr[33], sp[17];
    cm_hex(q->trace_id, 16, tr);
    cm_hex(q->span_id, 8, sp);
    int64_t dur = q->end_ns - q->start_ns;
    int64_t on = (int64_t)q->cost[CM_EV_CPU] < dur ? (int64_t)q->cost[CM_EV_CPU] : dur;
    json_t *cost = json_object();
    for (int t = 1; t <= CM_EV_MAX; t++)
        json_object_set_new(cost, cm_event_name((uint32_t)t), json_integer((json_int_t)q->cost[t]));
    /* on CPU: the CPU samples' time (at most the duration); off CPU: the rest of it */
    return json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:b, s:I, s:I, s:I, s:o}", "trace_id", tr,
                     "span_id", sp, "name", q->name, "start_ns", (json_int_t)q->start_ns,
                     "end_ns", (json_int_t)q->end_ns, "duration_ns", (json_int_t)dur, "ended",
                     q->ended, "tid", (json_int_t)q->tid, "on_cpu_ns", (json_int_t)on,
                     "off_cpu_ns", (json_int_t)(dur - on), "cost", cost);
}

void h_endpoints(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)url;
    const char *svc;
    int64_t from, to;
    if (need_service(a, r, &svc) || parse_time(a, "from", 0, r, &from) ||
        parse_time(a, "to", INT64_MAX / 4, r, &to))
        return;
    agg_endpoint_t *e = NULL;
    size_t n = 0;
    const char *ver = arg(a, "version");
    ver = ver && *ver ? ver : NULL;
    int rc = agg_qstore_endpoints(api->qs, svc, ver, s_to_ns(from), s_to_ns(to), &e, &n);
    if (rc) {
        reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(
            arr, json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f}", "name",
                           e[i].name, "calls", (json_int_t)e[i].calls, "p50_ns",
                           (json_int_t)e[i].p50_ns, "p90_ns", (json_int_t)e[i].p90_ns, "p99_ns",
                           (json_int_t)e[i].p99_ns, "max_ns", (json_int_t)e[i].max_ns,
                           "cpu_per_call_ns", e[i].cost_per_call[CM_EV_CPU],
                           "wall_per_call_ns", e[i].cost_per_call[CM_EV_WALL],
                           "alloc_per_call_bytes", e[i].cost_per_call[CM_EV_ALLOC], "cpu_share",
                           e[i].cpu_share));
    free(e);
    reply_json(r, 200, json_pack("{s:s, s:s?, s:o}", "service", svc, "version", ver, "endpoints",
                                 arr));
}

void h_endpoint(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)url;
    const char *svc, *name = arg(a, "endpoint");
    cm_event_type_t type;
    int64_t from, to;
    filt_t ft;
    if (need_service(a, r, &svc) || parse_type(a, "type", r, &type) ||
        parse_time(a, "from", 0, r, &from) || parse_time(a, "to", INT64_MAX / 4, r, &to) ||
        parse_filter(a, r, &ft))
        return;
    if (!name || !*name) {
 reply_err(r, 400, "endpoint", "give the endpoint's name: parameter 'endpoint' (see "
                  "/api/v1/endpoints)");
        return;
    }
    agg_profile_t *p = NULL;
    int found = 0;
    const char *ver = arg(a, "version");
    int rc = agg_qstore_endpoint_profile(api->qs, svc, ver && *ver ? ver : NULL, name,
                                         s_to_ns(from), s_to_ns(to), type, &p, &found);
    if (rc) {
        reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
        return;
    }
    if (!found)
        reply_err(r, 404, "endpoint", "no request of endpoint '%s' of '%s' ended in the range", name,
                  svc);
    else if (!apply_filter(&ft, &p, r)) /* with the incidents overlapping the range: links */
        render_profile(a, p, json_pack("{s:s, s:s, s:o*}", "service", svc, "endpoint", name,
                                       "incidents",
                                       agg_incidents_overlapping(api->qs, svc, ver, s_to_ns(from),
                                                                 s_to_ns(to), AGG_INCIDENT_LINKS)),
                       r);
    agg_profile_free(p);
}

void h_requests(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)url;
    const char *svc, *name = arg(a, "endpoint"), *stuck = arg(a, "stuck");
    int64_t from, to, min_ns, seen_ns;
    long long limit;
    if (need_service(a, r, &svc) || parse_time(a, "from", 0, r, &from) ||
        parse_time(a, "to", INT64_MAX / 4, r, &to) || parse_uint(a, "limit", 20, 10000, r, &limit) ||
        parse_dur(a, "min", 10000000000ll, r, &min_ns) ||
        parse_dur(a, "seen", 30000000000ll, r, &seen_ns))
        return;
    const char *ver = arg(a, "version");
    agg_reqq_t q = {.service = svc, .name = name && *name ? name : NULL,
                    .version = ver && *ver ? ver : NULL, .from_ns = s_to_ns(from),
                    .to_ns = s_to_ns(to)};
    if (stuck && !strcmp(stuck, "1")) { /* active at a cut in the last `seen`, for `min` */
        q.stuck = 1;
        q.min_ns = min_ns;
        q.from_ns = now_s() * 1000000000ll - seen_ns;
    }
    size_t want = limit ? (size_t)limit : 10000;
    q.limit = want + 1;
    agg_request_t *v = NULL;
    size_t n = 0;
    int rc = agg_qstore_requests(api->qs, &q, &v, &n);
    if (rc) {
        reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
        return;
    }
    int more = n > want;
    json_t *arr = json_array();
    for (size_t i = 0; i < n && i < want; i++)
        json_array_append_new(arr, request_json(&v[i]));
    free(v);
    reply_json(r, 200, json_pack("{s:s, s:b, s:o, s:b}", "service", svc, "stuck", q.stuck,
                                 "requests", arr, "more", more));
}

/* The requests of one version that ended in [from, to) as calls (agg_epdiff_compute's input,
 * pointing into *req: free both). */
static int version_calls(agg_api_t *api, const char *svc, const char *ver, int64_t from,
                         int64_t to, agg_request_t **req, agg_call_t **calls, size_t *n) {
    agg_reqq_t q = {.service = svc, .version = ver, .from_ns = s_to_ns(from), .to_ns = s_to_ns(to)};
    *calls = NULL;
    int rc = agg_qstore_requests(api->qs, &q, req, n);
    if (rc)
        return rc;
    if (!(*calls = malloc((*n ? *n : 1) * sizeof **calls)))
        return CM_ENOMEM;
    for (size_t i = 0; i < *n; i++) {
        const agg_request_t *x = &(*req)[i];
        (*calls)[i] = (agg_call_t){x->name, x->end_ns - x->start_ns,
                                   {(double)x->cost[CM_EV_CPU], (double)x->cost[CM_EV_WALL],
                                    (double)x->cost[CM_EV_ALLOC]}};
    }
    return 0;
}

static void print_epdiff(FILE *f, void *c) { agg_epdiff_print(f, c); }

/* Per-endpoint diff of two versions: latency and cost per call, each tested (diff_endpoints.h). */
void h_endpoint_diff(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)url;
    const char *svc, *base = arg(a, "base"), *test = arg(a, "test"), *fmt = arg(a, "format");
    int64_t from, to;
    double q, min_change;
    if (need_service(a, r, &svc) || parse_time(a, "from", 0, r, &from) ||
        parse_time(a, "to", INT64_MAX / 4, r, &to) ||
        parse_double(a, "q", 0.01, 1e-9, 0.5, r, &q) ||
        parse_double(a, "min_change", 0.05, 0, 100, r, &min_change))
        return;
    fmt = fmt && *fmt ? fmt : "json";
    if (strcmp(fmt, "json") && strcmp(fmt, "text")) {
        reply_err(r, 400, "format", "format '%s' is not json or text", fmt);
        return;
    }
    if (!base || !*base || !test || !*test) {
        reply_err(r, 400, !base || !*base ? "base" : "test",
                  "an endpoint diff needs 'base' and 'test' versions");
        return;
    }
    agg_qversion_t *v;
    size_t nv;
    if (load_service(api, svc, r, &v, &nv))
        return;
    const char *vers[2] = {base, test};
    int bad = check_versions(v, nv, svc, "base", vers, 1, r) ||
              check_versions(v, nv, svc, "test", vers + 1, 1, r);
    agg_qversions_free(v, nv);
    if (bad)
        return;
    agg_request_t *rq[2] = {NULL, NULL};
    agg_call_t *c[2] = {NULL, NULL};
    size_t n[2] = {0, 0};
    agg_epdiff_t d;
    int rc = version_calls(api, svc, base, from, to, &rq[0], &c[0], &n[0]);
    if (!rc)
        rc = version_calls(api, svc, test, from, to, &rq[1], &c[1], &n[1]);
    if (!rc && (!n[0] || !n[1]))
        reply_err(r, 404, !n[0] ? "base" : "test", "no request of version '%s' of '%s' ended in "
                  "the range (see /api/v1/endpoints)", !n[0] ? base : test, svc);
    else if (!rc && !(rc = agg_epdiff_compute(c[0], n[0], c[1], n[1], q, min_change, &d))) {
        if (!strcmp(fmt, "text")) {
            size_t len;
            char *buf = memstream_text(print_epdiff, &d, &len);
            reply_buf(r, "text/plain; charset=utf-8", buf, len);
        } else {
            json_t *o = agg_epdiff_json(&d);
            json_object_update_new(o, json_pack("{s:s, s:s, s:s}", "service", svc, "base", base,
                                                "test", test));
            if (n[0] >= AGG_REQ_MAX || n[1] >= AGG_REQ_MAX) /* the store read stops there */
                json_object_set_new(o, "warning", json_pack("s", "a side has more requests than "
                                    "are read at once (1,000,000): narrow from/to"));
            reply_json(r, 200, o);
        }
        agg_epdiff_free(&d);
    }
    if (rc)
        reply_err(r, 500, NULL, "endpoint diff failed: %s", cm_strerror(rc));
    for (int k = 0; k < 2; k++) {
        free(rq[k]);
        free(c[k]);
    }
}

/* The span route's service= (only that service's spans), NULL when not given (any service). */
static const char *span_service(const args_t *a) {
    const char *svc = arg(a, "service");
    return svc && *svc ? svc : NULL;
}

/* One span or trace (tp, spp: its ids, NULL when not given; tr, sp: as given) in one event
 * type: any view or format. */
static void span_one_type(agg_api_t *api, const args_t *a, const uint8_t *tp,
                          const uint8_t *spp, const char *tr, const char *sp, filt_t *ft,
                          agg_http_reply_t *r) {
    const char *ts = arg(a, "type");
    cm_event_type_t type;
    if (parse_type(a, "type", r, &type))
        return;
    const char *svc = span_service(a);
    agg_profile_t *p = NULL;
    int found = 0;
    int rc = agg_qstore_span_profile_of(api->qs, svc, tp, spp, type, &p, &found);
    if (rc) {
        reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
        return;
    }
    if (!found || !p->n_rows) {
        reply_err(r, 404, spp ? "span" : "trace",
                  found ? "the span has no %s samples" : "unknown %s: not in the span index "
                  "%s%s%s(spans are kept for span-max-age)", found ? ts : spp ? "span" : "trace",
                  svc ? "of service '" : "", svc ? svc : "", svc ? "' " : "");
    } else if (!apply_filter(ft, &p, r)) {
        render_profile(a, p, json_pack("{s:s?, s:s?}", "trace_id", tp ? tr : NULL, "span_id",
                                       spp ? sp : NULL),
                       r);
    }
    agg_profile_free(p);
}

/* The top functions of a span or trace in each event type with samples: into types (JSON) and
 * tf (text, when not NULL); *found_any when the span index knows it. Returns 1 when a type had
 * samples, 0 when none, -1 on a filter error (replied). */
static int span_types_top(agg_api_t *api, const char *svc, const uint8_t *tp,
                          const uint8_t *spp, filt_t *ft, size_t limit, json_t *types, FILE *tf,
                          int *found_any, agg_http_reply_t *r) {
    int any = 0;
    for (int t = 1; t <= CM_EV_MAX; t++) {
        agg_profile_t *p = NULL;
        int found = 0;
        if (agg_qstore_span_profile_of(api->qs, svc, tp, spp, (cm_event_type_t)t, &p, &found))
            continue;
        *found_any |= found;
        if (p->n_rows && !apply_filter(ft, &p, r)) {
            agg_top_t top;
            if (agg_top_compute(p, AGG_SORT_SELF, limit, &top) == 0) {
                any = 1;
                json_object_set_new(types, cm_event_name((uint32_t)t), agg_top_json(p, &top));
                if (tf) {
                    fprintf(tf, "== %s ==\n", cm_event_name((uint32_t)t));
                    agg_top_print(tf, p, &top);
                }
                agg_top_free(&top);
            }
        } else if (r->body) { /* a filter error */
            agg_profile_free(p);
            return -1;
        }
        agg_profile_free(p);
    }
    return any;
}

/* One span or trace in every event type: the totals and top functions of each, as JSON (with
 * the named span's real duration when it is one) or text. A request no sample landed in (a
 * named span, both ids given) answers with its duration and no types. */
static void span_all_types(agg_api_t *api, const args_t *a, const uint8_t *tp,
                           const uint8_t *spp, const char *tr, const char *sp, filt_t *ft,
                           agg_http_reply_t *r) {
    long long limit;
    if (parse_uint(a, "limit", 20, 10000, r, &limit))
        return;
    const char *format = arg(a, "format");
    int text = format && !strcmp(format, "text");
    if (format && *format && strcmp(format, "json") && !text) {
        reply_err(r, 400, "format", "format '%s' needs one event type: add type=cpu (or wall, "
                  "alloc, ...); without it json and text are available", format);
        return;
    }
    const char *svc = span_service(a);
    json_t *types = json_object();
    char *tbuf = NULL;
    size_t tlen = 0;
    FILE *tf = text ? open_memstream(&tbuf, &tlen) : NULL;
    int found_any = 0, any = span_types_top(api, svc, tp, spp, ft, (size_t)limit, types, tf,
                                            &found_any, r);
    if (any < 0) { /* a filter error, replied */
        json_decref(types);
        if (tf)
            fclose(tf);
        free(tbuf);
        return;
    }
    if (tf)
        fclose(tf);
    agg_request_t rq;
    int known = 0; /* a named span (fleetprof_span_begin): its real duration beside */
    if (tp && spp && agg_qstore_request(api->qs, svc, tp, spp, &rq, &known))
        known = 0;
    if (!known && (!found_any || !any)) {
        free(tbuf);
        json_decref(types);
        reply_err(r, 404, spp ? "span" : "trace", "unknown %s '%s': not in the span index %s%s%s"
                  "(spans are kept for span-max-age)", spp ? "span" : "trace", spp ? sp : tr,
                  svc ? "of service '" : "", svc ? svc : "", svc ? "' " : "");
        return;
    }
    if (text) {
        json_decref(types);
        if (!any) { /* a request no sample landed in (or none the filters kept) */
            free(tbuf);
            int n = asprintf(&tbuf, "request %s: %.3f ms, %s\n", rq.name,
                             (double)(rq.end_ns - rq.start_ns) / 1e6,
                             found_any ? "no samples match the filters" : "no samples landed in it");
            tbuf = n < 0 ? NULL : tbuf;
            tlen = n > 0 ? (size_t)n : 0;
        }
        reply_buf(r, "text/plain; charset=utf-8", tbuf, tlen);
        return;
    }
    free(tbuf);
    json_t *o = json_pack("{s:s?, s:s?, s:o}", "trace_id", tp ? tr : NULL, "span_id",
                          spp ? sp : NULL, "types", types);
    if (known) { /* types is empty when no sample landed in the request */
        json_object_set_new(o, "request", request_json(&rq));
        json_t *inc = agg_incidents_of_request(api->qs, tp, spp, AGG_INCIDENT_LINKS);
        if (inc) /* the incidents it fell in: links */
            json_object_set_new(o, "incidents", inc);
    }
    reply_json(r, 200, o);
}

void h_span(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)url;
    const char *tr = arg(a, "trace"), *sp = arg(a, "span");
    uint8_t trace[16], span[8];
    if ((!tr || !*tr) && (!sp || !*sp)) {
        reply_err(r, 400, "span", "give 'trace' (32 hex digits) or 'span' (16 hex digits)");
        return;
    }
    if (tr && *tr && parse_hexid(tr, trace, 16)) {
        reply_err(r, 400, "trace", "trace '%s' is not a trace id of 32 hex digits", tr);
        return;
    }
    if (sp && *sp && parse_hexid(sp, span, 8)) {
        reply_err(r, 400, "span", "span '%s' is not a span id of 16 hex digits", sp);
        return;
    }
    const uint8_t *tp = tr && *tr ? trace : NULL, *spp = sp && *sp ? span : NULL;
    filt_t ft;
    if (parse_filter(a, r, &ft))
        return;
    const char *ts = arg(a, "type");
    if (ts && *ts) /* one event type: any view or format */
        span_one_type(api, a, tp, spp, tr, sp, &ft, r);
    else /* every event type: totals and top functions of each */
        span_all_types(api, a, tp, spp, tr, sp, &ft, r);
}
