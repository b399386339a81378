/* Duration histograms of endpoints (format minor 4, message Endpoints): fixed log-linear
 * buckets, the same in the agent that counts, the chunk that carries and the store that merges.
 *
 * A value v (ns) below CM_HIST_SUB has its own bucket (exact). Above, the octave
 * [2^k, 2^(k+1)) is cut into CM_HIST_SUB equal buckets of width 2^(k - CM_HIST_SUB_BITS): a
 * bucket's width is at most 1/128 of its lower bound (0.78 %), so its midpoint is within
 * 0.39 % of any value in it, and a percentile read from the histogram is within 0.39 % of the
 * true one (nearest rank). Values from 2^CM_HIST_MAX_BITS ns (about 18 minutes) on share the
 * last bucket. Header only: pure functions, safe anywhere (no state, no allocation).
 */
#ifndef CM_HIST_H
#define CM_HIST_H

#include <stdint.h>

#define CM_HIST_SUB_BITS 7
#define CM_HIST_SUB (1u << CM_HIST_SUB_BITS)
#define CM_HIST_MAX_BITS 40
#define CM_HIST_BUCKETS (CM_HIST_SUB + (CM_HIST_MAX_BITS - CM_HIST_SUB_BITS) * CM_HIST_SUB)

/* The bucket of a value in ns: a shift, a count of leading zeros, no branch but two. */
static inline uint32_t cm_hist_index(uint64_t v) {
    if (v < CM_HIST_SUB)
        return (uint32_t)v;
    if (v >> CM_HIST_MAX_BITS)
        return CM_HIST_BUCKETS - 1;
    uint32_t sh = (uint32_t)(63 - __builtin_clzll(v)) - CM_HIST_SUB_BITS; /* octave - 7 */
    return CM_HIST_SUB + sh * CM_HIST_SUB + (uint32_t)(v >> sh) - CM_HIST_SUB;
}

/* The smallest value of bucket i (i < CM_HIST_BUCKETS). */
static inline uint64_t cm_hist_lower(uint32_t i) {
    if (i < CM_HIST_SUB)
        return i;
    uint32_t sh = (i - CM_HIST_SUB) / CM_HIST_SUB, sub = (i - CM_HIST_SUB) % CM_HIST_SUB;
    return (uint64_t)(CM_HIST_SUB + sub) << sh;
}

/* The largest value of bucket i (the last bucket: its first octave's end). */
static inline uint64_t cm_hist_upper(uint32_t i) {
    if (i < CM_HIST_SUB)
        return i;
    return cm_hist_lower(i) + ((uint64_t)1 << ((i - CM_HIST_SUB) / CM_HIST_SUB)) - 1;
}

/* The value a bucket stands for: its midpoint. */
static inline uint64_t cm_hist_mid(uint32_t i) {
    return cm_hist_lower(i) + (cm_hist_upper(i) - cm_hist_lower(i)) / 2;
}

/* Nearest rank over a dense histogram h[CM_HIST_BUCKETS] of n values: the midpoint of the
 * bucket holding the smallest value with at least q of the values at or below it (0: n 0). */
static inline uint64_t cm_hist_quantile(const uint64_t *h, uint64_t n, double q) {
    if (!n)
        return 0;
    uint64_t k = (uint64_t)(q * (double)n + 0.999999), seen = 0;
    if (k == 0)
        k = 1;
    for (uint32_t i = 0; i < CM_HIST_BUCKETS; i++)
        if ((seen += h[i]) >= k)
            return cm_hist_mid(i);
    return cm_hist_mid(CM_HIST_BUCKETS - 1);
}

#endif
