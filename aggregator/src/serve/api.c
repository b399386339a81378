/* HTTP routes of the query API (see api.h and aggregator/README.md "Query API"): parameter
 * parsing and validation, store queries through query_store.h, analysis through fp_query
 * (views, filters, diff, exports), JSON with jansson.
 * Threading: handlers run on any thread, several at once: each request leases its own store
 * handle from the pool (qpool.h) and handlers see it as api->qs of a per-request copy of the
 * API (dispatch); everything else in agg_api_t is read-only after agg_api_new. A diff on a
 * PostgreSQL store may lease a second handle without waiting and read its test side with it
 * on a thread of its own, joined before the request ends (h_diff). */
#define _GNU_SOURCE
#include "api.h"

#include "auth.h"
#include "qpool.h"
#include "query_store.h"
#include "reports.h"
#include "store_pg.h"

#include "pattern.h"
#include "query.h"

#include "cm/error.h"
#include "cm/log.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct agg_api agg_api_t;
typedef struct args args_t;
typedef void (*route_fn)(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r);
typedef struct {
    agg_api_t *api;
    route_fn fn;
} route_t;

struct agg_api {
    char *store_dir, *token;
    int64_t report_min; /* CPU samples per side a per-deploy report waits for */
    int report_min_set; /* ... set by --report-min-samples, not the 2 % default */
    agg_qstore_t *qs; /* NULL in the shared API; the leased handle in a request's copy */
    agg_qpool_t *pool;
    int split_diff; /* read a diff's two sides at once (PostgreSQL store: see h_diff) */
    route_t routes[AGG_API_ROUTES];
};

/* ---- request arguments ---- */

#define MAX_ARGS 64
struct args {
    char *key[MAX_ARGS], *val[MAX_ARGS];
    size_t n;
    int overflow;
};

static int add_arg(void *a_, const char *k, const char *v) {
    args_t *a = a_;
    if (a->n == MAX_ARGS) {
        a->overflow = 1;
        return 1;
    }
    a->key[a->n] = strdup(k);
    a->val[a->n] = strdup(v);
    a->n++;
    return 0;
}

static void args_free(args_t *a) {
    for (size_t i = 0; i < a->n; i++) {
        free(a->key[i]);
        free(a->val[i]);
    }
}

static const char *arg(const args_t *a, const char *k) {
    for (size_t i = 0; i < a->n; i++)
        if (a->key[i] && !strcmp(a->key[i], k))
            return a->val[i] ? a->val[i] : "";
    return NULL;
}

/* All values of k (pointers into a), at most max. */
static size_t arg_all(const args_t *a, const char *k, const char **out, size_t max) {
    size_t n = 0;
    for (size_t i = 0; i < a->n && n < max; i++)
        if (a->key[i] && !strcmp(a->key[i], k) && a->val[i])
            out[n++] = a->val[i];
    return n;
}

/* ---- replies ---- */

/* Length of the valid UTF-8 sequence at s (as jansson checks it: no overlong forms, no
 * surrogates, at most U+10FFFF), or 0 when the bytes there are not one. */
static size_t utf8_seq(const unsigned char *s) {
    unsigned c = s[0];
    size_t n;
    unsigned cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, cp = c & 0x07;
    else
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

static int utf8_valid(const char *s) {
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        size_t n = utf8_seq(p);
        if (!n)
            return 0;
        p += n;
    }
    return 1;
}

/* Replaces every byte that does not start a valid UTF-8 sequence with '?' (a message cut by
 * its buffer, or quoting a parameter), so that it can always go into JSON. */
static void utf8_fix(char *s) {
    for (unsigned char *p = (unsigned char *)s; *p;) {
        size_t n = utf8_seq(p);
        if (!n)
            *p = '?', n = 1;
        p += n;
    }
}

static void reply_json(agg_http_reply_t *r, int status, json_t *o) {
    r->status = status;
    r->content_type = "application/json";
    r->body = o ? json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(o);
    if (!r->body) {
        r->status = 500;
        r->body = strdup("{\"error\":\"out of memory\"}");
    }
    r->len = r->body ? strlen(r->body) : 0;
}

