/* Hostile case: SIGTERM at its default disposition, sent by another process while the program
 * works: the process dies of SIGTERM (the agent flushes its last chunk first, invisibly). */
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int main(void) {
    printf("working\n");
    fflush(stdout);
    pid_t self = getpid();
    if (fork() == 0) {
        struct timespec ts = {0, 400000000};
        nanosleep(&ts, NULL);
        kill(self, SIGTERM);
        _exit(0);
    }
    volatile unsigned long x = 0;
    for (;;)
        x++;
}
