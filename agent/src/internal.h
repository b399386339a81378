/* Internal interfaces of the agent (libfleetprof.so). Nothing here is exported.
 *
 * Module map (one concern per file):
 *   agent.c      constructor/destructor, global state, fork and exit handling, public flush
 *   config.c     environment parsing (one stderr line per invalid value)
 *   thread.c     thread registry: slots, stack bounds, pthread_create wrapper, /proc scan
 *   signal.c     choice of the sampling signal, handler, sigaction/signal interposition
 *   unwind.c     the unwinder: compiled CFI, frame pointers as fallback (async-signal-safe)
 *   pyframes.c   CPython 3.11 frames merged into native stacks (pyframes.h; pyline.c lines)
 *   cfi.c, cfi_table.c  CFI compiler; per-object tables published for the handler (bg)
 *   defer.c      stack copies of samples taken before the first tables or on threads without
 *                stack bounds, unwound later by the bg thread
 *   ring.c       per-thread single-producer/single-consumer record ring
 *   record.c     the generic sample record path: stack + weight + count + attrs + context
 *   context.c    per-thread span context and labels (public API), label interning
 *   controller.c per-event-type rate controller and CPU budget
 *   symbols.c    loaded objects, ELF symbol tables, demangling (background thread only)
 *   hook_exec.c  exec interposers: no signal of ours pending across an exec
 *   dwlib.c      elfutils (libdw, libelf) loaded on the first symbol lookup (background thread)
 *   builder.c    aggregation of records into a cm_chunk_t (background thread only)
 *   sender.c     collector connection, unacked-chunk queue, output files (background only)
 *   bgthread.c   the background thread loop: wall ticks, drain, control, chunks, sending
 *   issue 4 hooks (their own header hooks.h): hooks.c (config, guard, flood cap, bg side),
 *   hook_alloc.c (malloc family, C++ new/delete), heap.c (live-heap table, INUSE rows),
 *   hook_lock.c, hook_io.c, fdinfo.c (fd kind, path/peer), fdnb.c (which fds are
 *   non-blocking: their calls are not timed), agg.c (sub-threshold aggregates).
 *   Their ring records pass through ag_hooks_bg_add (bgthread.c), which strips the hook's own
 *   frames and reads two producer-private fields: an ALLOC record's io_kind/fd_kind carry its
 *   live-heap record id, an IO record's address carries its fd-description id.
 *
 * Threads and signals:
 *   - "handler" code runs in the sampling signal handler on an application thread. It may only
 *     use the thread's own slot, its ring, its TLS context and relaxed atomics.
 *   - "bg" code runs on the agent's background thread only (builder, symbols, sender).
 *   - "app" code runs on application threads outside handlers (registration, context API).
 */
#ifndef AG_INTERNAL_H
#define AG_INTERNAL_H

#include "cm/chunk.h"
#include "cm/file.h"

#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define AG_HIDDEN __attribute__((visibility("hidden")))
/* GCC's copy() attribute gives an alias the attributes of its target (else -Wmissing-attributes);
 * clang does not know it and needs nothing. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 9
#define AG_COPY_ATTRS(fn) copy(fn),
#else
#define AG_COPY_ATTRS(fn)
#endif
/* For libc interposers: a sanitizer runtime may call them (as its "real" function) before it
 * is initialised, so they must not call into it. */
#define AG_NO_TSAN __attribute__((no_sanitize("thread")))

#define AG_MAX_THREADS 1024          /* registry slots; beyond: DROP_THREAD_LIMIT */
#define AG_MAX_DEPTH 128             /* frames per sample; deeper stacks are truncated */
#define AG_RING_SIZE (32u << 10)     /* bytes per thread ring, power of two */
#define AG_DROP_REASONS 15           /* cm_drop_reason_t values + 1 */

/* ---- config.c ---- */
/* FLEETPROF_WALL_HZ's default, read by config.c and by hooks.c (the wait hooks are on while
 * wall sampling is). 100 ms: see config.c. */
#define AG_WALL_HZ 10
#define AG_WALL_HZ_HELP "10 (ticks/s)"

typedef struct {
    int enabled;
    char service[CM_MAX_SERVICE_LEN + 1];
    char version[128];
    char collector[108];       /* sun_path size */
    char output[4096];         /* "" = no files */
    unsigned output_mode;      /* permission bits of chunk files (0600) */
    uint64_t interval_ns;      /* chunk interval */
    double cpu_rate;           /* target CPU samples per second, whole process; 0 = off */
    uint64_t cpu_period_ns;    /* initial/fixed CPU period per thread */
    double wall_hz;            /* wall ticker frequency; 0 = off (AG_WALL_HZ) */
    uint32_t wall_threads;     /* max threads signalled per wall tick */
    double cpu_budget;         /* fraction of process CPU the agent may use (0.01 = 1%) */
    int controller;            /* 0: fixed periods */
    int fork_follow;           /* 1: a fork child profiles itself; 0: it stops (FLEETPROF_FORK) */
    int log_level;
} ag_config_t;

