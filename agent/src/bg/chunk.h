/* Chunk cutting (chunk.c). bg thread, under the work lock. */
#ifndef AG_CHUNK_H
#define AG_CHUNK_H

#include "base.h"

#include "cm/chunk.h"

typedef struct ag_builder ag_builder_t;
/* The first chunk starts at start_real; the agent's and the process's CPU count from
 * agent_cpu0 and proc_cpu0. */
AG_HIDDEN void ag_chunk_begin(uint64_t start_real, uint64_t agent_cpu0, uint64_t proc_cpu0);
/* Encodes b's rows since the last cut as one chunk and hands it to the sender; at_exit: only
 * if there is something to say. */
AG_HIDDEN void ag_chunk_cut(ag_builder_t *b, int at_exit);
/* Nothing to send: no row, no event seen, no drop since the last cut, no live heap or
 * aggregate. */
AG_HIDDEN int ag_chunk_nothing_to_say(const ag_builder_t *b);
/* b's estimated encoded size is over AG_CHUNK_SOFT: cut early. */
AG_HIDDEN int ag_chunk_full(const ag_builder_t *b);
/* recorder/chunkhdr.c: h cleared, then its identity: service, version, host, process, [start, end], a
 * random chunk id (seq in its fallback), the format minor. */
AG_HIDDEN void ag_chunk_header_ids(cm_header_t *h, uint64_t start, uint64_t end, uint64_t seq);
/* fork child: the parent's counts are the parent's. */
AG_HIDDEN void ag_chunk_after_fork_child(void);
/* Any thread, async-signal-safe: 1 if samples or spans wait for a chunk not cut yet. */
AG_HIDDEN int ag_chunk_unsent(void);

#endif
