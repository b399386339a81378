/* Aggregator: the store (fenced batch writes, read API, label filter, span drill-down),
 * retention (downsampling keeps totals, expiry, bounded size under steady load), and end to end
 * with a real Kafka broker: simulator -> Kafka -> fleetprof-aggregator -> exact totals,
 * duplicates counted once, malformed messages dead-lettered with their reasons. */
#include "aggtest.h"
#include "diff.h"
#include "export.h"
#include "fleetsim.h"
#include "intern.h"
#include "query_store.h"
#include "retention.h"
#include "rollup.h"
#include "store.h"

#include "cm/chunk.h"
#include "cm/error.h"
#include "cm/wire.h"
#include "support/chunkgen.h"
#include "support/kafka.h"
#include "support/runner.h"

#include <errno.h>
#include <math.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PORT 19510
#define HTTP_PORT 19511
#define NPARTS 4

static int64_t wall_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Rolls decoded frames of a simulator into one batch per call, as the consume loop does. */
typedef struct {
    agg_store_t *st;
    agg_intern_t in;
    agg_rollup_t r;
    agg_batch_t b;
    int64_t offset;
} feeder_t;

static void feeder_init_rw(feeder_t *f, const char *path, int64_t fine, int64_t replicate) {
    char err[512];
    memset(f, 0, sizeof *f);
    CHECKF(agg_store_sqlite_open(path, &f->st, err, sizeof err) == 0, "%s", err);
    agg_rollup_cfg_t rc = {fine, 3600, 1, 1, replicate};
    agg_rollup_init(&f->r, &rc);
    agg_batch_init(&f->b);
    f->offset = -1;
}

static void feeder_init(feeder_t *f, const char *path, int64_t fine) {
    feeder_init_rw(f, path, fine, 60);
}

static void feeder_add(feeder_t *f, const cm_chunk_t *c) {
    agg_chunk_ids_t ids;
    if (f->b.next_offset < 0)
        f->b.base_offset = f->offset;
    CHECK(agg_intern_chunk(&f->in, &f->b, c, &ids) == 0);
    CHECK(agg_rollup_chunk(&f->r, &f->b, c, &ids) == 0);
    f->b.next_offset = (f->offset < 0 ? 0 : f->offset) + 1;
}

static void feeder_commit(feeder_t *f) {
    CHECK_EQ(agg_store_batch_write(f->st, "t", 0, &f->b), 0);
    f->offset = f->b.next_offset;
    agg_batch_clear(&f->b);
}

static void feeder_free(feeder_t *f) {
    agg_store_close(f->st);
    agg_intern_free(&f->in);
    agg_rollup_free(&f->r);
    agg_batch_free(&f->b);
}

/* Feeds every chunk of a simulator (no malformed ones) into the store, in batches of 16. */
static void feed_sim(feeder_t *f, fsim_t *sim) {
    const uint8_t *fr;
    size_t len;
    const char *key;
    int n = 0;
    while (fsim_next(sim, &fr, &len, &key)) {
        cm_chunk_t *c;
        char err[256];
        CHECKF(cm_chunk_decode(fr, len, &c, err, sizeof err) == 0, "%s", err);
        feeder_add(f, c);
        cm_chunk_free(c);
        if (++n % 16 == 0)
            feeder_commit(f);
    }
    if (f->b.next_offset >= 0)
        feeder_commit(f);
}

static int strcmp_ptr(const char **a, const char **b) { return strcmp(*a, *b); }

