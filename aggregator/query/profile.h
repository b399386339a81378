/* The query layer's in-memory profile: what a store query (or a set of decoded chunks) fills
 * and what every view, filter, diff and export reads.
 *
 * One profile holds one event type. Frames are interned by (function name, module): a frame is
 * a function of a module, with the build id and the first address seen kept as attributes (for
 * pprof mappings and locations). Stacks are root-first arrays of frame ids, interned. Rows are
 * (stack, replicate, context, weight, count): weight in the event type's unit (ns for cpu, wall,
 * lock, io; bytes for alloc, inuse), count in milli-events (CM_COUNT_ONE = one event). Rows are
 * appended as given; identical (stack, replicate, context) rows may repeat and simply add up.
 *
 * A replicate is a unit of independent measurement (a time bucket of the service, or one chunk
 * = one process for one interval) with the amount of work done in it (process-seconds of wall
 * time, or requests). Views sum over replicates; the diff's statistics compare replicates.
 *
 * A context is an optional (trace id, span id) per row; context 0 means none.
 *
 * Ownership: the profile owns every string and array it points to. Fields of agg_profile_t are
 * read-only for callers (use the builder functions to change a profile).
 * Threading: no global state. A profile being built is used by one thread; a finished profile
 * may be read by many threads at once (every view and export only reads it).
 */
#ifndef AGG_PROFILE_H
#define AGG_PROFILE_H

#include "cm/chunk.h"

#include <stddef.h>
#include <stdint.h>

#define AGG_NONE UINT32_MAX

typedef struct {
    const char *name;     /* function name, never NULL (with source lines: "function file:line") */
    const char *module;   /* mapping file basename, "" when unknown */
    const char *build_id; /* hex build id, "" when unknown */
    uint64_t address;     /* first address seen, 0 when unknown */
    /* source position (a profile read with lines, agg_profile_frame_src): */
    const char *function; /* the function alone (pprof Function.name); == name without lines */
    const char *file;     /* source file, "" when unknown */
    uint32_t line;        /* 0 when unknown */
    uint8_t inlined;      /* AGG_FRAME_* flags */
    uint8_t kind;         /* AGG_KIND_*: the code's runtime (the UI colours frames by it) */
} agg_frame_t;

/* A frame's kind, from its function's system name: "python:..." (the agent's CPython frames),
 * "js:..." (JavaScript from a perf map), "java:...", "kernel:...", else native code. */
enum { AGG_KIND_NATIVE, AGG_KIND_KERNEL, AGG_KIND_PYTHON, AGG_KIND_JS, AGG_KIND_JAVA };
uint8_t agg_frame_kind(const char *system_name);
/* Its name in the API's JSON ("native", "kernel", "python", "js", "java"). */
const char *agg_kind_name(uint8_t kind);

#define AGG_FRAME_INLINED 1    /* inlined into the frame before it in every stack (same address) */
#define AGG_FRAME_BY_ADDRESS 2 /* one frame per address (an export's locations), not per name */

typedef struct {
    const char *key; /* caller's name for it ("bucket 1700000000", a chunk id, ...) */
    double work;     /* process-seconds of wall time, or requests; > 0 to be used by the diff */
    uint32_t group;  /* replicates of one process share a group (the diff estimates the
                      * variation between processes from them); AGG_NONE: its own */
} agg_replicate_t;

typedef struct {
    uint8_t trace_id[16];
    uint8_t span_id[8];
} agg_context_t;

typedef struct {
    uint32_t stack;     /* stack id */
    uint32_t replicate; /* replicate id */
    uint32_t context;   /* context id, 0 = none */
    uint64_t weight;    /* event type's unit */
    uint64_t count;     /* milli-events */
} agg_row_t;

/* Per-replicate cost of one leaf frame: what a diff of self cost needs from each replicate,
 * without the per-replicate stacks (see agg_profile_t.leaf_replicates). */
typedef struct {
    uint32_t frame;     /* frame id of the leaf */
    uint32_t replicate; /* replicate id */
    uint64_t weight, count;
} agg_leaf_row_t;

typedef struct agg_idtab agg_idtab_t; /* private interning tables */

typedef struct agg_profile {
    cm_event_type_t type;
    agg_frame_t *frames;
    uint32_t n_frames;
    uint32_t *stack_off; /* n_stacks + 1 entries: stack i is stack_frames[off[i] .. off[i+1]) */
    uint32_t *stack_frames;
    uint32_t n_stacks;
    agg_row_t *rows;
    size_t n_rows;
    agg_replicate_t *replicates;
    uint32_t n_replicates;
    agg_context_t *contexts; /* contexts[0] is the zero context */
    uint32_t n_contexts;
    uint64_t time_start_ns, time_end_ns; /* covered time range, 0 when unknown (pprof) */
    uint64_t *stack_weight, *stack_count; /* per-stack sums after agg_profile_seal(), or NULL */
    /* Leaf-replicate form (set by agg_profile_use_leaf_replicates): the rows carry the totals
     * per stack with no meaningful replicate, and leaf_rows carry each replicate's cost per
     * leaf frame. Views read the rows as always; a diff takes the replicates of its self-cost
     * test from leaf_rows (the same numbers the rows would give, far fewer of them). Filters
     * return an ordinary profile without them. */
    int leaf_replicates;
    agg_leaf_row_t *leaf_rows;
    size_t n_leaf_rows;
    /* > 0: the work of exactly the rows' range (leaf replicates may be wider buckets that
     * straddle its ends); the diff normalises the totals by it instead of the replicates' sum */
    double work_total;
    /* private */
    uint32_t cap_frames, cap_stacks, cap_stack_frames, cap_replicates, cap_contexts;
    size_t cap_rows, cap_leaf_rows;
    agg_idtab_t *tab_strings, *tab_frames, *tab_stacks, *tab_replicates, *tab_contexts;
    char **strings;
    uint32_t n_strings, cap_strings;
} agg_profile_t;

