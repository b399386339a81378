/* Private helpers shared by the query layer's files. Not part of the public API. */
#ifndef AGG_QUERY_INTERNAL_H
#define AGG_QUERY_INTERNAL_H

#include "profile.h"

/* A new profile with the same frames, stacks, replicates and contexts (same ids), no rows. */
int agg_profile_copy_tables(const agg_profile_t *in, agg_profile_t **out);

#endif
