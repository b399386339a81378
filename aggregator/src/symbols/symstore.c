/* The symbol store (see symstore.h): server-side names kept in <store-dir>/symbols.sqlite.
 *
 * Tables (SQLite, WAL, shared by the instances of a group like the partition files):
 *   symbols(build_id, address -> name, file, line, chain)   one row per address asked; name
 *       NULL: the debug file was read and has no function there (final: a build id's debug
 *       file never changes)
 *   symfiles(build_id -> ok, retry_at)   ok = 0: no debug file could be fetched (unknown to
 *       the servers, server down); not asked again before retry_at (unix seconds, so the
 *       negative answer survives a restart too)
 * Keyed by build id and file address, not by a partition's location id: one binary's frames
 * are named once for every partition, service and version that runs it.
 *
 * Filling: at ingest, intern.c hands every new location that arrived unnamed (with a build id)
 * to agg_symstore_want(), which only appends to a bounded queue under a mutex; this file's
 * worker thread takes it from there (debuginfod, then one INSERT), so ingest never waits on the
 * network. At query, query_store.c asks agg_symstore_get() for each unnamed location of its
 * cache: a stored answer costs one primary-key lookup; with nothing stored it asks the
 * symbolizer itself (the first query after a new binary's first chunk may be faster than the
 * worker) and stores the answer.
 *
 * Threading: one connection, used under g_db_mu (lookups and inserts of one row, microseconds);
 * the symbolizer is called outside it. The queue has its own mutex and condition variable.
 */
#define _GNU_SOURCE
#include "symstore.h"

#include "cm/error.h"
#include "cm/log.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QUEUE_MAX 65536
#define MAX_BID 64

typedef struct {
    uint8_t bid[MAX_BID];
    uint8_t bid_len;
    uint64_t addr;
} want_t;

static pthread_mutex_t g_db_mu = PTHREAD_MUTEX_INITIALIZER;
static sqlite3 *g_db;
static sqlite3_stmt *g_get, *g_getfile, *g_put, *g_putfile;
static double g_retry_s = 60;
static agg_symstore_stats_t g_stats; /* under g_db_mu (queue counters under g_q_mu) */

static pthread_mutex_t g_q_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_q_cv = PTHREAD_COND_INITIALIZER;
static want_t *g_q;
static size_t g_qhead, g_qlen;
static int g_stop, g_busy, g_running;
static uint64_t g_queued, g_dropped;
static pthread_t g_thread;

static const char *const schema =
    "CREATE TABLE IF NOT EXISTS symbols(build_id BLOB, address INTEGER, name TEXT, file TEXT,"
    " line INTEGER, chain TEXT, PRIMARY KEY(build_id, address)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS symfiles(build_id BLOB PRIMARY KEY, ok INTEGER,"
    " retry_at INTEGER) WITHOUT ROWID;";

static int64_t unix_s(void) { return (int64_t)time(NULL); }

static char *dup_col(sqlite3_stmt *st, int i) {
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? strdup((const char *)t) : NULL;
}

/* Under g_db_mu. Returns 1 named (out filled), 0 stored "no name", -1 nothing stored
 * (or a stored fetch failure still young: -2). */
static int db_get(const uint8_t *bid, size_t bl, uint64_t addr, agg_sym_t *out) {
    int rc = -1;
    sqlite3_reset(g_get);
    sqlite3_bind_blob(g_get, 1, bid, (int)bl, SQLITE_STATIC);
    sqlite3_bind_int64(g_get, 2, (sqlite3_int64)addr);
    if (sqlite3_step(g_get) == SQLITE_ROW) {
        if (sqlite3_column_type(g_get, 0) == SQLITE_NULL) {
            rc = 0;
        } else {
            out->name = dup_col(g_get, 0);
            out->file = dup_col(g_get, 1);
            out->line = (uint32_t)sqlite3_column_int64(g_get, 2);
            out->chain = dup_col(g_get, 3);
            rc = out->name ? 1 : -1;
        }
    }
    sqlite3_reset(g_get);
    if (rc != -1)
        return rc;
    sqlite3_reset(g_getfile);
    sqlite3_bind_blob(g_getfile, 1, bid, (int)bl, SQLITE_STATIC);
    if (sqlite3_step(g_getfile) == SQLITE_ROW && sqlite3_column_int(g_getfile, 0) == 0 &&
        sqlite3_column_int64(g_getfile, 1) > unix_s())
        rc = -2;
    sqlite3_reset(g_getfile);
    return rc;
}

