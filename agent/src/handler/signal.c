/* The sampling signal: choice, handler, chaining, wall requests, SIGTERM flush, calibration.
 *
 * Choice: the first real-time signal from SIGRTMAX-3 downward whose disposition is SIG_DFL
 * when the agent starts; SIGPROF is never touched (the application or gperftools may use it).
 * If the application later installs a handler for our signal (sigaction() or signal()), the
 * interposers below record it instead of replacing ours, and our handler chains to it for
 * every signal that is not one of ours (ours: SI_TIMER with our sigev tag, or SI_QUEUE from
 * our pid with our wall tag). Under sanitizers the runtime's interceptors sit in front of
 * ours: then the handler is installed directly in libc and no chaining is done (documented in
 * agent/README.md).
 *
 * The handler (async-signal-safe): saves/restores errno, classifies the signal, and hands
 * the event to ag_record_take() (record.c). Every 16th sample on a thread it also reads the
 * thread CPU clock around the body to estimate the per-sample cost (a syscall each time, so
 * not on every sample). Signals are not nested (no SA_NODEFER), so one thread never runs two
 * of our handlers at once.
 *
 * Anything on our number that is not ours goes to the application's handler, or gets the
 * disposition the application set (SIG_DFL: the process dies of it). Handlers run with
 * SA_ONSTACK (thread.c gives registered threads an alternate stack; the sigaltstack
 * interposer below hides it from the application).
 *
 * SIGTERM: if it is at its default disposition at start, our handler flushes the last chunk
 * (see "SIGTERM" below); the application keeps seeing SIG_DFL. The same for the capture signal
 * (FLEETPROF_CAPTURE_SIGNAL), whose handler asks for an incident capture.
 */
#include "ag_signal.h"
#include "record.h"
#include "agent.h"
#include "bgthread.h"
#include "sandbox.h"
#include "recorder/incid.h"

#include "cm/log.h"

#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);

int ag_sig;
static _Atomic(void *) g_app_fn;   /* application's handler for ag_sig (chained) */
static _Atomic int g_app_flags;    /* its sa_flags (SA_SIGINFO) */
static struct sigaction g_app_act; /* what sigaction(ag_sig, NULL, &old) reports */
static int g_front; /* our sigaction is the one programs call (no sanitizer runtime in front) */

extern int ag_sigaction_self(int, const struct sigaction *, struct sigaction *)
    __attribute__((alias("sigaction"), AG_COPY_ATTRS(sigaction) visibility("hidden")));

AG_NO_TSAN static sigaction_fn real_sigaction(void) {
    return AG_NEXT_FN(sigaction_fn, "sigaction");
}

/* The sigaction that a program call would reach (a sanitizer interceptor, else ours). */
static int global_sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    sigaction_fn f = (sigaction_fn)dlsym(RTLD_DEFAULT, "sigaction");
    return f ? f(sig, act, old) : -1;
}

/* The default action of a signal whose default is to terminate (every real-time signal):
 * restore SIG_DFL and send it to this thread again; it is blocked while we run and delivered
 * once we return, so the process dies of it as it would have without us. */
AG_NO_TSAN static void emulate_default(int sig) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction_fn real = real_sigaction();
    if (real && real(sig, &dfl, NULL) == 0)
        syscall(SYS_tgkill, (pid_t)syscall(SYS_getpid), (pid_t)syscall(SYS_gettid), sig);
}

/* A signal on our number that is not ours: the application's handler if it installed one,
 * else what the application's disposition says (SIG_IGN: nothing; SIG_DFL: terminate). */
AG_NO_TSAN static void chain(int sig, siginfo_t *si, void *uc) {
    void *fn = atomic_load_explicit(&g_app_fn, memory_order_acquire);
    if (fn == (void *)SIG_IGN)
        return;
    if (!fn || fn == (void *)SIG_DFL) {
        int saved = errno;
        emulate_default(sig);
        errno = saved;
        return;
    }
    if (atomic_load_explicit(&g_app_flags, memory_order_relaxed) & SA_SIGINFO)
        ((void (*)(int, siginfo_t *, void *))fn)(sig, si, uc);
    else
        ((void (*)(int))fn)(sig);
}

AG_NO_TSAN static uint64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The handler. It runs on the thread's alternate stack (SA_ONSTACK: the application's, or the
 * one thread.c gives every thread it registers), so a thread with little stack left, or Go's
 * stack checks, never see our frames. Classification first, touching neither errno nor any
 * other TLS: the signal names the slot it is for, and a thread whose TLS points at another
 * slot is a raw clone() sharing its parent's TLS (errno included): it is left alone, counted
 * (DROP_HOST_UNSAFE) and flagged so the bg thread stops its timer and wall requests. */
