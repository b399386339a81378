/* I/O workloads for tests/test-agent-io.c (run under libfleetprof).
 *
 *   io_work pipe SECONDS     slow_pipe_site reads a pipe whose writer thread writes every
 *                            25 ms (slow reads >= 10 ms); prints slow reads and their ns
 *   io_work file SECONDS     file_site writes+fsyncs a temporary file (path printed)
 *   io_work socket SECONDS   sock_site recv()s 100 bytes (MSG_WAITALL) on a TCP connection to
 *                            a local server that answers after 15 ms; prints the peer
 *                            "127.0.0.1:PORT" and the recv()s the program timed >= 10 ms
 *   io_work fsync DIR        fsync_site fsyncs a file in DIR after writing 16 MiB, doubling
 *                            (up to 512 MiB) after each fsync under 20 ms, until 5 fsyncs took
 *                            >= 10.5 ms; prints the path and the fsyncs it timed >= 10.5 ms,
 *                            < 9.5 ms and between
 *   io_work fast SECONDS     fast_site reads a pipe with ~100 us waits (aggregates only);
 *                            prints the reads it timed >= 10 ms (slow=)
 *   io_work fdreuse          slow reads on fd N as a pipe, then N reopened as a file
 *   io_work blocked SECONDS  thread "waiter" (blocked_site) recv()s one byte at a time on a
 *                            unix socket with SO_RCVTIMEO set, which the main thread feeds
 *                            every 20 ms: a signal during such a recv fails it with EINTR
 *                            whatever SA_RESTART says (signal(7)); prints the EINTRs
 *   io_work waits SECONDS    calls each blocking function hook_wait.c marks once and checks
 *                            its result (prints waits_bad= and the first failure); then thread
 *                            "poller" alternates poll (poll_site) and epoll_wait (epoll_site)
 *                            on idle descriptors with 50 ms timeouts, its loop woken every
 *                            20 ms by a pipe the main thread writes to; prints their EINTRs
 *   io_work targets SECONDS PORT   slow I/O to two files and one peer, timing every call
 *                            itself: targets_file_site pwrite()s 4 MiB to file a once and to
 *                            file b twice per round, targets_peer_site send()s a byte to
 *                            127.0.0.1:PORT (a server that answers 100 bytes after ~15 ms)
 *                            and recv()s the answer; prints path_a=, path_b=, peer= and per
 *                            target the ns spent in those calls and their number (ns_a=,
 *                            calls_a=, ...)
 *   io_work nbflip N         descriptors that turn blocking (fdnb.c): a pipe made with
 *                            pipe2(O_NONBLOCK) and cleared with fcntl(F_SETFL, 0) (the hook
 *                            sees it), read by setfl_site until N / 3 reads took >= 10 ms;
 *                            then a socket made with SOCK_NONBLOCK, polled 2000 times (EAGAIN),
 *                            turned blocking by a raw fcntl system call (no hook sees it) and
 *                            read by flip_site until N reads took >= 10 ms (each phase 20 s
 *                            at most); a writer thread feeds each a byte every 15 ms;
 *                            prints the reads each site timed >= 10 ms (slow_setfl=,
 *                            slow_flip=) and their number (reads_setfl=, reads_flip=)
 *   io_work nbloop CALLS     nbloop_site recv()s CALLS times on an empty non-blocking socket
 *                            (EAGAIN every time), then read()s CALLS times on an empty
 *                            non-blocking pipe; prints eagain= (the calls that failed so)
 *   io_work longjmp SECONDS  thread "jumper" blocks in read() on an empty pipe
 *                            (jump_read_site); after 200 ms a SIGUSR1 handler siglongjmps out
 *                            of the hooked read, and the thread burns CPU in burn_site for
 *                            SECONDS; prints jumped=1
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* usleep that resumes after EINTR (the agent's wall-clock signals interrupt sleeps) */
static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static volatile int g_stop;
static int g_pipe[2];
static useconds_t g_gap = 25000;

static uint64_t g_writes; /* the writer's writes: I/O calls of their own, also subsampled */
static void *writer_thread(void *arg) {
    (void)arg;
    char c = 'x';
    while (!g_stop) {
        sleep_us(g_gap);
        if (write(g_pipe[1], &c, 1) != 1)
            break;
        g_writes++;
    }
    close(g_pipe[1]);
    return NULL;
}

