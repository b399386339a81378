/* The whole pipeline for end-to-end tests: a fresh Kafka broker (one partition), the real
 * fleetprof-collector and fleetprof-aggregator, and programs started under `fleetprof run`
 * (the agent preloaded). Compiled into the tests that use it (SOURCES support/pipeline.c and
 * test-collector-client.c; they link fp_aggtest and fp_collector). Paths come from
 * FLEETPROF_BUILD. Not thread-safe. */
#ifndef TS_PIPELINE_H
#define TS_PIPELINE_H

#include "test-collector-client.h"

#include <sys/types.h>

typedef struct {
    char cli[512], demo[512]; /* the fleetprof CLI and deploy/demo/demo-service */
    char server[64];          /* the aggregator's http://127.0.0.1:PORT */
    char bootstrap[64];
    char dir[64];             /* temp dir: the stores, agg.log */
    char log[128];            /* the aggregator's log */
    int kport;
    tc_collector_t col;
    pid_t agg;
} ts_pipeline_t;

/* Starts the broker on kport, the collector (HTTP on col_http) and the aggregator (HTTP on
 * agg_http, consumer group tag, extra arguments NULL-terminated). Returns 0, or -1 after saying
 * which part did not start (call ts_pipeline_stop either way). */
int ts_pipeline_start(ts_pipeline_t *p, int kport, int col_http, int agg_http, const char *tag,
                      const char *const *agg_extra);
/* Stops the aggregator, the collector (SIGTERM, 30 s each) and the broker. */
void ts_pipeline_stop(ts_pipeline_t *p);
/* Forks `fleetprof run --service service --version version --collector <its socket>
 * --interval interval -- demo-service demo_args...` with env ("NAME=value", NULL-terminated,
 * may be NULL) added and stdout to /dev/null. Returns the child's pid (the program's, as run
 * execs it). */
pid_t ts_pipeline_demo(const ts_pipeline_t *p, const char *service, const char *version,
                       const char *interval, const char *const *env,
                       const char *const *demo_args);

#endif
