/* SQLite backend of the store (see store.h; schema and reasons in aggregator/README.md).
 *
 * WAL journal, synchronous=NORMAL: a committed transaction survives a process crash; after a
 * power loss the last transactions may roll back, data and offset together, and are consumed
 * again, so exactly-once holds either way. Writes take the lock with BEGIN IMMEDIATE, then
 * check the stored offset (fencing), then insert dictionaries (INSERT OR IGNORE), upsert the
 * rollups (ON CONFLICT DO UPDATE SET x = x + excluded.x), record chunk ids and the offset.
 * SQLite result codes are translated to CM_E* / -errno here and nowhere else.
 *
 * Threading: one handle per thread; processes sharing a file are serialized by SQLite's locks
 * (busy timeout 30 s). Each handle runs a checkpointer thread with its own connection (PASSIVE
 * checkpoints every AGG_CKPT_INTERVAL_MS, TRUNCATE past AGG_WAL_LIMIT_BYTES), so the writer
 * never blocks on checkpoint fsyncs and the WAL stays bounded (store.h).
 */
#define _GNU_SOURCE /* qsort_r */
#include "store.h"

#include "intern.h"

#include "cm/error.h"
#include "cm/log.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define SCHEMA_VERSION 1

static const char *const schema =
    "CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS offsets(topic TEXT, part INTEGER, next_offset INTEGER,"
    " updated_ns INTEGER, PRIMARY KEY(topic, part)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS seen_chunks(chunk_id BLOB PRIMARY KEY, ts_ns INTEGER) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS seen_chunks_ts ON seen_chunks(ts_ns);"
    "CREATE TABLE IF NOT EXISTS strings(id INTEGER PRIMARY KEY, s TEXT NOT NULL);"
    "CREATE TABLE IF NOT EXISTS mappings(id INTEGER PRIMARY KEY, filename INTEGER, build_id BLOB);"
    "CREATE TABLE IF NOT EXISTS functions(id INTEGER PRIMARY KEY, name INTEGER,"
    " system_name INTEGER, filename INTEGER);"
    "CREATE INDEX IF NOT EXISTS functions_name ON functions(name);"
    "CREATE TABLE IF NOT EXISTS locations(id INTEGER PRIMARY KEY, function INTEGER,"
    " mapping INTEGER, address INTEGER, line INTEGER);"
    "CREATE TABLE IF NOT EXISTS stacks(id INTEGER PRIMARY KEY, parent INTEGER, location INTEGER,"
    " depth INTEGER);"
    "CREATE TABLE IF NOT EXISTS labelsets(id INTEGER PRIMARY KEY);"
    "CREATE TABLE IF NOT EXISTS labels(key INTEGER, value INTEGER, labelset INTEGER,"
    " PRIMARY KEY(key, value, labelset)) WITHOUT ROWID;"
    /* a label set with dimensions (dims.h) -> the same without them: the key of the derived
     * rows (tiers, per-leaf), which do not keep the dimensions */
    "CREATE TABLE IF NOT EXISTS labelset_base(labelset INTEGER PRIMARY KEY, base INTEGER);"
    "CREATE TABLE IF NOT EXISTS profile(service INTEGER, version INTEGER, type INTEGER,"
    " width INTEGER, bucket INTEGER, labels INTEGER, stack INTEGER, weight INTEGER,"
    " count INTEGER, rows INTEGER, chunks INTEGER,"
    " PRIMARY KEY(service, version, type, width, bucket, labels, stack)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS profile_coarse(service INTEGER, version INTEGER, type INTEGER,"
    " width INTEGER, bucket INTEGER, labels INTEGER, stack INTEGER, weight INTEGER,"
    " count INTEGER, rows INTEGER, chunks INTEGER,"
    " PRIMARY KEY(service, version, type, width, bucket, labels, stack)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS profile_leaf(service INTEGER, version INTEGER, type INTEGER,"
    " width INTEGER, bucket INTEGER, labels INTEGER, leaf INTEGER, weight INTEGER,"
    " count INTEGER, rows INTEGER, chunks INTEGER,"
    " PRIMARY KEY(service, version, type, width, bucket, labels, leaf)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS totals(service INTEGER, version INTEGER, type INTEGER,"
    " width INTEGER, bucket INTEGER, weight INTEGER, count INTEGER, rows INTEGER,"
    " chunks INTEGER, PRIMARY KEY(service, version, type, width, bucket)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS intervals(service INTEGER, version INTEGER, width INTEGER,"
    " bucket INTEGER, chunks INTEGER, duration_ns INTEGER, agent_cpu_ns INTEGER,"
    " process_cpu_ns INTEGER, dropped INTEGER, work_units INTEGER NOT NULL DEFAULT 0,"
    " PRIMARY KEY(service, version, width, bucket)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS drops(service INTEGER, version INTEGER, width INTEGER,"
    " bucket INTEGER, reason INTEGER, type INTEGER, count INTEGER,"
    " PRIMARY KEY(service, version, width, bucket, reason, type)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS versions(service INTEGER, version INTEGER, first_ns INTEGER,"
    " last_ns INTEGER, chunks INTEGER, rows INTEGER, PRIMARY KEY(service, version)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS fn_stats(service INTEGER, version INTEGER, type INTEGER,"
    " width INTEGER, bucket INTEGER, function INTEGER, chunks INTEGER, incl REAL, incl2 REAL,"
    " self REAL, self2 REAL,"
    " PRIMARY KEY(service, version, type, width, bucket, function)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS spans(trace BLOB, span BLOB, service INTEGER, version INTEGER,"
    " first_ns INTEGER, last_ns INTEGER, cpu INTEGER, wall INTEGER, alloc INTEGER,"
    " inuse INTEGER, lock INTEGER, io INTEGER, rows INTEGER,"
    " PRIMARY KEY(trace, span)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS spans_service ON spans(service, last_ns);"
    "CREATE INDEX IF NOT EXISTS spans_span ON spans(span);"
    "CREATE TABLE IF NOT EXISTS span_stacks(trace BLOB, span BLOB, type INTEGER, stack INTEGER,"
    " weight INTEGER, count INTEGER, rows INTEGER,"
    " PRIMARY KEY(trace, span, type, stack)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS rejects(reason TEXT PRIMARY KEY, count INTEGER) WITHOUT ROWID;"
    "INSERT OR IGNORE INTO meta VALUES('schema_version', 1);";

