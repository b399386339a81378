/* The whole pipeline, as a user runs it: deploy/demo/demo-service under `fleetprof run` (the
 * agent preloaded) -> fleetprof-collector -> a real Kafka broker (port 19620) ->
 * fleetprof-aggregator (SQLite stores, query API) -> the `fleetprof` CLI (and `go tool pprof`).
 *
 * Workload (set up once in main), a canary deploy: version "v1", a relabelled copy "v1b" (same
 * code: the null comparison) and "v2", which adds apply_discount_rules (~9 % more CPU per
 * request) and is otherwise identical, 3 processes each, side by side for 40 s. Load is open
 * loop (1,500 requests/s at random arrival times, ~10 % of a core per process); the agent samples
 * CPU at up to 1 kHz of CPU time (FLEETPROF_CPU_RATE=400 asks for more than that allows: ~100
 * samples/s per process) and ships 2-s chunks; the aggregator keeps 2-s buckets: about 5,000-
 * 15,000 CPU samples (by machine load) and 20 bucket replicates per version.
 *
 * Each request function of the demo owns its CPU work (an always-inlined helper), so a
 * function's own CPU is its self cost; the diffs still pass --fold 'burn$' (PerfView's FoldPats),
 * which keeps them right should the helper ever be a frame of its own. Tests: planted regression (apply_discount_rules first, the only significant
 * finding; the deploy gate exits 3), null comparison (no finding), span drill-down (each span
 * holds only its request kind's functions), pprof export read by `go tool pprof -top` (same top
 * functions and values as ours), the per-deploy report.
 *
 * Labels: pipeline, slow, nosan (it preloads the agent into an uninstrumented program). */
#include "aggtest.h"
#include "support/pipeline.h"
#include "support/runner.h"

#include <jansson.h>
#include <math.h>
#include <sys/stat.h>

#define KPORT 19620
#define COL_HTTP 19621
#define AGG_HTTP 19622
#define PHASE_S 40
#define PROCS 3
#define RATE "1500"

static ts_pipeline_t pl;
static const char *const dir = pl.dir, *const cli = pl.cli, *const server = pl.server;

typedef struct {
    int status;
    char *out, *err;
} run_t;

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = fread(b, 1, (size_t)n, f);
    b[got] = 0;
    fclose(f);
    return b;
}

