/* Fork/exec cost of the agent (issue 13): posix_spawn of a trivial program, waited for, with
 * and without libfleetprof.so preloaded in the child, in one run.
 *
 *   bench-spawn [--rounds R] [--batch N] [--prog PATH] [--agent PATH] [--base PATH]...
 *               [--env VAR=VALUE]...   (added to every mode with an agent)
 *
 * Modes (interleaved round by round, so that the machine's load hits each alike):
 *   plain     no agent
 *   up        agent; a collector that accepts, reads every frame and acks it (in this
 *             process: the agent side is measured, not Kafka)
 *   down      agent; FLEETPROF_COLLECTOR names a socket path that does not exist
 *   stopped   agent; a listening socket nobody accepts on (what a SIGSTOPped collector
 *             looks like from the agent: connect succeeds until the backlog is full, no ack
 *             ever comes back)
 *   none      agent; FLEETPROF_COLLECTOR=none (files only, FLEETPROF_OUTPUT unset)
 *   off       agent loaded with FLEETPROF_ENABLED=0: the cost of loading the library alone
 *   base1..4  (with --base SO[@VAR=VALUE], up to 4 times) other builds of the agent (or the
 *             same with one more variable), collector down: before/after a change in one run
 * Each round does one batch of N spawns per mode; a batch's figure is its mean ms per spawn
 * (posix_spawn to waitpid). Reported per mode: the median over rounds, its difference from
 * plain and the ratio; then the paired difference (each round's batch minus the same round's
 * plain batch, so that load which comes and goes hits both) as its median with a
 * distribution-free 95% confidence interval (order statistics of the binomial(n, 1/2) sign
 * test), for wall and CPU. The benchmark process itself never has the agent.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

enum { M_PLAIN, M_UP, M_DOWN, M_STOPPED, M_NONE, M_OFF, M_BASE, M_COUNT = M_BASE + 4 };
static const char *g_names[M_COUNT] = {"plain", "up",    "down",  "stopped", "none",
                                       "off",   "base1", "base2", "base3",   "base4"};

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int listen_at(const char *path, int backlog) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    unlink(path);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, backlog) != 0) {
        perror(path);
        exit(2);
    }
    return fd;
}

/* The "up" collector: hello (8 bytes), then [u32 len][frame] messages, each acked in order
 * with (message number, status 0) as cm/wire.h specifies. */
#define MAXC 256
typedef struct {
    int fd;
    uint32_t need, got, msgs;
    int in_frame, hello;
    uint8_t hdr[8];
} conn_t;

static void *collector_up(void *arg) {
    int lfd = *(int *)arg;
    static conn_t c[MAXC];
    int n = 0;
    static uint8_t buf[1 << 16];
    for (;;) {
        struct pollfd p[MAXC + 1];
        p[0] = (struct pollfd){lfd, POLLIN, 0};
        for (int i = 0; i < n; i++)
            p[i + 1] = (struct pollfd){c[i].fd, POLLIN, 0};
        if (poll(p, (nfds_t)n + 1, -1) < 0)
            continue;
        if ((p[0].revents & POLLIN) && n < MAXC) {
            int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
            if (fd >= 0)
                c[n++] = (conn_t){.fd = fd, .need = 8};
        }
        for (int i = n - 1; i >= 0; i--) {
            if (!(p[i + 1].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t r = read(c[i].fd, buf, sizeof buf);
            if (r <= 0) {
                close(c[i].fd);
                c[i] = c[--n];
                continue;
            }
            for (ssize_t off = 0; off < r;) {
                uint32_t take = c[i].need - c[i].got;
                if ((ssize_t)take > r - off)
                    take = (uint32_t)(r - off);
                if (!c[i].in_frame && c[i].got + take <= sizeof c[i].hdr)
                    memcpy(c[i].hdr + c[i].got, buf + off, take);
                c[i].got += take;
                off += take;
                if (c[i].got < c[i].need)
                    continue;
                c[i].got = 0;
                if (!c[i].hello) { /* hello done: a length prefix next */
                    c[i].hello = 1;
                    c[i].need = 4;
                } else if (!c[i].in_frame) {
                    c[i].need = (uint32_t)c[i].hdr[0] | (uint32_t)c[i].hdr[1] << 8 |
                                (uint32_t)c[i].hdr[2] << 16 | (uint32_t)c[i].hdr[3] << 24;
                    c[i].in_frame = 1;
                    if (!c[i].need) {
                        c[i].in_frame = 0;
                        c[i].need = 4;
                    }
                } else {
                    uint32_t no = ++c[i].msgs;
                    uint8_t ack[8] = {(uint8_t)no, (uint8_t)(no >> 8), (uint8_t)(no >> 16),
                                      (uint8_t)(no >> 24), 0, 0, 0, 0};
                    ssize_t w = send(c[i].fd, ack, sizeof ack, MSG_NOSIGNAL | MSG_DONTWAIT);
                    (void)w;
                    c[i].in_frame = 0;
                    c[i].need = 4;
                }
            }
        }
    }
    return NULL;
}

/* Keeps a "stopped" collector's backlog from filling (a full backlog makes connect fail with
 * EAGAIN, which is the "down" case again): accepted connections are held, never read. */
static void *collector_stopped(void *arg) {
    int lfd = *(int *)arg;
    static int held[256];
    unsigned k = 0;
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EINTR && errno != ECONNABORTED)
                break;
            continue;
        }
        /* held open and never read: no ack ever comes back; the oldest of 256 is let go */
        if (held[k % 256] > 0)
            close(held[k % 256]);
        held[k++ % 256] = fd;
    }
    return NULL;
}

