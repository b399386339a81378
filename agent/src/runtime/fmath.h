/* exp, exp2, expm1, log, log1p for the agent without libm (issue 13: "do no harm").
 *
 * LD_PRELOAD is inherited by every program a profiled process execs, and each library the
 * agent needs is opened, mapped and relocated in each of them before main: libm cost a
 * /bin/true ~0.06 ms of CPU (bench-spawn) for five functions the sampling maths uses (the
 * controller, allocation, lock and I/O sampling draws). These are plain double-precision
 * versions of them: argument reduction by ln 2 (Cody-Waite, two-part constant) and series
 * that converge to below half an ulp on the reduced range, so results are within a few ulps
 * of glibc's (tests/test-agent-fmath.c checks 1e-14 relative over each domain). Header-only
 * (static inline): alloc_sample.h and its test use them too. Pure functions of their
 * argument: async-signal-safe, no errno, no locale, no state.
 */
#ifndef AG_FMATH_H
#define AG_FMATH_H

#include <math.h> /* INFINITY, NAN, isnan (macros only: nothing of libm is called) */
#include <stdint.h>
#include <string.h>

#define AG_LN2_HI 6.93147180369123816490e-01 /* ln 2, high part (exact in 32 bits) */
#define AG_LN2_LO 1.90821492927058770002e-10 /* ln 2 - AG_LN2_HI */
#define AG_LN2 0.69314718055994530942
#define AG_INV_LN2 1.44269504088896338700

static const double ag_fm_inv_fact[21] = {
    1.0,
    1.0,
    0.5,
    0.16666666666666666,
    0.041666666666666664,
    0.008333333333333333,
    0.001388888888888889,
    0.0001984126984126984,
    2.48015873015873e-05,
    2.7557319223985893e-06,
    2.755731922398589e-07,
    2.505210838544172e-08,
    2.08767569878681e-09,
    1.6059043836821613e-10,
    1.1470745597729725e-11,
    7.647163731819816e-13,
    4.779477332387385e-14,
    2.8114572543455206e-15,
    1.5619206968586225e-16,
    8.22063524662433e-18,
    4.110317623312165e-19};
static const double ag_fm_inv_odd[13] = { /* 1/1, 1/3, ..., 1/25 */
    1.0,
    0.3333333333333333,
    0.2,
    0.14285714285714285,
    0.1111111111111111,
    0.09090909090909091,
    0.07692307692307693,
    0.06666666666666667,
    0.058823529411764705,
    0.05263157894736842,
    0.047619047619047616,
    0.043478260869565216,
    0.04};

static inline uint64_t ag_fm_bits(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

static inline double ag_fm_double(uint64_t u) {
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* 2^k for -1074 <= k <= 1023 (subnormal below -1022) */
static inline double ag_fm_pow2(int k) {
    if (k >= -1022)
        return ag_fm_double((uint64_t)(k + 1023) << 52);
    return ag_fm_double((uint64_t)1 << (k + 1074));
}

/* natural logarithm */
static inline double ag_log(double x) {
    if (isnan(x) || x < 0)
        return NAN;
    if (x == 0)
        return -INFINITY;
    if (x == INFINITY)
        return x;
    int e = 0;
    if (x < 2.2250738585072014e-308) { /* subnormal: scale into the normal range */
        x *= 18014398509481984.0;      /* 2^54 */
        e = -54;
    }
    uint64_t u = ag_fm_bits(x);
    e += (int)((u >> 52) & 0x7ff) - 1023;
    double m = ag_fm_double((u & 0x000fffffffffffffull) | 0x3ff0000000000000ull); /* [1, 2) */
    if (m > 1.41421356237309504880) {
        m *= 0.5;
        e++;
    }
    /* log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716: s^2 <= 0.0295 */
    double f = m - 1, s = f / (2 + f), z = s * s;
    double p = ag_fm_inv_odd[12];
    for (int k = 11; k >= 0; k--) /* Horner on constants: no division in the loop */
        p = p * z + ag_fm_inv_odd[k];
    double de = (double)e;
    return de * AG_LN2_HI + (2 * s * p + de * AG_LN2_LO);
}

/* log(1 + x), accurate for small x */
static inline double ag_log1p(double x) {
    double u = 1 + x;
    if (u == 1)
        return x;
    if (u == INFINITY || u <= 0)
        return ag_log(u);
    return ag_log(u) * (x / (u - 1)); /* corrects the rounding of 1 + x (Goldberg) */
}

/* e^r for |r| <= ln2 / 2, as a sum of the series */
static inline double ag_fm_exp_reduced(double r) {
    double p = ag_fm_inv_fact[17];
    for (int n = 16; n >= 0; n--)
        p = p * r + ag_fm_inv_fact[n];
    return p;
}

static inline double ag_exp(double x) {
    if (isnan(x))
        return x;
    if (x > 709.782712893384)
        return INFINITY;
    if (x < -745.1332191019412)
        return 0;
    double kd = x * AG_INV_LN2;
    int k = (int)(kd < 0 ? kd - 0.5 : kd + 0.5);
    double r = (x - k * AG_LN2_HI) - k * AG_LN2_LO;
    double y = ag_fm_exp_reduced(r);
    /* scale in two steps so that neither factor over- or underflows on its own */
    int k1 = k / 2;
    return y * ag_fm_pow2(k1) * ag_fm_pow2(k - k1);
}

/* e^x - 1, accurate for small x */
static inline double ag_expm1(double x) {
    if (x > -0.5 && x < 0.5) { /* x (1 + x/2! + x^2/3! + ... + x^19/20!) */
        double p = ag_fm_inv_fact[20];
        for (int n = 19; n >= 1; n--)
            p = p * x + ag_fm_inv_fact[n];
        return p * x;
    }
    return ag_exp(x) - 1;
}

static inline double ag_exp2(double x) {
    if (isnan(x))
        return x;
    if (x >= 1024)
        return INFINITY;
    if (x < -1075)
        return 0;
    /* 2^x = 2^k 2^f with k the nearest integer, |f| <= 1/2: e^(f ln 2) */
    int k = (int)(x < 0 ? x - 0.5 : x + 0.5);
    double y = ag_fm_exp_reduced((x - k) * AG_LN2);
    int k1 = k / 2;
    return y * ag_fm_pow2(k1) * ag_fm_pow2(k - k1);
}

#endif
