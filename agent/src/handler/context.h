/* Per-thread span context and labels (context.c). */
#ifndef AG_CONTEXT_H
#define AG_CONTEXT_H

#include "base.h"
#include "cm/chunk.h"

typedef struct {
    uint8_t ctx[CM_CONTEXT_SIZE];
    uint32_t labels;
} ag_ctx_slot_t;
/* handler-safe: copies the calling thread's current context (double buffer, see context.c). */
AG_HIDDEN void ag_context_read(ag_ctx_slot_t *out);
/* The calling thread's context block, and the bytes of it a remote reader copies; picks the
 * current slot out of such a copy (wall.c reads blocked threads' contexts). */
AG_HIDDEN uintptr_t ag_context_addr(void);
AG_HIDDEN size_t ag_context_copy_size(void);
AG_HIDDEN void ag_context_pick(const void *copy, ag_ctx_slot_t *out);
/* bg: the (key, value) pairs of a global label set id. Returns the pair count (<= 4), with
 * pointers valid until ag_context_reset(). Takes the label lock briefly. */
AG_HIDDEN uint32_t ag_context_labels(uint32_t id, const char *kv[2 * 4]);
AG_HIDDEN void ag_context_after_fork_child(void);
/* Units of work counted since the last call (fleetprof_work_done), reset to 0. */
AG_HIDDEN uint64_t ag_work_take(void);
AG_HIDDEN void ag_context_lock(void);
AG_HIDDEN void ag_context_unlock(void);
/* Parses a W3C traceparent into its ids. Returns 0 or -EINVAL (malformed, all-zero ids). */
AG_HIDDEN int ag_parse_traceparent(const char *tp, uint8_t trace[16], uint8_t span[8]);

#endif
