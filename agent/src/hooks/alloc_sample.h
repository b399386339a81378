/* The maths of allocation sampling (hook_alloc.c): the countdown draw, the thinning of
 * samples under ring pressure, and a sample's weight. Header-only and free of agent state, so that
 * tests/test-agent-sampling.c checks it on its own against simulated allocation streams.
 *
 * Poisson byte sampling (tcmalloc's Sampler, jemalloc's prof_sample): sample points form a
 * Poisson process of mean spacing P over the bytes a thread allocates; an allocation that
 * contains a point is sampled. A thread keeps a countdown D ~ Exp(P) of the bytes to the next
 * point and subtracts each allocation's size; the allocation that takes it below zero is the
 * sample, and a fresh countdown is drawn after it.
 *
 * Weights with a period that changes over time. Let P_i be the period of the countdown in
 * force when allocation i (s_i bytes) is made. P_i is decided before the countdown is drawn
 * from what has already happened (the controller's period, this thread's ring), never from
 * the countdown itself. Given everything before allocation i, the countdown's remainder is
 * Exp(P_i) (memorylessness: that it was not crossed yet says nothing about what is left), so
 *     q_i = Pr[i sampled | past] = 1 - exp(-s_i / P_i).
 * A sample then stands for s_i / q_i bytes and 1 / q_i calls; for every allocation
 *     E[1{i sampled} s_i / q_i | past] = s_i,
 * so the sum of the weights is an unbiased estimate of the bytes of any call site, over any
 * interleaving, order and speed of allocations and any sequence of periods (a martingale: the
 * errors of successive allocations have mean zero given the past, whatever the past did to
 * P). What this needs, and hook_alloc.c does:
 *   - the weight uses the P the thread's countdown was drawn with (t_period), not the period
 *     in force when the sample happens (the controller may have moved it meanwhile: with the
 *     new P a 1 MiB object drawn at P = 8 MiB and weighted at 512 KiB would count 0.12 of
 *     its due);
 *   - a period chosen for the next countdown may depend on the controller, the time, anything
 *     but the countdown's own value (the same holds for the thinning probability below);
 *   - every sample taken is recorded with its weight, or counted as dropped (a dropped sample
 *     loses its weight: drops are the one way left to bias a site, so a burst is thinned
 *     before the ring overflows -- see ag_as_keep -- and what overflows all the same is
 *     summed per stack, not dropped).
 * Variance: a sample's contribution has variance s^2 (1 - q) / q, estimated unbiasedly from
 * the samples by w (w - s) with w = s / q (tests/test-agent-alloc.c uses it to judge runs).
 *
 * Ring pressure (issue 19). A burst of large allocations after a phase that raised P is
 * sampled faster than the background thread drains a 32 KiB ring: 1,280 x 1 MiB after 80 M x
 * 16 B took 0.2 ms and gave ~250 samples at P = 5 MiB, while the ring holds ~165 records; the
 * rest were DROP_RING_FULL, all from the 1 MiB site, which came out low (-7% over 3 runs,
 * -21% in one; the issue saw 34%). So samples are thinned instead of dropped: with the
 * thread's ring filled to a fraction f when a sample is taken, it is kept with probability
 *     p = 1 for f <= 1/4, then 2^-(4 (f - 1/4)): 1/2 at half full, 1/4 at 3/4, 1/8 when full,
 * and a kept sample's weight and count are divided by p (the rest count as DROP_SUBSAMPLED).
 * p is fixed by the ring before the coin is tossed, so E[kept x w / p] = E[w] and the
 * weights stay exact; the ring fills more slowly and keeps room for the CPU handler's
 * samples too. A sample that finds the ring full all the same is not dropped: hook_alloc.c
 * adds it to agg.c's per-stack sums (an aggregate row at the chunk, without time, thread or
 * span context), since a drop would lose its weight, all from the burst's site (a 64 KiB
 * period lost 9.5% of the 4 KiB site's bytes that way before the sums took them).
 * Why p stops at 1/8: thinning is what costs variance. Thinning alone, down to 1/256 at a
 * full ring with no sums behind it, left the 1 MiB phase at the program's start (the reverse
 * order, before the background thread's first drain) a per-run sd of ~15%, and a skewed one
 * (a few kept samples weighing 1/100 of the site each); harder still (2^-20, simulated) is
 * unbiased but useless: most runs came out far below the truth (0.12). And stretching the
 * next countdown's period instead of thinning the sample (also tried) outlives the burst:
 * the stretched countdown hands its huge weight to whatever the thread allocates next (the
 * 4 KiB phase after a 1 MiB burst: sd 17% over 4 runs), while p is back at 1 as soon as
 * the ring is drained.
 */
#ifndef AG_ALLOC_SAMPLE_H
#define AG_ALLOC_SAMPLE_H

#include "fmath.h"
#include <math.h>
#include <stdint.h>

#define AG_AS_MILLI 1000u   /* count unit: CM_COUNT_ONE */

/* A countdown of mean period bytes from 64 random bits: -P ln(U), U uniform in (0, 1]. At
 * least 1 (an allocation of s bytes is sampled when the countdown minus s goes below 0). */
static inline int64_t ag_as_draw(double period, uint64_t rnd) {
    double u = ((double)(rnd >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double d = -ag_log(u) * period;
    return d > 4e18 ? (int64_t)4e18 : (int64_t)d + 1;
}

/* The probability of keeping a sample taken with the thread's ring holding used bytes of
 * size (see above). */
static inline double ag_as_keep(uint64_t used, uint64_t size) {
    if (!size || 4 * used <= size)
        return 1.0;
    double f = used >= size ? 1.0 : (double)used / (double)size;
    return ag_exp2(-4 * (f - 0.25));
}

/* Weight (bytes) and count (milli-calls) of a sampled allocation of size bytes, taken with a
 * countdown of mean period and kept with probability keep: size / (q keep) and 1 / (q keep)
 * with q = 1 - exp(-size / period) (expm1 keeps the precision for size << period, where
 * q ~ size / period and the weight ~ period + size/2). */
static inline void ag_as_weight(uint64_t size, double period, double keep, uint64_t *weight,
                                uint64_t *count_milli) {
    double q = -ag_expm1(-(double)size / period) * keep;
    if (!(q > 1e-15))
        q = 1e-15;
    *weight = (uint64_t)((double)size / q + 0.5);
    *count_milli = (uint64_t)((double)AG_AS_MILLI / q + 0.5);
}

#endif