static void reply_err(agg_http_reply_t *r, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void reply_err(agg_http_reply_t *r, int status, const char *param, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    utf8_fix(msg);
    json_t *o = json_pack("{s:s, s:i}", "error", msg, "status", status);
    if (o && param)
        json_object_set_new(o, "parameter", json_string(param));
    reply_json(r, status, o);
}

static void reply_buf(agg_http_reply_t *r, const char *type, char *buf, size_t len) {
    r->status = 200;
    r->content_type = type;
    r->body = buf;
    r->len = len;
}

/* ---- parameter parsing: 0 ok, else a 400 has been written ---- */

static int parse_type(const args_t *a, const char *name, agg_http_reply_t *r,
                      cm_event_type_t *t) {
    const char *v = arg(a, name);
    *t = CM_EV_CPU;
    if (!v || !*v)
        return 0;
    if (cm_event_parse(v, t) == 0)
        return 0;
    reply_err(r, 400, name, "%s '%s' is not an event type; use cpu, wall, alloc, inuse, lock or io",
              name, v);
    return -1;
}

static int64_t now_s(void) { return (int64_t)time(NULL); }

/* Unix seconds, "now", or "-DURATION" relative to now (s, m, h, d). */
static int parse_time(const args_t *a, const char *name, int64_t dflt, agg_http_reply_t *r,
                      int64_t *out) {
    const char *v = arg(a, name);
    *out = dflt;
    if (!v || !*v)
        return 0;
    char *end;
    if (!strcmp(v, "now")) {
        *out = now_s();
        return 0;
    }
    errno = 0;
    if (v[0] == '-') {
        double d = strtod(v + 1, &end);
        int64_t mul = *end == 's' || !*end ? 1 : *end == 'm' ? 60 : *end == 'h' ? 3600
                                               : *end == 'd' ? 86400 : 0;
        if (end != v + 1 && mul && (!*end || !end[1]) && d >= 0 && d < 1e7) {
            *out = now_s() - (int64_t)(d * (double)mul);
            return 0;
        }
    } else {
        long long x = strtoll(v, &end, 10);
        if (end != v && !*end && !errno && x >= 0) {
            *out = x > 100000000000ll ? x / 1000000000ll : x; /* ns accepted too */
            return 0;
        }
    }
    reply_err(r, 400, name,
              "%s '%s' is not a time; use unix seconds, 'now' or a relative time like -1h", name,
              v);
    return -1;
}

/* Seconds to nanoseconds, saturating at the int64 range: from=-9999999d is 8.6e11 s before
 * now, which times 1e9 would wrap around to a time in the next century. */
static int64_t s_to_ns(int64_t s) {
    const int64_t g = 1000000000;
    return s >= INT64_MAX / g ? INT64_MAX : s <= INT64_MIN / g ? INT64_MIN : s * g;
}

static int parse_uint(const args_t *a, const char *name, long long dflt, long long max,
                      agg_http_reply_t *r, long long *out) {
    const char *v = arg(a, name);
    *out = dflt;
    if (!v || !*v)
        return 0;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || errno || x < 0 || x > max) {
        reply_err(r, 400, name, "%s '%s' is not an integer in 0..%lld", name, v, max);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_double(const args_t *a, const char *name, double dflt, double lo, double hi,
                        agg_http_reply_t *r, double *out) {
    const char *v = arg(a, name);
    *out = dflt;
    if (!v || !*v)
        return 0;
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !isfinite(x) || x < lo || x > hi) {
        reply_err(r, 400, name, "%s '%s' is not a number in [%g, %g]", name, v, lo, hi);
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_hexid(const char *v, uint8_t *out, size_t n) {
    if (strlen(v) != 2 * n)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned x;
        if (!isxdigit((unsigned char)v[2 * i]) || !isxdigit((unsigned char)v[2 * i + 1]) ||
            sscanf(v + 2 * i, "%2x", &x) != 1)
            return -1;
        out[i] = (uint8_t)x;
    }
    return 0;
}

/* ---- auth ---- */

static int authorized(const agg_api_t *api, agg_http_reply_t *r) {
    const char *why = NULL;
    if (agg_auth_ok(api->token, &why))
        return 1;
    reply_err(r, 401, "Authorization",
              strcmp(why, "missing") ? "the API token in the Authorization header is wrong"
                : "this API needs a token: send 'Authorization: Bearer TOKEN' (fleetprof "
                  "--token or FLEETPROF_TOKEN)");
    return 0;
}

/* ---- shared lookups ---- */

static json_t *samples_json(const uint64_t *s) {
    json_t *o = json_object();
    for (int t = 1; t <= CM_EV_MAX; t++)
        if (s[t])
            json_object_set_new(o, cm_event_name((uint32_t)t), json_integer((json_int_t)s[t]));
    return o;
}

/* Loads the versions of service; 404 when it has none. Returns 0 or -1 (reply written). */
static int load_service(agg_api_t *api, const char *service, agg_http_reply_t *r,
                        agg_qversion_t **v, size_t *n) {
    int rc = agg_qstore_versions(api->qs, service, v, n);
    if (rc) {
        reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
        return -1;
    }
    if (!*n) {
        reply_err(r, 404, "service", "unknown service '%s': no data stored for it; list services "
                  "with GET /api/v1/services", service);
        return -1;
    }
    return 0;
}

static int need_service(const args_t *a, agg_http_reply_t *r, const char **svc) {
    *svc = arg(a, "service");
    if (*svc && **svc)
        return 0;
    reply_err(r, 400, "service", "parameter 'service' is required (a service name, see "
              "/api/v1/services)");
    return -1;
}

static int check_versions(const agg_qversion_t *v, size_t n, const char *svc, const char *param,
                          const char *const *names, size_t nn, agg_http_reply_t *r) {
    for (size_t i = 0; i < nn; i++) {
        int ok = 0;
        for (size_t k = 0; k < n && !ok; k++)
            ok = !strcmp(v[k].version, names[i]);
        if (!ok) {
            reply_err(r, 404, param, "unknown version '%s' of service '%s'; list them with GET "
                      "/api/v1/services/%s/versions", names[i], svc, svc);
            return -1;
        }
    }
    return 0;
}

/* Builds the filter from include/exclude/fold/group/by_module into f (pointers into a). */
typedef struct {
    const char *inc[16], *exc[16], *fold[16], *grp[16];
    agg_group_rule_t rules[16];
    char grpbuf[16][256];
    agg_filter_t f;
    int any;
} filt_t;

/* Compiles every pattern once before any store read (pattern.h bounds them): 0, or -1 with a
 * 400 naming the parameter of the first bad one. */
static int check_patterns(const filt_t *ft, agg_http_reply_t *r) {
    const struct {
        const char *param;
        const char *const *pats;
        size_t n, stride;
    } kinds[] = {
        {"include", ft->inc, ft->f.n_include, sizeof(char *)},
        {"exclude", ft->exc, ft->f.n_exclude, sizeof(char *)},
        {"fold", ft->fold, ft->f.n_fold, sizeof(char *)},
        {"group", &ft->rules[0].pattern, ft->f.n_group, sizeof(agg_group_rule_t)},
    };
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
        for (size_t i = 0; i < kinds[k].n; i++) {
            const char *pat =
                *(const char *const *)((const char *)kinds[k].pats + i * kinds[k].stride);
            agg_pattern_t *p = NULL;
            char why[256];
            int rc = agg_pattern_compile(pat, &p, why, sizeof why);
            agg_pattern_free(p);
            if (rc == CM_EINVAL) {
                reply_err(r, 400, kinds[k].param, "%s pattern '%.*s' is refused: %s",
                          kinds[k].param, AGG_PATTERN_MAX_LEN, pat, why);
                return -1;
            }
            if (rc) {
                reply_err(r, 500, NULL, "cannot compile a pattern: %s", cm_strerror(rc));
                return -1;
            }
        }
    return 0;
}

static int parse_filter(const args_t *a, agg_http_reply_t *r, filt_t *ft) {
    memset(ft, 0, sizeof *ft);
    ft->f.include = ft->inc;
    ft->f.n_include = arg_all(a, "include", ft->inc, 16);
    ft->f.exclude = ft->exc;
    ft->f.n_exclude = arg_all(a, "exclude", ft->exc, 16);
    ft->f.fold = ft->fold;
    ft->f.n_fold = arg_all(a, "fold", ft->fold, 16);
    size_t ng = arg_all(a, "group", ft->grp, 16);
    for (size_t i = 0; i < ng; i++) {
        snprintf(ft->grpbuf[i], sizeof ft->grpbuf[i], "%s", ft->grp[i]);
        char *arrow = strstr(ft->grpbuf[i], "->");
        if (!arrow || arrow == ft->grpbuf[i] || !arrow[2]) {
            reply_err(r, 400, "group", "group '%s' is not 'PATTERN->NAME' (e.g. "
                      "'^libc\\.so->libc')", ft->grp[i]);
            return -1;
        }
        *arrow = 0;
        ft->rules[i].pattern = ft->grpbuf[i];
        ft->rules[i].name = arrow + 2;
    }
    ft->f.group = ft->rules;
    ft->f.n_group = ng;
    const char *bm = arg(a, "by_module");
    if (bm && *bm && strcmp(bm, "0") && strcmp(bm, "1") && strcmp(bm, "true") &&
        strcmp(bm, "false")) {
        reply_err(r, 400, "by_module", "by_module '%s' is not 0 or 1", bm);
        return -1;
    }
    ft->f.group_by_module = bm && (!strcmp(bm, "1") || !strcmp(bm, "true"));
    ft->any = ft->f.n_include || ft->f.n_exclude || ft->f.n_fold || ng || ft->f.group_by_module;
    return check_patterns(ft, r);
}

/* Applies the filter in place (*p replaced). Returns 0 or -1 with a 400 written. */
static int apply_filter(filt_t *ft, agg_profile_t **p, agg_http_reply_t *r) {
    if (!ft->any)
        return 0;
    agg_profile_t *out = NULL;
    char err[512] = "";
    int rc = agg_profile_filter(*p, &ft->f, &out, err, sizeof err);
    if (rc) {
        const char *param = strstr(err, "include") == err   ? "include"
                            : strstr(err, "exclude") == err ? "exclude"
                            : strstr(err, "fold") == err    ? "fold"
                                                            : "group";
        if (rc == CM_EINVAL)
            reply_err(r, 400, param, "%s", err[0] ? err : "bad pattern");
        else
            reply_err(r, 500, NULL, "filter failed: %s", cm_strerror(rc));
        return -1;
    }
    agg_profile_free(*p);
    agg_profile_seal(out);
    *p = out;
    return 0;
}

static int parse_label(const args_t *a, agg_http_reply_t *r, char *key, size_t ks,
                       const char **value) {
    const char *l = arg(a, "label");
    *value = NULL;
    key[0] = 0;
    if (!l || !*l)
        return 0;
    const char *c = strchr(l, ':');
    if (!c || c == l || (size_t)(c - l) >= ks) {
        reply_err(r, 400, "label", "label '%s' is not KEY:VALUE (e.g. endpoint:/checkout)", l);
        return -1;
    }
    memcpy(key, l, (size_t)(c - l));
    key[c - l] = 0;
    *value = c + 1;
    return 0;
}

static char *memstream_text(void (*fn)(FILE *, void *), void *ctx, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f)
        return NULL;
    fn(f, ctx);
    fclose(f);
    return buf;
}

static int arg_is_one(const args_t *a, const char *k) {
    const char *v = arg(a, k);
    return v && !strcmp(v, "1");
}

/* Renders one profile as the requested view and format. */
typedef struct {
    const agg_profile_t *p;
    agg_top_t *top;
    agg_tree_t *tree;
    int lines; /* read with lines=1 */
} pr_ctx_t;
static void print_top(FILE *f, void *c) {
    pr_ctx_t *x = c;
    agg_top_print(f, x->p, x->top);
    if (x->lines)
        agg_lines_note_print(f, x->p);
}
static void print_tree(FILE *f, void *c) {
    pr_ctx_t *x = c;
    agg_tree_print(f, x->p, x->tree);
    if (x->lines)
        agg_lines_note_print(f, x->p);
}

static void render_profile(const args_t *a, const agg_profile_t *p, json_t *meta,
                           agg_http_reply_t *r) {
    const char *view = arg(a, "view"), *format = arg(a, "format");
    view = view && *view ? view : "top";
    format = format && *format ? format : "json";
    if (strcmp(format, "json") && strcmp(format, "text") && strcmp(format, "folded") &&
        strcmp(format, "pprof")) {
        reply_err(r, 400, "format", "format '%s' is not json, text, folded or pprof", format);
        goto out;
    }
    if (strcmp(view, "top") && strcmp(view, "tree") && strcmp(view, "callers")) {
        reply_err(r, 400, "view", "view '%s' is not top, tree or callers", view);
        goto out;
    }
    if (!strcmp(format, "pprof")) {
        uint8_t *buf;
        size_t len;
        int rc = agg_export_pprof(p, &buf, &len);
        if (rc)
            reply_err(r, 500, NULL, "pprof export failed: %s", cm_strerror(rc));
        else
            reply_buf(r, "application/octet-stream", (char *)buf, len);
        goto out;
    }
    if (!strcmp(format, "folded")) {
        char *buf;
        size_t len;
        const char *c = arg(a, "counts");
        int rc = agg_export_folded(p, c && !strcmp(c, "1"), &buf, &len);
        if (rc)
            reply_err(r, 500, NULL, "folded export failed: %s", cm_strerror(rc));
        else
            reply_buf(r, "text/plain; charset=utf-8", buf, len);
        goto out;
    }
    int text = !strcmp(format, "text");
    long long limit;
    double min_share;
    if (!strcmp(view, "top")) {
        if (parse_uint(a, "limit", 50, 100000, r, &limit))
            goto out;
        const char *sort = arg(a, "sort");
        if (sort && *sort && strcmp(sort, "self") && strcmp(sort, "total")) {
            reply_err(r, 400, "sort", "sort '%s' is not self or total", sort);
            goto out;
        }
        agg_top_t t;
        int rc = agg_top_compute(p, sort && !strcmp(sort, "total") ? AGG_SORT_TOTAL : AGG_SORT_SELF,
                                 (size_t)limit, &t);
        if (rc) {
            reply_err(r, 500, NULL, "top failed: %s", cm_strerror(rc));
            goto out;
        }
        if (text) {
            pr_ctx_t c = {p, &t, NULL, arg_is_one(a, "lines")};
            size_t len;
            char *buf = memstream_text(print_top, &c, &len);
            reply_buf(r, "text/plain; charset=utf-8", buf, len);
        } else {
            json_t *o = agg_top_json(p, &t);
            if (o) {
                json_object_update(o, meta);
                json_object_set_new(o, "truncated", json_integer((json_int_t)(t.n_functions - t.n)));
            }
            reply_json(r, 200, o);
        }
        agg_top_free(&t);
    } else if (!strcmp(view, "tree")) {
        if (parse_uint(a, "limit", 2000, 100000, r, &limit) ||
            parse_double(a, "min_share", 0.005, 0, 0.999, r, &min_share))
            goto out;
        agg_tree_t t;
        int rc = agg_tree_compute(p, min_share, limit ? (size_t)limit : 100000, &t);
        if (rc) {
            reply_err(r, 500, NULL, "tree failed: %s", cm_strerror(rc));
            goto out;
        }
        if (text) {
            pr_ctx_t c = {p, NULL, &t, arg_is_one(a, "lines")};
            size_t len;
            char *buf = memstream_text(print_tree, &c, &len);
            reply_buf(r, "text/plain; charset=utf-8", buf, len);
        } else {
            json_t *o = json_object();
            json_object_update(o, meta);
            json_object_set_new(o, "event_type", json_string(cm_event_name(p->type)));
            json_object_set_new(o, "unit", json_string(agg_event_unit(p->type)));
            json_object_set_new(o, "nodes", json_integer((json_int_t)t.n));
            json_object_set_new(o, "truncated", json_integer((json_int_t)t.n_truncated));
            json_object_set_new(o, "tree", agg_tree_json(p, &t));
            reply_json(r, 200, o);
        }
        agg_tree_free(&t);
    } else {
        const char *fn = arg(a, "function");
        if (!fn || !*fn) {
            reply_err(r, 400, "function", "view=callers needs parameter 'function' (a function "
                      "name or module!name)");
            goto out;
        }
        uint32_t fr = agg_profile_find_frame(p, fn);
        if (fr == AGG_NONE) {
            reply_err(r, 404, "function", "function '%s' is not in this profile", fn);
            goto out;
        }
        agg_callers_t c;
        int rc = agg_callers_compute(p, fr, &c);
        if (rc) {
            reply_err(r, 500, NULL, "callers failed: %s", cm_strerror(rc));
            goto out;
        }
        json_t *o = agg_callers_json(p, &c);
        if (o)
            json_object_update(o, meta);
        if (text) { /* a short table */
            char *buf = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&buf, &len);
            char v[32];
            agg_format_value(p->type, (double)c.total, v, sizeof v);
            fprintf(f, "%s: total %s\ncallers:\n", fn, v);
            for (size_t i = 0; i < c.n_callers; i++) {
                agg_format_value(p->type, (double)c.callers[i].value, v, sizeof v);
                fprintf(f, "  %10s  %s\n", v, p->frames[c.callers[i].frame].name);
            }
            fprintf(f, "callees:\n");
            for (size_t i = 0; i < c.n_callees; i++) {
                agg_format_value(p->type, (double)c.callees[i].value, v, sizeof v);
                fprintf(f, "  %10s  %s\n", v, p->frames[c.callees[i].frame].name);
            }
            fclose(f);
            json_decref(o);
            reply_buf(r, "text/plain; charset=utf-8", buf, len);
        } else {
            reply_json(r, 200, o);
        }
        agg_callers_free(&c);
    }
out:
    json_decref(meta);
}

