/* Names for JIT code from the process's perf map file (perfmap.c, bg thread only). */
#ifndef AG_PERFMAP_H
#define AG_PERFMAP_H

#include "base.h"

#define AG_PERFMAP_MAX_ENTRIES (1u << 18) /* code ranges kept; beyond: counted in full */
#define AG_PERFMAP_MAX_NAMES (16u << 20)  /* bytes of names kept, after compaction */
#define AG_PERFMAP_MAX_LINE 4096          /* a longer line is malformed */
#define AG_PERFMAP_READ_MAX (4u << 20)    /* bytes read per refresh; the rest on the next */

typedef struct {
    const char *name;    /* the function's name as shown: "fib", "Builtin:ArraySort" */
    const char *sysname; /* its kind and identity: "js:fib /srv/app.js:1:13"; else == name */
    const char *file;    /* a JavaScript function's script, or NULL */
    uint32_t line;       /* its first line (perf maps carry no line per pc), or 0 */
    uint64_t key;        /* one per function (all tiers of a JS function share it) */
} ag_jitsym_t;

typedef struct {
    uint64_t refreshes; /* refreshes that found new bytes */
    uint64_t bytes;     /* bytes consumed */
    uint64_t lines;     /* lines parsed into entries */
    uint64_t malformed; /* lines skipped: not "START SIZE NAME" (hex, hex, text) or too long */
    uint64_t full;      /* entries dropped: AG_PERFMAP_MAX_ENTRIES or _NAMES reached */
    uint64_t restarts;  /* the file shrank or was replaced: read again from its start */
    uint64_t entries;   /* code ranges kept now */
} ag_perfmap_stats_t;

/* Reads what /tmp/perf-<pid>.map (or the path set) grew by since the last call: at most
 * AG_PERFMAP_READ_MAX bytes, whole lines only. Cheap when nothing changed (one open and
 * fstat), skipped for a second after the file was found missing. */
AG_HIDDEN void ag_perfmap_refresh(void);
/* The perf map's name for pc (the newest entry whose range holds pc); 1 and *out filled (strings valid until the next refresh), 0 if none. Refreshes first
 * when the last refresh is over 100 ms old, and on a miss when over 1 ms old. */
AG_HIDDEN int ag_perfmap_lookup(uintptr_t pc, ag_jitsym_t *out);
AG_HIDDEN void ag_perfmap_stats(ag_perfmap_stats_t *st);
/* Tests: read path instead of /tmp/perf-<pid>.map (NULL: back to it), from scratch. */
AG_HIDDEN void ag_perfmap_use(const char *path);

#endif
