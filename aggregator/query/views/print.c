/* Text tables for the CLI and the deploy gate (see print.h). Threading: reads only. */
#include "print.h"

#include <math.h>
#include <string.h>

void agg_format_value(cm_event_type_t type, double v, char *buf, size_t size) {
    cm_format_weight(type, v, buf, size);
}

static const char *frame_name(const agg_profile_t *p, uint32_t f) {
    return f == AGG_TREE_OTHER ? "(other)" : f == AGG_NONE ? "(all)" : p->frames[f].name;
}

void agg_top_print(FILE *f, const agg_profile_t *p, const agg_top_t *t) {
    char self[32], total[32];
    agg_format_value(p->type, (double)t->total, total, sizeof total);
    fprintf(f, "%s: total %s, %.0f samples, %zu functions\n", cm_event_name(p->type), total,
            (double)t->total_count / CM_COUNT_ONE, t->n_functions);
    fprintf(f, "%10s %7s %10s %7s %10s  %s\n", "self", "self%", "total", "total%", "samples",
            "function");
    for (size_t i = 0; i < t->n; i++) {
        const agg_top_entry_t *e = &t->entries[i];
        agg_format_value(p->type, (double)e->self, self, sizeof self);
        agg_format_value(p->type, (double)e->total, total, sizeof total);
        double d = t->total ? (double)t->total : 1;
        const agg_frame_t *fr = &p->frames[e->frame];
        fprintf(f, "%10s %6.2f%% %10s %6.2f%% %10.0f  %s", self, 100.0 * e->self / d, total,
                100.0 * e->total / d, (double)e->total_count / CM_COUNT_ONE, fr->name);
        if (fr->module[0] && strcmp(fr->module, fr->name) != 0)
            fprintf(f, "  [%s]", fr->module);
        fputc('\n', f);
    }
    if (t->n_functions > t->n)
        fprintf(f, "(%zu more functions not shown; --limit N shows more)\n",
                t->n_functions - t->n);
}

void agg_lines_note_print(FILE *f, const agg_profile_t *p) {
    for (uint32_t i = 0; i < p->n_frames; i++)
        if (p->frames[i].line)
            return;
    fprintf(f, "(no source lines recorded: run the program with FLEETPROF_LINES=1 in its "
               "environment, or give the aggregator its debug files with --debuginfod-urls)\n");
}

static void tree_rec(FILE *f, const agg_profile_t *p, const agg_tree_t *t, uint32_t i, int depth,
                     double root) {
    const agg_tree_node_t *n = &t->nodes[i];
    char total[32], self[32];
    agg_format_value(p->type, (double)n->total, total, sizeof total);
    agg_format_value(p->type, (double)n->self, self, sizeof self);
    fprintf(f, "%10s %6.2f%% %10s  %*s%s\n", total, root > 0 ? 100.0 * n->total / root : 0.0,
            self, 2 * depth, "", frame_name(p, n->frame));
    for (uint32_t c = n->first_child; c != AGG_NONE; c = t->nodes[c].next_sibling)
        tree_rec(f, p, t, c, depth + 1, root);
}

void agg_tree_print(FILE *f, const agg_profile_t *p, const agg_tree_t *t) {
    if (!t->n)
        return;
    fprintf(f, "%10s %7s %10s  %s\n", "total", "share", "self", "call tree");
    tree_rec(f, p, t, 0, 0, (double)t->nodes[0].total);
    if (t->n_truncated)
        fprintf(f, "(%zu more call paths not shown, summed in the (other) nodes; --min-share F "
                   "and --limit N show more)\n",
                t->n_truncated);
}

static void pct(double v, char *buf, size_t size) {
    if (isfinite(v))
        snprintf(buf, size, "%.0f%%", 100 * v);
    else
        snprintf(buf, size, "-");
}

/* A fraction as a percentage for the MDE line: two significant digits under 10 % (0.0027,
 * 1.1), whole percents above (52, 140). */
static const char *mde_pct(double v, char *buf, size_t size) {
    snprintf(buf, size, 100 * v < 10 ? "%.2g" : "%.0f", 100 * v);
    return buf;
}

