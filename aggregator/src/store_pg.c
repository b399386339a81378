/* PostgreSQL store backend, write side (see store_pg.h): connection and reconnection, the
 * fenced batch transaction, each table's rows copied (COPY, binary) into a temporary staging
 * table and merged with one INSERT ... SELECT ... ON CONFLICT.
 * Threading: a handle is used by one thread at a time. */
#define _GNU_SOURCE
#include "store_pg.h"

#include "cm/error.h"
#include "cm/log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    agg_store_t base;
    PGconn *conn;
    char *url;
    int64_t retry_ms; /* CLOCK_MONOTONIC ms before which no reconnection is tried */
    void **order; /* scratch: batch entries in key order */
    size_t order_cap;
    agg_qx_t *qx; /* conn as the query executor of store/tiers.c */
    int stage_pid; /* the server backend that has our staging tables (0: none yet) */
} pg_store_t;

int agg_store_is_pg(const char *spec) {
    return spec && (!strncmp(spec, "postgres://", 11) || !strncmp(spec, "postgresql://", 13));
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- connection ---- */

/* A connection to url, whose attempt gives up after 5 s unless the URL sets connect_timeout
 * (a server that drops packets must not hold the consume loop, or a shutdown, for the
 * kernel's TCP timeouts of minutes). */
static PGconn *connect_url(const char *url) {
    const char *const keys[] = {"connect_timeout", "dbname", NULL};
    const char *const vals[] = {"5", url, NULL};
    return PQconnectdbParams(keys, vals, 1); /* the URL's own parameters come later: they win */
}

/* The connection, re-established when it was lost (a database restart, a network cut): NULL
 * when the server cannot be reached now (the caller fails the call; the next one tries
 * again). */
static PGconn *conn(pg_store_t *s) {
    if (s->conn && PQstatus(s->conn) == CONNECTION_OK)
        return s->conn;
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
    s->conn = connect_url(s->url);
    if (PQstatus(s->conn) != CONNECTION_OK) {
        CM_WARN("postgres store: cannot connect: %s", PQerrorMessage(s->conn));
        return NULL;
    }
    return s->conn;
}

/* Runs sql without parameters: 0, or CM_EIO after logging the server's message. */
static int exec0(pg_store_t *s, const char *sql) {
    PGconn *c = conn(s);
    if (!c)
        return CM_EIO;
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    int rc = st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? 0 : CM_EIO;
    if (rc)
        CM_WARN("postgres store: '%.60s': %s", sql, PQerrorMessage(c));
    PQclear(r);
    return rc;
}

/* ---- rows in COPY's binary format, into a temporary staging table per target ----
 * A batch's rows of one table go to the server in one COPY ... FROM STDIN (FORMAT binary)
 * into a temporary table (this backend's own buffers, no WAL, emptied at commit), then one
 * set-based INSERT ... SELECT ... ON CONFLICT merges them into the table: no text to print or
 * parse, no arrays to build and unnest. */

typedef struct {
    char *p;
    size_t n, cap;
    int fail;
} buf_t;

static void put(buf_t *b, const void *s, size_t len) {
    if (b->fail)
        return;
    if (b->n + len > b->cap) {
        size_t nc = b->cap ? b->cap : 65536;
        while (nc < b->n + len)
            nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) {
            b->fail = 1;
            return;
        }
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->n, s, len);
    b->n += len;
}

static void put_be(buf_t *b, uint64_t v, int bytes) {
    unsigned char x[8];
    for (int i = 0; i < bytes; i++)
        x[i] = (unsigned char)(v >> (8 * (bytes - 1 - i)));
    put(b, x, (size_t)bytes);
}

/* One table's rows: columns are written in order, each row's first one opening the row. */
typedef struct {
    buf_t b;
    int ncols, col;
    size_t rows;
} cols_t;

static void cols_begin(cols_t *t, int ncols) {
    static const char sig[11] = "PGCOPY\n\377\r\n"; /* + NUL: 11 bytes */
    t->b.n = 0;
    t->b.fail = 0;
    t->ncols = ncols;
    t->col = 0;
    t->rows = 0;
    put(&t->b, sig, 11);
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

static void col_i64(cols_t *t, int i, uint64_t v) {
    field(t, i, 8);
    put_be(&t->b, v, 8);
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
    put(&t->b, p, len);
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
        put(&t->b, k ? (const char *)p + o : "\xef\xbf\xbd", k ? k : 3);
    }
    return 1;
}

