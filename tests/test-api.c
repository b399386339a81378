/* Query API tests: a real Kafka broker (port 19600), chunks from the fleet simulator, the real
 * fleetprof-aggregator (with --api-token) filling real SQLite stores; every route's success
 * shape checked against the simulator's ground truth, and every error path (400 naming the
 * parameter, 404, 401). The fixture is set up once in main; each test runs in its own child.
 * With FP_TEST_STORE=postgres (ctest: test-api-pg, label postgres) the aggregator is started
 * with --store postgres://... on a throwaway cluster: writes and API reads go to PostgreSQL. */
#include "aggtest.h"
#include "qexec.h"
#include "support/runner.h"
#include "support/kafka.h"
#include "support/served.h"

#include "../cli/src/client.h"

#include "cm/chunk.h"
#include "cm/wire.h"

#include <glob.h>
#include <jansson.h>
#include <pthread.h>
#include <math.h>
#include <zlib.h>

/* FP_TEST_STORE=postgres (ctest test-api-pg): the aggregator writes and the API reads a
 * PostgreSQL store (a throwaway cluster on 15437, Kafka on 19940): the same assertions */
#define PG_PORT 15437
#define TOKEN "s3cret-token"

static ts_served_t fx = {.tag = "api", .kafka_port = 19600, .http_port = 19601,
                         .pg_kafka_port = 19940, .pg_http_port = 19941, .pg_port = PG_PORT,
                         .nparts = 2, .token = TOKEN,
                         .params = {.seed = 21, .services = 3, .versions = 2, .processes = 3,
                                    .intervals = 8, .samples = 400, .stacks = 150}};
static char server[64];
static const char *store, *dir, *pgdir; /* fx's: stores (dir or URL), temp dir, cluster dir */
static fsim_t *sim;
static const char *svc0, *v0, *v1;

/* GET path with the token; returns the status, body in *body (caller frees). */
static long get(const char *path, char **body, size_t *len) {
    cli_resp_t r;
    CHECKF(cli_http_get(server, TOKEN, path, &r) == 0, "%s", r.err);
    *body = r.body;
    if (len)
        *len = r.len;
    return r.status;
}

static json_t *get_json(const char *path, long want) {
    char *b;
    long st = get(path, &b, NULL);
    CHECKF(st == want, "GET %s: status %ld, body %s", path, st, b);
    json_error_t e;
    json_t *o = json_loads(b, 0, &e);
    CHECKF(o != NULL, "GET %s: not JSON: %s", path, b);
    free(b);
    return o;
}

/* An error reply: status, and the parameter it names (NULL: none asserted). */
static void expect_error(const char *path, long status, const char *param) {
    json_t *o = get_json(path, status);
    const char *msg = json_string_value(json_object_get(o, "error"));
    CHECKF(msg && *msg, "GET %s: no error message", path);
    if (param) {
        const char *p = json_string_value(json_object_get(o, "parameter"));
        CHECKF(p && !strcmp(p, param), "GET %s: parameter %s, want %s (%s)", path, p ? p : "-",
               param, msg);
    }
    json_decref(o);
}

static json_int_t jint(json_t *o, const char *k) {
    return json_integer_value(json_object_get(o, k));
}

static void test_services(void) {
    json_t *o = get_json("/api/v1/services", 200);
    json_t *arr = json_object_get(o, "services"), *s;
    size_t i;
    CHECK_EQ(json_array_size(arr), fsim_params(sim)->services);
    int seen = 0;
    json_array_foreach(arr, i, s) {
        CHECK_EQ(jint(s, "versions"), 2);
        if (!strcmp(json_string_value(json_object_get(s, "name")), svc0))
            seen = 1;
    }
    CHECK(seen);
    json_decref(o);
}

