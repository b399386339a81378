/* Key performance metrics (KPMs): their names, units and how each is derived from the sums the
 * ingest keeps per process and interval (aggregator/src/ingest/kpm.c, table `kpm`); a service's
 * value in an interval from its processes'; and the search for the process-intervals where a
 * KPM is highest or rose most against that process's own baseline. Pure functions.
 * Threading: no global state (the definitions are constant). */
#ifndef AGG_KPM_Q_H
#define AGG_KPM_Q_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The sums of one process in one interval (or several, added). */
typedef struct {
    int64_t chunks, duration_ns, cpu_ns, agent_cpu_ns;
    int64_t cpu_sampled_ns, cpu_alloc_ns, cpu_kernel_ns, cpu_copy_ns, cpu_unwind_ns, cpu_agent_ns;
    int64_t alloc_bytes, alloc_count, inuse_bytes, lock_wait_ns, lock_count;
    int64_t io_wait_ns, io_bytes, io_count, threads, dropped;
} agg_kpm_sums_t;

enum {
    AGG_KPM_CPU_CORES,
    AGG_KPM_ALLOC_RATE,
    AGG_KPM_ALLOC_OPS,
    AGG_KPM_HEAP_LIVE,
    AGG_KPM_HEAP_GROWTH,
    AGG_KPM_LOCK_WAIT,
    AGG_KPM_LOCK_CONTENDED,
    AGG_KPM_IO_WAIT,
    AGG_KPM_IO_BYTES,
    AGG_KPM_IO_CALLS,
    AGG_KPM_IO_BYTES_PER_CALL,
    AGG_KPM_THREADS,
    AGG_KPM_CPU_ALLOC_SHARE,
    AGG_KPM_CPU_KERNEL_SHARE,
    AGG_KPM_CPU_COPY_SHARE,
    AGG_KPM_CPU_UNWIND_SHARE,
    AGG_KPM_AGENT_SHARE,
    AGG_KPM_DROPPED,
    AGG_KPM_N
};

/* How a service's value in an interval follows from its processes': RATE and LEVEL values add
 * up, SHARE and RATIO are recomputed from the added sums, GROWTH from consecutive levels. */
enum { AGG_KPM_RATE, AGG_KPM_LEVEL, AGG_KPM_SHARE, AGG_KPM_RATIO, AGG_KPM_GROWTH };

typedef struct {
    const char *name, *unit, *help;
    int kind;
    int type; /* cm_event_type_t of the profile that explains it (search links), 0: cpu */
} agg_kpm_def_t;

extern const agg_kpm_def_t agg_kpm_defs[AGG_KPM_N];

/* The KPM named name, or -1. */
int agg_kpm_find(const char *name);

/* Every KPM of one process's sums s over seconds (its chunks' wall time, duration_ns when 0);
 * v[AGG_KPM_HEAP_GROWTH] is NaN (it needs the previous interval: agg_kpm_growth). */
void agg_kpm_values(const agg_kpm_sums_t *s, double v[AGG_KPM_N]);

/* Adds b's sums into a. */
void agg_kpm_sums_add(agg_kpm_sums_t *a, const agg_kpm_sums_t *b);

/* A service's values in one interval from its n processes' sums there. */
void agg_kpm_service_values(const agg_kpm_sums_t *p, size_t n, double v[AGG_KPM_N]);

/* One process-interval (or a service's interval: pid 0, host ""), its sums and values. */
typedef struct {
    int64_t bucket, width; /* unix seconds */
    char host[128];
    int64_t pid;
    char version[128];
    agg_kpm_sums_t s;
    double v[AGG_KPM_N];
} agg_kpm_point_t;

/* Fills v[AGG_KPM_HEAP_GROWTH] of points (sorted by process, then bucket): the change of
 * heap_live from the process's previous interval, per second (NaN for its first). */
void agg_kpm_growth(agg_kpm_point_t *pts, size_t n);

/* Search: the indices of the top (at most) points by KPM k, highest value first (rise = 0) or
 * largest rise over the process's baseline (rise = 1: its median over the points given),
 * written to idx (malloc'ed, *n_idx entries), baselines to *base (malloc'ed, may be NULL).
 * Returns 0 or CM_ENOMEM / CM_EINVAL. */
int agg_kpm_search(const agg_kpm_point_t *pts, size_t n, int k, int rise, size_t top,
                   size_t **idx, double **base, size_t *n_idx);

/* {"name","unit","help"} of every KPM (the API's catalogue). */
json_t *agg_kpm_catalogue(void);

#endif