static void test_store_roundtrip_and_fencing(void) {
    char dir[64], path[128];
    at_tmpdir(dir, "store");
    snprintf(path, sizeof path, "%s/t-0.db", dir);
    ts_gen_params_t gp = ts_gen_realistic();
    gp.samples = 2000;
    gp.types_mask = 0x7e;
    gp.label_sets = 3;
    cm_chunk_t *c = ts_gen_chunk(&gp, 42);
    c->header.service = (cm_str_t){"svc-a", 5};
    c->header.version = (cm_str_t){"v1", 2};
    feeder_t f;
    feeder_init(&f, path, 10);
    feeder_add(&f, c);
    f.b.next_offset = 10;
    CHECK_EQ(agg_store_batch_write(f.st, "t", 0, &f.b), 0);
    /* the same batch again, from the same base: another writer got there first -> fenced */
    CHECK_EQ(agg_store_batch_write(f.st, "t", 0, &f.b), -ESTALE);
    int64_t off;
    CHECK(agg_store_offset_get(f.st, "t", 0, &off) == 0 && off == 10);
    CHECK(agg_store_offset_get(f.st, "t", 1, &off) == 0 && off == -1);

    /* read back through the query store, the API's read path */
    agg_qstore_t *qs = NULL;
    char qerr[256];
    CHECKF(agg_qstore_open(dir, &qs, qerr, sizeof qerr) == 0, "%s", qerr);
    agg_qversion_t *vv = NULL;
    size_t nvv = 0;
    CHECK_EQ(agg_qstore_versions(qs, "svc-a", &vv, &nvv), 0);
    CHECK_EQ(nvv, 1);
    CHECKF(nvv == 1 && !strcmp(vv[0].service, "svc-a") && !strcmp(vv[0].version, "v1"), "%s %s",
           nvv ? vv[0].service : "-", nvv ? vv[0].version : "-");
    CHECK(nvv == 1 && vv[0].first_ns == (int64_t)c->header.start_unix_ns && vv[0].chunks == 1);
    int64_t cpu_weight = 0;
    for (uint32_t t = 1; t <= CM_EV_MAX && nvv == 1; t++) {
        const cm_samples_t *s = &c->samples[t];
        uint64_t w = 0, n = 0;
        for (uint32_t i = 0; i < s->n; i++) {
            w += s->weight[i];
            n += cm_samples_count(s, i);
        }
        CHECKF(vv[0].weight[t] == w && vv[0].count[t] == n && vv[0].rows[t] == s->n,
               "type %u: %llu/%llu", t, (unsigned long long)vv[0].weight[t],
               (unsigned long long)w);
        if (t == CM_EV_CPU)
            cpu_weight = (int64_t)w;
        const char *v1[1] = {"v1"};
        agg_qspec_t q = {.service = "svc-a", .versions = v1, .n_versions = 1,
                         .type = (cm_event_type_t)t, .from_s = 0, .to_s = INT64_MAX};
        agg_profile_t *p = NULL;
        uint64_t pw = 0, pc = 0;
        double work;
        CHECK_EQ(agg_qstore_profile(qs, &q, &p), 0);
        agg_profile_totals(p, &pw, &pc, &work);
        CHECKF(pw == w && pc == n, "type %u: profile %llu/%llu", t, (unsigned long long)pw,
               (unsigned long long)w);
        agg_profile_free(p);
    }
    agg_qversions_free(vv, nvv);

    /* frames of one stack come back root first with the chunk's function names */
    const cm_samples_t *cpu = &c->samples[CM_EV_CPU];
    uint32_t s0 = cpu->stack[0];
    {
        agg_qspec_t q = {.service = "svc-a", .type = CM_EV_CPU, .from_s = 0, .to_s = INT64_MAX};
        agg_profile_t *p = NULL;
        CHECK_EQ(agg_qstore_profile(qs, &q, &p), 0);
        uint32_t depth = cm_stack_depth(&c->dict, s0);
        int found = 0;
        for (uint32_t k = 0; p && k < p->n_stacks && !found; k++) {
            if (p->stack_off[k + 1] - p->stack_off[k] != depth)
                continue;
            int same = 1;
            for (uint32_t j = 0; j < depth && same; j++) {
                uint32_t loc = c->dict.stack_frames[c->dict.stack_off[s0] + j];
                const cm_str_t *nm =
                    &c->dict.strings[c->dict.function_name[c->dict.location_function[loc]]];
                same = !strcmp(p->frames[p->stack_frames[p->stack_off[k] + j]].name, nm->ptr);
            }
            found = same;
        }
        CHECKF(found, "no stack of depth %u with the chunk's frames of stack %u", depth, s0);
        agg_profile_free(p);
    }

    /* label filter: the rows whose label set holds (key, value) of row 0's first label */
    uint32_t ls = 0;
    for (uint32_t i = 0; i < cpu->n && !ls; i++)
        ls = cpu->labels[i];
    CHECK(ls != 0);
    const uint32_t *kv = &c->dict.label_kv[2 * c->dict.label_off[ls]];
    const char *lk = c->dict.strings[kv[0]].ptr, *lv = c->dict.strings[kv[1]].ptr;
    uint64_t want = 0;
    for (uint32_t i = 0; i < cpu->n; i++) {
        uint32_t set = cpu->labels[i];
        for (uint32_t j = c->dict.label_off[set]; j < c->dict.label_off[set + 1]; j++)
            if (!strcmp(c->dict.strings[c->dict.label_kv[2 * j]].ptr, lk) &&
                !strcmp(c->dict.strings[c->dict.label_kv[2 * j + 1]].ptr, lv)) {
                want += cpu->weight[i];
                break;
            }
    }
    {
        agg_qspec_t lq = {.service = "svc-a", .type = CM_EV_CPU, .from_s = 0, .to_s = INT64_MAX,
                          .label_key = lk, .label_value = lv};
        agg_profile_t *p = NULL;
        uint64_t pw = 0, pc = 0;
        double work;
        CHECK_EQ(agg_qstore_profile(qs, &lq, &p), 0);
        agg_profile_totals(p, &pw, &pc, &work);
        agg_profile_free(p);
        CHECKF(pw == want && want > 0 && (int64_t)want < cpu_weight, "%llu vs %llu",
               (unsigned long long)pw, (unsigned long long)want);
    }

    /* span drill-down: every event type of one span */
    uint32_t ctx = 0;
    for (uint32_t i = 0; i < cpu->n && !ctx; i++)
        ctx = cpu->context[i];
    CHECK(ctx != 0);
    const uint8_t *cb = c->dict.contexts + (size_t)ctx * CM_CONTEXT_SIZE;
    int types_with_span = 0;
    for (uint32_t t = 1; t <= CM_EV_MAX; t++) {
        const cm_samples_t *s = &c->samples[t];
        uint64_t spw = 0, spc = 0;
        for (uint32_t i = 0; i < s->n; i++)
            if (s->context && s->context[i] &&
                !memcmp(c->dict.contexts + (size_t)s->context[i] * CM_CONTEXT_SIZE, cb,
                        CM_CONTEXT_SIZE)) {
                spw += s->weight[i];
                spc += cm_samples_count(s, i);
            }
        agg_profile_t *p = NULL;
        int found = 0;
        uint64_t pw = 0, pc = 0;
        double work;
        CHECK_EQ(agg_qstore_span_profile(qs, cb, cb + 16, (cm_event_type_t)t, &p, &found), 0);
        CHECK_EQ(found, 1);
        if (p)
            agg_profile_totals(p, &pw, &pc, &work);
        agg_profile_free(p);
        CHECKF(pw == spw && pc == spc, "type %u: span %llu/%llu", t, (unsigned long long)pw,
               (unsigned long long)spw);
        types_with_span += spw > 0;
    }
    CHECK(types_with_span >= 2);
    agg_qstore_close(qs);

    /* a second handle (another instance) continues from the stored offset */
    feeder_t g;
    feeder_init(&g, path, 10);
    g.offset = 10;
    feeder_add(&g, c);
    g.b.next_offset = 20;
    CHECK_EQ(agg_store_batch_write(g.st, "t", 0, &g.b), 0);
    CHECK(agg_store_offset_get(f.st, "t", 0, &off) == 0 && off == 20);
    feeder_free(&g);
    feeder_free(&f);
    ts_gen_free(c);
}

/* Over the series of every service of the simulator (cpu, from the totals): the oldest bucket of
 * width 10 in v[0], the number of points of width 3600 in v[1], the sums in s. */
static void series_scan(const char *dir, int64_t v[2], uint64_t s[2]) {
    char err[256];
    agg_qstore_t *qs = NULL;
    CHECKF(agg_qstore_open(dir, &qs, err, sizeof err) == 0, "%s", err);
    v[0] = v[1] = 0;
    s[0] = s[1] = 0;
    for (int k = 0; k < 2 && qs; k++) {
        agg_qseries_t ser;
        CHECK_EQ(agg_qstore_timeseries(qs, k ? "svc-001" : "svc-000", CM_EV_CPU, 0, INT64_MAX,
                                       &ser), 0);
        for (size_t i = 0; i < ser.n; i++) {
            const agg_qpoint_t *r = &ser.points[i];
            if (r->width == 10 && (v[0] == 0 || r->bucket < v[0]))
                v[0] = r->bucket;
            v[1] += r->width == 3600;
            s[0] += r->weight;
            s[1]++;
        }
        agg_qseries_free(&ser);
    }
    agg_qstore_close(qs);
}

