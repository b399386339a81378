/* Allocation sampling: interposes the malloc family and the C++ operators new/delete.
 *
 * Sampling by bytes (gperftools/tcmalloc): each thread counts down the bytes to its next
 * sample, drawn from an exponential distribution of mean P (ag_alloc_period, moved by the
 * ALLOC rate controller so that samples/s hold FLEETPROF_ALLOC_RATE). Sample points then
 * form a Poisson process over the bytes allocated, so an allocation of s bytes contains at
 * least one point -- and is sampled -- with probability q(s) = 1 - exp(-s/P), independently
 * of every other allocation (memorylessness: after a sample the countdown is redrawn). By
 * Horvitz-Thompson, a sampled allocation stands for
 *     s / q(s) bytes   and   1 / q(s) allocations,
 * so E[sum over samples of s/q(s)] = total bytes and E[sum of 1/q(s)] = number of calls. (For
 * s << P, s/q(s) ~ P + s/2; for s >> P, ~ s.) P is the period the countdown was drawn with
 * (per thread), so a controller move never biases a pending sample; while the thread's ring is
 * over a quarter full, samples are kept with a probability p that falls as it fills, and
 * weighted 1/p more, so that a burst is thinned instead of dropped. The maths, and why it is
 * unbiased whatever P and p do: alloc_sample.h.
 *
 * Fast path: one TLS subtraction and one branch before the real call; free() one load of the
 * word before the pointer and a compare (see "sampled objects" below). Slow path (a sample):
 * guard set, the object allocated with a header, inserted into the live-heap table, unwound
 * through the generic record path.
 *
 * Bootstrap: the real functions are found with dlsym(RTLD_NEXT) on first use; dlsym itself may
 * call malloc/calloc, which are then served from a small static bump arena (free() of an arena
 * pointer is a no-op, recognised by its address).
 *
 * Contract: async-signal-safe as far as the real allocator is (an application's signal handler
 * that allocates reaches the slow path with no lock to take: the record path is handler-safe).
 * Never locks, never allocates for its own bookkeeping.
 */
#include "alloc_sample.h"
#include "agent.h"
#include "ag_unwind.h"
#include "bypass.h"
#include "hooks.h"

#include <dlfcn.h>
#include <errno.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <math.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

_Atomic uint64_t ag_alloc_period = 524288;
#define AG_SPILL_DEPTH 64 /* agg.c keeps 64 frames */

static AG_TLS int64_t t_left;     /* bytes to the next sample (sample when < 0) */
static AG_TLS uint64_t t_period;  /* P the countdown was drawn with */
static AG_TLS int t_resolving;

typedef void *(*malloc_fn)(size_t);
typedef void (*free_fn)(void *);
typedef void *(*calloc_fn)(size_t, size_t);
typedef void *(*realloc_fn)(void *, size_t);
typedef int (*posix_memalign_fn)(void **, size_t, size_t);
typedef void *(*memalign_fn)(size_t, size_t);
typedef void *(*reallocarray_fn)(void *, size_t, size_t);
typedef size_t (*usable_fn)(void *);
typedef void *(*new_fn)(size_t);
typedef void *(*new_nt_fn)(size_t, const void *);
typedef void *(*new_al_fn)(size_t, size_t);
typedef void *(*new_al_nt_fn)(size_t, size_t, const void *);

/* The real functions, and what every malloc and free reads first in one cache line: ready,
 * cookie (see "Headers" below), malloc, free, calloc, realloc, malloc_usable_size. */
static _Alignas(64) struct {
    _Atomic int ready;
    _Atomic uint64_t cookie;
    malloc_fn malloc;
    free_fn free;
    calloc_fn calloc;
    realloc_fn realloc;
    usable_fn usable;
    posix_memalign_fn posix_memalign;
    memalign_fn memalign, aligned_alloc;
    malloc_fn valloc, pvalloc;
    reallocarray_fn reallocarray;
    new_fn znwm, znam;
    new_nt_fn znwm_nt, znam_nt;
    new_al_fn znwm_al, znam_al;
    new_al_nt_fn znwm_al_nt, znam_al_nt;
} R;

/* ---- bootstrap arena ---- */
static _Alignas(64) uint8_t g_arena[64 << 10];
static _Atomic size_t g_arena_used;

static int in_arena(const void *p) {
    return (const uint8_t *)p >= g_arena && (const uint8_t *)p < g_arena + sizeof g_arena;
}

static void *arena_alloc(size_t n, size_t align) {
    if (align < 16)
        align = 16;
    for (;;) {
        size_t used = atomic_load(&g_arena_used);
        size_t start = (used + 16 + align - 1) & ~(align - 1); /* 16-byte size header before */
        if (start + n > sizeof g_arena)
            return NULL;
        if (atomic_compare_exchange_weak(&g_arena_used, &used, start + n)) {
            memcpy(g_arena + start - 16, &n, sizeof n);
            return g_arena + start;
        }
    }
}

