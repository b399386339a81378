/* Exactly once on PostgreSQL with a real broker (Kafka port 19882, PostgreSQL 15434): three
 * fleetprof-aggregator instances, each with its own working directory (no shared files), one
 * database (--store postgres://...). While the fleet produces (duplicates and malformed
 * messages included): instances SIGKILLed and started again (rebalances as they come and go),
 * the database SIGKILLed and restarted mid-ingest, and a database outage. Then the stored
 * totals and profiles equal the simulator's ground truth exactly, and the rejects its
 * malformed messages. FP_PG_CHAOS_LONG=1: the full run (10 kills, a 30 s outage). */
#define _GNU_SOURCE
#include "aggtest.h"
#include "intern.h"
#include "support/kafka.h"
#include "support/runner.h"

#include "cm/chunk.h"
#include "cm/wire.h"

#include <libpq-fe.h>
#include <stdarg.h>
#include <pthread.h>
#include <sys/stat.h>

#define KPORT 19882
#define PG_PORT 15434
#define NPARTS 4
#define NINST 3

static char bootstrap[64], pgdir[64], url[256], src[1024];

/* One value of a query, or -1 when the database does not answer. */
static int64_t q1(const char *sql) { return at_pg_q1(url, sql); }

typedef struct {
    fsim_t *sim;
    rd_kafka_t *rk;
    double rate;
    int rc;
    const char *topic; /* NULL: fleetprof.chunks */
} prod_t;

static void *producer_main(void *arg) {
    prod_t *p = arg;
    p->rc = fsim_produce(p->sim, p->rk, p->topic ? p->topic : CM_TOPIC_CHUNKS, p->rate);
    return NULL;
}

typedef struct {
    char dir[64], log[128];
    pid_t pid;
} inst_t;

static void inst_start(inst_t *in, int i) {
    const char *extra[] = {"--store", url, "--report-interval", "0", NULL};
    in->pid = at_agg_start(bootstrap, in->dir, "pgchaos", 0, in->log, extra);
    CHECKF(in->pid > 0, "instance %d did not start; see %s", i, in->log);
}

static int check_truth(const fsim_t *sim) { return at_pg_check_truth(sim, url); }

