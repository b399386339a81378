/* End-to-end agent overhead on a mixed, service-like workload (issue 4; target <= 1%).
 *
 * The workload ("work" mode) is a small request server in one process:
 *   2 worker threads each serve a fixed number of requests; a request
 *     - parses and hashes a 2 KiB payload (CPU, ~40 us),
 *     - allocates like a request handler: a request object, 12 small strings (16-200 B), a 4 KiB
 *       response buffer, every 16th request a 64 KiB buffer; keeps the last 512 responses per
 *       worker in a ring cache (a live heap that turns over), frees the rest,
 *     - takes locks: a per-worker mutex (uncontended) three times, the shared stats mutex and
 *       the shared cache mutex once each (contended: both workers take them all the time),
 *     - does I/O: every 8th request a 64-byte round trip over a unix socketpair to a backend
 *       thread (send + recv), every 2nd request a 100-byte log line written to a pipe that a
 *       logger thread reads.
 *   The numbers are printed so the work is identical in every run.
 * The driver runs it as a child, without the agent ("base"), preloaded with FLEETPROF_ENABLED=0
 * ("off") and preloaded at default settings ("on": every hook family on, chunks written to a
 * temporary FLEETPROF_OUTPUT directory, no collector), rotating the order every round. Per
 * round it takes the ratios on/base and off/base of the child's CPU time (user + sys of all its
 * threads, the agent's included, from wait4) and of its wall time; it reports the median ratio
 * over rounds and the spread (quartiles, min, max). The child also reads its process CPU clock
 * (every thread, the agent's included) when the 10% and the 90% request are served: "steady
 * CPU" is the difference, the cost per unit of work of a process that runs for hours, without
 * the agent's one-time start and exit (its start-up ~3-6 ms of CPU; the last chunk's encoding
 * and write at exit), which is ~0.3% of a 2.5 s run. The "on" run also logs at debug level, and
 * the agent's own account of its CPU (background thread + sampling handlers, summed over the
 * chunk lines: "agent cpu N ns ... process cpu M ns") is reported as a share of the process
 * CPU: a low-noise lower bound that leaves out the time the hooks add on application threads
 * (bench-agent-hooks measures that per call). The machine's co-tenants move CPU time per unit
 * of work by several percent between runs (no hardware counters in this VM to count
 * instructions instead), so short runs and many rounds narrow the median.
 *
 * "pair" mode runs base and on at the same time instead, each pinned to one of the two cores
 * (swapped every round), so that the co-tenants' load hits both alike; each child then
 * time-shares one core, a different but equal workload for both. "pairoff" does the same with
 * the agent preloaded but FLEETPROF_ENABLED=0 in place of "on" (what interposition alone costs).
 * "pairsame" runs both at once on the same core (alternating between the two cores every
 * round): the two cores' different co-tenant loads no longer enter the ratio. Every ratio is
 * also reported as a geometric mean with its 95% confidence interval (t on the log ratios).
 *
 * "pairspans" runs two agent runs at once as "pair" does, both with BENCH_SPANS: "base" only
 * formats each request's traceparent (BENCH_SPANS=2), "on" also calls the span API
 * (BENCH_SPANS=1): on/base is then what a span per request adds to the agent's overhead,
 * measured in the same rounds; "pairsamespans" likewise, both on the same core (as pairsame).
 *
 * Usage: bench-agent-mixed [pair|pairoff|pairsame|pairspans|pairsamespans] [ROUNDS [REQUESTS]]
 *        (default 31, 40000)
 *        BENCH_AGENT_ENV="FLEETPROF_IO=0 ..." adds settings to the agent runs (ablation)
 *        BENCH_BASE_LIB=/path/libfleetprof.so (pair modes): "base" runs under that agent build
 *          (enabled, same settings) instead of bare, so on/base is after/before a change
 *        BENCH_BASE_ENV="..." (with BENCH_BASE_LIB): the base run's settings instead of
 *          BENCH_AGENT_ENV's, so on/base compares two settings (e.g. FLEETPROF_RECORDER=1 / 0)
 *        bench-agent-mixed work REQUESTS          (one run of the workload)
 *        BENCH_SPANS=1: every request is a named span, as a traced service's are: the worker
 *          formats the request's W3C traceparent (every run) and, when the agent is there,
 *          calls fleetprof_span_begin(traceparent, "GET /item") and fleetprof_span_end();
 *          BENCH_SPANS=2: formats it only
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench-agent-common.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- the workload ---- */