static size_t arena_size(const void *p) {
    size_t n;
    memcpy(&n, (const uint8_t *)p - 16, sizeof n);
    return n;
}

static void resolve(void) {
    if (t_resolving)
        return;
    t_resolving = 1;
    R.malloc = (malloc_fn)dlsym(RTLD_NEXT, "malloc");
    R.free = (free_fn)dlsym(RTLD_NEXT, "free");
    R.calloc = (calloc_fn)dlsym(RTLD_NEXT, "calloc");
    R.realloc = (realloc_fn)dlsym(RTLD_NEXT, "realloc");
    R.posix_memalign = (posix_memalign_fn)dlsym(RTLD_NEXT, "posix_memalign");
    R.memalign = (memalign_fn)dlsym(RTLD_NEXT, "memalign");
    R.aligned_alloc = (memalign_fn)dlsym(RTLD_NEXT, "aligned_alloc");
    R.valloc = (malloc_fn)dlsym(RTLD_NEXT, "valloc");
    R.pvalloc = (malloc_fn)dlsym(RTLD_NEXT, "pvalloc");
    R.reallocarray = (reallocarray_fn)dlsym(RTLD_NEXT, "reallocarray");
    R.usable = (usable_fn)dlsym(RTLD_NEXT, "malloc_usable_size");
    atomic_store(&R.ready, 1);
    t_resolving = 0;
}

static void resolve_cxx(void) {
    if (R.znwm || t_resolving)
        return;
    t_resolving = 1;
    R.znwm_nt = (new_nt_fn)dlsym(RTLD_NEXT, "_ZnwmRKSt9nothrow_t");
    R.znam_nt = (new_nt_fn)dlsym(RTLD_NEXT, "_ZnamRKSt9nothrow_t");
    R.znwm_al = (new_al_fn)dlsym(RTLD_NEXT, "_ZnwmSt11align_val_t");
    R.znam_al = (new_al_fn)dlsym(RTLD_NEXT, "_ZnamSt11align_val_t");
    R.znwm_al_nt = (new_al_nt_fn)dlsym(RTLD_NEXT, "_ZnwmSt11align_val_tRKSt9nothrow_t");
    R.znam_al_nt = (new_al_nt_fn)dlsym(RTLD_NEXT, "_ZnamSt11align_val_tRKSt9nothrow_t");
    R.znam = (new_fn)dlsym(RTLD_NEXT, "_Znam");
    R.znwm = (new_fn)dlsym(RTLD_NEXT, "_Znwm");
    t_resolving = 0;
}

/* resolve() stores R.ready after every pointer: one load says all */
#define READY() AG_LIKELY(atomic_load_explicit(&R.ready, memory_order_relaxed))

/* ---- sampled objects: a header in front ----
 *
 * With the live heap on, a sampled allocation of n bytes is served as base = real(n + H) and
 * q = base + H (H = 16, or the alignment when that is larger), with two words before q:
 *     q[-2] = H                (back to what the real allocator returned)
 *     q[-1] = cookie ^ q       (R.cookie: random, bit 63 set; 0 = no headers yet)
 * and q is in the live-heap table (heap.c): an object has a header if and only if it is in the
 * table. free(q) then tells a sampled object from the others without touching memory of ours:
 * it reads q[-1], the word the real free reads next anyway (glibc: the chunk's size field),
 * and compares. A glibc size field never has bit 63 set, so an unsampled glibc pointer never
 * matches; under another allocator q[-1] may be the previous object's data, so a match is
 * confirmed in the table. Only a page-aligned q (q[-1] may be on an unmapped page) goes to
 * the filter and the table instead. (Before the headers, every free loaded a word of the
 * 32 KiB filter: a cache miss on most frees of a real workload, 0.4-0.5% of the mixed
 * benchmark's CPU.) realloc and malloc_usable_size know headers too; the C++ deletes go
 * through free. Objects keep their headers when the agent is switched off: free still
 * recognises them. */

static inline uint64_t word_at(uintptr_t a) {
    uint64_t v;
    memcpy(&v, (const void *)a, sizeof v);
    return v;
}

/* May q have a header? Hot on the free path: one load of q[-1] and a compare when it has
 * none. A yes is confirmed in the table (ag_heap_has / ag_heap_take). */
static inline int header_candidate(uintptr_t q) {
    uint64_t c = atomic_load_explicit(&R.cookie, memory_order_relaxed);
    if (!c)
        return 0;
    return AG_LIKELY(q & 4095) ? word_at(q - 8) == (c ^ q) : ag_heap_maybe(q);
}

static inline int has_header(uintptr_t q) {
    return AG_UNLIKELY(header_candidate(q)) && ag_heap_has(q);
}

