/* Kafka producer: reads records from the spool in order and produces them with librdkafka
 * (idempotent, acks=all), key = service, value = the frame as the agent sent it, headers from
 * enrichment. Delivered records advance the spool's commit position; a failed delivery
 * (message.timeout.ms expired during an outage, ...) stops production, purges what is still
 * queued in librdkafka (so nothing queued after the failure can overtake the replay), waits
 * for every in-flight report, then rewinds the spool cursor to the first undelivered record and replays
 * from there after retry-backoff: one ordered pipeline, so a service's chunks reach Kafka in
 * order (records delivered after the failed one are sent again: at-least-once, deduped by
 * chunk id downstream).
 *
 * Threading: loop thread only. librdkafka's threads put delivery reports, errors and log
 * lines on the main queue; rd_kafka_queue_io_event_enable() writes a byte to a pipe when that
 * queue becomes non-empty, a uv_poll on the pipe wakes the loop, and rd_kafka_poll(rk, 0)
 * serves the callbacks here, on the loop. No busy polling. A fatal (idempotence) error makes
 * the collector exit non-zero: the supervisor restarts it and the spool replays. */
#define _GNU_SOURCE
#include "internal.h"

#include "cm/error.h"
#include "cm/log.h"
#include "cm/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { SLOT_INFLIGHT = 0, SLOT_DONE = 1, SLOT_FAILED = 2 };

typedef struct {
    col_spool_pos_t pos;
    uint64_t next_offset;
    uint32_t bytes;
    uint8_t state;
} slot_t;

struct col_producer {
    uv_loop_t *loop;
    const col_config_t *cfg;
    col_spool_t *spool;
    rd_kafka_t *rk;
    int pipefd[2];
    uv_poll_t poll;
    uv_timer_t backoff; /* replay pause after a failure; also a 1 s safety poll */
    uv_idle_t idle;     /* continues a pump that stopped at its batch size */
    slot_t *ring;       /* in-flight records in production order */
    uint64_t cap, head, tail;
    uint64_t inflight, inflight_bytes;
    uint64_t n_failed; /* failed reports of the current round, replayed at the rewind */
    int failed, waiting, paused, closing;
    uint64_t last_err_log_ns;
    /* the topic's max.message.bytes: DescribeConfigs on a queue of our own, polled from the 1 s
     * timer; asked again every 5 min (every 10 s until first known) */
    rd_kafka_queue_t *admq;
    int desc_pending, desc_warned;
    uint64_t desc_next_ns;
    int64_t topic_max; /* 0: not known yet */
};

/* Kafka's default max.message.bytes (broker and topic): assumed until the topic says. */
#define KAFKA_DEFAULT_MAX_MESSAGE 1048588
/* A record batch holding one record, beyond key, headers and value: batch header (61 bytes),
 * record length, attributes, timestamp and offset deltas, key/value/header lengths (varints). */
#define KAFKA_RECORD_OVERHEAD 128

static void describe_request(col_producer_t *p) {
    rd_kafka_ConfigResource_t *r =
        rd_kafka_ConfigResource_new(RD_KAFKA_RESOURCE_TOPIC, p->cfg->topic);
    rd_kafka_AdminOptions_t *o =
        rd_kafka_AdminOptions_new(p->rk, RD_KAFKA_ADMIN_OP_DESCRIBECONFIGS);
    if (!r || !o) {
        rd_kafka_ConfigResource_destroy(r);
        rd_kafka_AdminOptions_destroy(o);
        return;
    }
    rd_kafka_AdminOptions_set_request_timeout(o, 10000, NULL, 0);
    rd_kafka_DescribeConfigs(p->rk, &r, 1, o, p->admq);
    rd_kafka_AdminOptions_destroy(o);
    rd_kafka_ConfigResource_destroy(r);
    p->desc_pending = 1;
}

