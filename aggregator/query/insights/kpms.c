/* KPM definitions, derivation, a service's values and the search (kpms.h).
 * Threading: no global state. */
#include "kpms.h"

#include "cm/chunk.h"
#include "cm/error.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const agg_kpm_def_t agg_kpm_defs[AGG_KPM_N] = {
    [AGG_KPM_CPU_CORES] = {"cpu_cores", "cores", "process CPU time per second (header)",
                           AGG_KPM_RATE, CM_EV_CPU},
    [AGG_KPM_ALLOC_RATE] = {"alloc_rate", "bytes/s", "bytes allocated per second (sampled, "
                            "scaled)", AGG_KPM_RATE, CM_EV_ALLOC},
    [AGG_KPM_ALLOC_OPS] = {"alloc_ops", "allocs/s", "allocations per second (sampled, scaled)",
                           AGG_KPM_RATE, CM_EV_ALLOC},
    [AGG_KPM_HEAP_LIVE] = {"heap_live", "bytes", "live heap: sampled live bytes at the chunk "
                           "cuts, mean over the interval's chunks", AGG_KPM_LEVEL, CM_EV_INUSE},
    [AGG_KPM_HEAP_GROWTH] = {"heap_growth", "bytes/s", "change of heap_live from the previous "
                             "interval, per second", AGG_KPM_GROWTH, CM_EV_INUSE},
    [AGG_KPM_LOCK_WAIT] = {"lock_wait", "s/s", "time threads waited for locks per second "
                           "(threads blocked on average)", AGG_KPM_RATE, CM_EV_LOCK},
    [AGG_KPM_LOCK_CONTENDED] = {"lock_contended", "1/s", "contended lock acquisitions per "
                                "second", AGG_KPM_RATE, CM_EV_LOCK},
    [AGG_KPM_IO_WAIT] = {"io_wait", "s/s", "time threads waited in I/O calls per second "
                         "(calls from FLEETPROF_IO_FLOOR on)", AGG_KPM_RATE, CM_EV_IO},
    [AGG_KPM_IO_BYTES] = {"io_bytes", "bytes/s", "bytes moved by those I/O calls per second",
                          AGG_KPM_RATE, CM_EV_IO},
    [AGG_KPM_IO_CALLS] = {"io_calls", "1/s", "those I/O calls per second", AGG_KPM_RATE,
                          CM_EV_IO},
    [AGG_KPM_IO_BYTES_PER_CALL] = {"io_bytes_per_call", "bytes", "mean bytes per I/O call",
                                   AGG_KPM_RATIO, CM_EV_IO},
    [AGG_KPM_THREADS] = {"threads", "threads", "threads seen per chunk (mean)", AGG_KPM_LEVEL,
                         CM_EV_CPU},
    [AGG_KPM_CPU_ALLOC_SHARE] = {"cpu_alloc_share", "share", "CPU samples in the allocator",
                                 AGG_KPM_SHARE, CM_EV_CPU},
    [AGG_KPM_CPU_KERNEL_SHARE] = {"cpu_kernel_share", "share", "CPU samples whose leaf is a "
                                  "system call wrapper (time in the kernel)", AGG_KPM_SHARE,
                                  CM_EV_CPU},
    [AGG_KPM_CPU_COPY_SHARE] = {"cpu_copy_share", "share", "CPU samples in memcpy/memmove",
                                AGG_KPM_SHARE, CM_EV_CPU},
    [AGG_KPM_CPU_UNWIND_SHARE] = {"cpu_unwind_share", "share", "CPU samples throwing or "
                                  "unwinding C++ exceptions", AGG_KPM_SHARE, CM_EV_CPU},
    [AGG_KPM_AGENT_SHARE] = {"agent_share", "share", "the agent's CPU (its threads and hooks) "
                             "over the process's CPU", AGG_KPM_SHARE, CM_EV_CPU},
    [AGG_KPM_DROPPED] = {"dropped", "1/s", "samples lost per second (not flood subsampling)",
                         AGG_KPM_RATE, CM_EV_CPU},
};

int agg_kpm_find(const char *name) {
    for (int k = 0; k < AGG_KPM_N; k++)
        if (!strcmp(agg_kpm_defs[k].name, name))
            return k;
    return -1;
}

static double ratio(double a, double b) { return b > 0 ? a / b : NAN; }

void agg_kpm_values(const agg_kpm_sums_t *s, double v[AGG_KPM_N]) {
    double t = (double)s->duration_ns / 1e9, cpu = (double)s->cpu_sampled_ns;
    v[AGG_KPM_CPU_CORES] = ratio((double)s->cpu_ns / 1e9, t);
    v[AGG_KPM_ALLOC_RATE] = ratio((double)s->alloc_bytes, t);
    v[AGG_KPM_ALLOC_OPS] = ratio((double)s->alloc_count / CM_COUNT_ONE, t);
    v[AGG_KPM_HEAP_LIVE] = ratio((double)s->inuse_bytes, (double)s->chunks);
    v[AGG_KPM_HEAP_GROWTH] = NAN;
    v[AGG_KPM_LOCK_WAIT] = ratio((double)s->lock_wait_ns / 1e9, t);
    v[AGG_KPM_LOCK_CONTENDED] = ratio((double)s->lock_count / CM_COUNT_ONE, t);
    v[AGG_KPM_IO_WAIT] = ratio((double)s->io_wait_ns / 1e9, t);
    v[AGG_KPM_IO_BYTES] = ratio((double)s->io_bytes, t);
    v[AGG_KPM_IO_CALLS] = ratio((double)s->io_count / CM_COUNT_ONE, t);
    v[AGG_KPM_IO_BYTES_PER_CALL] = ratio((double)s->io_bytes,
                                         (double)s->io_count / CM_COUNT_ONE);
    v[AGG_KPM_THREADS] = ratio((double)s->threads, (double)s->chunks);
    v[AGG_KPM_CPU_ALLOC_SHARE] = ratio((double)s->cpu_alloc_ns, cpu);
    v[AGG_KPM_CPU_KERNEL_SHARE] = ratio((double)s->cpu_kernel_ns, cpu);
    v[AGG_KPM_CPU_COPY_SHARE] = ratio((double)s->cpu_copy_ns, cpu);
    v[AGG_KPM_CPU_UNWIND_SHARE] = ratio((double)s->cpu_unwind_ns, cpu);
    v[AGG_KPM_AGENT_SHARE] = ratio((double)s->agent_cpu_ns, (double)s->cpu_ns);
    v[AGG_KPM_DROPPED] = ratio((double)s->dropped, t);
}

