/* The aggregator's HTTP server (libmicrohttpd, a thread per connection): a table of routes,
 * each a path and a handler. /metrics and /healthz are registered by main; the query API adds
 * its routes to the same table.
 *
 * Before any route, every request passes two guards (see http.c):
 *  - Host: a request whose Host header names this server by a DNS name that is not allowed is
 *    refused with 403 (DNS rebinding: a web page at attacker.example whose name resolves to
 *    127.0.0.1 would otherwise read the API from the developer's browser). IP literals,
 *    localhost and *.localhost are always allowed (a rebinding page always uses a name).
 *  - Admission: a connection must send its whole request header within the header timeout
 *    counted from its accept (or from its previous answer), not reset by each byte; one
 *    client address holds at most max_per_address connections; when an address or the server
 *    is at its cap, the connection idle the longest (no request being served) is closed to
 *    admit the new one. Idle clients therefore cannot starve /healthz or real queries.
 *
 * Threading: handlers run on the server's threads, several at once; they must only touch
 * thread-safe state (metrics under its lock, their own store handles under their own lock).
 */
#ifndef AGG_HTTP_H
#define AGG_HTTP_H

#include <stddef.h>
#include <stdint.h>

/* connections served at once (a thread each); beyond it an idle one is closed, or the new one */
#define AGG_HTTP_MAX_CONNECTIONS 512
/* accepted past the cap for a moment, while an idle connection closed for a new one ends */
#define AGG_HTTP_CONNECTION_SLACK 64
#define AGG_HTTP_HEADER_TIMEOUT_MS 10000 /* default: the whole request header, from accept */
#define AGG_HTTP_MAX_PER_ADDRESS 128     /* default: connections of one client address */

typedef struct {
    const char *addr; /* IPv4 listen address */
    int port;         /* 0: any free port, read it back with agg_http_port() */
    /* Host names allowed besides IP literals, localhost and *.localhost: separated by commas
     * or spaces; ".example.com" allows the name and its subdomains; "*" allows any Host.
     * NULL or "": none. */
    const char *allowed_hosts;
    int header_timeout_ms; /* 0: AGG_HTTP_HEADER_TIMEOUT_MS */
    int max_per_address;   /* 0: AGG_HTTP_MAX_PER_ADDRESS */
} agg_http_cfg_t;

typedef struct {
    uint64_t host_refused;    /* requests answered 403 for their Host */
    uint64_t header_timeouts; /* connections closed for not sending their header in time */
    uint64_t idle_evicted;    /* idle connections closed to admit a new one */
    uint64_t refused;         /* new connections closed at once (their address's cap, all busy) */
} agg_http_stats_t;

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

/* Starts serving routes (terminated by a route with path NULL; copied) as cfg says (copied).
 * Returns 0 or a negative code with err filled. */
int agg_http_start(const agg_http_cfg_t *cfg, const agg_http_route_t *routes, agg_http_t **out,
                   char *err, size_t err_size);
int agg_http_port(const agg_http_t *h);
void agg_http_stats(agg_http_t *h, agg_http_stats_t *out);
/* The counters above in the Prometheus text format (malloc'ed; NULL when out of memory). */
char *agg_http_metrics(agg_http_t *h);
void agg_http_stop(agg_http_t *h);

/* For handlers, during the request they handle (NULL / 0 elsewhere): a request header by name
 * (case-insensitive), and the decoded query arguments in order (repeated keys repeat); cb
 * returning non-zero stops the walk, and then agg_http_request_args() returns 1. */
const char *agg_http_request_header(const char *name);
int agg_http_request_args(int (*cb)(void *arg, const char *key, const char *value), void *arg);

/* Helper: sets reply to a copy of text. */
void agg_http_reply_text(agg_http_reply_t *r, int status, const char *text);

#endif
