/* Rollup: adds one decoded chunk to a batch as deltas of the merged profiles
 * (service, version, type, fine bucket, label set, stack) -> weight, count, rows, chunks;
 * totals per (service, version, type, bucket); interval figures (agent/process CPU, drops);
 * versions (first/last seen); per-function replicate statistics (share per chunk) and, through
 * spanindex.c, the span index. Sample times pick the fine bucket of each row.
 *
 * Threading: an agg_rollup_t (scratch memory) belongs to the consume thread.
 */
#ifndef AGG_ROLLUP_H
#define AGG_ROLLUP_H

#include "batch.h"
#include "intern.h"

typedef struct {
    int64_t fine_width_s;   /* fine bucket width, seconds */
    int64_t coarse_width_s; /* coarse bucket width: the per-stack coarse rollup and fn_stats */
    int span_index;       /* 1: index samples that carry a span context */
    int fn_stats;         /* 1: keep per-function replicate statistics */
    int64_t replicate_width_s; /* bucket width of the per-leaf rollup (a diff's replicates) */
} agg_rollup_cfg_t;

typedef struct {
    agg_rollup_cfg_t cfg;
    int64_t *stack_w;     /* per chunk stack index */
    uint32_t *stack_seen; /* generation stamps */
    int64_t *fn_incl, *fn_self;
    uint32_t *fn_stamp, *fn_touch;
    uint32_t *touched_stacks, *touched_fns;
    size_t stack_cap, fn_cap;
    uint32_t gen;
} agg_rollup_t;

void agg_rollup_init(agg_rollup_t *r, const agg_rollup_cfg_t *cfg);
void agg_rollup_free(agg_rollup_t *r);
/* Adds chunk c (dictionary already interned into ids) to b. Returns 0 or CM_ENOMEM. */
int agg_rollup_chunk(agg_rollup_t *r, agg_batch_t *b, const cm_chunk_t *c,
                     const agg_chunk_ids_t *ids);

#endif
