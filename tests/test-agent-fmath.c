/* The agent's libm-free exp, exp2, expm1, log, log1p (agent/src/runtime/fmath.h, issue 13) against
 * glibc's libm: relative error below 1e-14 over each function's domain (a dense sweep plus
 * random points spread over the exponent range), and the special values. */
#include "support/runner.h"

#include "fmath.h"

#include <float.h>
#include <stdlib.h>

typedef struct {
    const char *name;
    double (*ours)(double), (*ref)(double);
    double lo, hi; /* domain swept */
} fn_t;

static double rel(double a, double b) {
    if (a == b)
        return 0;
    double d = fabs(a - b), m = fabs(b) > DBL_MIN ? fabs(b) : DBL_MIN;
    return d / m;
}

/* worst relative error over a sweep of [lo, hi] and random points of it */
static void check_fn(const fn_t *f) {
    double worst = 0, at = 0;
    uint64_t s = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i <= 400000; i++) {
        double x;
        if (i <= 200000) {
            x = f->lo + (f->hi - f->lo) * i / 200000.0;
        } else { /* log-uniform magnitudes: tiny and huge arguments too */
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            double mag = (double)(s >> 11) / 9007199254740992.0;
            int neg = (s & 1) && f->lo < 0;
            double lim = neg ? -f->lo : f->hi;
            x = pow(lim, mag) * (mag < 0.02 ? 1e-300 : 1);
            if (x > lim)
                x = lim;
            if (neg)
                x = -x;
        }
        double e = rel(f->ours(x), f->ref(x));
        if (e > worst)
            worst = e, at = x;
    }
    CHECKF(worst < 1e-14, "%s: relative error %.3g at x = %.17g (ours %.17g, libm %.17g)", f->name,
           worst, at, f->ours(at), f->ref(at));
}

static void test_accuracy(void) {
    const fn_t fns[] = {
        {"exp", ag_exp, exp, -745, 709.7},
        {"exp2", ag_exp2, exp2, -1074, 1023.9},
        {"expm1", ag_expm1, expm1, -40, 709.7},
        {"log", ag_log, log, 0, 1e300},
        {"log1p", ag_log1p, log1p, -0.999999, 1e300},
    };
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++)
        check_fn(&fns[i]);
    /* near the points where a naive formula loses everything */
    for (double x = 1e-300; x < 1e-3; x *= 1.7) {
        CHECKF(rel(ag_expm1(x), expm1(x)) < 1e-14 && rel(ag_expm1(-x), expm1(-x)) < 1e-14,
               "expm1(+-%g)", x);
        CHECKF(rel(ag_log1p(x), log1p(x)) < 1e-14 && rel(ag_log1p(-x), log1p(-x)) < 1e-14,
               "log1p(+-%g)", x);
        CHECKF(rel(ag_log(1 + x), log(1 + x)) < 1e-14, "log(1 + %g)", x);
    }
    CHECK(rel(ag_log(4.9406564584124654e-324), log(4.9406564584124654e-324)) < 1e-14);
}

static void test_special(void) {
    CHECK(ag_log(0) == -INFINITY && isnan(ag_log(-1)) && ag_log(INFINITY) == INFINITY);
    CHECK(isnan(ag_log(NAN)) && ag_log(1) == 0);
    CHECK(ag_log1p(-1) == -INFINITY && isnan(ag_log1p(-2)) && ag_log1p(0) == 0);
    CHECK(ag_exp(0) == 1 && ag_exp(800) == INFINITY && ag_exp(-800) == 0 && isnan(ag_exp(NAN)));
    CHECK(ag_exp(-INFINITY) == 0 && ag_exp(INFINITY) == INFINITY);
    CHECK(ag_exp2(0) == 1 && ag_exp2(10) == 1024 && ag_exp2(-1074) == 4.9406564584124654e-324);
    CHECK(ag_exp2(1024) == INFINITY && ag_exp2(-1100) == 0);
    CHECK(ag_expm1(0) == 0 && ag_expm1(-INFINITY) == -1 && ag_expm1(INFINITY) == INFINITY);
}

static const tr_test_t tests[] = {
    {"accuracy", test_accuracy},
    {"special", test_special},
    {NULL, NULL},
};

TR_MAIN(tests)
