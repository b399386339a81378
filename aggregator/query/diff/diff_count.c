/* The diff's count test (AGG_DIFF_COUNT, the default): sample counts per function and
 * replicate, exposure = the replicate's samples, over-dispersion estimated from the replicates,
 * the common factor as a trimmed mean of log share ratios (TMM), and an exact binomial test on
 * dispersion-scaled counts. The maths, the assumptions and the simulation that chose it are in
 * README.md ("The diff") and bench/RESULTS.md (bench-diff-power).
 *
 * Model. Within one side (one build), replicate r (a process in a time bucket) has C_r samples
 * and function f y_rf of them; E[y_rf] = p_f C_r (p_f: f's share of the samples; the exposure
 * C_r absorbs the replicate's work and load), Var[y_rf] = mu + alpha mu^2 (negative binomial:
 * request mix and co-tenants vary between replicates beyond Poisson sampling). Across sides,
 * an unchanged function has p_test = rho p_base: rho is what moves every function's share at
 * once (a new function takes its share from all others), estimated as edgeR's TMM does.
 * Given Y_b + Y_t, Y_t is binomial(n, pi) with pi = rho C_t / (C_b + rho C_t) under the null;
 * with dispersion phi_f (the variance of a side's total over its mean), the counts divided by
 * phi_f are tested exactly (the incomplete beta gives binomial tails at real-valued counts).
 * A function absent on one side has Y_b = 0 and is tested like any other: 0 vs 31 samples
 * gives p = 2 pi^31 / phi-scaled, ~1e-9 at phi = 1.
 * Threading: pure functions of their inputs. */
#include "diff_int.h"
#include "stats.h"

#include "cm/array.h"
#include "cm/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PRIOR_DF 10.0  /* weight of the common dispersion against a function's own, in df */
#define TMM_TRIM 0.3   /* fraction of log ratios trimmed at each end */
#define TMM_MIN 5.0    /* samples a function needs on each side to enter the common factor */
#define ALPHA_MIN 5.0  /* mean samples per replicate a function needs to enter alpha */
#define ALPHA_G_PRIOR 0.0005 /* processes of one build differ by ~2 % in a function's share */
#define PRIOR_G_DF 10.0       /* its weight, in df, against the processes' own estimate */
#define OWN_G_DF 6.0          /* df a function needs to keep its own process spread */
#define ALPHA_G_SD 0.0005     /* least spread of the functions' between-process alphas */
#define ALPHA_SD 0.01  /* least spread of the functions' alphas around the common one (a
                        * request mix varying by 10 % between replicates) */

void agg_dcount_fit_free(agg_dcount_t *q) {
    free(q->y[0]);
    free(q->y[1]);
    free(q->phi);
    free(q->df);
    memset(q, 0, sizeof *q);
}

/* A function's expected count in a replicate (or group) with c_r samples of which y_r its own,
 * when the side has c samples, y of them its own: in proportion to the rest's samples
 * (c_r - y_r), not to c_r. The test compares a function against the others (TMM's common
 * factor is theirs), and a large function's own spread moves c_r with it: its spread measured
 * against c_r understated the spread of its ratio to the rest by (1 - p)^2 (a 30 % function:
 * 2x in variance; bench-diff-power with PMIX0). Sums to y over the replicates, as y / c * c_r
 * does. Its Pearson residuals carry the rest's Poisson noise too, p / (1 - p) per df, which
 * the callers subtract (the rest's noise is the common factor's, counted in var_log_rho). */
static double rest_mu(double y, double c, double c_r, double y_r) {
    return c > y ? y / (c - y) * (c_r - y_r) : y / c * c_r;
}

/* Per function of side s: its samples y, Pearson's X^2 of its replicate counts around
 * p = y / C (computed as sum over present replicates of (y_r - mu_r)^2 / mu_r - mu_r, plus y,
 * the sum over every replicate of mu_r), and sum of mu_r^2 (mu2). */
