/* The flight recorder's own sampling density (FLEETPROF_RECORDER_DENSITY, default 4) and its
 * budget (FLEETPROF_RECORDER_BUDGET).
 *
 * With the recorder on, the CPU timers run at the stream's period divided by the density (the
 * controller's period P stays the stream's) and the wall ticker adds recorder-only ticks
 * between its own (bgthread.c, wall.c). Every record goes to the recorder with its own weight;
 * the always-on stream keeps a subset that looks exactly as if sampled at the stream's period:
 *
 * CPU (ag_rd_cpu_split, bg drain): per thread, the records' weights (the thread's CPU since its
 * previous sample, signal.c) add up into a phase on a grid of P; the first record after the
 * phase crosses a multiple of P is the stream's, with the weight of the thread's CPU since the
 * previous stream record (the sum of the skipped records' weights) and a count of the
 * multiples crossed, as a timer of period P re-armed at its expiries (overruns) would have
 * it. The timer of period P/d fires at the first kernel tick after its expiry; so does the one
 * of period P: the stream record is the sample the stream's own timer would have taken, at the
 * same rate. Weights sum to the thread's CPU in both streams: both are unbiased.
 *
 * The kernel checks CPU timers on its tick (250 Hz here): a thread is sampled at most once a
 * tick, so the recorder's effective multiple is min(d, P / 4 ms): with the stream at its
 * shortest period (10 ms, FLEETPROF_CPU_HZ=100) 2.5, not 4 (overruns count the rest).
 *
 * Budget: the recorder's extra work (its extra CPU samples at the per-sample cost estimate,
 * its own wall ticks with their wakeups, its share of the background thread's drains and its
 * encodes, as measured) is kept within FLEETPROF_RECORDER_BUDGET (0.05 %) of the process's CPU
 * (floored as the agent's budget is) by a factor f in [0, 1] on the extra density:
 * d_eff = 1 + f (d - 1), moved once a budget window (ag_rd_budget_step); the wall ticks' own
 * density (ag_rd_wall_density) only from f = 1/2 on. This work is not
 * charged to the agent's own budget, so that the stream's rate and density do not change with
 * the recorder on. bg thread only.
 */
#include "recorder/incid.h"
#include "controller.h"

#include "cm/chunk.h"

static struct {
    double f;              /* extra-density factor in [0, 1] */
    uint64_t stream_seen;  /* CPU records kept for the stream */
    uint64_t extra_ns;     /* measured recorder work on this thread */
} D = {1, 0, 0};

double ag_rd_density(void) {
    const ag_incid_cfg_t *c = &ag.cfg.incid;
    if (!c->on || c->density <= 1)
        return 1;
    return 1 + D.f * (c->density - 1);
}

/* The recorder's own wall ticks cost a wakeup each (~100 us here, 1 ms/s at 10 Hz: the whole
 * budget of a process at a core at 0.1 %), its extra CPU samples ~1 us of the background
 * thread's and a few of the handler's each: the budget goes to the CPU density first. The
 * wall density rises from 1 at f = 1/2 to d at f = 1. */
double ag_rd_wall_density(void) {
    const ag_incid_cfg_t *c = &ag.cfg.incid;
    if (!c->on || c->density <= 1 || D.f <= 0.5)
        return 1;
    return 1 + (2 * D.f - 1) * (c->density - 1);
}

uint64_t ag_rd_timer_period(double stream_period) {
    return (uint64_t)(stream_period / ag_rd_density());
}

int ag_rd_split(void) { return ag.cfg.incid.on && ag.cfg.incid.density > 1; }

int ag_rd_cpu_split(ag_thread_t *t, ag_rec_t *r, double period) {
    uint64_t p = period >= 1 ? (uint64_t)period : 1;
    t->rd_acc += r->weight;
    t->rd_phase += r->weight;
    if (t->rd_phase < p)
        return 0;
    uint64_t k = t->rd_phase / p;
    t->rd_phase -= k * p;
    r->weight = t->rd_acc;
    r->count = k * CM_COUNT_ONE;
    t->rd_acc = 0;
    D.stream_seen++;
    return 1;
}

uint64_t ag_rd_stream_seen(void) { return D.stream_seen; }

void ag_rd_charge(uint64_t ns) { D.extra_ns += ns; }

uint64_t ag_rd_charged(void) { return D.extra_ns; }

double ag_rd_factor(void) { return D.f; }

/* One budget window: extra_ns of recorder work over proc_ns of process CPU in wall_ns. The
 * factor moves by the overshoot (at most halving) over the budget, up by x1.25 under it at
 * most (the room left x0.8, at least x1.1); from 0 it starts again at 1/16. Slow up, fast down:
 * the recorder's own wall ticks cost a wakeup each (~50-100 us here), a step in cost the
 * factor crosses at d = 1.5, where a faster rise overshot the budget every few seconds (redis-
 * server: +1 % CPU per request at a 0.2 % budget with rises of up to x4). */
void ag_rd_budget_step(double extra_ns, double proc_ns, double wall_ns) {
    double budget = ag.cfg.incid.budget;
    if (proc_ns < AG_BUDGET_FLOOR * wall_ns)
        proc_ns = AG_BUDGET_FLOOR * wall_ns;
    double share = proc_ns > 0 ? extra_ns / proc_ns : 0;
    double room = share > 0 ? budget / share : 64, f = D.f;
    if (share > budget)
        f *= room > 0.5 ? room : 0.5;
    else
        f = f < 1.0 / 16 ? 1.0 / 16 : f * (0.8 * room < 1.1 ? 1.1 : 0.8 * room > 1.25 ? 1.25 : 0.8 * room);
    D.f = f < 1.0 / 64 ? 0 : f > 1 ? 1 : f;
}

void ag_rd_reset(void) {
    D.f = 1;
    D.stream_seen = 0;
    D.extra_ns = 0;
}
