/* No silent fleet-wide loss (issue 18): agents under another uid than the collector.
 *
 *   other_uid       a service running as nobody, with default collector settings (socket-mode
 *                   0666), gets its chunks accepted: the collector's metrics count them and
 *                   its log names uid 65534
 *   refused         the same service against a socket that shuts it out (socket-mode 0600):
 *                   exactly one stderr line saying why, and the chunks it could not hand over
 *                   are counted as chunk_queue_full drops in the chunk headers it writes to
 *                   FLEETPROF_OUTPUT
 *   output_denied   FLEETPROF_OUTPUT a directory its uid cannot write: exactly one line
 *   setuid_output   a process that drops from root to nobody (nginx's workers) after its first
 *                   chunks were written: one line once the directory refuses it
 *
 * Programs run as nobody with `setpriv ... -- env LD_PRELOAD=agent prog`: the agent is not
 * preloaded into setpriv itself, which changes credentials with raw capset on its main thread
 * only (PR_SET_KEEPCAPS), so glibc's all-threads setresgid aborts in any multi-threaded
 * process, with or without the agent.
 *   socket_group    socket-group: the socket gets the group; an unknown group is a clear
 *                   start-up error
 *   fold_group_by   fleetprof fold --group-by io-target|pid|host on chunk files of a program
 *                   doing I/O to two files (every call an event) and one with one peer: one
 *                   root frame per file
 *                   and per peer (plus the program's own server side, a second peer), the peer's events covering the recvs the program timed slow,
 *                   per-pid and per-host splits summing to the ungrouped total
 *   aggregator_bind the aggregator serves on 127.0.0.1 by default, refuses a non-loopback
 *                   http-addr without api-token, and starts with one
 *
 * Needs root (to run programs as nobody with setpriv): otherwise each test fails saying so. */
#include "agent-common.h"

#include <grp.h>
#include <pwd.h>

#define NOBODY 65534
#define HTTP_PORT "19863"
#define AG_QUEUE_MAX_T 16 /* agent/src/internal.h AG_QUEUE_MAX: unacked chunks kept */

static UNUSED char envbuf[4300];

static void need_root(void) {
    CHECKF(geteuid() == 0, "these tests run programs as uid %d with setpriv: run as root",
           NOBODY);
}

/* A directory nobody can enter (and write, if writable). */
static char *mkdir_for(int nobody_writes) {
    char *d = mkout();
    CHECK(chmod(d, 0755) == 0);
    if (nobody_writes)
        CHECK(chown(d, NOBODY, NOBODY) == 0);
    return d;
}

/* Runs fp-work ARGS as nobody with env; stderr into errbuf. Returns the wait status. */
static int run_as(int nobody, const char *name, const char *const *env, const char *a1,
                  const char *a2, char *errbuf, size_t errsize) {
    char prog[4096], pre[4300];
    prog_path(name, prog, sizeof prog);
    const char *setpriv[] = {"/usr/bin/setpriv", "--reuid=65534", "--regid=65534",
                             "--clear-groups", "--", "/usr/bin/env", preload(pre, sizeof pre),
                             prog, a1, a2, NULL};
    const char *direct[] = {prog, a1, a2, NULL};
    const char *const *argv = nobody ? setpriv : direct;
    const char *full[16];
    int n = 0;
    if (!nobody)
        full[n++] = pre;
    for (int i = 0; env[i] && n < 14; i++)
        full[n++] = env[i];
    full[n] = NULL;
    char errfile[] = "/tmp/fp-fleet-err-XXXXXX";
    int efd = mkstemp(errfile);
    CHECK(efd >= 0);
    int saved = dup(2);
    dup2(efd, 2);
    char out[4096];
    int st = run(full, argv, 60, out, sizeof out);
    dup2(saved, 2);
    close(saved);
    lseek(efd, 0, SEEK_SET);
    ssize_t r = read(efd, errbuf, errsize - 1);
    errbuf[r > 0 ? r : 0] = '\0';
    close(efd);
    unlink(errfile);
    return st;
}

static int run_nobody(const char *const *env, const char *mode, const char *secs, char *errbuf,
                      size_t errsize) {
    return run_as(1, "fp-work", env, mode, secs, errbuf, errsize);
}

