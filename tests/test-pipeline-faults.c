/* Pipeline faults counted against the agents' own chunk files (issue 13): real agents
 * (`fleetprof run` + libfleetprof.so + fp-work, FLEETPROF_OUTPUT writing every chunk to a file
 * as well) -> fleetprof-collector -> Kafka -> fleetprof-aggregator (SQLite stores). After the
 * fault and the catch-up, the stores' totals per (service, version, type) -- weight, count and
 * rows -- must equal the sums over the chunk files exactly, less the chunks that never reached
 * Kafka, whose number must not exceed the drops the agents themselves counted in later chunks
 * (CM_DROP_CHUNK_QUEUE_FULL). Duplicates a replay adds are removed by chunk id downstream.
 *
 *   collector_sigkill_store_exact   the collector SIGKILLed while the agents send, restarted 1 s
 *                                   later (the spool replays, the agents resend)
 *   broker_stopped_30s_store_exact  the broker stopped for 30 s while the agents send (the
 *                                   collector spools, replays after); label long
 *   aggregator_sigkill_twice_store_exact  the aggregator SIGKILLed twice while the agents send;
 *                                   each new instance has stored all that Kafka held at its start
 *                                   within 15 s
 *
 * Broker 19985, collector HTTP 19986. nosan: preloads the uninstrumented agent into fp-work. */
#define _GNU_SOURCE
#include "aggtest.h"
#include "intern.h"
#include "query_store.h"
#include "store.h"

#include "cm/chunk.h"
#include "cm/wire.h"
#include "support/kafka.h"
#include "support/runner.h"
#include "test-collector-client.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define PORT 19985
#define HTTP 19986
#define NPARTS 3
#define NAG 2

typedef struct {
    char id[33];
    uint64_t service, version;
    int64_t weight[CM_EV_COUNT], count[CM_EV_COUNT], rows[CM_EV_COUNT];
    int in_kafka;
} file_chunk_t;

typedef struct {
    file_chunk_t *v;
    int n, cap;
    uint64_t queue_drops; /* CM_DROP_CHUNK_QUEUE_FULL the chunks report */
} files_t;

/* Every chunk file of dir into f. */
static void load_dir(const char *dir, files_t *f) {
    DIR *d = opendir(dir);
    CHECKF(d != NULL, "%s", dir);
    struct dirent *e;
    static uint8_t buf[32 << 20];
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 4 || strcmp(e->d_name + l - 4, CM_CHUNK_FILE_SUFFIX))
            continue;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *fp = fopen(path, "rb");
        CHECK(fp != NULL);
        size_t len = fread(buf, 1, sizeof buf, fp);
        fclose(fp);
        cm_chunk_t *c;
        char err[256];
        CHECKF(cm_chunk_decode(buf, len, &c, err, sizeof err) == 0, "%s: %s", path, err);
        if (f->n == f->cap)
            f->v = realloc(f->v, (size_t)(f->cap = f->cap ? 2 * f->cap : 64) * sizeof *f->v);
        file_chunk_t *x = &f->v[f->n++];
        memset(x, 0, sizeof *x);
        cm_hex(c->header.chunk_id, 16, x->id);
        x->service = agg_intern_string_id(c->header.service.ptr, c->header.service.len);
        x->version = agg_intern_string_id(c->header.version.ptr, c->header.version.len);
        for (uint32_t t = 1; t < CM_EV_COUNT; t++) {
            const cm_samples_t *s = &c->samples[t];
            for (uint32_t i = 0; i < s->n; i++) {
                x->weight[t] += (int64_t)s->weight[i];
                x->count[t] += (int64_t)cm_samples_count(s, i);
                x->rows[t]++;
            }
        }
        for (uint32_t k = 0; k < c->header.n_drops; k++)
            if (c->header.drops[k].reason == CM_DROP_CHUNK_QUEUE_FULL)
                f->queue_drops += c->header.drops[k].count;
        cm_chunk_free(c);
    }
    closedir(d);
}

typedef struct {
    uint64_t service, version;
    uint32_t type;
    int64_t weight, count, rows;
} sum_t;

typedef struct {
    sum_t v[256];
    int n;
} sums_t;