/* Reads the environment into cfg (defaults for anything unset). Invalid values print one
 * stderr line each (variable, value, default used). Never fails. app, constructor only. */
AG_HIDDEN void ag_config_load(ag_config_t *cfg);
AG_HIDDEN uint64_t ag_process_start_ns(void); /* agent.c; bg thread */
/* sysfile.c: reads without stdio or opendir (their FILE and DIR come from the program's
 * malloc); whole small files: cm_read_file (cm/file.h).
 * ag_read_lines / ag_dir_each: cb per line (NUL-terminated, cut at 4 KiB) / per entry name
 * until it returns non-zero; 0 or -errno. */
AG_HIDDEN int ag_read_lines(const char *path, int (*cb)(char *line, void *arg), void *arg);
AG_HIDDEN int ag_dir_each(const char *path, int (*cb)(const char *name, void *arg), void *arg);
/* mutex_layout.c: 0 if the libc is glibc >= 2.17 (version) and a mutex locked and unlocked
 * through lock/unlock shows the private fields hook_lock.c reads; -1 otherwise. */
typedef int (*ag_mutex_fn)(pthread_mutex_t *);
AG_HIDDEN int ag_mutex_layout_check(const char *version, ag_mutex_fn lock, ag_mutex_fn unlock);
AG_HIDDEN const char *ag_libc_version(void); /* gnu_get_libc_version(), NULL if absent */
/* config.c: the one reader of every agent knob (constructors only). */
AG_HIDDEN int ag_env_value(const char *var, char *buf, size_t size);
AG_HIDDEN int ag_env_double(const char *var, double lo, double hi, const char *dflt, double *out);
AG_HIDDEN int ag_env_bool(const char *var, int dflt);
AG_HIDDEN void ag_env_invalid(const char *var, const char *val, const char *why, const char *dflt);
/* Secure-execution mode (AT_SECURE; the first call prints the one line): 1 or 0. ag_getenv is
 * getenv with secure_getenv's semantics, the only way the agent reads a variable. */
AG_HIDDEN int ag_env_secure(void);
AG_HIDDEN const char *ag_getenv(const char *var);

/* ---- ring.c: SPSC byte ring of 8-byte aligned records; the owning thread (or its signal
 * handler, never both at once, see ag_thread_t.busy) produces, the bg thread consumes. ---- */
typedef struct {
    uint8_t *buf;
    uint32_t mask;
    _Atomic uint64_t head; /* producer position (bytes, monotonic) */
    _Atomic uint64_t tail; /* consumer position */
} ag_ring_t;

AG_HIDDEN int ag_ring_init(ag_ring_t *r, uint32_t size);
AG_HIDDEN void ag_ring_destroy(ag_ring_t *r);
/* handler-safe. Returns a pointer to len (multiple of 8) contiguous writable bytes, or NULL if
 * full. Commit with ag_ring_commit(). */
AG_HIDDEN void *ag_ring_reserve(ag_ring_t *r, uint32_t len);
AG_HIDDEN void ag_ring_commit(ag_ring_t *r, uint32_t len);
/* bg. Returns the next record (its first u32 is its length) or NULL; release with
 * ag_ring_release(). */
AG_HIDDEN const void *ag_ring_peek(ag_ring_t *r);
AG_HIDDEN void ag_ring_release(ag_ring_t *r, uint32_t len);

/* ---- thread.c ---- */
enum { AG_TS_FREE = 0, AG_TS_CLAIMED, AG_TS_ACTIVE, AG_TS_EXITED };

