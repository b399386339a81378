/* PostgreSQL implementation of the query executor (qexec.h), over libpq: one connection per
 * query store handle (so per API worker, qpool.h). A statement keeps its SQL with `?N`
 * rewritten to `$N`; a step after binding runs it (integers sent as int8 text, blobs as binary
 * bytea, text as text; parameters never bound are typed int8 and NULL, so numbering may have
 * gaps) and then walks the result rows. Results come back in binary form when every column of
 * the statement is an integer, numeric, text or bytea (no integer printed by the server and
 * parsed back here), else in text form (bytea decoded from its hex form). Each distinct SQL text (with its parameter types) is prepared once per connection
 * as a named server-side statement (PQprepare; at most MAX_PREPARED, later ones run unnamed),
 * so the server parses and plans it once per session instead of on every call.
 * Connection loss: when a statement fails because the session is gone (CONNECTION_BAD, SQLSTATE
 * class 08, 57P01-57P03: a database restart), the connection is reset, the id tables it held
 * are filled again, and the statement runs once more, so a restart costs the caller nothing;
 * a second failure is returned.
 * Threading: a connection and its statements are used by one thread at a time. */
#include "qexec.h"
#include "store_pg.h"

#include "cm/error.h"
#include "cm/log.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OID_INT8 20
#define OID_BYTEA 17
#define OID_TEXT 25
#define OID_INT2 21
#define OID_INT4 23
#define OID_VARCHAR 1043
#define OID_NUMERIC 1700
#define OID_FLOAT8 701
#define MAX_PARAMS 1024
#define MAX_BLOBS 8 /* decoded bytea columns kept per row */

#define MAX_PREPARED 256 /* named server-side statements kept per connection */
#define MAX_TEMPS 4      /* id tables remembered per connection (refilled on a reconnect) */

typedef struct {
    char *key;  /* parameter types then the SQL */
    char name[16];
    int binary; /* every result column has a type read_int/col_* decode in binary form */
} pg_prep_t;

typedef struct {
    char table[64];
    uint64_t *ids;
    size_t n;
} pg_temp_t;

typedef struct {
    agg_qx_t base;
    PGconn *conn;
    pg_prep_t prep[MAX_PREPARED]; /* statements prepared on this connection */
    int nprep;
    unsigned next_name;
    pg_temp_t temps[MAX_TEMPS]; /* what each id table holds */
    int ntemps;
    int wrapped; /* a store's connection (agg_qx_pg_wrap): not ours to close or reset */
    int pid;     /* the server backend the prepared statements are on */
    int in_tx;   /* a BEGIN succeeded and no COMMIT or rollback ended it yet */
} pg_qx_t;

typedef struct {
    Oid type;    /* 0: unbound */
    char num[24]; /* an int8's text */
    char *data;   /* a blob or a text (owned) */
    int len;
} pg_param_t;

typedef struct {
    agg_qxst_t base;
    pg_qx_t *x;
    char *sql;
    int nparams; /* highest parameter number in the SQL */
    pg_param_t *params;
    PGresult *res;
    int row, nrows;
    unsigned char *blobs[MAX_BLOBS];
    int nblobs;
    char num[24]; /* col_text of a binary integer column */
} pg_qxst_t;

static const agg_qx_vtab_t pg_vtab;

static void quiet(void *arg, const char *msg) { /* NOTICEs (temp table exists): not errors */
    (void)arg;
    (void)msg;
}

static void forget_prepared(pg_qx_t *x) {
    for (int i = 0; i < x->nprep; i++)
        free(x->prep[i].key);
    x->nprep = 0;
}

static int fill_ids(PGconn *c, const char *table, const uint64_t *ids, size_t n);

/* A new session: the server-side statements are gone, the id tables are filled again. */
static PGconn *reconnect(pg_qx_t *x) {
    forget_prepared(x);
    PQreset(x->conn);
    if (PQstatus(x->conn) != CONNECTION_OK) {
        CM_WARN("query: postgres store: cannot reconnect: %s", PQerrorMessage(x->conn));
        return NULL;
    }
    for (int i = 0; i < x->ntemps; i++)
        if (fill_ids(x->conn, x->temps[i].table, x->temps[i].ids, x->temps[i].n))
            return NULL;
    return x->conn;
}

