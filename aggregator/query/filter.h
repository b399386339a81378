/* Stack filters and views applied before aggregation, after PerfView's stack viewer.
 *
 * Every pattern is a POSIX extended regular expression (bounded and matched in linear time,
 * see pattern.h), unanchored, matched against a frame's label "module!function" (just
 * "function" when the module is unknown), e.g. "^libc\.so" for every frame of libc,
 * "!malloc$" for malloc. The steps run in this order:
 *  1. include (PerfView IncPats): a sample is kept only if, for EVERY include pattern, some
 *     frame of its stack matches it;
 *  2. exclude (ExcPats): a sample is dropped if ANY frame matches ANY exclude pattern;
 *  3. group (GroupPats "pattern->name", and group_by_module): a matching frame is renamed to
 *     the group's name (group_by_module: to its module), and consecutive frames of one group
 *     collapse into one node: everything in libc becomes one "libc.so.6" node. The first
 *     matching rule wins;
 *  4. fold (FoldPats): a matching frame disappears and its cost goes to its caller (the frame
 *     above it). A stack whose frames all match keeps its root frame.
 * The result is a new profile (same replicates and contexts) whose stacks are re-interned.
 *
 * Threading: reads the input profile only.
 */
#ifndef AGG_FILTER_H
#define AGG_FILTER_H

#include "profile.h"

typedef struct {
    const char *pattern; /* ERE */
    const char *name;    /* the group node's name */
} agg_group_rule_t;

typedef struct {
    const char *const *include;
    size_t n_include;
    const char *const *exclude;
    size_t n_exclude;
    const agg_group_rule_t *group;
    size_t n_group;
    int group_by_module;
    const char *const *fold;
    size_t n_fold;
} agg_filter_t;

/* Applies f to in. On success *out is a new profile. On a bad pattern returns CM_EINVAL with
 * "exclude pattern 'x(': parentheses not balanced" in errstr; CM_ENOMEM otherwise. */
int agg_profile_filter(const agg_profile_t *in, const agg_filter_t *f, agg_profile_t **out,
                       char *errstr, size_t errstr_size);

#endif
