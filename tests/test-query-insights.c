/* The insight rules (aggregator/query/insights/insights.h) on hand-made profiles: each rule fires on
 * its pattern with the planted site first, stays silent just under its threshold and on a
 * balanced profile; the leak rule tells a steady leak from a cache that plateaus; the JSON and
 * the include patterns of the evidence. Real programs under the agent: test-insights.c. */
#include "query.h"
#include "support/runner.h"

#include "cm/error.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Adds "root;...;leaf" with weight w and count c events (replicate "all" unless rep). */
static void add(agg_profile_t *p, const char *folded, uint64_t w, uint64_t c, const char *rep,
                double work) {
    uint32_t fr[64], n = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", folded);
    for (char *save, *t = strtok_r(buf, ";", &save); t; t = strtok_r(NULL, ";", &save)) {
        int64_t f = agg_profile_frame(p, t, "app", NULL, 0);
        CHECK(f >= 0);
        fr[n++] = (uint32_t)f;
    }
    int64_t st = agg_profile_stack(p, fr, n);
    int64_t r = agg_profile_replicate(p, rep ? rep : "all", work);
    CHECK(st >= 0 && r >= 0);
    CHECK(agg_profile_add(p, (uint32_t)st, w, c * CM_COUNT_ONE, (uint32_t)r, 0) == 0);
}

/* A balanced CPU profile: 1,000 samples of 10 ms over several functions, small libc shares. */
static agg_profile_t *balanced_cpu(void) {
    agg_profile_t *p = agg_profile_new(CM_EV_CPU);
    add(p, "main;handle;parse", 300, 300, NULL, 10);
    add(p, "main;handle;compute", 400, 400, NULL, 0);
    add(p, "main;handle;parse;malloc;_int_malloc", 50, 50, NULL, 0);
    add(p, "main;handle;render;memcpy", 60, 60, NULL, 0);
    add(p, "main;handle;render", 190, 190, NULL, 0);
    return p;
}

static const agg_insight_t *find(const agg_insights_t *r, const char *rule) {
    for (size_t i = 0; i < r->n; i++)
        if (!strcmp(r->v[i].rule, rule))
            return &r->v[i];
    return NULL;
}

static void print_all(const agg_insights_t *r) {
    for (size_t i = 0; i < r->n; i++)
        printf("# %s %.4f >= %.4f: %s (first: %s)\n", r->v[i].rule, r->v[i].score,
               r->v[i].threshold, r->v[i].summary, r->v[i].n_ev ? r->v[i].ev[0].name : "-");
}

/* Runs the rules and checks that exactly `rule` fired (NULL: none), with `site` first. */
static void expect(const agg_insight_input_t *in, const char *rule, const char *site) {
    agg_insights_t r;
    CHECK(agg_insights_run(in, NULL, &r) == 0);
    print_all(&r);
    if (!rule) {
        CHECKF(r.n == 0, "%zu insights on a null input, first %s", r.n, r.n ? r.v[0].rule : "");
    } else {
        CHECKF(r.n == 1, "%zu insights, want only %s", r.n, rule);
        const agg_insight_t *i = find(&r, rule);
        CHECKF(i != NULL, "%s did not fire", rule);
        CHECKF(i->n_ev > 0 && !strcmp(i->ev[0].name, site), "%s: first evidence %s, want %s",
               rule, i->n_ev ? i->ev[0].name : "-", site);
        CHECK(i->score >= i->threshold && i->explain[0] && i->fix[0] && i->summary[0]);
    }
    agg_insights_free(&r);
}

static void test_null_balanced(void) {
    agg_profile_t *cpu = balanced_cpu();
    agg_insight_input_t in = {.cpu = cpu, .process_seconds = 10, .process_cpu_ns = 10000000000,
                              .agent_cpu_ns = 50000000, .samples = 1000, .dropped = 2};
    expect(&in, NULL, NULL);
    agg_insights_t r;
    CHECK(agg_insights_run(&in, NULL, &r) == 0);
    CHECK(r.evaluated == 5); /* four CPU rules and the agent's */
    agg_insights_free(&r);
    agg_profile_free(cpu);
}

static void test_alloc_churn(void) {
    agg_profile_t *cpu = balanced_cpu();
    add(cpu, "main;handle;build_strings;operator new(unsigned long);malloc;_int_malloc", 250, 250,
        NULL, 0);
    add(cpu, "main;handle;build_strings;free;_int_free", 100, 100, NULL, 0);
    agg_insight_input_t in = {.cpu = cpu, .process_seconds = 10};
    expect(&in, "alloc_churn", "build_strings");
    agg_profile_free(cpu);
}

