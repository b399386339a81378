/* Incidents in the agent (issue 32): the flight recorder and its triggers, on incident_svc
 * (tests/programs/incident_svc.c, linked to the agent) writing chunks to FLEETPROF_OUTPUT,
 * read back through the codec.
 *   spikes       3 CPU spikes in spike_spin (requests slowing), 16 s apart: exactly 3
 *                overload incidents, each within 2 s of its spike's start, each capture
 *                holding >= 3 s of samples before its trigger, spike_spin only after the
 *                spike began, parts 0..n-1 complete; then every chunk loaded into a SQLite
 *                store as the aggregator's consumer does (ingest/incidents.c for captures):
 *                the incidents API lists the 3, and each incident's diff against the
 *                seconds before ranks spike_spin first, a significant regression, the only
 *                finding
 *   hang         requests blocked on a lock for 20 s: one hang incident whose capture has
 *                wall samples of the waiting requests in wait_for_lock after the trigger
 *   steady_ramp  steady load, then 3x the request rate with fast requests: no incident (with
 *                GET /work's own slow threshold, 50 ms)
 *   slow_by_endpoint  FLEETPROF_SLOW_MS_BY_ENDPOINT: requests slowing 2 -> 100 ms, the global
 *                threshold 10 s: an overload incident with GET /work=50, none without
 *   growing      requests piling up behind a held lock: one "growing" incident
 *   growing_null 16 workers, steady: no incident
 *   steady_bench bench/incident-steady.sh: the same over 10 minutes and a linear ramp
 *   manual       fleetprof_capture(): one manual incident, none with the recorder off
 *   signal       FLEETPROF_CAPTURE_SIGNAL: the program's own handler untouched, then a capture
 *   baseline     lock wait k times its baseline (FLEETPROF_TRIGGER_BASELINE): a lock incident
 *   links        an incident listed by the report of its deploy, its endpoint's page and the
 *                requests it overlaps
 *   exit         the process exits (returns, SIGTERM) during a capture: the capture is written
 *   density      the recorder's own density: ~4x the stream's CPU samples in a capture, the same
 *                totals; the stream's rate and totals as with the recorder off; its budget
 */
#include "agent-common.h"

#include "aggtest.h"
#include "api.h"
#include "reports.h"
#include "store.h"

#include "cm/file.h"

#include <jansson.h>

#define MAX_INC 16

typedef struct {
    uint8_t id[CM_INCIDENT_ID_LEN];
    char trigger[CM_MAX_TRIGGER_LEN + 1];
    uint64_t trigger_ns, value_milli, first_sample_ns, capture_start;
    uint32_t parts, seen;
    uint32_t part_mask_lo; /* parts 0..31 seen */
} inc_t;

typedef struct {
    inc_t v[MAX_INC];
    int n;
    int ordinary; /* chunks without an incident */
} incs_t;

static inc_t *inc_of(incs_t *is, const cm_incident_t *ci) {
    for (int i = 0; i < is->n; i++)
        if (!memcmp(is->v[i].id, ci->id, CM_INCIDENT_ID_LEN))
            return &is->v[i];
    CHECK(is->n < MAX_INC);
    inc_t *x = &is->v[is->n++];
    memset(x, 0, sizeof *x);
    memcpy(x->id, ci->id, CM_INCIDENT_ID_LEN);
    snprintf(x->trigger, sizeof x->trigger, "%s", ci->trigger.ptr);
    x->trigger_ns = ci->trigger_unix_ns;
    x->value_milli = ci->value_milli;
    x->parts = ci->parts;
    x->capture_start = ci->capture_start_unix_ns;
    x->first_sample_ns = UINT64_MAX;
    return x;
}

static incs_t incidents(const chunks_t *cs) {
    incs_t is = {0};
    for (int i = 0; i < cs->n; i++) {
        const cm_chunk_t *c = cs->c[i];
        if (!c->incident.present) {
            is.ordinary++;
            continue;
        }
        inc_t *x = inc_of(&is, &c->incident);
        CHECK_EQ(c->incident.parts, x->parts);
        CHECK_EQ(c->incident.trigger_unix_ns, x->trigger_ns);
        CHECK(c->incident.part < x->parts && c->incident.part < 32);
        CHECKF(!(x->part_mask_lo & (1u << c->incident.part)), "part %u twice", c->incident.part);
        x->part_mask_lo |= 1u << c->incident.part;
        x->seen++;
        for (int t = CM_EV_CPU; t <= CM_EV_WALL; t++)
            for (uint32_t r = 0; r < c->samples[t].n; r++)
                if (c->samples[t].time_ns[r] < x->first_sample_ns)
                    x->first_sample_ns = c->samples[t].time_ns[r];
    }
    for (int i = 0; i < is.n; i++)
        CHECKF(is.v[i].seen == is.v[i].parts, "incident %d: %u of %u parts", i, is.v[i].seen,
               is.v[i].parts);
    return is;
}

/* 1 when chunk c belongs to incident id's capture (id NULL: when it is an ordinary chunk). */
static int in_capture(const cm_chunk_t *c, const uint8_t *id) {
    if (!id)
        return !c->incident.present;
    return c->incident.present && !memcmp(c->incident.id, id, CM_INCIDENT_ID_LEN);
}

/* Samples of type in the incident's chunks (all if id NULL: ordinary chunks only) whose
 * stack has fn, from time from on, split at time t: before and at/after. */
static void split(const chunks_t *cs, const uint8_t *id, cm_event_type_t type, const char *fn,
                  uint64_t from, uint64_t t, uint64_t *before, uint64_t *after) {
    *before = *after = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_chunk_t *c = cs->c[i];
        if (!in_capture(c, id))
            continue;
        const cm_samples_t *s = &c->samples[type];
        for (uint32_t r = 0; r < s->n; r++)
            if (s->time_ns[r] >= from && stack_has(&c->dict, s->stack[r], fn))
                (s->time_ns[r] < t ? before : after)[0]++;
    }
}

