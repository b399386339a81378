/* demo-service: a small multi-threaded "checkout" service that profiles well. It runs unmodified
 * under `fleetprof run` (the agent is LD_PRELOADed); when the agent is present it tags every
 * request with a trace/span through the agent's C API and counts it (fleetprof_work_done, for
 * per-request diffs), found with dlsym so the program also runs without it.
 *
 * Each worker thread handles requests of two kinds, each in its own span:
 *   checkout: parse_request (allocations) -> price_cart (CPU) -> [v2 only: apply_discount_rules,
 *             about 10% more CPU] -> reserve_stock (a contended mutex) -> write_receipt (I/O)
 *   search:   parse_request -> scan_index (CPU) -> rank_results (CPU)
 * and with --slow-report, one request in 50 is a third kind, "GET /report", that spins 50 ms
 * in build_report (a planted slow endpoint). --stuck adds a thread whose one request, "GET
 * /export", never ends (stuck in wait_for_export: the process exits with it open).
 *
 * Requests arrive as a real client sends them: a W3C trace context header ("traceparent:
 * 00-<trace id>-<parent id>-01"), which the service parses and hands to the agent with the
 * endpoint's name (fleetprof_span_begin), ending the span when the request is done
 * (fleetprof_span_end). The service measures each request's latency itself (from the parsed
 * request to the handler's end, as a server's middleware timer does) and prints, per endpoint, the calls and their p50/p99 (nearest rank) at exit:
 *   endpoint "POST /checkout" calls=N p50_ns=X p99_ns=Y p50_range_ns=A-B p99_range_ns=C-D
 * where [A, B] and [C, D] hold the p50 and p99 of the spans' own durations: the clock is read
 * on both sides of fleetprof_span_begin and _end, whose stamps are inside them, so each span
 * lasted between (end call's start - begin call's end) and (end call's end - begin call's
 * start). They differ from the timer's by more than a few hundred ns only for a request the
 * machine stopped inside one of those calls.
 *
 * Load is open-loop, as for a real service: each thread serves --rate requests per second on
 * average (randomly spaced arrivals) and idles in between (falling behind is reported), so
 * extra work in v2 costs CPU, not throughput.
 *
 * usage: demo-service [--version v1|v2] [--seconds N] [--threads N] [--rate R] [--seed N]
 *                     [--slow-report] [--stuck] [--quiet]
 * Prints the number of requests served per kind at exit. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

typedef int (*span_set_fn)(const uint8_t *trace_id, const uint8_t *span_id);
typedef int (*span_begin_fn)(const char *traceparent, const char *name);
typedef int (*span_end_fn)(void);
static span_begin_fn span_begin;
static span_end_fn span_end;
static int slow_report, stuck_export;
typedef void (*span_clear_fn)(void);
typedef int (*label_set_fn)(const char *key, const char *value);
typedef void (*work_done_fn)(uint64_t units);
static work_done_fn work_done; /* counts requests, so diffs can compare per request */

static span_set_fn span_set;
static span_clear_fn span_clear;
static label_set_fn label_set;
static int v2, seconds = 20, nthreads = 2, rate = 1500;
static unsigned seed = 1;
static volatile int stop;
static pthread_mutex_t stock_lock = PTHREAD_MUTEX_INITIALIZER;
static long stock = 1000000;
static int receipt_fd = -1;
static volatile uint64_t sink;

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* CPU work of about `units` x 1 us. Always inlined: the work belongs to the function that asks
 * for it (its self time), as in real code, while noinline keeps each of those a frame. */
__attribute__((always_inline)) static inline uint64_t burn(uint64_t units, uint64_t x) {
    for (uint64_t i = 0; i < units * 150; i++)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x;
}

__attribute__((noinline)) static char **parse_request(uint64_t *r, int *n) {
    *n = 8 + (int)(rng(r) % 24);
    char **items = malloc(sizeof(char *) * (size_t)*n);
    for (int i = 0; i < *n; i++) {
        items[i] = malloc(64 + rng(r) % 512);
        memset(items[i], 'a', 32);
    }
    return items;
}

__attribute__((noinline)) static uint64_t price_cart(uint64_t x) { return burn(400, x); }
__attribute__((noinline)) static uint64_t apply_discount_rules(uint64_t x) { return burn(60, x); }
__attribute__((noinline)) static uint64_t scan_index(uint64_t x) { return burn(300, x); }
__attribute__((noinline)) static uint64_t rank_results(uint64_t x) { return burn(150, x); }

