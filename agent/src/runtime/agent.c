/* Agent lifecycle: start in the library constructor (LD_PRELOAD or linked), stop and flush
 * in the destructor (exit(), return from main, dlclose), follow fork(), and the public
 * fleetprof_flush()/fleetprof_enabled().
 *
 * Start order: config -> signal choice -> SIGTERM hook -> running=1 -> register the calling
 * (main) thread -> background thread (which scans /proc/self/task for threads that existed
 * before us). Any failure disables the agent with one warning; the host program goes on.
 *
 * fork: pthread_atfork prepare takes the registry, label and bg work locks (so no agent lock
 * is held, and no agent state is half-updated, at the instant of fork); the parent releases
 * them; the child reinitialises them, takes a new identity (pid, sequence 0),
 * keeps only the forking thread's slot and starts a fresh background thread. With
 * FLEETPROF_FORK=stop (automatic under ThreadSanitizer, which forbids threads in such a child)
 * the child stops profiling instead.
 * exec: LD_PRELOAD stays in the environment, so the new image loads and starts the agent
 * again; the chunk being built at exec time is lost (exec runs no destructors).
 */
#include "ag_alloc.h"
#include "hooks.h"
#include "incid.h"
#include "clock.h"
#include "ag_signal.h"
#include "defer.h"
#include "context.h"
#include "spans.h"
#include "symbols.h"
#include "lazylibs.h"
#include "sender.h"
#include "agent.h"
#include "bgthread.h"
#include "sandbox.h"
#include "sigroom.h"
#include "pyframes.h"

#include "cm/file.h"
#include "cm/log.h"
#include "fleetprof.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

ag_state_t ag;

extern pthread_mutex_t ag_work_mu, ag_flush_mu;
extern pthread_cond_t ag_flush_cv;
AG_HIDDEN void ag_bg_after_fork_child(void);

static uint64_t process_start_ns(void) {
    /* starttime (field 22 of /proc/self/stat, clock ticks after boot) -> unix ns */
    char buf[1024];
    uint64_t now = ag_now_real();
    if (cm_read_file("/proc/self/stat", buf, sizeof buf) <= 0)
        return now;
    const char *p = strrchr(buf, ')');
    unsigned long long ticks = 0;
    for (int field = 2; p && *p && field < 22; p++)
        if (*p == ' ')
            field++;
    if (!p || sscanf(p, "%llu", &ticks) != 1)
        return now;
    struct timespec bt;
    clock_gettime(CLOCK_BOOTTIME, &bt);
    uint64_t since_boot = (uint64_t)bt.tv_sec * 1000000000u + (uint64_t)bt.tv_nsec;
    uint64_t start_after_boot = ticks * (1000000000ull / (uint64_t)sysconf(_SC_CLK_TCK));
    return start_after_boot < since_boot ? now - (since_boot - start_after_boot) : now;
}

/* The process's start time for chunk headers: read once, on the bg thread, so that a
 * short-lived process never pays for the /proc read. */
uint64_t ag_process_start_ns(void) {
    if (!ag.process_start_ns)
        ag.process_start_ns = process_start_ns();
    return ag.process_start_ns;
}

/* The allocator's lock is taken last, whether or not the agent runs (ag_alloc.c serves the
 * agent's allocations on any thread). */
static void atfork_prepare(void) {
    if (atomic_load(&ag.running)) {
        pthread_mutex_lock(&ag_work_mu);
        ag_thread_lock();
        ag_context_lock();
    }
    ag_alloc_fork_prepare();
}

static void atfork_parent(void) {
    ag_alloc_fork_parent();
    if (!atomic_load(&ag.running))
        return;
    ag_context_unlock();
    ag_thread_unlock();
    pthread_mutex_unlock(&ag_work_mu);
}

static void atfork_child(void) {
    ag_alloc_fork_child();
    if (!atomic_load(&ag.running))
        return;
    ag_context_after_fork_child();
    ag_spans_after_fork_child();
    ag_bg_after_fork_child();
    /* ThreadSanitizer kills a multi-threaded process's child that starts a thread. */
    int follow = ag.cfg.fork_follow && dlsym(RTLD_DEFAULT, "__tsan_init") == NULL;
    ag_defer_after_fork_child(follow);
    if (!follow) {
        atomic_store(&ag.running, 0); /* no timers survive fork; handlers now return at once */
        ag_thread_after_fork_child();
        ag_signal_sigterm_restore();
        return;
    }
    ag.pid = getpid();
    ag.process_start_ns = ag_now_real();
    atomic_store(&ag.requests, 0);
    ag_sender_after_fork_child();
    ag.sequence = ag_sender_first_sequence();
    ag_thread_after_fork_child(); /* reinitialises the registry lock, re-arms our timer */
    if (ag_bg_start() != 0) {
        atomic_store(&ag.running, 0);
        ag_thread_stop_all();
    }
}