/* Under g_db_mu: stores the symbolizer's answer r (1 named, 0 no symbol, -1 no debug file). */
static void db_put(const uint8_t *bid, size_t bl, uint64_t addr, int r, const agg_sym_t *s) {
    sqlite3_reset(g_putfile);
    sqlite3_bind_blob(g_putfile, 1, bid, (int)bl, SQLITE_STATIC);
    sqlite3_bind_int(g_putfile, 2, r >= 0);
    sqlite3_bind_int64(g_putfile, 3, r >= 0 ? 0 : unix_s() + (int64_t)(g_retry_s + 0.5));
    if (sqlite3_step(g_putfile) != SQLITE_DONE)
        CM_WARN("symstore: cannot store a build id's state: %s", sqlite3_errmsg(g_db));
    sqlite3_reset(g_putfile);
    if (r < 0) {
        g_stats.negatives++;
        return;
    }
    sqlite3_reset(g_put);
    sqlite3_bind_blob(g_put, 1, bid, (int)bl, SQLITE_STATIC);
    sqlite3_bind_int64(g_put, 2, (sqlite3_int64)addr);
    if (r == 1) {
        sqlite3_bind_text(g_put, 3, s->name, -1, SQLITE_STATIC);
        if (s->file)
            sqlite3_bind_text(g_put, 4, s->file, -1, SQLITE_STATIC);
        else
            sqlite3_bind_null(g_put, 4);
        sqlite3_bind_int64(g_put, 5, s->line);
        if (s->chain)
            sqlite3_bind_text(g_put, 6, s->chain, -1, SQLITE_STATIC);
        else
            sqlite3_bind_null(g_put, 6);
    } else {
        for (int i = 3; i <= 6; i++)
            sqlite3_bind_null(g_put, i);
    }
    if (sqlite3_step(g_put) != SQLITE_DONE)
        CM_WARN("symstore: cannot store a name: %s", sqlite3_errmsg(g_db));
    else if (r == 1)
        g_stats.stored++;
    else
        g_stats.negatives++;
    sqlite3_reset(g_put);
}

int agg_symstore_get(const uint8_t *bid, size_t bl, uint64_t addr, int may_fetch,
                     agg_sym_t *out) {
    memset(out, 0, sizeof *out);
    if (!bid || !bl || bl > MAX_BID)
        return 0;
    pthread_mutex_lock(&g_db_mu);
    if (!g_db) {
        pthread_mutex_unlock(&g_db_mu);
        return 0;
    }
    int r = db_get(bid, bl, addr, out);
    if (r >= 0)
        g_stats.hits++;
    else
        g_stats.misses++;
    pthread_mutex_unlock(&g_db_mu);
    if (r != -1 || !may_fetch || !agg_symbolizer_enabled())
        return r == 1;
    agg_sym_t s;
    r = agg_symbolize(bid, bl, addr, &s); /* outside g_db_mu: may take a download */
    pthread_mutex_lock(&g_db_mu);
    if (g_db)
        db_put(bid, bl, addr, r, &s);
    pthread_mutex_unlock(&g_db_mu);
    if (r == 1) {
        *out = s;
        return 1;
    }
    agg_sym_free(&s);
    return 0;
}

void agg_symstore_want(const uint8_t *bid, size_t bl, uint64_t addr) {
    if (!bid || !bl || bl > MAX_BID)
        return;
    pthread_mutex_lock(&g_q_mu);
    if (g_running && !g_stop) {
        if (g_qlen == QUEUE_MAX) {
            g_dropped++;
        } else {
            want_t *w = &g_q[(g_qhead + g_qlen++) % QUEUE_MAX];
            memcpy(w->bid, bid, bl);
            w->bid_len = (uint8_t)bl;
            w->addr = addr;
            g_queued++;
            pthread_cond_signal(&g_q_cv);
        }
    }
    pthread_mutex_unlock(&g_q_mu);
}

static void *worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g_q_mu);
    for (;;) {
        while (!g_stop && !g_qlen)
            pthread_cond_wait(&g_q_cv, &g_q_mu);
        if (g_stop)
            break;
        want_t w = g_q[g_qhead];
        g_qhead = (g_qhead + 1) % QUEUE_MAX;
        g_qlen--;
        g_busy = 1;
        pthread_mutex_unlock(&g_q_mu);
        agg_sym_t s;
        agg_symstore_get(w.bid, w.bid_len, w.addr, 1, &s);
        agg_sym_free(&s);
        pthread_mutex_lock(&g_q_mu);
        g_busy = 0;
        pthread_cond_broadcast(&g_q_cv);
    }
    pthread_mutex_unlock(&g_q_mu);
    return NULL;
}

