/* Server-side symbolization of frames that arrived unnamed (see symbolizer.c). */
#ifndef AGG_SYMBOLIZER_H
#define AGG_SYMBOLIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *urls;      /* debuginfod servers (space-separated); NULL/"": DEBUGINFOD_URLS */
    const char *cache_dir; /* debuginfod's download cache; NULL: DEBUGINFOD_CACHE_PATH or its default */
    double timeout_s;      /* longest one download may take, connect included (> 0) */
    double retry_s;        /* a build id that failed is not asked again for this long */
} agg_symbolizer_cfg_t;

typedef struct {
    uint64_t lookups, named;       /* addresses asked, addresses named */
    uint64_t fetches, fetch_fail;  /* debuginfod requests made, and failed (negative cached) */
    uint64_t neg_hits;             /* lookups answered by the negative cache */
    uint64_t fetch_ns;             /* time spent in debuginfod requests and reading the files */
} agg_symbolizer_stats_t;

/* Starts the process-wide symbolizer. Without servers (cfg->urls and DEBUGINFOD_URLS both
 * empty) it stays off and every lookup answers 0 at once. Returns 0 or a CM_E* code. */
int agg_symbolizer_init(const agg_symbolizer_cfg_t *cfg);
void agg_symbolizer_shutdown(void);
int agg_symbolizer_enabled(void);

/* Names file address addr (ELF vaddr) of the binary with this build id. Returns 1 and sets
 * *name (demangled when mangled) and, when the debug file has lines, *file and *line (all
 * malloc'ed strings, caller frees); 0 when it cannot be named (symbolizer off, build id
 * unknown to every server, server down: negative-cached for retry_s). Thread-safe. */
int agg_symbolize(const uint8_t *build_id, size_t bid_len, uint64_t addr, char **name,
                  char **file, uint32_t *line);

void agg_symbolizer_stats(agg_symbolizer_stats_t *st);

#endif
