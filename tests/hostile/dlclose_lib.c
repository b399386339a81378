/* The library of the dlclose_cycles hostile case: CPU burning in code that is unmapped by
 * dlclose right after (built -O2 -fomit-frame-pointer: the unwinder reads its code and tables). */
#include <stdint.h>

__attribute__((noinline)) static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    return x ^ (x >> 29);
}

/* Deterministic: the same result for the same n, with or without a profiler. */
uint64_t dlc_burn(uint64_t n) {
    uint64_t h = 0;
    for (uint64_t i = 0; i < n; i++)
        h += mix(h + i);
    return h;
}
