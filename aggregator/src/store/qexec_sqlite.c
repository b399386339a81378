/* SQLite implementation of the query executor (qexec.h): a read-only connection to one
 * partition store (WAL: never blocks the writer), statements are sqlite3 statements.
 * Threading: a connection and its statements are used by one thread at a time. */
#include "qexec.h"

#include "cm/error.h"
#include "cm/log.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    agg_qx_t base;
    sqlite3 *db;
    int wrapped; /* a store's connection (agg_qx_sqlite_wrap): not ours to close */
} sq_qx_t;

typedef struct {
    agg_qxst_t base;
    sqlite3_stmt *st;
    int done; /* the last step found no row: so do the next ones, until a reset (SQLite
               * would start the statement over by itself) */
} sq_qxst_t;

int agg_sqlite_err(int rc) {
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW:
        return 0;
    case SQLITE_NOMEM:
        return CM_ENOMEM;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return -EBUSY;
    case SQLITE_FULL:
        return -ENOSPC;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
        return -EACCES;
    case SQLITE_CANTOPEN:
        return -ENOENT;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return CM_EFORMAT;
    default:
        return CM_EIO;
    }
}

static const agg_qx_vtab_t sq_vtab;

static void sq_close(agg_qx_t *x) {
    sq_qx_t *s = (sq_qx_t *)x;
    if (!s->wrapped)
        sqlite3_close(s->db);
    free(s);
}

static const char *sq_errmsg(agg_qx_t *x) { return sqlite3_errmsg(((sq_qx_t *)x)->db); }

static int sq_prepare(agg_qx_t *x, const char *sql, agg_qxst_t **out) {
    sq_qxst_t *q = calloc(1, sizeof *q);
    if (!q)
        return CM_ENOMEM;
    q->base.vt = &sq_vtab;
    int rc = sqlite3_prepare_v2(((sq_qx_t *)x)->db, sql, -1, &q->st, NULL);
    if (rc != SQLITE_OK) {
        sqlite3_finalize(q->st);
        free(q);
        return rc == SQLITE_NOMEM ? CM_ENOMEM : CM_EIO;
    }
    *out = &q->base;
    return 0;
}

static int sq_id_table(agg_qx_t *x, const char *table, const uint64_t *ids, size_t n) {
    sqlite3 *db = ((sq_qx_t *)x)->db;
    char sql[256];
    snprintf(sql, sizeof sql,
             "CREATE TEMP TABLE IF NOT EXISTS %s(id INTEGER PRIMARY KEY); DELETE FROM temp.%s;",
             table, table);
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK)
        return agg_sqlite_err(rc);
    snprintf(sql, sizeof sql, "INSERT OR IGNORE INTO temp.%s VALUES(?1)", table);
    sqlite3_stmt *st;
    if ((rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL)) != SQLITE_OK)
        return agg_sqlite_err(rc);
    for (size_t i = 0; i < n && (rc == SQLITE_OK || rc == SQLITE_DONE); i++) {
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, (sqlite3_int64)ids[i]);
        rc = sqlite3_step(st);
    }
    sqlite3_finalize(st);
    return agg_sqlite_err(rc);
}

static void sq_bind_int64(agg_qxst_t *st, int i, int64_t v) {
    sqlite3_bind_int64(((sq_qxst_t *)st)->st, i, (sqlite3_int64)v);
}

static void sq_bind_blob(agg_qxst_t *st, int i, const void *p, size_t n) {
    sqlite3_bind_blob(((sq_qxst_t *)st)->st, i, p, (int)n, SQLITE_TRANSIENT);
}

static void sq_bind_text(agg_qxst_t *st, int i, const char *s) {
    sqlite3_bind_text(((sq_qxst_t *)st)->st, i, s, -1, SQLITE_TRANSIENT);
}

static int sq_step(agg_qxst_t *st) {
    sq_qxst_t *q = (sq_qxst_t *)st;
    if (q->done)
        return 0;
    int rc = sqlite3_step(q->st);
    q->done = rc == SQLITE_DONE;
    return rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : agg_sqlite_err(rc);
}

static int64_t sq_col_int64(agg_qxst_t *st, int i) {
    return sqlite3_column_int64(((sq_qxst_t *)st)->st, i);
}

static const char *sq_col_text(agg_qxst_t *st, int i) {
    return (const char *)sqlite3_column_text(((sq_qxst_t *)st)->st, i);
}

static const void *sq_col_blob(agg_qxst_t *st, int i, size_t *n) {
    const void *p = sqlite3_column_blob(((sq_qxst_t *)st)->st, i);
    *n = (size_t)sqlite3_column_bytes(((sq_qxst_t *)st)->st, i);
    return p;
}

static void sq_reset(agg_qxst_t *st) {
    ((sq_qxst_t *)st)->done = 0;
    sqlite3_reset(((sq_qxst_t *)st)->st);
}

static void sq_finalize(agg_qxst_t *st) {
    sqlite3_finalize(((sq_qxst_t *)st)->st);
    free(st);
}

static void sq_bind_double(agg_qxst_t *st, int i, double v) {
    sqlite3_bind_double(((sq_qxst_t *)st)->st, i, v);
}

static int64_t sq_changes(agg_qxst_t *st) {
    return sqlite3_changes(sqlite3_db_handle(((sq_qxst_t *)st)->st));
}

static int sq_exec(agg_qx_t *x, const char *sql) {
    sqlite3 *db = ((sq_qx_t *)x)->db;
    char *msg = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK)
        CM_ERROR("store %s: '%.60s' failed: %s", sqlite3_db_filename(db, "main"), sql,
                 msg ? msg : sqlite3_errstr(rc));
    sqlite3_free(msg);
    return agg_sqlite_err(rc);
}

static void sq_rollback(agg_qx_t *x) {
    sqlite3_exec(((sq_qx_t *)x)->db, "ROLLBACK", NULL, NULL, NULL);
}

static const agg_qx_vtab_t sq_vtab = {AGG_QX_VTAB(sq, "sqlite"), .begin = "BEGIN IMMEDIATE"};

int agg_qx_sqlite_wrap(sqlite3 *db, agg_qx_t **out) {
    sq_qx_t *s = calloc(1, sizeof *s);
    if (!s)
        return CM_ENOMEM;
    s->base.vt = &sq_vtab;
    s->db = db;
    s->wrapped = 1;
    *out = &s->base;
    return 0;
}

int agg_qx_sqlite_open(const char *path, agg_qx_t **out, char *err, size_t err_size) {
    sq_qx_t *s = calloc(1, sizeof *s);
    if (!s)
        return CM_ENOMEM;
    s->base.vt = &sq_vtab;
    int rc = sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL);
    if (rc != SQLITE_OK) {
        snprintf(err, err_size, "cannot open store %s: %s", path,
                 s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
        sq_close(&s->base);
        return agg_sqlite_err(rc);
    }
    sqlite3_busy_timeout(s->db, 5000);
    *out = &s->base;
    return 0;
}