AG_NO_TSAN static void handler(int sig, siginfo_t *si, void *uc) {
    ag_event_t ev = {0};
    uint32_t slot;
    uintptr_t val = (uintptr_t)si->si_value.sival_ptr;
    if (si->si_code == SI_TIMER && (uint32_t)val == AG_TAG_CPU32) {
        uint64_t n = 1 + (si->si_overrun > 0 ? (uint64_t)si->si_overrun : 0);
        slot = (uint32_t)(val >> 32);
        ev.type = CM_EV_CPU;
        ev.count = CM_COUNT_ONE * n;
        ev.weight = n; /* times the thread's period, below */
    } else if (si->si_code == SI_QUEUE && si->si_pid == ag.pid &&
               ((uint64_t)val >> 48) == AG_WALL_MAGIC) {
        uint64_t v = (uint64_t)val;
        slot = (uint32_t)(v >> 1) & ((1u << AG_WALL_SLOT_BITS) - 1);
        ev.type = CM_EV_WALL;
        ev.weight = ((v >> (1 + AG_WALL_SLOT_BITS)) & ((1ull << 37) - 1)) * 1000u;
        ev.count = CM_COUNT_ONE;
        ev.flags = (v & 1) ? CM_SF_ON_CPU : 0;
        if (ev.weight == 0)
            return; /* calibration signal */
    } else {
        chain(sig, si, uc);
        return;
    }
    if (slot >= AG_MAX_THREADS || !atomic_load_explicit(&ag.running, memory_order_acquire))
        return;
    ag_thread_t *t = &ag_threads[slot], *self = ag_t_self;
    if (ev.type == CM_EV_WALL)
        atomic_store_explicit(&t->wall_pending, 0, memory_order_relaxed);
    if (self != t) {
        if (self) { /* this TLS is another registered thread's */
            atomic_store_explicit(&t->foreign_tls, 1, memory_order_relaxed);
            ag_drop_count(ev.type, CM_DROP_HOST_UNSAFE, 1);
            return;
        }
        /* registered by the /proc scan: confirm by tid (gettid cannot fail: errno intact) */
        if (atomic_load_explicit(&t->tid, memory_order_relaxed) != (pid_t)syscall(SYS_gettid) ||
            atomic_load_explicit(&t->state, memory_order_acquire) != AG_TS_ACTIVE)
            return;
        ag_t_self = t; /* this thread's own TLS: valid until it exits */
    }
    int saved = errno;
    /* A blocking mark (hooks.h) whose hook frame the thread has left without unmarking (a
     * siglongjmp out of a hooked read) would show it blocked there forever: the interrupted
     * sp above the hook's frame, or another return address in that frame (the stack reused),
     * proves it stale. Only this thread writes its mark; the frame is on its own stack. */
    uint64_t bseq = atomic_load_explicit(&t->blk_seq, memory_order_relaxed);
    if (bseq & 1) {
        uintptr_t bfp = atomic_load_explicit(&t->blk_fp, memory_order_relaxed);
        uintptr_t sp = (uintptr_t)((ucontext_t *)uc)->uc_mcontext.gregs[REG_RSP];
        uintptr_t lo = atomic_load_explicit(&t->stack_lo, memory_order_relaxed);
        uintptr_t hi = atomic_load_explicit(&t->stack_hi, memory_order_relaxed);
        if (sp > bfp || (bfp >= lo && bfp + 16 <= hi && ((const uintptr_t *)bfp)[1] !=
                                                             atomic_load_explicit(
                                                                 &t->blk_ret, memory_order_relaxed)))
            atomic_store_explicit(&t->blk_seq, bseq + 1, memory_order_release);
    }
    if (ev.type == CM_EV_CPU) {
        /* Weight: the thread's CPU time since its previous CPU sample, read from its CPU clock
         * (one syscall). period x (1 + overruns) undercounts whenever the timer is re-armed
         * while overdue: the kernel checks CPU timers only on its tick, so an expiry that a
         * short burst passed between two ticks is still pending, and timer_settime (controller
         * period changes) discards that overdue CPU. The clock delta is exact whatever the
         * timer did; the period-based value stays the fallback (no start value yet). A start
         * value of 1 means "since the thread started" (threads the /proc scan registered). */
        uint64_t now = thread_cpu_ns();
        uint64_t last = atomic_load_explicit(&t->cpu_last_ns, memory_order_relaxed);
        ev.weight *= atomic_load_explicit(&t->cpu_period_ns, memory_order_relaxed);
        if (last && now > last)
            ev.weight = now - last;
        atomic_store_explicit(&t->cpu_last_ns, now, memory_order_relaxed);
    }
    if ((++t->handler_n & 15) == 0) {
        /* Cost probe on every 16th sample (never a thread's first: cold caches and first
         * touches of its ring are not the steady state). The clock read itself costs a
         * syscall: measured back to back (t0 -> t0b) and subtracted. Probes above 100 us were
         * preempted or faulted and say nothing about the handler: skipped. */
        uint64_t t0 = thread_cpu_ns(), t0b = thread_cpu_ns();
        ag_record_take(t, &ev, uc);
        uint64_t t1 = thread_cpu_ns();
        uint64_t self_ns = t0b - t0, body = t1 - t0b;
        body = body > self_ns ? body - self_ns : 0;
        if (body < 100000) {
            atomic_fetch_add_explicit(&ag_handler_ns_sum, body, memory_order_relaxed);
            atomic_fetch_add_explicit(&ag_handler_ns_n, 1, memory_order_relaxed);
        }
    } else {
        ag_record_take(t, &ev, uc);
    }
    if (ev.type == CM_EV_WALL) /* lets the ticker tell whether the thread ran since */
        atomic_store_explicit(&t->wall_cpu_after, thread_cpu_ns(), memory_order_relaxed);
    errno = saved;
}

