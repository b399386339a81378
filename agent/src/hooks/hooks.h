/* Internal interfaces of issue 4's interposers (allocation, live heap, locks, I/O) and their
 * background-thread side. Included by the hook files and by the bg thread (bgthread.c,
 * chunk.c, cpuacct.c).
 *
 * Contract shared by every hook:
 *   - A hook's fast path touches only thread-local state and relaxed atomics; it never locks
 *     and never allocates. Slow paths (a sampled allocation, a contended lock, a slow I/O call)
 *     run with the thread's reentrancy guard set (ag_hook_enter/leave): anything the agent
 *     calls from there (malloc, pthread_mutex_lock, read...) is a plain forward.
 *   - The agent's own threads set the guard for good (ag_hooks_exclude_self), so the agent's
 *     allocations, locks and I/O are never sampled.
 *   - With FLEETPROF_ENABLED=0 (or a hook family disabled) every hook is a plain forward.
 */
#ifndef AG_HOOKS_H
#define AG_HOOKS_H

#include "builder.h"

#define AG_TLS __thread __attribute__((tls_model("initial-exec")))
#define AG_EXPORT __attribute__((visibility("default")))
/* The fast paths of the hooks a program calls most (the allocator, the data I/O calls, mutex
 * locks, the event-loop waits), side by side in one section: the linker puts .text.hot.* first
 * and together, so that a program whose hot loop goes through several of them (redis-server:
 * ~20 interposed calls per request, between system calls that leave the caches cold) touches a
 * few adjacent cache lines on one page, not a line on each of several pages of ours. */
#define AG_HOT __attribute__((section(".text.hot.fleetprof")))
#define AG_LIKELY(x) __builtin_expect(!!(x), 1)
#define AG_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* A slow-path call an interposer must not tail-call: the interposer's own frame stays on the
 * stack, so the unwinder finds it as the outermost agent frame and names it as the real
 * function (record.c, symbols.c). The fast path's forward may still be a tail call. */
#define AG_NO_TAIL(x)                                                                              \
    ({                                                                                             \
        __typeof__(x) r_ = (x);                                                                    \
        __asm__ volatile("" : "+r"(r_));                                                           \
        r_;                                                                                        \
    })

typedef struct {
    int alloc_on, lock_on, io_on;  /* families enabled (all 0 when the agent is off) */
    int wait_on;                   /* blocking calls marked for the wall sampler (hook_wait.c) */
    double alloc_period;           /* initial mean bytes between allocation samples */
    double alloc_rate;             /* allocation samples/s set point (0: fixed period) */
    int alloc_ctl;                 /* the controller moves the period (no fixed period set) */
    uint32_t heap_entries;         /* live-heap table size (power of two) */
    uint64_t lock_threshold_ns;    /* waits at or above: one LOCK event each */
    uint64_t io_threshold_ns;      /* calls at or above: one IO event each */
    uint64_t io_floor_ns;          /* I/O calls shorter than this are not recorded at all */
    double lock_cap, io_cap;       /* above-threshold events per second before subsampling */
} ag_hooks_cfg_t;

AG_HIDDEN extern ag_hooks_cfg_t ag_hcfg;
/* 0: not decided yet (before the constructor), 1: on, -1: off */
AG_HIDDEN extern _Atomic int ag_hooks_state;
AG_HIDDEN extern AG_TLS int ag_hook_guard; /* > 0: inside a hook slow path or agent thread */

/* hooks.c */
AG_HIDDEN void ag_hooks_init(void);
/* Enters a slow path: returns the calling thread's slot with the guard set, or NULL (guard
 * already set, agent not running, thread unknown); on NULL nothing is to be undone. */
AG_HIDDEN ag_thread_t *ag_hook_enter(void);
AG_HIDDEN void ag_hook_leave(void);
/* Records one event through ag_record_take (which sets t->busy); wakes the bg thread when the
 * ring fills. Returns 0 or -1 (dropped). */
