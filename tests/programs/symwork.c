/* Test program for symbolization (tests/test-symbols.c): CPU in static functions that only a
 * symbol table names (no -rdynamic). Built with -g; the build derives stripped variants
 * (tests/symbols.cmake). Usage: symwork SECONDS */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile double sink;
static volatile int work = 200000; /* volatile: the pure functions are really called each time */

__attribute__((noinline)) static double symwork_inner_loop(int n) {
    double x = 0;
    for (int i = 1; i < n; i++)
        x += (double)(i % 7) / (double)i;
    return x;
}

__attribute__((noinline)) static double symwork_outer_step(int n) {
    double x = 0;
    for (int k = 0; k < 4; k++)
        x += symwork_inner_loop(n + k);
    return x;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 1;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        for (int j = 0; j < 20; j++) /* clock_gettime can be a system call: rarely */
            sink += symwork_outer_step(work);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9 < secs);
    printf("%f\n", sink);
    return 0;
}
