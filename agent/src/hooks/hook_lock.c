/* Lock contention: interposes pthread_mutex_lock/timedlock, pthread_rwlock_rd/wrlock (and
 * their timed forms), pthread_spin_lock, and measures the mutex re-acquisition of
 * pthread_cond_wait/timedwait/clockwait (with pthread_cond_signal/broadcast stamping wake-ups).
 *
 * Uncontended path: the matching trylock succeeds -- no clock read, no unwinding. For
 * pthread_mutex_lock the whole decision is a look at the lock word (held: straight to the
 * contended path, see pthread_mutex_lock), one function pointer (g_mutex_first: trylock when
 * the lock hooks are on, the real pthread_mutex_lock when off or not decided yet) and one
 * compare with EBUSY (pthread_mutex_lock never returns EBUSY, so with the hooks off the hook
 * is a plain forward); everything else lives in an out-of-line slow path. Unlock is not
 * interposed. Contended: the real blocking call is timed with rdtsc (~10-30 ns) once hooks.c
 * has calibrated an invariant TSC, with the vDSO CLOCK_MONOTONIC (~20-90 ns) before that; a
 * wait >= FLEETPROF_LOCK_THRESHOLD (default 10 ms) that ends with the lock taken is one LOCK
 * event (stack, lock address, wait ns, span context); shorter contended waits are summed per
 * stack (agg.c, CM_SF_AGGREGATE rows); both subject to the flood sampling below. Timed
 * acquisitions that time out are not reported.
 *
 * Flood sampling, by wait time. Above-threshold events beyond FLEETPROF_LOCK_RATE per second
 * would cost the application (an unwind, a ring record each) more than the budget allows, so
 * then every contended wait is sampled in proportion to its length, as gperftools samples
 * allocations by bytes: the waits of a thread are laid end to end and a Poisson process of
 * mean spacing W ns runs along them; a wait of ns is sampled when a point falls inside it,
 *     q = P(sampled) = 1 - exp(-ns / W),
 * and then stands for ns / q of wait and 1 / q waits (Horvitz-Thompson: E[kept x 1/q] = 1 for
 * each wait, so totals stay unbiased). The points are a per-thread countdown (T.left, drawn
 * Exp(W), memoryless so it is redrawn whenever W changes): a wait that is not sampled costs a
 * subtraction and a compare in TLS -- no atomic, no random draw. Long waits (ns >> W) are
 * always kept, so a few preempted holders do not make the total's variance explode as
 * uniform 1-in-N sampling would. W is the larger of
 *     (estimated above-threshold wait ns per second) / cap      when events/s > cap,
 *     (estimated contended wait ns per second) / AG_LOCK_AGG_RATE  when waits/s > that
 * (the second one: a flood of waits just under the threshold, each an unwind and a hash into
 * the aggregates, ~150-250 ns), set by the bg thread every 250 ms from the reports' own
 * estimates (unbiased whatever W was, so no feedback loop); 0 (every wait reported exactly)
 * while both rates are under their caps. A burst the bg thread has not measured yet is cut
 * per thread: after 2 x (cap x 0.25 s) events, or 2 x (AG_LOCK_AGG_RATE x 0.25 s) reports,
 * in the bg's current window, the thread uses its own W = its wait ns in the window so far /
 * (that cap x 0.25 s) until the window ends. Events of a sampled wait are flagged
 * CM_SF_SUBSAMPLED; above-threshold waits not recorded are counted as DROP_SUBSAMPLED
 * (per-thread counts, flushed every 256 contended waits).
 *
 * Condition variables. pthread_cond_wait unlocks the mutex, waits for a signal and re-locks
 * the mutex inside glibc through an internal function (__pthread_mutex_cond_lock) that no
 * interposer sees; the wait for the signal itself is not contention (an idle consumer waiting
 * for work is not a lock problem). So the re-acquisition is estimated from outside:
 *   - pthread_cond_signal/broadcast stamp the CLOCK_MONOTONIC time into a per-condvar slot of
 *     a fixed table (AG_CV_SLOTS, address hash; atomics only) *before* calling the real
 *     function, and only when our waiters count for that slot is non-zero (so a signal with
 *     no waiter costs one load). The stamp is a monotonic max (CAS), so a signaller preempted
 *     between its clock read and its store cannot move the stamp back.
 *   - the wait hooks count themselves into the slot, time the real call, and on return
 *     re-acquire = return time - max(call start, the slot's last stamp, the deadline when the
 *     call timed out). A re-acquire >= the threshold is a LOCK event on the mutex (the caller
 *     of pthread_cond_wait is the leaf); shorter ones, from AG_CV_FLOOR_NS up, go to the
 *     aggregates; below the floor they are taken for the scheduler's wake-up latency and not
 *     recorded.
 * Approximation, conservative by construction (it can miss contention, not invent it):
 *   - the estimate includes the woken thread's scheduler wake-up latency (a loaded machine
 *     can make it reach the threshold);
 *   - a wake-up without a stamp after the call start (spurious wake-up, a signal from another
 *     process on a process-shared condvar, a signal before the hooks were on) is not reported;
 *   - two condvars sharing a slot: the later stamp of the other one shortens our estimate;
 *     a later signal (for another waiter) stamped before our read also shortens it;
 *   - a waiter cancelled inside the wait leaves the slot's waiters count one too high (the
 *     slot's signals keep stamping: a cost, not an error).
 * The real cond functions are looked up with dlvsym(..., "GLIBC_2.3.2"): plain dlsym would
 * return the GLIBC_2.2.5 compatibility symbols (the pre-NPTL condvar ABI).
 *
 * Agent cost (ag_lock_cost_ns, which cpuacct.c adds to the agent's CPU: chunk header
 * agent_cpu_ns, CPU budget): every contended wait is charged g_cost_tsc or g_cost_clock
 * (a failed trylock, two reads of the interval clock, the countdown: measured by the bg
 * thread with its deferred start work, ag_lock_calibrate, so that a short-lived process never
 * pays for it; typical figures until then),
 * counted per thread and flushed every 256 waits; every 8th report (event or aggregate) times
 * itself from start to end and is charged 8 x that (a preempted one, over 20 us, counts as
 * the thread's mean of the others). The flood sampling's bookkeeping is part of both. Not
 * counted: the successful trylock of the uncontended path (~1-2 ns; without the agent the
 * lock call does the same atomic) and the waiters count / stamps of the cond hooks.
 *
 * Contract: no locks, no allocation; the agent's own threads and slow paths (guard set) get a
 * plain forward in the contended path. With FLEETPROF_ENABLED=0 or FLEETPROF_LOCK=0 every
 * hook is a plain forward; so it is when a sanitizer runtime is loaded (__asan_init or
 * __tsan_init defined, or our pthread_mutex_lock not the one programs call): ASan and TSan
 * intercept pthread_mutex_lock and TSan pthread_cond_* too, and call ours as their "real"
 * function (dlsym/dlvsym RTLD_NEXT finds our unversioned definitions before libc's), where
 * timing and unwinding from inside the runtime's interceptor measure the runtime, not the
 * lock; ASan does not intercept pthread_cond_*, pthread_rwlock_* or pthread_spin_*, which
 * would otherwise be measured for programs and not for others.
 */
