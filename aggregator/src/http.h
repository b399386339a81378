/* The aggregator's HTTP server (libmicrohttpd, a thread per connection): a table of routes,
 * each a path and a handler. /metrics and /healthz are registered by main; the query API adds
 * its routes to the same table.
 *
 * Threading: handlers run on the server's threads, several at once; they must only touch
 * thread-safe state (metrics under its lock, their own store handles under their own lock).
 */
#ifndef AGG_HTTP_H
#define AGG_HTTP_H

#include <stddef.h>

/* connections served at once (a thread each); more are refused at accept */
#define AGG_HTTP_MAX_CONNECTIONS 512

typedef struct {
    int status;          /* HTTP status, default 200 */
    const char *content_type;
    char *body;          /* malloc'ed; the server frees it (unless body_static) */
    size_t len;
    int body_static;     /* body is static data: not freed, not copied */
    char *headers;       /* NULL or malloc'ed extra header lines "Name: value\n..." (freed) */
} agg_http_reply_t;

/* Fills reply. url is the path, query the raw query string ("" when none). */
typedef void (*agg_http_handler_t)(void *arg, const char *url, const char *query,
                                   agg_http_reply_t *reply);

typedef struct {
    const char *method; /* "GET" */
    const char *path;   /* exact path, or a prefix ending in '/' */
    agg_http_handler_t handler;
    void *arg;
} agg_http_route_t;

typedef struct agg_http agg_http_t;

/* Starts serving routes (terminated by a route with path NULL; copied) on addr:port.
 * port 0 picks a free port: read it back with agg_http_port(). Returns 0 or a negative code. */
int agg_http_start(const char *addr, int port, const agg_http_route_t *routes, agg_http_t **out,
                   char *err, size_t err_size);
int agg_http_port(const agg_http_t *h);
void agg_http_stop(agg_http_t *h);

/* For handlers, during the request they handle (NULL / 0 elsewhere): a request header by name
 * (case-insensitive), and the decoded query arguments in order (repeated keys repeat); cb
 * returning non-zero stops the walk, and then agg_http_request_args() returns 1. */
const char *agg_http_request_header(const char *name);
int agg_http_request_args(int (*cb)(void *arg, const char *key, const char *value), void *arg);

/* Helper: sets reply to a copy of text. */
void agg_http_reply_text(agg_http_reply_t *r, int status, const char *text);

#endif
