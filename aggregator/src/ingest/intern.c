/* Interning of chunk dictionaries into content-hash ids (see intern.h).
 * Threading: one agg_intern_t per store, used by the consume thread only. */
#include "intern.h"

#include "dims.h"

#include "symstore.h"

#include "cm/error.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

enum { SEED_STR = 1, SEED_MAP, SEED_FN, SEED_LOC, SEED_STACK, SEED_LABELS };
#define KNOWN_MAX (8u << 20) /* forget above this many ids: bounded memory, re-insert is cheap */

static uint64_t nz(uint64_t h) { return h ? h : 1; }

uint64_t agg_intern_string_id(const char *s, size_t len) {
    return len ? nz(XXH3_64bits_withSeed(s, len, SEED_STR)) : 0;
}

static uint64_t hash_u64s(const uint64_t *v, size_t n, uint64_t seed) {
    return nz(XXH3_64bits_withSeed(v, n * sizeof *v, seed));
}

static int scratch(uint64_t **p, size_t *cap, size_t n) {
    if (n > *cap) {
        uint64_t *q = realloc(*p, n * sizeof *q);
        if (!q)
            return CM_ENOMEM;
        *p = q;
        *cap = n;
    }
    memset(*p, 0, n * sizeof **p);
    return 0;
}

/* Returns 1 if the id is new (row must be written), 0 if known, <0 on error. */
static int mark(agg_intern_t *in, uint64_t id) {
    if (in->known.n > KNOWN_MAX)
        agg_idset_clear(&in->known);
    return agg_idset_add(&in->known, id);
}

static int str_id(agg_intern_t *in, agg_batch_t *b, const cm_dict_t *d, uint32_t i,
                  uint64_t *out) {
    if (i == 0 || i >= d->n_strings) {
        *out = 0;
        return 0;
    }
    if (in->str[i]) {
        *out = in->str[i];
        return 0;
    }
    const cm_str_t *s = &d->strings[i];
    int r = agg_intern_str(in, b, s->ptr, s->len, out);
    in->str[i] = *out;
    return r;
}

/* Returns from the calling function (its `int rc`) when x fails. */
#define TRY(x)                                                                                     \
    do {                                                                                           \
        if ((rc = (x)) < 0)                                                                        \
            return rc;                                                                             \
    } while (0)

/* Pushes a row onto vector v into *row; returns CM_ENOMEM from the caller when it cannot grow. */
#define PUSH(row, v)                                                                               \
    do {                                                                                           \
        if (!((row) = AGG_VEC_PUSH(v)))                                                            \
            return CM_ENOMEM;                                                                      \
    } while (0)

/* Each step below interns one table of the chunk's dictionary d into in's scratch ids (index:
 * the dictionary's, 0: none) and adds the ids not known yet to the batch b. Returns 0 or a
 * negative CM_E* code. */

static int intern_mappings(agg_intern_t *in, agg_batch_t *b, const cm_dict_t *d) {
    int rc;
    for (uint32_t m = 1; m < d->n_mappings; m++) {
        const cm_mapping_t *mp = &d->mappings[m];
        uint64_t fid;
        TRY(str_id(in, b, d, mp->filename, &fid));
        uint8_t key[8 + CM_MAX_BUILD_ID];
        uint32_t bl = mp->build_id_len > CM_MAX_BUILD_ID ? CM_MAX_BUILD_ID : mp->build_id_len;
        memcpy(key, &fid, 8);
        if (bl)
            memcpy(key + 8, mp->build_id, bl);
        uint64_t id = nz(XXH3_64bits_withSeed(key, 8 + bl, SEED_MAP));
        in->map[m] = id;
        TRY(mark(in, id));
        if (rc > 0) {
            agg_new_map_t *nm;
            PUSH(nm, b->maps);
            nm->id = id;
            nm->filename = fid;
            nm->build_id_len = bl;
            memcpy(nm->build_id, mp->build_id, nm->build_id_len);
        }
    }
    return 0;
}

static int intern_functions(agg_intern_t *in, agg_batch_t *b, const cm_dict_t *d) {
    int rc;
    for (uint32_t f = 1; f < d->n_functions; f++) {
        uint64_t v[3];
        TRY(str_id(in, b, d, d->function_name[f], &v[0]));
        TRY(str_id(in, b, d, d->function_system_name ? d->function_system_name[f] : 0, &v[1]));
        TRY(str_id(in, b, d, d->function_filename ? d->function_filename[f] : 0, &v[2]));
        uint64_t id = hash_u64s(v, 3, SEED_FN);
        in->fn[f] = id;
        TRY(mark(in, id));
        if (rc > 0) {
            agg_new_fn_t *nf;
            PUSH(nf, b->fns);
            *nf = (agg_new_fn_t){id, v[0], v[1], v[2]};
        }
    }
    return 0;
}