static void test_chaos_exact(void) {
    int lng = getenv("FP_PG_CHAOS_LONG") && atoi(getenv("FP_PG_CHAOS_LONG"));
    int kills = lng ? 10 : 3, outage_s = lng ? 30 : 8;
    fsim_params_t sp = {.seed = 17, .services = 8, .versions = 2, .processes = 4,
                        .intervals = lng ? 24 : 8, .samples = 200, .stacks = 100,
                        .duplicate_every = 13, .malformed_every = 29};
    fsim_t *sim = fsim_new(&sp);
    rd_kafka_t *rk = at_producer(bootstrap);
    CHECK(sim && rk && at_topic_empty(rk, CM_TOPIC_CHUNKS, NPARTS));
    inst_t in[NINST];
    for (int i = 0; i < NINST; i++) {
        at_tmpdir(in[i].dir, "pgchaos");
        snprintf(in[i].log, sizeof in[i].log, "%.60s/agg.log", in[i].dir);
        inst_start(&in[i], i);
    }
    /* the fleet produces for the whole chaos: ~kills * 3 s + the outage */
    uint64_t msgs = (uint64_t)sp.services * sp.versions * sp.processes * sp.intervals;
    double dur = kills * 3.0 + outage_s + 8;
    prod_t p = {sim, rk, (double)msgs / dur, 0, NULL};
    pthread_t th;
    pthread_create(&th, NULL, producer_main, &p);
    double t0 = at_now();
    at_sleep_ms(2000);
    /* the database killed mid-ingest, then started again */
    CHECK(at_sh("%s/deploy/postgres/stop.sh %s --kill 2>/dev/null", src, pgdir) == 0);
    at_sleep_ms(1000);
    CHECK(at_sh("%s/deploy/postgres/start.sh %s >/dev/null 2>&1", src, pgdir) == 0);
    printf("%.1f s: database SIGKILLed and restarted\n", at_now() - t0);
    /* instances SIGKILLed at random moments and started again */
    srand(23);
    for (int k = 0; k < kills; k++) {
        at_sleep_ms(1000 + rand() % 2000);
        int i = k % NINST;
        kill(in[i].pid, SIGKILL);
        at_agg_stop(in[i].pid, SIGKILL, 10);
        inst_start(&in[i], i);
        printf("%.1f s: instance %d SIGKILLed and restarted\n", at_now() - t0, i);
    }
    /* an outage: the database stopped cleanly, down for outage_s */
    CHECK(at_sh("%s/deploy/postgres/stop.sh %s 2>/dev/null", src, pgdir) == 0);
    printf("%.1f s: database down for %d s\n", at_now() - t0, outage_s);
    at_sleep_ms(outage_s * 1000);
    CHECK(at_sh("%s/deploy/postgres/start.sh %s >/dev/null 2>&1", src, pgdir) == 0);
    pthread_join(th, NULL);
    CHECK_EQ(p.rc, 0);
    int64_t hi[NPARTS], want = 0;
    CHECK(at_high_watermarks(rk, CM_TOPIC_CHUNKS, NPARTS, hi) == 0);
    for (int i = 0; i < NPARTS; i++)
        want += hi[i];
    /* every partition's stored offset at its high watermark */
    int64_t got = -1;
    for (int s = 0; s < 1800 && got != want; s++) {
        at_sleep_ms(100);
        got = q1("SELECT coalesce(sum(next_offset),0) FROM offsets WHERE next_offset > 0");
    }
    CHECKF(got == want, "stored offsets sum to %lld, high watermarks to %lld; logs in %s...",
           (long long)got, (long long)want, in[0].log);
    int bad = check_truth(sim);
    int64_t stale = 0, errs = 0, down = 0;
    for (int i = 0; i < NINST; i++)
        at_agg_stop(in[i].pid, SIGTERM, 30);
    for (int i = 0; i < NINST; i++) { /* (each log holds every run of its instance) */
        char cmd[256];
        snprintf(cmd, sizeof cmd, "grep -c 'cannot reconnect\\|is not reachable' %s", in[i].log);
        FILE *fd = popen(cmd, "r");
        long long nd = 0;
        if (fd && fscanf(fd, "%lld", &nd) == 1)
            down += nd;
        if (fd)
            pclose(fd);
        snprintf(cmd, sizeof cmd, "grep -c 'another instance wrote it' %s", in[i].log);
        FILE *f = popen(cmd, "r");
        long long n = 0;
        if (f && fscanf(f, "%lld", &n) == 1)
            stale += n;
        if (f)
            pclose(f);
        snprintf(cmd, sizeof cmd, "grep -c 'store write failed' %s", in[i].log);
        f = popen(cmd, "r");
        n = 0;
        if (f && fscanf(f, "%lld", &n) == 1)
            errs += n;
        if (f)
            pclose(f);
    }
    const fsim_counts_t *fc = fsim_counts(sim);
    printf("%llu messages (%llu chunks, %llu duplicates), %d instance kills, a database "
           "SIGKILL and a %d s outage: %lld failed writes consumed again, %lld fenced "
           "batches, %lld reconnection attempts; totals %s\n", (unsigned long long)fc->messages,
           (unsigned long long)fc->chunks, (unsigned long long)fc->duplicates, kills, outage_s,
           (long long)errs, (long long)stale, (long long)down,
           bad ? "DIFFER" : "exactly equal to the truth");
    CHECK_EQ(bad, 0);
    CHECK(down > 0); /* the instances saw the database go away */
    rd_kafka_destroy(rk);
    fsim_free(sim);
}

/* Lines of a log that contain what. */
static long long log_count(const char *log, const char *what) {
    char cmd[512];
    long long n = 0;
    snprintf(cmd, sizeof cmd, "grep -c '%s' %s 2>/dev/null", what, log);
    FILE *f = popen(cmd, "r");
    if (f && fscanf(f, "%lld", &n) != 1)
        n = 0;
    if (f)
        pclose(f);
    return n;
}

