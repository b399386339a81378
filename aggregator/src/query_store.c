/* Read-only access to the partition stores for the query API (see query_store.h): SQL over the
 * store schema of store_sqlite.c, results into the analysis library's models.
 * Threading: a handle is used by one thread at a time. */
#define _GNU_SOURCE
#include "query_store.h"

#include "hmap.h"
#include "intern.h"

#include "cm/error.h"
#include "cm/log.h"

#include <dirent.h>
#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *name, *module, *build_id; /* printable frame of one store location */
    uint64_t address;
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
                       "SELECT type, SUM(weight), SUM(count) FROM totals WHERE service=?1 AND "
                       "version=?2 GROUP BY type",
                       &tot)) ||
            (rc = prep(d, "SELECT SUM(duration_ns) FROM intervals WHERE service=?1 AND version=?2",
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
                }
            }
            sqlite3_reset(iv);
            B64(iv, 1, sqlite3_column_int64(st, 0));
            B64(iv, 2, sqlite3_column_int64(st, 1));
            if (sqlite3_step(iv) == SQLITE_ROW)
                e->process_seconds += (double)sqlite3_column_int64(iv, 0) / 1e9;
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

/* Reads the trie nodes (with all their ancestors) of the stacks in `want` into the cache. */
static int cache_fill(qdb_t *d, const uint64_t *want, size_t n) {
    int rc = 0, s;
    sqlite3_stmt *st = NULL;
    if (sqlite3_exec(d->db,
                     "CREATE TEMP TABLE IF NOT EXISTS want(id INTEGER PRIMARY KEY);"
                     "DELETE FROM temp.want;",
                     NULL, NULL, NULL) != SQLITE_OK) {
        CM_WARN("query: %s: temp table: %s", d->path, sqlite3_errmsg(d->db));
        return CM_EIO;
    }
    if ((rc = prep(d, "INSERT OR IGNORE INTO temp.want VALUES(?1)", &st)))
        return rc;
    sqlite3_exec(d->db, "BEGIN", NULL, NULL, NULL);
    for (size_t i = 0; i < n; i++) {
        sqlite3_reset(st);
        B64(st, 1, want[i]);
        sqlite3_step(st);
    }
    sqlite3_exec(d->db, "COMMIT", NULL, NULL, NULL);
    sqlite3_finalize(st);
    if ((rc = prep(d,
                   "WITH RECURSIVE up(id) AS (SELECT id FROM temp.want UNION SELECT s.parent "
                   "FROM stacks s JOIN up ON s.id=up.id WHERE s.parent<>0) "
                   "SELECT s.id, s.parent, s.location, fn.s, mf.s, m.build_id, l.address FROM up "
                   "JOIN stacks s ON s.id=up.id LEFT JOIN locations l ON l.id=s.location "
                   "LEFT JOIN functions f ON f.id=l.function LEFT JOIN strings fn ON fn.id=f.name "
                   "LEFT JOIN mappings m ON m.id=l.mapping LEFT JOIN strings mf ON "
                   "mf.id=m.filename",
                   &st)))
        return rc;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        uint64_t id = (uint64_t)sqlite3_column_int64(st, 0);
        uint64_t loc = (uint64_t)sqlite3_column_int64(st, 2);
        int fresh = 0;
        uint64_t *li = agg_hmap_upsert(&d->locidx, &loc, &fresh);
        if (!li) {
            rc = CM_ENOMEM;
            break;
        }
        if (fresh) {
            if (d->nlocs == d->cap_locs) {
                size_t nc = d->cap_locs ? d->cap_locs * 2 : 1024;
                cloc_t *nl = realloc(d->locs, nc * sizeof *nl);
                if (!nl) {
                    rc = CM_ENOMEM;
                    break;
                }
                d->locs = nl;
                d->cap_locs = nc;
            }
            char name[512], bid[129] = "";
            const char *module;
            uint64_t addr = (uint64_t)sqlite3_column_int64(st, 6);
            frame_name((const char *)sqlite3_column_text(st, 3),
                       (const char *)sqlite3_column_text(st, 4), addr, name, sizeof name, &module);
            int bl = sqlite3_column_bytes(st, 5);
            const uint8_t *bb = sqlite3_column_blob(st, 5);
            for (int k = 0; bb && k < bl && k < 64; k++)
                snprintf(bid + 2 * k, 3, "%02x", bb[k]);
            cloc_t *c = &d->locs[d->nlocs];
            c->name = strdup(name);
            c->module = strdup(module);
            c->build_id = strdup(bid);
            c->address = addr;
            if (!c->name || !c->module || !c->build_id) {
                free(c->name);
                free(c->module);
                free(c->build_id);
                rc = CM_ENOMEM;
                break;
            }
            li[1] = d->nlocs++;
        }
        uint32_t lidx = (uint32_t)li[1];
        cnode_t *nd = agg_hmap_upsert(&d->nodes, &id, NULL);
        if (!nd) {
            rc = CM_ENOMEM;
            break;
        }
        nd->parent = (uint64_t)sqlite3_column_int64(st, 1);
        nd->loc = lidx;
    }
    int r2 = done(st, s);
    return rc ? rc : r2;
}

