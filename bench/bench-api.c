/* Benchmark of the query API over HTTP: latency of a merged profile (top functions, call tree)
 * and of a version diff over ONE HOUR of a service with 10,000 distinct stacks from 100
 * processes (10-s buckets: 360 per version, two versions).
 *
 * The store is written directly with SQL in the schema of store_sqlite.c (created by
 * agg_store_sqlite_open): per (version, bucket) every stack gets a Poisson number of samples
 * of its Zipf popularity out of 100 processes x 10 s x 100 Hz, as the rollup would store them;
 * intervals hold 1,000 process-seconds per bucket. The API runs in-process (agg_api + the
 * libmicrohttpd server) and requests go through libcurl, so a figure is the whole HTTP round
 * trip: parse, SQLite read, profile build, view/diff, JSON.
 *
 * With --pg URL the same store is copied (COPY, then ANALYZE) into the PostgreSQL database at
 * URL (a `--store postgres://...` aggregator's schema), a second API reads it (query_store.h
 * over libpq), and every request kind is measured on both, side by side, as ratios of one run.
 *
 *   bench-api [--iterations N] [--dir DIR (reuse a generated store)] [--pg URL]
 *             [--pg-reuse (URL already holds DIR's copy)] [--only SUBSTR (request kinds)]
 * Prints p50/p99 per request kind. Results: bench/RESULTS.md.
 */
#define _GNU_SOURCE
#include "api.h"
#include "http.h"
#include "intern.h"
#include "store.h"
#include "store_pg.h"

#include "../cli/src/client.h"

#include "cm/wire.h"

#include <libpq-fe.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NSTACKS 10000
#define NFUNCS 600
#define PROCS 100
#define BUCKETS 360
#define WIDTH 10
#define HZ 100

