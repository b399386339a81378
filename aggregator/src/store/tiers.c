/* Upkeep of the store's derived rollups, written once for both backends in the executor's
 * common dialect (qexec.h), on the store's own connection (agg_store_t.vt->qx):
 *  - the per-stack tiers (profile_coarse; widths narrowest first, the last one the coarse
 *    width) are built by compaction: tier t holds the fine rows with bucket < done[t]
 *    (meta.tiers_done), merged; the retention pass advances done[t] over completed tiles
 *    (agg_tiers_compact), and a batch adds its rows with bucket < done[t] (late data) to the
 *    tier directly (agg_batch_derive), so a tier is always exactly the sum of the fine rows
 *    below its mark. Readers use a tier only below its mark. Tiers narrower than the coarse one
 *    are pruned where fine rows are downsampled.
 *  - the per-leaf rollup (profile_leaf) gets every row at ingest.
 * When the store has none for the configured widths (written by an older version, or changed
 * widths) both are rebuilt from `profile` (agg_tiers_marks), with done[t] = the start of the
 * current tile; meta.tiers / tiers_done / replicate_width then tell readers.
 *
 * Every change runs in one transaction under the tiers lock (agg_qx_lock_tiers): batches share
 * it, compaction, retention and a rebuild take it alone, so a batch's marks hold until it
 * commits. A PostgreSQL database is one store for every partition: each partition's handle
 * runs the same pass over it, and a pass that finds nothing to do changes nothing. On SQLite
 * each statement is run per (service, version, type), an index range scan of the primary key
 * instead of a table scan (scoped()).
 * Threading: the store handle's thread. */
#include "store.h"

#include "cm/error.h"
#include "cm/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
#define N_ROLLUPS (sizeof rollups / sizeof rollups[0])

/* The label set a profile row's derived rows (tiers, per-leaf) are keyed by: its own without
 * the dimensions (labelset_base), the row's own when it has none. */
#define BASE_LABELS                                                                                \
    "COALESCE((SELECT base FROM labelset_base WHERE labelset_base.labelset = labels), labels)"

#define PROF_SUMS(t)                                                                               \
    "weight=" t ".weight+excluded.weight, count=" t ".count+excluded.count, rows=" t            \
    ".rows+excluded.rows, chunks=" t ".chunks+excluded.chunks"

/* ---- small helpers over the executor ---- */

/* Runs sql with the n int64 parameters ?1..?n; the rows it changed (a query: the first column
 * of its row) added to *changes. */
static int run(agg_qx_t *x, const char *sql, const int64_t *v, int n, int64_t *changes) {
    agg_qxst_t *st;
    int rc = agg_qx_prepare(x, sql, &st);
    if (rc) {
        CM_ERROR("store: '%.80s': %s", sql, agg_qx_errmsg(x));
        return rc;
    }
    for (int i = 0; i < n; i++)
        agg_qx_bind_int64(st, i + 1, v[i]);
    if ((rc = agg_qx_step(st)) < 0)
        CM_ERROR("store: '%.80s': %s", sql, agg_qx_errmsg(x));
    else if (changes)
        *changes += rc == 1 ? agg_qx_int64(st, 0) : agg_qx_changes(st);
    agg_qx_finalize(st);
    return rc < 0 ? rc : 0;
}

/* Whether statements are run per (service, version, type): SQLite's plans need the primary
 * key's prefix; PostgreSQL's one statement over the table is faster than thousands. */
static int scoped(agg_qx_t *x) { return !strcmp(agg_qx_backend(x), "sqlite"); }
#define SCOPE_SV "service=?1 AND version=?2 AND "
#define SCOPE_SVT "service=?1 AND version=?2 AND type=?3 AND "

/* Runs sql (parameters ?4.. from v[0..n)) once, or per (service, version[, type]) bound to
 * ?1..?3 when scoped; the rows changed added to *changes. */
