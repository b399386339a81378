/* The insight rules on real programs under the agent (issue 33's acceptance): each mode of
 * tests/programs/insight_work.cc exhibits one pattern and must raise exactly that insight with
 * its planted function first; the null programs (the demo service, fp-work's CPU modes,
 * insight_work's balanced mixed mode) raise none, at the default thresholds. The profiles are
 * built from the agent's chunk files with the same input the store fills (insights.h); the
 * lock and leak cases also go through a store (ingested as the aggregator does, without
 * Kafka) and GET /api/v1/insights, and the lock evidence's link opens exactly its waits. */
#include "agent-common.h"
#include "aggtest.h"
#include "api.h"
#include "qkpm.h"
#include "query.h"
#include "reports.h"
#include "store.h"

#include <jansson.h>

#include <string.h>

static char envbuf[4200];

/* Splits extra ("K=V K2=V2", NULL: none) into at most max entries of env (buf holds them);
 * the entry after them is NULL. */
static void extra_env(const char *extra, char *buf, size_t size, const char **env, int max) {
    int n = 0;
    snprintf(buf, size, "%s", extra ? extra : "");
    for (char *sv, *w = strtok_r(buf, " ", &sv); w && n < max; w = strtok_r(NULL, " ", &sv))
        env[n++] = w;
    env[n] = NULL;
}

typedef struct {
    agg_profile_t *p[CM_EV_COUNT]; /* by type; [CM_EV_INUSE] per interval */
    agg_profile_t *io_bytes;
    agg_insight_target_t tg[64];   /* I/O by target (names point into the chunks) */
    agg_insight_input_t in;
} prof_t;

/* Adds c's I/O rows to x's targets by their target string. */
static void add_targets(prof_t *x, const cm_chunk_t *c) {
    const cm_samples_t *s = &c->samples[CM_EV_IO];
    for (uint32_t i = 0; s->target && i < s->n; i++) {
        uint32_t t = s->target[i];
        if (!t || t >= c->dict.n_strings)
            continue;
        const char *name = c->dict.strings[t].ptr;
        size_t k = 0;
        while (k < x->in.n_io_targets && strcmp(x->tg[k].name, name))
            k++;
        if (k == x->in.n_io_targets && k < 64)
            x->tg[x->in.n_io_targets++] = (agg_insight_target_t){name, 0, 0};
        if (k < 64) {
            x->tg[k].wait_ns += s->weight[i];
            x->tg[k].count += cm_samples_count(s, i);
        }
    }
}

static void build(const chunks_t *cs, prof_t *x) {
    memset(x, 0, sizeof *x);
    for (int t = 1; t < CM_EV_COUNT; t++)
        CHECK((x->p[t] = agg_profile_new((cm_event_type_t)t)) != NULL);
    CHECK((x->io_bytes = agg_profile_new(CM_EV_IO)) != NULL);
    for (int i = 0; i < cs->n; i++) {
        const cm_chunk_t *c = cs->c[i];
        for (int t = 1; t < CM_EV_COUNT; t++)
            if (t != CM_EV_INUSE)
                CHECK(agg_profile_add_chunk(x->p[t], c) == 0);
        CHECK(agg_insights_add_inuse_chunk(x->p[CM_EV_INUSE], c) == 0);
        CHECK(agg_insights_add_io_bytes_chunk(x->io_bytes, c) == 0);
        add_targets(x, c);
        const cm_header_t *h = &c->header;
        x->in.process_seconds += (double)(h->end_unix_ns - h->start_unix_ns) / 1e9;
        x->in.process_cpu_ns += h->process_cpu_ns;
        x->in.agent_cpu_ns += h->agent_cpu_ns;
        for (int t = 1; t < CM_EV_COUNT; t++)
            x->in.samples += c->samples[t].n;
        for (uint32_t k = 0; k < h->n_drops; k++)
            agg_insight_add_drop(&x->in, h->drops[k].reason, h->drops[k].count);
    }
    for (int t = 1; t < CM_EV_COUNT; t++)
        agg_profile_seal(x->p[t]);
    x->in.cpu = x->p[CM_EV_CPU];
    x->in.wall = x->p[CM_EV_WALL];
    x->in.alloc = x->p[CM_EV_ALLOC];
    x->in.lock = x->p[CM_EV_LOCK];
    x->in.io = x->p[CM_EV_IO];
    x->in.inuse = x->p[CM_EV_INUSE];
    x->in.io_bytes = x->io_bytes;
    x->in.io_targets = x->tg;
}

