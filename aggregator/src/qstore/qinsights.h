/* The query store's read for the insight rules (aggregator/query/insights/insights.h): the profiles of
 * one service (or one of its versions) over a window, the live heap per time bucket with its
 * number of heap snapshots, and the intervals' process time, agent CPU and drops.
 * Threading: as query_store.h (the handle's thread). */
#ifndef AGG_QINSIGHTS_H
#define AGG_QINSIGHTS_H

#include "insights.h"
#include "query_store.h"

typedef struct {
    agg_profile_t *prof[CM_EV_COUNT]; /* cpu, wall, alloc, lock, io merged; inuse per bucket */
    agg_qgroup_t *targets;            /* the I/O split by the io-target dimension */
    size_t n_targets;
    agg_insight_target_t *tv;         /* the same as the rules read them */
    agg_insight_input_t in;           /* points into the above */
} agg_qinsight_t;

/* Fills out for service (version NULL: every version) over buckets [from_s, to_s). Returns 0
 * or a CM_E* code; free with agg_qinsight_free (also after a failure). */
int agg_qstore_insight_input(agg_qstore_t *qs, const char *service, const char *version,
                             int64_t from_s, int64_t to_s, agg_qinsight_t *out);
void agg_qinsight_free(agg_qinsight_t *x);

#endif
