/* Top functions (bottom-up): self and total per function, recursion counted once per sample.
 * Threading: reads the profile only. */
#include "views.h"

#include "cm/error.h"

#include <stdlib.h>
#include <string.h>

/* qsort has no context argument: the comparator reads thread-locals, so concurrent views on
 * different threads do not race. */
static _Thread_local const agg_profile_t *tl_profile;
static _Thread_local agg_sort_t tl_key;

static int cmp_top_tl(const void *a, const void *b) {
    const agg_top_entry_t *x = a, *y = b;
    uint64_t kx = tl_key == AGG_SORT_SELF ? x->self : x->total;
    uint64_t ky = tl_key == AGG_SORT_SELF ? y->self : y->total;
    if (kx != ky)
        return kx < ky ? 1 : -1;
    uint64_t ox = tl_key == AGG_SORT_SELF ? x->total : x->self;
    uint64_t oy = tl_key == AGG_SORT_SELF ? y->total : y->self;
    if (ox != oy)
        return ox < oy ? 1 : -1;
    return strcmp(tl_profile->frames[x->frame].name, tl_profile->frames[y->frame].name);
}

int agg_top_compute(const agg_profile_t *p, agg_sort_t sort, size_t limit, agg_top_t *out) {
    memset(out, 0, sizeof *out);
    int rc = CM_ENOMEM;
    uint64_t *sw = malloc(((size_t)p->n_stacks + 1) * sizeof *sw);
    uint64_t *sc = malloc(((size_t)p->n_stacks + 1) * sizeof *sc);
    uint32_t *seen = calloc((size_t)p->n_frames + 1, sizeof *seen);
    agg_top_entry_t *e = calloc((size_t)p->n_frames + 1, sizeof *e);
    if (!sw || !sc || !seen || !e)
        goto out;
    agg_profile_stack_sums(p, sw, sc);
    for (uint32_t f = 0; f < p->n_frames; f++)
        e[f].frame = f;
    for (uint32_t s = 0; s < p->n_stacks; s++) {
        uint32_t a = p->stack_off[s], b = p->stack_off[s + 1];
        out->total += sw[s];
        out->total_count += sc[s];
        if (a == b || (sw[s] == 0 && sc[s] == 0))
            continue;
        for (uint32_t k = a; k < b; k++) {
            uint32_t f = p->stack_frames[k];
            if (seen[f] == s + 1)
                continue; /* recursion: once per sample */
            seen[f] = s + 1;
            e[f].total += sw[s];
            e[f].total_count += sc[s];
        }
        uint32_t leaf = p->stack_frames[b - 1];
        e[leaf].self += sw[s];
        e[leaf].self_count += sc[s];
    }
    size_t n = 0;
    for (uint32_t f = 0; f < p->n_frames; f++)
        if (e[f].total || e[f].total_count)
            e[n++] = e[f];
    tl_profile = p;
    tl_key = sort;
    qsort(e, n, sizeof *e, cmp_top_tl);
    out->n_functions = n;
    out->n = limit && limit < n ? limit : n;
    out->entries = e;
    e = NULL;
    rc = 0;
out:
    free(sw);
    free(sc);
    free(seen);
    free(e);
    return rc;
}

void agg_top_free(agg_top_t *t) {
    free(t->entries);
    memset(t, 0, sizeof *t);
}

uint32_t agg_profile_find_frame(const agg_profile_t *p, const char *name) {
    char label[1024];
    for (uint32_t f = 0; f < p->n_frames; f++) {
        if (strcmp(p->frames[f].name, name) == 0)
            return f;
        agg_frame_label(&p->frames[f], label, sizeof label);
        if (strcmp(label, name) == 0)
            return f;
    }
    return AGG_NONE;
}

const char *agg_event_unit(cm_event_type_t type) {
    return type == CM_EV_ALLOC || type == CM_EV_INUSE ? "bytes" : "nanoseconds";
}
