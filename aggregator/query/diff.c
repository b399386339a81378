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
#include "stats.h"

#include "cm/error.h"

#include <math.h>
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
                           .method = AGG_DIFF_WELCH,
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

typedef struct {
    double *sum_incl, *sum_self; /* weights */
    uint64_t *cnt_incl, *cnt_self;
    double *sx, *sxx; /* over replicates with work > 0: sum of normalised rates and squares */
    uint32_t n_reps;  /* replicates with work > 0 */
    /* per replicate with work > 0: the non-zero rates (value / work) of the tested cost */
    uint32_t *pair_off; /* n_reps + 1 */
    uint32_t *pair_f;
    double *pair_v;
    size_t n_pairs, cap_pairs;
    uint32_t *present; /* per function: replicates where it is non-zero */
    double *scale;     /* per replicate: size factor (1 = none) */
    double work;
    uint64_t total_w, total_c;
} side_t;

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
    free(s->present);
    free(s->scale);
}

static int pair_push(side_t *s, uint32_t f, double v) {
    if (s->n_pairs == s->cap_pairs) {
        size_t ncap = s->cap_pairs ? 2 * s->cap_pairs : 4096;
        uint32_t *nf = realloc(s->pair_f, ncap * sizeof *nf);
        if (!nf)
            return CM_ENOMEM;
        s->pair_f = nf;
        double *nv = realloc(s->pair_v, ncap * sizeof *nv);
        if (!nv)
            return CM_ENOMEM;
        s->pair_v = nv;
        s->cap_pairs = ncap;
    }
    s->pair_f[s->n_pairs] = f;
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
    uint32_t *touched = malloc(((size_t)nk + 1) * sizeof *touched);
    uint32_t *stamp = calloc((size_t)nk + 1, sizeof *stamp);
    if (!rstart || !order || !v || !touched || !stamp)
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
        for (size_t k = rstart[r]; k < rstart[r + 1]; k++) {
            const agg_leaf_row_t *row = &p->leaf_rows[order[k]];
            uint32_t f = fmap[row->frame];
            if (stamp[f] != r + 1) {
                stamp[f] = r + 1;
                touched[nt++] = f;
            }
            v[f] += (double)row->weight;
        }
        for (uint32_t t = 0; t < nt; t++) {
            uint32_t f = touched[t];
            if (v[f] != 0) {
                if (pair_push(s, f, v[f] / work))
                    goto out;
                s->present[f]++;
            }
            v[f] = 0;
        }
        s->scale[s->n_reps] = 1.0;
        s->pair_off[++s->n_reps] = (uint32_t)s->n_pairs;
    }
    if (p->work_total > 0)
        s->work = p->work_total;
    rc = 0;
out:
    free(rstart);
    free(order);
    free(v);
    free(touched);
    free(stamp);
    return rc;
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
    uint32_t *touched = malloc(((size_t)nk + 1) * sizeof *touched);
    s->sum_incl = calloc((size_t)nk + 1, sizeof(double));
    s->sum_self = calloc((size_t)nk + 1, sizeof(double));
    s->cnt_incl = calloc((size_t)nk + 1, sizeof(uint64_t));
    s->cnt_self = calloc((size_t)nk + 1, sizeof(uint64_t));
    s->sx = calloc((size_t)nk + 1, sizeof(double));
    s->sxx = calloc((size_t)nk + 1, sizeof(double));
    s->present = calloc((size_t)nk + 1, sizeof(uint32_t));
    s->pair_off = calloc((size_t)p->n_replicates + 2, sizeof(uint32_t));
    s->scale = malloc(((size_t)p->n_replicates + 1) * sizeof(double));
    if (!s->present || !s->pair_off || !s->scale ||
        !uoff || !uniq || !stamp || !rstart || !leafk || !sw || !sc || !v || !touched || !s->sum_incl ||
        !s->sum_self || !s->cnt_incl || !s->cnt_self || !s->sx || !s->sxx)
        goto out;
    /* distinct functions per stack: recursion counted once */
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
        double work = p->replicates[r].work;
        uint32_t nt = 0;
        s->work += work;
        for (size_t k = rstart[r]; k < rstart[r + 1]; k++) {
            const agg_row_t *row = &p->rows[order ? order[k] : k];
            double w = (double)row->weight;
            sw[row->stack] += row->weight;
            sc[row->stack] += row->count;
            if (!(work > 0))
                continue;
            if (incl_test) {
                for (uint32_t u = uoff[row->stack]; u < uoff[row->stack + 1]; u++) {
                    uint32_t f = uniq[u];
                    if (stamp[f] != r + 1) {
                        stamp[f] = r + 1;
                        touched[nt++] = f;
                    }
                    v[f] += w;
                }
            } else if (leafk[row->stack] != AGG_NONE) {
                uint32_t leaf = leafk[row->stack];
                if (stamp[leaf] != r + 1) {
                    stamp[leaf] = r + 1;
                    touched[nt++] = leaf;
                }
                v[leaf] += w;
            }
        }
        for (uint32_t t = 0; t < nt; t++) {
            uint32_t f = touched[t];
            if (work > 0 && v[f] != 0) {
                if (pair_push(s, f, v[f] / work))
                    goto out;
                s->present[f]++;
            }
            v[f] = 0;
        }
        if (work > 0) {
            s->scale[s->n_reps] = 1.0;
            s->pair_off[++s->n_reps] = (uint32_t)s->n_pairs;
        }
    }
