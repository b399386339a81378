/* agent/src/hooks/fdnb.c on its own (issue 14): which descriptors are non-blocking, so that the I/O
 * hooks do not time calls on them. Real descriptors, no agent, no hooks: the calls the hooks
 * make into fdnb.c are made here by hand.
 *
 * Learning (F_GETFL + fstat) from real descriptors of each kind; the states the hooks set and
 * forget (close, dup2, close_range); F_SETFL clearing O_NONBLOCK on one of two dups; the 1 in
 * AG_NB_CHECK checks (rate, weight: unbiased, and memoryless from a thread's first call); a
 * descriptor made blocking behind the cache's back with a raw fcntl system call, noticed at
 * the first check (what io_report does then: re-ask the kernel) and timed on every call after;
 * the re-asking's per-thread rate limit. ag_fd_nb_weight is the two halves the data hooks'
 * fast paths ask apart (ag_fd_nb_pass, then ag_fd_nb_weight_after when it does not pass):
 * every case here goes through both. */
#define _GNU_SOURCE
#include "hooks.h"
#include "support/runner.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* hooks.c's per-thread xorshift, the only thing fdnb.c takes from the rest of the agent */
static __thread uint64_t t_rng = 0x9e3779b97f4a7c15ull;
uint64_t ag_hook_rand(void) {
    uint64_t x = t_rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t_rng = x;
    return x;
}

_Atomic int ag_sandboxed; /* sandbox.c's: a seccomp filter forbids the agent's system calls */

static uint32_t state(int fd) { return atomic_load(&ag_nb_map[fd]) & 3u; }
static uint32_t gen(int fd) { return atomic_load(&ag_nb_map[fd]) >> 2; }

/* ag_fd_nb_weight n times: how many checks (weight AG_NB_CHECK), how many plain timed (1),
 * the sum of the weights */
typedef struct {
    uint64_t checks, plain, sum;
} calls_t;
static calls_t call_n(int fd, uint64_t n) {
    calls_t c = {0, 0, 0};
    for (uint64_t i = 0; i < n; i++) {
        uint32_t w = ag_fd_nb_weight(fd);
        c.checks += w == AG_NB_CHECK;
        c.plain += w == 1;
        c.sum += w;
        CHECKF(w == 0 || w == 1 || w == AG_NB_CHECK, "weight %u", w);
    }
    return c;
}

/* Each kind of descriptor, learnt from the kernel at its first call: non-blocking pipe,
 * socket and eventfd (an anonymous inode) are NONBLOCK; a blocking pipe, and a regular file
 * opened O_NONBLOCK (the flag does not stop a read waiting for the disk), are BLOCKING and
 * timed on every call; a closed fd stays UNKNOWN (timed); errno is left alone throughout. */
static void test_learn(void) {
    int p[2], q[2], sv[2];
    CHECK(syscall(SYS_pipe2, p, O_NONBLOCK) == 0);
    CHECK(syscall(SYS_pipe2, q, 0) == 0);
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    int ev = eventfd(0, EFD_NONBLOCK);
    char path[] = "/tmp/fp-fdnb-XXXXXX";
    int tmp = mkstemp(path);
    CHECK(ev >= 0 && tmp >= 0);
    int file = open(path, O_RDONLY | O_NONBLOCK);
    CHECK(file >= 0);
    unlink(path);
    int fds[] = {p[0], p[1], sv[0], ev, q[0], file};
    uint32_t want[] = {AG_NB_NONBLOCK, AG_NB_NONBLOCK, AG_NB_NONBLOCK, AG_NB_NONBLOCK,
                       AG_NB_BLOCKING, AG_NB_BLOCKING};
    for (int i = 0; i < 6; i++) {
        CHECK_EQ(state(fds[i]), AG_NB_UNKNOWN);
        errno = 4321;
        calls_t c = call_n(fds[i], 1000);
        CHECK_EQ(errno, 4321);
        CHECKF(state(fds[i]) == want[i], "fd %d (#%d): state %u, want %u", fds[i], i,
               state(fds[i]), want[i]);
        if (want[i] == AG_NB_BLOCKING)
            CHECK_EQ(c.plain, 1000);
        else
            CHECKF(c.plain == 0 && c.checks < 200, "fd %d: %llu plain, %llu checks", fds[i],
                   (unsigned long long)c.plain, (unsigned long long)c.checks);
    }
    int closed = dup(q[1]);
    close(closed);
    errno = 77;
    CHECK_EQ(ag_fd_nb_weight(closed), 1);
    CHECK_EQ(errno, 77);
    CHECK_EQ(state(closed), AG_NB_UNKNOWN);
    CHECK_EQ(ag_fd_nb_weight(AG_NB_FDS), 1); /* beyond the cache: always timed */
    CHECK_EQ(ag_fd_nb_weight(-1), 1);
}