static int lines(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

typedef struct {
    proc_t pr;
    char dir[64], sock[128], log[128];
    int log_fd;
} collector_t;

/* Starts fleetprof-collector (as root, the current user) with its socket in a directory
 * everyone may enter; extra is one more flag or NULL. No broker: the chunks wait in the spool,
 * which is all these tests need (accepted = spooled and acked). */
static collector_t col_start(const char *extra) {
    collector_t c;
    char *d = mkdir_for(0);
    snprintf(c.dir, sizeof c.dir, "%s", d);
    free(d);
    snprintf(c.sock, sizeof c.sock, "%s/c.sock", c.dir);
    snprintf(c.log, sizeof c.log, "%s/collector.log", c.dir);
    char bin[4096], a_sock[200], a_spool[200];
    snprintf(bin, sizeof bin, "%s/collector/fleetprof-collector", bdir());
    snprintf(a_sock, sizeof a_sock, "--socket=%s", c.sock);
    snprintf(a_spool, sizeof a_spool, "--spool-dir=%s/spool", c.dir);
    const char *argv[] = {bin, a_sock, a_spool, "--brokers=127.0.0.1:19861",
                          "--http-listen=127.0.0.1:" HTTP_PORT, "--drain-timeout=200ms", extra,
                          NULL};
    c.log_fd = open(c.log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(c.log_fd >= 0);
    int saved = dup(2);
    dup2(c.log_fd, 2);
    c.pr = start(NULL, argv);
    dup2(saved, 2);
    close(saved);
    for (int i = 0; i < 500; i++) {
        struct stat sb;
        if (stat(c.sock, &sb) == 0)
            return c;
        CHECK(waitpid(c.pr.pid, NULL, WNOHANG) == 0);
        poll(NULL, 0, 10);
    }
    CHECKF(0, "collector did not create %s", c.sock);
    return c;
}

static uint64_t col_metric(const char *name) {
    char cmd[256], buf[65536];
    snprintf(cmd, sizeof cmd, "curl -s http://127.0.0.1:%s/metrics", HTTP_PORT);
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    pclose(f);
    char key[128];
    snprintf(key, sizeof key, "\n%s ", name);
    char *p = strstr(buf, key);
    CHECKF(p != NULL, "metric %s missing:\n%s", name, buf);
    return strtoull(p + strlen(key), NULL, 10);
}

/* Whether the spool holds a record whose peer-uid Kafka header (CM_HDR_PEER_UID) is uid:
 * records carry (u8 len, name, u8 len, value) headers, so the printable runs are the name,
 * then the value (possibly followed by printable bytes of what comes next). */
static int spool_has_uid(const collector_t *c, int uid) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cat %s/spool/* | tr -c '[:print:]' '\\n' | grep -A1 -x '%s' | grep -q '^%d'",
             c->dir, CM_HDR_PEER_UID, uid);
    return system(cmd) == 0;
}

static void col_stop(collector_t *c, char *log, size_t size) {
    kill(c->pr.pid, SIGTERM);
    finish(c->pr, 30, NULL, 0);
    close(c->log_fd);
    int fd = open(c->log, O_RDONLY);
    ssize_t r = fd >= 0 ? read(fd, log, size - 1) : 0;
    log[r > 0 ? r : 0] = '\0';
    if (fd >= 0)
        close(fd);
    rmrf(c->dir);
}

static void test_other_uid(void) {
    need_root();
    collector_t c = col_start(NULL);
    struct stat sb;
    CHECK(stat(c.sock, &sb) == 0);
    CHECKF((sb.st_mode & 0777) == 0666, "default socket mode %o, want 0666", sb.st_mode & 0777);
    char coll[200], err[8192];
    snprintf(coll, sizeof coll, "FLEETPROF_COLLECTOR=%s", c.sock);
    const char *env[] = {coll, "FLEETPROF_SERVICE=uidsvc", "FLEETPROF_INTERVAL=200ms", NULL};
    int st = run_nobody(env, "cpuwall", "1", err, sizeof err);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d, stderr:\n%s", st, err);
    CHECKF(lines(err) == 0, "the agent complained:\n%s", err);
    uint64_t acc = col_metric("fleetprof_collector_chunks_accepted_total");
    int has_uid = spool_has_uid(&c, NOBODY);
    char log[65536];
    col_stop(&c, log, sizeof log);
    printf("other_uid: chunks accepted from uid %d: %llu\n", NOBODY, (unsigned long long)acc);
    CHECKF(acc >= 3, "chunks accepted %llu (1 s at 200 ms intervals: ~5)", (unsigned long long)acc);
    CHECKF(has_uid, "no spooled chunk carries %s=%d", CM_HDR_PEER_UID, NOBODY);
}

static void test_refused(void) {
    need_root();
    collector_t c = col_start("--socket-mode=384"); /* 0600: only the collector's uid */
    char *out = mkdir_for(1);
    char coll[200], outenv[4200], err[8192];
    snprintf(coll, sizeof coll, "FLEETPROF_COLLECTOR=%s", c.sock);
    snprintf(outenv, sizeof outenv, "FLEETPROF_OUTPUT=%s", out);
    const char *env[] = {coll, outenv, "FLEETPROF_SERVICE=refused", "FLEETPROF_INTERVAL=100ms",
                         NULL};
    /* 3 s at 100 ms: ~30 chunks, the queue holds 16: the rest are dropped and counted. */
    int st = run_nobody(env, "cpuwall", "3", err, sizeof err);
    uint64_t acc = col_metric("fleetprof_collector_chunks_accepted_total");
    char log[65536];
    col_stop(&c, log, sizeof log);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d, stderr:\n%s", st, err);
    printf("refused: stderr:\n%s", err);
    CHECKF(lines(err) == 1, "want exactly one stderr line, got:\n%s", err);
    CHECKF(strstr(err, "cannot reach the collector") && strstr(err, "Permission denied") &&
               strstr(err, c.sock) && strstr(err, "uid=65534") && strstr(err, "socket-mode"),
           "the line must say what, why, where, who and the fix:\n%s", err);
    CHECK(acc == 0);
    chunks_t *cs = load(out);
    uint64_t dropped = drops(cs, CM_DROP_CHUNK_QUEUE_FULL);
    printf("refused: %d chunk files, chunk_queue_full drops counted: %llu\n", cs->n,
           (unsigned long long)dropped);
    /* Every chunk beyond the 16 the queue holds was dropped; the last file's header cannot
     * count drops that happened after it was built, so: at least files - 16 - 1. */
    CHECKF(cs->n >= 20, "only %d chunk files", cs->n);
    CHECKF(dropped >= (uint64_t)(cs->n - AG_QUEUE_MAX_T - 1) && dropped <= (uint64_t)cs->n,
           "drops %llu for %d chunks", (unsigned long long)dropped, cs->n);
    free_chunks(cs);
    rmrf(out);
}

static void test_output_denied(void) {
    need_root();
    char *out = mkdir_for(0); /* root's, 0755: nobody cannot write */
    char outenv[4200], err[8192];
    snprintf(outenv, sizeof outenv, "FLEETPROF_OUTPUT=%s", out);
    const char *env[] = {outenv, "FLEETPROF_SERVICE=denied", "FLEETPROF_INTERVAL=100ms", NULL};
    int st = run_nobody(env, "cpuwall", "1", err, sizeof err);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d, stderr:\n%s", st, err);
    printf("output_denied: stderr:\n%s", err);
    CHECKF(lines(err) == 1, "want exactly one stderr line (~10 chunks failed), got:\n%s", err);
    CHECKF(strstr(err, "cannot write chunk files under FLEETPROF_OUTPUT") &&
               strstr(err, "Permission denied") && strstr(err, out) && strstr(err, "uid=65534"),
           "line:\n%s", err);
    rmrf(out);
}

static void test_setuid_output(void) {
    need_root();
    char *out = mkdir_for(0); /* root's, 0755: writable before the switch, not after */
    char outenv[4200], err[8192];
    snprintf(outenv, sizeof outenv, "FLEETPROF_OUTPUT=%s", out);
    const char *env[] = {outenv, "FLEETPROF_SERVICE=worker", "FLEETPROF_INTERVAL=100ms", NULL};
    int st = run_as(0, "setuid_work", env, "0.6", "1", err, sizeof err);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d, stderr:\n%s", st, err);
    printf("setuid_output: stderr:\n%s", err);
    chunks_t *cs = load(out);
    printf("setuid_output: %d chunk files written before the switch\n", cs->n);
    CHECKF(cs->n >= 3, "only %d chunk files before the switch", cs->n);
    free_chunks(cs);
    CHECKF(lines(err) == 1, "want exactly one stderr line, got:\n%s", err);
    CHECKF(strstr(err, "cannot write chunk files under FLEETPROF_OUTPUT") &&
               strstr(err, "Permission denied") && strstr(err, "uid=65534"),
           "line:\n%s", err);
    rmrf(out);
}

static void test_socket_group(void) {
    need_root();
    struct group *gr = getgrnam("nogroup");
    CHECK(gr != NULL);
    collector_t c = col_start("--socket-group=nogroup");
    struct stat sb;
    CHECK(stat(c.sock, &sb) == 0);
    CHECK(sb.st_gid == gr->gr_gid);
    char log[65536];
    col_stop(&c, log, sizeof log);
    /* An unknown group: the collector refuses to start and says which. */
    char bin[4096], err[8192];
    snprintf(bin, sizeof bin, "%s/collector/fleetprof-collector", bdir());
    char *d = mkdir_for(0), a_sock[200], a_spool[200];
    snprintf(a_sock, sizeof a_sock, "--socket=%s/c.sock", d);
    snprintf(a_spool, sizeof a_spool, "--spool-dir=%s/spool", d);
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s %s --http-listen=off --socket-group=no-such-group-fp 2>&1",
             bin, a_sock, a_spool);
    FILE *f = popen(cmd, "r");
    size_t n = fread(err, 1, sizeof err - 1, f);
    err[n] = '\0';
    int st = pclose(f);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) != 0, "status %d", st);
    CHECKF(strstr(err, "socket-group 'no-such-group-fp' is not a group"), "%s", err);
    rmrf(d);
}

