/* Dimensions users filter and group on: who sent a sample (host, node, pod, container, pid)
 * and, per sample, what it waited on (the I/O target - path or peer - and fd kind of an I/O
 * event, the lock address of a lock event).
 *
 * They are stored as labels of the fine and downsampled profile rows (reserved keys,
 * agg_dim_names), so a filter is the label filter. The derived rows (tiers, per-leaf rollup)
 * are keyed by the label set without them (table labelset_base: set -> set without the
 * dimensions), so they stay as small as before and a query filtered on a dimension reads the
 * fine rows (agg_dims_filtered). Process dimensions come from the collector's Kafka headers (fp-host,
 * fp-node, fp-pod, fp-container) and the chunk header (host when no collector said, pid); a
 * dimension replaces an application label of the same key.
 *
 * Cardinality bound: at most `limit` distinct values per (service, dimension) per window (the
 * coarse bucket, 1 h, of the chunks' start times), and at most AGG_DIM_MAX_ENTRIES tracked
 * values in all. A value past the bound is stored as AGG_DIM_OTHER ("(other)") and counted
 * (agg_dims_t.overflow, fleetprof_aggregator_dimension_overflow_total{dimension}): totals stay
 * exact, only the split past the bound is lost. The state is in memory and starts empty at
 * start, so a restart within a window may admit up to `limit` more values in it.
 *
 * Threading: an agg_dims_t belongs to the consume thread. The SQL filter builder is pure. */
#ifndef AGG_DIMS_H
#define AGG_DIMS_H

#include "batch.h"
#include "intern.h"

#include "cm/chunk.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    AGG_DIM_HOST,
    AGG_DIM_NODE,
    AGG_DIM_POD,
    AGG_DIM_CONTAINER,
    AGG_DIM_PID,
    AGG_DIM_UID,         /* the peer uid the collector checked */
    AGG_DIM_PID_CLAIMED, /* set only when the chunk's pid is not the one the collector checked */
    AGG_DIM_IO_TARGET,
    AGG_DIM_FD_KIND,
    AGG_DIM_LOCK,
    AGG_DIM_COUNT
} agg_dim_t;

/* label keys: "host", "node", "pod", "container", "pid", "uid", "pid-claimed", "io-target",
 * "fd-kind", "lock" */
extern const char *const agg_dim_names[AGG_DIM_COUNT];
#define AGG_DIM_OTHER "(other)"
/* distinct values per (service, dimension) and window; fd-kind has 4 values by nature */
#define AGG_DIM_LIMIT_PROCESS 1000 /* host, node, pod, container, pid, uid, pid-claimed */
#define AGG_DIM_LIMIT_TARGET 200   /* io-target, lock */
#define AGG_DIM_MAX_ENTRIES (1u << 20) /* values tracked in all (~48 MB) */

/* Index of a dimension by key name, or -1. */
int agg_dim_by_name(const char *name);

#define AGG_DIM_ALL ((1u << AGG_DIM_COUNT) - 1)
/* Parses the `dimensions` option: a comma-separated list of dimension names, "all" or "none",
 * into a mask of (1 << agg_dim_t). Returns 0, or CM_ECONFIG with the reason in err. */
int agg_dims_parse(const char *list, uint32_t *mask, char *err, size_t err_size);

/* What the transport says about the sender (Kafka headers set by the collector); "" or 0 if
 * absent. peer_pid/peer_uid: SO_PEERCRED at the collector; peer_nspid: that process's pid in
 * its own pid namespace (what the agent calls its pid; 0: unknown, then peer_pid is). */
typedef struct {
    char host[256], node[256], pod[256], container[80];
    uint32_t peer_pid, peer_nspid, peer_uid;
    int has_peer_uid;
} agg_chunk_meta_t;

typedef struct {
    uint32_t enabled; /* mask of the dimensions stored (AGG_DIM_ALL after init) */
    uint32_t limit[AGG_DIM_COUNT];
    uint64_t overflow[AGG_DIM_COUNT]; /* values stored as (other), cumulative */
    uint64_t pid_mismatch; /* chunks whose claimed pid is not the checked one, cumulative */
    uint32_t max_entries;
    uint64_t window; /* coarse bucket the bound counts in */
    int64_t window_s;
    agg_hmap_t seen, count; /* (service, dim, value) ; (service, dim) -> distinct values */
    agg_hmap_t cache;       /* per chunk: (label set, type, target, fd kind, address) -> set */
    uint64_t *rows[CM_EV_MAX + 1]; /* per chunk and type: each row's label set id */
    size_t rows_cap[CM_EV_MAX + 1];
    const uint64_t *row_ptr[CM_EV_MAX + 1];
} agg_dims_t;

/* window_s: width of the window of the bound (the coarse width); limits 0: the defaults. */
void agg_dims_init(agg_dims_t *d, int64_t window_s, uint32_t process_limit, uint32_t target_limit);
void agg_dims_free(agg_dims_t *d);

/* 1 when value (string id) of dimension dim may be stored for service in the window of
 * start_ns, 0 when it is past the bound (counted in overflow). <0: CM_ENOMEM. */
int agg_dims_admit(agg_dims_t *d, uint64_t service, agg_dim_t dim, uint64_t value,
                   uint64_t start_ns);

/* Computes the label set of every sample row of chunk c (its application labels plus the
 * dimensions) and points ids->row_labels at them (valid until the next call). Returns 0 or
 * CM_ENOMEM. */
int agg_dims_chunk(agg_dims_t *d, agg_intern_t *in, agg_batch_t *b, const cm_chunk_t *c,
                   const agg_chunk_meta_t *meta, agg_chunk_ids_t *ids);

/* ---- read side: filters on dimensions (and labels) as SQL, for the query layer ---- */

#define AGG_QMAX_FILTERS 16
typedef struct {
    const char *key, *value;
} agg_qfilter_t;

/* Appends " AND labels IN (SELECT labelset FROM labels WHERE key=?P AND value=?P+1)" per
 * filter to sql (column `col`, parameters from first_param on). Returns the length written or
 * -1 when it does not fit. */
int agg_dims_filter_sql(char *sql, size_t size, const char *col, const agg_qfilter_t *f,
                        size_t n, int first_param);
/* 1 when label_key or a filter's key is a dimension: such a query must read the fine rows (the
 * derived rows are keyed by the label sets without dimensions, labelset_base). */
int agg_dims_filtered(const char *label_key, const agg_qfilter_t *f, size_t n);
/* Binds the parameters of agg_dims_filter_sql (the string ids of keys and values). */
struct agg_qxst;
void agg_dims_filter_bind(struct agg_qxst *st, const agg_qfilter_t *f, size_t n,
                          int first_param);

#endif
