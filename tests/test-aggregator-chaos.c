/* Aggregator under failure, with a real Kafka broker: SIGKILLed at random moments of ingest
 * (ten times, each while stores are mid-way) and restarted; two instances in one group with one
 * stopped, restarted and killed while the fleet keeps producing (rebalances). The stored totals
 * must equal the simulator's ground truth exactly every time. */
#include "aggtest.h"
#include "fleetsim.h"

#include "cm/wire.h"
#include "support/chunkgen.h"
#include "support/kafka.h"
#include "support/runner.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PORT 19520
#define NPARTS 4

static char bootstrap[64];

static int64_t total_of(const int64_t *hi) {
    int64_t t = 0;
    for (int p = 0; p < NPARTS; p++)
        t += hi[p];
    return t;
}

/* Waits until the stores' offsets sum beyond `than`. Returns the new sum or -1. */
static int64_t wait_progress(const char *dir, int64_t than, int timeout_s) {
    for (double end = at_now() + timeout_s; at_now() < end; at_sleep_ms(20)) {
        int64_t s = at_store_offsets_sum(dir, CM_TOPIC_CHUNKS, NPARTS);
        if (s > than)
            return s;
    }
    return -1;
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

static void test_sigkill_ten_times_exact(void) {
    ts_kafka_stop(PORT, 0); /* a broker left by a failed earlier run of this test */
    CHECK(ts_kafka_start(PORT, NPARTS, NULL, bootstrap, sizeof bootstrap) == 0);
    char dir[64], log[128];
    at_tmpdir(dir, "kill");
    snprintf(log, sizeof log, "%s/agg.log", dir);
    fsim_params_t sp = {.seed = 21, .services = 12, .versions = 2, .processes = 5,
                        .intervals = 12, .samples = 150, .stacks = 100, .duplicate_every = 9,
                        .malformed_every = 17};
    fsim_t *sim = fsim_new(&sp);
    rd_kafka_t *rk = at_producer(bootstrap);
    CHECK(at_topic_empty(rk, CM_TOPIC_CHUNKS, NPARTS));
    CHECK(fsim_produce(sim, rk, CM_TOPIC_CHUNKS, 0) == 0);
    int64_t hi[NPARTS];
    CHECK(at_high_watermarks(rk, CM_TOPIC_CHUNKS, NPARTS, hi) == 0);
    int64_t total = total_of(hi);
    printf("%lld messages, %llu duplicates\n", (long long)total,
           (unsigned long long)fsim_counts(sim)->duplicates);

    /* small batches: many transactions, so kills land before, inside and after commits */
    const char *extra[] = {"--batch-max-messages", "6", "--log-level", "warn", NULL};
    char group[96];
    snprintf(group, sizeof group, "%s", at_group_id("kill"));
    uint64_t rng = 12345;
    int64_t done = 0;
    for (int kill_no = 0; kill_no < 10; kill_no++) {
        pid_t pid = at_agg_start(bootstrap, dir, group, 0, log, extra);
        CHECK(pid > 0);
        int64_t now = wait_progress(dir, done, 60);
        CHECKF(now > 0, "no progress after restart %d; see %s", kill_no, log);
        at_sleep_ms((int)ts_randn(&rng, 150));
        CHECK(at_agg_stop(pid, SIGKILL, 10) >= 0);
        done = at_store_offsets_sum(dir, CM_TOPIC_CHUNKS, NPARTS);
        printf("kill %d: %lld of %lld messages stored\n", kill_no + 1, (long long)done,
               (long long)total);
        CHECKF(done < total, "ingest finished before kill %d: make the data larger", kill_no + 1);
    }
    pid_t pid = at_agg_start(bootstrap, dir, group, 0, log, extra);
    CHECKF(at_wait_caught_up(dir, CM_TOPIC_CHUNKS, NPARTS, hi, 180) == 0, "see %s", log);
    int st = at_agg_stop(pid, SIGTERM, 30);
    CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_EQ(at_check_truth(sim, dir, CM_TOPIC_CHUNKS, NPARTS), 0);
    rd_kafka_destroy(rk);
    fsim_free(sim);
    CHECK(ts_kafka_stop(PORT, 0) == 0);
}

typedef struct {
    fsim_t *sim;
    rd_kafka_t *rk;
    double rate;
    int rc;
} prod_arg_t;

static void *producer_main(void *arg) {
    prod_arg_t *a = arg;
    a->rc = fsim_produce(a->sim, a->rk, CM_TOPIC_CHUNKS, a->rate);
    return NULL;
}

static void test_two_instances_rebalance_exact(void) {
    ts_kafka_stop(PORT, 0); /* a broker left by a failed earlier run of this test */
    CHECK(ts_kafka_start(PORT, NPARTS, NULL, bootstrap, sizeof bootstrap) == 0);
    char dir[64], loga[128], logb[128];
    at_tmpdir(dir, "rebal");
    snprintf(loga, sizeof loga, "%s/a.log", dir);
    snprintf(logb, sizeof logb, "%s/b.log", dir);
    fsim_params_t sp = {.seed = 33, .services = 16, .versions = 2, .processes = 4,
                        .intervals = 10, .samples = 100, .stacks = 80, .duplicate_every = 11,
                        .malformed_every = 23};
    fsim_t *sim = fsim_new(&sp);
    rd_kafka_t *rk = at_producer(bootstrap);
    CHECK(at_topic_empty(rk, CM_TOPIC_CHUNKS, NPARTS));
    /* the fleet keeps producing (about 20 s) while instances come and go */
    prod_arg_t pa = {sim, rk, 70.0, -1};
    pthread_t th;
    CHECK(pthread_create(&th, NULL, producer_main, &pa) == 0);
    const char *extra[] = {"--batch-max-messages", "20", NULL};
    char group[96];
    snprintf(group, sizeof group, "%s", at_group_id("rebal"));
    pid_t a = at_agg_start(bootstrap, dir, group, 0, loga, extra);
    pid_t b = at_agg_start(bootstrap, dir, group, 0, logb, extra);
    int64_t s = wait_progress(dir, 0, 60);
    CHECK(s > 0);
    /* both instances own partitions */
    for (double end = at_now() + 30;
         at_now() < end && !(count_in_file(loga, "assigned") && count_in_file(logb, "assigned"));)
        at_sleep_ms(100);
    CHECK(count_in_file(loga, "assigned") > 0 && count_in_file(logb, "assigned") > 0);
    at_sleep_ms(1500);
    /* B leaves cleanly: its partitions move to A */
    int st = at_agg_stop(b, SIGTERM, 30);
    CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    s = wait_progress(dir, at_store_offsets_sum(dir, CM_TOPIC_CHUNKS, NPARTS), 60);
    CHECK(s > 0);
    /* B joins again and takes some back */
    b = at_agg_start(bootstrap, dir, group, 0, logb, extra);
    for (double end = at_now() + 30; at_now() < end && count_in_file(logb, "assigned") < 2;)
        at_sleep_ms(100);
    CHECK(count_in_file(logb, "assigned") >= 2);
    at_sleep_ms(1000);
    /* A dies without leaving: after the session timeout B takes everything */
    CHECK(at_agg_stop(a, SIGKILL, 10) >= 0);
    for (double end = at_now() + 40; at_now() < end && count_in_file(logb, "assigned") < 4;)
        at_sleep_ms(100);
    a = at_agg_start(bootstrap, dir, group, 0, loga, extra);
    pthread_join(th, NULL);
    CHECK(pa.rc == 0);
    int64_t hi[NPARTS];
    CHECK(at_high_watermarks(rk, CM_TOPIC_CHUNKS, NPARTS, hi) == 0);
    CHECK_EQ(total_of(hi), fsim_counts(sim)->messages);
    CHECKF(at_wait_caught_up(dir, CM_TOPIC_CHUNKS, NPARTS, hi, 120) == 0, "see %s and %s", loga,
           logb);
    CHECK(at_agg_stop(a, SIGTERM, 30) >= 0);
    CHECK(at_agg_stop(b, SIGTERM, 30) >= 0);
    CHECK_EQ(at_check_truth(sim, dir, CM_TOPIC_CHUNKS, NPARTS), 0);
    printf("A assigned %d times, B %d times\n", count_in_file(loga, "assigned"),
           count_in_file(logb, "assigned"));
    rd_kafka_destroy(rk);
    fsim_free(sim);
    CHECK(ts_kafka_stop(PORT, 0) == 0);
}

/* Seconds until every partition's stored offset passed its value at the call (the fleet keeps
 * producing to all of them), or -1 after timeout_s. */
static double time_to_all_progress(const char *dir, int timeout_s) {
    int64_t at[NPARTS];
    for (int p = 0; p < NPARTS; p++)
        at[p] = at_store_offset(dir, CM_TOPIC_CHUNKS, p);
    double t0 = at_now();
    while (at_now() < t0 + timeout_s) {
        int all = 1;
        for (int p = 0; p < NPARTS && all; p++)
            all = at_store_offset(dir, CM_TOPIC_CHUNKS, p) > at[p];
        if (all)
            return at_now() - t0;
        at_sleep_ms(100);
    }
    return -1;
}

/* Two instances with the product's session settings (no test overrides): each SIGKILLed once
 * in turn while the fleet produces; every partition progresses again within 15 s of each kill
 * (it took ~75 s with librdkafka's 45 s session timeout). Then an instance that freezes
 * (SIGSTOP) with a 40 s session timeout keeps its partitions: the other's /healthz turns 503
 * naming a stalled partition, and 200 again once the frozen one is killed and its partitions
 * move. Totals exact at the end. Broker 19752, HTTP 19753/19754. */
static void test_sigkill_twice_resumes_fast(void) {
    enum { KPORT = 19752, HA = 19753, HB = 19754 };
    ts_kafka_stop(KPORT, 0);
    CHECK(ts_kafka_start(KPORT, NPARTS, NULL, bootstrap, sizeof bootstrap) == 0);
    char dir[64], loga[128], logb[128], body[65536];
    at_tmpdir(dir, "kill2");
    snprintf(loga, sizeof loga, "%s/a.log", dir);
    snprintf(logb, sizeof logb, "%s/b.log", dir);
    fsim_params_t sp = {.seed = 44, .services = 16, .versions = 2, .processes = 4,
                        .intervals = 40, .samples = 60, .stacks = 50, .duplicate_every = 13};
    fsim_t *sim = fsim_new(&sp);
    rd_kafka_t *rk = at_producer(bootstrap);
    CHECK(at_topic_empty(rk, CM_TOPIC_CHUNKS, NPARTS));
    prod_arg_t pa = {sim, rk, 40.0, -1}; /* 5,120 chunks at 40/s: ~130 s */
    pthread_t th;
    CHECK(pthread_create(&th, NULL, producer_main, &pa) == 0);
    const char *extra[] = {"--batch-max-messages", "20", NULL};
    char group[96];
    snprintf(group, sizeof group, "%s", at_group_id("kill2"));
    pid_t a = at_agg_start(bootstrap, dir, group, HA, loga, extra);
    pid_t b = at_agg_start(bootstrap, dir, group, HB, logb, extra);
    CHECK(time_to_all_progress(dir, 60) >= 0);
    double worst = 0;
    for (int round = 0; round < 2; round++) {
        const char *log = round ? logb : loga;
        pid_t *victim = round ? &b : &a;
        at_sleep_ms(1500);
        CHECK(at_agg_stop(*victim, SIGKILL, 10) >= 0);
        double t = time_to_all_progress(dir, 60);
        printf("kill %d: every partition progressed %.1f s after the SIGKILL\n", round + 1, t);
        CHECKF(t >= 0 && t <= 15.0, "ingest resumed after %.1f s", t);
        worst = t > worst ? t : worst;
        *victim = at_agg_start(bootstrap, dir, group, round ? HB : HA, log, extra);
        for (double end = at_now() + 30; at_now() < end && count_in_file(log, "assigned") < 1;)
            at_sleep_ms(100);
    }
    /* health reflects a partition nobody consumes */
    CHECK(at_agg_stop(a, SIGKILL, 10) >= 0);
    const char *frozen[] = {"--batch-max-messages", "20", "--kafka.session.timeout.ms=40000",
                            NULL};
    int before = count_in_file(loga, "assigned");
    a = at_agg_start(bootstrap, dir, group, HA, loga, frozen);
    for (double end = at_now() + 40; at_now() < end && count_in_file(loga, "assigned") <= before;)
        at_sleep_ms(100);
    CHECK(count_in_file(loga, "assigned") > before);
    at_sleep_ms(2000);
    CHECK(kill(a, SIGSTOP) == 0);
    double t0 = at_now();
    int code = 0;
    while (at_now() < t0 + 50 && (code = at_http_get(HB, "/healthz", body, sizeof body)) == 200)
        at_sleep_ms(500);
    printf("B's /healthz %d %.1f s after A froze: %s\n", code, at_now() - t0, body);
    CHECK_EQ(code, 503);
    CHECK(strstr(body, "no progress") != NULL);
    CHECK(at_http_get(HB, "/metrics", body, sizeof body) == 200 &&
          strstr(body, "fleetprof_aggregator_group_lag_messages{partition=\"0\"}"));
    CHECK(kill(a, SIGKILL) == 0);
    waitpid(a, NULL, 0);
    t0 = at_now();
    while (at_now() < t0 + 60 && (code = at_http_get(HB, "/healthz", body, sizeof body)) != 200)
        at_sleep_ms(500);
    printf("B's /healthz %d %.1f s after A was killed\n", code, at_now() - t0);
    CHECK_EQ(code, 200);
    a = at_agg_start(bootstrap, dir, group, HA, loga, extra);
    pthread_join(th, NULL);
    CHECK(pa.rc == 0);
    int64_t hi[NPARTS];
    CHECK(at_high_watermarks(rk, CM_TOPIC_CHUNKS, NPARTS, hi) == 0);
    CHECKF(at_wait_caught_up(dir, CM_TOPIC_CHUNKS, NPARTS, hi, 120) == 0, "see %s and %s", loga,
           logb);
    CHECK(at_agg_stop(a, SIGTERM, 30) >= 0);
    CHECK(at_agg_stop(b, SIGTERM, 30) >= 0);
    CHECK_EQ(at_check_truth(sim, dir, CM_TOPIC_CHUNKS, NPARTS), 0);
    printf("worst resume after a SIGKILL: %.1f s\n", worst);
    rd_kafka_destroy(rk);
    fsim_free(sim);
    CHECK(ts_kafka_stop(KPORT, 0) == 0);
}

static char store_mnt[96];
static void umount_store(void) {
    if (store_mnt[0]) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "umount -l %s 2>/dev/null; rmdir %s 2>/dev/null", store_mnt,
                 store_mnt);
        if (system(cmd)) {
        }
    }
}

