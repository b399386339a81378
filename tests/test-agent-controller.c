/* controller.c on its own: the CPU budget's two factors (ag_budget_step) and the CPU
 * controller's period (ag_ctl_update_cpu), fed the windows bgthread.c would measure; the flight
 * recorder's stream split and budget (recorder/density.c) on a simulated kernel CPU timer. */
#include "support/runner.h"

#include "internal.h"
#include "recorder/incid.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* what agent.c would provide (the recorder's configuration) */
ag_state_t ag;

#define MS 1e6
#define S 1e9

/* The model the budget acts on: the periodic work costs 3 ms/s at full pace (bg = 1), in
 * proportion to its pace; the CPU samples cost 1 ms per second of work at the set point. */
static double agent_ns(const ag_budget_t *b, double work_s) {
    return 3 * MS * b->bg + 1 * MS * b->cpu * work_s;
}

/* An idle process: its agent's periodic work at full pace is over a 1% share of its floored
 * CPU (1% of a core: 0.1 ms/s allowed). It slows down until it fits (to ~1/30 of its pace);
 * the CPU set point, which costs nothing while nothing runs, is left alone. */
static void test_idle_slows_periodic_work_only(void) {
    ag_budget_t b = {1, 1};
    for (int i = 0; i < 12; i++)
        ag_budget_step(&b, 0.01, agent_ns(&b, 0), 0, 0.001 * S, S);
    CHECKF(b.bg > 0.025 && b.bg < 0.045, "periodic work factor %.3f after 12 idle windows", b.bg);
    CHECKF(agent_ns(&b, 0) < 0.1 * MS * 1.3, "idle cost %.3f ms/s", agent_ns(&b, 0) / MS);
    CHECKF(b.cpu == 1, "CPU factor %.3f after idle windows", b.cpu);
}

/* Work resumes (a core's worth): the room is 100x what it was, and the periodic work is back
 * at full pace within three windows (the first covers 0.2 s of work), not the 16 of x1.25
 * steps it took before; the CPU set point never moved. */
static void test_resume_recovers_fast(void) {
    ag_budget_t b = {0.033, 1};
    ag_budget_step(&b, 0.01, agent_ns(&b, 0.2), 1 * MS * 0.2, 0.2 * S, S);
    CHECKF(b.bg > 0.15, "one window after work resumed: %.3f", b.bg);
    for (int i = 0; i < 2; i++)
        ag_budget_step(&b, 0.01, agent_ns(&b, 1), 1 * MS, S, S);
    CHECKF(b.bg == 1, "three windows after work resumed: %.3f", b.bg);
    CHECK(b.cpu == 1);
}

/* Over budget under load, the CPU samples most of the cost: both factors come down by the
 * overshoot (1.5% against 1%: to two thirds), a window at the budget moves them up by at most
 * x1.25, and a window far over budget at most halves them. */
static void test_over_budget_under_load(void) {
    ag_budget_t b = {1, 1};
    ag_budget_step(&b, 0.01, 15 * MS, 12 * MS, S, S);
    CHECKF(b.cpu > 0.66 && b.cpu < 0.67, "cpu factor %.4f at 1.5x the budget", b.cpu);
    CHECKF(b.bg > 0.66 && b.bg < 0.67, "periodic factor %.4f at 1.5x the budget", b.bg);
    double c = b.cpu;
    ag_budget_step(&b, 0.01, 10 * MS, 8 * MS, S, S);
    CHECKF(b.cpu <= c * 1.25 + 1e-12 && b.cpu >= c, "at the budget: %.4f from %.4f", b.cpu, c);
    c = b.cpu;
    ag_budget_step(&b, 0.01, 500 * MS, 400 * MS, S, S);
    CHECKF(b.cpu > c * 0.499 && b.cpu < c * 0.501, "50x over: %.4f from %.4f", b.cpu, c);
}

/* Over budget where the CPU samples are a small part of the cost (hooks, wall ticks): only
 * the periodic work slows down, unless the samples alone are over the budget. */
static void test_over_budget_not_from_cpu_samples(void) {
    ag_budget_t b = {1, 1};
    ag_budget_step(&b, 0.01, 20 * MS, 4 * MS, S, S);
    CHECKF(b.bg > 0.49 && b.bg < 0.51, "periodic factor %.3f", b.bg);
    CHECKF(b.cpu == 1, "cpu factor %.3f", b.cpu);
    /* ... unless they alone are over it (a budget of 0.01%: 0.1 ms/s at a core) */
    ag_budget_step(&b, 0.0001, 20 * MS, 4 * MS, S, S);
    CHECKF(b.cpu > 0.49 && b.cpu < 0.51, "cpu factor %.3f, its samples alone over budget", b.cpu);
}

