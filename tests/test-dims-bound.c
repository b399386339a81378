/* Dimensions as bounded labels (aggregator/src/ingest/dims.c), without Kafka:
 *
 *   admit_bound        at most `limit` distinct values per (service, dimension) and window:
 *                      the rest refused and counted, a known value always admitted, services
 *                      counted apart, a new window starts afresh, the global entry cap holds
 *   chunk_dims_stored  a chunk rolled up with dimensions and written to a real store: group-by
 *                      host/pid/pod/io-target/fd-kind/lock through the query layer gives the
 *                      chunk's own sums per value (computed here from the chunk), application
 *                      labels survive next to the dimensions, filters combine
 *   targets_past_limit I/O targets and lock addresses past the limit land in "(other)" with
 *                      exactly the weight of the targets first seen after the limit; totals
 *                      unchanged; overflow counted
 *   dims_option        the `dimensions` option: names, all, none, a precise error; a dimension
 *                      left out is not stored (group-by on it: one value-less group)
 *   derived_no_dims    the tiers and the per-leaf rollup are keyed by the label sets without the
 *                      dimensions (labelset_base), both when a batch derives them and when the
 *                      retention pass compacts fine rows into them: no derived row carries a
 *                      dimension, the tiered read of a profile equals the fine rows' exactly,
 *                      and a profile filtered on a dimension (read from the fine rows) equals
 *                      that value's own samples
 *   pods_10000         10,000 pods of one service within an hour with limit 1000: 1000 pod
 *                      groups plus "(other)", sums exact, 9,000 overflows counted; a new hour
 *                      admits new pods again
 *   peer_pid_checked   (issue 28) the pid stored is the one the collector checked (fp-peer-pid),
 *                      with the uid it checked: a chunk claiming pid 4242 from peer 777 is
 *                      stored as pid 777, its claim as pid-claimed=4242 and counted; a chunk
 *                      from a container whose agent says 12 (= its NSpid) is not marked; one
 *                      without collector headers keeps its own pid */
#include "dims.h"
#include "intern.h"
#include "query_store.h"
#include "rollup.h"
#include "store.h"

#include "support/chunkgen.h"
#include "support/runner.h"

#include "cm/error.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_admit_bound(void) {
    agg_dims_t d;
    agg_dims_init(&d, 3600, 3, 2);
    uint64_t t0 = 7200ull * 1000000000ull;
    for (uint64_t v = 1; v <= 5; v++)
        CHECK_EQ(agg_dims_admit(&d, 11, AGG_DIM_POD, v, t0), v <= 3);
    CHECK_EQ(d.overflow[AGG_DIM_POD], 2);
    CHECK_EQ(agg_dims_admit(&d, 11, AGG_DIM_POD, 2, t0), 1); /* known: no overflow */
    CHECK_EQ(d.overflow[AGG_DIM_POD], 2);
    CHECK_EQ(agg_dims_admit(&d, 12, AGG_DIM_POD, 5, t0), 1);       /* another service */
    CHECK_EQ(agg_dims_admit(&d, 11, AGG_DIM_HOST, 5, t0), 1);      /* another dimension */
    for (uint64_t v = 1; v <= 3; v++)                              /* target limit: 2 */
        CHECK_EQ(agg_dims_admit(&d, 11, AGG_DIM_IO_TARGET, v, t0), v <= 2);
    CHECK_EQ(d.overflow[AGG_DIM_IO_TARGET], 1);
    /* late data of an earlier window counts in the current one */
    CHECK_EQ(agg_dims_admit(&d, 11, AGG_DIM_POD, 4, t0 - 3600ull * 1000000000ull), 0);
    /* the next window admits again */
    CHECK_EQ(agg_dims_admit(&d, 11, AGG_DIM_POD, 4, t0 + 3600ull * 1000000000ull), 1);
    CHECK_EQ(d.overflow[AGG_DIM_POD], 3);
    /* the global cap on tracked values */
    d.max_entries = 4;
    uint64_t t1 = t0 + 3600ull * 1000000000ull;
    int admitted = 0;
    for (uint64_t v = 100; v < 110; v++)
        admitted += agg_dims_admit(&d, 20 + v, AGG_DIM_PID, v, t1);
    CHECK_EQ(admitted, 3); /* 1 entry already (pod 4), room for 3 */
    CHECK_EQ(d.overflow[AGG_DIM_PID], 7);
    agg_dims_free(&d);
}