static void side_pearson(const side_t *s, uint32_t nk, double *y, double *x2, double *mu2,
                         double *c) {
    double c2 = 0;
    *c = 0;
    for (uint32_t r = 0; r < s->n_reps; r++) {
        *c += s->rep_c[r];
        c2 += s->rep_c[r] * s->rep_c[r];
    }
    for (size_t i = 0; i < s->n_pairs; i++)
        y[s->pair_f[i]] += s->pair_c[i];
    for (uint32_t f = 0; f < nk; f++) {
        double p = *c > 0 ? y[f] / *c : 0;
        /* less the rest's Poisson part of rest_mu's residuals: p / (1 - p) per df */
        x2[f] = y[f] - (y[f] > 0 && p < 1 ? (s->n_reps - 1.0) * p / (1 - p) : 0);
        mu2[f] = p * p * c2;
    }
    for (uint32_t r = 0; r < s->n_reps; r++)
        for (uint32_t i = s->pair_off[r]; i < s->pair_off[r + 1]; i++) {
            uint32_t f = s->pair_f[i];
            double mu = rest_mu(y[f], *c, s->rep_c[r], s->pair_c[i]);
            if (mu > 0)
                x2[f] += (s->pair_c[i] - mu) * (s->pair_c[i] - mu) / mu - mu;
        }
}

/* Median of chi-square with df degrees of freedom (Wilson-Hilferty): a median of X^2 / df
 * over functions is biased low by this over df (0.69 at df 2); the estimates divide by it. */
static double chi2_median(double df) {
    double c = 1 - 2 / (9 * df);
    return df * c * c * c;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of v[0..n) (sorts v); 0 when n = 0. */
static double median(double *v, size_t n) {
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_dbl);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Dispersion: phi_f = max(1, (PRIOR_DF (1 + alpha mbar_f) + df phihat_f) / (PRIOR_DF + df)),
 * phihat_f = X^2 / df its own (df = replicates - 1 per side where it is present),
 * alpha = median over well-sampled functions of (phihat_f - 1) / mbar_f, the common
 * negative-binomial dispersion, mbar_f = sum mu^2 / sum mu (the mean count a replicate
 * contributes, weighted as in the variance of the total). */
static int fit_dispersion(const side_t *s[2], uint32_t nk, double *x2[2], double *mu2[2],
                          agg_dcount_t *q) {
    double *a = malloc(((size_t)nk + 1) * sizeof *a);
    if (!a)
        return CM_ENOMEM;
    size_t na = 0;
    for (uint32_t f = 0; f < nk; f++) {
        double df = 0, x = 0, y = q->y[0][f] + q->y[1][f];
        for (int k = 0; k < 2; k++)
            if (q->y[k][f] > 0 && s[k]->n_reps > 1) {
                df += s[k]->n_reps - 1;
                x += x2[k][f];
            }
        double mbar = y > 0 ? (mu2[0][f] + mu2[1][f]) / y : 0;
        q->phi[f] = df > 0 ? x / df : 1; /* phihat for now */
        if (df > 0 && y >= ALPHA_MIN * (s[0]->n_reps + s[1]->n_reps) && mbar > 0)
            a[na++] = (x / chi2_median(df) - 1) / mbar;
    }
    q->alpha = fmax(0, median(a, na));
    free(a);
    for (uint32_t f = 0; f < nk; f++) {
        double df = 0, y = q->y[0][f] + q->y[1][f];
        for (int k = 0; k < 2; k++)
            if (q->y[k][f] > 0 && s[k]->n_reps > 1)
                df += s[k]->n_reps - 1;
        double mbar = y > 0 ? (mu2[0][f] + mu2[1][f]) / y : 0;
        /* shrink the excess over Poisson e = phi - 1 = alpha_f mbar: prior e0 = alpha mbar
         * with sd tau = max(alpha, ALPHA_SD) mbar (functions' alphas differ by about their
         * size), own estimate phihat - 1 with variance 2 phi0^2 / df (chi-square). A function
         * with few samples per replicate says little about its alpha: e stays near e0.
         * Unless its own estimate is far above the prior (> 3 sd): a bursty function (its
         * samples in one process or one bucket: a log flush, a process's exit) keeps its own
         * dispersion, or a burst on one side would be a "change" (seen in test-pipeline). */
        double e0 = q->alpha * mbar, tau = fmax(q->alpha, ALPHA_SD) * mbar;
        double e = e0;
        if (df > 0) {
            double v = 2 * (1 + e0) * (1 + e0) / df, t2 = tau * tau, own = q->phi[f] - 1;
            if (own > e0 + 3 * sqrt(v))
                e = own;
            else if (tau > 0)
                e = (e0 / t2 + own / v) / (1 / t2 + 1 / v);
        }
        q->phi[f] = fmax(1, 1 + e);
        q->df[f] = df;
    }
    return 0;
}

typedef struct {
    double m, w;
} mw_t;

/* By m, then w: the sorted sequence (and so every sum over it) does not depend on the order
 * of the functions' ids, which differs between store backends. */
static int cmp_mw(const void *a, const void *b) {
    const mw_t *x = a, *y = b;
    int c = CM_CMP(x->m, y->m);
    return c ? c : CM_CMP(x->w, y->w);
}

/* The w-weighted mean of m over v[lo, hi) (0 when the weights sum to 0); *sw: their sum. */
static double weighted_mean(const mw_t *v, size_t lo, size_t hi, double *sw) {
    double num = 0, den = 0;
    for (size_t i = lo; i < hi; i++) {
        num += v[i].m * v[i].w;
        den += v[i].w;
    }
    *sw = den;
    return den > 0 ? num / den : 0;
}

/* Pooled moment estimate of the between-group alpha: with per function the excess
 * X^2_f - df_f (m = ratio to w = df_f mbar_f), alpha = sum excess / sum w over the functions.
 * Far less noisy than a median of df-2 ratios. Nothing is trimmed: the ratios are chi-square
 * with a few df, so leaving out the largest 10 % biased alpha low by ~25 % (null diffs with a
 * finding 1.4 -> 3.2 % in bench-diff-power); a function with its own larger process spread
 * keeps its own estimate instead (group_excess). Sorts v (the sum's order). */
static double pooled_alpha(mw_t *v, size_t n) {
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_mw);
    double sw;
    return weighted_mean(v, 0, n, &sw);
}

