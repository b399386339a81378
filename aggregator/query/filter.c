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

/* The compiled patterns of a filter. */
typedef struct {
    pats_t inc, exc, grp, fld;
} filt_pats_t;

static void filt_pats_free(filt_pats_t *fp) {
    pats_free(&fp->inc);
    pats_free(&fp->exc);
    pats_free(&fp->grp);
    pats_free(&fp->fld);
}

/* Compiles f's patterns into fp and checks the group names. 0, CM_EINVAL (errstr says why)
 * or CM_ENOMEM; the caller frees fp either way. */
static int filt_compile(const agg_filter_t *f, filt_pats_t *fp, char *errstr, size_t errstr_size) {
    int rc;
    if (f->n_include > 32) {
        snprintf(errstr, errstr_size, "at most 32 include patterns, not %zu", f->n_include);
        return CM_EINVAL;
    }
    if ((rc = pats_compile(&fp->inc, "include", f->include, f->n_include, sizeof(char *), errstr,
                           errstr_size)) ||
        (rc = pats_compile(&fp->exc, "exclude", f->exclude, f->n_exclude, sizeof(char *), errstr,
                           errstr_size)) ||
        (rc = pats_compile(&fp->grp, "group", f->group ? &f->group[0].pattern : NULL, f->n_group,
                           sizeof(agg_group_rule_t), errstr, errstr_size)) ||
        (rc = pats_compile(&fp->fld, "fold", f->fold, f->n_fold, sizeof(char *), errstr,
                           errstr_size)))
        return rc;
    for (size_t i = 0; i < f->n_group; i++)
        if (!f->group[i].name || !f->group[i].name[0]) {
            snprintf(errstr, errstr_size, "group pattern '%s' has no name", f->group[i].pattern);
            return CM_EINVAL;
        }
    return 0;
}

/* Per input frame: which patterns match it, and its frame in the output. */
typedef struct {
    uint32_t *inc_mask; /* bit k: include pattern k matches */
    uint8_t *excl, *fold, *grouped;
    uint32_t *newf; /* output frame id */
} frame_match_t;

/* Fills fm for every frame of in, adding the output frames (groups, modules or the frame
 * itself) to p. 0 or a negative error. */
static int filt_match_frames(const agg_profile_t *in, const agg_filter_t *f,
                             const filt_pats_t *fp, agg_profile_t *p, frame_match_t *fm) {
    char label[1024];
    for (uint32_t i = 0; i < in->n_frames; i++) {
        const agg_frame_t *fr = &in->frames[i];
        agg_frame_t fn = *fr; /* patterns match the function, with or without source lines */
        fn.name = fr->function ? fr->function : fr->name;
        agg_frame_label(&fn, label, sizeof label);
        for (size_t k = 0; k < fp->inc.n; k++)
            if (agg_pattern_match(fp->inc.re[k], label))
                fm->inc_mask[i] |= 1u << k;
        for (size_t k = 0; k < fp->exc.n && !fm->excl[i]; k++)
            fm->excl[i] = agg_pattern_match(fp->exc.re[k], label);
        for (size_t k = 0; k < fp->fld.n && !fm->fold[i]; k++)
            fm->fold[i] = agg_pattern_match(fp->fld.re[k], label);
        int64_t id = -1;
        for (size_t k = 0; k < fp->grp.n && id < 0; k++)
            if (agg_pattern_match(fp->grp.re[k], label))
                id = agg_profile_frame(p, f->group[k].name, NULL, NULL, 0);
        if (id < 0 && f->group_by_module)
            id = agg_profile_frame(p, fr->module[0] ? fr->module : "[unknown module]", fr->module,
                                   fr->build_id, 0);
        fm->grouped[i] = id >= 0;
        if (id < 0) {
            uint8_t kind = fr->kind;
            id = agg_profile_frame_src(p, fr->name, fr->module, fr->build_id, fr->address,
                                       fr->function, fr->file, fr->line, fr->inlined);
            if (id >= 0)
                p->frames[id].kind = kind;
        }
        if (id < 0)
            return (int)id;
        fm->newf[i] = (uint32_t)id;
    }
    return 0;
}

/* Rewrites each stack of in into p (stackmap: input stack -> output stack, AGG_NONE when
 * dropped by include/exclude). buf holds CM_MAX_STACK_DEPTH + 1 frames. */
