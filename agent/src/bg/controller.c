/* Rate controller, one instance per event type (bg thread only).
 *
 * Plant: with a period P (CPU ns per sample per thread, or bytes per allocation sample in
 * issue 4) and a load L (CPU ns/s of the whole process), the sample rate is r = L / P. In the
 * log domain that is static and linear: ln r = ln L - ln P. The controller therefore acts on
 * x = ln(P / base) with the error e = ln(r / T) (T the set point) and a PID law
 *
 *     I_k = clamp(I_{k-1} + Ki e_k, ln(Pmin/base), ln(Pmax/base))       (anti-windup: the
 *     x_k = Kp e_k + I_k + Kd (e_k - e_{k-1})                           integral never leaves
 *     P_k = clamp(base exp(x_k), Pmin, Pmax)                             the reachable range)
 *
 * Gains (update every AG_CTL_DT = 0.25 s): Ki = 0.6, Kp = 0.1, Kd = 0. Because the plant has no
 * dynamics of its own, integral action alone removes the error (each update closes ~60% of
 * the remaining log-gap, so a 4x load step is back within 10% of the set point in about
 * 1.5 s); the small P term speeds the first step; D only amplifies the Poisson noise of a
 * 25-sample window (sigma(ln r) ~ 0.2), so it is 0. Windows with fewer than 2 samples hold the
 * period (an idle process says nothing about the rate, and integrating there would wind the
 * period down to Pmin and cause a burst when work resumes).
 *
 * The CPU controller (ag_ctl_update_cpu) does better than that law, because its load is
 * measured exactly: the CPU clocks give L (process CPU minus the agent's background thread)
 * over every window, without the Poisson noise of a sample count. So it sets the period by
 * feed-forward and keeps only a slow integral to remove what the model misses:
 *
 *     L^_k = L^_{k-1} + A (L_k - L^_{k-1})            A = 0.5 (load EWMA, ~0.4 s at 0.25 s)
 *     J_k  = clamp(J_{k-1} + Kt (m_k - J_{k-1}), -ln 4, ln 4)
 *                                                      Kt = 0.1, m_k = ln(r_k P_{k-1} / L_k)
 *     P_k  = clamp(L^_k / T * exp(J_k), Pmin, Pmax)   (J_k is not moved while P is clamped)
 *
 * A load step is followed within one or two 0.25 s updates (L^ reaches 94% of a step in 4
 * updates), instead of the ~1.5-3 s of the pure integral law whose every update also feeds
 * the sample-count noise (sd of ln r ~ 0.2 per window) into the period. The trim J absorbs the
 * systematic part of r != L/P (samples folded by timer overruns when P is under the kernel
 * tick, threads the registry does not know yet): m_k is that part as one window measures it
 * (its samples, its load and the period in force during it), and J its average over ~10
 * windows, so it adds little noise (sd ~ sqrt(Kt/2) x 0.2 ~ 0.05 in ln P). It was the
 * integral of ln(r_k / T), which also summed the transient after every load step (the
 * window in which the load quadruples has 4x the samples at the old period): +0.18 in ln P
 * after a 1 -> 4 core step, 12% too few samples for 3 s (test-agent-controller). Measured on
 * the 1 -> 8 -> 1 thread step (test controller_step_1_8_1, bench/RESULTS.md): back within
 * +-10% in about 1 s.
 *
 * Unbiased estimates: every CPU sample's weight is the thread's CPU time since its previous
 * sample (signal.c), whatever the period did meanwhile; every allocation sample's weight comes
 * from the period its thread's countdown was drawn with, not the one in force when it ends
 * (alloc_sample.h: the maths, and a test that catches the other choice).
 *
 * Budget: bgthread.c passes the budget's CPU factor (ag_budget_step, below); the set point
 * used is target_cfg * factor.
 */
#include "controller.h"

#include "fmath.h"

#define KP 0.1
#define KI 0.6
#define KD 0.0

void ag_ctl_init(ag_ctl_t *c, cm_event_type_t type, double target, double period, double pmin,
                 double pmax, int enabled) {
    c->type = type;
    c->target = c->target_cfg = target;
    c->period = c->base = period;
    c->period_min = pmin;
    c->period_max = pmax;
    c->integral = 0;
    c->prev_err = 0;
    c->rate_ewma = 0;
    c->load_ewma = 0;
    c->trim = 0;
    c->enabled = enabled;
}

