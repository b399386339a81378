/* Helpers for the collector tests and benchmarks: a client that speaks the agent protocol
 * (cm/wire.h), a runner for the real fleetprof-collector binary, a /metrics reader, and a Kafka
 * consumer that reads chunks back. Test-only: failures print why and return -1. */
#ifndef TEST_COLLECTOR_CLIENT_H
#define TEST_COLLECTOR_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- chunks */

/* Builds a valid frame for (service, seq): chunk id = hash(service, seq), sequence = seq.
 * samples: rows of CPU samples (10000 = the realistic benchmark chunk). Caller frees *out. */
int tc_frame_make(const char *service, uint64_t seq, uint32_t samples, uint8_t **out,
                  size_t *len);
/* A large frame: `stacks` distinct random stacks of `depth` frames, one sample each (5,000 x
 * 512 is the "too big for Kafka" chunk). Same ids as tc_frame_make. */
int tc_frame_make_big(const char *service, uint64_t seq, uint32_t stacks, uint32_t depth,
                      uint8_t **out, size_t *len);
/* The chunk id tc_frame_make gives (service, seq), as 32 hex chars. */
void tc_chunk_id_hex(const char *service, uint64_t seq, char out[33]);

/* ---- agent protocol */

/* Connects to the socket; sends the hello unless hello == 0. Returns fd or -1. */
int tc_connect(const char *path, int hello);
/* Sends one length-prefixed message. Returns 0 or -1. */
int tc_send(int fd, const uint8_t *msg, size_t len);
/* Reads one ack within timeout_ms. Returns 1 with (msg_no, status), 0 on EOF, -1 on timeout
 * or error. */
int tc_ack_read(int fd, uint32_t *msg_no, int32_t *status, int timeout_ms);
/* Sends message number ++*no and reads its ack (10 s). Returns the ack's status, or 99999 when
 * the send failed, 99998 when no ack came, 99996 when the ack names another message (said on
 * stderr): never a status the collector sends. */
int32_t tc_send_acked(int fd, const uint8_t *msg, size_t len, uint32_t *no);
/* 1 if the peer closed the connection within timeout_s (acks are read and ignored), else 0. */
int tc_closed_within(int fd, double timeout_s);

/* ---- the collector process */

typedef struct {
    pid_t pid;
    char dir[256];   /* work dir: socket, spool, log */
    char sock[300];
    char spool[300];
    char log[300];
    int http_port;
} tc_collector_t;

/* Makes a fresh work dir (or reuses c->dir if set) and starts the collector with --socket,
 * --spool-dir, --http-listen=127.0.0.1:<http_port>, --brokers=bootstrap and the NULL-terminated
 * extra arguments. Waits until the socket accepts connections (15 s). http_port 0: a free
 * port the kernel picks, picked again when another process binds it before the collector
 * does; c->http_port says which. Returns 0 or -1. */
int tc_collector_start(tc_collector_t *c, const char *bootstrap, int http_port,
                       const char *const *extra);
/* Sends sig and waits up to timeout_s for exit. Returns the wait status, or -1 on timeout
 * (the process is then killed). */
int tc_collector_stop(tc_collector_t *c, int sig, int timeout_s);
/* Removes the work dir (call when the test passed; a failing test leaves it for a look). */
void tc_cleanup(tc_collector_t *c);
/* Returns the value of a metric line ("name" or "name{label=\"v\"}"), or -1. */
double tc_metric(int http_port, const char *name);
/* Polls a metric until it is >= want or the deadline passes. Returns the last value. */
double tc_metric_wait(int http_port, const char *name, double want, int timeout_s);
/* For gauges: waits until the value equals want (a counter only grows, a gauge may pass it). */
double tc_metric_wait_eq(int http_port, const char *name, double want, int timeout_s);
/* GETs a path; returns the HTTP status and copies the body (NUL-terminated) into body. */
int tc_http_get(int http_port, const char *path, char *body, size_t body_size);

/* ---- Kafka */

/* A fresh broker on port (a leftover one from a failed run is stopped and its data deleted);
 * retries once, as a broker start on a loaded machine occasionally fails. Returns 0 or -1. */
int tc_kafka_fresh(int port, int partitions, char *bootstrap, size_t size);


typedef struct {
    char key[64];
    char chunk_id[33];
    uint64_t sequence;
    int32_t partition;
    int64_t offset;
    char host_hdr[64], peer_pid_hdr[16];
} tc_msg_t;

/* Reads the topic from the beginning (fresh group) until `want` messages arrived or, once
 * nothing new came for idle_s seconds after at least `want` (or the deadline), returns the
 * count (malloc'ed array in *out). Frames are decoded and must be valid. */
int tc_consume(const char *bootstrap, const char *topic, size_t want, int timeout_s, int idle_s,
               tc_msg_t **out);

#endif
