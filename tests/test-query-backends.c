/* The read side on both backends. executor_same_on_both_backends: the query executor (qexec.h)
 * runs the same statements on a SQLite file and a PostgreSQL database with the same rows and
 * returns the same values, edge cases included. api_same_on_both_backends: the query API
 * answers the same from SQLite and from PostgreSQL: one simulated fleet (three
 * services, two versions each, dimensions and spans) is fed, batch by batch as the consume loop
 * does, into a SQLite store and into a PostgreSQL store (a throwaway cluster on port 15436,
 * deploy/postgres); then every API route the UI and the CLI use (services, versions, event
 * types, profiles in every view and export, label and dimension filters, group_by, series,
 * diffs by version and by time range, inclusive, per request, exact, spans, one span's
 * profile, reports) is called on an API over each store, and the answers are compared byte
 * for byte (status, content type, body). The reports' creation times are the one thing that
 * differs by nature (each backend's reporter ran at its own instant): they are masked.
 * Float formatting needs no tolerance: both answers come from the same code over the same
 * integers, summed in the same order (the executor returns rows the same way).
 * Every answer must be a 200 with a body, so equal answers are never two equal errors. */
#define _GNU_SOURCE
#include "aggtest.h"
#include "api.h"
#include "dims.h"
#include "fleetsim.h"
#include "intern.h"
#include "qexec.h"
#include "query_store.h"
#include "reports.h"
#include "rollup.h"
#include "store.h"
#include "store_pg.h"
#include "support/runner.h"

#include "cm/chunk.h"
#include "cm/error.h"
#include "cm/log.h"

#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define PG_PORT 15436

static char pgdir[64], base_url[256], src[1024];

/* Feeds the simulator's chunks into st in batches of 8, with dimensions, as consume.c does. */
static void feed(agg_store_t *st, const fsim_params_t *sp) {
    fsim_t *sim = fsim_new(sp);
    at_ingest_t x;
    at_ingest_init(&x);
    agg_batch_t *b = &x.b;
    const uint8_t *fr;
    size_t len;
    const char *key;
    int64_t off = 0;
    int n = 0;
    b->base_offset = -1;
    while (fsim_next(sim, &fr, &len, &key)) {
        cm_chunk_t *c;
        char err[256];
        CHECKF(cm_chunk_decode(fr, len, &c, err, sizeof err) == 0, "%s", err);
        agg_chunk_meta_t meta;
        memset(&meta, 0, sizeof meta);
        snprintf(meta.node, sizeof meta.node, "%s", n % 2 ? "node-1" : "node-2");
        snprintf(meta.pod, sizeof meta.pod, "ns/pod-1");
        CHECK(at_ingest_chunk(&x, c, &meta) == 0);
        b->next_offset = ++off;
        cm_chunk_free(c);
        if (++n % 8 == 0) {
            CHECK_EQ(agg_store_batch_write(st, "fleetprof.chunks", 0, b), 0);
            agg_batch_clear(b);
            b->base_offset = off;
        }
    }
    if (b->next_offset > b->base_offset)
        CHECK_EQ(agg_store_batch_write(st, "fleetprof.chunks", 0, b), 0);
    at_ingest_free(&x);
    fsim_free(sim);
}

/* The reports' creation times: "created_ns":<digits> -> "created_ns":0 (in place). */
static void mask_created(char *s, size_t *len) {
    const char *pat = "\"created_ns\":";
    char *p = s;
    while ((p = strstr(p, pat))) {
        char *d = p + strlen(pat), *e = d;
        while (*e >= '0' && *e <= '9')
            e++;
        if (e > d) {
            *d = '0';
            memmove(d + 1, e, strlen(e) + 1);
            *len -= (size_t)(e - d - 1);
        }
        p = d;
    }
}

typedef struct {
    int status;
    char *body;
    size_t len;
    char type[64];
} answer_t;

static void call(agg_api_t *api, const char *url, const char *const *kv, size_t n,
                 answer_t *a) {
    const char *keys[32], *vals[32];
    for (size_t i = 0; i < n; i++) {
        keys[i] = kv[2 * i];
        vals[i] = kv[2 * i + 1];
    }
    agg_http_reply_t r = {.status = 200};
    agg_api_call(api, url, keys, vals, n, &r);
    a->status = r.status;
    a->len = r.len;
    a->body = malloc(r.len + 1);
    memcpy(a->body, r.body ? r.body : "", r.len);
    a->body[r.len] = 0;
    snprintf(a->type, sizeof a->type, "%s", r.content_type ? r.content_type : "");
    if (!r.body_static)
        free(r.body);
    free(r.headers);
}

