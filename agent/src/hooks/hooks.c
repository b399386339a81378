/* Common machinery of the allocation, lock and I/O hooks: their configuration (environment),
 * the per-thread reentrancy guard, the record path with t->busy, unwinding from a hook with
 * the agent's own frames removed, the flood cap for above-threshold events, and the
 * background-thread side (agent frames stripped from ring records, live-heap bookkeeping,
 * aggregates and INUSE rows at each chunk, the ALLOC rate controller, flood-cap windows).
 *
 * Threads: ag_hook_* run on application threads (hook slow paths, guard set); ag_hooks_bg_*
 * run on the background thread under bgthread.c's work lock; ag_hooks_init runs in the
 * constructor. No function here locks or allocates on an application thread.
 */
#include "hooks.h"
#include "agent.h"
#include "config.h"
#include "ag_unwind.h"
#include "controller.h"
#include "bgthread.h"
#include "loader_gate.h"
#include "pyframes.h"

#include <sys/syscall.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

ag_hooks_cfg_t ag_hcfg;
_Atomic int ag_hooks_state;
AG_TLS int ag_hook_guard;
static AG_TLS uint64_t t_rng;

static uintptr_t g_self_lo, g_self_hi; /* our own image, for frame stripping */
static int g_tsc_usable;                /* invariant TSC: calibrate it (see below) */
static int g_agg_ok;                    /* agg.c's table is there */
static int tsc_invariant(void);

/* ---- configuration ---- */

/* Parsed with config.c's readers (one parser for every knob, one line per bad value). */
static double env_num(const char *var, double lo, double hi, double dflt, const char *dtext) {
    double d;
    return ag_env_double(var, lo, hi, dtext, &d) ? d : dflt;
}

/* Runs in our constructor, with priority: before agent.c's (which starts the bg thread, so
 * everything written here happens-before the bg thread reads it). The hooks may already have
 * run (the loader and other constructors allocate): until ag_hooks_state is 1 they only
 * forward. */
__attribute__((constructor(101))) void ag_hooks_init(void) {
    if (atomic_load(&ag_hooks_state) != 0)
        return;
    ag_hook_guard++; /* our own setup is never sampled */
    int on = ag_env_bool("FLEETPROF_ENABLED", 1);
    ag_hcfg.alloc_on = on && ag_env_bool("FLEETPROF_ALLOC", 1);
    ag_hcfg.lock_on = on && ag_env_bool("FLEETPROF_LOCK", 1);
    ag_hcfg.io_on = on && ag_env_bool("FLEETPROF_IO", 1);
    /* same range and default (AG_WALL_HZ) as config.c, which reads it again; reported once */
    ag_hcfg.wait_on = on && env_num("FLEETPROF_WALL_HZ", 0, 1000, AG_WALL_HZ, AG_WALL_HZ_HELP) > 0;
    /* Below 64 bytes nearly every allocation is a sample (a ring record with its stack): the
     * profile is no better and the program much slower. */
    double period;
    int period_set = ag_env_double("FLEETPROF_ALLOC_PERIOD", 64, 1e12, "524288 (bytes)", &period);
    ag_hcfg.alloc_period = period_set ? period : 524288;
    ag_hcfg.alloc_rate = env_num("FLEETPROF_ALLOC_RATE", 0, 100000, 200, "200 (samples/s)");
    double he = env_num("FLEETPROF_HEAP_ENTRIES", 64, 1 << 24, 65536, "65536");
    uint32_t e = 64;
    while (e < (uint32_t)he)
        e <<= 1;
    ag_hcfg.heap_entries = e;
    ag_hcfg.lock_threshold_ns =
        (uint64_t)(env_num("FLEETPROF_LOCK_THRESHOLD", 0, 1e6, 10, "10 (ms)") * 1e6);
    ag_hcfg.io_threshold_ns =
        (uint64_t)(env_num("FLEETPROF_IO_THRESHOLD", 0, 1e6, 10, "10 (ms)") * 1e6);
    ag_hcfg.io_floor_ns = (uint64_t)(env_num("FLEETPROF_IO_FLOOR", 0, 1e6, 50, "50 (us)") * 1e3);
    ag_hcfg.lock_cap = env_num("FLEETPROF_LOCK_RATE", 1, 1e6, 100, "100 (events/s)");
    ag_hcfg.io_cap = env_num("FLEETPROF_IO_RATE", 1, 1e6, 100, "100 (events/s)");
    uintptr_t lo, hi;
    if (ag_object_range((uintptr_t)&ag_hooks_init, &lo, &hi) == 0) { /* libfleetprof's image */
        g_self_lo = ag_self_lo = lo;
        g_self_hi = ag_self_hi = hi;
    }
    /* /proc/cpuinfo is read by the bg thread (tsc_calibrate), not here: start stays cheap */
    g_tsc_usable = ag_hcfg.io_on && ag_env_bool("FLEETPROF_TSC", 1);
    if (ag_hcfg.alloc_on &&
        (ag_heap_init(ag_hcfg.heap_entries) != 0 || ag_alloc_headers_init() != 0))
        ag_hcfg.alloc_on = 0; /* no table: no sampling at all rather than half of it */
    if (!ag_hcfg.alloc_on)
        ag_alloc_bypass(); /* nothing to do there: out of the program's way */
    /* The aggregates also take the allocation samples a full ring cannot (hook_alloc.c); without
     * them those are dropped and counted. */
    g_agg_ok = (ag_hcfg.lock_on || ag_hcfg.io_on || ag_hcfg.alloc_on) && ag_agg_init() == 0;
    if (!g_agg_ok)
        ag_hcfg.lock_on = ag_hcfg.io_on = 0;
    atomic_store(&ag_alloc_period, (uint64_t)ag_hcfg.alloc_period);
    ag_hcfg.alloc_ctl = ag_hcfg.alloc_rate > 0 && !period_set; /* a valid period: fixed */
    if (g_agg_ok) /* the parent's sums stay the parent's */
        pthread_atfork(NULL, NULL, ag_agg_after_fork_child);
    atomic_store(&ag_hooks_state, on ? 1 : -1);
    ag_hook_guard--;
}

