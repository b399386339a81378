/* The pprof export read by the real `go tool pprof`: its top functions (names and flat values)
 * must match ours; labels trace_id/span_id must be there. `go` must be on PATH: without it the
 * test FAILS (the acceptance requires the real reader). */
#include "query.h"
#include "support/runner.h"

#include "cm/error.h"

#include <math.h>
#include <stdarg.h>

static char *run(const char *fmt, ...) {
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    FILE *f = popen(cmd, "r");
    CHECK(f);
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    size_t k;
    while ((k = fread(out + n, 1, cap - n - 1, f)) > 0) {
        n += k;
        if (n + 1 == cap)
            out = realloc(out, cap *= 2);
    }
    out[n] = '\0';
    int st = pclose(f);
    CHECKF(st == 0, "`%s` failed (status %d):\n%s", cmd, st, out);
    return out;
}

static void need_go(void) {
    FILE *f = popen("command -v go", "r");
    char buf[512] = "";
    CHECK(f);
    if (!fgets(buf, sizeof buf, f))
        buf[0] = '\0';
    pclose(f);
    CHECKF(buf[0] == '/', "`go` is not on PATH: install Go (deploy/install-deps.sh) so that the real "
                          "`go tool pprof` can read our export; this test does not skip");
    if (!getenv("HOME"))
        setenv("HOME", "/tmp", 1);
    setenv("GOTOOLCHAIN", "local", 1); /* never download a toolchain */
    setenv("PPROF_BINARY_PATH", "/nonexistent", 1);
    setenv("PPROF_TMPDIR", "/tmp", 1);
}

/* A profile with distinct self values (ms scale), modules with build ids, recursion, and span
 * contexts on some rows. */
static agg_profile_t *make_profile(void) {
    agg_profile_t *p = agg_profile_new(CM_EV_CPU);
    const char *names[] = {"main", "serve", "parse_json", "compress", "hash_table_get", "memcpy",
                           "malloc", "render"};
    const char *mods[] = {"svc", "svc", "svc", "libz.so.1", "svc", "libc.so.6", "libc.so.6", "svc"};
    uint32_t f[8];
    for (int i = 0; i < 8; i++)
        f[i] = (uint32_t)agg_profile_frame(p, names[i], mods[i], i == 3 ? "00ff" : "abcdef0123",
                                           0x400000 + 0x100 * (uint64_t)i);
    agg_profile_replicate(p, "r0", 10);
    agg_profile_replicate(p, "r1", 10);
    p->time_start_ns = 1700000000000000000ull;
    p->time_end_ns = p->time_start_ns + 20000000000ull;
    uint8_t trace[16], span[8];
    for (int i = 0; i < 16; i++)
        trace[i] = (uint8_t)(0x10 + i);
    for (int i = 0; i < 8; i++)
        span[i] = (uint8_t)(0xa0 + i);
    uint32_t ctx = (uint32_t)agg_profile_context(p, trace, span);
    for (int i = 0; i < 16; i++)
        trace[i] = (uint8_t)(0x20 + i);
    for (int i = 0; i < 8; i++)
        span[i] = (uint8_t)(0xb0 + i);
    uint32_t ctx2 = (uint32_t)agg_profile_context(p, trace, span);
    struct {
        uint32_t fr[5], n;
        uint64_t ms;
        uint32_t ctx;
    } rows[] = {
        {{f[0], f[1], f[2]}, 3, 410, 0},
        {{f[0], f[1], f[2], f[5]}, 4, 230, ctx},
        {{f[0], f[1], f[3]}, 3, 170, 0},
        {{f[0], f[1], f[4]}, 3, 90, ctx2},
        {{f[0], f[1], f[4], f[4]}, 4, 40, 0}, /* recursion */
        {{f[0], f[6]}, 2, 55, 0},
        {{f[0], f[7]}, 2, 20, 0},
        {{f[0]}, 1, 5, 0},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        uint32_t st = (uint32_t)agg_profile_stack(p, rows[i].fr, rows[i].n);
        /* split over both replicates, with the context on one half */
        CHECK_EQ(agg_profile_add(p, st, rows[i].ms * 600000, rows[i].ms * 600, 0, rows[i].ctx), 0);
        CHECK_EQ(agg_profile_add(p, st, rows[i].ms * 400000, rows[i].ms * 400, 1, 0), 0);
    }
    return p;
}

