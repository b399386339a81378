/* Static serving of the embedded web UI (see ui.h): /, /index.html and the built assets, an
 * ETag per asset, gzip once per asset, the login page when a token is required and GET /login
 * that sets the token's cookie (auth.h).
 * Threading: handler on any HTTP thread; the gzip cache is built once (pthread_once). */
#define _GNU_SOURCE
#include "ui.h"

#include "auth.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <xxhash.h>
#include <zlib.h>

struct agg_ui {
    char *token;
};

#define MAX_ASSETS 32

typedef struct {
    unsigned char *gz; /* NULL when compression does not pay */
    size_t gz_len;
    char etag[24];
} cache_t;

static cache_t cache[MAX_ASSETS];
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

static void gzip_asset(const agg_ui_asset_t *a, cache_t *c) {
    z_stream z = {0};
    if (deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY) != Z_OK)
        return;
    size_t cap = deflateBound(&z, (uLong)a->len);
    unsigned char *out = malloc(cap);
    if (out) {
        z.next_in = (Bytef *)a->data;
        z.avail_in = (uInt)a->len;
        z.next_out = out;
        z.avail_out = (uInt)cap;
        if (deflate(&z, Z_FINISH) == Z_STREAM_END && z.total_out < a->len) {
            c->gz = out;
            c->gz_len = z.total_out;
            out = NULL;
        }
    }
    free(out);
    deflateEnd(&z);
}

static void build_cache(void) {
    for (size_t i = 0; i < MAX_ASSETS && agg_ui_assets[i].path; i++) {
        const agg_ui_asset_t *a = &agg_ui_assets[i];
        snprintf(cache[i].etag, sizeof cache[i].etag, "\"%016llx\"",
                 (unsigned long long)XXH3_64bits(a->data, a->len));
        if (strncmp(a->content_type, "image/png", 9))
            gzip_asset(a, &cache[i]);
    }
}

agg_ui_t *agg_ui_new(const char *token) {
    agg_ui_t *ui = calloc(1, sizeof *ui);
    if (ui && token && *token && !(ui->token = strdup(token))) {
        free(ui);
        return NULL;
    }
    return ui;
}

void agg_ui_free(agg_ui_t *ui) {
    if (!ui)
        return;
    free(ui->token);
    free(ui);
}

/* Served instead of the UI when the token is missing or wrong: sends the token typed to
 * GET /login in the Authorization header; the server answers with the cookie (HttpOnly: no
 * script of the page can read it back), then the page reloads. No external asset. */
static const char login_page[] =
    "<!doctype html><html><head><meta charset=utf-8><title>fleetprof: token</title>"
    "<style>body{font:15px system-ui,sans-serif;margin:4em auto;max-width:28em}"
    "input{font:inherit;width:100%;margin:.5em 0;padding:.3em}</style></head><body>"
    "<h1>fleetprof</h1><p>This aggregator needs its API token (<code>--api-token</code>)."
    "</p><form id=f><label>Token <input id=t type=password autocomplete=current-password "
    "autofocus></label><button>Open</button></form><p id=e></p><script>"
    "document.getElementById('f').onsubmit=function(ev){ev.preventDefault();"
    "fetch('/login',{headers:{Authorization:'Bearer '+document.getElementById('t').value}})"
    ".then(function(r){if(r.ok)location.reload();else document.getElementById('e')"
    ".textContent='That token is wrong.';});};</script></body></html>";

static _Atomic uint64_t login_failed; /* GET /login answered 401 (agg_ui_login_failures) */

uint64_t agg_ui_login_failures(void) { return login_failed; }

/* GET /login with the token in the Authorization header: 204 and the cookie (auth.h). A wrong
 * or missing token is counted and answered after AGG_UI_LOGIN_FAIL_DELAY_MS, so one connection
 * tries at most a few tokens a second (this connection's own thread waits; the others do not:
 * a shared queue of failures would let a guesser hold every thread). */
static void login(agg_ui_t *ui, agg_http_reply_t *r) {
    const char *h = agg_http_request_header("Authorization");
    if (!ui->token) {
        agg_http_reply_text(r, 404, "this aggregator has no API token: nothing to log in to\n");
    } else if (!h || strncasecmp(h, "Bearer ", 7) || !agg_auth_equal(ui->token, h + 7)) {
        login_failed++;
        struct timespec d = {0, AGG_UI_LOGIN_FAIL_DELAY_MS * 1000000L};
        while (nanosleep(&d, &d) && errno == EINTR) {
        }
        agg_http_reply_text(r, 401, "the token is wrong: send the aggregator's api-token as "
                            "'Authorization: Bearer TOKEN'\n");
    } else {
        r->status = 204;
        r->body_static = 1; /* no body */
        r->headers = agg_auth_set_cookie(ui->token);
        if (!r->headers)
            agg_http_reply_text(r, 500, "out of memory\n");
    }
}

static int header_has(const char *name, const char *needle) {
    const char *h = agg_http_request_header(name);
    return h && strstr(h, needle);
}

static void handler(void *arg, const char *url, const char *query, agg_http_reply_t *r) {
    (void)query;
    agg_ui_t *ui = arg;
    if (!strcmp(url, "/login")) {
        login(ui, r);
        return;
    }
    if (!agg_auth_ok(ui->token, NULL)) {
        r->status = 401;
        r->content_type = "text/html; charset=utf-8";
        r->body = (char *)login_page;
        r->len = sizeof login_page - 1;
        r->body_static = 1;
        r->headers = strdup("Cache-Control: no-store\nContent-Security-Policy: default-src "
                            "'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                            "connect-src 'self'\n");
        return;
    }
    const char *path = !strcmp(url, "/") ? "/index.html" : url;
    size_t i = 0;
    while (i < MAX_ASSETS && agg_ui_assets[i].path && strcmp(agg_ui_assets[i].path, path))
        i++;
    if (i == MAX_ASSETS || !agg_ui_assets[i].path) {
        agg_http_reply_text(r, 404, "not found; the UI is at /, the API under /api/v1/, "
                            "metrics at /metrics\n");
        return;
    }
    pthread_once(&cache_once, build_cache);
    const agg_ui_asset_t *a = &agg_ui_assets[i];
    const cache_t *c = &cache[i];
    int gz = c->gz && header_has("Accept-Encoding", "gzip");
    const char *inm = agg_http_request_header("If-None-Match");
    r->content_type = a->content_type;
    r->body_static = 1;
    if (inm && strstr(inm, c->etag)) {
        r->status = 304;
        r->body = NULL;
        r->len = 0;
    } else {
        r->status = 200;
        r->body = (char *)(gz ? c->gz : a->data);
        r->len = gz ? c->gz_len : a->len;
    }
    /* the UI calls only its own origin; inline styles are set by the chart library */
    if (asprintf(&r->headers,
                 "ETag: %s\nCache-Control: no-cache\nVary: Accept-Encoding\n%s"
                 "X-Content-Type-Options: nosniff\nReferrer-Policy: no-referrer\n"
                 "Content-Security-Policy: default-src 'self'; style-src 'self' 'unsafe-inline'; "
                 "img-src 'self' data: blob:; frame-ancestors 'none'\n",
                 c->etag, gz && r->status == 200 ? "Content-Encoding: gzip\n" : "") < 0)
        r->headers = NULL;
}

agg_http_route_t agg_ui_route(agg_ui_t *ui) {
    return (agg_http_route_t){"GET", "/", handler, ui};
}
