/* The agent's background thread: its loop (deadlines, wakeups, ring draining, rate control),
 * which calls the wall sampler (wall.c), cuts chunks (chunk.c) and drives delivery (sender.c).
 *
 * Never sampled itself (created with ag_thread_create_raw, skipped by the thread scan). Holds
 * g_work while it works (not while it sleeps in poll), so that fork() (agent.c's atfork
 * handlers take it) never copies half-updated builder, symbol or sender state into a child.
 * Woken early (ag_bg_wake: async-signal-safe, no descriptor; see there) for flush, stop and
 * SIGTERM requests.
 *
 * Agent CPU accounting per chunk (cpuacct.c): this thread's own CPU clock, plus handler cost
 * estimated as samples x (calibrated kernel signal delivery cost + mean measured handler
 * body). The budget compares that with the process CPU (floored at 1% of one core, so an idle
 * process still allows the agent ~0.1 ms/s at a 1% budget; AG_BUDGET_FLOOR) and slows the
 * periodic work and the CPU set point apart (controller.c: ag_budget_step).
 */
#include "bgthread.h"
#include "ag_signal.h"
#include "agent.h"
#include "builder.h"
#include "bypass.h"
#include "cfi_table.h"
#include "chunk.h"
#include "clock.h"
#include "cpuacct.h"
#include "creds.h"
#include "defer.h"
#include "hooks.h"
#include "incid.h"
#include "loader_gate.h"
#include "procstat.h"
#include "pyframes.h"
#include "sender.h"
#include "sigroom.h"
#include "symbols.h"
#include "wall.h"

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
 * it does (the switch in and out, cold caches; bench/RESULTS.md, "Agent: CPU and wall-clock
 * sampling"): at 4 Hz of control and 2 Hz of scans that alone is 0.4 ms/s, the whole 1% budget
 * of a process using 4% of a core (redis-server under redis-benchmark), which the budget
 * could not reduce. */
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
    uint64_t ctl_seen, ctl_mono;                      /* controller window start */
    uint64_t ctl_proc, ctl_bg;                        /* process / this thread's CPU then */
    uint64_t bud_agent, bud_proc, bud_mono, bud_cpu; /* budget window start */
    uint64_t bud_stream, bud_rd;                      /* stream CPU records, recorder work */
    uint64_t timer_period;                            /* the CPU timers' period (ns) */
    ag_budget_t bud;
    int bud_soon; /* step the budget at the next control window, however short */
    int ctl_idle; /* the last control window's load was under AG_BUDGET_FLOOR */
    uint64_t over_budget_frac;                        /* fractional DROP_OVER_BUDGET carry */
} B;
static ag_builder_t *g_parent_builder; /* a fork's child: the parent's builder, freed by bg */

