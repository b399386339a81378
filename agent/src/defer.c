/* Deferred unwinding of the samples taken before the first unwind tables are published.
 *
 * The background thread compiles the CFI tables of every loaded object as its first act
 * (cfi_table.c): ~10-30 ms of CPU, but 100-250 ms of wall time on a loaded machine and up to
 * a second under ThreadSanitizer. Tables are never built on an application thread (issue 14)
 * and the start is not delayed (a short-lived process would pay for it), so samples taken
 * meanwhile have no table to unwind with. Until the first publication the handler (and the
 * hooks: every event that goes through record.c) does what `perf record --call-graph dwarf`
 * does for every sample: it copies the registers the unwinder needs (pc, sp, rbp) and the
 * stack from sp up to the thread's stack top (at most AG_DEFER_COPY_MAX bytes) into a
 * preallocated arena, and writes a ring record that names the copy. The background thread,
 * once the tables are published, unwinds each copy with the same unwinder (unwind.c, whose
 * stack reads take an address bias and bounds: [sp, sp + len) map onto the copy) and hands
 * the builder an ordinary record with the sample's own weight, time and context.
 * async-profiler, the other model, compiles its tables synchronously before it starts
 * sampling (and on the dlopen caller's thread), which is what this agent must not do.
 *
 * Arena: one anonymous MAP_NORESERVE mapping of AG_DEFER_ARENA bytes made in the constructor,
 * before any timer is armed; only the pages copies touch are committed. A copy is claimed by
 * one atomic fetch_add on the arena's fill mark (lock-free, async-signal-safe); a claim past
 * the end is "pool full": the sample is unwound at once as before (frame pointers only, as no
 * table exists) and counted DROP_UNWIND_FAILED (the sample itself is kept). The arena is only
 * ever filled during the start-up window: after the first publication ag_defer_close() shuts
 * it, and once no handler is inside a claim (g_users, Dekker-style with seq_cst on both sides)
 * and the rings were drained once more, ag_defer_free() unmaps it.
 *
 * Thread exit: a copy does not depend on the thread's stack, so a thread that exits before
 * its ring is drained loses nothing. fork: the child's rings start empty (thread.c), so no
 * record names the arena there: the child reuses it from the start (or unmaps it when it does
 * not profile).
 *
 * Contract: ag_defer_init() in the constructor; ag_defer_take() in the handler or a hook (no
 * lock, no allocation, no call); ag_defer_resolve/close/quiet/free on the background thread.
 */
#include "internal.h"

#include <stddef.h>
#include <string.h>
#include <sys/mman.h>

#define NO_SAN __attribute__((no_sanitize("address", "thread", "undefined")))

typedef struct {
    uintptr_t pc, sp, fp; /* registers at the sample; sp is the copy's first byte */
    uint32_t len;         /* bytes of stack copied */
    uint32_t exact;       /* pc is the interrupted instruction (signal), not a return address */
} hdr_t;

static uint8_t *g_arena;
static size_t g_size;
static _Atomic uint64_t g_fill;   /* bytes claimed (may run past g_size: then nothing fits) */
static _Atomic uint32_t g_users;  /* claims in progress */
_Atomic int ag_defer_open;
uint64_t ag_defer_test_delay_ns;
ag_defer_counters_t ag_defer_stats;

int ag_defer_init(size_t arena_bytes) {
    double ms;
    if (ag_env_double("FLEETPROF_TEST_CFI_DELAY_MS", 0, 10000, "0 (test only)", &ms))
        ag_defer_test_delay_ns = (uint64_t)(ms * 1e6);
    void *p = mmap(NULL, arena_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    g_arena = p;
    g_size = arena_bytes;
    atomic_store(&g_fill, 0);
    atomic_store(&ag_defer_open, 1);
    return 0;
}

NO_SAN uint32_t ag_defer_take(uintptr_t pc, uintptr_t sp, uintptr_t fp, int exact, uintptr_t hi,
                              uintptr_t *pcs) {
    uint32_t n = 0;
    if (!atomic_load_explicit(&ag_defer_open, memory_order_relaxed))
        return 0;
    /* seq_cst increment, then seq_cst re-check: either this claim sees the pool closed, or
     * the bg thread's ag_defer_quiet() sees it in progress. */
    atomic_fetch_add(&g_users, 1);
    uintptr_t base = sp & ~(uintptr_t)7;
    if (atomic_load(&ag_defer_open) && base < hi) {
        uintptr_t len = hi - base;
        if (len > AG_DEFER_COPY_MAX)
            len = AG_DEFER_COPY_MAX;
        len &= ~(uintptr_t)7;
        uint64_t need = sizeof(hdr_t) + len;
        uint64_t off = atomic_fetch_add_explicit(&g_fill, need, memory_order_relaxed);
        if (off + need <= g_size) {
            hdr_t *h = (hdr_t *)(g_arena + off);
            h->pc = pc;
            h->sp = base;
            h->fp = fp;
            h->len = (uint32_t)len;
            h->exact = (uint32_t)exact;
            /* word by word, no memcpy (a sanitizer intercepts it); the live stack above sp */
            const volatile uintptr_t *s = (const volatile uintptr_t *)base;
            uintptr_t *d = (uintptr_t *)(h + 1);
            for (uintptr_t i = 0; i < len / 8; i++)
                d[i] = s[i];
            pcs[0] = pc; /* the leaf, should the copy ever be unusable */
            pcs[1] = (uintptr_t)h;
            n = 2;
            atomic_fetch_add_explicit(&ag_defer_stats.deferred, 1, memory_order_relaxed);
        } else {
            atomic_fetch_add_explicit(&ag_defer_stats.full, 1, memory_order_relaxed);
        }
    }
    atomic_fetch_sub(&g_users, 1);
    return n;
}

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

void ag_defer_close(void) { atomic_store(&ag_defer_open, 0); }

int ag_defer_quiet(void) {
    return g_arena && !atomic_load(&ag_defer_open) && atomic_load(&g_users) == 0;
}

void ag_defer_free(void) {
    if (!g_arena)
        return;
    uint64_t fill = atomic_load(&g_fill);
    atomic_store(&ag_defer_stats.peak_bytes, fill < g_size ? fill : g_size);
    munmap(g_arena, g_size);
    g_arena = NULL;
}

void ag_defer_after_fork_child(int follow) {
    /* Only the forking thread lives on, outside any handler; its ring starts empty. */
    atomic_store(&g_users, 0);
    if (!g_arena)
        return;
    if (!follow) {
        atomic_store(&ag_defer_open, 0);
        munmap(g_arena, g_size);
        g_arena = NULL;
        return;
    }
    atomic_store(&g_fill, 0);
}