/* Resolves every stack of `stacks` (keys: store stack ids) into profile stacks, through the
 * store's node cache (only stacks not seen before are read from the trie). */
static int resolve_stacks(qdb_t *d, agg_profile_t *p, agg_hmap_t *stacks) {
    int rc = 0;
    uint64_t *missing = NULL;
    uint32_t *locframe = NULL, *tmp = NULL;
    size_t nm = 0;
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
                const cloc_t *c = &d->locs[nd->loc];
                int64_t fr = agg_profile_frame(p, c->name, c->module, c->build_id, c->address);
                if (fr < 0) {
                    rc = (int)fr;
                    goto out;
                }
                *lf = (uint32_t)fr;
            }
            tmp[depth++] = *lf;
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

/* Interns one replicate per bucket of bks (ordered by version, width, bucket), merging buckets
 * with less than half their version's median work into the previous bucket of the version (the
 * next one for the first). Fills reps: bkey_t -> replicate id (a uint32_t after the key). */
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
        int64_t prev = -1; /* replicate id of the last full bucket */
        size_t pending = i; /* small buckets before the first full one */
        for (size_t k = i; k < j && !rc; k++) {
            int small = bks[k].work < 0.5 * median;
            int64_t id;
            if (small && prev >= 0) {
                id = agg_profile_replicate(p, p->replicates[prev].key, bks[k].work);
            } else if (small) {
                continue; /* assigned to the next full bucket below */
            } else {
                char key[96];
                snprintf(key, sizeof key, "%llx/%lld/%lld", (unsigned long long)bks[k].key.v,
                         (long long)bks[k].key.w, (long long)bks[k].key.b);
                id = agg_profile_replicate(p, key, bks[k].work);
                for (; pending < k && id >= 0; pending++) { /* leading small buckets */
                    uint32_t *e = agg_hmap_upsert(reps, &bks[pending].key, NULL);
                    if (!e) {
                        rc = CM_ENOMEM;
                        break;
                    }
                    e[sizeof(bkey_t) / sizeof *e] = (uint32_t)id;
                    id = agg_profile_replicate(p, key, bks[pending].work);
                }
                prev = id;
            }
            if (id < 0) {
                rc = (int)id;
                break;
            }
            uint32_t *e = agg_hmap_upsert(reps, &bks[k].key, NULL);
            if (!e) {
                rc = CM_ENOMEM;
                break;
            }
            e[sizeof(bkey_t) / sizeof *e] = (uint32_t)id;
            if (!small && pending <= k)
                pending = k + 1;
        }
        for (; pending < j && !rc && prev < 0; pending++) { /* every bucket small: own ids */
            char key[96];
            snprintf(key, sizeof key, "%llx/%lld/%lld", (unsigned long long)bks[pending].key.v,
                     (long long)bks[pending].key.w, (long long)bks[pending].key.b);
            int64_t id = agg_profile_replicate(p, key, bks[pending].work);
            uint32_t *e = id >= 0 ? agg_hmap_upsert(reps, &bks[pending].key, NULL) : NULL;
            if (!e) {
                rc = id < 0 ? (int)id : CM_ENOMEM;
                break;
            }
            e[sizeof(bkey_t) / sizeof *e] = (uint32_t)id;
        }
        i = j;
    }
    free(tmp);
    return rc;
}

