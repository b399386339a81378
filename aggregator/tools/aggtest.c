/* Aggregator test helpers (see aggtest.h). Single-threaded use. */
#define _GNU_SOURCE /* sched_setaffinity */
#include "aggtest.h"

#include "cm/file.h"

#include "incidents.h"
#include "intern.h"
#include "query_store.h"
#include "store_pg.h"
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <sys/prctl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

double at_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

void at_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void at_tmpdir(char *path, const char *tag) {
    snprintf(path, 64, "/tmp/fp-aggtest-%s-XXXXXX", tag);
    if (!mkdtemp(path)) {
        perror("mkdtemp");
        exit(1);
    }
}

pid_t at_agg_start(const char *bootstrap, const char *store_dir, const char *group, int http_port,
                   const char *log_path, const char *const *extra) {
    const char *build = getenv("FLEETPROF_BUILD");
    char bin[1024], port[16];
    snprintf(bin, sizeof bin, "%s/aggregator/fleetprof-aggregator", build ? build : ".");
    snprintf(port, sizeof port, "%d", http_port);
    const char *argv[64] = {bin,           "--brokers", bootstrap, "--store-dir", store_dir,
                            "--group",     group,       "--http-addr", "127.0.0.1",
                            "--http-port", port}; /* the product's session timeout (6 s) */
    int n = 11;
    for (int i = 0; extra && extra[i] && n < 62; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed test must not leave aggregators behind */
        const char *cpu = getenv("AT_CPU"); /* pin the aggregator (benchmarks: one core) */
        if (cpu && *cpu) {
            cpu_set_t set;
            CPU_ZERO(&set);
            CPU_SET(atoi(cpu), &set);
            sched_setaffinity(0, sizeof set, &set);
        }
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(bin, (char *const *)argv);
        perror("execv");
        _exit(127);
    }
    return pid;
}

int at_agg_stop(pid_t pid, int sig, int timeout_s) {
    kill(pid, sig);
    double end = at_now() + timeout_s;
    int st;
    while (at_now() < end) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return st;
        at_sleep_ms(20);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

int64_t at_store_offset(const char *dir, const char *topic, int32_t p) {
    if (agg_store_is_pg(dir)) { /* a PostgreSQL store: its offsets table */
        char sql[512];
        snprintf(sql, sizeof sql,
                 "SELECT coalesce((SELECT next_offset FROM offsets WHERE topic='%s' AND "
                 "part=%d), -1)", topic, (int)p);
        return at_pg_q1(dir, sql);
    }
    char path[1024];
    agg_store_path(path, sizeof path, dir, topic, p);
    if (access(path, F_OK))
        return -1;
    sqlite3 *db;
    int64_t off = -1;
    if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK) {
        sqlite3_busy_timeout(db, 5000);
        sqlite3_stmt *st;
        if (sqlite3_prepare_v2(db, "SELECT next_offset FROM offsets WHERE topic=?1 AND part=?2",
                               -1, &st, NULL) == SQLITE_OK) {
            sqlite3_bind_text(st, 1, topic, -1, SQLITE_STATIC);
            sqlite3_bind_int(st, 2, p);
            if (sqlite3_step(st) == SQLITE_ROW)
                off = sqlite3_column_int64(st, 0);
            sqlite3_finalize(st);
        }
    }
    sqlite3_close(db);
    return off;
}

int64_t at_store_offsets_sum(const char *dir, const char *topic, int nparts) {
    int64_t s = 0;
    for (int p = 0; p < nparts; p++) {
        int64_t o = at_store_offset(dir, topic, p);
        s += o > 0 ? o : 0;
    }
    return s;
}

int at_topic_empty(rd_kafka_t *rk, const char *topic, int nparts) {
    int64_t hi[64];
    if (nparts > 64 || at_high_watermarks(rk, topic, nparts, hi))
        return 0;
    for (int p = 0; p < nparts; p++)
        if (hi[p]) {
            fprintf(stderr, "topic %s partition %d already holds %lld messages: another run is "
                    "using this broker's port; stop it (deploy/kafka/stop.sh) and run again\n",
                    topic, p, (long long)hi[p]);
            return 0;
        }
    return 1;
}

int at_high_watermarks(rd_kafka_t *rk, const char *topic, int nparts, int64_t *hi) {
    for (int p = 0; p < nparts; p++) {
        int64_t lo;
        rd_kafka_resp_err_t e;
        /* a new client may not have the topic's metadata yet: retry until a deadline */
        double end = at_now() + 30;
        while ((e = rd_kafka_query_watermark_offsets(rk, topic, p, &lo, &hi[p], 10000)) &&
               at_now() < end)
            at_sleep_ms(200);
        if (e) {
            fprintf(stderr, "watermarks of %s/%d: %s\n", topic, p, rd_kafka_err2str(e));
            return -1;
        }
    }
    return 0;
}

