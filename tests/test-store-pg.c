/* The PostgreSQL store's write side (aggregator/src/store/store_pg.c) against a real PostgreSQL 15
 * cluster (deploy/postgres, port 15433): the same simulated fleet fed into a SQLite store and
 * a PostgreSQL store gives the same rows in every table; the offset fence; a database killed
 * and restarted mid-ingest (the failed batch is consumed again from the stored offset, nothing
 * lost or counted twice); versioned migrations applied once, a newer database refused. The
 * cluster is started once in main; each test runs in its own child with its own database. */
#define _GNU_SOURCE
#include "aggtest.h"
#include "intern.h"
#include "qexec.h"
#include "rollup.h"
#include "store.h"
#include "store_pg.h"
#include "support/runner.h"

#include "cm/chunk.h"
#include "cm/error.h"

#include <errno.h>
#include <libpq-fe.h>
#include <stdarg.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <time.h>

static int pg_port = 15433; /* FP_PG_TEST_PORT overrides (two checkouts at once) */

static char pgdir[64], base_url[256], src[1024];

/* A fresh database named name on the cluster; its URL in url. */
static void new_db(const char *name, char *url, size_t size) {
    CHECK(at_sh("psql -X -q '%s' -c 'DROP DATABASE IF EXISTS %s' -c 'CREATE DATABASE %s' "
             ">/dev/null", base_url, name, name) == 0);
    snprintf(url, size, "postgres://fleetprof@127.0.0.1:%d/%s", pg_port, name);
}

/* ---- feeding a store as the consume loop does ---- */

typedef struct {
    agg_store_t *st;
    agg_intern_t in;
    agg_rollup_t r;
    agg_batch_t b;
    int64_t offset; /* stored next offset (-1: none) */
} feeder_t;

static void feeder_init(feeder_t *f, agg_store_t *st) {
    memset(f, 0, sizeof *f);
    f->st = st;
    agg_rollup_cfg_t rc = {10, 3600, 1, 1, 60};
    agg_rollup_init(&f->r, &rc);
    agg_batch_init(&f->b);
    f->offset = -1;
}

static void feeder_free(feeder_t *f) {
    agg_store_close(f->st);
    agg_intern_free(&f->in);
    agg_rollup_free(&f->r);
    agg_batch_free(&f->b);
}

/* The chunks of a simulator as decoded chunks, in order. */
typedef struct {
    cm_chunk_t **c;
    size_t n;
} chunks_t;

/* (two days ago: below every tier's compaction mark in both stores, whenever each was created,
 * so both route the rows to the tiers alike) */
static chunks_t sim_chunks_at(uint64_t seed, uint64_t start_ns) {
    fsim_params_t sp = {.seed = seed, .services = 3, .versions = 2, .processes = 3,
                        .intervals = 4, .samples = 300, .stacks = 120,
                        .start_unix_ns = start_ns};
    fsim_t *sim = fsim_new(&sp);
    chunks_t out = {calloc(1000, sizeof(cm_chunk_t *)), 0};
    const uint8_t *fr;
    size_t len;
    const char *key;
    while (fsim_next(sim, &fr, &len, &key) && out.n < 1000) {
        char err[256];
        CHECKF(cm_chunk_decode(fr, len, &out.c[out.n], err, sizeof err) == 0, "%s", err);
        out.n++;
    }
    fsim_free(sim);
    return out;
}

static chunks_t sim_chunks(uint64_t seed) {
    return sim_chunks_at(seed, (uint64_t)(time(NULL) - 2 * 86400) * 1000000000ull);
}

static void chunks_free(chunks_t *c) {
    for (size_t i = 0; i < c->n; i++)
        cm_chunk_free(c->c[i]);
    free(c->c);
}

/* Batch of chunks [from, to) at offsets from..to; returns the write's code. The batch is
 * cleared either way; a failure forgets the interned ids (as consume.c does). */
