/* Dimensions end to end (issue 18 item 5): a real Kafka broker (port 19900), the fleet
 * simulator's processes spread over two hosts (sim-host-0, sim-host-1, each process its own
 * pod), and a real program under the agent doing slow I/O to two files and one peer
 * (io_work targets) through a real fleetprof-collector, all consumed by the real
 * fleetprof-aggregator (HTTP 19901; collector metrics 19902; the program's peer: a server of
 * this test on 19903).
 *
 *   host_split      `fleetprof top --service S --group-by host` and the API's group_by=host:
 *                   one group per simulated host, weights equal to the simulator's truth per
 *                   host (exact: the simulator's sums are the truth), for every event type
 *   host_filter     host=sim-host-1 (API) and --host (CLI): the profile and the time series of
 *                   that host alone; two filters together
 *   pid_pod         group_by=pid and group_by=pod: one group per process, summing per host to
 *                   the host's truth; the CLI's --pid and --pod give that group's total
 *   io_target       `fleetprof top --service iosvc --type io --group-by io-target`: the two
 *                   files and the peer, each equal to the sum of its events in the chunk files
 *                   the agent wrote (exact), within 5 % of the time the program itself
 *                   timed in its calls to that target, with as many events as the program
 *                   made calls to it; fd-kind file/socket likewise
 *   io_filter       io_target=PATH: the profile is that file's writes alone (top function
 *                   targets_file_site), its total equal to the group's
 *   bad_params      group_by=bogus: 400 naming group_by; a filter matching nothing: 404
 *   overflow_metric the aggregator's dimension_overflow_total counters are exported (0 here)
 *
 * The fixture is set up once in main; each test runs in its own child. nosan: it preloads the
 * agent into an uninstrumented program. */
#include "agent-common.h"
#include "aggtest.h"
#include "support/kafka.h"
#include "test-collector-client.h"

#include "../cli/src/client.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>

#define PORT 19900
#define HTTP_PORT 19901
#define COL_HTTP 19902
#define PEER_PORT 19903
#define NPARTS 2
#define NHOSTS 2

static char server[64], dir[64];
static fsim_t *sim;
static const char *svc0;
static char prog_out[8192], chunk_dir[256];

/* ---- the program's peer: answers 100 bytes ~15 ms after each byte it reads ---- */

static int g_lfd;
static void *peer_thread(void *arg) {
    (void)arg;
    for (;;) {
        int c = accept(g_lfd, NULL, NULL);
        if (c < 0)
            return NULL;
        char buf[100];
        memset(buf, 'r', sizeof buf);
        while (read(c, buf, 1) == 1) {
            struct timespec ts = {0, 15000000};
            nanosleep(&ts, NULL);
            if (write(c, buf, sizeof buf) != (ssize_t)sizeof buf)
                break;
        }
        close(c);
    }
}

static int peer_start(void) {
    g_lfd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(g_lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons(PEER_PORT)};
    if (bind(g_lfd, (struct sockaddr *)&a, sizeof a) || listen(g_lfd, 4))
        return -1;
    pthread_t th;
    return pthread_create(&th, NULL, peer_thread, NULL) ? -1 : 0;
}

/* ---- queries ---- */

static json_t *get_json(const char *path, long want) {
    cli_resp_t r;
    CHECKF(cli_http_get(server, NULL, path, &r) == 0, "%s", r.err);
    CHECKF(r.status == want, "GET %s: status %ld, body %s", path, r.status, r.body);
    json_t *o = json_loads(r.body, 0, NULL);
    CHECKF(o != NULL, "GET %s: not JSON: %s", path, r.body);
    cli_resp_free(&r);
    return o;
}

static json_int_t jint(json_t *o, const char *k) {
    return json_integer_value(json_object_get(o, k));
}

/* The group of value v in a group_by answer (NULL: absent). */
static json_t *group_of(json_t *o, const char *v) {
    json_t *g;
    size_t i;
    json_array_foreach(json_object_get(o, "groups"), i, g) {
        const char *x = json_string_value(json_object_get(g, "value"));
        if (x && !strcmp(x, v))
            return g;
    }
    return NULL;
}

/* Runs the CLI with args against the aggregator; its stdout into out. Returns the exit code. */
static int cli(const char *args, char *out, size_t size) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/cli/fleetprof %s --server %s", bdir(), args, server);
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    size_t n = fread(out, 1, size - 1, f);
    out[n] = 0;
    int st = pclose(f);
    printf("$ fleetprof %s\n%s", args, out);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Whether the line of group v in `fleetprof top --group-by` output shows weight in its WEIGHT
 * column, in the table's units (cm_format_weight: "1.25s"; --json has the exact integer). */
