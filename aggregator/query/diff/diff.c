/* The diff: per-function values per unit of work, PerfView's overweight and responsibility,
 * and significance from replicates (Welch's t-test + Benjamini-Hochberg).
 *
 * Statistics (also in README.md):
 *  - Each replicate r (a time bucket, or one process-interval) gives, per function f, the rate
 *    x_r(f) = value_r(f) / work_r (ns of CPU per second of process wall time, or per request).
 *    Under "no change" the base and test replicates' rates have the same mean. The spread of
 *    x_r between replicates contains everything that varies between them: sampling noise
 *    (Poisson) AND load, request mix, co-tenants (over-dispersion). A per-sample Poisson test
 *    sees only the first and calls a busier hour a regression (AGG_DIFF_POISSON shows it).
 *  - Welch's t-test compares the mean rates without assuming equal variances:
 *    t = (mean_t - mean_b) / sqrt(var_b/n_b + var_t/n_t), df by Welch-Satterthwaite.
 *    Assumptions: replicates are independent (adjacent buckets of one slowly drifting load are
 *    not quite), and the mean over n replicates is close to normal (CLT; n >= 5 per side
 *    recommended, warned otherwise).
 *  - Many functions are tested at once: Benjamini-Hochberg q-values; significant means
 *    q <= opts.q (default 0.01). Under the global null BH also bounds the chance of any false
 *    finding by q, so 20 null diffs give 0.2 false findings expected.
 *  - A change must also matter: |delta| >= min_rel_change * base (1%) and
 *    |delta| >= min_abs_share * base total (0.1% of the profile), so a real but negligible
 *    shift in a tiny function is not reported as a regression.
 *  - By default the self cost is tested: every ancestor's inclusive cost moves with any change
 *    below it, so testing inclusive cost would flag the whole path from main to the changed
 *    function. Inclusive values, overweight and responsibility are still reported to navigate
 *    (PerfView), and opts.test_inclusive tests inclusive cost instead.
 * Threading: reads the profiles; no global state besides qsort's thread-local context. */
#include "diff.h"
#include "diff_int.h"
#include "stats.h"

#include "cm/array.h"
#include "cm/error.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void agg_diff_opts_default(agg_diff_opts_t *o) {
    *o = (agg_diff_opts_t){.q = 0.01,
                           .min_rel_change = 0.01,
                           .min_abs_share = 0.001,
                           .min_responsibility = 0.02,
                           .min_samples = 10,
                           .warn_samples = 1000,
                           .warn_replicates = 5,
                           .test_inclusive = 0,
                           .bh_large_weight = AGG_DIFF_BH_LARGE_WEIGHT,
                           .method = AGG_DIFF_COUNT,
                           .work_unit = "process-second"};
}

const char *agg_diff_class_name(agg_diff_class_t c) {
    switch (c) {
    case AGG_DIFF_NOISE:
        return "noise";
    case AGG_DIFF_REGRESSION:
        return "regression";
    case AGG_DIFF_IMPROVEMENT:
        return "improvement";
    case AGG_DIFF_UNTESTED:
        return "untested";
    }
    return "unknown";
}

static void side_free(side_t *s) {
    free(s->sum_incl);
    free(s->sum_self);
    free(s->cnt_incl);
    free(s->cnt_self);
    free(s->sx);
    free(s->sxx);
    free(s->pair_off);
    free(s->pair_f);
    free(s->pair_v);
    free(s->pair_c);
    free(s->rep_c);
    free(s->rep_g);
    free(s->present);
    free(s->scale);
}

static int pair_push(side_t *s, uint32_t f, double v, double c) {
    if (s->n_pairs == s->cap_pairs) {
        size_t ncap = s->cap_pairs ? 2 * s->cap_pairs : 4096;
        if (CM_RESIZE(&s->pair_f, ncap) || CM_RESIZE(&s->pair_v, ncap) ||
            CM_RESIZE(&s->pair_c, ncap))
            return CM_ENOMEM;
        s->cap_pairs = ncap;
    }
    s->pair_f[s->n_pairs] = f;
    s->pair_c[s->n_pairs] = c;
    s->pair_v[s->n_pairs++] = v;
    return 0;
}

/* Per-replicate self cost of each function from the leaf rows of p (leaf-replicate form):
 * the same pairs side_compute's row pass would push. Returns 0 or CM_ENOMEM. */
static int leaf_pass(const agg_profile_t *p, const uint32_t *fmap, uint32_t nk, side_t *s) {
    int rc = CM_ENOMEM;
    size_t *rstart = calloc((size_t)p->n_replicates + 2, sizeof *rstart);
    size_t *order = malloc((p->n_leaf_rows + 1) * sizeof *order);
    double *v = calloc((size_t)nk + 1, sizeof *v);
    double *vc = calloc((size_t)nk + 1, sizeof *vc);
    uint32_t *touched = malloc(((size_t)nk + 1) * sizeof *touched);
    uint32_t *stamp = calloc((size_t)nk + 1, sizeof *stamp);
    if (!rstart || !order || !v || !vc || !touched || !stamp)
        goto out;
    for (size_t i = 0; i < p->n_leaf_rows; i++) /* counting sort by replicate */
        rstart[p->leaf_rows[i].replicate + 2]++;
    for (uint32_t r = 0; r < p->n_replicates; r++)
        rstart[r + 2] += rstart[r + 1];
    for (size_t i = 0; i < p->n_leaf_rows; i++)
        order[rstart[p->leaf_rows[i].replicate + 1]++] = i;
    for (uint32_t r = 0; r < p->n_replicates; r++) { /* rstart[r] is now replicate r's start */
        double work = p->replicates[r].work;
        uint32_t nt = 0;
        s->work += work;
        if (!(work > 0))
            continue;
        double rc_ = 0;
        for (size_t k = rstart[r]; k < rstart[r + 1]; k++) {
            const agg_leaf_row_t *row = &p->leaf_rows[order[k]];
            uint32_t f = fmap[row->frame];
            if (stamp[f] != r + 1) {
                stamp[f] = r + 1;
                touched[nt++] = f;
            }
            v[f] += (double)row->weight;
            vc[f] += (double)row->count / CM_COUNT_ONE;
            rc_ += (double)row->count / CM_COUNT_ONE;
        }
        for (uint32_t t = 0; t < nt; t++) {
            uint32_t f = touched[t];
            if (v[f] != 0) {
                if (pair_push(s, f, v[f] / work, vc[f]))
                    goto out;
                s->present[f]++;
            }
            v[f] = vc[f] = 0;
        }
        s->rep_c[s->n_reps] = rc_;
        s->rep_g[s->n_reps] = p->replicates[r].group;
        s->scale[s->n_reps] = 1.0;
        s->pair_off[++s->n_reps] = (uint32_t)s->n_pairs;
    }
    rc = 0;
out:
    free(rstart);
    free(order);
    free(v);
    free(vc);
    free(touched);
    free(stamp);
    return rc;
}