/* ---- handlers ---- */

static void h_services(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)a;
    (void)url;
    agg_qversion_t *v;
    size_t n;
    int rc = agg_qstore_versions(api->qs, NULL, &v, &n);
    if (rc) {
        reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n;) {
        size_t j = i;
        int64_t first = v[i].first_ns, last = v[i].last_ns;
        uint64_t samples[CM_EV_COUNT] = {0};
        for (; j < n && !strcmp(v[j].service, v[i].service); j++) {
            first = v[j].first_ns < first ? v[j].first_ns : first;
            last = v[j].last_ns > last ? v[j].last_ns : last;
            for (int t = 1; t <= CM_EV_MAX; t++)
                samples[t] += v[j].samples[t];
        }
        json_array_append_new(arr, json_pack("{s:s, s:I, s:I, s:I, s:s, s:o}", "name",
                                             v[i].service, "versions", (json_int_t)(j - i),
                                             "first_ns", (json_int_t)first, "last_ns",
                                             (json_int_t)last, "latest_version",
                                             v[j - 1].version, "samples", samples_json(samples)));
        i = j;
    }
    agg_qversions_free(v, n);
    reply_json(r, 200, json_pack("{s:o}", "services", arr));
}

static void h_versions(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)a;
    const char *rest = url + strlen("/api/v1/services/");
    const char *slash = strchr(rest, '/');
    if (!slash || strcmp(slash, "/versions") || slash == rest) {
        reply_err(r, 404, NULL, "no route %s; use /api/v1/services/SERVICE/versions", url);
        return;
    }
    char svc[256];
    snprintf(svc, sizeof svc, "%.*s", (int)(slash - rest), rest);
    agg_qversion_t *v;
    size_t n;
    if (load_service(api, svc, r, &v, &n))
        return;
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(arr, json_pack("{s:s, s:I, s:I, s:I, s:f, s:I, s:o}", "version",
                                             v[i].version, "first_ns", (json_int_t)v[i].first_ns,
                                             "last_ns", (json_int_t)v[i].last_ns, "chunks",
                                             (json_int_t)v[i].chunks, "process_seconds",
                                             v[i].process_seconds, "work_units",
                                             (json_int_t)v[i].work_units, "samples",
                                             samples_json(v[i].samples)));
    agg_qversions_free(v, n);
    reply_json(r, 200, json_pack("{s:s, s:o}", "service", svc, "versions", arr));
}

static void h_event_types(agg_api_t *api, const args_t *a, const char *url,
                          agg_http_reply_t *r) {
    (void)url;
    const char *svc = arg(a, "service");
    agg_qversion_t *v = NULL;
    size_t n = 0;
    uint64_t samples[CM_EV_COUNT] = {0};
    if (svc && *svc) {
        if (load_service(api, svc, r, &v, &n))
            return;
    } else if (agg_qstore_versions(api->qs, NULL, &v, &n)) {
        reply_err(r, 500, NULL, "store read failed");
        return;
    }
    for (size_t i = 0; i < n; i++)
        for (int t = 1; t <= CM_EV_MAX; t++)
            samples[t] += v[i].samples[t];
    agg_qversions_free(v, n);
    json_t *arr = json_array();
    for (int t = 1; t <= CM_EV_MAX; t++)
        json_array_append_new(arr, json_pack("{s:s, s:s, s:I}", "name", cm_event_name((uint32_t)t),
                                             "unit", agg_event_unit((cm_event_type_t)t),
                                             "samples", (json_int_t)samples[t]));
    reply_json(r, 200, json_pack("{s:o}", "event_types", arr));
}

/* Common: service, versions, type, time range, label, filters -> a filtered profile. Returns
 * the profile or NULL with the reply written. */
/* Dimension filters (dims.h): host, node, pod, container, pid, io_target, fd_kind, lock; all
 * must hold. Appends to f (at most max); returns the count. */
static size_t parse_dims(const args_t *a, agg_qfilter_t *f, size_t n, size_t max) {
    for (int d = 0; d < AGG_DIM_COUNT && n < max; d++) {
        char pn[32];
        snprintf(pn, sizeof pn, "%s", agg_dim_names[d]);
        for (char *c = pn; *c; c++)
            *c = *c == '-' ? '_' : *c;
        const char *v = arg(a, pn);
        if (v && *v)
            f[n++] = (agg_qfilter_t){agg_dim_names[d], v};
    }
    return n;
}