static int feed(feeder_t *f, const chunks_t *c, size_t from, size_t to) {
    f->b.base_offset = f->offset;
    for (size_t i = from; i < to; i++) {
        agg_chunk_ids_t ids;
        CHECK(agg_intern_chunk(&f->in, &f->b, c->c[i], &ids) == 0);
        CHECK(agg_rollup_chunk(&f->r, &f->b, c->c[i], &ids) == 0);
        /* the batch's seen chunk ids, as consume.c records them */
        agg_seen_key_t k;
        memcpy(k.id, c->c[i]->header.chunk_id, CM_CHUNK_ID_LEN);
        int fresh;
        agg_seen_ent_t *e = agg_hmap_upsert(&f->b.seen, &k, &fresh);
        CHECK(e);
        e->ts_ns = 1;
    }
    f->b.next_offset = (int64_t)to;
    int rc = agg_store_batch_write(f->st, "fleetprof.chunks", 0, &f->b);
    if (!rc)
        f->offset = (int64_t)to;
    else
        agg_intern_forget(&f->in);
    agg_batch_clear(&f->b);
    return rc;
}

static void feed_all(feeder_t *f, const chunks_t *c, size_t per_batch) {
    for (size_t i = 0; i < c->n; i += per_batch)
        CHECK_EQ(feed(f, c, i, i + per_batch < c->n ? i + per_batch : c->n), 0);
}

/* ---- table dumps, compared as sorted row strings ---- */

/* PostgreSQL stores profile, profile_leaf and span_stacks packed (store/schema.c): a key a
 * batch stored after another one is in two parts, which its readers sum; so do these dumps,
 * on both */
#define ROLLUP_SUMS(last)                                                                          \
    "service, version, type, width, bucket, labels, " last ", SUM(weight), SUM(count), "          \
    "SUM(rows), SUM(chunks)", " GROUP BY 1, 2, 3, 4, 5, 6, 7"
#define SPAN_STACK_SUMS                                                                            \
    "trace, span, type, stack, SUM(weight), SUM(count), SUM(rows)", " GROUP BY 1, 2, 3, 4"

static const struct {
    const char *table, *cols, *group;
} tables[] = {
    {"strings", "*", ""},
    {"mappings", "*", ""},
    {"functions", "*", ""},
    {"locations", "*", ""},
    {"stacks", "*", ""},
    {"labelsets", "*", ""},
    {"labels", "*", ""},
    {"labelset_base", "*", ""},
    {"profile", ROLLUP_SUMS("stack")},
    {"profile_coarse", "*", ""},
    {"profile_leaf", ROLLUP_SUMS("leaf")},
    {"totals", "*", ""},
    {"intervals", "*", ""},
    {"drops", "*", ""},
    {"versions", "*", ""},
    {"fn_stats", "*", ""},
    {"spans", "*", ""},
    {"span_stacks", SPAN_STACK_SUMS},
    {"rejects", "*", ""},
    {"seen_chunks", "chunk_id, ts_ns", ""},
    {"offsets", "topic, part, next_offset", ""},
};
#define NTABLES (sizeof tables / sizeof tables[0])

typedef struct {
    char **row;
    size_t n, cap;
} dump_t;