/* Returns a new empty profile of one event type, or NULL when out of memory. */
agg_profile_t *agg_profile_new(cm_event_type_t type);
void agg_profile_free(agg_profile_t *p);

/* Interns a frame. name NULL or "" becomes "[unknown]"; module and build_id may be NULL.
 * build_id is printable (hex). A frame already known keeps its first build id and address.
 * Returns the frame id (>= 0) or CM_ENOMEM. */
int64_t agg_profile_frame(agg_profile_t *p, const char *name, const char *module,
                          const char *build_id, uint64_t address);

/* The same with a source position: frames are interned by (name, module, flags), so a
 * profile with lines gives each line its own name ("function file:line"); function is the
 * function alone (NULL: name), file/line the position (first seen). flags (AGG_FRAME_*):
 * INLINED: the frame was inlined into the frame before it (root-first), at the same address;
 * BY_ADDRESS: the address is part of the key (a pprof export's locations are addresses:
 * frames of one line at two addresses stay two). */
int64_t agg_profile_frame_src(agg_profile_t *p, const char *name, const char *module,
                              const char *build_id, uint64_t address, const char *function,
                              const char *file, uint32_t line, int inlined);

/* Interns a root-first stack of n frame ids (n may be 0). Returns the stack id, CM_ERANGE when
 * a frame id is unknown or n > CM_MAX_STACK_DEPTH, or CM_ENOMEM. */
int64_t agg_profile_stack(agg_profile_t *p, const uint32_t *frames, uint32_t n);

/* Interns a replicate by key and sets its work (adds to it when the key already exists).
 * Returns the replicate id or CM_ENOMEM / CM_EINVAL (work < 0 or not finite). */
int64_t agg_profile_replicate(agg_profile_t *p, const char *key, double work);

/* Interns a (trace id, span id) context; all-zero is context 0. Returns the id or CM_ENOMEM. */
int64_t agg_profile_context(agg_profile_t *p, const uint8_t trace_id[16], const uint8_t span_id[8]);

/* Puts replicate rep in group `group` (e.g. one id per process, when a replicate is a process
 * in a time bucket). Returns 0 or CM_ERANGE for an unknown replicate. */
int agg_profile_replicate_group(agg_profile_t *p, uint32_t rep, uint32_t group);

/* Appends a row. Returns 0, CM_ERANGE for an unknown stack/replicate/context id, or CM_ENOMEM. */
int agg_profile_add(agg_profile_t *p, uint32_t stack, uint64_t weight, uint64_t count,
                    uint32_t replicate, uint32_t context);

/* Marks p as being in leaf-replicate form (see agg_profile_t.leaf_replicates). */
void agg_profile_use_leaf_replicates(agg_profile_t *p);

/* Appends a leaf row (leaf-replicate form). Returns 0, CM_ERANGE for an unknown frame or
 * replicate id, CM_EINVAL when p is not in leaf-replicate form, or CM_ENOMEM. */
int agg_profile_add_leaf(agg_profile_t *p, uint32_t frame, uint64_t weight, uint64_t count,
                         uint32_t replicate);

/* Adds the samples of p->type from one decoded chunk as one replicate: key = the chunk id in
 * hex, work = the chunk's interval in seconds. Frames are named as `fleetprof fold` names them
 * (function name, else "module+0xaddr", else "0xaddr"). Returns 0 or a CM_E* code. */
int agg_profile_add_chunk(agg_profile_t *p, const cm_chunk_t *c);
/* The same with the replicate's work given (e.g. the chunk's header.work_units: requests). */
int agg_profile_add_chunk_work(agg_profile_t *p, const cm_chunk_t *c, double work);
/* The same with one replicate per bucket_ns of the chunk's interval (0: one for the chunk, as
 * agg_profile_add_chunk_work), each bucket's work its seconds (work is used only without
 * buckets): finer replicates of a short capture, for the diff's dispersion. At most
 * AGG_CHUNK_BUCKETS_MAX buckets (a longer chunk gets wider ones). */
#define AGG_CHUNK_BUCKETS_MAX 64
int agg_profile_add_chunk_buckets(agg_profile_t *p, const cm_chunk_t *c, double work,
                                  uint64_t bucket_ns);

/* Computes and keeps the per-stack sums, so that every later view skips a pass over the rows.
 * Call once the profile is built (before sharing it between threads); adding a stack or a row
 * afterwards drops the cache. Returns 0 or CM_ENOMEM (the profile stays usable unsealed). */
int agg_profile_seal(agg_profile_t *p);

/* Sums: total weight and count over all rows, total work over all replicates. */
void agg_profile_totals(const agg_profile_t *p, uint64_t *weight, uint64_t *count, double *work);

/* Per-stack sums over all rows: fills weight[n_stacks] and count[n_stacks] (either may be
 * NULL). Caller-provided arrays. */
void agg_profile_stack_sums(const agg_profile_t *p, uint64_t *weight, uint64_t *count);

/* Text a pattern is matched against, and that names a frame in outputs: "module!name", or
 * "name" when the module is unknown. Writes at most size bytes (NUL-terminated). */
void agg_frame_label(const agg_frame_t *f, char *buf, size_t size);

/* Returns a new profile holding only the rows whose context has this trace id (when trace_id
 * is not NULL) and this span id (when span_id is not NULL). Returns 0 or CM_ENOMEM. */
int agg_profile_select_context(const agg_profile_t *in, const uint8_t *trace_id,
                               const uint8_t *span_id, agg_profile_t **out);

#endif
