/* Private to the diff (diff.c, diff_count.c): one side's sums and per-replicate costs. */
#ifndef AGG_DIFF_INT_H
#define AGG_DIFF_INT_H

#include "diff.h"

#include <stdint.h>

typedef struct {
    double *sum_incl, *sum_self; /* weights */
    uint64_t *cnt_incl, *cnt_self;
    double *sx, *sxx; /* over replicates with work > 0: sum of normalised rates and squares */
    uint32_t n_reps;  /* replicates with work > 0 */
    /* per replicate with work > 0: the non-zero rates (value / work) of the tested cost, and
     * the same entries' sample counts */
    uint32_t *pair_off; /* n_reps + 1 */
    uint32_t *pair_f;
    double *pair_v;
    double *pair_c;
    size_t n_pairs, cap_pairs;
    double *rep_c;     /* per replicate with work > 0: its samples (all functions) */
    uint32_t *rep_g;   /* ... and its group (process), AGG_NONE for none */
    uint32_t *present; /* per function: replicates where it is non-zero */
    double *scale;     /* per replicate: size factor (1 = none) */
    double work;
    uint64_t total_w, total_c;
} side_t;

/* The count test (AGG_DIFF_COUNT, README "The diff"): fitted on both sides' per-replicate
 * sample counts of the tested cost. */
typedef struct {
    double *y[2];    /* per function: samples of the tested cost, base [0] and test [1] */
    double *phi;     /* per function: dispersion of its side totals (>= 1) */
    double *df;      /* per function: degrees of freedom of its own dispersion estimate */
    double c[2];     /* samples per side */
    double log_rho;  /* trimmed mean of log share ratios (test/base): the common factor */
    double var_log_rho; /* its variance */
    double alpha;    /* common negative-binomial dispersion per replicate */
    double alpha_g;  /* the same between groups (processes); 0 when not estimated */
    double alpha_g_data, df_g; /* the processes' own estimate of it and its df */
    double mean_rep; /* samples per replicate, both sides */
    double mean_group; /* samples per group (process), both sides; 0 without groups */
    size_t n_tmm;    /* functions the common factor rests on */
} agg_dcount_t;

int agg_dcount_fit(const side_t *b, const side_t *t, uint32_t nk, agg_dcount_t *q);
void agg_dcount_fit_free(agg_dcount_t *q);
/* Two-sided p of function f (quasi-binomial exact test on dispersion-scaled counts), and the
 * smallest p its total could give (for Tarone's filter). */
double agg_dcount_p(const agg_dcount_t *q, uint32_t f, double *p_min);
/* The same test on given side totals with dispersion phi (estimated with df degrees of
 * freedom). */
double agg_dcount_p_totals(const agg_dcount_t *q, double yb, double yt, double phi, double df,
                      double *p_min);
/* opts.fold_callees (diff_fold.c): regressions whose growth lies on a larger one's stacks
 * become noise (a hint names them). mb, mt: the profiles' frames to keys; k2n: key -> entry. */
int agg_diff_fold(agg_diff_t *out, const agg_profile_t *b, const uint32_t *mb,
                  const agg_profile_t *t, const uint32_t *mt, const uint32_t *k2n, uint32_t nk,
                  const agg_dcount_t *cf);
/* Minimum detectable effects at the given power and per-test level. */
double agg_dcount_mde_new(const agg_dcount_t *q, double level, double power);
double agg_dcount_mde_change(const agg_dcount_t *q, double share, double level, double power);

#endif
