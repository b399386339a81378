/* The collector with a real Kafka broker: end to end through the agent protocol, spool full
 * (oldest dropped, counter exact), SIGKILL and restart (the spool replays), SIGTERM drain.
 * Runs the real fleetprof-collector binary. Brokers: 19400, 19401; HTTP: 19450-19459. */
#include "cm/error.h"
#include "cm/wire.h"
#include "support/kafka.h"
#include "support/runner.h"
#include "test-collector-client.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char bootstrap[64];

/* A fresh broker: one left over by a failed run would hold old messages. */
static void kafka_fresh(int port, int partitions) {
    CHECK(tc_kafka_fresh(port, partitions, bootstrap, sizeof bootstrap) == 0);
}

/* Sends chunks seq [from, to) of service on fd, waiting for each ack; returns how many were
 * acked with status 0 (stops at the first non-zero status or error). */
static int send_range(int fd, const char *service, uint64_t from, uint64_t to, uint32_t samples,
                      uint32_t *msg_no) {
    int ok = 0;
    for (uint64_t s = from; s < to; s++) {
        uint8_t *f;
        size_t len;
        CHECK(tc_frame_make(service, s, samples, &f, &len) == 0);
        int rc = tc_send(fd, f, len);
        free(f);
        if (rc)
            return ok;
        uint32_t no;
        int32_t st;
        if (tc_ack_read(fd, &no, &st, 10000) != 1)
            return ok;
        CHECK_EQ(no, ++*msg_no);
        if (st != 0)
            return ok;
        ok++;
    }
    return ok;
}

/* Asserts: for every service, the distinct chunk ids are exactly seq [0, n) and their first
 * occurrences come in sequence order. Returns the number of duplicates. */
static int check_complete_in_order(tc_msg_t *m, int got, const char *const *services, int ns,
                                   uint64_t n) {
    int dups = 0;
    for (int s = 0; s < ns; s++) {
        char *seen = calloc(n, 1);
        uint64_t next = 0;
        for (int i = 0; i < got; i++) {
            if (strcmp(m[i].key, services[s]))
                continue;
            CHECKF(m[i].sequence < n, "unexpected sequence %llu",
                   (unsigned long long)m[i].sequence);
            char id[33];
            tc_chunk_id_hex(services[s], m[i].sequence, id);
            CHECKF(!strcmp(id, m[i].chunk_id), "chunk id mismatch for %s/%llu", services[s],
                   (unsigned long long)m[i].sequence);
            if (seen[m[i].sequence]) {
                if (getenv("TC_VERBOSE"))
                    fprintf(stderr, "dup %s/%llu p%d@%lld\n", services[s],
                            (unsigned long long)m[i].sequence, m[i].partition,
                            (long long)m[i].offset);
                dups++;
                continue;
            }
            CHECKF(m[i].sequence == next, "%s: first occurrence of seq %llu came when %llu was "
                   "expected (out of order or missing)",
                   services[s], (unsigned long long)m[i].sequence, (unsigned long long)next);
            seen[m[i].sequence] = 1;
            next++;
        }
        CHECKF(next == n, "%s: %llu of %llu chunks arrived", services[s],
               (unsigned long long)next, (unsigned long long)n);
        free(seen);
    }
    return dups;
}