/* Per stack of p: its distinct functions (recursion counted once) uniq[uoff[st]..uoff[st+1])
 * and its leaf function leafk[st] (AGG_NONE for an empty stack). stamp: nk zeroed entries. */
static void stack_functions(const agg_profile_t *p, const uint32_t *fmap, uint32_t *stamp,
                            uint32_t *uoff, uint32_t *uniq, uint32_t *leafk) {
    uint32_t nu = 0;
    for (uint32_t st = 0; st < p->n_stacks; st++) {
        uoff[st] = nu;
        leafk[st] = p->stack_off[st] == p->stack_off[st + 1]
                        ? AGG_NONE
                        : fmap[p->stack_frames[p->stack_off[st + 1] - 1]];
        for (uint32_t k = p->stack_off[st]; k < p->stack_off[st + 1]; k++) {
            uint32_t f = fmap[p->stack_frames[k]];
            if (stamp[f] != st + 1) {
                stamp[f] = st + 1;
                uniq[nu++] = f;
            }
        }
    }
    uoff[p->n_stacks] = nu;
}

/* The side's totals from the per-stack sums sw (weight) and sc (count): a stack's value is
 * added once to each of its functions (inclusive) and to its leaf (self). */
static void side_sums(const agg_profile_t *p, const uint32_t *uoff, const uint32_t *uniq,
                      const uint32_t *leafk, const uint64_t *sw, const uint64_t *sc, side_t *s) {
    for (uint32_t st = 0; st < p->n_stacks; st++) {
        s->total_w += sw[st];
        s->total_c += sc[st];
        for (uint32_t u = uoff[st]; u < uoff[st + 1]; u++) {
            s->sum_incl[uniq[u]] += (double)sw[st];
            s->cnt_incl[uniq[u]] += sc[st];
        }
        if (leafk[st] == AGG_NONE)
            continue;
        s->sum_self[leafk[st]] += (double)sw[st];
        s->cnt_self[leafk[st]] += sc[st];
    }
    if (p->work_total > 0) /* the work of exactly the rows' range, not the replicates' sum */
        s->work = p->work_total;
}

/* Fills s for profile p whose frame f is function fmap[f] of nk. */
static int side_compute(const agg_profile_t *p, const uint32_t *fmap, uint32_t nk, int incl_test,
                        side_t *s) {
    int rc = CM_ENOMEM;
    uint32_t *uoff = malloc(((size_t)p->n_stacks + 1) * sizeof *uoff);
    uint32_t *uniq = malloc(((size_t)p->stack_off[p->n_stacks] + 1) * sizeof *uniq);
    uint32_t *stamp = calloc((size_t)nk + 1, sizeof *stamp);
    size_t *rstart = calloc((size_t)p->n_replicates + 1, sizeof *rstart);
    size_t *order = NULL; /* rows by replicate; NULL when they already are in that order */
    uint32_t *leafk = malloc(((size_t)p->n_stacks + 1) * sizeof *leafk); /* leaf function */
    uint64_t *sw = calloc((size_t)p->n_stacks + 1, sizeof *sw); /* per stack sums */
    uint64_t *sc = calloc((size_t)p->n_stacks + 1, sizeof *sc);
    double *v = calloc((size_t)nk + 1, sizeof *v);
    double *vc = calloc((size_t)nk + 1, sizeof *vc);
    uint32_t *touched = malloc(((size_t)nk + 1) * sizeof *touched);
    s->rep_c = calloc((size_t)p->n_replicates + 1, sizeof(double));
    s->rep_g = calloc((size_t)p->n_replicates + 1, sizeof(uint32_t));
    s->sum_incl = calloc((size_t)nk + 1, sizeof(double));
    s->sum_self = calloc((size_t)nk + 1, sizeof(double));
    s->cnt_incl = calloc((size_t)nk + 1, sizeof(uint64_t));
    s->cnt_self = calloc((size_t)nk + 1, sizeof(uint64_t));
    s->sx = calloc((size_t)nk + 1, sizeof(double));
    s->sxx = calloc((size_t)nk + 1, sizeof(double));
    s->present = calloc((size_t)nk + 1, sizeof(uint32_t));
    s->pair_off = calloc((size_t)p->n_replicates + 2, sizeof(uint32_t));
    s->scale = malloc(((size_t)p->n_replicates + 1) * sizeof(double));
    if (!s->present || !s->pair_off || !s->scale || !vc || !s->rep_c || !s->rep_g ||
        !uoff || !uniq || !stamp || !rstart || !leafk || !sw || !sc || !v || !touched || !s->sum_incl ||
        !s->sum_self || !s->cnt_incl || !s->cnt_self || !s->sx || !s->sxx)
        goto out;
    stack_functions(p, fmap, stamp, uoff, uniq, leafk);
    if (p->leaf_replicates) {
        /* leaf-replicate form: totals per stack from the rows, replicates from the leaf rows
         * (self cost only: inclusive cost needs each replicate's stacks) */
        if (incl_test) {
            rc = CM_EINVAL;
            goto out;
        }
        for (size_t i = 0; i < p->n_rows; i++) {
            sw[p->rows[i].stack] += p->rows[i].weight;
            sc[p->rows[i].stack] += p->rows[i].count;
        }
        if (leaf_pass(p, fmap, nk, s))
            goto out;
        goto sums;
    }
    /* rows grouped by replicate (counting sort, unless a store already returned them so) */
    int sorted = 1;
    for (size_t i = 0; i < p->n_rows; i++) {
        rstart[p->rows[i].replicate + 1]++;
        sorted &= i == 0 || p->rows[i].replicate >= p->rows[i - 1].replicate;
    }
    for (uint32_t r = 0; r < p->n_replicates; r++)
        rstart[r + 1] += rstart[r];
    if (!sorted) {
        if (!(order = malloc((p->n_rows + 1) * sizeof *order)))
            goto out;
        uint32_t *fill = calloc((size_t)p->n_replicates + 1, sizeof *fill);
        if (!fill)
            goto out;
        for (size_t i = 0; i < p->n_rows; i++) {
            uint32_t r = p->rows[i].replicate;
            order[rstart[r] + fill[r]++] = i;
        }
        free(fill);
    }
    memset(stamp, 0, ((size_t)nk + 1) * sizeof *stamp); /* now: r + 1 = touched in r */
    /* per replicate: the tested cost of each function (one update per row for self cost,
     * one per distinct function of the stack for inclusive cost) */
    for (uint32_t r = 0; r < p->n_replicates; r++) {
        double work = p->replicates[r].work, rc_ = 0;
        uint32_t nt = 0;
        s->work += work;
        for (size_t k = rstart[r]; k < rstart[r + 1]; k++) {
            const agg_row_t *row = &p->rows[order ? order[k] : k];
            double w = (double)row->weight, c = (double)row->count / CM_COUNT_ONE;
            sw[row->stack] += row->weight;
            sc[row->stack] += row->count;
            if (!(work > 0))
                continue;
            rc_ += c;
            if (incl_test) {
                for (uint32_t u = uoff[row->stack]; u < uoff[row->stack + 1]; u++) {
                    uint32_t f = uniq[u];
                    if (stamp[f] != r + 1) {
                        stamp[f] = r + 1;
                        touched[nt++] = f;
                    }
                    v[f] += w;
                    vc[f] += c;
                }
            } else if (leafk[row->stack] != AGG_NONE) {
                uint32_t leaf = leafk[row->stack];
                if (stamp[leaf] != r + 1) {
                    stamp[leaf] = r + 1;
                    touched[nt++] = leaf;
                }
                v[leaf] += w;
                vc[leaf] += c;
            }
        }
        for (uint32_t t = 0; t < nt; t++) {
            uint32_t f = touched[t];
            if (work > 0 && v[f] != 0) {
                if (pair_push(s, f, v[f] / work, vc[f]))
                    goto out;
                s->present[f]++;
            }
            v[f] = vc[f] = 0;
        }
        if (work > 0) {
            s->rep_c[s->n_reps] = rc_;
            s->rep_g[s->n_reps] = p->replicates[r].group;
            s->scale[s->n_reps] = 1.0;
            s->pair_off[++s->n_reps] = (uint32_t)s->n_pairs;
        }
    }
sums:
    side_sums(p, uoff, uniq, leafk, sw, sc, s);
    rc = 0;
out:
    free(leafk);
    free(sw);
    free(sc);
    free(uoff);
    free(uniq);
    free(stamp);
    free(rstart);
    free(order);
    free(v);
    free(vc);
    free(touched);
    return rc;
}

