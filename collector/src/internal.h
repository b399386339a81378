/* fleetprof-collector internals: the configuration struct, the metrics registry, and the APIs
 * of the modules that the server (server.c) wires together on one libuv loop.
 *
 * Threading contract (whole collector): everything runs on the libuv loop thread except
 *   - the HTTP server (http.c), which runs in libmicrohttpd's own thread and only reads the
 *     atomic counters of col_metrics_t (and the heartbeat), never loop-owned structures;
 *   - librdkafka's internal threads, which never call back into our code directly: delivery
 *     reports, errors and logs are queued on the main rd_kafka queue and served on the loop
 *     when the queue's io-event fd becomes readable (producer.c);
 *   - fdatasync of the spool, run on libuv's thread pool on a dup'ed descriptor (spool.c).
 */
#ifndef COL_INTERNAL_H
#define COL_INTERNAL_H

#include "cm/config.h"
#include "cm/error.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

/* ---------------------------------------------------------------- config.c */

typedef struct {
    char *config;          /* --config FILE (read by cm_config_load itself) */
    char *socket;          /* unix socket path */
    int64_t socket_mode;   /* permission bits of the socket */
    char *socket_group;    /* group of the socket; empty: the collector's own */
    char *spool_dir;
    int64_t spool_max;     /* bytes: total size of all segments */
    int64_t segment_size;  /* bytes: a segment is sealed past this size */
    char *spool_fsync;     /* "none", "interval", "always" */
    int64_t fsync_interval; /* ns */
    char *brokers;         /* bootstrap.servers */
    char *topic;
    char *id;              /* collector id; empty: persisted random id in the spool dir */
    char *http_listen;     /* "127.0.0.1:9465"; empty string disables HTTP */
    int64_t max_msg;       /* bytes: largest frame accepted */
    int64_t max_clients;
    int64_t ingest_memory; /* bytes: all connection buffers together */
    int64_t max_rate;      /* chunks/s accepted, 0 = unlimited; beyond: CM_SOCK_RETRY */
    int64_t client_max_rate; /* chunks/s per connection, 0 = unlimited */
    int64_t frame_timeout; /* ns: a partial hello/frame older than this: disconnect */
    int64_t idle_timeout;  /* ns: no message this long after the hello: disconnect; 0 never */
    int64_t uid_max_clients;    /* connections per peer uid, 0 = unlimited */
    int64_t uid_max_bytes_rate; /* chunk bytes/s accepted per peer uid, 0 = unlimited */
    int64_t uid_spool_share;    /* percent of spool-max one peer uid may hold (100 = off) */
    int64_t max_write_queue; /* bytes of unread acks before a client is disconnected */
    int64_t max_inflight;  /* messages handed to librdkafka and not yet reported */
    int64_t max_inflight_bytes;
    int64_t retry_backoff; /* ns: pause before replaying after a failed delivery */
    int64_t drain_timeout; /* ns: on SIGTERM, wait this long for in-flight deliveries */
    char *log_level;
    char *control_topic;   /* capture commands from the aggregator; "off": none */
    int64_t control_max_age; /* ns: a command issued longer ago is ignored (stale) */
    char *pods_dir;        /* kubelet's per-pod log directories: pod uid -> namespace/name */
    int sidecar;           /* peers without a pod cgroup are in our own POD_NAME's pod */
    /* derived */
    int fsync_mode;        /* COL_FSYNC_* */
    char host[256];
} col_config_t;

enum { COL_FSYNC_NONE = 0, COL_FSYNC_INTERVAL = 1, COL_FSYNC_ALWAYS = 2 };

/* Loads flags > env (FLEETPROF_COLLECTOR_*) > file > defaults and validates the combination.
 * kafka.* keys land in *kafka. Returns 0, 1 for --help (already printed), or CM_ECONFIG with
 * errbuf set. */
int col_config_load(col_config_t *cfg, cm_kvlist_t *kafka, int argc, char **argv, char *errbuf,
                    size_t errbuf_size);
void col_config_free(col_config_t *cfg, cm_kvlist_t *kafka);

/* ---------------------------------------------------------------- metrics.c */

/* Reasons a chunk is rejected (negative ack, never resent): slot 0 "other", then one slot per
 * CM_E* code in the table's order (exactly as many as there are codes). */
