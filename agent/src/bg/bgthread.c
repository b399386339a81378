/* The agent's background thread: wall-clock ticks, ring draining, rate control, CPU
 * accounting, chunk cutting and delivery.
 *
 * Never sampled itself (created with ag_thread_create_raw, skipped by the thread scan). Holds
 * g_work while it works (not while it sleeps in poll), so that fork() (agent.c's atfork
 * handlers take it) never copies half-updated builder, symbol or sender state into a child.
 * Woken early (ag_bg_wake: async-signal-safe, no descriptor; see there) for flush, stop and
 * SIGTERM requests.
 *
 * Agent CPU accounting per chunk: this thread's own CPU clock, plus handler cost estimated as
 * samples x (calibrated kernel signal delivery cost + mean measured handler body). The budget
 * compares that with the process CPU (floored at 1% of one core, so an idle process still
 * allows the agent ~0.1 ms/s at a 1% budget; AG_BUDGET_FLOOR) and slows the periodic work
 * and the CPU set point apart (controller.c: ag_budget_step).
 */
#include "internal.h"
#include "pyframes.h"
#include "bypass.h"
#include "hooks.h"
#include "loader_gate.h"

#include "cm/error.h"
#include "cm/log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define AG_CTL_DT_NS 250000000ull
#define AG_SCAN_NS 500000000ull
/* Over budget (budget factor f < 1) the periodic work wakes this thread less often: control
 * windows every AG_CTL_DT_NS / f (at most AG_CTL_MAX_NS), /proc scans every AG_SCAN_NS / f (at
 * most AG_SCAN_MAX_NS), as wall ticks every 1/(WALL_HZ f). A wakeup costs ~100 us here whatever
 * it does (the switch in and out, cold caches; bench/RESULTS.md, issue 14 session 8): at 4 Hz
 * of control and 2 Hz of scans that alone is 0.4 ms/s, the whole 1% budget of a process using
 * 4% of a core (redis-server under redis-benchmark), which the budget could not reduce. */
#define AG_CTL_MAX_NS 1000000000ull
#define AG_SCAN_MAX_NS 2000000000ull
#define AG_LAZY_NS 200000000ull /* deferred start work (see bg_main) */

static pthread_t g_thread;
static int g_started;
static uint64_t g_start_real; /* when ag_bg_start ran: the first chunk's start */
pthread_mutex_t ag_work_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t ag_flush_mu = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t ag_flush_cv = PTHREAD_COND_INITIALIZER;

static struct {
    ag_builder_t *b;
    uint64_t chunk_start_real, chunk_start_mono;
    uint64_t bg_cpu0, proc_cpu0, samples0;            /* at chunk start */
    uint64_t seen0[CM_EV_COUNT];                      /* events_seen at chunk start */
    uint64_t drops0[CM_EV_COUNT][AG_DROP_REASONS];    /* drops at chunk start */
    uint64_t ctl_seen, ctl_mono;                      /* controller window start */
    uint64_t ctl_proc, ctl_bg;                        /* process / this thread's CPU then */
    uint64_t bud_agent, bud_proc, bud_mono, bud_cpu; /* budget window start */
    ag_budget_t bud;
    int bud_soon; /* step the budget at the next control window, however short */
    int ctl_idle; /* the last control window's load was under AG_BUDGET_FLOOR */
    uint32_t wall_cursor;
    uint64_t over_budget_frac;                        /* fractional DROP_OVER_BUDGET carry */
    int warned_encode, warned_size;
    double enc_ratio; /* encoded / estimated size of the last chunk (LZ4 compresses rows) */
} B;