static int compared, differed;
static double t_sq, t_pgq; /* time spent answering, per backend */

/* Calls url with the pairs kv (key, value, ..., NULL) on both APIs and compares the answers. */
static void same(agg_api_t *sq, agg_api_t *pg, const char *url, ...) {
    const char *kv[64];
    size_t n = 0;
    va_list ap;
    va_start(ap, url);
    for (const char *k; n < 62 && (k = va_arg(ap, const char *));) {
        kv[n++] = k;
        kv[n++] = va_arg(ap, const char *);
    }
    va_end(ap);
    answer_t a, b;
    double t0 = at_now();
    call(sq, url, kv, n / 2, &a);
    double t1 = at_now();
    call(pg, url, kv, n / 2, &b);
    double t2 = at_now();
    t_sq += t1 - t0;
    t_pgq += t2 - t1;
    mask_created(a.body, &a.len);
    mask_created(b.body, &b.len);
    char what[512];
    size_t w = (size_t)snprintf(what, sizeof what, "%s", url);
    for (size_t i = 0; i + 1 < n && w < sizeof what; i += 2)
        w += (size_t)snprintf(what + w, sizeof what - w, "%s%s=%s", i ? "&" : "?", kv[i],
                              kv[i + 1]);
    compared++;
    CHECKF(a.status == 200 && a.len > 2, "%s: sqlite %d: %.300s", what, a.status, a.body);
    size_t k = 0;
    while (k < a.len && k < b.len && a.body[k] == b.body[k])
        k++;
    int eq = a.status == b.status && a.len == b.len && k == a.len && !strcmp(a.type, b.type);
    if (!eq) {
        differed++;
        size_t from = k > 80 ? k - 80 : 0;
        printf("DIFFER %s: status %d/%d, %zu/%zu bytes, first difference at byte %zu:\n"
               "  sqlite:   %.200s\n  postgres: %.200s\n",
               what, a.status, b.status, a.len, b.len, k, a.body + (from < a.len ? from : a.len),
               b.body + (from < b.len ? from : b.len));
    }
    free(a.body);
    free(b.body);
}

/* Insights, KPMs and search (issue 33: the kpm table and the heap per bucket) on both. */
static void same_insights(agg_api_t *a1, agg_api_t *a2, const char *svc, const char *v1,
                          const char *from, const char *to) {
    const char *F = "from", *T = "to", *S = "service";
    same(a1, a2, "/api/v1/insights", S, svc, F, from, T, to, NULL);
    same(a1, a2, "/api/v1/insights", S, svc, F, from, T, to, "version", v1, NULL);
    same(a1, a2, "/api/v1/kpm", S, svc, F, from, T, to, NULL);
    same(a1, a2, "/api/v1/kpm", S, svc, F, from, T, to, "by", "process", NULL);
    same(a1, a2, "/api/v1/search", S, svc, F, from, T, to, "kpm", "alloc_rate", "rise", "1",
         NULL);
}