#include "hooks.h"
#include "mutex_layout.h"

#include <dlfcn.h>
#include <errno.h>
#include "fmath.h"
#include <pthread.h>
#include <string.h>

typedef int (*lk_fn)(void *);
typedef int (*lkt_fn)(void *, const struct timespec *);
typedef int (*cv_fn)(pthread_cond_t *);
typedef int (*cvw_fn)(pthread_cond_t *, pthread_mutex_t *);
typedef int (*cvt_fn)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
typedef int (*cvc_fn)(pthread_cond_t *, pthread_mutex_t *, clockid_t, const struct timespec *);

static struct {
    lk_fn mutex_lock, mutex_trylock, rd, tryrd, wr, trywr, spin, tryspin;
    lk_fn mutex_unlock_real; /* libc's (ours is not interposed): for ag_lock_calibrate */
    lkt_fn mutex_timed, rd_timed, wr_timed;
    cv_fn signal, broadcast;
    cvw_fn wait;
    cvt_fn timedwait;
    cvc_fn clockwait;
} L;

_Atomic uint64_t ag_lock_cost_ns, ag_lock_records;
static _Atomic int g_on;       /* lock hooks active (set once, by lock_init) */
/* ns per contended wait outside the reports, vDSO clock timing; the same with rdtsc timing.
 * Typical figures (2 x ~20 ns clock, 2 x ~8 ns rdtsc, a failed trylock) until measured. */
static _Atomic uint64_t g_cost_clock = 50, g_cost_tsc = 30;

/* Flood sampling (see the head comment). Globals: written by the bg thread (period, epoch) or
 * added to by reports (rare under a flood); T: the calling thread's own state. */