static void test_cpu_rules(void) {
    static const struct {
        const char *stack, *rule, *site;
    } c[] = {
        {"main;worker;poll_flag;sched_yield", "busy_wait", "poll_flag"},
        {"main;worker;parse_int;__cxa_throw;_Unwind_RaiseException;_Unwind_Find_FDE",
         "exception_heavy", "parse_int"},
        {"main;worker;copy_frames;__memmove_avx_unaligned_erms", "memory_copy", "copy_frames"},
    };
    for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
        agg_profile_t *cpu = balanced_cpu();
        add(cpu, c[i].stack, 300, 300, NULL, 0);
        agg_insight_input_t in = {.cpu = cpu, .process_seconds = 10};
        expect(&in, c[i].rule, c[i].site);
        agg_profile_free(cpu);
        /* under the threshold: a share of 3 % (memory_copy: 60 + 30 of 1,030 = 8.7 %) */
        cpu = balanced_cpu();
        add(cpu, c[i].stack, 30, 30, NULL, 0);
        in.cpu = cpu;
        expect(&in, NULL, NULL);
        agg_profile_free(cpu);
    }
}

static void test_lock(void) {
    agg_profile_t *wall = agg_profile_new(CM_EV_WALL), *lock = agg_profile_new(CM_EV_LOCK);
    add(wall, "main;worker", 20000000000ull, 200, NULL, 10); /* 2 threads x 10 s */
    add(lock, "main;worker;log_line;pthread_mutex_lock;__lll_lock_wait", 6000000000ull, 3000,
        NULL, 10);
    add(lock, "main;worker;update_stats;pthread_mutex_lock", 300000000ull, 100, NULL, 0);
    agg_insight_input_t in = {.wall = wall, .lock = lock, .process_seconds = 10};
    expect(&in, "lock_contention", "log_line");
    agg_insights_t r;
    CHECK(agg_insights_run(&in, NULL, &r) == 0);
    CHECK(r.n == 1 && r.v[0].n_ev == 2 && fabs(r.v[0].score - 0.30) < 1e-9);
    CHECK(fabs(r.v[0].ev[0].share - 6.0 / 6.3) < 1e-9 && fabs(r.v[0].ev[0].value - 6.0) < 1e-9);
    agg_insights_free(&r);
    agg_profile_free(lock);
    /* 5 % of wall time: silent */
    lock = agg_profile_new(CM_EV_LOCK);
    add(lock, "main;worker;log_line;pthread_mutex_lock", 1000000000ull, 500, NULL, 10);
    in.lock = lock;
    expect(&in, NULL, NULL);
    agg_profile_free(lock);
    agg_profile_free(wall);
}

static void test_small_io(void) {
    agg_profile_t *io = agg_profile_new(CM_EV_IO), *bytes = agg_profile_new(CM_EV_IO);
    /* 10 s: 50,000 writes of 16 bytes at log_record, 200 reads of 64 KiB at load_file */
    add(io, "main;log_record;write", 50000ull * 80000, 50000, NULL, 10);
    add(bytes, "main;log_record;write", 50000ull * 16, 50000, NULL, 10);
    add(io, "main;load_file;read", 200ull * 100000, 200, NULL, 0);
    add(bytes, "main;load_file;read", 200ull * 65536, 200, NULL, 0);
    agg_insight_target_t tg[] = {{"/var/log/app.log", 50000ull * 80000, 50000000},
                                 {"/data/big.bin", 200ull * 100000, 200000}};
    agg_insight_input_t in = {.io = io, .io_bytes = bytes, .process_seconds = 10,
                              .io_targets = tg, .n_io_targets = 2};
    expect(&in, "small_io", "log_record");
    agg_insights_t r;
    CHECK(agg_insights_run(&in, NULL, &r) == 0);
    const agg_insight_t *si = find(&r, "small_io");
    CHECK(si && si->n_ev == 3 && !strcmp(si->ev[1].name, "target /var/log/app.log"));
    CHECK(!strcmp(si->ev[1].io_target, "/var/log/app.log") && !si->ev[1].include);
    CHECK(fabs(si->ev[1].value - 5000) < 1e-9 && fabs(si->ev[1].share - 50000.0 / 50200) < 1e-9);
    agg_insights_free(&r);
    in.n_io_targets = 0;
    /* the same calls with 4 KiB each: silent */
    agg_profile_t *big = agg_profile_new(CM_EV_IO);
    add(big, "main;log_record;write", 50000ull * 4096, 50000, NULL, 10);
    in.io_bytes = big;
    expect(&in, NULL, NULL);
    agg_profile_free(io);
    agg_profile_free(bytes);
    agg_profile_free(big);
}

