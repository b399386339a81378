/* Incident captures at ingest (ingest/incidents.h). The row of an incident is the same in
 * every chunk of its capture but for the window, which grows to the chunks' first start and
 * last end, and the count of chunks seen (the store merges them by the schema's rules). */
#include "incidents.h"

#include "cm/error.h"

#include <string.h>

static int str(agg_intern_t *in, agg_batch_t *b, cm_str_t s, uint64_t *id) {
    return agg_intern_str(in, b, s.ptr ? s.ptr : "", s.len, id);
}

int agg_ingest_incident(agg_intern_t *in, agg_batch_t *b, const cm_chunk_t *c,
                        const uint8_t *frame, size_t len) {
    const cm_incident_t *ci = &c->incident;
    const cm_header_t *h = &c->header;
    agg_inc_key_t k;
    memcpy(k.id, ci->id, sizeof k.id);
    uint64_t svc, ver, host, trig;
    int rc;
    if ((rc = str(in, b, h->service, &svc)) || (rc = str(in, b, h->version, &ver)) ||
        (rc = str(in, b, h->host, &host)) || (rc = str(in, b, ci->trigger, &trig)))
        return rc;
    int fresh = 0;
    agg_inc_ent_t *e = agg_hmap_upsert(&b->inc, &k, &fresh);
    if (!e)
        return CM_ENOMEM;
    if (fresh) {
        e->service = svc;
        e->version = ver;
        e->host = host;
        e->pid = h->pid;
        e->trigger = trig;
        e->threshold = (int64_t)ci->threshold_milli;
        e->value = (int64_t)ci->value_milli;
        e->trigger_ns = (int64_t)ci->trigger_unix_ns;
        e->start_ns = (int64_t)h->start_unix_ns;
        e->end_ns = (int64_t)h->end_unix_ns;
        e->parts = ci->parts;
    }
    if ((int64_t)h->start_unix_ns < e->start_ns)
        e->start_ns = (int64_t)h->start_unix_ns;
    if ((int64_t)h->end_unix_ns > e->end_ns)
        e->end_ns = (int64_t)h->end_unix_ns;
    e->chunks++;
    agg_incchunk_key_t ck;
    memset(&ck, 0, sizeof ck);
    memcpy(ck.id, ci->id, sizeof ck.id);
    ck.part = ci->part;
    agg_incchunk_ent_t *ce = agg_hmap_upsert(&b->incchunk, &ck, NULL);
    if (!ce || len > UINT32_MAX)
        return CM_ENOMEM;
    size_t off = agg_batch_arena_add(b, (const char *)frame, (uint32_t)len);
    if (off == (size_t)-1)
        return CM_ENOMEM;
    ce->off = off;
    ce->len = (uint32_t)len;
    return 0;
}
