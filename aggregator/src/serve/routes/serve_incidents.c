/* The incidents of the query API (serve_incidents.h): the rows of table `incidents`, and one
 * incident's capture rebuilt from its stored chunks (table `incident_chunks`) into a timeline,
 * a profile and a diff against the seconds before (aggregator/query: profile_chunk, diff,
 * views), plus the requests that were stuck at the trigger (table `requests`). */
#include "serve_incidents.h"

#include "batch.h"
#include "diff.h"
#include "profile.h"
#include "qstore_int.h"
#include "views.h"

#include "cm/config.h"
#include "cm/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define INC_MAX 1000    /* incidents listed at most */
#define INC_CHUNKS 1024 /* chunks of one capture read at most */

typedef struct {
    uint8_t id[CM_INCIDENT_ID_LEN];
    char service[256], version[128], host[256], trigger[CM_MAX_TRIGGER_LEN + 1];
    int64_t pid, threshold, value, trigger_ns, start_ns, end_ns, parts, chunks;
} inc_row_t;

#define INC_COLS                                                                                   \
    "SELECT i.id, COALESCE(s.s, ''), COALESCE(v.s, ''), COALESCE(h.s, ''), i.pid, "                \
    "COALESCE(t.s, ''), i.threshold, i.value, i.trigger_ns, i.start_ns, i.end_ns, i.parts, "      \
    "i.chunks FROM incidents i LEFT JOIN strings s ON s.id = i.service LEFT JOIN strings v ON "    \
    "v.id = i.version LEFT JOIN strings h ON h.id = i.host LEFT JOIN strings t ON t.id = i.trig "

static void read_row(agg_qxst_t *st, inc_row_t *r) {
    memset(r, 0, sizeof *r);
    size_t n = 0;
    const void *id = agg_qx_blob(st, 0, &n);
    if (id && n == CM_INCIDENT_ID_LEN)
        memcpy(r->id, id, n);
    const char *s;
    snprintf(r->service, sizeof r->service, "%s", (s = agg_qx_text(st, 1)) ? s : "");
    snprintf(r->version, sizeof r->version, "%s", (s = agg_qx_text(st, 2)) ? s : "");
    snprintf(r->host, sizeof r->host, "%s", (s = agg_qx_text(st, 3)) ? s : "");
    r->pid = agg_qx_int64(st, 4);
    snprintf(r->trigger, sizeof r->trigger, "%s", (s = agg_qx_text(st, 5)) ? s : "");
    int64_t *f[] = {&r->threshold, &r->value, &r->trigger_ns, &r->start_ns,
                    &r->end_ns,    &r->parts, &r->chunks};
    for (int i = 0; i < 7; i++)
        *f[i] = agg_qx_int64(st, 6 + i);
}

/* Runs sql (bound by bind) on every store, row(st, ctx) on each row until it returns
 * nonzero (1: enough; a negative CM_E* code: that error). */
static int each_row(agg_qstore_t *qs, const char *sql, void (*bind)(agg_qxst_t *, const void *),
                    const void *arg, int (*row)(agg_qxst_t *, void *), void *ctx) {
    int rc = agg_qs_refresh(qs), stop = 0;
    for (size_t i = 0; !rc && !stop && i < qs->n; i++) {
        agg_qxst_t *st;
        if ((rc = agg_qs_prep(&qs->dbs[i], sql, &st)))
            break;
        bind(st, arg);
        int s;
        while (!stop && (s = agg_qx_step(st)) == 1)
            stop = row(st, ctx);
        rc = agg_qs_done(st, stop || s == 1 ? 0 : s);
        if (stop < 0)
            rc = stop;
    }
    return rc;
}

typedef struct {
    inc_row_t *v;
    size_t n, cap, max;
} rows_t;

static int add_row(agg_qxst_t *st, void *ctx) {
    rows_t *r = ctx;
    if (r->n == r->max)
        return 1;
    if (r->n == r->cap && agg_vec_grow((void **)&r->v, &r->cap, sizeof *r->v))
        return CM_ENOMEM;
    read_row(st, &r->v[r->n++]);
    return 0;
}

