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
 *   postgres    (BENCH_PG=1) after the SQLite throughput run, the same run against a throwaway
 *               PostgreSQL cluster (deploy/postgres, port 15435, same machine) with
 *               --store postgres://...: samples per aggregator CPU-second, and the database's
 *               own CPU (the postmaster and its processes, those that exited included, after a
 *               CHECKPOINT that writes the run's dirty pages). The cluster has start.sh's
 *               settings (shared_buffers 128MB, the server's defaults otherwise: max_wal_size
 *               1GB, checkpoint_timeout 5min, fsync on) and PG_EXTRA_CONF's lines.
 *               BENCH_PG_PORT sets the cluster's port. BENCH_PG_STATS=1 (with PG_EXTRA_CONF=
 *               "shared_preload_libraries = 'pg_stat_statements'") prints the statements
 *               that took the server's time, summed over the partitions' connections.
 *
 *   [BENCH_PG=1] bench-aggregator [intervals=2] [lag_seconds=60]
 * BENCH_PG_HOOK: a shell command run on the cluster (URL in $PG_URL) before it is removed.
 * Needs FLEETPROF_SRC and FLEETPROF_BUILD (defaults: ../.. of this program and ..). */
#include "aggtest.h"
#include "fleetsim.h"

#include "cm/wire.h"
#include "support/kafka.h"

#include <libgen.h>
#include <libpq-fe.h>
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

/* CPU seconds of pid; with children, those of its children it has reaped too (cutime and
 * cstime: a backend or autovacuum worker that ran and exited within the measure). */
static double cpu_seconds_of(pid_t pid, int children) {
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
    long cut = 0, cst = 0;
    /* fields after ")": state(3) ... utime(14) stime(15) cutime(16) cstime(17) */
    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu %ld %ld", &ut, &st, &cut,
           &cst);
    return (ut + st + (children ? cut + cst : 0)) / (double)sysconf(_SC_CLK_TCK);
}

static double cpu_seconds(pid_t pid) { return cpu_seconds_of(pid, 0); }

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

static char pg_url[256], pg_dir[64];

/* One integer from the PostgreSQL store (-1: no answer), over one connection kept open: the
 * bench polls every 50 ms, and a connection each time would count a backend's fork in the
 * postmaster's CPU, which the bench reads as the database's. */
static PGconn *pg_poll;

static int64_t pg_q1(const char *sql) {
    if (pg_poll && PQstatus(pg_poll) != CONNECTION_OK) {
        PQfinish(pg_poll);
        pg_poll = NULL;
    }
    if (!pg_poll && PQstatus(pg_poll = PQconnectdb(pg_url)) != CONNECTION_OK)
        return -1;
    PGresult *r = PQexec(pg_poll, sql);
    int64_t v = -1;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
        v = PQgetisnull(r, 0, 0) ? 0 : strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    return v;
}

/* CPU seconds of the cluster's postmaster, every process it runs now and those it ran that
 * have exited. */
static double pg_cpu(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/data/postmaster.pid", pg_dir);
    FILE *f = fopen(path, "r");
    int pm = 0;
    if (!f || fscanf(f, "%d", &pm) != 1) {
        if (f)
            fclose(f);
        return -1;
    }
    fclose(f);
    double t = cpu_seconds_of(pm, 1);
    char cmd[64], line[64];
    snprintf(cmd, sizeof cmd, "pgrep -P %d", pm);
    FILE *p = popen(cmd, "r");
    while (p && fgets(line, sizeof line, p)) {
        double c = cpu_seconds(atoi(line));
        t += c > 0 ? c : 0;
    }
    if (p)
        pclose(p);
    return t;
}

static fsim_params_t fleet(uint32_t intervals, uint64_t seed) {
    return (fsim_params_t){.seed = seed, .services = 20, .versions = 5, .processes = 10,
                           .intervals = intervals, .samples = 1667, .stacks = 500};
}