/* base / f, at most max: an interval stretched by the budget factor. */
static uint64_t stretch(uint64_t base, double f, uint64_t max) {
    double v = f > 0 ? (double)base / f : (double)max;
    return v < (double)max ? (uint64_t)v : max;
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

/* With the recorder's own density (recorder/density.c): every record to the recorder with its
 * own weight, the stream's subset to the chunk. A CPU record's stream weight is the thread's
 * CPU since its previous stream record; a wall record (a request of a stream tick: the
 * recorder's ticks send none) carries the stream's weight, the recorder's was kept at the
 * send (rd_wall_w). */
static uint64_t g_rd_adds, g_all_adds; /* records added to the recorder's builder, to any */

static void drain_split(ag_thread_t *t, pid_t tid, ag_rec_t *r) {
    if (r->type == CM_EV_CPU) {
        ag_fr_add(t, tid, r);
        g_rd_adds++;
        if (ag_rd_cpu_split(t, r, ag.ctl[CM_EV_CPU].period)) {
            ag_builder_add(B.b, t, tid, r);
            g_all_adds++;
        }
        return;
    }
    ag_builder_add(B.b, t, tid, r);
    uint64_t w = r->weight;
    if (r->type == CM_EV_WALL && t->rd_wall_w)
        r->weight = t->rd_wall_w;
    ag_fr_add(t, tid, r);
    r->weight = w;
    t->rd_wall_w = 0;
    g_rd_adds++;
    g_all_adds++;
}

/* The recorder's share of the drains' CPU: measured around one drain in AG_DRAIN_PROBE (a
 * clock read is a system call: one per drain cost a process using 2 % of a core ~0.1 %), shared
 * out by the records each builder took, times AG_DRAIN_PROBE. */
#define AG_DRAIN_PROBE 16
static uint32_t g_drains;

static void drain_charge(uint64_t cpu0) {
    uint64_t ns = ag_clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0, n = g_rd_adds + g_all_adds;
    if (n)
        ag_rd_charge((uint64_t)((double)ns * AG_DRAIN_PROBE * (double)g_rd_adds / (double)n));
}

static void drain(void) {
    uint32_t hw = ag_thread_hw();
    int split = ag_rd_active();
    int probe = split && ++g_drains % AG_DRAIN_PROBE == 0;
    uint64_t cpu0 = probe ? ag_clock_ns(CLOCK_THREAD_CPUTIME_ID) : 0;
    g_rd_adds = g_all_adds = 0;
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
            if (r->type >= CM_EV_ALLOC) { /* hook records: strip hook frames, live heap, paths */
                ag_hooks_bg_add(B.b, t, tid, r);
                ag_fr_add(t, tid, r); /* the baseline triggers' rates */
            } else if (split) {
                drain_split(t, tid, (ag_rec_t *)r); /* ours until released */
            } else {
                ag_builder_add(B.b, t, tid, r);
                ag_fr_add(t, tid, r); /* flight recorder (recorder/flightrec.c): CPU and wall */
            }
            if (r->type == CM_EV_WALL && (t->wall_rec || (t->wall_rec = malloc(AG_REC_MAX))))
                memcpy(t->wall_rec, r, len);
            else if (r->type == CM_EV_CPU && (t->cpu_rec || (t->cpu_rec = malloc(AG_REC_MAX))))
                memcpy(t->cpu_rec, r, len);
            ag_ring_release(&t->ring, qlen);
        }
    }
    if (probe)
        drain_charge(cpu0);
}

/* A control window stretched by the budget (an idle process's) in which work resumed: its
 * average load understates the load now (the work began somewhere inside it), and a period
 * set from it would sample the new work at up to the tick's 250/s for a window; its budget
 * share, averaged over the idle part too, keeps the wall ticks slow for another second. So
 * the controller keeps its period, and the next window (both controls) is AG_RESUME_NS. */
#define AG_RESUME_NS (AG_CTL_DT_NS / 5)

/* One control window; returns 1 when work resumed after an idle stretch (see above). */
/* CPU records of the stream so far: every one taken, or with the recorder's own density the
 * stream's share of them (recorder/density.c). */
static uint64_t stream_seen(void) {
    return ag_rd_active() ? ag_rd_stream_seen()
                                       : atomic_load(&ag_events_seen[CM_EV_CPU]);
}

/* The budgets over the last window: the recorder's extra work (its extra CPU samples at the
 * sample cost estimate, what the bg thread measured of its work) against its own budget,
 * the rest against the agent's. */
static void budget_window(uint64_t now) {
    uint64_t a = ag_agent_cpu_now(), p = ag_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    uint64_t cpu_seen = atomic_load(&ag_events_seen[CM_EV_CPU]), st = stream_seen();
    uint64_t rd = ag_rd_charged();
    double cost = (double)ag_cpu_sample_cost_ns(), wall = (double)(now - B.bud_mono);
    double stream_n = (double)(st - B.bud_stream), all_n = (double)(cpu_seen - B.bud_cpu);
    double extra_n = all_n > stream_n ? all_n - stream_n : 0; /* the recorder's own samples */
    double extra = ag_fr_on() ? extra_n * cost + (double)(rd - B.bud_rd) : 0;
    double agent = (double)(a - B.bud_agent) > extra ? (double)(a - B.bud_agent) - extra : 0;
    if (ag.ctl[CM_EV_CPU].enabled) /* with fixed periods the user asked for exactly that rate */
        ag_budget_step(&B.bud, ag.cfg.cpu_budget, agent, stream_n * cost,
                       (double)(p - B.bud_proc), wall);
    if (ag_rd_active()) {
        ag_rd_budget_step(extra, (double)(p - B.bud_proc), wall);
        CM_DEBUG("recorder budget: %.3f ms of extra samples and %.3f ms measured over %.3f ms of "
                 "process CPU in %.3f s: density %.2f (wall %.2f)", extra_n * cost / 1e6,
                 (double)(rd - B.bud_rd) / 1e6,
                 (double)(p - B.bud_proc) / 1e6, wall / 1e9, ag_rd_density(),
                 ag_rd_wall_density());
    }
    B.bud_agent = a;
    B.bud_proc = p;
    B.bud_cpu = cpu_seen;
    B.bud_stream = st;
    B.bud_rd = rd;
    B.bud_mono = now;
}

