/* Incident triggers, evaluated on the background thread every AG_TRIG_DT_NS (250 ms) over the
 * last half second (AG_TRIG_STEPS steps: a spike is seen in 0.25-0.75 s; over a whole second,
 * the fast requests of the second before it kept the slow share low for 1.5-2.5 s). Each
 * fires on its rising edge (false -> true) and starts a flight-recorder capture (flightrec.c),
 * which applies the cooldown and the per-process cap.
 *
 *   overload  the slow share of the last half second's requests (ended spans at least
 *             FLEETPROF_TRIGGER_SLOW long, plus active ones already that old) at or above
 *             FLEETPROF_TRIGGER_SLOW_RATIO while the process uses FLEETPROF_TRIGGER_OVERLOAD_CPU
 *             of its cores: high CPU with degraded requests (seed 001). High CPU with fast
 *             requests is a workload that stretches, not an incident.
 *             A request's slow threshold is its endpoint's (FLEETPROF_SLOW_MS_BY_ENDPOINT,
 *             looked up once per span name when spans.c interns it) or FLEETPROF_TRIGGER_SLOW.
 *   hang      a request (span) active for FLEETPROF_TRIGGER_HANG.
 *   growing   the active requests (outermost spans) rose at each of the last
 *             FLEETPROF_TRIGGER_GROWING of ticks (2 s: 8 ticks) to at least
 *             FLEETPROF_TRIGGER_GROWING_MIN (8) and twice their count before the rise: a queue
 *             building up (requests arriving faster than they end), before any is a hang.
 *   cpu       FLEETPROF_TRIGGER_CPU of the cores held FLEETPROF_TRIGGER_CPU_FOR, in a process
 *             that never marked a request (with requests, CPU alone is not an incident).
 *   alloc, lock, io   FLEETPROF_TRIGGER_BASELINE (k, 0: off, the default): the rate of allocated
 *             bytes, of lock wait or of I/O wait (the drained hook records' weights) over the
 *             last half second at least k times its own baseline (a moving mean of the
 *             quarter-second rates, time constant AG_TRIG_BASE_TAU_S, kept while it holds),
 *             after AG_TRIG_BASE_WARM_S of baseline, and above a floor (AG_TRIG_ALLOC_FLOOR
 *             bytes/s; AG_TRIG_WAIT_FLOOR of a thread waiting): a rate that grows k-fold.
 *             Value: the rate (bytes/s; threads waiting), threshold: max(k x baseline, floor).
 *             A lock or I/O wait is recorded when it ends: such a trigger fires after it.
 *   manual    fleetprof_capture().
 *   signal    FLEETPROF_CAPTURE_SIGNAL delivered (handler in signal.c; value: its number).
 * The signals: the process's CPU clock, the cores it may run on (sched_getaffinity), the
 * span counters fleetprof_span_end adds to (relaxed atomics, no lock) and the active spans
 * (spans.c).
 */
#include "recorder/incid.h"

#include "fleetprof.h"

#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define AG_TRIG_DT_NS 250000000ull
#define AG_TRIG_STEPS 2 /* half a second */
#define AG_TRIG_MIN_REQUESTS 2 /* a ratio of fewer requests says nothing */
#define AG_TRIG_BASE_TAU_S 30.0     /* the baseline's time constant */
#define AG_TRIG_BASE_WARM_S 20.0    /* baseline seen before the trigger may fire */
#define AG_TRIG_ALLOC_FLOOR 16e6    /* bytes/s: below, no allocation trigger */
#define AG_TRIG_WAIT_FLOOR 0.2      /* threads waiting on average: below, no lock/io trigger */
static const uint32_t g_base_type[3] = {CM_EV_ALLOC, CM_EV_LOCK, CM_EV_IO};
static const char *const g_base_name[3] = {"alloc", "lock", "io"};