static _Thread_local int tl_incl;

static int class_rank(agg_diff_class_t c) {
    return c == AGG_DIFF_REGRESSION ? 0 : c == AGG_DIFF_IMPROVEMENT ? 1 : 2;
}

static int cmp_entry(const void *a, const void *b) {
    const agg_diff_entry_t *x = a, *y = b;
    int rx = class_rank(x->cls), ry = class_rank(y->cls);
    if (rx != ry)
        return rx - ry;
    double dx = tl_incl || x->by_inclusive ? x->delta_total : x->delta_self;
    double dy = tl_incl || y->by_inclusive ? y->delta_total : y->delta_self;
    if (rx == 0 && dx != dy)
        return dx < dy ? 1 : -1;
    if (rx == 1 && dx != dy)
        return dx < dy ? -1 : 1;
    if (rx == 2 && fabs(x->delta_total) != fabs(y->delta_total))
        return fabs(x->delta_total) < fabs(y->delta_total) ? 1 : -1;
    int c = strcmp(x->name, y->name);
    return c ? c : strcmp(x->module, y->module);
}

#define REF_MAX 256

/* Returns the k-th smallest of v[0..n) (0-based), reordering v so that v[0..k) <= v[k]
 * (Hoare's quickselect, expected O(n)). n > k. */
static double select_kth(double *v, size_t n, size_t k) {
    size_t lo = 0, hi = n - 1;
    while (lo < hi) {
        double pivot = v[lo + (hi - lo) / 2];
        size_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i <= j) {
                double t = v[i];
                v[i] = v[j];
                v[j] = t;
                i++;
                if (j == 0)
                    break;
                j--;
            }
        }
        if (k <= j)
            hi = j;
        else if (k >= i)
            lo = i;
        else
            break;
    }
    return v[k];
}

/* Size factors (median of ratios, as DESeq normalises RNA-seq libraries): the reference
 * functions are those non-zero in every replicate of both sides with at least 10 samples per
 * replicate on average. With g_f the geometric mean of f's rate over all replicates of both
 * sides, replicate r's factor is s_r = exp(median over reference f of log(rate_rf / g_f)).
 * It captures what moves every function at once in that replicate (load, a busier hour);
 * being a median it ignores changes confined to under half of the reference functions.
 * Returns the number of reference functions; with fewer than 5 the factors stay 1. */
