/* Read-only access to the partition stores for the query API (see query_store.h): SQL over the
 * store schema of store_sqlite.c, results into the analysis library's models.
 * Threading: a handle is used by one thread at a time. */
#define _GNU_SOURCE
#include "query_store.h"

#include "hmap.h"
#include "intern.h"
#include "symstore.h"

#include "cm/error.h"
#include "cm/log.h"

#include <dirent.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    char *name, *module, *build_id; /* printable frame of one store location */
    char *file;  /* source file (the agent's function file, or the symbolizer's line), or NULL */
    char *chain; /* inlined frames from the symbol store (agg_sym_t.chain), or NULL */
    uint32_t line;
    uint64_t address;
    uint8_t unnamed;   /* arrived without a function name and not named by the symbolizer */
    uint64_t retry_ns; /* unnamed: ask the symbolizer again after this (CLOCK_MONOTONIC) */
} cloc_t;

/* One partition store, with a cache of the stack trie nodes and locations already resolved:
 * ids are content hashes, so a node never changes meaning (bounded: dropped past a size). */
typedef struct {
    char *path;
    sqlite3 *db;
    agg_hmap_t nodes;  /* node id -> cnode_t */
    agg_hmap_t locidx; /* location id -> index into locs (uint32 after the key) */
    cloc_t *locs;
    size_t nlocs, cap_locs;
    int has_work_units; /* intervals.work_units exists (see work_units_col) */
    int trie_too_big;   /* the stacks table exceeds the cache: never load it whole */
} qdb_t;

typedef struct {
    uint64_t id, parent;
    uint32_t loc; /* index into locs */
} cnode_t;

#define CACHE_MAX_NODES 4000000

static void cache_init(qdb_t *d) {
    agg_hmap_init(&d->nodes, sizeof(uint64_t), sizeof(cnode_t));
    agg_hmap_init(&d->locidx, sizeof(uint64_t), sizeof(uint64_t) + sizeof(uint64_t));
    d->locs = NULL;
    d->nlocs = d->cap_locs = 0;
}

static void cache_free(qdb_t *d) {
    agg_hmap_free(&d->nodes);
    agg_hmap_free(&d->locidx);
    for (size_t i = 0; i < d->nlocs; i++) {
        free(d->locs[i].name);
        free(d->locs[i].module);
        free(d->locs[i].build_id);
        free(d->locs[i].file);
        free(d->locs[i].chain);
    }
    free(d->locs);
}

struct agg_qstore {
    char *dir;
    qdb_t *dbs;
    size_t n, cap;
};

#define B64(st, i, v) sqlite3_bind_int64((st), (i), (sqlite3_int64)(v))

static int sq_rc(int rc) {
    switch (rc) {
    case SQLITE_OK:
    case SQLITE_DONE:
    case SQLITE_ROW:
        return 0;
    case SQLITE_NOMEM:
        return CM_ENOMEM;
    default:
        return CM_EIO;
    }
}

static uint64_t sid(const char *s) { return agg_intern_string_id(s, strlen(s)); }

/* The intervals' units-of-work column, or "0" in a store no writer has opened since the column
 * was added (the writer adds it when it opens the store). */
static const char *work_units_col(qdb_t *d) {
    if (!d->has_work_units) {
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(d->db, "SELECT work_units FROM intervals LIMIT 0", -1, &st,
                               NULL) == SQLITE_OK)
            d->has_work_units = 1;
        sqlite3_finalize(st);
    }
    return d->has_work_units ? "work_units" : "0";
}

/* Opens the store files not opened yet (partitions appear as the group grows). */
static int refresh(agg_qstore_t *qs) {
    DIR *d = opendir(qs->dir);
    if (!d)
        return -errno;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".db") || !strcmp(e->d_name, "reports.db"))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", qs->dir, e->d_name);
        int known = 0;
        for (size_t i = 0; i < qs->n && !known; i++)
            known = !strcmp(qs->dbs[i].path, path);
        if (known)
            continue;
        sqlite3 *db = NULL;
        if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, NULL) !=
            SQLITE_OK) {
            CM_WARN("query: cannot open store %s: %s", path, db ? sqlite3_errmsg(db) : "?");
            sqlite3_close(db);
            continue;
        }
        sqlite3_busy_timeout(db, 5000);
        /* a store being created may not have its schema yet: skip it until it has */
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, "SELECT 1 FROM profile LIMIT 0", -1, &st, NULL) != SQLITE_OK) {
            sqlite3_close(db);
            continue;
        }
        sqlite3_finalize(st);
        if (qs->n == qs->cap) {
            size_t nc = qs->cap ? qs->cap * 2 : 8;
            qdb_t *nd = realloc(qs->dbs, nc * sizeof *nd);
            if (!nd) {
                sqlite3_close(db);
                rc = CM_ENOMEM;
                break;
            }
            qs->dbs = nd;
            qs->cap = nc;
        }
        qs->dbs[qs->n].path = strdup(path);
        qs->dbs[qs->n].db = db;
        qs->dbs[qs->n].has_work_units = 0;
        qs->dbs[qs->n].trie_too_big = 0;
        cache_init(&qs->dbs[qs->n++]);
    }
    closedir(d);
    return rc;
}

int agg_qstore_open(const char *dir, agg_qstore_t **out, char *err, size_t err_size) {
    agg_qstore_t *qs = calloc(1, sizeof *qs);
    if (!qs || !(qs->dir = strdup(dir))) {
        free(qs);
        return CM_ENOMEM;
    }
    int rc = refresh(qs);
    if (rc) {
        snprintf(err, err_size, "cannot read store-dir '%s': %s", dir, cm_strerror(rc));
        agg_qstore_close(qs);
        return rc;
    }
    *out = qs;
    return 0;
}

void agg_qstore_close(agg_qstore_t *qs) {
    if (!qs)
        return;
    for (size_t i = 0; i < qs->n; i++) {
        sqlite3_close(qs->dbs[i].db);
        free(qs->dbs[i].path);
        cache_free(&qs->dbs[i]);
    }
    free(qs->dbs);
    free(qs->dir);
    free(qs);
}

static int prep(qdb_t *d, const char *sql, sqlite3_stmt **st) {
    int rc = sqlite3_prepare_v2(d->db, sql, -1, st, NULL);
    if (rc != SQLITE_OK) {
        CM_WARN("query: %s: cannot prepare '%.60s': %s", d->path, sql, sqlite3_errmsg(d->db));
        return sq_rc(rc);
    }
    return 0;
}