void ag_hooks_exclude_self(void) { ag_hook_guard = 1 << 20; }

/* ---- slow-path helpers ---- */

ag_thread_t *ag_hook_enter(void) {
    if (ag_hook_guard || !atomic_load_explicit(&ag.running, memory_order_relaxed))
        return NULL;
    /* A raw clone() thread runs on its parent's TLS (ag_hook_guard, ag_t_self, errno): it
     * must not write anything there nor into the parent's ring. Its sp is off the slot's
     * stack; so is a coroutine's, hence the tid confirms (a syscall, on this slow path only). */
    ag_thread_t *self = ag_t_self;
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
    if (self) {
        uintptr_t lo = atomic_load_explicit(&self->stack_lo, memory_order_relaxed);
        uintptr_t hi = atomic_load_explicit(&self->stack_hi, memory_order_relaxed);
        if (hi && (sp < lo || sp >= hi) &&
            (pid_t)syscall(SYS_gettid) != atomic_load_explicit(&self->tid, memory_order_relaxed)) {
            ag_drop_count(0, CM_DROP_HOST_UNSAFE, 1);
            return NULL;
        }
    }
    ag_hook_guard++;
    ag_thread_t *t = ag_thread_current();
    if (!t)
        ag_hook_guard--;
    return t;
}

void ag_hook_leave(void) { ag_hook_guard--; }

/* Ring pressure: a hook can produce a burst of records faster than the bg thread's periodic
 * drain; when the ring is over an eighth full (or a record was dropped) the bg thread is
 * woken, at most once per millisecond per thread (ag_bg_wake: at most one queued signal), so
 * that it drains before the allocation hook starts to thin its samples (from a quarter full:
 * alloc_sample.h). */
static AG_TLS uint64_t t_last_wake;

int ag_hook_record(ag_thread_t *t, const ag_event_t *ev) {
    int busy = t->busy; /* a sampling handler writing the ring below this hook: dropped */
    int rc = ag_record_take(t, ev, NULL);
    if (busy)
        return rc;
    uint64_t used = atomic_load_explicit(&t->ring.head, memory_order_relaxed) -
                    atomic_load_explicit(&t->ring.tail, memory_order_relaxed);
    if (rc != 0 || used > (t->ring.mask + 1u) / 8) {
        uint64_t now = ag_hook_clock();
        if (now - t_last_wake > 1000000) {
            t_last_wake = now;
            ag_bg_wake(0);
        }
    }
    return rc;
}

int ag_hook_is_agent_pc(uintptr_t pc) { return pc >= g_self_lo && pc < g_self_hi; }

