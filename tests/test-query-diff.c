/* Tests of the diff: PerfView's worked example, and the statistics on synthetic replicate
 * data with realistic over-dispersion (planted regression, null comparisons, and the naive
 * Poisson test for contrast). */
#include "query.h"
#include "support/runner.h"

#include "cm/error.h"

#include <math.h>

/* ---- PerfView's worked example ---- */

static agg_profile_t *perfview_side(uint64_t g, uint64_t f_self, uint64_t x) {
    agg_profile_t *p = agg_profile_new(CM_EV_CPU);
    uint32_t m = (uint32_t)agg_profile_frame(p, "main", "app", NULL, 0);
    uint32_t gg = (uint32_t)agg_profile_frame(p, "g", "app", NULL, 0);
    uint32_t ff = (uint32_t)agg_profile_frame(p, "f", "app", NULL, 0);
    uint32_t xx = (uint32_t)agg_profile_frame(p, "x", "app", NULL, 0);
    CHECK(agg_profile_replicate(p, "all", 1.0) == 0);
    uint32_t s1[] = {m, gg}, s2[] = {m, ff}, s3[] = {m, ff, xx};
    CHECK_EQ(agg_profile_add(p, (uint32_t)agg_profile_stack(p, s1, 2), g, g * 1000, 0, 0), 0);
    CHECK_EQ(agg_profile_add(p, (uint32_t)agg_profile_stack(p, s2, 2), f_self, f_self * 1000, 0, 0), 0);
    CHECK_EQ(agg_profile_add(p, (uint32_t)agg_profile_stack(p, s3, 3), x, x * 1000, 0, 0), 0);
    return p;
}

static const agg_diff_entry_t *entry(const agg_diff_t *d, const char *name) {
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->entries[i].name, name) == 0)
            return &d->entries[i];
    CHECKF(0, "no entry %s", name);
    return NULL;
}

static void test_perfview_example(void) {
    /* main 100 -> 110, g 50 -> 50, f 50 -> 60, f's child x 25 -> 35 */
    agg_profile_t *b = perfview_side(50, 25, 25), *t = perfview_side(50, 25, 35);
    agg_diff_t d;
    CHECK_EQ(agg_diff_compute(b, t, NULL, &d), 0);
    CHECK(fabs(d.base_total - 100) < 1e-9 && fabs(d.test_total - 110) < 1e-9);
    struct {
        const char *name;
        double base, test, overweight, responsibility;
        int interesting;
    } want[] = {{"main", 100, 110, 1.0, 1.0, 1},
                {"g", 50, 50, 0.0, 0.0, 0},
                {"f", 50, 60, 2.0, 1.0, 1},
                {"x", 25, 35, 4.0, 1.0, 1}};
    for (int i = 0; i < 4; i++) {
        const agg_diff_entry_t *e = entry(&d, want[i].name);
        CHECKF(fabs(e->base_total - want[i].base) < 1e-9 && fabs(e->test_total - want[i].test) < 1e-9,
               "%s: %g -> %g", e->name, e->base_total, e->test_total);
        CHECKF(fabs(e->overweight - want[i].overweight) < 1e-12, "%s: overweight %g, want %g",
               e->name, e->overweight, want[i].overweight);
        CHECKF(fabs(e->responsibility - want[i].responsibility) < 1e-12, "%s: responsibility %g",
               e->name, e->responsibility);
        CHECK_EQ(e->interesting, want[i].interesting);
        CHECK_EQ(e->cls, AGG_DIFF_UNTESTED); /* one replicate per side: nothing to test */
    }
    CHECK(fabs(entry(&d, "x")->self_responsibility - 1.0) < 1e-12);
    CHECK(fabs(entry(&d, "f")->self_responsibility) < 1e-12);
    CHECK(d.warnings & AGG_DIFF_WARN_BASE_REPLICATES);
    CHECK(d.warnings & AGG_DIFF_WARN_TEST_REPLICATES);
    CHECK(d.warnings & AGG_DIFF_WARN_BASE_SAMPLES); /* 100 samples < 1000 */
    CHECKF(strstr(d.warning_text, "base has only 100 samples") != NULL, "%s", d.warning_text);
    CHECK_EQ(d.base_samples, 100);
    CHECK_EQ(d.test_samples, 110);
    agg_diff_free(&d);
    agg_profile_free(b);
    agg_profile_free(t);
}

static void test_diff_errors(void) {
    agg_profile_t *a = agg_profile_new(CM_EV_CPU), *b = agg_profile_new(CM_EV_ALLOC);
    agg_diff_t d;
    CHECK_EQ(agg_diff_compute(a, b, NULL, &d), CM_EINVAL);
    agg_profile_free(b);
    b = agg_profile_new(CM_EV_CPU);
    CHECK_EQ(agg_diff_compute(a, b, NULL, &d), 0); /* empty sides: no entries, warnings */
    CHECK_EQ(d.n, 0);
    CHECK(d.warnings & AGG_DIFF_WARN_NO_WORK);
    agg_diff_free(&d);
    agg_profile_free(a);
    agg_profile_free(b);
}

