/* Open-addressing hash map and id set for in-memory aggregation (see hmap.h).
 * Threading: none; callers own their maps. */
#include "hmap.h"

#include "cm/array.h"
#include "cm/error.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

void agg_hmap_init(agg_hmap_t *m, size_t key_size, size_t entry_size) {
    memset(m, 0, sizeof *m);
    m->key_size = key_size;
    m->entry_size = entry_size;
}

void agg_hmap_free(agg_hmap_t *m) {
    free(m->entries);
    free(m->slots);
    free(m->hashes);
    size_t ks = m->key_size, es = m->entry_size;
    agg_hmap_init(m, ks, es);
}

void agg_hmap_clear(agg_hmap_t *m) {
    if (m->slots)
        memset(m->slots, 0, m->nslots * sizeof *m->slots);
    m->n = 0;
}

/* A slot: entry index i and the high half of its hash h (the low half places it). */
static inline uint64_t slot_of(size_t i, uint64_t h) {
    return (h & 0xffffffff00000000ull) | (uint64_t)(i + 1);
}

/* The entry of slot e when it holds hash h's key, else NULL: the hash's high half first, so
 * a probe past other keys reads their entries (a cache miss each) only on a match of it. */
static inline void *slot_match(const agg_hmap_t *m, uint64_t e, uint64_t h, const void *key) {
    if ((e ^ h) >> 32)
        return NULL;
    void *ent = agg_hmap_entry(m, (uint32_t)e - 1);
    return !memcmp(ent, key, m->key_size) ? ent : NULL;
}

static int rehash(agg_hmap_t *m, size_t nslots) {
    uint64_t *s = calloc(nslots, sizeof *s);
    if (!s)
        return CM_ENOMEM;
    for (size_t i = 0; i < m->n; i++) {
        size_t j = m->hashes[i] & (nslots - 1);
        while (s[j])
            j = (j + 1) & (nslots - 1);
        s[j] = slot_of(i, m->hashes[i]);
    }
    free(m->slots);
    m->slots = s;
    m->nslots = nslots;
    return 0;
}

void *agg_hmap_find(const agg_hmap_t *m, const void *key) {
    if (!m->n)
        return NULL;
    uint64_t h = XXH3_64bits(key, m->key_size);
    for (size_t j = h & (m->nslots - 1);; j = (j + 1) & (m->nslots - 1)) {
        uint64_t e = m->slots[j];
        if (!e)
            return NULL;
        void *ent = slot_match(m, e, h, key);
        if (ent)
            return ent;
    }
}

void *agg_hmap_upsert(agg_hmap_t *m, const void *key, int *is_new) {
    if (2 * (m->n + 1) > m->nslots && rehash(m, m->nslots ? 2 * m->nslots : 1024))
        return NULL;
    uint64_t h = XXH3_64bits(key, m->key_size);
    size_t j = h & (m->nslots - 1);
    for (;; j = (j + 1) & (m->nslots - 1)) {
        uint64_t e = m->slots[j];
        if (!e)
            break;
        void *ent = slot_match(m, e, h, key);
        if (ent) {
            if (is_new)
                *is_new = 0;
            return ent;
        }
    }
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 512;
        if (CM_RESIZE(&m->entries, cap * m->entry_size) || CM_RESIZE(&m->hashes, cap))
            return NULL;
        m->cap = cap;
    }
    uint8_t *ent = agg_hmap_entry(m, m->n);
    memcpy(ent, key, m->key_size);
    memset(ent + m->key_size, 0, m->entry_size - m->key_size);
    m->hashes[m->n] = h;
    m->slots[j] = slot_of(m->n++, h);
    if (is_new)
        *is_new = 1;
    return ent;
}

void agg_idset_free(agg_idset_t *s) {
    free(s->slots);
    memset(s, 0, sizeof *s);
}

void agg_idset_clear(agg_idset_t *s) {
    if (s->slots)
        memset(s->slots, 0, s->nslots * sizeof *s->slots);
    s->n = 0;
}

static size_t mix(uint64_t id) { return (size_t)(id ^ (id >> 29)) * 0x9E3779B97F4A7C15ull >> 7; }

int agg_idset_has(const agg_idset_t *s, uint64_t id) {
    if (!s->n)
        return 0;
    for (size_t j = mix(id) & (s->nslots - 1);; j = (j + 1) & (s->nslots - 1)) {
        if (s->slots[j] == id)
            return 1;
        if (!s->slots[j])
            return 0;
    }
}

int agg_idset_add(agg_idset_t *s, uint64_t id) {
    if (2 * (s->n + 1) > s->nslots) {
        size_t ns = s->nslots ? 2 * s->nslots : 4096;
        uint64_t *sl = calloc(ns, sizeof *sl);
        if (!sl)
            return CM_ENOMEM;
        for (size_t i = 0; i < s->nslots; i++) {
            uint64_t v = s->slots[i];
            if (!v)
                continue;
            size_t j = mix(v) & (ns - 1);
            while (sl[j])
                j = (j + 1) & (ns - 1);
            sl[j] = v;
        }
        free(s->slots);
        s->slots = sl;
        s->nslots = ns;
    }
    size_t j = mix(id) & (s->nslots - 1);
    for (; s->slots[j]; j = (j + 1) & (s->nslots - 1))
        if (s->slots[j] == id)
            return 0;
    s->slots[j] = id;
    s->n++;
    return 1;
}