uint64_t ag_now_real(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t ag_now_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* base / f, at most max: an interval stretched by the budget factor. */
static uint64_t stretch(uint64_t base, double f, uint64_t max) {
    double v = f > 0 ? (double)base / f : (double)max;
    return v < (double)max ? (uint64_t)v : max;
}

static uint64_t clock_ns(clockid_t c) {
    struct timespec ts;
    if (clock_gettime(c, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Waking the bg thread without a descriptor: a program may close every descriptor
 * it did not open and reuse the numbers, and an eventfd cannot be told from the program's own
 * by fstat (every eventfd shares one anonymous inode), so a write could land in the program's
 * pipe or socket. Instead a request is a bit in ag.requests plus, at most one at a time
 * (g_wake_pending), our signal queued to the bg thread with the wall tag and a zero weight,
 * which the handler ignores (as a calibration signal). The bg thread keeps that signal blocked
 * except inside ppoll, so a wake sent before it sleeps makes ppoll return at once. Async-
 * signal-safe (one system call), no descriptor to lose, at most one signal queued. */
static _Atomic pid_t g_bg_tid;
static _Atomic int g_wake_pending;
static _Atomic int g_wake_early; /* a wake (e.g. a ring filling) before the thread ran */
static uid_t g_uid;

void ag_bg_wake(int req) {
    atomic_fetch_or(&ag.requests, req);
    pid_t tid = atomic_load(&g_bg_tid);
    if (!tid) { /* not started yet: it looks at this flag and the requests before it sleeps */
        atomic_store(&g_wake_early, 1);
        return;
    }
    if (ag_sigroom_off)
        return; /* no slot of RLIMIT_SIGPENDING is ours: the bg thread polls (sigroom.c) */
    if (atomic_exchange(&g_wake_pending, 1))
        return; /* one signal queued already */
    siginfo_t si;
    memset(&si, 0, sizeof si);
    si.si_signo = ag_sig;
    si.si_code = SI_QUEUE;
    si.si_pid = ag.pid;
    si.si_uid = g_uid;
    si.si_value.sival_ptr = (void *)(uintptr_t)(AG_WALL_MAGIC << 48); /* weight 0: no sample */
    int saved = errno;
    if (syscall(SYS_rt_tgsigqueueinfo, ag.pid, tid, ag_sig, &si) != 0)
        atomic_store(&g_wake_pending, 0); /* EAGAIN (RLIMIT_SIGPENDING): the timeout wakes it */
    errno = saved;
}

static _Atomic uint64_t g_wall_reused; /* wall samples re-recorded without a signal */

/* Estimated agent CPU so far: this thread + every handler run + the lock hooks' own measured
 * cost. LOCK records are written by the lock hooks, not by a handler: their cost is in
 * ag_lock_cost_ns, so they are charged neither a signal delivery nor a handler body; a wall
 * sample re-recorded by this thread (wall_reuse) had no signal either. (ALLOC and IO records
 * have no measured cost of their own yet: each is charged as one signal.) */
static uint64_t handler_body_ns(void) {
    uint64_t n = atomic_load(&ag_handler_ns_n);
    return n ? atomic_load(&ag_handler_ns_sum) / n : 0;
}

/* What a CPU sample costs the agent's estimate: a signal and a handler body. */
static uint64_t cpu_sample_cost_ns(void) { return handler_body_ns() + ag.signal_cost_ns; }

static uint64_t agent_cpu_now(void) {
    uint64_t body = handler_body_ns();
    uint64_t lock_recs = atomic_load(&ag_lock_records);
    uint64_t samples = atomic_load(&ag_samples_taken);
    samples = samples > lock_recs ? samples - lock_recs : 0;
    uint64_t signals = 0;
    for (int t = 1; t < CM_EV_COUNT; t++)
        if (t != CM_EV_LOCK)
            signals += atomic_load(&ag_events_seen[t]);
    signals -= atomic_load(&g_wall_reused);
    return clock_ns(CLOCK_THREAD_CPUTIME_ID) + samples * body + signals * ag.signal_cost_ns +
           atomic_load(&ag_lock_cost_ns);
}

/* /proc/self/task/TID/stat descriptors kept open per thread slot: opening the file (a path
 * walk and an allocation) is two thirds of a read's cost, and a thread on CPU for part of each
 * interval needs a read every tick. At most AG_STAT_FDS are kept (O_CLOEXEC), and at most 1/64
 * of RLIMIT_NOFILE (stat_keep_max); the others are opened and closed per read. An application may close descriptors it did not open (closefrom,
 * close_range) and get the number back for a file of its own: a kept descriptor is read only
 * while its content starts with "TID (", and closed only while fstat still shows the file it
 * was opened on; otherwise it is forgotten, never closed. Closed when the thread is gone (the
 * sweep after each /proc scan) and in a fork child. bg thread only. */
#define AG_STAT_FDS 32
static struct {
    int fd1; /* descriptor + 1; 0: none */
    pid_t tid;
    dev_t dev;
    ino_t ino;
} g_stat[AG_MAX_THREADS];
static uint32_t g_stat_open;

static ssize_t stat_read(int fd, pid_t tid, char *buf, size_t size) {
    ssize_t n = pread(fd, buf, size - 1, 0);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char want[24];
    int k = snprintf(want, sizeof want, "%d (", (int)tid);
    return strncmp(buf, want, (size_t)k) ? -1 : n;
}

static void stat_drop(uint32_t slot) {
    if (!g_stat[slot].fd1)
        return;
    int fd = g_stat[slot].fd1 - 1;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_dev == g_stat[slot].dev && st.st_ino == g_stat[slot].ino)
        close(fd);
    g_stat[slot].fd1 = 0;
    g_stat_open--;
}

/* Closes the descriptors of threads that are gone (all = 1: every one, fork child). */
static void stat_sweep(int all) {
    for (uint32_t i = 0; i < AG_MAX_THREADS && g_stat_open; i++)
        if (g_stat[i].fd1 && (all || atomic_load(&ag_threads[i].state) != AG_TS_ACTIVE ||
                              atomic_load(&ag_threads[i].tid) != g_stat[i].tid))
            stat_drop(i);
}

/* Descriptors are the program's resource: at most 1/64 of RLIMIT_NOFILE's soft limit is kept
 * (16 at the usual 1024; none below 64, where every read opens and closes its file). */
static uint32_t stat_keep_max(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    rlim_t k = rl.rlim_cur / 64;
    return k < AG_STAT_FDS ? (uint32_t)k : AG_STAT_FDS;
}

/* Is the thread in slot `slot` running or runnable ('R' in /proc/self/task/TID/stat)? */
static int thread_state_running(uint32_t slot, pid_t tid) {
    char buf[512];
    ssize_t n = -1;
    if (g_stat[slot].fd1 && g_stat[slot].tid == tid)
        n = stat_read(g_stat[slot].fd1 - 1, tid, buf, sizeof buf);
    if (n < 0) {
        /* none kept; or closed or replaced under us; or the slot's previous thread's */
        stat_drop(slot);
        char path[64];
        snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return 0;
        n = stat_read(fd, tid, buf, sizeof buf);
        struct stat st;
        if (n >= 0 && g_stat_open < stat_keep_max() && fstat(fd, &st) == 0) {
            g_stat[slot].fd1 = fd + 1;
            g_stat[slot].tid = tid;
            g_stat[slot].dev = st.st_dev;
            g_stat[slot].ino = st.st_ino;
            g_stat_open++;
        } else {
            close(fd);
        }
        if (n < 0)
            return 0;
    }
    const char *p = strrchr(buf, ')'); /* comm may contain spaces and parentheses */
    return p && p[1] == ' ' && p[2] == 'R';
}

/* A thread that has not run since its last wall sample (its CPU clock moved less than the
 * signal return itself costs) still has exactly that stack and context: record it again
 * without a signal. This keeps wall sampling from interrupting sleeps: nanosleep, poll,
 * epoll_wait and select fail with EINTR when any handler runs, SA_RESTART or not, so only the
 * first tick after a thread blocks sends it a signal. */
#define AG_WALL_IDLE_NS 20000u

/* Adds a wall sample recorded without a signal (counted as seen, not charged a signal). */
static void wall_add(ag_thread_t *t, pid_t tid, const ag_rec_t *r) {
    atomic_fetch_add(&ag_events_seen[CM_EV_WALL], 1);
    atomic_fetch_add(&g_wall_reused, 1);
    ag_builder_add(B.b, t, tid, r);
}

static int wall_reuse(ag_thread_t *t, pid_t tid, uint64_t weight, uint64_t cpu) {
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
    wall_add(t, tid, r);
    return 1;
}

/* A thread on CPU at the tick that had a CPU sample since its previous tick: that sample, taken
 * at a point of its running time in the last interval, stands in for the wall sample. A busy
 * thread then costs no signal (the sender's IPI, the delivery, an unwind: 20-35 us here, most
 * of the agent's own CPU on the mixed benchmark). Its span context is the CPU sample's. */
static int wall_from_cpu(ag_thread_t *t, pid_t tid, uint64_t weight) {
    ag_rec_t *c = t->cpu_rec;
    if (!c || !c->len || (c->stack_flags & AG_STF_NO_BOUNDS))
        return 0;
    c->type = CM_EV_WALL;
    c->time_ns = ag_now_real();
    c->weight = weight;
    c->count = CM_COUNT_ONE;
    c->flags = CM_SF_ON_CPU;
    wall_add(t, tid, c);
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

static int wall_from_blocked(ag_thread_t *t, pid_t tid, uint64_t weight, uint64_t cpu) {
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
    wall_add(t, tid, r);
    /* while it stays blocked without running, wall_reuse repeats this sample */
    if (t->wall_rec || (t->wall_rec = malloc(AG_REC_MAX))) {
        memcpy(t->wall_rec, r, r->len);
        atomic_store(&t->wall_cpu_after, cpu);
    }
    return 1;
}

static void wall_tick(uint64_t now) {
    uint32_t sent = 0, scanned = 0, hw = ag_thread_hw(), in_flight = 0;
    if (ag_sigroom_walls_limited()) /* RLIMIT_SIGPENDING: requests not taken yet (sigroom.c) */
        for (uint32_t i = 0; i < hw; i++)
            in_flight += atomic_load(&ag_threads[i].wall_pending) != 0;
    while (sent < ag.cfg.wall_threads && scanned < hw) {
        if (B.wall_cursor >= hw)
            B.wall_cursor = 0;
        uint32_t slot = B.wall_cursor++;
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
        int on_cpu = 0, done = wall_reuse(t, tid, w, cpu) || wall_from_blocked(t, tid, w, cpu);
        if (!done) {
            on_cpu = 2 * ran >= w ? 1 : 100 * ran < w ? 0 : thread_state_running(slot, tid);
            done = on_cpu && wall_from_cpu(t, tid, w);
        }
        if (t->cpu_rec)
            t->cpu_rec->len = 0; /* "since its previous tick" */
        if (done) {
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
        if (ag_signal_wall(tid, slot, w, on_cpu) == 0) {
            sent++;
            in_flight++;
        } else
            atomic_store(&t->wall_pending, 0);
        atomic_store(&t->wall_sending, 0);
    }
}

static void drain(void) {
    uint32_t hw = ag_thread_hw();
    for (uint32_t i = 0; i < hw; i++) {
        ag_thread_t *t = &ag_threads[i];
        int st = atomic_load(&t->state);
        if (st != AG_TS_ACTIVE && st != AG_TS_EXITED)
            continue;
        pid_t tid = atomic_load(&t->tid);
        const ag_rec_t *q;
        static uintptr_t ubuf[AG_REC_MAX / sizeof(uintptr_t) + 1];
        while ((q = ag_ring_peek(&t->ring)) != NULL) {
            uint32_t qlen = q->len;
            /* a sample taken before the first tables, or on a thread without stack bounds:
             * unwound now from its stack copy (defer.c) */
            const ag_rec_t *r = ag_defer_resolve(q, (ag_rec_t *)ubuf);
            uint32_t len = r->len;
            if (r->type >= CM_EV_ALLOC) /* issue 4 hooks: strip hook frames, live heap, paths */
                ag_hooks_bg_add(B.b, t, tid, r);
            else
                ag_builder_add(B.b, t, tid, r);
            if (r->type == CM_EV_WALL && (t->wall_rec || (t->wall_rec = malloc(AG_REC_MAX))))
                memcpy(t->wall_rec, r, len);
            else if (r->type == CM_EV_CPU && (t->cpu_rec || (t->cpu_rec = malloc(AG_REC_MAX))))
                memcpy(t->cpu_rec, r, len);
            ag_ring_release(&t->ring, qlen);
        }
    }
}

/* A control window stretched by the budget (an idle process's) in which work resumed: its
 * average load understates the load now (the work began somewhere inside it), and a period
 * set from it would sample the new work at up to the tick's 250/s for a window; its budget
 * share, averaged over the idle part too, keeps the wall ticks slow for another second. So
 * the controller keeps its period, and the next window (both controls) is AG_RESUME_NS. */
#define AG_RESUME_NS (AG_CTL_DT_NS / 5)

/* One control window; returns 1 when work resumed after an idle stretch (see above). */
static int control(uint64_t now) {
    double dt = (double)(now - B.ctl_mono) / 1e9;
    uint64_t seen = atomic_load(&ag_events_seen[CM_EV_CPU]);
    uint64_t n = seen - B.ctl_seen;
    B.ctl_seen = seen;
    B.ctl_mono = now;
    /* The CPU the sampled threads used over the window: the process's minus this thread's. */
    uint64_t proc = clock_ns(CLOCK_PROCESS_CPUTIME_ID), bg = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    uint64_t sampled = proc - B.ctl_proc > bg - B.ctl_bg ? (proc - B.ctl_proc) - (bg - B.ctl_bg) : 0;
    B.ctl_proc = proc;
    B.ctl_bg = bg;
    double load = dt > 0 ? (double)sampled / 1e9 / dt : 0;
    int resumed = B.ctl_idle && dt * 1e9 > 2.0 * AG_CTL_DT_NS && load >= 0.05;
    B.ctl_idle = load < AG_BUDGET_FLOOR;

    /* Budget over the last >= 1 s, or right after work resumed (only acted on with the
     * controller on: with fixed periods the user asked for exactly that rate). */
    if (ag.ctl[CM_EV_CPU].enabled && (now - B.bud_mono >= 1000000000ull || B.bud_soon)) {
        uint64_t a = agent_cpu_now(), p = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
        uint64_t cpu_seen = atomic_load(&ag_events_seen[CM_EV_CPU]);
        ag_budget_step(&B.bud, ag.cfg.cpu_budget, (double)(a - B.bud_agent),
                       (double)(cpu_seen - B.bud_cpu) * (double)cpu_sample_cost_ns(),
                       (double)(p - B.bud_proc), (double)(now - B.bud_mono));
        B.bud_agent = a;
        B.bud_proc = p;
        B.bud_cpu = cpu_seen;
        B.bud_mono = now;
    }
    B.bud_soon = resumed;
    if (B.bud.cpu < 1 && n) { /* samples the set point would have taken without it */
        B.over_budget_frac += (uint64_t)((double)n * (1 / B.bud.cpu - 1) * 1000);
        ag_drop_count(CM_EV_CPU, CM_DROP_OVER_BUDGET, B.over_budget_frac / 1000);
        B.over_budget_frac %= 1000;
    }
    ag_ctl_t *c = &ag.ctl[CM_EV_CPU];
    double old = c->period;
    double p = resumed ? old : ag_ctl_update_cpu(c, n, sampled, dt, B.bud.cpu);
    CM_DEBUG("cpu control: %llu samples, %.3f cores sampled over %.3f s%s, budget factors %.3f "
             "(cpu) %.3f (periodic work), period %.3f ms -> %.3f ms", (unsigned long long)n,
             load, dt, resumed ? " (work resumed)" : "", B.bud.cpu, B.bud.bg, old / 1e6, p / 1e6);
    if (p != old && (p > old * 1.02 || p < old * 0.98)) {
        atomic_store(&ag.cpu_period_ns, (uint64_t)p);
        ag_thread_set_cpu_period((uint64_t)p);
    } else {
        c->period = old; /* small changes are not applied: keep the model and the timers equal */
    }
    return resumed;
}

/* at_exit: the process is exiting. Its last chunk is sent only if it has something to say
 * (a row or a drop): a process that exits before its first sample (a short-lived fork/exec'd
 * helper) writes nothing at all, so that it costs microseconds. */
/* Under g_work (B is consistent; B.b NULL before bg_main's start: nothing built yet). */
static int nothing_to_say(void) {
    for (int t = 1; t < CM_EV_COUNT; t++)
        if ((B.b && ag_builder_samples(B.b, (cm_event_type_t)t)) ||
            atomic_load(&ag_events_seen[t]) != B.seen0[t])
            return 0;
    for (int t = 0; t < CM_EV_COUNT; t++)
        for (int r = 1; r < AG_DROP_REASONS; r++)
            if (atomic_load(&ag_drops[t][r]) != B.drops0[t][r])
                return 0;
    /* live sampled objects (INUSE rows) need an ALLOC sample at some point; aggregates a slot */
    return atomic_load(&ag_events_seen[CM_EV_ALLOC]) == 0 && !ag_agg_any();
}

static void cut_chunk(int at_exit) {
    if (at_exit && nothing_to_say())
        return;
    ag_spans_flip(); /* before the cut's time: the spans it closes all ended by then */
    uint64_t end = ag_now_real();
    if (end <= B.chunk_start_real)
        end = B.chunk_start_real + 1;
    cm_header_t h;
    memset(&h, 0, sizeof h);
    h.service = (cm_str_t){ag.cfg.service, (uint32_t)strlen(ag.cfg.service)};
    h.version = (cm_str_t){ag.cfg.version, (uint32_t)strlen(ag.cfg.version)};
    h.host = (cm_str_t){ag.host, (uint32_t)strlen(ag.host)};
    h.agent_version = (cm_str_t){FLEETPROF_VERSION_STRING, (uint32_t)strlen(FLEETPROF_VERSION_STRING)};
    h.pid = (uint32_t)ag.pid;
    h.process_start_unix_ns = ag_process_start_ns();
    h.start_unix_ns = B.chunk_start_real;
    h.end_unix_ns = end;
    if (getrandom(h.chunk_id, sizeof h.chunk_id, GRND_NONBLOCK) != (ssize_t)sizeof h.chunk_id) {
        uint64_t x = end ^ ((uint64_t)ag.pid << 32) ^ ag.sequence;
        memcpy(h.chunk_id, &x, 8);
        x = x * 0x9e3779b97f4a7c15ull + clock_ns(CLOCK_MONOTONIC);
        memcpy(h.chunk_id + 8, &x, 8);
    }
    h.format_minor = CM_FORMAT_MINOR;

    ag_hooks_bg_chunk(B.b, end); /* INUSE rows and sub-threshold aggregates */
    ag_spans_emit(B.b, B.chunk_start_real, end);
    cm_sampling_t samp[5];
    uint32_t ns = 0;
    uint64_t seen[CM_EV_COUNT];
    for (int t = 1; t < CM_EV_COUNT; t++)
        seen[t] = atomic_load(&ag_events_seen[t]);
    if (ag.cfg.cpu_rate > 0)
        samp[ns++] = (cm_sampling_t){CM_EV_CPU, (uint64_t)ag.ctl[CM_EV_CPU].period, 0,
                                     (uint32_t)(ag.ctl[CM_EV_CPU].target + 0.5),
                                     seen[CM_EV_CPU] - B.seen0[CM_EV_CPU],
                                     ag_builder_samples(B.b, CM_EV_CPU)};
    if (ag.cfg.wall_hz > 0)
        samp[ns++] = (cm_sampling_t){CM_EV_WALL, (uint64_t)(1e9 / ag.cfg.wall_hz), 0,
                                     (uint32_t)(ag.cfg.wall_hz * ag.cfg.wall_threads + 0.5),
                                     seen[CM_EV_WALL] - B.seen0[CM_EV_WALL],
                                     ag_builder_samples(B.b, CM_EV_WALL)};
    ns += ag_hooks_sampling(B.b, samp + ns, B.seen0);
    h.sampling = samp;
    h.n_sampling = ns;

    cm_drop_t drops[CM_EV_COUNT * AG_DROP_REASONS];
    uint32_t nd = 0;
    for (int t = 0; t < CM_EV_COUNT; t++)
        for (int r = 1; r < AG_DROP_REASONS; r++) {
            uint64_t v = atomic_load(&ag_drops[t][r]);
            if (v != B.drops0[t][r])
                drops[nd++] = (cm_drop_t){(uint32_t)r, (uint32_t)t, v - B.drops0[t][r]};
            B.drops0[t][r] = v;
        }
    h.drops = drops;
    h.n_drops = nd;
    h.sequence = ag.sequence++;
    uint64_t a = agent_cpu_now(), p = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    h.agent_cpu_ns = a - B.bg_cpu0;
    CM_DEBUG("chunk %llu: agent cpu %llu ns (bg thread %llu total, handler body %llu ns x %llu, "
             "signal %llu ns, records %llu of which %llu LOCK, lock hooks %llu ns total), "
             "process cpu %llu ns",
             (unsigned long long)h.sequence, (unsigned long long)h.agent_cpu_ns,
             (unsigned long long)clock_ns(CLOCK_THREAD_CPUTIME_ID),
             (unsigned long long)(atomic_load(&ag_handler_ns_n)
                                      ? atomic_load(&ag_handler_ns_sum) / atomic_load(&ag_handler_ns_n)
                                      : 0),
             (unsigned long long)atomic_load(&ag_handler_ns_n),
             (unsigned long long)ag.signal_cost_ns,
             (unsigned long long)atomic_load(&ag_samples_taken),
             (unsigned long long)atomic_load(&ag_lock_records),
             (unsigned long long)atomic_load(&ag_lock_cost_ns),
             (unsigned long long)(p - B.proc_cpu0));
    h.process_cpu_ns = p - B.proc_cpu0;
    h.work_units = ag_work_take();
    ag_symstats_t ss;
    ag_symbols_stats(&ss);
    CM_DEBUG("symbols: %llu objects opened (%llu function symbols) in %llu ns; %llu lookups "
             "in %llu ns in total, opening included; %llu loads deferred (descriptors); %llu "
             "objects unnamed (no elfutils); %llu objects unnamed (foreign malloc)",
             (unsigned long long)ss.objects, (unsigned long long)ss.symbols,
             (unsigned long long)ss.load_ns, (unsigned long long)ss.lookups,
             (unsigned long long)ss.lookup_ns, (unsigned long long)ss.deferred,
             (unsigned long long)ss.nolib, (unsigned long long)ss.foreign);

    uint8_t *frame = NULL;
    size_t len = 0;
    char err[256] = "";
    size_t est = ag_builder_bytes(B.b);
    int rc = ag_builder_finish(B.b, &h, &frame, &len, err, sizeof err);
    if (rc == 0 && est > 65536) { /* small chunks say little about compression */
        B.enc_ratio = (double)len / (double)est;
        if (B.enc_ratio < 0.25)
            B.enc_ratio = 0.25;
    }
    if (rc == 0 && len > AG_CHUNK_MAX) {
        /* The collector would refuse it (and Kafka could not carry it): files only. Rare:
         * the early cut (AG_CHUNK_SOFT) keeps chunks well below; what it does not see is
         * added at the cut (INUSE rows of a huge live heap, aggregates). */
        if (!B.warned_size++)
            CM_WARN("chunk %llu is %zu bytes, above the %u-byte limit: not sent to the "
                    "collector (written to FLEETPROF_OUTPUT only, if set)",
                    (unsigned long long)h.sequence, len, AG_CHUNK_MAX);
        int filed = ag_sender_write_file(frame, len, h.sequence) == 0;
        /* lost to the collector's pipeline (or, files only, not written): its counts go on */
        if (ag_sender_uses_socket())
            ag_sender_give_back(drops, nd, CM_DROP_ENCODE_FAILED);
        else if (!filed)
            ag_sender_give_back(drops, nd, CM_DROP_OUTPUT_FAILED);
        free(frame);
    } else if (rc == 0) {
        ag_sender_submit(frame, len, h.sequence, drops, nd);
    } else {
        ag_sender_give_back(drops, nd, CM_DROP_ENCODE_FAILED);
        if (!B.warned_encode++)
            CM_WARN("chunk %llu not encoded: %s: %s", (unsigned long long)h.sequence,
                    cm_errname(rc), err);
    }
    B.bg_cpu0 = a;
    B.proc_cpu0 = p;
    for (int t = 1; t < CM_EV_COUNT; t++)
        B.seen0[t] = seen[t];
    B.chunk_start_real = end;
    B.chunk_start_mono = ag_now_mono();
}

static int g_foreign_malloc; /* the global malloc is not one this thread may call */

static void *bg_main(void *arg) {
    (void)arg;
    /* Process-directed signals are the application's business: keep them off this thread. */
    sigset_t set, wait_set, self_set;
    sigfillset(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    wait_set = set; /* inside ppoll: our signal only (a wake) */
    sigdelset(&wait_set, ag_sig);
    sigemptyset(&self_set);
    sigaddset(&self_set, ag_sig);
    g_uid = getuid();
    atomic_store(&g_bg_tid, (pid_t)syscall(SYS_gettid));
    ag_cfi_between_objects = ag_creds_serve_quick; /* set*id callers wait for this thread */
    /* Nothing to do yet (the rings fill, timers run): a process that is gone within
     * AG_START_DELAY_NS never pays for the setup below, unless a request (exit with samples to
     * send, flush, SIGTERM) comes first. */
    struct timespec delay = {0, (long)AG_START_DELAY_NS};
    if (!atomic_load(&ag.requests) && !atomic_exchange(&g_wake_early, 0))
        ppoll(NULL, 0, &delay, &wait_set);
    atomic_store(&g_wake_pending, 0);
    ag_creds_serve(); /* a credential change waits for this thread (creds.c): at every step */
    pthread_setname_np(pthread_self(), "fleetprof"); /* visible in top -H, perf, gdb */
    /* Issue 13: whose malloc is this? The agent's own allocations never go there (ag_alloc.c),
     * but elfutils and dlopen would. Once, here rather than in the constructor: a short-lived
     * process never pays for the object walk. */
    {
        char why[512];
        ag_loader_enter();
        int trusted = ag_malloc_trusted(why, sizeof why);
        ag_loader_leave();
        ag_creds_serve();
        if (!trusted) {
            g_foreign_malloc = 1;
            ag_symbols_disable();
            CM_INFO("%s: no symbols are read in this process (elfutils and dlopen would call "
                    "that malloc from the agent's thread); frames keep their build id and "
                    "offset, for the aggregator to name", why);
        }
    }
    if (ag_alloc_bypass_stats.slots || ag_alloc_bypass_stats.failed)
        CM_DEBUG("allocation sampling off: %u calls of %u objects go to the allocator directly "
                 "(%u left to the hooks: read-only page; %u bound elsewhere)",
                 ag_alloc_bypass_stats.slots, ag_alloc_bypass_stats.objects,
                 ag_alloc_bypass_stats.failed, ag_alloc_bypass_stats.foreign);
    /* Unwind tables first: until they are published, samples carry copies of their stacks
     * (defer.c). Not under the work lock: a fork meanwhile copies at most a half-built
     * private table, which the child's ticks rebuild. */
    /* The first chunk's agent and process CPU count from here: building the tables (and the
     * symbol tables after) is the agent's cost too (~30 ms for python3's objects; ~0.3-0.6 s
     * under ThreadSanitizer's instrumentation). */
    uint64_t agent_cpu0 = agent_cpu_now(), proc_cpu0 = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    if (ag_defer_test_delay_ns) { /* FLEETPROF_TEST_CFI_DELAY_MS: a slow start, for tests */
        /* A step that serves no credential request (tests/hostile/setxid_slow.c): only a
         * give-up ends it early, as ag_creds_serve would. */
        for (uint64_t left = ag_defer_test_delay_ns; left;) {
            uint64_t ns = left < 10000000u ? left : 10000000u;
            struct timespec d = {0, (long)ns};
            while (nanosleep(&d, &d) != 0 && errno == EINTR)
                ;
            left -= ns;
            ag_creds_quit_point();
        }
    }
    /* Threads the program started without our pthread_create wrapper (before the agent was
     * loaded; under a sanitizer, all of them) are found by the /proc scan: one now, so that
     * they are sampled (from stack copies) and their wall time counted from here rather than
     * from after the table build (1-2 s under ThreadSanitizer). */
    int found0;
    ag_thread_scan(&found0);
    ag_creds_serve();
    ag_cfi_tick();
    ag_py_tick(); /* Python frames from the first tables on, if the runtime is up */
    ag_creds_serve();
    /* Samples taken until now hold stack copies (defer.c), unwound as the rings are drained;
     * from here on the handler unwinds with the published tables. */

    pthread_mutex_lock(&ag_work_mu);
    uint64_t now = ag_now_mono();
    /* Start is cheap: what costs milliseconds (the signal cost calibration, 200 signals to
     * this thread; populating the live-heap table, 2 MiB) waits for AG_LAZY_NS, which a
     * short-lived process (a fork/exec'd helper, /bin/true under LD_PRELOAD) never reaches. */
    uint64_t lazy_at = now + AG_LAZY_NS;
    B.b = ag_builder_new();
    /* The first chunk covers the samples taken since the start, before the tables too (their
     * times would otherwise be clamped to a start hundreds of ms late on a loaded machine). */
    B.chunk_start_real = g_start_real;
    B.chunk_start_mono = now;
    B.bud_agent = agent_cpu_now();
    B.bud_proc = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    B.bg_cpu0 = agent_cpu0;
    B.proc_cpu0 = proc_cpu0;
    B.bud_mono = B.ctl_mono = now;
    B.ctl_seen = atomic_load(&ag_events_seen[CM_EV_CPU]);
    B.ctl_proc = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    B.ctl_bg = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    /* Every counter counts from the agent's start (zero) or from the fork (the baselines
     * ag_bg_after_fork_child took), not from this thread's start: the application runs
     * meanwhile, its records wait in the rings and go into the first chunk, and a burst of
     * allocation samples before the first drain (1,280 x 1 MiB as the program's
     * first work, 0.2 ms) filled the ring with none of its drops reported. */
    B.bud.bg = B.bud.cpu = 1;
    B.bud_cpu = B.ctl_seen;
    B.enc_ratio = 1;
    uint64_t wall_ns = ag.cfg.wall_hz > 0 ? (uint64_t)(1e9 / ag.cfg.wall_hz) : 0;
    uint64_t next_wall = now + wall_ns, next_ctl = now + AG_CTL_DT_NS;
    uint64_t next_scan = now, next_chunk = now + ag.cfg.interval_ns, scan_soon = 0;
    uint64_t last_scan = now, last_wall = now;
    int unresolved = 0;
    pthread_mutex_unlock(&ag_work_mu);

    for (;;) {
        now = ag_now_mono();
        /* A thread without stack bounds is resolved from the sp its first sample records: a
         * scan within 100 ms once one has (checked on every wakeup, no system call), not a
         * /proc scan every 100 ms while any is unresolved -- a thread that never runs
         * (jemalloc's background threads in redis-server) kept that up for good: 10 scans a
         * second, 2x the thread's idle CPU with FLEETPROF_WALL_HZ=0. */
        if (unresolved && !scan_soon && next_scan > last_scan + AG_SCAN_NS / 5 &&
            ag_thread_resolvable())
            next_scan = last_scan + AG_SCAN_NS / 5;
        uint64_t next = next_ctl < next_chunk ? next_ctl : next_chunk;
        if (next_scan < next)
            next = next_scan;
        /* With wall ticks on, the other deadlines wait for the next tick when it comes within
         * one tick period after them: one wakeup instead of two, the thread's main cost. (Was:
         * whenever the deadline was under a tick away; with the ticks slowed by the budget a
         * control window then waited up to 1/(WALL_HZ f) = 2.5 s.) */
        if (wall_ns && next_wall < next + wall_ns)
            next = next_wall;
        if (scan_soon && next_scan < next)
            next = next_scan;
        int timeout = next > now ? (int)((next - now + 999999) / 1000000) : 0;
        short sev;
        int swake;
        pthread_mutex_lock(&ag_work_mu);
        int sfd = ag_sender_step(&sev, &swake);
        pthread_mutex_unlock(&ag_work_mu);
        if (swake >= 0 && swake < timeout)
            timeout = swake;
        if (ag_sigroom_off && timeout > AG_SIGROOM_POLL_MS)
            timeout = AG_SIGROOM_POLL_MS; /* no wake signal: requests are seen at least so */
        if (atomic_load(&ag.requests))
            timeout = 0;
        struct pollfd pfd = {sfd, sev, 0};
        struct timespec ts = {timeout / 1000, (long)(timeout % 1000) * 1000000L};
        ppoll(&pfd, sfd >= 0 ? 1 : 0, &ts, &wait_set); /* EINTR: a wake */
        atomic_store(&g_wake_pending, 0);
        int req = atomic_exchange(&ag.requests, 0);
        ag_creds_serve(); /* a credential change waits for this thread to take its own */

        pthread_mutex_lock(&ag_work_mu);
        /* Objects loaded or unloaded since the last tick, before any drain: a stack copy
         * (defer.c) taken in a library dlopen'ed meanwhile is then unwound with its table. */
        ag_cfi_tick();
        ag_py_tick(); /* a CPython interpreter to read frames of (pyframes.c) */
        now = ag_now_mono();
        if (lazy_at && now >= lazy_at && !(req & (AG_REQ_STOP | AG_REQ_SIGTERM))) {
            lazy_at = 0;
            if (!ag.signal_cost_ns && !ag_sigroom_off) { /* a fork child keeps its parent's */
                pthread_sigmask(SIG_UNBLOCK, &self_set, NULL); /* it signals this thread */
                ag.signal_cost_ns = ag_signal_calibrate();
                pthread_sigmask(SIG_BLOCK, &self_set, NULL);
            }
            if (ag_hcfg.alloc_on)
                ag_heap_populate();
            ag_lock_calibrate();
        }
        if (wall_ns && now >= next_wall && !(req & AG_REQ_STOP)) {
            drain(); /* so that wall_reuse sees each thread's latest wall record */
            wall_tick(now);
            last_wall = now;
            next_wall += (uint64_t)((double)wall_ns / B.bud.bg);
            if (next_wall < now)
                next_wall = now + wall_ns;
        }
        drain();
        if (ag_defer_reset_begin()) {
            /* no copy in progress, none taken from here: once every copy is unwound, the
             * arena is rewound and its pages given back */
            drain();
            ag_defer_reset_end();
            CM_DEBUG("deferred unwinding: %llu samples copied (no tables or no stack bounds "
                     "yet), %llu unwound, %llu turned away (arena full), %llu unreadable, "
                     "%llu resets, %.1f KiB of arena at most",
                     (unsigned long long)atomic_load(&ag_defer_stats.deferred),
                     (unsigned long long)atomic_load(&ag_defer_stats.resolved),
                     (unsigned long long)atomic_load(&ag_defer_stats.full),
                     (unsigned long long)atomic_load(&ag_defer_stats.vm_failed),
                     (unsigned long long)atomic_load(&ag_defer_stats.resets),
                     (double)atomic_load(&ag_defer_stats.peak_bytes) / 1024.0);
        }
        ag_hooks_bg_tick(now); /* ALLOC controller, flood-cap windows */
        if (now >= next_ctl) {
            double bg = B.bud.bg;
            int resumed = ag.cfg.cpu_rate > 0 && control(now);
            next_ctl = now + (resumed ? AG_RESUME_NS
                                      : stretch(AG_CTL_DT_NS, B.bud.bg, AG_CTL_MAX_NS));
            if (B.bud.bg > bg) { /* back from a stretch: the next tick and scan at the new pace */
                uint64_t w = last_wall + (uint64_t)((double)wall_ns / B.bud.bg);
                uint64_t sc = last_scan + stretch(AG_SCAN_NS, B.bud.bg, AG_SCAN_MAX_NS);
                if (wall_ns && w < next_wall)
                    next_wall = w > now ? w : now;
                if (!scan_soon && sc < next_scan)
                    next_scan = sc > now ? sc : now;
            }
        }
        if (now >= next_scan && !(req & AG_REQ_STOP)) { /* at exit: nothing new to find */
            int registered;
            unresolved = ag_thread_scan(&registered);
            last_scan = now;
            drain();
            ag_thread_reap();
            stat_sweep(0);
            /* Threads without stack bounds (found by a scan, not registered by themselves)
             * have leaf-only samples until a scan resolves them from an sp their first sample
             * recorded: after a scan that found new threads, four more at 10, 20, 40 and 80 ms
             * (before the next wall tick), then within 100 ms of an unresolved one's first
             * sample (above), else every 500 ms. */
            scan_soon = registered ? AG_SCAN_NS / 50 : scan_soon ? scan_soon * 2 : 0;
            if (scan_soon > AG_SCAN_NS / 5 * 4 / 5)
                scan_soon = 0;
            next_scan = now + (scan_soon ? scan_soon
                                         : stretch(AG_SCAN_NS, B.bud.bg, AG_SCAN_MAX_NS));
        }
        /* split a heavy interval: the estimate scaled by what the last chunk compressed to,
         * at least 1/4 (rows that compressed well may be followed by rows that do not) */
        int full = (double)ag_builder_bytes(B.b) * B.enc_ratio > (double)AG_CHUNK_SOFT;
        if (full || now >= next_chunk || (req & (AG_REQ_FLUSH | AG_REQ_STOP | AG_REQ_SIGTERM))) {
            cut_chunk((req & (AG_REQ_STOP | AG_REQ_SIGTERM)) != 0);
            /* On the deadline's grid when it was the deadline: waiting for a wall tick (above)
             * then does not add up. Ticks as far apart as the interval made every other chunk
             * two intervals long (19 chunks in 3.4 s at 100 ms). */
            uint64_t grid = next_chunk + ag.cfg.interval_ns;
            next_chunk = now >= next_chunk && grid > now ? grid : now + ag.cfg.interval_ns;
        }
        if (req & (AG_REQ_STOP | AG_REQ_SIGTERM))
            ag_sender_exit(AG_EXIT_SEND_MS);
        pthread_mutex_unlock(&ag_work_mu);

        if (req & AG_REQ_FLUSH) {
            pthread_mutex_lock(&ag_flush_mu);
            atomic_fetch_add(&ag.flush_done, 1);
            pthread_cond_broadcast(&ag_flush_cv);
            pthread_mutex_unlock(&ag_flush_mu);
        }
        if (req & AG_REQ_SIGTERM) {
            /* The last chunk is out: the handler waiting for it lets SIGTERM kill the process
             * as if we had never been here. */
            atomic_store(&ag.running, 0);
            ag_signal_sigterm_done();
        }
        if (req & AG_REQ_STOP)
            break;
    }
    pthread_mutex_lock(&ag_work_mu);
    ag_builder_free(B.b);
    B.b = NULL;
    pthread_mutex_unlock(&ag_work_mu);
    /* With the program's own malloc, glibc's thread exit would call it (free(NULL) of the
     * thread's strerror/strsignal buffers, __glibc_tls_internal_free): end with the system
     * call instead. Nothing of glibc's exit path is needed: this thread has no TSD values,
     * TLS destructors or cancellation handlers, and the kernel clears its tid, which
     * pthread_join waits on (the joiner frees its stack as usual). */
    if (g_foreign_malloc)
        syscall(SYS_exit, 0);
    return NULL;
}

int ag_bg_start(void) {
    g_start_real = ag_now_real(); /* within one CPU period of the first timer's arming */
    atomic_store(&g_bg_tid, 0);
    atomic_store(&g_wake_pending, 0);
    int rc = ag_thread_create_raw(&g_thread, bg_main, NULL);
    if (rc)
        return -rc;
    g_started = 1;
    return 0;
}

static int g_must_join; /* creds.c: the thread must be gone, not only idle */

void ag_bg_force_join(void) { g_must_join = 1; }

int ag_bg_alive(void) { return g_started; }

pid_t ag_bg_tid(void) { return atomic_load(&g_bg_tid); }

/* Credentials give-up (creds.c): the caller waits for this thread's tid to be gone, with system
 * calls only. Called where this thread holds no lock of ours; its timers go if the registry's
 * lock is free (else the handlers forward, ag.running being 0). The system call exit, as with
 * a foreign malloc (bg_main's end): glibc's exit path is not needed, and the kernel clears the
 * tid, which glibc's broadcast and pthread_join look at. What this thread built and its
 * socket are left (the process goes on unprofiled). */
void ag_bg_quit(void) {
    atomic_store(&ag.running, 0);
    ag_thread_stop_all_try();
    ag_signal_sigterm_restore();
    for (;;)
        syscall(SYS_exit, 0);
}

void ag_bg_stop(void) {
    if (!g_started)
        return;
    g_started = 0;
    /* A process with nothing to say (exiting before its first sample: a short-lived helper)
     * does not wait for the background thread, which may not even have run yet: the work lock
     * is taken and kept, so that the thread stays out of its work until exit ends it. */
    if (!g_must_join && pthread_mutex_trylock(&ag_work_mu) == 0) {
        if (nothing_to_say())
            return; /* ag_work_mu stays held on purpose */
        pthread_mutex_unlock(&ag_work_mu);
    }
    ag_bg_wake(AG_REQ_STOP);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 5;
    if (pthread_timedjoin_np(g_thread, NULL, &ts) != 0)
        CM_WARN("background thread did not stop within 5 s; last chunk may be lost");
}

void ag_bg_forget_child(void) {
    atomic_store(&ag.running, 0);
    g_started = 0; /* the parent's thread: nothing to stop or join here */
}

void ag_bg_after_fork_child(void) {
    g_started = 0;
    ag_creds_after_fork_child();
    ag_cfi_after_fork_child();
    atomic_store(&g_bg_tid, 0); /* the parent's thread: not in this process */
    atomic_store(&g_wake_pending, 0);
    atomic_store(&g_wake_early, 0);
    /* Consistent: the atfork prepare handler held ag_work_mu, so the parent's thread was not
     * in the middle of an update. Its records belong to the parent's profile. */
    ag_builder_free(B.b);
    for (uint32_t i = 0; i < AG_MAX_THREADS; i++)
        if (ag_threads[i].wall_rec)
            ag_threads[i].wall_rec->len = 0;
    memset(&B, 0, sizeof B);
    for (int t = 1; t < CM_EV_COUNT; t++) /* the parent's counts are the parent's */
        B.seen0[t] = atomic_load(&ag_events_seen[t]);
    for (int t = 0; t < CM_EV_COUNT; t++)
        for (int r = 0; r < AG_DROP_REASONS; r++)
            B.drops0[t][r] = atomic_load(&ag_drops[t][r]);
    stat_sweep(1);
    pthread_mutex_init(&ag_work_mu, NULL);
    pthread_mutex_init(&ag_flush_mu, NULL);
    pthread_cond_init(&ag_flush_cv, NULL);
}
