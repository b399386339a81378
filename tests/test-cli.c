/* The fleetprof CLI as a user runs it: `fleetprof fold` on chunk files and directories, bad
 * flags and corrupt files. Runs the built binary ($FLEETPROF_BUILD/cli/fleetprof). */
#include "cm/chunk.h"
#include "support/chunkgen.h"
#include "support/runner.h"
#include "cm/wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

static void write_chunk(const char *name, const cm_chunk_t *c) {
    uint8_t *buf;
    size_t len;
    char err[256], path[512];
    CHECK(cm_chunk_encode(c, &buf, &len, err, sizeof err) == 0);
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(buf, 1, len, f) == len);
    fclose(f);
    free(buf);
}

/* Runs a shell command, captures stdout into out (NUL-terminated), returns the exit status. */
static int run(const char *cmd, char *out, size_t size) {
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL);
    size_t n = fread(out, 1, size - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const char *bin(void) {
    static char path[512];
    snprintf(path, sizeof path, "%s/cli/fleetprof", getenv("FLEETPROF_BUILD"));
    return path;
}

static void setup(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/fp-test-cli-XXXXXX");
    CHECK(mkdtemp(tmpdir) != NULL);
}

/* The folded name of a stack as fold prints it (spaces become '_'). */
static void folded(const cm_dict_t *d, uint32_t st, char *out, size_t size) {
    size_t pos = 0;
    for (uint32_t k = d->stack_off[st]; k < d->stack_off[st + 1]; k++) {
        uint32_t loc = d->stack_frames[k];
        const char *name = d->strings[d->function_name[d->location_function[loc]]].ptr;
        pos += (size_t)snprintf(out + pos, size - pos, "%s%s", pos ? ";" : "", name);
    }
    /* names keep their spaces (flame graph tools split the value off at the last space) */
}

static void test_fold_sums_by_stack(void) {
    setup();
    ts_gen_params_t p = ts_gen_realistic();
    p.samples = 3000;
    p.stacks = 50;
    p.types_mask = (1u << CM_EV_CPU) | (1u << CM_EV_ALLOC);
    cm_chunk_t *a = ts_gen_chunk(&p, 1);
    write_chunk("a.fpc", a);
    write_chunk("b.fpc", a); /* the same chunk twice: every weight doubles */
    static char out[1 << 22];
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "%s fold %s/a.fpc %s/b.fpc", bin(), tmpdir, tmpdir);
    CHECK_EQ(run(cmd, out, sizeof out), 0);
    /* every sample's stack appears with twice its summed weight */
    const cm_samples_t *s = &a->samples[CM_EV_CPU];
    uint64_t total = 0;
    for (uint32_t i = 0; i < s->n; i++)
        total += s->weight[i];
    uint64_t printed = 0;
    int lines = 0;
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
        char *sp = strrchr(line, ' ');
        CHECK(sp != NULL);
        printed += strtoull(sp + 1, NULL, 10);
        lines++;
    }
    CHECK_EQ(printed, 2 * total);
    /* one stack checked exactly */
    snprintf(cmd, sizeof cmd, "%s fold %s/a.fpc", bin(), tmpdir);
    CHECK_EQ(run(cmd, out, sizeof out), 0);
    char name[16384];
    folded(&a->dict, s->stack[0], name, sizeof name);
    uint64_t want = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        char other[16384];
        folded(&a->dict, s->stack[i], other, sizeof other);
        if (!strcmp(other, name))
            want += s->weight[i];
    }
    char needle[16500];
    snprintf(needle, sizeof needle, "%s %llu\n", name, (unsigned long long)want);
    CHECKF(strstr(out, needle) != NULL, "missing line '%s'", needle);
    /* --type alloc gives bytes; a directory reads its *.fpc files */
    snprintf(cmd, sizeof cmd, "%s fold --type alloc %s", bin(), tmpdir);
    CHECK_EQ(run(cmd, out, sizeof out), 0);
    uint64_t abytes = 0, aprinted = 0;
    for (uint32_t i = 0; i < a->samples[CM_EV_ALLOC].n; i++)
        abytes += a->samples[CM_EV_ALLOC].weight[i];
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
        aprinted += strtoull(strrchr(line, ' ') + 1, NULL, 10);
    CHECK_EQ(aprinted, 2 * abytes);
    ts_gen_free(a);
}

