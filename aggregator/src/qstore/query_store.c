/* Read-only access to the partition stores for the query API (see query_store.h), part 1:
 * opening the stores of a directory, the statement helpers, and the per-store caches of stack
 * trie nodes and locations (ids are content hashes, so a cached node never changes meaning)
 * that resolve store stacks into profile stacks, symbolizing unnamed frames on the way.
 * Threading: a handle is used by one thread at a time. */
#define _GNU_SOURCE
#include "qstore_int.h"

#include "store_pg.h"
#include "symstore.h"

#include "cm/error.h"
#include "cm/log.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>


static void cache_init(qdb_t *d) {
    agg_hmap_init(&d->nodes, sizeof(uint64_t), sizeof(cnode_t));
    agg_hmap_init(&d->locidx, sizeof(uint64_t), sizeof(uint64_t) + sizeof(uint64_t));
    d->locs = NULL;
    d->nlocs = d->cap_locs = 0;
    agg_hmap_init(&d->paths, sizeof(uint64_t), sizeof(uint64_t) + 2 * sizeof(uint32_t));
    d->pathv = NULL;
    d->npathv = d->cap_pathv = 0;
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
    agg_hmap_free(&d->paths);
    free(d->pathv);
}



/* The intervals' units-of-work column, or "0" in a store no writer has opened since the column
 * was added (the writer adds it when it opens the store). */
const char *agg_qs_work_units_col(qdb_t *d) {
    if (!d->has_work_units) {
        agg_qxst_t *st = NULL;
        if (agg_qx_prepare(d->db, "SELECT work_units FROM intervals LIMIT 0", &st) == 0 &&
            agg_qx_step(st) >= 0)
            d->has_work_units = 1;
        agg_qx_finalize(st);
    }
    return d->has_work_units ? "work_units" : "0";
}

/* Adds the store at target (a file, or a PostgreSQL URL shown as name) to qs, unless it has
 * no schema yet (a store being created: skipped until it has). */
static int add_store(agg_qstore_t *qs, const char *target, const char *name) {
    char err[512];
    agg_qx_t *db = NULL;
    if (agg_qx_open(target, &db, err, sizeof err)) {
        CM_WARN("query: %s", err);
        return 0;
    }
    agg_qxst_t *st = NULL;
    int ok = agg_qx_prepare(db, "SELECT 1 FROM profile LIMIT 0", &st) == 0 && agg_qx_step(st) >= 0;
    agg_qx_finalize(st);
    if (!ok) {
        agg_qx_close(db);
        return 0;
    }
    if (qs->n == qs->cap && agg_vec_grow((void **)&qs->dbs, &qs->cap, sizeof *qs->dbs)) {
        agg_qx_close(db);
        return CM_ENOMEM;
    }
    qdb_t *d = &qs->dbs[qs->n];
    if (!(d->path = strdup(name))) {
        agg_qx_close(db);
        return CM_ENOMEM;
    }
    d->db = db;
    d->has_work_units = 0;
    d->trie_too_big = 0;
    cache_init(d);
    qs->n++;
    return 0;
}

/* Opens the store files not opened yet (partitions appear as the group grows). */
int agg_qs_refresh(agg_qstore_t *qs) {
    if (agg_store_is_pg(qs->dir)) { /* one database holds every partition */
        char safe[512];
        agg_store_pg_url_safe(qs->dir, safe, sizeof safe);
        return qs->n ? 0 : add_store(qs, qs->dir, safe);
    }
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
        if ((rc = add_store(qs, path, path)))
            break;
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
    int rc = agg_qs_refresh(qs);
    if (rc) {
        if (agg_store_is_pg(dir))
            snprintf(err, err_size, "cannot read the PostgreSQL store: %s", cm_strerror(rc));
        else
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
        agg_qx_close(qs->dbs[i].db);
        free(qs->dbs[i].path);
        cache_free(&qs->dbs[i]);
    }
    free(qs->dbs);
    free(qs->dir);
    free(qs);
}

