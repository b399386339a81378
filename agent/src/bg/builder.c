/* Chunk builder: turns ring records into one cm_chunk_t per interval (bg thread only).
 *
 * Identical stacks, locations, functions, mappings, contexts, label sets, threads and strings
 * are stored once per chunk (hash maps below); every sample is one row that references them,
 * so the chunk keeps each sample's time, thread and span context (span drill-down needs
 * them). Rows are sorted by (thread, time) before encoding, as the format asks. Chunks are
 * self-contained: every dictionary starts afresh at each interval.
 *
 * Memory: grows with the distinct content of one interval and is released at finish; rows
 * beyond CM_MAX_SAMPLES per type are dropped (DROP_DICT_FULL).
 */
#include "ag_unwind.h"
#include "context.h"
#include "symbols.h"
#include "builder.h"
#include "perfmap.h"
#include "remap.h"
#include "pyframes.h"
#include "jvm.h"
#include "hooks.h"

#include "cm/file.h"
#include "cm/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- a hash map from a 64-bit key (or hash) to a u32, with optional equality check ---- */
typedef struct {
    uint64_t *keys;
    uint32_t *vals; /* value + 1; 0 = empty */
    uint32_t cap, n;
} map_t;

typedef int (*eq_fn)(void *ctx, uint32_t val, const void *probe);

