/* Allocation sampling and live-heap acceptance tests (issue 4): real programs under
 * LD_PRELOAD=libfleetprof.so, chunks read back with the codec.
 *
 * Statistics: with a mean period P, a site allocating B bytes gets about B/P samples; the
 * estimate's relative standard deviation is about 1/sqrt(samples) for objects much smaller
 * than P. Tolerances are 4.5 sd for the samples a run got (the machine's speed sets the
 * count), or fixed and wider where the run is sized for hundreds of samples or more.
 */
#include "agent-common.h"

static char envbuf[4200], pre[4200];

/* Bytes and counts per site estimated from ALLOC rows match what the program counted, with a
 * fixed period (FLEETPROF_ALLOC_PERIOD). Both sizes: 256 B (s << P, weight ~ P) and 48 KiB. */
static void test_alloc_accuracy(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("alloc_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_ALLOC_PERIOD=67108864",
                         NULL};
    const char *argv[] = {prog, "bytes", "10", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    uint64_t sb = out_u64(out, "small_bytes="), bb = out_u64(out, "big_bytes=");
    uint64_t sn = out_u64(out, "small_n="), bn = out_u64(out, "big_n=");
    chunks_t *cs = load(dir);
    tot_t s = total(cs, CM_EV_ALLOC, "small_site", 0), b = total(cs, CM_EV_ALLOC, "big_site", 0);
    uint64_t sc = total_count(cs, CM_EV_ALLOC, "small_site");
    uint64_t bc = total_count(cs, CM_EV_ALLOC, "big_site");
    printf("  small: %llu samples, est %.4g B (true %.4g), est %.4g calls (true %.4g)\n",
           (unsigned long long)s.samples, (double)s.weight, (double)sb, sc / 1000.0, (double)sn);
    printf("  big:   %llu samples, est %.4g B (true %.4g), est %.4g calls (true %.4g)\n",
           (unsigned long long)b.samples, (double)b.weight, (double)bb, bc / 1000.0, (double)bn);
    printf("  drops: ring %llu unwind %llu\n", (unsigned long long)drops(cs, CM_DROP_RING_FULL),
           (unsigned long long)drops(cs, CM_DROP_UNWIND_FAILED));
    /* relative sd of each estimate ~ 1/sqrt(samples) (object sizes << P): allow 4.5 sd */
    CHECKF(s.samples >= 300 && b.samples >= 300, "too few samples: %llu %llu",
           (unsigned long long)s.samples, (unsigned long long)b.samples);
    double tol_s = 4.5 / sqrt((double)s.samples), tol_b = 4.5 / sqrt((double)b.samples);
    CHECKF(fabs((double)s.weight / (double)sb - 1) < tol_s, "small bytes off: %.3f (tol %.3f)",
           (double)s.weight / (double)sb, tol_s);
    CHECKF(fabs((double)b.weight / (double)bb - 1) < tol_b, "big bytes off: %.3f (tol %.3f)",
           (double)b.weight / (double)bb, tol_b);
    CHECKF(fabs(sc / 1000.0 / (double)sn - 1) < tol_s, "small count off: %.3f",
           sc / 1000.0 / (double)sn);
    CHECKF(fabs(bc / 1000.0 / (double)bn - 1) < tol_b, "big count off: %.3f",
           bc / 1000.0 / (double)bn);
    /* the leaf is the allocating function, not the hook */
    uint64_t leaf_ok = 0, rows = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *a = &cs->c[i]->samples[CM_EV_ALLOC];
        for (uint32_t r = 0; r < a->n; r++, rows++) {
            const char *lf = leaf_fn(cs->c[i], a->stack[r]);
            leaf_ok += !strcmp(lf, "small_site") || !strcmp(lf, "big_site");
        }
    }
    CHECKF(leaf_ok > rows * 95 / 100, "leaf is the caller in %llu of %llu rows",
           (unsigned long long)leaf_ok, (unsigned long long)rows);
    free_chunks(cs);
    rmrf(dir);
}

/* Under the default controller, allocation samples/s hold the set point (200/s) whatever the
 * allocation rate, and the estimate stays unbiased while the period moves. */