static int cli_group_shows(const char *out, const char *v, cm_event_type_t type, int64_t weight) {
    char want[32];
    cm_format_weight(type, (double)weight, want, sizeof want);
    for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        size_t vl = strlen(v);
        if (strncmp(l, v, vl) || l[vl] != ' ')
            continue;
        const char *w = l + vl + strspn(l + vl, " ");
        size_t wl = strcspn(w, " \n");
        if (wl == strlen(want) && !strncmp(w, want, wl))
            return 1;
        printf("group %s: WEIGHT '%.*s', want '%s'\n", v, (int)wl, w, want);
        return 0;
    }
    printf("group %s: no line\n", v);
    return 0;
}

/* ---- tests ---- */

static void test_host_split(void) {
    char path[512], out[16384];
    for (uint32_t t = 1; t <= CM_EV_MAX; t++) {
        snprintf(path, sizeof path, "/api/v1/profile?service=%s&type=%s&group_by=host", svc0,
                 cm_event_name((cm_event_type_t)t));
        json_t *o = get_json(path, 200);
        CHECK_EQ(json_array_size(json_object_get(o, "groups")), NHOSTS);
        int64_t sum = 0;
        for (uint32_t h = 0; h < NHOSTS; h++) {
            char name[32];
            snprintf(name, sizeof name, "sim-host-%u", h);
            json_t *g = group_of(o, name);
            CHECKF(g != NULL, "type %u: no group %s", t, name);
            const fsim_sums_t *tr = fsim_truth_host(sim, 0, 0, t, h);
            CHECKF(jint(g, "weight") == tr->weight, "type %u host %s: weight %lld, truth %lld", t,
                   name, (long long)jint(g, "weight"), (long long)tr->weight);
            CHECKF(json_real_value(json_object_get(g, "samples")) * 1000 == (double)tr->count,
                   "type %u host %s: samples %f, truth count %lld", t, name,
                   json_real_value(json_object_get(g, "samples")), (long long)tr->count);
            CHECK(json_array_size(json_object_get(g, "top")) > 0);
            sum += tr->weight;
        }
        CHECK_EQ(jint(o, "total"), sum);
        CHECK_EQ(sum, fsim_truth(sim, 0, 0, t)->weight);
        json_decref(o);
    }
    /* the CLI, as an operator types it */
    snprintf(path, sizeof path, "top --service %s --group-by host", svc0);
    CHECK_EQ(cli(path, out, sizeof out), 0);
    for (uint32_t h = 0; h < NHOSTS; h++) {
        char name[32];
        snprintf(name, sizeof name, "sim-host-%u", h);
        CHECKF(cli_group_shows(out, name, CM_EV_CPU, fsim_truth_host(sim, 0, 0, CM_EV_CPU, h)->weight),
               "%s: the CLI does not show the truth %lld", name,
               (long long)fsim_truth_host(sim, 0, 0, CM_EV_CPU, h)->weight);
    }
}

static void test_host_filter(void) {
    char path[512], out[16384];
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&type=wall&host=sim-host-1&limit=3",
             svc0);
    json_t *o = get_json(path, 200);
    CHECK_EQ(jint(o, "total"), fsim_truth_host(sim, 0, 0, CM_EV_WALL, 1)->weight);
    json_decref(o);
    /* the time series of that host: its points sum to the host's truth */
    snprintf(path, sizeof path, "/api/v1/timeseries?service=%s&type=cpu&host=sim-host-1", svc0);
    o = get_json(path, 200);
    json_int_t ts = 0;
    json_t *ser, *pt;
    size_t i, k;
    json_array_foreach(json_object_get(o, "series"), i, ser)
        json_array_foreach(json_object_get(ser, "points"), k, pt) ts += jint(pt, "value");
    CHECK_EQ(ts, fsim_truth_host(sim, 0, 0, CM_EV_CPU, 1)->weight);
    json_decref(o);
    /* two filters: a host and a pid of the other host match nothing */
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&host=sim-host-1&pid=1000", svc0);
    json_decref(get_json(path, 404));
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&host=sim-host-0&pid=1000", svc0);
    json_decref(get_json(path, 200));
    snprintf(path, sizeof path, "top --service %s --host sim-host-0 --json --limit 2", svc0);
    CHECK_EQ(cli(path, out, sizeof out), 0);
    json_t *j = json_loads(out, 0, NULL);
    CHECK(j != NULL);
    CHECK_EQ(jint(j, "total"), fsim_truth_host(sim, 0, 0, CM_EV_CPU, 0)->weight);
    json_decref(j);
}