static _Atomic uint64_t g_period;     /* W, ns of wait per sample; 0: every wait reported */
static _Atomic uint32_t g_epoch;      /* the bg's 250 ms window number (burst cut) */
static _Atomic uint64_t g_est_ns;     /* sum of the reported events' weights (estimate) */
static _Atomic uint64_t g_est_milli;  /* sum of their counts, milli-units (estimate) */
static _Atomic uint64_t g_agg_ns;     /* the same for the aggregated waits (flushed) */
static _Atomic uint64_t g_agg_milli;
static _Atomic uint64_t g_skipped;    /* above-threshold waits not recorded (flushed) */
#define AG_LOCK_AGG_RATE 1000.0       /* aggregated reports per second before sampling */
static uint64_t g_share = 26;         /* events per window and thread before the burst cut */
static const uint64_t g_share_all = (uint64_t)(AG_LOCK_AGG_RATE * 0.25); /* reports, same */
static AG_TLS struct {
    int64_t left;      /* ns of wait before the next sample point */
    uint64_t w;        /* the W that left was drawn with */
    uint64_t local_w;  /* this thread's burst W, valid while epoch == g_epoch */
    uint64_t ns_ev;    /* the window's above-threshold wait ns */
    uint64_t ns_all;   /* the window's contended wait ns */
    uint64_t agg_ns, agg_milli; /* aggregated estimates not flushed yet */
    uint32_t epoch;    /* window of n_ev, n_all, ns_ev, ns_all, local_w */
    uint32_t n_ev;     /* above-threshold waits reported exactly in the window */
    uint32_t n_all;    /* waits reported exactly in the window */
    uint32_t waits;    /* contended waits not charged yet */
    uint32_t skipped;  /* above-threshold waits not recorded, not flushed yet */
    uint32_t reports;  /* reports so far (every 8th measures itself) */
    uint32_t rep_n;    /* measured reports not preempted, and their ns */
    uint64_t rep_sum;
} T;

static void *sym(void *slot, const char *name) {
    void *f = dlsym(RTLD_NEXT, name);
    memcpy(slot, &f, sizeof f);
    return f;
}

/* The new (NPTL) condvar ABI; plain dlsym returns the GLIBC_2.2.5 compatibility versions. */
static void *symv(void *slot, const char *name) {
    void *f = dlvsym(RTLD_NEXT, name, "GLIBC_2.3.2");
    if (!f) /* another libc: its default version */
        f = dlsym(RTLD_NEXT, name);
    memcpy(slot, &f, sizeof f);
    return f;
}

#define REAL(field, name)                                                                          \
    (AG_LIKELY(L.field) ? L.field : (__typeof__(L.field))sym(&L.field, name))
#define REALV(field, name)                                                                         \
    (AG_LIKELY(L.field) ? L.field : (__typeof__(L.field))symv(&L.field, name))

/* The contended path may record: hooks on and not inside the agent (guard). */
static inline int lock_active(void) {
    return AG_LIKELY(atomic_load_explicit(&g_on, memory_order_relaxed)) && !ag_hook_guard;
}

/* ---- pthread_mutex_lock's one-pointer fast path ---- */

static int mutex_first_resolve(void *m) { return REAL(mutex_lock, "pthread_mutex_lock")(m); }
static _Atomic(lk_fn) g_mutex_first = mutex_first_resolve;
/* glibc's private mutex fields are read only once mutex_layout.c has checked them on this libc
 * (lock_init): 0 until then and on any other libc, where every lock goes the plain way. */
static _Atomic int g_word_ok;

static int lock_front(void);

/* Library constructor: resolves every real function (no dlsym on the hot paths afterwards),
 * measures a contended wait's bookkeeping cost and turns the hooks on. Calls ag_hooks_init
 * itself (idempotent) rather than relying on the order of constructors. */
__attribute__((constructor(102))) static void lock_init(void) {
    ag_hooks_init();
    ag_hook_guard++;
    sym(&L.mutex_lock, "pthread_mutex_lock");
    sym(&L.mutex_trylock, "pthread_mutex_trylock");
    sym(&L.mutex_timed, "pthread_mutex_timedlock");
    sym(&L.rd, "pthread_rwlock_rdlock");
    sym(&L.tryrd, "pthread_rwlock_tryrdlock");
    sym(&L.wr, "pthread_rwlock_wrlock");
    sym(&L.trywr, "pthread_rwlock_trywrlock");
    sym(&L.rd_timed, "pthread_rwlock_timedrdlock");
    sym(&L.wr_timed, "pthread_rwlock_timedwrlock");
    sym(&L.spin, "pthread_spin_lock");
    sym(&L.tryspin, "pthread_spin_trylock");
    symv(&L.signal, "pthread_cond_signal");
    symv(&L.broadcast, "pthread_cond_broadcast");
    symv(&L.wait, "pthread_cond_wait");
    symv(&L.timedwait, "pthread_cond_timedwait");
    symv(&L.clockwait, "pthread_cond_clockwait");
    g_share = (uint64_t)(ag_hcfg.lock_cap * 0.25) + 1;
    int front = lock_front();
    /* Only in front (no sanitizer runtime, whose unlock interceptor would see an unlock of a
     * mutex it never saw locked); the real unlock, since ours is not interposed anyway. */
    ag_mutex_fn unlock = (ag_mutex_fn)sym(&L.mutex_unlock_real, "pthread_mutex_unlock");
    int layout = front && L.mutex_lock &&
                 ag_mutex_layout_check(ag_libc_version(), (ag_mutex_fn)L.mutex_lock, unlock) == 0;
    atomic_store(&g_word_ok, layout);
    int on = atomic_load(&ag_hooks_state) > 0 && ag_hcfg.lock_on && L.mutex_lock &&
             L.mutex_trylock && front;
    if (on)
        atomic_store(&g_mutex_first, L.mutex_trylock);
    else if (L.mutex_lock)
        atomic_store(&g_mutex_first, L.mutex_lock);
    atomic_store(&g_on, on);
    ag_hook_guard--;
}

