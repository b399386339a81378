/* Comparing two profiles of one service and event type (version A against version B, or one
 * time range against another): per function, base and test values per unit of work, the
 * change, PerfView's overweight and responsibility, and a replicate-based significance test
 * with Benjamini-Hochberg control of the false discovery rate. See README.md for the maths and
 * the assumptions.
 *
 * Functions are matched across the two profiles by (name, module). The result owns copies of
 * the names; the profiles need not outlive it. Threading: reads both profiles; no global state.
 */
#ifndef AGG_DIFF_H
#define AGG_DIFF_H

#include "profile.h"

#include <jansson.h>

typedef enum {
    AGG_DIFF_WELCH = 0,   /* per-replicate rates, Welch's t-test (the test before the count
                           * test; for comparison) */
    AGG_DIFF_POISSON = 1, /* naive: every sample independent (for comparison only; do not use) */
    AGG_DIFF_COUNT = 2,   /* per-replicate sample counts, over-dispersed binomial (default) */
} agg_diff_method_t;

#define AGG_DIFF_BH_LARGE_WEIGHT 0.1 /* opts.bh_large_weight's default (README "The diff") */
#define AGG_DIFF_MDE_POWER 0.9 /* the minimum detectable effects are at this power */
#define AGG_DIFF_MDE_SHARES 3  /* shares the minimum detectable change is given for */
extern const double agg_diff_mde_shares[AGG_DIFF_MDE_SHARES]; /* 0.05, 0.2, 0.5 */

typedef struct {
    double q;                  /* false discovery rate (BH), default 0.01 */
    double min_rel_change;     /* significant only if |delta| >= this * base value; 0.01 */
    double min_abs_share;      /* ... and |delta| >= this * base total; default 0.001 */
    double min_responsibility; /* "interesting": |responsibility| >= this; default 0.02 */
    uint64_t min_samples;      /* tested only with >= this many samples, both sides; 10 */
    uint64_t warn_samples;     /* warn when a side has fewer samples; default 1000 */
    uint32_t warn_replicates;  /* warn when a side has fewer replicates; default 5 */
    int test_inclusive;        /* 0: test self cost (default; and callers' inclusive cost
                                * when no self-cost finding lies under them); 1: inclusive */
    int no_callers;            /* 1: self cost only, no caller's inclusive test (an incident's
                                * diff: the work a spike starves is no finding of its own) */
    int common_from_work;      /* count test: the common factor from the sides' work, not TMM:
                                * a function is unchanged when its cost per unit of work is (an
                                * incident's diff per request: its few functions leave TMM
                                * nothing to rest on, and the spike takes every share) */
    int fold_callees;          /* count test of self cost: a regression whose growth lies on a
                                * larger regression's stacks is folded into it (diff_fold.c) */
    double bh_large_weight;    /* count test: the part of BH's budget given in proportion to
                                * the functions' shares (weighted BH); AGG_DIFF_BH_LARGE_WEIGHT */
    agg_diff_method_t method;
    const char *work_unit;     /* what the replicates' work counts: "process-second" (default)
                                * or "request"; a static string, for outputs */
} agg_diff_opts_t;

void agg_diff_opts_default(agg_diff_opts_t *o);

typedef enum {
    AGG_DIFF_NOISE = 0,      /* tested, not significant */
    AGG_DIFF_REGRESSION = 1, /* significant increase */
    AGG_DIFF_IMPROVEMENT = 2,
    AGG_DIFF_UNTESTED = 3, /* too few samples or replicates */
} agg_diff_class_t;