int at_wait_caught_up(const char *dir, const char *topic, int nparts, const int64_t *hi,
                      int timeout_s) {
    double end = at_now() + timeout_s;
    while (at_now() < end) {
        int ok = 1;
        for (int p = 0; p < nparts && ok; p++) {
            int64_t o = at_store_offset(dir, topic, p);
            ok = hi[p] == 0 ? 1 : o == hi[p];
        }
        if (ok)
            return 0;
        at_sleep_ms(100);
    }
    for (int p = 0; p < nparts; p++)
        fprintf(stderr, "partition %d: stored %lld, high watermark %lld\n", p,
                (long long)at_store_offset(dir, topic, p), (long long)hi[p]);
    return -1;
}

int at_check_truth(const fsim_t *sim, const char *dir, const char *topic, int nparts) {
    (void)topic; /* the query store reads every partition store under dir */
    (void)nparts;
    int bad = 0;
    char err[512];
    agg_qstore_t *qs = NULL;
    agg_qversion_t *v = NULL;
    size_t nv = 0;
    if (agg_qstore_open(dir, &qs, err, sizeof err) || agg_qstore_versions(qs, NULL, &v, &nv)) {
        fprintf(stderr, "query store %s: %s\n", dir, err);
        agg_qstore_close(qs);
        return 1;
    }
    size_t expected_rows = 0, got_rows = 0;
    for (size_t i = 0; i < nv; i++)
        for (uint32_t t = 1; t <= CM_EV_MAX; t++)
            got_rows += v[i].rows[t] > 0;
    const fsim_params_t *fp = fsim_params(sim);
    for (uint32_t si = 0; si < fp->services; si++) {
        const char *sn = fsim_service_name(sim, si);
        for (uint32_t vi = 0; vi < fp->versions; vi++) {
            const char *vn = fsim_version_name(sim, si, vi);
            const agg_qversion_t *e = NULL;
            for (size_t i = 0; i < nv && !e; i++)
                if (!strcmp(v[i].service, sn) && !strcmp(v[i].version, vn))
                    e = &v[i];
            for (uint32_t t = 1; t <= CM_EV_MAX; t++) {
                const fsim_sums_t *want = fsim_truth(sim, si, vi, t);
                if (!want->rows)
                    continue;
                expected_rows++;
                int64_t gw = e ? (int64_t)e->weight[t] : 0, gc = e ? (int64_t)e->count[t] : 0,
                        gr = e ? (int64_t)e->rows[t] : 0;
                if (gw != want->weight || gc != want->count || gr != want->rows) {
                    fprintf(stderr,
                            "totals %s %s %s: weight %lld want %lld, count %lld want %lld, rows "
                            "%lld want %lld\n",
                            sn, vn, cm_event_name(t), (long long)gw, (long long)want->weight,
                            (long long)gc, (long long)want->count, (long long)gr,
                            (long long)want->rows);
                    bad++;
                }
                /* the merged profile, as the API reads it (tiers) and from the fine rows */
                for (int exact = 0; exact < 2; exact++) {
                    const char *vs[1] = {vn};
                    agg_qspec_t q = {.service = sn, .versions = vs, .n_versions = 1,
                                     .type = (cm_event_type_t)t, .from_s = 0,
                                     .to_s = INT64_MAX, .exact = exact};
                    agg_profile_t *p = NULL;
                    uint64_t pw = 0, pc = 0;
                    double work;
                    int rc = agg_qstore_profile(qs, &q, &p);
                    if (!rc)
                        agg_profile_totals(p, &pw, &pc, &work);
                    agg_profile_free(p);
                    if (rc || (int64_t)pw != want->weight || (int64_t)pc != want->count) {
                        fprintf(stderr, "profile%s %s %s %s: rc %d, weight %llu want %lld, count "
                                "%llu want %lld\n", exact ? " (exact)" : "", sn, vn,
                                cm_event_name(t), rc, (unsigned long long)pw,
                                (long long)want->weight, (unsigned long long)pc,
                                (long long)want->count);
                        bad++;
                    }
                }
            }
        }
    }
    if (got_rows != expected_rows) {
        fprintf(stderr, "stores hold %zu (service, version, type) totals, truth has %zu\n",
                got_rows, expected_rows);
        bad++;
    }
    agg_qversions_free(v, nv);
    agg_qstore_close(qs);
    return bad;
}

