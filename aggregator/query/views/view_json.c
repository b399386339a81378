/* JSON renderings of the views (top, tree, callers) with jansson. Values are integers in the
 * event type's unit; sample counts are events (milli-events / 1000, as reals). Threading: reads
 * the profile and the result only. */
#include "views.h"

#include <math.h>

static json_t *frame_json(const agg_profile_t *p, uint32_t f) {
    if (f == AGG_TREE_OTHER)
        return json_pack("{s:s, s:s}", "name", "(other)", "module", "");
    if (f == AGG_NONE)
        return json_pack("{s:s, s:s}", "name", "(all)", "module", "");
    const agg_frame_t *fr = &p->frames[f];
    if (fr->kind != AGG_KIND_NATIVE) /* the code's runtime: only where it is not native */
        return json_pack("{s:s, s:s, s:s}", "name", fr->name, "module", fr->module, "kind",
                         agg_kind_name(fr->kind));
    return json_pack("{s:s, s:s}", "name", fr->name, "module", fr->module);
}

static json_t *header(const agg_profile_t *p, uint64_t total, uint64_t count) {
    return json_pack("{s:s, s:s, s:I, s:f}", "event_type", cm_event_name(p->type), "unit",
                     agg_event_unit(p->type), "total", (json_int_t)total, "samples",
                     (double)count / CM_COUNT_ONE);
}

json_t *agg_top_json(const agg_profile_t *p, const agg_top_t *t) {
    json_t *o = header(p, t->total, t->total_count), *arr = json_array();
    if (!o || !arr)
        goto fail;
    for (size_t i = 0; i < t->n; i++) {
        const agg_top_entry_t *e = &t->entries[i];
        json_t *x = frame_json(p, e->frame);
        if (!x || json_object_update_new(x, json_pack("{s:I, s:I, s:f, s:f, s:f, s:f}", "self",
                                                      (json_int_t)e->self, "total",
                                                      (json_int_t)e->total, "self_share",
                                                      t->total ? (double)e->self / t->total : 0.0,
                                                      "total_share",
                                                      t->total ? (double)e->total / t->total : 0.0,
                                                      "self_samples",
                                                      (double)e->self_count / CM_COUNT_ONE,
                                                      "total_samples",
                                                      (double)e->total_count / CM_COUNT_ONE)) ||
            json_array_append_new(arr, x))
            goto fail;
    }
    json_object_set_new(o, "functions", arr);
    json_object_set_new(o, "n_functions", json_integer((json_int_t)t->n_functions));
    return o;
fail:
    json_decref(o);
    json_decref(arr);
    return NULL;
}

/* Nested rendering; depth is bounded by CM_MAX_STACK_DEPTH + 1. */
static json_t *node_json(const agg_profile_t *p, const agg_tree_t *t, uint32_t i) {
    const agg_tree_node_t *n = &t->nodes[i];
    json_t *o = frame_json(p, n->frame), *kids = json_array();
    if (!o || !kids)
        goto fail;
    if (json_object_update_new(o, json_pack("{s:I, s:I, s:f}", "total", (json_int_t)n->total,
                                            "self", (json_int_t)n->self, "samples",
                                            (double)n->total_count / CM_COUNT_ONE)))
        goto fail;
    for (uint32_t c = n->first_child; c != AGG_NONE; c = t->nodes[c].next_sibling) {
        json_t *k = node_json(p, t, c);
        if (!k || json_array_append_new(kids, k))
            goto fail;
    }
    json_object_set_new(o, "children", kids);
    return o;
fail:
    json_decref(o);
    json_decref(kids);
    return NULL;
}

json_t *agg_tree_json(const agg_profile_t *p, const agg_tree_t *t) {
    if (!t->n)
        return NULL;
    json_t *o = header(p, t->nodes[0].total, t->nodes[0].total_count);
    json_t *root = node_json(p, t, 0);
    if (!o || !root) {
        json_decref(o);
        json_decref(root);
        return NULL;
    }
    json_object_set_new(o, "root", root);
    json_object_set_new(o, "nodes", json_integer((json_int_t)t->n));
    json_object_set_new(o, "truncated_paths", json_integer((json_int_t)t->n_truncated));
    return o;
}

static json_t *edges_json(const agg_profile_t *p, const agg_edge_t *e, size_t n) {
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        json_t *x = frame_json(p, e[i].frame);
        if (!x || json_object_update_new(x, json_pack("{s:I, s:f}", "value", (json_int_t)e[i].value,
                                                      "samples",
                                                      (double)e[i].count / CM_COUNT_ONE)) ||
            json_array_append_new(arr, x)) {
            json_decref(arr);
            return NULL;
        }
    }
    return arr;
}

json_t *agg_callers_json(const agg_profile_t *p, const agg_callers_t *c) {
    json_t *o = json_pack("{s:s, s:s, s:o, s:I, s:I, s:f, s:o, s:o}", "event_type",
                          cm_event_name(p->type), "unit", agg_event_unit(p->type), "function",
                          frame_json(p, c->frame), "total", (json_int_t)c->total, "self",
                          (json_int_t)c->self, "samples", (double)c->total_count / CM_COUNT_ONE,
                          "callers", edges_json(p, c->callers, c->n_callers), "callees",
                          edges_json(p, c->callees, c->n_callees));
    return o;
}
