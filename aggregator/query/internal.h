/* Private helpers shared by the query layer's files. Not part of the public API. */
#ifndef AGG_QUERY_INTERNAL_H
#define AGG_QUERY_INTERNAL_H

#include "profile.h"

/* A new profile with the same frames, stacks, replicates and contexts (same ids), no rows. */
int agg_profile_copy_tables(const agg_profile_t *in, agg_profile_t **out);

/* Open addressing table of ids with their 64-bit hash; equality is checked by the caller
 * (probe from hash & (cap - 1) while id[j] != 0). Load factor <= 1/2. profile.c's interning
 * tables and export_pprof.c's string table. */
struct agg_idtab {
    uint64_t *hash;
    uint32_t *id; /* id + 1; 0 = empty */
    size_t cap, n;
};

/* Adds id under hash h (growing the table); 0 or CM_ENOMEM. */
int agg_idtab_insert(agg_idtab_t *t, uint64_t h, uint32_t id);

#endif
