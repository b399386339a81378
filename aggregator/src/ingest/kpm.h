/* Key performance metrics (KPMs) at ingest: per process (the chunk header's host and pid) and
 * fine bucket of the chunk's start, the sums the KPMs are derived from (batch.h agg_kpm_ent_t,
 * table `kpm`): process and agent CPU, the CPU samples split by what they were doing (the
 * allocator, system calls, memory copies, C++ exception unwinding, the agent's own hooks),
 * allocated bytes and allocations, live heap, lock waits, I/O waits, bytes and calls, threads,
 * samples lost. Names, units and derivations: aggregator/README.md, "Key performance metrics".
 * Threading: consume thread (a thread-local cache of function categories). */
#ifndef AGG_KPM_H
#define AGG_KPM_H

#include "batch.h"

#include "cm/chunk.h"

/* Adds chunk c (of service and version ids) to b's kpm rows at (width, bucket). Returns 0 or
 * CM_ENOMEM. */
int agg_kpm_chunk(agg_batch_t *b, const cm_chunk_t *c, uint64_t service, uint64_t version,
                  uint64_t width, uint64_t bucket);

#endif