/* The connection, reconnected when it was lost; NULL when the server cannot be reached (a
 * store's connection is reconnected by the store, between transactions). */
static PGconn *conn(pg_qx_t *x) {
    if (PQstatus(x->conn) == CONNECTION_OK) {
        if (x->pid != PQbackendPID(x->conn)) { /* reset by its owner: a new session */
            forget_prepared(x);
            x->pid = PQbackendPID(x->conn);
        }
        return x->conn;
    }
    return x->wrapped ? NULL : reconnect(x);
}

/* Whether a failed result says the session is gone (server restart, admin shutdown, network):
 * then the statement is worth one retry on a fresh connection. */
static int broken(PGconn *c, const PGresult *r) {
    if (PQstatus(c) == CONNECTION_BAD)
        return 1;
    const char *st = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;
    return st && (!strncmp(st, "08", 2) || !strcmp(st, "57P01") || !strcmp(st, "57P02") ||
                  !strcmp(st, "57P03"));
}

static int result_ok(const PGresult *r) {
    return PQresultStatus(r) == PGRES_TUPLES_OK || PQresultStatus(r) == PGRES_COMMAND_OK;
}

static void pg_close(agg_qx_t *base) {
    pg_qx_t *x = (pg_qx_t *)base;
    forget_prepared(x);
    for (int i = 0; i < x->ntemps; i++)
        free(x->temps[i].ids);
    if (!x->wrapped)
        PQfinish(x->conn);
    free(x);
}

static const char *pg_errmsg(agg_qx_t *base) { return PQerrorMessage(((pg_qx_t *)base)->conn); }

/* sql with ?N -> $N; the highest N in *maxp. NULL when out of memory. */
static char *translate(const char *sql, int *maxp) {
    size_t n = strlen(sql);
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    int max = 0;
    for (size_t i = 0; i <= n; i++) {
        out[i] = sql[i];
        if (sql[i] == '?' && sql[i + 1] >= '0' && sql[i + 1] <= '9') {
            out[i] = '$';
            int v = atoi(sql + i + 1);
            max = v > max ? v : max;
        }
    }
    *maxp = max;
    return out;
}

static void drop_result(pg_qxst_t *s) {
    PQclear(s->res);
    s->res = NULL;
    s->row = -1;
    s->nrows = 0;
    for (int i = 0; i < s->nblobs; i++)
        PQfreemem(s->blobs[i]);
    s->nblobs = 0;
}

static int pg_prepare(agg_qx_t *base, const char *sql, agg_qxst_t **out) {
    pg_qxst_t *s = calloc(1, sizeof *s);
    if (!s)
        return CM_ENOMEM;
    s->base.vt = &pg_vtab;
    s->x = (pg_qx_t *)base;
    s->row = -1;
    if (!(s->sql = translate(sql, &s->nparams)) || s->nparams > MAX_PARAMS ||
        !(s->params = calloc((size_t)(s->nparams ? s->nparams : 1), sizeof *s->params))) {
        int big = s->sql && s->nparams > MAX_PARAMS;
        free(s->sql);
        free(s);
        return big ? CM_EINVAL : CM_ENOMEM;
    }
    *out = &s->base;
    return 0;
}

static pg_param_t *param(agg_qxst_t *st, int i) {
    pg_qxst_t *s = (pg_qxst_t *)st;
    if (i < 1 || i > s->nparams)
        return NULL; /* not in the SQL: SQLite ignores it too (its bind fails) */
    pg_param_t *p = &s->params[i - 1];
    free(p->data);
    p->data = NULL;
    drop_result(s); /* a new binding: the next step runs the statement again */
    return p;
}

static void pg_bind_int64(agg_qxst_t *st, int i, int64_t v) {
    pg_param_t *p = param(st, i);
    if (p) {
        p->type = OID_INT8;
        snprintf(p->num, sizeof p->num, "%lld", (long long)v);
    }
}

static void pg_bind_double(agg_qxst_t *st, int i, double v) {
    pg_param_t *p = param(st, i);
    if (p) {
        p->type = OID_FLOAT8;
        snprintf(p->num, sizeof p->num, "%.17g", v);
    }
}