/* bg thread, once, with the deferred start work (bgthread.c, AG_LAZY_NS after the start; a
 * fork child keeps its parent's figures): the cost of a contended wait's bookkeeping, a failed
 * trylock (held by us) plus two clock reads plus the countdown (2 ns), the least of 8 rounds
 * of 32 so that a preemption does not count. Only with the hooks on: no sanitizer runtime
 * then, whose unlock interceptor would see an unlock of a mutex it never saw locked (our lock
 * and trylock are the real ones). */
void ag_lock_calibrate(void) {
    static int done;
    if (!atomic_load(&g_on) || done++)
        return;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    L.mutex_lock(&mu);
    volatile uint64_t sink = 0;
    uint64_t cc = UINT64_MAX, ct = UINT64_MAX;
    for (int r = 0; r < 8; r++) {
        uint64_t a = ag_hook_clock();
        for (int i = 0; i < 32; i++)
            sink += (uint64_t)L.mutex_trylock(&mu) + ag_hook_clock() + ag_hook_clock();
        uint64_t b = ag_hook_clock();
        for (int i = 0; i < 32; i++)
            sink += (uint64_t)L.mutex_trylock(&mu) + ag_tsc() + ag_tsc();
        uint64_t c = ag_hook_clock();
        cc = (b - a) / 32 + 2 < cc ? (b - a) / 32 + 2 : cc;
        ct = (c - b) / 32 + 2 < ct ? (c - b) / 32 + 2 : ct;
    }
    (void)sink;
    L.mutex_unlock_real(&mu);
    atomic_store_explicit(&g_cost_clock, cc, memory_order_relaxed);
    atomic_store_explicit(&g_cost_tsc, ct, memory_order_relaxed);
}

/* ---- reporting (slow path) ---- */

/* Interval timing of contended waits: rdtsc (~10-30 ns) once hooks.c has calibrated an invariant
 * TSC (ag_tsc_scale, 32.32 fixed point ns per tick), the vDSO clock (~20-30 ns) until then.
 * lk_ns converts an interval taken with lk_stamp's clock (scale: the one read at its start). */
static inline uint64_t lk_stamp(uint64_t *scale) {
    *scale = atomic_load_explicit(&ag_tsc_scale, memory_order_relaxed);
    return *scale ? ag_tsc() : ag_hook_clock();
}
static inline uint64_t lk_ns(uint64_t scale, uint64_t t0) {
    if (!scale)
        return ag_hook_clock() - t0;
    uint64_t d = ag_tsc() - t0;
    return (d >> 32) * scale + ((d & 0xffffffffu) * scale >> 32);
}

/* Exp(w) draw for the countdown. */
static int64_t lk_draw(uint64_t w) {
    double u = (double)((ag_hook_rand() >> 11) + 1) * 0x1p-53; /* (0, 1] */
    double d = -ag_log(u) * (double)w;
    return d < 9e18 ? (int64_t)d + 1 : INT64_MAX;
}

/* Charges the thread's pending contended waits and flushes its skipped count. */
static __attribute__((noinline)) void lk_flush(void) {
    uint64_t c = atomic_load_explicit(atomic_load_explicit(&ag_tsc_scale, memory_order_relaxed)
                                          ? &g_cost_tsc
                                          : &g_cost_clock,
                                      memory_order_relaxed);
    atomic_fetch_add_explicit(&ag_lock_cost_ns, T.waits * c, memory_order_relaxed);
    if (T.skipped)
        atomic_fetch_add_explicit(&g_skipped, T.skipped, memory_order_relaxed);
    if (T.agg_milli) {
        atomic_fetch_add_explicit(&g_agg_ns, T.agg_ns, memory_order_relaxed);
        atomic_fetch_add_explicit(&g_agg_milli, T.agg_milli, memory_order_relaxed);
    }
    T.waits = T.skipped = 0;
    T.agg_ns = T.agg_milli = 0;
}

