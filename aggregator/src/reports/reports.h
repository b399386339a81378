/* Automatic per-deploy regression reports: a background thread of the aggregator looks at
 * every service every report-interval; when the newest version of a service (by first seen)
 * has gathered at least min_samples CPU samples and the version before it has too, it computes
 * the diff newest-vs-previous (query_store + agg_diff_compute, the same test as /api/v1/diff)
 * and keeps it in "<store-dir>/reports.db" (table reports, one row per
 * (service, base, test, type)); it recomputes the report each time the new version's samples
 * have doubled since, so a deploy's report sharpens as data arrives (log2 many times).
 * GET /api/v1/reports and `fleetprof reports` list them.
 *
 * Threading: the reporter owns its thread and its own read-only store handle; the report DB
 * is written by that thread only and read by the API's thread (SQLite WAL, busy timeout).
 */
#ifndef AGG_REPORTS_H
#define AGG_REPORTS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define AGG_REPORT_TARGET_SHARE 0.02 /* default target: a new function taking 2 % of the CPU */

typedef struct {
    const char *store_dir;
    int64_t min_samples; /* per side, CPU samples; 0: what AGG_REPORT_TARGET_SHARE needs */
    int64_t interval_ms; /* how often to look; 0: never (no thread) */
    const char *fold;    /* NULL/"": none; else an ERE of frames folded into their callers
                          * before the diff (e.g. a shared helper: "burn$") */
    const char *store;   /* NULL/"": the SQLite stores in store_dir; else the postgres:// URL
                          * the profiles are read from (reports.db stays in store_dir); must
                          * outlive the reporter */
} agg_reports_cfg_t;

typedef struct agg_reporter agg_reporter_t;

/* Starts the reporter thread. Returns 0 or a negative code with the reason in err. */
int agg_reports_start(const agg_reports_cfg_t *cfg, agg_reporter_t **out, char *err,
                      size_t err_size);
void agg_reports_stop(agg_reporter_t *r);

/* The CPU samples per side a report waits for: configured (> 0), or what a new function
 * taking AGG_REPORT_TARGET_SHARE of the CPU needs to be found with 90 % probability. */
int64_t agg_reports_min_samples(int64_t configured);

/* One pass now (used by the thread, and by tests): computes the missing reports. Returns the
 * number of reports written, or a negative code. */
int agg_reports_run_once(const agg_reports_cfg_t *cfg);

/* Reports (newest first, at most limit; service NULL: all) as a JSON array of
 * {service, base, test, event_type, created_ns, regressions, improvements, base_samples,
 *  test_samples, diff}. An absent reports DB is an empty array. Returns 0 or a CM_E* code. */
int agg_reports_list(const char *store_dir, const char *service, size_t limit, json_t **out);

#endif
