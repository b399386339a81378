/* The generic sample record and its record path (record.c). */
#ifndef AG_RECORD_H
#define AG_RECORD_H

#include "base.h"
#include "thread.h"
#include "cm/chunk.h"

#define AG_REC_SKIP 0xffu /* ring padding record */
#define AG_STF_NO_BOUNDS 0x80000000u /* internal stack flag: leaf only, bounds not known yet */
#define AG_REC_MAX (sizeof(ag_rec_t) + AG_MAX_DEPTH * sizeof(uintptr_t))

typedef struct ag_rec {
    uint32_t len;       /* bytes, including pcs and padding */
    uint8_t type;       /* cm_event_type_t, or AG_REC_SKIP */
    uint8_t flags;      /* CM_SF_* */
    uint16_t depth;     /* pcs that follow, leaf first */
    uint32_t stack_flags; /* CM_STF_* */
    uint32_t labels;    /* global label set id (context.c), 0 = none */
    uint64_t time_ns;   /* CLOCK_REALTIME */
    uint64_t weight;    /* type unit */
    uint64_t count;     /* milli-events */
    uint64_t size;      /* type-specific: alloc bytes, io bytes */
    uint64_t address;   /* type-specific: lock address */
    uint32_t io_kind, fd_kind;
    uint8_t ctx[CM_CONTEXT_SIZE]; /* trace id + span id, zero = none */
    uintptr_t pcs[];
} ag_rec_t;

/* One event as a producer describes it (type-specific attributes may stay 0). */
typedef struct {
    cm_event_type_t type;
    uint32_t flags;
    uint64_t weight, count, size, address;
    uint32_t io_kind, fd_kind;
} ag_event_t;

/* handler-safe (and hook-safe): unwinds the calling thread (from uc if not NULL, else from
 * the caller's frame), snapshots its span context and labels and appends one record to the
 * thread's ring. Counts events_seen, DROP_RING_FULL, DROP_UNWIND_FAILED,
 * DROP_STACK_TRUNCATED. Returns 0 or -1 if dropped. Sets t->busy while it writes: a producer
 * that finds it set (a handler interrupting a hook, or a hook in a handler) drops (RING_FULL). */
AG_HIDDEN int ag_record_take(ag_thread_t *t, const ag_event_t *ev, const void *uc);

/* Global counters (relaxed atomics, handler-safe). */
AG_HIDDEN extern _Atomic uint64_t ag_drops[CM_EV_COUNT][AG_DROP_REASONS];
AG_HIDDEN extern _Atomic uint64_t ag_events_seen[CM_EV_COUNT];
AG_HIDDEN extern _Atomic uint64_t ag_handler_ns_sum, ag_handler_ns_n; /* cost probes */
AG_HIDDEN extern _Atomic uint64_t ag_samples_taken;                    /* all types */
/* AG_NO_TSAN: called from the signal handler's path (record.c), where GCC will not inline
 * an instrumented function into an uninstrumented one: the out-of-line instrumented copy would
 * run on threads whose TSan state may be gone (a signal in the thread's exit path). */
AG_NO_TSAN static inline void ag_drop_count(uint32_t type, uint32_t reason, uint64_t n) {
    atomic_fetch_add_explicit(&ag_drops[type][reason], n, memory_order_relaxed);
}

#endif