static void dump_add(dump_t *d, const char *s) {
    if (d->n == d->cap) {
        d->cap = d->cap ? d->cap * 2 : 256;
        d->row = realloc(d->row, d->cap * sizeof *d->row);
        CHECK(d->row);
    }
    d->row[d->n++] = strdup(s);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void dump_free(dump_t *d) {
    for (size_t i = 0; i < d->n; i++)
        free(d->row[i]);
    free(d->row);
    memset(d, 0, sizeof *d);
}

/* cell formatting shared by both: integers and text as is, doubles %.12g, bytes lower hex */
static void cell(char *row, size_t size, const char *txt) {
    size_t n = strlen(row);
    snprintf(row + n, size - n, "%s|", txt);
}

static void dump_sqlite(const char *path, size_t t, dump_t *d) {
    sqlite3 *db;
    CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT %s FROM %s%s", tables[t].cols, tables[t].table,
             tables[t].group);
    sqlite3_stmt *st;
    CHECKF(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK, "%s", sqlite3_errmsg(db));
    while (sqlite3_step(st) == SQLITE_ROW) {
        char row[4096] = "", v[1024];
        for (int i = 0; i < sqlite3_column_count(st); i++) {
            switch (sqlite3_column_type(st, i)) {
            case SQLITE_FLOAT:
                snprintf(v, sizeof v, "%.12g", sqlite3_column_double(st, i));
                break;
            case SQLITE_BLOB: {
                const uint8_t *p = sqlite3_column_blob(st, i);
                int len = sqlite3_column_bytes(st, i);
                for (int k = 0; k < len && 2 * k + 2 < (int)sizeof v; k++)
                    sprintf(v + 2 * k, "%02x", p[k]);
                if (!len)
                    v[0] = 0;
                break;
            }
            case SQLITE_NULL:
                snprintf(v, sizeof v, "NULL");
                break;
            default:
                snprintf(v, sizeof v, "%s", (const char *)sqlite3_column_text(st, i));
            }
            cell(row, sizeof row, v);
        }
        dump_add(d, row);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    if (d->n)
        qsort(d->row, d->n, sizeof *d->row, cmp_str);
}

static void dump_pg(const char *url, size_t t, dump_t *d) {
    PGconn *c = PQconnectdb(url);
    CHECKF(PQstatus(c) == CONNECTION_OK, "%s", PQerrorMessage(c));
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT %s FROM %s%s", tables[t].cols, tables[t].table,
             tables[t].group);
    PGresult *r = PQexec(c, sql);
    CHECKF(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql, PQerrorMessage(c));
    for (int i = 0; i < PQntuples(r); i++) {
        char row[4096] = "", v[1024];
        for (int j = 0; j < PQnfields(r); j++) {
            const char *x = PQgetvalue(r, i, j);
            if (PQgetisnull(r, i, j))
                snprintf(v, sizeof v, "NULL");
            else if (PQftype(r, j) == 701) /* float8 */
                snprintf(v, sizeof v, "%.12g", strtod(x, NULL));
            else if (PQftype(r, j) == 17) /* bytea: "\x..." */
                snprintf(v, sizeof v, "%s", x + 2);
            else
                snprintf(v, sizeof v, "%s", x);
            cell(row, sizeof row, v);
        }
        dump_add(d, row);
    }
    PQclear(r);
    PQfinish(c);
    if (d->n)
        qsort(d->row, d->n, sizeof *d->row, cmp_str);
}

/* Every table identical; returns the number of rows compared. */
static size_t compare_all(const char *sqlite_path, const char *url) {
    size_t rows = 0;
    for (size_t t = 0; t < NTABLES; t++) {
        dump_t a = {0}, b = {0};
        dump_sqlite(sqlite_path, t, &a);
        dump_pg(url, t, &b);
        CHECKF(a.n == b.n, "%s: %zu rows in SQLite, %zu in PostgreSQL", tables[t].table, a.n,
               b.n);
        for (size_t i = 0; i < a.n; i++)
            CHECKF(!strcmp(a.row[i], b.row[i]), "%s row %zu: SQLite %s, PostgreSQL %s",
                   tables[t].table, i, a.row[i], b.row[i]);
        rows += a.n;
        dump_free(&a);
        dump_free(&b);
    }
    return rows;
}

static int64_t pg_count(const char *url, const char *sql) {
    int64_t n = at_pg_q1(url, sql);
    CHECKF(n >= 0, "no answer to %s", sql);
    return n;
}

static agg_store_t *open_pg(const char *url) {
    agg_store_t *st;
    char err[512];
    CHECKF(agg_store_pg_open(url, &st, err, sizeof err) == 0, "%s", err);
    return st;
}

static agg_store_t *open_sqlite(const char *dir, char *path, size_t size) {
    agg_store_t *st;
    char err[512];
    snprintf(path, size, "%s/s.db", dir);
    CHECKF(agg_store_sqlite_open(path, &st, err, sizeof err) == 0, "%s", err);
    return st;
}

/* ---- tests ---- */

static void test_same_rows_as_sqlite(void) {
    char url[256], dir[64], path[128];
    new_db("same_rows", url, sizeof url);
    at_tmpdir(dir, "pgsame");
    chunks_t c = sim_chunks(5);
    feeder_t fs, fp;
    feeder_init(&fs, open_sqlite(dir, path, sizeof path));
    feeder_init(&fp, open_pg(url));
    double t0 = at_now();
    feed_all(&fs, &c, 16);
    double t1 = at_now();
    feed_all(&fp, &c, 16);
    double t2 = at_now();
    feeder_free(&fs);
    feeder_free(&fp);
    size_t rows = compare_all(path, url);
    CHECK(pg_count(url, "SELECT count(*) FROM profile") > 1000);
    CHECK(pg_count(url, "SELECT count(*) FROM stacks") > 100);
    CHECK(pg_count(url, "SELECT count(*) FROM fn_stats") > 100);
    CHECK(pg_count(url, "SELECT count(*) FROM profile_leaf") > 100);
    CHECK_EQ(pg_count(url, "SELECT next_offset FROM offsets"), (int64_t)c.n);
    printf("%zu chunks, %zu rows identical in every table; write time SQLite %.2f s, "
           "PostgreSQL %.2f s\n", c.n, rows, t1 - t0, t2 - t1);
    chunks_free(&c);
}

