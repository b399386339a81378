/* Ranking of spans by sampled cost and its JSON. Threading: pure; the qsort context is a
 * thread-local. */
#include "span.h"

#include <stdlib.h>
#include <string.h>

static _Thread_local cm_event_type_t tl_type;

static int cmp_span(const void *a, const void *b) {
    const agg_span_cost_t *x = a, *y = b;
    if (x->value[tl_type] != y->value[tl_type])
        return x->value[tl_type] < y->value[tl_type] ? 1 : -1;
    if (x->count[tl_type] != y->count[tl_type])
        return x->count[tl_type] < y->count[tl_type] ? 1 : -1;
    int c = memcmp(x->trace_id, y->trace_id, 16);
    return c ? c : memcmp(x->span_id, y->span_id, 8);
}

size_t agg_span_rank(agg_span_cost_t *spans, size_t n, cm_event_type_t type, size_t limit) {
    if ((unsigned)type >= CM_EV_COUNT)
        return 0;
    tl_type = type;
    qsort(spans, n, sizeof *spans, cmp_span);
    return limit && limit < n ? limit : n;
}

void agg_span_cost_add(agg_span_cost_t *s, cm_event_type_t type, uint64_t weight, uint64_t count,
                       uint64_t time_ns) {
    if ((unsigned)type >= CM_EV_COUNT)
        return;
    s->value[type] += weight;
    s->count[type] += count;
    if (time_ns && (!s->start_ns || time_ns < s->start_ns))
        s->start_ns = time_ns;
    if (time_ns > s->end_ns)
        s->end_ns = time_ns;
}

json_t *agg_span_json(const agg_span_cost_t *spans, size_t n, cm_event_type_t ranked_by) {
    json_t *arr = json_array();
    if (!arr)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        char trace[33], span[17];
        cm_hex(spans[i].trace_id, 16, trace);
        cm_hex(spans[i].span_id, 8, span);
        json_t *cost = json_object(), *samples = json_object();
        for (int t = 1; t <= CM_EV_MAX; t++) {
            if (!spans[i].value[t] && !spans[i].count[t])
                continue;
            json_object_set_new(cost, cm_event_name((uint32_t)t), json_integer((json_int_t)spans[i].value[t]));
            json_object_set_new(samples, cm_event_name((uint32_t)t),
                                json_real((double)spans[i].count[t] / CM_COUNT_ONE));
        }
        json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:o, s:I, s:I}", "trace_id", trace, "span_id",
                              span, "ranked_by", cm_event_name(ranked_by), "cost", cost,
                              "samples", samples, "start_ns", (json_int_t)spans[i].start_ns,
                              "end_ns", (json_int_t)spans[i].end_ns);
        if (!o || json_array_append_new(arr, o)) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}
