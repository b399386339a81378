/* JSON rendering of a diff. NAN values (overweight of a new function, responsibility when the
 * totals are equal) are null. Threading: reads the result only. */
#include "diff.h"
#include "views.h"

#include <math.h>
#include <string.h>

static json_t *num(double v) { return isfinite(v) ? json_real(v) : json_null(); }

json_t *agg_diff_json(const agg_diff_t *d, size_t limit) {
    json_t *o = json_object(), *arr = json_array(), *warn = json_array();
    if (!o || !arr || !warn)
        goto fail;
    size_t n = limit && limit < d->n ? limit : d->n;
    for (size_t i = 0; i < n; i++) {
        const agg_diff_entry_t *e = &d->entries[i];
        json_t *x = json_object();
        if (!x || json_array_append_new(arr, x))
            goto fail;
        json_object_set_new(x, "name", json_string(e->name));
        json_object_set_new(x, "module", json_string(e->module));
        json_object_set_new(x, "class", json_string(agg_diff_class_name(e->cls)));
        json_object_set_new(x, "base_total", num(e->base_total));
        json_object_set_new(x, "test_total", num(e->test_total));
        json_object_set_new(x, "base_self", num(e->base_self));
        json_object_set_new(x, "test_self", num(e->test_self));
        json_object_set_new(x, "delta_total", num(e->delta_total));
        json_object_set_new(x, "delta_self", num(e->delta_self));
        json_object_set_new(x, "overweight", num(e->overweight));
        json_object_set_new(x, "responsibility", num(e->responsibility));
        json_object_set_new(x, "self_responsibility", num(e->self_responsibility));
        json_object_set_new(x, "norm_base", num(e->norm_base));
        json_object_set_new(x, "norm_test", num(e->norm_test));
        json_object_set_new(x, "p", num(e->p));
        json_object_set_new(x, "q", num(e->q));
        /* classed by its inclusive cost: a caller with no self-cost finding on its stacks */
        json_object_set_new(x, "by_inclusive", json_boolean(e->by_inclusive));
        json_object_set_new(x, "base_samples", json_integer((json_int_t)e->base_samples));
        json_object_set_new(x, "test_samples", json_integer((json_int_t)e->test_samples));
        json_object_set_new(x, "interesting", json_boolean(e->interesting));
    }
    if (d->warning_text[0]) {
        /* the text is "a; b; c" */
        const char *s = d->warning_text;
        while (*s) {
            const char *e = strstr(s, "; ");
            size_t len = e ? (size_t)(e - s) : strlen(s);
            json_array_append_new(warn, json_stringn(s, len));
            s += len + (e ? 2 : 0);
        }
    }
    json_object_set_new(o, "event_type", json_string(cm_event_name(d->type)));
    json_object_set_new(o, "unit", json_string(agg_event_unit(d->type)));
    json_object_set_new(o, "per", json_string(d->opts.work_unit ? d->opts.work_unit : "process-second"));
    json_object_set_new(o, "base_total", num(d->base_total));
    json_object_set_new(o, "test_total", num(d->test_total));
    json_object_set_new(o, "base_work", num(d->base_work));
    json_object_set_new(o, "test_work", num(d->test_work));
    json_object_set_new(o, "base_samples", json_integer((json_int_t)d->base_samples));
    json_object_set_new(o, "test_samples", json_integer((json_int_t)d->test_samples));
    json_object_set_new(o, "base_replicates", json_integer(d->base_replicates));
    json_object_set_new(o, "test_replicates", json_integer(d->test_replicates));
    json_object_set_new(o, "test", json_string(agg_diff_test_name(d)));
    json_t *mde = json_object(), *ch = json_array();
    json_object_set_new(mde, "power", json_real(AGG_DIFF_MDE_POWER));
    json_object_set_new(mde, "new_function_share", num(d->mde_new));
    for (int i = 0; i < AGG_DIFF_MDE_SHARES; i++) {
        json_t *x = json_object();
        json_object_set_new(x, "share", json_real(agg_diff_mde_shares[i]));
        json_object_set_new(x, "change", num(d->mde_change[i]));
        json_array_append_new(ch, x);
    }
    json_object_set_new(mde, "changed_function", ch);
    json_object_set_new(o, "min_detectable_effect", mde);
    json_object_set_new(o, "dispersion", num(d->dispersion));
    json_object_set_new(o, "dispersion_between_processes", num(d->dispersion_g));
    json_object_set_new(o, "dispersion_between_processes_data", num(d->dispersion_g_data));
    json_object_set_new(o, "dispersion_between_processes_df", num(d->dispersion_g_df));
    json_object_set_new(o, "hint", d->hint[0] ? json_string(d->hint) : json_null());
    json_object_set_new(o, "tested_cost", json_string(d->opts.test_inclusive ? "total" : "self"));
    json_object_set_new(o, "reference_functions", json_integer((json_int_t)d->n_reference));
    json_object_set_new(o, "common_ratio", num(d->common_ratio));
    json_object_set_new(o, "q_level", json_real(d->opts.q));
    json_object_set_new(o, "tested", json_integer((json_int_t)d->n_tested));
    json_object_set_new(o, "regressions", json_integer((json_int_t)d->n_regressions));
    json_object_set_new(o, "improvements", json_integer((json_int_t)d->n_improvements));
    json_object_set_new(o, "warnings", warn);
    json_object_set_new(o, "entries", arr);
    return o;
fail:
    json_decref(o);
    json_decref(arr);
    json_decref(warn);
    return NULL;
}
