/* The wall-clock sampler: every tick, up to FLEETPROF_WALL_THREADS threads get one WALL sample
 * each, weighted by the wall time since their previous one, without a signal whenever the
 * thread's state allows (a thread that has not run: its last sample again; one blocked in a
 * hooked call: its stack walked from the hook's frame; one on CPU: its last CPU sample), else
 * with a wall request signal (signal.c). bg thread only. */
#include "wall.h"
#include "ag_signal.h"
#include "ag_unwind.h"
#include "agent.h"
#include "builder.h"
#include "clock.h"
#include "context.h"
#include "incid.h"
#include "procstat.h"
#include "pyframes.h"
#include "sigroom.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

_Atomic uint64_t ag_wall_reused;

/* A thread that has not run since its last wall sample (its CPU clock moved less than the
 * signal return itself costs) still has exactly that stack and context: record it again
 * without a signal. This keeps wall sampling from interrupting sleeps: nanosleep, poll,
 * epoll_wait and select fail with EINTR when any handler runs, SA_RESTART or not, so only the
 * first tick after a thread blocks sends it a signal. */
#define AG_WALL_IDLE_NS 20000u

/* The flight recorder's own density (recorder/density.c): its ticks between the stream's
 * (ag_wall_tick_extra) sample for it alone, and only threads that need no signal; each of its
 * samples weighs the time since the thread's previous one of either kind (rd_wall_last), a
 * stream sample the time since the thread's previous stream sample, as without the recorder. */
static int g_split;      /* this tick splits: the recorder's weights are its own */
static int g_extra;      /* this tick is the recorder's alone */
static uint64_t g_rd_w;  /* the recorder's weight of the thread being sampled */

/* Adds a wall sample recorded without a signal (counted as seen, not charged a signal). */
static void wall_add(ag_builder_t *b, ag_thread_t *t, pid_t tid, ag_rec_t *r) {
    if (!g_extra) {
        atomic_fetch_add(&ag_events_seen[CM_EV_WALL], 1);
        atomic_fetch_add(&ag_wall_reused, 1);
        ag_builder_add(b, t, tid, r);
    }
    uint64_t w = r->weight;
    if (g_split)
        r->weight = g_rd_w;
    ag_fr_add(t, tid, r); /* flight recorder (recorder/flightrec.c) */
    r->weight = w;
}

static int wall_reuse(ag_builder_t *b, ag_thread_t *t, pid_t tid, uint64_t weight, uint64_t cpu) {
    uint64_t after = atomic_load(&t->wall_cpu_after);
    if (!t->wall_rec || !t->wall_rec->len || !after || (t->wall_rec->stack_flags & AG_STF_NO_BOUNDS))
        return 0;
    if (cpu < after || cpu - after > AG_WALL_IDLE_NS)
        return 0;
    ag_rec_t *r = t->wall_rec;
    r->time_ns = ag_now_real();
    r->weight = weight;
    r->count = CM_COUNT_ONE;
    r->flags = 0; /* not on CPU: it did not run */
    wall_add(b, t, tid, r);
    return 1;
}

/* A thread on CPU at the tick that had a CPU sample since its previous tick: that sample, taken
 * at a point of its running time in the last interval, stands in for the wall sample. A busy
 * thread then costs no signal (the sender's IPI, the delivery, an unwind: 20-35 us here, most
 * of the agent's own CPU on the mixed benchmark). Its span context is the CPU sample's. */
static int wall_from_cpu(ag_builder_t *b, ag_thread_t *t, pid_t tid, uint64_t weight) {
    ag_rec_t *c = t->cpu_rec;
    if (!c || !c->len || (c->stack_flags & AG_STF_NO_BOUNDS))
        return 0;
    c->type = CM_EV_WALL;
    c->time_ns = ag_now_real();
    c->weight = weight;
    c->count = CM_COUNT_ONE;
    c->flags = CM_SF_ON_CPU;
    wall_add(b, t, tid, c);
    if (!g_extra) /* the recorder's tick leaves it to the stream's */
        c->len = 0;
    return 1;
}

/* A thread blocked in a hooked call (an I/O call, a contended lock, a condition wait: hooks.h
 * ag_blk_begin) is sampled without a signal: its stack is walked from the hook's frame, the
 * real function and the hook as its first two frames (as a signal would find them). The stack
 * and the span context of a thread that registered itself are read in place (peek, below);
 * those of a thread found by the /proc scan (no exit hook to wait on) with process_vm_readv, so
 * that a thread that returns and exits meanwhile cannot fault the agent (the read fails). The
 * sample is kept only if the call is still the same one after the walk (blk_seq unchanged). A
 * signal costs a blocked thread a wake-up, the handler and a restarted call besides the
 * sender's IPI. */