/* Runs the aggregator for up to 8 s (or until it prints "http on"), returns its exit status
 * (-1: still running, killed) and its stderr. */
static int run_aggregator(const char *extra1, const char *extra2, char *log, size_t size) {
    char bin[4096], store[4200], cmd[9000];
    snprintf(bin, sizeof bin, "%s/aggregator/fleetprof-aggregator", bdir());
    char *d = mkout();
    snprintf(store, sizeof store, "--store-dir=%s", d);
    snprintf(cmd, sizeof cmd,
             "timeout -s KILL 8 sh -c 'exec %s --brokers=127.0.0.1:19866 --http-port=0 %s %s %s "
             "2>&1 | { grep -m1 -e \"http on\" -e http-addr; }'; echo rc=$?",
             bin, store, extra1 ? extra1 : "", extra2 ? extra2 : "");
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    size_t n = fread(log, 1, size - 1, f);
    log[n] = '\0';
    pclose(f);
    rmrf(d);
    return 0;
}

static void test_aggregator_bind(void) {
    char log[8192];
    run_aggregator(NULL, NULL, log, sizeof log);
    printf("default: %s", log);
    CHECKF(strstr(log, "http on 127.0.0.1:") != NULL, "default bind: %s", log);
    run_aggregator("--http-addr=0.0.0.0", NULL, log, sizeof log);
    printf("0.0.0.0 without token: %s", log);
    CHECKF(strstr(log, "http-addr '0.0.0.0' is not loopback and api-token is empty") != NULL,
           "%s", log);
    run_aggregator("--http-addr=0.0.0.0", "--api-token=s3cret", log, sizeof log);
    printf("0.0.0.0 with token: %s", log);
    CHECKF(strstr(log, "http on 0.0.0.0:") != NULL, "%s", log);
    run_aggregator("--http-addr=0.0.0.0", "--api-no-token=true", log, sizeof log);
    CHECKF(strstr(log, "http on 0.0.0.0:") != NULL, "%s", log);
}

