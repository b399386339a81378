/* Slow I/O acceptance tests (issue 4): io_work under LD_PRELOAD=libfleetprof.so. Calls >= the
 * threshold are IO events with duration, bytes, io kind, fd kind and path/peer; shorter calls
 * above the floor are aggregates.
 *
 * The acceptance item, at the default threshold (10 ms): a slow pipe reader (io_pipe),
 * a slow socket peer on loopback (io_socket) and an fsync on a file (io_fsync) each produce
 * events with the right kind, bytes and path or peer. Every program runs under a time limit:
 * a hang is killed and fails the test. */
#include "agent-common.h"

static char envbuf[4200], pre[4200];

static const char *row_target(const cm_chunk_t *c, const cm_samples_t *s, uint32_t r) {
    uint32_t t = CM_COL(s, target, r);
    return t ? c->dict.strings[t].ptr : "";
}

/* Runs io_work MODE ARG under the agent, chunks to dir, with up to two more settings (NULL:
 * none), killed after limit_s seconds; checks that it exited 0. Its output is in out. */
static void io_run(const char *dir, const char *mode, const char *arg, int limit_s,
                   const char *e1, const char *e2, char *out, size_t size) {
    char prog[4096];
    prog_path("io_work", prog, sizeof prog);
    const char *env[] = {preload(pre, sizeof pre), ENV_OUT(dir), e1, e1 ? e2 : NULL, NULL};
    const char *argv[] = {prog, mode, arg, NULL};
    int st = run(env, argv, limit_s, out, size);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "io_work %s: %s: %s", mode,
           st == -1 ? "hung: killed at the time limit" : "did not exit 0", out);
}

/* Pipe reads that wait ~25 ms: one event each, durations matching the program's clock, fd
 * kind PIPE, io kind READ, target "pipe:[INODE]" with the pipe's own inode, bytes 1. */
static void test_io_pipe(void) {
    char *dir = mkout(), out[4096];
    io_run(dir, "pipe", "5", 60, NULL, NULL, out, sizeof out);
    uint64_t slow = out_u64(out, "slow="), slow_ns = out_u64(out, "slow_ns=");
    char want[64];
    snprintf(want, sizeof want, "pipe:[%llu]", (unsigned long long)out_u64(out, "pipe_ino="));
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
                        !strcmp(row_target(cs->c[i], s, r), want);
    }
    printf("  program %llu slow reads %.4g ns; agent %llu events %.4g ns, %llu fully described "
           "(%s, PIPE, READ, 1 byte)\n",
           (unsigned long long)slow, (double)slow_ns, (unsigned long long)ev.samples,
           (double)ev.weight, (unsigned long long)good, want);
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
    char *dir = mkout(), out[4096];
    io_run(dir, "file", "2", 60, "FLEETPROF_IO_THRESHOLD=0.01", "FLEETPROF_IO_FLOOR=0", out,
           sizeof out);
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

/* A TCP request/response on loopback with a 15 ms server delay: each recv (100 bytes,
 * MSG_WAITALL) is an event with fd kind SOCKET, io kind READ, bytes 100 and the peer address
 * "127.0.0.1:PORT" of the server; as many events as recvs the program timed >= 10 ms. */
static void test_io_socket(void) {
    char *dir = mkout(), out[4096];
    io_run(dir, "socket", "3", 60, NULL, NULL, out, sizeof out);
    const char *p = strstr(out, "peer=");
    CHECK(p != NULL);
    char peer[64];
    snprintf(peer, sizeof peer, "%.*s", (int)strcspn(p + 5, "\n"), p + 5);
    chunks_t *cs = load(dir);
    uint64_t ok = 0, n = 0, sends = 0, sends_ok = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *s = &cs->c[i]->samples[CM_EV_IO];
        for (uint32_t r = 0; r < s->n; r++) {
            if ((CM_COL(s, flags, r) & CM_SF_AGGREGATE) ||
                strcmp(leaf_fn(cs->c[i], s->stack[r]), "sock_site"))
                continue;
            /* the 1-byte send before it is an event too when the machine preempts the
             * thread for 10 ms in it: kind WRITE, 1 byte, same peer */
            if (CM_COL(s, io_kind, r) == CM_IO_WRITE) {
                sends++;
                sends_ok += CM_COL(s, fd_kind, r) == CM_FD_SOCKET && CM_COL(s, size, r) == 1 &&
                            !strcmp(row_target(cs->c[i], s, r), peer);
                continue;
            }
            n++;
            ok += CM_COL(s, fd_kind, r) == CM_FD_SOCKET && CM_COL(s, io_kind, r) == CM_IO_READ &&
                  CM_COL(s, size, r) == 100 && !strcmp(row_target(cs->c[i], s, r), peer);
        }
    }
    uint64_t slow = out_u64(out, "slow_recvs=");
    printf("  peer %s: %llu of %llu sock_site recv events described (SOCKET, READ, 100 bytes); "
           "program timed %llu recvs >= 10 ms; %llu slow sends (%llu described)\n",
           peer, (unsigned long long)ok, (unsigned long long)n, (unsigned long long)slow,
           (unsigned long long)sends, (unsigned long long)sends_ok);
    CHECK_EQ(sends_ok, sends);
    CHECK(n >= 50);
    CHECK_EQ(ok, n);
    /* the program's clock brackets the agent's: an event for every recv it timed >= 10 ms
     * (a few may land in [10 ms, 10 ms + clock-read time) on its side only) */
    CHECKF(n <= slow && n + slow / 50 + 1 >= slow, "%llu events for %llu slow recvs",
           (unsigned long long)n, (unsigned long long)slow);
    free_chunks(cs);
    rmrf(dir);
}