static void ingest_dir(const char *dir, const char *store) {
    char err[512];
    CHECKF(at_ingest_dir(dir, store, err, sizeof err) == 0, "%s", err);
}

/* GET url?keys=vals on the API over store (agg_api_call: the route's handler, no HTTP);
 * returns the parsed JSON body, *status its status. */
static json_t *api_get(agg_api_t *api, const char *url, const char *k1, const char *v1,
                       const char *k2, const char *v2, int *status) {
    const char *keys[2] = {k1, k2}, *vals[2] = {v1, v2};
    agg_http_reply_t r = {0};
    agg_api_call(api, url, keys, vals, k2 ? 2 : 1, &r);
    *status = r.status;
    json_t *o = json_loadb(r.body ? r.body : "", r.len, 0, NULL);
    CHECKF(o != NULL, "%s: not JSON: %.200s", url, r.body ? r.body : "");
    if (!r.body_static)
        free(r.body);
    free(r.headers);
    return o;
}

/* The incidents API on the store: n incidents of incident_svc (spikes at spike[], their last
 * requests done at spike_end[]), each diff led by spike_spin with nothing else flagged; a
 * malformed and an unknown id. */
static void check_store(const char *store, int n, const uint64_t *spike,
                        const uint64_t *spike_end) {
    char err[768];
    agg_api_cfg_t cfg = {.store_dir = store};
    agg_api_t *api = NULL;
    CHECKF(agg_api_new(&cfg, &api, err, sizeof err) == 0, "%s", err);
    int status = 0;
    json_t *l = api_get(api, "/api/v1/incidents", "service", "incident_svc", "from", "-1h",
                        &status);
    CHECKF(status == 200, "list: %d", status);
    json_t *arr = json_object_get(l, "incidents");
    CHECKF(json_array_size(arr) == (size_t)n, "%zu incidents listed", json_array_size(arr));
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *x = json_array_get(arr, i);
        CHECK(json_is_true(json_object_get(x, "complete")));
        CHECK(!strcmp(json_string_value(json_object_get(x, "trigger")), "overload"));
        const char *hex = json_string_value(json_object_get(x, "id"));
        json_t *o = api_get(api, "/api/v1/incident", "id", hex, NULL, NULL, &status);
        CHECKF(status == 200, "show %s: %d", hex, status);
        CHECK(json_array_size(json_object_get(o, "timeline")) ==
              (size_t)json_integer_value(json_object_get(x, "parts")));
        CHECK(json_integer_value(json_object_get(json_object_get(o, "tree"), "nodes")) > 3);
        json_t *d = json_object_get(o, "diff");
        json_t *e0 = json_array_get(json_object_get(d, "entries"), 0);
        const char *first = json_string_value(json_object_get(e0, "name"));
        long long regs = json_integer_value(json_object_get(d, "regressions"));
        long long imps = json_integer_value(json_object_get(d, "improvements"));
        printf("# stored incident %zu: %zu timeline chunks, diff: first %s (%s), %lld "
               "regressions, %lld improvements\n", i,
               json_array_size(json_object_get(o, "timeline")), first ? first : "(none)",
               json_string_value(json_object_get(e0, "class")), regs, imps);
        if (getenv("FP_TEST_VERBOSE")) {
            char *dump = json_dumps(d, JSON_COMPACT);
            printf("# diff: %s\n", dump ? dump : "");
            free(dump);
        }
        CHECKF(first && strstr(first, "spike_spin"), "incident %zu: diff led by %s", i,
               first ? first : "(none)");
        /* first: the spike function, new in the capture, a significant regression; nothing
         * else flagged (clock_gettime, which its loop calls, is folded into it) */
        CHECKF(!strcmp(json_string_value(json_object_get(e0, "class")), "regression"),
               "incident %zu: %s is %s", i, first, json_string_value(json_object_get(e0, "class")));
        CHECKF(regs == 1 && imps == 0, "incident %zu: %lld regressions, %lld improvements", i,
               regs, imps);
        json_t *ents = json_object_get(d, "entries");
        for (size_t k = 1; k < json_array_size(ents); k++) {
            const char *cls = json_string_value(json_object_get(json_array_get(ents, k), "class"));
            CHECKF(!strcmp(cls, "noise") || !strcmp(cls, "untested"), "incident %zu: %s %s", i,
                   json_string_value(json_object_get(json_array_get(ents, k), "name")), cls);
        }
        /* before (the chunks that ended 2-5 s before the trigger, so from ~6 s before it):
         * none, unless the previous spike's last request ended in it (on a loaded host a
         * 250 ms-of-CPU request takes seconds) */
        int64_t trig = json_integer_value(json_object_get(x, "trigger_ns"));
        uint64_t prev_end = 0;
        for (int j = 1; j < n; j++)
            if (spike[j] <= (uint64_t)trig)
                prev_end = spike_end[j - 1];
        long long bs = json_integer_value(json_object_get(e0, "base_samples"));
        long long ts = json_integer_value(json_object_get(e0, "test_samples"));
        CHECKF((bs == 0 || (int64_t)prev_end > trig - 6500000000ll) && ts >= 50,
               "incident %zu: spike_spin %lld samples before, %lld after (the previous spike's "
               "last request ended %.2f s before the trigger)", i, bs, ts,
               prev_end ? (double)(trig - (int64_t)prev_end) / 1e9 : -1.0);
        json_decref(o);
    }
    json_decref(l);
    json_t *o = api_get(api, "/api/v1/incident", "id", "12", NULL, NULL, &status);
    CHECKF(status == 400, "malformed id: %d", status);
    json_decref(o);
    o = api_get(api, "/api/v1/incident", "id", "00000000000000000000000000000000", NULL, NULL,
                &status);
    CHECKF(status == 404, "unknown id: %d", status);
    json_decref(o);
    agg_api_free(api);
}