static int done(sqlite3_stmt *st, int rc) {
    sqlite3_finalize(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : sq_rc(rc);
}

/* ---- versions ---- */

void agg_qversions_free(agg_qversion_t *v, size_t n) {
    for (size_t i = 0; v && i < n; i++) {
        free(v[i].service);
        free(v[i].version);
    }
    free(v);
}

static int cmp_version(const void *a, const void *b) {
    const agg_qversion_t *x = a, *y = b;
    int c = strcmp(x->service, y->service);
    if (c)
        return c;
    if (x->first_ns != y->first_ns)
        return x->first_ns < y->first_ns ? -1 : 1;
    return strcmp(x->version, y->version);
}

int agg_qstore_versions(agg_qstore_t *qs, const char *service, agg_qversion_t **out, size_t *n) {
    agg_qversion_t *v = NULL;
    size_t nv = 0, cap = 0;
    int rc = refresh(qs);
    for (size_t i = 0; !rc && i < qs->n; i++) {
        qdb_t *d = &qs->dbs[i];
        sqlite3_stmt *st = NULL, *tot = NULL, *iv = NULL;
        if ((rc = prep(d,
                       "SELECT v.service, v.version, a.s, b.s, first_ns, last_ns, chunks FROM "
                       "versions v LEFT JOIN strings a ON a.id=v.service LEFT JOIN strings b ON "
                       "b.id=v.version WHERE ?1=0 OR v.service=?1",
                       &st)) ||
            (rc = prep(d,
                       "SELECT type, SUM(weight), SUM(count), SUM(rows) FROM totals WHERE service=?1 AND "
                       "version=?2 GROUP BY type",
                       &tot)) ||
            (rc = prep(d,
                       !strcmp(work_units_col(d), "0")
                           ? "SELECT SUM(duration_ns), 0 FROM intervals WHERE service=?1 AND "
                             "version=?2"
                           : "SELECT SUM(duration_ns), SUM(work_units) FROM intervals WHERE "
                             "service=?1 AND version=?2",
                       &iv))) {
            sqlite3_finalize(st);
            sqlite3_finalize(tot);
            break;
        }
        B64(st, 1, service ? sid(service) : 0);
        int s;
        while ((s = sqlite3_step(st)) == SQLITE_ROW) {
            const char *sn = (const char *)sqlite3_column_text(st, 2);
            const char *vn = (const char *)sqlite3_column_text(st, 3);
            sn = sn ? sn : "";
            vn = vn ? vn : "";
            agg_qversion_t *e = NULL;
            for (size_t k = 0; k < nv && !e; k++)
                if (!strcmp(v[k].service, sn) && !strcmp(v[k].version, vn))
                    e = &v[k];
            if (!e) {
                if (nv == cap) {
                    size_t nc = cap ? cap * 2 : 16;
                    agg_qversion_t *nvv = realloc(v, nc * sizeof *nvv);
                    if (!nvv) {
                        rc = CM_ENOMEM;
                        break;
                    }
                    v = nvv;
                    cap = nc;
                }
                e = &v[nv++];
                memset(e, 0, sizeof *e);
                e->service = strdup(sn);
                e->version = strdup(vn);
                e->first_ns = sqlite3_column_int64(st, 4);
                if (!e->service || !e->version) {
                    rc = CM_ENOMEM;
                    break;
                }
            }
            int64_t f = sqlite3_column_int64(st, 4), l = sqlite3_column_int64(st, 5);
            if (f < e->first_ns)
                e->first_ns = f;
            if (l > e->last_ns)
                e->last_ns = l;
            e->chunks += sqlite3_column_int64(st, 6);
            sqlite3_reset(tot);
            B64(tot, 1, sqlite3_column_int64(st, 0));
            B64(tot, 2, sqlite3_column_int64(st, 1));
            while (sqlite3_step(tot) == SQLITE_ROW) {
                int64_t t = sqlite3_column_int64(tot, 0);
                if (t > 0 && t < CM_EV_COUNT) {
                    e->weight[t] += (uint64_t)sqlite3_column_int64(tot, 1);
                    e->samples[t] += (uint64_t)sqlite3_column_int64(tot, 2) / CM_COUNT_ONE;
                    e->count[t] += (uint64_t)sqlite3_column_int64(tot, 2);
                    e->rows[t] += (uint64_t)sqlite3_column_int64(tot, 3);
                }
            }
            sqlite3_reset(iv);
            B64(iv, 1, sqlite3_column_int64(st, 0));
            B64(iv, 2, sqlite3_column_int64(st, 1));
            if (sqlite3_step(iv) == SQLITE_ROW) {
                e->process_seconds += (double)sqlite3_column_int64(iv, 0) / 1e9;
                e->work_units += (uint64_t)sqlite3_column_int64(iv, 1);
            }
        }
        sqlite3_finalize(tot);
        sqlite3_finalize(iv);
        int r2 = done(st, s);
        if (!rc)
            rc = r2;
    }
    if (rc) {
        agg_qversions_free(v, nv);
        return rc;
    }
    if (nv)
        qsort(v, nv, sizeof *v, cmp_version);
    *out = v;
    *n = nv;
    return 0;
}

/* ---- stacks: resolve store stack ids (trie nodes) into profile stacks ---- */

typedef struct {
    uint64_t id;
    uint32_t stack; /* profile stack id */
    uint32_t resolved;
    uint64_t weight, count; /* sums, when the rows are merged per stack */
} stackmap_t;

static void frame_name(const char *fn, const char *mapping, uint64_t addr, char *buf,
                       size_t size, const char **module) {
    const char *base = mapping ? strrchr(mapping, '/') : NULL;
    base = base ? base + 1 : (mapping ? mapping : "");
    *module = base;
    if (fn && *fn)
        snprintf(buf, size, "%s", fn);
    else if (*base)
        snprintf(buf, size, "%s+0x%llx", base, (unsigned long long)addr);
    else
        snprintf(buf, size, "0x%llx", (unsigned long long)addr);
}

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A location that arrived unnamed: its name from the symbol store (symstore.c: what the
 * server named at ingest or at an earlier query, kept across restarts), else from the
 * symbolizer (debuginfod by build id; the answer is stored). At most every 10 s per location
 * (a failing build id is negative-cached by both, so a retry costs a lookup). Named: the
 * cached name changes, so this and every later query and export of this handle sees it. */
/* The location's build id as bytes into bid[64]; returns its length, 0 when it has none. */
static size_t cloc_bid(const cloc_t *c, uint8_t *bid) {
    size_t bl = strlen(c->build_id) / 2;
    if (bl > 64)
        return 0;
    for (size_t i = 0; i < bl; i++) {
        unsigned v = 0;
        if (sscanf(c->build_id + 2 * i, "%2x", &v) != 1)
            return 0;
        bid[i] = (uint8_t)v;
    }
    return bl;
}

static void cloc_symbolize(cloc_t *c) {
    if (!c->unnamed || !c->build_id[0])
        return;
    uint64_t now = mono_ns();
    if (now < c->retry_ns)
        return;
    c->retry_ns = now + 10000000000ull;
    uint8_t bid[64];
    size_t bl = cloc_bid(c, bid);
    if (!bl)
        return;
    agg_sym_t sym;
    if (agg_symstore_get(bid, bl, c->address, 1, &sym) == 1) {
        free(c->name);
        c->name = sym.name;
        sym.name = NULL;
        if (sym.file) {
            free(c->file);
            c->file = sym.file;
            c->line = sym.line;
            sym.file = NULL;
        }
        c->chain = sym.chain;
        sym.chain = NULL;
        c->unnamed = 0;
    }
    agg_sym_free(&sym);
}

/* The cache index of store location loc, adding it from the current row of st (columns c..c+5:
 * function name, mapping file, build id, address, line, function's source file) when it is
 * new. Returns it or CM_ENOMEM. */
static int64_t cache_loc(qdb_t *d, sqlite3_stmt *st, uint64_t loc, int c) {
    int fresh = 0;
    uint64_t *li = agg_hmap_upsert(&d->locidx, &loc, &fresh);
    if (!li)
        return CM_ENOMEM;
    if (!fresh)
        return (int64_t)li[1];
    if (d->nlocs == d->cap_locs) {
        size_t nc = d->cap_locs ? d->cap_locs * 2 : 1024;
        cloc_t *nl = realloc(d->locs, nc * sizeof *nl);
        if (!nl)
            goto nomem;
        d->locs = nl;
        d->cap_locs = nc;
    }
    char name[CM_MAX_STRING_LEN + 1], bid[129] = "";
    const char *module;
    uint64_t addr = (uint64_t)sqlite3_column_int64(st, c + 3);
    frame_name((const char *)sqlite3_column_text(st, c), (const char *)sqlite3_column_text(st, c + 1),
               addr, name, sizeof name, &module);
    int bl = sqlite3_column_bytes(st, c + 2);
    const uint8_t *bb = sqlite3_column_blob(st, c + 2);
    for (int k = 0; bb && k < bl && k < 64; k++)
        snprintf(bid + 2 * k, 3, "%02x", bb[k]);
    cloc_t *cl = &d->locs[d->nlocs];
    cl->name = strdup(name);
    cl->module = strdup(module);
    cl->build_id = strdup(bid);
    cl->address = addr;
    const char *sf = (const char *)sqlite3_column_text(st, c + 5);
    cl->file = sf && *sf ? strdup(sf) : NULL;
    cl->line = (uint32_t)sqlite3_column_int64(st, c + 4);
    cl->chain = NULL;
    const char *fn = (const char *)sqlite3_column_text(st, c);
    cl->unnamed = !fn || !*fn;
    cl->retry_ns = 0;
    if (!cl->name || !cl->module || !cl->build_id || (sf && *sf && !cl->file)) {
        free(cl->name);
        free(cl->module);
        free(cl->build_id);
        free(cl->file);
        goto nomem;
    }
    li[1] = d->nlocs;
    return (int64_t)d->nlocs++;
nomem: /* the new index entry has no location: start the cache over */
    cache_free(d);
    cache_init(d);
    return CM_ENOMEM;
}

/* Fills temp.<table>(id) with the n ids of want (a per-connection scratch table). */
static int fill_temp(qdb_t *d, const char *table, const uint64_t *want, size_t n) {
    char sql[256];
    sqlite3_stmt *st = NULL;
    snprintf(sql, sizeof sql,
             "CREATE TEMP TABLE IF NOT EXISTS %s(id INTEGER PRIMARY KEY); DELETE FROM temp.%s;",
             table, table);
    if (sqlite3_exec(d->db, sql, NULL, NULL, NULL) != SQLITE_OK) {
        CM_WARN("query: %s: temp table: %s", d->path, sqlite3_errmsg(d->db));
        return CM_EIO;
    }
    snprintf(sql, sizeof sql, "INSERT OR IGNORE INTO temp.%s VALUES(?1)", table);
    int rc = prep(d, sql, &st);
    if (rc)
        return rc;
    sqlite3_exec(d->db, "BEGIN", NULL, NULL, NULL);
    for (size_t i = 0; i < n; i++) {
        sqlite3_reset(st);
        B64(st, 1, want[i]);
        sqlite3_step(st);
    }
    sqlite3_exec(d->db, "COMMIT", NULL, NULL, NULL);
    sqlite3_finalize(st);
    return 0;
}

static int cache_fill_locs(qdb_t *d, const uint64_t *want, size_t n) {
    sqlite3_stmt *st = NULL;
    int rc, s;
    if ((rc = fill_temp(d, "wantloc", want, n)) ||
        (rc = prep(d,
                   "SELECT l.id, fn.s, mf.s, m.build_id, l.address, l.line, ff.s FROM "
                   "temp.wantloc w JOIN locations l ON l.id=w.id LEFT JOIN functions f ON "
                   "f.id=l.function LEFT JOIN strings fn ON fn.id=f.name LEFT JOIN strings ff ON "
                   "ff.id=f.filename LEFT JOIN mappings m ON m.id=l.mapping LEFT JOIN strings mf "
                   "ON mf.id=m.filename",
                   &st)))
        return rc;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t li = cache_loc(d, st, (uint64_t)sqlite3_column_int64(st, 0), 1);
        if (li < 0) {
            rc = (int)li;
            break;
        }
    }
    int r2 = done(st, s);
    return rc ? rc : r2;
}

