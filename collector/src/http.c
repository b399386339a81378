/* /metrics (Prometheus text) and /healthz on a loopback address, served by libmicrohttpd.
 *
 * Threading: libmicrohttpd runs its own internal polling thread (one thread for all
 * connections). Handlers only read atomics from col_metrics (metrics.c), so the HTTP thread
 * never touches loop-owned state and a stalled loop cannot hang a scrape. /healthz answers
 * 503 when the loop's heartbeat (a 1 s timer in server.c) is older than 5 s: the process is
 * alive but not working. Kafka being down is NOT unhealthy (the spool covers it; restarting
 * would not help); it shows in the body and in fleetprof_collector_kafka_up. */
#include "internal.h"

#include "cm/error.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct col_http {
    struct MHD_Daemon *d;
};

static uint64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, char *body, size_t len,
                             const char *type) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **req_cls) {
    if (strcmp(method, "GET") && strcmp(method, "HEAD"))
        return reply(c, 405, strdup("method not allowed\n"), 19, "text/plain");
    if (!strcmp(url, "/metrics")) {
        char *body;
        size_t len;
        if (col_metrics_render(&body, &len))
            return MHD_NO;
        return reply(c, 200, body, len, "text/plain; version=0.0.4");
    }
    if (!strcmp(url, "/healthz")) {
        uint64_t hb = atomic_load_explicit(&col_metrics.heartbeat_ms, memory_order_relaxed);
        uint64_t age = mono_ms() - hb;
        int ok = age < 5000;
        char *body = malloc(256);
        if (!body)
            return MHD_NO;
        int n = snprintf(body, 256, "%s\nloop_heartbeat_age_ms %llu\nkafka_up %llu\n",
                         ok ? "ok" : "stalled", (unsigned long long)age,
                         (unsigned long long)atomic_load(&col_metrics.kafka_up));
        return reply(c, ok ? 200 : 503, body, (size_t)n, "text/plain");
    }
    return reply(c, 404, strdup("not found: try /metrics or /healthz\n"), 36, "text/plain");
}

int col_http_start(const col_config_t *cfg, col_http_t **out, char *errbuf, size_t errbuf_size) {
    *out = NULL;
    if (!strcmp(cfg->http_listen, "off") || !cfg->http_listen[0])
        return 0;
    char host[64];
    const char *colon = strrchr(cfg->http_listen, ':');
    long port = colon ? strtol(colon + 1, NULL, 10) : -1;
    size_t hl = colon ? (size_t)(colon - cfg->http_listen) : 0;
    struct sockaddr_in sa = {.sin_family = AF_INET};
    if (!colon || port <= 0 || port > 65535 || hl == 0 || hl >= sizeof host) {
        snprintf(errbuf, errbuf_size,
                 "http-listen='%s' is not ADDRESS:PORT (e.g. 127.0.0.1:9465, or 'off')",
                 cfg->http_listen);
        return CM_ECONFIG;
    }
    memcpy(host, cfg->http_listen, hl);
    host[hl] = 0;
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        snprintf(errbuf, errbuf_size, "http-listen='%s': '%s' is not an IPv4 address",
                 cfg->http_listen, host);
        return CM_ECONFIG;
    }
    sa.sin_port = htons((uint16_t)port);
    col_http_t *h = calloc(1, sizeof *h);
    if (!h)
        return -ENOMEM;
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, (uint16_t)port, NULL,
                            NULL, handler, NULL, MHD_OPTION_SOCK_ADDR, &sa,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)64,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10, MHD_OPTION_END);
    if (!h->d) {
        snprintf(errbuf, errbuf_size,
                 "cannot serve HTTP on http-listen='%s' (port in use?): pick another port or "
                 "'off'",
                 cfg->http_listen);
        free(h);
        return -EADDRINUSE;
    }
    *out = h;
    return 0;
}

void col_http_stop(col_http_t *h) {
    if (!h)
        return;
    MHD_stop_daemon(h->d);
    free(h);
}