/* ---- a store fed with generated chunks ---- */

typedef struct {
    char dir[64], path[128];
    agg_store_t *st;
    agg_intern_t in;
    agg_rollup_t r;
    agg_dims_t d;
    agg_batch_t b;
    int64_t offset;
} feed_t;

static void feed_init(feed_t *f, uint32_t plimit, uint32_t tlimit) {
    char err[256];
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/fp-dims-XXXXXX");
    CHECK(mkdtemp(f->dir) != NULL);
    agg_store_path(f->path, sizeof f->path, f->dir, "t", 0);
    CHECKF(agg_store_sqlite_open(f->path, &f->st, err, sizeof err) == 0, "%s", err);
    agg_rollup_cfg_t rc = {10, 3600, 0, 0, 60};
    agg_rollup_init(&f->r, &rc);
    agg_dims_init(&f->d, 3600, plimit, tlimit);
    agg_batch_init(&f->b);
    f->offset = -1;
}

static void feed_add(feed_t *f, const cm_chunk_t *c, const agg_chunk_meta_t *m) {
    agg_chunk_ids_t ids;
    if (f->b.next_offset < 0)
        f->b.base_offset = f->offset;
    CHECK(agg_intern_chunk(&f->in, &f->b, c, &ids) == 0);
    CHECK(agg_dims_chunk(&f->d, &f->in, &f->b, c, m, &ids) == 0);
    CHECK(agg_rollup_chunk(&f->r, &f->b, c, &ids) == 0);
    f->b.next_offset = (f->offset < 0 ? 0 : f->offset) + 1;
}

static void feed_commit(feed_t *f) {
    CHECK_EQ(agg_store_batch_write(f->st, "t", 0, &f->b), 0);
    f->offset = f->b.next_offset;
    agg_batch_clear(&f->b);
}

static void feed_free(feed_t *f) {
    agg_store_close(f->st);
    agg_intern_free(&f->in);
    agg_rollup_free(&f->r);
    agg_dims_free(&f->d);
    agg_batch_free(&f->b);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", f->dir);
    CHECK(system(cmd) == 0);
}

static cm_chunk_t *gen_n(uint64_t seed, uint32_t samples, uint64_t start_s, uint32_t stacks) {
    ts_gen_params_t p = ts_gen_realistic();
    p.samples = samples;
    p.stacks = stacks;
    p.min_depth = stacks < 60 ? 2 : p.min_depth;
    p.max_depth = stacks < 60 ? 4 : p.max_depth;
    p.label_sets = 3;
    p.types_mask = 0x7e; /* every event type */
    cm_chunk_t *c = ts_gen_chunk(&p, seed);
    /* move it to start_s */
    int64_t shift = (int64_t)(start_s * 1000000000ull) - (int64_t)c->header.start_unix_ns;
    c->header.start_unix_ns += (uint64_t)shift;
    c->header.end_unix_ns += (uint64_t)shift;
    for (uint32_t t = 1; t <= CM_EV_MAX; t++)
        for (uint32_t i = 0; i < c->samples[t].n; i++)
            c->samples[t].time_ns[i] += (uint64_t)shift;
    c->header.service = (cm_str_t){"dimsvc", 6};
    return c;
}

static cm_chunk_t *gen(uint64_t seed, uint32_t samples, uint64_t start_s) {
    return gen_n(seed, samples, start_s, 60);
}

typedef struct {
    const char *v;
    uint64_t weight;
} exp_t;