AG_HIDDEN int ag_hook_record(ag_thread_t *t, const ag_event_t *ev);
/* Unwinds the caller of the hook (agent frames removed) into pcs. Returns the depth. */
AG_HIDDEN uint32_t ag_hook_unwind(ag_thread_t *t, uintptr_t *pcs, uint32_t max);
/* 1 if pc lies in libfleetprof's own image. */
AG_HIDDEN int ag_hook_is_agent_pc(uintptr_t pc);
AG_HIDDEN uint64_t ag_hook_clock(void); /* monotonic ns (vDSO) */
/* Cheap interval timing for the I/O hooks: rdtsc when the TSC is invariant and calibrated
 * (ag_tsc_scale != 0: ns = ticks * ag_tsc_scale >> 32), else ag_hook_clock. */
AG_HIDDEN extern _Atomic uint64_t ag_tsc_scale;
/* 1 once the scale was calibrated over >= 2 s: what span durations (spans.c) wait for, as
 * they are compared with the program's own clock within a fraction of a percent */
AG_HIDDEN extern _Atomic int ag_tsc_settled;
AG_HIDDEN extern _Atomic uint64_t ag_io_floor_ticks; /* io_floor_ns in ticks, when calibrated */
static inline uint64_t ag_tsc(void) {
    uint32_t lo, hi;
    __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
    return (uint64_t)hi << 32 | lo;
}
AG_HIDDEN uint64_t ag_hook_rand(void);  /* per-thread xorshift */
/* Flood protection for above-threshold IO events (LOCK samples by wait time, hook_lock.c):
 * returns the weight multiplier in
 * milli-units (1000 = kept as is, > 1000 = kept for the skipped ones too) or 0 (skip; counted
 * as DROP_SUBSAMPLED). */
AG_HIDDEN uint32_t ag_hook_admit(cm_event_type_t type);
AG_HIDDEN void ag_hooks_exclude_self(void);

/* hook_lock.c: ns the lock hooks spent on bookkeeping (see its head), and the LOCK records
 * they wrote (their cost is in ag_lock_cost_ns: cpuacct.c must not charge them as signals) */
AG_HIDDEN extern _Atomic uint64_t ag_lock_cost_ns, ag_lock_records;
/* bg: every 250 ms window (dt seconds): sets the flood sampling period from the last window */
AG_HIDDEN void ag_lock_bg_tick(double dt);
AG_HIDDEN void ag_lock_calibrate(void); /* bg, deferred start work: a contended wait's cost */
AG_HIDDEN void ag_lock_bg_chunk(void); /* bg: DROP_SUBSAMPLED of LOCK up to date */

/* hook_alloc.c */
AG_HIDDEN extern _Atomic uint64_t ag_alloc_period; /* bytes, published by the bg thread */

/* A blocking call (I/O, a contended lock, a condition wait) in progress, for the wall sampler
 * (wall.c: wall_from_blocked walks the thread's stack from the hook's frame instead of
 * signalling it). Outermost call only (a handler's nested call leaves the marks alone). Cost:
 * a TLS load and four stores. */
