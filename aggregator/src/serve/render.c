/* The query API's replies (api_int.h): JSON (always valid UTF-8), errors naming the parameter,
 * and a profile rendered in the view and format the request asks for.
 * Threading: any thread; nothing shared. */
#define _GNU_SOURCE
#include "api_int.h"

#include "cm/error.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

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

int utf8_valid(const char *s) {
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
void utf8_fix(char *s) {
    for (unsigned char *p = (unsigned char *)s; *p;) {
        size_t n = utf8_seq(p);
        if (!n)
            *p = '?', n = 1;
        p += n;
    }
}

void reply_json(agg_http_reply_t *r, int status, json_t *o) {
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

void reply_err(agg_http_reply_t *r, int status, const char *param, const char *fmt, ...) {
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

void reply_buf(agg_http_reply_t *r, const char *type, char *buf, size_t len) {
    r->status = 200;
    r->content_type = type;
    r->body = buf;
    r->len = len;
}

json_t *samples_json(const uint64_t *s) {
    json_t *o = json_object();
    for (int t = 1; t <= CM_EV_MAX; t++)
        if (s[t])
            json_object_set_new(o, cm_event_name((uint32_t)t), json_integer((json_int_t)s[t]));
    return o;
}

char *memstream_text(void (*fn)(FILE *, void *), void *ctx, size_t *len) {
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f)
        return NULL;
    fn(f, ctx);
    fclose(f);
    return buf;
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

/* view=top: the heaviest functions (limit, sort) as JSON with meta's fields, or text. */
static void render_top(const args_t *a, const agg_profile_t *p, json_t *meta, int text,
                       agg_http_reply_t *r) {
    long long limit;
    if (parse_uint(a, "limit", 50, 100000, r, &limit))
        return;
    const char *sort = arg(a, "sort");
    if (sort && *sort && strcmp(sort, "self") && strcmp(sort, "total")) {
        reply_err(r, 400, "sort", "sort '%s' is not self or total", sort);
        return;
    }
    agg_top_t t;
    int rc = agg_top_compute(p, sort && !strcmp(sort, "total") ? AGG_SORT_TOTAL : AGG_SORT_SELF,
                             (size_t)limit, &t);
    if (rc) {
        reply_err(r, 500, NULL, "top failed: %s", cm_strerror(rc));
        return;
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
}

/* view=tree: the call tree down to min_share, at most limit nodes. */
static void render_tree(const args_t *a, const agg_profile_t *p, json_t *meta, int text,
                        agg_http_reply_t *r) {
    long long limit;
    double min_share;
    if (parse_uint(a, "limit", 2000, 100000, r, &limit) ||
        parse_double(a, "min_share", 0.005, 0, 0.999, r, &min_share))
        return;
    agg_tree_t t;
    int rc = agg_tree_compute(p, min_share, limit ? (size_t)limit : 100000, &t);
    if (rc) {
        reply_err(r, 500, NULL, "tree failed: %s", cm_strerror(rc));
        return;
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
}

/* view=callers: who calls `function` and what it calls. */
static void render_callers(const args_t *a, const agg_profile_t *p, json_t *meta, int text,
                           agg_http_reply_t *r) {
    const char *fn = arg(a, "function");
    if (!fn || !*fn) {
        reply_err(r, 400, "function", "view=callers needs parameter 'function' (a function "
                  "name or module!name)");
        return;
    }
    uint32_t fr = agg_profile_find_frame(p, fn);
    if (fr == AGG_NONE) {
        reply_err(r, 404, "function", "function '%s' is not in this profile", fn);
        return;
    }
    agg_callers_t c;
    int rc = agg_callers_compute(p, fr, &c);
    if (rc) {
        reply_err(r, 500, NULL, "callers failed: %s", cm_strerror(rc));
        return;
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

void render_profile(const args_t *a, const agg_profile_t *p, json_t *meta,
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
    if (!strcmp(view, "top"))
        render_top(a, p, meta, text, r);
    else if (!strcmp(view, "tree"))
        render_tree(a, p, meta, text, r);
    else
        render_callers(a, p, meta, text, r);
out:
    json_decref(meta);
}