/* What the hooks tell it: set (socket, pipe2, accept4 flags), forget (close, dup2), both
 * bumping the generation; a learner that read the byte before a forget loses its CAS (the
 * forget stands); close_range forgets a range. */
static void test_set_forget(void) {
    int p[2];
    CHECK(pipe(p) == 0);
    ag_fd_nb_set(p[0], 1);
    CHECK_EQ(state(p[0]), AG_NB_NONBLOCK);
    uint32_t g = gen(p[0]);
    ag_fd_nb_forget(p[0]); /* close(p[0]) as the hook does it */
    CHECK_EQ(state(p[0]), AG_NB_UNKNOWN);
    CHECK_EQ(gen(p[0]), (g + 1) & 63);
    ag_fd_nb_set(p[0], 0);
    CHECK_EQ(state(p[0]), AG_NB_BLOCKING);
    CHECK_EQ(call_n(p[0], 100).plain, 100);
    /* dup2 onto a known non-blocking number: forgotten, learnt again from what it is now */
    int s[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, s) == 0);
    ag_fd_nb_set(s[0], 1);
    CHECK(dup2(p[0], s[0]) == s[0]);
    ag_fd_nb_forget(s[0]);
    call_n(s[0], 1);
    CHECK_EQ(state(s[0]), AG_NB_BLOCKING);
    /* close_range over five known entries */
    int base = p[1] + 10;
    for (int fd = base; fd < base + 5; fd++)
        ag_fd_nb_set(fd, fd & 1);
    ag_fd_nb_forget_range((unsigned)base + 1, (unsigned)base + 3);
    CHECK_EQ(state(base), base & 1 ? AG_NB_NONBLOCK : AG_NB_BLOCKING);
    for (int fd = base + 1; fd <= base + 3; fd++)
        CHECK_EQ(state(fd), AG_NB_UNKNOWN);
    CHECK_EQ(state(base + 4), (base + 4) & 1 ? AG_NB_NONBLOCK : AG_NB_BLOCKING);
    ag_fd_nb_forget_range(0, ~0u); /* closefrom(0): bounded by the cache */
    for (int fd = 0; fd < base + 5; fd++)
        CHECK_EQ(state(fd), AG_NB_UNKNOWN);
}

/* A learner races forgets: thread 2 forgets fd 900 (an open pipe, non-blocking) in a loop
 * while this thread learns it. Whatever the interleaving, the entry is UNKNOWN or NONBLOCK
 * (never BLOCKING, never another state), and after the forgetter stops one learn makes it
 * NONBLOCK. */
static _Atomic int g_stop;
static void *forgetter(void *arg) {
    int fd = *(int *)arg;
    while (!atomic_load(&g_stop))
        ag_fd_nb_forget(fd);
    return NULL;
}
static void test_race(void) {
    int p[2];
    CHECK(syscall(SYS_pipe2, p, O_NONBLOCK) == 0);
    int fd = 900;
    CHECK(dup2(p[0], fd) == fd);
    pthread_t th;
    pthread_create(&th, NULL, forgetter, &fd);
    uint64_t lost = 0;
    for (int i = 0; i < 20000; i++) {
        uint32_t s = ag_fd_nb_learn(fd);
        lost += s == AG_NB_UNKNOWN;
        CHECK(s == AG_NB_UNKNOWN || s == AG_NB_NONBLOCK);
        CHECK(state(fd) != AG_NB_BLOCKING);
    }
    atomic_store(&g_stop, 1);
    pthread_join(th, NULL);
    CHECK_EQ(ag_fd_nb_learn(fd), AG_NB_NONBLOCK);
    printf("  %llu of 20000 learns lost to a concurrent forget\n", (unsigned long long)lost);
}

/* F_SETFL through the hook: clearing O_NONBLOCK on one of two dups (one open file
 * description) makes the other blocking too, so every non-blocking entry is forgotten;
 * setting it makes the fd UNKNOWN, learnt from its type (a pipe: NONBLOCK; a regular file:
 * BLOCKING). */