static void prof_free(prof_t *x) {
    for (int t = 1; t < CM_EV_COUNT; t++)
        agg_profile_free(x->p[t]);
    agg_profile_free(x->io_bytes);
}

/* Runs argv under the agent (chunks every `interval`, extra env) and checks it exited 0;
 * returns the chunk directory, its stdout in out. */
static char *run_agent(const char *const *argv, const char *interval, const char *extra,
                       double timeout, char *out, size_t size) {
    char *dir = mkout(), lib[512], pre[600], iv[64];
    snprintf(lib, sizeof lib, "%s/agent/libfleetprof.so", bdir());
    snprintf(pre, sizeof pre, "LD_PRELOAD=%s", lib);
    snprintf(iv, sizeof iv, "FLEETPROF_INTERVAL=%s", interval);
    const char *env[8] = {pre, ENV_OUT(dir), iv, "FLEETPROF_SERVICE=insight",
                          "FLEETPROF_LOG_LEVEL=warn"};
    char extras[256];
    extra_env(extra, extras, sizeof extras, env + 5, 2);
    int st = run(env, argv, timeout, out, size);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s %s exited %d: %s", argv[0],
           argv[1] ? argv[1] : "", st, out);
    return dir;
}

/* Runs argv under the agent (chunks every `interval`, extra env), returns the insights. */
static void run_insights(const char *const *argv, const char *interval, const char *extra,
                         double timeout, agg_insights_t *r, char **keep) {
    char out[4096];
    char *dir = run_agent(argv, interval, extra, timeout, out, sizeof out);
    chunks_t *cs = load(dir);
    CHECKF(cs->n > 0, "no chunks from %s", argv[0]);
    prof_t x;
    build(cs, &x);
    CHECK(agg_insights_run(&x.in, NULL, r) == 0);
    printf("# %s %s: %d chunks, %.1f process-s, %zu rules evaluated, %zu fired\n", argv[0],
           argv[1], cs->n, x.in.process_seconds, r->evaluated, r->n);
    for (size_t i = 0; i < r->n; i++) {
        printf("#   %s %.4g (threshold %.4g): %s\n", r->v[i].rule, r->v[i].score,
               r->v[i].threshold, r->v[i].summary);
        for (size_t k = 0; k < r->v[i].n_ev; k++)
            printf("#     %s share %.3f value %.4g\n", r->v[i].ev[k].name, r->v[i].ev[k].share,
                   r->v[i].ev[k].value);
    }
    prof_free(&x);
    free_chunks(cs);
    if (keep) {
        *keep = dir;
        return;
    }
    rmrf(dir);
    free(dir);
}

/* Ingests the chunk files of dir into a new SQLite store as the consume loop does (10 s fine
 * buckets); returns the store directory. */
static char *ingest(const char *dir) {
    chunks_t *cs = load(dir);
    char *store = mkout(), path[4200], err[512];
    agg_store_path(path, sizeof path, store, "fleetprof.chunks", 0);
    agg_store_t *st = NULL;
    CHECKF(agg_store_sqlite_open(path, &st, err, sizeof err) == 0, "%s", err);
    at_ingest_t x;
    at_ingest_init(&x);
    for (int i = 0; i < cs->n; i++) {
        x.b.base_offset = (int64_t)i - 1;
        CHECK(at_ingest_chunk(&x, cs->c[i], NULL) == 0);
        x.b.next_offset = (int64_t)i;
        CHECK_EQ(agg_store_batch_write(st, "fleetprof.chunks", 0, &x.b), 0);
        agg_batch_clear(&x.b);
    }
    at_ingest_free(&x);
    agg_store_close(st);
    free_chunks(cs);
    return store;
}

/* GET url?k=v&... on an API over store (no HTTP); the JSON answer (status 200 checked). */
static json_t *api_get(const char *store, const char *url, const char *const *kv, size_t n) {
    agg_api_cfg_t cfg = {.store_dir = store};
    agg_api_t *api;
    char err[256];
    CHECKF(agg_api_new(&cfg, &api, err, sizeof err) == 0, "%s", err);
    const char *keys[16], *vals[16];
    for (size_t i = 0; i < n; i++)
        keys[i] = kv[2 * i], vals[i] = kv[2 * i + 1];
    agg_http_reply_t r = {.status = 200};
    agg_api_call(api, url, keys, vals, n, &r);
    CHECKF(r.status == 200, "%s: %d %.*s", url, r.status, (int)r.len, r.body ? r.body : "");
    json_t *o = json_loadb(r.body, r.len, 0, NULL);
    CHECKF(o != NULL, "%s: not JSON", url);
    if (!r.body_static)
        free(r.body);
    free(r.headers);
    agg_api_free(api);
    return o;
}