enum {
    S_OFFSET_GET,
    S_OFFSET_PUT,
    S_SEEN_GET,
    S_SEEN_PUT,
    S_STR,
    S_MAP,
    S_FN,
    S_LOC,
    S_STACK,
    S_LABELSET,
    S_LABEL,
    S_LABELBASE,
    S_PROF,
    S_PROFC,
    S_LEAF,
    S_TOT,
    S_IVAL,
    S_DROP,
    S_VER,
    S_FNSTAT,
    S_SPAN,
    S_SPANSTK,
    S_REJ,
    S_COUNT
};

static const char *const stmt_sql[S_COUNT] = {
    [S_OFFSET_GET] = "SELECT next_offset FROM offsets WHERE topic=?1 AND part=?2",
    [S_OFFSET_PUT] = "INSERT INTO offsets VALUES(?1,?2,?3,?4) ON CONFLICT DO UPDATE SET "
                     "next_offset=excluded.next_offset, updated_ns=excluded.updated_ns",
    [S_SEEN_GET] = "SELECT 1 FROM seen_chunks WHERE chunk_id=?1",
    [S_SEEN_PUT] = "INSERT OR IGNORE INTO seen_chunks VALUES(?1,?2)",
    [S_STR] = "INSERT OR IGNORE INTO strings VALUES(?1,?2)",
    [S_MAP] = "INSERT OR IGNORE INTO mappings VALUES(?1,?2,?3)",
    [S_FN] = "INSERT OR IGNORE INTO functions VALUES(?1,?2,?3,?4)",
    [S_LOC] = "INSERT OR IGNORE INTO locations VALUES(?1,?2,?3,?4,?5)",
    [S_STACK] = "INSERT OR IGNORE INTO stacks VALUES(?1,?2,?3,?4)",
    [S_LABELSET] = "INSERT OR IGNORE INTO labelsets VALUES(?1)",
    [S_LABEL] = "INSERT OR IGNORE INTO labels VALUES(?1,?2,?3)",
    [S_LABELBASE] = "INSERT OR IGNORE INTO labelset_base VALUES(?1,?2)",
    [S_PROF] = "INSERT INTO profile VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11) ON CONFLICT DO "
               "UPDATE SET weight=weight+excluded.weight, count=count+excluded.count, "
               "rows=rows+excluded.rows, chunks=chunks+excluded.chunks",
    [S_PROFC] = "INSERT INTO profile_coarse VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11) ON "
                "CONFLICT DO UPDATE SET weight=weight+excluded.weight, "
                "count=count+excluded.count, rows=rows+excluded.rows, "
                "chunks=chunks+excluded.chunks",
    [S_LEAF] = "INSERT INTO profile_leaf VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11) ON CONFLICT "
               "DO UPDATE SET weight=weight+excluded.weight, count=count+excluded.count, "
               "rows=rows+excluded.rows, chunks=chunks+excluded.chunks",
    [S_TOT] = "INSERT INTO totals VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9) ON CONFLICT DO UPDATE SET "
              "weight=weight+excluded.weight, count=count+excluded.count, "
              "rows=rows+excluded.rows, chunks=chunks+excluded.chunks",
    [S_IVAL] = "INSERT INTO intervals VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10) ON CONFLICT DO "
               "UPDATE SET chunks=chunks+excluded.chunks, "
               "duration_ns=duration_ns+excluded.duration_ns, "
               "agent_cpu_ns=agent_cpu_ns+excluded.agent_cpu_ns, "
               "process_cpu_ns=process_cpu_ns+excluded.process_cpu_ns, "
               "dropped=dropped+excluded.dropped, work_units=work_units+excluded.work_units",
    [S_DROP] = "INSERT INTO drops VALUES(?1,?2,?3,?4,?5,?6,?7) ON CONFLICT DO UPDATE SET "
               "count=count+excluded.count",
    [S_VER] = "INSERT INTO versions VALUES(?1,?2,?3,?4,?5,?6) ON CONFLICT DO UPDATE SET "
              "first_ns=min(first_ns,excluded.first_ns), last_ns=max(last_ns,excluded.last_ns), "
              "chunks=chunks+excluded.chunks, rows=rows+excluded.rows",
    [S_FNSTAT] = "INSERT INTO fn_stats VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11) ON CONFLICT DO "
                 "UPDATE SET chunks=chunks+excluded.chunks, incl=incl+excluded.incl, "
                 "incl2=incl2+excluded.incl2, self=self+excluded.self, "
                 "self2=self2+excluded.self2",
    [S_SPAN] = "INSERT INTO spans VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13) ON CONFLICT "
               "DO UPDATE SET first_ns=min(first_ns,excluded.first_ns), "
               "last_ns=max(last_ns,excluded.last_ns), cpu=cpu+excluded.cpu, "
               "wall=wall+excluded.wall, alloc=alloc+excluded.alloc, inuse=inuse+excluded.inuse, "
               "lock=lock+excluded.lock, io=io+excluded.io, rows=rows+excluded.rows",
    [S_SPANSTK] = "INSERT INTO span_stacks VALUES(?1,?2,?3,?4,?5,?6,?7) ON CONFLICT DO UPDATE SET "
                  "weight=weight+excluded.weight, count=count+excluded.count, "
                  "rows=rows+excluded.rows",
    [S_REJ] = "INSERT INTO rejects VALUES(?1,?2) ON CONFLICT DO UPDATE SET "
              "count=count+excluded.count",
};

typedef struct {
    agg_store_t base;
    sqlite3 *db;
    sqlite3_stmt *st[S_COUNT];
    void **order; /* scratch: batch entries in key order */
    size_t order_cap;
    /* checkpointer: copies the WAL into the database on its own thread and connection, so the
     * consume thread never waits for the fsyncs of a checkpoint */
    pthread_t ckpt;
    int ckpt_running, ckpt_stop;
    pthread_mutex_t ckpt_mu;
    pthread_cond_t ckpt_cv;
    char path[4096];
    /* the per-stack tiers (narrowest first) and their compaction marks (derived_check) */
    int64_t tier_w[AGG_MAX_TIERS], tier_done[AGG_MAX_TIERS];
    int n_tiers;
} sq_store_t;

/* Bytes of the WAL file next to path (0 when absent). */
static int64_t wal_bytes(const char *path) {
    char wal[4200];
    struct stat a;
    snprintf(wal, sizeof wal, "%s-wal", path);
    return stat(wal, &a) == 0 ? (int64_t)a.st_size : 0;
}