int ag_signal_init(void) {
    sigaction_fn real = real_sigaction();
    if (!real)
        return -ENOSYS;
    /* A sanitizer runtime in front of us (ASan/TSan interceptors): install the sampling handler
     * straight into libc, so it runs when the signal arrives (TSan would defer it to a point
     * where the interrupted stack is gone), and pass the application's calls through. The
     * whole handler path is compiled without TSan instrumentation (AG_NO_TSAN). */
    g_front = dlsym(RTLD_DEFAULT, "sigaction") == (void *)ag_sigaction_self;
    for (int s = SIGRTMAX - 3; s >= SIGRTMIN + 2; s--) {
        struct sigaction old;
        if (real(s, NULL, &old) != 0 || old.sa_handler != SIG_DFL)
            continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = handler;
        sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        if ((g_front ? global_sigaction(s, &sa, NULL) : real(s, &sa, NULL)) != 0)
            continue;
        memset(&g_app_act, 0, sizeof g_app_act);
        g_app_act.sa_handler = SIG_DFL;
        ag_sig = s;
        return 0;
    }
    return -EBUSY;
}

/* Is si one of ours (a CPU timer expiry or a wall request/wake), as the handler decides? */
int ag_signal_is_ours(const siginfo_t *si) {
    uintptr_t val = (uintptr_t)si->si_value.sival_ptr;
    return (si->si_code == SI_TIMER && (uint32_t)val == AG_TAG_CPU32) ||
           (si->si_code == SI_QUEUE && si->si_pid == ag.pid &&
            ((uint64_t)val >> 48) == AG_WALL_MAGIC);
}

int ag_signal_wall(pid_t tid, uint32_t slot, uint64_t weight_ns, int on_cpu) {
    uint64_t us = weight_ns / 1000u;
    if (us >= (1ull << 37))
        us = (1ull << 37) - 1;
    siginfo_t si;
    memset(&si, 0, sizeof si);
    si.si_signo = ag_sig;
    si.si_code = SI_QUEUE;
    si.si_pid = ag.pid;
    static uid_t uid = (uid_t)-1; /* bg thread only; informational for the kernel */
    if (uid == (uid_t)-1)
        uid = getuid();
    si.si_uid = uid;
    si.si_value.sival_ptr =
        (void *)(uintptr_t)(AG_WALL_MAGIC << 48 | us << (1 + AG_WALL_SLOT_BITS) |
                            (uint64_t)slot << 1 | (on_cpu ? 1 : 0));
    return (int)syscall(SYS_rt_tgsigqueueinfo, ag.pid, tid, ag_sig, &si);
}

uint64_t ag_signal_calibrate(void) {
    /* Kernel signal delivery + sigreturn + our classification, measured on this thread. */
    enum { N = 200 };
    pid_t tid = (pid_t)syscall(SYS_gettid);
    uint64_t t0 = thread_cpu_ns();
    for (int i = 0; i < N; i++)
        ag_signal_wall(tid, 0, 0, 0);
    uint64_t t1 = thread_cpu_ns();
    return (t1 - t0) / N;
}