/* Rows the PostgreSQL store takes for new to it (newer than the oldest bucket of their label set
 * in the batch) but that an earlier batch wrote: a process's chunks out of order (round 2
 * before round 1). The plain insert meets the stored keys, and the rows are merged instead:
 * every batch is written and both stores hold the same rows. */
static void test_fresh_rows_stored_already(void) {
    char url[256], dir[64], path[128];
    new_db("fresh_rows", url, sizeof url);
    at_tmpdir(dir, "pgfresh");
    chunks_t c = sim_chunks(7); /* 4 rounds of 18 processes, in round order */
    CHECK_EQ(c.n, 72);
    feeder_t fs, fp;
    feeder_init(&fs, open_sqlite(dir, path, sizeof path));
    feeder_init(&fp, open_pg(url));
    for (feeder_t *f = &fs; f; f = f == &fs ? &fp : NULL) {
        CHECK_EQ(feed(f, &c, 18, 36), 0); /* round 2 */
        CHECK_EQ(feed(f, &c, 0, 18), 0);  /* round 1: its last buckets are round 2's first */
        CHECK_EQ(feed(f, &c, 36, 72), 0);
    }
    int64_t rows = pg_count(url, "SELECT sum(rows) FROM totals");
    feeder_free(&fs);
    feeder_free(&fp);
    size_t n = compare_all(path, url);
    int64_t want = 0;
    for (size_t i = 0; i < c.n; i++)
        for (int t = 1; t <= CM_EV_MAX; t++)
            want += c.c[i]->samples[t].n;
    CHECK_EQ(rows, want);
    printf("%zu rows identical with chunks out of order\n", n);
    chunks_free(&c);
}

static void test_fenced(void) {
    char url[256];
    new_db("fenced", url, sizeof url);
    chunks_t c = sim_chunks(6);
    feeder_t f;
    feeder_init(&f, open_pg(url));
    CHECK_EQ(feed(&f, &c, 0, 10), 0);
    int64_t w = pg_count(url, "SELECT sum(weight) FROM totals");
    CHECK(w > 0);
    /* another instance wrote the partition meanwhile: a batch from the old base is refused
     * and writes nothing */
    agg_store_t *other = open_pg(url);
    feeder_t g;
    feeder_init(&g, other);
    g.offset = -1; /* it believes nothing was stored */
    CHECK_EQ(feed(&g, &c, 0, 10), -ESTALE);
    CHECK_EQ(pg_count(url, "SELECT sum(weight) FROM totals"), w);
    CHECK_EQ(pg_count(url, "SELECT next_offset FROM offsets"), 10);
    int64_t off;
    CHECK(agg_store_offset_get(other, "fleetprof.chunks", 0, &off) == 0 && off == 10);
    int64_t off1;
    CHECK(agg_store_offset_get(other, "fleetprof.chunks", 1, &off1) == 0 && off1 == -1);
    int seen = 0;
    CHECK(agg_store_chunk_seen(other, c.c[3]->header.chunk_id, &seen) == 0 && seen == 1);
    CHECK(agg_store_chunk_seen(other, c.c[30]->header.chunk_id, &seen) == 0 && seen == 0);
    /* from the stored offset it goes on */
    g.offset = off;
    CHECK_EQ(feed(&g, &c, 10, 20), 0);
    CHECK_EQ(pg_count(url, "SELECT next_offset FROM offsets"), 20);
    feeder_free(&f);
    feeder_free(&g);
    chunks_free(&c);
}

/* Review finding 10: a connection lost inside the batch's transaction is not re-established
 * for the statements after it (they would run in autocommit on a new session, outside the
 * fence's lock): the fence fails with CM_EIO; after the rollback the next call reconnects. */
