/* Aggregator metrics: counters updated by the consume thread, rendered in the Prometheus text
 * format by the HTTP thread (/metrics), and the liveness facts behind /healthz.
 *
 * Threading: every field is read and written under mu; the consume thread takes it once per
 * batch and once per second, the HTTP thread once per scrape.
 */
#ifndef AGG_METRICS_H
#define AGG_METRICS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define AGG_METRICS_MAX_REASONS 32
#define AGG_METRICS_MAX_PARTITIONS 1024
#define AGG_METRICS_LAT_BUCKETS 12

typedef struct {
    pthread_mutex_t mu;
    uint64_t messages, chunks, samples, duplicates, rejects, batches, write_errors, stale_batches;
    uint64_t dlq_produced, dlq_failed, retention_runs, retention_rows_moved,
        retention_rows_expired, rebalances;
    struct {
        char reason[24];
        uint64_t count;
    } reject_reasons[AGG_METRICS_MAX_REASONS];
    /* batch write latency histogram, seconds */
    uint64_t lat_count[AGG_METRICS_LAT_BUCKETS + 1];
    double lat_sum;
    uint64_t lat_n;
    struct {
        int assigned;
        int64_t committed, lag;
    } part[AGG_METRICS_MAX_PARTITIONS];
    /* every partition of the topic, whoever owns it (consume.c group_check, every 5 s): lag
     * from the stored offset and how long it has been positive without the offset moving */
    struct {
        int64_t lag, stalled_ms;
    } group[AGG_METRICS_MAX_PARTITIONS];
    int32_t group_n;
    int64_t group_stall_ms; /* /healthz fails when a partition is stalled this long */
    int64_t store_bytes;
    uint64_t dim_overflow[16]; /* dims.h: values stored as (other), per agg_dim_t */
    uint64_t pid_mismatch;     /* chunks whose claimed pid is not the collector's peer pid */
    uint64_t incidents, incident_chunks; /* incident captures committed (ingest/incidents.c) */
    int64_t heartbeat_ns;   /* CLOCK_MONOTONIC of the consume loop's last turn */
    int store_ok;           /* last batch write succeeded (or none yet) */
    int64_t stall_after_ns; /* /healthz fails when the loop is quiet this long */
} agg_metrics_t;

void agg_metrics_init(agg_metrics_t *m);
void agg_metrics_destroy(agg_metrics_t *m);
/* Locked updates from the consume thread. */
void agg_metrics_add_reject(agg_metrics_t *m, const char *reason, uint64_t n);
void agg_metrics_observe_write(agg_metrics_t *m, double seconds);
/* Renders the Prometheus text; returns a malloc'ed NUL-terminated buffer or NULL. */
char *agg_metrics_render(agg_metrics_t *m);
/* A labelled counter's Prometheus text: name{label="names[i]"} v[i] for i < n, with its help
 * and type lines. malloc'ed; NULL when out of memory. */
char *agg_metrics_labelled(const char *name, const char *help, const char *label,
                           const char *const *names, const uint64_t *v, int n);
/* 1 if healthy; fills why with the reason when not. */
int agg_metrics_healthy(agg_metrics_t *m, char *why, size_t why_size);
int64_t agg_mono_ns(void);

#endif