static void test_retention_downsample_and_expire(void) {
    char dir[64], path[128];
    at_tmpdir(dir, "ret");
    agg_store_path(path, sizeof path, dir, "t", 0);
    int64_t now = wall_ns();
    fsim_params_t sp = {.seed = 5, .services = 2, .versions = 2, .processes = 2,
                        .intervals = 30, .samples = 100, .stacks = 60,
                        .start_unix_ns = (uint64_t)(now - 5 * 3600 * 1000000000ll),
                        .interval_ns = 600ull * 1000000000ull};
    fsim_t *sim = fsim_new(&sp);
    feeder_t f;
    feeder_init(&f, path, 10);
    feed_sim(&f, sim);
    CHECK_EQ(at_check_truth(sim, dir, "t", 1), 0);
    agg_retention_cfg_t rc = {10, 3600, 3600, 30 * 86400, 86400, 2 * 86400};
    agg_retention_stats_t st = {0};
    CHECK_EQ(agg_retention_run(f.st, &rc, now, &st), 0);
    CHECK(st.rows_moved > 0);
    int64_t cutoff = now / 1000000000 - 3600;
    cutoff -= cutoff % 3600;
    int64_t v[2] = {0, 0};
    uint64_t sums[2];
    series_scan(dir, v, sums);
    CHECKF(v[0] >= cutoff, "fine bucket %lld older than cutoff %lld", (long long)v[0],
           (long long)cutoff);
    CHECK(v[1] > 0);
    /* downsampled: the same totals and profiles, exactly */
    CHECK_EQ(at_check_truth(sim, dir, "t", 1), 0);
    /* a second pass changes nothing */
    agg_retention_stats_t st2 = {0};
    CHECK_EQ(agg_retention_run(f.st, &rc, now, &st2), 0);
    CHECK_EQ(st2.rows_moved, 0);
    CHECK_EQ(at_check_truth(sim, dir, "t", 1), 0);
    /* expiry: max age 2 h deletes the older coarse buckets, keeps the rest */
    int64_t vb[2], va[2];
    uint64_t before[2], after[2];
    series_scan(dir, vb, before);
    rc.max_age_s = 2 * 3600;
    agg_retention_stats_t st3 = {0};
    CHECK_EQ(agg_retention_run(f.st, &rc, now, &st3), 0);
    CHECK(st3.rows_expired > 0);
    series_scan(dir, va, after);
    CHECKF(after[1] > 0 && after[1] < before[1] && after[0] < before[0],
           "points %llu -> %llu", (unsigned long long)before[1], (unsigned long long)after[1]);
    int64_t exp = now / 1000000000 - 2 * 3600;
    exp -= exp % 3600;
    /* nothing before the cutoff is left, in the profile the API reads or in the fine rows */
    for (int exact = 0; exact < 2; exact++) {
        char err[256];
        agg_qstore_t *qs = NULL;
        CHECKF(agg_qstore_open(dir, &qs, err, sizeof err) == 0, "%s", err);
        agg_qspec_t q = {.service = "svc-000", .type = CM_EV_CPU, .from_s = 0, .to_s = exp,
                         .exact = exact};
        agg_profile_t *p = NULL;
        CHECK_EQ(agg_qstore_profile(qs, &q, &p), 0);
        CHECK_EQ(p ? p->n_rows : 1, 0);
        agg_profile_free(p);
        /* and after it, some */
        q.from_s = exp;
        q.to_s = INT64_MAX;
        CHECK_EQ(agg_qstore_profile(qs, &q, &p), 0);
        CHECK(p && p->n_rows > 0);
        agg_profile_free(p);
        agg_qstore_close(qs);
    }
    feeder_free(&f);
    fsim_free(sim);
}