static size_t size_factors(side_t *a, side_t *b, const uint64_t *cnt_a, const uint64_t *cnt_b,
                           uint32_t nk) {
    size_t nref = 0;
    uint8_t *ref = calloc((size_t)nk + 1, 1);
    double *lg = calloc((size_t)nk + 1, sizeof *lg);
    double *tmp = malloc(((size_t)nk + 1) * sizeof *tmp);
    if (!ref || !lg || !tmp)
        goto out;
    uint32_t n = a->n_reps + b->n_reps;
    if (a->n_reps < 2 || b->n_reps < 2)
        goto out;
    for (uint32_t f = 0; f < nk; f++) {
        ref[f] = a->present[f] == a->n_reps && b->present[f] == b->n_reps &&
                 cnt_a[f] >= 10ull * CM_COUNT_ONE * a->n_reps &&
                 cnt_b[f] >= 10ull * CM_COUNT_ONE * b->n_reps;
        if (ref[f])
            tmp[nref++] = (double)(cnt_a[f] + cnt_b[f]);
    }
    if (nref > REF_MAX) { /* keep the REF_MAX most sampled: least noisy, and bounded cost */
        double cut = select_kth(tmp, nref, nref - REF_MAX);
        nref = 0;
        for (uint32_t f = 0; f < nk; f++) {
            ref[f] = ref[f] && (double)(cnt_a[f] + cnt_b[f]) >= cut && nref < REF_MAX;
            nref += ref[f];
        }
    }
    if (nref < 5) {
        nref = 0;
        goto out;
    }
    side_t *sides[2] = {a, b};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < sides[k]->n_pairs; i++)
            if (ref[sides[k]->pair_f[i]])
                lg[sides[k]->pair_f[i]] += log(sides[k]->pair_v[i]) / n;
    for (int k = 0; k < 2; k++) {
        side_t *s = sides[k];
        for (uint32_t r = 0; r < s->n_reps; r++) {
            size_t m = 0;
            for (uint32_t i = s->pair_off[r]; i < s->pair_off[r + 1]; i++)
                if (ref[s->pair_f[i]])
                    tmp[m++] = log(s->pair_v[i]) - lg[s->pair_f[i]];
            double med = select_kth(tmp, m, m / 2);
            if (m % 2 == 0) { /* the lower middle is the largest of the lower half */
                double lo = tmp[0];
                for (size_t i = 1; i < m / 2; i++)
                    lo = tmp[i] > lo ? tmp[i] : lo;
                med = (lo + med) / 2;
            }
            s->scale[r] = exp(med);
        }
    }
out:
    free(ref);
    free(lg);
    free(tmp);
    return nref;
}

/* Sums of normalised rates x = rate / s_r and their squares, per function. */
static void side_moments(side_t *s) {
    for (uint32_t r = 0; r < s->n_reps; r++)
        for (uint32_t i = s->pair_off[r]; i < s->pair_off[r + 1]; i++) {
            double x = s->pair_v[i] / s->scale[r];
            s->sx[s->pair_f[i]] += x;
            s->sxx[s->pair_f[i]] += x * x;
        }
}

static double mean_log_scale(const side_t *s) {
    double m = 0;
    for (uint32_t r = 0; r < s->n_reps; r++)
        m += log(s->scale[r]) / s->n_reps;
    return m;
}

static double var_of(double sx, double sxx, double n) {
    double v = (sxx - sx * sx / n) / (n - 1);
    return v > 0 ? v : 0;
}

const double agg_diff_mde_shares[AGG_DIFF_MDE_SHARES] = {0.05, 0.2, 0.5};

const char *agg_diff_test_name(const agg_diff_t *d) {
    switch (d->opts.method) {
    case AGG_DIFF_POISSON:
        return "poisson (naive)";
    case AGG_DIFF_WELCH:
        return "welch t over replicates";
    case AGG_DIFF_COUNT:
        break;
    }
    return "over-dispersed count test over process x bucket replicates";
}

/* The values of function k (keys' frame k) in entry e: per unit of work, PerfView's overweight
 * and responsibility (inclusive; r = relative change of the total, dT its absolute change). */
static void entry_values(agg_diff_entry_t *e, const agg_profile_t *keys, uint32_t k,
                         const side_t *sb, const side_t *st, double wb, double wt, double r,
                         double dT, const agg_diff_opts_t *o) {
    e->name = keys->frames[k].name;
    e->module = keys->frames[k].module;
    e->base_total = sb->sum_incl[k] / wb;
    e->test_total = st->sum_incl[k] / wt;
    e->base_self = sb->sum_self[k] / wb;
    e->test_self = st->sum_self[k] / wt;
    e->delta_total = e->test_total - e->base_total;
    e->delta_self = e->test_self - e->base_self;
    /* PerfView: expected(s) = base(s) * r; overweight = delta / expected;
     * responsibility = delta / (T_test - T_base) */
    /* both divide by the total's change: when it barely moved (|r| < min_rel_change) they are
     * noise over noise (9454 % was seen) and are left undefined */
    double expected = e->base_total * r;
    int moved = isfinite(r) && fabs(r) >= o->min_rel_change;
    e->overweight = moved && expected != 0 ? e->delta_total / expected : NAN;
    e->responsibility = moved ? e->delta_total / dT : NAN;
    e->self_responsibility = moved ? e->delta_self / dT : NAN;
    e->interesting =
        isfinite(e->responsibility) && fabs(e->responsibility) >= o->min_responsibility;
    e->base_samples = sb->cnt_incl[k] / CM_COUNT_ONE;
    e->test_samples = st->cnt_incl[k] / CM_COUNT_ONE;
    e->p = e->q = e->p_incl = e->q_incl = 1;
    e->rel_incl = NAN;
    e->cls = AGG_DIFF_UNTESTED;
}