/* Reads the trie nodes (with all their ancestors) of the stacks in `want` into the cache. */
static int cache_fill(qdb_t *d, const uint64_t *want, size_t n) {
    int rc = 0, s;
    sqlite3_stmt *st = NULL;
    uint64_t *rows = NULL, *locs = NULL; /* (id, parent, location) triples; missing locations */
    size_t nr = 0, cap = 0, nl = 0;
    /* Many stacks missing (a cold cache): one sequential scan of the whole trie is far cheaper
     * than walking up from each of them (a store's first query: 130,000 nodes in ~30 ms instead
     * of ~400 ms), unless the trie is larger than the cache may hold. */
    int full = n >= 256 && !d->trie_too_big;
    if (full) {
        if ((rc = prep(d, "SELECT id, parent, location FROM stacks LIMIT ?1", &st)))
            return rc;
        B64(st, 1, CACHE_MAX_NODES / 2 + 1);
    } else {
        if ((rc = fill_temp(d, "want", want, n)))
            return rc;
        /* the nodes first, then their distinct locations: joining the location tables to
         * every node would repeat the same lookups for each node of a popular location */
        if ((rc = prep(d,
                       "WITH RECURSIVE up(id) AS (SELECT id FROM temp.want UNION SELECT s.parent "
                       "FROM stacks s JOIN up ON s.id=up.id WHERE s.parent<>0) "
                       "SELECT s.id, s.parent, s.location FROM up JOIN stacks s ON s.id=up.id",
                       &st)))
            return rc;
    }
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (nr == cap) {
            size_t nc = cap ? 2 * cap : 4096;
            uint64_t *x = realloc(rows, 3 * nc * sizeof *x);
            if (!x) {
                rc = CM_ENOMEM;
                break;
            }
            rows = x;
            cap = nc;
        }
        for (int c = 0; c < 3; c++)
            rows[3 * nr + (size_t)c] = (uint64_t)sqlite3_column_int64(st, c);
        nr++;
    }
    {
        int r2 = done(st, s);
        if (rc || (rc = r2))
            goto out;
    }
    if (full && nr > CACHE_MAX_NODES / 2) { /* too big to hold: walk from the stacks instead */
        d->trie_too_big = 1;
        free(rows);
        return cache_fill(d, want, n);
    }
    if (!(locs = malloc((nr ? nr : 1) * sizeof *locs))) {
        rc = CM_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < nr; i++)
        if (!agg_hmap_find(&d->locidx, &rows[3 * i + 2]))
            locs[nl++] = rows[3 * i + 2];
    if (nl && (rc = cache_fill_locs(d, locs, nl)))
        goto out;
    for (size_t i = 0; i < nr; i++) {
        uint64_t *li = agg_hmap_find(&d->locidx, &rows[3 * i + 2]);
        if (!li)
            continue; /* a location missing from the store: the node stays unknown */
        cnode_t *nd = agg_hmap_upsert(&d->nodes, &rows[3 * i], NULL);
        if (!nd) {
            rc = CM_ENOMEM;
            break;
        }
        nd->parent = rows[3 * i + 1];
        nd->loc = (uint32_t)li[1];
    }
out:
    free(rows);
    free(locs);
    return rc;
}

/* Interns one frame of a profile with lines: named "function file:line" (file's basename)
 * when the line is known. flags: AGG_FRAME_*. */
static int64_t line_frame(agg_profile_t *p, const cloc_t *c, const char *fn, const char *file,
                          uint32_t line, int flags) {
    char name[CM_MAX_STRING_LEN + 64];
    const char *base = file && *file ? strrchr(file, '/') : NULL;
    base = base ? base + 1 : file && *file ? file : "?";
    if (line && !c->unnamed)
        snprintf(name, sizeof name, "%s %s:%u", fn, base, line);
    else
        snprintf(name, sizeof name, "%s", fn);
    return agg_profile_frame_src(p, name, c->module, c->build_id, c->address,
                                 c->unnamed ? NULL : fn, file, c->unnamed ? 0 : line, flags);
}

/* The frames of location c into out (root-first, at most max): one, or with lines the
 * location's inlined frames (the outer function first). Returns how many, or CM_ENOMEM. */
static int loc_frames(agg_profile_t *p, cloc_t *c, int lines, uint32_t *out, int max) {
    int64_t fr;
    if (lines && !c->unnamed && !c->chain && c->build_id[0] && mono_ns() >= c->retry_ns) {
        /* named by the agent: the server's debug file (debuginfod, through the symbol store)
         * may give its line, from the line table rather than the function's file, and its
         * inlined frames; asked at most every 10 s per location */
        c->retry_ns = mono_ns() + 10000000000ull;
        uint8_t bid[64];
        size_t bl = cloc_bid(c, bid);
        agg_sym_t sym;
        if (bl && agg_symstore_get(bid, bl, c->address, 1, &sym) == 1) {
            if (sym.file) {
                free(c->file);
                c->file = sym.file;
                c->line = sym.line;
                sym.file = NULL;
            }
            c->chain = sym.chain;
            sym.chain = NULL;
        }
        if (bl)
            agg_sym_free(&sym);
    }
    if (!lines) {
        fr = agg_profile_frame(p, c->name, c->module, c->build_id, c->address);
        if (fr < 0)
            return (int)fr;
        out[0] = (uint32_t)fr;
        return 1;
    }
    int by_addr = lines == AGG_QLINES_ADDRESSES ? AGG_FRAME_BY_ADDRESS : 0;
    if (!c->chain || c->unnamed) {
        fr = line_frame(p, c, c->name, c->file, c->line, by_addr);
        if (fr < 0)
            return (int)fr;
        out[0] = (uint32_t)fr;
        return 1;
    }
    /* chain: "function\tfile\tline\n" innermost first; out gets them outermost first */
    const char *ent[64];
    int m = 0;
    for (const char *q = c->chain; *q && m < 64 && m < max; q = strchr(q, '\n') + 1) {
        ent[m++] = q;
        if (!strchr(q, '\n'))
            break;
    }
    for (int k = 0; k < m; k++) {
        const char *e = ent[m - 1 - k];
        const char *t1 = strchr(e, '\t'), *t2 = t1 ? strchr(t1 + 1, '\t') : NULL;
        if (!t2)
            return k ? k : loc_frames(p, c, 0, out, max); /* malformed: the plain frame */
        char fn[CM_MAX_STRING_LEN + 1], file[1024];
        if (k == 0) /* the outer function: the name every other view gives it */
            snprintf(fn, sizeof fn, "%s", c->name);
        else
            snprintf(fn, sizeof fn, "%.*s", (int)(t1 - e), e);
        snprintf(file, sizeof file, "%.*s", (int)(t2 - t1 - 1), t1 + 1);
        fr = line_frame(p, c, fn, file, (uint32_t)strtoul(t2 + 1, NULL, 10),
                        by_addr | (k > 0 ? AGG_FRAME_INLINED : 0));
        if (fr < 0)
            return (int)fr;
        out[k] = (uint32_t)fr;
    }
    return m;
}

/* Resolves every stack of `stacks` (keys: store stack ids) into profile stacks, through the
 * store's node cache (only stacks not seen before are read from the trie). With lines, each
 * frame carries its source line and inlined functions become frames of their own. */
static int resolve_stacks(qdb_t *d, agg_profile_t *p, agg_hmap_t *stacks, int lines) {
    int rc = 0;
    uint64_t *missing = NULL;
    uint32_t *locframe = NULL, *tmp = NULL, *lfv = NULL;
    size_t nm = 0, nlfv = 0, caplfv = 0;
    if (d->nodes.n > CACHE_MAX_NODES) { /* bounded memory: start over */
        cache_free(d);
        cache_init(d);
    }
    missing = malloc((stacks->n ? stacks->n : 1) * sizeof *missing);
    if (!missing)
        return CM_ENOMEM;
    for (size_t i = 0; i < stacks->n; i++) {
        stackmap_t *m = agg_hmap_entry(stacks, i);
        if (m->id && !agg_hmap_find(&d->nodes, &m->id))
            missing[nm++] = m->id;
    }
    if (nm && (rc = cache_fill(d, missing, nm)))
        goto out;
    locframe = malloc((d->nlocs ? d->nlocs : 1) * sizeof *locframe);
    tmp = malloc(CM_MAX_STACK_DEPTH * sizeof *tmp);
    if (!locframe || !tmp) {
        rc = CM_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < d->nlocs; i++)
        locframe[i] = AGG_NONE;
    for (size_t i = 0; i < stacks->n; i++) {
        stackmap_t *m = agg_hmap_entry(stacks, i);
        uint32_t depth = 0;
        uint64_t id = m->id;
        int broken = 0;
        while (id && depth < CM_MAX_STACK_DEPTH) {
            cnode_t *nd = agg_hmap_find(&d->nodes, &id);
            if (!nd) {
                broken = 1; /* a node missing from the store (expired): skip the stack */
                break;
            }
            uint32_t *lf = &locframe[nd->loc];
            if (*lf == AGG_NONE) {
                /* a location's frames (several with lines and inlines): lfv[*lf] is their
                 * count, the frames follow root-first */
                cloc_t *c = &d->locs[nd->loc];
                cloc_symbolize(c);
                if (nlfv + 65 > caplfv) {
                    size_t nc = caplfv ? 2 * caplfv : 4096;
                    uint32_t *x = realloc(lfv, nc * sizeof *x);
                    if (!x) {
                        rc = CM_ENOMEM;
                        goto out;
                    }
                    lfv = x;
                    caplfv = nc;
                }
                int k = loc_frames(p, c, lines, lfv + nlfv + 1, 64);
                if (k < 0) {
                    rc = k;
                    goto out;
                }
                lfv[nlfv] = (uint32_t)k;
                *lf = (uint32_t)nlfv;
                nlfv += 1 + (size_t)k;
            }
            /* leaf first here (reversed below): the innermost inlined frame first */
            for (uint32_t k = lfv[*lf]; k > 0 && depth < CM_MAX_STACK_DEPTH; k--)
                tmp[depth++] = lfv[*lf + k];
            id = nd->parent;
        }
        if (broken)
            continue;
        for (uint32_t a = 0, z = depth ? depth - 1 : 0; a < z; a++, z--) {
            uint32_t t = tmp[a];
            tmp[a] = tmp[z];
            tmp[z] = t;
        }
        int64_t sid_ = agg_profile_stack(p, tmp, depth);
        if (sid_ < 0) {
            rc = (int)sid_;
            goto out;
        }
        m->stack = (uint32_t)sid_;
        m->resolved = 1;
    }
out:
    free(missing);
    free(locframe);
    free(tmp);
    free(lfv);
    return rc;
}

/* ---- merged profiles ---- */

typedef struct {
    uint64_t stack;
    uint32_t replicate;
    uint64_t weight, count;
} rawrow_t;

typedef struct {
    int64_t v, w, b; /* version id, width, bucket */
} bkey_t;