static void test_versions(void) {
    char path[256];
    snprintf(path, sizeof path, "/api/v1/services/%s/versions", svc0);
    json_t *o = get_json(path, 200);
    json_t *arr = json_object_get(o, "versions");
    CHECK_EQ(json_array_size(arr), 2);
    for (uint32_t vi = 0; vi < 2; vi++) {
        json_t *v = json_array_get(arr, vi);
        const char *name = json_string_value(json_object_get(v, "version"));
        uint32_t k = !strcmp(name, fsim_version_name(sim, 0, 0)) ? 0 : 1;
        CHECK(!strcmp(name, fsim_version_name(sim, 0, k)));
        CHECK_EQ(jint(json_object_get(v, "samples"), "cpu"),
                 fsim_truth(sim, 0, k, CM_EV_CPU)->count / CM_COUNT_ONE);
        CHECK(jint(v, "first_ns") > 0 && jint(v, "last_ns") > jint(v, "first_ns"));
        CHECK(json_number_value(json_object_get(v, "process_seconds")) > 0);
        CHECK_EQ(jint(v, "work_units"), fsim_truth_work(sim, 0, k));
        CHECK(jint(v, "work_units") > 0);
    }
    json_decref(o);
    expect_error("/api/v1/services/no-such-svc/versions", 404, "service");
    expect_error("/api/v1/services/x/other", 404, NULL);
}

static void test_event_types(void) {
    json_t *o = get_json("/api/v1/event-types", 200);
    CHECK_EQ(json_array_size(json_object_get(o, "event_types")), CM_EV_MAX);
    json_decref(o);
    char path[256];
    snprintf(path, sizeof path, "/api/v1/event-types?service=%s", svc0);
    o = get_json(path, 200);
    json_t *cpu = json_array_get(json_object_get(o, "event_types"), 0);
    CHECK(!strcmp(json_string_value(json_object_get(cpu, "name")), "cpu"));
    CHECK_EQ(jint(cpu, "samples"), (fsim_truth(sim, 0, 0, CM_EV_CPU)->count +
                                    fsim_truth(sim, 0, 1, CM_EV_CPU)->count) / CM_COUNT_ONE);
    json_decref(o);
    expect_error("/api/v1/event-types?service=nope", 404, "service");
}

static void test_profile_views(void) {
    char path[512];
    int64_t truth = fsim_truth(sim, 0, 0, CM_EV_CPU)->weight;
    /* top: total equals what was produced */
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&version=%s&type=cpu&limit=5", svc0, v0);
    json_t *o = get_json(path, 200);
    CHECK_EQ(jint(o, "total"), truth);
    json_t *fns = json_object_get(o, "functions");
    CHECK_EQ(json_array_size(fns), 5);
    CHECK_EQ(jint(o, "truncated"), jint(o, "n_functions") - 5);
    CHECK(jint(o, "truncated") > 0);
    json_decref(o);
    /* both versions merged */
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&version=%s&version=%s", svc0, v0, v1);
    o = get_json(path, 200);
    CHECK_EQ(jint(o, "total"), truth + fsim_truth(sim, 0, 1, CM_EV_CPU)->weight);
    json_decref(o);
    /* tree: root total, children sum, bounded nodes with the remainder accounted */
    snprintf(path, sizeof path,
             "/api/v1/profile?service=%s&version=%s&view=tree&min_share=0.05&limit=10", svc0, v0);
    o = get_json(path, 200);
    json_t *root = json_object_get(o, "tree");
    CHECK(root != NULL);
    CHECK_EQ(jint(root, "total"), truth);
    CHECK(jint(o, "nodes") <= 1 + 10 + 10); /* root, 10 real nodes, at most one (other) each */
    CHECK(jint(o, "truncated") > 0);
    json_decref(o);
    /* callers of the top function */
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&version=%s&limit=1", svc0, v0);
    o = get_json(path, 200);
    json_t *e0 = json_array_get(json_object_get(o, "functions"), 0);
    CHECK(e0 != NULL);
    char fn[256];
    snprintf(fn, sizeof fn, "%s", json_string_value(json_object_get(e0, "name")));
    json_decref(o);
    char *esc = cli_url_escape(fn);
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&version=%s&view=callers&function=%s",
             svc0, v0, esc);
    free(esc);
    o = get_json(path, 200);
    CHECK(jint(o, "total") > 0);
    json_decref(o);
    /* text */
    char *b;
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&format=text", svc0);
    CHECK_EQ(get(path, &b, NULL), 200);
    CHECK(strstr(b, fn) != NULL);
    free(b);
}

