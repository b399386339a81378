/* The symbol store: what the server-side symbolizer found for frames that arrived unnamed,
 * kept in <store-dir>/symbols.sqlite so that every later query, export and report (and every
 * later aggregator process, with debuginfod down) sees the names (see symstore.c). */
#ifndef AGG_SYMSTORE_H
#define AGG_SYMSTORE_H

#include "symbolizer.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t queued, dropped;   /* ingest: addresses handed to the worker, dropped (queue full) */
    uint64_t hits, misses;      /* lookups answered by the table / not there */
    uint64_t stored, negatives; /* names written, "no name" answers written (address or file) */
} agg_symstore_stats_t;

/* Opens (creates) <store_dir>/symbols.sqlite for this process and starts the worker thread
 * that names, at ingest, the unnamed addresses agg_symstore_want() queues. retry_s: how long a
 * build id without a debug file is not asked again (also across restarts). Returns 0 or a
 * CM_E* code (err set). Without it every function below is a no-op answering "unknown". */
int agg_symstore_open(const char *store_dir, double retry_s, char *err, size_t err_size);
void agg_symstore_close(void);

/* Ingest hook (consume thread): queues an address that arrived unnamed, never blocks (a full
 * queue drops it: the first query names it instead). No-op when the symbolizer is off. */
void agg_symstore_want(const uint8_t *build_id, size_t bid_len, uint64_t addr);

/* Read hook (any thread): the stored name of (build id, address). Returns 1 and fills *out
 * (caller frees with agg_sym_free), 0 when unknown. With may_fetch and nothing stored (and no
 * stored failure younger than retry_s), asks the symbolizer (debuginfod, bounded by its
 * timeout) and stores its answer, positive or negative. */
int agg_symstore_get(const uint8_t *build_id, size_t bid_len, uint64_t addr, int may_fetch,
                     agg_sym_t *out);

void agg_symstore_stats(agg_symstore_stats_t *st);

/* Waits until the worker's queue is empty and it is idle, at most timeout_s (tests and
 * benchmarks). Returns 0 when idle, -1 on timeout. */
int agg_symstore_drain(double timeout_s);

#endif