/* dl_iterate_phdr callback: which loaded object holds each of n addresses (its load base,
 * its name, "" for the main executable, and its place in the walk: 0 is the main executable).
 * dladdr would say too, but it also scans the object's whole symbol table for the nearest
 * symbol (libc: ~3,000 entries, ~30 us of every exec'd child's start). */
typedef struct {
    uintptr_t a;
    uintptr_t base;
    const char *name;
    int found, index;
} owner_t;

typedef struct {
    owner_t *o;
    int n, seen;
} owners_t;

static int find_owners(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    owners_t *w = arg;
    int left = 0;
    for (int k = 0; k < w->n; k++) {
        owner_t *o = &w->o[k];
        for (int i = 0; i < info->dlpi_phnum && !o->found; i++) {
            const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
            uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
            if (ph->p_type == PT_LOAD && o->a >= lo && o->a < lo + ph->p_memsz) {
                o->found = 1;
                o->base = info->dlpi_addr;
                o->name = info->dlpi_name ? info->dlpi_name : "";
                o->index = w->seen;
            }
        }
        left += !o->found;
    }
    w->seen++;
    return left == 0;
}

int ag_alloc_headers_init(void) {
    if (!READY())
        resolve();
    uint64_t c = 0;
    if (!R.usable || !R.memalign || !R.free)
        return -1; /* realloc of a sampled object needs its usable size */
    /* Headers only on glibc's objects: another allocator behind us (jemalloc, tcmalloc linked
     * to the program or preloaded after the agent) has entry points of its own that take our
     * header-offset pointer (sallocx, sdallocx, rallocx, tc_malloc_size, ...) and crash on
     * it. Interposing each of those is endless, and exporting them would make the program
     * believe such an allocator is present; so the live heap (and allocation sampling) is
     * off there. */
    owner_t o[2] = {{.a = (uintptr_t)R.malloc}, {.a = (uintptr_t)gnu_get_libc_version}};
    owners_t w = {o, 2, 0};
    dl_iterate_phdr(find_owners, &w);
    if (!o[0].found || !o[1].found || o[0].base != o[1].base)
        return -1;
    if (getrandom(&c, sizeof c, GRND_NONBLOCK) != (ssize_t)sizeof c)
        c = ag_hook_rand() ^ (uint64_t)(uintptr_t)&c;
    atomic_store(&R.cookie, c | 1ull << 63);
    return 0;
}

/* ---- whose malloc the process runs on (foreign allocators) ----
 *
 * The malloc every object's calls (and ld.so's own, for dlopen and thread-local storage) reach
 * is the first DEFINITION of it in the global scope: decided from the symbol tables
 * (ag_definition_of), not from the address a data relocation against "malloc" resolves to. A
 * non-PIE executable that takes malloc's address (Debian's python3.11) has an undefined malloc
 * with a non-zero value, its canonical PLT entry: every address-of-malloc, ours included,
 * resolves into the executable, whose own calls go on to libc's (the whole process
 * was left unnamed, "the program defines malloc itself"). When the first definition is ours,
 * the allocator behind it is R.malloc, the next one. The address is the fallback when no
 * definition is found (no dynamic symbol table). */
static void *(*const volatile g_global_malloc)(size_t) = malloc;
extern void *ag_malloc_self(size_t)
    __attribute__((AG_COPY_ATTRS(malloc) alias("malloc"), visibility("hidden")));
extern void *__libc_malloc(size_t) __attribute__((weak)); /* glibc's malloc, exported */

/* The malloc behind the global one, ours skipped; NULL if unknown yet. */
static void *global_malloc(int may_resolve) {
    void *g = (void *)ag_definition_of("malloc", (uintptr_t)ag_malloc_self);
    if (!g)
        g = (void *)g_global_malloc;
    if (g == (void *)ag_malloc_self) { /* the fallback: our own address */
        if (!READY() && may_resolve)
            resolve();
        g = READY() ? (void *)R.malloc : dlsym(RTLD_NEXT, "malloc");
    }
    return g;
}

int ag_malloc_global_foreign(void) {
    return !__libc_malloc || global_malloc(0) != (void *)__libc_malloc;
}

int ag_malloc_trusted(char *why, size_t why_size) {
    void *m = global_malloc(1);
    if (!m) {
        snprintf(why, why_size, "no malloc found behind the agent's");
        return 0;
    }
    if (__libc_malloc && m == (void *)__libc_malloc)
        return 1; /* glibc's */
    owner_t o = {.a = (uintptr_t)m};
    owners_t ow = {&o, 1, 0};
    dl_iterate_phdr(find_owners, &ow);
    if (!o.found) {
        snprintf(why, why_size, "malloc (%p) is in no loaded object", m);
        return 0;
    }
    const char *base = strrchr(o.name, '/');
    base = base ? base + 1 : o.name;
    if (o.index == 0 || !*o.name) {
        snprintf(why, why_size, "the program defines malloc itself");
        return 0;
    }
    /* shared objects of allocators made for threads, and the sanitizers' runtimes */
    static const char *const known[] = {"libc.so",     "libjemalloc", "libtcmalloc", "libmimalloc",
                                        "libasan.so",  "libtsan.so",  "liblsan.so",  "libhwasan.so",
                                        "libmsan.so"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strncmp(base, known[i], strlen(known[i])))
            return 1;
    snprintf(why, why_size, "malloc comes from %s, not an allocator known to be thread-safe",
             o.name);
    return 0;
}

