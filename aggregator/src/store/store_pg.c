/* PostgreSQL store backend (see store_pg.h): connection and reconnection, the fence, each
 * table's rows copied (COPY, binary) into a temporary staging table and merged with one
 * INSERT ... SELECT ... ON CONFLICT, or, for rows new to the store, a plain INSERT first
 * (pg_load), or, for a packed table, a row per group straight into it (load_packed) (the
 * batch write itself is store/write.c's).
 * Threading: a handle is used by one thread at a time. */
#define _GNU_SOURCE
#include "store_pg.h"

#include "cm/buf.h"
#include "cm/error.h"
#include "cm/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One table's rows: columns are written in order, each row's first one opening the row. */
typedef struct {
    cm_buf_t b;
    int ncols, col;
    size_t rows;
    int bad_text; /* the row being written has a text that was not UTF-8 */
} cols_t;

typedef struct {
    agg_store_t base;
    PGconn *conn;
    char *url;
    int64_t retry_ms; /* CLOCK_MONOTONIC ms before which no reconnection is tried */
    agg_qx_t *qx; /* conn as the query executor of store/tiers.c */
    int stage_pid; /* the server backend that has our staging tables (0: none yet) */
    cols_t copy;   /* a table's rows in COPY's binary format, reused */
    void **split;  /* a table's rows, its fresh ones first (pg_load), reused */
    size_t split_cap;
    /* per table of agg_batch_tables with fresh rows: batches left before its fresh rows are
     * inserted without ON CONFLICT again, and the misses in a row that set it */
    int fresh_skip[32], fresh_misses[32];
} pg_store_t;

int agg_store_is_pg(const char *spec) {
    return spec && (!strncmp(spec, "postgres://", 11) || !strncmp(spec, "postgresql://", 13));
}

/* ---- connection ---- */

/* The connection, re-established when it was lost (a database restart, a network cut): NULL
 * when the server cannot be reached now (the caller fails the call; the next one tries
 * again). Never re-established inside a transaction of s->qx (a batch, a compaction): the
 * statements after it would run in autocommit on the new session, outside the fence's lock;
 * the caller fails with CM_EIO, rolls back, and its retry re-reads the stored offset. */
static PGconn *conn(pg_store_t *s) {
    if (s->conn && PQstatus(s->conn) == CONNECTION_OK)
        return s->conn;
    if (s->conn && s->qx && agg_qx_pg_in_tx(s->qx)) {
        CM_WARN("postgres store: connection lost inside a transaction: failing it (not "
                "reconnecting until it is rolled back)");
        return NULL;
    }
    if (s->conn) {
        /* at most one attempt a second: the consume loop calls in a tight loop while the
         * database is away */
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t now_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
        if (now_ms < s->retry_ms)
            return NULL;
        PQreset(s->conn);
        s->stage_pid = 0; /* a new backend (its pid may be the old one's): no staging tables */
        if (PQstatus(s->conn) == CONNECTION_OK) {
            CM_INFO("postgres store: reconnected");
            return s->conn;
        }
        s->retry_ms = now_ms + 1000;
        CM_WARN("postgres store: cannot reconnect: %s", PQerrorMessage(s->conn));
        return NULL;
    }
    char err[512];
    if (!(s->conn = agg_pg_connect(s->url, err, sizeof err)))
        CM_WARN("postgres store: %s", err);
    return s->conn;
}

/* ---- rows in COPY's binary format, into a temporary staging table per target ----
 * A batch's rows of one table go to the server in one COPY ... FROM STDIN (FORMAT binary)
 * into a temporary table (this backend's own buffers, no WAL, emptied at commit), then one
 * set-based INSERT ... SELECT ... ON CONFLICT merges them into the table: no text to print or
 * parse, no arrays to build and unnest. */

static void put_be(cm_buf_t *b, uint64_t v, int bytes) {
    unsigned char x[8];
    for (int i = 0; i < bytes; i++)
        x[i] = (unsigned char)(v >> (8 * (bytes - 1 - i)));
    cm_buf_put(b, x, (size_t)bytes);
}