/* ---- synthetic replicates with over-dispersion ---- */

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
/* lognormal with mean 1 and log-sd sigma */
static double rlognorm(rng_t *r, double sigma) { return exp(sigma * rnorm(r) - sigma * sigma / 2); }
static uint64_t rpoisson(rng_t *r, double lambda) {
    if (lambda < 30) { /* Knuth: multiply uniforms until below e^-lambda */
        double l = exp(-lambda), p = 1;
        uint64_t k = 0;
        do {
            k++;
            p *= runif(r);
        } while (p > l);
        return k - 1;
    }
    double x = floor(lambda + sqrt(lambda) * rnorm(r) + 0.5); /* normal approximation */
    return x < 0 ? 0 : (uint64_t)x;
}

#define N_FUNCS 40
#define N_STACKS 150
#define PERIOD_NS 10000000ull /* 100 Hz */

typedef struct {
    uint32_t frames[N_STACKS][12];
    uint32_t depth[N_STACKS];
    double rate[N_STACKS]; /* samples per process-second */
} workload_t;

/* A call graph: function 0 is main; a stack is main then a random walk down a layered graph,
 * so functions recur across stacks as in real programs. Rates are lognormal (a few hot
 * stacks), summing to 100 samples per process-second (100% of one CPU at 100 Hz). */
static void workload_make(workload_t *w, uint64_t seed) {
    rng_t r = {seed * 7919 + 17};
    double sum = 0;
    for (int s = 0; s < N_STACKS; s++) {
        uint32_t d = 3 + (uint32_t)(rnext(&r) % 9);
        w->frames[s][0] = 0;
        for (uint32_t k = 1; k < d; k++) /* layer k uses functions [4k-3, 4k+1) */
            w->frames[s][k] = (uint32_t)(1 + ((k - 1) * 4 + rnext(&r) % 8) % (N_FUNCS - 1));
        w->depth[s] = d;
        w->rate[s] = exp(1.5 * rnorm(&r));
        sum += w->rate[s];
    }
    for (int s = 0; s < N_STACKS; s++)
        w->rate[s] *= 100.0 / sum;
}

/* One side: n_rep replicates (10 s buckets of `procs` processes). Each replicate has a load
 * factor L (lognormal, sigma 0.2: +-20%) shared by all stacks, each stack a request-mix factor
 * M (lognormal, sigma 0.1) and the count is Poisson(rate * L * M * work); weight = count *
 * period. planted > 0 adds a new leaf function under main;f1 costing that share of the total. */
static agg_profile_t *side_make(const workload_t *w, uint64_t seed, int n_rep, double planted) {
    rng_t r = {seed};
    agg_profile_t *p = agg_profile_new(CM_EV_CPU);
    uint32_t fid[N_FUNCS + 1];
    char name[32];
    for (int f = 0; f < N_FUNCS; f++) {
        snprintf(name, sizeof name, f ? "fn_%02d" : "main", f);
        fid[f] = (uint32_t)agg_profile_frame(p, name, "svc", "b1d", 0x400000 + 64 * (uint64_t)f);
    }
    fid[N_FUNCS] = (uint32_t)agg_profile_frame(p, "planted_fn", "svc", "b1d", 0x500000);
    uint32_t sid[N_STACKS + 1];
    for (int s = 0; s < N_STACKS; s++) {
        uint32_t fr[12];
        for (uint32_t k = 0; k < w->depth[s]; k++)
            fr[k] = fid[w->frames[s][k]];
        sid[s] = (uint32_t)agg_profile_stack(p, fr, w->depth[s]);
    }
    uint32_t pl[] = {fid[0], fid[1], fid[N_FUNCS]};
    sid[N_STACKS] = (uint32_t)agg_profile_stack(p, pl, 3);
    for (int i = 0; i < n_rep; i++) {
        snprintf(name, sizeof name, "bucket-%d", i);
        double work = 10.0 * (9 + (double)(rnext(&r) % 3)); /* 9-11 processes alive */
        uint32_t rep = (uint32_t)agg_profile_replicate(p, name, work);
        double load = rlognorm(&r, 0.2);
        for (int s = 0; s <= N_STACKS; s++) {
            double rate = s < N_STACKS ? w->rate[s] : planted * 100.0;
            if (rate <= 0)
                continue;
            uint64_t c = rpoisson(&r, rate * load * rlognorm(&r, 0.1) * work);
            if (c)
                CHECK_EQ(agg_profile_add(p, sid[s], c * PERIOD_NS, c * CM_COUNT_ONE, rep, 0), 0);
        }
    }
    return p;
}

typedef struct {
    int regressions, improvements, planted_first, planted_sig;
} outcome_t;

static outcome_t run_diff(uint64_t seed, double planted, const agg_diff_opts_t *o, int verbose) {
    workload_t w;
    workload_make(&w, seed);
    agg_profile_t *b = side_make(&w, seed * 2 + 1, 60, 0);
    agg_profile_t *t = side_make(&w, seed * 2 + 2, 60, planted);
    agg_diff_t d;
    CHECK_EQ(agg_diff_compute(b, t, o, &d), 0);
    CHECK_EQ(d.base_replicates, 60);
    CHECK(d.warnings == 0);
    outcome_t out = {(int)d.n_regressions, (int)d.n_improvements, 0, 0};
    out.planted_first = d.n > 0 && strcmp(d.entries[0].name, "planted_fn") == 0;
    out.planted_sig = out.planted_first && d.entries[0].cls == AGG_DIFF_REGRESSION;
    if (verbose && (d.n_regressions + d.n_improvements > (planted > 0)))
        for (size_t i = 0; i < d.n && d.entries[i].cls != AGG_DIFF_NOISE &&
                           d.entries[i].cls != AGG_DIFF_UNTESTED;
             i++)
            printf("  seed %llu: %s %s %.4g -> %.4g ns/s p=%.3g q=%.3g\n",
                   (unsigned long long)seed, agg_diff_class_name(d.entries[i].cls),
                   d.entries[i].name, d.entries[i].base_self, d.entries[i].test_self,
                   d.entries[i].p, d.entries[i].q);
    agg_diff_free(&d);
    agg_profile_free(b);
    agg_profile_free(t);
    return out;
}

