/* Hostile case: 64 threads call exit() at the same moment after 0.9 s of allocating and taking
 * locks (the agent's exit path runs concurrently with live threads and other exits).
 * Prints: the thread count; exit status 3.
 * glibc before 2.41 does not serialise concurrent exit() calls: a thread that finds the exit
 * handler list empty calls _exit while another is still running destructors, so the agent's
 * last chunk (like any destructor's work) may be cut short; the interval chunks of the first
 * 0.9 s are what the runner finds. For the same reason the program's own atexit handler runs
 * or not depending on which exit wins (CI saw it not run without the agent), so it writes
 * nothing the runner compares; it is there so that handlers run while threads exit. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N 64
static pthread_barrier_t bar;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static volatile unsigned long work;

static void at_exit(void) {
    /* what a program's handler does at exit: frees, takes a lock, touches shared state */
    void *p = malloc(128);
    pthread_mutex_lock(&mu);
    work++;
    pthread_mutex_unlock(&mu);
    free(p);
}

static void *thr(void *arg) {
    (void)arg;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0;; i++) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > 900000000L)
            break;
        void *p = malloc(64 + (size_t)i % 4000);
        pthread_mutex_lock(&mu);
        work++;
        pthread_mutex_unlock(&mu);
        free(p);
    }
    pthread_barrier_wait(&bar);
    exit(3);
}

int main(void) {
    atexit(at_exit);
    pthread_barrier_init(&bar, NULL, N + 1);
    pthread_t t[N];
    for (int i = 0; i < N; i++)
        if (pthread_create(&t[i], NULL, thr, NULL) != 0) {
            printf("pthread_create failed\n");
            return 1;
        }
    printf("threads=%d\n", N);
    fflush(stdout);
    pthread_barrier_wait(&bar);
    exit(3);
}