static const char *const g_trig_env[] = {
    "FLEETPROF_RECORDER=1",          "FLEETPROF_RECORDER_WINDOW=10s",
    "FLEETPROF_RECORDER_AFTER=6s",   "FLEETPROF_TRIGGER_SLOW=100ms",
    "FLEETPROF_TRIGGER_SLOW_RATIO=0.5", "FLEETPROF_TRIGGER_OVERLOAD_CPU=0.05",
    "FLEETPROF_TRIGGER_COOLDOWN=12s", /* past a spike's stragglers on a loaded host */
    /* 4x the default density in the stream too: the diff of a few seconds before against a
     * few after needs the samples (at a 4 ms period the recorder's own density adds none: the
     * kernel's tick) */
    "FLEETPROF_CPU_RATE=400",        "FLEETPROF_CPU_HZ=250",
};
#define N_TRIG_ENV (sizeof g_trig_env / sizeof g_trig_env[0])

static int g_expect_signal; /* run_svc: the program dies of this signal (0: exits 0) */
static const char *g_extra_env; /* run_svc: "K=V;K=V" more for the agent (or instead of
                                 * g_trig_env's K) */
static const char *g_keep_to; /* run_svc: copies the chunk files here */

static chunks_t *run_svc(const char *const *args, double timeout, char *out, size_t size,
                         int recorder, const char *store) {
    char *dir = mkout(), envbuf[4200], prog[4096];
    const char *env[N_TRIG_ENV + 5] = {ENV_OUT(dir)};
    size_t ne = 1;
    char extra[256];
    snprintf(extra, sizeof extra, ";%s", g_extra_env ? g_extra_env : "");
    for (size_t i = 0; i < N_TRIG_ENV; i++) {
        char key[64]; /* ";KEY=": one of g_extra_env's replaces it */
        snprintf(key, sizeof key, ";%.*s", (int)(strchr(g_trig_env[i], '=') - g_trig_env[i] + 1),
                 g_trig_env[i]);
        if (!strstr(extra, key))
            env[ne++] = i == 0 && !recorder ? "FLEETPROF_RECORDER=0" : g_trig_env[i];
    }
    for (char *sv, *kv = strtok_r(extra, ";", &sv); kv && ne < N_TRIG_ENV + 4;
         kv = strtok_r(NULL, ";", &sv))
        env[ne++] = kv;
    env[ne] = NULL;
    prog_path("incident_svc", prog, sizeof prog);
    const char *argv[6] = {prog};
    for (int i = 0; args[i] && i < 4; i++)
        argv[i + 1] = args[i];
    int st = run(env, argv, timeout, out, size);
    if (g_expect_signal)
        CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == g_expect_signal,
               "incident_svc: status %d, not killed by signal %d: %s", st, g_expect_signal, out);
    else
        CHECKF(st == 0, "incident_svc exited with status %d: %s", st, out);
    chunks_t *cs = load(dir);
    if (store)
        ingest_dir(dir, store);
    if (g_keep_to) { /* the chunk files kept for a later ingest of several runs */
        char cmd[8600];
        snprintf(cmd, sizeof cmd, "cp '%s'/*.fpc '%s'/", dir, g_keep_to);
        CHECK(system(cmd) == 0);
    }
    rmrf(dir);
    free(dir);
    return cs;
}

#define MAX_SPIKES 16

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* n spikes gap_s apart: n overload incidents, each within 2 s of its spike, >= 3 s before
 * its trigger, spike_spin only from its spike on; store: also through the aggregator's path.
 * Prints the latencies and their p95. */
static void spikes(int n, int gap_s, const char *store) {
    char out[16384], na[16], ga[16];
    snprintf(na, sizeof na, "%d", n);
    snprintf(ga, sizeof ga, "%d", gap_s);
    const char *args[] = {"spikes", na, ga, NULL};
    chunks_t *cs = run_svc(args, 30.0 + n * gap_s, out, sizeof out, 1, store);
    incs_t is = incidents(cs);
    uint64_t spike[MAX_SPIKES], spike_end[MAX_SPIKES];
    double lats[MAX_SPIKES];
    const char *p = out;
    CHECK(n <= MAX_SPIKES);
    for (int i = 0; i < n; i++) {
        p = strstr(p, "spike_start ");
        CHECKF(p, "spike %d missing: %s", i, out);
        spike[i] = strtoull(p + 12, NULL, 10);
        p = strstr(p, "spike_end ");
        CHECKF(p, "spike %d's end missing: %s", i, out);
        spike_end[i] = strtoull(p + 10, NULL, 10);
    }
    for (int i = 0; i < is.n && is.n != n; i++) /* which one is extra or missing */
        printf("# incident %d of %d: %s %.2f s after the first spike began\n", i, is.n,
               is.v[i].trigger, ((double)is.v[i].trigger_ns - (double)spike[0]) / 1e9);
    CHECKF(is.n == n, "%d incidents for %d spikes", is.n, n);
    for (int i = 0; i < n; i++) {
        inc_t *x = &is.v[i];
        double lat = lats[i] = ((double)x->trigger_ns - (double)spike[i]) / 1e9;
        double pre = ((double)x->trigger_ns - (double)x->first_sample_ns) / 1e9;
        printf("# incident %d: %s, value %.3f, %.2f s after the spike began, %u chunks, "
               "%.2f s of samples before the trigger\n", i, x->trigger,
               (double)x->value_milli / 1000, lat, x->parts, pre);
        CHECKF(!strcmp(x->trigger, "overload"), "incident %d trigger %s", i, x->trigger);
        CHECKF(lat >= 0 && lat <= 2.0, "incident %d fired %.2f s after its spike", i, lat);
        CHECKF(pre >= 3.0, "incident %d holds %.2f s before its trigger", i, pre);
        uint64_t before, after;
        /* spike_spin: none between the previous spike's end and this one (the process never
         * calls it otherwise; a capture may begin before the previous spike ended) */
        uint64_t from = i ? spike_end[i - 1] : 0;
        split(cs, x->id, CM_EV_CPU, "spike_spin", from, spike[i], &before, &after);
        CHECKF(before == 0 && after > 20, "incident %d: spike_spin %llu samples before the "
               "spike, %llu after", i, (unsigned long long)before, (unsigned long long)after);
        split(cs, x->id, CM_EV_CPU, "steady_work", from, spike[i], &before, &after);
        CHECKF(before > 0, "incident %d: no steady_work before the spike", i);
    }
    qsort(lats, (size_t)n, sizeof *lats, cmp_double);
    /* nearest rank */
    int k = (int)(0.95 * n + 0.999999) - 1;
    printf("# %d spikes %d s apart: trigger latency min %.2f s, median %.2f s, p95 %.2f s, "
           "max %.2f s\n", n, gap_s, lats[0], lats[n / 2], lats[k < 0 ? 0 : k], lats[n - 1]);
    CHECK(is.ordinary > 0);
    free_chunks(cs);
    if (store)
        check_store(store, n, spike, spike_end);
}

