/* The collector against other local users (issue 28): its socket is 0666 by default, so any
 * uid can connect; the per-uid limits keep one from harming the others. No broker (the spool
 * takes everything: accepted = spooled and acked). HTTP ports 19480-19486.
 *
 *   uid_connections  uid 65534 opens 4,200 connections (more than every max-clients slot):
 *                    only uid-max-clients (1,024) stay, the rest are closed as uid_too_many,
 *                    and an agent of another uid (root) still connects and delivers (before
 *                    issue 28: nobody held all 4,096 slots and root's agent was closed)
 *   uid_rate         with uid-max-bytes-rate=256KiB, root's flood is told to retry (uid_rate)
 *                    while nobody's chunk, sent meanwhile, is accepted: the buckets are per uid
 *   idle_after_hello an agent that says hello and then nothing is closed after idle-timeout
 *                    (1 s here; not before), one that keeps sending stays connected
 *   spool_flood      service "keep" (root) spools 40 chunks; uid 65534 then floods 3x the
 *                    spool's size: none of keep's chunks is pushed out (no spool_full drop,
 *                    all 40 read back from the spool), the flood is told to retry
 *                    (uid_spool), and keep can still spool more
 *   spool_alone      one uid alone fills the spool 3x over: every chunk accepted, the oldest
 *                    pushed out and counted (the behaviour before the per-uid shares)
 *   idle_agent       the real agent (fp-work-linked) with a 2.5 s interval against
 *                    idle-timeout=1s: closed between its chunks, it reconnects, and every chunk
 *                    it wrote to FLEETPROF_OUTPUT is accepted, the last one at exit too
 *   peer_identity    the headers of a peer come from the collector's view only: a process
 *                    whose environment says POD_NAMESPACE=evil POD_NAME=spoofed gets no such
 *                    pod (before issue 28 it did); a sidecar collector's own pod is used; pod
 *                    uids parsed from cgroupfs and systemd cgroup paths and named through a
 *                    kubelet-style pods dir; a process in its own pid namespace gets
 *                    fp-peer-nspid=1 (what its agent calls its pid)
 *
 * Needs root (to run the hostile client as nobody): otherwise each test fails saying so. */
#define _GNU_SOURCE
#include "cm/error.h"
#include "cm/wire.h"
#include "internal.h"
#include "support/runner.h"
#include "test-collector-client.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NO_KAFKA "127.0.0.1:1"
#define NOBODY 65534

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void need_root(void) {
    CHECKF(geteuid() == 0, "these tests run a client as uid %d: run as root", NOBODY);
}

/* Starts the collector with a socket every uid may use (the default mode, in a directory
 * anyone may enter). */
static void start(tc_collector_t *c, int port, const char *const *more) {
    const char *extra[16] = {"--socket-mode=438", "--drain-timeout=1s"};
    int n = 2;
    for (int i = 0; more && more[i] && n < 15; i++)
        extra[n++] = more[i];
    extra[n] = NULL;
    CHECK(tc_collector_start(c, NO_KAFKA, port, extra) == 0);
    CHECK(chmod(c->dir, 0755) == 0);
}

static void become_nobody(void) {
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY))
        _exit(90);
}

static void stop(tc_collector_t *c) {
    int st = tc_collector_stop(c, SIGTERM, 20);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "collector status %d", st);
}