/* The first insight of the service in the store, checked to be rule with site first. */
static json_t *store_insight(const char *store, const char *rule, const char *site) {
    const char *kv[] = {"service", "insight", "from", "0", "to", "4000000000"};
    json_t *o = api_get(store, "/api/v1/insights", kv, 3);
    json_t *x = json_array_get(json_object_get(o, "insights"), 0);
    json_t *e = json_array_get(json_object_get(x, "evidence"), 0);
    const char *r = json_string_value(json_object_get(x, "rule"));
    const char *n = json_string_value(json_object_get(e, "name"));
    printf("# store: %s first, evidence %s, score %.4g\n", r ? r : "-", n ? n : "-",
           json_number_value(json_object_get(x, "score")));
    CHECKF(r && !strcmp(r, rule), "store: first insight %s, want %s", r ? r : "none", rule);
    CHECKF(n && !strncmp(n, site, strlen(site)), "store: first evidence %s, want %s", n, site);
    json_incref(x);
    json_decref(o);
    return x;
}

/* Exactly `rule` fires (the agent's overhead aside) with `site` first; no evidence of any
 * insight names `absent` (NULL: not checked). */
static void expect_one(const char *mode, const char *secs, const char *interval,
                       const char *extra, const char *rule, const char *site,
                       const char *absent, char **keep) {
    char prog[512];
    prog_path("insight_work", prog, sizeof prog);
    const char *argv[] = {prog, mode, secs, NULL};
    agg_insights_t r;
    run_insights(argv, interval, extra, 30 * atof(secs) + 60, &r, keep);
    CHECKF(r.n >= 1 && !strcmp(r.v[0].rule, rule), "%s: want %s first, got %s", mode, rule,
           r.n ? r.v[0].rule : "nothing");
    const char *first = r.v[0].n_ev ? r.v[0].ev[0].name : "-";
    size_t ls = strlen(site); /* C++ names carry their parameters: "parse_int(int)" */
    CHECKF(!strncmp(first, site, ls) && (!first[ls] || first[ls] == '('),
           "%s: first evidence %s, want %s", mode, first, site);
    for (size_t i = 1; i < r.n; i++) /* anything else must not be a share rule of this mode */
        CHECKF(!strcmp(r.v[i].rule, "agent_overhead"), "%s: also %s", mode, r.v[i].rule);
    for (size_t i = 0; absent && i < r.n; i++)
        for (size_t k = 0; k < r.v[i].n_ev; k++)
            CHECKF(strncmp(r.v[i].ev[k].name, absent, strlen(absent)), "%s: %s in the evidence",
                   mode, absent);
    agg_insights_free(&r);
}

static void expect_none(const char *const *argv, double timeout) {
    agg_insights_t r;
    run_insights(argv, "1s", NULL, timeout, &r, NULL);
    CHECKF(r.n == 0, "%s %s: %zu insights, first %s", argv[0], argv[1], r.n,
           r.n ? r.v[0].rule : "");
    CHECK(r.evaluated >= 5);
    agg_insights_free(&r);
}

/* Runs `fleetprof --server ... ARGS` (space-separated words); its stdout into out. Returns
 * the exit status. */