static void expect_add(exp_t *e, size_t *n, const char *v, uint64_t w) {
    for (size_t i = 0; i < *n; i++)
        if (!strcmp(e[i].v, v)) {
            e[i].weight += w;
            return;
        }
    e[*n].v = v;
    e[(*n)++].weight = w;
}

/* Group-by key over the store of f (type t, optional filter) must equal exp exactly. */
static void check_groups(feed_t *f, uint32_t t, const char *key, const agg_qfilter_t *flt,
                         size_t nflt, const exp_t *exp, size_t nexp) {
    agg_qstore_t *qs;
    char err[256];
    CHECKF(agg_qstore_open(f->dir, &qs, err, sizeof err) == 0, "%s", err);
    agg_qspec_t q = {.service = "dimsvc", .type = (cm_event_type_t)t, .from_s = 0,
                     .to_s = INT64_MAX / 4, .filters = flt, .n_filters = nflt};
    agg_qgroup_t *g;
    size_t n;
    CHECK_EQ(agg_qstore_groups(qs, &q, key, &g, &n), 0);
    for (size_t i = 0; i < n; i++)
        printf("  %s=%s: %llu\n", key, g[i].value ? g[i].value : "(none)",
               (unsigned long long)g[i].weight);
    CHECK_EQ(n, nexp);
    for (size_t j = 0; j < nexp; j++) {
        size_t i = 0;
        while (i < n && (!g[i].value ? strcmp(exp[j].v, "") : strcmp(g[i].value, exp[j].v)))
            i++;
        CHECKF(i < n, "%s: no group %s", key, exp[j].v);
        CHECKF(g[i].weight == exp[j].weight, "%s=%s: %llu, expected %llu", key, exp[j].v,
               (unsigned long long)g[i].weight, (unsigned long long)exp[j].weight);
    }
    agg_qgroups_free(g, n);
    agg_qstore_close(qs);
}

static const char *str_of(const cm_chunk_t *c, uint32_t i) {
    return i && i < c->dict.n_strings ? c->dict.strings[i].ptr : "";
}

