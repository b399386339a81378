/* The aggregator's query API (HTTP, JSON with jansson): routes under /api/v1/ mounted into the
 * HTTP server's route table (http.h). See aggregator/README.md "Query API" for every route,
 * its parameters and its errors (400 naming the parameter, 404 unknown service/version/span or
 * no data, 401 without the token).
 *
 * Threading: handlers run on the HTTP server's threads, several at once: each request leases
 * one of `workers` store handles (qpool.h); at most `queue` requests wait for one, each at most
 * `queue_wait_ms`; past that the answer is 503 with Retry-After.
 */
#ifndef AGG_API_H
#define AGG_API_H

#include "http.h"

#include <stddef.h>
#include <stdint.h>

#define AGG_API_DEFAULT_WORKERS 8
#define AGG_API_DEFAULT_QUEUE 64
#define AGG_API_DEFAULT_WAIT_MS 10000

typedef struct {
    const char *store_dir;
    const char *token;     /* NULL or "": no authentication */
    size_t workers;        /* queries at once (0: AGG_API_DEFAULT_WORKERS) */
    size_t queue;          /* requests that may wait for a worker (when queue_set) */
    int queue_set;         /* 0: AGG_API_DEFAULT_QUEUE */
    int64_t queue_wait_ms; /* longest wait for a worker (0: AGG_API_DEFAULT_WAIT_MS) */
    const char *store;     /* NULL/"": the SQLite stores in store_dir; else the postgres:// URL
                            * the queries read (a connection per worker); reports.db stays in
                            * store_dir */
    int64_t report_min_samples; /* the reporter's --report-min-samples (0: its default) */
} agg_api_cfg_t;

typedef struct agg_api agg_api_t;

/* Returns 0 or a negative code with the reason in err. */
int agg_api_new(const agg_api_cfg_t *cfg, agg_api_t **out, char *err, size_t err_size);
void agg_api_free(agg_api_t *api);

/* Writes the API's routes into routes[0..max) and returns how many (at most AGG_API_ROUTES). */
#define AGG_API_ROUTES 32
/* group_by with limit > 0: the groups whose top functions are computed, one query each */
#define AGG_API_MAX_GROUP_TOPS 100
size_t agg_api_routes(agg_api_t *api, agg_http_route_t *routes, size_t max);

/* Prometheus text of the query workers (running, waiting, saturated); malloc'ed or NULL. */
char *agg_api_metrics(agg_api_t *api);

/* Tests and fuzzing: runs the route serving url with the decoded query arguments keys[i] =
 * vals[i] (as the HTTP server passes them), without the token check. */
void agg_api_call(agg_api_t *api, const char *url, const char *const *keys,
                  const char *const *vals, size_t n, agg_http_reply_t *r);

#endif