static void test_uid_connections(void) {
    need_root();
    tc_collector_t c = {0};
    start(&c, 19480, NULL); /* max-clients 4096, uid-max-clients 1024: the defaults */
    enum { HOLD = 4200 };
    int ready[2], done[2];
    CHECK(pipe(ready) == 0 && pipe(done) == 0);
    pid_t hog = fork();
    CHECK(hog >= 0);
    if (hog == 0) {
        become_nobody();
        static int fds[HOLD];
        int n = 0;
        /* counted when connected: the hello's write may meet a connection the collector has
         * already closed as one too many (EPIPE), which is the behaviour under test */
        signal(SIGPIPE, SIG_IGN);
        static const uint8_t hello[8] = {'F', 'P', 'R', 'H', CM_SOCK_VERSION, 0, 0, 0};
        for (int i = 0; i < HOLD; i++)
            if ((fds[i] = tc_connect(c.sock, 0)) >= 0) {
                n++;
                if (write(fds[i], hello, sizeof hello) < 0) { /* closed already: fine */ }
            }
        if (write(ready[1], &n, sizeof n) != (ssize_t)sizeof n)
            _exit(91);
        char b;
        if (read(done[0], &b, 1) < 0) /* hold them until the test is done */
            _exit(92);
        _exit(0);
    }
    int opened = 0;
    CHECK(read(ready[0], &opened, sizeof opened) == (ssize_t)sizeof opened);
    printf("uid_connections: uid %d opened %d connections\n", NOBODY, opened);
    CHECK_EQ(opened, HOLD);
    double connected = tc_metric_wait_eq(19480, "fleetprof_collector_connected_agents", 1024, 20);
    /* (a connection closed but not yet freed still counts for max-clients: a few of the hog's
     * may be closed as too_many instead) */
    double refused = 0, too_many = 0, t0 = now_s();
    do {
        refused =
            tc_metric(19480, "fleetprof_collector_disconnects_total{reason=\"uid_too_many\"}");
        too_many = tc_metric(19480, "fleetprof_collector_disconnects_total{reason=\"too_many\"}");
    } while (refused + too_many < HOLD - 1024 && now_s() - t0 < 20 && usleep(50000) == 0);
    printf("uid_connections: connected %.0f, closed as uid_too_many %.0f, as too_many %.0f\n",
           connected, refused, too_many);

    /* Another uid's agent, while nobody holds everything it may. */
    int fd = tc_connect(c.sock, 1);
    CHECK(fd >= 0);
    uint8_t *f;
    size_t len;
    CHECK(tc_frame_make("other-service", 0, 500, &f, &len) == 0);
    uint32_t no = 0;
    int32_t st = tc_send_acked(fd, f, len, &no);
    printf("uid_connections: root's agent got ack %d\n", (int)st);
    CHECKF(st == 0, "an agent of another uid could not deliver (ack %d)", (int)st);
    CHECK_EQ(connected, 1024);
    CHECK_EQ(refused + too_many, HOLD - 1024);
    CHECK_EQ(tc_metric(19480, "fleetprof_collector_chunks_accepted_total"), 1);
    CHECK(write(done[1], "x", 1) == 1);
    int hs;
    CHECK(waitpid(hog, &hs, 0) == hog && WIFEXITED(hs) && WEXITSTATUS(hs) == 0);
    close(fd);
    free(f);
    stop(&c);
    tc_cleanup(&c);
}

static void test_uid_rate(void) {
    need_root();
    tc_collector_t c = {0};
    const char *more[] = {"--uid-max-bytes-rate=256KiB", NULL};
    start(&c, 19485, more);
    uint8_t *f;
    size_t len;
    CHECK(tc_frame_make("fast", 0, 2000, &f, &len) == 0);
    int fd = tc_connect(c.sock, 1);
    CHECK(fd >= 0);
    uint32_t no = 0;
    int ok = 0, retry = 0;
    double t0 = now_s();
    while (retry == 0 && no < 1000) {
        int32_t st = tc_send_acked(fd, f, len, &no);
        CHECK(st == 0 || st == CM_SOCK_RETRY);
        st == 0 ? ok++ : retry++;
    }
    double took = now_s() - t0;
    /* root's bucket is empty now; nobody's is full */
    pid_t other = fork();
    CHECK(other >= 0);
    if (other == 0) {
        become_nobody();
        int ofd = tc_connect(c.sock, 1);
        uint32_t ono = 0;
        _exit(ofd >= 0 && tc_send_acked(ofd, f, len, &ono) == 0 ? 0 : 1);
    }
    int st;
    CHECK(waitpid(other, &st, 0) == other);
    printf("uid_rate: %zu-byte chunks: root %d accepted before its first retry; nobody's chunk "
           "meanwhile: %s\n",
           len, ok, WIFEXITED(st) && WEXITSTATUS(st) == 0 ? "accepted" : "refused");
    /* what passed: the 256 KiB burst plus the refill while sending, give or take a frame */
    double allowed = (256 << 10) * (1 + took);
    printf("uid_rate: %.0f bytes accepted in %.3f s, the bucket allowed %.0f\n",
           (double)(ok * len), took, allowed);
    CHECK(retry == 1 && ok * len >= 256u << 10 && (double)(ok * len) < allowed + (double)len);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "another uid's chunk was refused (%d)", st);
    CHECK_EQ(tc_metric(19485, "fleetprof_collector_chunks_shed_total{reason=\"uid_rate\"}"), 1);
    close(fd);
    free(f);
    stop(&c);
    tc_cleanup(&c);
}

