/* Per-object CFI tables (cfi.h) published for the handler (cfi_table.c). */
#ifndef AG_CFI_TABLE_H
#define AG_CFI_TABLE_H

#include "base.h"
#include "cfi.h"

typedef struct {
    uintptr_t lo, hi;          /* runtime text range [lo, hi) */
    const ag_cfi_row_t *rows;  /* NULL: no CFI (frame-pointer fallback) */
    uint32_t nrows;
    uint32_t nbuckets;         /* the bucket index over rows (cfi.h): idx[0..nbuckets] */
    const uint32_t *idx;       /* NULL: no index, plain binary search */
    uint8_t shift;             /* buckets of 2^shift bytes of text */
} ag_cfi_obj_t;
typedef struct {
    uint32_t n;
    ag_cfi_obj_t o[]; /* sorted by lo */
} ag_cfi_snap_t;
AG_HIDDEN extern _Atomic(ag_cfi_snap_t *) ag_cfi_snap;
typedef struct {
    _Atomic uint64_t objects, rows, bytes;  /* tables in use; bytes: rows and indexes */
    _Atomic uint64_t index_bytes;           /* of bytes, the bucket indexes' */
    _Atomic uint64_t fallback_rows, bad;    /* rules not compiled; malformed entries */
    _Atomic uint64_t no_cfi, skipped;       /* objects without CFI; over the memory cap */
    _Atomic uint64_t stale_files, leaked;   /* file replaced on disk; batches never freed */
    _Atomic uint64_t build_ns;              /* time spent compiling */
    _Atomic uint64_t publishes;             /* snapshots published (symbols.c: rescan on a miss) */
    /* handler side */
    _Atomic uint64_t fp_frames;             /* frames unwound by the frame-pointer fallback */
    _Atomic uint64_t incomplete;            /* stacks that could not be continued to the root */
} ag_cfi_counters_t;
AG_HIDDEN extern ag_cfi_counters_t ag_cfi_stats;
/* bg: picks up objects loaded or unloaded since the last call (dlpi_adds/dlpi_subs), compiles
 * new ones, publishes, frees retired tables no handler can read any more. */
AG_HIDDEN void ag_cfi_tick(void);
AG_HIDDEN void ag_cfi_after_fork_child(void);
AG_HIDDEN extern void (*ag_cfi_between_objects)(void); /* ag_cfi_tick, after each build */

#endif