static void test_chunk_dims_stored(void) {
    feed_t f;
    feed_init(&f, 0, 0);
    cm_chunk_t *c[2] = {gen(1, 400, 1800000000), gen(2, 300, 1800000010)};
    agg_chunk_meta_t m[2] = {{"host-a", "node-1", "prod/web-0", "", 0, 0, 0, 0}, {"", "", "", "", 0, 0, 0, 0}};
    c[0]->header.pid = 41;
    c[1]->header.pid = 42;
    c[1]->header.host = (cm_str_t){"host-b", 6}; /* no collector header: the chunk's own */
    feed_add(&f, c[0], &m[0]);
    feed_add(&f, c[1], &m[1]);
    feed_commit(&f);
    /* host and pid, every type */
    for (uint32_t t = 1; t <= CM_EV_MAX; t++) {
        exp_t h[2] = {{"host-a", 0}, {"host-b", 0}}, p[2] = {{"41", 0}, {"42", 0}};
        for (int k = 0; k < 2; k++)
            for (uint32_t i = 0; i < c[k]->samples[t].n; i++) {
                h[k].weight += c[k]->samples[t].weight[i];
                p[k].weight += c[k]->samples[t].weight[i];
            }
        check_groups(&f, t, "host", NULL, 0, h, 2);
        check_groups(&f, t, "pid", NULL, 0, p, 2);
        /* pod: only the first chunk came with one */
        exp_t pod[2] = {{"prod/web-0", h[0].weight}, {"", h[1].weight}};
        check_groups(&f, t, "pod", NULL, 0, pod, 2);
    }
    /* I/O target and fd kind, lock address, per chunk 2 only (filter pid=42) */
    static const char *const kinds[] = {"", "file", "socket", "pipe", "other"};
    exp_t e[64];
    size_t ne = 0;
    const cm_samples_t *s = &c[1]->samples[CM_EV_IO];
    for (uint32_t i = 0; i < s->n; i++)
        expect_add(e, &ne, str_of(c[1], s->target[i]), s->weight[i]);
    agg_qfilter_t pid42 = {"pid", "42"};
    check_groups(&f, CM_EV_IO, "io-target", &pid42, 1, e, ne);
    ne = 0;
    for (uint32_t i = 0; i < s->n; i++)
        expect_add(e, &ne, kinds[s->fd_kind[i]], s->weight[i]);
    check_groups(&f, CM_EV_IO, "fd-kind", &pid42, 1, e, ne);
    ne = 0;
    const cm_samples_t *l = &c[1]->samples[CM_EV_LOCK];
    char addr[16][24];
    int na = 0;
    for (uint32_t i = 0; i < l->n; i++) {
        char a[24];
        snprintf(a, sizeof a, "0x%llx", (unsigned long long)l->address[i]);
        int j = 0;
        while (j < na && strcmp(addr[j], a))
            j++;
        if (j == na) {
            CHECK(na < 16);
            snprintf(addr[na++], 24, "%s", a);
        }
        expect_add(e, &ne, addr[j], l->weight[i]);
    }
    check_groups(&f, CM_EV_LOCK, "lock", &pid42, 1, e, ne);
    /* the application's labels are kept next to the dimensions: group by the first label key
     * of chunk 2, filtered to its host */
    const cm_dict_t *d = &c[1]->dict;
    CHECK(d->n_label_sets > 1);
    const char *lk = str_of(c[1], d->label_kv[2 * d->label_off[1]]);
    ne = 0;
    const cm_samples_t *cpu = &c[1]->samples[CM_EV_CPU];
    for (uint32_t i = 0; i < cpu->n; i++) {
        const char *v = "";
        uint32_t ls = cpu->labels[i];
        for (uint32_t j = d->label_off[ls]; j < d->label_off[ls + 1]; j++)
            if (!strcmp(str_of(c[1], d->label_kv[2 * j]), lk))
                v = str_of(c[1], d->label_kv[2 * j + 1]);
        expect_add(e, &ne, v, cpu->weight[i]);
    }
    agg_qfilter_t hb = {"host", "host-b"};
    check_groups(&f, CM_EV_CPU, lk, &hb, 1, e, ne);
    ts_gen_free(c[0]);
    ts_gen_free(c[1]);
    feed_free(&f);
}

static void test_targets_past_limit(void) {
    feed_t f;
    feed_init(&f, 0, 2);
    cm_chunk_t *c = gen(3, 500, 1800000000);
    feed_add(&f, c, NULL);
    feed_commit(&f);
    /* the first 2 distinct targets in row order are kept, the others are (other) */
    const cm_samples_t *s = &c->samples[CM_EV_IO];
    const char *kept[2] = {NULL, NULL};
    exp_t e[8];
    size_t ne = 0;
    uint64_t total = 0;
    int distinct = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        const char *t = str_of(c, s->target[i]);
        int k = (kept[0] && !strcmp(kept[0], t)) || (kept[1] && !strcmp(kept[1], t));
        if (!k && !kept[1]) {
            kept[kept[0] ? 1 : 0] = t;
            k = 1;
        }
        expect_add(e, &ne, k ? t : AGG_DIM_OTHER, s->weight[i]);
        total += s->weight[i];
    }
    for (size_t i = 0; i < ne; i++)
        distinct += strcmp(e[i].v, AGG_DIM_OTHER) != 0;
    CHECK_EQ(distinct, 2);
    CHECK(ne == 3); /* the generator uses 4 targets */
    check_groups(&f, CM_EV_IO, "io-target", NULL, 0, e, ne);
    CHECK(f.d.overflow[AGG_DIM_IO_TARGET] >= 2); /* once per (chunk, value, label set, fd) */
    /* lock addresses: 8 in the generator, 2 kept */
    agg_qstore_t *qs;
    char err[256];
    CHECK(agg_qstore_open(f.dir, &qs, err, sizeof err) == 0);
    agg_qspec_t q = {.service = "dimsvc", .type = CM_EV_LOCK, .to_s = INT64_MAX / 4};
    agg_qgroup_t *g;
    size_t n;
    CHECK_EQ(agg_qstore_groups(qs, &q, "lock", &g, &n), 0);
    CHECK_EQ(n, 3);
    uint64_t lsum = 0, lt = 0;
    for (size_t i = 0; i < n; i++)
        lsum += g[i].weight;
    for (uint32_t i = 0; i < c->samples[CM_EV_LOCK].n; i++)
        lt += c->samples[CM_EV_LOCK].weight[i];
    CHECK_EQ(lsum, lt);
    agg_qgroups_free(g, n);
    /* the io total is unchanged by the bound */
    q.type = CM_EV_IO;
    CHECK_EQ(agg_qstore_groups(qs, &q, "host", &g, &n), 0);
    CHECK_EQ(n, 1);
    CHECK_EQ(g[0].weight, total);
    agg_qgroups_free(g, n);
    agg_qstore_close(qs);
    ts_gen_free(c);
    feed_free(&f);
}