#define COL_REJECT_SLOTS ((int)CM__EEND - (int)CM__EBASE)
/* Reasons a chunk is shed (CM_SOCK_RETRY: the agent keeps it and retries). */
typedef enum {
    COL_SHED_RATE = 0,    /* over max-rate */
    COL_SHED_CLIENT_RATE, /* over client-max-rate */
    COL_SHED_MEMORY,      /* ingest memory budget exhausted */
    COL_SHED_SPOOL,       /* spool write failed (disk full, I/O error) */
    COL_SHED_DRAINING,    /* collector is shutting down */
    COL_SHED_UID_RATE,    /* over uid-max-bytes-rate */
    COL_SHED_UID_SPOOL,   /* the uid holds its share of the spool (uid-spool-share, fair share) */
    COL_SHED_MAX
} col_shed_t;
typedef enum {
    COL_DISC_EOF = 0,     /* client closed */
    COL_DISC_BAD_HELLO,
    COL_DISC_OVERSIZED,   /* frame length 0 or above max-msg */
    COL_DISC_SLOW,        /* partial frame older than frame-timeout */
    COL_DISC_NOT_READING, /* acks piling up unread */
    COL_DISC_TOO_MANY,    /* over max-clients */
    COL_DISC_ERROR,       /* socket error */
    COL_DISC_SHUTDOWN,
    COL_DISC_UID_TOO_MANY, /* over uid-max-clients */
    COL_DISC_IDLE,         /* no message for idle-timeout after the hello */
    COL_DISC_MAX
} col_disc_t;
typedef enum {
    COL_DROP_SPOOL_FULL = 0, /* oldest segment deleted before delivery */
    COL_DROP_KAFKA_REJECTED, /* broker refused the message for good (e.g. too large) */
    COL_DROP_SPOOL_CORRUPT,  /* unreadable record found while replaying */
    COL_DROP_MAX
} col_drop_t;

#define COL_LAT_BUCKETS 14

typedef struct {
    atomic_uint_fast64_t chunks_in, bytes_in;   /* frames received (any outcome) */
    atomic_uint_fast64_t chunks_accepted, bytes_accepted; /* acked 0 (in the spool) */
    atomic_uint_fast64_t chunks_out, bytes_out; /* delivered to Kafka */
    atomic_uint_fast64_t rejected[COL_REJECT_SLOTS];
    atomic_uint_fast64_t shed[COL_SHED_MAX];
    atomic_uint_fast64_t disconnects[COL_DISC_MAX];
    atomic_uint_fast64_t dropped[COL_DROP_MAX];
    atomic_uint_fast64_t connections_total;
    atomic_uint_fast64_t connected;             /* gauge */
    atomic_uint_fast64_t budgets;               /* gauge: (uid, container) budgets in use */
    atomic_uint_fast64_t budget_shared_total;   /* connections put in the shared budget */
    atomic_uint_fast64_t spool_bytes, spool_segments, spool_pending; /* gauges */
    atomic_uint_fast64_t spool_replayed;        /* records found undelivered at start */
    atomic_uint_fast64_t kafka_delivery_errors, kafka_errors, kafka_rewinds;
    atomic_uint_fast64_t kafka_up;              /* gauge 0/1 */
    atomic_uint_fast64_t inflight;              /* gauge */
    atomic_uint_fast64_t kafka_max_message;     /* gauge: the topic's max.message.bytes in use */
    atomic_uint_fast64_t over_kafka_limit;      /* chunks refused: bigger than Kafka takes */
    atomic_uint_fast64_t lat_bucket[COL_LAT_BUCKETS + 1]; /* last is +Inf */
    atomic_uint_fast64_t lat_sum_us, lat_count;
    atomic_uint_fast64_t heartbeat_ms;          /* loop clock, for /healthz */
    atomic_uint_fast64_t draining;
    atomic_uint_fast64_t commands_in[2];        /* capture commands: local client, topic */
    atomic_uint_fast64_t commands_sent;         /* command records written to agents */
    atomic_uint_fast64_t commands_dropped[5];   /* by col_cmd_drop_t (command.c) */
} col_metrics_t;

extern col_metrics_t col_metrics;

static inline void col_count(atomic_uint_fast64_t *c, uint64_t n) {
    atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}