static sum_t *sum_get(sums_t *s, uint64_t svc, uint64_t ver, uint32_t type) {
    for (int i = 0; i < s->n; i++)
        if (s->v[i].service == svc && s->v[i].version == ver && s->v[i].type == type)
            return &s->v[i];
    CHECK(s->n < 256);
    s->v[s->n] = (sum_t){svc, ver, type, 0, 0, 0};
    return &s->v[s->n++];
}

/* Marks the chunks Kafka holds (once or more), then compares the stores under store_dir with
 * the files' sums over those chunks. Returns the number of differences; *missing: chunks in
 * files but not in Kafka. */
static int compare(files_t *f, const char *bootstrap, const char *store_dir, int *missing) {
    tc_msg_t *m;
    int got = tc_consume(bootstrap, CM_TOPIC_CHUNKS, (size_t)f->n, 90, 5, &m);
    int dups = 0;
    for (int k = 0; k < got; k++) {
        int hit = 0;
        for (int j = 0; j < f->n; j++)
            if (!strcmp(f->v[j].id, m[k].chunk_id)) {
                dups += f->v[j].in_kafka++ > 0;
                hit = 1;
            }
        CHECKF(hit, "chunk %s (%s) in Kafka was not written by an agent", m[k].chunk_id,
               m[k].key);
    }
    free(m);
    sums_t want = {.n = 0}, have = {.n = 0};
    *missing = 0;
    for (int j = 0; j < f->n; j++) {
        if (!f->v[j].in_kafka) {
            ++*missing;
            continue;
        }
        for (uint32_t t = 1; t < CM_EV_COUNT; t++)
            if (f->v[j].rows[t]) {
                sum_t *x = sum_get(&want, f->v[j].service, f->v[j].version, t);
                x->weight += f->v[j].weight[t];
                x->count += f->v[j].count[t];
                x->rows += f->v[j].rows[t];
            }
    }
    /* the stores' totals through the API's read path (query_store.h) */
    char err[512];
    agg_qstore_t *qs = NULL;
    agg_qversion_t *vs = NULL;
    size_t nv = 0;
    CHECKF(agg_qstore_open(store_dir, &qs, err, sizeof err) == 0, "%s", err);
    CHECK(agg_qstore_versions(qs, NULL, &vs, &nv) == 0);
    for (size_t i = 0; i < nv; i++)
        for (uint32_t t = 1; t < CM_EV_COUNT; t++)
            if (vs[i].rows[t]) {
                sum_t *x = sum_get(&have, agg_intern_string_id(vs[i].service, strlen(vs[i].service)),
                                   agg_intern_string_id(vs[i].version, strlen(vs[i].version)), t);
                x->weight += (int64_t)vs[i].weight[t];
                x->count += (int64_t)vs[i].count[t];
                x->rows += (int64_t)vs[i].rows[t];
            }
    agg_qversions_free(vs, nv);
    agg_qstore_close(qs);
    int bad = 0;
    int64_t rows = 0;
    for (int i = 0; i < want.n; i++) {
        sum_t *w = &want.v[i], *h = sum_get(&have, w->service, w->version, w->type);
        rows += w->rows;
        if (h->weight != w->weight || h->count != w->count || h->rows != w->rows) {
            printf("%s: stored weight %lld count %lld rows %lld, files %lld %lld %lld\n",
                   cm_event_name(w->type), (long long)h->weight, (long long)h->count,
                   (long long)h->rows, (long long)w->weight, (long long)w->count,
                   (long long)w->rows);
            bad++;
        }
    }
    if (have.n != want.n) { /* sum_get above added what the stores lack: any extra is theirs */
        printf("the stores hold %d (service, version, type) totals, the files %d\n", have.n,
               want.n);
        bad++;
    }
    printf("%d chunk files (%lld sample rows), %d messages in Kafka (%d duplicates), %d "
           "missing, %llu queue-full drops counted by the agents; stored totals %s\n",
           f->n, (long long)rows, got, dups, *missing, (unsigned long long)f->queue_drops,
           bad ? "DIFFER" : "exactly the files' sums");
    return bad;
}

typedef struct {
    char cli[4200], work[4200];
} agent_bin_t;

