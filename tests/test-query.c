/* Tests of the query layer's profile model, views, filters, exports and statistics on
 * hand-made profiles with exact expected outputs. */
#include "pattern.h"
#include "query.h"
#include "support/chunkgen.h"
#include "support/runner.h"

#include "cm/error.h"

#include <math.h>
#include <sys/resource.h>
#include <time.h>

/* The hand-made profile (weights in ns, one event = one sample per weight unit of 1):
 *   main;a;malloc          10
 *   main;a;memcpy          20
 *   main;b;malloc          30
 *   main;b                  5
 *   main;rec;rec;rec        7   (recursion)
 *   main;a;malloc;memcpy    3   (libc calling libc)
 * total 75; malloc and memcpy are in libc.so.6, the rest in app. */
typedef struct {
    agg_profile_t *p;
    uint32_t main, a, b, malloc_, memcpy_, rec;
} fixture_t;

static uint32_t stk(agg_profile_t *p, const uint32_t *f, uint32_t n) {
    int64_t id = agg_profile_stack(p, f, n);
    CHECK(id >= 0);
    return (uint32_t)id;
}

static fixture_t fixture(void) {
    fixture_t x;
    x.p = agg_profile_new(CM_EV_CPU);
    CHECK(x.p);
    x.main = (uint32_t)agg_profile_frame(x.p, "main", "app", "abcd", 0x1000);
    x.a = (uint32_t)agg_profile_frame(x.p, "a", "app", "abcd", 0x1100);
    x.b = (uint32_t)agg_profile_frame(x.p, "b", "app", "abcd", 0x1200);
    x.malloc_ = (uint32_t)agg_profile_frame(x.p, "malloc", "libc.so.6", "ef01", 0x7000);
    x.memcpy_ = (uint32_t)agg_profile_frame(x.p, "memcpy", "libc.so.6", "ef01", 0x7100);
    x.rec = (uint32_t)agg_profile_frame(x.p, "rec", "app", "abcd", 0x1300);
    CHECK(x.rec == 5 && x.main == 0);
    CHECK(agg_profile_frame(x.p, "main", "app", NULL, 0) == x.main); /* interned */
    int64_t r0 = agg_profile_replicate(x.p, "r0", 10.0);
    CHECK(r0 == 0);
    uint32_t s1[] = {x.main, x.a, x.malloc_}, s2[] = {x.main, x.a, x.memcpy_},
             s3[] = {x.main, x.b, x.malloc_}, s4[] = {x.main, x.b},
             s5[] = {x.main, x.rec, x.rec, x.rec}, s6[] = {x.main, x.a, x.malloc_, x.memcpy_};
    CHECK_EQ(agg_profile_add(x.p, stk(x.p, s1, 3), 10, 10000, 0, 0), 0);
    CHECK_EQ(agg_profile_add(x.p, stk(x.p, s2, 3), 20, 20000, 0, 0), 0);
    CHECK_EQ(agg_profile_add(x.p, stk(x.p, s3, 3), 30, 30000, 0, 0), 0);
    CHECK_EQ(agg_profile_add(x.p, stk(x.p, s4, 2), 5, 5000, 0, 0), 0);
    CHECK_EQ(agg_profile_add(x.p, stk(x.p, s5, 4), 7, 7000, 0, 0), 0);
    CHECK_EQ(agg_profile_add(x.p, stk(x.p, s6, 4), 3, 3000, 0, 0), 0);
    CHECK(stk(x.p, s1, 3) == 0); /* stacks interned */
    return x;
}

static void test_builder_errors(void) {
    agg_profile_t *p = agg_profile_new(CM_EV_CPU);
    uint32_t bad[] = {3};
    CHECK_EQ(agg_profile_stack(p, bad, 1), CM_ERANGE);
    CHECK_EQ(agg_profile_add(p, 0, 1, 1, 0, 0), CM_ERANGE);
    CHECK_EQ(agg_profile_replicate(p, "x", -1), CM_EINVAL);
    CHECK_EQ(agg_profile_replicate(p, "x", NAN), CM_EINVAL);
    CHECK_EQ(agg_profile_replicate(p, "x", 1.5), 0);
    CHECK_EQ(agg_profile_replicate(p, "x", 2.5), 0); /* same key: work adds */
    CHECK(p->replicates[0].work == 4.0);
    uint8_t z[24] = {0}, t[16] = {1}, s[8] = {2};
    CHECK_EQ(agg_profile_context(p, z, z + 16), 0);
    CHECK_EQ(agg_profile_context(p, t, s), 1);
    CHECK_EQ(agg_profile_context(p, t, s), 1);
    CHECK_EQ(agg_profile_frame(p, NULL, NULL, NULL, 0), 0);
    CHECK(strcmp(p->frames[0].name, "[unknown]") == 0);
    agg_profile_free(p);
}

static const agg_top_entry_t *find_top(const fixture_t *x, const agg_top_t *t, uint32_t f) {
    for (size_t i = 0; i < t->n; i++)
        if (t->entries[i].frame == f)
            return &t->entries[i];
    CHECKF(0, "frame %u not in top", f);
    return NULL;
    (void)x;
}

