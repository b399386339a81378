/* Agent acceptance tests: real programs (tests/programs/fp-work.c) run under libfleetprof,
 * their chunks read back from FLEETPROF_OUTPUT with the codec (and `fleetprof fold`).
 *
 * Programs are linked to the agent (fp-work-linked) so that the same tests run in sanitizer
 * builds; the LD_PRELOAD and `fleetprof run` cases use the plain fp-work and are skipped under
 * sanitizers (a sanitized .so cannot be preloaded into an uninstrumented program).
 * Statistical checks use tolerances of several standard deviations for the sample counts the
 * runs produce (a few hundred samples at least), on a noisy shared 2-core machine.
 */
#define _GNU_SOURCE
#include "cm/chunk.h"
#include "cm/error.h"
#include "cm/wire.h"
#include "support/runner.h"
#include "agent-common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#ifdef FP_SANITIZED
static const int sanitized = 1;
#else
static const int sanitized = 0;
#endif
#ifdef FP_TSAN
static const int tsan = 1;
#else
static const int tsan = 0;
#endif

/* ---- running programs ---- */

/* ---- reading chunks ---- */

/* CPU cores the process (agent: the agent's estimated CPU) used over [from, to) (unix ns),
 * from the chunk headers, each chunk's spread evenly over its interval. */
static double cores_of(const chunks_t *cs, uint64_t from, uint64_t to, int agent) {
    double cpu = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_header_t *h = &cs->c[i]->header;
        uint64_t a = h->start_unix_ns > from ? h->start_unix_ns : from;
        uint64_t b = h->end_unix_ns < to ? h->end_unix_ns : to;
        if (b > a)
            cpu += (double)(agent ? h->agent_cpu_ns : h->process_cpu_ns) * (double)(b - a) /
                   (double)(h->end_unix_ns - h->start_unix_ns);
    }
    return cpu / (double)(to - from);
}

static double cpu_share(const chunks_t *cs, uint64_t from, uint64_t to) {
    return cores_of(cs, from, to, 0);
}

/* The sample rate a controller can reach: the set point, unless the process gets so little
 * CPU that hz samples per second of each running thread's CPU (FLEETPROF_CPU_HZ, the
 * controller's shortest period: 100 by default) fall short of it; at most one per kernel tick
 * (HZ=250 here: a burning thread's CPU-time timer fires on ticks). A loaded shared machine can
 * starve a test. */
static double reachable(double target, double cores, double hz) {
    double most = cores * (hz < 250 ? hz : 250);
    return most < target ? most : target;
}


/* ---- tests ---- */

/* CPU profile accuracy: burn_b does 3x burn_a's work, so it must get 75% of CPU samples, and
 * the sum of sample weights must match the process CPU time measured by the program. A fixed
 * 4 ms period (controller off; one kernel tick at HZ=250, the finest a CPU-time timer fires)
 * makes the sample count (~750) independent of the machine's load. */
static void test_cpu_accuracy(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[4096];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", "FLEETPROF_SERVICE=acc",
                         "FLEETPROF_VERSION=1.2.3", "FLEETPROF_CONTROLLER=0",
                         "FLEETPROF_CPU_HZ=250", NULL};
    const char *argv[] = {prog, "cpu", "3", NULL};
    int st = run(env, argv, 240, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    uint64_t cpu = out_u64(out, "cpu_ns=");
    chunks_t *cs = load(dir);
    CHECKF(cs->n >= 3, "%d chunks for a >= 3 s run at 1 s intervals", cs->n);
    tot_t all = total(cs, CM_EV_CPU, NULL, 0), a = total(cs, CM_EV_CPU, "burn_a", 0),
          b = total(cs, CM_EV_CPU, "burn_b", 0);
    double share = (double)b.weight / (double)(a.weight + b.weight);
    double est = (double)all.weight / (double)cpu;
    printf("# cpu: %llu samples, burn_b share %.3f (expect 0.75), weight/cpu %.3f, %d chunks\n",
           (unsigned long long)all.samples, share, est, cs->n);
    /* On a loaded machine a thread runs in short slices and one signal may stand for several
     * periods (timer overruns, counted in the row): rows can be fewer than CPU/period. */
    CHECKF(a.samples + b.samples >= 250, "only %llu samples",
           (unsigned long long)(a.samples + b.samples));
    /* 1 sd of the share with n rows is sqrt(.75*.25/n): allow 4 sd (0.11 at 250 rows) */
    double tol = 4 * sqrt(0.1875 / (double)(a.samples + b.samples));
    CHECKF(fabs(share - 0.75) < tol, "burn_b share %.3f, tolerance %.3f", share, tol);
    CHECKF(a.samples + b.samples >= all.samples * 95 / 100, "stacks lost their burn_a/b frame");
    /* Not under TSan: its runtime's thread and the agent's instrumented start-up (unwind and
     * symbol tables: 0.4-0.5 s there against ~30 ms) are CPU no sample sees (0.845 measured). */
    if (!tsan)
        CHECKF(est > 0.85 && est < 1.15, "sum of CPU weights / process CPU = %.3f", est);
    /* Headers: identity, sequence, times, CPU accounting. */
    uint64_t proc_cpu = 0, agent_cpu = 0, prev_end = 0, steady_proc = 0, steady_agent = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_header_t *h = &cs->c[i]->header;
        char expect[128];
        snprintf(expect, sizeof expect, "acc-%u-%08d.fpc", h->pid, i);
        CHECKF(!strcmp(cs->name[i], expect), "file %s, expected %s", cs->name[i], expect);
        CHECK(h->sequence == (uint64_t)i);
        CHECK(!strcmp(h->service.ptr, "acc") && !strcmp(h->version.ptr, "1.2.3"));
        CHECK(h->host.len > 0 && h->process_start_unix_ns <= h->start_unix_ns);
        CHECK(h->start_unix_ns < h->end_unix_ns && h->start_unix_ns >= prev_end);
        prev_end = h->end_unix_ns;
        proc_cpu += h->process_cpu_ns;
        agent_cpu += h->agent_cpu_ns;
        if (i > 0) { /* after the first interval: no start-up (tables, symbols) in it */
            steady_proc += h->process_cpu_ns;
            steady_agent += h->agent_cpu_ns;
        }
        CHECK(h->n_sampling >= 1 && h->sampling[0].type == CM_EV_CPU);
    }
    printf("# agent cpu %.3f%% of process cpu (%.1f ms), %.3f%% after the first interval\n",
           100.0 * (double)agent_cpu / (double)proc_cpu, (double)agent_cpu / 1e6,
           100.0 * (double)steady_agent / (double)(steady_proc ? steady_proc : 1));
    CHECKF(proc_cpu > cpu * 8 / 10 && proc_cpu <= cpu * 11 / 10, "header process_cpu %llu vs %llu",
           (unsigned long long)proc_cpu, (unsigned long long)cpu);
    /* 250 samples/s is 2.5x the default rate: the agent's cost stays a few percent at most.
     * A cost, so not judged under TSan, whose instrumentation makes the agent's start-up 10-15x
     * dearer (13.6% of this run measured in CI). The normal build judges the whole run, start-up
     * included; ASan the intervals after the first: its instrumented start-up (~50 ms of table
     * building and symbol loading, once 164 ms in CI-like runs, against ~10 ms normally) is a
     * fixed cost that a 3-s run cannot amortize. */
    CHECK(agent_cpu > 0 && cs->n >= 2);
    if (!sanitized)
        CHECKF(agent_cpu < proc_cpu / 20, "agent cpu %llu of %llu", (unsigned long long)agent_cpu,
               (unsigned long long)proc_cpu);
    else if (!tsan)
        CHECKF(steady_agent < steady_proc / 20, "agent cpu after the first interval %llu of %llu",
               (unsigned long long)steady_agent, (unsigned long long)steady_proc);
    free_chunks(cs);
    rmrf(dir);
}

