/* JavaScript frames from perf maps (agent/src/lang/perfmap.c, remap.c) on Node.js 20:
 *   cpuprof_compare  tests/node/mixed.js (eight CPU-bound JavaScript functions and the
 *                    module's loop) under the agent with `node --perf-basic-prof` and
 *                    `--cpu-prof` at once (one execution sampled by both): JavaScript
 *                    functions named, with the script and first line of each (>= 99 %), >= 90 %
 *                    of samples with a JavaScript frame; each of the top-10 functions' self
 *                    shares within 3 points of the .cpuprofile's (tests/node/cpuprof-shares.js:
 *                    nodes, samples, timeDeltas), over both top-10s. Our self share of a
 *                    function: the main thread's samples whose innermost JavaScript frame is
 *                    it, over all the main thread's samples (V8 builtins and runtime calls
 *                    count for the JavaScript function that made them, as in the .cpuprofile).
 *   store            (tests/ui/kinds-browser-test.sh, not run alone) a short run of the same
 *                    workload under the agent, its chunks loaded into a SQLite store as the
 *                    aggregator does; prints "# store kept: DIR" (the caller removes it).
 * Preloads the agent into node: plain builds only (label nosan). node: deploy/install-deps.sh.
 */
#include "agent-common.h"
#include "agent-prof.h"
#include "aggtest.h"

#define NODE "/usr/bin/node"
#define ROUNDS "250" /* ~6 s of CPU */

static char envbuf[4200], pre[4200];

static const char *src_path(const char *rel, char *buf, size_t size) {
    const char *s = getenv("FLEETPROF_SRC");
    snprintf(buf, size, "%s/%s", s ? s : "..", rel);
    return buf;
}

static const char *fn_sys(const cm_dict_t *d, uint32_t loc) {
    uint32_t f = d->location_function[loc];
    return f && d->function_system_name ? d->strings[d->function_system_name[f]].ptr : "";
}

static const char *fn_file(const cm_dict_t *d, uint32_t loc) {
    uint32_t f = d->location_function[loc];
    return f && d->function_filename ? d->strings[d->function_filename[f]].ptr : "";
}

/* Key of a function: "name file:line", as both profiles spell it. */
static void fn_key(char *out, size_t size, const char *name, const char *file, unsigned line) {
    snprintf(out, size, "%s %s:%u", name, file, line);
}

/* The .cpuprofile's self shares (tests/node/cpuprof-shares.js prints them). */
static void read_cpuprof(const char *json, prof_t *p) {
    char script[4096], key[600];
    static char out[1 << 16];
    src_path("tests/node/cpuprof-shares.js", script, sizeof script);
    const char *argv[] = {NODE, script, json, NULL};
    int st = run(NULL, argv, 60, out, sizeof out);
    CHECKF(st == 0, "cpuprof-shares.js failed (%d): %s", st, out);
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char *name = strchr(line, '\t'), *file = name ? strchr(name + 1, '\t') : NULL;
        char *ln = file ? strchr(file + 1, '\t') : NULL;
        CHECKF(ln != NULL, "cpuprof-shares.js: bad line %s", line);
        *name++ = *file++ = *ln++ = '\0';
        fn_key(key, sizeof key, name, file, (unsigned)strtoul(ln, NULL, 10));
        prof_put(p, key, strtod(line, NULL));
    }
    CHECKF(p->n > 0 && p->total > 99.0, "cpuprof-shares.js printed %d functions", p->n);
}

typedef struct {
    uint64_t samples, js, named_file;
} js_count_t;

/* Our self shares: the main thread's wall samples taken while it ran (CM_SF_ON_CPU: 1 kHz,
 * where CPU samples come at the kernel's 250 Hz at most) by innermost JavaScript frame; a
 * sample in V8's collector (Heap::CollectGarbage) is "(garbage collector)" as in the
 * .cpuprofile, one with no JavaScript frame "(no JavaScript frame)". */
static void read_agent(const chunks_t *cs, prof_t *p, js_count_t *n) {
    char key[600];
    for (int c = 0; c < cs->n; c++) {
        const cm_samples_t *s = &cs->c[c]->samples[CM_EV_WALL];
        const cm_dict_t *d = &cs->c[c]->dict;
        for (uint32_t i = 0; i < s->n; i++) {
            uint32_t th = CM_COL(s, thread, i);
            if (th >= d->n_threads || d->thread_tid[th] != cs->c[c]->header.pid)
                continue;
            if (!(CM_COL(s, flags, i) & CM_SF_ON_CPU))
                continue;
            uint32_t st = s->stack[i], a = d->stack_off[st], b = d->stack_off[st + 1];
            int32_t leaf = -1;
            for (uint32_t k = a; k < b; k++)
                if (!strncmp(fn_sys(d, d->stack_frames[k]), "js:", 3))
                    leaf = (int32_t)k;
            n->samples++;
            for (uint32_t k = a; k < b && leaf >= 0; k++)
                if (strstr(loc_fn(d, d->stack_frames[k]), "Heap::CollectGarbage"))
                    leaf = -2;
            if (leaf == -2) {
                prof_put(p, "(garbage collector) :0", (double)s->weight[i]);
                continue;
            }
            if (leaf < 0) {
                prof_put(p, "(no JavaScript frame)", (double)s->weight[i]);
                continue;
            }
            uint32_t lf = d->stack_frames[leaf];
            n->js++;
            n->named_file += fn_file(d, lf)[0] == '/';
            fn_key(key, sizeof key, loc_fn(d, lf), fn_file(d, lf),
                   d->location_line ? d->location_line[lf] : 0);
            prof_put(p, key, (double)s->weight[i]);
        }
    }
}

