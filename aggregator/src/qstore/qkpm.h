/* The query store's read of the KPM sums (table `kpm`, ingest/kpm.c): per process (host, pid)
 * and bucket, with its KPM values (aggregator/query/insights/kpms.h).
 * Threading: as query_store.h (the handle's thread). */
#ifndef AGG_QKPM_H
#define AGG_QKPM_H

#include "kpms.h"
#include "query_store.h"

typedef struct {
    const char *service;
    const char *version; /* NULL: all */
    const char *host;    /* NULL: all */
    int64_t pid;         /* 0: all */
    int64_t from_s, to_s;
} agg_kpmq_t;

/* The process-intervals of q, sorted by host, pid, bucket, with values (heap_growth
 * included). *out malloc'ed. Returns 0 or a CM_E* code. */
int agg_qstore_kpm(agg_qstore_t *qs, const agg_kpmq_t *q, agg_kpm_point_t **out, size_t *n);

#endif