typedef struct ag_thread {
    _Atomic int state;
    _Atomic pid_t tid;
    _Atomic uintptr_t stack_lo, stack_hi; /* 0: unknown yet (foreign thread) */
    _Atomic uintptr_t seen_sp;            /* handler: an sp seen while bounds were unknown */
    _Atomic uint64_t cpu_period_ns;       /* period its CPU timer is armed with (weight) */
    _Atomic uint64_t cpu_last_ns;         /* handler: thread CPU at its last CPU sample (0: none) */
    volatile sig_atomic_t busy;           /* a non-handler producer is writing the ring */
    uint32_t handler_n;                   /* handler: samples taken (cost probe cadence) */
    ag_ring_t ring;
    timer_t timer;
    int has_timer;
    int self_registered;                  /* registered by the thread itself (has TLS) */
    uint64_t wall_last_ns;                /* bg: monotonic time of last wall signal */
    _Atomic uint64_t wall_cpu_after;      /* handler: thread CPU ns at the end of a wall sample */
    uint64_t wall_cpu_prev;               /* bg: thread CPU ns at its previous wall tick */
    struct ag_rec *wall_rec;              /* bg: copy of the thread's last wall record */
    struct ag_rec *cpu_rec;               /* bg: copy of its last CPU record since its last
                                             wall tick (len 0: none) */
    uint32_t chunk_index;                 /* bg: thread index in the chunk being built */
    uint64_t chunk_seq;                   /* bg: chunk the index belongs to */
    /* A blocking call in progress (hooks.h: ag_blk_begin/end), for wall samples without a
     * signal (bgthread.c: wall_from_blocked). blk_seq is odd inside the call; the others are
     * written before it turns odd. Its own cache line: written by every hooked blocking call,
     * it shares no line with the fields the bg thread and the handler write. */
    _Alignas(64) _Atomic uint64_t blk_seq;
    _Atomic uintptr_t blk_fp, blk_pc, blk_hook; /* hook's frame, real function, hook pc */
    _Atomic uintptr_t blk_ret;            /* the return address in the hook's frame */
    uintptr_t ctx_addr;                   /* its span context block (context.c), 0: unknown */
    _Atomic int walking;                  /* bg: reading its stack in place; its exit waits */
    /* Unwinds in progress on this thread (handler or hook) and outermost ones completed: the
     * bg thread frees a retired CFI table only once every thread that was inside an unwind
     * when it was unpublished has left it (cfi_table.c). */
    _Atomic uint32_t unw_depth, unw_gen;
    _Atomic int wall_pending;             /* bg sets before a wall signal, handler clears */
    _Atomic int foreign_tls;              /* handler: its TLS is another thread's (raw clone) */
    _Atomic int sig_blocked;              /* it blocks our signal: no timer, no request */
    _Atomic int arming;                   /* bg: arming its timer (seq_cst pair, signal.c) */
    uint64_t blocked_left_ns;             /* its timer's time left when it blocked ours */
    _Atomic int exec_pending;             /* hook_exec.c: in exec; no wall signal may be sent */
    _Atomic int wall_sending;             /* bg: between its exec_pending check and the send */
    void *altstack;                       /* our alternate signal stack (mmap), NULL: none */
} ag_thread_t;

AG_HIDDEN extern ag_thread_t ag_threads[AG_MAX_THREADS];
/* The calling thread's slot once it registered itself (initial-exec TLS: one load). */
AG_HIDDEN extern __thread __attribute__((tls_model("initial-exec"))) ag_thread_t *ag_t_self;

AG_HIDDEN void ag_thread_module_init(void);
/* app: registers the calling thread (stack bounds, ring, CPU timer). Idempotent. */
AG_HIDDEN ag_thread_t *ag_thread_register_self(void);
/* handler-safe: the calling thread's slot or NULL (TLS, else a search by tid). */
AG_HIDDEN ag_thread_t *ag_thread_current(void);
/* bg: registers threads listed in /proc/self/task and not yet known; retires dead ones (after
 * their rings were drained by the caller); resolves stack bounds of foreign threads. */
/* Returns the number of threads without stack bounds; *registered: threads it registered. */
AG_HIDDEN int ag_thread_scan(int *registered);
/* bg: 1 if a thread without stack bounds has a recorded sp (a scan would resolve it). */
AG_HIDDEN int ag_thread_resolvable(void);
/* bg: reaps exited slots whose rings are empty. */
AG_HIDDEN void ag_thread_reap(void);
/* Arms every registered thread's CPU timer with period_ns (0 disarms). bg/app. */
AG_HIDDEN void ag_thread_set_cpu_period(uint64_t period_ns);
/* bg: stops t's CPU timer (a raw clone() thread the handler found sharing another's TLS). */
AG_HIDDEN void ag_thread_disarm(ag_thread_t *t);
/* Stops every timer (exit). */
AG_HIDDEN void ag_thread_stop_all(void);
AG_HIDDEN void ag_thread_stop_all_try(void); /* the same if the registry's lock is free */
/* fork child: forget every slot except the calling thread's; re-arm its timer. */
AG_HIDDEN void ag_thread_after_fork_child(void);
AG_HIDDEN void ag_thread_lock(void);
AG_HIDDEN void ag_thread_unlock(void);
AG_HIDDEN int ag_thread_count(void);
/* Slots in use are all below this index (bg: bounds loops over the registry). */
AG_HIDDEN uint32_t ag_thread_hw(void);
/* CPU time of thread tid of this process (ns), 0 on error. */
AG_HIDDEN uint64_t ag_thread_cpu_ns(pid_t tid);
/* Creates a thread that is never sampled (the agent's own), bypassing the wrapper. */
#include <pthread.h>
AG_HIDDEN int ag_thread_create_raw(pthread_t *th, void *(*fn)(void *), void *arg);
/* Is ss_sp the calling thread's alternate signal stack of ours (thread.c)? */
AG_HIDDEN int ag_thread_altstack_is_ours(const void *ss_sp);

