/* Internals of the query store (query_store.h), shared by its files:
 *   query_store.c    opening the partition stores, the statement helpers, and the caches of
 *                    stack trie nodes, locations and resolved node paths that turn store
 *                    stacks into profile stacks;
 *   qstore_profile.c the merged-profile planner (tiers, fine rows) and its replicates, and
 *                    the split of a profile's samples by a label;
 *   qstore_series.c  versions, time series, spans, span profiles and rejects.
 * Threading: everything here works on one handle, used by one thread at a time. */
#ifndef AGG_QSTORE_INT_H
#define AGG_QSTORE_INT_H

#include "hmap.h"
#include "intern.h"
#include "query_store.h"

#include "qexec.h"
#include <string.h>

typedef struct {
    char *name, *module, *build_id; /* printable frame of one store location */
    char *file;  /* source file (the agent's function file, or the symbolizer's line), or NULL */
    char *chain; /* inlined frames from the symbol store (agg_sym_t.chain), or NULL */
    uint32_t line;
    uint64_t address;
    uint8_t unnamed;   /* arrived without a function name and not named by the symbolizer */
    uint8_t kind;      /* AGG_KIND_* from the function's system name */
    uint64_t retry_ns; /* unnamed: ask the symbolizer again after this (CLOCK_MONOTONIC) */
} cloc_t;

/* One partition store, with a cache of the stack trie nodes and locations already resolved:
 * ids are content hashes, so a node never changes meaning (bounded: dropped past a size). */
typedef struct {
    char *path;
    agg_qx_t *db; /* the executor (qexec.h): a SQLite file or the PostgreSQL database */
    agg_hmap_t nodes;  /* node id -> cnode_t */
    agg_hmap_t locidx; /* location id -> index into locs (uint32 after the key) */
    cloc_t *locs;
    size_t nlocs, cap_locs;
    /* resolved stacks: store stack id -> (uint32 offset, uint32 length) into pathv, the
     * indices into locs of its nodes, leaf first; a stack is walked through nodes once */
    agg_hmap_t paths;
    uint32_t *pathv;
    size_t npathv, cap_pathv;
    int has_work_units; /* intervals.work_units exists (see work_units_col) */
    int trie_too_big;   /* the stacks table exceeds the cache: never load it whole */
} qdb_t;

typedef struct {
    uint64_t id, parent;
    uint32_t loc; /* index into locs */
} cnode_t;

#define CACHE_MAX_NODES 4000000
#define CACHE_MAX_PATHV 16000000 /* location indices in the resolved stacks (64 MB) */

struct agg_qstore {
    char *dir;
    qdb_t *dbs;
    size_t n, cap;
};

#define B64(st, i, v) agg_qx_bind_int64((st), (i), (int64_t)(v))

static inline uint64_t agg_qs_sid(const char *s) { return agg_intern_string_id(s, strlen(s)); }

/* Opens the store files not opened yet (partitions appear as the group grows). */
int agg_qs_refresh(agg_qstore_t *qs);
/* Prepares sql on d (0, or a CM_E* code after a warning naming the store). */
int agg_qs_prep(qdb_t *d, const char *sql, agg_qxst_t **st);
/* Finalizes st; 0 when the last step returned rc = DONE or ROW, else the CM_E* code. */
int agg_qs_done(agg_qxst_t *st, int rc);
/* Finalizes st after a read loop whose last step returned step: rc when set, else what
 * agg_qs_done says of step. */
int agg_qs_end(agg_qxst_t *st, int step, int rc);
/* The intervals' units-of-work column, or "0" in a store written before it existed. */
const char *agg_qs_work_units_col(qdb_t *d);

/* Loads the locations of want (n ids) into d's location cache. Returns 0 or a CM_E* code. */
int agg_qs_cache_fill_locs(qdb_t *d, const uint64_t *want, size_t n);
/* Names c by the symbol store or the symbolizer when it arrived unnamed (retried later when
 * the symbolizer could not answer yet). */
void agg_qs_cloc_symbolize(cloc_t *c);
/* The profile frame of location c (no lines), with its kind. Returns it or CM_ENOMEM. */
int64_t agg_qs_cloc_frame(agg_profile_t *p, const cloc_t *c);

