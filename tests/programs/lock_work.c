/* Lock workloads for tests/test-agent-lock.c (run under libfleetprof). Every waiter times its
 * own lock call with CLOCK_MONOTONIC (the truth the agent's figures are compared with).
 *
 *   lock_work long SECONDS    holder_thread holds a mutex 30 ms at a time; waiter_site blocks
 *                             on it (>= 10 ms waits: LOCK events); prints waits and total ns
 *   lock_work short SECONDS   holder_thread sleeps 1 ms inside the mutex; two waiter_site
 *                             threads wait for it (contended, sub-threshold: aggregates);
 *                             prints all_ns (the time of every lock call that found the mutex
 *                             held: trylock first), waits (>= 10 ms) and their wait_ns
 *   lock_work rw SECONDS      a writer holds an rwlock 25 ms; readers in rd_site wait
 *   lock_work flood SECONDS   8 threads, 30 ms holds with 1 ms thresholds (rate cap test)
 *   lock_work pingpong SECONDS HOLD_NS THRESH_NS
 *                             two threads in pp_site hand a mutex to each other (HOLD_NS after
 *                             the other one blocks): as many short contended waits per second
 *                             as the machine allows; prints calls, waits >= THRESH_NS, their
 *                             ns, the ns of every lock call, the process CPU and the rate
 *   lock_work cond SECONDS    cond_waiter_site waits on a condvar; the signaller signals and
 *                             keeps the mutex 30 ms before unlocking: each wake-up re-acquires
 *                             for ~30 ms (LOCK events); prints rounds and the re-acquire ns
 *   lock_work idle SECONDS    consumers wait ~200 ms for work (pthread_cond_wait in
 *                             idle_wait_site, pthread_cond_timedwait with a far deadline in
 *                             idle_timed_site, a 50 ms timedwait that expires in
 *                             idle_timeout_site); the producer releases the mutex at once:
 *                             no contention (no LOCK events expected)
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
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
static _Atomic uint64_t g_waits, g_wait_ns, g_all_ns, g_calls;
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

/* g_contended_only (short mode): only calls that find the mutex held are timed (the program's
 * trylock, then the timed pthread_mutex_lock), as the agent only times those; a thread that
 * the machine preempts around an uncontended call is not waiting for the lock. */
static int g_contended_only;