static agg_profile_t *query_profile_by(agg_api_t *api, const args_t *a, agg_http_reply_t *r,
                                       const char *vparam, const char *from_p, const char *to_p,
                                       int replicates, int per_request, filt_t *ft,
                                       json_t **meta, const agg_qfilter_t *extra,
                                       agg_qspec_t *spec_out);

static agg_profile_t *query_profile(agg_api_t *api, const args_t *a, agg_http_reply_t *r,
                                    const char *vparam, const char *from_p, const char *to_p,
                                    int replicates, int per_request, filt_t *ft,
                                    json_t **meta) {
    return query_profile_by(api, a, r, vparam, from_p, to_p, replicates, per_request, ft, meta,
                            NULL, NULL);
}

/* As query_profile, also restricted to extra (NULL: none); spec_out (when given) gets the
 * query without extra and without reading the profile (its strings point into a). */
static agg_profile_t *query_profile_by(agg_api_t *api, const args_t *a, agg_http_reply_t *r,
                                       const char *vparam, const char *from_p, const char *to_p,
                                       int replicates, int per_request, filt_t *ft,
                                       json_t **meta, const agg_qfilter_t *extra,
                                       agg_qspec_t *spec_out) {
    const char *svc;
    static __thread const char *vers[64]; /* spec_out points at them */
    static __thread char lkey[256];
    static __thread agg_qfilter_t dims[AGG_QMAX_FILTERS];
    const char *lval;
    cm_event_type_t type;
    int64_t from, to;
    long long exact, lines = 0;
    /* source lines and inlined frames: a profile's `lines=1`, and always in a pprof export */
    const char *fmt = arg(a, "format");
    int pprof = !replicates && fmt && !strcmp(fmt, "pprof");
    if (!replicates && parse_uint(a, "lines", pprof, 1, r, &lines))
        return NULL;
    if (need_service(a, r, &svc) || parse_type(a, "type", r, &type) ||
        parse_time(a, from_p, 0, r, &from) || parse_time(a, to_p, INT64_MAX / 4, r, &to) ||
        parse_label(a, r, lkey, sizeof lkey, &lval) || parse_uint(a, "exact", 0, 1, r, &exact))
        return NULL;
    if (to <= from) {
        reply_err(r, 400, to_p, "%s must be after %s", to_p, from_p);
        return NULL;
    }
    size_t nv = arg_all(a, vparam, vers, 64);
    agg_qversion_t *v;
    size_t n;
    if (load_service(api, svc, r, &v, &n))
        return NULL;
    int bad = check_versions(v, n, svc, vparam, vers, nv, r);
    agg_qversions_free(v, n);
    if (bad)
        return NULL;
    agg_qspec_t q = {.service = svc,
                     .versions = vers,
                     .n_versions = nv,
                     .type = type,
                     .from_s = from,
                     .to_s = to,
                     .label_key = lval ? lkey : NULL,
                     .label_value = lval,
                     .replicates = replicates,
                     .by_process = replicates != AGG_QREP_NONE, /* the diff's */
                     .exact = (int)exact,
                     .per_request = per_request,
                     .lines = (int)lines && pprof ? AGG_QLINES_ADDRESSES : (int)lines};
    q.n_filters = parse_dims(a, dims, 0, AGG_QMAX_FILTERS - 1);
    q.filters = dims;
    if (spec_out) {
        *spec_out = q;
        if (meta)
            *meta = json_pack("{s:s, s:I, s:I}", "service", svc, "from", (json_int_t)from, "to",
                              (json_int_t)(to == INT64_MAX / 4 ? 0 : to));
        return NULL;
    }
    if (extra)
        dims[q.n_filters++] = *extra;
    agg_profile_t *p = NULL;
    int rc = agg_qstore_profile(api->qs, &q, &p);
    if (rc) {
        reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
        return NULL;
    }
    if (apply_filter(ft, &p, r)) {
        agg_profile_free(p);
        return NULL;
    }
    if (meta) {
        json_t *va = json_array();
        for (size_t i = 0; i < nv; i++)
            json_array_append_new(va, json_string(vers[i]));
        *meta = json_pack("{s:s, s:o, s:I, s:I}", "service", svc, "versions", va, "from",
                          (json_int_t)from, "to", (json_int_t)(to == INT64_MAX / 4 ? 0 : to));
    }
    return p;
}

/* group_by=KEY: the profile's samples split by a dimension (host, node, pod, container, pid,
 * io-target, fd-kind, lock) or label:KEY, heaviest first, at most group_limit (default 20)
 * groups, with the top `limit` (default 5) functions of each. */
static void h_groups(agg_api_t *api, const args_t *a, const char *by, agg_http_reply_t *r) {
    char key[256];
    const char *k = by;
    if (!strncmp(by, "label:", 6) && by[6])
        k = by + 6;
    else if (agg_dim_by_name(by) < 0) {
        snprintf(key, sizeof key, "%s", by);
        for (char *c = key; *c; c++)
            *c = *c == '_' ? '-' : *c;
        if (agg_dim_by_name(key) < 0) {
            reply_err(r, 400, "group_by", "group_by '%s' is not host, node, pod, container, pid, "
                      "io-target, fd-kind, lock or label:KEY", by);
            return;
        }
        k = key;
    }
    long long glimit, limit;
    if (parse_uint(a, "group_limit", 20, 10000, r, &glimit) ||
        parse_uint(a, "limit", 5, 1000, r, &limit))
        return;
    if (limit > 0 && glimit > AGG_API_MAX_GROUP_TOPS) { /* each group's top reruns the query */
        reply_err(r, 400, "group_limit", "group_limit %lld with limit %lld: the top functions of "
                  "at most %d groups are computed (one query each); lower group_limit or set "
                  "limit=0", glimit, limit, AGG_API_MAX_GROUP_TOPS);
        return;
    }
    filt_t ft;
    if (parse_filter(a, r, &ft))
        return;
    agg_qspec_t q;
    json_t *meta = NULL;
    if (query_profile_by(api, a, r, "version", "from", "to", 0, 0, &ft, &meta, NULL, &q) ||
        r->body) /* the reply holds the error */
        return;
    agg_qgroup_t *g = NULL;
    size_t n = 0;
    int rc = agg_qstore_groups(api->qs, &q, k, &g, &n);
    if (rc) {
        json_decref(meta);
        reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
        return;
    }
    uint64_t total = 0, total_count = 0;
    for (size_t i = 0; i < n; i++) {
        total += g[i].weight;
        total_count += g[i].count;
    }
    if (!total_count) {
        json_decref(meta);
        agg_qgroups_free(g, n);
        const char *t = arg(a, "type");
        reply_err(r, 404, "from", "no %s samples of service '%s' for these versions, time range "
                  "and filters", t && *t ? t : "cpu", arg(a, "service"));
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n && i < (size_t)glimit; i++) {
        char shown[1024]; /* a path need not be UTF-8; JSON must be */
        snprintf(shown, sizeof shown, "%s", g[i].value ? g[i].value : "");
        utf8_fix(shown);
        json_t *o = json_pack("{s:s?, s:I, s:f, s:f, s:I}", "value", g[i].value ? shown : NULL, "weight",
                              (json_int_t)g[i].weight, "share",
                              total ? (double)g[i].weight / (double)total : 0.0, "samples",
                              (double)g[i].count / CM_COUNT_ONE, "rows", (json_int_t)g[i].rows);
        if (g[i].value && limit > 0) {
            agg_qfilter_t f = {k, g[i].value};
            agg_http_reply_t r2 = {0};
            agg_profile_t *p =
                query_profile_by(api, a, &r2, "version", "from", "to", 0, 0, &ft, NULL, &f, NULL);
            agg_top_t t;
            if (p && agg_top_compute(p, AGG_SORT_SELF, (size_t)limit, &t) == 0) {
                json_t *tj = agg_top_json(p, &t);
                json_t *fns = tj ? json_object_get(tj, "functions") : NULL;
                if (fns)
                    json_object_set(o, "top", fns);
                json_decref(tj);
                agg_top_free(&t);
            }
            agg_profile_free(p);
            free(r2.body);
        }
        json_array_append_new(arr, o);
    }
    json_object_update_new(meta, json_pack("{s:s, s:s, s:s, s:I, s:f, s:o, s:I}", "group_by", k,
                                       "event_type", cm_event_name(q.type), "unit",
                                       agg_event_unit(q.type), "total", (json_int_t)total,
                                       "samples", (double)total_count / CM_COUNT_ONE, "groups",
                                       arr, "truncated",
                                       (json_int_t)(n > (size_t)glimit ? n - (size_t)glimit : 0)));
    agg_qgroups_free(g, n);
    reply_json(r, 200, meta);
}