static int map_grow(map_t *m) {
    uint32_t ncap = m->cap ? 2 * m->cap : 256;
    uint64_t *k = calloc(ncap, sizeof *k);
    uint32_t *v = calloc(ncap, sizeof *v);
    if (!k || !v) {
        free(k);
        free(v);
        return -1;
    }
    for (uint32_t i = 0; i < m->cap; i++) {
        if (!m->vals[i])
            continue;
        uint32_t h = (uint32_t)(m->keys[i] * 0x9e3779b97f4a7c15ull >> 32) & (ncap - 1);
        while (v[h])
            h = (h + 1) & (ncap - 1);
        k[h] = m->keys[i];
        v[h] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = k;
    m->vals = v;
    m->cap = ncap;
    return 0;
}

/* Returns the value for key, or UINT32_MAX with *slot set for insertion. */
static uint32_t map_find(map_t *m, uint64_t key, eq_fn eq, void *ctx, const void *probe,
                         uint32_t *slot) {
    if (2 * (m->n + 1) > m->cap && map_grow(m) != 0) {
        *slot = UINT32_MAX;
        return UINT32_MAX;
    }
    uint32_t h = (uint32_t)(key * 0x9e3779b97f4a7c15ull >> 32) & (m->cap - 1);
    while (m->vals[h]) {
        if (m->keys[h] == key && (!eq || eq(ctx, m->vals[h] - 1, probe)))
            return m->vals[h] - 1;
        h = (h + 1) & (m->cap - 1);
    }
    *slot = h;
    return UINT32_MAX;
}

static void map_put(map_t *m, uint32_t slot, uint64_t key, uint32_t val) {
    m->keys[slot] = key;
    m->vals[slot] = val + 1;
    m->n++;
}

static void map_free(map_t *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* growable arrays */
#define VEC(T)                                                                                     \
    struct {                                                                                       \
        T *v;                                                                                      \
        uint32_t n, cap;                                                                           \
    }
#define VEC_PUSH(vec, x)                                                                           \
    ((vec).n < (vec).cap || vec_grow((void **)&(vec).v, &(vec).cap, sizeof *(vec).v) == 0          \
         ? ((vec).v[(vec).n++] = (x), 0)                                                           \
         : -1)
#define VEC_FREE(vec) (free((vec).v), (vec).v = NULL, (vec).n = (vec).cap = 0)

static int vec_grow(void **v, uint32_t *cap, size_t elem) {
    uint32_t ncap = *cap ? 2 * *cap : 64;
    void *n = realloc(*v, (size_t)ncap * elem);
    if (!n)
        return -1;
    *v = n;
    *cap = ncap;
    return 0;
}

typedef struct {
    VEC(uint32_t) stack, thread, context, labels, flags, io_kind, fd_kind, target;
    VEC(uint64_t) time, weight, count, size, address;
} rows_t;

struct ag_builder {
    VEC(cm_str_t) strs;
    map_t str_map;
    VEC(cm_mapping_t) maps;
    map_t map_map;
    VEC(uint32_t) fn_name, fn_sys, fn_file;
    map_t fn_map;
    VEC(uint32_t) loc_map, loc_fn, loc_line;
    VEC(uint64_t) loc_addr;
    int any_file, any_line; /* the optional columns are sent only when some entry has one */
    map_t loc_map_idx;
    VEC(uint32_t) st_off, st_frames, st_flags;
    map_t st_map;
    VEC(uint8_t) ctx;
    map_t ctx_map;
    VEC(uint32_t) lab_off, lab_kv;
    map_t lab_map;
    VEC(uint32_t) th_tid, th_name;
    map_t th_map;
    rows_t rows[CM_EV_COUNT];
    VEC(uint32_t) sp_ctx, sp_name, sp_thread, sp_flags; /* spans (spans.c) */
    VEC(uint64_t) sp_start, sp_dur;
    size_t str_bytes; /* for ag_builder_bytes */
    int failed; /* an allocation failed: the chunk is dropped (DROP_ENCODE_FAILED) */
};

static int str_eq(void *ctx, uint32_t val, const void *probe) {
    ag_builder_t *b = ctx;
    const cm_str_t *p = probe;
    return b->strs.v[val].len == p->len && !memcmp(b->strs.v[val].ptr, p->ptr, p->len);
}

static uint32_t intern_str(ag_builder_t *b, const char *s) {
    if (!s || !*s)
        return 0;
    size_t len = strlen(s);
    if (len > CM_MAX_STRING_LEN)
        len = CM_MAX_STRING_LEN;
    cm_str_t probe = {s, (uint32_t)len};
    uint32_t slot, v = map_find(&b->str_map, XXH3_64bits(s, len), str_eq, b, &probe, &slot);
    if (v != UINT32_MAX)
        return v;
    char *copy = slot == UINT32_MAX ? NULL : strndup(s, len);
    if (!copy || VEC_PUSH(b->strs, ((cm_str_t){copy, (uint32_t)len})) != 0) {
        free(copy);
        b->failed = 1;
        return 0;
    }
    map_put(&b->str_map, slot, XXH3_64bits(s, len), b->strs.n - 1);
    b->str_bytes += len;
    return b->strs.n - 1;
}

static void reset(ag_builder_t *b) {
    for (uint32_t i = 1; i < b->strs.n; i++)
        free((char *)b->strs.v[i].ptr);
    b->strs.n = 0;
    map_free(&b->str_map);
    b->maps.n = 0;
    map_free(&b->map_map);
    b->fn_name.n = b->fn_sys.n = b->fn_file.n = 0;
    map_free(&b->fn_map);
    b->loc_map.n = b->loc_fn.n = b->loc_addr.n = b->loc_line.n = 0;
    b->any_file = b->any_line = 0;
    map_free(&b->loc_map_idx);
    b->st_off.n = b->st_frames.n = b->st_flags.n = 0;
    map_free(&b->st_map);
    b->ctx.n = 0;
    map_free(&b->ctx_map);
    b->lab_off.n = b->lab_kv.n = 0;
    map_free(&b->lab_map);
    b->th_tid.n = b->th_name.n = 0;
    map_free(&b->th_map);
    for (int t = 0; t < CM_EV_COUNT; t++) {
        rows_t *r = &b->rows[t];
        r->stack.n = r->thread.n = r->context.n = r->labels.n = r->flags.n = 0;
        r->io_kind.n = r->fd_kind.n = r->time.n = r->weight.n = r->count.n = 0;
        r->size.n = r->address.n = r->target.n = 0;
    }
    b->sp_ctx.n = b->sp_name.n = b->sp_thread.n = b->sp_flags.n = 0;
    b->sp_start.n = b->sp_dur.n = 0;
    b->failed = 0;
    b->str_bytes = 0;
    /* zero entries */
    int bad = VEC_PUSH(b->strs, ((cm_str_t){"", 0}));
    bad |= VEC_PUSH(b->maps, ((cm_mapping_t){0}));
    bad |= VEC_PUSH(b->fn_name, 0u) | VEC_PUSH(b->fn_sys, 0u) | VEC_PUSH(b->fn_file, 0u);
    bad |= VEC_PUSH(b->loc_map, 0u) | VEC_PUSH(b->loc_fn, 0u) | VEC_PUSH(b->loc_addr, 0ull);
    bad |= VEC_PUSH(b->loc_line, 0u);
    bad |= VEC_PUSH(b->st_off, 0u);
    bad |= VEC_PUSH(b->st_off, 0u) | VEC_PUSH(b->st_flags, 0u);
    for (uint32_t i = 0; i < CM_CONTEXT_SIZE; i++)
        bad |= VEC_PUSH(b->ctx, (uint8_t)0);
    bad |= VEC_PUSH(b->lab_off, 0u);
    bad |= VEC_PUSH(b->lab_off, 0u);
    bad |= VEC_PUSH(b->th_tid, 0u) | VEC_PUSH(b->th_name, 0u);
    if (bad)
        b->failed = 1;
}

ag_builder_t *ag_builder_new(void) {
    ag_builder_t *b = calloc(1, sizeof *b);
    if (b)
        reset(b);
    return b;
}

void ag_builder_free(ag_builder_t *b) {
    if (!b)
        return;
    reset(b);
    VEC_FREE(b->strs);
    VEC_FREE(b->maps);
    VEC_FREE(b->fn_name);
    VEC_FREE(b->fn_sys);
    VEC_FREE(b->fn_file);
    VEC_FREE(b->loc_map);
    VEC_FREE(b->loc_fn);
    VEC_FREE(b->loc_addr);
    VEC_FREE(b->loc_line);
    VEC_FREE(b->st_off);
    VEC_FREE(b->st_frames);
    VEC_FREE(b->st_flags);
    VEC_FREE(b->ctx);
    VEC_FREE(b->lab_off);
    VEC_FREE(b->lab_kv);
    VEC_FREE(b->th_tid);
    VEC_FREE(b->th_name);
    for (int t = 0; t < CM_EV_COUNT; t++) {
        rows_t *r = &b->rows[t];
        VEC_FREE(r->stack);
        VEC_FREE(r->thread);
        VEC_FREE(r->context);
        VEC_FREE(r->labels);
        VEC_FREE(r->flags);
        VEC_FREE(r->io_kind);
        VEC_FREE(r->fd_kind);
        VEC_FREE(r->time);
        VEC_FREE(r->weight);
        VEC_FREE(r->count);
        VEC_FREE(r->size);
        VEC_FREE(r->address);
        VEC_FREE(r->target);
    }
    VEC_FREE(b->sp_ctx);
    VEC_FREE(b->sp_name);
    VEC_FREE(b->sp_thread);
    VEC_FREE(b->sp_flags);
    VEC_FREE(b->sp_start);
    VEC_FREE(b->sp_dur);
    map_free(&b->str_map);
    free(b);
}

static uint32_t intern_mapping(ag_builder_t *b, ag_object_t *o) {
    uint32_t slot, v = map_find(&b->map_map, (uintptr_t)o, NULL, NULL, NULL, &slot);
    if (v != UINT32_MAX)
        return v;
    if (slot == UINT32_MAX || b->maps.n >= CM_MAX_MAPPINGS) {
        ag_drop_count(0, CM_DROP_DICT_FULL, 1);
        return 0;
    }
    cm_mapping_t m = {0};
    ag_object_mapping(o, &m.start, &m.limit, &m.file_offset, &m.build_id, &m.build_id_len);
    m.filename = intern_str(b, ag_object_path(o));
    if (VEC_PUSH(b->maps, m) != 0) {
        b->failed = 1;
        return 0;
    }
    map_put(&b->map_map, slot, (uintptr_t)o, b->maps.n - 1);
    return b->maps.n - 1;
}

/* The location interned for key (*v, true), or false and *slot where a new one goes; a full
 * dictionary answers location 0 (counted DICT_FULL). */
static int loc_find(ag_builder_t *b, uintptr_t key, uint32_t *slot, uint32_t *v) {
    *v = map_find(&b->loc_map_idx, key, NULL, NULL, NULL, slot);
    if (*v != UINT32_MAX)
        return 1;
    if (*slot == UINT32_MAX || b->loc_map.n >= CM_MAX_LOCATIONS) {
        ag_drop_count(0, CM_DROP_DICT_FULL, 1);
        *v = 0;
        return 1;
    }
    return 0;
}

/* A new function (name, system name, file: string ids) at fslot of the function map. */
static uint32_t add_fn(ag_builder_t *b, uint32_t fslot, uint64_t key, uint32_t name, uint32_t sys,
                       uint32_t file) {
    b->any_file |= file != 0;
    if (VEC_PUSH(b->fn_name, name) | VEC_PUSH(b->fn_sys, sys) | VEC_PUSH(b->fn_file, file))
        b->failed = 1;
    uint32_t f = b->fn_name.n - 1;
    map_put(&b->fn_map, fslot, key, f);
    return f;
}

/* A new location at slot of the location map; 0 when out of memory. */
static uint32_t add_loc(ag_builder_t *b, uint32_t slot, uintptr_t key, uint32_t mapping,
                        uint32_t fn, uint64_t addr, uint32_t line) {
    b->any_line |= line != 0;
    if (VEC_PUSH(b->loc_map, mapping) | VEC_PUSH(b->loc_fn, fn) | VEC_PUSH(b->loc_addr, addr) |
        VEC_PUSH(b->loc_line, line)) {
        b->failed = 1;
        return 0;
    }
    map_put(&b->loc_map_idx, slot, key, b->loc_map.n - 1);
    return b->loc_map.n - 1;
}

/* A pc in no loaded object (JIT code), named from the process's perf map (perfmap.c: a JavaScript function gets system name
 * "js:..." and its script and first line). */
static uint32_t intern_jitloc(ag_builder_t *b, uint32_t slot, uintptr_t pc, uint32_t mapping,
                              uint64_t file_addr, const ag_jitsym_t *j) {
    uint32_t fslot, f = map_find(&b->fn_map, j->key, NULL, NULL, NULL, &fslot);
    if (f == UINT32_MAX && fslot != UINT32_MAX) {
        uint32_t name = intern_str(b, j->name);
        uint32_t sys = strcmp(j->name, j->sysname) ? intern_str(b, j->sysname) : name;
        uint32_t file = j->file ? intern_str(b, j->file) : 0;
        f = add_fn(b, fslot, j->key, name, sys, file);
    }
    return add_loc(b, slot, pc, mapping, f == UINT32_MAX ? 0 : f, file_addr, j->line);
}

static uint32_t intern_location(ag_builder_t *b, uintptr_t pc) {
    uint32_t slot, v;
    if (loc_find(b, pc, &slot, &v))
        return v;
    ag_sym_t sym;
    ag_symbols_lookup(pc, &sym);
    ag_jitsym_t j;
    /* in no loaded object: JIT code (its runtime's perf map), or a copy of an object's code
     * (remap.c); a miss costs a refresh of the map at most every millisecond, so pcs of loaded
     * objects (unnamed too when in-process symbols are off) never ask */
    if (!sym.obj && ag_perfmap_lookup(pc, &j))
        return intern_jitloc(b, slot, pc, 0, (uint64_t)sym.file_addr, &j);
    uintptr_t orig = sym.obj ? 0 : ag_remap_pc(pc);
    if (orig)
        ag_symbols_lookup(orig, &sym);
    uint32_t mapping = sym.obj ? intern_mapping(b, sym.obj) : 0, fn = 0;
    if (sym.name) {
        uint64_t key = XXH3_64bits(&sym, offsetof(ag_sym_t, file_addr)) ^ sym.sym_id;
        uint32_t fslot, f = map_find(&b->fn_map, key, NULL, NULL, NULL, &fslot);
        if (f == UINT32_MAX && fslot != UINT32_MAX) {
            uint32_t name = intern_str(b, sym.name);
            uint32_t sys = strcmp(sym.name, sym.sysname) ? intern_str(b, sym.sysname) : name;
            uint32_t file = sym.file ? intern_str(b, sym.file) : 0;
            f = add_fn(b, fslot, key, name, sys, file);
        }
        fn = f == UINT32_MAX ? 0 : f;
    }
    return add_loc(b, slot, pc, mapping, fn, (uint64_t)sym.file_addr, sym.line);
}

/* A runtime's frame: function = name, system name "<kind>:<name>" (the frame's kind for every
 * consumer), file; the location's line and address (an offset in the code) given, no mapping. */
static uint32_t intern_rtloc(ag_builder_t *b, uint32_t slot, uintptr_t word, const char *kind,
                             const char *name, const char *file, uint64_t addr, uint32_t line) {
    static char sys[640];
    snprintf(sys, sizeof sys, "%s:%s", kind, name);
    uint64_t key = XXH3_64bits(sys, strlen(sys)) ^ XXH3_64bits_withSeed(file, strlen(file), 1);
    uint32_t fslot, f = map_find(&b->fn_map, key, NULL, NULL, NULL, &fslot);
    if (f == UINT32_MAX && fslot != UINT32_MAX) {
        uint32_t fi = file[0] ? intern_str(b, file) : 0;
        uint32_t n = intern_str(b, name);
        f = add_fn(b, fslot, key, n, intern_str(b, sys), fi);
    }
    return add_loc(b, slot, word, 0, f == UINT32_MAX ? 0 : f, addr, line);
}

/* A Python frame (pyframes.c: co_qualname, co_filename; the instruction's line, its byte
 * offset in the code) or a Java frame (lang/jvm.c: "pkg.Class.method", the class's source file
 * under its package; the bytecode index's line, the index as the address). */
static uint32_t intern_rtframe(ag_builder_t *b, uintptr_t word) {
    uint32_t slot, v;
    if (loc_find(b, word, &slot, &v))
        return v;
    if (AG_PY_IS(word)) {
        static ag_py_frame_t pf;
        ag_py_name(word, &pf);
        return intern_rtloc(b, slot, word, "python", pf.name, pf.file,
                            (uint64_t)((word >> 44) & ((1u << 19) - 1)) * 2, pf.line);
    }
    static ag_java_frame_t jf;
    ag_jvm_name(word, &jf);
    return intern_rtloc(b, slot, word, "java", jf.name, jf.file, AG_JAVA_BCI(word), jf.line);
}

typedef struct {
    const uint32_t *locs;
    uint32_t n, flags;
} stack_probe_t;

static int stack_eq(void *ctx, uint32_t val, const void *probe) {
    ag_builder_t *b = ctx;
    const stack_probe_t *p = probe;
    uint32_t off = b->st_off.v[val], n = b->st_off.v[val + 1] - off;
    return n == p->n && b->st_flags.v[val] == p->flags &&
           !memcmp(b->st_frames.v + off, p->locs, n * sizeof *p->locs);
}

/* Is `at`, a frame in libfleetprof's own image (record.c kept the outermost of each run), to
 * be kept? Only when it is one of our interposers, which symbols.c names as the real
 * function; else it is left out (the thread-start wrapper at the root of every thread the
 * program made after we loaded, the signal handler chaining to the program's). An interposer
 * frame already interned this chunk is known to be kept, and a left-out frame is remembered
 * in a direct-mapped cache (the agent's image and symbols never change: an entry stays true
 * for the process's life), so neither costs a symbol lookup per sample (the lookups were ~7%
 * and ~3% of the bg thread's CPU under redis-benchmark). bg thread only. */
static uintptr_t g_self_left_out[64];

static int self_frame_kept(ag_builder_t *b, uintptr_t at) {
    uintptr_t *left_out = &g_self_left_out[(at ^ at >> 6) & 63];
    uint32_t known_slot;
    if (*left_out == at)
        return 0;
    if (map_find(&b->loc_map_idx, at, NULL, NULL, NULL, &known_slot) != UINT32_MAX)
        return 1;
    ag_sym_t sym;
    uint64_t lo, hi, off;
    const uint8_t *bid;
    uint32_t bl;
    ag_symbols_lookup(at, &sym);
    if (!sym.obj)
        return 0;
    ag_object_mapping(sym.obj, &lo, &hi, &off, &bid, &bl);
    if (at >= lo && at < hi) { /* named in our own image: not forwarded to a real function */
        *left_out = at;
        return 0;
    }
    return 1;
}

static uint32_t intern_stack(ag_builder_t *b, const ag_rec_t *r) {
    uint32_t locs[AG_MAX_DEPTH];
    uint32_t n = r->depth > AG_MAX_DEPTH ? AG_MAX_DEPTH : r->depth, k = 0;
    for (uint32_t i = 0; i < n; i++) {
        /* root first; return addresses point after the call: symbolise pc - 1 */
        uintptr_t pc = r->pcs[n - 1 - i], at = (n - 1 - i) == 0 ? pc : pc - 1;
        if (AG_PY_IS(pc) || AG_JAVA_IS(pc)) { /* a runtime's frame */
            locs[k++] = intern_rtframe(b, pc);
            continue;
        }
        if (at - ag_self_lo < ag_self_hi - ag_self_lo && !self_frame_kept(b, at))
            continue;
        locs[k++] = intern_location(b, at);
    }
    n = k;
    uint32_t sflags = r->stack_flags & (CM_STF_TRUNCATED | CM_STF_INCOMPLETE);
    stack_probe_t probe = {locs, n, sflags};
    uint64_t key = XXH3_64bits_withSeed(locs, n * sizeof *locs, sflags);
    uint32_t slot, v = map_find(&b->st_map, key, stack_eq, b, &probe, &slot);
    if (v != UINT32_MAX)
        return v;
    if (slot == UINT32_MAX || b->st_off.n - 1 >= CM_MAX_STACKS) {
        ag_drop_count(0, CM_DROP_DICT_FULL, 1);
        return 0;
    }
    for (uint32_t i = 0; i < n; i++)
        if (VEC_PUSH(b->st_frames, locs[i]) != 0)
            b->failed = 1;
    uint32_t id = b->st_off.n - 1;
    if (VEC_PUSH(b->st_off, b->st_frames.n) | VEC_PUSH(b->st_flags, sflags))
        b->failed = 1;
    map_put(&b->st_map, slot, key, id);
    return id;
}

static int ctx_eq(void *ctx, uint32_t val, const void *probe) {
    ag_builder_t *b = ctx;
    return !memcmp(b->ctx.v + (size_t)val * CM_CONTEXT_SIZE, probe, CM_CONTEXT_SIZE);
}

static uint32_t intern_ctx(ag_builder_t *b, const uint8_t *c) {
    static const uint8_t zero[CM_CONTEXT_SIZE];
    if (!memcmp(c, zero, CM_CONTEXT_SIZE))
        return 0;
    uint64_t key = XXH3_64bits(c, CM_CONTEXT_SIZE);
    uint32_t slot, v = map_find(&b->ctx_map, key, ctx_eq, b, c, &slot);
    if (v != UINT32_MAX)
        return v;
    uint32_t id = b->ctx.n / CM_CONTEXT_SIZE;
    if (slot == UINT32_MAX || id >= CM_MAX_CONTEXTS) {
        ag_drop_count(0, CM_DROP_DICT_FULL, 1);
        return 0;
    }
    for (uint32_t i = 0; i < CM_CONTEXT_SIZE; i++)
        if (VEC_PUSH(b->ctx, c[i]) != 0)
            b->failed = 1;
    map_put(&b->ctx_map, slot, key, id);
    return id;
}

static uint32_t intern_labels(ag_builder_t *b, uint32_t global) {
    if (!global)
        return 0;
    uint32_t slot, v = map_find(&b->lab_map, global, NULL, NULL, NULL, &slot);
    if (v != UINT32_MAX)
        return v;
    const char *kv[8];
    uint32_t n = ag_context_labels(global, kv);
    if (slot == UINT32_MAX || n == 0 || b->lab_off.n - 1 >= CM_MAX_LABEL_SETS)
        return 0;
    for (uint32_t i = 0; i < 2 * n; i++)
        if (VEC_PUSH(b->lab_kv, intern_str(b, kv[i])) != 0)
            b->failed = 1;
    uint32_t id = b->lab_off.n - 1;
    if (VEC_PUSH(b->lab_off, b->lab_kv.n / 2) != 0)
        b->failed = 1;
    map_put(&b->lab_map, slot, global, id);
    return id;
}

static uint32_t intern_thread(ag_builder_t *b, pid_t tid) {
    uint32_t slot, v = map_find(&b->th_map, (uint64_t)tid, NULL, NULL, NULL, &slot);
    if (v != UINT32_MAX)
        return v;
    if (slot == UINT32_MAX)
        return 0;
    char path[64], name[64] = "";
    snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)tid);
    if (cm_read_file(path, name, sizeof name) > 0)
        name[strcspn(name, "\n")] = '\0';
    if (VEC_PUSH(b->th_tid, (uint32_t)tid) | VEC_PUSH(b->th_name, intern_str(b, name)))
        b->failed = 1;
    map_put(&b->th_map, slot, (uint64_t)tid, b->th_tid.n - 1);
    return b->th_tid.n - 1;
}

