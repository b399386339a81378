/* Symbolization in the agent (issue 15): every symbol source a binary offers, function sizes,
 * demangling, source lines. Each test runs a program of tests/programs under the preloaded
 * agent with FLEETPROF_OUTPUT, then reads the chunks back (the codec, or `fleetprof fold`).
 * Ground truth comes from binutils: nm -S for function ranges, addr2line for lines, c++filt
 * for the long C++ name. */
#include "support/runner.h"

#include "cm/chunk.h"

#include <dirent.h>
#include <sys/stat.h>

static char g_build[512], g_tmp[128];

static void setup(const char *tag) {
    const char *b = getenv("FLEETPROF_BUILD");
    snprintf(g_build, sizeof g_build, "%s", b ? b : ".");
    snprintf(g_tmp, sizeof g_tmp, "/tmp/fp-sym-%s-%d", tag, (int)getpid());
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf %s && mkdir -p %s/out", g_tmp, g_tmp);
    CHECK(system(cmd) == 0);
}

static void cleanup(void) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
    if (system(cmd) != 0)
        fprintf(stderr, "cannot remove %s\n", g_tmp);
}

/* Runs PROG (a path) for secs under the agent with extra environment; chunks in g_tmp/out. */
static void run_agent(const char *prog, const char *env, double secs) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "rm -rf %s/out && mkdir -p %s/out && cd %s && %s FLEETPROF_OUTPUT=%s/out "
             "FLEETPROF_COLLECTOR=none FLEETPROF_INTERVAL=500ms FLEETPROF_CPU_RATE=400 "
             "FLEETPROF_CPU_HZ=400 LD_PRELOAD=%s/agent/libfleetprof.so %s %.1f >/dev/null",
             g_tmp, g_tmp, g_tmp, env ? env : "", g_tmp, g_build, prog, secs);
    CHECKF(system(cmd) == 0, "%s", cmd);
}

/* Output of a shell command (at most size - 1 bytes). */
static char *sh(const char *cmd, char *out, size_t size) {
    FILE *f = popen(cmd, "r");
    CHECKF(f != NULL, "%s", cmd);
    size_t n = fread(out, 1, size - 1, f);
    out[n] = '\0';
    pclose(f);
    return out;
}

static char *fold(void) {
    static char out[1 << 20];
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/cli/fleetprof fold %s/out", g_build, g_tmp);
    return sh(cmd, out, sizeof out);
}

/* Folded CPU weight of the lines whose leaf frame contains needle, and of all lines. */
static void leaf_weight(const char *folded, const char *needle, uint64_t *w, uint64_t *total) {
    *w = *total = 0;
    const char *p = folded;
    while (*p) {
        const char *nl = strchr(p, '\n');
        if (!nl)
            break;
        const char *sp = nl;
        while (sp > p && *sp != ' ')
            sp--;
        const char *leaf = sp;
        while (leaf > p && leaf[-1] != ';')
            leaf--;
        uint64_t v = strtoull(sp + 1, NULL, 10);
        *total += v;
        size_t ln = (size_t)(sp - leaf), nn = strlen(needle);
        for (size_t i = 0; i + nn <= ln; i++)
            if (!memcmp(leaf + i, needle, nn)) {
                *w += v;
                break;
            }
        p = nl + 1;
    }
}

typedef void (*chunk_fn)(const cm_chunk_t *c, void *ctx);

static int for_each_chunk(chunk_fn fn, void *ctx) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/out", g_tmp);
    DIR *d = opendir(dir);
    CHECK(d != NULL);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (!strstr(e->d_name, ".fpc"))
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        CHECK(f != NULL);
        static uint8_t buf[32 << 20];
        size_t len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        cm_chunk_t *c = NULL;
        char err[256];
        CHECKF(cm_chunk_decode(buf, len, &c, err, sizeof err) == 0, "%s: %s", path, err);
        fn(c, ctx);
        cm_chunk_free(c);
        n++;
    }
    closedir(d);
    return n;
}

/* ---- function ranges: every location inside [start, end) of a function (nm -S) carries
 * that function's name, and lines agree with addr2line ---- */
typedef struct {
    uint64_t start[2], end[2];
    const char *name[2];
    int hits[2], line_checked, line_ok;
    char lines_cmd[1 << 14];
    size_t cmd_len;
    uint64_t addrs[256];
    uint32_t want_line[256];
    int naddrs;
} ranges_t;