static void h_profile(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)url;
    const char *by = arg(a, "group_by");
    if (by && *by) {
        h_groups(api, a, by, r);
        return;
    }
    filt_t ft;
    if (parse_filter(a, r, &ft))
        return;
    json_t *meta = NULL;
    agg_profile_t *p = query_profile(api, a, r, "version", "from", "to", 0, 0, &ft, &meta);
    if (!p)
        return;
    if (!p->n_rows) {
        const char *t = arg(a, "type");
        reply_err(r, 404, "from", "no %s samples of service '%s' for these versions, time range "
                  "and label", t && *t ? t : "cpu", arg(a, "service"));
        json_decref(meta);
    } else {
        render_profile(a, p, meta, r);
    }
    agg_profile_free(p);
}

static void h_timeseries(agg_api_t *api, const args_t *a, const char *url,
                         agg_http_reply_t *r) {
    (void)url;
    const char *svc;
    cm_event_type_t type;
    int64_t from, to;
    char lkey[256];
    const char *lval;
    if (need_service(a, r, &svc) || parse_type(a, "type", r, &type) ||
        parse_time(a, "from", 0, r, &from) || parse_time(a, "to", INT64_MAX / 4, r, &to) ||
        parse_label(a, r, lkey, sizeof lkey, &lval))
        return;
    agg_qversion_t *v;
    size_t n;
    if (load_service(api, svc, r, &v, &n))
        return;
    json_t *deploys = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(deploys, json_pack("{s:s, s:I}", "version", v[i].version,
                                                 "first_ns", (json_int_t)v[i].first_ns));
    agg_qversions_free(v, n);
    agg_qseries_t s;
    agg_qfilter_t dims[AGG_QMAX_FILTERS];
    size_t nd = parse_dims(a, dims, 0, AGG_QMAX_FILTERS);
    int rc = agg_qstore_timeseries_label(api->qs, svc, type, from, to, lval ? lkey : NULL, lval,
                                         dims, nd, &s);
    if (rc) {
        json_decref(deploys);
        reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
        return;
    }
    json_t *series = json_array(), *cur = NULL, *pts = NULL;
    const char *cv = NULL;
    for (size_t i = 0; i < s.n; i++) {
        agg_qpoint_t *pt = &s.points[i];
        if (!cv || strcmp(cv, pt->version)) {
            cv = pt->version;
            pts = json_array();
            cur = json_pack("{s:s, s:o}", "version", cv, "points", pts);
            json_array_append_new(series, cur);
        }
        json_array_append_new(pts, json_pack("{s:I, s:I, s:I, s:f}", "bucket",
                                             (json_int_t)pt->bucket, "width", (json_int_t)pt->width,
                                             "value", (json_int_t)pt->weight, "samples",
                                             (double)pt->count / CM_COUNT_ONE));
    }
    agg_qseries_free(&s);
    reply_json(r, 200, json_pack("{s:s, s:s, s:s, s:o, s:o, s:s?}", "service", svc, "event_type",
                                 cm_event_name(type), "unit", agg_event_unit(type), "series",
                                 series, "deploys", deploys, "label", lval ? arg(a, "label") : NULL));
}

typedef struct {
    agg_diff_t *d;
    size_t limit;
} dp_ctx_t;
static void print_diff(FILE *f, void *c) {
    agg_diff_print(f, ((dp_ctx_t *)c)->d, ((dp_ctx_t *)c)->limit);
}

/* One side of a diff read on a thread of its own (h_diff), with its own store handle and
 * reply (an error is written there). */
typedef struct {
    agg_api_t view; /* view.qs: the side's handle */
    const args_t *a;
    const char *vparam, *from_p, *to_p;
    int mode, per_request;
    agg_http_reply_t r;
    agg_profile_t *p;
    json_t *meta;
} diff_side_t;

static void *diff_side_run(void *arg) {
    diff_side_t *s = arg;
    filt_t none = {.any = 0};
    s->p = query_profile(&s->view, s->a, &s->r, s->vparam, s->from_p, s->to_p, s->mode,
                         s->per_request, &none, &s->meta);
    return NULL;
}

static void h_diff(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)url;
    filt_t ft;
    long long limit;
    double gate = -1, q;
    const char *format = arg(a, "format");
    format = format && *format ? format : "json";
    if (strcmp(format, "json") && strcmp(format, "text")) {
        reply_err(r, 400, "format", "format '%s' is not json or text", format);
        return;
    }
    if (parse_filter(a, r, &ft) || parse_uint(a, "limit", 100, 100000, r, &limit) ||
        parse_double(a, "fail_on_regression", -1, -1, 1000, r, &gate) ||
        parse_double(a, "q", 0.01, 1e-9, 0.5, r, &q))
        return;
    const char *base = arg(a, "base"), *test = arg(a, "test");
    int by_time = arg(a, "base_from") || arg(a, "test_from");
    if (!by_time && (!base || !*base || !test || !*test)) {
        reply_err(r, 400, !base || !*base ? "base" : "test",
                  "a diff needs 'base' and 'test' versions, or the time ranges "
                  "base_from/base_to and test_from/test_to");
        return;
    }
    if (by_time && (!arg(a, "base_from") || !arg(a, "test_from"))) {
        reply_err(r, 400, arg(a, "base_from") ? "test_from" : "base_from",
                  "a time-range diff needs both base_from and test_from (and optionally "
                  "base_to, test_to)");
        return;
    }
    agg_profile_t *pb = NULL, *pt = NULL;
    json_t *mb = NULL, *mt = NULL;
    const char *inc = arg(a, "inclusive");
    int inclusive = inc && !strcmp(inc, "1");
    /* a self-cost diff reads per-leaf replicates; filters and inclusive cost need each
     * replicate's stacks */
    int mode = ft.any || inclusive ? AGG_QREP_STACKS : AGG_QREP_LEAVES;
    /* the unit of work: a second of process wall time, or one unit the application counted
     * with fleetprof_work_done() (requests) */
    const char *per = arg(a, "per");
    per = per && *per ? per : "second";
    if (strcmp(per, "second") && strcmp(per, "request")) {
        reply_err(r, 400, "per", "per '%s' is not 'second' or 'request'", per);
        return;
    }
    int per_request = !strcmp(per, "request");
    /* PostgreSQL: the test side on a second handle of the pool, on a thread of its own, while
     * this one reads the base side, so the two sides' waits for the server overlap; without a
     * free handle, or with filters, one after the other. Not on SQLite: a side is CPU work in
     * this process, a gain only with an idle core (measured: none on a busy host), and the
     * second handle's caches would be filled too. */
    diff_side_t side = {.view = *api, .a = a, .mode = mode, .per_request = per_request,
                        .vparam = by_time ? "version" : "test",
                        .from_p = by_time ? "test_from" : "from",
                        .to_p = by_time ? "test_to" : "to"};
    pthread_t th;
    int par = api->split_diff && !ft.any && agg_qpool_try_acquire(api->pool, &side.view.qs) == 0;
    if (par && pthread_create(&th, NULL, diff_side_run, &side)) {
        agg_qpool_release(api->pool, side.view.qs);
        par = 0;
    }
    pb = query_profile(api, a, r, by_time ? "version" : "base", by_time ? "base_from" : "from",
                       by_time ? "base_to" : "to", mode, per_request, &ft, &mb);
    if (par) {
        pthread_join(th, NULL);
        agg_qpool_release(api->pool, side.view.qs);
        pt = side.p;
        mt = side.meta;
        if (pb && !pt) { /* the test side's error is the answer */
            if (!r->body_static)
                free(r->body);
            r->status = side.r.status;
            r->content_type = side.r.content_type;
            r->body = side.r.body;
            r->len = side.r.len;
            r->body_static = side.r.body_static;
        } else if (!side.r.body_static) {
            free(side.r.body);
        }
        free(side.r.headers);
    }
    if (!pb)
        goto out;
    if (!par && !(pt = query_profile(api, a, r, side.vparam, side.from_p, side.to_p, mode,
                                     per_request, &ft, &mt)))
        goto out;
    if (!pt)
        goto out;
    if (!pb->n_rows || !pt->n_rows) {
        const char *t = arg(a, "type");
        reply_err(r, 404, !pb->n_rows ? (by_time ? "base_from" : "base")
                                      : (by_time ? "test_from" : "test"),
                  "no %s samples on the %s side of the diff", t && *t ? t : "cpu",
                  !pb->n_rows ? "base" : "test");
        goto out;
    }
    agg_diff_opts_t o;
    agg_diff_opts_default(&o);
    o.q = q;
    if (per_request) {
        double wb, wt;
        agg_profile_totals(pb, NULL, NULL, &wb);
        agg_profile_totals(pt, NULL, NULL, &wt);
        if (pb->work_total > 0)
            wb = pb->work_total;
        if (pt->work_total > 0)
            wt = pt->work_total;
        if (!(wb > 0) || !(wt > 0)) {
            reply_err(r, 404, "per", "no units of work were counted on the %s side: its "
                      "processes do not call fleetprof_work_done(); use per=second",
                      !(wb > 0) ? "base" : "test");
            goto out;
        }
        o.work_unit = "request";
    }
    o.test_inclusive = inclusive;
    agg_diff_t d;
    int rc = agg_diff_compute(pb, pt, &o, &d);
    if (rc) {
        reply_err(r, 500, NULL, "diff failed: %s", cm_strerror(rc));
        goto out;
    }
    char why[1024] = "";
    int failed = gate >= 0 ? agg_diff_gate(&d, gate, why, sizeof why) : 0;
    if (!strcmp(format, "text")) {
        dp_ctx_t c = {&d, (size_t)limit};
        size_t len;
        char *buf = memstream_text(print_diff, &c, &len);
        if (failed && buf) {
            char *nb = NULL;
            if (asprintf(&nb, "%sGATE FAILED: %s\n", buf, why) > 0) {
                free(buf);
                buf = nb;
                len = strlen(nb);
            }
        }
        reply_buf(r, "text/plain; charset=utf-8", buf, len);
    } else {
        json_t *o2 = agg_diff_json(&d, (size_t)limit);
        if (o2) {
            json_object_set_new(o2, "service", json_string(arg(a, "service")));
            json_object_set(o2, "base", mb);
            json_object_set(o2, "test", mt);
            json_object_set_new(o2, "test_used", json_string(
                per_request ? "Welch's t-test on per-bucket rates (time buckets as replicates, "
                              "work = units of work counted), common factor removed, "
                              "Benjamini-Hochberg FDR"
                            : "Welch's t-test on per-bucket rates (time buckets as replicates, "
                              "work = process-seconds), common factor removed, "
                              "Benjamini-Hochberg FDR"));
            if (gate >= 0)
                json_object_set_new(o2, "gate", json_pack("{s:f, s:b, s:s}", "pct", gate,
                                                          "failed", failed, "why", why));
        }
        reply_json(r, 200, o2);
    }
    agg_diff_free(&d);
