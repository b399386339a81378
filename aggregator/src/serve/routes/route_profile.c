/* Query API route /api/v1/profile (api_int.h): the merged profile of a service, or its samples
 * split by a dimension or label (group_by); and the profile query every route shares.
 * Threading: any thread, on the request's leased store handle (api->qs). */
#include "api_int.h"

#include "cm/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

agg_profile_t *query_profile(agg_api_t *api, const args_t *a, agg_http_reply_t *r,
                                    const char *vparam, const char *from_p, const char *to_p,
                                    int replicates, int per_request, filt_t *ft,
                                    json_t **meta) {
    return query_profile_by(api, a, r, vparam, from_p, to_p, replicates, per_request, ft, meta,
                            NULL, NULL);
}

/* p after the filters of ft (NULL after an error reply, p freed), and its *meta (when meta):
 * service, versions, endpoint (ep, when not NULL), from, to. */
static agg_profile_t *filtered_profile(agg_profile_t *p, filt_t *ft, agg_http_reply_t *r,
                                       const agg_qspec_t *q, const char *ep, json_t **meta) {
    if (apply_filter(ft, &p, r)) {
        agg_profile_free(p);
        return NULL;
    }
    if (meta) {
        json_t *va = json_array();
        for (size_t i = 0; i < q->n_versions; i++)
            json_array_append_new(va, json_string(q->versions[i]));
        *meta = json_pack("{s:s, s:o, s:I, s:I}", "service", q->service, "versions", va, "from",
                          (json_int_t)q->from_s, "to",
                          (json_int_t)(q->to_s == INT64_MAX / 4 ? 0 : q->to_s));
        if (ep)
            json_object_set_new(*meta, "endpoint", json_string(ep));
    }
    return p;
}

/* The profile of q restricted to the requests of endpoint ep (query_profile_by's
 * `endpoint=`): their spans' samples. A request's samples carry no labels or dimensions, and
 * the endpoint is itself the grouping: those are refused (grouped: called for a group_by). */
static agg_profile_t *endpoint_query(agg_api_t *api, const agg_qspec_t *q, const char *ep,
                                     filt_t *ft, agg_http_reply_t *r, json_t **meta,
                                     int grouped) {
    if (q->label_key || q->n_filters || grouped) {
        reply_err(r, 400, "endpoint", "endpoint '%s' cannot be combined with %s: a request's "
                  "samples are kept by span, without labels or dimensions", ep,
                  grouped ? "group_by" : q->label_key ? "label" : q->filters[0].key);
        return NULL;
    }
    agg_profile_t *p = NULL;
    int found = 0;
    int rc = agg_qstore_endpoint_query(api->qs, q, ep, &p, &found);
    if (rc) {
        reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
        return NULL;
    }
    if (!found) {
        reply_err(r, 404, "endpoint", "no request of endpoint '%s' of '%s' ended in the range "
                  "for these versions (see /api/v1/endpoints)", ep, q->service);
        agg_profile_free(p);
        return NULL;
    }
    return filtered_profile(p, ft, r, q, ep, meta);
}

/* As query_profile, also restricted to extra (NULL: none); spec_out (when given) gets the
 * query without extra and without reading the profile (its strings point into a). */