static inline uintptr_t header_base(uintptr_t q) { return q - word_at(q - 16); }

enum { A_MALLOC, A_CALLOC, A_MEMALIGN, A_ALIGNED, A_VALLOC, A_PVALLOC };

static void *plain(int kind, size_t n, size_t al) {
    switch (kind) {
    case A_CALLOC:
        return R.calloc(1, n);
    case A_MEMALIGN:
        return R.memalign(al, n);
    case A_ALIGNED:
        return R.aligned_alloc(al, n);
    case A_VALLOC:
        return R.valloc(n);
    case A_PVALLOC:
        return R.pvalloc(n);
    default:
        return R.malloc(n);
    }
}

/* A sampled object with a header, or NULL (no live heap, an alignment the real function
 * would reject or round, out of memory): the caller then serves it plainly. */
static void *header_alloc(int kind, size_t n, size_t al) {
    if (!atomic_load_explicit(&R.cookie, memory_order_relaxed))
        return NULL;
    size_t page = 4096;
    if (kind == A_VALLOC || kind == A_PVALLOC) {
        al = page;
        if (kind == A_PVALLOC) {
            if (n > SIZE_MAX - page)
                return NULL;
            n = (n + page - 1) & ~(page - 1);
        }
    } else if (kind == A_MEMALIGN || kind == A_ALIGNED) {
        if (!al || (al & (al - 1)) || al > ((size_t)1 << 30))
            return NULL;
    } else {
        al = 0;
    }
    size_t h = al > 16 ? al : 16;
    if (n > SIZE_MAX - h)
        return NULL;
    void *b = al > 16 ? R.memalign(al, n + h) : kind == A_CALLOC ? R.calloc(1, n + h) : R.malloc(n + h);
    if (!b)
        return NULL;
    uintptr_t q = (uintptr_t)b + h;
    uint64_t c = atomic_load_explicit(&R.cookie, memory_order_relaxed) ^ q;
    memcpy((void *)(q - 16), &(uint64_t){h}, 8);
    memcpy((void *)(q - 8), &c, 8);
    return (void *)q;
}

/* Frees q, which has a header and has left the table. */
static void header_free(uintptr_t q) {
    uintptr_t b = header_base(q);
    memset((void *)(q - 8), 0, 8); /* no stale cookie in the real allocator's memory */
    R.free((void *)b);
}

/* A fresh countdown for this thread, with the period in force (the ALLOC controller's). */
static void redraw(void) {
    uint64_t base = atomic_load_explicit(&ag_alloc_period, memory_order_relaxed);
    t_period = base ? base : 524288;
    t_left = ag_as_draw((double)t_period, ag_hook_rand());
}

/* Would a record of the largest size fit in ring r holding used bytes? (ring.c's test) */
static int ring_fits(const ag_ring_t *r, uint64_t used) {
    uint64_t size = (uint64_t)r->mask + 1, len = AG_REC_MAX;
    uint64_t off = atomic_load_explicit(&r->head, memory_order_relaxed) & r->mask;
    uint64_t pad = off + len > size ? size - off : 0;
    return used + pad + len <= size;
}

/* The slow path: this allocation takes the countdown below zero, so it is sampled. Its weight
 * comes from the period its countdown was drawn with (t_period, read first): see
 * alloc_sample.h for why that, and only that, is unbiased. */
