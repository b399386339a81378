/* The collector without a broker (its Kafka address is unreachable, so the spool takes
 * everything): configuration errors and --help, invalid chunks rejected by reason, hostile
 * clients (garbage, oversized frame, slowloris, 1,000 connections, a flood) that must not harm
 * a well-behaved agent, load shedding with exact accounting, and the spool module on its own
 * (order, restart, torn tail, oldest-first drops). HTTP: a free port for each collector
 * (tc_collector_start with port 0), so that runs in parallel do not collide. */
#define _GNU_SOURCE
#include "cm/error.h"
#include "cm/wire.h"
#include "internal.h"
#include "support/runner.h"
#include "test-collector-client.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NO_KAFKA "127.0.0.1:1"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Runs the collector binary with args; returns the exit code and its stderr+stdout in out. */
static int run_collector(const char *const *args, char *out, size_t out_size) {
    char cmd[4096];
    int n = snprintf(cmd, sizeof cmd, "%s/collector/fleetprof-collector",
                     getenv("FLEETPROF_BUILD"));
    for (int i = 0; args[i]; i++)
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " '%s'", args[i]);
    snprintf(cmd + n, sizeof cmd - (size_t)n, " 2>&1");
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    size_t len = fread(out, 1, out_size - 1, p);
    out[len] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_config_errors(void) {
    static char out[65536];
    const char *help[] = {"--help", NULL};
    CHECK_EQ(run_collector(help, out, sizeof out), 0);
    const char *must[] = {"--socket", "--spool-dir", "--spool-max", "--segment-size",
                          "--spool-fsync", "--brokers", "--topic", "--http-listen",
                          "--max-msg", "--max-clients", "--ingest-memory", "--max-rate",
                          "--client-max-rate", "--frame-timeout", "--max-inflight",
                          "--drain-timeout", "FLEETPROF_COLLECTOR_SPOOL_DIR", "kafka."};
    for (size_t i = 0; i < sizeof must / sizeof *must; i++)
        CHECKF(strstr(out, must[i]), "--help does not mention %s", must[i]);
    struct {
        const char *arg, *expect;
    } bad[] = {
        {"--spool-fsync=sometimes", "spool-fsync='sometimes'"},
        {"--spool-max=lots", "lots"},
        {"--segment-size=1GiB", "spool-max"},
        {"--frame-timeout=-3s", "frame-timeout"},
        {"--log-level=loud", "log-level='loud'"},
        {"--no-such-option=1", "no-such-option"},
        {"--kafka.compression.type=zip", "kafka.compression.type='zip'"},
        {"--http-listen=localhost", "http-listen='localhost'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *args[] = {bad[i].arg, "--spool-dir=/tmp/fp-col-test-cfg",
                              "--socket=/tmp/fp-col-test-cfg.sock", NULL};
        int rc = run_collector(args, out, sizeof out);
        CHECKF(rc != 0, "%s was accepted", bad[i].arg);
        CHECKF(strstr(out, bad[i].expect), "error for %s does not name '%s': %s", bad[i].arg,
               bad[i].expect, out);
    }
    /* The environment and a config file are read too, with the source in the message. */
    setenv("FLEETPROF_COLLECTOR_MAX_CLIENTS", "zero", 1);
    const char *none[] = {NULL};
    CHECK(run_collector(none, out, sizeof out) == 2);
    CHECKF(strstr(out, "FLEETPROF_COLLECTOR_MAX_CLIENTS") && strstr(out, "zero"), "%s", out);
    unsetenv("FLEETPROF_COLLECTOR_MAX_CLIENTS");
    FILE *f = fopen("/tmp/fp-col-test-cfg.conf", "w");
    fprintf(f, "# test\nspool-dir = /tmp/x\nmax-inflight = many\n");
    fclose(f);
    const char *file[] = {"--config=/tmp/fp-col-test-cfg.conf", NULL};
    CHECK(run_collector(file, out, sizeof out) == 2);
    CHECKF(strstr(out, "max-inflight") && strstr(out, "many") &&
               strstr(out, "/tmp/fp-col-test-cfg.conf"),
           "%s", out);
    unlink("/tmp/fp-col-test-cfg.conf");
}