/* (a) +10% CPU in one new function: first, significant, nothing else significant. */
static void test_planted_regression(void) {
    for (uint64_t seed = 1; seed <= 20; seed++) {
        outcome_t o = run_diff(seed, 0.10, NULL, 1);
        CHECKF(o.planted_first && o.planted_sig, "seed %llu: planted function not first/significant",
               (unsigned long long)seed);
        CHECKF(o.regressions == 1 && o.improvements == 0, "seed %llu: %d regressions, %d improvements",
               (unsigned long long)seed, o.regressions, o.improvements);
    }
}

/* (b) null: identical behaviour, 20 seeds: at most one significant finding in total. */
static void test_null_20_seeds(void) {
    int findings = 0;
    for (uint64_t seed = 101; seed <= 120; seed++) {
        outcome_t o = run_diff(seed, 0, NULL, 1);
        findings += o.regressions + o.improvements;
    }
    printf("null, 20 seeds: %d significant findings (default count test + BH q=0.01)\n", findings);
    CHECK(findings <= 1);
}

/* (c) the naive per-sample Poisson test on the same null data flags many functions. */
static void test_null_naive_poisson(void) {
    agg_diff_opts_t o;
    agg_diff_opts_default(&o);
    o.method = AGG_DIFF_POISSON;
    int naive = 0, ours = 0;
    for (uint64_t seed = 101; seed <= 120; seed++) {
        outcome_t x = run_diff(seed, 0, &o, 0);
        naive += x.regressions + x.improvements;
        outcome_t y = run_diff(seed, 0, NULL, 0);
        ours += y.regressions + y.improvements;
    }
    printf("null, 20 seeds: naive Poisson test %d findings, replicate test %d\n", naive, ours);
    CHECK(naive >= 20 && naive > 10 * (ours + 1));
}

/* Margins over many seeds: the planted function is found in every one of 200 seeds and the
 * null false findings stay near the FDR level (expected about 0.01 per diff; allow 0.05). */
static void test_margins_200_seeds(void) {
    int missed = 0, extra = 0, null_findings = 0;
    for (uint64_t seed = 1000; seed < 1200; seed++) {
        outcome_t a = run_diff(seed, 0.10, NULL, 0);
        missed += !a.planted_sig;
        extra += a.regressions + a.improvements - a.planted_sig;
        outcome_t b = run_diff(seed + 5000, 0, NULL, 0);
        null_findings += b.regressions + b.improvements;
    }
    printf("200 seeds: planted missed %d, extra findings with plant %d, null findings %d\n",
           missed, extra, null_findings);
    CHECK(missed == 0);
    CHECK(extra <= 6);
    CHECK(null_findings <= 10); /* 0.05 per diff; expected about q = 0.01 */
}

/* A smaller planted change (+3%) is still found with 60 replicates; testing inclusive cost
 * instead flags the path above it too (why self cost is the default). */
static void test_small_plant_and_inclusive(void) {
    int found = 0;
    for (uint64_t seed = 1; seed <= 20; seed++)
        found += run_diff(seed, 0.03, NULL, 0).planted_sig;
    printf("+3%% planted: found in %d of 20 seeds\n", found);
    CHECK(found >= 18);
    agg_diff_opts_t o;
    agg_diff_opts_default(&o);
    o.test_inclusive = 1;
    outcome_t x = run_diff(3, 0.10, &o, 0);
    CHECK(x.regressions >= 2); /* planted_fn and main (and fn_01) */
}

static void test_diff_json(void) {
    workload_t w;
    workload_make(&w, 5);
    agg_profile_t *b = side_make(&w, 11, 30, 0), *t = side_make(&w, 12, 3, 0.10);
    agg_diff_t d;
    CHECK_EQ(agg_diff_compute(b, t, NULL, &d), 0);
    CHECK(d.warnings == AGG_DIFF_WARN_TEST_REPLICATES);
    json_t *j = agg_diff_json(&d, 5);
    CHECK(j);
    CHECK(json_array_size(json_object_get(j, "entries")) == 5);
    CHECK(json_integer_value(json_object_get(j, "base_replicates")) == 30);
    CHECK(json_integer_value(json_object_get(j, "test_replicates")) == 3);
    CHECK(json_array_size(json_object_get(j, "warnings")) == 1);
    CHECK(strstr(json_string_value(json_array_get(json_object_get(j, "warnings"), 0)),
                 "test has only 3 replicates") != NULL);
    json_t *e0 = NULL, *ents = json_object_get(j, "entries");
    for (size_t i = 0; i < json_array_size(ents); i++)
        if (strcmp(json_string_value(json_object_get(json_array_get(ents, i), "name")),
                   "planted_fn") == 0)
            e0 = json_array_get(ents, i);
    CHECK(e0 != NULL); /* within the first 5 by |change| */
    const char *keys[] = {"name", "module", "class", "base_total", "test_total", "base_self",
                          "test_self", "delta_total", "delta_self", "overweight",
                          "responsibility", "p", "q", "base_samples", "test_samples",
                          "interesting"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++)
        CHECKF(json_object_get(e0, keys[i]) != NULL, "missing %s", keys[i]);
    CHECK(json_integer_value(json_object_get(e0, "base_samples")) == 0);
    CHECK(json_integer_value(json_object_get(e0, "test_samples")) > 0);
    CHECK(json_real_value(json_object_get(j, "common_ratio")) > 0.5);
    CHECK(json_is_null(json_object_get(e0, "overweight"))); /* new function: base 0 */
    json_decref(j);
    agg_diff_free(&d);
    agg_profile_free(b);
    agg_profile_free(t);
}