/* The profile of q as sorted folded lines (a canonical text: equal profiles, equal text). */
static char *folded_of(agg_qstore_t *qs, const agg_qspec_t *q, size_t *rows) {
    agg_profile_t *p = NULL;
    CHECK_EQ(agg_qstore_profile(qs, q, &p), 0);
    char *txt = NULL;
    size_t len = 0;
    CHECK_EQ(agg_export_folded(p, 0, &txt, &len), 0);
    *rows = p->n_rows;
    agg_profile_free(p);
    size_t n = 0;
    char *lines[20000], *save = NULL;
    for (char *l = strtok_r(txt, "\n", &save); l && n < 20000; l = strtok_r(NULL, "\n", &save))
        lines[n++] = l;
    qsort(lines, n, sizeof *lines, (int (*)(const void *, const void *))strcmp_ptr);
    char *out = malloc(len + n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        o += (size_t)sprintf(out + o, "%s\n", lines[i]);
    out[o] = 0;
    free(txt);
    return out;
}

typedef struct {
    agg_diff_t d;
    agg_profile_t *b, *t;
} diffres_t;

static void diff_of(agg_qstore_t *qs, const agg_qspec_t *q, const char *base, const char *test,
                    diffres_t *r) {
    agg_qspec_t qb = *q, qt = *q;
    const char *vb[1] = {base}, *vt[1] = {test};
    qb.versions = vb;
    qt.versions = vt;
    qb.n_versions = qt.n_versions = 1;
    CHECK_EQ(agg_qstore_profile(qs, &qb, &r->b), 0);
    CHECK_EQ(agg_qstore_profile(qs, &qt, &r->t), 0);
    CHECK_EQ(agg_diff_compute(r->b, r->t, NULL, &r->d), 0);
}

static void diffres_free(diffres_t *r) {
    agg_diff_free(&r->d);
    agg_profile_free(r->b);
    agg_profile_free(r->t);
}

static int cmp_entry_name(const void *a, const void *b) {
    return strcmp(((const agg_diff_entry_t *)a)->name, ((const agg_diff_entry_t *)b)->name);
}

static int close_to(double a, double b) {
    return fabs(a - b) <= 1e-9 * (fabs(a) + fabs(b)) + 1e-12;
}

/* Same functions, values and p-values (replicate forms that must agree exactly). */
static void check_same_diff(diffres_t *x, diffres_t *y, int same_p) {
    CHECK_EQ(x->d.n, y->d.n);
    CHECKF(close_to(x->d.base_total, y->d.base_total) && close_to(x->d.test_total, y->d.test_total), "totals %.9g/%.9g vs %.9g/%.9g, work %.9g/%.9g vs %.9g/%.9g", x->d.base_total, x->d.test_total, y->d.base_total, y->d.test_total, x->d.base_work, x->d.test_work, y->d.base_work, y->d.test_work);
    qsort(x->d.entries, x->d.n, sizeof *x->d.entries, cmp_entry_name);
    qsort(y->d.entries, y->d.n, sizeof *y->d.entries, cmp_entry_name);
    for (size_t i = 0; i < x->d.n; i++) {
        const agg_diff_entry_t *a = &x->d.entries[i], *b = &y->d.entries[i];
        CHECKF(!strcmp(a->name, b->name), "%s vs %s", a->name, b->name);
        CHECKF(close_to(a->base_total, b->base_total) && close_to(a->test_self, b->test_self),
               "%s: totals %g/%g vs %g/%g", a->name, a->base_total, a->test_self, b->base_total,
               b->test_self);
        if (same_p)
            CHECKF(close_to(a->p, b->p), "%s: p %g vs %g", a->name, a->p, b->p);
    }
}

/* The coarse per-stack rollup and the per-leaf rollup give exactly what the fine rows give:
 * merged profiles over aligned, unaligned and edge-straddling ranges are identical to the
 * fine-row reads; a diff from leaf replicates equals the diff from per-stack replicates when
 * the replicate width is the fine width; with 60-s replicates the totals are identical and the
 * replicates are the minutes. Also after downsampling, and for a store written before the
 * rollups existed (rebuilt from its profile table). */
static void test_derived_rollups_match_fine_rows(void) {
    char dir[64], dir2[80], path[128], path2[160], err[256];
    at_tmpdir(dir, "derived");
    snprintf(dir2, sizeof dir2, "%s/r60", dir);
    CHECK(mkdir(dir2, 0755) == 0);
    agg_store_path(path, sizeof path, dir, "t", 0);
    agg_store_path(path2, sizeof path2, dir2, "t", 0);
    int64_t now_s = wall_ns() / 1000000000;
    int64_t h = now_s - now_s % 3600 - 2 * 3600; /* an hour boundary inside the data */
    fsim_params_t sp = {.seed = 17, .services = 1, .versions = 2, .processes = 2,
                        .intervals = 720, .samples = 150, .stacks = 80, .types_mask = 1u << CM_EV_CPU,
                        .start_unix_ns = (uint64_t)(h - 1800) * 1000000000ull,
                        .interval_ns = 10ull * 1000000000ull};
    feeder_t f, f2;
    fsim_t *sim = fsim_new(&sp), *sim2 = fsim_new(&sp);
    feeder_init_rw(&f, path, 10, 10); /* replicate width = fine width */
    feeder_init_rw(&f2, path2, 10, 60);
    feed_sim(&f, sim);
    feed_sim(&f2, sim2);
    const char *svc = fsim_service_name(sim, 0), *v0 = fsim_version_name(sim, 0, 0),
               *v1 = fsim_version_name(sim, 0, 1);
    agg_qstore_t *qs, *qs2;
    CHECKF(agg_qstore_open(dir, &qs, err, sizeof err) == 0, "%s", err);
    CHECKF(agg_qstore_open(dir2, &qs2, err, sizeof err) == 0, "%s", err);
    const int64_t ranges[][2] = {{0, INT64_MAX / 4},       {h, h + 3600},
                                 {h - 1000, h + 4600},     {h + 123, h + 1500},
                                 {h - 1800, h - 1200},     {h + 3595, h + 5400}};
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
            agg_qspec_t q = {.service = svc, .type = CM_EV_CPU, .from_s = ranges[i][0],
                             .to_s = ranges[i][1]};
            size_t rows_c, rows_f;
            char *coarse = folded_of(qs, &q, &rows_c);
            q.exact = 1;
            char *fine = folded_of(qs, &q, &rows_f);
            printf("pass %d range %zu: %zu stacks from the rollups, %zu from the fine rows, "
                   "%zu bytes\n", pass, i, rows_c, rows_f, strlen(fine));
            /* after downsampling, ranges inside the merged hours hold no bucket start */
            int inside = pass == 1 && ranges[i][1] <= h + 3600 && ranges[i][0] % 3600;
            CHECK(inside ? strlen(fine) == 0 : strlen(fine) > 0);
            CHECKF(!strcmp(coarse, fine), "range %zu: merged profiles differ", i);
            free(coarse);
            free(fine);
        }
        /* diffs: leaf replicates (fine width) == per-stack replicates, same p-values */
        for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
            if (pass == 1 && ranges[i][1] <= h + 3600 && ranges[i][0] % 3600)
                continue; /* no data left there (above) */
            agg_qspec_t q = {.service = svc, .type = CM_EV_CPU, .from_s = ranges[i][0],
                             .to_s = ranges[i][1], .replicates = AGG_QREP_LEAVES};
            diffres_t a, b, c;
            diff_of(qs, &q, v0, v1, &a);
            q.replicates = AGG_QREP_STACKS;
            diff_of(qs, &q, v0, v1, &b);
            /* after downsampling an hour is one replicate: too few, per-stack ones instead */
            CHECK(!b.b->leaf_replicates && (pass || a.b->leaf_replicates));
            CHECK(a.d.base_replicates >= (pass ? 1 : 10) &&
                  a.d.base_replicates == b.d.base_replicates);
            check_same_diff(&a, &b, 1);
            /* 60-s replicates: same totals; one replicate per minute (fewer than 10 minutes:
             * the per-stack fine replicates instead) */
            q.replicates = AGG_QREP_LEAVES;
            diff_of(qs2, &q, v0, v1, &c);
            int64_t lo = ranges[i][0] > h - 1800 ? ranges[i][0] : h - 1800;
            int64_t hi = ranges[i][1] < h + 5400 ? ranges[i][1] : h + 5400;
            int64_t first = (lo + 9) / 10 * 10; /* the first 10-s bucket starting in range */
            int64_t minutes = (hi + 59) / 60 - first / 60;
            printf("pass %d range %zu: %u replicates at 10 s, %u at 60 s (%lld minutes)\n",
                   pass, i, a.d.base_replicates, c.d.base_replicates, (long long)minutes);
            if (minutes >= AGG_QMIN_LEAF_REPLICATES && pass == 0) {
                CHECK(c.b->leaf_replicates);
                CHECK_EQ((int64_t)c.d.base_replicates, minutes);
            } else if (pass == 0) {
                CHECK(!c.b->leaf_replicates);
            }
            check_same_diff(&a, &c, 0);
            diffres_free(&a);
            diffres_free(&b);
            diffres_free(&c);
        }
        if (pass == 1)
            break;
        /* downsample everything older than h + 1 h into hours, then compare again */
        agg_retention_cfg_t rc = {10, 3600, 0, 30 * 86400, 86400, 2 * 86400};
        agg_retention_stats_t st = {0};
        CHECK_EQ(agg_retention_run(f.st, &rc, (h + 3600) * 1000000000ll, &st), 0);
        CHECK(st.rows_moved > 0);
        CHECK_EQ(agg_retention_run(f2.st, &rc, (h + 3600) * 1000000000ll, &st), 0);
    }
    agg_qstore_close(qs);
    agg_qstore_close(qs2);
    /* a store written before the rollups existed: rebuilt from the profile table */
    sqlite3 *db;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "DELETE FROM profile_coarse; DELETE FROM profile_leaf; DELETE FROM "
                           "meta WHERE key IN ('coarse_width', 'replicate_width', 'tiers', "
                           "'tiers_done')",
                       NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    CHECKF(agg_qstore_open(dir, &qs, err, sizeof err) == 0, "%s", err);
    agg_qspec_t q = {.service = svc, .type = CM_EV_CPU, .from_s = h, .to_s = h + 3600};
    size_t r1, r2;
    char *before = folded_of(qs, &q, &r1);
    static const int64_t tiers[] = {60, 600, 3600};
    CHECK_EQ(f.st->vt->derive(f.st, tiers, 3, 10), 0);
    char *after = folded_of(qs, &q, &r2);
    CHECK(!strcmp(before, after));
    free(before);
    free(after);
    agg_qstore_close(qs);
    feeder_free(&f);
    feeder_free(&f2);
    fsim_free(sim);
    fsim_free(sim2);
}

