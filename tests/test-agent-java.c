/* Java frames (agent/src/lang/jvm.c) on Debian's OpenJDK 17, with the flags agent/README.md
 * documents (the agent preloaded and named by -agentpath, -XX:+DebugNonSafepoints):
 *   frames   tests/java/Work.java (main: fib, sieve, strings, sort; a "spinner" thread), 2 s of
 *            CPU each: >= 95 % of the Java threads' CPU weight (every stack with a Java frame,
 *            and every incomplete stack, counted against us) on complete stacks whose root is
 *            Thread.run or a main; Work's methods named with their file and line in every
 *            sample; >= 99 % of main's and the spinner's samples rooted in Work.main and
 *            java.lang.Thread.run (AsyncGetCallTrace may end a walk early without saying so).
 *            Then a run with JAVA_TOOL_OPTIONS alone (no preload) names Java frames too, and
 *            one preloaded without -agentpath has no Java frame (incomplete stacks).
 *   stress   tests/java/Stress.java (32 threads, 1000 rounds: NullPointerExceptions from
 *            implicit null checks, thrown and caught exceptions, class casts, GC pressure, a
 *            lock) gives the checksum of a run without the agent in 20 runs of 20 with it.
 *   compare  the single-threaded Work, 12 s of CPU, twice: in one JVM under the agent and
 *            JFR (jdk.ExecutionSample every 1 ms, `jfr print`), then in one JVM under the
 *            agent and async-profiler 4.1 (event cpu: perf_events' cpu-clock, 1 ms; Maven
 *            Central, tests/java/async-profiler.sh): each side's top-10 Java methods by self
 *            share (the innermost Java frame of samples with a Java frame) within 3 points of
 *            the other's. Same execution, because the JIT makes runs differ (Work.mix 35.1 %
 *            in one run, 38.2 % in the next). A profiler's signal can land in the other's
 *            handler, where no Java frame can be walked: those samples (~7-17 % of ours) have
 *            no Java frame and are left out of the shares; they fall at times set by the
 *            timers, not by the Java code. Not async-profiler's ctimer or itimer: the kernel
 *            fires every CPU-time timer at the same scheduler tick as ours, so nearly all of
 *            one side's samples land in the other's handler (cpu-clock has its own hrtimer);
 *            not all three in one JVM: JFR then differs from both by 3-4 points.
 * Preloads the agent into java: plain builds only (label nosan).
 */
#include "agent-common.h"
#include "agent-prof.h"

#include <ctype.h>
#include <math.h>

#define JDK "/usr/lib/jvm/java-17-openjdk-amd64/bin/"
#define DNS "-XX:+UnlockDiagnosticVMOptions", "-XX:+DebugNonSafepoints"

static char envbuf[4200], pre[4200], agentpath[4200], classes[4096];

#define src_path rt_src

/* tests/java/{Work,Stress}.java compiled once into a temporary directory. */
static void compile(void) {
    if (classes[0])
        return;
    char *dir = mkout(), work[4096], stress[4096], out[8192];
    snprintf(classes, sizeof classes, "%s", dir);
    free(dir);
    const char *argv[] = {JDK "javac", "-d", classes,
                          src_path("tests/java/Work.java", work, sizeof work),
                          src_path("tests/java/Stress.java", stress, sizeof stress), NULL};
    int st = run(NULL, argv, 300, out, sizeof out);
    CHECKF(st == 0, "javac failed (%d): %s", st, out);
    snprintf(agentpath, sizeof agentpath, "-agentpath:%s/agent/libfleetprof.so", bdir());
}

#define fn_file rt_file

static int is_java(const cm_dict_t *d, uint32_t loc) { return rt_kind(d, loc, "java:"); }