static void test_invalid_chunks_rejected(void) {
    tc_collector_t c = {0};
    CHECK(tc_collector_start(&c, NO_KAFKA, 0, NULL) == 0);
    int fd = tc_connect(c.sock, 1);
    CHECK(fd >= 0);
    uint32_t no = 0;
    uint8_t *f;
    size_t len;
    CHECK(tc_frame_make("svc", 1, 500, &f, &len) == 0);
    CHECK_EQ(tc_send_acked(fd, f, len, &no), 0);
    f[len - 1] ^= 0x55; /* payload byte: checksum mismatch */
    CHECK_EQ(tc_send_acked(fd, f, len, &no), CM_ECHECKSUM);
    f[len - 1] ^= 0x55;
    uint8_t junk[300];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (uint8_t)(i * 37 + 11);
    CHECK_EQ(tc_send_acked(fd, junk, sizeof junk, &no), CM_EMAGIC);
    CHECK_EQ(tc_send_acked(fd, f, 30, &no), CM_ETRUNCATED);
    /* The connection is still good. */
    CHECK_EQ(tc_send_acked(fd, f, len, &no), 0);
#define REJECTED_PREFIX "fleetprof_collector_chunks_rejected_total{reason=\""
#define REJECTED(r) REJECTED_PREFIX r "\"}"
    CHECK_EQ(tc_metric(c.http_port, REJECTED("ECHECKSUM")), 1);
    CHECK_EQ(tc_metric(c.http_port, REJECTED("EMAGIC")), 1);
    CHECK_EQ(tc_metric(c.http_port, REJECTED("ETRUNCATED")), 1);
    CHECK_EQ(tc_metric(c.http_port, "fleetprof_collector_chunks_accepted_total"), 2);
    CHECK_EQ(tc_metric(c.http_port, "fleetprof_collector_chunks_received_total"), 5);
    /* one series per reason: "other" and each CM_E* code once, no EUNKNOWN */
    static char body[1 << 16];
    CHECK_EQ(tc_http_get(c.http_port, "/metrics", body, sizeof body), 200);
    int series = 0;
    for (const char *q = body; (q = strstr(q, "\n" REJECTED_PREFIX)); q++) {
        series++;
        CHECKF(strncmp(q + 1 + strlen(REJECTED_PREFIX), "EUNKNOWN", 8) != 0, "%.80s", q + 1);
    }
    CHECK_EQ(series, 1 + (int)CM__EEND - (int)CM__EBASE - 1);
    for (int code = CM_EMAGIC; code >= CM_EIO; code--) {
        char needle[128];
        snprintf(needle, sizeof needle, "\n" REJECTED_PREFIX "%s\"}", cm_errname(code));
        const char *at = strstr(body, needle);
        CHECKF(at && !strstr(at + 1, needle), "%s: not exactly once", needle + 1);
    }
    close(fd);
    free(f);
    CHECK(tc_collector_stop(&c, SIGKILL, 10) >= 0);
    /* A rejected chunk is logged, with its reason. */
    char cmd[512];
    snprintf(cmd, sizeof cmd, "grep -q 'rejected an invalid chunk.*reason=EMAGIC' %s", c.log);
    CHECK(system(cmd) == 0);
    tc_cleanup(&c);
}

static void flood(const char *sock, double seconds) {
    int fd = tc_connect(sock, 1);
    if (fd < 0)
        _exit(1);
    uint8_t *f;
    size_t len;
    if (tc_frame_make("flood", 1, 100, &f, &len))
        _exit(1);
    double end = now_s() + seconds;
    while (now_s() < end)
        if (tc_send(fd, f, len)) /* never reads its acks */
            break;
    _exit(0);
}