/* ---- signal.c ---- */
/* The sigev_value of a CPU timer: "FPCP" in the low 32 bits, the thread's slot above; a wall
 * request's si_value: AG_WALL_MAGIC in the top 16 bits, bit 0 on-CPU, bits 1-10 the slot,
 * bits 11-47 the weight in µs. The slot tells the handler whose signal it is without trusting
 * TLS (raw clone() threads share their parent's). */
#define AG_TAG_CPU32 0x46504350u
#define AG_CPU_VALUE(slot) ((void *)((uintptr_t)(slot) << 32 | AG_TAG_CPU32))
#define AG_WALL_MAGIC 0x4657ull
#define AG_WALL_SLOT_BITS 10 /* AG_MAX_THREADS = 1 << 10 */
AG_HIDDEN extern int ag_sig;                     /* sampling signal number, 0 if none */
/* Picks a free real-time signal and installs the handler. Returns 0 or -EBUSY. */
AG_HIDDEN int ag_signal_init(void);
/* bg: sends a wall sample request to thread tid. weight_ns: wall time it stands for. */
AG_HIDDEN int ag_signal_wall(pid_t tid, uint32_t slot, uint64_t weight_ns, int on_cpu);
AG_HIDDEN int ag_signal_is_ours(const siginfo_t *si); /* handler's classification */
/* Installs the SIGTERM flush handler if SIGTERM is at its default disposition. */
AG_HIDDEN void ag_signal_sigterm_install(void);
AG_HIDDEN void ag_signal_sigterm_restore(void);
/* bg: the last chunk after a SIGTERM is out; the waiting handler lets the process die. */
AG_HIDDEN void ag_signal_sigterm_done(void);
/* bg: measures the kernel cost of delivering one sampling signal (ns). */
AG_HIDDEN uint64_t ag_signal_calibrate(void);

/* ---- cfi_table.c: per-object CFI tables (cfi.h) published for the handler ---- */
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

/* ---- unwind.c ---- */
#define AG_UW_DEPTH 1u      /* stopped at max frames */
#define AG_UW_INCOMPLETE 2u /* could not be continued to the outermost frame */
#define AG_UW_FP 4u         /* a frame-pointer fallback step was taken */
/* handler-safe. Unwinds from (pc, sp, fp); exact: pc is the interrupted instruction (a signal),
 * not a return address. Reads stack words only inside [lo, hi), at address + delta (delta != 0:
 * a copy of the stack). self: the calling thread's slot (its unwind epoch, see cfi_table.c);
 * NULL only on the background thread (the tables' only freer). Writes up to max pcs, leaf first;
 * returns the count and *flags (AG_UW_*). */
AG_HIDDEN uint32_t ag_unwind(ag_thread_t *self, uintptr_t pc, uintptr_t sp, uintptr_t fp,
                             int exact, uintptr_t lo, uintptr_t hi, intptr_t delta,
                             uintptr_t *pcs, uint32_t max, uint32_t *flags);
/* handler-safe: removes libfleetprof's own frames except the outermost of each run (the
 * interposer the application called: symbols.c names it as the real function, builder.c leaves
 * out the others). */
AG_HIDDEN uint32_t ag_unwind_strip_agent(uintptr_t *pcs, uint32_t n);
AG_HIDDEN extern uintptr_t ag_self_lo, ag_self_hi; /* libfleetprof's image (hooks.c) */

/* ---- record.c: the generic sample record ---- */
#define AG_REC_SKIP 0xffu /* ring padding record */
#define AG_STF_NO_BOUNDS 0x80000000u /* internal stack flag: leaf only, bounds not known yet */
#define AG_REC_MAX (sizeof(ag_rec_t) + AG_MAX_DEPTH * sizeof(uintptr_t))

typedef struct ag_rec {
    uint32_t len;       /* bytes, including pcs and padding */
    uint8_t type;       /* cm_event_type_t, or AG_REC_SKIP */
    uint8_t flags;      /* CM_SF_* */
    uint16_t depth;     /* pcs that follow, leaf first */
    uint32_t stack_flags; /* CM_STF_* */
    uint32_t labels;    /* global label set id (context.c), 0 = none */
    uint64_t time_ns;   /* CLOCK_REALTIME */
    uint64_t weight;    /* type unit */
    uint64_t count;     /* milli-events */
    uint64_t size;      /* type-specific: alloc bytes, io bytes */
    uint64_t address;   /* type-specific: lock address */
    uint32_t io_kind, fd_kind;
    uint8_t ctx[CM_CONTEXT_SIZE]; /* trace id + span id, zero = none */
    uintptr_t pcs[];
} ag_rec_t;

