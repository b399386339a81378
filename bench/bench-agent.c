/* Agent benchmarks (not a test): overhead ratio, cost per sample, RSS, controller step.
 *
 *   bench-agent overhead [ROUNDS]   fixed CPU work (tests/programs/fp-work "fixed"), run
 *                                   interleaved: agent disabled / agent default / agent at
 *                                   1 kHz per thread without controller or wall ticks.
 *                                   Ratios of process CPU time per round; medians reported.
 *   bench-agent step [OUTDIR]       load steps 1 -> 8 -> 1 burning threads (8 s each) at a
 *                                   100/s set point;
 *                                   writes OUTDIR/agent-step.dat and, with gnuplot,
 *                                   OUTDIR/agent-step.png (default OUTDIR: the current dir).
 *
 * Programs run with LD_PRELOAD (the deployment mode); the agent disabled with
 * FLEETPROF_ENABLED=0 keeps everything else (loading, interposers) identical in the baseline.
 * Process CPU time, not wall time, is compared: the machine is shared and noisy, and CPU time
 * is what the overhead budget is about.
 */
#define _GNU_SOURCE
#include "cm/chunk.h"
#include "cm/wire.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static char g_build[4096];

static void find_build(void) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        fprintf(stderr, "bench-agent: cannot find myself\n");
        exit(1);
    }
    self[n] = '\0';
    snprintf(g_build, sizeof g_build, "%s", dirname(dirname(self)));
}

/* Runs argv with extra env; returns stdout (static buffer). */
static const char *run(const char *const *env, const char *const *argv) {
    static char out[8192];
    int p[2];
    if (pipe(p) != 0)
        exit(1);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(p[1], 1);
        close(p[0]);
        unsetenv("LD_PRELOAD");
        for (int i = 0; env[i]; i++)
            putenv(strdup(env[i]));
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(p[1]);
    size_t len = 0;
    ssize_t r;
    while ((r = read(p[0], out + len, sizeof out - 1 - len)) > 0)
        len += (size_t)r;
    out[len] = '\0';
    close(p[0]);
    int st;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "bench-agent: %s failed (status %d)\n", argv[0], st);
        exit(1);
    }
    return out;
}

static uint64_t field(const char *out, const char *key) {
    const char *p = strstr(out, key);
    return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

typedef struct {
    cm_chunk_t *c[4096];
    int n;
} chunks_t;

static void load(const char *dir, chunks_t *cs) {
    cs->n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)) && cs->n < 4096) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 4, CM_CHUNK_FILE_SUFFIX))
            continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        fseek(f, 0, SEEK_END);
        long sz = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *buf = malloc((size_t)sz);
        if (fread(buf, 1, (size_t)sz, f) != (size_t)sz)
            exit(1);
        fclose(f);
        char err[256];
        if (cm_chunk_decode(buf, (size_t)sz, &cs->c[cs->n], err, sizeof err) == 0)
            cs->n++;
        else
            fprintf(stderr, "bench-agent: %s: %s\n", path, err);
        free(buf);
        unlink(path);
    }
    if (d)
        closedir(d);
}