static uint32_t g_cursor; /* the next slot a tick looks at */
static int g_vm_read = 1; /* process_vm_readv allowed (not EPERM/ENOSYS under a sandbox) */

static int self_readv(struct iovec *local, struct iovec *remote, int n) {
    size_t want = 0;
    for (int i = 0; i < n; i++)
        want += local[i].iov_len;
    ssize_t got = process_vm_readv(ag.pid, local, (unsigned long)n, remote, (unsigned long)n, 0);
    if (got < 0 && (errno == EPERM || errno == ENOSYS))
        g_vm_read = 0;
    return got == (ssize_t)want ? 0 : -1;
}

/* A thread that registered itself cannot finish exiting while t->walking is set
 * (thread.c: thread_exit waits), so its stack and its TLS stay mapped: its words are read in
 * place, without a system call (~1 us instead of ~9 us for process_vm_readv on a busy core).
 * What the thread does meanwhile can only make them stale, which the blk_seq check after the
 * walk catches. Not instrumented: they are another thread's live stack. */
__attribute__((no_sanitize("address", "thread", "undefined"), noinline)) static void
peek(void *dst, uintptr_t src, size_t n) {
    const volatile uint8_t *s = (const volatile uint8_t *)src;
    uint8_t *d = dst;
    if (!(src & 7) && !(n & 7)) {
        const volatile uint64_t *w = (const volatile uint64_t *)src;
        for (size_t i = 0; i < n / 8; i++) {
            uint64_t v = w[i];
            memcpy(d + 8 * i, &v, 8);
        }
        return;
    }
    for (size_t i = 0; i < n; i++)
        d[i] = s[i];
}

