/* Per-endpoint diff between two sides (two versions of a service): per endpoint, its calls,
 * latency (p50, p99) and sampled cost per call (CPU, wall, allocated bytes) on each side, each
 * tested: latency by a rank test on the calls' durations (Mann-Whitney U, ties averaged,
 * normal approximation with the tie correction), the costs by Welch's t-test on the calls'
 * sampled costs (the mean per call is what is compared); Benjamini-Hochberg over every test of
 * every endpoint. A change is flagged when its q-value is at most q and it moved by at least
 * min_change (relative: latency by its median, costs by their mean per call).
 * Threading: pure functions of their inputs. */
#ifndef AGG_DIFF_ENDPOINTS_H
#define AGG_DIFF_ENDPOINTS_H

#include "diff.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One call (a request that ended) of an endpoint. */
typedef struct {
    const char *name; /* the endpoint */
    int64_t dur_ns;
    double cost[3]; /* sampled: CPU ns, wall ns, allocated bytes */
} agg_call_t;

enum { AGG_EPD_LATENCY, AGG_EPD_CPU, AGG_EPD_WALL, AGG_EPD_ALLOC, AGG_EPD_TESTS };
#define AGG_EPD_MIN_CALLS 10 /* calls each side needs for its endpoint to be tested */

typedef struct {
    char *name;
    uint64_t calls[2];           /* base, test */
    int64_t p50_ns[2], p99_ns[2]; /* nearest rank */
    double per_call[3][2];        /* CPU ns, wall ns, alloc bytes per call, base and test */
    double change[AGG_EPD_TESTS]; /* relative: p50's, then the per-call means'; NAN: undefined */
    double p[AGG_EPD_TESTS], q[AGG_EPD_TESTS]; /* 1 when untested */
    agg_diff_class_t cls[AGG_EPD_TESTS];
    int flagged; /* a regression in any of them */
} agg_epdiff_entry_t;

typedef struct {
    agg_epdiff_entry_t *entries; /* flagged first (largest latency change first), then by p99 */
    size_t n;
    double q, min_change;
    size_t n_tested, n_flagged;
} agg_epdiff_t;

/* Diffs the calls of test against those of base (both in any order; names compared as
 * strings). Returns 0 or CM_ENOMEM / CM_EINVAL (q outside (0, 1), min_change < 0). Release with
 * agg_epdiff_free(). */
int agg_epdiff_compute(const agg_call_t *base, size_t nb, const agg_call_t *test, size_t nt,
                       double q, double min_change, agg_epdiff_t *out);
void agg_epdiff_free(agg_epdiff_t *d);

/* {q, min_change, tested, flagged, test_used, endpoints: [{name, flagged, calls: {base, test},
 * p50_ns, p99_ns, cpu_per_call_ns, wall_per_call_ns, alloc_per_call_bytes: {base, test},
 * tests: {latency|cpu|wall|alloc: {change, p, q, class}}}]} */
json_t *agg_epdiff_json(const agg_epdiff_t *d);
/* A table, one endpoint per line. */
void agg_epdiff_print(FILE *f, const agg_epdiff_t *d);

#endif