static void test_idle_after_hello(void) {
    tc_collector_t c = {0};
    const char *more[] = {"--idle-timeout=1s", NULL};
    start(&c, 19481, more);
    uint8_t *f;
    size_t len;
    CHECK(tc_frame_make("svc", 0, 100, &f, &len) == 0);
    int idle = tc_connect(c.sock, 1), busy = tc_connect(c.sock, 1);
    CHECK(idle >= 0 && busy >= 0);
    uint32_t no_idle = 0, no_busy = 0;
    CHECK_EQ(tc_send_acked(idle, f, len, &no_idle), 0);
    double t0 = now_s();
    /* busy sends every 0.4 s for 3 s: never idle for 1 s */
    int closed = 0;
    double closed_at = 0;
    while (now_s() - t0 < 3.0) {
        CHECK_EQ(tc_send_acked(busy, f, len, &no_busy), 0);
        if (!closed && tc_closed_within(idle, 0.4)) {
            closed = 1;
            closed_at = now_s() - t0;
        }
        if (closed)
            usleep(400000);
    }
    printf("idle_after_hello: idle connection closed: %s after %.2f s; busy one sent %u chunks\n",
           closed ? "yes" : "no", closed_at, no_busy);
    CHECKF(closed, "an idle connection was still open after %.1f s", now_s() - t0);
    CHECKF(closed_at > 0.9, "closed after %.2f s, before idle-timeout", closed_at);
    CHECK_EQ(tc_metric(19481, "fleetprof_collector_disconnects_total{reason=\"idle\"}"), 1);
    CHECK_EQ(tc_send_acked(busy, f, len, &no_busy), 0); /* still connected */
    close(idle);
    close(busy);
    free(f);
    stop(&c);
    tc_cleanup(&c);
}

/* Chunks of service key in the spool directory (read with the spool module). */
static int spooled(const char *dir, const char *key, int *others) {
    col_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.spool_dir = (char *)dir;
    cfg.spool_max = 1LL << 30;
    cfg.segment_size = 16 << 20;
    cfg.fsync_mode = COL_FSYNC_NONE;
    cfg.fsync_interval = 1000000000;
    cfg.max_msg = CM_SOCK_MAX_MSG;
    uv_loop_t loop;
    uv_loop_init(&loop);
    char err[256];
    col_spool_t *s;
    CHECKF(col_spool_open(&loop, &cfg, &s, err, sizeof err) == 0, "%s", err);
    col_record_t r;
    int n = 0;
    *others = 0;
    while (col_spool_read(s, &r) == 1) {
        !strcmp(r.key, key) ? n++ : (*others)++;
        free(r.frame);
    }
    col_spool_close(s);
    uv_loop_close(&loop);
    return n;
}