typedef struct {
    const char *name, *module;     /* owned by the result */
    double base_total, test_total; /* inclusive (recursion once), per unit of work */
    double base_self, test_self;   /* per unit of work */
    double delta_total, delta_self;
    double overweight;           /* inclusive: delta / (base * r); NAN when undefined */
    double responsibility;       /* inclusive: delta / (T_test - T_base); NAN when T equal */
    double self_responsibility;  /* delta_self / (T_test - T_base) */
    double p, q;                 /* of the tested quantity; 1 when untested */
    double p_incl, q_incl;       /* a caller's inclusive cost (default self-cost diff) */
    double rel_incl;             /* ... its relative change, common factor removed; NAN */
    int by_inclusive;            /* classed by its inclusive cost: no self finding on its stacks */
    double norm_base, norm_test; /* tested means: rate / common factor, per replicate */
    uint64_t base_samples, test_samples; /* samples with the function on the stack */
    agg_diff_class_t cls;
    int interesting; /* |responsibility| >= min_responsibility */
} agg_diff_entry_t;

#define AGG_DIFF_WARN_BASE_SAMPLES 0x1u
#define AGG_DIFF_WARN_TEST_SAMPLES 0x2u
#define AGG_DIFF_WARN_BASE_REPLICATES 0x4u
#define AGG_DIFF_WARN_TEST_REPLICATES 0x8u
#define AGG_DIFF_WARN_NO_WORK 0x10u /* a side has no work: values are not normalised */
#define AGG_DIFF_WARN_NO_REFERENCE 0x20u /* no common factor could be estimated */

typedef struct {
    cm_event_type_t type;
    agg_diff_opts_t opts;
    agg_diff_entry_t *entries; /* regressions, then improvements, then the rest */
    size_t n;
    double base_total, test_total; /* per unit of work */
    double base_work, test_work;   /* sum of replicate work */
    uint64_t base_samples, test_samples;
    uint32_t base_replicates, test_replicates; /* with work > 0 */
    size_t n_tested, n_regressions, n_improvements;
    size_t n_bh; /* tests BH counted (count test: those that could reach q, Tarone) */
    size_t n_reference;  /* functions the common factor rests on (0: not estimated) */
    double common_ratio; /* test/base geometric mean of the common factor: the shift that
                          * moved every function alike (load or a uniform change); NAN if none */
    /* minimum detectable effects (count test; NAN when not computable): a new function
     * taking >= mde_new of the samples, or a function of share agg_diff_mde_shares[i] changed
     * by >= mde_change[i] (relative), is found with probability AGG_DIFF_MDE_POWER */
    double mde_new;
    double mde_change[AGG_DIFF_MDE_SHARES];
    double dispersion;   /* count test: common negative-binomial dispersion per replicate */
    double dispersion_g; /* ... between processes (0 when the replicates have no groups) */
    double dispersion_g_data, dispersion_g_df; /* the processes' own estimate, its df */
    /* count test of self cost: the callers classed by their inclusive cost, and why ("" when
     * none) */
    char hint[512];
    unsigned warnings;   /* AGG_DIFF_WARN_* */
    char warning_text[512];
    void *owner_;        /* private: the strings */
} agg_diff_t;

/* Computes the diff of test against base. Both must have the same event type (CM_EINVAL
 * otherwise). opts may be NULL for the defaults. Returns 0 or CM_EINVAL / CM_ENOMEM. Release
 * with agg_diff_free(). */
int agg_diff_compute(const agg_profile_t *base, const agg_profile_t *test,
                     const agg_diff_opts_t *opts, agg_diff_t *out);
void agg_diff_free(agg_diff_t *d);

const char *agg_diff_class_name(agg_diff_class_t c);
/* The test's name for outputs ("over-dispersed count test ...", "welch t ...", "poisson"). */
const char *agg_diff_test_name(const agg_diff_t *d);

/* Samples per side a diff needs so that a new function taking `share` of the samples is found
 * with probability AGG_DIFF_MDE_POWER, when n_tested functions are tested at FDR q (equal
 * sides, no dispersion: a new function's samples are Poisson). For waiting on a deploy. */
double agg_diff_samples_needed(double share, double q, size_t n_tested);

/* JSON: {event_type, unit, unit_of_work, totals, samples, replicates, warnings[], q,
 * regressions, improvements, entries: [...]}; limit 0 = all entries. */
json_t *agg_diff_json(const agg_diff_t *d, size_t limit);

#endif
