/* Hostile case: exec while the agent's wall requests are in flight (issue 13). A queued
 * signal survives execve, handlers do not: a wall request queued to a thread inside execve
 * killed the new image ("Real-time signal 27": one pyenv shim run in ~30, a bash script that
 * execs at its end). 200 forked children each sleep in raw nanosleep system calls for 30 ms
 * (no hook marks them: with FLEETPROF_WALL_HZ=1000 every tick sends them a request) and then
 * exec /bin/true, through execl, execlp, execle, execv, execvp and execve in turn.
 * Before the fix 2 of 100 such children died of the signal.
 * Prints: children, how many were killed by a signal, how many exited non-zero. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define N 200

int main(void) {
    int killed = 0, bad = 0;
    for (int i = 0; i < N; i++) {
        pid_t p = fork();
        if (p == 0) {
            struct timespec t0, t, d = {0, 200000};
            clock_gettime(CLOCK_MONOTONIC, &t0);
            do {
                syscall(SYS_nanosleep, &d, NULL);
                clock_gettime(CLOCK_MONOTONIC, &t);
            } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 30000000L);
            char *av[] = {"true", NULL};
            switch (i % 6) {
            case 0: execl("/bin/true", "true", (char *)NULL); break;
            case 1: execlp("true", "true", (char *)NULL); break;
            case 2: execle("/bin/true", "true", (char *)NULL, environ); break;
            case 3: execv("/bin/true", av); break;
            case 4: execvp("true", av); break;
            default: execve("/bin/true", av, environ); break;
            }
            _exit(3);
        }
        int st;
        if (p < 0 || waitpid(p, &st, 0) != p)
            bad++;
        else if (WIFSIGNALED(st))
            killed++;
        else if (WEXITSTATUS(st) != 0)
            bad++;
    }
    printf("children=%d killed_by_signal=%d bad_exit=%d\n", N, killed, bad);
    return 0;
}