/* The rows of sql (bound by bind) from every store, at most max. */
static int read_rows(agg_qstore_t *qs, const char *sql, void (*bind)(agg_qxst_t *, const void *),
                     const void *arg, inc_row_t **out, size_t *n, size_t max) {
    rows_t r = {NULL, 0, 0, max};
    int rc = each_row(qs, sql, bind, arg, add_row, &r);
    *out = r.v;
    *n = r.n;
    return rc;
}

static json_t *row_json(const inc_row_t *r) {
    char id[2 * CM_INCIDENT_ID_LEN + 1];
    cm_hex(r->id, CM_INCIDENT_ID_LEN, id);
    return json_pack("{s:s, s:s, s:s, s:s, s:I, s:s, s:f, s:f, s:I, s:I, s:I, s:I, s:I, s:b}",
                     "id", id, "service", r->service, "version", r->version, "host", r->host,
                     "pid", (json_int_t)r->pid, "trigger", r->trigger, "threshold",
                     (double)r->threshold / 1000, "value", (double)r->value / 1000, "trigger_ns",
                     (json_int_t)r->trigger_ns, "start_ns", (json_int_t)r->start_ns, "end_ns",
                     (json_int_t)r->end_ns, "parts", (json_int_t)r->parts, "chunks",
                     (json_int_t)r->chunks, "complete", r->chunks >= r->parts);
}

static int cmp_newest(const void *a, const void *b) {
    const inc_row_t *x = a, *y = b;
    return x->trigger_ns != y->trigger_ns ? (x->trigger_ns > y->trigger_ns ? -1 : 1)
                                          : memcmp(x->id, y->id, CM_INCIDENT_ID_LEN);
}

