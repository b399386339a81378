/* Prometheus rendering of the aggregator counters and the health verdict (see metrics.h).
 * Threading: all access under m->mu. */
#include "metrics.h"

#include "dims.h"

#include "cm/buf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const double lat_bounds[AGG_METRICS_LAT_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025,
                                                           0.05,  0.1,    0.25,  0.5,  1,
                                                           2.5,   10};

int64_t agg_mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void agg_metrics_init(agg_metrics_t *m) {
    memset(m, 0, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    m->store_ok = 1;
    m->heartbeat_ns = agg_mono_ns();
    m->group_stall_ms = 20000;
    m->stall_after_ns = 60ll * 1000000000;
}

void agg_metrics_destroy(agg_metrics_t *m) { pthread_mutex_destroy(&m->mu); }

void agg_metrics_add_reject(agg_metrics_t *m, const char *reason, uint64_t n) {
    pthread_mutex_lock(&m->mu);
    m->rejects += n;
    for (int i = 0; i < AGG_METRICS_MAX_REASONS; i++) {
        if (!m->reject_reasons[i].reason[0])
            snprintf(m->reject_reasons[i].reason, sizeof m->reject_reasons[i].reason, "%s",
                     reason);
        if (!strcmp(m->reject_reasons[i].reason, reason)) {
            m->reject_reasons[i].count += n;
            break;
        }
    }
    pthread_mutex_unlock(&m->mu);
}

void agg_metrics_observe_write(agg_metrics_t *m, double s) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < AGG_METRICS_LAT_BUCKETS && s > lat_bounds[i])
        i++;
    m->lat_count[i]++;
    m->lat_sum += s;
    m->lat_n++;
    pthread_mutex_unlock(&m->mu);
}

static void counter(cm_buf_t *b, const char *name, const char *help, uint64_t v) {
    cm_buf_printf(b, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
              (unsigned long long)v);
}