/* `fleetprof fold` reads the agent's files: the heaviest line is burn_b's stack. */
static void test_fold(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[8192], cmd[8192];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", NULL};
    const char *argv[] = {prog, "cpu", "2", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    snprintf(cmd, sizeof cmd, "%s/cli/fleetprof fold %s", bdir(), dir);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    char line[4096] = "";
    CHECK(fgets(line, sizeof line, p) != NULL);
    while (fgets(out, sizeof out, p))
        ;
    CHECK(pclose(p) == 0);
    CHECKF(strstr(line, ";main;burn_for_cpu;burn_b;spin ") != NULL, "top line: %s", line);
    rmrf(dir);
}

/* The agent's own CPU over a run, from the chunk headers (agent_cpu_ns). */
static uint64_t agent_cpu(const chunks_t *cs) {
    uint64_t a = 0;
    for (int i = 0; i < cs->n; i++)
        a += cs->c[i]->header.agent_cpu_ns;
    return a;
}

/* Threads: every thread is sampled, totals match, and the controller holds the set point. */
static void test_threads_rate(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[4096];
    prog_path("fp-work-linked", prog, sizeof prog);
    /* A generous budget: this checks the controller alone (sanitizers slow the agent). */
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", "FLEETPROF_CPU_RATE=100",
                         "FLEETPROF_CPU_HZ=1000", "FLEETPROF_CPU_BUDGET=50", NULL};
    const char *argv[] = {prog, "threads", "4", "6", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    uint64_t cpu = out_u64(out, "cpu_ns=");
    chunks_t *cs = load(dir);
    tot_t all = total(cs, CM_EV_CPU, NULL, 0), th = total(cs, CM_EV_CPU, "burn_thread", 0);
    CHECKF(th.samples >= all.samples * 9 / 10, "%llu of %llu samples in burn_thread",
           (unsigned long long)th.samples, (unsigned long long)all.samples);
    /* Not under TSan (see cpu_accuracy_4threads): unsampled CPU of TSan's runtime and of the
     * agent's instrumented start-up put this at 0.79-0.89 there. */
    double est = (double)all.weight / (double)cpu;
    printf("# threads_rate: weights/cpu %.3f (agent %.3f s)\n", est, agent_cpu(cs) / 1e9);
    if (!tsan)
        CHECKF(est > 0.85 && est < 1.15, "weights/cpu %.3f", est);
    /* distinct threads with burn_thread samples */
    uint32_t tids[64];
    int ntids = distinct_threads(cs, "burn_thread", tids, 64);
    CHECKF(ntids == 4, "%d threads sampled", ntids);
    /* Rate over the last 3 chunks (after the controller settled from 1000 Hz per thread). */
    uint64_t n = 0, ns = 0;
    for (int i = cs->n - 4; i >= 0 && i < cs->n - 1; i++) {
        n += cs->c[i]->samples[CM_EV_CPU].n;
        ns += cs->c[i]->header.end_unix_ns - cs->c[i]->header.start_unix_ns;
    }
    double rate = (double)n / ((double)ns / 1e9);
    CHECK(cs->n >= 5);
    double reach = reachable(100, cpu_share(cs, cs->c[cs->n - 4]->header.start_unix_ns,
                                            cs->c[cs->n - 2]->header.end_unix_ns), 1000);
    printf("# 4 threads: %llu samples, settled rate %.1f/s (target 100, reachable %.0f)\n",
           (unsigned long long)all.samples, rate, reach);
    CHECKF(rate > 0.7 * reach && rate < 140, "settled rate %.1f/s, reachable %.0f", rate, reach);
    free_chunks(cs);
    rmrf(dir);
}

/* A sample of a thread's start or end, before its function was entered or after it returned:
 * a complete stack (rooted in the thread entry) with no sleep call in it. A loaded machine can
 * leave a new or exiting thread waiting for a CPU across a wall tick (one such sample in 57 was
 * seen with the machine's builds running). A stack broken in the sleep is not one: its root is
 * not the thread entry, or it holds the sleep call. */
static int thread_edge(const cm_dict_t *d, uint32_t st) {
    uint32_t a = d->stack_off[st], b = d->stack_off[st + 1];
    if (a == b)
        return 0;
    const char *root = loc_fn(d, d->stack_frames[b - 1]);
    if (strcmp(root, "clone3") && strcmp(root, "clone") && strcmp(root, "start_thread"))
        return 0;
    for (uint32_t k = a; k < b; k++)
        if (strstr(loc_fn(d, d->stack_frames[k]), "sleep"))
            return 0;
    return 1;
}

/* Wall clock: the sleeping thread is seen sleeping for the whole run, off CPU, and the
 * agent interrupts its sleep at most a few times (EINTR). */
static void test_wall(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[4096];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", NULL};
    const char *argv[] = {prog, "wall", "4", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    chunks_t *cs = load(dir);
    tot_t sl = {0, 0}, burn = total(cs, CM_EV_WALL, "burn_for", 0);
    uint64_t sl_fn = 0; /* sleeper samples whose stack shows the sleeper function */
    uint64_t sl_edge = 0; /* the others that are samples of its start or end (thread_edge) */
    for (int i = 0; i < cs->n; i++) { /* the sleeping thread, by its name */
        const cm_chunk_t *c = cs->c[i];
        const cm_samples_t *s = &c->samples[CM_EV_WALL];
        for (uint32_t r = 0; r < s->n; r++) {
            uint32_t th = CM_COL(s, thread, r);
            if (!c->dict.thread_name || strcmp(c->dict.strings[c->dict.thread_name[th]].ptr, "sleeper"))
                continue;
            sl.weight += s->weight[r];
            sl.samples++;
            int has = stack_has(&c->dict, s->stack[r], "sleeper");
            sl_fn += has;
            if (!has) {
                stack_print("sleeper sample without sleeper()", &c->dict, s->stack[r]);
                sl_edge += thread_edge(&c->dict, s->stack[r]);
            }
        }
    }
    uint64_t eintr = out_u64(out, "eintr=");
    /* Under TSan the stack ends in its nanosleep interceptor, built without frame pointers. */
    /* Under sanitizers threads are registered by the agent's /proc scan, so their first
     * samples (before the stack bounds are known) hold the leaf frame only. */
    CHECKF(tsan || (sanitized ? sl_fn + 3 >= sl.samples
                              : sl_fn + sl_edge == sl.samples && sl_edge * 10 <= sl.samples),
           "%llu of %llu sleeper samples show sleeper(), %llu of its start or end",
           (unsigned long long)sl_fn, (unsigned long long)sl.samples,
           (unsigned long long)sl_edge);
    printf("# wall: sleeper %.3f s in %llu samples, burner %.3f s, eintr=%llu\n",
           (double)sl.weight / 1e9, (unsigned long long)sl.samples, (double)burn.weight / 1e9,
           (unsigned long long)eintr);
    CHECKF(sl.weight > 3.4e9 && sl.weight < 4.6e9, "sleeper wall %.3f s of 4", sl.weight / 1e9);
    CHECKF(burn.weight > 3.4e9 && burn.weight < 4.6e9, "burner wall %.3f s", burn.weight / 1e9);
    CHECKF(sl.samples >= 25, "%llu wall samples", (unsigned long long)sl.samples);
    /* The sleeper blocks in nanosleep, which the agent marks (hook_wait.c): its stack is walked
     * by the bg thread and it is never signalled. Under a sanitizer it is registered by the
     * /proc scan and the runtime's own nanosleep comes first: it is signalled about once, then
     * sampled without a signal while it has not run since its last sample (4 s at 20 Hz is 80
     * ticks); the resumed sleep costs more CPU after the handler there, so the agent sometimes
     * sees it run and signals again: seen 4 under ASan. The bound still catches a regression
     * to a signal per tick. */
    CHECKF(eintr <= (sanitized ? 8u : 0u), "sleep interrupted %llu times",
           (unsigned long long)eintr);
    /* on-CPU flag: the sleeper is off CPU, the burner mostly on */
    uint64_t sl_on = 0, b_on = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_chunk_t *c = cs->c[i];
        const cm_samples_t *s = &c->samples[CM_EV_WALL];
        for (uint32_t r = 0; r < s->n; r++) {
            int on = (CM_COL(s, flags, r) & CM_SF_ON_CPU) != 0;
            uint32_t th = CM_COL(s, thread, r);
            if (c->dict.thread_name && !strcmp(c->dict.strings[c->dict.thread_name[th]].ptr, "sleeper"))
                sl_on += on;
            else if (stack_has(&c->dict, s->stack[r], "burn_for"))
                b_on += on;
        }
    }
    /* the first tick(s) may catch the thread starting up, before it blocks */
    CHECKF(sl_on <= 3, "sleeper on CPU in %llu samples", (unsigned long long)sl_on);
    CHECKF(b_on >= burn.samples / 2, "burner on CPU in %llu of %llu", (unsigned long long)b_on,
           (unsigned long long)burn.samples);
    free_chunks(cs);
    rmrf(dir);
}

/* Span context and labels: every sample in span_a carries trace A and endpoint=/a, in span_b
 * trace B and /b (the writer and the handler share a thread: no torn or stale reads). */
static void test_span_context(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[4096];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", NULL};
    const char *argv[] = {prog, "span", "3", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    chunks_t *cs = load(dir);
    uint64_t good = 0, bad = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_chunk_t *c = cs->c[i];
        const cm_dict_t *d = &c->dict;
        const cm_samples_t *s = &c->samples[CM_EV_CPU];
        for (uint32_t r = 0; r < s->n; r++) {
            int in_a = stack_has(d, s->stack[r], "span_a"), in_b = stack_has(d, s->stack[r], "span_b");
            if (!in_a && !in_b)
                continue;
            uint32_t ctx = CM_COL(s, context, r), ls = CM_COL(s, labels, r);
            uint8_t want = in_a ? 0xaa : 0xbb, want_span = in_a ? 0x1a : 0x1b;
            const uint8_t *id = d->contexts + (size_t)ctx * CM_CONTEXT_SIZE;
            int ok = ctx != 0 && id[0] == want && id[15] == want && id[16] == want_span &&
                     id[23] == want_span;
            ok = ok && ls != 0 && d->label_off[ls + 1] - d->label_off[ls] == 1;
            if (ok) {
                uint32_t k = d->label_kv[2 * d->label_off[ls]], v = d->label_kv[2 * d->label_off[ls] + 1];
                ok = !strcmp(d->strings[k].ptr, "endpoint") &&
                     !strcmp(d->strings[v].ptr, in_a ? "/a" : "/b");
            }
            good += ok;
            bad += !ok;
        }
    }
    printf("# span: %llu samples with the right context, %llu wrong\n", (unsigned long long)good,
           (unsigned long long)bad);
    CHECKF(good >= 100, "only %llu span samples", (unsigned long long)good);
    CHECKF(bad == 0, "%llu samples with a wrong context or labels", (unsigned long long)bad);
    free_chunks(cs);
    rmrf(dir);
}

/* The API's argument checks, and a context set from a W3C traceparent reaches the samples. */
static void test_api_traceparent(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[4096];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", NULL};
    const char *argv[] = {prog, "api", "1.5", NULL};
    CHECK(run(env, argv, 60, out, sizeof out) == 0);
    CHECKF(out_u64(out, "api_errors=") == 0, "%s", out);
    static const uint8_t trace[16] = {0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd,
                                      0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c};
    static const uint8_t span[8] = {0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31};
    chunks_t *cs = load(dir);
    uint64_t good = 0, bad = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_chunk_t *c = cs->c[i];
        const cm_dict_t *d = &c->dict;
        const cm_samples_t *s = &c->samples[CM_EV_CPU];
        for (uint32_t r = 0; r < s->n; r++) {
            if (!stack_has(d, s->stack[r], "span_a"))
                continue;
            const uint8_t *id = d->contexts + (size_t)CM_COL(s, context, r) * CM_CONTEXT_SIZE;
            uint32_t ls = CM_COL(s, labels, r);
            int ok = !memcmp(id, trace, 16) && !memcmp(id + 16, span, 8) && ls &&
                     d->label_off[ls + 1] - d->label_off[ls] == 1 &&
                     !strcmp(d->strings[d->label_kv[2 * d->label_off[ls] + 1]].ptr, "acme");
            good += ok;
            bad += !ok;
        }
    }
    CHECKF(good >= 20 && bad == 0, "%llu right, %llu wrong", (unsigned long long)good,
           (unsigned long long)bad);
    free_chunks(cs);
    rmrf(dir);
}

/* Runs argv with env (as run() does) with its stderr captured into err (NUL-terminated).
 * Returns the exit status; *lines is the number of lines written to stderr. */
static int run_stderr(const char **env, const char **argv, char *out, size_t out_size, char *err,
                      size_t err_size, int *lines) {
    char errfile[] = "/tmp/fp-agent-err-XXXXXX";
    int efd = mkstemp(errfile);
    CHECK(efd >= 0);
    int saved = dup(2);
    dup2(efd, 2);
    int st = run(env, argv, 60, out, out_size);
    dup2(saved, 2);
    close(saved);
    lseek(efd, 0, SEEK_SET);
    ssize_t n = read(efd, err, err_size - 1);
    err[n > 0 ? n : 0] = '\0';
    close(efd);
    unlink(errfile);
    *lines = 0;
    for (char *p = err; *p; p++)
        *lines += *p == '\n';
    return st;
}

/* Configuration: names and their fallbacks, the off switch, invalid values. */
static void test_config(void) {
    char prog[4096], out[4096], envbuf[4200];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *argv[] = {prog, "cpu", "0.3", NULL};
    {
        char *dir = mkout();
        const char *env[] = {ENV_OUT(dir), "OTEL_SERVICE_NAME=otelsvc",
                             "OTEL_RESOURCE_ATTRIBUTES=a=b,service.version=9.9,c=d", NULL};
        CHECK(run(env, argv, 60, out, sizeof out) == 0);
        chunks_t *cs = load(dir);
        CHECK(cs->n >= 1);
        CHECKF(!strcmp(cs->c[0]->header.service.ptr, "otelsvc") &&
                   !strcmp(cs->c[0]->header.version.ptr, "9.9"),
               "%s %s", cs->c[0]->header.service.ptr, cs->c[0]->header.version.ptr);
        free_chunks(cs);
        rmrf(dir);
    }
    {
        char *dir = mkout();
        const char *env[] = {ENV_OUT(dir), NULL};
        CHECK(run(env, argv, 60, out, sizeof out) == 0);
        chunks_t *cs = load(dir);
        CHECK(cs->n == 1); /* 10 s default interval: only the exit flush */
        CHECKF(!strcmp(cs->c[0]->header.service.ptr, "fp-work-linked") &&
                   !strcmp(cs->c[0]->header.version.ptr, "unknown"),
               "%s %s", cs->c[0]->header.service.ptr, cs->c[0]->header.version.ptr);
        free_chunks(cs);
        rmrf(dir);
    }
    {
        /* Durations: "300ms" as well as bare seconds (cm_parse_duration). */
        char *dir = mkout();
        /* 3 s under TSan, where the agent's start-up (tables) takes 0.5-1 s before the first
         * interval begins */
        const char *argv1[] = {prog, "cpu", tsan ? "3" : "1", NULL};
        const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=300ms", NULL};
        CHECK(run(env, argv1, 60, out, sizeof out) == 0);
        chunks_t *cs = load(dir);
        CHECKF(cs->n >= 3, "%d chunks for %s s of CPU at FLEETPROF_INTERVAL=300ms", cs->n,
               argv1[2]);
        /* The second chunk: the first starts with the agent, so it also holds the start-up */
        uint64_t len = cs->c[1]->header.end_unix_ns - cs->c[1]->header.start_unix_ns;
        CHECKF(len > 250000000 && len < 700000000, "second chunk %llu ns",
               (unsigned long long)len);
        free_chunks(cs);
        rmrf(dir);
    }
    {
        char *dir = mkout();
        const char *env[] = {ENV_OUT(dir), "FLEETPROF_ENABLED=0", NULL};
        CHECK(run(env, argv, 60, out, sizeof out) == 0);
        chunks_t *cs = load(dir);
        CHECK(cs->n == 0);
        free_chunks(cs);
        rmrf(dir);
    }
    {
        /* Invalid values: exactly one stderr line each, naming variable and value; the run
         * still profiles with the defaults. */
        char *dir = mkout(), err[4096];
        const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=soon", "FLEETPROF_CPU_RATE=-5",
                             NULL};
        int lines;
        CHECK(run_stderr(env, argv, out, sizeof out, err, sizeof err, &lines) == 0);
        CHECKF(lines == 2, "stderr:\n%s", err);
        CHECKF(strstr(err, "FLEETPROF_INTERVAL='soon'") && strstr(err, "FLEETPROF_CPU_RATE='-5'") &&
                   strstr(err, "default"),
               "stderr:\n%s", err);
        chunks_t *cs = load(dir);
        CHECK(cs->n == 1 && cs->c[0]->samples[CM_EV_CPU].n > 0);
        free_chunks(cs);
        rmrf(dir);
    }
}

