/* HTTP server with a route table (see http.h), on libmicrohttpd's internal threads: one
 * thread per connection (at most AGG_HTTP_MAX_CONNECTIONS plus a slack), so a slow request
 * never holds up another connection's.
 *
 * Admission (http.h): every connection has an entry in a fixed table (conns), added when
 * libmicrohttpd reports it started and removed when it reports it closed, which it does before
 * it closes the socket, so an entry's fd is always the connection's own. An entry is "idle"
 * from its accept, or from the end of its previous request, until its next request's header is
 * complete (answer()). To close a connection from outside its thread, the table shuts its
 * socket down (shutdown(2)): the connection's thread sees the end of the stream and closes it.
 * A reaper thread closes the connections idle past the header timeout; the start notification
 * closes the longest-idle connection of an address, or of the server, at its cap.
 *
 * Threading: handlers run on any connection's thread, concurrently; the table and the
 * counters are under h->lock, never held across a handler or any I/O but shutdown(2). */
#define _GNU_SOURCE
#include "http.h"

#include "cm/error.h"
#include "cm/log.h"
#include "cm/thread.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#define TABLE_SIZE (AGG_HTTP_MAX_CONNECTIONS + AGG_HTTP_CONNECTION_SLACK)
#define MAX_HOSTS 32

typedef struct {
    int used;
    int fd;
    uint32_t addr;     /* client IPv4 address (network order) */
    int idle;          /* no request being served: waiting for a header */
    int closing;       /* shut down by us: no longer counted */
    int64_t idle_since; /* ms, monotonic */
} conn_t;

struct agg_http {
    struct MHD_Daemon *d;
    agg_http_route_t *routes;
    size_t n;
    int port;
    char *hosts[MAX_HOSTS]; /* allowed Host names, lowercase; "*" any */
    size_t n_hosts;
    int header_timeout_ms, max_per_address;
    pthread_mutex_t lock;
    pthread_cond_t stop_cv;
    int stopping, reaper_started;
    pthread_t reaper;
    conn_t conns[TABLE_SIZE];
    agg_http_stats_t stats;
};

/* The connection of the request being handled, for agg_http_request_*() (handlers run on the
 * server's thread, one request at a time per thread). */
static _Thread_local struct MHD_Connection *cur_conn;

const char *agg_http_request_header(const char *name) {
    return cur_conn ? MHD_lookup_connection_value(cur_conn, MHD_HEADER_KIND, name) : NULL;
}

typedef struct {
    int (*cb)(void *, const char *, const char *);
    void *arg;
    int stopped;
} args_iter_t;

static enum MHD_Result iter_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value) {
    (void)kind;
    args_iter_t *it = cls;
    if (it->cb(it->arg, key, value ? value : "")) {
        it->stopped = 1;
        return MHD_NO;
    }
    return MHD_YES;
}

int agg_http_request_args(int (*cb)(void *arg, const char *key, const char *value), void *arg) {
    if (!cur_conn)
        return 0;
    args_iter_t it = {cb, arg, 0};
    MHD_get_connection_values(cur_conn, MHD_GET_ARGUMENT_KIND, iter_arg, &it);
    return it.stopped;
}

void agg_http_reply_text(agg_http_reply_t *r, int status, const char *text) {
    r->status = status;
    r->content_type = "text/plain; charset=utf-8";
    r->body = strdup(text);
    r->len = r->body ? strlen(text) : 0;
}

static int collect_query(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    char *q = cls;
    size_t n = strlen(q);
    snprintf(q + n, 2048 - n, "%s%s=%s", n ? "&" : "", key, value ? value : "");
    return MHD_YES;
}

/* Adds the reply's extra header lines ("Name: value\n" each) to resp. */
static void add_headers(struct MHD_Response *resp, char *h) {
    for (char *line = h, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        *colon = 0;
        const char *v = colon + 1;
        while (*v == ' ')
            v++;
        MHD_add_response_header(resp, line, v);
    }
}


static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- Host allow-list ---- */

/* Parses the allowed names (commas or spaces) into h->hosts, lowercase. */
static int hosts_parse(agg_http_t *h, const char *list, char *err, size_t err_size) {
    for (const char *p = list ? list : ""; *p;) {
        size_t n = strcspn(p, ", \t");
        if (n) {
            if (h->n_hosts == MAX_HOSTS || n > 253) {
                snprintf(err, err_size, "http-allowed-hosts: at most %d names of at most 253 "
                         "characters each", MAX_HOSTS);
                return CM_ECONFIG;
            }
            char *s = strndup(p, n);
            if (!s)
                return CM_ENOMEM;
            for (char *c = s; *c; c++)
                *c = (char)tolower((unsigned char)*c);
            h->hosts[h->n_hosts++] = s;
        }
        p += n;
        p += strspn(p, ", \t");
    }
    return 0;
}