/* The burst cut: adds a wait of ns to the thread's window (restarted, and the thread's counts
 * flushed, when the bg's epoch moved) and sets its own W once a cap's share is exceeded twice
 * (see the head comment). */
static __attribute__((noinline)) void lk_window(uint64_t ns, int exact) {
    uint32_t e = atomic_load_explicit(&g_epoch, memory_order_relaxed);
    if (e != T.epoch) { /* a new window: the last one's estimates to the bg now, not in a
                         * batch of 256 waits that would look like a burst */
        lk_flush();
        T.epoch = e;
        T.n_ev = T.n_all = 0;
        T.ns_ev = T.ns_all = 0;
        T.local_w = 0;
    }
    int ev = ns >= ag_hcfg.lock_threshold_ns;
    T.ns_all += ns;
    T.ns_ev += ev ? ns : 0;
    T.n_all += exact;
    T.n_ev += exact && ev;
    uint64_t a = T.n_ev > 2 * g_share ? T.ns_ev / g_share + 1 : 0;
    uint64_t b = T.n_all > 2 * g_share_all ? T.ns_all / g_share_all + 1 : 0;
    T.local_w = a > b ? a : b;
}

/* One contended wait of ns reported (w == 0: exactly; else sampled by the countdown drawn
 * with w): an event (>= threshold) or an aggregate. Every 8th call times itself with the
 * interval clock and charges 8 x that; a time over 20 us is a preemption, not a cost, and is
 * replaced by the thread's mean of the others. (The thread's CPU clock would need no such
 * rule, but it is a system call of 1-4 us on our VMs: more than a report.) */
static __attribute__((noinline)) void lock_report(const void *addr, uint64_t ns, uint64_t w) {
    ag_thread_t *t = ag_hook_enter();
    if (!t)
        return;
    int measure = (++T.reports & 7) == 0;
    uint64_t sc = 0, c0 = measure ? lk_stamp(&sc) : 0;
    uint64_t weight = ns, milli = CM_COUNT_ONE;
    uint8_t flags = 0;
    if (w) { /* sampled with q = 1 - exp(-ns / w): stands for ns / q and 1 / q waits */
        double q = -ag_expm1(-(double)ns / (double)w);
        if (q < 1e-9)
            q = 1e-9;
        weight = (uint64_t)((double)ns / q + 0.5);
        milli = (uint64_t)((double)CM_COUNT_ONE / q + 0.5);
        flags = CM_SF_SUBSAMPLED;
    }
    if (!w)
        lk_window(ns, 1);
    if (ns >= ag_hcfg.lock_threshold_ns) {
        ag_event_t ev = {.type = CM_EV_LOCK,
                         .flags = flags,
                         .weight = weight,
                         .count = (uint32_t)(milli < UINT32_MAX ? milli : UINT32_MAX),
                         .address = (uintptr_t)addr};
        if (ag_hook_record(t, &ev) == 0)
            atomic_fetch_add_explicit(&ag_lock_records, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&g_est_ns, weight, memory_order_relaxed);
        atomic_fetch_add_explicit(&g_est_milli, milli, memory_order_relaxed);
    } else {
        uintptr_t pcs[AG_MAX_DEPTH];
        uint32_t d = ag_hook_unwind(t, pcs, AG_MAX_DEPTH);
        ag_agg_add_n(CM_EV_LOCK, 0, 0, pcs, d, weight, 0, milli);
        T.agg_ns += weight;
        T.agg_milli += milli;
    }
    if (measure) {
        uint64_t c = lk_ns(sc, c0);
        if (c <= 20000) {
            T.rep_sum += c;
            T.rep_n++;
        } else {
            c = T.rep_n ? T.rep_sum / T.rep_n : 20000;
        }
        atomic_fetch_add_explicit(&ag_lock_cost_ns, 8 * c, memory_order_relaxed);
    }
    ag_hook_leave();
}

/* The thread's W for a wait of ns: the bg's, or its own burst W while its window lasts --
 * its wait ns in the window so far / the cap's share, so it grows with the burst and the
 * window keeps about share x ln(end / start) reports. */
static __attribute__((noinline)) uint64_t lk_local_w(uint64_t w, uint64_t ns) {
    lk_window(ns, 0);
    return T.local_w > w ? T.local_w : w;
}

/* Every contended wait of ns that ended with the lock taken: the countdown when sampling. */
static inline void lock_waited(const void *addr, uint64_t ns) {
    if (AG_UNLIKELY(++T.waits >= 256))
        lk_flush();
    uint64_t w = atomic_load_explicit(&g_period, memory_order_relaxed);
    if (AG_UNLIKELY(T.local_w))
        w = lk_local_w(w, ns);
    if (AG_LIKELY(w == 0)) {
        lock_report(addr, ns, 0);
        return;
    }
    if (AG_UNLIKELY(w != T.w)) { /* memoryless: a fresh draw for the new spacing */
        T.w = w;
        T.left = lk_draw(w);
    }
    T.left -= (int64_t)(ns < (uint64_t)INT64_MAX ? ns : (uint64_t)INT64_MAX);
    if (AG_LIKELY(T.left > 0)) {
        T.skipped += ns >= ag_hcfg.lock_threshold_ns;
        return;
    }
    T.left = lk_draw(w); /* the next point, counted from the end of this wait */
    lock_report(addr, ns, w);
}

