/* diff-service: an open-loop service for the diff's pipeline sensitivity cells (issue 30,
 * bench/diff-pipeline.sh). Each request costs --cpu-us of CPU spread over five functions
 * (parse 30 %, route 20 %, render 25 %, compress 15 %, hash 10 %); --new-share S adds a
 * function new_fn costing S of the request's CPU (the others unchanged, so the request costs
 * 1 / (1 - S) more); --slow-share/--slow: render re-weighted to that share of the request and
 * made that much slower. Requests arrive at --rate per second on average (exponential gaps),
 * open loop: extra work costs CPU, not throughput. Built -O2 without frame pointers (and
 * without identical code folding, which would merge the six functions into one).
 *
 * usage: diff-service [--seconds N] [--rate R] [--cpu-us U] [--new-share S]
 *                     [--slow-share S --slow X] [--seed N] */
#define _GNU_SOURCE
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double loops_per_us; /* calibrated */
static volatile uint64_t sink;

static double now_s(int clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static inline __attribute__((always_inline)) void burn(double us) {
    uint64_t n = (uint64_t)(us * loops_per_us), x = sink;
    for (uint64_t i = 0; i < n; i++)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    sink = x;
}

__attribute__((noinline)) static void parse(double us) { burn(us); }
__attribute__((noinline)) static void route(double us) { burn(us); }
__attribute__((noinline)) static void render(double us) { burn(us); }
__attribute__((noinline)) static void compress(double us) { burn(us); }
__attribute__((noinline)) static void hash(double us) { burn(us); }
__attribute__((noinline)) static void new_fn(double us) { burn(us); }

static void calibrate(void) {
    loops_per_us = 100;
    double t0 = now_s(CLOCK_THREAD_CPUTIME_ID);
    burn(200000); /* 2e7 loops */
    double t = now_s(CLOCK_THREAD_CPUTIME_ID) - t0;
    loops_per_us = 2e7 / (t * 1e6);
}

int main(int argc, char **argv) {
    double seconds = 40, rate = 300, cpu_us = 1000, new_share = 0, slow_share = 0, slow = 0;
    unsigned seed = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i];
        double v = atof(argv[i + 1]);
        if (!strcmp(k, "--seconds"))
            seconds = v;
        else if (!strcmp(k, "--rate"))
            rate = v;
        else if (!strcmp(k, "--cpu-us"))
            cpu_us = v;
        else if (!strcmp(k, "--new-share"))
            new_share = v;
        else if (!strcmp(k, "--slow-share"))
            slow_share = v;
        else if (!strcmp(k, "--slow"))
            slow = v;
        else if (!strcmp(k, "--seed"))
            seed = (unsigned)v;
        else {
            fprintf(stderr, "diff-service: unknown flag %s\n", k);
            return 2;
        }
    }
    calibrate();
    double w[5] = {0.30, 0.20, 0.25, 0.15, 0.10};
    if (slow_share > 0) { /* render takes slow_share of the base request */
        double rest = 1 - w[2];
        for (int i = 0; i < 5; i++)
            w[i] = i == 2 ? slow_share : w[i] * (1 - slow_share) / rest;
        w[2] *= 1 + slow;
    }
    double extra = new_share > 0 ? cpu_us * new_share / (1 - new_share) : 0;
    srand48(seed);
    double start = now_s(CLOCK_MONOTONIC), next = start;
    uint64_t served = 0, late = 0;
    while ((next - start) < seconds) {
        double t = now_s(CLOCK_MONOTONIC);
        if (t < next) {
            struct timespec ts = {0, (long)((next - t) * 1e9)};
            nanosleep(&ts, NULL);
        } else if (t - next > 0.1) {
            late++;
        }
        parse(cpu_us * w[0]);
        route(cpu_us * w[1]);
        render(cpu_us * w[2]);
        compress(cpu_us * w[3]);
        hash(cpu_us * w[4]);
        if (extra > 0)
            new_fn(extra);
        served++;
        next += -log(1 - drand48()) / rate;
    }
    printf("served %llu requests (%llu late by > 100 ms)\n", (unsigned long long)served,
           (unsigned long long)late);
    return 0;
}