/* TMM (Robinson & Oshlack 2010): log share ratios M_f = log((Y_t/C_t) / (Y_b/C_b)) of the
 * functions with >= TMM_MIN samples on both sides, the TMM_TRIM most extreme at each end
 * dropped, the rest averaged with weights 1 / (phi_f (1/Y_b + 1/Y_t)) (inverse variances).
 * A change confined to under 30 % of the functions does not move it. */
static int fit_common(uint32_t nk, agg_dcount_t *q) {
    mw_t *v = malloc(((size_t)nk + 1) * sizeof *v);
    if (!v)
        return CM_ENOMEM;
    size_t n = 0;
    for (uint32_t f = 0; f < nk; f++) {
        double yb = q->y[0][f], yt = q->y[1][f];
        if (yb >= TMM_MIN && yt >= TMM_MIN)
            v[n++] = (mw_t){log(yt / q->c[1]) - log(yb / q->c[0]),
                            1 / (q->phi[f] * (1 / yb + 1 / yt))};
    }
    q->log_rho = 0;
    q->n_tmm = 0;
    if (n >= 3) {
        qsort(v, n, sizeof *v, cmp_mw);
        size_t lo = (size_t)floor(TMM_TRIM * (double)n), hi = n - lo;
        double sw;
        q->log_rho = weighted_mean(v, lo, hi, &sw);
        q->var_log_rho = sw > 0 ? 1 / sw : 0;
        q->n_tmm = hi - lo;
    }
    free(v);
    return 0;
}

/* (group << 32 | replicate) pairs: sorted as numbers, by group then replicate */
static int cmp_u64(const void *a, const void *b) {
    return CM_CMP(*(const uint64_t *)a, *(const uint64_t *)b);
}

/* Dense group ids of s's replicates into g[] (0..n-1, any number of groups); returns n, or 0
 * when the replicates have no groups or a group per replicate; -1 when out of memory. */