/* Every thread's CPU so far, the agent's included. */
static double process_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#define WORKERS 2
#define CACHE 512

static pthread_mutex_t g_stats_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_cache_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_stats_req, g_stats_bytes, g_cache_hits;
static int g_log_pipe[2];
static int g_backend[WORKERS][2]; /* socketpair per worker: [0] worker side, [1] backend */
static long g_requests;
static uint64_t g_mark_lo, g_mark_hi;    /* requests served at the steady window's ends */
static double g_cpu_lo, g_cpu_hi;        /* process CPU (s) when they were reached */

typedef struct {
    uint64_t id;
    char *fields[12];
    size_t nfields;
} request_t;

typedef struct {
    pthread_mutex_t mu; /* per-worker, uncontended */
    char *cache[CACHE];
    uint64_t sum;
} worker_t;

static worker_t g_w[WORKERS];

__attribute__((noinline)) static uint64_t parse_payload(const unsigned char *p, size_t n,
                                                        uint64_t seed) {
    uint64_t h = 1469598103934665603ull ^ seed;
    for (int round = 0; round < 16; round++)
        for (size_t i = 0; i < n; i++) {
            h ^= p[i];
            h *= 1099511628211ull;
        }
    return h;
}

__attribute__((noinline)) static request_t *request_new(uint64_t id, uint64_t h) {
    request_t *r = malloc(sizeof *r);
    r->id = id;
    r->nfields = 12;
    for (size_t i = 0; i < r->nfields; i++) {
        size_t len = 16 + (h >> (i * 5)) % 185; /* 16..200 B */
        r->fields[i] = malloc(len);
        memset(r->fields[i], 'a' + (int)i, len);
    }
    return r;
}

static void request_free(request_t *r) {
    for (size_t i = 0; i < r->nfields; i++)
        free(r->fields[i]);
    free(r);
}

__attribute__((noinline)) static void backend_call(int w, uint64_t id) {
    char msg[64];
    memset(msg, 0, sizeof msg);
    memcpy(msg, &id, sizeof id);
    if (send(g_backend[w][0], msg, sizeof msg, 0) != (ssize_t)sizeof msg ||
        recv(g_backend[w][0], msg, sizeof msg, MSG_WAITALL) != (ssize_t)sizeof msg)
        exit(3);
}

__attribute__((noinline)) static void log_line(uint64_t id, uint64_t h) {
    char line[100];
    memset(line, ' ', sizeof line);
    int n = snprintf(line, sizeof line, "req %llu hash %016llx", (unsigned long long)id,
                     (unsigned long long)h);
    line[n] = ' ';
    line[sizeof line - 1] = '\n';
    if (write(g_log_pipe[1], line, sizeof line) != (ssize_t)sizeof line)
        exit(3);
}

__attribute__((noinline)) static void handle(int w, uint64_t id, const unsigned char *payload,
                                             size_t n) {
    worker_t *me = &g_w[w];
    uint64_t h = parse_payload(payload, n, id);
    request_t *r = request_new(id, h);
    pthread_mutex_lock(&me->mu);
    me->sum += h;
    pthread_mutex_unlock(&me->mu);
    char *resp = malloc(4096);
    memcpy(resp, r->fields[0], 16);
    for (size_t i = 0; i < 4096; i += 64)
        resp[i] = (char)(h >> (i & 63));
    if (id % 16 == 0) {
        char *big = malloc(64 << 10);
        memset(big, 1, 64 << 10);
        h ^= (uint64_t)(unsigned char)big[(h >> 3) & 0xffff];
        free(big);
    }
    pthread_mutex_lock(&g_cache_mu);
    g_cache_hits += (h & 3) == 0;
    pthread_mutex_unlock(&g_cache_mu);
    if (id % 8 == 0)
        backend_call(w, id);
    pthread_mutex_lock(&me->mu);
    char **slot = &me->cache[id % CACHE];
    free(*slot); /* the response replaced in the cache */
    *slot = resp;
    pthread_mutex_unlock(&me->mu);
    if (id % 2 == 0)
        log_line(id, h);
    pthread_mutex_lock(&g_stats_mu);
    g_stats_req++;
    g_stats_bytes += n;
    if (g_stats_req == g_mark_lo)
        g_cpu_lo = process_cpu_s();
    else if (g_stats_req == g_mark_hi)
        g_cpu_hi = process_cpu_s();
    pthread_mutex_unlock(&g_stats_mu);
    pthread_mutex_lock(&me->mu);
    me->sum ^= r->id;
    pthread_mutex_unlock(&me->mu);
    request_free(r);
}

