/* Incident webhooks: when an incident of a service is stored, its row is POSTed as JSON to the
 * service's URL (aggregator option `webhooks = SERVICE=URL,...`; `*=URL` for every service).
 *
 * The consume loop stages an incident when it ingests the first chunk of a capture
 * (agg_webhook_stage, per partition), and releases the partition's staged ones once its batch
 * is written (agg_webhook_commit) or drops them when the write failed (agg_webhook_discard: the
 * batch is consumed again and stages them again). Released posts go to a bounded queue
 * (AGG_WEBHOOK_QUEUE) served by one thread of its own: libcurl, `webhook-timeout` per attempt,
 * up to 3 attempts 1 s and 2 s apart; a full queue drops the post. Ingest never waits for a
 * receiver. Delivery is at least once (a receiver deduplicates by the incident's id); at
 * shutdown the post in progress ends (no further retry) and the queued ones are dropped.
 * Counted: fleetprof_aggregator_webhook_total{outcome="sent|retried|failed|dropped"}.
 *
 * Threading: stage/commit/discard on the consumer thread; metrics from any thread. */
#ifndef AGG_WEBHOOK_H
#define AGG_WEBHOOK_H

#include "cm/chunk.h"

#include <stddef.h>
#include <stdint.h>

#define AGG_WEBHOOK_QUEUE 256

typedef struct agg_webhook agg_webhook_t;

/* spec: "SERVICE=URL,..." ("" or NULL: *out = NULL, no webhooks). Returns 0, or -1 with err
 * naming the entry that is not SERVICE=http(s)://... */
int agg_webhook_new(const char *spec, int64_t timeout_ms, agg_webhook_t **out, char *err,
                    size_t err_size);
void agg_webhook_free(agg_webhook_t *w);
/* An incident's first chunk c, of partition, ingested (w may be NULL: nothing). */
void agg_webhook_stage(agg_webhook_t *w, int32_t partition, const cm_chunk_t *c);
void agg_webhook_commit(agg_webhook_t *w, int32_t partition);
void agg_webhook_discard(agg_webhook_t *w, int32_t partition);
/* Prometheus text of its counters (malloc'ed; NULL when out of memory or w is NULL). */
char *agg_webhook_metrics(agg_webhook_t *w);

#endif
