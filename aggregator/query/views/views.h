/* Analysis views of one profile (PerfView's stack viewer, the profiling UIs): top functions
 * (bottom-up, self and total), the call tree (top-down, truncated with the remainder
 * accounted), callers and callees of one function.
 *
 * "Recursion counted once per sample": a function that appears several times in one stack
 * adds that stack's value once to its total (and once to each distinct caller/callee edge).
 *
 * Results own their arrays and point into the profile's frame table (frame ids): the profile
 * must outlive them. Threading: views only read the profile; results belong to the caller.
 */
#ifndef AGG_VIEWS_H
#define AGG_VIEWS_H

#include "profile.h"

#include <jansson.h>

typedef struct {
    uint32_t frame;
    uint64_t self, total;             /* weight, event type's unit */
    uint64_t self_count, total_count; /* milli-events */
} agg_top_entry_t;

typedef enum { AGG_SORT_SELF = 0, AGG_SORT_TOTAL = 1 } agg_sort_t;

typedef struct {
    agg_top_entry_t *entries; /* sorted, at most limit */
    size_t n;
    size_t n_functions;       /* functions with a non-zero total before the limit */
    uint64_t total, total_count;
} agg_top_t;

/* Top functions sorted by self (or total) weight, then name; limit 0 = all. Returns 0 or
 * CM_ENOMEM. Release with agg_top_free(). */
int agg_top_compute(const agg_profile_t *p, agg_sort_t sort, size_t limit, agg_top_t *out);
void agg_top_free(agg_top_t *t);

#define AGG_TREE_OTHER (UINT32_MAX - 1) /* frame id of an "(other)" node */

typedef struct {
    uint32_t frame;        /* frame id, AGG_TREE_OTHER for "(other)", AGG_NONE for the root */
    uint32_t parent;       /* node index, AGG_NONE for the root */
    uint32_t first_child;  /* node index or AGG_NONE; children sorted by total, "(other)" last */
    uint32_t next_sibling; /* node index or AGG_NONE */
    uint64_t total, self;  /* total = self + sum(children totals) (other included) */
    uint64_t total_count;
} agg_tree_node_t;

typedef struct {
    agg_tree_node_t *nodes; /* nodes[0] is the root "(all)" */
    size_t n;
    size_t n_truncated; /* call paths folded into "(other)" nodes */
} agg_tree_t;

/* Call tree top-down. A node is kept when its total is at least min_share of the root's
 * total; at most max_nodes nodes (0 = no limit) are kept, the largest totals first (a parent
 * is never smaller than its child, so the kept nodes form a tree). Each kept parent whose
 * children were dropped gets one "(other)" child with their sum, so at every node
 * total = self + sum of children's totals. Returns 0, CM_EINVAL (min_share not in [0,1)) or
 * CM_ENOMEM. Release with agg_tree_free(). */
int agg_tree_compute(const agg_profile_t *p, double min_share, size_t max_nodes, agg_tree_t *out);
void agg_tree_free(agg_tree_t *t);

typedef struct {
    uint32_t frame;
    uint64_t value; /* weight of the samples with this caller (or callee) of the function */
    uint64_t count;
} agg_edge_t;

typedef struct {
    uint32_t frame;           /* the focus function */
    uint64_t total, self;     /* its total (once per sample) and self weight */
    uint64_t total_count;
    agg_edge_t *callers;      /* sorted by value; "root" samples have no caller entry */
    size_t n_callers;
    agg_edge_t *callees;      /* sorted by value */
    size_t n_callees;
} agg_callers_t;

/* Callers and callees of frame id `frame`. Returns 0, CM_ERANGE or CM_ENOMEM. */
int agg_callers_compute(const agg_profile_t *p, uint32_t frame, agg_callers_t *out);
void agg_callers_free(agg_callers_t *c);

/* Finds a frame id by its function name (first match, or "module!name" label). Returns the
 * id or AGG_NONE. */
uint32_t agg_profile_find_frame(const agg_profile_t *p, const char *name);

/* JSON renderings (jansson; the caller owns the returned reference; NULL when out of memory).
 * Values are in the event type's unit, with "unit" and "event_type" stated. */
json_t *agg_top_json(const agg_profile_t *p, const agg_top_t *t);
json_t *agg_tree_json(const agg_profile_t *p, const agg_tree_t *t);
json_t *agg_callers_json(const agg_profile_t *p, const agg_callers_t *c);

/* Unit name of an event type's weight: "nanoseconds" or "bytes". */
const char *agg_event_unit(cm_event_type_t type);

#endif