rd_kafka_t *at_producer(const char *bootstrap) {
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, err, sizeof err);
    rd_kafka_conf_set(conf, "enable.idempotence", "true", err, sizeof err);
    rd_kafka_conf_set(conf, "message.max.bytes", "20000000", err, sizeof err);
    rd_kafka_conf_set(conf, "linger.ms", "10", err, sizeof err);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk)
        fprintf(stderr, "producer: %s\n", err);
    return rk;
}

const char *at_group_id(const char *tag) {
    static char g[96];
    snprintf(g, sizeof g, "%s-%d-%ld", tag, (int)getpid(), (long)time(NULL));
    return g;
}

int at_http_get(int port, const char *path, char *out, size_t size) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "curl -s -m 5 -o - -w '\\n%%{http_code}' http://127.0.0.1:%d%s",
             port, path);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    size_t n = fread(out, 1, size - 1, p);
    out[n] = 0;
    char extra[4096];
    size_t more = 0, k;
    while ((k = fread(extra, 1, sizeof extra, p)) > 0)
        more += k;
    pclose(p);
    if (more) { /* the status is at the end: a cut answer has none, and a check would misjudge */
        printf("at_http_get %s: the answer is %zu bytes, more than the %zu-byte buffer\n", path,
               n + more, size);
        return -1;
    }
    char *nl = strrchr(out, '\n');
    return nl ? atoi(nl + 1) : -1;
}

int at_pg_start(int port, const char *dir, char *url, size_t size) {
    const char *src = getenv("FLEETPROF_SRC");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "PG_PORT=%d %s/deploy/postgres/start.sh %s", port, src ? src : ".",
             dir);
    FILE *p = popen(cmd, "r");
    int ok = p && fgets(url, (int)size, p);
    if (p && pclose(p) != 0)
        ok = 0;
    if (!ok) {
        printf("cannot start PostgreSQL (%s)\n", cmd);
        return -1;
    }
    url[strcspn(url, "\n")] = 0;
    return 0;
}

int64_t at_pg_q1(const char *url, const char *sql) {
    PGconn *c = PQconnectdb(url);
    int64_t v = -1;
    if (PQstatus(c) == CONNECTION_OK) {
        PGresult *r = PQexec(c, sql);
        if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1)
            v = PQgetisnull(r, 0, 0) ? 0 : strtoll(PQgetvalue(r, 0, 0), NULL, 10);
        PQclear(r);
    }
    PQfinish(c);
    return v;
}

int at_pg_check_truth(const fsim_t *sim, const char *url) {
    PGconn *c = PQconnectdb(url);
    if (PQstatus(c) != CONNECTION_OK) {
        printf("cannot compare with the truth: %s", PQerrorMessage(c));
        PQfinish(c);
        return 1;
    }
    int bad = 0;
    const fsim_params_t *fp = fsim_params(sim);
    size_t expected = 0;
    for (uint32_t si = 0; si < fp->services; si++) {
        const char *sn = fsim_service_name(sim, si);
        int64_t sid = (int64_t)agg_intern_string_id(sn, strlen(sn));
        for (uint32_t vi = 0; vi < fp->versions; vi++) {
            const char *vn = fsim_version_name(sim, si, vi);
            int64_t vid = (int64_t)agg_intern_string_id(vn, strlen(vn));
            for (uint32_t t = 1; t <= CM_EV_MAX; t++) {
                const fsim_sums_t *want = fsim_truth(sim, si, vi, t);
                if (!want->rows)
                    continue;
                expected++;
                static const char *const tabs[] = {"totals", "profile"};
                for (int k = 0; k < 2; k++) {
                    char sql[512]; /* every width's rows: fine and, once downsampled, coarse */
                    snprintf(sql, sizeof sql,
                             "SELECT coalesce(sum(weight),0), coalesce(sum(count),0), "
                             "coalesce(sum(rows),0) FROM %s WHERE service=%lld AND "
                             "version=%lld AND type=%u",
                             tabs[k], (long long)sid, (long long)vid, t);
                    PGresult *r = PQexec(c, sql);
                    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
                        printf("%s: %s", sql, PQerrorMessage(c));
                        PQclear(r);
                        bad++;
                        continue;
                    }
                    long long w = strtoll(PQgetvalue(r, 0, 0), NULL, 10),
                              n = strtoll(PQgetvalue(r, 0, 1), NULL, 10),
                              rows = strtoll(PQgetvalue(r, 0, 2), NULL, 10);
                    PQclear(r);
                    if (w != want->weight || n != want->count || rows != want->rows) {
                        printf("%s %s %s %s: weight %lld want %lld, count %lld want %lld, rows "
                               "%lld want %lld\n",
                               tabs[k], sn, vn, cm_event_name(t), w, (long long)want->weight, n,
                               (long long)want->count, rows, (long long)want->rows);
                        bad++;
                    }
                }
            }
        }
    }
    PQfinish(c);
    int64_t groups = at_pg_q1(url, "SELECT count(*) FROM (SELECT DISTINCT service, version, "
                                   "type FROM totals) x");
    if (groups != (int64_t)expected) {
        printf("the database holds %lld (service, version, type) totals, truth has %zu\n",
               (long long)groups, expected);
        bad++;
    }
    const fsim_counts_t *fc = fsim_counts(sim);
    int64_t want_rej = 0;
    for (int k = 0; k < FSIM_BAD_N; k++)
        want_rej += (int64_t)fc->bad[k];
    int64_t rej = at_pg_q1(url, "SELECT coalesce(sum(count),0) FROM rejects");
    if (rej != want_rej) {
        printf("rejects %lld, malformed messages produced %lld\n", (long long)rej,
               (long long)want_rej);
        bad++;
    }
    return bad;
}