static void agent_bins(agent_bin_t *a) {
    const char *b = getenv("FLEETPROF_BUILD");
    CHECKF(b != NULL, "FLEETPROF_BUILD not set (run through ctest)");
    char lib[4200];
    snprintf(a->cli, sizeof a->cli, "%s/cli/fleetprof", b);
    snprintf(lib, sizeof lib, "%s/agent/libfleetprof.so", b);
    snprintf(a->work, sizeof a->work, "%s/tests/fp-work", b);
    CHECKF(!access(lib, R_OK) && !access(a->cli, X_OK) && !access(a->work, X_OK),
           "agent not built: need %s, %s and %s", lib, a->cli, a->work);
}

/* `fp-work threads 2 SECS` under the agent: service, 1-s chunks to sock and into dir. */
static pid_t agent_start(const agent_bin_t *a, const char *service, const char *dir,
                         const char *sock, const char *secs) {
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a failed test */
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        execl(a->cli, a->cli, "run", "--service", service, "--output", dir, "--collector", sock,
              "--interval", "1", "--", a->work, "threads", "2", secs, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void agent_wait(pid_t pid, const char *service, int timeout_s) {
    int st = 0;
    for (int i = 0; i < timeout_s * 20; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid) {
            CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "agent %s: status %d", service, st);
            return;
        }
        usleep(50000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    CHECKF(0, "agent %s (pid %d) still running after %d s: the agent hung", service, (int)pid,
           timeout_s);
}

typedef struct {
    char bootstrap[64], store[64], log[128], group[96];
    tc_collector_t c;
    pid_t agg, ag[NAG];
    char dirs[NAG][300];
    const char *svc[NAG];
    agent_bin_t a;
} run_t;

static pid_t agg_start(run_t *r) {
    const char *extra[] = {"--report-interval", "0", "--log-level", "info", NULL};
    pid_t pid = at_agg_start(r->bootstrap, r->store, r->group, 0, r->log, extra);
    CHECK(pid > 0);
    return pid;
}

static void run_start(run_t *r, const char *tag, const char *secs, const char *const *col_extra) {
    agent_bins(&r->a);
    CHECK(tc_kafka_fresh(PORT, NPARTS, r->bootstrap, sizeof r->bootstrap) == 0);
    CHECK(tc_collector_start(&r->c, r->bootstrap, HTTP, col_extra) == 0);
    at_tmpdir(r->store, tag);
    snprintf(r->log, sizeof r->log, "%.60s/agg.log", r->store);
    snprintf(r->group, sizeof r->group, "%s", at_group_id(tag));
    r->agg = agg_start(r);
    for (int i = 0; i < NAG; i++) {
        snprintf(r->dirs[i], sizeof r->dirs[i], "%s/out-%d", r->c.dir, i);
        CHECK(mkdir(r->dirs[i], 0755) == 0);
        r->ag[i] = agent_start(&r->a, r->svc[i], r->dirs[i], r->c.sock, secs);
    }
}

/* Agents done: their files against Kafka and the caught-up stores; everything stopped. */
static void run_finish(run_t *r, int agent_timeout_s) {
    for (int i = 0; i < NAG; i++)
        agent_wait(r->ag[i], r->svc[i], agent_timeout_s);
    files_t f = {0};
    for (int i = 0; i < NAG; i++)
        load_dir(r->dirs[i], &f);
    CHECKF(f.n >= 2 * NAG, "the agents wrote only %d chunks", f.n);
    /* everything the collector accepted is in Kafka before the stores are compared */
    double deadline = at_now() + 120;
    while (at_now() < deadline &&
           tc_metric(HTTP, "fleetprof_collector_spool_pending_records") != 0)
        at_sleep_ms(200);
    CHECK_EQ(tc_metric(HTTP, "fleetprof_collector_spool_pending_records"), 0);
    rd_kafka_t *rk = at_producer(r->bootstrap);
    int64_t hi[NPARTS];
    CHECK(rk && at_high_watermarks(rk, CM_TOPIC_CHUNKS, NPARTS, hi) == 0);
    rd_kafka_destroy(rk);
    CHECKF(at_wait_caught_up(r->store, CM_TOPIC_CHUNKS, NPARTS, hi, 120) == 0, "see %s", r->log);
    int st = at_agg_stop(r->agg, SIGTERM, 30);
    CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int missing = 0;
    CHECK_EQ(compare(&f, r->bootstrap, r->store, &missing), 0);
    CHECKF((uint64_t)missing <= f.queue_drops, "%d chunks missing, the agents counted only %llu",
           missing, (unsigned long long)f.queue_drops);
    free(f.v);
    st = tc_collector_stop(&r->c, SIGTERM, 30);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "collector status %d", st);
    CHECK(ts_kafka_stop(PORT, 0) == 0);
    tc_cleanup(&r->c);
}

static void test_collector_sigkill_store_exact(void) {
    run_t r = {.svc = {"fault-kill-a", "fault-kill-b"}};
    run_start(&r, "pfkill", "8", NULL);
    CHECK(tc_metric_wait(HTTP, "fleetprof_collector_chunks_accepted_total", 2, 30) >= 2);
    CHECK(tc_collector_stop(&r.c, SIGKILL, 10) >= 0);
    at_sleep_ms(1000);
    CHECK(tc_collector_start(&r.c, r.bootstrap, HTTP, NULL) == 0);
    run_finish(&r, 60);
}

static void test_broker_stopped_30s_store_exact(void) {
    run_t r = {.svc = {"fault-broker-a", "fault-broker-b"}};
    /* deliveries fail during the outage, so the spool's replay path runs */
    const char *extra[] = {"--kafka.message.timeout.ms=10000", "--retry-backoff=2s",
                           "--kafka.reconnect.backoff.max.ms=1000", NULL};
    run_start(&r, "pfbroker", "45", extra);
    CHECK(tc_metric_wait(HTTP, "fleetprof_collector_chunks_delivered_total", 4, 30) >= 4);
    CHECK(ts_kafka_stop(PORT, 1) == 0);
    double down = at_now();
    while (at_now() < down + 30)
        at_sleep_ms(200);
    double pending = tc_metric(HTTP, "fleetprof_collector_spool_pending_records");
    CHECK(ts_kafka_restart(PORT) == 0 || ts_kafka_restart(PORT) == 0);
    printf("broker down for %.1f s; %.0f records waiting in the spool\n", at_now() - down,
           pending);
    CHECKF(pending >= 20, "only %.0f records waiting after 30 s of outage", pending);
    run_finish(&r, 90);
}

/* The aggregator SIGKILLed twice while the agents send: each new instance (same store, same
 * group) has stored everything produced before it started within 15 s of its start. */
static void test_aggregator_sigkill_twice_store_exact(void) {
    run_t r = {.svc = {"fault-agg-a", "fault-agg-b"}};
    run_start(&r, "pfagg", "12", NULL);
    rd_kafka_t *rk = at_producer(r.bootstrap);
    CHECK(rk != NULL);
    for (int k = 0; k < 2; k++) {
        CHECK(tc_metric_wait(HTTP, "fleetprof_collector_chunks_delivered_total", 4 + 6 * k, 30) >=
              4 + 6 * k);
        int st = at_agg_stop(r.agg, SIGKILL, 10);
        CHECK(st >= 0 && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
        int64_t hi[NPARTS];
        CHECK(at_high_watermarks(rk, CM_TOPIC_CHUNKS, NPARTS, hi) == 0);
        double t0 = at_now();
        r.agg = agg_start(&r);
        int caught = 0; /* the agents go on sending: stored offsets pass hi, not stop at it */
        while (!caught && at_now() < t0 + 15) {
            at_sleep_ms(100);
            caught = 1;
            for (int p = 0; p < NPARTS; p++)
                caught &= hi[p] == 0 || at_store_offset(r.store, CM_TOPIC_CHUNKS, p) >= hi[p];
        }
        CHECKF(caught, "kill %d: what Kafka held at the restart is not stored 15 s later; see %s",
               k + 1, r.log);
        printf("kill %d: the new instance stored what Kafka held at its start in %.1f s\n", k + 1,
               at_now() - t0);
    }
    rd_kafka_destroy(rk);
    run_finish(&r, 60);
}

static const tr_test_t tests[] = {
    {"collector_sigkill_store_exact", test_collector_sigkill_store_exact},
    {"broker_stopped_30s_store_exact", test_broker_stopped_30s_store_exact},
    {"aggregator_sigkill_twice_store_exact", test_aggregator_sigkill_twice_store_exact},
    {0, 0},
};
TR_MAIN(tests)
