/* The query API's parameters (api_int.h): the request's arguments, each parameter parsed and
 * checked with a 400 naming it when it is wrong, the service and version lookups (404), the
 * profile filters (include, exclude, fold, group, by_module).
 * Threading: any thread; nothing shared. */
#define _GNU_SOURCE
#include "api_int.h"

#include "pattern.h"

#include "cm/error.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int add_arg(void *a_, const char *k, const char *v) {
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

void args_free(args_t *a) {
    for (size_t i = 0; i < a->n; i++) {
        free(a->key[i]);
        free(a->val[i]);
    }
}

const char *arg(const args_t *a, const char *k) {
    for (size_t i = 0; i < a->n; i++)
        if (a->key[i] && !strcmp(a->key[i], k))
            return a->val[i] ? a->val[i] : "";
    return NULL;
}

/* All values of k (pointers into a), at most max. */
size_t arg_all(const args_t *a, const char *k, const char **out, size_t max) {
    size_t n = 0;
    for (size_t i = 0; i < a->n && n < max; i++)
        if (a->key[i] && !strcmp(a->key[i], k) && a->val[i])
            out[n++] = a->val[i];
    return n;
}

int parse_type(const args_t *a, const char *name, agg_http_reply_t *r,
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

int64_t now_s(void) { return (int64_t)time(NULL); }

/* Sets *out to dflt and returns the value of argument name, or NULL when it is absent or
 * empty (the caller keeps the default). */
static const char *arg_i64(const args_t *a, const char *name, int64_t dflt, int64_t *out) {
    const char *v = arg(a, name);
    *out = dflt;
    return v && *v ? v : NULL;
}

/* Unix seconds, "now", or "-DURATION" relative to now (s, m, h, d). */
int parse_time(const args_t *a, const char *name, int64_t dflt, agg_http_reply_t *r,
                      int64_t *out) {
    const char *v = arg_i64(a, name, dflt, out);
    if (!v)
        return 0;
    if (!strcmp(v, "now")) {
        *out = now_s();
        return 0;
    }
    char *end;
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
int64_t s_to_ns(int64_t s) {
    const int64_t g = 1000000000;
    return s >= INT64_MAX / g ? INT64_MAX : s <= INT64_MIN / g ? INT64_MIN : s * g;
}

int parse_uint(const args_t *a, const char *name, long long dflt, long long max,
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

int parse_double(const args_t *a, const char *name, double dflt, double lo, double hi,
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

int parse_hexid(const char *v, uint8_t *out, size_t n) {
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

/* Parses a duration like "10s", "500ms", "2m" or nanoseconds into *ns. */
int parse_dur(const args_t *a, const char *name, int64_t dflt, agg_http_reply_t *r,
                     int64_t *ns) {
    const char *v = arg_i64(a, name, dflt, ns);
    if (!v)
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

/* Loads the versions of service; 404 when it has none. Returns 0 or -1 (reply written). */
int load_service(agg_api_t *api, const char *service, agg_http_reply_t *r,
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

int need_service(const args_t *a, agg_http_reply_t *r, const char **svc) {
    *svc = arg(a, "service");
    if (*svc && **svc)
        return 0;
    reply_err(r, 400, "service", "parameter 'service' is required (a service name, see "
              "/api/v1/services)");
    return -1;
}

int check_versions(const agg_qversion_t *v, size_t n, const char *svc, const char *param,
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

/* Dimension filters (dims.h): host, node, pod, container, pid, io_target, fd_kind, lock; all
 * must hold. Appends to f (at most max); returns the count. */
size_t parse_dims(const args_t *a, agg_qfilter_t *f, size_t n, size_t max) {
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

int arg_is_one(const args_t *a, const char *k) {
    const char *v = arg(a, k);
    return v && !strcmp(v, "1");
}

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

int parse_filter(const args_t *a, agg_http_reply_t *r, filt_t *ft) {
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
int apply_filter(filt_t *ft, agg_profile_t **p, agg_http_reply_t *r) {
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

int parse_label(const args_t *a, agg_http_reply_t *r, char *key, size_t ks,
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

/* 1 when the path and every argument are valid UTF-8 (names, versions, labels end up in JSON
 * answers, which must be UTF-8); else 0 after a 400 naming the parameter. */
int args_utf8(const args_t *a, const char *url, agg_http_reply_t *r) {
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
