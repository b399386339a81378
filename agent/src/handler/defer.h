/* Samples unwound later from a copy of their stack: no tables yet, or no stack bounds yet
 * (defer.c). */
#ifndef AG_DEFER_H
#define AG_DEFER_H

#include "base.h"
#include "record.h"

#define AG_DEFER_ARENA (16u << 20)     /* stack copies (MAP_NORESERVE, pages given back) */
#define AG_DEFER_COPY_MAX (32u << 10)  /* bytes of stack copied per sample, at most */
#define AG_STF_DEFERRED 0x40000000u    /* internal stack flag: pcs[1] names a stack copy */
typedef struct {
    _Atomic uint64_t deferred, full; /* copies taken; samples the full arena turned away */
    _Atomic uint64_t resolved;       /* copies unwound by the bg thread */
    _Atomic uint64_t vm_failed;      /* unbounded stacks process_vm_readv could not read */
    _Atomic uint64_t resets, peak_bytes; /* arena rewinds; most bytes in use at one */
} ag_defer_counters_t;
AG_HIDDEN extern ag_defer_counters_t ag_defer_stats;
AG_HIDDEN extern uint64_t ag_defer_test_delay_ns; /* FLEETPROF_TEST_CFI_DELAY_MS (tests only) */
/* constructor: maps the arena (before any timer is armed). 0 or -1. */
AG_HIDDEN int ag_defer_init(size_t arena_bytes);
/* handler-safe: copies the registers and the stack from sp (to hi, at most AG_DEFER_COPY_MAX;
 * hi == 0: bounds unknown, read with process_vm_readv up to the first unmapped byte) into the
 * arena; writes pcs[0] = pc, pcs[1] = the copy and returns 2, and the caller must call
 * ag_defer_done() once the record is committed; 0 when it took nothing (unwind at once),
 * with *full set when that was for want of room. */
AG_HIDDEN uint32_t ag_defer_take(uintptr_t pc, uintptr_t sp, uintptr_t fp, int exact,
                                 uintptr_t hi, uintptr_t *pcs, int *full);
AG_HIDDEN void ag_defer_done(void);
/* bg: r itself, or (AG_STF_DEFERRED) r unwound from its copy into out (AG_REC_MAX bytes). */
AG_HIDDEN const ag_rec_t *ag_defer_resolve(const struct ag_rec *r, struct ag_rec *out);
/* bg: after a drain, stops new copies; returns 1 when none is in progress (then drain again,
 * so every copy is unwound, and call ag_defer_reset_end), 0 to try again on the next tick. */
AG_HIDDEN int ag_defer_reset_begin(void);
AG_HIDDEN void ag_defer_reset_end(void); /* rewinds the arena, gives its pages back */
AG_HIDDEN void ag_defer_after_fork_child(int follow);

#endif