typedef struct {
    bkey_t key;
    double work; /* process-seconds */
} bucket_t;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Maps bucket key k to replicate id in reps. */
static int rep_set(agg_hmap_t *reps, const bkey_t *k, int64_t id) {
    uint32_t *e = agg_hmap_upsert(reps, k, NULL);
    if (!e)
        return CM_ENOMEM;
    e[sizeof(bkey_t) / sizeof *e] = (uint32_t)id;
    return 0;
}

static int64_t rep_new(agg_profile_t *p, const bkey_t *k, double work) {
    char key[96];
    snprintf(key, sizeof key, "%llx/%lld/%lld", (unsigned long long)k->v, (long long)k->w,
             (long long)k->b);
    return agg_profile_replicate(p, key, work);
}

/* Interns one replicate per bucket of bks (ordered by version, width, bucket), merging buckets
 * with less than half their version's median work into the previous full bucket of the version
 * (the leading ones into the first full one; when none is full each keeps its own). Every
 * bucket's work is added exactly once. Fills reps: bkey_t -> replicate id. */
static int assign_replicates(agg_profile_t *p, const bucket_t *bks, size_t n, agg_hmap_t *reps) {
    double *tmp = malloc((n ? n : 1) * sizeof *tmp);
    if (!tmp)
        return CM_ENOMEM;
    int rc = 0;
    for (size_t i = 0; i < n && !rc;) {
        size_t j = i;
        while (j < n && bks[j].key.v == bks[i].key.v)
            j++;
        for (size_t k = i; k < j; k++)
            tmp[k - i] = bks[k].work;
        qsort(tmp, j - i, sizeof *tmp, cmp_double);
        double median = tmp[(j - i) / 2];
        int64_t prev = -1; /* replicate of the last full bucket */
        for (size_t k = i; k < j && !rc; k++) {
            int64_t id;
            if (bks[k].work < 0.5 * median) {
                if (prev < 0)
                    continue; /* leading small bucket: goes to the first full one below */
                id = agg_profile_replicate(p, p->replicates[prev].key, bks[k].work);
            } else {
                id = rep_new(p, &bks[k].key, bks[k].work);
                for (size_t s = i; prev < 0 && s < k && id >= 0 && !rc; s++) /* leading ones */
                    if ((rc = rep_set(reps, &bks[s].key, id)) == 0)
                        id = agg_profile_replicate(p, p->replicates[id].key, bks[s].work);
                prev = id;
            }
            if (!rc && id < 0)
                rc = (int)id;
            if (!rc)
                rc = rep_set(reps, &bks[k].key, id);
        }
        for (size_t k = i; prev < 0 && k < j && !rc; k++) { /* every bucket small: own ids */
            int64_t id = rep_new(p, &bks[k].key, bks[k].work);
            rc = id < 0 ? (int)id : rep_set(reps, &bks[k].key, id);
        }
        i = j;
    }
    free(tmp);
    return rc;
}

#define QMAX_WIDTHS 64
#define QFILTER_PARAM 500 /* first SQL parameter of the label/dimension filters */ /* distinct interval widths of a service (fine, downsampled, changed) */

/* The SQL pieces every profile read shares: the version list (explicit, so each statement is
 * an index range per version), the fine widths present (so a bucket range is an index range
 * too), the label filter, and their bindings. */
typedef struct {
    char vin[2600], win[16 + 6 * (QMAX_WIDTHS + 1)];
    const char *lab; /* the label and dimension filters (dims.h), "" for none */
    char labbuf[AGG_QMAX_FILTERS * 100 + 100];
    agg_qfilter_t filt[AGG_QMAX_FILTERS + 1];
    size_t nfilt;
    uint64_t vid[AGG_QMAX_VERSIONS];
    size_t nv;
    int64_t widths[QMAX_WIDTHS + 1]; /* + 1: the leaf query adds the replicate width */
    size_t nw;
} qparts_t;

static void bind_parts(sqlite3_stmt *st, const agg_qspec_t *q, const qparts_t *qp) {
    B64(st, 1, sid(q->service));
    B64(st, 2, q->type);
    (void)q;
    if (*qp->lab)
        agg_dims_filter_bind(st, qp->filt, qp->nfilt, QFILTER_PARAM);
    for (size_t i = 0; i < qp->nv; i++)
        B64(st, (int)(10 + i), qp->vid[i]);
    for (size_t i = 0; i < qp->nw; i++)
        B64(st, (int)(300 + i), qp->widths[i]);
}

/* Rebuilds qp->win from qp->widths. */
static void parts_widths(qparts_t *qp) {
    size_t n = (size_t)snprintf(qp->win, sizeof qp->win, " AND width IN (");
    for (size_t i = 0; i < qp->nw; i++)
        n += (size_t)snprintf(qp->win + n, sizeof qp->win - n, "%s?%zu", i ? "," : "", 300 + i);
    snprintf(qp->win + n, sizeof qp->win - n, ")");
}

/* Fills qp; *empty = 1 when the service has no data for these versions at all. */
static int query_parts(qdb_t *d, const agg_qspec_t *q, qparts_t *qp, int *empty) {
    sqlite3_stmt *st = NULL;
    int rc, s;
    qp->nv = qp->nw = 0;
    *empty = 0;
    if (q->versions && q->n_versions) {
        for (size_t i = 0; i < q->n_versions; i++)
            qp->vid[qp->nv++] = sid(q->versions[i]);
    } else {
        if ((rc = prep(d, "SELECT version FROM versions WHERE service=?1", &st)))
            return rc;
        B64(st, 1, sid(q->service));
        while ((s = sqlite3_step(st)) == SQLITE_ROW && qp->nv < AGG_QMAX_VERSIONS)
            qp->vid[qp->nv++] = (uint64_t)sqlite3_column_int64(st, 0);
        if ((rc = done(st, s)))
            return rc;
    }
    if ((rc = prep(d, "SELECT DISTINCT width FROM intervals WHERE service=?1", &st)))
        return rc;
    B64(st, 1, sid(q->service));
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (qp->nw == QMAX_WIDTHS) { /* never a silently partial answer */
            CM_WARN("query: %s: service '%s' has more than %d bucket widths", d->path,
                    q->service, QMAX_WIDTHS);
            done(st, s);
            return CM_ETOOBIG;
        }
        qp->widths[qp->nw++] = sqlite3_column_int64(st, 0);
    }
    if ((rc = done(st, s)))
        return rc;
    *empty = !qp->nv || !qp->nw;
    size_t n = (size_t)snprintf(qp->vin, sizeof qp->vin, " AND version IN (");
    for (size_t i = 0; i < qp->nv; i++)
        n += (size_t)snprintf(qp->vin + n, sizeof qp->vin - n, "%s?%zu", i ? "," : "", 10 + i);
    snprintf(qp->vin + n, sizeof qp->vin - n, ")");
    parts_widths(qp);
    qp->nfilt = 0;
    if (q->label_key && q->label_value)
        qp->filt[qp->nfilt++] = (agg_qfilter_t){q->label_key, q->label_value};
    for (size_t i = 0; i < q->n_filters && qp->nfilt <= AGG_QMAX_FILTERS; i++)
        qp->filt[qp->nfilt++] = q->filters[i];
    if (q->n_filters > AGG_QMAX_FILTERS ||
        agg_dims_filter_sql(qp->labbuf, sizeof qp->labbuf, "labels", qp->filt, qp->nfilt,
                            QFILTER_PARAM) < 0)
        return CM_EINVAL;
    qp->lab = qp->labbuf;
    return 0;
}

/* Adds the rows of `table` (profile or profile_coarse) with bucket in [from, to) to the
 * per-stack sums in stacks (fine rows: width among qp's widths; coarse rows: width = cw). */
static int sum_stacks(qdb_t *d, const agg_qspec_t *q, const qparts_t *qp, const char *table,
                      int64_t cw, int64_t from, int64_t to, agg_hmap_t *stacks, size_t *nrows) {
    if (from >= to)
        return 0;
    char sql[4096];
    sqlite3_stmt *st = NULL;
    int rc, s;
    snprintf(sql, sizeof sql,
             "SELECT stack, weight, count FROM %s WHERE service=?1 AND type=?2%s%s AND "
             "bucket>=?3 AND bucket<?4%s",
             table, qp->vin, cw ? " AND width=?7" : qp->win, qp->lab);
    if ((rc = prep(d, sql, &st)))
        return rc;
    bind_parts(st, q, qp);
    B64(st, 3, from);
    B64(st, 4, to);
    if (cw)
        B64(st, 7, cw);
    /* rows stream in primary-key order without GROUP BY (SQLite would sort them) */
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        uint64_t sk = (uint64_t)sqlite3_column_int64(st, 0);
        stackmap_t *m = agg_hmap_upsert(stacks, &sk, NULL);
        if (!m) {
            rc = CM_ENOMEM;
            break;
        }
        m->weight += (uint64_t)sqlite3_column_int64(st, 1);
        m->count += (uint64_t)sqlite3_column_int64(st, 2);
        (*nrows)++;
    }
    int r2 = done(st, s);
    return rc ? rc : r2;
}

static int cmp_bucket(const void *a, const void *b) {
    const bkey_t *x = &((const bucket_t *)a)->key, *y = &((const bucket_t *)b)->key;
    if (x->v != y->v)
        return x->v < y->v ? -1 : 1;
    if (x->w != y->w)
        return x->w < y->w ? -1 : 1;
    return x->b < y->b ? -1 : x->b > y->b;
}

/* Reads "a,b,c" of meta key into v (at most max); returns the count (0: absent/malformed). */
static int meta_list(qdb_t *d, const char *key, int64_t *v, int max) {
    sqlite3_stmt *st = NULL;
    int n = 0;
    if (sqlite3_prepare_v2(d->db, "SELECT value FROM meta WHERE key=?1", -1, &st, NULL) !=
        SQLITE_OK)
        return 0;
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_text(st, 0)) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", (const char *)sqlite3_column_text(st, 0));
        for (char *save = NULL, *t = strtok_r(buf, ",", &save); t && n < max;
             t = strtok_r(NULL, ",", &save))
            v[n++] = atoll(t);
    }
    sqlite3_finalize(st);
    return n;
}