_Atomic int ag_trig_manual, ag_trig_signal;
static _Atomic uint64_t g_ended, g_slow;
static _Atomic uint64_t g_slow_ns = UINT64_MAX; /* ag.cfg.incid.slow_ns once the bg runs */
/* per span name id: its endpoint's slow threshold (FLEETPROF_SLOW_MS_BY_ENDPOINT), 0: none */
static _Atomic uint64_t g_name_slow_ns[AG_INCID_NAMES + 1];

typedef struct {
    uint64_t cpu_ns, dt_ns, ended, slow, w[3]; /* w: alloc bytes, lock and io wait ns */
} step_t;

static struct {
    uint64_t next, last_mono, last_cpu, last_ended, last_slow;
    step_t steps[AG_TRIG_STEPS];
    uint32_t n, cur;
    double cores;
    uint64_t cpu_high_since; /* mono time the cpu condition began to hold, 0: not holding */
    int was_overload, was_hang, was_cpu, was_growing;
    uint32_t last_active;  /* active requests at the last tick */
    uint32_t rises;        /* ticks in a row at which they rose */
    uint32_t rise_from;    /* their count before the rises began */
    int any_span; /* a request was ever marked */
    uint64_t w[3], last_w[3]; /* weights drained so far (alloc, lock, io) */
    double base[3];           /* per-second baseline rates */
    double base_s;            /* seconds of baseline */
    int was_base[3];
} T;

void ag_trig_add_weight(uint32_t type, uint64_t weight) {
    for (int k = 0; k < 3; k++)
        if (type == g_base_type[k])
            T.w[k] += weight;
}

void ag_trig_name_added(uint32_t id, const char *s, size_t len) {
    const ag_incid_cfg_t *c = &ag.cfg.incid;
    if (id > AG_INCID_NAMES)
        return;
    for (uint32_t i = 0; i < c->n_slow_by; i++)
        if (!strncmp(c->slow_by[i].name, s, len) && c->slow_by[i].name[len] == '\0')
            atomic_store_explicit(&g_name_slow_ns[id], c->slow_by[i].slow_ns,
                                  memory_order_relaxed);
}

uint64_t ag_trig_slow_ns(uint32_t id, uint64_t dflt) {
    uint64_t t = id <= AG_INCID_NAMES
                     ? atomic_load_explicit(&g_name_slow_ns[id], memory_order_relaxed)
                     : 0;
    return t ? t : dflt;
}

void ag_trig_span_ended(uint64_t duration_ns, uint32_t name) {
    atomic_fetch_add_explicit(&g_ended, 1, memory_order_relaxed);
    if (duration_ns >= ag_trig_slow_ns(name, atomic_load_explicit(&g_slow_ns, memory_order_relaxed)))
        atomic_fetch_add_explicit(&g_slow, 1, memory_order_relaxed);
}

uint64_t ag_trig_requests_ended(void) { return atomic_load(&g_ended); }

static uint64_t process_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void ag_trig_reset(uint64_t now) {
    memset(&T, 0, sizeof T);
    cpu_set_t set;
    T.cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
    if (T.cores < 1)
        T.cores = 1;
    T.next = now + AG_TRIG_DT_NS;
    T.last_mono = now;
    T.last_cpu = process_cpu();
    T.last_ended = atomic_load(&g_ended);
    T.last_slow = atomic_load(&g_slow);
    atomic_store(&g_slow_ns, ag.cfg.incid.slow_ns);
}

/* Records one step; returns the window's totals in *sum. */
static void step(uint64_t now, step_t *sum) {
    uint64_t cpu = process_cpu(), ended = atomic_load(&g_ended), slow = atomic_load(&g_slow);
    T.steps[T.cur] = (step_t){cpu - T.last_cpu, now - T.last_mono, ended - T.last_ended,
                              slow - T.last_slow, {0}};
    for (int k = 0; k < 3; k++) {
        T.steps[T.cur].w[k] = T.w[k] - T.last_w[k];
        T.last_w[k] = T.w[k];
    }
    T.cur = (T.cur + 1) % AG_TRIG_STEPS;
    if (T.n < AG_TRIG_STEPS)
        T.n++;
    T.last_cpu = cpu;
    T.last_mono = now;
    T.last_ended = ended;
    T.last_slow = slow;
    memset(sum, 0, sizeof *sum);
    for (uint32_t i = 0; i < T.n; i++) {
        sum->cpu_ns += T.steps[i].cpu_ns;
        sum->dt_ns += T.steps[i].dt_ns;
        sum->ended += T.steps[i].ended;
        sum->slow += T.steps[i].slow;
        for (int k = 0; k < 3; k++)
            sum->w[k] += T.steps[i].w[k];
    }
}

