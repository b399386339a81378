/* Hostile case: jemalloc loaded after the agent (a needed library of the program: in the
 * global scope behind the preloaded agent, exactly as LD_PRELOAD=libfleetprof.so:libjemalloc
 * orders them), the program using jemalloc's own entry points on malloc'ed objects: sallocx,
 * sdallocx, rallocx, xallocx, dallocx, nallocx, mallocx, malloc_usable_size. Prints a
 * checksum of what jemalloc reported. Allocation sampling is off behind jemalloc (the agent
 * sends the program's calls to it directly: bypass.c), so the chunk the test requires comes
 * from CPU samples: 3,000,000 rounds are ~150 ms of CPU here, ~15 samples at the first period
 * of 10 ms (200,000 rounds were ~10 ms: no sample at all in ~1 run of 3). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *mallocx(size_t, int);
void *rallocx(void *, size_t, int);
size_t xallocx(void *, size_t, size_t, int);
size_t sallocx(const void *, int);
void dallocx(void *, int);
void sdallocx(void *, size_t, int);
size_t nallocx(size_t, int);
size_t malloc_usable_size(void *);

int main(void) {
    uint64_t sum = 0, bad = 0;
    for (int i = 0; i < 3000000; i++) {
        size_t n = 64 + (size_t)(i % 97) * 64;
        char *p = malloc(n);
        memset(p, 1, n);
        size_t s = sallocx(p, 0), u = malloc_usable_size(p);
        bad += s < n || u < n || s != nallocx(n, 0);
        sum += s + u;
        if (i % 3 == 0) {
            sdallocx(p, n, 0);
        } else if (i % 3 == 1) {
            p = rallocx(p, 2 * n, 0);
            bad += p[n - 1] != 1;
            sum += xallocx(p, 2 * n, 0, 0);
            dallocx(p, 0);
        } else {
            char *q = mallocx(n, 0);
            q[0] = 2;
            sum += sallocx(q, 0);
            free(q);
            free(p);
        }
    }
    printf("checksum=%llu bad=%llu\n", (unsigned long long)sum, (unsigned long long)bad);
    return 0;
}
