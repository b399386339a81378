/* A tiny test runner in the spirit of libuv's: every test runs in its own child process with a
 * time limit, so a crash or a hang fails that one test and the others still run.
 *
 *   static void test_x(void) { CHECK(1 + 1 == 2); }
 *   static const tr_test_t tests[] = {{"x", test_x}, {0}};
 *   TR_MAIN(tests)
 *
 * `prog NAME...` runs only the named tests; TR_TIMEOUT (seconds, default 300) bounds each.
 * Prints "N passed, N failed" last, and exits non-zero if any failed.
 *
 * Cleanup, whatever the outcome: each test runs in its own process group, killed when the test
 * ends (daemons a test started cannot outlive it), and resources registered in the file named
 * by $TR_CLEANUP_FILE (a line "kafka PORT" per broker started by tests/support/kafka.h) are
 * released afterwards, so a failed test never leaves a broker holding a port.
 */
#ifndef TR_RUNNER_H
#define TR_RUNNER_H

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    const char *name;
    void (*fn)(void);
} tr_test_t;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            fflush(stderr);                                                                        \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

#define CHECKF(cond, ...)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);               \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            fflush(stderr);                                                                        \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        CHECKF(a_ == b_, "%lld != %lld", a_, b_);                                                  \
    } while (0)

/* Stops what the test registered in its cleanup file (see the header comment). */
static inline void tr_cleanup(const char *file) {
    FILE *f = fopen(file, "r");
    if (!f)
        return;
    char kind[32];
    int port;
    while (fscanf(f, "%31s %d", kind, &port) == 2) {
        if (strcmp(kind, "kafka") == 0) {
            char cmd[1024];
            const char *src = getenv("FLEETPROF_SRC");
            snprintf(cmd, sizeof cmd, "KAFKA_PORT=%d %s/deploy/kafka/stop.sh >/dev/null 2>&1", port,
                     src ? src : ".");
            if (system(cmd) != 0)
                fprintf(stderr, "runner: stopping the broker on port %d failed\n", port);
        }
    }
    fclose(f);
    unlink(file);
}

static inline int tr_run_one(const tr_test_t *t, int timeout) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    fflush(stdout);
    char cleanup[64];
    snprintf(cleanup, sizeof cleanup, "/tmp/tr-cleanup-%d", (int)getpid());
    unlink(cleanup);
    setenv("TR_CLEANUP_FILE", cleanup, 1);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        alarm((unsigned)timeout);
        t->fn();
        fflush(stdout);
        fflush(stderr);
        _exit(0);
    }
    setpgid(pid, pid); /* also here: whichever of parent and child runs first */
    int st = 0;
    waitpid(pid, &st, 0);
    kill(-pid, SIGKILL); /* whatever the test started in its group */
    tr_cleanup(cleanup);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (ok)
        printf("ok   %-40s %8.1f ms\n", t->name, ms);
    else if (WIFSIGNALED(st))
        printf("FAIL %-40s signal %d%s\n", t->name, WTERMSIG(st),
               WTERMSIG(st) == SIGALRM ? " (timeout)" : "");
    else
        printf("FAIL %-40s exit %d\n", t->name, WEXITSTATUS(st));
    fflush(stdout);
    return ok;
}

/* Arguments: case names to run (default: all), or -NAME to run all but NAME. A name that
 * matches no case is an error (a typo must not quietly run fewer cases). */
static inline int tr_main(const tr_test_t *tests, int argc, char **argv) {
    int timeout = getenv("TR_TIMEOUT") ? atoi(getenv("TR_TIMEOUT")) : 300;
    int passed = 0, failed = 0, positive = 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        const char *name = argv[i] + (argv[i][0] == '-');
        int known = 0;
        for (const tr_test_t *t = tests; t->name; t++)
            known |= strcmp(name, t->name) == 0;
        if (!known) {
            printf("FAIL no test case named '%s'\n", name);
            return 1;
        }
        positive |= argv[i][0] != '-';
    }
    for (const tr_test_t *t = tests; t->name; t++) {
        int selected = !positive;
        for (int i = 1; i < argc; i++) {
            if (argv[i][0] == '-' && strcmp(argv[i] + 1, t->name) == 0)
                selected = 0;
            else if (strcmp(argv[i], t->name) == 0)
                selected = 1;
        }
        if (!selected)
            continue;
        if (tr_run_one(t, timeout))
            passed++;
        else
            failed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed || passed == 0 ? 1 : 0;
}

#define TR_MAIN(tests)                                                                             \
    int main(int argc, char **argv) { return tr_main(tests, argc, argv); }

#endif