/* Fires on the rising edge of cond; *was keeps the last state. */
static void edge(int cond, int *was, const char *name, double threshold, double value) {
    if (cond && !*was)
        ag_fr_capture(name, threshold, value);
    *was = cond;
}

/* alloc, lock, io: the window's rate against each one's baseline (see the top); the baseline
 * learns from the last step while its trigger does not hold. */
static void baseline_eval(const step_t *s, int full) {
    double k = ag.cfg.incid.baseline_k, dt = (double)s->dt_ns / 1e9;
    const step_t *last = &T.steps[(T.cur + AG_TRIG_STEPS - 1) % AG_TRIG_STEPS];
    double ldt = (double)last->dt_ns / 1e9;
    if (k <= 0 || dt <= 0 || ldt <= 0)
        return;
    for (int i = 0; i < 3; i++) {
        /* per second: bytes (alloc), threads waiting (lock, io: wait ns per ns) */
        double unit = i ? 1e9 : 1, rate = (double)s->w[i] / dt / unit;
        double floor = i ? AG_TRIG_WAIT_FLOOR : AG_TRIG_ALLOC_FLOOR;
        double bar = k * T.base[i] / unit > floor ? k * T.base[i] / unit : floor;
        int high = full && T.base_s >= AG_TRIG_BASE_WARM_S && rate >= bar;
        edge(high, &T.was_base[i], g_base_name[i], bar, rate);
        if (!high) {
            double a = ldt / (AG_TRIG_BASE_TAU_S + ldt);
            T.base[i] += a * ((double)last->w[i] / ldt - T.base[i]);
        }
    }
    T.base_s += ldt;
}

/* growing: the active requests rose at each of the last growing_ticks ticks, to at least
 * growing_min and twice their count before the rise (a queue building up, not the ups and
 * downs of a steady load). Value: the active requests; threshold: growing_min. */
static void growing_eval(uint32_t active) {
    const ag_incid_cfg_t *c = &ag.cfg.incid;
    if (active > T.last_active) {
        if (!T.rises++)
            T.rise_from = T.last_active;
    } else {
        T.rises = 0;
    }
    T.last_active = active;
    edge(c->growing_ticks && T.rises >= c->growing_ticks && active >= c->growing_min &&
             active >= 2 * T.rise_from,
         &T.was_growing, "growing", c->growing_min, active);
}

void ag_trig_eval(uint64_t now) {
    if (atomic_exchange(&ag_trig_manual, 0))
        ag_fr_capture("manual", 0, 0);
    int sig = atomic_exchange(&ag_trig_signal, 0);
    if (sig)
        ag_fr_capture("signal", 0, sig);
    if (now < T.next)
        return;
    T.next = now + AG_TRIG_DT_NS;
    step_t s;
    step(now, &s);
    const ag_incid_cfg_t *c = &ag.cfg.incid;
    double share = s.dt_ns ? (double)s.cpu_ns / ((double)s.dt_ns * T.cores) : 0;
    uint32_t slow_active = 0;
    uint64_t oldest = 0;
    uint32_t active = ag_spans_active_stats(ag_now_real(), c->slow_ns, &slow_active, &oldest);
    T.any_span |= active > 0 || s.ended > 0;
    int full = T.n == AG_TRIG_STEPS; /* a whole window seen */

    uint64_t total = s.ended + active, slow = s.slow + slow_active;
    double ratio = total ? (double)slow / (double)total : 0;
    edge(full && c->slow_ratio > 0 && total >= AG_TRIG_MIN_REQUESTS && ratio >= c->slow_ratio &&
             share >= c->overload_cpu,
         &T.was_overload, "overload", c->slow_ratio, ratio);
    edge(c->hang_ns && oldest >= c->hang_ns, &T.was_hang, "hang", (double)c->hang_ns / 1e9,
         (double)oldest / 1e9);
    int cpu_high = full && c->cpu_share > 0 && !T.any_span && share >= c->cpu_share;
    if (!cpu_high)
        T.cpu_high_since = 0;
    else if (!T.cpu_high_since)
        T.cpu_high_since = now;
    edge(cpu_high && now - T.cpu_high_since >= c->cpu_for_ns, &T.was_cpu, "cpu", c->cpu_share,
         share);
    growing_eval(active);
    baseline_eval(&s, full);
}

