/* Include/exclude, group and fold filters (see filter.h for the semantics; the patterns and
 * their bounds in pattern.h).
 * Each pattern is evaluated once per frame of the input (not per sample): a frame's matches
 * are bit sets computed up front, then stacks are rewritten once each and rows copied.
 * Threading: reads the input only. */
#include "filter.h"
#include "pattern.h"

#include "cm/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    agg_pattern_t **re;
    size_t n;
} pats_t;

static void pats_free(pats_t *p) {
    for (size_t i = 0; p->re && i < p->n; i++)
        agg_pattern_free(p->re[i]);
    free(p->re);
}

static int pats_compile(pats_t *p, const char *what, const char *const *src, size_t n,
                        size_t stride_bytes, char *errstr, size_t errstr_size) {
    p->n = n;
    p->re = calloc(n + 1, sizeof *p->re);
    if (!p->re)
        return CM_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        const char *pat = *(const char *const *)((const char *)src + i * stride_bytes);
        if (!pat) {
            snprintf(errstr, errstr_size, "%s pattern %zu is missing", what, i);
            return CM_EINVAL;
        }
        char msg[256];
        int rc = agg_pattern_compile(pat, &p->re[i], msg, sizeof msg);
        if (rc == CM_EINVAL)
            snprintf(errstr, errstr_size, "%s pattern '%.*s': %s", what, AGG_PATTERN_MAX_LEN, pat,
                     msg);
        if (rc)
            return rc;
    }
    return 0;
}

