/* Chunk delivery: output files and the collector socket (sender.c, bg thread only). */
#ifndef AG_SENDER_H
#define AG_SENDER_H

#include "base.h"
#include "config.h"
#include "cm/chunk.h"

#define AG_QUEUE_MAX 16 /* unacked chunks kept for the collector */
AG_HIDDEN void ag_sender_init(const ag_config_t *cfg);
/* Takes ownership of frame. Writes the output file (if configured) and queues for the
 * collector (dropping the oldest with DROP_CHUNK_QUEUE_FULL). */
/* drops: the counts the chunk's header carries (given back if the chunk is lost) */
AG_HIDDEN void ag_sender_submit(uint8_t *frame, size_t len, uint64_t seq, const cm_drop_t *drops,
                                uint32_t ndrops);
AG_HIDDEN int ag_sender_write_file(const uint8_t *frame, size_t len, uint64_t seq); /* -1: not */
/* A chunk carrying drops was lost for good: its counts go back into the agent's counters, plus
 * one of reason for the chunk itself; the next chunk cut reports them. */
AG_HIDDEN void ag_sender_give_back(const cm_drop_t *drops, uint32_t n, uint32_t reason);
AG_HIDDEN int ag_sender_uses_socket(void); /* 0: FLEETPROF_COLLECTOR=none, files only */
/* Progresses connect/write/read-acks without blocking. Returns the fd to poll (or -1) and the
 * poll events wanted; *wake_ms: when it wants to be called again at the latest. */
AG_HIDDEN int ag_sender_step(short *events, int *wake_ms);
/* Tries for up to timeout_ms to get the queue acked (exit flush). */
/* At exit: one connection attempt, then writes without waiting for acks, for at most
 * timeout_ms while the collector keeps taking bytes (never waits on a peer that takes none). */
AG_HIDDEN void ag_sender_exit(int timeout_ms);
#define AG_EXIT_SEND_MS 100
AG_HIDDEN void ag_sender_after_fork_child(void);
AG_HIDDEN uint32_t ag_sender_queued(void);
AG_HIDDEN uint64_t ag_sender_file_failures(void); /* chunks FLEETPROF_OUTPUT refused */
/* First chunk sequence to use: after any files this pid already has in FLEETPROF_OUTPUT. */
AG_HIDDEN uint64_t ag_sender_first_sequence(void);

#endif
