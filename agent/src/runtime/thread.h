/* Thread registry: one slot per sampled thread (thread.c). */
#ifndef AG_THREAD_H
#define AG_THREAD_H

#include "base.h"
#include "ring.h"
#include <pthread.h>
#include <signal.h>
#include <sys/types.h>
#include <time.h>

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
    /* bg: the flight recorder's density (recorder/density.c, wall.c) */
    uint64_t rd_acc, rd_phase;            /* CPU since its last stream record; on P's grid */
    uint64_t rd_wall_last;                /* monotonic time of its last recorder wall sample */
    uint64_t rd_wall_cpu;                 /* its CPU clock then */
    uint64_t rd_wall_w;                   /* the recorder's weight of its wall request */
    uint32_t chunk_index;                 /* bg: thread index in the chunk being built */
    uint64_t chunk_seq;                   /* bg: chunk the index belongs to */
    /* A blocking call in progress (hooks.h: ag_blk_begin/end), for wall samples without a
     * signal (wall.c: wall_from_blocked). blk_seq is odd inside the call; the others are
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
    uint64_t claim_seq;                   /* g_lock: the registry's claim count when claimed */
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
AG_HIDDEN int ag_thread_create_raw(pthread_t *th, void *(*fn)(void *), void *arg);
/* Is ss_sp the calling thread's alternate signal stack of ours (thread.c)? */
AG_HIDDEN int ag_thread_altstack_is_ours(const void *ss_sp);
/* thread.c: the calling thread (t) blocked or unblocked our signal: its timer stops/starts */
AG_HIDDEN void ag_thread_sig_blocked(ag_thread_t *t, int blocked);

#endif
