/* The leak-candidate rule of insights.h: an allocation site whose live bytes grow steadily
 * across the intervals of the window while the others' do not.
 *
 * For each site (the caller of the allocator in the live-heap stacks), its live bytes per
 * interval (weight / snapshots: the mean over the processes) are fitted by least squares
 * against time. It fires when the slope is at least `leak_rate` bytes/s, the fit explains the
 * series (R^2 >= 0.8: steady, not one jump), and the slope over the second half of the window
 * is at least half the whole window's (still growing at the end: a cache that fills and then
 * plateaus has a flat second half). At least 5 intervals over 40 s are needed.
 * Threading: as insights.c. */
#include "insights_int.h"

#include "cm/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEAK_MIN_POINTS 5
#define LEAK_MIN_SPAN_S 40.0
#define LEAK_MIN_R2 0.8
#define LEAK_MAX_SITES 256

typedef struct {
    uint32_t frame;
    double slope, r2, slope2, first, last;
} leak_fit_t;

/* Least-squares slope of y over t (n points), with R^2. */
static double fit(const double *t, const double *y, size_t n, double *r2) {
    double mt = 0, my = 0;
    for (size_t i = 0; i < n; i++)
        mt += t[i], my += y[i];
    mt /= (double)n, my /= (double)n;
    double sxy = 0, sxx = 0, syy = 0;
    for (size_t i = 0; i < n; i++) {
        sxy += (t[i] - mt) * (y[i] - my);
        sxx += (t[i] - mt) * (t[i] - mt);
        syy += (y[i] - my) * (y[i] - my);
    }
    if (r2)
        *r2 = sxx > 0 && syy > 0 ? sxy * sxy / (sxx * syy) : 0;
    return sxx > 0 ? sxy / sxx : 0;
}

typedef struct {
    double *t;    /* seconds since the first interval, per interval (sorted) */
    uint32_t *ix; /* replicate id -> interval index, AGG_NONE when not an interval */
    size_t n;
} leak_times_t;

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Intervals from the replicates' keys (start in ms). Returns 0, CM_EINVAL (keys are not
 * times: the rule does not apply) or CM_ENOMEM. */
static int leak_times(const agg_profile_t *p, leak_times_t *lt) {
    lt->t = malloc(((size_t)p->n_replicates + 1) * sizeof *lt->t);
    lt->ix = malloc(((size_t)p->n_replicates + 1) * sizeof *lt->ix);
    if (!lt->t || !lt->ix)
        return CM_ENOMEM;
    lt->n = 0;
    for (uint32_t r = 0; r < p->n_replicates; r++) {
        char *end;
        double ms = strtod(p->replicates[r].key, &end);
        if (*end || end == p->replicates[r].key || p->replicates[r].work <= 0)
            return CM_EINVAL;
        lt->t[lt->n++] = ms / 1e3;
    }
    qsort(lt->t, lt->n, sizeof *lt->t, cmp_d);
    for (uint32_t r = 0; r < p->n_replicates; r++) {
        double s = strtod(p->replicates[r].key, NULL) / 1e3;
        double *hit = bsearch(&s, lt->t, lt->n, sizeof *lt->t, cmp_d);
        lt->ix[r] = hit ? (uint32_t)(hit - lt->t) : AGG_NONE;
    }
    double t0 = lt->n ? lt->t[0] : 0;
    for (size_t i = 0; i < lt->n; i++)
        lt->t[i] -= t0;
    return 0;
}

/* Fits site k's series y (n points); second half from the middle time on. */
static leak_fit_t leak_fit(uint32_t frame, const double *t, const double *y, size_t n) {
    leak_fit_t f = {.frame = frame, .first = y[0], .last = y[n - 1]};
    f.slope = fit(t, y, n, &f.r2);
    size_t h = n / 2;
    f.slope2 = fit(t + h, y + h, n - h, NULL);
    return f;
}

static int cmp_fit(const void *a, const void *b) {
    const leak_fit_t *x = a, *y = b;
    if (x->slope != y->slope)
        return x->slope < y->slope ? 1 : -1;
    return x->frame < y->frame ? -1 : x->frame > y->frame;
}