/* ---- defer.c: samples unwound later from a copy of their stack (no tables yet, or no
 * stack bounds yet) ---- */
#define AG_DEFER_ARENA (16u << 20)     /* stack copies (MAP_NORESERVE, pages given back) */
#define AG_DEFER_COPY_MAX (32u << 10)  /* bytes of stack copied per sample, at most */
#define AG_STF_DEFERRED 0x40000000u    /* internal stack flag: pcs[1] names a stack copy */
typedef struct {
    _Atomic uint64_t deferred, full; /* copies taken; samples the full arena turned away */
    _Atomic uint64_t resolved;       /* copies unwound by the bg thread */
    _Atomic uint64_t vm_failed;      /* unbounded stacks process_vm_readv could not read */
    _Atomic uint64_t resets, peak_bytes; /* arena rewinds; most bytes in use at one */
} ag_defer_counters_t;
AG_HIDDEN extern ag_defer_counters_t ag_defer_stats;
AG_HIDDEN extern uint64_t ag_defer_test_delay_ns; /* FLEETPROF_TEST_CFI_DELAY_MS (tests only) */
/* constructor: maps the arena (before any timer is armed). 0 or -1. */
AG_HIDDEN int ag_defer_init(size_t arena_bytes);
/* handler-safe: copies the registers and the stack from sp (to hi, at most AG_DEFER_COPY_MAX;
 * hi == 0: bounds unknown, read with process_vm_readv up to the first unmapped byte) into the
 * arena; writes pcs[0] = pc, pcs[1] = the copy and returns 2, and the caller must call
 * ag_defer_done() once the record is committed; 0 when it took nothing (unwind at once),
 * with *full set when that was for want of room. */
AG_HIDDEN uint32_t ag_defer_take(uintptr_t pc, uintptr_t sp, uintptr_t fp, int exact,
                                 uintptr_t hi, uintptr_t *pcs, int *full);
AG_HIDDEN void ag_defer_done(void);
/* bg: r itself, or (AG_STF_DEFERRED) r unwound from its copy into out (AG_REC_MAX bytes). */
AG_HIDDEN const ag_rec_t *ag_defer_resolve(const struct ag_rec *r, struct ag_rec *out);
/* bg: after a drain, stops new copies; returns 1 when none is in progress (then drain again,
 * so every copy is unwound, and call ag_defer_reset_end), 0 to try again on the next tick. */
AG_HIDDEN int ag_defer_reset_begin(void);
AG_HIDDEN void ag_defer_reset_end(void); /* rewinds the arena, gives its pages back */
AG_HIDDEN void ag_defer_after_fork_child(int follow);

/* One event as a producer describes it (type-specific attributes may stay 0). */
typedef struct {
    cm_event_type_t type;
    uint32_t flags;
    uint64_t weight, count, size, address;
    uint32_t io_kind, fd_kind;
} ag_event_t;

/* handler-safe (and hook-safe): unwinds the calling thread (from uc if not NULL, else from
 * the caller's frame), snapshots its span context and labels and appends one record to the
 * thread's ring. Counts events_seen, DROP_RING_FULL, DROP_UNWIND_FAILED,
 * DROP_STACK_TRUNCATED. Returns 0 or -1 if dropped. Non-handler producers (issue 4 hooks)
 * must set t->busy around the call; the handler drops (RING_FULL) when it finds busy set. */
AG_HIDDEN int ag_record_take(ag_thread_t *t, const ag_event_t *ev, const void *uc);

/* Global counters (relaxed atomics, handler-safe). */
AG_HIDDEN extern _Atomic uint64_t ag_drops[CM_EV_COUNT][AG_DROP_REASONS];
AG_HIDDEN extern _Atomic uint64_t ag_events_seen[CM_EV_COUNT];
AG_HIDDEN extern _Atomic uint64_t ag_handler_ns_sum, ag_handler_ns_n; /* cost probes */
AG_HIDDEN extern _Atomic uint64_t ag_samples_taken;                    /* all types */
/* AG_NO_TSAN: called from the signal handler's path (record.c), where GCC will not inline
 * an instrumented function into an uninstrumented one: the out-of-line instrumented copy would
 * run on threads whose TSan state may be gone (a signal in the thread's exit path). */
AG_NO_TSAN static inline void ag_drop_count(uint32_t type, uint32_t reason, uint64_t n) {
    atomic_fetch_add_explicit(&ag_drops[type][reason], n, memory_order_relaxed);
}