static void cols_begin(cols_t *t, int ncols) {
    static const char sig[11] = "PGCOPY\n\377\r\n"; /* + NUL: 11 bytes */
    t->b.n = 0;
    t->b.fail = 0;
    t->ncols = ncols;
    t->col = 0;
    t->rows = 0;
    cm_buf_put(&t->b, sig, 11);
    put_be(&t->b, 0, 4); /* flags */
    put_be(&t->b, 0, 4); /* header extension length */
}

/* The field header of column i (length len); a column out of order fails the batch. */
static void field(cols_t *t, int i, uint32_t len) {
    if (t->col == 0)
        put_be(&t->b, (uint64_t)t->ncols, 2);
    if (i != t->col++)
        t->b.fail = 1;
    put_be(&t->b, len, 4);
}

/* An integer column: its field header (and the row's column count before the first column)
 * and its big-endian value in one append, the hot path of every table's rows. */
static void col_i64(cols_t *t, int i, uint64_t v) {
    unsigned char x[14];
    size_t n = 0;
    if (t->col == 0) {
        x[n++] = (unsigned char)(t->ncols >> 8);
        x[n++] = (unsigned char)t->ncols;
    }
    if (i != t->col++)
        t->b.fail = 1;
    static const unsigned char len8[4] = {0, 0, 0, 8};
    memcpy(x + n, len8, 4);
    uint64_t be = __builtin_bswap64(v);
    memcpy(x + n + 4, &be, 8);
    cm_buf_put(&t->b, x, n + 12);
}

static void col_f64(cols_t *t, int i, double v) {
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    field(t, i, 8);
    put_be(&t->b, u, 8);
}

/* bytea and text: the bytes as they are */
static void col_bytes(cols_t *t, int i, const void *p, size_t len) {
    field(t, i, (uint32_t)len);
    cm_buf_put(&t->b, p, len);
}

/* Length of the well-formed UTF-8 sequence at p (as PostgreSQL checks it: no overlong
 * forms, surrogates, NUL or code points past U+10FFFF), 0 when there is none. */
static size_t utf8_len(const unsigned char *p, size_t n) {
    if (!n || !p[0])
        return 0;
    if (p[0] < 0x80)
        return 1;
    size_t k = p[0] >= 0xc2 && p[0] <= 0xdf   ? 2
               : p[0] >= 0xe0 && p[0] <= 0xef ? 3
               : p[0] >= 0xf0 && p[0] <= 0xf4 ? 4
                                              : 0;
    if (!k || k > n)
        return 0;
    for (size_t i = 1; i < k; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0) ||
        (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))
        return 0;
    return k;
}

/* text: the bytes when they are UTF-8 without NUL; else each bad byte becomes U+FFFD (the
 * server refuses the whole COPY otherwise, and the batch would fail every time it is consumed
 * again). The row keeps the id of the original bytes. Returns 1 when it replaced bytes. */
static int col_text(cols_t *t, int i, const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    size_t out = 0, bad = 0;
    for (size_t o = 0, k; o < len; o += k ? k : 1) {
        k = utf8_len(p + o, len - o);
        out += k ? k : 3;
        bad += !k;
    }
    if (!bad) {
        col_bytes(t, i, s, len);
        return 0;
    }
    field(t, i, (uint32_t)out);
    for (size_t o = 0, k; o < len; o += k ? k : 1) {
        k = utf8_len(p + o, len - o);
        cm_buf_put(&t->b, k ? (const char *)p + o : "\xef\xbf\xbd", k ? k : 3);
    }
    return 1;
}

static void row_end(cols_t *t) {
    if (t->col != t->ncols)
        t->b.fail = 1;
    t->col = 0;
    t->rows++;
}

static void cols_free(cols_t *t) { cm_buf_free(&t->b); }

/* The staging tables (one per table of agg_batch_tables), created once per server backend (a
 * reconnection gets a new one). */
