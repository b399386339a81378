/* Live-heap table: the addresses of sampled allocations that are not freed yet.
 *
 * Application side (hooks, lock-free, no allocation): a fixed open-addressing table of
 * 2^k entries (mmap'ed at startup, FLEETPROF_HEAP_ENTRIES, default 65536) with linear probing
 * over at most AG_HEAP_PROBE slots. Every object in the table has a header (hook_alloc.c), and
 * every object with a header is in the table: free() finds sampled objects by their header and
 * confirms here (ag_heap_take). A slot's key goes EMPTY -> BUSY (claimed by CAS) -> addr
 * (published with release after the value fields) -> TOMB (removed by CAS) -> BUSY (reused).
 * Slots never return to EMPTY, so a lookup may stop at the first EMPTY slot. A table with no
 * free slot within the probe window counts DROP_HEAP_TABLE_FULL (type INUSE) and the object
 * is not tracked. The free of a page-aligned pointer (whose header may not be readable) first
 * checks a counting filter (hooks.h: 32 KiB, 4096 words of 16 4-bit counters, two counters per
 * pointer in one word, indexed by hash bits the table does not use). False positives (a probe
 * of the table for nothing) with L live entries: about (1 - exp(-2L / 65536))^2 -- 0.4% at
 * L = 2000, 7% at 10000.
 *
 * Pages: the table is touched only by writes first. A probe claims a slot by CAS before it
 * reads anything (a locked RMW faults the page in writable), and the bg walk reads only the
 * pages an insert has touched (g_touched). Reading an untouched page first maps the shared
 * zero page, and the first write to it then replaces that mapping with a TLB shootdown: an
 * IPI to every CPU running the process. That was 0.2-0.3% of the mixed benchmark's CPU, one
 * ~30 us fault per early sample, since samples land on fresh pages of the 2 MiB table.
 *
 * Background side (bg thread only): ag_heap_bg_note keeps each tracked sample's stack (as
 * drained from the ring, keyed by the record id stored in the table), so stacks survive
 * across chunks; ag_heap_bg_emit walks the table at each chunk and adds INUSE rows (live bytes
 * and live objects per stack and allocating thread), then forgets the stacks of freed
 * entries. A sample whose record was not drained yet shows up in the next chunk.
 *
 * fork: the child keeps the table (the parent's objects are live in the child too); a slot
 * left BUSY by a thread that does not exist in the child only costs one slot.
 */
#include "hooks.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

#define AG_HEAP_PROBE 64
#define K_EMPTY 0u
#define K_BUSY 1u
#define K_TOMB 2u

typedef struct {
    _Atomic uintptr_t key;
    uint64_t rid, weight, count;
} slot_t;

static slot_t *g_tab;
static uint32_t g_mask;
_Atomic uint64_t *ag_heap_filter;
#define g_filter ag_heap_filter
#define FILTER_BYTES (sizeof(uint64_t) << AG_HEAP_FILTER_WORDS)
static _Atomic uint64_t g_rid;
static _Atomic uint32_t g_live;
#define SLOTS_PER_PAGE (4096 / sizeof(slot_t))
static _Atomic uint64_t *g_touched; /* bit per table page that an insert has written */

int ag_heap_init(uint32_t entries) {
    size_t pages = (entries + SLOTS_PER_PAGE - 1) / SLOTS_PER_PAGE;
    size_t tbytes = ((pages + 63) / 64) * sizeof(uint64_t);
    size_t bytes = (size_t)entries * sizeof(slot_t) + FILTER_BYTES + tbytes;
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return -1;
    g_tab = m;
    g_mask = entries - 1;
    g_filter = (_Atomic uint64_t *)((uint8_t *)m + (size_t)entries * sizeof(slot_t));
    g_touched = (_Atomic uint64_t *)((uint8_t *)g_filter + FILTER_BYTES);
    return 0;
}

/* bg, once at start: the table's pages faulted in writable by one madvise (Linux >= 5.14;
 * older kernels: nothing happens and the inserts fault them in one by one). A sample lands on a
 * random page, so within ~10 s at the default 200 samples/s nearly every page is touched
 * anyway: populating first costs no resident memory in the end (2 MiB at 65536 entries), and
 * saves ~512 page faults on application threads (4-5 us each here) for one bulk call in the
 * background. Contents are untouched: safe with inserts racing. */