/* fsync on a file at the default threshold: the program writes more before each fsync until
 * 5 fsyncs took >= 10.5 ms on this disk (file in the build directory: /tmp may be tmpfs, where
 * fsync is free), times each fsync itself, and prints how many took >= 10.5 ms and < 9.5 ms.
 * Each fsync the program saw >= 10.5 ms is an event with fd kind FILE, io kind SYNC, bytes 0
 * (fsync's return) and the file's path; none under 9.5 ms is (the agent's clock is inside the
 * program's). */
static void test_io_fsync(void) {
    char *dir = mkout(), out[4096];
    io_run(dir, "fsync", bdir(), 120, NULL, NULL, out, sizeof out);
    const char *p = strstr(out, "path=");
    CHECK(p != NULL);
    char path[4096];
    snprintf(path, sizeof path, "%.*s", (int)strcspn(p + 5, "\n"), p + 5);
    uint64_t slow = out_u64(out, "fsync_slow="), mid = out_u64(out, "fsync_mid=");
    uint64_t fast = out_u64(out, "fsync_fast="), size = out_u64(out, "size=");
    chunks_t *cs = load(dir);
    uint64_t n = 0, ok = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *s = &cs->c[i]->samples[CM_EV_IO];
        for (uint32_t r = 0; r < s->n; r++) {
            if ((CM_COL(s, flags, r) & CM_SF_AGGREGATE) ||
                strcmp(leaf_fn(cs->c[i], s->stack[r]), "fsync_site"))
                continue;
            n++;
            ok += CM_COL(s, fd_kind, r) == CM_FD_FILE && CM_COL(s, io_kind, r) == CM_IO_SYNC &&
                  CM_COL(s, size, r) == 0 && !strcmp(row_target(cs->c[i], s, r), path) &&
                  s->weight[r] >= 10000000;
        }
    }
    printf("  %s (%llu MiB per fsync): program timed %llu fsyncs >= 10.5 ms, %llu < 9.5 ms, %llu "
           "between; agent %llu events, %llu described (FILE, SYNC, 0 bytes, path, >= 10 ms)\n",
           path, (unsigned long long)(size >> 20), (unsigned long long)slow,
           (unsigned long long)fast, (unsigned long long)mid, (unsigned long long)n,
           (unsigned long long)ok);
    CHECKF(slow >= 5, "only %llu fsyncs >= 10.5 ms in 40, up to %llu MiB each",
           (unsigned long long)slow, (unsigned long long)(size >> 20));
    CHECK_EQ(ok, n);
    CHECKF(n >= slow && n <= slow + mid, "%llu events for %llu slow (+%llu borderline) fsyncs",
           (unsigned long long)n, (unsigned long long)slow, (unsigned long long)mid);
    free_chunks(cs);
    rmrf(dir);
}