static uint64_t g_slow, g_slow_ns;

__attribute__((noinline)) ssize_t slow_pipe_site(void) {
    char c;
    double t0 = now_s();
    ssize_t r = read(g_pipe[0], &c, 1);
    double d = now_s() - t0;
    if (d >= 0.010) {
        g_slow++;
        g_slow_ns += (uint64_t)(d * 1e9);
    }
    return r;
}

__attribute__((noinline)) ssize_t fast_site(void) {
    char c;
    double t0 = now_s();
    ssize_t r = read(g_pipe[0], &c, 1);
    if (now_s() - t0 >= 0.010) /* a loaded machine delays the writer now and then */
        g_slow++;
    return r;
}

static void pipe_mode(double secs, ssize_t (*site)(void)) {
    if (pipe(g_pipe) != 0)
        exit(1);
    struct stat st;
    if (fstat(g_pipe[0], &st) == 0)
        printf("pipe_ino=%llu\n", (unsigned long long)st.st_ino);
    pthread_t th;
    pthread_create(&th, NULL, writer_thread, NULL);
    double end = now_s() + secs;
    uint64_t n = 0;
    while (now_s() < end && site() == 1)
        n++;
    g_stop = 1;
    pthread_join(th, NULL);
    printf("reads=%llu slow=%llu slow_ns=%llu writes=%llu\n", (unsigned long long)n,
           (unsigned long long)g_slow, (unsigned long long)g_slow_ns,
           (unsigned long long)g_writes);
}

__attribute__((noinline)) void file_site(int fd) {
    char buf[4096];
    memset(buf, 'a', sizeof buf);
    if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf)
        exit(1);
    fsync(fd);
}

static void file_mode(double secs) {
    char path[] = "/tmp/fp-io-work-XXXXXX";
    int fd = mkstemp(path);
    printf("path=%s\n", path);
    double end = now_s() + secs;
    while (now_s() < end)
        file_site(fd);
    close(fd);
    unlink(path);
}

static int g_lfd;
static void *server_thread(void *arg) {
    (void)arg;
    int c = accept(g_lfd, NULL, NULL);
    char buf[100];
    memset(buf, 'r', sizeof buf);
    while (!g_stop && read(c, buf, 1) == 1) {
        sleep_us(15000);
        if (write(c, buf, sizeof buf) != (ssize_t)sizeof buf)
            break;
    }
    close(c);
    return NULL;
}

__attribute__((noinline)) void sock_site(int fd) {
    char c = 'q', buf[100];
    if (send(fd, &c, 1, 0) != 1)
        exit(1);
    double t0 = now_s();
    if (recv(fd, buf, sizeof buf, MSG_WAITALL) != (ssize_t)sizeof buf)
        exit(1);
    g_slow += now_s() - t0 >= 0.010;
}

static void socket_mode(double secs) {
    g_lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (bind(g_lfd, (struct sockaddr *)&a, sizeof a) || listen(g_lfd, 1) ||
        getsockname(g_lfd, (struct sockaddr *)&a, &al))
        exit(1);
    pthread_t th;
    pthread_create(&th, NULL, server_thread, NULL);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&a, sizeof a))
        exit(1);
    printf("peer=127.0.0.1:%u\n", ntohs(a.sin_port));
    double end = now_s() + secs;
    while (now_s() < end)
        sock_site(fd);
    g_stop = 1;
    shutdown(fd, SHUT_RDWR);
    close(fd);
    pthread_join(th, NULL);
    printf("slow_recvs=%llu\n", (unsigned long long)g_slow);
}

static uint64_t g_fs_slow, g_fs_fast, g_fs_mid;

__attribute__((noinline)) double fsync_site(int fd) {
    double t0 = now_s();
    if (fsync(fd) != 0)
        exit(1);
    return now_s() - t0;
}

static void dirty(int fd, size_t bytes) {
    static char buf[1 << 20];
    memset(buf, 'f', sizeof buf);
    for (size_t done = 0; done < bytes; done += sizeof buf)
        if (write(fd, buf, sizeof buf) != (ssize_t)sizeof buf)
            exit(1);
}