static int64_t dense_groups(const side_t *s, uint32_t *g) {
    uint64_t *v = malloc(((size_t)s->n_reps + 1) * sizeof *v);
    if (!v)
        return -1;
    for (uint32_t r = 0; r < s->n_reps; r++) {
        if (s->rep_g[r] == AGG_NONE) {
            free(v);
            return 0;
        }
        v[r] = (uint64_t)s->rep_g[r] << 32 | r;
    }
    qsort(v, s->n_reps, sizeof *v, cmp_u64);
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_reps; i++) {
        if (i > 0 && v[i] >> 32 != v[i - 1] >> 32)
            n++;
        g[(uint32_t)v[i]] = n;
    }
    n += s->n_reps > 0;
    free(v);
    return n < s->n_reps ? n : 0;
}

/* A function's between-process excess over Poisson, e = alpha_g,f mbar_g. With fewer than
 * OWN_G_DF df of its own (2 processes per side: 2 df) the pooled e0 = alpha_g mbar_g (*df_eff
 * 0: the pool's df); a chi-square with a few df says too little, and mixing it in made null
 * diffs flag 3.3 % instead of 1.4 % (bench-diff-power 1000 2 8 null). Otherwise its own
 * estimate own = X^2 / df - 1 shrunk towards e0 as in fit_dispersion (prior sd
 * tau = max(alpha_g, ALPHA_G_SD) mbar_g, own variance 2 (1 + e0)^2 / df; *df_eff = df +
 * PRIOR_G_DF), or, far above it (> 3 sd: a per-process cache, a leader process), kept as is
 * (*df_eff = df): its process spread is not a "change". */
static double group_excess(double alpha_g, double mbar, double own, double df, double *df_eff) {
    double e0 = alpha_g * mbar, tau = fmax(alpha_g, ALPHA_G_SD) * mbar;
    *df_eff = 0;
    if (!(df >= OWN_G_DF))
        return e0;
    double v = 2 * (1 + e0) * (1 + e0) / df, t2 = tau * tau;
    *df_eff = df;
    if (own > e0 + 3 * sqrt(v))
        return own;
    *df_eff = df + PRIOR_G_DF;
    return t2 > 0 ? (e0 / t2 + own / v) / (1 / t2 + 1 / v) : e0;
}

/* The pooled between-group alpha's terms, one per well-sampled function f: its estimate
 * (X^2_f / df_f - 1) / mbar_f and a weight. Pilot (ag NAN): weight df_f mbar_f, i.e.
 * alpha = sum (X^2 - df) / sum df mbar. Then (ag the pilot) the inverse of the estimate's
 * variance, df_f mbar_f^2 / (1 + e_f)^2 with e_f = max(phi_f - 1, ag mbar_f) (X^2 / df has
 * variance 2 (1 + e)^2 / df): the pilot's weights let many small functions, whose chi-squares
 * say little about alpha, make its noise, and a large function's phi took that noise times its
 * mbar (bench-diff-power s30, Poisson counts: the 20 % function +10 % has p <= 0.01 in
 * 82.8 -> 86.4 % of diffs, against the ideal test's 99 %). */
static size_t group_terms(const agg_dcount_t *q, const uint32_t ng[2], uint32_t nk,
                          const double *x2, const double *mbar, double ag, mw_t *a) {
    size_t na = 0;
    for (uint32_t f = 0; f < nk; f++) {
        double y = q->y[0][f] + q->y[1][f], df = 0;
        for (int k = 0; k < 2; k++)
            df += q->y[k][f] > 0 ? ng[k] - 1 : 0;
        if (!(df > 0) || y < ALPHA_MIN * (ng[0] + ng[1]) * 4 || !(mbar[f] > 0))
            continue;
        double e = isnan(ag) ? 0 : fmax(q->phi[f] - 1, ag * mbar[f]);
        double w = isnan(ag) ? df * mbar[f] : df * mbar[f] * mbar[f] / ((1 + e) * (1 + e));
        a[na++] = (mw_t){(x2[f] / df - 1) / mbar[f], w};
    }
    return na;
}