static void test_no_reset_in_transaction(void) {
    char url[256];
    new_db("notxreset", url, sizeof url);
    agg_store_t *st = open_pg(url);
    agg_qx_t *x = st->vt->qx(st);
    CHECK(x != NULL);
    CHECK_EQ(agg_qx_begin(x), 0);
    agg_qxst_t *q;
    CHECK_EQ(agg_qx_prepare(x, "SELECT pg_backend_pid()", &q), 0);
    CHECK_EQ(agg_qx_step(q), 1);
    int64_t pid = agg_qx_int64(q, 0);
    agg_qx_finalize(q);
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%lld)::int", (long long)pid);
    CHECK_EQ(pg_count(url, sql), 1);
    CHECK(agg_qx_exec(x, "SELECT 1") != 0); /* libpq sees the session gone */
    CHECK_EQ(st->vt->fence(st, "fleetprof.chunks", 0, -1), CM_EIO);
    CHECK_EQ(pg_count(url, "SELECT count(*) FROM offsets"), 0); /* nothing ran in autocommit */
    agg_qx_rollback(x);
    CHECK_EQ(st->vt->fence(st, "fleetprof.chunks", 0, -1), 0); /* reconnected, outside a tx */
    agg_store_close(st);
}

/* The store's size is its tables' bytes (heap, TOAST, indexes), counted here independently
 * from their names: not the whole database (catalogs), and it grows with the data. */
static void test_size_bytes(void) {
    char url[256];
    new_db("size", url, sizeof url);
    chunks_t c = sim_chunks(10);
    feeder_t f;
    feeder_init(&f, open_pg(url));
    const char *by_name =
        "SELECT sum(pg_total_relation_size(t)) FROM unnest(ARRAY['meta', 'offsets', "
        "'seen_chunks', 'strings', 'mappings', 'functions', 'locations', 'stacks', 'labelsets', "
        "'labels', 'labelset_base', 'profile_packed', 'profile_coarse', 'profile_leaf_packed', "
        "'totals', 'intervals', 'drops', 'kpm', 'versions', 'fn_stats', 'spans', "
        "'span_stacks_packed', 'requests', "
        "'rejects', 'incidents', 'incident_chunks', 'fleetprof_schema']::regclass[]) t";
    int64_t empty = agg_store_size_bytes(f.st);
    CHECK_EQ(feed(&f, &c, 0, c.n), 0);
    /* sizes only grow (autovacuum may add a map fork meanwhile): a1 <= tables <= a2 */
    int64_t a1 = agg_store_size_bytes(f.st), tb = pg_count(url, by_name),
            a2 = agg_store_size_bytes(f.st);
    int64_t db = pg_count(url, "SELECT pg_database_size(current_database())");
    CHECKF(a1 > 0 && a1 <= tb && tb <= a2, "size_bytes %lld..%lld, the tables by name %lld",
           (long long)a1, (long long)a2, (long long)tb);
    CHECKF(a1 > empty + 1000000, "size %lld after %zu chunks, %lld empty", (long long)a1, c.n,
           (long long)empty);
    CHECKF(a2 < db - 4000000, "size %lld, the database %lld (catalogs ~7 MB)", (long long)a2,
           (long long)db);
    printf("store size %lld bytes empty, %lld after %zu chunks (the tables by name: %lld; "
           "pg_database_size %lld)\n", (long long)empty, (long long)a1, c.n, (long long)tb,
           (long long)db);
    feeder_free(&f);
    chunks_free(&c);
}

/* A string that is not UTF-8 (or holds a NUL), which PostgreSQL's text refuses: the batch
 * still commits (a refused batch would be consumed again forever), the string stored with
 * U+FFFD for each bad byte under the id of its original bytes. */
static void test_bad_utf8(void) {
    char url[256];
    new_db("utf8", url, sizeof url);
    chunks_t c = sim_chunks(11);
    feeder_t f;
    feeder_init(&f, open_pg(url));
    static const char bad[] = "fn\xff\xfe\0x\xc3\xa9\xed\xa0\x80"; /* + surrogate */
    uint64_t id;
    CHECK_EQ(agg_intern_str(&f.in, &f.b, bad, sizeof bad - 1, &id), 0);
    CHECK_EQ(feed(&f, &c, 0, 2), 0);
    char sql[160];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM strings WHERE id = %lld AND s = "
             "E'fn\\uFFFD\\uFFFD\\uFFFDx\\u00e9\\uFFFD\\uFFFD\\uFFFD'", (long long)id);
    CHECK_EQ(pg_count(url, sql), 1);
    CHECK_EQ(pg_count(url, "SELECT next_offset FROM offsets"), 2);
    feeder_free(&f);
    chunks_free(&c);
}

