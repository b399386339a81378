/* The stack unwinder: compiled DWARF CFI (cfi_table.c), frame pointers where no table covers
 * the code. Used by the signal handler, the hooks and the background thread's walks of
 * blocked threads alike.
 *
 * Async-signal-safe: no locks, no allocation, no calls but to ag_cfi_find_idx (cfi.c), a leaf
 * that only loads from the immutable rows and index. The only memory read is (a) the
 * published CFI snapshot, immutable and kept alive while this thread's unwind epoch says it
 * is reading (cfi_table.c), and (b) stack words, each checked against [lo, hi): the thread's
 * stack bounds captured at registration. No code bytes are ever read, so an object unloaded
 * meanwhile (dlclose) cannot fault the walk.
 *
 * Per frame: find the object containing pc (binary search over the snapshot), then its row
 * (the object's bucket index, then a binary search among the few rows of the pc's bucket:
 * one or two cache lines where the plain search over a cold table missed on ~14, cfi.h);
 * pc - 1 for return addresses (a call may be a function's last instruction).
 *   RSP/RBP/DEREF/PLT rows: CFA from the row; return address at CFA - 8; rbp from CFA + fp_off
 *     when saved, unless that slot is below sp (a sample in an epilogue after `pop %rbp`:
 *     compilers keep the saved-at rule until the ret, and rbp already holds the caller's
 *     value); sp = CFA. The CFA must lie above sp: frames move toward the stack's base.
 *   SIGNAL (__restore_rt, CIE augmentation 'S'): the kernel's ucontext_t sits at sp; the
 *     interrupted rip/rsp/rbp come from it and the next pc is exact.
 * A sample taken inside a handler of the program's that runs on the thread's alternate signal
 * stack (V8's profiler, Go's runtime) starts outside [lo, hi): a live walk then reads the
 * alternate stack's bounds (sigaltstack, a system call) and walks within them until the SIGNAL
 * row of that handler's frame, whose interrupted sp takes it back to [lo, hi).
 *   END (return address undefined: _start, clone, clone3): the stack is complete.
 *   no object, no row (gap between FDEs), or a FALLBACK row: one frame-pointer step (rbp must
 *     lie in [sp, hi)), counted in ag_cfi_stats.fp_frames. This is what JIT code and code
 *     without CFI gets, as in async-profiler and the eBPF profiler.
 * A stack that cannot be continued (a read out of bounds, a CFA not above sp) ends there and
 * is flagged AG_UW_INCOMPLETE; nothing is guessed (the leaf scan the FP-only unwinder used,
 * which read code bytes and could invent callers, is gone).
 *
 * Compiled without sanitizer instrumentation: the walk reads other frames' slots, which ASan
 * may have poisoned as redzones, and TSan would report the reads as races with the
 * interrupted code on the same thread.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* REG_RIP (the bench compiles this file on its own) */
#endif
#include "cfi_table.h"
#include "ag_unwind.h"

#include <signal.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#define NO_SAN __attribute__((no_sanitize("address", "thread", "undefined")))

/* Our own image, for ag_unwind_strip_agent (hooks.c sets it). */
uintptr_t ag_self_lo, ag_self_hi;

NO_SAN static const ag_cfi_obj_t *find_obj(const ag_cfi_snap_t *s, uintptr_t pc) {
    uint32_t l = 0, h = s->n;
    while (l < h) { /* first object with lo > pc */
        uint32_t mid = (l + h) / 2;
        if (s->o[mid].lo <= pc)
            l = mid + 1;
        else
            h = mid;
    }
    return l > 0 && pc < s->o[l - 1].hi ? &s->o[l - 1] : NULL;
}

#define UC_GREG(i) (offsetof(ucontext_t, uc_mcontext.gregs) + (size_t)(i) * sizeof(greg_t))

/* sp on the calling thread's alternate signal stack: its bounds in *lo, *hi. A raw system
 * call: async-signal-safe whatever the libc. */
NO_SAN static int alt_bounds(uintptr_t sp, uintptr_t *lo, uintptr_t *hi) {
    stack_t ss;
    if (syscall(SYS_sigaltstack, NULL, &ss) != 0 || (ss.ss_flags & SS_DISABLE) || !ss.ss_size)
        return 0;
    uintptr_t a = (uintptr_t)ss.ss_sp, b = a + ss.ss_size;
    if (sp < a || sp >= b)
        return 0;
    *lo = a;
    *hi = b;
    return 1;
}

