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

/* The second lock scenario: the holder sleeps 1 ms inside the mutex. No LOCK events
 * (every wait is far below the 10 ms threshold), and the aggregates -- count and total wait
 * per stack, no thread -- account for the total wait the waiters measured around their own
 * pthread_mutex_lock calls within +-20%. Fair comparison: the waiters time only the calls
 * that find the mutex held (their own trylock first), as the agent times only those (its
 * trylock failed); a preemption around an uncontended call is the machine, not the lock. The
 * program's figure still includes what the agent's cannot see (its trylock before its clock
 * read, its report after it): a few us per call against ~0.5 ms waits.
 * A loaded machine can stall the holder past 10 ms: such a wait is a real one above the
 * threshold, and an event for it is right. So every run is judged on what the program saw:
 * no more events than its waits >= 10 ms (none when it saw none), each event >= 10 ms, the
 * aggregates within +-20% of the waits under 10 ms and events + aggregates within +-20% of
 * all the waits. */
static void test_lock_aggregates(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("lock_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), NULL};
    const char *argv[] = {prog, "short", "4", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    uint64_t all_ns = out_u64(out, "all_ns="), calls = out_u64(out, "calls=");
    uint64_t long_waits = out_u64(out, "waits="), long_ns = out_u64(out, "wait_ns=");
    chunks_t *cs = load(dir);
    tot_t ag = total_flags(cs, CM_EV_LOCK, "waiter_site", CM_SF_AGGREGATE, 0);
    tot_t ev = total_flags(cs, CM_EV_LOCK, NULL, 0, CM_SF_AGGREGATE);
    uint64_t n = 0, short_events = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *s = &cs->c[i]->samples[CM_EV_LOCK];
        for (uint32_t r = 0; r < s->n; r++) {
            if (!(CM_COL(s, flags, r) & CM_SF_AGGREGATE)) {
                short_events += s->weight[r] < 10000000ull;
                continue;
            }
            if (stack_has(&cs->c[i]->dict, s->stack[r], "waiter_site")) {
                n += cm_samples_count(s, r);
                CHECK(CM_COL(s, thread, r) == 0); /* aggregates carry no thread */
            }
        }
    }
    double ratio = (double)ag.weight / (double)(all_ns - long_ns);
    double ratio_all = (double)(ag.weight + ev.weight) / (double)all_ns;
    printf("  program: %llu lock calls, %.4g ns in them, %llu waits >= 10 ms (%.4g ns); agent: "
           "%llu aggregate rows, %.1f waits, %.4g ns (ratio to the waits < 10 ms %.3f); %llu "
           "events, %.4g ns (all: ratio %.3f)\n",
           (unsigned long long)calls, (double)all_ns, (unsigned long long)long_waits,
           (double)long_ns, (unsigned long long)ag.samples, n / 1000.0, (double)ag.weight, ratio,
           (unsigned long long)ev.samples, (double)ev.weight, ratio_all);
    /* the agent times a sub-interval of the program's: it cannot see more long waits */
    CHECKF(ev.samples <= long_waits, "%llu events, the program saw %llu waits >= 10 ms",
           (unsigned long long)ev.samples, (unsigned long long)long_waits);
    CHECK_EQ(short_events, 0);
    CHECKF(n / 1000 >= 500, "only %llu aggregated waits", (unsigned long long)(n / 1000));
    CHECKF(fabs(ratio - 1) <= 0.20, "aggregates %.4g ns vs program's waits < 10 ms %.4g ns (%.3f)",
           (double)ag.weight, (double)(all_ns - long_ns), ratio);
    CHECKF(fabs(ratio_all - 1) <= 0.20, "events + aggregates %.4g ns vs program %.4g ns (%.3f)",
           (double)(ag.weight + ev.weight), (double)all_ns, ratio_all);
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

static uint64_t flags_rows(const chunks_t *cs, cm_event_type_t type, uint32_t want) {
    uint64_t n = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *s = &cs->c[i]->samples[type];
        for (uint32_t r = 0; r < s->n; r++)
            n += (CM_COL(s, flags, r) & want) == want;
    }
    return n;
}

/* The flood: two threads hand a mutex to each other as fast as the machine allows
 * (lock_work pingpong: ~2 us holds after the other one blocks), with FLEETPROF_LOCK_THRESHOLD
 * at 1 us, so nearly every lock call is a wait just above the threshold. (The 1
 * million waits/s cannot be produced: a futex hand-off between two threads takes 8-20 us, so
 * two threads reach ~110k waits/s on a quiet machine; the rate reached is printed.) The agent
 * must stay within its CPU budget (agent_cpu_ns over process_cpu_ns of the chunk headers,
 * which include the lock hooks' own cost, <= FLEETPROF_CPU_BUDGET's default 1%), keep about
 * FLEETPROF_LOCK_RATE events per second (rows flagged CM_SF_SUBSAMPLED, the rest counted as
 * DROP_SUBSAMPLED), and its estimated total wait (events' weights + aggregates) and number of
 * waits must be within +-20% of what the program measured around its own lock calls. The
 * agent runs with its default configuration otherwise (10 s chunks: a 1 s interval would
 * charge the process ten chunk encodings per 10 s that no deployment pays). */
static void test_lock_flood(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("lock_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_LOCK_THRESHOLD=0.001",
                         NULL};
    const double secs = 6;
    const char *argv[] = {prog, "pingpong", "6", "2000", "1000", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    uint64_t waits = out_u64(out, "waits="), all_ns = out_u64(out, "all_ns=");
    uint64_t calls = out_u64(out, "calls="), rate = out_u64(out, "rate=");
    chunks_t *cs = load(dir);
    tot_t ev = total_flags(cs, CM_EV_LOCK, "pp_site", 0, CM_SF_AGGREGATE);
    tot_t ag = total_flags(cs, CM_EV_LOCK, "pp_site", CM_SF_AGGREGATE, 0);
    uint64_t sub_rows = flags_rows(cs, CM_EV_LOCK, CM_SF_SUBSAMPLED);
    uint64_t est_n = total_count(cs, CM_EV_LOCK, "pp_site");
    uint64_t dropped = drops(cs, CM_DROP_SUBSAMPLED), ring_full = drops(cs, CM_DROP_RING_FULL);
    uint64_t agent = 0, proc = 0;
    for (int i = 0; i < cs->n; i++) {
        agent += cs->c[i]->header.agent_cpu_ns;
        proc += cs->c[i]->header.process_cpu_ns;
    }
    /* as the agent's own budget: the process CPU floored at 1% of one core */
    double share = (double)agent / fmax((double)proc, 0.01e9 * secs);
    double est = (double)(ev.weight + ag.weight);
    printf("  program: %llu lock calls, %llu waits >= 1 us (%llu/s), %.4g ns in lock calls\n",
           (unsigned long long)calls, (unsigned long long)waits, (unsigned long long)rate,
           (double)all_ns);
    printf("  agent: %llu event rows (%.0f/s; %llu subsampled), %llu subsampled away, %llu ring "
           "full; aggregates %llu rows; est %.1f waits, %.4g ns (ratio %.3f); agent CPU %.4g ns "
           "of %.4g ns process CPU (%.3f%%)\n",
           (unsigned long long)ev.samples, (double)ev.samples / secs,
           (unsigned long long)sub_rows, (unsigned long long)dropped,
           (unsigned long long)ring_full, (unsigned long long)ag.samples, est_n / 1000.0, est,
           est / (double)all_ns, (double)agent, (double)proc, share * 100);
    CHECKF(rate >= 2000, "only %llu waits/s: no flood", (unsigned long long)rate);
    CHECKF(share <= 0.01, "agent CPU %.3f%% of the process's, budget 1%%", share * 100);
    CHECKF(ev.samples <= 100 * secs * 3, "%llu event rows for a cap of 100/s",
           (unsigned long long)ev.samples);
    CHECK(sub_rows > 0 && dropped > waits / 2);
    CHECKF(fabs(est / (double)all_ns - 1) <= 0.20, "estimated wait %.4g ns vs %.4g", est,
           (double)all_ns);
    CHECKF(fabs((double)est_n / 1000.0 / (double)calls - 1) <= 0.20, "estimated %.1f waits vs %llu",
           est_n / 1000.0, (unsigned long long)calls);
    free_chunks(cs);
    rmrf(dir);
}

/* Condition variables, re-acquisition: the signaller keeps the mutex 30 ms after its signal,
 * so every wake-up of cond_waiter_site waits ~30 ms for the mutex inside pthread_cond_wait:
 * one LOCK event each (>= the threshold), on the mutex, with the waiter's stack (the caller
 * of pthread_cond_wait is the leaf), and a weight matching the program's signal-to-return. */
static void test_lock_cond_reacquire(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("lock_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), NULL};
    const char *argv[] = {prog, "cond", "4", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    uint64_t rounds = out_u64(out, "rounds="), reacq = out_u64(out, "reacq_ns=");
    uint64_t mu = hexval(out, "mutex=0x");
    chunks_t *cs = load(dir);
    tot_t ev = total_flags(cs, CM_EV_LOCK, "cond_waiter_site", 0, CM_SF_AGGREGATE);
    tot_t all = total_flags(cs, CM_EV_LOCK, NULL, 0, CM_SF_AGGREGATE);
    uint64_t addr_ok = 0, leaf_ok = 0, long_ok = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *s = &cs->c[i]->samples[CM_EV_LOCK];
        for (uint32_t r = 0; r < s->n; r++) {
            if (CM_COL(s, flags, r) & CM_SF_AGGREGATE)
                continue;
            addr_ok += CM_COL(s, address, r) == mu;
            leaf_ok += !strcmp(leaf_fn(cs->c[i], s->stack[r]), "cond_waiter_site");
            long_ok += s->weight[r] >= 10000000ull;
        }
    }
    printf("  program: %llu wake-ups, %.4g ns signal-to-return; agent: %llu events (%llu at "
           "cond_waiter_site, leaf ok %llu, address ok %llu, >= 10 ms %llu), %.4g ns\n",
           (unsigned long long)rounds, (double)reacq, (unsigned long long)all.samples,
           (unsigned long long)ev.samples, (unsigned long long)leaf_ok,
           (unsigned long long)addr_ok, (unsigned long long)long_ok, (double)ev.weight);
    CHECKF(rounds >= 40, "only %llu wake-ups", (unsigned long long)rounds);
    CHECK_EQ(all.samples, ev.samples);
    CHECK_EQ(leaf_ok, ev.samples);
    CHECK_EQ(addr_ok, ev.samples);
    CHECK_EQ(long_ok, ev.samples);
    CHECKF(ev.samples >= rounds * 9 / 10 && ev.samples <= rounds, "%llu events for %llu wake-ups",
           (unsigned long long)ev.samples, (unsigned long long)rounds);
    CHECKF(fabs((double)ev.weight / (double)reacq - 1) <= 0.15, "event ns %.4g vs %.4g",
           (double)ev.weight, (double)reacq);
    free_chunks(cs);
    rmrf(dir);
}

/* Condition variables, idle waits: consumers wait ~200 ms for work (pthread_cond_wait, a
 * pthread_cond_timedwait with a far deadline, a 50 ms timedwait that expires) and the
 * producer releases the mutex right after its broadcast: waiting for work is not contention,
 * so no LOCK event at all. */
static void test_lock_cond_idle(void) {
    for (int attempt = 1;; attempt++) {
        char *dir = mkout(), prog[4096], out[4096];
        prog_path("lock_work", prog, sizeof prog);
        const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), NULL};
        const char *argv[] = {prog, "idle", "3", NULL};
        int st = run(env, argv, 60, out, sizeof out);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
        uint64_t rounds = out_u64(out, "rounds="), timeouts = out_u64(out, "timeouts=");
        uint64_t late = out_u64(out, "late=");
        chunks_t *cs = load(dir);
        tot_t ev = total_flags(cs, CM_EV_LOCK, NULL, 0, CM_SF_AGGREGATE);
        tot_t ag = total_flags(cs, CM_EV_LOCK, NULL, CM_SF_AGGREGATE, 0);
        printf("  run %d: program: %llu broadcasts, %llu timeouts, %llu wake-ups >= 10 ms late; "
               "agent: %llu LOCK events, %llu aggregate rows (%.4g ns)\n",
               attempt, (unsigned long long)rounds, (unsigned long long)timeouts,
               (unsigned long long)late, (unsigned long long)ev.samples,
               (unsigned long long)ag.samples, (double)ag.weight);
        CHECKF(rounds >= 10 && timeouts >= 30, "%llu rounds, %llu timeouts",
               (unsigned long long)rounds, (unsigned long long)timeouts);
        CHECK(cs->n >= 1);
        /* the re-acquire estimate includes the wake-up latency (documented): a machine that
         * wakes a consumer >= 10 ms late breaks the premise; that run is measured again */
        CHECKF(ev.samples <= late, "%llu events, %llu late wake-ups", (unsigned long long)ev.samples,
               (unsigned long long)late);
        free_chunks(cs);
        rmrf(dir);
        if (late && attempt < 3) {
            printf("  run %d: not judged (%llu late wake-ups)\n", attempt, (unsigned long long)late);
            continue;
        }
        CHECKF(late == 0, "%llu late wake-ups in 3 runs", (unsigned long long)late);
        CHECK_EQ(ev.samples, 0);
        /* aggregates here are wake-up latencies >= 50 us: far below the time spent waiting */
        CHECKF(ag.weight < rounds * 10000000ull, "aggregates %.4g ns", (double)ag.weight);
        break;
    }
}

/* FLEETPROF_LOCK=0: no LOCK rows at all (mutex and condvar contention alike). */
static void test_lock_off(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("lock_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_LOCK=0", NULL};
    const char *argv[] = {prog, "long", "2", NULL};
    const char *argv2[] = {prog, "cond", "1", NULL};
    int st2 = run(env, argv2, 60, out, sizeof out);
    CHECKF(WIFEXITED(st2) && WEXITSTATUS(st2) == 0, "status %d: %s", st2, out);
    CHECK(out_u64(out, "rounds=") >= 5);
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
    {"lock_cond_reacquire", test_lock_cond_reacquire},
    {"lock_cond_idle", test_lock_cond_idle},
    {"lock_off", test_lock_off},         {NULL, NULL},
};
TR_MAIN(tests)
