/* The store read-only for 20 s (issue 13's pipeline faults), on PostgreSQL with a real broker
 * (Kafka 19980, HTTP 19981, PostgreSQL 15442): while the fleet produces, the database is made
 * read-only for every transaction (ALTER SYSTEM SET default_transaction_read_only = on, then
 * pg_reload_conf(): the aggregator's open sessions take it at their next transaction, so its
 * writes fail with "cannot execute ... in a read-only transaction"), then writable again. The
 * aggregator must survive, say so (the log's "store write failed", /healthz 503), store
 * nothing meanwhile (the stored offsets do not move: failed batches are consumed again), turn
 * healthy again after, catch up with the topic, and end with totals, profiles and rejects
 * exactly equal to the simulator's truth: nothing lost, nothing counted twice.
 *
 * (The SQLite store's counterpart, test-aggregator-chaos's store_unwritable_20s_exact, fills
 * the file system instead: this kernel has no device-mapper for an error table, ext4's
 * emergency read-only aborts the journal and cannot be remounted read-write, and a read-only
 * remount is refused while the aggregator holds its files open for writing, EBUSY.) */
#define _GNU_SOURCE
#include "aggtest.h"
#include "support/kafka.h"
#include "support/runner.h"

#include "cm/wire.h"

#include <libpq-fe.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define KPORT 19980
#define HPORT 19981
#define PG_PORT 15442
#define NPARTS 4

static char bootstrap[64], pgdir[64], url[256], src[1024];

static int64_t q1(const char *sql) { return at_pg_q1(url, sql); }

/* A statement with no result rows (ALTER SYSTEM may not run in a transaction block). */
static int exec_sql(const char *sql) {
    PGconn *c = PQconnectdb(url);
    int ok = 0;
    if (PQstatus(c) == CONNECTION_OK) {
        PGresult *r = PQexec(c, sql);
        ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
        if (!ok)
            printf("%s: %s", sql, PQerrorMessage(c));
        PQclear(r);
    }
    PQfinish(c);
    return ok ? 0 : -1;
}

/* 1 if a new session's transactions are read-only, 0 if not, -1 without an answer. */
static int read_only_now(void) {
    PGconn *c = PQconnectdb(url);
    int v = -1;
    if (PQstatus(c) == CONNECTION_OK) {
        PGresult *r = PQexec(c, "SHOW transaction_read_only");
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
            v = strcmp(PQgetvalue(r, 0, 0), "on") == 0;
        PQclear(r);
    }
    PQfinish(c);
    return v;
}

static int64_t stored_offsets(void) {
    return q1("SELECT coalesce(sum(next_offset),0) FROM offsets WHERE next_offset > 0");
}

static int count_in_file(const char *path, const char *needle) {
    FILE *f = fopen(path, "r");
    char line[4096];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    if (f)
        fclose(f);
    return n;
}

typedef struct {
    fsim_t *sim;
    rd_kafka_t *rk;
    double rate;
    int rc;
} prod_t;

static void *producer_main(void *arg) {
    prod_t *p = arg;
    p->rc = fsim_produce(p->sim, p->rk, CM_TOPIC_CHUNKS, p->rate);
    return NULL;
}

