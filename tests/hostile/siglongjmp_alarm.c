/* Hostile case: siglongjmp out of a SIGALRM handler, 300 times: the handler must run on the
 * thread whose stack the jump buffer belongs to (never the agent's thread). Prints the jump
 * count. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <sys/time.h>
#include <unistd.h>

static sigjmp_buf jb;
static volatile sig_atomic_t jumps;

static void on_alarm(int sig) {
    (void)sig;
    siglongjmp(jb, 1);
}

int main(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    volatile unsigned long x = 0;
    while (jumps < 300) {
        if (sigsetjmp(jb, 1)) {
            jumps++;
            continue;
        }
        struct itimerval it = {{0, 0}, {0, 2000}};
        setitimer(ITIMER_REAL, &it, NULL);
        for (;;) /* busy until the alarm jumps out */
            x++;
    }
    printf("jumps=%d\n", (int)jumps);
    return 0;
}