/* A positive integer of the store's meta table (replicate_width: set once the derived rollups
 * are complete), 0 when absent. */
static int64_t meta_int(qdb_t *d, const char *key) {
    int64_t v = 0;
    return meta_list(d, key, &v, 1) == 1 && v > 0 ? v : 0;
}

/* The tiers of the store's per-stack rollup, widest (the coarse width) first, with the marks
 * below which each is complete (store_sqlite.c, derived_check); 0 when it has none (then every
 * query reads the fine rows). */
static int read_tiers(qdb_t *d, int64_t *tiers, int64_t *done) {
    int n = meta_list(d, "tiers", tiers, AGG_QMAX_TIERS);
    int64_t dummy[AGG_QMAX_TIERS];
    done = done ? done : dummy;
    if (meta_list(d, "tiers_done", done, AGG_QMAX_TIERS) != n)
        return 0;
    for (int i = 0; i < n; i++)
        if (tiers[i] <= 0)
            return 0;
    for (int i = 0; i < n / 2; i++) { /* stored narrowest first */
        int64_t x = tiers[i], y = done[i];
        tiers[i] = tiers[n - 1 - i];
        done[i] = done[n - 1 - i];
        tiers[n - 1 - i] = x;
        done[n - 1 - i] = y;
    }
    return n;
}

/* Per-stack sums of [from, to) from the tiles of tier `level` and below: the whole tiles of
 * tiers[level] inside the range, the rest at its two ends from the narrower tiers, the fine
 * rows last. At most two partial tiles per tier: an hour not aligned to anything reads at most
 * ~5 ten-minute, ~18 one-minute and ~10 fine buckets. *coarse_end: where the coarse tiles (level
 * 0) end, or from when there are none. */
static int plan_stacks(qdb_t *d, const agg_qspec_t *q, const qparts_t *fine, const int64_t *tiers,
                       const int64_t *done, int nt, int level, int64_t from, int64_t to,
                       agg_hmap_t *stacks, size_t *nrows, int64_t *coarse_end) {
    if (level == 0)
        *coarse_end = from;
    if (from >= to)
        return 0;
    if (level == nt)
        return fine->nw ? sum_stacks(d, q, fine, "profile", 0, from, to, stacks, nrows) : 0;
    int64_t w = tiers[level];
    int64_t a = from <= 0 ? 0 : ((from + w - 1) / w) * w, b = to - to % w;
    int64_t ignore;
    if (b > done[level]) /* the tier holds its tiles below its compaction mark only */
        b = done[level];
    if (a >= b)
        return plan_stacks(d, q, fine, tiers, done, nt, level + 1, from, to, stacks, nrows,
                           &ignore);
    if (level == 0)
        *coarse_end = b;
    int rc = sum_stacks(d, q, fine, "profile_coarse", w, a, b, stacks, nrows);
    if (!rc)
        rc = plan_stacks(d, q, fine, tiers, done, nt, level + 1, from, a, stacks, nrows, &ignore);
    if (!rc)
        rc = plan_stacks(d, q, fine, tiers, done, nt, level + 1, b, to, stacks, nrows, &ignore);
    return rc;
}

/* The replicates: the work of each (version, width, bucket) in [from, to), buckets narrower
 * than rw merged into rw-wide ones (rw 0: none), then assign_replicates. Fills reps. */
static int read_replicates(qdb_t *d, const agg_qspec_t *q, const qparts_t *qp, agg_profile_t *p,
                           agg_hmap_t *reps, int64_t from, int64_t to, int64_t rw) {
    char sql[4096];
    sqlite3_stmt *st = NULL;
    bucket_t *bks = NULL;
    size_t nbk = 0, ncap = 0;
    int rc = 0, s;
    snprintf(sql, sizeof sql,
             "SELECT version, width, bucket, SUM(%s) FROM intervals WHERE "
             "service=?1%s%s AND bucket>=?3 AND bucket<?4 GROUP BY version, width, bucket "
             "ORDER BY version, width, bucket",
             q->per_request ? work_units_col(d) : "duration_ns", qp->vin, qp->win);
    if ((rc = prep(d, sql, &st)))
        return rc;
    qparts_t nolab = *qp;
    nolab.lab = "";
    bind_parts(st, q, &nolab);
    B64(st, 3, from);
    B64(st, 4, to);
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (nbk == ncap) {
            size_t nc = ncap ? ncap * 2 : 256;
            bucket_t *nb = realloc(bks, nc * sizeof *nb);
            if (!nb) {
                rc = CM_ENOMEM;
                break;
            }
            bks = nb;
            ncap = nc;
        }
        bucket_t *k = &bks[nbk++];
        k->key.v = sqlite3_column_int64(st, 0);
        k->key.w = sqlite3_column_int64(st, 1);
        k->key.b = sqlite3_column_int64(st, 2);
        k->work = (double)sqlite3_column_int64(st, 3) / (q->per_request ? 1 : 1e9);
        if (rw > 0 && k->key.w < rw) {
            k->key.b -= k->key.b % rw;
            k->key.w = rw;
        }
    }
    int r2 = done(st, s);
    if (!rc && !(rc = r2) && rw > 0 && nbk) { /* merge the buckets that became one */
        qsort(bks, nbk, sizeof *bks, cmp_bucket);
        size_t o = 0;
        for (size_t i = 1; i < nbk; i++) {
            if (!cmp_bucket(&bks[o], &bks[i]))
                bks[o].work += bks[i].work;
            else
                bks[++o] = bks[i];
        }
        nbk = o + 1;
    }
    if (!rc)
        rc = assign_replicates(p, bks, nbk, reps);
    free(bks);
    return rc;
}

/* Work in [from, to): process-seconds (the intervals' pro-rata chunk durations), or units of
 * work the application counted (q->per_request). */
static int read_work(qdb_t *d, const agg_qspec_t *q, const qparts_t *qp, double *work) {
    char sql[4096];
    sqlite3_stmt *st = NULL;
    int rc, s;
    snprintf(sql, sizeof sql,
             "SELECT SUM(%s) FROM intervals WHERE service=?1%s%s AND bucket>=?3 AND bucket<?4",
             q->per_request ? work_units_col(d) : "duration_ns", qp->vin, qp->win);
    if ((rc = prep(d, sql, &st)))
        return rc;
    qparts_t nolab = *qp;
    nolab.lab = "";
    bind_parts(st, q, &nolab);
    B64(st, 3, q->from_s);
    B64(st, 4, q->to_s);
    if ((s = sqlite3_step(st)) == SQLITE_ROW)
        *work += (double)sqlite3_column_int64(st, 0) / (q->per_request ? 1 : 1e9);
    return done(st, s);
}

/* The replicate of the current row of st, whose (version, width, bucket) are columns col..col+2
 * (interning one when the intervals had none). Rows come in key order: the last bucket's
 * replicate is remembered in *c (start with c->key.v = -1). Returns it or a CM_E* code. */
typedef struct {
    bkey_t key;
    int64_t rep;
} repcur_t;

static int64_t row_replicate(agg_profile_t *p, agg_hmap_t *reps, repcur_t *c, sqlite3_stmt *st,
                             int col) {
    bkey_t k = {sqlite3_column_int64(st, col), sqlite3_column_int64(st, col + 1),
                sqlite3_column_int64(st, col + 2)};
    if (k.v == c->key.v && k.w == c->key.w && k.b == c->key.b)
        return c->rep;
    uint32_t *known = agg_hmap_find(reps, &k);
    int64_t r = known ? (int64_t)known[sizeof k / sizeof *known] : rep_new(p, &k, 0);
    if (r >= 0) {
        c->key = k;
        c->rep = r;
    }
    return r;
}

typedef struct {
    uint64_t leaf, weight, count;
    uint32_t replicate;
} leafrow_t;