agg_profile_t *query_profile_by(agg_api_t *api, const args_t *a, agg_http_reply_t *r,
                                       const char *vparam, const char *from_p, const char *to_p,
                                       int replicates, int per_request, filt_t *ft,
                                       json_t **meta, const agg_qfilter_t *extra,
                                       agg_qspec_t *spec_out) {
    const char *svc;
    static __thread const char *vers[64]; /* spec_out points at them */
    static __thread char lkey[256];
    static __thread agg_qfilter_t dims[AGG_QMAX_FILTERS];
    const char *lval;
    cm_event_type_t type;
    int64_t from, to;
    long long exact, lines = 0;
    /* source lines and inlined frames: a profile's `lines=1`, and always in a pprof export */
    const char *fmt = arg(a, "format");
    int pprof = !replicates && fmt && !strcmp(fmt, "pprof");
    if (!replicates && parse_uint(a, "lines", pprof, 1, r, &lines))
        return NULL;
    if (need_service(a, r, &svc) || parse_type(a, "type", r, &type) ||
        parse_time(a, from_p, 0, r, &from) || parse_time(a, to_p, INT64_MAX / 4, r, &to) ||
        parse_label(a, r, lkey, sizeof lkey, &lval) || parse_uint(a, "exact", 0, 1, r, &exact))
        return NULL;
    if (to <= from) {
        reply_err(r, 400, to_p, "%s must be after %s", to_p, from_p);
        return NULL;
    }
    size_t nv = arg_all(a, vparam, vers, 64);
    agg_qversion_t *v;
    size_t n;
    if (load_service(api, svc, r, &v, &n))
        return NULL;
    int bad = check_versions(v, n, svc, vparam, vers, nv, r);
    agg_qversions_free(v, n);
    if (bad)
        return NULL;
    agg_qspec_t q = {.service = svc,
                     .versions = vers,
                     .n_versions = nv,
                     .type = type,
                     .from_s = from,
                     .to_s = to,
                     .label_key = lval ? lkey : NULL,
                     .label_value = lval,
                     .replicates = replicates,
                     .by_process = replicates != AGG_QREP_NONE, /* the diff's */
                     .exact = (int)exact,
                     .per_request = per_request,
                     .lines = (int)lines && pprof ? AGG_QLINES_ADDRESSES : (int)lines};
    q.n_filters = parse_dims(a, dims, 0, AGG_QMAX_FILTERS - 1);
    q.filters = dims;
    const char *ep = arg(a, "endpoint");
    if (ep && *ep)
        return endpoint_query(api, &q, ep, ft, r, meta, spec_out || extra);
    if (spec_out) {
        *spec_out = q;
        if (meta)
            *meta = json_pack("{s:s, s:I, s:I}", "service", svc, "from", (json_int_t)from, "to",
                              (json_int_t)(to == INT64_MAX / 4 ? 0 : to));
        return NULL;
    }
    if (extra)
        dims[q.n_filters++] = *extra;
    agg_profile_t *p = NULL;
    int rc = agg_qstore_profile(api->qs, &q, &p);
    if (rc) {
        reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
        return NULL;
    }
    return filtered_profile(p, ft, r, &q, NULL, meta);
}

/* group_by=KEY: the profile's samples split by a dimension (host, node, pod, container, pid,
 * io-target, fd-kind, lock) or label:KEY, heaviest first, at most group_limit (default 20)
 * groups, with the top `limit` (default 5) functions of each. */
