/* Per-event-type rate controller and the CPU budget (controller.c, bg thread). */
#ifndef AG_CONTROLLER_H
#define AG_CONTROLLER_H

#include "base.h"
#include "cm/chunk.h"

typedef struct {
    cm_event_type_t type;
    double target;        /* events/s set point (after the budget factor) */
    double target_cfg;    /* configured set point */
    double period;        /* current period (type unit per sample) */
    double period_min, period_max;
    double base;          /* log-domain reference period */
    double integral;      /* log-domain integral term */
    double prev_err;
    double rate_ewma;     /* measured samples/s, for reports */
    double load_ewma;     /* CPU only: sampled threads' CPU, ns per s (feed-forward) */
    double trim;          /* CPU only: log-domain integral of the rate error */
    int enabled;
} ag_ctl_t;

AG_HIDDEN void ag_ctl_init(ag_ctl_t *c, cm_event_type_t type, double target, double period,
                           double pmin, double pmax, int enabled);
/* bg: feeds samples observed over dt seconds; returns the new period. budget_factor in (0,1]
 * scales the set point down when the agent is over its CPU budget. */
AG_HIDDEN double ag_ctl_update(ag_ctl_t *c, uint64_t samples, double dt, double budget_factor);
/* bg: the CPU controller (see controller.c): feed-forward from the CPU the sampled threads used
 * over the window (cpu_ns, exact from the clocks), trimmed by the integral of the rate error.
 * Returns the new period. */
AG_HIDDEN double ag_ctl_update_cpu(ag_ctl_t *c, uint64_t samples, uint64_t cpu_ns, double dt,
                                   double budget_factor);

/* bg: the agent's CPU budget (controller.c: ag_budget_step). */
/* The process's CPU counts as at least this share of a core. Was 5%: a process using less
 * (redis-server serving 4.4k requests/s uses 4%) let the agent take 0.5 ms/s, over 1% of it. */
#define AG_BUDGET_FLOOR 0.01
#define AG_BUDGET_MIN 0.02   /* the lowest factor: 1/50 of the configured work */
typedef struct {
    double bg;  /* periodic work (wall ticks, control windows, /proc scans) runs at bg x its rate */
    double cpu; /* the CPU sample set point is cpu x the configured rate */
} ag_budget_t;
/* One window: agent_ns of estimated agent CPU, of which cpu_samples_ns for the CPU samples,
 * proc_ns of process CPU over wall_ns; budget a share (0.01 = 1%). */
AG_HIDDEN void ag_budget_step(ag_budget_t *b, double budget, double agent_ns,
                              double cpu_samples_ns, double proc_ns, double wall_ns);

#endif
