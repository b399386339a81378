/* Workloads for tests/test-insights.c (run under libfleetprof): each mode exhibits exactly one
 * pattern an insight rule looks for, in a function of its own (the planted site), on top of a
 * little ordinary work; `mixed` is the balanced null workload that should raise nothing.
 *
 *   insight_work lock SECS    4 threads; log_line holds one mutex for 2 ms per call
 *   insight_work churn SECS   build_strings allocates and frees small blocks in a loop
 *   insight_work leak SECS    leaky_site keeps 1 MiB per second; cache_fill grows 2 MiB/s for
 *                             8 s then stops; stable_site keeps ~4 MiB, replacing blocks
 *   insight_work smallio SECS log_record write()s 16 bytes per call to a temporary file
 *   insight_work spin SECS    poll_flag spins on sched_yield until a flag another thread sets
 *                             every 50 ms (and clears at once)
 *   insight_work throw SECS   parse_int throws on 9 of 10 inputs, its caller catches
 *   insight_work copy SECS    copy_frames memcpy()s 1 MiB frames between buffers
 *   insight_work overload SECS
 *                             1,100 connection threads (past the agent's 1,024 thread slots),
 *                             each serving a request every 100 ms: the agent's drops
 *   insight_work mixed SECS   2 threads: compute, a few allocations, small copies, a lock
 *                             held briefly, 4 KiB writes: nothing dominates
 *   insight_work truth SECS   known figures for the KPMs: allocates and frees 4 KiB..64 KiB
 *                             blocks (prints alloc_bytes=), two threads contend for a mutex
 *                             held 2 ms, timing every lock call that found it held (prints
 *                             lock_wait_ns=), writes 4 KiB blocks to a temporary file (prints
 *                             io_bytes=)
 *   insight_work spike SECS START LEN
 *                             steady allocations in steady_site; from START to START+LEN s
 *                             spike_site allocates 64 MiB/s more; prints spike_from= and
 *                             spike_to= (unix seconds); SECS of wall time
 * Each mode runs until the process has used SECS of CPU time (leak: SECS of wall time) and
 * prints "done" (and mode figures) at exit. */
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdexcept>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static volatile uint64_t sink;
static double secs, t_end, wall_end;
static int by_wall; /* leak: SECS of wall time */

/* Until the process has used SECS of CPU (the sample counts then do not depend on the
 * machine's load), or 30x SECS of wall time; leak mode: SECS of wall time. */
static int more(void) {
    if (by_wall)
        return now_s() < t_end;
    return cpu_s(CLOCK_PROCESS_CPUTIME_ID) < secs && now_s() < wall_end;
}

/* Ordinary CPU work: about us microseconds of the thread's CPU time. */
static NOINLINE void compute(int us) {
    double end = cpu_s(CLOCK_THREAD_CPUTIME_ID) + us / 1e6;
    uint64_t x = sink + 1;
    while (cpu_s(CLOCK_THREAD_CPUTIME_ID) < end)
        for (int i = 0; i < 5000; i++)
            x = x * 6364136223846793005ull + 1442695040888963407ull;
    sink = x;
}

/* ---- lock ---- */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static NOINLINE void log_line(void) {
    pthread_mutex_lock(&log_mu);
    compute(2000);
    pthread_mutex_unlock(&log_mu);
}
static void *lock_thread(void *) {
    while (more()) {
        compute(500);
        log_line();
    }
    return NULL;
}

/* ---- churn ---- */
static NOINLINE void build_strings(void) {
    void *v[64];
    for (int k = 0; k < 64; k++) {
        v[k] = malloc(16 + (size_t)(k * 37) % 240);
        ((volatile char *)v[k])[0] = (char)k;
    }
    for (int k = 0; k < 64; k++)
        free(v[k]);
}

/* ---- leak ---- */
static NOINLINE void leaky_site(void) { /* 64 KiB kept, 16 per second */
    char *p = (char *)malloc(64 << 10);
    memset(p, 1, 64 << 10);
    sink += (uintptr_t)p;
}
static NOINLINE void cache_fill(void) { /* 128 KiB kept */
    char *p = (char *)calloc(1, 128 << 10);
    p[0] = 1;
    sink += (uintptr_t)p;
}
static void *stable_slots[64];
static NOINLINE void stable_site(int k) { /* replaces one of 64 blocks of 64 KiB */
    free(stable_slots[k % 64]);
    stable_slots[k % 64] = malloc(64 << 10);
    memset(stable_slots[k % 64], 2, 64 << 10);
}
static void run_leak(void) {
    double t0 = now_s();
    long leaked = 0, cached = 0; /* blocks of 64 KiB, 128 KiB: kept at the rates, whatever
                                    the machine's load does to the loop */
    for (int tick = 0; more(); tick++) {
        double el = now_s() - t0;
        for (; leaked < (long)(el * 16); leaked++)
            leaky_site();
        for (; cached < (long)((el < 8 ? el : 8) * 16); cached++)
            cache_fill();
        for (int k = 0; k < 4; k++)
            stable_site(tick * 4 + k);
        compute(2000);
        usleep(60000);
    }
    printf("leaked=%ld cached=%ld\n", leaked * (64 << 10), cached * (128 << 10));
}