static void test_spikes(void) {
    char *store = mkout();
    spikes(3, 16, store); /* 16 s: a loaded host's last spike requests end before the next
                           * incident's base (12 s: under load they often did not) */
    if (getenv("FP_KEEP_STORE")) /* for a look with the aggregator and the CLI */
        printf("# store kept: %s\n", store);
    else
        rmrf(store);
    free(store);
}

/* bench/incident-spikes.sh: FP_SPIKES (10) spikes FP_GAP (60) s apart, the p95 of the
 * trigger latency and each incident's diff (not run by ctest: 10 minutes) */
static void test_spikes_bench(void) {
    int n = getenv("FP_SPIKES") ? atoi(getenv("FP_SPIKES")) : 10;
    int gap = getenv("FP_GAP") ? atoi(getenv("FP_GAP")) : 60;
    CHECKF(n >= 1 && n <= MAX_SPIKES && gap >= 12, "FP_SPIKES %d (1-16), FP_GAP %d (>= 12)", n,
           gap);
    char *store = mkout(); /* each incident's diff too, as the spikes case checks them */
    spikes(n, gap, store);
    rmrf(store);
    free(store);
}

static void test_hang(void) {
    char out[8192];
    const char *args[] = {"hang", "20", NULL};
    chunks_t *cs = run_svc(args, 90, out, sizeof out, 1, NULL);
    incs_t is = incidents(cs);
    const char *p = strstr(out, "hang_start ");
    CHECKF(p, "no hang_start: %s", out);
    uint64_t hang = strtoull(p + 11, NULL, 10);
    CHECKF(is.n == 1, "%d incidents for one hang", is.n);
    inc_t *x = &is.v[0];
    double lat = ((double)x->trigger_ns - (double)hang) / 1e9;
    printf("# hang incident: %s, value %.3f s, %.2f s after the lock was taken\n", x->trigger,
           (double)x->value_milli / 1000, lat);
    CHECKF(!strcmp(x->trigger, "hang"), "trigger %s", x->trigger);
    CHECKF(lat >= 10.0 && lat <= 12.0, "hang incident %.2f s after the lock was taken", lat);
    uint64_t before, after;
    split(cs, x->id, CM_EV_WALL, "wait_for_lock", 0, x->trigger_ns - 5000000000ull, &before, &after);
    CHECKF(after >= 10, "capture: %llu wall samples of waiting requests in wait_for_lock",
           (unsigned long long)after);
    free_chunks(cs);
}

static void test_steady_ramp(void) {
    char out[8192];
    const char *args[] = {"ramp", "24", NULL};
    g_extra_env = "FLEETPROF_SLOW_MS_BY_ENDPOINT=GET /work=50"; /* 25x its 2 ms */
    chunks_t *cs = run_svc(args, 90, out, sizeof out, 1, NULL);
    g_extra_env = NULL;
    incs_t is = incidents(cs);
    CHECKF(is.n == 0, "%d incidents under steady then uniformly higher fast load (first: %s)",
           is.n, is.n ? is.v[0].trigger : "");
    CHECK_EQ(drops(cs, CM_DROP_INCIDENT_COOLDOWN) + drops(cs, CM_DROP_INCIDENT_CAP), 0);
    tot_t steady = total(cs, CM_EV_CPU, "steady_work", 0);
    CHECK(steady.samples > 100);
    free_chunks(cs);
}

/* bench/incident-steady.sh: FP_STEADY (600) s of steady load, then the request rate tripled
 * linearly over FP_RAMP (120) s with requests staying fast, then 10 s at that rate: no incident
 * and no suppressed trigger (not run by ctest: 12 minutes). Prints the counts. */
static void test_steady_bench(void) {
    int steady = getenv("FP_STEADY") ? atoi(getenv("FP_STEADY")) : 600;
    int ramp = getenv("FP_RAMP") ? atoi(getenv("FP_RAMP")) : 120;
    CHECKF(steady >= 10 && ramp >= 0, "FP_STEADY %d (>= 10), FP_RAMP %d (>= 0)", steady, ramp);
    char out[8192], sa[16], ra[16];
    snprintf(sa, sizeof sa, "%d", steady);
    snprintf(ra, sizeof ra, "%d", ramp);
    const char *args[] = {"ramp", sa, ra, NULL};
    chunks_t *cs = run_svc(args, steady + ramp + 300.0, out, sizeof out, 1, NULL);
    incs_t is = incidents(cs);
    uint64_t supp = drops(cs, CM_DROP_INCIDENT_COOLDOWN) + drops(cs, CM_DROP_INCIDENT_CAP);
    uint64_t n0 = out_u64(out, "steady_requests "), n = out_u64(out, "\nrequests ");
    printf("# %d s steady (%.1f requests/s), %d s ramp to 3x + 10 s (%.1f requests/s after the "
           "steady part): %d incidents (first: %s), %llu suppressed triggers, %llu of %llu "
           "requests >= 100 ms, longest %.1f ms, %d chunks\n", steady, (double)n0 / steady, ramp,
           (double)(n - n0) / (ramp + 10), is.n, is.n ? is.v[0].trigger : "-",
           (unsigned long long)supp, (unsigned long long)out_u64(out, "slow_requests "),
           (unsigned long long)n, (double)out_u64(out, "max_request_us ") / 1000, cs->n);
    CHECKF(is.n == 0, "%d incidents under steady then uniformly higher fast load", is.n);
    CHECK_EQ(supp, 0);
    CHECK(n0 > 0 && n > n0);
    free_chunks(cs);
}

