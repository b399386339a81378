/* Endpoints and requests end to end, without Kafka: deploy/demo/demo-service runs under the
 * agent (chunks written to files every second), each chunk is loaded into a SQLite store as
 * the aggregator does (intern, rollup, batch write), and the query store answers:
 *   demo_endpoints   every endpoint's call count equals the requests the demo served, its p50
 *                    and p99 are within 2 % of the latencies the demo measured itself, the
 *                    planted slow endpoint ("GET /report", 50 ms in build_report) ranks first
 *                    by p99 and its profile holds build_report;
 *   (same run)       the stuck request ("GET /export", never ended) is listed as stuck by the
 *                    first chunk cut after it has run for the threshold (2 s here: one chunk
 *                    interval is 1 s), and never among the ended requests.
 *   otel_ids         a Python program under the real OpenTelemetry SDK (PyPI opentelemetry-sdk,
 *                    venv made by deploy/otel-venv.sh under ~/.cache/fleetprof) passes each span
 *                    it starts to the agent (ctypes, fleetprof_span_begin_ids/_end): the (trace
 *                    id, span id, name) fleetprof recorded are exactly those the SDK exported.
 * Labels: api, query (no services); otel_ids runs as test-endpoints-otel (label otel: the
 * first run downloads the SDK from PyPI). */
#include "dims.h"
#include "intern.h"
#include "query_store.h"
#include "rollup.h"
#include "store.h"
#include "support/runner.h"

#include "cm/chunk.h"
#include "cm/error.h"
#include "cm/file.h"

#include "profile.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The demo's own figures for endpoint ep, from its output ("endpoint "E" calls=... "). */
static int demo_figures(const char *out, const char *ep, uint64_t *calls, uint64_t *p50,
                        uint64_t *p99) {
    char key[128];
    snprintf(key, sizeof key, "endpoint \"%s\" ", ep);
    const char *l = strstr(out, key);
    if (!l)
        return -1;
    unsigned long long c, a, b;
    if (sscanf(l + strlen(key), "calls=%llu p50_ns=%llu p99_ns=%llu", &c, &a, &b) != 3)
        return -1;
    *calls = c;
    *p50 = a;
    *p99 = b;
    return 0;
}

static int has_function(const agg_profile_t *p, const char *fn) {
    for (uint32_t i = 0; i < p->n_strings; i++)
        if (strstr(p->strings[i], fn))
            return 1;
    return 0;
}