static void test_hostile_clients(void) {
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    tc_collector_t c = {0};
    /* every client here is one uid (root): per-connection fairness, not the per-uid limits
     * (test-collector-limits), so uid-max-bytes-rate is off */
    const char *extra[] = {"--frame-timeout=1s", "--max-clients=1500", "--max-write-queue=64KiB",
                           "--drain-timeout=1s", "--uid-max-bytes-rate=0", NULL};
    CHECK(tc_collector_start(&c, NO_KAFKA, 0, extra) == 0);
    int good = tc_connect(c.sock, 1);
    CHECK(good >= 0);
    uint32_t no = 0;
    uint8_t *f;
    size_t len;
    CHECK(tc_frame_make("good-agent", 0, 2000, &f, &len) == 0);
    CHECK_EQ(tc_send_acked(good, f, len, &no), 0);

    /* 1,000 idle connections that said hello. */
    enum { IDLE = 1000 };
    static int idle[IDLE];
    for (int i = 0; i < IDLE; i++)
        CHECKF((idle[i] = tc_connect(c.sock, 1)) >= 0, "connection %d: %s", i, strerror(errno));
    CHECK_EQ(tc_metric_wait_eq(c.http_port, "fleetprof_collector_connected_agents", IDLE + 1, 20),
             IDLE + 1);

    /* Random bytes instead of a hello. */
    int garbage = tc_connect(c.sock, 0);
    uint8_t rnd[4096];
    for (size_t i = 0; i < sizeof rnd; i++)
        rnd[i] = (uint8_t)(rand() & 0xff);
    CHECK(write(garbage, rnd, sizeof rnd) > 0);
    CHECK(tc_closed_within(garbage, 5));
    /* A frame length far above max-msg: ETOOBIG ack, then closed. */
    int big = tc_connect(c.sock, 1);
    uint8_t hdr[4] = {0xff, 0xff, 0xff, 0x7f};
    CHECK(write(big, hdr, 4) == 4);
    uint32_t ano;
    int32_t ast;
    CHECK_EQ(tc_ack_read(big, &ano, &ast, 5000), 1);
    CHECK_EQ(ast, CM_ETOOBIG);
    CHECK(tc_closed_within(big, 5));
    /* Slowloris: half a frame, then silence; and half a hello. */
    int slow = tc_connect(c.sock, 1), slow2 = tc_connect(c.sock, 0);
    CHECK(write(slow, "\x10\x27\x00\x00partial", 11) == 11);
    CHECK(write(slow2, "FPR", 3) == 3);
    double t0 = now_s();
    CHECK(tc_closed_within(slow, 6));
    CHECK(tc_closed_within(slow2, 6));
    CHECKF(now_s() - t0 > 0.5, "slow client closed too early (%.2f s)", now_s() - t0);

    /* A flood from two processes while the good agent keeps sending. */
    pid_t fl[2];
    for (int i = 0; i < 2; i++)
        if ((fl[i] = fork()) == 0)
            flood(c.sock, 6);
    double worst = 0;
    for (uint64_t s = 1; s <= 30; s++) {
        uint8_t *g;
        size_t gl;
        CHECK(tc_frame_make("good-agent", s, 2000, &g, &gl) == 0);
        double a = now_s();
        CHECK_EQ(tc_send_acked(good, g, gl, &no), 0);
        double d = now_s() - a;
        worst = d > worst ? d : worst;
        free(g);
        usleep(100000);
    }
    for (int i = 0; i < 2; i++)
        waitpid(fl[i], NULL, 0);
    printf("worst ack latency of the good agent during the flood: %.3f s\n", worst);
    CHECKF(worst < 2.0, "the good agent waited %.3f s for an ack", worst);
    double flood_in = tc_metric(c.http_port, "fleetprof_collector_chunks_received_total");
    CHECKF(flood_in > 1000, "the flood sent only %.0f chunks", flood_in);
    /* Idle connections are still there; the hostile ones were counted. */
    CHECK(tc_metric(c.http_port, "fleetprof_collector_connected_agents") >= IDLE + 1);
    CHECK_EQ(tc_metric(c.http_port,
                       "fleetprof_collector_disconnects_total{reason=\"bad_hello\"}"), 1);
    CHECK_EQ(tc_metric(c.http_port,
                       "fleetprof_collector_disconnects_total{reason=\"oversized\"}"), 1);
    CHECK_EQ(tc_metric(c.http_port, "fleetprof_collector_disconnects_total{reason=\"slow\"}"), 2);
    CHECK(kill(c.pid, 0) == 0);
    for (int i = 0; i < IDLE; i++)
        close(idle[i]);
    close(good);
    free(f);
    int st = tc_collector_stop(&c, SIGTERM, 20);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    tc_cleanup(&c);
}

static void test_shedding_accounted(void) {
    tc_collector_t c = {0};
    const char *extra[] = {"--client-max-rate=5", "--ingest-memory=1MiB", "--drain-timeout=1s",
                           NULL};
    CHECK(tc_collector_start(&c, NO_KAFKA, 0, extra) == 0);
    int fd = tc_connect(c.sock, 1);
    uint32_t no = 0;
    uint8_t *f;
    size_t len;
    CHECK(tc_frame_make("svc", 0, 300, &f, &len) == 0);
    int ok = 0, retry = 0;
    for (int i = 0; i < 40; i++) {
        int32_t st = tc_send_acked(fd, f, len, &no);
        CHECK(st == 0 || st == CM_SOCK_RETRY);
        st == 0 ? ok++ : retry++;
    }
    CHECK(ok >= 5 && retry > 0);
    CHECK_EQ(tc_metric(c.http_port,
                       "fleetprof_collector_chunks_shed_total{reason=\"client_rate\"}"),
             retry);
    CHECK_EQ(tc_metric(c.http_port, "fleetprof_collector_chunks_accepted_total"), ok);
    /* A frame larger than the memory budget is read, discarded and answered with retry. */
    size_t blen = 3u << 20;
    uint8_t *blob = calloc(1, blen);
    CHECK_EQ(tc_send_acked(fd, blob, blen, &no), CM_SOCK_RETRY);
    CHECK_EQ(tc_metric(c.http_port, "fleetprof_collector_chunks_shed_total{reason=\"memory\"}"), 1);
    sleep(1); /* refill the rate bucket */
    CHECK_EQ(tc_send_acked(fd, f, len, &no), 0);
    free(blob);
    free(f);
    close(fd);
    CHECK(tc_collector_stop(&c, SIGTERM, 20) == 0);
    tc_cleanup(&c);
}