/* Reads waiting ~100 us are aggregated (count, total ns) and not shipped one by one: the only
 * events are reads the program itself timed >= 10 ms (a loaded machine delays the writer
 * thread now and then). At ~5000 sub-threshold reads/s the thread records 1 in N of them
 * (hook_io.c: N = 64, the largest, for AG_IO_AGG_RATE 64/s) with weight N: the estimated count
 * is within +-20% of the reads not shipped as events (its relative sd is sqrt((N - 1) / n):
 * ~4.6% for N = 64 and ~30000 reads in 6 s, so 20% is 4.3 sd), the rows are flagged
 * SUBSAMPLED, and the calls not recorded are counted as DROP_SUBSAMPLED: fewer than the
 * program's reads and writes together. (Not fewer than the reads alone: the writer's 1-byte
 * writes are I/O calls too, under the 50 us floor when the machine is quiet, but a loaded one
 * delays some past it; 26,490 drops for 26,297 reads were seen so.) */
static void test_io_aggregates(void) {
    char *dir = mkout(), out[4096];
    io_run(dir, "fast", "6", 60, NULL, NULL, out, sizeof out);
    uint64_t reads = out_u64(out, "reads="), slow = out_u64(out, "slow=");
    uint64_t writes = out_u64(out, "writes=");
    chunks_t *cs = load(dir);
    tot_t ag = total_flags(cs, CM_EV_IO, "fast_site", CM_SF_AGGREGATE, 0);
    tot_t ev = total_flags(cs, CM_EV_IO, "fast_site", 0, CM_SF_AGGREGATE);
    uint64_t n = 0, sub_rows = 0, dropped = 0;
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *s = &cs->c[i]->samples[CM_EV_IO];
        for (uint32_t r = 0; r < s->n; r++)
            if ((CM_COL(s, flags, r) & CM_SF_AGGREGATE) &&
                stack_has(&cs->c[i]->dict, s->stack[r], "fast_site")) {
                n += cm_samples_count(s, r);
                sub_rows += (CM_COL(s, flags, r) & CM_SF_SUBSAMPLED) != 0;
                CHECK(CM_COL(s, fd_kind, r) == CM_FD_PIPE);
            }
        for (uint32_t k = 0; k < cs->c[i]->header.n_drops; k++)
            if (cs->c[i]->header.drops[k].type == CM_EV_IO &&
                cs->c[i]->header.drops[k].reason == CM_DROP_SUBSAMPLED)
                dropped += cs->c[i]->header.drops[k].count;
    }
    printf("  %llu reads (%llu timed >= 10 ms by the program), %llu writes; aggregated %.0f "
           "(%.4g ns in %llu rows, %llu subsampled); %llu not recorded; %llu events\n",
           (unsigned long long)reads, (unsigned long long)slow, (unsigned long long)writes,
           n / 1000.0, (double)ag.weight,
           (unsigned long long)ag.samples, (unsigned long long)sub_rows,
           (unsigned long long)dropped, (unsigned long long)ev.samples);
    CHECK(n / 1000 >= 1000);
    CHECKF(fabs((double)(n / 1000 + ev.samples) / (double)reads - 1) <= 0.2,
           "estimated %llu reads vs %llu", (unsigned long long)(n / 1000 + ev.samples),
           (unsigned long long)reads);
    CHECKF(sub_rows > 0 && dropped > 0 && dropped < reads + writes,
           "%llu subsampled rows, %llu calls not recorded of %llu reads + %llu writes",
           (unsigned long long)sub_rows, (unsigned long long)dropped, (unsigned long long)reads,
           (unsigned long long)writes);
    CHECK(ag.samples <= 2ull * (uint64_t)cs->n + 2);
    CHECKF(ev.samples <= slow, "%llu events for %llu reads >= 10 ms",
           (unsigned long long)ev.samples, (unsigned long long)slow);
    free_chunks(cs);
    rmrf(dir);
}

/* Wall samples of thread `name` (rows may merge samples: counted by their count): all, those
 * whose stack has site or site2 (NULL: none), those flagged on CPU. */
typedef struct {
    uint64_t n, in_site, on;
} wall_count_t;

static wall_count_t wall_of(const chunks_t *cs, const char *name, const char *site,
                            const char *site2) {
    wall_count_t w = {0, 0, 0};
    for (int i = 0; i < cs->n; i++) {
        const cm_chunk_t *c = cs->c[i];
        const cm_samples_t *s = &c->samples[CM_EV_WALL];
        for (uint32_t r = 0; r < s->n; r++) {
            uint32_t th = CM_COL(s, thread, r);
            if (!c->dict.thread_name || strcmp(c->dict.strings[c->dict.thread_name[th]].ptr, name))
                continue;
            uint64_t k = cm_samples_count(s, r) / CM_COUNT_ONE;
            w.n += k;
            if (stack_has(&c->dict, s->stack[r], site) ||
                (site2 && stack_has(&c->dict, s->stack[r], site2)))
                w.in_site += k;
            w.on += (CM_COL(s, flags, r) & CM_SF_ON_CPU) ? k : 0;
        }
    }
    return w;
}

