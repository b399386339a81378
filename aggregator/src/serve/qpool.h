/* A bounded pool of query store handles (query_store.h) for the API's concurrent requests:
 * at most `workers` queries run at once, each on its own handle (its own read-only SQLite
 * connections and caches: WAL readers never block one another nor the writer; or its own
 * PostgreSQL connection); at most
 * `queue` more requests wait for a handle, each at most `wait_ms`; a request beyond that is
 * turned away at once (the API answers 503 with Retry-After).
 *
 * Threading: acquire/release from any thread (one mutex and condition variable, held only to
 * pick a handle, never during a query). A leased handle is used by its one thread until it is
 * released. Handles are opened when first leased and kept.
 */
#ifndef AGG_QPOOL_H
#define AGG_QPOOL_H

#include "query_store.h"

#include <stddef.h>
#include <stdint.h>

typedef struct agg_qpool agg_qpool_t;

typedef struct {
    size_t workers;  /* handles, >= 1 */
    size_t queue;    /* requests that may wait for a handle (0: none wait) */
    int64_t wait_ms; /* longest wait for a handle */
} agg_qpool_cfg_t;

/* Opens the first handle on dir at once (so a bad directory fails at start). Returns 0 or a
 * negative code with the reason in err. */
int agg_qpool_new(const char *dir, const agg_qpool_cfg_t *cfg, agg_qpool_t **out, char *err,
                  size_t err_size);
void agg_qpool_free(agg_qpool_t *p);

typedef struct {
    size_t running, waiting; /* at the moment of the refusal */
    int timed_out;           /* 1: waited wait_ms; 0: the queue was full */
} agg_qpool_busy_t;

/* Leases a handle: *out set and 0; -EBUSY when saturated (busy filled); another CM_E* code
 * when a handle could not be opened. */
int agg_qpool_acquire(agg_qpool_t *p, agg_qstore_t **out, agg_qpool_busy_t *busy);
/* Leases a handle only if one is free at once and no request waits for one: 0, or -EBUSY
 * (nothing counted as refused), or another CM_E* code. For a request that can use a second
 * handle to run parts of itself in parallel (a diff's two sides) and does without otherwise. */
int agg_qpool_try_acquire(agg_qpool_t *p, agg_qstore_t **out);
void agg_qpool_release(agg_qpool_t *p, agg_qstore_t *qs);

typedef struct {
    size_t workers, running, waiting, peak_running;
    uint64_t leased, refused_full, refused_timeout;
    double wait_seconds; /* summed time requests waited for a handle */
} agg_qpool_stats_t;
void agg_qpool_stats(agg_qpool_t *p, agg_qpool_stats_t *s);

#endif
