/* The incidents of the query API (aggregator/README.md, "Incidents"):
 *   GET /api/v1/incidents?service=S[&from=UNIX_S][&to=UNIX_S][&limit=N]
 *       the service's incidents, newest first: trigger, threshold and value, when, process,
 *       captured window, chunks received of the capture's parts
 *   GET /api/v1/incident?id=HEX32[&event_type=cpu][&limit=N]
 *       one incident: the row above, the capture's timeline (per chunk), its profile (top
 *       functions and call tree: the flame graph) and its diff against the same process's
 *       seconds before (the capture's chunks that ended AGG_INCIDENT_GAP_NS before the trigger,
 *       the last AGG_INCIDENT_BEFORE_NS of them, against those that ended after it), and the requests active at the trigger for at
 *       least AGG_INCIDENT_STUCK_NS (stuck requests)
 * The handlers have the API's route signature; api.c lists them in its route table and lends
 * its argument reader and the request's store handle (agg_api_arg, agg_api_qs).
 * Threading: an API worker, with its leased query store handle. */
#ifndef AGG_SERVE_INCIDENTS_H
#define AGG_SERVE_INCIDENTS_H

#include "http.h"
#include "query_store.h"

#include "cm/chunk.h"

#include <jansson.h>
#include <stdint.h>

#define AGG_INCIDENT_GAP_NS 2000000000ll   /* the trigger fires within 2 s of what it saw */
#define AGG_INCIDENT_BEFORE_NS 3000000000ll /* the diff's base: the 3 s before the gap */
#define AGG_INCIDENT_BUCKET_NS 250000000ull /* the diff's replicates: a chunk's quarter-seconds */
#define AGG_INCIDENT_STUCK_NS 1000000000ll /* a request active this long at the trigger */
#define AGG_INCIDENT_LINKS 20 /* incidents listed at most beside a request, endpoint or report */

struct agg_api;
struct args;
/* api.c: the value of query argument k (NULL: absent); the request's store handle */
const char *agg_api_arg(const struct args *a, const char *k);
agg_qstore_t *agg_api_qs(struct agg_api *api);
void agg_api_reply_json(agg_http_reply_t *r, int status, json_t *o); /* takes o */

void agg_serve_incidents(struct agg_api *api, const struct args *a, const char *url,
                         agg_http_reply_t *r);
void agg_serve_incident(struct agg_api *api, const struct args *a, const char *url,
                        agg_http_reply_t *r);

/* The JSON answers themselves (for the CLI's tests and the handlers): NULL with *status and
 * err set when there is none. */
json_t *agg_incidents_json(agg_qstore_t *qs, const char *service, int64_t from_ns, int64_t to_ns,
                           size_t limit, int *status, char *err, size_t err_size);
/* Links to incidents: those of service (and version, unless NULL) whose captured window
 * overlaps [from_ns, to_ns] (an endpoint's range, a deploy), and those of a request's service
 * whose window overlaps the request (table requests); newest first, at most limit, as a JSON
 * array of /api/v1/incidents rows. NULL: a store error. */
json_t *agg_incidents_overlapping(agg_qstore_t *qs, const char *service, const char *version,
                                  int64_t from_ns, int64_t to_ns, size_t limit);
json_t *agg_incidents_of_request(agg_qstore_t *qs, const uint8_t trace[16],
                                 const uint8_t span[8], size_t limit);
json_t *agg_incident_json(agg_qstore_t *qs, const uint8_t id[CM_INCIDENT_ID_LEN],
                          cm_event_type_t type, size_t limit, int *status, char *err,
                          size_t err_size);

#endif