static void test_spool_flood(void) {
    need_root();
    tc_collector_t c = {0};
    const char *more[] = {"--spool-max=2MiB", "--segment-size=64KiB", NULL};
    start(&c, 19482, more);
    int keep = tc_connect(c.sock, 1);
    CHECK(keep >= 0);
    uint32_t no = 0;
    enum { KEEP = 40 };
    size_t keep_bytes = 0;
    for (int i = 0; i < KEEP; i++) {
        uint8_t *f;
        size_t len;
        CHECK(tc_frame_make("keep", (uint64_t)i, 200, &f, &len) == 0);
        CHECK_EQ(tc_send_acked(keep, f, len, &no), 0);
        keep_bytes += len;
        free(f);
    }
    int res[2];
    CHECK(pipe(res) == 0);
    pid_t flood = fork();
    CHECK(flood >= 0);
    if (flood == 0) {
        become_nobody();
        int fd = tc_connect(c.sock, 1);
        uint32_t fno = 0;
        int counts[2] = {0, 0}; /* accepted, told to retry */
        size_t sent = 0;
        for (uint64_t seq = 0; fd >= 0 && sent < 6u << 20; seq++) {
            uint8_t *f;
            size_t len;
            if (tc_frame_make("flood", seq, 2000, &f, &len))
                _exit(93);
            int32_t st = tc_send_acked(fd, f, len, &fno);
            if (st != 0 && st != CM_SOCK_RETRY)
                _exit(94);
            counts[st != 0]++;
            sent += len;
            free(f);
        }
        if (write(res[1], counts, sizeof counts) != (ssize_t)sizeof counts)
            _exit(95);
        _exit(0);
    }
    int counts[2] = {0, 0};
    CHECK(read(res[0], counts, sizeof counts) == (ssize_t)sizeof counts);
    int fs;
    CHECK(waitpid(flood, &fs, 0) == flood);
    CHECKF(WIFEXITED(fs) && WEXITSTATUS(fs) == 0, "flood client status %d", fs);
    double dropped =
        tc_metric(19482, "fleetprof_collector_chunks_dropped_total{reason=\"spool_full\"}");
    double shed = tc_metric(19482, "fleetprof_collector_chunks_shed_total{reason=\"uid_spool\"}");
    printf("spool_flood: keep spooled %d chunks (%zu bytes); flood: %d accepted, %d told to "
           "retry; spool_full drops %.0f, uid_spool sheds %.0f\n",
           KEEP, keep_bytes, counts[0], counts[1], dropped, shed);
    /* keep can still spool: it holds less than an even share */
    uint8_t *f;
    size_t len;
    CHECK(tc_frame_make("keep", KEEP, 200, &f, &len) == 0);
    CHECK_EQ(tc_send_acked(keep, f, len, &no), 0);
    free(f);
    close(keep);
    stop(&c);
    int others;
    int kept = spooled(c.spool, "keep", &others);
    printf("spool_flood: in the spool after the flood: keep %d, flood %d\n", kept, others);
    CHECKF(dropped == 0, "%.0f chunks pushed out of the spool by one uid's flood", dropped);
    CHECKF(kept == KEEP + 1, "%d of keep's %d chunks left in the spool", kept, KEEP + 1);
    CHECK(counts[1] > 0 && shed == counts[1]);
    CHECK(others == counts[0]);
    tc_cleanup(&c);
}

static void test_spool_alone(void) {
    tc_collector_t c = {0};
    /* one record in librdkafka at a time: the rest wait in the spool, drops are counted */
    const char *more[] = {"--spool-max=1MiB", "--segment-size=64KiB", "--max-inflight=1", NULL};
    start(&c, 19484, more);
    int fd = tc_connect(c.sock, 1);
    CHECK(fd >= 0);
    uint32_t no = 0;
    int ok = 0;
    size_t sent = 0;
    for (uint64_t seq = 0; sent < 3u << 20; seq++) {
        uint8_t *f;
        size_t len;
        CHECK(tc_frame_make("alone", seq, 2000, &f, &len) == 0);
        ok += tc_send_acked(fd, f, len, &no) == 0;
        sent += len;
        free(f);
    }
    double dropped =
        tc_metric(19484, "fleetprof_collector_chunks_dropped_total{reason=\"spool_full\"}");
    printf("spool_alone: %u chunks sent, %d accepted, %.0f pushed out of the spool\n", no, ok,
           dropped);
    CHECK_EQ((uint32_t)ok, no);
    CHECK(dropped > 0);
    close(fd);
    stop(&c);
    tc_cleanup(&c);
}