static void test_pid_pod(void) {
    char path[512];
    const fsim_params_t *p = fsim_params(sim);
    const char *keys[] = {"pid", "pod"};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "/api/v1/profile?service=%s&group_by=%s&limit=0", svc0,
                 keys[k]);
        json_t *o = get_json(path, 200);
        CHECK_EQ(json_array_size(json_object_get(o, "groups")), p->processes);
        int64_t host_sum[NHOSTS] = {0};
        for (uint32_t proc = 0; proc < p->processes; proc++) {
            char v[64];
            if (k == 0)
                snprintf(v, sizeof v, "%u", 1000 + proc);
            else
                snprintf(v, sizeof v, "sim/%s-%u", svc0, proc);
            json_t *g = group_of(o, v);
            CHECKF(g != NULL, "no %s group %s", keys[k], v);
            host_sum[proc % NHOSTS] += jint(g, "weight");
        }
        for (uint32_t h = 0; h < NHOSTS; h++)
            CHECK_EQ(host_sum[h], fsim_truth_host(sim, 0, 0, CM_EV_CPU, h)->weight);
        /* the CLI's filter on one of them: its total is that group's weight */
        char v[64], args[256], out[16384];
        if (k == 0)
            snprintf(v, sizeof v, "%u", 1001);
        else
            snprintf(v, sizeof v, "sim/%s-%u", svc0, 1);
        snprintf(args, sizeof args, "top --service %s --%s %s --json --limit 1", svc0, keys[k], v);
        CHECK_EQ(cli(args, out, sizeof out), 0);
        json_t *j = json_loads(out, 0, NULL);
        CHECK(j != NULL);
        CHECK_EQ(jint(j, "total"), jint(group_of(o, v), "weight"));
        json_decref(j);
        json_decref(o);
    }
    char args[256], out[32768];
    snprintf(args, sizeof args, "top --service %s --group-by pod --limit 1", svc0);
    CHECK_EQ(cli(args, out, sizeof out), 0);
    CHECK(strstr(out, "POD") && strstr(out, "sim/"));
}

/* Sum of the io event weights (and counts) per target in the chunk files the agent wrote. */
typedef struct {
    char name[256];
    int64_t weight;
} tsum_t;

static int chunk_targets(tsum_t *ts, int max, int by_fd) {
    static const char *const kinds[] = {"", "file", "socket", "pipe", "other"};
    chunks_t *cs = load(chunk_dir);
    int n = 0;
    for (int k = 0; k < cs->n; k++) {
        const cm_chunk_t *c = cs->c[k];
        const cm_samples_t *s = &c->samples[CM_EV_IO];
        for (uint32_t i = 0; i < s->n; i++) {
            const char *name;
            if (by_fd) {
                uint32_t f = s->fd_kind ? s->fd_kind[i] : 0;
                name = kinds[f <= CM_FD_OTHER ? f : 0];
            } else {
                uint32_t ti = s->target ? s->target[i] : 0;
                name = ti && ti < c->dict.n_strings ? c->dict.strings[ti].ptr : "";
            }
            int j = 0;
            while (j < n && strcmp(ts[j].name, name))
                j++;
            if (j == n) {
                CHECK(n < max);
                snprintf(ts[n].name, sizeof ts[n].name, "%s", name);
                ts[n++].weight = 0;
            }
            ts[j].weight += (int64_t)s->weight[i];
        }
    }
    free_chunks(cs);
    return n;
}