/* Merged profiles from the tiers equal the fine rows' over the ranges (both paths). */
static void compare_ranges(agg_qstore_t *qs, const char *svc, const int64_t (*ranges)[2], size_t n,
                           const char *when) {
    for (size_t i = 0; i < n; i++) {
        agg_qspec_t q = {.service = svc, .type = CM_EV_CPU, .from_s = ranges[i][0],
                         .to_s = ranges[i][1]};
        size_t rows_c, rows_f;
        char *tiers = folded_of(qs, &q, &rows_c);
        q.exact = 1;
        char *fine = folded_of(qs, &q, &rows_f);
        printf("%s, range %zu: %zu stacks, %zu bytes\n", when, i, rows_f, strlen(fine));
        CHECK(strlen(fine) > 0);
        CHECKF(!strcmp(tiers, fine), "%s, range %zu: merged profiles differ", when, i);
        free(tiers);
        free(fine);
    }
}

static int64_t count_rows(const char *path, const char *sql) {
    sqlite3 *db;
    sqlite3_stmt *st;
    int64_t n = -1;
    if (sqlite3_open(path, &db) == SQLITE_OK &&
        sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
        if (sqlite3_step(st) == SQLITE_ROW)
            n = sqlite3_column_int64(st, 0);
        sqlite3_finalize(st);
    }
    sqlite3_close(db);
    return n;
}

/* Real-time data: the tiers are filled by compaction (the retention pass) once their tiles are
 * complete, and late data for a compacted period is added at ingest; before, between and after,
 * the tiers answer exactly what the fine rows answer. */
static void test_tiers_by_compaction(void) {
    char dir[64], path[128], err[256];
    at_tmpdir(dir, "compact");
    agg_store_path(path, sizeof path, dir, "t", 0);
    int64_t now_s = wall_ns() / 1000000000;
    int64_t h = now_s - now_s % 3600 + 2 * 3600; /* in the future: nothing compacted yet */
    fsim_params_t sp = {.seed = 23, .services = 1, .versions = 2, .processes = 2,
                        .intervals = 540, .samples = 120, .stacks = 60,
                        .types_mask = 1u << CM_EV_CPU,
                        .start_unix_ns = (uint64_t)(h - 1800) * 1000000000ull,
                        .interval_ns = 10ull * 1000000000ull};
    fsim_t *sim = fsim_new(&sp);
    feeder_t f;
    feeder_init(&f, path, 10);
    feed_sim(&f, sim);
    const char *svc = fsim_service_name(sim, 0);
    agg_qstore_t *qs;
    CHECKF(agg_qstore_open(dir, &qs, err, sizeof err) == 0, "%s", err);
    const int64_t ranges[][2] = {{0, INT64_MAX / 4}, {h, h + 3600}, {h - 1000, h + 3000},
                                 {h + 123, h + 1500}, {h - 1795, h - 5}};
    size_t nr = sizeof ranges / sizeof ranges[0];
    CHECK_EQ(count_rows(path, "SELECT COUNT(*) FROM profile_coarse"), 0);
    compare_ranges(qs, svc, ranges, nr, "before compaction");
    /* the retention pass an hour after the data: every tile is complete */
    CHECK_EQ(f.st->vt->compact(f.st, 10, h + 3600 + 3600), 0);
    int64_t t60 = count_rows(path, "SELECT COUNT(*) FROM profile_coarse WHERE width=60");
    int64_t t600 = count_rows(path, "SELECT COUNT(*) FROM profile_coarse WHERE width=600");
    int64_t t3600 = count_rows(path, "SELECT COUNT(*) FROM profile_coarse WHERE width=3600");
    printf("tier rows after compaction: 60 s %lld, 600 s %lld, 3600 s %lld\n", (long long)t60,
           (long long)t600, (long long)t3600);
    CHECK(t60 > t600 && t600 > t3600 && t3600 > 0);
    compare_ranges(qs, svc, ranges, nr, "after compaction");
    /* late data for the compacted period: into the fine rows and the tiers at once */
    fsim_params_t late = sp;
    late.seed = 29;
    late.intervals = 3;
    late.start_unix_ns = (uint64_t)(h + 200) * 1000000000ull;
    fsim_t *sim2 = fsim_new(&late);
    feed_sim(&f, sim2);
    compare_ranges(qs, svc, ranges, nr, "after late data");
    agg_qstore_close(qs);
    feeder_free(&f);
    fsim_free(sim);
    fsim_free(sim2);
}