/* One parser for every knob (issue 13): blanks around a value are ignored for the variables
 * config.c reads and for those hooks.c reads alike; a bad value read by both constructors
 * (FLEETPROF_ENABLED, FLEETPROF_WALL_HZ) is reported once; FLEETPROF_ALLOC_PERIOD=1 is out of
 * range (minimum 64) and leaves the ALLOC controller on at its default start period. */
static void test_config_parse(void) {
    char prog[4096], out[4096], envbuf[4200];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *argv[] = {prog, "cpu", "0.3", NULL};
    char *dir = mkout(), err[4096];
    const char *env[] = {ENV_OUT(dir),
                         "FLEETPROF_ENABLED=maybe",
                         "FLEETPROF_WALL_HZ=abc",
                         "FLEETPROF_ALLOC_PERIOD=1",
                         "FLEETPROF_CPU_HZ= 50",
                         "FLEETPROF_WALL_THREADS=4 ",
                         "FLEETPROF_LOCK_THRESHOLD= 5 ",
                         "FLEETPROF_IO= 1",
                         NULL};
    int lines;
    CHECK(run_stderr(env, argv, out, sizeof out, err, sizeof err, &lines) == 0);
    CHECKF(lines == 3, "stderr:\n%s", err);
    CHECKF(strstr(err, "FLEETPROF_ENABLED='maybe'") && strstr(err, "FLEETPROF_WALL_HZ='abc'") &&
               strstr(err, "FLEETPROF_ALLOC_PERIOD='1' (must be between 64 and"),
           "stderr:\n%s", err);
    chunks_t *cs = load(dir);
    CHECK(cs->n >= 1);
    const cm_header_t *h = &cs->c[0]->header;
    int lock = 0, wall = 0, alloc = 0;
    for (uint32_t i = 0; i < h->n_sampling; i++) {
        const cm_sampling_t *sp = &h->sampling[i];
        if (sp->type == CM_EV_LOCK) {
            CHECKF(sp->threshold_ns == 5000000, "lock threshold %llu ns",
                   (unsigned long long)sp->threshold_ns);
            lock = 1;
        }
        if (sp->type == CM_EV_WALL) {
            CHECKF(sp->period == 100000000, "wall period %llu ns (default 10 Hz expected)",
                   (unsigned long long)sp->period);
            wall = 1;
        }
        if (sp->type == CM_EV_ALLOC) {
            CHECKF(sp->period >= 4096, "alloc period %llu (the invalid 1 was used)",
                   (unsigned long long)sp->period);
            alloc = 1;
        }
    }
    CHECKF(lock && wall && alloc, "sampling entries: lock %d wall %d alloc %d", lock, wall,
           alloc);
    free_chunks(cs);
    rmrf(dir);
}

/* fork: the child profiles itself under its own pid from sequence 0, the parent goes on. */
static void test_fork(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[4096];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", NULL};
    const char *argv[] = {prog, "fork", "2", NULL};
    proc_t pr = start(env, argv);
    int st = finish(pr, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    chunks_t *cs = load(dir);
    uint32_t child = 0;
    for (int i = 0; i < cs->n; i++)
        if (cs->c[i]->header.pid != (uint32_t)pr.pid)
            child = cs->c[i]->header.pid;
    if (tsan) { /* TSan forbids new threads in the child: the agent stops there (README) */
        CHECKF(child == 0, "chunks from a child under TSan");
        CHECK(total(cs, CM_EV_CPU, "burn_b", (uint32_t)pr.pid).samples >= 50);
        free_chunks(cs);
        rmrf(dir);
        return;
    }
    CHECKF(child != 0, "no chunk from the child");
    tot_t cw = total(cs, CM_EV_CPU, "child_work", child);
    tot_t cw_parent = total(cs, CM_EV_CPU, "child_work", (uint32_t)pr.pid);
    tot_t pb = total(cs, CM_EV_CPU, "burn_b", (uint32_t)pr.pid);
    CHECKF(cw.samples >= 50, "child: %llu samples", (unsigned long long)cw.samples);
    CHECK(cw_parent.samples == 0);
    CHECKF(pb.samples >= 50, "parent: %llu samples", (unsigned long long)pb.samples);
    uint64_t seq_child = 0;
    for (int i = 0; i < cs->n; i++)
        if (cs->c[i]->header.pid == child)
            CHECK(cs->c[i]->header.sequence == seq_child++);
    free_chunks(cs);
    rmrf(dir);
}

/* exec: the new image (same pid) profiles itself; files of the old image are not
 * overwritten. */
static void test_exec(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[4096];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", NULL};
    const char *argv[] = {prog, "exec", "2", NULL};
    proc_t pr = start(env, argv);
    int st = finish(pr, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    chunks_t *cs = load(dir);
    tot_t b = total(cs, CM_EV_CPU, "burn_b", (uint32_t)pr.pid);
    CHECKF(b.samples >= 50, "%llu samples after exec", (unsigned long long)b.samples);
    free_chunks(cs);
    rmrf(dir);
}

/* SIGTERM at default disposition: the last chunk is written, the process still dies of it. */
static void test_sigterm_flush(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[256];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=3600", NULL};
    const char *argv[] = {prog, "forever", NULL};
    proc_t pr = start(env, argv);
    char buf[64];
    double end = now_s() + 30;
    ssize_t n = 0;
    while (n <= 0 && now_s() < end) {
        struct pollfd pf = {pr.out_fd, POLLIN, 0};
        poll(&pf, 1, 100);
        n = read(pr.out_fd, buf, sizeof buf);
    }
    CHECK(n > 0);
    /* let it burn 1 s of CPU (not of wall time: a loaded machine may give it less) */
    double cpu = 0;
    while (cpu < 1.0 && now_s() < end) {
        usleep(50 * 1000);
        char path[64], st[1024];
        snprintf(path, sizeof path, "/proc/%d/stat", (int)pr.pid);
        FILE *f = fopen(path, "r");
        size_t len = f ? fread(st, 1, sizeof st - 1, f) : 0;
        if (f)
            fclose(f);
        st[len] = 0;
        const char *p = strrchr(st, ')');
        unsigned long long ut = 0, stt = 0;
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut,
                        &stt) == 2)
            cpu = (double)(ut + stt) / (double)sysconf(_SC_CLK_TCK);
    }
    CHECKF(cpu >= 1.0, "the program burnt only %.2f s of CPU in 30 s", cpu);
    kill(pr.pid, SIGTERM);
    int st = finish(pr, 30, out, sizeof out);
    CHECKF(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "status %d", st);
    chunks_t *cs = load(dir);
    CHECKF(cs->n == 1, "%d chunks", cs->n);
    tot_t t = total(cs, CM_EV_CPU, "burn_forever", 0);
    CHECKF(t.samples >= 20, "%llu samples in the SIGTERM flush", (unsigned long long)t.samples);
    free_chunks(cs);
    rmrf(dir);
}

/* fleetprof_flush(): a chunk exists right after it returns 0; fleetprof_work_done() units land
 * in the chunk of their interval. */
static void test_flush_api(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[256];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=3600", NULL};
    const char *argv[] = {prog, "flush", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECK(st == 0);
    CHECKF(strstr(out, "flush=0") != NULL, "%s", out);
    chunks_t *cs = load(dir);
    CHECKF(cs->n == 2, "%d chunks (flush + exit)", cs->n);
    CHECK(cs->c[0]->samples[CM_EV_CPU].n > 0 && cs->c[1]->samples[CM_EV_CPU].n > 0);
    CHECKF(cs->c[0]->header.work_units == 1000 && cs->c[1]->header.work_units == 234,
           "work units %llu, %llu", (unsigned long long)cs->c[0]->header.work_units,
           (unsigned long long)cs->c[1]->header.work_units);
    free_chunks(cs);
    rmrf(dir);
}

/* Named spans (fleetprof_span_begin/_end): every request is one span row with its name, its
 * trace id and a duration that matches the one the program measured around the calls; the
 * nested span restores its parent's context; the span still open at the flush is reported
 * active in the first chunk and ended in the second; CPU samples carry the slow spans'
 * contexts. */
typedef struct {
    uint64_t n[3], ns[3], db, db_ctx_ok, active0, ended1, slow_samples, wrong;
} span_tot_t;

static void span_rows(const cm_chunk_t *c, int chunk, span_tot_t *t) {
    const cm_spans_t *sp = &c->spans;
    const cm_dict_t *d = &c->dict;
    static const char *const names[] = {"GET /fast", "GET /slow", "GET /stuck"};
    for (uint32_t i = 0; i < sp->n; i++) {
        const char *nm = d->strings[sp->name[i]].ptr;
        const uint8_t *id = d->contexts + (size_t)sp->context[i] * CM_CONTEXT_SIZE;
        int active = CM_COL(sp, flags, i) & CM_SPF_ACTIVE;
        if (!strcmp(nm, "GET /stuck")) {
            t->active0 += chunk == 0 && active && id[0] == 0x57 && id[23] == 0x57 &&
                          sp->start_unix_ns[i] + sp->duration_ns[i] == c->header.end_unix_ns;
            t->ended1 += chunk == 1 && !active && sp->duration_ns[i] > 0;
            continue;
        }
        if (!strcmp(nm, "db query")) {
            t->db++;
            t->db_ctx_ok += id[23] == 2 && id[14] == 0xef;
            continue;
        }
        int k = !strcmp(nm, names[0]) ? 0 : !strcmp(nm, names[1]) ? 1 : -1;
        if (k < 0 || active || id[14] != 0xef || id[23] != 1 || (id[15] & 1) != k) {
            t->wrong++;
            continue;
        }
        t->n[k]++;
        t->ns[k] += sp->duration_ns[i];
    }
    const cm_samples_t *s = &c->samples[CM_EV_CPU];
    for (uint32_t r = 0; r < s->n; r++) {
        const uint8_t *id = d->contexts + (size_t)CM_COL(s, context, r) * CM_CONTEXT_SIZE;
        if (stack_has(d, s->stack[r], "span_b"))
            t->slow_samples += id[14] == 0xef && (id[15] & 1) && id[23] == 1;
    }
}

static void test_named_spans(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[512];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=3600", NULL};
    const char *argv[] = {prog, "requests", "200", NULL};
    CHECK(run(env, argv, 60, out, sizeof out) == 0);
    CHECKF(out_u64(out, "api_errors=") == 0, "%s", out);
    chunks_t *cs = load(dir);
    CHECKF(cs->n == 2, "%d chunks (flush + exit)", cs->n);
    span_tot_t t = {0};
    for (int i = 0; i < cs->n; i++)
        span_rows(cs->c[i], i, &t);
    uint64_t want_ns[2] = {out_u64(out, "fast_ns="), out_u64(out, "slow_ns=")};
    printf("# spans: fast %llu (%llu ns, program %llu), slow %llu (%llu ns, program %llu), "
           "db %llu, slow samples %llu\n",
           (unsigned long long)t.n[0], (unsigned long long)t.ns[0],
           (unsigned long long)want_ns[0], (unsigned long long)t.n[1],
           (unsigned long long)t.ns[1], (unsigned long long)want_ns[1],
           (unsigned long long)t.db, (unsigned long long)t.slow_samples);
    CHECKF(t.wrong == 0, "%llu span rows with a wrong name, context or flag",
           (unsigned long long)t.wrong);
    CHECK(t.n[0] == out_u64(out, "fast_n=") && t.n[1] == out_u64(out, "slow_n=") &&
          t.n[0] == 100 && t.n[1] == 100);
    CHECK(t.db == 100 && t.db_ctx_ok == 100);
    /* The agent's clock reads sit inside the program's: shorter by the calls' own cost, at
     * most 2 %; a sanitized agent's calls cost a few microseconds each (TSan: 21.0 of
     * 21.6 ms over 100 fast spans), so there at most 20 us per span. */
    for (int k = 0; k < 2; k++)
        CHECKF(t.ns[k] <= want_ns[k] &&
                   (double)t.ns[k] >= (sanitized ? (double)want_ns[k] - 100 * 20000.0
                                                 : (double)want_ns[k] * 0.98),
               "%s: %llu ns recorded, %llu measured", k ? "slow" : "fast",
               (unsigned long long)t.ns[k], (unsigned long long)want_ns[k]);
    CHECKF(t.active0 == 1 && t.ended1 == 1, "stuck span: active in chunk 0 %llu, ended in 1 %llu",
           (unsigned long long)t.active0, (unsigned long long)t.ended1);
    CHECKF(t.slow_samples >= 10, "%llu CPU samples in span_b under a slow request's context",
           (unsigned long long)t.slow_samples);
    free_chunks(cs);
    rmrf(dir);
}

/* A process with spans and no sample still writes its exit chunk, carrying every span (named
 * right, though the program rewrote one name buffer in place between calls). */
static void test_spans_no_samples(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[512];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=3600", "FLEETPROF_CPU_RATE=0",
                         "FLEETPROF_WALL_HZ=0", NULL};
    const char *argv[] = {prog, "quietspans", "300", NULL};
    CHECK(run(env, argv, 60, out, sizeof out) == 0);
    CHECKF(out_u64(out, "api_errors=") == 0, "%s", out);
    chunks_t *cs = load(dir);
    CHECKF(cs->n == 1, "%d chunks (want the exit chunk)", cs->n);
    uint64_t by[3] = {0, 0, 0}, other = 0, samples = 0;
    for (int t = 1; t < CM_EV_COUNT; t++)
        samples += cs->c[0]->samples[t].n;
    const cm_spans_t *sp = &cs->c[0]->spans;
    for (uint32_t i = 0; i < sp->n; i++) {
        const char *nm = cs->c[0]->dict.strings[sp->name[i]].ptr;
        if (!strncmp(nm, "GET /q", 6) && nm[6] >= '0' && nm[6] <= '2' && !nm[7])
            by[nm[6] - '0']++;
        else
            other++;
    }
    printf("# exit chunk: %u spans (q0 %llu, q1 %llu, q2 %llu), %llu sample rows\n", sp->n,
           (unsigned long long)by[0], (unsigned long long)by[1], (unsigned long long)by[2],
           (unsigned long long)samples);
    CHECKF(by[0] == 100 && by[1] == 100 && by[2] == 100 && other == 0,
           "spans by name %llu/%llu/%llu, %llu others", (unsigned long long)by[0],
           (unsigned long long)by[1], (unsigned long long)by[2], (unsigned long long)other);
    free_chunks(cs);
    rmrf(dir);
}