/* Wall samples of a thread blocked in a hooked call come without a signal (wall.c:
 * wall_from_blocked): a recv on a socket with SO_RCVTIMEO fails with EINTR on any signal, and
 * the waiter, fed every 20 ms, runs between ticks (so it is no idle thread either). With the
 * I/O hooks on, its wall samples show blocked_site off CPU and its recvs are not interrupted;
 * with them off (FLEETPROF_IO=0) the same program is signalled at most ticks: the EINTRs. */
static void test_io_wall_blocked(void) {
    uint64_t eintr[2] = {0, 0}, n[2] = {0, 0}, in_site[2] = {0, 0}, on[2] = {0, 0};
    for (int off = 0; off < 2; off++) {
        char *dir = mkout(), out[4096];
        io_run(dir, "blocked", "3", 60, off ? "FLEETPROF_IO=0" : "FLEETPROF_IO=1", NULL, out,
               sizeof out);
        eintr[off] = out_u64(out, "eintr=");
        chunks_t *cs = load(dir);
        wall_count_t w = wall_of(cs, "waiter", "blocked_site", NULL);
        n[off] = w.n;
        in_site[off] = w.in_site;
        on[off] = w.on;
        printf("  I/O hooks %s: waiter %llu wall samples, %llu in blocked_site, %llu on CPU; "
               "recv EINTR %llu (%s)\n",
               off ? "off" : "on", (unsigned long long)n[off], (unsigned long long)in_site[off],
               (unsigned long long)on[off], (unsigned long long)eintr[off], out);
        free_chunks(cs);
        rmrf(dir);
    }
    for (int off = 0; off < 2; off++) {
        /* 60 ticks, fewer under the agent's own budget (the program barely runs: ~40) */
        CHECK(n[off] >= 20);
        CHECKF(in_site[off] + 2 >= n[off], "%llu of %llu in blocked_site",
               (unsigned long long)in_site[off], (unsigned long long)n[off]);
        CHECK(on[off] <= 2);
    }
    CHECKF(eintr[0] <= 3, "%llu recvs interrupted with the hooks on", (unsigned long long)eintr[0]);
    CHECKF(eintr[1] >= n[1] / 2, "only %llu recvs interrupted with the hooks off: the contrast is gone",
           (unsigned long long)eintr[1]);
}

/* The blocking calls hook_wait.c marks forward arguments, results and errno (io_work's
 * forward_checks: each of them once, against its documented result), and a thread blocked in
 * poll or epoll_wait is sampled by a walk, not a signal: "poller", woken every 20 ms so that
 * it runs between ticks (no idle thread), sees no EINTR, and its wall samples show poll_site
 * or epoll_site off CPU. Without the marks it would be signalled at most ticks, as recv is in
 * io_wall_blocked with the I/O hooks off. */
static void test_wait_hooks(void) {
    char *dir = mkout(), out[4096];
    io_run(dir, "waits", "3", 60, NULL, NULL, out, sizeof out);
    uint64_t bad = out_u64(out, "waits_bad="), eintr = out_u64(out, "eintr="),
             wakes = out_u64(out, "wakes=");
    chunks_t *cs = load(dir);
    wall_count_t w = wall_of(cs, "poller", "poll_site", "epoll_site");
    uint64_t n = w.n, in_site = w.in_site, on = w.on;
    printf("  poller: %llu wall samples, %llu in poll_site/epoll_site, %llu on CPU; %llu wakes, "
           "%llu EINTR (%s)\n",
           (unsigned long long)n, (unsigned long long)in_site, (unsigned long long)on,
           (unsigned long long)wakes, (unsigned long long)eintr, out);
    CHECKF(bad == 0 && strstr(out, "waits_bad=0"), "forwarding: %s", out);
    CHECK(wakes >= 50);
    CHECK(n >= 20);
    CHECKF(in_site + 2 >= n, "%llu of %llu in poll_site/epoll_site", (unsigned long long)in_site,
           (unsigned long long)n);
    CHECK(on <= 2);
    CHECKF(eintr == 0, "%llu poll/epoll_wait calls interrupted", (unsigned long long)eintr);
    free_chunks(cs);
    rmrf(dir);
}