/* Reads the DescribeConfigs answer if it is there; asks (again) when it is time. */
static void describe_tick(col_producer_t *p) {
    uint64_t now = col_now_ns();
    if (!p->desc_pending) {
        if (now >= p->desc_next_ns)
            describe_request(p);
        return;
    }
    rd_kafka_event_t *ev = rd_kafka_queue_poll(p->admq, 0);
    if (!ev)
        return;
    p->desc_pending = 0;
    int64_t v = -1;
    char why[256] = "";
    if (rd_kafka_event_error(ev)) {
        snprintf(why, sizeof why, "%s", rd_kafka_event_error_string(ev));
    } else {
        const rd_kafka_DescribeConfigs_result_t *res = rd_kafka_event_DescribeConfigs_result(ev);
        size_t nr = 0, ne = 0;
        const rd_kafka_ConfigResource_t **rs =
            res ? rd_kafka_DescribeConfigs_result_resources(res, &nr) : NULL;
        for (size_t i = 0; i < nr; i++) {
            if (rd_kafka_ConfigResource_error(rs[i])) {
                snprintf(why, sizeof why, "%s", rd_kafka_ConfigResource_error_string(rs[i]));
                continue;
            }
            const rd_kafka_ConfigEntry_t **es = rd_kafka_ConfigResource_configs(rs[i], &ne);
            for (size_t k = 0; k < ne; k++)
                if (!strcmp(rd_kafka_ConfigEntry_name(es[k]), "max.message.bytes") &&
                    rd_kafka_ConfigEntry_value(es[k]))
                    v = strtoll(rd_kafka_ConfigEntry_value(es[k]), NULL, 10);
        }
    }
    rd_kafka_event_destroy(ev);
    if (v > KAFKA_RECORD_OVERHEAD) {
        if (v != p->topic_max)
            CM_INFO("msg=\"topic max.message.bytes\" topic=%s bytes=%lld", p->cfg->topic,
                    (long long)v);
        p->topic_max = v;
        col_gauge_set(&col_metrics.kafka_max_message, (uint64_t)v);
        p->desc_next_ns = now + 300ull * 1000000000ull;
    } else {
        if (!p->desc_warned++)
            CM_WARN("msg=\"cannot read the topic's max.message.bytes; assuming %d\" topic=%s "
                    "err=\"%s\"", KAFKA_DEFAULT_MAX_MESSAGE, p->cfg->topic,
                    why[0] ? why : "no such entry");
        p->desc_next_ns = now + (p->topic_max ? 300ull : 10ull) * 1000000000ull;
    }
}

int64_t col_producer_max_record(const col_producer_t *p) {
    int64_t lim = p && p->topic_max > 0 ? p->topic_max : KAFKA_DEFAULT_MAX_MESSAGE;
    int64_t own = p ? p->cfg->max_msg + 65536 : lim; /* our message.max.bytes */
    return (lim < own ? lim : own) - KAFKA_RECORD_OVERHEAD;
}

static int permanent(rd_kafka_resp_err_t err) {
    return err == RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE || err == RD_KAFKA_RESP_ERR_INVALID_MSG ||
           err == RD_KAFKA_RESP_ERR_INVALID_RECORD ||
           err == RD_KAFKA_RESP_ERR_INVALID_MSG_SIZE ||
           err == RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE;
}

/* At most one line per second for repeated Kafka trouble. */
static int log_allowed(col_producer_t *p) {
    uint64_t now = col_now_ns();
    if (now - p->last_err_log_ns < 1000000000ull)
        return 0;
    p->last_err_log_ns = now;
    return 1;
}

static void update_gauges(col_producer_t *p) {
    col_gauge_set(&col_metrics.inflight, p->inflight);
    col_gauge_set(&col_metrics.spool_pending,
                  p->inflight + p->n_failed + col_spool_unread(p->spool));
}

/* Advances the ring head over delivered slots and commits the spool up to the first
 * undelivered record. */
static void advance(col_producer_t *p) {
    while (p->head < p->tail && p->ring[p->head % p->cap].state == SLOT_DONE)
        p->head++;
    if (p->head < p->tail)
        col_spool_commit(p->spool, p->ring[p->head % p->cap].pos);
    else if (!p->failed)
        col_spool_commit(p->spool, col_spool_tell(p->spool));
}

static void on_backoff(uv_timer_t *t);

/* All reports of a failed round are in: rewind the spool to the first undelivered record. */
static void rewind_spool(col_producer_t *p) {
    uint64_t again = 0, lost = 0;
    col_spool_pos_t pos = col_spool_tell(p->spool);
    if (p->head < p->tail)
        pos = p->ring[p->head % p->cap].pos;
    for (uint64_t i = p->head; i < p->tail; i++) {
        slot_t *s = &p->ring[i % p->cap];
        if (col_spool_segment_exists(p->spool, s->pos.seg_id))
            again++;
        else if (s->state != SLOT_DONE)
            lost++;
    }
    col_count(&col_metrics.dropped[COL_DROP_SPOOL_FULL], lost);
    col_spool_rewind(p->spool, pos, again);
    p->head = p->tail = 0;
    p->failed = 0;
    p->n_failed = 0;
    p->waiting = 1;
    col_count(&col_metrics.kafka_rewinds, 1);
    CM_WARN("msg=\"delivery failed; replaying from the spool\" records=%" PRIu64
            " backoff_ms=%lld",
            again, (long long)(p->cfg->retry_backoff / 1000000));
    uv_timer_start(&p->backoff, on_backoff, (uint64_t)(p->cfg->retry_backoff / 1000000), 1000);
    update_gauges(p);
}

