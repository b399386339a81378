/* Internals of the query API (api.h), shared by its files:
 *   api.c             the route table, authorization, leasing a store handle per request,
 *                     the API's life cycle and its worker metrics;
 *   params.c          the request's arguments, parsing and validation of each parameter
 *                     (a 400 naming it otherwise), the service/version lookups (404), filters;
 *   render.c          replies: JSON and errors (always UTF-8), a profile in its view and format;
 *   route_services.c  services, versions, event types, time series;
 *   route_profile.c   the profile (and its split by group_by), the query every profile read
 *                     shares;
 *   route_diff.c      the diff of two versions or time ranges;
 *   route_spans.c     spans, one span or trace, endpoints, requests, the per-endpoint diff of
 *                     two versions;
 *   route_reports.c   the per-deploy regression reports;
 *   route_insights.c  the insight rules (serve_insights.c), KPMs and search (serve_kpm.c).
 * Helpers return 0, or -1 (or NULL) once they have written the error reply: a handler returns
 * as soon as one fails.
 * The files call these helpers by short names; the symbols carry the agg_api_ prefix (the
 * defines below, as zlib's Z_PREFIX), so nothing else linked with the library can clash.
 * Threading: as api.h; everything here works on one request on the calling thread. */
#ifndef AGG_API_INT_H
#define AGG_API_INT_H

#include "api.h"
#include "qpool.h"
#include "query_store.h"

#include "query.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>

typedef struct agg_api agg_api_t;
typedef struct args args_t;
/* A route: answers url with the request's arguments a into r, on api->qs. */
typedef void route_handler_t(agg_api_t *api, const args_t *a, const char *url,
                             agg_http_reply_t *r);
typedef route_handler_t *route_fn;
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

/* ---- request arguments (params.c) ---- */

#define MAX_ARGS 64
struct args {
    char *key[MAX_ARGS], *val[MAX_ARGS];
    size_t n;
    int overflow;
};

#define add_arg agg_api_add_arg
#define args_free agg_api_args_free
#define arg(a, k) agg_api_arg(a, k) /* a function-like define: `arg` also names variables */
#define arg_all agg_api_arg_all
#define arg_is_one agg_api_arg_is_one
#define args_utf8 agg_api_args_utf8

/* Appends k=v to a_ (an args_t); 1 (and a->overflow) past MAX_ARGS. */
int add_arg(void *a_, const char *k, const char *v);
void args_free(args_t *a);
/* The first value of k ("" when it has none), or NULL when k is absent. */
const char *arg(const args_t *a, const char *k);
size_t arg_all(const args_t *a, const char *k, const char **out, size_t max);
int arg_is_one(const args_t *a, const char *k);
int args_utf8(const args_t *a, const char *url, agg_http_reply_t *r);

/* ---- parameter parsing: 0 ok, else a 400 has been written (params.c) ---- */

#define parse_type agg_api_parse_type
#define now_s agg_api_now_s
#define parse_time agg_api_parse_time
#define s_to_ns agg_api_s_to_ns
#define parse_uint agg_api_parse_uint
#define parse_double agg_api_parse_double
#define parse_hexid agg_api_parse_hexid
#define parse_dur agg_api_parse_dur
#define parse_label agg_api_parse_label
#define parse_dims agg_api_parse_dims
#define need_service agg_api_need_service
#define load_service agg_api_load_service
#define check_versions agg_api_check_versions
#define parse_filter agg_api_parse_filter
#define apply_filter agg_api_apply_filter

int parse_type(const args_t *a, const char *name, agg_http_reply_t *r, cm_event_type_t *t);
int64_t now_s(void);
int parse_time(const args_t *a, const char *name, int64_t dflt, agg_http_reply_t *r,
               int64_t *out);
int64_t s_to_ns(int64_t s);
int parse_uint(const args_t *a, const char *name, long long dflt, long long max,
               agg_http_reply_t *r, long long *out);
int parse_double(const args_t *a, const char *name, double dflt, double lo, double hi,
                 agg_http_reply_t *r, double *out);
/* Hex digits v into out[0..n): 0, or -1 (no reply written) unless exactly 2n of them. */
int parse_hexid(const char *v, uint8_t *out, size_t n);
int parse_dur(const args_t *a, const char *name, int64_t dflt, agg_http_reply_t *r,
              int64_t *ns);