static void test_end_to_end(void) {
    kafka_fresh(19400, 3);
    tc_collector_t c = {0};
    const char *extra[] = {"--id=col-test", NULL};
    CHECK(tc_collector_start(&c, bootstrap, 19450, extra) == 0);
    const char *services[] = {"checkout-api", "search", "billing"};
    enum { N = 40 };
    int fds[3];
    uint32_t no[3] = {0};
    for (int s = 0; s < 3; s++)
        CHECK((fds[s] = tc_connect(c.sock, 1)) >= 0);
    CHECK_EQ(tc_metric_wait_eq(19450, "fleetprof_collector_connected_agents", 3, 10), 3);
    /* Interleave the services so their chunks share the pipeline. */
    for (uint64_t i = 0; i < N; i++)
        for (int s = 0; s < 3; s++)
            CHECK_EQ(send_range(fds[s], services[s], i, i + 1, 2000, &no[s]), 1);
    CHECK_EQ(tc_metric_wait(19450, "fleetprof_collector_chunks_delivered_total", 3 * N, 30),
             3 * N);
    tc_msg_t *m;
    int got = tc_consume(bootstrap, CM_TOPIC_CHUNKS, 3 * N, 60, 2, &m);
    CHECK_EQ(got, 3 * N);
    CHECK_EQ(check_complete_in_order(m, got, services, 3, N), 0);
    char pid[16];
    snprintf(pid, sizeof pid, "%d", getpid());
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    for (int i = 0; i < got; i++) {
        CHECKF(!strcmp(m[i].peer_pid_hdr, pid), "fp-peer-pid '%s' != %s", m[i].peer_pid_hdr, pid);
        CHECKF(!strcmp(m[i].host_hdr, host), "fp-host '%s' != %s", m[i].host_hdr, host);
    }
    /* One service, one partition. */
    for (int i = 0; i < got; i++)
        for (int j = 0; j < got; j++)
            if (!strcmp(m[i].key, m[j].key))
                CHECK_EQ(m[i].partition, m[j].partition);
    free(m);
    char body[4096];
    CHECK_EQ(tc_http_get(19450, "/healthz", body, sizeof body), 200);
    CHECK(strstr(body, "ok") == body);
    CHECK_EQ(tc_metric(19450, "fleetprof_collector_delivery_latency_seconds_count"), 3 * N);
    /* The first chunks wait for the idempotent producer id; all are under 10 s. */
    CHECK_EQ(tc_metric(19450, "fleetprof_collector_delivery_latency_seconds_bucket{le=\"10\"}"),
             3 * N);
    CHECK_EQ(tc_metric(19450, "fleetprof_collector_chunks_accepted_total"), 3 * N);
    CHECK_EQ(tc_metric(19450, "fleetprof_collector_spool_pending_records"), 0);
    for (int s = 0; s < 3; s++)
        close(fds[s]);

    /* SIGTERM right after a burst: the drain delivers everything accepted before exiting. */
    int fd = tc_connect(c.sock, 1);
    enum { B = 100 };
    for (uint64_t i = 0; i < B; i++) {
        uint8_t *f;
        size_t len;
        CHECK(tc_frame_make("drain", i, 2000, &f, &len) == 0);
        CHECK(tc_send(fd, f, len) == 0);
        free(f);
    }
    for (uint32_t i = 1; i <= B; i++) {
        uint32_t ano;
        int32_t ast;
        CHECK_EQ(tc_ack_read(fd, &ano, &ast, 10000), 1);
        CHECK(ano == i && ast == 0);
    }
    int st = tc_collector_stop(&c, SIGTERM, 20);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "collector exit status %d", st);
    close(fd);
    const char *drain[] = {"drain"};
    got = tc_consume(bootstrap, CM_TOPIC_CHUNKS, 3 * N + B, 60, 2, &m);
    CHECK(got >= 3 * N + B);
    tc_msg_t *dm = calloc((size_t)got, sizeof *dm);
    int nd = 0;
    for (int i = 0; i < got; i++)
        if (!strcmp(m[i].key, "drain"))
            dm[nd++] = m[i];
    check_complete_in_order(dm, nd, drain, 1, B);
    free(dm);
    free(m);
    CHECK(ts_kafka_stop(19400, 0) == 0);
    tc_cleanup(&c);
}

/* Spool full while Kafka is unreachable: the oldest records go first, the drop counter says
 * exactly how many, and everything else arrives once the broker is up. */