static run_t run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static run_t run(const char *fmt, ...) {
    char args[4096], cmd[8192], o[128], e[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(o, sizeof o, "%s/out.%d", dir, getpid());
    snprintf(e, sizeof e, "%s/err.%d", dir, getpid());
    snprintf(cmd, sizeof cmd, "FLEETPROF_SERVER=%s GOTOOLCHAIN=local %s >%s 2>%s", server, args,
             o, e);
    int st = system(cmd);
    run_t r = {WIFEXITED(st) ? WEXITSTATUS(st) : -1, slurp(o), slurp(e)};
    return r;
}

static json_t *cli_json(const char *args) {
    run_t r = run("%s %s --json", cli, args);
    CHECKF(r.status == 0, "fleetprof %s: exit %d: %s", args, r.status, r.err);
    json_t *o = json_loads(r.out, 0, NULL);
    CHECKF(o != NULL, "fleetprof %s: not JSON: %.300s", args, r.out);
    free(r.out);
    free(r.err);
    return o;
}

static const char *jstr(json_t *o, const char *k) {
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : "";
}

static void print_diff(const char *args) {
    run_t r = run("%s diff %s --limit 15", cli, args);
    printf("--- fleetprof diff %s\n%s%s", args, r.out, r.err);
    free(r.out);
    free(r.err);
}

/* ---- the tests ---- */

static void planted_regression(const char *args) {
    print_diff(args);
    char a[512];
    snprintf(a, sizeof a, "diff %s --limit 0", args);
    json_t *d = cli_json(a);
    json_t *ents = json_object_get(d, "entries"), *e;
    size_t i, findings = 0;
    json_array_foreach(ents, i, e) {
        const char *cls = jstr(e, "class");
        if (!strcmp(cls, "regression") || !strcmp(cls, "improvement")) {
            findings++;
            printf("finding: %s %s (q %g)\n", cls, jstr(e, "name"),
                   json_number_value(json_object_get(e, "q")));
        }
    }
    json_t *first = json_array_get(ents, 0);
    CHECKF(!strcmp(jstr(first, "name"), "apply_discount_rules") &&
               !strcmp(jstr(first, "class"), "regression"),
           "first entry: %s (%s)", jstr(first, "name"), jstr(first, "class"));
    CHECKF(findings == 1, "%zu significant findings, want only apply_discount_rules", findings);
    /* it rests on enough samples and replicates (no warning of the diff about either) */
    printf("samples: base %lld, test %lld; replicates: base %lld, test %lld\n",
           (long long)json_integer_value(json_object_get(d, "base_samples")),
           (long long)json_integer_value(json_object_get(d, "test_samples")),
           (long long)json_integer_value(json_object_get(d, "base_replicates")),
           (long long)json_integer_value(json_object_get(d, "test_replicates")));
    CHECK(json_integer_value(json_object_get(d, "base_samples")) >= 1000);
    CHECK(json_integer_value(json_object_get(d, "test_samples")) >= 1000);
    CHECK(json_integer_value(json_object_get(d, "base_replicates")) >= 5);
    CHECK(json_integer_value(json_object_get(d, "test_replicates")) >= 5);
    json_decref(d);
}

static void test_planted_regression(void) {
    planted_regression("--service demo --base v1 --test v2 --fold 'burn$'");
}

/* Per request (the demo counts each request with fleetprof_work_done): the same single finding;
 * every version counted requests. */
static void test_planted_regression_per_request(void) {
    json_t *v = cli_json("versions demo"), *e;
    size_t i;
    json_array_foreach(json_object_get(v, "versions"), i, e) {
        printf("%s: %lld requests in %.1f process-seconds\n", jstr(e, "version"),
               (long long)json_integer_value(json_object_get(e, "work_units")),
               json_number_value(json_object_get(e, "process_seconds")));
        CHECK(json_integer_value(json_object_get(e, "work_units")) > 100);
    }
    json_decref(v);
    planted_regression("--service demo --base v1 --test v2 --fold 'burn$' --per request");
}

static void test_deploy_gate(void) {
    run_t r = run("%s diff --service demo --base v1 --test v2 --fold 'burn$' "
                  "--fail-on-regression 5", cli);
    CHECKF(r.status == 3, "exit %d: %s", r.status, r.err);
    CHECKF(strstr(r.err, "apply_discount_rules") != NULL, "gate message: %s", r.err);
    free(r.out);
    free(r.err);
    r = run("%s diff --service demo --base v1 --test v2 --fold 'burn$' --fail-on-regression 50",
            cli);
    CHECKF(r.status == 0, "a 9%% regression failed a 50%% gate: exit %d: %s", r.status, r.err);
    free(r.out);
    free(r.err);
}

static void test_null_comparison(void) {
    const char *args = "--service demo --base v1 --test v1b --fold 'burn$'";
    print_diff(args);
    char a[512];
    snprintf(a, sizeof a, "diff %s --limit 0", args);
    json_t *d = cli_json(a);
    json_t *e;
    size_t i, findings = 0, tested = 0;
    json_array_foreach(json_object_get(d, "entries"), i, e) {
        const char *cls = jstr(e, "class");
        findings += !strcmp(cls, "regression") || !strcmp(cls, "improvement");
        tested += strcmp(cls, "untested") != 0;
    }
    CHECKF(findings == 0, "%zu significant findings between identical versions", findings);
    CHECK(tested >= 5); /* the test did run on the demo's functions */
    json_decref(d);
    /* unfolded too: no finding */
    d = cli_json("diff --service demo --base v1 --test v1b --limit 0");
    findings = 0;
    json_array_foreach(json_object_get(d, "entries"), i, e) {
        const char *cls = jstr(e, "class");
        findings += !strcmp(cls, "regression") || !strcmp(cls, "improvement");
    }
    CHECKF(findings == 0, "%zu significant findings between identical versions (unfolded)",
           findings);
    json_decref(d);
}

static int has_fn(json_t *top, const char *name) {
    json_t *e;
    size_t i;
    json_array_foreach(json_object_get(top, "functions"), i, e) {
        if (!strcmp(jstr(e, "name"), name))
            return 1;
    }
    return 0;
}

static int has_any(json_t *top, const char *const *names) {
    for (; *names; names++)
        if (has_fn(top, *names))
            return 1;
    return 0;
}

/* Every span's profile holds the work of one request kind only. A sample whose stack was cut
 * short (unwinding through libc code without frame pointers, e.g. inside free) keeps only
 * shared frames (parse_request, malloc, free): such a span is counted as "shared only". */
static void test_span_drilldown(void) {
    static const char *const checkout_fns[] = {"handle_checkout", "price_cart",
                                               "apply_discount_rules", "reserve_stock",
                                               "write_receipt", NULL};
    static const char *const search_fns[] = {"handle_search", "scan_index", "rank_results", NULL};
    json_t *sp = cli_json("spans --service demo --type cpu --limit 40");
    json_t *s;
    size_t i;
    int checkout = 0, search = 0, shared = 0, price = 0, scan = 0;
    json_array_foreach(json_object_get(sp, "spans"), i, s) {
        char a[256];
        snprintf(a, sizeof a, "span --span %s --type cpu --sort total --limit 0",
                 jstr(s, "span_id"));
        json_t *p = cli_json(a);
        int is_c = has_any(p, checkout_fns), is_s = has_any(p, search_fns);
        CHECKF(!(is_c && is_s), "span %s holds both checkout and search work", jstr(s, "span_id"));
        if (is_c) {
            checkout++;
            price += has_fn(p, "price_cart");
        } else if (is_s) {
            search++;
            scan += has_fn(p, "scan_index") || has_fn(p, "rank_results");
        } else {
            shared++;
            json_t *e;
            size_t k;
            printf("span %s: shared frames only:", jstr(s, "span_id"));
            json_array_foreach(json_object_get(p, "functions"), k, e) printf(" %s",
                                                                             jstr(e, "name"));
            printf("\n");
        }
        json_decref(p);
    }
    printf("spans: %d checkout (%d with price_cart), %d search (%d with scan/rank), %d shared "
           "frames only\n",
           checkout, price, search, scan, shared);
    CHECK(checkout >= 3 && search >= 3 && price >= 1 && scan >= 1 && shared <= 10);
    json_decref(sp);
}

static void test_pprof_export(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/demo-v2.pb.gz", dir);
    run_t r = run("%s export --service demo --version v2 --format pprof -o %s", cli, path);
    CHECKF(r.status == 0, "%s", r.err);
    free(r.out);
    free(r.err);
    json_t *top = cli_json("top --service demo --version v2 --limit 0");
    r = run("go tool pprof -top -nodecount=5 -unit=ms %s", path);
    printf("%s", r.out);
    CHECKF(r.status == 0, "go tool pprof failed: %s", r.err);
    CHECK(strstr(r.out, "Type: cpu") != NULL);
    const char *line = strstr(r.out, "flat%");
    CHECK(line);
    line = strchr(line, '\n') + 1;
    /* pprof -top merges functions of the same name from different modules (the agent's malloc
     * hook and libc's malloc): sum ours by name to compare */
    json_t *fns = json_object_get(top, "functions");
    for (int row = 0; row < 5; row++) {
        char fs[64], name[256];
        CHECKF(sscanf(line, " %63s %*s %*s %*s %*s %255s", fs, name) == 2, "line: %.80s", line);
        double ours = 0;
        json_t *e;
        size_t i;
        json_array_foreach(fns, i, e) if (!strcmp(jstr(e, "name"), name)) ours +=
            (double)json_integer_value(json_object_get(e, "self")) / 1e6;
        if (row == 0)
            CHECKF(!strcmp(name, jstr(json_array_get(fns, 0), "name")), "top: pprof %s, ours %s",
                   name, jstr(json_array_get(fns, 0), "name"));
        CHECKF(fabs(strtod(fs, NULL) - ours) <= 0.01 * ours + 1, "%s: pprof %s, ours %.1fms",
               name, fs, ours);
        line = strchr(line, '\n');
        CHECK(line);
        line++;
    }
    free(r.out);
    free(r.err);
    json_decref(top);
}

static void test_deploy_report(void) {
    double deadline = at_now() + 60;
    json_t *o = NULL, *rep = NULL, *x;
    size_t i;
    /* v2's samples now (ingest is over) */
    json_t *vs = cli_json("versions demo");
    json_int_t v2_samples = 0;
    json_array_foreach(json_object_get(vs, "versions"), i, x) {
        if (!strcmp(jstr(x, "version"), "v2"))
            v2_samples = json_integer_value(json_object_get(json_object_get(x, "samples"), "cpu"));
    }
    json_decref(vs);
    CHECK(v2_samples >= 2000);
    while (!rep && at_now() < deadline) {
        json_decref(o);
        o = cli_json("reports --service demo");
        json_array_foreach(json_object_get(o, "reports"), i, x) {
            /* made at the 2,000-sample threshold, then refreshed whenever v2's samples
             * doubled: in the end it rests on more than half of them */
            json_int_t ts = json_integer_value(json_object_get(x, "test_samples"));
            if (!strcmp(jstr(x, "test"), "v2") && !strcmp(jstr(x, "base"), "v1") &&
                ts >= 2000 && 2 * ts > v2_samples)
                rep = x;
        }
        if (!rep)
            at_sleep_ms(500);
    }
    CHECKF(rep != NULL, "no report v1 -> v2 resting on more than half of v2's %lld samples",
           (long long)v2_samples);
    /* with --report-fold 'burn$' the report finds what the folded diff finds */
    json_t *first = json_array_get(json_object_get(json_object_get(rep, "diff"), "entries"), 0);
    CHECKF(first && !strcmp(jstr(first, "name"), "apply_discount_rules") &&
               !strcmp(jstr(first, "class"), "regression"),
           "report's first entry: %s (%s)", first ? jstr(first, "name") : "-",
           first ? jstr(first, "class") : "-");
    CHECK_EQ(json_integer_value(json_object_get(rep, "regressions")), 1);
    run_t r = run("%s reports --service demo", cli);
    CHECK(r.status == 0 && strstr(r.out, "v2"));
    printf("%s", r.out);
    free(r.out);
    free(r.err);
    json_decref(o);
}

static const tr_test_t tests[] = {
    {"planted_regression", test_planted_regression},
    {"planted_regression_per_request", test_planted_regression_per_request},
    {"deploy_gate", test_deploy_gate},
    {"null_comparison", test_null_comparison},
    {"span_drilldown", test_span_drilldown},
    {"pprof_export", test_pprof_export},
    {"deploy_report", test_deploy_report},
    {0},
};

/* ---- the workload ---- */

static pid_t start_demo(const char *label, const char *code, int seed) {
    static const char *const env[] = {
        "FLEETPROF_CPU_RATE=400",
        "FLEETPROF_CPU_HZ=1000", /* up to 1 kHz of CPU time (default 100) */
        "FLEETPROF_CPU_BUDGET=5", NULL};
    char secs[16], sd[16];
    snprintf(secs, sizeof secs, "%d", PHASE_S);
    snprintf(sd, sizeof sd, "%d", seed);
    const char *args[] = {"--version", code,  "--threads", "1",  "--rate",  RATE,
                          "--seconds", secs,  "--seed",    sd,   "--quiet", NULL};
    return ts_pipeline_demo(&pl, "demo", label, "2", env, args);
}

static int wait_all(pid_t *p, int n) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int st;
        if (waitpid(p[i], &st, 0) != p[i] || !WIFEXITED(st) || WEXITSTATUS(st)) {
            printf("demo-service %d ended with status %d\n", (int)p[i], st);
            bad++;
        }
    }
    return bad;
}