/* The store's tables by name, each table's heap, TOAST and indexes: an independent count of
 * what fleetprof_aggregator_store_bytes must report once (not once per partition). */
static int64_t tables_bytes(const char *db_url) {
    return at_pg_q1(db_url,
                    "SELECT sum(pg_total_relation_size(t)) FROM unnest(ARRAY['meta', 'offsets', "
                    "'seen_chunks', 'strings', 'mappings', 'functions', 'locations', 'stacks', "
                    "'labelsets', 'labels', 'labelset_base', 'profile_packed', 'profile_coarse', "
                    "'profile_leaf_packed', 'totals', 'intervals', 'drops', 'versions', "
                    "'fn_stats', 'spans', 'span_stacks_packed', 'requests', 'rejects', "
                    "'fleetprof_schema']"
                    "::regclass[]) t");
}

/* SIGTERM while the database is down, the instance waiting for it in a partition assignment
 * (the rebalance after another instance died) with a batch read: it exits within seconds,
 * writes nothing half-way, and the next instance, once the database is back, stores exactly
 * the fleet's truth from the stored offsets. Then the store size one instance reports is the
 * database's tables once. Own topic (2 partitions) and database. */
static void test_shutdown_in_outage(void) {
    const char *topic = "fleetprof.shut";
    char db_url[300];
    CHECK(at_sh("psql -X -q '%s' -c 'CREATE DATABASE shut' >/dev/null", url) == 0);
    snprintf(db_url, sizeof db_url, "%.*s/shut", (int)(strrchr(url, '/') - url), url);
    fsim_params_t sp = {.seed = 29, .services = 4, .versions = 2, .processes = 3,
                        .intervals = 8, .samples = 200, .stacks = 60, .duplicate_every = 7};
    fsim_t *sim = fsim_new(&sp);
    rd_kafka_t *rk = at_producer(bootstrap);
    CHECK(sim && rk && at_topic_empty(rk, topic, 2));
    const char *extra[] = {"--store", db_url, "--topic", topic, "--dlq-topic",
                           "fleetprof.shut.dlq", "--report-interval", "0", NULL};
    inst_t in[3];
    for (int i = 0; i < 3; i++) {
        at_tmpdir(in[i].dir, "pgshut");
        snprintf(in[i].log, sizeof in[i].log, "%.60s/agg.log", in[i].dir);
    }
    for (int i = 0; i < 2; i++) {
        in[i].pid = at_agg_start(bootstrap, in[i].dir, "pgshut", 0, in[i].log, extra);
        CHECK(in[i].pid > 0);
    }
    /* ~10 s of production; the database goes away once something is stored */
    prod_t p = {sim, rk, sp.services * sp.versions * sp.processes * sp.intervals / 10.0, 0,
                topic};
    pthread_t th;
    pthread_create(&th, NULL, producer_main, &p);
    for (int s = 0; s < 300 && at_pg_q1(db_url, "SELECT coalesce(sum(next_offset),0) FROM "
                                                "offsets WHERE next_offset > 0") <= 0; s++)
        at_sleep_ms(100);
    CHECK(at_sh("%s/deploy/postgres/stop.sh %s 2>/dev/null", src, pgdir) == 0);
    /* instance 1 dies: the group gives its partition to instance 0, which waits for the
     * database in the assignment */
    at_agg_stop(in[1].pid, SIGKILL, 10);
    for (int s = 0; s < 300 && !log_count(in[0].log, "is not reachable"); s++)
        at_sleep_ms(100);
    CHECKF(log_count(in[0].log, "is not reachable"),
           "instance 0 never waited for the database; see %s", in[0].log);
    at_sleep_ms(1500);
    double t0 = at_now();
    int st = at_agg_stop(in[0].pid, SIGTERM, 20);
    double dt = at_now() - t0;
    CHECKF(st == 0, "exit status %d after SIGTERM (%.1f s); see %s", st, dt, in[0].log);
    CHECKF(dt < 8.0, "the instance took %.1f s to stop during the outage; see %s", dt,
           in[0].log);
    CHECK(log_count(in[0].log, "stopping while the PostgreSQL store is unreachable") > 0);
    pthread_join(th, NULL);
    CHECK_EQ(p.rc, 0);
    int64_t before = at_pg_q1(db_url, "SELECT 1"); /* the database is down */
    CHECK_EQ(before, -1);
    CHECK(at_sh("%s/deploy/postgres/start.sh %s >/dev/null 2>&1", src, pgdir) == 0);
    int64_t hi[2], want = 0;
    CHECK(at_high_watermarks(rk, topic, 2, hi) == 0);
    want = hi[0] + hi[1];
    int64_t got0 = at_pg_q1(db_url, "SELECT coalesce(sum(next_offset),0) FROM offsets WHERE "
                                    "next_offset > 0");
    CHECKF(got0 < want, "everything was stored before the outage (%lld of %lld): the test "
           "exercised nothing", (long long)got0, (long long)want);
    in[2].pid = at_agg_start(bootstrap, in[2].dir, "pgshut", 19962, in[2].log, extra);
    CHECK(in[2].pid > 0);
    int64_t got = -1;
    for (int s = 0; s < 1200 && got != want; s++) {
        at_sleep_ms(100);
        got = at_pg_q1(db_url, "SELECT coalesce(sum(next_offset),0) FROM offsets WHERE "
                               "next_offset > 0");
    }
    CHECKF(got == want, "stored offsets %lld, high watermarks %lld; see %s", (long long)got,
           (long long)want, in[2].log);
    int bad = at_pg_check_truth(sim, db_url);
    CHECK_EQ(bad, 0);
    /* the store size: the database's tables, once for both partitions this instance owns */
    char body[65536];
    int64_t metric = -1, tb = 0;
    for (int s = 0; s < 50; s++) {
        at_sleep_ms(200);
        CHECK(at_http_get(19962, "/metrics", body, sizeof body) == 200);
        char *m = strstr(body, "\nfleetprof_aggregator_store_bytes ");
        CHECK(m);
        metric = strtoll(m + strlen("\nfleetprof_aggregator_store_bytes "), NULL, 10);
        tb = tables_bytes(db_url);
        if (metric > 0 && llabs(metric - tb) <= tb / 20)
            break;
    }
    int64_t dbsize = at_pg_q1(db_url, "SELECT pg_database_size(current_database())");
    CHECKF(tb > 0 && llabs(metric - tb) <= tb / 20, "store_bytes %lld, the tables hold %lld",
           (long long)metric, (long long)tb);
    CHECK(metric < dbsize);
    printf("SIGTERM during the outage: the instance stopped in %.1f s; then %lld of %lld "
           "messages stored again, totals exact; store_bytes %lld, tables %lld, database "
           "%lld\n", dt, (long long)(want - got0), (long long)want, (long long)metric,
           (long long)tb, (long long)dbsize);
    at_agg_stop(in[2].pid, SIGTERM, 30);
    rd_kafka_destroy(rk);
    fsim_free(sim);
}

static const tr_test_t tests[] = {
    {"chaos_exact", test_chaos_exact},
    {"shutdown_in_outage", test_shutdown_in_outage},
    {0},
};

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *s = getenv("FLEETPROF_SRC");
    snprintf(src, sizeof src, "%s", s ? s : ".");
    snprintf(pgdir, sizeof pgdir, "/tmp/fp-pgchaos-%d", (int)getpid());
    if (at_pg_start(PG_PORT, pgdir, url, sizeof url)) {
        printf("1 failed\n");
        return 1;
    }
    int rc = 1;
    if (ts_kafka_start_retry(KPORT, NPARTS, "fleetprof.shut:2 fleetprof.shut.dlq:1", bootstrap,
                             sizeof bootstrap)) {
        printf("cannot start Kafka\n1 failed\n");
    } else {
        rc = tr_main(tests, argc, argv);
        ts_kafka_stop(KPORT, 0);
    }
    at_sh("%s/deploy/postgres/stop.sh %s --remove 2>/dev/null", src, pgdir);
    return rc;
}
