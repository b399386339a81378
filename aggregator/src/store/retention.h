/* Retention schedule: fine buckets older than downsample-after are merged into coarse buckets
 * (sums unchanged), rollups older than max-age are deleted, the span index keeps span-max-age,
 * and chunk ids are remembered for dedupe-window. Cutoffs are aligned to coarse boundaries so
 * a coarse bucket is only ever built from whole fine buckets.
 * Threading: runs on the thread that owns the store (the consume thread, between batches).
 */
#ifndef AGG_RETENTION_H
#define AGG_RETENTION_H

#include "store.h"

#include <stdint.h>

typedef struct {
    int64_t fine_s, coarse_s;   /* bucket widths, seconds; coarse is a multiple of fine */
    int64_t downsample_after_s; /* age after which fine buckets become coarse */
    int64_t max_age_s;          /* age after which rollups are deleted */
    int64_t span_max_age_s;     /* span index retention */
    int64_t dedupe_window_s;    /* how long chunk ids are remembered */
} agg_retention_cfg_t;

/* Validates the schedule; fills err with what is wrong and how to fix it. Returns 0 or
 * CM_ECONFIG. */
int agg_retention_check(const agg_retention_cfg_t *cfg, char *err, size_t err_size);
/* One pass over a store at wall-clock now_ns. Returns 0 or a negative code. */
int agg_retention_run(agg_store_t *st, const agg_retention_cfg_t *cfg, int64_t now_ns,
                      agg_retention_stats_t *stats);

#endif