static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    col_producer_t *p = opaque;
    uint64_t seq = (uint64_t)(uintptr_t)m->_private;
    if (p->closing || seq < p->head || seq >= p->tail)
        return; /* a report for a round already rewound, or purged at close */
    slot_t *s = &p->ring[seq % p->cap];
    p->inflight--;
    p->inflight_bytes -= s->bytes;
    if (!m->err) {
        s->state = SLOT_DONE;
        col_count(&col_metrics.chunks_out, 1);
        col_count(&col_metrics.bytes_out, m->len);
        col_gauge_set(&col_metrics.kafka_up, 1);
        rd_kafka_headers_t *h;
        const void *v;
        size_t vl;
        char num[32];
        if (rd_kafka_message_headers(m, &h) == 0 &&
            rd_kafka_header_get_last(h, CM_HDR_RECEIVED, &v, &vl) == 0 && vl < sizeof num) {
            memcpy(num, v, vl);
            num[vl] = 0;
            uint64_t rcv = strtoull(num, NULL, 10), now = col_now_ns();
            if (rcv && now > rcv)
                col_metrics_latency(now - rcv);
        }
    } else if (permanent(m->err)) {
        s->state = SLOT_DONE;
        col_count(&col_metrics.dropped[COL_DROP_KAFKA_REJECTED], 1);
        CM_ERROR("msg=\"Kafka refused a chunk for good; dropped\" err=%s bytes=%zu key=%.*s "
                 "hint=\"raise the topic's max.message.bytes\"",
                 rd_kafka_err2name(m->err), m->len, (int)m->key_len, (const char *)m->key);
    } else {
        s->state = SLOT_FAILED;
        if (!p->failed) {
            /* First failure of the round: records queued after it in librdkafka (never sent:
             * during an outage that is all of them) must not be delivered before the replay of
             * this one, or a service's chunks reach Kafka out of order. Purging the local
             * queue is safe (nothing was sent); their reports come back as failed, and the
             * rewind below waits for them. Messages already in flight are left alone. */
            rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_NON_BLOCKING);
        }
        p->failed = 1;
        p->n_failed++;
        col_count(&col_metrics.kafka_delivery_errors, 1);
        if (log_allowed(p))
            CM_WARN("msg=\"delivery failed, will replay from the spool\" err=%s reason=\"%s\"",
                    rd_kafka_err2name(m->err), rd_kafka_err2str(m->err));
    }
    advance(p);
    if (p->failed && p->inflight == 0)
        rewind_spool(p);
    update_gauges(p);
}

static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque) {
    col_producer_t *p = opaque;
    col_count(&col_metrics.kafka_errors, 1);
    if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
        col_gauge_set(&col_metrics.kafka_up, 0);
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char buf[512];
        rd_kafka_fatal_error(rk, buf, sizeof buf);
        CM_ERROR("msg=\"fatal Kafka producer error; exiting so the supervisor restarts us (the "
                 "spool keeps every chunk)\" reason=\"%s\"",
                 buf);
        uv_stop(p->loop);
        return;
    }
    if (log_allowed(p))
        CM_WARN("msg=\"Kafka error\" err=%s reason=\"%s\"", rd_kafka_err2name(err), reason);
}

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    cm_log_level_t l = level <= 3 ? CM_LOG_ERROR : level == 4 ? CM_LOG_WARN
                                               : level <= 6   ? CM_LOG_INFO
                                                              : CM_LOG_DEBUG;
    cm_log(l, "msg=\"librdkafka\" facility=%s text=\"%s\"", fac, buf);
}

static void serve(col_producer_t *p) {
    char drain[64];
    while (read(p->pipefd[0], drain, sizeof drain) > 0)
        ;
    for (int i = 0; i < 1000 && rd_kafka_poll(p->rk, 0) > 0; i++)
        ;
    if (!p->closing)
        col_producer_kick(p);
}

static void on_readable(uv_poll_t *h, int status, int events) { serve(h->data); }

static void on_backoff(uv_timer_t *t) {
    col_producer_t *p = t->data;
    describe_tick(p);
    p->waiting = 0;
    serve(p); /* also the safety net in case an io event was missed */
}

static void on_idle(uv_idle_t *h) {
    col_producer_t *p = h->data;
    uv_idle_stop(h);
    col_producer_kick(p);
}

