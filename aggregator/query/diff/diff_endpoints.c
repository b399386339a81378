/* Per-endpoint diff between two versions (diff_endpoints.h): calls grouped by endpoint, one
 * rank test on durations and three Welch tests on sampled costs per call, Benjamini-Hochberg
 * over all of them. Why these tests: a call's duration is measured exactly (every call), so
 * its distribution is compared as a whole, without assuming a shape (latencies are skewed, a
 * mean would follow the tail); a call's sampled cost is mostly 0 with a few sampling periods
 * (an unbiased but coarse estimate of its cost), so the mean per call, the figure shown, is
 * what is tested, its variance taken from the calls themselves.
 * Threading: pure functions of their inputs. */
#include "diff_endpoints.h"

#include "stats.h"

#include "cm/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const test_names[AGG_EPD_TESTS] = {"latency", "cpu", "wall", "alloc"};

static int cmp_call(const void *a, const void *b) {
    const agg_call_t *x = *(const agg_call_t *const *)a, *y = *(const agg_call_t *const *)b;
    int c = strcmp(x->name, y->name);
    return c ? c : x->dur_ns < y->dur_ns ? -1 : x->dur_ns > y->dur_ns;
}

/* Pointers to the calls of a side, sorted by (name, duration). NULL when out of memory. */
static const agg_call_t **sorted(const agg_call_t *c, size_t n) {
    const agg_call_t **v = malloc((n ? n : 1) * sizeof *v);
    if (!v)
        return NULL;
    for (size_t i = 0; i < n; i++)
        v[i] = &c[i];
    qsort(v, n, sizeof *v, cmp_call);
    return v;
}

/* Nearest rank: the smallest duration with at least q of the calls at or below it. */
static int64_t rank_q(const int64_t *d, size_t n, double q) {
    if (!n)
        return 0;
    size_t k = (size_t)(q * (double)n + 0.999999);
    k = k ? k - 1 : 0;
    return d[k < n ? k : n - 1];
}

static double rel(double b, double t) {
    return b > 0 ? (t - b) / b : t > 0 ? INFINITY : 0;
}

/* Fills e's figures from the calls v[0..n) of side s (one endpoint, sorted by duration); dur
 * receives their durations. */
static void side_figures(agg_epdiff_entry_t *e, int s, const agg_call_t *const *v, size_t n,
                         int64_t *dur, double mean[3], double var[3]) {
    e->calls[s] = n;
    for (size_t i = 0; i < n; i++)
        dur[i] = v[i]->dur_ns;
    e->p50_ns[s] = rank_q(dur, n, 0.50);
    e->p99_ns[s] = rank_q(dur, n, 0.99);
    for (int m = 0; m < 3; m++) {
        double sum = 0, ss = 0;
        for (size_t i = 0; i < n; i++)
            sum += v[i]->cost[m];
        mean[m] = n ? sum / (double)n : 0;
        for (size_t i = 0; i < n; i++)
            ss += (v[i]->cost[m] - mean[m]) * (v[i]->cost[m] - mean[m]);
        var[m] = n > 1 ? ss / (double)(n - 1) : 0;
        e->per_call[m][s] = mean[m];
    }
}

/* One endpoint: vb[0..nb) and vt[0..nt) its calls on each side. tmp: room for nb + nt. */
static int endpoint_tests(agg_epdiff_entry_t *e, const agg_call_t *const *vb, size_t nb,
                          const agg_call_t *const *vt, size_t nt, int64_t *tmp) {
    double mb[3], vrb[3], mt[3], vrt[3];
    e->name = strdup((nb ? vb[0] : vt[0])->name);
    if (!e->name)
        return CM_ENOMEM;
    side_figures(e, 0, vb, nb, tmp, mb, vrb);
    side_figures(e, 1, vt, nt, tmp + nb, mt, vrt);
    e->change[AGG_EPD_LATENCY] = rel((double)e->p50_ns[0], (double)e->p50_ns[1]);
    for (int m = 0; m < 3; m++)
        e->change[AGG_EPD_CPU + m] = rel(mb[m], mt[m]);
    for (int k = 0; k < AGG_EPD_TESTS; k++) {
        e->p[k] = e->q[k] = 1;
        e->cls[k] = AGG_DIFF_UNTESTED;
    }
    if (nb < AGG_EPD_MIN_CALLS || nt < AGG_EPD_MIN_CALLS)
        return 0;
    e->p[AGG_EPD_LATENCY] = agg_stats_rank_p(tmp, nb, tmp + nb, nt);
    for (int m = 0; m < 3; m++) {
        agg_welch_t w;
        if (agg_stats_welch(mb[m], vrb[m], (double)nb, mt[m], vrt[m], (double)nt, &w) == 0)
            e->p[AGG_EPD_CPU + m] = w.p;
    }
    for (int k = 0; k < AGG_EPD_TESTS; k++)
        e->cls[k] = AGG_DIFF_NOISE;
    return 0;
}

