/* Endpoints and requests end to end, without Kafka: deploy/demo/demo-service runs under the
 * agent (chunks written to files every second), each chunk is loaded into a SQLite store as
 * the aggregator does (intern, rollup, batch write), and the query store answers:
 *   demo_endpoints   every endpoint's call count equals the requests the demo served, its p50
 *                    and p99 are within 2 % of the latencies the demo measured itself (of the
 *                    range the demo's clock, read on both sides of each span call, puts them
 *                    in: one timer read just before the calls, as a middleware's, disagrees
 *                    with the spans on a request stopped inside a call, ~1 in 10^4 under load,
 *                    and such a request in the tail moved p99 by up to 10 %), the
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
#include "aggtest.h"
#include "api.h"
#include "dims.h"
#include "http.h"
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
#include <jansson.h>
#include <stdarg.h>
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

/* The demo's own figures of an endpoint: its timer's p50 and p99, and the ranges that hold the
 * p50 and p99 of the spans' own durations (the clock read on both sides of each span call:
 * deploy/demo/demo-service.c). */
typedef struct {
    unsigned long long calls, p50, p99, r50[2], r99[2];
} demo_fig_t;

/* The demo's figures for endpoint ep, from its output ("endpoint "E" calls=... "). */
static int demo_figures(const char *out, const char *ep, demo_fig_t *f) {
    char key[128];
    snprintf(key, sizeof key, "endpoint \"%s\" ", ep);
    const char *l = strstr(out, key);
    if (!l)
        return -1;
    return sscanf(l + strlen(key),
                  "calls=%llu p50_ns=%llu p99_ns=%llu p50_range_ns=%llu-%llu p99_range_ns=%llu-%llu",
                  &f->calls, &f->p50, &f->p99, &f->r50[0], &f->r50[1], &f->r99[0],
                  &f->r99[1]) == 7 ? 0 : -1;
}

/* How far v lies outside [r[0], r[1]], relative to the nearer end (0 inside). */
static double outside(int64_t v, const unsigned long long r[2]) {
    if (v < (int64_t)r[0])
        return ((double)r[0] - (double)v) / (double)r[0];
    return v > (int64_t)r[1] ? ((double)v - (double)r[1]) / (double)r[1] : 0;
}

static int has_function(const agg_profile_t *p, const char *fn) {
    for (uint32_t i = 0; i < p->n_strings; i++)
        if (strstr(p->strings[i], fn))
            return 1;
    return 0;
}

/* A SQLite store fed chunk files as the aggregator feeds it (aggtest's at_ingest). */
typedef struct {
    agg_store_t *st;
    at_ingest_t ing;
} loader_t;

static void loader_open(loader_t *l, const char *store) {
    char path[256], err[512];
    memset(l, 0, sizeof *l);
    agg_store_path(path, sizeof path, store, "fleetprof.chunks", 0);
    CHECKF(agg_store_sqlite_open(path, &l->st, err, sizeof err) == 0, "%s", err);
    at_ingest_init(&l->ing);
}

/* Loads the chunk file at path as message i of the partition; returns the chunk's cut. */
static int64_t loader_add(loader_t *l, const char *path, int64_t i) {
    char err[512];
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    uint8_t *buf = malloc(4 << 20);
    size_t len = fread(buf, 1, 4 << 20, f);
    fclose(f);
    cm_chunk_t *c;
    CHECKF(cm_chunk_decode(buf, len, &c, err, sizeof err) == 0, "%s: %s", path, err);
    free(buf);
    agg_chunk_meta_t meta;
    memset(&meta, 0, sizeof meta);
    l->ing.b.base_offset = i - 1;
    CHECK(at_ingest_chunk(&l->ing, c, &meta) == 0);
    l->ing.b.next_offset = i;
    CHECK_EQ(agg_store_batch_write(l->st, "fleetprof.chunks", 0, &l->ing.b), 0);
    agg_batch_clear(&l->ing.b);
    int64_t cut = (int64_t)c->header.end_unix_ns;
    cm_chunk_free(c);
    return cut;
}