/* The CI gate and the text report on a planted regression (+10 % of the total) and a null. */
static void test_gate_and_print(void) {
    workload_t w;
    workload_make(&w, 9);
    agg_profile_t *b = side_make(&w, 21, 60, 0), *t = side_make(&w, 22, 60, 0.10);
    agg_diff_t d;
    CHECK_EQ(agg_diff_compute(b, t, NULL, &d), 0);
    char why[256];
    CHECK_EQ(agg_diff_gate(&d, 5.0, why, sizeof why), 1);
    CHECKF(strstr(why, "planted_fn regressed by ") != NULL, "%s", why);
    CHECK_EQ(agg_diff_gate(&d, 20.0, why, sizeof why), 0); /* +10 % < 20 % */
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    agg_diff_print(f, &d, 3);
    fclose(f);
    printf("%s", buf);
    CHECK(strstr(buf, "samples: base ") && strstr(buf, "in 60 replicates"));
    CHECK(strstr(buf, "1 regressions, 0 improvements"));
    CHECKF(strstr(buf, "\nregression ") && strstr(buf, "new") && strstr(buf, "planted_fn\n"), "%s",
           buf);
    free(buf);
    agg_diff_free(&d);
    agg_profile_free(t);
    t = side_make(&w, 23, 60, 0);
    CHECK_EQ(agg_diff_compute(b, t, NULL, &d), 0);
    CHECK_EQ(agg_diff_gate(&d, 1.0, why, sizeof why), 0);
    agg_diff_free(&d);
    agg_profile_free(b);
    agg_profile_free(t);
}


/* ---- few samples, process x bucket replicates (issue 30) ---- */

/* One side of a small service: 2 processes x 8 buckets, `per_rep` samples per replicate at
 * load 1 over functions f0..f(n-1) under main with the given weights (lognormal load per
 * replicate, sigma 0.2, and mix per (replicate, function), sigma 0.1). */
static agg_profile_t *small_side(rng_t *r, const char *const *names, const double *w, int n,
                                 const int *parent, double per_rep) {
    agg_profile_t *p = agg_profile_new(CM_EV_CPU);
    uint32_t m = (uint32_t)agg_profile_frame(p, "main", "svc", NULL, 0), st[16];
    double tot = 0;
    for (int f = 0; f < n; f++) {
        uint32_t fr[3] = {m, 0, (uint32_t)agg_profile_frame(p, names[f], "svc", NULL, 0)};
        uint32_t d = 2;
        if (parent && parent[f] >= 0) {
            fr[1] = (uint32_t)agg_profile_frame(p, names[parent[f]], "svc", NULL, 0);
            d = 3;
        } else {
            fr[1] = fr[2];
        }
        st[f] = (uint32_t)agg_profile_stack(p, fr, d);
        tot += w[f];
    }
    char key[32];
    for (int pr = 0; pr < 2; pr++)
        for (int b = 0; b < 8; b++) {
            snprintf(key, sizeof key, "p%d-b%d", pr, b);
            uint32_t rep = (uint32_t)agg_profile_replicate(p, key, 5.0);
            double load = rlognorm(r, 0.2);
            for (int f = 0; f < n; f++) {
                if (!(w[f] > 0))
                    continue;
                uint64_t c = rpoisson(r, per_rep * load * w[f] / tot * rlognorm(r, 0.1));
                if (c)
                    CHECK_EQ(agg_profile_add(p, st[f], c * PERIOD_NS, c * CM_COUNT_ONE, rep, 0), 0);
            }
        }
    return p;
}

/* The case: ~1,400 samples per side in 2 processes x 8 buckets, a new function costing
 * 2.2 % of the test (~31 samples, 0 in the base). The count test finds it in (nearly) every
 * seed with nothing else flagged; the Welch test over replicates missed it more often than not;
 * every diff states its minimum detectable effect. */
