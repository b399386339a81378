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
 * (per thread), so a controller move never biases a pending sample.
 *
 * Fast path: one TLS subtraction and one branch after the real call. Slow path (a sample):
 * guard set, unwind through the generic record path, insert into the live-heap table.
 *
 * Bootstrap: the real functions are found with dlsym(RTLD_NEXT) on first use; dlsym itself may
 * call malloc/calloc, which are then served from a small static bump arena (free() of an arena
 * pointer is a no-op, recognised by its address).
 *
 * Contract: async-signal-safe as far as the real allocator is (an application's signal handler
 * that allocates reaches the slow path with no lock to take: the record path is handler-safe).
 * Never locks, never allocates for its own bookkeeping.
 */
#include "hooks.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

_Atomic uint64_t ag_alloc_period = 524288;

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
typedef void *(*new_fn)(size_t);
typedef void *(*new_nt_fn)(size_t, const void *);
typedef void *(*new_al_fn)(size_t, size_t);
typedef void *(*new_al_nt_fn)(size_t, size_t, const void *);

static struct {
    malloc_fn malloc;
    free_fn free;
    calloc_fn calloc;
    realloc_fn realloc;
    posix_memalign_fn posix_memalign;
    memalign_fn memalign, aligned_alloc;
    malloc_fn valloc, pvalloc;
    reallocarray_fn reallocarray;
    new_fn znwm, znam;
    new_nt_fn znwm_nt, znam_nt;
    new_al_fn znwm_al, znam_al;
    new_al_nt_fn znwm_al_nt, znam_al_nt;
    _Atomic int ready;
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

/* R.free is the last pointer resolve() stores before R.ready: one load says both */
#define READY() AG_LIKELY(atomic_load_explicit(&R.ready, memory_order_relaxed))

/* ---- sampling ---- */

static int64_t draw(uint64_t period) {
    /* -P ln(U), U uniform in (0, 1] */
    double u = ((double)(ag_hook_rand() >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double d = -log(u) * (double)period;
    return d > 4e18 ? (int64_t)4e18 : (int64_t)d + 1;
}

/* The slow path: the countdown went negative during an allocation of size bytes at p. */
static __attribute__((noinline)) void alloc_sample(void *p, size_t size) {
    int st = atomic_load_explicit(&ag_hooks_state, memory_order_relaxed);
    if (st < 0 || (st > 0 && !ag_hcfg.alloc_on)) {
        t_left = INT64_MAX; /* off: plain forward from now on */
        return;
    }
    uint64_t period = t_period;
    int first = period == 0;
    t_period = atomic_load_explicit(&ag_alloc_period, memory_order_relaxed);
    if (!t_period)
        t_period = 524288;
    t_left = draw(t_period);
    if (first || !p || st == 0)
        return; /* the first draw of a thread is not a sample */
    ag_thread_t *t = ag_hook_enter();
    if (!t)
        return;
    /* q = 1 - exp(-s/P); expm1 keeps precision for s << P */
    double q = -expm1(-(double)size / (double)period);
    if (q <= 0)
        q = 1e-12;
    ag_event_t ev = {.type = CM_EV_ALLOC,
                     .weight = (uint64_t)((double)size / q + 0.5),
                     .count = (uint64_t)((double)CM_COUNT_ONE / q + 0.5),
                     .size = size,
                     .address = (uintptr_t)p};
    /* A sample dropped here (ring full: counted as DROP_RING_FULL) is lost with its weight.
     * Handing its weight to the thread's next kept sample would keep the ALLOC total but give
     * it to whatever call site comes next: one dropped 16-byte sample (count ~P/16) made a
     * 1 MiB site's count 260x too high in test alloc_sites_ctl. Drops hit call sites alike, so
     * the header's drop count scales every site the same way. */
    uint64_t rid = ag_heap_insert((uintptr_t)p, ev.weight, ev.count);
    ev.io_kind = (uint32_t)rid; /* read (and cleared) by ag_hooks_bg_add */
    ev.fd_kind = (uint32_t)(rid >> 32);
    if (ag_hook_record(t, &ev) != 0 && rid)
        ag_heap_remove((uintptr_t)p); /* no stack for it: not tracked */
    ag_hook_leave();
}

#define ACCOUNT(p, n)                                                                              \
    do {                                                                                           \
        if (AG_UNLIKELY((t_left -= (int64_t)(n)) < 0))                                             \
            alloc_sample((p), (n));                                                                \
    } while (0)

static inline void on_free(void *p) {
    if (AG_UNLIKELY(ag_heap_maybe((uintptr_t)p)))
        ag_heap_remove((uintptr_t)p);
}

/* ---- the C interface ---- */

AG_EXPORT AG_NO_TSAN void *malloc(size_t n) {
    if (!READY()) {
        resolve();
        if (!R.malloc)
            return arena_alloc(n, 16);
    }
    void *p = R.malloc(n);
    ACCOUNT(p, n);
    return p;
}

AG_EXPORT AG_NO_TSAN void free(void *p) {
    if (AG_UNLIKELY(!p || in_arena(p)))
        return;
    on_free(p);
    if (!READY())
        resolve();
    R.free(p);
}

AG_EXPORT AG_NO_TSAN void *calloc(size_t a, size_t b) {
    if (!READY()) {
        resolve();
        if (!R.calloc) {
            size_t n;
            if (__builtin_mul_overflow(a, b, &n))
                return NULL;
            return arena_alloc(n, 16); /* static: already zero */
        }
    }
    void *p = R.calloc(a, b);
    ACCOUNT(p, a * b);
    return p;
}

AG_EXPORT AG_NO_TSAN void *realloc(void *old, size_t n) {
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
    if (old)
        on_free(old);
    void *p = R.realloc(old, n);
    if (p || n == 0)
        ACCOUNT(p, n);
    return p;
}

AG_EXPORT AG_NO_TSAN void *reallocarray(void *old, size_t a, size_t b) {
    size_t n;
    if (__builtin_mul_overflow(a, b, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    return realloc(old, n);
}

AG_EXPORT AG_NO_TSAN int posix_memalign(void **out, size_t al, size_t n) {
    if (!READY()) {
        resolve();
        if (!R.posix_memalign) {
            *out = arena_alloc(n, al);
            return *out ? 0 : ENOMEM;
        }
    }
    int rc = R.posix_memalign(out, al, n);
    if (rc == 0)
        ACCOUNT(*out, n);
    return rc;
}

AG_EXPORT AG_NO_TSAN void *aligned_alloc(size_t al, size_t n) {
    if (!READY())
        resolve();
    void *p = R.aligned_alloc(al, n);
    ACCOUNT(p, n);
    return p;
}

AG_EXPORT AG_NO_TSAN void *memalign(size_t al, size_t n) {
    if (!READY()) {
        resolve();
        if (!R.memalign)
            return arena_alloc(n, al);
    }
    void *p = R.memalign(al, n);
    ACCOUNT(p, n);
    return p;
}

AG_EXPORT AG_NO_TSAN void *valloc(size_t n) {
    if (!READY())
        resolve();
    void *p = R.valloc(n);
    ACCOUNT(p, n);
    return p;
}

AG_EXPORT AG_NO_TSAN void *pvalloc(size_t n) {
    if (!READY())
        resolve();
    void *p = R.pvalloc(n);
    ACCOUNT(p, n);
    return p;
}

/* ---- C++: the real operator is called only when malloc fails (new_handler loop, throw) ---- */

static inline void *cxx_new(size_t n, int array) {
    if (!READY())
        resolve();
    void *p = R.malloc(n ? n : 1);
    if (AG_UNLIKELY(!p)) {
        resolve_cxx();
        new_fn f = array ? R.znam : R.znwm;
        if (!f)
            return NULL;
        return f(n); /* throws std::bad_alloc or returns after the new_handler helped */
    }
    ACCOUNT(p, n);
    return p;
}

static inline void *cxx_new_nt(size_t n, const void *tag, int array) {
    if (!READY())
        resolve();
    void *p = R.malloc(n ? n : 1);
    if (AG_UNLIKELY(!p)) {
        resolve_cxx();
        new_nt_fn f = array ? R.znam_nt : R.znwm_nt;
        return f ? f(n, tag) : NULL;
    }
    ACCOUNT(p, n);
    return p;
}

static inline void *cxx_new_al(size_t n, size_t al, const void *tag, int array) {
    if (!READY())
        resolve();
    void *p = NULL;
    if (R.posix_memalign(&p, al < sizeof(void *) ? sizeof(void *) : al, n ? n : 1) != 0)
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
    ACCOUNT(p, n);
    return p;
}

AG_EXPORT AG_NO_TSAN void *_Znwm(size_t n) { return cxx_new(n, 0); }
AG_EXPORT AG_NO_TSAN void *_Znam(size_t n) { return cxx_new(n, 1); }
AG_EXPORT AG_NO_TSAN void *_ZnwmRKSt9nothrow_t(size_t n, const void *t) {
    return cxx_new_nt(n, t, 0);
}
AG_EXPORT AG_NO_TSAN void *_ZnamRKSt9nothrow_t(size_t n, const void *t) {
    return cxx_new_nt(n, t, 1);
}
AG_EXPORT AG_NO_TSAN void *_ZnwmSt11align_val_t(size_t n, size_t al) {
    return cxx_new_al(n, al, NULL, 0);
}
AG_EXPORT AG_NO_TSAN void *_ZnamSt11align_val_t(size_t n, size_t al) {
    return cxx_new_al(n, al, NULL, 1);
}
AG_EXPORT AG_NO_TSAN void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const void *t) {
    return cxx_new_al(n, al, t, 0);
}
AG_EXPORT AG_NO_TSAN void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t al, const void *t) {
    return cxx_new_al(n, al, t, 1);
}

AG_EXPORT AG_NO_TSAN void _ZdlPv(void *p) { free(p); }
AG_EXPORT AG_NO_TSAN void _ZdaPv(void *p) { free(p); }
AG_EXPORT AG_NO_TSAN void _ZdlPvm(void *p, size_t n) { (void)n; free(p); }
AG_EXPORT AG_NO_TSAN void _ZdaPvm(void *p, size_t n) { (void)n; free(p); }
AG_EXPORT AG_NO_TSAN void _ZdlPvRKSt9nothrow_t(void *p, const void *t) { (void)t; free(p); }
AG_EXPORT AG_NO_TSAN void _ZdaPvRKSt9nothrow_t(void *p, const void *t) { (void)t; free(p); }
AG_EXPORT AG_NO_TSAN void _ZdlPvSt11align_val_t(void *p, size_t al) { (void)al; free(p); }
AG_EXPORT AG_NO_TSAN void _ZdaPvSt11align_val_t(void *p, size_t al) { (void)al; free(p); }
AG_EXPORT AG_NO_TSAN void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t al) {
    (void)n, (void)al;
    free(p);
}
AG_EXPORT AG_NO_TSAN void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t al) {
    (void)n, (void)al;
    free(p);
}
AG_EXPORT AG_NO_TSAN void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const void *t) {
    (void)al, (void)t;
    free(p);
}
AG_EXPORT AG_NO_TSAN void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t al, const void *t) {
    (void)al, (void)t;
    free(p);
}