int agg_symstore_drain(double timeout_s) {
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    double t = (double)dl.tv_sec + (double)dl.tv_nsec * 1e-9 + timeout_s;
    dl.tv_sec = (time_t)t;
    dl.tv_nsec = (long)((t - (double)dl.tv_sec) * 1e9);
    int rc = 0;
    pthread_mutex_lock(&g_q_mu);
    while (g_running && (g_qlen || g_busy) && rc == 0)
        rc = pthread_cond_timedwait(&g_q_cv, &g_q_mu, &dl);
    pthread_mutex_unlock(&g_q_mu);
    return rc == 0 ? 0 : -1;
}

static void close_db(void) {
    sqlite3_finalize(g_get);
    sqlite3_finalize(g_getfile);
    sqlite3_finalize(g_put);
    sqlite3_finalize(g_putfile);
    g_get = g_getfile = g_put = g_putfile = NULL;
    sqlite3_close(g_db);
    g_db = NULL;
}

int agg_symstore_open(const char *store_dir, double retry_s, char *err, size_t err_size) {
    char path[4096];
    snprintf(path, sizeof path, "%s/symbols.sqlite", store_dir);
    pthread_mutex_lock(&g_db_mu);
    int rc = 0;
    if (g_db) {
        snprintf(err, err_size, "symbol store already open");
        rc = CM_EINVAL;
        goto out;
    }
    g_retry_s = retry_s > 0 ? retry_s : 60;
    memset(&g_stats, 0, sizeof g_stats);
    if (sqlite3_open_v2(path, &g_db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                        SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK ||
        sqlite3_busy_timeout(g_db, 5000) != SQLITE_OK ||
        sqlite3_exec(g_db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;", NULL, NULL,
                     NULL) != SQLITE_OK ||
        sqlite3_exec(g_db, schema, NULL, NULL, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(g_db, "SELECT name, file, line, chain FROM symbols WHERE build_id=?1 "
                           "AND address=?2", -1, &g_get, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(g_db, "SELECT ok, retry_at FROM symfiles WHERE build_id=?1", -1,
                           &g_getfile, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(g_db, "INSERT OR REPLACE INTO symbols VALUES(?1,?2,?3,?4,?5,?6)", -1,
                           &g_put, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(g_db, "INSERT OR REPLACE INTO symfiles VALUES(?1,?2,?3)", -1,
                           &g_putfile, NULL) != SQLITE_OK) {
        snprintf(err, err_size, "symbol store %s: %s", path,
                 g_db ? sqlite3_errmsg(g_db) : "cannot open");
        close_db();
        rc = CM_EIO;
        goto out;
    }
out:
    pthread_mutex_unlock(&g_db_mu);
    if (rc || !agg_symbolizer_enabled())
        return rc; /* no symbolizer: stored names are still read, nothing is fetched */
    pthread_mutex_lock(&g_q_mu);
    g_q = malloc(QUEUE_MAX * sizeof *g_q);
    g_qhead = g_qlen = 0;
    g_stop = g_busy = 0;
    if (g_q && pthread_create(&g_thread, NULL, worker, NULL) == 0)
        g_running = 1;
    else {
        free(g_q);
        g_q = NULL;
        CM_WARN("symstore: no worker thread: unnamed frames are named at their first query");
    }
    pthread_mutex_unlock(&g_q_mu);
    return 0;
}

void agg_symstore_close(void) {
    pthread_mutex_lock(&g_q_mu);
    int running = g_running;
    g_stop = 1;
    pthread_cond_broadcast(&g_q_cv);
    pthread_mutex_unlock(&g_q_mu);
    if (running)
        pthread_join(g_thread, NULL);
    pthread_mutex_lock(&g_q_mu);
    g_running = 0;
    free(g_q);
    g_q = NULL;
    g_qlen = 0;
    pthread_mutex_unlock(&g_q_mu);
    pthread_mutex_lock(&g_db_mu);
    if (g_db)
        CM_INFO("symstore: %llu queued at ingest (%llu dropped), %llu lookups answered by the "
                "store, %llu not, %llu names and %llu negative answers stored",
                (unsigned long long)g_queued, (unsigned long long)g_dropped,
                (unsigned long long)g_stats.hits, (unsigned long long)g_stats.misses,
                (unsigned long long)g_stats.stored, (unsigned long long)g_stats.negatives);
    close_db();
    pthread_mutex_unlock(&g_db_mu);
}

void agg_symstore_stats(agg_symstore_stats_t *st) {
    pthread_mutex_lock(&g_db_mu);
    *st = g_stats;
    pthread_mutex_unlock(&g_db_mu);
    pthread_mutex_lock(&g_q_mu);
    st->queued = g_queued;
    st->dropped = g_dropped;
    pthread_mutex_unlock(&g_q_mu);
}