static void pg_bind_blob(agg_qxst_t *st, int i, const void *b, size_t n) {
    pg_param_t *p = param(st, i);
    if (p && (p->data = malloc(n ? n : 1))) {
        memcpy(p->data, b, n);
        p->len = (int)n;
        p->type = OID_BYTEA;
    }
}

static void pg_bind_text(agg_qxst_t *st, int i, const char *t) {
    pg_param_t *p = param(st, i);
    if (p && (p->data = strdup(t))) {
        p->len = (int)strlen(t);
        p->type = OID_TEXT;
    }
}

/* Whether every result column of prepared statement `name` has a type that the column readers
 * decode in binary form (integers, numeric, text, bytea): then its results come back binary,
 * with no integer printed by the server and parsed back here. Anything else stays text. */
static int binary_ok(PGconn *c, const char *name) {
    PGresult *d = PQdescribePrepared(c, name);
    int ok = PQresultStatus(d) == PGRES_COMMAND_OK && PQnfields(d) > 0;
    for (int i = 0; ok && i < PQnfields(d); i++) {
        Oid t = PQftype(d, i);
        ok = t == OID_INT8 || t == OID_INT4 || t == OID_INT2 || t == OID_NUMERIC ||
             t == OID_TEXT || t == OID_VARCHAR || t == OID_BYTEA;
    }
    PQclear(d);
    return ok;
}

/* One execution of s on c: a named statement prepared on first use on this connection (so the
 * server parses and plans it once per session, not per call), unnamed when the cache is full. */
static PGresult *exec_once(pg_qxst_t *s, PGconn *c, int n, const Oid *types,
                           const char *const *vals, const int *lens, const int *fmts) {
    pg_qx_t *x = s->x;
    char key_head[MAX_PARAMS * 2 + 2], *w = key_head;
    for (int i = 0; i < n; i++)
        *w++ = types[i] == OID_BYTEA    ? 'b'
               : types[i] == OID_TEXT   ? 't'
               : types[i] == OID_FLOAT8 ? 'f'
                                        : 'i';
    *w++ = ':';
    *w = 0;
    size_t hl = (size_t)(w - key_head);
    for (int i = 0; i < x->nprep; i++) {
        const char *k = x->prep[i].key;
        if (!strncmp(k, key_head, hl) && !strcmp(k + hl, s->sql))
            return PQexecPrepared(c, x->prep[i].name, n, vals, lens, fmts, x->prep[i].binary);
    }
    if (x->nprep == MAX_PREPARED)
        return PQexecParams(c, s->sql, n, types, vals, lens, fmts, 0);
    pg_prep_t *p = &x->prep[x->nprep];
    size_t ql = strlen(s->sql);
    if (!(p->key = malloc(hl + ql + 1)))
        return PQexecParams(c, s->sql, n, types, vals, lens, fmts, 0);
    memcpy(p->key, key_head, hl);
    memcpy(p->key + hl, s->sql, ql + 1);
    snprintf(p->name, sizeof p->name, "fq%u", x->next_name++);
    PGresult *r = PQprepare(c, p->name, s->sql, n, types);
    if (!result_ok(r)) {
        free(p->key);
        return r;
    }
    PQclear(r);
    p->binary = binary_ok(c, p->name);
    x->nprep++;
    return PQexecPrepared(c, p->name, n, vals, lens, fmts, p->binary);
}