static json_t *fail(int *status, int code, char *err, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static json_t *fail(int *status, int code, char *err, size_t size, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    *status = code;
    return NULL;
}

typedef struct {
    const char *service, *version;
    int64_t from, to;
    const uint8_t *trace, *span;
} overlap_q_t;

static void bind_overlap(agg_qxst_t *st, const void *arg) {
    const overlap_q_t *q = arg;
    if (q->trace) {
        agg_qx_bind_blob(st, 1, q->trace, 16);
        agg_qx_bind_blob(st, 2, q->span, 8);
        return;
    }
    B64(st, 1, agg_qs_sid(q->service));
    B64(st, 2, q->from);
    B64(st, 3, q->to);
    if (q->version)
        B64(st, 4, agg_qs_sid(q->version));
}

/* The rows of sql bound by q, newest first, at most limit, as a JSON array (*n: how many
 * matched); NULL: a store error (*rc). */
static json_t *rows_json(agg_qstore_t *qs, const char *sql, const overlap_q_t *q, size_t limit,
                         size_t *n_out, int *rc_out) {
    inc_row_t *v;
    size_t n;
    int rc = *rc_out = read_rows(qs, sql, bind_overlap, q, &v, &n, INC_MAX);
    *n_out = n;
    if (rc) {
        free(v);
        return NULL;
    }
    if (n)
        qsort(v, n, sizeof *v, cmp_newest);
    json_t *arr = json_array();
    for (size_t i = 0; i < n && i < limit; i++)
        json_array_append_new(arr, row_json(&v[i]));
    free(v);
    return arr;
}

json_t *agg_incidents_overlapping(agg_qstore_t *qs, const char *service, const char *version,
                                  int64_t from_ns, int64_t to_ns, size_t limit) {
    static const char any[] = INC_COLS "WHERE i.service = ?1 AND i.start_ns <= ?3 AND "
                                       "i.end_ns >= ?2";
    static const char one[] = INC_COLS "WHERE i.service = ?1 AND i.start_ns <= ?3 AND "
                                       "i.end_ns >= ?2 AND i.version = ?4";
    overlap_q_t q = {service, version && *version ? version : NULL, from_ns, to_ns, NULL, NULL};
    size_t n;
    int rc;
    return rows_json(qs, q.version ? one : any, &q, limit, &n, &rc);
}

json_t *agg_incidents_of_request(agg_qstore_t *qs, const uint8_t trace[16],
                                 const uint8_t span[8], size_t limit) {
    /* the request's row and its process's captures come from the same chunks' partition */
    static const char sql[] = INC_COLS "JOIN requests r ON r.trace = ?1 AND r.span = ?2 AND "
                                       "r.service = i.service WHERE i.start_ns <= r.end_ns AND "
                                       "i.end_ns >= r.start_ns";
    overlap_q_t q = {NULL, NULL, 0, 0, trace, span};
    size_t n;
    int rc;
    return rows_json(qs, sql, &q, limit, &n, &rc);
}

json_t *agg_incidents_json(agg_qstore_t *qs, const char *service, int64_t from_ns, int64_t to_ns,
                           size_t limit, int *status, char *err, size_t err_size) {
    static const char sql[] = INC_COLS "WHERE i.service = ?1 AND i.trigger_ns >= ?2 AND "
                                       "i.trigger_ns < ?3";
    overlap_q_t q = {service, NULL, from_ns, to_ns, NULL, NULL};
    size_t n;
    int rc;
    json_t *arr = rows_json(qs, sql, &q, limit, &n, &rc);
    if (!arr)
        return fail(status, 500, err, err_size, "store read failed: %s", cm_strerror(rc));
    *status = 200;
    return json_pack("{s:s, s:o, s:b}", "service", service, "incidents", arr, "more", n > limit);
}

static void bind_id(agg_qxst_t *st, const void *arg) {
    agg_qx_bind_blob(st, 1, arg, CM_INCIDENT_ID_LEN);
}

typedef struct {
    cm_chunk_t **c;
    size_t n;
} capture_t;

static void capture_free(capture_t *cap) {
    for (size_t i = 0; i < cap->n; i++)
        cm_chunk_free(cap->c[i]);
    free(cap->c);
}

typedef struct {
    capture_t *cap;
    char *err;
    size_t err_size;
} load_ctx_t;

static int add_frame(agg_qxst_t *st, void *ctx_) {
    load_ctx_t *x = ctx_;
    capture_t *cap = x->cap;
    if (cap->n == INC_CHUNKS)
        return 1;
    size_t len = 0;
    const uint8_t *f = agg_qx_blob(st, 0, &len);
    cm_chunk_t **nc = realloc(cap->c, (cap->n + 1) * sizeof *nc);
    if (!nc)
        return CM_ENOMEM;
    cap->c = nc;
    int rc = f ? cm_chunk_decode(f, len, &cap->c[cap->n], x->err, x->err_size) : CM_EFORMAT;
    if (rc)
        return rc;
    cap->n++;
    return 0;
}

/* Decodes the stored chunks of incident id, in part order. */
static int capture_load(agg_qstore_t *qs, const uint8_t *id, capture_t *cap, char *err,
                        size_t err_size) {
    memset(cap, 0, sizeof *cap);
    load_ctx_t x = {cap, err, err_size};
    return each_row(qs, "SELECT frame FROM incident_chunks WHERE id = ?1 ORDER BY part", bind_id,
                    id, add_frame, &x);
}

static json_t *timeline_json(const capture_t *cap, cm_event_type_t type) {
    json_t *arr = json_array();
    for (size_t i = 0; i < cap->n; i++) {
        const cm_chunk_t *c = cap->c[i];
        const cm_samples_t *s = &c->samples[type];
        uint64_t w = 0;
        for (uint32_t k = 0; k < s->n; k++)
            w += s->weight[k];
        json_array_append_new(
            arr, json_pack("{s:I, s:I, s:I, s:I, s:I}", "start_ns",
                           (json_int_t)c->header.start_unix_ns, "end_ns",
                           (json_int_t)c->header.end_unix_ns, "samples", (json_int_t)s->n,
                           "weight", (json_int_t)w, "process_cpu_ns",
                           (json_int_t)c->header.process_cpu_ns));
    }
    return arr;
}

/* The diff's side of a chunk that ended at end: 2 after the trigger, 1 the base, 0 neither. */
static int side_of(int64_t end, int64_t trigger) {
    if (end > trigger)
        return 2;
    if (end > trigger - AGG_INCIDENT_GAP_NS)
        return 0;
    return end > trigger - AGG_INCIDENT_GAP_NS - AGG_INCIDENT_BEFORE_NS;
}

/* The capture's profiles: all of it, its chunks just before the trigger (ended at least
 * AGG_INCIDENT_GAP_NS before it, and at most AGG_INCIDENT_BEFORE_NS earlier: the seconds
 * nearest the trigger, not what went on when the capture began, such as the last requests of
 * an earlier spike) and from the trigger on (ended after it). Each chunk of the
 * two sides gives a replicate per AGG_INCIDENT_BUCKET_NS of its interval: a capture holds a few
 * seconds a side, and the diff's dispersion (per function, from the replicates) needs more
 * than a few. The diff's work is the requests the side's chunks saw end (header.work_units)
 * when both sides saw some (*per_request = 1: a spike's own function stands out, the
 * requests' usual work does not shrink with their rate), else the side's seconds. */
static int capture_profiles(const capture_t *cap, cm_event_type_t type, int64_t trigger,
                            agg_profile_t *p[3], int *per_request) {
    for (int k = 0; k < 3; k++)
        if (!(p[k] = agg_profile_new(type)))
            return CM_ENOMEM;
    int rc = 0;
    double req[2] = {0, 0};
    for (size_t i = 0; !rc && i < cap->n; i++) {
        const cm_chunk_t *c = cap->c[i];
        int64_t end = (int64_t)c->header.end_unix_ns;
        int side = side_of(end, trigger);
        rc = agg_profile_add_chunk(p[0], c);
        if (!rc && side) {
            req[side - 1] += (double)c->header.work_units;
            rc = agg_profile_add_chunk_buckets(p[side], c, 0, AGG_INCIDENT_BUCKET_NS);
        }
    }
    *per_request = req[0] > 0 && req[1] > 0;
    for (int k = 1; k < 3 && *per_request; k++)
        p[k]->work_total = req[k - 1];
    for (int k = 0; !rc && k < 3; k++)
        rc = agg_profile_seal(p[k]);
    return rc;
}

/* The incident's order of the diff's entries: regressions, improvements, the rest (as the
 * diff's), each by the change of self cost: what ran more comes first. (The diff orders the
 * rest by inclusive change, where a root frame ties with the function that grew.) */
static int cmp_self(const void *a, const void *b) {
    const agg_diff_entry_t *x = a, *y = b;
    int rx = x->cls == AGG_DIFF_REGRESSION ? 0 : x->cls == AGG_DIFF_IMPROVEMENT ? 1 : 2;
    int ry = y->cls == AGG_DIFF_REGRESSION ? 0 : y->cls == AGG_DIFF_IMPROVEMENT ? 1 : 2;
    if (rx != ry)
        return rx - ry;
    double dx = rx == 1 ? -x->delta_self : x->delta_self;
    double dy = ry == 1 ? -y->delta_self : y->delta_self;
    if (dx != dy)
        return dx < dy ? 1 : -1;
    return strcmp(x->name, y->name);
}

/* {top, tree, diff} of the capture; NULL when out of memory. */
static json_t *capture_views(const capture_t *cap, cm_event_type_t type, int64_t trigger,
                             size_t limit) {
    agg_profile_t *p[3] = {0};
    json_t *o = NULL;
    agg_top_t top = {0};
    agg_tree_t tree = {0};
    agg_diff_t d;
    memset(&d, 0, sizeof d);
    int have_diff = 0, per_request = 0;
    if (capture_profiles(cap, type, trigger, p, &per_request) || agg_top_compute(p[0], AGG_SORT_SELF, limit, &top) ||
        agg_tree_compute(p[0], 0.005, 2000, &tree))
        goto out;
    agg_diff_opts_t opts;
    agg_diff_opts_default(&opts);
    opts.warn_replicates = 2;
    opts.no_callers = 1; /* self cost, as before the default diff tested callers */
    /* per request, an unchanged function costs what it did (the spike takes every share of
     * the samples, and a capture's few functions leave no common factor to estimate); what
     * the spike's function calls more is its finding */
    opts.common_from_work = per_request;
    opts.fold_callees = 1;
    opts.work_unit = per_request ? "request" : "process-second";
    have_diff = agg_diff_compute(p[1], p[2], &opts, &d) == 0;
    if (have_diff && d.n)
        qsort(d.entries, d.n, sizeof *d.entries, cmp_self);
    o = json_pack("{s:o, s:o, s:o}", "top", agg_top_json(p[0], &top), "tree",
                  agg_tree_json(p[0], &tree), "diff",
                  have_diff ? agg_diff_json(&d, limit) : json_null());
out:
    if (have_diff)
        agg_diff_free(&d);
    agg_top_free(&top);
    agg_tree_free(&tree);
    for (int k = 0; k < 3; k++)
        agg_profile_free(p[k]);
    return o;
}

typedef struct {
    json_t *arr;
    size_t limit;
} stuck_ctx_t;

static void bind_stuck(agg_qxst_t *st, const void *arg) {
    const inc_row_t *r = arg;
    B64(st, 1, agg_qs_sid(r->service));
    B64(st, 2, r->trigger_ns - AGG_INCIDENT_STUCK_NS);
    B64(st, 3, r->trigger_ns);
}

static int add_stuck(agg_qxst_t *st, void *ctx) {
    stuck_ctx_t *x = ctx;
    if (json_array_size(x->arr) >= x->limit)
        return 1;
    size_t tl = 0, sl = 0;
    const uint8_t *t = agg_qx_blob(st, 0, &tl), *s = agg_qx_blob(st, 1, &sl);
    char th[33] = "", sh[17] = "";
    if (t && tl == 16)
        cm_hex(t, 16, th);
    if (s && sl == 8)
        cm_hex(s, 8, sh);
    const char *nm = agg_qx_text(st, 2);
    json_array_append_new(
        x->arr, json_pack("{s:s, s:s, s:s, s:I, s:I, s:b}", "trace", th, "span", sh, "name",
                          nm ? nm : "", "start_ns", (json_int_t)agg_qx_int64(st, 3), "end_ns",
                          (json_int_t)agg_qx_int64(st, 4), "ended", agg_qx_int64(st, 5) != 0));
    return 0;
}

/* Requests of the incident's service active at the trigger for AGG_INCIDENT_STUCK_NS. */
static json_t *stuck_json(agg_qstore_t *qs, const inc_row_t *r, size_t limit) {
    static const char sql[] =
        "SELECT q.trace, q.span, COALESCE(n.s, ''), q.start_ns, q.end_ns, q.ended FROM requests q "
        "LEFT JOIN strings n ON n.id = q.name WHERE q.service = ?1 AND q.start_ns <= ?2 AND "
        "q.end_ns >= ?3 ORDER BY q.start_ns";
    stuck_ctx_t x = {json_array(), limit};
    each_row(qs, sql, bind_stuck, r, add_stuck, &x); /* a store that fails: fewer rows */
    return x.arr;
}

json_t *agg_incident_json(agg_qstore_t *qs, const uint8_t id[CM_INCIDENT_ID_LEN],
                          cm_event_type_t type, size_t limit, int *status, char *err,
                          size_t err_size) {
    inc_row_t *v = NULL;
    size_t n = 0;
    int rc = read_rows(qs, INC_COLS "WHERE i.id = ?1", bind_id, id, &v, &n, 1);
    if (rc || !n) {
        free(v);
        return rc ? fail(status, 500, err, err_size, "store read failed: %s", cm_strerror(rc))
                  : fail(status, 404, err, err_size, "no such incident");
    }
    capture_t cap;
    char why[512] = "";
    if ((rc = capture_load(qs, id, &cap, why, sizeof why))) {
        capture_free(&cap);
        free(v);
        return fail(status, 500, err, err_size, "capture not read: %s: %s", cm_strerror(rc), why);
    }
    json_t *views = capture_views(&cap, type, v->trigger_ns, limit);
    json_t *o = row_json(v);
    json_object_set_new(o, "event_type", json_string(cm_event_name(type)));
    json_object_set_new(o, "timeline", timeline_json(&cap, type));
    json_object_update(o, views ? views : json_object());
    json_decref(views);
    json_object_set_new(o, "stuck_requests", stuck_json(qs, v, limit));
    capture_free(&cap);
    free(v);
    *status = 200;
    return o;
}

/* ---- the HTTP handlers ---- */

static void reply(agg_http_reply_t *r, int status, json_t *o, const char *err) {
    agg_api_reply_json(r, status, o ? o : json_pack("{s:s, s:i}", "error", err, "status", status));
}

/* A non-negative integer argument (default dflt, at most max; for times also "now" and
 * "-DURATION" before now, as the other routes take them): 0, or -1 after a 400. */
static int int_arg(const struct args *a, const char *k, long long dflt, long long max,
                   long long *out, agg_http_reply_t *r) {
    const char *v = agg_api_arg(a, k);
    *out = dflt;
    if (!v || !*v)
        return 0;
    int64_t ago;
    if (!strcmp(v, "now") || (v[0] == '-' && cm_parse_duration(v + 1, &ago) == 0)) {
        *out = (long long)time(NULL) - (v[0] == '-' ? ago / 1000000000ll : 0);
        return 0;
    }
    char *end;
    long long x = strtoll(v, &end, 10);
    if (*end || x < 0 || x > max) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s is not an integer between 0 and %lld (or now, -DURATION)",
                 k, max);
        reply(r, 400, NULL, msg);
        return -1;
    }
    *out = x;
    return 0;
}