static void test_new_function_few_samples(void) {
    static const char *const names[] = {"parse", "route", "render", "compress", "hash", "log",
                                        "alloc", "io", "json", "tls", "new_fn"};
    static const double w[] = {30, 20, 15, 10, 8, 6, 4, 3, 2, 2, 0};
    int found = 0, welch = 0, other = 0;
    agg_diff_opts_t ow;
    agg_diff_opts_default(&ow);
    ow.method = AGG_DIFF_WELCH;
    for (uint64_t seed = 1; seed <= 20; seed++) {
        rng_t r = {seed * 977};
        double wt[11];
        memcpy(wt, w, sizeof wt);
        wt[10] = 100 * 0.022 / (1 - 0.022);
        agg_profile_t *b = small_side(&r, names, w, 11, NULL, 86);
        agg_profile_t *t = small_side(&r, names, wt, 11, NULL, 86 / (1 - 0.022));
        agg_diff_t d;
        CHECK_EQ(agg_diff_compute(b, t, NULL, &d), 0);
        const agg_diff_entry_t *e = entry(&d, "new_fn");
        found += e->cls == AGG_DIFF_REGRESSION;
        other += (int)(d.n_regressions + d.n_improvements) - (e->cls == AGG_DIFF_REGRESSION);
        for (size_t i = 0; i < d.n; i++)
            if (d.entries[i].cls != AGG_DIFF_NOISE && d.entries[i].cls != AGG_DIFF_UNTESTED &&
                strcmp(d.entries[i].name, "new_fn"))
                printf("  seed %llu: %s %s %llu -> %llu samples, p %.3g q %.3g\n",
                       (unsigned long long)seed, agg_diff_class_name(d.entries[i].cls),
                       d.entries[i].name, (unsigned long long)d.entries[i].base_samples,
                       (unsigned long long)d.entries[i].test_samples, d.entries[i].p,
                       d.entries[i].q);
        CHECKF(d.mde_new > 0.005 && d.mde_new < 0.025, "mde %g", d.mde_new);
        CHECK(d.mde_change[1] > 0.1 && d.mde_change[1] < 1.0);
        agg_diff_free(&d);
        CHECK_EQ(agg_diff_compute(b, t, &ow, &d), 0);
        welch += entry(&d, "new_fn")->cls == AGG_DIFF_REGRESSION;
        agg_diff_free(&d);
        agg_profile_free(b);
        agg_profile_free(t);
    }
    printf("new function at 2.2%%, ~1,400 samples per side: count test %d/20, Welch %d/20, "
           "other findings %d\n", found, welch, other);
    CHECK(found >= 18);
    CHECK(other <= 1);
}

/* Issue 35 item 4: v2 moves CPU from heavy_work to light_work (75/25 -> 60/40 of their
 * part), both calling one `spin`: no function's self cost changes. The default diff tests the
 * callers' inclusive cost too and finds light_work (a regression; heavy_work at most an
 * improvement), flags nothing else, and its hint says why; testing inclusive cost throughout
 * does the same. Ten seeds. */
static int flagged(const agg_diff_entry_t *e) {
    return e->cls == AGG_DIFF_REGRESSION || e->cls == AGG_DIFF_IMPROVEMENT;
}

/* The shared-helper service: spin under heavy_work (60) and under light_work (20), five
 * functions under main. Base and test (weights wt) sides of seed, diffed: *d. */
static void helper_diff(uint64_t seed, const double *wt, agg_profile_t **b, agg_profile_t **t,
                        agg_diff_t *d) {
    static const char *const names[] = {"spin", "spin", "parse", "log", "hash", "io", "misc",
                                        "heavy_work", "light_work"};
    static const int parent[] = {7, 8, -1, -1, -1, -1, -1, -1, -1};
    static const double wb[] = {60, 20, 6, 5, 4, 3, 2, 0, 0};
    rng_t r = {seed};
    *b = small_side(&r, names, wb, 9, parent, 400);
    *t = small_side(&r, names, wt, 9, parent, 400);
    CHECK_EQ(agg_diff_compute(*b, *t, NULL, d), 0);
}

static void test_shared_helper(void) {
    static const double wt[] = {48, 32, 6, 5, 4, 3, 2, 0, 0};
    for (uint64_t seed = 4242; seed < 4252; seed++) {
        agg_profile_t *b, *t;
        agg_diff_t d;
        helper_diff(seed, wt, &b, &t, &d);
        /* the default diff: light_work (the caller that gained) a regression of its inclusive
         * cost, heavy_work (that lost) at most an improvement, nothing else */
        const agg_diff_entry_t *lw = entry(&d, "light_work");
        CHECKF(lw->cls == AGG_DIFF_REGRESSION && lw->by_inclusive, "seed %llu: light_work %s q %g",
               (unsigned long long)seed, agg_diff_class_name(lw->cls), lw->q);
        CHECK_EQ(d.n_regressions, 1);
        for (size_t i = 0; i < d.n; i++)
            if (flagged(&d.entries[i]) && strcmp(d.entries[i].name, "light_work"))
                CHECKF(!strcmp(d.entries[i].name, "heavy_work") &&
                           d.entries[i].cls == AGG_DIFF_IMPROVEMENT,
                       "seed %llu: %s flagged", (unsigned long long)seed, d.entries[i].name);
        CHECKF(strstr(d.hint, "light_work +") && strstr(d.hint, "shared function"), "hint: '%s'",
               d.hint);
        if (seed == 4242) {
            char *buf = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&buf, &len);
            agg_diff_print(f, &d, 5);
            fclose(f);
            CHECKF(strstr(buf, "regression") && strstr(buf, "light_work") &&
                       strstr(buf, "\nhint: "),
                   "%s", buf);
            free(buf);
        }
        agg_diff_free(&d);
        agg_diff_opts_t o;
        agg_diff_opts_default(&o);
        o.test_inclusive = 1;
        CHECK_EQ(agg_diff_compute(b, t, &o, &d), 0);
        CHECK_EQ(entry(&d, "light_work")->cls, AGG_DIFF_REGRESSION);
        CHECK_EQ(d.n_regressions, 1);
        for (size_t i = 0; i < d.n; i++)
            if (d.entries[i].cls == AGG_DIFF_IMPROVEMENT)
                CHECKF(strcmp(d.entries[i].name, "heavy_work") == 0, "%s", d.entries[i].name);
        agg_diff_free(&d);
        agg_profile_free(b);
        agg_profile_free(t);
    }
}