/* Between groups (processes): the same negative-binomial moment as between replicates, on
 * each group's totals. Replicates of one process share its request mix, so their totals vary
 * more than independent replicates would: phi_f is raised to 1 + alpha_g mbar_g(f) when that
 * is larger. Only when both sides have 2 or more groups (any number: past a fixed cap the
 * replicates would be taken as independent, and the p values too small). */
static int fit_groups(const side_t *s[2], uint32_t nk, agg_dcount_t *q) {
    uint32_t *g[2] = {malloc(((size_t)s[0]->n_reps + 1) * sizeof(uint32_t)),
                      malloc(((size_t)s[1]->n_reps + 1) * sizeof(uint32_t))};
    uint32_t ng[2] = {0, 0};
    double *yg[2] = {NULL, NULL}, *cg[2] = {NULL, NULL};
    double *x2 = calloc((size_t)nk + 1, sizeof *x2), *mu2 = calloc((size_t)nk + 1, sizeof *mu2);
    mw_t *a = malloc(((size_t)nk + 1) * sizeof *a);
    int rc = CM_ENOMEM;
    if (!g[0] || !g[1] || !x2 || !mu2 || !a)
        goto out;
    for (int k = 0; k < 2; k++) {
        int64_t n = dense_groups(s[k], g[k]);
        if (n < 0)
            goto out;
        if (n < 2) {
            rc = 0;
            goto out;
        }
        ng[k] = (uint32_t)n;
    }
    for (int k = 0; k < 2; k++) {
        if (!(yg[k] = calloc((size_t)ng[k] * nk + 1, sizeof(double))) ||
            !(cg[k] = calloc((size_t)ng[k] + 1, sizeof(double))))
            goto out;
        for (uint32_t r = 0; r < s[k]->n_reps; r++) {
            cg[k][g[k][r]] += s[k]->rep_c[r];
            for (uint32_t i = s[k]->pair_off[r]; i < s[k]->pair_off[r + 1]; i++)
                yg[k][(size_t)g[k][r] * nk + s[k]->pair_f[i]] += s[k]->pair_c[i];
        }
        for (uint32_t f = 0; f < nk; f++) {
            double p = q->y[k][f] / q->c[k];
            if (q->y[k][f] > 0 && p < 1) /* the rest's Poisson part, as in side_pearson */
                x2[f] -= (ng[k] - 1.0) * p / (1 - p);
            for (uint32_t j = 0; j < ng[k] && q->y[k][f] > 0; j++) {
                double y = yg[k][(size_t)j * nk + f];
                double mu = rest_mu(q->y[k][f], q->c[k], cg[k][j], y);
                if (mu > 0) {
                    x2[f] += (y - mu) * (y - mu) / mu;
                    mu2[f] += mu * mu;
                }
            }
        }
    }
    for (uint32_t f = 0; f < nk; f++) {
        double y = q->y[0][f] + q->y[1][f];
        mu2[f] = y > 0 ? mu2[f] / y : 0; /* now mbar_g */
    }
    /* few processes say little about how much they differ: the estimate (pooled over
     * functions, df_pool = sum of their df) is shrunk towards ALPHA_G_PRIOR with PRIOR_G_DF */
    size_t na = group_terms(q, ng, nk, x2, mu2, NAN, a);
    double dfp = (double)na * ((ng[0] - 1) + (ng[1] - 1));
    double ag = fmax(0, pooled_alpha(a, na));
    na = group_terms(q, ng, nk, x2, mu2, ag, a);
    ag = fmax(0, pooled_alpha(a, na));
    q->alpha_g = (PRIOR_G_DF * ALPHA_G_PRIOR + dfp * ag) / (PRIOR_G_DF + dfp);
    q->alpha_g_data = ag;
    q->df_g = dfp;
    q->mean_group = (q->c[0] + q->c[1]) / (ng[0] + ng[1]);
    for (uint32_t f = 0; f < nk; f++) {
        double df = 0;
        for (int k = 0; k < 2; k++)
            df += q->y[k][f] > 0 ? ng[k] - 1 : 0;
        double dfe;
        double e = group_excess(q->alpha_g, mu2[f], df > 0 ? x2[f] / df - 1 : 0, df, &dfe);
        if (1 + e > q->phi[f]) {
            q->phi[f] = 1 + e;
            /* the t guard's df (agg_dcount_p_totals adds PRIOR_DF back) */
            q->df[f] = fmin(q->df[f], (dfe > 0 ? dfe : dfp + PRIOR_G_DF) - PRIOR_DF);
        }
    }
    rc = 0;
out:
    for (int k = 0; k < 2; k++) {
        free(g[k]);
        free(yg[k]);
        free(cg[k]);
    }
    free(x2);
    free(mu2);
    free(a);
    return rc;
}