/* The p-value of function k by the chosen method; sets e->cls to NOISE when tested. */
static void entry_test(agg_diff_entry_t *e, uint32_t k, const side_t *sb, const side_t *st,
                       const agg_dcount_t *cf, double base_total, const agg_diff_opts_t *o,
                       double *p_min) {
    uint64_t cb = o->test_inclusive ? sb->cnt_incl[k] : sb->cnt_self[k];
    uint64_t ct = o->test_inclusive ? st->cnt_incl[k] : st->cnt_self[k];
    double wb = sb->work > 0 ? sb->work : 1, wt = st->work > 0 ? st->work : 1;
    *p_min = 0;
    if ((cb + ct) / CM_COUNT_ONE < o->min_samples)
        return;
    if (o->method == AGG_DIFF_POISSON) {
        /* Naive: counts are Poisson with rates proportional to work, so given n = c_b + c_t,
         * c_t ~ Binomial(n, pi) with pi = W_t / (W_b + W_t); normal approximation. */
        double cbf = (double)cb / CM_COUNT_ONE, ctf = (double)ct / CM_COUNT_ONE;
        double nn = cbf + ctf, pi = wt / (wb + wt);
        e->p = agg_stats_normal_p2((ctf - nn * pi) / sqrt(nn * pi * (1 - pi)));
        e->cls = AGG_DIFF_NOISE;
    } else if (o->method == AGG_DIFF_COUNT) {
        if (!(cf->c[0] > 0) || !(cf->c[1] > 0) || sb->n_reps < 2 || st->n_reps < 2)
            return; /* one replicate shows no over-dispersion: untested */
        /* the tested means: shares of the samples (the test's over rho) times the base total */
        e->norm_base = cf->y[0][k] / cf->c[0] * base_total;
        e->norm_test = cf->y[1][k] / (exp(cf->log_rho) * cf->c[1]) * base_total;
        e->p = agg_dcount_p(cf, k, p_min);
        e->cls = AGG_DIFF_NOISE;
    } else if (sb->n_reps >= 2 && st->n_reps >= 2) {
        double nb = sb->n_reps, ntt = st->n_reps;
        agg_welch_t w;
        e->norm_base = sb->sx[k] / nb;
        e->norm_test = st->sx[k] / ntt;
        if (agg_stats_welch(sb->sx[k] / nb, var_of(sb->sx[k], sb->sxx[k], nb), nb,
                            st->sx[k] / ntt, var_of(st->sx[k], st->sxx[k], ntt), ntt, &w) == 0) {
            e->p = w.p;
            e->cls = AGG_DIFF_NOISE;
        }
    }
}

/* One hypothesis of the diff's BH: entry n's tested cost, or (the count test of self cost) a
 * caller's inclusive cost. */
typedef struct {
    size_t n;
    int incl;     /* a caller's inclusive cost */
    double p, pmin;
    double share; /* its samples' share of both sides' samples: the weight's prior */
    double rel;   /* incl: the change of its inclusive share, the common factor removed */
} hyp_t;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Tarone's filter for discrete tests (Gilbert 2005 for FDR): a test whose smallest possible p
 * exceeds q / K cannot be significant among K tests, so it need not count. K = the smallest
 * number with #{tests with p_min <= q / K} <= K. Compacts h to the kept tests in place and
 * returns how many; the others keep q = 1. */
static size_t tarone(hyp_t *h, size_t n, double q) {
    double *pm = malloc((n + 1) * sizeof *pm);
    if (!pm)
        return n; /* no filter: plain BH, still valid */
    for (size_t i = 0; i < n; i++)
        pm[i] = h[i].pmin;
    qsort(pm, n, sizeof *pm, cmp_double);
    size_t K = 1;
    for (; K < n; K++) { /* m(K) = tests with p_min <= q / K, non-increasing in K */
        size_t m = 0;
        while (m < n && pm[m] <= q / (double)K)
            m++;
        if (m <= K)
            break;
    }
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if (h[i].pmin <= q / (double)K)
            h[kept++] = h[i];
    free(pm);
    return kept;
}

/* Weighted BH (Genovese, Roeder & Wasserman 2006): BH on p_i / w_i, weights of mean 1 fixed
 * before the test. w_i = (1 - lambda) + lambda m s_i / sum of the self tests' s: a part of the
 * budget spread evenly, the rest in proportion to each function's share of the samples (a
 * caller's inclusive test has the even part only: its samples are its callees'). A change of a
 * large function is what users act on and what the samples can show; a new or small
 * function's change shows as a far smaller p. The weights depend on the pooled counts only,
 * which carry no information on the direction of a change (under the null, the split given
 * the total is the test's binomial): the FDR stays at q (and the chance of any finding in a
 * null diff at most q, the weighted Bonferroni bound). qv[i] = the weighted q-value. */
static int weighted_bh(const hyp_t *h, size_t n, double lambda, double *qv) {
    double ss = 0;
    for (size_t i = 0; i < n; i++)
        ss += h[i].incl ? 0 : h[i].share;
    for (size_t i = 0; i < n; i++) {
        double w = ss > 0 && !h[i].incl ? 1 - lambda + lambda * (double)n * h[i].share / ss
                   : ss > 0             ? 1 - lambda
                                        : 1;
        qv[i] = w > 0 ? fmin(1, h[i].p / w) : 1;
    }
    return agg_stats_bh(qv, n, qv);
}

/* Whether entry e's change, seen by the test (normalised means), is large enough to matter;
 * *d its sign's carrier. */
static int change_matters(const agg_diff_t *out, const agg_diff_entry_t *e, double *d) {
    const agg_diff_opts_t *o = &out->opts;
    double b = o->test_inclusive ? e->base_total : e->base_self;
    *d = o->test_inclusive ? e->delta_total : e->delta_self;
    if (o->method != AGG_DIFF_POISSON) {
        b = e->norm_base;
        *d = e->norm_test - e->norm_base;
    }
    return fabs(*d) >= o->min_rel_change * b && fabs(*d) >= o->min_abs_share * out->base_total &&
           *d != 0;
}

static void set_class(agg_diff_t *out, agg_diff_entry_t *e, double d) {
    e->cls = d > 0 ? AGG_DIFF_REGRESSION : AGG_DIFF_IMPROVEMENT;
    if (d > 0)
        out->n_regressions++;
    else
        out->n_improvements++;
}

/* BH over the hypotheses, then the classes of the tested costs: significant at q and a change
 * that matters. A caller's inclusive result is kept in its entry (q_incl, rel_incl) for
 * caller_findings. */
static int classify(agg_diff_t *out, hyp_t *h, size_t nh) {
    const agg_diff_opts_t *o = &out->opts;
    double *qv = malloc((nh + 1) * sizeof *qv);
    if (!qv)
        return CM_ENOMEM;
    if (o->method == AGG_DIFF_COUNT)
        nh = tarone(h, nh, o->q);
    out->n_bh = nh;
    if (weighted_bh(h, nh, o->method == AGG_DIFF_COUNT ? o->bh_large_weight : 0, qv)) {
        free(qv);
        return CM_ENOMEM;
    }
    for (size_t i = 0; i < nh; i++) {
        agg_diff_entry_t *e = &out->entries[h[i].n];
        double d;
        if (h[i].incl) {
            e->p_incl = h[i].p;
            e->q_incl = qv[i];
            e->rel_incl = h[i].rel;
            continue;
        }
        e->q = qv[i];
        if (e->q <= o->q && change_matters(out, e, &d))
            set_class(out, e, d);
    }
    free(qv);
    return 0;
}
/* The minimum detectable effects at the level a single finding needs among the BH tests:
 * q w / (m + 1) with the weight of weighted_bh (a new function: the even part; a function of
 * share s: the even part plus lambda (m + 1) s). */
