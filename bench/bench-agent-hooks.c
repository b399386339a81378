/* Hook overhead benchmarks (issue 4): nanoseconds the agent adds to
 *   malloc+free pairs (64 B; the sampling fast path, one TLS subtraction and a branch),
 *   uncontended pthread_mutex_lock+unlock pairs (trylock first, no clock read),
 *   1-byte reads from a pipe that has data (two vDSO clock reads around the real call),
 *   and (in-process table only) reads from an empty O_NONBLOCK pipe, EAGAIN (not timed:
 *   agent/src/hooks/fdnb.c),
 * measured as differences against a baseline in the same interleaved invocation: each round
 * runs this program three times as a child -- without the agent ("base"), with it preloaded
 * and FLEETPROF_ENABLED=0 ("off"), and preloaded and enabled ("on") -- in rotating order, and
 * the medians over rounds are compared.
 *
 * A second table measures the same ops inside one process under the agent: the interposed
 * function against libc's own (dlsym on libc.so.6) in alternating blocks -- the added ns
 * without the noise of separate processes on a loaded machine.
 *
 * Usage: bench-agent-hooks [ROUNDS]            (driver; prints both tables)
 *        bench-agent-hooks work|ab malloc|mutex|pipe   (one measurement, prints ns/op)
 *        bench-agent-hooks ab nbpipe
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench-agent-common.h"

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double work_malloc(void) {
    const int n = 20000000;
    void *volatile sink;
    double t0 = now_ns();
    for (int i = 0; i < n; i++) {
        void *p = malloc(64);
        sink = p;
        free(p);
    }
    (void)sink;
    return (now_ns() - t0) / n;
}

static double work_mutex(void) {
    const int n = 20000000;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_t *volatile m = &mu;
    double t0 = now_ns();
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(m);
        pthread_mutex_unlock(m);
    }
    return (now_ns() - t0) / n;
}

static double work_pipe(void) {
    int p[2];
    if (pipe(p) != 0)
        exit(1);
    fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
    static char buf[1 << 16];
    memset(buf, 'x', sizeof buf);
    double total = 0;
    long reads = 0;
    for (int round = 0; round < 40; round++) {
        if (write(p[1], buf, sizeof buf) != (ssize_t)sizeof buf)
            exit(1);
        char c;
        double t0 = now_ns();
        for (size_t i = 0; i < sizeof buf; i++)
            if (read(p[0], &c, 1) != 1)
                exit(1);
        total += now_ns() - t0;
        reads += sizeof buf;
    }
    return total / (double)reads;
}

/* ---- in-process A/B: the interposed symbol (through the PLT: our hook when preloaded) against
 * libc's own function (dlsym on libc.so.6), in alternating blocks, so that machine load hits
 * both sides alike. Returns the median over blocks of (hooked - direct) ns per op. ---- */
typedef void *(*malloc_fn)(size_t);
typedef void (*free_fn)(void *);
typedef int (*lock_fn)(pthread_mutex_t *);
typedef ssize_t (*read_fn)(int, void *, size_t);

static double ab(const char *what) {
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    if (!libc)
        exit(1);
    malloc_fn dmalloc = (malloc_fn)dlsym(libc, "malloc");
    free_fn dfree = (free_fn)dlsym(libc, "free");
    lock_fn dlock = (lock_fn)dlsym(libc, "pthread_mutex_lock");
    read_fn dread = (read_fn)dlsym(libc, "read");
    malloc_fn hmalloc = malloc;
    free_fn hfree = free;
    lock_fn hlock = pthread_mutex_lock;
    read_fn hread = read;
    enum { BLOCKS = 400, N = 4096 };
    static double diff[BLOCKS];
    int p[2] = {-1, -1};
    static char buf[N];
    int nb = !strcmp(what, "nbpipe");
    if (!strcmp(what, "pipe")) {
        if (pipe(p) != 0)
            exit(1);
        fcntl(p[1], F_SETPIPE_SZ, 1 << 20);
    } else if (nb && pipe2(p, O_NONBLOCK) != 0) {
        exit(1);
    }
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    for (int b = 0; b < BLOCKS; b++) {
        double t[2];
        for (int k = 0; k < 2; k++) {
            int hooked = (k + b) % 2; /* alternate which side goes first */
            if (p[0] >= 0 && !nb && write(p[1], buf, N) != N)
                exit(1);
            double t0 = now_ns();
            if (!strcmp(what, "malloc")) {
                malloc_fn m = hooked ? hmalloc : dmalloc;
                free_fn f = hooked ? hfree : dfree;
                for (int i = 0; i < N; i++) {
                    void *volatile q = m(64);
                    f(q);
                }
            } else if (!strcmp(what, "mutex")) {
                lock_fn l = hooked ? hlock : dlock;
                for (int i = 0; i < N; i++) {
                    l(&mu);
                    pthread_mutex_unlock(&mu);
                }
            } else {
                read_fn r = hooked ? hread : dread;
                char c;
                for (int i = 0; i < N; i++)
                    if (r(p[0], &c, 1) != (nb ? -1 : 1))
                        exit(1);
            }
            t[hooked] = (now_ns() - t0) / N;
        }
        diff[b] = t[1] - t[0];
    }
    qsort(diff, BLOCKS, sizeof *diff, cmpd);
    return diff[BLOCKS / 2];
}