static __attribute__((noinline)) void *sampled(int kind, size_t size, size_t al) {
    int st = atomic_load_explicit(&ag_hooks_state, memory_order_relaxed);
    if (st < 0 || (st > 0 && !ag_hcfg.alloc_on)) {
        t_left = INT64_MAX; /* off: plain forward from now on */
        return plain(kind, size, al);
    }
    uint64_t period = t_period;
    redraw(); /* at once: an allocation from a signal handler meanwhile meets a sane countdown */
    if (period == 0 || st == 0)
        return plain(kind, size, al); /* the first draw of a thread is not a sample */
    /* Not recorded, and not counted: the agent's own allocations (guard set: the background
     * thread, a hook's slow path) and those while the agent is not running (before its start,
     * after its last chunk), which no chunk covers. */
    if (ag_hook_guard || !atomic_load_explicit(&ag.running, memory_order_relaxed))
        return plain(kind, size, al);
    ag_thread_t *t = ag_hook_enter();
    if (!t) { /* a thread the registry does not know (full, or not found yet): counted */
        atomic_fetch_add_explicit(&ag_events_seen[CM_EV_ALLOC], 1, memory_order_relaxed);
        ag_drop_count(CM_EV_ALLOC, CM_DROP_THREAD_LIMIT, 1);
        return plain(kind, size, al);
    }
    /* Ring pressure: kept with probability keep, which the ring fixes before the toss. */
    uint64_t used = atomic_load_explicit(&t->ring.head, memory_order_relaxed) -
                    atomic_load_explicit(&t->ring.tail, memory_order_relaxed);
    double keep = ag_as_keep(used, (uint64_t)t->ring.mask + 1);
    if (keep < 1 && (double)(ag_hook_rand() >> 11) * (1.0 / 9007199254740992.0) >= keep) {
        atomic_fetch_add_explicit(&ag_events_seen[CM_EV_ALLOC], 1, memory_order_relaxed);
        ag_drop_count(CM_EV_ALLOC, CM_DROP_SUBSAMPLED, 1);
        ag_hook_leave();
        return plain(kind, size, al);
    }
    ag_event_t ev = {.type = CM_EV_ALLOC, .size = size};
    ag_as_weight(size, (double)period, keep, &ev.weight, &ev.count);
    if (keep < 1)
        ev.flags = CM_SF_SUBSAMPLED;
    /* Ring full all the same (the background thread far behind a long burst): the sample goes
     * to the per-stack sums of agg.c, emitted as an aggregate ALLOC row at the chunk (no time,
     * thread or span context). Dropping it would lose its weight, all from the burst's site: a
     * 64 KiB period lost 9.5% of a 4 KiB site's bytes that way.
     * Its object is served without a header: it is in the ALLOC profile, not in the in-use
     * one. The test is ag_ring_reserve's (a record does not wrap: the end may be padding). */
    if (!ring_fits(&t->ring, used)) {
        uintptr_t pcs[AG_SPILL_DEPTH];
        uint32_t n = ag_hook_unwind(t, pcs, AG_SPILL_DEPTH);
        atomic_fetch_add_explicit(&ag_events_seen[CM_EV_ALLOC], 1, memory_order_relaxed);
        if (!n)
            ag_drop_count(CM_EV_ALLOC, CM_DROP_UNWIND_FAILED, 1);
        else /* a full table counts DROP_DICT_FULL */
            ag_agg_add_sub(CM_EV_ALLOC, 0, 0, pcs, n, ev.weight, size, ev.count, 1);
        ag_hook_leave();
        return plain(kind, size, al);
    }
    uint64_t rid = 0;
    void *p = header_alloc(kind, size, al);
    if (p && !(rid = ag_heap_insert((uintptr_t)p, ev.weight, ev.count))) {
        header_free((uintptr_t)p); /* table full (counted): sampled, but not tracked */
        p = NULL;
    }
    if (!p && !(p = plain(kind, size, al))) {
        ag_hook_leave();
        return NULL;
    }
    ev.address = (uintptr_t)p;
    ev.io_kind = (uint32_t)rid; /* read (and cleared) by ag_hooks_bg_add */
    ev.fd_kind = (uint32_t)(rid >> 32);
    /* A sample dropped here (ring full after all: a CPU sample took the room meanwhile;
     * counted as DROP_RING_FULL) is lost with its weight. Handing its weight to the thread's
     * next kept sample would keep the ALLOC total but give it to whatever call site comes
     * next: one dropped 16-byte sample (count ~P/16) made a 1 MiB site's count 260x too high
     * in test alloc_sites_ctl. Drops are not spread evenly over call sites (a burst of one
     * site's samples fills the ring: issue 19), which is why samples are thinned as the ring
     * fills and summed per stack when it is full (above). A dropped sample's object stays in
     * the table (it has a header) without a stack: the in-use profile leaves it out. */
    ag_hook_record(t, &ev);
    ag_hook_leave();
    return p;
}

/* Allocation of n bytes of the given kind: the fast path is one TLS subtraction and a branch. */
#define ALLOC(kind, n, al, fast)                                                                   \
    (AG_UNLIKELY((t_left -= (int64_t)(n)) < 0) ? AG_NO_TAIL(sampled((kind), (n), (al))) : (fast))

/* ---- the C interface ---- */

AG_EXPORT AG_HOT AG_NO_TSAN void *malloc(size_t n) {
    if (!READY()) {
        resolve();
        if (!R.malloc)
            return arena_alloc(n, 16);
    }
    return ALLOC(A_MALLOC, n, 0, R.malloc(n));
}