int agg_dcount_fit(const side_t *b, const side_t *t, uint32_t nk, agg_dcount_t *q) {
    memset(q, 0, sizeof *q);
    const side_t *s[2] = {b, t};
    double *x2[2], *mu2[2];
    int rc = CM_ENOMEM;
    q->phi = malloc(((size_t)nk + 1) * sizeof *q->phi);
    q->df = malloc(((size_t)nk + 1) * sizeof *q->df);
    for (int k = 0; k < 2; k++) {
        q->y[k] = calloc((size_t)nk + 1, sizeof(double));
        x2[k] = malloc(((size_t)nk + 1) * sizeof(double));
        mu2[k] = malloc(((size_t)nk + 1) * sizeof(double));
    }
    if (!q->phi || !q->df || !q->y[0] || !q->y[1] || !x2[0] || !x2[1] || !mu2[0] || !mu2[1])
        goto out;
    for (int k = 0; k < 2; k++)
        side_pearson(s[k], nk, q->y[k], x2[k], mu2[k], &q->c[k]);
    uint32_t nr = b->n_reps + t->n_reps;
    q->mean_rep = nr ? (q->c[0] + q->c[1]) / nr : 0;
    if ((rc = fit_dispersion(s, nk, x2, mu2, q)) || (rc = fit_groups(s, nk, q)) ||
        (rc = fit_common(nk, q)))
        goto out;
    rc = 0;
out:
    for (int k = 0; k < 2; k++) {
        free(x2[k]);
        free(mu2[k]);
    }
    if (rc)
        agg_dcount_fit_free(q);
    return rc;
}

/* P(X >= k) and P(X <= k) of X ~ binomial(n, pi) at real-valued k, n (0 <= k <= n). */
static double binom_upper(double k, double n, double pi) {
    return k <= 0 ? 1.0 : k > n ? 0.0 : agg_stats_betai(k, n - k + 1, pi);
}
static double binom_lower(double k, double n, double pi) {
    return k >= n ? 1.0 : k < 0 ? 0.0 : agg_stats_betai(n - k, k + 1, 1 - pi);
}

/* Mid-p tails (Lancaster): P(X > k) + P(X = k) / 2, as the mean of P(X >= k) and
 * P(X >= k + 1): the exact test's tail without its conservatism (a discrete test at level a
 * rejects with probability well under a); the mean over the null stays close to a. */
static double midp_upper(double k, double n, double pi) {
    return (binom_upper(k, n, pi) + binom_upper(k + 1, n, pi)) / 2;
}
static double midp_lower(double k, double n, double pi) {
    return (binom_lower(k, n, pi) + binom_lower(k - 1, n, pi)) / 2;
}

/* Upper normal quantile: z with P(|Z| >= z) = p2 (bisection on erfc). */
static double z_of_p2(double p2) {
    double lo = 0, hi = 40;
    for (int i = 0; i < 100; i++) {
        double mid = (lo + hi) / 2;
        if (agg_stats_normal_p2(mid) > p2)
            lo = mid;
        else
            hi = mid;
    }
    return (lo + hi) / 2;
}

static double null_pi(const agg_dcount_t *q) {
    double rc = exp(q->log_rho) * q->c[1];
    return rc / (q->c[0] + rc);
}