int agg_qs_prep(qdb_t *d, const char *sql, agg_qxst_t **st) {
    int rc = agg_qx_prepare(d->db, sql, st);
    if (rc)
        CM_WARN("query: %s: cannot prepare '%.60s': %s", d->path, sql, agg_qx_errmsg(d->db));
    return rc;
}

int agg_qs_done(agg_qxst_t *st, int rc) {
    agg_qx_finalize(st);
    return rc < 0 ? rc : 0;
}

int agg_qs_end(agg_qxst_t *st, int step, int rc) {
    int r2 = agg_qs_done(st, step);
    return rc ? rc : r2;
}

/* ---- stacks: resolve store stack ids (trie nodes) into profile stacks ---- */


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

/* Asks the symbol store about c (its build id and address); an answer gives c its source line
 * and inlined frames, and its name too when `name`. Returns 1 when answered, else 0. */
static int cloc_ask(cloc_t *c, int name) {
    uint8_t bid[64];
    size_t bl = cloc_bid(c, bid);
    if (!bl)
        return 0;
    agg_sym_t sym;
    int got = agg_symstore_get(bid, bl, c->address, 1, &sym) == 1;
    if (got) {
        if (name) {
            free(c->name);
            c->name = sym.name;
            sym.name = NULL;
        }
        if (sym.file) {
            free(c->file);
            c->file = sym.file;
            c->line = sym.line;
            sym.file = NULL;
        }
        c->chain = sym.chain;
        sym.chain = NULL;
    }
    agg_sym_free(&sym);
    return got;
}

int64_t agg_qs_cloc_frame(agg_profile_t *p, const cloc_t *c) {
    int64_t fr = agg_profile_frame(p, c->name, c->module, c->build_id, c->address);
    if (fr >= 0)
        p->frames[fr].kind = c->kind;
    return fr;
}

void agg_qs_cloc_symbolize(cloc_t *c) {
    if (!c->unnamed || !c->build_id[0])
        return;
    uint64_t now = mono_ns();
    if (now < c->retry_ns)
        return;
    c->retry_ns = now + 10000000000ull;
    if (cloc_ask(c, 1))
        c->unnamed = 0;
}

/* The cache index of store location loc, adding it from the current row of st (columns c..c+6:
 * function name, mapping file, build id, address, line, function's source file, function's
 * system name) when it is new. Returns it or CM_ENOMEM. */