static void check_ranges(const cm_chunk_t *c, void *ctx) {
    ranges_t *r = ctx;
    const cm_dict_t *d = &c->dict;
    for (uint32_t l = 1; l < d->n_locations; l++) {
        uint32_t m = d->location_mapping[l];
        if (!m || !strstr(d->strings[d->mappings[m].filename].ptr, "symwork"))
            continue;
        uint64_t a = d->location_address[l];
        for (int k = 0; k < 2; k++) {
            if (a < r->start[k] || a >= r->end[k])
                continue;
            uint32_t f = d->location_function[l];
            CHECKF(f != 0, "address 0x%llx inside %s is unnamed", (unsigned long long)a,
                   r->name[k]);
            const char *nm = d->strings[d->function_name[f]].ptr;
            CHECKF(!strcmp(nm, r->name[k]), "address 0x%llx inside %s named %s",
                   (unsigned long long)a, r->name[k], nm);
            r->hits[k]++;
            if (d->location_line && r->naddrs < 256) {
                r->addrs[r->naddrs] = a;
                r->want_line[r->naddrs++] = d->location_line[l];
            }
        }
    }
}

static void nm_range(const char *bin, const char *fn, uint64_t *start, uint64_t *end) {
    char cmd[2048], out[256];
    snprintf(cmd, sizeof cmd, "nm -S %s | grep ' %s$'", bin, fn);
    unsigned long long s = 0, z = 0;
    CHECKF(sscanf(sh(cmd, out, sizeof out), "%llx %llx", &s, &z) == 2, "%s", cmd);
    *start = s;
    *end = s + z;
}

/* The stripped program named from a debug file: every address of a function maps to it, the
 * lines are addr2line's. env selects how the debug file is found. */
static void check_named(const char *prog, const char *env, int want_lines) {
    char bin[1024], full[1024];
    snprintf(full, sizeof full, "%s/tests/symwork", g_build);
    snprintf(bin, sizeof bin, "%s", prog);
    run_agent(bin, env, 1.5);
    ranges_t *r = calloc(1, sizeof *r);
    r->name[0] = "symwork_inner_loop";
    r->name[1] = "symwork_outer_step";
    for (int k = 0; k < 2; k++)
        nm_range(full, r->name[k], &r->start[k], &r->end[k]);
    CHECK(for_each_chunk(check_ranges, r) > 0);
    CHECKF(r->hits[0] >= 3, "only %d locations inside symwork_inner_loop", r->hits[0]);
    uint64_t w, total;
    leaf_weight(fold(), "symwork_inner_loop", &w, &total);
    CHECKF(w * 2 > total, "symwork_inner_loop has %llu of %llu", (unsigned long long)w,
           (unsigned long long)total);
    if (!want_lines) {
        CHECK(r->naddrs == 0); /* MiniDebugInfo has no DWARF: no line column */
        free(r);
        return;
    }
    CHECKF(r->naddrs > 0, "no lines");
    /* addr2line on the unstripped program, one call for all addresses */
    char cmd[1 << 15], out[1 << 15];
    int n = snprintf(cmd, sizeof cmd, "addr2line -e %s", full);
    for (int i = 0; i < r->naddrs; i++)
        n += snprintf(cmd + n, sizeof cmd - (size_t)n, " 0x%llx", (unsigned long long)r->addrs[i]);
    sh(cmd, out, sizeof out);
    char *save = NULL, *ln = strtok_r(out, "\n", &save);
    for (int i = 0; i < r->naddrs; i++, ln = strtok_r(NULL, "\n", &save)) {
        CHECK(ln != NULL);
        char *colon = strrchr(ln, ':');
        CHECK(colon != NULL);
        unsigned want = (unsigned)strtoul(colon + 1, NULL, 10);
        CHECKF(strstr(ln, "symwork.c") != NULL, "addr2line: %s", ln);
        CHECKF(r->want_line[i] == want, "0x%llx: line %u, addr2line %s",
               (unsigned long long)r->addrs[i], r->want_line[i], ln);
    }
    free(r);
}

static void test_stripped_unnamed_without_debug_file(void) {
    setup("none");
    char prog[1024];
    snprintf(prog, sizeof prog, "%s/tests/symwork.stripped", g_build);
    run_agent(prog, "FLEETPROF_DEBUG_DIRS=/nonexistent", 1.0);
    uint64_t w, total, wn;
    const char *f = fold();
    leaf_weight(f, "symwork.stripped+0x", &w, &total);
    leaf_weight(f, "symwork_inner_loop", &wn, &total);
    CHECKF(w * 2 > total && wn == 0, "unnamed %llu named %llu of %llu", (unsigned long long)w,
           (unsigned long long)wn, (unsigned long long)total);
    cleanup();
}

