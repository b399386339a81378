/* HTTP server with a route table (see http.h), on libmicrohttpd's internal threads: one
 * thread per connection (at most AGG_HTTP_MAX_CONNECTIONS), so a slow request never holds up
 * another connection's. Threading: handlers run on any connection's thread, concurrently. */
#include "http.h"

#include "cm/error.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

struct agg_http {
    struct MHD_Daemon *d;
    agg_http_route_t *routes;
    size_t n;
    int port;
};

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

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
    agg_http_t *h = cls;
    (void)version;
    (void)upload;
    (void)upload_size;
    (void)con_cls;
    agg_http_reply_t r = {200, "text/plain; charset=utf-8", NULL, 0, 0, NULL};
    const agg_http_route_t *route = NULL;
    for (size_t i = 0; i < h->n; i++) {
        const agg_http_route_t *rt = &h->routes[i];
        size_t pl = strlen(rt->path);
        if (strcmp(url, rt->path) == 0 ||
            (pl && rt->path[pl - 1] == '/' && strncmp(url, rt->path, pl) == 0)) {
            route = rt;
            break;
        }
    }
    if (!route) {
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

int agg_http_start(const char *addr, int port, const agg_http_route_t *routes, agg_http_t **out,
                   char *err, size_t err_size) {
    agg_http_t *h = calloc(1, sizeof *h);
    int rc = 0;
    if (!h)
        return CM_ENOMEM;
    while (routes[h->n].path)
        h->n++;
    h->routes = calloc(h->n + 1, sizeof *h->routes);
    if (!h->routes) {
        rc = CM_ENOMEM;
        goto out;
    }
    memcpy(h->routes, routes, h->n * sizeof *routes);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
        snprintf(err, err_size, "http-addr '%s' is not an IPv4 address; use e.g. 0.0.0.0", addr);
        rc = CM_ECONFIG;
        goto out;
    }
    /* a thread per connection: a long query (a diff over hours) must hold up neither /healthz
     * nor the requests behind it on a shared thread; the query API bounds how many queries
     * run at once (api.h), the connection limit bounds the threads */
    h->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                                MHD_USE_ERROR_LOG,
                            (uint16_t)port, NULL, NULL, answer, h, MHD_OPTION_SOCK_ADDR, &sa,
                            MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_CONNECTION_LIMIT,
                            (unsigned)AGG_HTTP_MAX_CONNECTIONS, MHD_OPTION_END);
    if (!h->d) {
        snprintf(err, err_size, "cannot serve HTTP on %s:%d (port in use?); choose another "
                 "--http-port", addr, port);
        rc = -EADDRINUSE;
        goto out;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : port;
    *out = h;
    return 0;
out:
    agg_http_stop(h);
    return rc;
}

int agg_http_port(const agg_http_t *h) { return h->port; }

void agg_http_stop(agg_http_t *h) {
    if (!h)
        return;
    if (h->d)
        MHD_stop_daemon(h->d);
    free(h->routes);
    free(h);
}