__attribute__((noinline)) static void reserve_stock(int n) {
    pthread_mutex_lock(&stock_lock);
    stock -= n;
    sink += burn(20, (uint64_t)stock); /* held briefly: contention, not starvation */
    pthread_mutex_unlock(&stock_lock);
}

__attribute__((noinline)) static void write_receipt(int n) {
    char line[128];
    int len = snprintf(line, sizeof line, "receipt items=%d stock=%ld\n", n, stock);
    if (receipt_fd >= 0 && write(receipt_fd, line, (size_t)len) < 0)
        perror("write_receipt");
}

/* The request's header block as a client sends it (W3C trace context). */
static void client_headers(uint64_t *r, char *buf, size_t size) {
    static const char hex[] = "0123456789abcdef";
    char tp[56];
    memcpy(tp, "00-", 3);
    for (int i = 0; i < 48; i++)
        tp[3 + i + (i >= 32)] = hex[rng(r) % 16];
    tp[35] = '-';
    memcpy(tp + 52, "-01", 4);
    snprintf(buf, size, "Host: demo\r\nTraceparent: %s\r\nAccept: */*\r\n\r\n", tp);
}

/* The value of header `name` (case-insensitive) in a header block, copied into out. */
static int header_value(const char *hdrs, const char *name, char *out, size_t size) {
    size_t nl = strlen(name);
    for (const char *l = hdrs; *l; l = strstr(l, "\r\n") ? strstr(l, "\r\n") + 2 : "") {
        if (!strncasecmp(l, name, nl) && l[nl] == ':') {
            const char *v = l + nl + 1;
            while (*v == ' ' || *v == '\t')
                v++;
            size_t n = strcspn(v, "\r\n");
            if (n >= size)
                return -1;
            memcpy(out, v, n);
            out[n] = '\0';
            return 0;
        }
    }
    return -1;
}

/* The headers of the request being served (set by the worker as the client's request
 * arrives). */
static __thread char t_hdrs[256];
/* The clock just before and just after the span's begin (t_start, t_start1) and end (t_end,
 * t_end1): the span's own stamps are inside those calls. */
static __thread uint64_t t_start, t_start1;
static uint64_t real_ns(void);

static void begin_span(uint64_t *r, const char *endpoint) {
    char tp[128];
    const char *hdrs = t_hdrs;
    (void)r;
    int ok = header_value(hdrs, "traceparent", tp, sizeof tp) == 0;
    t_start = real_ns(); /* the handler's latency starts once the request is parsed */
    if (ok && span_begin)
        span_begin(tp, endpoint);
    t_start1 = real_ns();
    if (label_set)
        label_set("endpoint", endpoint + strcspn(endpoint, "/"));
    if (work_done)
        work_done(1);
}

static __thread uint64_t t_end, t_end1;

static void end_span(void) {
    t_end = real_ns(); /* the handler is done: the latency stops here */
    if (span_end)
        span_end();
    else if (span_clear)
        span_clear();
    t_end1 = real_ns();
}

/* per endpoint, per thread: the latencies the service measured (ns); LAT_SHORT and LAT_LONG
 * bound the span's duration whatever happened inside the two calls (the shortest and longest
 * interval between the calls' sides: t_end - t_start1, t_end1 - t_start) */
enum { EP_CHECKOUT, EP_SEARCH, EP_REPORT, EP_N };
enum { LAT_TIMER, LAT_SHORT, LAT_LONG, LAT_N };
static const char *const ep_names[EP_N] = {"POST /checkout", "GET /search", "GET /report"};
typedef struct {
    uint64_t *v;
    size_t n, cap;
} lat_t;
static lat_t lat[64][EP_N][LAT_N];

