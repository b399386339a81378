/* Lock contention: interposes pthread_mutex_lock/timedlock, pthread_rwlock_rd/wrlock (and
 * their timed forms) and pthread_spin_lock.
 *
 * Uncontended path: the matching trylock succeeds -- no clock read, no unwinding. Contended:
 * the real blocking call is timed with CLOCK_MONOTONIC (vDSO, ~20-30 ns: negligible next to a
 * futex wait); a wait >= FLEETPROF_LOCK_THRESHOLD (default 10 ms) that ends with the lock
 * taken is one LOCK event (stack, lock address, wait ns, span context), subject to the flood
 * cap (hooks.c); shorter contended waits are summed per stack (agg.c, CM_SF_AGGREGATE rows).
 * Timed acquisitions that time out are not reported.
 *
 * Condition variables (documented approximation): pthread_cond_wait unlocks the mutex, waits
 * for a signal and re-locks the mutex inside glibc through an internal function
 * (__pthread_mutex_cond_lock) that no interposer sees, and the wait for the signal itself is
 * not contention. An interposer can only time the whole call, which would report idle
 * consumers waiting for work as "lock contention". So pthread_cond_wait/timedwait are left to
 * glibc: the re-acquisition after a wake-up is not attributed (it is short unless the
 * signaller holds the mutex for long, and then that mutex's other acquirers show it).
 *
 * Contract: no locks, no allocation; the agent's own threads and slow paths (guard set) get a
 * plain forward. With FLEETPROF_ENABLED=0 or FLEETPROF_LOCK=0 every hook is a plain forward.
 */
#include "hooks.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

typedef int (*lk_fn)(void *);
typedef int (*lkt_fn)(void *, const struct timespec *);

static struct {
    lk_fn mutex_lock, mutex_trylock, rd, tryrd, wr, trywr, spin, tryspin;
    lkt_fn mutex_timed, rd_timed, wr_timed;
} L;

static void *sym(void *slot, const char *name) {
    void *f = dlsym(RTLD_NEXT, name);
    memcpy(slot, &f, sizeof f);
    return f;
}

#define REAL(field, name)                                                                          \
    (AG_LIKELY(L.field) ? L.field : (__typeof__(L.field))sym(&L.field, name))

static inline int lock_on(void) {
    return AG_LIKELY(atomic_load_explicit(&ag_hooks_state, memory_order_relaxed) > 0) &&
           ag_hcfg.lock_on && !ag_hook_guard;
}

static __attribute__((noinline)) void lock_report(const void *addr, uint64_t ns) {
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
    ag_hook_leave();
}

#define CONTENDED(call, addr)                                                                      \
    do {                                                                                           \
        uint64_t t0_ = ag_hook_clock();                                                            \
        int rc_ = (call);                                                                          \
        if (rc_ == 0)                                                                              \
            lock_report((const void *)(uintptr_t)(addr), ag_hook_clock() - t0_);                  \
        return rc_;                                                                                \
    } while (0)

AG_EXPORT AG_NO_TSAN int pthread_mutex_lock(pthread_mutex_t *m) {
    if (!lock_on())
        return REAL(mutex_lock, "pthread_mutex_lock")(m);
    int rc = REAL(mutex_trylock, "pthread_mutex_trylock")(m);
    if (AG_LIKELY(rc != EBUSY))
        return rc;
    CONTENDED(L.mutex_lock ? L.mutex_lock(m) : REAL(mutex_lock, "pthread_mutex_lock")(m), m);
}

AG_EXPORT AG_NO_TSAN int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *ts) {
    if (!lock_on())
        return REAL(mutex_timed, "pthread_mutex_timedlock")(m, ts);
    int rc = REAL(mutex_trylock, "pthread_mutex_trylock")(m);
    if (AG_LIKELY(rc != EBUSY))
        return rc;
    CONTENDED(REAL(mutex_timed, "pthread_mutex_timedlock")(m, ts), m);
}

AG_EXPORT AG_NO_TSAN int pthread_rwlock_rdlock(pthread_rwlock_t *l) {
    if (!lock_on())
        return REAL(rd, "pthread_rwlock_rdlock")(l);
    int rc = REAL(tryrd, "pthread_rwlock_tryrdlock")(l);
    if (AG_LIKELY(rc != EBUSY))
        return rc;
    CONTENDED(REAL(rd, "pthread_rwlock_rdlock")(l), l);
}

AG_EXPORT AG_NO_TSAN int pthread_rwlock_wrlock(pthread_rwlock_t *l) {
    if (!lock_on())
        return REAL(wr, "pthread_rwlock_wrlock")(l);
    int rc = REAL(trywr, "pthread_rwlock_trywrlock")(l);
    if (AG_LIKELY(rc != EBUSY))
        return rc;
    CONTENDED(REAL(wr, "pthread_rwlock_wrlock")(l), l);
}

AG_EXPORT AG_NO_TSAN int pthread_rwlock_timedrdlock(pthread_rwlock_t *l,
                                                  const struct timespec *ts) {
    if (!lock_on())
        return REAL(rd_timed, "pthread_rwlock_timedrdlock")(l, ts);
    int rc = REAL(tryrd, "pthread_rwlock_tryrdlock")(l);
    if (AG_LIKELY(rc != EBUSY))
        return rc;
    CONTENDED(REAL(rd_timed, "pthread_rwlock_timedrdlock")(l, ts), l);
}

AG_EXPORT AG_NO_TSAN int pthread_rwlock_timedwrlock(pthread_rwlock_t *l,
                                                  const struct timespec *ts) {
    if (!lock_on())
        return REAL(wr_timed, "pthread_rwlock_timedwrlock")(l, ts);
    int rc = REAL(trywr, "pthread_rwlock_trywrlock")(l);
    if (AG_LIKELY(rc != EBUSY))
        return rc;
    CONTENDED(REAL(wr_timed, "pthread_rwlock_timedwrlock")(l, ts), l);
}

AG_EXPORT AG_NO_TSAN int pthread_spin_lock(pthread_spinlock_t *l) {
    if (!lock_on())
        return REAL(spin, "pthread_spin_lock")((void *)l);
    int rc = REAL(tryspin, "pthread_spin_trylock")((void *)l);
    if (AG_LIKELY(rc != EBUSY))
        return rc;
    CONTENDED(REAL(spin, "pthread_spin_lock")((void *)l), l);
}
