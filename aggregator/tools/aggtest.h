/* Test helpers for the aggregator tests and benchmarks: run the real fleetprof-aggregator
 * binary as a child process, read its per-partition stores, wait for it to catch up with the
 * topic, and compare stored totals with the fleet simulator's ground truth. */
#ifndef AGGTEST_H
#define AGGTEST_H

#include "dims.h"
#include "fleetsim.h"
#include "intern.h"
#include "rollup.h"

#include <librdkafka/rdkafka.h>
#include <stdint.h>
#include <sys/types.h>

/* The consume loop's steps for one chunk without Kafka (intern, dimensions, rollup into one
 * batch: 10 s fine buckets, 1 h coarse, span index, replicate statistics, 60 s per-leaf
 * replicates, dimensions without bounds), for tests that write chunks to a store themselves
 * (agg_store_batch_write of x.b, then agg_batch_clear). */
typedef struct {
    agg_intern_t in;
    agg_rollup_t r;
    agg_dims_t dm;
    agg_batch_t b;
} at_ingest_t;
void at_ingest_init(at_ingest_t *x);
/* Adds c to x->b (meta NULL: none). Returns 0 or a CM_E* code. */
int at_ingest_chunk(at_ingest_t *x, const cm_chunk_t *c, const agg_chunk_meta_t *meta);
/* The same for a chunk decoded from frame[0..len), as consume.c routes it: an incident
 * capture (chunk minor 3) goes to the incident tables with its frame, never to the profile. */
int at_ingest_frame(at_ingest_t *x, const cm_chunk_t *c, const agg_chunk_meta_t *meta,
                    const uint8_t *frame, size_t len);
void at_ingest_free(at_ingest_t *x);
/* Loads the chunk files of chunk_dir (an agent's FLEETPROF_OUTPUT) into a SQLite store under
 * store_dir, partition 0, as the consumer does. Returns 0, or -1 with err saying why. */
int at_ingest_dir(const char *chunk_dir, const char *store_dir, char *err, size_t err_size);

/* Starts the aggregator (FLEETPROF_BUILD/aggregator/fleetprof-aggregator) with the common
 * arguments plus extra (NULL-terminated, may be NULL); output goes to log_path. With AT_CPU=N
 * in the environment the aggregator runs pinned to CPU N.
 * Returns the child's pid or -1. */
pid_t at_agg_start(const char *bootstrap, const char *store_dir, const char *group,
                   int http_port, const char *log_path, const char *const *extra);
/* Sends sig and waits up to timeout_s for the child. Returns its wait status or -1. */
int at_agg_stop(pid_t pid, int sig, int timeout_s);
/* Next offset stored for partition p under dir, or in the PostgreSQL store when dir is a
 * postgres:// URL (-1: none yet). Read-only; safe while the aggregator writes. */
int64_t at_store_offset(const char *dir, const char *topic, int32_t p);
/* Sum of stored offsets over partitions (none counts 0). */
int64_t at_store_offsets_sum(const char *dir, const char *topic, int nparts);
/* High watermarks of topic's partitions into hi[nparts]. Returns 0 or -1. */
int at_high_watermarks(rd_kafka_t *rk, const char *topic, int nparts, int64_t *hi);
/* 1 if every partition of topic is empty (a fresh broker), else 0 after saying why: a test
 * must not count data of another run that shares the broker port. */
int at_topic_empty(rd_kafka_t *rk, const char *topic, int nparts);
/* Waits until every partition's stored offset equals hi[]. Returns 0, or -1 at the deadline. */
int at_wait_caught_up(const char *dir, const char *topic, int nparts, const int64_t *hi,
                      int timeout_s);
/* Compares the stores' totals and merged profiles, read through the query store (the API's
 * read path, query_store.h) over every partition store under dir, with the simulator's truth
 * for every (service, version, type). Prints every difference; returns their number. */
int at_check_truth(const fsim_t *sim, const char *dir, const char *topic, int nparts);
/* A producer for the simulator. */
rd_kafka_t *at_producer(const char *bootstrap);
/* Makes an empty temporary directory under /tmp; path holds >= 64 bytes. */
void at_tmpdir(char *path, const char *tag);
double at_now(void);
/* A consumer group id of this run only (tag-pid-time): aggregators of another run, or left
 * over from one, sharing the broker must not join it. Returns a static buffer. */
const char *at_group_id(const char *tag);
/* GET http://127.0.0.1:port/path (curl, 5 s limit): the body into out, the status returned
 * (-1 when curl could not run or gave none). */
int at_http_get(int port, const char *path, char *out, size_t size);
/* Starts a throwaway PostgreSQL cluster in dir on a loopback port (deploy/postgres/start.sh
 * from FLEETPROF_SRC), its connection URL into url. Returns 0, or -1 with a message printed. */
int at_pg_start(int port, const char *dir, char *url, size_t size);
/* One integer a query answers (NULL: 0), or -1 when the database gives no answer. */
int64_t at_pg_q1(const char *url, const char *sql);
/* system() of a printf-formatted command (at most 2 KiB); its wait status. */
int at_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Compares a PostgreSQL store (url) with the simulator's truth: totals and profile sums per
 * (service, version, type), the number of such groups, and the rejects against the malformed
 * messages produced. Prints every difference; returns their number. */
int at_pg_check_truth(const fsim_t *sim, const char *url);
void at_sleep_ms(int ms);

#endif
