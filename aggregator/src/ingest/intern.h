/* Interning: maps a chunk's dictionaries (strings, mappings, functions, locations, stacks,
 * label sets) to store-wide ids, so each distinct entry is stored once across all chunks.
 *
 * Ids are content hashes (XXH3-64 with one seed per kind): a string's id hashes its bytes; a
 * function's hashes its name, system name and file ids; a location's its function, mapping,
 * address and line; a stack is a trie node, id = hash(parent stack id, leaf location id), so
 * stacks sharing a prefix share rows. Content ids need no lookup in the store on the hot path;
 * a set of ids known to be stored (or pending in the current batch) avoids re-inserting rows.
 * Id 0 is "none" (the empty string, no function, no mapping, the empty stack, no labels).
 *
 * Threading: an agg_intern_t belongs to the thread that owns its store (the consume thread).
 */
#ifndef AGG_INTERN_H
#define AGG_INTERN_H

#include "batch.h"

#include "cm/chunk.h"

typedef struct {
    agg_idset_t known; /* ids stored or pending in the batch */
    /* per-chunk scratch, indexed like the chunk's tables */
    uint64_t *str, *map, *fn, *loc, *stack, *labels;
    size_t str_cap, map_cap, fn_cap, loc_cap, stack_cap, labels_cap;
    uint64_t *lkv;   /* the label sets' (key, value) string-id pairs, set after set */
    uint32_t *loff;  /* label set i: pairs loff[i] .. loff[i + 1] of lkv */
    size_t lkv_cap;
    uint32_t n_sets;
} agg_intern_t;

/* Store ids of one chunk's dictionary entries, valid until the next agg_intern_chunk(). */
typedef struct {
    const uint64_t *str;    /* per string index, for the strings interned (span names) */
    const uint64_t *fn;     /* per function index */
    const uint64_t *loc;    /* per location index */
    const uint64_t *stack;  /* per stack index (0 for the empty stack) */
    const uint64_t *labels; /* per label set index */
    const uint64_t *label_kv;  /* label set i: (key, value) string-id pairs label_off[i] .. */
    const uint32_t *label_off; /* .. label_off[i + 1] - 1 of label_kv */
    uint64_t service, version;
    /* per event type, each sample row's label set id (application labels and dimensions,
     * dims.c); NULL: the rows' own label sets (labels[]) */
    const uint64_t *const *row_labels;
} agg_chunk_ids_t;

/* Computes the ids of every entry of c's dictionary and appends the rows not yet known to b.
 * Returns 0 or CM_ENOMEM. */
int agg_intern_chunk(agg_intern_t *in, agg_batch_t *b, const cm_chunk_t *c, agg_chunk_ids_t *ids);
/* The id of string s, adding its row to b when new. Returns 0 or CM_ENOMEM. */
int agg_intern_str(agg_intern_t *in, agg_batch_t *b, const char *s, size_t len, uint64_t *id);
/* The id of the label set of n (key, value) string-id pairs kv (sorted in place), adding its
 * rows to b when new; 0 for the empty set. Returns 0 or CM_ENOMEM. */
int agg_intern_labelset(agg_intern_t *in, agg_batch_t *b, uint64_t *kv, uint32_t n, uint64_t *id);
/* Returns the id of a string (for callers that look rows up by name). */
uint64_t agg_intern_string_id(const char *s, size_t len);
/* Forgets which ids are stored: call after a batch was not committed (its rows are lost). */
void agg_intern_forget(agg_intern_t *in);
void agg_intern_free(agg_intern_t *in);

#endif