void agg_diff_print(FILE *f, const agg_diff_t *d, size_t limit) {
    char b[32], t[32];
    agg_format_value(d->type, d->base_total, b, sizeof b);
    agg_format_value(d->type, d->test_total, t, sizeof t);
    fprintf(f, "%s per %s: base %s, test %s (%+.2f%%)\n", cm_event_name(d->type),
            d->opts.work_unit ? d->opts.work_unit : "process-second", b, t,
            d->base_total > 0 ? 100 * (d->test_total - d->base_total) / d->base_total : 0.0);
    fprintf(f, "samples: base %llu in %u replicates, test %llu in %u replicates\n",
            (unsigned long long)d->base_samples, d->base_replicates,
            (unsigned long long)d->test_samples, d->test_replicates);
    if (isfinite(d->common_ratio))
        fprintf(f, "common factor (load or a uniform change, not attributed to functions): "
                   "%+.2f%%\n", 100 * (d->common_ratio - 1));
    fprintf(f, "%zu functions tested (%s cost, %s, BH q <= %.3g): "
               "%zu regressions, %zu improvements\n",
            d->n_tested, d->opts.test_inclusive ? "total" : "self", agg_diff_test_name(d),
            d->opts.q, d->n_regressions, d->n_improvements);
    if (isfinite(d->mde_new)) {
        fprintf(f, "minimum detectable effect (found with %.0f%% probability with these samples): "
                   "a new function taking >= %s%% of the samples",
                100 * AGG_DIFF_MDE_POWER, mde_pct(d->mde_new, b, sizeof b));
        for (int i = 0; i < AGG_DIFF_MDE_SHARES; i++)
            if (isfinite(d->mde_change[i]))
                fprintf(f, "; a %.0f%% function changed by >= %s%%", 100 * agg_diff_mde_shares[i],
                        mde_pct(d->mde_change[i], b, sizeof b));
        fprintf(f, "\n");
    }
    if (d->warning_text[0])
        fprintf(f, "warning: %s\n", d->warning_text);
    if (d->hint[0])
        fprintf(f, "hint: %s\n", d->hint);
    fprintf(f, "%-11s %10s %10s %8s %10s %8s %9s  %s\n", "class", "base", "test", "change",
            "overweight", "respons.", "q", "function (self cost)");
    /* Rows too small to test say nothing a reader can act on: the text view counts them in one
     * line (JSON lists every row). Tested rows come in the diff's order, up to limit. */
    size_t shown = 0, untested = 0, cut = 0;
    for (size_t i = 0; i < d->n; i++) {
        const agg_diff_entry_t *e = &d->entries[i];
        if (e->cls == AGG_DIFF_UNTESTED) {
            untested++;
            continue;
        }
        if (limit && shown >= limit) {
            cut++;
            continue;
        }
        shown++;
        int incl = d->opts.test_inclusive || e->by_inclusive;
        double base = incl ? e->base_total : e->base_self;
        double test = incl ? e->test_total : e->test_self;
        char ow[16], rs[16], ch[16];
        agg_format_value(d->type, base, b, sizeof b);
        agg_format_value(d->type, test, t, sizeof t);
        pct(e->overweight, ow, sizeof ow);
        pct(e->responsibility, rs, sizeof rs);
        if (base > 0)
            snprintf(ch, sizeof ch, "%+.1f%%", 100 * (test - base) / base);
        else
            snprintf(ch, sizeof ch, test > 0 ? "new" : "-");
        fprintf(f, "%-11s %10s %10s %8s %10s %8s %9.2g  %s%s\n", agg_diff_class_name(e->cls), b,
                t, ch, ow, rs, e->q, e->name,
                e->by_inclusive && !d->opts.test_inclusive ? " (inclusive)" : "");
    }
    if (cut || untested)
        fprintf(f, "(not shown: %zu more tested functions past the limit, %zu with too few samples "
                   "to test; --json lists every function)\n",
                cut, untested);
    fprintf(f, "change: of the tested cost per %s; overweight: the function's total-cost change "
               "over what it would be had it grown like the whole profile (100%% = grew like the "
               "total); respons.: its share of the whole profile's change; both '-' when the "
               "total moved by less than %.3g%%\n",
            d->opts.work_unit ? d->opts.work_unit : "process-second", 100 * d->opts.min_rel_change);
}

int agg_diff_gate(const agg_diff_t *d, double pct_limit, char *why, size_t why_size) {
    if (why_size)
        why[0] = '\0';
    for (size_t i = 0; i < d->n; i++) {
        const agg_diff_entry_t *e = &d->entries[i];
        if (e->cls != AGG_DIFF_REGRESSION)
            continue;
        double delta = d->opts.test_inclusive ? e->delta_total : e->delta_self;
        double share = d->base_total > 0 ? 100 * delta / d->base_total : INFINITY;
        if (share >= pct_limit) {
            snprintf(why, why_size, "%s regressed by %.2f%% of the base total (limit %.2f%%, q=%.2g)",
                     e->name, share, pct_limit, e->q);
            return 1;
        }
    }
    return 0;
}
