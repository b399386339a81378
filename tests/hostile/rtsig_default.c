/* Hostile case: a program that sends itself SIGRTMAX-3 (the agent's usual sampling signal)
 * at its default disposition must die of it, and reads SIG_DFL for it before. */
#include <signal.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

int main(void) {
    struct sigaction cur;
    sigaction(SIGRTMAX - 3, NULL, &cur);
    printf("default=%d\n", cur.sa_handler == SIG_DFL && !(cur.sa_flags & SA_SIGINFO));
    /* 0.6 s of CPU: samples are taken and interval chunks written (dying of a signal loses
     * the interval in progress, as SIGKILL would) */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    volatile unsigned long x = 0;
    (void)x; /* read once: clang warns of a variable only ever written */
    do {
        for (int i = 0; i < 100000; i++)
            x += (unsigned long)i;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 600);
    fflush(stdout);
    kill(getpid(), SIGRTMAX - 3);
    struct timespec ts = {2, 0};
    nanosleep(&ts, NULL);
    printf("survived\n");
    return 0;
}
