/* The hostile-program suite's runner (issue 13): one case program, run plain and then under the
 * agent, must behave identically.
 *
 *   test-hostile CASE --prog PATH [--timeout S] [--repeat N] [--env K=V]...
 *                [--no-chunks REASON] [-- ARGS...]
 *
 * (registered by fp_hostile() in tests/hostile.cmake; ctest name `hostile.CASE`). Each run:
 * stdin /dev/null, stdout and stderr captured (1 MiB each), its own process group killed when
 * the run ends, a time limit (kill and fail on a hang), every FLEETPROF_* and LD_PRELOAD of the
 * caller cleared, then the case's --env entries. The agent run adds
 * LD_PRELOAD=libfleetprof.so, FLEETPROF_OUTPUT=<fresh directory>, FLEETPROF_INTERVAL=200ms
 * and FLEETPROF_COLLECTOR=none (a case's --env may override them).
 *
 * Pass: identical stdout and identical exit status or terminating signal, no timeout, and the
 * agent wrote at least one chunk, every one of which decodes (no stray temporary file). With
 * --no-chunks REASON a case states why the agent may write none (the reason is printed; any
 * chunk written must still decode). --repeat N does both runs N times (a flaky crash). Stderr
 * is not compared (it may carry pids); it is printed when a run fails.
 */
#define _GNU_SOURCE
#include "agent-common.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define HO_MAX_ENV 32
#define HO_MAX_ARGS 32
#define HO_OUT_MAX (1u << 20)

static struct {
    const char *name, *prog, *no_chunks;
    double timeout;
    int repeat;
    const char *env[HO_MAX_ENV + 1];
    int n_env;
    const char *args[HO_MAX_ARGS + 2];
    int n_args;
} ho;

typedef struct {
    int status;     /* wait status; -1: killed at the time limit */
    double seconds; /* wall time of the run */
    char *out, *err;
} ho_result_t;

/* A case at its time limit: every thread's stack of every process in its group, on stderr
 * (bounded), before the kill, so that a hang seen once (in CI) says where it waited. */
static void stacks_of_group(pid_t pgid) {
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "timeout 60 sh -c 'for p in $(pgrep -g %d); do echo \"--- hung: pid $p\"; "
             "timeout 20 gdb -p $p -batch -ex \"thread apply all bt\" 2>/dev/null | "
             "grep -E \"^(#|Thread)\" | head -80; done' >&2",
             (int)pgid);
    if (system(cmd) != 0)
        fprintf(stderr, "(no stacks: gdb or pgrep failed)\n");
}

/* Reads whatever fd has now into buf (len in/out, bounded). Returns 0 at EOF. */
static int drain(int fd, char *buf, size_t *len) {
    for (;;) {
        char tmp[8192];
        ssize_t r = read(fd, tmp, sizeof tmp);
        if (r > 0) {
            size_t n = (size_t)r;
            if (*len + n > HO_OUT_MAX - 1)
                n = HO_OUT_MAX - 1 - *len;
            memcpy(buf + *len, tmp, n);
            *len += n;
            continue;
        }
        if (r == 0)
            return 0;
        return errno == EAGAIN || errno == EINTR;
    }
}