void ag_builder_add(ag_builder_t *b, const ag_thread_t *t, pid_t tid, const ag_rec_t *r) {
    ag_builder_add_target(b, t, tid, r, NULL);
}

/* issue 4: target = an IO row's path or peer (NULL: none); tid 0 = no thread (aggregates). */
void ag_builder_add_target(ag_builder_t *b, const ag_thread_t *t, pid_t tid, const ag_rec_t *r,
                           const char *target) {
    (void)t;
    if (r->type == 0 || r->type > CM_EV_MAX)
        return;
    rows_t *rw = &b->rows[r->type];
    if (rw->stack.n >= CM_MAX_SAMPLES) {
        ag_drop_count(r->type, CM_DROP_DICT_FULL, 1);
        return;
    }
    int bad = VEC_PUSH(rw->stack, intern_stack(b, r));
    bad |= VEC_PUSH(rw->thread, tid ? intern_thread(b, tid) : 0u);
    bad |= VEC_PUSH(rw->context, intern_ctx(b, r->ctx));
    bad |= VEC_PUSH(rw->labels, intern_labels(b, r->labels));
    bad |= VEC_PUSH(rw->flags, (uint32_t)r->flags);
    bad |= VEC_PUSH(rw->io_kind, r->io_kind);
    bad |= VEC_PUSH(rw->fd_kind, r->fd_kind);
    bad |= VEC_PUSH(rw->time, r->time_ns);
    bad |= VEC_PUSH(rw->weight, r->weight);
    bad |= VEC_PUSH(rw->count, r->count);
    bad |= VEC_PUSH(rw->size, r->size);
    bad |= VEC_PUSH(rw->address, r->address);
    bad |= VEC_PUSH(rw->target, target ? intern_str(b, target) : 0u);
    if (bad)
        b->failed = 1;
}

