/* Lock contention: interposes pthread_mutex_lock/timedlock, pthread_rwlock_rd/wrlock (and
 * their timed forms), pthread_spin_lock, and measures the mutex re-acquisition of
 * pthread_cond_wait/timedwait/clockwait (with pthread_cond_signal/broadcast stamping wake-ups).
 *
 * Uncontended path: the matching trylock succeeds -- no clock read, no unwinding. For
 * pthread_mutex_lock the whole decision is one function pointer (g_mutex_first: trylock when
 * the lock hooks are on, the real pthread_mutex_lock when off or not decided yet) and one
 * compare with EBUSY (pthread_mutex_lock never returns EBUSY, so with the hooks off the hook
 * is a plain forward); everything else lives in an out-of-line slow path. Unlock is not
 * interposed. Contended: the real blocking call is timed with rdtsc (~10 ns) once hooks.c
 * has calibrated an invariant TSC, with the vDSO CLOCK_MONOTONIC (~20-30 ns) before that; a
 * wait >= FLEETPROF_LOCK_THRESHOLD (default 10 ms) that ends with the lock taken is one LOCK
 * event (stack, lock address, wait ns, span context), subject to the flood cap (hooks.c);
 * shorter contended waits are summed per stack (agg.c, CM_SF_AGGREGATE rows). Timed
 * acquisitions that time out are not reported.
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
 * Agent cost: every 8th slow path measures its own bookkeeping (clock after the wait to the
 * end of the report) plus two clock reads; the sum is ag_lock_cost_ns, which bgthread.c adds
 * to the agent's CPU (chunk header agent_cpu_ns, CPU budget). Not counted: the trylock of the
 * uncontended path (~1-2 ns) and the waiters count / stamps of the cond hooks.
 *
 * Contract: no locks, no allocation; the agent's own threads and slow paths (guard set) get a
 * plain forward in the contended path. With FLEETPROF_ENABLED=0 or FLEETPROF_LOCK=0 every
 * hook is a plain forward.
 */
#include "hooks.h"

#include <dlfcn.h>
#include <errno.h>
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
    lkt_fn mutex_timed, rd_timed, wr_timed;
    cv_fn signal, broadcast;
    cvw_fn wait;
    cvt_fn timedwait;
    cvc_fn clockwait;
} L;

_Atomic uint64_t ag_lock_cost_ns;
static _Atomic int g_on;        /* lock hooks active (set once, by lock_init) */
static uint64_t g_clock_cost;   /* ns per ag_hook_clock() call, measured at start */
static uint64_t g_tsc_cost = 10; /* ns per rdtsc (a typical figure) */

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

/* Library constructor: resolves every real function (no dlsym on the hot paths afterwards),
 * measures the clock's cost and turns the hooks on. Calls ag_hooks_init itself (idempotent)
 * rather than relying on the order of constructors. */
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
    uint64_t a = ag_hook_clock(), b = a;
    for (int i = 0; i < 255; i++)
        b = ag_hook_clock();
    g_clock_cost = (b - a) / 255;
    int on = atomic_load(&ag_hooks_state) > 0 && ag_hcfg.lock_on && L.mutex_lock &&
             L.mutex_trylock;
    if (on)
        atomic_store(&g_mutex_first, L.mutex_trylock);
    else if (L.mutex_lock)
        atomic_store(&g_mutex_first, L.mutex_lock);
    atomic_store(&g_on, on);
    ag_hook_guard--;
}

/* ---- reporting (slow path) ---- */

/* Interval timing of contended waits: rdtsc (~10 ns) once hooks.c has calibrated an invariant
 * TSC (ag_tsc_scale, 32.32 fixed point ns per tick), the vDSO clock (~20-30 ns) until then.
 * lk_ns converts an interval taken with lk_stamp's clock (scale: the one read at its start). */
static inline uint64_t lk_stamp(uint64_t *scale) {
    *scale = atomic_load_explicit(&ag_tsc_scale, memory_order_relaxed);
    return *scale ? ag_tsc() : ag_hook_clock();
}
static inline uint64_t lk_ns(uint64_t scale, uint64_t t0, uint64_t *t1) {
    if (!scale) {
        *t1 = ag_hook_clock();
        return *t1 - t0;
    }
    *t1 = ag_tsc();
    uint64_t d = *t1 - t0;
    return (d >> 32) * scale + ((d & 0xffffffffu) * scale >> 32);
}

/* One contended wait of ns: an event (>= threshold, flood cap) or an aggregate. Accounts its
 * own cost on every 8th call (from the clock read after the wait, t1 of that clock: scale as
 * in lk_stamp; a measurement over 20 us is a preemption and counts as 20 us). */
static __attribute__((noinline)) void lock_report(const void *addr, uint64_t ns, uint64_t scale,
                                                  uint64_t t1) {
    static AG_TLS uint32_t t_n;
    ag_thread_t *t = ag_hook_enter();
    if (!t)
        return;
    if (ns >= ag_hcfg.lock_threshold_ns) {
        uint32_t m = ag_hook_admit(CM_EV_LOCK);
        if (m) {
            ag_event_t ev = {.type = CM_EV_LOCK,
                             .flags = m > 1000 ? CM_SF_SUBSAMPLED : 0,
                             .weight = ns * m / 1000,
                             .count = m,
                             .address = (uintptr_t)addr};
            ag_hook_record(t, &ev);
        }
    } else {
        uintptr_t pcs[AG_MAX_DEPTH];
        uint32_t d = ag_hook_unwind(t, pcs, AG_MAX_DEPTH);
        ag_agg_add(CM_EV_LOCK, 0, 0, pcs, d, ns, 0);
    }
    if ((++t_n & 7) == 0) {
        uint64_t t2, c = lk_ns(scale, t1, &t2);
        c = (c < 20000 ? c : 20000) + 2 * (scale ? g_tsc_cost : g_clock_cost);
        atomic_fetch_add_explicit(&ag_lock_cost_ns, 8 * c, memory_order_relaxed);
    }
    ag_hook_leave();
}