static void test_manual(void) {
    char out[8192];
    const char *args[] = {"manual", NULL};
    chunks_t *cs = run_svc(args, 60, out, sizeof out, 1, NULL);
    CHECKF(out_u64(out, "capture_rc ") == 0, "%s", out);
    incs_t is = incidents(cs);
    CHECKF(is.n == 1 && !strcmp(is.v[0].trigger, "manual"), "%d incidents", is.n);
    CHECK(is.v[0].trigger_ns - is.v[0].first_sample_ns >= 3000000000ull);
    free_chunks(cs);
    /* recorder off: the call says so and nothing extra leaves the process */
    cs = run_svc(args, 60, out, sizeof out, 0, NULL);
    CHECKF(strstr(out, "capture_rc -95"), "%s", out); /* -ENOTSUP */
    is = incidents(cs);
    CHECK_EQ(is.n, 0);
    free_chunks(cs);
}

/* The process exits 1 s into a manual capture's 6 s burst, by returning from main, then by
 * dying of SIGTERM: the capture is written all the same (all its parts, >= 3 s before the
 * trigger, samples after it), its burst ending at the exit. */
static void test_exit(void) {
    static const char *const how[] = {"return", "term"};
    for (int k = 0; k < 2; k++) {
        char out[8192];
        const char *args[] = {"exit", how[k], NULL};
        g_expect_signal = k ? SIGTERM : 0;
        chunks_t *cs = run_svc(args, 60, out, sizeof out, 1, NULL);
        g_expect_signal = 0;
        CHECKF(out_u64(out, "capture_rc ") == 0, "%s", out);
        uint64_t exit_ns = out_u64(out, "exit_ns ");
        incs_t is = incidents(cs);
        CHECKF(is.n == 1 && !strcmp(is.v[0].trigger, "manual"), "%s: %d incidents", how[k],
               is.n);
        inc_t *x = &is.v[0];
        uint64_t before, after;
        split(cs, x->id, CM_EV_CPU, "steady_work", 0, x->trigger_ns, &before, &after);
        printf("# exit (%s) 1 s into the burst: %u chunks, %.2f s before the trigger, %llu CPU "
               "samples of steady_work after it\n", how[k], x->parts,
               (double)(x->trigger_ns - x->first_sample_ns) / 1e9, (unsigned long long)after);
        CHECK(x->trigger_ns - x->first_sample_ns >= 3000000000ull);
        CHECK(after > 0 && x->trigger_ns < exit_ns);
        CHECK_EQ(drops(cs, CM_DROP_INCIDENT_LOST), 0);
        free_chunks(cs);
    }
}

/* FLEETPROF_CAPTURE_SIGNAL=SIGUSR2: the program sees SIG_DFL, installs its own handler (which
 * runs, no capture), sets SIG_DFL again: the next SIGUSR2 is one "signal" incident (the
 * process lives), >= 3 s before the trigger. */
static void test_signal(void) {
    char out[8192];
    const char *args[] = {"signal", NULL};
    g_extra_env = "FLEETPROF_CAPTURE_SIGNAL=SIGUSR2";
    chunks_t *cs = run_svc(args, 60, out, sizeof out, 1, NULL);
    g_extra_env = NULL;
    CHECKF(out_u64(out, "app_saw_dfl ") == 1, "%s", out);
    CHECKF(out_u64(out, "own_handler_ran ") == 1, "%s", out);
    CHECKF(out_u64(out, "app_saw_own ") == 1, "%s", out);
    uint64_t sent = out_u64(out, "signal_ns ");
    incs_t is = incidents(cs);
    CHECKF(is.n == 1, "%d incidents", is.n);
    inc_t *x = &is.v[0];
    double lat = ((double)x->trigger_ns - (double)sent) / 1e9;
    printf("# signal incident: %s, value %.0f, %.3f s after the signal, %.2f s before it\n",
           x->trigger, (double)x->value_milli / 1000, lat,
           (double)(x->trigger_ns - x->first_sample_ns) / 1e9);
    CHECKF(!strcmp(x->trigger, "signal") && x->value_milli == SIGUSR2 * 1000u, "%s %llu",
           x->trigger, (unsigned long long)x->value_milli);
    CHECKF(lat >= 0 && lat < 1.0, "capture %.3f s after the signal", lat);
    CHECK(x->trigger_ns - x->first_sample_ns >= 3000000000ull);
    free_chunks(cs);
}

/* The request's incidents in its /span answer (the capture's window overlaps it), checked on
 * every request of the list that has samples; returns how many had one. */
static int check_request_links(agg_api_t *api, json_t *reqs, int64_t cap_start, int64_t cap_end) {
    int in = 0, out = 0, status;
    for (size_t i = 0; i < json_array_size(reqs); i++) {
        json_t *q = json_array_get(reqs, i);
        int64_t st = json_integer_value(json_object_get(q, "start_ns"));
        int64_t en = json_integer_value(json_object_get(q, "end_ns"));
        json_t *o = api_get(api, "/api/v1/span", "trace",
                            json_string_value(json_object_get(q, "trace_id")), "span",
                            json_string_value(json_object_get(q, "span_id")), &status);
        if (status == 200) { /* 404: a request without samples */
            size_t n = json_array_size(json_object_get(o, "incidents"));
            int overlaps = st <= cap_end && en >= cap_start;
            CHECKF(n == (size_t)overlaps, "request %lld..%lld: %zu incidents, capture %lld..%lld",
                   (long long)st, (long long)en, n, (long long)cap_start, (long long)cap_end);
            (overlaps ? &in : &out)[0]++;
        }
        json_decref(o);
    }
    printf("# /span of %d requests inside the capture: 1 incident each; %d outside: none\n", in,
           out);
    CHECK(in > 0 && out > 0);
    return in;
}