int at_sh(const char *fmt, ...) {
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

void at_ingest_init(at_ingest_t *x) {
    memset(x, 0, sizeof *x);
    agg_rollup_cfg_t rc = {10, 3600, 1, 1, 60};
    agg_rollup_init(&x->r, &rc);
    agg_dims_init(&x->dm, 3600, 0, 0);
    agg_batch_init(&x->b);
}

int at_ingest_chunk(at_ingest_t *x, const cm_chunk_t *c, const agg_chunk_meta_t *meta) {
    agg_chunk_ids_t ids;
    agg_chunk_meta_t none;
    memset(&none, 0, sizeof none);
    int rc = agg_intern_chunk(&x->in, &x->b, c, &ids);
    if (!rc)
        rc = agg_dims_chunk(&x->dm, &x->in, &x->b, c, meta ? meta : &none, &ids);
    return rc ? rc : agg_rollup_chunk(&x->r, &x->b, c, &ids);
}

int at_ingest_frame(at_ingest_t *x, const cm_chunk_t *c, const agg_chunk_meta_t *meta,
                    const uint8_t *frame, size_t len) {
    if (c->incident.present)
        return agg_ingest_incident(&x->in, &x->b, c, frame, len);
    return at_ingest_chunk(x, c, meta);
}

void at_ingest_free(at_ingest_t *x) {
    agg_batch_free(&x->b);
    agg_rollup_free(&x->r);
    agg_dims_free(&x->dm);
    agg_intern_free(&x->in);
}

/* One chunk file into x and st at offset off. 0 or -1 (err set). */
static int ingest_file(at_ingest_t *x, agg_store_t *st, const char *path, int64_t off,
                       char *err, size_t err_size) {
    size_t cap = 4 << 20;
    char *buf = malloc(cap);
    ssize_t len = buf ? cm_read_file(path, buf, cap) : -ENOMEM;
    cm_chunk_t *c = NULL;
    int rc = -1;
    if (len <= 0) {
        snprintf(err, err_size, "%s: %s", path, strerror((int)-len));
        goto out;
    }
    if (cm_chunk_decode((uint8_t *)buf, (size_t)len, &c, err, err_size) != 0)
        goto out;
    x->b.base_offset = off - 1;
    if (at_ingest_frame(x, c, NULL, (uint8_t *)buf, (size_t)len) != 0) {
        snprintf(err, err_size, "%s: not ingested", path);
        goto out;
    }
    x->b.next_offset = off;
    if (agg_store_batch_write(st, "fleetprof.chunks", 0, &x->b) != 0) {
        snprintf(err, err_size, "%s: store write failed", path);
        goto out;
    }
    rc = 0;
out:
    agg_batch_clear(&x->b);
    if (c)
        cm_chunk_free(c);
    free(buf);
    return rc;
}

int at_ingest_dir(const char *chunk_dir, const char *store_dir, char *err, size_t err_size) {
    char path[4200];
    agg_store_path(path, sizeof path, store_dir, "fleetprof.chunks", 0);
    agg_store_t *st = NULL;
    if (agg_store_sqlite_open(path, &st, err, err_size) != 0)
        return -1;
    at_ingest_t x;
    at_ingest_init(&x);
    DIR *d = opendir(chunk_dir);
    int rc = d ? 0 : -1;
    if (!d)
        snprintf(err, err_size, "%s: %s", chunk_dir, strerror(errno));
    int64_t off = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", chunk_dir, e->d_name);
        rc = ingest_file(&x, st, path, off++, err, err_size);
    }
    if (d)
        closedir(d);
    at_ingest_free(&x);
    agg_store_close(st);
    return rc;
}