static void test_pods_10000(void) {
    feed_t f;
    feed_init(&f, 1000, 0);
    cm_chunk_t *c = gen_n(4, 2, 1800000000, 4); /* two rows per type, short stacks */
    uint64_t per_chunk = 0, total = 0, other = 0;
    for (uint32_t i = 0; i < c->samples[CM_EV_CPU].n; i++)
        per_chunk += c->samples[CM_EV_CPU].weight[i];
    for (uint32_t k = 0; k < 10000; k++) {
        agg_chunk_meta_t m = {"host-x", "", "", "", 0, 0, 0, 0};
        snprintf(m.pod, sizeof m.pod, "prod/pod-%05u", k);
        c->header.pid = 1; /* every pod's process is pid 1 in its namespace */
        for (unsigned j = 0; j < CM_CHUNK_ID_LEN; j++)
            c->header.chunk_id[j] = (uint8_t)(k >> (j % 4 * 8));
        feed_add(&f, c, &m);
        total += per_chunk;
        other += k >= 1000 ? per_chunk : 0;
        if (k % 500 == 499)
            feed_commit(&f);
    }
    CHECK_EQ(f.d.overflow[AGG_DIM_POD], 9000);
    CHECK_EQ(f.d.overflow[AGG_DIM_HOST], 0);
    agg_qstore_t *qs;
    char err[256];
    CHECK(agg_qstore_open(f.dir, &qs, err, sizeof err) == 0);
    agg_qspec_t q = {.service = "dimsvc", .type = CM_EV_CPU, .to_s = INT64_MAX / 4};
    agg_qgroup_t *g;
    size_t n;
    CHECK_EQ(agg_qstore_groups(qs, &q, "pod", &g, &n), 0);
    CHECK_EQ(n, 1001);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        sum += g[i].weight;
        if (g[i].value && !strcmp(g[i].value, AGG_DIM_OTHER))
            CHECK_EQ(g[i].weight, other);
        else
            CHECK_EQ(g[i].weight, per_chunk);
    }
    CHECK_EQ(sum, total);
    agg_qgroups_free(g, n);
    agg_qstore_close(qs);
    /* an hour later a new pod is admitted again */
    cm_chunk_t *c2 = gen(5, 2, 1800000000 + 3600);
    agg_chunk_meta_t m = {"host-x", "", "prod/pod-new", "", 0, 0, 0, 0};
    uint64_t before = f.d.overflow[AGG_DIM_POD];
    feed_add(&f, c2, &m);
    feed_commit(&f);
    CHECK_EQ(f.d.overflow[AGG_DIM_POD], before);
    ts_gen_free(c);
    ts_gen_free(c2);
    feed_free(&f);
}

