/* The one read interface of the stores (the API, the reports, the tools and the tests read
 * through it): opens every partition store of a store directory ("<dir>/<topic>-<partition>.db",
 * see store.h) READ-ONLY with its own SQLite connections, or the PostgreSQL database of a
 * `--store postgres://...` aggregator (one connection), and fills the analysis library's
 * models (agg_profile_t, agg_span_cost_t) from them: versions of a service, merged profiles
 * (optionally one replicate per (version, time bucket) with the process-seconds of that bucket
 * as its work, for the diff), time series of totals, spans and the profile of one trace or
 * span.
 *
 * It reads the schema written by store_sqlite.c and store_pg.c (the same tables) with SQL
 * written once and run through the executor of qexec.h (SQLite or libpq); strings are found
 * by their content id (agg_intern_string_id).
 *
 * Threading: a handle belongs to one thread (the HTTP thread, or the report thread); open one
 * handle per thread. SQLite's WAL lets it read while the consume loop writes.
 */
#ifndef AGG_QUERY_STORE_H
#define AGG_QUERY_STORE_H

#include "dims.h"
#include "profile.h"
#include "span.h"

#include <stddef.h>
#include <stdint.h>

typedef struct agg_qstore agg_qstore_t;

/* Opens the stores under dir (files are looked up again at every query, so partitions created
 * later are seen), or, when dir is a postgres:// or postgresql:// URL, that database.
 * Returns 0 or CM_EINVAL/-errno with the reason in err. */
int agg_qstore_open(const char *dir, agg_qstore_t **out, char *err, size_t err_size);
void agg_qstore_close(agg_qstore_t *qs);

typedef struct {
    char *service, *version;
    int64_t first_ns, last_ns; /* first chunk start, last chunk end (deploy markers) */
    int64_t chunks;
    uint64_t samples[CM_EV_COUNT]; /* events per type */
    uint64_t count[CM_EV_COUNT];   /* the same in milli-events (CM_COUNT_ONE = one event) */
    uint64_t rows[CM_EV_COUNT];    /* sample rows the agents sent, per type */
    uint64_t weight[CM_EV_COUNT];
    double process_seconds;        /* work: summed chunk intervals */
    uint64_t work_units;           /* units of work the application counted (requests) */
} agg_qversion_t;

/* Versions of one service (service NULL: of every service), sorted by service then first_ns.
 * Returns 0 or a CM_E* code. Free with agg_qversions_free(). */
int agg_qstore_versions(agg_qstore_t *qs, const char *service, agg_qversion_t **out, size_t *n);
void agg_qversions_free(agg_qversion_t *v, size_t n);

typedef struct {
    const char *service;
    const char *const *versions; /* NULL or n_versions == 0: every version */
    size_t n_versions;
    cm_event_type_t type;
    int64_t from_s, to_s;                /* bucket start in [from_s, to_s) */
    const char *label_key, *label_value; /* both set: only samples with this label */
    const agg_qfilter_t *filters;        /* and these labels/dimensions (dims.h), all of them */
    size_t n_filters;                    /* at most AGG_QMAX_FILTERS */
    int replicates; /* AGG_QREP_*: what the profile carries besides the per-stack totals */
    int exact;      /* 1: read the fine rows only, never the coarse rollup (tests, debugging) */
    int per_request; /* 1: a replicate's work is the units of work counted, not process-seconds */
    int lines;       /* AGG_QLINES_*: source lines and inlined frames (not for diffs) */
    int by_process;  /* 1: with per-stack replicates, one replicate per process (pid dimension)
                      * and bucket, grouped by process: the diff's replicates */
} agg_qspec_t;

enum {
    AGG_QLINES_OFF = 0,
    AGG_QLINES_ON = 1,        /* frames carry source lines, inlined functions are frames */
    AGG_QLINES_ADDRESSES = 2, /* and one frame per address (a pprof export's locations) */
};

