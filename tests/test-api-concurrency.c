/* Concurrent queries (issue 17): the query worker pool (aggregator/src/serve/qpool.c) on its own,
 * then the real fleetprof-aggregator with a real Kafka broker (port 19880) while a fleet keeps
 * producing: 32 clients at once all answered, queries overlapping (peak running > 1), latency
 * figures beside one client's and beside one worker's (the old single-mutex behaviour); and
 * saturation: 503 with Retry-After and a message saying why, counted in /metrics. The fixture
 * (broker, base data) is set up once in main; each test runs in its own child and starts its
 * own aggregator. */
#define _GNU_SOURCE
#include "aggtest.h"
#include "qpool.h"
#include "support/kafka.h"
#include "support/runner.h"

#include "cm/chunk.h"
#include "cm/wire.h"
#include "cm/error.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/stat.h>

#define PORT 19880
#define HTTP_PORT 19881
#define NPARTS 2
#define CLIENTS 32
#define ROUNDS 4 /* per client, each the whole mix */

static char bootstrap[64], basedir[64];
static fsim_t *sim;
static const char *svc0, *v0, *v1;

/* ---- a minimal HTTP/1.0 client (thread-safe; the status, one header, the body) ---- */

typedef struct {
    int status;
    char retry_after[16];
    char *body;
    double seconds;
} resp_t;