static void test_debug_file_by_build_id(void) {
    setup("bid");
    char cmd[4096], out[256], prog[1024], env[512];
    snprintf(cmd, sizeof cmd, "readelf -n %s/tests/symwork.stripped | awk '/Build ID/ {print $3}'",
             g_build);
    sh(cmd, out, sizeof out);
    out[strcspn(out, "\n")] = '\0';
    CHECKF(strlen(out) > 8, "no build id: %s", out);
    snprintf(cmd, sizeof cmd, "mkdir -p %s/dbg/.build-id/%.2s && cp %s/tests/symwork.debug %s/dbg/.build-id/%.2s/%s.debug",
             g_tmp, out, g_build, g_tmp, out, out + 2);
    CHECK(system(cmd) == 0);
    snprintf(prog, sizeof prog, "%s/tests/symwork.stripped", g_build);
    snprintf(env, sizeof env, "FLEETPROF_LINES=1 FLEETPROF_DEBUG_DIRS=/nonexistent:%s/dbg", g_tmp);
    check_named(prog, env, 1);
    cleanup();
}

static void test_debug_file_by_debuglink(void) {
    setup("link");
    char cmd[4096], prog[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/bin/.debug && cp %s/tests/symwork.linked %s/bin/ && "
             "cp %s/tests/symwork.debug %s/bin/.debug/", g_tmp, g_build, g_tmp, g_build, g_tmp);
    CHECK(system(cmd) == 0);
    snprintf(prog, sizeof prog, "%s/bin/symwork.linked", g_tmp);
    check_named(prog, "FLEETPROF_LINES=1 FLEETPROF_DEBUG_DIRS=/nonexistent", 1);
    cleanup();
}

static void test_minidebuginfo(void) {
    setup("mini");
    char prog[1024];
    snprintf(prog, sizeof prog, "%s/tests/symwork.mini", g_build);
    check_named(prog, "FLEETPROF_LINES=1 FLEETPROF_DEBUG_DIRS=/nonexistent", 0);
    cleanup();
}

/* lines are off by default */
static void test_lines_off(void) {
    setup("nolines");
    char cmd[4096], prog[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/bin/.debug && cp %s/tests/symwork.linked %s/bin/ && "
             "cp %s/tests/symwork.debug %s/bin/.debug/", g_tmp, g_build, g_tmp, g_build, g_tmp);
    CHECK(system(cmd) == 0);
    snprintf(prog, sizeof prog, "%s/bin/symwork.linked", g_tmp);
    check_named(prog, "FLEETPROF_DEBUG_DIRS=/nonexistent", 0);
    cleanup();
}

/* Issue 13 vs 15: once the objects are named (lines on: object, debug file and DWARF all
 * read), the process holds no descriptor of an ELF or debug file: the program lists its
 * /proc/self/fd at the end, after two chunks were built (interval 500 ms, 1.5 s of work). */
static void test_no_descriptor_kept(void) {
    setup("fds");
    char cmd[4096], prog[1024], env[512], list[8192];
    snprintf(cmd, sizeof cmd, "mkdir -p %s/bin/.debug && cp %s/tests/symwork.linked %s/bin/ && "
             "cp %s/tests/symwork.debug %s/bin/.debug/", g_tmp, g_build, g_tmp, g_build, g_tmp);
    CHECK(system(cmd) == 0);
    snprintf(prog, sizeof prog, "%s/bin/symwork.linked", g_tmp);
    snprintf(env, sizeof env, "SYMWORK_FDS=%s/fds FLEETPROF_DEBUG_DIRS=/nonexistent", g_tmp);
    check_named(prog, env, 0); /* named: the debug file was read */
    snprintf(env, sizeof env, "SYMWORK_FDS=%s/fds FLEETPROF_LINES=1 FLEETPROF_DEBUG_DIRS=/nonexistent",
             g_tmp);
    check_named(prog, env, 1); /* and its DWARF lines */
    snprintf(cmd, sizeof cmd, "ls %s/out | wc -l", g_tmp);
    CHECKF(atoi(sh(cmd, list, sizeof list)) >= 3, "chunks: %s", list);
    snprintf(cmd, sizeof cmd, "cat %s/fds", g_tmp);
    sh(cmd, list, sizeof list);
    int n = 0;
    char *save = NULL;
    for (char *l = strtok_r(list, "\n", &save); l; l = strtok_r(NULL, "\n", &save), n++) {
        const char *to = strchr(l, ' ');
        CHECKF(to && to[1], "bad line %s", l);
        to++;
        CHECKF(!strstr(to, "symwork") && !strstr(to, ".so") && !strstr(to, ".debug") &&
                   !strstr(to, "/usr/lib"),
               "descriptor %s of the profiled process is an object or debug file", l);
    }
    CHECKF(n >= 3, "only %d descriptors listed (stdin, stdout, stderr are open)", n);
    cleanup();
}