static void mde(agg_diff_t *out, const agg_dcount_t *cf) {
    double m1 = (double)(out->n_bh + 1), lambda = out->opts.bh_large_weight;
    out->mde_new = agg_dcount_mde_new(cf, out->opts.q * (1 - lambda) / m1, AGG_DIFF_MDE_POWER);
    for (int i = 0; i < AGG_DIFF_MDE_SHARES; i++) {
        double level = out->opts.q * fmin(1, (1 - lambda) / m1 + lambda * agg_diff_mde_shares[i]);
        out->mde_change[i] =
            agg_dcount_mde_change(cf, agg_diff_mde_shares[i], level, AGG_DIFF_MDE_POWER);
    }
    out->dispersion = cf->alpha;
    out->dispersion_g = cf->alpha_g;
    out->dispersion_g_data = cf->alpha_g_data;
    out->dispersion_g_df = cf->df_g;
}

double agg_diff_samples_needed(double share, double q, size_t n_tested) {
    if (!(share > 0) || !(share < 1) || !(q > 0))
        return NAN;
    double y0 = 0, y1 = 0, phi = 1, df = 0;
    agg_dcount_t cf = {.y = {&y0, &y1}, .phi = &phi, .df = &df, .c = {1e9, 1e9}};
    double level = q * (1 - AGG_DIFF_BH_LARGE_WEIGHT) / (double)(n_tested + 1);
    double mde = agg_dcount_mde_new(&cf, level, AGG_DIFF_MDE_POWER);
    return isfinite(mde) ? mde * 1e9 / share : NAN; /* the mde scales as 1 / samples */
}

#define CALLER_MIN_SAMPLES 10 /* inclusive samples over self (both sides): a caller */
#define CALLER_ROOT_SHARE 0.9  /* a root's inclusive cost is the total: the common factor */

/* With the count test of self cost: function k's inclusive cost as a hypothesis of its own
 * when it is a caller (>= CALLER_MIN_SAMPLES more inclusive than self samples) and not a root
 * (main, a thread's start: under CALLER_ROOT_SHARE of the samples). Cost that moves between
 * the callers of one shared function changes no function's self cost; the callers' inclusive
 * cost shows it. ci: the inclusive counts' fit (fit_callers; NULL: no caller tests). Returns 1
 * when h is filled. */
static int caller_hyp(const agg_diff_opts_t *o, const side_t *sb, const side_t *st,
                      const agg_dcount_t *ci, uint32_t k, hyp_t *h) {
    if (!ci || o->method != AGG_DIFF_COUNT || o->test_inclusive || o->no_callers ||
        sb->n_reps < 2 || st->n_reps < 2 || !(ci->c[0] > 0) || !(ci->c[1] > 0))
        return 0;
    double yb = (double)sb->cnt_incl[k] / CM_COUNT_ONE, yt = (double)st->cnt_incl[k] / CM_COUNT_ONE;
    double xb = (double)sb->cnt_self[k] / CM_COUNT_ONE, xt = (double)st->cnt_self[k] / CM_COUNT_ONE;
    double c = ci->c[0] + ci->c[1];
    if (yb + yt < xb + xt + CALLER_MIN_SAMPLES || yb + yt >= CALLER_ROOT_SHARE * c)
        return 0;
    *h = (hyp_t){.incl = 1, .share = (ci->y[0][k] + ci->y[1][k]) / c};
    h->p = agg_dcount_p(ci, k, &h->pmin);
    /* the change of its share, the common factor removed */
    double b = ci->y[0][k] / ci->c[0];
    h->rel = b > 0 ? ci->y[1][k] / (exp(ci->log_rho) * ci->c[1]) / b - 1 : INFINITY;
    return 1;
}

/* The callers' inclusive counts fitted as the self costs are (each its own dispersion: a
 * caller's samples vary with its callees' mix, and the common dispersion let a null pipeline
 * diff flag snprintf's callers), with the self fit cf's common factor. Not in the
 * leaf-replicate form (no per-replicate stacks): *ok stays 0. */
static int fit_callers(const agg_profile_t *b, const uint32_t *mb, const agg_profile_t *t,
                       const uint32_t *mt, uint32_t nk, const agg_dcount_t *cf, side_t si[2],
                       agg_dcount_t *ci, int *ok) {
    *ok = 0;
    if (b->leaf_replicates || t->leaf_replicates)
        return 0;
    int rc = side_compute(b, mb, nk, 1, &si[0]);
    if (!rc)
        rc = side_compute(t, mt, nk, 1, &si[1]);
    if (!rc)
        rc = agg_dcount_fit(&si[0], &si[1], nk, ci);
    if (rc)
        return rc;
    ci->log_rho = cf->log_rho;
    ci->var_log_rho = cf->var_log_rho;
    *ok = 1;
    return 0;
}

/* Fills out->entries from the two sides and tests them (ci: the callers' fit or NULL); k2n[k]
 * = function k's entry. */