/* A slower leaf raises its callers' inclusive cost: the leaf is the finding, its callers (and
 * the other caller of the shared function) are not flagged for it. (When the leaf is missed,
 * its callers may be found by their inclusive cost: not a false finding, so not checked.) */
static void test_leaf_regression_callers_quiet(void) {
    static const double wt[] = {84, 28, 6, 5, 4, 3, 2, 0, 0};
    int found = 0;
    for (uint64_t seed = 77; seed < 87; seed++) {
        agg_profile_t *b, *t;
        agg_diff_t d;
        helper_diff(seed, wt, &b, &t, &d);
        if (entry(&d, "spin")->cls != AGG_DIFF_REGRESSION) { /* power: counted below */
            agg_diff_free(&d);
            agg_profile_free(b);
            agg_profile_free(t);
            continue;
        }
        found++;
        for (size_t i = 0; i < d.n; i++)
            CHECKF(!flagged(&d.entries[i]) || !strcmp(d.entries[i].name, "spin"),
                   "seed %llu: %s flagged (%s, q %g)", (unsigned long long)seed,
                   d.entries[i].name, d.entries[i].by_inclusive ? "inclusive" : "self",
                   d.entries[i].q);
        CHECKF(!d.hint[0], "hint: '%s'", d.hint);
        agg_diff_free(&d);
        agg_profile_free(b);
        agg_profile_free(t);
    }
    printf("spin +40%% (80%% of the samples): found in %d of 10 seeds, its callers quiet\n", found);
    CHECK(found >= 8);
}

/* Adds to replicate rep of p the stack main -> a -> b -> c (names; NULL ends it early) with a
 * Poisson(mean) count. */
static void add_path(rng_t *r, agg_profile_t *p, uint32_t rep, double mean, const char *a,
                     const char *b, const char *c) {
    const char *nm[4] = {"main", a, b, c};
    uint32_t fr[4], d = 0;
    for (; d < 4 && nm[d]; d++)
        fr[d] = (uint32_t)agg_profile_frame(p, nm[d], "svc", NULL, 0);
    uint64_t n = rpoisson(r, mean);
    if (n)
        CHECK_EQ(agg_profile_add(p, (uint32_t)agg_profile_stack(p, fr, d), n * PERIOD_NS,
                                 n * CM_COUNT_ONE, rep, 0), 0);
}

/* A new function calling an existing helper (the demo's apply_discount_rules -> clock_gettime):
 * the helper's inclusive cost doubles with its new caller, spread over 128 leaves (addresses
 * of an unsymbolized object), each too small to test. The new function is the finding; the
 * helper is not flagged (it was, in test-pipeline, when only findings at a stack's leaf
 * explained a caller's change). */
static void test_new_caller_of_helper(void) {
    static const char *const names[] = {"parse", "route", "render", "compress", "hash"};
    static const double w[] = {30, 20, 25, 15, 10};
    int found = 0, made = 0;
    for (uint64_t seed = 1; seed <= 10; seed++) {
        rng_t r = {seed * 17};
        agg_profile_t *p[2] = {small_side(&r, names, w, 5, NULL, 300),
                               small_side(&r, names, w, 5, NULL, 300)};
        char leaf[8];
        for (int k = 0; k < 2; k++)
            for (uint32_t rep = 0; rep < p[k]->n_replicates; rep++) {
                for (int l = 0; l < 128; l++) {
                    snprintf(leaf, sizeof leaf, "l%d", l);
                    add_path(&r, p[k], rep, 0.125, "other", "clock", leaf);
                    if (k)
                        add_path(&r, p[k], rep, 0.125, "new_fn", "clock", leaf);
                }
                if (k)
                    add_path(&r, p[k], rep, 4, "new_fn", NULL, NULL);
            }
        agg_diff_t d;
        CHECK_EQ(agg_diff_compute(p[0], p[1], NULL, &d), 0);
        found += entry(&d, "new_fn")->cls == AGG_DIFF_REGRESSION;
        const agg_diff_entry_t *ck = entry(&d, "clock");
        CHECKF(ck->cls == AGG_DIFF_NOISE || ck->cls == AGG_DIFF_UNTESTED,
               "seed %llu: clock %s (%s, q %g)", (unsigned long long)seed,
               agg_diff_class_name(ck->cls), ck->by_inclusive ? "inclusive" : "self", ck->q);
        int leaf_found = 0; /* a leaf finding explains clock at the leaf already */
        for (size_t i = 0; i < d.n; i++)
            leaf_found |= d.entries[i].name[0] == 'l' && d.entries[i].cls != AGG_DIFF_NOISE &&
                          d.entries[i].cls != AGG_DIFF_UNTESTED;
        made += ck->q_incl <= 0.01 && !leaf_found;
        agg_diff_free(&d);
        agg_profile_free(p[0]);
        agg_profile_free(p[1]);
    }
    printf("new function calling a helper: found in %d of 10 seeds; in %d the helper's inclusive "
           "change was significant with no leaf finding; never flagged\n", found, made);
    CHECK(found >= 9);
    CHECK(made >= 5);
}