static inline void col_gauge_set(atomic_uint_fast64_t *g, uint64_t v) {
    atomic_store_explicit(g, v, memory_order_relaxed);
}
void col_metrics_reject(int err);
void col_metrics_latency(uint64_t ns);
/* Renders the Prometheus text exposition into a malloc'ed string (*out, *len). */
int col_metrics_render(char **out, size_t *len);
uint64_t col_now_ns(void); /* CLOCK_REALTIME in ns */

/* ---------------------------------------------------------------- http.c */

typedef struct col_http col_http_t;
/* Starts /metrics and /healthz on cfg->http_listen (loopback address:port). */
int col_http_start(const col_config_t *cfg, col_http_t **out, char *errbuf, size_t errbuf_size);
void col_http_stop(col_http_t *h);

/* ---------------------------------------------------------------- enrich.c */

#define COL_MAX_HDRS 8
typedef struct {
    char host[256], collector[128], node[256];
    char pod[160]; /* sidecar only: its own POD_NAMESPACE/POD_NAME, its peers' pod */
    const char *pods_dir; /* cfg->pods_dir ("" : pod uids are not resolved to names) */
} col_node_ident_t;

typedef struct {
    int n;
    const char *name[COL_MAX_HDRS];
    char value[COL_MAX_HDRS][160];
} col_hdrs_t;

/* Node identity: host name, collector id (cfg->id, else a random id persisted in the spool
 * directory), node name from NODE_NAME, and with cfg->sidecar the collector's own pod from
 * POD_NAMESPACE/POD_NAME (downward API: a sidecar's peers all share its pod; a DaemonSet's do
 * not). Returns 0 or a negative errno with errbuf set. */
int col_enrich_node(const col_config_t *cfg, col_node_ident_t *out, char *errbuf,
                    size_t errbuf_size);
/* Headers for a peer, all from the collector's own view (never from what the peer says or
 * its environment): node identity, pid/uid (SO_PEERCRED), its pid in its own namespace
 * (NSpid) when that differs, container id and pod (namespace/name through node->pods_dir,
 * else pod-<uid>) from /proc/<pid>/cgroup; without a pod there, node->pod (a sidecar's).
 * Never fails: unknowns are omitted. */
void col_enrich_peer(const col_node_ident_t *node, int pid, int uid, col_hdrs_t *out);
/* The value of header name in h, or NULL. */
const char *col_hdrs_get(const col_hdrs_t *h, const char *name);
/* The key of the per-uid limits' budget of a peer (ingest.c, spool.c): its uid with its
 * container id (fp-container; NULL or "" for a process in no container). Root pods of one
 * node, or one uid in several containers, get one budget each, and the spool finds the same
 * key again from a record's fp-peer-uid and fp-container headers. Never COL_BUDGET_SHARED. */
#define COL_BUDGET_SHARED UINT64_MAX
uint64_t col_budget_key(int uid, const char *container);
/* Extracts a 64-hex container id from cgroup file text; returns 1 if found. Exposed for tests. */
int col_enrich_container_id(const char *cgroup_text, char *out, size_t out_size);
/* Extracts a Kubernetes pod uid (36 chars, dashes) from cgroup file text: "pod<uid>" in
 * cgroupfs paths, "pod<uid with _>.slice" in systemd ones, only as the pod level right under the
 * kubepods root (a pod<uid> cgroup elsewhere, as a delegated subtree can create, is ignored).
 * Returns 1 if found. */
int col_enrich_pod_uid(const char *cgroup_text, char *out, size_t out_size);
/* "namespace/name" of pod uid from the directory names <namespace>_<name>_<uid> under
 * pods_dir (kubelet's /var/log/pods). Returns 1 if found. One directory scan per call. */
int col_enrich_pod_name(const char *pods_dir, const char *uid, char *out, size_t out_size);
/* The same from a cache of pods_dir (loop thread only): a miss rescans the directory, at most
 * once a second. Returns 1 if found. col_enrich_pod_scans counts the scans (for tests). */
int col_enrich_pod_lookup(const char *pods_dir, const char *uid, char *out, size_t out_size);
uint64_t col_enrich_pod_scans(void);

/* ---------------------------------------------------------------- spool.c */

typedef struct col_spool col_spool_t;

/* Position in the spool: a segment and a byte offset in it. */
typedef struct {
    uint64_t seg_id, offset;
    uint32_t rec; /* index of the record at offset within its segment */
} col_spool_pos_t;