static int cli(int port, const char *args, char *out, size_t size) {
    char bin[512], server[64], words[512], *argv[24];
    snprintf(bin, sizeof bin, "%s/cli/fleetprof", bdir());
    snprintf(server, sizeof server, "http://127.0.0.1:%d", port);
    snprintf(words, sizeof words, "%s", args);
    int n = 0;
    argv[n++] = bin;
    argv[n++] = "--server";
    argv[n++] = server;
    for (char *sv, *w = strtok_r(words, " ", &sv); w && n < 22; w = strtok_r(NULL, " ", &sv))
        argv[n++] = w;
    argv[n] = NULL;
    int st = run(NULL, (const char *const *)argv, 60, out, size);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The CLI's insights, kpm and search on a store, through a real aggregator's HTTP API (no
 * broker: it serves the store while it retries Kafka; port 19897). */
static void check_cli(const char *store) {
    const int port = 19897;
    char log[4200], out[16384];
    snprintf(log, sizeof log, "%s/aggregator.log", store);
    pid_t agg = at_agg_start("127.0.0.1:1", store, "insight-cli", port, log, NULL);
    CHECK(agg > 0);
    int up = 0;
    for (int i = 0; i < 100 && !up; i++, at_sleep_ms(100))
        up = at_http_get(port, "/healthz", out, sizeof out) == 200;
    CHECKF(up, "the aggregator did not answer on %d", port);
    CHECK_EQ(cli(port, "insights --service insight --from 0", out, sizeof out), 0);
    printf("# fleetprof insights:\n%.600s\n", out);
    CHECKF(strstr(out, "1. Lock contention hotspot [lock_contention]") &&
           strstr(out, "log_line()") && strstr(out, "Usual fix: "), "insights: %s", out);
    CHECK_EQ(cli(port, "kpm --service insight --from 0 --by process --kpm lock_wait", out,
                 sizeof out), 0);
    printf("# fleetprof kpm:\n%.400s\n", out);
    CHECKF(strstr(out, "lock_wait") && strstr(out, "HOST:PID"), "kpm: %s", out);
    CHECK_EQ(cli(port, "search --service insight --kpm lock_wait --from 0 --top 1", out,
                 sizeof out), 0);
    printf("# fleetprof search:\n%.400s\n", out);
    CHECKF(strstr(out, "\n1 ") && strstr(out, "/api/v1/profile?service=insight&type=lock&pid="),
           "search: %s", out);
    CHECK_EQ(cli(port, "search --service insight --kpm nonsense --from 0", out, sizeof out), 1);
    CHECKF(!out[0], "a bad --kpm prints no table: %s", out); /* the message is on stderr */
    CHECK_EQ(cli(port, "kpm --service insight --from 0 --json", out, sizeof out), 0);
    json_t *o = json_loads(out, 0, NULL);
    CHECKF(o && json_array_size(json_object_get(o, "kpms")) == AGG_KPM_N, "kpm --json: %s", out);
    json_decref(o);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "curl -fsS 'http://127.0.0.1:%d/api/v1/kpm?service=insight&from=0"
             "&format=prometheus'", port);
    FILE *pc = popen(cmd, "r");
    CHECK(pc != NULL);
    out[fread(out, 1, sizeof out - 1, pc)] = 0;
    CHECK(pclose(pc) == 0);
    const char *g = strstr(out, "\nfleetprof_kpm_lock_wait{service=\"insight\"} ");
    CHECKF(g && atof(g + 44) > 0.1 && strstr(out, "# TYPE fleetprof_kpm_cpu_cores gauge"),
           "prometheus: %.500s", out);
    at_agg_stop(agg, SIGTERM, 10);
}

/* ... and through the store and the API: the evidence's link opens exactly its lock waits;
 * the CLI's insights, kpm and search. */
static void test_lock(void) {
    char *dir;
    expect_one("lock", "2", "1s", NULL, "lock_contention", "log_line", NULL, &dir);
    char *store = ingest(dir);
    json_t *x = store_insight(store, "lock_contention", "log_line");
    json_t *e = json_array_get(json_object_get(x, "evidence"), 0);
    const char *link = json_string_value(json_object_get(e, "link"));
    CHECKF(link && strstr(link, "type=lock") && strstr(link, "include="), "link %s", link);
    const char *inc = json_string_value(json_object_get(e, "include"));
    const char *kv[] = {"service", "insight", "type", "lock", "from", "0", "to", "4000000000",
                        "include", inc};
    json_t *p = api_get(store, "/api/v1/profile", kv, 5);
    double total = json_number_value(json_object_get(p, "total"));
    double value = json_number_value(json_object_get(e, "value")) * 1e9;
    printf("# link: %s\n# filtered lock total %.0f ns, evidence %.0f ns\n", link, total, value);
    CHECKF(fabs(total - value) <= 1e-6 * value + 1, "filtered %.0f != evidence %.0f", total,
           value);
    json_decref(p);
    json_decref(x);
    check_cli(store);
    rmrf(store);
    rmrf(dir);
    free(store);
    free(dir);
}
static void test_churn(void) {
    expect_one("churn", "2", "1s", NULL, "alloc_churn", "build_strings", NULL, NULL);
}
/* ... and through the store (judged by wait per call: the store keeps no bytes per site), its
 * busiest target the program's file, whose link opens that target's I/O. */