/* FLEETPROF_CAPTURE_SIGNAL: a name (SIGUSR2, USR2) or a number; not one that the kernel
 * keeps (KILL, STOP), a fault's (SEGV, BUS, FPE, ILL, TRAP, SYS, ABRT), job control's, SIGCHLD,
 * SIGPIPE, SIGPROF (profilers') or SIGTERM (the agent's last chunk). 0: none. */
static int capture_signal_load(void) {
    char v[32];
    if (!ag_env_value("FLEETPROF_CAPTURE_SIGNAL", v, sizeof v))
        return 0;
    const char *name = strncasecmp(v, "SIG", 3) ? v : v + 3;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || end == v)
        for (n = 0; n < NSIG && !(sigabbrev_np((int)n) && !strcasecmp(name, sigabbrev_np((int)n)));)
            n++;
    static const int no[] = {SIGKILL, SIGSTOP, SIGSEGV, SIGBUS, SIGFPE,  SIGILL,  SIGTRAP,
                             SIGSYS,  SIGABRT, SIGCHLD, SIGPIPE, SIGPROF, SIGTERM, SIGCONT,
                             SIGTSTP, SIGTTIN, SIGTTOU};
    int ok = n > 0 && n <= SIGRTMAX;
    for (size_t i = 0; ok && i < sizeof no / sizeof no[0]; i++)
        ok = n != no[i];
    if (!ok) {
        ag_env_invalid("FLEETPROF_CAPTURE_SIGNAL", v,
                       "not a signal name or number, or one that cannot trigger a capture",
                       "(none)");
        return 0;
    }
    return (int)n;
}

/* FLEETPROF_SLOW_MS_BY_ENDPOINT="GET /a=50,POST /b=200": endpoint (span name, up to the last
 * '=') -> its slow threshold in ms, instead of FLEETPROF_TRIGGER_SLOW. An entry that does not
 * parse is reported and skipped; past AG_INCID_SLOW_BY_MAX entries, the rest are. */
static void slow_by_load(ag_incid_cfg_t *c) {
    char v[AG_INCID_SLOW_BY_MAX * (AG_INCID_NAME_MAX + 16)];
    if (!ag_env_value("FLEETPROF_SLOW_MS_BY_ENDPOINT", v, sizeof v))
        return;
    for (char *sv, *e = strtok_r(v, ",", &sv); e; e = strtok_r(NULL, ",", &sv)) {
        char *eq = strrchr(e, '='), *end = NULL;
        double ms = eq ? strtod(eq + 1, &end) : 0;
        size_t len = eq ? (size_t)(eq - e) : 0;
        if (!eq || end == eq + 1 || *end || !(ms > 0) || ms > 6e5 || !len ||
            len > AG_INCID_NAME_MAX || c->n_slow_by == AG_INCID_SLOW_BY_MAX) {
            ag_env_invalid("FLEETPROF_SLOW_MS_BY_ENDPOINT", e,
                           "not NAME=MS (MS above 0, at most 600000; at most 32 entries)",
                           "FLEETPROF_TRIGGER_SLOW for it");
            continue;
        }
        memcpy(c->slow_by[c->n_slow_by].name, e, len);
        c->slow_by[c->n_slow_by].name[len] = '\0';
        c->slow_by[c->n_slow_by++].slow_ns = (uint64_t)(ms * 1e6);
    }
}