int agg_profile_filter(const agg_profile_t *in, const agg_filter_t *f, agg_profile_t **out,
                       char *errstr, size_t errstr_size) {
    pats_t inc = {0}, exc = {0}, grp = {0}, fld = {0};
    agg_profile_t *p = NULL;
    uint32_t *inc_mask = NULL, *newf = NULL, *stackmap = NULL, *buf = NULL;
    uint8_t *excl = NULL, *fold = NULL, *grouped = NULL;
    int rc;
    if (errstr_size)
        errstr[0] = '\0';
    if (f->n_include > 32) {
        snprintf(errstr, errstr_size, "at most 32 include patterns, not %zu", f->n_include);
        return CM_EINVAL;
    }
    if ((rc = pats_compile(&inc, "include", f->include, f->n_include, sizeof(char *), errstr,
                           errstr_size)) ||
        (rc = pats_compile(&exc, "exclude", f->exclude, f->n_exclude, sizeof(char *), errstr,
                           errstr_size)) ||
        (rc = pats_compile(&grp, "group", f->group ? &f->group[0].pattern : NULL, f->n_group,
                           sizeof(agg_group_rule_t), errstr, errstr_size)) ||
        (rc = pats_compile(&fld, "fold", f->fold, f->n_fold, sizeof(char *), errstr,
                           errstr_size)))
        goto out;
    for (size_t i = 0; i < f->n_group; i++)
        if (!f->group[i].name || !f->group[i].name[0]) {
            snprintf(errstr, errstr_size, "group pattern '%s' has no name", f->group[i].pattern);
            rc = CM_EINVAL;
            goto out;
        }
    rc = CM_ENOMEM;
    if (!(p = agg_profile_new(in->type)))
        goto out;
    size_t nf = (size_t)in->n_frames + 1;
    inc_mask = calloc(nf, sizeof *inc_mask);
    excl = calloc(nf, 1);
    fold = calloc(nf, 1);
    newf = malloc(nf * sizeof *newf);
    stackmap = malloc(((size_t)in->n_stacks + 1) * sizeof *stackmap);
    buf = malloc((CM_MAX_STACK_DEPTH + 1) * sizeof *buf);
    grouped = calloc(nf, 1);
    if (!inc_mask || !excl || !fold || !newf || !stackmap || !buf || !grouped)
        goto out;
    /* per frame: which patterns match, and its frame in the output */
    char label[1024];
    for (uint32_t i = 0; i < in->n_frames; i++) {
        const agg_frame_t *fr = &in->frames[i];
        agg_frame_t fn = *fr; /* patterns match the function, with or without source lines */
        fn.name = fr->function ? fr->function : fr->name;
        agg_frame_label(&fn, label, sizeof label);
        for (size_t k = 0; k < inc.n; k++)
            if (agg_pattern_match(inc.re[k], label))
                inc_mask[i] |= 1u << k;
        for (size_t k = 0; k < exc.n && !excl[i]; k++)
            excl[i] = agg_pattern_match(exc.re[k], label);
        for (size_t k = 0; k < fld.n && !fold[i]; k++)
            fold[i] = agg_pattern_match(fld.re[k], label);
        int64_t id = -1;
        for (size_t k = 0; k < grp.n && id < 0; k++)
            if (agg_pattern_match(grp.re[k], label))
                id = agg_profile_frame(p, f->group[k].name, NULL, NULL, 0);
        if (id < 0 && f->group_by_module)
            id = agg_profile_frame(p, fr->module[0] ? fr->module : "[unknown module]", fr->module,
                                   fr->build_id, 0);
        grouped[i] = id >= 0;
        if (id < 0)
            id = agg_profile_frame_src(p, fr->name, fr->module, fr->build_id, fr->address,
                                       fr->function, fr->file, fr->line, fr->inlined);
        if (id < 0)
            goto out;
        newf[i] = (uint32_t)id;
    }
    uint32_t all_inc = inc.n ? (inc.n == 32 ? UINT32_MAX : (1u << inc.n) - 1) : 0;
    for (uint32_t s = 0; s < in->n_stacks; s++) {
        uint32_t a = in->stack_off[s], b = in->stack_off[s + 1], mask = 0, n = 0;
        int drop = 0;
        for (uint32_t k = a; k < b; k++) {
            mask |= inc_mask[in->stack_frames[k]];
            drop |= excl[in->stack_frames[k]];
        }
        if (drop || (mask & all_inc) != all_inc) {
            stackmap[s] = AGG_NONE;
            continue;
        }
        for (uint32_t k = a; k < b; k++) {
            uint32_t of = in->stack_frames[k], nfid = newf[of];
            if (fold[of])
                continue; /* folded: its cost stays with the caller */
            if (n && buf[n - 1] == nfid && grouped[of])
                continue; /* consecutive frames of one group collapse into one node */
            buf[n++] = nfid;
        }
        if (n == 0 && b > a) /* everything folded: keep the root */
            buf[n++] = newf[in->stack_frames[a]];
        int64_t id = agg_profile_stack(p, buf, n);
        if (id < 0) {
            rc = (int)id;
            goto out;
        }
        stackmap[s] = (uint32_t)id;
    }
    for (uint32_t i = 0; i < in->n_replicates; i++)
        if (agg_profile_replicate(p, in->replicates[i].key, in->replicates[i].work) < 0)
            goto out;
    for (uint32_t i = 1; i < in->n_contexts; i++)
        if (agg_profile_context(p, in->contexts[i].trace_id, in->contexts[i].span_id) < 0)
            goto out;
    for (size_t i = 0; i < in->n_rows; i++) {
        const agg_row_t *r = &in->rows[i];
        if (stackmap[r->stack] == AGG_NONE)
            continue;
        if ((rc = agg_profile_add(p, stackmap[r->stack], r->weight, r->count, r->replicate,
                                  r->context)))
            goto out;
    }
    p->time_start_ns = in->time_start_ns;
    p->time_end_ns = in->time_end_ns;
    *out = p;
    p = NULL;
    rc = 0;
out:
    pats_free(&inc);
    pats_free(&exc);
    pats_free(&grp);
    pats_free(&fld);
    agg_profile_free(p);
    free(inc_mask);
    free(excl);
    free(fold);
    free(newf);
    free(stackmap);
    free(buf);
    free(grouped);
    return rc;
}