static void fsync_mode(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/fp-io-fsync-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0)
        exit(1);
    printf("path=%s\n", path);
    size_t size = 16 << 20;
    /* until 5 fsyncs took >= 10.5 ms (at most 40): the size doubles after any fsync under
     * 20 ms, so a fast disk or a quiet moment only makes the run longer */
    for (int i = 0; i < 40 && g_fs_slow < 5; i++) {
        if (ftruncate(fd, 0) != 0 || lseek(fd, 0, SEEK_SET) != 0)
            exit(1);
        dirty(fd, size);
        double d = fsync_site(fd);
        g_fs_slow += d >= 0.0105;
        g_fs_fast += d < 0.0095;
        g_fs_mid += d >= 0.0095 && d < 0.0105;
        if (d < 0.020 && size < (512u << 20))
            size *= 2;
    }
    close(fd);
    unlink(path);
    printf("size=%zu fsync_slow=%llu fsync_fast=%llu fsync_mid=%llu\n", size,
           (unsigned long long)g_fs_slow, (unsigned long long)g_fs_fast,
           (unsigned long long)g_fs_mid);
}

static _Atomic int g_waiter_stop;
static _Atomic uint64_t g_eintr, g_got;

__attribute__((noinline)) void blocked_site(int fd) {
    char c;
    while (!g_waiter_stop) {
        ssize_t n = recv(fd, &c, 1, 0);
        if (n == 1)
            g_got++;
        else if (n < 0 && errno == EINTR)
            g_eintr++;
    }
}

static void *waiter(void *arg) {
    pthread_setname_np(pthread_self(), "waiter");
    blocked_site(*(int *)arg);
    return NULL;
}

static void blocked_mode(double secs) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        exit(1);
    struct timeval tv = {2, 0};
    setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    pthread_t th;
    pthread_create(&th, NULL, waiter, &sv[1]);
    double end = now_s() + secs;
    uint64_t sent = 0;
    while (now_s() < end) {
        sleep_us(20000);
        if (write(sv[0], "x", 1) == 1)
            sent++;
    }
    g_waiter_stop = 1;
    (void)!write(sv[0], "x", 1);
    pthread_join(th, NULL);
    printf("sent=%llu got=%llu eintr=%llu\n", (unsigned long long)sent,
           (unsigned long long)g_got, (unsigned long long)g_eintr);
}

/* ---- waits: the calls hook_wait.c marks forward their arguments and results ---- */

static int g_bad;
static const char *g_first_bad = "";
#define EXPECT(what, cond)                                                                         \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            if (!g_bad++)                                                                          \
                g_first_bad = what;                                                                \
        }                                                                                          \
    } while (0)

static void *joined(void *arg) { return arg; }
static void on_usr1(int sig) { (void)sig; }