/* The timers' period for the stream's period p: p itself, or p / the recorder's density;
 * small changes are not applied. */
static void set_timers(double p) {
    uint64_t tp = ag_rd_active() ? ag_rd_timer_period(p) : (uint64_t)p;
    double old = (double)B.timer_period;
    if (old && (double)tp <= old * 1.02 && (double)tp >= old * 0.98)
        return;
    B.timer_period = tp;
    atomic_store(&ag.cpu_period_ns, tp);
    ag_thread_set_cpu_period(tp);
}

static int control(uint64_t now) {
    double dt = (double)(now - B.ctl_mono) / 1e9;
    uint64_t seen = stream_seen();
    uint64_t n = seen - B.ctl_seen;
    B.ctl_seen = seen;
    B.ctl_mono = now;
    /* The CPU the sampled threads used over the window: the process's minus this thread's. */
    uint64_t proc = ag_clock_ns(CLOCK_PROCESS_CPUTIME_ID), bg = ag_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    uint64_t sampled = proc - B.ctl_proc > bg - B.ctl_bg ? (proc - B.ctl_proc) - (bg - B.ctl_bg) : 0;
    B.ctl_proc = proc;
    B.ctl_bg = bg;
    double load = dt > 0 ? (double)sampled / 1e9 / dt : 0;
    int resumed = B.ctl_idle && dt * 1e9 > 2.0 * AG_CTL_DT_NS && load >= 0.05;
    B.ctl_idle = load < AG_BUDGET_FLOOR;

    /* Budget over the last >= 1 s, or right after work resumed (the agent's only acted on with
     * the controller on: with fixed periods the user asked for exactly that rate; the
     * recorder's always). */
    if ((ag.ctl[CM_EV_CPU].enabled || ag_rd_split()) &&
        (now - B.bud_mono >= 1000000000ull || B.bud_soon))
        budget_window(now);
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
             "(cpu) %.3f (periodic work), period %.3f ms -> %.3f ms, recorder density %.2f",
             (unsigned long long)n, load, dt, resumed ? " (work resumed)" : "", B.bud.cpu,
             B.bud.bg, old / 1e6, p / 1e6, ag_rd_density());
    if (p == old || (p <= old * 1.02 && p >= old * 0.98))
        c->period = p = old; /* small changes are not applied: keep the model and the timers equal */
    set_timers(p); /* the stream's period, or the recorder's density changed */
    return resumed;
}

static int g_foreign_malloc; /* the global malloc is not one this thread may call */

/* The loop's deadlines (monotonic ns) and what decides them. */
typedef struct {
    uint64_t wall_ns;                 /* wall tick period, 0: no wall ticks */
    uint64_t next_wall, next_ctl, next_scan, next_chunk;
    uint64_t next_xwall;              /* the flight recorder's own wall tick, 0: none */
    uint64_t cpu_slept;               /* with it: this thread's CPU when it last went to sleep */
    uint64_t scan_soon;               /* the next scan's delay while resolving new threads */
    uint64_t last_scan, last_wall;
    uint64_t lazy_at;                 /* deferred start work, 0: done */
    int unresolved;                   /* threads without stack bounds after the last scan */
} bg_sched_t;

/* Process-directed signals are the application's business: keep them off this thread.
 * wait_set: what ppoll lets in (our signal only: a wake); self_set: our signal. */