void ag_builder_add_span(ag_builder_t *b, const uint8_t *ctx, const char *name,
                         uint64_t start_ns, uint64_t duration_ns, pid_t tid, uint32_t flags) {
    uint32_t c = intern_ctx(b, ctx);
    if (c == 0 || b->sp_ctx.n >= CM_MAX_SPANS) { /* no context: the dictionary is full */
        ag_drop_count(0, CM_DROP_SPAN_LIMIT, 1);
        return;
    }
    int bad = VEC_PUSH(b->sp_ctx, c);
    bad |= VEC_PUSH(b->sp_name, intern_str(b, name));
    bad |= VEC_PUSH(b->sp_thread, tid ? intern_thread(b, tid) : 0u);
    bad |= VEC_PUSH(b->sp_flags, flags);
    bad |= VEC_PUSH(b->sp_start, start_ns);
    bad |= VEC_PUSH(b->sp_dur, duration_ns);
    if (bad)
        b->failed = 1;
}

/* An estimate of the encoded chunk's size before compression: what each entry costs in the
 * protobuf message with typical varints (a row's 13 columns ~40 bytes, a frame 4, a location
 * 16, a function 8, a mapping with its build id ~96). chunk.c cuts a chunk early when it
 * passes AG_CHUNK_SOFT, so that no chunk approaches the collector's and the broker's message
 * limit however much an interval holds. */
