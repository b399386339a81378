/* The batch: everything one store transaction writes for one partition, aggregated in memory.
 *
 * The consume loop decodes messages of a partition into the partition's batch (intern.c adds
 * new dictionary rows, rollup.c adds profile/totals deltas, spanindex.c adds span rows), then
 * hands the batch to the store, which writes it together with the partition's next offset and
 * the chunk ids it saw in ONE transaction (store.h). After a commit or a failed write the batch
 * is cleared and reused.
 *
 * All integer sums are exact (int64). Bucket starts and widths are unix seconds.
 * Threading: a batch belongs to the consume thread.
 */
#ifndef AGG_BATCH_H
#define AGG_BATCH_H

#include "hmap.h"

#include "cm/chunk.h"

#include <stdint.h>
#include <string.h>

/* profile: (service, version, type, width, bucket, labels, stack) -> sums. The same key and
 * sums serve the tiered per-stack rollup (widths: 1 min, 10 min and the coarse width, written
 * at ingest so that a query over a range reads one row per stack and whole tile of it) and the
 * per-leaf rollup (width = the replicate width; `stack` holds the store location id of the
 * stack's leaf frame: the replicates of a diff of self cost, one row per leaf instead of one
 * per stack). In derived rows `chunks` counts (chunk, fine bucket) contributions. */
#define AGG_MAX_TIERS 4
typedef struct {
    uint64_t service, version, type, width, bucket, labels, stack;
} agg_prof_key_t;
typedef struct {
    agg_prof_key_t k;
    int64_t weight, count, rows, chunks; /* chunks: distinct chunks that contributed */
    uint64_t last_chunk;                 /* batch-local tag of the last contributing chunk */
    uint64_t leaf;                       /* fine rows: location id of the stack's leaf frame */
    uint64_t base;  /* fine rows: the label set without dimensions (dims.h), which the derived
                     * rows (tiers, per-leaf) are keyed by */
} agg_prof_ent_t;

/* totals per type: (service, version, type, width, bucket) -> sums */
typedef struct {
    uint64_t service, version, type, width, bucket;
} agg_tot_key_t;
typedef struct {
    agg_tot_key_t k;
    int64_t weight, count, rows, chunks;
    uint64_t last_chunk;
} agg_tot_ent_t;

/* per-interval header figures: (service, version, width, bucket) of the chunk's start */
typedef struct {
    uint64_t service, version, width, bucket;
} agg_ival_key_t;
typedef struct {
    agg_ival_key_t k;
    int64_t chunks, duration_ns, agent_cpu_ns, process_cpu_ns, dropped;
    int64_t work_units; /* the chunks' units of work, pro rata like duration_ns */
} agg_ival_ent_t;

/* drops: (service, version, width, bucket, reason, type) -> count */
typedef struct {
    uint64_t service, version, width, bucket, reason, type;
} agg_drop_key_t;
typedef struct {
    agg_drop_key_t k;
    int64_t count;
} agg_drop_ent_t;

/* key performance metrics' sums per process and interval (ingest/kpm.c): (service, version,
 * width, bucket of the chunk's start, host string id, pid) -> sums over its chunks */
typedef struct {
    uint64_t service, version, width, bucket, host, pid;
} agg_kpm_key_t;
typedef struct {
    agg_kpm_key_t k;
    int64_t chunks, duration_ns, cpu_ns, agent_cpu_ns;
    int64_t cpu_sampled_ns, cpu_alloc_ns, cpu_kernel_ns, cpu_copy_ns, cpu_unwind_ns, cpu_agent_ns;
    int64_t alloc_bytes, alloc_count, inuse_bytes, lock_wait_ns, lock_count;
    int64_t io_wait_ns, io_bytes, io_count, threads, dropped;
} agg_kpm_ent_t;

/* versions: (service, version) -> first/last seen, chunks, sample rows */
typedef struct {
    uint64_t service, version;
} agg_ver_key_t;
typedef struct {
    agg_ver_key_t k;
    int64_t first_ns, last_ns, chunks, rows;
} agg_ver_ent_t;

/* replicate statistics per function: each chunk is one replicate; x = the function's share of
 * the chunk's total weight of that type (inclusive, recursion once; and self). */
typedef struct {
    uint64_t service, version, type, width, bucket, function;
} agg_fn_key_t;
typedef struct {
    agg_fn_key_t k;
    int64_t chunks;              /* chunks in which the function appears */
    double incl, incl2, self, self2; /* sums of x and x^2 */
} agg_fn_ent_t;

