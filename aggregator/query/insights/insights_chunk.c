/* Fills the insight input's special profiles from decoded chunks (insights.h): the live heap
 * with one interval per chunk, and I/O calls weighted by bytes. The chunk is read into a
 * scratch profile by agg_profile_add_chunk (so frames are named as everywhere else), whose rows
 * are in the chunk's sample order, then copied with the interval's key and the new weights.
 * Threading: as profile.h. */
#include "insights.h"

#include "cm/error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

/* Copies the rows of scratch q into p under replicate rep, row i weighing w[i] (bytes set:
 * w NULL means 0; else NULL: its own weight). */
static int copy_rows(agg_profile_t *p, const agg_profile_t *q, uint32_t rep, const uint64_t *w,
                     int bytes) {
    uint32_t *fmap = malloc(((size_t)q->n_frames + 1) * sizeof *fmap);
    uint32_t *buf = malloc(CM_MAX_STACK_DEPTH * sizeof *buf);
    int rc = fmap && buf ? 0 : CM_ENOMEM;
    for (uint32_t f = 0; !rc && f < q->n_frames; f++) {
        const agg_frame_t *fr = &q->frames[f];
        int64_t id = agg_profile_frame(p, fr->name, fr->module, fr->build_id, fr->address);
        if (id < 0)
            rc = (int)id;
        else
            fmap[f] = (uint32_t)id;
    }
    for (size_t i = 0; !rc && i < q->n_rows; i++) {
        const agg_row_t *r = &q->rows[i];
        uint32_t n = q->stack_off[r->stack + 1] - q->stack_off[r->stack];
        for (uint32_t k = 0; k < n; k++)
            buf[k] = fmap[q->stack_frames[q->stack_off[r->stack] + k]];
        int64_t st = agg_profile_stack(p, buf, n);
        rc = st < 0 ? (int)st : agg_profile_add(p, (uint32_t)st, w ? w[i] : bytes ? 0 : r->weight,
                                                r->count,
                                                rep, 0);
    }
    free(fmap);
    free(buf);
    return rc;
}

static int add_as(agg_profile_t *p, const cm_chunk_t *c, cm_event_type_t type,
                  const char *key, double work, int bytes) {
    agg_profile_t *q = agg_profile_new(type);
    if (!q)
        return CM_ENOMEM;
    int rc = agg_profile_add_chunk(q, c);
    int64_t rep = rc ? rc : agg_profile_replicate(p, key, work);
    if (rep < 0)
        rc = (int)rep;
    const cm_samples_t *s = &c->samples[type];
    if (!rc && bytes && q->n_rows != s->n)
        rc = CM_EINVAL;
    if (!rc)
        rc = copy_rows(p, q, (uint32_t)rep, bytes ? s->size : NULL, bytes);
    agg_profile_free(q);
    return rc;
}

int agg_insights_add_inuse_chunk(agg_profile_t *p, const struct cm_chunk *c) {
    if (p->type != CM_EV_INUSE)
        return CM_EINVAL;
    char key[32];
    snprintf(key, sizeof key, "%" PRIu64, c->header.start_unix_ns / 1000000);
    return add_as(p, c, CM_EV_INUSE, key, 1, 0);
}

int agg_insights_add_io_bytes_chunk(agg_profile_t *p, const struct cm_chunk *c) {
    if (p->type != CM_EV_IO)
        return CM_EINVAL;
    return add_as(p, c, CM_EV_IO, "all", 1, 1);
}