static void forward_checks(void) {
    struct timespec ms1 = {0, 1000000}, rem;
    int p[2];
    if (pipe(p) != 0)
        exit(1);
    struct pollfd pf = {p[0], POLLIN, 0};
    EXPECT("poll", poll(&pf, 1, 1) == 0);
    EXPECT("ppoll", ppoll(&pf, 1, &ms1, NULL) == 0);
    fd_set r;
    FD_ZERO(&r);
    FD_SET(p[0], &r);
    struct timeval tv = {0, 1000};
    EXPECT("select", select(p[0] + 1, &r, NULL, NULL, &tv) == 0);
    FD_SET(p[0], &r);
    EXPECT("pselect", pselect(p[0] + 1, &r, NULL, NULL, &ms1, NULL) == 0);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 42}, out;
    epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev);
    EXPECT("epoll_wait", epoll_wait(ep, &out, 1, 1) == 0);
    EXPECT("epoll_pwait", epoll_pwait(ep, &out, 1, 1, NULL) == 0);
    (void)!write(p[1], "x", 1);
    EXPECT("epoll_wait ready", epoll_wait(ep, &out, 1, 1000) == 1 && out.data.u64 == 42);
    EXPECT("poll ready", poll(&pf, 1, 1000) == 1 && (pf.revents & POLLIN));
    EXPECT("nanosleep", nanosleep(&ms1, &rem) == 0);
    EXPECT("clock_nanosleep", clock_nanosleep(CLOCK_MONOTONIC, 0, &ms1, NULL) == 0);
    EXPECT("sleep", sleep(0) == 0);
    EXPECT("usleep", usleep(1000) == 0);
    struct timespec bad = {0, 2000000000L}; /* tv_nsec out of range: EINVAL, errno kept */
    errno = 0;
    EXPECT("nanosleep EINVAL", nanosleep(&bad, NULL) == -1 && errno == EINVAL);
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    EXPECT("sigtimedwait EAGAIN", sigtimedwait(&set, NULL, &ms1) == -1 && errno == EAGAIN);
    raise(SIGUSR1);
    int sig = 0;
    EXPECT("sigwait", sigwait(&set, &sig) == 0 && sig == SIGUSR1);
    raise(SIGUSR1);
    siginfo_t si;
    EXPECT("sigwaitinfo", sigwaitinfo(&set, &si) == SIGUSR1 && si.si_signo == SIGUSR1);
    signal(SIGUSR1, on_usr1);
    raise(SIGUSR1); /* pending while blocked: sigsuspend with it unblocked returns at once */
    sigset_t none;
    sigemptyset(&none);
    EXPECT("sigsuspend", sigsuspend(&none) == -1 && errno == EINTR);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_t th;
    void *ret = NULL;
    pthread_create(&th, NULL, joined, (void *)(uintptr_t)7);
    EXPECT("pthread_join", pthread_join(th, &ret) == 0 && ret == (void *)(uintptr_t)7);
    sem_t sem;
    sem_init(&sem, 0, 1);
    EXPECT("sem_wait", sem_wait(&sem) == 0);
    struct timespec soon;
    clock_gettime(CLOCK_REALTIME, &soon);
    soon.tv_nsec += 1000000;
    if (soon.tv_nsec >= 1000000000L) {
        soon.tv_sec++;
        soon.tv_nsec -= 1000000000L;
    }
    EXPECT("sem_timedwait", sem_timedwait(&sem, &soon) == -1 && errno == ETIMEDOUT);
    sem_destroy(&sem);
    int st = 0;
    pid_t c = fork();
    if (c == 0)
        _exit(3);
    EXPECT("waitpid", waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 3);
    if ((c = fork()) == 0)
        _exit(4);
    EXPECT("wait", wait(&st) == c && WEXITSTATUS(st) == 4);
    if ((c = fork()) == 0)
        _exit(5);
    EXPECT("waitid", waitid(P_PID, (id_t)c, &si, WEXITED) == 0 && si.si_status == 5);
    close(ep);
    close(p[0]);
    close(p[1]);
    printf("waits_bad=%d first_bad=%s\n", g_bad, g_first_bad);
}

static volatile int g_poll_stop;
static uint64_t g_poll_eintr, g_poll_wakes;
static int g_wake[2];

__attribute__((noinline)) static int poll_site(struct pollfd *pf) {
    int n = poll(pf, 1, 50);
    __asm__ volatile("" ::: "memory");
    return n;
}
__attribute__((noinline)) static int epoll_site(int ep, struct epoll_event *ev) {
    int n = epoll_wait(ep, ev, 1, 50);
    __asm__ volatile("" ::: "memory");
    return n;
}

static void *poller(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "poller");
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN}, out;
    epoll_ctl(ep, EPOLL_CTL_ADD, g_wake[0], &ev);
    struct pollfd pf = {g_wake[0], POLLIN, 0};
    char buf[64];
    for (int i = 0; !g_poll_stop; i++) {
        int n = i & 1 ? epoll_site(ep, &out) : poll_site(&pf);
        if (n < 0 && errno == EINTR)
            g_poll_eintr++;
        else if (n > 0 && read(g_wake[0], buf, sizeof buf) > 0)
            g_poll_wakes++;
    }
    close(ep);
    return NULL;
}

static void waits_mode(double secs) {
    forward_checks();
    if (pipe(g_wake) != 0)
        exit(1);
    pthread_t th;
    pthread_create(&th, NULL, poller, NULL);
    double end = now_s() + secs;
    while (now_s() < end) {
        sleep_us(20000);
        (void)!write(g_wake[1], "x", 1);
    }
    g_poll_stop = 1;
    (void)!write(g_wake[1], "x", 1);
    pthread_join(th, NULL);
    printf("wakes=%llu eintr=%llu\n", (unsigned long long)g_poll_wakes,
           (unsigned long long)g_poll_eintr);
}

/* ---- longjmp: leaving a hooked read by siglongjmp ---- */

#include <setjmp.h>
static sigjmp_buf g_jb;
static volatile double g_burn_secs;
static volatile int g_jumped;

static void on_usr1_jump(int sig) {
    (void)sig;
    siglongjmp(g_jb, 1);
}

