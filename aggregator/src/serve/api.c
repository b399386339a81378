/* HTTP routes of the query API (see api.h and aggregator/README.md "Query API"): the route
 * table, the token check, a store handle leased per request, the API's life cycle. Parameters
 * (params.c), replies (render.c) and the routes by resource (route_*.c): api_int.h.
 * Threading: handlers run on any thread, several at once: each request leases its own store
 * handle from the pool (qpool.h) and handlers see it as api->qs of a per-request copy of the
 * API (dispatch); everything else in agg_api_t is read-only after agg_api_new. A diff on a
 * PostgreSQL store may lease a second handle without waiting and read its test side with it
 * on a thread of its own, joined before the request ends (h_diff). */
#define _GNU_SOURCE
#include "api_int.h"

#include "auth.h"
#include "serve_incidents.h"
#include "reports.h"
#include "store_pg.h"

#include "cm/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* serve_incidents.c's handlers read the request's store handle through this */
agg_qstore_t *agg_api_qs(struct agg_api *api) { return api->qs; }

static int authorized(const agg_api_t *api, agg_http_reply_t *r) {
    const char *why = NULL;
    if (agg_auth_ok(api->token, &why))
        return 1;
    reply_err(r, 401, "Authorization",
              strcmp(why, "missing") ? "the API token in the Authorization header is wrong"
                : "this API needs a token: send 'Authorization: Bearer TOKEN' (fleetprof "
                  "--token or FLEETPROF_TOKEN)");
    return 0;
}

static void h_unknown(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)api;
    (void)a;
    reply_err(r, 404, NULL, "no route %s; see /api/v1/ routes: services, services/SERVICE/"
              "versions, event-types, profile, timeseries, diff, reports, spans, span, endpoints, "
              "endpoint, requests, insights, kpm, search, incidents, incident", url);
}

/* Runs a route with a store handle leased for this request (handlers see it as api->qs of a
 * copy of the API); 503 with Retry-After when every handle is busy and the queue is full or
 * the wait ran out. */
static void run_route(const route_t *rt, const args_t *a, const char *url, agg_http_reply_t *r) {
    agg_api_t *api = rt->api;
    agg_qpool_busy_t busy;
    agg_qstore_t *qs = NULL;
    int rc = agg_qpool_acquire(api->pool, &qs, &busy);
    if (rc == -EBUSY) {
        if (busy.timed_out)
            reply_err(r, 503, NULL, "the query API is saturated: all %zu query workers stayed "
                      "busy for the queue wait; retry later (api-workers, api-queue-wait)",
                      busy.running);
        else
            reply_err(r, 503, NULL, "the query API is saturated: %zu queries running and %zu "
                      "waiting; retry later (api-workers, api-queue)", busy.running,
                      busy.waiting);
        free(r->headers);
        r->headers = strdup("Retry-After: 1\n");
        return;
    }
    if (rc) {
        reply_err(r, 500, NULL, "cannot open the stores for this query: %s", cm_strerror(rc));
        return;
    }
    agg_api_t view = *api;
    view.qs = qs;
    rt->fn(&view, a, url, r);
    agg_qpool_release(api->pool, qs);
}

/* Runs the route with the request's arguments a (freed here) once they are checked: at most
 * MAX_ARGS, all valid UTF-8; else a 400. */
static void run_args(const route_t *rt, args_t *a, const char *url, agg_http_reply_t *r) {
    if (a->overflow)
        reply_err(r, 400, NULL, "too many query parameters (at most %d)", MAX_ARGS);
    else if (args_utf8(a, url, r))
        run_route(rt, a, url, r);
    args_free(a);
}

static void dispatch(void *arg_, const char *url, const char *query, agg_http_reply_t *r) {
    (void)query;
    route_t *rt = arg_;
    agg_api_t *api = rt->api;
    if (!authorized(api, r))
        return;
    args_t a = {0};
    agg_http_request_args(add_arg, &a);
    run_args(rt, &a, url, r);
}

size_t agg_api_routes(agg_api_t *api, agg_http_route_t *routes, size_t max) {
    static const struct {
        const char *path;
        route_fn fn;
    } tab[] = {
        {"/api/v1/services", h_services},     {"/api/v1/services/", h_versions},
        {"/api/v1/event-types", h_event_types}, {"/api/v1/profile", h_profile},
        {"/api/v1/timeseries", h_timeseries}, {"/api/v1/diff", h_diff},
        {"/api/v1/reports", h_reports},       {"/api/v1/spans", h_spans},
        {"/api/v1/span", h_span},             {"/api/v1/endpoints", h_endpoints},
        {"/api/v1/endpoint", h_endpoint},     {"/api/v1/requests", h_requests},
        {"/api/v1/endpoint-diff", h_endpoint_diff},
        {"/api/v1/insights", h_insights},
        {"/api/v1/kpm", h_kpm},               {"/api/v1/search", h_kpm},
        {"/api/v1/incidents", agg_serve_incidents}, {"/api/v1/incident", agg_serve_incident},
        {"/api/v1/", h_unknown},
    };
    size_t n = 0;
    for (size_t i = 0; i < sizeof tab / sizeof tab[0] && n < max && n < AGG_API_ROUTES; i++) {
        api->routes[n] = (route_t){api, tab[i].fn};
        routes[n] = (agg_http_route_t){"GET", tab[i].path, dispatch, &api->routes[n]};
        n++;
    }
    return n;
}

