/* Web UI serving (aggregator/src/serve/ui.c, auth.c) over real HTTP: the embedded assets at / with
 * their content types, gzip that inflates to the exact embedded bytes, ETag revalidation (304),
 * 404 for unknown paths, every asset index.html references present; with an API token: the
 * login page (401) for the UI, the token accepted as Bearer header or as the UI's cookie (also
 * by the query API, URL-encoded), a wrong one refused by both; the cookie set by the server
 * (GET /login) with HttpOnly and SameSite=Strict.
 * Two servers (with and without token) run in main; each test runs in its own child. */
#include "api.h"
#include "aggtest.h"
#include "support/runner.h"
#include "ui.h"

#include <curl/curl.h>
#include <zlib.h>

#define TOKEN "t0k en;%x"
#define TOKEN_URLENC "t0k%20en%3B%25x"

static char open_url[64], tok_url[64];

typedef struct {
    long status;
    char *body, *hdr;
    size_t len, hlen;
} resp_t;

static size_t on_data(char *p, size_t s, size_t n, void *u) {
    resp_t *r = u;
    r->body = realloc(r->body, r->len + s * n + 1);
    memcpy(r->body + r->len, p, s * n);
    r->len += s * n;
    r->body[r->len] = 0;
    return s * n;
}

static size_t on_hdr(char *p, size_t s, size_t n, void *u) {
    resp_t *r = u;
    r->hdr = realloc(r->hdr, r->hlen + s * n + 1);
    memcpy(r->hdr + r->hlen, p, s * n);
    r->hlen += s * n;
    r->hdr[r->hlen] = 0;
    return s * n;
}

