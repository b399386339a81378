/* A test service for incidents (issue 32), linked to the agent. Worker threads serve
 * "requests" (a named span around ~2 ms of CPU in steady_work, then a short pause); main
 * drives the load and prints what it did, with unix-ns times, for the test to compare with
 * the agent's incident chunks.
 *   incident_svc spikes N GAP_S   steady 6 s, then N spikes of 5 s every GAP_S s, 8 s tail:
 *                                 during a spike every request also spins 250 ms in
 *                                 spike_spin, a function it otherwise never calls
 *   incident_svc slowdown MS      steady 6 s, then one spike of 5 s in which every request
 *                                 spins MS ms in spike_spin, 6 s tail
 *   incident_svc pileup           steady 6 s, then the lock held 4 s while a request arrives on
 *                                 a thread of its own every 50 ms for 3 s (active requests grow)
 *   incident_svc many SECS        16 workers, 20 ms between requests, for SECS s
 *   incident_svc hang SECS [STEADY]  steady 5 s (or STEADY s), then main holds the lock
 *                                 every request takes (in wait_for_lock) for SECS s, 4 s tail
 *   incident_svc ramp SECS        steady SECS/2 s, then three times the request rate, fast
 *   incident_svc ramp STEADY_S RAMP_S   steady STEADY_S s, then the pause between requests
 *                                 shrinks linearly over RAMP_S s to a third of the rate's
 *                                 period (three times the rate), then 10 s at that rate
 *   incident_svc manual           steady 4 s, fleetprof_capture(), 8 s tail
 *   incident_svc signal           its own SIGUSR2 handler and a SIGUSR2 to itself 2 s in, then
 *                                 SIG_DFL again and one more SIGUSR2 4.5 s in, 8 s tail
 *   incident_svc density SECS     main spins in dense_spin for SECS s (workers steady), then
 *                                 fleetprof_capture(), 2.5 s tail; prints "cpu_ns" (the
 *                                 process's CPU, getrusage) and "capture_end_ns"
 *   incident_svc exit return|term steady 4 s, fleetprof_capture(), exits 1 s later (during the
 *                                 capture's burst): returns from main, or dies of SIGTERM
 * Output lines: "spike_start <ns>", "spike_end <ns>" (the last spike request done),
 * "hang_start <ns>", "hang_end <ns>", "pileup_start <ns>", "pileup_end <ns>", "capture_rc <rc>", "exit_ns <ns>", "requests <n>",
 * "steady_requests <n>" (ramp: those done before the ramp), "slow_requests <n>" (requests of
 * 100 ms or more),
 * "max_request_us <us>", "app_saw_dfl 0|1", "own_handler_ran <n>", "app_saw_own 0|1",
 * "signal_ns <ns>".
 */
#define _GNU_SOURCE
#include "fleetprof.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define WORKERS 2

static _Atomic int g_stop, g_spike, g_spinning;
static _Atomic long g_pause_us = 8000;
static _Atomic uint64_t g_requests, g_slow_requests, g_max_request_ns;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile uint64_t g_sink;

static uint64_t now_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* each function spins in its own loop: the CPU is its own (self) cost */
#define BURN(ns)                                                                                   \
    do {                                                                                           \
        uint64_t end_ = now_ns(CLOCK_THREAD_CPUTIME_ID) + (ns), x_ = g_sink;                       \
        while (now_ns(CLOCK_THREAD_CPUTIME_ID) < end_)                                             \
            for (int i_ = 0; i_ < 1000; i_++)                                                      \
                x_ = x_ * 6364136223846793005ull + 1442695040888963407ull;                         \
        g_sink = x_;                                                                               \
    } while (0)

static __attribute__((noinline)) void steady_work(void) { BURN(2000000); }
static _Atomic uint64_t g_spike_ns = 250000000; /* spike_spin's CPU per request */
static __attribute__((noinline)) void spike_spin(void) { BURN(atomic_load(&g_spike_ns)); }
static __attribute__((noinline)) void dense_spin(double secs) {
    uint64_t end = now_ns(CLOCK_MONOTONIC) + (uint64_t)(secs * 1e9);
    while (now_ns(CLOCK_MONOTONIC) < end)
        BURN(1000000);
}
static __attribute__((noinline)) void wait_for_lock(void) {
    pthread_mutex_lock(&g_lock);
    pthread_mutex_unlock(&g_lock);
}

