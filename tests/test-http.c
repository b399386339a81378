/* The aggregator's HTTP guards (aggregator/src/serve/http.c, issue 28) over real sockets: the Host
 * allow-list against DNS rebinding, admission under hundreds of idle half-sent connections
 * (/healthz and an authorised query still answer within 1 s), the header deadline that a
 * byte-at-a-time sender cannot extend, filter patterns that would blow up a regex engine
 * refused at once (400), and the real binary reading its token from --api-token-file.
 * Servers run in main (in-process, like test-ui); each test runs in its own child. */
#include "aggtest.h"
#include "api.h"
#include "http.h"
#include "support/runner.h"

#include <arpa/inet.h>
#include <errno.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define TOKEN "h77p-token"
#define IDLE 600 /* the figure: 515 were enough to fill the 512 threads */

static int tok_port, open_port, fast_port; /* fast: header timeout 1 s */
static char dir[64];

typedef struct {
    long status;
    char body[4096];
    size_t len;
    double secs;
} resp_t;

static size_t on_data(char *p, size_t s, size_t n, void *u) {
    resp_t *r = u;
    size_t k = s * n < sizeof r->body - 1 - r->len ? s * n : sizeof r->body - 1 - r->len;
    memcpy(r->body + r->len, p, k);
    r->len += k;
    r->body[r->len] = 0;
    return s * n;
}

/* GET http://127.0.0.1:port/path with Host (NULL: curl's own) and, when token, the Bearer
 * header. A transport error fails the test (status -1 when !must_answer). */
