/* Frame-pointer unwinding for the signal handler.
 *
 * Async-signal-safe: no calls, no locks, no allocation. Every stack read is checked against the
 * thread's stack bounds [lo, hi) captured at registration (never computed here), and the frame
 * chain must grow strictly upward, so a garbage %rbp (code built without frame pointers, or a
 * frame mid-prologue) ends the walk instead of faulting or looping.
 *
 * The leaf frame: the interrupted function may not have set up its frame yet (prologue), may
 * never set one up (GCC omits it in leaf functions even with -fno-omit-frame-pointer), or may
 * be libc code built without frame pointers (memcpy, nanosleep...). Then %rbp still points at
 * the caller's caller, and the plain walk loses the leaf's caller. So before following %rbp we
 * scan the words between %rsp and %rbp (at most AG_LEAF_SCAN) for the leaf's return address:
 * the first word that lies in an executable mapping and follows a call instruction. A leaf
 * that did set up its frame has its return address above %rbp, outside the scanned span, so
 * nothing is added. Code bytes are read only inside published executable ranges.
 *
 * Why not libunwind in the handler: unw_init_local2(UNW_INIT_SIGNAL_FRAME) + unw_step look up
 * DWARF CFI through dl_iterate_phdr on a cache miss, which takes the loader lock: a sample
 * landing in dlopen(), or in a C++ throw (the unwinder calls dl_iterate_phdr too), would
 * deadlock the thread. Frame pointers plus the leaf scan never block (see agent/README.md).
 *
 * Compiled without sanitizer instrumentation: the walk reads other frames' slots, which ASan
 * may have poisoned as redzones, and TSan would report the reads as races with the
 * interrupted code on the same thread.
 */
#include "internal.h"

#define AG_LEAF_SCAN 64 /* words */

ag_code_map_t ag_code_maps[2];
_Atomic int ag_code_idx;

#define NO_SAN __attribute__((no_sanitize("address", "thread", "undefined")))

/* Returns the code range containing a, or -1. */
NO_SAN static int code_range(const ag_code_map_t *m, uintptr_t a) {
    uint32_t n = m->n < AG_CODE_RANGES ? m->n : AG_CODE_RANGES;
    if (n == 0 || a < m->lo[0] || a >= m->hi[n - 1])
        return -1;
    uint32_t l = 0, h = n;
    while (l < h) { /* first range with lo > a */
        uint32_t mid = (l + h) / 2;
        if (m->lo[mid] <= a)
            l = mid + 1;
        else
            h = mid;
    }
    return l > 0 && a < m->hi[l - 1] ? (int)(l - 1) : -1;
}

/* Is ret a return address: inside code, right after a call (E8 rel32, or FF /2 with the
 * common ModRM lengths)? */
NO_SAN static int is_return_address(const ag_code_map_t *m, uintptr_t ret) {
    int r = code_range(m, ret);
    if (r < 0 || ret - 7 < m->lo[r])
        return 0;
    const uint8_t *p = (const uint8_t *)ret;
    if (p[-5] == 0xe8)
        return 1;
    if (p[-2] == 0xff && (p[-1] & 0x38) == 0x10) /* call *%reg */
        return 1;
    if (p[-3] == 0xff && (p[-2] & 0x38) == 0x10) /* call *disp8(%reg) */
        return 1;
    if (p[-6] == 0xff && (p[-5] & 0x38) == 0x10) /* call *disp32(%rip) */
        return 1;
    if (p[-7] == 0xff && (p[-6] & 0x38) == 0x10) /* call *disp32(%reg,%reg) */
        return 1;
    return 0;
}

NO_SAN uint32_t ag_unwind_fp(uintptr_t pc, uintptr_t fp, uintptr_t sp, uintptr_t lo,
                             uintptr_t hi, uintptr_t *pcs, uint32_t max, int *truncated) {
    uint32_t n = 0;
    *truncated = 0;
    if (max == 0)
        return 0;
    pcs[n++] = pc;
    if (lo == 0 || hi <= lo || sp < lo || sp >= hi)
        return n;
    lo = sp; /* nothing below the stack pointer is a live frame */
    const ag_code_map_t *m = &ag_code_maps[atomic_load_explicit(&ag_code_idx,
                                                                memory_order_acquire) & 1];
    uintptr_t scan_end = fp > sp && fp <= hi ? fp : sp + AG_LEAF_SCAN * sizeof(uintptr_t);
    if (scan_end > hi)
        scan_end = hi;
    if (scan_end > sp + AG_LEAF_SCAN * sizeof(uintptr_t))
        scan_end = sp + AG_LEAF_SCAN * sizeof(uintptr_t);
    for (uintptr_t a = (sp + 7) & ~(uintptr_t)7; a + sizeof(uintptr_t) <= scan_end; a += 8) {
        uintptr_t w = *(const uintptr_t *)a;
        if (is_return_address(m, w)) {
            pcs[n++] = w;
            break;
        }
    }
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
