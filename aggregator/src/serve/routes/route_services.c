/* Query API routes of what is stored (api_int.h): /api/v1/services, /services/SERVICE/versions,
 * /event-types and /timeseries.
 * Threading: any thread, on the request's leased store handle (api->qs). */
#include "api_int.h"

#include "cm/error.h"

#include <stdio.h>
#include <string.h>

void h_services(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)a;
    (void)url;
    agg_qversion_t *v;
    size_t n;
    int rc = agg_qstore_versions(api->qs, NULL, &v, &n);
    if (rc) {
        reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n;) {
        size_t j = i;
        int64_t first = v[i].first_ns, last = v[i].last_ns;
        uint64_t samples[CM_EV_COUNT] = {0};
        for (; j < n && !strcmp(v[j].service, v[i].service); j++) {
            first = v[j].first_ns < first ? v[j].first_ns : first;
            last = v[j].last_ns > last ? v[j].last_ns : last;
            for (int t = 1; t <= CM_EV_MAX; t++)
                samples[t] += v[j].samples[t];
        }
        json_array_append_new(arr, json_pack("{s:s, s:I, s:I, s:I, s:s, s:o}", "name",
                                             v[i].service, "versions", (json_int_t)(j - i),
                                             "first_ns", (json_int_t)first, "last_ns",
                                             (json_int_t)last, "latest_version",
                                             v[j - 1].version, "samples", samples_json(samples)));
        i = j;
    }
    agg_qversions_free(v, n);
    reply_json(r, 200, json_pack("{s:o}", "services", arr));
}

void h_versions(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)a;
    const char *rest = url + strlen("/api/v1/services/");
    const char *slash = strchr(rest, '/');
    if (!slash || strcmp(slash, "/versions") || slash == rest) {
        reply_err(r, 404, NULL, "no route %s; use /api/v1/services/SERVICE/versions", url);
        return;
    }
    char svc[256];
    snprintf(svc, sizeof svc, "%.*s", (int)(slash - rest), rest);
    agg_qversion_t *v;
    size_t n;
    if (load_service(api, svc, r, &v, &n))
        return;
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_pack("{s:s, s:I, s:I, s:I, s:f, s:I, s:o}", "version",
                                             v[i].version, "first_ns", (json_int_t)v[i].first_ns,
                                             "last_ns", (json_int_t)v[i].last_ns, "chunks",
                                             (json_int_t)v[i].chunks, "process_seconds",
                                             v[i].process_seconds, "work_units",
                                             (json_int_t)v[i].work_units, "samples",
                                             samples_json(v[i].samples)));
    agg_qversions_free(v, n);
    reply_json(r, 200, json_pack("{s:s, s:o}", "service", svc, "versions", arr));
}

void h_event_types(agg_api_t *api, const args_t *a, const char *url,
                          agg_http_reply_t *r) {
    (void)url;
    const char *svc = arg(a, "service");
    agg_qversion_t *v = NULL;
    size_t n = 0;
    uint64_t samples[CM_EV_COUNT] = {0};
    if (svc && *svc) {
        if (load_service(api, svc, r, &v, &n))
            return;
    } else if (agg_qstore_versions(api->qs, NULL, &v, &n)) {
        reply_err(r, 500, NULL, "store read failed");
        return;
    }
    for (size_t i = 0; i < n; i++)
        for (int t = 1; t <= CM_EV_MAX; t++)
            samples[t] += v[i].samples[t];
    agg_qversions_free(v, n);
    json_t *arr = json_array();
    for (int t = 1; t <= CM_EV_MAX; t++)
        json_array_append_new(arr, json_pack("{s:s, s:s, s:I}", "name", cm_event_name((uint32_t)t),
                                             "unit", agg_event_unit((cm_event_type_t)t),
                                             "samples", (json_int_t)samples[t]));
    reply_json(r, 200, json_pack("{s:o}", "event_types", arr));
}

void h_timeseries(agg_api_t *api, const args_t *a, const char *url,
                         agg_http_reply_t *r) {
    (void)url;
    const char *svc;
    cm_event_type_t type;
    int64_t from, to;
    char lkey[256];
    const char *lval;
    if (need_service(a, r, &svc) || parse_type(a, "type", r, &type) ||
        parse_time(a, "from", 0, r, &from) || parse_time(a, "to", INT64_MAX / 4, r, &to) ||
        parse_label(a, r, lkey, sizeof lkey, &lval))
        return;
    agg_qversion_t *v;
    size_t n;
    if (load_service(api, svc, r, &v, &n))
        return;
    json_t *deploys = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(deploys, json_pack("{s:s, s:I}", "version", v[i].version,
                                                 "first_ns", (json_int_t)v[i].first_ns));
    agg_qversions_free(v, n);
    agg_qseries_t s;
    agg_qfilter_t dims[AGG_QMAX_FILTERS];
    size_t nd = parse_dims(a, dims, 0, AGG_QMAX_FILTERS);
    int rc = agg_qstore_timeseries_label(api->qs, svc, type, from, to, lval ? lkey : NULL, lval,
                                         dims, nd, &s);
    if (rc) {
        json_decref(deploys);
        reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
        return;
    }
    json_t *series = json_array(), *cur = NULL, *pts = NULL;
    const char *cv = NULL;
    for (size_t i = 0; i < s.n; i++) {
        agg_qpoint_t *pt = &s.points[i];
        if (!cv || strcmp(cv, pt->version)) {
            cv = pt->version;
            pts = json_array();
            cur = json_pack("{s:s, s:o}", "version", cv, "points", pts);
            json_array_append_new(series, cur);
        }
        json_array_append_new(pts, json_pack("{s:I, s:I, s:I, s:f}", "bucket",
                                             (json_int_t)pt->bucket, "width", (json_int_t)pt->width,
                                             "value", (json_int_t)pt->weight, "samples",
                                             (double)pt->count / CM_COUNT_ONE));
    }
    agg_qseries_free(&s);
    reply_json(r, 200, json_pack("{s:s, s:s, s:s, s:o, s:o, s:s?}", "service", svc, "event_type",
                                 cm_event_name(type), "unit", agg_event_unit(type), "series",
                                 series, "deploys", deploys, "label", lval ? arg(a, "label") : NULL));
}
