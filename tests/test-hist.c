/* Endpoint duration histograms (common/include/cm/hist.h): the buckets tile the values with no
 * gap or overlap and are at most 1/128 of their lower bound wide; percentiles read from a
 * histogram are within 0.4 % of the exact nearest-rank ones over several distributions; the
 * histograms of parts of a data set added bucket by bucket give the whole's percentiles.
 * Label: codec. */
#include "cm/hist.h"
#include "support/runner.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_bucket_bounds(void) {
    CHECK_EQ(cm_hist_index(0), 0);
    CHECK_EQ(cm_hist_index(127), 127);
    CHECK_EQ(cm_hist_index(128), 128);
    CHECK_EQ(cm_hist_index(UINT64_MAX), CM_HIST_BUCKETS - 1);
    CHECK_EQ(cm_hist_index(((uint64_t)1 << CM_HIST_MAX_BITS) - 1), CM_HIST_BUCKETS - 1);
    for (uint32_t i = 0; i + 1 < CM_HIST_BUCKETS; i++) {
        uint64_t lo = cm_hist_lower(i), hi = cm_hist_upper(i);
        CHECKF(hi + 1 == cm_hist_lower(i + 1), "bucket %u ends at %llu, %u starts at %llu", i,
               (unsigned long long)hi, i + 1, (unsigned long long)cm_hist_lower(i + 1));
        CHECKF(cm_hist_index(lo) == i && cm_hist_index(hi) == i, "bucket %u [%llu, %llu]", i,
               (unsigned long long)lo, (unsigned long long)hi);
        /* below 128 ns each value has its own bucket */
        CHECKF(lo < CM_HIST_SUB ? hi == lo : (double)(hi - lo + 1) / (double)lo <= 1.0 / 128,
               "bucket %u is %llu wide at %llu", i, (unsigned long long)(hi - lo + 1),
               (unsigned long long)lo);
        uint64_t mid = cm_hist_mid(i);
        CHECK(mid >= lo && mid <= hi);
    }
    /* random values: each in the bucket its index names */
    uint64_t x = 88172645463325252ull;
    for (int k = 0; k < 1000000; k++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        uint64_t v = x >> (x % 40 + 20);
        uint32_t i = cm_hist_index(v);
        CHECK(i < CM_HIST_BUCKETS && v >= cm_hist_lower(i) && (i == CM_HIST_BUCKETS - 1 ||
                                                              v <= cm_hist_upper(i)));
    }
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t exact_q(const uint64_t *sorted, size_t n, double q) {
    size_t k = (size_t)(q * (double)n + 0.999999);
    return sorted[(k ? k : 1) - 1];
}

static double unif(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
}

/* Durations of a distribution: 0 log-normal around 80 us, 1 bimodal (fast 50 us, 2 % slow
 * 50 ms), 2 exponential mean 1 ms, 3 uniform 100 ns .. 10 s in log. */
static uint64_t draw(int dist, uint64_t *s) {
    double u = unif(s), v = unif(s);
    switch (dist) {
    case 0:
        return (uint64_t)(80000.0 * exp(0.6 * sqrt(-2 * log(u)) * cos(6.283185307 * v)));
    case 1:
        return (uint64_t)((u < 0.02 ? 50e6 : 50e3) * (0.8 + 0.4 * v));
    case 2:
        return (uint64_t)(-1e6 * log(u));
    default:
        return (uint64_t)(100.0 * pow(1e8, u));
    }
}

/* Percentile error over 200,000 values of each distribution, the data set also cut in 7 parts
 * whose histograms are added (as the store adds chunks' rows): same answer as the whole's. */
static void test_percentile_error_and_merge(void) {
    enum { N = 200000, PARTS = 7 };
    static const double qs[] = {0.5, 0.9, 0.99, 0.999};
    uint64_t *v = malloc(N * sizeof *v), *h = calloc(CM_HIST_BUCKETS, sizeof *h),
             *part = calloc((size_t)PARTS * CM_HIST_BUCKETS, sizeof *part),
             *merged = calloc(CM_HIST_BUCKETS, sizeof *merged);
    CHECK(v && h && part && merged);
    for (int dist = 0; dist < 4; dist++) {
        uint64_t s = 0x9e3779b97f4a7c15ull + (uint64_t)dist;
        memset(h, 0, CM_HIST_BUCKETS * sizeof *h);
        memset(part, 0, (size_t)PARTS * CM_HIST_BUCKETS * sizeof *part);
        memset(merged, 0, CM_HIST_BUCKETS * sizeof *merged);
        for (int i = 0; i < N; i++) {
            v[i] = draw(dist, &s);
            h[cm_hist_index(v[i])]++;
            part[(size_t)(i % PARTS) * CM_HIST_BUCKETS + cm_hist_index(v[i])]++;
        }
        for (int p = 0; p < PARTS; p++)
            for (uint32_t b = 0; b < CM_HIST_BUCKETS; b++)
                merged[b] += part[(size_t)p * CM_HIST_BUCKETS + b];
        qsort(v, N, sizeof *v, cmp_u64);
        for (size_t k = 0; k < sizeof qs / sizeof qs[0]; k++) {
            uint64_t want = exact_q(v, N, qs[k]), got = cm_hist_quantile(h, N, qs[k]);
            double err = want ? fabs((double)got - (double)want) / (double)want : (double)got;
            printf("# dist %d p%g: exact %llu, histogram %llu (%.3f %%)\n", dist, qs[k] * 100,
                   (unsigned long long)want, (unsigned long long)got, err * 100);
            CHECKF(err <= 0.004, "dist %d q %g: %llu vs %llu", dist, qs[k],
                   (unsigned long long)got, (unsigned long long)want);
            CHECK_EQ(cm_hist_quantile(merged, N, qs[k]), got);
        }
    }
    CHECK_EQ(cm_hist_quantile(h, 0, 0.5), 0);
    free(v);
    free(h);
    free(part);
    free(merged);
}

static const tr_test_t tests[] = {
    {"bucket_bounds", test_bucket_bounds},
    {"percentile_error_and_merge", test_percentile_error_and_merge},
    {0, 0},
};
TR_MAIN(tests)