/* ---- small I/O ---- */
static NOINLINE long log_record(int fd, long n) {
    char rec[16];
    memset(rec, 'x', sizeof rec);
    rec[15] = '\n';
    for (long i = 0; i < 200; i++)
        if (write(fd, rec, sizeof rec) != (ssize_t)sizeof rec)
            abort();
    return n + 200;
}
static void run_smallio(void) {
    char path[] = "/tmp/insight-io-XXXXXX";
    int fd = mkstemp(path);
    unlink(path);
    long n = 0;
    while (more()) {
        n = log_record(fd, n);
        compute(100);
        if (n % 100000 == 0)
            ftruncate(fd, 0), lseek(fd, 0, SEEK_SET);
    }
    close(fd);
    printf("writes=%ld\n", n);
}

/* ---- spin ---- */
static volatile int flag;
static NOINLINE void poll_flag(void) {
    while (!flag)
        sched_yield();
    flag = 0;
}
static void *setter(void *) {
    while (more()) {
        usleep(50000);
        flag = 1;
    }
    flag = 1;
    return NULL;
}

/* ---- throw ---- */
static NOINLINE int parse_int(int i) {
    if (i % 10)
        throw std::invalid_argument("not a number: " + std::to_string(i));
    return i;
}
static NOINLINE long parse_all(void) {
    long ok = 0;
    for (int i = 0; i < 100; i++) {
        try {
            ok += parse_int(i);
        } catch (const std::invalid_argument &) {
        }
    }
    return ok;
}

/* ---- copy ---- */
static char *frame_a, *frame_b;
static void *(*volatile memcpy_p)(void *, const void *, size_t) = memcpy;
static NOINLINE void copy_frames(void) {
    for (int k = 0; k < 8; k++) {
        memcpy_p(frame_b, frame_a, 1 << 20);
        memcpy_p(frame_a, frame_b, 1 << 20);
    }
}

/* ---- mixed ---- */
static pthread_mutex_t mixed_mu = PTHREAD_MUTEX_INITIALIZER;
static NOINLINE void handle_request(int fd, char *buf) {
    compute(800);
    char *tmp = (char *)malloc(4096);
    memcpy_p(tmp, buf, 4096);
    compute(200);
    pthread_mutex_lock(&mixed_mu);
    sink += (uintptr_t)tmp[5];
    pthread_mutex_unlock(&mixed_mu);
    if (write(fd, tmp, 4096) != 4096)
        abort();
    free(tmp);
}
static void *mixed_thread(void *) {
    char path[] = "/tmp/insight-mixed-XXXXXX";
    int fd = mkstemp(path);
    unlink(path);
    char buf[4096];
    memset(buf, 3, sizeof buf);
    for (long n = 1; more(); n++) {
        handle_request(fd, buf);
        if (n % 2000 == 0)
            ftruncate(fd, 0), lseek(fd, 0, SEEK_SET);
        usleep(500);
    }
    close(fd);
    return NULL;
}

/* ---- truth ---- */
static pthread_mutex_t truth_mu = PTHREAD_MUTEX_INITIALIZER;
static long long truth_wait_ns[2];
static int truth_id;
static void *truth_locker(void *) {
    int me = __sync_fetch_and_add(&truth_id, 1);
    while (more()) {
        if (pthread_mutex_trylock(&truth_mu)) {
            double t0 = now_s();
            pthread_mutex_lock(&truth_mu);
            truth_wait_ns[me] += (long long)((now_s() - t0) * 1e9);
        }
        compute(2000);
        pthread_mutex_unlock(&truth_mu);
        compute(300);
    }
    return NULL;
}
static NOINLINE long long alloc_site(int k) {
    size_t n = 4096u << (k % 5);
    char *p = (char *)malloc(n);
    p[0] = (char)k;
    sink += (uintptr_t)p[0];
    free(p);
    return (long long)n;
}
static NOINLINE long long write_site(int fd) {
    static char blk[4096];
    if (write(fd, blk, sizeof blk) != (ssize_t)sizeof blk)
        abort();
    return (long long)sizeof blk;
}
static void run_truth(void) {
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, truth_locker, NULL);
    char path[] = "/tmp/insight-truth-XXXXXX";
    int fd = mkstemp(path);
    unlink(path);
    long long ab = 0, iob = 0;
    for (int k = 0; more(); k++) {
        for (int i = 0; i < 50; i++)
            ab += alloc_site(k * 50 + i);
        iob += write_site(fd);
        if (k % 4096 == 4095)
            ftruncate(fd, 0), lseek(fd, 0, SEEK_SET);
        compute(50);
    }
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    close(fd);
    printf("alloc_bytes=%lld lock_wait_ns=%lld io_bytes=%lld\n", ab,
           truth_wait_ns[0] + truth_wait_ns[1], iob);
}