static int run_scoped(agg_qx_t *x, const char *sql, int typed, const int64_t *v, int n,
                      int64_t *changes) {
    int64_t p[3 + 8] = {0};
    memcpy(p + 3, v, (size_t)n * sizeof *v);
    if (!scoped(x))
        return run(x, sql, p, 3 + n, changes);
    agg_qxst_t *sv;
    int rc = agg_qx_prepare(x, "SELECT service, version FROM versions", &sv), s;
    int64_t *pairs = NULL;
    size_t np = 0, cap = 0;
    while (!rc && (s = agg_qx_step(sv)) == 1) {
        if (np == cap) {
            int64_t *g = realloc(pairs, (cap = cap ? 2 * cap : 64) * 2 * sizeof *g);
            if (!g) {
                rc = CM_ENOMEM;
                break;
            }
            pairs = g;
        }
        pairs[2 * np] = agg_qx_int64(sv, 0);
        pairs[2 * np++ + 1] = agg_qx_int64(sv, 1);
    }
    if (!rc && s < 0)
        rc = s;
    agg_qx_finalize(sv);
    for (size_t i = 0; i < np && !rc; i++)
        for (int t = typed ? 1 : 0; t <= (typed ? CM_EV_MAX : 0) && !rc; t++) {
            p[0] = pairs[2 * i];
            p[1] = pairs[2 * i + 1];
            p[2] = t;
            rc = run(x, sql, p, 3 + n, changes);
        }
    free(pairs);
    return rc;
}

/* meta value of key into buf ("" when absent). */
static int meta_get(agg_qx_t *x, const char *key, char *buf, size_t size) {
    agg_qxst_t *st;
    int rc = agg_qx_prepare(x, "SELECT value FROM meta WHERE key=?1", &st);
    if (rc)
        return rc;
    agg_qx_bind_text(st, 1, key);
    buf[0] = 0;
    if ((rc = agg_qx_step(st)) == 1 && agg_qx_text(st, 0))
        snprintf(buf, size, "%s", agg_qx_text(st, 0));
    agg_qx_finalize(st);
    return rc < 0 ? rc : 0;
}

static int meta_put(agg_qx_t *x, const char *key, const char *val) {
    agg_qxst_t *st;
    int rc = agg_qx_prepare(x, "INSERT INTO meta VALUES(?1, ?2) ON CONFLICT (key) DO UPDATE SET "
                               "value=excluded.value", &st);
    if (rc)
        return rc;
    agg_qx_bind_text(st, 1, key);
    agg_qx_bind_text(st, 2, val);
    rc = agg_qx_step(st);
    agg_qx_finalize(st);
    return rc < 0 ? rc : 0;
}

/* Parses "a,b,c" into v (at most max); returns the count. */
static int parse_list(const char *txt, int64_t *v, int max) {
    int n = 0;
    for (const char *p = txt; *p && n < max;) {
        char *end;
        v[n++] = strtoll(p, &end, 10);
        p = *end == ',' ? end + 1 : end + strlen(end);
    }
    return n;
}

static void format_list(const int64_t *v, int n, char *buf, size_t size) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < n && o < size; i++)
        o += (size_t)snprintf(buf + o, size - o, "%s%lld", i ? "," : "", (long long)v[i]);
}

/* Commits, or rolls back on rc. */
static int finish(agg_qx_t *x, int rc) {
    if (!rc)
        rc = agg_qx_commit(x);
    if (rc)
        agg_qx_rollback(x);
    return rc;
}

/* ---- the packed tables of PostgreSQL (agg_schema_packed): one row per group and part ---- */

static const char *packed(agg_qx_t *x, const char *table) {
    return scoped(x) ? NULL : agg_schema_packed(table);
}

/* The table that holds table's rows: its packed one, or itself. */
static const char *phys(agg_qx_t *x, const char *table) {
    return packed(x, table) ? packed(x, table) : table;
}

/* The distinct keys (rollup r's keys, width and bucket) of its rows matching where (parameters
 * ?4.. from v[0..n)), added to *count: the rows the same change counts on a table of one row
 * per key, however many parts hold them. */