typedef int (*span_begin_fn)(const char *, const char *);
static span_begin_fn g_span_begin; /* BENCH_SPANS=1 under the agent */
static int (*g_span_end)(void);
static int g_spans;

/* The request's traceparent, as the service would read it from its header. */
static void traceparent(uint64_t id, char tp[56]) {
    static const char hex[] = "0123456789abcdef";
    memcpy(tp, "00-", 3);
    for (int i = 0; i < 48; i++)
        tp[3 + i + (i >= 32)] = hex[((id + 1) * 0x9E3779B97F4A7C15ull >> (i % 16 * 4)) & 15];
    tp[35] = '-';
    memcpy(tp + 52, "-01", 4);
}

static void *worker(void *arg) {
    int w = (int)(intptr_t)arg;
    unsigned char payload[2048];
    for (size_t i = 0; i < sizeof payload; i++)
        payload[i] = (unsigned char)(i * 131 + (size_t)w);
    for (long i = 0; i < g_requests; i++) {
        uint64_t id = (uint64_t)i * WORKERS + (uint64_t)w;
        char tp[56];
        if (g_spans)
            traceparent(id, tp);
        if (g_span_begin)
            g_span_begin(tp, "GET /item");
        handle(w, id, payload, sizeof payload);
        if (g_span_begin)
            g_span_end();
    }
    shutdown(g_backend[w][0], SHUT_WR);
    return NULL;
}

static void *backend(void *arg) {
    int w = (int)(intptr_t)arg;
    char msg[64];
    for (;;) {
        ssize_t r = recv(g_backend[w][1], msg, sizeof msg, MSG_WAITALL);
        if (r != (ssize_t)sizeof msg)
            break;
        msg[8] ^= 1;
        if (send(g_backend[w][1], msg, sizeof msg, 0) != (ssize_t)sizeof msg)
            break;
    }
    return NULL;
}

static void *logger(void *arg) {
    (void)arg;
    char buf[4096];
    uint64_t total = 0;
    ssize_t r;
    while ((r = read(g_log_pipe[0], buf, sizeof buf)) > 0)
        total += (uint64_t)r;
    return (void *)(uintptr_t)total;
}

