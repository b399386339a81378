/* Hostile case: a single-threaded program forks from a SIGALRM handler (1 kHz) while its main
 * loop allocates: without other threads glibc's fork takes no malloc lock, so a signal landing
 * inside malloc is fine. The agent's thread makes the process multi-threaded; its fork must
 * still never wait for a lock the interrupted malloc holds. Prints the forks reaped. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t forks, failed;

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
}

int main(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_REAL, &it, NULL);
    void *keep[64] = {0};
    for (unsigned long i = 0; forks < 300; i++) {
        unsigned k = (unsigned)(i * 2654435761u) % 64;
        free(keep[k]);
        keep[k] = malloc(16 + (i % 5000));
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("forks>=300: %d failed=%d\n", forks >= 300, (int)failed);
    return 0;
}