out:
    json_decref(mb);
    json_decref(mt);
    agg_profile_free(pb);
    agg_profile_free(pt);
}

static void h_spans(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)url;
    const char *svc;
    cm_event_type_t type;
    int64_t from, to;
    long long limit;
    if (need_service(a, r, &svc) || parse_type(a, "type", r, &type) ||
        parse_time(a, "from", 0, r, &from) || parse_time(a, "to", INT64_MAX / 4, r, &to) ||
        parse_uint(a, "limit", 20, 10000, r, &limit))
        return;
    agg_qversion_t *v;
    size_t n;
    if (load_service(api, svc, r, &v, &n))
        return;
    agg_qversions_free(v, n);
    agg_span_cost_t *s = NULL;
    size_t ns = 0;
    /* one more than the limit: whether the limit cut the list ("more": a reader is told) */
    size_t want = limit ? (size_t)limit : 10000;
    int rc = agg_qstore_spans(api->qs, svc, s_to_ns(from), s_to_ns(to), type, want + 1, &s, &ns);
    if (rc) {
        reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
        return;
    }
    int more = ns > want;
    json_t *arr = agg_span_json(s, more ? want : ns, type);
    free(s);
    reply_json(r, 200, json_pack("{s:s, s:s, s:o, s:b}", "service", svc, "ranked_by",
                                 cm_event_name(type), "spans", arr, "more", more));
}

/* ---- requests (named spans with real durations) ---- */

static json_t *request_json(const agg_request_t *q) {
    char tr[33], sp[17];
    cm_hex(q->trace_id, 16, tr);
    cm_hex(q->span_id, 8, sp);
    int64_t dur = q->end_ns - q->start_ns;
    int64_t on = (int64_t)q->cost[CM_EV_CPU] < dur ? (int64_t)q->cost[CM_EV_CPU] : dur;
    json_t *cost = json_object();
    for (int t = 1; t <= CM_EV_MAX; t++)
        json_object_set_new(cost, cm_event_name((uint32_t)t), json_integer((json_int_t)q->cost[t]));
    /* on CPU: the CPU samples' time (at most the duration); off CPU: the rest of it */
    return json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:b, s:I, s:I, s:I, s:o}", "trace_id", tr,
                     "span_id", sp, "name", q->name, "start_ns", (json_int_t)q->start_ns,
                     "end_ns", (json_int_t)q->end_ns, "duration_ns", (json_int_t)dur, "ended",
                     q->ended, "tid", (json_int_t)q->tid, "on_cpu_ns", (json_int_t)on,
                     "off_cpu_ns", (json_int_t)(dur - on), "cost", cost);
}

/* Parses a duration like "10s", "500ms", "2m" or nanoseconds into *ns. */
static int parse_dur(const args_t *a, const char *name, int64_t dflt, agg_http_reply_t *r,
                     int64_t *ns) {
    const char *v = arg(a, name);
    *ns = dflt;
    if (!v || !*v)
        return 0;
    char *end;
    double d = strtod(v, &end);
    double mul = !*end ? 1 : !strcmp(end, "ns") ? 1 : !strcmp(end, "us") ? 1e3
                 : !strcmp(end, "ms") ? 1e6 : !strcmp(end, "s") ? 1e9 : !strcmp(end, "m") ? 60e9
                 : !strcmp(end, "h") ? 3600e9 : 0;
    if (end == v || mul == 0 || d < 0 || d * mul > 1e18) {
        reply_err(r, 400, name, "%s '%s' is not a duration (e.g. 10s, 250ms, 2m)", name, v);
        return -1;
    }
    *ns = (int64_t)(d * mul);
    return 0;
}

static void h_endpoints(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)url;
    const char *svc;
    int64_t from, to;
    if (need_service(a, r, &svc) || parse_time(a, "from", 0, r, &from) ||
        parse_time(a, "to", INT64_MAX / 4, r, &to))
        return;
    agg_endpoint_t *e = NULL;
    size_t n = 0;
    const char *ver = arg(a, "version");
    ver = ver && *ver ? ver : NULL;
    int rc = agg_qstore_endpoints(api->qs, svc, ver, s_to_ns(from), s_to_ns(to), &e, &n);
    if (rc) {
        reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(
            arr, json_pack("{s:s, s:I, s:I, s:I, s:I, s:I, s:f, s:f, s:f, s:f}", "name",
                           e[i].name, "calls", (json_int_t)e[i].calls, "p50_ns",
                           (json_int_t)e[i].p50_ns, "p90_ns", (json_int_t)e[i].p90_ns, "p99_ns",
                           (json_int_t)e[i].p99_ns, "max_ns", (json_int_t)e[i].max_ns,
                           "cpu_per_call_ns", e[i].cost_per_call[CM_EV_CPU],
                           "wall_per_call_ns", e[i].cost_per_call[CM_EV_WALL],
                           "alloc_per_call_bytes", e[i].cost_per_call[CM_EV_ALLOC], "cpu_share",
                           e[i].cpu_share));
    free(e);
    reply_json(r, 200, json_pack("{s:s, s:s?, s:o}", "service", svc, "version", ver, "endpoints",
                                 arr));
}

static void h_endpoint(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)url;
    const char *svc, *name = arg(a, "endpoint");
    cm_event_type_t type;
    int64_t from, to;
    filt_t ft;
    if (need_service(a, r, &svc) || parse_type(a, "type", r, &type) ||
        parse_time(a, "from", 0, r, &from) || parse_time(a, "to", INT64_MAX / 4, r, &to) ||
        parse_filter(a, r, &ft))
        return;
    if (!name || !*name) {
 reply_err(r, 400, "endpoint", "give the endpoint's name: parameter 'endpoint' (see "
                  "/api/v1/endpoints)");
        return;
    }
    agg_profile_t *p = NULL;
    int found = 0;
    const char *ver = arg(a, "version");
    int rc = agg_qstore_endpoint_profile(api->qs, svc, ver && *ver ? ver : NULL, name,
                                         s_to_ns(from), s_to_ns(to), type, &p, &found);
    if (rc) {
        reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
        return;
    }
    if (!found)
        reply_err(r, 404, "endpoint", "no request of endpoint '%s' of '%s' ended in the range", name,
                  svc);
    else if (!apply_filter(&ft, &p, r))
        render_profile(a, p, json_pack("{s:s, s:s}", "service", svc, "endpoint", name), r);
    agg_profile_free(p);
}