static double run_child(const char *self, const char *mode, const char *what,
                        const char *preload, const char *enabled) {
    int fd[2];
    if (pipe(fd) != 0)
        exit(1);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        unsetenv("LD_PRELOAD");
        if (preload)
            setenv("LD_PRELOAD", preload, 1);
        setenv("FLEETPROF_ENABLED", enabled, 1);
        setenv("FLEETPROF_COLLECTOR", "none", 1);
        execl(self, self, mode, what, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    char out[128] = "";
    ssize_t n = read(fd[0], out, sizeof out - 1);
    close(fd[0]);
    int st;
    waitpid(pid, &st, 0);
    if (n <= 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "child %s failed\n", what);
        exit(1);
    }
    out[n] = '\0';
    return atof(out);
}


int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "ab")) {
        printf("%.3f\n", ab(argv[2]));
        return 0;
    }
    if (argc >= 3 && !strcmp(argv[1], "work")) {
        double ns = !strcmp(argv[2], "malloc")  ? work_malloc()
                    : !strcmp(argv[2], "mutex") ? work_mutex()
                                                : work_pipe();
        printf("%.3f\n", ns);
        return 0;
    }
    int rounds = argc > 1 ? atoi(argv[1]) : 9;
    char self[4096], lib[4096];
    if (agent_paths(self, sizeof self, lib, sizeof lib) != 0)
        return 1;
    static const char *what[] = {"malloc", "mutex", "pipe"};
    static const double budget[] = {3, 2, 50};
    printf("%d interleaved rounds; lib %s\n", rounds, lib);
    printf("%-8s %10s %10s %10s %12s %12s %8s\n", "op", "base ns", "off ns", "on ns",
           "on-base ns", "off-base ns", "budget");
    for (int w = 0; w < 3; w++) {
        double base[64], off[64], on[64];
        for (int r = 0; r < rounds && r < 64; r++) {
            for (int k = 0; k < 3; k++) { /* rotate the order within a round */
                int c = (k + r) % 3;
                if (c == 0)
                    base[r] = run_child(self, "work", what[w], NULL, "1");
                else if (c == 1)
                    off[r] = run_child(self, "work", what[w], lib, "0");
                else
                    on[r] = run_child(self, "work", what[w], lib, "1");
            }
        }
        /* medians of the per-round differences (paired: same round, same machine state) */
        double d_on[64], d_off[64];
        for (int r = 0; r < rounds; r++) {
            d_on[r] = on[r] - base[r];
            d_off[r] = off[r] - base[r];
        }
        qsort(base, (size_t)rounds, sizeof *base, cmpd);
        qsort(off, (size_t)rounds, sizeof *off, cmpd);
        qsort(on, (size_t)rounds, sizeof *on, cmpd);
        qsort(d_on, (size_t)rounds, sizeof *d_on, cmpd);
        qsort(d_off, (size_t)rounds, sizeof *d_off, cmpd);
        int m = rounds / 2;
        printf("%-8s %10.2f %10.2f %10.2f %12.2f %12.2f %8.0f\n", what[w], base[m], off[m], on[m],
               d_on[m], d_off[m], budget[w]);
        fflush(stdout);
    }
    printf("\nin-process A/B (hook vs libc's own function, alternating blocks of 4096 ops, median "
           "of 400 block differences; median over rounds):\n");
    printf("%-8s %12s %12s %8s\n", "op", "on +ns", "off +ns", "budget");
    static const char *what_ab[] = {"malloc", "mutex", "pipe", "nbpipe"};
    static const double budget_ab[] = {3, 2, 50, 5};
    for (int w = 0; w < 4; w++) {
        double on[64], off[64];
        for (int r = 0; r < rounds && r < 64; r++) {
            on[r] = run_child(self, "ab", what_ab[w], lib, "1");
            off[r] = run_child(self, "ab", what_ab[w], lib, "0");
        }
        qsort(on, (size_t)rounds, sizeof *on, cmpd);
        qsort(off, (size_t)rounds, sizeof *off, cmpd);
        printf("%-8s %12.2f %12.2f %8.0f\n", what_ab[w], on[rounds / 2], off[rounds / 2],
               budget_ab[w]);
        fflush(stdout);
    }
    return 0;
}