/* Leaf-replicate form: each replicate's cost per leaf location from profile_leaf. */
static int read_leaves(qdb_t *d, const agg_qspec_t *q, const qparts_t *qp, agg_profile_t *p,
                       agg_hmap_t *reps, int64_t from, int64_t to, int64_t rw) {
    char sql[4096];
    sqlite3_stmt *st = NULL;
    leafrow_t *rows = NULL;
    uint64_t *missing = NULL;
    uint32_t *frame = NULL;
    size_t n = 0, cap = 0, nm = 0;
    int rc = 0, s;
    agg_hmap_t leaves; /* leaf location id -> (uint64) index into the location cache */
    agg_hmap_init(&leaves, sizeof(uint64_t), 2 * sizeof(uint64_t));
    /* the leaf rows: replicate-width ones, and downsampled ones (the intervals' wider widths) */
    qparts_t lp = *qp;
    size_t nw = 0;
    lp.widths[nw++] = rw;
    for (size_t i = 0; i < qp->nw && nw < sizeof lp.widths / sizeof *lp.widths; i++)
        if (qp->widths[i] > rw)
            lp.widths[nw++] = qp->widths[i];
    lp.nw = nw;
    parts_widths(&lp);
    snprintf(sql, sizeof sql,
             "SELECT leaf, weight, count, version, width, bucket FROM profile_leaf WHERE "
             "service=?1 AND type=?2%s%s AND bucket>=?3 AND bucket<?4%s",
             lp.vin, lp.win, lp.lab);
    if ((rc = prep(d, sql, &st)))
        goto out;
    bind_parts(st, q, &lp);
    B64(st, 3, from);
    B64(st, 4, to);
    repcur_t cur = {{-1, -1, -1}, 0};
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        uint64_t leaf = (uint64_t)sqlite3_column_int64(st, 0);
        if (!leaf)
            continue; /* the empty stack: no self cost to anyone */
        int64_t rep = row_replicate(p, reps, &cur, st, 3);
        if (rep < 0) {
            rc = (int)rep;
            break;
        }
        if (n == cap) {
            size_t nc = cap ? cap * 2 : 4096;
            leafrow_t *nr = realloc(rows, nc * sizeof *nr);
            if (!nr) {
                rc = CM_ENOMEM;
                break;
            }
            rows = nr;
            cap = nc;
        }
        rows[n++] = (leafrow_t){leaf, (uint64_t)sqlite3_column_int64(st, 1),
                                (uint64_t)sqlite3_column_int64(st, 2), (uint32_t)rep};
        int fresh = 0;
        if (!agg_hmap_upsert(&leaves, &leaf, &fresh)) {
            rc = CM_ENOMEM;
            break;
        }
    }
    {
        int r2 = done(st, s);
        if (rc || (rc = r2))
            goto out;
    }
    missing = malloc((leaves.n ? leaves.n : 1) * sizeof *missing);
    if (!missing) {
        rc = CM_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < leaves.n; i++) {
        uint64_t *id = agg_hmap_entry(&leaves, i);
        if (!agg_hmap_find(&d->locidx, id))
            missing[nm++] = *id;
    }
    if (nm && (rc = cache_fill_locs(d, missing, nm)))
        goto out;
    frame = malloc((leaves.n ? leaves.n : 1) * sizeof *frame);
    if (!frame) {
        rc = CM_ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < leaves.n; i++) {
        uint64_t *e = agg_hmap_entry(&leaves, i);
        uint64_t *li = agg_hmap_find(&d->locidx, e);
        frame[i] = AGG_NONE;
        e[1] = i;
        if (!li)
            continue; /* a location missing from the store: like a broken stack, skipped */
        cloc_t *c = &d->locs[li[1]];
        cloc_symbolize(c);
        int64_t fr = agg_profile_frame(p, c->name, c->module, c->build_id, c->address);
        if (fr < 0) {
            rc = (int)fr;
            goto out;
        }
        frame[i] = (uint32_t)fr;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t *e = agg_hmap_find(&leaves, &rows[i].leaf);
        uint32_t fr = frame[e[1]];
        if (fr != AGG_NONE &&
            (rc = agg_profile_add_leaf(p, fr, rows[i].weight, rows[i].count, rows[i].replicate)))
            goto out;
    }
out:
    agg_hmap_free(&leaves);
    free(rows);
    free(missing);
    free(frame);
    return rc;
}

/* Per-stack replicates (filters and inclusive tests need each replicate's stacks): every fine
 * row of [from, to) with the replicate of its bucket. */
static int stack_replicates(qdb_t *d, const agg_qspec_t *q, const qparts_t *qp, agg_profile_t *p,
                            agg_hmap_t *reps) {
    char sql[4096];
    int rc = 0, s;
    sqlite3_stmt *st = NULL;
    rawrow_t *rows = NULL;
    size_t nrows = 0, cap = 0;
    agg_hmap_t stacks;
    agg_hmap_init(&stacks, sizeof(uint64_t), sizeof(stackmap_t));
    snprintf(sql, sizeof sql,
             "SELECT stack, weight, count, version, width, bucket FROM profile WHERE "
             "service=?1 AND type=?2%s%s AND bucket>=?3 AND bucket<?4%s",
             qp->vin, qp->win, qp->lab);
    if ((rc = prep(d, sql, &st)))
        goto out;
    bind_parts(st, q, qp);
    B64(st, 3, q->from_s);
    B64(st, 4, q->to_s);
    repcur_t cur = {{-1, -1, -1}, 0};
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (nrows == cap) {
            size_t nc = cap ? cap * 2 : 4096;
            rawrow_t *nr = realloc(rows, nc * sizeof *nr);
            if (!nr) {
                rc = CM_ENOMEM;
                break;
            }
            rows = nr;
            cap = nc;
        }
        rawrow_t *r = &rows[nrows++];
        r->stack = (uint64_t)sqlite3_column_int64(st, 0);
        r->weight = (uint64_t)sqlite3_column_int64(st, 1);
        r->count = (uint64_t)sqlite3_column_int64(st, 2);
        int64_t rep = row_replicate(p, reps, &cur, st, 3);
        if (rep < 0) {
            rc = (int)rep;
            break;
        }
        r->replicate = (uint32_t)rep;
        if (!agg_hmap_upsert(&stacks, &r->stack, NULL)) {
            rc = CM_ENOMEM;
            break;
        }
    }
    {
        int r2 = done(st, s);
        st = NULL;
        if (rc || (rc = r2))
            goto out;
    }
    if (!nrows || (rc = resolve_stacks(d, p, &stacks, q->lines)))
        goto out;
    for (size_t i = 0; i < nrows; i++) {
        stackmap_t *m = agg_hmap_find(&stacks, &rows[i].stack);
        if (!m || !m->resolved)
            continue;
        if ((rc = agg_profile_add(p, m->stack, rows[i].weight, rows[i].count, rows[i].replicate,
                                  0)))
            goto out;
    }
out:
    free(rows);
    agg_hmap_free(&stacks);
    return rc;
}

/* One store's part of a profile. Plan:
 *  - per-stack replicates (q->replicates == AGG_QREP_STACKS, or a store without coarse rollups):
 *    every fine row of the range;
 *  - otherwise the per-stack sums come from profile_coarse for the whole coarse buckets inside
 *    [from, to) and from the fine rows only for the partial ones at the edges: an hour of 10,000
 *    stacks is 10,000 coarse rows instead of 360 x 10,000 fine ones. The result is the same (the
 *    coarse rows are sums of the fine ones, written in the same transaction). With
 *    AGG_QREP_LEAVES, the replicates come from profile_leaf (one row per bucket and leaf). */
static int profile_one(qdb_t *d, const agg_qspec_t *q, agg_profile_t *p) {
    int rc = 0, empty;
    size_t nrows = 0;
    qparts_t qp;
    agg_hmap_t stacks, reps;
    if (q->n_versions > AGG_QMAX_VERSIONS)
        return CM_EINVAL;
    agg_hmap_init(&stacks, sizeof(uint64_t), sizeof(stackmap_t));
    agg_hmap_init(&reps, sizeof(bkey_t), sizeof(bkey_t) + sizeof(uint64_t));
    if ((rc = query_parts(d, q, &qp, &empty)) || empty)
        goto out;
    int64_t tiers[AGG_QMAX_TIERS], done[AGG_QMAX_TIERS];
    int nt = q->exact ? 0 : read_tiers(d, tiers, done);
    if (q->replicates == AGG_QREP_STACKS || (q->replicates == AGG_QREP_LEAVES && !nt)) {
        if ((rc = read_replicates(d, q, &qp, p, &reps, q->from_s, q->to_s, 0)))
            goto out;
        rc = stack_replicates(d, q, &qp, p, &reps);
        goto out;
    }
    if (!nt) { /* a store without the tiers: every fine row */
        if ((rc = sum_stacks(d, q, &qp, "profile", 0, q->from_s, q->to_s, &stacks, &nrows)))
            goto out;
    } else {
        /* fine rows at the tiles' edges: the widths below the coarse one; rows downsampled to
         * the coarse width (older than --downsample-after) where no coarse tile covers them */
        int64_t coarse = tiers[0];
        qparts_t fine = qp, big = qp;
        fine.nw = big.nw = 0;
        for (size_t i = 0; i < qp.nw; i++) {
            if (qp.widths[i] < coarse)
                fine.widths[fine.nw++] = qp.widths[i];
            else
                big.widths[big.nw++] = qp.widths[i];
        }
        parts_widths(&fine);
        parts_widths(&big);
        int64_t hb;
        if ((rc = plan_stacks(d, q, &fine, tiers, done, nt, 0, q->from_s, q->to_s, &stacks,
                              &nrows, &hb)) ||
            (big.nw && (rc = sum_stacks(d, q, &big, "profile", 0, hb, q->to_s, &stacks, &nrows))))
            goto out;
    }
    if (!nrows)
        goto out;
    int64_t all = agg_profile_replicate(p, "all", 0);
    if (all < 0) {
        rc = (int)all;
        goto out;
    }
    if ((rc = resolve_stacks(d, p, &stacks, q->lines)))
        goto out;
    for (size_t i = 0; i < stacks.n; i++) {
        stackmap_t *m = agg_hmap_entry(&stacks, i);
        if (m->resolved &&
            (rc = agg_profile_add(p, m->stack, m->weight, m->count, (uint32_t)all, 0)))
            goto out;
    }
    if (q->replicates == AGG_QREP_LEAVES) {
        /* replicates: whole replicate-width buckets over the range; their leaf rows; the
         * totals stay those of the exact range, with its work */
        int64_t rw = meta_int(d, "replicate_width"), rfrom, rto;
        if (rw <= 0) {
            rc = CM_EFORMAT;
            goto out;
        }
        /* the replicate-width buckets holding a fine bucket that starts in [from, to) */
        int64_t fine = qp.widths[0];
        for (size_t i = 1; i < qp.nw; i++)
            fine = qp.widths[i] < fine ? qp.widths[i] : fine;
        rfrom = q->from_s % fine ? q->from_s + (fine - q->from_s % fine) : q->from_s;
        rfrom -= rfrom % rw;
        rto = q->to_s % rw ? q->to_s + (rw - q->to_s % rw) : q->to_s;
        agg_profile_use_leaf_replicates(p);
        if ((rc = read_work(d, q, &qp, &p->work_total)) ||
            (rc = read_replicates(d, q, &qp, p, &reps, rfrom, rto, rw)) ||
            (rc = read_leaves(d, q, &qp, p, &reps, rfrom, rto, rw)))
            goto out;
    }
out:
    agg_hmap_free(&stacks);
    agg_hmap_free(&reps);
    return rc;
}

