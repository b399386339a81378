/* Hostile case: a single-threaded program's SIGALRM handler (setitimer, 1 ms) checks that it
 * runs on the main thread: a process-directed signal must never be delivered to the agent's
 * thread. Prints the number of handler runs on another thread (0) and whether enough ran. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t runs, wrong;
static pid_t main_tid;

static void on_alarm(int sig) {
    (void)sig;
    runs++;
    if ((pid_t)syscall(SYS_gettid) != main_tid)
        wrong++;
}

int main(void) {
    main_tid = (pid_t)syscall(SYS_gettid);
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_REAL, &it, NULL);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    volatile unsigned long x = 0;
    (void)x; /* read once: clang warns of a variable only ever written */
    do { /* half busy, half sleeping: both states get the alarm */
        for (int i = 0; i < 100000; i++)
            x += (unsigned long)i;
        usleep(500);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 800);
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("handler_on_other_thread=%d\nenough_alarms=%d\n", (int)wrong, runs > 50);
    return 0;
}
