/* The loader gate. glibc's fork() resets ld.so's locks in the child; _Fork (glibc >= 2.34,
 * the async-signal-safe fork a program may call itself) does not. A single-threaded program
 * that calls _Fork and then pthread_create, dlopen or dlsym in the child is correct without
 * the agent, but the agent adds a thread that takes the loader's locks (dlopen of elfutils and
 * libprotobuf-c on first need, dl_iterate_phdr every tick): a _Fork that lands inside one of
 * those calls leaves the lock held in the child, forever (hostile.raw_fork: the child hung in
 * _dl_allocate_tls_init or dlsym, 1-6 runs in 40).
 *
 * Protocol (sequentially consistent atomics, a Dekker pair): a loader user increments g_inside
 * and then checks g_forking, backing off while it is set; _Fork sets g_forking and then waits
 * for g_inside to reach zero. Either the fork sees the user inside and waits for it to leave,
 * or the user sees the fork and waits for it to end. The fork waits at most 50 ms: the thread
 * inside the loader may itself wait for a lock the forking thread holds (a _Fork from a signal
 * handler that interrupted malloc), and a hang is worse than the race.
 *
 * Thread contract: enter/leave on agent threads (never in a handler); ag_loader_fork anywhere,
 * including a signal handler (atomics, clock_gettime and sched_yield only). */
#include "loader_gate.h"

#include <link.h>

#include <sched.h>
#include <stdatomic.h>
#include <time.h>

static _Atomic int g_inside, g_forking;

void ag_loader_enter(void) {
    for (;;) {
        atomic_fetch_add(&g_inside, 1);
        if (!atomic_load(&g_forking))
            return;
        atomic_fetch_sub(&g_inside, 1);
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

void ag_loader_leave(void) {
    atomic_fetch_sub(&g_inside, 1);
}

int ag_loader_call(int (*fn)(void)) {
    ag_loader_enter();
    int r = fn();
    ag_loader_leave();
    return r;
}

static long long mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

pid_t ag_loader_fork(pid_t (*raw)(void)) {
    atomic_fetch_add(&g_forking, 1);
    long long deadline = mono_ns() + 50000000LL;
    while (atomic_load(&g_inside) > 0 && mono_ns() < deadline)
        sched_yield();
    pid_t p = raw();
    atomic_fetch_sub(&g_forking, 1); /* in the parent and in the child's copy */
    return p;
}

typedef struct {
    uintptr_t addr, lo, hi;
} range_probe_t;

static int find_range(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    range_probe_t *p = arg;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        lo = a < lo ? a : lo;
        hi = a + ph->p_memsz > hi ? a + ph->p_memsz : hi;
    }
    if (p->addr < lo || p->addr >= hi)
        return 0;
    p->lo = lo;
    p->hi = hi;
    return 1;
}

int ag_object_range(uintptr_t addr, uintptr_t *lo, uintptr_t *hi) {
    range_probe_t p = {addr, 0, 0};
    if (!dl_iterate_phdr(find_range, &p))
        return -1;
    *lo = p.lo;
    *hi = p.hi;
    return 0;
}
