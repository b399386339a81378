/* Hostile case: threads that block every real-time signal (the agent's included) for their
 * whole life, under a low RLIMIT_SIGPENDING (64 above the user's queued signals at start; the
 * count is the user's, other processes included, so only a wide margin is stable): the agent
 * must not queue signals they never take (at 20 wall ticks/s, 4 such threads would fill it in
 * under a second), and the application's own timer_create and sigqueue must still succeed
 * after 1.5 s of that. Prints what it could create. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static volatile int stop;

static void *blocker(void *arg) {
    (void)arg;
    sigset_t rt;
    sigemptyset(&rt);
    for (int s = SIGRTMIN; s <= SIGRTMAX; s++)
        sigaddset(&rt, s);
    pthread_sigmask(SIG_BLOCK, &rt, NULL);
    volatile unsigned long x = 0;
    while (!stop) { /* half busy, half asleep */
        for (int i = 0; i < 200000; i++)
            x++;
        usleep(2000);
    }
    return NULL;
}

static long sigq_used(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long used = -1, lim;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "SigQ: %ld/%ld", &used, &lim) == 2)
            break;
    if (f)
        fclose(f);
    return used;
}

int main(void) {
    long base = sigq_used(); /* the user's queue, other processes included */
    struct rlimit rl = {(rlim_t)base + 64, (rlim_t)base + 64};
    setrlimit(RLIMIT_SIGPENDING, &rl);
    enum { N = 4 };
    pthread_t t[N];
    for (int i = 0; i < N; i++)
        pthread_create(&t[i], NULL, blocker, NULL);
    struct timespec wait = {1, 500000000};
    nanosleep(&wait, NULL);
    /* the application's own timers and queued signals, after a second of that */
    int timers = 0, queued = 0;
    timer_t tm[8];
    for (int i = 0; i < 8; i++) {
        struct sigevent sev = {0};
        sev.sigev_notify = SIGEV_SIGNAL;
        sev.sigev_signo = SIGRTMIN + 1;
        if (timer_create(CLOCK_MONOTONIC, &sev, &tm[i]) == 0)
            timers++;
    }
    sigset_t rt1;
    sigemptyset(&rt1);
    sigaddset(&rt1, SIGRTMIN + 2);
    sigprocmask(SIG_BLOCK, &rt1, NULL);
    for (int i = 0; i < 4; i++)
        queued += sigqueue(getpid(), SIGRTMIN + 2, (union sigval){.sival_int = i}) == 0;
    stop = 1;
    for (int i = 0; i < N; i++)
        pthread_join(t[i], NULL);
    printf("timers=%d/8 sigqueue=%d/4\n", timers, queued);
    return 0;
}
