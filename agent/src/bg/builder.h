/* Chunk builder: ring records into one chunk per interval (builder.c, bg thread only). */
#ifndef AG_BUILDER_H
#define AG_BUILDER_H

#include "base.h"
#include "record.h"
#include "thread.h"
#include "cm/chunk.h"

typedef struct ag_builder ag_builder_t;
AG_HIDDEN ag_builder_t *ag_builder_new(void);
AG_HIDDEN void ag_builder_free(ag_builder_t *b);
AG_HIDDEN void ag_builder_add(ag_builder_t *b, const ag_thread_t *t, pid_t tid,
                              const ag_rec_t *r);
AG_HIDDEN uint32_t ag_builder_samples(const ag_builder_t *b, cm_event_type_t type);
AG_HIDDEN size_t ag_builder_bytes(const ag_builder_t *b); /* estimated, before LZ4 */
/* Chunk size bounds: the collector and Kafka refuse a message above the broker's
 * limit (1 MB by default), so an interval whose chunk would grow past AG_CHUNK_SOFT (estimated)
 * is cut early into several chunks, and an encoded chunk above AG_CHUNK_MAX is never queued for
 * the collector (written to FLEETPROF_OUTPUT only, counted DROP_ENCODE_FAILED). */
#define AG_CHUNK_SOFT (512u * 1024u)
#define AG_CHUNK_MAX (900u * 1024u)
/* Encodes everything added since the last call as one chunk covering [start_ns, end_ns] and
 * resets. hdr supplies the header fields (service, sampling, drops, cpu...). Returns 0 and a
 * malloc'ed frame, or a CM_E* code. */
/* Adds one span row (spans.c): its context (trace + span id), name (NULL: none), start, duration,
 * thread and CM_SPF_* flags. */
AG_HIDDEN void ag_builder_add_span(ag_builder_t *b, const uint8_t *ctx, const char *name,
                                   uint64_t start_ns, uint64_t duration_ns, pid_t tid,
                                   uint32_t flags);
AG_HIDDEN int ag_builder_finish(ag_builder_t *b, cm_header_t *hdr, uint8_t **frame,
                                size_t *frame_len, char *err, size_t err_size);

#endif
