/* POST /api/v1/captures (see captures.h): parameters in the query string, as the other routes:
 * service (required), host, pid, reason (at most 200 bytes), requester (who asks, as the CLI
 * says: user@host; "api" when absent). Refused: 401 without the token, 403 when the request
 * carries an Origin other than this server (a browser page of another site), 400 for a bad
 * parameter, 429 (Retry-After) past capture-rate a minute, 503 when the control topic is off
 * or Kafka did not take the command within 5 s. Counted
 * (fleetprof_aggregator_captures_total{outcome}). */
#include "captures.h"

#include "auth.h"
#include "metrics.h"

#include "cm/log.h"
#include "cm/wire.h"

#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define CAP_FLUSH_MS 5000
#define CAP_REASON_MAX 200

enum { OUT_PUBLISHED, OUT_BAD, OUT_RATE, OUT_UNAUTHORIZED, OUT_KAFKA, OUT_N };
static const char *const outcome_names[OUT_N] = {"published", "bad_request", "rate_limited",
                                                 "unauthorized", "kafka_failed"};

struct agg_captures {
    rd_kafka_t *rk; /* NULL: control topic off */
    char *topic, *token;
    double per_minute;
    pthread_mutex_t mu;
    double tokens; /* the bucket, per minute (burst: per_minute) */
    uint64_t tokens_ns;
    uint64_t outcome[OUT_N];
};

typedef struct {
    const char *service, *host, *pid, *reason, *requester;
} cap_args_t;

static uint64_t now_ns(clockid_t clk) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void count(agg_captures_t *c, int outcome) {
    pthread_mutex_lock(&c->mu);
    c->outcome[outcome]++;
    pthread_mutex_unlock(&c->mu);
}

/* 1 when the bucket has a capture left (then taken). */
static int rate_take(agg_captures_t *c) {
    uint64_t now = now_ns(CLOCK_MONOTONIC);
    pthread_mutex_lock(&c->mu);
    c->tokens = c->tokens_ns ? c->tokens + (double)(now - c->tokens_ns) / 60e9 * c->per_minute
                             : c->per_minute;
    if (c->tokens > c->per_minute)
        c->tokens = c->per_minute;
    c->tokens_ns = now;
    int ok = c->tokens >= 1;
    if (ok)
        c->tokens -= 1;
    pthread_mutex_unlock(&c->mu);
    return ok;
}

static int arg_cb(void *arg, const char *k, const char *v) {
    cap_args_t *a = arg;
    if (!strcmp(k, "service"))
        a->service = v;
    else if (!strcmp(k, "host"))
        a->host = v;
    else if (!strcmp(k, "pid"))
        a->pid = v;
    else if (!strcmp(k, "reason"))
        a->reason = v;
    else if (!strcmp(k, "requester"))
        a->requester = v;
    return 0;
}

/* 1 when s is non-empty printable text without '\n' (a line of the command text). */
static int one_line(const char *s, size_t max) {
    size_t n = strlen(s);
    if (!n || n > max)
        return 0;
    for (; *s; s++)
        if ((unsigned char)*s < 0x20)
            return 0;
    return 1;
}

