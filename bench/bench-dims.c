/* Storage cost of the dimensions (issue 18 item 5), in one invocation: the same simulated
 * fleet rolled up into two SQLite stores through the aggregator's own code (intern, rollup,
 * store batch writes; no Kafka), once without dimensions (the rows' own labels only, as before)
 * and once with them (host, pod, pid per process; I/O target and fd kind per I/O event; lock
 * address per lock event). Reports per store: rows of the per-stack tables (fine, tiers,
 * per-leaf), label rows, file bytes, bytes per sample and per fine row, and the ingest CPU time.
 * Four stores: none (as before), io-target,fd-kind,lock (per-event dimensions only),
 * host + those, and all (host, node, pod, container, pid too).
 *
 *   bench-dims [processes=80] [hosts=10] [intervals=6] [samples=1000]
 * (processes split over 4 services x 2 versions; each process its own pid and pod) */
#include "dims.h"
#include "intern.h"
#include "rollup.h"
#include "store.h"

#include "fleetsim.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static long long count(sqlite3 *db, const char *table) {
    char sql[128];
    sqlite3_stmt *st;
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s", table);
    long long n = -1;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

static long long fsize(const char *p) {
    struct stat s;
    return stat(p, &s) ? 0 : (long long)s.st_size;
}

/* Feeds the fleet into a fresh store under dir, storing the dimensions of `list` (dims.h;
 * "none": as before them). */
static int run(const fsim_params_t *sp, const char *dir, const char *list) {
    char path[256], err[256];
    agg_store_path(path, sizeof path, dir, "t", 0);
    agg_store_t *st;
    if (agg_store_sqlite_open(path, &st, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    fsim_t *sim = fsim_new(sp);
    agg_intern_t in = {0};
    agg_rollup_t r;
    agg_rollup_cfg_t rc = {10, 3600, 1, 1, 60};
    agg_rollup_init(&r, &rc);
    agg_dims_t d;
    agg_dims_init(&d, 3600, 0, 0);
    if (agg_dims_parse(list, &d.enabled, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    int dims = d.enabled != 0;
    agg_batch_t b;
    agg_batch_init(&b);
    int64_t offset = -1;
    uint64_t samples = 0;
    int n = 0, rcode = 0;
    const uint8_t *fr;
    size_t len;
    const char *key;
    double t0 = cpu_s();
    while (fsim_next(sim, &fr, &len, &key)) {
        cm_chunk_t *c;
        if (cm_chunk_decode(fr, len, &c, err, sizeof err)) {
            fprintf(stderr, "decode: %s\n", err);
            rcode = -1;
            break;
        }
        agg_chunk_ids_t ids;
        if (b.next_offset < 0)
            b.base_offset = offset;
        agg_chunk_meta_t m = {"", "", "", "", 0, 0, 0, 0};
        snprintf(m.host, sizeof m.host, "%s", c->header.host.ptr);
        snprintf(m.pod, sizeof m.pod, "sim/%s-%u", key, c->header.pid - 1000);
        if (agg_intern_chunk(&in, &b, c, &ids) ||
            (dims && agg_dims_chunk(&d, &in, &b, c, &m, &ids)) ||
            agg_rollup_chunk(&r, &b, c, &ids)) {
            rcode = -1;
            cm_chunk_free(c);
            break;
        }
        for (uint32_t t = 1; t <= CM_EV_MAX; t++)
            samples += c->samples[t].n;
        cm_chunk_free(c);
        b.next_offset = (offset < 0 ? 0 : offset) + 1;
        if (++n % 50 == 0) {
            if (agg_store_batch_write(st, "t", 0, &b)) {
                rcode = -1;
                break;
            }
            offset = b.next_offset;
            agg_batch_clear(&b);
        }
    }
    if (!rcode && b.next_offset >= 0 && agg_store_batch_write(st, "t", 0, &b))
        rcode = -1;
    double cpu = cpu_s() - t0;
    agg_store_close(st); /* checkpoints the WAL into the file */
    agg_batch_free(&b);
    agg_intern_free(&in);
    agg_rollup_free(&r);
    agg_dims_free(&d);
    fsim_free(sim);
    if (rcode) {
        fprintf(stderr, "ingest failed\n");
        return -1;
    }
    sqlite3 *db;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
        return -1;
    char wal[300];
    snprintf(wal, sizeof wal, "%s-wal", path);
    long long fine = count(db, "profile"), coarse = count(db, "profile_coarse"),
              leaf = count(db, "profile_leaf"), labels = count(db, "labels"),
              sets = count(db, "labelsets"), bytes = fsize(path) + fsize(wal);
    sqlite3_close(db);
    printf("%-28s chunks %d samples %llu | rows: fine %lld tiers %lld leaf %lld labels %lld "
           "(sets %lld) | file %lld bytes = %.1f bytes/sample, %.1f bytes/fine row | ingest "
           "%.2f CPU s (%.0f samples/CPU s)\n",
           list, n, (unsigned long long)samples, fine, coarse,
           leaf, labels, sets, bytes, (double)bytes / (double)samples,
           (double)bytes / (double)fine, cpu, (double)samples / cpu);
    return 0;
}

int main(int argc, char **argv) {
    uint32_t procs = argc > 1 ? (uint32_t)atoi(argv[1]) : 80;
    uint32_t hosts = argc > 2 ? (uint32_t)atoi(argv[2]) : 10;
    uint32_t intervals = argc > 3 ? (uint32_t)atoi(argv[3]) : 6;
    uint32_t samples = argc > 4 ? (uint32_t)atoi(argv[4]) : 1000;
    fsim_params_t sp = {.seed = 7, .services = 4, .versions = 2,
                        .processes = procs / 8 ? procs / 8 : 1, .intervals = intervals,
                        .samples = samples, .stacks = 500, .hosts = hosts,
                        /* a fixed hour in the past: the same buckets every run, and every row
                         * below the tiers' marks (derived at ingest, as late data is) */
                        .start_unix_ns = 1789999200ull * 1000000000ull};
    printf("fleet: %u services x %u versions x %u processes on %u hosts, %u intervals of 10 s, "
           "%u samples per type per chunk\n", sp.services, sp.versions, sp.processes, hosts,
           intervals, samples);
    static const char *const sets[] = {"none", "io-target,fd-kind,lock",
                                        "host,io-target,fd-kind,lock", "all"};
    char dir[4][64];
    for (int k = 0; k < 4; k++) {
        snprintf(dir[k], sizeof dir[k], "/tmp/fp-bench-dims-XXXXXX");
        if (!mkdtemp(dir[k]) || run(&sp, dir[k], sets[k]))
            return 1;
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir[k]);
        if (system(cmd))
            return 1;
    }
    return 0;
}