static void row_end(cols_t *t) {
    if (t->col != t->ncols)
        t->b.fail = 1;
    t->col = 0;
    t->rows++;
}

static void cols_free(cols_t *t) { free(t->b.p); }

/* The staging tables, created once per server backend (a reconnection gets a new one). */
static const char *const staged[] = {
    "strings",  "mappings",  "functions", "locations", "stacks",    "labelsets",
    "labels",   "labelset_base", "profile", "profile_coarse", "profile_leaf", "totals",
    "intervals", "drops",    "versions",  "fn_stats",  "spans",     "span_stacks",
    "rejects",  "seen_chunks",
};

static int stage_tables(pg_store_t *s, PGconn *c) {
    if (s->stage_pid == PQbackendPID(c))
        return 0;
    /* a sequential scan of a staging table returns the rows in the order they were copied
     * (key order, see ordered()) */
    char sql[8192];
    size_t o = (size_t)snprintf(sql, sizeof sql, "SET synchronize_seqscans = off; "
                                "SET temp_buffers = '64MB'; ");
    for (size_t i = 0; i < sizeof staged / sizeof staged[0] && o < sizeof sql; i++)
        o += (size_t)snprintf(sql + o, sizeof sql - o,
                              "CREATE TEMP TABLE IF NOT EXISTS stage_%s (LIKE %s) ON COMMIT "
                              "DELETE ROWS; ", staged[i], staged[i]);
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

/* Copies the rows into stage_<table>, then runs merge (skipped when there are no rows). */
static int cols_exec(pg_store_t *s, cols_t *t, const char *table, const char *merge) {
    if (!t->rows)
        return 0;
    put_be(&t->b, 0xffff, 2); /* trailer */
    if (t->b.fail)
        return t->col ? CM_EINVAL : CM_ENOMEM;
    PGconn *c = conn(s);
    if (!c)
        return CM_EIO;
    char sql[128];
    snprintf(sql, sizeof sql, "COPY stage_%s FROM STDIN (FORMAT binary)", table);
    PGresult *r = PQexec(c, sql);
    int in_copy = PQresultStatus(r) == PGRES_COPY_IN;
    PQclear(r);
    int rc = in_copy ? 0 : CM_EIO;
    if (in_copy) {
        for (size_t o = 0, piece; o < t->b.n && !rc; o += piece) {
            piece = t->b.n - o < (1u << 20) ? t->b.n - o : (1u << 20);
            if (PQputCopyData(c, t->b.p + o, (int)piece) != 1)
                rc = CM_EIO;
        }
        if (PQputCopyEnd(c, rc ? "write failed" : NULL) != 1)
            rc = CM_EIO;
        while ((r = PQgetResult(c))) { /* the COPY's result, then NULL */
            if (PQresultStatus(r) != PGRES_COMMAND_OK)
                rc = CM_EIO;
            PQclear(r);
        }
    }
    if (!rc) {
        r = PQexec(c, merge);
        rc = PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : CM_EIO;
        PQclear(r);
    }
    if (rc)
        CM_WARN("postgres store: writing %zu rows of %s: %s", t->rows, table,
                PQerrorMessage(c));
    return rc;
}

/* Entries of m in key order: concurrent writers (partitions sharing a service's rows, or
 * dictionary rows) take row locks in the same order and cannot deadlock. */
static void **ordered(pg_store_t *s, const agg_hmap_t *m, size_t nblob, size_t nint) {
    return agg_hmap_ordered(m, nblob, nint, &s->order, &s->order_cap);
}

/* ---- SQL of the batch: each merges its staging table ---- */

#define SUMS4 "weight=t.weight+excluded.weight, count=t.count+excluded.count, " \
              "rows=t.rows+excluded.rows, chunks=t.chunks+excluded.chunks"

static const char *const sql_prof_fmt =
    "INSERT INTO %s AS t SELECT * FROM stage_%s ON CONFLICT (service, version, type, width, "
    "bucket, labels, %s) DO UPDATE SET " SUMS4;

static const char *const sql_str =
    "INSERT INTO strings SELECT * FROM stage_strings ON CONFLICT DO NOTHING";
static const char *const sql_map =
    "INSERT INTO mappings SELECT * FROM stage_mappings ON CONFLICT DO NOTHING";
static const char *const sql_fn =
    "INSERT INTO functions SELECT * FROM stage_functions ON CONFLICT DO NOTHING";
static const char *const sql_loc =
    "INSERT INTO locations SELECT * FROM stage_locations ON CONFLICT DO NOTHING";
static const char *const sql_stack =
    "INSERT INTO stacks SELECT * FROM stage_stacks ON CONFLICT DO NOTHING";
static const char *const sql_labelset =
    "INSERT INTO labelsets SELECT * FROM stage_labelsets ON CONFLICT DO NOTHING";
static const char *const sql_label =
    "INSERT INTO labels SELECT * FROM stage_labels ON CONFLICT DO NOTHING";
static const char *const sql_labelbase =
    "INSERT INTO labelset_base SELECT * FROM stage_labelset_base ON CONFLICT DO NOTHING";
static const char *const sql_tot =
    "INSERT INTO totals AS t SELECT * FROM stage_totals "
    "ON CONFLICT (service, version, type, width, bucket) DO UPDATE SET " SUMS4;
static const char *const sql_ival =
    "INSERT INTO intervals AS t SELECT * FROM stage_intervals "
    "ON CONFLICT (service, version, width, bucket) DO UPDATE SET "
    "chunks=t.chunks+excluded.chunks, duration_ns=t.duration_ns+excluded.duration_ns, "
    "agent_cpu_ns=t.agent_cpu_ns+excluded.agent_cpu_ns, "
    "process_cpu_ns=t.process_cpu_ns+excluded.process_cpu_ns, "
    "dropped=t.dropped+excluded.dropped, work_units=t.work_units+excluded.work_units";
static const char *const sql_drop =
    "INSERT INTO drops AS t SELECT * FROM stage_drops ON CONFLICT (service, version, "
    "width, bucket, reason, type) DO UPDATE SET count=t.count+excluded.count";
static const char *const sql_ver =
    "INSERT INTO versions AS t SELECT * FROM stage_versions ON CONFLICT (service, version) "
    "DO UPDATE SET first_ns=least(t.first_ns, excluded.first_ns), last_ns=greatest(t.last_ns, "
    "excluded.last_ns), chunks=t.chunks+excluded.chunks, rows=t.rows+excluded.rows";
static const char *const sql_fnstat =
    "INSERT INTO fn_stats AS t SELECT * FROM stage_fn_stats ON CONFLICT (service, version, "
    "type, width, bucket, function) DO UPDATE SET chunks=t.chunks+excluded.chunks, "
    "incl=t.incl+excluded.incl, incl2=t.incl2+excluded.incl2, self=t.self+excluded.self, "
    "self2=t.self2+excluded.self2";
static const char *const sql_span =
    "INSERT INTO spans AS t SELECT * FROM stage_spans ON CONFLICT (trace, span) DO UPDATE SET "
    "first_ns=least(t.first_ns, excluded.first_ns), last_ns=greatest(t.last_ns, "
    "excluded.last_ns), cpu=t.cpu+excluded.cpu, wall=t.wall+excluded.wall, "
    "alloc=t.alloc+excluded.alloc, inuse=t.inuse+excluded.inuse, lock=t.lock+excluded.lock, "
    "io=t.io+excluded.io, rows=t.rows+excluded.rows";
static const char *const sql_spanstk =
    "INSERT INTO span_stacks AS t SELECT * FROM stage_span_stacks ON CONFLICT (trace, span, "
    "type, stack) DO UPDATE SET weight=t.weight+excluded.weight, count=t.count+excluded.count, "
    "rows=t.rows+excluded.rows";
static const char *const sql_rej =
    "INSERT INTO rejects AS t SELECT * FROM stage_rejects ON CONFLICT "
    "(reason) DO UPDATE SET count=t.count+excluded.count";
static const char *const sql_seen =
    "INSERT INTO seen_chunks SELECT * FROM stage_seen_chunks ON CONFLICT DO NOTHING";

static int write_prof(pg_store_t *s, cols_t *t, const agg_hmap_t *m, const char *table,
                      const char *last_key) {
    void **ord = ordered(s, m, 0, 7);
    if (!ord)
        return CM_ENOMEM;
    cols_begin(t, 11);
    for (size_t i = 0; i < m->n; i++) {
        const agg_prof_ent_t *e = ord[i];
        const uint64_t v[11] = {e->k.service, e->k.version, e->k.type, e->k.width, e->k.bucket,
                                e->k.labels, e->k.stack, (uint64_t)e->weight,
                                (uint64_t)e->count, (uint64_t)e->rows, (uint64_t)e->chunks};
        for (int c = 0; c < 11; c++)
            col_i64(t, c, v[c]);
        row_end(t);
    }
    char sql[1024];
    snprintf(sql, sizeof sql, sql_prof_fmt, table, table, last_key);
    return cols_exec(s, t, table, sql);
}

/* ---- vtab ---- */

static int pg_offset_get(agg_store_t *base, const char *topic, int32_t partition,
                         int64_t *next) {
    pg_store_t *s = (pg_store_t *)base;
    PGconn *c = conn(s);
    if (!c)
        return CM_EIO;
    char part[16];
    snprintf(part, sizeof part, "%d", partition);
    const char *p[2] = {topic, part};
    PGresult *r = PQexecParams(c, "SELECT next_offset FROM offsets WHERE topic=$1 AND part=$2",
                               2, NULL, p, NULL, NULL, 0);
    int rc = PQresultStatus(r) == PGRES_TUPLES_OK ? 0 : CM_EIO;
    if (rc)
        CM_WARN("postgres store: reading the offset of partition %d: %s", partition,
                PQerrorMessage(c));
    else
        *next = PQntuples(r) ? strtoll(PQgetvalue(r, 0, 0), NULL, 10) : -1;
    PQclear(r);
    return rc;
}

static int pg_chunk_seen(agg_store_t *base, const uint8_t *id, int *seen) {
    pg_store_t *s = (pg_store_t *)base;
    PGconn *c = conn(s);
    if (!c)
        return CM_EIO;
    const char *p[1] = {(const char *)id};
    int len[1] = {CM_CHUNK_ID_LEN}, fmt[1] = {1};
    PGresult *r = PQexecParams(c, "SELECT 1 FROM seen_chunks WHERE chunk_id=$1", 1, NULL, p,
                               len, fmt, 0);
    int rc = PQresultStatus(r) == PGRES_TUPLES_OK ? 0 : CM_EIO;
    if (!rc)
        *seen = PQntuples(r) > 0;
    PQclear(r);
    return rc;
}

/* The fence: locks the partition's offsets row (creating it at -1 when absent, so the first
 * batches of two instances also serialize) and compares it with the batch's base. */
static int fence(pg_store_t *s, const char *topic, int32_t partition, int64_t base_offset) {
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

static int pg_batch_write(agg_store_t *base, const char *topic, int32_t partition,
                          agg_batch_t *b) {
    pg_store_t *s = (pg_store_t *)base;
    cols_t t = {0};
    void **ord;
    int rc;
    agg_batch_sort_new(b);
    PGconn *c0 = conn(s);
    if (!c0)
        return CM_EIO;
    if ((rc = stage_tables(s, c0)) || (rc = exec0(s, "BEGIN")))
        return rc;
    if ((rc = fence(s, topic, partition, b->base_offset)))
        goto out;
#define EXEC(table, sql)                                                                           \
    do {                                                                                           \
        if ((rc = cols_exec(s, &t, (table), (sql))))                                              \
            goto out;                                                                              \
    } while (0)
    cols_begin(&t, 2);
    for (size_t i = 0; i < b->strs.n; i++, row_end(&t)) {
        col_i64(&t, 0, b->strs.v[i].id);
        if (col_text(&t, 1, b->str_arena + b->strs.v[i].off, b->strs.v[i].len))
            CM_WARN("postgres store: string %016llx is not UTF-8: stored with U+FFFD for its "
                    "bad bytes", (unsigned long long)b->strs.v[i].id);
    }
    EXEC("strings", sql_str);
    cols_begin(&t, 3);
    for (size_t i = 0; i < b->maps.n; i++, row_end(&t)) {
        col_i64(&t, 0, b->maps.v[i].id);
        col_i64(&t, 1, b->maps.v[i].filename);
        col_bytes(&t, 2, b->maps.v[i].build_id, b->maps.v[i].build_id_len);
    }
    EXEC("mappings", sql_map);
    cols_begin(&t, 4);
    for (size_t i = 0; i < b->fns.n; i++, row_end(&t)) {
        const agg_new_fn_t *x = &b->fns.v[i];
        col_i64(&t, 0, x->id);
        col_i64(&t, 1, x->name);
        col_i64(&t, 2, x->system_name);
        col_i64(&t, 3, x->filename);
    }
    EXEC("functions", sql_fn);
    cols_begin(&t, 5);
    for (size_t i = 0; i < b->locs.n; i++, row_end(&t)) {
        const agg_new_loc_t *x = &b->locs.v[i];
        col_i64(&t, 0, x->id);
        col_i64(&t, 1, x->function);
        col_i64(&t, 2, x->mapping);
        col_i64(&t, 3, x->address);
        col_i64(&t, 4, x->line);
    }
    EXEC("locations", sql_loc);
    cols_begin(&t, 4);
    for (size_t i = 0; i < b->stacks.n; i++, row_end(&t)) {
        const agg_new_stack_t *x = &b->stacks.v[i];
        col_i64(&t, 0, x->id);
        col_i64(&t, 1, x->parent);
        col_i64(&t, 2, x->location);
        col_i64(&t, 3, x->depth);
    }
    EXEC("stacks", sql_stack);
    cols_begin(&t, 1);
    for (size_t i = 0; i < b->labelsets.n; i++, row_end(&t))
        col_i64(&t, 0, b->labelsets.v[i]);
    EXEC("labelsets", sql_labelset);
    cols_begin(&t, 3);
    for (size_t i = 0; i < b->labels.n; i++, row_end(&t)) {
        col_i64(&t, 0, b->labels.v[i].key);
        col_i64(&t, 1, b->labels.v[i].value);
        col_i64(&t, 2, b->labels.v[i].set);
    }
    EXEC("labels", sql_label);
    cols_begin(&t, 2);
    for (size_t i = 0; i < b->labelbase.n; i++, row_end(&t)) {
        col_i64(&t, 0, b->labelbase.v[i].set);
        col_i64(&t, 1, b->labelbase.v[i].value);
    }
    EXEC("labelset_base", sql_labelbase);
    int64_t done[AGG_MAX_TIERS];
    if (b->n_tiers && ((rc = agg_tiers_marks(s->qx, b->tiers, b->n_tiers, b->replicate_width,
                                             done)) ||
                       (rc = agg_batch_derive(b, done))))
        goto out;
    if ((rc = write_prof(s, &t, &b->prof, "profile", "stack")) ||
        (rc = write_prof(s, &t, &b->profc, "profile_coarse", "stack")) ||
        (rc = write_prof(s, &t, &b->leaf, "profile_leaf", "leaf")))
        goto out;
    if (!(ord = ordered(s, &b->tot, 0, 5))) {
        rc = CM_ENOMEM;
        goto out;
    }
    cols_begin(&t, 9);
    for (size_t i = 0; i < b->tot.n; i++, row_end(&t)) {
        const agg_tot_ent_t *e = ord[i];
        const uint64_t v[9] = {e->k.service, e->k.version, e->k.type, e->k.width, e->k.bucket,
                               (uint64_t)e->weight, (uint64_t)e->count, (uint64_t)e->rows,
                               (uint64_t)e->chunks};
        for (int c = 0; c < 9; c++)
            col_i64(&t, c, v[c]);
    }
    EXEC("totals", sql_tot);
    if (!(ord = ordered(s, &b->ival, 0, 4))) {
        rc = CM_ENOMEM;
        goto out;
    }
    cols_begin(&t, 10);
    for (size_t i = 0; i < b->ival.n; i++, row_end(&t)) {
        const agg_ival_ent_t *e = ord[i];
        const uint64_t v[10] = {e->k.service, e->k.version, e->k.width, e->k.bucket,
                                (uint64_t)e->chunks, (uint64_t)e->duration_ns,
                                (uint64_t)e->agent_cpu_ns, (uint64_t)e->process_cpu_ns,
                                (uint64_t)e->dropped, (uint64_t)e->work_units};
        for (int c = 0; c < 10; c++)
            col_i64(&t, c, v[c]);
    }
    EXEC("intervals", sql_ival);
    if (!(ord = ordered(s, &b->drop, 0, 6))) {
        rc = CM_ENOMEM;
        goto out;
    }
    cols_begin(&t, 7);
    for (size_t i = 0; i < b->drop.n; i++, row_end(&t)) {
        const agg_drop_ent_t *e = ord[i];
        const uint64_t v[7] = {e->k.service, e->k.version, e->k.width, e->k.bucket,
                               e->k.reason, e->k.type, (uint64_t)e->count};
        for (int c = 0; c < 7; c++)
            col_i64(&t, c, v[c]);
    }
    EXEC("drops", sql_drop);
    if (!(ord = ordered(s, &b->ver, 0, 2))) {
        rc = CM_ENOMEM;
        goto out;
    }
    cols_begin(&t, 6);
    for (size_t i = 0; i < b->ver.n; i++, row_end(&t)) {
        const agg_ver_ent_t *e = ord[i];
        const uint64_t v[6] = {e->k.service, e->k.version, (uint64_t)e->first_ns,
                               (uint64_t)e->last_ns, (uint64_t)e->chunks, (uint64_t)e->rows};
        for (int c = 0; c < 6; c++)
            col_i64(&t, c, v[c]);
    }
    EXEC("versions", sql_ver);
    if (!(ord = ordered(s, &b->fn, 0, 6))) {
        rc = CM_ENOMEM;
        goto out;
    }
    cols_begin(&t, 11);
    for (size_t i = 0; i < b->fn.n; i++, row_end(&t)) {
        const agg_fn_ent_t *e = ord[i];
        const uint64_t v[7] = {e->k.service, e->k.version, e->k.type, e->k.width, e->k.bucket,
                               e->k.function, (uint64_t)e->chunks};
        for (int c = 0; c < 7; c++)
            col_i64(&t, c, v[c]);
        col_f64(&t, 7, e->incl);
        col_f64(&t, 8, e->incl2);
        col_f64(&t, 9, e->self);
        col_f64(&t, 10, e->self2);
    }
    EXEC("fn_stats", sql_fnstat);
    if (!(ord = ordered(s, &b->span, 24, 0))) {
        rc = CM_ENOMEM;
        goto out;
    }
    cols_begin(&t, 13);
    for (size_t i = 0; i < b->span.n; i++, row_end(&t)) {
        const agg_span_ent_t *e = ord[i];
        col_bytes(&t, 0, e->k.trace, 16);
        col_bytes(&t, 1, e->k.span, 8);
        col_i64(&t, 2, e->service);
        col_i64(&t, 3, e->version);
        col_i64(&t, 4, (uint64_t)e->first_ns);
        col_i64(&t, 5, (uint64_t)e->last_ns);
        for (int ty = 1; ty <= CM_EV_MAX; ty++)
            col_i64(&t, 5 + ty, (uint64_t)e->weight[ty]);
        col_i64(&t, 12, (uint64_t)e->rows);
    }
    EXEC("spans", sql_span);
    if (!(ord = ordered(s, &b->spanstk, 24, 2))) {
        rc = CM_ENOMEM;
        goto out;
    }
    cols_begin(&t, 7);
    for (size_t i = 0; i < b->spanstk.n; i++, row_end(&t)) {
        const agg_spanstk_ent_t *e = ord[i];
        col_bytes(&t, 0, e->k.trace, 16);
        col_bytes(&t, 1, e->k.span, 8);
        col_i64(&t, 2, e->k.type);
        col_i64(&t, 3, e->k.stack);
        col_i64(&t, 4, (uint64_t)e->weight);
        col_i64(&t, 5, (uint64_t)e->count);
        col_i64(&t, 6, (uint64_t)e->rows);
    }
    EXEC("span_stacks", sql_spanstk);
    cols_begin(&t, 2);
    for (size_t i = 0; i < b->rej.n; i++, row_end(&t)) {
        const agg_rej_ent_t *e = agg_hmap_entry(&b->rej, i);
        col_bytes(&t, 0, e->k.reason, strlen(e->k.reason));
        col_i64(&t, 1, (uint64_t)e->count);
    }
    EXEC("rejects", sql_rej);
    int64_t now = now_ns();
    cols_begin(&t, 2);
    for (size_t i = 0; i < b->seen.n; i++, row_end(&t)) {
        const agg_seen_ent_t *e = agg_hmap_entry(&b->seen, i);
        col_bytes(&t, 0, e->k.id, CM_CHUNK_ID_LEN);
        col_i64(&t, 1, (uint64_t)(e->ts_ns ? e->ts_ns : now));
    }
    EXEC("seen_chunks", sql_seen);
#undef EXEC
    {
        PGconn *c = conn(s);
        char part[16], next[32], upd[32];
        snprintf(part, sizeof part, "%d", partition);
        snprintf(next, sizeof next, "%lld", (long long)b->next_offset);
        snprintf(upd, sizeof upd, "%lld", (long long)now);
        const char *p[4] = {topic, part, next, upd};
        PGresult *r = c ? PQexecParams(c, "UPDATE offsets SET next_offset=$3, updated_ns=$4 "
                                          "WHERE topic=$1 AND part=$2", 4, NULL, p, NULL, NULL, 0)
                        : NULL;
        rc = r && PQresultStatus(r) == PGRES_COMMAND_OK ? 0 : CM_EIO;
        PQclear(r);
        if (rc)
            goto out;
    }
    rc = exec0(s, "COMMIT");
    /* a COMMIT whose answer was lost may or may not have happened: the caller re-reads the
     * stored offset, and the fence decides */
out:
    if (rc && s->conn && PQstatus(s->conn) == CONNECTION_OK)
        PQclear(PQexec(s->conn, "ROLLBACK"));
    if (rc)
        s->stage_pid = 0; /* the next batch makes sure of the staging tables again */
    cols_free(&t);
    return rc;
}

static void pg_close(agg_store_t *base) {
    pg_store_t *s = (pg_store_t *)base;
    agg_qx_close(s->qx);
    if (s->conn)
        PQfinish(s->conn);
    free(s->url);
    free(s->order);
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

static agg_qx_t *pg_qx(agg_store_t *base) {
    pg_store_t *s = (pg_store_t *)base;
    return conn(s) ? s->qx : NULL;
}

static const agg_store_vtab_t pg_vtab = {
    .name = "postgres",
    .close = pg_close,
    .offset_get = pg_offset_get,
    .chunk_seen = pg_chunk_seen,
    .batch_write = pg_batch_write,
    .downsample = agg_tiers_downsample,
    .expire = agg_tiers_expire,
    .size_bytes = pg_size_bytes,
    .derive = agg_tiers_derive,
    .compact = agg_tiers_compact,
    .qx = pg_qx,
};

/* The URL without its password, for messages. */
static void url_safe(const char *url, char *out, size_t size) {
    const char *at = strchr(url, '@'), *scheme = strstr(url, "://");
    const char *colon = scheme ? strchr(scheme + 3, ':') : NULL;
    if (at && colon && colon < at)
        snprintf(out, size, "%.*s:***%s", (int)(colon - url), url, at);
    else
        snprintf(out, size, "%s", url);
}

int agg_store_pg_open(const char *url, agg_store_t **out, char *err, size_t err_size) {
    char safe[512];
    url_safe(url, safe, sizeof safe);
    pg_store_t *s = calloc(1, sizeof *s);
    if (!s || !(s->url = strdup(url))) {
        free(s);
        return CM_ENOMEM;
    }
    s->base.vt = &pg_vtab;
    s->conn = connect_url(url);
    if (PQstatus(s->conn) != CONNECTION_OK) {
        snprintf(err, err_size, "cannot connect to the PostgreSQL store %s: %s", safe,
                 PQerrorMessage(s->conn));
        char *nl = strchr(err, '\n');
        if (nl)
            *nl = 0;
        pg_close(&s->base);
        return CM_EIO;
    }
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