void agg_kpm_sums_add(agg_kpm_sums_t *a, const agg_kpm_sums_t *b) {
    int64_t *x = (int64_t *)a;
    const int64_t *y = (const int64_t *)b;
    for (size_t i = 0; i < sizeof *a / sizeof(int64_t); i++)
        x[i] += y[i];
}

void agg_kpm_service_values(const agg_kpm_sums_t *p, size_t n, double v[AGG_KPM_N]) {
    agg_kpm_sums_t all = {0};
    double one[AGG_KPM_N], add[AGG_KPM_N] = {0};
    for (size_t i = 0; i < n; i++) {
        agg_kpm_sums_add(&all, &p[i]);
        agg_kpm_values(&p[i], one);
        for (int k = 0; k < AGG_KPM_N; k++)
            if (isfinite(one[k]))
                add[k] += one[k];
    }
    agg_kpm_values(&all, v);
    for (int k = 0; k < AGG_KPM_N; k++)
        if (agg_kpm_defs[k].kind == AGG_KPM_RATE || agg_kpm_defs[k].kind == AGG_KPM_LEVEL)
            v[k] = n ? add[k] : NAN;
}

static int same_process(const agg_kpm_point_t *a, const agg_kpm_point_t *b) {
    return a->pid == b->pid && !strcmp(a->host, b->host);
}

void agg_kpm_growth(agg_kpm_point_t *pts, size_t n) {
    for (size_t i = 0; i < n; i++) {
        pts[i].v[AGG_KPM_HEAP_GROWTH] = NAN;
        if (i && same_process(&pts[i - 1], &pts[i]) && pts[i].bucket > pts[i - 1].bucket)
            pts[i].v[AGG_KPM_HEAP_GROWTH] =
                (pts[i].v[AGG_KPM_HEAP_LIVE] - pts[i - 1].v[AGG_KPM_HEAP_LIVE]) /
                (double)(pts[i].bucket - pts[i - 1].bucket);
    }
}

static _Thread_local const double *tl_key;
static int cmp_desc(const void *a, const void *b) {
    double x = tl_key[*(const size_t *)a], y = tl_key[*(const size_t *)b];
    if (x != y)
        return x < y ? 1 : -1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}
static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of k over the points of process i's run [lo, hi) (finite values only). */
static double median_of(const agg_kpm_point_t *pts, size_t lo, size_t hi, int k, double *tmp) {
    size_t m = 0;
    for (size_t i = lo; i < hi; i++)
        if (isfinite(pts[i].v[k]))
            tmp[m++] = pts[i].v[k];
    if (!m)
        return NAN;
    qsort(tmp, m, sizeof *tmp, cmp_d);
    return m % 2 ? tmp[m / 2] : (tmp[m / 2 - 1] + tmp[m / 2]) / 2;
}

int agg_kpm_search(const agg_kpm_point_t *pts, size_t n, int k, int rise, size_t top,
                   size_t **idx, double **base, size_t *n_idx) {
    if (k < 0 || k >= AGG_KPM_N)
        return CM_EINVAL;
    size_t *ix = malloc((n + 1) * sizeof *ix);
    double *key = malloc((n + 1) * sizeof *key), *bl = malloc((n + 1) * sizeof *bl);
    double *tmp = malloc((n + 1) * sizeof *tmp);
    if (!ix || !key || !bl || !tmp) {
        free(ix), free(key), free(bl), free(tmp);
        return CM_ENOMEM;
    }
    size_t m = 0;
    for (size_t lo = 0, hi; lo < n; lo = hi) { /* runs of one process */
        for (hi = lo + 1; hi < n && same_process(&pts[lo], &pts[hi]); hi++)
            ;
        double med = rise ? median_of(pts, lo, hi, k, tmp) : 0;
        for (size_t i = lo; i < hi; i++) {
            bl[i] = rise ? med : NAN;
            key[i] = pts[i].v[k] - (rise ? med : 0);
            if (isfinite(key[i]))
                ix[m++] = i;
        }
    }
    tl_key = key;
    qsort(ix, m, sizeof *ix, cmp_desc);
    *n_idx = m < top ? m : top;
    free(key), free(tmp);
    *idx = ix;
    if (base)
        *base = bl;
    else
        free(bl);
    return 0;
}

json_t *agg_kpm_catalogue(void) {
    json_t *a = json_array();
    for (int k = 0; a && k < AGG_KPM_N; k++)
        json_array_append_new(a, json_pack("{s:s,s:s,s:s}", "name", agg_kpm_defs[k].name,
                                           "unit", agg_kpm_defs[k].unit, "help",
                                           agg_kpm_defs[k].help));
    return a;
}
