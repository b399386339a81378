/* The collector with a real Kafka broker: end to end through the agent protocol, spool full
 * (oldest dropped, counter exact), SIGKILL and restart (the spool replays), SIGTERM drain.
 * Runs the real fleetprof-collector binary. Brokers: 19400, 19401; HTTP: 19450-19459. */
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
    ts_kafka_stop(port, 0);
    CHECK(ts_kafka_start(port, partitions, NULL, bootstrap, sizeof bootstrap) == 0);
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
            CHECKF(m[i].sequence < n, "unexpected sequence %llu", (unsigned long long)m[i].sequence);
            char id[33];
            tc_chunk_id_hex(services[s], m[i].sequence, id);
            CHECKF(!strcmp(id, m[i].chunk_id), "chunk id mismatch for %s/%llu", services[s],
                   (unsigned long long)m[i].sequence);
            if (seen[m[i].sequence]) {
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
    CHECK_EQ(tc_metric_wait(19450, "fleetprof_collector_connected_agents", 3, 10), 3);
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
    int st = tc_collector_stop(&c, SIGTERM, 20);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "collector exit status %d", st);
    CHECK(ts_kafka_stop(19400, 0) == 0);
    tc_cleanup(&c);
}

static const tr_test_t tests[] = {
    {"end_to_end", test_end_to_end},
    {0, 0},
};
TR_MAIN(tests)
