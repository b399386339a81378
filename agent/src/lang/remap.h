/* Copies of a loaded object's code mapped elsewhere (remap.c, bg thread only). */
#ifndef AG_REMAP_H
#define AG_REMAP_H

#include "base.h"

#define AG_REMAP_MAX 16 /* copies tracked; beyond: left unnamed, counted in full */

typedef struct {
    uint64_t scans;  /* /proc/self/maps reads */
    uint64_t copies; /* copies known now */
    uint64_t full;   /* copies not kept: AG_REMAP_MAX reached */
} ag_remap_stats_t;

/* The address in the loaded object of pc, when pc lies in an executable file mapping outside
 * every loaded object that maps the same file bytes as one (V8 remaps its embedded builtins
 * next to its JIT code: "short builtin calls"); 0 otherwise. A miss rescans /proc/self/maps
 * at most once a second. */
AG_HIDDEN uintptr_t ag_remap_pc(uintptr_t pc);
AG_HIDDEN void ag_remap_stats(ag_remap_stats_t *st);

#endif