void ag_incid_config_load(ag_incid_cfg_t *c) {
    memset(c, 0, sizeof *c);
    c->window_ns = 30000000000ull;
    c->max_bytes = 4u << 20;
    c->after_ns = 5000000000ull;
    c->cpu_share = 0.9;
    c->cpu_for_ns = 10000000000ull;
    c->slow_ns = 500000000ull;
    c->slow_ratio = 0.2;
    c->overload_cpu = 0.5;
    c->hang_ns = 10000000000ull;
    c->growing_ticks = 8;
    c->growing_min = 8;
    c->cooldown_ns = 60000000000ull;
    c->max_captures = 10;
    c->on = ag_env_bool("FLEETPROF_RECORDER", 0);
    double d;
    ag_env_duration("FLEETPROF_RECORDER_WINDOW", 2000000000ull, 300000000000ull, "30s",
                    &c->window_ns);
    if (ag_env_double("FLEETPROF_RECORDER_MIB", 0.25, 64, "4 (MiB)", &d))
        c->max_bytes = (uint64_t)(d * 1048576.0);
    c->density = 4;
    c->budget = 0.0005;
    if (ag_env_double("FLEETPROF_RECORDER_DENSITY", 1, 16, "4 (x the stream's samples)", &d))
        c->density = d;
    if (ag_env_double("FLEETPROF_RECORDER_BUDGET", 0.01, 100, "0.05 (percent)", &d))
        c->budget = d / 100.0;
    ag_env_duration("FLEETPROF_RECORDER_AFTER", 1000000000ull, 60000000000ull, "5s",
                    &c->after_ns);
    if (ag_env_double("FLEETPROF_TRIGGER_CPU", 0, 1, "0.9 (share of the cores)", &d))
        c->cpu_share = d;
    ag_env_duration("FLEETPROF_TRIGGER_CPU_FOR", 1000000000ull, 3600000000000ull, "10s",
                    &c->cpu_for_ns);
    ag_env_duration("FLEETPROF_TRIGGER_SLOW", 1000000ull, 600000000000ull, "500ms",
                    &c->slow_ns);
    if (ag_env_double("FLEETPROF_TRIGGER_SLOW_RATIO", 0, 1, "0.2", &d))
        c->slow_ratio = d;
    if (ag_env_double("FLEETPROF_TRIGGER_OVERLOAD_CPU", 0, 1, "0.5 (share of the cores)", &d))
        c->overload_cpu = d;
    if (ag_env_double("FLEETPROF_TRIGGER_HANG", 0, 86400, "10 (seconds)", &d))
        c->hang_ns = (uint64_t)(d * 1e9);
    uint64_t g = (uint64_t)c->growing_ticks * AG_TRIG_DT_NS;
    if (ag_env_duration("FLEETPROF_TRIGGER_GROWING", 0, 600000000000ull, "2s", &g))
        c->growing_ticks = (uint32_t)((g + AG_TRIG_DT_NS - 1) / AG_TRIG_DT_NS);
    if (ag_env_double("FLEETPROF_TRIGGER_GROWING_MIN", 1, 1000000, "8", &d))
        c->growing_min = (uint32_t)d;
    slow_by_load(c);
    ag_env_duration("FLEETPROF_TRIGGER_COOLDOWN", 0, 86400000000000ull, "60s",
                    &c->cooldown_ns);
    if (ag_env_double("FLEETPROF_CAPTURE_MAX", 0, 10000, "10", &d))
        c->max_captures = (uint32_t)d;
    c->capture_signal = capture_signal_load();
    if (ag_env_double("FLEETPROF_TRIGGER_BASELINE", 0, 1000, "0 (off)", &d))
        c->baseline_k = d;
}