static void h_groups(agg_api_t *api, const args_t *a, const char *by, agg_http_reply_t *r) {
    char key[256];
    const char *k = by;
    if (!strncmp(by, "label:", 6) && by[6])
        k = by + 6;
    else if (agg_dim_by_name(by) < 0) {
        snprintf(key, sizeof key, "%s", by);
        for (char *c = key; *c; c++)
            *c = *c == '_' ? '-' : *c;
        if (agg_dim_by_name(key) < 0) {
            reply_err(r, 400, "group_by", "group_by '%s' is not host, node, pod, container, pid, "
                      "io-target, fd-kind, lock or label:KEY", by);
            return;
        }
        k = key;
    }
    long long glimit, limit;
    if (parse_uint(a, "group_limit", 20, 10000, r, &glimit) ||
        parse_uint(a, "limit", 5, 1000, r, &limit))
        return;
    if (limit > 0 && glimit > AGG_API_MAX_GROUP_TOPS) { /* each group's top reruns the query */
        reply_err(r, 400, "group_limit", "group_limit %lld with limit %lld: the top functions of "
                  "at most %d groups are computed (one query each); lower group_limit or set "
                  "limit=0", glimit, limit, AGG_API_MAX_GROUP_TOPS);
        return;
    }
    filt_t ft;
    if (parse_filter(a, r, &ft))
        return;
    agg_qspec_t q;
    json_t *meta = NULL;
    if (query_profile_by(api, a, r, "version", "from", "to", 0, 0, &ft, &meta, NULL, &q) ||
        r->body) /* the reply holds the error */
        return;
    agg_qgroup_t *g = NULL;
    size_t n = 0;
    int rc = agg_qstore_groups(api->qs, &q, k, &g, &n);
    if (rc) {
        json_decref(meta);
        reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
        return;
    }
    uint64_t total = 0, total_count = 0;
    for (size_t i = 0; i < n; i++) {
        total += g[i].weight;
        total_count += g[i].count;
    }
    if (!total_count) {
        json_decref(meta);
        agg_qgroups_free(g, n);
        const char *t = arg(a, "type");
        reply_err(r, 404, "from", "no %s samples of service '%s' for these versions, time range "
                  "and filters", t && *t ? t : "cpu", arg(a, "service"));
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n && i < (size_t)glimit; i++) {
        char shown[1024]; /* a path need not be UTF-8; JSON must be */
        snprintf(shown, sizeof shown, "%s", g[i].value ? g[i].value : "");
        utf8_fix(shown);
        json_t *o = json_pack("{s:s?, s:I, s:f, s:f, s:I}", "value", g[i].value ? shown : NULL, "weight",
                              (json_int_t)g[i].weight, "share",
                              total ? (double)g[i].weight / (double)total : 0.0, "samples",
                              (double)g[i].count / CM_COUNT_ONE, "rows", (json_int_t)g[i].rows);
        if (g[i].value && limit > 0) {
            agg_qfilter_t f = {k, g[i].value};
            agg_http_reply_t r2 = {0};
            agg_profile_t *p =
                query_profile_by(api, a, &r2, "version", "from", "to", 0, 0, &ft, NULL, &f, NULL);
            agg_top_t t;
            if (p && agg_top_compute(p, AGG_SORT_SELF, (size_t)limit, &t) == 0) {
                json_t *tj = agg_top_json(p, &t);
                json_t *fns = tj ? json_object_get(tj, "functions") : NULL;
                if (fns)
                    json_object_set(o, "top", fns);
                json_decref(tj);
                agg_top_free(&t);
            }
            agg_profile_free(p);
            free(r2.body);
        }
        json_array_append_new(arr, o);
    }
    json_object_update_new(meta, json_pack("{s:s, s:s, s:s, s:I, s:f, s:o, s:I}", "group_by", k,
                                       "event_type", cm_event_name(q.type), "unit",
                                       agg_event_unit(q.type), "total", (json_int_t)total,
                                       "samples", (double)total_count / CM_COUNT_ONE, "groups",
                                       arr, "truncated",
                                       (json_int_t)(n > (size_t)glimit ? n - (size_t)glimit : 0)));
    agg_qgroups_free(g, n);
    reply_json(r, 200, meta);
}

void h_profile(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)url;
    const char *by = arg(a, "group_by");
    if (by && *by) {
        h_groups(api, a, by, r);
        return;
    }
    filt_t ft;
    if (parse_filter(a, r, &ft))
        return;
    json_t *meta = NULL;
    agg_profile_t *p = query_profile(api, a, r, "version", "from", "to", 0, 0, &ft, &meta);
    if (!p)
        return;
    if (!p->n_rows) {
        const char *t = arg(a, "type");
        reply_err(r, 404, "from", "no %s samples of service '%s' for these versions, time range "
                  "and label", t && *t ? t : "cpu", arg(a, "service"));
        json_decref(meta);
    } else {
        render_profile(a, p, meta, r);
    }
    agg_profile_free(p);
}