static double clampd(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

double ag_ctl_update(ag_ctl_t *c, uint64_t samples, double dt, double budget_factor) {
    double rate = dt > 0 ? (double)samples / dt : 0;
    c->rate_ewma = c->rate_ewma == 0 ? rate : 0.7 * c->rate_ewma + 0.3 * rate;
    c->target = c->target_cfg * clampd(budget_factor, 0.001, 1.0);
    if (!c->enabled || c->target <= 0 || samples < 2)
        return c->period;
    double e = ag_log(rate / c->target);
    double lo = ag_log(c->period_min / c->base), hi = ag_log(c->period_max / c->base);
    c->integral = clampd(c->integral + KI * e, lo, hi);
    double x = KP * e + c->integral + KD * (e - c->prev_err);
    c->prev_err = e;
    c->period = clampd(c->base * ag_exp(x), c->period_min, c->period_max);
    return c->period;
}

double ag_ctl_update_cpu(ag_ctl_t *c, uint64_t samples, uint64_t cpu_ns, double dt,
                         double budget_factor) {
    const double A = 0.5, KT = 0.1, TRIM = 1.3862943611198906; /* ln 4 */
    double rate = dt > 0 ? (double)samples / dt : 0;
    double load = dt > 0 ? (double)cpu_ns / dt : 0;
    c->rate_ewma = c->rate_ewma == 0 ? rate : 0.7 * c->rate_ewma + 0.3 * rate;
    c->target = c->target_cfg * clampd(budget_factor, 0.001, 1.0);
    /* An idle window says nothing about the rate: hold (no burst when work resumes). */
    if (!c->enabled || c->target <= 0 || (samples < 2 && load * dt < 2 * c->period))
        return c->period;
    c->load_ewma = c->load_ewma == 0 ? load : c->load_ewma + A * (load - c->load_ewma);
    double trim = c->trim;
    if (samples >= 2 && load > 0) /* the model's error in this window, at the period in force */
        trim = clampd(trim + KT * (ag_log(rate * c->period / load) - trim), -TRIM, TRIM);
    double p = c->load_ewma / c->target * ag_exp(trim);
    if (p >= c->period_min && p <= c->period_max)
        c->trim = trim; /* anti-windup: the trim does not move while the period is clamped */
    c->period = clampd(c->load_ewma / c->target * ag_exp(c->trim), c->period_min, c->period_max);
    return c->period;
}

/* The CPU budget (bgthread.c measures, once per window of >= 1 s, the agent's estimated CPU,
 * the part of it the CPU samples cost, and the process's CPU). Two factors, each in
 * [AG_BUDGET_MIN, 1]: periodic work (wall ticks, control windows, /proc scans: stretched by
 * 1/bg) and the CPU set point (scaled by cpu). Over budget, a factor moves down by the
 * overshoot (budget / share, at most halving); under it, up by the room left (x0.8 margin),
 * between x1.25 and x64: a process that goes from idle to busy has 100x the CPU to share from
 * one window to the next, and its profile should not wait 15 s of x1.25 steps for it. The CPU
 * factor moves down only in windows where the CPU samples are at least a quarter of the
 * agent's cost, or alone over the budget: an idle process (whose wall ticks outgrow a 1% share of its floored CPU) takes
 * no CPU samples, and slowing them would only starve the profile of its next burst of work.
 * The process's CPU counts as at least AG_BUDGET_FLOOR of one core (a 1% budget then allows
 * an idle process's agent ~0.1 ms/s). */
static double budget_move(double f, double budget, double share) {
    double room = share > 0 ? budget / share : 64;
    f *= share > budget ? (room > 0.5 ? room : 0.5) : clampd(0.8 * room, 1.25, 64);
    return clampd(f, AG_BUDGET_MIN, 1);
}

void ag_budget_step(ag_budget_t *b, double budget, double agent_ns, double cpu_samples_ns,
                    double proc_ns, double wall_ns) {
    if (proc_ns < AG_BUDGET_FLOOR * wall_ns)
        proc_ns = AG_BUDGET_FLOOR * wall_ns;
    double share = proc_ns > 0 ? agent_ns / proc_ns : 0;
    b->bg = budget_move(b->bg, budget, share);
    if (share <= budget || 4 * cpu_samples_ns >= agent_ns ||
        cpu_samples_ns > budget * proc_ns)
        b->cpu = budget_move(b->cpu, budget, share);
}
