/* Per-deploy regression reports (see reports.h): a timer thread computes newest-vs-previous
 * version diffs once enough samples exist and stores them in <store-dir>/reports.db.
 * Threading: one reporter thread; agg_reports_list() may run on any thread (own connection). */
#define _GNU_SOURCE
#include "reports.h"
#include "serve_insights.h"

#include "query_store.h"

#include "query.h"

#include "cm/error.h"
#include "cm/log.h"
#include "cm/thread.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <time.h>

struct agg_reporter {
    agg_reports_cfg_t cfg;
    char *dir, *fold;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
};

static const char *const schema =
    "CREATE TABLE IF NOT EXISTS reports(service TEXT, base TEXT, test TEXT, type TEXT,"
    " created_ns INTEGER, regressions INTEGER, improvements INTEGER, base_samples INTEGER,"
    " test_samples INTEGER, diff TEXT, PRIMARY KEY(service, base, test, type)) WITHOUT ROWID;";

static int open_db(const char *dir, int write, sqlite3 **db) {
    char path[4096];
    snprintf(path, sizeof path, "%s/reports.db", dir);
    int flags = write ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY;
    if (sqlite3_open_v2(path, db, flags | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
        sqlite3_close(*db);
        *db = NULL;
        return CM_EIO;
    }
    sqlite3_busy_timeout(*db, 5000);
    if (write && (sqlite3_exec(*db, "PRAGMA journal_mode=WAL", NULL, NULL, NULL) != SQLITE_OK ||
                  sqlite3_exec(*db, schema, NULL, NULL, NULL) != SQLITE_OK)) {
        CM_WARN("reports: %s: %s", path, sqlite3_errmsg(*db));
        sqlite3_close(*db);
        *db = NULL;
        return CM_EIO;
    }
    return 0;
}

/* Test samples the stored report of (svc, base, test) rests on, or -1 when there is none. */
static int64_t stored_samples(sqlite3 *db, const char *svc, const char *base, const char *test) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT test_samples FROM reports WHERE service=?1 AND base=?2 "
                           "AND test=?3 AND type='cpu'", -1, &st, NULL) != SQLITE_OK)
        return -1;
    sqlite3_bind_text(st, 1, svc, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, base, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 3, test, -1, SQLITE_STATIC);
    int64_t n = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_finalize(st);
    return n;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Computes and stores the report of svc: base -> test. */