/* A Java method's name as all three profilers can write it: dots, no hidden-class address. */
static void norm(const char *in, size_t len, char *out, size_t size) {
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < size; i++) {
        if ((in[i] == '.' || in[i] == '/') && in[i + 1] == '0' && in[i + 2] == 'x') {
            i += 3;
            while (i < len && isxdigit((unsigned char)in[i]))
                i++;
            i--;
            continue;
        }
        out[o++] = in[i] == '/' ? '.' : in[i];
    }
    out[o] = 0;
}

/* ---- profiles: self weight by the innermost Java frame's method ---- */

static void prof_add(prof_t *p, const char *name, size_t len, double w) {
    char key[256];
    norm(name, len, key, sizeof key);
    prof_put(p, key, w);
}

/* ---- frames ---- */

typedef struct {
    double java_w, good_w;   /* Java threads' weight; on complete stacks rooted in a main/run */
    uint64_t spin, spin_ok;  /* leaf Java frame Work.spin; rooted in Thread.run */
    uint64_t main_work, main_ok; /* Work.main's samples; rooted there */
    uint64_t bad_name;       /* a leaf in Work without Work.java or a line */
} frames_t;

static int rooted(const cm_dict_t *d, uint32_t root) {
    const char *fn = loc_fn(d, root);
    size_t n = strlen(fn);
    return is_java(d, root) &&
           (!strcmp(fn, "java.lang.Thread.run") || (n > 5 && !strcmp(fn + n - 5, ".main")));
}

static void frames_scan(const cm_chunk_t *c, frames_t *r) {
    const cm_samples_t *s = &c->samples[CM_EV_CPU];
    const cm_dict_t *d = &c->dict;
    for (uint32_t i = 0; i < s->n; i++) {
        uint32_t st = s->stack[i], a = d->stack_off[st], b = d->stack_off[st + 1];
        uint32_t fl = d->stack_flags ? d->stack_flags[st] : 0;
        int32_t leaf = -1;
        for (uint32_t k = a; k < b; k++)
            if (is_java(d, d->stack_frames[k]))
                leaf = (int32_t)k;
        if (leaf < 0 && !(fl & CM_STF_INCOMPLETE))
            continue; /* a JVM thread's native stack (compiler, GC), or before VMInit */
        r->java_w += (double)s->weight[i];
        if (b > a && !(fl & (CM_STF_INCOMPLETE | CM_STF_TRUNCATED)) &&
            rooted(d, d->stack_frames[a]))
            r->good_w += (double)s->weight[i];
        if (leaf < 0)
            continue;
        uint32_t lf = d->stack_frames[leaf];
        const char *fn = loc_fn(d, lf), *root = loc_fn(d, d->stack_frames[a]);
        if (!strncmp(fn, "Work.", 5) &&
            (strcmp(fn_file(d, lf), "Work.java") || !d->location_line ||
             d->location_line[lf] == 0)) {
            r->bad_name++;
            printf("# Work leaf without file or line: %s (file %s)\n", fn, fn_file(d, lf));
        }
        if (!strcmp(fn, "Work.spin")) {
            r->spin++;
            r->spin_ok += !strcmp(root, "java.lang.Thread.run") &&
                          stack_has(d, st, "Work.lambda$main$0");
        } else if (stack_has(d, st, "Work.main")) {
            r->main_work++;
            r->main_ok += !strcmp(root, "Work.main");
        }
    }
}

/* Every Work leaf named; main's and the spinner's samples rooted where they run. */
static void frames_check(const frames_t *r, uint64_t min) {
    printf("# spin %" PRIu64 " (%" PRIu64 " rooted), main's %" PRIu64 " (%" PRIu64
           " rooted), Work leaves without file or line %" PRIu64 "\n",
           r->spin, r->spin_ok, r->main_work, r->main_ok, r->bad_name);
    CHECKF(r->spin >= min && r->main_work >= min, "too few samples");
    CHECK(r->bad_name == 0);
    CHECK(r->spin_ok * 100 >= r->spin * 99);
    CHECK(r->main_ok * 100 >= r->main_work * 99);
}

