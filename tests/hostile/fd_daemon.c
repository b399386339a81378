/* Hostile case: a daemon that closes every descriptor at start and then opens its own
 * (issue 13). The agent must never read or write a descriptor that is no longer its own, not
 * busy-loop when its descriptors vanish, and write nothing into the program's at exit.
 *
 * The watcher (main) listens on a unix socket and forks the daemon. The daemon burns 150 ms
 * of CPU (the agent has started, sampled, and connected to FLEETPROF_COLLECTOR, which the
 * watcher also listens on and never accepts: a stopped collector), then closes every
 * descriptor above 2 and, one after the other on the lowest numbers (the ones the agent had):
 *   - a pipe: a thread writes 4,400 bytes in 100-byte pieces 2 ms apart, the daemon reads
 *     them all;
 *   - a socketpair: 145,472 bytes in 4 KiB pieces 1 ms apart;
 *   - a regular file of 3,931 lines, read back in 512-byte reads with a pause every 64;
 *   - 300 ms with nothing open (an agent polling a closed number spins on POLLNVAL);
 *   - then it connects back to the watcher and sends "hello\n" (the watcher counts every byte
 *     it receives until the daemon is gone: an agent writing its wake-up value at exit into
 *     the number it once had shows up here), and dup2s a listening socket onto every other
 *     free number up to 15 (a write there: EPIPE and SIGPIPE), and exits.
 * Prints what each received (bytes, FNV-1a hash, lines), whether its CPU time over the ~1 s
 * after the close stayed under 300 ms (cpu_ok), and the watcher prints what the peer
 * received and how the daemon ended. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
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

static char g_path[96];

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void burn_ms(int ms) {
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    volatile uint64_t x = 0;
    (void)x; /* read once: clang warns of a variable only ever written */
    do {
        for (int i = 0; i < 10000; i++)
            x += (uint64_t)i * i;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    } while ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < ms);
}

static void ms_sleep(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

typedef struct {
    int fd;
    size_t total, piece;
    int gap_ms;
} feed_t;

static void *feeder(void *arg) {
    feed_t *f = arg;
    static char buf[4096];
    size_t sent = 0;
    while (sent < f->total) {
        size_t n = f->total - sent < f->piece ? f->total - sent : f->piece;
        for (size_t i = 0; i < n; i++)
            buf[i] = (char)('a' + (sent + i) % 26);
        size_t off = 0;
        while (off < n) {
            ssize_t w = write(f->fd, buf + off, n - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return NULL;
            off += (size_t)w;
        }
        sent += n;
        ms_sleep(f->gap_ms);
    }
    close(f->fd);
    return NULL;
}

/* Reads fd to EOF: bytes and FNV-1a hash. */
static void drain(int fd, size_t *bytes, uint64_t *hash) {
    char buf[8192];
    *bytes = 0;
    *hash = 1469598103934665603ull;
    for (;;) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        for (ssize_t i = 0; i < r; i++)
            *hash = (*hash ^ (uint8_t)buf[i]) * 1099511628211ull;
        *bytes += (size_t)r;
    }
}

static void fed(const char *what, int rd, int wr, size_t total, size_t piece, int gap) {
    feed_t f = {wr, total, piece, gap};
    pthread_t th;
    pthread_create(&th, NULL, feeder, &f);
    size_t bytes;
    uint64_t hash;
    drain(rd, &bytes, &hash);
    pthread_join(th, NULL);
    close(rd);
    printf("%s: received %zu of %zu bytes, hash %016llx\n", what, bytes, total,
           (unsigned long long)hash);
}

static int daemon_main(void) {
    burn_ms(150);
    ms_sleep(250); /* a chunk or two: the agent connected to the collector and kept files */
    for (int fd = 3; fd < 1024; fd++)
        close(fd);
    double c0 = cpu_s();

    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return 2;
    fed("pipe", p[0], p[1], 4400, 100, 2);
    int s[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s) != 0)
        return 2;
    fed("socket", s[0], s[1], 145472, 4096, 1);

    char tmpl[] = "/tmp/fp-hostile-fd-XXXXXX";
    int f = mkstemp(tmpl);
    if (f < 0)
        return 2;
    unlink(tmpl);
    FILE *w = fdopen(dup(f), "w");
    for (int i = 0; i < 3931; i++)
        fprintf(w, "line %d of the daemon's own file\n", i);
    fclose(w);
    lseek(f, 0, SEEK_SET);
    char buf[512];
    size_t lines = 0, reads = 0;
    for (;;) {
        ssize_t r = read(f, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        for (ssize_t i = 0; i < r; i++)
            lines += buf[i] == '\n';
        if (++reads % 64 == 0)
            ms_sleep(20);
    }
    close(f);
    printf("file: read %zu of 3931 lines\n", lines);
    ms_sleep(300); /* nothing open: an agent polling a closed number spins (POLLNVAL) */
    int peer = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", g_path);
    if (peer < 0 || connect(peer, (struct sockaddr *)&sa, sizeof sa) != 0) {
        perror("connect");
        return 2;
    }
    if (write(peer, "hello\n", 6) != 6)
        return 2;
    int lis = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un la = {.sun_family = AF_UNIX};
    snprintf(la.sun_path, sizeof la.sun_path, "%s.l", g_path);
    unlink(la.sun_path);
    if (lis < 0 || bind(lis, (struct sockaddr *)&la, sizeof la) != 0 || listen(lis, 4) != 0)
        return 2;
    unlink(la.sun_path);
    int dups = 0;
    for (int fd = 3; fd <= 15; fd++)
        if (fd != peer && fd != lis && fcntl(fd, F_GETFD) < 0 && dup2(lis, fd) == fd)
            dups++;
    printf("listening socket dup2'd onto %s free numbers\n", dups > 0 ? "the" : "no");

    ms_sleep(300);
    double used = cpu_s() - c0;
    printf("cpu_ok=%d\n", used < 0.3);
    if (used >= 0.3)
        fprintf(stderr, "daemon CPU after the close: %.3f s\n", used);
    fflush(stdout);
    return 0; /* exit: the agent's last chunk; nothing may land in peer or lis */
}

int main(void) {
    const char *col = getenv("FLEETPROF_COLLECTOR");
    snprintf(g_path, sizeof g_path, "/tmp/fp-hostile-fd-%d.sock", (int)getpid());
    signal(SIGPIPE, SIG_DFL);
    int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", g_path);
    unlink(g_path);
    if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(l, 4) != 0)
        return 2;
    int col_fd = -1; /* a collector that accepts nothing (SIGSTOPped) */
    if (col && col[0] == '/') {
        struct sockaddr_un ca = {.sun_family = AF_UNIX};
        snprintf(ca.sun_path, sizeof ca.sun_path, "%s", col);
        unlink(col);
        col_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (col_fd < 0 || bind(col_fd, (struct sockaddr *)&ca, sizeof ca) != 0 ||
            listen(col_fd, 64) != 0)
            return 2;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0)
        exit(daemon_main()); /* exit(): the agent's destructor runs */
    int c = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    size_t bytes = 0;
    uint64_t hash = 0;
    if (c >= 0)
        drain(c, &bytes, &hash); /* until the daemon is gone */
    int st;
    waitpid(pid, &st, 0);
    printf("peer received %zu bytes, hash %016llx\n", bytes, (unsigned long long)hash);
    if (WIFSIGNALED(st))
        printf("daemon killed by signal %d\n", WTERMSIG(st));
    else
        printf("daemon exit status %d\n", WEXITSTATUS(st));
    unlink(g_path);
    if (col_fd >= 0)
        unlink(col);
    return 0;
}