/* 1 when a request with this Host header may be served: no Host (HTTP/1.0), an IP literal
 * (a DNS rebinding page always reaches us by a name), localhost or a name under .localhost,
 * or one of the allowed names (".example.com": the name and its subdomains; "*": any). */
static int host_allowed(const agg_http_t *h, const char *host) {
    char name[256];
    if (!host)
        return 1;
    if (host[0] == '[') { /* [IPv6]:port */
        const char *e = strchr(host, ']');
        struct in6_addr a6;
        if (!e || (size_t)(e - host - 1) >= sizeof name)
            return 0;
        memcpy(name, host + 1, (size_t)(e - host - 1));
        name[e - host - 1] = 0;
        return inet_pton(AF_INET6, name, &a6) == 1;
    }
    size_t n = strcspn(host, ":");
    if (n >= sizeof name)
        return 0;
    for (size_t i = 0; i < n; i++)
        name[i] = (char)tolower((unsigned char)host[i]);
    name[n] = 0;
    if (n && name[n - 1] == '.') /* "localhost." is localhost */
        name[--n] = 0;
    struct in_addr a4;
    if (inet_pton(AF_INET, name, &a4) == 1 || !strcmp(name, "localhost") ||
        (n > 10 && !strcmp(name + n - 10, ".localhost")))
        return 1;
    for (size_t i = 0; i < h->n_hosts; i++) {
        const char *a = h->hosts[i];
        size_t al = strlen(a);
        if (!strcmp(a, "*") || !strcmp(a, name) ||
            (a[0] == '.' && ((n > al && !strcmp(name + n - al, a)) || !strcmp(name, a + 1))))
            return 1;
    }
    return 0;
}

/* ---- admission ---- */

/* Shuts down c's socket (h->lock held): its thread sees the end of the stream and closes it. */
static void conn_close(conn_t *c) {
    shutdown(c->fd, SHUT_RDWR);
    c->closing = 1;
}

/* The entry idle the longest among those of addr (any address when !by_addr), other than
 * skip; NULL when none is idle. */
static conn_t *oldest_idle(agg_http_t *h, int by_addr, uint32_t addr, const conn_t *skip) {
    conn_t *best = NULL;
    for (size_t i = 0; i < TABLE_SIZE; i++) {
        conn_t *c = &h->conns[i];
        if (c == skip || !c->used || c->closing || !c->idle || (by_addr && c->addr != addr))
            continue;
        if (!best || c->idle_since < best->idle_since)
            best = c;
    }
    return best;
}

/* A new connection (h->lock held): its entry, then the caps. Over its address's cap, or the
 * server's, the longest-idle connection of that address (or of the server) is closed; when
 * none is idle, the new one is. */
static void conn_admit(agg_http_t *h, struct MHD_Connection *conn, void **ctx) {
    const union MHD_ConnectionInfo *fi =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *ai =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    uint32_t addr = 0;
    if (ai && ai->client_addr && ai->client_addr->sa_family == AF_INET)
        addr = ((const struct sockaddr_in *)(const void *)ai->client_addr)->sin_addr.s_addr;
    conn_t *e = NULL;
    size_t live = 0, same = 0;
    for (size_t i = 0; i < TABLE_SIZE; i++) {
        conn_t *c = &h->conns[i];
        if (!c->used) {
            if (!e)
                e = c;
            continue;
        }
        if (!c->closing) {
            live++;
            same += c->addr == addr;
        }
    }
    if (!e || !fi) /* cannot happen: libmicrohttpd's limit is the table's size */
        return;
    *e = (conn_t){1, fi->connect_fd, addr, 1, 0, now_ms()};
    *ctx = e;
    int over_addr = same + 1 > (size_t)h->max_per_address;
    if (!over_addr && live + 1 <= AGG_HTTP_MAX_CONNECTIONS)
        return;
    conn_t *victim = oldest_idle(h, over_addr, addr, e);
    if (victim) {
        h->stats.idle_evicted++;
    } else {
        victim = e;
        h->stats.refused++;
    }
    conn_close(victim);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **ctx,
                          enum MHD_ConnectionNotificationCode what) {
    agg_http_t *h = cls;
    pthread_mutex_lock(&h->lock);
    if (what == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_admit(h, conn, ctx);
    } else if (*ctx) { /* closed: the socket is still open, the fd still this connection's */
        ((conn_t *)*ctx)->used = 0;
        *ctx = NULL;
    }
    pthread_mutex_unlock(&h->lock);
}