sums:
    /* sums per stack, then per function: a stack's value is added once to each function */
    for (uint32_t st = 0; st < p->n_stacks; st++) {
        s->total_w += sw[st];
        s->total_c += sc[st];
        for (uint32_t u = uoff[st]; u < uoff[st + 1]; u++) {
            s->sum_incl[uniq[u]] += (double)sw[st];
            s->cnt_incl[uniq[u]] += sc[st];
        }
        if (p->stack_off[st] == p->stack_off[st + 1])
            continue;
        uint32_t leaf = fmap[p->stack_frames[p->stack_off[st + 1] - 1]];
        s->sum_self[leaf] += (double)sw[st];
        s->cnt_self[leaf] += sc[st];
    }
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
    double dx = tl_incl ? x->delta_total : x->delta_self;
    double dy = tl_incl ? y->delta_total : y->delta_self;
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
    int rc = CM_ENOMEM;
    side_t sb = {0}, stt = {0};
    uint32_t *mb = malloc(((size_t)base->n_frames + 1) * sizeof *mb);
    uint32_t *mt = malloc(((size_t)test->n_frames + 1) * sizeof *mt);
    double *pv = NULL, *qv = NULL;
    size_t *tested = NULL;
    /* the function table: a profile used as an interning table, owned by the result */
    agg_profile_t *keys = agg_profile_new(base->type);
    if (!mb || !mt || !keys)
        goto out;
    for (uint32_t f = 0; f < base->n_frames; f++) {
        int64_t id = agg_profile_frame(keys, base->frames[f].name, base->frames[f].module, NULL, 0);
        if (id < 0)
            goto out;
        mb[f] = (uint32_t)id;
    }
    for (uint32_t f = 0; f < test->n_frames; f++) {
        int64_t id = agg_profile_frame(keys, test->frames[f].name, test->frames[f].module, NULL, 0);
        if (id < 0)
            goto out;
        mt[f] = (uint32_t)id;
    }
    uint32_t nk = keys->n_frames;
    if ((rc = side_compute(base, mb, nk, o->test_inclusive, &sb)) ||
        (rc = side_compute(test, mt, nk, o->test_inclusive, &stt)))
        goto out;
    /* normalisation of the common factor between replicates, then the moments */
    out->n_reference = size_factors(&sb, &stt, o->test_inclusive ? sb.cnt_incl : sb.cnt_self,
                                    o->test_inclusive ? stt.cnt_incl : stt.cnt_self, nk);
    out->common_ratio = out->n_reference ? exp(mean_log_scale(&stt) - mean_log_scale(&sb)) : NAN;
    side_moments(&sb);
    side_moments(&stt);
    rc = CM_ENOMEM;
    out->entries = calloc((size_t)nk + 1, sizeof *out->entries);
    pv = malloc(((size_t)nk + 1) * sizeof *pv);
    qv = malloc(((size_t)nk + 1) * sizeof *qv);
    tested = malloc(((size_t)nk + 1) * sizeof *tested);
    if (!out->entries || !pv || !qv || !tested)
        goto out;
    /* normalisation: per unit of work (1 when a side has none, with a warning) */
    double wb = sb.work > 0 ? sb.work : 1, wt = stt.work > 0 ? stt.work : 1;
    out->base_work = sb.work;
    out->test_work = stt.work;
    out->base_total = (double)sb.total_w / wb;
    out->test_total = (double)stt.total_w / wt;
    out->base_samples = sb.total_c / CM_COUNT_ONE;
    out->test_samples = stt.total_c / CM_COUNT_ONE;
    out->base_replicates = sb.n_reps;
    out->test_replicates = stt.n_reps;
    double dT = out->test_total - out->base_total;
    double r = out->base_total > 0 ? dT / out->base_total : NAN;
    size_t n = 0, nt = 0;
    for (uint32_t k = 0; k < nk; k++) {
        if (!sb.cnt_incl[k] && !stt.cnt_incl[k] && !sb.sum_incl[k] && !stt.sum_incl[k])
            continue;
        agg_diff_entry_t *e = &out->entries[n];
        e->name = keys->frames[k].name;
        e->module = keys->frames[k].module;
        e->base_total = sb.sum_incl[k] / wb;
        e->test_total = stt.sum_incl[k] / wt;
        e->base_self = sb.sum_self[k] / wb;
        e->test_self = stt.sum_self[k] / wt;
        e->delta_total = e->test_total - e->base_total;
        e->delta_self = e->test_self - e->base_self;
        /* PerfView: expected(s) = base(s) * r; overweight = delta / expected;
         * responsibility = delta / (T_test - T_base) */
        double expected = e->base_total * r;
        e->overweight = expected != 0 && isfinite(expected) ? e->delta_total / expected : NAN;
        e->responsibility = dT != 0 ? e->delta_total / dT : NAN;
        e->self_responsibility = dT != 0 ? e->delta_self / dT : NAN;
        e->interesting = isfinite(e->responsibility) && fabs(e->responsibility) >= o->min_responsibility;
        e->base_samples = sb.cnt_incl[k] / CM_COUNT_ONE;
        e->test_samples = stt.cnt_incl[k] / CM_COUNT_ONE;
        e->p = e->q = 1;
        e->cls = AGG_DIFF_UNTESTED;
        uint64_t cb = o->test_inclusive ? sb.cnt_incl[k] : sb.cnt_self[k];
        uint64_t ct = o->test_inclusive ? stt.cnt_incl[k] : stt.cnt_self[k];
        if ((cb + ct) / CM_COUNT_ONE >= o->min_samples) {
            if (o->method == AGG_DIFF_POISSON) {
                /* Naive: counts are Poisson with rates proportional to work, so given
                 * n = c_b + c_t, c_t ~ Binomial(n, pi) with pi = W_t / (W_b + W_t); normal
                 * approximation z = (c_t - n pi) / sqrt(n pi (1 - pi)). */
                double cbf = (double)cb / CM_COUNT_ONE, ctf = (double)ct / CM_COUNT_ONE;
                double nn = cbf + ctf, pi = wt / (wb + wt);
                e->p = agg_stats_normal_p2((ctf - nn * pi) / sqrt(nn * pi * (1 - pi)));
                e->cls = AGG_DIFF_NOISE;
            } else if (sb.n_reps >= 2 && stt.n_reps >= 2) {
                double nb = sb.n_reps, ntt = stt.n_reps;
                agg_welch_t w;
                e->norm_base = sb.sx[k] / nb;
                e->norm_test = stt.sx[k] / ntt;
                if (agg_stats_welch(sb.sx[k] / nb, var_of(sb.sx[k], sb.sxx[k], nb), nb,
                                    stt.sx[k] / ntt, var_of(stt.sx[k], stt.sxx[k], ntt), ntt,
                                    &w) == 0) {
                    e->p = w.p;
                    e->cls = AGG_DIFF_NOISE;
                }
            }
            if (e->cls == AGG_DIFF_NOISE) {
                pv[nt] = e->p;
                tested[nt++] = n;
            }
        }
        n++;
    }
    out->n = n;
    out->n_tested = nt;
    if ((rc = agg_stats_bh(pv, nt, qv)))
        goto out;
    for (size_t i = 0; i < nt; i++) {
        agg_diff_entry_t *e = &out->entries[tested[i]];
        e->q = qv[i];
        double b = o->test_inclusive ? e->base_total : e->base_self;
        double d = o->test_inclusive ? e->delta_total : e->delta_self;
        if (o->method == AGG_DIFF_WELCH) { /* the change the test saw: normalised means */
            b = e->norm_base;
            d = e->norm_test - e->norm_base;
        }
        if (e->q <= o->q && fabs(d) >= o->min_rel_change * b &&
            fabs(d) >= o->min_abs_share * out->base_total && d != 0) {
            e->cls = d > 0 ? AGG_DIFF_REGRESSION : AGG_DIFF_IMPROVEMENT;
            if (d > 0)
                out->n_regressions++;
            else
                out->n_improvements++;
        }
    }
    tl_incl = o->test_inclusive;
    qsort(out->entries, n, sizeof *out->entries, cmp_entry);
    /* warnings */
    char *wp = out->warning_text;
    size_t left = sizeof out->warning_text;
