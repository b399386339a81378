/* Credentials: the agent's thread mirrors the credentials of the application thread
 * that changes its own, so that glibc's set*id broadcast succeeds or fails on every thread
 * alike.
 *
 * glibc (nptl __nptl_setxid) runs setuid/setgid/setgroups/setres*id/... on every thread: it
 * sends SIGSETXID to each other thread, whose handler makes the same system call, then makes
 * it on the caller last, and aborts the process (setxid_error) when one thread's result differs
 * from another's. The kernel's result is a function of the thread's own credentials (uids,
 * gids, groups, the capability sets, securebits with KEEPCAPS: all per thread), and those are
 * changed per thread by capset and prctl. util-linux setpriv sets PR_SET_KEEPCAPS on its thread,
 * setresuid then leaves our thread without any capability (no KEEPCAPS) while the caller keeps
 * its permitted set and raises CAP_SETGID again with capset: its setresgid succeeded and ours
 * failed, and glibc aborted.
 *
 * So whenever an application thread
 *   - calls capset, or prctl PR_SET_KEEPCAPS / PR_SET_SECUREBITS / PR_CAP_AMBIENT (changes) /
 *     PR_CAPBSET_DROP, or any of those or a set*id / setgroups as a raw syscall() (libcap, or
 *     libcap-ng, make them that way; they change the calling thread only): after it;
 *   - calls one of glibc's broadcast set*id functions: before it,
 * it captures its own credentials (cred_capture: ~90 system calls), posts them, and wakes the
 * bg thread, which makes its own equal to them (cred_mirror) and checks the result; the caller
 * waits for that (at most AG_CRED_WAIT_NS). Two equal credential sets give the same result for
 * the same call, so the broadcast then succeeds or fails on every thread alike, and our thread
 * never holds more than the thread that changed its credentials last. If our thread cannot be
 * made equal (it already lacks a capability the caller has: a thread dropped its privileges
 * and another one, still privileged, makes a broadcast call; more than AG_CRED_MAX_GROUPS
 * groups; no answer in time), profiling stops in this process before the broadcast call
 * (DROP_HOST_UNSAFE counted, one log line): with our thread gone, the call meets only the
 * application's threads.
 *
 * glibc's internal calls (initgroups' setgroups, posix_spawn's POSIX_SPAWN_RESETIDS) do not
 * reach these interposers: they are broadcasts, which keep equal credentials equal.
 *
 * Thread contract: the interposers run on application threads (a signal handler included:
 * only system calls, atomics and a spinning lock that a nested call on the same thread skips);
 * ag_creds_serve runs on the bg thread.
 */
#include "record.h"
#include "agent.h"
#include "bgthread.h"
#include "sandbox.h"
#include "creds.h"

#include "cm/log.h"

#include <dlfcn.h>
#include <errno.h>
#include <linux/capability.h>
#include <linux/prctl.h>
#include <linux/securebits.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define AG_CRED_MAX_GROUPS 1024            /* more: profiling stops before a broadcast */
#define AG_CRED_WAIT_NS 1000000000ull      /* the caller's wait for the bg thread's mirror */
#define AG_CRED_EXIT_NS 1000000000ull      /* and for its exit, when profiling stops */
#define AG_CRED_LOCK_NS (2 * AG_CRED_WAIT_NS + AG_CRED_EXIT_NS) /* a holder's longest stay */

typedef struct {
    uid_t uid[3];
    gid_t gid[3];
    int ngroups; /* -1: more than AG_CRED_MAX_GROUPS */
    gid_t groups[AG_CRED_MAX_GROUPS];
    struct __user_cap_data_struct caps[2];
    uint64_t bnd, amb;
    long secbits;
} ag_cred_t;

static ag_cred_t g_posted;                  /* the caller's, for the bg thread */
static _Atomic uint64_t g_req, g_done;      /* generations: posted, mirrored */
static _Atomic int g_result;                /* of the last mirror: 0 equal, else a step */
static _Atomic uint64_t g_hold;             /* the bg thread waits while it equals g_done */
static _Atomic pid_t g_lock_owner;          /* serialises the interposers (see cred_lock) */
static _Atomic int g_quit;                  /* profiling stops: the bg thread exits (give-up) */
_Atomic uint64_t ag_creds_mirrors, ag_creds_failures, ag_creds_stuck;

#define raw ag_rawsys

static int caps_get(struct __user_cap_data_struct d[2]) {
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    return raw(SYS_capget, (long)&h, (long)d, 0, 0, 0) == 0 ? 0 : -1;
}

