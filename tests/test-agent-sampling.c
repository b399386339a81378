/* Unit test of the allocation sampling maths (agent/src/hooks/alloc_sample.h), issue 19: simulated
 * allocation streams run through the same countdown, thinning and weighting the hooks use,
 * many times over, against the exact truth.
 *
 * The stream: three call sites one after another (64 B, 4 KiB, 1 MiB objects; 16, 16 and
 * 64 MiB), a period that a controller lowers by 20% every 10,000 allocations from 1 MiB to
 * 16 KiB (so countdowns are drawn under one period and end under another), and a ring of
 * 32 KiB (160 records, as the agent's) drained at each phase's start and every 20,000
 * allocations (so the 4 KiB phase is a burst of ~1,000 samples that would overflow it). Each variant runs R independent streams; the mean
 * estimate over them must equal the truth within 4 standard errors (and the standard error
 * must be small enough for that to mean something), and the two wrong variants -- weighting
 * with the period in force at the sample instead of the one the countdown was drawn with,
 * and dropping samples when the ring is full instead of thinning them -- must be caught as
 * biased, which shows the test can fail.
 */
#include "alloc_sample.h"
#include "support/runner.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>

#define REPS 1000
#define RING 32768u
#define REC 200u /* bytes per record (the agent's are ~100-300) */
#define DRAIN_EVERY 20000u
#define STEP_EVERY 10000u

enum { RIGHT, WRONG_PERIOD, DROP_WHEN_FULL };

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static const uint64_t size_of[3] = {64, 4096, 1u << 20};
static const uint64_t count_of[3] = {262144, 4096, 64}; /* 16, 16, 64 MiB */

typedef struct {
    double bytes[3], calls[3];
    uint64_t thinned, dropped, spilled;
} est_t;

/* One stream under variant v; estimates per site. */
static void stream(int v, est_t *e) {
    double period_now = 1 << 20;
    uint64_t i = 0, used = 0;
    double drawn = period_now;
    int64_t left = ag_as_draw(drawn, next_rand());
    for (int site = 0; site < 3; site++)
        for (uint64_t k = 0; k < count_of[site]; k++, i++) {
            if (i % STEP_EVERY == 0 && period_now > 16384) /* a controller lowers the period */
                period_now = period_now * 0.8 > 16384 ? period_now * 0.8 : 16384;
            if (i % DRAIN_EVERY == 0 || k == 0) /* the background thread drains the ring */
                used = 0;
            uint64_t s = size_of[site];
            if ((left -= (int64_t)s) >= 0)
                continue;
            double p = drawn; /* the period this countdown was drawn with */
            drawn = period_now;
            left = ag_as_draw(drawn, next_rand());
            double keep = v == DROP_WHEN_FULL ? 1.0 : ag_as_keep(used, RING);
            if (keep < 1 && (double)(next_rand() >> 11) * (1.0 / 9007199254740992.0) >= keep) {
                e->thinned++;
                continue;
            }
            uint64_t w, c;
            ag_as_weight(s, v == WRONG_PERIOD ? period_now : p, keep, &w, &c);
            if (used + REC > RING) { /* the agent sums these per stack (agg.c): not lost */
                if (v == DROP_WHEN_FULL) {
                    e->dropped++;
                    continue;
                }
                e->spilled++;
            } else {
                used += REC;
            }
            e->bytes[site] += (double)w;
            e->calls[site] += (double)c / AG_AS_MILLI;
        }
}

typedef struct {
    double mean[2][3], se[2][3]; /* [bytes, calls][site], relative to the truth */
    uint64_t thinned, dropped, spilled;
} result_t;

static result_t run_variant(int v) {
    double sum[2][3] = {{0}}, sq[2][3] = {{0}};
    result_t r = {0};
    for (int rep = 0; rep < REPS; rep++) {
        est_t e = {0};
        stream(v, &e);
        r.thinned += e.thinned;
        r.dropped += e.dropped;
        r.spilled += e.spilled;
        for (int s = 0; s < 3; s++) {
            double b = e.bytes[s] / (double)(size_of[s] * count_of[s]);
            double n = e.calls[s] / (double)count_of[s];
            sum[0][s] += b, sq[0][s] += b * b;
            sum[1][s] += n, sq[1][s] += n * n;
        }
    }
    for (int m = 0; m < 2; m++)
        for (int s = 0; s < 3; s++) {
            r.mean[m][s] = sum[m][s] / REPS;
            double var = (sq[m][s] - REPS * r.mean[m][s] * r.mean[m][s]) / (REPS - 1);
            r.se[m][s] = sqrt(var > 0 ? var : 0) / sqrt(REPS);
        }
    return r;
}