/* ---------------------------------------------------------------- spool module */

static col_config_t spool_cfg(const char *dir) {
    col_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.spool_dir = (char *)dir;
    cfg.spool_max = 1 << 20;
    cfg.segment_size = 64 << 10;
    cfg.fsync_mode = COL_FSYNC_NONE;
    cfg.fsync_interval = 1000000000;
    cfg.max_msg = CM_SOCK_MAX_MSG;
    return cfg;
}

static void append_n(col_spool_t *s, int from, int n, size_t size) {
    col_hdrs_t h = {0};
    h.n = 1;
    h.name[0] = CM_HDR_HOST;
    snprintf(h.value[0], sizeof h.value[0], "host-a");
    uint8_t *buf = malloc(size);
    for (int i = from; i < from + n; i++) {
        memset(buf, i & 0xff, size);
        memcpy(buf, &i, sizeof i);
        CHECK_EQ(col_spool_append(s, 0, "svc", &h, 1000 + (uint64_t)i, buf, size), 0);
    }
    free(buf);
}

/* Reads everything; returns the count and checks the ids are consecutive from `first`. */
static int read_all(col_spool_t *s, int first, col_spool_pos_t *last_next) {
    col_record_t r;
    int n = 0, rc;
    while ((rc = col_spool_read(s, &r)) == 1) {
        int id;
        memcpy(&id, r.frame, sizeof id);
        CHECKF(id == first + n, "record %d where %d was expected", id, first + n);
        CHECK(!strcmp(r.key, "svc") && r.hdrs.n == 1 && !strcmp(r.hdrs.value[0], "host-a"));
        CHECK_EQ(r.received_ns, 1000 + (uint64_t)id);
        free(r.frame);
        n++;
    }
    CHECK_EQ(rc, 0);
    if (last_next)
        *last_next = col_spool_tell(s);
    return n;
}