static int work(long requests) {
    g_requests = requests;
    const char *sp = getenv("BENCH_SPANS");
    g_spans = sp && (!strcmp(sp, "1") || !strcmp(sp, "2"));
    if (g_spans && sp[0] == '1' &&
        (g_span_end = (int (*)(void))dlsym(RTLD_DEFAULT, "fleetprof_span_end")))
        g_span_begin = (span_begin_fn)dlsym(RTLD_DEFAULT, "fleetprof_span_begin");
    g_mark_lo = (uint64_t)requests * WORKERS / 10;
    g_mark_hi = (uint64_t)requests * WORKERS * 9 / 10;
    if (pipe(g_log_pipe) != 0)
        return 1;
    pthread_t lg, be[WORKERS], wk[WORKERS];
    pthread_create(&lg, NULL, logger, NULL);
    for (int w = 0; w < WORKERS; w++) {
        pthread_mutex_init(&g_w[w].mu, NULL);
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, g_backend[w]) != 0)
            return 1;
        pthread_create(&be[w], NULL, backend, (void *)(intptr_t)w);
    }
    double t0 = now_s();
    for (int w = 0; w < WORKERS; w++)
        pthread_create(&wk[w], NULL, worker, (void *)(intptr_t)w);
    for (int w = 0; w < WORKERS; w++)
        pthread_join(wk[w], NULL);
    double wall = now_s() - t0;
    for (int w = 0; w < WORKERS; w++)
        pthread_join(be[w], NULL);
    close(g_log_pipe[1]);
    void *logged;
    pthread_join(lg, &logged);
    for (int w = 0; w < WORKERS; w++)
        for (int i = 0; i < CACHE; i++)
            free(g_w[w].cache[i]);
    printf("wall=%.6f requests=%llu logged=%llu steady_cpu=%.6f\n", wall,
           (unsigned long long)g_stats_req, (unsigned long long)(uintptr_t)logged,
           g_cpu_hi - g_cpu_lo);
    (void)g_stats_bytes;
    return g_stats_req == (uint64_t)requests * WORKERS ? 0 : 1;
}

/* ---- driver ---- */

typedef struct {
    double cpu, wall;      /* s: child's user+sys (all threads), workload wall time */
    double steady;         /* s: process CPU from the 10% to the 90% request */
    double agent_share;    /* agent-reported CPU / process CPU (on runs), else 0 */
} res_t;

/* Sums the numbers after every occurrence of key in text. */
static double sum_after(const char *text, const char *key) {
    double sum = 0;
    for (const char *p = strstr(text, key); p; p = strstr(p + 1, key))
        sum += atof(p + strlen(key));
    return sum;
}

typedef struct {
    pid_t pid;
    int fd;
    const char *what;
} child_t;

/* Starts the workload as a child: lib NULL = no agent; cpu >= 0 pins it to that core; extra:
 * "K=V ..." settings added to the agent's (ablation); spans: its BENCH_SPANS (NULL: this
 * process's). */
static child_t start_child(const char *self, const char *lib, const char *enabled,
                           const char *out, long requests, int cpu, const char *extra,
                           const char *spans) {
    int fd[2];
    if (pipe(fd) != 0)
        exit(1);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        dup2(fd[1], 2); /* the on run's debug lines */
        close(fd[0]);
        if (cpu >= 0) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(cpu, &set);
            if (sched_setaffinity(0, sizeof set, &set) != 0)
                _exit(126);
        }
        unsetenv("LD_PRELOAD");
        if (spans)
            setenv("BENCH_SPANS", spans, 1);
        for (char **e = environ; *e;) { /* only the agent's defaults */
            if (!strncmp(*e, "FLEETPROF_", 10)) {
                char name[256];
                snprintf(name, sizeof name, "%.*s", (int)strcspn(*e, "="), *e);
                unsetenv(name);
            } else {
                e++;
            }
        }
        if (lib) {
            setenv("LD_PRELOAD", lib, 1);
            setenv("FLEETPROF_ENABLED", enabled, 1);
            setenv("FLEETPROF_COLLECTOR", "none", 1);
            setenv("FLEETPROF_OUTPUT", out, 1);
            setenv("FLEETPROF_LOG_LEVEL", "debug", 1);
            char kv[512];
            while (extra && *extra) {
                size_t n = strcspn(extra, " ");
                snprintf(kv, sizeof kv, "%.*s", (int)n, extra);
                if (strchr(kv, '='))
                    putenv(strdup(kv));
                extra += n + (extra[n] == ' ');
            }
        }
        char req[32];
        snprintf(req, sizeof req, "%ld", requests);
        execl(self, self, "work", req, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    return (child_t){pid, fd[0], lib ? (enabled[0] == '1' ? "on" : "off") : "base"};
}