char *agg_metrics_render(agg_metrics_t *m) {
    cm_buf_t b = {0};
    pthread_mutex_lock(&m->mu);
    counter(&b, "fleetprof_aggregator_messages_total", "Kafka messages consumed", m->messages);
    counter(&b, "fleetprof_aggregator_chunks_total", "chunks rolled up and committed", m->chunks);
    counter(&b, "fleetprof_aggregator_samples_total", "sample rows rolled up and committed",
            m->samples);
    counter(&b, "fleetprof_aggregator_incidents_total",
            "incidents committed (the first chunk of an agent's incident capture)", m->incidents);
    counter(&b, "fleetprof_aggregator_incident_chunks_total",
            "chunks of incident captures committed (not added to the service's profile)",
            m->incident_chunks);
    counter(&b, "fleetprof_aggregator_duplicate_chunks_total",
            "chunks skipped because their id was already counted", m->duplicates);
    counter(&b, "fleetprof_aggregator_batches_total", "store transactions committed", m->batches);
    counter(&b, "fleetprof_aggregator_write_errors_total", "store transactions that failed",
            m->write_errors);
    counter(&b, "fleetprof_aggregator_stale_batches_total",
            "batches dropped because another instance had advanced the partition",
            m->stale_batches);
    counter(&b, "fleetprof_aggregator_dlq_produced_total", "messages sent to the dead-letter topic",
            m->dlq_produced);
    counter(&b, "fleetprof_aggregator_dlq_failed_total", "dead-letter deliveries that failed",
            m->dlq_failed);
    counter(&b, "fleetprof_aggregator_rebalances_total", "partition assignments and revocations",
            m->rebalances);
    counter(&b, "fleetprof_aggregator_retention_runs_total", "retention passes", m->retention_runs);
    counter(&b, "fleetprof_aggregator_retention_rows_downsampled_total",
            "fine rollup rows merged into coarse buckets", m->retention_rows_moved);
    counter(&b, "fleetprof_aggregator_retention_rows_expired_total",
            "rollup rows deleted past max age", m->retention_rows_expired);
    cm_buf_printf(&b, "# HELP fleetprof_aggregator_dimension_overflow_total dimension values past "
                  "the cardinality bound, stored as (other)\n"
                  "# TYPE fleetprof_aggregator_dimension_overflow_total counter\n");
    _Static_assert(AGG_DIM_COUNT <= sizeof m->dim_overflow / sizeof m->dim_overflow[0],
                   "agg_metrics_t.dim_overflow is too short for agg_dim_t");
    for (int i = 0; i < AGG_DIM_COUNT; i++)
        cm_buf_printf(&b, "fleetprof_aggregator_dimension_overflow_total{dimension=\"%s\"} %llu\n",
                  agg_dim_names[i], (unsigned long long)m->dim_overflow[i]);
    counter(&b, "fleetprof_aggregator_chunks_pid_mismatch_total",
            "chunks whose claimed pid is not the pid the collector checked (SO_PEERCRED); "
            "stored under the checked pid, the claim in the pid-claimed dimension",
            m->pid_mismatch);
    cm_buf_printf(&b, "# HELP fleetprof_aggregator_rejects_total messages dead-lettered, by reason\n"
                  "# TYPE fleetprof_aggregator_rejects_total counter\n");
    for (int i = 0; i < AGG_METRICS_MAX_REASONS && m->reject_reasons[i].reason[0]; i++)
        cm_buf_printf(&b, "fleetprof_aggregator_rejects_total{reason=\"%s\"} %llu\n",
                  m->reject_reasons[i].reason, (unsigned long long)m->reject_reasons[i].count);
    cm_buf_printf(&b, "# HELP fleetprof_aggregator_write_seconds store transaction latency\n"
                  "# TYPE fleetprof_aggregator_write_seconds histogram\n");
    uint64_t cum = 0;
    for (int i = 0; i < AGG_METRICS_LAT_BUCKETS; i++) {
        cum += m->lat_count[i];
        cm_buf_printf(&b, "fleetprof_aggregator_write_seconds_bucket{le=\"%g\"} %llu\n",
                  lat_bounds[i], (unsigned long long)cum);
    }
    cum += m->lat_count[AGG_METRICS_LAT_BUCKETS];
    cm_buf_printf(&b,
              "fleetprof_aggregator_write_seconds_bucket{le=\"+Inf\"} %llu\n"
              "fleetprof_aggregator_write_seconds_sum %.6f\n"
              "fleetprof_aggregator_write_seconds_count %llu\n",
              (unsigned long long)cum, m->lat_sum, (unsigned long long)m->lat_n);
    cm_buf_printf(&b, "# HELP fleetprof_aggregator_group_lag_messages every partition of the topic, "
                  "whoever owns it: high watermark minus stored offset\n"
                  "# TYPE fleetprof_aggregator_group_lag_messages gauge\n");
    for (int32_t p = 0; p < m->group_n && p < AGG_METRICS_MAX_PARTITIONS; p++)
        cm_buf_printf(&b, "fleetprof_aggregator_group_lag_messages{partition=\"%d\"} %lld\n", p,
                  (long long)m->group[p].lag);
    cm_buf_printf(&b, "# HELP fleetprof_aggregator_group_stalled_seconds how long a partition has "
                  "been behind without its stored offset moving\n"
                  "# TYPE fleetprof_aggregator_group_stalled_seconds gauge\n");
    for (int32_t p = 0; p < m->group_n && p < AGG_METRICS_MAX_PARTITIONS; p++)
        cm_buf_printf(&b, "fleetprof_aggregator_group_stalled_seconds{partition=\"%d\"} %.1f\n", p,
                  m->group[p].lag > 0 ? m->group[p].stalled_ms / 1e3 : 0.0);
    static const struct {
        const char *name, *help;
        int committed; /* the stored offset, else the lag */
    } pg[] = {{"lag_messages", "high watermark minus stored offset", 0},
              {"committed_offset", "next offset stored per partition", 1}};
    for (size_t k = 0; k < sizeof pg / sizeof *pg; k++) { /* the assigned partitions */
        cm_buf_printf(&b, "# HELP fleetprof_aggregator_%s %s\n# TYPE fleetprof_aggregator_%s gauge\n",
                  pg[k].name, pg[k].help, pg[k].name);
        for (int p = 0; p < AGG_METRICS_MAX_PARTITIONS; p++)
            if (m->part[p].assigned)
                cm_buf_printf(&b, "fleetprof_aggregator_%s{partition=\"%d\"} %lld\n", pg[k].name, p,
                          (long long)(pg[k].committed ? m->part[p].committed : m->part[p].lag));
    }
    cm_buf_printf(&b,
              "# HELP fleetprof_aggregator_store_bytes bytes of the assigned partitions' stores\n"
              "# TYPE fleetprof_aggregator_store_bytes gauge\n"
              "fleetprof_aggregator_store_bytes %lld\n",
              (long long)m->store_bytes);
    pthread_mutex_unlock(&m->mu);
    if (b.fail)
        cm_buf_free(&b); /* no metrics rather than some */
    return b.p;
}

int agg_metrics_healthy(agg_metrics_t *m, char *why, size_t why_size) {
    pthread_mutex_lock(&m->mu);
    int64_t idle = agg_mono_ns() - m->heartbeat_ns;
    int ok = 1;
    if (idle > m->stall_after_ns) {
        snprintf(why, why_size, "consume loop has not run for %.1f s\n", idle / 1e9);
        ok = 0;
    } else if (!m->store_ok) {
        snprintf(why, why_size, "last store write failed; see the log\n");
        ok = 0;
    }
    for (int32_t p = 0; ok && p < m->group_n && p < AGG_METRICS_MAX_PARTITIONS; p++)
        if (m->group[p].lag > 0 && m->group[p].stalled_ms > m->group_stall_ms) {
            snprintf(why, why_size,
                     "partition %d: %lld messages behind and no progress for %.0f s (no live "
                     "member of the group consumes it, or its owner cannot write)\n",
                     p, (long long)m->group[p].lag, m->group[p].stalled_ms / 1e3);
            ok = 0;
        }
    pthread_mutex_unlock(&m->mu);
    return ok;
}

char *agg_metrics_labelled(const char *name, const char *help, const char *label,
                           const char *const *names, const uint64_t *v, int n) {
    cm_buf_t b = {0};
    cm_buf_printf(&b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (int i = 0; i < n; i++)
        cm_buf_printf(&b, "%s{%s=\"%s\"} %llu\n", name, label, names[i],
                      (unsigned long long)v[i]);
    if (b.fail) {
        cm_buf_free(&b);
        return NULL;
    }
    return b.p;
}