/* Does q need more than the real call? A q from the bootstrap arena, a q with a header (or that
 * may have one: page-aligned), or a call before the real functions are known. NULL passes: the
 * real free and malloc_usable_size take it. Inline on the hot paths of free and
 * malloc_usable_size, which are then a few loads, compares and a tail jump: no frame, no TLS
 * (every other case is a tail call to a noinline function, so the compiler needs no prologue
 * on the way through; redis calls malloc_usable_size twice per allocation). */
static inline int alloc_slow(uintptr_t q) {
    if (AG_UNLIKELY(q - (uintptr_t)g_arena < sizeof g_arena || !READY()))
        return 1;
    uint64_t c = atomic_load_explicit(&R.cookie, memory_order_relaxed);
    return c && q && (AG_UNLIKELY(!(q & 4095)) || AG_UNLIKELY(word_at(q - 8) == (c ^ q)));
}

/* "free.slow": named as free in stacks (symbols.c), as GCC's "free.cold" would be */
static void free_slow(void *p) __asm__("free.slow");
static __attribute__((noinline)) void free_slow(void *p) {
    uintptr_t a = (uintptr_t)p;
    if (!p || in_arena(p))
        return;
    if (!READY())
        resolve();
    if (header_candidate(a) && ag_heap_take(a))
        header_free(a);
    else
        R.free(p); /* no header, or the cookie matched by chance (not a glibc pointer) */
}

AG_EXPORT AG_HOT AG_NO_TSAN void free(void *p) {
    if (AG_UNLIKELY(alloc_slow((uintptr_t)p)))
        return free_slow(p);
    R.free(p);
}

AG_EXPORT AG_HOT AG_NO_TSAN void *calloc(size_t a, size_t b) {
    size_t n;
    if (__builtin_mul_overflow(a, b, &n)) {
        if (!READY())
            resolve();
        return R.calloc ? R.calloc(a, b) : NULL; /* its own ENOMEM */
    }
    if (!READY()) {
        resolve();
        if (!R.calloc)
            return arena_alloc(n, 16); /* static: already zero */
    }
    return ALLOC(A_CALLOC, n, 0, R.calloc(a, b));
}

static __attribute__((noinline)) void *realloc_slow(void *old, size_t n, int hdr) {
    if (n == 0) { /* glibc: realloc(p, 0) frees p and returns NULL */
        free(old);
        return NULL;
    }
    if (hdr)
        t_left -= (int64_t)n;
    void *p = t_left < 0 ? sampled(A_MALLOC, n, 0) : R.malloc(n);
    if (!p)
        return NULL; /* old is untouched */
    uintptr_t b = hdr ? header_base((uintptr_t)old) : (uintptr_t)old;
    size_t have = R.usable((void *)b) - ((uintptr_t)old - b);
    memcpy(p, old, have < n ? have : n);
    free(old);
    return p;
}

AG_EXPORT AG_HOT AG_NO_TSAN void *realloc(void *old, size_t n) {
    if (!READY())
        resolve();
    if (AG_UNLIKELY(old && in_arena(old))) {
        void *p = malloc(n);
        if (p) {
            size_t o = arena_size(old);
            memcpy(p, old, o < n ? o : n);
        }
        return p;
    }
    if (!old)
        return malloc(n);
    int hdr = has_header((uintptr_t)old);
    if (AG_UNLIKELY(hdr) || AG_UNLIKELY((t_left -= (int64_t)n) < 0 && R.usable))
        return AG_NO_TAIL(realloc_slow(old, n, hdr));
    return R.realloc(old, n);
}