static void print_result(const char *name, const result_t *r) {
    printf("  %-15s thinned %llu spilled %llu dropped %llu\n", name,
           (unsigned long long)r->thinned, (unsigned long long)r->spilled,
           (unsigned long long)r->dropped);
    for (int s = 0; s < 3; s++)
        printf("    %7llu B: bytes %.4f (se %.4f) calls %.4f (se %.4f)\n",
               (unsigned long long)size_of[s], r->mean[0][s], r->se[0][s], r->mean[1][s],
               r->se[1][s]);
}

/* The right weighting with thinning is unbiased for every site, bytes and calls. */
static void test_unbiased(void) {
    result_t r = run_variant(RIGHT);
    print_result("right", &r);
    CHECKF(r.thinned > 0, "the bursts did not fill the ring (nothing thinned)");
    CHECK_EQ(r.dropped, 0);
    for (int m = 0; m < 2; m++)
        for (int s = 0; s < 3; s++) {
            CHECKF(r.se[m][s] > 0 && r.se[m][s] <= 0.01, "site %d: se %.4f: too noisy to judge",
                   s, r.se[m][s]);
            CHECKF(fabs(r.mean[m][s] - 1) <= 4 * r.se[m][s],
                   "site %d %s: mean %.4f, %.1f standard errors from 1", s,
                   m ? "calls" : "bytes", r.mean[m][s], fabs(r.mean[m][s] - 1) / r.se[m][s]);
        }
}

/* Negative controls: the test sees the bias of each wrong variant. */
static void test_wrong_variants_caught(void) {
    result_t w = run_variant(WRONG_PERIOD), d = run_variant(DROP_WHEN_FULL);
    print_result("wrong period", &w);
    print_result("drop when full", &d);
    double worst = 0;
    for (int s = 0; s < 3; s++) {
        double z = fabs(w.mean[0][s] - 1) / w.se[0][s];
        worst = z > worst ? z : worst;
    }
    CHECKF(worst > 8, "weighting with the current period not caught (%.1f se)", worst);
    CHECK(d.dropped > 0);
    /* the 4 KiB burst overflows the ring: it loses most of its samples */
    CHECKF(d.mean[0][1] < 1 - 8 * d.se[0][1], "drops not caught: 4 KiB site at %.4f (se %.4f)",
           d.mean[0][1], d.se[0][1]);
}

/* The schedule itself: keep 1 up to a quarter full, then halving every 1/4 to 1/8 when full;
 * monotonic. */
static void test_keep_schedule(void) {
    CHECK(ag_as_keep(0, RING) == 1.0);
    CHECK(ag_as_keep(RING / 4, RING) == 1.0);
    CHECK(fabs(ag_as_keep(RING / 2, RING) - 0.5) < 1e-12);
    CHECK(fabs(ag_as_keep(RING * 3 / 4, RING) - 0.25) < 1e-12);
    CHECK(fabs(ag_as_keep(RING, RING) - 1.0 / 8) < 1e-12);
    CHECK(ag_as_keep(2 * RING, RING) == ag_as_keep(RING, RING));
    double prev = 2;
    for (uint64_t u = 0; u <= RING; u += 64) {
        double k = ag_as_keep(u, RING);
        CHECKF(k <= prev, "keep rises at %llu", (unsigned long long)u);
        prev = k;
    }
    /* weights: s << P gives ~P + s/2; s >> P gives ~s; keep divides */
    uint64_t w, c;
    ag_as_weight(16, 524288, 1, &w, &c);
    CHECKF(llabs((long long)w - (524288 + 8)) <= 1, "%llu", (unsigned long long)w);
    ag_as_weight(1u << 30, 524288, 1, &w, &c);
    CHECK_EQ(w, 1u << 30);
    CHECK_EQ(c, AG_AS_MILLI);
    ag_as_weight(1u << 30, 524288, 0.25, &w, &c);
    CHECK_EQ(w, 4ull << 30);
    CHECK_EQ(c, 4 * AG_AS_MILLI);
    /* the draw: mean P over many draws (sd of the mean P / 100 for 10^4 draws) */
    double sum = 0;
    for (int k = 0; k < 10000; k++)
        sum += (double)ag_as_draw(1e6, next_rand());
    CHECKF(fabs(sum / 10000 / 1e6 - 1) < 0.04, "mean draw %.4f P", sum / 10000 / 1e6);
}

static const tr_test_t tests[] = {
    {"keep_schedule", test_keep_schedule},
    {"unbiased", test_unbiased},
    {"wrong_variants_caught", test_wrong_variants_caught},
    {NULL, NULL},
};
TR_MAIN(tests)
