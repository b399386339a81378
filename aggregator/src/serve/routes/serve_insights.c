/* GET /api/v1/insights (serve_insights.h): reads the rules' input from the store
 * (qstore/qinsights.c), runs the rules and adds to each piece of evidence the profile route that
 * opens it (`link`: /api/v1/profile filtered with the evidence's include pattern, or its
 * io_target for a target, same service, version and window). Parameters are parsed by
 * route_insights.c (service, version, from, to).
 * Threading: the request's thread and store handle. */
#include "serve_insights.h"

#include "qinsights.h"

#include "cm/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Percent-encodes s (RFC 3986 unreserved kept) into out; cut at size. */
static void url_escape(const char *s, char *out, size_t size) {
    static const char hex[] = "0123456789ABCDEF";
    size_t k = 0;
    for (; *s && k + 4 < size; s++) {
        unsigned char c = (unsigned char)*s;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr("-._~", c)) {
            out[k++] = (char)c;
        } else {
            out[k++] = '%';
            out[k++] = hex[c >> 4];
            out[k++] = hex[c & 15];
        }
    }
    out[k] = 0;
}

static void add_links(json_t *ins, const char *service, const char *version, int64_t from_s,
                      int64_t to_s) {
    char svc[512], ver[512], inc[2048], link[4096];
    url_escape(service, svc, sizeof svc);
    url_escape(version ? version : "", ver, sizeof ver);
    size_t i, k;
    json_t *x, *e;
    json_array_foreach(ins, i, x) {
        const char *type = json_string_value(json_object_get(x, "type"));
        json_array_foreach(json_object_get(x, "evidence"), k, e) {
            const char *p = json_string_value(json_object_get(e, "include"));
            const char *tg = json_string_value(json_object_get(e, "io_target"));
            if (!p && !tg)
                continue;
            url_escape(p ? p : tg, inc, sizeof inc);
            snprintf(link, sizeof link,
                     "/api/v1/profile?service=%s%s%s&type=%s&from=%lld&to=%lld&%s=%s", svc,
                     version ? "&version=" : "", version ? ver : "", type ? type : "cpu",
                     (long long)from_s, (long long)to_s, p ? "include" : "io_target", inc);
            json_object_set_new(e, "link", json_string(link));
        }
    }
}

int agg_insights_query(agg_qstore_t *qs, const char *service, const char *version,
                       int64_t from_s, int64_t to_s, json_t **out) {
    agg_qinsight_t x;
    agg_insights_t r = {0};
    int rc = agg_qstore_insight_input(qs, service, version, from_s, to_s, &x);
    if (!rc)
        rc = agg_insights_run(&x.in, NULL, &r);
    json_t *j = rc ? NULL : agg_insights_json(&r);
    if (!rc && !j)
        rc = CM_ENOMEM;
    if (!rc) {
        add_links(json_object_get(j, "insights"), service, version, from_s, to_s);
        json_object_set_new(j, "service", json_string(service));
        json_object_set_new(j, "version", version ? json_string(version) : json_null());
        json_object_set_new(j, "from", json_integer(from_s));
        json_object_set_new(j, "to", json_integer(to_s));
        json_object_set_new(j, "process_seconds", json_real(x.in.process_seconds));
        *out = j;
    }
    agg_insights_free(&r);
    agg_qinsight_free(&x);
    return rc;
}

int agg_insights_new_in_version(agg_qstore_t *qs, const char *service, const char *base,
                                const char *test, json_t **out) {
    json_t *jb = NULL, *jt = NULL;
    int rc = agg_insights_query(qs, service, base, 0, INT64_MAX / 4, &jb);
    if (!rc)
        rc = agg_insights_query(qs, service, test, 0, INT64_MAX / 4, &jt);
    json_t *arr = rc ? NULL : json_array();
    size_t i, k;
    json_t *x, *y;
    json_array_foreach(arr ? json_object_get(jt, "insights") : NULL, i, x) {
        int old = 0;
        json_array_foreach(json_object_get(jb, "insights"), k, y)
            old |= json_equal(json_object_get(x, "rule"), json_object_get(y, "rule"));
        if (!old)
            json_array_append(arr, x);
    }
    json_decref(jb);
    json_decref(jt);
    if (!rc && !arr)
        rc = CM_ENOMEM;
    *out = arr;
    return rc;
}

void agg_serve_insights(agg_qstore_t *qs, const char *service, const char *version,
                        int64_t from_s, int64_t to_s, agg_http_reply_t *r) {
    json_t *j = NULL;
    int rc = agg_insights_query(qs, service, version, from_s, to_s, &j);
    char *body = rc ? NULL : json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    json_decref(j);
    if (!body) {
        char msg[256];
        snprintf(msg, sizeof msg, "{\"error\":\"insights: store read failed: %s\",\"status\":500}",
                 cm_strerror(rc ? rc : CM_ENOMEM));
        r->status = 500;
        body = strdup(msg);
    } else {
        r->status = 200;
    }
    r->content_type = "application/json";
    r->body = body;
    r->len = body ? strlen(body) : 0;
}
