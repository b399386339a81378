/* Aggregator benchmark, end to end with a real Kafka broker (port 19530) and the real
 * fleetprof-aggregator binary pinned to one core (AT_CPU, default 1):
 *
 *   throughput  a fleet of 1,000 processes (20 services x 5 versions x 10 processes), each chunk
 *               10 s of 1,000 events/s (10,000 samples over the six event types), `intervals`
 *               rounds, produced first; then the aggregator ingests from Kafka to committed
 *               store. Reports samples/s and chunks/s over wall time (first commit to caught
 *               up) and per CPU-second of the aggregator, and store bytes per ingested sample.
 *   lag         the same fleet produced in real time (100 chunks/s = 1M samples/s) for
 *               `seconds`; reports the consumer lag (messages, from /metrics) each second.
 *
 *   bench-aggregator [intervals=2] [lag_seconds=60]
 * Needs FLEETPROF_SRC and FLEETPROF_BUILD (defaults: ../.. of this program and ..). */
#include "aggtest.h"
#include "fleetsim.h"

#include "cm/wire.h"
#include "support/kafka.h"

#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PORT 19530
#define HTTP 19531
#define NPARTS 4

static char bootstrap[64];

static double metric(const char *name) {
    char cmd[256], line[512];
    snprintf(cmd, sizeof cmd, "curl -s -m 2 http://127.0.0.1:%d/metrics", HTTP);
    FILE *p = popen(cmd, "r");
    double v = 0;
    size_t nl = strlen(name);
    while (p && fgets(line, sizeof line, p))
        if (!strncmp(line, name, nl) && (line[nl] == ' ' || line[nl] == '{'))
            v += atof(strrchr(line, ' ') + 1);
    if (p)
        pclose(p);
    return v;
}