static const char *g_extra[16];
static int g_nextra;

static char **make_env(const char *agent, const char *collector, int off) {
    size_t n = 0;
    while (environ[n])
        n++;
    char **e = calloc(n + 5 + (size_t)g_nextra, sizeof *e);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "LD_PRELOAD=", 11) && strncmp(environ[i], "FLEETPROF_", 10))
            e[k++] = environ[i];
    if (agent) {
        char *v;
        if (asprintf(&v, "LD_PRELOAD=%s", agent) < 0 ||
            asprintf(&e[k + 1], "FLEETPROF_COLLECTOR=%s", collector) < 0)
            exit(2);
        e[k++] = v;
        k++;
        if (off)
            e[k++] = "FLEETPROF_ENABLED=0";
        for (int i = 0; i < g_nextra; i++)
            e[k++] = (char *)g_extra[i];
    }
    e[k] = NULL;
    return e;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of n paired differences and its 95% interval [d(k), d(n-1-k)] (0-based, sorted):
 * the largest k with P(Binomial(n, 1/2) <= k) <= 0.025, so that the interval covers the
 * median with at least 95% probability whatever the distribution. k = -1 (n < 6): none. */
static void paired(const double *x, const double *base, int n, double *med, double *lo,
                   double *hi) {
    double *d = malloc((size_t)n * sizeof *d);
    for (int i = 0; i < n; i++)
        d[i] = x[i] - base[i];
    qsort(d, (size_t)n, sizeof *d, cmp_d);
    *med = n % 2 ? d[n / 2] : (d[n / 2 - 1] + d[n / 2]) / 2;
    double p = 1, cum = 0; /* P(X = j) for j = 0.., as n choose j / 2^n */
    for (int j = 0; j < n; j++)
        p /= 2;
    int k = -1;
    for (int j = 0; j < n; j++) {
        cum += p;
        if (cum > 0.025)
            break;
        k = j;
        p = p * (double)(n - j) / (double)(j + 1);
    }
    *lo = k >= 0 ? d[k] : d[0];
    *hi = k >= 0 ? d[n - 1 - k] : d[n - 1];
    free(d);
}

