/* A program that forks N children (default 200), each exiting at once, and waits for each:
 * run under bench-spawn (`--prog build/bench/fork-loop`) it measures what the agent adds to a
 * fork in a profiled process -- the atfork handlers, the child's start when it follows, and the
 * page tables of the agent's memory that the kernel copies -- against the plain program. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 200;
    for (int i = 0; i < n; i++) {
        pid_t p = fork();
        if (p == 0)
            _exit(7);
        int st;
        if (p < 0 || waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 7)
            return 1;
    }
    return 0;
}