static void lat_add(long id, int ep, int kind, uint64_t ns) {
    lat_t *l = &lat[id][ep][kind];
    if (l->n == l->cap) {
        size_t nc = l->cap ? 2 * l->cap : 1024;
        uint64_t *nv = realloc(l->v, nc * sizeof *nv);
        if (!nv)
            return;
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = ns;
}

static uint64_t real_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

__attribute__((noinline)) static uint64_t build_report(uint64_t x) {
    uint64_t end = real_ns() + 50000000ull; /* the planted slowness: 50 ms on CPU */
    while (real_ns() < end)
        x = burn(20, x);
    return x;
}

__attribute__((noinline)) static void handle_report(uint64_t *r) {
    begin_span(r, "GET /report");
    sink += build_report(rng(r));
    end_span();
}

__attribute__((noinline)) static void wait_for_export(void) {
    for (;;) {
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
    }
}

static void *stuck_thread(void *arg) {
    uint64_t r = (uint64_t)(uintptr_t)arg;
    client_headers(&r, t_hdrs, sizeof t_hdrs);
    begin_span(&r, "GET /export");
    wait_for_export();
    return NULL;
}

__attribute__((noinline)) static void handle_checkout(uint64_t *r) {
    begin_span(r, "POST /checkout");
    int n;
    char **items = parse_request(r, &n);
    uint64_t x = price_cart(rng(r));
    if (v2)
        x = apply_discount_rules(x);
    sink += x;
    reserve_stock(n);
    write_receipt(n);
    for (int i = 0; i < n; i++)
        free(items[i]);
    free(items);
    end_span();
}

__attribute__((noinline)) static void handle_search(uint64_t *r) {
    begin_span(r, "GET /search");
    int n;
    char **items = parse_request(r, &n);
    sink += rank_results(scan_index(rng(r)));
    for (int i = 0; i < n; i++)
        free(items[i]);
    free(items);
    end_span();
}

static long served[64][2];

static long behind[64];

static void *worker(void *arg) {
    long id = (long)arg;
    uint64_t r = (uint64_t)seed * 0x9E3779B97F4A7C15ull + (uint64_t)id + 1;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    long step_ns = 1000000000L / rate;
    while (!stop) {
        /* arrivals jittered uniformly in [0, 2) x the mean gap, as real traffic is: a strictly
         * periodic load aliases with the kernel's tick-driven CPU-timer delivery and makes each
         * process sample a fixed phase of its requests (one function over its neighbour) */
        next.tv_nsec += (long)(rng(&r) % (uint64_t)(2 * step_ns));
        if (next.tv_nsec >= 1000000000L) {
            next.tv_sec++;
            next.tv_nsec -= 1000000000L;
        }
        int rc;
        while ((rc = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL)) == EINTR)
            ; /* a profiler's (or any) signal handler interrupted the sleep */
        if (rc != 0)
            break;
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - next.tv_sec) * 1000000000L + (now.tv_nsec - next.tv_nsec) > 100000000L) {
            behind[id]++; /* more than 100 ms late: skip ahead instead of bursting */
            next = now;
        }
        uint64_t kind = rng(&r);
        client_headers(&r, t_hdrs, sizeof t_hdrs); /* the request arrives */
        int ep;
        if (slow_report && kind % 50 == 7) {
            handle_report(&r);
            ep = EP_REPORT;
        } else if (kind % 3) {
            handle_checkout(&r);
            served[id][0]++;
            ep = EP_CHECKOUT;
        } else {
            handle_search(&r);
            served[id][1]++;
            ep = EP_SEARCH;
        }
        lat_add(id, ep, LAT_TIMER, t_end - t_start);
        lat_add(id, ep, LAT_SHORT, t_end - t_start1);
        lat_add(id, ep, LAT_LONG, t_end1 - t_start);
    }
    return NULL;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest rank, as the aggregator computes it: the smallest value with q of them at or below. */
static uint64_t rank_q(const uint64_t *v, size_t n, double q) {
    size_t k = (size_t)(q * (double)n + 0.999999);
    return v[(k ? k - 1 : 0) < n ? (k ? k - 1 : 0) : n - 1];
}

/* p50 and p99 of endpoint e's latencies of one kind over the n threads; 0 calls: returns 0. */
static size_t quantiles(int n, int e, int kind, uint64_t q[2]) {
    size_t tot = 0;
    for (int i = 0; i < n; i++)
        tot += lat[i][e][kind].n;
    uint64_t *all = malloc((tot + 1) * sizeof *all);
    if (!all || tot == 0) {
        free(all);
        return 0;
    }
    size_t k = 0;
    for (int i = 0; i < n; i++)
        for (size_t j = 0; j < lat[i][e][kind].n; j++)
            all[k++] = lat[i][e][kind].v[j];
    qsort(all, tot, sizeof *all, cmp_u64);
    q[0] = rank_q(all, tot, 0.50);
    q[1] = rank_q(all, tot, 0.99);
    free(all);
    return tot;
}

