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
#include "store/schema.h"

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
    agg_qx_close(s->qx);
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
    int64_t done[AGG_MAX_TIERS];
    if (b->n_tiers && ((rc = agg_tiers_marks(s->qx, b->tiers, b->n_tiers, b->replicate_width,
                                             done)) ||
                       (rc = agg_batch_derive(b, done))))
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

static const agg_store_vtab_t sq_vtab = {
    .name = "sqlite",
    .close = sq_close,
    .offset_get = sq_offset_get,
    .chunk_seen = sq_chunk_seen,
    .batch_write = sq_batch_write,
    .downsample = agg_tiers_downsample,
    .expire = agg_tiers_expire,
    .derive = agg_tiers_derive,
    .compact = agg_tiers_compact,
    .size_bytes = sq_size_bytes,
    .qx = sq_qx,
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
    if ((rc = agg_qx_sqlite_wrap(s->db, &s->qx))) {
        snprintf(err, err_size, "store '%s': out of memory", path);
        goto out;
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