static int run(pg_qxst_t *s) {
    PGconn *c = conn(s->x);
    if (!c)
        return CM_EIO;
    int n = s->nparams;
    Oid types[MAX_PARAMS];
    const char *vals[MAX_PARAMS];
    int lens[MAX_PARAMS], fmts[MAX_PARAMS];
    for (int i = 0; i < n; i++) {
        pg_param_t *p = &s->params[i];
        int num = p->type == OID_INT8 || p->type == OID_FLOAT8;
        types[i] = p->type ? p->type : OID_INT8;
        vals[i] = num ? p->num : p->data;
        lens[i] = num ? 0 : p->len;
        fmts[i] = p->type == OID_BYTEA;
    }
    s->res = exec_once(s, c, n, types, vals, lens, fmts);
    if (!result_ok(s->res) && broken(c, s->res) && !s->x->wrapped) {
        /* the session is gone (a database restart): once more on a fresh one, transparently */
        const char *code = PQresultErrorField(s->res, PG_DIAG_SQLSTATE);
        CM_INFO("query: postgres store: connection lost (%s), reconnecting",
                code ? code : "no SQLSTATE");
        PQclear(s->res);
        s->res = NULL;
        if (!(c = reconnect(s->x)))
            return CM_EIO;
        s->res = exec_once(s, c, n, types, vals, lens, fmts);
    }
    if (!result_ok(s->res)) {
        CM_WARN("query: postgres store: %.80s: %s", s->sql, PQresultErrorMessage(s->res));
        drop_result(s);
        /* a store's connection may have been reset to a new session with the old backend pid
         * (conn() could not tell): its statements are prepared again from the next call */
        if (s->x->wrapped)
            forget_prepared(s->x);
        return CM_EIO;
    }
    s->nrows = PQntuples(s->res);
    return 0;
}

static int pg_step(agg_qxst_t *st) {
    pg_qxst_t *s = (pg_qxst_t *)st;
    if (!s->res) {
        int rc = run(s);
        if (rc)
            return rc;
    }
    for (int i = 0; i < s->nblobs; i++)
        PQfreemem(s->blobs[i]);
    s->nblobs = 0;
    if (s->row + 1 >= s->nrows) {
        s->row = s->nrows;
        return 0;
    }
    s->row++;
    return 1;
}

static int valid(pg_qxst_t *s, int i) {
    return s->res && s->row >= 0 && s->row < s->nrows && i >= 0 && i < PQnfields(s->res) &&
           !PQgetisnull(s->res, s->row, i);
}

static uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* A numeric in binary form (ndigits, weight, sign, dscale, then base-10,000 digits), its
 * integer part as strtoll reads the text form: saturated to the int64 range, NaN 0. */
static int64_t numeric_int(const unsigned char *p, int len) {
    if (len < 8)
        return 0;
    int nd = (int16_t)be(p, 2), weight = (int16_t)be(p + 2, 2);
    unsigned sign = (unsigned)be(p + 4, 2);
    if (sign == 0xC000 || nd < 0 || len < 8 + 2 * nd)
        return 0;
    uint64_t v = 0;
    int big = 0;
    for (int i = 0; i <= weight && !big; i++) {
        uint64_t d = i < nd ? be(p + 8 + 2 * i, 2) : 0;
        if (v > (UINT64_MAX - d) / 10000)
            big = 1;
        else
            v = v * 10000 + d;
    }
    if (sign == 0x4000)
        return big || v > (uint64_t)INT64_MAX + 1 ? INT64_MIN : (int64_t)(0 - v);
    return big || v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
}

/* Column i of the current row as an integer, from its text or binary form. */
static int64_t read_int(pg_qxst_t *s, int i) {
    const char *v = PQgetvalue(s->res, s->row, i);
    if (!PQfformat(s->res, i)) /* SUM() of bigint is numeric: an integer in text form */
        return (int64_t)strtoll(v, NULL, 10);
    const unsigned char *u = (const unsigned char *)v;
    int len = PQgetlength(s->res, s->row, i);
    switch (PQftype(s->res, i)) {
    case OID_INT8:
        return len == 8 ? (int64_t)be(u, 8) : 0;
    case OID_INT4:
        return len == 4 ? (int32_t)be(u, 4) : 0;
    case OID_INT2:
        return len == 2 ? (int16_t)be(u, 2) : 0;
    case OID_NUMERIC:
        return numeric_int(u, len);
    default: /* text: binary form is the characters (libpq adds the terminating NUL) */
        return (int64_t)strtoll(v, NULL, 10);
    }
}

static int is_int_type(Oid t) {
    return t == OID_INT8 || t == OID_INT4 || t == OID_INT2 || t == OID_NUMERIC;
}

static int64_t pg_col_int64(agg_qxst_t *st, int i) {
    pg_qxst_t *s = (pg_qxst_t *)st;
    return valid(s, i) ? read_int(s, i) : 0;
}