static int wall_from_blocked(ag_builder_t *b, ag_thread_t *t, pid_t tid, uint64_t weight,
                             uint64_t cpu) {
    uint64_t seq = atomic_load_explicit(&t->blk_seq, memory_order_acquire);
    int direct = t->self_registered;
    if (!(seq & 1) || (!direct && !g_vm_read))
        return 0;
    uintptr_t fp = atomic_load_explicit(&t->blk_fp, memory_order_relaxed);
    uintptr_t pc = atomic_load_explicit(&t->blk_pc, memory_order_relaxed);
    uintptr_t hook = atomic_load_explicit(&t->blk_hook, memory_order_relaxed);
    uintptr_t lo = atomic_load(&t->stack_lo), hi = atomic_load(&t->stack_hi);
    size_t csz = ag_context_copy_size();
    enum { WIN = 64 << 10 };
    static uint8_t win[WIN], cbuf[256];
    static uintptr_t rbuf[AG_REC_MAX / sizeof(uintptr_t) + 1];
    if (!hi || fp < lo || fp > hi - 16 || (fp & 7) || !t->ctx_addr || csz > sizeof cbuf)
        return 0;
    if (direct) {
        atomic_store(&t->walking, 1);
        if (atomic_load(&t->state) != AG_TS_ACTIVE || atomic_load(&t->blk_seq) != seq) {
            atomic_store(&t->walking, 0);
            return 0;
        }
        peek(cbuf, t->ctx_addr, csz);
    }
    ag_rec_t *r = (ag_rec_t *)rbuf;
    uint32_t n = 0;
    if (pc)
        r->pcs[n++] = pc;
    /* From the hook's frame: the state right after it returns, unwound with the CFI tables
     * (the hook's own frames and the hook itself are the agent's: removed). In place for a
     * thread that registered itself; else on a copy of up to 64 KiB of its stack. */
    uintptr_t wlo = fp, whi = hi;
    intptr_t delta = 0;
    if (!direct) {
        whi = hi - fp > WIN ? fp + WIN : hi;
        struct iovec l[2] = {{win, whi - wlo}, {cbuf, csz}};
        struct iovec rm[2] = {{(void *)wlo, whi - wlo}, {(void *)t->ctx_addr, csz}};
        if (self_readv(l, rm, 2) != 0)
            return 0;
        delta = (intptr_t)((uintptr_t)win - wlo);
    }
    uintptr_t frame[2];
    peek(frame, (uintptr_t)(fp + delta), sizeof frame);
    /* The hook's frame must still return where the hook recorded (blk_ret): otherwise the
     * call was left by a siglongjmp and the mark is stale (the thread's next signal clears
     * it). */
    int stale = frame[1] != atomic_load_explicit(&t->blk_ret, memory_order_relaxed);
    uint32_t uw = 0, m = 0;
    if (!stale && frame[1] >= 4096)
        m = ag_unwind(NULL, frame[1], fp + 16, frame[0], 0, wlo, whi, delta, r->pcs + n,
                      AG_MAX_DEPTH - n, &uw);
    for (uint32_t i = 0, base = n; i < m; i++) {
        uintptr_t v = r->pcs[base + i];
        if (v - ag_self_lo >= ag_self_hi - ag_self_lo)
            r->pcs[n++] = v;
    }
    /* its Python frames: it waits in a hooked call, so its frame chain stands still (a
     * thread that returns meanwhile may change it: the reads are fault-safe, the merge checks
     * the result, and the blk_seq check below drops the sample) */
    n = ag_py_merge(t, r->pcs, n, AG_MAX_DEPTH);
    int truncated = (uw & AG_UW_DEPTH) != 0, incomplete = !truncated && (uw & AG_UW_INCOMPLETE);
    (void)hook;
    int same = atomic_load_explicit(&t->blk_seq, memory_order_acquire) == seq;
    if (direct)
        atomic_store(&t->walking, 0);
    if (!same || stale || n == 0)
        return 0; /* the call ended meanwhile, or a stale mark: a signal decides */
    ag_ctx_slot_t ctx;
    ag_context_pick(cbuf, &ctx);
    memset(r, 0, sizeof *r);
    r->len = (uint32_t)((sizeof *r + n * sizeof(uintptr_t) + 7u) & ~7u);
    r->type = CM_EV_WALL;
    r->depth = (uint16_t)n;
    r->stack_flags = (truncated ? CM_STF_TRUNCATED : 0) | (incomplete ? CM_STF_INCOMPLETE : 0);
    r->labels = ctx.labels;
    r->time_ns = ag_now_real();
    r->weight = weight;
    r->count = CM_COUNT_ONE;
    memcpy(r->ctx, ctx.ctx, CM_CONTEXT_SIZE);
    if (truncated)
        ag_drop_count(CM_EV_WALL, CM_DROP_STACK_TRUNCATED, 1);
    wall_add(b, t, tid, r);
    /* while it stays blocked without running, wall_reuse repeats this sample */
    if (t->wall_rec || (t->wall_rec = malloc(AG_REC_MAX))) {
        memcpy(t->wall_rec, r, r->len);
        atomic_store(&t->wall_cpu_after, cpu);
    }
    return 1;
}

/* The thread was sampled at now (any kind of tick), its CPU clock cpu. */
static void rd_sampled(ag_thread_t *t, uint64_t now, uint64_t cpu) {
    t->rd_wall_last = now;
    t->rd_wall_cpu = cpu;
}

static uint32_t g_xcursor; /* the recorder's ticks' own rotation */

void ag_wall_tick_extra(ag_builder_t *b, uint64_t now) {
    uint32_t done_n = 0, scanned = 0, hw = ag_thread_hw();
    g_split = g_extra = 1;
    while (done_n < ag.cfg.wall_threads && scanned < hw) {
        if (g_xcursor >= hw)
            g_xcursor = 0;
        ag_thread_t *t = &ag_threads[g_xcursor++];
        scanned++;
        if (atomic_load(&t->state) != AG_TS_ACTIVE || atomic_load(&t->foreign_tls))
            continue;
        pid_t tid = atomic_load(&t->tid);
        uint64_t cpu = ag_thread_cpu_ns(tid);
        g_rd_w = now > t->rd_wall_last ? now - t->rd_wall_last : 1000;
        uint64_t ran = t->rd_wall_cpu && cpu > t->rd_wall_cpu ? cpu - t->rd_wall_cpu : 0;
        /* no signal: a thread that needs one waits for the stream's tick, whose sample then
         * carries the whole interval for the recorder */
        if (wall_reuse(b, t, tid, g_rd_w, cpu) || wall_from_blocked(b, t, tid, g_rd_w, cpu) ||
            (2 * ran >= g_rd_w && wall_from_cpu(b, t, tid, g_rd_w))) {
            rd_sampled(t, now, cpu);
            done_n++;
        }
    }
    g_split = g_extra = 0;
}