static int profile_one(qdb_t *d, const agg_qspec_t *q, agg_profile_t *p) {
    char sql[4096];
    int rc = 0, s;
    size_t n = 0;
    sqlite3_stmt *st = NULL;
    rawrow_t *rows = NULL;
    size_t nrows = 0, cap = 0;
    agg_hmap_t stacks, reps;
    bucket_t *bks = NULL;
    size_t nbk = 0;
    if (q->n_versions > 200)
        return CM_EINVAL;
    agg_hmap_init(&stacks, sizeof(uint64_t), sizeof(stackmap_t));
    agg_hmap_init(&reps, sizeof(bkey_t), sizeof(bkey_t) + sizeof(uint64_t));
    char vin[2048] = "";
    size_t vn = 0;
    if (q->versions && q->n_versions) {
        vn += (size_t)snprintf(vin, sizeof vin, " AND version IN (");
        for (size_t i = 0; i < q->n_versions; i++)
            vn += (size_t)snprintf(vin + vn, sizeof vin - vn, "%s?%zu", i ? "," : "", 10 + i);
        snprintf(vin + vn, sizeof vin - vn, ")");
    }
    const char *lab = q->label_key && q->label_value
                          ? " AND labels IN (SELECT labelset FROM labels WHERE key=?5 AND value=?6)"
                          : "";
    /* replicates first: the work of each (version, width, bucket). A bucket with less than
     * half the median work of its version (where processes start or stop mid-bucket) is merged
     * into its neighbour: its few samples would make a noisy rate and leave functions absent
     * from it, which the diff's common-factor estimate needs present in every replicate. */
    if (q->replicates) {
        snprintf(sql, sizeof sql,
                 "SELECT version, width, bucket, SUM(duration_ns) FROM intervals WHERE "
                 "service=?1 AND bucket>=?3 AND bucket<?4%s GROUP BY version, width, bucket "
                 "ORDER BY version, width, bucket",
                 vin);
        if ((rc = prep(d, sql, &st)))
            goto out;
        B64(st, 1, sid(q->service));
        B64(st, 3, q->from_s);
        B64(st, 4, q->to_s);
        for (size_t i = 0; q->versions && i < q->n_versions; i++)
            B64(st, (int)(10 + i), sid(q->versions[i]));
        size_t ncap = 0;
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
            bks[nbk].key.v = sqlite3_column_int64(st, 0);
            bks[nbk].key.w = sqlite3_column_int64(st, 1);
            bks[nbk].key.b = sqlite3_column_int64(st, 2);
            bks[nbk].work = (double)sqlite3_column_int64(st, 3) / 1e9;
            nbk++;
        }
        int r2 = done(st, s);
        st = NULL;
        if (rc || (rc = r2) || (rc = assign_replicates(p, bks, nbk, &reps)))
            goto out;
        n = (size_t)snprintf(sql, sizeof sql,
                             "SELECT stack, weight, count, version, width, bucket FROM "
                             "profile WHERE service=?1 AND type=?2 AND bucket>=?3 AND "
                             "bucket<?4%s%s",
                             vin, lab);
    } else {
        n = (size_t)snprintf(sql, sizeof sql,
                             "SELECT stack, weight, count FROM profile WHERE service=?1 "
                             "AND type=?2 AND bucket>=?3 AND bucket<?4%s%s",
                             vin, lab);
    }
    (void)n;
    if ((rc = prep(d, sql, &st)))
        goto out;
    B64(st, 1, sid(q->service));
    B64(st, 2, q->type);
    B64(st, 3, q->from_s);
    B64(st, 4, q->to_s);
    if (*lab) {
        B64(st, 5, sid(q->label_key));
        B64(st, 6, sid(q->label_value));
    }
    for (size_t i = 0; q->versions && i < q->n_versions; i++)
        B64(st, (int)(10 + i), sid(q->versions[i]));
    uint32_t rep = 0;
    if (!q->replicates) {
        int64_t r = agg_profile_replicate(p, "all", 0);
        if (r < 0) {
            rc = (int)r;
            goto out;
        }
        rep = (uint32_t)r;
    }
    /* Rows stream in primary-key order without GROUP BY (SQLite would sort them): the merged
     * view sums per stack in a hash map; the replicate view keeps every row (rows of one
     * (bucket, stack) under several label sets simply add up in the profile). */
    int64_t last_v = -1, last_w = -1, last_b = -1;
    while ((s = sqlite3_step(st)) == SQLITE_ROW) {
        if (!q->replicates) {
            uint64_t sk = (uint64_t)sqlite3_column_int64(st, 0);
            stackmap_t *m = agg_hmap_upsert(&stacks, &sk, NULL);
            if (!m) {
                rc = CM_ENOMEM;
                break;
            }
            m->weight += (uint64_t)sqlite3_column_int64(st, 1);
            m->count += (uint64_t)sqlite3_column_int64(st, 2);
            nrows++;
            continue;
        }
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
        if (q->replicates) {
            int64_t v = sqlite3_column_int64(st, 3), w = sqlite3_column_int64(st, 4),
                    b = sqlite3_column_int64(st, 5);
            if (v != last_v || w != last_w || b != last_b) {
                bkey_t k = {v, w, b};
                uint32_t *known = agg_hmap_find(&reps, &k);
                if (known) {
                    rep = known[sizeof k / sizeof *known];
                } else {
                    char key[96];
                    snprintf(key, sizeof key, "%llx/%lld/%lld", (unsigned long long)v,
                             (long long)w, (long long)b);
                    int64_t id = agg_profile_replicate(p, key, 0);
                    if (id < 0) {
                        rc = (int)id;
                        break;
                    }
                    rep = (uint32_t)id;
                }
                last_v = v;
                last_w = w;
                last_b = b;
            }
        }
        r->replicate = rep;
        int fresh = 0;
        stackmap_t *m = agg_hmap_upsert(&stacks, &r->stack, &fresh);
        if (!m) {
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
    if (!nrows)
        goto out;
    if ((rc = resolve_stacks(d, p, &stacks)))
        goto out;
    if (!q->replicates) {
        for (size_t i = 0; i < stacks.n; i++) {
            stackmap_t *m = agg_hmap_entry(&stacks, i);
            if (m->resolved &&
                (rc = agg_profile_add(p, m->stack, m->weight, m->count, rep, 0)))
                goto out;
        }
        goto out;
    }
    for (size_t i = 0; i < nrows; i++) {
        stackmap_t *m = agg_hmap_find(&stacks, &rows[i].stack);
        if (!m || !m->resolved)
            continue;
        if ((rc = agg_profile_add(p, m->stack, rows[i].weight, rows[i].count, rows[i].replicate,
                                  0)))
            goto out;
    }
out:
    sqlite3_finalize(st);
    free(rows);
    free(bks);
    agg_hmap_free(&stacks);
    agg_hmap_free(&reps);
    return rc;
}

int agg_qstore_profile(agg_qstore_t *qs, const agg_qspec_t *q, agg_profile_t **out) {
    int rc = refresh(qs);
    if (rc)
        return rc;
    agg_profile_t *p = agg_profile_new(q->type);
    if (!p)
        return CM_ENOMEM;
    for (size_t i = 0; i < qs->n && !rc; i++)
        rc = profile_one(&qs->dbs[i], q, p);
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
    memset(out, 0, sizeof *out);
    size_t cap = 0;
    int rc = refresh(qs);
    for (size_t i = 0; !rc && i < qs->n; i++) {
        sqlite3_stmt *st;
        if ((rc = prep(&qs->dbs[i],
                       "SELECT b.s, t.bucket, t.width, t.weight, t.count FROM totals t LEFT JOIN "
                       "strings b ON b.id=t.version WHERE t.service=?1 AND t.type=?2 AND "
                       "t.bucket>=?3 AND t.bucket<?4",
                       &st)))
            break;
        B64(st, 1, sid(service));
        B64(st, 2, type);
        B64(st, 3, from_s);
        B64(st, 4, to_s);
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
                rc = resolve_stacks(d, p, &stacks);
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