static void test_alloc_controller(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("alloc_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_ALLOC_RATE=300",
                         "FLEETPROF_INTERVAL=1", NULL};
    const char *argv[] = {prog, "bytes", "8", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    uint64_t tb = out_u64(out, "small_bytes=") + out_u64(out, "big_bytes=");
    chunks_t *cs = load(dir);
    tot_t a = total(cs, CM_EV_ALLOC, NULL, 0);
    double rate = (double)a.samples / 8.0;
    printf("  %llu samples (%.0f/s, set point 300), est %.4g B (true %.4g)\n",
           (unsigned long long)a.samples, rate, (double)a.weight, (double)tb);
    CHECKF(fabs((double)a.weight / (double)tb - 1) < 0.15, "bytes off: %.3f",
           (double)a.weight / (double)tb);
    uint64_t period = 0;
    for (int i = 0; i < cs->n; i++)
        for (uint32_t k = 0; k < cs->c[i]->header.n_sampling; k++)
            if (cs->c[i]->header.sampling[k].type == CM_EV_ALLOC) {
                period = cs->c[i]->header.sampling[k].period;
                printf("  chunk %d: period %llu, %llu samples\n", i, (unsigned long long)period,
                       (unsigned long long)cs->c[i]->header.sampling[k].samples_kept);
            }
    /* steady state (after the first 2 s at the initial 512 KiB period): median per 1-s chunk */
    double per[64];
    int np = 0;
    for (int i = 2; i + 1 < cs->n && np < 64; i++)
        for (uint32_t k = 0; k < cs->c[i]->header.n_sampling; k++)
            if (cs->c[i]->header.sampling[k].type == CM_EV_ALLOC)
                per[np++] = (double)cs->c[i]->header.sampling[k].samples_kept /
                            ((double)(cs->c[i]->header.end_unix_ns -
                                      cs->c[i]->header.start_unix_ns) / 1e9);
    for (int i = 0; i < np; i++) /* insertion sort */
        for (int j = i; j > 0 && per[j] < per[j - 1]; j--) {
            double x = per[j];
            per[j] = per[j - 1];
            per[j - 1] = x;
        }
    CHECKF(np >= 3, "%d steady chunks", np);
    rate = per[np / 2];
    printf("  steady median %.0f samples/s\n", rate);
    CHECKF(rate > 150 && rate < 600, "rate %.0f/s not held near 300/s", rate);
    CHECKF(period > 524288, "period %llu did not grow for a GB/s allocator",
           (unsigned long long)period);
    free_chunks(cs);
    rmrf(dir);
}

/* C++ new/delete (array, aligned, nothrow) are sampled and attributed to the caller. */
static void test_alloc_cxx(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("alloc_cxx", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), NULL}; /* controller */
    const char *argv[] = {prog, "6", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    uint64_t cb = out_u64(out, "cxx_bytes="), nb = out_u64(out, "nothrow_bytes=");
    chunks_t *cs = load(dir);
    uint64_t leaf_cxx = 0, leaf_nt = 0, other = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *a = &cs->c[i]->samples[CM_EV_ALLOC];
        for (uint32_t r = 0; r < a->n; r++) {
            const char *lf = leaf_fn(cs->c[i], a->stack[r]);
            if (!strcmp(lf, "cxx_site"))
                leaf_cxx += a->weight[r];
            else if (!strcmp(lf, "cxx_nothrow_site"))
                leaf_nt += a->weight[r];
            else
                other += a->weight[r];
        }
    }
    printf("  leaf cxx_site %.4g B (true %.4g), cxx_nothrow_site %.4g B (true %.4g), other %.4g\n",
           (double)leaf_cxx, (double)cb, (double)leaf_nt, (double)nb, (double)other);
    CHECKF(fabs((double)leaf_cxx / (double)cb - 1) < 0.15, "cxx_site off: %.3f",
           (double)leaf_cxx / (double)cb);
    CHECKF(fabs((double)leaf_nt / (double)nb - 1) < 0.15, "nothrow off: %.3f",
           (double)leaf_nt / (double)nb);
    CHECKF(other < (leaf_cxx + leaf_nt) / 20, "%.4g B attributed elsewhere", (double)other);
    free_chunks(cs);
    rmrf(dir);
}