static void test_spool_order_restart_drop(void) {
    char dir[] = "/tmp/fp-col-test-spool-XXXXXX";
    CHECK(mkdtemp(dir));
    col_config_t cfg = spool_cfg(dir);
    uv_loop_t loop;
    uv_loop_init(&loop);
    char err[256];
    col_spool_t *s;
    CHECK_EQ(col_spool_open(&loop, &cfg, &s, err, sizeof err), 0);
    append_n(s, 0, 100, 3000); /* ~300 KB: several segments */
    CHECK(atomic_load(&col_metrics.spool_segments) >= 4);
    col_spool_pos_t pos;
    CHECK_EQ(read_all(s, 0, &pos), 100);
    /* Deliver the first 100, write 50 more, "crash" (close without committing them). */
    col_spool_commit(s, pos);
    append_n(s, 100, 50, 3000);
    col_spool_close(s);
    CHECK_EQ(col_spool_open(&loop, &cfg, &s, err, sizeof err), 0);
    CHECK_EQ(col_spool_unread(s), 50);
    CHECK_EQ(read_all(s, 100, &pos), 50);
    col_spool_close(s); /* nothing committed: all 50 come back */
    CHECK_EQ(col_spool_open(&loop, &cfg, &s, err, sizeof err), 0);
    CHECK_EQ(read_all(s, 100, &pos), 50);
    col_spool_commit(s, pos);
    /* Spool full: 1 MiB bound, 10 KB records: the oldest unread segments go, counted. */
    uint64_t dropped0 = atomic_load(&col_metrics.dropped[COL_DROP_SPOOL_FULL]);
    append_n(s, 1000, 300, 10000);
    uint64_t dropped = atomic_load(&col_metrics.dropped[COL_DROP_SPOOL_FULL]) - dropped0;
    CHECK(dropped > 0);
    CHECK(atomic_load(&col_metrics.spool_bytes) <= (uint64_t)cfg.spool_max);
    int left = read_all(s, 1000 + (int)dropped, NULL);
    CHECK_EQ((uint64_t)left + dropped, 300);
    col_spool_close(s);
    uv_loop_close(&loop);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

static void test_spool_torn_tail(void) {
    char dir[] = "/tmp/fp-col-test-spool-XXXXXX";
    CHECK(mkdtemp(dir));
    col_config_t cfg = spool_cfg(dir);
    cfg.segment_size = 1 << 20;
    cfg.spool_max = 4 << 20;
    uv_loop_t loop;
    uv_loop_init(&loop);
    char err[256];
    col_spool_t *s;
    CHECK_EQ(col_spool_open(&loop, &cfg, &s, err, sizeof err), 0);
    append_n(s, 0, 10, 1000);
    col_spool_close(s);
    /* A machine crash cut the last record in half; another record has a flipped bit. */
    char path[512];
    snprintf(path, sizeof path, "%s/0000000000000001.seg", dir);
    struct stat st;
    CHECK(stat(path, &st) == 0);
    CHECK(truncate(path, st.st_size - 500) == 0);
    int fd = open(path, O_RDWR);
    uint8_t b;
    off_t off = 16 + 5 * (32 + 3 + 15 + 1000) + 32 + 3 + 15 + 700; /* record 5's frame */
    CHECK(pread(fd, &b, 1, off) == 1);
    b ^= 1;
    CHECK(pwrite(fd, &b, 1, off) == 1);
    close(fd);
    uint64_t corrupt0 = atomic_load(&col_metrics.dropped[COL_DROP_SPOOL_CORRUPT]);
    CHECK_EQ(col_spool_open(&loop, &cfg, &s, err, sizeof err), 0);
    CHECK_EQ(col_spool_unread(s), 9); /* the torn one is not a record */
    CHECK_EQ(read_all(s, 0, NULL), 5); /* 0..4; 5 is corrupt, the rest of the segment skipped */
    CHECK_EQ(atomic_load(&col_metrics.dropped[COL_DROP_SPOOL_CORRUPT]) - corrupt0, 4);
    append_n(s, 50, 3, 1000); /* writing goes on in a new segment */
    CHECK_EQ(read_all(s, 50, NULL), 3);
    col_spool_close(s);
    uv_loop_close(&loop);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* A record whose frame length was changed on disk after recovery scanned the segment (another
 * process, a disk error): the reader applies the same bounds as recovery and skips the rest of
 * the segment as corrupt, instead of allocating the 4 GiB the field claims. In a child with a
 * 1 GiB address-space limit, so the unbounded malloc would fail with -ENOMEM (without the
 * limit under sanitizers, whose shadow memory needs more). */
static void test_spool_frame_len_bounded(void) {
    char dir[] = "/tmp/fp-col-test-spool-XXXXXX";
    CHECK(mkdtemp(dir));
    col_config_t cfg = spool_cfg(dir);
    cfg.segment_size = 1 << 20;
    cfg.spool_max = 4 << 20;
    uv_loop_t loop;
    uv_loop_init(&loop);
    char err[256];
    col_spool_t *s;
    CHECK_EQ(col_spool_open(&loop, &cfg, &s, err, sizeof err), 0);
    append_n(s, 0, 10, 1000);
    char path[512];
    snprintf(path, sizeof path, "%s/0000000000000001.seg", dir);
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    uint8_t big[4] = {0xf0, 0xff, 0xff, 0xff};
    off_t rec3 = 16 + 3 * (32 + 3 + 15 + 1000);
    CHECK(pwrite(fd, big, 4, rec3 + 28) == 4); /* frame_len of record 3 */
    uint8_t body[4];
    uint32_t b = 3 + 15 + 0xfffffff0u; /* and a body length that agrees with it */
    memcpy(body, &b, 4);
    CHECK(pwrite(fd, body, 4, rec3 + 4) == 4);
    close(fd);
    uint64_t corrupt0 = atomic_load(&col_metrics.dropped[COL_DROP_SPOOL_CORRUPT]);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
        struct rlimit rl = {1ul << 30, 1ul << 30};
        setrlimit(RLIMIT_AS, &rl);
#endif
        col_record_t r;
        int n = 0, rc;
        while ((rc = col_spool_read(s, &r)) == 1) {
            free(r.frame);
            n++;
        }
        uint64_t lost = atomic_load(&col_metrics.dropped[COL_DROP_SPOOL_CORRUPT]) - corrupt0;
        printf("read %d records, rc %d, %llu counted corrupt\n", n, rc, (unsigned long long)lost);
        _exit(rc == 0 && n == 3 && lost == 7 ? 0 : 1);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    col_spool_close(s);
    uv_loop_close(&loop);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* The ack list keeps each ack's message number: when growing it fails, the acks already in it
 * keep their numbers and the list is unchanged (before, a failed realloc dropped one ack and
 * every later ack of the read was sent under the previous message's number: a chunk could be
 * acked 0 when the agent should have retried it). */
static void test_acks_numbered_on_alloc_failure(void) {
    col_acks_t a = {0};
    col_acks_alloc_budget = 1; /* the first block (16) only */
    for (uint32_t i = 1; i <= 16; i++)
        CHECK_EQ(col_acks_add(&a, 100 + i, i % 2 ? 0 : CM_SOCK_RETRY), 0);
    CHECK_EQ(col_acks_add(&a, 117, CM_SOCK_RETRY), -ENOMEM);
    CHECK_EQ(a.n, 16);
    for (uint32_t i = 0; i < 16; i++) {
        CHECK_EQ(a.no[i], 101 + i);
        CHECK_EQ(a.status[i], (i + 1) % 2 ? 0 : CM_SOCK_RETRY);
    }
    a.n = 0; /* flushed: the failed one goes into the freed list under its own number */
    CHECK_EQ(col_acks_add(&a, 117, CM_SOCK_RETRY), 0);
    CHECK_EQ(a.no[0], 117);
    CHECK_EQ(a.status[0], CM_SOCK_RETRY);
    col_acks_alloc_budget = -1;
    for (uint32_t i = 0; i < 1000; i++)
        CHECK_EQ(col_acks_add(&a, 118 + i, 0), 0);
    CHECK_EQ(a.n, 1001);
    CHECK_EQ(a.no[1000], 1117);
    col_acks_free(&a);
}

static void test_container_id_from_cgroup(void) {
    char id[80];
    const char *v2 = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/"
                     "cri-containerd-"
                     "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope\n";
    CHECK(col_enrich_container_id(v2, id, sizeof id) == 1);
    CHECK(!strcmp(id, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
    const char *docker =
        "12:memory:/docker/fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210\n";
    CHECK(col_enrich_container_id(docker, id, sizeof id) == 1 && id[0] == 'f');
    CHECK(col_enrich_container_id("0::/user.slice/user-0.slice/session-1.scope\n", id,
                                  sizeof id) == 0);
    /* 65 hex digits is not an id */
    CHECK(col_enrich_container_id(
              "0::/x/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0\n", id,
              sizeof id) == 0);
}

/* The socket's life (collector/src/ingest.c open_socket): it appears only finished, with no
 * temporary name left beside it; a collector started on a path where another listens refuses
 * and says why; a stopping collector removes its path only while the path is still its own
 * socket: here a successor (this test, listening) took the path while the first one ran, and
 * keeps it; a plain stop removes the path. */
static int tmp_names(const char *dir) {
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t l = strlen(e->d_name);
        n += l > 4 && !strcmp(e->d_name + l - 4, ".tmp");
    }
    closedir(d);
    return n;
}

static void test_socket_lifecycle(void) {
    tc_collector_t c = {0};
    CHECK(tc_collector_start(&c, NO_KAFKA, 0, NULL) == 0);
    struct stat sb;
    CHECK(lstat(c.sock, &sb) == 0 && S_ISSOCK(sb.st_mode));
    CHECKF((sb.st_mode & 0777) == 0600, "mode %o (tc_collector_start: socket-mode 0600)",
           sb.st_mode & 0777);
    CHECK_EQ(tmp_names(c.dir), 0);
    /* a second collector on the live path refuses */
    char a_sock[400], a_spool[400], out[8192];
    snprintf(a_sock, sizeof a_sock, "--socket=%s", c.sock);
    snprintf(a_spool, sizeof a_spool, "--spool-dir=%s/spool2", c.dir);
    const char *args[] = {a_sock, a_spool, "--brokers=" NO_KAFKA, "--http-listen=off", NULL};
    CHECK(run_collector(args, out, sizeof out) != 0);
    CHECKF(strstr(out, "is in use by a running collector"), "%s", out);
    /* a successor takes the path while the first still runs */
    CHECK(unlink(c.sock) == 0);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t sl = strlen(c.sock);
    CHECK(sl < sizeof sa.sun_path);
    memcpy(sa.sun_path, c.sock, sl + 1);
    CHECK(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(fd, 4) == 0);
    struct stat mine;
    CHECK(lstat(c.sock, &mine) == 0);
    int st = tc_collector_stop(&c, SIGTERM, 15);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    CHECKF(lstat(c.sock, &sb) == 0 && sb.st_ino == mine.st_ino,
           "the stopping collector removed its successor's socket");
    close(fd);
    CHECK(unlink(c.sock) == 0);
    /* a plain start and stop leaves nothing behind */
    CHECK(tc_collector_start(&c, NO_KAFKA, 0, NULL) == 0);
    st = tc_collector_stop(&c, SIGTERM, 15);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    CHECKF(lstat(c.sock, &sb) != 0 && errno == ENOENT, "socket left after stop");
    CHECK_EQ(tmp_names(c.dir), 0);
    tc_cleanup(&c);
}

/* Issue 35: an agent that exits sends its last chunk and closes without reading the ack (the
 * kernel then resets the connection): a normal end, counted as eof and not logged as
 * reason=socket_error; a connection reset in the middle of a frame still is an error. */
static void test_agent_exit_is_normal(void) {
    tc_collector_t c = {0};
    CHECK(tc_collector_start(&c, NO_KAFKA, 0, NULL) == 0);
    /* the start's own probe of the socket (connected, closed without a hello) ends as an eof
     * too, counted whenever the collector gets to it: wait for it, or it lands in our count */
    double eof0 =
        tc_metric_wait(c.http_port, "fleetprof_collector_disconnects_total{reason=\"eof\"}", 1, 5);
    CHECK_EQ(eof0, 1);
    int fd = tc_connect(c.sock, 1);
    CHECK(fd >= 0);
    uint8_t *f;
    size_t len;
    CHECK(tc_frame_make("exiting", 1, 500, &f, &len) == 0);
    CHECK_EQ(tc_send(fd, f, len), 0);
    struct pollfd p = {fd, POLLIN, 0};
    CHECK(poll(&p, 1, 5000) == 1); /* the ack is there, unread */
    close(fd);
    CHECK_EQ(tc_metric_wait(c.http_port, "fleetprof_collector_disconnects_total{reason=\"eof\"}",
                            eof0 + 1, 5),
             eof0 + 1);
    /* half a frame, then a reset (an ack left unread): an error */
    fd = tc_connect(c.sock, 1);
    CHECK_EQ(tc_send(fd, f, len), 0);
    p.fd = fd;
    CHECK(poll(&p, 1, 5000) == 1);
    CHECK(write(fd, "\x10\x27\x00\x00part", 8) == 8);
    usleep(200000);
    close(fd);
    CHECK_EQ(tc_metric_wait(c.http_port,
                            "fleetprof_collector_disconnects_total{reason=\"error\"}", 1, 5),
             1);
    CHECK_EQ(tc_metric(c.http_port, "fleetprof_collector_disconnects_total{reason=\"eof\"}"),
             eof0 + 1);
    free(f);
    int st = tc_collector_stop(&c, SIGTERM, 20);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    FILE *lf = fopen(c.log, "r");
    CHECK(lf != NULL);
    char line[4096];
    int errors = 0;
    while (fgets(line, sizeof line, lf))
        errors += strstr(line, "reason=socket_error") != NULL;
    fclose(lf);
    CHECKF(errors == 1, "want one socket_error line (the mid-frame reset), got %d (log %s)",
           errors, c.log);
    tc_cleanup(&c);
}

/* Capture commands: the text form and which agents one targets (command.c). */
static void test_capture_command_match(void) {
    col_cmd_t c;
    char err[256];
    const char *t = "cmd=capture\nservice=api\nhost=node-1\npid=42\nreason=slow\nfuture=1\n";
    CHECK_EQ(col_cmd_parse(t, strlen(t), &c, err, sizeof err), 0);
    CHECK(!strcmp(c.service, "api") && !strcmp(c.host, "node-1") && c.pid == 42 &&
          !strcmp(c.reason, "slow"));
    col_cmd_agent_t same = {"api", 42, 7}, nspid = {"api", 9000, 42}, other_pid = {"api", 43, 1},
                    other_svc = {"web", 42, 42}, no_chunk = {NULL, 42, 42};
    CHECK(col_cmd_match(&c, "node-1", &same));      /* the collector's view of the pid */
    CHECK(col_cmd_match(&c, "node-1", &nspid));     /* the pid in its own namespace */
    CHECK(!col_cmd_match(&c, "node-1", &other_pid));
    CHECK(!col_cmd_match(&c, "node-1", &other_svc));
    CHECK(!col_cmd_match(&c, "node-1", &no_chunk)); /* no chunk yet: service unknown */
    CHECK(!col_cmd_match(&c, "node-2", &same));     /* another host's command */
    t = "cmd=capture\nservice=api\n"; /* any host, any pid */
    CHECK_EQ(col_cmd_parse(t, strlen(t), &c, err, sizeof err), 0);
    CHECK(col_cmd_match(&c, "node-2", &other_pid) && !col_cmd_match(&c, "node-2", &other_svc));
    const char *bad[] = {"cmd=capture\nhost=x\n", "cmd=stop\nservice=api\n",
                         "cmd=capture\nservice=api\npid=0\n", "cmd=capture\nservice=api\npid=x\n",
                         "service=api\n", "cmd=capture\nservice api\n"};
    int want[] = {CM_EINVAL, CM_EFORMAT, CM_EFORMAT, CM_EFORMAT, CM_EFORMAT, CM_EFORMAT};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CHECK_EQ(col_cmd_parse(bad[i], strlen(bad[i]), &c, err, sizeof err), want[i]);
        CHECKF(err[0], "no message for %s", bad[i]);
    }
}

/* Sends the control hello and one command text; returns the collector's answer (sent-to count
 * or a negative CM_E* code), or 99999 when none came. */
static int32_t control_send(const char *sock, const char *text) {
    int fd = tc_connect(sock, 0);
    CHECK(fd >= 0);
    uint8_t hello[CM_SOCK_HELLO_SIZE] = {'F', 'P', 'R', 'C', CM_SOCK_VERSION, 0, 0, 0};
    CHECK(write(fd, hello, sizeof hello) == (ssize_t)sizeof hello);
    CHECK(tc_send(fd, (const uint8_t *)text, strlen(text)) == 0);
    uint32_t no = 0;
    int32_t st = 99999;
    if (tc_ack_read(fd, &no, &st, 5000) != 1 || no != 1)
        st = 99999;
    close(fd);
    return st;
}

/* A control client's capture command reaches the connected agents of its service, as a command
 * record between their acks; an agent of another service gets nothing; counted. */
static void test_capture_command_routed(void) {
    tc_collector_t c = {0};
    const char *mode[] = {"--socket-mode=438", "--drain-timeout=1s", NULL}; /* 0666: see below */
    CHECK(tc_collector_start(&c, NO_KAFKA, 0, mode) == 0);
    int a = tc_connect(c.sock, 1), b = tc_connect(c.sock, 1);
    CHECK(a >= 0 && b >= 0);
    uint8_t *fa, *fb;
    size_t la, lb;
    CHECK(tc_frame_make("svc-a", 1, 10, &fa, &la) == 0);
    CHECK(tc_frame_make("svc-b", 1, 10, &fb, &lb) == 0);
    uint32_t na = 0, nb = 0;
    CHECK_EQ(tc_send_acked(a, fa, la, &na), 0); /* the collector learns each one's service */
    CHECK_EQ(tc_send_acked(b, fb, lb, &nb), 0);
    CHECK_EQ(control_send(c.sock, "cmd=capture\nservice=svc-a\nreason=test\n"), 1);
    uint32_t no = 0;
    int32_t st = 0;
    CHECK_EQ(tc_ack_read(a, &no, &st, 5000), 1);
    CHECK(no == CM_SOCK_CMD_NO && st == CM_SOCK_CMD_CAPTURE);
    CHECK_EQ(tc_ack_read(b, &no, &st, 300), -1); /* nothing for svc-b */
    char pid[64];
    snprintf(pid, sizeof pid, "cmd=capture\nservice=svc-b\npid=%d\n", (int)getpid() + 1);
    CHECK_EQ(control_send(c.sock, pid), 0);     /* no such pid */
    CHECK_EQ(control_send(c.sock, "cmd=capture\nservice=nosuch\n"), 0);
    CHECK_EQ(control_send(c.sock, "cmd=capture\n"), CM_EINVAL);
    int not_permitted = 0;
    if (geteuid() == 0) { /* another user's client reaches none of root's agents */
        CHECK(chmod(c.dir, 0755) == 0);
        pid_t child = fork();
        if (child == 0) {
            if (setgid(65534) || setuid(65534))
                _exit(3);
            _exit(control_send(c.sock, "cmd=capture\nservice=svc-a\n") == 0 ? 0 : 4);
        }
        int ws = 0;
        CHECK(waitpid(child, &ws, 0) == child && WIFEXITED(ws));
        CHECK_EQ(WEXITSTATUS(ws), 0);
        CHECK_EQ(tc_ack_read(a, &no, &st, 300), -1); /* nothing more for svc-a */
        not_permitted = 1;
    } else {
        printf("not root: the other-user case is not run\n");
    }
    CHECK_EQ(tc_send_acked(a, fa, la, &na), 0); /* the agent's acks still in order after it */
    CHECK_EQ(tc_metric(c.http_port,
                       "fleetprof_collector_capture_commands_total{source=\"local\"}"),
             4 + not_permitted);
    CHECK_EQ(tc_metric(c.http_port, "fleetprof_collector_capture_commands_sent_total"), 1);
    CHECK_EQ(tc_metric(c.http_port, "fleetprof_collector_capture_commands_dropped_total"
                                    "{reason=\"no_agent\"}"), 2);
    CHECK_EQ(tc_metric(c.http_port, "fleetprof_collector_capture_commands_dropped_total"
                                    "{reason=\"malformed\"}"), 1);
    CHECK_EQ(tc_metric(c.http_port, "fleetprof_collector_capture_commands_dropped_total"
                                    "{reason=\"not_permitted\"}"), not_permitted);
    free(fa);
    free(fb);
    close(a);
    close(b);
    CHECK(tc_collector_stop(&c, SIGTERM, 20) == 0);
    tc_cleanup(&c);
}

static const tr_test_t tests[] = {
    {"capture_command_match", test_capture_command_match},
    {"capture_command_routed", test_capture_command_routed},
    {"agent_exit_is_normal", test_agent_exit_is_normal},
    {"config_errors", test_config_errors},
    {"invalid_chunks_rejected", test_invalid_chunks_rejected},
    {"hostile_clients", test_hostile_clients},
    {"shedding_accounted", test_shedding_accounted},
    {"spool_order_restart_drop", test_spool_order_restart_drop},
    {"spool_torn_tail", test_spool_torn_tail},
    {"spool_frame_len_bounded", test_spool_frame_len_bounded},
    {"acks_numbered_on_alloc_failure", test_acks_numbered_on_alloc_failure},
    {"container_id_from_cgroup", test_container_id_from_cgroup},
    {"socket_lifecycle", test_socket_lifecycle},
    {0, 0},
};
TR_MAIN(tests)