#define WARN(flag, ...)                                                                            \
    do {                                                                                           \
        out->warnings |= flag;                                                                     \
        int len_ = snprintf(wp, left, "%s", wp == out->warning_text ? "" : "; ");                  \
        if (len_ > 0 && (size_t)len_ < left) {                                                     \
            wp += len_;                                                                            \
            left -= (size_t)len_;                                                                  \
        }                                                                                          \
        len_ = snprintf(wp, left, __VA_ARGS__);                                                    \
        if (len_ > 0 && (size_t)len_ < left) {                                                     \
            wp += len_;                                                                            \
            left -= (size_t)len_;                                                                  \
        }                                                                                          \
    } while (0)
    if (out->base_samples < o->warn_samples)
        WARN(AGG_DIFF_WARN_BASE_SAMPLES, "base has only %llu samples (< %llu): small changes are "
             "within sampling noise", (unsigned long long)out->base_samples,
             (unsigned long long)o->warn_samples);
    if (out->test_samples < o->warn_samples)
        WARN(AGG_DIFF_WARN_TEST_SAMPLES, "test has only %llu samples (< %llu): small changes are "
             "within sampling noise", (unsigned long long)out->test_samples,
             (unsigned long long)o->warn_samples);
    if (sb.n_reps < o->warn_replicates)
        WARN(AGG_DIFF_WARN_BASE_REPLICATES, "base has only %u replicates (< %u): significance "
             "is unreliable", sb.n_reps, o->warn_replicates);
    if (stt.n_reps < o->warn_replicates)
        WARN(AGG_DIFF_WARN_TEST_REPLICATES, "test has only %u replicates (< %u): significance "
             "is unreliable", stt.n_reps, o->warn_replicates);
    if (!out->n_reference && sb.n_reps >= 2 && stt.n_reps >= 2 && o->method == AGG_DIFF_WELCH)
        WARN(AGG_DIFF_WARN_NO_REFERENCE, "%s", "fewer than 5 functions are present in every "
             "replicate: a busier period cannot be told from a change");
    if (sb.work <= 0 || stt.work <= 0)
        WARN(AGG_DIFF_WARN_NO_WORK, "%s", "a side has no recorded work: values are raw totals");
#undef WARN
    out->owner_ = keys;
    keys = NULL;
    rc = 0;
out:
    if (rc) {
        free(out->entries);
        out->entries = NULL;
    }
    agg_profile_free(keys);
    side_free(&sb);
    side_free(&stt);
    free(mb);
    free(mt);
    free(pv);
    free(qv);
    free(tested);
    return rc;
}

void agg_diff_free(agg_diff_t *d) {
    free(d->entries);
    agg_profile_free(d->owner_);
    memset(d, 0, sizeof *d);
}