/* Marks the connection of a request idle (done) or busy (header complete). */
static void conn_set_idle(agg_http_t *h, struct MHD_Connection *conn, int idle) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    conn_t *c = ci ? ci->socket_context : NULL;
    if (!c)
        return;
    pthread_mutex_lock(&h->lock);
    c->idle = idle;
    c->idle_since = now_ms();
    pthread_mutex_unlock(&h->lock);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)con_cls;
    (void)toe;
    conn_set_idle(cls, conn, 1);
}

/* Closes the connections idle past the header timeout, four times per timeout (at least every
 * 250 ms), until agg_http_stop. */
static void *reaper_main(void *arg) {
    agg_http_t *h = arg;
    int64_t period = h->header_timeout_ms / 4 < 250 ? h->header_timeout_ms / 4 : 250;
    pthread_mutex_lock(&h->lock);
    while (!h->stopping) {
        int64_t now = now_ms();
        for (size_t i = 0; i < TABLE_SIZE; i++) {
            conn_t *c = &h->conns[i];
            if (c->used && !c->closing && c->idle && now - c->idle_since > h->header_timeout_ms) {
                conn_close(c);
                h->stats.header_timeouts++;
            }
        }
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        int64_t ns = dl.tv_nsec + (period > 0 ? period : 1) * 1000000;
        dl.tv_sec += ns / 1000000000;
        dl.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(&h->stop_cv, &h->lock, &dl);
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

/* ---- requests ---- */

static const agg_http_route_t *find_route(const agg_http_t *h, const char *url) {
    for (size_t i = 0; i < h->n; i++) {
        const agg_http_route_t *rt = &h->routes[i];
        size_t pl = strlen(rt->path);
        if (strcmp(url, rt->path) == 0 ||
            (pl && rt->path[pl - 1] == '/' && strncmp(url, rt->path, pl) == 0))
            return rt;
    }
    return NULL;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
    agg_http_t *h = cls;
    (void)version;
    (void)upload;
    (void)upload_size;
    (void)con_cls;
    conn_set_idle(h, conn, 0);
    agg_http_reply_t r = {200, "text/plain; charset=utf-8", NULL, 0, 0, NULL};
    const agg_http_route_t *route = find_route(h, url);
    const char *host = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Host");
    if (!host_allowed(h, host)) {
        char msg[512];
        snprintf(msg, sizeof msg, "Host '%.256s' is not allowed: this server answers to IP "
                 "addresses, localhost and the names in http-allowed-hosts (a guard against "
                 "DNS rebinding); add the name there to reach it by that name\n", host);
        agg_http_reply_text(&r, 403, msg);
        pthread_mutex_lock(&h->lock);
        h->stats.host_refused++;
        pthread_mutex_unlock(&h->lock);
    } else if (!route) {
        agg_http_reply_text(&r, 404, "not found; try /metrics or /healthz\n");
    } else if (strcmp(method, route->method)) {
        agg_http_reply_text(&r, 405, "method not allowed\n");
    } else {
        char query[2048] = "";
        MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, (MHD_KeyValueIterator)collect_query,
                                  query);
        cur_conn = conn;
        route->handler(route->arg, url, query, &r);
        cur_conn = NULL;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        r.len, r.body ? r.body : (char *)"",
        r.body_static ? MHD_RESPMEM_PERSISTENT : MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        if (!r.body_static)
            free(r.body);
        free(r.headers);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", r.content_type ? r.content_type : "text/plain");
    add_headers(resp, r.headers);
    free(r.headers);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)(r.status ? r.status : 200), resp);
    MHD_destroy_response(resp);
    return ret;
}

/* ---- the server ---- */