static void reply_json(agg_http_reply_t *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void reply_json(agg_http_reply_t *r, int status, const char *fmt, ...) {
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    r->status = status;
    r->content_type = "application/json";
    r->body = strdup(buf);
    r->len = r->body ? strlen(r->body) : 0;
}

/* 1 when the request came from a page of another site: a browser always sends Origin with a
 * cross-site POST, and a page may POST to 127.0.0.1 without asking (a simple request). A
 * client that is no browser sends none. */
static int cross_site(void) {
    const char *origin = agg_http_request_header("Origin");
    const char *host = agg_http_request_header("Host");
    if (!origin)
        return 0;
    const char *o = strstr(origin, "://");
    return !host || !o || strcmp(o + 3, host);
}

/* The arguments' problem as a 400 message, or NULL when they make a command. */
static const char *args_check(const cap_args_t *a) {
    if (!a->service || !one_line(a->service, 127))
        return "service is required: the service name the agents report (FLEETPROF_SERVICE)";
    if (a->host && !one_line(a->host, 255))
        return "host must be a host name (at most 255 bytes)";
    if (a->reason && !one_line(a->reason, CAP_REASON_MAX))
        return "reason must be one line of text, at most 200 bytes";
    if (a->requester && !one_line(a->requester, 100))
        return "requester must be one line of text, at most 100 bytes";
    if (a->pid) {
        char *end;
        long p = strtol(a->pid, &end, 10);
        if (*end || end == a->pid || p <= 0 || p > 0x7fffffff)
            return "pid must be a process id (a positive integer)";
    }
    return NULL;
}

/* Publishes the command text and waits (at most CAP_FLUSH_MS) for Kafka to take it. */
static int publish(agg_captures_t *c, const char *service, const char *text) {
    rd_kafka_resp_err_t e = rd_kafka_producev(
        c->rk, RD_KAFKA_V_TOPIC(c->topic), RD_KAFKA_V_KEY(service, strlen(service)),
        RD_KAFKA_V_VALUE((void *)text, strlen(text)), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_END);
    if (e)
        return -1;
    return rd_kafka_flush(c->rk, CAP_FLUSH_MS) ? -1 : 0;
}

static void handle(void *arg, const char *url, const char *query, agg_http_reply_t *r) {
    (void)url;
    (void)query;
    agg_captures_t *c = arg;
    const char *why = NULL;
    cap_args_t a = {0};
    if (!agg_auth_ok(c->token, &why)) {
        count(c, OUT_UNAUTHORIZED);
        return reply_json(r, 401, "{\"error\":\"this API needs a token: send 'Authorization: "
                                  "Bearer TOKEN' (fleetprof --token or FLEETPROF_TOKEN)\"}");
    }
    if (cross_site()) {
        count(c, OUT_UNAUTHORIZED);
        return reply_json(r, 403, "{\"error\":\"a capture cannot be asked by a page of another "
                                  "site (its Origin is not this server)\"}");
    }
    agg_http_request_args(arg_cb, &a);
    const char *bad = args_check(&a);
    if (bad) {
        count(c, OUT_BAD);
        return reply_json(r, 400, "{\"error\":\"%s\"}", bad);
    }
    if (!c->rk) {
        count(c, OUT_KAFKA);
        return reply_json(r, 503, "{\"error\":\"captures are off: the aggregator's control-topic "
                                  "is 'off'\"}");
    }
    if (!rate_take(c)) {
        count(c, OUT_RATE);
        r->headers = strdup("Retry-After: 10\n");
        return reply_json(r, 429, "{\"error\":\"more than %.0f captures a minute (capture-rate);"
                                  " retry later\"}", c->per_minute);
    }
    uint8_t raw[8];
    if (getrandom(raw, sizeof raw, GRND_NONBLOCK) != (ssize_t)sizeof raw)
        memcpy(raw, &(uint64_t){now_ns(CLOCK_MONOTONIC)}, sizeof raw);
    char id[17], text[1024];
    for (int i = 0; i < 8; i++)
        snprintf(id + 2 * i, 3, "%02x", raw[i]);
    uint64_t issued = now_ns(CLOCK_REALTIME);
    snprintf(text, sizeof text,
             "cmd=capture\nid=%s\nservice=%s\nhost=%s\n%s%s%sreason=%s\nrequester=%s\n"
             "issued_ns=%llu\n", id, a.service, a.host ? a.host : "", a.pid ? "pid=" : "",
             a.pid ? a.pid : "", a.pid ? "\n" : "", a.reason ? a.reason : "",
             a.requester ? a.requester : "api", (unsigned long long)issued);
    if (publish(c, a.service, text)) {
        count(c, OUT_KAFKA);
        return reply_json(r, 503, "{\"error\":\"Kafka did not take the capture command within "
                                  "%d ms (topic %s); retry later\"}", CAP_FLUSH_MS, c->topic);
    }
    count(c, OUT_PUBLISHED);
    CM_INFO("capture %s published: service %s host %s pid %s reason \"%s\"", id, a.service,
            a.host ? a.host : "(any)", a.pid ? a.pid : "(any)", a.reason ? a.reason : "");
    reply_json(r, 202, "{\"id\":\"%s\",\"issued_ns\":%llu,\"topic\":\"%s\"}", id,
               (unsigned long long)issued, c->topic);
}

/* librdkafka's threads: the capture producer's lines at debug level (the consumer reports the
 * brokers' state; a command Kafka did not take is the request's 503). */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    (void)rk;
    (void)level;
    CM_DEBUG("librdkafka (capture producer) %s: %s", fac, buf);
}

int agg_captures_new(const agg_captures_cfg_t *cfg, agg_captures_t **out, char *err,
                     size_t err_size) {
    agg_captures_t *c = calloc(1, sizeof *c);
    if (c)
        pthread_mutex_init(&c->mu, NULL); /* static-like: never destroyed (a default mutex) */
    if (!c || !(c->topic = strdup(cfg->topic)) ||
        !(c->token = strdup(cfg->token ? cfg->token : ""))) {
        agg_captures_free(c);
        snprintf(err, err_size, "out of memory");
        return -1;
    }
    c->per_minute = (double)cfg->per_minute;
    *out = c;
    if (!strcmp(cfg->topic, "off") || !cfg->topic[0])
        return 0;
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char e[512], timeout[16];
    /* a command Kafka did not take in time is given up (the client was told 503), not sent
     * minutes later (kafka.message.timeout.ms may still say otherwise) */
    snprintf(timeout, sizeof timeout, "%d", CAP_FLUSH_MS);
    rd_kafka_conf_set(conf, "message.timeout.ms", timeout, e, sizeof e);
    rd_kafka_conf_set_log_cb(conf, log_cb);
    for (size_t i = 0; i <= cfg->kafka->n; i++) {
        const char *k = i < cfg->kafka->n ? cfg->kafka->items[i].key : "bootstrap.servers";
        const char *v = i < cfg->kafka->n ? cfg->kafka->items[i].value : cfg->brokers;
        if (rd_kafka_conf_set(conf, k, v, e, sizeof e) != RD_KAFKA_CONF_OK && i == cfg->kafka->n) {
            snprintf(err, err_size, "capture producer: %s", e);
            goto fail;
        }
    }
    if (!(c->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, e, sizeof e))) {
        snprintf(err, err_size, "cannot create the capture producer: %s", e);
        goto fail;
    }
    return 0;
fail:
    rd_kafka_conf_destroy(conf);
    agg_captures_free(c);
    *out = NULL;
    return -1;
}

void agg_captures_free(agg_captures_t *c) {
    if (!c)
        return;
    if (c->rk) {
        rd_kafka_flush(c->rk, 1000);
        rd_kafka_destroy(c->rk);
    }
    free(c->topic);
    free(c->token);
    free(c);
}

agg_http_route_t agg_captures_route(agg_captures_t *c) {
    return (agg_http_route_t){"POST", "/api/v1/captures", handle, c};
}

char *agg_captures_metrics(agg_captures_t *c) {
    uint64_t v[OUT_N];
    pthread_mutex_lock(&c->mu);
    memcpy(v, c->outcome, sizeof v);
    pthread_mutex_unlock(&c->mu);
    return agg_metrics_labelled("fleetprof_aggregator_captures_total",
                                "POST /api/v1/captures requests, by outcome", "outcome",
                                outcome_names, v, OUT_N);
}