/* One request: a named span around the lock, steady_work and (in a spike) spike_spin. */
static void serve_one(uint64_t *id) {
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    uint8_t trace[16] = {1}, span[8];
    uint64_t n = ++*id;
    memcpy(trace + 8, &n, 8);
    uint32_t pid = (uint32_t)getpid(); /* ids unique across runs ingested together */
    memcpy(trace + 1, &pid, 4);
    memcpy(span, &n, 8);
    span[7] |= 1;
    fleetprof_span_begin_ids(trace, span, "GET /work");
    wait_for_lock();
    steady_work();
    if (atomic_load(&g_spike)) {
        atomic_fetch_add(&g_spinning, 1);
        if (atomic_load(&g_spike))
            spike_spin();
        atomic_fetch_sub(&g_spinning, 1);
    }
    fleetprof_span_end();
    uint64_t d = now_ns(CLOCK_MONOTONIC) - t0, max = atomic_load(&g_max_request_ns);
    while (d > max && !atomic_compare_exchange_weak(&g_max_request_ns, &max, d))
        ;
    if (d >= 100000000ull)
        atomic_fetch_add(&g_slow_requests, 1);
    atomic_fetch_add(&g_requests, 1);
}

static void *worker(void *arg) {
    uint64_t id = (uint64_t)(uintptr_t)arg << 40;
    while (!atomic_load(&g_stop)) {
        serve_one(&id);
        usleep((useconds_t)atomic_load(&g_pause_us));
    }
    return NULL;
}

/* A pile-up's request: one, on its own thread. */
static void *one_request(void *arg) {
    uint64_t id = (uint64_t)(uintptr_t)arg << 40;
    serve_one(&id);
    return NULL;
}

