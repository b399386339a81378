/* Fleet simulator: realistic chunks from many simulated processes of many services and
 * versions, deterministic from a seed, with the exact ground truth of what was produced.
 *
 * Every (service, version) runs `processes` processes; each process emits one chunk per
 * interval (rounds in time order: round k holds every process's chunk for interval k). Chunk
 * contents come from one realistic template per service (tests/support/chunkgen.h: call-graph
 * stacks, Zipf popularity, all event types, span contexts, labels), shared by its processes as
 * real processes share their code; per chunk, a quarter of the rows take another row's stack
 * (variation that keeps the popularity), and weights, times, span contexts, ids and header
 * figures are drawn afresh. On request, some chunks are produced twice
 * (counted once in the truth) and malformed messages are mixed in (random bytes, truncated
 * frames, a wrong major version, a corrupted payload).
 *
 * Threading: one simulator per thread.
 */
#ifndef FSIM_H
#define FSIM_H

#include <librdkafka/rdkafka.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint64_t seed;
    uint32_t services, versions, processes; /* processes per (service, version) */
    uint32_t intervals;                     /* chunks per process */
    uint32_t samples;                       /* rows per event type per chunk */
    uint32_t stacks;                        /* distinct stacks per template */
    uint32_t types_mask;                    /* bit t: event type t present (0: all six) */
    uint64_t start_unix_ns;                 /* start of the first interval (0: now - duration) */
    uint64_t interval_ns;                   /* chunk interval (0: 10 s) */
    uint32_t duplicate_every;               /* every Nth chunk is produced twice (0: never) */
    uint32_t malformed_every;               /* a malformed message after every Nth chunk */
    uint32_t hosts; /* >0: process i runs on host "sim-host-<i % hosts>" (header and fp-host),
                     * with truth per host; 0: every process on "sim-host" */
} fsim_params_t;

typedef enum { FSIM_BAD_RANDOM, FSIM_BAD_TRUNCATED, FSIM_BAD_MAJOR, FSIM_BAD_CORRUPT, FSIM_BAD_N } fsim_bad_t;

typedef struct {
    int64_t weight, count, rows;
} fsim_sums_t;

typedef struct {
    uint64_t messages, chunks, duplicates, samples;
    uint64_t bad[FSIM_BAD_N]; /* malformed messages by kind */
} fsim_counts_t;

typedef struct fsim fsim_t;

fsim_t *fsim_new(const fsim_params_t *p);
void fsim_free(fsim_t *s);
/* The next message: frame bytes (owned by the simulator, valid until the next call) and key.
 * Returns 1, or 0 when every message has been produced. */
int fsim_next(fsim_t *s, const uint8_t **frame, size_t *len, const char **key);
/* Produces every remaining message to topic (at most rate messages/s when rate > 0) and flushes.
 * Returns 0 or -1 after printing why. */
int fsim_produce(fsim_t *s, rd_kafka_t *producer, const char *topic, double rate);

const fsim_counts_t *fsim_counts(const fsim_t *s);
/* The parameters in force (defaults filled in). */
const fsim_params_t *fsim_params(const fsim_t *s);
/* Ground-truth sums of what was produced (duplicates counted once) for service index si,
 * version index vi, event type t. */
const fsim_sums_t *fsim_truth(const fsim_t *s, uint32_t si, uint32_t vi, uint32_t t);
/* The same for the processes of host index `host` (p.hosts > 0; zeros otherwise). */
const fsim_sums_t *fsim_truth_host(const fsim_t *s, uint32_t si, uint32_t vi, uint32_t t,
                                   uint32_t host);
const char *fsim_service_name(const fsim_t *s, uint32_t si);
const char *fsim_version_name(const fsim_t *s, uint32_t si, uint32_t vi);
/* Sums of the agent CPU and drop counters in the chunk headers (for interval totals). */
int64_t fsim_truth_agent_cpu(const fsim_t *s, uint32_t si, uint32_t vi);
/* Sum of the chunk headers' units of work (service index 0 counts some, the others none). */
int64_t fsim_truth_work(const fsim_t *s, uint32_t si, uint32_t vi);
/* Writes the ground truth as JSON. Returns 0 or -1. */
int fsim_truth_write(const fsim_t *s, const char *path);

#endif