/* bg: W for the next window from the waits reported in the last one (EWMA of the estimated
 * rates: [0] above-threshold events, [1] all contended waits). */
void ag_lock_bg_tick(double dt) {
    static uint64_t ns0[2], milli0[2];
    static double r_ns[2], r_n[2];
    uint64_t ns[2], milli[2];
    ns[0] = atomic_load(&g_est_ns);
    milli[0] = atomic_load(&g_est_milli);
    ns[1] = ns[0] + atomic_load(&g_agg_ns);
    milli[1] = milli[0] + atomic_load(&g_agg_milli);
    uint64_t w = 0;
    for (int k = 0; k < 2; k++) {
        double rn = (double)(milli[k] - milli0[k]) / CM_COUNT_ONE / dt;
        double rns = (double)(ns[k] - ns0[k]) / dt;
        ns0[k] = ns[k];
        milli0[k] = milli[k];
        r_n[k] = r_n[k] == 0 ? rn : 0.5 * r_n[k] + 0.5 * rn;
        r_ns[k] = r_ns[k] == 0 ? rns : 0.5 * r_ns[k] + 0.5 * rns;
        double cap = k == 0 ? ag_hcfg.lock_cap : AG_LOCK_AGG_RATE;
        uint64_t wk = r_n[k] > cap ? (uint64_t)(r_ns[k] / cap) + 1 : 0;
        w = wk > w ? wk : w;
    }
    atomic_store(&g_period, w);
    atomic_fetch_add(&g_epoch, 1);
}

void ag_lock_bg_chunk(void) {
    static uint64_t last;
    uint64_t s = atomic_load(&g_skipped);
    if (s > last)
        ag_drop_count(CM_EV_LOCK, CM_DROP_SUBSAMPLED, s - last);
    last = s;
}

/* Times fn args (the real call); a blocking one (mark) is marked for the wall sampler (hooks.h):
 * a spinning wait is on CPU. */
#define CONTENDED(fn, args, addr) CONTENDED_(fn, args, addr, 1)
/* A lock hook's body: a plain forward while the hooks are off; else a lock that is free is
 * taken with try (never timed), a contended one waited for with fn (args), timed, marked
 * blocked for the wall sampler when mark is set. */
#define LOCK_HOOK(forward, try, fn, args, addr, mark)                                              \
    do {                                                                                           \
        if (!lock_active())                                                                        \
            return forward;                                                                        \
        int rc = try;                                                                              \
        if (AG_LIKELY(rc != EBUSY))                                                                \
            return rc;                                                                             \
        CONTENDED_(fn, args, addr, mark);                                                          \
    } while (0)
#define CONTENDED_(fn, args, addr, mark)                                                           \
    do {                                                                                           \
        ag_thread_t *bt_ = (mark) ? AG_BLK_BEGIN(fn) : NULL;                                       \
        uint64_t sc_, t0_ = lk_stamp(&sc_);                                                        \
        int rc_ = (fn)args;                                                                        \
        ag_blk_end(bt_);                                                                           \
        if (rc_ == 0) {                                                                            \
            uint64_t ns_ = lk_ns(sc_, t0_);                                                        \
            lock_waited((const void *)(uintptr_t)(addr), ns_);                                     \
        }                                                                                          \
        return rc_;                                                                                \
    } while (0)

/* ---- mutexes, rwlocks, spinlocks ---- */

/* trylock said EBUSY (hooks on) -- or, in theory, the real lock did (hooks off). */
static __attribute__((noinline, cold)) int mutex_contended(pthread_mutex_t *m, int rc) {
    if (!atomic_load_explicit(&g_on, memory_order_relaxed))
        return rc; /* g_mutex_first was the real lock: its result stands */
    if (ag_hook_guard)
        return L.mutex_lock(m);
    CONTENDED(L.mutex_lock, (m), m);
}

/* glibc's lock word (__data.__lock, the first member of pthread_mutex_t): 0 while free, non-zero
 * while held, for every mutex type. */
static inline int mutex_word(pthread_mutex_t *m) {
    return atomic_load_explicit((_Atomic int *)(void *)&m->__data.__lock, memory_order_relaxed);
}

/* The lock word said held. A held recursive mutex may be ours (trylock then succeeds), and
 * with the hooks off this is a plain forward: both go the usual way. */
