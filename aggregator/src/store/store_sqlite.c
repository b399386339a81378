/* SQLite backend of the store (see store.h; schema and reasons in aggregator/README.md).
 *
 * WAL journal, synchronous=NORMAL: a committed transaction survives a process crash; after a
 * power loss the last transactions may roll back, data and offset together, and are consumed
 * again, so exactly-once holds either way. The batch write (store/write.c) takes the lock with
 * BEGIN IMMEDIATE, then checks the stored offset here (fencing), then loads each table here
 * with one prepared statement (dictionaries: ON CONFLICT DO NOTHING; rollups: ON CONFLICT DO
 * UPDATE SET x = x + excluded.x), then records the offset.
 *
 * Threading: one handle per thread; processes sharing a file are serialized by SQLite's locks
 * (busy timeout 30 s). Each handle runs a checkpointer thread with its own connection (PASSIVE
 * checkpoints every AGG_CKPT_INTERVAL_MS, TRUNCATE past AGG_WAL_LIMIT_BYTES), so the writer
 * never blocks on checkpoint fsyncs and the WAL stays bounded (store.h).
 */
#define _GNU_SOURCE /* qsort_r */
#include "store.h"

#include "intern.h"
#include "schema.h"

#include "cm/error.h"
#include "cm/log.h"
#include "cm/thread.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define SCHEMA_VERSION 1

#define MAX_LOADS 32 /* tables of a batch (agg_batch_tables) */

typedef struct {
    agg_store_t base;
    sqlite3 *db;
    sqlite3_stmt *load[MAX_LOADS]; /* each batch table's upsert, prepared on first use */
    /* checkpointer: copies the WAL into the database on its own thread and connection, so the
     * consume thread never waits for the fsyncs of a checkpoint */
    pthread_t ckpt;
    int ckpt_running, ckpt_stop;
    pthread_mutex_t ckpt_mu;
    pthread_cond_t ckpt_cv;
    char path[4096];
    agg_qx_t *qx; /* db as the query executor of store/tiers.c */
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

static int exec(sq_store_t *s, const char *sql) {
    char *msg = NULL;
    int rc = sqlite3_exec(s->db, sql, NULL, NULL, &msg);
    if (rc != SQLITE_OK) {
        CM_ERROR("store %s: '%.60s' failed: %s", s->path, sql, msg ? msg : sqlite3_errstr(rc));
        sqlite3_free(msg);
    }
    return agg_sqlite_err(rc);
}

/* Runs a prepared write statement to completion and resets it. */
static int step(sq_store_t *s, sqlite3_stmt *st) {
    int rc = sqlite3_step(st);
    sqlite3_reset(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
        CM_ERROR("store %s: %s", s->path, sqlite3_errmsg(s->db));
        return agg_sqlite_err(rc);
    }
    return 0;
}


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
    if (s->ckpt_running)
        cm_thread_stop(&s->ckpt_mu, &s->ckpt_cv, &s->ckpt_stop, s->ckpt);
    pthread_mutex_destroy(&s->ckpt_mu);
    pthread_cond_destroy(&s->ckpt_cv);
    if (s->db && s->ckpt_running)
        sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
    agg_store_forget(&s->base);
    for (int i = 0; i < MAX_LOADS; i++)
        sqlite3_finalize(s->load[i]);
    agg_qx_close(s->qx);
    sqlite3_close(s->db);
    free(s);
}

/* A bulk load's values, bound to the table's upsert; a row's end steps it. */
typedef struct {
    sq_store_t *s;
    sqlite3_stmt *st;
} sq_sink_t;

static void sq_i64(void *ctx, int c, int64_t v) {
    sqlite3_bind_int64(((sq_sink_t *)ctx)->st, c + 1, v);
}

static void sq_f64(void *ctx, int c, double v) {
    sqlite3_bind_double(((sq_sink_t *)ctx)->st, c + 1, v);
}

static void sq_bytes(void *ctx, int c, const void *p, size_t len, int text) {
    sqlite3_stmt *st = ((sq_sink_t *)ctx)->st;
    if (text)
        sqlite3_bind_text(st, c + 1, p, (int)len, SQLITE_STATIC);
    else
        sqlite3_bind_blob(st, c + 1, p, (int)len, SQLITE_STATIC);
}

static int sq_row_end(void *ctx, const agg_load_t *l, size_t row) {
    (void)l;
    (void)row;
    return step(((sq_sink_t *)ctx)->s, ((sq_sink_t *)ctx)->st);
}

/* The rows into their table: one prepared upsert, bound and stepped per row. */
static int sq_load(agg_store_t *base, const agg_load_t *l) {
    sq_store_t *s = (sq_store_t *)base;
    sqlite3_stmt *st = l->index < MAX_LOADS ? s->load[l->index] : NULL;
    if (!st) {
        char vals[256] = "VALUES(", sql[2048];
        for (int c = 0; c < l->d->ncols; c++)
            snprintf(vals + strlen(vals), sizeof vals - strlen(vals), "%s?%d", c ? "," : "", c + 1);
        strcat(vals, ")");
        if (l->index >= MAX_LOADS || agg_schema_upsert(l->t, vals, sql, sizeof sql) ||
            sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &st, NULL) != SQLITE_OK) {
            CM_ERROR("store %s: cannot prepare the load of %s: %s", s->path, l->t->name,
                     sqlite3_errmsg(s->db));
            return CM_EIO;
        }
        s->load[l->index] = st;
    }
    static const agg_load_sink_t sink = {sq_i64, sq_f64, sq_bytes, sq_row_end};
    sq_sink_t k = {s, st};
    return agg_load_rows(l, &sink, &k);
}

/* The fence: inside the write transaction (BEGIN IMMEDIATE: no other writer until it ends). */
static int sq_fence(agg_store_t *base, const char *topic, int32_t partition, int64_t base_off) {
    sq_store_t *s = (sq_store_t *)base;
    int64_t stored;
    int rc = agg_store_offset_read(base, topic, partition, &stored);
    if (!rc && stored != base_off) {
        CM_WARN("store %s: partition %d offset is %lld, batch started at %lld: another instance "
                "wrote it; dropping the batch and seeking",
                s->path, partition, (long long)stored, (long long)base_off);
        rc = -ESTALE;
    }
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

static agg_qx_t *sq_qx(agg_store_t *base) { return ((sq_store_t *)base)->qx; }

static const agg_store_vtab_t sq_vtab = {AGG_STORE_VTAB(sq, "sqlite")};

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
        rc = agg_sqlite_err(src);
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
    char ddl[8192];
    if ((rc = agg_schema_ddl(0, 0, ddl, sizeof ddl)) || (rc = exec(s, ddl)) ||
        (rc = agg_schema_late_columns(ddl, sizeof ddl))) {
        sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
        goto fail;
    }
    /* columns added since schema version 1 (a store created before them gets them here); each
     * fails with "duplicate column" when present: fine */
    for (char *save = NULL, *a = strtok_r(ddl, ";", &save); a; a = strtok_r(NULL, ";", &save))
        sqlite3_exec(s->db, a, NULL, NULL, NULL);
    if ((rc = exec(s, "COMMIT")))
        goto fail;
prepare:
    if ((rc = agg_qx_sqlite_wrap(s->db, &s->qx))) {
        snprintf(err, err_size, "store '%s': out of memory", path);
        goto out;
    }
    int64_t off;
    if ((rc = agg_store_offset_read(&s->base, "", 0, &off))) {
        snprintf(err, err_size, "store '%s' cannot be read: %s", path, sqlite3_errmsg(s->db));
        goto out;
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