__attribute__((noinline)) uint32_t ag_hook_unwind(ag_thread_t *t, uintptr_t *pcs, uint32_t max) {
    /* from the state right after this function returns (built with frame pointers) */
    const uintptr_t *frame = (const uintptr_t *)__builtin_frame_address(0);
    uintptr_t lo = atomic_load_explicit(&t->stack_lo, memory_order_relaxed);
    uintptr_t hi = atomic_load_explicit(&t->stack_hi, memory_order_relaxed);
    uint32_t uw;
    uint32_t n = ag_unwind(t, frame[1], (uintptr_t)(frame + 2), frame[0], 0, lo, hi, 0, pcs, max,
                           &uw);
    n = ag_unwind_strip_agent(pcs, n);
    return ag_py_merge_hook(t, pcs, n, max); /* CPython frames, if asked (pyframes.c) */
}

/* ---- TSC calibration ----
 * The vDSO CLOCK_MONOTONIC costs ~20-30 ns a read on our machines (two per I/O call would
 * eat the whole 50 ns budget); CLOCK_MONOTONIC_COARSE is cheap but resolves only ~4 ms, too
 * coarse against a 10 ms threshold. rdtsc costs ~10 ns and, with an invariant TSC
 * (constant_tsc + nonstop_tsc), runs at a fixed rate on every core: the bg thread calibrates
 * it against CLOCK_MONOTONIC over >= 200 ms (then refines it every tick), and until then the
 * hooks use the vDSO clock. */
/* ag_tsc_scale is defined in spans.c (its stamps read it too, in code linked without the
 * hooks) */
_Atomic uint64_t ag_io_floor_ticks;
static uint64_t g_tsc0, g_mono0;

static int tsc_invariant(void) {
    char buf[4096];
    int fd = open("/proc/cpuinfo", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return strstr(buf, " constant_tsc") && strstr(buf, " nonstop_tsc");
}

/* A (TSC, monotonic ns) pair read together: the clock read between two TSC reads, the
 * tightest of four tries, kept when the two are within 100,000 ticks (20-100 us). A thread
 * preempted between two unbracketed reads skews the scale by the preemption over the span
 * calibrated: 5 ms over the first 200 ms is 2.5 % on every duration timed with it. */
static int tsc_pair(uint64_t *tsc, uint64_t *mono) {
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 4; i++) {
        uint64_t a = ag_tsc(), m = ag_hook_clock(), b = ag_tsc();
        if (b > a && b - a < best) {
            best = b - a;
            *tsc = a + (b - a) / 2;
            *mono = m;
        }
    }
    return best < 100000 ? 0 : -1;
}

static void tsc_calibrate(void) {
    static int checked;
    if (g_tsc_usable && !checked) {
        checked = 1;
        g_tsc_usable = tsc_invariant();
    }
    if (!g_tsc_usable)
        return;
    uint64_t mono = 0, tsc = 0;
    if (tsc_pair(&tsc, &mono) != 0)
        return; /* preempted every time: the next tick tries again */
    if (!g_mono0) {
        g_mono0 = mono;
        g_tsc0 = tsc;
        return;
    }
    if (mono - g_mono0 < 200000000ull || tsc <= g_tsc0)
        return;
    double ns_per_tick = (double)(mono - g_mono0) / (double)(tsc - g_tsc0);
    if (!(ns_per_tick > 0.01 && ns_per_tick < 100)) { /* absurd: stay on the vDSO clock */
        g_tsc_usable = 0;
        atomic_store(&ag_tsc_scale, 0);
        return;
    }
    atomic_store(&ag_io_floor_ticks, (uint64_t)((double)ag_hcfg.io_floor_ns / ns_per_tick));
    atomic_store(&ag_tsc_scale, (uint64_t)(ns_per_tick * 4294967296.0));
    if (mono - g_mono0 >= 2000000000ull) /* the pairs' error over >= 2 s: < 0.01 % */
        atomic_store(&ag_tsc_settled, 1);
}

