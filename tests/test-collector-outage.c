/* The broker is stopped for 60 s in the middle of a run and started again, while two agents
 * keep sending: every accepted chunk arrives, in order per service (first occurrences; the
 * duplicates a replay may add are removed by chunk id downstream). message.timeout.ms is set
 * below the outage so deliveries do fail and the spool replay path runs. Broker 19403; HTTP
 * 19455. */
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

#define PORT 19403
#define HTTP 19455

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* An agent: one chunk every 50 ms until `until`, each acked before the next; writes the number
 * of accepted chunks to out_fd. */
static void agent(const char *sock, const char *service, double until, int out_fd) {
    int fd = tc_connect(sock, 1);
    uint64_t seq = 0;
    uint32_t no = 0;
    while (fd >= 0 && now_s() < until) {
        uint8_t *f;
        size_t len;
        if (tc_frame_make(service, seq, 500, &f, &len))
            _exit(2);
        uint32_t ano;
        int32_t st;
        int rc = tc_send(fd, f, len);
        free(f);
        if (rc || tc_ack_read(fd, &ano, &st, 10000) != 1 || ano != ++no) {
            fprintf(stderr, "agent %s: lost the collector at seq %llu\n", service,
                    (unsigned long long)seq);
            _exit(3);
        }
        if (st == 0)
            seq++;
        else if (st != CM_SOCK_RETRY)
            _exit(4);
        usleep(50000);
    }
    if (write(out_fd, &seq, sizeof seq) != sizeof seq)
        _exit(5);
    _exit(0);
}

static void test_broker_outage_60s(void) {
    char bootstrap[64];
    CHECK(tc_kafka_fresh(PORT, 3, bootstrap, sizeof bootstrap) == 0);
    tc_collector_t c = {0};
    const char *extra[] = {"--kafka.message.timeout.ms=10000", "--retry-backoff=2s",
                           "--kafka.reconnect.backoff.max.ms=1000", NULL};
    CHECK(tc_collector_start(&c, bootstrap, HTTP, extra) == 0);
    const char *services[2] = {"alpha", "beta"};
    int pipes[2][2];
    pid_t pids[2];
    double t0 = now_s(), until = t0 + 10 + 60 + 10;
    for (int i = 0; i < 2; i++) {
        CHECK(pipe(pipes[i]) == 0);
        if ((pids[i] = fork()) == 0)
            agent(c.sock, services[i], until, pipes[i][1]);
        close(pipes[i][1]);
    }
    while (now_s() < t0 + 10)
        usleep(100000);
    double before = tc_metric(HTTP, "fleetprof_collector_chunks_delivered_total");
    CHECKF(before > 100, "only %.0f delivered before the outage", before);
    CHECK(ts_kafka_stop(PORT, 1) == 0);
    double down = now_s();
    printf("broker down at t=%.1f s\n", down - t0);
    while (now_s() < down + 60)
        usleep(200000);
    double during = tc_metric(HTTP, "fleetprof_collector_spool_pending_records");
    CHECK(ts_kafka_restart(PORT) == 0 || ts_kafka_restart(PORT) == 0);
    printf("broker up again at t=%.1f s; %.0f records were waiting in the spool\n",
           now_s() - t0, during);
    CHECKF(during > 500, "only %.0f records waiting after 60 s of outage", during);
    uint64_t sent[2];
    for (int i = 0; i < 2; i++) {
        int st;
        CHECK(read(pipes[i][0], &sent[i], sizeof sent[i]) == sizeof sent[i]);
        waitpid(pids[i], &st, 0);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "agent %s status %d", services[i], st);
    }
    double accepted = tc_metric(HTTP, "fleetprof_collector_chunks_accepted_total");
    CHECK_EQ(accepted, (double)(sent[0] + sent[1]));
    /* Everything accepted is delivered (at least once). */
    double deadline = now_s() + 120;
    while (now_s() < deadline && tc_metric(HTTP, "fleetprof_collector_spool_pending_records") != 0)
        usleep(200000);
    CHECK_EQ(tc_metric(HTTP, "fleetprof_collector_spool_pending_records"), 0);
    double errors = tc_metric(HTTP, "fleetprof_collector_kafka_delivery_errors_total");
    double rewinds = tc_metric(HTTP, "fleetprof_collector_kafka_rewinds_total");
    printf("sent %llu + %llu; delivery errors %.0f, replays %.0f\n",
           (unsigned long long)sent[0], (unsigned long long)sent[1], errors, rewinds);
    CHECK(errors > 0 && rewinds > 0);
    tc_msg_t *m;
    int got = tc_consume(bootstrap, CM_TOPIC_CHUNKS, sent[0] + sent[1], 120, 3, &m);
    int dups = 0;
    for (int s = 0; s < 2; s++) {
        char *seen = calloc(sent[s], 1);
        uint64_t next = 0;
        for (int i = 0; i < got; i++) {
            if (strcmp(m[i].key, services[s]))
                continue;
            uint64_t q = m[i].sequence;
            CHECKF(q < sent[s], "%s: unexpected seq %llu", services[s], (unsigned long long)q);
            char id[33];
            tc_chunk_id_hex(services[s], q, id);
            CHECK(!strcmp(id, m[i].chunk_id));
            if (seen[q]) {
                dups++;
                continue;
            }
            CHECKF(q == next, "%s: seq %llu arrived first where %llu was due", services[s],
                   (unsigned long long)q, (unsigned long long)next);
            seen[q] = 1;
            next++;
        }
        CHECKF(next == sent[s], "%s: %llu of %llu arrived", services[s],
               (unsigned long long)next, (unsigned long long)sent[s]);
        free(seen);
    }
    printf("consumed %d messages, %d duplicates (removed by chunk id downstream)\n", got, dups);
    free(m);
    int st = tc_collector_stop(&c, SIGTERM, 30);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "collector status %d", st);
    CHECK(ts_kafka_stop(PORT, 0) == 0);
    tc_cleanup(&c);
}

static const tr_test_t tests[] = {
    {"broker_outage_60s", test_broker_outage_60s},
    {0, 0},
};
TR_MAIN(tests)