/* ---- signals of ours while the application leaves them at SIG_DFL ----
 * SIGTERM (the last chunk before the process dies of it) and the capture signal
 * (FLEETPROF_CAPTURE_SIGNAL: an incident capture, recorder/triggers.c). While the
 * application's disposition of one is SIG_DFL (as far as it can tell: the sigaction/signal
 * interposers report and keep what it set, dfl_sig_t.app), our handler is the one installed.
 * When the application installs a handler of its own, it replaces ours in the kernel (its
 * handler runs exactly as without us); when it sets SIG_DFL again (a handler that chains to
 * "the previous disposition" at the end of its graceful shutdown), ours is back. One the
 * application handles or ignores at start is not taken.
 * SIGTERM's handler wakes the bg thread, waits (at most AG_TERM_WAIT_MS) in the handler for
 * the last chunk, then restores SIG_DFL and re-sends SIGTERM to its own thread: delivered as
 * the handler returns, so the process dies of SIGTERM and no application code runs in between.
 * The capture signal's stores the signal number for the triggers and wakes the bg thread. */
#define AG_TERM_WAIT_MS 2000
typedef struct {
    int sig; /* 0: none */
    void (*handler)(int);
    struct sigaction app; /* what the application set (SIG_DFL at start) */
    int installed;
} dfl_sig_t;

static _Atomic int g_term_done; /* bg: the last chunk is out */
static void sigterm_handler(int sig);
static void capture_handler(int sig);
static dfl_sig_t g_term = {.sig = SIGTERM, .handler = sigterm_handler};
static dfl_sig_t g_capsig = {.handler = capture_handler};
static dfl_sig_t *const g_dfl[] = {&g_term, &g_capsig};

/* Async-signal-safe: asks the bg thread for the last chunk and waits for it, at most
 * AG_TERM_WAIT_MS. The agent is stopped when it returns (the bg thread clears running). */