void col_producer_kick(col_producer_t *p) {
    if (!p || p->failed || p->waiting || p->paused || p->closing)
        return;
    for (int batch = 0;; batch++) {
        /* The ring also holds delivered slots behind a slow one: bound by its size too. */
        if (p->inflight >= (uint64_t)p->cfg->max_inflight ||
            p->inflight_bytes >= (uint64_t)p->cfg->max_inflight_bytes ||
            p->tail - p->head >= p->cap)
            break;
        if (batch == 64) { /* let the loop serve sockets; continue on the next iteration */
            uv_idle_start(&p->idle, on_idle);
            break;
        }
        col_record_t rec;
        int rc = col_spool_read(p->spool, &rec);
        if (rc <= 0) {
            if (rc < 0 && log_allowed(p))
                CM_ERROR("msg=\"cannot read the spool\" err=\"%s\"", strerror(-rc));
            break;
        }
        char rcv[32];
        snprintf(rcv, sizeof rcv, "%" PRIu64, rec.received_ns);
        rd_kafka_headers_t *hdrs = rd_kafka_headers_new((size_t)rec.hdrs.n + 1);
        for (int i = 0; i < rec.hdrs.n; i++)
            rd_kafka_header_add(hdrs, rec.hdrs.name[i], -1, rec.hdrs.value[i], -1);
        rd_kafka_header_add(hdrs, CM_HDR_RECEIVED, -1, rcv, -1);
        uint64_t seq = p->tail;
        rd_kafka_resp_err_t err = rd_kafka_producev(
            p->rk, RD_KAFKA_V_TOPIC(p->cfg->topic), RD_KAFKA_V_KEY(rec.key, strlen(rec.key)),
            RD_KAFKA_V_VALUE(rec.frame, rec.frame_len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_FREE),
            RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_OPAQUE((void *)(uintptr_t)seq), RD_KAFKA_V_END);
        if (err) {
            rd_kafka_headers_destroy(hdrs);
            free(rec.frame);
            if (permanent(err)) {
                col_count(&col_metrics.dropped[COL_DROP_KAFKA_REJECTED], 1);
                CM_ERROR("msg=\"librdkafka refused a chunk for good; dropped\" err=%s bytes=%zu",
                         rd_kafka_err2name(err), rec.frame_len);
                continue;
            }
            /* Queue full or transient: give the record back and wait for reports. */
            col_spool_rewind(p->spool, rec.pos, 1);
            if (log_allowed(p))
                CM_WARN("msg=\"cannot produce yet\" err=%s", rd_kafka_err2name(err));
            if (err != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
                p->waiting = 1;
                uv_timer_start(&p->backoff, on_backoff,
                               (uint64_t)(p->cfg->retry_backoff / 1000000), 1000);
            }
            break;
        }
        slot_t *s = &p->ring[seq % p->cap];
        s->pos = rec.pos;
        s->next_offset = rec.next_offset;
        s->bytes = (uint32_t)rec.frame_len;
        s->state = SLOT_INFLIGHT;
        p->tail++;
        p->inflight++;
        p->inflight_bytes += rec.frame_len;
    }
    if (p->head == p->tail)
        advance(p);
    update_gauges(p);
}

uint64_t col_producer_inflight(const col_producer_t *p) { return p->inflight; }

int col_producer_idle(const col_producer_t *p) {
    return p->inflight == 0 && col_spool_unread(p->spool) == 0;
}

void col_producer_pause(col_producer_t *p) { p->paused = 1; }

static int set(rd_kafka_conf_t *conf, const char *k, const char *v, char *errbuf,
               size_t errbuf_size, const char *origin) {
    char err[512];
    if (rd_kafka_conf_set(conf, k, v, err, sizeof err) != RD_KAFKA_CONF_OK) {
        snprintf(errbuf, errbuf_size, "%s%s='%s' is not accepted by librdkafka: %s", origin, k, v,
                 err);
        return CM_ECONFIG;
    }
    return 0;
}

