/* Internal to fp_common: the Endpoints message (minor 4) of an in-memory cm_endpoints_t. */
#ifndef CM_CHUNK_ENDPOINTS_H
#define CM_CHUNK_ENDPOINTS_H

#include "cm/chunk.h"
#include "fleetprof.pb-c.h"

/* Fills m (pointing into ep, no copy). */
void cm_endpoints_pb(const cm_endpoints_t *ep, Fleetprof__V1__Endpoints *m);
/* Points ep into a decoded message. Returns 0, or CM_EFORMAT / CM_ETOOBIG with a reason. */
int cm_endpoints_from_pb(const Fleetprof__V1__Endpoints *m, cm_endpoints_t *ep, char *errbuf,
                         size_t errbuf_size);
/* Every name in range and once, entries adding up, buckets increasing and in range, counts > 0.
 * Returns 0 or a CM_E* code with a reason. */
int cm_endpoints_validate(const cm_endpoints_t *ep, uint32_t n_strings, char *errbuf,
                          size_t errbuf_size);

#endif
