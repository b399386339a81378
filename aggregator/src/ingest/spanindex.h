/* Span index: for each sample that carries a trace/span context, adds to the batch
 *   spans       (trace id, span id) -> service, version, first/last sample time, weight per
 *               event type, rows          (to rank the spans of a service in a window)
 *   span_stacks (trace id, span id, type, stack) -> weight, count, rows
 *               (to build the profile of one trace or one span, every event type)
 * and for each span record of a chunk (the application's named spans):
 *   requests    (trace id, span id) -> service, version, name, start, end, ended, thread
 * Retention of the index is bounded by span-max-age (retention.c).
 * Threading: consume thread only (writes into the partition's batch).
 */
#ifndef AGG_SPANINDEX_H
#define AGG_SPANINDEX_H

#include "batch.h"
#include "intern.h"

/* Adds row i of the samples of `type` in c (whose context is not 0). Returns 0 or CM_ENOMEM. */
int agg_spanindex_row(agg_batch_t *b, const cm_chunk_t *c, const agg_chunk_ids_t *ids,
                      const cm_samples_t *s, uint32_t i);

/* Adds the chunk's span records (minor 2) to the batch's requests: name (ids->str), start,
 * end (for a span still active at the cut: the cut), ended, thread id. Returns 0 or
 * CM_ENOMEM. */
int agg_spanindex_requests(agg_batch_t *b, const cm_chunk_t *c, const agg_chunk_ids_t *ids);

#endif