static int stage_tables(pg_store_t *s, PGconn *c) {
    if (s->stage_pid == PQbackendPID(c))
        return 0;
    /* a sequential scan of a staging table returns the rows in the order they were copied
     * (key order, see ordered()) */
    char sql[8192];
    size_t o = (size_t)snprintf(sql, sizeof sql, "SET synchronize_seqscans = off; "
                                "SET temp_buffers = '64MB'; ");
    for (int i = 0; i < agg_batch_ntables && o < sizeof sql; i++)
        for (int k = 0, n = agg_schema_packed(agg_batch_tables[i].table) ? -1
                            : agg_batch_tables[i].fresh_off                ? 1
                                                                           : 0;
             k <= n && o < sizeof sql; k++)
            o += (size_t)snprintf(sql + o, sizeof sql - o,
                                  "CREATE TEMP TABLE IF NOT EXISTS stage_%s%s (LIKE %s) ON "
                                  "COMMIT DELETE ROWS; ", agg_batch_tables[i].table,
                                  (const char *[]){"", "_new"}[k],
                                  agg_batch_tables[i].table);
    if (o >= sizeof sql)
        return CM_EINVAL;
    PGresult *r = PQexec(c, sql);
    int rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : CM_EIO;
    if (rc)
        CM_WARN("postgres store: creating the staging tables: %s", PQerrorMessage(c));
    PQclear(r);
    if (!rc)
        s->stage_pid = PQbackendPID(c);
    return rc;
}

/* Sends t's rows (their trailer written) by COPY into table `into`: 0, CM_EIO, or 1 when the
 * server refused them for a key it holds already (SQLSTATE 23505, the transaction then
 * aborted up to its last savepoint). */
static int copy_rows(PGconn *c, const cols_t *t, const char *into) {
    char sql[512];
    snprintf(sql, sizeof sql, "COPY %s FROM STDIN (FORMAT binary)", into);
    PGresult *r = PQexec(c, sql);
    int rc = PQresultStatus(r) == PGRES_COPY_IN ? 0 : CM_EIO;
    PQclear(r);
    if (rc)
        return rc;
    for (size_t o = 0, piece; o < t->b.n && !rc; o += piece) {
        piece = t->b.n - o < (1u << 20) ? t->b.n - o : (1u << 20);
        if (PQputCopyData(c, t->b.p + o, (int)piece) != 1)
            rc = CM_EIO;
    }
    if (PQputCopyEnd(c, rc ? "write failed" : NULL) != 1)
        rc = CM_EIO;
    while ((r = PQgetResult(c))) { /* the COPY's result, then NULL */
        if (PQresultStatus(r) != PGRES_COMMAND_OK && !rc) {
            const char *st = PQresultErrorField(r, PG_DIAG_SQLSTATE);
            rc = st && !strcmp(st, "23505") ? 1 : CM_EIO;
        }
        PQclear(r);
    }
    return rc;
}

static int exec_ok(PGconn *c, const char *sql) {
    PGresult *r = PQexec(c, sql);
    int rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : CM_EIO;
    PQclear(r);
    return rc;
}

/* Copies t's rows into stage_<table><suffix> (empty until then: one load of a batch each)
 * and merges them into the table with one statement. */
static int merge_rows(PGconn *c, const cols_t *t, const agg_schema_table_t *table,
                      const char *suffix) {
    char stage[96], src[128], sql[2048];
    snprintf(stage, sizeof stage, "stage_%s%s", table->name, suffix);
    snprintf(src, sizeof src, "SELECT * FROM %s", stage);
    if (agg_schema_upsert(table, src, sql, sizeof sql))
        return CM_EINVAL;
    int rc = copy_rows(c, t, stage);
    return rc ? CM_EIO : exec_ok(c, sql);
}

/* A bulk load's values, in COPY's binary format (bad UTF-8 in a text: noted for row_end). */
static void pg_i64(void *ctx, int c, int64_t v) { col_i64(ctx, c, (uint64_t)v); }
static void pg_f64(void *ctx, int c, double v) { col_f64(ctx, c, v); }

static void pg_bytes(void *ctx, int c, const void *p, size_t len, int text) {
    cols_t *t = ctx;
    if (!text)
        col_bytes(t, c, p, len);
    else if (col_text(t, c, p, len))
        t->bad_text = 1;
}

