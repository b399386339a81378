/* Batch lifecycle: init, clear, free, reject counts, string arena; the key and id order both
 * stores write a batch in (see batch.h). Threading: a batch belongs to the consume thread. */
#define _GNU_SOURCE /* qsort_r */
#include "batch.h"

#include "cm/error.h"

#include <stdlib.h>
#include <string.h>

int agg_vec_grow(void **v, size_t *cap, size_t elem) {
    size_t nc = *cap ? 2 * *cap : 256;
    void *p = realloc(*v, nc * elem);
    if (!p)
        return CM_ENOMEM;
    *v = p;
    *cap = nc;
    return 0;
}

void agg_batch_init(agg_batch_t *b) {
    memset(b, 0, sizeof *b);
    agg_hmap_init(&b->prof, sizeof(agg_prof_key_t), sizeof(agg_prof_ent_t));
    agg_hmap_init(&b->tot, sizeof(agg_tot_key_t), sizeof(agg_tot_ent_t));
    agg_hmap_init(&b->ival, sizeof(agg_ival_key_t), sizeof(agg_ival_ent_t));
    agg_hmap_init(&b->drop, sizeof(agg_drop_key_t), sizeof(agg_drop_ent_t));
    agg_hmap_init(&b->ver, sizeof(agg_ver_key_t), sizeof(agg_ver_ent_t));
    agg_hmap_init(&b->fn, sizeof(agg_fn_key_t), sizeof(agg_fn_ent_t));
    agg_hmap_init(&b->span, sizeof(agg_span_key_t), sizeof(agg_span_ent_t));
    agg_hmap_init(&b->spanstk, sizeof(agg_spanstk_key_t), sizeof(agg_spanstk_ent_t));
    agg_hmap_init(&b->rej, sizeof(agg_rej_key_t), sizeof(agg_rej_ent_t));
    agg_hmap_init(&b->req, sizeof(agg_span_key_t), sizeof(agg_req_ent_t));
    agg_hmap_init(&b->seen, sizeof(agg_seen_key_t), sizeof(agg_seen_ent_t));
    agg_hmap_init(&b->inc, sizeof(agg_inc_key_t), sizeof(agg_inc_ent_t));
    agg_hmap_init(&b->incchunk, sizeof(agg_incchunk_key_t), sizeof(agg_incchunk_ent_t));
    agg_hmap_init(&b->profc, sizeof(agg_prof_key_t), sizeof(agg_prof_ent_t));
    agg_hmap_init(&b->leaf, sizeof(agg_prof_key_t), sizeof(agg_prof_ent_t));
    agg_hmap_init(&b->kpm, sizeof(agg_kpm_key_t), sizeof(agg_kpm_ent_t));
    b->next_offset = -1;
}

static agg_hmap_t *maps(agg_batch_t *b, int i) {
    agg_hmap_t *m[] = {&b->prof, &b->tot,     &b->ival, &b->drop, &b->ver,
                       &b->fn,   &b->span,    &b->spanstk, &b->rej, &b->seen,
                       &b->profc, &b->leaf, &b->req, &b->kpm, &b->inc, &b->incchunk};
    return i < (int)(sizeof m / sizeof m[0]) ? m[i] : NULL;
}

void agg_batch_clear(agg_batch_t *b) {
    agg_hmap_t *m;
    for (int i = 0; (m = maps(b, i)); i++)
        agg_hmap_clear(m);
    b->strs.n = b->maps.n = b->fns.n = b->locs.n = b->stacks.n = b->labels.n = 0;
    b->labelsets.n = b->labelbase.n = 0;
    b->arena_len = 0;
    b->next_offset = -1;
    b->messages = b->chunks = b->duplicates = b->rejects = b->samples = 0;
    b->incidents = b->incident_chunks = 0;
    b->first_msg_ms = 0;
}

void agg_batch_free(agg_batch_t *b) {
    agg_hmap_t *m;
    for (int i = 0; (m = maps(b, i)); i++)
        agg_hmap_free(m);
    free(b->strs.v);
    free(b->maps.v);
    free(b->fns.v);
    free(b->locs.v);
    free(b->stacks.v);
    free(b->labels.v);
    free(b->labelsets.v);
    free(b->labelbase.v);
    free(b->str_arena);
    memset(b, 0, sizeof *b);
}