NO_SAN uint32_t ag_unwind(ag_thread_t *self, uintptr_t pc, uintptr_t sp, uintptr_t fp, int exact,
                          uintptr_t lo, uintptr_t hi, intptr_t delta, uintptr_t *pcs,
                          uint32_t max, uint32_t *flags) {
    uint32_t n = 0, fl = AG_UW_INCOMPLETE, fp_steps = 0;
    if (max == 0) {
        *flags = AG_UW_DEPTH;
        return 0;
    }
    if (self) {
        /* A locked increment: it is visible before the snapshot pointer is loaded, so the bg
         * thread that swaps the pointer and then reads depth 0 knows we read the new one. */
        atomic_fetch_add(&self->unw_depth, 1);
    }
    const ag_cfi_snap_t *snap = atomic_load_explicit(&ag_cfi_snap, memory_order_acquire);
#define IN(a, len) ((a) >= lo && (a) <= hi - (len) && hi - (len) < hi)
#define RD(a) (*(const uintptr_t *)((a) + (uintptr_t)delta))
    uintptr_t main_lo = lo, main_hi = hi; /* the thread's stack, when the walk starts on its
                                             alternate signal stack */
    if (lo == 0 || hi <= lo)
        goto leaf_only;
    if ((sp < lo || sp >= hi) && (delta != 0 || !alt_bounds(sp, &lo, &hi)))
        goto leaf_only;
    /* Nothing below the stack pointer is a live frame, and below it the main thread's stack
     * may not be mapped yet (it grows on demand within its rlimit): sp only grows from here
     * (a signal frame's interrupted sp lies above the handler that ran below it). */
    lo = sp;
    for (;;) {
        if (n == max) {
            fl = AG_UW_DEPTH | AG_UW_INCOMPLETE;
            break;
        }
        pcs[n++] = pc;
        uintptr_t look = exact ? pc : pc - 1;
        const ag_cfi_obj_t *o = snap ? find_obj(snap, look) : NULL;
        const ag_cfi_row_t *row =
            o && o->rows ? ag_cfi_find_idx(o->rows, o->nrows, o->idx, o->nbuckets, o->shift,
                                           look - o->lo)
                         : NULL;
        uint8_t kind = row ? row->kind : AG_CFI_NONE;
        uintptr_t cfa, ra;
        switch (kind) {
        case AG_CFI_END:
            fl = 0;
            goto done;
        case AG_CFI_RSP:
            cfa = sp + (intptr_t)row->cfa_off;
            break;
        case AG_CFI_RBP:
            cfa = fp + (intptr_t)row->cfa_off;
            break;
        case AG_CFI_DEREF:
            if (!IN(fp + (intptr_t)row->cfa_off, 8))
                goto done;
            cfa = RD(fp + (intptr_t)row->cfa_off);
            break;
        case AG_CFI_PLT:
            cfa = sp + 8 + ((pc & 15) >= (uintptr_t)row->cfa_off ? 8 : 0);
            break;
        case AG_CFI_SIGNAL: {
            if (!IN(sp + UC_GREG(REG_RIP), 8) || !IN(sp + UC_GREG(REG_RBP), 8))
                goto done;
            uintptr_t nsp = RD(sp + UC_GREG(REG_RSP));
            uintptr_t npc = RD(sp + UC_GREG(REG_RIP));
            fp = RD(sp + UC_GREG(REG_RBP));
            if (nsp >= main_lo && nsp < main_hi && (lo < main_lo || hi > main_hi)) {
                lo = nsp; /* back from the alternate stack to the thread's (above nsp) */
                hi = main_hi;
            } else if (nsp < lo || nsp >= hi) {
                goto done; /* the interrupted code ran on another stack */
            }
            sp = nsp;
            pc = npc;
            exact = 1;
            if (pc < 4096)
                goto done;
            continue;
        }
        default: /* NONE, FALLBACK: one frame-pointer step */
            if ((fp & 7) || fp < sp || !IN(fp, 16))
                goto done;
            fp_steps++;
            cfa = fp + 16;
            ra = RD(fp + 8);
            fp = RD(fp);
            sp = cfa;
            pc = ra;
            exact = 0;
            if (pc < 4096)
                goto done; /* in code without frame pointers a zero proves nothing */
            continue;
        }
        if (cfa <= sp || !IN(cfa - 8, 8))
            goto done;
        ra = RD(cfa - 8);
        if (row->fp_off) {
            uintptr_t a = cfa + (intptr_t)row->fp_off;
            /* Below sp: an epilogue already popped it (GCC's CFI keeps the saved-at rule up to
             * the ret), so rbp holds the caller's value again. */
            if (a >= sp) {
                if (!IN(a, 8))
                    goto done;
                fp = RD(a);
            }
        }
        sp = cfa;
        pc = ra;
        exact = 0;
        if (pc == 0) {
            fl = 0;
            goto done;
        }
        if (pc < 4096)
            goto done;
    }
    goto done;
leaf_only:
    pcs[n++] = pc;
done:
    if (fp_steps) {
        fl |= AG_UW_FP;
        atomic_fetch_add_explicit(&ag_cfi_stats.fp_frames, fp_steps, memory_order_relaxed);
    }
    if (fl & AG_UW_INCOMPLETE)
        atomic_fetch_add_explicit(&ag_cfi_stats.incomplete, 1, memory_order_relaxed);
    if (self) {
        if (atomic_load_explicit(&self->unw_depth, memory_order_relaxed) == 1)
            atomic_fetch_add_explicit(&self->unw_gen, 1, memory_order_release);
        atomic_fetch_sub_explicit(&self->unw_depth, 1, memory_order_release);
    }
    *flags = fl;
    return n;
#undef IN
#undef RD
}

NO_SAN uint32_t ag_unwind_strip_agent(uintptr_t *pcs, uint32_t n) {
    uintptr_t a = ag_self_lo, b = ag_self_hi;
    if (!b)
        return n;
    uint32_t k = 0, i = 0;
    /* a leading run: keep its outermost frame (the interposer the application called) */
    while (i < n && pcs[i] - a < b - a)
        i++;
    if (i > 0)
        pcs[k++] = pcs[i - 1];
    /* later runs: their outermost frame too (an interposer called from inside another, e.g.
     * operator new -> malloc); builder.c leaves out those that are not interposers */
    for (; i < n; i++)
        if (pcs[i] - a >= b - a || i + 1 == n || pcs[i + 1] - a >= b - a)
            pcs[k++] = pcs[i];
    return k;
}