static int pg_row_end(void *ctx, const agg_load_t *l, size_t row);
static const agg_load_sink_t pg_sink = {pg_i64, pg_f64, pg_bytes, pg_row_end};

static int pg_row_end(void *ctx, const agg_load_t *l, size_t row) {
    cols_t *t = ctx;
    row_end(t);
    if (t->bad_text)
        CM_WARN("postgres store: a text of %s (row key %016llx) is not UTF-8: stored with U+FFFD "
                "for its bad bytes", l->t->name,
                (unsigned long long)agg_bcol_i64(&l->d->cols[0], l->rows[row], 0));
    t->bad_text = 0;
    return 0;
}

/* Whether rows a and b of l agree in their first n columns. */
static int same_group(const agg_load_t *l, const void *a, const void *b, int n) {
    for (int c = 0; c < n; c++) {
        const agg_bcol_t *col = &l->d->cols[c];
        char ty = l->t->types[c];
        if (ty == 'b' || ty == 't' || ty == 'T') {
            size_t la, lb;
            const void *pa = agg_bcol_bytes(l->b, col, a, &la), *pb = agg_bcol_bytes(l->b, col, b, &lb);
            if (la != lb || (la && memcmp(pa, pb, la)))
                return 0;
        } else if (agg_bcol_i64(col, a, l->now_ns) != agg_bcol_i64(col, b, l->now_ns)) {
            return 0;
        }
    }
    return 1;
}

/* The rows into their table, merged (merge_rows); fresh rows are copied straight into the
 * table under a savepoint (*missed = 0): when a key was stored after all, the savepoint is
 * rolled back (*missed = 1) and they are merged from stage_<table>_new. */
static int load_part(pg_store_t *s, const agg_load_t *l, int fresh, int *missed) {
    cols_t *t = &s->copy;
    cols_begin(t, l->d->ncols);
    int rc = agg_load_rows(l, &pg_sink, t);
    if (rc || !t->rows)
        return rc;
    put_be(&t->b, 0xffff, 2); /* trailer */
    if (t->b.fail)
        return t->col ? CM_EINVAL : CM_ENOMEM;
    PGconn *c = conn(s);
    if (!c)
        return CM_EIO;
    if (fresh) {
        *missed = 0;
        if (!(rc = exec_ok(c, "SAVEPOINT fresh")) && !(rc = copy_rows(c, t, l->t->name)))
            return exec_ok(c, "RELEASE SAVEPOINT fresh");
        if (rc == 1 && !(rc = exec_ok(c, "ROLLBACK TO SAVEPOINT fresh")))
            *missed = 1;
    }
    if (!rc) /* fresh rows stored after all: their own staging table, the others' is filled */
        rc = merge_rows(c, t, l->t, fresh ? "_new" : "");
    if (rc)
        CM_WARN("postgres store: writing %zu rows of %s: %s", t->rows, l->t->name,
                PQerrorMessage(c));
    return rc;
}

/* Column i of rows [from, to) of l as one int8[] (array_send's format: dimensions, no NULLs,
 * element type, length and lower bound, then each element's length and value). */
static void col_i64_array(cols_t *t, int i, const agg_load_t *l, size_t from, size_t to) {
    const agg_bcol_t *col = &l->d->cols[i];
    uint32_t n = (uint32_t)(to - from);
    field(t, i, 20 + 12 * n);
    static const unsigned char h[12] = {0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 20}; /* int8, 1 dim */
    cm_buf_put(&t->b, h, sizeof h);
    put_be(&t->b, n, 4); /* its length, then its lower bound */
    put_be(&t->b, 1, 4);
    for (size_t k = from; k < to; k++) {
        unsigned char x[12] = {0, 0, 0, 8};
        uint64_t be = __builtin_bswap64((uint64_t)agg_bcol_i64(col, l->rows[k], l->now_ns));
        memcpy(x + 4, &be, 8);
        cm_buf_put(&t->b, x, sizeof x);
    }
}

/* The rows of a packed table (agg_schema_packed): a row per group (a run of rows equal in
 * their first nkey - 1 columns; the batch's rows come in key order) copied straight into
 * `packed`, the group's other columns as arrays. No merge: a group some earlier batch stored
 * gets a second part, which the view's readers sum. */