static int64_t cache_loc(qdb_t *d, agg_qxst_t *st, uint64_t loc, int c) {
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
    uint64_t addr = (uint64_t)agg_qx_int64(st, c + 3);
    frame_name(agg_qx_text(st, c), agg_qx_text(st, c + 1),
               addr, name, sizeof name, &module);
    size_t bl = 0;
    const uint8_t *bb = agg_qx_blob(st, c + 2, &bl);
    for (size_t k = 0; bb && k < bl && k < 64; k++)
        snprintf(bid + 2 * k, 3, "%02x", bb[k]);
    cloc_t *cl = &d->locs[d->nlocs];
    cl->name = strdup(name);
    cl->module = strdup(module);
    cl->build_id = strdup(bid);
    cl->address = addr;
    const char *sf = agg_qx_text(st, c + 5);
    cl->file = sf && *sf ? strdup(sf) : NULL;
    cl->line = (uint32_t)agg_qx_int64(st, c + 4);
    cl->chain = NULL;
    const char *fn = agg_qx_text(st, c);
    cl->unnamed = !fn || !*fn;
    cl->kind = agg_frame_kind(agg_qx_text(st, c + 6));
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

/* Fills the temporary table <table>(id) with the n ids of want (a per-connection scratch
 * table), then prepares sql (which reads it) into *st. */
static int prep_with_ids(qdb_t *d, const char *table, const uint64_t *want, size_t n,
                         const char *sql, agg_qxst_t **st) {
    int rc = agg_qx_id_table(d->db, table, want, n);
    if (rc) {
        CM_WARN("query: %s: temp table: %s", d->path, agg_qx_errmsg(d->db));
        return rc;
    }
    return agg_qs_prep(d, sql, st);
}

/* The locations of the ids in wantloc, named. */
static const char LOCS_SQL[] =
    "SELECT l.id, fn.s, mf.s, m.build_id, l.address, l.line, ff.s, fs.s FROM wantloc w JOIN "
    "locations l ON l.id=w.id LEFT JOIN functions f ON f.id=l.function LEFT JOIN strings fn ON "
    "fn.id=f.name LEFT JOIN strings ff ON ff.id=f.filename LEFT JOIN strings fs ON "
    "fs.id=f.system_name LEFT JOIN mappings m ON m.id=l.mapping LEFT JOIN strings mf ON "
    "mf.id=m.filename";

/* The trie nodes of the ids in want with all their ancestors. */
static const char UP_SQL[] =
    "WITH RECURSIVE up(id) AS (SELECT id FROM want UNION SELECT s.parent FROM stacks s JOIN up "
    "ON s.id=up.id WHERE s.parent<>0) SELECT s.id, s.parent, s.location FROM up JOIN stacks s "
    "ON s.id=up.id";

int agg_qs_cache_fill_locs(qdb_t *d, const uint64_t *want, size_t n) {
    agg_qxst_t *st = NULL;
    int rc, s;
    if ((rc = prep_with_ids(d, "wantloc", want, n, LOCS_SQL, &st)))
        return rc;
    while ((s = agg_qx_step(st)) == 1) {
        int64_t li = cache_loc(d, st, (uint64_t)agg_qx_int64(st, 0), 1);
        if (li < 0) {
            rc = (int)li;
            break;
        }
    }
    return agg_qs_end(st, s, rc);
}

/* Reads the trie nodes (with all their ancestors) of the stacks in `want` into the cache. */
static int cache_fill(qdb_t *d, const uint64_t *want, size_t n) {
    int rc = 0, s;
    agg_qxst_t *st = NULL;
    uint64_t *rows = NULL, *locs = NULL; /* (id, parent, location) triples; missing locations */
    size_t nr = 0, cap = 0, nl = 0;
    /* Many stacks missing (a cold cache): one sequential scan of the whole trie is far cheaper
     * than walking up from each of them (a store's first query: 130,000 nodes in ~30 ms instead
     * of ~400 ms), unless the trie is larger than the cache may hold. */
    int full = n >= 256 && !d->trie_too_big;
    if (full) {
        if ((rc = agg_qs_prep(d, "SELECT id, parent, location FROM stacks LIMIT ?1", &st)))
            return rc;
        B64(st, 1, CACHE_MAX_NODES / 2 + 1);
    } else {
        /* the nodes first, then their distinct locations: joining the location tables to
         * every node would repeat the same lookups for each node of a popular location */
        if ((rc = prep_with_ids(d, "want", want, n, UP_SQL, &st)))
            return rc;
    }
    while ((s = agg_qx_step(st)) == 1) {
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
            rows[3 * nr + (size_t)c] = (uint64_t)agg_qx_int64(st, c);
        nr++;
    }
    {
        if ((rc = agg_qs_end(st, s, rc)))
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
    if (nl && (rc = agg_qs_cache_fill_locs(d, locs, nl)))
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
    int64_t fr = agg_profile_frame_src(p, name, c->module, c->build_id, c->address,
                                       c->unnamed ? NULL : fn, file, c->unnamed ? 0 : line, flags);
    if (fr >= 0)
        p->frames[fr].kind = c->kind;
    return fr;
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
        cloc_ask(c, 0);
    }
    if (!lines) {
        fr = agg_qs_cloc_frame(p, c);
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

typedef struct {
    uint64_t id;
    size_t idx;
} idpos_t;

static int cmp_idpos(const void *a, const void *b) {
    const idpos_t *x = a, *y = b;
    return x->id < y->id ? -1 : x->id > y->id;
}

size_t *agg_qs_stack_order(const agg_hmap_t *stacks) {
    idpos_t *v = malloc((stacks->n ? stacks->n : 1) * sizeof *v);
    size_t *out = malloc((stacks->n ? stacks->n : 1) * sizeof *out);
    if (!v || !out) {
        free(v);
        free(out);
        return NULL;
    }
    for (size_t i = 0; i < stacks->n; i++)
        v[i] = (idpos_t){((const stackmap_t *)agg_hmap_entry(stacks, i))->id, i};
    qsort(v, stacks->n, sizeof *v, cmp_idpos);
    for (size_t i = 0; i < stacks->n; i++)
        out[i] = v[i].idx;
    free(v);
    return out;
}

/* Resolves every stack of `stacks` (keys: store stack ids) into profile stacks, through the
 * store's node cache (only stacks not seen before are read from the trie). With lines, each
 * frame carries its source line and inlined functions become frames of their own. */
/* The path of store stack id (its nodes' location indices, leaf first, at most
 * CM_MAX_STACK_DEPTH) from d's resolved stacks, walking the node cache the first time: an entry
 * of d->paths whose value is (offset into d->pathv, length). NULL when a node of it is missing
 * (not remembered: it may be cached later) or on an error (*rc set). The pointer is valid until
 * the next call. */
static uint32_t *stack_path(qdb_t *d, uint64_t id, int *rc) {
    uint32_t *e = agg_hmap_find(&d->paths, &id);
    if (e)
        return e + 2;
    size_t start = d->npathv;
    for (uint64_t n = id; n && d->npathv - start < CM_MAX_STACK_DEPTH;) {
        cnode_t *nd = agg_hmap_find(&d->nodes, &n);
        if (!nd) {
            d->npathv = start;
            return NULL;
        }
        if (d->npathv == d->cap_pathv) {
            size_t nc = d->cap_pathv ? 2 * d->cap_pathv : 65536;
            uint32_t *x = realloc(d->pathv, nc * sizeof *x);
            if (!x) {
                d->npathv = start;
                *rc = CM_ENOMEM;
                return NULL;
            }
            d->pathv = x;
            d->cap_pathv = nc;
        }
        d->pathv[d->npathv++] = nd->loc;
        n = nd->parent;
    }
    if (!(e = agg_hmap_upsert(&d->paths, &id, NULL))) {
        d->npathv = start;
        *rc = CM_ENOMEM;
        return NULL;
    }
    e[2] = (uint32_t)start;
    e[3] = (uint32_t)(d->npathv - start);
    return e + 2;
}

int agg_qs_resolve_stacks(qdb_t *d, agg_profile_t *p, agg_hmap_t *stacks, int lines) {
    int rc = 0;
    size_t *order = NULL;
    uint64_t *missing = NULL;
    uint32_t *locframe = NULL, *tmp = NULL, *lfv = NULL;
    size_t nm = 0, nlfv = 0, caplfv = 0;
    if (d->nodes.n > CACHE_MAX_NODES) { /* bounded memory: start over */
        cache_free(d);
        cache_init(d);
    }
    /* a cached path implies its nodes are cached (cache_free drops both) */
    if (d->paths.n > CACHE_MAX_NODES || d->npathv > CACHE_MAX_PATHV) { /* bounded */
        agg_hmap_free(&d->paths);
        d->npathv = 0;
    }
    missing = malloc((stacks->n ? stacks->n : 1) * sizeof *missing);
    if (!missing)
        return CM_ENOMEM;
    for (size_t i = 0; i < stacks->n; i++) {
        stackmap_t *m = agg_hmap_entry(stacks, i);
        if (m->id && !agg_hmap_find(&d->paths, &m->id) && !agg_hmap_find(&d->nodes, &m->id))
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
    if (!(order = agg_qs_stack_order(stacks))) {
        rc = CM_ENOMEM;
        goto out;
    }
    for (size_t oi = 0; oi < stacks->n; oi++) {
        stackmap_t *m = agg_hmap_entry(stacks, order[oi]);
        uint32_t depth = 0;
        uint32_t *path = stack_path(d, m->id, &rc);
        if (rc)
            goto out;
        if (!path)
            continue; /* a node missing from the store (expired): skip the stack */
        for (uint32_t pi = 0; pi < path[1] && depth < CM_MAX_STACK_DEPTH; pi++) {
            uint32_t loc = d->pathv[path[0] + pi];
            uint32_t *lf = &locframe[loc];
            if (*lf == AGG_NONE) {
                /* a location's frames (several with lines and inlines): lfv[*lf] is their
                 * count, the frames follow root-first */
                cloc_t *c = &d->locs[loc];
                agg_qs_cloc_symbolize(c);
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
        }
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
    free(order);
    free(missing);
    free(locframe);
    free(tmp);
    free(lfv);
    return rc;
}

void agg_qs_col_ids(agg_qxst_t *st, int c, uint8_t *trace, uint8_t *span) {
    size_t tl = 0, sl = 0;
    const void *tb = agg_qx_blob(st, c, &tl), *sb = agg_qx_blob(st, c + 1, &sl);
    if (tb && tl == 16)
        memcpy(trace, tb, 16);
    if (sb && sl == 8)
        memcpy(span, sb, 8);
}

int agg_qs_profile_begin(agg_qstore_t *qs, cm_event_type_t type, const char *rep_name,
                         agg_profile_t **p, int64_t *rep) {
    int rc = agg_qs_refresh(qs);
    if (rc)
        return rc;
    if (!(*p = agg_profile_new(type)))
        return CM_ENOMEM;
    *rep = agg_profile_replicate(*p, rep_name, 0);
    if (*rep < 0) {
        agg_profile_free(*p);
        *p = NULL;
        return (int)*rep;
    }
    return 0;
}

int agg_qs_profile_end(agg_profile_t *p, int rc, agg_profile_t **out) {
    if (rc) {
        agg_profile_free(p);
        return rc;
    }
    agg_profile_seal(p);
    *out = p;
    return 0;
}

/* agg_qs_add_stack_rows, and agg_qs_add_bucket_rows when reps is given (column 0: the bucket,
 * the replicate reps[bucket]). */
static int add_rows(qdb_t *d, agg_profile_t *p, agg_qxst_t *st, uint32_t rep, uint32_t ctx,
                    const uint32_t *reps, size_t nreps, int lines) {
    agg_hmap_t stacks;
    agg_hmap_init(&stacks, sizeof(uint64_t), sizeof(stackmap_t));
    rawrow_t *rows = NULL;
    size_t nr = 0, cap = 0;
    int rc = 0, s;
    while (!rc && (s = agg_qx_step(st)) == 1) {
        if (nr == cap && agg_vec_grow((void **)&rows, &cap, sizeof *rows)) {
            rc = CM_ENOMEM;
            break;
        }
        int c0 = reps ? 1 : 0;
        rows[nr].replicate = rep;
        if (reps) {
            int64_t b = agg_qx_int64(st, 0);
            rows[nr].replicate = reps[b < 0 ? 0 : (size_t)b < nreps ? (size_t)b : nreps - 1];
        }
        rows[nr].stack = (uint64_t)agg_qx_int64(st, c0);
        rows[nr].weight = (uint64_t)agg_qx_int64(st, c0 + 1);
        rows[nr].count = (uint64_t)agg_qx_int64(st, c0 + 2);
        if (!agg_hmap_upsert(&stacks, &rows[nr].stack, NULL))
            rc = CM_ENOMEM;
        nr++;
    }
    if (!rc && nr)
        rc = agg_qs_resolve_stacks(d, p, &stacks, lines);
    for (size_t k = 0; !rc && k < nr; k++) {
        stackmap_t *m = agg_hmap_find(&stacks, &rows[k].stack);
        if (m && m->resolved)
            rc = agg_profile_add(p, m->stack, rows[k].weight, rows[k].count, rows[k].replicate,
                                 ctx);
    }
    free(rows);
    agg_hmap_free(&stacks);
    return rc;
}

int agg_qs_add_stack_rows(qdb_t *d, agg_profile_t *p, agg_qxst_t *st, uint32_t rep, uint32_t ctx) {
    return add_rows(d, p, st, rep, ctx, NULL, 0, 0);
}

int agg_qs_add_bucket_rows(qdb_t *d, agg_profile_t *p, agg_qxst_t *st, const uint32_t *reps,
                           size_t nreps, int lines) {
    return nreps ? add_rows(d, p, st, 0, 0, reps, nreps, lines) : CM_EINVAL;
}