static void test_smallio(void) {
    /* the agent records calls from FLEETPROF_IO_FLOOR (50 us) on: these take ~2 us; and it
     * names targets on calls at or above FLEETPROF_IO_THRESHOLD only (10 ms: a quiet machine
     * may have none), so every call is an event here (1 us, rate-capped, weighted) */
    char *dir;
    expect_one("smallio", "2", "1s", "FLEETPROF_IO_FLOOR=0 FLEETPROF_IO_THRESHOLD=0.001",
               "small_io", "log_record", NULL, &dir);
    char *store = ingest(dir);
    json_t *x = store_insight(store, "small_io", "log_record");
    json_t *ev = json_object_get(x, "evidence"), *e, *tg = NULL;
    size_t i;
    json_array_foreach(ev, i, e) {
        if (!tg && json_is_string(json_object_get(e, "io_target")))
            tg = e;
    }
    const char *name = tg ? json_string_value(json_object_get(tg, "io_target")) : NULL;
    const char *link = tg ? json_string_value(json_object_get(tg, "link")) : NULL;
    printf("# target evidence: %s, link %s\n", name ? name : "-", link ? link : "-");
    char *dump = json_dumps(ev, JSON_COMPACT);
    CHECKF(name && strstr(name, "/tmp/insight-io-") && link && strstr(link, "io_target="),
           "no target evidence for the program's file: %s", dump);
    free(dump);
    const char *kv[] = {"service", "insight", "type", "io", "from", "0", "to", "4000000000",
                        "io_target", name};
    json_t *p = api_get(store, "/api/v1/profile", kv, 5);
    CHECKF(json_number_value(json_object_get(p, "total")) > 0, "the target's I/O profile");
    json_decref(p);
    json_decref(x);
    rmrf(store);
    rmrf(dir);
    free(store);
    free(dir);
}
static void test_spin(void) {
    expect_one("spin", "2", "1s", NULL, "busy_wait", "poll_flag", NULL, NULL);
}
static void test_throw(void) {
    expect_one("throw", "2", "1s", NULL, "exception_heavy", "parse_int", NULL, NULL);
}
static void test_copy(void) {
    expect_one("copy", "2", "1s", NULL, "memory_copy", "copy_frames", NULL, NULL);
}
/* 1 MiB/s among stable sites and a cache that plateaus after 8 s: flagged from 50 s of
 * 5-second intervals (the issue: within 2 minutes). */
static void test_leak(void) {
    char *dir;
    expect_one("leak", "50", "5s", NULL, "leak_candidate", "leaky_site", "cache_fill", &dir);
    char *store = ingest(dir); /* 10 s buckets of two heap snapshots each */
    json_t *x = store_insight(store, "leak_candidate", "leaky_site");
    double rate = json_number_value(json_object_get(x, "score"));
    CHECKF(rate > 0.8 * 1048576 && rate < 1.2 * 1048576, "store: leak %.0f B/s", rate);
    CHECK(json_array_size(json_object_get(x, "evidence")) == 1);
    json_decref(x);
    rmrf(store);
    rmrf(dir);
    free(store);
    free(dir);
}

/* The agent's own limits: a program with more threads than its registry holds (1,100
 * connection threads, 1,024 slots) loses the samples of those past it, counted thread_limit:
 * the agent-overhead insight with that reason first; also through the store (drops by reason)
 * and the API. */
static void test_agent_threads(void) {
    char *dir;
    expect_one("overload", "1.5", "1s", NULL, "agent_overhead", "samples dropped: thread_limit",
               NULL, &dir);
    chunks_t *cs = load(dir);
    uint64_t want = 0; /* the chunks' thread_limit count, all of it in the evidence */
    for (int i = 0; i < cs->n; i++)
        for (uint32_t k = 0; k < cs->c[i]->header.n_drops; k++)
            if (cs->c[i]->header.drops[k].reason == CM_DROP_THREAD_LIMIT)
                want += cs->c[i]->header.drops[k].count;
    free_chunks(cs);
    char *store = ingest(dir);
    json_t *x = store_insight(store, "agent_overhead", "samples dropped: thread_limit");
    json_t *e = json_array_get(json_object_get(x, "evidence"), 0);
    double n = json_number_value(json_object_get(e, "value"));
    CHECKF(want >= 50 && n == (double)want, "store: %.0f thread_limit drops, the chunks %llu", n,
           (unsigned long long)want);
    json_decref(x);
    rmrf(store);
    rmrf(dir);
    free(store);
    free(dir);
}