static inline __attribute__((always_inline)) uintptr_t ag_here(void) {
#if defined(__x86_64__)
    uintptr_t pc;
    __asm__ volatile("lea 0(%%rip), %0" : "=r"(pc));
    return pc;
#else
    return 0;
#endif
}
static inline __attribute__((always_inline)) ag_thread_t *ag_blk_begin(uintptr_t fp,
                                                                       uintptr_t real) {
    ag_thread_t *t = ag_t_self;
    if (!t)
        return NULL;
    /* off the slot's stack: a coroutine, or a raw clone() thread on another's TLS (no mark;
     * the wall sampler signals instead) */
    if (fp < atomic_load_explicit(&t->stack_lo, memory_order_relaxed) ||
        fp >= atomic_load_explicit(&t->stack_hi, memory_order_relaxed))
        return NULL;
    uint64_t s = atomic_load_explicit(&t->blk_seq, memory_order_relaxed);
    if (s & 1)
        return NULL;
    atomic_store_explicit(&t->blk_fp, fp, memory_order_relaxed);
    /* the hook's return address: a walker finding another word there knows the frame is gone
     * (the thread left the call by siglongjmp without unmarking) */
    atomic_store_explicit(&t->blk_ret, ((const uintptr_t *)fp)[1], memory_order_relaxed);
    atomic_store_explicit(&t->blk_pc, real, memory_order_relaxed);
    atomic_store_explicit(&t->blk_hook, ag_here(), memory_order_relaxed);
    atomic_store_explicit(&t->blk_seq, s + 1, memory_order_release);
    return t;
}
static inline __attribute__((always_inline)) void ag_blk_end(ag_thread_t *t) {
    if (t)
        atomic_store_explicit(&t->blk_seq,
                              atomic_load_explicit(&t->blk_seq, memory_order_relaxed) + 1,
                              memory_order_release);
}
#define AG_BLK_BEGIN(real) ag_blk_begin((uintptr_t)__builtin_frame_address(0), (uintptr_t)(real))

/* hook_alloc.c: sampled objects get headers from now on (after ag_heap_init); -1 if the
 * real allocator lacks what they need (the live heap is then off) */
AG_HIDDEN int ag_alloc_headers_init(void);
/* Allocation sampling off: the program's calls to the family go to the allocator directly
 * (bypass.c); the constructor's, once. What it rewrote: */
AG_HIDDEN void ag_alloc_bypass(void);
AG_HIDDEN extern struct ag_bypass_stats ag_alloc_bypass_stats;
/* hook_alloc.c, issue 13 (foreign allocators). Is the allocator behind the global malloc
 * (behind ours, when it is ours) another than glibc's? The constructor's test: address
 * compares and at most one dlsym. */
AG_HIDDEN int ag_malloc_global_foreign(void);
/* Is the allocator behind the global malloc one a second thread may call (glibc's, a known
 * thread-safe allocator library, a sanitizer's runtime)? If not, 0 and why. bg thread, inside
 * the loader gate (dl_iterate_phdr). */
AG_HIDDEN int ag_malloc_trusted(char *why, size_t why_size);

/* heap.c: live-heap table */
AG_HIDDEN int ag_heap_init(uint32_t entries);
/* hook: inserts ptr (sampled); returns the record id (> 0) or 0 if the table is full. */
AG_HIDDEN uint64_t ag_heap_insert(uintptr_t ptr, uint64_t weight, uint64_t count);
/* hook: is ptr in the table? / remove ptr, 1 if it was there (no filter check: see heap.c) */
AG_HIDDEN int ag_heap_has(uintptr_t ptr);
AG_HIDDEN int ag_heap_take(uintptr_t ptr);
/* Counting filter over sampled addresses (NULL while the live heap is off): the free of a
 * page-aligned pointer probes the table only for pointers it may hold -- inline: one
 * multiply, one load of a 32 KiB array and a few ALU ops.
 * Layout (a blocked counting Bloom filter, k = 2): 2^AG_HEAP_FILTER_WORDS words of 16 4-bit
 * counters; a pointer's two counters (distinct) lie in one word, chosen by hash bits the table
 * does not use. A word is only changed by CAS (heap.c), so it always holds exact counts: no
 * false negatives. A counter that reaches 15 sticks (false positives only). */
#define AG_HEAP_FILTER_WORDS 12
AG_HIDDEN extern _Atomic uint64_t *ag_heap_filter;
static inline uint64_t ag_heap_hash(uintptr_t p) {
    uint64_t x = (uint64_t)p * 0x9e3779b97f4a7c15ull;
    return x ^ (x >> 29);
}
/* The word index of hash h; *s1, *s2: the bit offsets of the pointer's two counters (distinct
 * multiples of 4: s2 = s1 ^ a non-zero multiple of 4). */
