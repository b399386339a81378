/* Server-side symbolization cost per chunk (issue 15). Reads chunk files whose frames arrived
 * unnamed, and times, per chunk, naming every unnamed location (build id, address) with
 * agg_symbolize: symbolizer off; debuginfod with an empty cache (cold: download + open);
 * the same with its on-disk cache filled by the cold pass (a restarted aggregator: open only);
 * in memory (every later chunk); and a server that is down (refused, then negative-cached).
 * All in one invocation, so the figures compare as ratios.
 * Usage: bench-symbolizer CHUNK_DIR DEBUGINFOD_URL DEAD_URL CACHE_DIR */
#include "symbolizer.h"
#include "symstore.h"

#include "cm/chunk.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    const uint8_t *bid;
    size_t bl;
    uint64_t addr;
} want_t;

static cm_chunk_t *chunks[4096];
static size_t nchunks;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int g_mode; /* 0: agg_symbolize; 1: through the symbol store; 2: the ingest hook */

/* Names every unnamed location of chunk c; returns how many were named, *n how many asked. */
static size_t name_chunk(const cm_chunk_t *c, size_t *n) {
    const cm_dict_t *d = &c->dict;
    size_t named = 0;
    *n = 0;
    for (uint32_t l = 1; l < d->n_locations; l++) {
        uint32_t m = d->location_mapping[l];
        if (d->location_function[l] || !m || !d->mappings[m].build_id_len)
            continue;
        agg_sym_t sym = {0};
        const uint8_t *bid = d->mappings[m].build_id;
        size_t bl = d->mappings[m].build_id_len;
        (*n)++;
        if (g_mode == 2) /* the ingest hook: a queue append */
            agg_symstore_want(bid, bl, d->location_address[l]);
        else if ((g_mode == 1 ? agg_symstore_get(bid, bl, d->location_address[l], 1, &sym)
                              : agg_symbolize(bid, bl, d->location_address[l], &sym)) == 1)
            named++;
        agg_sym_free(&sym);
    }
    return named;
}

/* Times chunks [from, to): prints the mean per chunk. */
static void pass(const char *label, size_t from, size_t to) {
    size_t asked = 0, named = 0;
    double t0 = now();
    for (size_t i = from; i < to; i++) {
        size_t n;
        named += name_chunk(chunks[i], &n);
        asked += n;
    }
    double dt = now() - t0;
    printf("%-34s %4zu chunks: %10.1f us per chunk (%zu unnamed locations, %zu named)\n", label,
           to - from, dt * 1e6 / (double)(to - from), asked, named);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: bench-symbolizer CHUNK_DIR DEBUGINFOD_URL DEAD_URL CACHE_DIR\n");
        return 2;
    }
    DIR *dir = opendir(argv[1]);
    if (!dir) {
        perror(argv[1]);
        return 1;
    }
    struct dirent *e;
    while ((e = readdir(dir)) && nchunks < 4096) {
        if (!strstr(e->d_name, ".fpc"))
            continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
        FILE *f = fopen(path, "rb");
        static uint8_t buf[16 << 20];
        size_t len = f ? fread(buf, 1, sizeof buf, f) : 0;
        if (f)
            fclose(f);
        char err[256];
        if (len && cm_chunk_decode(buf, len, &chunks[nchunks], err, sizeof err) == 0)
            nchunks++;
    }
    closedir(dir);
    if (nchunks < 2) {
        fprintf(stderr, "need at least 2 chunks in %s\n", argv[1]);
        return 1;
    }
    pass("off (no debuginfod)", 0, nchunks);
    agg_symbolizer_cfg_t cfg = {argv[2], argv[4], 5, 60, 0, 0};
    agg_symbolizer_init(&cfg);
    pass("cold: empty cache, all chunks", 0, nchunks);
    pass("in memory: all chunks again", 0, nchunks);
    agg_symbolizer_stats_t st;
    agg_symbolizer_stats(&st);
    printf("  (%llu debuginfod requests, %llu failed, %.1f ms in them)\n",
           (unsigned long long)st.fetches, (unsigned long long)st.fetch_fail, st.fetch_ns / 1e6);
    agg_symbolizer_shutdown();
    agg_symbolizer_init(&cfg);
    pass("warm disk cache (restart): all", 0, nchunks);
    agg_symbolizer_stats(&st);
    printf("  (%llu debuginfod requests, %llu failed, %.1f ms in them)\n",
           (unsigned long long)st.fetches, (unsigned long long)st.fetch_fail, st.fetch_ns / 1e6);
    agg_symbolizer_shutdown();
    agg_symbolizer_cfg_t dead = {argv[3], argv[4], 5, 60, 0, 0};
    char cache2[8192];
    snprintf(cache2, sizeof cache2, "%s-dead", argv[4]);
    dead.cache_dir = cache2;
    agg_symbolizer_init(&dead);
    pass("server down: all chunks", 0, nchunks);
    pass("server down, negative-cached: again", 0, nchunks);
    agg_symbolizer_shutdown();

    /* the symbol store (symstore.c): what a query pays, and the ingest hook */
    char sdir[8192], cache3[8192], err[256], cmd[3 * 8192 + 64];
    snprintf(sdir, sizeof sdir, "%s-store", argv[4]);
    snprintf(cache3, sizeof cache3, "%s-store-cache", argv[4]);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' && mkdir -p '%s'", sdir, cache3, sdir);
    if (system(cmd) != 0)
        return 1;
    agg_symbolizer_cfg_t scfg = {argv[2], cache3, 5, 60, 0, 0};
    agg_symbolizer_init(&scfg);
    if (agg_symstore_open(sdir, 60, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    g_mode = 1;
    pass("store, cold: debuginfod + INSERT", 0, nchunks);
    pass("store: stored names (lookups)", 0, nchunks);
    agg_symstore_close();
    agg_symbolizer_shutdown();
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cache3);
    if (system(cmd) != 0)
        return 1;
    agg_symbolizer_init(&dead); /* restart: server down, no download cache */
    if (agg_symstore_open(sdir, 60, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    pass("store after restart, server down", 0, nchunks);
    g_mode = 2;
    pass("ingest hook (queue append)", 0, nchunks);
    agg_symstore_drain(60);
    agg_symstore_stats_t ss;
    agg_symstore_stats(&ss);
    printf("  (store: %llu hits, %llu misses, %llu names stored, %llu queued, %llu dropped)\n",
           (unsigned long long)ss.hits, (unsigned long long)ss.misses,
           (unsigned long long)ss.stored, (unsigned long long)ss.queued,
           (unsigned long long)ss.dropped);
    agg_symstore_close();
    agg_symbolizer_shutdown();
    for (size_t i = 0; i < nchunks; i++)
        cm_chunk_free(chunks[i]);
    return 0;
}