__attribute__((noinline)) void waiter_site(void) {
    double t0 = now_s();
    if (g_contended_only && pthread_mutex_trylock(&g_mu) == 0) {
        pthread_mutex_unlock(&g_mu);
        sleep_us(g_waiter_gap);
        return;
    }
    t0 = now_s();
    pthread_mutex_lock(&g_mu);
    double w = now_s() - t0;
    if (g_waiter_hold)
        sleep_us(g_waiter_hold);
    pthread_mutex_unlock(&g_mu);
    g_all_ns += (uint64_t)(w * 1e9);
    g_calls++;
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

/* ---- pingpong: the flood of the issue (many short waits just above a low threshold) ----
 * Two threads hand the mutex to each other: each one, holding it, waits until the other has
 * announced that it is about to lock (g_want), spins HOLD_NS more (the other reaches its
 * futex wait), unlocks, and waits until the other has the mutex before locking again. So
 * nearly every lock call is contended and waits about HOLD_NS plus the futex wake-up. The
 * spin loops yield, so the hand-off also works (slower) when only one core is free. */
static pthread_mutex_t g_pp = PTHREAD_MUTEX_INITIALIZER;
static long g_pp_hold;
static uint64_t g_pp_thresh;
static _Atomic int g_want[2];
static _Atomic uint64_t g_pp_calls, g_pp_waits, g_pp_wait_ns, g_pp_all_ns;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void spin_ns(long ns) {
    uint64_t end = now_ns() + (uint64_t)ns;
    while (now_ns() < end)
        ;
}

/* Spins until g_want[i] == v (or the end), yielding after a while. */
static void await_want(int i, int v) {
    for (int n = 0; g_want[i] != v && !g_stop; n++)
        if (n > 200)
            sched_yield();
}

typedef struct {
    int id;
    uint64_t calls, waits, wait_ns, all_ns;
} pp_t;

__attribute__((noinline)) void pp_site(pp_t *p) {
    g_want[p->id] = 1;
    uint64_t t0 = now_ns();
    pthread_mutex_lock(&g_pp);
    uint64_t w = now_ns() - t0;
    g_want[p->id] = 0;
    await_want(!p->id, 1);
    spin_ns(g_pp_hold);
    pthread_mutex_unlock(&g_pp);
    p->calls++;
    p->all_ns += w;
    if (w >= g_pp_thresh) {
        p->waits++;
        p->wait_ns += w;
    }
    await_want(!p->id, 0);
}

static void *pp_thread(void *arg) {
    pp_t p = {(int)(intptr_t)arg, 0, 0, 0, 0};
    while (!g_stop)
        pp_site(&p);
    g_want[p.id] = 1; /* the other one must not wait for us any more */
    g_pp_calls += p.calls;
    g_pp_waits += p.waits;
    g_pp_wait_ns += p.wait_ns;
    g_pp_all_ns += p.all_ns;
    return NULL;
}

/* ---- cond: the signaller keeps the mutex 30 ms after signalling ---- */
static pthread_mutex_t g_cm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_ready, g_waiting;
static _Atomic uint64_t g_rounds, g_reacq_ns, g_signal_ns, g_timeouts;

__attribute__((noinline)) void cond_waiter_site(void) {
    pthread_mutex_lock(&g_cm);
    g_waiting = 1;
    while (!g_ready && !g_stop)
        pthread_cond_wait(&g_cv, &g_cm);
    if (g_ready) { /* signalled: the time since the signal is the re-acquisition */
        g_ready = 0;
        g_rounds++;
        g_reacq_ns += now_ns() - g_signal_ns;
    }
    g_waiting = 0;
    pthread_mutex_unlock(&g_cm);
}

static void *cond_waiter(void *arg) {
    (void)arg;
    while (!g_stop)
        cond_waiter_site();
    return NULL;
}

static void *cond_signaller(void *arg) {
    (void)arg;
    while (!g_stop) {
        sleep_us(20000);
        pthread_mutex_lock(&g_cm);
        if (g_waiting && !g_ready) {
            g_ready = 1;
            g_signal_ns = now_ns();
            pthread_cond_signal(&g_cv);
            sleep_us(30000); /* keeps the mutex: the woken waiter cannot re-acquire */
        }
        pthread_mutex_unlock(&g_cm);
    }
    pthread_mutex_lock(&g_cm);
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_cm);
    return NULL;
}

/* ---- idle: consumers wait for work, the producer releases at once ---- */
static int g_work[2];

static _Atomic uint64_t g_late; /* wake-ups >= 10 ms after the broadcast (a loaded machine) */

static void idle_late(int work) {
    if (work && now_ns() - g_signal_ns >= 10000000u)
        g_late++;
}

__attribute__((noinline)) void idle_wait_site(void) {
    pthread_mutex_lock(&g_cm);
    while (!g_work[0] && !g_stop)
        pthread_cond_wait(&g_cv, &g_cm);
    idle_late(g_work[0]);
    g_work[0] = 0;
    pthread_mutex_unlock(&g_cm);
}

__attribute__((noinline)) void idle_timed_site(void) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 5;
    pthread_mutex_lock(&g_cm);
    while (!g_work[1] && !g_stop)
        pthread_cond_timedwait(&g_cv, &g_cm, &dl);
    idle_late(g_work[1]);
    g_work[1] = 0;
    pthread_mutex_unlock(&g_cm);
}