static void test_top(void) {
    fixture_t x = fixture();
    agg_top_t t;
    CHECK_EQ(agg_top_compute(x.p, AGG_SORT_SELF, 0, &t), 0);
    CHECK_EQ(t.total, 75);
    CHECK_EQ(t.n, 6);
    CHECK_EQ(t.entries[0].frame, x.malloc_);
    CHECK_EQ(t.entries[0].self, 40);
    CHECK_EQ(t.entries[0].total, 43);
    CHECK_EQ(t.entries[1].frame, x.memcpy_);
    CHECK_EQ(t.entries[1].self, 23);
    CHECK_EQ(find_top(&x, &t, x.rec)->total, 7); /* recursion once: not 21 */
    CHECK_EQ(find_top(&x, &t, x.rec)->self, 7);
    CHECK_EQ(find_top(&x, &t, x.rec)->total_count, 7000);
    CHECK_EQ(find_top(&x, &t, x.main)->total, 75);
    CHECK_EQ(find_top(&x, &t, x.a)->total, 33);
    CHECK_EQ(find_top(&x, &t, x.b)->total, 35);
    agg_top_free(&t);
    CHECK_EQ(agg_top_compute(x.p, AGG_SORT_TOTAL, 2, &t), 0);
    CHECK_EQ(t.n, 2);
    CHECK_EQ(t.n_functions, 6);
    CHECK_EQ(t.entries[0].frame, x.main);
    CHECK_EQ(t.entries[1].frame, x.malloc_);
    agg_top_free(&t);
    agg_profile_free(x.p);
}

static void test_callers(void) {
    fixture_t x = fixture();
    agg_callers_t c;
    CHECK_EQ(agg_callers_compute(x.p, x.malloc_, &c), 0);
    CHECK_EQ(c.total, 43);
    CHECK_EQ(c.self, 40);
    CHECK_EQ(c.n_callers, 2);
    CHECK_EQ(c.callers[0].frame, x.b);
    CHECK_EQ(c.callers[0].value, 30);
    CHECK_EQ(c.callers[1].frame, x.a);
    CHECK_EQ(c.callers[1].value, 13);
    CHECK_EQ(c.n_callees, 1);
    CHECK_EQ(c.callees[0].frame, x.memcpy_);
    CHECK_EQ(c.callees[0].value, 3);
    agg_callers_free(&c);
    /* recursion: rec's callers are main and rec, each counted once for the sample */
    CHECK_EQ(agg_callers_compute(x.p, x.rec, &c), 0);
    CHECK_EQ(c.total, 7);
    CHECK_EQ(c.self, 7);
    CHECK_EQ(c.n_callers, 2);
    CHECK_EQ(c.callers[0].value, 7);
    CHECK_EQ(c.callers[1].value, 7);
    CHECK_EQ(c.n_callees, 1);
    CHECK_EQ(c.callees[0].frame, x.rec);
    CHECK_EQ(c.callees[0].value, 7);
    agg_callers_free(&c);
    CHECK_EQ(agg_callers_compute(x.p, 99, &c), CM_ERANGE);
    CHECK_EQ(agg_profile_find_frame(x.p, "libc.so.6!memcpy"), x.memcpy_);
    CHECK_EQ(agg_profile_find_frame(x.p, "rec"), x.rec);
    CHECK(agg_profile_find_frame(x.p, "nope") == AGG_NONE);
    agg_profile_free(x.p);
}

/* Checks total = self + sum(children) at every node and returns the node count. */
static size_t check_conservation(const agg_tree_t *t) {
    for (size_t i = 0; i < t->n; i++) {
        uint64_t sum = t->nodes[i].self;
        for (uint32_t c = t->nodes[i].first_child; c != AGG_NONE; c = t->nodes[c].next_sibling) {
            CHECK_EQ(t->nodes[c].parent, i);
            sum += t->nodes[c].total;
        }
        CHECKF(sum == t->nodes[i].total, "node %zu: total %llu, self + children %llu", i,
               (unsigned long long)t->nodes[i].total, (unsigned long long)sum);
    }
    return t->n;
}

static uint32_t child_named(const agg_profile_t *p, const agg_tree_t *t, uint32_t node,
                            const char *name) {
    for (uint32_t c = t->nodes[node].first_child; c != AGG_NONE; c = t->nodes[c].next_sibling) {
        const char *n = t->nodes[c].frame == AGG_TREE_OTHER ? "(other)" : p->frames[t->nodes[c].frame].name;
        if (strcmp(n, name) == 0)
            return c;
    }
    return AGG_NONE;
}

static void test_tree(void) {
    fixture_t x = fixture();
    agg_tree_t t;
    CHECK_EQ(agg_tree_compute(x.p, 0.0, 0, &t), 0);
    CHECK_EQ(t.nodes[0].total, 75);
    CHECK_EQ(check_conservation(&t), 11); /* root + 10 distinct call paths */
    CHECK_EQ(t.n_truncated, 0);
    agg_tree_free(&t);
    /* min share 10% (7.5): rec (7) and a;malloc;memcpy (3) go to "(other)" */
    CHECK_EQ(agg_tree_compute(x.p, 0.10, 0, &t), 0);
    check_conservation(&t);
    uint32_t m = child_named(x.p, &t, 0, "main");
    CHECK(m != AGG_NONE);
    CHECK_EQ(t.nodes[m].total, 75);
    uint32_t first = t.nodes[m].first_child;
    CHECK_EQ(t.nodes[first].frame, x.b); /* sorted by total: b 35, a 33 */
    uint32_t other = child_named(x.p, &t, m, "(other)");
    CHECK(other != AGG_NONE && t.nodes[other].total == 7 && t.nodes[other].total_count == 7000);
    uint32_t a = child_named(x.p, &t, m, "a");
    uint32_t ma = child_named(x.p, &t, a, "malloc");
    CHECK_EQ(t.nodes[ma].total, 13);
    CHECK_EQ(t.nodes[ma].self, 10);
    CHECK_EQ(t.nodes[child_named(x.p, &t, ma, "(other)")].total, 3);
    CHECK_EQ(t.n_truncated, 2);
    agg_tree_free(&t);
    /* node limit 3: root, main, b; the rest is accounted */
    CHECK_EQ(agg_tree_compute(x.p, 0.0, 3, &t), 0);
    check_conservation(&t);
    m = child_named(x.p, &t, 0, "main");
    CHECK(child_named(x.p, &t, m, "b") != AGG_NONE);
    CHECK_EQ(t.nodes[child_named(x.p, &t, m, "(other)")].total, 40);
    CHECK_EQ(t.nodes[child_named(x.p, &t, m, "b")].total, 35);
    CHECK_EQ(t.nodes[child_named(x.p, &t, m, "b")].self, 5);
    agg_tree_free(&t);
    CHECK_EQ(agg_tree_compute(x.p, 1.0, 0, &t), CM_EINVAL);
    agg_profile_free(x.p);
}

