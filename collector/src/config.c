/* The collector's option table (flags, FLEETPROF_COLLECTOR_* variables, INI file) and the
 * checks that span several options. Startup only; not thread-safe. */
#include "internal.h"

#include "cm/error.h"
#include "cm/log.h"
#include "cm/wire.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define OFF(f) offsetof(col_config_t, f)

static const cm_opt_t col_opts[] = {
    {"socket", CM_OPT_STRING, CM_DEFAULT_SOCKET, OFF(socket), 0, 0,
     "unix socket the agents connect to (FLEETPROF_COLLECTOR on their side)"},
    {"socket-mode", CM_OPT_INT, "438", OFF(socket_mode), 0, 0777,
     "permission bits of the socket, decimal (438 = 0666: every local uid may send, identity "
     "comes from peer credentials and the uid-* limits bound each uid; 432 = 0660 with "
     "socket-group restricts to a group)"},
    {"socket-group", CM_OPT_STRING, "", OFF(socket_group), 0, 0,
     "group (name or number) given the socket; with socket-mode=432 only its members (and "
     "the collector's user) can connect. The collector must be a member of it"},
    {"spool-dir", CM_OPT_STRING, "/var/lib/fleetprof/spool", OFF(spool_dir), 0, 0,
     "directory of the write-ahead spool (append-only segment files)"},
    {"spool-max", CM_OPT_SIZE, "1GiB", OFF(spool_max), 1 << 20, 1LL << 50,
     "spool size bound; past it the oldest segments are deleted and counted as dropped"},
    {"segment-size", CM_OPT_SIZE, "16MiB", OFF(segment_size), 64 << 10, 1LL << 30,
     "a spool segment is sealed and a new one started past this size"},
    {"spool-fsync", CM_OPT_STRING, "interval", OFF(spool_fsync), 0, 0,
     "none (survives a process kill), interval (also a machine crash, minus the last "
     "fsync-interval), always (fdatasync before every ack)"},
    {"fsync-interval", CM_OPT_DURATION, "1s", OFF(fsync_interval), 1000000, 3600000000000LL,
     "fdatasync period of the spool with spool-fsync=interval"},
    {"brokers", CM_OPT_STRING, "localhost:9092", OFF(brokers), 0, 0,
     "Kafka bootstrap servers (host:port,...)"},
    {"topic", CM_OPT_STRING, CM_TOPIC_CHUNKS, OFF(topic), 0, 0, "Kafka topic for chunks"},
    {"id", CM_OPT_STRING, "", OFF(id), 0, 0,
     "collector id (Kafka header fp-collector); empty: a random id kept in the spool dir"},
    {"http-listen", CM_OPT_STRING, "127.0.0.1:9465", OFF(http_listen), 0, 0,
     "loopback address:port of /metrics and /healthz; 'off' disables"},
    {"max-msg", CM_OPT_SIZE, "16MiB", OFF(max_msg), 64, CM_SOCK_MAX_MSG,
     "largest chunk frame accepted; a longer frame length disconnects the client"},
    {"max-clients", CM_OPT_INT, "4096", OFF(max_clients), 1, 1000000,
     "connections beyond this are closed at once"},
    {"ingest-memory", CM_OPT_SIZE, "256MiB", OFF(ingest_memory), 1 << 20, 1LL << 40,
     "bound of all connection buffers; a frame that does not fit is read, discarded and "
     "answered with retry"},
    {"max-rate", CM_OPT_INT, "0", OFF(max_rate), 0, 10000000,
     "chunks/s accepted from all agents (0 = unlimited); beyond it agents are told to retry"},
    {"client-max-rate", CM_OPT_INT, "0", OFF(client_max_rate), 0, 10000000,
     "chunks/s accepted per connection (0 = unlimited); beyond it the agent is told to retry"},
    {"frame-timeout", CM_OPT_DURATION, "10s", OFF(frame_timeout), 100000000, 3600000000000LL,
     "a client that leaves a hello or frame half-sent this long is disconnected"},
    {"idle-timeout", CM_OPT_DURATION, "2m", OFF(idle_timeout), 0, 86400000000000LL,
     "a client that sends no message this long after its hello is disconnected (an agent "
     "reconnects when it next sends); 0 = never"},
    {"uid-max-clients", CM_OPT_INT, "1024", OFF(uid_max_clients), 0, 1000000,
     "connections per peer uid (SO_PEERCRED); beyond it a new one is closed at once, so one "
     "local user cannot take every max-clients slot (0 = unlimited)"},
    {"uid-max-bytes-rate", CM_OPT_SIZE, "16MiB", OFF(uid_max_bytes_rate), 0, 1LL << 40,
     "chunk bytes per second accepted per peer uid (0 = unlimited); beyond it that uid's "
     "agents are told to retry"},
    {"uid-spool-share", CM_OPT_INT, "100", OFF(uid_spool_share), 1, 100,
     "percent of spool-max the chunks of one peer uid may hold (100: no cap of its own). "
     "Always, a uid past an even share (spool-max / the uids holding chunks) is told to retry, "
     "so one uid's flood cannot push out the others' chunks"},
    {"max-write-queue", CM_OPT_SIZE, "1MiB", OFF(max_write_queue), 4096, 1LL << 30,
     "unread acks queued to a client before it is disconnected"},
    {"max-inflight", CM_OPT_INT, "10000", OFF(max_inflight), 1, 1000000,
     "messages handed to librdkafka and not yet acknowledged"},
    {"max-inflight-bytes", CM_OPT_SIZE, "64MiB", OFF(max_inflight_bytes), 1 << 20, 1LL << 31,
     "bytes handed to librdkafka and not yet acknowledged"},
    {"retry-backoff", CM_OPT_DURATION, "1s", OFF(retry_backoff), 1000000, 600000000000LL,
     "pause before replaying from the spool after a failed delivery"},
    {"drain-timeout", CM_OPT_DURATION, "10s", OFF(drain_timeout), 0, 600000000000LL,
     "on SIGTERM, how long to wait for in-flight deliveries (the rest stays in the spool)"},
    {"control-topic", CM_OPT_STRING, CM_TOPIC_CONTROL, OFF(control_topic), 0, 0,
     "Kafka topic of capture commands (`fleetprof capture`), read by every collector; 'off' "
     "disables"},
    {"control-max-age", CM_OPT_DURATION, "60s", OFF(control_max_age), 1000000000LL,
     86400000000000LL, "a capture command issued longer ago is ignored (counted stale)"},
    {"log-level", CM_OPT_STRING, "info", OFF(log_level), 0, 0, "debug, info, warn, error"},
    {"pods-dir", CM_OPT_STRING, "/var/log/pods", OFF(pods_dir), 0, 0,
     "kubelet's pod log directory (<namespace>_<name>_<uid>), read to name the pod a peer's "
     "cgroup belongs to (mount it read-only into the DaemonSet); empty: pods are pod-<uid>"},
    {"sidecar", CM_OPT_BOOL, "false", OFF(sidecar), 0, 0,
     "the collector runs in its peers' pod: a peer without a pod cgroup is labelled with the "
     "collector's own POD_NAMESPACE/POD_NAME (a DaemonSet leaves this off)"},
    {0},
};