static void test_profile_exports(void) {
    char path[512], *b;
    size_t len;
    int64_t truth = fsim_truth(sim, 0, 0, CM_EV_CPU)->weight;
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&version=%s&format=folded", svc0, v0);
    CHECK_EQ(get(path, &b, &len), 200);
    long long sum = 0;
    for (char *line = strtok(b, "\n"); line; line = strtok(NULL, "\n")) {
        char *sp = strrchr(line, ' ');
        CHECK(sp != NULL);
        sum += atoll(sp + 1);
    }
    CHECK_EQ(sum, truth);
    free(b);
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&version=%s&format=pprof", svc0, v0);
    CHECK_EQ(get(path, &b, &len), 200);
    CHECK(len > 100 && (uint8_t)b[0] == 0x1f && (uint8_t)b[1] == 0x8b); /* gzip */
    free(b);
    /* filters: excluding every frame leaves no data (404), a fold keeps the total */
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&version=%s&exclude=.", svc0, v0);
    expect_error(path, 404, NULL);
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&version=%s&fold=a&by_module=1", svc0,
             v0);
    json_t *o = get_json(path, 200);
    CHECK_EQ(jint(o, "total"), truth);
    json_decref(o);
}

static void test_profile_errors(void) {
    char path[512];
    expect_error("/api/v1/profile", 400, "service");
    expect_error("/api/v1/profile?service=nope", 404, "service");
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&version=v-none", svc0);
    expect_error(path, 404, "version");
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&type=gpu", svc0);
    expect_error(path, 400, "type");
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&from=yesterday", svc0);
    expect_error(path, 400, "from");
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&from=100&to=50", svc0);
    expect_error(path, 400, "to");
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&from=1&to=2", svc0);
    expect_error(path, 404, NULL); /* no data in range */
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&label=nocolon", svc0);
    expect_error(path, 400, "label");
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&include=x(", svc0);
    expect_error(path, 400, "include");
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&exclude=[", svc0);
    expect_error(path, 400, "exclude");
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&group=nogroup", svc0);
    expect_error(path, 400, "group");
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&by_module=maybe", svc0);
    expect_error(path, 400, "by_module");
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&view=flame", svc0);
    expect_error(path, 400, "view");
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&format=xml", svc0);
    expect_error(path, 400, "format");
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&limit=-3", svc0);
    expect_error(path, 400, "limit");
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&view=tree&min_share=2", svc0);
    expect_error(path, 400, "min_share");
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&view=callers", svc0);
    expect_error(path, 400, "function");
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&view=callers&function=zz_none", svc0);
    expect_error(path, 404, "function");
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&sort=name", svc0);
    expect_error(path, 400, "sort");
    expect_error("/api/v1/nothing-here", 404, NULL);
}

static void test_timeseries(void) {
    char path[256];
    snprintf(path, sizeof path, "/api/v1/timeseries?service=%s&type=cpu", svc0);
    json_t *o = get_json(path, 200);
    json_t *series = json_object_get(o, "series"), *s;
    CHECK_EQ(json_array_size(series), 2);
    size_t i, k;
    int64_t sum = 0;
    json_array_foreach(series, i, s) {
        json_t *pt;
        if (strcmp(json_string_value(json_object_get(s, "version")), v0))
            continue;
        json_array_foreach(json_object_get(s, "points"), k, pt) sum += jint(pt, "value");
    }
    CHECK_EQ(sum, fsim_truth(sim, 0, 0, CM_EV_CPU)->weight);
    json_t *deploys = json_object_get(o, "deploys");
    CHECK_EQ(json_array_size(deploys), 2);
    CHECK(jint(json_array_get(deploys, 0), "first_ns") <= jint(json_array_get(deploys, 1),
                                                               "first_ns"));
    json_decref(o);
    expect_error("/api/v1/timeseries", 400, "service");
    expect_error("/api/v1/timeseries?service=nope", 404, "service");
    snprintf(path, sizeof path, "/api/v1/timeseries?service=%s&to=x", svc0);
    expect_error(path, 400, "to");
    snprintf(path, sizeof path, "/api/v1/timeseries?service=%s&label=nocolon", svc0);
    expect_error(path, 400, "label");
}

/* One label (key, value) of svc0's v0 CPU rows, read from the stores (through the query
 * executor, qexec.h: the SQLite files or the PostgreSQL database alike). */
static int find_label(char *key, char *val, size_t size) {
    glob_t g = {0};
    char pat[128];
    int found = 0;
    const char *pg[1] = {store};
    snprintf(pat, sizeof pat, "%s/*.db", dir);
    int is_pg = !strncmp(store, "postgres", 8);
    if (!is_pg && glob(pat, 0, NULL, &g))
        return 0;
    size_t n = is_pg ? 1 : g.gl_pathc;
    for (size_t i = 0; i < n && !found; i++) {
        agg_qx_t *db = NULL;
        agg_qxst_t *st = NULL;
        char err[256];
        if (agg_qx_open(is_pg ? pg[0] : g.gl_pathv[i], &db, err, sizeof err) == 0 &&
            agg_qx_prepare(db, "SELECT k.s, v.s FROM profile p JOIN labels l ON "
                               "l.labelset=p.labels JOIN strings k ON k.id=l.key JOIN strings v "
                               "ON v.id=l.value JOIN strings s ON s.id=p.service JOIN strings "
                               "ver ON ver.id=p.version WHERE s.s=?1 AND ver.s=?2 AND p.type=1 "
                               /* an application label, not a dimension (dims.h) */
                               "AND k.s NOT IN ('host','node','pod','container','pid',"
                               "'io-target','fd-kind','lock') ORDER BY k.s, v.s LIMIT 1",
                           &st) == 0) {
            agg_qx_bind_text(st, 1, svc0);
            agg_qx_bind_text(st, 2, v0);
            if (agg_qx_step(st) == 1) {
                snprintf(key, size, "%s", agg_qx_text(st, 0));
                snprintf(val, size, "%s", agg_qx_text(st, 1));
                found = 1;
            }
        }
        agg_qx_finalize(st);
        agg_qx_close(db);
    }
    if (!is_pg)
        globfree(&g);
    return found;
}

/* value of version ver's points, summed, and each point at most the unfiltered one's */
static int64_t series_sum(json_t *o, const char *ver, json_t *all) {
    json_t *s, *pt, *a, *apt;
    size_t i, k, j, m;
    int64_t sum = 0;
    json_array_foreach(json_object_get(o, "series"), i, s) {
        if (strcmp(json_string_value(json_object_get(s, "version")), ver))
            continue;
        json_array_foreach(json_object_get(s, "points"), k, pt) {
            sum += jint(pt, "value");
            int seen = 0;
            json_array_foreach(json_object_get(all, "series"), j, a) {
                if (strcmp(json_string_value(json_object_get(a, "version")), ver))
                    continue;
                json_array_foreach(json_object_get(a, "points"), m, apt) {
                    if (jint(apt, "bucket") == jint(pt, "bucket") &&
                        jint(apt, "width") == jint(pt, "width")) {
                        CHECKF(jint(pt, "value") <= jint(apt, "value"), "bucket %lld: %lld > %lld",
                               (long long)jint(pt, "bucket"), (long long)jint(pt, "value"),
                               (long long)jint(apt, "value"));
                        seen = 1;
                    }
                }
            }
            CHECKF(seen, "bucket %lld of the label series is not in the whole series",
                   (long long)jint(pt, "bucket"));
        }
    }
    return sum;
}

/* label=key:value: the samples of the label sets holding it, per bucket; their sum is the
 * label-filtered merged profile's total (another read path: tiers and fine rows) */
static void test_timeseries_label(void) {
    char key[256], val[256], path[1024], lab[600];
    CHECK(find_label(key, val, sizeof key));
    json_t *all = NULL, *o;
    char *ek = cli_url_escape(key), *ev = cli_url_escape(val);
    CHECK(ek && ev);
    snprintf(lab, sizeof lab, "%s%%3A%s", ek, ev);
    snprintf(path, sizeof path, "/api/v1/timeseries?service=%s&type=cpu", svc0);
    all = get_json(path, 200);
    snprintf(path, sizeof path, "/api/v1/timeseries?service=%s&type=cpu&label=%s", svc0, lab);
    o = get_json(path, 200);
    CHECK(json_object_get(o, "label") && strchr(json_string_value(json_object_get(o, "label")), ':'));
    int64_t sum = series_sum(o, v0, all);
    json_decref(o);
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&version=%s&type=cpu&label=%s&limit=1",
             svc0, v0, lab);
    o = get_json(path, 200);
    int64_t total = jint(o, "total");
    json_decref(o);
    CHECKF(sum == total && sum > 0, "label series %lld, label profile %lld", (long long)sum,
           (long long)total);
    /* a strict subset of the whole: the generator spreads samples over several label sets */
    int64_t whole = fsim_truth(sim, 0, 0, CM_EV_CPU)->weight;
    CHECKF(sum < whole, "label %s:%s holds %lld of %lld", key, val, (long long)sum,
           (long long)whole);
    /* a value no sample has: an empty series, not an error */
    snprintf(path, sizeof path, "/api/v1/timeseries?service=%s&type=cpu&label=%s%%3Anone-such",
             svc0, ek);
    o = get_json(path, 200);
    CHECK_EQ(json_array_size(json_object_get(o, "series")), 0);
    json_decref(o);
    json_decref(all);
    free(ek);
    free(ev);
}

static void test_diff(void) {
    char path[512];
    snprintf(path, sizeof path, "/api/v1/diff?service=%s&base=%s&test=%s&type=cpu&limit=10", svc0,
             v0, v1);
    json_t *o = get_json(path, 200);
    CHECK(json_array_size(json_object_get(o, "entries")) > 0);
    CHECK(json_array_size(json_object_get(o, "entries")) <= 10);
    CHECK(json_object_get(o, "regressions") != NULL);
    CHECK(json_object_get(o, "test_used") != NULL);
    json_decref(o);
    /* time range against time range, over every version */
    snprintf(path, sizeof path,
             "/api/v1/diff?service=%s&base_from=0&base_to=now&test_from=0&test_to=now", svc0);
    o = get_json(path, 200);
    CHECK_EQ(jint(o, "regressions"), 0); /* identical sides */
    json_decref(o);
    snprintf(path, sizeof path, "/api/v1/diff?service=%s&base=%s&test=%s&format=text", svc0, v0,
             v1);
    char *b;
    CHECK_EQ(get(path, &b, NULL), 200);
    CHECK(strlen(b) > 100);
    free(b);
    /* per request: the work is the units the chunks counted, exactly */
    for (int per_req = 0; per_req < 2; per_req++) {
        snprintf(path, sizeof path, "/api/v1/diff?service=%s&base=%s&test=%s%s", svc0, v0, v1,
                 per_req ? "&per=request" : "");
        o = get_json(path, 200);
        CHECK(!strcmp(json_string_value(json_object_get(o, "per")),
                      per_req ? "request" : "process-second"));
        double bw = json_number_value(json_object_get(o, "base_work"));
        double tw = json_number_value(json_object_get(o, "test_work"));
        double bt = json_number_value(json_object_get(o, "base_total"));
        printf("per %s: base work %.3f, test work %.3f, base cpu per unit %.1f ns\n",
               per_req ? "request" : "second", bw, tw, bt);
        if (per_req) {
            /* summed pro rata in floating point: exact to its rounding, not by truncation */
            CHECKF(fabs(bw - (double)fsim_truth_work(sim, 0, 0)) < 1e-6 &&
                       fabs(tw - (double)fsim_truth_work(sim, 0, 1)) < 1e-6,
                   "work %.9f / %.9f, units counted %lld / %lld", bw, tw,
                   (long long)fsim_truth_work(sim, 0, 0), (long long)fsim_truth_work(sim, 0, 1));
        } else {
            const fsim_params_t *fp = fsim_params(sim); /* process-seconds of the version */
            CHECK(fabs(bw - fp->processes * fp->intervals * (fp->interval_ns / 1e9)) < 1e-6);
            /* replicates: each process in each bucket (the pid dimension), work split exactly */
            CHECKF(jint(o, "base_replicates") == (int64_t)fp->processes * fp->intervals,
                   "%lld replicates", (long long)jint(o, "base_replicates"));
            json_t *mde = json_object_get(o, "min_detectable_effect");
            CHECK(json_number_value(json_object_get(mde, "new_function_share")) > 0);
            CHECK(json_array_size(json_object_get(mde, "changed_function")) == 3);
        }
        double want = (double)fsim_truth(sim, 0, 0, CM_EV_CPU)->weight / bw;
        CHECKF(fabs(bt - want) <= 1e-9 * want, "base total %f, want %f", bt, want);
        json_decref(o);
    }
    snprintf(path, sizeof path, "/api/v1/diff?service=%s&base=%s&test=%s&per=minute", svc0, v0,
             v1);
    expect_error(path, 400, "per");
    snprintf(path, sizeof path, "/api/v1/diff?service=%s&base=%s&test=%s&per=request",
             fsim_service_name(sim, 1), fsim_version_name(sim, 1, 0),
             fsim_version_name(sim, 1, 1));
    expect_error(path, 404, "per"); /* service 1 counts no units of work */
    snprintf(path, sizeof path, "/api/v1/diff?service=%s&base=%s", svc0, v0);
    expect_error(path, 400, "test");
    snprintf(path, sizeof path, "/api/v1/diff?service=%s&base=nov&test=%s", svc0, v1);
    expect_error(path, 404, "base");
    /* an error of the test side is the answer (test-api-pg: read on a second handle and
     * thread) */
    snprintf(path, sizeof path, "/api/v1/diff?service=%s&base=%s&test=nov", svc0, v0);
    expect_error(path, 404, "test");
    snprintf(path, sizeof path, "/api/v1/diff?service=%s&base=%s&test=%s&fail_on_regression=x",
             svc0, v0, v1);
    expect_error(path, 400, "fail_on_regression");
    snprintf(path, sizeof path, "/api/v1/diff?service=%s&base_from=0", svc0);
    expect_error(path, 400, "test_from");
    snprintf(path, sizeof path, "/api/v1/diff?service=nope&base=a&test=b");
    expect_error(path, 404, "service");
    snprintf(path, sizeof path, "/api/v1/diff?service=%s&base=%s&test=%s&format=pprof", svc0, v0,
             v1);
    expect_error(path, 400, "format");
}

static void test_spans(void) {
    char path[512];
    snprintf(path, sizeof path, "/api/v1/spans?service=%s&type=cpu&limit=3", svc0);
    json_t *o = get_json(path, 200);
    json_t *arr = json_object_get(o, "spans");
    CHECK(json_array_size(arr) == 3);
    json_int_t c0 = jint(json_object_get(json_array_get(arr, 0), "cost"), "cpu");
    json_int_t c2 = jint(json_object_get(json_array_get(arr, 2), "cost"), "cpu");
    CHECK(c0 >= c2 && c0 > 0);
    /* from 8.6e11 s ago: the same spans as with no from. Before, from * 1e9 wrapped around to
     * a time in the 22nd century and the answer was empty. */
    snprintf(path, sizeof path, "/api/v1/spans?service=%s&type=cpu&limit=3&from=-9999999d", svc0);
    json_t *o2 = get_json(path, 200);
    CHECK_EQ(json_array_size(json_object_get(o2, "spans")), 3);
    CHECK_EQ(jint(json_object_get(json_array_get(json_object_get(o2, "spans"), 0), "cost"), "cpu"),
             c0);
    json_decref(o2);
    char span[17], trace[33];
    snprintf(span, sizeof span, "%s", json_string_value(json_object_get(json_array_get(arr, 0),
                                                                        "span_id")));
    snprintf(trace, sizeof trace, "%s", json_string_value(json_object_get(json_array_get(arr, 0),
                                                                          "trace_id")));
    json_decref(o);
    /* the span's profile: its cpu total equals the span index's cost */
    snprintf(path, sizeof path, "/api/v1/span?span=%s", span);
    o = get_json(path, 200);
    CHECK_EQ(jint(json_object_get(json_object_get(o, "types"), "cpu"), "total"), c0);
    json_decref(o);
    snprintf(path, sizeof path, "/api/v1/span?trace=%s&span=%s&type=cpu&view=tree", trace, span);
    o = get_json(path, 200);
    CHECK_EQ(jint(json_object_get(o, "tree"), "total"), c0);
    json_decref(o);
    snprintf(path, sizeof path, "/api/v1/span?trace=%s&type=cpu&format=pprof", trace);
    char *b;
    size_t len;
    CHECK_EQ(get(path, &b, &len), 200);
    CHECK((uint8_t)b[0] == 0x1f);
    free(b);
    expect_error("/api/v1/span", 400, "span");
    expect_error("/api/v1/span?trace=xyz", 400, "trace");
    expect_error("/api/v1/span?span=12345", 400, "span");
    expect_error("/api/v1/span?span=0000000000000001", 404, "span");
    snprintf(path, sizeof path, "/api/v1/span?span=%s&type=bogus", span);
    expect_error(path, 400, "type");
    snprintf(path, sizeof path, "/api/v1/span?span=%s&format=pprof", span);
    expect_error(path, 400, "format");
    expect_error("/api/v1/spans", 400, "service");
    expect_error("/api/v1/spans?service=nope", 404, "service");
    snprintf(path, sizeof path, "/api/v1/spans?service=%s&limit=x", svc0);
    expect_error(path, 400, "limit");
}

static void test_reports(void) {
    /* the aggregator's report thread (every 1 s, >= 100 samples) makes one per service */
    char path[256];
    snprintf(path, sizeof path, "/api/v1/reports?service=%s", svc0);
    json_t *o = NULL, *arr = NULL;
    double deadline = at_now() + 60;
    while (at_now() < deadline) {
        json_decref(o);
        o = get_json(path, 200);
        arr = json_object_get(o, "reports");
        if (json_array_size(arr) > 0)
            break;
        at_sleep_ms(300);
    }
    CHECK_EQ(json_array_size(arr), 1);
    json_t *r = json_array_get(arr, 0);
    CHECK(!strcmp(json_string_value(json_object_get(r, "service")), svc0));
    /* base = the version first seen */
    char vp[256];
    snprintf(vp, sizeof vp, "/api/v1/services/%s/versions", svc0);
    json_t *vs = get_json(vp, 200);
    const char *first = json_string_value(
        json_object_get(json_array_get(json_object_get(vs, "versions"), 0), "version"));
    CHECK(!strcmp(json_string_value(json_object_get(r, "base")), first));
    CHECK(json_object_get(json_object_get(r, "diff"), "entries") != NULL);
    CHECK(jint(r, "base_samples") > 100);
    /* what a report waits for: the configured samples; nothing waits once it is written */
    CHECK_EQ(jint(o, "min_samples"), 100);
    CHECK(strstr(json_string_value(json_object_get(o, "min_samples_reason")),
                 "--report-min-samples"));
    CHECK(json_object_get(o, "waiting") == NULL);
    /* the report's diff states its minimum detectable effect */
    CHECK(json_object_get(json_object_get(r, "diff"), "min_detectable_effect") != NULL);
    json_decref(vs);
    json_decref(o);
    o = NULL;
    deadline = at_now() + 60;
    while (at_now() < deadline) { /* one report per service, the others may still be coming */
        json_decref(o);
        o = get_json("/api/v1/reports", 200);
        if (json_array_size(json_object_get(o, "reports")) >= fsim_params(sim)->services)
            break;
        at_sleep_ms(300);
    }
    CHECK_EQ(json_array_size(json_object_get(o, "reports")), fsim_params(sim)->services);
    json_decref(o);
    expect_error("/api/v1/reports?service=nope", 404, "service");
    expect_error("/api/v1/reports?limit=abc", 400, "limit");
}

static void test_token(void) {
    cli_resp_t r;
    CHECK(cli_http_get(server, NULL, "/api/v1/services", &r) == 0);
    CHECK_EQ(r.status, 401);
    CHECK(strstr(r.body, "Authorization") != NULL);
    cli_resp_free(&r);
    CHECK(cli_http_get(server, "s3cret-tokem", "/api/v1/services", &r) == 0);
    CHECK_EQ(r.status, 401);
    cli_resp_free(&r);
    CHECK(cli_http_get(server, "s3cret-token-longer", "/api/v1/services", &r) == 0);
    CHECK_EQ(r.status, 401);
    cli_resp_free(&r);
    /* /healthz and /metrics stay open for probes */
    CHECK(cli_http_get(server, NULL, "/healthz", &r) == 0);
    CHECK_EQ(r.status, 200);
    cli_resp_free(&r);
}


/* ---- PostgreSQL only: a database restart between two requests ---- */

#define RESTART_CLIENTS 8 /* the aggregator's default --api-workers: every worker's connection */

typedef struct {
    const char *path;
    cli_resp_t r;
    int rc;
} restart_req_t;

static void *restart_get(void *arg) {
    restart_req_t *q = arg;
    q->rc = cli_http_get(server, TOKEN, q->path, &q->r);
    return NULL;
}

/* RESTART_CLIENTS concurrent GETs of path: each 200 with exactly body `want` (NULL: returned). */
static char *get_all(const char *path, const char *want) {
    restart_req_t q[RESTART_CLIENTS];
    pthread_t t[RESTART_CLIENTS];
    for (int i = 0; i < RESTART_CLIENTS; i++) {
        q[i] = (restart_req_t){.path = path};
        CHECK(pthread_create(&t[i], NULL, restart_get, &q[i]) == 0);
    }
    for (int i = 0; i < RESTART_CLIENTS; i++)
        pthread_join(t[i], NULL);
    char *first = NULL;
    for (int i = 0; i < RESTART_CLIENTS; i++) {
        CHECKF(q[i].rc == 0, "%s", q[i].r.err);
        CHECKF(q[i].r.status == 200, "GET %s: status %ld, body %s", path, q[i].r.status,
               q[i].r.body);
        const char *ref = want ? want : first;
        if (ref)
            CHECKF(!strcmp(q[i].r.body, ref), "GET %s: body changed:\n%s\nvs\n%s", path,
                   q[i].r.body, ref);
        if (!first)
            first = q[i].r.body;
        else
            free(q[i].r.body);
    }
    return first;
}

/* The API's connections do not survive a database restart; the first query on each finds its
 * connection broken and runs again on a fresh one: every request after the restart answers
 * 200 with the same answer as before it (today's bug: the first one on each worker was 500). */
static void test_pg_restart(void) {
    char path[512], cmd[512];
    const char *src = getenv("FLEETPROF_SRC");
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&version=%s&type=cpu&limit=20", svc0,
             v0);
    char *before = get_all(path, NULL); /* every worker has a connection now */
    snprintf(cmd, sizeof cmd, "%s/deploy/postgres/stop.sh %s >/dev/null 2>&1", src ? src : ".",
             pgdir);
    CHECK(system(cmd) == 0);
    char url[256];
    CHECK(at_pg_start(PG_PORT, pgdir, url, sizeof url) == 0);
    free(get_all(path, before));
    /* and the diff (several statements and the temporary id tables) */
    snprintf(path, sizeof path, "/api/v1/diff?service=%s&base=%s&test=%s", svc0, v0, v1);
    before = get_all(path, NULL);
    CHECK(system(cmd) == 0);
    CHECK(at_pg_start(PG_PORT, pgdir, url, sizeof url) == 0);
    free(get_all(path, before));
    free(before);
}