void agg_serve_incidents(struct agg_api *api, const struct args *a, const char *url,
                         agg_http_reply_t *r) {
    (void)url;
    const char *svc = agg_api_arg(a, "service");
    long long from, to, limit;
    if (!svc || !*svc) {
        reply(r, 400, NULL, "missing parameter 'service'");
        return;
    }
    if (int_arg(a, "from", 0, INT64_MAX / 2000000000, &from, r) ||
        int_arg(a, "to", INT64_MAX / 2000000000, INT64_MAX / 2000000000, &to, r) ||
        int_arg(a, "limit", 100, INC_MAX, &limit, r))
        return;
    int status;
    char err[512];
    json_t *o = agg_incidents_json(agg_api_qs(api), svc, from * 1000000000ll,
                                   to * 1000000000ll, (size_t)limit, &status, err, sizeof err);
    reply(r, status, o, err);
}

void agg_serve_incident(struct agg_api *api, const struct args *a, const char *url,
                        agg_http_reply_t *r) {
    (void)url;
    const char *hex = agg_api_arg(a, "id"), *ev = agg_api_arg(a, "type");
    if (!ev)
        ev = agg_api_arg(a, "event_type");
    uint8_t id[CM_INCIDENT_ID_LEN];
    size_t i = 0;
    for (; hex && i < CM_INCIDENT_ID_LEN && sscanf(hex + 2 * i, "%2hhx", &id[i]) == 1; i++)
        ;
    if (!hex || strlen(hex) != 2 * CM_INCIDENT_ID_LEN || i != CM_INCIDENT_ID_LEN) {
        reply(r, 400, NULL, "parameter 'id' must be 32 hex digits (an incident id)");
        return;
    }
    cm_event_type_t type = CM_EV_CPU;
    if (ev && *ev && cm_event_parse(ev, &type)) {
        reply(r, 400, NULL, "event_type is not cpu, wall, alloc, inuse, lock or io");
        return;
    }
    long long limit;
    if (int_arg(a, "limit", 20, 1000, &limit, r))
        return;
    int status;
    char err[768];
    json_t *o = agg_incident_json(agg_api_qs(api), id, type, (size_t)limit, &status, err,
                                  sizeof err);
    reply(r, status, o, err);
}
