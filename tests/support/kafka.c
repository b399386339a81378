/* Test helper around deploy/kafka/{start,stop}.sh. */
#include "support/kafka.h"

#include <stdio.h>
#include <stdlib.h>

static const char *src_dir(void) {
    const char *s = getenv("FLEETPROF_SRC");
    return s ? s : ".";
}

static int run(const char *cmd) {
    int rc = system(cmd);
    if (rc != 0)
        fprintf(stderr, "kafka helper: '%s' failed (status %d)\n", cmd, rc);
    return rc == 0 ? 0 : -1;
}

int ts_kafka_start(int port, int partitions, const char *extra_topics, char *bootstrap,
                   size_t size) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "KAFKA_PORT=%d KAFKA_PARTITIONS=%d KAFKA_TOPICS='%s' %s/deploy/kafka/start.sh "
             ">/dev/null",
             port, partitions, extra_topics ? extra_topics : "", src_dir());
    snprintf(bootstrap, size, "127.0.0.1:%d", port);
    const char *cleanup = getenv("TR_CLEANUP_FILE"); /* the runner stops it if the test fails */
    FILE *f = cleanup ? fopen(cleanup, "a") : NULL;
    if (f) {
        fprintf(f, "kafka %d\n", port);
        fclose(f);
    }
    return run(cmd);
}

int ts_kafka_start_retry(int port, int partitions, const char *extra_topics, char *bootstrap,
                         size_t size) {
    if (ts_kafka_start(port, partitions, extra_topics, bootstrap, size) == 0)
        return 0;
    ts_kafka_stop(port, 0);
    return ts_kafka_start(port, partitions, extra_topics, bootstrap, size);
}

int ts_kafka_stop(int port, int keep_data) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "KAFKA_PORT=%d KAFKA_KEEP_DATA=%d %s/deploy/kafka/stop.sh >/dev/null",
             port, keep_data ? 1 : 0, src_dir());
    return run(cmd);
}

int ts_kafka_restart(int port) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "KAFKA_PORT=%d %s/deploy/kafka/start.sh --restart >/dev/null", port,
             src_dir());
    return run(cmd);
}