static int fill_entries(agg_diff_t *out, const agg_profile_t *keys, const side_t *sb,
                        const side_t *st, const agg_dcount_t *cf, const agg_dcount_t *ci,
                        uint32_t *k2n) {
    const agg_diff_opts_t *o = &out->opts;
    uint32_t nk = keys->n_frames;
    out->entries = calloc((size_t)nk + 1, sizeof *out->entries);
    hyp_t *h = malloc(2 * ((size_t)nk + 1) * sizeof *h);
    int rc = CM_ENOMEM;
    if (!out->entries || !h)
        goto out;
    /* normalisation: per unit of work (1 when a side has none, with a warning) */
    double wb = sb->work > 0 ? sb->work : 1, wt = st->work > 0 ? st->work : 1;
    double dT = out->test_total - out->base_total;
    double r = out->base_total > 0 ? dT / out->base_total : NAN;
    double call = (double)(sb->total_c + st->total_c);
    size_t n = 0, nh = 0;
    for (uint32_t k = 0; k < nk; k++) {
        k2n[k] = AGG_NONE;
        if (!sb->cnt_incl[k] && !st->cnt_incl[k] && !sb->sum_incl[k] && !st->sum_incl[k])
            continue;
        agg_diff_entry_t *e = &out->entries[n];
        double pmin;
        entry_values(e, keys, k, sb, st, wb, wt, r, dT, o);
        entry_test(e, k, sb, st, cf, out->base_total, o, &pmin);
        if (e->cls == AGG_DIFF_NOISE) {
            double y = o->method == AGG_DIFF_COUNT ? cf->y[0][k] + cf->y[1][k] : 0;
            double c = o->method == AGG_DIFF_COUNT ? cf->c[0] + cf->c[1] : 0;
            h[nh++] = (hyp_t){.n = n, .p = e->p, .pmin = pmin, .share = c > 0 ? y / c : 0};
            out->n_tested++;
        }
        if (call > 0 && caller_hyp(o, sb, st, ci, k, &h[nh]))
            h[nh++].n = n;
        k2n[k] = (uint32_t)n++;
    }
    out->n = n;
    rc = classify(out, h, nh);
out:
    free(h);
    return rc;
}

static int self_finding(const agg_diff_t *out, uint32_t n) {
    return n != AGG_NONE && !out->entries[n].by_inclusive &&
           (out->entries[n].cls == AGG_DIFF_REGRESSION ||
            out->entries[n].cls == AGG_DIFF_IMPROVEMENT);
}

/* Marks in cov[] the entries on a stack of p that holds a self-cost finding anywhere: its
 * callers' inclusive cost moved with it, and so did its callees' (a new function calling
 * clock_gettime raises clock_gettime's inclusive cost: the demo's apply_discount_rules). */
static void cover(const agg_diff_t *out, const agg_profile_t *p, const uint32_t *fmap,
                  const uint32_t *k2n, unsigned char *cov) {
    for (uint32_t st = 0; st < p->n_stacks; st++) {
        uint32_t a = p->stack_off[st], b = p->stack_off[st + 1], i = a;
        while (i < b && !self_finding(out, k2n[fmap[p->stack_frames[i]]]))
            i++;
        if (i == b)
            continue;
        for (i = a; i < b; i++)
            if (k2n[fmap[p->stack_frames[i]]] != AGG_NONE)
                cov[k2n[fmap[p->stack_frames[i]]]] = 1;
    }
}

/* A caller's inclusive change is a finding of its own only when no self-cost finding lies on
 * a stack through it (either side): a slower leaf raises each of its callers' inclusive cost
 * and is reported once, at the leaf. What remains is cost moved between the
 * callers of a shared function whose self cost did not change; the hint says so. */
static int caller_findings(agg_diff_t *out, const agg_profile_t *b, const uint32_t *mb,
                           const agg_profile_t *t, const uint32_t *mt, const uint32_t *k2n) {
    const agg_diff_opts_t *o = &out->opts;
    unsigned char *cov = calloc(out->n + 1, 1);
    if (!cov)
        return CM_ENOMEM;
    cover(out, b, mb, k2n, cov);
    cover(out, t, mt, k2n, cov);
    size_t len = 0, shown = 0;
    for (size_t i = 0; i < out->n; i++) {
        agg_diff_entry_t *e = &out->entries[i];
        if (cov[i] || (e->cls != AGG_DIFF_NOISE && e->cls != AGG_DIFF_UNTESTED) ||
            !(e->q_incl <= o->q) || !(fabs(e->rel_incl) >= o->min_rel_change) ||
            !(fabs(e->delta_total) >= o->min_abs_share * out->base_total))
            continue;
        e->by_inclusive = 1;
        e->p = e->p_incl;
        e->q = e->q_incl;
        set_class(out, e, e->rel_incl);
        int w = snprintf(out->hint + len, sizeof out->hint - len, "%s%s %+.1f%%",
                         shown ? ", " : "", e->name, 100 * e->rel_incl);
        if (w > 0 && (size_t)w < sizeof out->hint - len) {
            len += (size_t)w;
            shown++;
        }
    }
    if (shown)
        snprintf(out->hint + len, sizeof out->hint - len, ": inclusive cost changed with no "
                 "self-cost finding on its stacks (cost moved between the callers of a shared "
                 "function); --inclusive (API inclusive=1) tests inclusive cost throughout");
    free(cov);
    return 0;
}