/* Fills the file system holding dir with one file until it is full. Returns bytes written. */
static long long fill_fs(const char *path) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    static char buf[1 << 16];
    long long n = 0;
    while (fwrite(buf, 1, sizeof buf, f) == sizeof buf)
        n += sizeof buf;
    fflush(f);
    fclose(f);
    return n;
}

/* The store's file system full for 20 s while the fleet produces (a tmpfs of its own, filled
 * with one file, then the file removed): the aggregator survives, says why in the log and in
 * /healthz (503), stores nothing meanwhile (offsets do not move: the batches are consumed
 * again), and once there is room again it catches up with totals exactly equal to the truth.
 * Needs root (mount). Broker 19755, HTTP 19756. (A read-only remount is refused while the
 * aggregator holds files open for writing, EBUSY; a full file system is the reversible fault.) */
static void test_store_unwritable_20s_exact(void) {
    enum { KPORT = 19755, HA = 19756 };
    snprintf(store_mnt, sizeof store_mnt, "/tmp/fp-aggtest-full-%d", (int)getpid());
    atexit(umount_store);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && mount -t tmpfs -o size=96m tmpfs %s", store_mnt,
             store_mnt);
    CHECKF(system(cmd) == 0, "cannot mount a tmpfs (this test needs root): %s", cmd);
    ts_kafka_stop(KPORT, 0);
    CHECK(ts_kafka_start(KPORT, NPARTS, NULL, bootstrap, sizeof bootstrap) == 0);
    char dir[160], log[128], filler[192], body[4096];
    snprintf(dir, sizeof dir, "%s/store", store_mnt);
    CHECK(mkdir(dir, 0755) == 0);
    at_tmpdir(log, "full");
    strcat(log, "/agg.log");
    snprintf(filler, sizeof filler, "%s/filler", store_mnt);
    fsim_params_t sp = {.seed = 55, .services = 8, .versions = 2, .processes = 2,
                        .intervals = 30, .samples = 80, .stacks = 60, .duplicate_every = 17};
    fsim_t *sim = fsim_new(&sp);
    rd_kafka_t *rk = at_producer(bootstrap);
    CHECK(at_topic_empty(rk, CM_TOPIC_CHUNKS, NPARTS));
    prod_arg_t pa = {sim, rk, 20.0, -1}; /* 960 chunks at 20/s: ~48 s */
    pthread_t th;
    CHECK(pthread_create(&th, NULL, producer_main, &pa) == 0);
    const char *extra[] = {"--batch-max-messages", "10", "--report-interval", "0", NULL};
    char group[96];
    snprintf(group, sizeof group, "%s", at_group_id("full"));
    pid_t a = at_agg_start(bootstrap, dir, group, HA, log, extra);
    CHECK(wait_progress(dir, 0, 60) > 0);
    at_sleep_ms(3000);
    long long filled = fill_fs(filler);
    printf("filled the store's file system with %lld bytes\n", filled);
    CHECK(filled > 0);
    at_sleep_ms(2000);
    int64_t during0 = at_store_offsets_sum(dir, CM_TOPIC_CHUNKS, NPARTS);
    int code = 0;
    double t0 = at_now();
    while (at_now() < t0 + 18) {
        if (code != 503)
            code = at_http_get(HA, "/healthz", body, sizeof body);
        at_sleep_ms(500);
    }
    int64_t during1 = at_store_offsets_sum(dir, CM_TOPIC_CHUNKS, NPARTS);
    printf("healthz while full: %d %s; stored offsets %lld -> %lld\n", code, body,
           (long long)during0, (long long)during1);
    CHECK(kill(a, 0) == 0); /* alive */
    CHECK_EQ(code, 503);
    CHECK(strstr(body, "store write failed") != NULL);
    CHECK_EQ(during1, during0); /* nothing committed while full */
    CHECK(count_in_file(log, "store write failed") > 0);
    CHECK(unlink(filler) == 0);
    pthread_join(th, NULL);
    CHECK(pa.rc == 0);
    int64_t hi[NPARTS];
    CHECK(at_high_watermarks(rk, CM_TOPIC_CHUNKS, NPARTS, hi) == 0);
    CHECKF(at_wait_caught_up(dir, CM_TOPIC_CHUNKS, NPARTS, hi, 120) == 0, "see %s", log);
    t0 = at_now();
    while (at_now() < t0 + 20 && (code = at_http_get(HA, "/healthz", body, sizeof body)) != 200)
        at_sleep_ms(500);
    CHECK_EQ(code, 200);
    int st = at_agg_stop(a, SIGTERM, 30);
    CHECK(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK_EQ(at_check_truth(sim, dir, CM_TOPIC_CHUNKS, NPARTS), 0);
    rd_kafka_destroy(rk);
    fsim_free(sim);
    CHECK(ts_kafka_stop(KPORT, 0) == 0);
    umount_store();
    store_mnt[0] = 0;
}

static const tr_test_t tests[] = {
    {"sigkill_ten_times_exact", test_sigkill_ten_times_exact},
    {"two_instances_rebalance_exact", test_two_instances_rebalance_exact},
    {"sigkill_twice_resumes_fast", test_sigkill_twice_resumes_fast},
    {"store_unwritable_20s_exact", test_store_unwritable_20s_exact},
    {0, 0},
};
TR_MAIN(tests)
