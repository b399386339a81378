/* fleetprof-collector: parses the arguments, loads the configuration, runs the server.
 * Exit codes: 0 after a drain, 2 on a configuration error, 1 if it cannot start, 70 after a
 * fatal Kafka producer error (restart; the spool replays). */
#include "internal.h"

#include "cm/chunk.h"
#include "cm/log.h"
#include "cm/wire.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    col_config_t cfg;
    cm_kvlist_t kafka = {0};
    char err[1024];
    cm_log_init("collector", CM_LOG_INFO);
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        printf("fleetprof-collector %s (chunk format %d.%d, socket protocol %d)\n",
               FLEETPROF_VERSION_STRING, CM_FORMAT_MAJOR, CM_FORMAT_MINOR, CM_SOCK_VERSION);
        return 0;
    }
    int rc = col_config_load(&cfg, &kafka, argc, argv, err, sizeof err);
    if (rc == 1) {
        col_config_free(&cfg, &kafka);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "fleetprof-collector: %s\n", err);
        col_config_free(&cfg, &kafka);
        return 2;
    }
    cm_log_level_t level = CM_LOG_INFO;
    cm_log_parse_level(cfg.log_level, &level);
    cm_log_set_level(level);
    rc = col_server_run(&cfg, &kafka);
    col_config_free(&cfg, &kafka);
    return rc;
}