static void *ckpt_main(void *arg) {
    sq_store_t *s = arg;
    sqlite3 *db = NULL;
    if (sqlite3_open_v2(s->path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL) !=
        SQLITE_OK) {
        CM_WARN("store %s: checkpointer cannot open the database: %s; the writer will "
                "checkpoint", s->path, db ? sqlite3_errmsg(db) : "out of memory");
        sqlite3_close(db);
        return NULL;
    }
    sqlite3_busy_timeout(db, 100);
    /* A connection that has never read the database has not opened its WAL: a checkpoint on
     * it is a silent no-op (SQLite returns SQLITE_OK with nlog = nckpt = -1). One read opens
     * the WAL for the life of the connection. Without it every partition file stayed at its
     * first page and the WAL grew until the writer's fallback checkpoint at WAL_MAX_PAGES. */
    sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL);
    int warned = 0;
    pthread_mutex_lock(&s->ckpt_mu);
    while (!s->ckpt_stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += AGG_CKPT_INTERVAL_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&s->ckpt_cv, &s->ckpt_mu, &ts);
        if (s->ckpt_stop)
            break;
        pthread_mutex_unlock(&s->ckpt_mu);
        int nlog = 0, nckpt = 0;
        int rc = sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_PASSIVE, &nlog, &nckpt);
        if (rc == SQLITE_OK && nlog > 0 && nckpt == nlog &&
            wal_bytes(s->path) > AGG_WAL_LIMIT_BYTES) {
            /* everything is in the database but the file is past its bound (a large batch,
             * or a reader held the WAL): restart it from the beginning and truncate it. Waits
             * at most the 100 ms busy timeout for readers and the writer. */
            rc = sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
            if (rc == SQLITE_BUSY)
                rc = SQLITE_OK; /* a reader or the writer: next turn */
        }
        if (rc != SQLITE_OK && rc != SQLITE_BUSY && !warned++)
            CM_WARN("store %s: checkpoint failed: %s (further failures not logged)", s->path,
                    sqlite3_errmsg(db));
        if (nlog < 0 && !warned++)
            CM_WARN("store %s: checkpoint found no WAL open on its connection", s->path);
        pthread_mutex_lock(&s->ckpt_mu);
    }
    pthread_mutex_unlock(&s->ckpt_mu);
    sqlite3_close(db);
    return NULL;
}

/* The label set a profile row's derived rows (tiers, per-leaf) are keyed by: its own without
 * the dimensions (labelset_base), the row's own when it has none. */
#define BASE_LABELS                                                                                \
    "COALESCE((SELECT base FROM labelset_base WHERE labelset_base.labelset = labels), labels)"

/* Translates a SQLite result code at the module edge. */
static int sq_err(int rc) {
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW:
        return 0;
    case SQLITE_NOMEM:
        return CM_ENOMEM;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return -EBUSY;
    case SQLITE_FULL:
        return -ENOSPC;
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
        return -EACCES;
    case SQLITE_CANTOPEN:
        return -ENOENT;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
        return CM_EFORMAT;
    default:
        return CM_EIO;
    }
}

static int exec(sq_store_t *s, const char *sql) {
    char *msg = NULL;
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        CM_ERROR("store %s: '%.60s' failed: %s", s->path, sql, msg ? msg : sqlite3_errstr(rc));
        sqlite3_free(msg);
    }
    return sq_err(rc);
}

/* Runs a prepared write statement to completion and resets it. */
static int step(sq_store_t *s, sqlite3_stmt *st) {
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        CM_ERROR("store %s: %s", s->path, sqlite3_errmsg(s->db));
        return sq_err(rc);
    }
    return 0;
}

#define B64(st, i, v) sqlite3_bind_int64((st), (i), (sqlite3_int64)(v))

/* After each commit: when the checkpointer has not kept up (the writer commits back to back),
 * checkpoint here so the WAL stays bounded whatever the load. */
#define WAL_MAX_PAGES (AGG_WAL_LIMIT_BYTES / 4096)
static int wal_hook(void *arg, sqlite3 *db, const char *name, int pages) {
    (void)arg;
    if (pages >= WAL_MAX_PAGES)
        sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    return SQLITE_OK;
}

static void sq_close(agg_store_t *base) {
    sq_store_t *s = (sq_store_t *)base;
    if (s->ckpt_running) {
        pthread_mutex_lock(&s->ckpt_mu);
        s->ckpt_stop = 1;
        pthread_cond_signal(&s->ckpt_cv);
        pthread_mutex_unlock(&s->ckpt_mu);
        pthread_join(s->ckpt, NULL);
    }
    pthread_mutex_destroy(&s->ckpt_mu);
    pthread_cond_destroy(&s->ckpt_cv);
    if (s->db && s->ckpt_running)
        sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    for (int i = 0; i < S_COUNT; i++)
        sqlite3_finalize(s->st[i]);
    sqlite3_close(s->db);
    free(s->order);
    free(s);
}

static int sq_offset_get(agg_store_t *base, const char *topic, int32_t partition, int64_t *next) {
    sq_store_t *s = (sq_store_t *)base;
    sqlite3_stmt *st = s->st[S_OFFSET_GET];
    sqlite3_bind_text(st, 1, topic, -1, SQLITE_STATIC);
    B64(st, 2, partition);
    int rc = sqlite3_step(st);
    *next = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sq_err(rc);
}

