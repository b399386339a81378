/* Server-side symbolization of frames that arrived unnamed (see symbolizer.c). */
#ifndef AGG_SYMBOLIZER_H
#define AGG_SYMBOLIZER_H

#include <stddef.h>
#include <stdint.h>

#define AGG_SYMBOLIZER_MAX_SIZE (512ull << 20)   /* default: largest debug file fetched */
#define AGG_SYMBOLIZER_CACHE_BYTES (2ull << 30) /* default: debug files kept open and cached */

typedef struct {
    const char *urls;      /* debuginfod servers (space-separated); NULL/"": DEBUGINFOD_URLS */
    const char *cache_dir; /* debuginfod's download cache; NULL: DEBUGINFOD_CACHE_PATH or its default */
    double timeout_s;      /* longest one download may take, connect included (> 0) */
    double retry_s;        /* a build id that failed is not asked again for this long */
    uint64_t max_size;     /* larger debug files are refused (DEBUGINFOD_MAXSIZE); 0: default */
    uint64_t cache_bytes;  /* debug files kept open, past it the least recently used are closed
                            * and their downloads deleted; 0: default */
} agg_symbolizer_cfg_t;

typedef struct {
    uint64_t lookups, named;       /* addresses asked, addresses named */
    uint64_t fetches, fetch_fail;  /* debuginfod requests made, and failed (negative cached) */
    uint64_t neg_hits;             /* lookups answered by the negative cache */
    uint64_t fetch_ns;             /* time spent in debuginfod requests and reading the files */
    uint64_t too_big;              /* fetches refused: file larger than max_size */
    uint64_t evicted;              /* debug files closed and deleted for cache_bytes */
} agg_symbolizer_stats_t;

/* Starts the process-wide symbolizer. Without servers (cfg->urls and DEBUGINFOD_URLS both
 * empty) it stays off and every lookup answers 0 at once. Returns 0 or a CM_E* code.
 * It sets DEBUGINFOD_URLS, DEBUGINFOD_CACHE_PATH and DEBUGINFOD_TIMEOUT in the environment
 * (libdebuginfod has no other way in): call it before any thread starts (main.c does, before
 * the consumer, the HTTP server and the reporter); glibc's setenv races getenv elsewhere. */
int agg_symbolizer_init(const agg_symbolizer_cfg_t *cfg);
void agg_symbolizer_shutdown(void);
int agg_symbolizer_enabled(void);

/* What an address is: its function and, where the debug file has .debug_line, its source
 * position and inlined frames. All strings malloc'ed (agg_sym_free). chain: the inlined
 * frames at the address, innermost first, one per line as "function\tfile\tline", the last
 * being the symbol's own function at the call site of the outermost inline; NULL when nothing
 * is inlined there (or the debug file does not say). */
typedef struct {
    char *name; /* the function symbol containing the address (demangled when mangled) */
    char *file; /* source file of the address, NULL when unknown */
    uint32_t line;
    char *chain;
} agg_sym_t;

void agg_sym_free(agg_sym_t *s);

/* Names file address addr (ELF vaddr) of the binary with this build id. Returns 1 and fills
 * *out (caller frees with agg_sym_free); 0 when the debug file was read but has no function
 * symbol at addr (a final answer for this build id); -1 when there is no debug file to ask
 * (symbolizer off, build id unknown to every server, server down: negative-cached for
 * retry_s). Thread-safe. */
int agg_symbolize(const uint8_t *build_id, size_t bid_len, uint64_t addr, agg_sym_t *out);

void agg_symbolizer_stats(agg_symbolizer_stats_t *st);

#endif
