/* The generic sample record path, shared by every event type.
 *
 * CPU and wall samples come from the signal handler (uc != NULL); issue 4's allocation, lock
 * and I/O hooks call the same function from normal context (uc == NULL) with t->busy set, so
 * a sampling signal landing in the middle of a hook sees busy and drops its own sample
 * (counted as DROP_RING_FULL) rather than interleave two writers on one ring.
 *
 * Async-signal-safe: reads the clock (vDSO), unwinds with bounds checks (or, before the first
 * unwind tables are published or while the thread's stack bounds are unknown, copies the stack
 * into defer.c's preallocated arena for the bg thread to unwind), copies the thread's context,
 * writes into the preallocated ring. No locks, no allocation, no stdio.
 */
#include "cfi_table.h"
#include "ag_unwind.h"
#include "defer.h"
#include "context.h"
#include "pyframes.h"
#include "jvm.h"

#include <string.h>
#include <ucontext.h>

_Atomic uint64_t ag_drops[CM_EV_COUNT][AG_DROP_REASONS];
_Atomic uint64_t ag_events_seen[CM_EV_COUNT];
_Atomic uint64_t ag_handler_ns_sum, ag_handler_ns_n;
_Atomic uint64_t ag_samples_taken;


__attribute__((no_sanitize("address", "thread"), noinline)) static int
record(ag_thread_t *t, const ag_event_t *ev, const void *ucv);

__attribute__((no_sanitize("address", "thread"), noinline)) int
ag_record_take(ag_thread_t *t, const ag_event_t *ev, const void *ucv) {
    atomic_fetch_add_explicit(&ag_events_seen[ev->type], 1, memory_order_relaxed);
    /* The ring is the thread's, one writer at a time: a hook in progress below a signal handler
     * owns it, and so does a handler below a hook (an application handler nested in ours, its
     * signal not blocked during ours, that allocates). Whoever finds busy set drops. */
    if (t->busy) {
        ag_drop_count(ev->type, CM_DROP_RING_FULL, 1);
        return -1;
    }
    t->busy = 1;
    atomic_signal_fence(memory_order_seq_cst);
    int rc = record(t, ev, ucv);
    atomic_signal_fence(memory_order_seq_cst);
    t->busy = 0;
    return rc;
}

/* Unwinds (from uc, else from the caller of ag_record_take), then fills one ring record. */
__attribute__((no_sanitize("address", "thread"), noinline)) static int
record(ag_thread_t *t, const ag_event_t *ev, const void *ucv) {
    uintptr_t pc, fp, sp;
    int exact;
    if (ucv) {
        const ucontext_t *uc = ucv;
        pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
        fp = (uintptr_t)uc->uc_mcontext.gregs[REG_RBP];
        sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
        exact = 1;
    } else {
        /* the state right after this function returns (built with frame pointers) */
        const uintptr_t *frame = (const uintptr_t *)__builtin_frame_address(0);
        pc = frame[1];
        fp = frame[0];
        sp = (uintptr_t)(frame + 2);
        exact = 0;
    }
    uintptr_t lo = atomic_load_explicit(&t->stack_lo, memory_order_relaxed);
    uintptr_t hi = atomic_load_explicit(&t->stack_hi, memory_order_relaxed);
    if (!hi)
        atomic_store_explicit(&t->seen_sp, sp, memory_order_relaxed);

    ag_rec_t *r = ag_ring_reserve(&t->ring, (uint32_t)AG_REC_MAX);
    if (!r) {
        ag_drop_count(ev->type, CM_DROP_RING_FULL, 1);
        return -1;
    }
    uint32_t uw = 0, depth = 0, deferred = 0;
    /* Before the first unwind tables are published, or while the thread's stack bounds are
     * unknown: a copy of the stack, unwound by the bg thread (defer.c). */
    int no_tables = !atomic_load_explicit(&ag_cfi_snap, memory_order_relaxed);
    if (pc && (hi ? sp >= lo && sp < hi && no_tables : 1)) {
        int full = 0;
        depth = ag_defer_take(pc, sp, fp, exact, hi, r->pcs, &full);
        deferred = depth != 0;
        if (full)
            ag_drop_count(ev->type, CM_DROP_UNWIND_FAILED, 1); /* arena full: kept, partial */
    }
    if (!deferred) {
        depth = pc ? ag_unwind(t, pc, sp, fp, exact, lo, hi, 0, r->pcs, AG_MAX_DEPTH, &uw) : 0;
        if (depth == AG_MAX_DEPTH) /* the stack filled the record: cut at the depth limit */
            uw |= AG_UW_DEPTH | AG_UW_INCOMPLETE;
        depth = ag_unwind_strip_agent(r->pcs, depth);
        depth = ag_py_merge(t, r->pcs, depth, AG_MAX_DEPTH); /* CPython frames (pyframes.c) */
        depth = ag_jvm_merge(ucv, hi, r->pcs, depth, AG_MAX_DEPTH, &uw); /* Java: lang/jvm.c */
    }
    if (depth == 0) {
        ag_drop_count(ev->type, CM_DROP_UNWIND_FAILED, 1);
        return -1; /* nothing reserved is committed */
    }
    /* Truncated: cut at the depth limit; incomplete: could not go on to the outermost frame. */
    int truncated = (uw & AG_UW_DEPTH) != 0, incomplete = !truncated && (uw & AG_UW_INCOMPLETE);
    if (truncated)
        ag_drop_count(ev->type, CM_DROP_STACK_TRUNCATED, 1);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ag_ctx_slot_t ctx;
    ag_context_read(&ctx);

    uint32_t len = (uint32_t)(sizeof(ag_rec_t) + depth * sizeof(uintptr_t));
    len = (len + 7u) & ~7u;
    r->len = len;
    r->type = (uint8_t)ev->type;
    r->flags = (uint8_t)ev->flags;
    r->depth = (uint16_t)depth;
    r->stack_flags = (truncated ? CM_STF_TRUNCATED : 0) | (incomplete ? CM_STF_INCOMPLETE : 0) |
                     (hi || deferred ? 0 : AG_STF_NO_BOUNDS) | (deferred ? AG_STF_DEFERRED : 0);
    r->labels = ctx.labels;
    r->time_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    r->weight = ev->weight;
    r->count = ev->count;
    r->size = ev->size;
    r->address = ev->address;
    r->io_kind = ev->io_kind;
    r->fd_kind = ev->fd_kind;
    for (uint32_t k = 0; k < CM_CONTEXT_SIZE; k++) /* no memcpy: a sanitizer may intercept it */
        r->ctx[k] = ctx.ctx[k];
    ag_ring_commit(&t->ring, len);
    if (deferred)
        ag_defer_done(); /* committed: a reset's drain will see it */
    atomic_fetch_add_explicit(&ag_samples_taken, 1, memory_order_relaxed);
    return 0;
}
