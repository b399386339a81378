/* Student's t, Welch's test and Benjamini-Hochberg, written out (no statistics library).
 * Pure functions; thread-safe (lgamma_r, not lgamma, which writes the global signgam: the
 * report thread and HTTP threads compute diffs at the same time). */
#define _GNU_SOURCE /* lgamma_r */
#include "stats.h"

#include "cm/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One term of modified Lentz's method: updates d and c with coefficient aa and returns the
 * factor d * c by which the fraction's value is multiplied. */
static double lentz_step(double aa, double *c, double *d) {
    const double tiny = 1e-300;
    *d = 1.0 + aa * *d;
    if (fabs(*d) < tiny)
        *d = tiny;
    *c = 1.0 + aa / *c;
    if (fabs(*c) < tiny)
        *c = tiny;
    *d = 1.0 / *d;
    return *d * *c;
}

/* Continued fraction for I_x(a, b) (modified Lentz's method): with
 *   d_{2m+1} = -(a + m)(a + b + m) x / ((a + 2m)(a + 2m + 1)),
 *   d_{2m}   =  m (b - m) x / ((a + 2m - 1)(a + 2m)),
 * I_x(a, b) = x^a (1-x)^b / (a B(a, b)) * 1 / (1 + d_1 / (1 + d_2 / (1 + ...))).
 * It converges fast for x < (a + 1) / (a + b + 2); the caller uses the symmetry
 * I_x(a, b) = 1 - I_{1-x}(b, a) otherwise. */
static double beta_cf(double a, double b, double x) {
    const double tiny = 1e-300, eps = 1e-15;
    double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
    if (fabs(d) < tiny)
        d = tiny;
    d = 1.0 / d;
    double h = d;
    for (int m = 1; m <= 10000; m++) {
        double m2 = 2.0 * m;
        h *= lentz_step(m * (b - m) * x / ((a - 1.0 + m2) * (a + m2)), &c, &d);
        double aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1.0 + m2));
        double del = lentz_step(aa, &c, &d);
        h *= del;
        if (fabs(del - 1.0) < eps)
            break;
    }
    return h;
}

double agg_stats_betai(double a, double b, double x) {
    if (!(a > 0) || !(b > 0) || !(x >= 0) || !(x <= 1))
        return NAN;
    if (x == 0 || x == 1)
        return x;
    int sg; /* every argument is positive: the sign is always +1 */
    double lfront = lgamma_r(a + b, &sg) - lgamma_r(a, &sg) - lgamma_r(b, &sg) + a * log(x) +
                    b * log1p(-x);
    if (x < (a + 1.0) / (a + b + 2.0))
        return exp(lfront) * beta_cf(a, b, x) / a;
    return 1.0 - exp(lfront) * beta_cf(b, a, 1.0 - x) / b;
}

/* For T ~ t(df): P(|T| >= |t|) = I_{df / (df + t^2)}(df / 2, 1 / 2). */
double agg_stats_t_p2(double t, double df) {
    if (isnan(t) || !(df > 0))
        return NAN;
    if (isinf(t))
        return 0.0;
    return agg_stats_betai(df / 2.0, 0.5, df / (df + t * t));
}

double agg_stats_t_cdf(double t, double df) {
    double p2 = agg_stats_t_p2(t, df);
    return t >= 0 ? 1.0 - p2 / 2.0 : p2 / 2.0;
}

double agg_stats_normal_p2(double z) { return erfc(fabs(z) / sqrt(2.0)); }

/* Welch: t = (m2 - m1) / sqrt(v1/n1 + v2/n2), and the Welch-Satterthwaite degrees of freedom
 * df = (v1/n1 + v2/n2)^2 / ((v1/n1)^2 / (n1 - 1) + (v2/n2)^2 / (n2 - 1)). Assumes independent
 * observations within and between the groups and roughly normal means (CLT over replicates). */
int agg_stats_welch(double mean1, double var1, double n1, double mean2, double var2, double n2,
                    agg_welch_t *out) {
    if (!(n1 >= 2) || !(n2 >= 2) || var1 < 0 || var2 < 0)
        return CM_EINVAL;
    double s1 = var1 / n1, s2 = var2 / n2, se2 = s1 + s2;
    if (se2 <= 0) {
        out->t = mean1 == mean2 ? 0 : (mean2 > mean1 ? INFINITY : -INFINITY);
        out->df = n1 + n2 - 2;
        out->p = mean1 == mean2 ? 1.0 : 0.0;
        return 0;
    }
    out->t = (mean2 - mean1) / sqrt(se2);
    out->df = se2 * se2 / (s1 * s1 / (n1 - 1) + s2 * s2 / (n2 - 1));
    out->p = agg_stats_t_p2(out->t, out->df);
    return 0;
}

static _Thread_local const double *tl_p;

static int cmp_p(const void *a, const void *b) {
    double x = tl_p[*(const size_t *)a], y = tl_p[*(const size_t *)b];
    return x < y ? -1 : x > y;
}

int agg_stats_bh(const double *p, size_t n, double *q) {
    if (n == 0)
        return 0;
    size_t *idx = malloc(n * sizeof *idx);
    double *qs = malloc(n * sizeof *qs);
    if (!idx || !qs) {
        free(idx);
        free(qs);
        return CM_ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    tl_p = p;
    qsort(idx, n, sizeof *idx, cmp_p);
    double run = 1.0;
    for (size_t k = n; k-- > 0;) {
        double v = p[idx[k]] * (double)n / (double)(k + 1);
        if (v < run)
            run = v;
        qs[idx[k]] = run;
    }
    memcpy(q, qs, n * sizeof *q);
    free(idx);
    free(qs);
    return 0;
}

double agg_stats_rank_p(const int64_t *x, size_t nx, const int64_t *y, size_t ny) {
    if (!nx || !ny)
        return 1;
    /* walk both in order: each run of equal values takes the average of its ranks */
    double ry = 0, ties = 0, rank = 0;
    size_t i = 0, j = 0;
    while (i < nx || j < ny) {
        int64_t v = j >= ny || (i < nx && x[i] <= y[j]) ? x[i] : y[j];
        size_t cx = 0, cy = 0;
        while (i < nx && x[i] == v)
            i++, cx++;
        while (j < ny && y[j] == v)
            j++, cy++;
        double c = (double)(cx + cy);
        ry += (double)cy * (rank + (c + 1) / 2);
        ties += c * c * c - c;
        rank += c;
    }
    double n1 = (double)nx, n2 = (double)ny, n = n1 + n2;
    double u = ry - n2 * (n2 + 1) / 2, mean = n1 * n2 / 2;
    double var = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)));
    if (!(var > 0))
        return 1;
    return agg_stats_normal_p2((u - mean) / sqrt(var));
}