/* One record read back from the spool. frame is malloc'ed and owned by the caller. */
typedef struct {
    col_spool_pos_t pos;  /* where the record starts */
    uint64_t next_offset; /* where the next one starts */
    uint64_t received_ns;
    char key[256];
    col_hdrs_t hdrs;
    uint8_t *frame;
    size_t frame_len;
} col_record_t;

/* Opens (creating) the spool directory, recovers existing segments (undelivered records are
 * replayed first) and opens a fresh segment for writing. */
int col_spool_open(uv_loop_t *loop, const col_config_t *cfg, col_spool_t **out, char *errbuf,
                   size_t errbuf_size);
/* Appends one record (key, headers, frame) sent by peer uid (-1: unknown). When the total
 * would exceed spool-max, the oldest segments are deleted first and their unread records
 * counted as dropped. Returns 0 once the record is written (and synced if fsync=always), or a
 * negative errno. */
int col_spool_append(col_spool_t *s, uint64_t owner, const char *key, const col_hdrs_t *hdrs,
                     uint64_t received_ns, const uint8_t *frame, size_t frame_len);
/* Bytes of the records of owner (a col_budget_key) in the spool's segments (delivered or not,
 * until their segment is deleted), and in *uids how many owners hold any. Records replayed at
 * start count for col_budget_key of their fp-peer-uid and fp-container headers. */
uint64_t col_spool_uid_bytes(const col_spool_t *s, uint64_t owner, uint64_t *uids);
/* Bytes of a record of frame_len bytes with these key and headers; and the spool's total. */
uint64_t col_spool_record_size(const char *key, const col_hdrs_t *hdrs, size_t frame_len);
uint64_t col_spool_total(const col_spool_t *s);
/* Reads the record at the read cursor and advances it. Returns 1 with *rec filled, 0 when
 * there is nothing more to read, or a negative error. Corrupt records are skipped and counted. */
int col_spool_read(col_spool_t *s, col_record_t *rec);
/* The read cursor. */
col_spool_pos_t col_spool_tell(const col_spool_t *s);
/* Everything before pos is delivered: deletes fully delivered segments and remembers pos (a
 * commit file, written at most every second, limits duplicates after a restart). */
void col_spool_commit(col_spool_t *s, col_spool_pos_t pos);
/* Moves the read cursor back to pos (re-delivery after a failure); `records` is how many
 * records become unread again. If pos's segment was deleted (spool full), moves to the
 * oldest remaining record. */
void col_spool_rewind(col_spool_t *s, col_spool_pos_t pos, uint64_t records);
/* Records after the read cursor. */
uint64_t col_spool_unread(const col_spool_t *s);
int col_spool_segment_exists(const col_spool_t *s, uint64_t seg_id);
/* Writes the commit file and syncs; closes everything. */
void col_spool_close(col_spool_t *s);

/* ---------------------------------------------------------------- producer.c */

typedef struct col_producer col_producer_t;

/* Creates the librdkafka producer (idempotent, acks=all) with cfg + kafka.* properties and
 * hooks its event queue to the loop. Records are pulled from the spool in order. */
/* The largest Kafka record (key + headers + value) the topic takes: its max.message.bytes
 * (read from the broker with DescribeConfigs; Kafka's default 1048588 until known) and our
 * producer's message.max.bytes, less a record batch's own overhead. */
int64_t col_producer_max_record(const col_producer_t *p);
int col_producer_open(uv_loop_t *loop, const col_config_t *cfg, const cm_kvlist_t *kafka,
                      col_spool_t *spool, col_producer_t **out, char *errbuf,
                      size_t errbuf_size);
/* Hands spool records to librdkafka up to the in-flight limits; call after appends. */
void col_producer_kick(col_producer_t *p);
/* Number of messages handed to librdkafka and not yet reported. */
uint64_t col_producer_inflight(const col_producer_t *p);
/* 1 when everything written to the spool has been delivered. */
int col_producer_idle(const col_producer_t *p);
/* Stops producing new records (shutdown); reports are still served. */
void col_producer_pause(col_producer_t *p);
void col_producer_close(col_producer_t *p);

/* ---------------------------------------------------------------- ingest.c */