/* Waits until every version's process-seconds reached what ran and stopped moving. */
static int wait_ingested(void) {
    double deadline = at_now() + 120, last = -1;
    while (at_now() < deadline) {
        run_t r = run("%s versions demo --json", cli);
        json_t *o = r.status == 0 ? json_loads(r.out, 0, NULL) : NULL;
        double total = 0, min = 1e9;
        json_t *v;
        size_t i;
        json_array_foreach(json_object_get(o, "versions"), i, v) {
            double ps = json_number_value(json_object_get(v, "process_seconds"));
            total += ps;
            min = ps < min ? ps : min;
        }
        size_t nv = json_array_size(json_object_get(o, "versions"));
        json_decref(o);
        free(r.out);
        free(r.err);
        if (nv == 3 && min >= 0.9 * PROCS * PHASE_S && total == last) {
            printf("ingested: %.1f process-seconds\n", total);
            return 0;
        }
        last = total;
        at_sleep_ms(2000);
    }
    return -1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int rc = 1;
    const char *extra[] = {"--fine-width", "2s", "--batch-interval", "500ms", "--report-interval",
                           "2s", "--report-min-samples", "2000", "--report-fold", "burn$", NULL};
    if (ts_pipeline_start(&pl, KPORT, COL_HTTP, AGG_HTTP, "pipeline", extra))
        goto out;
    /* A canary deploy: v1b (the same code as v1, relabelled) starts first, v1 one second
     * later, v2 two seconds later (so that it is the newest version, as the report expects);
     * all run side by side, so machine load hits every version alike. */
    pid_t p[3 * PROCS];
    printf("v1b, v1 (same code) and v2: %d processes each, %d s\n", PROCS, PHASE_S);
    for (int i = 0; i < PROCS; i++)
        p[i] = start_demo("v1b", "v1", 20 + i);
    at_sleep_ms(1000);
    for (int i = 0; i < PROCS; i++)
        p[PROCS + i] = start_demo("v1", "v1", 10 + i);
    at_sleep_ms(1000);
    for (int i = 0; i < PROCS; i++)
        p[2 * PROCS + i] = start_demo("v2", "v2", 30 + i);
    if (wait_all(p, 3 * PROCS))
        goto out;
    if (wait_ingested()) {
        printf("the aggregator did not get every chunk; see %s and %s\n", pl.log, pl.col.log);
        goto out;
    }
    run_t r = run("%s versions demo", cli);
    printf("%s", r.out);
    rc = tr_main(tests, argc, argv);
out:
    ts_pipeline_stop(&pl);
    return rc;
}