static void sleep_s(double s) {
    if (s <= 0)
        return;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static _Atomic int g_own_usr2;
static void own_usr2(int sig) {
    (void)sig;
    atomic_fetch_add(&g_own_usr2, 1);
}

/* The program's own SIGUSR2 handler first (the agent's capture signal, FLEETPROF_CAPTURE_SIGNAL,
 * must not take it), then SIG_DFL again and SIGUSR2: the agent's capture. */
static void signal_mode(void) {
    struct sigaction sa, old;
    sigaction(SIGUSR2, NULL, &old);
    printf("app_saw_dfl %d\n", old.sa_handler == SIG_DFL && !(old.sa_flags & SA_SIGINFO));
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = own_usr2;
    sigaction(SIGUSR2, &sa, NULL);
    sleep_s(2);
    kill(getpid(), SIGUSR2);
    sleep_s(0.5);
    printf("own_handler_ran %d\n", atomic_load(&g_own_usr2));
    sa.sa_handler = SIG_DFL;
    sigaction(SIGUSR2, &sa, &old);
    printf("app_saw_own %d\n", old.sa_handler == own_usr2);
    sleep_s(2);
    printf("signal_ns %llu\n", (unsigned long long)now_ns(CLOCK_REALTIME));
    kill(getpid(), SIGUSR2); /* SIG_DFL would kill the process: the agent's handler is back */
    sleep_s(8);
}

/* steady_s at the steady rate, then the pause shrinks linearly over ramp_s (0: at once) so
 * that the request rate triples, then hold_s at that rate */
static void ramp(double steady_s, double ramp_s, double hold_s) {
    const long pause0 = atomic_load(&g_pause_us), work = 2000, pause1 = (pause0 + work) / 3 - work;
    sleep_s(steady_s);
    printf("steady_requests %llu\n", (unsigned long long)atomic_load(&g_requests));
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    for (double t = 0; t < ramp_s; t = (double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e9) {
        atomic_store(&g_pause_us, pause0 - (long)((double)(pause0 - pause1) * t / ramp_s));
        sleep_s(0.1);
    }
    atomic_store(&g_pause_us, pause1);
    sleep_s(hold_s);
}

/* Steady 6 s, then main holds the lock every request takes and a new request arrives on a
 * thread of its own every 50 ms for 3 s (60 of them, all waiting): the active requests grow.
 * The lock is let go 4 s after it was taken; 4 s tail. */
static void pileup(void) {
    enum { N = 60 };
    pthread_t th[N];
    sleep_s(6);
    pthread_mutex_lock(&g_lock);
    printf("pileup_start %llu\n", (unsigned long long)now_ns(CLOCK_REALTIME));
    uint64_t t0 = now_ns(CLOCK_MONOTONIC);
    for (uintptr_t i = 0; i < N; i++) {
        pthread_create(&th[i], NULL, one_request, (void *)(i + 100));
        sleep_s(0.05);
    }
    sleep_s(4 - (double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e9);
    pthread_mutex_unlock(&g_lock);
    printf("pileup_end %llu\n", (unsigned long long)now_ns(CLOCK_REALTIME));
    for (int i = 0; i < N; i++)
        pthread_join(th[i], NULL);
    sleep_s(4);
}

/* secs of steady load from 16 workers (14 more, each pausing 20 ms between requests): many
 * requests active at once, their number going up and down. */
static void many(double secs) {
    enum { MORE = 14 };
    pthread_t th[MORE];
    atomic_store(&g_pause_us, 20000);
    for (uintptr_t i = 0; i < MORE; i++)
        pthread_create(&th[i], NULL, worker, (void *)(i + 10));
    sleep_s(secs);
    atomic_store(&g_stop, 1);
    for (int i = 0; i < MORE; i++)
        pthread_join(th[i], NULL);
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    pthread_t th[WORKERS];
    for (uintptr_t i = 0; i < WORKERS; i++)
        pthread_create(&th[i], NULL, worker, (void *)(i + 1));
    if (!strcmp(argv[1], "spikes") && argc == 4) {
        int n = atoi(argv[2]);
        double gap = atof(argv[3]);
        sleep_s(6);
        for (int i = 0; i < n; i++) {
            printf("spike_start %llu\n", (unsigned long long)now_ns(CLOCK_REALTIME));
            atomic_store(&g_spike, 1);
            sleep_s(5);
            atomic_store(&g_spike, 0);
            uint64_t t0 = now_ns(CLOCK_MONOTONIC);
            while (atomic_load(&g_spinning)) /* the last spike requests finish */
                sleep_s(0.01);
            printf("spike_end %llu\n", (unsigned long long)now_ns(CLOCK_REALTIME));
            sleep_s((i + 1 < n ? gap - 5 : 8) - (double)(now_ns(CLOCK_MONOTONIC) - t0) / 1e9);
        }
    } else if (!strcmp(argv[1], "slowdown") && argc == 3) {
        sleep_s(6);
        atomic_store(&g_spike_ns, (uint64_t)(atof(argv[2]) * 1e6));
        printf("spike_start %llu\n", (unsigned long long)now_ns(CLOCK_REALTIME));
        atomic_store(&g_spike, 1);
        sleep_s(5);
        atomic_store(&g_spike, 0);
        while (atomic_load(&g_spinning))
            sleep_s(0.01);
        printf("spike_end %llu\n", (unsigned long long)now_ns(CLOCK_REALTIME));
        sleep_s(6);
    } else if (!strcmp(argv[1], "pileup") && argc == 2) {
        pileup();
    } else if (!strcmp(argv[1], "many") && argc == 3) {
        many(atof(argv[2]));
    } else if (!strcmp(argv[1], "hang") && (argc == 3 || argc == 4)) {
        sleep_s(argc == 4 ? atof(argv[3]) : 5);
        pthread_mutex_lock(&g_lock);
        printf("hang_start %llu\n", (unsigned long long)now_ns(CLOCK_REALTIME));
        sleep_s(atof(argv[2]));
        pthread_mutex_unlock(&g_lock);
        printf("hang_end %llu\n", (unsigned long long)now_ns(CLOCK_REALTIME));
        sleep_s(4);
    } else if (!strcmp(argv[1], "ramp") && (argc == 3 || argc == 4)) {
        ramp(argc == 3 ? atof(argv[2]) / 2 : atof(argv[2]), argc == 3 ? 0 : atof(argv[3]),
             argc == 3 ? atof(argv[2]) / 2 : 10);
    } else if (!strcmp(argv[1], "exit") && argc == 3) {
        sleep_s(4);
        printf("capture_rc %d\n", fleetprof_capture());
        sleep_s(1);
        printf("exit_ns %llu\n", (unsigned long long)now_ns(CLOCK_REALTIME));
        if (!strcmp(argv[2], "term"))
            kill(getpid(), SIGTERM); /* dies of it (the agent's last chunk first) */
        else if (strcmp(argv[2], "return"))
            return 2;
    } else if (!strcmp(argv[1], "signal")) {
        signal_mode();
    } else if (!strcmp(argv[1], "density") && argc == 3) {
        dense_spin(atof(argv[2]));
        printf("capture_rc %d\n", fleetprof_capture());
        sleep_s(2.5);
    } else if (!strcmp(argv[1], "manual")) {
        sleep_s(4);
        printf("capture_rc %d\n", fleetprof_capture());
        sleep_s(8);
    } else {
        return 2;
    }
    atomic_store(&g_stop, 1);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(th[i], NULL);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("cpu_ns %llu\n", (unsigned long long)((uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) *
                                                       1000000000ull +
                                                   (uint64_t)(ru.ru_utime.tv_usec +
                                                              ru.ru_stime.tv_usec) * 1000ull));
    printf("requests %llu\nslow_requests %llu\nmax_request_us %llu\n",
           (unsigned long long)atomic_load(&g_requests),
           (unsigned long long)atomic_load(&g_slow_requests),
           (unsigned long long)atomic_load(&g_max_request_ns) / 1000);
    return 0;
}