int agg_qstore_profile(agg_qstore_t *qs, const agg_qspec_t *qin, agg_profile_t **out) {
    int rc = refresh(qs);
    if (rc)
        return rc;
    agg_qspec_t qc = *qin;
    const agg_qspec_t *q = &qc;
    /* the tiers and the per-leaf rollup do not keep the dimensions: fine rows only */
    if (agg_dims_filtered(qin->label_key, qin->filters, qin->n_filters))
        qc.exact = 1;
    /* one form for the whole profile: leaf replicates only when every store holding data of
     * the service has the leaf rollup */
    for (size_t i = 0; i < qs->n && qc.replicates == AGG_QREP_LEAVES; i++) {
        qparts_t qp;
        int empty;
        if ((rc = query_parts(&qs->dbs[i], q, &qp, &empty)))
            return rc;
        int64_t tiers[AGG_QMAX_TIERS];
        if (!empty && (qc.exact || !read_tiers(&qs->dbs[i], tiers, NULL) ||
                       !meta_int(&qs->dbs[i], "replicate_width")))
            qc.replicates = AGG_QREP_STACKS;
    }
    agg_profile_t *p = agg_profile_new(q->type);
    if (!p)
        return CM_ENOMEM;
    for (size_t i = 0; i < qs->n && !rc; i++)
        rc = profile_one(&qs->dbs[i], q, p);
    if (!rc && qc.replicates == AGG_QREP_LEAVES) {
        /* a short range has few replicate-width buckets: its fine buckets make more
         * replicates, and reading its per-stack fine rows is cheap */
        uint32_t used = 0;
        for (uint32_t r = 0; r < p->n_replicates; r++)
            used += p->replicates[r].work > 0;
        if (used < AGG_QMIN_LEAF_REPLICATES) {
            agg_profile_free(p);
            qc.replicates = AGG_QREP_STACKS;
            if (!(p = agg_profile_new(q->type)))
                return CM_ENOMEM;
            for (size_t i = 0; i < qs->n && !rc; i++)
                rc = profile_one(&qs->dbs[i], q, p);
        }
    }
    if (!rc && q->from_s > 0 && q->to_s < INT64_MAX / 1000000000) {
        p->time_start_ns = (uint64_t)q->from_s * 1000000000ull;
        p->time_end_ns = (uint64_t)q->to_s * 1000000000ull;
    }
    if (rc) {
        agg_profile_free(p);
        return rc;
    }
    agg_profile_seal(p);
    *out = p;
    return 0;
}

/* ---- time series ---- */

void agg_qseries_free(agg_qseries_t *s) {
    for (size_t i = 0; i < s->n_strings; i++)
        free(s->strings[i]);
    free(s->strings);
    free(s->points);
    memset(s, 0, sizeof *s);
}

static const char *series_string(agg_qseries_t *s, const char *v) {
    for (size_t i = 0; i < s->n_strings; i++)
        if (!strcmp(s->strings[i], v))
            return s->strings[i];
    char **ns = realloc(s->strings, (s->n_strings + 1) * sizeof *ns);
    if (!ns)
        return NULL;
    s->strings = ns;
    if (!(ns[s->n_strings] = strdup(v)))
        return NULL;
    return ns[s->n_strings++];
}

static int cmp_point(const void *a, const void *b) {
    const agg_qpoint_t *x = a, *y = b;
    int c = strcmp(x->version, y->version);
    if (c)
        return c;
    return x->bucket < y->bucket ? -1 : x->bucket > y->bucket;
}

int agg_qstore_timeseries(agg_qstore_t *qs, const char *service, cm_event_type_t type,
                          int64_t from_s, int64_t to_s, agg_qseries_t *out) {
    return agg_qstore_timeseries_label(qs, service, type, from_s, to_s, NULL, NULL, NULL, 0, out);
}

int agg_qstore_timeseries_label(agg_qstore_t *qs, const char *service, cm_event_type_t type,
                                int64_t from_s, int64_t to_s, const char *label_key,
                                const char *label_value, const agg_qfilter_t *filters,
                                size_t n_filters, agg_qseries_t *out) {
    memset(out, 0, sizeof *out);
    size_t cap = 0;
    int rc = refresh(qs);
    agg_qfilter_t f[AGG_QMAX_FILTERS + 1];
    size_t nf = 0;
    char fsql[AGG_QMAX_FILTERS * 100 + 100], sql[sizeof fsql + 512];
    if (label_key && label_value)
        f[nf++] = (agg_qfilter_t){label_key, label_value};
    for (size_t i = 0; i < n_filters && nf <= AGG_QMAX_FILTERS; i++)
        f[nf++] = filters[i];
    if (n_filters > AGG_QMAX_FILTERS ||
        agg_dims_filter_sql(fsql, sizeof fsql, "t.labels", f, nf, QFILTER_PARAM) < 0)
        return CM_EINVAL;
    /* with a label or dimension: the per-stack rows (each sample is in exactly one profile row,
     * fine or downsampled) of the label sets holding them, summed per bucket */
    snprintf(sql, sizeof sql,
             nf ? "SELECT b.s, t.bucket, t.width, SUM(t.weight), SUM(t.count) FROM profile t "
                  "LEFT JOIN strings b ON b.id=t.version WHERE t.service=?1 AND t.type=?2 AND "
                  "t.bucket>=?3 AND t.bucket<?4%s GROUP BY t.version, t.width, t.bucket"
                : "SELECT b.s, t.bucket, t.width, t.weight, t.count FROM totals t LEFT JOIN "
                  "strings b ON b.id=t.version WHERE t.service=?1 AND t.type=?2 AND "
                  "t.bucket>=?3 AND t.bucket<?4%s",
             fsql);
    for (size_t i = 0; !rc && i < qs->n; i++) {
        sqlite3_stmt *st;
        if ((rc = prep(&qs->dbs[i], sql, &st)))
            break;
        B64(st, 1, sid(service));
        B64(st, 2, type);
        B64(st, 3, from_s);
        B64(st, 4, to_s);
        agg_dims_filter_bind(st, f, nf, QFILTER_PARAM);
        int s;
        while ((s = sqlite3_step(st)) == SQLITE_ROW) {
            const char *v = (const char *)sqlite3_column_text(st, 0);
            if (out->n == cap) {
                size_t nc = cap ? cap * 2 : 256;
                agg_qpoint_t *np = realloc(out->points, nc * sizeof *np);
                if (!np) {
                    rc = CM_ENOMEM;
                    break;
                }
                out->points = np;
                cap = nc;
            }
            agg_qpoint_t *pt = &out->points[out->n];
            if (!(pt->version = series_string(out, v ? v : ""))) {
                rc = CM_ENOMEM;
                break;
            }
            pt->bucket = sqlite3_column_int64(st, 1);
            pt->width = sqlite3_column_int64(st, 2);
            pt->weight = (uint64_t)sqlite3_column_int64(st, 3);
            pt->count = (uint64_t)sqlite3_column_int64(st, 4);
            out->n++;
        }
        int r2 = done(st, s);
        if (!rc)
            rc = r2;
    }
    if (rc) {
        agg_qseries_free(out);
        return rc;
    }
    if (out->n)
        qsort(out->points, out->n, sizeof *out->points, cmp_point);
    return 0;
}

/* ---- spans ---- */

int agg_qstore_spans(agg_qstore_t *qs, const char *service, int64_t from_ns, int64_t to_ns,
                     cm_event_type_t type, size_t limit, agg_span_cost_t **out, size_t *n) {
    static const char *const col[] = {"rows", "cpu", "wall", "alloc", "inuse", "lock", "io"};
    agg_span_cost_t *v = NULL;
    size_t nv = 0, cap = 0;
    int rc = refresh(qs);
    for (size_t i = 0; !rc && i < qs->n; i++) {
        char sql[512];
        snprintf(sql, sizeof sql,
                 "SELECT trace, span, first_ns, last_ns, cpu, wall, alloc, inuse, lock, io, rows "
                 "FROM spans WHERE service=?1 AND last_ns>=?2 AND first_ns<?3 ORDER BY %s DESC "
                 "LIMIT ?4",
                 col[(unsigned)type < CM_EV_COUNT ? type : 0]);
        sqlite3_stmt *st;
        if ((rc = prep(&qs->dbs[i], sql, &st)))
            break;
        B64(st, 1, sid(service));
        B64(st, 2, from_ns);
        B64(st, 3, to_ns);
        B64(st, 4, limit ? (int64_t)limit : -1);
        int s;
        while ((s = sqlite3_step(st)) == SQLITE_ROW) {
            if (nv == cap) {
                size_t nc = cap ? cap * 2 : 64;
                agg_span_cost_t *nn = realloc(v, nc * sizeof *nn);
                if (!nn) {
                    rc = CM_ENOMEM;
                    break;
                }
                v = nn;
                cap = nc;
            }
            agg_span_cost_t *c = &v[nv++];
            memset(c, 0, sizeof *c);
            if (sqlite3_column_bytes(st, 0) == 16)
                memcpy(c->trace_id, sqlite3_column_blob(st, 0), 16);
            if (sqlite3_column_bytes(st, 1) == 8)
                memcpy(c->span_id, sqlite3_column_blob(st, 1), 8);
            c->start_ns = (uint64_t)sqlite3_column_int64(st, 2);
            c->end_ns = (uint64_t)sqlite3_column_int64(st, 3);
            for (int t = 1; t <= CM_EV_MAX; t++)
                c->value[t] = (uint64_t)sqlite3_column_int64(st, 3 + t);
            c->count[0] = (uint64_t)sqlite3_column_int64(st, 10) * CM_COUNT_ONE;
        }
        int r2 = done(st, s);
        if (!rc)
            rc = r2;
    }
    if (rc) {
        free(v);
        return rc;
    }
    size_t k = nv ? agg_span_rank(v, nv, type, limit) : 0;
    *out = v;
    *n = k;
    return 0;
}