static int report_one(agg_qstore_t *qs, sqlite3 *db, const char *fold, const char *svc,
                      const char *base, const char *test) {
    agg_profile_t *pb = NULL, *pt = NULL;
    const char *vb[1] = {base}, *vt[1] = {test};
    agg_qspec_t qb = {.service = svc,
                      .versions = vb,
                      .n_versions = 1,
                      .type = CM_EV_CPU,
                      .from_s = 0,
                      .to_s = INT64_MAX / 4,
                      .replicates = fold && *fold ? AGG_QREP_STACKS : AGG_QREP_LEAVES,
                      .by_process = 1};
    agg_qspec_t qt = qb;
    qt.versions = vt;
    int rc;
    if ((rc = agg_qstore_profile(qs, &qb, &pb)) || (rc = agg_qstore_profile(qs, &qt, &pt)))
        goto out;
    if (fold && *fold) { /* the same view a user gets with fold=RE */
        agg_filter_t f = {.fold = &fold, .n_fold = 1};
        agg_profile_t *fb = NULL, *ft = NULL;
        char why[256];
        if ((rc = agg_profile_filter(pb, &f, &fb, why, sizeof why)) ||
            (rc = agg_profile_filter(pt, &f, &ft, why, sizeof why))) {
            CM_WARN("report: fold '%s': %s", fold, why);
            agg_profile_free(fb);
            goto out;
        }
        agg_profile_free(pb);
        agg_profile_free(pt);
        pb = fb;
        pt = ft;
    }
    agg_diff_t d;
    if ((rc = agg_diff_compute(pb, pt, NULL, &d)))
        goto out;
    json_t *j = agg_diff_json(&d, 50), *ni = NULL;
    if (j && !agg_insights_new_in_version(qs, svc, base, test, &ni)) /* "new_insights" */
        json_object_set_new(j, "new_insights", ni);
    char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    sqlite3_stmt *st = NULL;
    if (text && sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO reports VALUES(?1,?2,?3,'cpu',?4,"
                                   "?5,?6,?7,?8,?9)", -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_text(st, 1, svc, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, base, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, test, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 4, now_ns());
        sqlite3_bind_int64(st, 5, (sqlite3_int64)d.n_regressions);
        sqlite3_bind_int64(st, 6, (sqlite3_int64)d.n_improvements);
        sqlite3_bind_int64(st, 7, (sqlite3_int64)d.base_samples);
        sqlite3_bind_int64(st, 8, (sqlite3_int64)d.test_samples);
        sqlite3_bind_text(st, 9, text, -1, SQLITE_STATIC);
        rc = sqlite3_step(st) == SQLITE_DONE ? 0 : CM_EIO;
    } else {
        rc = text ? CM_EIO : CM_ENOMEM;
    }
    sqlite3_finalize(st);
    if (!rc)
        CM_INFO("report: %s %s -> %s: %zu significant regressions, %zu improvements (%llu / %llu "
                "samples)", svc, base, test, d.n_regressions, d.n_improvements,
                (unsigned long long)d.base_samples, (unsigned long long)d.test_samples);
    free(text);
    agg_diff_free(&d);
out:
    agg_profile_free(pb);
    agg_profile_free(pt);
    return rc;
}

int agg_reports_run_once(const agg_reports_cfg_t *cfg) {
    agg_qstore_t *qs = NULL;
    sqlite3 *db = NULL;
    agg_qversion_t *v = NULL;
    size_t n = 0;
    char err[512];
    int rc, made = 0;
    if ((rc = agg_qstore_open(cfg->store && *cfg->store ? cfg->store : cfg->store_dir, &qs, err,
                              sizeof err)) ||
        (rc = agg_qstore_versions(qs, NULL, &v, &n)))
        goto out;
    int64_t min = agg_reports_min_samples(cfg->min_samples);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j < n && !strcmp(v[j].service, v[i].service))
            j++;
        /* versions i..j-1 of one service, ordered by first seen: newest vs the one before */
        if (j - i >= 2) {
            agg_qversion_t *test = &v[j - 1], *base = &v[j - 2];
            if ((int64_t)test->samples[CM_EV_CPU] >= min &&
                (int64_t)base->samples[CM_EV_CPU] >= min) {
                if (!db && (rc = open_db(cfg->store_dir, 1, &db)))
                    goto out;
                /* once when the threshold is reached, then again each time the new version's
                 * samples double (a deploy's first report rests on few samples) */
                int64_t had = stored_samples(db, test->service, base->version, test->version);
                if (had < 0 || (int64_t)test->samples[CM_EV_CPU] >= 2 * had) {
                    if ((rc = report_one(qs, db, cfg->fold, test->service, base->version,
                                         test->version)))
                        CM_WARN("report %s %s -> %s failed: %s", test->service, base->version,
                                test->version, cm_strerror(rc));
                    else
                        made++;
                }
            } else {
                CM_INFO("report: %s %s -> %s: waiting for %lld CPU samples per side (have "
                        "%llu / %llu): the samples a new function taking %.0f%% of the CPU "
                        "needs to be found with 90%% probability", test->service,
                        base->version, test->version, (long long)min,
                        (unsigned long long)base->samples[CM_EV_CPU],
                        (unsigned long long)test->samples[CM_EV_CPU],
                        100 * AGG_REPORT_TARGET_SHARE);
            }
        }
        i = j;
    }
    rc = 0;