AG_NO_TSAN void ag_signal_last_chunk(void) {
    ag_bg_wake(AG_REQ_SIGTERM);
    for (int i = 0; i < AG_TERM_WAIT_MS && !atomic_load(&g_term_done); i++) {
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

AG_NO_TSAN static void sigterm_handler(int sig) {
    int saved = errno;
    if (atomic_load(&ag.running))
        ag_signal_last_chunk();
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    real_sigaction()(sig, &dfl, NULL);
    g_term.installed = 0;
    syscall(SYS_tgkill, (pid_t)syscall(SYS_getpid), (pid_t)syscall(SYS_gettid), sig);
    errno = saved;
}

AG_NO_TSAN static void capture_handler(int sig) {
    int saved = errno;
    if (atomic_load(&ag.running)) {
        atomic_store(&ag_trig_signal, sig);
        ag_bg_wake(0);
    }
    errno = saved;
}

void ag_signal_sigterm_done(void) { atomic_store(&g_term_done, 1); }

static void dfl_install(dfl_sig_t *m, sigaction_fn real) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = m->handler;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART | SA_ONSTACK;
    if (real(m->sig, &sa, NULL) == 0)
        m->installed = 1;
}

/* Installs m's handler if its signal is at SIG_DFL; returns whether it did. */
static int dfl_take(dfl_sig_t *m) {
    struct sigaction old;
    if (real_sigaction()(m->sig, NULL, &old) != 0 || old.sa_handler != SIG_DFL ||
        (old.sa_flags & SA_SIGINFO))
        return 0;
    m->app = old;
    /* under a sanitizer runtime its interceptor must know the handler (and the application's
     * calls do not reach our interposer: there is nothing to keep up to date) */
    dfl_install(m, g_front ? real_sigaction() : global_sigaction);
    return m->installed;
}

void ag_signal_sigterm_install(void) {
    dfl_take(&g_term);
    int c = ag.cfg.incid.on ? ag.cfg.incid.capture_signal : 0;
    if (!c)
        return;
    if (c == ag_sig) {
        CM_WARN("FLEETPROF_CAPTURE_SIGNAL=%d is the sampling signal: no capture signal", c);
        return;
    }
    g_capsig.sig = c;
    if (dfl_take(&g_capsig))
        CM_INFO("incident capture on signal %d (%s)", c, sigabbrev_np(c) ? sigabbrev_np(c) : "RT");
    else
        CM_WARN("FLEETPROF_CAPTURE_SIGNAL=%d: the program handles or ignores it already; not "
                "taken (no capture signal)", c);
}

void ag_signal_sigterm_restore(void) {
    for (size_t i = 0; i < sizeof g_dfl / sizeof g_dfl[0]; i++) {
        dfl_sig_t *m = g_dfl[i];
        if (!m->installed)
            continue;
        struct sigaction cur;
        if (real_sigaction()(m->sig, NULL, &cur) == 0 && cur.sa_handler == m->handler)
            real_sigaction()(m->sig, &m->app, NULL); /* SIG_DFL, as the application set */
        m->installed = 0;
    }
}

/* The application's sigaction on m's signal while we manage it: it sees what it set. */
AG_NO_TSAN static int dfl_sigaction(dfl_sig_t *m, const struct sigaction *act,
                                    struct sigaction *old, sigaction_fn real) {
    if (act && (act->sa_flags & SA_SIGINFO) == 0 && act->sa_handler == SIG_DFL &&
        atomic_load(&ag.running)) {
        if (old)
            *old = m->app;
        m->app = *act;
        dfl_install(m, real);
        return 0;
    }
    struct sigaction prev = m->app;
    if (act) {
        if (real(m->sig, act, NULL) != 0)
            return -1;
        m->app = *act;
        m->installed = 0;
    }
    if (old)
        *old = prev;
    return 0;
}

/* ---- interposers: keep the application's handler for our signal chained behind ours ---- */

AG_NO_TSAN __attribute__((visibility("default"))) int sigaction(int sig, const struct sigaction *act,
                                                     struct sigaction *old) {
    sigaction_fn real = real_sigaction();
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    for (size_t i = 0; g_front && sig && i < sizeof g_dfl / sizeof g_dfl[0]; i++) {
        dfl_sig_t *m = g_dfl[i]; /* SIGTERM or the capture signal while we manage it */
        if (sig == m->sig && (m->installed || m->app.sa_handler != SIG_DFL ||
                              (m->app.sa_flags & SA_SIGINFO)))
            return dfl_sigaction(m, act, old, real);
    }
    if (!g_front || !ag_sig || sig != ag_sig)
        return real(sig, act, old);
    if (old)
        *old = g_app_act;
    if (act) {
        g_app_act = *act;
        atomic_store(&g_app_flags, act->sa_flags);
        atomic_store_explicit(&g_app_fn,
                              (act->sa_flags & SA_SIGINFO) ? (void *)act->sa_sigaction
                                                           : (void *)act->sa_handler,
                              memory_order_release);
    }
    return 0;
}

AG_NO_TSAN __attribute__((visibility("default"))) sighandler_t signal(int sig, sighandler_t h) {
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = h;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* glibc's signal() has BSD semantics */
    if (sigaction(sig, &sa, &old) != 0)
        return SIG_ERR;
    return old.sa_handler;
}

/* The application sees no alternate stack where the only one is ours (thread.c gives every
 * thread it registers one for our handlers): it would not have one without us. */
typedef int (*sigaltstack_fn)(const stack_t *, stack_t *);
AG_NO_TSAN __attribute__((visibility("default"))) int sigaltstack(const stack_t *ss,
                                                                  stack_t *old) {
    sigaltstack_fn r = AG_NEXT_FN(sigaltstack_fn, "sigaltstack");
    stack_t cur;
    int rc = r ? r(ss, &cur) : (int)syscall(SYS_sigaltstack, ss, &cur);
    if (rc == 0 && old) {
        *old = cur;
        if (!(cur.ss_flags & (SS_DISABLE | SS_ONSTACK)) && ag_thread_altstack_is_ours(cur.ss_sp)) {
            old->ss_sp = NULL;
            old->ss_size = 0;
            old->ss_flags = SS_DISABLE;
        }
    }
    return rc;
}

/* ---- signal masks: nothing of ours queued to a thread that blocks our signal ----
 *
 * A thread that blocks our signal (every signal, as a worker pool's threads or a program
 * that handles signals with sigwaitinfo do) would keep its CPU timer's expiry and a wall
 * request queued for as long as it blocks it: against the user's RLIMIT_SIGPENDING, and
 * taken by a sigwaitinfo over every signal as if it were the program's. So when a registered
 * thread blocks our signal through pthread_sigmask or sigprocmask, its timer is stopped
 * (thread.c), the bg thread sends it no wall request (sig_blocked; the seq_cst pair with
 * wall_sending as for exec), and any of ours already queued to it is taken back here
 * (rt_sigtimedwait with a zero timeout; a signal of the program's on our number is queued
 * again). Unblocking starts the timer again. A thread born blocking it (the mask is
 * inherited) starts without. Cost: a bit test per call; the system calls only when the state
 * of our signal changes (3-4 on a block, 1 on an unblock). Masks set by raw system calls, and
 * the temporary ones of sigsuspend, ppoll and handlers, are not seen. */
typedef int (*sigmask_fn)(int, const sigset_t *, sigset_t *);
static _Atomic(sigmask_fn) g_real_pthread_sigmask, g_real_sigprocmask;

int ag_signal_blocked_here(void) {
    sigset_t cur;
    return ag_sig && ag_rawsys(SYS_rt_sigprocmask, SIG_BLOCK, 0, (long)&cur, 8, 0) == 0 &&
           sigismember(&cur, ag_sig) == 1;
}

AG_NO_TSAN static void take_back_ours(ag_thread_t *t, pid_t tid) {
    while (atomic_load(&t->wall_sending))
        sched_yield();
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, ag_sig);
    siginfo_t si, back[8];
    int nback = 0;
    struct timespec zero = {0, 0};
    /* Not one more once back[] is full: the program's signals past that stay pending (the
     * ones taken back are queued again behind them; a program this busy with our number
     * clashes with us anyway, but none of its signals is lost). */
    for (int i = 0; i < 64 && nback < 8 &&
                    ag_rawsys(SYS_rt_sigtimedwait, (long)&one, (long)&si, (long)&zero, 8, 0) == ag_sig;
         i++) {
        if (!ag_signal_is_ours(&si))
            back[nback++] = si;
        else if (si.si_code == SI_QUEUE)
            atomic_store(&t->wall_pending, 0); /* the handler would have cleared it */
    }
    for (int i = 0; i < nback; i++)
        ag_rawsys(SYS_rt_tgsigqueueinfo, ag.pid, tid, ag_sig, (long)&back[i], 0);
}

