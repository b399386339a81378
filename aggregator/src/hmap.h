/* A small open-addressing hash map of fixed-size entries (key bytes followed by value bytes),
 * used by the rollup batch to aggregate deltas in memory before one store transaction.
 *
 * Entries live in one array in insertion order, so iteration is a plain loop over
 * agg_hmap_entry(m, i) for i < m->n. New entries are zero-filled after the key.
 * Threading: none; a map is used by one thread at a time.
 */
#ifndef AGG_HMAP_H
#define AGG_HMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    size_t key_size, entry_size; /* entry = key followed by value */
    uint8_t *entries;            /* n entries of entry_size bytes */
    size_t n, cap;               /* entries used / allocated */
    uint64_t *slots;             /* entry index + 1 (low half, 0 = empty) and the high half of
                                  * its hash: a probe compares it before reading the entry */
    uint64_t *hashes;            /* per entry (rehash) */
    size_t nslots;               /* power of two */
} agg_hmap_t;

void agg_hmap_init(agg_hmap_t *m, size_t key_size, size_t entry_size);
void agg_hmap_free(agg_hmap_t *m);
/* Forgets every entry, keeps the memory. */
void agg_hmap_clear(agg_hmap_t *m);
/* Returns the entry for key, inserting a zero-valued one if absent (*is_new set when given).
 * NULL on allocation failure. The pointer is valid until the next upsert. */
void *agg_hmap_upsert(agg_hmap_t *m, const void *key, int *is_new);
/* Returns the entry for key or NULL. */
void *agg_hmap_find(const agg_hmap_t *m, const void *key);
static inline void *agg_hmap_entry(const agg_hmap_t *m, size_t i) {
    return m->entries + i * m->entry_size;
}

/* A set of 64-bit ids (ids already are hashes), open addressing; 0 is never stored. */
typedef struct {
    uint64_t *slots;
    size_t n, nslots;
} agg_idset_t;

void agg_idset_free(agg_idset_t *s);
void agg_idset_clear(agg_idset_t *s);
/* Returns 1 if id was added, 0 if present, negative CM_ENOMEM. */
int agg_idset_add(agg_idset_t *s, uint64_t id);
int agg_idset_has(const agg_idset_t *s, uint64_t id);

#endif
