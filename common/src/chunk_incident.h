/* Internal to fp_common: the Incident message (minor 3) of an in-memory cm_incident_t. */
#ifndef CM_CHUNK_INCIDENT_H
#define CM_CHUNK_INCIDENT_H

#include "cm/chunk.h"
#include "fleetprof.pb-c.h"

/* Fills m (pointing into inc, no copy). */
void cm_incident_pb(const cm_incident_t *inc, Fleetprof__V1__Incident *m);
/* Copies a decoded Incident into inc (strings point into the message). Returns 0, or CM_EFORMAT
 * with a reason in errbuf. */
int cm_incident_from_pb(const Fleetprof__V1__Incident *m, cm_incident_t *inc, char *errbuf,
                        size_t errbuf_size);

#endif
