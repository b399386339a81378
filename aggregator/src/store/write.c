/* The batch write of both backends (store.h): one transaction that fences the partition's
 * offset, loads each of the batch's tables in the order of agg_batch_tables (dictionaries,
 * then the rollups, the tiers derived once before them under the tiers lock, then the chunk
 * ids), and stores the next offset. The backend only fences and bulk-loads.
 * Threading: the store handle's thread. */
#include "store.h"

#include "cm/error.h"
#include "cm/log.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Runs the cached statement *q (prepared from sql on first use) after bind; the first column
 * of its row in *v (dflt when there is none). */
static int lookup(agg_store_t *st, agg_qxst_t **q, const char *sql, const char *topic,
                  int64_t n, const void *blob, int64_t *v, int64_t dflt) {
    agg_qx_t *x = st->vt->qx(st);
    int rc = x ? 0 : CM_EIO;
    if (!rc && !*q && (rc = agg_qx_prepare(x, sql, q)))
        CM_WARN("store: '%.60s': %s", sql, agg_qx_errmsg(x));
    if (rc)
        return rc;
    if (topic)
        agg_qx_bind_text(*q, 1, topic);
    if (blob)
        agg_qx_bind_blob(*q, 1, blob, CM_CHUNK_ID_LEN);
    agg_qx_bind_int64(*q, 2, n);
    rc = agg_qx_step(*q);
    *v = rc == 1 ? agg_qx_int64(*q, 0) : dflt;
    if (rc < 0)
        CM_WARN("store: '%.60s': %s", sql, agg_qx_errmsg(x));
    agg_qx_reset(*q);
    return rc < 0 ? rc : 0;
}

int agg_store_offset_read(agg_store_t *st, const char *topic, int32_t partition, int64_t *next) {
    return lookup(st, &st->offset_st, "SELECT next_offset FROM offsets WHERE topic=?1 AND part=?2",
                  topic, partition, NULL, next, -1);
}

int agg_store_seen(agg_store_t *st, const uint8_t *id, int *seen) {
    int64_t v;
    int rc = lookup(st, &st->seen_st, "SELECT 1 FROM seen_chunks WHERE chunk_id=?1", NULL, 0, id,
                    &v, 0);
    *seen = !rc && v;
    return rc;
}

void agg_store_forget(agg_store_t *st) {
    agg_qx_finalize(st->offset_st);
    agg_qx_finalize(st->seen_st);
    st->offset_st = st->seen_st = NULL;
}

static int offset_put(agg_qx_t *x, const char *topic, int32_t partition, int64_t next,
                      int64_t now) {
    agg_qxst_t *st;
    int rc = agg_qx_prepare(x, "INSERT INTO offsets VALUES(?1, ?2, ?3, ?4) ON CONFLICT (topic, "
                               "part) DO UPDATE SET next_offset=excluded.next_offset, "
                               "updated_ns=excluded.updated_ns", &st);
    if (rc)
        return rc;
    agg_qx_bind_text(st, 1, topic);
    agg_qx_bind_int64(st, 2, partition);
    agg_qx_bind_int64(st, 3, next);
    agg_qx_bind_int64(st, 4, now);
    if ((rc = agg_qx_step(st)) < 0)
        CM_ERROR("store: partition %d: storing the offset: %s", partition, agg_qx_errmsg(x));
    agg_qx_finalize(st);
    return rc < 0 ? rc : 0;
}

void agg_load_col(const agg_load_t *l, const agg_load_sink_t *k, void *ctx, int c, size_t i) {
    const agg_bcol_t *col = &l->d->cols[c];
    char ty = l->t->types[c];
    size_t len;
    const void *p;
    if (ty == 'f')
        k->f64(ctx, c, agg_bcol_f64(col, l->rows[i]));
    else if (ty == 'b' || ty == 't' || ty == 'T') {
        p = agg_bcol_bytes(l->b, col, l->rows[i], &len);
        k->bytes(ctx, c, p, len, ty != 'b');
    } else
        k->i64(ctx, c, agg_bcol_i64(col, l->rows[i], l->now_ns));
}

int agg_load_rows(const agg_load_t *l, const agg_load_sink_t *k, void *ctx) {
    for (size_t i = 0; i < l->n; i++) {
        for (int c = 0; c < l->d->ncols; c++)
            agg_load_col(l, k, ctx, c, i);
        int rc = k->row_end(ctx, l, i);
        if (rc)
            return rc;
    }
    return 0;
}

/* Loads table i of the batch (deriving the tiers first when it is the first derived one). */
static int load_table(agg_store_t *st, agg_qx_t *x, int i, agg_batch_t *b, agg_load_t *l,
                      void ***buf, size_t *cap) {
    const agg_btable_t *d = &agg_batch_tables[i];
    int rc;
    if (d->after_derive && b->n_tiers) {
        int64_t done[AGG_MAX_TIERS];
        if ((rc = agg_tiers_marks(x, b->tiers, b->n_tiers, b->replicate_width, done)) ||
            (rc = agg_batch_derive(b, done)))
            return rc;
    }
    const agg_schema_table_t *t = agg_schema_table(d->table);
    if (!t || strlen(t->types) != d->ncols) {
        CM_ERROR("store: the batch's table %s does not match the schema", d->table);
        return CM_EINVAL;
    }
    size_t n;
    void **rows = agg_batch_rows(b, d, &n, buf, cap);
    if (!rows)
        return CM_ENOMEM;
    l->index = i;
    l->t = t;
    l->d = d;
    l->rows = rows;
    l->n = n;
    return n ? st->vt->load(st, l) : 0;
}

int agg_store_write(agg_store_t *st, const char *topic, int32_t partition, agg_batch_t *b) {
    agg_qx_t *x = st->vt->qx(st);
    if (!x)
        return CM_EIO;
    agg_batch_sort_new(b);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    agg_load_t l = {.b = b, .now_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec};
    void **buf = NULL;
    size_t cap = 0;
    int rc = agg_qx_begin(x);
    if (rc)
        return rc;
    rc = st->vt->fence(st, topic, partition, b->base_offset);
    for (int i = 0; i < agg_batch_ntables && !rc; i++)
        rc = load_table(st, x, i, b, &l, &buf, &cap);
    if (!rc && !(rc = offset_put(x, topic, partition, b->next_offset, l.now_ns)))
        rc = agg_qx_commit(x);
    /* a COMMIT whose answer was lost may or may not have happened: the caller re-reads the
     * stored offset, and the fence decides */
    if (rc)
        agg_qx_rollback(x);
    free(buf);
    return rc;
}
