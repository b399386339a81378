/* Hostile case: thread churn. 1,000 threads, at most 48 alive at once (each living ~2-80 ms:
 * a little CPU, a mutex, a short sleep, its own SIGUSR1 per round), one in 4 started through
 * libc's pthread_create looked up by version (as a runtime that starts its threads itself
 * does), next to 600 idle threads; the main thread starts a new one as each is joined. The
 * SIGUSR1 handler is SA_ONSTACK (as Go's runtime installs every handler): under the agent it
 * runs on the alternate stack the agent gave the thread.
 * Under the agent: threads register themselves (its pthread_create wrapper) while its
 * background thread's /proc/self/task scans (frequent: they keep finding the libc-started
 * threads; long: 650 entries) run, and registry slots are reused many times over. A thread
 * started after a scan's listing and registered before the scan took the registry lock was
 * once retired as dead; its slot's next owner unmapped the live thread's alternate stack at
 * its own exit, and the thread's next signal (its SIGUSR1, or a sample) died in the kernel's
 * signal frame setup: SIGSEGV, SI_KERNEL, as a JVM under test-agent-java-stress did. That
 * crashed 4 runs of 10 of this program (2-core machine, loaded).
 * Prints: the thread count, the sum of their results, the handler count; exit status 0. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define TOTAL 1000
#define ALIVE 48
#define IDLE 600 /* idle threads all along: a longer /proc/self/task to list */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t shared;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int finished;
static _Atomic uint64_t handled;

/* The program's own signal, on the alternate stack if the thread has one (SA_ONSTACK, as Go's
 * runtime installs every handler): under the agent, the one it gave the thread. */
static void on_usr1(int sig) {
    (void)sig;
    handled++;
}

static void *idle(void *arg) {
    (void)arg;
    pthread_mutex_lock(&mu);
    while (!finished)
        pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
    return NULL;
}

static void *thr(void *arg) {
    uint64_t id = (uint64_t)(uintptr_t)arg, x = id * 0x9e3779b97f4a7c15ull + 1, sum = 0;
    unsigned spins = 20000 + (unsigned)(id % 7) * 10000; /* ~0.05-0.2 ms of CPU */
    int rounds = 3 + (int)(id % 8) * 10; /* lives ~2-80 ms */
    for (int round = 0; round < rounds; round++) {
        for (unsigned i = 0; i < spins; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            sum += x >> 60;
        }
        pthread_kill(pthread_self(), SIGUSR1);
        pthread_mutex_lock(&mu);
        shared += sum & 0xff;
        pthread_mutex_unlock(&mu);
        struct timespec ts = {0, 300000 + (long)(id % 5) * 100000};
        nanosleep(&ts, NULL);
    }
    return (void *)(uintptr_t)(sum & 0xffff);
}

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
static create_fn libc_create;

/* One in 4 through libc's own pthread_create, looked up in libc by version (as a runtime that
 * creates its threads itself does): threads the agent's wrapper does not see start. */
static int create(pthread_t *th, uint64_t id) {
    return (id % 4 == 1 ? libc_create : pthread_create)(th, NULL, thr, (void *)(uintptr_t)id);
}

int main(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_ONSTACK | SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    libc_create = libc ? (create_fn)dlvsym(libc, "pthread_create", "GLIBC_2.34") : NULL;
    if (!libc_create && libc)
        libc_create = (create_fn)dlvsym(libc, "pthread_create", "GLIBC_2.2.5");
    if (!libc_create) {
        printf("no libc pthread_create\n");
        return 1;
    }
    static pthread_t t[ALIVE], idlers[IDLE];
    uint64_t total = 0;
    int started = 0, done = 0;
    pthread_attr_t small;
    pthread_attr_init(&small);
    pthread_attr_setstacksize(&small, 64 << 10);
    for (int i = 0; i < IDLE; i++)
        if (pthread_create(&idlers[i], &small, idle, NULL) != 0) {
            printf("pthread_create failed\n");
            return 1;
        }
    for (; started < ALIVE; started++)
        if (create(&t[started], (uint64_t)started) != 0) {
            printf("pthread_create failed\n");
            return 1;
        }
    while (done < TOTAL) {
        int k = done % ALIVE;
        void *r;
        pthread_join(t[k], &r);
        total += (uint64_t)(uintptr_t)r;
        done++;
        if (started < TOTAL) {
            if (create(&t[k], (uint64_t)started) != 0) {
                printf("pthread_create failed\n");
                return 1;
            }
            started++;
        }
    }
    pthread_mutex_lock(&mu);
    finished = 1;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
    for (int i = 0; i < IDLE; i++)
        pthread_join(idlers[i], NULL);
    printf("threads=%d sum=%llu shared=%llu handled=%llu\n", done, (unsigned long long)total,
           (unsigned long long)shared, (unsigned long long)handled);
    return 0;
}