AG_NO_TSAN static void mask_changed(int how, const sigset_t *set) {
    ag_thread_t *t = ag_t_self;
    if (!set || !t || !ag_sig || !atomic_load_explicit(&ag.running, memory_order_relaxed))
        return;
    int mem = sigismember(set, ag_sig) == 1, blocked;
    if (how == SIG_SETMASK)
        blocked = mem;
    else if ((how == SIG_BLOCK || how == SIG_UNBLOCK) && mem)
        blocked = how == SIG_BLOCK;
    else
        return;
    if (blocked == atomic_load(&t->sig_blocked))
        return;
    int saved = errno;
    pid_t tid = (pid_t)ag_rawsys(SYS_gettid, 0, 0, 0, 0, 0);
    if (atomic_load(&t->tid) == tid && atomic_load(&t->state) == AG_TS_ACTIVE) {
        ag_thread_sig_blocked(t, blocked); /* not a raw clone on its parent's TLS */
        if (blocked)
            take_back_ours(t, tid);
    }
    errno = saved;
}

AG_NO_TSAN static sigmask_fn real_mask(_Atomic(sigmask_fn) *slot, const char *name) {
    sigmask_fn r = atomic_load(slot);
    if (!r) {
        r = (sigmask_fn)dlsym(RTLD_NEXT, name);
        atomic_store(slot, r);
    }
    return r;
}

/* Resolved in a constructor (as hook_exec.c's), so that a call from a signal handler needs no
 * dlsym, whether or not the agent is enabled. */
__attribute__((constructor(102))) static void masks_init(void) {
    (void)real_mask(&g_real_pthread_sigmask, "pthread_sigmask");
    (void)real_mask(&g_real_sigprocmask, "sigprocmask");
}

AG_NO_TSAN __attribute__((visibility("default"))) int pthread_sigmask(int how, const sigset_t *set,
                                                                      sigset_t *old) {
    sigmask_fn r = real_mask(&g_real_pthread_sigmask, "pthread_sigmask");
    if (!r)
        return ENOSYS;
    int rc = r(how, set, old);
    if (rc == 0)
        mask_changed(how, set);
    return rc;
}

AG_NO_TSAN __attribute__((visibility("default"))) int sigprocmask(int how, const sigset_t *set,
                                                                  sigset_t *old) {
    sigmask_fn r = real_mask(&g_real_sigprocmask, "sigprocmask");
    if (!r) {
        errno = ENOSYS;
        return -1;
    }
    int rc = r(how, set, old);
    if (rc == 0)
        mask_changed(how, set);
    return rc;
}
