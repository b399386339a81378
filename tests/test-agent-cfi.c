/* The CFI unwinder in a real process (issue 14): cfi_work (-O2 -fomit-frame-pointer) under
 * libfleetprof. A known call graph yields only caller -> callee pairs that exist, on complete
 * stacks; no stack holds a libfleetprof frame; 300 dlopen/dlclose cycles of a library on
 * sampled stacks, code without CFI in anonymous executable memory and a thread scribbling over
 * its own frames neither crash nor hang the process. */
#include "agent-common.h"

static char pre[4200], envbuf[4200];
#define CHECK_EXIT0(st, limit, out)                                                                \
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: %s",                                      \
           (st) == -1 ? "hung: killed after " #limit " s" : "did not exit 0", out)

static const char *map_path(const cm_dict_t *d, uint32_t loc) {
    uint32_t m = d->location_mapping[loc];
    if (!m || m >= d->n_mappings) /* index 0: none */
        return "";
    return d->strings[d->mappings[m].filename].ptr;
}

static int agent_frames(const cm_dict_t *d, uint32_t st) {
    int n = 0;
    for (uint32_t k = d->stack_off[st]; k < d->stack_off[st + 1]; k++)
        if (strstr(map_path(d, d->stack_frames[k]), "libfleetprof"))
            n++;
    return n;
}

static const char *edges[][2] = {
    {"main", "run_graph"},         {"run_graph", "use_longjmp"}, {"use_longjmp", "jumper"},
    {"use_longjmp", "leaf_work"},  {"jumper", "leaf_work"},      {"worker", "rec"},
    {"rec", "rec"},                {"rec", "leaf_work"},         {"worker", "leaf_work"},
    {"worker", "tail_target"},     {"tail_target", "leaf_work"}, {"worker", "via_ptr"},
    {"via_ptr", "leaf_work"},      {"worker", "tail_caller"},    {"tail_caller", "tail_target"},
};
static const char *own[] = {"main",        "run_graph", "use_longjmp", "jumper",
                            "leaf_work",   "worker",    "rec",         "via_ptr",
                            "tail_target", "tail_caller"};

static int is_own(const char *f) {
    for (size_t i = 0; i < sizeof own / sizeof *own; i++)
        if (!strcmp(f, own[i]))
            return 1;
    return 0;
}

/* cfi_work graph SECS; delay_ms: FLEETPROF_TEST_CFI_DELAY_MS (the bg thread builds its first
 * tables that late: every sample before then is unwound later from its stack copy). Every
 * chunk counts, the first included. */