double agg_dcount_p_totals(const agg_dcount_t *q, double yb, double yt, double phi, double df,
                      double *p_min) {
    double pi = null_pi(q);
    double n = (yb + yt) / phi, k = yt / phi;
    if (p_min)
        *p_min = fmin(1, fmin(pow(pi, n), pow(1 - pi, n)));
    if (!(n > 0) || !(pi > 0) || !(pi < 1))
        return 1;
    /* the exact mid-p tails, or with many samples their normal limit (the incomplete beta's
     * continued fraction takes ~sqrt(n) steps: 3,000 functions of an hour's diff) */
    double var = n * pi * (1 - pi);
    double p = var > 400 ? agg_stats_normal_p2((k - n * pi) / sqrt(var))
                         : 2 * fmin(midp_upper(k, n, pi), midp_lower(k, n, pi));
    /* phi's excess over Poisson (phi - 1) is estimated with df + PRIOR_DF degrees of
     * freedom; Poisson's part is exact. Satterthwaite: the variance phi has df_eff =
     * df (phi / (phi - 1))^2. The exact p is inflated by how much fatter Student's t with
     * df_eff is than the normal at the same statistic (large counts, phi >> 1: the t test;
     * phi ~ 1: the exact test unchanged). */
    if (phi > 1) {
        double dfe = (df + PRIOR_DF) * (phi / (phi - 1)) * (phi / (phi - 1));
        /* the exact p's normal quantile, read on Student's t: where the exact tail and the
         * normal one agree this is p x t(z) / normal(z); far out they part (a new function's
         * hundreds of samples: exact 1e-60 at z 20, normal 1e-88), and that ratio made the
         * clearest change p = 1 */
        if (p > 0 && dfe < 1e5)
            p = agg_stats_t_p2(z_of_p2(p), dfe);
    }
    return p < 1 ? p : 1;
}

/* rho is estimated too: its variance (1 / the kept weights) adds to the log ratio's,
 * phi (1/Y_b + 1/Y_t); it matters for the largest functions only. */
double agg_dcount_p(const agg_dcount_t *q, uint32_t f, double *p_min) {
    double yb = q->y[0][f], yt = q->y[1][f], phi = q->phi[f];
    if (yb > 0 && yt > 0)
        phi += q->var_log_rho / (1 / yb + 1 / yt);
    return agg_dcount_p_totals(q, yb, yt, phi, q->df[f], p_min);
}

/* P(Poisson(lambda) >= k), k integer >= 0. */
static double poisson_upper(unsigned k, double lambda) {
    double term = exp(-lambda), cdf = 0;
    for (unsigned i = 0; i < k; i++) {
        cdf += term;
        term *= lambda / (i + 1);
    }
    return cdf < 1 ? 1 - cdf : 0;
}

/* A new function: found when its test samples k reach the smallest count whose p (all k on
 * the test side, phi = 1) is <= level; its share is then the Poisson mean that reaches k with
 * the given power, over the test side's samples. */
double agg_dcount_mde_new(const agg_dcount_t *q, double level, double power) {
    double pi = null_pi(q);
    if (!(q->c[1] > 0) || !(pi > 0) || !(pi < 1))
        return NAN;
    unsigned k = (unsigned)ceil(log(level) / log(pi)); /* mid-p of k of k: pi^k */
    if (k > 100000)
        return NAN;
    double lo = 0, hi = 10.0 * k + 50;
    for (int i = 0; i < 100; i++) {
        double mid = (lo + hi) / 2;
        if (poisson_upper(k, mid) < power)
            lo = mid;
        else
            hi = mid;
    }
    double share = hi / q->c[1];
    return share < 1 ? share : NAN;
}

/* A function of the given share changed by x (relative): found with the given power when
 * |log(1 + x)| >= (z_level + z_power) sd, sd^2 = phi (1/(share C_b) + 1/(share C_t)),
 * phi = 1 + alpha * share * (samples per replicate), or the same between processes if larger. */
double agg_dcount_mde_change(const agg_dcount_t *q, double share, double level, double power) {
    if (!(q->c[0] > 0) || !(q->c[1] > 0) || !(share > 0))
        return NAN;
    double phi = fmax(1 + q->alpha * share * q->mean_rep, 1 + q->alpha_g * share * q->mean_group);
    double sd = sqrt(phi * (1 / (share * q->c[0]) + 1 / (share * q->c[1])));
    double z = z_of_p2(level) + z_of_p2(2 * (1 - power));
    return exp(z * sd) - 1;
}