static void test_setfl(void) {
    int p[2];
    CHECK(syscall(SYS_pipe2, p, O_NONBLOCK) == 0);
    int d = dup(p[0]);
    call_n(p[0], 1);
    call_n(d, 1);
    CHECK(state(p[0]) == AG_NB_NONBLOCK && state(d) == AG_NB_NONBLOCK);
    CHECK(fcntl(d, F_SETFL, 0) == 0);
    ag_fd_nb_setfl(d, 0);
    CHECK_EQ(state(d), AG_NB_BLOCKING);
    CHECK_EQ(state(p[0]), AG_NB_UNKNOWN);
    CHECK_EQ(call_n(p[0], 100).plain, 100); /* learnt: blocking, timed every time */
    CHECK_EQ(state(p[0]), AG_NB_BLOCKING);
    CHECK(fcntl(p[0], F_SETFL, O_NONBLOCK) == 0);
    ag_fd_nb_setfl(p[0], 1);
    CHECK_EQ(state(p[0]), AG_NB_UNKNOWN);
    call_n(p[0], 1);
    CHECK_EQ(state(p[0]), AG_NB_NONBLOCK);
    char path[] = "/tmp/fp-fdnb-XXXXXX";
    int f = mkstemp(path);
    unlink(path);
    CHECK(fcntl(f, F_SETFL, O_NONBLOCK) == 0);
    ag_fd_nb_setfl(f, 1);
    CHECK_EQ(call_n(f, 50).plain, 50);
    CHECK_EQ(state(f), AG_NB_BLOCKING);
}

/* Checks on a NONBLOCK fd: 1 in AG_NB_CHECK of 320,000 calls, each of weight AG_NB_CHECK, so
 * the weights sum to the calls (within 5 standard deviations: the count is binomial); the gaps
 * between checks are geometric (memoryless: the share of gaps of exactly one call is
 * 1/AG_NB_CHECK, not 0 as a fixed spacing would give); and a thread's first call is no
 * certain check either (ag_nb_left = 0 as in a new thread: checked 1 time in AG_NB_CHECK). */
static void test_checks(void) {
    int p[2];
    CHECK(syscall(SYS_pipe2, p, O_NONBLOCK) == 0);
    ag_fd_nb_set(p[0], 1);
    const uint64_t n = 320000;
    const double pr = 1.0 / AG_NB_CHECK, mean = (double)n * pr;
    const double sd = sqrt((double)n * pr * (1 - pr));
    uint64_t checks = 0, sum = 0, gaps = 0, gap1 = 0, since = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t w = ag_fd_nb_weight(p[0]);
        sum += w;
        since++;
        if (w) {
            CHECK_EQ(w, AG_NB_CHECK);
            checks++;
            if (checks > 1) {
                gaps++;
                gap1 += since == 1;
            }
            since = 0;
        }
    }
    printf("  %llu calls: %llu checks (expected %.0f +- %.0f), weights sum %llu; %.4f of gaps "
           "one call long\n",
           (unsigned long long)n, (unsigned long long)checks, mean, sd, (unsigned long long)sum,
           (double)gap1 / (double)gaps);
    CHECKF(fabs((double)checks - mean) <= 5 * sd, "%llu checks", (unsigned long long)checks);
    CHECK_EQ(sum, checks * AG_NB_CHECK);
    double g1 = (double)gap1 / (double)gaps, g1sd = sqrt(pr * (1 - pr) / (double)gaps);
    CHECKF(fabs(g1 - pr) <= 5 * g1sd, "share of 1-call gaps %.4f", g1);
    uint64_t first = 0;
    for (int i = 0; i < 16000; i++) {
        ag_nb_left = 0;
        first += ag_fd_nb_weight(p[0]) != 0;
    }
    double fsd = sqrt(16000 * pr * (1 - pr));
    CHECKF(fabs((double)first - 16000 * pr) <= 5 * fsd, "first calls checked %llu of 16000",
           (unsigned long long)first);
}

/* Behind the cache's back: a socket known non-blocking is made blocking by a raw fcntl system
 * call (no hook sees it). Calls go on being skipped until the first check; the hook times that
 * one, it waits (here: the test says so, as a slow result would), io_report re-asks the kernel
 * (ag_fd_nb_recheck: forget and learn; done here by hand, the rate limit is test_recheck's)
 * and learns BLOCKING: every call from then on is timed. Over 200 trials the calls until the
 * check are geometric, mean AG_NB_CHECK. */
static void test_behind_back(void) {
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    uint64_t total = 0, worst = 0;
    for (int t = 0; t < 200; t++) {
        CHECK(syscall(SYS_fcntl, sv[0], F_SETFL, O_NONBLOCK | O_RDWR) == 0);
        ag_fd_nb_set(sv[0], 1);
        CHECK(syscall(SYS_fcntl, sv[0], F_SETFL, O_RDWR) == 0); /* blocking now */
        uint64_t k = 0;
        uint32_t w;
        while ((w = ag_fd_nb_weight(sv[0])) == 0)
            k++;
        CHECK_EQ(w, AG_NB_CHECK);
        ag_fd_nb_forget(sv[0]); /* io_report: a check that took >= the floor */
        ag_fd_nb_learn(sv[0]);
        CHECK_EQ(call_n(sv[0], 20).plain, 20);
        CHECK_EQ(state(sv[0]), AG_NB_BLOCKING);
        total += k + 1;
        worst = k + 1 > worst ? k + 1 : worst;
    }
    printf("  blocking behind our back: noticed at call %.1f on average (worst %llu)\n",
           (double)total / 200, (unsigned long long)worst);
    /* mean of 200 geometric(1/16) draws: 16 +- 1.1 (sd of the mean) */
    double msd = sqrt(AG_NB_CHECK * (AG_NB_CHECK - 1.0) / 200);
    CHECKF(fabs((double)total / 200 - AG_NB_CHECK) <= 5 * msd, "mean %.1f", (double)total / 200);
}

