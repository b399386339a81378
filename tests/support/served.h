/* A served fleet for the tests of the query API and the CLI: a Kafka broker, with
 * FP_TEST_STORE=postgres a throwaway PostgreSQL cluster, the fleet simulator's chunks
 * produced, and the real aggregator (--api-token, 1 s reports) caught up with them.
 * Compiled into the tests that use it (SOURCES support/served.c; they link fp_aggtest). */
#ifndef TS_SERVED_H
#define TS_SERVED_H

#include "aggtest.h"

typedef struct {
    /* set by the test */
    const char *tag;                 /* temp dir, consumer group and PostgreSQL dir names */
    int kafka_port, http_port;       /* SQLite run */
    int pg_kafka_port, pg_http_port; /* PostgreSQL run */
    int pg_port;
    int nparts;
    const char *token;
    fsim_params_t params;
    /* set by ts_served_start */
    int use_pg;            /* FP_TEST_STORE=postgres */
    int port, http;        /* the Kafka and HTTP ports of this run */
    char dir[64];          /* temp dir: SQLite stores, aggregator log */
    char store[320];       /* what the stores are read from: dir, or the PostgreSQL URL */
    char pgdir[96];        /* the PostgreSQL cluster's directory, "" without */
    char bootstrap[64], log[128];
    fsim_t *sim;
    rd_kafka_t *rk;
    pid_t pid;
} ts_served_t;

/* Starts everything; 0, or -1 with the reason printed (call ts_served_stop either way). */
int ts_served_start(ts_served_t *s);
/* Stops what ts_served_start started. */
void ts_served_stop(ts_served_t *s);

#endif
