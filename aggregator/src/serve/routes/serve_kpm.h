/* GET /api/v1/kpm (KPM time series of a service, or of its processes; Prometheus text of its
 * latest interval) and GET /api/v1/search (the process-intervals where a KPM is highest, or
 * rose most against the process's baseline, each with the link to its profile). See
 * aggregator/README.md, "Key performance metrics".
 * Threading: any HTTP thread, with the request's leased store handle. */
#ifndef AGG_SERVE_KPM_H
#define AGG_SERVE_KPM_H

#include "http.h"
#include "query_store.h"

/* The request's parameters besides service/from/to (parsed by route_insights.c): get(ctx, name) returns
 * a value or NULL. */
typedef const char *(*agg_param_fn)(const void *ctx, const char *name);

typedef struct {
    const char *service;
    int64_t from_s, to_s;
    agg_param_fn get;
    const void *ctx;
} agg_kpm_req_t;

void agg_serve_kpm(agg_qstore_t *qs, const agg_kpm_req_t *q, agg_http_reply_t *r);
void agg_serve_search(agg_qstore_t *qs, const agg_kpm_req_t *q, agg_http_reply_t *r);

#endif