/* Conservation on realistic generated chunks, for many shares and limits. */
static void test_tree_conservation_random(void) {
    ts_gen_params_t gp = ts_gen_realistic();
    for (uint64_t seed = 1; seed <= 5; seed++) {
        agg_profile_t *p = agg_profile_new(CM_EV_CPU);
        cm_chunk_t *c = ts_gen_chunk(&gp, seed);
        CHECK_EQ(agg_profile_add_chunk(p, c), 0);
        uint64_t total;
        agg_profile_totals(p, &total, NULL, NULL);
        double shares[] = {0, 0.001, 0.01, 0.05, 0.2};
        size_t limits[] = {0, 1, 10, 100};
        for (size_t i = 0; i < 5; i++)
            for (size_t j = 0; j < 4; j++) {
                agg_tree_t t;
                CHECK_EQ(agg_tree_compute(p, shares[i], limits[j], &t), 0);
                CHECK_EQ(t.nodes[0].total, total);
                check_conservation(&t);
                size_t real = 0;
                for (size_t k = 1; k < t.n; k++)
                    real += t.nodes[k].frame != AGG_TREE_OTHER;
                if (limits[j])
                    CHECK(real + 1 <= limits[j]);
                agg_tree_free(&t);
            }
        ts_gen_free(c);
        agg_profile_free(p);
    }
}

static void test_chunk_import(void) {
    ts_gen_params_t gp = ts_gen_realistic();
    cm_chunk_t *c = ts_gen_chunk(&gp, 7);
    agg_profile_t *p = agg_profile_new(CM_EV_CPU);
    CHECK_EQ(agg_profile_add_chunk(p, c), 0);
    const cm_samples_t *s = &c->samples[CM_EV_CPU];
    uint64_t w = 0, n = 0, wp, np;
    uint32_t with_ctx = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        w += s->weight[i];
        n += cm_samples_count(s, i);
        with_ctx += CM_COL(s, context, i) != 0;
    }
    double work;
    agg_profile_totals(p, &wp, &np, &work);
    CHECK_EQ(wp, w);
    CHECK_EQ(np, n);
    CHECK_EQ(p->n_replicates, 1);
    CHECK(fabs(work - (double)(c->header.end_unix_ns - c->header.start_unix_ns) / 1e9) < 1e-9);
    CHECK(with_ctx > 0 && p->n_contexts > 1);
    size_t rows_ctx = 0;
    for (size_t i = 0; i < p->n_rows; i++)
        rows_ctx += p->rows[i].context != 0;
    CHECK_EQ(rows_ctx, with_ctx);
    ts_gen_free(c);
    agg_profile_free(p);
}

static void test_select_context_and_spans(void) {
    fixture_t x = fixture();
    uint8_t t1[16] = {0xaa}, sp1[8] = {0x01}, sp2[8] = {0x02};
    uint32_t c1 = (uint32_t)agg_profile_context(x.p, t1, sp1);
    uint32_t c2 = (uint32_t)agg_profile_context(x.p, t1, sp2);
    uint32_t ka[] = {x.main, x.a}, kb[] = {x.main, x.b};
    uint32_t sa = stk(x.p, ka, 2), sb = stk(x.p, kb, 2);
    CHECK_EQ(agg_profile_add(x.p, sa, 100, 1000, 0, c1), 0);
    CHECK_EQ(agg_profile_add(x.p, sb, 200, 2000, 0, c2), 0);
    agg_profile_t *one = NULL;
    CHECK_EQ(agg_profile_select_context(x.p, NULL, sp1, &one), 0);
    CHECK_EQ(one->n_rows, 1);
    CHECK_EQ(one->rows[0].stack, sa);
    agg_profile_free(one);
    CHECK_EQ(agg_profile_select_context(x.p, t1, NULL, &one), 0);
    CHECK_EQ(one->n_rows, 2);
    agg_profile_free(one);
    agg_span_cost_t spans[3];
    memset(spans, 0, sizeof spans);
    for (int i = 0; i < 3; i++)
        spans[i].span_id[7] = (uint8_t)(i + 1);
    agg_span_cost_add(&spans[0], CM_EV_CPU, 50, 5000, 10);
    agg_span_cost_add(&spans[1], CM_EV_CPU, 90, 9000, 20);
    agg_span_cost_add(&spans[2], CM_EV_ALLOC, 4096, 1000, 30);
    agg_span_cost_add(&spans[2], CM_EV_CPU, 10, 1000, 5);
    CHECK_EQ(spans[2].start_ns, 5);
    CHECK_EQ(spans[2].end_ns, 30);
    CHECK_EQ(agg_span_rank(spans, 3, CM_EV_CPU, 2), 2);
    CHECK_EQ(spans[0].span_id[7], 2);
    CHECK_EQ(spans[1].span_id[7], 1);
    CHECK_EQ(agg_span_rank(spans, 3, CM_EV_ALLOC, 0), 3);
    CHECK_EQ(spans[0].span_id[7], 3);
    json_t *j = agg_span_json(spans, 1, CM_EV_ALLOC);
    CHECK(json_array_size(j) == 1);
    json_t *e = json_array_get(j, 0);
    CHECK(strcmp(json_string_value(json_object_get(e, "span_id")), "0000000000000003") == 0);
    CHECK(json_integer_value(json_object_get(json_object_get(e, "cost"), "alloc")) == 4096);
    CHECK(json_integer_value(json_object_get(json_object_get(e, "cost"), "cpu")) == 10);
    json_decref(j);
    agg_profile_free(x.p);
}