void agg_api_call(agg_api_t *api, const char *url, const char *const *keys,
                  const char *const *vals, size_t n, agg_http_reply_t *r) {
    agg_http_route_t routes[AGG_API_ROUTES];
    size_t nr = agg_api_routes(api, routes, AGG_API_ROUTES);
    const agg_http_route_t *best = NULL;
    for (size_t i = 0; i < nr; i++) { /* exact path, else the longest '/'-ended prefix */
        size_t pl = strlen(routes[i].path);
        if (!strcmp(url, routes[i].path)) {
            best = &routes[i];
            break;
        }
        if (routes[i].path[pl - 1] == '/' && !strncmp(url, routes[i].path, pl) &&
            (!best || strlen(best->path) < pl))
            best = &routes[i];
    }
    if (!best) {
        reply_err(r, 404, NULL, "no such route");
        return;
    }
    args_t a = {0};
    for (size_t i = 0; i < n && !a.overflow; i++)
        add_arg(&a, keys[i], vals[i]);
    run_args(best->arg, &a, url, r);
}

int agg_api_new(const agg_api_cfg_t *cfg, agg_api_t **out, char *err, size_t err_size) {
    agg_api_t *api = calloc(1, sizeof *api);
    if (!api)
        return CM_ENOMEM;
    api->store_dir = strdup(cfg->store_dir);
    api->report_min = agg_reports_min_samples(cfg->report_min_samples);
    api->report_min_set = cfg->report_min_samples > 0;
    api->token = cfg->token && *cfg->token ? strdup(cfg->token) : NULL;
    agg_qpool_cfg_t pc = {cfg->workers ? cfg->workers : AGG_API_DEFAULT_WORKERS,
                          cfg->queue_set ? cfg->queue : AGG_API_DEFAULT_QUEUE,
                          cfg->queue_wait_ms ? cfg->queue_wait_ms : AGG_API_DEFAULT_WAIT_MS};
    if (!api->store_dir) {
        agg_api_free(api);
        return CM_ENOMEM;
    }
    api->split_diff = cfg->store && agg_store_is_pg(cfg->store);
    int rc = agg_qpool_new(cfg->store && *cfg->store ? cfg->store : cfg->store_dir, &pc,
                           &api->pool, err, err_size);
    if (rc) {
        agg_api_free(api);
        return rc;
    }
    *out = api;
    return 0;
}

void agg_api_free(agg_api_t *api) {
    if (!api)
        return;
    agg_qpool_free(api->pool);
    free(api->store_dir);
    free(api->token);
    free(api);
}

char *agg_api_metrics(agg_api_t *api) {
    agg_qpool_stats_t st;
    agg_qpool_stats(api->pool, &st);
    char *out = NULL;
    if (asprintf(&out,
                 "# HELP fleetprof_aggregator_api_workers Query workers (store handles).\n"
                 "# TYPE fleetprof_aggregator_api_workers gauge\n"
                 "fleetprof_aggregator_api_workers %zu\n"
                 "# HELP fleetprof_aggregator_api_running Queries running now.\n"
                 "# TYPE fleetprof_aggregator_api_running gauge\n"
                 "fleetprof_aggregator_api_running %zu\n"
                 "# HELP fleetprof_aggregator_api_waiting Requests waiting for a worker now.\n"
                 "# TYPE fleetprof_aggregator_api_waiting gauge\n"
                 "fleetprof_aggregator_api_waiting %zu\n"
                 "# HELP fleetprof_aggregator_api_peak_running Most queries run at once.\n"
                 "# TYPE fleetprof_aggregator_api_peak_running gauge\n"
                 "fleetprof_aggregator_api_peak_running %zu\n"
                 "# HELP fleetprof_aggregator_api_requests_total API requests given a worker.\n"
                 "# TYPE fleetprof_aggregator_api_requests_total counter\n"
                 "fleetprof_aggregator_api_requests_total %llu\n"
                 "# HELP fleetprof_aggregator_api_saturated_total Requests answered 503 because "
                 "every worker was busy (queue full, or the wait ran out).\n"
                 "# TYPE fleetprof_aggregator_api_saturated_total counter\n"
                 "fleetprof_aggregator_api_saturated_total{why=\"queue_full\"} %llu\n"
                 "fleetprof_aggregator_api_saturated_total{why=\"wait_timeout\"} %llu\n"
                 "# HELP fleetprof_aggregator_api_wait_seconds_total Time requests waited for a "
                 "worker.\n"
                 "# TYPE fleetprof_aggregator_api_wait_seconds_total counter\n"
                 "fleetprof_aggregator_api_wait_seconds_total %.6f\n",
                 st.workers, st.running, st.waiting, st.peak_running,
                 (unsigned long long)st.leased, (unsigned long long)st.refused_full,
                 (unsigned long long)st.refused_timeout, st.wait_seconds) < 0)
        return NULL;
    return out;
}