/* Per endpoint: the timer's p50/p99, and the bounds any timer inside the span calls would
 * give (a percentile of durations each within [short, long] is within the percentiles of
 * the shorts and of the longs). */
static void print_latencies(int n) {
    for (int e = 0; e < EP_N; e++) {
        uint64_t t[2], lo[2], hi[2];
        size_t tot = quantiles(n, e, LAT_TIMER, t);
        if (!tot || !quantiles(n, e, LAT_SHORT, lo) || !quantiles(n, e, LAT_LONG, hi))
            continue;
        printf("endpoint \"%s\" calls=%zu p50_ns=%llu p99_ns=%llu p50_range_ns=%llu-%llu "
               "p99_range_ns=%llu-%llu\n", ep_names[e], tot, (unsigned long long)t[0],
               (unsigned long long)t[1], (unsigned long long)lo[0], (unsigned long long)hi[0],
               (unsigned long long)lo[1], (unsigned long long)hi[1]);
    }
}

int main(int argc, char **argv) {
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--version") && i + 1 < argc) {
            i++;
            if (strcmp(argv[i], "v1") && strcmp(argv[i], "v2")) {
                fprintf(stderr, "demo-service: --version must be v1 or v2, not '%s'\n", argv[i]);
                return 2;
            }
            v2 = !strcmp(argv[i], "v2");
        } else if (!strcmp(argv[i], "--seconds") && i + 1 < argc) {
            seconds = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            nthreads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--rate") && i + 1 < argc) {
            rate = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            seed = (unsigned)strtoul(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--quiet")) {
            quiet = 1;
        } else if (!strcmp(argv[i], "--slow-report")) {
            slow_report = 1;
        } else if (!strcmp(argv[i], "--stuck")) {
            stuck_export = 1;
        } else {
            fprintf(stderr, "usage: demo-service [--version v1|v2] [--seconds N] [--threads N] "
                            "[--rate R] [--seed N] [--slow-report] [--stuck] [--quiet]\n");
            return 2;
        }
    }
    if (nthreads < 1 || nthreads > 64 || seconds < 0 || rate < 1 || rate > 1000000) {
        fprintf(stderr, "demo-service: --threads must be 1..64, --seconds >= 0, --rate 1..1000000\n");
        return 2;
    }
    span_set = (span_set_fn)dlsym(RTLD_DEFAULT, "fleetprof_span_set");
    span_clear = (span_clear_fn)dlsym(RTLD_DEFAULT, "fleetprof_span_clear");
    span_begin = (span_begin_fn)dlsym(RTLD_DEFAULT, "fleetprof_span_begin");
    span_end = (span_end_fn)dlsym(RTLD_DEFAULT, "fleetprof_span_end");
    label_set = (label_set_fn)dlsym(RTLD_DEFAULT, "fleetprof_label_set");
    work_done = (work_done_fn)dlsym(RTLD_DEFAULT, "fleetprof_work_done");
    char path[] = "/tmp/demo-service-receipts-XXXXXX";
    receipt_fd = mkstemp(path);
    if (receipt_fd >= 0)
        unlink(path);
    pthread_t th[64], stuck_th;
    for (long i = 0; i < nthreads; i++)
        pthread_create(&th[i], NULL, worker, (void *)i);
    if (stuck_export)
        pthread_create(&stuck_th, NULL, stuck_thread, (void *)(uintptr_t)(seed + 99));
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += seconds;
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &end, NULL) == EINTR)
        ; /* signals (a profiler's included) must not cut the run short */
    stop = 1;
    long total[2] = {0, 0}, late = 0;
    for (long i = 0; i < nthreads; i++) {
        pthread_join(th[i], NULL);
        total[0] += served[i][0];
        total[1] += served[i][1];
        late += behind[i];
    }
    (void)stuck_th; /* never joined: its request is stuck for good */
    if (!quiet)
        printf("demo-service %s: %ld checkout, %ld search requests in %d s on %d threads%s%s\n",
               v2 ? "v2" : "v1", total[0], total[1], seconds, nthreads,
               span_set ? " (spans tagged)" : "", late ? " (fell behind the rate)" : "");
    print_latencies(nthreads);
    return 0;
}