static double cpu_seconds(pid_t pid) {
    char path[64], buf[2048];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    /* fields after ")": state(3) ... utime(14) stime(15) */
    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st);
    return (ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int64_t dir_bytes(const char *dir) {
    int64_t t = 0;
    for (int p = 0; p < NPARTS; p++) {
        char path[256], wal[300];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s-%d.db", dir, CM_TOPIC_CHUNKS, p);
        snprintf(wal, sizeof wal, "%s-wal", path);
        if (!stat(path, &sb))
            t += sb.st_size;
        if (!stat(wal, &sb))
            t += sb.st_size;
    }
    return t;
}

static fsim_params_t fleet(uint32_t intervals, uint64_t seed) {
    return (fsim_params_t){.seed = seed, .services = 20, .versions = 5, .processes = 10,
                           .intervals = intervals, .samples = 1667, .stacks = 500};
}

static void throughput(uint32_t intervals) {
    char dir[64], log[128];
    at_tmpdir(dir, "bench");
    snprintf(log, sizeof log, "%s/agg.log", dir);
    fsim_params_t sp = fleet(intervals, 1);
    fsim_t *sim = fsim_new(&sp);
    rd_kafka_t *rk = at_producer(bootstrap);
    double t0 = at_now();
    if (fsim_produce(sim, rk, CM_TOPIC_CHUNKS, 0))
        exit(1);
    const fsim_counts_t *n = fsim_counts(sim);
    printf("produced %llu chunks, %llu samples in %.1f s\n", (unsigned long long)n->chunks,
           (unsigned long long)n->samples, at_now() - t0);
    int64_t hi[NPARTS];
    at_high_watermarks(rk, CM_TOPIC_CHUNKS, NPARTS, hi);
    const char *extra[] = {"--log-level", "warn", "--retention-interval", "0", "--http-port",
                           "19531", NULL};
    pid_t pid = at_agg_start(bootstrap, dir, "bench-throughput", 0, log, extra);
    /* start the clock at the first commit: group join is not ingest */
    double s0 = 0, ta = 0, ca = 0;
    for (double end = at_now() + 60; at_now() < end; at_sleep_ms(20))
        if ((s0 = metric("fleetprof_aggregator_samples_total")) > 0)
            break;
    ta = at_now();
    ca = cpu_seconds(pid);
    if (at_wait_caught_up(dir, CM_TOPIC_CHUNKS, NPARTS, hi, 600)) {
        fprintf(stderr, "did not catch up; see %s\n", log);
        exit(1);
    }
    double s1 = 0;
    for (double end = at_now() + 10; at_now() < end; at_sleep_ms(20))
        if ((s1 = metric("fleetprof_aggregator_samples_total")) >= (double)n->samples)
            break;
    double tb = at_now(), cb = cpu_seconds(pid);
    double chunks = metric("fleetprof_aggregator_chunks_total");
    double wsum = metric("fleetprof_aggregator_write_seconds_sum");
    double wcnt = metric("fleetprof_aggregator_write_seconds_count");
    at_agg_stop(pid, SIGTERM, 60);
    double ds = s1 - s0, frac = ds / s1;
    printf("throughput: %.0f samples in %.2f s wall, %.2f CPU-s of the aggregator (pinned to one "
           "core)\n", ds, tb - ta, cb - ca);
    printf("throughput: %.2f M samples/s wall, %.2f M samples per CPU-second, %.0f chunks/s "
           "wall\n", ds / (tb - ta) / 1e6, ds / (cb - ca) / 1e6, chunks * frac / (tb - ta));
    printf("store writes: %.0f transactions, mean %.1f ms\n", wcnt, wcnt ? wsum / wcnt * 1e3 : 0);
    int64_t bytes = dir_bytes(dir);
    printf("store: %.1f MB for %llu samples = %.1f bytes per ingested sample (WAL checkpointed "
           "at exit)\n", bytes / 1e6, (unsigned long long)n->samples,
           (double)bytes / (double)n->samples);
    int bad = at_check_truth(sim, dir, CM_TOPIC_CHUNKS, NPARTS);
    printf("truth check: %s\n", bad ? "MISMATCH" : "exact");
    rd_kafka_destroy(rk);
    fsim_free(sim);
}

typedef struct {
    fsim_t *sim;
    rd_kafka_t *rk;
    volatile int done;
} prod_t;

static void *prod_main(void *arg) {
    prod_t *p = arg;
    fsim_produce(p->sim, p->rk, CM_TOPIC_CHUNKS, 100.0);
    p->done = 1;
    return NULL;
}

static void lag(int seconds) {
    char dir[64], log[128];
    at_tmpdir(dir, "lag");
    snprintf(log, sizeof log, "%s/agg.log", dir);
    const char *extra[] = {"--log-level", "warn", "--http-port", "19531", NULL};
    pid_t pid = at_agg_start(bootstrap, dir, "bench-lag", 0, log, extra);
    at_sleep_ms(4000); /* join the group first: the topic already holds the throughput data */
    fsim_params_t sp = fleet((uint32_t)(seconds / 10), 2);
    fsim_t *sim = fsim_new(&sp);
    rd_kafka_t *rk = at_producer(bootstrap);
    /* the store starts from the beginning: wait until the old data is consumed */
    int64_t hi[NPARTS];
    at_high_watermarks(rk, CM_TOPIC_CHUNKS, NPARTS, hi);
    if (at_wait_caught_up(dir, CM_TOPIC_CHUNKS, NPARTS, hi, 600)) {
        fprintf(stderr, "lag: could not catch up with the backlog\n");
        exit(1);
    }
    prod_t pa = {sim, rk, 0};
    pthread_t th;
    pthread_create(&th, NULL, prod_main, &pa);
    double t0 = at_now(), max = 0, sum = 0;
    int nsamp = 0;
    printf("lag (messages, sum over partitions) each second at 100 chunks/s = 1M samples/s:");
    while (!pa.done) {
        at_sleep_ms(1000);
        double l = metric("fleetprof_aggregator_lag_messages");
        printf(" %.0f", l);
        fflush(stdout);
        if (at_now() - t0 > 5) { /* after warm-up */
            max = l > max ? l : max;
            sum += l;
            nsamp++;
        }
    }
    pthread_join(th, NULL);
    double tp = at_now();
    at_high_watermarks(rk, CM_TOPIC_CHUNKS, NPARTS, hi);
    at_wait_caught_up(dir, CM_TOPIC_CHUNKS, NPARTS, hi, 600);
    printf("\nlag: mean %.1f, max %.0f messages (%.2f s of fleet output at most); caught up %.2f "
           "s after the producer stopped\n", nsamp ? sum / nsamp : 0, max, max / 100.0,
           at_now() - tp);
    at_agg_stop(pid, SIGTERM, 60);
    rd_kafka_destroy(rk);
    fsim_free(sim);
}

int main(int argc, char **argv) {
    uint32_t intervals = argc > 1 ? (uint32_t)atoi(argv[1]) : 2;
    int seconds = argc > 2 ? atoi(argv[2]) : 60;
    if (!getenv("FLEETPROF_BUILD")) {
        static char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        self[n > 0 ? n : 0] = 0;
        char *d = dirname(dirname(self)); /* <build>/bench/bench-aggregator -> <build> */
        setenv("FLEETPROF_BUILD", d, 0);
    }
    setenv("FLEETPROF_SRC", PROJECT_SRC, 0);
    setenv("AT_CPU", "1", 0);
    if (ts_kafka_start(PORT, NPARTS, NULL, bootstrap, sizeof bootstrap))
        return 1;
    throughput(intervals);
    if (seconds > 0)
        lag(seconds);
    ts_kafka_stop(PORT, 0);
    return 0;
}