static void test_fold_corrupt_file(void) {
    setup();
    ts_gen_params_t p = ts_gen_realistic();
    p.samples = 100;
    cm_chunk_t *a = ts_gen_chunk(&p, 2);
    write_chunk("good.fpc", a);
    char path[512], cmd[4096], out[65536];
    snprintf(path, sizeof path, "%s/bad.fpc", tmpdir);
    FILE *f = fopen(path, "wb");
    fputs("this is not a chunk at all, just text", f);
    fclose(f);
    /* and a real chunk cut short */
    uint8_t *buf;
    size_t len;
    char err[256], cut[512];
    CHECK(cm_chunk_encode(a, &buf, &len, err, sizeof err) == 0);
    snprintf(cut, sizeof cut, "%s/cut.fpc", tmpdir);
    f = fopen(cut, "wb");
    fwrite(buf, 1, len / 2, f);
    fclose(f);
    free(buf);
    snprintf(cmd, sizeof cmd, "%s fold %s/good.fpc %s 2>%s/err.txt", bin(), tmpdir, path, tmpdir);
    CHECK_EQ(run(cmd, out, sizeof out), 1);
    CHECK(strlen(out) > 0); /* the good file still printed */
    snprintf(cmd, sizeof cmd, "cat %s/err.txt", tmpdir);
    run(cmd, out, sizeof out);
    CHECKF(strstr(out, "bad.fpc: EMAGIC: bad magic") && strchr(out, '\n') == strrchr(out, '\n'),
           "one stderr line naming the file and the reason: %s", out);
    snprintf(cmd, sizeof cmd, "%s fold %s 2>&1 >/dev/null", bin(), cut);
    CHECK_EQ(run(cmd, out, sizeof out), 1);
    CHECKF(strstr(out, "cut.fpc: ETRUNCATED: frame truncated"), "%s", out);
    ts_gen_free(a);
}