static void throughput(uint32_t intervals, int pg) {
    char dir[64], log[128];
    at_tmpdir(dir, "bench");
    snprintf(log, sizeof log, "%s/agg.log", dir);
    fsim_params_t sp = fleet(intervals, 1);
    fsim_t *sim = fsim_new(&sp);
    rd_kafka_t *rk = at_producer(bootstrap);
    double t0 = at_now();
    if (!pg && fsim_produce(sim, rk, CM_TOPIC_CHUNKS, 0)) /* the PostgreSQL run reads it again */
        exit(1);
    if (pg) { /* the same fleet's counts, without producing it again */
        const uint8_t *fr;
        size_t len;
        const char *key;
        while (fsim_next(sim, &fr, &len, &key))
            ;
    }
    const fsim_counts_t *n = fsim_counts(sim);
    printf("produced %llu chunks, %llu samples in %.1f s\n", (unsigned long long)n->chunks,
           (unsigned long long)n->samples, at_now() - t0);
    int64_t hi[NPARTS];
    at_high_watermarks(rk, CM_TOPIC_CHUNKS, NPARTS, hi);
    const char *extra[] = {"--log-level", "warn", "--retention-interval", "0", "--http-port",
                           "19531", "--report-interval", "0", pg ? "--store" : NULL, pg_url,
                           NULL};
    pid_t pid = at_agg_start(bootstrap, dir, pg ? "bench-throughput-pg" : "bench-throughput", 0,
                             log, extra);
    printf("--- %s\n", pg ? "PostgreSQL store (same machine)" : "SQLite store");
    /* start the clock at the first commit: group join is not ingest */
    double s0 = 0, ta = 0, ca = 0;
    for (double end = at_now() + 60; at_now() < end; at_sleep_ms(20))
        if ((s0 = metric("fleetprof_aggregator_samples_total")) > 0)
            break;
    ta = at_now();
    ca = cpu_seconds(pid);
    double da = pg ? pg_cpu() : 0;
    int64_t want = 0;
    for (int i = 0; i < NPARTS; i++)
        want += hi[i];
    if (pg) {
        int64_t got = -1;
        for (double end = at_now() + 600; got != want && at_now() < end; at_sleep_ms(50))
            got = pg_q1("SELECT coalesce(sum(next_offset),0) FROM offsets WHERE next_offset > 0");
        if (got != want) {
            fprintf(stderr, "did not catch up; see %s\n", log);
            exit(1);
        }
    } else if (at_wait_caught_up(dir, CM_TOPIC_CHUNKS, NPARTS, hi, 600)) {
        fprintf(stderr, "did not catch up; see %s\n", log);
        exit(1);
    }
    double s1 = 0;
    for (double end = at_now() + 10; at_now() < end; at_sleep_ms(20))
        if ((s1 = metric("fleetprof_aggregator_samples_total")) >= (double)n->samples)
            break;
    double tb = at_now(), cb = cpu_seconds(pid);
    /* the database's dirty pages written out within the measure (the checkpointer is one of
     * its processes), as SQLite's WAL is checkpointed inside the aggregator: a server with
     * large shared buffers and a long checkpoint interval would otherwise leave them out */
    if (pg)
        (void)pg_q1("CHECKPOINT");
    double db = pg ? pg_cpu() : 0;
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
    if (pg) {
        printf("database: %.2f CPU-s (postmaster and backends) for the same samples: %.2f M "
               "samples per database CPU-second; %.2f M per CPU-second of both\n", db - da,
               ds / (db - da) / 1e6, ds / (cb - ca + db - da) / 1e6);
        int64_t rows = pg_q1("SELECT sum(rows) FROM totals");
        printf("database: %.1f MB; totals hold %lld sample rows, produced %llu: %s\n",
               pg_q1("SELECT pg_database_size('fleetprof')") / 1e6, (long long)rows,
               (unsigned long long)n->samples,
               rows == (int64_t)n->samples ? "exact" : "MISMATCH");
        rd_kafka_destroy(rk);
        fsim_free(sim);
        return;
    }
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

/* BENCH_PG_STATS: before the run, pg_stat_statements; after it, its top statements (each
 * partition's connection has its own staging tables, so its own entries: summed by text). */
static void pg_statements(int after) {
    char cmd[1024];
    if (!getenv("BENCH_PG_STATS"))
        return;
    if (!after)
        snprintf(cmd, sizeof cmd, "psql -q '%s' -c 'CREATE EXTENSION pg_stat_statements'", pg_url);
    else
        snprintf(cmd, sizeof cmd, "psql '%s' -c \"SELECT round(sum(total_exec_time)) ms, "
                 "sum(calls) calls, sum(rows) rows, left(regexp_replace(query, '\\s+', ' ', 'g'), "
                 "80) q FROM pg_stat_statements GROUP BY q ORDER BY 1 DESC LIMIT 15\"", pg_url);
    if (system(cmd))
        fprintf(stderr, "pg_stat_statements: '%s' failed\n", cmd);
    if (!after)
        return;
    /* the WAL it wrote (full-page images after each checkpoint), the checkpoints and who
     * wrote the dirty buffers out (backends evicting them: shared_buffers too small) */
    snprintf(cmd, sizeof cmd, "psql '%s' -c \"SELECT wal_records, wal_fpi, pg_size_pretty("
             "wal_bytes) wal, wal_buffers_full FROM pg_stat_wal\" -c \"SELECT checkpoints_timed "
             "timed, checkpoints_req req, buffers_checkpoint, buffers_clean, buffers_backend "
             "FROM pg_stat_bgwriter\"", pg_url);
    if (system(cmd))
        fprintf(stderr, "pg_stat_wal: '%s' failed\n", cmd);
    /* the rows each table took and its size with its indexes: where the rows are */
    snprintf(cmd, sizeof cmd, "psql '%s' -c \"SELECT relname, n_tup_ins ins, n_tup_upd upd, "
             "pg_size_pretty(pg_total_relation_size(relid)) size FROM pg_stat_user_tables "
             "WHERE n_tup_ins > 0 AND relname NOT LIKE 'stage%%' ORDER BY 2 DESC\"", pg_url);
    if (system(cmd))
        fprintf(stderr, "pg_stat_user_tables: '%s' failed\n", cmd);
}

/* BENCH_PG_HOOK: a shell command run on the ingested cluster before it is removed, its URL in
 * $PG_URL (an experiment on the rows the run wrote). */
static void pg_hook(void) {
    const char *hook = getenv("BENCH_PG_HOOK");
    if (!hook || !*hook)
        return;
    setenv("PG_URL", pg_url, 1);
    if (system(hook))
        fprintf(stderr, "BENCH_PG_HOOK '%s' failed\n", hook);
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
    throughput(intervals, 0);
    if (getenv("BENCH_PG") && atoi(getenv("BENCH_PG"))) {
        char cmd[1024];
        snprintf(pg_dir, sizeof pg_dir, "/tmp/fp-bench-pg-%d", (int)getpid());
        const char *port = getenv("BENCH_PG_PORT"); /* default 15435 */
        if (at_pg_start(port ? atoi(port) : 15435, pg_dir, pg_url, sizeof pg_url))
            return 1;
        pg_statements(0);
        throughput(intervals, 1);
        pg_statements(1);
        pg_hook();
        PQfinish(pg_poll);
        pg_poll = NULL;
        snprintf(cmd, sizeof cmd, "%s/deploy/postgres/stop.sh %s --remove",
                 getenv("FLEETPROF_SRC"), pg_dir);
        if (system(cmd))
            fprintf(stderr, "could not remove %s\n", pg_dir);
    }
    if (seconds > 0)
        lag(seconds);
    ts_kafka_stop(PORT, 0);
    return 0;
}
