/* The diff's sensitivity curve on simulated sample streams (issue 30): detection rate of a
 * planted change and false findings of null pairs, for the default count test, the previous
 * Welch test, and an oracle (the exact count test that knows which function changed).
 *
 * A side is one deploy: P processes x B time buckets (5 s each), each (process, bucket) one
 * replicate. The service has F functions under main -> handler_h -> fn_f with lognormal shares
 * (sigma 1.5, a few hot). Drawn like the agent's samples with over-dispersion: per replicate a
 * load factor (lognormal sigma 0.2) scales every function; per (process, function) a mix factor
 * (sigma 0.01) and per (replicate, function) another (sigma 0.03): what the pipeline measured
 * (bench/RESULTS.md, issue 30; the earlier 0.05 and 0.1 were guesses); counts are Poisson around
 * that. Planted: a new function taking `share` of the test's samples, or an existing function
 * re-scaled to `share` of the base, its cost x (1 + change) in the test. Null: same build two
 * deploys, and the same with +10 % load on the test side.
 *
 * usage: bench-diff-power [trials=500] [procs=2] [buckets=8] [null|new|slower|n90|curve|s30]
 * (s30: the 20 % function +10 % at 30,000 samples per side, and the same function unchanged)
 * Environment: PMIX, BMIX (the over-dispersion's log-sds, 0.01 and 0.03), SHARES (fixed shares
 * of a few functions instead of 60 lognormal ones, e.g. bench/diff-service's
 * "0.3,0.2,0.25,0.15,0.1"), NMAX (the null cells' largest samples per side, 30000),
 * PMIX0 (fn_00's own PMIX: one function with a larger process spread), BHW (the diff's
 * bh_large_weight), Q (the diff's q, 0.01), NOCALLERS (self costs only: no callers' inclusive
 * tests), NOGROUP (replicates without process groups), POOL (a replicate per bucket summing
 * the processes, no groups: the store's per-leaf rollup), DEBUG (each diff's planted and false findings, and its dispersions).
 * Output: one line per cell: kind, share, change, samples per side, detection rate of ours,
 * Welch, oracle, the count test's own p <= 0.01 for the planted function (what it would find
 * knowing which function changed: the ceiling of any multiplicity procedure), the ideal test
 * (an existing function: knows the function and the variance the simulation draws; what no
 * test can beat at level 0.01), the same ideal test at the level a sole finding needs in the
 * diff's weighted BH (what no test can beat under the diff's multiplicity), and the fraction
 * of diffs with a finding on another function. */
#include "query.h"

#include "cm/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define F 60
#define H 4
#define PERIOD_NS 10000000ull

typedef struct {
    uint64_t s;
} rng_t;

