/* Metrics registry and its Prometheus text rendering.
 *
 * Threading: counters are relaxed atomics. The loop thread updates them; the HTTP thread renders
 * them (col_metrics_render) at any time. A scrape may see counters from slightly different
 * instants, which Prometheus tolerates. */
#include "internal.h"

#include "cm/buf.h"
#include "cm/error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

col_metrics_t col_metrics;

/* Upper bounds of the delivery latency buckets, in microseconds. */
static const uint64_t lat_bounds_us[COL_LAT_BUCKETS] = {
    1000,   2500,   5000,    10000,   25000,   50000,    100000,
    250000, 500000, 1000000, 2500000, 5000000, 10000000, 60000000};

static const char *shed_names[COL_SHED_MAX] = {"rate",     "client_rate", "memory", "spool",
                                               "draining", "uid_rate",    "uid_spool"};
static const char *disc_names[COL_DISC_MAX] = {
    "eof",   "bad_hello", "oversized",    "slow", "not_reading", "too_many",
    "error", "shutdown",  "uid_too_many", "idle"};
static const char *drop_names[COL_DROP_MAX] = {"spool_full", "kafka_rejected", "spool_corrupt"};

uint64_t col_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Slot of a CM_E* code: its position in the X-macro table, or the last slot for others. */
static int reject_slot(int err) {
    int pos = -err - (int)CM__EBASE; /* 1-based position of a CM_E* code */
    if (pos >= 1 && pos < COL_REJECT_SLOTS)
        return pos;
    return 0; /* other */
}

void col_metrics_reject(int err) { col_count(&col_metrics.rejected[reject_slot(err)], 1); }

void col_metrics_latency(uint64_t ns) {
    uint64_t us = ns / 1000;
    int b = 0;
    while (b < COL_LAT_BUCKETS && us > lat_bounds_us[b])
        b++;
    col_count(&col_metrics.lat_bucket[b], 1);
    col_count(&col_metrics.lat_sum_us, us);
    col_count(&col_metrics.lat_count, 1);
}

#define LOAD(x) ((unsigned long long)atomic_load_explicit(&(x), memory_order_relaxed))
#define P "fleetprof_collector_"

static void counter(cm_buf_t *b, const char *name, const char *help, atomic_uint_fast64_t *v) {
    cm_buf_printf(b, "# HELP " P "%s %s\n# TYPE " P "%s counter\n" P "%s %llu\n", name, help, name, name,
        LOAD(*v));
}
static void gauge(cm_buf_t *b, const char *name, const char *help, atomic_uint_fast64_t *v) {
    cm_buf_printf(b, "# HELP " P "%s %s\n# TYPE " P "%s gauge\n" P "%s %llu\n", name, help, name, name,
        LOAD(*v));
}
static void labelled(cm_buf_t *b, const char *name, const char *help, const char *label,
                     const char *const *names, atomic_uint_fast64_t *v, int n) {
    cm_buf_printf(b, "# HELP " P "%s %s\n# TYPE " P "%s counter\n", name, help, name);
    for (int i = 0; i < n; i++)
        cm_buf_printf(b, P "%s{%s=\"%s\"} %llu\n", name, label, names[i], LOAD(v[i]));
}