/* ---- spike ---- */
static NOINLINE void steady_site(void) { free(malloc(8192)); }
static NOINLINE void spike_site(void) { /* 1 MiB */
    char *p = (char *)malloc(1 << 20);
    p[0] = 1;
    sink += (uintptr_t)p[0];
    free(p);
}
static void run_spike(double start, double len) {
    double t0 = now_s();
    long spiked = 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double real0 = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    while (now_s() < t_end) {
        double el = now_s() - t0;
        for (int i = 0; i < 20; i++)
            steady_site();
        if (el >= start && el < start + len)
            for (; spiked < (long)((el - start) * 64); spiked++)
                spike_site();
        compute(500);
        usleep(5000);
    }
    printf("spike_from=%.3f spike_to=%.3f spiked=%ld\n", real0 + start, real0 + start + len,
           spiked);
}

/* ---- overload ---- */
/* A thread per connection, 1,100 connections: more threads than the agent's registry holds
 * (1,024), so the ones past it are not profiled and what they would have given is counted as
 * dropped (thread_limit). Each thread serves a request every 100 ms: a little CPU and a few
 * allocations. */
#define CONN_THREADS 1100
static pthread_barrier_t conn_up;

static NOINLINE void serve_connection(void) {
    char *b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (char *)malloc(512 + 512 * i);
    for (int i = 0; i < 8; i++)
        b[i][0] = (char)i, sink += (uint64_t)b[i][0];
    for (int i = 0; i < 8; i++)
        free(b[i]);
    compute(50);
}

static void *conn_thread(void *arg) {
    (void)arg;
    pthread_barrier_wait(&conn_up);
    for (;;) {
        serve_connection();
        usleep(100000);
    }
}

static void run_overload(void) {
    pthread_barrier_init(&conn_up, NULL, CONN_THREADS + 1);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 128 << 10);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED); /* never joined: exit ends them */
    int n = 0;
    for (pthread_t t; n < CONN_THREADS && !pthread_create(&t, &a, conn_thread, NULL);)
        n++;
    if (n < CONN_THREADS) { /* the barrier waits for all: a machine that cannot make them */
        fprintf(stderr, "only %d threads\n", n);
        exit(3);
    }
    pthread_barrier_wait(&conn_up);
    while (more())
        usleep(50000);
    /* exit with the threads running, as a server does (the last chunk is cut at exit) */
    printf("threads=%d\n", n);
}

static void threads(int n, void *(*fn)(void *)) {
    pthread_t t[8];
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, fn, NULL);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: insight_work MODE SECS (modes: see the comment on top)\n");
        return 2;
    }
    const char *m = argv[1];
    secs = atof(argv[2]);
    t_end = now_s() + secs;
    wall_end = now_s() + 30 * secs;
    by_wall = !strcmp(m, "leak") || !strcmp(m, "spike");
    if (!strcmp(m, "lock")) {
        threads(4, lock_thread);
    } else if (!strcmp(m, "churn")) {
        while (more())
            for (int k = 0; k < 200; k++)
                build_strings();
    } else if (!strcmp(m, "leak")) {
        run_leak();
    } else if (!strcmp(m, "smallio")) {
        run_smallio();
    } else if (!strcmp(m, "spin")) {
        pthread_t t;
        pthread_create(&t, NULL, setter, NULL);
        while (more()) {
            poll_flag();
            compute(2000);
        }
        pthread_join(t, NULL);
    } else if (!strcmp(m, "throw")) {
        long ok = 0;
        while (more())
            ok += parse_all(), compute(50);
        printf("ok=%ld\n", ok);
    } else if (!strcmp(m, "copy")) {
        frame_a = (char *)calloc(1, 1 << 20);
        frame_b = (char *)calloc(1, 1 << 20);
        while (more())
            copy_frames(), compute(1000);
    } else if (!strcmp(m, "truth")) {
        run_truth();
    } else if (!strcmp(m, "spike") && argc >= 5) {
        run_spike(atof(argv[3]), atof(argv[4]));
    } else if (!strcmp(m, "overload")) {
        run_overload();
    } else if (!strcmp(m, "mixed")) {
        threads(2, mixed_thread);
    } else {
        fprintf(stderr, "unknown mode %s\n", m);
        return 2;
    }
    printf("done\n");
    return 0;
}
