/* Server-side symbolization (issue 15): a stripped program's frames, unnamed in its chunks, are
 * named by the aggregator through a real debuginfod (deploy/debuginfod, loopback, serving a
 * directory that holds only the debug file) in `fleetprof top`, `tree`, `diff` and the pprof
 * export; with the server down queries still answer, with addresses, without waiting; `go tool
 * pprof` symbolizes an export of unnamed frames itself when the debug file is on its path.
 *
 * main: Kafka (19820), two runs of tests/symwork.stripped under the agent (versions v1, v2,
 * chunks produced to Kafka), debuginfod on 19830, aggregator A (debuginfod on, HTTP 19821) and
 * B (debuginfod URL where nothing listens, 19822: "server down"), each with its own group and
 * store. */
#include "support/kafka.h"
#include "support/runner.h"

#include "aggtest.h"
#include "symstore.h"

#include "cm/wire.h"

#include <dirent.h>
#include <librdkafka/rdkafka.h>
#include <sqlite3.h>

#define KPORT 19820
#define HTTP_A 19821
#define HTTP_B 19822
#define DPORT 19830
#define DEAD_PORT 19832

static char g_dir[256], g_build[512], g_src[512], g_bid[129];
static char g_bootstrap[64], g_url[64], g_dead[64], g_storea[512], g_cachea[512];
static pid_t g_a = -1;
static int64_t g_hi[1];

static char *sh(const char *cmd, char *out, size_t size, int *status) {
    FILE *f = popen(cmd, "r");
    CHECKF(f != NULL, "%s", cmd);
    size_t n = fread(out, 1, size - 1, f);
    out[n] = '\0';
    int st = pclose(f);
    if (status)
        *status = st;
    return out;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Runs a CLI query against server port; returns its output, and its duration in *secs. */
static char *cli(int port, const char *args, double *secs) {
    static char out[1 << 20];
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s/cli/fleetprof %s --server http://127.0.0.1:%d 2>&1", g_build,
             args, port);
    double t0 = now_s();
    int st;
    sh(cmd, out, sizeof out, &st);
    if (secs)
        *secs = now_s() - t0;
    CHECKF(st == 0, "%s exited %d:\n%s", cmd, st, out);
    return out;
}

static void test_named_in_top_tree_diff(void) {
    const char *q[] = {"top --service symwork --version v1", "tree --service symwork --version v1",
                       "diff --service symwork --base v1 --test v2 --json", NULL};
    for (int i = 0; q[i]; i++) {
        const char *out = cli(HTTP_A, q[i], NULL);
        CHECKF(strstr(out, "symwork_inner_loop") != NULL, "%s:\n%s", q[i], out);
        CHECKF(strstr(out, "symwork.stripped+0x") == NULL, "%s still has addresses:\n%s", q[i],
               out);
    }
}

static void test_named_in_pprof_export(void) {
    char args[512], cmd[2048], out[1 << 16];
    snprintf(args, sizeof args, "export --service symwork --format pprof -o %s/a.pb.gz", g_dir);
    cli(HTTP_A, args, NULL);
    /* no binary anywhere for pprof: the names are the export's own */
    snprintf(cmd, sizeof cmd, "cd %s && PPROF_BINARY_PATH=/nonexistent go tool pprof -top a.pb.gz 2>&1",
             g_dir);
    int st;
    sh(cmd, out, sizeof out, &st);
    CHECKF(st == 0 && strstr(out, "symwork_inner_loop"), "%s:\n%s", cmd, out);
}

static void test_server_down_shows_addresses(void) {
    double secs, secs2;
    const char *out = cli(HTTP_B, "top --service symwork --version v1", &secs);
    CHECKF(strstr(out, "symwork.stripped+0x") != NULL && !strstr(out, "symwork_inner_loop"),
           "%s", out);
    out = cli(HTTP_B, "tree --service symwork --version v1", &secs2);
    CHECKF(strstr(out, "symwork.stripped+0x") != NULL, "%s", out);
    /* refused connections fail at once, and the build id is negative-cached: no query waits
     * for the 5 s download timeout */
    CHECKF(secs < 5 && secs2 < 5, "queries took %.2f s and %.2f s", secs, secs2);
}