static void test_store_size_bounded_under_steady_load(void) {
    char dir[64], path[128];
    at_tmpdir(dir, "size");
    agg_store_path(path, sizeof path, dir, "t", 0);
    feeder_t f;
    feeder_init(&f, path, 10);
    agg_retention_cfg_t rc = {10, 600, 1800, 3 * 3600, 3600, 3600};
    int64_t t0 = wall_ns() - 24 * 3600 * 1000000000ll, sizes[32];
    for (int round = 0; round < 32; round++) {
        /* each round: 10 simulated minutes of the same fleet, then a retention pass */
        fsim_params_t sp = {.seed = 9, .services = 2, .versions = 1, .processes = 3,
                            .intervals = 10, .samples = 100, .stacks = 80,
                            .start_unix_ns = (uint64_t)(t0 + round * 600 * 1000000000ll),
                            .interval_ns = 60ull * 1000000000ull};
        fsim_t *sim = fsim_new(&sp);
        feed_sim(&f, sim);
        fsim_free(sim);
        agg_retention_stats_t st = {0};
        CHECK_EQ(agg_retention_run(f.st, &rc, t0 + (round + 1) * 600 * 1000000000ll, &st), 0);
        /* measure the database itself: move the WAL into it first */
        sqlite3 *db;
        CHECK(sqlite3_open(path, &db) == SQLITE_OK);
        sqlite3_busy_timeout(db, 10000);
        CHECK(sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL) ==
              SQLITE_OK); /* opens the WAL on this connection */
        /* the store's checkpointer may hold the checkpoint lock at this moment: retry */
        int ck = SQLITE_BUSY;
        for (int t = 0; t < 100 && ck == SQLITE_BUSY; t++) {
            ck = sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
            if (ck == SQLITE_BUSY)
                at_sleep_ms(20);
        }
        CHECK_EQ(ck, SQLITE_OK);
        sqlite3_close(db);
        sizes[round] = agg_store_size_bytes(f.st);
    }
    /* the window is 3 h = 18 rounds: after it fills, the file stops growing */
    printf("store size: round 5 %lld, 20 %lld, 25 %lld, 31 %lld bytes\n", (long long)sizes[5],
           (long long)sizes[20], (long long)sizes[25], (long long)sizes[31]);
    CHECK(sizes[20] > sizes[5]);
    CHECKF(sizes[31] <= sizes[21] + sizes[21] / 10, "%lld > %lld", (long long)sizes[31],
           (long long)sizes[21]);
    feeder_free(&f);
}

static int64_t file_bytes(const char *path, const char *suffix) {
    char p[256];
    struct stat a;
    snprintf(p, sizeof p, "%s%s", path, suffix);
    return stat(p, &a) == 0 ? (int64_t)a.st_size : 0;
}

/* The checkpointer moves the WAL into the database while the writer commits (the database
 * grows, the WAL does not pass its bound), and truncates a WAL that a long reader pushed past
 * the bound as soon as the reader is gone. Before the fix the checkpointer's connection had
 * never opened the WAL: every checkpoint was a no-op and the .db stayed at 4 KB. */
