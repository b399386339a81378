/* Query-layer latency: a merged profile (top + tree) and a diff over one hour of a service
 * with 10,000 distinct stacks from 100 processes, aggregated in 360 ten-second buckets (the
 * replicates). Prints p50/p99 of wall-clock latency over repeated runs, and of the CPU time
 * the call used (what it costs on an idle core when other work shares the machine).
 * Not a ctest: run it on its own.
 *
 *   bench-query [runs] [--seal]    (default 30 runs; --seal: per-stack sums cached first)
 *
 * Workload: 100 processes at 100 Hz for 10 s = 100,000 samples per bucket, spread over 10,000
 * stacks with Zipf(1.0) popularity (depth 10-40 over 3,000 functions, a layered call graph)
 * and a per-bucket load factor of +-20%; a row per (bucket, stack) with samples. */
#include "query.h"

#include "cm/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define N_STACKS 10000
#define N_FUNCS 3000
#define N_BUCKETS 360
#define PROCS 100
#define PERIOD_NS 10000000ull

static uint64_t rng = 88172645463325252ull;
static uint64_t xr(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static double ur(void) { return ((xr() >> 11) + 0.5) / 9007199254740992.0; }
static double nr(void) { return sqrt(-2 * log(ur())) * cos(6.283185307179586 * ur()); }
static uint64_t poisson(double l) {
    if (l < 30) {
        double e = exp(-l), p = 1;
        uint64_t k = 0;
        do {
            k++;
            p *= ur();
        } while (p > e);
        return k - 1;
    }
    double x = floor(l + sqrt(l) * nr() + 0.5);
    return x < 0 ? 0 : (uint64_t)x;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static double cpu_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static agg_profile_t *build(uint64_t seed, double planted) {
    rng = seed * 2654435761u + 1;
    agg_profile_t *p = agg_profile_new(CM_EV_CPU);
    uint32_t fid[N_FUNCS + 1];
    char name[64];
    for (int f = 0; f < N_FUNCS; f++) {
        snprintf(name, sizeof name, "ns%d::Class%d::method_%d", f % 17, f % 101, f);
        fid[f] = (uint32_t)agg_profile_frame(p, name, f < 2500 ? "svc" : "libc.so.6", "b1d",
                                             0x400000 + 64 * (uint64_t)f);
    }
    fid[N_FUNCS] = (uint32_t)agg_profile_frame(p, "planted_fn", "svc", "b1d", 0x900000);
    rng = 4242; /* the stacks and their rates are the same for every seed */
    static uint32_t sid[N_STACKS + 1];
    static double rate[N_STACKS + 1];
    double zsum = 0;
    for (int s = 0; s < N_STACKS; s++) {
        uint32_t fr[40], d = 10 + (uint32_t)(xr() % 31);
        fr[0] = fid[0];
        for (uint32_t k = 1; k < d; k++)
            fr[k] = fid[1 + (k * 70 + xr() % 140) % (N_FUNCS - 1)];
        int64_t id;
        while ((id = agg_profile_stack(p, fr, d)) >= 0 && (uint32_t)id != (uint32_t)s)
            fr[d - 1] = fid[1 + xr() % (N_FUNCS - 1)]; /* duplicate path: vary the leaf */
        sid[s] = (uint32_t)id;
        rate[s] = 1.0 / (s + 1);
        zsum += rate[s];
    }
    uint32_t pl[] = {fid[0], fid[1], fid[N_FUNCS]};
    sid[N_STACKS] = (uint32_t)agg_profile_stack(p, pl, 3);
    double per_bucket = PROCS * 100.0 * 10.0;
    for (int s = 0; s < N_STACKS; s++)
        rate[s] *= per_bucket / zsum;
    rate[N_STACKS] = planted * per_bucket;
    rng = seed * 7 + 3;
    for (int b = 0; b < N_BUCKETS; b++) {
        snprintf(name, sizeof name, "bucket-%d", b);
        uint32_t rep = (uint32_t)agg_profile_replicate(p, name, PROCS * 10.0);
        double load = exp(0.2 * nr() - 0.02);
        for (int s = 0; s <= N_STACKS; s++) {
            if (rate[s] <= 0)
                continue;
            uint64_t c = poisson(rate[s] * load);
            if (c)
                agg_profile_add(p, sid[s], c * PERIOD_NS, c * CM_COUNT_ONE, rep, 0);
        }
    }
    return p;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_d);
    int i99 = (int)ceil(0.99 * n) - 1;
    printf("%-34s p50 %8.1f ms   p99 %8.1f ms   (n=%d, min %.1f, max %.1f)\n", what, t[n / 2],
           t[i99 < 0 ? 0 : i99], n, t[0], t[n - 1]);
}

int main(int argc, char **argv) {
    int runs = argc > 1 ? atoi(argv[1]) : 30;
    if (runs < 1)
        runs = 1;
    double t0 = now_ms();
    agg_profile_t *base = build(1, 0), *test = build(2, 0.10);
    double t1 = now_ms();
    int sealed = argc > 2 && strcmp(argv[2], "--seal") == 0;
    if (sealed && (agg_profile_seal(base) || agg_profile_seal(test)))
        return 1;
    uint64_t w, c;
    agg_profile_totals(base, &w, &c, NULL);
    printf("profile: %u stacks, %u functions, %u replicates, %zu rows, %.1f M samples per side; "
           "built both in %.0f ms\n",
           base->n_stacks, base->n_frames, base->n_replicates, base->n_rows,
           (double)c / CM_COUNT_ONE / 1e6, t1 - t0);
    double *tm = calloc((size_t)runs, sizeof *tm), *tt = calloc((size_t)runs, sizeof *tt);
    double *tmt = calloc((size_t)runs, sizeof *tmt), *td = calloc((size_t)runs, sizeof *td);
    double *tp = calloc((size_t)runs, sizeof *tp);
    double *cm = calloc((size_t)runs, sizeof *cm), *cd = calloc((size_t)runs, sizeof *cd);
    double *cw = calloc((size_t)runs, sizeof *cw); /* the Welch test: the baseline */
    agg_diff_opts_t welch;
    agg_diff_opts_default(&welch);
    welch.method = AGG_DIFF_WELCH;
    size_t nodes = 0, regressions = 0;
    const char *first = "";
    for (int i = 0; i < runs; i++) {
        double ca = cpu_ms(), a = now_ms();
        agg_top_t top;
        agg_tree_t tree;
        if (agg_top_compute(base, AGG_SORT_SELF, 100, &top))
            return 1;
        double b = now_ms();
        if (agg_tree_compute(base, 0.001, 5000, &tree))
            return 1;
        double e = now_ms();
        tm[i] = b - a;
        tt[i] = e - b;
        tmt[i] = e - a;
        cm[i] = cpu_ms() - ca;
        nodes = tree.n;
        agg_top_free(&top);
        agg_tree_free(&tree);
        agg_diff_t d;
        ca = cpu_ms();
        a = now_ms();
        if (agg_diff_compute(base, test, NULL, &d))
            return 1;
        td[i] = now_ms() - a;
        cd[i] = cpu_ms() - ca;
        regressions = d.n_regressions;
        first = d.n ? (strcmp(d.entries[0].name, "planted_fn") == 0 ? "planted_fn" : "other") : "";
        agg_diff_free(&d);
        ca = cpu_ms();
        if (agg_diff_compute(base, test, &welch, &d))
            return 1;
        cw[i] = cpu_ms() - ca;
        agg_diff_free(&d);
        if (i < 5 || i % 5 == 0) {
            uint8_t *buf;
            size_t len;
            a = now_ms();
            if (agg_export_pprof(base, &buf, &len))
                return 1;
            tp[i] = now_ms() - a;
            free(buf);
        }
    }
    report("top (self, 100 functions)", tm, runs);
    report("tree (min share 0.1%, 5000 nodes)", tt, runs);
    report("merged profile (top + tree)", tmt, runs);
    report("diff (count test + BH, 1 h vs 1 h)", td, runs);
    int np = 0;
    for (int i = 0; i < runs; i++)
        if (tp[i] > 0)
            tp[np++] = tp[i];
    report("pprof export (gzipped)", tp, np);
    report("merged profile, CPU time", cm, runs);
    report("diff, CPU time", cd, runs);
    report("diff with the Welch test (before issue 30), CPU time", cw, runs);
    printf("per-stack sums cached (agg_profile_seal): %s\n", sealed ? "yes" : "no");
    printf("tree nodes %zu; diff: %zu regressions, first entry %s\n", nodes, regressions, first);
    agg_profile_free(base);
    agg_profile_free(test);
    free(tm);
    free(tt);
    free(tmt);
    free(cw);
    free(td);
    free(tp);
    free(cm);
    free(cd);
    return 0;
}