static void test_go_pprof_symbolizes_unnamed_export(void) {
    char args[512], cmd[4096], out[1 << 16];
    snprintf(args, sizeof args, "export --service symwork --format pprof -o %s/b.pb.gz", g_dir);
    cli(HTTP_B, args, NULL);
    /* without the debug file pprof can only show addresses */
    snprintf(cmd, sizeof cmd, "cd %s && PPROF_BINARY_PATH=/nonexistent go tool pprof -top b.pb.gz 2>&1",
             g_dir);
    int st;
    sh(cmd, out, sizeof out, &st);
    CHECKF(st == 0 && !strstr(out, "symwork_inner_loop"), "%s", out);
    /* the debug file given to pprof as the binary of the first mapping (Go's own pprof does
     * not read build ids, so PPROF_BINARY_PATH lookups by build id never match there) */
    snprintf(cmd, sizeof cmd,
             "cd %s && PPROF_BINARY_PATH=/nonexistent go tool pprof -top %s/tests/symwork.debug "
             "b.pb.gz 2>&1", g_dir, g_build);
    sh(cmd, out, sizeof out, &st);
    CHECKF(st == 0 && strstr(out, "symwork_inner_loop"), "%s:\n%s", cmd, out);
}

/* Rows of storea's symbols.sqlite named `name` (-1: no such file/table yet). */
static int64_t stored_rows(const char *name) {
    char path[600];
    snprintf(path, sizeof path, "%s/symbols.sqlite", g_storea);
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    int64_t n = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK &&
        sqlite3_prepare_v2(db, "SELECT count(*) FROM symbols WHERE name=?1", -1, &st, NULL) ==
            SQLITE_OK) {
        sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
        if (sqlite3_step(st) == SQLITE_ROW)
            n = sqlite3_column_int64(st, 0);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* Runs before any query: the names were found at ingest (the symbol store's worker), and
 * stored. */
static void test_named_at_ingest_and_stored(void) {
    double t0 = now_s();
    int64_t n;
    while ((n = stored_rows("symwork_inner_loop")) <= 0 && now_s() - t0 < 60)
        usleep(100000);
    CHECKF(n > 0, "no stored name for symwork_inner_loop after %.0f s (rows %lld)",
           now_s() - t0, (long long)n);
    CHECKF(stored_rows("symwork_outer_step") > 0, "symwork_outer_step not stored");
    /* and counted in /metrics */
    char cmd[256], out[1 << 16];
    snprintf(cmd, sizeof cmd, "curl -s -m 5 http://127.0.0.1:%d/metrics", HTTP_A);
    sh(cmd, out, sizeof out, NULL);
    const char *q = strstr(out, "\nfleetprof_aggregator_symbols_queued_total ");
    const char *w = strstr(out, "\nfleetprof_aggregator_symbols_stored_total ");
    CHECKF(q && w && atoll(q + 43) > 0 && atoll(w + 43) > 0, "%s", out);
}

static void hex_bid(const char *hex, uint8_t *bid, size_t *bl) {
    *bl = strlen(hex) / 2;
    for (size_t i = 0; i < *bl; i++) {
        unsigned v = 0;
        sscanf(hex + 2 * i, "%2x", &v);
        bid[i] = (uint8_t)v;
    }
}

/* The symbol store in this process (no aggregator): answers are stored, read back after a
 * reopen with the server down and no download cache, failures are kept for retry_s across a
 * reopen and asked again after it. */
static void test_symstore_mechanism(void) {
    char cmd[2048], out[256], dir[600], cache[600], err[256];
    snprintf(cmd, sizeof cmd, "nm %s/tests/symwork.debug | awk '$3 == \"symwork_inner_loop\" "
             "{print $1}'", g_build);
    unsigned long long fn = strtoull(sh(cmd, out, sizeof out, NULL), NULL, 16);
    CHECKF(fn != 0, "no symwork_inner_loop in symwork.debug");
    snprintf(dir, sizeof dir, "%s/ss", g_dir);
    snprintf(cache, sizeof cache, "%s/ss-cache", g_dir);
    snprintf(cmd, sizeof cmd, "mkdir -p %s", dir);
    CHECK(system(cmd) == 0);
    uint8_t bid[64], other[20];
    size_t bl;
    hex_bid(g_bid, bid, &bl);
    memset(other, 0xab, sizeof other); /* a build id no server knows */
    agg_sym_t s;
    agg_symstore_stats_t ss;
    agg_symbolizer_stats_t zs;

    agg_symbolizer_cfg_t live = {g_url, cache, 5, 60, 0, 0};
    CHECK(agg_symbolizer_init(&live) == 0);
    CHECK(agg_symstore_open(dir, 60, err, sizeof err) == 0);
    CHECK(agg_symstore_get(bid, bl, fn + 4, 0, &s) == 0); /* not stored, not fetched */
    CHECK(agg_symstore_get(bid, bl, fn + 4, 1, &s) == 1);
    CHECKF(s.name && !strcmp(s.name, "symwork_inner_loop"), "%s", s.name ? s.name : "(null)");
    CHECKF(s.file && strstr(s.file, "symwork.c") && s.line > 0, "%s:%u", s.file, s.line);
    agg_sym_free(&s);
    CHECK(agg_symstore_get(bid, bl, 0x10, 1, &s) == 0); /* in the file, below every function */
    agg_symstore_stats(&ss);
    CHECK_EQ(ss.stored, 1);
    CHECK_EQ(ss.negatives, 1);
    agg_symstore_close();
    agg_symbolizer_shutdown();

    /* server down, empty download cache: the stored answers only */
    snprintf(cmd, sizeof cmd, "rm -rf %s", cache);
    CHECK(system(cmd) == 0);
    agg_symbolizer_cfg_t down = {g_dead, cache, 5, 60, 0, 0};
    CHECK(agg_symbolizer_init(&down) == 0);
    CHECK(agg_symstore_open(dir, 1, err, sizeof err) == 0);
    CHECK(agg_symstore_get(bid, bl, fn + 4, 1, &s) == 1);
    CHECKF(s.name && !strcmp(s.name, "symwork_inner_loop"), "%s", s.name ? s.name : "(null)");
    agg_sym_free(&s);
    CHECK(agg_symstore_get(bid, bl, 0x10, 1, &s) == 0);
    agg_symbolizer_stats(&zs);
    CHECK_EQ(zs.fetches, 0); /* both answered by the store */
    CHECK(agg_symstore_get(other, sizeof other, 0x1000, 1, &s) == 0);
    agg_symbolizer_stats(&zs);
    CHECK_EQ(zs.fetches, 1);
    agg_symstore_close();
    agg_symbolizer_shutdown();

    /* the failure is stored: not asked again within retry_s (1 s), even by a new process */
    CHECK(agg_symbolizer_init(&down) == 0);
    CHECK(agg_symstore_open(dir, 1, err, sizeof err) == 0);
    CHECK(agg_symstore_get(other, sizeof other, 0x1000, 1, &s) == 0);
    agg_symbolizer_stats(&zs);
    CHECK_EQ(zs.fetches, 0);
    usleep(2100000); /* retry_at is in whole seconds */
    CHECK(agg_symstore_get(other, sizeof other, 0x1000, 1, &s) == 0);
    agg_symbolizer_stats(&zs);
    CHECK_EQ(zs.fetches, 1);
    agg_symstore_close();
    agg_symbolizer_shutdown();
}

/* Restarts aggregator A with its debuginfod gone and its download cache deleted (in main,
 * between the two test tables: a test's own children die with it). Returns 0 or -1. */
static int restart_a_server_down(void) {
    char cmd[2048], log[600];
    if (at_agg_stop(g_a, SIGTERM, 30) < 0)
        return -1;
    g_a = -1;
    snprintf(cmd, sizeof cmd, "%s/deploy/debuginfod/stop.sh %d >/dev/null 2>&1; rm -rf %s",
             g_src, DPORT, g_cachea);
    if (system(cmd) != 0)
        return -1;
    const char *xa[] = {"--debuginfod-urls", g_url, "--debuginfod-cache", g_cachea, NULL};
    snprintf(log, sizeof log, "%s/agg-a2.log", g_dir);
    g_a = at_agg_start(g_bootstrap, g_storea, "symsrv-a", HTTP_A, log, xa);
    if (g_a < 0 || at_wait_caught_up(g_storea, CM_TOPIC_CHUNKS, 1, g_hi, 60))
        return -1;
    for (int i = 0; i < 100; i++) { /* the HTTP server is up shortly after the start */
        snprintf(cmd, sizeof cmd, "curl -s -m 2 http://127.0.0.1:%d/healthz >/dev/null", HTTP_A);
        if (system(cmd) == 0)
            return 0;
        usleep(100000);
    }
    return -1;
}

/* After restart_a_server_down: A names every frame from its symbol store, without waiting. */
static void test_names_survive_restart_server_down(void) {
    char cmd[2048], out[4096];
    double secs = 0;
    snprintf(cmd, sizeof cmd, "curl -s -m 2 %s/metrics >/dev/null 2>&1", g_url);
    CHECKF(system(cmd) != 0, "debuginfod still answers on %s", g_url);
    snprintf(cmd, sizeof cmd, "find %s -type f 2>/dev/null | grep -q .", g_cachea);
    CHECKF(system(cmd) != 0, "download cache %s not empty", g_cachea);
    const char *q[] = {"top --service symwork --version v1", "tree --service symwork --version v1",
                       "diff --service symwork --base v1 --test v2 --json", NULL};
    for (int i = 0; q[i]; i++) {
        const char *o = cli(HTTP_A, q[i], &secs);
        CHECKF(strstr(o, "symwork_inner_loop") && !strstr(o, "symwork.stripped+0x"),
               "%s after the restart:\n%s", q[i], o);
        CHECKF(secs < 5, "%s took %.2f s", q[i], secs);
    }
    char args[600];
    snprintf(args, sizeof args, "export --service symwork --format pprof -o %s/c.pb.gz", g_dir);
    cli(HTTP_A, args, NULL);
    snprintf(cmd, sizeof cmd,
             "cd %s && PPROF_BINARY_PATH=/nonexistent go tool pprof -top c.pb.gz 2>&1", g_dir);
    int st;
    sh(cmd, out, sizeof out, &st);
    CHECKF(st == 0 && strstr(out, "symwork_inner_loop"), "%s:\n%s", cmd, out);
}

/* symwork_inl (-O2, inlined helpers), stripped, named by the server from its debug file: every
 * location of the pprof export lists the inlined frames and lines addr2line -i gives for its
 * address; `top --lines` shows them. */
static void test_lines_and_inlines_match_addr2line(void) {
    char args[600], cmd[4096];
    static char out[1 << 20];
    const char *o = cli(HTTP_A, "top --service symlines --lines --limit 20", NULL);
    CHECKF(strstr(o, "inl_mix symwork_inl.c:") && strstr(o, "inl_round symwork_inl.c:"),
           "top --lines:\n%s", o);
    snprintf(args, sizeof args, "export --service symlines --format pprof -o %s/d.pb.gz", g_dir);
    cli(HTTP_A, args, NULL);
    snprintf(cmd, sizeof cmd, "cd %s && PPROF_BINARY_PATH=/nonexistent go tool pprof -raw d.pb.gz 2>&1",
             g_dir);
    int st;
    sh(cmd, out, sizeof out, &st);
    CHECKF(st == 0, "%s:\n%s", cmd, out);
    /* the mapping id of symwork_inl.stripped, from "N: 0x0/0x.../0x0 symwork_inl.stripped" */
    const char *mp = strstr(out, "\nMappings\n"), *ms = mp ? strstr(mp, " symwork_inl.stripped") : NULL;
    CHECKF(ms != NULL, "no mapping of symwork_inl.stripped:\n%s", out);
    while (ms > mp && ms[-1] != '\n')
        ms--;
    int mid = atoi(ms);
    /* each location of that mapping: its lines (innermost first) against addr2line -i */
    int checked = 0, chains = 0;
    char *save = NULL, *loc_start = strstr(out, "\nLocations\n");
    CHECK(loc_start != NULL && mp > loc_start);
    char locs[1 << 16];
    snprintf(locs, sizeof locs, "%.*s", (int)(mp - loc_start - 11), loc_start + 11);
    char fns[16][256];
    int lns[16], nl = 0, m = -1;
    unsigned long long addr = 0;
    for (char *l = strtok_r(locs, "\n", &save);; l = strtok_r(NULL, "\n", &save)) {
        int id, mm;
        unsigned long long a;
        char rest[1024] = "";
        int head = l && sscanf(l, " %d: 0x%llx M=%d %1023[^\n]", &id, &a, &mm, rest) >= 3;
        if ((head || !l) && m == mid && nl > 0) { /* the previous location is complete */
            char a2l[8192];
            snprintf(cmd, sizeof cmd, "addr2line -i -f -e %s/tests/symwork_inl.debug 0x%llx",
                     g_build, addr);
            sh(cmd, a2l, sizeof a2l, NULL);
            char *s2 = NULL, *fl;
            int k = 0;
            for (char *fnl = strtok_r(a2l, "\n", &s2); fnl && (fl = strtok_r(NULL, "\n", &s2));
                 fnl = strtok_r(NULL, "\n", &s2), k++) {
                char *colon = strrchr(fl, ':');
                CHECKF(k < nl, "0x%llx: addr2line has more frames than the export (%d):\n%s",
                       addr, nl, out);
                CHECKF(!strcmp(fnl, fns[k]) && colon && atoi(colon + 1) == lns[k],
                       "0x%llx frame %d: export %s:%d, addr2line %s %s", addr, k, fns[k],
                       lns[k], fnl, fl);
            }
            CHECKF(k == nl, "0x%llx: export has %d frames, addr2line %d", addr, nl, k);
            checked++;
            chains += nl > 1;
        }
        if (!l)
            break;
        if (head) {
            m = mm;
            addr = a;
            nl = 0;
        } else {
            snprintf(rest, sizeof rest, "%s", l + strspn(l, " "));
        }
        if (!rest[0] || nl == 16)
            continue;
        /* "function /path/file.c:LINE:COL s=0" */
        char *sp = strchr(rest, ' ');
        char *c2 = sp ? strrchr(sp, ':') : NULL; /* before the column */
        CHECKF(sp && c2, "unexpected location line '%s'", rest);
        *c2 = '\0';
        char *c1 = strrchr(sp, ':');
        CHECKF(c1 != NULL, "unexpected location line '%s'", rest);
        snprintf(fns[nl], sizeof fns[nl], "%.*s", (int)(sp - rest), rest);
        lns[nl++] = atoi(c1 + 1);
    }
    CHECKF(checked >= 3 && chains >= 2, "%d locations checked, %d with inlined frames:\n%s",
           checked, chains, out);
    /* pprof's own line view names the inlined functions at their lines */
    snprintf(cmd, sizeof cmd,
             "cd %s && PPROF_BINARY_PATH=/nonexistent go tool pprof -lines -top d.pb.gz 2>&1", g_dir);
    sh(cmd, out, sizeof out, &st);
    CHECKF(st == 0 && strstr(out, "inl_mix ") && strstr(out, "symwork_inl.c:1"), "%s:\n%s",
           cmd, out);
    printf("%d locations match addr2line -i, %d of them with inlined frames\n", checked, chains);
    char *cut = out; /* the head of pprof's view, for the log */
    for (int i = 0; i < 16 && cut && *cut; i++)
        cut = strchr(cut + 1, '\n');
    printf("%.*s\n", cut ? (int)(cut - out) : (int)strlen(out), out);
}

/* Frames the agent named itself with FLEETPROF_LINES=1 (symwork_inl with its DWARF) carry a
 * line: `top --lines` shows "function file:line", and the pprof export has the line and the
 * function's file; the server's debug file for the same build id (debuginfod) adds the inlined
 * frames the agent does not record. */
static void test_agent_lines_shown(void) {
    const char *o = cli(HTTP_A, "top --service symagent --lines --limit 50", NULL);
    CHECKF(strstr(o, "inl_outer symwork_inl.c:") && strstr(o, "inl_mix symwork_inl.c:"),
           "top --lines:\n%s", o);
    const char *l = strstr(o, "inl_outer symwork_inl.c:");
    int line = atoi(l + strlen("inl_outer symwork_inl.c:"));
    /* the hot loop's lines are those of the inlined helpers (11-20), of the same file */
    CHECKF(line >= 11 && line <= 28, "line %d:\n%s", line, o);
    char args[600], cmd[2048], out[1 << 16];
    snprintf(args, sizeof args, "export --service symagent --format pprof -o %s/e.pb.gz", g_dir);
    cli(HTTP_A, args, NULL);
    snprintf(cmd, sizeof cmd, "cd %s && PPROF_BINARY_PATH=/nonexistent go tool pprof -raw e.pb.gz 2>&1",
             g_dir);
    int st;
    sh(cmd, out, sizeof out, &st);
    CHECKF(st == 0 && strstr(out, " inl_outer ") && strstr(out, "programs/symwork_inl.c:1"),
           "%s:\n%s", cmd, out);
}

static const tr_test_t tests[] = {
    {"named_at_ingest_and_stored", test_named_at_ingest_and_stored},
    {"named_in_top_tree_diff", test_named_in_top_tree_diff},
    {"lines_and_inlines_match_addr2line", test_lines_and_inlines_match_addr2line},
    {"agent_lines_shown", test_agent_lines_shown},
    {"named_in_pprof_export", test_named_in_pprof_export},
    {"server_down_shows_addresses", test_server_down_shows_addresses},
    {"go_pprof_symbolizes_unnamed_export", test_go_pprof_symbolizes_unnamed_export},
    {"symstore_mechanism", test_symstore_mechanism},
    {NULL, NULL},
};

static const tr_test_t tests_after_restart[] = {
    {"names_survive_restart_server_down", test_names_survive_restart_server_down},
    {NULL, NULL},
};

static int produce_dir(rd_kafka_t *rk, const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        if (!strstr(e->d_name, ".fpc"))
            continue;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "rb");
        static uint8_t buf[16 << 20];
        size_t len = f ? fread(buf, 1, sizeof buf, f) : 0;
        if (f)
            fclose(f);
        if (!len ||
            rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(CM_TOPIC_CHUNKS), RD_KAFKA_V_KEY("symwork", 7),
                              RD_KAFKA_V_VALUE(buf, len), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                              RD_KAFKA_V_END))
            return -1;
        n++;
    }
    closedir(d);
    return rd_kafka_flush(rk, 60000) ? -1 : n;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *b = getenv("FLEETPROF_BUILD"), *s = getenv("FLEETPROF_SRC");
    snprintf(g_build, sizeof g_build, "%s", b ? b : ".");
    snprintf(g_src, sizeof g_src, "%s", s ? s : ".");
    at_tmpdir(g_dir, "symsrv");
    char cmd[4096], out[4096], log[512];
    char *bootstrap = g_bootstrap;
    int rc = 1, st;
    pid_t bb = -1;
    rd_kafka_t *rk = NULL;
    sh("readelf -n \"$FLEETPROF_BUILD/tests/symwork.stripped\" | awk '/Build ID/ {print $3}'", g_bid,
       sizeof g_bid, NULL);
    g_bid[strcspn(g_bid, "\n")] = '\0';
    if (strlen(g_bid) < 8) {
        printf("no build id in symwork.stripped\n1 failed\n");
        return 1;
    }
    /* chunks of the stripped program: frames unnamed, with build id and address */
    for (int v = 1; v <= 2; v++) {
        snprintf(cmd, sizeof cmd,
                 "mkdir -p %s/chunks && FLEETPROF_SERVICE=symwork FLEETPROF_VERSION=v%d "
                 "FLEETPROF_OUTPUT=%s/chunks FLEETPROF_COLLECTOR=none FLEETPROF_INTERVAL=500ms "
                 "FLEETPROF_DEBUG_DIRS=/nonexistent LD_PRELOAD=%s/agent/libfleetprof.so "
                 "%s/tests/symwork.stripped 3 >/dev/null",
                 g_dir, v, g_dir, g_build, g_build);
        if (system(cmd) != 0) {
            printf("cannot run symwork.stripped\n1 failed\n");
            return 1;
        }
    }
    snprintf(cmd, sizeof cmd,
             "FLEETPROF_SERVICE=symlines FLEETPROF_VERSION=v1 FLEETPROF_OUTPUT=%s/chunks "
             "FLEETPROF_COLLECTOR=none FLEETPROF_INTERVAL=500ms FLEETPROF_DEBUG_DIRS=/nonexistent "
             "LD_PRELOAD=%s/agent/libfleetprof.so %s/tests/symwork_inl.stripped 2 >/dev/null",
             g_dir, g_build, g_build);
    if (system(cmd) != 0) {
        printf("cannot run symwork_inl.stripped\n1 failed\n");
        return 1;
    }
    snprintf(cmd, sizeof cmd,
             "FLEETPROF_SERVICE=symagent FLEETPROF_VERSION=v1 FLEETPROF_OUTPUT=%s/chunks "
             "FLEETPROF_COLLECTOR=none FLEETPROF_INTERVAL=500ms FLEETPROF_LINES=1 "
             "LD_PRELOAD=%s/agent/libfleetprof.so %s/tests/symwork_inl 1 >/dev/null",
             g_dir, g_build, g_build);
    if (system(cmd) != 0) {
        printf("cannot run symwork_inl\n1 failed\n");
        return 1;
    }
    if (ts_kafka_start(KPORT, 1, NULL, bootstrap, sizeof g_bootstrap)) {
        printf("cannot start Kafka\n1 failed\n");
        return 1;
    }
    snprintf(cmd, sizeof cmd, "%s/chunks", g_dir);
    rk = at_producer(bootstrap);
    int64_t *hi = g_hi;
    if (!rk || produce_dir(rk, cmd) <= 0 || at_high_watermarks(rk, CM_TOPIC_CHUNKS, 1, hi)) {
        printf("cannot produce the chunks\n");
        goto out;
    }
    /* debuginfod serving a directory with only the debug file */
    snprintf(cmd, sizeof cmd, "mkdir -p %s/served && cp %s/tests/symwork.debug %s/tests/symwork_inl.debug "
             "%s/served/ && %s/deploy/debuginfod/start.sh %s/served %d", g_dir, g_build, g_build,
             g_dir, g_src, g_dir, DPORT);
    sh(cmd, out, sizeof out, &st);
    if (st != 0) {
        printf("cannot start debuginfod: %s\n", out);
        goto out;
    }
    char *url = g_url, *dead = g_dead, *storea = g_storea, *cachea = g_cachea;
    char storeb[512], cacheb[512];
    snprintf(url, sizeof g_url, "http://127.0.0.1:%d", DPORT);
    snprintf(dead, sizeof g_dead, "http://127.0.0.1:%d", DEAD_PORT);
    snprintf(storea, sizeof g_storea, "%s/a", g_dir);
    snprintf(storeb, sizeof storeb, "%s/b", g_dir);
    snprintf(cachea, sizeof g_cachea, "%s/cache-a", g_dir);
    snprintf(cacheb, sizeof cacheb, "%s/cache-b", g_dir);
    snprintf(cmd, sizeof cmd, "mkdir -p %s %s", storea, storeb);
    if (system(cmd) != 0)
        goto out;
    const char *xa[] = {"--debuginfod-urls", url, "--debuginfod-cache", cachea, NULL};
    const char *xb[] = {"--debuginfod-urls", dead, "--debuginfod-cache", cacheb, NULL};
    snprintf(log, sizeof log, "%s/agg-a.log", g_dir);
    g_a = at_agg_start(bootstrap, storea, "symsrv-a", HTTP_A, log, xa);
    snprintf(log, sizeof log, "%s/agg-b.log", g_dir);
    bb = at_agg_start(bootstrap, storeb, "symsrv-b", HTTP_B, log, xb);
    if (g_a < 0 || bb < 0 || at_wait_caught_up(storea, CM_TOPIC_CHUNKS, 1, hi, 120) ||
        at_wait_caught_up(storeb, CM_TOPIC_CHUNKS, 1, hi, 120)) {
        printf("aggregators did not catch up; see %s/agg-*.log\n", g_dir);
        goto out;
    }
    /* the first table, then A restarted for the second (each only when selected) */
    int after = argc < 2;
    for (int i = 1; i < argc; i++)
        after |= !strcmp(argv[i], tests_after_restart[0].name);
    rc = 0;
    if (argc < 2 || argc > 1 + after)
        rc = tr_main(tests, argc, argv);
    if (after && restart_a_server_down()) {
        printf("cannot restart aggregator A; see %s/agg-a2.log\n", g_dir);
        rc = 1;
    } else if (after) {
        rc |= tr_main(tests_after_restart, argc, argv);
    }
out:
    if (g_a > 0)
        at_agg_stop(g_a, SIGTERM, 30);
    if (bb > 0)
        at_agg_stop(bb, SIGTERM, 30);
    if (rk)
        rd_kafka_destroy(rk);
    snprintf(cmd, sizeof cmd, "%s/deploy/debuginfod/stop.sh %d >/dev/null 2>&1", g_src, DPORT);
    if (system(cmd) != 0)
        fprintf(stderr, "debuginfod stop failed\n");
    ts_kafka_stop(KPORT, 0);
    if (rc == 0) {
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", g_dir);
    }
    return rc;
}