static void test_spool_full_drops_oldest(void) {
    ts_kafka_stop(19401, 0);
    snprintf(bootstrap, sizeof bootstrap, "127.0.0.1:19401");
    tc_collector_t c = {0};
    /* One message in flight, so exactly record 0 sits in librdkafka and the rest in the spool. */
    const char *extra[] = {"--spool-max=1MiB", "--segment-size=64KiB", "--max-inflight=1",
                           "--kafka.reconnect.backoff.max.ms=500", NULL};
    CHECK(tc_collector_start(&c, bootstrap, 19451, extra) == 0);
    int fd = tc_connect(c.sock, 1);
    uint32_t no = 0;
    enum { N = 200 };
    CHECK_EQ(send_range(fd, "full", 0, N, 500, &no), N);
    double dropped =
        tc_metric(19451, "fleetprof_collector_chunks_dropped_total{reason=\"spool_full\"}");
    CHECKF(dropped > 0 && dropped < N - 1, "dropped %.0f", dropped);
    CHECK(tc_metric(19451, "fleetprof_collector_spool_bytes") <= 1 << 20);
    CHECK_EQ(tc_metric(19451, "fleetprof_collector_chunks_accepted_total"), N);
    kafka_fresh(19401, 2);
    /* The in-flight record's segment was deleted too; when its delivery fails (the broker may
     * answer UNKNOWN_TOPIC while it creates the topic) it is counted as dropped at the replay,
     * after this point: wait until every accepted record is delivered or counted. */
    double delivered = 0, dropped_end = dropped;
    for (int i = 0; i < 600; i++) {
        delivered = tc_metric(19451, "fleetprof_collector_chunks_delivered_total");
        dropped_end =
            tc_metric(19451, "fleetprof_collector_chunks_dropped_total{reason=\"spool_full\"}");
        if (delivered + dropped_end >= N)
            break;
        usleep(100000);
    }
    printf("dropped %.0f while the broker was down, %.0f in all; delivered %.0f\n", dropped,
           dropped_end, delivered);
    CHECK(dropped_end == dropped || dropped_end == dropped + 1); /* + the in-flight one */
    double dropped_down = dropped;
    int want = N - (int)dropped_end;
    CHECK_EQ(delivered, want);
    tc_msg_t *m;
    int got = tc_consume(bootstrap, CM_TOPIC_CHUNKS, (size_t)want, 60, 3, &m);
    CHECK_EQ(got, want);
    /* Delivered: record 0 (in flight, unless its delivery failed after its segment was
     * deleted: then counted) and the newest ones; lost: 1 .. dropped_down. */
    for (int i = 0; i < got; i++) {
        uint64_t q = m[i].sequence;
        CHECKF(q == 0 || q > (uint64_t)dropped_down, "seq %llu should have been dropped",
               (unsigned long long)q);
        if (i > 0)
            CHECKF(q > m[i - 1].sequence, "out of order: %llu after %llu",
                   (unsigned long long)q, (unsigned long long)m[i - 1].sequence);
    }
    CHECK_EQ(tc_metric(19451, "fleetprof_collector_chunks_delivered_total"), want);
    free(m);
    close(fd);
    CHECK(tc_collector_stop(&c, SIGTERM, 20) == 0);
    CHECK(ts_kafka_stop(19401, 0) == 0);
    tc_cleanup(&c);
}

/* SIGKILL with records in the spool (broker down), restart: they are delivered; agents resend
 * what was not acked; every chunk arrives, in order per service. */
static void test_sigkill_restart_replays(void) {
    kafka_fresh(19400, 2);
    tc_collector_t c = {0};
    const char *extra[] = {"--kafka.reconnect.backoff.max.ms=500", "--spool-fsync=none", NULL};
    CHECK(tc_collector_start(&c, bootstrap, 19452, extra) == 0);
    int fd = tc_connect(c.sock, 1);
    uint32_t no = 0;
    CHECK_EQ(send_range(fd, "kill", 0, 60, 2000, &no), 60);
    CHECK_EQ(tc_metric_wait(19452, "fleetprof_collector_chunks_delivered_total", 60, 30), 60);
    CHECK(ts_kafka_stop(19400, 1) == 0);
    CHECK_EQ(send_range(fd, "kill", 60, 100, 2000, &no), 40); /* into the spool only */
    CHECK_EQ(tc_metric(19452, "fleetprof_collector_chunks_delivered_total"), 60);
    /* A chunk sent but not acked when the collector dies: the agent resends it. */
    uint8_t *f;
    size_t len;
    CHECK(tc_frame_make("kill", 100, 2000, &f, &len) == 0);
    CHECK(tc_send(fd, f, len) == 0);
    CHECK(tc_collector_stop(&c, SIGKILL, 10) >= 0);
    close(fd);
    char cpath[400], cline[128] = "";
    snprintf(cpath, sizeof cpath, "%s/commit", c.spool);
    FILE *cf = fopen(cpath, "r");
    if (cf) {
        if (!fgets(cline, sizeof cline, cf))
            cline[0] = 0;
        fclose(cf);
    }
    printf("commit file at the kill: %s", cline[0] ? cline : "(none)\n");
    CHECK(ts_kafka_restart(19400) == 0 || ts_kafka_restart(19400) == 0);
    CHECK(tc_collector_start(&c, bootstrap, 19452, extra) == 0);
    double replayed = tc_metric(19452, "fleetprof_collector_spool_replayed_total");
    printf("replayed %.0f records\n", replayed);
    CHECK(replayed >= 40);
    fd = tc_connect(c.sock, 1);
    no = 0;
    CHECK_EQ(tc_send_acked(fd, f, len, &no), 0); /* the resend */
    free(f);
    CHECK_EQ(send_range(fd, "kill", 101, 120, 2000, &no), 19);
    tc_msg_t *m;
    int got = tc_consume(bootstrap, CM_TOPIC_CHUNKS, 120, 90, 3, &m);
    const char *svc[] = {"kill"};
    int dups = check_complete_in_order(m, got, svc, 1, 120);
    printf("%d messages, %d duplicates\n", got, dups);
    free(m);
    close(fd);
    CHECK(tc_collector_stop(&c, SIGTERM, 20) == 0);
    CHECK(ts_kafka_stop(19400, 0) == 0);
    tc_cleanup(&c);
}