AG_EXPORT AG_HOT AG_NO_TSAN void *reallocarray(void *old, size_t a, size_t b) {
    size_t n;
    if (__builtin_mul_overflow(a, b, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(old, n);
}

static size_t usable_slow(void *p) __asm__("malloc_usable_size.slow");
static __attribute__((noinline)) size_t usable_slow(void *p) {
    if (!p)
        return 0;
    if (in_arena(p))
        return arena_size(p);
    if (!READY())
        resolve();
    if (!R.usable)
        return 0;
    uintptr_t q = (uintptr_t)p;
    if (AG_UNLIKELY(has_header(q))) {
        uintptr_t b = header_base(q);
        return R.usable((void *)b) - (q - b);
    }
    return R.usable(p);
}

AG_EXPORT AG_HOT AG_NO_TSAN size_t malloc_usable_size(void *p) {
    if (AG_UNLIKELY(!p || alloc_slow((uintptr_t)p) || !R.usable))
        return usable_slow(p); /* NULL too: not every allocator's takes it */
    return R.usable(p);
}

static int pow2_align(size_t al) { return al >= sizeof(void *) && !(al & (al - 1)); }

AG_EXPORT AG_HOT AG_NO_TSAN int posix_memalign(void **out, size_t al, size_t n) {
    if (!READY()) {
        resolve();
        if (!R.posix_memalign) {
            *out = arena_alloc(n, al);
            return *out ? 0 : ENOMEM;
        }
    }
    if (!pow2_align(al))
        return R.posix_memalign(out, al, n); /* its own EINVAL */
    if (AG_UNLIKELY((t_left -= (int64_t)n) < 0)) {
        int e = errno;
        void *p = sampled(A_MEMALIGN, n, al);
        errno = e;
        if (!p)
            return ENOMEM;
        *out = p;
        return 0;
    }
    return R.posix_memalign(out, al, n);
}

AG_EXPORT AG_HOT AG_NO_TSAN void *aligned_alloc(size_t al, size_t n) {
    if (!READY())
        resolve();
    return ALLOC(A_ALIGNED, n, al, R.aligned_alloc(al, n));
}

AG_EXPORT AG_HOT AG_NO_TSAN void *memalign(size_t al, size_t n) {
    if (!READY()) {
        resolve();
        if (!R.memalign)
            return arena_alloc(n, al);
    }
    return ALLOC(A_MEMALIGN, n, al, R.memalign(al, n));
}

AG_EXPORT AG_HOT AG_NO_TSAN void *valloc(size_t n) {
    if (!READY())
        resolve();
    return ALLOC(A_VALLOC, n, 0, R.valloc(n));
}

AG_EXPORT AG_HOT AG_NO_TSAN void *pvalloc(size_t n) {
    if (!READY())
        resolve();
    return ALLOC(A_PVALLOC, n, 0, R.pvalloc(n));
}

/* ---- C++: the real operator is called only when malloc fails (new_handler loop, throw) ---- */

static inline void *cxx_new(size_t n, int array) {
    if (!READY())
        resolve();
    size_t m = n ? n : 1;
    void *p = ALLOC(A_MALLOC, m, 0, R.malloc(m));
    if (AG_UNLIKELY(!p)) {
        resolve_cxx();
        new_fn f = array ? R.znam : R.znwm;
        if (!f)
            return NULL;
        return f(n); /* throws std::bad_alloc or returns after the new_handler helped */
    }
    return p;
}

static inline void *cxx_new_nt(size_t n, const void *tag, int array) {
    if (!READY())
        resolve();
    size_t m = n ? n : 1;
    void *p = ALLOC(A_MALLOC, m, 0, R.malloc(m));
    if (AG_UNLIKELY(!p)) {
        resolve_cxx();
        new_nt_fn f = array ? R.znam_nt : R.znwm_nt;
        return f ? f(n, tag) : NULL;
    }
    return p;
}

static inline void *cxx_new_al(size_t n, size_t al, const void *tag, int array) {
    if (!READY())
        resolve();
    void *p = NULL;
    size_t m = n ? n : 1, a = al < sizeof(void *) ? sizeof(void *) : al;
    if (AG_UNLIKELY((t_left -= (int64_t)m) < 0))
        p = sampled(A_MEMALIGN, m, a);
    else if (R.posix_memalign(&p, a, m) != 0)
        p = NULL;
    if (AG_UNLIKELY(!p)) {
        resolve_cxx();
        if (tag) {
            new_al_nt_fn f = array ? R.znam_al_nt : R.znwm_al_nt;
            return f ? f(n, al, tag) : NULL;
        }
        new_al_fn f = array ? R.znam_al : R.znwm_al;
        return f ? f(n, al) : NULL;
    }
    return p;
}

AG_EXPORT AG_HOT AG_NO_TSAN void *_Znwm(size_t n) { return cxx_new(n, 0); }
AG_EXPORT AG_HOT AG_NO_TSAN void *_Znam(size_t n) { return cxx_new(n, 1); }
AG_EXPORT AG_HOT AG_NO_TSAN void *_ZnwmRKSt9nothrow_t(size_t n, const void *t) {
    return cxx_new_nt(n, t, 0);
}
AG_EXPORT AG_HOT AG_NO_TSAN void *_ZnamRKSt9nothrow_t(size_t n, const void *t) {
    return cxx_new_nt(n, t, 1);
}
AG_EXPORT AG_HOT AG_NO_TSAN void *_ZnwmSt11align_val_t(size_t n, size_t al) {
    return cxx_new_al(n, al, NULL, 0);
}
AG_EXPORT AG_HOT AG_NO_TSAN void *_ZnamSt11align_val_t(size_t n, size_t al) {
    return cxx_new_al(n, al, NULL, 1);
}
AG_EXPORT AG_HOT AG_NO_TSAN void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t al,
                                                                     const void *t) {
    return cxx_new_al(n, al, t, 0);
}
AG_EXPORT AG_HOT AG_NO_TSAN void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t al,
                                                                     const void *t) {
    return cxx_new_al(n, al, t, 1);
}