static void graph(double secs, int delay_ms) {
    char *dir = mkout(), prog[4096], out[4096], delay[64], secs_s[32];
    prog_path("cfi_work", prog, sizeof prog);
    snprintf(delay, sizeof delay, "FLEETPROF_TEST_CFI_DELAY_MS=%d", delay_ms);
    snprintf(secs_s, sizeof secs_s, "%g", secs);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_CPU_RATE=400",
                         "FLEETPROF_CPU_HZ=400", "FLEETPROF_INTERVAL=1s", delay, NULL};
    const char *argv[] = {prog, "graph", secs_s, NULL};
    int st = run(env, argv, 120, out, sizeof out);
    CHECK_EXIT0(st, 120, out);
    chunks_t *cs = load(dir);
    uint64_t w_all = 0, w_complete = 0, bad_pairs = 0, agent = 0, n = 0, rooted = 0, w_own = 0;
    uint64_t early = 0, w_early = 0, w_early_complete = 0;
    CHECK(cs->n >= 1);
    for (int i = 0; i < cs->n; i++) {
        const cm_chunk_t *c = cs->c[i];
        const cm_dict_t *d = &c->dict;
        const cm_samples_t *s = &c->samples[CM_EV_CPU];
        /* the tables cannot exist before the process is delay_ms old */
        uint64_t tables_ns = c->header.process_start_unix_ns + (uint64_t)delay_ms * 1000000u;
        for (uint32_t r = 0; r < s->n; r++) {
            uint32_t sk = s->stack[r];
            n++;
            w_all += s->weight[r];
            int trunc = d->stack_flags &&
                        (d->stack_flags[sk] & (CM_STF_TRUNCATED | CM_STF_INCOMPLETE));
            if (!trunc)
                w_complete += s->weight[r];
            if (s->time_ns[r] < tables_ns) {
                early++;
                w_early += s->weight[r];
                w_early_complete += trunc ? 0 : s->weight[r];
            }
            if (trunc && getenv("CFI_SHOW")) {
                for (uint32_t k = d->stack_off[sk]; k < d->stack_off[sk + 1]; k++)
                    printf("%s%s[%s+%llx]", k > d->stack_off[sk] ? ";" : "  incomplete: ",
                           loc_fn(d, d->stack_frames[k]), map_path(d, d->stack_frames[k]),
                           (unsigned long long)d->location_address[d->stack_frames[k]]);
                printf("\n");
            }
            agent += agent_frames(d, sk) > 0;
            int has_own = 0;
            for (uint32_t k = d->stack_off[sk]; k + 1 < d->stack_off[sk + 1]; k++) {
                const char *a = loc_fn(d, d->stack_frames[k]), *b = loc_fn(d, d->stack_frames[k + 1]);
                if (!is_own(a) || !is_own(b))
                    continue;
                int ok = 0;
                for (size_t e = 0; e < sizeof edges / sizeof *edges; e++)
                    ok |= !strcmp(edges[e][0], a) && !strcmp(edges[e][1], b);
                if (!ok && bad_pairs++ < 5)
                    printf("  impossible pair %s -> %s\n", a, b);
            }
            for (uint32_t k = d->stack_off[sk]; k < d->stack_off[sk + 1]; k++)
                has_own |= is_own(loc_fn(d, d->stack_frames[k]));
            if (has_own) {
                w_own += s->weight[r];
                if (stack_has(d, sk, "main") || stack_has(d, sk, "worker"))
                    rooted += s->weight[r];
            }
        }
    }
    printf("  %llu CPU samples: %.2f%% of weight on complete stacks, %.2f%% of the program's "
           "weight reaches main/worker, %llu impossible pairs, %llu with agent frames\n",
           (unsigned long long)n, 100.0 * (double)w_complete / (double)(w_all ? w_all : 1),
           100.0 * (double)rooted / (double)(w_own ? w_own : 1), (unsigned long long)bad_pairs,
           (unsigned long long)agent);
    printf("  %llu samples before the tables (%d ms): %.2f%% of their weight on complete "
           "stacks\n", (unsigned long long)early, delay_ms,
           100.0 * (double)w_early_complete / (double)(w_early ? w_early : 1));
    if (delay_ms) {
        CHECK(early >= 20);
        CHECK((double)w_early_complete >= 0.99 * (double)w_early);
    }
    CHECK(n > 100);
    CHECK_EQ(bad_pairs, 0);
    CHECK_EQ(agent, 0);
    CHECK((double)w_complete >= 0.99 * (double)w_all);
    CHECK((double)rooted >= 0.99 * (double)w_own);
    /* every thread function is seen with its whole chain */
    CHECK(total(cs, CM_EV_CPU, "tail_target", 0).samples > 20);
    CHECK(total(cs, CM_EV_CPU, "rec", 0).samples > 20);
    CHECK(total(cs, CM_EV_CPU, "jumper", 0).samples > 0);
    free_chunks(cs);
    rmrf(dir);
}

static void test_graph(void) { graph(3, 0); }

/* A slow start (issue 14): the bg thread's first tables come 1 s late (a loaded machine,
 * a sanitizer), and the program burns CPU on 4 threads from its first instruction: the samples
 * taken meanwhile still have complete stacks (defer.c), none leaf-only. */
static void test_early(void) { graph(2, 1000); }

/* 300 dlopen/dlclose cycles, each spinning 4 ms in the library at 1000 samples/s. */
static void test_dlclose(void) {
    char *dir = mkout(), prog[4096], lib[4096], out[4096];
    prog_path("cfi_work", prog, sizeof prog);
    snprintf(lib, sizeof lib, "%s/tests/libcfi_lib.so", bdir());
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_CPU_RATE=1000",
                         "FLEETPROF_CPU_HZ=1000", "FLEETPROF_WALL_HZ=100", NULL};
    const char *argv[] = {prog, "dlclose", "300", lib, NULL};
    int st = run(env, argv, 120, out, sizeof out);
    CHECK_EXIT0(st, 120, out);
    CHECKF(strstr(out, "dlclose_cycles=300") != NULL, "%s", out);
    chunks_t *cs = load(dir);
    /* (the library is gone when the chunk is symbolised: its frames have no names) */
    tot_t all = total(cs, CM_EV_CPU, NULL, 0), m = total(cs, CM_EV_CPU, "run_dlclose", 0);
    printf("  %llu CPU samples, %llu through run_dlclose\n", (unsigned long long)all.samples,
           (unsigned long long)m.samples);
    CHECK(all.samples > 100);
    CHECK(m.samples > all.samples / 2);
    free_chunks(cs);
    rmrf(dir);
}