static void test_dims_option(void) {
    uint32_t m;
    char err[256] = "";
    CHECK_EQ(agg_dims_parse("host,io-target", &m, err, sizeof err), 0);
    CHECK_EQ(m, (1u << AGG_DIM_HOST) | (1u << AGG_DIM_IO_TARGET));
    CHECK_EQ(agg_dims_parse("all", &m, err, sizeof err), 0);
    CHECK_EQ(m, AGG_DIM_ALL);
    CHECK_EQ(agg_dims_parse("none", &m, err, sizeof err), 0);
    CHECK_EQ(m, 0);
    CHECK_EQ(agg_dims_parse("host,pids", &m, err, sizeof err), CM_ECONFIG);
    CHECKF(strstr(err, "'pids' is not one of host"), "%s", err);
    feed_t f;
    feed_init(&f, 0, 0);
    f.d.enabled = 1u << AGG_DIM_HOST;
    cm_chunk_t *c = gen(6, 100, 1800000000);
    agg_chunk_meta_t meta = {"host-a", "", "prod/web-1", "", 0, 0, 0, 0};
    feed_add(&f, c, &meta);
    feed_commit(&f);
    uint64_t w = 0;
    for (uint32_t i = 0; i < c->samples[CM_EV_CPU].n; i++)
        w += c->samples[CM_EV_CPU].weight[i];
    exp_t host[1] = {{"host-a", w}}, none[1] = {{"", w}};
    check_groups(&f, CM_EV_CPU, "host", NULL, 0, host, 1);
    check_groups(&f, CM_EV_CPU, "pid", NULL, 0, none, 1);
    check_groups(&f, CM_EV_CPU, "pod", NULL, 0, none, 1);
    ts_gen_free(c);
    feed_free(&f);
}

static long long rows_of(const char *path, const char *table) {
    sqlite3 *db;
    sqlite3_stmt *st;
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s", table);
    CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    CHECK(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK);
    CHECK(sqlite3_step(st) == SQLITE_ROW);
    long long n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* Rows of table whose label set holds a dimension key (any). */
static long long rows_with_dims(const char *path, const char *table) {
    sqlite3 *db;
    CHECK(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL) == SQLITE_OK);
    char sql[512];
    snprintf(sql, sizeof sql, "SELECT COUNT(*) FROM %s WHERE labels IN (SELECT labelset FROM "
             "labels WHERE key IN (?1, ?2, ?3))", table);
    sqlite3_stmt *st;
    CHECK(sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK);
    const char *k[3] = {"host", "pid", "io-target"};
    for (int i = 0; i < 3; i++)
        sqlite3_bind_int64(st, i + 1, (sqlite3_int64)agg_intern_string_id(k[i], strlen(k[i])));
    CHECK(sqlite3_step(st) == SQLITE_ROW);
    long long n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return n;
}

/* Total weight of type t of dimsvc: tiered (exact 0) or fine rows only (exact 1). */
static uint64_t profile_total(const char *dir, uint32_t t, int exact, const agg_qfilter_t *f,
                              size_t nf, uint32_t *nstacks) {
    agg_qstore_t *qs;
    char err[256];
    CHECK(agg_qstore_open(dir, &qs, err, sizeof err) == 0);
    agg_qspec_t q = {.service = "dimsvc", .type = (cm_event_type_t)t, .to_s = INT64_MAX / 4,
                     .filters = f, .n_filters = nf, .exact = exact};
    agg_profile_t *p = NULL;
    CHECK_EQ(agg_qstore_profile(qs, &q, &p), 0);
    uint64_t w = 0, c = 0;
    double work;
    agg_profile_totals(p, &w, &c, &work);
    if (nstacks)
        *nstacks = p->n_stacks;
    agg_profile_free(p);
    agg_qstore_close(qs);
    return w;
}