static __attribute__((noinline, cold)) int mutex_held(pthread_mutex_t *m) {
    if (!atomic_load_explicit(&g_on, memory_order_relaxed) ||
        (m->__data.__kind & 3) == PTHREAD_MUTEX_RECURSIVE_NP) {
        int rc = atomic_load_explicit(&g_mutex_first, memory_order_relaxed)(m);
        return rc != EBUSY ? rc : mutex_contended(m, rc);
    }
    return AG_NO_TAIL(mutex_contended(m, EBUSY));
}

/* A held mutex skips the trylock: on a lock that another core holds, trylock's read and
 * failed CAS each move the cache line, and the real lock then moves it again (in perf,
 * pthread_mutex_trylock cost 2.4x what pthread_mutex_lock costs without the agent on the
 * mixed benchmark's two contended mutexes). Reading the lock word first costs a load of the
 * line the trylock reads anyway. */
AG_EXPORT AG_HOT AG_NO_TSAN int pthread_mutex_lock(pthread_mutex_t *m) {
    if (AG_UNLIKELY(atomic_load_explicit(&g_word_ok, memory_order_relaxed) && mutex_word(m) != 0))
        return AG_NO_TAIL(mutex_held(m));
    int rc = atomic_load_explicit(&g_mutex_first, memory_order_relaxed)(m);
    if (AG_LIKELY(rc != EBUSY))
        return rc;
    return AG_NO_TAIL(mutex_contended(m, rc));
}

/* 1 if programs reach our hooks first: no sanitizer runtime loaded (see the head comment). */
static int lock_front(void) {
    void *f = dlsym(RTLD_DEFAULT, "pthread_mutex_lock");
    return !dlsym(RTLD_DEFAULT, "__asan_init") && !dlsym(RTLD_DEFAULT, "__tsan_init") && f &&
           ag_hook_is_agent_pc((uintptr_t)f);
}

AG_EXPORT AG_NO_TSAN int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *ts) {
    LOCK_HOOK(REAL(mutex_timed, "pthread_mutex_timedlock")(m, ts),
              L.mutex_trylock(m), L.mutex_timed, (m, ts), m, 1);
}

AG_EXPORT AG_HOT AG_NO_TSAN int pthread_rwlock_rdlock(pthread_rwlock_t *l) {
    LOCK_HOOK(REAL(rd, "pthread_rwlock_rdlock")(l), L.tryrd(l), L.rd, (l), l, 1);
}

AG_EXPORT AG_HOT AG_NO_TSAN int pthread_rwlock_wrlock(pthread_rwlock_t *l) {
    LOCK_HOOK(REAL(wr, "pthread_rwlock_wrlock")(l), L.trywr(l), L.wr, (l), l, 1);
}

AG_EXPORT AG_NO_TSAN int pthread_rwlock_timedrdlock(pthread_rwlock_t *l,
                                                  const struct timespec *ts) {
    LOCK_HOOK(REAL(rd_timed, "pthread_rwlock_timedrdlock")(l, ts),
              L.tryrd(l), L.rd_timed, (l, ts), l, 1);
}

AG_EXPORT AG_NO_TSAN int pthread_rwlock_timedwrlock(pthread_rwlock_t *l,
                                                  const struct timespec *ts) {
    LOCK_HOOK(REAL(wr_timed, "pthread_rwlock_timedwrlock")(l, ts),
              L.trywr(l), L.wr_timed, (l, ts), l, 1);
}

AG_EXPORT AG_HOT AG_NO_TSAN int pthread_spin_lock(pthread_spinlock_t *l) {
    LOCK_HOOK(REAL(spin, "pthread_spin_lock")((void *)l),
              L.tryspin((void *)l), L.spin, ((void *)l), l, 0);
}

/* ---- condition variables ---- */

#define AG_CV_SLOTS 4096           /* power of two */
#define AG_CV_FLOOR_NS 50000ull    /* shorter re-acquires: wake-up latency, not recorded */

typedef struct {
    _Atomic uint32_t waiters; /* our wait hooks inside the real call, for this slot */
    _Atomic uint64_t wake;    /* CLOCK_MONOTONIC of the slot's last signal/broadcast */
} cv_slot_t;

static cv_slot_t g_cv[AG_CV_SLOTS];

static inline cv_slot_t *cv_slot(const void *c) {
    uint64_t x = (uint64_t)(uintptr_t)c * 0x9e3779b97f4a7c15ull;
    return &g_cv[x >> (64 - 12)];
}
_Static_assert(AG_CV_SLOTS == 1 << 12, "cv_slot's shift");