static int sq_chunk_seen(agg_store_t *base, const uint8_t *id, int *seen) {
    sq_store_t *s = (sq_store_t *)base;
    sqlite3_stmt *st = s->st[S_SEEN_GET];
    sqlite3_bind_blob(st, 1, id, CM_CHUNK_ID_LEN, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    *seen = rc == SQLITE_ROW;
    sqlite3_reset(st);
    return rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sq_err(rc);
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#define RUN(stmt)                                                                                  \
    do {                                                                                           \
        if ((rc = step(s, (stmt))))                                                                \
            goto out;                                                                              \
    } while (0)

/* The entries of m ordered by key, in s->order (reused across calls). NULL: no memory. */
static void **ordered(sq_store_t *s, const agg_hmap_t *m, size_t nblob, size_t nint) {
    return agg_hmap_ordered(m, nblob, nint, &s->order, &s->order_cap);
}

#define ORDERED(m, nblob, nint)                                                                    \
    do {                                                                                           \
        if (!(ord = ordered(s, (m), (nblob), (nint)))) {                                           \
            rc = CM_ENOMEM;                                                                        \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

/* Upserts the profile-shaped rows of m (profile, profile_coarse, profile_leaf) in key order. */
static int write_prof(sq_store_t *s, const agg_hmap_t *m, sqlite3_stmt *st) {
    void **ord = ordered(s, m, 0, 7);
    if (!ord)
        return CM_ENOMEM;
    for (size_t i = 0; i < m->n; i++) {
        const agg_prof_ent_t *e = ord[i];
        B64(st, 1, e->k.service);
        B64(st, 2, e->k.version);
        B64(st, 3, e->k.type);
        B64(st, 4, e->k.width);
        B64(st, 5, e->k.bucket);
        B64(st, 6, e->k.labels);
        B64(st, 7, e->k.stack);
        B64(st, 8, e->weight);
        B64(st, 9, e->count);
        B64(st, 10, e->rows);
        B64(st, 11, e->chunks);
        int rc = step(s, st);
        if (rc)
            return rc;
    }
    return 0;
}

/* meta value of key as text into buf ("" when absent). */
static void meta_text(sq_store_t *s, const char *key, char *buf, size_t size) {
    sqlite3_stmt *st = NULL;
    buf[0] = 0;
    if (sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key=?1", -1, &st, NULL) !=
        SQLITE_OK)
        return;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0))
        snprintf(buf, size, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
}

/* meta value of key as an integer, 0 when absent. */
static int64_t meta_int(sq_store_t *s, const char *key) {
    char buf[32];
    meta_text(s, key, buf, sizeof buf);
    return atoll(buf);
}

static int for_each_sv(sq_store_t *s, sqlite3_stmt *st, int typed, int64_t *changes);

/* Parses "a,b,c" into v (at most max); returns the count. */
static int parse_list(const char *txt, int64_t *v, int max) {
    char buf[256];
    int n = 0;
    snprintf(buf, sizeof buf, "%s", txt);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < max;
         t = strtok_r(NULL, ",", &save))
        v[n++] = atoll(t);
    return n;
}

static void format_list(const int64_t *v, int n, char *buf, size_t size) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < n && o < size; i++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld", i ? "," : "", (long long)v[i]);
}

/* The per-stack tiers and the per-leaf rollup are derived from `profile`.
 *  - Tiers (widths narrowest first, the last one the coarse width) are built by compaction:
 *    tier t holds the fine rows with bucket < done[t] (meta.tiers_done), merged; the retention
 *    pass advances done[t] over completed tiles (sq_compact), and a batch adds its rows with
 *    bucket < done[t] (late data) to the tier directly (agg_batch_derive), so a tier is always
 *    exactly the sum of the fine rows below its mark. Readers use a tier only below its mark.
 *    Tiers narrower than the coarse one are pruned where fine rows are downsampled.
 *  - The per-leaf rollup gets every row at ingest.
 * When the store has none for these widths (written by an older version, or changed widths)
 * both are rebuilt from `profile` here, inside the caller's transaction, with done[t] = the
 * start of the current tile; meta.tiers / tiers_done / replicate_width then tell readers. The
 * leaf of a stack is its trie node's location; fine rows go to replicate-width buckets,
 * downsampled rows keep theirs. */
static int derived_check(sq_store_t *s, const int64_t *tiers, int n_tiers, int64_t rep) {
    char want[128], have[128], done_txt[256];
    format_list(tiers, n_tiers, want, sizeof want);
    meta_text(s, "tiers", have, sizeof have);
    if (!strcmp(want, have) && meta_int(s, "replicate_width") == rep) {
        if (!s->n_tiers) { /* first use of this handle: load the marks */
            meta_text(s, "tiers_done", done_txt, sizeof done_txt);
            if (parse_list(done_txt, s->tier_done, AGG_MAX_TIERS) != n_tiers)
                return CM_EFORMAT;
            memcpy(s->tier_w, tiers, (size_t)n_tiers * sizeof *tiers);
            s->n_tiers = n_tiers;
        }
        return 0;
    }
    if (n_tiers <= 0 || n_tiers > AGG_MAX_TIERS || rep <= 0)
        return CM_EINVAL;
    CM_INFO("store %s: building the per-stack tiers (%ss) and the per-leaf (%llds) rollups from "
            "the profile table", s->path, want, (long long)rep);
    int64_t coarse = tiers[n_tiers - 1], now_s = now_ns() / 1000000000;
    int rc = exec(s, "DELETE FROM profile_coarse; DELETE FROM profile_leaf;");
    for (int i = 0; i < n_tiers && !rc; i++) {
        char sql[1024];
        long long w = (long long)tiers[i];
        s->tier_done[i] = now_s - now_s % tiers[i];
        /* fine rows below the mark; for the coarse tier also the rows already downsampled */
        snprintf(sql, sizeof sql,
                 "INSERT INTO profile_coarse SELECT service, version, type, %lld, "
                 "bucket - bucket %% %lld AS b, " BASE_LABELS " AS lb, stack, SUM(weight), "
                 "SUM(count), SUM(rows), SUM(chunks) FROM profile WHERE (width < %lld AND "
                 "bucket < %lld) OR (%lld = %lld AND width >= %lld) GROUP BY service, version, "
                 "type, b, lb, stack",
                 w, w, w, (long long)s->tier_done[i], w, (long long)coarse, (long long)coarse);
        rc = exec(s, sql);
    }
    if (rc)
        return rc;
    memcpy(s->tier_w, tiers, (size_t)n_tiers * sizeof *tiers);
    s->n_tiers = n_tiers;
    format_list(s->tier_done, n_tiers, done_txt, sizeof done_txt);
    char sql[2048];
    long long r = (long long)rep;
    snprintf(sql, sizeof sql,
             "INSERT INTO profile_leaf SELECT p.service, p.version, p.type, "
             "max(p.width, %lld) AS w, CASE WHEN p.width < %lld THEN p.bucket - p.bucket %% %lld "
             "ELSE p.bucket END AS b, " BASE_LABELS " AS lb, COALESCE(s.location, 0) AS l, "
             "SUM(p.weight), SUM(p.count), SUM(p.rows), SUM(p.chunks) FROM profile p LEFT JOIN "
             "stacks s ON s.id = p.stack GROUP BY p.service, p.version, p.type, w, b, lb, l;"
             "INSERT OR REPLACE INTO meta VALUES('coarse_width', %lld);"
             "INSERT OR REPLACE INTO meta VALUES('tiers', '%s');"
             "INSERT OR REPLACE INTO meta VALUES('tiers_done', '%s');"
             "INSERT OR REPLACE INTO meta VALUES('replicate_width', %lld);",
             r, r, r, (long long)coarse, want, done_txt, r);
    return exec(s, sql);
}

/* Advances each tier's mark to the start of the tile that holds now_s - 60 s (data of a tile
 * arrives within seconds of its end; a later chunk is added at ingest as late data), merging
 * the fine rows in between: each fine row is read once per tier. One transaction. */
static int sq_compact(agg_store_t *base, int64_t fine_s, int64_t now_s) {
    sq_store_t *s = (sq_store_t *)base;
    if (!s->n_tiers)
        return 0; /* no batch written yet: nothing to compact */
    int64_t done[AGG_MAX_TIERS];
    int n = s->n_tiers, moved = 0;
    for (int i = 0; i < n; i++) {
        int64_t t = now_s - 60;
        done[i] = t - t % s->tier_w[i];
        moved |= done[i] > s->tier_done[i];
    }
    if (!moved)
        return 0;
    int rc = exec(s, "BEGIN IMMEDIATE");
    if (rc)
        return rc;
    sqlite3_stmt *ins = NULL;
    for (int i = 0; i < n && !rc; i++) {
        if (done[i] <= s->tier_done[i])
            continue;
        char sql[1024];
        snprintf(sql, sizeof sql,
                 "INSERT INTO profile_coarse(service, version, type, width, bucket, labels, "
                 "stack, weight, count, rows, chunks) SELECT service, version, type, ?4, "
                 "bucket - bucket %% ?4, " BASE_LABELS " AS lb, stack, SUM(weight), SUM(count), "
                 "SUM(rows), SUM(chunks) FROM profile WHERE service=?1 AND version=?2 AND "
                 "type=?3 AND width=?5 AND bucket>=?6 AND bucket<?7 GROUP BY lb, stack, "
                 "bucket - bucket %% ?4 ON CONFLICT DO UPDATE SET weight=weight+excluded.weight, "
                 "count=count+excluded.count, rows=rows+excluded.rows, "
                 "chunks=chunks+excluded.chunks");
        if ((rc = sq_err(sqlite3_prepare_v2(s->db, sql, -1, &ins, NULL))))
            break;
        sqlite3_bind_int64(ins, 4, s->tier_w[i]);
        sqlite3_bind_int64(ins, 5, fine_s);
        sqlite3_bind_int64(ins, 6, s->tier_done[i]);
        sqlite3_bind_int64(ins, 7, done[i]);
        int64_t junk = 0;
        rc = for_each_sv(s, ins, 1, &junk);
        sqlite3_finalize(ins);
        ins = NULL;
    }
    char txt[256], sql[512];
    format_list(done, n, txt, sizeof txt);
    snprintf(sql, sizeof sql, "INSERT OR REPLACE INTO meta VALUES('tiers_done', '%s')", txt);
    if (rc || (rc = exec(s, sql)) || (rc = exec(s, "COMMIT"))) {
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        return rc;
    }
    for (int i = 0; i < n; i++)
        if (done[i] > s->tier_done[i])
            s->tier_done[i] = done[i];
    return 0;
}

static int sq_derive(agg_store_t *base, const int64_t *tiers, int n_tiers, int64_t replicate_s) {
    sq_store_t *s = (sq_store_t *)base;
    int rc = exec(s, "BEGIN IMMEDIATE");
    if (rc)
        return rc;
    if ((rc = derived_check(s, tiers, n_tiers, replicate_s)) || (rc = exec(s, "COMMIT")))
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

static int sq_batch_write(agg_store_t *base, const char *topic, int32_t partition,
                          agg_batch_t *b) {
    sq_store_t *s = (sq_store_t *)base;
    sqlite3_stmt **S = s->st;
    void **ord;
    agg_batch_sort_new(b);
    int rc = exec(s, "BEGIN IMMEDIATE");
    if (rc)
        return rc;
    int64_t stored;
    if ((rc = sq_offset_get(base, topic, partition, &stored)))
        goto out;
    if (stored != b->base_offset) {
        CM_WARN("store %s: partition %d offset is %lld, batch started at %lld: another instance "
                "wrote it; dropping the batch and seeking",
                s->path, partition, (long long)stored, (long long)b->base_offset);
        rc = -ESTALE;
        goto out;
    }
    for (size_t i = 0; i < b->strs.n; i++) {
        const agg_new_str_t *x = &b->strs.v[i];
        B64(S[S_STR], 1, x->id);
        sqlite3_bind_text(S[S_STR], 2, b->str_arena + x->off, (int)x->len, SQLITE_STATIC);
        RUN(S[S_STR]);
    }
    for (size_t i = 0; i < b->maps.n; i++) {
        const agg_new_map_t *x = &b->maps.v[i];
        B64(S[S_MAP], 1, x->id);
        B64(S[S_MAP], 2, x->filename);
        sqlite3_bind_blob(S[S_MAP], 3, x->build_id, (int)x->build_id_len, SQLITE_STATIC);
        RUN(S[S_MAP]);
    }
    for (size_t i = 0; i < b->fns.n; i++) {
        const agg_new_fn_t *x = &b->fns.v[i];
        B64(S[S_FN], 1, x->id);
        B64(S[S_FN], 2, x->name);
        B64(S[S_FN], 3, x->system_name);
        B64(S[S_FN], 4, x->filename);
        RUN(S[S_FN]);
    }
    for (size_t i = 0; i < b->locs.n; i++) {
        const agg_new_loc_t *x = &b->locs.v[i];
        B64(S[S_LOC], 1, x->id);
        B64(S[S_LOC], 2, x->function);
        B64(S[S_LOC], 3, x->mapping);
        B64(S[S_LOC], 4, x->address);
        B64(S[S_LOC], 5, x->line);
        RUN(S[S_LOC]);
    }
    for (size_t i = 0; i < b->stacks.n; i++) {
        const agg_new_stack_t *x = &b->stacks.v[i];
        B64(S[S_STACK], 1, x->id);
        B64(S[S_STACK], 2, x->parent);
        B64(S[S_STACK], 3, x->location);
        B64(S[S_STACK], 4, x->depth);
        RUN(S[S_STACK]);
    }
    for (size_t i = 0; i < b->labelsets.n; i++) {
        B64(S[S_LABELSET], 1, b->labelsets.v[i]);
        RUN(S[S_LABELSET]);
    }
    for (size_t i = 0; i < b->labels.n; i++) {
        const agg_new_label_t *x = &b->labels.v[i];
        B64(S[S_LABEL], 1, x->key);
        B64(S[S_LABEL], 2, x->value);
        B64(S[S_LABEL], 3, x->set);
        RUN(S[S_LABEL]);
    }
    for (size_t i = 0; i < b->labelbase.n; i++) {
        B64(S[S_LABELBASE], 1, b->labelbase.v[i].set);
        B64(S[S_LABELBASE], 2, b->labelbase.v[i].value);
        RUN(S[S_LABELBASE]);
    }
    if (b->n_tiers && ((rc = derived_check(s, b->tiers, b->n_tiers, b->replicate_width)) ||
                       (rc = agg_batch_derive(b, s->tier_done))))
        goto out;
    if ((rc = write_prof(s, &b->prof, S[S_PROF])) || (rc = write_prof(s, &b->profc, S[S_PROFC])) ||
        (rc = write_prof(s, &b->leaf, S[S_LEAF])))
        goto out;
    ORDERED(&b->tot, 0, 5);
    for (size_t i = 0; i < b->tot.n; i++) {
        const agg_tot_ent_t *e = ord[i];
        sqlite3_stmt *st = S[S_TOT];
        B64(st, 1, e->k.service);
        B64(st, 2, e->k.version);
        B64(st, 3, e->k.type);
        B64(st, 4, e->k.width);
        B64(st, 5, e->k.bucket);
        B64(st, 6, e->weight);
        B64(st, 7, e->count);
        B64(st, 8, e->rows);
        B64(st, 9, e->chunks);
        RUN(st);
    }
    for (size_t i = 0; i < b->ival.n; i++) {
        const agg_ival_ent_t *e = agg_hmap_entry(&b->ival, i);
        sqlite3_stmt *st = S[S_IVAL];
        B64(st, 1, e->k.service);
        B64(st, 2, e->k.version);
        B64(st, 3, e->k.width);
        B64(st, 4, e->k.bucket);
        B64(st, 5, e->chunks);
        B64(st, 6, e->duration_ns);
        B64(st, 7, e->agent_cpu_ns);
        B64(st, 8, e->process_cpu_ns);
        B64(st, 9, e->dropped);
        B64(st, 10, e->work_units);
        RUN(st);
    }
    for (size_t i = 0; i < b->drop.n; i++) {
        const agg_drop_ent_t *e = agg_hmap_entry(&b->drop, i);
        sqlite3_stmt *st = S[S_DROP];
        B64(st, 1, e->k.service);
        B64(st, 2, e->k.version);
        B64(st, 3, e->k.width);
        B64(st, 4, e->k.bucket);
        B64(st, 5, e->k.reason);
        B64(st, 6, e->k.type);
        B64(st, 7, e->count);
        RUN(st);
    }
    for (size_t i = 0; i < b->ver.n; i++) {
        const agg_ver_ent_t *e = agg_hmap_entry(&b->ver, i);
        sqlite3_stmt *st = S[S_VER];
        B64(st, 1, e->k.service);
        B64(st, 2, e->k.version);
        B64(st, 3, e->first_ns);
        B64(st, 4, e->last_ns);
        B64(st, 5, e->chunks);
        B64(st, 6, e->rows);
        RUN(st);
    }
    ORDERED(&b->fn, 0, 6);
    for (size_t i = 0; i < b->fn.n; i++) {
        const agg_fn_ent_t *e = ord[i];
        sqlite3_stmt *st = S[S_FNSTAT];
        B64(st, 1, e->k.service);
        B64(st, 2, e->k.version);
        B64(st, 3, e->k.type);
        B64(st, 4, e->k.width);
        B64(st, 5, e->k.bucket);
        B64(st, 6, e->k.function);
        B64(st, 7, e->chunks);
        sqlite3_bind_double(st, 8, e->incl);
        sqlite3_bind_double(st, 9, e->incl2);
        sqlite3_bind_double(st, 10, e->self);
        sqlite3_bind_double(st, 11, e->self2);
        RUN(st);
    }
    ORDERED(&b->span, 24, 0);
    for (size_t i = 0; i < b->span.n; i++) {
        const agg_span_ent_t *e = ord[i];
        sqlite3_stmt *st = S[S_SPAN];
        sqlite3_bind_blob(st, 1, e->k.trace, 16, SQLITE_STATIC);
        sqlite3_bind_blob(st, 2, e->k.span, 8, SQLITE_STATIC);
        B64(st, 3, e->service);
        B64(st, 4, e->version);
        B64(st, 5, e->first_ns);
        B64(st, 6, e->last_ns);
        for (int t = 1; t <= CM_EV_MAX; t++)
            B64(st, 6 + t, e->weight[t]);
        B64(st, 13, e->rows);
        RUN(st);
    }
    ORDERED(&b->spanstk, 24, 2);
    for (size_t i = 0; i < b->spanstk.n; i++) {
        const agg_spanstk_ent_t *e = ord[i];
        sqlite3_stmt *st = S[S_SPANSTK];
        sqlite3_bind_blob(st, 1, e->k.trace, 16, SQLITE_STATIC);
        sqlite3_bind_blob(st, 2, e->k.span, 8, SQLITE_STATIC);
        B64(st, 3, e->k.type);
        B64(st, 4, e->k.stack);
        B64(st, 5, e->weight);
        B64(st, 6, e->count);
        B64(st, 7, e->rows);
        RUN(st);
    }
    for (size_t i = 0; i < b->rej.n; i++) {
        const agg_rej_ent_t *e = agg_hmap_entry(&b->rej, i);
        sqlite3_bind_text(S[S_REJ], 1, e->k.reason, -1, SQLITE_STATIC);
        B64(S[S_REJ], 2, e->count);
        RUN(S[S_REJ]);
    }
    int64_t now = now_ns();
    for (size_t i = 0; i < b->seen.n; i++) {
        const agg_seen_ent_t *e = agg_hmap_entry(&b->seen, i);
        sqlite3_bind_blob(S[S_SEEN_PUT], 1, e->k.id, CM_CHUNK_ID_LEN, SQLITE_STATIC);
        B64(S[S_SEEN_PUT], 2, e->ts_ns ? e->ts_ns : now);
        RUN(S[S_SEEN_PUT]);
    }
    sqlite3_bind_text(S[S_OFFSET_PUT], 1, topic, -1, SQLITE_STATIC);
    B64(S[S_OFFSET_PUT], 2, partition);
    B64(S[S_OFFSET_PUT], 3, b->next_offset);
    B64(S[S_OFFSET_PUT], 4, now);
    RUN(S[S_OFFSET_PUT]);
    rc = exec(s, "COMMIT");
out:
    if (rc)
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

/* The tables that carry (service, version, [type,] width, bucket) rollups, with their sums. */
static const struct {
    const char *table, *keys, *sums;
    int typed;
} rollups[] = {
    {"profile", "service,version,type,labels,stack", "weight,count,rows,chunks", 1},
    {"profile_leaf", "service,version,type,labels,leaf", "weight,count,rows,chunks", 1},
    {"profile_coarse", "service,version,type,labels,stack", "weight,count,rows,chunks", 1},
    {"totals", "service,version,type", "weight,count,rows,chunks", 1},
    {"fn_stats", "service,version,type,function", "chunks,incl,incl2,self,self2", 1},
    {"intervals", "service,version",
     "chunks,duration_ns,agent_cpu_ns,process_cpu_ns,dropped,work_units", 0},
    {"drops", "service,version,reason,type", "count", 0},
};

/* Runs fn(sql-with-?1..?3 service/version/type) for every (service, version[, type]) so each
 * statement is an index range scan instead of a table scan. */
static int for_each_sv(sq_store_t *s, sqlite3_stmt *st, int typed, int64_t *changes) {
    sqlite3_stmt *sv = NULL;
    int rc = sq_err(sqlite3_prepare_v2(s->db, "SELECT service, version FROM versions", -1, &sv,
                                       NULL));
    if (rc)
        goto out;
    while (sqlite3_step(sv) == SQLITE_ROW) {
        for (int t = typed ? 1 : 0; t <= (typed ? CM_EV_MAX : 0); t++) {
            sqlite3_bind_int64(st, 1, sqlite3_column_int64(sv, 0));
            sqlite3_bind_int64(st, 2, sqlite3_column_int64(sv, 1));
            if (typed)
                sqlite3_bind_int64(st, 3, t);
            if ((rc = step(s, st)))
                goto out;
            *changes += sqlite3_changes(s->db);
        }
    }
out:
    sqlite3_finalize(sv);
    return rc;
}

static int sq_downsample(agg_store_t *base, int64_t fine, int64_t coarse, int64_t cutoff_s,
                         agg_retention_stats_t *stats) {
    sq_store_t *s = (sq_store_t *)base;
    sqlite3_stmt *ins = NULL, *del = NULL;
    int rc = exec(s, "BEGIN IMMEDIATE");
    if (rc)
        return rc;
    for (size_t r = 0; r < sizeof rollups / sizeof rollups[0]; r++) {
        char sql[2048], sums[512] = "", upd[512] = "", cols[512];
        char tmp[512];
        snprintf(tmp, sizeof tmp, "%s", rollups[r].sums);
        for (char *tok = strtok(tmp, ","); tok; tok = strtok(NULL, ",")) {
            size_t n1 = strlen(sums), n2 = strlen(upd);
            snprintf(sums + n1, sizeof sums - n1, "%sSUM(%s)", n1 ? "," : "", tok);
            snprintf(upd + n2, sizeof upd - n2, "%s%s=%s+excluded.%s", n2 ? "," : "", tok, tok,
                     tok);
        }
        const char *where = rollups[r].typed ? "service=?1 AND version=?2 AND type=?3"
                                             : "service=?1 AND version=?2";
        snprintf(cols, sizeof cols, "%s,width,bucket,%s", rollups[r].keys, rollups[r].sums);
        snprintf(sql, sizeof sql,
                 "INSERT INTO %s(%s) SELECT %s,?5,bucket-bucket%%?5,%s FROM %s WHERE %s AND "
                 "width=?4 AND bucket<?6 GROUP BY %s,bucket-bucket%%?5 ON CONFLICT DO UPDATE "
                 "SET %s",
                 rollups[r].table, cols, rollups[r].keys, sums, rollups[r].table, where,
                 rollups[r].keys, upd);
        /* the tiers below the coarse width go where the fine rows go (the coarse tier stays) */
        int tiers = !strcmp(rollups[r].table, "profile_coarse");
        if (tiers) /* nothing to merge: a no-op insert */
            snprintf(sql, sizeof sql, "SELECT ?1,?2,?3,?4,?5,?6 WHERE 0");
        if ((rc = sq_err(sqlite3_prepare_v2(s->db, sql, -1, &ins, NULL)))) {
            CM_ERROR("store %s: %s: %s", s->path, sql, sqlite3_errmsg(s->db));
            goto out;
        }
        snprintf(sql, sizeof sql, "DELETE FROM %s WHERE %s AND %s AND bucket<?6",
                 rollups[r].table, where, tiers ? "width<?5" : "width=?4");
        if ((rc = sq_err(sqlite3_prepare_v2(s->db, sql, -1, &del, NULL))))
            goto out;
        /* profile_leaf holds replicate-width rows where the others hold fine ones */
        int64_t src = fine;
        if (!strcmp(rollups[r].table, "profile_leaf") && (src = meta_int(s, "replicate_width")) <= 0)
            src = fine;
        for (sqlite3_stmt *st = ins; st; st = st == ins ? del : NULL) {
            sqlite3_bind_int64(st, 4, src);
            sqlite3_bind_int64(st, 5, coarse);
            sqlite3_bind_int64(st, 6, cutoff_s);
        }
        int64_t moved = 0, junk = 0;
        if ((rc = for_each_sv(s, ins, rollups[r].typed, &junk)) ||
            (rc = for_each_sv(s, del, rollups[r].typed, &moved)))
            goto out;
        if (stats && !tiers)
            stats->rows_moved += moved;
        sqlite3_finalize(ins);
        sqlite3_finalize(del);
        ins = del = NULL;
    }
    rc = exec(s, "COMMIT");
out:
    sqlite3_finalize(ins);
    sqlite3_finalize(del);
    if (rc)
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

static int sq_expire(agg_store_t *base, int64_t data_cutoff_s, int64_t span_cutoff_ns,
                     int64_t seen_cutoff_ns, agg_retention_stats_t *stats) {
    sq_store_t *s = (sq_store_t *)base;
    sqlite3_stmt *del = NULL;
    int rc = exec(s, "BEGIN IMMEDIATE");
    if (rc)
        return rc;
    for (size_t r = 0; r < sizeof rollups / sizeof rollups[0]; r++) {
        char sql[512];
        /* a coarse row goes once all of it is past the cutoff: until then it is what a query
         * over its whole bucket reads, while the fine rows of its later part still exist */
        snprintf(sql, sizeof sql, "DELETE FROM %s WHERE %s AND %s", rollups[r].table,
                 rollups[r].typed ? "service=?1 AND version=?2 AND type=?3"
                                  : "service=?1 AND version=?2",
                 strcmp(rollups[r].table, "profile_coarse") ? "bucket<?4" : "bucket+width<=?4");
        if ((rc = sq_err(sqlite3_prepare_v2(s->db, sql, -1, &del, NULL))))
            goto out;
        sqlite3_bind_int64(del, 4, data_cutoff_s);
        int64_t n = 0;
        if ((rc = for_each_sv(s, del, rollups[r].typed, &n)))
            goto out;
        if (stats)
            stats->rows_expired += n;
        sqlite3_finalize(del);
        del = NULL;
    }
    static const char *const span_sql[] = {
        ("DELETE FROM span_stacks WHERE (trace, span) IN (SELECT trace, span FROM spans WHERE "
         "last_ns < ?1)"),
        "DELETE FROM spans WHERE last_ns < ?1",
        "DELETE FROM seen_chunks WHERE ts_ns < ?1",
    };
    for (int i = 0; i < 3; i++) {
        if ((rc = sq_err(sqlite3_prepare_v2(s->db, span_sql[i], -1, &del, NULL))))
            goto out;
        sqlite3_bind_int64(del, 1, i < 2 ? span_cutoff_ns : seen_cutoff_ns);
        if ((rc = step(s, del)))
            goto out;
        if (stats && i == 1)
            stats->spans_expired += sqlite3_changes(s->db);
        if (stats && i == 2)
            stats->seen_expired += sqlite3_changes(s->db);
        sqlite3_finalize(del);
        del = NULL;
    }
    rc = exec(s, "COMMIT");
out:
    sqlite3_finalize(del);
    if (rc)
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return rc;
}

static int64_t sq_size_bytes(agg_store_t *base) {
    sq_store_t *s = (sq_store_t *)base;
    struct stat a;
    int64_t total = 0;
    char wal[4200];
    if (stat(s->path, &a) == 0)
        total += a.st_size;
    snprintf(wal, sizeof wal, "%s-wal", s->path);
    if (stat(wal, &a) == 0)
        total += a.st_size;
    return total;
}

static const agg_store_vtab_t sq_vtab = {
    .name = "sqlite",
    .close = sq_close,
    .offset_get = sq_offset_get,
    .chunk_seen = sq_chunk_seen,
    .batch_write = sq_batch_write,
    .downsample = sq_downsample,
    .expire = sq_expire,
    .derive = sq_derive,
    .compact = sq_compact,
    .size_bytes = sq_size_bytes,
};

void agg_store_path(char *out, size_t size, const char *dir, const char *topic,
                    int32_t partition) {
    snprintf(out, size, "%s/%s-%d.db", dir, topic, partition);
}

static int open_store(const char *path, int readonly, agg_store_t **out, char *err,
                      size_t err_size) {
    sq_store_t *s = calloc(1, sizeof *s);
    int rc = 0;
    if (!s)
        return CM_ENOMEM;
    s->base.vt = &sq_vtab;
    snprintf(s->path, sizeof s->path, "%s", path);
    pthread_mutex_init(&s->ckpt_mu, NULL);
    pthread_cond_init(&s->ckpt_cv, NULL);
    int src = sqlite3_open_v2(path, &s->db,
                              (readonly ? SQLITE_OPEN_READONLY
                                        : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
                                  SQLITE_OPEN_NOMUTEX,
                              NULL);
    if (src != SQLITE_OK) {
        snprintf(err, err_size, "cannot open store '%s': %s; check that the directory exists "
                 "and is writable", path, s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(src));
        rc = sq_err(src);
        goto out;
    }
    sqlite3_busy_timeout(s->db, 30000);
    if (readonly)
        goto prepare;
    if ((rc = exec(s, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
                      "PRAGMA cache_size=-65536; PRAGMA temp_store=MEMORY; "
                      "PRAGMA journal_size_limit=" AGG_STR(AGG_WAL_LIMIT_BYTES) ";")) ||
        (rc = exec(s, "BEGIN IMMEDIATE")))
        goto fail;
    if ((rc = exec(s, schema))) {
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        goto fail;
    }
    /* columns added since schema version 1 (a store created before them gets them here) */
    sqlite3_exec(s->db, "ALTER TABLE intervals ADD COLUMN work_units INTEGER NOT NULL DEFAULT 0",
                 NULL, NULL, NULL); /* fails with "duplicate column" when present: fine */
    if ((rc = exec(s, "COMMIT")))
        goto fail;
prepare:
    for (int i = 0; i < S_COUNT; i++) {
        if (sqlite3_prepare_v3(s->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &s->st[i],
                               NULL) != SQLITE_OK) {
            snprintf(err, err_size, "store '%s': cannot prepare statement %d: %s", path, i,
                     sqlite3_errmsg(s->db));
            rc = CM_EIO;
            goto out;
        }
    }
    sqlite3_stmt *v;
    if (sqlite3_prepare_v2(s->db, "SELECT value FROM meta WHERE key='schema_version'", -1, &v,
                           NULL) == SQLITE_OK) {
        int ver = sqlite3_step(v) == SQLITE_ROW ? sqlite3_column_int(v, 0) : 0;
        sqlite3_finalize(v);
        if (ver != SCHEMA_VERSION) {
            snprintf(err, err_size, "store '%s' has schema version %d, this aggregator writes %d; "
                     "use a new store directory", path, ver, SCHEMA_VERSION);
            rc = CM_EFORMAT;
            goto out;
        }
    }
    /* the writer no longer checkpoints itself; the checkpointer thread does */
    if (!readonly && pthread_create(&s->ckpt, NULL, ckpt_main, s) == 0) {
        s->ckpt_running = 1;
        sqlite3_wal_hook(s->db, wal_hook, s); /* replaces the automatic checkpoint */
    }
    *out = &s->base;
    return 0;
fail:
    snprintf(err, err_size, "cannot initialise store '%s': %s (%s)", path, sqlite3_errmsg(s->db),
             cm_strerror(rc));
out:
    sq_close(&s->base);
    return rc;
}

int agg_store_sqlite_open(const char *path, agg_store_t **out, char *err, size_t err_size) {
    return open_store(path, 0, out, err, err_size);
}

int agg_store_sqlite_open_readonly(const char *path, agg_store_t **out, char *err,
                                   size_t err_size) {
    return open_store(path, 1, out, err, err_size);
}
