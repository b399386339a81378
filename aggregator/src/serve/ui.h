/* The web UI: static assets (ui/dist, embedded into the binary at build time by
 * aggregator/cmake/embed-ui.cmake) served at / by the aggregator's HTTP server, next to the
 * query API it calls (/api/v1/...). With an API token, the UI is protected too: a request
 * without the token (Bearer header or the fleetprof_token cookie, see auth.h) gets a small
 * login page that stores the token in that cookie.
 *
 * Assets are served with an ETag (If-None-Match -> 304), Cache-Control: no-cache, and gzip when
 * the client accepts it (compressed once, on first use).
 *
 * Threading: the handler runs on the HTTP server's threads, concurrently; the gzip cache is
 * built once under pthread_once and read-only afterwards.
 */
#ifndef AGG_UI_H
#define AGG_UI_H

#include "http.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *path; /* "/index.html", "/app.js", ...; NULL ends the table */
    const char *content_type;
    const unsigned char *data;
    size_t len;
} agg_ui_asset_t;

/* The embedded assets (generated file). */
extern const agg_ui_asset_t agg_ui_assets[];

typedef struct agg_ui agg_ui_t;

/* token: NULL or "" for no authentication (copied). NULL when out of memory. */
agg_ui_t *agg_ui_new(const char *token);
void agg_ui_free(agg_ui_t *ui);

#define AGG_UI_LOGIN_FAIL_DELAY_MS 250 /* a wrong token's answer from GET /login waits this */

/* GET /login requests answered 401 (wrong or missing token) since the process started. */
uint64_t agg_ui_login_failures(void);

/* The UI's route: a prefix route for "/" (put it last in the table: it matches any path). */
agg_http_route_t agg_ui_route(agg_ui_t *ui);

#endif