static void test_io_target(void) {
    char out[16384], want[3][256];
    const char *keys[3] = {"path_a=", "path_b=", "peer="}, *ns[3] = {"ns_a=", "ns_b=", "ns_peer="};
    for (int i = 0; i < 3; i++) {
        const char *p = strstr(prog_out, keys[i]);
        CHECKF(p != NULL, "%s", prog_out);
        snprintf(want[i], sizeof want[i], "%.*s", (int)strcspn(p + strlen(keys[i]), "\n"),
                 p + strlen(keys[i]));
    }
    CHECK_EQ(cli("top --service iosvc --type io --group-by io-target", out, sizeof out), 0);
    json_t *o = get_json("/api/v1/profile?service=iosvc&type=io&group_by=io-target", 200);
    tsum_t ts[16];
    int n = chunk_targets(ts, 16, 0);
    /* every target in the chunks is a group with exactly its events' weight, in the API and
     * in the CLI's table; the events without a target (none expected) are the value-less one */
    for (int j = 0; j < n; j++) {
        json_t *g = ts[j].name[0] ? group_of(o, ts[j].name) : NULL;
        printf("target %-30s chunks %lld ns, aggregator %lld ns\n", ts[j].name,
               (long long)ts[j].weight, g ? (long long)jint(g, "weight") : -1LL);
        if (!ts[j].name[0])
            continue;
        CHECKF(g != NULL, "no group %s", ts[j].name);
        CHECK_EQ(jint(g, "weight"), ts[j].weight);
        CHECK(cli_group_shows(out, ts[j].name, CM_EV_IO, ts[j].weight));
    }
    /* the three targets, against the program's own timing of its calls */
    for (int i = 0; i < 3; i++) {
        json_t *g = group_of(o, want[i]);
        CHECKF(g != NULL, "no group %s", want[i]);
        double agg = (double)jint(g, "weight"), prog = (double)out_u64(prog_out, ns[i]);
        printf("%s: aggregator %.0f ns, program timed %.0f ns (%.2f %%)\n", want[i], agg, prog,
               100 * (agg - prog) / prog);
        CHECKF(fabs(agg - prog) <= 0.05 * prog, "%s: %.0f ns stored, program timed %.0f ns",
               want[i], agg, prog);
    }
    /* every call the program made to a target is one event of it (threshold and floor 0, no
     * subsampling): the samples are the program's call counts exactly */
    const char *calls[3] = {"calls_a=", "calls_b=", "calls_peer="};
    for (int i = 0; i < 3; i++) {
        double got = json_real_value(json_object_get(group_of(o, want[i]), "samples"));
        CHECKF(got == (double)out_u64(prog_out, calls[i]), "%s: %.0f events, program made %llu "
               "calls", want[i], got, (unsigned long long)out_u64(prog_out, calls[i]));
    }
    json_decref(o);
    /* fd kind: file and socket */
    o = get_json("/api/v1/profile?service=iosvc&type=io&group_by=fd-kind", 200);
    n = chunk_targets(ts, 16, 1);
    for (int j = 0; j < n; j++) {
        if (!ts[j].name[0])
            continue;
        json_t *g = group_of(o, ts[j].name);
        CHECKF(g != NULL, "no fd-kind group %s", ts[j].name);
        CHECK_EQ(jint(g, "weight"), ts[j].weight);
    }
    CHECK(group_of(o, "file") && group_of(o, "socket"));
    json_decref(o);
}

static void test_io_filter(void) {
    const char *p = strstr(prog_out, "path_b=");
    CHECK(p != NULL);
    char path[512], tgt[256], *e;
    snprintf(tgt, sizeof tgt, "%.*s", (int)strcspn(p + 7, "\n"), p + 7);
    e = cli_url_escape(tgt);
    json_t *g = get_json("/api/v1/profile?service=iosvc&type=io&group_by=io-target", 200);
    snprintf(path, sizeof path, "/api/v1/profile?service=iosvc&type=io&io_target=%s&limit=1", e);
    json_t *o = get_json(path, 200);
    CHECK_EQ(jint(o, "total"), jint(group_of(g, tgt), "weight"));
    json_t *f0 = json_array_get(json_object_get(o, "functions"), 0);
    CHECKF(f0 && strstr(json_string_value(json_object_get(f0, "name")), "pwrite"),
           "top function of %s: %s", tgt, f0 ? json_string_value(json_object_get(f0, "name")) : "-");
    json_decref(o);
    json_decref(g);
    free(e);
}

static void test_bad_params(void) {
    char path[512];
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&group_by=bogus", svc0);
    json_t *o = get_json(path, 400);
    CHECK(!strcmp(json_string_value(json_object_get(o, "parameter")), "group_by"));
    json_decref(o);
    snprintf(path, sizeof path, "/api/v1/profile?service=%s&group_by=host&pod=no/such", svc0);
    json_decref(get_json(path, 404));
}

static void test_overflow_metric(void) {
    cli_resp_t r;
    CHECK(cli_http_get(server, NULL, "/metrics", &r) == 0);
    CHECKF(strstr(r.body, "fleetprof_aggregator_dimension_overflow_total{dimension=\"pod\"} 0"),
           "%s", r.body);
    CHECK(strstr(r.body, "fleetprof_aggregator_dimension_overflow_total{dimension=\"io-target\"} 0"));
    cli_resp_free(&r);
}

