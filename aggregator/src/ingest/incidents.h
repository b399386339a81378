/* Incident captures at ingest (chunk format minor 3): a chunk carrying an Incident is not part
 * of its service's profile (the always-on chunks carry the same samples); it becomes the
 * incident's row (table incidents) and one stored frame (table incident_chunks), from which
 * the query side builds the capture's profile and its diff (serve/routes/serve_incidents.c).
 * Threading: the consume thread (the batch's). */
#ifndef AGG_INGEST_INCIDENTS_H
#define AGG_INGEST_INCIDENTS_H

#include "batch.h"
#include "intern.h"

#include "cm/chunk.h"

/* Adds chunk c (decoded from frame[0..len), c->incident.present) to the batch. Returns 0 or
 * CM_ENOMEM. */
int agg_ingest_incident(agg_intern_t *in, agg_batch_t *b, const cm_chunk_t *c,
                        const uint8_t *frame, size_t len);

#endif