void ag_heap_populate(void) {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
    if (g_tab)
        (void)madvise(g_tab, (size_t)(g_mask + 1) * sizeof(slot_t), MADV_POPULATE_WRITE);
}

static void touch(uint32_t slot) {
    uint32_t pg = slot / (uint32_t)SLOTS_PER_PAGE;
    uint64_t bit = 1ull << (pg & 63);
    if (!(atomic_load_explicit(&g_touched[pg / 64], memory_order_relaxed) & bit))
        atomic_fetch_or_explicit(&g_touched[pg / 64], bit, memory_order_relaxed);
}

static int touched(uint32_t slot) {
    uint32_t pg = slot / (uint32_t)SLOTS_PER_PAGE;
    return (atomic_load_explicit(&g_touched[pg / 64], memory_order_relaxed) >> (pg & 63)) & 1;
}

/* Adds d (+1 or -1) to the counters at bit offsets s1 and s2 of word f, by CAS so that the
 * word always holds exact counts. A counter at 15 is stuck: never incremented or decremented
 * again (it may stand for more entries than it can count). */
static void filter_add(_Atomic uint64_t *f, uint32_t s1, uint32_t s2, int d) {
    uint64_t w = atomic_load_explicit(f, memory_order_relaxed), nw;
    do {
        nw = w;
        if ((w >> s1 & 15) != 15)
            nw = d > 0 ? nw + (1ull << s1) : nw - (1ull << s1);
        if ((w >> s2 & 15) != 15)
            nw = d > 0 ? nw + (1ull << s2) : nw - (1ull << s2);
    } while (!atomic_compare_exchange_weak_explicit(f, &w, nw, memory_order_relaxed,
                                                    memory_order_relaxed));
}

#define mix ag_heap_hash

uint64_t ag_heap_insert(uintptr_t ptr, uint64_t weight, uint64_t count) {
    if (!g_tab || ptr <= K_TOMB)
        return 0;
    uint64_t h = mix(ptr);
    uint32_t s1, s2, f = ag_heap_fpos(h, &s1, &s2);
    for (uint32_t i = 0; i < AG_HEAP_PROBE; i++) {
        uint32_t at = (uint32_t)(h + i) & g_mask;
        slot_t *s = &g_tab[at];
        uintptr_t k = K_EMPTY; /* CAS first: see "Pages" above */
        if (!atomic_compare_exchange_strong(&s->key, &k, K_BUSY) &&
            (k != K_TOMB || !atomic_compare_exchange_strong(&s->key, &k, K_BUSY)))
            continue;
        touch(at);
        uint64_t rid = atomic_fetch_add_explicit(&g_rid, 1, memory_order_relaxed) + 1;
        s->rid = rid;
        s->weight = weight;
        s->count = count;
        filter_add(&g_filter[f], s1, s2, 1);
        atomic_store_explicit(&s->key, ptr, memory_order_release);
        atomic_fetch_add_explicit(&g_live, 1, memory_order_relaxed);
        return rid;
    }
    ag_drop_count(CM_EV_INUSE, CM_DROP_HEAP_TABLE_FULL, 1);
    return 0;
}

/* The slot holding ptr, or NULL. No filter check: the callers have made it (or a header). */
static slot_t *find(uintptr_t ptr, uint64_t h) {
    for (uint32_t i = 0; i < AG_HEAP_PROBE; i++) {
        slot_t *s = &g_tab[(h + i) & g_mask];
        uintptr_t k = atomic_load_explicit(&s->key, memory_order_acquire);
        if (k == K_EMPTY)
            return NULL;
        if (k == ptr)
            return s;
    }
    return NULL;
}

int ag_heap_has(uintptr_t ptr) { return g_tab && ptr > K_TOMB && find(ptr, mix(ptr)) != NULL; }

