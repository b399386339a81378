/* Test program for source lines and inlined frames (tests/test-symbols-server.c): built with
 * -O2 -g, its hot loop sits in two static functions inlined into a third, so that one address
 * has a chain of inlined frames (addr2line -i shows them). Usage: symwork_inl SECONDS */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile unsigned seed = 12345;
static volatile int work = 100000; /* volatile: no constant-propagated clone of inl_outer */

static inline __attribute__((always_inline)) unsigned inl_mix(unsigned x) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    return x;
}

static inline __attribute__((always_inline)) unsigned inl_round(unsigned x, int n) {
    for (int i = 0; i < n; i++)
        x = inl_mix(x + (unsigned)i);
    return x;
}

__attribute__((noinline)) static unsigned inl_outer(int n) {
    unsigned x = seed;
    for (int k = 0; k < 8; k++)
        x += inl_round(x, n);
    return x;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 1;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    unsigned acc = 0;
    do {
        acc += inl_outer(work);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9 < secs);
    printf("%u\n", acc);
    return 0;
}