static void free_chunks(chunks_t *cs) {
    for (int i = 0; i < cs->n; i++)
        cm_chunk_free(cs->c[i]);
    cs->n = 0;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int bench_overhead(int rounds) {
    char prog[8192], pre[8192], outenv[8192], dir[] = "/tmp/fp-bench-agent-XXXXXX";
    snprintf(prog, sizeof prog, "%s/tests/fp-work", g_build);
    snprintf(pre, sizeof pre, "LD_PRELOAD=%s/agent/libfleetprof.so", g_build);
    if (!mkdtemp(dir))
        return 1;
    snprintf(outenv, sizeof outenv, "FLEETPROF_OUTPUT=%s", dir);
    const char *argv[] = {prog, "fixed", "1500", "2", NULL};
    const char *env_base[] = {pre, "FLEETPROF_ENABLED=0", NULL};
    const char *env_agent[] = {pre, outenv, "FLEETPROF_COLLECTOR=none", NULL};
    const char *env_hot[] = {pre, outenv, "FLEETPROF_COLLECTOR=none", "FLEETPROF_CONTROLLER=0",
                             "FLEETPROF_CPU_HZ=1000", "FLEETPROF_WALL_HZ=0",
                             "FLEETPROF_CPU_BUDGET=100", NULL};
    double r_agent[64], r_hot[64], per_sample[64], rss_d[64], rate[64], agent_share[64];
    if (rounds > 64)
        rounds = 64;
    chunks_t *cs = calloc(1, sizeof *cs);
    printf("round  base_cpu_s  agent/base  hot/base  hot_ns/sample  rss_delta_kb  agent_rate/s\n");
    for (int r = 0; r < rounds; r++) {
        const char *o = run(env_base, argv);
        double base = (double)field(o, "cpu_ns="), rss_base = (double)field(o, "rss_kb=");
        o = run(env_agent, argv);
        double agent = (double)field(o, "cpu_ns="), rss_agent = (double)field(o, "rss_kb=");
        load(dir, cs);
        uint64_t samples = 0, ns = 0, acpu = 0, pcpu = 0;
        for (int i = 0; i < cs->n; i++) {
            samples += cs->c[i]->samples[CM_EV_CPU].n;
            ns += cs->c[i]->header.end_unix_ns - cs->c[i]->header.start_unix_ns;
            acpu += cs->c[i]->header.agent_cpu_ns;
            pcpu += cs->c[i]->header.process_cpu_ns;
        }
        rate[r] = (double)samples / ((double)ns / 1e9);
        agent_share[r] = (double)acpu / (double)pcpu;
        free_chunks(cs);
        o = run(env_hot, argv);
        double hot = (double)field(o, "cpu_ns=");
        load(dir, cs);
        uint64_t hot_samples = 0;
        for (int i = 0; i < cs->n; i++)
            hot_samples += cs->c[i]->samples[CM_EV_CPU].n;
        free_chunks(cs);
        r_agent[r] = agent / base;
        r_hot[r] = hot / base;
        per_sample[r] = hot_samples ? (hot - base) / (double)hot_samples : 0;
        rss_d[r] = rss_agent - rss_base;
        printf("%5d  %10.3f  %10.4f  %8.4f  %13.0f  %12.0f  %12.1f\n", r, base / 1e9, r_agent[r],
               r_hot[r], per_sample[r], rss_d[r], rate[r]);
        fflush(stdout);
    }
    printf("\nmedian over %d rounds:\n", rounds);
    printf("  overhead, default settings (100 samples/s, wall 10 Hz): %+.2f%% process CPU\n",
           (median(r_agent, rounds) - 1) * 100);
    printf("  agent's own estimate in chunk headers (agent_cpu/process_cpu): %.2f%%\n",
           median(agent_share, rounds) * 100);
    printf("  sample rate with default settings: %.1f/s\n", median(rate, rounds));
    printf("  overhead at 1 kHz/thread, no controller, no wall: %+.2f%%\n",
           (median(r_hot, rounds) - 1) * 100);
    printf("  cost per CPU sample (signal delivery + handler + draining + encoding): %.0f ns\n",
           median(per_sample, rounds));
    printf("  peak RSS added by the agent: %.0f KiB\n", median(rss_d, rounds));
    rmdir(dir);
    free(cs);
    return 0;
}

static int bench_step(const char *outdir) {
    char prog[8192], outenv[8192], dir[] = "/tmp/fp-bench-step-XXXXXX";
    snprintf(prog, sizeof prog, "%s/tests/fp-work-linked", g_build);
    if (!mkdtemp(dir))
        return 1;
    snprintf(outenv, sizeof outenv, "FLEETPROF_OUTPUT=%s", dir);
    const char *argv[] = {prog, "step3", "8", "8", NULL};
    const char *env[] = {outenv, "FLEETPROF_COLLECTOR=none", "FLEETPROF_INTERVAL=1",
                         "FLEETPROF_CPU_RATE=100", "FLEETPROF_CPU_BUDGET=50", NULL};
    const char *out = run(env, argv);
    const char *p1 = strstr(out, "step1="), *p2 = strstr(out, "step2=");
    if (!p1 || !p2) {
        fprintf(stderr, "bench-agent: fp-work step3 failed: %s\n", out);
        return 1;
    }
    uint64_t steps[2] = {strtoull(p1 + 6, NULL, 10), strtoull(p2 + 6, NULL, 10)};
    chunks_t *cs = calloc(1, sizeof *cs);
    load(dir, cs);
    rmdir(dir);
    uint64_t t0 = UINT64_MAX, t1 = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_chunk_t *c = cs->c[i];
        if (c->header.start_unix_ns < t0)
            t0 = c->header.start_unix_ns;
        if (c->header.end_unix_ns > t1)
            t1 = c->header.end_unix_ns;
    }
    enum { BUCKET_MS = 250 };
    int nb = (int)((t1 - t0) / (BUCKET_MS * 1000000ull)) + 1;
    double *cnt = calloc((size_t)nb, sizeof *cnt), *period = calloc((size_t)nb, sizeof *period);
    for (int i = 0; i < cs->n; i++) {
        const cm_chunk_t *c = cs->c[i];
        const cm_samples_t *s = &c->samples[CM_EV_CPU];
        for (uint32_t r = 0; r < s->n; r++)
            cnt[(s->time_ns[r] - t0) / (BUCKET_MS * 1000000ull)] += 1;
        /* the period in force at the end of each chunk (header), for the buckets it covers */
        for (int b = (int)((c->header.start_unix_ns - t0) / (BUCKET_MS * 1000000ull));
             b < nb && t0 + (uint64_t)b * BUCKET_MS * 1000000ull < c->header.end_unix_ns; b++)
            if (c->header.n_sampling && c->header.sampling[0].type == CM_EV_CPU)
                period[b] = (double)c->header.sampling[0].period;
    }
    char path[8192];
    snprintf(path, sizeof path, "%s/agent-step.dat", outdir);
    FILE *f = fopen(path, "w");
    if (!f)
        return 1;
    fprintf(f, "# fleetprof agent controller step response: 1 -> 8 burning threads at t=0, "
               "8 -> 1 at t=%.2f s (2-core machine)\n",
            (double)(steps[1] - steps[0]) / 1e9);
    fprintf(f, "# t_s  rate_per_s(250ms bucket)  rate_1s_avg  period_ms(chunk header)\n");
    double *avg = calloc((size_t)nb, sizeof *avg);
    for (int b = 0; b < nb; b++) {
        double t = ((double)t0 + (b + 0.5) * BUCKET_MS * 1e6 - (double)steps[0]) / 1e9;
        int k = 0;
        for (int j = b - 3; j <= b; j++)
            if (j >= 0) {
                avg[b] += cnt[j];
                k++;
            }
        avg[b] = avg[b] / k * (1000.0 / BUCKET_MS);
        fprintf(f, "%.3f %.1f %.1f %.3f\n", t, cnt[b] * (1000.0 / BUCKET_MS), avg[b],
                period[b] / 1e6);
    }
    fclose(f);
    /* Per step: the time after which every trailing 1 s average up to the next step (or the
     * end) stays within +-10% of the set point; and 1-s window rates from 5 s on. */
    for (int k = 0; k < 2; k++) {
        uint64_t from = steps[k], to = k == 0 ? steps[1] : t1 - 1000000000ull;
        double settled = -1, lo = 1e9, hi = 0;
        for (int b = nb - 1; b >= 0; b--) {
            uint64_t tb = t0 + (uint64_t)(b + 1) * BUCKET_MS * 1000000ull; /* bucket end */
            if (tb < from + 1000000000ull || tb > to)
                continue;
            if (fabs(avg[b] - 100) > 10)
                break;
            settled = (double)(tb - from) / 1e9 - 1.0; /* the window starts 1 s earlier */
        }
        for (int b = 0; b < nb; b++) {
            uint64_t tb = t0 + (uint64_t)(b + 1) * BUCKET_MS * 1000000ull;
            if (tb >= from + 6000000000ull && tb <= to) {
                lo = avg[b] < lo ? avg[b] : lo;
                hi = avg[b] > hi ? avg[b] : hi;
            }
        }
        printf("step %s: every trailing 1 s rate within +-10%% of 100/s from %.2f s after the "
               "step; 1 s rates from 5 s on: %.0f..%.0f/s\n",
               k == 0 ? "1->8" : "8->1", settled, lo, hi);
    }
    printf("data: %s\n", path);
    char cmd[16384];
    snprintf(cmd, sizeof cmd,
             "gnuplot -e \"set terminal png size 900,500; set output '%s/agent-step.png'; "
             "set title 'fleetprof agent: CPU sample rate, 1 -> 8 threads at t=0, 8 -> 1 at "
             "t=%.1f s (set point 100/s)'; set xlabel 'seconds from the first step'; "
             "set ylabel 'samples/s'; set yrange [0:*]; "
             "set y2label 'period (ms)'; set y2tics; set ytics nomirror; set grid; "
             "plot '%s' using 1:2 with steps title 'rate (250 ms buckets)', "
             "'' using 1:3 with lines lw 2 title 'rate (1 s average)', "
             "'' using 1:4 axes x1y2 with lines dt 2 title 'period per thread (ms)', "
             "110 with lines lc rgb 'gray' dt 3 title '+-10%%', "
             "90 with lines lc rgb 'gray' dt 3 notitle, "
             "100 with lines lc rgb 'black' dt 3 title 'set point'\"",
             outdir, (double)(steps[1] - steps[0]) / 1e9, path);
    if (system(cmd) == 0)
        printf("plot: %s/agent-step.png\n", outdir);
    else
        printf("gnuplot failed or missing (deploy/install-deps.sh installs gnuplot-nox)\n");
    free(avg);
    free_chunks(cs);
    free(cs);
    free(cnt);
    free(period);
    return 0;
}

int main(int argc, char **argv) {
    find_build();
    if (argc >= 2 && !strcmp(argv[1], "overhead"))
        return bench_overhead(argc > 2 ? atoi(argv[2]) : 7);
    if (argc >= 2 && !strcmp(argv[1], "step"))
        return bench_step(argc > 2 ? argv[2] : ".");
    fprintf(stderr, "usage: bench-agent overhead [ROUNDS] | step [OUTDIR]\n");
    return 2;
}