static void test_migrations(void) {
    char url[256];
    new_db("migr", url, sizeof url);
    agg_store_close(open_pg(url));
    agg_store_close(open_pg(url)); /* again: nothing to apply */
    CHECK_EQ(pg_count(url, "SELECT count(*) FROM fleetprof_schema"), agg_pg_schema_version());
    CHECK(at_sh("psql -X -q '%s' -c 'INSERT INTO fleetprof_schema(version) VALUES (99)' "
             ">/dev/null", url) == 0);
    agg_store_t *st;
    char err[512];
    CHECK_EQ(agg_store_pg_open(url, &st, err, sizeof err), CM_ECONFIG);
    CHECKF(strstr(err, "schema is version 99") && strstr(err, "upgrade the aggregator"), "%s",
           err);
    /* an unreachable server: a precise error without the password */
    CHECK(agg_store_pg_open("postgres://u:secret@127.0.0.1:1/x", &st, err, sizeof err) != 0);
    CHECKF(strstr(err, "cannot connect") && !strstr(err, "secret") && strstr(err, "u:***@"),
           "%s", err);
}

/* A database written before profile, profile_leaf and span_stacks were packed (their rows as
 * a table each, schema version 6): opening it moves every row into the packed tables, which
 * hold one row per group, and the views read the same sums as the tables did. */
static void test_packed_migration(void) {
    static const char *names[] = {"profile", "profile_leaf", "span_stacks"};
    char url[256];
    new_db("packmig", url, sizeof url);
    chunks_t c = sim_chunks(3);
    feeder_t f;
    feeder_init(&f, open_pg(url));
    feed_all(&f, &c, 16);
    feeder_free(&f);
    dump_t before[3] = {{0}}, after[3] = {{0}};
    size_t ti[3];
    for (int k = 0; k < 3; k++) {
        for (ti[k] = 0; strcmp(tables[ti[k]].table, names[k]); ti[k]++)
            ;
        dump_pg(url, ti[k], &before[k]);
        char q[128];
        snprintf(q, sizeof q, "SELECT count(*) FROM %s_packed", names[k]);
        int64_t groups = pg_count(url, q);
        snprintf(q, sizeof q, "SELECT count(*) FROM %s", names[k]);
        int64_t rows = pg_count(url, q);
        CHECKF(groups > 0 && groups < rows, "%s: %lld packed rows for %lld rows", names[k],
               (long long)groups, (long long)rows);
        /* back to version 6: the view's rows as a table of its name, without the packing */
        CHECK(at_sh("psql -X -q -v ON_ERROR_STOP=1 '%s' -c 'BEGIN; CREATE TABLE old6 AS SELECT "
                    "* FROM %s; DROP VIEW %s; DROP TABLE %s_packed; ALTER TABLE old6 RENAME TO "
                    "%s; COMMIT' >/dev/null", url, names[k], names[k], names[k], names[k]) == 0);
    }
    CHECK(at_sh("psql -X -q '%s' -c 'DELETE FROM fleetprof_schema WHERE version = 7' >/dev/null",
                url) == 0);
    agg_store_close(open_pg(url));
    CHECK_EQ(pg_count(url, "SELECT count(*) FROM fleetprof_schema"), agg_pg_schema_version());
    for (int k = 0; k < 3; k++) {
        dump_pg(url, ti[k], &after[k]);
        CHECKF(before[k].n > 100 && before[k].n == after[k].n, "%s: %zu keys, %zu after",
               names[k], before[k].n, after[k].n);
        for (size_t i = 0; i < before[k].n; i++)
            CHECK(!strcmp(before[k].row[i], after[k].row[i]));
        dump_free(&before[k]);
        dump_free(&after[k]);
    }
    chunks_free(&c);
}

/* The database killed (SIGKILL) mid-ingest and started again, then stopped cleanly for a
 * while: the batches in between fail, are consumed again from the stored offset, and the
 * result equals an uninterrupted SQLite store exactly. */