static void check_derived(feed_t *f, const uint64_t *host_a) {
    CHECK(rows_with_dims(f->path, "profile") > 0);
    CHECK_EQ(rows_with_dims(f->path, "profile_coarse"), 0);
    CHECK_EQ(rows_with_dims(f->path, "profile_leaf"), 0);
    for (uint32_t t = 1; t <= CM_EV_MAX; t++) {
        uint32_t n0, n1;
        uint64_t tiered = profile_total(f->dir, t, 0, NULL, 0, &n0);
        uint64_t fine = profile_total(f->dir, t, 1, NULL, 0, &n1);
        CHECKF(tiered == fine && n0 == n1, "type %u: tiered %llu (%u stacks), fine %llu (%u)", t,
               (unsigned long long)tiered, n0, (unsigned long long)fine, n1);
        agg_qfilter_t h = {"host", "host-a"};
        CHECK_EQ(profile_total(f->dir, t, 0, &h, 1, NULL), host_a[t]);
    }
}

static void test_derived_no_dims(void) {
    feed_t f;
    feed_init(&f, 0, 0);
    uint64_t host_a[CM_EV_COUNT] = {0};
    /* in the past: below the tiers' marks, derived by the batch itself */
    cm_chunk_t *c[2] = {gen(7, 300, 1700000000), gen(8, 300, 1700000000)};
    agg_chunk_meta_t m[2] = {{"host-a", "", "", "", 0, 0, 0, 0}, {"host-b", "", "", "", 0, 0, 0, 0}};
    for (int k = 0; k < 2; k++) {
        c[k]->header.pid = 50 + (uint32_t)k;
        feed_add(&f, c[k], &m[k]);
    }
    feed_commit(&f);
    for (uint32_t t = 1; t <= CM_EV_MAX; t++)
        for (uint32_t i = 0; i < c[0]->samples[t].n; i++)
            host_a[t] += c[0]->samples[t].weight[i];
    check_derived(&f, host_a);
    long long tiers1 = rows_of(f.path, "profile_coarse");
    CHECK(tiers1 > 0 && rows_of(f.path, "profile_leaf") > 0);
    /* in the future: above the marks, compacted into the tiers by the retention pass's SQL */
    cm_chunk_t *d[2] = {gen(9, 300, 1900000000), gen(10, 300, 1900000000)};
    for (int k = 0; k < 2; k++) {
        d[k]->header.pid = 60 + (uint32_t)k;
        feed_add(&f, d[k], &m[k]);
    }
    feed_commit(&f);
    CHECK_EQ(rows_of(f.path, "profile_coarse"), tiers1); /* not yet */
    CHECK_EQ(f.st->vt->compact(f.st, 10, 1900000000 + 2 * 3600), 0);
    CHECK(rows_of(f.path, "profile_coarse") > tiers1);
    for (uint32_t t = 1; t <= CM_EV_MAX; t++)
        for (uint32_t i = 0; i < d[0]->samples[t].n; i++)
            host_a[t] += d[0]->samples[t].weight[i];
    check_derived(&f, host_a);
    for (int k = 0; k < 2; k++) {
        ts_gen_free(c[k]);
        ts_gen_free(d[k]);
    }
    feed_free(&f);
}