/* Just under budget: a cautious x1.25, never above 1. */
static void test_under_budget_steps(void) {
    ag_budget_t b = {0.4, 0.4};
    ag_budget_step(&b, 0.01, 9 * MS, 8 * MS, S, S);
    CHECKF(b.cpu > 0.4 * 1.25 - 1e-9 && b.cpu < 0.4 * 1.25 + 1e-9, "cpu %.4f", b.cpu);
    for (int i = 0; i < 10; i++)
        ag_budget_step(&b, 0.01, 0, 0, S, S);
    CHECK(b.cpu == 1 && b.bg == 1);
}

static void ctl(ag_ctl_t *c) { ag_ctl_init(c, CM_EV_CPU, 100, 10 * MS, 1 * MS, 1000 * MS, 1); }

/* One control window of dt seconds in which the sampled threads used `cores`: the samples
 * the period in force produces, then the update. */
static double window(ag_ctl_t *c, double cores, double dt, double factor) {
    uint64_t n = (uint64_t)(cores * dt * S / c->period + 0.5);
    return ag_ctl_update_cpu(c, n, (uint64_t)(cores * dt * S), dt, factor);
}

/* n such windows in a row; the last period. */
static double windows(ag_ctl_t *c, int n, double cores, double factor) {
    double p = c->period;
    for (int i = 0; i < n; i++)
        p = window(c, cores, 0.25, factor);
    return p;
}

/* The CPU controller sets the period from the sampled threads' load: one core at 100/s is a
 * 10 ms period, four cores 40 ms, within +-15% four 0.25 s windows after a step
 * (feed-forward) and +-5% after eight; an idle window holds the period. */
static void test_ctl_follows_load(void) {
    ag_ctl_t c;
    ctl(&c);
    double p = windows(&c, 4, 1, 1);
    CHECKF(p > 9.5 * MS && p < 10.5 * MS, "one core: period %.2f ms", p / MS);
    p = windows(&c, 4, 4, 1);
    CHECKF(p > 34 * MS && p < 46 * MS, "four cores after 4 windows: period %.2f ms", p / MS);
    p = windows(&c, 4, 4, 1);
    CHECKF(p > 38 * MS && p < 42 * MS, "four cores after 8 windows: period %.2f ms", p / MS);
    double held = p;
    p = ag_ctl_update_cpu(&c, 0, 0, 0.25, 1);
    CHECKF(p == held, "idle window: %.2f ms, was %.2f", p / MS, held / MS);
}

/* The budget's CPU factor scales the set point: at 0.5 the period doubles. */
static void test_ctl_budget_factor(void) {
    ag_ctl_t c;
    ctl(&c);
    double p = windows(&c, 8, 1, 0.5);
    CHECKF(p > 19 * MS && p < 21 * MS, "one core at half the set point: %.2f ms", p / MS);
    CHECKF(c.target == 50, "target %.1f", c.target);
}

/* ---- the flight recorder's density (recorder/density.c) ----
 * A thread's CPU timer as the kernel runs it: checked on each 4 ms tick, during which the
 * thread ran a random share of the tick; it fires when the thread's CPU passed its expiry, with
 * the expiries passed meanwhile as overruns, re-armed from the expiry. The handler's weight is
 * the thread's CPU since its previous sample. */
typedef struct {
    double period, expiry, last, cpu;
} ktimer_t;

/* One tick of thread CPU ran_ns: 1 and the sample's weight and count if the timer fired. */
static int ktimer_tick(ktimer_t *k, double ran_ns, uint64_t *weight, uint64_t *count) {
    k->cpu += ran_ns;
    if (k->cpu < k->expiry)
        return 0;
    uint64_t n = 0;
    while (k->expiry <= k->cpu) {
        k->expiry += k->period;
        n++;
    }
    *weight = (uint64_t)(k->cpu - k->last);
    *count = n * CM_COUNT_ONE;
    k->last = k->cpu;
    return 1;
}

/* The stream split off the recorder's samples (timer at P / 4) is the sample for sample the
 * stream's own timer (at P) on the same CPU: the same number of samples, counts and weights
 * within one period, and both weights sum to the thread's CPU. At P = 10 ms (the recorder's
 * timer under the tick) and 40 ms. */