static void test_idle_agent(void) {
    tc_collector_t c = {0};
    const char *more[] = {"--idle-timeout=1s", NULL};
    start(&c, 19483, more);
    char out[300], prog[512], e_col[400], e_out[400];
    snprintf(out, sizeof out, "%s/out", c.dir);
    CHECK(mkdir(out, 0755) == 0);
    snprintf(prog, sizeof prog, "%s/tests/fp-work-linked", getenv("FLEETPROF_BUILD"));
    snprintf(e_col, sizeof e_col, "FLEETPROF_COLLECTOR=%s", c.sock);
    snprintf(e_out, sizeof e_out, "FLEETPROF_OUTPUT=%s", out);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        char *const env[] = {e_col, e_out, "FLEETPROF_INTERVAL=2.5", "FLEETPROF_SERVICE=idle",
                             NULL};
        char *const argv[] = {prog, "cpuwall", "6.5", NULL};
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 1);
        execve(prog, argv, env);
        _exit(127);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "fp-work-linked status %d", st);
    int files = 0;
    DIR *d = opendir(out);
    CHECK(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)))
        files += strstr(e->d_name, CM_CHUNK_FILE_SUFFIX) != NULL && e->d_name[0] != '.';
    closedir(d);
    double accepted =
        tc_metric_wait(19483, "fleetprof_collector_chunks_accepted_total", files, 10);
    double idle = tc_metric(19483, "fleetprof_collector_disconnects_total{reason=\"idle\"}");
    printf("idle_agent: %d chunk files, %.0f accepted, %.0f idle disconnects\n", files, accepted,
           idle);
    CHECK(files >= 3);
    CHECK(idle >= 1);
    CHECKF(accepted == files, "%.0f of %d chunks reached the collector", accepted, files);
    stop(&c);
    tc_cleanup(&c);
}

/* The value of header name in h, or NULL. */
static const char *hdr(const col_hdrs_t *h, const char *name) {
    for (int i = 0; i < h->n; i++)
        if (!strcmp(h->name[i], name))
            return h->value[i];
    return NULL;
}

/* A child that waits for a byte on fd (its environment: env), in a new pid namespace if
 * newns (the pid returned is then the grandchild's, pid 1 in its namespace). */
static pid_t waiter(int fd, char *const *env, int newns) {
    int pp[2];
    CHECK(pipe(pp) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        if (newns) {
            if (unshare(CLONE_NEWPID))
                _exit(80);
            pid_t g = fork();
            if (g < 0)
                _exit(81);
            if (g > 0) {
                if (write(pp[1], &g, sizeof g) != (ssize_t)sizeof g)
                    _exit(82);
                waitpid(g, NULL, 0);
                _exit(0);
            }
        } else {
            pid_t me = getpid();
            if (write(pp[1], &me, sizeof me) != (ssize_t)sizeof me)
                _exit(82);
        }
        /* exec something that waits, so that /proc/<pid>/environ is env */
        char arg[32];
        snprintf(arg, sizeof arg, "read -r _ <&%d", fd);
        char *const argv[] = {"/bin/sh", "-c", arg, NULL};
        execve("/bin/sh", argv, env);
        _exit(83);
    }
    pid_t got;
    CHECK(read(pp[0], &got, sizeof got) == (ssize_t)sizeof got);
    close(pp[0]);
    close(pp[1]);
    return got;
}