static void test_read_only_20s_exact(void) {
    fsim_params_t sp = {.seed = 31, .services = 6, .versions = 2, .processes = 2,
                        .intervals = 20, .samples = 80, .stacks = 60, .duplicate_every = 11,
                        .malformed_every = 23};
    fsim_t *sim = fsim_new(&sp);
    rd_kafka_t *rk = at_producer(bootstrap);
    CHECK(sim && rk && at_topic_empty(rk, CM_TOPIC_CHUNKS, NPARTS));
    CHECK_EQ(read_only_now(), 0);
    char dir[64], log[128], body[4096];
    at_tmpdir(dir, "pgro");
    snprintf(log, sizeof log, "%.60s/agg.log", dir);
    /* 480 chunks at 14/s: ~34 s, so that the fleet produces before, during and after */
    prod_t p = {sim, rk, 14.0, -1};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, producer_main, &p) == 0);
    const char *extra[] = {"--store", url, "--batch-max-messages", "10", "--report-interval",
                           "0", "--log-level", "warn", NULL};
    pid_t a = at_agg_start(bootstrap, dir, at_group_id("pgro"), HPORT, log, extra);
    CHECKF(a > 0, "the aggregator did not start; see %s", log);
    int64_t before = 0;
    for (double end = at_now() + 60; at_now() < end && before <= 0; at_sleep_ms(100))
        before = stored_offsets();
    CHECKF(before > 0, "no ingest before the fault; see %s", log);
    at_sleep_ms(2000);
    CHECK_EQ(at_http_get(HPORT, "/healthz", body, sizeof body), 200);

    CHECK(exec_sql("ALTER SYSTEM SET default_transaction_read_only = on") == 0);
    CHECK(exec_sql("SELECT pg_reload_conf()") == 0);
    double t0 = at_now();
    CHECK_EQ(read_only_now(), 1);
    at_sleep_ms(2000); /* a batch in flight at the switch may still commit */
    int64_t during0 = stored_offsets();
    int code = 0;
    while (at_now() < t0 + 20) {
        if (code != 503)
            code = at_http_get(HPORT, "/healthz", body, sizeof body);
        at_sleep_ms(500);
    }
    int64_t during1 = stored_offsets();
    printf("healthz while read-only: %d %s; stored offsets %lld -> %lld (%lld before)\n", code,
           body, (long long)during0, (long long)during1, (long long)before);
    CHECK(kill(a, 0) == 0); /* alive */
    CHECK_EQ(code, 503);
    CHECK(strstr(body, "store write failed") != NULL);
    CHECK_EQ(during1, during0); /* nothing committed while read-only */
    /* the failures were the read-only transactions, as the database and the aggregator say */
    char pglog[128];
    snprintf(pglog, sizeof pglog, "%s/server.log", pgdir);
    CHECK(count_in_file(pglog, "read-only transaction") > 0);
    CHECK(count_in_file(log, "read-only transaction") > 0);

    CHECK(exec_sql("ALTER SYSTEM RESET default_transaction_read_only") == 0);
    CHECK(exec_sql("SELECT pg_reload_conf()") == 0);
    CHECK_EQ(read_only_now(), 0);
    double t1 = at_now();
    int64_t after = during1;
    for (double end = at_now() + 60; at_now() < end && after == during1; at_sleep_ms(100))
        after = stored_offsets();
    printf("ingest resumed %.1f s after the database became writable again\n", at_now() - t1);
    CHECKF(after > during1, "no ingest after the fault; see %s", log);
    pthread_join(th, NULL);
    CHECK_EQ(p.rc, 0);
    int64_t hi[NPARTS], want = 0;
    CHECK(at_high_watermarks(rk, CM_TOPIC_CHUNKS, NPARTS, hi) == 0);
    for (int i = 0; i < NPARTS; i++)
        want += hi[i];
    int64_t got = -1;
    for (double end = at_now() + 120; at_now() < end && got != want; at_sleep_ms(100))
        got = stored_offsets();
    CHECKF(got == want, "stored offsets sum to %lld, high watermarks to %lld; see %s",
           (long long)got, (long long)want, log);
    code = 0;
    for (double end = at_now() + 20; at_now() < end && code != 200; at_sleep_ms(500))
        code = at_http_get(HPORT, "/healthz", body, sizeof body);
    CHECK_EQ(code, 200);
    int st = at_agg_stop(a, SIGTERM, 30);
    CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    int bad = at_pg_check_truth(sim, url);
    const fsim_counts_t *fc = fsim_counts(sim);
    printf("%llu messages (%llu chunks, %llu duplicates), 20 s read-only: %d failed writes "
           "consumed again; totals %s\n",
           (unsigned long long)fc->messages, (unsigned long long)fc->chunks,
           (unsigned long long)fc->duplicates, count_in_file(log, "store write failed"),
           bad ? "DIFFER" : "exactly equal to the truth");
    CHECK_EQ(bad, 0);
    rd_kafka_destroy(rk);
    fsim_free(sim);
}

static const tr_test_t tests[] = {
    {"read_only_20s_exact", test_read_only_20s_exact},
    {0},
};

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *s = getenv("FLEETPROF_SRC");
    snprintf(src, sizeof src, "%s", s ? s : ".");
    snprintf(pgdir, sizeof pgdir, "/tmp/fp-pgro-%d", (int)getpid());
    if (at_pg_start(PG_PORT, pgdir, url, sizeof url)) {
        printf("1 failed\n");
        return 1;
    }
    int rc = 1;
    ts_kafka_stop(KPORT, 0); /* a broker left by a failed earlier run of this test */
    if (ts_kafka_start_retry(KPORT, NPARTS, NULL, bootstrap, sizeof bootstrap)) {
        printf("cannot start Kafka\n1 failed\n");
    } else {
        rc = tr_main(tests, argc, argv);
        ts_kafka_stop(KPORT, 0);
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s/deploy/postgres/stop.sh %s --remove 2>/dev/null", src, pgdir);
    if (system(cmd)) {
    }
    return rc;
}