static int count_keys(agg_qx_t *x, size_t r, const char *where, const int64_t *v, int n,
                      int64_t *count) {
    char sql[1024];
    int64_t p[3 + 3] = {0};
    memcpy(p + 3, v, (size_t)n * sizeof *v);
    snprintf(sql, sizeof sql, "SELECT count(*) FROM (SELECT 1 FROM %s WHERE %s GROUP BY %s, "
             "width, bucket) d", rollups[r].table, where, rollups[r].keys);
    return run(x, sql, p, 3 + n, count);
}

/* Inserts the rows `select` yields (table's columns in order, each key once) into table:
 * as they are, or packed (agg_schema_pack_insert). */
static int insert_rows(agg_qx_t *x, const char *table, const char *select, const int64_t *v,
                       int n) {
    const agg_schema_table_t *t = packed(x, table) ? agg_schema_table(table) : NULL;
    char sql[4096], from[2048];
    if (!t)
        snprintf(sql, sizeof sql, "INSERT INTO %s %s", table, select);
    else if (snprintf(from, sizeof from, "(%s) AS d(%s)", select, t->cols) >= (int)sizeof from ||
             agg_schema_pack_insert(table, from, sql, sizeof sql))
        return CM_EINVAL;
    return run(x, sql, v, n, NULL);
}

/* Rollup r's rows of width ?4 with bucket < ?6 summed per key (sums: "SUM(a),SUM(b)...") into
 * buckets of width ?5, into its packed table as new parts. */
static int downsample_packed(agg_qx_t *x, size_t r, const int64_t *v, const char *sums) {
    const char *keys = rollups[r].keys, *last = strrchr(keys, ',') + 1;
    char sql[2048];
    /* the packed rollups' keys are service, version, type, labels and a last one */
    snprintf(sql, sizeof sql,
             "SELECT service, version, type, ?5, bucket-bucket%%?5 AS b, labels, %s, %s FROM %s "
             "WHERE width=?4 AND bucket<?6 GROUP BY %s, b", last, sums, rollups[r].table, keys);
    return insert_rows(x, rollups[r].table, sql, (int64_t[]){0, 0, 0, v[0], v[1], v[2]}, 6);
}

/* ---- the tiers' marks, and their rebuild ---- */

/* Rebuilds the tiers and the per-leaf rollup from `profile` (caller holds the lock alone). */
static int rebuild(agg_qx_t *x, const int64_t *tiers, int n_tiers, int64_t rep, int64_t *done) {
    char want[128], done_txt[256], num[32];
    format_list(tiers, n_tiers, want, sizeof want);
    CM_INFO("store: building the per-stack tiers (%ss) and the per-leaf (%llds) rollups from "
            "the profile table", want, (long long)rep);
    int64_t coarse = tiers[n_tiers - 1];
    int64_t now_s = (int64_t)time(NULL);
    char del[128];
    snprintf(del, sizeof del, "DELETE FROM profile_coarse; DELETE FROM %s",
             phys(x, "profile_leaf"));
    int rc = agg_qx_exec(x, del);
    /* fine rows below the mark; for the coarse tier also the rows already downsampled */
    for (int i = 0; i < n_tiers && !rc; i++) {
        done[i] = now_s - now_s % tiers[i];
        int64_t v[3] = {tiers[i], done[i], coarse};
        rc = run(x, "INSERT INTO profile_coarse SELECT service, version, type, ?1, "
                    "bucket - bucket % ?1 AS b, " BASE_LABELS " AS lb, stack, SUM(weight), "
                    "SUM(count), SUM(rows), SUM(chunks) FROM profile WHERE (width < ?1 AND "
                    "bucket < ?2) OR (?1 = ?3 AND width >= ?3) GROUP BY service, version, "
                    "type, b, lb, stack", v, 3, NULL);
    }
    /* the leaf of a stack is its trie node's location; fine rows go to replicate-width
     * buckets, downsampled rows keep theirs */
    if (!rc)
        rc = insert_rows(x, "profile_leaf",
                         "SELECT p.service, p.version, p.type, CASE WHEN "
                         "p.width < ?1 THEN ?1 ELSE p.width END AS w, CASE WHEN p.width < ?1 "
                         "THEN p.bucket - p.bucket % ?1 ELSE p.bucket END AS b, " BASE_LABELS
                         " AS lb, COALESCE(s.location, 0) AS l, SUM(p.weight), SUM(p.count), "
                         "SUM(p.rows), SUM(p.chunks) FROM profile p LEFT JOIN stacks s ON s.id = "
                         "p.stack GROUP BY p.service, p.version, p.type, w, b, lb, l",
                         &rep, 1);
    if (rc)
        return rc;
    format_list(done, n_tiers, done_txt, sizeof done_txt);
    snprintf(num, sizeof num, "%lld", (long long)coarse);
    if ((rc = meta_put(x, "coarse_width", num)) || (rc = meta_put(x, "tiers", want)) ||
        (rc = meta_put(x, "tiers_done", done_txt)))
        return rc;
    snprintf(num, sizeof num, "%lld", (long long)rep);
    return meta_put(x, "replicate_width", num);
}