static char *folded(const agg_profile_t *p) {
    char *s;
    size_t n;
    CHECK_EQ(agg_export_folded(p, 0, &s, &n), 0);
    CHECK_EQ(strlen(s), n);
    return s;
}

#define CHECK_STR(got, want) CHECKF(strcmp((got), (want)) == 0, "got\n%s\nwant\n%s", (got), (want))

static void test_folded(void) {
    fixture_t x = fixture();
    char *s = folded(x.p);
    CHECK_STR(s, "main;b;malloc 30\nmain;a;memcpy 20\nmain;a;malloc 10\nmain;rec;rec;rec 7\n"
                 "main;b 5\nmain;a;malloc;memcpy 3\n");
    free(s);
    size_t n;
    CHECK_EQ(agg_export_folded(x.p, 1, &s, &n), 0); /* counts: events */
    CHECK(strncmp(s, "main;b;malloc 30000\n", 20) != 0 && strncmp(s, "main;b;malloc 30\n", 17) == 0);
    free(s);
    /* ';' in a name is escaped, spaces stay as they are */
    agg_profile_t *p = agg_profile_new(CM_EV_WALL);
    uint32_t f[2] = {(uint32_t)agg_profile_frame(p, "operator new(unsigned long)", NULL, NULL, 0),
                     (uint32_t)agg_profile_frame(p, "a;b", NULL, NULL, 0)};
    agg_profile_replicate(p, "r", 1);
    CHECK_EQ(agg_profile_add(p, stk(p, f, 2), 9, 1000, 0, 0), 0);
    CHECK_EQ(agg_profile_add(p, stk(p, f, 0), 1, 1000, 0, 0), 0);
    s = folded(p);
    CHECK_STR(s, "operator new(unsigned long);a:b 9\n[unknown] 1\n");
    free(s);
    agg_profile_free(p);
    agg_profile_free(x.p);
}

static agg_profile_t *filtered(const agg_profile_t *in, const agg_filter_t *f) {
    agg_profile_t *out = NULL;
    char err[256];
    int rc = agg_profile_filter(in, f, &out, err, sizeof err);
    CHECKF(rc == 0, "%s", err);
    return out;
}

static void test_filters(void) {
    fixture_t x = fixture();
    const char *exc[] = {"!rec$"}, *inc[] = {"^libc"}, *inc2[] = {"!a$", "^libc"},
               *fold[] = {"^libc\\.so"};
    agg_filter_t f = {0};
    f.exclude = exc;
    f.n_exclude = 1;
    agg_profile_t *p = filtered(x.p, &f);
    char *s = folded(p);
    CHECK_STR(s, "main;b;malloc 30\nmain;a;memcpy 20\nmain;a;malloc 10\nmain;b 5\n"
                 "main;a;malloc;memcpy 3\n");
    free(s);
    agg_profile_free(p);

    memset(&f, 0, sizeof f);
    f.include = inc;
    f.n_include = 1;
    p = filtered(x.p, &f);
    s = folded(p);
    CHECK_STR(s, "main;b;malloc 30\nmain;a;memcpy 20\nmain;a;malloc 10\nmain;a;malloc;memcpy 3\n");
    free(s);
    agg_profile_free(p);

    f.include = inc2; /* every include pattern must match: in a AND in libc */
    f.n_include = 2;
    p = filtered(x.p, &f);
    s = folded(p);
    CHECK_STR(s, "main;a;memcpy 20\nmain;a;malloc 10\nmain;a;malloc;memcpy 3\n");
    free(s);
    agg_profile_free(p);

    memset(&f, 0, sizeof f);
    f.group_by_module = 1;
    p = filtered(x.p, &f);
    s = folded(p);
    CHECK_STR(s, "app;libc.so.6 63\napp 12\n");
    free(s);
    agg_top_t t;
    CHECK_EQ(agg_top_compute(p, AGG_SORT_SELF, 0, &t), 0);
    CHECK_EQ(t.n, 2);
    CHECK_EQ(t.entries[0].self, 63);
    CHECK(strcmp(p->frames[t.entries[0].frame].name, "libc.so.6") == 0);
    agg_top_free(&t);
    agg_profile_free(p);

    memset(&f, 0, sizeof f);
    agg_group_rule_t g[] = {{"^libc", "LIBC"}};
    f.group = g;
    f.n_group = 1;
    p = filtered(x.p, &f);
    s = folded(p);
    CHECK_STR(s, "main;a;LIBC 33\nmain;b;LIBC 30\nmain;rec;rec;rec 7\nmain;b 5\n");
    free(s);
    agg_profile_free(p);

    memset(&f, 0, sizeof f);
    f.fold = fold;
    f.n_fold = 1;
    p = filtered(x.p, &f);
    s = folded(p);
    CHECK_STR(s, "main;b 35\nmain;a 33\nmain;rec;rec;rec 7\n");
    free(s);
    CHECK_EQ(agg_top_compute(p, AGG_SORT_SELF, 0, &t), 0);
    CHECK_EQ(t.entries[0].frame, (uint32_t)agg_profile_find_frame(p, "b"));
    CHECK_EQ(t.entries[0].self, 35);
    agg_top_free(&t);
    agg_profile_free(p);

    /* replicates keep their process groups (a filtered diff still sees processes) */
    int64_t r1 = agg_profile_replicate(x.p, "proc 7 bucket 1", 1.0);
    int64_t r2 = agg_profile_replicate(x.p, "proc 7 bucket 2", 1.0);
    CHECK(r1 >= 0 && r2 >= 0);
    CHECK_EQ(agg_profile_replicate_group(x.p, (uint32_t)r1, 7), 0);
    CHECK_EQ(agg_profile_replicate_group(x.p, (uint32_t)r2, 7), 0);
    memset(&f, 0, sizeof f);
    f.exclude = exc;
    f.n_exclude = 1;
    p = filtered(x.p, &f);
    CHECK_EQ(p->n_replicates, x.p->n_replicates);
    for (uint32_t i = 0; i < p->n_replicates; i++)
        CHECKF(p->replicates[i].group == x.p->replicates[i].group, "replicate %u group %u, was %u",
               i, p->replicates[i].group, x.p->replicates[i].group);
    agg_profile_free(p);

    /* a malformed pattern is named in the error */
    const char *bad[] = {"x("};
    memset(&f, 0, sizeof f);
    f.exclude = bad;
    f.n_exclude = 1;
    char err[256] = "";
    p = NULL;
    CHECK_EQ(agg_profile_filter(x.p, &f, &p, err, sizeof err), CM_EINVAL);
    CHECK(p == NULL);
    CHECKF(strstr(err, "exclude pattern 'x('") != NULL, "%s", err);
    agg_profile_free(x.p);
}