/* label=KEY:VALUE into key (size ks) and *value (into a); *value NULL without the parameter. */
int parse_label(const args_t *a, agg_http_reply_t *r, char *key, size_t ks, const char **value);
size_t parse_dims(const args_t *a, agg_qfilter_t *f, size_t n, size_t max);
int need_service(const args_t *a, agg_http_reply_t *r, const char **svc);
int load_service(agg_api_t *api, const char *service, agg_http_reply_t *r, agg_qversion_t **v,
                 size_t *n);
/* 0 when every names[i] is a version in v, else -1 after a 404 naming param. */
int check_versions(const agg_qversion_t *v, size_t n, const char *svc, const char *param,
                   const char *const *names, size_t nn, agg_http_reply_t *r);

/* Builds the filter from include/exclude/fold/group/by_module into f (pointers into a). */
typedef struct {
    const char *inc[16], *exc[16], *fold[16], *grp[16];
    agg_group_rule_t rules[16];
    char grpbuf[16][256];
    agg_filter_t f;
    int any;
} filt_t;

/* Fills ft from a's filter parameters, each pattern compiled once to check it. */
int parse_filter(const args_t *a, agg_http_reply_t *r, filt_t *ft);
int apply_filter(filt_t *ft, agg_profile_t **p, agg_http_reply_t *r);

/* ---- replies (render.c) ---- */

#define utf8_valid agg_api_utf8_valid
#define utf8_fix agg_api_utf8_fix
#define reply_json agg_api_reply_json
#define reply_err agg_api_reply_err
#define reply_buf agg_api_reply_buf
#define samples_json agg_api_samples_json
#define memstream_text agg_api_memstream_text
#define render_profile agg_api_render_profile

int utf8_valid(const char *s);
void utf8_fix(char *s);
/* The reply is o (its reference taken), or a 500 when o is NULL. */
void reply_json(agg_http_reply_t *r, int status, json_t *o);
/* A JSON error: {"error": the message, "status", "parameter": param when not NULL}. */
void reply_err(agg_http_reply_t *r, int status, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The reply is buf (malloc'ed, taken) of this content type. */
void reply_buf(agg_http_reply_t *r, const char *type, char *buf, size_t len);
/* {"cpu": n, ...} of the event types with samples in s[1..CM_EV_MAX]. */
json_t *samples_json(const uint64_t *s);
/* What fn(f, ctx) printed, malloc'ed (its length in *len), or NULL. */
char *memstream_text(void (*fn)(FILE *, void *), void *ctx, size_t *len);
/* Replies with p in the view (top, tree, callers) and format (json, text, folded, pprof) a
 * asks for; the JSON answers carry the fields of meta (its reference taken). */
void render_profile(const args_t *a, const agg_profile_t *p, json_t *meta, agg_http_reply_t *r);

/* ---- the profile every route reads (route_profile.c) ---- */

#define query_profile agg_api_query_profile
#define query_profile_by agg_api_query_profile_by

/* Common: service, versions, type, time range, label, filters -> a filtered profile. Returns
 * the profile or NULL with the reply written. */
agg_profile_t *query_profile(agg_api_t *api, const args_t *a, agg_http_reply_t *r,
                             const char *vparam, const char *from_p, const char *to_p,
                             int replicates, int per_request, filt_t *ft, json_t **meta);
agg_profile_t *query_profile_by(agg_api_t *api, const args_t *a, agg_http_reply_t *r,
                                const char *vparam, const char *from_p, const char *to_p,
                                int replicates, int per_request, filt_t *ft, json_t **meta,
                                const agg_qfilter_t *extra, agg_qspec_t *spec_out);

/* ---- routes (route_*.c), each a route_fn ---- */

#define h_services agg_api_h_services
#define h_versions agg_api_h_versions
#define h_event_types agg_api_h_event_types
#define h_timeseries agg_api_h_timeseries
#define h_profile agg_api_h_profile
#define h_diff agg_api_h_diff
#define h_spans agg_api_h_spans
#define h_span agg_api_h_span
#define h_endpoints agg_api_h_endpoints
#define h_endpoint agg_api_h_endpoint
#define h_requests agg_api_h_requests
#define h_reports agg_api_h_reports
#define h_endpoint_diff agg_api_h_endpoint_diff
#define h_insights agg_api_h_insights
#define h_kpm agg_api_h_kpm

route_handler_t h_services, h_versions, h_event_types, h_timeseries, h_profile, h_diff, h_spans,
    h_span, h_endpoints, h_endpoint, h_requests, h_reports, h_endpoint_diff, h_insights,
    h_kpm;

#endif
