/* Storage interface of the aggregator: what the consume loop writes and the query layer reads.
 *
 * One store holds the data of ONE Kafka partition (one file per partition under the store
 * directory, see README.md "Scale out"): its rollups, its interned dictionaries, the seen chunk
 * ids of its dedup window, and its next offset. A batch is written in one transaction together
 * with the offset; the write is fenced: it fails with -ESTALE when the stored offset is not the
 * one the batch started from (another instance took the partition over in between).
 *
 * Backends implement agg_store_vtab_t; SQLite (store_sqlite.c) is the default, PostgreSQL
 * (store_pg.c) implements the write side only: its read members are NULL (the query API
 * reads through query_store.h; the read half here serves tests and tools on SQLite).
 * Services and versions are addressed by id = agg_intern_string_id(name) (intern.h); stacks
 * by their id.
 *
 * Threading: a store handle is used by one thread at a time. Several handles (processes) may
 * open the same store; the backend serializes their writes.
 */
#ifndef AGG_STORE_H
#define AGG_STORE_H

#include "batch.h"

#include <stddef.h>
#include <stdint.h>

typedef struct agg_store agg_store_t;

/* ---- read side: rows handed to callbacks; a callback returning non-zero stops the scan ---- */

typedef struct {
    uint64_t service, version; /* string ids */
    const char *service_name, *version_name;
    int64_t first_ns, last_ns; /* first chunk start, last chunk end: deploy markers */
    int64_t chunks, rows;
} agg_version_row_t;

typedef struct {
    uint64_t service, version;
    uint32_t type;
    int64_t bucket, width; /* unix seconds; 0 when summed over time */
    int64_t weight, count, rows, chunks;
} agg_total_row_t;

typedef struct {
    uint64_t stack;
    int64_t weight, count, rows, chunks;
} agg_profile_row_t;

typedef struct {
    uint64_t service;               /* required */
    const uint64_t *versions;       /* NULL: every version */
    size_t n_versions;
    uint32_t type;                  /* cm_event_type_t */
    int64_t from_s, to_s;           /* bucket start in [from_s, to_s) */
    const char *label_key, *label_value; /* both set: only samples with this label */
} agg_profile_query_t;

typedef struct {
    uint64_t location, function;
    const char *name, *system_name, *file; /* function; "" when unknown */
    const char *mapping_file;
    const uint8_t *build_id;
    size_t build_id_len;
    uint64_t address; /* relative to the mapping's file */
    uint32_t line;
} agg_store_frame_t;

typedef struct {
    uint32_t type;
    uint64_t stack;
    int64_t weight, count, rows;
} agg_span_stack_row_t;

typedef struct {
    uint64_t service, version;
    uint32_t type;
    int64_t bucket, width, chunks; /* chunks: chunks of (service, version, bucket) containing f */
    double incl, incl2, self, self2;
} agg_fn_stat_row_t;

typedef struct {
    int64_t rows_moved, rows_expired, spans_expired, seen_expired;
} agg_retention_stats_t;