uint64_t ag_hook_clock(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t ag_hook_rand(void) {
    uint64_t x = t_rng;
    if (!x) {
        x = ag_hook_clock() ^ ((uint64_t)(uintptr_t)&t_rng << 17) ^ 0x9e3779b97f4a7c15ull;
        if (!x)
            x = 1;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t_rng = x;
    return x;
}

/* ---- flood protection (IO; LOCK has its own, by wait time: hook_lock.c) ----
 * Above-threshold IO events are kept with probability p = min(1, cap / rate), where
 * rate is an EWMA of the events per second seen in the previous 250 ms windows (bg thread,
 * ag_hooks_bg_tick). A burst the bg thread has not measured yet (a flood starting, the first
 * window) is cut on the application side: once the current window has seen n > 2 x its share
 * of the cap (w = cap x 0.25 s), p = min(p, w / n). A kept event's weight and count are
 * multiplied by 1/p (rows flagged CM_SF_SUBSAMPLED when p < 1), so totals stay unbiased:
 * every event's p is fixed before its draw, and E[kept x 1/p] = seen (Horvitz-Thompson).
 * p is held in parts per million (down to 1 event in 10^6 kept). Skipped events are counted
 * as DROP_SUBSAMPLED by the bg thread (seen - kept), so a skipped event costs the application
 * thread one atomic add on a counter line of its own (stripes), a load and a random draw. */
#define AG_KEEP_ALL 1000000u
#define AG_STRIPES 8 /* counters per type, one cache line each: threads do not share lines */
typedef struct {
    _Atomic uint64_t seen; /* above-threshold events, all time */
    _Atomic uint64_t win;  /* seen at the current window's start (bg) */
    _Atomic uint64_t kept; /* admitted; seen - kept = DROP_SUBSAMPLED (counted by the bg) */
    char pad[64 - 3 * sizeof(uint64_t)];
} flood_stripe_t;
static flood_stripe_t g_flood[CM_EV_COUNT][AG_STRIPES] __attribute__((aligned(64)));
static _Atomic uint32_t g_keep_ppm[CM_EV_COUNT] = {
    [CM_EV_LOCK] = AG_KEEP_ALL, [CM_EV_IO] = AG_KEEP_ALL}; /* p x 10^6 */

uint32_t ag_hook_admit(cm_event_type_t type) {
    uint64_t h = (uint64_t)(uintptr_t)&t_rng * 0x9e3779b97f4a7c15ull;
    flood_stripe_t *f = &g_flood[type][h >> 61]; /* this thread's stripe */
    _Static_assert(AG_STRIPES == 8, "stripe index");
    uint64_t n = atomic_fetch_add_explicit(&f->seen, 1, memory_order_relaxed) + 1 -
                 atomic_load_explicit(&f->win, memory_order_relaxed);
    uint32_t p = atomic_load_explicit(&g_keep_ppm[type], memory_order_relaxed);
    uint64_t w = (uint64_t)((type == CM_EV_LOCK ? ag_hcfg.lock_cap : ag_hcfg.io_cap) * 0.25) + 1;
    if (AG_UNLIKELY(n > 2 * w) && n < (1ull << 40)) { /* a burst the bg has not seen yet */
        uint64_t q = (uint64_t)AG_KEEP_ALL * w / n;
        if (q < p)
            p = (uint32_t)q;
    }
    if (p < AG_KEEP_ALL) {
        if (p == 0)
            p = 1;
        if (ag_hook_rand() % AG_KEEP_ALL >= p)
            return 0;
    }
    atomic_fetch_add_explicit(&f->kept, 1, memory_order_relaxed);
    return p >= AG_KEEP_ALL ? 1000 : (uint32_t)(1000ull * AG_KEEP_ALL / p);
}

/* bg: sums of the stripes of type; subsampled-away events since the last call counted. */
static uint64_t flood_seen(int type, uint64_t *last_dropped) {
    uint64_t seen = 0, kept = 0;
    for (int i = 0; i < AG_STRIPES; i++) {
        seen += atomic_load(&g_flood[type][i].seen);
        kept += atomic_load(&g_flood[type][i].kept);
    }
    if (seen - kept > *last_dropped) {
        ag_drop_count((uint32_t)type, CM_DROP_SUBSAMPLED, seen - kept - *last_dropped);
        *last_dropped = seen - kept;
    }
    return seen;
}

/* ---- background side ---- */

static struct {
    uint64_t last_mono, alloc_seen0, seen0[CM_EV_COUNT], dropped[CM_EV_COUNT];
    double ewma[CM_EV_COUNT];
} H;

void ag_hooks_bg_add(ag_builder_t *b, const ag_thread_t *t, pid_t tid, const ag_rec_t *r) {
    static uintptr_t buf[(AG_REC_MAX + sizeof(uintptr_t) - 1) / sizeof(uintptr_t)];
    ag_hooks_exclude_self(); /* the bg thread: never sampled */
    ag_rec_t *c = (ag_rec_t *)buf;
    memcpy(c, r, sizeof *c);
    uint32_t k = 0; /* record.c left the interposer as the leaf (named as the real function) */
    c->depth = (uint16_t)(r->depth - k);
    memcpy(c->pcs, r->pcs + k, c->depth * sizeof(uintptr_t));
    const char *target = NULL;
    char text[256];
    if (r->type == CM_EV_ALLOC) {
        uint64_t rid = (uint64_t)r->io_kind | (uint64_t)r->fd_kind << 32;
        c->io_kind = c->fd_kind = 0;
        if (rid)
            ag_heap_bg_note(c, rid, tid);
    } else if (r->type == CM_EV_IO) {
        if (r->address)
            target = ag_fd_text((uint32_t)r->address, text, sizeof text);
        c->address = 0;
    }
    ag_builder_add_target(b, t, tid, c, target);
}

void ag_hooks_bg_tick(uint64_t now) {
    ag_hooks_exclude_self();
    tsc_calibrate();
    if (!H.last_mono) { /* the ALLOC controller lives on this thread only */
        ag_ctl_init(&ag.ctl[CM_EV_ALLOC], CM_EV_ALLOC, ag_hcfg.alloc_rate, ag_hcfg.alloc_period,
                    4096, 1e10, ag_hcfg.alloc_ctl);
        H.last_mono = now;
        H.alloc_seen0 = atomic_load(&ag_events_seen[CM_EV_ALLOC]);
        return;
    }
    if (now - H.last_mono < 250000000ull)
        return;
    double dt = (double)(now - H.last_mono) / 1e9;
    H.last_mono = now;
    uint64_t s = atomic_load(&ag_events_seen[CM_EV_ALLOC]);
    if (ag_hcfg.alloc_on) {
        double p = ag_ctl_update(&ag.ctl[CM_EV_ALLOC], s - H.alloc_seen0, dt, 1.0);
        atomic_store(&ag_alloc_period, (uint64_t)p);
    }
    H.alloc_seen0 = s;
    if (ag_hcfg.lock_on)
        ag_lock_bg_tick(dt);
    for (int ty = CM_EV_IO; ty <= CM_EV_IO; ty++) {
        uint64_t v = flood_seen(ty, &H.dropped[ty]);
        for (int i = 0; i < AG_STRIPES; i++) /* new window */
            atomic_store(&g_flood[ty][i].win, atomic_load(&g_flood[ty][i].seen));
        double rate = (double)(v - H.seen0[ty]) / dt;
        H.seen0[ty] = v;
        H.ewma[ty] = H.ewma[ty] == 0 ? rate : 0.5 * H.ewma[ty] + 0.5 * rate;
        double cap = ty == CM_EV_LOCK ? ag_hcfg.lock_cap : ag_hcfg.io_cap;
        double p = H.ewma[ty] > cap ? cap / H.ewma[ty] : 1.0;
        atomic_store(&g_keep_ppm[ty], (uint32_t)(p * AG_KEEP_ALL + 0.5));
    }
}

void ag_hooks_bg_chunk(ag_builder_t *b, uint64_t now_real) {
    ag_hooks_exclude_self();
    if (ag_hcfg.lock_on) /* DROP_SUBSAMPLED up to date */
        ag_lock_bg_chunk();
    flood_seen(CM_EV_IO, &H.dropped[CM_EV_IO]);
    if (ag_hcfg.alloc_on)
        ag_heap_bg_emit(b, now_real);
    if (g_agg_ok)
        ag_agg_bg_emit(b, now_real);
}

uint32_t ag_hooks_sampling(ag_builder_t *b, cm_sampling_t *out, const uint64_t *seen0) {
    uint32_t n = 0;
    if (ag_hcfg.alloc_on)
        out[n++] = (cm_sampling_t){CM_EV_ALLOC, (uint64_t)ag.ctl[CM_EV_ALLOC].period, 0,
                                   (uint32_t)(ag_hcfg.alloc_rate + 0.5),
                                   atomic_load(&ag_events_seen[CM_EV_ALLOC]) - seen0[CM_EV_ALLOC],
                                   ag_builder_samples(b, CM_EV_ALLOC)};
    if (ag_hcfg.lock_on)
        out[n++] = (cm_sampling_t){CM_EV_LOCK, 1, ag_hcfg.lock_threshold_ns,
                                   (uint32_t)(ag_hcfg.lock_cap + 0.5),
                                   atomic_load(&ag_events_seen[CM_EV_LOCK]) - seen0[CM_EV_LOCK],
                                   ag_builder_samples(b, CM_EV_LOCK)};
    if (ag_hcfg.io_on)
        out[n++] = (cm_sampling_t){CM_EV_IO, 1, ag_hcfg.io_threshold_ns,
                                   (uint32_t)(ag_hcfg.io_cap + 0.5),
                                   atomic_load(&ag_events_seen[CM_EV_IO]) - seen0[CM_EV_IO],
                                   ag_builder_samples(b, CM_EV_IO)};
    return n;
}
