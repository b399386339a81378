/* Collector benchmark: agents (threads speaking the agent protocol, pre-encoded realistic
 * chunks) -> fleetprof-collector -> a real Kafka broker on loopback.
 *
 *   bench-collector [--seconds S] [--rate R] [--clients N] [--compression LIST]
 *
 * For each Kafka compression in LIST (default "none,lz4,zstd") a fresh collector runs; agents
 * offer R chunks/s (default 2000; 0 = as fast as acks come back, 32 in flight per client) for S
 * seconds (default 15). Reported per run: chunks/s and MB/s accepted and delivered, the
 * collector's CPU (utime+stime from /proc) per chunk and in cores, the delivery latency
 * p50/p99 (from the collector's histogram: bucket upper bounds), and the bytes the broker
 * stored for the topic (its log segments), which is what compression changes.
 * Needs FLEETPROF_SRC and FLEETPROF_BUILD. Broker port 19499, HTTP 19498. */
#define _GNU_SOURCE
#include "cm/wire.h"
#include "support/kafka.h"
#include "test-collector-client.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define PORT 19499
#define HTTP 19498
#define FRAMES 256 /* distinct frames, so a Kafka batch does not hold copies of one frame */
#define WINDOW 32

static uint8_t *frames[FRAMES];
static size_t frame_len[FRAMES];
static double g_seconds = 15, g_rate = 2000;
static int g_clients = 4;
static atomic_uint_fast64_t acked, retried, sent_bytes;
static const char *g_sock;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *client(void *arg) {
    int id = (int)(intptr_t)arg;
    int fd = tc_connect(g_sock, 1);
    if (fd < 0) {
        fprintf(stderr, "client %d cannot connect\n", id);
        return NULL;
    }
    double t0 = now_s(), end = t0 + g_seconds, per = g_rate > 0 ? g_clients / g_rate : 0;
    uint64_t n = 0, outstanding = 0;
    while (now_s() < end) {
        if (per > 0) { /* paced: chunk n is due at t0 + n * per */
            double due = t0 + (double)n * per, d = due - now_s();
            if (d > 0)
                usleep((useconds_t)(d * 1e6));
        }
        int k = (int)((n * 7 + (uint64_t)id) % FRAMES);
        if (tc_send(fd, frames[k], frame_len[k]))
            break;
        atomic_fetch_add(&sent_bytes, frame_len[k]);
        n++;
        outstanding++;
        /* Read acks: all that are ready, and block when the window is full. */
        while (outstanding) {
            uint32_t no;
            int32_t st;
            int rc = tc_ack_read(fd, &no, &st, outstanding >= WINDOW ? 10000 : 0);
            if (rc != 1)
                break;
            outstanding--;
            if (st == 0)
                atomic_fetch_add(&acked, 1);
            else
                atomic_fetch_add(&retried, 1);
        }
    }
    while (outstanding) {
        uint32_t no;
        int32_t st;
        if (tc_ack_read(fd, &no, &st, 10000) != 1)
            break;
        outstanding--;
        atomic_fetch_add(st == 0 ? &acked : &retried, 1);
    }
    close(fd);
    return NULL;
}