static void test_demo_endpoints(void) {
    const char *b = getenv("FLEETPROF_BUILD");
    CHECKF(b != NULL, "FLEETPROF_BUILD not set (run through ctest)");
    char dir[] = "/tmp/fp-endpoints-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char chunks[128], store[128], outf[128], cmd[2048];
    snprintf(chunks, sizeof chunks, "%s/chunks", dir);
    snprintf(store, sizeof store, "%s/store", dir);
    snprintf(outf, sizeof outf, "%s/demo.out", dir);
    CHECK(mkdir(chunks, 0700) == 0 && mkdir(store, 0700) == 0);
    snprintf(cmd, sizeof cmd,
             "FLEETPROF_OUTPUT=%s FLEETPROF_INTERVAL=1 FLEETPROF_SERVICE=demo "
             "LD_PRELOAD=%s/agent/libfleetprof.so %s/deploy/demo/demo-service --seconds 6 "
             "--rate 400 --slow-report --stuck > %s",
             chunks, b, b, outf);
    CHECKF(system(cmd) == 0, "%s", cmd);
    char out[4096] = "";
    CHECK(cm_read_file(outf, out, sizeof out) > 0);
    printf("%s", out);

    /* the chunks in the order they were cut (file names carry the sequence) */
    DIR *dd = opendir(chunks);
    CHECK(dd != NULL);
    char *names[256];
    size_t nn = 0;
    for (struct dirent *e; (e = readdir(dd)) && nn < 256;)
        if (e->d_name[0] != '.')
            names[nn++] = strdup(e->d_name);
    closedir(dd);
    qsort(names, nn, sizeof *names, cmp_str);
    CHECKF(nn >= 5, "%zu chunk files", nn);

    char path[256], err[512];
    agg_store_path(path, sizeof path, store, "fleetprof.chunks", 0);
    agg_store_t *st = NULL;
    CHECKF(agg_store_sqlite_open(path, &st, err, sizeof err) == 0, "%s", err);
    agg_qstore_t *qs = NULL;
    agg_intern_t in;
    memset(&in, 0, sizeof in);
    agg_rollup_t r;
    agg_rollup_cfg_t rc = {10, 3600, 1, 1, 60};
    agg_rollup_init(&r, &rc);
    agg_dims_t dm;
    agg_dims_init(&dm, 3600, 0, 0);
    agg_batch_t bt;
    agg_batch_init(&bt);
    int64_t stuck_start = 0, seen_after = -1, stuck_ended = 0;
    const int64_t threshold = 2000000000ll;
    for (size_t i = 0; i < nn; i++) {
        snprintf(path, sizeof path, "%s/%s", chunks, names[i]);
        FILE *f = fopen(path, "rb");
        CHECK(f != NULL);
        uint8_t *buf = malloc(4 << 20);
        size_t len = fread(buf, 1, 4 << 20, f);
        fclose(f);
        cm_chunk_t *c;
        CHECKF(cm_chunk_decode(buf, len, &c, err, sizeof err) == 0, "%s: %s", path, err);
        free(buf);
        agg_chunk_ids_t ids;
        agg_chunk_meta_t meta;
        memset(&meta, 0, sizeof meta);
        bt.base_offset = (int64_t)i - 1;
        CHECK(agg_intern_chunk(&in, &bt, c, &ids) == 0);
        CHECK(agg_dims_chunk(&dm, &in, &bt, c, &meta, &ids) == 0);
        CHECK(agg_rollup_chunk(&r, &bt, c, &ids) == 0);
        bt.next_offset = (int64_t)i;
        CHECK_EQ(agg_store_batch_write(st, "fleetprof.chunks", 0, &bt), 0);
        agg_batch_clear(&bt);
        int64_t cut = (int64_t)c->header.end_unix_ns;
        cm_chunk_free(c);
        /* stuck now: not ended, seen active at this cut, running for the threshold */
        if (!qs)
            CHECKF(agg_qstore_open(store, &qs, err, sizeof err) == 0, "%s", err);
        agg_reqq_t q = {.service = "demo", .stuck = 1, .from_ns = cut, .min_ns = threshold};
        agg_request_t *v;
        size_t n;
        CHECK_EQ(agg_qstore_requests(qs, &q, &v, &n), 0);
        for (size_t k = 0; k < n; k++)
            CHECKF(!strcmp(v[k].name, "GET /export"), "stuck: %s", v[k].name);
        agg_reqq_t q0 = {.service = "demo", .stuck = 1, .from_ns = cut, .min_ns = 0};
        agg_request_t *v0;
        size_t n0;
        CHECK_EQ(agg_qstore_requests(qs, &q0, &v0, &n0), 0);
        for (size_t k = 0; k < n0; k++)
            if (!strcmp(v0[k].name, "GET /export"))
                stuck_start = v0[k].start_ns;
        if (n && seen_after < 0) {
            seen_after = cut - (stuck_start + threshold);
            printf("# stuck request listed at the cut %.3f s after it passed the threshold\n",
                   (double)seen_after / 1e9);
        }
        if (stuck_start && !n && seen_after < 0 && cut - stuck_start >= threshold)
            seen_after = -2; /* the cut after the threshold did not list it */
        free(v);
        free(v0);
        free(names[i]);
    }
    CHECKF(seen_after >= 0 && seen_after < 1000000000ll,
           "stuck request not listed by the first cut past the threshold (%lld)",
           (long long)seen_after);

    agg_endpoint_t *e;
    size_t ne;
    CHECK_EQ(agg_qstore_endpoints(qs, "demo", NULL, 0, INT64_MAX / 4, &e, &ne), 0);
    static const char *const eps[] = {"POST /checkout", "GET /search", "GET /report"};
    for (size_t k = 0; k < ne; k++) {
        printf("# %-16s calls %6llu p50 %10lld p99 %10lld cpu/call %.0f ns share %.2f\n",
               e[k].name, (unsigned long long)e[k].calls, (long long)e[k].p50_ns,
               (long long)e[k].p99_ns, e[k].cost_per_call[CM_EV_CPU], e[k].cpu_share);
        stuck_ended += !strcmp(e[k].name, "GET /export");
    }
    CHECKF(stuck_ended == 0, "the stuck request counted as ended");
    CHECKF(ne == 3, "%zu endpoints", ne);
    CHECKF(ne && !strcmp(e[0].name, "GET /report"), "first by p99: %s", ne ? e[0].name : "");
    for (size_t j = 0; j < 3; j++) {
        uint64_t calls, p50, p99;
        CHECKF(demo_figures(out, eps[j], &calls, &p50, &p99) == 0, "%s: %s", eps[j], out);
        const agg_endpoint_t *x = NULL;
        for (size_t k = 0; k < ne; k++)
            if (!strcmp(e[k].name, eps[j]))
                x = &e[k];
        CHECKF(x != NULL, "no endpoint %s", eps[j]);
        CHECKF(x->calls == calls, "%s: %llu calls stored, the demo served %llu", eps[j],
               (unsigned long long)x->calls, (unsigned long long)calls);
        double d50 = fabs((double)x->p50_ns - (double)p50) / (double)p50;
        double d99 = fabs((double)x->p99_ns - (double)p99) / (double)p99;
        printf("# %s: p50 %lld vs demo %llu (%.3f %%), p99 %lld vs %llu (%.3f %%)\n", eps[j],
               (long long)x->p50_ns, (unsigned long long)p50, 100 * d50, (long long)x->p99_ns,
               (unsigned long long)p99, 100 * d99);
        CHECKF(d50 <= 0.02 && d99 <= 0.02, "%s: p50 off by %.2f %%, p99 by %.2f %%", eps[j],
               100 * d50, 100 * d99);
    }
    free(e);
    agg_profile_t *p = NULL;
    int found = 0;
    CHECK_EQ(agg_qstore_endpoint_profile(qs, "demo", NULL, "GET /report", 0, INT64_MAX / 4,
                                         CM_EV_CPU, &p, &found),
             0);
    CHECK(found && p->n_rows > 0);
    CHECKF(has_function(p, "build_report"), "build_report not in the endpoint's profile");
    agg_profile_free(p);
    agg_qstore_close(qs);
    agg_batch_free(&bt);
    agg_rollup_free(&r);
    agg_dims_free(&dm);
    agg_intern_free(&in);
    agg_store_close(st);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

static int cmp_line(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_otel_ids(void) {
    const char *b = getenv("FLEETPROF_BUILD"), *src = getenv("FLEETPROF_SRC"),
               *home = getenv("HOME"), *cache = getenv("FLEETPROF_CACHE");
    CHECKF(b && src, "FLEETPROF_BUILD/SRC not set (run through ctest)");
    char venv[512], cmd[4096], dir[] = "/tmp/fp-otel-XXXXXX";
    snprintf(venv, sizeof venv, "%s/otelvenv", cache ? cache : "");
    if (!cache)
        snprintf(venv, sizeof venv, "%s/.cache/fleetprof/otelvenv", home ? home : "/tmp");
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\" && '%s/deploy/otel-venv.sh' '%s'",
             venv, src, venv);
    CHECKF(system(cmd) == 0, "%s", cmd);
    CHECK(mkdtemp(dir) != NULL);
    snprintf(cmd, sizeof cmd,
             "FLEETPROF_OUTPUT=%s FLEETPROF_SERVICE=otel LD_PRELOAD=%s/agent/libfleetprof.so "
             "'%s/bin/python' '%s/tests/otel/otel-spans.py' %s/agent/libfleetprof.so "
             "%s/exported.txt 60",
             dir, b, venv, src, b, dir);
    CHECKF(system(cmd) == 0, "%s", cmd);
    /* what the SDK exported */
    char path[600], *want[512], *got[512];
    size_t nw = 0, ng = 0;
    snprintf(path, sizeof path, "%s/exported.txt", dir);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    char line[256];
    while (nw < 512 && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        want[nw++] = strdup(line);
    }
    fclose(f);
    /* what fleetprof recorded: the ended spans of every chunk */
    DIR *dd = opendir(dir);
    CHECK(dd != NULL);
    for (struct dirent *e; (e = readdir(dd));) {
        if (!strstr(e->d_name, ".fpc"))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *cf = fopen(path, "rb");
        CHECK(cf != NULL);
        uint8_t *buf = malloc(4 << 20);
        size_t len = fread(buf, 1, 4 << 20, cf);
        fclose(cf);
        cm_chunk_t *c;
        char err[256];
        CHECKF(cm_chunk_decode(buf, len, &c, err, sizeof err) == 0, "%s", err);
        free(buf);
        for (uint32_t i = 0; i < c->spans.n && ng < 512; i++) {
            if (CM_COL(&c->spans, flags, i) & CM_SPF_ACTIVE)
                continue;
            const uint8_t *id = c->dict.contexts + (size_t)c->spans.context[i] * CM_CONTEXT_SIZE;
            char tr[33], sp[17];
            cm_hex(id, 16, tr);
            cm_hex(id + 16, 8, sp);
            snprintf(line, sizeof line, "%s %s %s", tr, sp, c->dict.strings[c->spans.name[i]].ptr);
            got[ng++] = strdup(line);
        }
        cm_chunk_free(c);
    }
    closedir(dd);
    printf("# the SDK exported %zu spans, fleetprof recorded %zu\n", nw, ng);
    CHECKF(nw == 120, "%zu spans exported (60 requests with a child each)", nw);
    CHECKF(ng == nw, "fleetprof recorded %zu spans, the SDK exported %zu", ng, nw);
    qsort(want, nw, sizeof *want, cmp_line);
    qsort(got, ng, sizeof *got, cmp_line);
    for (size_t i = 0; i < nw && i < ng; i++)
        CHECKF(!strcmp(want[i], got[i]), "exported '%s', recorded '%s'", want[i], got[i]);
    for (size_t i = 0; i < nw; i++)
        free(want[i]);
    for (size_t i = 0; i < ng; i++)
        free(got[i]);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

static const tr_test_t tests[] = {
    {"demo_endpoints", test_demo_endpoints},
    {"otel_ids", test_otel_ids},
    {0, 0},
};
TR_MAIN(tests)