static void test_peer_identity(void) {
    need_root();
    char uid[37] = "";
    CHECK(col_enrich_pod_uid("0::/kubepods/burstable/pod0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b/"
                             "1234567890abcdef1234567890abcdef1234567890abcdef1234567890abcdef\n",
                             uid, sizeof uid) == 1);
    CHECK(!strcmp(uid, "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"));
    CHECK(col_enrich_pod_uid("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-"
                             "pod0f1e2d3c_4b5a_6978_8a9b_0c1d2e3f4a5c.slice/cri-containerd-ab.scope",
                             uid, sizeof uid) == 1);
    CHECK(!strcmp(uid, "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5c"));
    CHECK(col_enrich_pod_uid("0::/user.slice/pod-not-a-uid\n", uid, sizeof uid) == 0);
    CHECK(col_enrich_pod_uid("0::/kubepods/podXf1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b/", uid,
                             sizeof uid) == 0);
    /* review finding 8: only the pod level under the kubepods root names a pod. A systemd user
     * manager's delegated subtree, or a cgroup made deeper inside a pod, names none */
    CHECK(col_enrich_pod_uid("0::/user.slice/user-1000.slice/user@1000.service/app.slice/"
                             "pod0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b.scope\n", uid,
                             sizeof uid) == 0);
    CHECK(col_enrich_pod_uid("0::/system.slice/kubepods/pod0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b/\n",
                             uid, sizeof uid) == 0);
    CHECK(col_enrich_pod_uid("0::/kubepods/besteffort/x/pod0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b/\n",
                             uid, sizeof uid) == 0);
    CHECK(col_enrich_pod_uid("0::/kubepods/burstable/pod11111111-2222-3333-4444-555555555555/"
                             "c/pod0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b\n", uid, sizeof uid) == 1);
    CHECK(!strcmp(uid, "11111111-2222-3333-4444-555555555555"));
    CHECK(col_enrich_pod_uid("1:name=systemd:/user.slice/pod0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b\n"
                             "0::/kubepods.slice/kubepods-pod11111111_2222_3333_4444_555555555555"
                             ".slice/cri-containerd-ab.scope\n", uid, sizeof uid) == 1);
    CHECK(!strcmp(uid, "11111111-2222-3333-4444-555555555555"));

    char dir[] = "/tmp/fp-col-pods-XXXXXX", path[256], name[160];
    CHECK(mkdtemp(dir) != NULL);
    const char *entries[] = {"other_web-1_11111111-2222-3333-4444-555555555555",
                             "prod_web-0_0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b", NULL};
    for (int i = 0; entries[i]; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, entries[i]);
        CHECK(mkdir(path, 0755) == 0);
    }
    CHECK(col_enrich_pod_name(dir, "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b", name, sizeof name));
    CHECK(!strcmp(name, "prod/web-0"));
    CHECK(!col_enrich_pod_name(dir, "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5c", name, sizeof name));
    /* the cached lookup: one scan for known pods; a new pod found after at most a second */
    uint64_t scans0 = col_enrich_pod_scans();
    CHECK(col_enrich_pod_lookup(dir, "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b", name, sizeof name));
    CHECK(!strcmp(name, "prod/web-0"));
    for (int i = 0; i < 100; i++)
        CHECK(col_enrich_pod_lookup(dir, "11111111-2222-3333-4444-555555555555", name,
                                    sizeof name));
    CHECK(!strcmp(name, "other/web-1"));
    CHECK_EQ(col_enrich_pod_scans() - scans0, 1);
    snprintf(path, sizeof path, "%s/new_api-2_0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5c", dir);
    CHECK(mkdir(path, 0755) == 0);
    for (int i = 0; i < 100; i++) /* misses within the second: no rescan */
        CHECK(!col_enrich_pod_lookup(dir, "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5c", name,
                                     sizeof name));
    CHECK_EQ(col_enrich_pod_scans() - scans0, 1);
    usleep(1050000);
    CHECK(col_enrich_pod_lookup(dir, "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5c", name, sizeof name));
    CHECK(!strcmp(name, "new/api-2"));
    CHECK_EQ(col_enrich_pod_scans() - scans0, 2);
    /* the collector's own POD_NAME labels its peers only when configured as a sidecar */
    col_config_t ncfg;
    memset(&ncfg, 0, sizeof ncfg);
    char nid[] = "cid";
    ncfg.id = nid;
    setenv("POD_NAMESPACE", "fleetprof", 1);
    setenv("POD_NAME", "collector-x1", 1);
    col_node_ident_t own;
    char nerr[256];
    CHECK(col_enrich_node(&ncfg, &own, nerr, sizeof nerr) == 0);
    CHECKF(own.pod[0] == 0, "a DaemonSet labels its peers with its own pod: %s", own.pod);
    ncfg.sidecar = 1;
    CHECK(col_enrich_node(&ncfg, &own, nerr, sizeof nerr) == 0);
    CHECK(!strcmp(own.pod, "fleetprof/collector-x1"));
    unsetenv("POD_NAMESPACE");
    unsetenv("POD_NAME");

    /* a peer that says who it is in its environment */
    int go[2];
    CHECK(pipe(go) == 0);
    char *const spoof_env[] = {"POD_NAMESPACE=evil", "POD_NAME=spoofed", "PATH=/bin", NULL};
    pid_t spoof = waiter(go[0], spoof_env, 0);
    pid_t inner = waiter(go[0], spoof_env, 1);
    usleep(200000); /* both exec'd */
    col_node_ident_t node;
    memset(&node, 0, sizeof node);
    snprintf(node.host, sizeof node.host, "h");
    node.pods_dir = dir;
    col_hdrs_t h;
    col_enrich_peer(&node, spoof, 0, &h);
    const char *pod = hdr(&h, CM_HDR_POD), *nspid = hdr(&h, CM_HDR_PEER_NSPID);
    printf("peer_identity: peer with POD_NAME=spoofed in its environment: fp-pod=%s "
           "fp-peer-nspid=%s\n", pod ? pod : "(none)", nspid ? nspid : "(none)");
    CHECKF(!pod, "the pod came from the peer's environment: %s", pod);
    CHECK(!nspid); /* same namespace as the collector */
    snprintf(node.pod, sizeof node.pod, "sidecar-ns/app-7");
    col_enrich_peer(&node, spoof, 0, &h);
    pod = hdr(&h, CM_HDR_POD);
    CHECK(pod && !strcmp(pod, "sidecar-ns/app-7"));
    col_enrich_peer(&node, inner, 0, &h);
    nspid = hdr(&h, CM_HDR_PEER_NSPID);
    printf("peer_identity: peer in its own pid namespace (pid %d here): fp-peer-nspid=%s\n",
           (int)inner, nspid ? nspid : "(none)");
    CHECK(nspid && !strcmp(nspid, "1"));
    CHECK(write(go[1], "x\nx\n", 4) == 4);
    close(go[1]);
    waitpid(spoof, NULL, 0);
    while (waitpid(-1, NULL, 0) > 0)
        ;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* Review finding 6: the limits are per (uid, container), not per uid: in a DaemonSet most pods
 * run as root, and one budget for all of root locked the others' agents out. Two root clients
 * in two containers (fresh cgroups in the v1 pids hierarchy named by a 64-hex id, as a
 * runtime names them) with uid-max-clients 4: the first opens 10 (4 admitted), the second's 4
 * are all admitted and deliver. Before, the second's were all refused. */
