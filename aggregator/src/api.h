/* The aggregator's query API (HTTP, JSON with jansson): routes under /api/v1/ mounted into the
 * HTTP server's route table (http.h). See aggregator/README.md "Query API" for every route,
 * its parameters and its errors (400 naming the parameter, 404 unknown service/version/span or
 * no data, 401 without the token).
 *
 * Threading: handlers run on the HTTP server's thread; the API's store handle is guarded by a
 * mutex, so handlers may also run on several threads.
 */
#ifndef AGG_API_H
#define AGG_API_H

#include "http.h"

#include <stddef.h>

typedef struct {
    const char *store_dir;
    const char *token; /* NULL or "": no authentication */
} agg_api_cfg_t;

typedef struct agg_api agg_api_t;

/* Returns 0 or a negative code with the reason in err. */
int agg_api_new(const agg_api_cfg_t *cfg, agg_api_t **out, char *err, size_t err_size);
void agg_api_free(agg_api_t *api);

/* Writes the API's routes into routes[0..max) and returns how many (at most AGG_API_ROUTES). */
#define AGG_API_ROUTES 12
size_t agg_api_routes(agg_api_t *api, agg_http_route_t *routes, size_t max);

/* Tests and fuzzing: runs the route serving url with the decoded query arguments keys[i] =
 * vals[i] (as the HTTP server passes them), without the token check. */
void agg_api_call(agg_api_t *api, const char *url, const char *const *keys,
                  const char *const *vals, size_t n, agg_http_reply_t *r);

#endif