/* span index */
typedef struct {
    uint8_t trace[16], span[8];
} agg_span_key_t;
typedef struct {
    agg_span_key_t k;
    uint64_t service, version;
    int64_t first_ns, last_ns;
    int64_t weight[CM_EV_COUNT]; /* per event type */
    int64_t rows;
} agg_span_ent_t;
typedef struct {
    uint8_t trace[16], span[8];
    uint64_t type, stack;
} agg_spanstk_key_t;
typedef struct {
    agg_spanstk_key_t k;
    int64_t weight, count, rows;
} agg_spanstk_ent_t;

/* requests (chunk spans, minor 2): one row per (trace, span) */
typedef struct {
    agg_span_key_t k;
    uint64_t service, version, name; /* name: string id of the span's name, 0: unnamed */
    int64_t start_ns, end_ns;        /* end: the end, or the last cut it was active at */
    int64_t ended, tid;              /* ended: 1 once a record of its end arrived */
} agg_req_ent_t;

/* incidents (chunk format minor 3): one row per incident id, and its chunks' frames */
typedef struct {
    uint8_t id[CM_INCIDENT_ID_LEN];
} agg_inc_key_t;
typedef struct {
    agg_inc_key_t k;
    uint64_t service, version, host, pid, trigger; /* trigger: string id of its name */
    int64_t threshold, value, trigger_ns, start_ns, end_ns, parts, chunks;
} agg_inc_ent_t;
typedef struct {
    uint8_t id[CM_INCIDENT_ID_LEN];
    uint64_t part;
} agg_incchunk_key_t;
typedef struct {
    agg_incchunk_key_t k;
    size_t off; /* the frame in the batch's arena */
    uint32_t len;
} agg_incchunk_ent_t;

/* rejected messages by reason name ("EFORMAT", "EVERSION", ...) */
typedef struct {
    char reason[24];
} agg_rej_key_t;
typedef struct {
    agg_rej_key_t k;
    int64_t count;
} agg_rej_ent_t;

/* seen chunk ids (deduplication window) */
typedef struct {
    uint8_t id[CM_CHUNK_ID_LEN];
} agg_seen_key_t;
typedef struct {
    agg_seen_key_t k;
    int64_t ts_ns;
} agg_seen_ent_t;

/* New dictionary rows (ids are content hashes, see intern.c). Inserted with INSERT OR IGNORE. */
typedef struct {
    uint64_t id;
    size_t off; /* into str_arena */
    uint32_t len;
} agg_new_str_t;
typedef struct {
    uint64_t id, filename;
    uint8_t build_id[CM_MAX_BUILD_ID];
    uint32_t build_id_len;
} agg_new_map_t;
typedef struct {
    uint64_t id, name, system_name, filename;
} agg_new_fn_t;
typedef struct {
    uint64_t id, function, mapping, address, line;
} agg_new_loc_t;
typedef struct {
    uint64_t id, parent, location, depth;
} agg_new_stack_t;
typedef struct {
    uint64_t set, key, value;
    /* labels: the set holds a pid (dimension), so only its process's partition writes it */
    uint8_t fresh;
} agg_new_label_t;

#define AGG_VEC(T)                                                                                 \
    struct {                                                                                       \
        T *v;                                                                                      \
        size_t n, cap;                                                                             \
    }

typedef struct agg_batch {
    agg_hmap_t prof, tot, ival, drop, ver, fn, span, spanstk, rej, seen, req, kpm;
    agg_hmap_t inc, incchunk; /* incidents (ingest/incidents.c) */
    /* derived from prof by agg_batch_derive() (store/write.c, once): the per-stack rollup at
     * each tier width, narrowest first (the last one is the coarse width), and the per-leaf
     * rollup */
    agg_hmap_t profc, leaf;
    int64_t tiers[AGG_MAX_TIERS];
    int n_tiers;
    int64_t replicate_width;
    AGG_VEC(agg_new_str_t) strs;
    AGG_VEC(agg_new_map_t) maps;
    AGG_VEC(agg_new_fn_t) fns;
    AGG_VEC(agg_new_loc_t) locs;
    AGG_VEC(agg_new_stack_t) stacks;
    AGG_VEC(agg_new_label_t) labels;
    AGG_VEC(uint64_t) labelsets;
    AGG_VEC(agg_new_label_t) labelbase; /* (set, key unused, value = the set without dimensions) */
    char *str_arena;
    size_t arena_len, arena_cap;

    int64_t base_offset; /* offset the store holds for this partition when the batch started */
    int64_t next_offset; /* offset after the last message in the batch; -1: no message yet */
    uint64_t messages, chunks, duplicates, rejects, samples; /* this batch, for metrics */
    uint64_t incidents, incident_chunks; /* incident captures: first chunks, all chunks */
    uint64_t chunk_tag;  /* counter to tell chunks apart within the batch */
    int64_t first_msg_ms; /* monotonic ms of the first message, for the flush deadline */
} agg_batch_t;