/* Issue 35 item 6: when the total barely moves, overweight and responsibility divide by
 * noise; they are left undefined ('-') and the text output says what the columns mean. */
static void test_overweight_flat_total(void) {
    agg_profile_t *b = perfview_side(50, 25, 25), *t = perfview_side(49, 25, 26); /* total 100 */
    agg_diff_t d;
    CHECK_EQ(agg_diff_compute(b, t, NULL, &d), 0);
    const agg_diff_entry_t *x = entry(&d, "x");
    CHECKF(isnan(x->overweight) && isnan(x->responsibility), "overweight %g respons. %g",
           x->overweight, x->responsibility);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    agg_diff_print(f, &d, 5);
    fclose(f);
    CHECKF(strstr(buf, "overweight: ") && strstr(buf, "respons.: its share of the whole"), "%s",
           buf);
    free(buf);
    agg_diff_free(&d);
    agg_profile_free(b);
    agg_profile_free(t);
}

/* A bursty function (its samples in one replicate: a log flush, a process's exit) is not a
 * change when the burst falls on one side: its own dispersion counts, not the common one
 * (test-pipeline saw _IO_default_xsputn 19 -> 1 samples flagged). */
static void test_bursty_function(void) {
    static const char *const names[] = {"parse", "route", "render", "compress", "hash", "flush"};
    static const double w[] = {30, 20, 25, 15, 10, 0};
    int flagged = 0;
    for (uint64_t seed = 1; seed <= 10; seed++) {
        rng_t r = {seed * 31};
        agg_profile_t *b = small_side(&r, names, w, 6, NULL, 600);
        agg_profile_t *t = small_side(&r, names, w, 6, NULL, 600);
        /* the base's burst: 25 samples of flush in one replicate; the test: 1 */
        uint32_t m = (uint32_t)agg_profile_frame(b, "main", "svc", NULL, 0);
        uint32_t fl = (uint32_t)agg_profile_frame(b, "flush", "svc", NULL, 0), fr[2] = {m, fl};
        uint32_t st = (uint32_t)agg_profile_stack(b, fr, 2);
        CHECK_EQ(agg_profile_add(b, st, 25 * PERIOD_NS, 25 * CM_COUNT_ONE, 3, 0), 0);
        m = (uint32_t)agg_profile_frame(t, "main", "svc", NULL, 0);
        fl = (uint32_t)agg_profile_frame(t, "flush", "svc", NULL, 0);
        uint32_t fr2[2] = {m, fl};
        st = (uint32_t)agg_profile_stack(t, fr2, 2);
        CHECK_EQ(agg_profile_add(t, st, PERIOD_NS, CM_COUNT_ONE, 5, 0), 0);
        agg_diff_t d;
        CHECK_EQ(agg_diff_compute(b, t, NULL, &d), 0);
        const agg_diff_entry_t *e = entry(&d, "flush");
        CHECK(e->cls != AGG_DIFF_UNTESTED);
        flagged += e->cls == AGG_DIFF_IMPROVEMENT || e->cls == AGG_DIFF_REGRESSION;
        agg_diff_free(&d);
        agg_profile_free(b);
        agg_profile_free(t);
    }
    printf("bursty function 25 -> 1 samples: flagged in %d of 10 seeds\n", flagged);
    CHECK_EQ(flagged, 0);
}

/* Review finding 1: a fleet's deploy has more than 64 processes per side. Replicates of one
 * process share its request mix (here a 20 % spread of each function's share between
 * processes, none between its buckets), so the between-process dispersion must be estimated
 * however many processes there are; taking the replicates as independent flagged most of
 * these null diffs (same build on both sides). */
static void test_many_processes(void) {
    static const char *const names[] = {"parse", "route", "render", "compress", "hash", "log"};
    static const double w[] = {30, 20, 25, 15, 6, 4};
    int flagged = 0;
    for (uint64_t seed = 1; seed <= 10; seed++) {
        rng_t r = {seed * 7919};
        agg_profile_t *p[2];
        for (int k = 0; k < 2; k++) {
            p[k] = agg_profile_new(CM_EV_CPU);
            uint32_t m = (uint32_t)agg_profile_frame(p[k], "main", "svc", NULL, 0), st[6];
            for (int f = 0; f < 6; f++) {
                uint32_t fr[2] = {m, (uint32_t)agg_profile_frame(p[k], names[f], "svc", NULL, 0)};
                st[f] = (uint32_t)agg_profile_stack(p[k], fr, 2);
            }
            char key[32];
            for (int pr = 0; pr < 90; pr++) {
                double mix[6];
                for (int f = 0; f < 6; f++)
                    mix[f] = rlognorm(&r, 0.2);
                for (int b = 0; b < 8; b++) {
                    snprintf(key, sizeof key, "p%d-b%d", pr, b);
                    uint32_t rep = (uint32_t)agg_profile_replicate(p[k], key, 5.0);
                    agg_profile_replicate_group(p[k], rep, (uint32_t)pr);
                    for (int f = 0; f < 6; f++) {
                        uint64_t c = rpoisson(&r, 2 * w[f] * mix[f]);
                        if (c)
                            CHECK_EQ(agg_profile_add(p[k], st[f], c * PERIOD_NS,
                                                     c * CM_COUNT_ONE, rep, 0), 0);
                    }
                }
            }
        }
        agg_diff_t d;
        CHECK_EQ(agg_diff_compute(p[0], p[1], NULL, &d), 0);
        for (size_t i = 0; i < d.n; i++)
            if (d.entries[i].cls == AGG_DIFF_REGRESSION || d.entries[i].cls == AGG_DIFF_IMPROVEMENT)
                printf("  seed %llu: %s %s %llu -> %llu samples, p %.3g\n",
                       (unsigned long long)seed, agg_diff_class_name(d.entries[i].cls),
                       d.entries[i].name, (unsigned long long)d.entries[i].base_samples,
                       (unsigned long long)d.entries[i].test_samples, d.entries[i].p);
        flagged += d.n_regressions + d.n_improvements > 0;
        agg_diff_free(&d);
        agg_profile_free(p[0]);
        agg_profile_free(p[1]);
    }
    printf("90 processes x 8 buckets per side, null: %d of 10 diffs with a finding\n", flagged);
    CHECK_EQ(flagged, 0);
}