/* Near RLIMIT_NOFILE (3 descriptors free of 64) the agent opens no object: the loads are
 * deferred and counted, the program stays unnamed; with 32 free it is named. */
static void test_no_load_near_rlimit(void) {
    setup("rlim");
    char cmd[4096], prog[1024], log[8192];
    snprintf(prog, sizeof prog, "%s/tests/symwork", g_build);
    for (int free_fds = 3; free_fds <= 32; free_fds += 29) {
        snprintf(cmd, sizeof cmd,
                 "rm -rf %s/out && mkdir -p %s/out && cd %s && ulimit -n 64 && "
                 "SYMWORK_FREE_FDS=%d FLEETPROF_LOG_LEVEL=debug FLEETPROF_OUTPUT=%s/out "
                 "FLEETPROF_COLLECTOR=none FLEETPROF_INTERVAL=500ms FLEETPROF_CPU_RATE=400 "
                 "FLEETPROF_CPU_HZ=400 LD_PRELOAD=%s/agent/libfleetprof.so %s 1.2 >/dev/null "
                 "2>%s/log",
                 g_tmp, g_tmp, g_tmp, free_fds, g_tmp, g_build, prog, g_tmp);
        CHECKF(system(cmd) == 0, "%s", cmd);
        snprintf(cmd, sizeof cmd, "grep -o '[0-9]* loads deferred' %s/log | tail -1", g_tmp);
        int deferred = atoi(sh(cmd, log, sizeof log));
        uint64_t w, total;
        leaf_weight(fold(), "symwork_inner_loop", &w, &total);
        if (free_fds == 3)
            CHECKF(deferred > 0 && w == 0 && total > 0, "%d free: %d deferred, named %llu of %llu",
                   free_fds, deferred, (unsigned long long)w, (unsigned long long)total);
        else
            CHECKF(deferred == 0 && w * 2 > total, "%d free: %d deferred, named %llu of %llu",
                   free_fds, deferred, (unsigned long long)w, (unsigned long long)total);
    }
    cleanup();
}

static void test_cxx_long_name(void) {
    setup("cxx");
    char prog[1024], cmd[2048];
    snprintf(prog, sizeof prog, "%s/tests/symwork_cxx", g_build);
    run_agent(prog, NULL, 1.0);
    static char want[16384];
    snprintf(cmd, sizeof cmd, "nm %s | awk '/long_named_burn/ {print $3}' | head -1 | c++filt",
             prog);
    sh(cmd, want, sizeof want);
    want[strcspn(want, "\n")] = '\0';
    CHECKF(strlen(want) > 1000, "c++filt gave %zu bytes: %s", strlen(want), want);
    uint64_t w, total;
    leaf_weight(fold(), want, &w, &total);
    CHECKF(w * 2 > total, "the %zu-byte name has %llu of %llu", strlen(want),
           (unsigned long long)w, (unsigned long long)total);
    cleanup();
}

static void rust_case(const char *variant, const char *want) {
    setup(variant);
    char prog[1024];
    snprintf(prog, sizeof prog, "%s/tests/symwork_rust_%s", g_build, variant);
    CHECKF(access(prog, X_OK) == 0, "%s missing: rustc not found at configure time", prog);
    run_agent(prog, NULL, 1.0);
    uint64_t w, total;
    const char *f = fold();
    leaf_weight(f, want, &w, &total);
    CHECKF(w * 2 > total, "%s has %llu of %llu:\n%.2000s", want, (unsigned long long)w,
           (unsigned long long)total, f);
    CHECK(strstr(f, "symwork_rust::main") != NULL);
    CHECK(strstr(f, "_ZN") == NULL && strstr(f, ";_R") == NULL);
    cleanup();
}

