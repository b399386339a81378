/* controller.c on its own: the CPU controller's period (ag_ctl_update_cpu), fed the windows
 * bgthread.c would measure. */
#include "support/runner.h"

#include "internal.h"

#define MS 1e6
#define S 1e9

static void ctl(ag_ctl_t *c) { ag_ctl_init(c, CM_EV_CPU, 100, 10 * MS, 1 * MS, 1000 * MS, 1); }

/* One control window of dt seconds in which the sampled threads used `cores`: the samples
 * the period in force produces, then the update. */
static double window(ag_ctl_t *c, double cores, double dt, double factor) {
    uint64_t n = (uint64_t)(cores * dt * S / c->period + 0.5);
    return ag_ctl_update_cpu(c, n, (uint64_t)(cores * dt * S), dt, factor);
}

/* The CPU controller sets the period from the sampled threads' load: one core at 100/s is a
 * 10 ms period, four cores 40 ms, within +-15% four 0.25 s windows after a step
 * (feed-forward) and +-5% after eight; an idle window holds the period. */
static void test_ctl_follows_load(void) {
    ag_ctl_t c;
    ctl(&c);
    double p = 0;
    for (int i = 0; i < 4; i++)
        p = window(&c, 1, 0.25, 1);
    CHECKF(p > 9.5 * MS && p < 10.5 * MS, "one core: period %.2f ms", p / MS);
    for (int i = 0; i < 4; i++)
        p = window(&c, 4, 0.25, 1);
    CHECKF(p > 34 * MS && p < 46 * MS, "four cores after 4 windows: period %.2f ms", p / MS);
    for (int i = 0; i < 4; i++)
        p = window(&c, 4, 0.25, 1);
    CHECKF(p > 38 * MS && p < 42 * MS, "four cores after 8 windows: period %.2f ms", p / MS);
    double held = p;
    p = ag_ctl_update_cpu(&c, 0, 0, 0.25, 1);
    CHECKF(p == held, "idle window: %.2f ms, was %.2f", p / MS, held / MS);
}

/* The budget's CPU factor scales the set point: at 0.5 the period doubles. */
static void test_ctl_budget_factor(void) {
    ag_ctl_t c;
    ctl(&c);
    double p = 0;
    for (int i = 0; i < 8; i++)
        p = window(&c, 1, 0.25, 0.5);
    CHECKF(p > 19 * MS && p < 21 * MS, "one core at half the set point: %.2f ms", p / MS);
    CHECKF(c.target == 50, "target %.1f", c.target);
}

static const tr_test_t tests[] = {
    {"ctl_follows_load", test_ctl_follows_load},
    {"ctl_budget_factor", test_ctl_budget_factor},
    {0, 0},
};

TR_MAIN(tests)