static int derive_add(agg_hmap_t *m, const agg_prof_key_t *k, const agg_prof_ent_t *e) {
    agg_prof_ent_t *d = agg_hmap_upsert(m, k, NULL);
    if (!d)
        return CM_ENOMEM;
    d->weight += e->weight;
    d->count += e->count;
    d->rows += e->rows;
    d->chunks += e->chunks;
    return 0;
}

int agg_batch_derive(agg_batch_t *b, const int64_t *done) {
    agg_hmap_clear(&b->profc);
    agg_hmap_clear(&b->leaf);
    for (size_t i = 0; i < b->prof.n; i++) {
        const agg_prof_ent_t *e = agg_hmap_entry(&b->prof, i);
        agg_prof_key_t k = e->k;
        k.labels = e->base; /* the derived rows do not keep the dimensions */
        for (int t = 0; t < b->n_tiers; t++) {
            if ((int64_t)e->k.bucket >= done[t])
                continue;
            k.width = (uint64_t)b->tiers[t];
            k.bucket = e->k.bucket - e->k.bucket % k.width;
            if (derive_add(&b->profc, &k, e))
                return CM_ENOMEM;
        }
        if (b->replicate_width > 0) {
            k.width = (uint64_t)b->replicate_width;
            k.bucket = e->k.bucket - e->k.bucket % k.width;
            k.stack = e->leaf;
            if (derive_add(&b->leaf, &k, e))
                return CM_ENOMEM;
        }
    }
    return 0;
}

int agg_batch_reject(agg_batch_t *b, const char *reason) {
    agg_rej_key_t k;
    memset(&k, 0, sizeof k);
    strncpy(k.reason, reason, sizeof k.reason - 1);
    agg_rej_ent_t *e = agg_hmap_upsert(&b->rej, &k, NULL);
    if (!e)
        return CM_ENOMEM;
    e->count++;
    b->rejects++;
    return 0;
}

size_t agg_batch_arena_add(agg_batch_t *b, const char *s, uint32_t len) {
    if (b->arena_len + len + 1 > b->arena_cap) {
        size_t nc = b->arena_cap ? b->arena_cap : 65536;
        while (nc < b->arena_len + len + 1)
            nc *= 2;
        char *p = realloc(b->str_arena, nc);
        if (!p)
            return (size_t)-1;
        b->str_arena = p;
        b->arena_cap = nc;
    }
    size_t off = b->arena_len;
    memcpy(b->str_arena + off, s, len);
    b->str_arena[off + len] = 0;
    b->arena_len += len + 1;
    return off;
}

typedef struct {
    size_t nblob, nint;
} keyfmt_t;

static int cmp_key(const void *a, const void *b, void *arg) {
    const keyfmt_t *k = arg;
    const uint8_t *x = *(const uint8_t *const *)a, *y = *(const uint8_t *const *)b;
    if (k->nblob) {
        int c = memcmp(x, y, k->nblob);
        if (c)
            return c;
    }
    for (size_t i = 0; i < k->nint; i++) {
        int64_t xi, yi;
        memcpy(&xi, x + k->nblob + 8 * i, 8);
        memcpy(&yi, y + k->nblob + 8 * i, 8);
        if (xi != yi)
            return xi < yi ? -1 : 1;
    }
    return 0;
}

void **agg_hmap_ordered(const agg_hmap_t *m, size_t nblob, size_t nint, void ***buf,
                        size_t *cap) {
    static void *none[1];
    if (!m->n)
        return none;
    if (m->n > *cap) {
        void **o = realloc(*buf, m->n * sizeof *o);
        if (!o)
            return NULL;
        *buf = o;
        *cap = m->n;
    }
    for (size_t i = 0; i < m->n; i++)
        (*buf)[i] = agg_hmap_entry(m, i);
    keyfmt_t k = {nblob, nint};
    qsort_r(*buf, m->n, sizeof **buf, cmp_key, &k);
    return *buf;
}

static int cmp_id(const void *a, const void *b) {
    int64_t x, y;
    memcpy(&x, a, 8);
    memcpy(&y, b, 8);
    return x < y ? -1 : x > y;
}

void agg_batch_sort_new(agg_batch_t *b) {
#define SORT(vec)                                                                              \
    if ((vec).n)                                                                               \
        qsort((vec).v, (vec).n, sizeof *(vec).v, cmp_id);
    SORT(b->strs)
    SORT(b->maps)
    SORT(b->fns)
    SORT(b->locs)
    SORT(b->stacks)
    SORT(b->labelsets)
#undef SORT
}