/* Patterns that take glibc's regcomp over a second and a gigabyte (the 27-byte nested counted
 * repetition) are refused within 100 ms and 64 MiB; what ERE allows still works, bounded. */
static void test_patterns_bounded(void) {
    fixture_t x = fixture();
    char big[AGG_PATTERN_MAX_LEN + 2];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    const char *pats[] = {"((a{1,100}){1,100}){1,100}", "(a{1,1000}){1,1000}", big};
    for (size_t i = 0; i < 3; i++) {
        struct rusage r0, r1;
        struct timespec t0, t1;
        getrusage(RUSAGE_SELF, &r0);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        agg_filter_t f = {0};
        f.include = &pats[i];
        f.n_include = 1;
        agg_profile_t *p = NULL;
        char err[256] = "";
        int rc = agg_profile_filter(x.p, &f, &p, err, sizeof err);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        getrusage(RUSAGE_SELF, &r1);
        double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        long grown_kib = r1.ru_maxrss - r0.ru_maxrss;
        CHECKF(secs < 0.1 && grown_kib <= 64 * 1024, "pattern %zu: %.3f s, +%ld KiB", i, secs,
               grown_kib);
        CHECKF(rc == CM_EINVAL && p == NULL && strstr(err, "include pattern '"), "%d %s", rc, err);
    }
    /* ERE as before: classes, alternation, anchors at the label's ends, \. and \w */
    const char *ok[][2] = {{"!ma[[:alpha:]]n$", "75"},   {"!(memcpy|rec)$", "30"},
                           {"^libc\\.so\\.6!m", "63"}, {"^app!\\w$", "68"},
                           {"^main", "0"},               {"a{1,3}l{2}", "43"}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        agg_filter_t f = {0};
        f.include = &ok[i][0];
        f.n_include = 1;
        agg_profile_t *p = filtered(x.p, &f);
        int64_t total = 0;
        for (size_t k = 0; k < p->n_rows; k++)
            total += (int64_t)p->rows[k].weight;
        CHECKF(total == atoll(ok[i][1]), "%s: %lld, want %s", ok[i][0], (long long)total,
               ok[i][1]);
        agg_profile_free(p);
    }
    agg_profile_free(x.p);
}

static void test_json_views(void) {
    fixture_t x = fixture();
    agg_top_t t;
    CHECK_EQ(agg_top_compute(x.p, AGG_SORT_SELF, 3, &t), 0);
    json_t *j = agg_top_json(x.p, &t);
    CHECK(j);
    CHECK(strcmp(json_string_value(json_object_get(j, "event_type")), "cpu") == 0);
    CHECK(strcmp(json_string_value(json_object_get(j, "unit")), "nanoseconds") == 0);
    CHECK(json_integer_value(json_object_get(j, "total")) == 75);
    json_t *fs = json_object_get(j, "functions");
    CHECK(json_array_size(fs) == 3);
    json_t *f0 = json_array_get(fs, 0);
    CHECK(strcmp(json_string_value(json_object_get(f0, "name")), "malloc") == 0);
    CHECK(strcmp(json_string_value(json_object_get(f0, "module")), "libc.so.6") == 0);
    CHECK(json_integer_value(json_object_get(f0, "self")) == 40);
    CHECK(json_integer_value(json_object_get(f0, "total")) == 43);
    CHECK(fabs(json_real_value(json_object_get(f0, "self_samples")) - 40) < 1e-9);
    json_decref(j);
    agg_top_free(&t);

    agg_tree_t tr;
    CHECK_EQ(agg_tree_compute(x.p, 0.1, 0, &tr), 0);
    j = agg_tree_json(x.p, &tr);
    json_t *root = json_object_get(j, "root");
    CHECK(strcmp(json_string_value(json_object_get(root, "name")), "(all)") == 0);
    json_t *mn = json_array_get(json_object_get(root, "children"), 0);
    CHECK(strcmp(json_string_value(json_object_get(mn, "name")), "main") == 0);
    json_t *kids = json_object_get(mn, "children");
    CHECK(json_array_size(kids) == 3);
    CHECK(strcmp(json_string_value(json_object_get(json_array_get(kids, 2), "name")), "(other)") == 0);
    CHECK(json_integer_value(json_object_get(json_array_get(kids, 2), "total")) == 7);
    CHECK(json_integer_value(json_object_get(j, "truncated_paths")) == 2);
    json_decref(j);
    agg_tree_free(&tr);

    agg_callers_t c;
    CHECK_EQ(agg_callers_compute(x.p, x.malloc_, &c), 0);
    j = agg_callers_json(x.p, &c);
    CHECK(json_integer_value(json_object_get(j, "total")) == 43);
    CHECK(json_array_size(json_object_get(j, "callers")) == 2);
    CHECK(strcmp(json_string_value(json_object_get(json_array_get(json_object_get(j, "callers"), 0),
                                                   "name")), "b") == 0);
    CHECK(json_array_size(json_object_get(j, "callees")) == 1);
    char *dump = json_dumps(j, JSON_COMPACT);
    CHECK(dump && strstr(dump, "\"function\":{\"name\":\"malloc\""));
    free(dump);
    json_decref(j);
    agg_callers_free(&c);
    agg_profile_free(x.p);
}

