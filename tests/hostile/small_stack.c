/* Hostile case: threads that run with 2-3 KiB of stack left (a recursion that stops just
 * short of its 64 KiB stack's end, then burns CPU there): signals must not be delivered on
 * that stack. Prints how many threads finished. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

static __thread uintptr_t lo;
static volatile unsigned long sink;

static __attribute__((noinline)) void burn(void) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        for (int i = 0; i < 10000; i++)
            sink += (unsigned long)i;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 700);
}

static __attribute__((noinline)) void descend(size_t left) {
    volatile char pad[256];
    memset((char *)pad, 1, sizeof pad);
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
    if (sp - lo > left + 512)
        descend(left);
    else
        burn();
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
    descend((size_t)(uintptr_t)arg);
    return NULL;
}

int main(void) {
    enum { N = 4 };
    struct timespec now; /* bound now: lazy binding's xsave would need ~3 KiB of stack there */
    clock_gettime(CLOCK_MONOTONIC, &now);
    pthread_t t[N];
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 64 << 10);
    for (int i = 0; i < N; i++) /* 2.0, 2.5, 3.0, 3.5 KiB left */
        pthread_create(&t[i], &a, thr, (void *)(uintptr_t)(2048 + 512 * i));
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    printf("threads_done=%d\n", N);
    return 0;
}