/* ---- context.c ---- */
typedef struct {
    uint8_t ctx[CM_CONTEXT_SIZE];
    uint32_t labels;
} ag_ctx_slot_t;
/* handler-safe: copies the calling thread's current context (double buffer, see context.c). */
AG_HIDDEN void ag_context_read(ag_ctx_slot_t *out);
/* The calling thread's context block, and the bytes of it a remote reader copies; picks the
 * current slot out of such a copy (bgthread.c reads blocked threads' contexts). */
AG_HIDDEN uintptr_t ag_context_addr(void);
AG_HIDDEN size_t ag_context_copy_size(void);
AG_HIDDEN void ag_context_pick(const void *copy, ag_ctx_slot_t *out);
/* bg: the (key, value) pairs of a global label set id. Returns the pair count (<= 4), with
 * pointers valid until ag_context_reset(). Takes the label lock briefly. */
AG_HIDDEN uint32_t ag_context_labels(uint32_t id, const char *kv[2 * 4]);
AG_HIDDEN void ag_context_after_fork_child(void);
/* Units of work counted since the last call (fleetprof_work_done), reset to 0. */
AG_HIDDEN uint64_t ag_work_take(void);
AG_HIDDEN void ag_context_lock(void);
AG_HIDDEN void ag_context_unlock(void);
/* Parses a W3C traceparent into its ids. Returns 0 or -EINVAL (malformed, all-zero ids). */
AG_HIDDEN int ag_parse_traceparent(const char *tp, uint8_t trace[16], uint8_t span[8]);

/* ---- spans.c (named spans: fleetprof_span_begin / _end) ---- */
typedef struct ag_builder ag_builder_t;
/* bg, at a cut: closes the current half of ended spans (waits, bounded, for rows being
 * written), then adds them and the active spans to the chunk being built. */
AG_HIDDEN void ag_spans_flip(void);
AG_HIDDEN void ag_spans_emit(ag_builder_t *b, uint64_t start_ns, uint64_t end_ns);
AG_HIDDEN void ag_spans_after_fork_child(void);

/* ---- controller.c ---- */
typedef struct {
    cm_event_type_t type;
    double target;        /* events/s set point (after the budget factor) */
    double target_cfg;    /* configured set point */
    double period;        /* current period (type unit per sample) */
    double period_min, period_max;
    double base;          /* log-domain reference period */
    double integral;      /* log-domain integral term */
    double prev_err;
    double rate_ewma;     /* measured samples/s, for reports */
    double load_ewma;     /* CPU only: sampled threads' CPU, ns per s (feed-forward) */
    double trim;          /* CPU only: log-domain integral of the rate error */
    int enabled;
} ag_ctl_t;

AG_HIDDEN void ag_ctl_init(ag_ctl_t *c, cm_event_type_t type, double target, double period,
                           double pmin, double pmax, int enabled);
/* bg: feeds samples observed over dt seconds; returns the new period. budget_factor in (0,1]
 * scales the set point down when the agent is over its CPU budget. */
AG_HIDDEN double ag_ctl_update(ag_ctl_t *c, uint64_t samples, double dt, double budget_factor);
/* bg: the CPU controller (see controller.c): feed-forward from the CPU the sampled threads used
 * over the window (cpu_ns, exact from the clocks), trimmed by the integral of the rate error.
 * Returns the new period. */
AG_HIDDEN double ag_ctl_update_cpu(ag_ctl_t *c, uint64_t samples, uint64_t cpu_ns, double dt,
                                   double budget_factor);

/* bg: the agent's CPU budget (controller.c: ag_budget_step). */
/* The process's CPU counts as at least this share of a core. Was 5%: a process using less
 * (redis-server serving 4.4k requests/s uses 4%) let the agent take 0.5 ms/s, over 1% of it. */
#define AG_BUDGET_FLOOR 0.01
#define AG_BUDGET_MIN 0.02   /* the lowest factor: 1/50 of the configured work */
typedef struct {
    double bg;  /* periodic work (wall ticks, control windows, /proc scans) runs at bg x its rate */
    double cpu; /* the CPU sample set point is cpu x the configured rate */
} ag_budget_t;
/* One window: agent_ns of estimated agent CPU, of which cpu_samples_ns for the CPU samples,
 * proc_ns of process CPU over wall_ns; budget a share (0.01 = 1%). */
AG_HIDDEN void ag_budget_step(ag_budget_t *b, double budget, double agent_ns,
                              double cpu_samples_ns, double proc_ns, double wall_ns);

/* ---- symbols.c (bg only) ---- */
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
/* pblib.c: loads libprotobuf-c now (the constructor, when the program's malloc is foreign:
 * dlopen allocates through it, which only the program's own thread may do). */