/* Benjamini-Hochberg over every test of every tested endpoint, then the classes. */
static int classify(agg_epdiff_t *d) {
    double *p = malloc((d->n * AGG_EPD_TESTS + 1) * sizeof *p);
    if (!p)
        return CM_ENOMEM;
    size_t np = 0;
    for (size_t i = 0; i < d->n; i++)
        for (int k = 0; k < AGG_EPD_TESTS; k++)
            if (d->entries[i].cls[k] != AGG_DIFF_UNTESTED)
                p[np++] = d->entries[i].p[k];
    if (np && agg_stats_bh(p, np, p)) {
        free(p);
        return CM_ENOMEM;
    }
    d->n_tested = np;
    np = 0;
    for (size_t i = 0; i < d->n; i++) {
        agg_epdiff_entry_t *e = &d->entries[i];
        for (int k = 0; k < AGG_EPD_TESTS; k++) {
            if (e->cls[k] == AGG_DIFF_UNTESTED)
                continue;
            e->q[k] = p[np++];
            if (e->q[k] <= d->q && fabs(e->change[k]) >= d->min_change)
                e->cls[k] = e->change[k] > 0 ? AGG_DIFF_REGRESSION : AGG_DIFF_IMPROVEMENT;
            e->flagged |= e->cls[k] == AGG_DIFF_REGRESSION;
        }
        d->n_flagged += (size_t)e->flagged;
    }
    free(p);
    return 0;
}

static int cmp_entry(const void *a, const void *b) {
    const agg_epdiff_entry_t *x = a, *y = b;
    if (x->flagged != y->flagged)
        return x->flagged ? -1 : 1;
    if (x->p99_ns[1] != y->p99_ns[1])
        return x->p99_ns[1] > y->p99_ns[1] ? -1 : 1;
    return strcmp(x->name, y->name);
}

int agg_epdiff_compute(const agg_call_t *base, size_t nb, const agg_call_t *test, size_t nt,
                       double q, double min_change, agg_epdiff_t *out) {
    memset(out, 0, sizeof *out);
    if (!(q > 0 && q < 1) || !(min_change >= 0))
        return CM_EINVAL;
    out->q = q;
    out->min_change = min_change;
    const agg_call_t **vb = sorted(base, nb), **vt = sorted(test, nt);
    int64_t *tmp = malloc((nb + nt + 1) * sizeof *tmp);
    out->entries = calloc(nb + nt + 1, sizeof *out->entries);
    int rc = vb && vt && tmp && out->entries ? 0 : CM_ENOMEM;
    for (size_t i = 0, j = 0; !rc && (i < nb || j < nt);) {
        int c = i >= nb ? 1 : j >= nt ? -1 : strcmp(vb[i]->name, vt[j]->name);
        size_t i2 = i, j2 = j;
        const char *name = c <= 0 ? vb[i]->name : vt[j]->name;
        while (c <= 0 && i2 < nb && !strcmp(vb[i2]->name, name))
            i2++;
        while (c >= 0 && j2 < nt && !strcmp(vt[j2]->name, name))
            j2++;
        rc = endpoint_tests(&out->entries[out->n++], vb + i, i2 - i, vt + j, j2 - j, tmp);
        i = i2;
        j = j2;
    }
    if (!rc)
        rc = classify(out);
    free(vb);
    free(vt);
    free(tmp);
    if (rc) {
        agg_epdiff_free(out);
        return rc;
    }
    qsort(out->entries, out->n, sizeof *out->entries, cmp_entry);
    return 0;
}

