/* Per-thread single-producer/single-consumer ring of 8-byte aligned records (ring.c): the
 * owning thread (or its signal handler, never both at once, see ag_thread_t.busy) produces,
 * the bg thread consumes. */
#ifndef AG_RING_H
#define AG_RING_H

#include "base.h"

typedef struct {
    uint8_t *buf;
    uint32_t mask;
    _Atomic uint64_t head; /* producer position (bytes, monotonic) */
    _Atomic uint64_t tail; /* consumer position */
} ag_ring_t;

AG_HIDDEN int ag_ring_init(ag_ring_t *r, uint32_t size);
AG_HIDDEN void ag_ring_destroy(ag_ring_t *r);
/* handler-safe. Returns a pointer to len (multiple of 8) contiguous writable bytes, or NULL if
 * full. Commit with ag_ring_commit(). */
AG_HIDDEN void *ag_ring_reserve(ag_ring_t *r, uint32_t len);
AG_HIDDEN void ag_ring_commit(ag_ring_t *r, uint32_t len);
/* bg. Returns the next record (its first u32 is its length) or NULL; release with
 * ag_ring_release(). */
AG_HIDDEN const void *ag_ring_peek(ag_ring_t *r);
AG_HIDDEN void ag_ring_release(ag_ring_t *r, uint32_t len);

#endif