static int load_packed(pg_store_t *s, const agg_load_t *l, const char *packed) {
    cols_t *t = &s->copy;
    int g = l->t->nkey - 1;
    for (int c = g; c < l->d->ncols; c++)
        if (l->t->types[c] != 'i')
            return CM_EINVAL; /* arrays are int8[] only */
    cols_begin(t, l->d->ncols);
    for (size_t a = 0, b; a < l->n; a = b) {
        for (b = a + 1; b < l->n && same_group(l, l->rows[a], l->rows[b], g); b++)
            ;
        for (int c = 0; c < g; c++)
            agg_load_col(l, &pg_sink, t, c, a);
        for (int c = g; c < l->d->ncols; c++)
            col_i64_array(t, c, l, a, b);
        pg_row_end(t, l, a);
    }
    put_be(&t->b, 0xffff, 2); /* trailer */
    if (t->b.fail)
        return t->col ? CM_EINVAL : CM_ENOMEM;
    PGconn *c = conn(s);
    int rc = c ? copy_rows(c, t, packed) : CM_EIO;
    if (rc && c)
        CM_WARN("postgres store: writing %zu groups of %s: %s", t->rows, l->t->name,
                PQerrorMessage(c));
    return rc ? CM_EIO : 0;
}

/* The rows of a table with fresh rows (agg_btable_t.fresh_off: the labels of a set that holds
 * a process): the others merged, then the fresh ones copied (load_part). A miss (a fresh key
 * stored after all: another partition or instance wrote it) leaves the straight copy alone for
 * 2, 4, ... up to 64 of its batches, so that a store where misses are the rule pays for a
 * wasted copy rarely. A packed table's rows go by load_packed. */
static int pg_load(agg_store_t *base, const agg_load_t *l) {
    pg_store_t *s = (pg_store_t *)base;
    int i = l->index, missed = 0;
    const char *packed = agg_schema_packed(l->t->name);
    if (packed)
        return load_packed(s, l, packed);
    if (!l->d->fresh_off || i >= 32 || (s->fresh_skip[i] && s->fresh_skip[i]--))
        return load_part(s, l, 0, NULL);
    if (l->n > s->split_cap) {
        void **p = realloc(s->split, l->n * sizeof *p);
        if (!p)
            return CM_ENOMEM;
        s->split = p;
        s->split_cap = l->n;
    }
    size_t nf = 0, o = 0; /* both parts keep the rows' order */
#define FRESH(k) (((const uint8_t *)l->rows[k])[l->d->fresh_off])
    for (size_t k = 0; k < l->n; k++)
        nf += FRESH(k);
    for (size_t k = 0; k < l->n; k++)
        s->split[FRESH(k) ? o++ : nf + k - o] = l->rows[k];
#undef FRESH
    agg_load_t old = *l, fresh = *l;
    old.rows = s->split + nf;
    old.n = l->n - nf;
    fresh.rows = s->split;
    fresh.n = nf;
    int rc = load_part(s, &old, 0, NULL);
    if (!rc)
        rc = load_part(s, &fresh, 1, &missed);
    if (!rc && missed) {
        s->fresh_misses[i] += s->fresh_misses[i] < 6;
        s->fresh_skip[i] = 1 << s->fresh_misses[i];
        CM_INFO("postgres store: a fresh row of %s was stored already: merging them for the "
                 "next %d batches", l->t->name, s->fresh_skip[i]);
    } else if (!rc && nf) {
        s->fresh_misses[i] = 0;
    }
    return rc;
}

/* ---- vtab ---- */

/* The fence: locks the partition's offsets row (creating it at -1 when absent, so the first
 * batches of two instances also serialize) and compares it with the batch's base. */