/* Whether meta holds tiers at these widths and this replicate width. */
static int built(agg_qx_t *x, const int64_t *tiers, int n_tiers, int64_t rep, int *yes) {
    char want[128], have[128], rep_txt[32];
    format_list(tiers, n_tiers, want, sizeof want);
    int rc = meta_get(x, "tiers", have, sizeof have);
    if (!rc)
        rc = meta_get(x, "replicate_width", rep_txt, sizeof rep_txt);
    *yes = !rc && !strcmp(want, have) && atoll(rep_txt) == rep;
    return rc;
}

int agg_tiers_marks(agg_qx_t *x, const int64_t *tiers, int n_tiers, int64_t rep, int64_t *done) {
    int rc, yes;
    if ((rc = agg_qx_lock_tiers(x, AGG_QX_SHARED)) || (rc = built(x, tiers, n_tiers, rep, &yes)))
        return rc;
    if (!yes && ((rc = agg_qx_lock_tiers(x, AGG_QX_ALONE)) || /* rebuild: alone, look again */
                 (rc = built(x, tiers, n_tiers, rep, &yes))))
        return rc;
    if (!yes) {
        if (n_tiers <= 0 || n_tiers > AGG_MAX_TIERS || rep <= 0)
            return CM_EINVAL;
        return rebuild(x, tiers, n_tiers, rep, done);
    }
    char done_txt[256];
    if ((rc = meta_get(x, "tiers_done", done_txt, sizeof done_txt)))
        return rc;
    return parse_list(done_txt, done, AGG_MAX_TIERS) == n_tiers ? 0 : CM_EFORMAT;
}

int agg_tiers_derive(agg_store_t *st, const int64_t *tiers, int n_tiers, int64_t rep) {
    agg_qx_t *x = st->vt->qx(st);
    int64_t done[AGG_MAX_TIERS];
    int rc = x ? agg_qx_begin(x) : CM_EIO;
    return rc ? rc : finish(x, agg_tiers_marks(x, tiers, n_tiers, rep, done));
}

/* ---- retention: compaction of the tiers, downsampling, expiry ---- */

/* Advances each tier's mark to the start of the tile that holds now_s - 60 s (data of a tile
 * arrives within seconds of its end; a later chunk is added at ingest as late data), merging
 * the fine rows in between: each fine row is read once per tier. */