static int intern_locations(agg_intern_t *in, agg_batch_t *b, const cm_dict_t *d) {
    int rc;
    for (uint32_t l = 1; l < d->n_locations; l++) {
        uint64_t v[4] = {in->fn[d->location_function[l]], in->map[d->location_mapping[l]],
                         d->location_address[l], d->location_line ? d->location_line[l] : 0};
        uint64_t id = hash_u64s(v, 4, SEED_LOC);
        in->loc[l] = id;
        TRY(mark(in, id));
        if (rc > 0) {
            agg_new_loc_t *nl;
            PUSH(nl, b->locs);
            *nl = (agg_new_loc_t){id, v[0], v[1], v[2], v[3]};
            /* arrived unnamed: the symbol store's worker names it by build id, off this
             * thread (symstore.c) */
            const cm_mapping_t *mp = &d->mappings[d->location_mapping[l]];
            if (!d->location_function[l] && d->location_mapping[l] && mp->build_id_len)
                agg_symstore_want(mp->build_id, mp->build_id_len, d->location_address[l]);
        }
    }
    return 0;
}

/* A stack is a chain of trie nodes, root first: a node's id hashes its parent and location. */
static int intern_stacks(agg_intern_t *in, agg_batch_t *b, const cm_dict_t *d) {
    int rc;
    for (uint32_t s = 1; s < d->n_stacks; s++) {
        uint64_t parent = 0;
        for (uint32_t j = d->stack_off[s]; j < d->stack_off[s + 1]; j++) {
            uint64_t v[2] = {parent, in->loc[d->stack_frames[j]]};
            uint64_t id = hash_u64s(v, 2, SEED_STACK);
            TRY(mark(in, id));
            if (rc > 0) {
                agg_new_stack_t *ns;
                PUSH(ns, b->stacks);
                *ns = (agg_new_stack_t){id, parent, v[1], j - d->stack_off[s] + 1};
            }
            parent = id;
        }
        in->stack[s] = parent;
    }
    return 0;
}

/* Label sets: their (key, value) string ids in in->lkv (set ls at in->loff[ls]), at most
 * CM_MAX_LABELS_PER_SET pairs each, and the set's id in in->labels. */
static int intern_label_sets(agg_intern_t *in, agg_batch_t *b, const cm_dict_t *d) {
    int rc;
    TRY(scratch(&in->lkv, &in->lkv_cap,
                2 * (size_t)(d->label_off ? d->label_off[d->n_label_sets] : 0) + 2));
    uint32_t *lo = realloc(in->loff, ((size_t)d->n_label_sets + 2) * sizeof *lo);
    if (!lo)
        return CM_ENOMEM;
    in->loff = lo;
    in->loff[0] = in->loff[1] = 0;
    for (uint32_t ls = 1; ls < d->n_label_sets; ls++) {
        uint32_t n = d->label_off[ls + 1] - d->label_off[ls];
        if (n > CM_MAX_LABELS_PER_SET)
            n = CM_MAX_LABELS_PER_SET;
        uint64_t *kv = in->lkv + 2 * (size_t)in->loff[ls];
        for (uint32_t i = 0; i < n; i++) {
            const uint32_t *p = &d->label_kv[2 * (d->label_off[ls] + i)];
            TRY(str_id(in, b, d, p[0], &kv[2 * i]));
            TRY(str_id(in, b, d, p[1], &kv[2 * i + 1]));
        }
        in->loff[ls + 1] = in->loff[ls] + n;
        uint64_t tmp[2 * CM_MAX_LABELS_PER_SET];
        memcpy(tmp, kv, 2 * n * sizeof *tmp);
        TRY(agg_intern_labelset(in, b, tmp, n, &in->labels[ls]));
    }
    in->n_sets = d->n_label_sets;
    return 0;
}