/* A thread that leaves a hooked read() by siglongjmp (its blocking mark never cleared by the
 * hook) and then burns CPU for 3 s must not be shown blocked in read: the next sample whose
 * stack pointer is above the hook's frame clears the stale mark, and a thread that ran half
 * the interval is never taken for blocked. Before: every wall sample of those 3 s in read. */
static void test_io_wall_longjmp(void) {
    char *dir = mkout(), out[4096];
    io_run(dir, "longjmp", "3", 60, NULL, NULL, out, sizeof out);
    CHECKF(strstr(out, "jumped=1") != NULL, "%s", out);
    chunks_t *cs = load(dir);
    wall_count_t rd = wall_of(cs, "jumper", "read", NULL); /* the hook's and libc's frame */
    wall_count_t burn = wall_of(cs, "jumper", "burn_site", NULL);
    printf("  jumper: %llu wall samples, %llu in read, %llu in burn_site (%llu on CPU)\n",
           (unsigned long long)rd.n, (unsigned long long)rd.in_site,
           (unsigned long long)burn.in_site, (unsigned long long)burn.on);
    /* 200 ms blocked at 20 Hz: about 4 in read; 3 s burning: about 60 in burn_site */
    CHECKF(rd.in_site <= 8, "%llu wall samples in read after leaving it",
           (unsigned long long)rd.in_site);
    CHECK(burn.in_site >= 20);
    free_chunks(cs);
    rmrf(dir);
}

/* FLEETPROF_IO=0: no IO rows at all. */
static void test_io_off(void) {
    char *dir = mkout(), out[4096];
    io_run(dir, "pipe", "1", 60, "FLEETPROF_IO=0", NULL, out, sizeof out);
    chunks_t *cs = load(dir);
    CHECK(cs->n >= 1);
    CHECK_EQ(total(cs, CM_EV_IO, NULL, 0).samples, 0);
    free_chunks(cs);
    rmrf(dir);
}

/* Descriptors known non-blocking (agent/src/hooks/fdnb.c): a call on one is not timed, but for one
 * in ~NB_CHECK, timed with that weight. NB_CHECK is AG_NB_CHECK of agent/src/hooks/hooks.h. */
#define NB_CHECK 16

/* IO rows of site: plain events (count one, not subsampled), events standing for NB_CHECK
 * calls (a check on a descriptor known non-blocking), other events, aggregated calls. */
typedef struct {
    uint64_t plain, checked, other, agg;
} nb_rows_t;
static nb_rows_t nb_rows(const chunks_t *cs, const char *site) {
    nb_rows_t n = {0, 0, 0, 0};
    for (int i = 0; i < cs->n; i++) {
        const cm_samples_t *s = &cs->c[i]->samples[CM_EV_IO];
        for (uint32_t r = 0; r < s->n; r++) {
            if (!stack_has(&cs->c[i]->dict, s->stack[r], site))
                continue;
            uint32_t fl = CM_COL(s, flags, r);
            uint64_t k = cm_samples_count(s, r);
            if (fl & CM_SF_AGGREGATE)
                n.agg += k;
            else if (!(fl & CM_SF_SUBSAMPLED) && k == CM_COUNT_ONE)
                n.plain++;
            else if (k == NB_CHECK * CM_COUNT_ONE)
                n.checked++;
            else
                n.other++;
        }
    }
    return n;
}

/* Blocking waits stay visible on descriptors that were non-blocking (io_work nbflip, reads
 * fed every 15 ms). A pipe2(O_NONBLOCK) pipe cleared with fcntl(F_SETFL, 0), which the hook
 * sees: every read the program timed >= 10 ms is an event, from the first (as io_pipe's). A
 * socket made with SOCK_NONBLOCK and turned blocking by a raw fcntl system call, which no hook
 * sees: its reads are skipped until the first check that waits (geometric, mean NB_CHECK
 * calls), then timed every time: of 240 slow reads at most the first 150 are missing (the
 * chance that the check comes later: (15/16)^150 = 6e-5), at most one event stands for
 * NB_CHECK calls, and none stands for any other count. */
