/* Callers and callees of one function (PerfView's caller-callee view). For every sample whose
 * stack contains the function, each distinct frame immediately above an occurrence is a caller
 * and each distinct frame immediately below one is a callee; a stack adds its value once to the
 * function's total and once to each distinct caller and callee (recursion counted once per
 * sample). Threading: reads the profile only. */
#include "views.h"

#include "cm/error.h"

#include <stdlib.h>
#include <string.h>

static int cmp_edge(const void *a, const void *b) {
    const agg_edge_t *x = a, *y = b;
    if (x->value != y->value)
        return x->value < y->value ? 1 : -1;
    return x->frame < y->frame ? -1 : x->frame > y->frame;
}

/* Compacts the dense per-frame array into a sorted list of non-zero entries. */
static int collect(agg_edge_t *dense, uint32_t n_frames, agg_edge_t **out, size_t *n_out) {
    size_t n = 0;
    for (uint32_t f = 0; f < n_frames; f++)
        n += dense[f].value || dense[f].count;
    agg_edge_t *e = malloc((n + 1) * sizeof *e);
    if (!e)
        return CM_ENOMEM;
    n = 0;
    for (uint32_t f = 0; f < n_frames; f++)
        if (dense[f].value || dense[f].count)
            e[n++] = (agg_edge_t){f, dense[f].value, dense[f].count};
    qsort(e, n, sizeof *e, cmp_edge);
    *out = e;
    *n_out = n;
    return 0;
}

int agg_callers_compute(const agg_profile_t *p, uint32_t frame, agg_callers_t *out) {
    memset(out, 0, sizeof *out);
    if (frame >= p->n_frames)
        return CM_ERANGE;
    out->frame = frame;
    int rc = CM_ENOMEM;
    uint64_t *sw = malloc(((size_t)p->n_stacks + 1) * sizeof *sw);
    uint64_t *sc = malloc(((size_t)p->n_stacks + 1) * sizeof *sc);
    agg_edge_t *up = calloc((size_t)p->n_frames + 1, sizeof *up);
    agg_edge_t *down = calloc((size_t)p->n_frames + 1, sizeof *down);
    uint32_t *seen_up = calloc((size_t)p->n_frames + 1, sizeof *seen_up);
    uint32_t *seen_down = calloc((size_t)p->n_frames + 1, sizeof *seen_down);
    if (!sw || !sc || !up || !down || !seen_up || !seen_down)
        goto out;
    agg_profile_stack_sums(p, sw, sc);
    for (uint32_t s = 0; s < p->n_stacks; s++) {
        uint32_t a = p->stack_off[s], b = p->stack_off[s + 1];
        int found = 0;
        for (uint32_t k = a; k < b; k++) {
            if (p->stack_frames[k] != frame)
                continue;
            found = 1;
            if (k > a) {
                uint32_t c = p->stack_frames[k - 1];
                if (seen_up[c] != s + 1) {
                    seen_up[c] = s + 1;
                    up[c].value += sw[s];
                    up[c].count += sc[s];
                }
            }
            if (k + 1 < b) {
                uint32_t c = p->stack_frames[k + 1];
                if (seen_down[c] != s + 1) {
                    seen_down[c] = s + 1;
                    down[c].value += sw[s];
                    down[c].count += sc[s];
                }
            }
        }
        if (!found)
            continue;
        out->total += sw[s];
        out->total_count += sc[s];
        if (p->stack_frames[b - 1] == frame)
            out->self += sw[s];
    }
    if ((rc = collect(up, p->n_frames, &out->callers, &out->n_callers)) ||
        (rc = collect(down, p->n_frames, &out->callees, &out->n_callees)))
        goto out;
out:
    if (rc)
        agg_callers_free(out);
    free(sw);
    free(sc);
    free(up);
    free(down);
    free(seen_up);
    free(seen_down);
    return rc;
}

void agg_callers_free(agg_callers_t *c) {
    free(c->callers);
    free(c->callees);
    memset(c, 0, sizeof *c);
}