void agg_batch_init(agg_batch_t *b);
void agg_batch_free(agg_batch_t *b);
/* Empties the batch for reuse (keeps memory). Sets next_offset to -1. */
void agg_batch_clear(agg_batch_t *b);
/* Adds one rejected message to the reject counts. */
int agg_batch_reject(agg_batch_t *b, const char *reason);
/* Fills profc and leaf from prof (replacing what they held): every row into leaf; into tier t
 * only the rows with bucket < done[t] (late data for a period the store has compacted
 * already; the rest reaches the tiers by compaction). Returns 0 or CM_ENOMEM. */
int agg_batch_derive(agg_batch_t *b, const int64_t *done);
/* Appends text to the arena; returns its offset or (size_t)-1. */
size_t agg_batch_arena_add(agg_batch_t *b, const char *s, uint32_t len);

/* Grows a vector for one more element; returns a pointer to the new slot or NULL. */
#define AGG_VEC_PUSH(vec)                                                                          \
    ((vec).n < (vec).cap || agg_vec_grow((void **)&(vec).v, &(vec).cap, sizeof *(vec).v) == 0      \
         ? &(vec).v[(vec).n++]                                                                     \
         : NULL)
int agg_vec_grow(void **v, size_t *cap, size_t elem);

/* The entries of m in key order as both stores write them (SQLite's order: the first nblob key
 * bytes with memcmp, then nint signed 64-bit integers): B-tree inserts in key order touch each
 * page once, and concurrent PostgreSQL writers take row locks in one order. Into *buf, grown
 * as needed and reused across calls. NULL on allocation failure; an empty map gives an empty,
 * non-NULL array. */
void **agg_hmap_ordered(const agg_hmap_t *m, size_t nblob, size_t nint, void ***buf,
                        size_t *cap);

/* Sorts b's new dictionary rows (strings, mappings, functions, locations, stacks, label
 * sets) by id: every new-row struct starts with its uint64 id. */
void agg_batch_sort_new(agg_batch_t *b);

/* The batch as rows of tables (batch_tables.c): each of its maps and vectors is a table of the
 * store (store/schema.c), each column a field of the map's entry or the vector's element, in
 * the table's column order. The store writes them in this order (store/write.c); a new column
 * is a field here and a column there. */
enum {
    AGG_BC_I64,   /* 8 bytes at off (int64 or uint64) */
    AGG_BC_F64,   /* a double at off */
    AGG_BC_BYTES, /* aux bytes at off */
    AGG_BC_VAR,   /* bytes at off, their count the uint32 at aux */
    AGG_BC_ARENA, /* text in the batch's arena: its size_t offset at off, uint32 length at aux */
    AGG_BC_CSTR,  /* a NUL-terminated text at off */
    AGG_BC_NOW,   /* an int64 at off, the write's time when 0 */
};
typedef struct {
    uint8_t kind;
    uint16_t off, aux;
} agg_bcol_t;
#define AGG_BT_MAXCOLS 32 /* kpm has 26 */
typedef struct {
    const char *table;
    size_t src;            /* offsetof(agg_batch_t, the map or vector) */
    uint16_t elem;         /* a vector's element size; 0: a map */
    uint8_t nblob, nint;   /* a map written in key order (agg_hmap_ordered); both 0: as it is */
    /* offset of a uint8 in each row, nonzero when its key is new to the store as far as the
     * batch knows (a backend may insert those rows without merging first); 0: no such flag */
    uint16_t fresh_off;
    uint8_t after_derive;  /* the store derives the tiers (agg_batch_derive) before this one */
    uint8_t ncols;
    agg_bcol_t cols[AGG_BT_MAXCOLS];
} agg_btable_t;
extern const agg_btable_t agg_batch_tables[];
extern const int agg_batch_ntables;

/* The n rows of table d in b, in write order, as pointers into b (into *buf, grown as needed).
 * NULL when out of memory. */
void **agg_batch_rows(const agg_batch_t *b, const agg_btable_t *d, size_t *n, void ***buf,
                      size_t *cap);
static inline int64_t agg_bcol_i64(const agg_bcol_t *c, const void *row, int64_t now) {
    int64_t v;
    memcpy(&v, (const char *)row + c->off, 8);
    return c->kind == AGG_BC_NOW && !v ? now : v;
}
static inline double agg_bcol_f64(const agg_bcol_t *c, const void *row) {
    double v;
    memcpy(&v, (const char *)row + c->off, 8);
    return v;
}
/* The bytes of a BYTES, VAR, ARENA or CSTR column, their count in *len. */
const void *agg_bcol_bytes(const agg_batch_t *b, const agg_bcol_t *c, const void *row,
                           size_t *len);

#endif