/* A leak grows chunk after chunk in INUSE; freed churn does not. */
static void test_inuse_leak(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("alloc_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_ALLOC_PERIOD=131072",
                         NULL};
    const char *argv[] = {prog, "leak", "8", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    uint64_t leaked = out_u64(out, "leaked=");
    chunks_t *cs = load(dir);
    CHECKF(cs->n >= 6, "%d chunks", cs->n);
    double prev = -1, last = 0;
    int grew = 0;
    uint64_t churn_max = 0;
    for (int i = 0; i < cs->n; i++) {
        chunks_t one = {.n = 1};
        one.c[0] = cs->c[i];
        tot_t l = total(&one, CM_EV_INUSE, "leak_site", 0);
        tot_t c = total(&one, CM_EV_INUSE, "churn_site", 0);
        printf("  chunk %d: inuse leak_site %.4g B, churn_site %.4g B\n", i, (double)l.weight,
               (double)c.weight);
        grew += prev >= 0 && (double)l.weight > prev;
        prev = (double)l.weight;
        last = (double)l.weight;
        if (c.weight > churn_max)
            churn_max = c.weight;
    }
    printf("  leaked %.4g B, final inuse %.4g B\n", (double)leaked, last);
    CHECKF(grew >= cs->n - 3, "leak grew in only %d of %d chunks", grew, cs->n - 1);
    CHECKF(fabs(last / (double)leaked - 1) < 0.25, "final inuse %.4g vs leaked %.4g", last,
           (double)leaked);
    CHECKF((double)churn_max < 0.1 * (double)leaked, "freed churn shows %.4g B live",
           (double)churn_max);
    free_chunks(cs);
    rmrf(dir);
}

/* A full live-heap table is counted (DROP_HEAP_TABLE_FULL), never harmful. */
static void test_heap_full(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("alloc_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_ALLOC_PERIOD=65536",
                         "FLEETPROF_HEAP_ENTRIES=64", NULL};
    const char *argv[] = {prog, "full", "2", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    chunks_t *cs = load(dir);
    uint64_t full = drops(cs, CM_DROP_HEAP_TABLE_FULL);
    tot_t in = total(cs, CM_EV_INUSE, "leak_site", 0);
    printf("  heap-full drops %llu, inuse rows %llu\n", (unsigned long long)full,
           (unsigned long long)in.samples);
    CHECK(full > 100);
    CHECK(in.samples >= 1);
    free_chunks(cs);
    rmrf(dir);
}

/* An application signal handler that allocates (while the main thread is inside malloc
 * and the hooks) neither deadlocks nor crashes. */
static void test_alloc_in_signal(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("alloc_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_ALLOC_PERIOD=8192",
                         NULL};
    const char *argv[] = {prog, "signal", "4", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    CHECKF(out_u64(out, "signal_allocs=") > 200, "%s", out);
    chunks_t *cs = load(dir);
    CHECK(total(cs, CM_EV_ALLOC, "on_alarm", 0).samples > 0);
    free_chunks(cs);
    rmrf(dir);
}

/* fork children allocate and leak under the agent; both sides exit cleanly with chunks. */
static void test_alloc_fork(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("alloc_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_ALLOC_PERIOD=1048576",
                         NULL};
    const char *argv[] = {prog, "fork", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    chunks_t *cs = load(dir);
    int pids = 0, child_leak = 0;
    for (int i = 0; i < cs->n; i++) {
        pids += i == 0 || cs->c[i]->header.pid != cs->c[i - 1]->header.pid;
        chunks_t one = {.n = 1};
        one.c[0] = cs->c[i];
        child_leak += total(&one, CM_EV_INUSE, "leak_site", 0).samples > 0;
    }
    CHECKF(pids >= 6, "chunks from %d processes", pids);
    CHECKF(child_leak >= 4, "children's leaks seen in %d chunks", child_leak);
    free_chunks(cs);
    rmrf(dir);
}

/* dlopen/dlclose in a loop while allocating. */
static void test_alloc_dlopen(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("alloc_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_ALLOC_PERIOD=65536",
                         NULL};
    const char *argv[] = {prog, "dlopen", "libresolv.so.2", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    CHECKF(strstr(out, "dlopen ok") != NULL, "%s", out);
    chunks_t *cs = load(dir);
    CHECK(total(cs, CM_EV_ALLOC, "big_site", 0).samples > 10);
    free_chunks(cs);
    rmrf(dir);
}

/* A program that defines malloc itself: our interposers are not reached; nothing breaks. */
static void test_own_allocator(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("alloc_own", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), NULL};
    const char *argv[] = {prog, NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    CHECKF(out_u64(out, "calls=") >= 100000, "%s", out);
    chunks_t *cs = load(dir);
    CHECK(cs->n >= 1); /* the agent still works (its allocations go to the program's malloc) */
    free_chunks(cs);
    rmrf(dir);
}

/* FLEETPROF_ENABLED=0: hooks forward, nothing is written, the program's results are exact. */
static void test_off_switch(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("alloc_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_ENABLED=0", NULL};
    const char *argv[] = {prog, "leak", "2", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    CHECK(out_u64(out, "leaked=") > 0);
    chunks_t *cs = load(dir);
    CHECK_EQ(cs->n, 0);
    free_chunks(cs);
    rmrf(dir);
}

static const tr_test_t tests[] = {
    {"alloc_accuracy", test_alloc_accuracy},
    {"alloc_controller", test_alloc_controller},
    {"alloc_cxx", test_alloc_cxx},
    {"inuse_leak", test_inuse_leak},
    {"heap_full", test_heap_full},
    {"alloc_in_signal", test_alloc_in_signal},
    {"alloc_fork", test_alloc_fork},
    {"alloc_dlopen", test_alloc_dlopen},
    {"own_allocator", test_own_allocator},
    {"off_switch", test_off_switch},
    {NULL, NULL},
};
TR_MAIN(tests)