/* ... and a CPU budget too small for the agent's fixed costs (0.01 % of the process's CPU):
 * it samples less, and counts what it did not take as over_budget. 4 s: the budget first steps
 * after a 1 s window and counts drops in the control windows after it; in 2 s a quiet machine
 * ended the run before any (1.5 process-s, no drop). */
static void test_agent_budget(void) {
    expect_one("mixed", "4", "1s", "FLEETPROF_CPU_BUDGET=0.01", "agent_overhead",
               "samples dropped: over_budget", NULL, NULL);
}

static void test_null_mixed(void) {
    char prog[512];
    prog_path("insight_work", prog, sizeof prog);
    const char *argv[] = {prog, "mixed", "2.5", NULL};
    expect_none(argv, 120);
}
static void test_null_cpu(void) {
    char prog[512];
    prog_path("fp-work", prog, sizeof prog);
    const char *a1[] = {prog, "cpu", "2.5", NULL};
    expect_none(a1, 120);
    const char *a2[] = {prog, "cpu4", "2.5", NULL};
    expect_none(a2, 120);
}
static void test_null_demo(void) {
    char prog[512];
    snprintf(prog, sizeof prog, "%s/deploy/demo/demo-service", bdir());
    const char *argv[] = {prog, "--seconds", "5", "--quiet", NULL};
    expect_none(argv, 120);
}

/* Runs insight_work ARGS under the agent; returns the chunk directory, its stdout in out. */
static char *run_prog(const char *const *args, const char *interval, const char *extra,
                      double timeout, char *out, size_t size) {
    char prog[512];
    prog_path("insight_work", prog, sizeof prog);
    const char *argv[8] = {prog};
    for (int i = 0; args[i] && i < 6; i++)
        argv[i + 1] = args[i];
    return run_agent(argv, interval, extra, timeout, out, size);
}

/* The KPM sums of every process-interval of the service in store, added up. */
static agg_kpm_sums_t kpm_total(const char *store, size_t *npts) {
    agg_qstore_t *qs;
    char err[256];
    CHECKF(agg_qstore_open(store, &qs, err, sizeof err) == 0, "%s", err);
    agg_kpmq_t q = {.service = "insight", .from_s = 0, .to_s = 4000000000};
    agg_kpm_point_t *pts;
    CHECK(agg_qstore_kpm(qs, &q, &pts, npts) == 0);
    agg_kpm_sums_t t = {0};
    for (size_t i = 0; i < *npts; i++)
        agg_kpm_sums_add(&t, &pts[i].s);
    free(pts);
    agg_qstore_close(qs);
    return t;
}

/* The relative sd of the sum of the allocation weights, estimated from the samples: each
 * stands for w = s/q bytes (q its probability, the thinning's included), and sum w (w - s) is
 * the Horvitz-Thompson estimate of the variance (alloc_sample.h). Not 1/sqrt(samples) times a
 * constant: the variance is about sum s P over the bytes allocated at period P and the count
 * sum s / P, so by Cauchy-Schwarz the relative variance is E[P] E[1/P] / samples (means over the
 * bytes), >= 1/samples with equality only at a constant P. The controller moves P from 512 KiB
 * at the start to ~50 MiB within a second here: E[P] E[1/P] was 1.2 to 15 over 313 runs, and
 * the start's samples, most of the count, add little certainty. An aggregate row (samples a
 * full ring left to the per-stack sums) counts as one sample of its summed w and s: an upper
 * bound of its variance. */
static double alloc_rsd(const chunks_t *cs) {
    double sum = 0, var = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *a = &cs->c[i]->samples[CM_EV_ALLOC];
        for (uint32_t r = 0; r < a->n; r++) {
            double w = (double)a->weight[r];
            sum += w;
            var += w * (w - (double)CM_COL(a, size, r));
        }
    }
    return sum > 0 ? sqrt(var) / sum : 1;
}

/* KPMs equal the truth the program knows within the sampling error the README states:
 * allocated bytes within 4 sd (estimated from the samples: alloc_rsd), I/O bytes within 4 sd
 * (1/sqrt of the calls recorded: the agent records 1 in N of a thread's calls past 64/s with
 * weight N), lock wait (every contended wait timed) within 10 %. */