#define CONTENDED(call, addr)                                                                      \
    do {                                                                                           \
        uint64_t sc_, t1_, t0_ = lk_stamp(&sc_);                                                   \
        int rc_ = (call);                                                                          \
        if (rc_ == 0) {                                                                            \
            uint64_t ns_ = lk_ns(sc_, t0_, &t1_);                                                  \
            lock_report((const void *)(uintptr_t)(addr), ns_, sc_, t1_);                           \
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
    CONTENDED(L.mutex_lock(m), m);
}

AG_EXPORT AG_NO_TSAN int pthread_mutex_lock(pthread_mutex_t *m) {
    int rc = atomic_load_explicit(&g_mutex_first, memory_order_relaxed)(m);
    if (AG_LIKELY(rc != EBUSY))
        return rc;
    return mutex_contended(m, rc);
}

AG_EXPORT AG_NO_TSAN int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *ts) {
    if (!lock_active())
        return REAL(mutex_timed, "pthread_mutex_timedlock")(m, ts);
    int rc = L.mutex_trylock(m);
    if (AG_LIKELY(rc != EBUSY))
        return rc;
    CONTENDED(L.mutex_timed(m, ts), m);
}

AG_EXPORT AG_NO_TSAN int pthread_rwlock_rdlock(pthread_rwlock_t *l) {
    if (!lock_active())
        return REAL(rd, "pthread_rwlock_rdlock")(l);
    int rc = L.tryrd(l);
    if (AG_LIKELY(rc != EBUSY))
        return rc;
    CONTENDED(L.rd(l), l);
}

AG_EXPORT AG_NO_TSAN int pthread_rwlock_wrlock(pthread_rwlock_t *l) {
    if (!lock_active())
        return REAL(wr, "pthread_rwlock_wrlock")(l);
    int rc = L.trywr(l);
    if (AG_LIKELY(rc != EBUSY))
        return rc;
    CONTENDED(L.wr(l), l);
}

AG_EXPORT AG_NO_TSAN int pthread_rwlock_timedrdlock(pthread_rwlock_t *l,
                                                  const struct timespec *ts) {
    if (!lock_active())
        return REAL(rd_timed, "pthread_rwlock_timedrdlock")(l, ts);
    int rc = L.tryrd(l);
    if (AG_LIKELY(rc != EBUSY))
        return rc;
    CONTENDED(L.rd_timed(l, ts), l);
}

AG_EXPORT AG_NO_TSAN int pthread_rwlock_timedwrlock(pthread_rwlock_t *l,
                                                  const struct timespec *ts) {
    if (!lock_active())
        return REAL(wr_timed, "pthread_rwlock_timedwrlock")(l, ts);
    int rc = L.trywr(l);
    if (AG_LIKELY(rc != EBUSY))
        return rc;
    CONTENDED(L.wr_timed(l, ts), l);
}

AG_EXPORT AG_NO_TSAN int pthread_spin_lock(pthread_spinlock_t *l) {
    if (!lock_active())
        return REAL(spin, "pthread_spin_lock")((void *)l);
    int rc = L.tryspin((void *)l);
    if (AG_LIKELY(rc != EBUSY))
        return rc;
    CONTENDED(L.spin((void *)l), l);
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

AG_EXPORT AG_NO_TSAN int pthread_cond_signal(pthread_cond_t *c) {
    cv_stamp(c);
    return REALV(signal, "pthread_cond_signal")(c);
}

AG_EXPORT AG_NO_TSAN int pthread_cond_broadcast(pthread_cond_t *c) {
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
    uint64_t t0 = ag_hook_clock();
    int rc = kind == CV_WAIT    ? L.wait(c, m)
             : kind == CV_TIMED ? L.timedwait(c, m, abs)
                                : L.clockwait(c, m, clock, abs);
    uint64_t t1 = ag_hook_clock();
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
        lock_report(m, t1 - from, 0, t1);
    return rc;
}

AG_EXPORT AG_NO_TSAN int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) {
    if (!lock_active())
        return REALV(wait, "pthread_cond_wait")(c, m);
    return cv_wait(c, m, CV_WAIT, 0, NULL);
}

AG_EXPORT AG_NO_TSAN int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m,
                                                const struct timespec *abs) {
    if (!lock_active())
        return REALV(timedwait, "pthread_cond_timedwait")(c, m, abs);
    return cv_wait(c, m, CV_TIMED, 0, abs);
}

AG_EXPORT AG_NO_TSAN int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m,
                                                clockid_t clock, const struct timespec *abs) {
    if (!lock_active() || !L.clockwait)
        return REALV(clockwait, "pthread_cond_clockwait")(c, m, clock, abs);
    return cv_wait(c, m, CV_CLOCK, clock, abs);
}
