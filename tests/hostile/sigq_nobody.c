/* Hostile case (issue 27): the queued-signal slots of RLIMIT_SIGPENDING are the program's.
 * Run as root, it sets RLIMIT_SIGPENDING to argv[1], becomes nobody (a user with nothing
 * queued) and execs itself, so the agent starts under that limit. Then, argv[2]:
 *   own:      the program's own 10 ms POSIX timer (SIGEV_SIGNAL) ticks for 1 s with 2 busy
 *             threads, then it queues one signal to itself with sigqueue (the threads still
 *             running): prints whether
 *             timer_create and sigqueue succeeded (at a limit of 1, sigqueue fails with EAGAIN
 *             in both runs: the timer holds the slot), whether the timer ticked, and whether
 *             its handler saw every expiration between arming and disarming (each delivery
 *             counts 1 + si_overrun: an expiration while the signal is still pending is an
 *             overrun, not a delivery, so that sum is the same on a loaded machine, where no
 *             thread of the program may run for tens of ms; a tick count threshold was not:
 *             < 50 ticks a second under load, with and without the agent). Only a signal taken
 *             away from the program (or a timer that is not its own) loses expirations;
 *   blockall: every signal blocked from the start, 4 busy threads for 1 s: prints whether at
 *             most 2 signals are pending in the process then (per-thread SigPnd and shared
 *             ShdPnd bits, the threads alive).
 * Not root: the limit is set without the switch to nobody. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static volatile int stop;
static volatile sig_atomic_t ticks, expirations;

static void on_tick(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    ticks++;
    expirations += 1 + si->si_overrun;
}

static void *spin(void *arg) {
    (void)arg;
    volatile unsigned long x = 0;
    while (!stop)
        x++;
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static pthread_t g_t[4];
static int g_n;

static void start_threads(int n, double seconds) {
    g_n = n;
    for (int i = 0; i < n; i++)
        pthread_create(&g_t[i], NULL, spin, NULL);
    double end = now_s() + seconds;
    while (now_s() < end) {
        struct timespec d = {0, 5000000};
        nanosleep(&d, NULL); /* EINTR from the program's own timer: fine */
    }
}

static void stop_threads(void) {
    stop = 1;
    for (int i = 0; i < g_n; i++)
        pthread_join(g_t[i], NULL);
}

static int own(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_tick;
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    sigaction(SIGRTMIN + 1, &sa, NULL);
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_SIGNAL;
    sev.sigev_signo = SIGRTMIN + 1;
    timer_t tm;
    int tc = timer_create(CLOCK_MONOTONIC, &sev, &tm) == 0 ? 0 : errno;
    double a0 = now_s(); /* armed between a0 and a1 */
    if (tc == 0) {
        struct itimerspec its = {{0, 10000000}, {0, 10000000}};
        timer_settime(tm, 0, &its, NULL);
    }
    double a1 = now_s();
    sigset_t one; /* stays pending: blocked in every thread (they inherit it) */
    sigemptyset(&one);
    sigaddset(&one, SIGRTMIN + 2);
    sigprocmask(SIG_BLOCK, &one, NULL);
    start_threads(2, 1.0); /* the threads live on: their timers too */
    int sq = sigqueue(getpid(), SIGRTMIN + 2, (union sigval){.sival_int = 1}) == 0 ? 0 : errno;
    /* The count so far, exactly: with only main left and the signal blocked, the timer's
     * signal is taken synchronously; its si_overrun counts every expiration up to that moment
     * (between t0 and t1), those while a delivery waited for a thread to run included. */
    stop_threads();
    sigset_t tick;
    sigemptyset(&tick);
    sigaddset(&tick, SIGRTMIN + 1);
    sigprocmask(SIG_BLOCK, &tick, NULL);
    double t0 = now_s();
    siginfo_t si;
    struct timespec wait = {1, 0};
    if (tc == 0 && sigtimedwait(&tick, &si, &wait) == SIGRTMIN + 1)
        expirations += 1 + si.si_overrun;
    double t1 = now_s();
    struct itimerspec off = {{0, 0}, {0, 0}};
    if (tc == 0)
        timer_settime(tm, 0, &off, NULL);
    long lo = (long)((t0 - a1) / 0.010) - 1, hi = (long)((t1 - a0) / 0.010) + 1; /* +-1: rounding */
    fprintf(stderr, "ticks=%d expirations=%d due=%ld..%ld\n", (int)ticks, (int)expirations, lo,
            hi);
    printf("timer_create=%s ticked=%d all_expirations_seen=%d sigqueue=%s\n",
           tc ? strerrorname_np(tc) : "ok", ticks > 0,
           tc == 0 && expirations >= lo && expirations <= hi, sq ? strerrorname_np(sq) : "ok");
    return 0;
}

static int bits(const char *status_path, const char *key) {
    FILE *f = fopen(status_path, "r");
    char line[256];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key)))
            n = __builtin_popcountll(strtoull(line + strlen(key), NULL, 16));
    if (f)
        fclose(f);
    return n;
}

static int blockall(void) {
    sigset_t all;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, NULL);
    start_threads(4, 1.0);
    int pending = bits("/proc/self/status", "ShdPnd:");
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    char path[300];
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
            pending += bits(path, "SigPnd:");
        }
    if (d)
        closedir(d);
    stop_threads();
    printf("pending_at_most_2=%d\n", pending <= 2);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    if (argc == 3) { /* the first image: limit, user, exec */
        rlim_t n = (rlim_t)atol(argv[1]);
        struct rlimit rl = {n, n};
        setrlimit(RLIMIT_SIGPENDING, &rl);
        if (geteuid() == 0) {
            const char *out = getenv("FLEETPROF_OUTPUT"); /* the agent's, as nobody */
            if (out)
                chmod(out, 01777);
            if (setgroups(0, NULL) != 0 || setresgid(65534, 65534, 65534) != 0 ||
                setresuid(65534, 65534, 65534) != 0)
                return 3;
        }
        char *args[] = {argv[0], argv[1], argv[2], "child", NULL};
        execv("/proc/self/exe", args);
        return 4;
    }
    return strcmp(argv[2], "own") == 0 ? own() : blockall();
}
