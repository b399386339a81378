/* Hostile case: 64 threads call exit() at the same moment after 0.9 s of allocating and taking
 * locks (under the agent, also not before its first interval chunk: first_chunk.h); the
 * agent's exit path runs concurrently with live threads and other exits.
 * Prints: the thread count; exit status 3.
 * glibc before 2.41 does not serialise concurrent exit() calls: a thread that finds the exit
 * handler list empty calls _exit while another is still running destructors, so the agent's
 * last chunk (like any destructor's work) may be cut short; the interval chunks written
 * before are what the runner finds. For the same reason the program's own atexit handler
 * runs or not depending on which exit wins (CI saw it not run without the agent), so it
 * writes nothing the runner compares; it is there so that handlers run while threads exit. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "first_chunk.h"

#define N 64
static pthread_barrier_t bar;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static volatile unsigned long work;
static volatile int go_exit;

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
    for (int i = 0; !go_exit; i++) {
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
    first_chunk_wait(0.9, 10);
    go_exit = 1;
    pthread_barrier_wait(&bar);
    exit(3);
}