static int filt_stacks(const agg_profile_t *in, size_t n_inc, const frame_match_t *fm,
                       agg_profile_t *p, uint32_t *stackmap, uint32_t *buf) {
    uint32_t all_inc = n_inc ? (n_inc == 32 ? UINT32_MAX : (1u << n_inc) - 1) : 0;
    for (uint32_t s = 0; s < in->n_stacks; s++) {
        uint32_t a = in->stack_off[s], b = in->stack_off[s + 1], mask = 0, n = 0;
        int drop = 0;
        for (uint32_t k = a; k < b; k++) {
            mask |= fm->inc_mask[in->stack_frames[k]];
            drop |= fm->excl[in->stack_frames[k]];
        }
        if (drop || (mask & all_inc) != all_inc) {
            stackmap[s] = AGG_NONE;
            continue;
        }
        for (uint32_t k = a; k < b; k++) {
            uint32_t of = in->stack_frames[k], nfid = fm->newf[of];
            if (fm->fold[of])
                continue; /* folded: its cost stays with the caller */
            if (n && buf[n - 1] == nfid && fm->grouped[of])
                continue; /* consecutive frames of one group collapse into one node */
            buf[n++] = nfid;
        }
        if (n == 0 && b > a) /* everything folded: keep the root */
            buf[n++] = fm->newf[in->stack_frames[a]];
        int64_t id = agg_profile_stack(p, buf, n);
        if (id < 0)
            return (int)id;
        stackmap[s] = (uint32_t)id;
    }
    return 0;
}

/* Replicates, contexts and the rows of the kept stacks. 0 or a negative error. */
static int filt_rows(const agg_profile_t *in, const uint32_t *stackmap, agg_profile_t *p) {
    for (uint32_t i = 0; i < in->n_replicates; i++) { /* with their process groups */
        int64_t id = agg_profile_replicate(p, in->replicates[i].key, in->replicates[i].work);
        if (id < 0)
            return CM_ENOMEM;
        agg_profile_replicate_group(p, (uint32_t)id, in->replicates[i].group);
    }
    for (uint32_t i = 1; i < in->n_contexts; i++)
        if (agg_profile_context(p, in->contexts[i].trace_id, in->contexts[i].span_id) < 0)
            return CM_ENOMEM;
    for (size_t i = 0; i < in->n_rows; i++) {
        const agg_row_t *r = &in->rows[i];
        if (stackmap[r->stack] == AGG_NONE)
            continue;
        int rc = agg_profile_add(p, stackmap[r->stack], r->weight, r->count, r->replicate,
                                 r->context);
        if (rc)
            return rc;
    }
    p->time_start_ns = in->time_start_ns;
    p->time_end_ns = in->time_end_ns;
    return 0;
}

int agg_profile_filter(const agg_profile_t *in, const agg_filter_t *f, agg_profile_t **out,
                       char *errstr, size_t errstr_size) {
    filt_pats_t fp = {0};
    agg_profile_t *p = NULL;
    size_t nf = (size_t)in->n_frames + 1;
    frame_match_t fm = {0};
    uint32_t *stackmap = NULL, *buf = NULL;
    int rc;
    if (errstr_size)
        errstr[0] = '\0';
    if ((rc = filt_compile(f, &fp, errstr, errstr_size)))
        goto out;
    rc = CM_ENOMEM;
    if (!(p = agg_profile_new(in->type)))
        goto out;
    fm.inc_mask = calloc(nf, sizeof *fm.inc_mask);
    fm.excl = calloc(nf, 1);
    fm.fold = calloc(nf, 1);
    fm.newf = malloc(nf * sizeof *fm.newf);
    stackmap = malloc(((size_t)in->n_stacks + 1) * sizeof *stackmap);
    buf = malloc((CM_MAX_STACK_DEPTH + 1) * sizeof *buf);
    fm.grouped = calloc(nf, 1);
    if (!fm.inc_mask || !fm.excl || !fm.fold || !fm.newf || !stackmap || !buf || !fm.grouped)
        goto out;
    if (filt_match_frames(in, f, &fp, p, &fm) < 0 ||
        (rc = filt_stacks(in, fp.inc.n, &fm, p, stackmap, buf)) ||
        (rc = filt_rows(in, stackmap, p)))
        goto out;
    *out = p;
    p = NULL;
out:
    filt_pats_free(&fp);
    agg_profile_free(p);
    free(fm.inc_mask);
    free(fm.excl);
    free(fm.fold);
    free(fm.newf);
    free(stackmap);
    free(buf);
    free(fm.grouped);
    return rc;
}