static void test_kpm_truth(void) {
    char out[4096];
    const char *args[] = {"truth", "2", NULL};
    char *dir = run_prog(args, "1s", "FLEETPROF_IO_FLOOR=0", 120, out, sizeof out);
    double ab = (double)out_u64(out, "alloc_bytes="), lw = (double)out_u64(out, "lock_wait_ns=");
    double iob = (double)out_u64(out, "io_bytes=");
    chunks_t *cs = load(dir);
    double samples = (double)total(cs, CM_EV_ALLOC, NULL, 0).samples, io_skipped = 0;
    double rsd = alloc_rsd(cs);
    double alloc_lost = 0; /* allocation samples the agent lost (a full ring under load) */
    for (int i = 0; i < cs->n; i++)
        for (uint32_t k = 0; k < cs->c[i]->header.n_drops; k++) {
            const cm_drop_t *dr = &cs->c[i]->header.drops[k];
            if (dr->reason == CM_DROP_SUBSAMPLED && dr->type == CM_EV_IO)
                io_skipped += (double)dr->count;
            if (dr->type == CM_EV_ALLOC && agg_insight_drop_counts(dr->reason))
                alloc_lost += (double)dr->count;
        }
    free_chunks(cs);
    char *store = ingest(dir);
    size_t n;
    agg_kpm_sums_t t = kpm_total(store, &n);
    double ea = (double)t.alloc_bytes / ab - 1, el = (double)t.lock_wait_ns / lw - 1;
    /* 4 sd of the sampling (estimated from the samples: alloc_rsd), plus what the agent says
     * it lost */
    double ei = (double)t.io_bytes / iob - 1,
           tol = 4 * rsd + alloc_lost / (samples + alloc_lost + 1);
    printf("# %zu process-intervals; alloc %.0f vs %.0f (%+.2f%%, %.0f samples, sd %.2f%%, %.0f "
           "lost, tolerance %.1f%%); lock wait %.0f vs %.0f ns (%+.2f%%); io %.0f vs %.0f bytes "
           "(%+.2f%%)\n",
           n, (double)t.alloc_bytes, ab, 100 * ea, samples, 100 * rsd, alloc_lost, 100 * tol,
           (double)t.lock_wait_ns, lw, 100 * el, (double)t.io_bytes, iob, 100 * ei);
    CHECKF(fabs(ea) <= tol, "alloc bytes off by %.2f%% (tolerance %.2f%%)", 100 * ea, 100 * tol);
    CHECKF(fabs(el) <= 0.10, "lock wait off by %.2f%%", 100 * el);
    double io_rec = iob / 4096 - io_skipped; /* the program's calls less those not recorded */
    double io_tol = 4 / sqrt(io_rec > 1 ? io_rec : 1);
    printf("# io: %.0f calls, %.0f estimated, %.0f recorded: tolerance %.1f%%\n", iob / 4096,
           (double)t.io_count / CM_COUNT_ONE, io_rec, 100 * io_tol);
    CHECKF(io_rec >= 50, "only %.0f I/O calls recorded", io_rec);
    CHECKF(fabs(ei) <= io_tol, "io bytes off by %.2f%% (tolerance %.2f%%)", 100 * ei,
           100 * io_tol);
    CHECKF(t.cpu_ns > 0 && t.threads > 0 && t.cpu_sampled_ns > 0,
           "cpu %lld threads %lld sampled %lld", (long long)t.cpu_ns, (long long)t.threads,
           (long long)t.cpu_sampled_ns);
    rmrf(store);
    rmrf(dir);
    free(store);
    free(dir);
}

/* Search: a 10-second allocation spike of one process comes first, by value and by rise over
 * the process's baseline, and its link opens that process's profile of that interval, where
 * spike_site holds most of the bytes. */