int agg_tiers_compact(agg_store_t *st, int64_t fine_s, int64_t now_s) {
    agg_qx_t *x = st->vt->qx(st);
    int rc = x ? agg_qx_begin(x) : CM_EIO;
    if (rc || (rc = agg_qx_lock_tiers(x, AGG_QX_ALONE)))
        return rc && x ? finish(x, rc) : rc;
    char have[128], done_txt[256], sql[1024];
    int64_t w[AGG_MAX_TIERS], old[AGG_MAX_TIERS], done[AGG_MAX_TIERS];
    if ((rc = meta_get(x, "tiers", have, sizeof have)) ||
        (rc = meta_get(x, "tiers_done", done_txt, sizeof done_txt)))
        return finish(x, rc);
    int n = parse_list(have, w, AGG_MAX_TIERS), moved = 0;
    if (!n || parse_list(done_txt, old, AGG_MAX_TIERS) != n)
        return finish(x, 0); /* no batch written yet: nothing to compact */
    snprintf(sql, sizeof sql,
             "INSERT INTO profile_coarse(service, version, type, width, bucket, labels, stack, "
             "weight, count, rows, chunks) SELECT service, version, type, ?4, "
             "bucket - bucket %% ?4 AS b, " BASE_LABELS " AS lb, stack, SUM(weight), SUM(count), "
             "SUM(rows), SUM(chunks) FROM profile WHERE %swidth=?5 AND bucket>=?6 AND "
             "bucket<?7 GROUP BY service, version, type, b, lb, stack ON CONFLICT (service, "
             "version, type, width, bucket, labels, stack) DO UPDATE SET "
             PROF_SUMS("profile_coarse"), scoped(x) ? SCOPE_SVT : "");
    for (int i = 0; i < n && !rc; i++) {
        int64_t t = now_s - 60;
        done[i] = t - t % w[i];
        if (done[i] <= old[i]) {
            done[i] = old[i];
            continue;
        }
        moved = 1;
        int64_t v[4] = {w[i], fine_s, old[i], done[i]};
        rc = run_scoped(x, sql, 1, v, 4, NULL);
    }
    if (!rc && moved) {
        format_list(done, n, done_txt, sizeof done_txt);
        rc = meta_put(x, "tiers_done", done_txt);
    }
    return finish(x, rc);
}

/* Merges rows of width fine with bucket < cutoff_s into rows of width coarse. */
int agg_tiers_downsample(agg_store_t *st, int64_t fine, int64_t coarse, int64_t cutoff_s,
                         agg_retention_stats_t *stats) {
    agg_qx_t *x = st->vt->qx(st);
    int rc = x ? agg_qx_begin(x) : CM_EIO;
    char rep[32];
    if (rc || (rc = agg_qx_lock_tiers(x, AGG_QX_ALONE)) ||
        (rc = meta_get(x, "replicate_width", rep, sizeof rep)))
        return rc && x ? finish(x, rc) : rc;
    for (size_t r = 0; r < N_ROLLUPS && !rc; r++) {
        char sql[2048], sums[512] = "", upd[512] = "", tmp[512];
        const char *tb = rollups[r].table, *keys = rollups[r].keys;
        const char *scope = !scoped(x) ? "" : rollups[r].typed ? SCOPE_SVT : SCOPE_SV;
        snprintf(tmp, sizeof tmp, "%s", rollups[r].sums);
        for (char *save = NULL, *tok = strtok_r(tmp, ",", &save); tok;
             tok = strtok_r(NULL, ",", &save)) {
            size_t n1 = strlen(sums), n2 = strlen(upd);
            snprintf(sums + n1, sizeof sums - n1, "%sSUM(%s)", n1 ? "," : "", tok);
            snprintf(upd + n2, sizeof upd - n2, "%s%s=%s.%s+excluded.%s", n2 ? "," : "", tok,
                     tb, tok, tok);
        }
        /* profile_leaf holds replicate-width rows where the others hold fine ones */
        int64_t src = !strcmp(tb, "profile_leaf") && atoll(rep) > 0 ? atoll(rep) : fine;
        int64_t v[3] = {src, coarse, cutoff_s}, moved = 0;
        /* the tiers below the coarse width go where the fine rows go (the coarse tier stays) */
        int tiers = !strcmp(tb, "profile_coarse");
        const char *pk = packed(x, tb);
        if (pk) {
            rc = count_keys(x, r, "width=?4 AND bucket<?6", v, 3, &moved);
            if (!rc)
                rc = downsample_packed(x, r, v, sums);
        } else if (!tiers) {
            snprintf(sql, sizeof sql,
                     "INSERT INTO %s(%s,width,bucket,%s) SELECT %s,?5,bucket-bucket%%?5 AS b,%s "
                     "FROM %s WHERE %swidth=?4 AND bucket<?6 GROUP BY %s,b ON CONFLICT "
                     "(%s,width,bucket) DO UPDATE SET %s",
                     tb, keys, rollups[r].sums, keys, sums, tb, scope, keys, keys, upd);
            rc = run_scoped(x, sql, rollups[r].typed, v, 3, NULL);
        }
        snprintf(sql, sizeof sql, "DELETE FROM %s WHERE %s%s AND bucket<?6", phys(x, tb), scope,
                 tiers ? "width<?5" : "width=?4");
        if (!rc)
            rc = run_scoped(x, sql, rollups[r].typed, v, 3, pk ? NULL : &moved);
        if (stats && !tiers)
            stats->rows_moved += moved;
    }
    return finish(x, rc);
}