/* A program that takes over every candidate real-time signal after start still gets its own
 * handlers called, once per signal, and is still profiled. */
static void test_signal_chain(void) {
    if (sanitized) {
        printf("# skipped under sanitizers: their sigaction interceptors sit in front of ours\n");
        return;
    }
    char *dir = mkout(), envbuf[4200], prog[4096], out[256];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", NULL};
    const char *argv[] = {prog, "chain", "2", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    chunks_t *cs = load(dir);
    CHECK(total(cs, CM_EV_CPU, "burn_b", 0).samples >= 50);
    free_chunks(cs);
    rmrf(dir);
}

/* Deep recursion: stacks are cut at the depth limit, flagged truncated, and counted. */
static void test_deep_stack(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[256];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", NULL};
    const char *argv[] = {prog, "deep", "300", "3", NULL};
    CHECK(run(env, argv, 60, out, sizeof out) == 0);
    chunks_t *cs = load(dir);
    uint64_t trunc = 0, n = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_chunk_t *c = cs->c[i];
        const cm_samples_t *s = &c->samples[CM_EV_CPU];
        for (uint32_t r = 0; r < s->n; r++) {
            n++;
            uint32_t stk = s->stack[r];
            if (c->dict.stack_flags && (c->dict.stack_flags[stk] & CM_STF_TRUNCATED)) {
                trunc++;
                CHECK(cm_stack_depth(&c->dict, stk) == 128);
            }
        }
    }
    CHECKF(trunc >= n * 9 / 10 && n >= 40, "%llu of %llu truncated", (unsigned long long)trunc,
           (unsigned long long)n);
    CHECKF(drops(cs, CM_DROP_STACK_TRUNCATED) >= trunc, "%llu STACK_TRUNCATED drops, %llu truncated",
           (unsigned long long)drops(cs, CM_DROP_STACK_TRUNCATED), (unsigned long long)trunc);
    free_chunks(cs);
    rmrf(dir);
}

/* ---- the collector: absent at start, present later ---- */