static void test_io_nb_flip(void) {
    char *dir = mkout(), out[4096];
    io_run(dir, "nbflip", "240", 90, NULL, NULL, out, sizeof out);
    uint64_t slow1 = out_u64(out, "slow_setfl="), slow2 = out_u64(out, "slow_flip=");
    uint64_t reads2 = out_u64(out, "reads_flip=");
    chunks_t *cs = load(dir);
    nb_rows_t a = nb_rows(cs, "setfl_site"), b = nb_rows(cs, "flip_site");
    printf("  fcntl-cleared pipe: %llu slow reads, %llu events (%llu weighted, %llu other)\n"
           "  raw-flipped socket: %llu reads, %llu slow; %llu events, %llu checks of weight %d "
           "(%llu other): the first %lld slow reads not seen\n",
           (unsigned long long)slow1, (unsigned long long)a.plain,
           (unsigned long long)a.checked, (unsigned long long)a.other,
           (unsigned long long)reads2, (unsigned long long)slow2, (unsigned long long)b.plain,
           (unsigned long long)b.checked, NB_CHECK, (unsigned long long)b.other,
           (long long)slow2 - (long long)b.plain);
    CHECK(slow1 >= 80 && slow2 >= 240);
    /* the agent's clock is inside the program's: a few reads may land in [10 ms, 10 ms +
     * clock reads) on its side only */
    CHECKF(a.plain <= slow1 && a.plain + slow1 / 50 + 1 >= slow1, "%llu events for %llu",
           (unsigned long long)a.plain, (unsigned long long)slow1);
    CHECK_EQ(a.checked + a.other, 0);
    CHECKF(b.plain <= slow2 && b.plain + 150 >= slow2, "%llu events for %llu slow reads",
           (unsigned long long)b.plain, (unsigned long long)slow2);
    CHECK(b.checked <= 1 && b.other == 0);
    free_chunks(cs);
    rmrf(dir);
}

/* Non-blocking EAGAIN loops are not timed (io_work nbloop: 100,000 recv()s on an empty
 * non-blocking socket, 100,000 read()s on an empty non-blocking pipe), with the floor at 0 so
 * that every timed call reaches the sub-threshold sampler (hook_io.c), which records 1 in N
 * of them and counts the others as DROP_SUBSAMPLED: those drops plus the few recorded are the
 * calls timed. Timed: 1 in NB_CHECK (12,500 +- 110 expected; 200,000 if every call were), and
 * their weights keep the aggregate's estimate of the calls unbiased: within 30% of 200,000
 * (about 200 recorded calls of weight NB_CHECK x 64: relative sd ~7%). */
static void test_io_nb_loop(void) {
    char *dir = mkout(), out[4096];
    io_run(dir, "nbloop", "100000", 60, "FLEETPROF_IO_FLOOR=0", NULL, out, sizeof out);
    uint64_t eagain = out_u64(out, "eagain=");
    chunks_t *cs = load(dir);
    nb_rows_t r = nb_rows(cs, "nbloop_site");
    uint64_t dropped = 0;
    for (int i = 0; i < cs->n; i++)
        for (uint32_t k = 0; k < cs->c[i]->header.n_drops; k++)
            if (cs->c[i]->header.drops[k].type == CM_EV_IO &&
                cs->c[i]->header.drops[k].reason == CM_DROP_SUBSAMPLED)
                dropped += cs->c[i]->header.drops[k].count;
    double est = (double)r.agg / CM_COUNT_ONE;
    printf("  %llu EAGAIN calls: %llu timed and not recorded (all calls / %d = %llu); "
           "estimated calls %.0f (%llu events)\n",
           (unsigned long long)eagain, (unsigned long long)dropped, NB_CHECK,
           (unsigned long long)(eagain / NB_CHECK), est,
           (unsigned long long)(r.plain + r.checked + r.other));
    CHECK_EQ(eagain, 200000);
    CHECKF(dropped >= eagain / NB_CHECK * 8 / 10 && dropped <= eagain / NB_CHECK * 12 / 10,
           "%llu calls timed but not recorded", (unsigned long long)dropped);
    CHECKF(fabs(est / (double)eagain - 1) <= 0.3, "estimated %.0f calls", est);
    free_chunks(cs);
    rmrf(dir);
}

static const tr_test_t tests[] = {
    {"io_pipe", test_io_pipe},         {"io_file", test_io_file},
    {"io_socket", test_io_socket},     {"io_fsync", test_io_fsync},
    {"io_aggregates", test_io_aggregates},
    {"io_off", test_io_off},           {"io_wall_blocked", test_io_wall_blocked},
    {"io_nb_flip", test_io_nb_flip},   {"io_nb_loop", test_io_nb_loop},
    {"wait_hooks", test_wait_hooks},   {"io_wall_longjmp", test_io_wall_longjmp},
    {NULL, NULL},
};
TR_MAIN(tests)