/* A valid chunk whose Kafka record would pass the topic's max.message.bytes (Kafka's default
 * 1048588 here; the collector reads it from the broker) is refused with CM_ETOOBIG before the
 * ack and counted; before, it was acked 0, then refused by the broker and lost. A chunk that
 * fits is accepted and delivered as usual. Broker 19750, HTTP 19751. */
static void test_chunk_over_kafka_limit_refused(void) {
    kafka_fresh(19750, 1);
    tc_collector_t c = {0};
    CHECK(tc_collector_start(&c, bootstrap, 19751, NULL) == 0);
    /* the limit is read from the broker (logged once known) */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "grep -q 'topic max.message.bytes.*bytes=1048588' %s", c.log);
    for (int i = 0; i < 100 && system(cmd) != 0; i++)
        usleep(200000);
    CHECK(system(cmd) == 0);
    CHECK_EQ(tc_metric(19751, "fleetprof_collector_kafka_max_message_bytes"), 1048588);
    int fd = tc_connect(c.sock, 1);
    CHECK(fd >= 0);
    uint32_t no = 0;
    uint8_t *big;
    size_t big_len;
    CHECK(tc_frame_make_big("big", 0, 5000, 512, &big, &big_len) == 0);
    printf("big chunk: %zu bytes\n", big_len);
    CHECK(big_len > 1048588 && big_len < 16u << 20); /* under max-msg: only Kafka refuses it */
    CHECK_EQ(tc_send_acked(fd, big, big_len, &no), CM_ETOOBIG);
    free(big);
    CHECK_EQ(send_range(fd, "big", 1, 3, 2000, &no), 2);
    CHECK_EQ(tc_metric(19751, "fleetprof_collector_chunks_over_kafka_limit_total"), 1);
    CHECK_EQ(tc_metric(19751, "fleetprof_collector_chunks_rejected_total{reason=\"ETOOBIG\"}"),
             1);
    CHECK_EQ(tc_metric(19751, "fleetprof_collector_chunks_accepted_total"), 2);
    CHECK_EQ(tc_metric_wait(19751, "fleetprof_collector_chunks_delivered_total", 2, 30), 2);
    CHECK_EQ(tc_metric(19751, "fleetprof_collector_chunks_dropped_total{reason=\"kafka_rejected\"}"),
             0);
    tc_msg_t *m = NULL;
    int got = tc_consume(bootstrap, CM_TOPIC_CHUNKS, 2, 30, 3, &m);
    CHECK_EQ(got, 2);
    CHECK(m[0].sequence == 1 && m[1].sequence == 2);
    free(m);
    snprintf(cmd, sizeof cmd, "grep -q 'rejected a chunk too big for Kafka' %s", c.log);
    CHECK(system(cmd) == 0);
    close(fd);
    CHECK(tc_collector_stop(&c, SIGTERM, 20) == 0);
    tc_cleanup(&c);
    ts_kafka_stop(19750, 0);
}

static const tr_test_t tests[] = {
    {"end_to_end", test_end_to_end},
    {"spool_full_drops_oldest", test_spool_full_drops_oldest},
    {"sigkill_restart_replays", test_sigkill_restart_replays},
    {"chunk_over_kafka_limit_refused", test_chunk_over_kafka_limit_refused},
    {0, 0},
};
TR_MAIN(tests)