#define AGG_QMAX_VERSIONS 200
#define AGG_QMAX_TIERS 8
/* AGG_QREP_LEAVES falls back to AGG_QREP_STACKS below this many replicates with work */
#define AGG_QMIN_LEAF_REPLICATES 10
enum {
    AGG_QREP_NONE = 0, /* one replicate, "all": views, exports */
    /* one replicate per (version, width, bucket), work = process-seconds: */
    AGG_QREP_LEAVES = 1, /* the leaf-replicate form (profile.h): a diff of self cost */
    /* (work: process-seconds, or the units of work counted when per_request) */
    AGG_QREP_STACKS = 2, /* every replicate's stacks: a diff after filters, or of inclusive cost */
};

/* One value of a label or dimension and the samples of q carrying it. */
typedef struct {
    char *value; /* NULL: the samples without that label */
    uint64_t weight, count, rows;
} agg_qgroup_t;

/* The samples of q split by the value of label `key` (a dimension name, dims.h, or an
 * application label), heaviest first. Returns 0 or a CM_E* code; free with agg_qgroups_free. */
int agg_qstore_groups(agg_qstore_t *qs, const agg_qspec_t *q, const char *key,
                      agg_qgroup_t **out, size_t *n);
void agg_qgroups_free(agg_qgroup_t *g, size_t n);

/* Merged profile of q into a new *out (sealed). Returns 0 or a CM_E* code. */
int agg_qstore_profile(agg_qstore_t *qs, const agg_qspec_t *q, agg_profile_t **out);

typedef struct {
    const char *version; /* owned by the series */
    int64_t bucket, width;
    uint64_t weight, count;
} agg_qpoint_t;

typedef struct {
    agg_qpoint_t *points; /* ordered by version then bucket */
    size_t n;
    char **strings;
    size_t n_strings;
} agg_qseries_t;

int agg_qstore_timeseries(agg_qstore_t *qs, const char *service, cm_event_type_t type,
                          int64_t from_s, int64_t to_s, agg_qseries_t *out);
/* The same restricted to the samples whose label set holds label_key=label_value (NULL: all)
 * and every filter (dims.h; n_filters at most AGG_QMAX_FILTERS), summed from the per-stack
 * profile rows (a scan of the service's rows in the range: slower than the totals the
 * unfiltered series reads). */
int agg_qstore_timeseries_label(agg_qstore_t *qs, const char *service, cm_event_type_t type,
                                int64_t from_s, int64_t to_s, const char *label_key,
                                const char *label_value, const agg_qfilter_t *filters,
                                size_t n_filters, agg_qseries_t *out);
void agg_qseries_free(agg_qseries_t *s);

/* Spans of a service seen in [from_ns, to_ns), at most limit, ranked by type (0: by rows).
 * *out is malloc'ed. Returns 0 or a CM_E* code. */
int agg_qstore_spans(agg_qstore_t *qs, const char *service, int64_t from_ns, int64_t to_ns,
                     cm_event_type_t type, size_t limit, agg_span_cost_t **out, size_t *n);

/* Profile of event type `type` of one trace (span NULL), one span (trace NULL) or both.
 * Rows carry the (trace, span) context. *found is set to 1 when the span index knows the
 * trace/span at all (in any type). Returns 0 or a CM_E* code. */
int agg_qstore_span_profile(agg_qstore_t *qs, const uint8_t *trace, const uint8_t *span,
                            cm_event_type_t type, agg_profile_t **out, int *found);
/* The same, of service's spans only (service NULL: any service). */
int agg_qstore_span_profile_of(agg_qstore_t *qs, const char *service, const uint8_t *trace,
                               const uint8_t *span, cm_event_type_t type, agg_profile_t **out,
                               int *found);