static void test_recorder_split(void) {
    static const double periods[] = {10 * MS, 40 * MS};
    for (int pi = 0; pi < 2; pi++) {
        double P = periods[pi];
        ktimer_t fine = {P / 4, P / 4, 0, 0}, own = {P, P, 0, 0};
        ag_thread_t t;
        memset(&t, 0, sizeof t);
        static uintptr_t buf[64];
        ag_rec_t *r = (ag_rec_t *)buf;
        uint64_t rec_n = 0, rec_w = 0, st_n = 0, st_w = 0, st_c = 0, own_n = 0, own_w = 0,
                 own_c = 0;
        srand(7 + pi);
        for (int i = 0; i < 50000; i++) {
            double ran = 4 * MS * (rand() % 1001) / 1000.0;
            uint64_t w, c;
            if (ktimer_tick(&own, ran, &w, &c)) {
                own_n++;
                own_w += w;
                own_c += c;
            }
            if (!ktimer_tick(&fine, ran, &w, &c))
                continue;
            rec_n++;
            rec_w += w;
            memset(r, 0, sizeof *r);
            r->type = CM_EV_CPU;
            r->weight = w;
            r->count = c;
            if (ag_rd_cpu_split(&t, r, P)) {
                st_n++;
                st_w += r->weight;
                st_c += r->count;
            }
        }
        printf("# P %.0f ms: recorder %llu samples, stream %llu (own timer %llu), counts %llu "
               "(%llu), CPU %.3f s: recorder %.3f s, stream %.3f s\n", P / MS,
               (unsigned long long)rec_n, (unsigned long long)st_n, (unsigned long long)own_n,
               (unsigned long long)st_c / CM_COUNT_ONE, (unsigned long long)own_c / CM_COUNT_ONE,
               own.cpu / S, (double)rec_w / S, (double)st_w / S);
        CHECKF(st_n + 1 >= own_n && st_n <= own_n + 1, "%llu vs %llu", (unsigned long long)st_n,
               (unsigned long long)own_n);
        CHECKF(st_c + CM_COUNT_ONE >= own_c && st_c <= own_c + CM_COUNT_ONE, "counts");
        CHECK(fabs((double)st_w - (double)own_w) <= P && fabs((double)rec_w - own.cpu) < P / 4 + 4 * MS);
        CHECK(fabs((double)st_w - fine.cpu) <= P);
        double dens = (double)rec_n / (double)st_n;
        /* at 10 ms the recorder's 2.5 ms timer fires at most once a tick (of 2 ms CPU on
         * average here): 10 / max(2.5, ~2.6) */
        CHECKF(pi ? dens > 3.9 && dens < 4.1 : dens > 3.0 && dens < 4.1, "density %.2f", dens);
    }
}

/* The recorder's budget: with its extra work proportional to its extra density (0.6 % of the
 * process's CPU at the full density 4), a 0.2 % budget brings the density to ~2 within a few
 * windows and holds it there; with room, back to 4. */
static void test_recorder_budget(void) {
    ag.cfg.incid.on = 1;
    ag.cfg.incid.density = 4;
    ag.cfg.incid.budget = 0.002;
    ag_rd_reset();
    for (int i = 0; i < 20; i++)
        ag_rd_budget_step(0.006 * (ag_rd_density() - 1) / 3 * S, S, S);
    double d = ag_rd_density();
    CHECKF(d > 1.6 && d < 2.4, "density %.2f over budget", d);
    CHECK(ag_rd_timer_period(40 * MS) > (uint64_t)(40 * MS / 2.4));
    for (int i = 0; i < 20; i++)
        ag_rd_budget_step(0.0002 * (ag_rd_density() - 1) / 3 * S, S, S);
    CHECKF(ag_rd_density() == 4, "density %.2f with room", ag_rd_density());
    ag.cfg.incid.on = 0;
    CHECK(ag_rd_density() == 1 && !ag_rd_split());
}

static const tr_test_t tests[] = {
    {"recorder_split", test_recorder_split},
    {"recorder_budget", test_recorder_budget},
    {"idle_slows_periodic_work_only", test_idle_slows_periodic_work_only},
    {"resume_recovers_fast", test_resume_recovers_fast},
    {"over_budget_under_load", test_over_budget_under_load},
    {"over_budget_not_from_cpu_samples", test_over_budget_not_from_cpu_samples},
    {"under_budget_steps", test_under_budget_steps},
    {"ctl_follows_load", test_ctl_follows_load},
    {"ctl_budget_factor", test_ctl_budget_factor},
    {0, 0},
};

TR_MAIN(tests)