static int caps_set(uint64_t eff, uint64_t perm, uint64_t inh) {
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    for (int i = 0; i < 2; i++) {
        d[i].effective = (uint32_t)(eff >> (32 * i));
        d[i].permitted = (uint32_t)(perm >> (32 * i));
        d[i].inheritable = (uint32_t)(inh >> (32 * i));
    }
    return raw(SYS_capset, (long)&h, (long)d, 0, 0, 0) == 0 ? 0 : -1;
}

#define CAP64(c, f) ((uint64_t)(c)[0].f | (uint64_t)(c)[1].f << 32)

/* The calling thread's credentials, with system calls only (async-signal-safe). */
static int cred_capture(ag_cred_t *c) {
    memset(c, 0, offsetof(ag_cred_t, groups));
    if (raw(SYS_getresuid, (long)&c->uid[0], (long)&c->uid[1], (long)&c->uid[2], 0, 0) != 0 ||
        raw(SYS_getresgid, (long)&c->gid[0], (long)&c->gid[1], (long)&c->gid[2], 0, 0) != 0 ||
        caps_get(c->caps) != 0)
        return -1;
    long n = raw(SYS_getgroups, AG_CRED_MAX_GROUPS, (long)c->groups, 0, 0, 0);
    c->ngroups = n >= 0 ? (int)n : -1;
    c->secbits = raw(SYS_prctl, PR_GET_SECUREBITS, 0, 0, 0, 0);
    for (int cap = 0; cap < 64; cap++) {
        long in = raw(SYS_prctl, PR_CAPBSET_READ, cap, 0, 0, 0);
        if (in < 0)
            break; /* past CAP_LAST_CAP */
        c->bnd |= (uint64_t)(in > 0) << cap;
        c->amb |= (uint64_t)(raw(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0) > 0)
                  << cap;
    }
    return 0;
}

static int ids_equal(const ag_cred_t *a, const ag_cred_t *b) {
    return !memcmp(a->uid, b->uid, sizeof a->uid) && !memcmp(a->gid, b->gid, sizeof a->gid) &&
           a->ngroups == b->ngroups && a->ngroups >= 0 &&
           !memcmp(a->groups, b->groups, sizeof(gid_t) * (size_t)a->ngroups);
}

static int cred_equal(const ag_cred_t *a, const ag_cred_t *b) {
    return ids_equal(a, b) && !memcmp(a->caps, b->caps, sizeof a->caps) && a->bnd == b->bnd &&
           a->amb == b->amb && a->secbits == b->secbits;
}

/* bg thread: make this thread's credentials equal to *s. The order matters: capabilities are
 * raised (within our permitted set) for the steps that need them, bounding-set drops and
 * securebits while CAP_SETPCAP may still be there, the ids with KEEPCAPS so the permitted set
 * survives a change away from uid 0, the final sets last. Returns 0 when equal afterwards. */
static int cred_mirror(const ag_cred_t *s) {
    static ag_cred_t a; /* bg thread only */
    if (s->ngroups < 0)
        return 1;
    if (cred_capture(&a) != 0)
        return 2;
    if (cred_equal(&a, s))
        return 0;
    uint64_t perm = CAP64(a.caps, permitted), inh = CAP64(a.caps, inheritable);
    uint64_t sperm = CAP64(s->caps, permitted), sinh = CAP64(s->caps, inheritable);
    caps_set(perm, perm, inh); /* every capability we may use, for the steps below */
    for (int cap = 0; cap < 64; cap++)
        if ((a.bnd & ~s->bnd) >> cap & 1)
            raw(SYS_prctl, PR_CAPBSET_DROP, cap, 0, 0, 0);
    if (!ids_equal(&a, s)) {
        if (!(a.secbits & SECBIT_KEEP_CAPS))
            raw(SYS_prctl, PR_SET_KEEPCAPS, 1, 0, 0, 0);
        raw(SYS_setgroups, s->ngroups, (long)s->groups, 0, 0, 0);
        raw(SYS_setresgid, s->gid[0], s->gid[1], s->gid[2], 0, 0);
        raw(SYS_setresuid, s->uid[0], s->uid[1], s->uid[2], 0, 0);
        caps_get(a.caps);
        perm = CAP64(a.caps, permitted);
        caps_set(perm, perm, CAP64(a.caps, inheritable));
    }
    long sb = raw(SYS_prctl, PR_GET_SECUREBITS, 0, 0, 0, 0);
    if (sb != s->secbits && raw(SYS_prctl, PR_SET_SECUREBITS, s->secbits, 0, 0, 0) != 0 &&
        (sb & ~SECBIT_KEEP_CAPS) == (s->secbits & ~SECBIT_KEEP_CAPS)) /* no CAP_SETPCAP */
        raw(SYS_prctl, PR_SET_KEEPCAPS, (s->secbits & SECBIT_KEEP_CAPS) != 0, 0, 0, 0);
    /* ambient capabilities need theirs in the permitted and inheritable sets */
    caps_set(perm & sperm, sperm, sinh);
    if (raw(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) == 0)
        for (int cap = 0; cap < 64; cap++)
            if (s->amb >> cap & 1)
                raw(SYS_prctl, PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0);
    caps_set(CAP64(s->caps, effective), sperm, sinh);
    if (cred_capture(&a) != 0)
        return 2;
    return cred_equal(&a, s) ? 0 : 3;
}