static uint64_t rnext(rng_t *r) { /* splitmix64 */
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static double runif(rng_t *r) { return ((rnext(r) >> 11) + 0.5) / 9007199254740992.0; }
static double rnorm(rng_t *r) { return sqrt(-2 * log(runif(r))) * cos(2 * acos(-1.0) * runif(r)); }
static double rlognorm(rng_t *r, double sigma) { return exp(sigma * rnorm(r) - sigma * sigma / 2); }
static uint64_t rpoisson(rng_t *r, double lambda) {
    if (lambda < 30) {
        double l = exp(-lambda), p = 1;
        uint64_t k = 0;
        do {
            k++;
            p *= runif(r);
        } while (p > l);
        return k - 1;
    }
    double x = floor(lambda + sqrt(lambda) * rnorm(r) + 0.5);
    return x < 0 ? 0 : (uint64_t)x;
}

/* Over-dispersion knobs: PMIX (between processes, default 0.01), BMIX (between a process's
 * buckets, default 0.03): log-sd of a function's rate, as measured through the pipeline. */
static double env_sigma(const char *name, double dflt) {
    const char *v = getenv(name);
    return v && *v ? atof(v) : dflt;
}

typedef struct {
    int procs, buckets;
    double share[F + 1]; /* base shares; [F] the new function (0 in the base) */
} svc_t;

typedef enum { NEW_FN, SLOWER, NULL_SAME, NULL_LOAD } kind_t;

/* The service: lognormal shares; target function 1 re-scaled to `share` for SLOWER. */
static void svc_make(svc_t *s, rng_t *r, kind_t kind, double share) {
    double sum = 0;
    for (int f = 0; f < F; f++)
        sum += s->share[f] = exp(1.5 * rnorm(r));
    for (int f = 0; f < F; f++)
        s->share[f] /= sum;
    const char *fixed = getenv("SHARES"); /* "0.3,0.2,...": these functions only */
    if (fixed && *fixed) {
        char *end;
        int k = 0;
        for (const char *c = fixed; k < F && *c; c = *end ? end + 1 : end, k++)
            s->share[k] = strtod(c, &end);
        for (int f = k; f < F; f++)
            s->share[f] = 0;
    }
    if (kind == SLOWER) {
        double rest = 1 - s->share[1];
        for (int f = 0; f < F; f++)
            s->share[f] = f == 1 ? share : s->share[f] * (1 - share) / rest;
    }
    s->share[F] = 0;
}

/* One side with `samples` expected samples (at load 1); test: the planted change applied. */
static agg_profile_t *side(const svc_t *s, rng_t *r, double samples, double mult[F + 1],
                           double load, uint64_t *cnt_target, int target) {
    agg_profile_t *p = agg_profile_new(CM_EV_CPU);
    uint32_t st[F + 1];
    char name[32];
    uint32_t m = (uint32_t)agg_profile_frame(p, "main", "svc", NULL, 0), hd[H];
    for (int h = 0; h < H; h++) {
        snprintf(name, sizeof name, "handler_%d", h);
        hd[h] = (uint32_t)agg_profile_frame(p, name, "svc", NULL, 0);
    }
    for (int f = 0; f <= F; f++) {
        snprintf(name, sizeof name, f < F ? "fn_%02d" : "new_fn", f);
        uint32_t fr[3] = {m, hd[f % H], (uint32_t)agg_profile_frame(p, name, "svc", NULL, 0)};
        st[f] = (uint32_t)agg_profile_stack(p, fr, 3);
    }
    double tot = 0;
    for (int f = 0; f <= F; f++)
        tot += s->share[f] * mult[f];
    double per_rep = samples / (s->procs * s->buckets);
    double pmix[F + 1];
    *cnt_target = 0;
    for (int pr = 0; pr < s->procs; pr++) {
        for (int f = 0; f <= F; f++)
            pmix[f] = rlognorm(r, env_sigma(f == 0 && getenv("PMIX0") ? "PMIX0" : "PMIX", 0.01));
        for (int b = 0; b < s->buckets; b++) {
            /* POOL: a replicate per bucket with every process's samples, no groups (the
             * store's per-leaf rollup keeps no pid) */
            if (getenv("POOL"))
                snprintf(name, sizeof name, "b%d", b);
            else
                snprintf(name, sizeof name, "p%d-b%d", pr, b);
            uint32_t rep = (uint32_t)agg_profile_replicate(p, name, 5.0);
            if (!getenv("NOGROUP") && !getenv("POOL"))
                agg_profile_replicate_group(p, rep, (uint32_t)pr);
            double l = load * rlognorm(r, 0.2), bmix = env_sigma("BMIX", 0.03);
            for (int f = 0; f <= F; f++) {
                double mu = per_rep * l * s->share[f] * mult[f] / (f == F ? tot : 1) *
                            pmix[f] * rlognorm(r, bmix);
                if (f == F) /* a new function's share is of the test's samples */
                    mu = per_rep * l * s->share[F] * pmix[f] * rlognorm(r, bmix);
                uint64_t c = mu > 0 ? rpoisson(r, mu) : 0;
                if (f == target)
                    *cnt_target += c;
                if (c)
                    agg_profile_add(p, st[f], c * PERIOD_NS, c * CM_COUNT_ONE, rep, 0);
            }
        }
    }
    return p;
}

/* The oracle: exact binomial test of the target's samples against the rest, at level q. */
static int oracle(uint64_t yb, uint64_t cb, uint64_t yt, uint64_t ct, double q) {
    double n = (double)(yb + yt), pi = (double)(ct - yt) / (double)(cb - yb + ct - yt);
    if (n <= 0)
        return 0;
    double k = (double)yt;
    double up = k <= 0 ? 1 : agg_stats_betai(k, n - k + 1, pi);
    double lo = k >= n ? 1 : agg_stats_betai(n - k, k + 1, 1 - pi);
    return 2 * fmin(up, lo) <= q;
}

/* The ideal test of an existing function: its log ratio to the rest, z with the variance the
 * simulation draws (Poisson counts plus the mix factors' PMIX^2 / procs + BMIX^2 / replicates
 * per side), at level q. Knows the function and the variance: no test does better. */
static int ideal(uint64_t yb, uint64_t cb, uint64_t yt, uint64_t ct, int procs, int buckets,
                 double q) {
    if (!yb || !yt || yb >= cb || yt >= ct)
        return 0;
    double pm = env_sigma("PMIX", 0.01), bm = env_sigma("BMIX", 0.03);
    double lr = log((double)yt / (double)(ct - yt)) - log((double)yb / (double)(cb - yb));
    double v = 1.0 / (double)yb + 1.0 / (double)(cb - yb) + 1.0 / (double)yt +
               1.0 / (double)(ct - yt) + 2 * (pm * pm / procs + bm * bm / (procs * buckets));
    return agg_stats_normal_p2(lr / sqrt(v)) <= q;
}

typedef struct {
    int found, welch, oracle, other, single, ideal, ideal_bh;
    double mde_new, mde20;
} res_t;

static void trial(kind_t kind, double share, double change, double samples, int procs,
                  int buckets, uint64_t seed, res_t *out) {
    rng_t r = {seed};
    svc_t s = {.procs = procs, .buckets = buckets};
    svc_make(&s, &r, kind, share);
    double one[F + 1], mult[F + 1];
    for (int f = 0; f <= F; f++)
        one[f] = mult[f] = 1;
    int target = kind == NEW_FN ? F : 1;
    if (kind == SLOWER)
        mult[1] = 1 + change;
    svc_t st = s;
    if (kind == NEW_FN)
        st.share[F] = share;
    uint64_t yb, yt;
    agg_profile_t *b = side(&s, &r, samples, one, 1.0, &yb, target);
    agg_profile_t *t = side(&st, &r, samples, kind == SLOWER ? mult : one,
                            kind == NULL_LOAD ? 1.1 : 1.0, &yt, target);
    agg_diff_t d;
    agg_diff_opts_t o;
    size_t n_bh = 0;
    agg_diff_opts_default(&o);
    if (getenv("BHW"))
        o.bh_large_weight = atof(getenv("BHW"));
    if (getenv("Q"))
        o.q = atof(getenv("Q"));
    o.no_callers = getenv("NOCALLERS") != NULL; /* self costs only: no callers' BH tests */
    for (int m = 0; m < 2; m++) {
        o.method = m ? AGG_DIFF_WELCH : AGG_DIFF_COUNT;
        if (agg_diff_compute(b, t, &o, &d))
            abort();
        for (size_t i = 0; i < d.n; i++) {
            const agg_diff_entry_t *e = &d.entries[i];
            int sig = e->cls == AGG_DIFF_REGRESSION || e->cls == AGG_DIFF_IMPROVEMENT;
            int is_t = strcmp(e->name, target == F ? "new_fn" : "fn_01") == 0;
            int path = strcmp(e->name, "main") == 0 || strncmp(e->name, "handler_", 8) == 0;
            if (m == 0 && sig && !is_t && !path && kind != NULL_SAME && kind != NULL_LOAD)
                out->other++;
            if (m == 0 && sig && (kind == NULL_SAME || kind == NULL_LOAD)) {
                out->other++;
                if (getenv("DEBUG"))
                    printf("  false %s: %llu vs %llu samples (of %llu / %llu), p %.3g q %.3g\n",
                           e->name, (unsigned long long)e->base_samples,
                           (unsigned long long)e->test_samples,
                           (unsigned long long)d.base_samples, (unsigned long long)d.test_samples,
                           e->p, e->q);
            }
            if (is_t && e->cls == AGG_DIFF_REGRESSION)
                *(m ? &out->welch : &out->found) += 1;
            if (is_t && m == 0 && e->p <= 0.01 && e->norm_test > e->norm_base)
                out->single++;
            if (is_t && m == 0 && getenv("DEBUG"))
                printf("  target %s: %llu vs %llu samples, p %.3g q %.3g, %zu tested, %zu in BH, "
                       "%s\n", e->name, (unsigned long long)e->base_samples,
                       (unsigned long long)e->test_samples, e->p, e->q, d.n_tested, d.n_bh,
                       agg_diff_class_name(e->cls));
        }
        if (m == 0 && getenv("DEBUG"))
            printf("  dispersion %.5f between processes %.5f (df %.0f)\n", d.dispersion,
                   d.dispersion_g_data, d.dispersion_g_df);
        if (m == 0) {
            n_bh = d.n_bh;
            out->mde_new += d.mde_new;
            out->mde20 += d.mde_change[1];
        }
        agg_diff_free(&d);
    }
    if (kind != NULL_SAME && kind != NULL_LOAD) {
        uint64_t wb, cb, wt, ct;
        double xb, xt;
        agg_profile_totals(b, &wb, &cb, &xb);
        agg_profile_totals(t, &wt, &ct, &xt);
        out->oracle += oracle(yb, cb / CM_COUNT_ONE, yt, ct / CM_COUNT_ONE, 0.01);
        if (kind == SLOWER) {
            /* the level a sole finding needs in this diff's weighted BH: q w / m with
             * w = 1 - lambda + lambda m s (s: the function's pooled share), as mde() */
            double sh = (double)(yb + yt) * CM_COUNT_ONE / (double)(cb + ct);
            double lam = o.bh_large_weight, m = n_bh ? (double)n_bh : 1;
            double lbh = o.q * fmin(1, (1 - lam) / m + lam * sh);
            cb /= CM_COUNT_ONE;
            ct /= CM_COUNT_ONE;
            out->ideal += ideal(yb, cb, yt, ct, procs, buckets, 0.01);
            out->ideal_bh += ideal(yb, cb, yt, ct, procs, buckets, lbh);
        }
    }
    agg_profile_free(b);
    agg_profile_free(t);
}

static void cell(kind_t kind, double share, double change, double samples, int trials, int procs,
                 int buckets) {
    res_t r = {0};
    for (int i = 0; i < trials; i++)
        trial(kind, share, change, samples, procs, buckets,
              (uint64_t)i * 1000003 + (uint64_t)(samples * 7) + (uint64_t)(share * 1e4) * 31 +
                  (uint64_t)kind * 977 + (uint64_t)(change * 1e3) * 13,
              &r);
    static const char *kn[] = {"new", "slower", "null-same", "null-load+10%"};
    printf("%-14s share %5.1f%% change %+5.1f%% samples/side %6.0f: found %5.1f%% (welch %5.1f%%, "
           "oracle %5.1f%%, own p <= 0.01 %5.1f%%, ideal %5.1f%%, ideal at BH's level %5.1f%%), "
           "diffs with another finding %4.1f%%, mde new %.2f%%, 20%%-fn %.1f%%\n",
           kn[kind], 100 * share, 100 * change, samples, 100.0 * r.found / trials,
           100.0 * r.welch / trials, 100.0 * r.oracle / trials, 100.0 * r.single / trials,
           100.0 * r.ideal / trials, 100.0 * r.ideal_bh / trials, 100.0 * r.other / trials,
           100 * r.mde_new / trials, 100 * r.mde20 / trials);
    fflush(stdout);
}

int main(int argc, char **argv) {
    int trials = argc > 1 ? atoi(argv[1]) : 500;
    int procs = argc > 2 ? atoi(argv[2]) : 2, buckets = argc > 3 ? atoi(argv[3]) : 8;
    const char *only = argc > 4 ? argv[4] : "";
    printf("# %d trials per cell, %d processes x %d buckets per side, %d functions\n", trials,
           procs, buckets, F);
    double nmax = env_sigma("NMAX", 30000); /* the null cells' largest sample count */
    if (!*only || !strcmp(only, "null")) {
        for (double n = 1500; n <= nmax; n *= 4.47)
            cell(NULL_SAME, 0, 0, n, trials, procs, buckets);
        for (double n = 1500; n <= nmax; n *= 4.47)
            cell(NULL_LOAD, 0, 0, n, trials, procs, buckets);
    }
    static const double news[] = {0.005, 0.01, 0.02, 0.05};
    static const double nsamp[] = {300, 600, 900, 1200, 1500, 3000};
    if (!*only || !strcmp(only, "new"))
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 6; j++)
                cell(NEW_FN, news[i], 0, nsamp[j], trials, procs, buckets);
    if (!*only || !strcmp(only, "n90")) /* the 90 % point of ours and the oracle, 2 % new */
        for (double n = 450; n <= 1050; n += 50)
            cell(NEW_FN, 0.02, 0, n, trials, procs, buckets);
    static const double shares[] = {0.05, 0.2, 0.5}, changes[] = {0.02, 0.05, 0.10};
    static const double ssamp[] = {1500, 5000, 10000, 20000, 30000, 60000};
    if (!*only || !strcmp(only, "slower"))
        for (int i = 0; i < 3; i++)
            for (int c = 0; c < 3; c++)
                for (int j = 0; j < 6; j++)
                    cell(SLOWER, shares[i], changes[c], ssamp[j], trials, procs, buckets);
    if (!strcmp(only, "s30")) { /* the existing-function item's cell alone, and unchanged */
        cell(SLOWER, 0.2, 0.10, 30000, trials, procs, buckets);
        cell(SLOWER, 0.2, 0.0, 30000, trials, procs, buckets);
    }
    if (!strcmp(only, "curve")) /* issue 30's existing-function item: 20 % function +10 % */
        for (int j = 0; j < 6; j++)
            cell(SLOWER, 0.2, 0.10, (double[]){6700, 15000, 30000, 60000, 120000, 240000}[j],
                 trials, procs, buckets);
    return 0;
}