/* Samples landing inside dlopen/dlclose and inside libgcc's unwinder (backtrace(), what a C++
 * throw runs: both take the loader lock) on 4 threads: no deadlock (time limit), no crash. */
static void test_dlunwind(void) {
    char *dir = mkout(), prog[4096], lib[4096], out[4096];
    prog_path("cfi_work", prog, sizeof prog);
    snprintf(lib, sizeof lib, "%s/tests/libcfi_lib.so", bdir());
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_CPU_RATE=1000",
                         "FLEETPROF_CPU_HZ=1000", "FLEETPROF_WALL_HZ=100", NULL};
    const char *argv[] = {prog, "dlunwind", "3", lib, NULL};
    int st = run(env, argv, 120, out, sizeof out);
    CHECK_EXIT0(st, 120, out);
    printf("  %s", out);
    fflush(stdout);
    CHECK(out_u64(out, "cycles=") > 10);
    CHECK(out_u64(out, "traces=") > 10);
    chunks_t *cs = load(dir);
    uint64_t in_trace = 0; /* GCC names it deep_trace.constprop.0 */
    for (int i = 0; i < cs->n; i++) {
        const cm_dict_t *d = &cs->c[i]->dict;
        const cm_samples_t *s = &cs->c[i]->samples[CM_EV_CPU];
        for (uint32_t r = 0; r < s->n; r++)
            for (uint32_t k = d->stack_off[s->stack[r]]; k < d->stack_off[s->stack[r] + 1]; k++)
                if (!strncmp(loc_fn(d, d->stack_frames[k]), "deep_trace", 10)) {
                    in_trace++;
                    break;
                }
    }
    CHECK(in_trace > 5);
    free_chunks(cs);
    rmrf(dir);
}

static void test_jit(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("cfi_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_CPU_RATE=400",
                         "FLEETPROF_CPU_HZ=400", NULL};
    const char *argv[] = {prog, "jit", "1", NULL};
    int st = run(env, argv, 120, out, sizeof out);
    CHECK_EXIT0(st, 120, out);
    chunks_t *cs = load(dir);
    /* the anonymous code has no CFI: a frame-pointer step reaches its caller, CFI goes on */
    tot_t all = total(cs, CM_EV_CPU, NULL, 0), jc = total(cs, CM_EV_CPU, "jit_caller", 0);
    tot_t m = total(cs, CM_EV_CPU, "main", 0);
    printf("  %llu samples, %llu through jit_caller, %llu reach main\n",
           (unsigned long long)all.samples, (unsigned long long)jc.samples,
           (unsigned long long)m.samples);
    CHECK(all.samples > 20);
    CHECK(jc.samples >= all.samples * 9 / 10);
    CHECK(m.samples >= all.samples * 9 / 10);
    free_chunks(cs);
    rmrf(dir);
}

static void test_scribble(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("cfi_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_CPU_RATE=1000",
                         "FLEETPROF_CPU_HZ=1000", NULL};
    const char *argv[] = {prog, "scribble", "1", NULL};
    int st = run(env, argv, 120, out, sizeof out);
    CHECK_EXIT0(st, 120, out);
    CHECKF(strstr(out, "scribble done") != NULL, "%s", out);
    chunks_t *cs = load(dir);
    tot_t s = total(cs, CM_EV_CPU, "scribble_once", 0);
    CHECK(s.samples > 20);
    free_chunks(cs);
    rmrf(dir);
}

static const tr_test_t tests[] = {
    {"cfi_graph", test_graph},
    {"cfi_early", test_early},
    {"cfi_dlclose", test_dlclose},
    {"cfi_dlunwind", test_dlunwind},
    {"cfi_jit", test_jit},
    {"cfi_scribble", test_scribble},
    {0},
};
TR_MAIN(tests)