/* Links to incidents: v1 without the recorder, then v2 with a manual capture, in one store
 * with v2's per-deploy report (agg_reports_run_once): the report lists v2's incident, the
 * endpoint's page lists it for v2 and not for v1, and each request's /span lists it exactly
 * when the request overlaps the captured window. */
static void test_links(void) {
    char out[8192], *keep = mkout(), *store = mkout(), err[512];
    const char *a1[] = {"exit", "return", NULL}, *a2[] = {"manual", NULL};
    g_keep_to = keep;
    g_extra_env = "FLEETPROF_VERSION=v1";
    chunks_t *cs = run_svc(a1, 60, out, sizeof out, 0, NULL);
    free_chunks(cs);
    g_extra_env = "FLEETPROF_VERSION=v2";
    cs = run_svc(a2, 60, out, sizeof out, 1, NULL);
    g_extra_env = g_keep_to = NULL;
    incs_t is = incidents(cs);
    CHECK_EQ(is.n, 1);
    free_chunks(cs);
    ingest_dir(keep, store);
    /* one sample a side: the report's diff is not what is tested (a loaded host samples few) */
    agg_reports_cfg_t rc = {.store_dir = store, .min_samples = 1};
    CHECKF(agg_reports_run_once(&rc) == 1, "no report of v2");
    agg_api_cfg_t cfg = {.store_dir = store};
    agg_api_t *api = NULL;
    CHECKF(agg_api_new(&cfg, &api, err, sizeof err) == 0, "%s", err);
    int status;
    json_t *l = api_get(api, "/api/v1/incidents", "service", "incident_svc", NULL, NULL, &status);
    json_t *inc = json_array_get(json_object_get(l, "incidents"), 0);
    const char *id = json_string_value(json_object_get(inc, "id"));
    CHECK(status == 200 && id);
    json_t *o = api_get(api, "/api/v1/reports", "service", "incident_svc", NULL, NULL, &status);
    json_t *rep = json_array_get(json_object_get(o, "reports"), 0);
    json_t *ri = json_object_get(rep, "incidents");
    CHECKF(status == 200 && json_array_size(ri) == 1 &&
               !strcmp(json_string_value(json_object_get(json_array_get(ri, 0), "id")), id),
           "report %s: %zu incidents", json_string_value(json_object_get(rep, "test")),
           json_array_size(ri));
    json_decref(o);
    static const char *const ver[] = {"v1", "v2"};
    for (int v = 0; v < 2; v++) {
        const char *keys[3] = {"service", "endpoint", "version"};
        const char *vals[3] = {"incident_svc", "GET /work", ver[v]};
        agg_http_reply_t r = {0};
        agg_api_call(api, "/api/v1/endpoint", keys, vals, 3, &r);
        o = json_loadb(r.body ? r.body : "", r.len, 0, NULL);
        CHECKF(r.status == 200 && o, "endpoint %s: %d %.300s", ver[v], r.status, r.body ? r.body : "");
        size_t n = json_array_size(json_object_get(o, "incidents"));
        CHECKF(n == (size_t)v, "endpoint of %s: %zu incidents", ver[v], n);
        json_decref(o);
        if (!r.body_static)
            free(r.body);
        free(r.headers);
    }
    o = api_get(api, "/api/v1/requests", "service", "incident_svc", "limit", "0", &status);
    CHECK(status == 200);
    check_request_links(api, json_object_get(o, "requests"),
                        json_integer_value(json_object_get(inc, "start_ns")),
                        json_integer_value(json_object_get(inc, "end_ns")));
    json_decref(o);
    json_decref(l);
    agg_api_free(api);
    rmrf(keep);
    rmrf(store);
    free(keep);
    free(store);
}

/* run_svc with the recorder and g_extra_env = extra (90 s at most). */
static chunks_t *run_env(const char *const *args, const char *extra, char *out, size_t size) {
    g_extra_env = extra;
    chunks_t *cs = run_svc(args, 90, out, size, 1, NULL);
    g_extra_env = NULL;
    return cs;
}

/* The run's incidents, checked to be exactly one: that one. */
static inc_t *sole_incident(chunks_t *cs, incs_t *is) {
    *is = incidents(cs);
    CHECKF(is->n == 1, "%d incidents (first: %s)", is->n, is->n ? is->v[0].trigger : "-");
    return &is->v[0];
}

/* FLEETPROF_TRIGGER_BASELINE=5: 25 s of steady requests (their lock uncontended), then the
 * lock held 3 s: one "lock" incident, after the hold (a wait is recorded when it ends) and
 * within 1.5 s of its end, nothing before; the hang trigger off. */
static void test_baseline(void) {
    char out[8192];
    const char *args[] = {"hang", "3", "25", NULL};
    chunks_t *cs = run_env(args, "FLEETPROF_TRIGGER_BASELINE=5;FLEETPROF_TRIGGER_HANG=0", out,
                           sizeof out);
    uint64_t start = out_u64(out, "hang_start "), end = out_u64(out, "hang_end ");
    incs_t is;
    inc_t *x = sole_incident(cs, &is);
    double lat = ((double)x->trigger_ns - (double)end) / 1e9;
    printf("# baseline incident: %s, %.2f threads waiting, %.2f s after the lock's release "
           "(%.2f s after it was taken)\n", x->trigger, (double)x->value_milli / 1000, lat,
           ((double)x->trigger_ns - (double)start) / 1e9);
    CHECKF(!strcmp(x->trigger, "lock"), "trigger %s", x->trigger);
    /* two workers blocked 3 s, recorded at once: far above the 0.2 floor */
    CHECKF(x->value_milli >= 1000, "%.3f threads waiting", (double)x->value_milli / 1000);
    CHECKF(x->trigger_ns >= start && lat <= 1.5, "lock incident %.2f s after the release", lat);
    free_chunks(cs);
}