int ag_heap_take(uintptr_t ptr) {
    if (!g_tab || ptr <= K_TOMB)
        return 0;
    uint64_t h = mix(ptr);
    slot_t *s = find(ptr, h);
    uintptr_t k = ptr;
    if (!s || !atomic_compare_exchange_strong(&s->key, &k, K_TOMB))
        return 0;
    uint32_t s1, s2, f = ag_heap_fpos(h, &s1, &s2);
    filter_add(&g_filter[f], s1, s2, -1);
    atomic_fetch_sub_explicit(&g_live, 1, memory_order_relaxed);
    return 1;
}

uint32_t ag_heap_live(void) { return atomic_load(&g_live); }

/* ---- bg side: record id -> stack ---- */

typedef struct {
    uint64_t rid; /* 0 = empty */
    pid_t tid;
    uint32_t depth, flags;
    int marked;
    uintptr_t *pcs;
} st_t;

static st_t *g_st;
static uint32_t g_st_cap, g_st_n;

/* Puts the entries of src (scap slots) into dst (dcap slots, a power of two, with room):
 * linear probing from each id's hash. Returns how many. */
static uint32_t st_insert_all(st_t *dst, uint32_t dcap, const st_t *src, uint32_t scap) {
    uint32_t n = 0;
    for (uint32_t i = 0; i < scap; i++) {
        if (!src[i].rid)
            continue;
        uint32_t h = (uint32_t)mix(src[i].rid) & (dcap - 1);
        while (dst[h].rid)
            h = (h + 1) & (dcap - 1);
        dst[h] = src[i];
        n++;
    }
    return n;
}

static int st_grow(void) {
    uint32_t ncap = g_st_cap ? 2 * g_st_cap : 1024;
    st_t *n = calloc(ncap, sizeof *n);
    if (!n)
        return -1;
    st_insert_all(n, ncap, g_st, g_st_cap);
    free(g_st);
    g_st = n;
    g_st_cap = ncap;
    return 0;
}

static st_t *st_find(uint64_t rid) {
    if (!g_st_cap)
        return NULL;
    for (uint32_t h = (uint32_t)mix(rid) & (g_st_cap - 1);; h = (h + 1) & (g_st_cap - 1)) {
        if (g_st[h].rid == rid)
            return &g_st[h];
        if (!g_st[h].rid)
            return NULL;
    }
}

void ag_heap_bg_note(const ag_rec_t *r, uint64_t rid, pid_t tid) {
    if (g_st_n >= 2 * (g_mask + 1u)) { /* bounded: more than the table can hold */
        ag_drop_count(CM_EV_INUSE, CM_DROP_HEAP_TABLE_FULL, 1);
        return;
    }
    if (2 * (g_st_n + 1) > g_st_cap && st_grow() != 0)
        return;
    uintptr_t *pcs = malloc(r->depth * sizeof *pcs + 1);
    if (!pcs)
        return;
    memcpy(pcs, r->pcs, r->depth * sizeof *pcs);
    uint32_t h = (uint32_t)mix(rid) & (g_st_cap - 1);
    while (g_st[h].rid)
        h = (h + 1) & (g_st_cap - 1);
    g_st[h] = (st_t){rid, tid, r->depth, r->stack_flags, 0, pcs};
    g_st_n++;
}

/* per-chunk aggregation of live entries by (stack, thread) */
typedef struct {
    uint64_t key;
    st_t *st;
    uint64_t weight, count;
} agg_t;

/* The live sampled allocations of the table summed by stack (thread, pcs): an open-addressing
 * table of *cap entries (its empty entries have st NULL), or NULL out of memory. Marks the
 * stacks still live. */