/* A store stack id and the profile stack it resolves to (agg_qs_resolve_stacks). */
typedef struct {
    uint64_t id;
    uint32_t stack; /* profile stack id */
    uint32_t resolved;
    uint64_t weight, count; /* sums, when the rows are merged per stack */
} stackmap_t;

/* Indices of the entries of stacks ordered by store stack id: the canonical order in which
 * stacks are resolved and rows added, so that a profile's frames, stacks and rows come out the
 * same whatever order a backend returned the rows in. malloc'ed; NULL when out of memory. */
size_t *agg_qs_stack_order(const agg_hmap_t *stacks);
/* Resolves every store stack id key of stacks (agg_hmap_t of stackmap_t) into a profile stack
 * of p (frames with source lines when lines, AGG_QLINES_*). Returns 0 or a CM_E* code. */
int agg_qs_resolve_stacks(qdb_t *d, agg_profile_t *p, agg_hmap_t *stacks, int lines);
/* Reads the rows of statement st (columns: store stack id, weight, count) to its end, resolves
 * their stacks from d and adds them to p as replicate rep in context ctx (0: none). Returns 0
 * or a CM_E* code. */
int agg_qs_add_stack_rows(qdb_t *d, agg_profile_t *p, agg_qxst_t *st, uint32_t rep, uint32_t ctx);
/* The same with columns (bucket, store stack id, weight, count): a row of bucket b goes to
 * replicate reps[b] (nreps of them, b clamped into range); stacks resolved with `lines`
 * (AGG_QLINES_*). Returns 0 or a CM_E* code. */
int agg_qs_add_bucket_rows(qdb_t *d, agg_profile_t *p, agg_qxst_t *st, const uint32_t *reps,
                           size_t nreps, int lines);

/* Starts a profile read of type over every store (refreshed): *p new, with one replicate named
 * rep_name (*rep). Returns 0 or a CM_E* code (nothing to free). */
int agg_qs_profile_begin(agg_qstore_t *qs, cm_event_type_t type, const char *rep_name,
                         agg_profile_t **p, int64_t *rep);
/* Ends a profile read: when rc is 0, p is sealed into *out; else p is freed. Returns rc. */
int agg_qs_profile_end(agg_profile_t *p, int rc, agg_profile_t **out);

/* Copies the trace id (16 bytes) and the span id (8 bytes) in columns c and c + 1 of st's row
 * into trace and span, each when its column has that size (else it is left as it was). */
void agg_qs_col_ids(agg_qxst_t *st, int c, uint8_t *trace, uint8_t *span);

/* One profile row as read, before its stack is resolved. */
typedef struct {
    uint64_t stack;
    uint32_t replicate;
    uint64_t weight, count;
} rawrow_t;

#define QMAX_WIDTHS 64 /* distinct interval widths of a service (fine, downsampled, changed) */
#define QFILTER_PARAM 500 /* first SQL parameter of the label/dimension filters */

/* The SQL pieces every profile read shares: the version list (explicit, so each statement is
 * an index range per version), the fine widths present (so a bucket range is an index range
 * too), the label filter, and their bindings. */
typedef struct {
    char vin[2600], win[16 + 6 * (QMAX_WIDTHS + 1)];
    const char *lab; /* the label and dimension filters (dims.h), "" for none */
    char labbuf[AGG_QMAX_FILTERS * 100 + 100];
    agg_qfilter_t filt[AGG_QMAX_FILTERS + 1];
    size_t nfilt;
    uint64_t vid[AGG_QMAX_VERSIONS];
    size_t nv;
    int64_t widths[QMAX_WIDTHS + 1]; /* + 1: the leaf query adds the replicate width */
    size_t nw;
} qparts_t;

/* Fills qp for q on d; *empty = 1 when the service has no data for these versions at all. */
int agg_qs_query_parts(qdb_t *d, const agg_qspec_t *q, qparts_t *qp, int *empty);
/* Binds qp's parameters (service, type, versions, widths, filters) to st. */
void agg_qs_bind_parts(agg_qxst_t *st, const agg_qspec_t *q, const qparts_t *qp);

#endif