static int http_get(int port, const char *path, resp_t *out) {
    memset(out, 0, sizeof *out);
    double t0 = at_now();
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char req[1024];
    int n = snprintf(req, sizeof req, "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    if (write(fd, req, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    size_t cap = 65536, len = 0;
    char *buf = malloc(cap + 1);
    for (ssize_t r; buf && (r = read(fd, buf + len, cap - len)) > 0;) {
        len += (size_t)r;
        if (len == cap) {
            char *nb = realloc(buf, (cap *= 2) + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    close(fd);
    out->seconds = at_now() - t0;
    if (!buf)
        return -1;
    buf[len] = 0;
    if (sscanf(buf, "HTTP/1.%*d %d", &out->status) != 1) {
        free(buf);
        return -1;
    }
    char *hdr_end = strstr(buf, "\r\n\r\n");
    char *ra = strcasestr(buf, "\r\nRetry-After:");
    if (ra && (!hdr_end || ra < hdr_end))
        sscanf(ra + 14, " %15[0-9]", out->retry_after);
    out->body = strdup(hdr_end ? hdr_end + 4 : "");
    free(buf);
    return 0;
}

/* A counter or gauge from /metrics (labels included in name), or -1. */
static double metric(int port, const char *name) {
    resp_t r;
    if (http_get(port, "/metrics", &r) || r.status != 200)
        return -1;
    double v = -1;
    size_t nl = strlen(name);
    for (char *l = r.body; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
        if (!strncmp(l, name, nl) && l[nl] == ' ')
            v = strtod(l + nl + 1, NULL);
    free(r.body);
    return v;
}

/* ---- the pool on its own ---- */

typedef struct {
    agg_qpool_t *p;
    int rc;
    agg_qpool_busy_t busy;
    double waited;
} acq_t;

static void *acquire_release(void *arg) {
    acq_t *a = arg;
    agg_qstore_t *qs = NULL;
    double t0 = at_now();
    a->rc = agg_qpool_acquire(a->p, &qs, &a->busy);
    a->waited = at_now() - t0;
    if (!a->rc)
        agg_qpool_release(a->p, qs);
    return NULL;
}

static void test_pool_bounds(void) {
    char dir[64], err[256];
    at_tmpdir(dir, "qpool");
    agg_qpool_t *p;
    agg_qpool_cfg_t cfg = {.workers = 2, .queue = 1, .wait_ms = 300};
    CHECKF(agg_qpool_new(dir, &cfg, &p, err, sizeof err) == 0, "%s", err);
    agg_qstore_t *a = NULL, *b = NULL;
    agg_qpool_busy_t busy;
    CHECK_EQ(agg_qpool_acquire(p, &a, &busy), 0);
    CHECK_EQ(agg_qpool_acquire(p, &b, &busy), 0);
    CHECK(a && b && a != b); /* two handles, each its own */
    /* both busy: one request waits (the queue holds one) and gets a's handle when it is back */
    acq_t w = {p, 0, {0}, 0};
    pthread_t t;
    pthread_create(&t, NULL, acquire_release, &w);
    agg_qpool_stats_t st;
    for (int i = 0; i < 200; i++) { /* until it waits */
        agg_qpool_stats(p, &st);
        if (st.waiting == 1)
            break;
        at_sleep_ms(5);
    }
    CHECK_EQ(st.waiting, 1);
    CHECK_EQ(st.running, 2);
    /* a second waiter does not fit the queue: refused at once */
    agg_qstore_t *c = NULL;
    double t0 = at_now();
    CHECK_EQ(agg_qpool_acquire(p, &c, &busy), -EBUSY);
    CHECK(at_now() - t0 < 0.1);
    CHECK_EQ(busy.timed_out, 0);
    CHECK_EQ(busy.running, 2);
    CHECK_EQ(busy.waiting, 1);
    /* the non-blocking lease (a diff's second side): none free, -EBUSY at once, not counted as
     * a refusal (refused_full stays 1 below) */
    t0 = at_now();
    CHECK_EQ(agg_qpool_try_acquire(p, &c), -EBUSY);
    CHECK(at_now() - t0 < 0.1);
    agg_qpool_release(p, a);
    pthread_join(t, NULL);
    CHECK_EQ(w.rc, 0);
    CHECK(w.waited < 0.3);
    /* nobody gives back: the waiter gives up after wait_ms */
    CHECK_EQ(agg_qpool_acquire(p, &a, &busy), 0);
    w = (acq_t){p, 0, {0}, 0};
    acquire_release(&w);
    CHECK_EQ(w.rc, -EBUSY);
    CHECK_EQ(w.busy.timed_out, 1);
    CHECKF(w.waited >= 0.29 && w.waited < 5, "waited %.3f s", w.waited);
    agg_qpool_stats(p, &st);
    CHECK_EQ(st.refused_full, 1);
    CHECK_EQ(st.refused_timeout, 1);
    CHECK_EQ(st.peak_running, 2);
    CHECK_EQ(st.leased, 4);
    agg_qpool_release(p, a);
    agg_qpool_release(p, b);
    agg_qpool_stats(p, &st);
    CHECK_EQ(st.running, 0);
    /* a free handle and nobody waiting: leased at once, one of the handles already opened */
    CHECK_EQ(agg_qpool_try_acquire(p, &c), 0);
    CHECK(c == a || c == b);
    agg_qpool_stats(p, &st);
    CHECK_EQ(st.running, 1);
    agg_qpool_release(p, c);
    agg_qpool_free(p);
    /* a directory that cannot be read fails at once, naming it */
    cfg.workers = 1;
    CHECK(agg_qpool_new("/nonexistent/fp", &cfg, &p, err, sizeof err) != 0);
    CHECKF(strstr(err, "/nonexistent/fp") != NULL, "%s", err);
}

/* ---- the real aggregator ---- */

static pid_t start_agg(const char *dir, const char *workers, const char *queue, const char *wait,
                       int caught_up) {
    char log[128];
    snprintf(log, sizeof log, "%s/agg.log", dir);
    const char *extra[] = {"--api-workers", workers, "--api-queue", queue, "--api-queue-wait",
                           wait, "--report-interval", "0", NULL};
    pid_t pid = at_agg_start(bootstrap, dir, "conc", HTTP_PORT, log, extra);
    CHECKF(pid > 0, "aggregator did not start; see %s", log);
    for (int i = 0; i < 300; i++) { /* the API answers once the stores exist */
        resp_t r;
        if (!http_get(HTTP_PORT, "/api/v1/services", &r)) {
            int st = r.status;
            free(r.body);
            if (st == 200)
                break;
        }
        at_sleep_ms(100);
    }
    if (caught_up) {
        rd_kafka_t *rk = at_producer(bootstrap);
        int64_t hi[NPARTS];
        CHECK(rk && at_high_watermarks(rk, CM_TOPIC_CHUNKS, NPARTS, hi) == 0);
        rd_kafka_destroy(rk);
        /* (a partition no service hashes to stays without a store: not waited for) */
        for (int p = 0; p < NPARTS; p++)
            for (int i = 0; hi[p] > 0 && at_store_offset(dir, CM_TOPIC_CHUNKS, p) < hi[p]; i++) {
                CHECKF(i < 1200, "aggregator did not catch up on partition %d; see %s", p, log);
                at_sleep_ms(100);
            }
    }
    return pid;
}

#define NPATHS 5
static char paths[NPATHS][512];

static void make_paths(void) {
    snprintf(paths[0], sizeof paths[0], "/api/v1/services");
    snprintf(paths[1], sizeof paths[1], "/api/v1/profile?service=%s&version=%s&limit=20", svc0, v0);
    snprintf(paths[2], sizeof paths[2], "/api/v1/profile?service=%s&view=tree&limit=200", svc0);
    snprintf(paths[3], sizeof paths[3], "/api/v1/diff?service=%s&base=%s&test=%s", svc0, v0, v1);
    snprintf(paths[4], sizeof paths[4], "/api/v1/timeseries?service=%s&from=-1d", svc0);
}

typedef struct {
    int rounds;
    double *lat; /* rounds * NPATHS */
    double *lat_fast; /* rounds: the /services requests (a fast query) */
    int n, n_fast, bad, busy;
    char first_bad[256];
    pthread_barrier_t *go;
} client_t;

static void *client(void *arg) {
    client_t *c = arg;
    if (c->go)
        pthread_barrier_wait(c->go);
    for (int r = 0; r < c->rounds; r++)
        for (int i = 0; i < NPATHS; i++) {
            resp_t x;
            int rc = http_get(HTTP_PORT, paths[(i + r) % NPATHS], &x);
            if (rc || x.status != 200) {
                if (!c->bad++)
                    snprintf(c->first_bad, sizeof c->first_bad, "%s: %d %.150s",
                             paths[(i + r) % NPATHS], rc ? -1 : x.status, rc ? "" : x.body);
                c->busy += !rc && x.status == 503;
            } else {
                c->lat[c->n++] = x.seconds;
                if ((i + r) % NPATHS == 0)
                    c->lat_fast[c->n_fast++] = x.seconds;
            }
            free(x.body);
        }
    return NULL;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(double *v, int n, double p) {
    if (!n)
        return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    int i = (int)ceil(p * n) - 1;
    return v[i < 0 ? 0 : i];
}

typedef struct {
    double p50, p99, max, fast_p99; /* fast_p99: of /services alone */
    int n, bad;
} lat_t;

/* nclients clients, each `rounds` rounds of the mix at once; every answer must be 200. */
static lat_t run_clients(int nclients, int rounds) {
    client_t cl[CLIENTS];
    pthread_t th[CLIENTS];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, (unsigned)nclients);
    for (int i = 0; i < nclients; i++) {
        cl[i] = (client_t){rounds, calloc((size_t)rounds * NPATHS, sizeof(double)),
                           calloc((size_t)rounds, sizeof(double)), 0, 0, 0, 0, "", &go};
        pthread_create(&th[i], NULL, client, &cl[i]);
    }
    double *all = calloc((size_t)nclients * rounds * NPATHS, sizeof(double));
    double *fast = calloc((size_t)nclients * rounds, sizeof(double));
    lat_t l = {0};
    int nf = 0;
    for (int i = 0; i < nclients; i++) {
        pthread_join(th[i], NULL);
        CHECKF(cl[i].bad == 0, "client %d: %d failed requests, first %s", i, cl[i].bad,
               cl[i].first_bad);
        memcpy(all + l.n, cl[i].lat, (size_t)cl[i].n * sizeof(double));
        memcpy(fast + nf, cl[i].lat_fast, (size_t)cl[i].n_fast * sizeof(double));
        l.n += cl[i].n;
        nf += cl[i].n_fast;
        free(cl[i].lat);
        free(cl[i].lat_fast);
    }
    l.fast_p99 = pct(fast, nf, 0.99);
    free(fast);
    pthread_barrier_destroy(&go);
    l.p50 = pct(all, l.n, 0.5);
    l.p99 = pct(all, l.n, 0.99);
    l.max = all[l.n - 1];
    free(all);
    return l;
}

typedef struct {
    rd_kafka_t *rk;
    volatile int stop;
    int rc;
    uint64_t chunks;
} ingest_t;

/* A fleet that keeps producing (small fleets of 24 chunks at 10 chunks/s) until told to stop. */
static void *ingest(void *arg) {
    ingest_t *in = arg;
    for (uint64_t seed = 1000; !__atomic_load_n(&in->stop, __ATOMIC_ACQUIRE) && !in->rc; seed++) {
        fsim_params_t sp = {.seed = seed, .services = 3, .versions = 2, .processes = 2,
                            .intervals = 2, .samples = 100, .stacks = 50};
        fsim_t *s = fsim_new(&sp);
        in->rc = s ? fsim_produce(s, in->rk, CM_TOPIC_CHUNKS, 10) : CM_ENOMEM;
        in->chunks += s ? fsim_counts(s)->chunks : 0;
        fsim_free(s);
    }
    return NULL;
}

static int64_t stored(const char *dir) {
    return at_store_offsets_sum(dir, CM_TOPIC_CHUNKS, NPARTS);
}

static void test_concurrent_clients_during_ingest(void) {
    char dir[64];
    at_tmpdir(dir, "conc");
    make_paths();
    /* the fleet keeps producing while the clients query */
    ingest_t in = {at_producer(bootstrap), 0, 0, 0};
    CHECK(in.rk);
    pid_t pid = start_agg(dir, "8", "64", "10m", 1);
    pthread_t ith;
    pthread_create(&ith, NULL, ingest, &in);
    at_sleep_ms(2000);
    /* the default 8 workers with one client and with 32; 32 workers (a handle per client:
     * nobody waits for one); one worker (every request behind the one before it, as with the
     * old single mutex). On the same store, restarted in between, while the fleet produces. */
    static const struct {
        const char *workers;
        int clients, rounds;
    } ph[] = {{"8", 1, ROUNDS * 4}, {"8", CLIENTS, ROUNDS}, {"32", CLIENTS, ROUNDS},
              {"1", CLIENTS, ROUNDS}};
    lat_t l[4];
    double peak[4];
    int64_t stored_during[4];
    int64_t off_start = stored(dir);
    for (int i = 0; i < 4; i++) {
        if (i && strcmp(ph[i].workers, ph[i - 1].workers)) {
            CHECK(at_agg_stop(pid, SIGTERM, 30) >= 0);
            pid = start_agg(dir, ph[i].workers, "64", "10m", 0);
        }
        int64_t off0 = stored(dir);
        l[i] = run_clients(ph[i].clients, ph[i].rounds);
        int64_t off1 = stored(dir);
        peak[i] = metric(HTTP_PORT, "fleetprof_aggregator_api_peak_running");
        stored_during[i] = off1 - off0;
        /* queries ran side by side, never more than the workers */
        CHECKF(peak[i] >= (ph[i].clients > 1 && atoi(ph[i].workers) > 1 ? 2 : 1) &&
                   peak[i] <= atoi(ph[i].workers),
               "%s workers, %d clients: peak running %.0f", ph[i].workers, ph[i].clients,
               peak[i]);
    }
    int64_t total = stored(dir) - off_start;
    CHECKF(total > 0, "nothing stored while the clients ran (ingest thread rc %d)", in.rc);
    printf("latency (s) of the mix services/profile/tree/diff/timeseries while ingesting "
           "(%lld chunks stored meanwhile):\n", (long long)total);
    for (int i = 0; i < 4; i++)
        printf("  %2d clients, %2s workers: n=%d p50 %.4f p99 %.4f max %.4f; /services p99 "
               "%.4f (peak running %.0f, %lld chunks stored during it)\n", ph[i].clients,
               ph[i].workers, l[i].n, l[i].p50, l[i].p99, l[i].max, l[i].fast_p99, peak[i],
               (long long)stored_during[i]);
    printf("  p99 ratios: 32 clients/1 client (8 workers) %.2f; 1 worker/8 workers %.2f; "
           "1 worker/32 workers %.2f; /services p99 1 worker/32 workers %.2f\n",
           l[1].p99 / l[0].p99, l[3].p99 / l[1].p99, l[3].p99 / l[2].p99,
           l[3].fast_p99 / l[2].fast_p99);
    __atomic_store_n(&in.stop, 1, __ATOMIC_RELEASE);
    pthread_join(ith, NULL);
    CHECK_EQ(in.rc, 0);
    rd_kafka_destroy(in.rk);
    at_agg_stop(pid, SIGTERM, 30);
}

typedef struct {
    int status;
    char retry_after[16], body[300];
    pthread_barrier_t *go;
} one_t;

static void *one_request(void *arg) {
    one_t *o = arg;
    pthread_barrier_wait(o->go);
    resp_t r;
    if (http_get(HTTP_PORT, paths[2], &r)) {
        o->status = -1;
        return NULL;
    }
    o->status = r.status;
    snprintf(o->retry_after, sizeof o->retry_after, "%s", r.retry_after);
    snprintf(o->body, sizeof o->body, "%s", r.body);
    free(r.body);
    return NULL;
}

static void test_saturated_503(void) {
    char dir[64];
    at_tmpdir(dir, "sat");
    make_paths();
    /* one worker, no queue: a request that finds it busy is turned away at once */
    pid_t pid = start_agg(dir, "1", "0", "10s", 1);
    int ok = 0, busy = 0;
    for (int round = 0; round < 100 && (busy < 3 || ok < 3); round++) {
        one_t o[16];
        pthread_t th[16];
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 16);
        for (int i = 0; i < 16; i++) {
            o[i] = (one_t){0, "", "", &go};
            pthread_create(&th[i], NULL, one_request, &o[i]);
        }
        for (int i = 0; i < 16; i++) {
            pthread_join(th[i], NULL);
            if (o[i].status == 200) {
                ok++;
            } else {
                CHECKF(o[i].status == 503, "status %d: %s", o[i].status, o[i].body);
                CHECKF(!strcmp(o[i].retry_after, "1"), "503 without Retry-After: 1 (%s)",
                       o[i].retry_after);
                CHECKF(strstr(o[i].body, "\"status\":503") &&
                           strstr(o[i].body, "saturated: 1 queries running and 0 waiting") &&
                           strstr(o[i].body, "api-queue"),
                       "503 body: %s", o[i].body);
                busy++;
            }
        }
        pthread_barrier_destroy(&go);
    }
    CHECKF(busy >= 3 && ok >= 3, "%d answered, %d turned away", ok, busy);
    CHECK_EQ(metric(HTTP_PORT, "fleetprof_aggregator_api_saturated_total{why=\"queue_full\"}"),
             busy);
    CHECK_EQ(metric(HTTP_PORT, "fleetprof_aggregator_api_saturated_total{why=\"wait_timeout\"}"),
             0);
    /* /healthz and /metrics never wait for a query worker */
    resp_t r;
    CHECK(http_get(HTTP_PORT, "/healthz", &r) == 0);
    CHECK_EQ(r.status, 200);
    free(r.body);
    at_agg_stop(pid, SIGTERM, 30);

    /* one worker, a queue, a short wait: a waiter that outlasts the wait gets the other 503 */
    pid = start_agg(dir, "1", "64", "1ms", 0);
    int timed_out = 0;
    for (int round = 0; round < 100 && timed_out < 3; round++) {
        one_t o[16];
        pthread_t th[16];
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 16);
        for (int i = 0; i < 16; i++) {
            o[i] = (one_t){0, "", "", &go};
            pthread_create(&th[i], NULL, one_request, &o[i]);
        }
        for (int i = 0; i < 16; i++) {
            pthread_join(th[i], NULL);
            if (o[i].status != 200) {
                CHECKF(o[i].status == 503 && strstr(o[i].body, "stayed busy") &&
                           strstr(o[i].body, "api-queue-wait") && !strcmp(o[i].retry_after, "1"),
                       "%d %s", o[i].status, o[i].body);
                timed_out++;
            }
        }
        pthread_barrier_destroy(&go);
    }
    CHECKF(timed_out >= 3, "%d timed out", timed_out);
    CHECK_EQ(metric(HTTP_PORT, "fleetprof_aggregator_api_saturated_total{why=\"wait_timeout\"}"),
             timed_out);
    at_agg_stop(pid, SIGTERM, 30);
}

static const tr_test_t tests[] = {
    {"pool_bounds", test_pool_bounds},
    {"concurrent_clients_during_ingest", test_concurrent_clients_during_ingest},
    {"saturated_503", test_saturated_503},
    {0},
};

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (ts_kafka_start_retry(PORT, NPARTS, NULL, bootstrap, sizeof bootstrap)) {
        printf("cannot start Kafka\n1 failed\n");
        return 1;
    }
    at_tmpdir(basedir, "conc-base");
    fsim_params_t sp = {.seed = 31, .services = 3, .versions = 2, .processes = 4,
                        .intervals = 8, .samples = 400, .stacks = 150};
    sim = fsim_new(&sp);
    svc0 = fsim_service_name(sim, 0);
    v0 = fsim_version_name(sim, 0, 0);
    v1 = fsim_version_name(sim, 0, 1);
    rd_kafka_t *rk = at_producer(bootstrap);
    int rc = 1;
    if (!rk || !at_topic_empty(rk, CM_TOPIC_CHUNKS, NPARTS) ||
        fsim_produce(sim, rk, CM_TOPIC_CHUNKS, 0)) {
        printf("cannot produce\n");
        goto out;
    }
    /* no thread may run in the parent when the runner forks a test (the tests start threads;
     * TSan refuses threads after a multi-threaded fork): librdkafka's go with the producer */
    rd_kafka_destroy(rk);
    rk = NULL;
    rc = tr_main(tests, argc, argv);
out:
    if (rk)
        rd_kafka_destroy(rk);
    fsim_free(sim);
    ts_kafka_stop(PORT, 0);
    return rc;
}