static agg_t *live_by_stack(uint32_t *cap_out) {
    uint32_t cap = 1024, n = 0;
    agg_t *a = calloc(cap, sizeof *a);
    if (!a)
        return NULL;
    for (uint32_t i = 0; i <= g_mask; i++) {
        if (i % SLOTS_PER_PAGE == 0 && !touched(i)) {
            i += (uint32_t)SLOTS_PER_PAGE - 1;
            continue;
        }
        slot_t *s = &g_tab[i];
        uintptr_t k = atomic_load_explicit(&s->key, memory_order_acquire);
        if (k <= K_TOMB)
            continue;
        uint64_t rid = s->rid, w = s->weight, c = s->count;
        if (atomic_load_explicit(&s->key, memory_order_acquire) != k)
            continue; /* freed (and maybe reused) meanwhile */
        st_t *st = st_find(rid);
        if (!st)
            continue; /* its record is not drained yet: next chunk */
        st->marked = 1;
        uint64_t key = XXH3_64bits_withSeed(st->pcs, st->depth * sizeof(uintptr_t),
                                            (uint64_t)st->tid << 8 | st->flags);
        if (2 * (n + 1) > cap) {
            agg_t *na = calloc(2 * cap, sizeof *na);
            if (!na)
                break;
            for (uint32_t j = 0; j < cap; j++) {
                if (!a[j].st)
                    continue;
                uint32_t h = (uint32_t)a[j].key & (2 * cap - 1);
                while (na[h].st)
                    h = (h + 1) & (2 * cap - 1);
                na[h] = a[j];
            }
            free(a);
            a = na;
            cap *= 2;
        }
        uint32_t h = (uint32_t)key & (cap - 1);
        while (a[h].st && !(a[h].key == key && a[h].st->tid == st->tid &&
                            a[h].st->depth == st->depth &&
                            !memcmp(a[h].st->pcs, st->pcs, st->depth * sizeof(uintptr_t))))
            h = (h + 1) & (cap - 1);
        if (!a[h].st) {
            a[h].st = st;
            a[h].key = key;
            n++;
        }
        a[h].weight += w;
        a[h].count += c;
    }
    *cap_out = cap;
    return a;
}

/* One INUSE row per stack of a (cap entries), at now_real. */
static void emit_inuse(ag_builder_t *b, const agg_t *a, uint32_t cap, uint64_t now_real) {
    static uintptr_t buf[(AG_REC_MAX + sizeof(uintptr_t) - 1) / sizeof(uintptr_t)];
    ag_rec_t *r = (ag_rec_t *)buf;
    for (uint32_t i = 0; i < cap; i++) {
        if (!a[i].st)
            continue;
        memset(r, 0, sizeof *r);
        st_t *st = a[i].st;
        uint32_t d = st->depth > AG_MAX_DEPTH ? AG_MAX_DEPTH : st->depth;
        r->type = CM_EV_INUSE;
        r->depth = (uint16_t)d;
        r->stack_flags = st->flags;
        r->time_ns = now_real;
        r->weight = a[i].weight;
        r->count = a[i].count;
        memcpy(r->pcs, st->pcs, d * sizeof(uintptr_t));
        r->len = (uint32_t)(sizeof *r + d * sizeof(uintptr_t));
        ag_builder_add(b, NULL, st->tid, r);
    }
}

/* Forgets the stacks no live entry uses any more (not marked by live_by_stack). */
static void st_sweep(void) {
    /* No race with inserts: an entry is in the table
     * before its record is in the ring, and records are drained on this same thread. */
    for (uint32_t i = 0; i < g_st_cap; i++) {
        st_t *st = &g_st[i];
        if (!st->rid)
            continue;
        if (st->marked) {
            st->marked = 0;
            continue;
        }
        free(st->pcs);
        st->rid = 0;
        st->pcs = NULL;
        g_st_n--;
    }
    /* deleting from linear probing leaves holes: rebuild in place */
    st_t *old = g_st;
    uint32_t ocap = g_st_cap;
    g_st = NULL;
    g_st_cap = 0;
    uint32_t live = g_st_n;
    g_st_n = 0;
    if (live == 0 || st_grow() != 0) {
        free(old);
        if (live)
            g_st_n = 0;
        return;
    }
    while (2 * live > g_st_cap && st_grow() == 0)
        ;
    g_st_n += st_insert_all(g_st, g_st_cap, old, ocap);
    free(old);
}

void ag_heap_bg_emit(ag_builder_t *b, uint64_t now_real) {
    if (!g_tab)
        return;
    uint32_t cap;
    agg_t *a = live_by_stack(&cap);
    if (!a)
        return;
    emit_inuse(b, a, cap, now_real);
    free(a);
    st_sweep();
}
