/* The pipeline for end-to-end tests (see pipeline.h). */
#include "support/pipeline.h"

#include "aggtest.h"
#include "support/kafka.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ts_pipeline_start(ts_pipeline_t *p, int kport, int col_http, int agg_http, const char *tag,
                      const char *const *agg_extra) {
    const char *b = getenv("FLEETPROF_BUILD") ? getenv("FLEETPROF_BUILD") : ".";
    memset(p, 0, sizeof *p);
    p->agg = -1;
    snprintf(p->cli, sizeof p->cli, "%s/cli/fleetprof", b);
    snprintf(p->demo, sizeof p->demo, "%s/deploy/demo/demo-service", b);
    snprintf(p->server, sizeof p->server, "http://127.0.0.1:%d", agg_http);
    if (tc_kafka_fresh(kport, 1, p->bootstrap, sizeof p->bootstrap)) {
        printf("cannot start Kafka\n");
        return -1;
    }
    p->kport = kport;
    at_tmpdir(p->dir, tag);
    snprintf(p->log, sizeof p->log, "%s/agg.log", p->dir);
    if (tc_collector_start(&p->col, p->bootstrap, col_http, NULL)) {
        printf("collector did not start\n");
        return -1;
    }
    p->agg = at_agg_start(p->bootstrap, p->dir, tag, agg_http, p->log, agg_extra);
    if (p->agg < 0) {
        printf("aggregator did not start\n");
        return -1;
    }
    return 0;
}

void ts_pipeline_stop(ts_pipeline_t *p) {
    if (p->agg > 0)
        at_agg_stop(p->agg, SIGTERM, 30);
    if (p->col.pid > 0)
        tc_collector_stop(&p->col, SIGTERM, 30);
    if (p->kport)
        ts_kafka_stop(p->kport, 0);
}

pid_t ts_pipeline_demo(const ts_pipeline_t *p, const char *service, const char *version,
                       const char *interval, const char *const *env,
                       const char *const *demo_args) {
    pid_t pid = fork();
    if (pid)
        return pid;
    int fd = open("/dev/null", O_WRONLY);
    dup2(fd, 1);
    for (size_t i = 0; env && env[i]; i++)
        putenv((char *)env[i]);
    const char *argv[64] = {p->cli,   "run",      "--service",  service, "--version", version,
                            "--collector", p->col.sock, "--interval", interval, "--", p->demo};
    size_t n = 12;
    for (size_t i = 0; demo_args && demo_args[i] && n < 63; i++)
        argv[n++] = demo_args[i];
    argv[n] = NULL;
    execv(p->cli, (char *const *)argv);
    _exit(127);
}
