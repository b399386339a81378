/* A real Kafka broker for a test: starts a single-node KRaft broker with deploy/kafka/start.sh
 * on a port of the caller's choosing (one port per test executable, so tests never share a
 * broker), and stops or restarts it. Needs FLEETPROF_SRC (set by ctest) to find the scripts.
 * Not thread-safe; call from the test's main thread. */
#ifndef TS_KAFKA_H
#define TS_KAFKA_H

#include <stddef.h>

/* Starts a broker on 127.0.0.1:port with `partitions` partitions of fleetprof.chunks plus any
 * "name:partitions" topics in extra_topics (may be NULL). Fills bootstrap ("127.0.0.1:port").
 * Returns 0, or -1 after printing why. */
int ts_kafka_start(int port, int partitions, const char *extra_topics, char *bootstrap,
                   size_t size);
/* ts_kafka_start, and once more from scratch (the broker stopped, its data removed) if that
 * failed: a broker start on a loaded machine occasionally fails. Returns 0 or -1. */
int ts_kafka_start_retry(int port, int partitions, const char *extra_topics, char *bootstrap,
                         size_t size);
/* Stops the broker; keep_data=1 keeps its data for ts_kafka_restart(). Returns 0 or -1. */
int ts_kafka_stop(int port, int keep_data);
/* Restarts a broker stopped with keep_data=1, same data and port. Returns 0 or -1. */
int ts_kafka_restart(int port);

#endif