static void container_client(const char *cg, const char *sock, int n, int rd, int wr,
                             const char *svc) {
    char path[256];
    snprintf(path, sizeof path, "%s/cgroup.procs", cg);
    FILE *f = fopen(path, "w");
    if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f))
        _exit(93);
    /* Only the 4 admitted connections send the hello: the others are refused when accepted,
     * and a hello written after that close fails (EPIPE), which would make open < n. */
    int fds[16], open = 0;
    for (int i = 0; i < n && i < 16; i++)
        if ((fds[i] = tc_connect(sock, i < 4)) >= 0)
            open++;
    /* the last connection sends a chunk: 0 when admitted (the first 4 only for the flood) */
    uint8_t *fr;
    size_t len;
    uint32_t no = 0;
    int32_t st =
        tc_frame_make(svc, 0, 500, &fr, &len) ? 99997 : tc_send_acked(fds[3], fr, len, &no);
    if (write(wr, &st, sizeof st) != (ssize_t)sizeof st)
        _exit(91);
    char b;
    if (read(rd, &b, 1) < 0)
        _exit(92);
    _exit(open == n ? 0 : 94);
}

static void test_root_containers(void) {
    need_root();
    char cg[2][160];
    for (int i = 0; i < 2; i++) {
        snprintf(cg[i], sizeof cg[i], "/sys/fs/cgroup/pids/fptest-%d-%064x", (int)getpid(), i + 1);
        CHECKF(mkdir(cg[i], 0755) == 0, "cannot make the cgroup %s: %s (needs a writable v1 "
               "pids hierarchy)", cg[i], strerror(errno));
    }
    tc_collector_t c = {0};
    const char *more[] = {"--uid-max-clients=4", NULL};
    start(&c, 19486, more);
    int done[2], res[2];
    CHECK(pipe(done) == 0 && pipe(res) == 0);
    pid_t a = fork();
    if (a == 0)
        container_client(cg[0], c.sock, 10, done[0], res[1], "svc-a");
    int32_t st_a = -1, st_b = -1;
    CHECK(read(res[0], &st_a, sizeof st_a) == (ssize_t)sizeof st_a);
    CHECK(tc_metric_wait_eq(19486, "fleetprof_collector_disconnects_total{reason=\"uid_too_many\"}",
                            6, 10) == 6);
    pid_t b = fork();
    if (b == 0)
        container_client(cg[1], c.sock, 4, done[0], res[1], "svc-b");
    CHECK(read(res[0], &st_b, sizeof st_b) == (ssize_t)sizeof st_b);
    double connected = tc_metric_wait_eq(19486, "fleetprof_collector_connected_agents", 8, 10);
    double refused =
        tc_metric(19486, "fleetprof_collector_disconnects_total{reason=\"uid_too_many\"}");
    double budgets = tc_metric(19486, "fleetprof_collector_uid_budgets");
    printf("root_containers: container A's 4th connection ack %d, B's %d; connected %.0f, "
           "refused %.0f, budgets %.0f\n", (int)st_a, (int)st_b, connected, refused, budgets);
    CHECK(write(done[1], "xx", 2) == 2);
    int sa, sb;
    CHECK(waitpid(a, &sa, 0) == a && waitpid(b, &sb, 0) == b);
    for (int i = 0; i < 2; i++)
        rmdir(cg[i]);
    CHECKF(st_a == 0 && st_b == 0, "a root agent in its own container could not deliver");
    CHECK_EQ(connected, 8);
    CHECK_EQ(refused, 6);
    CHECK(budgets >= 2);
    CHECK(WIFEXITED(sa) && WEXITSTATUS(sa) == 0 && WIFEXITED(sb) && WEXITSTATUS(sb) == 0);
    stop(&c);
    tc_cleanup(&c);
}

static const tr_test_t tests[] = {{"uid_connections", test_uid_connections},
                                  {"uid_rate", test_uid_rate},
                                  {"idle_after_hello", test_idle_after_hello},
                                  {"spool_flood", test_spool_flood},
                                  {"spool_alone", test_spool_alone},
                                  {"idle_agent", test_idle_agent},
                                  {"peer_identity", test_peer_identity},
                                  {"root_containers", test_root_containers},
                                  {0}};
TR_MAIN(tests)
