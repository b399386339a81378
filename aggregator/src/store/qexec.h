/* The query store's SQL executor: one connection to one store and its statements, behind a
 * small vtable with a SQLite (qexec_sqlite.c) and a PostgreSQL (qexec_pg.c, libpq)
 * implementation, so that every query of the read side is written once.
 *
 * SQL is written in the common dialect of both: parameters are numbered `?N` (rewritten to
 * `$N` for PostgreSQL; numbers may have gaps, an unbound parameter is NULL), every selected
 * column that is not aggregated is in the GROUP BY, integers are 64-bit (bound as int8), blobs
 * bytea. The one statement the dialects spell differently, a temporary table of ids for a
 * join, is agg_qx_id_table. Integer columns read from a NULL give 0, text NULL.
 *
 * Threading: a connection and its statements are used by one thread at a time.
 */
#ifndef AGG_QEXEC_H
#define AGG_QEXEC_H

#include <stddef.h>
#include <stdint.h>

typedef struct agg_qx agg_qx_t;
typedef struct agg_qxst agg_qxst_t;

/* Opens target read-only: a SQLite store file, or a postgres:// / postgresql:// URL.
 * Returns 0 or a CM_E* code with the reason in err. */
int agg_qx_open(const char *target, agg_qx_t **out, char *err, size_t err_size);
void agg_qx_close(agg_qx_t *x);
/* "sqlite" or "postgres" */
const char *agg_qx_backend(const agg_qx_t *x);
/* The last error message of the connection. */
const char *agg_qx_errmsg(agg_qx_t *x);

/* Prepares sql. Returns 0 or a CM_E* code (CM_EIO: the SQL was refused; see agg_qx_errmsg). */
int agg_qx_prepare(agg_qx_t *x, const char *sql, agg_qxst_t **out);
/* Fills the temporary table `table` (one column id, the primary key) with the n ids, creating
 * it or emptying it first. Returns 0 or a CM_E* code. */
int agg_qx_id_table(agg_qx_t *x, const char *table, const uint64_t *ids, size_t n);

/* Bindings (parameter i >= 1) are kept across agg_qx_reset; values are copied. */
void agg_qx_bind_int64(agg_qxst_t *st, int i, int64_t v);
void agg_qx_bind_blob(agg_qxst_t *st, int i, const void *p, size_t n);
void agg_qx_bind_text(agg_qxst_t *st, int i, const char *s);
/* Next row: 1, 0 when there is none left (and on every step after, until agg_qx_reset), or a
 * CM_E* code. */
int agg_qx_step(agg_qxst_t *st);
/* Columns of the current row (i >= 0); pointers stay valid until the next step or reset. */
int64_t agg_qx_int64(agg_qxst_t *st, int i);
const char *agg_qx_text(agg_qxst_t *st, int i);
const void *agg_qx_blob(agg_qxst_t *st, int i, size_t *n);
/* Runs the statement again from its first row on the next step, with the same bindings. */
void agg_qx_reset(agg_qxst_t *st);
void agg_qx_finalize(agg_qxst_t *st);

/* The write side (store/tiers.c and the batch write) runs on a store's own connection, wrapped
 * by agg_qx_sqlite_wrap / agg_qx_pg_wrap: no reconnection and no retry there (a failed
 * statement fails the transaction; the store reconnects before the next one).
 * begin: SQLite BEGIN IMMEDIATE (the writer's lock), PostgreSQL BEGIN. exec: sql without
 * parameters, several statements allowed. All return 0 or a CM_E* code (logged). */
int agg_qx_begin(agg_qx_t *x);
int agg_qx_commit(agg_qx_t *x);
void agg_qx_rollback(agg_qx_t *x);
int agg_qx_exec(agg_qx_t *x, const char *sql);
/* The tiers lock, inside a transaction: AGG_QX_SHARED for a batch (it reads the tier marks),
 * AGG_QX_ALONE for what moves them (compaction, retention, a rebuild). SQLite: BEGIN
 * IMMEDIATE holds it already; PostgreSQL: a row lock on meta's 'tiers_lock' row. */
enum { AGG_QX_SHARED, AGG_QX_ALONE };
int agg_qx_lock_tiers(agg_qx_t *x, int alone);
/* Rows the statement's last run inserted, updated or deleted. */
int64_t agg_qx_changes(agg_qxst_t *st);
void agg_qx_bind_double(agg_qxst_t *st, int i, double v);