/* Signal side: stamp before the real call (a waiter it wakes then sees at least this stamp). */
static inline void cv_stamp(const void *c) {
    if (!atomic_load_explicit(&g_on, memory_order_relaxed))
        return;
    cv_slot_t *s = cv_slot(c);
    if (!atomic_load(&s->waiters))
        return;
    uint64_t now = ag_hook_clock();
    uint64_t old = atomic_load_explicit(&s->wake, memory_order_relaxed);
    while (old < now && !atomic_compare_exchange_weak(&s->wake, &old, now))
        ;
}

AG_EXPORT AG_HOT AG_NO_TSAN int pthread_cond_signal(pthread_cond_t *c) {
    cv_stamp(c);
    return REALV(signal, "pthread_cond_signal")(c);
}

AG_EXPORT AG_HOT AG_NO_TSAN int pthread_cond_broadcast(pthread_cond_t *c) {
    cv_stamp(c);
    return REALV(broadcast, "pthread_cond_broadcast")(c);
}

/* The deadline of a timed wait that timed out, in CLOCK_MONOTONIC ns; 0 when unknown.
 * clock < 0: the condvar's own clock (condattr) is unknown -- of the two readings (REALTIME
 * converted, MONOTONIC as is) the latest one that is not after t1 is the one that expired. */
static uint64_t cv_deadline(int clock, const struct timespec *abs, uint64_t t1) {
    if (abs->tv_sec < 0 || abs->tv_nsec < 0 || abs->tv_nsec >= 1000000000)
        return 0;
    uint64_t a = (uint64_t)abs->tv_sec * 1000000000u + (uint64_t)abs->tv_nsec, best = 0;
    if (clock == CLOCK_MONOTONIC || clock < 0)
        best = a <= t1 ? a : 0;
    if (clock == CLOCK_REALTIME || clock < 0) {
        struct timespec rt;
        clock_gettime(CLOCK_REALTIME, &rt);
        uint64_t real = (uint64_t)rt.tv_sec * 1000000000u + (uint64_t)rt.tv_nsec;
        uint64_t off = real - ag_hook_clock(); /* REALTIME - MONOTONIC */
        uint64_t m = a > off ? a - off : 0;
        if (m <= t1 && m > best)
            best = m;
    }
    return best;
}

enum { CV_WAIT, CV_TIMED, CV_CLOCK };

/* The wait hooks' active path: times the real call, attributes the re-acquisition. */
static __attribute__((noinline)) int cv_wait(pthread_cond_t *c, pthread_mutex_t *m, int kind,
                                             clockid_t clock, const struct timespec *abs) {
    cv_slot_t *s = cv_slot(c);
    atomic_fetch_add(&s->waiters, 1);
    ag_thread_t *bt = AG_BLK_BEGIN(kind == CV_WAIT    ? (void *)L.wait
                                   : kind == CV_TIMED ? (void *)L.timedwait
                                                      : (void *)L.clockwait);
    uint64_t t0 = ag_hook_clock();
    int rc = kind == CV_WAIT    ? L.wait(c, m)
             : kind == CV_TIMED ? L.timedwait(c, m, abs)
                                : L.clockwait(c, m, clock, abs);
    uint64_t t1 = ag_hook_clock();
    ag_blk_end(bt);
    uint64_t w = atomic_load_explicit(&s->wake, memory_order_acquire);
    atomic_fetch_sub(&s->waiters, 1);
    uint64_t from = 0;
    if (rc == 0) {
        if (w > t0) /* no stamp since we started: spurious or unseen wake-up, not judged */
            from = w;
    } else if (rc == ETIMEDOUT && abs) {
        uint64_t d = cv_deadline(kind == CV_CLOCK ? (int)clock : -1, abs, t1);
        if (d) {
            from = d > t0 ? d : t0;
            from = w > from ? w : from;
        }
    }
    if (from && t1 > from && t1 - from >= AG_CV_FLOOR_NS)
        lock_waited(m, t1 - from);
    return rc;
}

AG_EXPORT AG_NO_TSAN int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) {
    if (!lock_active())
        return REALV(wait, "pthread_cond_wait")(c, m);
    return AG_NO_TAIL(cv_wait(c, m, CV_WAIT, 0, NULL));
}

AG_EXPORT AG_NO_TSAN int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
                                                const struct timespec *abs) {
    if (!lock_active())
        return REALV(timedwait, "pthread_cond_timedwait")(c, m, abs);
    return AG_NO_TAIL(cv_wait(c, m, CV_TIMED, 0, abs));
}

AG_EXPORT AG_NO_TSAN int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m,
                                                clockid_t clock, const struct timespec *abs) {
    if (!lock_active() || !L.clockwait)
        return REALV(clockwait, "pthread_cond_clockwait")(c, m, clock, abs);
    return AG_NO_TAIL(cv_wait(c, m, CV_CLOCK, clock, abs));
}