/* CPU seconds of a process (tid 0) or of one of its threads. */
static double proc_cpu_s(pid_t pid, pid_t tid) {
    char path[96], buf[1024];
    if (tid)
        snprintf(path, sizeof path, "/proc/%d/task/%d/stat", pid, tid);
    else
        snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    /* fields after ')': state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
     * utime stime */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Bytes in the broker's log segments of the chunks topic. */
static double topic_bytes(void) {
    char cmd[512], line[256];
    snprintf(cmd, sizeof cmd,
             "d=$(cat /tmp/fleetprof-kafka-%d/dir 2>/dev/null); "
             "du -sb \"$d\"/data/%s-* 2>/dev/null "
             "| awk '{s+=$1} END {print s+0}'",
             PORT, CM_TOPIC_CHUNKS);
    FILE *p = popen(cmd, "r");
    double v = -1;
    if (p && fgets(line, sizeof line, p))
        v = atof(line);
    if (p)
        pclose(p);
    return v;
}

static const char *lat_le[] = {"0.001", "0.0025", "0.005", "0.01", "0.025", "0.05", "0.1",
                               "0.25",  "0.5",    "1",     "2.5",  "5",     "10",   "60", "+Inf"};
#define NLE (sizeof lat_le / sizeof *lat_le)

static void lat_snapshot(double *cum) {
    for (size_t i = 0; i < NLE; i++) {
        char name[128];
        snprintf(name, sizeof name,
                 "fleetprof_collector_delivery_latency_seconds_bucket{le=\"%s\"}", lat_le[i]);
        cum[i] = tc_metric(HTTP, name);
    }
}

/* Quantile of the latencies recorded between two snapshots (upper bound of the bucket). */
static double lat_quantile(const double *before, const double *after, double q) {
    double total = after[NLE - 1] - before[NLE - 1];
    for (size_t i = 0; i < NLE - 1; i++)
        if (after[i] - before[i] >= q * total)
            return atof(lat_le[i]);
    return 1e9;
}

/* Sends one chunk and waits for its delivery: the idempotent producer id is acquired and the
 * broker connection is up before anything is measured. */
static void warm_up(const char *sock) {
    int fd = tc_connect(sock, 1);
    uint32_t no;
    int32_t st;
    if (fd < 0 || tc_send(fd, frames[0], frame_len[0]) || tc_ack_read(fd, &no, &st, 10000) != 1)
        fprintf(stderr, "warm-up failed\n");
    close(fd);
    double deadline = now_s() + 30;
    while (now_s() < deadline &&
           tc_metric(HTTP, "fleetprof_collector_chunks_delivered_total") < 1)
        usleep(20000);
}

static int run_one(const char *bootstrap, const char *compression) {
    tc_collector_t c = {0};
    char comp[64];
    snprintf(comp, sizeof comp, "--kafka.compression.type=%s", compression);
    const char *extra[] = {comp, "--log-level=warn", NULL};
    if (tc_collector_start(&c, bootstrap, HTTP, extra))
        return -1;
    g_sock = c.sock;
    warm_up(c.sock);
    double lat0[NLE], lat1[NLE];
    lat_snapshot(lat0);
    double n0 = tc_metric(HTTP, "fleetprof_collector_chunks_delivered_total");
    double in0 = tc_metric(HTTP, "fleetprof_collector_bytes_accepted_total");
    atomic_store(&acked, 0);
    atomic_store(&retried, 0);
    atomic_store(&sent_bytes, 0);
    double bytes0 = topic_bytes(), cpu0 = proc_cpu_s(c.pid, 0), t0 = now_s();
    double loop0 = proc_cpu_s(c.pid, c.pid); /* the libuv loop thread is the main thread */
    pthread_t th[64];
    for (int i = 0; i < g_clients; i++)
        pthread_create(&th[i], NULL, client, (void *)(intptr_t)i);
    for (int i = 0; i < g_clients; i++)
        pthread_join(th[i], NULL);
    double t_send = now_s() - t0;
    uint64_t n = atomic_load(&acked);
    /* Wait for every accepted chunk to be delivered. */
    double deadline = now_s() + 120;
    while (now_s() < deadline &&
           tc_metric(HTTP, "fleetprof_collector_chunks_delivered_total") < (double)n + n0)
        usleep(20000);
    double t_all = now_s() - t0, cpu = proc_cpu_s(c.pid, 0) - cpu0;
    double loop_cpu = proc_cpu_s(c.pid, c.pid) - loop0;
    double delivered = tc_metric(HTTP, "fleetprof_collector_chunks_delivered_total") - n0;
    double in_bytes = tc_metric(HTTP, "fleetprof_collector_bytes_accepted_total") - in0;
    lat_snapshot(lat1);
    usleep(1500000); /* let the broker write its segments */
    double stored = topic_bytes() - bytes0;
    double p50 = lat_quantile(lat0, lat1, 0.5), p99 = lat_quantile(lat0, lat1, 0.99);
    printf("compression=%-5s offered=%s clients=%d accepted=%llu retried=%llu in %.1f s: "
           "%.0f chunks/s %.1f MB/s accepted; delivered %.0f in %.1f s (%.0f chunks/s); "
           "collector cpu %.2f s = %.0f us/chunk = %.2f cores (loop thread %.0f us/chunk, "
           "so one core takes %.0f chunks/s); latency p50<=%gs p99<=%gs; "
           "broker stored %.1f MB for %.1f MB of frames (%.3f)\n",
           compression, g_rate > 0 ? "paced" : "max", g_clients, (unsigned long long)n,
           (unsigned long long)atomic_load(&retried), t_send, (double)n / t_send,
           in_bytes / t_send / 1e6, delivered, t_all, delivered / t_all, cpu,
           cpu / (double)n * 1e6, cpu / t_all, loop_cpu / (double)n * 1e6,
           (double)n / loop_cpu, p50, p99, stored / 1e6, in_bytes / 1e6,
           stored / in_bytes);
    fflush(stdout);
    tc_collector_stop(&c, SIGTERM, 30);
    tc_cleanup(&c);
    return 0;
}

int main(int argc, char **argv) {
    const char *comps = "none,lz4,zstd";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--seconds"))
            g_seconds = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--rate"))
            g_rate = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--clients"))
            g_clients = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--compression"))
            comps = argv[i + 1];
        else {
            fprintf(stderr, "usage: %s [--seconds S] [--rate R] [--clients N] "
                            "[--compression none,lz4,zstd]\n", argv[0]);
            return 2;
        }
    }
    if (g_clients < 1 || g_clients > 64)
        g_clients = 4;
    const char *services[] = {"checkout-api", "search", "billing", "frontend",
                              "inventory",    "auth",   "payments", "shipping"};
    size_t total = 0;
    for (int i = 0; i < FRAMES; i++) {
        if (tc_frame_make(services[i % 8], (uint64_t)i, 10000, &frames[i], &frame_len[i]))
            return 1;
        total += frame_len[i];
    }
    printf("realistic chunk frames: %zu bytes on average (10,000 CPU samples, 500 stacks)\n",
           total / FRAMES);
    char bootstrap[64];
    if (tc_kafka_fresh(PORT, 4, bootstrap, sizeof bootstrap))
        return 1;
    char list[256];
    snprintf(list, sizeof list, "%s", comps);
    for (char *save, *c = strtok_r(list, ",", &save); c; c = strtok_r(NULL, ",", &save))
        if (run_one(bootstrap, c))
            fprintf(stderr, "run with compression %s failed\n", c);
    ts_kafka_stop(PORT, 0);
    for (int i = 0; i < FRAMES; i++)
        free(frames[i]);
    return 0;
}