int col_producer_open(uv_loop_t *loop, const col_config_t *cfg, const cm_kvlist_t *kafka,
                      col_spool_t *spool, col_producer_t **out, char *errbuf,
                      size_t errbuf_size) {
    int rc = 0;
    rd_kafka_conf_t *conf = NULL;
    col_producer_t *p = calloc(1, sizeof *p);
    if (!p)
        return -ENOMEM;
    p->loop = loop;
    p->cfg = cfg;
    p->spool = spool;
    p->pipefd[0] = p->pipefd[1] = -1;
    p->cap = (uint64_t)cfg->max_inflight;
    p->ring = calloc(p->cap, sizeof *p->ring);
    if (!p->ring || pipe2(p->pipefd, O_NONBLOCK | O_CLOEXEC)) {
        rc = -ENOMEM;
        snprintf(errbuf, errbuf_size, "cannot allocate the producer: %s", strerror(errno));
        goto out;
    }
    conf = rd_kafka_conf_new();
    char num[32], client_id[160];
    snprintf(client_id, sizeof client_id, "fleetprof-collector-%.100s", cfg->host);
    struct {
        const char *k, *v;
    } defaults[] = {
        {"bootstrap.servers", cfg->brokers},
        {"client.id", client_id},
        {"enable.idempotence", "true"},
        {"acks", "all"},
        {"linger.ms", "5"},
        {"log.queue", "true"},
        {"queue.buffering.max.messages", NULL},
        {"queue.buffering.max.kbytes", NULL},
        {"message.max.bytes", NULL},
    };
    for (size_t i = 0; i < sizeof defaults / sizeof *defaults; i++) {
        const char *v = defaults[i].v;
        if (!strcmp(defaults[i].k, "queue.buffering.max.messages"))
            snprintf(num, sizeof num, "%lld", (long long)cfg->max_inflight + 1000), v = num;
        else if (!strcmp(defaults[i].k, "queue.buffering.max.kbytes"))
            snprintf(num, sizeof num, "%lld", (long long)(cfg->max_inflight_bytes / 1024) + 65536),
                v = num;
        else if (!strcmp(defaults[i].k, "message.max.bytes"))
            snprintf(num, sizeof num, "%lld", (long long)cfg->max_msg + 65536), v = num;
        if ((rc = set(conf, defaults[i].k, v, errbuf, errbuf_size, "")))
            goto out;
    }
    for (size_t i = 0; i < kafka->n; i++)
        if ((rc = set(conf, kafka->items[i].key, kafka->items[i].value, errbuf, errbuf_size,
                      "kafka.")))
            goto out;
    rd_kafka_conf_set_dr_msg_cb(conf, dr_msg_cb);
    rd_kafka_conf_set_error_cb(conf, error_cb);
    rd_kafka_conf_set_log_cb(conf, log_cb);
    rd_kafka_conf_set_opaque(conf, p);
    char err[512];
    p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!p->rk) {
        snprintf(errbuf, errbuf_size, "cannot create the Kafka producer: %s", err);
        rc = CM_ECONFIG;
        goto out;
    }
    conf = NULL; /* owned by rk now */
    rd_kafka_set_log_queue(p->rk, NULL);
    rd_kafka_queue_t *mq = rd_kafka_queue_get_main(p->rk);
    rd_kafka_queue_io_event_enable(mq, p->pipefd[1], "1", 1);
    rd_kafka_queue_destroy(mq);
    uv_poll_init(loop, &p->poll, p->pipefd[0]);
    p->poll.data = p;
    uv_poll_start(&p->poll, UV_READABLE, on_readable);
    uv_timer_init(loop, &p->backoff);
    p->backoff.data = p;
    uv_idle_init(loop, &p->idle);
    p->idle.data = p;
    col_gauge_set(&col_metrics.kafka_up, 1);
    uv_timer_start(&p->backoff, on_backoff, 1000, 1000); /* safety poll */
    p->admq = rd_kafka_queue_new(p->rk);
    col_gauge_set(&col_metrics.kafka_max_message, KAFKA_DEFAULT_MAX_MESSAGE);
    if (p->admq)
        describe_request(p);
    serve(p);
out:
    if (conf)
        rd_kafka_conf_destroy(conf);
    if (rc) {
        if (p->pipefd[0] >= 0)
            close(p->pipefd[0]), close(p->pipefd[1]);
        free(p->ring);
        free(p);
        p = NULL;
    }
    *out = p;
    return rc;
}

static void on_closed(uv_handle_t *h) {}

void col_producer_close(col_producer_t *p) {
    if (!p)
        return;
    /* Whatever is still in flight stays undelivered in the spool: the commit position only
     * covers delivered records, so the next start replays the rest. */
    p->closing = 1;
    rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    rd_kafka_poll(p->rk, 0);
    if (p->admq)
        rd_kafka_queue_destroy(p->admq);
    rd_kafka_destroy(p->rk);
    uv_close((uv_handle_t *)&p->poll, on_closed);
    uv_close((uv_handle_t *)&p->backoff, on_closed);
    uv_close((uv_handle_t *)&p->idle, on_closed);
    uv_run(p->loop, UV_RUN_NOWAIT);
    close(p->pipefd[0]);
    close(p->pipefd[1]);
    free(p->ring);
    free(p);
}