int agg_qstore_span_profile(agg_qstore_t *qs, const uint8_t *trace, const uint8_t *span,
                            cm_event_type_t type, agg_profile_t **out, int *found) {
    *found = 0;
    if (!trace && !span)
        return CM_EINVAL;
    int rc = refresh(qs);
    if (rc)
        return rc;
    agg_profile_t *p = agg_profile_new(type);
    if (!p)
        return CM_ENOMEM;
    int64_t rep = agg_profile_replicate(p, "span", 0);
    if (rep < 0) {
        agg_profile_free(p);
        return (int)rep;
    }
    for (size_t i = 0; !rc && i < qs->n; i++) {
        qdb_t *d = &qs->dbs[i];
        sqlite3_stmt *ids = NULL, *st = NULL;
        const char *q = trace && span ? "SELECT trace, span FROM spans WHERE trace=?1 AND span=?2"
                        : trace       ? "SELECT trace, span FROM spans WHERE trace=?1"
                                      : "SELECT trace, span FROM spans WHERE span=?2";
        if ((rc = prep(d, q, &ids)))
            break;
        if ((rc = prep(d,
                       "SELECT stack, SUM(weight), SUM(count) FROM span_stacks WHERE trace=?1 AND "
                       "span=?2 AND type=?3 GROUP BY stack",
                       &st))) {
            sqlite3_finalize(ids);
            break;
        }
        if (trace)
            sqlite3_bind_blob(ids, 1, trace, 16, SQLITE_STATIC);
        if (span)
            sqlite3_bind_blob(ids, 2, span, 8, SQLITE_STATIC);
        int s;
        while (!rc && (s = sqlite3_step(ids)) == SQLITE_ROW) {
            if (sqlite3_column_bytes(ids, 0) != 16 || sqlite3_column_bytes(ids, 1) != 8)
                continue;
            *found = 1;
            uint8_t tr[16], sp[8];
            memcpy(tr, sqlite3_column_blob(ids, 0), 16);
            memcpy(sp, sqlite3_column_blob(ids, 1), 8);
            int64_t ctx = agg_profile_context(p, tr, sp);
            if (ctx < 0) {
                rc = (int)ctx;
                break;
            }
            sqlite3_reset(st);
            sqlite3_bind_blob(st, 1, tr, 16, SQLITE_TRANSIENT);
            sqlite3_bind_blob(st, 2, sp, 8, SQLITE_TRANSIENT);
            B64(st, 3, type);
            agg_hmap_t stacks;
            agg_hmap_init(&stacks, sizeof(uint64_t), sizeof(stackmap_t));
            rawrow_t *rows = NULL;
            size_t nr = 0, cap = 0;
            while (sqlite3_step(st) == SQLITE_ROW) {
                if (nr == cap) {
                    size_t nc = cap ? cap * 2 : 64;
                    rawrow_t *nn = realloc(rows, nc * sizeof *nn);
                    if (!nn) {
                        rc = CM_ENOMEM;
                        break;
                    }
                    rows = nn;
                    cap = nc;
                }
                rows[nr].stack = (uint64_t)sqlite3_column_int64(st, 0);
                rows[nr].weight = (uint64_t)sqlite3_column_int64(st, 1);
                rows[nr].count = (uint64_t)sqlite3_column_int64(st, 2);
                if (!agg_hmap_upsert(&stacks, &rows[nr].stack, NULL))
                    rc = CM_ENOMEM;
                nr++;
            }
            if (!rc && nr)
                rc = resolve_stacks(d, p, &stacks, 0);
            for (size_t k = 0; !rc && k < nr; k++) {
                stackmap_t *m = agg_hmap_find(&stacks, &rows[k].stack);
                if (m && m->resolved)
                    rc = agg_profile_add(p, m->stack, rows[k].weight, rows[k].count,
                                         (uint32_t)rep, (uint32_t)ctx);
            }
            free(rows);
            agg_hmap_free(&stacks);
        }
        sqlite3_finalize(st);
        sqlite3_finalize(ids);
    }
    if (rc) {
        agg_profile_free(p);
        return rc;
    }
    agg_profile_seal(p);
    *out = p;
    return 0;
}

/* ---- split by a label or dimension (dims.h) ---- */

void agg_qgroups_free(agg_qgroup_t *g, size_t n) {
    for (size_t i = 0; g && i < n; i++)
        free(g[i].value);
    free(g);
}

static int cmp_group(const void *a, const void *b) {
    const agg_qgroup_t *x = a, *y = b;
    if (x->weight != y->weight)
        return x->weight > y->weight ? -1 : 1;
    if (!x->value || !y->value)
        return !x->value - !y->value;
    return strcmp(x->value, y->value);
}

/* The fine and downsampled rows of `profile` hold every sample exactly once (the tiers are
 * derived copies), so the split sums them, joined to the label of `key` (none: NULL). */
int agg_qstore_groups(agg_qstore_t *qs, const agg_qspec_t *q, const char *key,
                      agg_qgroup_t **out, size_t *n_out) {
    int rc = refresh(qs);
    if (rc)
        return rc;
    agg_qgroup_t *g = NULL;
    size_t n = 0, cap = 0;
    agg_hmap_t idx; /* value string id -> index + 1 into g */
    agg_hmap_init(&idx, sizeof(uint64_t), 2 * sizeof(uint64_t));
    for (size_t i = 0; i < qs->n && !rc; i++) {
        qdb_t *d = &qs->dbs[i];
        qparts_t qp;
        int empty, s;
        if ((rc = query_parts(d, q, &qp, &empty)) || empty)
            continue;
        char sql[8192];
        snprintf(sql, sizeof sql,
                 "SELECT l.value, v.s, SUM(weight), SUM(count), SUM(rows) FROM profile "
                 "LEFT JOIN labels l ON l.labelset=profile.labels AND l.key=?8 LEFT JOIN "
                 "strings v ON v.id=l.value WHERE service=?1 AND type=?2%s%s AND bucket>=?3 "
                 "AND bucket<?4%s GROUP BY l.value",
                 qp.vin, qp.win, qp.lab);
        sqlite3_stmt *st = NULL;
        if ((rc = prep(d, sql, &st)))
            break;
        bind_parts(st, q, &qp);
        B64(st, 3, q->from_s);
        B64(st, 4, q->to_s);
        B64(st, 8, sid(key));
        while ((s = sqlite3_step(st)) == SQLITE_ROW) {
            uint64_t vid = (uint64_t)sqlite3_column_int64(st, 0);
            int fresh;
            uint64_t *e = agg_hmap_upsert(&idx, &vid, &fresh);
            if (!e) {
                rc = CM_ENOMEM;
                break;
            }
            if (fresh) {
                if (n == cap) {
                    size_t nc = cap ? 2 * cap : 64;
                    agg_qgroup_t *ng = realloc(g, nc * sizeof *ng);
                    if (!ng) {
                        rc = CM_ENOMEM;
                        break;
                    }
                    g = ng;
                    cap = nc;
                }
                const unsigned char *v = sqlite3_column_text(st, 1);
                g[n] = (agg_qgroup_t){vid ? strdup(v ? (const char *)v : "") : NULL, 0, 0, 0};
                if (vid && !g[n].value) {
                    rc = CM_ENOMEM;
                    break;
                }
                e[1] = ++n;
            }
            agg_qgroup_t *x = &g[e[1] - 1];
            x->weight += (uint64_t)sqlite3_column_int64(st, 2);
            x->count += (uint64_t)sqlite3_column_int64(st, 3);
            x->rows += (uint64_t)sqlite3_column_int64(st, 4);
        }
        int r2 = done(st, s);
        rc = rc ? rc : r2;
    }
    agg_hmap_free(&idx);
    if (rc) {
        agg_qgroups_free(g, n);
        return rc;
    }
    if (n)
        qsort(g, n, sizeof *g, cmp_group);
    *out = g;
    *n_out = n;
    return 0;
}

void agg_qrejects_free(agg_qreject_t *r, size_t n) {
    for (size_t i = 0; r && i < n; i++)
        free(r[i].reason);
    free(r);
}

static int cmp_reject(const void *a, const void *b) {
    return strcmp(((const agg_qreject_t *)a)->reason, ((const agg_qreject_t *)b)->reason);
}

int agg_qstore_rejects(agg_qstore_t *qs, agg_qreject_t **out, size_t *n) {
    agg_qreject_t *r = NULL;
    size_t nr = 0, cap = 0;
    int rc = refresh(qs);
    for (size_t i = 0; !rc && i < qs->n; i++) {
        sqlite3_stmt *st = NULL;
        if ((rc = prep(&qs->dbs[i], "SELECT reason, count FROM rejects", &st)))
            break;
        int s = SQLITE_DONE;
        while (!rc && (s = sqlite3_step(st)) == SQLITE_ROW) {
            const char *why = (const char *)sqlite3_column_text(st, 0);
            why = why ? why : "";
            agg_qreject_t *e = NULL;
            for (size_t k = 0; k < nr && !e; k++)
                if (!strcmp(r[k].reason, why))
                    e = &r[k];
            if (!e) {
                if (nr == cap) {
                    size_t nc = cap ? cap * 2 : 8;
                    agg_qreject_t *x = realloc(r, nc * sizeof *x);
                    if (!x) {
                        rc = CM_ENOMEM;
                        break;
                    }
                    r = x;
                    cap = nc;
                }
                e = &r[nr];
                if (!(e->reason = strdup(why))) {
                    rc = CM_ENOMEM;
                    break;
                }
                e->count = 0;
                nr++;
            }
            e->count += (uint64_t)sqlite3_column_int64(st, 1);
        }
        int r2 = done(st, rc ? SQLITE_DONE : s);
        if (!rc)
            rc = r2;
    }
    if (rc) {
        agg_qrejects_free(r, nr);
        return rc;
    }
    if (nr)
        qsort(r, nr, sizeof *r, cmp_reject);
    *out = r;
    *n = nr;
    return 0;
}