static void loader_close(loader_t *l) {
    at_ingest_free(&l->ing);
    agg_store_close(l->st);
}

/* The chunk files of dir (at most max, malloc'ed names) in the order they were cut: the file
 * names carry the process and its sequence. */
static size_t list_chunks(const char *dir, char **names, size_t max) {
    DIR *dd = opendir(dir);
    CHECK(dd != NULL);
    size_t nn = 0;
    for (struct dirent *e; (e = readdir(dd)) && nn < max;)
        if (e->d_name[0] != '.')
            names[nn++] = strdup(e->d_name);
    closedir(dd);
    qsort(names, nn, sizeof *names, cmp_str);
    return nn;
}

/* A new directory from the template dir (XXXXXX) with chunks/ and store/ in it (128 bytes). */
static void make_dirs(char *dir, char *chunks, char *store) {
    CHECK(mkdtemp(dir) != NULL);
    snprintf(chunks, 128, "%s/chunks", dir);
    snprintf(store, 128, "%s/store", dir);
    CHECK(mkdir(chunks, 0700) == 0 && mkdir(store, 0700) == 0);
}

static void test_demo_endpoints(void) {
    const char *b = getenv("FLEETPROF_BUILD");
    CHECKF(b != NULL, "FLEETPROF_BUILD not set (run through ctest)");
    char dir[] = "/tmp/fp-endpoints-XXXXXX", chunks[128], store[128], outf[128], cmd[2048];
    make_dirs(dir, chunks, store);
    snprintf(outf, sizeof outf, "%s/demo.out", dir);
    /* FP_STUCK_SCALE=N (a manual run): N times the run, the interval and the threshold, e.g.
     * 30: a 180 s run, 30 s chunks, stuck for 60 s */
    const char *sc = getenv("FP_STUCK_SCALE");
    int scale = sc && atoi(sc) > 1 ? atoi(sc) : 1;
    snprintf(cmd, sizeof cmd,
             "FLEETPROF_OUTPUT=%s FLEETPROF_INTERVAL=%d FLEETPROF_SERVICE=demo "
             "LD_PRELOAD=%s/agent/libfleetprof.so %s/deploy/demo/demo-service --seconds %d "
             "--rate %d --slow-report --stuck > %s",
             chunks, scale, b, b, 6 * scale, scale > 1 ? 50 : 400, outf);
    CHECKF(system(cmd) == 0, "%s", cmd);
    char out[4096] = "";
    CHECK(cm_read_file(outf, out, sizeof out) > 0);
    printf("%s", out);

    char *names[256];
    size_t nn = list_chunks(chunks, names, 256);
    CHECKF(nn >= 5, "%zu chunk files", nn);

    char path[256], err[512];
    loader_t ld;
    loader_open(&ld, store);
    agg_qstore_t *qs = NULL;
    int64_t stuck_start = 0, seen_after = -1, stuck_ended = 0;
    const int64_t threshold = 2000000000ll * scale;
    for (size_t i = 0; i < nn; i++) {
        snprintf(path, sizeof path, "%s/%s", chunks, names[i]);
        int64_t cut = loader_add(&ld, path, (int64_t)i);
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
    CHECKF(seen_after >= 0 && seen_after < 1000000000ll * scale,
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
        demo_fig_t f;
        CHECKF(demo_figures(out, eps[j], &f) == 0, "%s: %s", eps[j], out);
        const agg_endpoint_t *x = NULL;
        for (size_t k = 0; k < ne; k++)
            if (!strcmp(e[k].name, eps[j]))
                x = &e[k];
        CHECKF(x != NULL, "no endpoint %s", eps[j]);
        CHECKF(x->calls == f.calls, "%s: %llu calls stored, the demo served %llu", eps[j],
               (unsigned long long)x->calls, f.calls);
        double d50 = outside(x->p50_ns, f.r50), d99 = outside(x->p99_ns, f.r99);
        printf("# %s: p50 %lld vs demo %llu-%llu (timer %llu; %.3f %% outside), p99 %lld vs "
               "%llu-%llu (timer %llu; %.3f %% outside)\n", eps[j], (long long)x->p50_ns,
               f.r50[0], f.r50[1], f.p50, 100 * d50, (long long)x->p99_ns, f.r99[0], f.r99[1],
               f.p99, 100 * d99);
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
    loader_close(&ld);
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


/* ---- endpoint_diff: two versions of the demo side by side ---- */

/* GET url?kv... (key, value pairs, NULL-terminated) through the API; returns the status and
 * the body (malloc'ed text) in *body. */
static int api_get(agg_api_t *api, const char *url, char **body, ...) {
    const char *keys[16], *vals[16];
    size_t n = 0;
    va_list ap;
    va_start(ap, body);
    for (const char *k; n < 16 && (k = va_arg(ap, const char *));) {
        keys[n] = k;
        vals[n++] = va_arg(ap, const char *);
    }
    va_end(ap);
    agg_http_reply_t r = {.status = 200};
    agg_api_call(api, url, keys, vals, n, &r);
    *body = malloc(r.len + 1);
    CHECK(*body != NULL);
    memcpy(*body, r.body ? r.body : "", r.len);
    (*body)[r.len] = '\0';
    if (r.status != 200)
        printf("# %s: %d %s\n", url, r.status, *body);
    if (!r.body_static)
        free(r.body);
    free(r.headers);
    return r.status;
}

/* The endpoint diff's answer: each endpoint printed; only "POST /checkout" flagged (its
 * latency a regression). */
static void check_endpoint_diff(agg_api_t *api) {
    char *t;
    CHECK_EQ(api_get(api, "/api/v1/endpoint-diff", &t, "service", "demo", "base", "v1", "test",
                     "v2", NULL),
             200);
    json_t *o = json_loads(t, 0, NULL);
    CHECK(o != NULL);
    free(t);
    json_t *eps = json_object_get(o, "endpoints"), *e;
    size_t i;
    int checkout = 0;
    json_array_foreach(eps, i, e) {
        const char *nm = json_string_value(json_object_get(e, "name"));
        json_t *ts = json_object_get(e, "tests");
        printf("# %-15s flagged %d calls %lld/%lld", nm,
               json_is_true(json_object_get(e, "flagged")),
               (long long)json_integer_value(json_object_get(json_object_get(e, "calls"), "base")),
               (long long)json_integer_value(json_object_get(json_object_get(e, "calls"), "test")));
        static const char *const tn[] = {"latency", "cpu", "wall", "alloc"};
        for (int k = 0; k < 4; k++) {
            json_t *x = json_object_get(ts, tn[k]);
            printf(" %s %+.1f%% q %.2g", tn[k], 100 * json_real_value(json_object_get(x, "change")),
                   json_real_value(json_object_get(x, "q")));
        }
        printf("\n");
        int is_checkout = !strcmp(nm, "POST /checkout");
        checkout += is_checkout;
        CHECKF(json_is_true(json_object_get(e, "flagged")) == is_checkout, "%s flagged: %d", nm,
               json_is_true(json_object_get(e, "flagged")));
        const char *lat = json_string_value(json_object_get(json_object_get(ts, "latency"), "class"));
        if (is_checkout)
            CHECKF(lat && !strcmp(lat, "regression"), "POST /checkout's latency: %s", lat);
    }
    CHECKF(checkout == 1 && json_array_size(eps) == 2, "%zu endpoints", json_array_size(eps));
    CHECK_EQ(json_integer_value(json_object_get(o, "flagged")), 1);
    json_decref(o);
}

/* Whether the diff (JSON text t) classes function fn as cls. */
static int diff_class(const char *t, const char *fn, const char *cls) {
    json_t *o = json_loads(t, 0, NULL), *e;
    size_t i;
    int found = 0;
    json_array_foreach(json_object_get(o, "entries"), i, e) {
        const char *n = json_string_value(json_object_get(e, "name")),
                   *c = json_string_value(json_object_get(e, "class"));
        if (n && !strcmp(n, fn))
            printf("# diff: %s %s, base %.0f test %.0f, q %.2g\n", fn, c,
                   json_number_value(json_object_get(e, "base_self")),
                   json_number_value(json_object_get(e, "test_self")),
                   json_number_value(json_object_get(e, "q")));
        found |= n && c && !strcmp(n, fn) && !strcmp(c, cls);
    }
    printf("# diff: %s %s%s\n", fn, found ? "" : "not ", cls);
    json_decref(o);
    return found;
}

/* The endpoint filter: each view (tree: the flame graph's), the exports, the diff. */
static void check_endpoint_filter(agg_api_t *api) {
    char *t;
    static const char *const views[] = {"top", "tree", "callers"};
    for (size_t k = 0; k < 3; k++) {
        CHECK_EQ(api_get(api, "/api/v1/profile", &t, "service", "demo", "version", "v2",
                         "endpoint", "POST /checkout", "view", views[k], "function",
                         "handle_checkout", NULL),
                 200);
        CHECKF(strstr(t, "price_cart") && strstr(t, "apply_discount_rules") &&
                   !strstr(t, "scan_index"),
               "view %s of POST /checkout: %.300s", views[k], t);
        free(t);
        CHECK_EQ(api_get(api, "/api/v1/profile", &t, "service", "demo", "endpoint",
                         "GET /search", "view", views[k], "function", "handle_search", NULL),
                 200);
        CHECKF(strstr(t, "scan_index") && !strstr(t, "price_cart"), "view %s of GET /search",
               views[k]);
        free(t);
    }
    CHECK_EQ(api_get(api, "/api/v1/profile", &t, "service", "demo", "endpoint", "GET /search",
                     "format", "folded", NULL),
             200);
    CHECKF(strstr(t, "scan_index") && !strstr(t, "price_cart"), "folded export of GET /search");
    free(t);
    CHECK_EQ(api_get(api, "/api/v1/profile", &t, "service", "demo", "endpoint", "GET /search",
                     "format", "pprof", NULL),
             200);
    free(t);
    CHECK_EQ(api_get(api, "/api/v1/profile", &t, "service", "demo", "endpoint", "GET /nothing",
                     NULL),
             404);
    free(t);
    CHECK_EQ(api_get(api, "/api/v1/profile", &t, "service", "demo", "endpoint", "GET /search",
                     "host", "x", NULL),
             400);
    free(t);
    CHECK_EQ(api_get(api, "/api/v1/diff", &t, "service", "demo", "base", "v1", "test", "v2",
                     "endpoint", "POST /checkout", NULL),
             200);
    CHECKF(diff_class(t, "apply_discount_rules", "regression"),
           "apply_discount_rules not a regression of POST /checkout: %.400s", t);
    free(t);
    CHECK_EQ(api_get(api, "/api/v1/diff", &t, "service", "demo", "base", "v1", "test", "v2",
                     "endpoint", "GET /search", NULL),
             200);
    CHECKF(!strstr(t, "\"regression\"") && !strstr(t, "\"improvement\""),
           "a finding in GET /search, which v2 did not change: %.400s", t);
    free(t);
}

/* A request's page (/span with its trace and span ids) for requests with samples and without
 * (most of the demo's: ~0.2 ms each, 1,500 a second, against ~200 CPU samples a second): each
 * answers 200 with the request's duration as listed; its types are empty exactly when the
 * request's listed cost is zero in every type; with service= another service's, a 404. An
 * unknown span stays a 404. */
static void check_request_pages(agg_api_t *api) {
    char *t;
    CHECK_EQ(api_get(api, "/api/v1/requests", &t, "service", "demo", "endpoint", "GET /search",
                     "limit", "10000", NULL),
             200);
    json_t *o = json_loads(t, 0, NULL), *q;
    free(t);
    size_t i, bare = 0, sampled = 0;
    json_array_foreach(json_object_get(o, "requests"), i, q) {
        int none = 1;
        const char *k;
        json_t *v;
        json_object_foreach(json_object_get(q, "cost"), k, v) none &= !json_integer_value(v);
        size_t *seen = none ? &bare : &sampled;
        if (*seen >= 5)
            continue;
        (*seen)++;
        const char *tr = json_string_value(json_object_get(q, "trace_id")),
                   *sp = json_string_value(json_object_get(q, "span_id"));
        CHECK_EQ(api_get(api, "/api/v1/span", &t, "trace", tr, "span", sp, NULL), 200);
        json_t *p = json_loads(t, 0, NULL), *rq = json_object_get(p, "request");
        CHECKF(rq && json_integer_value(json_object_get(rq, "duration_ns")) ==
                         json_integer_value(json_object_get(q, "duration_ns")),
               "request %s/%s: %.300s", tr, sp, t);
        CHECKF((json_object_size(json_object_get(p, "types")) == 0) == none,
               "request %s/%s (%s samples): %.300s", tr, sp, none ? "no" : "with", t);
        json_decref(p);
        free(t);
        CHECK_EQ(api_get(api, "/api/v1/span", &t, "trace", tr, "span", sp, "format", "text",
                         NULL),
                 200);
        CHECKF(!none || strstr(t, "no samples landed"), "text: %s", t);
        free(t);
        /* service= restricts: the request is demo's, not another service's */
        CHECK_EQ(api_get(api, "/api/v1/span", &t, "trace", tr, "span", sp, "service", "demo",
                         NULL),
                 200);
        free(t);
        CHECK_EQ(api_get(api, "/api/v1/span", &t, "trace", tr, "span", sp, "service", "other",
                         NULL),
                 404);
        free(t);
    }
    printf("# request pages: %zu without samples, %zu with, of %zu requests\n", bare, sampled,
           json_array_size(json_object_get(o, "requests")));
    CHECKF(bare == 5 && sampled == 5, "%zu requests without samples, %zu with", bare, sampled);
    json_decref(o);
    CHECK_EQ(api_get(api, "/api/v1/span", &t, "trace", "0123456789abcdef0123456789abcdef", "span",
                     "0123456789abcdef", NULL),
             404);
    free(t);
}

/* The CLI's forms of the same, through the HTTP server on a free port: `endpoint-diff` marks
 * POST /checkout's line (REG) and no other; `top --endpoint` and `diff --endpoint`. */
static void check_cli(agg_api_t *api) {
    const char *b = getenv("FLEETPROF_BUILD");
    char err[512], url[64], cmd[1024], out[16384];
    agg_http_route_t routes[AGG_API_ROUTES + 1] = {{0}};
    agg_api_routes(api, routes, AGG_API_ROUTES);
    agg_http_t *h = NULL;
    const agg_http_cfg_t hcfg = {.addr = "127.0.0.1"};
    CHECKF(agg_http_start(&hcfg, routes, &h, err, sizeof err) == 0, "%s", err);
    snprintf(url, sizeof url, "http://127.0.0.1:%d", agg_http_port(h));
    static const char *const runs[][2] = {
        {"endpoint-diff --service demo --base v1 --test v2", "POST /checkout"},
        {"top --service demo --endpoint 'GET /search'", "scan_index"},
        {"diff --service demo --base v1 --test v2 --endpoint 'POST /checkout'",
         "apply_discount_rules"},
    };
    for (size_t k = 0; k < 3; k++) {
        snprintf(cmd, sizeof cmd, "%s/cli/fleetprof --server %s %s", b, url, runs[k][0]);
        FILE *p = popen(cmd, "r");
        CHECK(p != NULL);
        size_t n = fread(out, 1, sizeof out - 1, p);
        out[n] = '\0';
        CHECKF(pclose(p) == 0, "%s", cmd);
        printf("$ fleetprof %s\n%.1200s", runs[k][0], out);
        CHECKF(strstr(out, runs[k][1]), "%s: no %s", cmd, runs[k][1]);
        if (k == 0) {
            const char *l = strstr(out, "POST /checkout"), *s2 = strstr(out, "GET /search");
            CHECKF(l && strstr(l, "REG") && strstr(l, "REG") < strchr(l, '\n'),
                   "POST /checkout not flagged in the table");
            CHECKF(s2 && (!strstr(s2, "REG") || strstr(s2, "REG") > strchr(s2, '\n')),
                   "GET /search flagged in the table");
        }
        if (k == 1)
            CHECKF(!strstr(out, "price_cart"), "price_cart in GET /search's top");
    }
    agg_http_stop(h);
}

/* The per-endpoint diff of the demo's v1 and v2 (run at the same time, so that the machine's
 * load is the same on both sides; other seeds, so other trace ids): v2's planted change,
 * apply_discount_rules (~14 % more work in "POST /checkout" only), is flagged in that
 * endpoint's latency, and no other endpoint is flagged. The endpoint filter on the profile
 * routes: "POST /checkout"'s profile holds price_cart and (v2) apply_discount_rules, not
 * scan_index; "GET /search"'s the reverse, in every view and export; the diff restricted to
 * "POST /checkout" finds apply_discount_rules, restricted to "GET /search" nothing. */
static void test_endpoint_diff(void) {
    const char *b = getenv("FLEETPROF_BUILD");
    CHECKF(b != NULL, "FLEETPROF_BUILD not set (run through ctest)");
    char dir[] = "/tmp/fp-epdiff-XXXXXX", chunks[128], store[128], cmd[2048], err[512];
    make_dirs(dir, chunks, store);
    snprintf(cmd, sizeof cmd,
             "for v in 1 2; do FLEETPROF_OUTPUT=%s FLEETPROF_INTERVAL=2 FLEETPROF_SERVICE=demo "
             "FLEETPROF_VERSION=v$v FLEETPROF_CPU_HZ=1000 FLEETPROF_CPU_RATE=2000 "
             "FLEETPROF_CONTROLLER=0 LD_PRELOAD=%s/agent/libfleetprof.so "
             "%s/deploy/demo/demo-service --version v$v --seed $v --seconds 15 --rate 1500 "
             "--quiet > /dev/null & done; wait",
             chunks, b, b);
    CHECKF(system(cmd) == 0, "%s", cmd);
    char *names[256], path[512];
    size_t nn = list_chunks(chunks, names, 256);
    CHECKF(nn >= 8, "%zu chunk files", nn);
    loader_t ld;
    loader_open(&ld, store);
    for (size_t i = 0; i < nn; i++) {
        snprintf(path, sizeof path, "%s/%s", chunks, names[i]);
        loader_add(&ld, path, (int64_t)i);
        free(names[i]);
    }
    loader_close(&ld);
    agg_api_cfg_t cfg = {.store_dir = store};
    agg_api_t *api = NULL;
    CHECKF(agg_api_new(&cfg, &api, err, sizeof err) == 0, "%s", err);
    check_endpoint_diff(api);
    check_endpoint_filter(api);
    check_request_pages(api);
    check_cli(api);
    agg_api_free(api);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

static const tr_test_t tests[] = {
    {"demo_endpoints", test_demo_endpoints},
    {"otel_ids", test_otel_ids},
    {"endpoint_diff", test_endpoint_diff},
    {0, 0},
};
TR_MAIN(tests)