static void cpuprof_compare(void) {
    CHECKF(access(NODE, X_OK) == 0, "no %s: run deploy/install-deps.sh", NODE);
    char script[4096], out[8192], cpuprof[4200];
    src_path("tests/node/mixed.js", script, sizeof script);
    char *dir = mkout(), *pdir = mkout();
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_WALL_HZ=1000",
                         "FLEETPROF_CONTROLLER=0", "FLEETPROF_CPU_BUDGET=20",
                         "FLEETPROF_LOG_LEVEL=info", NULL};
    /* TurboFan inlines hashStr into hashMany: the .cpuprofile still tells them apart (V8's
     * profiler reads the code's inlining positions), a perf map names the code's function only
     * (bench/RESULTS.md has the default-flags figures: FP_NODE_INLINING=1). Both runs leave
     * inlining out. */
    const char *xf = getenv("FP_NODE_INLINING") ? "--turbo-inlining" : "--no-turbo-inlining";
    /* One process profiled by both: the same execution sampled twice, so the shares differ by
     * sampling noise alone (two runs differ by up to 3 points between themselves: JIT tiering
     * and GC land differently). V8's sampler interrupts the thread with its own signal, on the
     * thread's alternate stack; our samples landing in its handler walk back through its
     * signal frame (unwind.c). */
    const char *argv[] = {NODE, "--perf-basic-prof", "--interpreted-frames-native-stack", xf,
                          "--cpu-prof", "--cpu-prof-dir", pdir, "--cpu-prof-name",
                          "p.cpuprofile", script, ROUNDS, NULL};
    int st = run(env, argv, 600, out, sizeof out);
    CHECKF(st == 0 && strstr(out, "done "), "node under the agent failed (%d): %s", st, out);
    snprintf(cpuprof, sizeof cpuprof, "%s/p.cpuprofile", pdir);
    prof_t *ours = calloc(1, sizeof *ours), *theirs = calloc(1, sizeof *theirs);
    read_cpuprof(cpuprof, theirs);
    chunks_t *cs = load(dir);
    js_count_t n = {0, 0, 0};
    read_agent(cs, ours, &n);
    prof_sort(ours);
    prof_sort(theirs);
    printf("# agent: %" PRIu64 " main-thread on-CPU wall samples, %" PRIu64 " with a JavaScript "
           "frame (%" PRIu64 " with its script); cpu-prof: %d functions\n", n.samples, n.js,
           n.named_file, theirs->n);
    double worst = prof_worst(ours, theirs, 10, "agent", "cpu-prof");
    printf("# largest difference over both top-10s: %.2f points\n", worst);
    CHECKF(n.samples >= 2000, "too few samples: %" PRIu64, n.samples);
    CHECKF(n.js * 10 >= n.samples * 9, "%" PRIu64 " of %" PRIu64 " samples with a JS frame", n.js,
           n.samples);
    CHECKF(n.named_file * 100 >= n.js * 99, "%" PRIu64 " of %" PRIu64 " JS frames with a script",
           n.named_file, n.js);
    CHECK(worst <= 3.0);
    free(ours);
    free(theirs);
    free_chunks(cs);
    rmrf(dir);
    rmrf(pdir);
    free(dir);
    free(pdir);
}

static void store(void) {
    char script[4096], out[8192], err[512];
    src_path("tests/node/mixed.js", script, sizeof script);
    char *dir = mkout(), *st = mkout();
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_SERVICE=node-mixed",
                         "FLEETPROF_CPU_HZ=1000", "FLEETPROF_CONTROLLER=0", NULL};
    const char *argv[] = {NODE, "--perf-basic-prof", "--interpreted-frames-native-stack",
                          script, "60", NULL};
    int rc = run(env, argv, 300, out, sizeof out);
    CHECKF(rc == 0 && strstr(out, "done "), "node under the agent failed (%d): %s", rc, out);
    CHECKF(at_ingest_dir(dir, st, err, sizeof err) == 0, "%s", err);
    printf("# store kept: %s\n", st);
    rmrf(dir);
    free(dir);
    free(st);
}

int main(int argc, char **argv) {
    static const rt_case_t cases[] = {{"cpuprof_compare", cpuprof_compare, 0},
                                        {"store", store, 1}};
    return rt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
}
