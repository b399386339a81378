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
 * Budget: bgthread.c passes budget_factor = (agent CPU budget / measured agent share),
 * smoothed and capped at 1; the set point used is target_cfg * factor.
 */
#include "internal.h"

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