static uint64_t mono_ns(void) {
    struct timespec ts;
    raw(SYS_clock_gettime, CLOCK_MONOTONIC, (long)&ts, 0, 0, 0);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Mirrors the newest posted credentials; a request posted meanwhile (a signal handler on the
 * caller's thread, or a later caller, rewrote g_posted under our feet) is served again before
 * g_done says so, so a torn copy is never the one reported. */
static uint64_t serve_newest(void) {
    uint64_t want = atomic_load(&g_req);
    for (int i = 0; i < 8 && want != atomic_load(&g_done); i++) {
        int rc = cred_mirror(&g_posted);
        atomic_fetch_add(&ag_creds_mirrors, 1);
        uint64_t now = atomic_load(&g_req);
        if (now != want && i < 7) {
            want = now;
            continue;
        }
        atomic_store(&g_result, rc);
        atomic_store(&g_done, want);
        return want;
    }
    return 0;
}

/* Before a broadcast call the bg thread also stays here until the call has returned: glibc's
 * SIGSETXID then finds it between two steps of its work, not between a chunk file's creation
 * and its rename (as another user it could not rename it: a stray temporary file). It leaves
 * when a newer request is posted (a handler on the caller's thread changing credentials within
 * the call: that one waits for us). Called where this thread holds no lock: a give-up request
 * (g_quit) ends the thread here. */
void ag_creds_serve(void) {
    uint64_t want = serve_newest();
    uint64_t end = mono_ns() + AG_CRED_WAIT_NS;
    while (want && atomic_load(&g_hold) == want && atomic_load(&g_req) == want &&
           !atomic_load(&g_quit) && mono_ns() < end) {
        struct timespec t = {0, 100000};
        raw(SYS_nanosleep, (long)&t, 0, 0, 0, 0);
    }
    if (atomic_load(&g_quit))
        ag_bg_quit();
    if (atomic_load(&g_req) != atomic_load(&g_done))
        serve_newest();
}

/* The same inside a long step that may hold a lock (ag_cfi_tick's per-object loop): mirror
 * only, no hold, no exit (that waits for the next ag_creds_serve). */
void ag_creds_serve_quick(void) {
    if (atomic_load(&g_req) != atomic_load(&g_done) && !atomic_load(&g_quit))
        serve_newest();
}

/* One credential change at a time (the posted copy is shared). A handler interrupting a thread
 * that holds it, and calling set*id itself, goes through: it is the same thread. Bounded: a
 * holder whose thread is gone is replaced; one that is still there after AG_CRED_LOCK_NS (a
 * handler siglongjmp'ed out of its frame, or it is stuck) makes profiling stop (returns -1,
 * lock not taken: after a give-up nothing is posted any more). */
static int cred_lock(void) {
    pid_t self = (pid_t)raw(SYS_gettid, 0, 0, 0, 0, 0), owner = 0;
    if (atomic_load(&g_lock_owner) == self)
        return 0;
    uint64_t end = 0;
    for (int i = 0; !atomic_compare_exchange_weak(&g_lock_owner, &owner, self); i++) {
        if (owner && raw(SYS_tgkill, ag.pid, owner, 0, 0, 0) == -ESRCH) {
            if (atomic_compare_exchange_strong(&g_lock_owner, &owner, self))
                return 1; /* its thread exited holding it (a raw exit from a handler) */
            continue;
        }
        owner = 0;
        uint64_t now = mono_ns();
        if (!end)
            end = now + AG_CRED_LOCK_NS;
        else if (now > end)
            return -1;
        struct timespec t = {0, i < 20 ? 50000 : 1000000};
        raw(SYS_nanosleep, (long)&t, 0, 0, 0, 0);
    }
    return 1;
}

static void cred_unlock(int took) {
    if (took > 0)
        atomic_store(&g_lock_owner, 0);
}

/* Is there an agent thread in this process whose credentials must follow? Not in a vfork or
 * _Fork child (another pid), nor once the agent stopped. */
static int cred_active(void) {
    return atomic_load(&ag.running) && (pid_t)raw(SYS_getpid, 0, 0, 0, 0, 0) == ag.pid;
}

/* bg thread, inside a step that serves nothing else (the test delay): a give-up ends it. */
void ag_creds_quit_point(void) {
    if (atomic_load(&g_quit))
        ag_bg_quit();
}

void ag_creds_after_fork_child(void) {
    atomic_store(&g_lock_owner, 0); /* a thread that held it is not in this process */
    atomic_store(&g_hold, 0);
    atomic_store(&g_done, atomic_load(&g_req));
}

/* Profiling stops: our thread must not meet the broadcast with credentials of its own. The
 * caller may be in a signal handler or a vfork child's parent's stead: it neither locks, nor
 * joins, nor formats. It posts g_quit and wakes the bg thread, which exits at its next
 * ag_creds_serve (system call exit, holding no lock: bgthread.c ag_bg_quit), and waits, with
 * system calls only and at most AG_CRED_EXIT_NS, until the kernel no longer knows the thread's
 * tid: glibc's broadcast then cannot signal it (tgkill fails, glibc skips it). If the thread
 * is still there after that (stuck in a long step, see agent/README.md), the call goes ahead:
 * it fails only if our thread's result differs. */
static void cred_give_up(int why) {
    static const char *const msg[] = {
        "fleetprof: profiling stopped in this process: the agent's thread could not take the "
        "credentials of a thread that changes its own (no answer in time); glibc would abort "
        "the process when a set*id call succeeds on one thread and fails on another",
        "fleetprof: profiling stopped in this process: the agent's thread could not take the "
        "credentials of a thread that changes its own (over 1024 groups)",
        "fleetprof: profiling stopped in this process: the agent's thread could not take the "
        "credentials of a thread that changes its own (capget failed)",
        "fleetprof: profiling stopped in this process: the agent's thread could not take the "
        "credentials of a thread that changes its own (our thread cannot match them)",
    };
    if (!atomic_exchange(&g_quit, 1)) {
        atomic_fetch_add(&ag_creds_failures, 1);
        ag_drop_count(0, CM_DROP_HOST_UNSAFE, 1);
        cm_log_from_handler(msg[why >= 1 && why <= 3 ? why : 0]);
    }
    atomic_store(&ag.running, 0); /* hooks and handlers forward from here on */
    ag_bg_wake(AG_REQ_CAPS);
    uint64_t end = mono_ns() + AG_CRED_EXIT_NS;
    for (int i = 0; mono_ns() < end; i++) {
        pid_t tid = ag_bg_tid();
        if (tid && raw(SYS_tgkill, ag.pid, tid, 0, 0, 0) == -ESRCH)
            return;
        if (!tid && !ag_bg_alive())
            return;
        struct timespec t = {0, i < 20 ? 50000 : 1000000};
        raw(SYS_nanosleep, (long)&t, 0, 0, 0, 0);
    }
    atomic_fetch_add(&ag_creds_stuck, 1);
    cm_log_from_handler("fleetprof: the agent's thread did not exit within 1 s; the set*id "
                        "call goes ahead");
}

/* The calling thread's credentials to the bg thread; waits until it has taken them. hold:
 * the bg thread then waits for the caller to clear g_hold (a broadcast call in between). */
static void cred_sync(int hold) {
    if (!atomic_load(&ag.running) || (pid_t)raw(SYS_getpid, 0, 0, 0, 0, 0) != ag.pid ||
        !ag_bg_alive())
        return; /* no agent thread (yet: one created later starts with our credentials) */
    if (cred_capture(&g_posted) != 0) {
        cred_give_up(2); /* our thread must not meet the broadcast with unknown credentials */
        return;
    }
    uint64_t gen = atomic_fetch_add(&g_req, 1) + 1;
    if (hold)
        atomic_store(&g_hold, gen);
    ag_bg_wake(AG_REQ_CAPS);
    uint64_t end = mono_ns() + AG_CRED_WAIT_NS;
    for (int i = 0; atomic_load(&g_done) < gen; i++) {
        if (!atomic_load(&ag.running))
            return;
        if (mono_ns() > end) {
            cred_give_up(-1);
            return;
        }
        struct timespec t = {0, i < 20 ? 50000 : 1000000};
        raw(SYS_nanosleep, (long)&t, 0, 0, 0, 0);
    }
    int rc = atomic_load(&g_result);
    if (rc != 0)
        cred_give_up(rc);
}

/* Resolved in a constructor (as signal.c's masks_init), so that a set*id from a signal handler
 * or a vfork child needs no dlsym (the loader's lock, malloc). Before it ran (another object's
 * constructor): looked up then, no thread of ours exists yet. */
enum { R_SETUID, R_SETGID, R_SETEUID, R_SETEGID, R_SETREUID, R_SETREGID, R_SETRESUID,
       R_SETRESGID, R_SETGROUPS, R_N };
static const char *const g_real_names[R_N] = {"setuid",    "setgid",    "seteuid",
                                              "setegid",   "setreuid",  "setregid",
                                              "setresuid", "setresgid", "setgroups"};
static void *_Atomic g_real[R_N];

static void *real_fn(int i) {
    void *r = atomic_load(&g_real[i]);
    if (!r) {
        r = dlsym(RTLD_NEXT, g_real_names[i]);
        atomic_store(&g_real[i], r);
    }
    return r;
}

__attribute__((constructor(102))) static void creds_init(void) {
    for (int i = 0; i < R_N; i++)
        (void)real_fn(i);
}

/* ---- glibc's broadcast calls: our thread takes the caller's credentials first ---- */

#define SETID(ret, name, params, args)                                                            \
    AG_NO_TSAN __attribute__((visibility("default"))) ret name params {                            \
        ret(*real) params = (ret(*) params)real_fn(R_##name);                                      \
        if (!real) {                                                                               \
            errno = ENOSYS;                                                                        \
            return -1;                                                                             \
        }                                                                                          \
        if (!cred_active())                                                                        \
            return real args;                                                                      \
        int took = cred_lock();                                                                    \
        if (took < 0)                                                                              \
            cred_give_up(-1);                                                                      \
        else                                                                                       \
            cred_sync(1);                                                                          \
        ret rv_ = real args;                                                                       \
        if (took > 0)                                                                              \
            atomic_store(&g_hold, 0); /* the bg thread goes on */                                  \
        cred_unlock(took);                                                                         \
        return rv_;                                                                                \
    }
#define R_setuid R_SETUID
#define R_setgid R_SETGID
#define R_seteuid R_SETEUID
#define R_setegid R_SETEGID
#define R_setreuid R_SETREUID
#define R_setregid R_SETREGID
#define R_setresuid R_SETRESUID
#define R_setresgid R_SETRESGID
#define R_setgroups R_SETGROUPS
SETID(int, setuid, (uid_t u), (u))
SETID(int, setgid, (gid_t g), (g))
SETID(int, seteuid, (uid_t u), (u))
SETID(int, setegid, (gid_t g), (g))
SETID(int, setreuid, (uid_t r, uid_t e), (r, e))
SETID(int, setregid, (gid_t r, gid_t e), (r, e))
SETID(int, setresuid, (uid_t r, uid_t e, uid_t s), (r, e, s))
SETID(int, setresgid, (gid_t r, gid_t e, gid_t s), (r, e, s))
SETID(int, setgroups, (size_t n, const gid_t *l), (n, l))

/* ---- per-thread changes: our thread follows the caller after them ---- */

int ag_creds_prctl_op(long op, long a2) {
    return op == PR_SET_KEEPCAPS || op == PR_SET_SECUREBITS || op == PR_CAPBSET_DROP ||
           (op == PR_CAP_AMBIENT && a2 != PR_CAP_AMBIENT_IS_SET);
}

int ag_creds_syscall_nr(long nr, long a0, long a1) {
    switch (nr) {
    case SYS_capset:
    case SYS_setuid:
    case SYS_setgid:
    case SYS_setreuid:
    case SYS_setregid:
    case SYS_setresuid:
    case SYS_setresgid:
    case SYS_setgroups:
        return 1;
    case SYS_prctl:
        return ag_creds_prctl_op(a0, a1);
    default:
        return 0;
    }
}

void ag_creds_changed(void) {
    if (!cred_active())
        return;
    int took = cred_lock();
    if (took < 0)
        cred_give_up(-1);
    else
        cred_sync(0);
    cred_unlock(took);
}

AG_NO_TSAN __attribute__((visibility("default"))) int capset(cap_user_header_t h,
                                                             const cap_user_data_t d) {
    long r = raw(SYS_capset, (long)h, (long)d, 0, 0, 0);
    if (r < 0) {
        errno = (int)-r;
        return -1;
    }
    ag_creds_changed();
    return 0;
}
