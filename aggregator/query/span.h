/* Span drill-down helpers: per-span costs (the store provides one row per span, summed over
 * its samples) ranked by one event type, and their JSON. The profile of one span is
 * agg_profile_select_context() on a profile whose rows carry contexts.
 * Threading: pure functions over caller-owned arrays. */
#ifndef AGG_SPAN_H
#define AGG_SPAN_H

#include "cm/chunk.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t trace_id[16];
    uint8_t span_id[8];
    uint64_t value[CM_EV_COUNT]; /* sampled cost per event type (ns or bytes) */
    uint64_t count[CM_EV_COUNT]; /* milli-events per event type */
    uint64_t start_ns, end_ns;   /* first and last sample time seen, 0 unknown */
} agg_span_cost_t;

/* Sorts spans in place by value[type] descending (then count, then span id) and returns the
 * number to show: min(n, limit), limit 0 = all. */
size_t agg_span_rank(agg_span_cost_t *spans, size_t n, cm_event_type_t type, size_t limit);

/* Adds (weight, count) of one sample or row of event type `type` to the span's totals. */
void agg_span_cost_add(agg_span_cost_t *s, cm_event_type_t type, uint64_t weight, uint64_t count,
                       uint64_t time_ns);

/* JSON array of the first n spans: {trace_id, span_id, samples, cost: {cpu: ns, ...}}. */
json_t *agg_span_json(const agg_span_cost_t *spans, size_t n, cm_event_type_t ranked_by);

#endif
