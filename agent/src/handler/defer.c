/* Deferred unwinding: samples that cannot be unwound in the handler yet are copied (registers
 * and the stack above sp) and unwound later by the background thread.
 *
 * Two cases have no good unwind in the handler:
 *   - before the first unwind tables are published: the background thread compiles them as its
 *     first act (cfi_table.c), ~10-30 ms of CPU but 100-250 ms of wall time on a loaded machine
 *     and up to a second or two under ThreadSanitizer; tables are never built on an application
 *     thread (issue 14) and the start is not delayed (a short-lived process would pay);
 *   - a thread whose stack bounds are not known yet (found by the /proc scan: created before
 *     the agent was loaded, or where a sanitizer's pthread_create interceptor runs instead of
 *     ours): no stack word can be read safely in place, so its samples were leaf-only until a
 *     later scan resolved its bounds from /proc/self/maps (tens to hundreds of ms).
 * For these the handler (and the hooks: every event that goes through record.c) does what
 * `perf record --call-graph dwarf` does for every sample: it copies rip/rsp/rbp and the stack
 * from sp up (to the thread's stack top when known, at most AG_DEFER_COPY_MAX bytes) into a
 * preallocated arena and writes a ring record that names the copy. An unbounded thread's stack
 * is copied with process_vm_readv on our own pid, which stops at the first unmapped byte
 * instead of faulting. The background thread unwinds each copy as it drains the rings, with the
 * same unwinder (unwind.c: its stack reads take an address bias, and the bounds [sp, sp + len)
 * map onto the copy), and hands the builder an ordinary record with the sample's own weight,
 * time and span context. async-profiler, the other model, compiles its tables before it starts
 * sampling, on the calling thread, which this agent must not do.
 *
 * Arena: one anonymous MAP_NORESERVE mapping of AG_DEFER_ARENA bytes, made in the constructor
 * before any timer is armed; only pages a copy touches are committed. A copy is claimed with one
 * atomic fetch_add on the fill mark (lock-free, async-signal-safe); a claim past the end is
 * "arena full": the sample is unwound at once as it would have been without this (frame
 * pointers before the tables, the leaf alone without bounds) and counted DROP_UNWIND_FAILED
 * (the sample is kept). Reset: after a drain the background thread sets `resetting` (handlers
 * then claim nothing), waits for g_users (claims in progress, from the claim to the ring
 * commit: ag_defer_done) to reach 0 (seq_cst on both sides, Dekker-style: a handler sees the
 * flag or the bg thread sees the claim), drains the rings once more so that every copy is
 * unwound, then rewinds the fill mark and gives the pages back (MADV_DONTNEED). Once the tables
 * are out and every thread has bounds, nothing is copied and the arena holds no memory.
 *
 * Thread exit: a copy does not depend on the thread's stack, so a thread that exits before its
 * ring is drained loses nothing. fork: the child's rings start empty (thread.c), so no record
 * names the arena there: the child starts it afresh (or unmaps it when it does not profile).
 *
 * Contract: ag_defer_init() in the constructor; ag_defer_take()/ag_defer_done() in the handler
 * or a hook (no lock, no allocation; one system call for an unbounded thread);
 * ag_defer_resolve/reset on the background thread.
 */
#include "config.h"
#include "ag_unwind.h"
#include "defer.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define NO_SAN __attribute__((no_sanitize("address", "thread", "undefined")))

typedef struct {
    uintptr_t pc, sp, fp; /* registers at the sample; sp is the copy's first byte */
    uint32_t len;         /* bytes of stack copied */
    uint32_t exact;       /* pc is the interrupted instruction (signal), not a return address */
} hdr_t;