/* ---- requests: the spans the application named (fleetprof_span_begin/_end) ---- */
#define AGG_REQ_NAME_MAX 128
typedef struct {
    uint8_t trace_id[16], span_id[8];
    char name[AGG_REQ_NAME_MAX + 1]; /* the endpoint; "" unnamed */
    int64_t start_ns, end_ns; /* end: the end, or the last cut at which it was still active */
    int ended;
    int64_t tid;
    uint64_t cost[CM_EV_COUNT]; /* sampled cost per event type (ns or bytes): cpu = on CPU */
} agg_request_t;

typedef struct {
    const char *service;
    const char *name;        /* NULL: every endpoint */
    const char *version;     /* NULL: every version */
    int64_t from_ns, to_ns;  /* ended requests: those that ended in [from, to) */
    int stuck;               /* 1: instead, those not ended, seen active at or after from_ns
                              * (the last chunk cut), running for at least min_ns by then */
    int64_t min_ns;
    size_t limit;            /* 0: all (at most AGG_REQ_MAX) */
} agg_reqq_t;
#define AGG_REQ_MAX 1000000

/* Requests of q, slowest first (then trace, span: a total order). *out is malloc'ed. Returns
 * 0 or a CM_E* code. */
int agg_qstore_requests(agg_qstore_t *qs, const agg_reqq_t *q, agg_request_t **out, size_t *n);

/* The request (named span) with these ids, of service (NULL: any), if the store has it:
 * *found = 1 and *out. */
int agg_qstore_request(agg_qstore_t *qs, const char *service, const uint8_t trace[16],
                       const uint8_t span[8], agg_request_t *out, int *found);

/* One endpoint of a service over a window: the requests that ended in it. */
typedef struct {
    char name[AGG_REQ_NAME_MAX + 1];
    uint64_t calls;
    int64_t p50_ns, p90_ns, p99_ns, max_ns; /* nearest-rank percentiles of the durations */
    double cost_per_call[CM_EV_COUNT];      /* sampled cost per call (ns, bytes) */
    double cpu_share;                        /* its CPU / the CPU of every endpoint */
} agg_endpoint_t;

/* Endpoints of service (of one version; NULL: all) over [from_ns, to_ns), ranked by p99 (then
 * name): two versions' cost per call side by side compare an endpoint across a deploy.
 * Returns 0 or a CM_E* code; *out malloc'ed. */
int agg_qstore_endpoints(agg_qstore_t *qs, const char *service, const char *version,
                         int64_t from_ns, int64_t to_ns, agg_endpoint_t **out, size_t *n);
/* Profile of event type `type` of every request of endpoint `name` of service (of one version;
 * NULL: all) that ended in [from_ns, to_ns) (their spans merged). *found: the endpoint has a
 * request there. */
int agg_qstore_endpoint_profile(agg_qstore_t *qs, const char *service, const char *version,
                                const char *name, int64_t from_ns, int64_t to_ns,
                                cm_event_type_t type, agg_profile_t **out, int *found);
/* Profile of the requests of endpoint `name` among those q selects (service, versions, from_s
 * to to_s by their end, type, lines): the samples of their spans. With q->replicates, one
 * replicate per version and bucket of the requests' end times (at most 30, >= 1 s each) whose
 * work is the calls that ended in it: a diff of it compares cost per call. Labels and
 * dimensions of q are not applied (a span's samples are kept without them). *found: a request
 * of it ended there. Returns 0 or a CM_E* code. */
int agg_qstore_endpoint_query(agg_qstore_t *qs, const agg_qspec_t *q, const char *name,
                              agg_profile_t **out, int *found);

/* Rejected messages (dead-lettered) by reason, summed over the partitions, sorted by reason.
 * Returns 0 or a CM_E* code; free with agg_qrejects_free. */
typedef struct {
    char *reason;
    uint64_t count;
} agg_qreject_t;
int agg_qstore_rejects(agg_qstore_t *qs, agg_qreject_t **out, size_t *n);
void agg_qrejects_free(agg_qreject_t *r, size_t n);

#endif