/* GET base+path with extra request headers (NULL-terminated). */
static resp_t get(const char *base, const char *path, const char *const *headers) {
    resp_t r = {0};
    r.body = calloc(1, 1);
    r.hdr = calloc(1, 1);
    char url[512];
    snprintf(url, sizeof url, "%s%s", base, path);
    CURL *c = curl_easy_init();
    struct curl_slist *hl = NULL;
    for (; headers && *headers; headers++)
        hl = curl_slist_append(hl, *headers);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_hdr);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    CURLcode rc = curl_easy_perform(c);
    CHECKF(rc == CURLE_OK, "GET %s: %s", url, curl_easy_strerror(rc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    return r;
}

/* The value of response header name (case-insensitive), copied into out ("" when absent). */
static const char *header(const resp_t *r, const char *name, char *out, size_t size) {
    out[0] = 0;
    size_t nl = strlen(name);
    for (const char *l = r->hdr; l && *l;) {
        const char *e = strstr(l, "\r\n");
        size_t len = e ? (size_t)(e - l) : strlen(l);
        if (len > nl && !strncasecmp(l, name, nl) && l[nl] == ':') {
            const char *v = l + nl + 1;
            while (*v == ' ')
                v++;
            snprintf(out, size, "%.*s", (int)(len - (size_t)(v - l)), v);
            return out;
        }
        l += len + (e ? 2 : 0);
    }
    return out;
}

static void resp_free(resp_t *r) {
    free(r->body);
    free(r->hdr);
}

static const agg_ui_asset_t *asset(const char *path) {
    for (const agg_ui_asset_t *a = agg_ui_assets; a->path; a++)
        if (!strcmp(a->path, path))
            return a;
    return NULL;
}

static void test_index_and_assets(void) {
    resp_t r = get(open_url, "/", NULL);
    char v[256];
    CHECK_EQ(r.status, 200);
    CHECKF(!strcmp(header(&r, "Content-Type", v, sizeof v), "text/html; charset=utf-8"), "%s", v);
    const agg_ui_asset_t *ix = asset("/index.html");
    CHECK(ix && r.len == ix->len && !memcmp(r.body, ix->data, r.len));
    /* every src= / href= of index.html is served, with a type that matches its extension */
    int refs = 0;
    for (const char *p = r.body; (p = strstr(p, "=\"/")); p += 3) {
        if (strncmp(p - 3, "src", 3) && strncmp(p - 4, "href", 4))
            continue;
        char path[128];
        sscanf(p + 2, "%127[^\"]", path);
        resp_t a = get(open_url, path, NULL);
        CHECKF(a.status == 200 && a.len > 100, "%s: %ld, %zu bytes", path, a.status, a.len);
        header(&a, "Content-Type", v, sizeof v);
        CHECKF(strstr(path, ".js") ? !strncmp(v, "text/javascript", 15) : !strncmp(v, "text/css", 8),
               "%s: %s", path, v);
        header(&a, "Content-Security-Policy", v, sizeof v);
        CHECKF(strstr(v, "default-src 'self'"), "%s: CSP %s", path, v);
        resp_free(&a);
        refs++;
    }
    CHECKF(refs == 2, "index.html references %d assets, want app.js and app.css", refs);
    resp_free(&r);
    r = get(open_url, "/LICENSES.txt", NULL);
    CHECK(r.status == 200 && strstr(r.body, "uplot"));
    resp_free(&r);
}

static void test_gzip_and_etag(void) {
    const agg_ui_asset_t *js = asset("/app.js");
    CHECK(js != NULL);
    const char *gz[] = {"Accept-Encoding: gzip, deflate", NULL};
    resp_t r = get(open_url, "/app.js", gz);
    char v[128], etag[64];
    CHECK_EQ(r.status, 200);
    CHECKF(!strcmp(header(&r, "Content-Encoding", v, sizeof v), "gzip"), "'%s'", v);
    CHECKF(r.len < js->len / 2, "gzip %zu of %zu bytes", r.len, js->len);
    /* inflates to exactly the embedded bytes */
    unsigned char *out = malloc(js->len + 16);
    z_stream z = {0};
    CHECK(inflateInit2(&z, 15 + 16) == Z_OK);
    z.next_in = (Bytef *)r.body;
    z.avail_in = (uInt)r.len;
    z.next_out = out;
    z.avail_out = (uInt)(js->len + 16);
    CHECK(inflate(&z, Z_FINISH) == Z_STREAM_END);
    CHECK_EQ(z.total_out, js->len);
    CHECK(!memcmp(out, js->data, js->len));
    inflateEnd(&z);
    free(out);
    header(&r, "ETag", etag, sizeof etag);
    CHECKF(strlen(etag) == 18 && etag[0] == '"', "etag %s", etag);
    resp_free(&r);
    /* without Accept-Encoding: identity, same ETag; revalidation: 304 without a body */
    r = get(open_url, "/app.js", NULL);
    CHECK(r.status == 200 && r.len == js->len && !header(&r, "Content-Encoding", v, sizeof v)[0]);
    CHECK(!strcmp(header(&r, "ETag", v, sizeof v), etag));
    resp_free(&r);
    char inm[96];
    snprintf(inm, sizeof inm, "If-None-Match: %s", etag);
    const char *h304[] = {inm, NULL};
    r = get(open_url, "/app.js", h304);
    CHECK_EQ(r.status, 304);
    CHECK_EQ(r.len, 0);
    resp_free(&r);
    const char *hother[] = {"If-None-Match: \"0000000000000000\"", NULL};
    r = get(open_url, "/app.js", hother);
    CHECK_EQ(r.status, 200);
    resp_free(&r);
}

static void test_not_found(void) {
    resp_t r = get(open_url, "/nope.js", NULL);
    CHECK_EQ(r.status, 404);
    resp_free(&r);
    r = get(open_url, "/api/v1/nope", NULL); /* the API's own 404, JSON */
    CHECK(r.status == 404 && strstr(r.body, "\"error\""));
    resp_free(&r);
    r = get(open_url, "/api/v1/services", NULL);
    CHECK(r.status == 200 && strstr(r.body, "\"services\""));
    resp_free(&r);
}

static void test_token(void) {
    /* no credential: the UI answers with the login page, the API with its JSON 401 */
    resp_t r = get(tok_url, "/", NULL);
    char v[128];
    CHECK_EQ(r.status, 401);
    CHECK(strstr(r.body, "<form") && strstr(r.body, "'/login'") && !strstr(r.body, "app.js"));
    CHECK(!strstr(r.body, "document.cookie")); /* the server sets the cookie, HttpOnly */
    resp_free(&r);
    r = get(tok_url, "/app.js", NULL);
    CHECK(r.status == 401 && !strstr(r.body, "uPlot"));
    resp_free(&r);
    r = get(tok_url, "/api/v1/services", NULL);
    CHECK(r.status == 401 && strstr(r.body, "needs a token"));
    resp_free(&r);
    /* the cookie the login page sets (encodeURIComponent of the token) opens both */
    const char *ck[] = {"Cookie: other=1; fleetprof_token=" TOKEN_URLENC "; x=y", NULL};
    r = get(tok_url, "/", ck);
    CHECK_EQ(r.status, 200);
    CHECK(strstr(r.body, "/app.js"));
    resp_free(&r);
    r = get(tok_url, "/api/v1/services", ck);
    CHECK_EQ(r.status, 200);
    resp_free(&r);
    /* the Bearer header too */
    const char *bearer[] = {"Authorization: Bearer " TOKEN, NULL};
    r = get(tok_url, "/app.css", bearer);
    CHECK_EQ(r.status, 200);
    CHECK(!strncmp(header(&r, "Content-Type", v, sizeof v), "text/css", 8));
    resp_free(&r);
    /* wrong or truncated tokens are refused by both */
    const char *bad[][2] = {{"Cookie: fleetprof_token=t0k%20en%3B", NULL},
                            {"Cookie: fleetprof_token=" TOKEN_URLENC "x", NULL},
                            {"Authorization: Bearer t0k", NULL}};
    for (size_t i = 0; i < 3; i++) {
        r = get(tok_url, "/", bad[i]);
        CHECKF(r.status == 401, "%s: %ld", bad[i][0], r.status);
        resp_free(&r);
        r = get(tok_url, "/api/v1/services", bad[i]);
        CHECKF(r.status == 401 && strstr(r.body, "wrong"), "%s: %ld %s", bad[i][0], r.status, r.body);
        resp_free(&r);
    }
}

/* The servers' agg_ui_login_failures() (they run in main's process, each test in a child),
 * through the route /test/login-failures that serve() adds. */
static uint64_t login_failures(void) {
    resp_t r = get(tok_url, "/test/login-failures", NULL);
    CHECK_EQ(r.status, 200);
    uint64_t n = strtoull(r.body, NULL, 10);
    resp_free(&r);
    return n;
}

/* GET /login with the token in the header: the server sets the cookie HttpOnly (no script of
 * the page can read it), SameSite=Strict, Secure behind an https proxy; a wrong token gets no
 * cookie. Before, the login page's JavaScript set it (none of those attributes). */
static void test_login_cookie(void) {
    char v[256];
    const char *bearer[] = {"Authorization: Bearer " TOKEN, NULL};
    resp_t r = get(tok_url, "/login", bearer);
    CHECK_EQ(r.status, 204);
    header(&r, "Set-Cookie", v, sizeof v);
    CHECKF(!strncmp(v, "fleetprof_token=" TOKEN_URLENC ";", strlen("fleetprof_token=" TOKEN_URLENC ";")),
           "%s", v);
    CHECKF(strstr(v, "; HttpOnly") && strstr(v, "; SameSite=Strict") && strstr(v, "; Path=/") &&
               !strstr(v, "Secure"),
           "%s", v);
    CHECK(!strcmp(header(&r, "Cache-Control", v, sizeof v), "no-store"));
    resp_free(&r);
    const char *https[] = {"Authorization: Bearer " TOKEN, "X-Forwarded-Proto: https", NULL};
    r = get(tok_url, "/login", https);
    CHECK_EQ(r.status, 204);
    CHECKF(strstr(header(&r, "Set-Cookie", v, sizeof v), "; Secure") != NULL, "%s", v);
    resp_free(&r);
    /* the cookie it set opens the UI and the API */
    const char *ck[] = {"Cookie: fleetprof_token=" TOKEN_URLENC, NULL};
    r = get(tok_url, "/api/v1/services", ck);
    CHECK_EQ(r.status, 200);
    resp_free(&r);
    /* wrong, missing: 401 and no cookie; no token configured: nothing to log in to */
    const char *wrong[] = {"Authorization: Bearer t0k en;%", NULL};
    uint64_t failed0 = login_failures();
    double t0 = at_now();
    r = get(tok_url, "/login", wrong);
    CHECK(r.status == 401 && !header(&r, "Set-Cookie", v, sizeof v)[0]);
    resp_free(&r);
    r = get(tok_url, "/login", NULL);
    CHECK(r.status == 401 && !header(&r, "Set-Cookie", v, sizeof v)[0]);
    resp_free(&r);
    /* each failure counted (the metric fleetprof_aggregator_ui_login_failed_total) and answered
     * no sooner than the delay: a guesser gets a few tries a second per connection */
    double took = at_now() - t0;
    CHECK_EQ(login_failures() - failed0, 2);
    CHECKF(took >= 2 * AGG_UI_LOGIN_FAIL_DELAY_MS / 1000.0, "two failures in %.3f s", took);
    r = get(open_url, "/login", bearer);
    CHECK(r.status == 404 && !header(&r, "Set-Cookie", v, sizeof v)[0]);
    resp_free(&r);
}

static const tr_test_t tests[] = {
    {"index_and_assets", test_index_and_assets},
    {"gzip_and_etag", test_gzip_and_etag},
    {"not_found", test_not_found},
    {"token", test_token},
    {"login_cookie", test_login_cookie},
    {0},
};

static void h_login_failures(void *arg, const char *url, const char *query,
                             agg_http_reply_t *r) {
    (void)arg, (void)url, (void)query;
    char n[32];
    snprintf(n, sizeof n, "%llu\n", (unsigned long long)agg_ui_login_failures());
    agg_http_reply_text(r, 200, n);
}

static agg_http_t *serve(const char *dir, const char *token, char *url, agg_api_t **api,
                         agg_ui_t **ui) {
    char err[512];
    agg_api_cfg_t cfg = {.store_dir = dir, .token = token};
    CHECKF(agg_api_new(&cfg, api, err, sizeof err) == 0, "%s", err);
    CHECK((*ui = agg_ui_new(token)) != NULL);
    agg_http_route_t routes[AGG_API_ROUTES + 3] = {{0}};
    size_t n = agg_api_routes(*api, routes, AGG_API_ROUTES);
    routes[n++] = (agg_http_route_t){"GET", "/test/login-failures", h_login_failures, NULL};
    routes[n] = agg_ui_route(*ui);
    agg_http_t *h = NULL;
    const agg_http_cfg_t hcfg = {.addr = "127.0.0.1"};
    CHECKF(agg_http_start(&hcfg, routes, &h, err, sizeof err) == 0, "%s", err);
    snprintf(url, 64, "http://127.0.0.1:%d", agg_http_port(h));
    return h;
}

int main(int argc, char **argv) {
    char dir[64];
    at_tmpdir(dir, "ui");
    curl_global_init(CURL_GLOBAL_ALL);
    agg_api_t *a1, *a2;
    agg_ui_t *u1, *u2;
    agg_http_t *h1 = serve(dir, NULL, open_url, &a1, &u1);
    agg_http_t *h2 = serve(dir, TOKEN, tok_url, &a2, &u2);
    int rc = tr_main(tests, argc, argv);
    agg_http_stop(h1);
    agg_http_stop(h2);
    agg_api_free(a1);
    agg_api_free(a2);
    agg_ui_free(u1);
    agg_ui_free(u2);
    curl_global_cleanup();
    return rc;
}