/* Student's t CDF against closed forms (df 1, 2, 3) and tabulated quantiles. */
static void test_t_cdf(void) {
    double pi = acos(-1.0);
    for (double t = -6; t <= 6; t += 0.37) {
        double c1 = 0.5 + atan(t) / pi;
        double c2 = 0.5 + t / (2 * sqrt(2 + t * t));
        double c3 = 0.5 + (t / (sqrt(3) * (1 + t * t / 3)) + atan(t / sqrt(3))) / pi;
        CHECKF(fabs(agg_stats_t_cdf(t, 1) - c1) < 1e-10, "t=%g df=1: %.12g vs %.12g", t,
               agg_stats_t_cdf(t, 1), c1);
        CHECKF(fabs(agg_stats_t_cdf(t, 2) - c2) < 1e-10, "t=%g df=2", t);
        CHECKF(fabs(agg_stats_t_cdf(t, 3) - c3) < 1e-10, "t=%g df=3", t);
    }
    CHECK(fabs(agg_stats_t_cdf(2.228138852, 10) - 0.975) < 1e-8);
    CHECK(fabs(agg_stats_t_cdf(2.749995652, 30) - 0.995) < 1e-8);
    CHECK(fabs(agg_stats_t_cdf(-2.570581836, 5) - 0.025) < 1e-8);
    CHECK(fabs(agg_stats_t_cdf(1.959963985, 1e7) - 0.975) < 1e-6); /* -> normal */
    CHECK(fabs(agg_stats_t_p2(2.0, 3) - 0.139325) < 1e-5);
    CHECK(agg_stats_t_cdf(0, 7) == 0.5);
    CHECK(fabs(agg_stats_betai(2, 3, 0.4) - 0.5248) < 1e-12); /* 1 - (1-x)^3 (1 + 3x)... exact */
    CHECK(isnan(agg_stats_betai(-1, 1, 0.5)));
    CHECK(fabs(agg_stats_normal_p2(1.959963985) - 0.05) < 1e-8);
}

static void test_welch_bh(void) {
    agg_welch_t w;
    /* two groups: {1,2,3,4,5} and {3,4,5,6,7,8}: hand computed t, df */
    CHECK_EQ(agg_stats_welch(3, 2.5, 5, 5.5, 3.5, 6, &w), 0);
    double se = sqrt(2.5 / 5 + 3.5 / 6);
    CHECK(fabs(w.t - 2.5 / se) < 1e-12);
    double df = pow(2.5 / 5 + 3.5 / 6, 2) / (pow(2.5 / 5, 2) / 4 + pow(3.5 / 6, 2) / 5);
    CHECK(fabs(w.df - df) < 1e-12);
    CHECK(fabs(w.p - agg_stats_t_p2(w.t, df)) < 1e-15 && w.p > 0.01 && w.p < 0.05);
    CHECK_EQ(agg_stats_welch(1, 0, 5, 1, 0, 5, &w), 0);
    CHECK(w.p == 1.0);
    CHECK_EQ(agg_stats_welch(0, 0, 5, 1, 0, 5, &w), 0);
    CHECK(w.p == 0.0);
    CHECK_EQ(agg_stats_welch(0, 1, 1, 1, 1, 5, &w), CM_EINVAL);
    double p[] = {0.01, 0.04, 0.03, 0.005}, q[4];
    CHECK_EQ(agg_stats_bh(p, 4, q), 0);
    double want[] = {0.02, 0.04, 0.04, 0.02};
    for (int i = 0; i < 4; i++)
        CHECKF(fabs(q[i] - want[i]) < 1e-12, "q[%d] = %g", i, q[i]);
}