static void test_agent(void) {
    agg_insight_input_t in = {.process_seconds = 10, .process_cpu_ns = 10000000000,
                              .agent_cpu_ns = 400000000, .samples = 1000};
    expect(&in, "agent_overhead", "agent CPU share");
    in.agent_cpu_ns = 100000000;
    in.dropped = 50;
    agg_insights_t r;
    CHECK(agg_insights_run(&in, NULL, &r) == 0);
    CHECK(r.n == 1 && fabs(r.v[0].score - 50.0 / 1050) < 1e-9 && r.v[0].threshold == 0.01);
    CHECK(!strcmp(r.v[0].ev[0].name, "samples dropped")); /* no reasons given */
    agg_insights_free(&r);
    /* by reason: the largest first, those under 1 % of the drops left out, spans past their
     * bound and the flood subsampling not losses at all */
    in.dropped = 0;
    agg_insight_add_drop(&in, CM_DROP_RING_FULL, 20);
    agg_insight_add_drop(&in, CM_DROP_THREAD_LIMIT, 100);
    agg_insight_add_drop(&in, CM_DROP_OVER_BUDGET, 1);
    agg_insight_add_drop(&in, CM_DROP_SPAN_LIMIT, 100000);
    agg_insight_add_drop(&in, CM_DROP_SUBSAMPLED, 100000);
    CHECK(in.dropped == 121);
    CHECK(agg_insights_run(&in, NULL, &r) == 0);
    CHECKF(r.n == 1 && r.v[0].n_ev == 3, "%zu insights", r.n);
    CHECK(!strcmp(r.v[0].ev[0].name, "samples dropped: thread_limit") &&
          fabs(r.v[0].ev[0].share - 100.0 / 121) < 1e-9 && r.v[0].ev[0].value == 100);
    CHECK(!strcmp(r.v[0].ev[1].name, "samples dropped: ring_full"));
    CHECK(!strcmp(r.v[0].ev[2].name, "agent CPU share"));
    agg_insights_free(&r);
    /* the CPU share further over its threshold (40 % of 3 %) than the drops (10.8 % of 1 %):
     * it comes first, then the drops */
    in.agent_cpu_ns = 4000000000;
    CHECK(agg_insights_run(&in, NULL, &r) == 0);
    CHECK(r.n == 1 && !strcmp(r.v[0].ev[0].name, "agent CPU share") &&
          !strcmp(r.v[0].ev[1].name, "samples dropped: thread_limit"));
    agg_insights_free(&r);
    memset(&in, 0, sizeof in);
    in.process_seconds = 10, in.process_cpu_ns = 10000000000, in.samples = 1000;
    in.agent_cpu_ns = 100000000;
    agg_insight_add_drop(&in, CM_DROP_SPAN_LIMIT, 200000);
    expect(&in, NULL, NULL);
    in.dropped = 5;
    expect(&in, NULL, NULL);
}

/* Live heap over 13 intervals of 10 s (one process): `stable_a`/`stable_b` flat with noise,
 * `cache_fill` growing 2 MiB/s for 40 s then flat, and (leak) `leaky_site` +1 MiB/s. */
static agg_profile_t *heap(int leak, int intervals) {
    agg_profile_t *p = agg_profile_new(CM_EV_INUSE);
    unsigned seed = 7;
    for (int i = 0; i < intervals; i++) {
        char key[32];
        snprintf(key, sizeof key, "%lld", 1700000000000ll + i * 10000ll);
        double noise = 1 + 0.05 * ((double)(rand_r(&seed) % 2001) / 1000 - 1);
        add(p, "main;stable_a;malloc", (uint64_t)(8e6 * noise), 10, key, 1);
        add(p, "main;stable_b;operator new(unsigned long);malloc", (uint64_t)(3e6 / noise), 10,
            key, 0);
        double cache = (i < 4 ? i : 4) * 10 * 2097152.0;
        add(p, "main;cache_fill;calloc", (uint64_t)(cache * noise + 1), 10, key, 0);
        if (leak)
            add(p, "main;request;leaky_site;malloc", (uint64_t)(i * 10 * 1048576.0 * noise + 1),
                10, key, 0);
    }
    return p;
}