/* FLEETPROF_SLOW_MS_BY_ENDPOINT: the requests of GET /work slow from 2 to ~100 ms for 5 s
 * (spike_spin), the global slow threshold 10 s. With GET /work=50 (and another endpoint's
 * 5 ms): one overload incident within 2 s of the slowdown. With the other endpoint's alone:
 * none (its threshold is not GET /work's, and nothing takes 10 s). */
static void test_slow_by_endpoint(void) {
    static const char *const env[] = {
        "FLEETPROF_TRIGGER_SLOW=10s;FLEETPROF_SLOW_MS_BY_ENDPOINT=GET /other=5,GET /work=50",
        "FLEETPROF_TRIGGER_SLOW=10s;FLEETPROF_SLOW_MS_BY_ENDPOINT=GET /other=5"};
    for (int k = 0; k < 2; k++) {
        char out[8192];
        const char *args[] = {"slowdown", "100", NULL};
        chunks_t *cs = run_env(args, env[k], out, sizeof out);
        uint64_t spike = out_u64(out, "spike_start ");
        incs_t is = incidents(cs);
        printf("# %s: %d incidents", env[k] + 27, is.n);
        for (int i = 0; i < is.n; i++)
            printf(", %s %.2f s after the slowdown began (value %.3f)", is.v[i].trigger,
                   ((double)is.v[i].trigger_ns - (double)spike) / 1e9,
                   (double)is.v[i].value_milli / 1000);
        printf("\n");
        CHECKF(is.n == !k, "%s: %d incidents", env[k], is.n);
        if (!k) {
            double lat = ((double)is.v[0].trigger_ns - (double)spike) / 1e9;
            CHECKF(!strcmp(is.v[0].trigger, "overload"), "trigger %s", is.v[0].trigger);
            CHECKF(lat >= 0 && lat <= 2.0, "overload %.2f s after the slowdown began", lat);
        }
        free_chunks(cs);
    }
}

/* The growing trigger (overload off: the piled-up requests are slow and the CPU low anyway):
 * a request arriving every 50 ms on its own thread while the lock they take is held, 60 of
 * them: one "growing" incident 1.5-4 s after the pile-up began (8 rising ticks: 2 s), before
 * the lock is let go; the count it saw at least 8. */
static void test_growing(void) {
    char out[8192];
    const char *args[] = {"pileup", NULL};
    chunks_t *cs = run_env(args, "FLEETPROF_TRIGGER_SLOW_RATIO=0", out, sizeof out);
    uint64_t start = out_u64(out, "pileup_start "), end = out_u64(out, "pileup_end ");
    incs_t is;
    inc_t *x = sole_incident(cs, &is);
    double lat = ((double)x->trigger_ns - (double)start) / 1e9;
    printf("# growing incident: %s, %.0f active requests, %.2f s after the pile-up began (it "
           "ended %.2f s after)\n", x->trigger, (double)x->value_milli / 1000, lat,
           ((double)end - (double)start) / 1e9);
    CHECKF(!strcmp(x->trigger, "growing"), "trigger %s", x->trigger);
    CHECKF(lat >= 1.5 && x->trigger_ns <= end, "growing incident %.2f s after the pile-up", lat);
    CHECKF(x->value_milli >= 8000, "%.0f active", (double)x->value_milli / 1000);
    free_chunks(cs);
}

/* Null of the growing trigger: 16 workers for 25 s, their active requests going up and down
 * (overload off as in growing): no incident. */
static void test_growing_null(void) {
    char out[8192];
    const char *args[] = {"many", "25", NULL};
    chunks_t *cs = run_env(args, "FLEETPROF_TRIGGER_SLOW_RATIO=0", out, sizeof out);
    incs_t is = incidents(cs);
    printf("# 16 workers for 25 s: %llu requests, %d incidents\n",
           (unsigned long long)out_u64(out, "requests "), is.n);
    CHECKF(is.n == 0, "%d incidents (first: %s, value %.0f)", is.n, is.n ? is.v[0].trigger : "-",
           is.n ? (double)is.v[0].value_milli / 1000 : 0.0);
    CHECK_EQ(drops(cs, CM_DROP_INCIDENT_COOLDOWN) + drops(cs, CM_DROP_INCIDENT_CAP), 0);
    free_chunks(cs);
}

/* Rows and weights of type in the chunks of incident id (NULL: the ordinary chunks) with a
 * sample time in [from, to). */
static tot_t window_total(const chunks_t *cs, const uint8_t *id, cm_event_type_t type,
                          uint64_t from, uint64_t to) {
    tot_t t = {0, 0};
    for (int i = 0; i < cs->n; i++) {
        const cm_chunk_t *c = cs->c[i];
        if (!in_capture(c, id))
            continue;
        const cm_samples_t *s = &c->samples[type];
        for (uint32_t r = 0; r < s->n; r++)
            if (s->time_ns[r] >= from && s->time_ns[r] < to) {
                t.weight += s->weight[r];
                t.samples++;
            }
    }
    return t;
}

typedef struct {
    double stream_rate;   /* stream CPU samples per second of the run ... */
    double expect_rate;   /* ... and the controller's: its set point, or the sampled CPU at
                           * the shortest period (FLEETPROF_CPU_HZ) if less */
    double stream_vs_cpu; /* the stream's CPU weights / the process's CPU (getrusage) */
    double cpu_ratio, cpu_wratio, wall_ratio, wall_wratio; /* recorder / stream, captured */
} dens_t;

/* incident_svc density 8 (main spinning; 10 CPU samples/s set point, at most 25 per CPU-second:
 * the period at least 40 ms, the recorder's 10 ms, over the kernel's tick however loaded the
 * host): the stream's totals and, with the recorder, the manual capture's against the
 * stream's over the captured window. */
