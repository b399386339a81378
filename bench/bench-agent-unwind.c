/* Unwinder cost: the agent's bounds-checked frame-pointer walk (agent/src/unwind.c, compiled
 * in) against libunwind's unw_backtrace (DWARF CFI, cached), at several stack depths. Not a
 * test. Informs the choice written in agent/src/unwind.c: frame pointers in the handler.
 *
 *   bench-agent-unwind [ITERS]
 */
#define _GNU_SOURCE
#include "internal.h"

#include <libunwind.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <ucontext.h>

ag_state_t ag; /* unwind.c needs nothing from it; other agent files are not linked */
_Atomic(ag_cfi_snap_t *) ag_cfi_snap; /* cfi_table.c is not linked: NULL = frame pointers */
ag_cfi_counters_t ag_cfi_stats;

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
    uint32_t n = 0;
    double t0 = now_ns();
    for (long i = 0; i < g_iters; i++)
        n = ag_unwind(NULL, pc, sp, fp, 1, g_lo, g_hi, 0, pcs, AG_MAX_DEPTH, &trunc);
    double t1 = now_ns();
    int m = 0;
    for (long i = 0; i < g_iters / 10; i++)
        m = unw_backtrace(ups, AG_MAX_DEPTH);
    double t2 = now_ns();
    g_sink += n + (uint64_t)m;
    printf("%6d  %6u  %10.1f  %6d  %12.1f  %6.1fx\n", depth, n, (t1 - t0) / (double)g_iters, m,
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
    printf(" depth  fp_n   fp_ns/walk  unw_n  unw_ns/walk   ratio\n");
    g_iters /= 10;
    recurse(0, 20); /* warm-up: libunwind fills its caches, pages are touched */
    g_iters *= 10;
    printf("--\n");
    static const int depths[] = {5, 20, 60, 120};
    for (size_t i = 0; i < sizeof depths / sizeof depths[0]; i++)
        recurse(0, depths[i]);
    return 0;
}