AG_HIDDEN void ag_pblib_preload(void);
AG_HIDDEN void ag_symbols_lookup(uintptr_t pc, ag_sym_t *out);
AG_HIDDEN void ag_symbols_stats(ag_symstats_t *st);
AG_HIDDEN char *ag_demangle(const char *name); /* malloc'ed, NULL: not mangled */
AG_HIDDEN const char *ag_object_path(const ag_object_t *o);
AG_HIDDEN void ag_object_mapping(const ag_object_t *o, uint64_t *start, uint64_t *limit,
                                 uint64_t *off, const uint8_t **build_id, uint32_t *bid_len);
AG_HIDDEN uint32_t *ag_object_chunk_slot(ag_object_t *o); /* builder's per-chunk index */

/* ---- builder.c (bg only) ---- */
typedef struct ag_builder ag_builder_t;
AG_HIDDEN ag_builder_t *ag_builder_new(void);
AG_HIDDEN void ag_builder_free(ag_builder_t *b);
AG_HIDDEN void ag_builder_add(ag_builder_t *b, const ag_thread_t *t, pid_t tid,
                              const ag_rec_t *r);
AG_HIDDEN uint32_t ag_builder_samples(const ag_builder_t *b, cm_event_type_t type);
AG_HIDDEN size_t ag_builder_bytes(const ag_builder_t *b); /* estimated, before LZ4 */
/* Chunk size bounds: the collector and Kafka refuse a message above the broker's
 * limit (1 MB by default), so an interval whose chunk would grow past AG_CHUNK_SOFT (estimated)
 * is cut early into several chunks, and an encoded chunk above AG_CHUNK_MAX is never queued for
 * the collector (written to FLEETPROF_OUTPUT only, counted DROP_ENCODE_FAILED). */
#define AG_CHUNK_SOFT (512u * 1024u)
#define AG_CHUNK_MAX (900u * 1024u)
/* Encodes everything added since the last call as one chunk covering [start_ns, end_ns] and
 * resets. hdr supplies the header fields (service, sampling, drops, cpu...). Returns 0 and a
 * malloc'ed frame, or a CM_E* code. */
/* Adds one span row (spans.c): its context (trace + span id), name (NULL: none), start, duration,
 * thread and CM_SPF_* flags. */
AG_HIDDEN void ag_builder_add_span(ag_builder_t *b, const uint8_t *ctx, const char *name,
                                   uint64_t start_ns, uint64_t duration_ns, pid_t tid,
                                   uint32_t flags);
AG_HIDDEN int ag_builder_finish(ag_builder_t *b, cm_header_t *hdr, uint8_t **frame,
                                size_t *frame_len, char *err, size_t err_size);

/* ---- sender.c (bg only) ---- */
#define AG_QUEUE_MAX 16 /* unacked chunks kept for the collector */
AG_HIDDEN void ag_sender_init(const ag_config_t *cfg);
/* Takes ownership of frame. Writes the output file (if configured) and queues for the
 * collector (dropping the oldest with DROP_CHUNK_QUEUE_FULL). */
/* drops: the counts the chunk's header carries (given back if the chunk is lost) */
AG_HIDDEN void ag_sender_submit(uint8_t *frame, size_t len, uint64_t seq, const cm_drop_t *drops,
                                uint32_t ndrops);
AG_HIDDEN int ag_sender_write_file(const uint8_t *frame, size_t len, uint64_t seq); /* -1: not */
/* A chunk carrying drops was lost for good: its counts go back into the agent's counters, plus
 * one of reason for the chunk itself; the next chunk cut reports them. */
AG_HIDDEN void ag_sender_give_back(const cm_drop_t *drops, uint32_t n, uint32_t reason);
AG_HIDDEN int ag_sender_uses_socket(void); /* 0: FLEETPROF_COLLECTOR=none, files only */
/* Progresses connect/write/read-acks without blocking. Returns the fd to poll (or -1) and the
 * poll events wanted; *wake_ms: when it wants to be called again at the latest. */
AG_HIDDEN int ag_sender_step(short *events, int *wake_ms);
/* Tries for up to timeout_ms to get the queue acked (exit flush). */
/* At exit: one connection attempt, then writes without waiting for acks, for at most
 * timeout_ms while the collector keeps taking bytes (never waits on a peer that takes none). */
AG_HIDDEN void ag_sender_exit(int timeout_ms);
#define AG_EXIT_SEND_MS 100
AG_HIDDEN void ag_sender_after_fork_child(void);
AG_HIDDEN uint32_t ag_sender_queued(void);
AG_HIDDEN uint64_t ag_sender_file_failures(void); /* chunks FLEETPROF_OUTPUT refused */
/* First chunk sequence to use: after any files this pid already has in FLEETPROF_OUTPUT. */
AG_HIDDEN uint64_t ag_sender_first_sequence(void);