int main(int argc, char **argv) {
    int rounds = 15, batch = 40;
    const char *prog = "/bin/true";
    char agent[4096];
    const char *base[4];
    int nbase = 0;
    snprintf(agent, sizeof agent, "%s", "");
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc)
            batch = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--prog") && i + 1 < argc)
            prog = argv[++i];
        else if (!strcmp(argv[i], "--agent") && i + 1 < argc)
            snprintf(agent, sizeof agent, "%s", argv[++i]);
        else if (!strcmp(argv[i], "--base") && i + 1 < argc && nbase < 4)
            base[nbase++] = argv[++i];
        else if (!strcmp(argv[i], "--env") && i + 1 < argc && g_nextra < 16)
            g_extra[g_nextra++] = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--rounds R] [--batch N] [--prog PATH] [--agent SO] "
                            "[--base SO] [--env VAR=VALUE]...\n",
                    argv[0]);
            return 2;
        }
    }
    if (!agent[0]) { /* next to this binary: build/bench/ -> build/agent/ */
        char self[2048];
        ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
        if (l <= 0)
            return 2;
        self[l] = '\0';
        char *s = strrchr(self, '/');
        *s = '\0';
        snprintf(agent, sizeof agent, "%s/../agent/libfleetprof.so", self);
    }
    if (access(agent, R_OK) != 0) {
        fprintf(stderr, "agent not found: %s\n", agent);
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    char dir[] = "/tmp/fp-bench-spawn-XXXXXX";
    if (!mkdtemp(dir))
        return 2;
    char up[256], down[256], stopped[256];
    snprintf(up, sizeof up, "%s/up.sock", dir);
    snprintf(down, sizeof down, "%s/absent.sock", dir);
    snprintf(stopped, sizeof stopped, "%s/stopped.sock", dir);
    int lup = listen_at(up, 128), lst = listen_at(stopped, 128);
    pthread_t th;
    pthread_create(&th, NULL, collector_up, &lup);
    pthread_create(&th, NULL, collector_stopped, &lst);

    char **env[M_COUNT] = {make_env(NULL, NULL, 0),       make_env(agent, up, 0),
                           make_env(agent, down, 0),      make_env(agent, stopped, 0),
                           make_env(agent, "none", 0),    make_env(agent, "none", 1)};
    for (int b = 0; b < nbase; b++) { /* SO[@VAR=VALUE]: that build, with that variable */
        char *so = strdup(base[b]), *at = strchr(so, '@');
        if (at)
            *at++ = '\0';
        char **e = env[M_BASE + b] = make_env(so, down, 0);
        size_t k = 0;
        while (e[k])
            k++;
        if (at) {
            e = env[M_BASE + b] = realloc(e, (k + 2) * sizeof *e);
            e[k++] = at;
            e[k] = NULL;
        }
    }
    int nmodes = M_BASE + nbase;
    double *ms[M_COUNT], *cpums[M_COUNT];
    for (int m = 0; m < M_COUNT; m++) {
        ms[m] = calloc((size_t)rounds, sizeof(double));
        cpums[m] = calloc((size_t)rounds, sizeof(double));
    }
    char *av[] = {(char *)prog, NULL};
    for (int r = 0; r < rounds; r++)
        for (int m = 0; m < nmodes; m++) {
            double t0 = now_ms(), cpu = 0;
            for (int i = 0; i < batch; i++) {
                pid_t pid;
                int st;
                if (posix_spawn(&pid, prog, NULL, NULL, av, env[m]) != 0) {
                    perror("posix_spawn");
                    return 2;
                }
                struct rusage ru;
                while (wait4(pid, &st, 0, &ru) < 0 && errno == EINTR)
                    ;
                cpu += (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
                       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
                if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
                    fprintf(stderr, "%s: %s exited with status 0x%x\n", g_names[m], prog, st);
                    return 1;
                }
            }
            ms[m][r] = (now_ms() - t0) / batch;
            cpums[m][r] = cpu / batch;
        }
    printf("posix_spawn + waitpid of %s, %d rounds x %d spawns per mode, interleaved\n", prog,
           rounds, batch);
    printf("wall: ms per spawn (posix_spawn to wait4); cpu: the child's user+sys ms\n");
    printf("%-8s %9s %8s %8s %11s %6s | %8s %11s %6s\n", "mode", "wall_med", "min", "max",
           "minus_plain", "ratio", "cpu_med", "minus_plain", "ratio");
    double med[M_COUNT], cmed[M_COUNT];
    double *raw[M_COUNT], *craw[M_COUNT]; /* round order kept for the pairing */
    for (int m = 0; m < nmodes; m++) {
        raw[m] = malloc((size_t)rounds * sizeof(double));
        craw[m] = malloc((size_t)rounds * sizeof(double));
        memcpy(raw[m], ms[m], (size_t)rounds * sizeof(double));
        memcpy(craw[m], cpums[m], (size_t)rounds * sizeof(double));
    }
    for (int m = 0; m < nmodes; m++) {
        qsort(ms[m], (size_t)rounds, sizeof(double), cmp_d);
        qsort(cpums[m], (size_t)rounds, sizeof(double), cmp_d);
        med[m] = ms[m][rounds / 2];
        cmed[m] = cpums[m][rounds / 2];
        printf("%-8s %9.3f %8.3f %8.3f %+11.3f %6.2f | %8.3f %+11.3f %6.2f\n", g_names[m],
               med[m], ms[m][0], ms[m][rounds - 1], med[m] - med[M_PLAIN], med[m] / med[M_PLAIN],
               cmed[m], cmed[m] - cmed[M_PLAIN], cmed[m] / cmed[M_PLAIN]);
    }
    printf("\npaired by round (mode - plain, ms per spawn): median [95%% CI]\n");
    printf("%-8s %27s | %27s\n", "mode", "wall", "cpu");
    for (int m = 1; m < nmodes; m++) {
        double a, lo, hi, ca, clo, chi;
        paired(raw[m], raw[M_PLAIN], rounds, &a, &lo, &hi);
        paired(craw[m], craw[M_PLAIN], rounds, &ca, &clo, &chi);
        printf("%-8s %+8.3f [%+8.3f, %+8.3f] | %+8.3f [%+8.3f, %+8.3f]\n", g_names[m], a, lo, hi,
               ca, clo, chi);
    }
    unlink(up);
    unlink(stopped);
    rmdir(dir);
    return 0;
}