static dens_t density_run(int recorder, const char *budget) {
    char out[8192], env[512];
    snprintf(env, sizeof env,
             "FLEETPROF_CPU_RATE=10;FLEETPROF_CPU_HZ=25;FLEETPROF_RECORDER_WINDOW=60s;"
             "FLEETPROF_RECORDER_AFTER=1s;FLEETPROF_TRIGGER_SLOW=10s;FLEETPROF_RECORDER_BUDGET=%s",
             budget);
    g_extra_env = env;
    const char *args[] = {"density", "8", NULL};
    double t0 = now_s();
    chunks_t *cs = run_svc(args, 60, out, sizeof out, recorder, NULL);
    double secs = now_s() - t0;
    g_extra_env = NULL;
    incs_t is = incidents(cs);
    CHECKF(is.n == recorder, "%d incidents", is.n);
    dens_t d = {0};
    tot_t all = window_total(cs, NULL, CM_EV_CPU, 0, UINT64_MAX);
    d.stream_rate = (double)all.samples / secs;
    uint64_t seen = 0, kept = 0; /* the stream's CPU rows: what it saw is what it kept */
    for (int i = 0; i < cs->n; i++)
        for (uint32_t k = 0; !cs->c[i]->incident.present && k < cs->c[i]->header.n_sampling; k++)
            if (cs->c[i]->header.sampling[k].type == CM_EV_CPU) {
                seen += cs->c[i]->header.sampling[k].events_seen;
                kept += cs->c[i]->header.sampling[k].samples_kept;
            }
    CHECKF(kept == all.samples && seen >= kept && seen <= kept + kept / 20 + 5,
           "stream CPU: %llu seen, %llu kept, %llu rows", (unsigned long long)seen,
           (unsigned long long)kept, (unsigned long long)all.samples);
    d.expect_rate = (double)all.weight / 1e9 / secs * 25;
    if (d.expect_rate > 10)
        d.expect_rate = 10;
    d.stream_vs_cpu = (double)all.weight / (double)out_u64(out, "cpu_ns ");
    if (recorder) {
        const inc_t *x = &is.v[0];
        uint64_t from = x->capture_start, to = UINT64_MAX;
        for (int i = 0; i < cs->n; i++)
            if (cs->c[i]->incident.present && cs->c[i]->incident.part + 1 == x->parts)
                to = cs->c[i]->incident.capture_end_unix_ns;
        tot_t rc = window_total(cs, x->id, CM_EV_CPU, from, to);
        tot_t sc = window_total(cs, NULL, CM_EV_CPU, from, to);
        tot_t rw = window_total(cs, x->id, CM_EV_WALL, from, to);
        tot_t sw = window_total(cs, NULL, CM_EV_WALL, from, to);
        CHECK(sc.samples > 0 && sw.samples > 0 && sc.weight > 0 && sw.weight > 0);
        d.cpu_ratio = (double)rc.samples / (double)sc.samples;
        d.cpu_wratio = (double)rc.weight / (double)sc.weight;
        d.wall_ratio = (double)rw.samples / (double)sw.samples;
        d.wall_wratio = (double)rw.weight / (double)sw.weight;
    }
    printf("# density: recorder %d budget %s%%: %.1f s, stream %.1f CPU samples/s (controller %.1f), stream CPU "
           "%.3f of getrusage; captured window recorder/stream: CPU samples %.2f, weights %.3f; "
           "wall samples %.2f, weights %.3f\n", recorder, budget, secs, d.stream_rate, d.expect_rate,
           d.stream_vs_cpu, d.cpu_ratio, d.cpu_wratio, d.wall_ratio, d.wall_wratio);
    free_chunks(cs);
    return d;
}

/* The recorder's own density (FLEETPROF_RECORDER_DENSITY=4, the default): the capture holds
 * ~4x the stream's CPU samples (the recorder's period 2.5x the kernel tick at least here) and
 * more wall samples, with the same CPU and wall totals; the stream's rate and totals are the
 * recorder-off run's; a recorder budget of 0.01 % brings the density down. */
static void test_density(void) {
    dens_t off = density_run(0, "5"), on = density_run(1, "5"), low = density_run(1, "0.01");
    CHECKF(off.stream_vs_cpu > 0.85 && off.stream_vs_cpu < 1.05, "%.3f", off.stream_vs_cpu);
    CHECKF(on.stream_vs_cpu > 0.85 && on.stream_vs_cpu < 1.05, "%.3f", on.stream_vs_cpu);
    const dens_t *all[] = {&off, &on, &low};
    for (int i = 0; i < 3; i++) /* near the controller's rate (the start and tail included) */
        CHECKF(all[i]->stream_rate > 0.65 * all[i]->expect_rate &&
                   all[i]->stream_rate < 1.3 * all[i]->expect_rate,
               "run %d: %.1f/s, controller %.1f/s", i, all[i]->stream_rate, all[i]->expect_rate);
    double on_off = (on.stream_rate / on.expect_rate) / (off.stream_rate / off.expect_rate);
    CHECKF(on_off > 0.8 && on_off < 1.25, "on/off %.3f", on_off);
    CHECKF(on.cpu_ratio > 3.2 && on.cpu_ratio < 4.6, "%.2f", on.cpu_ratio);
    CHECKF(on.cpu_wratio > 0.93 && on.cpu_wratio < 1.07, "%.3f", on.cpu_wratio);
    CHECKF(on.wall_ratio > 1.4, "%.2f", on.wall_ratio);
    CHECKF(on.wall_wratio > 0.9 && on.wall_wratio < 1.1, "%.3f", on.wall_wratio);
    CHECKF(low.cpu_ratio < 2.5, "%.2f", low.cpu_ratio);
    CHECKF(low.cpu_wratio > 0.93 && low.cpu_wratio < 1.07, "%.3f", low.cpu_wratio);
}

static const tr_test_t tests[] = {
    {"density", test_density},
    {"slow_by_endpoint", test_slow_by_endpoint},
    {"growing", test_growing},
    {"growing_null", test_growing_null},
    {"exit", test_exit},
    {"signal", test_signal},
    {"links", test_links},
    {"baseline", test_baseline},
    {"spikes", test_spikes},
    {"spikes_bench", test_spikes_bench},
    {"hang", test_hang},
    {"steady_ramp", test_steady_ramp},
    {"steady_bench", test_steady_bench},
    {"manual", test_manual},
    {0, 0},
};
TR_MAIN(tests)
