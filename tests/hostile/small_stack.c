/* Hostile case: threads that run with 2-3 KiB of stack left (a recursion that stops just
 * short of its stack's end, then burns CPU there): signals must not be delivered on that
 * stack. Four threads have 64 KiB stacks, two have 4 MiB and go down slowly, burning 2 ms of
 * CPU every 128 frames: a large stack needs the agent's alternate stack as much as a small one
 * (an agent that installed it only once a sample found the thread within 256 KiB of its end,
 * to keep signal frames on the warm thread stack otherwise, crashed here in 11 runs of 30: the
 * samples came ~380 KiB of descent apart). Prints how many threads finished. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

static __thread uintptr_t lo;
static volatile unsigned long sink;

static __thread int slow; /* burn 2 ms every 128 frames on the way down */

static __attribute__((noinline)) void burn(int ms) {
    struct timespec t0, t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    do {
        for (int i = 0; i < 10000; i++)
            sink += (unsigned long)i;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
}

static __attribute__((noinline)) void descend(size_t left, unsigned depth) {
    volatile char pad[256];
    memset((char *)pad, 1, sizeof pad);
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
    if (slow && depth % 128 == 0)
        burn(2);
    if (sp - lo > left + 512)
        descend(left, depth + 1);
    else
        burn(700);
    sink += pad[3];
}

static void *thr(void *arg) {
    pthread_attr_t a;
    void *addr;
    size_t size;
    pthread_getattr_np(pthread_self(), &a);
    pthread_attr_getstack(&a, &addr, &size);
    pthread_attr_destroy(&a);
    lo = (uintptr_t)addr;
    slow = size > (1u << 20);
    descend((size_t)(uintptr_t)arg, 1);
    return NULL;
}

int main(void) {
    enum { N = 6 };
    struct timespec now; /* bound now: lazy binding's xsave would need ~3 KiB of stack there */
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    pthread_t t[N];
    pthread_attr_t a;
    pthread_attr_init(&a);
    for (int i = 0; i < N; i++) { /* 2.0, 2.5, 3.0, 3.5 KiB left */
        pthread_attr_setstacksize(&a, i < 4 ? 64 << 10 : 4 << 20);
        pthread_create(&t[i], &a, thr, (void *)(uintptr_t)(2048 + 512 * (i % 4)));
    }
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    printf("threads_done=%d\n", N);
    return 0;
}
