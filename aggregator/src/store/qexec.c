/* The query executor's dispatch (qexec.h): each agg_qx_* call goes to its connection's
 * vtable (qexec_sqlite.c, qexec_pg.c). Threading: as the connection's. */
#include "qexec.h"

#include "store_pg.h"

int agg_qx_open(const char *target, agg_qx_t **out, char *err, size_t err_size) {
    return agg_store_is_pg(target) ? agg_qx_pg_open(target, out, err, err_size)
                                   : agg_qx_sqlite_open(target, out, err, err_size);
}

void agg_qx_close(agg_qx_t *x) {
    if (x)
        x->vt->close(x);
}

const char *agg_qx_backend(const agg_qx_t *x) { return x->vt->name; }
const char *agg_qx_errmsg(agg_qx_t *x) { return x->vt->errmsg(x); }

int agg_qx_prepare(agg_qx_t *x, const char *sql, agg_qxst_t **out) {
    *out = NULL;
    return x->vt->prepare(x, sql, out);
}

int agg_qx_id_table(agg_qx_t *x, const char *table, const uint64_t *ids, size_t n) {
    return x->vt->id_table(x, table, ids, n);
}

void agg_qx_bind_int64(agg_qxst_t *st, int i, int64_t v) { st->vt->bind_int64(st, i, v); }
void agg_qx_bind_double(agg_qxst_t *st, int i, double v) { st->vt->bind_double(st, i, v); }
void agg_qx_bind_blob(agg_qxst_t *st, int i, const void *p, size_t n) {
    st->vt->bind_blob(st, i, p, n);
}
void agg_qx_bind_text(agg_qxst_t *st, int i, const char *s) { st->vt->bind_text(st, i, s); }
int agg_qx_step(agg_qxst_t *st) { return st->vt->step(st); }
int64_t agg_qx_int64(agg_qxst_t *st, int i) { return st->vt->col_int64(st, i); }
const char *agg_qx_text(agg_qxst_t *st, int i) { return st->vt->col_text(st, i); }
const void *agg_qx_blob(agg_qxst_t *st, int i, size_t *n) { return st->vt->col_blob(st, i, n); }
int64_t agg_qx_changes(agg_qxst_t *st) { return st->vt->changes(st); }
void agg_qx_reset(agg_qxst_t *st) { st->vt->reset(st); }
void agg_qx_finalize(agg_qxst_t *st) {
    if (st)
        st->vt->finalize(st);
}

int agg_qx_exec(agg_qx_t *x, const char *sql) { return x->vt->exec(x, sql); }
int agg_qx_begin(agg_qx_t *x) { return agg_qx_exec(x, x->vt->begin); }
int agg_qx_commit(agg_qx_t *x) { return agg_qx_exec(x, "COMMIT"); }
void agg_qx_rollback(agg_qx_t *x) { x->vt->rollback(x); }
int agg_qx_lock_tiers(agg_qx_t *x, int alone) {
    return x->vt->lock_tiers ? x->vt->lock_tiers(x, alone) : 0;
}