static void test_pprof_top_matches(void) {
    need_go();
    agg_profile_t *p = make_profile();
    uint8_t *buf;
    size_t len;
    CHECK_EQ(agg_export_pprof(p, &buf, &len), 0);
    CHECK(len > 20 && buf[0] == 0x1f && buf[1] == 0x8b); /* gzip */
    char path[] = "/tmp/fleetprof-pprof-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, buf, len) == (ssize_t)len);
    close(fd);
    free(buf);
    char *out = run("go tool pprof -top -nodecount=20 -unit=ms %s 2>&1", path);
    printf("%s", out);
    CHECKF(strstr(out, "Type: cpu") != NULL, "no 'Type: cpu' in:\n%s", out);
    /* our top by self */
    agg_top_t t;
    CHECK_EQ(agg_top_compute(p, AGG_SORT_SELF, 20, &t), 0);
    const char *line = strstr(out, "flat%");
    CHECK(line);
    line = strchr(line, '\n') + 1;
    size_t i = 0;
    for (; *line && i < t.n; i++) {
        char fs[64], cs[64], name[256];
        CHECKF(sscanf(line, " %63s %*s %*s %63s %*s %255s", fs, cs, name) == 3,
               "unparsed line: %.80s", line);
        double flat = strtod(fs, NULL), cum = strtod(cs, NULL); /* "410ms" or "0" */
        const agg_top_entry_t *e = &t.entries[i];
        CHECKF(strcmp(name, p->frames[e->frame].name) == 0, "row %zu: pprof %s, ours %s", i, name,
               p->frames[e->frame].name);
        CHECKF(fabs(flat - (double)e->self / 1e6) < 1e-6, "%s: flat %g ms, ours %g", name, flat,
               (double)e->self / 1e6);
        CHECKF(fabs(cum - (double)e->total / 1e6) < 1e-6, "%s: cum %g ms, ours %g", name, cum,
               (double)e->total / 1e6);
        line = strchr(line, '\n');
        line = line ? line + 1 : "";
    }
    CHECK_EQ(i, t.n);
    CHECK_EQ(t.n, 8);
    free(out);
    /* the count sample type: samples */
    out = run("go tool pprof -top -nodecount=3 -sample_index=samples %s 2>&1", path);
    CHECKF(strstr(out, "Showing nodes accounting for 1020") != NULL ||
               strstr(out, "of 1020 total") != NULL,
           "samples total not 1020:\n%s", out);
    free(out);
    /* labels */
    out = run("go tool pprof -tags %s 2>&1", path);
    printf("%s", out);
    CHECKF(strstr(out, "trace_id") && strstr(out, "101112131415161718191a1b1c1d1e1f") &&
               strstr(out, "span_id") && strstr(out, "a0a1a2a3a4a5a6a7"),
           "labels missing:\n%s", out);
    /* every context's labels whole: the first span id was followed by the next trace id's
     * first digits when the contexts' strings overlapped */
    CHECKF(strstr(out, ": a0a1a2a3a4a5a6a7\n") && strstr(out, ": b0b1b2b3b4b5b6b7\n") &&
               strstr(out, ": 202122232425262728292a2b2c2d2e2f\n") &&
               strstr(out, ": 101112131415161718191a1b1c1d1e1f\n"),
           "a label value is not exactly a trace or span id:\n%s", out);
    free(out);
    /* mappings with build ids */
    out = run("go tool pprof -raw %s 2>&1", path);
    CHECKF(strstr(out, "libz.so.1") && strstr(out, "00ff") && strstr(out, "abcdef0123"),
           "mappings missing:\n%s", out);
    free(out);
    agg_top_free(&t);
    unlink(path);
    agg_profile_free(p);
}