out:
    agg_qversions_free(v, n);
    sqlite3_close(db);
    agg_qstore_close(qs);
    return rc ? rc : made;
}

static void *reporter_main(void *arg) {
    agg_reporter_t *r = arg;
    pthread_mutex_lock(&r->mu);
    while (!r->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t ns = ts.tv_nsec + (r->cfg.interval_ms % 1000) * 1000000;
        ts.tv_sec += r->cfg.interval_ms / 1000 + ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
        pthread_cond_timedwait(&r->cv, &r->mu, &ts);
        if (r->stop)
            break;
        pthread_mutex_unlock(&r->mu);
        int rc = agg_reports_run_once(&r->cfg);
        if (rc < 0)
            CM_WARN("reports: pass failed: %s", cm_strerror(rc));
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int agg_reports_start(const agg_reports_cfg_t *cfg, agg_reporter_t **out, char *err,
                      size_t err_size) {
    *out = NULL;
    if (cfg->interval_ms <= 0)
        return 0;
    agg_reporter_t *r = calloc(1, sizeof *r);
    if (!r || !(r->dir = strdup(cfg->store_dir)) ||
        (cfg->fold && !(r->fold = strdup(cfg->fold)))) {
        if (r)
            free(r->dir);
        free(r);
        return CM_ENOMEM;
    }
    r->cfg = *cfg;
    r->cfg.store_dir = r->dir;
    r->cfg.fold = r->fold;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    int e = pthread_create(&r->th, NULL, reporter_main, r);
    if (e) {
        snprintf(err, err_size, "cannot start the report thread: %s", strerror(e));
        free(r->dir);
        free(r->fold);
        free(r);
        return -e;
    }
    *out = r;
    return 0;
}

void agg_reports_stop(agg_reporter_t *r) {
    if (!r)
        return;
    cm_thread_stop(&r->mu, &r->cv, &r->stop, r->th);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r->dir);
    free(r->fold);
    free(r);
}

/* default: the samples per side a 2 % new function needs (90 % power, ~50 functions tested at
 * q 0.01): agg_diff_samples_needed */
int64_t agg_reports_min_samples(int64_t configured) {
    if (configured > 0)
        return configured;
    return (int64_t)ceil(agg_diff_samples_needed(AGG_REPORT_TARGET_SHARE, 0.01, 50));
}

int agg_reports_list(const char *store_dir, const char *service, size_t limit, json_t **out) {
    json_t *arr = json_array();
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    *out = arr;
    if (!arr)
        return CM_ENOMEM;
    if (open_db(store_dir, 0, &db))
        return 0; /* no reports yet */
    if (sqlite3_prepare_v2(db, "SELECT service, base, test, type, created_ns, regressions, "
                           "improvements, base_samples, test_samples, diff FROM reports WHERE "
                           "?1 IS NULL OR service=?1 ORDER BY created_ns DESC LIMIT ?2",
                           -1, &st, NULL) != SQLITE_OK) {
        sqlite3_close(db);
        return 0; /* the table does not exist yet */
    }
    if (service)
        sqlite3_bind_text(st, 1, service, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, limit ? (sqlite3_int64)limit : -1);
    while (sqlite3_step(st) == SQLITE_ROW) {
#define T(i) ((const char *)sqlite3_column_text(st, i) ? (const char *)sqlite3_column_text(st, i) : "")
        json_t *diff = json_loads(T(9), 0, NULL);
        json_array_append_new(
            arr, json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:o*}", "service", T(0),
                           "base", T(1), "test", T(2), "event_type", T(3), "created_ns",
                           (json_int_t)sqlite3_column_int64(st, 4), "regressions",
                           (json_int_t)sqlite3_column_int64(st, 5), "improvements",
                           (json_int_t)sqlite3_column_int64(st, 6), "base_samples",
                           (json_int_t)sqlite3_column_int64(st, 7), "test_samples",
                           (json_int_t)sqlite3_column_int64(st, 8), "diff", diff));
#undef T
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    return 0;
}