/* libmicrohttpd's messages, at debug level: a client that closes mid-request (every idle
 * connection closed above says so) must not flood the log. Counters say what was closed. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    msg[strcspn(msg, "\n")] = 0;
    CM_DEBUG("http: %s", msg);
}

int agg_http_start(const agg_http_cfg_t *cfg, const agg_http_route_t *routes, agg_http_t **out,
                   char *err, size_t err_size) {
    agg_http_t *h = calloc(1, sizeof *h);
    int rc = 0;
    if (!h)
        return CM_ENOMEM;
    pthread_mutex_init(&h->lock, NULL);
    cm_cond_init_monotonic(&h->stop_cv);
    h->header_timeout_ms = cfg->header_timeout_ms > 0 ? cfg->header_timeout_ms
                                                      : AGG_HTTP_HEADER_TIMEOUT_MS;
    h->max_per_address = cfg->max_per_address > 0 ? cfg->max_per_address
                                                  : AGG_HTTP_MAX_PER_ADDRESS;
    while (routes[h->n].path)
        h->n++;
    h->routes = calloc(h->n + 1, sizeof *h->routes);
    if (!h->routes) {
        rc = CM_ENOMEM;
        goto out;
    }
    memcpy(h->routes, routes, h->n * sizeof *routes);
    if ((rc = hosts_parse(h, cfg->allowed_hosts, err, err_size)))
        goto out;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->port)};
    if (inet_pton(AF_INET, cfg->addr, &sa.sin_addr) != 1) {
        snprintf(err, err_size, "http-addr '%s' is not an IPv4 address; use e.g. 0.0.0.0",
                 cfg->addr);
        rc = CM_ECONFIG;
        goto out;
    }
    if (pthread_create(&h->reaper, NULL, reaper_main, h)) {
        rc = CM_ENOMEM;
        goto out;
    }
    h->reaper_started = 1;
    /* a thread per connection: a long query (a diff over hours) must hold up neither /healthz
     * nor the requests behind it on a shared thread; the query API bounds how many queries
     * run at once (api.h), the admission above bounds the threads. The idle timeout (30 s, reset
     * by each byte) only ends connections stalled in the middle of a reply. */
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                                MHD_USE_POLL | MHD_USE_ERROR_LOG, /* poll: no FD_SETSIZE cap */
                            (uint16_t)cfg->port, NULL, NULL, answer, h, MHD_OPTION_SOCK_ADDR, &sa,
                            MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)TABLE_SIZE, MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, h,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
    if (!h->d) {
        snprintf(err, err_size, "cannot serve HTTP on %s:%d (port in use?); choose another "
                 "--http-port", cfg->addr, cfg->port);
        rc = -EADDRINUSE;
        goto out;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : cfg->port;
    *out = h;
    return 0;
out:
    agg_http_stop(h);
    return rc;
}

int agg_http_port(const agg_http_t *h) { return h->port; }

void agg_http_stats(agg_http_t *h, agg_http_stats_t *out) {
    pthread_mutex_lock(&h->lock);
    *out = h->stats;
    pthread_mutex_unlock(&h->lock);
}

char *agg_http_metrics(agg_http_t *h) {
    agg_http_stats_t s;
    agg_http_stats(h, &s);
    char *out = NULL;
    if (asprintf(&out,
                 "# HELP fleetprof_aggregator_http_host_refused_total Requests refused (403) for "
                 "a Host not allowed (http-allowed-hosts).\n"
                 "# TYPE fleetprof_aggregator_http_host_refused_total counter\n"
                 "fleetprof_aggregator_http_host_refused_total %llu\n"
                 "# HELP fleetprof_aggregator_http_closed_total Connections the server closed: "
                 "header not sent within http-header-timeout, idle one closed to admit a new "
                 "one, new one refused at its address's cap.\n"
                 "# TYPE fleetprof_aggregator_http_closed_total counter\n"
                 "fleetprof_aggregator_http_closed_total{why=\"header_timeout\"} %llu\n"
                 "fleetprof_aggregator_http_closed_total{why=\"idle_evicted\"} %llu\n"
                 "fleetprof_aggregator_http_closed_total{why=\"refused\"} %llu\n",
                 (unsigned long long)s.host_refused, (unsigned long long)s.header_timeouts,
                 (unsigned long long)s.idle_evicted, (unsigned long long)s.refused) < 0)
        return NULL;
    return out;
}

void agg_http_stop(agg_http_t *h) {
    if (!h)
        return;
    if (h->d)
        MHD_stop_daemon(h->d);
    if (h->reaper_started)
        cm_thread_stop(&h->lock, &h->stop_cv, &h->stopping, h->reaper);
    for (size_t i = 0; i < h->n_hosts; i++)
        free(h->hosts[i]);
    pthread_cond_destroy(&h->stop_cv);
    pthread_mutex_destroy(&h->lock);
    free(h->routes);
    free(h);
}