typedef struct {
    char name[512];
    double value;
} group_t;

/* Runs fleetprof fold ARGS DIR and sums the values per root frame. Returns the group count. */
static int fold_groups(const char *args, const char *dir, group_t *g, int max) {
    char cmd[8192], line[65536];
    snprintf(cmd, sizeof cmd, "%s/cli/fleetprof fold %s %s", bdir(), args, dir);
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        char *sp = strrchr(line, ' ');
        CHECKF(sp != NULL, "fold line: %s", line);
        double v = strtod(sp + 1, NULL);
        *sp = '\0';
        size_t rl = strcspn(line, ";");
        line[rl] = '\0';
        int k = 0;
        while (k < n && strcmp(g[k].name, line))
            k++;
        if (k == n) {
            CHECK(n < max);
            snprintf(g[n].name, sizeof g[n].name, "%.500s", line);
            g[n++].value = 0;
        }
        g[k].value += v;
    }
    CHECK(pclose(f) == 0);
    return n;
}

static double group_value(const group_t *g, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (!strcmp(g[k].name, name))
            return g[k].value;
    return -1;
}

static void test_fold_group_by(void) {
    char *dir = mkout(), prog[4096], pre[4300], outenv[4200], outs[3][4096];
    prog_path("io_work", prog, sizeof prog);
    snprintf(outenv, sizeof outenv, "FLEETPROF_OUTPUT=%s", dir);
    const char *modes[3] = {"file", "file", "socket"};
    for (int i = 0; i < 3; i++) {
        /* The file runs' fsyncs take ~1 ms here, rarely the default 10 ms threshold; below it a
         * call is only summed per stack, with no target (agent/README.md), so a run without one
         * slow fsync had no path group (1 run in 2). Threshold and floor 0 there: every call is
         * an event with its path. The socket run keeps the defaults (its slow_recvs check). */
        const char *env[] = {preload(pre, sizeof pre), outenv, "FLEETPROF_SERVICE=iosvc",
                             "FLEETPROF_IO_THRESHOLD=0", "FLEETPROF_IO_FLOOR=0", NULL};
        if (i == 2)
            env[3] = NULL;
        const char *argv[] = {prog, modes[i], "1.5", NULL};
        CHECK(run(env, argv, 60, outs[i], sizeof outs[i]) == 0);
    }
    char want[3][600];
    for (int i = 0; i < 3; i++) {
        const char *key = i < 2 ? "path=" : "peer=";
        const char *p = strstr(outs[i], key);
        CHECKF(p != NULL, "%s", outs[i]);
        snprintf(want[i], sizeof want[i], "[io-target=%.*s]", (int)strcspn(p + 5, "\n"), p + 5);
    }
    group_t g[64];
    int n = fold_groups("--type io --group-by io-target", dir, g, 64);
    double total = 0;
    for (int k = 0; k < n; k++) {
        printf("io-target group %s: %.0f ns\n", g[k].name, g[k].value);
        total += g[k].value;
        /* also the socket program's server side: its sends go to the client's address */
        int known = !strcmp(g[k].name, "[io-target=unknown]") ||
                    !strncmp(g[k].name, "[io-target=127.0.0.1:", 21);
        for (int i = 0; i < 3; i++)
            known |= !strcmp(g[k].name, want[i]);
        CHECKF(known, "unexpected group %s", g[k].name);
    }
    for (int i = 0; i < 3; i++)
        CHECKF(group_value(g, n, want[i]) > 0, "no I/O time on %s", want[i]);
    /* every recv the program timed >= 10 ms is an event on the peer (test-agent-io's bound) */
    n = fold_groups("--type io --count --group-by io-target", dir, g, 64);
    double peer = group_value(g, n, want[2]);
    uint64_t slow = out_u64(outs[2], "slow_recvs=");
    printf("peer %s: %.0f events, program timed %llu slow recvs\n", want[2], peer,
           (unsigned long long)slow);
    CHECKF(peer + (double)slow / 50 + 1 >= (double)slow, "%.0f events for %llu slow recvs", peer,
           (unsigned long long)slow);
    /* per pid: the three processes; per host: this one; both sum to the same total */
    n = fold_groups("--type io --group-by pid", dir, g, 64);
    double sum = 0;
    for (int k = 0; k < n; k++)
        sum += g[k].value;
    CHECKF(n == 3, "%d pid groups", n);
    CHECKF(fabs(sum - total) <= 1e-6 * total, "pid split %.0f vs %.0f", sum, total);
    char host[256], hname[300];
    CHECK(gethostname(host, sizeof host) == 0);
    snprintf(hname, sizeof hname, "[host=%s]", host);
    n = fold_groups("--type io --group-by host", dir, g, 64);
    CHECKF(n == 1 && !strcmp(g[0].name, hname), "host groups: %d, %s", n, g[0].name);
    CHECKF(fabs(g[0].value - total) <= 1e-6 * total, "host %.0f vs %.0f", g[0].value, total);
    /* every call of the file runs was an event with its path: none of file_site is unknown */
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s/cli/fleetprof fold --type io --group-by io-target %s | grep -q "
             "'^\\[io-target=unknown\\].*;file_site;'", bdir(), dir);
    CHECKF(system(cmd) != 0, "file_site I/O without a target in %s", dir);
    /* a dimension the type does not have is a usage error */
    snprintf(cmd, sizeof cmd, "%s/cli/fleetprof fold --group-by io-target %s 2>&1 | grep -q "
             "'needs --type io'", bdir(), dir);
    CHECK(system(cmd) == 0);
    rmrf(dir);
}

static const tr_test_t tests[] = {{"other_uid", test_other_uid},
                                  {"refused", test_refused},
                                  {"output_denied", test_output_denied},
                                  {"setuid_output", test_setuid_output},
                                  {"socket_group", test_socket_group},
                                  {"fold_group_by", test_fold_group_by},
                                  {"aggregator_bind", test_aggregator_bind},
                                  {0}};
TR_MAIN(tests)