/* ---- bgthread.c / agent.c ---- */
enum { AG_REQ_FLUSH = 1, AG_REQ_STOP = 2, AG_REQ_SIGTERM = 4, AG_REQ_CAPS = 8 };
/* The bg thread's first sleep: what a process that is gone within it never pays for */
#define AG_START_DELAY_NS 20000000ull
typedef struct {
    ag_config_t cfg;
    pid_t pid;
    char host[256];
    uint64_t process_start_ns;
    _Atomic int running;          /* handlers record only when set */
    _Atomic int requests;         /* AG_REQ_* bits */
    _Atomic uint64_t flush_done;  /* generation counter of completed flushes */
    ag_ctl_t ctl[CM_EV_COUNT];
    _Atomic uint64_t cpu_period_ns; /* period in force, read by the handler */
    uint64_t signal_cost_ns;      /* calibrated kernel delivery cost per sample */
    uint64_t sequence;            /* next chunk sequence number */
} ag_state_t;
AG_HIDDEN extern ag_state_t ag;

AG_HIDDEN int ag_bg_start(void);
AG_HIDDEN void ag_bg_stop(void); /* final flush, joins */
/* A child forked without atfork handlers (sandbox.c): stop profiling, take no lock. */
AG_HIDDEN void ag_bg_forget_child(void);
/* agent.c: in a child forked without our atfork handlers? Then profiling stops (1). */
AG_HIDDEN int ag_unseen_child(void);
/* The destructor's work: timers off, last chunk written, bg thread joined, running = 0. */
AG_HIDDEN void ag_agent_stop(void);
/* ---- sandbox.c: fork from a signal handler, seccomp ---- */
AG_HIDDEN void ag_sandbox_init(void); /* constructor, after ag_signal_init */
/* A system call without errno and without our syscall() interposer (whose variadic reads of
 * six arguments a shorter call would have ASan report): -errno on failure. x86-64. */
static inline long ag_rawsys(long nr, long a, long b, long c, long d, long e) {
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
                     : "rcx", "r11", "memory");
    return ret;
}

/* ---- sigroom.c: RLIMIT_SIGPENDING slots the agent may take ---- */
AG_HIDDEN extern int ag_sigroom_off;  /* no timer, wall request or wake signal at all */
#define AG_SIGROOM_POLL_MS 50         /* then the bg thread's longest sleep */
AG_HIDDEN void ag_sigroom_init(void); /* constructor, before any timer */
AG_HIDDEN int ag_sigroom_take_timer(void); /* 0: none (counted signal_limit) */
AG_HIDDEN void ag_sigroom_give_timer(void);
AG_HIDDEN void ag_sigroom_fork_child(void);
AG_HIDDEN int ag_sigroom_wall_ok(uint32_t in_flight); /* 0: not sent (counted) */
AG_HIDDEN int ag_sigroom_walls_limited(void);
/* signal.c: does the calling thread block our signal? (one system call) */
AG_HIDDEN int ag_signal_blocked_here(void);
/* thread.c: the calling thread (t) blocked or unblocked our signal: its timer stops/starts */
AG_HIDDEN void ag_thread_sig_blocked(ag_thread_t *t, int blocked);
/* ---- creds.c: our thread takes the credentials of a thread that changes its own ---- */
AG_HIDDEN void ag_creds_serve(void); /* bg thread: take the posted credentials, if any */
AG_HIDDEN int ag_creds_prctl_op(long op, long a2); /* a prctl that changes credentials? */
AG_HIDDEN int ag_creds_syscall_nr(long nr, long a0, long a1); /* such a raw syscall? */
AG_HIDDEN void ag_creds_changed(void); /* app thread, after such a call: wait for ours */
AG_HIDDEN void ag_creds_after_fork_child(void);
AG_HIDDEN extern _Atomic uint64_t ag_creds_mirrors, ag_creds_failures, ag_creds_stuck;
AG_HIDDEN void ag_creds_serve_quick(void); /* the same inside a step that may hold a lock */
AG_HIDDEN extern void (*ag_cfi_between_objects)(void); /* ag_cfi_tick, after each build */
AG_HIDDEN void ag_creds_quit_point(void);  /* bg thread, no lock held: exits on a give-up */
AG_HIDDEN void ag_bg_force_join(void); /* the next ag_bg_stop joins the thread, always */
AG_HIDDEN int ag_bg_alive(void);       /* started and not stopped */
AG_HIDDEN pid_t ag_bg_tid(void);       /* its tid once it ran, else 0 (async-signal-safe) */
AG_HIDDEN __attribute__((noreturn)) void ag_bg_quit(void); /* bg thread, no lock held: ends it */
AG_HIDDEN extern _Atomic int ag_sandboxed; /* a seccomp filter: no syscall of ours any more */
AG_HIDDEN void ag_bg_wake(int req); /* async-signal-safe */
AG_HIDDEN uint64_t ag_now_real(void);
AG_HIDDEN uint64_t ag_now_mono(void);

#endif