static pthread_cond_t g_cv_never = PTHREAD_COND_INITIALIZER;
__attribute__((noinline)) void idle_timeout_site(void) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_nsec += 50000000;
    if (dl.tv_nsec >= 1000000000) {
        dl.tv_sec++;
        dl.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&g_cm);
    if (pthread_cond_timedwait(&g_cv_never, &g_cm, &dl) != 0) {
        g_timeouts++;
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        if ((now.tv_sec - dl.tv_sec) * 1000000000L + (now.tv_nsec - dl.tv_nsec) >= 10000000L)
            g_late++; /* back >= 10 ms after the deadline */
    }
    pthread_mutex_unlock(&g_cm);
}

static void *idle_consumer(void *arg) {
    while (!g_stop)
        arg ? idle_timed_site() : idle_wait_site();
    return NULL;
}

static void *idle_timeouter(void *arg) {
    (void)arg;
    while (!g_stop)
        idle_timeout_site();
    return NULL;
}

static void *idle_producer(void *arg) {
    (void)arg;
    while (!g_stop) {
        sleep_us(200000);
        pthread_mutex_lock(&g_cm);
        g_work[0] = g_work[1] = 1;
        g_rounds++;
        g_signal_ns = now_ns();
        pthread_cond_broadcast(&g_cv);
        pthread_mutex_unlock(&g_cm);
    }
    pthread_mutex_lock(&g_cm);
    pthread_cond_broadcast(&g_cv);
    pthread_mutex_unlock(&g_cm);
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
        g_hold = 0.001; /* the holder sleeps 1 ms inside: waits well under 10 ms */
        g_waiter_gap = 1300;
        g_contended_only = 1;
        run_threads(holder_thread, 1, waiter_thread, 2, secs);
        printf("waits=%llu wait_ns=%llu all_ns=%llu calls=%llu\n", (unsigned long long)g_waits,
               (unsigned long long)g_wait_ns, (unsigned long long)g_all_ns,
               (unsigned long long)g_calls);
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
    } else if (!strcmp(argv[1], "pingpong") && argc >= 5) {
        g_pp_hold = atol(argv[3]);
        g_pp_thresh = strtoull(argv[4], NULL, 10);
        struct timespec c0, c1;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
        double t0 = now_s();
        pthread_t th[2];
        for (intptr_t i = 0; i < 2; i++)
            pthread_create(&th[i], NULL, pp_thread, (void *)i);
        sleep_us((long)(secs * 1e6));
        g_stop = 1;
        for (int i = 0; i < 2; i++)
            pthread_join(th[i], NULL);
        double el = now_s() - t0;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
        double cpu = (double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) / 1e9;
        printf("calls=%llu waits=%llu wait_ns=%llu all_ns=%llu cpu_ns=%llu rate=%.0f\n",
               (unsigned long long)g_pp_calls, (unsigned long long)g_pp_waits,
               (unsigned long long)g_pp_wait_ns, (unsigned long long)g_pp_all_ns,
               (unsigned long long)(cpu * 1e9), (double)g_pp_waits / el);
    } else if (!strcmp(argv[1], "cond")) {
        run_threads(cond_waiter, 1, cond_signaller, 1, secs);
        printf("rounds=%llu reacq_ns=%llu mutex=%p\n", (unsigned long long)g_rounds,
               (unsigned long long)g_reacq_ns, (void *)&g_cm);
    } else if (!strcmp(argv[1], "idle")) {
        pthread_t th[4];
        pthread_create(&th[0], NULL, idle_consumer, NULL);
        pthread_create(&th[1], NULL, idle_consumer, (void *)1);
        pthread_create(&th[2], NULL, idle_timeouter, NULL);
        pthread_create(&th[3], NULL, idle_producer, NULL);
        sleep_us((long)(secs * 1e6));
        g_stop = 1;
        for (int i = 0; i < 4; i++)
            pthread_join(th[i], NULL);
        printf("rounds=%llu timeouts=%llu late=%llu\n", (unsigned long long)g_rounds,
               (unsigned long long)g_timeouts, (unsigned long long)g_late);
    } else {
        return 2;
    }
    return 0;
}
