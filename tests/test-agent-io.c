/* Slow I/O acceptance tests (issue 4): io_work under LD_PRELOAD=libfleetprof.so. Calls >= the
 * threshold are IO events with duration, bytes, io kind, fd kind and path/peer; shorter calls
 * above the floor are aggregates. */
#include "agent-common.h"

static char envbuf[4200], pre[4200];

static const char *row_target(const cm_chunk_t *c, const cm_samples_t *s, uint32_t r) {
    uint32_t t = CM_COL(s, target, r);
    return t ? c->dict.strings[t].ptr : "";
}

/* Pipe reads that wait ~25 ms: one event each, durations matching the program's clock, fd
 * kind PIPE, io kind READ, target "pipe:[inode]", bytes 1. */
static void test_io_pipe(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("io_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), NULL};
    const char *argv[] = {prog, "pipe", "5", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    uint64_t slow = out_u64(out, "slow="), slow_ns = out_u64(out, "slow_ns=");
    chunks_t *cs = load(dir);
    tot_t ev = total_flags(cs, CM_EV_IO, "slow_pipe_site", 0, CM_SF_AGGREGATE);
    uint64_t good = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *s = &cs->c[i]->samples[CM_EV_IO];
        for (uint32_t r = 0; r < s->n; r++)
            if (!(CM_COL(s, flags, r) & CM_SF_AGGREGATE) &&
                !strcmp(leaf_fn(cs->c[i], s->stack[r]), "slow_pipe_site"))
                good += CM_COL(s, fd_kind, r) == CM_FD_PIPE &&
                        CM_COL(s, io_kind, r) == CM_IO_READ &&
                        CM_COL(s, size, r) == 1 &&
                        !strncmp(row_target(cs->c[i], s, r), "pipe:[", 6);
    }
    printf("  program %llu slow reads %.4g ns; agent %llu events %.4g ns, %llu fully described\n",
           (unsigned long long)slow, (double)slow_ns, (unsigned long long)ev.samples,
           (double)ev.weight, (unsigned long long)good);
    CHECK(slow >= 100);
    CHECKF(fabs((double)ev.samples / (double)slow - 1) < 0.1, "events %llu vs %llu",
           (unsigned long long)ev.samples, (unsigned long long)slow);
    CHECKF(fabs((double)ev.weight / (double)slow_ns - 1) < 0.1, "ns %.4g vs %.4g",
           (double)ev.weight, (double)slow_ns);
    CHECK_EQ(good, ev.samples);
    free_chunks(cs);
    rmrf(dir);
}

/* File writes and fsyncs (threshold lowered to 10 us): events carry the file's path, fd kind
 * FILE, io kinds WRITE and SYNC. */
static void test_io_file(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("io_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_IO_THRESHOLD=0.01",
                         "FLEETPROF_IO_FLOOR=0", NULL};
    const char *argv[] = {prog, "file", "2", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    const char *p = strstr(out, "path=");
    CHECK(p != NULL);
    char path[256];
    snprintf(path, sizeof path, "%.*s", (int)strcspn(p + 5, "\n"), p + 5);
    chunks_t *cs = load(dir);
    uint64_t writes = 0, syncs = 0, other = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *s = &cs->c[i]->samples[CM_EV_IO];
        for (uint32_t r = 0; r < s->n; r++) {
            if ((CM_COL(s, flags, r) & CM_SF_AGGREGATE) ||
                !stack_has(&cs->c[i]->dict, s->stack[r], "file_site"))
                continue;
            int ok = CM_COL(s, fd_kind, r) == CM_FD_FILE &&
                     !strcmp(row_target(cs->c[i], s, r), path);
            writes += ok && CM_COL(s, io_kind, r) == CM_IO_WRITE && CM_COL(s, size, r) == 4096;
            syncs += ok && CM_COL(s, io_kind, r) == CM_IO_SYNC;
            other += !ok;
        }
    }
    printf("  %s: %llu write events, %llu sync events, %llu other\n", path,
           (unsigned long long)writes, (unsigned long long)syncs, (unsigned long long)other);
    CHECK(writes + syncs >= 20);
    CHECK(syncs >= 1);
    CHECK_EQ(other, 0);
    free_chunks(cs);
    rmrf(dir);
}

/* A TCP request/response with a 15 ms server delay: recv events carry the peer address. */
static void test_io_socket(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("io_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), NULL};
    const char *argv[] = {prog, "socket", "3", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    const char *p = strstr(out, "peer=");
    CHECK(p != NULL);
    char peer[64];
    snprintf(peer, sizeof peer, "%.*s", (int)strcspn(p + 5, "\n"), p + 5);
    chunks_t *cs = load(dir);
    uint64_t ok = 0, n = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *s = &cs->c[i]->samples[CM_EV_IO];
        for (uint32_t r = 0; r < s->n; r++) {
            if ((CM_COL(s, flags, r) & CM_SF_AGGREGATE) ||
                strcmp(leaf_fn(cs->c[i], s->stack[r]), "sock_site"))
                continue;
            n++;
            ok += CM_COL(s, fd_kind, r) == CM_FD_SOCKET && CM_COL(s, io_kind, r) == CM_IO_READ &&
                  !strcmp(row_target(cs->c[i], s, r), peer);
        }
    }
    printf("  peer %s: %llu of %llu sock_site events described\n", peer, (unsigned long long)ok,
           (unsigned long long)n);
    CHECK(n >= 50);
    CHECK_EQ(ok, n);
    free_chunks(cs);
    rmrf(dir);
}

/* Reads waiting ~100 us are aggregated (count, total ns) and not shipped one by one. */
static void test_io_aggregates(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("io_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), NULL};
    const char *argv[] = {prog, "fast", "3", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    uint64_t reads = out_u64(out, "reads=");
    chunks_t *cs = load(dir);
    tot_t ag = total_flags(cs, CM_EV_IO, "fast_site", CM_SF_AGGREGATE, 0);
    tot_t ev = total_flags(cs, CM_EV_IO, "fast_site", 0, CM_SF_AGGREGATE);
    uint64_t n = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *s = &cs->c[i]->samples[CM_EV_IO];
        for (uint32_t r = 0; r < s->n; r++)
            if ((CM_COL(s, flags, r) & CM_SF_AGGREGATE) &&
                stack_has(&cs->c[i]->dict, s->stack[r], "fast_site")) {
                n += cm_samples_count(s, r);
                CHECK(CM_COL(s, fd_kind, r) == CM_FD_PIPE);
            }
    }
    printf("  %llu reads; aggregated %.0f (%.4g ns in %llu rows); %llu events\n",
           (unsigned long long)reads, n / 1000.0, (double)ag.weight,
           (unsigned long long)ag.samples, (unsigned long long)ev.samples);
    CHECK(n / 1000 >= 1000 && n / 1000 <= reads);
    CHECK(ag.samples <= 2ull * (uint64_t)cs->n + 2);
    CHECK(ev.samples * 100 < n / 1000);
    free_chunks(cs);
    rmrf(dir);
}

/* FLEETPROF_IO=0: no IO rows at all. */
static void test_io_off(void) {
    char *dir = mkout(), prog[4096], out[4096];
    prog_path("io_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), "FLEETPROF_IO=0", NULL};
    const char *argv[] = {prog, "pipe", "1", NULL};
    int st = run(env, argv, 60, out, sizeof out);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d: %s", st, out);
    chunks_t *cs = load(dir);
    CHECK(cs->n >= 1);
    CHECK_EQ(total(cs, CM_EV_IO, NULL, 0).samples, 0);
    free_chunks(cs);
    rmrf(dir);
}

static const tr_test_t tests[] = {
    {"io_pipe", test_io_pipe},         {"io_file", test_io_file},
    {"io_socket", test_io_socket},     {"io_aggregates", test_io_aggregates},
    {"io_off", test_io_off},           {NULL, NULL},
};
TR_MAIN(tests)