static void test_wal_checkpointed_and_bounded(void) {
    char dir[64], path[128];
    at_tmpdir(dir, "wal");
    agg_store_path(path, sizeof path, dir, "t", 0);
    feeder_t f;
    feeder_init(&f, path, 10);
    int64_t wal_max = 0;
    for (int round = 0; round < 12; round++) {
        fsim_params_t sp = {.seed = 30 + (uint64_t)round, .services = 2, .versions = 1,
                            .processes = 2, .intervals = 4, .samples = 200, .stacks = 100};
        fsim_t *sim = fsim_new(&sp);
        feed_sim(&f, sim);
        fsim_free(sim);
        int64_t w = file_bytes(path, "-wal");
        wal_max = w > wal_max ? w : wal_max;
        at_sleep_ms(2 * AGG_CKPT_INTERVAL_MS);
        if (round == 0) /* far below the writer's own fallback: the thread checkpointed */
            CHECKF(file_bytes(path, "") > 16 * 4096, "db %lld bytes, wal %lld after %d ms",
                   (long long)file_bytes(path, ""), (long long)w, 2 * AGG_CKPT_INTERVAL_MS);
    }
    at_sleep_ms(3 * AGG_CKPT_INTERVAL_MS);
    int64_t db1 = file_bytes(path, ""), wal1 = file_bytes(path, "-wal");
    /* what is in the WAL is in the database: a checkpoint of another connection finds nothing
     * left to copy */
    sqlite3 *db;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    CHECK(sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", NULL, NULL, NULL) == SQLITE_OK);
    int nlog = -1, nckpt = -1;
    CHECK(sqlite3_wal_checkpoint_v2(db, NULL, SQLITE_CHECKPOINT_PASSIVE, &nlog, &nckpt) ==
          SQLITE_OK);
    printf("steady: db %lld bytes, wal %lld (max %lld), wal frames %d, checkpointed %d\n",
           (long long)db1, (long long)wal1, (long long)wal_max, nlog, nckpt);
    CHECKF(db1 > 64 * 4096, "the database holds %lld bytes: nothing was checkpointed",
           (long long)db1);
    CHECK(nlog >= 0);
    CHECK_EQ(nlog, nckpt);
    CHECKF(wal_max <= AGG_WAL_LIMIT_BYTES, "wal %lld", (long long)wal_max);
    /* a reader holds a snapshot while the writer commits past the bound */
    CHECK(sqlite3_exec(db, "BEGIN; SELECT count(*) FROM profile;", NULL, NULL, NULL) ==
          SQLITE_OK);
    int64_t t_ns = wall_ns() - 3600 * 1000000000ll;
    for (int round = 0; file_bytes(path, "-wal") <= AGG_WAL_LIMIT_BYTES && round < 200; round++) {
        fsim_params_t sp = {.seed = 60 + (uint64_t)round, .services = 3, .versions = 1,
                            .processes = 2, .intervals = 4, .samples = 400, .stacks = 300,
                            .start_unix_ns = (uint64_t)(t_ns + round * 600 * 1000000000ll)};
        fsim_t *sim = fsim_new(&sp);
        feed_sim(&f, sim);
        fsim_free(sim);
    }
    int64_t wal2 = file_bytes(path, "-wal");
    CHECKF(wal2 > AGG_WAL_LIMIT_BYTES, "wal %lld", (long long)wal2);
    CHECK(sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    double t0 = at_now();
    while (file_bytes(path, "-wal") > AGG_WAL_LIMIT_BYTES && at_now() < t0 + 5)
        at_sleep_ms(20);
    int64_t wal3 = file_bytes(path, "-wal");
    printf("reader held: wal %lld bytes; %.2f s after it ended: %lld\n", (long long)wal2,
           at_now() - t0, (long long)wal3);
    CHECKF(wal3 <= AGG_WAL_LIMIT_BYTES, "wal %lld", (long long)wal3);
    feeder_free(&f);
}

/* A service with many interval widths: with 32 read (the old limit) the leaf-replicate query
 * added the replicate width in front and wrote a 33rd element into widths[32] (UBSan's bounds
 * check in the sanitizer build reports it), and widths past 32 were silently left out of the
 * answer. The profile must not change when intervals rows of
 * 40 extra widths (with no profile rows, in a version that sorts first) are added. */
static void test_query_many_widths(void) {
    char dir[64], path[128], err[512];
    at_tmpdir(dir, "widths");
    agg_store_path(path, sizeof path, dir, "t", 0);
    int64_t h = wall_ns() / 1000000000 - 3 * 3600;
    h -= h % 3600;
    fsim_params_t sp = {.seed = 4, .services = 1, .versions = 1, .processes = 3, .intervals = 12,
                        .samples = 100, .stacks = 40,
                        .start_unix_ns = (uint64_t)h * 1000000000ull,
                        .interval_ns = 10ull * 1000000000ull};
    feeder_t f;
    fsim_t *sim = fsim_new(&sp);
    feeder_init_rw(&f, path, 10, 60);
    feed_sim(&f, sim);
    const char *svc = fsim_service_name(sim, 0);
    agg_qspec_t q = {.service = svc, .type = CM_EV_CPU, .from_s = 0, .to_s = INT64_MAX / 4,
                     .replicates = AGG_QREP_LEAVES};
    agg_qstore_t *qs;
    CHECKF(agg_qstore_open(dir, &qs, err, sizeof err) == 0, "%s", err);
    agg_profile_t *p0 = NULL, *p1 = NULL;
    CHECK_EQ(agg_qstore_profile(qs, &q, &p0), 0);
    agg_qstore_close(qs);
    sqlite3 *db;
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    char sql[512];
    for (int w = 0; w < 40; w++) {
        snprintf(sql, sizeof sql,
                 "INSERT INTO intervals(service, version, width, bucket, chunks, duration_ns, "
                 "agent_cpu_ns, process_cpu_ns, dropped) VALUES (%lld, -9223372036854775807, %d, "
                 "0, 0, 0, 0, 0, 0)",
                 (long long)agg_intern_string_id(svc, strlen(svc)), 120 + 60 * w);
        CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
    }
    sqlite3_close(db);
    CHECKF(agg_qstore_open(dir, &qs, err, sizeof err) == 0, "%s", err);
    CHECK_EQ(agg_qstore_profile(qs, &q, &p1), 0);
    uint64_t w0, c0, w1, c1;
    double k0, k1;
    agg_profile_totals(p0, &w0, &c0, &k0);
    agg_profile_totals(p1, &w1, &c1, &k1);
    printf("cpu weight %llu / %llu, rows %zu / %zu\n", (unsigned long long)w0,
           (unsigned long long)w1, p0->n_rows, p1->n_rows);
    CHECK(w0 > 0);
    CHECK_EQ(w1, w0);
    CHECK_EQ(c1, c0);
    agg_profile_free(p0);
    agg_profile_free(p1);
    agg_qstore_close(qs);
    /* past the limit (64): an error, never a profile missing the widths it did not read */
    CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    for (int w = 40; w < 70; w++) {
        snprintf(sql, sizeof sql,
                 "INSERT INTO intervals(service, version, width, bucket, chunks, duration_ns, "
                 "agent_cpu_ns, process_cpu_ns, dropped) VALUES (%lld, -9223372036854775807, %d, "
                 "0, 0, 0, 0, 0, 0)",
                 (long long)agg_intern_string_id(svc, strlen(svc)), 120 + 60 * w);
        CHECK(sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK);
    }
    sqlite3_close(db);
    CHECKF(agg_qstore_open(dir, &qs, err, sizeof err) == 0, "%s", err);
    p1 = NULL;
    CHECK_EQ(agg_qstore_profile(qs, &q, &p1), CM_ETOOBIG);
    agg_profile_free(p1);
    agg_qstore_close(qs);
    feeder_free(&f);
    fsim_free(sim);
}

/* ---- end to end with Kafka ---- */

static char bootstrap[64];

static void rej_cb(int64_t *v, const char *reason, int64_t count) {
    static const char *const names[] = {"EMAGIC", "ETRUNCATED", "EVERSION", "ECHECKSUM"};
    for (int k = 0; k < 4; k++)
        if (!strcmp(reason, names[k]))
            v[k] += count;
    v[4] += count;
}

static void test_e2e_exact_totals_duplicates_dlq(void) {
    ts_kafka_stop(PORT, 0); /* a broker left by a failed earlier run of this test */
    CHECK(ts_kafka_start(PORT, NPARTS, NULL, bootstrap, sizeof bootstrap) == 0);
    char dir[64], log[128];
    at_tmpdir(dir, "e2e");
    snprintf(log, sizeof log, "%s/agg.log", dir);
    fsim_params_t sp = {.seed = 11, .services = 8, .versions = 2, .processes = 3, .intervals = 5,
                        .samples = 300, .stacks = 120, .duplicate_every = 5,
                        .malformed_every = 11};
    fsim_t *sim = fsim_new(&sp);
    rd_kafka_t *rk = at_producer(bootstrap);
    CHECK(rk != NULL);
    CHECK(at_topic_empty(rk, CM_TOPIC_CHUNKS, NPARTS));
    CHECK(fsim_produce(sim, rk, CM_TOPIC_CHUNKS, 0) == 0);
    const fsim_counts_t *n = fsim_counts(sim);
    CHECK(n->duplicates > 10);
    int64_t hi[NPARTS];
    CHECK(at_high_watermarks(rk, CM_TOPIC_CHUNKS, NPARTS, hi) == 0);
    int64_t total = 0;
    for (int p = 0; p < NPARTS; p++)
        total += hi[p];
    CHECK_EQ(total, n->messages);

    char group[96];
    snprintf(group, sizeof group, "%s", at_group_id("e2e"));
    pid_t pid = at_agg_start(bootstrap, dir, group, HTTP_PORT, log, NULL);
    CHECK(pid > 0);
    CHECKF(at_wait_caught_up(dir, CM_TOPIC_CHUNKS, NPARTS, hi, 120) == 0, "see %s", log);
    char body[65536];
    CHECK_EQ(at_http_get(HTTP_PORT, "/healthz", body, sizeof body), 200);
    /* metrics lag the store by at most one batch: poll */
    int ok = 0;
    char want[128];
    snprintf(want, sizeof want, "fleetprof_aggregator_rejects_total{reason=\"EVERSION\"} %llu",
             (unsigned long long)n->bad[FSIM_BAD_MAJOR]);
    for (double end = at_now() + 20; !ok && at_now() < end; at_sleep_ms(200))
        ok = at_http_get(HTTP_PORT, "/metrics", body, sizeof body) == 200 && strstr(body, want) &&
             strstr(body, "fleetprof_aggregator_lag_messages{partition=\"0\"} 0");
    CHECKF(ok, "%s", body);
    CHECK(strstr(body, "fleetprof_aggregator_write_seconds_count"));
    CHECK(strstr(body, "fleetprof_aggregator_store_bytes"));
    int st = at_agg_stop(pid, SIGTERM, 30);
    CHECKF(st >= 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "status %d, see %s", st, log);

    CHECK_EQ(at_check_truth(sim, dir, CM_TOPIC_CHUNKS, NPARTS), 0);
    /* rejects are stored with the data: exact per reason */
    int64_t rej[5] = {0};
    {
        char err[256];
        agg_qstore_t *qs = NULL;
        agg_qreject_t *r = NULL;
        size_t nr = 0;
        CHECKF(agg_qstore_open(dir, &qs, err, sizeof err) == 0, "%s", err);
        CHECK_EQ(agg_qstore_rejects(qs, &r, &nr), 0);
        for (size_t i = 0; i < nr; i++)
            rej_cb(rej, r[i].reason, (int64_t)r[i].count);
        for (size_t i = 1; i < nr; i++) /* sorted by reason, each reason once */
            CHECK(strcmp(r[i - 1].reason, r[i].reason) < 0);
        agg_qrejects_free(r, nr);
        agg_qstore_close(qs);
    }
    CHECK_EQ(rej[0], n->bad[FSIM_BAD_RANDOM]);
    CHECK_EQ(rej[1], n->bad[FSIM_BAD_TRUNCATED]);
    CHECK_EQ(rej[2], n->bad[FSIM_BAD_MAJOR]);
    CHECK_EQ(rej[3], n->bad[FSIM_BAD_CORRUPT]);
    CHECK_EQ(rej[4], n->bad[0] + n->bad[1] + n->bad[2] + n->bad[3]);

    /* the DLQ holds every malformed message with its reason */
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, err, sizeof err);
    rd_kafka_conf_set(conf, "group.id", "dlq-reader", err, sizeof err);
    rd_kafka_t *c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    CHECK(c != NULL);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, CM_TOPIC_DLQ, 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
    CHECK(rd_kafka_assign(c, l) == 0);
    rd_kafka_topic_partition_list_destroy(l);
    int64_t got = 0, with_reason = 0, versions = 0;
    for (double end = at_now() + 30; got < rej[4] && at_now() < end;) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 200);
        if (!m)
            continue;
        if (!m->err) {
            got++;
            rd_kafka_headers_t *h;
            const void *v;
            size_t vl;
            if (rd_kafka_message_headers(m, &h) == 0 &&
                rd_kafka_header_get_last(h, CM_HDR_DLQ_REASON, &v, &vl) == 0 && vl > 3) {
                with_reason++;
                versions += vl >= 8 && !memcmp(v, "EVERSION", 8);
            }
        }
        rd_kafka_message_destroy(m);
    }
    CHECK_EQ(got, rej[4]);
    CHECK_EQ(with_reason, rej[4]);
    CHECK_EQ(versions, n->bad[FSIM_BAD_MAJOR]);
    rd_kafka_consumer_close(c);
    rd_kafka_destroy(c);

    /* restart on the same store: nothing is consumed twice */
    pid = at_agg_start(bootstrap, dir, group, HTTP_PORT, log, NULL);
    at_sleep_ms(3000);
    CHECK(at_agg_stop(pid, SIGTERM, 30) >= 0);
    CHECK_EQ(at_check_truth(sim, dir, CM_TOPIC_CHUNKS, NPARTS), 0);
    rd_kafka_destroy(rk);
    fsim_free(sim);
    CHECK(ts_kafka_stop(PORT, 0) == 0);
}

