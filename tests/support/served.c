/* The served fleet of support/served.h. */
#include "support/served.h"
#include "support/kafka.h"

#include "cm/wire.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ts_served_start(ts_served_t *s) {
    const char *backend = getenv("FP_TEST_STORE");
    s->use_pg = backend && !strcmp(backend, "postgres");
    s->port = s->use_pg ? s->pg_kafka_port : s->kafka_port;
    s->http = s->use_pg ? s->pg_http_port : s->http_port;
    s->pid = -1;
    if (ts_kafka_start_retry(s->port, s->nparts, NULL, s->bootstrap, sizeof s->bootstrap)) {
        printf("cannot start Kafka\n");
        s->port = 0; /* nothing to stop */
        return -1;
    }
    at_tmpdir(s->dir, s->tag);
    snprintf(s->log, sizeof s->log, "%s/agg.log", s->dir);
    snprintf(s->store, sizeof s->store, "%s", s->dir);
    if (s->use_pg) {
        snprintf(s->pgdir, sizeof s->pgdir, "/tmp/fp-pg%s-%d", s->tag, (int)getpid());
        if (at_pg_start(s->pg_port, s->pgdir, s->store, sizeof s->store)) {
            s->pgdir[0] = '\0';
            return -1;
        }
    }
    s->sim = fsim_new(&s->params);
    s->rk = at_producer(s->bootstrap);
    int64_t hi[s->nparts];
    if (!s->sim || !s->rk || fsim_produce(s->sim, s->rk, CM_TOPIC_CHUNKS, 0) ||
        at_high_watermarks(s->rk, CM_TOPIC_CHUNKS, s->nparts, hi)) {
        printf("cannot produce\n");
        return -1;
    }
    const char *extra[] = {"--api-token", s->token, "--report-interval", "1s",
                           "--report-min-samples", "100", s->use_pg ? "--store" : NULL, s->store,
                           NULL};
    s->pid = at_agg_start(s->bootstrap, s->dir, s->tag, s->http, s->log, extra);
    if (s->pid < 0 || at_wait_caught_up(s->store, CM_TOPIC_CHUNKS, s->nparts, hi, 120)) {
        printf("aggregator did not catch up; see %s\n", s->log);
        return -1;
    }
    return 0;
}

void ts_served_stop(ts_served_t *s) {
    if (s->pid > 0)
        at_agg_stop(s->pid, SIGTERM, 30);
    if (s->rk)
        rd_kafka_destroy(s->rk);
    fsim_free(s->sim);
    if (s->port)
        ts_kafka_stop(s->port, 0);
    if (*s->pgdir) {
        char cmd[512];
        const char *src = getenv("FLEETPROF_SRC");
        snprintf(cmd, sizeof cmd, "%s/deploy/postgres/stop.sh %s --remove >/dev/null 2>&1",
                 src ? src : ".", s->pgdir);
        if (system(cmd) != 0)
            printf("could not stop PostgreSQL in %s\n", s->pgdir);
    }
}