static void test_restart_mid_ingest(void) {
    char url[256], dir[64], path[128];
    new_db("restart", url, sizeof url);
    at_tmpdir(dir, "pgrestart");
    chunks_t c = sim_chunks(7);
    feeder_t fs, fp;
    feeder_init(&fs, open_sqlite(dir, path, sizeof path));
    feed_all(&fs, &c, 8);
    feeder_init(&fp, open_pg(url));
    size_t next = 0, failed = 0;
    int restarts = 0;
    while (next < c.n) {
        size_t to = next + 8 < c.n ? next + 8 : c.n;
        if ((next / 8) % 4 == 1 && restarts < 2) { /* a crash, then a clean stop */
            CHECK(at_sh("%s/deploy/postgres/stop.sh %s %s 2>/dev/null", src, pgdir,
                     restarts ? "" : "--kill") == 0);
            CHECK(feed(&fp, &c, next, to) != 0); /* the database is down: the batch fails */
            failed++;
            int64_t off;
            CHECK(agg_store_offset_get(fp.st, "fleetprof.chunks", 0, &off) != 0);
            CHECK(at_sh("%s/deploy/postgres/start.sh %s >/dev/null 2>&1", src, pgdir) == 0);
            restarts++;
            /* as consume.c: re-read the stored offset (the handle tries to reconnect at most
             * once a second), consume again from there */
            int tries = 0;
            while (agg_store_offset_get(fp.st, "fleetprof.chunks", 0, &off) != 0 && tries++ < 50)
                at_sleep_ms(100);
            CHECKF(tries <= 50, "offset still unreadable after %d tries", tries);
            CHECK_EQ(off, (int64_t)next);
            fp.offset = off;
        }
        CHECK_EQ(feed(&fp, &c, next, to), 0);
        next = to;
    }
    feeder_free(&fs);
    feeder_free(&fp);
    CHECK_EQ(restarts, 2);
    size_t rows = compare_all(path, url);
    printf("%zu chunks; %zu batches failed with the database down; %zu rows identical to "
           "the uninterrupted SQLite store\n", c.n, failed, rows);
    chunks_free(&c);
}

/* Compaction, downsampling and expiry give the same rows as SQLite's: data of the current
 * minutes (above the marks set by the first batch), compacted as an hour later, then
 * downsampled and expired as days later. */
