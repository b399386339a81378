/* The consume loop: a librdkafka consumer in a consumer group reading fleetprof.chunks.
 *
 * Each assigned partition has its own store (store.h: one file under store-dir, or a connection
 * to the PostgreSQL database of --store), interning
 * state and batch. Messages are decoded and validated with the common codec; a bad one is
 * produced to the dead-letter topic with its reason (header fp-dlq-reason) and counted; a chunk
 * whose id was already counted is skipped. A batch is written to the partition's store in one
 * transaction with the partition's next offset; on assignment each partition is read from the
 * offset in its store (or the beginning). Offsets are also committed to Kafka, after the store,
 * for lag tooling only: the store is the source of truth.
 *
 * Threading: agg_consumer_run() runs on one thread (rebalance callbacks run inside it). The
 * stop flag may be set from a signal handler. Metrics are shared with the HTTP thread.
 */
#ifndef AGG_CONSUME_H
#define AGG_CONSUME_H

#include "metrics.h"
#include "retention.h"
#include "rollup.h"

#include "cm/config.h"

#include <signal.h>
#include <stdint.h>

typedef struct {
    const char *brokers, *group, *topic, *dlq_topic, *store_dir, *client_id;
    const char *store_url; /* NULL or "": SQLite files in store_dir; postgres://...: PostgreSQL */
    const char *assignment_strategy; /* "cooperative-sticky" (default), "range", "roundrobin" */
    const cm_kvlist_t *kafka_props;  /* passthrough librdkafka properties */
    int64_t batch_max_messages, batch_max_samples, batch_interval_ms;
    int64_t retention_interval_ms;   /* 0: never */
    agg_rollup_cfg_t rollup;
    uint32_t dim_limit, dim_target_limit; /* dims.h bounds; 0: the defaults */
    uint32_t dim_mask; int dims_given;    /* the dimensions stored (dims_given 0: all) */
    agg_retention_cfg_t retention;
    struct agg_webhook *webhook;          /* incidents posted once stored (webhook.h); NULL */
} agg_consume_cfg_t;

typedef struct agg_consumer agg_consumer_t;

/* Creates the consumer and DLQ producer and subscribes. Returns 0 or a negative code with err
 * filled (which option was wrong and why). cfg's strings must outlive the consumer. */
int agg_consumer_new(const agg_consume_cfg_t *cfg, agg_metrics_t *metrics, agg_consumer_t **out,
                     char *err, size_t err_size);
/* Consumes until *stop becomes non-zero, then flushes every batch and leaves the group.
 * Returns 0, or a negative code after a fatal error (out of memory). */
int agg_consumer_run(agg_consumer_t *c, volatile sig_atomic_t *stop);
void agg_consumer_free(agg_consumer_t *c);

#endif
