/* Query API route /api/v1/insights (api_int.h): its parameters, then the insight rules over
 * the store (serve/insights.c).
 * Threading: any thread, on the request's leased store handle (api->qs). */
#include "api_int.h"

#include "serve/insights.h"

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
