/* Hostile case: dlclose of a library whose code is on sampled stacks (issue 13, also an issue
 * 14 safety item). 300 cycles: dlopen the library, 2 threads burn ~2 ms of CPU each inside it,
 * join, dlclose (its code and unwind tables are unmapped while samples, wall ticks and the
 * background thread's unwinding and symbolization may still refer to them). The issue saw a
 * SIGSEGV in the leaf scan reading code of the unloaded library.
 * Usage: dlclose_cycles LIB. Prints: cycles done and the (deterministic) sum of results. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef uint64_t (*burn_fn)(uint64_t);

static void *run(void *arg) {
    burn_fn f = (burn_fn)(uintptr_t)((uint64_t *)arg)[0];
    ((uint64_t *)arg)[1] = f(400000);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    uint64_t sum = 0;
    int cycles = 0;
    for (int c = 0; c < 300; c++) {
        void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
        burn_fn f = h ? (burn_fn)(uintptr_t)dlsym(h, "dlc_burn") : NULL;
        if (!f) {
            fprintf(stderr, "%s\n", dlerror());
            return 1;
        }
        uint64_t a[2][2] = {{(uint64_t)(uintptr_t)f, 0}, {(uint64_t)(uintptr_t)f, 0}};
        pthread_t t[2];
        for (int i = 0; i < 2; i++)
            pthread_create(&t[i], NULL, run, a[i]);
        for (int i = 0; i < 2; i++)
            pthread_join(t[i], NULL);
        sum += a[0][1] + a[1][1];
        if (dlclose(h) == 0)
            cycles++;
    }
    printf("cycles=%d sum=%" PRIu64 "\n", cycles, sum);
    return 0;
}