static int pg_fence(agg_store_t *base, const char *topic, int32_t partition,
                    int64_t base_offset) {
    pg_store_t *s = (pg_store_t *)base;
    PGconn *c = conn(s);
    if (!c)
        return CM_EIO;
    char part[16];
    snprintf(part, sizeof part, "%d", partition);
    const char *p[2] = {topic, part};
    PGresult *r = PQexecParams(c, "INSERT INTO offsets VALUES($1, $2, -1, 0) ON CONFLICT DO "
                               "NOTHING", 2, NULL, p, NULL, NULL, 0);
    int rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : CM_EIO;
    PQclear(r);
    if (rc) { /* the server's reason (read-only, disk full, ...): the caller only says EIO */
        CM_WARN("postgres store: partition %d: the batch's fence: %s", partition,
                PQerrorMessage(c));
        return rc;
    }
    r = PQexecParams(c, "SELECT next_offset FROM offsets WHERE topic=$1 AND part=$2 FOR UPDATE",
                     2, NULL, p, NULL, NULL, 0);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        CM_WARN("postgres store: partition %d: the batch's fence: %s", partition,
                PQerrorMessage(c));
        PQclear(r);
        return CM_EIO;
    }
    int64_t stored = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    if (stored != base_offset) {
        CM_WARN("postgres store: partition %d offset is %lld, batch started at %lld: another "
                "instance wrote it; dropping the batch and seeking",
                partition, (long long)stored, (long long)base_offset);
        return -ESTALE;
    }
    return 0;
}

static void pg_close(agg_store_t *base) {
    pg_store_t *s = (pg_store_t *)base;
    agg_store_forget(&s->base);
    agg_qx_close(s->qx);
    cols_free(&s->copy);
    free(s->split);
    if (s->conn)
        PQfinish(s->conn);
    free(s->url);
    free(s);
}

/* The bytes of the store's own tables in the database (heap, TOAST, indexes, free space
 * maps): every partition's handle answers the same, so the caller counts one. Not
 * pg_database_size: it holds the catalogs and anything else the database keeps. */
static int64_t pg_size_bytes(agg_store_t *base) {
    pg_store_t *s = (pg_store_t *)base;
    PGconn *c = conn(s);
    if (!c)
        return -1;
    PGresult *r = PQexec(c, "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM "
                            "pg_class c WHERE c.relnamespace = current_schema()::regnamespace "
                            "AND c.relkind = 'r'");
    int64_t n = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r)
                    ? strtoll(PQgetvalue(r, 0, 0), NULL, 10)
                    : -1;
    PQclear(r);
    return n;
}

/* The connection as the executor, with its staging tables (outside any transaction). */
static agg_qx_t *pg_qx(agg_store_t *base) {
    pg_store_t *s = (pg_store_t *)base;
    PGconn *c = conn(s);
    return c && !stage_tables(s, c) ? s->qx : NULL;
}

static const agg_store_vtab_t pg_vtab = {AGG_STORE_VTAB(pg, "postgres")};

void agg_store_pg_url_safe(const char *url, char *out, size_t size) {
    const char *at = strchr(url, '@'), *scheme = strstr(url, "://");
    const char *colon = scheme ? strchr(scheme + 3, ':') : NULL;
    if (at && colon && colon < at)
        snprintf(out, size, "%.*s:***%s", (int)(colon - url), url, at);
    else
        snprintf(out, size, "%s", url);
}

int agg_store_pg_open(const char *url, agg_store_t **out, char *err, size_t err_size) {
    char safe[512];
    agg_store_pg_url_safe(url, safe, sizeof safe);
    PGconn *c = agg_pg_connect(url, err, err_size);
    if (!c)
        return CM_EIO;
    pg_store_t *s = calloc(1, sizeof *s);
    if (!s || !(s->url = strdup(url))) {
        free(s);
        PQfinish(c);
        return CM_ENOMEM;
    }
    s->base.vt = &pg_vtab;
    s->conn = c;
    char e[512];
    int rc = agg_pg_migrate(s->conn, e, sizeof e);
    if (!rc && (rc = agg_qx_pg_wrap(s->conn, &s->qx)))
        snprintf(e, sizeof e, "out of memory");
    if (rc) {
        snprintf(err, err_size, "PostgreSQL store %s: %s", safe, e);
        pg_close(&s->base);
        return rc;
    }
    *out = &s->base;
    return 0;
}
