/* The control topic: capture commands the aggregator publishes (POST /api/v1/captures) reach
 * every collector, and each sends them to its matching agents (ingest.c).
 *
 * Every collector must see every command, so each is its own consumer group
 * ("fleetprof-collector-<collector id>"), reads from the earliest offset and commits nothing:
 * at start it reads the topic's retained commands again and keeps only those issued within
 * control-max-age (older ones are counted stale), so a command published while this collector
 * was joining is not missed, and one from before a restart is not run twice unless it is that
 * recent (the agents' cooldown suppresses such a repeat). The topic is small (a few text
 * records; deploy/kafka creates it with a one-hour retention).
 *
 * Threading: loop thread. librdkafka's consumer runs its own threads; a 100 ms timer polls it
 * without blocking (rd_kafka_consumer_poll with timeout 0), at most CTL_BATCH records a tick. */
#include "internal.h"

#include "cm/error.h"
#include "cm/log.h"

#include <librdkafka/rdkafka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CTL_TICK_MS 100
#define CTL_BATCH 64

struct col_control {
    rd_kafka_t *rk;
    col_ingest_t *ingest;
    const col_config_t *cfg;
    uv_timer_t tick;
    int warned;
};

/* One record of the control topic: parsed, aged and sent to the matching agents. */
static void record(col_control_t *ctl, const rd_kafka_message_t *m) {
    col_cmd_t cmd;
    char err[256];
    col_count(&col_metrics.commands_in[1], 1);
    if (col_cmd_parse(m->payload, m->len, &cmd, err, sizeof err)) {
        col_count(&col_metrics.commands_dropped[COL_CMD_MALFORMED], 1);
        CM_WARN("msg=\"malformed record on the control topic\" err=\"%s\" offset=%lld", err,
                (long long)m->offset);
        return;
    }
    uint64_t now = col_now_ns();
    if (!cmd.issued_ns || cmd.issued_ns + (uint64_t)ctl->cfg->control_max_age < now) {
        col_count(&col_metrics.commands_dropped[COL_CMD_STALE], 1);
        CM_DEBUG("msg=\"stale capture command ignored\" id=\"%s\" age_ms=%lld", cmd.id,
                 cmd.issued_ns ? (long long)((now - cmd.issued_ns) / 1000000) : -1LL);
        return;
    }
    if (ctl->ingest)
        col_ingest_command(ctl->ingest, &cmd, -1);
}

static void on_tick(uv_timer_t *t) {
    col_control_t *ctl = t->data;
    for (int i = 0; i < CTL_BATCH; i++) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(ctl->rk, 0);
        if (!m)
            return;
        if (!m->err)
            record(ctl, m);
        else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF && !ctl->warned++)
            CM_WARN("msg=\"control topic: capture commands cannot be read (reported once)\" "
                    "topic=%s err=\"%s\"", ctl->cfg->control_topic, rd_kafka_message_errstr(m));
        rd_kafka_message_destroy(m);
    }
}

/* librdkafka's threads: its lines at debug level only (the producer reports the brokers' state;
 * a control topic that cannot be read is said once by on_tick). */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    (void)rk;
    (void)level;
    CM_DEBUG("msg=\"librdkafka (control consumer)\" facility=%s text=\"%s\"", fac, buf);
}

/* The consumer's configuration: the producer's kafka.* keys (security settings; producer-only
 * ones are ignored by librdkafka), then ours. Returns 0 or CM_ECONFIG with errbuf set. */
static int consumer_conf(rd_kafka_conf_t *conf, const col_config_t *cfg, const cm_kvlist_t *kafka,
                         const char *collector_id, char *errbuf, size_t errbuf_size) {
    char group[200], err[512];
    snprintf(group, sizeof group, "fleetprof-collector-%.150s", collector_id);
    const char *ours[][2] = {{"bootstrap.servers", cfg->brokers}, {"group.id", group},
                             {"auto.offset.reset", "earliest"}, {"enable.auto.commit", "false"},
                             {"enable.auto.offset.store", "false"}};
    for (size_t i = 0; i < kafka->n + sizeof ours / sizeof ours[0]; i++) {
        const char *k = i < kafka->n ? kafka->items[i].key : ours[i - kafka->n][0];
        const char *v = i < kafka->n ? kafka->items[i].value : ours[i - kafka->n][1];
        if (rd_kafka_conf_set(conf, k, v, err, sizeof err) != RD_KAFKA_CONF_OK &&
            i >= kafka->n) {
            snprintf(errbuf, errbuf_size, "control consumer: %s='%s': %s", k, v, err);
            return CM_ECONFIG;
        }
    }
    rd_kafka_conf_set_log_cb(conf, log_cb);
    return 0;
}

int col_control_open(uv_loop_t *loop, const col_config_t *cfg, const cm_kvlist_t *kafka,
                     const char *collector_id, col_control_t **out, char *errbuf,
                     size_t errbuf_size) {
    *out = NULL;
    if (!strcmp(cfg->control_topic, "off") || !cfg->control_topic[0])
        return 0;
    col_control_t *ctl = calloc(1, sizeof *ctl);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char err[512];
    int rc = ctl ? consumer_conf(conf, cfg, kafka, collector_id, errbuf, errbuf_size) : -ENOMEM;
    if (rc)
        goto out;
    ctl->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!ctl->rk) {
        snprintf(errbuf, errbuf_size, "cannot create the control consumer: %s", err);
        rc = CM_ECONFIG;
        goto out;
    }
    conf = NULL;
    rd_kafka_poll_set_consumer(ctl->rk);
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, cfg->control_topic, RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(ctl->rk, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    if (e) {
        snprintf(errbuf, errbuf_size, "cannot subscribe to control-topic='%s': %s",
                 cfg->control_topic, rd_kafka_err2str(e));
        rc = CM_ECONFIG;
        goto out;
    }
    ctl->cfg = cfg;
    uv_timer_init(loop, &ctl->tick);
    ctl->tick.data = ctl;
    uv_timer_start(&ctl->tick, on_tick, CTL_TICK_MS, CTL_TICK_MS);
    *out = ctl;
out:
    if (conf)
        rd_kafka_conf_destroy(conf);
    if (rc && ctl) {
        if (ctl->rk)
            rd_kafka_destroy(ctl->rk);
        free(ctl);
    }
    return rc;
}

void col_control_attach(col_control_t *ctl, col_ingest_t *in) {
    if (ctl)
        ctl->ingest = in;
}

static void on_tick_closed(uv_handle_t *h) {
    col_control_t *ctl = h->data;
    rd_kafka_consumer_close(ctl->rk);
    rd_kafka_destroy(ctl->rk);
    free(ctl);
}

void col_control_close(col_control_t *ctl) {
    if (!ctl)
        return;
    ctl->ingest = NULL;
    uv_close((uv_handle_t *)&ctl->tick, on_tick_closed);
}