/* Runs Work under the agent (env, argv; chunks in dir) and scans its Java threads' stacks. */
static frames_t run_frames(const char *dir, const char *const *env, const char *const *argv,
                           const char *what) {
    char out[8192];
    int st = run(env, argv, 900, out, sizeof out);
    CHECKF(st == 0 && strstr(out, "done true"), "%s failed (%d): %s", what, st, out);
    chunks_t *cs = load(dir);
    frames_t r = {0};
    for (int i = 0; i < cs->n; i++)
        frames_scan(cs->c[i], &r);
    free_chunks(cs);
    return r;
}

/* The control: preloaded without -agentpath, the JVM's JIT frames are bare addresses and its
 * Java threads' stacks incomplete (what the 95 % above is measured against). */
static void frames_without(void) {
    char *dir = mkout();
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_CPU_HZ=1000",
                         "FLEETPROF_CPU_RATE=2000", "FLEETPROF_CONTROLLER=0", NULL};
    const char *argv[] = {JDK "java", "-cp", classes, "Work", "1c", NULL};
    frames_t r = run_frames(dir, env, argv, "Work (preload only)");
    printf("# preload only: %.3f s on incomplete stacks, %.3f s on complete Java stacks\n",
           r.java_w / 1e9, r.good_w / 1e9);
    CHECK(r.java_w >= 0.5e9 && r.good_w == 0 && r.spin == 0);
    rmrf(dir);
    free(dir);
}

static void frames(void) {
    compile();
    char *dir = mkout();
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_CPU_HZ=1000",
                         "FLEETPROF_CPU_RATE=2000", "FLEETPROF_CONTROLLER=0",
                         "FLEETPROF_LOG_LEVEL=info", NULL};
    const char *argv[] = {JDK "java", agentpath, DNS, "-cp", classes, "Work", "2c", NULL};
    frames_t r = run_frames(dir, env, argv, "Work");
    printf("# Java threads' CPU %.3f s, %.2f %% on complete stacks rooted in main/Thread.run\n",
           r.java_w / 1e9, 100 * r.good_w / (r.java_w > 0 ? r.java_w : 1));
    frames_check(&r, 50);
    CHECKF(r.good_w >= 0.95 * r.java_w, "%.2f %% complete", 100 * r.good_w / r.java_w);
    rmrf(dir);
    free(dir);

    /* JAVA_TOOL_OPTIONS alone: the JVM loads the agent, which finds its threads itself */
    dir = mkout();
    char jto[4300];
    snprintf(jto, sizeof jto, "JAVA_TOOL_OPTIONS=%s", agentpath);
    const char *env2[] = {jto, ENV_OUT(dir), "FLEETPROF_CPU_HZ=1000", "FLEETPROF_CPU_RATE=2000",
                          "FLEETPROF_CONTROLLER=0", NULL};
    const char *argv2[] = {JDK "java", "-cp", classes, "Work", "1c", NULL};
    r = run_frames(dir, env2, argv2, "Work (JAVA_TOOL_OPTIONS)");
    printf("# JAVA_TOOL_OPTIONS only:\n");
    frames_check(&r, 10);
    rmrf(dir);
    free(dir);
    frames_without();
}

/* ---- stress ---- */

static void checksum(const char *out, char *sum, size_t size) {
    const char *p = strstr(out, "checksum ");
    CHECKF(p != NULL, "no checksum in: %s", out);
    snprintf(sum, size, "%.*s", (int)strcspn(p, "\n"), p);
}