/* Deletes rollups with bucket < data_cutoff_s, spans last seen before span_cutoff_ns and seen
 * chunk ids older than seen_cutoff_ns. */
int agg_tiers_expire(agg_store_t *st, int64_t data_cutoff_s, int64_t span_cutoff_ns,
                     int64_t seen_cutoff_ns, agg_retention_stats_t *stats) {
    agg_qx_t *x = st->vt->qx(st);
    int rc = x ? agg_qx_begin(x) : CM_EIO;
    if (rc || (rc = agg_qx_lock_tiers(x, AGG_QX_ALONE)))
        return rc && x ? finish(x, rc) : rc;
    for (size_t r = 0; r < N_ROLLUPS && !rc; r++) {
        char sql[512];
        const char *pk = packed(x, rollups[r].table);
        /* a coarse row goes once all of it is past the cutoff: until then it is what a query
         * over its whole bucket reads, while the fine rows of its later part still exist */
        snprintf(sql, sizeof sql, "DELETE FROM %s WHERE %s%s", phys(x, rollups[r].table),
                 !scoped(x) ? "" : rollups[r].typed ? SCOPE_SVT : SCOPE_SV,
                 strcmp(rollups[r].table, "profile_coarse") ? "bucket<?4" : "bucket+width<=?4");
        int64_t n = 0;
        if (pk) /* counted before: a packed table's deletes count its parts */
            rc = count_keys(x, r, "bucket<?4", &data_cutoff_s, 1, &n);
        if (!rc)
            rc = run_scoped(x, sql, rollups[r].typed, &data_cutoff_s, 1, pk ? NULL : &n);
        if (stats)
            stats->rows_expired += n;
    }
    int64_t n[3] = {0, 0, 0};
    char del[256];
    snprintf(del, sizeof del, "DELETE FROM %s WHERE (trace, span) IN (SELECT trace, span FROM "
             "spans WHERE last_ns < ?1)", phys(x, "span_stacks"));
    if (!rc)
        rc = run(x, del, &span_cutoff_ns, 1, &n[0]);
    if (!rc)
        rc = run(x, "DELETE FROM spans WHERE last_ns < ?1", &span_cutoff_ns, 1, &n[1]);
    if (!rc)
        rc = run(x, "DELETE FROM requests WHERE end_ns < ?1", &span_cutoff_ns, 1, &n[0]);
    if (!rc)
        rc = run(x, "DELETE FROM seen_chunks WHERE ts_ns < ?1", &seen_cutoff_ns, 1, &n[2]);
    if (!rc && stats) {
        stats->spans_expired += n[1];
        stats->seen_expired += n[2];
    }
    return finish(x, rc);
}
