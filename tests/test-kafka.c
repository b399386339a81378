/* Chunks through a real Kafka broker (KRaft, started by deploy/kafka/start.sh): produced with
 * librdkafka keyed by service, consumed back byte-identical, decoded equal, in order. */
#include "cm/chunk.h"
#include "cm/wire.h"
#include "support/chunkgen.h"
#include "support/kafka.h"
#include "support/runner.h"

#include <librdkafka/rdkafka.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PORT 19392
static char bootstrap[64];

static rd_kafka_t *make(rd_kafka_type_t type, const char *group) {
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    CHECK(rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, err, sizeof err) == 0);
    if (type == RD_KAFKA_PRODUCER) {
        CHECK(rd_kafka_conf_set(conf, "enable.idempotence", "true", err, sizeof err) == 0);
        CHECK(rd_kafka_conf_set(conf, "message.max.bytes", "20000000", err, sizeof err) == 0);
    } else {
        CHECK(rd_kafka_conf_set(conf, "group.id", group, err, sizeof err) == 0);
        CHECK(rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", err, sizeof err) == 0);
        CHECK(rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof err) == 0);
    }
    rd_kafka_t *rk = rd_kafka_new(type, conf, err, sizeof err);
    CHECKF(rk != NULL, "%s", err);
    return rk;
}

static void test_chunk_roundtrip_through_kafka(void) {
    CHECK(ts_kafka_start(PORT, 2, "fleetprof.test:1", bootstrap, sizeof bootstrap) == 0);
    rd_kafka_t *p = make(RD_KAFKA_PRODUCER, NULL);
    enum { N = 50 };
    uint8_t *frames[N];
    size_t lens[N];
    ts_gen_params_t gp = ts_gen_realistic();
    for (int i = 0; i < N; i++) {
        cm_chunk_t *c = ts_gen_chunk(&gp, (uint64_t)i + 100);
        char err[256];
        CHECK(cm_chunk_encode(c, &frames[i], &lens[i], err, sizeof err) == 0);
        rd_kafka_resp_err_t e = rd_kafka_producev(
            p, RD_KAFKA_V_TOPIC("fleetprof.test"), RD_KAFKA_V_KEY("checkout-api", 12),
            RD_KAFKA_V_VALUE(frames[i], lens[i]), RD_KAFKA_V_HEADER(CM_HDR_HOST, "test-host", -1),
            RD_KAFKA_V_END);
        CHECKF(e == 0, "%s", rd_kafka_err2str(e));
        ts_gen_free(c);
    }
    CHECK(rd_kafka_flush(p, 30000) == 0);
    rd_kafka_destroy(p);

    rd_kafka_t *c = make(RD_KAFKA_CONSUMER, "test-kafka");
    rd_kafka_poll_set_consumer(c);
    rd_kafka_topic_partition_list_t *topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, "fleetprof.test", RD_KAFKA_PARTITION_UA);
    CHECK(rd_kafka_subscribe(c, topics) == 0);
    rd_kafka_topic_partition_list_destroy(topics);
    int got = 0;
    time_t deadline = time(NULL) + 60;
    while (got < N && time(NULL) < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(c, 500);
        if (!m)
            continue;
        if (m->err) {
            rd_kafka_message_destroy(m);
            continue;
        }
        CHECK(m->len == lens[got] && memcmp(m->payload, frames[got], m->len) == 0);
        CHECK(m->key_len == 12 && memcmp(m->key, "checkout-api", 12) == 0);
        rd_kafka_headers_t *hdrs;
        const void *v;
        size_t vl;
        CHECK(rd_kafka_message_headers(m, &hdrs) == 0);
        CHECK(rd_kafka_header_get_last(hdrs, CM_HDR_HOST, &v, &vl) == 0 && vl == 9);
        cm_chunk_t *dec = NULL;
        char err[256];
        CHECKF(cm_chunk_decode(m->payload, m->len, &dec, err, sizeof err) == 0, "%s", err);
        cm_chunk_t *orig = ts_gen_chunk(&gp, (uint64_t)got + 100);
        char why[256];
        CHECKF(ts_chunk_equal(orig, dec, why, sizeof why), "%s", why);
        ts_gen_free(orig);
        cm_chunk_free(dec);
        rd_kafka_message_destroy(m);
        got++;
    }
    CHECK_EQ(got, N);
    rd_kafka_consumer_close(c);
    rd_kafka_destroy(c);
    for (int i = 0; i < N; i++)
        free(frames[i]);
    CHECK(ts_kafka_stop(PORT, 0) == 0);
}

static const tr_test_t tests[] = {
    {"chunk_roundtrip_through_kafka", test_chunk_roundtrip_through_kafka},
    {0, 0},
};
TR_MAIN(tests)
