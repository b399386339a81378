/* Loaded objects, their symbols, demangling (symbols.c, bg thread only). */
#ifndef AG_SYMBOLS_H
#define AG_SYMBOLS_H

#include "base.h"

typedef struct ag_object ag_object_t;
typedef struct {
    ag_object_t *obj;     /* NULL: no object contains the pc */
    uint64_t file_addr;   /* pc relative to the object's ELF vaddrs */
    const char *name;     /* demangled function name or NULL */
    const char *sysname;  /* linker name or NULL */
    uint32_t sym_id;      /* unique per (object, symbol), 0 if none */
    const char *file;     /* source file of the function (its entry address) or NULL */
    uint32_t line;        /* source line of the pc, 0 if unknown */
} ag_sym_t;
typedef struct {
    uint64_t objects, symbols; /* objects opened, function symbols kept */
    uint64_t load_ns;          /* time spent opening objects and reading their tables */
    uint64_t lookups, lookup_ns; /* ag_symbols_lookup calls and their time (loads included) */
    uint64_t deferred; /* loads put off: the process was near RLIMIT_NOFILE */
    uint64_t nolib;    /* objects left unnamed: elfutils could not be loaded */
    uint64_t foreign;  /* objects left unnamed: the program's malloc is not one elfutils may
                        * call from the agent's thread (ag_symbols_disable) */
} ag_symstats_t;
AG_HIDDEN void ag_symbols_init(void);
/* No in-process symbol loading from now on (elfutils is never loaded): locations keep their
 * build id and file offset for the aggregator. bg thread. */
AG_HIDDEN void ag_symbols_disable(void);
AG_HIDDEN void ag_symbols_lookup(uintptr_t pc, ag_sym_t *out);
/* Is pc in a loaded object (as known since the last lookup's rescan)? Loads no symbols. */
AG_HIDDEN int ag_symbols_in_object(uintptr_t pc);
AG_HIDDEN void ag_symbols_stats(ag_symstats_t *st);
AG_HIDDEN char *ag_demangle(const char *name); /* malloc'ed, NULL: not mangled */
AG_HIDDEN const char *ag_object_path(const ag_object_t *o);
AG_HIDDEN void ag_object_mapping(const ag_object_t *o, uint64_t *start, uint64_t *limit,
                                 uint64_t *off, const uint8_t **build_id, uint32_t *bid_len);
AG_HIDDEN uint32_t *ag_object_chunk_slot(ag_object_t *o); /* builder's per-chunk index */

#endif
