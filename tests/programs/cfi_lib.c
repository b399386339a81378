/* A library whose code is on sampled stacks while cfi_work dlopens and dlcloses it. */
#include <math.h>
#include <time.h>

static volatile double g;

__attribute__((noinline)) static double cfi_lib_inner(int n) {
    double s = 0;
    for (int i = 0; i < n; i++)
        s += sqrt(i + g);
    return s;
}

double cfi_lib_spin(double secs) {
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    double s = 0;
    do {
        s += cfi_lib_inner(2000);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    } while ((double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9 < secs);
    return s;
}
