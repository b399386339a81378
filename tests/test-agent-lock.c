/* Lock contention acceptance tests (issue 4): lock_work under LD_PRELOAD=libfleetprof.so.
 * Waits >= the threshold are LOCK events (stack, address, wait); contended shorter waits are
 * aggregate rows; floods are subsampled with unbiased weights. */
#include "agent-common.h"

static char envbuf[4200], pre[4200];

static uint64_t hexval(const char *out, const char *key) {
    const char *p = strstr(out, key);
    CHECKF(p != NULL, "'%s' missing: %s", key, out);
    return strtoull(p + strlen(key), NULL, 16);
}

/* 30 ms holds: the waiter's long waits are events whose count and total match what the
 * program measured; the stack's leaf is the waiting function; the address is the mutex. */
static void test_lock_events(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("lock_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), NULL};
    const char *argv[] = {prog, "long", "6", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    uint64_t waits = out_u64(out, "waits="), wait_ns = out_u64(out, "wait_ns=");
    uint64_t all_ns = out_u64(out, "all_ns="), mu = hexval(out, "mutex=0x");
    chunks_t *cs = load(dir);
    tot_t ev = total_flags(cs, CM_EV_LOCK, "waiter_site", 0, CM_SF_AGGREGATE);
    tot_t ag = total_flags(cs, CM_EV_LOCK, "waiter_site", CM_SF_AGGREGATE, 0);
    uint64_t addr_ok = 0, leaf_ok = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *s = &cs->c[i]->samples[CM_EV_LOCK];
        for (uint32_t r = 0; r < s->n; r++) {
            if (CM_COL(s, flags, r) & CM_SF_AGGREGATE)
                continue;
            addr_ok += CM_COL(s, address, r) == mu;
            leaf_ok += !strcmp(leaf_fn(cs->c[i], s->stack[r]), "waiter_site");
        }
    }
    printf("  program: %llu waits >= 10 ms, %.4g ns; all waits %.4g ns\n",
           (unsigned long long)waits, (double)wait_ns, (double)all_ns);
    printf("  agent: %llu events %.4g ns (leaf ok %llu, address ok %llu); aggregates %.4g ns\n",
           (unsigned long long)ev.samples, (double)ev.weight, (unsigned long long)leaf_ok,
           (unsigned long long)addr_ok, (double)ag.weight);
    CHECKF(waits >= 50, "only %llu long waits", (unsigned long long)waits);
    CHECKF(fabs((double)ev.samples / (double)waits - 1) < 0.15, "events %llu vs waits %llu",
           (unsigned long long)ev.samples, (unsigned long long)waits);
    CHECKF(fabs((double)ev.weight / (double)wait_ns - 1) < 0.15, "event ns %.4g vs %.4g",
           (double)ev.weight, (double)wait_ns);
    CHECKF(fabs((double)(ev.weight + ag.weight) / (double)all_ns - 1) < 0.2,
           "events+aggregates %.4g ns vs all waits %.4g", (double)(ev.weight + ag.weight),
           (double)all_ns);
    CHECK_EQ(leaf_ok, ev.samples);
    CHECK_EQ(addr_ok, ev.samples);
    free_chunks(cs);
    rmrf(dir);
}

/* Short contended waits (2 ms holds) are aggregate rows -- count and total wait per stack,
 * no thread -- not events; with the (rare) long ones they account for the program's waits. */
static void test_lock_aggregates(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("lock_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), NULL};
    const char *argv[] = {prog, "short", "5", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    uint64_t all_ns = out_u64(out, "all_ns=");
    chunks_t *cs = load(dir);
    tot_t ag = total_flags(cs, CM_EV_LOCK, "waiter_site", CM_SF_AGGREGATE, 0);
    tot_t ev = total_flags(cs, CM_EV_LOCK, "waiter_site", 0, CM_SF_AGGREGATE);
    uint64_t n = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *s = &cs->c[i]->samples[CM_EV_LOCK];
        for (uint32_t r = 0; r < s->n; r++)
            if ((CM_COL(s, flags, r) & CM_SF_AGGREGATE) &&
                stack_has(&cs->c[i]->dict, s->stack[r], "waiter_site")) {
                n += cm_samples_count(s, r);
                CHECK(CM_COL(s, thread, r) == 0); /* aggregates carry no thread */
            }
    }
    printf("  aggregates: %llu rows, %.1f waits, %.4g ns; events: %llu (%.4g ns); program: all "
           "waits %.4g ns\n",
           (unsigned long long)ag.samples, n / 1000.0, (double)ag.weight,
           (unsigned long long)ev.samples, (double)ev.weight, (double)all_ns);
    CHECKF(n / 1000 >= 200, "only %llu aggregated waits", (unsigned long long)(n / 1000));
    CHECKF(ev.samples * 20 < n / 1000, "%llu events for short waits",
           (unsigned long long)ev.samples);
    CHECKF(fabs((double)(ag.weight + ev.weight) / (double)all_ns - 1) < 0.25,
           "agent %.4g ns vs program %.4g ns", (double)(ag.weight + ev.weight), (double)all_ns);
    free_chunks(cs);
    rmrf(dir);
}

/* rwlock readers blocked by a writer (25 ms) are events at rd_site. */
static void test_lock_rwlock(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("lock_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), NULL};
    const char *argv[] = {prog, "rw", "4", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    chunks_t *cs = load(dir);
    tot_t ev = total_flags(cs, CM_EV_LOCK, "rd_site", 0, CM_SF_AGGREGATE);
    printf("  rd_site: %llu events, %.4g ns\n", (unsigned long long)ev.samples, (double)ev.weight);
    uint64_t rw = out_u64(out, "rd_waits=");
    CHECKF(rw >= 50, "only %llu reader waits", (unsigned long long)rw);
    CHECKF(fabs((double)ev.samples / (double)rw - 1) < 0.15, "events %llu vs waits %llu",
           (unsigned long long)ev.samples, (unsigned long long)rw);
    CHECK(ev.weight >= ev.samples * 10000000ull);
    free_chunks(cs);
    rmrf(dir);
}

/* A flood of slow waits (threshold 1 ms, ~250 waits/s) is capped near FLEETPROF_LOCK_RATE
 * with subsampled rows whose weights keep the estimated count and time unbiased. */
static void test_lock_flood(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("lock_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_LOCK_THRESHOLD=1",
                         "FLEETPROF_LOCK_RATE=20", NULL};
    const char *argv[] = {prog, "flood", "8", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    uint64_t waits = out_u64(out, "waits="), wait_ns = out_u64(out, "wait_ns=");
    chunks_t *cs = load(dir);
    tot_t ev = total_flags(cs, CM_EV_LOCK, "waiter_site", 0, CM_SF_AGGREGATE);
    tot_t sub = total_flags(cs, CM_EV_LOCK, "waiter_site", CM_SF_SUBSAMPLED, 0);
    uint64_t cnt = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *s = &cs->c[i]->samples[CM_EV_LOCK];
        for (uint32_t r = 0; r < s->n; r++)
            if (!(CM_COL(s, flags, r) & CM_SF_AGGREGATE))
                cnt += cm_samples_count(s, r);
    }
    uint64_t dropped = drops(cs, CM_DROP_SUBSAMPLED);
    printf("  program: %llu waits >= 1 ms (%.4g ns); kept %llu rows (%llu subsampled), est "
           "%.1f waits %.4g ns, %llu subsampled away\n",
           (unsigned long long)waits, (double)wait_ns, (unsigned long long)ev.samples,
           (unsigned long long)sub.samples, cnt / 1000.0, (double)ev.weight,
           (unsigned long long)dropped);
    CHECKF(waits > 8 * 60, "only %llu waits: no flood", (unsigned long long)waits);
    CHECKF(ev.samples < 8 * 20 * 2, "%llu rows kept for a cap of 20/s",
           (unsigned long long)ev.samples);
    CHECK(sub.samples > 0 && dropped > 0);
    CHECKF(fabs(cnt / 1000.0 / (double)waits - 1) < 0.25, "est %.1f waits vs %llu", cnt / 1000.0,
           (unsigned long long)waits);
    CHECKF(fabs((double)ev.weight / (double)wait_ns - 1) < 0.25, "est %.4g ns vs %.4g",
           (double)ev.weight, (double)wait_ns);
    free_chunks(cs);
    rmrf(dir);
}

/* FLEETPROF_LOCK=0: no LOCK rows at all. */
static void test_lock_off(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("lock_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_LOCK=0", NULL};
    const char *argv[] = {prog, "long", "2", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    CHECK(out_u64(out, "waits=") > 10);
    chunks_t *cs = load(dir);
    CHECK(cs->n >= 1);
    CHECK_EQ(total(cs, CM_EV_LOCK, NULL, 0).samples, 0);
    free_chunks(cs);
    rmrf(dir);
}

static const tr_test_t tests[] = {
    {"lock_events", test_lock_events},   {"lock_aggregates", test_lock_aggregates},
    {"lock_rwlock", test_lock_rwlock},   {"lock_flood", test_lock_flood},
    {"lock_off", test_lock_off},         {NULL, NULL},
};
TR_MAIN(tests)
