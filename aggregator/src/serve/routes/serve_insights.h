/* GET /api/v1/insights: the insight rules (aggregator/query/insights/insights.h) over one service, or
 * one of its versions, in a window, as JSON with a link to the profile filtered to each piece
 * of evidence. See aggregator/README.md "Insights".
 * Threading: any HTTP thread, with the request's leased store handle. */
#ifndef AGG_SERVE_INSIGHTS_H
#define AGG_SERVE_INSIGHTS_H

#include "http.h"
#include "query_store.h"

#include <jansson.h>

/* The insights of service (version NULL: all) over buckets [from_s, to_s) as the route's JSON
 * ({"service","version","from","to","insights":[...],"evaluated"}). Returns 0 or a CM_E* code. */
int agg_insights_query(agg_qstore_t *qs, const char *service, const char *version,
                       int64_t from_s, int64_t to_s, json_t **out);

/* The insights of version test of service that version base does not have (a rule that did
 * not fire for base), over each version's whole history: the per-deploy report's
 * `new_insights` (reports.c). *out: a JSON array. Returns 0 or a CM_E* code. */
int agg_insights_new_in_version(agg_qstore_t *qs, const char *service, const char *base,
                                const char *test, json_t **out);

/* The route's answer into r (200, or 500 naming the store error). */
void agg_serve_insights(agg_qstore_t *qs, const char *service, const char *version,
                        int64_t from_s, int64_t to_s, agg_http_reply_t *r);

#endif
