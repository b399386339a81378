/* Storage interface of the aggregator: what the consume loop writes (the query layer reads the
 * same tables through query_store.h, the one read interface).
 *
 * One store holds the data of ONE Kafka partition (one file per partition under the store
 * directory, see README.md "Scale out"): its rollups, its interned dictionaries, the seen chunk
 * ids of its dedup window, and its next offset. A batch is written in one transaction together
 * with the offset; the write is fenced: it fails with -ESTALE when the stored offset is not the
 * one the batch started from (another instance took the partition over in between).
 *
 * Backends implement agg_store_vtab_t; SQLite (store_sqlite.c) is the default, PostgreSQL
 * (store_pg.c) the store of fleets. A backend holds only its connection, the fence and the
 * bulk load of rows; the upkeep of the derived rollups and retention are written once
 * (store/tiers.c) over the backend's connection as a query executor (qexec.h), as is the
 * schema (store/schema.c). Every read (API, reports, CLI tools, tests) goes through
 * query_store.h.
 * Services and versions are addressed by id = agg_intern_string_id(name) (intern.h); stacks
 * by their id.
 *
 * Threading: a store handle is used by one thread at a time. Several handles (processes) may
 * open the same store; the backend serializes their writes.
 */
#ifndef AGG_STORE_H
#define AGG_STORE_H

#include "batch.h"
#include "qexec.h"
#include "schema.h"

#include <stddef.h>
#include <stdint.h>

typedef struct agg_store agg_store_t;

typedef struct {
    int64_t rows_moved, rows_expired, spans_expired, seen_expired;
} agg_retention_stats_t;

/* One table's rows of a batch, for a backend's bulk load (store/write.c). */
typedef struct {
    int index; /* of the table in agg_batch_tables[] */
    const agg_schema_table_t *t;
    const agg_btable_t *d;
    void *const *rows; /* n entries of the batch's map or vector, in write order */
    size_t n;
    const agg_batch_t *b;
    int64_t now_ns; /* the write's time (AGG_BC_NOW columns) */
} agg_load_t;

/* What a bulk load does with each value of the rows (agg_load_rows): the columns of a row in
 * order, then row_end (nonzero stops the load and is returned). */
typedef struct {
    void (*i64)(void *ctx, int col, int64_t v);
    void (*f64)(void *ctx, int col, double v);
    void (*bytes)(void *ctx, int col, const void *p, size_t len, int text);
    int (*row_end)(void *ctx, const agg_load_t *l, size_t row);
} agg_load_sink_t;
int agg_load_rows(const agg_load_t *l, const agg_load_sink_t *k, void *ctx);
/* Column c of row i of l into the sink (agg_load_rows' step). */
void agg_load_col(const agg_load_t *l, const agg_load_sink_t *k, void *ctx, int c, size_t i);

typedef struct agg_store_vtab {
    const char *name;
    void (*close)(agg_store_t *st);
    /* Stored next offset of (topic, partition) in *next, or -1 when there is none. */
    int (*offset_get)(agg_store_t *st, const char *topic, int32_t partition, int64_t *next);
    /* 1 in *seen if the chunk id is in the dedup window. */
    int (*chunk_seen)(agg_store_t *st, const uint8_t *id, int *seen);
    /* Writes b and b->next_offset for (topic, partition) in one transaction, if the stored
     * offset still equals b->base_offset (-1: none stored). -ESTALE otherwise. The store may
     * reorder b's new-row vectors (to insert in key order); the caller clears b afterwards.
     * Both backends: agg_store_write (store/write.c), over fence and load. */
    int (*batch_write)(agg_store_t *st, const char *topic, int32_t partition, agg_batch_t *b);
    /* Inside the batch's transaction: holds off other writers of the partition until it ends
     * and checks that the stored offset is base_offset: 0, -ESTALE or an error. */
    int (*fence)(agg_store_t *st, const char *topic, int32_t partition, int64_t base_offset);
    /* Inside the batch's transaction: merges the rows into their table (agg_schema_upsert). */
    int (*load)(agg_store_t *st, const agg_load_t *l);
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
    /* The store's connection as a query executor (qexec.h), reconnected first when it was
     * lost; NULL when the database cannot be reached now. */
    agg_qx_t *(*qx)(agg_store_t *st);
} agg_store_vtab_t;

/* A backend's vtab: its own P_close, P_fence, P_load, P_size_bytes and P_qx, and the SQL both
 * backends share (write.c, tiers.c). */
#define AGG_STORE_VTAB(P, NAME)                                                                    \
    .name = NAME, .close = P##_close, .fence = P##_fence, .load = P##_load,                        \
    .size_bytes = P##_size_bytes, .qx = P##_qx, .offset_get = agg_store_offset_read,               \
    .chunk_seen = agg_store_seen, .batch_write = agg_store_write,                                  \
    .downsample = agg_tiers_downsample, .expire = agg_tiers_expire,                                \
    .derive = agg_tiers_derive, .compact = agg_tiers_compact

/* store/write.c: the batch write, the offset and the dedup window of both backends (their
 * vtab's batch_write, offset_get and chunk_seen); agg_store_forget finalizes the statements
 * (a backend's close calls it before closing its executor). */
int agg_store_write(agg_store_t *st, const char *topic, int32_t partition, agg_batch_t *b);
int agg_store_offset_read(agg_store_t *st, const char *topic, int32_t partition, int64_t *next);
int agg_store_seen(agg_store_t *st, const uint8_t *id, int *seen);
void agg_store_forget(agg_store_t *st);

/* store/tiers.c: the vtab's downsample, expire, derive and compact of both backends. */
int agg_tiers_downsample(agg_store_t *st, int64_t fine, int64_t coarse, int64_t cutoff_s,
                         agg_retention_stats_t *stats);
int agg_tiers_expire(agg_store_t *st, int64_t data_cutoff_s, int64_t span_cutoff_ns,
                     int64_t seen_cutoff_ns, agg_retention_stats_t *stats);
int agg_tiers_derive(agg_store_t *st, const int64_t *tiers, int n_tiers, int64_t replicate_s);
int agg_tiers_compact(agg_store_t *st, int64_t fine_s, int64_t now_s);
/* Inside a batch's transaction: takes the tiers lock shared, (re)builds the tiers when the
 * store has none at these widths, and gives each tier's mark in done[0..n_tiers). */
int agg_tiers_marks(agg_qx_t *x, const int64_t *tiers, int n_tiers, int64_t rep, int64_t *done);

struct agg_store {
    const agg_store_vtab_t *vt;
    agg_qxst_t *offset_st, *seen_st; /* store/write.c's statements, prepared on first use */
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

/* Opens an existing store read-only (the offset checks of the group): no schema changes, no
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

#endif