void agg_epdiff_free(agg_epdiff_t *d) {
    for (size_t i = 0; d->entries && i < d->n; i++)
        free(d->entries[i].name);
    free(d->entries);
    memset(d, 0, sizeof *d);
}

static json_t *pair_i(int64_t b, int64_t t) {
    return json_pack("{s:I, s:I}", "base", (json_int_t)b, "test", (json_int_t)t);
}

static json_t *pair_f(double b, double t) { return json_pack("{s:f, s:f}", "base", b, "test", t); }

json_t *agg_epdiff_json(const agg_epdiff_t *d) {
    json_t *arr = json_array();
    for (size_t i = 0; i < d->n; i++) {
        const agg_epdiff_entry_t *e = &d->entries[i];
        json_t *tests = json_object();
        for (int k = 0; k < AGG_EPD_TESTS; k++)
            json_object_set_new(tests, test_names[k],
                                json_pack("{s:o, s:f, s:f, s:s}", "change",
                                          isfinite(e->change[k]) ? json_real(e->change[k])
                                                                 : json_null(),
                                          "p", e->p[k], "q", e->q[k], "class",
                                          agg_diff_class_name(e->cls[k])));
        json_array_append_new(
            arr, json_pack("{s:s, s:b, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "name", e->name,
                           "flagged", e->flagged, "calls",
                           pair_i((int64_t)e->calls[0], (int64_t)e->calls[1]), "p50_ns",
                           pair_i(e->p50_ns[0], e->p50_ns[1]), "p99_ns",
                           pair_i(e->p99_ns[0], e->p99_ns[1]), "cpu_per_call_ns",
                           pair_f(e->per_call[0][0], e->per_call[0][1]), "wall_per_call_ns",
                           pair_f(e->per_call[1][0], e->per_call[1][1]), "alloc_per_call_bytes",
                           pair_f(e->per_call[2][0], e->per_call[2][1]), "tests", tests));
    }
    return json_pack("{s:f, s:f, s:I, s:I, s:s, s:o}", "q", d->q, "min_change", d->min_change,
                     "tested", (json_int_t)d->n_tested, "flagged", (json_int_t)d->n_flagged,
                     "test_used",
                     "latency: Mann-Whitney U on the calls' durations; cpu/wall/alloc per call: "
                     "Welch's t-test on the calls' sampled costs; Benjamini-Hochberg FDR over "
                     "all; flagged: q <= q and a change of at least min_change",
                     "endpoints", arr);
}

static void print_change(FILE *f, const agg_epdiff_entry_t *e, int k) {
    const char *mark = e->cls[k] == AGG_DIFF_REGRESSION    ? " REG"
                       : e->cls[k] == AGG_DIFF_IMPROVEMENT ? " IMP"
                       : e->cls[k] == AGG_DIFF_UNTESTED    ? " ?"
                                                           : "";
    if (isfinite(e->change[k]))
        fprintf(f, " %+7.1f%%%-4s", 100 * e->change[k], mark);
    else
        fprintf(f, " %8s%-4s", "new", mark);
}

void agg_epdiff_print(FILE *f, const agg_epdiff_t *d) {
    fprintf(f, "%-24s %13s %21s %21s %12s %12s %12s\n", "endpoint", "calls b/t", "p50 b->t",
            "p99 b->t", "latency", "cpu/call", "wall/call");
    for (size_t i = 0; i < d->n; i++) {
        const agg_epdiff_entry_t *e = &d->entries[i];
        fprintf(f, "%-24.24s %6llu/%-6llu %9.3fms->%7.3fms %9.3fms->%7.3fms", e->name,
                (unsigned long long)e->calls[0], (unsigned long long)e->calls[1],
                (double)e->p50_ns[0] / 1e6, (double)e->p50_ns[1] / 1e6,
                (double)e->p99_ns[0] / 1e6, (double)e->p99_ns[1] / 1e6);
        for (int k = AGG_EPD_LATENCY; k <= AGG_EPD_WALL; k++)
            print_change(f, e, k);
        fputc('\n', f);
    }
    fprintf(f, "%zu tests, %zu endpoint(s) flagged (q <= %g, change >= %g %%)\n", d->n_tested,
            d->n_flagged, d->q, 100 * d->min_change);
}
