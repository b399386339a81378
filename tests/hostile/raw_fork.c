/* Hostile case: children made by glibc's _Fork() (no atfork handlers: the agent's prepare and
 * child handlers never run), as a program may call it, and as the agent itself does for a
 * fork in a signal handler. Such a child holds the agent's state as the fork found it (its
 * locks possibly held by threads that are not there) and has no background thread: it waited
 * 5 s at exit joining a thread that does not exist ("background thread did not stop within
 * 5 s"), and a pthread_create in it would take the registry lock. Each of 20 children creates
 * and joins a thread, allocates, and exits through exit() (destructors run); the parent
 * counts those that exited 0 and those that took over a second.
 * Prints: children ok, slow ones. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern pid_t _Fork(void);

static void *noop(void *a) { return a; }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(void) {
    volatile double x = 0;
    (void)x; /* read once: clang warns of a variable only ever written */
    for (int i = 0; i < 3000000; i++) /* the agent is running (its thread, timers) */
        x += i;
    int ok = 0, slow = 0;
    for (int i = 0; i < 20; i++) {
        double t0 = now();
        pid_t p = _Fork();
        if (p == 0) {
            pthread_t th;
            if (pthread_create(&th, NULL, noop, NULL) == 0)
                pthread_join(th, NULL);
            free(malloc(100));
            exit(0);
        }
        int st;
        if (p > 0 && waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0)
            ok++;
        if (now() - t0 > 1.0)
            slow++;
        for (int k = 0; k < 300000; k++)
            x += k;
    }
    printf("children ok=%d slow=%d\n", ok, slow);
    return 0;
}