void ag_wall_tick(ag_builder_t *b, uint64_t now) {
    uint32_t sent = 0, scanned = 0, hw = ag_thread_hw(), in_flight = 0;
    g_split = ag_rd_active();
    if (ag_sigroom_walls_limited()) /* RLIMIT_SIGPENDING: requests not taken yet (sigroom.c) */
        for (uint32_t i = 0; i < hw; i++)
            in_flight += atomic_load(&ag_threads[i].wall_pending) != 0;
    while (sent < ag.cfg.wall_threads && scanned < hw) {
        if (g_cursor >= hw)
            g_cursor = 0;
        uint32_t slot = g_cursor++;
        ag_thread_t *t = &ag_threads[slot];
        scanned++;
        if (atomic_load(&t->state) != AG_TS_ACTIVE)
            continue;
        if (atomic_load(&t->foreign_tls)) { /* a raw clone() sharing TLS: never signalled */
            ag_thread_disarm(t);
            continue;
        }
        pid_t tid = atomic_load(&t->tid);
        uint64_t w = now - t->wall_last_ns;
        t->wall_last_ns = now;
        if (!w)
            w = 1000;
        /* Without a signal when possible: a thread that has not run since its last sample
         * (wall_reuse), one blocked in a hooked call (wall_from_blocked), one on CPU with a CPU
         * sample since its last tick (wall_from_cpu). On CPU = running or runnable. Decided
         * from the thread's CPU clock when it is clear (ran at least half the interval: on;
         * under 1%: blocked), from its state in /proc otherwise (e.g. a busy thread starved by
         * a loaded machine is runnable): a /proc read costs ~10x a clock read, so it is kept
         * for the ambiguous cases. */
        uint64_t cpu = ag_thread_cpu_ns(tid);
        uint64_t ran = t->wall_cpu_prev && cpu > t->wall_cpu_prev ? cpu - t->wall_cpu_prev : 0;
        t->wall_cpu_prev = cpu;
        int on_cpu = 0;
        g_rd_w = now > t->rd_wall_last ? now - t->rd_wall_last : 1000;
        int done = wall_reuse(b, t, tid, w, cpu) || wall_from_blocked(b, t, tid, w, cpu);
        if (!done) {
            on_cpu = 2 * ran >= w ? 1 : 100 * ran < w ? 0 : ag_procstat_running(slot, tid);
            done = on_cpu && wall_from_cpu(b, t, tid, w);
        }
        if (t->cpu_rec)
            t->cpu_rec->len = 0; /* "since its previous tick" */
        if (done) {
            rd_sampled(t, now, cpu);
            sent++;
            continue;
        }
        /* At most one request in flight per thread: one the thread has not taken yet (it
         * blocks our signal, or has not run since) stays queued in the kernel, where every
         * further one would count against the user's RLIMIT_SIGPENDING (the application's own
         * timers and sigqueue() would fail with EAGAIN). The tick is not taken: counted. */
        if (atomic_load(&t->wall_pending)) {
            ag_drop_count(CM_EV_WALL, CM_DROP_HOST_UNSAFE, 1);
            continue;
        }
        if (atomic_load(&t->sig_blocked)) /* blocks ours now (signal.c): it would stay queued */
            continue;
        if (ag_sigroom_walls_limited() && !ag_sigroom_wall_ok(in_flight))
            continue;
        /* Never to a thread in exec (hook_exec.c): a signal queued while it execs stays
         * pending in the new image, where our number's disposition is SIG_DFL again: the
         * process would die of it. The thread sets exec_pending, then waits for wall_sending
         * to drop (both seq_cst): a send either happens before it drains, or not at all. */
        atomic_store(&t->wall_sending, 1);
        if (atomic_load(&t->exec_pending)) {
            atomic_store(&t->wall_sending, 0);
            continue;
        }
        atomic_store(&t->wall_pending, 1);
        t->rd_wall_w = g_split ? g_rd_w : 0; /* the recorder's weight of its record (drain) */
        if (ag_signal_wall(tid, slot, w, on_cpu) == 0) {
            rd_sampled(t, now, cpu);
            sent++;
            in_flight++;
        } else {
            atomic_store(&t->wall_pending, 0);
            t->rd_wall_w = 0;
        }
        atomic_store(&t->wall_sending, 0);
    }
}

void ag_wall_after_fork_child(void) { g_cursor = g_xcursor = 0; }
