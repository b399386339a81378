/* Per-thread single-producer/single-consumer ring of variable-length records.
 *
 * Producer: the owning thread, either in the sampling signal handler or (issue 4 hooks) in
 * normal context with ag_thread_t.busy set, so the two never interleave on one ring.
 * Consumer: the background thread only. Positions are monotonic byte counters; records are
 * 8-byte aligned, never split: when a record does not fit before the end of the buffer, a
 * skip record pads to the end. A full ring makes reserve fail (the caller counts
 * DROP_RING_FULL); nothing blocks, nothing allocates after init.
 *
 * Memory ordering: the producer writes the record, then publishes head with release; the
 * consumer reads head with acquire, reads the record, then publishes tail with release.
 */
#include "record.h"

#include <sys/mman.h>

int ag_ring_init(ag_ring_t *r, uint32_t size) {
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    r->buf = p;
    r->mask = size - 1;
    atomic_store_explicit(&r->head, 0, memory_order_relaxed);
    atomic_store_explicit(&r->tail, 0, memory_order_relaxed);
    return 0;
}

void ag_ring_destroy(ag_ring_t *r) {
    if (r->buf)
        munmap(r->buf, (size_t)r->mask + 1);
    r->buf = NULL;
}

AG_NO_TSAN void *ag_ring_reserve(ag_ring_t *r, uint32_t len) {
    uint64_t size = (uint64_t)r->mask + 1;
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    uint64_t off = head & r->mask;
    uint64_t pad = off + len > size ? size - off : 0;
    if (!r->buf || len > size / 2 || head + pad + len - tail > size)
        return NULL;
    if (pad) {
        ag_rec_t *skip = (ag_rec_t *)(r->buf + off);
        skip->len = (uint32_t)pad;
        skip->type = AG_REC_SKIP;
        head += pad;
        atomic_store_explicit(&r->head, head, memory_order_release);
        off = 0;
    }
    return r->buf + off;
}

AG_NO_TSAN void ag_ring_commit(ag_ring_t *r, uint32_t len) {
    uint64_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    atomic_store_explicit(&r->head, head + len, memory_order_release);
}

const void *ag_ring_peek(ag_ring_t *r) {
    for (;;) {
        uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
        uint64_t head = atomic_load_explicit(&r->head, memory_order_acquire);
        if (!r->buf || tail == head)
            return NULL;
        const ag_rec_t *rec = (const ag_rec_t *)(r->buf + (tail & r->mask));
        if (rec->type != AG_REC_SKIP)
            return rec;
        atomic_store_explicit(&r->tail, tail + rec->len, memory_order_release);
    }
}

void ag_ring_release(ag_ring_t *r, uint32_t len) {
    uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    atomic_store_explicit(&r->tail, tail + len, memory_order_release);
}
