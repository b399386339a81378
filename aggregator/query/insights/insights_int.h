/* Private to the insight rules (insights*.c): the evaluation context, the frame categories and
 * the per-site split every share rule builds on. */
#ifndef AGG_INSIGHTS_INT_H
#define AGG_INSIGHTS_INT_H

#include "insights.h"
#include "pattern.h"

enum { INS_CAT_ALLOC, INS_CAT_LOCK, INS_CAT_IO, INS_CAT_SPIN, INS_CAT_EXCEPT, INS_CAT_COPY,
       INS_CAT_KERNEL, INS_CAT_N };
extern const char *const ins_cat_src[INS_CAT_N];

/* How a stack belongs to a category: any frame matches (INS_ANY), the frames ending at the
 * leaf match (INS_LEAF), or any frame, and a stack with none has its leaf as site
 * (INS_FALLBACK_LEAF: lock and I/O profiles, where every sample is a wait). */
enum { INS_ANY, INS_LEAF, INS_FALLBACK_LEAF };

typedef struct {
    const agg_insight_input_t *in;
    const agg_insight_limits_t *lim;
    agg_insights_t *out;
    agg_pattern_t *cat[INS_CAT_N];
} ins_ctx_t;

typedef struct {
    uint32_t frame;
    uint64_t weight, count;
} ins_site_t;

typedef struct {
    uint64_t total, total_count;   /* the whole profile */
    uint64_t in_cat, in_cat_count; /* the stacks in the category */
    ins_site_t *sites;             /* by weight, heaviest first */
    size_t n_sites;
} ins_split_t;

int ins_cats_compile(ins_ctx_t *x);
/* Splits p's stacks of category cat by site. Free out->sites. */
/* site[s] for every stack of p (AGG_NONE: not in the category); *out malloc'ed. */
int ins_stack_sites(const ins_ctx_t *x, const agg_profile_t *p, int cat, int mode,
                    uint32_t **out);
int ins_sites(const ins_ctx_t *x, const agg_profile_t *p, int cat, int mode, ins_split_t *out);
char *ins_include_for(const char *name);
int ins_evidence(agg_insight_t *ins, const char *name, double share, double value, int pattern);
int ins_evidence_sites(agg_insight_t *ins, const agg_profile_t *p, const ins_split_t *sp,
                       double scale, size_t max);
/* Appends a fired insight (taking its evidence); on failure clears it. */
int ins_push(agg_insights_t *r, agg_insight_t *ins);
void ins_insight_clear(agg_insight_t *ins);

int ins_rules_share(ins_ctx_t *x); /* lock, alloc churn, small I/O, spin, exceptions, copy */
int ins_rule_leak(ins_ctx_t *x);
int ins_rule_agent(ins_ctx_t *x);

#endif