typedef struct col_ingest col_ingest_t;
int col_ingest_start(uv_loop_t *loop, const col_config_t *cfg, const col_node_ident_t *node,
                     col_spool_t *spool, col_producer_t *producer, col_ingest_t **out,
                     char *errbuf, size_t errbuf_size);
/* Answers every further chunk with CM_SOCK_RETRY (shutdown has begun). */
void col_ingest_drain(col_ingest_t *in);

/* The acks gathered during one read callback. Each carries its message number, so an ack that
 * could not be stored never renumbers the others (the agent matches acks by number). */
typedef struct {
    uint32_t *no;
    int32_t *status;
    size_t n, cap;
} col_acks_t;
/* Appends (msg_no, status). Returns 0, or -ENOMEM with the list unchanged. */
int col_acks_add(col_acks_t *a, uint32_t msg_no, int32_t status);
void col_acks_free(col_acks_t *a);
/* Tests only: the next n allocations of col_acks_add succeed, the ones after fail (-1: never
 * fail, the default). */
extern long col_acks_alloc_budget;
/* Stops listening and closes every connection (their unacked chunks stay with the agents). */
void col_ingest_stop(col_ingest_t *in);

/* ---------------------------------------------------------------- command.c */

/* A capture command (cm/wire.h; `fleetprof capture`). Empty host / pid 0: any. */
typedef struct {
    char cmd[16];        /* "capture" */
    char service[128];   /* required */
    char host[256];      /* a node's host name (cfg->host) */
    int pid;             /* the agent's pid as the collector sees it, or in its own namespace */
    char reason[256], requester[128], id[64];
    uint64_t issued_ns;  /* unix ns when the aggregator took it; 0: a local command */
} col_cmd_t;
/* What a command is matched against: one connected agent. */
typedef struct {
    const char *service; /* from its last chunk; NULL: no chunk yet (never matches) */
    int peer_pid, pid;   /* SO_PEERCRED's, and the one its chunks carry */
} col_cmd_agent_t;
/* Why a command reached no agent, or an agent was skipped (metrics.c). */
typedef enum {
    COL_CMD_MALFORMED = 0, /* not a command (col_cmd_parse failed) */
    COL_CMD_STALE,         /* from the control topic, older than control-max-age */
    COL_CMD_NO_AGENT,      /* no connected agent matched */
    COL_CMD_NOT_PERMITTED, /* a local client's uid may not capture that agent's process */
    COL_CMD_WRITE_FAILED,  /* the agent's connection could not take the record */
    COL_CMD_DROP_MAX
} col_cmd_drop_t;
const char *col_cmd_drop_name(col_cmd_drop_t why);
/* Parses command text (lines key=value). Returns 0; CM_EFORMAT (not key=value, a bad number,
 * no cmd=capture) or CM_EINVAL (no service) with err set. */
int col_cmd_parse(const char *text, size_t len, col_cmd_t *c, char *err, size_t err_size);
/* 1 when agent a, on node node_host, is one the command targets: the same service, host empty
 * or node_host, pid 0 or either of a's pids. */
int col_cmd_match(const col_cmd_t *c, const char *node_host, const col_cmd_agent_t *a);
/* ingest.c: sends the capture command down every matching agent connection; from_uid -1 (the
 * control topic, or a local client that is root or the collector's user): any agent, else
 * only agents of that uid (others counted not_permitted). Returns how many it was sent to. */
int col_ingest_command(col_ingest_t *in, const col_cmd_t *c, int from_uid);

/* ---------------------------------------------------------------- control.c */

typedef struct col_control col_control_t;
/* Subscribes to cfg->control_topic (no-op, *out NULL, when "off") as its own consumer group
 * and polls it on the loop. Returns 0 or CM_ECONFIG with errbuf set. */
int col_control_open(uv_loop_t *loop, const col_config_t *cfg, const cm_kvlist_t *kafka,
                     const char *collector_id, col_control_t **out, char *errbuf,
                     size_t errbuf_size);
/* The ingest whose agents the commands go to (NULL: none, while draining). */
void col_control_attach(col_control_t *ctl, col_ingest_t *in);
/* Leaves the group and frees everything once the loop has closed its timer. */
void col_control_close(col_control_t *ctl);

/* ---------------------------------------------------------------- server.c */

/* Runs the collector until SIGTERM/SIGINT, then drains. Returns the process exit code. */
int col_server_run(const col_config_t *cfg, const cm_kvlist_t *kafka);

#endif