/* Backend implementations (qexec_sqlite.c, qexec_pg.c). */
typedef struct agg_qx_vtab {
    const char *name;
    void (*close)(agg_qx_t *x);
    const char *(*errmsg)(agg_qx_t *x);
    int (*prepare)(agg_qx_t *x, const char *sql, agg_qxst_t **out);
    int (*id_table)(agg_qx_t *x, const char *table, const uint64_t *ids, size_t n);
    void (*bind_int64)(agg_qxst_t *st, int i, int64_t v);
    void (*bind_blob)(agg_qxst_t *st, int i, const void *p, size_t n);
    void (*bind_text)(agg_qxst_t *st, int i, const char *s);
    int (*step)(agg_qxst_t *st);
    int64_t (*col_int64)(agg_qxst_t *st, int i);
    const char *(*col_text)(agg_qxst_t *st, int i);
    const void *(*col_blob)(agg_qxst_t *st, int i, size_t *n);
    void (*reset)(agg_qxst_t *st);
    void (*finalize)(agg_qxst_t *st);
    const char *begin; /* the statement that opens a write transaction */
    int (*exec)(agg_qx_t *x, const char *sql);
    void (*rollback)(agg_qx_t *x); /* quiet when no transaction is open */
    int (*lock_tiers)(agg_qx_t *x, int alone);
    int64_t (*changes)(agg_qxst_t *st);
    void (*bind_double)(agg_qxst_t *st, int i, double v);
} agg_qx_vtab_t;

/* A backend's vtab slots filled with its functions, named P_slot (sq_step, pg_step, ...); the
 * backend adds .begin and its optional slots (lock_tiers). */
#define AGG_QX_VTAB(P, NAME)                                                                       \
    .name = NAME, .close = P##_close, .errmsg = P##_errmsg, .prepare = P##_prepare,                \
    .id_table = P##_id_table, .bind_int64 = P##_bind_int64, .bind_blob = P##_bind_blob,            \
    .bind_text = P##_bind_text, .step = P##_step, .col_int64 = P##_col_int64,                      \
    .col_text = P##_col_text, .col_blob = P##_col_blob, .reset = P##_reset,                        \
    .finalize = P##_finalize, .exec = P##_exec, .rollback = P##_rollback,                          \
    .changes = P##_changes, .bind_double = P##_bind_double

struct agg_qx {
    const agg_qx_vtab_t *vt;
};
struct agg_qxst {
    const agg_qx_vtab_t *vt;
};

int agg_qx_sqlite_open(const char *path, agg_qx_t **out, char *err, size_t err_size);
int agg_qx_pg_open(const char *url, agg_qx_t **out, char *err, size_t err_size);
/* An executor over a store's open connection, which stays the caller's (closing the executor
 * leaves it open). CM_ENOMEM or 0. */
struct sqlite3;
struct pg_conn;
int agg_qx_sqlite_wrap(struct sqlite3 *db, agg_qx_t **out);
int agg_qx_pg_wrap(struct pg_conn *conn, agg_qx_t **out);
/* A SQLite result code (extended or not) as 0 (OK, ROW, DONE), CM_ENOMEM, -EBUSY (BUSY,
 * LOCKED), -ENOSPC, -EACCES (READONLY, PERM, AUTH), -ENOENT (CANTOPEN), CM_EFORMAT (CORRUPT,
 * NOTADB) or CM_EIO: the one translation at the SQLite backends' edge. */
int agg_sqlite_err(int rc);
/* A connection to a PostgreSQL store at url, whose attempt gives up after 5 s unless the URL
 * sets connect_timeout (a server that drops packets must not hold the consume loop, a query
 * or a shutdown for the kernel's TCP timeouts of minutes). NULL when it failed, with "cannot
 * connect to the PostgreSQL store <url without its password>: <libpq's reason>" (one line)
 * in err. */
struct pg_conn *agg_pg_connect(const char *url, char *err, size_t err_size);
/* Whether a transaction begun on x (agg_qx_begin) is still open: not ended by agg_qx_commit or
 * agg_qx_rollback. A wrapped connection's owner must not reset it then (store_pg.c). */
int agg_qx_pg_in_tx(const agg_qx_t *x);

#endif