static inline uint32_t ag_heap_fpos(uint64_t h, uint32_t *s1, uint32_t *s2) {
    *s1 = (uint32_t)(h >> 34) & 60;
    *s2 = *s1 ^ (((uint32_t)(h >> 38) & 60) | 4);
    return (uint32_t)(h >> (64 - AG_HEAP_FILTER_WORDS));
}
static inline int ag_heap_maybe(uintptr_t p) {
    _Atomic uint64_t *f = ag_heap_filter;
    if (!f)
        return 0;
    uint32_t s1, s2;
    uint64_t w = atomic_load_explicit(&f[ag_heap_fpos(ag_heap_hash(p), &s1, &s2)],
                                      memory_order_relaxed);
    return (w >> s1 & 15) && (w >> s2 & 15); /* both counters non-zero */
}
AG_HIDDEN void ag_heap_populate(void); /* bg, at start */
AG_HIDDEN uint32_t ag_heap_live(void);         /* entries in the table (tests, reports) */
/* bg */
AG_HIDDEN void ag_heap_bg_note(const ag_rec_t *r, uint64_t rid, pid_t tid);
AG_HIDDEN void ag_heap_bg_emit(ag_builder_t *b, uint64_t now_real);

/* agg.c: sub-threshold aggregates (LOCK, IO) */
AG_HIDDEN int ag_agg_init(void);
AG_HIDDEN void ag_agg_add(cm_event_type_t type, uint32_t io_kind, uint32_t fd_kind,
                          const uintptr_t *pcs, uint32_t depth, uint64_t ns, uint64_t bytes);
/* The same for an estimate standing for count_milli / 1000 events (a subsampled wait). */
AG_HIDDEN void ag_agg_add_n(cm_event_type_t type, uint32_t io_kind, uint32_t fd_kind,
                            const uintptr_t *pcs, uint32_t depth, uint64_t ns, uint64_t bytes,
                            uint64_t count_milli);
/* The same; sampled != 0: the estimate comes from sampling (the row is flagged SUBSAMPLED). */
AG_HIDDEN void ag_agg_add_sub(cm_event_type_t type, uint32_t io_kind, uint32_t fd_kind,
                              const uintptr_t *pcs, uint32_t depth, uint64_t ns, uint64_t bytes,
                              uint64_t count_milli, int sampled);
AG_HIDDEN int ag_agg_any(void); /* any slot claimed (bg) */
AG_HIDDEN void ag_agg_bg_emit(ag_builder_t *b, uint64_t now_real);
AG_HIDDEN void ag_agg_after_fork_child(void);

/* fdinfo.c: fd kind and path/peer cache (slow path only) */
AG_HIDDEN uint32_t ag_fd_kind(int fd);
/* Describes fd (path or peer) into a small string id for the bg thread; returns the id. */
AG_HIDDEN uint32_t ag_fd_describe(int fd, uint32_t *kind);
AG_HIDDEN void ag_fd_forget(int fd); /* close/dup2 */
/* bg: the text of a description id, or NULL when it was overwritten since. */
AG_HIDDEN const char *ag_fd_text(uint32_t id, char *buf, size_t size);

/* The real function behind an interposer, real_NAME: declared (AG_REAL_DECLARE) and looked up
 * (AG_REAL_LOOKUP) by the interposing file's constructor, since an application's signal handler
 * may call it and dlsym is not async-signal-safe (it takes the loader's lock). AG_RESOLVE binds
 * var to it; a call before the constructor (another library's) looks it up itself. Users
 * include <dlfcn.h>. */