static void test_search_spike(void) {
    char out[4096];
    const char *args[] = {"spike", "30", "10", "10", NULL};
    char *dir = run_prog(args, "1s", NULL, 200, out, sizeof out);
    const char *f = strstr(out, "spike_from="), *t = strstr(out, "spike_to=");
    CHECKF(f && t, "no spike figures: %s", out);
    double from = atof(f + 11), to = atof(t + 9);
    char *store = ingest(dir);
    for (int rise = 0; rise < 2; rise++) {
        const char *kv[] = {"service", "insight", "kpm", "alloc_rate", "top", "3",
                            "from", "0", "to", "4000000000", "rise", rise ? "1" : "0"};
        json_t *o = api_get(store, "/api/v1/search", kv, 6);
        json_t *r0 = json_array_get(json_object_get(o, "results"), 0);
        double b = (double)json_integer_value(json_object_get(r0, "bucket"));
        double w = (double)json_integer_value(json_object_get(r0, "width"));
        printf("# search (rise %d): first %.0f+%.0f value %.4g baseline %.4g; spike %.1f-%.1f\n",
               rise, b, w, json_number_value(json_object_get(r0, "value")),
               json_number_value(json_object_get(r0, "baseline")), from, to);
        CHECKF(b < to && b + w > from, "first result %.0f+%.0f misses the spike %.1f-%.1f", b, w,
               from, to);
        if (rise) {
            const char *link = json_string_value(json_object_get(r0, "link"));
            CHECKF(link && strstr(link, "type=alloc") && strstr(link, "pid="), "link %s", link);
            char pid[32], fb[32], tb[32];
            snprintf(pid, sizeof pid, "%lld",
                     (long long)json_integer_value(json_object_get(r0, "pid")));
            snprintf(fb, sizeof fb, "%.0f", b);
            snprintf(tb, sizeof tb, "%.0f", b + w);
            const char *pk[] = {"service", "insight", "type", "alloc", "pid", pid,
                                "from", fb, "to", tb, "include", "spike_site"};
            json_t *all = api_get(store, "/api/v1/profile", pk, 5);
            json_t *sp = api_get(store, "/api/v1/profile", pk, 6);
            double ta = json_number_value(json_object_get(all, "total"));
            double ts = json_number_value(json_object_get(sp, "total"));
            printf("# link %s: spike_site %.0f of %.0f bytes\n", link, ts, ta);
            CHECKF(ta > 0 && ts / ta > 0.5, "spike_site %.0f of %.0f bytes", ts, ta);
            json_decref(all);
            json_decref(sp);
        }
        json_decref(o);
    }
    rmrf(store);
    rmrf(dir);
    free(store);
    free(dir);
}

/* The per-deploy report of a version that brought a lock hotspot lists it in new_insights; the
 * version before it (the mixed workload) had none. */
static void test_report_new_insights(void) {
    char out[4096], cmd[8400];
    const char *a1[] = {"mixed", "2", NULL}, *a2[] = {"lock", "2", NULL};
    char *d1 = run_prog(a1, "1s", "FLEETPROF_VERSION=v1", 200, out, sizeof out);
    char *d2 = run_prog(a2, "1s", "FLEETPROF_VERSION=v2", 200, out, sizeof out);
    snprintf(cmd, sizeof cmd, "cp '%s'/*.fpc '%s'/", d2, d1);
    CHECK(system(cmd) == 0);
    char *store = ingest(d1);
    agg_reports_cfg_t cfg = {.store_dir = store, .min_samples = 50};
    int made = agg_reports_run_once(&cfg);
    CHECKF(made == 1, "%d reports", made);
    json_t *list;
    CHECK(agg_reports_list(store, "insight", 10, &list) == 0);
    char *txt = json_dumps(list, JSON_COMPACT);
    printf("# reports: %.200s...\n", txt);
    json_t *ni = json_object_get(json_object_get(json_array_get(list, 0), "diff"), "new_insights");
    json_t *first = json_array_get(ni, 0);
    const char *rule = json_string_value(json_object_get(first, "rule"));
    CHECKF(json_array_size(ni) == 1 && rule && !strcmp(rule, "lock_contention"),
           "new_insights of v2: %s", txt);
    free(txt);
    json_decref(list);
    rmrf(store);
    rmrf(d1);
    rmrf(d2);
    free(store);
    free(d1);
    free(d2);
}

static const tr_test_t tests[] = {
    {"lock", test_lock},           {"churn", test_churn},         {"smallio", test_smallio},
    {"spin", test_spin},           {"throw", test_throw},         {"copy", test_copy},
    {"leak", test_leak},           {"agent_threads", test_agent_threads},
    {"agent_budget", test_agent_budget},
               {"null_mixed", test_null_mixed}, {"null_cpu", test_null_cpu},
    {"null_demo", test_null_demo}, {"kpm_truth", test_kpm_truth},
    {"search_spike", test_search_spike}, {"report_new_insights", test_report_new_insights},
    {0}};
TR_MAIN(tests)