int agg_intern_chunk(agg_intern_t *in, agg_batch_t *b, const cm_chunk_t *c, agg_chunk_ids_t *ids) {
    const cm_dict_t *d = &c->dict;
    int rc = 0;
    TRY(scratch(&in->str, &in->str_cap, d->n_strings + 1));
    TRY(scratch(&in->map, &in->map_cap, d->n_mappings + 1));
    TRY(scratch(&in->fn, &in->fn_cap, d->n_functions + 1));
    TRY(scratch(&in->loc, &in->loc_cap, d->n_locations + 1));
    TRY(scratch(&in->stack, &in->stack_cap, d->n_stacks + 1));
    TRY(scratch(&in->labels, &in->labels_cap, d->n_label_sets + 1));
    /* header strings: service and version are strings like any other */
    const cm_str_t *sv = &c->header.service, *ver = &c->header.version;
    uint64_t service, version;
    TRY(agg_intern_str(in, b, sv->ptr, sv->len, &service));
    TRY(agg_intern_str(in, b, ver->ptr, ver->len, &version));
    TRY(intern_mappings(in, b, d));
    TRY(intern_functions(in, b, d));
    TRY(intern_locations(in, b, d));
    TRY(intern_stacks(in, b, d));
    TRY(intern_label_sets(in, b, d));
    for (uint32_t i = 0; i < c->spans.n; i++) { /* the spans' names (minor 2) */
        uint64_t nid;
        TRY(str_id(in, b, d, c->spans.name[i], &nid));
    }
    /* every field set: row_labels NULL until agg_dims_chunk() adds the dimensions */
    *ids = (agg_chunk_ids_t){.str = in->str, .fn = in->fn, .loc = in->loc, .stack = in->stack,
                             .labels = in->labels, .label_kv = in->lkv, .label_off = in->loff,
                             .service = service, .version = version};
    return 0;
}

int agg_intern_labelset(agg_intern_t *in, agg_batch_t *b, uint64_t *kv, uint32_t n,
                        uint64_t *id_out) {
    int rc;
    /* sort pairs so the same set in another order gets the same id */
    for (uint32_t i = 1; i < n; i++)
        for (uint32_t j = i; j > 0 && (kv[2 * j - 2] > kv[2 * j] ||
                                       (kv[2 * j - 2] == kv[2 * j] && kv[2 * j - 1] > kv[2 * j + 1]));
             j--) {
            uint64_t t0 = kv[2 * j - 2], t1 = kv[2 * j - 1];
            kv[2 * j - 2] = kv[2 * j];
            kv[2 * j - 1] = kv[2 * j + 1];
            kv[2 * j] = t0;
            kv[2 * j + 1] = t1;
        }
    uint64_t id = n ? hash_u64s(kv, 2 * n, SEED_LABELS) : 0;
    *id_out = id;
    if (!id)
        return 0;
    if ((rc = mark(in, id)) <= 0)
        return rc;
    uint64_t *nset = AGG_VEC_PUSH(b->labelsets);
    if (!nset)
        return CM_ENOMEM;
    *nset = id;
    /* a set with a pid (not the overflow value) is one process's: its chunks, so the set's
     * first writing, come through this partition only; new to the cache is new to the store */
    const char *pk = agg_dim_names[AGG_DIM_PID];
    uint64_t pid = agg_intern_string_id(pk, strlen(pk)),
             other = agg_intern_string_id(AGG_DIM_OTHER, strlen(AGG_DIM_OTHER));
    uint8_t own = 0;
    for (uint32_t i = 0; i < n; i++)
        own |= kv[2 * i] == pid && kv[2 * i + 1] != other;
    for (uint32_t i = 0; i < n; i++) {
        if (i && kv[2 * i] == kv[2 * i - 2] && kv[2 * i + 1] == kv[2 * i - 1])
            continue; /* a pair twice in the set (sorted: next to each other) is one row */
        agg_new_label_t *nl = AGG_VEC_PUSH(b->labels);
        if (!nl)
            return CM_ENOMEM;
        *nl = (agg_new_label_t){id, kv[2 * i], kv[2 * i + 1], own};
    }
    return 0;
}

int agg_intern_str(agg_intern_t *in, agg_batch_t *b, const char *s, size_t len, uint64_t *id_out) {
    uint64_t id = agg_intern_string_id(s, len);
    *id_out = id;
    if (!id)
        return 0;
    int r = mark(in, id);
    if (r <= 0)
        return r;
    agg_new_str_t *ns = AGG_VEC_PUSH(b->strs);
    if (!ns)
        return CM_ENOMEM;
    ns->id = id;
    ns->len = (uint32_t)len;
    ns->off = agg_batch_arena_add(b, s, (uint32_t)len);
    return ns->off == (size_t)-1 ? CM_ENOMEM : 0;
}

void agg_intern_forget(agg_intern_t *in) { agg_idset_clear(&in->known); }

void agg_intern_free(agg_intern_t *in) {
    agg_idset_free(&in->known);
    free(in->str);
    free(in->map);
    free(in->fn);
    free(in->loc);
    free(in->stack);
    free(in->labels);
    free(in->lkv);
    free(in->loff);
    memset(in, 0, sizeof *in);
}