static void test_api_same_on_both_backends(void) {
    char dir[64], sqdir[128], pgrep[128], db_url[320], err[512];
    at_tmpdir(dir, "qb");
    snprintf(sqdir, sizeof sqdir, "%s/sqlite", dir);
    snprintf(pgrep, sizeof pgrep, "%s/pg-reports", dir);
    CHECK(mkdir(sqdir, 0700) == 0 && mkdir(pgrep, 0700) == 0);
    CHECK(at_sh("psql -X -q '%s' -c 'DROP DATABASE IF EXISTS qb' -c 'CREATE DATABASE qb' "
             ">/dev/null", base_url) == 0);
    snprintf(db_url, sizeof db_url, "postgres://fleetprof@127.0.0.1:%d/qb", PG_PORT);

    /* two days ago: both stores route every range to the tiers alike (compaction marks) */
    fsim_params_t sp = {.seed = 29, .services = 3, .versions = 2, .processes = 3,
                        .intervals = 8, .samples = 200, .stacks = 80, .hosts = 2,
                        .start_unix_ns = (uint64_t)(time(NULL) - 2 * 86400) * 1000000000ull,
                        .interval_ns = 60ull * 1000000000ull};
    char path[256];
    agg_store_path(path, sizeof path, sqdir, "fleetprof.chunks", 0);
    agg_store_t *s1 = NULL, *s2 = NULL;
    CHECKF(agg_store_sqlite_open(path, &s1, err, sizeof err) == 0, "%s", err);
    CHECKF(agg_store_pg_open(db_url, &s2, err, sizeof err) == 0, "%s", err);
    double t_feed = at_now();
    feed(s1, &sp);
    double t_pg = at_now();
    feed(s2, &sp);
    printf("fed SQLite in %.1f s, PostgreSQL in %.1f s\n", t_pg - t_feed, at_now() - t_pg);
    agg_store_close(s1);
    agg_store_close(s2);
    /* the statistics autovacuum gathers within a minute of a bulk load (without them the
     * planner takes the freshly filled rollups for empty tables: nested loops of seconds) */
    CHECK(at_sh("psql -X -q '%s' -c 'ANALYZE' >/dev/null", db_url) == 0);

    /* per-deploy reports on both (reports.db in each one's directory) */
    agg_reports_cfg_t r1 = {sqdir, 100, 0, NULL, NULL}, r2 = {pgrep, 100, 0, NULL, db_url};
    double t_rep = at_now();
    int m1 = agg_reports_run_once(&r1);
    double t_rep2 = at_now();
    int m2 = agg_reports_run_once(&r2);
    printf("reports: SQLite %.1f s, PostgreSQL %.1f s\n", t_rep2 - t_rep, at_now() - t_rep2);
    CHECKF(m1 > 0 && m1 == m2, "reports %d / %d", m1, m2);

    agg_api_t *a1 = NULL, *a2 = NULL;
    agg_api_cfg_t c1 = {.store_dir = sqdir, .workers = 2};
    agg_api_cfg_t c2 = {.store_dir = pgrep, .workers = 2, .store = db_url};
    CHECKF(agg_api_new(&c1, &a1, err, sizeof err) == 0, "%s", err);
    CHECKF(agg_api_new(&c2, &a2, err, sizeof err) == 0, "%s", err);

    fsim_t *sim = fsim_new(&sp);
    const char *svc = fsim_service_name(sim, 0), *v0 = fsim_version_name(sim, 0, 0),
               *v1 = fsim_version_name(sim, 0, 1);
    char from[32], to[32], mid[32], vurl[128];
    int64_t t0 = (int64_t)(sp.start_unix_ns / 1000000000ull);
    snprintf(from, sizeof from, "%lld", (long long)t0 - 3600);
    snprintf(to, sizeof to, "%lld", (long long)t0 + 2 * 3600);
    snprintf(mid, sizeof mid, "%lld", (long long)t0 + 6 * 60);
    snprintf(vurl, sizeof vurl, "/api/v1/services/%s/versions", svc);

    /* a span of the fleet (from the SQLite store; the PostgreSQL answer must know it too) */
    char trace[33] = "", span[17] = "";
    {
        agg_qstore_t *qs = NULL;
        agg_span_cost_t *v = NULL;
        size_t n = 0;
        CHECKF(agg_qstore_open(sqdir, &qs, err, sizeof err) == 0, "%s", err);
        CHECK_EQ(agg_qstore_spans(qs, svc, 0, INT64_MAX, CM_EV_CPU, 5, &v, &n), 0);
        CHECK(n > 0);
        for (int k = 0; n && k < 16; k++)
            sprintf(trace + 2 * k, "%02x", v[0].trace_id[k]);
        for (int k = 0; n && k < 8; k++)
            sprintf(span + 2 * k, "%02x", v[0].span_id[k]);
        free(v);
        agg_qstore_close(qs);
    }

    const char *F = "from", *T = "to", *S = "service";
    same(a1, a2, "/api/v1/services", NULL);
    same(a1, a2, vurl, NULL);
    same(a1, a2, "/api/v1/event-types", S, svc, NULL);
    /* profiles: every view and export, types, filters */
    same(a1, a2, "/api/v1/profile", S, svc, F, from, T, to, NULL);
    same(a1, a2, "/api/v1/profile", S, svc, F, from, T, to, "version", v1, NULL);
    same(a1, a2, "/api/v1/profile", S, svc, F, from, T, to, "view", "tree", NULL);
    same(a1, a2, "/api/v1/profile", S, svc, F, from, T, to, "view", "top", "sort", "total",
         NULL);
    same(a1, a2, "/api/v1/profile", S, svc, F, from, T, to, "format", "folded", NULL);
    same(a1, a2, "/api/v1/profile", S, svc, F, from, T, to, "format", "text", NULL);
    same(a1, a2, "/api/v1/profile", S, svc, F, from, T, to, "format", "pprof", NULL);
    same(a1, a2, "/api/v1/profile", S, svc, F, from, T, to, "lines", "1", NULL);
    same(a1, a2, "/api/v1/profile", S, svc, F, from, T, to, "type", "alloc", NULL);
    same(a1, a2, "/api/v1/profile", S, svc, F, from, T, to, "type", "wall", "view", "tree",
         NULL);
    same(a1, a2, "/api/v1/profile", S, svc, F, mid, T, to, NULL); /* unaligned: tiers + fine */
    same(a1, a2, "/api/v1/profile", S, svc, F, from, T, to, "host", "sim-host-1", NULL);
    same(a1, a2, "/api/v1/profile", S, svc, F, from, T, to, "node", "node-1", NULL);
    same(a1, a2, "/api/v1/profile", S, svc, F, from, T, to, "group_by", "host", NULL);
    same(a1, a2, "/api/v1/profile", S, svc, F, from, T, to, "by_module", "1", NULL);
    /* series */
    same(a1, a2, "/api/v1/timeseries", S, svc, F, from, T, to, NULL);
    same(a1, a2, "/api/v1/timeseries", S, svc, F, from, T, to, "host", "sim-host-0", NULL);
    same(a1, a2, "/api/v1/timeseries", S, svc, F, from, T, to, "type", "alloc", NULL);
    /* diffs */
    same(a1, a2, "/api/v1/diff", S, svc, "base", v0, "test", v1, F, from, T, to, NULL);
    same(a1, a2, "/api/v1/diff", S, svc, "base", v0, "test", v1, F, from, T, to, "inclusive",
         "1", NULL);
    same(a1, a2, "/api/v1/diff", S, svc, "base", v0, "test", v1, F, from, T, to, "per",
         "request", NULL);
    same(a1, a2, "/api/v1/diff", S, svc, "base", v0, "test", v1, F, from, T, to, "exact", "1",
         NULL);
    same(a1, a2, "/api/v1/diff", S, svc, "base", v0, "test", v1, F, from, T, to, "format",
         "text", NULL);
    same(a1, a2, "/api/v1/diff", S, svc, "base", v0, "test", v1, F, from, T, to, "host",
         "sim-host-0", NULL);
    same(a1, a2, "/api/v1/diff", S, svc, "base_from", from, "base_to", mid, "test_from", mid,
         "test_to", to, NULL);
    /* on PostgreSQL a diff reads its two sides at once on two handles (a2: workers = 2); on
     * SQLite, and with one worker, one after the other: the same answer */
    agg_api_t *a3 = NULL;
    agg_api_cfg_t c3 = {.store_dir = sqdir, .workers = 1};
    CHECKF(agg_api_new(&c3, &a3, err, sizeof err) == 0, "%s", err);
    same(a3, a2, "/api/v1/diff", S, svc, "base", v0, "test", v1, F, from, T, to, NULL);
    same(a3, a2, "/api/v1/diff", S, svc, "base_from", from, "base_to", mid, "test_from", mid,
         "test_to", to, NULL);
    agg_api_free(a3);
    same_insights(a1, a2, svc, v1, from, to);
    /* spans */
    same(a1, a2, "/api/v1/spans", S, svc, F, from, T, to, NULL);
    same(a1, a2, "/api/v1/spans", S, svc, F, from, T, to, "type", "alloc", NULL);
    same(a1, a2, "/api/v1/span", "trace", trace, NULL);
    same(a1, a2, "/api/v1/span", "span", span, "type", "cpu", NULL);
    same(a1, a2, "/api/v1/span", "trace", trace, "span", span, "type", "cpu", "format",
         "folded", NULL);
    /* requests (named spans with durations): endpoints, an endpoint's profile, slowest and
     * stuck requests */
    char ep[160] = "";
    {
        agg_qstore_t *qs = NULL;
        agg_endpoint_t *e = NULL;
        size_t n = 0;
        CHECKF(agg_qstore_open(sqdir, &qs, err, sizeof err) == 0, "%s", err);
        CHECK_EQ(agg_qstore_endpoints(qs, svc, NULL, 0, INT64_MAX / 4, &e, &n), 0);
        CHECKF(n >= 2, "%zu endpoints", n);
        snprintf(ep, sizeof ep, "%s", n ? e[0].name : "");
        free(e);
        agg_qstore_close(qs);
    }
    same(a1, a2, "/api/v1/endpoints", S, svc, F, from, T, to, NULL);
    same(a1, a2, "/api/v1/endpoint", S, svc, "endpoint", ep, F, from, T, to, NULL);
    same(a1, a2, "/api/v1/endpoint", S, svc, "endpoint", ep, F, from, T, to, "type", "wall", "view",
         "top", NULL);
    same(a1, a2, "/api/v1/requests", S, svc, F, from, T, to, "limit", "50", NULL);
    same(a1, a2, "/api/v1/endpoints", S, svc, F, from, T, to, "version", v1, NULL);
    same(a1, a2, "/api/v1/endpoint", S, svc, "endpoint", ep, "version", v0, F, from, T, to,
         NULL);
    same(a1, a2, "/api/v1/requests", S, svc, "endpoint", ep, "version", v1, F, from, T, to,
         NULL);
    same(a1, a2, "/api/v1/requests", S, svc, "endpoint", ep, F, from, T, to, NULL);
    same(a1, a2, "/api/v1/requests", S, svc, "stuck", "1", "seen", "72h", "min", "1s", NULL);
    /* endpoint= on the profile routes and the diff; the per-endpoint diff of two versions */
    same(a1, a2, "/api/v1/profile", S, svc, "endpoint", ep, F, from, T, to, "view", "tree", NULL);
    same(a1, a2, "/api/v1/profile", S, svc, "endpoint", ep, "version", v1, F, from, T, to,
         "format", "folded", NULL);
    same(a1, a2, "/api/v1/diff", S, svc, "base", v0, "test", v1, "endpoint", ep, F, from, T, to,
         NULL);
    same(a1, a2, "/api/v1/endpoint-diff", S, svc, "base", v0, "test", v1, F, from, T, to, NULL);
    /* reports */
    same(a1, a2, "/api/v1/reports", NULL);
    same(a1, a2, "/api/v1/reports", S, svc, NULL);
    printf("%d answers compared, %d differ; answering took %.2f s on SQLite, %.2f s on "
           "PostgreSQL\n", compared, differed, t_sq, t_pgq);
    CHECK_EQ(differed, 0);
    CHECK(compared >= 30);

    fsim_free(sim);
    agg_api_free(a1);
    agg_api_free(a2);
}

