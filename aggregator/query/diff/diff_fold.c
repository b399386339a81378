/* Callee folding (opts.fold_callees, the count test of self cost): a self-cost regression
 * whose growth lies on the stacks of a larger regression is part of that one's finding, not a
 * finding of its own. A function that spins calls clock_gettime in its loop: per request,
 * clock_gettime's self cost grows with the spin, and flagging both names one change twice.
 *
 * The regressions are taken by their change of inclusive cost, largest first (a caller before
 * the callee its growth brings, whose self cost may have grown more: clock_gettime's did in
 * one capture); the first stands.
 * Each next one is tested again on its samples outside the stacks of the standing ones (both
 * sides, the same dispersion and common factor, its BH factor q / p kept): still significant
 * and a change that matters, it stands too; else it is noise, and the hint names the finding
 * it was folded into. Threading: pure function of its inputs. */
#include "diff_int.h"

#include "cm/error.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Self samples of key k (per side) on stacks of p with a frame of a standing key above the
 * leaf. */
static double under_standing(const agg_profile_t *p, const uint32_t *fmap, uint32_t k,
                             const unsigned char *standing) {
    double n = 0;
    for (size_t r = 0; r < p->n_rows; r++) {
        const agg_row_t *row = &p->rows[r];
        uint32_t a = p->stack_off[row->stack], b = p->stack_off[row->stack + 1];
        if (a == b || fmap[p->stack_frames[b - 1]] != k)
            continue;
        for (uint32_t i = a; i + 1 < b; i++)
            if (standing[fmap[p->stack_frames[i]]]) {
                n += (double)row->count / CM_COUNT_ONE;
                break;
            }
    }
    return n;
}

typedef struct {
    uint32_t n, k; /* entry, key */
    double d;      /* its change of inclusive cost */
} reg_t;

static int cmp_reg(const void *a, const void *b) {
    const reg_t *x = a, *y = b;
    return x->d != y->d ? (x->d < y->d ? 1 : -1) : (x->k > y->k) - (x->k < y->k);
}

static void hint_add(agg_diff_t *out, const agg_diff_entry_t *e, const agg_diff_entry_t *into) {
    size_t len = strlen(out->hint);
    snprintf(out->hint + len, sizeof out->hint - len, "%s%s folded into %s (its growth is on %s's "
             "stacks)", len ? "; " : "", e->name, into->name, into->name);
}

int agg_diff_fold(agg_diff_t *out, const agg_profile_t *b, const uint32_t *mb,
                  const agg_profile_t *t, const uint32_t *mt, const uint32_t *k2n, uint32_t nk,
                  const agg_dcount_t *cf) {
    reg_t *v = malloc(((size_t)out->n + 1) * sizeof *v);
    unsigned char *standing = calloc((size_t)nk + 1, 1);
    int rc = CM_ENOMEM;
    if (!v || !standing)
        goto out;
    size_t nr = 0;
    for (uint32_t k = 0; k < nk; k++)
        if (k2n[k] != AGG_NONE && out->entries[k2n[k]].cls == AGG_DIFF_REGRESSION &&
            !out->entries[k2n[k]].by_inclusive)
            v[nr++] = (reg_t){k2n[k], k, out->entries[k2n[k]].delta_total};
    qsort(v, nr, sizeof *v, cmp_reg);
    for (size_t i = 0; i < nr; i++) {
        agg_diff_entry_t *e = &out->entries[v[i].n];
        uint32_t k = v[i].k;
        double yb = cf->y[0][k] - under_standing(b, mb, k, standing);
        double yt = cf->y[1][k] - under_standing(t, mt, k, standing);
        if (i > 0 && (yb < cf->y[0][k] || yt < cf->y[1][k])) {
            double p = agg_dcount_p_totals(cf, fmax(0, yb), fmax(0, yt), cf->phi[k], cf->df[k],
                                           NULL);
            double q = e->p > 0 ? fmin(1, p * e->q / e->p) : 1;
            double nb = fmax(0, yb) / cf->c[0], nt = fmax(0, yt) / (exp(cf->log_rho) * cf->c[1]);
            if (!(q <= out->opts.q) || !(nt > nb * (1 + out->opts.min_rel_change))) {
                e->p = p;
                e->q = q;
                e->cls = AGG_DIFF_NOISE;
                out->n_regressions--;
                hint_add(out, e, &out->entries[v[0].n]);
                continue;
            }
        }
        standing[k] = 1;
    }
    rc = 0;
out:
    free(v);
    free(standing);
    return rc;
}
