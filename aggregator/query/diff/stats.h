/* Statistics used by the diff: Student's t distribution (through the regularized incomplete
 * beta function), Welch's two-sample t-test, the normal tail, and Benjamini-Hochberg q-values.
 * Pure functions; thread-safe. */
#ifndef AGG_STATS_H
#define AGG_STATS_H

#include <stddef.h>
#include <stdint.h>

/* Regularized incomplete beta I_x(a, b) for a, b > 0 and x in [0, 1]; NAN outside. */
double agg_stats_betai(double a, double b, double x);

/* Student's t CDF: P(T <= t) with df > 0 degrees of freedom. */
double agg_stats_t_cdf(double t, double df);

/* Two-sided tail P(|T| >= |t|) of Student's t with df degrees of freedom. */
double agg_stats_t_p2(double t, double df);

/* Two-sided tail P(|Z| >= |z|) of the standard normal. */
double agg_stats_normal_p2(double z);

typedef struct {
    double t, df, p; /* statistic, Welch-Satterthwaite degrees of freedom, two-sided p */
} agg_welch_t;

/* Welch's unequal-variance t-test of mean2 - mean1 from sample means, unbiased variances and
 * sizes (n1, n2 >= 2). When both variances are 0 the p-value is 1 if the means are equal and
 * 0 otherwise. Returns 0 or CM_EINVAL (a size under 2, a negative variance). */
int agg_stats_welch(double mean1, double var1, double n1, double mean2, double var2, double n2,
                    agg_welch_t *out);

/* Benjamini-Hochberg adjusted p-values (q-values) of n p-values: q_(i) = min over j >= i of
 * min(1, n p_(j) / j) in ascending order of p. Rejecting every hypothesis with q <= alpha
 * controls the false discovery rate at alpha (independent or positively dependent tests).
 * q may alias p. Returns 0 or CM_ENOMEM. */
int agg_stats_bh(const double *p, size_t n, double *q);

/* Mann-Whitney U test of two samples sorted ascending: two-sided p of one being shifted
 * against the other (normal approximation; tied values get their average rank and the
 * variance the tie correction). 1 when either is empty or every value ties. */
double agg_stats_rank_p(const int64_t *x, size_t nx, const int64_t *y, size_t ny);

#endif