static void test_retention_same_as_sqlite(void) {
    char url[256], dir[64], path[128];
    new_db("retention", url, sizeof url);
    at_tmpdir(dir, "pgret");
    /* The stores' tier marks are taken from the clock at each write, in minutes: the two
     * stores' writes must fall in the same minute (they take a few seconds), so start early in
     * one. (Once they fell either side of a minute boundary and the marks differed.) */
    while (time(NULL) % 60 >= 40)
        sleep(1);
    int64_t now = (int64_t)time(NULL);
    /* the first batch (old data) sets both stores' marks; then data from now on */
    chunks_t old = sim_chunks_at(8, (uint64_t)(now - 3 * 3600) * 1000000000ull);
    chunks_t cur = sim_chunks_at(9, (uint64_t)now * 1000000000ull);
    feeder_t fs, fp;
    feeder_init(&fs, open_sqlite(dir, path, sizeof path));
    feeder_init(&fp, open_pg(url));
    CHECK_EQ(feed(&fs, &old, 0, 8), 0);
    CHECK_EQ(feed(&fp, &old, 0, 8), 0);
    /* then the current minutes, in batches of 16, into both (offsets go on from 8) */
    for (size_t i = 0; i < cur.n; i += 16) {
        size_t to = i + 16 < cur.n ? i + 16 : cur.n;
        for (feeder_t *f = &fs; f; f = f == &fs ? &fp : NULL) {
            f->b.base_offset = f->offset;
            for (size_t k = i; k < to; k++) {
                agg_chunk_ids_t ids;
                CHECK(agg_intern_chunk(&f->in, &f->b, cur.c[k], &ids) == 0);
                CHECK(agg_rollup_chunk(&f->r, &f->b, cur.c[k], &ids) == 0);
            }
            f->b.next_offset = f->offset + (int64_t)(to - i);
            CHECK_EQ(agg_store_batch_write(f->st, "fleetprof.chunks", 0, &f->b), 0);
            f->offset = f->b.next_offset;
            agg_batch_clear(&f->b);
        }
    }
    size_t rows0 = compare_all(path, url);
    int64_t tiers0 = pg_count(url, "SELECT count(*) FROM profile_coarse");
    /* compaction as an hour later: the fine rows of the current minutes go to every tier */
    CHECK_EQ(fs.st->vt->compact(fs.st, 10, now + 3600), 0);
    CHECK_EQ(fp.st->vt->compact(fp.st, 10, now + 3600), 0);
    int64_t tiers = pg_count(url, "SELECT count(*) FROM profile_coarse");
    size_t rows1 = compare_all(path, url);
    CHECKF(tiers > tiers0, "compaction added no tier rows (%lld)", (long long)tiers);
    /* downsampled as two days later, then rollups older than a day expired (nothing of
     * today), spans and chunk ids of before now + 1 s */
    agg_retention_stats_t a = {0}, b = {0};
    int64_t cut = now + 2 * 86400;
    cut -= cut % 3600;
    CHECK_EQ(agg_store_downsample(fs.st, 10, 3600, cut, &a), 0);
    CHECK_EQ(agg_store_downsample(fp.st, 10, 3600, cut, &b), 0);
    CHECK_EQ(a.rows_moved, b.rows_moved);
    CHECK(a.rows_moved > 1000);
    CHECK_EQ(pg_count(url, "SELECT count(*) FROM profile WHERE width = 10"), 0);
    size_t rows2 = compare_all(path, url);
    int64_t exp = now - 86400;
    CHECK_EQ(agg_store_expire(fs.st, exp, (now + 1) * 1000000000ll, 2, &a), 0);
    CHECK_EQ(agg_store_expire(fp.st, exp, (now + 1) * 1000000000ll, 2, &b), 0);
    CHECK_EQ(a.rows_expired, b.rows_expired);
    CHECK_EQ(a.seen_expired, b.seen_expired);
    size_t rows3 = compare_all(path, url);
    /* expire everything: nothing left of the rollups */
    CHECK_EQ(agg_store_expire(fs.st, cut + 7200, INT64_MAX, INT64_MAX, &a), 0);
    CHECK_EQ(agg_store_expire(fp.st, cut + 7200, INT64_MAX, INT64_MAX, &b), 0);
    CHECK_EQ(pg_count(url, "SELECT count(*) FROM totals"), 0);
    CHECK_EQ(pg_count(url, "SELECT count(*) FROM profile_coarse"), 0);
    size_t rows4 = compare_all(path, url);
    printf("identical after ingest (%zu rows), compaction (%zu, tier rows %lld -> %lld), "
           "downsampling (%zu, %lld rows moved), expiry (%zu), expiry of all (%zu)\n", rows0,
           rows1, (long long)tiers0, (long long)tiers, rows2, (long long)b.rows_moved, rows3,
           rows4);
    feeder_free(&fs);
    feeder_free(&fp);
    chunks_free(&old);
    chunks_free(&cur);
}

static const tr_test_t tests[] = {
    {"retention_same_as_sqlite", test_retention_same_as_sqlite},
    {"fresh_rows_stored_already", test_fresh_rows_stored_already},
    {"same_rows_as_sqlite", test_same_rows_as_sqlite},
    {"fenced", test_fenced},
    {"no_reset_in_transaction", test_no_reset_in_transaction},
    {"size_bytes", test_size_bytes},
    {"bad_utf8", test_bad_utf8},
    {"migrations", test_migrations},
    {"packed_migration", test_packed_migration},
    {"restart_mid_ingest", test_restart_mid_ingest},
    {0},
};

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *s = getenv("FLEETPROF_SRC");
    snprintf(src, sizeof src, "%s", s ? s : ".");
    snprintf(pgdir, sizeof pgdir, "/tmp/fp-pgtest-%d", (int)getpid());
    if (getenv("FP_PG_TEST_PORT"))
        pg_port = atoi(getenv("FP_PG_TEST_PORT"));
    if (at_pg_start(pg_port, pgdir, base_url, sizeof base_url)) {
        printf("1 failed\n");
        return 1;
    }
    int rc = tr_main(tests, argc, argv);
    at_sh("%s/deploy/postgres/stop.sh %s --remove 2>/dev/null", src, pgdir);
    return rc;
}