static void add_warning(agg_diff_t *out, unsigned flag, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void add_warning(agg_diff_t *out, unsigned flag, const char *fmt, ...) {
    size_t len = strlen(out->warning_text), left = sizeof out->warning_text - len;
    out->warnings |= flag;
    if (len && left > 2) {
        memcpy(out->warning_text + len, "; ", 3);
        len += 2;
        left -= 2;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out->warning_text + len, left, fmt, ap);
    va_end(ap);
}

static void warnings(agg_diff_t *out, const side_t *sb, const side_t *st) {
    const agg_diff_opts_t *o = &out->opts;
    if (out->base_samples < o->warn_samples)
        add_warning(out, AGG_DIFF_WARN_BASE_SAMPLES, "base has only %llu samples (< %llu): small "
                    "changes are within sampling noise", (unsigned long long)out->base_samples,
                    (unsigned long long)o->warn_samples);
    if (out->test_samples < o->warn_samples)
        add_warning(out, AGG_DIFF_WARN_TEST_SAMPLES, "test has only %llu samples (< %llu): small "
                    "changes are within sampling noise", (unsigned long long)out->test_samples,
                    (unsigned long long)o->warn_samples);
    if (sb->n_reps < o->warn_replicates)
        add_warning(out, AGG_DIFF_WARN_BASE_REPLICATES, "base has only %u replicates (< %u): "
                    "significance is unreliable", sb->n_reps, o->warn_replicates);
    if (st->n_reps < o->warn_replicates)
        add_warning(out, AGG_DIFF_WARN_TEST_REPLICATES, "test has only %u replicates (< %u): "
                    "significance is unreliable", st->n_reps, o->warn_replicates);
    if (!out->n_reference && !o->common_from_work && sb->n_reps >= 2 && st->n_reps >= 2 && o->method != AGG_DIFF_POISSON)
        add_warning(out, AGG_DIFF_WARN_NO_REFERENCE, "%s", o->method == AGG_DIFF_COUNT
                    ? "fewer than 3 functions have 5 samples on each side: a uniform change "
                      "cannot be told from a change of the largest functions"
                    : "fewer than 5 functions are present in every replicate: a busier period "
                      "cannot be told from a change");
    if (sb->work <= 0 || st->work <= 0)
        add_warning(out, AGG_DIFF_WARN_NO_WORK, "%s", "a side has no recorded work: values are "
                    "raw totals");
}

/* opts.common_from_work: an unchanged function costs the same per unit of work on both sides,
 * so its share of a side's weight T is cost x W / T, and its expected share moves by
 * rho = (W_t / T_t) / (W_b / T_b) (counts follow weights: the period cancels). Set before the
 * callers' fit, which copies it. */
static void common_from_work(const side_t *sb, const side_t *st, agg_dcount_t *cf) {
    if (!(sb->work > 0) || !(st->work > 0) || !sb->total_w || !st->total_w)
        return;
    cf->log_rho = log(st->work / (double)st->total_w) - log(sb->work / (double)sb->total_w);
    cf->var_log_rho = 0;
    cf->n_tmm = 0;
}

/* Interns base's and test's frames as functions (name, module) of keys: mb/mt map them. */
static int map_functions(agg_profile_t *keys, const agg_profile_t *p, uint32_t *map) {
    for (uint32_t f = 0; f < p->n_frames; f++) {
        int64_t id = agg_profile_frame(keys, p->frames[f].name, p->frames[f].module, NULL, 0);
        if (id < 0)
            return (int)id;
        map[f] = (uint32_t)id;
    }
    return 0;
}

int agg_diff_compute(const agg_profile_t *base, const agg_profile_t *test,
                     const agg_diff_opts_t *opts, agg_diff_t *out) {
    memset(out, 0, sizeof *out);
    if (base->type != test->type)
        return CM_EINVAL;
    if (opts)
        out->opts = *opts;
    else
        agg_diff_opts_default(&out->opts);
    const agg_diff_opts_t *o = &out->opts;
    out->type = base->type;
    out->mde_new = out->dispersion = out->dispersion_g = NAN;
    for (int i = 0; i < AGG_DIFF_MDE_SHARES; i++)
        out->mde_change[i] = NAN;
    int rc = CM_ENOMEM;
    side_t sb = {0}, stt = {0}, si[2] = {{0}, {0}};
    agg_dcount_t cf = {0}, ci = {0};
    int callers = 0;
    uint32_t *mb = malloc(((size_t)base->n_frames + 1) * sizeof *mb);
    uint32_t *mt = malloc(((size_t)test->n_frames + 1) * sizeof *mt);
    uint32_t *k2n = NULL;
    /* the function table: a profile used as an interning table, owned by the result */
    agg_profile_t *keys = agg_profile_new(base->type);
    if (!mb || !mt || !keys || map_functions(keys, base, mb) || map_functions(keys, test, mt))
        goto out;
    uint32_t nk = keys->n_frames;
    if (!(k2n = malloc(((size_t)nk + 1) * sizeof *k2n)))
        goto out;
    if ((rc = side_compute(base, mb, nk, o->test_inclusive, &sb)) ||
        (rc = side_compute(test, mt, nk, o->test_inclusive, &stt)))
        goto out;
    double wb = sb.work > 0 ? sb.work : 1, wt = stt.work > 0 ? stt.work : 1;
    out->base_work = sb.work;
    out->test_work = stt.work;
    out->base_total = (double)sb.total_w / wb;
    out->test_total = (double)stt.total_w / wt;
    out->base_samples = sb.total_c / CM_COUNT_ONE;
    out->test_samples = stt.total_c / CM_COUNT_ONE;
    out->base_replicates = sb.n_reps;
    out->test_replicates = stt.n_reps;
    if (o->method == AGG_DIFF_COUNT) {
        if ((rc = agg_dcount_fit(&sb, &stt, nk, &cf)) ||
            (!o->test_inclusive && (rc = fit_callers(base, mb, test, mt, nk, &cf, si, &ci, &callers))))
            goto out;
        if (o->common_from_work)
            common_from_work(&sb, &stt, &cf);
        out->n_reference = cf.n_tmm;
        out->common_ratio = cf.n_tmm && out->base_total > 0
                                ? exp(cf.log_rho) * out->test_total / out->base_total
                                : NAN;
    } else {
        /* normalisation of the common factor between replicates, then the moments */
        out->n_reference = size_factors(&sb, &stt, o->test_inclusive ? sb.cnt_incl : sb.cnt_self,
                                        o->test_inclusive ? stt.cnt_incl : stt.cnt_self, nk);
        out->common_ratio =
            out->n_reference ? exp(mean_log_scale(&stt) - mean_log_scale(&sb)) : NAN;
        side_moments(&sb);
        side_moments(&stt);
    }
    if ((rc = fill_entries(out, keys, &sb, &stt, &cf, callers ? &ci : NULL, k2n)) ||
        (rc = caller_findings(out, base, mb, test, mt, k2n)))
        goto out;
    if (o->method == AGG_DIFF_COUNT && o->fold_callees && !o->test_inclusive &&
        (rc = agg_diff_fold(out, base, mb, test, mt, k2n, nk, &cf)))
        goto out;
    if (o->method == AGG_DIFF_COUNT)
        mde(out, &cf);
    tl_incl = o->test_inclusive;
    qsort(out->entries, out->n, sizeof *out->entries, cmp_entry);
    warnings(out, &sb, &stt);
    out->owner_ = keys;
    keys = NULL;
    rc = 0;
out:
    if (rc) {
        free(out->entries);
        out->entries = NULL;
    }
    agg_dcount_fit_free(&cf);
    agg_dcount_fit_free(&ci);
    agg_profile_free(keys);
    side_free(&sb);
    side_free(&stt);
    side_free(&si[0]);
    side_free(&si[1]);
    free(mb);
    free(mt);
    free(k2n);
    return rc;
}

void agg_diff_free(agg_diff_t *d) {
    free(d->entries);
    agg_profile_free(d->owner_);
    memset(d, 0, sizeof *d);
}
