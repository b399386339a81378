/* POST /api/v1/captures: a manual incident capture of a service's processes across the fleet
 * (`fleetprof capture`). The request is checked (token, rate), given an id and published on the
 * control topic; every collector reads it and sends a capture command to its matching agents
 * (collector/src/control.c). The answer (202) says the command was published, not that a
 * process took it: the incidents arrive through the usual pipeline (GET /api/v1/incidents,
 * trigger "manual").
 *
 * Threading: the handler runs on the HTTP server's threads, several at once; the producer is
 * librdkafka's (thread-safe), the rate bucket and the counters are under one mutex. */
#ifndef AGG_CAPTURES_H
#define AGG_CAPTURES_H

#include "http.h"

#include "cm/config.h"

#include <stdint.h>

typedef struct {
    const char *brokers;
    const char *topic;       /* "off" or "": the route answers 503 */
    const cm_kvlist_t *kafka; /* kafka.* properties (security settings) */
    const char *token;       /* the API token (NULL/"": none) */
    int64_t per_minute;      /* captures accepted per minute, all clients together */
} agg_captures_cfg_t;

typedef struct agg_captures agg_captures_t;

int agg_captures_new(const agg_captures_cfg_t *cfg, agg_captures_t **out, char *err,
                     size_t err_size);
void agg_captures_free(agg_captures_t *c);
/* The route, for the HTTP server's table. */
agg_http_route_t agg_captures_route(agg_captures_t *c);
/* Prometheus text of its counters (malloc'ed; NULL when out of memory). */
char *agg_captures_metrics(agg_captures_t *c);

#endif