int col_metrics_render(char **res, size_t *res_len) {
    col_metrics_t *m = &col_metrics;
    cm_buf_t b = {0};
    counter(&b, "chunks_received_total", "Chunk frames received from agents (any outcome).",
            &m->chunks_in);
    counter(&b, "bytes_received_total", "Bytes of chunk frames received.", &m->bytes_in);
    counter(&b, "chunks_accepted_total", "Chunks validated, written to the spool and acked.",
            &m->chunks_accepted);
    counter(&b, "bytes_accepted_total", "Bytes of accepted chunk frames.", &m->bytes_accepted);
    counter(&b, "chunks_delivered_total", "Chunks acknowledged by Kafka.", &m->chunks_out);
    counter(&b, "bytes_delivered_total", "Bytes of chunk frames acknowledged by Kafka.",
            &m->bytes_out);
    cm_buf_printf(&b, "# HELP " P "chunks_rejected_total Invalid chunks refused (agents must not resend).\n"
            "# TYPE " P "chunks_rejected_total counter\n");
    for (int i = 0; i < COL_REJECT_SLOTS; i++) {
        unsigned long long v = LOAD(m->rejected[i]);
        const char *name = i == 0 ? "other" : cm_errname(-(int)CM__EBASE - i);
        cm_buf_printf(&b, P "chunks_rejected_total{reason=\"%s\"} %llu\n", name, v);
    }
    labelled(&b, "chunks_shed_total", "Chunks answered with retry (the agent keeps them).",
             "reason", shed_names, m->shed, COL_SHED_MAX);
    labelled(&b, "chunks_dropped_total", "Accepted chunks lost before delivery.", "reason",
             drop_names, m->dropped, COL_DROP_MAX);
    labelled(&b, "disconnects_total", "Agent connections closed, by reason.", "reason",
             disc_names, m->disconnects, COL_DISC_MAX);
    counter(&b, "connections_total", "Agent connections accepted.", &m->connections_total);
    gauge(&b, "connected_agents", "Agent connections open now.", &m->connected);
    gauge(&b, "uid_budgets", "Per-uid limit budgets in use: one per (peer uid, container).",
          &m->budgets);
    counter(&b, "uid_budget_shared_total", "Connections put in the one shared budget: more "
            "distinct (uid, container) pairs than 4096 at once.", &m->budget_shared_total);
    gauge(&b, "spool_bytes", "Bytes in spool segments.", &m->spool_bytes);
    gauge(&b, "spool_segments", "Spool segment files.", &m->spool_segments);
    gauge(&b, "spool_pending_records", "Spooled records not yet delivered.", &m->spool_pending);
    counter(&b, "spool_replayed_total", "Undelivered records found in the spool at start.",
            &m->spool_replayed);
    counter(&b, "kafka_delivery_errors_total", "Failed delivery reports (then replayed).",
            &m->kafka_delivery_errors);
    counter(&b, "kafka_errors_total", "Client-level Kafka errors (broker down, auth, ...).",
            &m->kafka_errors);
    counter(&b, "kafka_rewinds_total", "Replays from the spool after failed deliveries.",
            &m->kafka_rewinds);
    gauge(&b, "kafka_up", "1 unless all brokers are reported down.", &m->kafka_up);
    gauge(&b, "kafka_inflight_messages", "Messages handed to librdkafka, not yet reported.",
          &m->inflight);
    gauge(&b, "kafka_max_message_bytes",
          "The topic's max.message.bytes chunks are checked against (broker default until the "
          "topic's configuration is read).", &m->kafka_max_message);
    counter(&b, "chunks_over_kafka_limit_total",
            "Chunks refused with ETOOBIG before the ack: their Kafka record would pass the "
            "topic's max.message.bytes (also in chunks_rejected_total{reason=\"ETOOBIG\"}).",
            &m->over_kafka_limit);
    gauge(&b, "draining", "1 while shutting down.", &m->draining);
    static const char *const cmd_sources[2] = {"local", "topic"};
    labelled(&b, "capture_commands_total", "Capture commands received, by source.", "source",
             cmd_sources, m->commands_in, 2);
    counter(&b, "capture_commands_sent_total",
            "Capture command records written to agent connections.", &m->commands_sent);
    const char *cmd_drops[COL_CMD_DROP_MAX];
    for (int i = 0; i < COL_CMD_DROP_MAX; i++)
        cmd_drops[i] = col_cmd_drop_name((col_cmd_drop_t)i);
    labelled(&b, "capture_commands_dropped_total",
             "Capture commands that reached no agent, or agents skipped, by reason.", "reason",
             cmd_drops, m->commands_dropped, COL_CMD_DROP_MAX);
    cm_buf_printf(&b, "# HELP " P "delivery_latency_seconds From acceptance to the Kafka acknowledgement.\n"
            "# TYPE " P "delivery_latency_seconds histogram\n");
    unsigned long long cum = 0;
    for (int i = 0; i <= COL_LAT_BUCKETS; i++) {
        cum += LOAD(m->lat_bucket[i]);
        if (i < COL_LAT_BUCKETS)
            cm_buf_printf(&b, P "delivery_latency_seconds_bucket{le=\"%g\"} %llu\n",
                (double)lat_bounds_us[i] / 1e6, cum);
        else
            cm_buf_printf(&b, P "delivery_latency_seconds_bucket{le=\"+Inf\"} %llu\n", cum);
    }
    cm_buf_printf(&b, P "delivery_latency_seconds_sum %.6f\n" P "delivery_latency_seconds_count %llu\n",
        (double)LOAD(m->lat_sum_us) / 1e6, LOAD(m->lat_count));
    if (b.fail) {
        cm_buf_free(&b);
        return -ENOMEM;
    }
    *res = b.p;
    *res_len = b.n;
    return 0;
}