#define ENV_PREFIX "FLEETPROF_COLLECTOR_"
#define USAGE                                                                                      \
    "fleetprof-collector [--config FILE] [--OPTION=VALUE ...] [--kafka.PROP=VALUE ...]\n"   \
    "       fleetprof-collector --help | --version\n"                                             \
    "Per-node daemon: takes chunks from agents on a unix socket, spools them, ships them to "      \
    "Kafka."

int col_config_load(col_config_t *cfg, cm_kvlist_t *kafka, int argc, char **argv, char *errbuf,
                    size_t errbuf_size) {
    memset(cfg, 0, sizeof *cfg);
    int rc = cm_config_load(col_opts, cfg, ENV_PREFIX, "kafka.", kafka, argc, argv, errbuf,
                            errbuf_size);
    if (rc == 1) {
        cm_config_help(col_opts, ENV_PREFIX, "kafka.", USAGE, stdout);
        printf("\nkafka.* keys are librdkafka properties (TLS, SASL, compression.type, ...); "
               "they override the collector's defaults (enable.idempotence=true, acks=all).\n"
               "Signals: SIGTERM/SIGINT drain (deliver or keep in the spool) and exit.\n");
        return 1;
    }
    if (rc)
        return rc;
    if (!strcmp(cfg->spool_fsync, "none"))
        cfg->fsync_mode = COL_FSYNC_NONE;
    else if (!strcmp(cfg->spool_fsync, "interval"))
        cfg->fsync_mode = COL_FSYNC_INTERVAL;
    else if (!strcmp(cfg->spool_fsync, "always"))
        cfg->fsync_mode = COL_FSYNC_ALWAYS;
    else {
        snprintf(errbuf, errbuf_size,
                 "spool-fsync='%s' is not valid: use none, interval or always", cfg->spool_fsync);
        return CM_ECONFIG;
    }
    cm_log_level_t lvl;
    if (cm_log_parse_level(cfg->log_level, &lvl)) {
        snprintf(errbuf, errbuf_size, "log-level='%s' is not valid: use debug, info, warn or error",
                 cfg->log_level);
        return CM_ECONFIG;
    }
    if (!cfg->socket[0] || strlen(cfg->socket) >= 108) {
        snprintf(errbuf, errbuf_size,
                 "socket='%s': a unix socket path must be 1 to 107 bytes long", cfg->socket);
        return CM_ECONFIG;
    }
    if (!cfg->spool_dir[0]) {
        snprintf(errbuf, errbuf_size, "spool-dir is empty: give a directory for the spool");
        return CM_ECONFIG;
    }
    if (cfg->spool_max < 2 * cfg->segment_size) {
        snprintf(errbuf, errbuf_size,
                 "spool-max=%lld is less than twice segment-size=%lld: raise spool-max or lower "
                 "segment-size",
                 (long long)cfg->spool_max, (long long)cfg->segment_size);
        return CM_ECONFIG;
    }
    if (!cfg->topic[0]) {
        snprintf(errbuf, errbuf_size, "topic is empty: give a Kafka topic name");
        return CM_ECONFIG;
    }
    if (strlen(cfg->id) > 100) {
        snprintf(errbuf, errbuf_size, "id='%s' is longer than 100 bytes", cfg->id);
        return CM_ECONFIG;
    }
    if (gethostname(cfg->host, sizeof cfg->host - 1))
        snprintf(cfg->host, sizeof cfg->host, "unknown");
    return 0;
}

void col_config_free(col_config_t *cfg, cm_kvlist_t *kafka) {
    cm_config_free(col_opts, cfg, kafka);
}