static void test_seal_and_print(void) {
    fixture_t x = fixture();
    CHECK_EQ(agg_profile_seal(x.p), 0);
    CHECK(x.p->stack_weight != NULL);
    agg_top_t t;
    CHECK_EQ(agg_top_compute(x.p, AGG_SORT_SELF, 0, &t), 0);
    CHECK_EQ(t.total, 75);
    CHECK_EQ(t.entries[0].self, 40);
    agg_top_free(&t);
    /* adding after sealing drops the cache: the views see the new row */
    CHECK_EQ(agg_profile_add(x.p, 0, 25, 25000, 0, 0), 0);
    CHECK(x.p->stack_weight == NULL);
    CHECK_EQ(agg_top_compute(x.p, AGG_SORT_SELF, 0, &t), 0);
    CHECK_EQ(t.total, 100);
    CHECK_EQ(t.entries[0].self, 65);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    agg_top_print(f, x.p, &t);
    fclose(f);
    CHECKF(strstr(buf, "cpu: total 100ns, 100 samples, 6 functions\n") != NULL, "%s", buf);
    CHECKF(strstr(buf, "65ns  65.00%       68ns  68.00%         68  malloc  [libc.so.6]\n"), "%s",
           buf);
    free(buf);
    agg_top_free(&t);
    agg_tree_t tr;
    CHECK_EQ(agg_tree_compute(x.p, 0.1, 0, &tr), 0);
    f = open_memstream(&buf, &len);
    agg_tree_print(f, x.p, &tr);
    fclose(f);
    CHECKF(strstr(buf, "     100ns 100.00%        0ns    main\n") != NULL, "%s", buf);
    CHECKF(strstr(buf, "      (other)\n") != NULL, "%s", buf);
    free(buf);
    agg_tree_free(&tr);
    char v[32];
    agg_format_value(CM_EV_CPU, 1.25e9, v, sizeof v);
    CHECK(!strcmp(v, "1.25s"));
    agg_format_value(CM_EV_CPU, 830e6, v, sizeof v);
    CHECK(!strcmp(v, "830.0ms"));
    agg_format_value(CM_EV_ALLOC, 3 << 20, v, sizeof v);
    CHECK(!strcmp(v, "3.00MB"));
    agg_profile_free(x.p);
}

/* Issue 35: a symbol version is not part of a function's identity. libc's .symtab names
 * clock_gettime@@GLIBC_2.17 what .dynsym names clock_gettime: one function, one frame, one
 * row in every view (top, tree, diff, exports all read the interned frames). A PLT stub
 * (memcpy@plt) stays itself. And a top cut by its limit says how many it left out. */
static void test_symbol_versions_and_limit(void) {
    char buf[128];
    CHECK_EQ(cm_name_unversioned("clock_gettime@@GLIBC_2.17", buf, sizeof buf), 13);
    CHECK(!strcmp(buf, "clock_gettime"));
    cm_name_unversioned("memcpy@GLIBC_2.2.5 memcpy.S:12", buf, sizeof buf);
    CHECKF(!strcmp(buf, "memcpy memcpy.S:12"), "%s", buf);
    cm_name_unversioned("memcpy@plt", buf, sizeof buf);
    CHECK(!strcmp(buf, "memcpy@plt"));
    cm_name_unversioned("@@GLIBC_2.17", buf, sizeof buf); /* nothing before it: not a version */
    CHECK(!strcmp(buf, "@@GLIBC_2.17"));
    agg_profile_t *p = agg_profile_new(CM_EV_CPU);
    int64_t m = agg_profile_frame(p, "__libc_start_main@@GLIBC_2.34", "libc.so.6", "ef", 0x10);
    int64_t c1 = agg_profile_frame(p, "clock_gettime@@GLIBC_2.17", "libc.so.6", "ef", 0x20);
    int64_t c2 = agg_profile_frame(p, "clock_gettime", "libc.so.6", "ef", 0x20);
    int64_t plt = agg_profile_frame(p, "clock_gettime@plt", "app", "ab", 0x30);
    CHECK(m >= 0 && c1 >= 0 && plt >= 0);
    CHECK_EQ(c1, c2);
    CHECK(plt != c1);
    CHECK(!strcmp(p->frames[m].name, "__libc_start_main"));
    CHECK_EQ(agg_profile_replicate(p, "r0", 1.0), 0);
    uint32_t s1[] = {(uint32_t)m, (uint32_t)c1}, s2[] = {(uint32_t)m, (uint32_t)c2},
             s3[] = {(uint32_t)m, (uint32_t)plt};
    CHECK_EQ(agg_profile_add(p, stk(p, s1, 2), 30, 30000, 0, 0), 0);
    CHECK_EQ(agg_profile_add(p, stk(p, s2, 2), 20, 20000, 0, 0), 0);
    CHECK_EQ(agg_profile_add(p, stk(p, s3, 2), 5, 5000, 0, 0), 0);
    agg_top_t t;
    CHECK_EQ(agg_top_compute(p, AGG_SORT_SELF, 1, &t), 0);
    CHECK_EQ(t.n_functions, 3);
    CHECK(!strcmp(p->frames[t.entries[0].frame].name, "clock_gettime"));
    CHECK_EQ(t.entries[0].self, 50); /* both spellings in one row */
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    agg_top_print(f, p, &t);
    fclose(f);
    CHECKF(strstr(out, "(2 more functions not shown; --limit N shows more)\n") && !strchr(out, '@'),
           "%s", out);
    free(out);
    agg_top_free(&t);
    agg_profile_free(p);
}

/* Issue 35: `top --lines` on a profile whose agent recorded no lines said nothing; the note
 * says why and what to do, and stays away when any frame has a line. */
static void test_lines_note(void) {
    agg_profile_t *p = agg_profile_new(CM_EV_CPU);
    CHECK(agg_profile_frame(p, "main", "app", "ab", 0x10) >= 0);
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    agg_lines_note_print(f, p);
    fclose(f);
    CHECKF(strstr(out, "no source lines recorded") && strstr(out, "FLEETPROF_LINES=1"), "%s", out);
    free(out);
    CHECK(agg_profile_frame_src(p, "work x.c:12", "app", "ab", 0x20, "work", "x.c", 12, 0) >= 0);
    f = open_memstream(&out, &len);
    agg_lines_note_print(f, p);
    fclose(f);
    CHECK_EQ(len, 0);
    free(out);
    agg_profile_free(p);
}