static const char *pg_col_text(agg_qxst_t *st, int i) {
    pg_qxst_t *s = (pg_qxst_t *)st;
    if (!valid(s, i))
        return NULL;
    if (PQfformat(s->res, i) && is_int_type(PQftype(s->res, i))) { /* as its text form */
        snprintf(s->num, sizeof s->num, "%lld", (long long)read_int(s, i));
        return s->num;
    }
    return PQgetvalue(s->res, s->row, i);
}

static const void *pg_col_blob(agg_qxst_t *st, int i, size_t *n) {
    pg_qxst_t *s = (pg_qxst_t *)st;
    *n = 0;
    if (!valid(s, i))
        return NULL;
    if (PQfformat(s->res, i)) { /* binary bytea (or text): the bytes themselves */
        *n = (size_t)PQgetlength(s->res, s->row, i);
        return PQgetvalue(s->res, s->row, i);
    }
    if (s->nblobs == MAX_BLOBS)
        return NULL;
    size_t len = 0;
    unsigned char *b = PQunescapeBytea((const unsigned char *)PQgetvalue(s->res, s->row, i),
                                       &len);
    if (!b)
        return NULL;
    s->blobs[s->nblobs++] = b;
    *n = len;
    return b;
}

static void pg_reset(agg_qxst_t *st) { drop_result((pg_qxst_t *)st); }

static void pg_finalize(agg_qxst_t *st) {
    pg_qxst_t *s = (pg_qxst_t *)st;
    drop_result(s);
    for (int i = 0; i < s->nparams; i++)
        free(s->params[i].data);
    free(s->params);
    free(s->sql);
    free(s);
}

static int exec_ok(PGconn *c, PGresult *r) {
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
    if (!ok)
        CM_WARN("query: postgres store: %s", PQerrorMessage(c));
    PQclear(r);
    return ok ? 0 : CM_EIO;
}

static int fill_ids(PGconn *c, const char *table, const uint64_t *ids, size_t n) {
    char sql[256];
    snprintf(sql, sizeof sql,
             "CREATE TEMP TABLE IF NOT EXISTS %s(id bigint PRIMARY KEY); TRUNCATE %s", table,
             table);
    int rc = exec_ok(c, PQexec(c, sql));
    if (rc)
        return rc;
    /* one statement: the ids as an int8[] literal */
    char *arr = malloc(n * 21 + 3), *w = arr;
    if (!arr)
        return CM_ENOMEM;
    *w++ = '{';
    for (size_t i = 0; i < n; i++)
        w += sprintf(w, "%s%lld", i ? "," : "", (long long)ids[i]);
    *w++ = '}';
    *w = 0;
    snprintf(sql, sizeof sql, "INSERT INTO %s SELECT DISTINCT unnest($1::bigint[])", table);
    const char *vals[1] = {arr};
    rc = exec_ok(c, PQexecParams(c, sql, 1, NULL, vals, NULL, NULL, 0));
    free(arr);
    return rc;
}

/* Remembers what table holds, so that a reconnect can fill it again before the statement that
 * joins it is retried. */
static int remember_ids(pg_qx_t *x, const char *table, const uint64_t *ids, size_t n) {
    pg_temp_t *t = NULL;
    for (int i = 0; i < x->ntemps && !t; i++)
        if (!strcmp(x->temps[i].table, table))
            t = &x->temps[i];
    if (!t) {
        if (x->ntemps == MAX_TEMPS || strlen(table) >= sizeof t->table)
            return CM_EINVAL;
        t = &x->temps[x->ntemps++];
        snprintf(t->table, sizeof t->table, "%s", table);
    }
    uint64_t *c = realloc(t->ids, (n ? n : 1) * sizeof *c);
    if (!c)
        return CM_ENOMEM;
    memcpy(c, ids, n * sizeof *c);
    t->ids = c;
    t->n = n;
    return 0;
}

static int pg_id_table(agg_qx_t *base, const char *table, const uint64_t *ids, size_t n) {
    pg_qx_t *x = (pg_qx_t *)base;
    int rc = remember_ids(x, table, ids, n);
    if (rc)
        return rc;
    PGconn *c = conn(x);
    if (!c)
        return CM_EIO;
    rc = fill_ids(c, table, ids, n);
    if (rc == CM_EIO && PQstatus(c) == CONNECTION_BAD) /* lost: reconnect() refills it */
        rc = reconnect(x) ? 0 : CM_EIO;
    return rc;
}

