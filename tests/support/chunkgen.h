/* Generators of random and realistic chunks for tests, fuzz seeds and benchmarks, and a deep
 * equality check used by the round-trip tests. */
#ifndef TS_CHUNKGEN_H
#define TS_CHUNKGEN_H

#include "cm/chunk.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t samples;       /* rows per event type present */
    uint32_t stacks;        /* distinct stacks */
    uint32_t min_depth, max_depth;
    uint32_t functions;     /* distinct functions */
    uint32_t threads;
    double context_frac;    /* share of samples with a span context */
    uint32_t contexts;      /* distinct contexts */
    uint32_t label_sets;    /* distinct non-empty label sets */
    uint32_t types_mask;    /* bit t set: generate samples of event type t */
    uint32_t time_unit_ns;
    uint64_t interval_ns;
    int call_graph;         /* 1: frames follow a call graph (realistic); 0: uniform random */
} ts_gen_params_t;

/* The benchmark's realistic chunk: 10 s, 10,000 CPU samples over 500 stacks of depth 20-40,
 * 20% with span context. */
ts_gen_params_t ts_gen_realistic(void);
/* Random parameters for property tests (small and large, every column). */
ts_gen_params_t ts_gen_random_params(uint64_t *rng);

/* Builds a chunk; free it with ts_gen_free(). Deterministic for a given seed. */
cm_chunk_t *ts_gen_chunk(const ts_gen_params_t *p, uint64_t seed);
void ts_gen_free(cm_chunk_t *c);

/* Deep comparison (optional columns compared through their defaults). Returns 1 if equal,
 * else 0 with the first difference in why. */
int ts_chunk_equal(const cm_chunk_t *a, const cm_chunk_t *b, char *why, size_t why_size);

uint64_t ts_rand(uint64_t *s);
/* Uniform in [0, n). */
uint64_t ts_randn(uint64_t *s, uint64_t n);

#endif