static uint8_t *g_arena;
static size_t g_size;
static _Atomic uint64_t g_fill;     /* bytes claimed (may run past g_size: nothing fits then) */
static _Atomic uint32_t g_users;    /* claims in progress (take .. done) */
static _Atomic int g_resetting;     /* bg: rewinding the arena, no claims */
static _Atomic int g_vm_ok = 1;     /* process_vm_readv allowed (not EPERM/ENOSYS: a sandbox) */
static pid_t g_pid;
uint64_t ag_defer_test_delay_ns;
ag_defer_counters_t ag_defer_stats;

int ag_defer_init(size_t arena_bytes) {
    double ms;
    if (ag_env_double("FLEETPROF_TEST_CFI_DELAY_MS", 0, 10000, "0 (test only)", &ms))
        ag_defer_test_delay_ns = (uint64_t)(ms * 1e6);
    g_pid = getpid();
    void *p = mmap(NULL, arena_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    g_arena = p;
    g_size = arena_bytes;
    atomic_store(&g_users, 0);
    atomic_store(&g_fill, 0);
    atomic_store(&g_resetting, 0);
    return 0;
}

/* The raw system call: no libc wrapper (a sanitizer could intercept it), errno kept. */
NO_SAN static long vm_read(void *dst, uintptr_t src, size_t len) {
    struct iovec l = {dst, len}, r = {(void *)src, len};
    int saved = errno;
    long n = syscall(SYS_process_vm_readv, g_pid, &l, 1ul, &r, 1ul, 0ul);
    if (n < 0 && (errno == EPERM || errno == ENOSYS))
        atomic_store_explicit(&g_vm_ok, 0, memory_order_relaxed);
    errno = saved;
    return n;
}

NO_SAN uint32_t ag_defer_take(uintptr_t pc, uintptr_t sp, uintptr_t fp, int exact, uintptr_t hi,
                              uintptr_t *pcs, int *full) {
    if (!g_arena || (!hi && !atomic_load_explicit(&g_vm_ok, memory_order_relaxed)))
        return 0;
    /* seq_cst increment, then seq_cst check: either this claim sees the reset, or the reset
     * sees this claim (ag_defer_reset waits for it). */
    atomic_fetch_add(&g_users, 1);
    uintptr_t base = sp & ~(uintptr_t)7;
    if (atomic_load(&g_resetting) || (hi && base >= hi)) {
        atomic_fetch_sub(&g_users, 1);
        return 0;
    }
    uintptr_t len = hi ? hi - base : AG_DEFER_COPY_MAX;
    if (len > AG_DEFER_COPY_MAX)
        len = AG_DEFER_COPY_MAX;
    len &= ~(uintptr_t)7;
    uint64_t need = sizeof(hdr_t) + len;
    uint64_t off = atomic_fetch_add_explicit(&g_fill, need, memory_order_relaxed);
    if (off + need > g_size) {
        atomic_fetch_add_explicit(&ag_defer_stats.full, 1, memory_order_relaxed);
        *full = 1;
        atomic_fetch_sub(&g_users, 1);
        return 0;
    }
    hdr_t *h = (hdr_t *)(g_arena + off);
    if (hi) {
        /* word by word, no memcpy (a sanitizer intercepts it); the live stack above sp */
        const volatile uintptr_t *s = (const volatile uintptr_t *)base;
        uintptr_t *d = (uintptr_t *)(h + 1);
        for (uintptr_t i = 0; i < len / 8; i++)
            d[i] = s[i];
    } else {
        /* unknown bounds: up to the first unmapped byte, without faulting */
        long got = vm_read(h + 1, base, len);
        if (got < 8) {
            atomic_fetch_add_explicit(&ag_defer_stats.vm_failed, 1, memory_order_relaxed);
            atomic_fetch_sub(&g_users, 1);
            return 0; /* the claimed bytes stay unused until the next reset */
        }
        len = (uintptr_t)got & ~(uintptr_t)7;
    }
    h->pc = pc;
    h->sp = base;
    h->fp = fp;
    h->len = (uint32_t)len;
    h->exact = (uint32_t)exact;
    pcs[0] = pc; /* the leaf, should the copy ever be unusable */
    pcs[1] = (uintptr_t)h;
    atomic_fetch_add_explicit(&ag_defer_stats.deferred, 1, memory_order_relaxed);
    return 2; /* g_users stays raised until ag_defer_done(): the record is not committed yet */
}

NO_SAN void ag_defer_done(void) { atomic_fetch_sub(&g_users, 1); }

const ag_rec_t *ag_defer_resolve(const ag_rec_t *r, ag_rec_t *out) {
    if (!(r->stack_flags & AG_STF_DEFERRED))
        return r;
    memcpy(out, r, sizeof *out);
    const hdr_t *h = (const hdr_t *)(r->depth >= 2 ? r->pcs[1] : 0);
    uint32_t uw = AG_UW_INCOMPLETE, n = 0;
    if (g_arena && (const uint8_t *)h >= g_arena &&
        (const uint8_t *)h + sizeof *h <= g_arena + g_size &&
        (const uint8_t *)(h + 1) + h->len <= g_arena + g_size) {
        intptr_t delta = (intptr_t)((uintptr_t)(h + 1) - h->sp);
        /* self NULL: this is the background thread, the tables' only freer */
        n = ag_unwind(NULL, h->pc, h->sp, h->fp, (int)h->exact, h->sp, h->sp + h->len, delta,
                      out->pcs, AG_MAX_DEPTH, &uw);
        if (n == AG_MAX_DEPTH)
            uw |= AG_UW_DEPTH | AG_UW_INCOMPLETE;
        n = ag_unwind_strip_agent(out->pcs, n);
        atomic_fetch_add_explicit(&ag_defer_stats.resolved, 1, memory_order_relaxed);
    }
    if (n == 0) { /* not a copy of ours (cannot happen): the leaf alone, flagged */
        out->pcs[0] = r->pcs[0];
        n = 1;
        uw = AG_UW_INCOMPLETE;
    }
    int truncated = (uw & AG_UW_DEPTH) != 0, incomplete = !truncated && (uw & AG_UW_INCOMPLETE);
    if (truncated)
        ag_drop_count(r->type, CM_DROP_STACK_TRUNCATED, 1);
    out->depth = (uint16_t)n;
    out->stack_flags = (r->stack_flags & ~(AG_STF_DEFERRED | CM_STF_TRUNCATED | CM_STF_INCOMPLETE)) |
                       (truncated ? CM_STF_TRUNCATED : 0) | (incomplete ? CM_STF_INCOMPLETE : 0);
    out->len = (uint32_t)((sizeof *out + n * sizeof(uintptr_t) + 7u) & ~7u);
    return out;
}

int ag_defer_reset_begin(void) {
    if (!g_arena || atomic_load_explicit(&g_fill, memory_order_relaxed) == 0)
        return 0;
    atomic_store(&g_resetting, 1);
    return atomic_load(&g_users) == 0;
}

void ag_defer_reset_end(void) {
    uint64_t fill = atomic_load(&g_fill);
    size_t used = fill < g_size ? (size_t)fill : g_size;
    if (used > atomic_load(&ag_defer_stats.peak_bytes))
        atomic_store(&ag_defer_stats.peak_bytes, used);
    madvise(g_arena, (used + 4095) & ~(size_t)4095, MADV_DONTNEED); /* zero pages again */
    atomic_fetch_add_explicit(&ag_defer_stats.resets, 1, memory_order_relaxed);
    atomic_store(&g_fill, 0);
    atomic_store(&g_resetting, 0);
}

void ag_defer_after_fork_child(int follow) {
    /* Only the forking thread lives on, outside any handler; its ring starts empty. */
    atomic_store(&g_users, 0);
    atomic_store(&g_fill, 0);
    atomic_store(&g_resetting, 0);
    g_pid = getpid();
    if (g_arena && !follow) {
        munmap(g_arena, g_size);
        g_arena = NULL;
    }
}