static void test_bad_config_is_reported(void) {
    char dir[64], log[128], buf[4096];
    at_tmpdir(dir, "cfg");
    snprintf(log, sizeof log, "%s/agg.log", dir);
    /* the bad value of each check: exit 2 and a message naming the option and the fix */
    static const char *const bad[][3] = {
        {"--coarse-width", "25s", "coarse-width 25s must be a positive multiple of fine-width 10s"},
        {"--store-dir", "/nonexistent/x", "store-dir '/nonexistent/x' is not a writable directory"},
        {"--replicate-width", "45s", "replicate-width 45s must be whole seconds, a multiple of "
                                     "fine-width 10s and divide coarse-width 3600s"},
        {"--report-fold", "burn(", "report-fold 'burn(' is not an extended regular expression"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *x[] = {bad[i][0], bad[i][1], NULL};
        pid_t pid = at_agg_start("127.0.0.1:1", dir, "g", 0, log, x);
        int st;
        waitpid(pid, &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
        FILE *f = fopen(log, "r");
        CHECK(f != NULL);
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        fclose(f);
        CHECKF(strstr(buf, bad[i][2]), "%s", buf);
    }
}

static const tr_test_t tests[] = {
    {"store_roundtrip_and_fencing", test_store_roundtrip_and_fencing},
    {"retention_downsample_and_expire", test_retention_downsample_and_expire},
    {"derived_rollups_match_fine_rows", test_derived_rollups_match_fine_rows},
    {"tiers_by_compaction", test_tiers_by_compaction},
    {"store_size_bounded_under_steady_load", test_store_size_bounded_under_steady_load},
    {"wal_checkpointed_and_bounded", test_wal_checkpointed_and_bounded},
    {"query_many_widths", test_query_many_widths},
    {"bad_config_is_reported", test_bad_config_is_reported},
    {"e2e_exact_totals_duplicates_dlq", test_e2e_exact_totals_duplicates_dlq},
    {0, 0},
};
TR_MAIN(tests)