static const tr_test_t tests[] = {
    {"host_split", test_host_split},   {"host_filter", test_host_filter},
    {"pid_pod", test_pid_pod},         {"io_target", test_io_target},
    {"io_filter", test_io_filter},     {"bad_params", test_bad_params},
    {"overflow_metric", test_overflow_metric},
    {NULL, NULL},
};

/* Runs io_work targets under the agent, through the collector; returns 0 when its chunks are
 * all in Kafka. */
static int run_program(tc_collector_t *col) {
    char pre[4300], colenv[512], outenv[512], prog[4096], port[16];
    snprintf(chunk_dir, sizeof chunk_dir, "%s/chunks", dir);
    mkdir(chunk_dir, 0755);
    snprintf(colenv, sizeof colenv, "FLEETPROF_COLLECTOR=%s", col->sock);
    snprintf(outenv, sizeof outenv, "FLEETPROF_OUTPUT=%s", chunk_dir);
    snprintf(port, sizeof port, "%d", PEER_PORT);
    prog_path("io_work", prog, sizeof prog);
    /* every call an event (threshold and floor 0), no flood subsampling at this rate: the
     * stored split can be compared with the program's own timing */
    const char *env[] = {preload(pre, sizeof pre), colenv, outenv, "FLEETPROF_SERVICE=iosvc",
                         "FLEETPROF_IO_THRESHOLD=0", "FLEETPROF_IO_FLOOR=0",
                         "FLEETPROF_IO_RATE=100000", "FLEETPROF_INTERVAL=1", NULL};
    const char *argv[] = {prog, "targets", "3", port, NULL};
    if (run(env, argv, 60, prog_out, sizeof prog_out) != 0) {
        printf("io_work failed: %s\n", prog_out);
        return -1;
    }
    printf("%s", prog_out);
    chunks_t *cs = load(chunk_dir);
    int n = cs->n;
    free_chunks(cs);
    double got = tc_metric_wait(COL_HTTP, "fleetprof_collector_chunks_delivered_total", n, 30);
    printf("io_work wrote %d chunks; the collector delivered %.0f\n", n, got);
    return got == n ? 0 : -1;
}

int main(int argc, char **argv) {
    char bootstrap[64], log[128];
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (ts_kafka_start_retry(PORT, NPARTS, NULL, bootstrap, sizeof bootstrap)) {
        printf("cannot start Kafka\n1 failed\n");
        return 1;
    }
    at_tmpdir(dir, "dims");
    snprintf(log, sizeof log, "%s/agg.log", dir);
    fsim_params_t sp = {.seed = 18, .services = 2, .versions = 1, .processes = 4, .intervals = 6,
                        .samples = 300, .stacks = 100, .hosts = NHOSTS};
    sim = fsim_new(&sp);
    svc0 = fsim_service_name(sim, 0);
    rd_kafka_t *rk = at_producer(bootstrap);
    int64_t hi[NPARTS];
    int rc = 1;
    pid_t pid = -1;
    tc_collector_t col = {0};
    if (!rk || !at_topic_empty(rk, CM_TOPIC_CHUNKS, NPARTS) ||
        fsim_produce(sim, rk, CM_TOPIC_CHUNKS, 0)) {
        printf("cannot produce\n");
        goto out;
    }
    if (peer_start() || tc_collector_start(&col, bootstrap, COL_HTTP, NULL)) {
        printf("cannot start the peer or the collector\n");
        goto out;
    }
    if (run_program(&col) || at_high_watermarks(rk, CM_TOPIC_CHUNKS, NPARTS, hi))
        goto out;
    pid = at_agg_start(bootstrap, dir, "dims", HTTP_PORT, log, NULL);
    snprintf(server, sizeof server, "http://127.0.0.1:%d", HTTP_PORT);
    if (pid < 0 || at_wait_caught_up(dir, CM_TOPIC_CHUNKS, NPARTS, hi, 120)) {
        printf("aggregator did not catch up; see %s\n", log);
        goto out;
    }
    rc = tr_main(tests, argc, argv);
out:
    if (pid > 0)
        at_agg_stop(pid, SIGTERM, 30);
    if (col.pid > 0)
        tc_collector_stop(&col, SIGTERM, 10);
    if (rk)
        rd_kafka_destroy(rk);
    fsim_free(sim);
    ts_kafka_stop(PORT, 0);
    return rc;
}