__attribute__((noinline)) void jump_read_site(int fd) {
    char c;
    (void)!read(fd, &c, 1); /* never returns: nobody writes */
}

__attribute__((noinline)) void burn_site(double secs) {
    volatile uint64_t x = 0;
    (void)x; /* read once: clang warns of a variable only ever written */
    double end = now_s() + secs;
    while (now_s() < end)
        for (int i = 0; i < 10000; i++)
            x += (uint64_t)i;
}

static void *jumper(void *arg) {
    pthread_setname_np(pthread_self(), "jumper");
    if (sigsetjmp(g_jb, 1) == 0)
        jump_read_site(*(int *)arg);
    g_jumped = 1;
    burn_site(g_burn_secs);
    return NULL;
}

static void longjmp_mode(double secs) {
    int p[2];
    if (pipe(p) != 0)
        exit(1);
    struct sigaction sa = {0};
    sa.sa_handler = on_usr1_jump;
    sigaction(SIGUSR1, &sa, NULL);
    g_burn_secs = secs;
    pthread_t th;
    pthread_create(&th, NULL, jumper, &p[0]);
    sleep_us(200000);
    pthread_kill(th, SIGUSR1);
    pthread_join(th, NULL);
    printf("jumped=%d\n", g_jumped);
}

static uint64_t g_tns[3], g_tcalls[3]; /* per target: file a, file b, peer */

static ssize_t timed(int target, ssize_t r, double t0) {
    g_tns[target] += (uint64_t)((now_s() - t0) * 1e9);
    g_tcalls[target]++;
    return r;
}

__attribute__((noinline)) void targets_file_site(int fd, int target, const char *buf, size_t n) {
    double t0 = now_s();
    if (timed(target, pwrite(fd, buf, n, 0), t0) != (ssize_t)n)
        exit(1);
}

__attribute__((noinline)) void targets_peer_site(int fd) {
    char c = 'q', buf[100];
    double t0 = now_s();
    if (timed(2, send(fd, &c, 1, 0), t0) != 1)
        exit(1);
    t0 = now_s();
    if (timed(2, recv(fd, buf, sizeof buf, MSG_WAITALL), t0) != (ssize_t)sizeof buf)
        exit(1);
}

static void targets_mode(double secs, int port) {
    char pa[] = "/tmp/fp-io-a-XXXXXX", pb[] = "/tmp/fp-io-b-XXXXXX";
    int fa = mkstemp(pa), fb = mkstemp(pb);
    size_t n = 4 << 20; /* ~1 ms per write: the hook's own cost is far below the call's */
    char *buf = malloc(n);
    if (fa < 0 || fb < 0 || !buf)
        exit(1);
    memset(buf, 'w', n);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                            .sin_port = htons((uint16_t)port)};
    double t0 = now_s();
    if (timed(2, connect(fd, (struct sockaddr *)&a, sizeof a), t0))
        exit(1);
    printf("path_a=%s\npath_b=%s\npeer=127.0.0.1:%d\n", pa, pb, port);
    double end = now_s() + secs;
    while (now_s() < end) {
        targets_file_site(fa, 0, buf, n);
        targets_file_site(fb, 1, buf, n);
        targets_file_site(fb, 1, buf, n);
        targets_peer_site(fd);
    }
    close(fd);
    close(fa);
    close(fb);
    unlink(pa);
    unlink(pb);
    free(buf);
    printf("ns_a=%llu calls_a=%llu\nns_b=%llu calls_b=%llu\nns_peer=%llu calls_peer=%llu\n",
           (unsigned long long)g_tns[0], (unsigned long long)g_tcalls[0],
           (unsigned long long)g_tns[1], (unsigned long long)g_tcalls[1],
           (unsigned long long)g_tns[2], (unsigned long long)g_tcalls[2]);
}

/* ---- nbflip / nbloop: descriptors known non-blocking (agent/src/hooks/fdnb.c) ---- */

static int g_feed_fd;
static volatile int g_feed_stop;
static void *feeder(void *arg) {
    (void)arg;
    while (!g_feed_stop) {
        sleep_us(15000);
        if (write(g_feed_fd, "x", 1) != 1 && errno != EAGAIN)
            break;
    }
    return NULL;
}

/* reads fd (blocking) while the feeder writes wfd, until want reads took >= 10 ms (or 20 s
 * passed); counts the reads and the slow ones */