static uint64_t rs = 88172645463325252ull;
static uint64_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}
static double unif(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }
static uint64_t poisson(double l) {
    if (l > 30) {
        double u1 = unif() + 1e-12, u2 = unif();
        double z = sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
        double v = l + sqrt(l) * z;
        return v < 0 ? 0 : (uint64_t)(v + 0.5);
    }
    double L = exp(-l), p = 1;
    uint64_t k = 0;
    do {
        k++;
        p *= unif();
    } while (p > L);
    return k - 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

#define EXEC(db, sql)                                                                              \
    do {                                                                                           \
        if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) {                                \
            fprintf(stderr, "bench-api: %s: %s\n", sql, sqlite3_errmsg(db));                       \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static sqlite3_stmt *prep(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        fprintf(stderr, "bench-api: %s: %s\n", sql, sqlite3_errmsg(db));
        exit(1);
    }
    return st;
}

static void step(sqlite3_stmt *st) {
    if (sqlite3_step(st) != SQLITE_DONE) {
        fprintf(stderr, "bench-api: insert failed\n");
        exit(1);
    }
    sqlite3_reset(st);
}

/* Builds the store: one service "bench", versions "v1" and "v2" (v2: one function 10 % hotter). */
static void generate(const char *dir, int64_t t0) {
    char path[512], err[256];
    snprintf(path, sizeof path, "%s/%s-0.db", dir, CM_TOPIC_CHUNKS);
    agg_store_t *st;
    if (agg_store_sqlite_open(path, &st, err, sizeof err)) {
        fprintf(stderr, "bench-api: %s\n", err);
        exit(1);
    }
    agg_store_close(st);
    sqlite3 *db;
    sqlite3_open(path, &db);
    EXEC(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF; BEGIN");
    uint64_t svc = agg_intern_string_id("bench", 5);
    sqlite3_stmt *ss = prep(db, "INSERT OR IGNORE INTO strings VALUES(?1, ?2)");
    const char *names[] = {"bench", "v1", "v2", "/usr/bin/bench"};
    for (int i = 0; i < 4; i++) {
        sqlite3_bind_int64(ss, 1, (sqlite3_int64)agg_intern_string_id(names[i], strlen(names[i])));
        sqlite3_bind_text(ss, 2, names[i], -1, SQLITE_STATIC);
        step(ss);
    }
    uint64_t modstr = agg_intern_string_id(names[3], strlen(names[3]));
    EXEC(db, "INSERT INTO mappings VALUES(1, 0, x'0123456789abcdef0123456789abcdef01234567')");
    sqlite3_exec(db, "UPDATE mappings SET filename=0", NULL, NULL, NULL);
    {
        char sql[128];
        snprintf(sql, sizeof sql, "UPDATE mappings SET filename=%lld", (long long)modstr);
        EXEC(db, sql);
    }
    sqlite3_stmt *sf = prep(db, "INSERT INTO functions VALUES(?1, ?2, ?2, 0)");
    sqlite3_stmt *sl = prep(db, "INSERT INTO locations VALUES(?1, ?1, 1, ?2, 0)");
    for (int f = 1; f <= NFUNCS; f++) {
        char name[32];
        snprintf(name, sizeof name, "fn_%04d", f);
        sqlite3_int64 id = 1000 + f;
        sqlite3_bind_int64(ss, 1, id);
        sqlite3_bind_text(ss, 2, name, -1, SQLITE_TRANSIENT);
        step(ss);
        sqlite3_bind_int64(sf, 1, f);
        sqlite3_bind_int64(sf, 2, id);
        step(sf);
        sqlite3_bind_int64(sl, 1, f);
        sqlite3_bind_int64(sl, 2, 0x1000 + 16 * f);
        step(sl);
    }
    /* stacks: a trie; each stack a random path of depth 6-20 from a few roots */
    sqlite3_stmt *sk = prep(db, "INSERT INTO stacks VALUES(?1, ?2, ?3, ?4)");
    int64_t next_node = 1;
    int64_t *leaf = malloc(NSTACKS * sizeof *leaf);
    /* a small shared prefix tree: main -> 20 handlers -> 100 mid functions */
    for (int s = 0; s < NSTACKS; s++) {
        int depth = 6 + (int)(rnd() % 15);
        int64_t parent = 0;
        for (int d = 0; d < depth; d++) {
            int loc = d == 0 ? 1 : d == 1 ? 2 + (int)(rnd() % 20) : 22 + (int)(rnd() % (NFUNCS - 22));
            int64_t id = next_node++; /* unique nodes below depth 2 keep stacks distinct */
            sqlite3_bind_int64(sk, 1, id);
            sqlite3_bind_int64(sk, 2, parent);
            sqlite3_bind_int64(sk, 3, loc);
            sqlite3_bind_int64(sk, 4, d + 1);
            step(sk);
            parent = id;
        }
        leaf[s] = parent;
    }
    /* Zipf popularity (s = 1.1) */
    double *pop = malloc(NSTACKS * sizeof *pop), sum = 0;
    for (int s = 0; s < NSTACKS; s++)
        sum += pop[s] = 1.0 / pow(s + 1, 1.1);
    for (int s = 0; s < NSTACKS; s++)
        pop[s] /= sum;
    sqlite3_stmt *sp = prep(db, "INSERT INTO profile VALUES(?1, ?2, 1, 10, ?3, 0, ?4, ?5, ?6, ?7, "
                                "?8)");
    sqlite3_stmt *stt = prep(db, "INSERT INTO totals VALUES(?1, ?2, 1, 10, ?3, ?4, ?5, ?6, ?7)");
    sqlite3_stmt *si = prep(db, "INSERT INTO intervals VALUES(?1, ?2, 10, ?3, ?4, ?5, 0, 0, 0, 0)");
    sqlite3_stmt *sv = prep(db, "INSERT INTO versions VALUES(?1, ?2, ?3, ?4, ?5, ?6)");
    double per_bucket = (double)PROCS * WIDTH * HZ; /* samples */
    const int64_t period = 1000000000 / HZ;
    size_t rows = 0;
    for (int v = 1; v <= 2; v++) {
        uint64_t ver = agg_intern_string_id(v == 1 ? "v1" : "v2", 2);
        for (int b = 0; b < BUCKETS; b++) {
            int64_t bucket = t0 + (int64_t)b * WIDTH;
            double load = exp(0.1 * (unif() - 0.5));
            int64_t tw = 0, tc = 0, tr = 0;
            for (int s = 0; s < NSTACKS; s++) {
                double l = per_bucket * pop[s] * load * (v == 2 && s == 7 ? 1.5 : 1.0);
                uint64_t n = poisson(l);
                if (!n)
                    continue;
                sqlite3_bind_int64(sp, 1, (sqlite3_int64)svc);
                sqlite3_bind_int64(sp, 2, (sqlite3_int64)ver);
                sqlite3_bind_int64(sp, 3, bucket);
                sqlite3_bind_int64(sp, 4, leaf[s]);
                sqlite3_bind_int64(sp, 5, (sqlite3_int64)n * period);
                sqlite3_bind_int64(sp, 6, (sqlite3_int64)n * CM_COUNT_ONE);
                sqlite3_bind_int64(sp, 7, (sqlite3_int64)n);
                sqlite3_bind_int64(sp, 8, 1);
                step(sp);
                tw += (int64_t)n * period;
                tc += (int64_t)n * CM_COUNT_ONE;
                tr += (int64_t)n;
                rows++;
            }
            sqlite3_bind_int64(stt, 1, (sqlite3_int64)svc);
            sqlite3_bind_int64(stt, 2, (sqlite3_int64)ver);
            sqlite3_bind_int64(stt, 3, bucket);
            sqlite3_bind_int64(stt, 4, tw);
            sqlite3_bind_int64(stt, 5, tc);
            sqlite3_bind_int64(stt, 6, tr);
            sqlite3_bind_int64(stt, 7, PROCS);
            step(stt);
            sqlite3_bind_int64(si, 1, (sqlite3_int64)svc);
            sqlite3_bind_int64(si, 2, (sqlite3_int64)ver);
            sqlite3_bind_int64(si, 3, bucket);
            sqlite3_bind_int64(si, 4, PROCS);
            sqlite3_bind_int64(si, 5, (sqlite3_int64)PROCS * WIDTH * 1000000000ll);
            step(si);
        }
        sqlite3_bind_int64(sv, 1, (sqlite3_int64)svc);
        sqlite3_bind_int64(sv, 2, (sqlite3_int64)ver);
        sqlite3_bind_int64(sv, 3, t0 * 1000000000ll + v);
        sqlite3_bind_int64(sv, 4, (t0 + BUCKETS * WIDTH) * 1000000000ll);
        sqlite3_bind_int64(sv, 5, PROCS * BUCKETS);
        sqlite3_bind_int64(sv, 6, (sqlite3_int64)rows);
        step(sv);
    }
    sqlite3_stmt *all[] = {ss, sf, sl, sk, sp, stt, si, sv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        sqlite3_finalize(all[i]);
    EXEC(db, "COMMIT");
    sqlite3_close(db);
    /* the rollups the aggregator writes next to the fine rows at ingest */
    static const int64_t tiers[] = {60, 600, 3600};
    if (agg_store_sqlite_open(path, &st, err, sizeof err) || st->vt->derive(st, tiers, 3, 60)) {
        fprintf(stderr, "bench-api: cannot derive the coarse rollups of %s\n", path);
        exit(1);
    }
    agg_store_close(st);
    if (sqlite3_open(path, &db) != SQLITE_OK)
        exit(1);
    EXEC(db, "PRAGMA wal_checkpoint(TRUNCATE)");
    sqlite3_close(db);
    free(leaf);
    free(pop);
    printf("store: %zu profile rows (2 versions x %d buckets), %d stacks, %lld trie nodes\n", rows,
           BUCKETS, NSTACKS, (long long)next_node - 1);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double last_p99; /* p99 of the last measure() */

static double measure(const char *server, const char *label, const char *path, int iters) {
    double *t = malloc((size_t)iters * sizeof *t);
    size_t bytes = 0;
    for (int i = 0; i < iters; i++) {
        cli_resp_t r;
        double a = now_s();
        if (cli_http_get(server, NULL, path, &r) || r.status != 200) {
            fprintf(stderr, "bench-api: %s: %ld %s %.200s\n", path, r.status, r.err,
                    r.body ? r.body : "");
            exit(1);
        }
        t[i] = (now_s() - a) * 1e3;
        bytes = r.len;
        cli_resp_free(&r);
    }
    double first = t[0]; /* the first request of a kind may fill the store's node cache */
    /* p99 of the requests after the first (a handle's first request loads its caches) */
    qsort(t + 1, (size_t)iters - 1, sizeof *t, cmp_d);
    double warm99 = iters > 1 ? t[1 + (int)ceil(0.99 * (iters - 1)) - 1] : first;
    qsort(t, (size_t)iters, sizeof *t, cmp_d);
    printf("%-28s p50 %8.1f ms  p99 %8.1f ms  min %8.1f ms  first %8.1f ms  p99 after first "
           "%8.1f ms  (%d requests, %zu bytes)\n",
           label, t[iters / 2], t[(int)ceil(0.99 * iters) - 1], t[0], first, warm99, iters,
           bytes);
    double p50 = t[iters / 2];
    last_p99 = t[(int)ceil(0.99 * iters) - 1];
    free(t);
    return p50;
}

/* The request as the rollups serve it, then with exact=1 (every fine row, as before the coarse
 * and per-leaf rollups existed): the baseline of the same invocation. */
static void compare(const char *server, const char *label, const char *path, int iters) {
    char exact[600], lab[64];
    double fast = measure(server, label, path, iters);
    snprintf(exact, sizeof exact, "%s&exact=1", path);
    snprintf(lab, sizeof lab, "  same, exact=1 (fine rows)");
    double slow = measure(server, lab, exact, iters / 5 > 3 ? iters / 5 : 3);
    printf("  -> the rollups answer %.1fx faster (p50)\n", slow / fast);
}

/* ---- PostgreSQL: the same store copied into a database, the same requests ---- */

/* One COPY text field of column i of st into b (at most cap bytes; 0 when it does not fit). */
static size_t copy_field(sqlite3_stmt *st, int i, char *b, size_t cap) {
    switch (sqlite3_column_type(st, i)) {
    case SQLITE_NULL:
        return (size_t)snprintf(b, cap, "\\N");
    case SQLITE_INTEGER:
        return (size_t)snprintf(b, cap, "%lld", (long long)sqlite3_column_int64(st, i));
    case SQLITE_FLOAT:
        return (size_t)snprintf(b, cap, "%.17g", sqlite3_column_double(st, i));
    case SQLITE_BLOB: {
        const unsigned char *p = sqlite3_column_blob(st, i);
        int n = sqlite3_column_bytes(st, i);
        size_t w = (size_t)snprintf(b, cap, "\\\\x");
        for (int k = 0; k < n && w + 3 < cap; k++)
            w += (size_t)snprintf(b + w, cap - w, "%02x", p[k]);
        return w;
    }
    default: {
        const char *t = (const char *)sqlite3_column_text(st, i);
        size_t w = 0;
        for (; t && *t && w + 3 < cap; t++) {
            if (*t == '\\' || *t == '\t' || *t == '\n' || *t == '\r') {
                b[w++] = '\\';
                b[w++] = *t == '\t' ? 't' : *t == '\n' ? 'n' : *t == '\r' ? 'r' : '\\';
            } else {
                b[w++] = *t;
            }
        }
        b[w] = 0;
        return w;
    }
    }
}

/* Copies every table of the SQLite store at path (but the offsets and seen chunk ids) into
 * the PostgreSQL store at url (schema made by agg_store_pg_open), then ANALYZE. */
static void copy_to_pg(const char *path, const char *url) {
    static const char *const tables[] = {
        "meta", "strings", "mappings", "functions", "locations", "stacks", "labelsets", "labels",
        "labelset_base", "profile", "profile_coarse", "profile_leaf", "totals", "intervals",
        "drops", "versions", "fn_stats", "spans", "span_stacks", "rejects"};
    char err[512];
    agg_store_t *st;
    if (agg_store_pg_open(url, &st, err, sizeof err)) {
        fprintf(stderr, "bench-api: %s\n", err);
        exit(1);
    }
    agg_store_close(st);
    PGconn *c = PQconnectdb(url);
    sqlite3 *db;
    if (PQstatus(c) != CONNECTION_OK || sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL)) {
        fprintf(stderr, "bench-api: cannot open %s or %s\n", path, url);
        exit(1);
    }
    size_t total = 0;
    for (size_t t = 0; t < sizeof tables / sizeof *tables; t++) {
        char sql[1024];
        snprintf(sql, sizeof sql, "SELECT * FROM %s", tables[t]);
        sqlite3_stmt *q = prep(db, sql);
        int nc = sqlite3_column_count(q);
        /* a packed table's rows go to a temporary table first, then packed (schema.h) */
        const char *pk = agg_schema_packed(tables[t]);
        char into[128];
        snprintf(into, sizeof into, "%s%s", pk ? "rows_" : "", tables[t]);
        size_t w = pk ? (size_t)snprintf(sql, sizeof sql, "DELETE FROM %s; CREATE TEMP TABLE %s "
                                         "AS SELECT * FROM %s LIMIT 0; COPY %s(", pk, into,
                                         tables[t], into)
                      : (size_t)snprintf(sql, sizeof sql, "DELETE FROM %s; COPY %s(", into, into);
        for (int i = 0; i < nc; i++)
            w += (size_t)snprintf(sql + w, sizeof sql - w, "%s%s", i ? "," : "",
                                  sqlite3_column_name(q, i));
        snprintf(sql + w, sizeof sql - w, ") FROM STDIN");
        PGresult *r = PQexec(c, sql);
        if (PQresultStatus(r) != PGRES_COPY_IN) {
            fprintf(stderr, "bench-api: %s: %s\n", sql, PQerrorMessage(c));
            exit(1);
        }
        PQclear(r);
        char line[8192];
        while (sqlite3_step(q) == SQLITE_ROW) {
            size_t n = 0;
            for (int i = 0; i < nc; i++) {
                if (i)
                    line[n++] = '\t';
                n += copy_field(q, i, line + n, sizeof line - n - 2);
            }
            line[n++] = '\n';
            if (PQputCopyData(c, line, (int)n) != 1) {
                fprintf(stderr, "bench-api: COPY %s: %s\n", tables[t], PQerrorMessage(c));
                exit(1);
            }
            total++;
        }
        sqlite3_finalize(q);
        if (PQputCopyEnd(c, NULL) != 1 || PQresultStatus(r = PQgetResult(c)) != PGRES_COMMAND_OK) {
            fprintf(stderr, "bench-api: COPY %s: %s\n", tables[t], PQerrorMessage(c));
            exit(1);
        }
        PQclear(r);
        while ((r = PQgetResult(c)))
            PQclear(r);
        if (pk && (agg_schema_pack_insert(tables[t], into, sql, sizeof sql) ||
                   PQresultStatus(r = PQexec(c, sql)) != PGRES_COMMAND_OK)) {
            fprintf(stderr, "bench-api: packing %s: %s\n", tables[t], PQerrorMessage(c));
            exit(1);
        }
        if (pk)
            PQclear(r);
    }
    PGresult *r = PQexec(c, "ANALYZE");
    PQclear(r);
    PQfinish(c);
    sqlite3_close(db);
    printf("copied %zu rows into PostgreSQL (then ANALYZE)\n", total);
}

typedef struct {
    const char *sqlite, *pg; /* servers; pg NULL: SQLite only */
} servers_t;

/* One request kind: on SQLite with the exact=1 baseline, and with PostgreSQL the same request
 * there, the latencies side by side as ratios of the same run. */
static const char *only; /* --only: run the request kinds whose label contains it */

static void kind(const servers_t *sv, const char *label, const char *path, int iters) {
    if (only && !strstr(label, only))
        return;
    if (!sv->pg) {
        compare(sv->sqlite, label, path, iters);
        return;
    }
    char lab[96];
    snprintf(lab, sizeof lab, "%s [sqlite]", label);
    double s50 = measure(sv->sqlite, lab, path, iters), s99 = last_p99;
    snprintf(lab, sizeof lab, "%s [postgres]", label);
    double p50 = measure(sv->pg, lab, path, iters), p99 = last_p99;
    printf("  -> postgres / sqlite: p50 %.2fx, p99 %.2fx\n", p50 / s50, p99 / s99);
}

int main(int argc, char **argv) {
    int iters = 20;
    const char *reuse = NULL, *pg_url = NULL;
    int pg_reuse = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iterations") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc)
            reuse = argv[++i];
        else if (!strcmp(argv[i], "--pg") && i + 1 < argc)
            pg_url = argv[++i];
        else if (!strcmp(argv[i], "--pg-reuse"))
            pg_reuse = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else {
            fprintf(stderr, "usage: bench-api [--iterations N] [--dir DIR] [--pg URL] "
                            "[--pg-reuse] [--only SUBSTR]\n");
            return 2;
        }
    }
    char dir[256];
    int64_t t0 = (int64_t)time(NULL) - 2 * 3600;
    t0 -= t0 % 3600;
    if (reuse) {
        snprintf(dir, sizeof dir, "%s", reuse);
        /* the hour the store was generated for (its first bucket), not this run's */
        char path0[600];
        sqlite3 *db;
        snprintf(path0, sizeof path0, "%s/%s-0.db", dir, CM_TOPIC_CHUNKS);
        if (sqlite3_open_v2(path0, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK) {
            fprintf(stderr, "bench-api: cannot open %s\n", path0);
            return 1;
        }
        sqlite3_stmt *q = prep(db, "SELECT MIN(bucket) FROM intervals");
        if (sqlite3_step(q) == SQLITE_ROW)
            t0 = sqlite3_column_int64(q, 0);
        sqlite3_finalize(q);
        sqlite3_close(db);
    } else {
        snprintf(dir, sizeof dir, "/tmp/bench-api-XXXXXX");
        if (!mkdtemp(dir))
            return 1;
        double a = now_s();
        generate(dir, t0);
        printf("generated in %.1f s under %s\n", now_s() - a, dir);
    }
    agg_api_t *api;
    char err[256];
    agg_api_cfg_t cfg = {.store_dir = dir};
    if (agg_api_new(&cfg, &api, err, sizeof err)) {
        fprintf(stderr, "bench-api: %s\n", err);
        return 1;
    }
    agg_http_route_t routes[AGG_API_ROUTES + 1] = {{0}};
    agg_api_routes(api, routes, AGG_API_ROUTES);
    agg_http_t *http;
    const agg_http_cfg_t hcfg = {.addr = "127.0.0.1"};
    if (agg_http_start(&hcfg, routes, &http, err, sizeof err)) {
        fprintf(stderr, "bench-api: %s\n", err);
        return 1;
    }
    char server[64], pg_server[64];
    snprintf(server, sizeof server, "http://127.0.0.1:%d", agg_http_port(http));
    servers_t sv = {server, NULL};
    agg_api_t *pg_api = NULL;
    agg_http_t *pg_http = NULL;
    agg_http_route_t pg_routes[AGG_API_ROUTES + 1] = {{0}};
    if (pg_url) {
        char path0[600];
        snprintf(path0, sizeof path0, "%s/%s-0.db", dir, CM_TOPIC_CHUNKS);
        double a = now_s();
        if (!pg_reuse) {
            copy_to_pg(path0, pg_url);
            printf("copied in %.1f s\n", now_s() - a);
        }
        agg_api_cfg_t pcfg = {.store_dir = dir, .store = pg_url};
        if (agg_api_new(&pcfg, &pg_api, err, sizeof err)) {
            fprintf(stderr, "bench-api: %s\n", err);
            return 1;
        }
        agg_api_routes(pg_api, pg_routes, AGG_API_ROUTES);
        if (agg_http_start(&hcfg, pg_routes, &pg_http, err, sizeof err)) {
            fprintf(stderr, "bench-api: %s\n", err);
            return 1;
        }
        snprintf(pg_server, sizeof pg_server, "http://127.0.0.1:%d", agg_http_port(pg_http));
        sv.pg = pg_server;
    }
    char path[512];
    snprintf(path, sizeof path, "/api/v1/profile?service=bench&version=v1&from=%lld&to=%lld",
             (long long)t0, (long long)t0 + 3600);
    kind(&sv, "profile top (1 h, v1)", path, iters);
    snprintf(path, sizeof path,
             "/api/v1/profile?service=bench&version=v1&view=tree&from=%lld&to=%lld",
             (long long)t0, (long long)t0 + 3600);
    kind(&sv, "profile tree (1 h, v1)", path, iters);
    snprintf(path, sizeof path, "/api/v1/diff?service=bench&base=v1&test=v2&from=%lld&to=%lld",
             (long long)t0, (long long)t0 + 3600);
    kind(&sv, "diff v1 -> v2 (1 h each)", path, iters);
    /* an hour that is not aligned to the coarse buckets: fine rows for its two partial hours */
    snprintf(path, sizeof path, "/api/v1/profile?service=bench&version=v1&from=%lld&to=%lld",
             (long long)t0 + 900, (long long)t0 + 2700);
    kind(&sv, "profile top (30 min, unaligned)", path, iters);
    snprintf(path, sizeof path, "/api/v1/diff?service=bench&base=v1&test=v2&from=%lld&to=%lld",
             (long long)t0 + 900, (long long)t0 + 2700);
    kind(&sv, "diff (30 min, unaligned)", path, iters);
    agg_http_stop(http);
    agg_api_free(api);
    if (pg_http)
        agg_http_stop(pg_http);
    agg_api_free(pg_api);
    return 0;
}
