/* demo-service: a small multi-threaded "checkout" service that profiles well. It runs unmodified
 * under `fleetprof run` (the agent is LD_PRELOADed); when the agent is present it tags every
 * request with a trace/span through the agent's C API and counts it (fleetprof_work_done, for
 * per-request diffs), found with dlsym so the program also runs without it.
 *
 * Each worker thread handles requests of two kinds, each in its own span:
 *   checkout: parse_request (allocations) -> price_cart (CPU) -> [v2 only: apply_discount_rules,
 *             about 10% more CPU] -> reserve_stock (a contended mutex) -> write_receipt (I/O)
 *   search:   parse_request -> scan_index (CPU) -> rank_results (CPU)
 *
 * Load is open-loop, as for a real service: each thread serves --rate requests per second on
 * average (randomly spaced arrivals) and idles in between (falling behind is reported), so
 * extra work in v2 costs CPU, not throughput.
 *
 * usage: demo-service [--version v1|v2] [--seconds N] [--threads N] [--rate R] [--seed N]
 *                     [--quiet]
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
#include <time.h>
#include <unistd.h>

typedef int (*span_set_fn)(const uint8_t *trace_id, const uint8_t *span_id);
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

static void begin_span(uint64_t *r, const char *endpoint) {
    uint8_t trace[16], span[8];
    for (int i = 0; i < 16; i++)
        trace[i] = (uint8_t)rng(r);
    for (int i = 0; i < 8; i++)
        span[i] = (uint8_t)rng(r);
    if (span_set)
        span_set(trace, span);
    if (label_set)
        label_set("endpoint", endpoint);
    if (work_done)
        work_done(1);
}

__attribute__((noinline)) static void handle_checkout(uint64_t *r) {
    begin_span(r, "/checkout");
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
    if (span_clear)
        span_clear();
}

__attribute__((noinline)) static void handle_search(uint64_t *r) {
    begin_span(r, "/search");
    int n;
    char **items = parse_request(r, &n);
    sink += rank_results(scan_index(rng(r)));
    for (int i = 0; i < n; i++)
        free(items[i]);
    free(items);
    if (span_clear)
        span_clear();
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
        if (rng(&r) % 3) {
            handle_checkout(&r);
            served[id][0]++;
        } else {
            handle_search(&r);
            served[id][1]++;
        }
    }
    return NULL;
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
        } else {
            fprintf(stderr, "usage: demo-service [--version v1|v2] [--seconds N] [--threads N] "
                            "[--rate R] [--seed N] [--quiet]\n");
            return 2;
        }
    }
    if (nthreads < 1 || nthreads > 64 || seconds < 0 || rate < 1 || rate > 1000000) {
        fprintf(stderr, "demo-service: --threads must be 1..64, --seconds >= 0, --rate 1..1000000\n");
        return 2;
    }
    span_set = (span_set_fn)dlsym(RTLD_DEFAULT, "fleetprof_span_set");
    span_clear = (span_clear_fn)dlsym(RTLD_DEFAULT, "fleetprof_span_clear");
    label_set = (label_set_fn)dlsym(RTLD_DEFAULT, "fleetprof_label_set");
    work_done = (work_done_fn)dlsym(RTLD_DEFAULT, "fleetprof_work_done");
    char path[] = "/tmp/demo-service-receipts-XXXXXX";
    receipt_fd = mkstemp(path);
    if (receipt_fd >= 0)
        unlink(path);
    pthread_t th[64];
    for (long i = 0; i < nthreads; i++)
        pthread_create(&th[i], NULL, worker, (void *)i);
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
    if (!quiet)
        printf("demo-service %s: %ld checkout, %ld search requests in %d s on %d threads%s%s\n",
               v2 ? "v2" : "v1", total[0], total[1], seconds, nthreads,
               span_set ? " (spans tagged)" : "", late ? " (fell behind the rate)" : "");
    return 0;
}
