/* Frame-pointer unwinding for the signal handler.
 *
 * Async-signal-safe: no calls, no locks, no allocation. Every memory read is checked against
 * the thread's stack bounds [lo, hi) captured at registration (never computed here), and the
 * frame chain must grow strictly upward, so a garbage %rbp (code built without frame pointers,
 * or a frame mid-prologue) ends the walk instead of faulting or looping.
 *
 * Why frame pointers only: libunwind's unw_init_local2(UNW_INIT_SIGNAL_FRAME) + unw_step uses
 * DWARF CFI and, on a cache miss, dl_iterate_phdr, which takes the loader lock: a sample that
 * lands inside dlopen() or another dl_iterate_phdr caller would deadlock the thread. fleetprof
 * is built with -fno-omit-frame-pointer, and so are most fleets' services today (Fedora,
 * Ubuntu 24.04 and Go default to it). Code without frame pointers yields a shorter stack (the
 * leaf pc and what the chain gives), never a crash. See agent/README.md.
 *
 * Compiled without sanitizer instrumentation: the walk reads other frames' slots, which
 * ASan may have poisoned as redzones, and TSan would report the reads as races with the
 * interrupted code on the same thread.
 */
#include "internal.h"

__attribute__((no_sanitize("address", "thread", "undefined"))) uint32_t
ag_unwind_fp(uintptr_t pc, uintptr_t fp, uintptr_t sp, uintptr_t lo, uintptr_t hi,
             uintptr_t *pcs, uint32_t max, int *truncated) {
    uint32_t n = 0;
    *truncated = 0;
    if (max == 0)
        return 0;
    pcs[n++] = pc;
    if (lo == 0 || hi <= lo)
        return n;
    if (sp > lo && sp < hi)
        lo = sp; /* nothing below the current stack pointer is a live frame */
    while (fp >= lo && fp <= hi - 16 && (fp & 7) == 0) {
        const uintptr_t *frame = (const uintptr_t *)fp;
        uintptr_t next = frame[0], ret = frame[1];
        if (ret < 4096)
            break;
        if (n == max) {
            *truncated = 1;
            break;
        }
        pcs[n++] = ret;
        if (next <= fp)
            break; /* frames must move toward the stack's base */
        fp = next;
    }
    return n;
}