static tr_test_t tests[] = {
    {"services", test_services},
    {"versions", test_versions},
    {"event_types", test_event_types},
    {"profile_views", test_profile_views},
    {"profile_exports", test_profile_exports},
    {"profile_errors", test_profile_errors},
    {"timeseries", test_timeseries},
    {"timeseries_label", test_timeseries_label},
    {"diff", test_diff},
    {"spans", test_spans},
    {"reports", test_reports},
    {"token", test_token},
    {"pg_restart", test_pg_restart}, /* PostgreSQL only (main drops it otherwise) */
    {0},
};

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int rc = 1;
    if (ts_served_start(&fx) == 0) {
        store = fx.store, dir = fx.dir, pgdir = fx.pgdir, sim = fx.sim;
        svc0 = fsim_service_name(sim, 0);
        v0 = fsim_version_name(sim, 0, 0);
        v1 = fsim_version_name(sim, 0, 1);
        snprintf(server, sizeof server, "http://127.0.0.1:%d", fx.http);
        if (!fx.use_pg)
            tests[sizeof tests / sizeof *tests - 2] = (tr_test_t){0}; /* no database to restart */
        rc = tr_main(tests, argc, argv);
    } else {
        printf("1 failed\n");
    }
    ts_served_stop(&fx);
    return rc;
}