static void test_leak(void) {
    agg_profile_t *p = heap(1, 13);
    agg_insight_input_t in = {.inuse = p, .process_seconds = 120};
    expect(&in, "leak_candidate", "leaky_site");
    agg_insights_t r;
    CHECK(agg_insights_run(&in, NULL, &r) == 0);
    CHECKF(fabs(r.v[0].score - 1048576) < 0.1 * 1048576, "slope %.0f", r.v[0].score);
    CHECK(r.v[0].n_ev == 1); /* not the cache, not the stable sites */
    agg_insights_free(&r);
    agg_profile_free(p);
    /* only the cache and the stable sites: silent */
    p = heap(0, 13);
    in.inuse = p;
    expect(&in, NULL, NULL);
    agg_profile_free(p);
    /* too short a window (3 intervals, 20 s): not judged */
    p = heap(1, 3);
    in.inuse = p;
    CHECK(agg_insights_run(&in, NULL, &r) == 0);
    CHECK(r.n == 0 && r.evaluated == 0);
    agg_insights_free(&r);
    agg_profile_free(p);
}

static void test_json_and_include(void) {
    agg_profile_t *cpu = balanced_cpu();
    add(cpu, "main;std::vector<int>::push_back(int const&);memcpy", 400, 400, NULL, 0);
    agg_insight_input_t in = {.cpu = cpu, .process_seconds = 10};
    agg_insights_t r;
    CHECK(agg_insights_run(&in, NULL, &r) == 0);
    CHECK(r.n == 1);
    json_t *j = agg_insights_json(&r);
    CHECK(j != NULL);
    json_t *e = json_array_get(json_object_get(json_array_get(json_object_get(j, "insights"), 0),
                                               "evidence"),
                               0);
    const char *inc = json_string_value(json_object_get(e, "include"));
    printf("# include %s\n", inc);
    CHECK(inc && !strcmp(inc, "(^|!)std::vector<int>::push_back\\(int const&\\)$"));
    /* the pattern compiles and selects the frame through the filter */
    agg_filter_t f = {0};
    const char *incs[] = {inc};
    f.include = incs;
    f.n_include = 1;
    agg_profile_t *sel = NULL;
    char err[256];
    CHECK(agg_profile_filter(cpu, &f, &sel, err, sizeof err) == 0);
    uint64_t w, c;
    double work;
    agg_profile_totals(sel, &w, &c, &work);
    CHECK_EQ(w, 400);
    agg_profile_free(sel);
    json_decref(j);
    agg_insights_free(&r);
    agg_profile_free(cpu);
}

/* KPMs: a process's values, a service's from two processes, heap growth, search by value and
 * by rise over the process's median. */