static void h_requests(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)url;
    const char *svc, *name = arg(a, "endpoint"), *stuck = arg(a, "stuck");
    int64_t from, to, min_ns, seen_ns;
    long long limit;
    if (need_service(a, r, &svc) || parse_time(a, "from", 0, r, &from) ||
        parse_time(a, "to", INT64_MAX / 4, r, &to) || parse_uint(a, "limit", 20, 10000, r, &limit) ||
        parse_dur(a, "min", 10000000000ll, r, &min_ns) ||
        parse_dur(a, "seen", 30000000000ll, r, &seen_ns))
        return;
    const char *ver = arg(a, "version");
    agg_reqq_t q = {.service = svc, .name = name && *name ? name : NULL,
                    .version = ver && *ver ? ver : NULL, .from_ns = s_to_ns(from),
                    .to_ns = s_to_ns(to)};
    if (stuck && !strcmp(stuck, "1")) { /* active at a cut in the last `seen`, for `min` */
        q.stuck = 1;
        q.min_ns = min_ns;
        q.from_ns = now_s() * 1000000000ll - seen_ns;
    }
    size_t want = limit ? (size_t)limit : 10000;
    q.limit = want + 1;
    agg_request_t *v = NULL;
    size_t n = 0;
    int rc = agg_qstore_requests(api->qs, &q, &v, &n);
    if (rc) {
        reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
        return;
    }
    int more = n > want;
    json_t *arr = json_array();
    for (size_t i = 0; i < n && i < want; i++)
        json_array_append_new(arr, request_json(&v[i]));
    free(v);
    reply_json(r, 200, json_pack("{s:s, s:b, s:o, s:b}", "service", svc, "stuck", q.stuck,
                                 "requests", arr, "more", more));
}

static void h_span(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)url;
    const char *tr = arg(a, "trace"), *sp = arg(a, "span");
    uint8_t trace[16], span[8];
    if ((!tr || !*tr) && (!sp || !*sp)) {
        reply_err(r, 400, "span", "give 'trace' (32 hex digits) or 'span' (16 hex digits)");
        return;
    }
    if (tr && *tr && parse_hexid(tr, trace, 16)) {
        reply_err(r, 400, "trace", "trace '%s' is not a trace id of 32 hex digits", tr);
        return;
    }
    if (sp && *sp && parse_hexid(sp, span, 8)) {
        reply_err(r, 400, "span", "span '%s' is not a span id of 16 hex digits", sp);
        return;
    }
    const uint8_t *tp = tr && *tr ? trace : NULL, *spp = sp && *sp ? span : NULL;
    filt_t ft;
    if (parse_filter(a, r, &ft))
        return;
    const char *ts = arg(a, "type");
    if (ts && *ts) { /* one event type: any view or format */
        cm_event_type_t type;
        if (parse_type(a, "type", r, &type))
            return;
        agg_profile_t *p = NULL;
        int found = 0;
        int rc = agg_qstore_span_profile(api->qs, tp, spp, type, &p, &found);
        if (rc) {
            reply_err(r, 500, NULL, "store read failed: %s", cm_strerror(rc));
            return;
        }
        if (!found || !p->n_rows) {
            reply_err(r, 404, spp ? "span" : "trace",
                      found ? "the span has no %s samples" : "unknown %s: not in the span index "
                      "(spans are kept for span-max-age)", found ? ts : spp ? "span" : "trace");
        } else if (!apply_filter(&ft, &p, r)) {
            render_profile(a, p, json_pack("{s:s?, s:s?}", "trace_id", tp ? tr : NULL, "span_id",
                                           spp ? sp : NULL),
                           r);
        }
        agg_profile_free(p);
        return;
    }
    /* every event type: totals and top functions of each */
    long long limit;
    if (parse_uint(a, "limit", 20, 10000, r, &limit))
        return;
    const char *format = arg(a, "format");
    int text = format && !strcmp(format, "text");
    if (format && *format && strcmp(format, "json") && !text) {
        reply_err(r, 400, "format", "format '%s' needs one event type: add type=cpu (or wall, "
                  "alloc, ...); without it json and text are available", format);
        return;
    }
    json_t *types = json_object();
    char *tbuf = NULL;
    size_t tlen = 0;
    FILE *tf = text ? open_memstream(&tbuf, &tlen) : NULL;
    int any = 0, found_any = 0;
    for (int t = 1; t <= CM_EV_MAX; t++) {
        agg_profile_t *p = NULL;
        int found = 0;
        if (agg_qstore_span_profile(api->qs, tp, spp, (cm_event_type_t)t, &p, &found))
            continue;
        found_any |= found;
        if (p->n_rows && !apply_filter(&ft, &p, r)) {
            agg_top_t top;
            if (agg_top_compute(p, AGG_SORT_SELF, (size_t)limit, &top) == 0) {
                any = 1;
                json_object_set_new(types, cm_event_name((uint32_t)t), agg_top_json(p, &top));
                if (tf) {
                    fprintf(tf, "== %s ==\n", cm_event_name((uint32_t)t));
                    agg_top_print(tf, p, &top);
                }
                agg_top_free(&top);
            }
        } else if (r->body) { /* a filter error */
            agg_profile_free(p);
            json_decref(types);
            if (tf)
                fclose(tf);
            free(tbuf);
            return;
        }
        agg_profile_free(p);
    }
    if (tf)
        fclose(tf);
    if (!found_any || !any) {
        free(tbuf);
        json_decref(types);
        reply_err(r, 404, spp ? "span" : "trace", "unknown %s '%s': not in the span index (spans "
                  "are kept for span-max-age)", spp ? "span" : "trace", spp ? sp : tr);
        return;
    }
    if (text) {
        json_decref(types);
        reply_buf(r, "text/plain; charset=utf-8", tbuf, tlen);
    } else {
        free(tbuf);
        json_t *o = json_pack("{s:s?, s:s?, s:o}", "trace_id", tp ? tr : NULL, "span_id",
                              spp ? sp : NULL, "types", types);
        agg_request_t rq;
        int known = 0; /* a named span (fleetprof_span_begin): its real duration beside */
        if (tp && spp && !agg_qstore_request(api->qs, tp, spp, &rq, &known) && known)
            json_object_set_new(o, "request", request_json(&rq));
        reply_json(r, 200, o);
    }
}

static void h_reports(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)url;
    const char *svc = arg(a, "service");
    json_t *waiting = NULL; /* the service's newest deploy, while its report waits */
    if (svc && *svc) {
        agg_qversion_t *v;
        size_t n;
        if (load_service(api, svc, r, &v, &n))
            return;
        /* versions by first seen: the newest against the one before, as the reporter does */
        if (n >= 2 && ((int64_t)v[n - 1].samples[CM_EV_CPU] < api->report_min ||
                       (int64_t)v[n - 2].samples[CM_EV_CPU] < api->report_min))
            waiting = json_pack("{s:s, s:s, s:I, s:I}", "base", v[n - 2].version, "test",
                                v[n - 1].version, "base_samples",
                                (json_int_t)v[n - 2].samples[CM_EV_CPU], "test_samples",
                                (json_int_t)v[n - 1].samples[CM_EV_CPU]);
        agg_qversions_free(v, n);
    }
    long long limit;
    if (parse_uint(a, "limit", 20, 1000, r, &limit)) {
        json_decref(waiting);
        return;
    }
    json_t *arr = NULL;
    int rc = agg_reports_list(api->store_dir, svc && *svc ? svc : NULL, (size_t)limit, &arr);
    if (rc) {
        json_decref(waiting);
        reply_err(r, 500, NULL, "reading reports failed: %s", cm_strerror(rc));
        return;
    }
    /* what a report waits for, and (one service) the deploy that waits */
    reply_json(r, 200, json_pack("{s:o, s:I, s:s, s:o*}", "reports", arr, "min_samples",
                                 (json_int_t)api->report_min, "min_samples_reason",
                                 api->report_min_set
                                     ? "CPU samples per side, set by --report-min-samples"
                                     : "CPU samples per side a new function taking 2% of the "
                                       "CPU needs to be found with 90% probability",
                                 "waiting", waiting));
}

static void h_unknown(agg_api_t *api, const args_t *a, const char *url, agg_http_reply_t *r) {
    (void)api;
    (void)a;
    reply_err(r, 404, NULL, "no route %s; see /api/v1/ routes: services, services/SERVICE/"
              "versions, event-types, profile, timeseries, diff, reports, spans, span, endpoints, "
              "endpoint, requests", url);
}

/* ---- dispatch ---- */

/* 1 when the path and every argument are valid UTF-8 (names, versions, labels end up in JSON
 * answers, which must be UTF-8); else 0 after a 400 naming the parameter. */