static void test_peer_pid_checked(void) {
    feed_t f;
    feed_init(&f, 0, 0);
    cm_chunk_t *c[3] = {gen(11, 300, 1800000000), gen(12, 200, 1800000010),
                        gen(13, 100, 1800000020)};
    agg_chunk_meta_t m[3] = {{"host-a", "", "", "", 0, 0, 0, 0},
                             {"host-a", "", "", "", 0, 0, 0, 0},
                             {"host-a", "", "", "", 0, 0, 0, 0}};
    c[0]->header.pid = 4242; /* claims another process's pid */
    m[0].peer_pid = 777;
    m[0].peer_uid = 65534;
    m[0].has_peer_uid = 1;
    c[1]->header.pid = 12; /* in a container: its own namespace's pid */
    m[1].peer_pid = 5012;
    m[1].peer_nspid = 12;
    m[1].peer_uid = 0;
    m[1].has_peer_uid = 1;
    c[2]->header.pid = 99; /* no collector said who sent it: its own word */
    for (int k = 0; k < 3; k++)
        feed_add(&f, c[k], &m[k]);
    feed_commit(&f);
    printf("peer_pid_checked: pid_mismatch=%llu\n", (unsigned long long)f.d.pid_mismatch);
    CHECK_EQ(f.d.pid_mismatch, 1);
    for (uint32_t t = 1; t <= CM_EV_MAX; t++) {
        uint64_t w[3] = {0, 0, 0};
        for (int k = 0; k < 3; k++)
            for (uint32_t i = 0; i < c[k]->samples[t].n; i++)
                w[k] += c[k]->samples[t].weight[i];
        exp_t pid[3] = {{"777", w[0]}, {"5012", w[1]}, {"99", w[2]}};
        check_groups(&f, t, "pid", NULL, 0, pid, 3);
        exp_t uid[3] = {{"65534", w[0]}, {"0", w[1]}, {"", w[2]}};
        check_groups(&f, t, "uid", NULL, 0, uid, 3);
        exp_t claimed[2] = {{"4242", w[0]}, {"", w[1] + w[2]}};
        check_groups(&f, t, "pid-claimed", NULL, 0, claimed, 2);
    }
    for (int k = 0; k < 3; k++)
        ts_gen_free(c[k]);
    feed_free(&f);
}

/* The batch flags a label row new to the store (the PostgreSQL store copies it without a
 * merge) only when its set holds a pid: one process's set, first written through that process's
 * partition. A pid past the bound is "(other)", a set processes share: not flagged. */
static size_t own_labels(const agg_batch_t *b, size_t *n) {
    uint64_t pid = agg_intern_string_id("pid", 3);
    uint64_t other = agg_intern_string_id(AGG_DIM_OTHER, strlen(AGG_DIM_OTHER));
    size_t fresh = 0;
    *n = b->labels.n;
    for (size_t i = 0; i < b->labels.n; i++) {
        const agg_new_label_t *l = &b->labels.v[i];
        int own = 0;
        for (size_t j = 0; j < b->labels.n; j++)
            own |= b->labels.v[j].set == l->set && b->labels.v[j].key == pid &&
                   b->labels.v[j].value != other;
        CHECKF(l->fresh == own, "label row %zu: flag %d, set %s a pid", i, l->fresh,
               own ? "with" : "without");
        fresh += l->fresh;
    }
    return fresh;
}

static void test_labels_own_process(void) {
    feed_t f;
    feed_init(&f, 1, 0); /* one pid per service and window: the second is (other) */
    cm_chunk_t *c = gen(6, 200, 1800000000);
    agg_chunk_meta_t m = {"host-x", "", "", "", 0, 0, 0, 0};
    size_t n, fresh;
    c->header.pid = 10;
    feed_add(&f, c, &m);
    fresh = own_labels(&f.b, &n);
    printf("pid 10: %zu of %zu label rows flagged\n", fresh, n);
    CHECK(fresh > 0 && fresh < n); /* its sets with the pid; the chunk's own sets without */
    feed_commit(&f);
    c->header.pid = 11;
    c->header.chunk_id[0] ^= 1;
    feed_add(&f, c, &m);
    fresh = own_labels(&f.b, &n);
    printf("pid 11 past the bound: %zu of %zu label rows flagged\n", fresh, n);
    CHECK(n > 0 && fresh == 0);
    CHECK_EQ(f.d.overflow[AGG_DIM_PID], 1);
    feed_commit(&f);
    ts_gen_free(c);
    feed_free(&f);
}

static const tr_test_t tests[] = {
    {"admit_bound", test_admit_bound},
    {"chunk_dims_stored", test_chunk_dims_stored},
    {"targets_past_limit", test_targets_past_limit},
    {"dims_option", test_dims_option},
    {"derived_no_dims", test_derived_no_dims},
    {"pods_10000", test_pods_10000},
    {"peer_pid_checked", test_peer_pid_checked},
    {"labels_own_process", test_labels_own_process},
    {NULL, NULL},
};

TR_MAIN(tests)