/* ag_fd_nb_recheck, what io_report calls after a check that took at least the floor, on a
 * fresh thread: the first re-ask keeps a descriptor still non-blocking NONBLOCK (it was slow
 * without waiting: preempted, a big copy); a re-ask within AG_NB_RECHECK_NS (50 ms) of the
 * thread's last is skipped, so a descriptor made blocking meanwhile stays NONBLOCK; the next
 * one after that learns BLOCKING. errno is left alone throughout. A thread preempted for 50 ms
 * between its two first re-asks (a loaded machine) may rightly learn at the second: that
 * attempt is not judged on it, and a fresh thread tries again (up to 5). */
static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void *recheck_thread(void *arg) {
    int fd = *(int *)arg;
    CHECK(syscall(SYS_fcntl, fd, F_SETFL, O_RDWR | O_NONBLOCK) == 0);
    ag_fd_nb_set(fd, 1);
    errno = 1234;
    uint64_t t0 = mono_ns();
    ag_fd_nb_recheck(fd);
    CHECK_EQ(state(fd), AG_NB_NONBLOCK);
    CHECK(syscall(SYS_fcntl, fd, F_SETFL, O_RDWR) == 0); /* blocking behind our back */
    ag_fd_nb_recheck(fd);
    uint32_t second = state(fd);
    if (mono_ns() - t0 >= 45000000u)
        return NULL; /* too slow to judge the limit: try again */
    CHECK_EQ(second, AG_NB_NONBLOCK); /* rate-limited: not asked */
    CHECK_EQ(errno, 1234);
    poll(NULL, 0, 60);
    errno = 1234;
    ag_fd_nb_recheck(fd);
    CHECK_EQ(state(fd), AG_NB_BLOCKING);
    CHECK_EQ(errno, 1234);
    return arg;
}

static void test_recheck(void) {
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
    int judged = 0;
    for (int i = 0; i < 5 && !judged; i++) {
        pthread_t th;
        void *ret;
        CHECK(pthread_create(&th, NULL, recheck_thread, &sv[0]) == 0);
        CHECK(pthread_join(th, &ret) == 0);
        judged = ret != NULL;
    }
    CHECKF(judged, "5 threads preempted for 45 ms between two calls");
    /* another thread has its own limit: its first re-ask is made (and learns BLOCKING) */
    CHECK(syscall(SYS_fcntl, sv[1], F_SETFL, O_RDWR) == 0);
    ag_fd_nb_set(sv[1], 1);
    ag_fd_nb_recheck(sv[1]);
    CHECK_EQ(state(sv[1]), AG_NB_BLOCKING);
    close(sv[0]);
    close(sv[1]);
}

/* Under a seccomp filter (sandbox.c sets ag_sandboxed before it goes in) nothing is learnt:
 * the two system calls could kill the program. An unknown non-blocking pipe stays UNKNOWN and
 * every call on it is timed; what was known before stays known (no system call needed). */
static void test_sandboxed(void) {
    int p[2], q[2];
    CHECK(syscall(SYS_pipe2, p, O_NONBLOCK) == 0);
    CHECK(syscall(SYS_pipe2, q, O_NONBLOCK) == 0);
    call_n(q[0], 1);
    CHECK_EQ(state(q[0]), AG_NB_NONBLOCK);
    atomic_store(&ag_sandboxed, 1);
    CHECK_EQ(call_n(p[0], 100).plain, 100);
    CHECK_EQ(state(p[0]), AG_NB_UNKNOWN);
    CHECK_EQ(call_n(q[0], 100).plain, 0);
    atomic_store(&ag_sandboxed, 0);
    call_n(p[0], 1);
    CHECK_EQ(state(p[0]), AG_NB_NONBLOCK);
}

static const tr_test_t tests[] = {
    {"learn", test_learn},   {"set_forget", test_set_forget}, {"race", test_race},
    {"setfl", test_setfl},   {"checks", test_checks},         {"behind_back", test_behind_back},
    {"recheck", test_recheck}, {"sandboxed", test_sandboxed},
    {NULL, NULL},
};
TR_MAIN(tests)