static res_t finish_child(child_t c) {
    static char buf[1 << 16];
    size_t len = 0;
    ssize_t n;
    while ((n = read(c.fd, buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)n;
    buf[len] = '\0';
    close(c.fd);
    int st;
    struct rusage ru;
    if (wait4(c.pid, &st, 0, &ru) != c.pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "bench-agent-mixed: child (%s) failed: status %d: %.2000s\n", c.what, st,
                buf);
        exit(1);
    }
    const char *w = strstr(buf, "wall="), *sc = strstr(buf, "steady_cpu=");
    double pc = sum_after(buf, "process cpu ");
    res_t r = {(double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                   (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6,
               w ? atof(w + 5) : 0, sc ? atof(sc + 11) : 0,
               pc > 0 ? sum_after(buf, "agent cpu ") / pc : 0};
    return r;
}

static res_t run_child(const char *self, const char *lib, const char *enabled, const char *out,
                       long requests) {
    return finish_child(start_child(self, lib, enabled, out, requests, -1,
                                    getenv("BENCH_AGENT_ENV"), NULL));
}

/* Two-sided 95% quantile of Student's t with df degrees of freedom (1.96 past 30). */
static double t95(int df) {
    static const double t[] = {12.71, 4.30, 3.18, 2.78, 2.57, 2.45, 2.36, 2.31, 2.26, 2.23,
                               2.20,  2.18, 2.16, 2.14, 2.13, 2.12, 2.11, 2.10, 2.09, 2.09,
                               2.08,  2.07, 2.07, 2.06, 2.06, 2.06, 2.05, 2.05, 2.05, 2.04};
    return df >= 1 && df <= 30 ? t[df - 1] : 1.96;
}

/* Median, quartiles, extremes, and the geometric mean of the ratios with its 95% confidence
 * interval (t on the log ratios: the rounds are independent pairs). */
static void report(const char *what, double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmpd);
    double q1 = v[n / 4], med = v[n / 2], q3 = v[(3 * n) / 4];
    double m = 0, var = 0;
    for (int i = 0; i < n; i++)
        m += log(v[i] > 0 ? v[i] : 1e-9) / n;
    for (int i = 0; i < n; i++) {
        double d = log(v[i] > 0 ? v[i] : 1e-9) - m;
        var += d * d / (n - 1);
    }
    double h = t95(n - 1) * sqrt(var / n);
    printf("%-22s median %+6.2f%%   quartiles %+6.2f%% .. %+6.2f%%   min %+6.2f%%  max %+6.2f%%"
           "   mean %+6.2f%% (95%% CI %+.2f%% .. %+.2f%%)\n",
           what, 100 * (med - 1), 100 * (q1 - 1), 100 * (q3 - 1), 100 * (v[0] - 1),
           100 * (v[n - 1] - 1), 100 * (exp(m) - 1), 100 * (exp(m - h) - 1),
           100 * (exp(m + h) - 1));
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "work"))
        return work(atol(argv[2]));
    int spans = argc > 1 && (!strcmp(argv[1], "pairspans") || !strcmp(argv[1], "pairsamespans"));
    int pair = argc > 1 && (!strcmp(argv[1], "pair") || !strcmp(argv[1], "pairoff") ||
                            !strcmp(argv[1], "pairsame") || spans);
    int same = pair && (!strcmp(argv[1], "pairsame") || !strcmp(argv[1], "pairsamespans"));
    const char *pair_enabled = argc > 1 && !strcmp(argv[1], "pairoff") ? "0" : "1";
    /* ablation: BENCH_AGENT_ENV="FLEETPROF_IO=0 FLEETPROF_LOCK=0" for the agent runs */
    const char *agent_env = getenv("BENCH_AGENT_ENV");
    if (pair) {
        argv++;
        argc--;
    }
    int rounds = argc > 1 ? atoi(argv[1]) : 31;
    long requests = argc > 2 ? atol(argv[2]) : 40000;
    if (rounds < 3 || rounds > 200) {
        fprintf(stderr,
                "usage: bench-agent-mixed [pair|pairoff|pairsame|pairspans|pairsamespans] "
                "[ROUNDS (3-200) "
                "[REQUESTS]]\n");
        return 2;
    }
    char self[4096], lib[4096], out[] = "/tmp/fp-bench-mixed-XXXXXX";
    if (agent_paths(self, sizeof self, lib, sizeof lib) != 0 || !mkdtemp(out))
        return 1;
    printf("%d %s rounds of %ld requests x %d workers; lib %s\n", rounds,
           !pair                 ? "interleaved"
           : same && spans ? "paired (both under the agent, sharing one core, the core "
                             "alternating; base: no span calls, on: a span per request)"
           : same ? "paired (base and on at once, sharing one core, the core alternating)"
           : spans ? "paired (both under the agent, one core each, swapped; base: no span calls, "
                     "on: a span per request)"
           : pair_enabled[0] == '1' ? "paired (base and on at once, one core each, swapped)"
                                    : "paired (base and OFF at once, one core each, swapped)",
           requests, WORKERS, lib);
    double *cpu_on = calloc((size_t)rounds, sizeof(double));
    double *cpu_off = calloc((size_t)rounds, sizeof(double));
    double *wall_on = calloc((size_t)rounds, sizeof(double));
    double *wall_off = calloc((size_t)rounds, sizeof(double));
    double *share = calloc((size_t)rounds, sizeof(double));
    double *steady_on = calloc((size_t)rounds, sizeof(double));
    double *steady_off = calloc((size_t)rounds, sizeof(double));
    double base_cpu_sum = 0, base_wall_sum = 0;
    for (int r = 0; r < rounds; r++) {
        res_t res[3];
        if (pair) { /* the co-tenants' load hits both at once; no off run */
            const char *base_lib = getenv("BENCH_BASE_LIB"), *base_env = getenv("BENCH_BASE_ENV");
            if (spans)
                base_lib = lib;
            child_t b = start_child(self, base_lib && *base_lib ? base_lib : NULL, "1", out,
                                    requests, r % 2, base_env ? base_env : agent_env,
                                    spans ? "2" : NULL);
            child_t o = start_child(self, lib, pair_enabled, out, requests,
                                    same ? r % 2 : 1 - r % 2, agent_env, spans ? "1" : NULL);
            res[0] = finish_child(b);
            res[2] = finish_child(o);
            res[1] = res[0];
        } else {
            for (int k = 0; k < 3; k++) { /* rotate the order within a round */
                int c = (k + r) % 3;
                res[c] = run_child(self, c ? lib : NULL, c == 2 ? "1" : "0", out, requests);
            }
        }
        cpu_off[r] = res[1].cpu / res[0].cpu;
        cpu_on[r] = res[2].cpu / res[0].cpu;
        wall_off[r] = res[1].wall / res[0].wall;
        wall_on[r] = res[2].wall / res[0].wall;
        steady_on[r] = res[2].steady / res[0].steady;
        steady_off[r] = res[1].steady / res[0].steady;
        share[r] = 1 + res[2].agent_share; /* report() prints ratios */
        base_cpu_sum += res[0].cpu;
        base_wall_sum += res[0].wall;
        fprintf(stderr, "round %2d: cpu base %.3f s off %+.2f%% on %+.2f%%; wall base %.3f s off "
                        "%+.2f%% on %+.2f%%; steady CPU on %+.2f%%\n",
                r, res[0].cpu, 100 * (cpu_off[r] - 1), 100 * (cpu_on[r] - 1), res[0].wall,
                100 * (wall_off[r] - 1), 100 * (wall_on[r] - 1), 100 * (steady_on[r] - 1));
        /* chunks of finished runs: not needed */
        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -f %s/*.fpc", out);
        if (system(cmd) != 0)
            return 1;
    }
    printf("base: mean CPU %.3f s, mean wall %.3f s per run\n", base_cpu_sum / rounds,
           base_wall_sum / rounds);
    report("CPU  on/base  (agent)", cpu_on, rounds);
    report("CPU  off/base (loaded)", cpu_off, rounds);
    report("steady CPU on/base", steady_on, rounds);
    report("steady CPU off/base", steady_off, rounds);
    report("wall on/base  (agent)", wall_on, rounds);
    report("wall off/base (loaded)", wall_off, rounds);
    report("agent-reported CPU", share, rounds);
    printf("target: steady CPU on/base <= +1%%\n");
    rmdir(out);
    return 0;
}