size_t ag_builder_bytes(const ag_builder_t *b) {
    size_t n = b->str_bytes + 3u * b->strs.n + 96u * b->maps.n + 8u * b->fn_name.n +
               16u * b->loc_map.n + 4u * (b->st_frames.n + b->st_off.n) + b->ctx.n +
               4u * (b->lab_kv.n + b->lab_off.n) + 8u * b->th_tid.n;
    for (int t = 1; t < CM_EV_COUNT; t++)
        n += 40u * b->rows[t].stack.n;
    return n + 24u * b->sp_ctx.n;
}

uint32_t ag_builder_samples(const ag_builder_t *b, cm_event_type_t type) {
    return b->rows[type].stack.n;
}

static const rows_t *g_sort_rows; /* bg thread only */
static int cmp_row(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    const rows_t *r = g_sort_rows;
    if (r->thread.v[x] != r->thread.v[y])
        return r->thread.v[x] < r->thread.v[y] ? -1 : 1;
    if (r->time.v[x] != r->time.v[y])
        return r->time.v[x] < r->time.v[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Returns a column permuted by perm, or NULL when every value is def (column omitted). */
#define PERMUTE(T, src, perm, n, def, out, bad)                                                    \
    do {                                                                                           \
        int any_ = 0;                                                                              \
        for (uint32_t i_ = 0; i_ < (n); i_++)                                                      \
            any_ |= (src)[i_] != (def);                                                            \
        (out) = NULL;                                                                              \
        if (any_ || (def) == (T)-1) {                                                              \
            (out) = malloc((size_t)(n) * sizeof(T) + 1);                                           \
            if (!(out))                                                                            \
                (bad) = 1;                                                                         \
            else                                                                                   \
                for (uint32_t i_ = 0; i_ < (n); i_++)                                              \
                    (out)[i_] = (src)[(perm)[i_]];                                                 \
        }                                                                                          \
    } while (0)

/* The chunk's dictionary: b's tables as they are (no copy). */
static void dict_view(const ag_builder_t *b, cm_dict_t *d) {
    d->strings = b->strs.v;
    d->n_strings = b->strs.n;
    d->mappings = b->maps.v;
    d->n_mappings = b->maps.n;
    d->function_name = b->fn_name.v;
    d->function_system_name = b->fn_sys.v;
    d->function_filename = b->any_file ? b->fn_file.v : NULL;
    d->n_functions = b->fn_name.n;
    d->location_mapping = b->loc_map.v;
    d->location_function = b->loc_fn.v;
    d->location_address = b->loc_addr.v;
    d->location_line = b->any_line ? b->loc_line.v : NULL;
    d->n_locations = b->loc_map.n;
    d->stack_off = b->st_off.v;
    d->stack_frames = b->st_frames.v ? b->st_frames.v : (uint32_t *)b->st_off.v;
    d->stack_flags = b->st_flags.v;
    d->n_stacks = b->st_off.n - 1;
    d->contexts = b->ctx.v;
    d->n_contexts = b->ctx.n / CM_CONTEXT_SIZE;
    d->label_off = b->lab_off.v;
    d->label_kv = b->lab_kv.v ? b->lab_kv.v : b->lab_off.v;
    d->n_label_sets = b->lab_off.n - 1;
    d->thread_tid = b->th_tid.v;
    d->thread_name = b->th_name.v;
    d->n_threads = b->th_tid.n;
}

/* The rows of type t into s, sorted (cmp_row), times kept inside [start, end]; *perm: the
 * order, for the caller to free. 0, or -1 out of memory. */
static int rows_sorted(ag_builder_t *b, int t, const cm_header_t *hdr, cm_samples_t *s,
                       uint32_t **perm) {
    rows_t *r = &b->rows[t];
    uint32_t n = r->stack.n;
    int bad = 0;
    if (n == 0)
        return 0;
    uint32_t *p = *perm = malloc(n * sizeof *p);
    if (!p)
        return -1;
    for (uint32_t i = 0; i < n; i++)
        p[i] = i;
    g_sort_rows = r;
    qsort(p, n, sizeof *p, cmp_row);
    s->type = (cm_event_type_t)t;
    s->n = n;
    for (uint32_t i = 0; i < n; i++) { /* keep times inside [start, end] */
        if (r->time.v[i] < hdr->start_unix_ns)
            r->time.v[i] = hdr->start_unix_ns;
        if (r->time.v[i] > hdr->end_unix_ns)
            r->time.v[i] = hdr->end_unix_ns;
    }
    PERMUTE(uint32_t, r->stack.v, p, n, UINT32_MAX, s->stack, bad);
    PERMUTE(uint64_t, r->time.v, p, n, UINT64_MAX, s->time_ns, bad);
    PERMUTE(uint64_t, r->weight.v, p, n, UINT64_MAX, s->weight, bad);
    PERMUTE(uint64_t, r->count.v, p, n, (uint64_t)CM_COUNT_ONE, s->count, bad);
    PERMUTE(uint32_t, r->thread.v, p, n, 0u, s->thread, bad);
    PERMUTE(uint32_t, r->context.v, p, n, 0u, s->context, bad);
    PERMUTE(uint32_t, r->labels.v, p, n, 0u, s->labels, bad);
    PERMUTE(uint32_t, r->flags.v, p, n, 0u, s->flags, bad);
    PERMUTE(uint64_t, r->size.v, p, n, 0ull, s->size, bad);
    PERMUTE(uint64_t, r->address.v, p, n, 0ull, s->address, bad);
    PERMUTE(uint32_t, r->io_kind.v, p, n, 0u, s->io_kind, bad);
    PERMUTE(uint32_t, r->fd_kind.v, p, n, 0u, s->fd_kind, bad);
    PERMUTE(uint32_t, r->target.v, p, n, 0u, s->target, bad);
    return bad ? -1 : 0;
}

static void samples_free(cm_samples_t *s) {
    free(s->stack);
    free(s->time_ns);
    free(s->weight);
    free(s->count);
    free(s->thread);
    free(s->context);
    free(s->labels);
    free(s->flags);
    free(s->size);
    free(s->address);
    free(s->io_kind);
    free(s->fd_kind);
    free(s->target);
}

int ag_builder_finish(ag_builder_t *b, cm_header_t *hdr, uint8_t **frame, size_t *frame_len,
                      char *err, size_t err_size) {
    cm_chunk_t c;
    memset(&c, 0, sizeof c);
    int rc = 0, bad = b->failed;
    c.header = *hdr;
    c.header.time_unit_ns = 1000;
    dict_view(b, &c.dict);
    uint32_t *perm[CM_EV_COUNT] = {0};
    for (int t = 1; t < CM_EV_COUNT && !bad; t++)
        if (rows_sorted(b, t, hdr, &c.samples[t], &perm[t]) != 0)
            bad = 1;
    uint32_t nsp = b->sp_ctx.n, any_flag = 0;
    for (uint32_t i = 0; i < nsp; i++)
        any_flag |= b->sp_flags.v[i];
    c.spans = (cm_spans_t){nsp, b->sp_ctx.v, b->sp_name.v, b->sp_start.v, b->sp_dur.v,
                           b->sp_thread.v, any_flag ? b->sp_flags.v : NULL};
    if (bad) {
        snprintf(err, err_size, "out of memory while building the chunk");
        rc = CM_ENOMEM;
    } else {
        rc = cm_chunk_encode(&c, frame, frame_len, err, err_size);
    }
    for (int t = 1; t < CM_EV_COUNT; t++) {
        free(perm[t]);
        samples_free(&c.samples[t]);
    }
    reset(b);
    return rc;
}