typedef struct agg_store_vtab {
    const char *name;
    void (*close)(agg_store_t *st);
    /* Stored next offset of (topic, partition) in *next, or -1 when there is none. */
    int (*offset_get)(agg_store_t *st, const char *topic, int32_t partition, int64_t *next);
    /* 1 in *seen if the chunk id is in the dedup window. */
    int (*chunk_seen)(agg_store_t *st, const uint8_t *id, int *seen);
    /* Writes b and b->next_offset for (topic, partition) in one transaction, if the stored
     * offset still equals b->base_offset (-1: none stored). -ESTALE otherwise. The backend may
     * reorder b's new-row vectors (to insert in key order); the caller clears b afterwards. */
    int (*batch_write)(agg_store_t *st, const char *topic, int32_t partition, agg_batch_t *b);
    /* Merges rows of width fine with bucket < cutoff_s into rows of width coarse. */
    int (*downsample)(agg_store_t *st, int64_t fine, int64_t coarse, int64_t cutoff_s,
                      agg_retention_stats_t *stats);
    /* Deletes rollups with bucket < data_cutoff_s, spans last seen before span_cutoff_ns and
     * seen chunk ids older than seen_cutoff_ns. */
    int (*expire)(agg_store_t *st, int64_t data_cutoff_s, int64_t span_cutoff_ns,
                  int64_t seen_cutoff_ns, agg_retention_stats_t *stats);
    int64_t (*size_bytes)(agg_store_t *st);
    /* (Re)builds the rollups derived from the fine profile rows (the per-stack rollup at each of
     * the n tier widths, the last one the coarse width; the per-leaf rollup at replicate_s)
     * unless they were built at these widths; batch_write does it by itself on the first batch,
     * this is for stores written otherwise. */
    int (*derive)(agg_store_t *st, const int64_t *tiers, int n_tiers, int64_t replicate_s);
    /* Merges the fine rows (width fine_s) of the tiles completed by now_s into the per-stack
     * tiers (the retention pass runs it before downsampling). */
    int (*compact)(agg_store_t *st, int64_t fine_s, int64_t now_s);

    int (*versions)(agg_store_t *st, uint64_t service, int (*cb)(void *, const agg_version_row_t *),
                    void *arg);
    int (*totals)(agg_store_t *st, uint64_t service, int64_t from_s, int64_t to_s, int by_bucket,
                  int (*cb)(void *, const agg_total_row_t *), void *arg);
    int (*profile)(agg_store_t *st, const agg_profile_query_t *q,
                   int (*cb)(void *, const agg_profile_row_t *), void *arg);
    int (*stack_frames)(agg_store_t *st, uint64_t stack,
                        int (*cb)(void *, const agg_store_frame_t *), void *arg);
    int (*fn_stats)(agg_store_t *st, uint64_t service, uint64_t version, uint32_t type,
                    int64_t from_s, int64_t to_s, uint64_t function,
                    int (*cb)(void *, const agg_fn_stat_row_t *), void *arg);
    int (*span_profile)(agg_store_t *st, const uint8_t trace[16], const uint8_t *span,
                        int (*cb)(void *, const agg_span_stack_row_t *), void *arg);
    /* Rejected messages by reason (dead-lettered), exactly counted. */
    int (*rejects)(agg_store_t *st, int (*cb)(void *, const char *reason, int64_t count),
                   void *arg);
} agg_store_vtab_t;

struct agg_store {
    const agg_store_vtab_t *vt;
};

/* The WAL bound of a SQLite store: a checkpointer thread per writable store backfills the WAL
 * every AGG_CKPT_INTERVAL_MS (PASSIVE, never blocks the writer) and truncates the file when it
 * is past AGG_WAL_LIMIT_BYTES and fully backfilled; the writer checkpoints itself after a
 * commit that leaves more than that in the WAL (the thread fell behind); journal_size_limit
 * truncates the file to it whenever the WAL restarts. So the WAL file stays under
 * AGG_WAL_LIMIT_BYTES plus one transaction, unless a reader holds a snapshot for longer. */
#define AGG_CKPT_INTERVAL_MS 250
#define AGG_WAL_LIMIT_BYTES 16777216
#define AGG_STR_(x) #x
#define AGG_STR(x) AGG_STR_(x)

/* Opens (creating if needed) the SQLite store at path. Returns 0 or a negative code with the
 * reason in err. */
int agg_store_sqlite_open(const char *path, agg_store_t **out, char *err, size_t err_size);

/* Opens an existing store for the read side only (query layer, tools): no schema changes, no
 * checkpointer; never blocks the writer (WAL). Write calls fail. */
int agg_store_sqlite_open_readonly(const char *path, agg_store_t **out, char *err,
                                   size_t err_size);

/* The file of a partition's store under dir: "<dir>/<topic>-<partition>.db". */
void agg_store_path(char *out, size_t size, const char *dir, const char *topic, int32_t partition);

static inline void agg_store_close(agg_store_t *st) {
    if (st)
        st->vt->close(st);
}
#define agg_store_offset_get(st, ...) (st)->vt->offset_get((st), __VA_ARGS__)
#define agg_store_chunk_seen(st, ...) (st)->vt->chunk_seen((st), __VA_ARGS__)
#define agg_store_batch_write(st, ...) (st)->vt->batch_write((st), __VA_ARGS__)
#define agg_store_downsample(st, ...) (st)->vt->downsample((st), __VA_ARGS__)
#define agg_store_expire(st, ...) (st)->vt->expire((st), __VA_ARGS__)
#define agg_store_size_bytes(st) (st)->vt->size_bytes((st))
#define agg_store_versions(st, ...) (st)->vt->versions((st), __VA_ARGS__)
#define agg_store_totals(st, ...) (st)->vt->totals((st), __VA_ARGS__)
#define agg_store_profile_query(st, ...) (st)->vt->profile((st), __VA_ARGS__)
#define agg_store_stack_frames(st, ...) (st)->vt->stack_frames((st), __VA_ARGS__)
#define agg_store_fn_stats(st, ...) (st)->vt->fn_stats((st), __VA_ARGS__)
#define agg_store_span_profile(st, ...) (st)->vt->span_profile((st), __VA_ARGS__)
#define agg_store_rejects(st, ...) (st)->vt->rejects((st), __VA_ARGS__)

#endif
