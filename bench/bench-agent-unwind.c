/* Unwinder cost: the agent's unwinder (agent/src/handler/unwind.c, compiled in) with its compiled CFI
 * tables (cfi.c, cfi_table.c: built for this process's objects at start, memory and build
 * time printed), the same tables without their bucket indexes (the plain binary search per
 * row, as before issue 14 session 11; warm caches here: bench-cfi-index measures the cold
 * lookup), the same unwinder with no tables (its frame-pointer walk), and libunwind's
 * unw_backtrace (DWARF CFI, cached), at several stack depths. Not a test.
 *
 *   bench-agent-unwind [ITERS]
 */
#define _GNU_SOURCE
#include "internal.h"

#include <libunwind.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

ag_state_t ag; /* unwind.c needs nothing from it; other agent files are not linked */
/* what cfi_table.c needs from the rest of the agent: no registered threads */
ag_thread_t ag_threads[AG_MAX_THREADS];
uint32_t ag_thread_hw(void) { return 0; }
static ag_cfi_snap_t *g_snap, *g_snap_plain; /* with and without the bucket indexes */

static uintptr_t g_lo, g_hi;
static long g_iters = 200000;
static volatile uint64_t g_sink;

/* Thread CPU time: the machine is shared, wall time would count preemption. */
static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

__attribute__((noinline)) static void measure(int depth) {
    uintptr_t pcs[AG_MAX_DEPTH];
    void *ups[AG_MAX_DEPTH];
    ucontext_t uc;
    getcontext(&uc);
    uintptr_t pc = (uintptr_t)uc.uc_mcontext.gregs[REG_RIP];
    uintptr_t fp = (uintptr_t)uc.uc_mcontext.gregs[REG_RBP];
    uintptr_t sp = (uintptr_t)uc.uc_mcontext.gregs[REG_RSP];
    uint32_t trunc;
    uint32_t n = 0, nc = 0, np = 0;
    atomic_store(&ag_cfi_snap, g_snap_plain);
    double p0 = now_ns();
    for (long i = 0; i < g_iters; i++)
        np = ag_unwind(&ag_threads[0], pc, sp, fp, 1, g_lo, g_hi, 0, pcs, AG_MAX_DEPTH, &trunc);
    double p1 = now_ns();
    atomic_store(&ag_cfi_snap, NULL);
    double t0 = now_ns();
    for (long i = 0; i < g_iters; i++)
        n = ag_unwind(NULL, pc, sp, fp, 1, g_lo, g_hi, 0, pcs, AG_MAX_DEPTH, &trunc);
    double t1 = now_ns();
    atomic_store(&ag_cfi_snap, g_snap);
    double c0 = now_ns();
    for (long i = 0; i < g_iters; i++)
        nc = ag_unwind(&ag_threads[0], pc, sp, fp, 1, g_lo, g_hi, 0, pcs, AG_MAX_DEPTH, &trunc);
    double c1 = now_ns();
    printf("%6d  %6u  %10.1f  %6u  %10.1f  %10.2f  %6u  %10.1f  ", depth, nc,
           (c1 - c0) / (double)g_iters, np, (p1 - p0) / (double)g_iters, (p1 - p0) / (c1 - c0),
           n, (t1 - t0) / (double)g_iters);
    int m = 0;
    for (long i = 0; i < g_iters / 10; i++)
        m = unw_backtrace(ups, AG_MAX_DEPTH);
    double t2 = now_ns();
    g_sink += n + (uint64_t)m;
    printf("%6d  %12.1f  %6.1fx\n", m,
           (t2 - t1) / (double)(g_iters / 10),
           ((t2 - t1) / (double)(g_iters / 10)) / ((t1 - t0) / (double)g_iters));
}

__attribute__((noinline)) static void recurse(int d, int target) {
    if (d >= target) {
        measure(target);
        return;
    }
    recurse(d + 1, target);
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv) {
    if (argc > 1)
        g_iters = atol(argv[1]);
    pthread_attr_t attr;
    void *addr;
    size_t size;
    pthread_getattr_np(pthread_self(), &attr);
    pthread_attr_getstack(&attr, &addr, &size);
    g_lo = (uintptr_t)addr;
    g_hi = g_lo + size;
    uint64_t b0 = ag_now_mono();
    ag_cfi_tick();
    g_snap = atomic_load(&ag_cfi_snap);
    size_t ssz = sizeof *g_snap + (g_snap->n ? g_snap->n : 1) * sizeof g_snap->o[0];
    g_snap_plain = malloc(ssz);
    if (!g_snap_plain)
        return 1;
    memcpy(g_snap_plain, g_snap, ssz);
    for (uint32_t i = 0; i < g_snap_plain->n; i++)
        g_snap_plain->o[i].idx = NULL;
    printf("CFI tables: %llu objects, %llu rows, %.2f MiB (of which bucket indexes %.2f MiB), "
           "built in %.1f ms (%.1f ms total)\n",
           (unsigned long long)ag_cfi_stats.objects, (unsigned long long)ag_cfi_stats.rows,
           (double)ag_cfi_stats.bytes / 1048576.0,
           (double)ag_cfi_stats.index_bytes / 1048576.0, (double)ag_cfi_stats.build_ns / 1e6,
           (double)(ag_now_mono() - b0) / 1e6);
    printf(" depth  cfi_n  cfi_ns/walk  plain_n  plain_ns/walk  plain/cfi  fp_n  fp_ns/walk   "
           "unw_n  unw_ns/walk  unw/fp\n");
    g_iters /= 10;
    recurse(0, 20); /* warm-up: libunwind fills its caches, pages are touched */
    g_iters *= 10;
    printf("--\n");
    static const int depths[] = {10, 30, 60, 120};
    for (size_t i = 0; i < sizeof depths / sizeof depths[0]; i++)
        recurse(0, depths[i]);
    return 0;
}