/* An incident's capture, per request (serve_incidents.c's options): the base serves requests
 * of 100 units of CPU (steady_work 70, the clock_gettime it calls 30); in the test every
 * request also spins in spike_spin (1000), whose loop calls clock_gettime (1200: the callee's
 * self cost grows more than the caller's). Each side's requests are its CPU over the cost of a
 * request. With opts.common_from_work and opts.fold_callees: spike_spin a regression, nothing
 * else flagged, the hint naming the fold, in each of 5 seeds. Without the first, steady_work
 * (unchanged per request, its share of the samples 70 % -> 3 %) is an improvement: two
 * functions leave no common factor to estimate; without the second, clock_gettime is a
 * regression too. */
static void test_incident_per_request(void) {
    static const char *const names[] = {"steady_work", "clock_gettime", "spike_spin",
                                        "clock_gettime"};
    static const int parent[] = {-1, 0, -1, 2};
    static const double wb[] = {70, 30, 0, 0}, wt[] = {70, 30, 1000, 1200};
    for (uint64_t seed = 31; seed < 36; seed++) {
        rng_t r = {seed};
        agg_profile_t *b = small_side(&r, names, wb, 4, parent, 100);
        agg_profile_t *t = small_side(&r, names, wt, 4, parent, 100);
        uint64_t w, c;
        double work;
        agg_profile_totals(b, &w, &c, &work);
        b->work_total = (double)w / PERIOD_NS / 100;
        agg_profile_totals(t, &w, &c, &work);
        t->work_total = (double)w / PERIOD_NS / 2300;
        agg_diff_opts_t o;
        agg_diff_opts_default(&o);
        o.no_callers = 1;
        o.fold_callees = 1;
        o.common_from_work = 1;
        agg_diff_t d;
        CHECK_EQ(agg_diff_compute(b, t, &o, &d), 0);
        CHECKF(entry(&d, "spike_spin")->cls == AGG_DIFF_REGRESSION && d.n_regressions == 1 &&
                   d.n_improvements == 0,
               "seed %llu: spike_spin %s, %zu regressions, %zu improvements",
               (unsigned long long)seed, agg_diff_class_name(entry(&d, "spike_spin")->cls),
               d.n_regressions, d.n_improvements);
        CHECKF(strstr(d.hint, "clock_gettime folded into spike_spin"), "hint '%s'", d.hint);
        agg_diff_free(&d);
        o.common_from_work = 0;
        CHECK_EQ(agg_diff_compute(b, t, &o, &d), 0);
        CHECK_EQ(entry(&d, "steady_work")->cls, AGG_DIFF_IMPROVEMENT);
        agg_diff_free(&d);
        o.common_from_work = 1;
        o.fold_callees = 0;
        CHECK_EQ(agg_diff_compute(b, t, &o, &d), 0);
        CHECK_EQ(entry(&d, "clock_gettime")->cls, AGG_DIFF_REGRESSION);
        agg_diff_free(&d);
        agg_profile_free(b);
        agg_profile_free(t);
    }
}

static const tr_test_t tests[] = {
    {"incident_per_request", test_incident_per_request},
    {"many_processes", test_many_processes},
    {"bursty_function", test_bursty_function},
    {"new_function_few_samples", test_new_function_few_samples},
    {"shared_helper", test_shared_helper},
    {"leaf_regression_callers_quiet", test_leaf_regression_callers_quiet},
    {"new_caller_of_helper", test_new_caller_of_helper},
    {"overweight_flat_total", test_overweight_flat_total},
    {"gate_and_print", test_gate_and_print},
    {"perfview_example", test_perfview_example},
    {"diff_errors", test_diff_errors},
    {"planted_regression", test_planted_regression},
    {"null_20_seeds", test_null_20_seeds},
    {"null_naive_poisson", test_null_naive_poisson},
    {"margins_200_seeds", test_margins_200_seeds},
    {"small_plant_and_inclusive", test_small_plant_and_inclusive},
    {"diff_json", test_diff_json},
    {0},
};

TR_MAIN(tests)
