/* Hostile case: a SIGTERM handler that does a graceful shutdown (three steps with sleeps and
 * output), then chains to the disposition it replaced (SIG_DFL: restore it and re-raise), as
 * servers do. The shutdown must complete, and the process must die of SIGTERM. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct sigaction prev;

static void say(const char *s) {
    if (write(1, s, strlen(s)) < 0)
        _exit(9);
}

static void on_term(int sig) {
    for (int i = 1; i <= 3; i++) {
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
        say(i == 1 ? "shutdown step 1\n" : i == 2 ? "shutdown step 2\n" : "shutdown step 3\n");
    }
    if (prev.sa_handler == SIG_DFL) {
        sigaction(sig, &prev, NULL);
        raise(sig);
    } else if (prev.sa_handler != SIG_IGN) {
        prev.sa_handler(sig);
    }
}

int main(void) {
    struct sigaction sa = {0};
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, &prev);
    printf("previous_was_default=%d\n", prev.sa_handler == SIG_DFL);
    fflush(stdout);
    volatile unsigned long x = 0;
    (void)x; /* read once: clang warns of a variable only ever written */
    for (long i = 0; i < 100000000; i++)
        x += (unsigned long)i;
    kill(getpid(), SIGTERM);
    for (int i = 0; i < 20; i++) { /* the handler ran on return from kill(); wait for death */
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
    }
    say("still alive\n");
    return 0;
}
