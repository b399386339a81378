/* Span index rows (see spanindex.h). Threading: consume thread only. */
#include "spanindex.h"

#include "cm/error.h"

#include <string.h>

int agg_spanindex_row(agg_batch_t *b, const cm_chunk_t *c, const agg_chunk_ids_t *ids,
                      const cm_samples_t *s, uint32_t i) {
    const uint8_t *ctx = c->dict.contexts + (size_t)s->context[i] * CM_CONTEXT_SIZE;
    int64_t t = (int64_t)s->time_ns[i], w = (int64_t)s->weight[i];
    agg_span_key_t k;
    memcpy(k.trace, ctx, 16);
    memcpy(k.span, ctx + 16, 8);
    int fresh;
    agg_span_ent_t *e = agg_hmap_upsert(&b->span, &k, &fresh);
    if (!e)
        return CM_ENOMEM;
    if (fresh) {
        e->service = ids->service;
        e->version = ids->version;
        e->first_ns = e->last_ns = t;
    }
    if (t < e->first_ns)
        e->first_ns = t;
    if (t > e->last_ns)
        e->last_ns = t;
    e->weight[s->type] += w;
    e->rows++;
    agg_spanstk_key_t sk;
    memset(&sk, 0, sizeof sk);
    memcpy(sk.trace, ctx, 16);
    memcpy(sk.span, ctx + 16, 8);
    sk.type = s->type;
    sk.stack = ids->stack[s->stack[i]];
    agg_spanstk_ent_t *se = agg_hmap_upsert(&b->spanstk, &sk, NULL);
    if (!se)
        return CM_ENOMEM;
    se->weight += w;
    se->count += (int64_t)cm_samples_count(s, i);
    se->rows++;
    return 0;
}

int agg_spanindex_requests(agg_batch_t *b, const cm_chunk_t *c, const agg_chunk_ids_t *ids) {
    const cm_spans_t *sp = &c->spans;
    const cm_dict_t *d = &c->dict;
    for (uint32_t i = 0; i < sp->n; i++) {
        const uint8_t *ctx = d->contexts + (size_t)sp->context[i] * CM_CONTEXT_SIZE;
        agg_span_key_t k;
        memcpy(k.trace, ctx, 16);
        memcpy(k.span, ctx + 16, 8);
        uint64_t name = sp->name[i] ? ids->str[sp->name[i]] : 0;
        agg_req_ent_t *e = agg_hmap_upsert(&b->req, &k, NULL);
        if (!e)
            return CM_ENOMEM;
        int64_t st = (int64_t)sp->start_unix_ns[i], end = st + (int64_t)sp->duration_ns[i];
        int ended = !(CM_COL(sp, flags, i) & CM_SPF_ACTIVE);
        e->service = ids->service;
        e->version = ids->version;
        e->name = name > e->name ? name : e->name;
        e->start_ns = st > e->start_ns ? st : e->start_ns;
        e->end_ns = end > e->end_ns ? end : e->end_ns;
        e->ended |= ended;
        e->tid = d->thread_tid[sp->thread[i]];
    }
    return 0;
}