__attribute__((constructor)) static void ag_start(void) {
    ag_config_load(&ag.cfg);
    cm_log_init("fleetprof-agent", (cm_log_level_t)ag.cfg.log_level);
    if (!ag.cfg.enabled)
        return;
    ag.pid = getpid();
    ag.process_start_ns = 0; /* read from /proc by the bg thread (ag_process_start_ns) */
    if (gethostname(ag.host, sizeof ag.host - 1) != 0)
        snprintf(ag.host, sizeof ag.host, "unknown");
    /* The controller's shortest period is the initial one, 1/FLEETPROF_CPU_HZ (10 ms): a thread
     * is sampled at most 100 times per second of its CPU (async-profiler's and ddprof's
     * default density), so a process using under a core gets fewer than the set point. With
     * the set point at any load, each sample's cost weighed on less and less of the program's
     * CPU: redis-server at 0.55 cores took 180 samples per CPU-second (bench/RESULTS.md, issue
     * 14 session 14). Between that floor and 10 s the rate holds whatever the load. */
    double p0 = (double)ag.cfg.cpu_period_ns;
    ag_ctl_init(&ag.ctl[CM_EV_CPU], CM_EV_CPU, ag.cfg.cpu_rate, p0, p0, 1e10 /* 0.1 Hz */,
                ag.cfg.controller);
    /* the timers' period: the stream's, divided by the flight recorder's density (its records
     * split on the bg thread, recorder/density.c) */
    atomic_store(&ag.cpu_period_ns,
                 ag.cfg.incid.on && ag.cfg.incid.density > 1
                     ? (uint64_t)(p0 / ag.cfg.incid.density) : ag.cfg.cpu_period_ns);
    int rc = ag_signal_init();
    if (rc != 0) {
        CM_WARN("no free real-time signal for sampling; profiling disabled");
        return;
    }
    ag_thread_module_init();
    ag_sigroom_init(); /* before the first timer */
    if (ag_defer_init(AG_DEFER_ARENA) != 0) /* before any timer: samples until the first tables */
        CM_INFO("no arena for early stack copies: samples before the first unwind tables "
                "are unwound with frame pointers only");
    ag_sandbox_init();
    ag_py_init();
    ag_symbols_init();
    ag_sender_init(&ag.cfg);
    ag.sequence = ag_sender_first_sequence();
    /* Issue 13: a malloc other than glibc's (the program's own, an unknown library's) may not
     * be one the agent's thread can call; dlopen allocates through it, so libprotobuf-c
     * (needed for every chunk) is loaded here, on the program's thread, instead of on the
     * first chunk. */
    if (ag_malloc_global_foreign())
        ag_pblib_preload();
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    ag_signal_sigterm_install();
    atomic_store(&ag.running, 1);
    ag_thread_register_self();
    if ((rc = ag_bg_start()) != 0) {
        CM_WARN("cannot start the background thread: %s; profiling disabled", strerror(-rc));
        atomic_store(&ag.running, 0);
        ag_thread_stop_all();
        ag_signal_sigterm_restore();
        return;
    }
    CM_INFO("started: service=%s version=%s signal=%d interval=%.1fs", ag.cfg.service,
            ag.cfg.version, ag_sig, (double)ag.cfg.interval_ns / 1e9);
}

/* A child made without our atfork handlers (glibc's _Fork, which the program may call itself
 * and sandbox.c calls in a signal handler; a raw fork or clone system call): it holds our
 * state as the fork found it (locks held by threads that do not exist here, a builder or
 * registry half-updated) and has no background thread. Its pid is not ag.pid: it stops
 * profiling at the first agent entry that would lock or wait (this one, the destructor,
 * thread registration and exit, the label and flush API), touching nothing else. Then every
 * hook and handler sees running == 0 and forwards. */
int ag_unseen_child(void) {
    if (!ag.pid || (pid_t)syscall(SYS_getpid) == ag.pid) /* never started, or ours */
        return 0;
    if (atomic_load(&ag.running))
        ag_bg_forget_child();
    return 1;
}

void ag_agent_stop(void) {
    if (!atomic_load(&ag.running) || ag_unseen_child())
        return;
    ag_thread_stop_all();
    ag_bg_stop(); /* last chunk (if any): drained rings, file written, socket not waited on */
    atomic_store(&ag.running, 0);
    ag_signal_sigterm_restore();
}

__attribute__((destructor)) static void ag_stop(void) { ag_agent_stop(); }

/* The manual trigger (recorder/triggers.c): here with the other entry points, so that the
 * triggers' code (fp_agent_core) does not pull the bg thread's loop into a test. */
int fleetprof_capture(void) {
    if (!atomic_load(&ag.running))
        return -ESRCH;
    if (!ag.cfg.incid.on)
        return -ENOTSUP;
    atomic_store(&ag_trig_manual, 1);
    ag_bg_wake(0);
    return 0;
}

int fleetprof_flush(void) {
    if (!atomic_load(&ag.running) || ag_unseen_child())
        return ag.cfg.enabled ? -ESRCH : 0;
    pthread_mutex_lock(&ag_flush_mu);
    uint64_t gen = atomic_load(&ag.flush_done);
    ag_bg_wake(AG_REQ_FLUSH);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += 5;
    int rc = 0;
    while (atomic_load(&ag.flush_done) == gen && rc == 0)
        rc = pthread_cond_timedwait(&ag_flush_cv, &ag_flush_mu, &ts);
    int done = atomic_load(&ag.flush_done) != gen;
    pthread_mutex_unlock(&ag_flush_mu);
    return done ? 0 : -ETIMEDOUT;
}

int fleetprof_enabled(void) { return atomic_load(&ag.running) ? 1 : 0; }