static int args_utf8(const args_t *a, const char *url, agg_http_reply_t *r) {
    if (!utf8_valid(url)) {
        reply_err(r, 400, NULL, "the path '%s' is not valid UTF-8", url);
        return 0;
    }
    for (size_t i = 0; i < a->n; i++) {
        if (!a->key[i] || !utf8_valid(a->key[i])) {
            reply_err(r, 400, NULL, "a parameter name ('%s') is not valid UTF-8",
                      a->key[i] ? a->key[i] : "");
            return 0;
        }
        if (a->val[i] && !utf8_valid(a->val[i])) {
            reply_err(r, 400, a->key[i], "parameter '%s' is not valid UTF-8: '%s'", a->key[i],
                      a->val[i]);
            return 0;
        }
    }
    return 1;
}

/* Runs a route with a store handle leased for this request (handlers see it as api->qs of a
 * copy of the API); 503 with Retry-After when every handle is busy and the queue is full or
 * the wait ran out. */
static void run_route(const route_t *rt, const args_t *a, const char *url, agg_http_reply_t *r) {
    agg_api_t *api = rt->api;
    agg_qpool_busy_t busy;
    agg_qstore_t *qs = NULL;
    int rc = agg_qpool_acquire(api->pool, &qs, &busy);
    if (rc == -EBUSY) {
        if (busy.timed_out)
            reply_err(r, 503, NULL, "the query API is saturated: all %zu query workers stayed "
                      "busy for the queue wait; retry later (api-workers, api-queue-wait)",
                      busy.running);
        else
            reply_err(r, 503, NULL, "the query API is saturated: %zu queries running and %zu "
                      "waiting; retry later (api-workers, api-queue)", busy.running,
                      busy.waiting);
        free(r->headers);
        r->headers = strdup("Retry-After: 1\n");
        return;
    }
    if (rc) {
        reply_err(r, 500, NULL, "cannot open the stores for this query: %s", cm_strerror(rc));
        return;
    }
    agg_api_t view = *api;
    view.qs = qs;
    rt->fn(&view, a, url, r);
    agg_qpool_release(api->pool, qs);
}

static void dispatch(void *arg_, const char *url, const char *query, agg_http_reply_t *r) {
    (void)query;
    route_t *rt = arg_;
    agg_api_t *api = rt->api;
    if (!authorized(api, r))
        return;
    args_t a = {0};
    agg_http_request_args(add_arg, &a);
    if (a.overflow) {
        reply_err(r, 400, NULL, "too many query parameters (at most %d)", MAX_ARGS);
    } else if (!args_utf8(&a, url, r)) {
    } else {
        run_route(rt, &a, url, r);
    }
    args_free(&a);
}

size_t agg_api_routes(agg_api_t *api, agg_http_route_t *routes, size_t max) {
    static const struct {
        const char *path;
        route_fn fn;
    } tab[] = {
        {"/api/v1/services", h_services},     {"/api/v1/services/", h_versions},
        {"/api/v1/event-types", h_event_types}, {"/api/v1/profile", h_profile},
        {"/api/v1/timeseries", h_timeseries}, {"/api/v1/diff", h_diff},
        {"/api/v1/reports", h_reports},       {"/api/v1/spans", h_spans},
        {"/api/v1/span", h_span},             {"/api/v1/endpoints", h_endpoints},
        {"/api/v1/endpoint", h_endpoint},     {"/api/v1/requests", h_requests},
        {"/api/v1/", h_unknown},
    };
    size_t n = 0;
    for (size_t i = 0; i < sizeof tab / sizeof tab[0] && n < max && n < AGG_API_ROUTES; i++) {
        api->routes[n] = (route_t){api, tab[i].fn};
        routes[n] = (agg_http_route_t){"GET", tab[i].path, dispatch, &api->routes[n]};
        n++;
    }
    return n;
}

void agg_api_call(agg_api_t *api, const char *url, const char *const *keys,
                  const char *const *vals, size_t n, agg_http_reply_t *r) {
    agg_http_route_t routes[AGG_API_ROUTES];
    size_t nr = agg_api_routes(api, routes, AGG_API_ROUTES);
    const agg_http_route_t *best = NULL;
    for (size_t i = 0; i < nr; i++) { /* exact path, else the longest '/'-ended prefix */
        size_t pl = strlen(routes[i].path);
        if (!strcmp(url, routes[i].path)) {
            best = &routes[i];
            break;
        }
        if (routes[i].path[pl - 1] == '/' && !strncmp(url, routes[i].path, pl) &&
            (!best || strlen(best->path) < pl))
            best = &routes[i];
    }
    if (!best) {
        reply_err(r, 404, NULL, "no such route");
        return;
    }
    args_t a = {0};
    for (size_t i = 0; i < n && !a.overflow; i++)
        add_arg(&a, keys[i], vals[i]);
    route_t *rt = best->arg;
    if (a.overflow) {
        reply_err(r, 400, NULL, "too many query parameters (at most %d)", MAX_ARGS);
    } else if (!args_utf8(&a, url, r)) {
    } else {
        run_route(rt, &a, url, r);
    }
    args_free(&a);
}

int agg_api_new(const agg_api_cfg_t *cfg, agg_api_t **out, char *err, size_t err_size) {
    agg_api_t *api = calloc(1, sizeof *api);
    if (!api)
        return CM_ENOMEM;
    api->store_dir = strdup(cfg->store_dir);
    api->report_min = agg_reports_min_samples(cfg->report_min_samples);
    api->report_min_set = cfg->report_min_samples > 0;
    api->token = cfg->token && *cfg->token ? strdup(cfg->token) : NULL;
    agg_qpool_cfg_t pc = {cfg->workers ? cfg->workers : AGG_API_DEFAULT_WORKERS,
                          cfg->queue_set ? cfg->queue : AGG_API_DEFAULT_QUEUE,
                          cfg->queue_wait_ms ? cfg->queue_wait_ms : AGG_API_DEFAULT_WAIT_MS};
    if (!api->store_dir) {
        agg_api_free(api);
        return CM_ENOMEM;
    }
    api->split_diff = cfg->store && agg_store_is_pg(cfg->store);
    int rc = agg_qpool_new(cfg->store && *cfg->store ? cfg->store : cfg->store_dir, &pc,
                           &api->pool, err, err_size);
    if (rc) {
        agg_api_free(api);
        return rc;
    }
    *out = api;
    return 0;
}

void agg_api_free(agg_api_t *api) {
    if (!api)
        return;
    agg_qpool_free(api->pool);
    free(api->store_dir);
    free(api->token);
    free(api);
}

char *agg_api_metrics(agg_api_t *api) {
    agg_qpool_stats_t st;
    agg_qpool_stats(api->pool, &st);
    char *out = NULL;
    if (asprintf(&out,
                 "# HELP fleetprof_aggregator_api_workers Query workers (store handles).\n"
                 "# TYPE fleetprof_aggregator_api_workers gauge\n"
                 "fleetprof_aggregator_api_workers %zu\n"
                 "# HELP fleetprof_aggregator_api_running Queries running now.\n"
                 "# TYPE fleetprof_aggregator_api_running gauge\n"
                 "fleetprof_aggregator_api_running %zu\n"
                 "# HELP fleetprof_aggregator_api_waiting Requests waiting for a worker now.\n"
                 "# TYPE fleetprof_aggregator_api_waiting gauge\n"
                 "fleetprof_aggregator_api_waiting %zu\n"
                 "# HELP fleetprof_aggregator_api_peak_running Most queries run at once.\n"
                 "# TYPE fleetprof_aggregator_api_peak_running gauge\n"
                 "fleetprof_aggregator_api_peak_running %zu\n"
                 "# HELP fleetprof_aggregator_api_requests_total API requests given a worker.\n"
                 "# TYPE fleetprof_aggregator_api_requests_total counter\n"
                 "fleetprof_aggregator_api_requests_total %llu\n"
                 "# HELP fleetprof_aggregator_api_saturated_total Requests answered 503 because "
                 "every worker was busy (queue full, or the wait ran out).\n"
                 "# TYPE fleetprof_aggregator_api_saturated_total counter\n"
                 "fleetprof_aggregator_api_saturated_total{why=\"queue_full\"} %llu\n"
                 "fleetprof_aggregator_api_saturated_total{why=\"wait_timeout\"} %llu\n"
                 "# HELP fleetprof_aggregator_api_wait_seconds_total Time requests waited for a "
                 "worker.\n"
                 "# TYPE fleetprof_aggregator_api_wait_seconds_total counter\n"
                 "fleetprof_aggregator_api_wait_seconds_total %.6f\n",
                 st.workers, st.running, st.waiting, st.peak_running,
                 (unsigned long long)st.leased, (unsigned long long)st.refused_full,
                 (unsigned long long)st.refused_timeout, st.wait_seconds) < 0)
        return NULL;
    return out;
}