static int64_t pg_changes(agg_qxst_t *st) {
    pg_qxst_t *s = (pg_qxst_t *)st;
    return s->res ? strtoll(PQcmdTuples(s->res), NULL, 10) : 0;
}

static int pg_exec(agg_qx_t *base, const char *sql) {
    PGconn *c = conn((pg_qx_t *)base);
    if (!c)
        return CM_EIO;
    PGresult *r = PQexec(c, sql);
    int rc = result_ok(r) ? 0 : CM_EIO;
    if (rc)
        CM_WARN("postgres store: '%.60s': %s", sql, PQerrorMessage(c));
    PQclear(r);
    pg_qx_t *x = (pg_qx_t *)base;
    if (!strcmp(sql, "BEGIN"))
        x->in_tx = !rc;
    else if (!strcmp(sql, "COMMIT")) /* committed, or lost: over either way */
        x->in_tx = 0;
    return rc;
}

int agg_qx_pg_in_tx(const agg_qx_t *base) { return ((const pg_qx_t *)base)->in_tx; }

static void pg_rollback(agg_qx_t *base) {
    pg_qx_t *x = (pg_qx_t *)base;
    x->in_tx = 0;
    if (PQstatus(x->conn) == CONNECTION_OK)
        PQclear(PQexec(x->conn, "ROLLBACK"));
}

/* The tiers lock: meta's 'tiers_lock' row, FOR SHARE or FOR UPDATE (created on first use). */
static int pg_lock_tiers(agg_qx_t *base, int alone) {
    return pg_exec(base, alone ? "INSERT INTO meta VALUES('tiers_lock','') ON CONFLICT DO "
                                 "NOTHING; SELECT 1 FROM meta WHERE key='tiers_lock' FOR UPDATE"
                               : "INSERT INTO meta VALUES('tiers_lock','') ON CONFLICT DO "
                                 "NOTHING; SELECT 1 FROM meta WHERE key='tiers_lock' FOR SHARE");
}

static const agg_qx_vtab_t pg_vtab = {AGG_QX_VTAB(pg, "postgres"), .begin = "BEGIN",
                                       .lock_tiers = pg_lock_tiers};

/* An executor over conn: its own (closed with it, reconnected on a failure), or a wrapped
 * store's connection. CM_ENOMEM or 0. */
static int qx_new(PGconn *conn, int wrapped, agg_qx_t **out) {
    pg_qx_t *x = calloc(1, sizeof *x);
    if (!x)
        return CM_ENOMEM;
    x->base.vt = &pg_vtab;
    x->conn = conn;
    x->wrapped = wrapped;
    *out = &x->base;
    return 0;
}

int agg_qx_pg_wrap(PGconn *conn, agg_qx_t **out) { return qx_new(conn, 1, out); }

PGconn *agg_pg_connect(const char *url, char *err, size_t err_size) {
    const char *const keys[] = {"connect_timeout", "dbname", NULL};
    const char *const vals[] = {"5", url, NULL};
    PGconn *c = PQconnectdbParams(keys, vals, 1); /* the URL's own parameters come later: they win */
    if (PQstatus(c) == CONNECTION_OK)
        return c;
    char safe[512];
    agg_store_pg_url_safe(url, safe, sizeof safe);
    snprintf(err, err_size, "cannot connect to the PostgreSQL store %s: %s", safe,
             c ? PQerrorMessage(c) : "out of memory");
    err[strcspn(err, "\n")] = 0;
    PQfinish(c);
    return NULL;
}

int agg_qx_pg_open(const char *url, agg_qx_t **out, char *err, size_t err_size) {
    PGconn *c = agg_pg_connect(url, err, err_size);
    if (!c)
        return CM_EIO;
    PQsetNoticeProcessor(c, quiet, NULL);
    int rc = qx_new(c, 0, out);
    if (rc) {
        snprintf(err, err_size, "out of memory");
        PQfinish(c);
    }
    return rc;
}