static void test_rust_legacy(void) { rust_case("legacy", "symwork_rust::rshot::Cruncher<T>::crunch"); }
static void test_rust_v0(void) { rust_case("v0", "<symwork_rust::rshot::Cruncher<u32>>::crunch"); }

/* Issue 13: elfutils is not linked but loaded on the first lookup (dwlib.c). A process that
 * exits at once never maps it (nor libprotobuf-c, pblib.c, nor libm); one that samples does; where it cannot be loaded the frames
 * stay addresses, one line says why and the debug log counts the objects left unnamed. */
static void test_elfutils_lazy(void) {
    setup("lazy");
    char cmd[4096], prog[1024], out[8192];
    snprintf(cmd, sizeof cmd, "FLEETPROF_COLLECTOR=none LD_PRELOAD=%s/agent/libfleetprof.so "
             "cat /proc/self/maps", g_build);
    sh(cmd, out, sizeof out);
    CHECKF(strstr(out, "libfleetprof.so") && !strstr(out, "libdw") && !strstr(out, "libelf") &&
               !strstr(out, "libprotobuf-c") && !strstr(out, "libm."),
           "maps of a process that exits at once:\n%s", out);
    snprintf(prog, sizeof prog, "%s/tests/symwork", g_build);
    for (int missing = 0; missing < 2; missing++) {
        snprintf(cmd, sizeof cmd,
                 "rm -rf %s/out && mkdir -p %s/out && cd %s && %s FLEETPROF_LOG_LEVEL=debug "
                 "SYMWORK_MAPS=%s/maps FLEETPROF_OUTPUT=%s/out FLEETPROF_COLLECTOR=none "
                 "FLEETPROF_INTERVAL=500ms FLEETPROF_CPU_RATE=400 FLEETPROF_CPU_HZ=400 "
                 "LD_PRELOAD=%s/agent/libfleetprof.so %s 1.2 >/dev/null 2>%s/log",
                 g_tmp, g_tmp, g_tmp, missing ? "FLEETPROF_LIBDW=/nonexistent/libdw.so.1" : "",
                 g_tmp, g_tmp, g_build, prog, g_tmp);
        CHECKF(system(cmd) == 0, "%s", cmd);
        snprintf(cmd, sizeof cmd, "grep -c 'cannot load elfutils' %s/log", g_tmp);
        int warned = atoi(sh(cmd, out, sizeof out));
        snprintf(cmd, sizeof cmd, "grep -o '[0-9]* objects unnamed (no elfutils)' %s/log | tail -1",
                 g_tmp);
        int unnamed = atoi(sh(cmd, out, sizeof out));
        snprintf(cmd, sizeof cmd, "grep -c 'libdw\\|libprotobuf-c' %s/maps", g_tmp);
        int mapped = atoi(sh(cmd, out, sizeof out));
        uint64_t w, wa, total;
        const char *f = fold();
        leaf_weight(f, "symwork_inner_loop", &w, &total);
        leaf_weight(f, "symwork+0x", &wa, &total);
        if (missing)
            CHECKF(warned == 1 && unnamed > 0 && w == 0 && wa * 2 > total,
                   "no elfutils: %d warnings, %d objects unnamed, named %llu, addresses %llu of "
                   "%llu", warned, unnamed, (unsigned long long)w, (unsigned long long)wa,
                   (unsigned long long)total);
        else
            CHECKF(warned == 0 && unnamed == 0 && mapped > 0 && w * 2 > total,
                   "elfutils: %d warnings, %d unnamed, libdw mapped %d, named %llu of %llu",
                   warned, unnamed, mapped, (unsigned long long)w, (unsigned long long)total);
    }
    cleanup();
}

static const tr_test_t tests[] = {
    {"stripped_unnamed_without_debug_file", test_stripped_unnamed_without_debug_file},
    {"debug_file_by_build_id", test_debug_file_by_build_id},
    {"debug_file_by_debuglink", test_debug_file_by_debuglink},
    {"minidebuginfo", test_minidebuginfo},
    {"lines_off", test_lines_off},
    {"no_descriptor_kept", test_no_descriptor_kept},
    {"no_load_near_rlimit", test_no_load_near_rlimit},
    {"cxx_long_name", test_cxx_long_name},
    {"rust_legacy", test_rust_legacy},
    {"rust_v0", test_rust_v0},
    {"elfutils_lazy", test_elfutils_lazy},
    {NULL, NULL},
};

TR_MAIN(tests)