static int leak_fire(ins_ctx_t *x, const agg_profile_t *p, leak_fit_t *fits, size_t nf,
                     double span) {
    qsort(fits, nf, sizeof *fits, cmp_fit);
    const double thr = x->lim->leak_rate;
    agg_insight_t ins = {.rule = "leak_candidate", .title = "Leak candidate", .unit = "bytes/s",
                         .threshold = thr, .type = CM_EV_INUSE};
    ins.explain = "The live bytes allocated at this site grow steadily over the window while "
                  "the other sites' stay flat: objects from it are kept and never freed (a "
                  "leak, or a cache or queue without a bound).";
    ins.fix = "Find who keeps the objects allocated there (a container that only grows, a "
              "missing free/delete or close, a cycle of shared_ptr); bound caches by size or "
              "age.";
    for (size_t i = 0; i < nf && ins.n_ev < 5; i++) {
        const leak_fit_t *f = &fits[i];
        if (f->slope < thr || f->r2 < LEAK_MIN_R2 || f->slope2 < 0.5 * f->slope)
            continue;
        const char *name = p->frames[f->frame].name;
        if (!ins.n_ev) {
            ins.score = f->slope;
            snprintf(ins.summary, sizeof ins.summary,
                     "Live bytes allocated at %s grow by %.0f KiB/s per process (R^2 %.2f) "
                     "over %.0f s: %.1f MiB -> %.1f MiB.", name, f->slope / 1024, f->r2, span,
                     f->first / 1048576, f->last / 1048576);
        }
        int rc = ins_evidence(&ins, name, f->r2, f->slope, 1);
        if (rc) {
            ins_insight_clear(&ins);
            return rc;
        }
    }
    return ins.n_ev ? ins_push(x->out, &ins) : 0;
}

/* Live bytes per (site, interval): y[k * n + i]. Sites with the most live bytes first, at most
 * LEAK_MAX_SITES. */
static int leak_series(ins_ctx_t *x, const agg_profile_t *p, const leak_times_t *lt,
                       double **y_out, uint32_t **frames_out, size_t *nsites) {
    uint32_t *site = NULL;
    int rc = ins_stack_sites(x, p, INS_CAT_ALLOC, INS_FALLBACK_LEAF, &site);
    if (rc)
        return rc;
    ins_split_t sp;
    rc = ins_sites(x, p, INS_CAT_ALLOC, INS_FALLBACK_LEAF, &sp);
    if (rc) {
        free(site);
        return rc;
    }
    size_t ns = sp.n_sites < LEAK_MAX_SITES ? sp.n_sites : LEAK_MAX_SITES;
    uint32_t *slot = malloc(((size_t)p->n_frames + 1) * sizeof *slot);
    uint32_t *frames = malloc((ns + 1) * sizeof *frames);
    double *y = calloc(ns * lt->n + 1, sizeof *y);
    if (!slot || !frames || !y) {
        free(site), free(sp.sites), free(slot), free(frames), free(y);
        return CM_ENOMEM;
    }
    for (uint32_t f = 0; f < p->n_frames; f++)
        slot[f] = AGG_NONE;
    for (size_t k = 0; k < ns; k++) {
        slot[sp.sites[k].frame] = (uint32_t)k;
        frames[k] = sp.sites[k].frame;
    }
    for (size_t i = 0; i < p->n_rows; i++) {
        const agg_row_t *r = &p->rows[i];
        uint32_t s = site[r->stack], ix = lt->ix[r->replicate];
        if (s == AGG_NONE || slot[s] == AGG_NONE || ix == AGG_NONE)
            continue;
        y[(size_t)slot[s] * lt->n + ix] += (double)r->weight / p->replicates[r->replicate].work;
    }
    free(site), free(sp.sites), free(slot);
    *y_out = y;
    *frames_out = frames;
    *nsites = ns;
    return 0;
}

int ins_rule_leak(ins_ctx_t *x) {
    const agg_profile_t *p = x->in->inuse;
    if (!p || p->n_replicates < LEAK_MIN_POINTS)
        return 0;
    leak_times_t lt = {0};
    int rc = leak_times(p, &lt);
    if (rc || lt.n < LEAK_MIN_POINTS || lt.t[lt.n - 1] < LEAK_MIN_SPAN_S) {
        free(lt.t), free(lt.ix);
        return rc == CM_EINVAL ? 0 : rc;
    }
    double *y = NULL;
    uint32_t *frames = NULL;
    size_t ns = 0;
    rc = leak_series(x, p, &lt, &y, &frames, &ns);
    leak_fit_t *fits = rc ? NULL : malloc((ns + 1) * sizeof *fits);
    if (!rc && !fits)
        rc = CM_ENOMEM;
    if (!rc) {
        x->out->evaluated++;
        for (size_t k = 0; k < ns; k++)
            fits[k] = leak_fit(frames[k], lt.t, y + k * lt.n, lt.n);
        rc = leak_fire(x, p, fits, ns, lt.t[lt.n - 1]);
    }
    free(fits), free(y), free(frames), free(lt.t), free(lt.ix);
    return rc;
}