static resp_t get_host(int port, const char *path, const char *host, const char *token,
                       int must_answer) {
    resp_t r = {0};
    char url[512], hh[300], auth[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", port, path);
    CURL *c = curl_easy_init();
    struct curl_slist *hl = NULL;
    if (host) {
        snprintf(hh, sizeof hh, "Host: %s", host);
        hl = curl_slist_append(hl, hh);
    }
    if (token) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
        hl = curl_slist_append(hl, auth);
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    double t0 = at_now();
    CURLcode rc = curl_easy_perform(c);
    r.secs = at_now() - t0;
    if (must_answer)
        CHECKF(rc == CURLE_OK, "GET %s: %s after %.3f s", url, curl_easy_strerror(rc), r.secs);
    r.status = rc == CURLE_OK ? 0 : -1;
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(hl);
    curl_easy_cleanup(c);
    return r;
}

/* A foreign Host (a DNS rebinding page's name) is refused; IP literals, localhost, *.localhost
 * and the configured names are served. Before: every Host got the profiles. */
static void test_host_allow_list(void) {
    const char *refused[] = {"attacker.example",  "attacker.example:9402", "localhost.attacker.example",
                             "example.org",       "evilcorp.example",      "127.0.0.1.nip.io",
                             "profiles.example.org.attacker.example"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        resp_t r = get_host(open_port, "/api/v1/services", refused[i], NULL, 1);
        CHECKF(r.status == 403 && strstr(r.body, "http-allowed-hosts") &&
                   !strstr(r.body, "services"),
               "Host %s: %ld %s", refused[i], r.status, r.body);
        r = get_host(tok_port, "/", refused[i], TOKEN, 1);
        CHECKF(r.status == 403, "Host %s on the UI: %ld", refused[i], r.status);
    }
    const char *served[] = {"localhost",       "LOCALHOST:9402",   "localhost.",
                            "127.0.0.1:9402",  "[::1]:9402",       "10.1.2.3",
                            "ui.localhost",    "profiles.example.org", "a.corp.example",
                            "corp.example:80"};
    for (size_t i = 0; i < sizeof served / sizeof *served; i++) {
        resp_t r = get_host(open_port, "/api/v1/services", served[i], NULL, 1);
        CHECKF(r.status == 200 && strstr(r.body, "\"services\""), "Host %s: %ld %s", served[i],
               r.status, r.body);
    }
}

/* Opens a TCP connection from src (an address of 127/8) that sends half a request header. */
static int half_sent(const char *src, int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    CHECK(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    inet_pton(AF_INET, src, &a.sin_addr);
    CHECK(bind(fd, (struct sockaddr *)&a, sizeof a) == 0);
    a.sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    CHECKF(connect(fd, (struct sockaddr *)&a, sizeof a) == 0, "connect: %s", strerror(errno));
    static const char part[] = "GET /api/v1/services HTTP/1.1\r\nHo";
    CHECK(write(fd, part, sizeof part - 1) == (ssize_t)(sizeof part - 1));
    return fd;
}

/* /healthz and an authorised query answer 200 within 1 s. */
static void probe(const char *when) {
    resp_t r = get_host(tok_port, "/healthz", NULL, NULL, 1);
    CHECKF(r.status == 200 && r.secs < 1.0, "%s: /healthz %ld after %.3f s", when, r.status, r.secs);
    r = get_host(tok_port, "/api/v1/services", NULL, TOKEN, 1);
    CHECKF(r.status == 200 && r.secs < 1.0, "%s: query %ld after %.3f s", when, r.status, r.secs);
}

/* Waits (at most 30 s) until the server has taken every connection in: at least want of fds
 * were closed by it (those past a cap), the rest stay open. A sanitizer build starts the 600
 * threads slowly; the probes measure the steady state, not the accept backlog. */
static void wait_closed(const int *fds, int n, int want) {
    int closed = 0;
    for (double end = at_now() + 30; at_now() < end; at_sleep_ms(50)) {
        closed = 0;
        for (int i = 0; i < n; i++) {
            struct pollfd pf = {fds[i], POLLIN, 0};
            closed += poll(&pf, 1, 0) == 1;
        }
        if (closed >= want)
            break;
    }
    CHECKF(closed >= want, "%d of %d connections closed by the server, want %d", closed, n, want);
    at_sleep_ms(200);
}

/* 600 idle half-sent connections, first spread over six addresses (the server's cap), then
 * all from the prober's own address (the per-address cap): the probes still get through. */
static void test_idle_connections(void) {
    int fds[IDLE];
    char src[32];
    for (int i = 0; i < IDLE; i++) {
        snprintf(src, sizeof src, "127.0.0.%d", 2 + i % 6);
        fds[i] = half_sent(src, tok_port);
    }
    wait_closed(fds, IDLE, IDLE - AGG_HTTP_MAX_CONNECTIONS);
    probe("600 idle from 6 addresses");
    for (int i = 0; i < IDLE; i++)
        close(fds[i]);
    for (int i = 0; i < IDLE; i++)
        fds[i] = half_sent("127.0.0.1", tok_port);
    wait_closed(fds, IDLE, IDLE - AGG_HTTP_MAX_PER_ADDRESS);
    probe("600 idle from the prober's address");
    /* and the oldest idle ones were the ones closed: the first is gone, the last still open */
    char b;
    struct pollfd pf = {fds[0], POLLIN, 0};
    CHECK(poll(&pf, 1, 1000) == 1 && read(fds[0], &b, 1) <= 0);
    pf.fd = fds[IDLE - 1];
    CHECK(poll(&pf, 1, 0) == 0);
    for (int i = 0; i < IDLE; i++)
        close(fds[i]);
}

/* A client sending one header byte every 100 ms is closed when the header timeout (1 s here)
 * runs out, counted from its accept: each byte does not buy more time. Before: each byte reset
 * a 30 s idle timeout, forever. */
static void test_header_deadline(void) {
    int fd = half_sent("127.0.0.1", fast_port);
    double t0 = at_now(), closed = 0;
    while (at_now() - t0 < 4 && !closed) {
        if (write(fd, "a", 1) != 1) { /* EPIPE: closed */
            closed = at_now() - t0;
            break;
        }
        struct pollfd pf = {fd, POLLIN, 0};
        char b;
        if (poll(&pf, 1, 100) == 1 && read(fd, &b, 1) <= 0)
            closed = at_now() - t0;
    }
    CHECKF(closed >= 0.9 && closed < 2.0, "closed after %.2f s (0: still open after 4 s)", closed);
    close(fd);
    resp_t r = get_host(fast_port, "/healthz", NULL, NULL, 1); /* the server serves on */
    CHECK_EQ(r.status, 200);
}

/* Patterns that make an expanding or backtracking engine take seconds and gigabytes are
 * refused before any store read: 400 naming the parameter, within 100 ms. */
static void test_patterns_bounded(void) {
    const char *q[] = {"include=((a{1,100}){1,100}){1,100}", "exclude=(a{1,1000}){1,1000}",
                       "fold=(a{1,1000}){1,1000}", "group=((a{1,100}){1,100}){1,100}->x"};
    const char *param[] = {"include", "exclude", "fold", "group"};
    for (size_t i = 0; i < 4; i++) {
        char path[256];
        snprintf(path, sizeof path, "/api/v1/profile?service=svc&%s", q[i]);
        resp_t r = get_host(open_port, path, NULL, NULL, 1);
        char want[64];
        snprintf(want, sizeof want, "\"parameter\":\"%s\"", param[i]);
        CHECKF(r.status == 400 && strstr(r.body, want) && r.secs < 0.1, "%s: %ld in %.3f s: %s",
               q[i], r.status, r.secs, r.body);
    }
    /* and group_by's per-group reruns are bounded */
    resp_t r = get_host(open_port, "/api/v1/profile?service=svc&group_by=pid&group_limit=10000",
                        NULL, NULL, 1);
    CHECKF(r.status == 400 && strstr(r.body, "\"parameter\":\"group_limit\""), "%ld %s",
           r.status, r.body);
}

/* A TCP port nothing listens on now. */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t l = sizeof a;
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
          getsockname(fd, (struct sockaddr *)&a, &l) == 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* The real binary: --api-token-file (the token out of ps), and its errors. */
static void test_token_file(void) {
    char tf[128], log[128], sd[128];
    snprintf(tf, sizeof tf, "%s/token", dir);
    snprintf(log, sizeof log, "%s/agg.log", dir);
    snprintf(sd, sizeof sd, "%s/store", dir);
    CHECK(mkdir(sd, 0755) == 0 || errno == EEXIST);
    FILE *f = fopen(tf, "w");
    CHECK(f && fputs(TOKEN "\n", f) >= 0 && fclose(f) == 0);
    int port = free_port();
    const char *extra[] = {"--api-token-file", tf, NULL};
    pid_t pid = at_agg_start("127.0.0.1:1", sd, "http-test", port, log, extra);
    CHECK(pid > 0);
    resp_t r = {0};
    for (double end = at_now() + 10; at_now() < end; at_sleep_ms(100)) {
        r = get_host(port, "/api/v1/services", NULL, NULL, 0);
        if (r.status > 0)
            break;
    }
    CHECKF(r.status == 401, "without the token: %ld %s", r.status, r.body);
    r = get_host(port, "/api/v1/services", NULL, TOKEN, 1);
    CHECKF(r.status == 200, "with the file's token: %ld %s", r.status, r.body);
    CHECK(at_agg_stop(pid, SIGTERM, 20) >= 0);
    /* an empty file, or both options: refused at start with the reason */
    f = fopen(tf, "w");
    CHECK(f && fclose(f) == 0);
    pid = at_agg_start("127.0.0.1:1", sd, "http-test", port, log, extra);
    int st;
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 2);
    const char *both[] = {"--api-token-file", tf, "--api-token", "x", NULL};
    pid = at_agg_start("127.0.0.1:1", sd, "http-test", port, log, both);
    CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 2);
    char text[8192] = "";
    f = fopen(log, "r");
    CHECK(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    CHECKF(strstr(text, "is empty") && strstr(text, "both set"), "%s", text);
}

static const tr_test_t tests[] = {
    {"host_allow_list", test_host_allow_list},
    {"idle_connections", test_idle_connections},
    {"header_deadline", test_header_deadline},
    {"patterns_bounded", test_patterns_bounded},
    {"token_file", test_token_file},
    {0},
};

static void healthz(void *arg, const char *url, const char *query, agg_http_reply_t *r) {
    (void)arg, (void)url, (void)query;
    agg_http_reply_text(r, 200, "ok\n");
}

static agg_http_t *serve(const char *token, int header_timeout_ms, agg_api_t **api, int *port) {
    char err[512];
    agg_api_cfg_t cfg = {.store_dir = dir, .token = token};
    CHECKF(agg_api_new(&cfg, api, err, sizeof err) == 0, "%s", err);
    agg_http_route_t routes[AGG_API_ROUTES + 2] = {{"GET", "/healthz", healthz, NULL}};
    size_t n = 1 + agg_api_routes(*api, routes + 1, AGG_API_ROUTES);
    routes[n] = (agg_http_route_t){0};
    agg_http_t *h = NULL;
    const agg_http_cfg_t hc = {.addr = "127.0.0.1",
                               .allowed_hosts = "profiles.example.org, .corp.example",
                               .header_timeout_ms = header_timeout_ms};
    CHECKF(agg_http_start(&hc, routes, &h, err, sizeof err) == 0, "%s", err);
    *port = agg_http_port(h);
    return h;
}

int main(int argc, char **argv) {
    at_tmpdir(dir, "http");
    curl_global_init(CURL_GLOBAL_ALL);
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl; /* the idle clients and the server's side of them in one process */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 4096) {
        rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    agg_api_t *a1, *a2, *a3;
    agg_http_t *h1 = serve(TOKEN, 60000, &a1, &tok_port);
    agg_http_t *h2 = serve(NULL, 60000, &a2, &open_port);
    agg_http_t *h3 = serve(NULL, 1000, &a3, &fast_port);
    int rc = tr_main(tests, argc, argv);
    agg_http_stop(h1);
    agg_http_stop(h2);
    agg_http_stop(h3);
    agg_api_free(a1);
    agg_api_free(a2);
    agg_api_free(a3);
    curl_global_cleanup();
    return rc;
}
