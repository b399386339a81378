/* Query API routes /api/v1/insights, /api/v1/kpm and /api/v1/search (api_int.h): their
 * parameters, then the insight rules (serve_insights.c) or the KPMs (serve_kpm.c) over the store.
 * Threading: any thread, on the request's leased store handle (api->qs). */
#include "api_int.h"

#include "serve_insights.h"
#include "serve_kpm.h"

#include <string.h>

/* GET /api/v1/insights?service=S[&version=V][&from=&to=] (default: the last hour). */
void h_insights(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)url;
    const char *svc, *ver = arg(a, "version");
    int64_t from, to;
    agg_qversion_t *v;
    size_t n;
    if (need_service(a, r, &svc) || parse_time(a, "from", now_s() - 3600, r, &from) ||
        parse_time(a, "to", now_s() + 60, r, &to) || load_service(api, svc, r, &v, &n))
        return;
    agg_qversions_free(v, n);
    agg_serve_insights(api->qs, svc, ver && *ver ? ver : NULL, from, to, r);
}

static const char *kpm_param(const void *a, const char *k) { return arg(a, k); }

/* GET /api/v1/kpm and /api/v1/search (serve_kpm.c; default window: the last hour). */
void h_kpm(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    agg_kpm_req_t q = {.get = kpm_param, .ctx = a};
    agg_qversion_t *v;
    size_t n;
    if (need_service(a, r, &q.service) || parse_time(a, "from", now_s() - 3600, r, &q.from_s) ||
        parse_time(a, "to", now_s() + 60, r, &q.to_s) || load_service(api, q.service, r, &v, &n))
        return;
    agg_qversions_free(v, n);
    if (!strcmp(url, "/api/v1/search"))
        agg_serve_search(api->qs, &q, r);
    else
        agg_serve_kpm(api->qs, &q, r);
}