static int read_full(int fd, void *buf, size_t n, double deadline) {
    size_t got = 0;
    while (got < n) {
        struct pollfd pf = {fd, POLLIN, 0};
        int ms = (int)((deadline - now_s()) * 1000);
        if (ms <= 0 || poll(&pf, 1, ms) <= 0)
            return -1;
        ssize_t r = read(fd, (uint8_t *)buf + got, n - got);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/* Chunks produced while no collector listens are queued and delivered, in order, once it
 * appears; every message is a valid chunk; the hello is as documented. */
static int try_ack(int fd, uint32_t no, int32_t status);

static void test_collector_late(void) {
    char sock[108], prog[4096], out[256], envbuf[200];
    snprintf(sock, sizeof sock, "/tmp/fp-agent-col-%d.sock", (int)getpid());
    unlink(sock);
    prog_path("fp-work-linked", prog, sizeof prog);
    snprintf(envbuf, sizeof envbuf, "FLEETPROF_COLLECTOR=%s", sock);
    const char *env[] = {envbuf, "FLEETPROF_INTERVAL=0.5", NULL};
    const char *argv[] = {prog, "cpuwall", "5", NULL};
    proc_t pr = start(env, argv);
    usleep(2000 * 1000); /* ~4 chunks produced with nobody listening */
    int ls = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    CHECK(bind(ls, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(ls, 4) == 0);
    double deadline = now_s() + 40;
    struct pollfd pf = {ls, POLLIN, 0};
    CHECKF(poll(&pf, 1, 15000) == 1, "agent did not connect within 15 s");
    int fd = accept(ls, NULL, NULL);
    CHECK(fd >= 0);
    uint8_t hello[CM_SOCK_HELLO_SIZE];
    CHECK(read_full(fd, hello, sizeof hello, deadline) == 0);
    CHECK(!memcmp(hello, CM_SOCK_HELLO_MAGIC, 4) && hello[4] == CM_SOCK_VERSION && !hello[5]);
    uint64_t seen[64] = {0}, maxseq = 0;
    uint32_t msgs = 0, pid = 0;
    int got_last = 0;
    while (!got_last) {
        uint8_t lenb[4];
        if (read_full(fd, lenb, 4, deadline) != 0)
            break; /* EOF: the agent exited */
        uint32_t len = lenb[0] | lenb[1] << 8 | lenb[2] << 16 | (uint32_t)lenb[3] << 24;
        CHECK(len >= 1 && len <= CM_SOCK_MAX_MSG);
        uint8_t *buf = malloc(len);
        CHECK(read_full(fd, buf, len, deadline) == 0);
        cm_chunk_t *c;
        char err[256];
        int rc = cm_chunk_decode(buf, len, &c, err, sizeof err);
        CHECKF(rc == 0, "message %u: %s", msgs + 1, err);
        free(buf);
        msgs++;
        pid = c->header.pid;
        if (c->header.sequence < 64)
            seen[c->header.sequence]++;
        if (c->header.sequence > maxseq)
            maxseq = c->header.sequence;
        cm_chunk_free(c);
        /* An exiting agent does not wait for acks: the ack of its last chunk may find the
         * connection closed (EPIPE; write() raised SIGPIPE and killed this test, seen once
         * under TSan). What it delivered is checked below. */
        if (try_ack(fd, msgs, 0) != 0)
            break;
    }
    int st = finish(pr, 30, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    CHECK(pid == (uint32_t)pr.pid);
    printf("# collector: %u messages, sequences 0..%llu\n", msgs, (unsigned long long)maxseq);
    CHECKF(maxseq >= 8, "last sequence %llu", (unsigned long long)maxseq);
    for (uint64_t s = 0; s <= maxseq && s < 64; s++)
        CHECKF(seen[s] >= 1, "chunk %llu never delivered", (unsigned long long)s);
    close(fd);
    close(ls);
    unlink(sock);
}

/* Reads one message (frame) and returns its chunk sequence, or -1 on EOF. */
static int64_t read_msg(int fd, double deadline) {
    uint8_t lenb[4];
    if (read_full(fd, lenb, 4, deadline) != 0)
        return -1;
    uint32_t len = lenb[0] | lenb[1] << 8 | lenb[2] << 16 | (uint32_t)lenb[3] << 24;
    CHECK(len >= 1 && len <= CM_SOCK_MAX_MSG);
    uint8_t *buf = malloc(len);
    CHECK(read_full(fd, buf, len, deadline) == 0);
    cm_chunk_t *c;
    char err[256];
    CHECKF(cm_chunk_decode(buf, len, &c, err, sizeof err) == 0, "%s", err);
    int64_t seq = (int64_t)c->header.sequence;
    cm_chunk_free(c);
    free(buf);
    return seq;
}

/* One ack; 0, or -errno when the agent has closed its end (send never raises SIGPIPE). */
static int try_ack(int fd, uint32_t no, int32_t status) {
    uint8_t ack[CM_SOCK_ACK_SIZE];
    for (int i = 0; i < 4; i++) {
        ack[i] = (uint8_t)(no >> (8 * i));
        ack[4 + i] = (uint8_t)((uint32_t)status >> (8 * i));
    }
    ssize_t w = send(fd, ack, sizeof ack, MSG_NOSIGNAL);
    return w == (ssize_t)sizeof ack ? 0 : w < 0 ? -errno : -EIO;
}

static void send_ack(int fd, uint32_t no, int32_t status) { CHECK(try_ack(fd, no, status) == 0); }

/* CM_SOCK_RETRY: the agent disconnects, comes back and resends the chunk. A rejected chunk
 * (negative CM_E* status) is never sent again. */
static void test_collector_retry_reject(void) {
    char sock[108], prog[4096], out[256], envbuf[200];
    snprintf(sock, sizeof sock, "/tmp/fp-agent-retry-%d.sock", (int)getpid());
    unlink(sock);
    int ls = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", sock);
    CHECK(bind(ls, (struct sockaddr *)&sa, sizeof sa) == 0 && listen(ls, 4) == 0);
    prog_path("fp-work-linked", prog, sizeof prog);
    snprintf(envbuf, sizeof envbuf, "FLEETPROF_COLLECTOR=%s", sock);
    const char *env[] = {envbuf, "FLEETPROF_INTERVAL=0.3", NULL};
    const char *argv[] = {prog, "cpuwall", "4", NULL};
    proc_t pr = start(env, argv);
    double deadline = now_s() + 60;
    uint8_t hello[CM_SOCK_HELLO_SIZE];
    struct pollfd pf = {ls, POLLIN, 0};
    CHECK(poll(&pf, 1, 15000) == 1);
    int fd = accept(ls, NULL, NULL);
    CHECK(read_full(fd, hello, sizeof hello, deadline) == 0);
    int64_t first = read_msg(fd, deadline);
    CHECK(first >= 0);
    send_ack(fd, 1, CM_SOCK_RETRY);
    /* the agent closes: drain what it sent meanwhile until EOF */
    while (read_msg(fd, deadline) >= 0)
        ;
    close(fd);
    CHECK(poll(&pf, 1, 15000) == 1);
    fd = accept(ls, NULL, NULL);
    CHECK(read_full(fd, hello, sizeof hello, deadline) == 0);
    int64_t again = read_msg(fd, deadline);
    CHECKF(again == first, "after RETRY the first message is chunk %lld, not %lld",
           (long long)again, (long long)first);
    send_ack(fd, 1, CM_EFORMAT); /* rejected: must not come back */
    uint32_t no = 1;
    int64_t seq;
    int resent = 0, later = 0;
    while ((seq = read_msg(fd, deadline)) >= 0) {
        resent += seq == first;
        later++;
        /* the exiting agent does not wait for acks: after its last chunk it may be gone */
        int e = try_ack(fd, ++no, 0);
        CHECKF(e == 0 || e == -EPIPE || e == -ECONNRESET, "ack: %s", strerror(-e));
    }
    int st = finish(pr, 30, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    CHECKF(resent == 0, "rejected chunk %lld sent %d more times", (long long)first, resent);
    CHECKF(later >= 5, "only %d chunks after the reject", later);
    close(fd);
    close(ls);
    unlink(sock);
}

/* Collector absent for the whole run: the queue is bounded, the oldest chunks are dropped and
 * the drop is counted in the chunks that are cut after it. A dropped chunk's own counts are
 * carried on (sender.c), so the count is exact over what the collector would have received:
 * the 16 chunks still queued at the end. (Summed over every file it is not: the files hold the
 * dropped chunks too, and a carried count would be seen twice once a carrying chunk drops.) */
static void test_collector_absent_queue(void) {
    char *dir = mkout(), prog[4096], out[256], env1[4200], env2[200];
    prog_path("fp-work-linked", prog, sizeof prog);
    snprintf(env1, sizeof env1, "FLEETPROF_OUTPUT=%s", dir);
    snprintf(env2, sizeof env2, "FLEETPROF_COLLECTOR=/tmp/fp-agent-nobody-%d.sock", (int)getpid());
    const char *env[] = {env1, env2, "FLEETPROF_INTERVAL=0.1", NULL};
    /* long enough for well over 16 intervals even when a sanitizer's start-up eats ~1 s, and
     * under sanitizers past 33 chunks, where chunks carrying counts are dropped in turn */
    const char *argv[] = {prog, "cpuwall", sanitized ? "5" : "3", NULL};
    CHECK(run(env, argv, 60, out, sizeof out) == 0);
    chunks_t *cs = load(dir);
    CHECKF(cs->n >= 16 + 4, "%d chunks: too few to overflow the queue of 16", cs->n);
    uint64_t last = 0, all = drops(cs, CM_DROP_CHUNK_QUEUE_FULL), d = 0, tail = 0;
    for (int i = 0; i < cs->n; i++)
        last = cs->c[i]->header.sequence > last ? cs->c[i]->header.sequence : last;
    CHECKF(last + 1 == (uint64_t)cs->n, "sequences end at %llu for %d chunks",
           (unsigned long long)last, cs->n);
    for (int i = 0; i < cs->n; i++)
        for (uint32_t k = 0; k < cs->c[i]->header.n_drops; k++)
            if (cs->c[i]->header.drops[k].reason == CM_DROP_CHUNK_QUEUE_FULL) {
                if (cs->c[i]->header.sequence + 16 > last)
                    d += cs->c[i]->header.drops[k].count;
                else if (cs->c[i]->header.sequence + 16 == last)
                    tail += cs->c[i]->header.drops[k].count;
            }
    printf("# %d chunks, %llu dropped from the queue as counted by the last 16 (%llu in all "
           "files)\n", cs->n, (unsigned long long)d, (unsigned long long)all);
    /* all but the last 16 were dropped; the one the last chunk pushed out (sequence last-16)
     * is lost after the last cut, with the counts it carried */
    CHECKF(d + 16 + 1 + tail == (uint64_t)cs->n, "%llu drops for %d chunks (%llu uncounted)",
           (unsigned long long)d, cs->n, (unsigned long long)(1 + tail));
    free_chunks(cs);
    rmrf(dir);
}

/* ---- LD_PRELOAD and `fleetprof run` ---- */

static void test_preload(void) {
    if (sanitized) {
        printf("# skipped under sanitizers: a sanitized .so cannot be preloaded\n");
        return;
    }
    char *dir = mkout(), envbuf[4200], prog[4096], out[256], pre[4200];
    prog_path("fp-work", prog, sizeof prog);
    snprintf(pre, sizeof pre, "LD_PRELOAD=%s/agent/libfleetprof.so", bdir());
    const char *env[] = {ENV_OUT(dir), pre, "FLEETPROF_INTERVAL=1", NULL};
    const char *argv[] = {prog, "threads", "2", "2", NULL};
    CHECK(run(env, argv, 60, out, sizeof out) == 0);
    chunks_t *cs = load(dir);
    CHECK(total(cs, CM_EV_CPU, "burn_thread", 0).samples >= 50);
    free_chunks(cs);
    rmrf(dir);
}

/* Samples inside a handler of the program's own that runs on an alternate signal stack (as
 * V8's profiler and Go's runtime do) are walked through the handler's signal frame back to the
 * thread's stack: the caller that raised the signal is on them. */
static void test_altstack_handler(void) {
    if (tsan) { /* 0 samples in the handler's work there (CI): not what this case is about */
        printf("# not under TSan: its runtime calls the program's handlers from its own\n");
        return;
    }
    char *dir = mkout(), envbuf[4200], prog[4096], out[256];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", NULL};
    const char *argv[] = {prog, "altstack", "1.5", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    chunks_t *cs = load(dir);
    tot_t on_alt = total(cs, CM_EV_CPU, "altstack_work", 0);
    uint64_t through = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *s = &cs->c[i]->samples[CM_EV_CPU];
        for (uint32_t r = 0; r < s->n; r++)
            through += stack_has(&cs->c[i]->dict, s->stack[r], "altstack_work") &&
                       stack_has(&cs->c[i]->dict, s->stack[r], "altstack_raise");
    }
    printf("# alternate stack: %llu samples in the handler's work, %llu through to its caller\n",
           (unsigned long long)on_alt.samples, (unsigned long long)through);
    CHECKF(on_alt.samples >= 50, "%llu samples", (unsigned long long)on_alt.samples);
    CHECKF(through >= on_alt.samples * 9 / 10, "%llu of %llu reach the caller",
           (unsigned long long)through, (unsigned long long)on_alt.samples);
    free_chunks(cs);
    rmrf(dir);
}

/* dash ends `sh -c` with _exit: no atexit handler runs, yet its last chunk is sent (the _exit
 * interposer, hooks/hook_exec.c). One interval of an hour: every sample is in that chunk. */
static void test_underscore_exit(void) {
    if (sanitized) {
        printf("# skipped under sanitizers: a sanitized .so cannot be preloaded\n");
        return;
    }
    char *dir = mkout(), envbuf[4200], out[256], pre[4200];
    const char *env[] = {ENV_OUT(dir), preload(pre, sizeof pre), "FLEETPROF_INTERVAL=3600", NULL};
    const char *argv[] = {"/bin/sh", "-c", "i=0; while [ $i -lt 250000 ]; do i=$((i+1)); done",
                          NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    chunks_t *cs = load(dir);
    tot_t t = total(cs, CM_EV_CPU, NULL, 0);
    printf("# sh -c loop: %d chunks, %llu CPU samples (%.3f s)\n", cs->n,
           (unsigned long long)t.samples, (double)t.weight / 1e9);
    CHECKF(cs->n == 1, "%d chunks from a process that ended with _exit", cs->n);
    CHECKF(t.samples >= 15, "%llu CPU samples", (unsigned long long)t.samples);
    free_chunks(cs);
    rmrf(dir);
}

static void test_cli_run(void) {
    if (sanitized) {
        printf("# skipped under sanitizers: `fleetprof run` preloads the agent\n");
        return;
    }
    char *top = mkout(), prog[4096], out[512], cli[4200], dir[4200];
    prog_path("fp-work", prog, sizeof prog);
    snprintf(cli, sizeof cli, "%s/cli/fleetprof", bdir());
    /* --output is created with its parents (mkdir -p); --interval takes durations */
    snprintf(dir, sizeof dir, "%s/not/yet", top);
    const char *argv[] = {cli, "run", "--service", "runsvc", "--version", "7", "--output", dir,
                          "--interval", "500ms", "--", prog, "cpu", "1.5", NULL};
    int st = run(NULL, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    chunks_t *cs = load(dir);
    CHECKF(cs->n >= 3, "%d chunks for 1.5 s of CPU at 500ms", cs->n);
    CHECK(!strcmp(cs->c[0]->header.service.ptr, "runsvc") && !strcmp(cs->c[0]->header.version.ptr, "7"));
    CHECK(total(cs, CM_EV_CPU, "burn_b", 0).samples >= 30);
    free_chunks(cs);
    /* usage errors */
    const char *bad1[] = {cli, "run", "--bogus", "--", prog, NULL};
    st = run(NULL, bad1, 30, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 2, "bad flag: status %d", st);
    const char *bad2[] = {cli, "run", "--service", "x", NULL};
    st = run(NULL, bad2, 30, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 2, "no command: status %d", st);
    const char *bad3[] = {cli, "run", "--", "/nonexistent/program", NULL};
    st = run(NULL, bad3, 30, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 127, "missing program: status %d", st);
    const char *bad4[] = {cli, "run", "--interval", "5x", "--", prog, "cpu", "0.1", NULL};
    st = run(NULL, bad4, 30, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 2, "bad interval: status %d", st);
    const char *bad5[] = {cli, "run", "--output", "/dev/null/x", "--", prog, "cpu", "0.1", NULL};
    st = run(NULL, bad5, 30, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 2, "output under a file: status %d", st);
    rmrf(top);
}

/* Controller step response: 1 burning thread, then 4 (x2 load on 2 cores, more where there
 * are more): the sample rate returns near the set point within 5 s of the step. */
static void test_controller_step(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[256];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", "FLEETPROF_CPU_RATE=100",
                         "FLEETPROF_CPU_BUDGET=50", NULL};
    const char *argv[] = {prog, "step", "4", "8", "4", NULL};
    CHECK(run(env, argv, 90, out, sizeof out) == 0);
    chunks_t *cs = load(dir);
    /* Step time: the first sample in burn_thread. Rates per 0.5 s bucket from sample times. */
    uint64_t t0 = UINT64_MAX, tstep = UINT64_MAX;
    for (int i = 0; i < cs->n; i++) {
        const cm_chunk_t *c = cs->c[i];
        const cm_samples_t *s = &c->samples[CM_EV_CPU];
        if (c->header.start_unix_ns < t0)
            t0 = c->header.start_unix_ns;
        for (uint32_t r = 0; r < s->n; r++)
            if (stack_has(&c->dict, s->stack[r], "burn_thread") && s->time_ns[r] < tstep)
                tstep = s->time_ns[r];
    }
    CHECK(tstep != UINT64_MAX);
    uint64_t after = 0, before = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *s = &cs->c[i]->samples[CM_EV_CPU];
        for (uint32_t r = 0; r < s->n; r++) {
            int64_t dt = (int64_t)(s->time_ns[r] - tstep);
            if (dt >= 5000000000ll && dt < 8000000000ll)
                after++;
            if (dt >= -3000000000ll && dt < 0)
                before++;
        }
    }
    double rb = reachable(100, cpu_share(cs, tstep - 3000000000ull, tstep), 100);
    double ra = reachable(100, cpu_share(cs, tstep + 5000000000ull, tstep + 8000000000ull), 100);
    printf("# step: rate before %.1f/s (reachable %.0f), 5-8 s after the step %.1f/s "
           "(reachable %.0f), target 100\n",
           before / 3.0, rb, after / 3.0, ra);
    /* Without control the rate would double (or more) at the step and stay there; the band
     * is wide because CPU available to the test varies at sub-second scale on a shared box. */
    CHECKF(before / 3.0 > 0.55 * rb && before / 3.0 < 150, "rate before the step %.1f", before / 3.0);
    CHECKF(after / 3.0 > 0.55 * ra && after / 3.0 < 150, "rate 5-8 s after the step %.1f", after / 3.0);
    free_chunks(cs);
    rmrf(dir);
}

/* CPU budget: with a budget far below what the set point costs, the agent lowers its rate,
 * counts DROP_OVER_BUDGET, and the estimate of CPU time stays unbiased. */
static void test_budget(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[256];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", "FLEETPROF_CPU_RATE=1000",
                         "FLEETPROF_CPU_HZ=1000", "FLEETPROF_CPU_BUDGET=0.01", NULL};
    const char *argv[] = {prog, "threads", "2", "6", NULL};
    CHECK(run(env, argv, 60, out, sizeof out) == 0);
    uint64_t cpu = out_u64(out, "cpu_ns=");
    chunks_t *cs = load(dir);
    tot_t all = total(cs, CM_EV_CPU, NULL, 0);
    const cm_chunk_t *last = cs->c[cs->n - 2]; /* last full interval */
    double rate = last->samples[CM_EV_CPU].n /
                  ((double)(last->header.end_unix_ns - last->header.start_unix_ns) / 1e9);
    uint64_t ob = drops(cs, CM_DROP_OVER_BUDGET);
    double est = (double)all.weight / (double)cpu;
    printf("# budget 0.01%%: rate %.1f/s (set point 1000), %llu over-budget drops, weight/cpu %.3f, "
           "target in header %u\n",
           rate, (unsigned long long)ob, est, last->header.sampling[0].target_per_sec);
    CHECKF(rate < 300, "rate %.1f/s despite the budget", rate);
    CHECK(ob > 0);
    CHECK(last->header.sampling[0].target_per_sec < 1000);
    CHECKF(est > 0.8 && est < 1.2, "weights/cpu %.3f", est);
    free_chunks(cs);
    rmrf(dir);
}


/* The agent's estimated CPU over [from, to) as a share of the process's (CPU clocks, from the
 * chunk headers; the process's floored at 1% of a core as the budget floors it). */
static double agent_share(const chunks_t *cs, uint64_t from, uint64_t to) {
    double proc = cores_of(cs, from, to, 0);
    return cores_of(cs, from, to, 1) / (proc > 0.01 ? proc : 0.01);
}

/* The wall ticks' pace (of 10/s) the budget has restored from its floor (0.02, after the
 * idle) by two windows into the work, when the agent's CPU is share of the process's: a
 * window under budget raises the factor by 0.8 x budget / share, at least x1.25, at most x64
 * (ag_budget_step; budget 1%). The agent's fixed costs (a chunk a second: 0.3-0.6 ms/s
 * measured under load) are 0.05% of one busy core: x16 a window, full pace; at a fifth of a
 * core they are ~0.25%: x3.2, 0.2 of the pace, i.e. the budget itself keeps the ticks slow. */
static double budget_pace(double share) {
    double up = share > 0 ? 0.8 * 0.01 / share : 64;
    up = up < 1.25 ? 1.25 : up > 64 ? 64 : up;
    double f = 0.02 * up * up;
    return f < 1 ? f : 1;
}

/* Budget after idle: an idle service's wall ticks cost more than 1% of its (floored) CPU, so
 * the budget slows its periodic work; the CPU samples, which cost nothing while it is idle,
 * must not pay for that when work resumes. 8 s idle (the budget's factor would fall to its
 * floor of 0.02 in 6 s), then 3 s of CPU at the default rate (100/s): the first two seconds
 * of work have at least 60% of the rate the process's CPU allows (the set point unless the
 * machine starves it) and at most 150/s (a period set from the window in which the work began
 * overshot to the tick's 250/s), and the wall ticks are back to at least 5/s (of 10) from
 * 1.5 s into the work -- or, when the machine gives the process so little CPU that the
 * budget itself holds them, to at least half the pace the budget allows at the CPU it got
 * (budget_pace; judged on CPU clocks, as the budget is: under load the ticks are slow because
 * of the CPU the process gets now, not because of the idle before). */
static void test_budget_after_idle(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[256];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", NULL};
    const char *argv[] = {prog, "idlecpu", "8", "3", NULL};
    CHECK(run(env, argv, 240, out, sizeof out) == 0); /* 3 s of CPU: ~100 s at 0.03 of a core */
    uint64_t t0 = out_u64(out, "load=");
    CHECK(t0 > 0);
    chunks_t *cs = load(dir);
    uint64_t cpu = 0, wall = 0;
    /* 1.5-2.5 s into the work; sanitized, 1.5-3 s (the agent's own work costs 3-10x there:
     * the budget spaces its ticks further) */
    const uint64_t wall_end = sanitized ? 3000000000ull : 2500000000ull;
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *s = &cs->c[i]->samples[CM_EV_CPU];
        for (uint32_t r = 0; r < s->n; r++)
            cpu += s->time_ns[r] >= t0 && s->time_ns[r] < t0 + 2000000000ull;
        const cm_samples_t *w = &cs->c[i]->samples[CM_EV_WALL];
        for (uint32_t r = 0; r < w->n; r++) /* main's ticks 1.5-2.5 s into the work */
            wall += w->time_ns[r] >= t0 + 1500000000ull && w->time_ns[r] < t0 + wall_end;
    }
    double want = reachable(100, cpu_share(cs, t0, t0 + 2000000000ull), 100);
    printf("# after 8 s idle: %.1f CPU samples/s in the first 2 s of work (reachable %.0f), "
           "%llu wall samples 1.5-%.1f s in, %llu over-budget drops\n",
           cpu / 2.0, want, (unsigned long long)wall, (double)wall_end / 1e9,
           (unsigned long long)drops(cs, CM_DROP_OVER_BUDGET));
    CHECKF(cpu / 2.0 >= 0.6 * want && cpu / 2.0 <= 150,
           "%.1f CPU samples/s after idle, reachable %.0f", cpu / 2.0, want);
    /* Under a sanitizer the agent's own work costs ~3x: at one core it is over the 1% budget,
     * which spaces the ticks for that (3 in the second second were seen under ASan); before
     * the fix they stayed at ~0.4/s for ~15 s, 0-1 in a second. */
    uint64_t want_wall = sanitized ? 2 : 5;
    /* ... and at least half the ticks the budget allows by then at the CPU the process got */
    double share = agent_share(cs, t0, t0 + wall_end), pace = budget_pace(share);
    uint64_t allowed = (uint64_t)(0.5 * 10 * pace * (double)(wall_end - 1500000000ull) / 1e9);
    if (allowed < want_wall)
        want_wall = allowed;
    printf("# agent CPU %.3f%% of the process's over the first %.1f s of work: the budget's "
           "pace %.2f, want %llu wall samples\n", 100 * share, (double)wall_end / 1e9, pace,
           (unsigned long long)want_wall);
    CHECKF(wall >= want_wall, "%llu wall samples 1.5-%.1f s into the work (want %llu)",
           (unsigned long long)wall, (double)wall_end / 1e9, (unsigned long long)want_wall);
    free_chunks(cs);
    rmrf(dir);
}

/* ---- issue acceptance: accuracy on 4 threads, blocked read, thread churn, SIGPROF, steps ---- */

/* Is row r of samples s on a thread named name? */
static int on_thread(const cm_chunk_t *c, const cm_samples_t *s, uint32_t r, const char *name) {
    uint32_t th = CM_COL(s, thread, r);
    return c->dict.thread_name && !strcmp(c->dict.strings[c->dict.thread_name[th]].ptr, name);
}

/* CPU profile accuracy on 4 threads, each alternating burn_a and burn_b (1:3 work): the weight
 * shares (what `fleetprof fold` prints) are within +-3 percentage points of 25/75, and the sum
 * of the CPU weights is within +-5% of the process's CPU time from getrusage. A fixed 4 ms
 * period (controller off) and 12 s of CPU give ~3000 samples: 1 sd of a share is ~0.8 pp. */
static void test_cpu_accuracy_4threads(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[4096];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", "FLEETPROF_CONTROLLER=0",
                         "FLEETPROF_CPU_HZ=250", NULL};
    const char *argv[] = {prog, "cpu4", "12", NULL};
    int st = run(env, argv, 240, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    uint64_t ru = out_u64(out, "rusage_ns=");
    chunks_t *cs = load(dir);
    tot_t all = total(cs, CM_EV_CPU, NULL, 0), a = total(cs, CM_EV_CPU, "burn_a", 0),
          b = total(cs, CM_EV_CPU, "burn_b", 0);
    double share_a = (double)a.weight / (double)all.weight;
    double share_b = (double)b.weight / (double)all.weight;
    double est = (double)all.weight / (double)ru;
    printf("# cpu4: %llu samples, burn_a %.2f%% (25), burn_b %.2f%% (75), sum of weights %.3f s "
           "vs getrusage %.3f s (ratio %.3f)\n",
           (unsigned long long)all.samples, 100 * share_a, 100 * share_b, all.weight / 1e9,
           ru / 1e9, est);
    CHECKF(all.samples >= 1000, "only %llu samples", (unsigned long long)all.samples);
    /* Under TSan the shares are not the agent's: TSan holds an asynchronous signal until the
     * thread reaches one of its own hooks, so the CPU-timer samples land late, and at the
     * places its instrumentation checks for pending signals. burn_a measured 21.4-24.7% there
     * over 9 runs of the code before and after the third session (2 of 4 out of +-3 pp with
     * the earlier code). The sum of the weights does not depend on where the samples land and
     * is checked everywhere. The workload's threads make no system call: with one every 8
     * iterations (the process CPU clock, as this test first did) burn_a came out at 22.9-25.3%
     * (mean 23.5%; perf: 25.39%), failing this check a few percent of runs. That is the CPU
     * timers' tick, not the agent: agent README, "CPU-timer sampling and preemption points". */
    if (!tsan) {
        CHECKF(fabs(share_a - 0.25) <= 0.03, "burn_a share %.2f%%", 100 * share_a);
        CHECKF(fabs(share_b - 0.75) <= 0.03, "burn_b share %.2f%%", 100 * share_b);
    }
    /* Not under TSan: since the CFI unwinder and libdw symbolization, CPU the program did not
     * spend on its own work and that no sample sees (TSan's runtime thread, the agent's
     * instrumented start-up: unwind and symbol tables) is 6-11% of these short runs even after
     * the agent's own CPU is subtracted (ratios 0.889 and 0.944 measured). The normal and ASan
     * builds check it. */
    if (!tsan)
        CHECKF(fabs(est - 1) <= 0.05, "sum of CPU weights / getrusage CPU = %.3f", est);
    free_chunks(cs);
    rmrf(dir);
}

/* Wall ticks read /proc/self/task/TID/stat for a thread that ran part of the interval and is in
 * no marked call (procstat.c: ag_procstat_running) and keep that descriptor open. "half" (30%
 * on CPU, sleeping in a raw nanosleep no hook sees) gets one; the program then closes it as a
 * program closing descriptors it did not open would, and opens a file that gets the same
 * number: the agent must neither read that file as a stat nor close it, and must close the
 * descriptor it opens next once the thread is gone. */
static void test_wall_stat_fds(void) {
    if (tsan) { /* closing another thread's descriptor is the very race TSan reports */
        printf("# not under TSan: the program closes the agent's descriptor on purpose\n");
        return;
    }
    char *dir = mkout(), envbuf[4200], prog[4096], out[4096];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", NULL};
    const char *argv[] = {prog, "statfd", NULL};
    int st = run(env, argv, 120, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    printf("# %.*s\n", (int)strcspn(out, "\n"), out);
    CHECKF(out_u64(out, "cached=") >= 1, "no stat descriptor kept: %s", out);
    CHECKF(out_u64(out, "reused=") == 1, "the program's file did not get the number: %s", out);
    CHECKF(out_u64(out, "app_fd_ok=") == 1, "the program's file was closed or changed: %s", out);
    CHECKF(strstr(out, "leftover=0") != NULL, "stat descriptors left open: %s", out);
    rmrf(dir);
}

/* Wall clock: a thread blocked in read() on a pipe nobody writes to is in the wall profile with
 * its blocking stack (block_in_read, which calls read) and off CPU, and not in the CPU profile. */
static void test_wall_blocked_read(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[4096];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", NULL};
    const char *argv[] = {prog, "blockread", "4", NULL};
    int st = run(env, argv, 120, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    chunks_t *cs = load(dir);
    uint64_t n = 0, with_fn = 0, off = 0, wall_ns = 0, cpu_rows = 0, cpu_fn = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_chunk_t *c = cs->c[i];
        const cm_samples_t *s = &c->samples[CM_EV_WALL];
        for (uint32_t r = 0; r < s->n; r++) {
            if (!on_thread(c, s, r, "reader"))
                continue;
            n++;
            wall_ns += s->weight[r];
            with_fn += stack_has(&c->dict, s->stack[r], "block_in_read");
            off += !(CM_COL(s, flags, r) & CM_SF_ON_CPU);
        }
        const cm_samples_t *p = &c->samples[CM_EV_CPU];
        for (uint32_t r = 0; r < p->n; r++) {
            cpu_rows += on_thread(c, p, r, "reader");
            cpu_fn += stack_has(&c->dict, p->stack[r], "block_in_read");
        }
    }
    tot_t burn = total(cs, CM_EV_CPU, "burn_b", 0);
    printf("# blocked read: %llu wall samples (%.2f s), %llu with block_in_read, %llu off CPU; "
           "CPU rows of the reader %llu, with block_in_read %llu; burner CPU rows %llu\n",
           (unsigned long long)n, wall_ns / 1e9, (unsigned long long)with_fn,
           (unsigned long long)off, (unsigned long long)cpu_rows, (unsigned long long)cpu_fn,
           (unsigned long long)burn.samples);
    CHECKF(n >= 25, "%llu wall samples of the reader", (unsigned long long)n);
    CHECKF(wall_ns > 3.4e9 && wall_ns < 4.6e9, "reader wall %.3f s of 4", wall_ns / 1e9);
    /* Under sanitizers the thread is registered by the /proc scan: its first samples (before
     * the stack bounds are known) hold the leaf frame only; under TSan the stack ends in the
     * read interceptor, built without frame pointers (README). */
    CHECKF(tsan || (sanitized ? with_fn + 3 >= n : with_fn == n),
           "%llu of %llu reader samples show block_in_read", (unsigned long long)with_fn,
           (unsigned long long)n);
    CHECKF(off + 1 >= n, "reader on CPU in %llu of %llu samples", (unsigned long long)(n - off),
           (unsigned long long)n);
    CHECKF(cpu_rows == 0 && cpu_fn == 0, "reader in the CPU profile: %llu rows",
           (unsigned long long)cpu_rows);
    CHECK(burn.samples >= 50); /* the CPU profile itself works */
    free_chunks(cs);
    rmrf(dir);
}

/* 1,200 short-lived threads (more than the 1,024 registry slots: without slot reuse the last
 * ones would be dropped), 50 at a time, each burning ~2 ms of CPU while sampling is on: no
 * crash or hang, exit 0, no DROP_THREAD_LIMIT, samples attributed to the thread function.
 * 1 kHz per thread (4 ms effective: kernel tick) so that 2 ms threads get samples. */
static void test_thread_churn(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[4096];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", "FLEETPROF_CONTROLLER=0",
                         "FLEETPROF_CPU_HZ=1000", NULL};
    const char *argv[] = {prog, "churn", "1200", "50", NULL};
    int st = run(env, argv, 240, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d (timeout or crash: -1/signal)", st);
    CHECK(out_u64(out, "threads=") == 1200);
    uint64_t ru = out_u64(out, "rusage_ns=");
    chunks_t *cs = load(dir);
    tot_t all = total(cs, CM_EV_CPU, NULL, 0), ct = total(cs, CM_EV_CPU, "churn_thread", 0);
    /* Registry slots exhausted: thread.c counts it once per thread it cannot register (no
     * event type). Allocation samples taken by a thread while it has no slot (after its slot was
     * released at exit, when a TLS destructor allocates) are counted as ALLOC drops of the same
     * reason: not a slot leak, so not judged here. */
    uint64_t limit = 0;
    for (int i = 0; i < cs->n; i++)
        for (uint32_t k = 0; k < cs->c[i]->header.n_drops; k++)
            if (cs->c[i]->header.drops[k].reason == CM_DROP_THREAD_LIMIT &&
                cs->c[i]->header.drops[k].type != CM_EV_ALLOC)
                limit += cs->c[i]->header.drops[k].count;
    uint32_t tids[2048];
    int ntids = distinct_threads(cs, "churn_thread", tids, 2048);
    printf("# churn: 1200 threads, %llu CPU samples (%llu in churn_thread, %d threads), "
           "THREAD_LIMIT drops %llu, weights %.3f s of %.3f s CPU\n",
           (unsigned long long)all.samples, (unsigned long long)ct.samples, ntids,
           (unsigned long long)limit, all.weight / 1e9, ru / 1e9);
    CHECKF(limit == 0, "%llu DROP_THREAD_LIMIT: slots not reused", (unsigned long long)limit);
    if (!sanitized) { /* under sanitizers threads this short die before the /proc scan */
        CHECKF(ct.samples >= 200, "%llu samples in churn_thread", (unsigned long long)ct.samples);
        CHECKF(ntids >= 200, "samples from only %d distinct threads", ntids);
        CHECKF(ct.samples >= all.samples / 2, "churn_thread %llu of %llu samples",
               (unsigned long long)ct.samples, (unsigned long long)all.samples);
    }
    free_chunks(cs);
    rmrf(dir);
}

/* A program with its own SIGPROF handler and ITIMER_PROF (10 ms of process CPU): its handler
 * still runs about once per 10 ms of CPU -- no delivery lost to the agent (which never
 * touches SIGPROF) and none doubled -- and the agent still profiles it.
 * ITIMER_PROF runs on the kernel's tick-sampled utime + stime (no
 * CONFIG_VIRT_CPU_ACCOUNTING_GEN here), each tick charging a whole 4 ms to the thread it
 * finds running, while the program's cpu_ns is the exact CLOCK_PROCESS_CPUTIME_ID. On a
 * loaded machine the two part: deliveries per 10 ms of exact CPU measured 1.12-1.28 with three
 * busy loops beside it, and 1.55 once while builds ran, with or without the agent. So the
 * judge is a control run of the same program at the same time with the agent off
 * (FLEETPROF_ENABLED=0), under the same load: the agent's rate over the control's. A lost
 * delivery would show as 0.5, a doubled one as 2. */
static double sigprof_rate(const char *out) {
    return (double)out_u64(out, "sigprof=") / ((double)out_u64(out, "cpu_ns=") / 10e6);
}

static void test_own_sigprof(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[4096], out_off[4096];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", NULL};
    const char *env_off[] = {"FLEETPROF_ENABLED=0", NULL};
    const char *argv[] = {prog, "sigprof", "3", NULL};
    proc_t on = start(env, argv), off = start(env_off, argv);
    int st = finish(on, 120, out, sizeof out), st_off = finish(off, 120, out_off, sizeof out_off);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    CHECKF(WIFEXITED(st_off) && WEXITSTATUS(st_off) == 0, "control: status %d", st_off);
    double r = sigprof_rate(out), r_off = sigprof_rate(out_off);
    chunks_t *cs = load(dir);
    tot_t b = total(cs, CM_EV_CPU, "burn_b", 0);
    printf("# SIGPROF per 10 ms of CPU: %.3f with the agent (%llu deliveries), %.3f without "
           "(control at the same time), ratio %.3f; agent: %llu samples in burn_b\n",
           r, (unsigned long long)out_u64(out, "sigprof="), r_off, r / r_off,
           (unsigned long long)b.samples);
    CHECKF(r_off > 0.5, "control: %.3f SIGPROF per 10 ms of CPU", r_off);
    CHECKF(r / r_off >= 0.8 && r / r_off <= 1.25, "SIGPROF rate %.3f with the agent, %.3f without",
           r, r_off);
    CHECKF(b.samples >= 100, "agent samples %llu", (unsigned long long)b.samples);
    free_chunks(cs);
    rmrf(dir);
}

/* FLEETPROF_ENABLED=0: no chunk, no handler installed (SigCgt in /proc/self/status is the same
 * as without the agent), no agent thread. Control: enabled, both differ. */
static void test_disabled(void) {
    char prog[4096], plain[4096], out[4096], envbuf[4200];
    prog_path("fp-work-linked", prog, sizeof prog);
    prog_path("fp-work", plain, sizeof plain);
    char base_cgt[64] = "", cgt[64] = "";
    const char *argv0[] = {plain, "status", NULL};
    CHECK(run(NULL, argv0, 60, out, sizeof out) == 0);
    CHECK(sscanf(strstr(out, "sigcgt="), "sigcgt=%63s", base_cgt) == 1);
    CHECK(out_u64(out, "agent_threads=") == 0);
    const char *argv[] = {prog, "status", NULL};
    {
        char *dir = mkout();
        const char *env[] = {ENV_OUT(dir), "FLEETPROF_ENABLED=0", "FLEETPROF_INTERVAL=0.1", NULL};
        CHECK(run(env, argv, 60, out, sizeof out) == 0);
        CHECK(sscanf(strstr(out, "sigcgt="), "sigcgt=%63s", cgt) == 1);
        uint64_t threads = out_u64(out, "agent_threads=");
        chunks_t *cs = load(dir);
        printf("# disabled: SigCgt %s (without the agent %s), agent threads %llu, chunks %d\n",
               cgt, base_cgt, (unsigned long long)threads, cs->n);
        CHECKF(!strcmp(cgt, base_cgt), "SigCgt %s, without the agent %s", cgt, base_cgt);
        CHECK(threads == 0);
        CHECK(cs->n == 0);
        free_chunks(cs);
        rmrf(dir);
    }
    {
        char *dir = mkout();
        const char *env[] = {ENV_OUT(dir), NULL};
        CHECK(run(env, argv, 60, out, sizeof out) == 0);
        CHECK(sscanf(strstr(out, "sigcgt="), "sigcgt=%63s", cgt) == 1);
        printf("# enabled: SigCgt %s, agent threads %llu\n", cgt,
               (unsigned long long)out_u64(out, "agent_threads="));
        CHECKF(strcmp(cgt, base_cgt) != 0, "enabled agent installed no handler?");
        CHECK(out_u64(out, "agent_threads=") == 1);
        rmrf(dir);
    }
}

/* A program that sleeps often (2 threads, CPU bursts of 0.1-1 ms between sleeps of 0.5-3 ms,
 * like deploy/demo/demo-service): the sum of CPU weights is within +-5% of getrusage. */
static void test_bursty_accuracy(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[4096];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", NULL};
    const char *argv[] = {prog, "bursty", "2", NULL};
    int st = run(env, argv, 240, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    uint64_t ru = out_u64(out, "rusage_ns=");
    chunks_t *cs = load(dir);
    tot_t all = total(cs, CM_EV_CPU, NULL, 0), bw = total(cs, CM_EV_CPU, "bursty_work", 0);
    uint64_t agent = agent_cpu(cs);
    /* The samples cover the program's threads; the agent's own thread is never sampled, and
     * since the first chunk counts building the unwind and symbol tables its CPU is 1.5% of
     * this short run (3.5-4% under ASan, where the ratio against getrusage alone was 0.95):
     * the reference is getrusage minus the agent's CPU from the chunk headers. */
    double ref = (double)(ru - agent);
    double est = (double)all.weight / ref;
    printf("# bursty: %llu samples (%llu in bursty_work), weights %.3f s, getrusage %.3f s, "
           "agent %.3f s, ratio %.3f (vs getrusage - agent)\n",
           (unsigned long long)all.samples, (unsigned long long)bw.samples, all.weight / 1e9,
           ru / 1e9, agent / 1e9, est);
    CHECKF(all.samples >= 150, "%llu samples", (unsigned long long)all.samples);
    /* Not under TSan: since the CFI unwinder and libdw symbolization, CPU the program did not
     * spend on its own work and that no sample sees (TSan's runtime thread, the agent's
     * instrumented start-up: unwind and symbol tables) is 6-11% of these short runs even after
     * the agent's own CPU is subtracted (ratios 0.889 and 0.944 measured). The normal and ASan
     * builds check it. */
    if (!tsan)
        CHECKF(fabs(est - 1) <= 0.05, "sum of CPU weights / getrusage CPU = %.3f", est);
    free_chunks(cs);
    rmrf(dir);
}

/* Controller step response as the issue states it: 1 busy thread -> 8 -> 1 (8 s each), set
 * point 100 samples/s. The emitted rate (CPU rows per 1-s window, from sample timestamps) is
 * back within +-10% of the set point within 5 s after each step: over the 1-s windows from 5 s
 * after the step to the next step, the mean is within the band and so are most windows. On
 * this 2-core box 8 busy threads get 2 cores: the process's CPU doubles (a real step).
 * Loaded machine: a window's band is around the rate reachable with the CPU the process got in
 * it (reachable()), and windows right after the machine itself changed the process's CPU by
 * more than 15% (a disturbance of the plant, not the step under test), or where it got under
 * half a core (starved by the machine), are not judged; when
 * fewer than 2 windows per step are left, the run is repeated (up to 4 runs). */
static int step_run(int attempt) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[4096];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", "FLEETPROF_CPU_RATE=100",
                         "FLEETPROF_CPU_BUDGET=50", NULL};
    const char *argv[] = {prog, "step3", "8", "8", NULL};
    int st = run(env, argv, 240, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    uint64_t steps[2] = {out_u64(out, "step1="), out_u64(out, "step2=")};
    chunks_t *cs = load(dir);
    uint64_t end = 0;
    for (int i = 0; i < cs->n; i++)
        if (cs->c[i]->header.end_unix_ns > end)
            end = cs->c[i]->header.end_unix_ns;
    int judged_ok = 1;
    for (int k = 0; k < 2; k++) {
        /* phase 3 ends 8 s after its start: later is the exit (LeakSanitizer's CPU...) */
        uint64_t t0 = steps[k], t1 = k == 0 ? steps[1] : steps[1] + (steps[1] - steps[0]);
        if (t1 > end)
            t1 = end;
        int nw = (int)((t1 - t0) / 1000000000ull);
        double rate[32] = {0}, cores[32] = {0};
        if (nw > 32)
            nw = 32;
        for (int i = 0; i < cs->n; i++) {
            const cm_samples_t *s = &cs->c[i]->samples[CM_EV_CPU];
            for (uint32_t r = 0; r < s->n; r++)
                if (s->time_ns[r] >= t0 && s->time_ns[r] < t0 + (uint64_t)nw * 1000000000ull)
                    rate[(s->time_ns[r] - t0) / 1000000000ull]++;
        }
        printf("# run %d, step %d (%s): rows per 1-s window (process cores):", attempt, k + 1,
               k == 0 ? "1->8" : "8->1");
        for (int w = 0; w < nw; w++) {
            uint64_t ws = t0 + (uint64_t)w * 1000000000ull;
            cores[w] = cpu_share(cs, ws, ws + 1000000000ull);
            printf(" %.0f (%.2f)", rate[w], cores[w]);
        }
        printf("\n");
        double sum = 0, sum_target = 0;
        int in_band = 0, n = 0;
        for (int w = 5; w < nw; w++) {
            int disturbed = 0;
            for (int j = w - 2; j < w; j++) {
                double hi = cores[j] > cores[j + 1] ? cores[j] : cores[j + 1];
                double lo = cores[j] > cores[j + 1] ? cores[j + 1] : cores[j];
                disturbed |= lo < 0.85 * hi;
            }
            /* starved: every phase has >= 1 busy thread, a window with under half a core is the
             * machine's doing (seen: 0.07 cores for 5 s on the shared box) */
            if (disturbed || cores[w] < 0.5)
                continue;
            double target = reachable(100, cores[w], 100);
            sum += rate[w];
            sum_target += target;
            in_band += fabs(rate[w] - target) <= 0.1 * target;
            n++;
        }
        if (n < 2) {
            printf("# run %d, step %d: %d undisturbed windows after 5 s: machine too noisy\n",
                   attempt, k + 1, n);
            judged_ok = 0;
            continue;
        }
        double mean = sum / n, target = sum_target / n;
        printf("# run %d, step %d: mean %.1f/s over %d windows from 5 s after the step (target "
               "100, reachable %.0f), %d of them within +-10%%\n",
               attempt, k + 1, mean, n, target, in_band);
        CHECKF(fabs(mean - target) <= 0.1 * target, "step %d: mean rate %.1f, target %.0f", k + 1,
               mean, target);
        CHECKF(2 * in_band >= n, "step %d: %d of %d windows in the band", k + 1, in_band, n);
    }
    printf("# run %d: drops: ring full %llu, unwind %llu, over budget %llu\n", attempt,
           (unsigned long long)drops(cs, CM_DROP_RING_FULL),
           (unsigned long long)drops(cs, CM_DROP_UNWIND_FAILED),
           (unsigned long long)drops(cs, CM_DROP_OVER_BUDGET));
    free_chunks(cs);
    rmrf(dir);
    return judged_ok;
}

static void test_controller_step_1_8_1(void) {
    /* Not a retry of failures: step_run() fails the test at once on any assertion. It returns 0
     * only when the machine starved the process so that fewer than 2 windows after a step could
     * be judged at all (seen on the shared box: 0.07 cores for 5 s); such a run says nothing
     * about the controller, so it is measured again, at most 4 times in all. */
    int attempt = 1;
    while (!step_run(attempt))
        CHECKF(++attempt <= 4, "4 runs without 2 undisturbed windows after each step");
}

/* Span context on two threads that alternate between spans (each thread its own trace and
 * span ids): every sample taken inside span_a/span_b carries exactly that thread's span ids,
 * zero mis-attributed over thousands of samples (4 ms fixed period, 8 s of CPU). */
static void test_span_two_threads(void) {
    char *dir = mkout(), envbuf[4200], prog[4096], out[4096];
    prog_path("fp-work-linked", prog, sizeof prog);
    const char *env[] = {ENV_OUT(dir), "FLEETPROF_INTERVAL=1", "FLEETPROF_CONTROLLER=0",
                         "FLEETPROF_CPU_HZ=250", "FLEETPROF_WALL_HZ=20", NULL};
    const char *argv[] = {prog, "span2", "8", NULL};
    int st = run(env, argv, 240, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d", st);
    chunks_t *cs = load(dir);
    /* [0]: CPU samples; [1]: wall samples (of busy threads: taken from their CPU samples,
     * wall.c wall_from_cpu, or by a signal) */
    uint64_t good[2][2] = {{0, 0}, {0, 0}}, bad[2] = {0, 0};
    for (int i = 0; i < 2 * cs->n; i++) {
        int w = i >= cs->n;
        const cm_chunk_t *c = cs->c[i % cs->n];
        const cm_dict_t *d = &c->dict;
        const cm_samples_t *s = &c->samples[w ? CM_EV_WALL : CM_EV_CPU];
        for (uint32_t r = 0; r < s->n; r++) {
            int in_a = stack_has(d, s->stack[r], "span_a"), in_b = stack_has(d, s->stack[r], "span_b");
            int k = on_thread(c, s, r, "span0") ? 0 : on_thread(c, s, r, "span1") ? 1 : -1;
            if ((!in_a && !in_b) || k < 0)
                continue;
            const uint8_t *id = d->contexts + (size_t)CM_COL(s, context, r) * CM_CONTEXT_SIZE;
            uint8_t want = (uint8_t)((in_a ? 0xa0 : 0xb0) + k);
            uint8_t want_span = (uint8_t)((in_a ? 0x1a : 0x2b) + k);
            int ok = CM_COL(s, context, r) != 0;
            for (int j = 0; j < 16 && ok; j++)
                ok = id[j] == want;
            for (int j = 16; j < 24 && ok; j++)
                ok = id[j] == want_span;
            good[w][k] += ok;
            bad[w] += !ok;
        }
    }
    printf("# span, 2 threads: %llu + %llu CPU samples with the right ids, %llu wrong; wall "
           "%llu + %llu right, %llu wrong\n",
           (unsigned long long)good[0][0], (unsigned long long)good[0][1],
           (unsigned long long)bad[0], (unsigned long long)good[1][0],
           (unsigned long long)good[1][1], (unsigned long long)bad[1]);
    CHECKF(good[0][0] + good[0][1] >= 1000 && good[0][0] >= 300 && good[0][1] >= 300,
           "only %llu + %llu span samples", (unsigned long long)good[0][0],
           (unsigned long long)good[0][1]);
    CHECKF(bad[0] == 0, "%llu samples with wrong span ids", (unsigned long long)bad[0]);
    /* 8 s of CPU on two threads (~4 s of wall time each) at 20 wall ticks/s (set above: twice
     * the default, for more samples to check): ~80 wall samples per thread in the spans */
    CHECKF(good[1][0] >= 50 && good[1][1] >= 50, "only %llu + %llu wall samples in spans",
           (unsigned long long)good[1][0], (unsigned long long)good[1][1]);
    CHECKF(bad[1] == 0, "%llu wall samples with wrong span ids", (unsigned long long)bad[1]);
    free_chunks(cs);
    rmrf(dir);
}

static const tr_test_t tests[] = {
    {"cpu_accuracy", test_cpu_accuracy},
    {"fold", test_fold},
    {"threads_rate", test_threads_rate},
    {"wall", test_wall},
    {"span_context", test_span_context},
    {"api_traceparent", test_api_traceparent},
    {"config", test_config},
    {"config_parse", test_config_parse},
    {"fork", test_fork},
    {"exec", test_exec},
    {"sigterm_flush", test_sigterm_flush},
    {"underscore_exit", test_underscore_exit},
    {"altstack_handler", test_altstack_handler},
    {"flush_api", test_flush_api},
    {"named_spans", test_named_spans},
    {"spans_no_samples", test_spans_no_samples},
    {"signal_chain", test_signal_chain},
    {"deep_stack", test_deep_stack},
    {"collector_late", test_collector_late},
    {"collector_absent_queue", test_collector_absent_queue},
    {"collector_retry_reject", test_collector_retry_reject},
    {"preload", test_preload},
    {"cli_run", test_cli_run},
    {"controller_step", test_controller_step},
    {"budget", test_budget},
    {"cpu_accuracy_4threads", test_cpu_accuracy_4threads},
    {"wall_blocked_read", test_wall_blocked_read},
    {"wall_stat_fds", test_wall_stat_fds},
    {"thread_churn", test_thread_churn},
    {"own_sigprof", test_own_sigprof},
    {"disabled", test_disabled},
    {"bursty_accuracy", test_bursty_accuracy},
    {"budget_after_idle", test_budget_after_idle},
    {"controller_step_1_8_1", test_controller_step_1_8_1},
    {"span_two_threads", test_span_two_threads},
    {0, 0},
};

TR_MAIN(tests)