static void test_kpms(void) {
    agg_kpm_sums_t a = {.chunks = 2, .duration_ns = 10000000000, .cpu_ns = 5000000000,
                        .cpu_sampled_ns = 1000, .cpu_alloc_ns = 250, .alloc_bytes = 1 << 30,
                        .alloc_count = 2000000, .inuse_bytes = 200 << 20, .io_bytes = 4096000,
                        .io_count = 1000000, .threads = 8, .agent_cpu_ns = 50000000};
    agg_kpm_sums_t b = a;
    b.cpu_alloc_ns = 750;
    double v[AGG_KPM_N];
    agg_kpm_values(&a, v);
    CHECK(fabs(v[AGG_KPM_CPU_CORES] - 0.5) < 1e-12);
    CHECK(fabs(v[AGG_KPM_ALLOC_RATE] - 107374182.4) < 1e-3);
    CHECK(fabs(v[AGG_KPM_ALLOC_OPS] - 200) < 1e-9);
    CHECK(fabs(v[AGG_KPM_HEAP_LIVE] - (100 << 20)) < 1e-6);
    CHECK(fabs(v[AGG_KPM_IO_BYTES_PER_CALL] - 4096) < 1e-9);
    CHECK(fabs(v[AGG_KPM_THREADS] - 4) < 1e-12 && fabs(v[AGG_KPM_AGENT_SHARE] - 0.01) < 1e-12);
    CHECK(isnan(v[AGG_KPM_HEAP_GROWTH]) && isnan(v[AGG_KPM_LOCK_WAIT]) == 0);
    agg_kpm_sums_t two[2] = {a, b};
    agg_kpm_service_values(two, 2, v);
    CHECK(fabs(v[AGG_KPM_CPU_CORES] - 1.0) < 1e-12);           /* rates add up */
    CHECK(fabs(v[AGG_KPM_HEAP_LIVE] - (200 << 20)) < 1e-6);    /* levels add up */
    CHECK(fabs(v[AGG_KPM_CPU_ALLOC_SHARE] - 0.5) < 1e-12);     /* shares of the sums */
    CHECK(agg_kpm_find("alloc_rate") == AGG_KPM_ALLOC_RATE && agg_kpm_find("nope") < 0);
    /* one process, 6 intervals of 10 s; alloc rate 1,1,1,9,1,1 MB/s; a second process at a
     * steady 5 MB/s: by value the spike first, then the steady one; by rise the spike, and the
     * steady process's intervals rose by 0 */
    agg_kpm_point_t pts[12];
    memset(pts, 0, sizeof pts);
    for (int i = 0; i < 12; i++) {
        agg_kpm_point_t *p = &pts[i];
        p->bucket = 1000 + 10 * (i % 6);
        p->width = 10;
        snprintf(p->host, sizeof p->host, "h");
        p->pid = i < 6 ? 1 : 2;
        p->s.chunks = 1;
        p->s.duration_ns = 10000000000;
        p->s.alloc_bytes = (i < 6 ? (i == 3 ? 9 : 1) : 5) * 10000000ll;
        p->s.inuse_bytes = 1000000ll * (i % 6);
        agg_kpm_values(&p->s, p->v);
    }
    agg_kpm_growth(pts, 12);
    CHECK(isnan(pts[0].v[AGG_KPM_HEAP_GROWTH]) && isnan(pts[6].v[AGG_KPM_HEAP_GROWTH]));
    CHECK(fabs(pts[2].v[AGG_KPM_HEAP_GROWTH] - 100000) < 1e-6);
    size_t *idx, n;
    double *base;
    CHECK(agg_kpm_search(pts, 12, AGG_KPM_ALLOC_RATE, 0, 3, &idx, &base, &n) == 0);
    CHECK(n == 3 && idx[0] == 3 && idx[1] == 6);
    free(idx);
    free(base);
    CHECK(agg_kpm_search(pts, 12, AGG_KPM_ALLOC_RATE, 1, 2, &idx, &base, &n) == 0);
    CHECK(n == 2 && idx[0] == 3 && fabs(base[3] - 1e6) < 1e-6);
    CHECK(fabs(pts[idx[1]].v[AGG_KPM_ALLOC_RATE] - base[idx[1]]) < 1e-6);
    free(idx);
    free(base);
    CHECK(agg_kpm_search(pts, 12, AGG_KPM_N, 0, 3, &idx, &base, &n) == CM_EINVAL);
}

/* The function categories the ingest splits CPU samples by. */
static void test_categories(void) {
    CHECK(agg_insight_categories("malloc") == AGG_INSIGHT_CAT_ALLOC);
    CHECK(agg_insight_categories("operator new(unsigned long)") == AGG_INSIGHT_CAT_ALLOC);
    CHECK(agg_insight_categories("__memmove_avx_unaligned_erms") == AGG_INSIGHT_CAT_COPY);
    CHECK(agg_insight_categories("__cxa_throw") == AGG_INSIGHT_CAT_EXCEPT);
    CHECK(agg_insight_categories("__write") == (AGG_INSIGHT_CAT_IO | AGG_INSIGHT_CAT_KERNEL));
    CHECK(agg_insight_categories("epoll_wait") == AGG_INSIGHT_CAT_KERNEL);
    CHECK(agg_insight_categories("sched_yield") ==
          (AGG_INSIGHT_CAT_SPIN | AGG_INSIGHT_CAT_KERNEL));
    CHECK(agg_insight_categories("pthread_mutex_lock") == AGG_INSIGHT_CAT_LOCK);
    CHECK(agg_insight_categories("malloc_helper") == 0 && agg_insight_categories("main") == 0);
}

static const tr_test_t tests[] = {
    {"null_balanced", test_null_balanced},
    {"alloc_churn", test_alloc_churn},
    {"cpu_rules", test_cpu_rules},
    {"lock", test_lock},
    {"small_io", test_small_io},
    {"agent", test_agent},
    {"leak", test_leak},
    {"json_and_include", test_json_and_include},
    {"kpms", test_kpms},
    {"categories", test_categories},
    {0}};
TR_MAIN(tests)
