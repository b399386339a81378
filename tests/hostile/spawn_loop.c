/* Hostile case: a fork/exec-heavy program (issue 13). 300 posix_spawn and 300 vfork + execve
 * of /bin/true, each waited for; the children inherit LD_PRELOAD, so each starts (and stops)
 * the agent. Registered with FLEETPROF_COLLECTOR naming an absent socket: an exiting child
 * must not wait for a collector (it did: 1 s per child with a stopped collector, 0.2 s with
 * an absent one, where the 30 s time limit now fails the case).
 * Prints: how many children ran and exited 0, per kind. */
#define _GNU_SOURCE
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define N 300

int main(void) {
    char *av[] = {"/bin/true", NULL};
    static int ok_spawn, ok_vfork; /* static: not clobbered by vfork */
    for (int i = 0; i < N; i++) {
        pid_t pid;
        int st;
        if (posix_spawn(&pid, av[0], NULL, NULL, av, environ) == 0 &&
            waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0)
            ok_spawn++;
    }
    for (int i = 0; i < N; i++) {
        int st;
        pid_t pid = vfork();
        if (pid == 0) {
            execve(av[0], av, environ);
            _exit(127);
        }
        if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0)
            ok_vfork++;
    }
    printf("posix_spawn ok %d of %d\nvfork+execve ok %d of %d\n", ok_spawn, N, ok_vfork, N);
    return 0;
}
