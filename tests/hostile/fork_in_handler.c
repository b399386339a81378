/* Hostile case: a single-threaded program forks from a SIGALRM handler while its main loop
 * allocates: without other threads glibc's fork takes no malloc lock, so a signal landing
 * inside malloc is fine. The agent's thread makes the process multi-threaded; its fork must
 * still never wait for a lock the interrupted malloc holds. Prints the forks reaped.
 *
 * The timer is one-shot, re-armed 1 ms after each handler ends (timer_settime is
 * async-signal-safe): a periodic 1 kHz timer livelocks the program by itself whenever a
 * fork and wait take over 1 ms -- the signal is pending again as the handler returns, and the
 * main loop never runs -- which a loaded machine reaches without any agent. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t forks, failed;
static timer_t g_timer;

static void arm_1ms(void) {
    struct itimerspec one = {{0, 0}, {0, 1000000}};
    timer_settime(g_timer, 0, &one, NULL);
}

static void on_alarm(int sig) {
    (void)sig;
    pid_t p = fork();
    if (p == 0)
        _exit(7);
    int st;
    if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 7)
        failed++;
    else
        forks++;
    arm_1ms();
}

int main(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct sigevent ev = {.sigev_notify = SIGEV_SIGNAL, .sigev_signo = SIGALRM};
    if (timer_create(CLOCK_MONOTONIC, &ev, &g_timer) != 0)
        return 2;
    arm_1ms();
    void *keep[64] = {0};
    for (unsigned long i = 0; forks < 300; i++) {
        unsigned k = (unsigned)(i * 2654435761u) % 64;
        free(keep[k]);
        keep[k] = malloc(16 + (i % 5000));
    }
    timer_delete(g_timer);
    printf("forks>=300: %d failed=%d\n", forks >= 300, (int)failed);
    return 0;
}