AG_EXPORT AG_HOT AG_NO_TSAN void _ZdlPv(void *p) { free(p); }
AG_EXPORT AG_HOT AG_NO_TSAN void _ZdaPv(void *p) { free(p); }
AG_EXPORT AG_HOT AG_NO_TSAN void _ZdlPvm(void *p, size_t n) { (void)n; free(p); }
AG_EXPORT AG_HOT AG_NO_TSAN void _ZdaPvm(void *p, size_t n) { (void)n; free(p); }
AG_EXPORT AG_HOT AG_NO_TSAN void _ZdlPvRKSt9nothrow_t(void *p, const void *t) { (void)t; free(p); }
AG_EXPORT AG_HOT AG_NO_TSAN void _ZdaPvRKSt9nothrow_t(void *p, const void *t) { (void)t; free(p); }
AG_EXPORT AG_HOT AG_NO_TSAN void _ZdlPvSt11align_val_t(void *p, size_t al) { (void)al; free(p); }
AG_EXPORT AG_HOT AG_NO_TSAN void _ZdaPvSt11align_val_t(void *p, size_t al) { (void)al; free(p); }
AG_EXPORT AG_HOT AG_NO_TSAN void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t al) {
    (void)n, (void)al;
    free(p);
}
AG_EXPORT AG_HOT AG_NO_TSAN void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t al) {
    (void)n, (void)al;
    free(p);
}
AG_EXPORT AG_HOT AG_NO_TSAN void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al,
                                                                     const void *t) {
    (void)al, (void)t;
    free(p);
}
AG_EXPORT AG_HOT AG_NO_TSAN void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al,
                                                                     const void *t) {
    (void)al, (void)t;
    free(p);
}

/* ---- allocation sampling off: the hooks out of the way (bypass.c) ----
 *
 * With sampling off no object has a header, and every hook of the family is a plain forward to
 * R: the program's slots for them are rewritten to R's functions. The C++ operators new go to
 * the real ones (theirs call malloc, as ours do), the deletes to free (what ours do; the size and
 * alignment arguments are ignored by both). A name whose real function is unknown is left to
 * its hook. Constructor only (hooks.c), after the family was found off. */
struct ag_bypass_stats ag_alloc_bypass_stats;

void ag_alloc_bypass(void) {
    if (!READY())
        resolve();
    resolve_cxx();
    if (!R.malloc || !R.free)
        return;
    static const char *const deletes[] = {
        "_ZdlPv", "_ZdaPv", "_ZdlPvm", "_ZdaPvm", "_ZdlPvRKSt9nothrow_t", "_ZdaPvRKSt9nothrow_t",
        "_ZdlPvSt11align_val_t", "_ZdaPvSt11align_val_t", "_ZdlPvmSt11align_val_t",
        "_ZdaPvmSt11align_val_t", "_ZdlPvSt11align_val_tRKSt9nothrow_t",
        "_ZdaPvSt11align_val_tRKSt9nothrow_t"};
    const ag_bypass_t named[] = {
        {"malloc", (uintptr_t)R.malloc},
        {"free", (uintptr_t)R.free},
        {"calloc", (uintptr_t)R.calloc},
        {"realloc", (uintptr_t)R.realloc},
        {"reallocarray", (uintptr_t)R.reallocarray},
        {"malloc_usable_size", (uintptr_t)R.usable},
        {"posix_memalign", (uintptr_t)R.posix_memalign},
        {"aligned_alloc", (uintptr_t)R.aligned_alloc},
        {"memalign", (uintptr_t)R.memalign},
        {"valloc", (uintptr_t)R.valloc},
        {"pvalloc", (uintptr_t)R.pvalloc},
        {"_Znwm", (uintptr_t)R.znwm},
        {"_Znam", (uintptr_t)R.znam},
        {"_ZnwmRKSt9nothrow_t", (uintptr_t)R.znwm_nt},
        {"_ZnamRKSt9nothrow_t", (uintptr_t)R.znam_nt},
        {"_ZnwmSt11align_val_t", (uintptr_t)R.znwm_al},
        {"_ZnamSt11align_val_t", (uintptr_t)R.znam_al},
        {"_ZnwmSt11align_val_tRKSt9nothrow_t", (uintptr_t)R.znwm_al_nt},
        {"_ZnamSt11align_val_tRKSt9nothrow_t", (uintptr_t)R.znam_al_nt},
    };
    enum { NN = sizeof named / sizeof named[0], ND = sizeof deletes / sizeof deletes[0] };
    ag_bypass_t list[NN + ND];
    size_t n = 0;
    for (size_t i = 0; i < NN; i++)
        if (named[i].real)
            list[n++] = named[i];
    for (size_t i = 0; i < ND; i++)
        list[n++] = (ag_bypass_t){deletes[i], (uintptr_t)R.free};
    ag_bypass_apply(list, n, ag_self_lo, ag_self_hi, &ag_alloc_bypass_stats);
}
