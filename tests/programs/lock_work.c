/* Lock workloads for tests/test-agent-lock.c (run under libfleetprof).
 *
 *   lock_work long SECONDS    holder_thread holds a mutex 30 ms at a time; waiter_site blocks
 *                             on it (>= 10 ms waits: LOCK events); prints waits and total ns
 *   lock_work short SECONDS   holder_thread holds the mutex 2 ms at a time; two waiter_site
 *                             threads wait for it (contended, sub-threshold: aggregates)
 *   lock_work rw SECONDS      a writer holds an rwlock 25 ms; readers in rd_site wait
 *   lock_work flood SECONDS   8 threads, 30 ms holds with 1 ms thresholds (rate cap test)
 *   lock_work uncontended N   N lock/unlock pairs on a private mutex; prints ns per pair
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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


static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t g_rw = PTHREAD_RWLOCK_INITIALIZER;
static volatile int g_stop;
static double g_hold = 0.030;
static _Atomic uint64_t g_waits, g_wait_ns, g_all_ns;
static double g_thresh = 0.010;
static useconds_t g_waiter_hold = 0, g_waiter_gap = 7000;

static void *holder_thread(void *arg) {
    (void)arg;
    while (!g_stop) {
        pthread_mutex_lock(&g_mu);
        sleep_us((long)(g_hold * 1e6));
        pthread_mutex_unlock(&g_mu);
        sleep_us(2000);
    }
    return NULL;
}

__attribute__((noinline)) void waiter_site(void) {
    double t0 = now_s();
    pthread_mutex_lock(&g_mu);
    double w = now_s() - t0;
    if (g_waiter_hold)
        sleep_us(g_waiter_hold);
    pthread_mutex_unlock(&g_mu);
    g_all_ns += (uint64_t)(w * 1e9);
    if (w >= g_thresh) {
        g_waits++;
        g_wait_ns += (uint64_t)(w * 1e9);
    }
    sleep_us(g_waiter_gap); /* not a divisor of the holder's cycle: no phase locking */
}

static void *waiter_thread(void *arg) {
    (void)arg;
    while (!g_stop)
        waiter_site();
    return NULL;
}

static void *writer_thread(void *arg) {
    (void)arg;
    while (!g_stop) {
        pthread_rwlock_wrlock(&g_rw);
        sleep_us(25000);
        pthread_rwlock_unlock(&g_rw);
        sleep_us(3000);
    }
    return NULL;
}

static _Atomic uint64_t g_rd_waits;
__attribute__((noinline)) void rd_site(void) {
    double t0 = now_s();
    pthread_rwlock_rdlock(&g_rw);
    g_rd_waits += now_s() - t0 >= 0.010;
    pthread_rwlock_unlock(&g_rw);
    sleep_us(7000);
}

static void *reader_thread(void *arg) {
    (void)arg;
    while (!g_stop)
        rd_site();
    return NULL;
}

static void run_threads(void *(*a)(void *), int na, void *(*b)(void *), int nb, double secs) {
    pthread_t th[32];
    int n = 0;
    for (int i = 0; i < na; i++)
        pthread_create(&th[n++], NULL, a, NULL);
    for (int i = 0; i < nb; i++)
        pthread_create(&th[n++], NULL, b, NULL);
    sleep_us((long)(secs * 1e6));
    g_stop = 1;
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    double secs = argc > 2 ? atof(argv[2]) : 3;
    if (!strcmp(argv[1], "long")) {
        run_threads(holder_thread, 1, waiter_thread, 1, secs);
        printf("waits=%llu wait_ns=%llu all_ns=%llu mutex=%p\n", (unsigned long long)g_waits,
               (unsigned long long)g_wait_ns, (unsigned long long)g_all_ns, (void *)&g_mu);
    } else if (!strcmp(argv[1], "short")) {
        g_hold = 0.002; /* 2 ms holds (sleeping): waits well under the 10 ms threshold */
        g_waiter_gap = 1300;
        run_threads(holder_thread, 1, waiter_thread, 2, secs);
        printf("waits=%llu all_ns=%llu\n", (unsigned long long)g_waits,
               (unsigned long long)g_all_ns);
    } else if (!strcmp(argv[1], "rw")) {
        run_threads(writer_thread, 1, reader_thread, 2, secs);
        printf("rw ok rd_waits=%llu\n", (unsigned long long)g_rd_waits);
    } else if (!strcmp(argv[1], "flood")) {
        g_thresh = 0.001;
        g_waiter_hold = 2000;
        g_waiter_gap = 1000;
        run_threads(waiter_thread, 8, NULL, 0, secs);
        printf("waits=%llu wait_ns=%llu\n", (unsigned long long)g_waits,
               (unsigned long long)g_wait_ns);
    } else {
        return 2;
    }
    return 0;
}
