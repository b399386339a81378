/* Query API route /api/v1/reports (api_int.h): the per-deploy regression reports (reports.h),
 * each with the incidents of its new version ("incidents": links), and the deploy whose report
 * still waits for samples.
 * Threading: any thread, on the request's leased store handle (api->qs). */
#include "api_int.h"

#include "reports.h"
#include "serve_incidents.h"

#include "cm/error.h"

void h_reports(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)url;
    const char *svc = arg(a, "service");
    json_t *waiting = NULL; /* the service's newest deploy, while its report waits */
    if (svc && *svc) {
        agg_qversion_t *v;
        size_t n;
        if (load_service(api, svc, r, &v, &n))
            return;
        /* versions by first seen: the newest against the one before, as the reporter does */
        if (n >= 2 && ((int64_t)v[n - 1].samples[CM_EV_CPU] < api->report_min ||
                       (int64_t)v[n - 2].samples[CM_EV_CPU] < api->report_min))
            waiting = json_pack("{s:s, s:s, s:I, s:I}", "base", v[n - 2].version, "test",
                                v[n - 1].version, "base_samples",
                                (json_int_t)v[n - 2].samples[CM_EV_CPU], "test_samples",
                                (json_int_t)v[n - 1].samples[CM_EV_CPU]);
        agg_qversions_free(v, n);
    }
    long long limit;
    if (parse_uint(a, "limit", 20, 1000, r, &limit)) {
        json_decref(waiting);
        return;
    }
    json_t *arr = NULL;
    int rc = agg_reports_list(api->store_dir, svc && *svc ? svc : NULL, (size_t)limit, &arr);
    if (rc) {
        json_decref(waiting);
        reply_err(r, 500, NULL, "reading reports failed: %s", cm_strerror(rc));
        return;
    }
    /* each deploy's incidents: those of its new version (links) */
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *rep = json_array_get(arr, i);
        const char *rs = json_string_value(json_object_get(rep, "service"));
        const char *rv = json_string_value(json_object_get(rep, "test"));
        json_t *inc = rs && rv ? agg_incidents_overlapping(api->qs, rs, rv, 0, INT64_MAX,
                                                           AGG_INCIDENT_LINKS)
                               : NULL;
        if (inc)
            json_object_set_new(rep, "incidents", inc);
    }
    /* what a report waits for, and (one service) the deploy that waits */
    reply_json(r, 200, json_pack("{s:o, s:I, s:s, s:o*}", "reports", arr, "min_samples",
                                 (json_int_t)api->report_min, "min_samples_reason",
                                 api->report_min_set
                                     ? "CPU samples per side, set by --report-min-samples"
                                     : "CPU samples per side a new function taking 2% of the "
                                       "CPU needs to be found with 90% probability",
                                 "waiting", waiting));
}