static void feed_reads(int fd, int wfd, uint64_t want, ssize_t (*site)(int), uint64_t *reads,
                       uint64_t *slow) {
    g_feed_fd = wfd;
    g_feed_stop = 0;
    pthread_t th;
    pthread_create(&th, NULL, feeder, NULL);
    double end = now_s() + 20;
    while (*slow < want && now_s() < end) {
        double t0 = now_s();
        if (site(fd) != 1)
            exit(1);
        *slow += now_s() - t0 >= 0.010;
        ++*reads;
    }
    g_feed_stop = 1;
    pthread_join(th, NULL);
}

__attribute__((noinline)) ssize_t setfl_site(int fd) {
    char c;
    return read(fd, &c, 1);
}
__attribute__((noinline)) ssize_t flip_site(int fd) {
    char c;
    return recv(fd, &c, 1, 0);
}

static void nbflip_mode(uint64_t want) {
    int p[2], sv[2];
    uint64_t reads = 0, slow = 0;
    char c;
    if (pipe2(p, O_NONBLOCK) != 0 || read(p[0], &c, 1) != -1 || errno != EAGAIN ||
        fcntl(p[0], F_SETFL, 0) != 0)
        exit(1);
    feed_reads(p[0], p[1], want / 3, setfl_site, &reads, &slow);
    printf("reads_setfl=%llu slow_setfl=%llu\n", (unsigned long long)reads,
           (unsigned long long)slow);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0)
        exit(1);
    for (int i = 0; i < 2000; i++)
        if (recv(sv[0], &c, 1, 0) != -1 || errno != EAGAIN)
            exit(1);
    /* A check among those EAGAIN calls that a loaded machine stretched past the floor made
     * this thread re-ask the kernel (still non-blocking); a thread re-asks at most once per
     * 50 ms (fdnb.c), so the flip's first slow check is only judged after that window. */
    sleep_us(60000);
    if (syscall(SYS_fcntl, sv[0], F_SETFL, O_RDWR) != 0) /* blocking, behind the hooks' back */
        exit(1);
    reads = slow = 0;
    feed_reads(sv[0], sv[1], want, flip_site, &reads, &slow);
    printf("reads_flip=%llu slow_flip=%llu\n", (unsigned long long)reads,
           (unsigned long long)slow);
}

__attribute__((noinline)) uint64_t nbloop_site(int sock, int pfd, long calls) {
    char buf[16];
    uint64_t eagain = 0;
    for (long i = 0; i < calls; i++)
        eagain += recv(sock, buf, sizeof buf, 0) == -1 && errno == EAGAIN;
    for (long i = 0; i < calls; i++)
        eagain += read(pfd, buf, sizeof buf) == -1 && errno == EAGAIN;
    return eagain;
}

static void nbloop_mode(long calls) {
    int sv[2], p[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) != 0 ||
        pipe2(p, O_NONBLOCK) != 0)
        exit(1);
    printf("eagain=%llu\n", (unsigned long long)nbloop_site(sv[0], p[0], calls));
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    if (!strcmp(argv[1], "targets") && argc > 3) {
        targets_mode(atof(argv[2]), atoi(argv[3]));
        fflush(stdout);
        return 0;
    }
    double secs = argc > 2 ? atof(argv[2]) : 3;
    if (!strcmp(argv[1], "pipe")) {
        pipe_mode(secs, slow_pipe_site);
    } else if (!strcmp(argv[1], "fast")) {
        g_gap = 100;
        pipe_mode(secs, fast_site);
    } else if (!strcmp(argv[1], "file")) {
        file_mode(secs);
    } else if (!strcmp(argv[1], "socket")) {
        socket_mode(secs);
    } else if (!strcmp(argv[1], "blocked")) {
        blocked_mode(secs);
    } else if (!strcmp(argv[1], "nbflip")) {
        nbflip_mode((uint64_t)secs);
    } else if (!strcmp(argv[1], "nbloop")) {
        nbloop_mode((long)secs);
    } else if (!strcmp(argv[1], "longjmp")) {
        longjmp_mode(secs);
    } else if (!strcmp(argv[1], "waits")) {
        waits_mode(secs);
    } else if (!strcmp(argv[1], "fsync") && argc > 2) {
        fsync_mode(argv[2]);
    } else {
        return 2;
    }
    fflush(stdout);
    return 0;
}