static void stress(void) {
    compile();
    char out[8192], want[128], got[128];
    const char *argv[] = {JDK "java", agentpath, DNS, "-cp", classes, "Stress", "32", "1000",
                          NULL};
    const char *bare[] = {JDK "java", "-cp", classes, "Stress", "32", "1000", NULL};
    int st = run(NULL, bare, 300, out, sizeof out);
    CHECKF(st == 0, "Stress without the agent failed (%d): %s", st, out);
    checksum(out, want, sizeof want);
    int ok = 0;
    uint64_t java_samples = 0;
    for (int i = 0; i < 20; i++) {
        char *dir = mkout();
        const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_CPU_HZ=1000",
                             "FLEETPROF_CPU_RATE=4000", "FLEETPROF_WALL_HZ=200",
                             "FLEETPROF_CONTROLLER=0", NULL};
        st = run(env, argv, 300, out, sizeof out);
        got[0] = 0;
        if (st == 0 && strstr(out, "checksum "))
            checksum(out, got, sizeof got);
        int same = st == 0 && !strcmp(got, want);
        if (!same)
            printf("# run %d: status %d, '%s' (want '%s')\n", i, st, got, want);
        ok += same;
        chunks_t *cs = load(dir);
        java_samples += total(cs, CM_EV_CPU, "Stress.work", 0).samples;
        free_chunks(cs);
        rmrf(dir);
        free(dir);
    }
    printf("# %d of 20 runs correct (%s); %" PRIu64 " CPU samples in Stress.work\n", ok, want,
           java_samples);
    CHECK(ok == 20);
    CHECK(java_samples >= 100); /* the agent sampled Java frames all along */
}

/* ---- compare ---- */

static void read_ours(const char *dir, prof_t *p) {
    chunks_t *cs = load(dir);
    for (int c = 0; c < cs->n; c++) {
        const cm_samples_t *s = &cs->c[c]->samples[CM_EV_CPU];
        const cm_dict_t *d = &cs->c[c]->dict;
        for (uint32_t i = 0; i < s->n; i++) {
            uint32_t st = s->stack[i], leaf = UINT32_MAX;
            for (uint32_t k = d->stack_off[st]; k < d->stack_off[st + 1]; k++)
                if (is_java(d, d->stack_frames[k]))
                    leaf = d->stack_frames[k];
            if (leaf != UINT32_MAX) {
                const char *fn = loc_fn(d, leaf);
                prof_add(p, fn, strlen(fn), (double)s->weight[i]);
            }
        }
    }
    free_chunks(cs);
}

/* `jfr print --events jdk.ExecutionSample`: the first line after "stackTrace = [" is the top
 * frame, "pkg.Class.method(args) line: N". */
static void read_jfr(const char *txt, prof_t *p) {
    FILE *f = fopen(txt, "r");
    CHECKF(f != NULL, "%s: %s", txt, strerror(errno));
    char line[4096];
    int next = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "stackTrace = [")) {
            next = 1;
            continue;
        }
        if (!next)
            continue;
        next = 0;
        const char *s = line;
        while (*s == ' ')
            s++;
        size_t len = strcspn(s, "(\n");
        if (len && s[len] == '(')
            prof_add(p, s, len, 1);
    }
    fclose(f);
}

/* async-profiler's collapsed stacks with `ann`: Java frames end in _[j] (compiled), _[i]
 * (inlined), _[0] (interpreted), _[1] (C1); `total`: the count is CPU ns. */
static void ap_line(char *line, double w, prof_t *p) {
    const char *best = NULL;
    size_t blen = 0;
    for (char *fr = line; fr;) {
        char *end = strchr(fr, ';');
        size_t len = end ? (size_t)(end - fr) : strlen(fr);
        if (len > 4 && fr[len - 4] == '_' && fr[len - 3] == '[' && fr[len - 1] == ']' &&
            strchr("ji01234", fr[len - 2]))
            best = fr, blen = len - 4;
        fr = end ? end + 1 : NULL;
    }
    if (best)
        prof_add(p, best, blen, w);
}

/* Work for 12 s of CPU in one JVM under the agent and one other profiler (`other`: its
 * -agentpath or -XX option); the agent's Java self shares into `ours`. */