static ho_result_t run_case(const char *outdir) {
    int po[2], pe[2];
    CHECK(pipe2(po, O_CLOEXEC) == 0 && pipe2(pe, O_CLOEXEC) == 0);
    char pre[4200];
    snprintf(pre, sizeof pre, "%s/agent/libfleetprof.so", bdir());
    fflush(NULL);
    double t0 = now_s();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        setpgid(0, 0);
        int nul = open("/dev/null", O_RDONLY);
        dup2(nul, 0);
        dup2(po[1], 1);
        dup2(pe[1], 2);
        /* a clean environment: no FLEETPROF_* or LD_PRELOAD of the caller's */
        for (int again = 1; again;) {
            again = 0;
            for (char **e = environ; *e; e++)
                if (!strncmp(*e, "FLEETPROF_", 10) || !strncmp(*e, "LD_PRELOAD=", 11) ||
                    !strncmp(*e, "OTEL_", 5)) {
                    char key[256];
                    size_t k = strcspn(*e, "=");
                    snprintf(key, sizeof key, "%.*s", (int)k, *e);
                    unsetenv(key);
                    again = 1;
                    break;
                }
        }
        /* the default dispositions and an empty mask, whatever ctest left us */
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        for (int s = 1; s < NSIG; s++)
            if (s != SIGKILL && s != SIGSTOP)
                signal(s, SIG_DFL);
        if (outdir) {
            setenv("LD_PRELOAD", pre, 1);
            setenv("FLEETPROF_OUTPUT", outdir, 1);
            setenv("FLEETPROF_INTERVAL", "200ms", 1);
            setenv("FLEETPROF_COLLECTOR", "none", 1);
        }
        for (int i = 0; i < ho.n_env; i++)
            putenv(strdup(ho.env[i]));
        execv(ho.prog, (char *const *)ho.args);
        fprintf(stderr, "exec %s: %s\n", ho.prog, strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    close(po[1]);
    close(pe[1]);
    fcntl(po[0], F_SETFL, O_NONBLOCK);
    fcntl(pe[0], F_SETFL, O_NONBLOCK);
    ho_result_t r = {.status = -1, .out = calloc(1, HO_OUT_MAX), .err = calloc(1, HO_OUT_MAX)};
    size_t lo = 0, le = 0;
    int open_o = 1, open_e = 1, exited = 0;
    double end = t0 + ho.timeout;
    /* until the process exited and both pipes reached EOF (a child it left behind holding
     * them counts against the time limit too) */
    while (!exited || open_o || open_e) {
        if (open_o)
            open_o = drain(po[0], r.out, &lo);
        if (open_e)
            open_e = drain(pe[0], r.err, &le);
        if (!exited && waitpid(pid, &r.status, WNOHANG) == pid)
            exited = 1;
        if (now_s() > end) {
            stacks_of_group(pid);
            kill(-pid, SIGKILL);
            if (!exited)
                waitpid(pid, &r.status, 0);
            r.status = -1;
            break;
        }
        struct pollfd pf[2] = {{open_o ? po[0] : -1, POLLIN, 0}, {open_e ? pe[0] : -1, POLLIN, 0}};
        poll(pf, 2, 20);
    }
    kill(-pid, SIGKILL); /* whatever the case left in its group */
    close(po[0]);
    close(pe[0]);
    r.seconds = now_s() - t0;
    return r;
}

static void describe(int st, char *buf, size_t size) {
    if (st == -1)
        snprintf(buf, size, "killed at the %.0f s time limit (hang)", ho.timeout);
    else if (WIFEXITED(st))
        snprintf(buf, size, "exit %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(buf, size, "signal %d (%s)%s", WTERMSIG(st), strsignal(WTERMSIG(st)),
                 WCOREDUMP(st) ? ", core dumped" : "");
    else
        snprintf(buf, size, "wait status %#x", st);
}

/* Prints the first line where a and b differ, with the lines around it. */
static void show_diff(const char *a, const char *b) {
    const char *pa = a, *pb = b;
    int line = 1;
    while (*pa && *pa == *pb) {
        if (*pa == '\n')
            line++;
        pa++;
        pb++;
    }
    fprintf(stderr, "stdout differs at line %d (plain %zu bytes, agent %zu bytes)\n", line,
            strlen(a), strlen(b));
    fprintf(stderr, "--- plain stdout ---\n%.4000s\n--- agent stdout ---\n%.4000s\n", a, b);
}

static void test_case(void) {
    for (int rep = 0; rep < ho.repeat; rep++) {
        ho_result_t plain = run_case(NULL);
        char sp[128], sa[128];
        describe(plain.status, sp, sizeof sp);
        CHECKF(plain.status != -1, "%s without the agent: %s\nstderr: %.4000s", ho.name, sp,
               plain.err);
        char *dir = mkout();
        ho_result_t ag = run_case(dir);
        describe(ag.status, sa, sizeof sa);
        printf("%s run %d: plain %s in %.2f s, agent %s in %.2f s\n", ho.name, rep + 1, sp,
               plain.seconds, sa, ag.seconds);
        if (ag.status != plain.status || strcmp(plain.out, ag.out) != 0) {
            fprintf(stderr, "%s run %d: plain %s, agent %s\n", ho.name, rep + 1, sp, sa);
            if (strcmp(plain.out, ag.out) != 0)
                show_diff(plain.out, ag.out);
            fprintf(stderr, "--- plain stderr ---\n%.4000s\n--- agent stderr ---\n%.4000s\n",
                    plain.err, ag.err);
            CHECKF(0, "%s: the program behaved differently under the agent", ho.name);
        }
        chunks_t *cs = load(dir); /* every chunk decodes; no temporary file left */
        if (ho.no_chunks)
            printf("%s: %d chunks (none required: %s)\n", ho.name, cs->n, ho.no_chunks);
        else
            CHECKF(cs->n >= 1, "%s: the agent wrote no chunk\nagent stderr: %.4000s", ho.name,
                   ag.err);
        if (rep == 0)
            printf("%s: %d chunks; stdout %zu bytes:\n%.2000s", ho.name, cs->n, strlen(ag.out),
                   ag.out);
        free_chunks(cs);
        rmrf(dir);
        free(dir);
        free(plain.out);
        free(plain.err);
        free(ag.out);
        free(ag.err);
    }
}

static void usage(void) {
    fprintf(stderr, "usage: test-hostile CASE --prog PATH [--timeout S] [--repeat N] "
                    "[--env K=V]... [--no-chunks REASON] [-- ARGS...]\n");
    exit(2);
}

int main(int argc, char **argv) {
    if (argc < 2)
        usage();
    ho.name = argv[1];
    ho.timeout = 30;
    ho.repeat = 1;
    int i = 2;
    while (i < argc) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!v)
            usage();
        if (!strcmp(a, "--prog"))
            ho.prog = v;
        else if (!strcmp(a, "--timeout"))
            ho.timeout = atof(v);
        else if (!strcmp(a, "--repeat"))
            ho.repeat = atoi(v);
        else if (!strcmp(a, "--no-chunks"))
            ho.no_chunks = v;
        else if (!strcmp(a, "--env") && ho.n_env < HO_MAX_ENV)
            ho.env[ho.n_env++] = v;
        else
            usage();
        i += 2; /* the option and its value */
    }
    if (!ho.prog || ho.timeout <= 0 || ho.repeat < 1)
        usage();
    ho.args[ho.n_args++] = ho.prog;
    for (; i < argc && ho.n_args < HO_MAX_ARGS; i++)
        ho.args[ho.n_args++] = argv[i];
    ho.args[ho.n_args] = NULL;
    /* the runner's own limit: both runs of every repetition, plus reading the chunks */
    char limit[32];
    snprintf(limit, sizeof limit, "%d", (int)(ho.timeout * 2 * ho.repeat + 60));
    setenv("TR_TIMEOUT", limit, 1);
    const tr_test_t tests[] = {{ho.name, test_case}, {0}};
    return tr_main(tests, 1, argv);
}