/* The executor (qexec.h) itself, the same statements on both backends: 64-bit values at both
 * ends (ids are uint64 stored two's complement), blobs with zero bytes, text with tabs and
 * newlines, NULLs (0 and NULL), parameter numbers with gaps, reset and step again with the same
 * bindings, a step after the last row, the id table (duplicates folded), a refused statement. */
static void run_qexec(agg_qx_t *x, int64_t *out, char *txt, size_t size) {
    agg_qxst_t *st = NULL;
    size_t k = 0, t = 0;
    CHECK_EQ(agg_qx_prepare(x, "SELECT id, b, s FROM t WHERE id<>?7 ORDER BY id", &st), 0);
    agg_qx_bind_int64(st, 7, 42); /* ?1..?6 never bound: gaps */
    for (int pass = 0; pass < 2; pass++) {
        int r;
        while ((r = agg_qx_step(st)) == 1) {
            size_t n = 0;
            const uint8_t *b = agg_qx_blob(st, 1, &n);
            const char *sv = agg_qx_text(st, 2);
            out[k++] = agg_qx_int64(st, 0);
            out[k++] = (int64_t)n;
            out[k++] = b && n ? b[n - 1] : -1;
            t += (size_t)snprintf(txt + t, size - t, "[%s]", sv ? sv : "(null)");
        }
        CHECK_EQ(r, 0);
        CHECK_EQ(agg_qx_step(st), 0); /* after the last row: still none */
        agg_qx_reset(st);             /* the same bindings again */
    }
    agg_qx_finalize(st);
    /* blob and text parameters, and a NULL column read as an integer */
    const uint8_t blob[3] = {0, 0xff, 0};
    CHECK_EQ(agg_qx_prepare(x, "SELECT count(*), max(s), max(id) FROM t WHERE b=?2 OR s=?3", &st),
             0);
    agg_qx_bind_blob(st, 2, blob, 3);
    agg_qx_bind_text(st, 3, "tab\there\nnewline");
    CHECK_EQ(agg_qx_step(st), 1);
    out[k++] = agg_qx_int64(st, 0);
    t += (size_t)snprintf(txt + t, size - t, "{%s}", agg_qx_text(st, 1));
    out[k++] = agg_qx_int64(st, 2);
    agg_qx_finalize(st);
    CHECK_EQ(agg_qx_prepare(x, "SELECT NULL, count(*) FROM t WHERE id=?1", &st), 0);
    agg_qx_bind_int64(st, 1, INT64_MIN);
    CHECK_EQ(agg_qx_step(st), 1);
    out[k++] = agg_qx_int64(st, 0);
    CHECK(agg_qx_text(st, 0) == NULL);
    out[k++] = agg_qx_int64(st, 1);
    agg_qx_finalize(st);
    /* the id table, joined */
    uint64_t ids[] = {UINT64_MAX, 7, 7, 1ull << 63};
    CHECK_EQ(agg_qx_id_table(x, "qx_ids", ids, 4), 0);
    CHECK_EQ(agg_qx_prepare(x, "SELECT count(*), count(t.id) FROM qx_ids w LEFT JOIN t ON "
                               "t.id=w.id", &st), 0);
    CHECK_EQ(agg_qx_step(st), 1);
    out[k++] = agg_qx_int64(st, 0);
    out[k++] = agg_qx_int64(st, 1);
    agg_qx_finalize(st);
    /* SUM() is numeric on PostgreSQL (read in binary form): small, negative, the two ends of
     * int64; integers read as text */
    CHECK_EQ(agg_qx_prepare(x, "SELECT SUM(id), SUM(-id), max(id) FROM t WHERE id>-2 AND id<100",
                            &st), 0);
    CHECK_EQ(agg_qx_step(st), 1);
    out[k++] = agg_qx_int64(st, 0);
    out[k++] = agg_qx_int64(st, 1);
    t += (size_t)snprintf(txt + t, size - t, "<%s>", agg_qx_text(st, 2));
    agg_qx_finalize(st);
    CHECK_EQ(agg_qx_prepare(x, "SELECT SUM(id) FROM t WHERE id>100 OR id<-100 GROUP BY id "
                               "ORDER BY id", &st), 0);
    while (agg_qx_step(st) == 1) {
        out[k++] = agg_qx_int64(st, 0);
        t += (size_t)snprintf(txt + t, size - t, "<%s>", agg_qx_text(st, 0));
    }
    agg_qx_finalize(st);
    /* a statement the database refuses: an error, not a crash */
    st = NULL;
    int rc = agg_qx_prepare(x, "SELECT nosuchcolumn FROM t", &st);
    if (!rc) /* PostgreSQL prepares lazily: the step fails */
        rc = agg_qx_step(st) < 0 ? CM_EIO : 0;
    agg_qx_finalize(st);
    CHECK(rc < 0);
    out[k] = INT64_MAX; /* end */
}