static void run_beside(const char *other, const char *name, prof_t *ours) {
    char out[8192], *dir = mkout();
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_CPU_HZ=1000",
                         "FLEETPROF_CPU_RATE=2000", "FLEETPROF_CONTROLLER=0", NULL};
    const char *argv[] = {JDK "java", agentpath, other, DNS, "-cp", classes, "Work", "12c",
                          "0", NULL};
    int st = run(env, argv, 900, out, sizeof out);
    CHECKF(st == 0 && strstr(out, "done true"), "Work under the agent and %s failed (%d): %s",
           name, st, out);
    read_ours(dir, ours);
    prof_sort(ours);
    rmrf(dir);
    free(dir);
}

/* The agent's top-10 against `theirs` (total: their unit per sample, for the printout). */
static void compare_one(const char *name, prof_t *ours, prof_t *theirs, double min_theirs) {
    prof_sort(theirs);
    printf("# Java samples: agent %.2f s CPU, %s %.0f\n", ours->total / 1e9, name,
           theirs->total);
    CHECKF(ours->total >= 9e9 && theirs->total >= min_theirs,
           "too few samples (machine too loaded?)");
    double worst = prof_worst(ours, theirs, 10, "agent", name);
    printf("# largest difference, agent vs %s: %.2f points\n", name, worst);
    CHECK(worst <= 3.0);
}

static void compare(void) {
    compile();
    char out[8192], apsh[4096], ap[16384], jfc[4200], jfr[8600], jfrtxt[4200], aptxt[4200];
    src_path("tests/java/async-profiler.sh", apsh, sizeof apsh);
    const char *aargv[] = {"/bin/bash", apsh, NULL};
    int st = run(NULL, aargv, 600, out, sizeof out);
    CHECKF(st == 0, "async-profiler could not be fetched (%d): %s", st, out);
    out[strcspn(out, "\n")] = 0;
    char *tmp = mkout();
    snprintf(aptxt, sizeof aptxt, "%s/ap.txt", tmp);
    snprintf(ap, sizeof ap, "-agentpath:%s=start,event=cpu,interval=1000000,collapsed,ann,"
             "total,file=%s", out, aptxt);
    snprintf(jfc, sizeof jfc, "%s/exec.jfc", tmp);
    FILE *f = fopen(jfc, "w");
    CHECK(f != NULL);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<configuration version=\"2.0\">\n"
               "<event name=\"jdk.ExecutionSample\"><setting name=\"enabled\">true</setting>"
               "<setting name=\"period\">1 ms</setting></event>\n</configuration>\n");
    fclose(f);
    snprintf(jfr, sizeof jfr, "-XX:StartFlightRecording=filename=%s/rec.jfr,settings=%s", tmp,
             jfc);
    prof_t *ours = calloc(1, sizeof *ours), *theirs = calloc(1, sizeof *theirs);
    run_beside(jfr, "JFR", ours);
    char cmd[8800];
    snprintf(jfrtxt, sizeof jfrtxt, "%s/rec.txt", tmp);
    snprintf(cmd, sizeof cmd, JDK "jfr print --events jdk.ExecutionSample %s/rec.jfr > %s", tmp,
             jfrtxt);
    CHECKF(system(cmd) == 0, "%s failed", cmd);
    read_jfr(jfrtxt, theirs);
    compare_one("JFR", ours, theirs, 3000);
    memset(ours, 0, sizeof *ours);
    memset(theirs, 0, sizeof *theirs);
    run_beside(ap, "async-profiler", ours);
    rt_folded(aptxt, ap_line, theirs);
    compare_one("async-profiler", ours, theirs, 9e9);
    free(ours);
    free(theirs);
    rmrf(tmp);
    free(tmp);
}

int main(int argc, char **argv) {
    static const rt_case_t cases[] = {{"frames", frames, 0}, {"stress", stress, 0}, {"compare", compare, 0}};
    int rc = rt_main(argc, argv, cases, sizeof cases / sizeof cases[0]);
    if (classes[0])
        rmrf(classes);
    return rc;
}
