/* The stack unwinder: compiled CFI, frame pointers as fallback (unwind.c). */
#ifndef AG_UNWIND_H
#define AG_UNWIND_H

#include "base.h"
#include "thread.h"

#define AG_UW_DEPTH 1u      /* stopped at max frames */
#define AG_UW_INCOMPLETE 2u /* could not be continued to the outermost frame */
#define AG_UW_FP 4u         /* a frame-pointer fallback step was taken */
/* handler-safe. Unwinds from (pc, sp, fp); exact: pc is the interrupted instruction (a signal),
 * not a return address. Reads stack words only inside [lo, hi), at address + delta (delta != 0:
 * a copy of the stack). self: the calling thread's slot (its unwind epoch, see cfi_table.c);
 * NULL only on the background thread (the tables' only freer). Writes up to max pcs, leaf first;
 * returns the count and *flags (AG_UW_*). */
AG_HIDDEN uint32_t ag_unwind(ag_thread_t *self, uintptr_t pc, uintptr_t sp, uintptr_t fp,
                             int exact, uintptr_t lo, uintptr_t hi, intptr_t delta,
                             uintptr_t *pcs, uint32_t max, uint32_t *flags);
/* handler-safe: removes libfleetprof's own frames except the outermost of each run (the
 * interposer the application called: symbols.c names it as the real function, builder.c leaves
 * out the others). */
AG_HIDDEN uint32_t ag_unwind_strip_agent(uintptr_t *pcs, uint32_t n);
AG_HIDDEN extern uintptr_t ag_self_lo, ag_self_hi; /* libfleetprof's image (hooks.c) */

#endif