static void test_executor_same_on_both_backends(void) {
    char dir[64], path[128], err[512], url[320];
    at_tmpdir(dir, "qx");
    snprintf(path, sizeof path, "%s/qx.db", dir);
    sqlite3 *db;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    const char *ddl = "CREATE TABLE t(id bigint PRIMARY KEY, b bytea, s text)";
    CHECK(sqlite3_exec(db, ddl, NULL, NULL, NULL) == SQLITE_OK);
    CHECK(sqlite3_exec(db,
                       "INSERT INTO t VALUES(-9223372036854775808, x'00ff00', 'tab\there\n"
                       "newline'), (9223372036854775807, x'', NULL), (-1, NULL, 'ü'), "
                       "(42, x'01', 'skipped'), (7, x'07', 'seven')",
                       NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    CHECK(at_sh("psql -X -q '%s' -c 'DROP DATABASE IF EXISTS qx' -c 'CREATE DATABASE qx' "
             ">/dev/null", base_url) == 0);
    snprintf(url, sizeof url, "postgres://fleetprof@127.0.0.1:%d/qx", PG_PORT);
    CHECK(at_sh("psql -X -q '%s' -c '%s' -c \"INSERT INTO t VALUES(-9223372036854775808, "
             "decode('00ff00','hex'), E'tab\\there\\nnewline'), (9223372036854775807, "
             "decode('','hex'), NULL), (-1, NULL, 'ü'), (42, decode('01','hex'), 'skipped'), "
             "(7, decode('07','hex'), 'seven')\" >/dev/null", url, ddl) == 0);
    int64_t a[64], b[64];
    char ta[512], tb[512];
    agg_qx_t *x1 = NULL, *x2 = NULL;
    CHECKF(agg_qx_open(path, &x1, err, sizeof err) == 0, "%s", err);
    CHECKF(agg_qx_open(url, &x2, err, sizeof err) == 0, "%s", err);
    CHECK(!strcmp(agg_qx_backend(x1), "sqlite") && !strcmp(agg_qx_backend(x2), "postgres"));
    run_qexec(x1, a, ta, sizeof ta);
    run_qexec(x2, b, tb, sizeof tb);
    agg_qx_close(x1);
    agg_qx_close(x2);
    /* the values themselves, then SQLite == PostgreSQL */
    static const int64_t want[] = {INT64_MIN, 3, 0, -1, 0, -1, 7, 1, 7, INT64_MAX, 0, -1};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        CHECKF(a[i] == want[i] && a[i + 12] == want[i], "value %zu: %lld", i, (long long)a[i]);
    CHECKF(!strcmp(ta, "[tab\there\nnewline][ü][seven][(null)][tab\there\nnewline][ü][seven]"
                       "[(null)]{tab\there\nnewline}<42><-9223372036854775808>"
                       "<9223372036854775807>"),
           "%s", ta);
    CHECK_EQ(a[24], 1);         /* the blob or the text matched one row */
    CHECK_EQ(a[25], INT64_MIN); /* its id */
    CHECK_EQ(a[26], 0);         /* NULL read as an integer */
    CHECK_EQ(a[27], 1);         /* INT64_MIN bound and found */
    CHECK_EQ(a[28], 3);         /* id table: 4 ids, one duplicate */
    CHECK_EQ(a[29], 3);         /* UINT64_MAX (-1), 7 and 1 << 63 (INT64_MIN) are all in t */
    CHECK_EQ(a[30], 48);        /* SUM() of -1, 42, 7 */
    CHECK_EQ(a[31], -48);
    CHECK_EQ(a[32], INT64_MIN); /* SUM() of one row, each end */
    CHECK_EQ(a[33], INT64_MAX);
    for (int i = 0; a[i] != INT64_MAX || b[i] != INT64_MAX; i++)
        CHECKF(a[i] == b[i], "value %d: sqlite %lld, postgres %lld", i, (long long)a[i],
               (long long)b[i]);
    CHECKF(!strcmp(ta, tb), "sqlite %s, postgres %s", ta, tb);
}

static const tr_test_t tests[] = {
    {"executor_same_on_both_backends", test_executor_same_on_both_backends},
    {"api_same_on_both_backends", test_api_same_on_both_backends},
    {0},
};

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    cm_log_set_level(CM_LOG_WARN);
    const char *s = getenv("FLEETPROF_SRC");
    snprintf(src, sizeof src, "%s", s ? s : ".");
    snprintf(pgdir, sizeof pgdir, "/tmp/fp-pgqb-%d", (int)getpid());
    if (at_pg_start(PG_PORT, pgdir, base_url, sizeof base_url)) {
        printf("1 failed\n");
        return 1;
    }
    if (getenv("FP_QB_SLOWLOG")) /* debugging: log the slow statements, keep the cluster */
        at_sh("psql -X -q '%s' -c 'ALTER SYSTEM SET log_min_duration_statement = 50' "
           "-c 'SELECT pg_reload_conf()' >/dev/null", base_url);
    int rc = tr_main(tests, argc, argv);
    if (!getenv("FP_QB_SLOWLOG"))
        at_sh("%s/deploy/postgres/stop.sh %s --remove 2>/dev/null", src, pgdir);
    return rc;
}
