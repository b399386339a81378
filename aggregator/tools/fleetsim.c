/* fleetsim: produces a simulated fleet's chunks to Kafka and writes the exact ground truth.
 *
 *   fleetsim --brokers 127.0.0.1:19092 --services 20 --versions 5 --processes 10 \
 *            --intervals 30 --samples 1000 --truth truth.json [--rate 100]
 */
#include "fleetsim.h"

#include "cm/config.h"
#include "cm/wire.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    char *brokers, *topic, *truth;
    int64_t seed, services, versions, processes, intervals, samples, stacks, duplicate_every,
        malformed_every, start_unix_s, hosts;
    int64_t interval;
    int64_t rate;
} sim_cfg_t;

#define O(f) offsetof(sim_cfg_t, f)
static const cm_opt_t opts[] = {
    {"brokers", CM_OPT_STRING, "127.0.0.1:9092", O(brokers), 0, 0, "Kafka bootstrap servers"},
    {"topic", CM_OPT_STRING, CM_TOPIC_CHUNKS, O(topic), 0, 0, "topic"},
    {"truth", CM_OPT_STRING, "", O(truth), 0, 0, "write the ground truth JSON here"},
    {"seed", CM_OPT_INT, "1", O(seed), 0, 0, "random seed"},
    {"services", CM_OPT_INT, "10", O(services), 1, 100000, "services"},
    {"versions", CM_OPT_INT, "2", O(versions), 1, 1000, "versions per service"},
    {"processes", CM_OPT_INT, "5", O(processes), 1, 100000, "processes per version"},
    {"intervals", CM_OPT_INT, "6", O(intervals), 1, 1000000, "chunks per process"},
    {"samples", CM_OPT_INT, "1000", O(samples), 0, 1000000, "rows per event type per chunk"},
    {"stacks", CM_OPT_INT, "200", O(stacks), 1, 100000, "distinct stacks per template"},
    {"duplicate-every", CM_OPT_INT, "0", O(duplicate_every), 0, 0, "send every Nth chunk twice"},
    {"malformed-every", CM_OPT_INT, "0", O(malformed_every), 0, 0,
     "add a malformed message after every Nth chunk"},
    {"start-unix-s", CM_OPT_INT, "0", O(start_unix_s), 0, 0, "first interval start (0: now - span)"},
    {"interval", CM_OPT_DURATION, "10s", O(interval), 1000000, 3600000000000ll, "chunk interval"},
    {"rate", CM_OPT_INT, "0", O(rate), 0, 0, "messages per second (0: as fast as possible)"},
    {"hosts", CM_OPT_INT, "0", O(hosts), 0, 100000,
     "spread the processes over this many hosts sim-host-N (0: all on sim-host)"},
    {0},
};

int main(int argc, char **argv) {
    sim_cfg_t c;
    char err[512];
    memset(&c, 0, sizeof c);
    int rc = cm_config_load(opts, &c, "FLEETSIM_", NULL, NULL, argc, argv, err, sizeof err);
    if (rc == 1) {
        cm_config_help(opts, "FLEETSIM_", NULL, "fleetsim [--OPTION VALUE]...", stdout);
        return 0;
    }
    if (rc) {
        fprintf(stderr, "fleetsim: %s\n", err);
        return 2;
    }
    fsim_params_t p = {.seed = (uint64_t)c.seed,
                       .services = (uint32_t)c.services,
                       .versions = (uint32_t)c.versions,
                       .processes = (uint32_t)c.processes,
                       .intervals = (uint32_t)c.intervals,
                       .samples = (uint32_t)c.samples,
                       .stacks = (uint32_t)c.stacks,
                       .start_unix_ns = (uint64_t)c.start_unix_s * 1000000000ull,
                       .interval_ns = (uint64_t)c.interval,
                       .duplicate_every = (uint32_t)c.duplicate_every,
                       .malformed_every = (uint32_t)c.malformed_every,
                       .hosts = (uint32_t)c.hosts};
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", c.brokers, err, sizeof err) ||
        rd_kafka_conf_set(conf, "enable.idempotence", "true", err, sizeof err) ||
        rd_kafka_conf_set(conf, "message.max.bytes", "20000000", err, sizeof err) ||
        rd_kafka_conf_set(conf, "linger.ms", "20", err, sizeof err)) {
        fprintf(stderr, "fleetsim: %s\n", err);
        return 2;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "fleetsim: %s\n", err);
        return 1;
    }
    fsim_t *s = fsim_new(&p);
    rc = fsim_produce(s, rk, c.topic, (double)c.rate);
    const fsim_counts_t *n = fsim_counts(s);
    fprintf(stderr, "fleetsim: %llu messages, %llu chunks, %llu duplicates, %llu samples\n",
            (unsigned long long)n->messages, (unsigned long long)n->chunks,
            (unsigned long long)n->duplicates, (unsigned long long)n->samples);
    if (!rc && c.truth[0])
        rc = fsim_truth_write(s, c.truth);
    fsim_free(s);
    rd_kafka_destroy(rk);
    cm_config_free(opts, &c, NULL);
    return rc ? 1 : 0;
}