static void test_fold_usage_errors(void) {
    char cmd[4096], out[4096];
    snprintf(cmd, sizeof cmd, "%s fold --type heap /dev/null 2>&1", bin());
    CHECK_EQ(run(cmd, out, sizeof out), 2);
    CHECK(strstr(out, "'heap'"));
    snprintf(cmd, sizeof cmd, "%s fold 2>&1", bin());
    CHECK_EQ(run(cmd, out, sizeof out), 2);
    snprintf(cmd, sizeof cmd, "%s fold /nonexistent/x.fpc 2>&1", bin());
    CHECK_EQ(run(cmd, out, sizeof out), 1);
    CHECK(strstr(out, "/nonexistent/x.fpc") && strstr(out, "No such file"));
    /* issue 35: nothing to fold is an error that says why, not an empty success */
    setup();
    snprintf(cmd, sizeof cmd, "%s fold %s 2>&1", bin(), tmpdir);
    CHECK_EQ(run(cmd, out, sizeof out), 1);
    CHECKF(strstr(out, "no chunk files (*.fpc)") && strstr(out, tmpdir), "%s", out);
    ts_gen_params_t p = ts_gen_realistic();
    p.samples = 50;
    p.types_mask = 1u << CM_EV_CPU;
    cm_chunk_t *a = ts_gen_chunk(&p, 3);
    write_chunk("cpu.fpc", a);
    ts_gen_free(a);
    snprintf(cmd, sizeof cmd, "%s fold --type lock %s 2>&1", bin(), tmpdir);
    CHECK_EQ(run(cmd, out, sizeof out), 1);
    CHECKF(strstr(out, "no lock samples"), "%s", out);
    snprintf(cmd, sizeof cmd, "%s fold %s/cpu.fpc >/dev/null", bin(), tmpdir);
    CHECK_EQ(run(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "%s frobnicate 2>&1", bin());
    CHECK_EQ(run(cmd, out, sizeof out), 2);
    CHECK(strstr(out, "unknown command 'frobnicate'"));
    snprintf(cmd, sizeof cmd, "%s --version", bin());
    CHECK_EQ(run(cmd, out, sizeof out), 0);
    char want[64]; /* the codec's own version, which a reader of the output must know */
    snprintf(want, sizeof want, "chunk format %d.%d", CM_FORMAT_MAJOR, CM_FORMAT_MINOR);
    CHECKF(strstr(out, want), "%s", out);
    /* the daemons too (issue 35: they rejected --version as an unknown option) */
    static const char *const daemons[] = {"collector/fleetprof-collector",
                                          "aggregator/fleetprof-aggregator"};
    for (int i = 0; i < 2; i++) {
        snprintf(cmd, sizeof cmd, "%s/%s --version 2>&1", getenv("FLEETPROF_BUILD"), daemons[i]);
        CHECKF(run(cmd, out, sizeof out) == 0, "%s: %s", daemons[i], out);
        CHECKF(strstr(out, strrchr(daemons[i], '/') + 1) && strstr(out, FLEETPROF_VERSION_STRING) &&
                   strstr(out, want),
               "%s --version: %s", daemons[i], out);
    }
}

/* Counts the lines of s. */
static int nlines(const char *s) {
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* Issue 35: a program shorter than one interval under `fleetprof run` with no collector lost
 * its profile without a word. Its only chunk is cut at exit: the agent must say, in one
 * stderr line, that the collector cannot be reached and the profile is lost. */
static void test_run_unreachable_short(void) {
    char cmd[4096], out[8192];
    const char *b = getenv("FLEETPROF_BUILD");
    snprintf(cmd, sizeof cmd,
             "env -u FLEETPROF_OUTPUT FLEETPROF_COLLECTOR=/tmp/fp-nope-%d.sock %s run --service "
             "shortsvc -- %s/tests/fp-work cpuwall 0.5 2>&1 >/dev/null",
             (int)getpid(), bin(), b);
    CHECK_EQ(run(cmd, out, sizeof out), 0);
    printf("explicit socket: %s", out);
    CHECKF(nlines(out) == 1, "want exactly one stderr line, got:\n%s", out);
    CHECKF(strstr(out, "cannot reach the collector") && strstr(out, "is lost") &&
               strstr(out, "/tmp/fp-nope-") && strstr(out, "No such file"),
           "the line must say what is lost, where and why:\n%s", out);
    /* the default socket, absent on this machine: the same line */
    if (access(CM_DEFAULT_SOCKET, F_OK) == 0)
        return;
    snprintf(cmd, sizeof cmd,
             "env -u FLEETPROF_OUTPUT -u FLEETPROF_COLLECTOR %s run --service shortsvc -- "
             "%s/tests/fp-work cpuwall 0.5 2>&1 >/dev/null", bin(), b);
    CHECK_EQ(run(cmd, out, sizeof out), 0);
    CHECKF(nlines(out) == 1 && strstr(out, "cannot reach the collector") &&
               strstr(out, CM_DEFAULT_SOCKET),
           "default socket: %s", out);
    /* with files requested and no collector on the machine, nothing is lost: silent */
    setup();
    snprintf(cmd, sizeof cmd,
             "env -u FLEETPROF_COLLECTOR %s run --service shortsvc --output %s/out -- "
             "%s/tests/fp-work cpuwall 0.5 2>&1 >/dev/null", bin(), tmpdir, b);
    CHECK_EQ(run(cmd, out, sizeof out), 0);
    CHECKF(out[0] == 0, "the agent complained with files requested:\n%s", out);
}

/* Issue 35: the agent names a function without its symbol version. libc's debug file (.symtab)
 * says __libc_start_main@@GLIBC_2.34 where its .dynsym says __libc_start_main; the chunk must
 * carry the plain name, or one function is two in every view. Checked on the chunk itself
 * (the codec), not through fold, which drops versions of older chunks too. */
static void test_agent_names_unversioned(void) {
    setup();
    char cmd[4096], out[8192];
    snprintf(cmd, sizeof cmd,
             "%s run --service vers --collector none --output %s -- %s/tests/fp-work cpuwall 0.3 "
             "2>&1 >/dev/null", bin(), tmpdir, getenv("FLEETPROF_BUILD"));
    CHECK_EQ(run(cmd, out, sizeof out), 0);
    snprintf(cmd, sizeof cmd, "ls %s/*.fpc", tmpdir);
    CHECK_EQ(run(cmd, out, sizeof out), 0);
    int libc_main = 0, files = 0;
    for (char *path = strtok(out, "\n"); path; path = strtok(NULL, "\n")) {
        FILE *f = fopen(path, "rb");
        CHECK(f != NULL);
        static uint8_t buf[1 << 24];
        size_t len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        cm_chunk_t *c = NULL;
        char err[256];
        CHECKF(cm_chunk_decode(buf, len, &c, err, sizeof err) == 0, "%s: %s", path, err);
        files++;
        for (uint32_t i = 1; i < c->dict.n_functions; i++) {
            const char *name = c->dict.strings[c->dict.function_name[i]].ptr;
            CHECKF(!strstr(name, "@GLIBC") && !strstr(name, "@@"), "versioned name '%s'", name);
            libc_main |= !strcmp(name, "__libc_start_main");
        }
        cm_chunk_free(c);
    }
    printf("agent_names_unversioned: %d chunk files, __libc_start_main named: %d\n", files,
           libc_main);
    CHECK(files > 0);
    CHECKF(libc_main, "no frame named __libc_start_main (every stack starts there)");
}

static const tr_test_t tests[] = {
    {"agent_names_unversioned", test_agent_names_unversioned},
    {"run_unreachable_short", test_run_unreachable_short},
    {"fold_sums_by_stack", test_fold_sums_by_stack},
    {"fold_corrupt_file", test_fold_corrupt_file},
    {"fold_usage_errors", test_fold_usage_errors},
    {0, 0},
};
TR_MAIN(tests)
