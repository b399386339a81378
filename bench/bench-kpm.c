/* Ingest cost of the KPM sums (issue 33): the simulated fleet's chunks through the consume
 * loop's steps without Kafka or a store (intern, dimensions, rollup, which calls
 * agg_kpm_chunk), against agg_kpm_chunk alone on the same decoded chunks, in one invocation,
 * alternating rounds; prints the CPU time per chunk of each and the KPM's share of the
 * rollup's. The function categories are cached per thread, so the first round pays RE2 once
 * per function name.
 *
 *   bench-kpm [rounds=5]   (300 chunks of 6 x 2,000 rows per round) */
#include "aggtest.h"
#include "kpm.h"

#include "cm/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    fsim_params_t sp = {.seed = 7, .services = 5, .versions = 2, .processes = 6,
                        .intervals = 5, .samples = 2000, .stacks = 400};
    fsim_t *sim = fsim_new(&sp);
    cm_chunk_t *cs[400];
    int n = 0;
    const uint8_t *fr;
    size_t len;
    const char *key;
    char err[256];
    while (n < 400 && fsim_next(sim, &fr, &len, &key))
        if (cm_chunk_decode(fr, len, &cs[n], err, sizeof err) == 0)
            n++;
    double t_all = 0, t_kpm = 0;
    for (int r = 0; r < rounds; r++) {
        at_ingest_t x;
        at_ingest_init(&x);
        double t0 = cpu_now();
        for (int i = 0; i < n; i++)
            if (at_ingest_chunk(&x, cs[i], NULL))
                return 1;
        double t1 = cpu_now();
        agg_batch_t b;
        agg_batch_init(&b);
        for (int i = 0; i < n; i++)
            if (agg_kpm_chunk(&b, cs[i], 1, 2, 10, cs[i]->header.start_unix_ns / 10000000000ull))
                return 1;
        double t2 = cpu_now();
        agg_batch_free(&b);
        at_ingest_free(&x);
        if (r) { /* round 0 warms the caches (the category cache, the interning maps) */
            t_all += t1 - t0;
            t_kpm += t2 - t1;
        }
        printf("round %d: ingest %.1f us/chunk (KPM included), KPM alone %.1f us/chunk\n", r,
               (t1 - t0) / n * 1e6, (t2 - t1) / n * 1e6);
    }
    if (rounds > 1)
        printf("%d chunks x %d rounds: ingest %.1f us/chunk, KPM %.1f us/chunk = %.1f %% of it\n",
               n, rounds - 1, t_all / n / (rounds - 1) * 1e6, t_kpm / n / (rounds - 1) * 1e6,
               100 * t_kpm / t_all);
    for (int i = 0; i < n; i++)
        cm_chunk_free(cs[i]);
    fsim_free(sim);
    return 0;
}