#define AG_REAL_DECLARE(name) static __typeof__(name) *real_##name;
#define AG_REAL_LOOKUP(name) real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name);
#define AG_RESOLVE(var, name)                                                                      \
    if (AG_UNLIKELY(!real_##name))                                                                 \
        AG_REAL_LOOKUP(name)                                                                       \
    __typeof__(name) *var = real_##name;

/* fdnb.c: which descriptors are non-blocking (calls on them are not timed; see its head) */
#define AG_NB_FDS 65536 /* fds below: cached; above: always timed */
#define AG_NB_CHECK 16  /* a call on a NONBLOCK fd is still timed with probability 1/this */
enum { AG_NB_UNKNOWN = 0, AG_NB_BLOCKING = 1, AG_NB_NONBLOCK = 2 };
AG_HIDDEN extern _Atomic uint8_t ag_nb_map[AG_NB_FDS]; /* state | generation << 2 */
AG_HIDDEN extern AG_TLS int32_t ag_nb_left;            /* calls to the next check */
/* F_GETFL + fstat for an UNKNOWN fd: its state now (UNKNOWN if it could not be told). */
AG_HIDDEN uint32_t ag_fd_nb_learn(int fd);
/* The countdown ran out: AG_NB_CHECK (time this call, weight AG_NB_CHECK) or 0 (skip). */
AG_HIDDEN uint32_t ag_fd_nb_due(void);
AG_HIDDEN void ag_fd_nb_set(int fd, int nonblocking); /* a hook made fd with known flags */
AG_HIDDEN void ag_fd_nb_forget(int fd);               /* UNKNOWN: close, dup2 */
/* A check on a NONBLOCK fd took at least the floor: ask the kernel again (rate-limited per
 * thread; errno preserved) */
AG_HIDDEN void ag_fd_nb_recheck(int fd);
AG_HIDDEN void ag_fd_nb_forget_range(unsigned lo, unsigned hi); /* close_range, closefrom */
/* fcntl(F_SETFL)/ioctl(FIONBIO) set (1) or cleared (0) O_NONBLOCK on fd's description */
AG_HIDDEN void ag_fd_nb_setfl(int fd, int nonblocking);
/* The I/O hooks' question (ag_fd_nb_weight): 0 = do not time this call (fd non-blocking, not
 * drawn for a check); else the weight of the timed call (1, or AG_NB_CHECK for a check).
 * In two halves, so that hooks whose fast path must call nothing (hook_io.c's data calls:
 * with no call on the way through, the compiler gives them no frame) can ask the first alone.
 * Pass: 1 if the call is not timed (fd NONBLOCK and the countdown not run out: a byte load and
 * a TLS decrement). Else ag_fd_nb_weight_after(fd) says its weight, or 0 after all (fd unknown
 * and learnt non-blocking, or made non-blocking meanwhile, and not drawn). */
static inline int ag_fd_nb_pass(int fd) {
    return AG_LIKELY((unsigned)fd < AG_NB_FDS) &&
           (atomic_load_explicit(&ag_nb_map[fd], memory_order_relaxed) & 3u) == AG_NB_NONBLOCK &&
           AG_LIKELY(--ag_nb_left > 0);
}
AG_HIDDEN uint32_t ag_fd_nb_weight_after(int fd);
static inline uint32_t ag_fd_nb_weight(int fd) {
    return ag_fd_nb_pass(fd) ? 0 : ag_fd_nb_weight_after(fd);
}

/* bg side (hooks.c), called from bgthread.c under its work lock */
AG_HIDDEN void ag_hooks_bg_add(ag_builder_t *b, const ag_thread_t *t, pid_t tid,
                               const ag_rec_t *r);
AG_HIDDEN void ag_hooks_bg_tick(uint64_t now_mono);
AG_HIDDEN void ag_hooks_bg_chunk(ag_builder_t *b, uint64_t now_real);
/* Appends the sampling entries of the hook families; returns how many (<= 3). */
AG_HIDDEN uint32_t ag_hooks_sampling(ag_builder_t *b, cm_sampling_t *out, const uint64_t *seen0);

/* builder.c extension: adds r with a target string (IO path/peer), NULL for none. */
AG_HIDDEN void ag_builder_add_target(ag_builder_t *b, const ag_thread_t *t, pid_t tid,
                                     const ag_rec_t *r, const char *target);

#endif