/* Every event type maps to the sample types pprof conventions use. */
static void test_pprof_sample_types(void) {
    const char *n[2], *u[2];
    agg_pprof_sample_types(CM_EV_ALLOC, n, u);
    CHECK(!strcmp(n[0], "alloc_objects") && !strcmp(u[0], "count") && !strcmp(n[1], "alloc_space") &&
          !strcmp(u[1], "bytes"));
    agg_pprof_sample_types(CM_EV_LOCK, n, u);
    CHECK(!strcmp(n[0], "contentions") && !strcmp(n[1], "delay") && !strcmp(u[1], "nanoseconds"));
    agg_pprof_sample_types(CM_EV_INUSE, n, u);
    CHECK(!strcmp(n[1], "inuse_space") && !strcmp(u[1], "bytes"));
    agg_pprof_sample_types(CM_EV_WALL, n, u);
    CHECK(!strcmp(n[1], "wall") && !strcmp(u[1], "nanoseconds"));
    /* an alloc profile is read with its units */
    need_go();
    agg_profile_t *p = agg_profile_new(CM_EV_ALLOC);
    uint32_t f[2] = {(uint32_t)agg_profile_frame(p, "main", "svc", NULL, 0x10),
                     (uint32_t)agg_profile_frame(p, "make_buffer", "svc", NULL, 0x20)};
    agg_profile_replicate(p, "r", 1);
    CHECK_EQ(agg_profile_add(p, (uint32_t)agg_profile_stack(p, f, 2), 3u << 20, 3000, 0, 0), 0);
    uint8_t *buf;
    size_t len;
    CHECK_EQ(agg_export_pprof(p, &buf, &len), 0);
    char path[] = "/tmp/fleetprof-pprof-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && write(fd, buf, len) == (ssize_t)len);
    close(fd);
    free(buf);
    char *out = run("go tool pprof -top %s 2>&1", path);
    CHECKF(strstr(out, "Type: alloc_space") && strstr(out, "3MB") && strstr(out, "make_buffer"),
           "%s", out);
    free(out);
    unlink(path);
    agg_profile_free(p);
}

/* Frames with source lines, two of them inlined into their caller: one location with three
 * lines (innermost first), functions with their file, read back by go tool pprof -raw; a
 * function at two lines is one function. */
static void test_pprof_lines_and_inlines(void) {
    need_go();
    agg_profile_t *p = agg_profile_new(CM_EV_CPU);
    uint32_t f[5] = {
        (uint32_t)agg_profile_frame_src(p, "main m.c:9", "svc", "ab", 0x1000, "main", "/s/m.c", 9, 0),
        (uint32_t)agg_profile_frame_src(p, "outer o.c:27", "svc", "ab", 0x2040, "outer", "/s/o.c", 27, 0),
        (uint32_t)agg_profile_frame_src(p, "round o.c:19", "svc", "ab", 0x2040, "round", "/s/o.c", 19, 1),
        (uint32_t)agg_profile_frame_src(p, "mix i.h:12", "svc", "ab", 0x2040, "mix", "/s/i.h", 12, 1),
        (uint32_t)agg_profile_frame_src(p, "main m.c:11", "svc", "ab", 0x1010, "main", "/s/m.c", 11, 0),
    };
    uint32_t s1[4] = {f[0], f[1], f[2], f[3]}, s2[2] = {f[4], f[1]};
    agg_profile_replicate(p, "r", 1);
    CHECK_EQ(agg_profile_add(p, (uint32_t)agg_profile_stack(p, s1, 4), 70000000, 7000, 0, 0), 0);
    CHECK_EQ(agg_profile_add(p, (uint32_t)agg_profile_stack(p, s2, 2), 30000000, 3000, 0, 0), 0);
    uint8_t *buf;
    size_t len;
    CHECK_EQ(agg_export_pprof(p, &buf, &len), 0);
    char path[] = "/tmp/fleetprof-pprof-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0 && write(fd, buf, len) == (ssize_t)len);
    close(fd);
    free(buf);
    char *out = run("go tool pprof -raw %s 2>&1", path);
    CHECKF(strstr(out, ": 0x2040 M=1 mix /s/i.h:12:0 s=0\n"
                       "             round /s/o.c:19:0 s=0\n"
                       "             outer /s/o.c:27:0 s=0\n"),
           "one location, innermost line first:\n%s", out);
    CHECKF(strstr(out, ": 0x1000 M=1 main /s/m.c:9:0") && strstr(out, ": 0x1010 M=1 main /s/m.c:11:0"),
           "%s", out);
    free(out);
    out = run("go tool pprof -top %s 2>&1", path);
    /* flat: mix 70 ms (the leaf of the inlined chain), outer 30 ms; main once, 100 ms cum */
    CHECKF(strstr(out, "70ms 70.00% 70.00%       70ms 70.00%  mix") &&
               strstr(out, "30ms 30.00%   100%      100ms   100%  outer") &&
               strstr(out, "0     0%   100%      100ms   100%  main"),
           "%s", out);
    free(out);
    unlink(path);
    agg_profile_free(p);
}

static const tr_test_t tests[] = {
    {"pprof_lines_and_inlines", test_pprof_lines_and_inlines},
    {"pprof_top_matches", test_pprof_top_matches},
    {"pprof_sample_types", test_pprof_sample_types},
    {0},
};

TR_MAIN(tests)