/* Mann-Whitney: two separated samples of 5 (U = 25 of 25: z = 12.5 / sqrt(22.92), p = 0.00902);
 * identical samples (p = 1); every value tied (p = 1). */
static void test_rank_test(void) {
    const int64_t x[5] = {1, 2, 3, 4, 5}, y[5] = {6, 7, 8, 9, 10}, t[4] = {3, 3, 3, 3};
    double p = agg_stats_rank_p(x, 5, y, 5);
    CHECKF(fabs(p - 0.009023) < 2e-5, "p %.6f", p);
    CHECKF(fabs(agg_stats_rank_p(x, 5, x, 5) - 1) < 1e-12, "identical: %g",
           agg_stats_rank_p(x, 5, x, 5));
    CHECK_EQ(agg_stats_rank_p(t, 4, t, 4), 1.0);
    CHECK_EQ(agg_stats_rank_p(x, 0, y, 5), 1.0);
    /* ties across the two: {1,2,2} vs {2,3}: ranks 1, 3, 3 | 3, 5: U_y = 8 - 3 = 5 */
    const int64_t a[3] = {1, 2, 2}, b[2] = {2, 3};
    double var = 3.0 * 2 / 12 * (6 - 24.0 / 20); /* one tie of 3: 3^3 - 3 = 24 */
    double want = agg_stats_normal_p2((5 - 3) / sqrt(var));
    CHECKF(fabs(agg_stats_rank_p(a, 3, b, 2) - want) < 1e-12, "tied: %g, want %g",
           agg_stats_rank_p(a, 3, b, 2), want);
}

/* The per-endpoint diff on simulated calls: "GET /b" 20 % slower and 30 % more CPU per call in
 * test, "GET /a" drawn from the same distributions on both sides, "GET /new" only in test (too
 * few calls on the base side: untested). Only GET /b is flagged, in latency and CPU. */
static void test_endpoint_diff(void) {
    enum { N = 2000 };
    static agg_call_t base[2 * N], test[2 * N + 5];
    uint64_t r = 42;
    for (int side = 0; side < 2; side++) {
        agg_call_t *c = side ? test : base;
        for (int i = 0; i < 2 * N; i++) {
            int b = i >= N;
            double mul = side && b ? 1.2 : 1.0, cmul = side && b ? 1.3 : 1.0;
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            double u = (double)(r % 1000000) / 1e6;
            /* durations: exponential around 1 ms, plus a floor; CPU: 0 or 1 ms samples */
            c[i] = (agg_call_t){b ? "GET /b" : "GET /a",
                                (int64_t)(mul * (200000 - 800000 * log(1 - u))),
                                {(r >> 20) % 1000 < (uint64_t)(400 * cmul) ? 1e6 : 0, 0, 0}};
        }
    }
    for (int i = 0; i < 5; i++)
        test[2 * N + i] = (agg_call_t){"GET /new", 1000000, {0, 0, 0}};
    agg_epdiff_t d;
    CHECK_EQ(agg_epdiff_compute(base, 2 * N, test, 2 * N + 5, 0.01, 0.05, &d), 0);
    CHECK_EQ(d.n, 3u);
    CHECK_EQ(d.n_flagged, 1u);
    for (size_t i = 0; i < d.n; i++) {
        const agg_epdiff_entry_t *e = &d.entries[i];
        printf("# %-8s flagged %d latency %+.1f%% q %.2g cpu %+.1f%% q %.2g\n", e->name,
               e->flagged, 100 * e->change[AGG_EPD_LATENCY], e->q[AGG_EPD_LATENCY],
               100 * e->change[AGG_EPD_CPU], e->q[AGG_EPD_CPU]);
        if (!strcmp(e->name, "GET /b")) {
            CHECK(i == 0 && e->flagged);
            CHECK(e->cls[AGG_EPD_LATENCY] == AGG_DIFF_REGRESSION);
            CHECK(e->cls[AGG_EPD_CPU] == AGG_DIFF_REGRESSION);
            CHECK(e->cls[AGG_EPD_WALL] == AGG_DIFF_NOISE);
        } else if (!strcmp(e->name, "GET /new")) {
            CHECK(!e->flagged && e->calls[0] == 0 && e->calls[1] == 5);
            CHECK(e->cls[AGG_EPD_LATENCY] == AGG_DIFF_UNTESTED);
        } else {
            CHECK(!strcmp(e->name, "GET /a") && !e->flagged && e->calls[0] == N);
        }
    }
    json_t *o = agg_epdiff_json(&d);
    CHECK(o && json_integer_value(json_object_get(o, "flagged")) == 1);
    json_decref(o);
    agg_epdiff_free(&d);
    CHECK_EQ(agg_epdiff_compute(base, 1, test, 1, 1.5, 0.05, &d), CM_EINVAL);
}

static const tr_test_t tests[] = {
    {"lines_note", test_lines_note},
    {"symbol_versions_and_limit", test_symbol_versions_and_limit},
    {"seal_and_print", test_seal_and_print},
    {"builder_errors", test_builder_errors},
    {"top", test_top},
    {"callers", test_callers},
    {"tree", test_tree},
    {"tree_conservation_random", test_tree_conservation_random},
    {"chunk_import", test_chunk_import},
    {"select_context_and_spans", test_select_context_and_spans},
    {"folded", test_folded},
    {"filters", test_filters},
    {"patterns_bounded", test_patterns_bounded},
    {"json_views", test_json_views},
    {"t_cdf", test_t_cdf},
    {"welch_bh", test_welch_bh},
    {"rank_test", test_rank_test},
    {"endpoint_diff", test_endpoint_diff},
    {0},
};

TR_MAIN(tests)
