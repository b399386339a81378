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
 * Unbiased estimates: every sample carries the period in force as its weight (thread.c re-arms
 * timers so that the CPU spent under the old period counts toward the new one).
 *
 * Budget: bgthread.c passes budget_factor = (agent CPU budget / measured agent share),
 * smoothed and capped at 1; the set point used is target_cfg * factor.
 */
#include "internal.h"

#include <math.h>

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
    c->enabled = enabled;
}

static double clampd(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

double ag_ctl_update(ag_ctl_t *c, uint64_t samples, double dt, double budget_factor) {
    double rate = dt > 0 ? (double)samples / dt : 0;
    c->rate_ewma = c->rate_ewma == 0 ? rate : 0.7 * c->rate_ewma + 0.3 * rate;
    c->target = c->target_cfg * clampd(budget_factor, 0.001, 1.0);
    if (!c->enabled || c->target <= 0 || samples < 2)
        return c->period;
    double e = log(rate / c->target);
    double lo = log(c->period_min / c->base), hi = log(c->period_max / c->base);
    c->integral = clampd(c->integral + KI * e, lo, hi);
    double x = KP * e + c->integral + KD * (e - c->prev_err);
    c->prev_err = e;
    c->period = clampd(c->base * exp(x), c->period_min, c->period_max);
    return c->period;
}