static void bg_block_signals(sigset_t *wait_set, sigset_t *self_set) {
    sigset_t set;
    sigfillset(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    *wait_set = set;
    sigdelset(wait_set, ag_sig);
    sigemptyset(self_set);
    sigaddset(self_set, ag_sig);
}

/* Whose malloc is this? The agent's own allocations never go there (ag_alloc.c), but
 * elfutils and dlopen would. Once, here rather than in the constructor: a short-lived process
 * never pays for the object walk. */
static void bg_check_malloc(void) {
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
    if (ag_alloc_bypass_stats.slots || ag_alloc_bypass_stats.failed)
        CM_DEBUG("allocation sampling off: %u calls of %u objects go to the allocator directly "
                 "(%u left to the hooks: read-only page; %u bound elsewhere)",
                 ag_alloc_bypass_stats.slots, ag_alloc_bypass_stats.objects,
                 ag_alloc_bypass_stats.failed, ag_alloc_bypass_stats.foreign);
}

/* FLEETPROF_TEST_CFI_DELAY_MS: a slow start, for tests. A step that serves no credential
 * request (tests/hostile/setxid_slow.c): only a give-up ends it early, as ag_creds_serve
 * would. */
static void bg_test_delay(void) {
    for (uint64_t left = ag_defer_test_delay_ns; left;) {
        uint64_t ns = left < 10000000u ? left : 10000000u;
        struct timespec d = {0, (long)ns};
        while (nanosleep(&d, &d) != 0 && errno == EINTR)
            ;
        left -= ns;
        ag_creds_quit_point();
    }
}

/* Everything before the loop: the first sleep, the malloc check, the first /proc scan and
 * unwind tables, then the chunk and control state and the deadlines (under the work lock). */
static void bg_setup(bg_sched_t *s, const sigset_t *wait_set) {
    g_uid = getuid();
    atomic_store(&g_bg_tid, (pid_t)syscall(SYS_gettid));
    ag_cfi_between_objects = ag_creds_serve_quick; /* set*id callers wait for this thread */
    /* Nothing to do yet (the rings fill, timers run): a process that is gone within
     * AG_START_DELAY_NS never pays for the setup below, unless a request (exit with samples to
     * send, flush, SIGTERM) comes first. */
    struct timespec delay = {0, (long)AG_START_DELAY_NS};
    if (!atomic_load(&ag.requests) && !atomic_exchange(&g_wake_early, 0))
        ppoll(NULL, 0, &delay, wait_set);
    atomic_store(&g_wake_pending, 0);
    ag_creds_serve(); /* a credential change waits for this thread (creds.c): at every step */
    pthread_setname_np(pthread_self(), "fleetprof"); /* visible in top -H, perf, gdb */
    bg_check_malloc();
    /* Unwind tables first: until they are published, samples carry copies of their stacks
     * (defer.c). Not under the work lock: a fork meanwhile copies at most a half-built
     * private table, which the child's ticks rebuild. */
    /* The first chunk's agent and process CPU count from here: building the tables (and the
     * symbol tables after) is the agent's cost too (~30 ms for python3's objects; ~0.3-0.6 s
     * under ThreadSanitizer's instrumentation). */
    uint64_t agent_cpu0 = ag_agent_cpu_now(), proc_cpu0 = ag_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    if (ag_defer_test_delay_ns)
        bg_test_delay();
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
    ag_builder_free(g_parent_builder); /* a fork's child: the parent's, left by atfork */
    g_parent_builder = NULL;
    B.b = ag_builder_new();
    ag_fr_start(g_start_real); /* flight recorder and incident triggers, if on */
    /* The first chunk covers the samples taken since the start, before the tables too (their
     * times would otherwise be clamped to a start hundreds of ms late on a loaded machine). */
    ag_chunk_begin(g_start_real, agent_cpu0, proc_cpu0);
    B.bud_agent = ag_agent_cpu_now();
    B.bud_proc = ag_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    B.bud_mono = B.ctl_mono = now;
    B.ctl_seen = stream_seen();
    B.ctl_proc = ag_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    B.ctl_bg = ag_clock_ns(CLOCK_THREAD_CPUTIME_ID);
    /* Every counter counts from the agent's start (zero) or from the fork (the baselines
     * ag_bg_after_fork_child took), not from this thread's start: the application runs
     * meanwhile, its records wait in the rings and go into the first chunk, and a burst of
     * allocation samples before the first drain (1,280 x 1 MiB as the program's
     * first work, 0.2 ms) filled the ring with none of its drops reported. */
    B.bud.bg = B.bud.cpu = 1;
    B.bud_cpu = atomic_load(&ag_events_seen[CM_EV_CPU]);
    B.bud_stream = B.ctl_seen;
    B.bud_rd = ag_rd_charged();
    B.timer_period = atomic_load(&ag.cpu_period_ns); /* agent.c: P / d with the recorder */
    memset(s, 0, sizeof *s);
    /* Start is cheap: what costs milliseconds (the signal cost calibration, 200 signals to
     * this thread; populating the live-heap table, 2 MiB) waits for AG_LAZY_NS, which a
     * short-lived process (a fork/exec'd helper, /bin/true under LD_PRELOAD) never reaches. */
    s->lazy_at = now + AG_LAZY_NS;
    s->wall_ns = ag.cfg.wall_hz > 0 ? (uint64_t)(1e9 / ag.cfg.wall_hz) : 0;
    s->next_wall = now + s->wall_ns;
    s->next_ctl = now + AG_CTL_DT_NS;
    s->next_scan = now;
    s->next_chunk = now + ag.cfg.interval_ns;
    s->last_scan = s->last_wall = now;
    pthread_mutex_unlock(&ag_work_mu);
}

/* How long the loop may sleep (ms) before its next deadline. */
static int bg_timeout(bg_sched_t *s, uint64_t now) {
    /* A thread without stack bounds is resolved from the sp its first sample records: a
     * scan within 100 ms once one has (checked on every wakeup, no system call), not a
     * /proc scan every 100 ms while any is unresolved -- a thread that never runs
     * (jemalloc's background threads in redis-server) kept that up for good: 10 scans a
     * second, 2x the thread's idle CPU with FLEETPROF_WALL_HZ=0. */
    if (s->unresolved && !s->scan_soon && s->next_scan > s->last_scan + AG_SCAN_NS / 5 &&
        ag_thread_resolvable())
        s->next_scan = s->last_scan + AG_SCAN_NS / 5;
    uint64_t next = s->next_ctl < s->next_chunk ? s->next_ctl : s->next_chunk;
    if (s->next_scan < next)
        next = s->next_scan;
    /* With wall ticks on, the other deadlines wait for the next tick when it comes within
     * one tick period after them: one wakeup instead of two, the thread's main cost. (Was:
     * whenever the deadline was under a tick away; with the ticks slowed by the budget a
     * control window then waited up to 1/(WALL_HZ f) = 2.5 s.) */
    if (s->wall_ns && s->next_wall < next + s->wall_ns)
        next = s->next_wall;
    if (s->scan_soon && s->next_scan < next)
        next = s->next_scan;
    if (s->next_xwall && s->next_xwall < next)
        next = s->next_xwall;
    return next > now ? (int)((next - now + 999999) / 1000000) : 0;
}

/* Sleeps until the next deadline, the sender's descriptor or a wake; returns the requests
 * (AG_REQ_*) taken. */
static int bg_wait(bg_sched_t *s, const sigset_t *wait_set) {
    int timeout = bg_timeout(s, ag_now_mono());
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
    ppoll(&pfd, sfd >= 0 ? 1 : 0, &ts, wait_set); /* EINTR: a wake */
    atomic_store(&g_wake_pending, 0);
    int req = atomic_exchange(&ag.requests, 0);
    ag_creds_serve(); /* a credential change waits for this thread to take its own */
    return req;
}

/* The start work that costs milliseconds, AG_LAZY_NS after the start. */
static void bg_lazy_start(const sigset_t *self_set) {
    if (!ag.signal_cost_ns && !ag_sigroom_off) { /* a fork child keeps its parent's */
        pthread_sigmask(SIG_UNBLOCK, self_set, NULL); /* it signals this thread */
        ag.signal_cost_ns = ag_signal_calibrate();
        pthread_sigmask(SIG_BLOCK, self_set, NULL);
    }
    if (ag_hcfg.alloc_on)
        ag_heap_populate();
    ag_lock_calibrate();
}

/* No copy in progress, none taken from here: once every copy is unwound, the deferred
 * unwinding arena is rewound and its pages given back. */
static void bg_defer_reset(void) {
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

/* A control window, then the next one's deadline; back from a budget stretch, the next wall
 * tick and scan come at the new pace. */
static void bg_control_step(bg_sched_t *s, uint64_t now) {
    double bg = B.bud.bg;
    int resumed = ag.cfg.cpu_rate > 0 && control(now);
    s->next_ctl = now + (resumed ? AG_RESUME_NS : stretch(AG_CTL_DT_NS, B.bud.bg, AG_CTL_MAX_NS));
    if (B.bud.bg > bg) {
        uint64_t w = s->last_wall + (uint64_t)((double)s->wall_ns / B.bud.bg);
        uint64_t sc = s->last_scan + stretch(AG_SCAN_NS, B.bud.bg, AG_SCAN_MAX_NS);
        if (s->wall_ns && w < s->next_wall)
            s->next_wall = w > now ? w : now;
        if (!s->scan_soon && sc < s->next_scan)
            s->next_scan = sc > now ? sc : now;
    }
}

/* A /proc scan: new threads registered, dead ones reaped, their stat descriptors closed. */
static void bg_scan_step(bg_sched_t *s, uint64_t now) {
    int registered;
    s->unresolved = ag_thread_scan(&registered);
    s->last_scan = now;
    drain();
    ag_thread_reap();
    ag_procstat_sweep(0);
    /* Threads without stack bounds (found by a scan, not registered by themselves)
     * have leaf-only samples until a scan resolves them from an sp their first sample
     * recorded: after a scan that found new threads, four more at 10, 20, 40 and 80 ms
     * (before the next wall tick), then within 100 ms of an unresolved one's first
     * sample (bg_timeout), else every 500 ms. */
    s->scan_soon = registered ? AG_SCAN_NS / 50 : s->scan_soon ? s->scan_soon * 2 : 0;
    if (s->scan_soon > AG_SCAN_NS / 5 * 4 / 5)
        s->scan_soon = 0;
    s->next_scan =
        now + (s->scan_soon ? s->scan_soon : stretch(AG_SCAN_NS, B.bud.bg, AG_SCAN_MAX_NS));
}

/* The flight recorder's next wall tick of its own (its wall density over the stream's ticks,
 * as stretched by the budget), 0 when the stream's next tick comes first. */
static void bg_next_xwall(bg_sched_t *s, uint64_t now) {
    double d = ag_rd_active() ? ag_rd_wall_density() : 1;
    uint64_t x = (uint64_t)((double)s->wall_ns / (ag_fr_capturing() ? 1.0 : B.bud.bg) / d);
    uint64_t at = s->next_xwall + x;
    s->next_xwall = d > 1.01 && at + x / 2 < s->next_wall ? (at > now ? at : now) : 0;
}

/* One pass of the loop's work for the requests req, under the work lock. */
static void bg_work(bg_sched_t *s, int req, const sigset_t *self_set) {
    /* Objects loaded or unloaded since the last tick, before any drain: a stack copy
     * (defer.c) taken in a library dlopen'ed meanwhile is then unwound with its table. */
    ag_cfi_tick();
    ag_py_tick(); /* a CPython interpreter to read frames of (pyframes.c) */
    uint64_t now = ag_now_mono();
    int ending = (req & (AG_REQ_STOP | AG_REQ_SIGTERM)) != 0;
    if (s->lazy_at && now >= s->lazy_at && !ending) {
        s->lazy_at = 0;
        bg_lazy_start(self_set);
    }
    if (s->wall_ns && now >= s->next_wall && !(req & AG_REQ_STOP)) {
        drain(); /* so that wall_reuse sees each thread's latest wall record */
        ag_wall_tick(B.b, now);
        s->last_wall = now;
        /* an incident capture's burst (recorder/flightrec.c) is not stretched by the budget */
        s->next_wall += (uint64_t)((double)s->wall_ns / (ag_fr_capturing() ? 1.0 : B.bud.bg));
        if (s->next_wall < now)
            s->next_wall = now + s->wall_ns;
        s->next_xwall = now;
        bg_next_xwall(s, now);
    } else if (s->next_xwall && now >= s->next_xwall && !(req & AG_REQ_STOP)) {
        drain();
        ag_wall_tick_extra(B.b, now);
        /* the wakeup too (a wakeup of its own: this thread's CPU since it went to sleep) */
        if (s->cpu_slept)
            ag_rd_charge(ag_clock_ns(CLOCK_THREAD_CPUTIME_ID) - s->cpu_slept);
        bg_next_xwall(s, now);
    }
    drain();
    if (ag_defer_reset_begin())
        bg_defer_reset();
    ag_hooks_bg_tick(now); /* ALLOC controller, flood-cap windows */
    ag_fr_tick(now);       /* incident triggers, recorder segments, captures out */
    if (s->wall_ns && ag_fr_capturing() && s->next_wall > now + s->wall_ns)
        s->next_wall = now + s->wall_ns;
    if (now >= s->next_ctl)
        bg_control_step(s, now);
    if (now >= s->next_scan && !(req & AG_REQ_STOP)) /* at exit: nothing new to find */
        bg_scan_step(s, now);
    if (ending)
        ag_fr_exit(); /* a capture in progress, before the last chunk (its drop counts) */
    if (ag_chunk_full(B.b) || now >= s->next_chunk ||
        (req & (AG_REQ_FLUSH | AG_REQ_STOP | AG_REQ_SIGTERM))) {
        ag_chunk_cut(B.b, ending); /* a heavy interval is split */
        /* On the deadline's grid when it was the deadline: waiting for a wall tick (above)
         * then does not add up. Ticks as far apart as the interval made every other chunk
         * two intervals long (19 chunks in 3.4 s at 100 ms). */
        uint64_t grid = s->next_chunk + ag.cfg.interval_ns;
        s->next_chunk = now >= s->next_chunk && grid > now ? grid : now + ag.cfg.interval_ns;
    }
    if (ending)
        ag_sender_exit(AG_EXIT_SEND_MS);
}

/* After the work: a flush's waiters woken; after SIGTERM's last chunk, the handler waiting
 * for it lets SIGTERM kill the process as if we had never been here. */
static void bg_answer(int req) {
    if (req & AG_REQ_FLUSH) {
        pthread_mutex_lock(&ag_flush_mu);
        atomic_fetch_add(&ag.flush_done, 1);
        pthread_cond_broadcast(&ag_flush_cv);
        pthread_mutex_unlock(&ag_flush_mu);
    }
    if (req & AG_REQ_SIGTERM) {
        atomic_store(&ag.running, 0);
        ag_signal_sigterm_done();
    }
}

static void *bg_main(void *arg) {
    (void)arg;
    sigset_t wait_set, self_set;
    bg_block_signals(&wait_set, &self_set);
    bg_sched_t s;
    bg_setup(&s, &wait_set);
    for (;;) {
        int req = bg_wait(&s, &wait_set);
        pthread_mutex_lock(&ag_work_mu);
        bg_work(&s, req, &self_set);
        s.cpu_slept = s.next_xwall ? ag_clock_ns(CLOCK_THREAD_CPUTIME_ID) : 0;
        pthread_mutex_unlock(&ag_work_mu);
        bg_answer(req);
        if (req & AG_REQ_STOP)
            break;
    }
    pthread_mutex_lock(&ag_work_mu);
    ag_builder_free(B.b);
    B.b = NULL;
    ag_fr_stop();
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
        if (ag_chunk_nothing_to_say(B.b))
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
    /* The parent's builder is not freed here: freeing writes its pages, and each write in a
     * child is a copy-on-write fault (a child that execs or exits at once pays them for
     * nothing). A child that profiles frees it from its own bg thread (bg_setup). */
    g_parent_builder = B.b;
    uint32_t hw = ag_thread_hw();
    for (uint32_t i = 0; i < hw; i++)
        if (ag_threads[i].wall_rec)
            ag_threads[i].wall_rec->len = 0;
    memset(&B, 0, sizeof B);
    ag_chunk_after_fork_child();
    ag_wall_after_fork_child();
    ag_procstat_sweep(1);
    pthread_mutex_init(&ag_work_mu, NULL);
    pthread_mutex_init(&ag_flush_mu, NULL);
    pthread_cond_init(&ag_flush_cv, NULL);
}
