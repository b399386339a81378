/* Endpoint aggregates (format minor 4): the Endpoints message of a chunk and its checks
 * (chunk_encode.c, chunk_decode.c and chunk.c use them). Thread-safe (no globals); not for
 * signal handlers.
 */
#include "chunk_endpoints.h"

#include "cm/error.h"
#include "cm/hist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cm_endpoints_pb(const cm_endpoints_t *ep, Fleetprof__V1__Endpoints *m) {
    fleetprof__v1__endpoints__init(m);
    m->n_name = m->n_bucket_len = ep->n;
    m->name = ep->name;
    m->bucket_len = ep->bucket_len;
    m->n_bucket = m->n_count = ep->n_entries;
    m->bucket = ep->bucket;
    m->count = ep->count;
}

#define FAIL(code, ...)                                                                            \
    do {                                                                                           \
        snprintf(errbuf, errbuf_size, __VA_ARGS__);                                                \
        return code;                                                                               \
    } while (0)

int cm_endpoints_from_pb(const Fleetprof__V1__Endpoints *m, cm_endpoints_t *ep, char *errbuf,
                         size_t errbuf_size) {
    memset(ep, 0, sizeof *ep);
    if (!m)
        return 0;
    if (m->n_name > CM_MAX_STRINGS || m->n_bucket > CM_MAX_ENDPOINT_ENTRIES)
        FAIL(CM_ETOOBIG, "endpoints: %zu names, %zu entries (limits %u, %u)", m->n_name,
             m->n_bucket, CM_MAX_STRINGS, CM_MAX_ENDPOINT_ENTRIES);
    if (m->n_bucket_len != m->n_name || m->n_count != m->n_bucket)
        FAIL(CM_EFORMAT, "endpoint columns differ in length (%zu names, %zu lengths, %zu "
                         "buckets, %zu counts)",
             m->n_name, m->n_bucket_len, m->n_bucket, m->n_count);
    *ep = (cm_endpoints_t){(uint32_t)m->n_name, m->name, m->bucket_len, (uint32_t)m->n_bucket,
                           m->bucket, m->count};
    return 0;
}

int cm_endpoints_validate(const cm_endpoints_t *ep, uint32_t n_strings, char *errbuf,
                          size_t errbuf_size) {
    if (!ep->n && !ep->n_entries)
        return 0;
    if (ep->n_entries > CM_MAX_ENDPOINT_ENTRIES || ep->n > CM_MAX_STRINGS)
        FAIL(CM_ETOOBIG, "endpoints: %u names, %u entries", ep->n, ep->n_entries);
    if (!ep->name || !ep->bucket_len || (ep->n_entries && (!ep->bucket || !ep->count)))
        FAIL(CM_EFORMAT, "endpoints lacks a column");
    uint8_t *seen = calloc(n_strings ? n_strings : 1, 1);
    if (!seen)
        FAIL(CM_ENOMEM, "out of memory checking endpoints");
    uint64_t at = 0;
    int rc = 0;
    for (uint32_t i = 0; i < ep->n && !rc; i++) {
        uint32_t nm = ep->name[i];
        if (nm == 0 || nm >= n_strings || seen[nm]) {
            snprintf(errbuf, errbuf_size, "endpoints.name[%u]=%u is 0, repeated or out of "
                     "range (%u strings)", i, nm, n_strings);
            rc = CM_ERANGE;
            break;
        }
        seen[nm] = 1;
        if (ep->bucket_len[i] > ep->n_entries - at) {
            snprintf(errbuf, errbuf_size, "endpoints[%u]: %u entries past the %u", i,
                     ep->bucket_len[i], ep->n_entries);
            rc = CM_ERANGE;
            break;
        }
        for (uint64_t k = at; k < at + ep->bucket_len[i] && !rc; k++)
            if (ep->bucket[k] >= CM_HIST_BUCKETS || ep->count[k] == 0 ||
                (k > at && ep->bucket[k] <= ep->bucket[k - 1])) {
                snprintf(errbuf, errbuf_size, "endpoints[%u]: entry %llu (bucket %u, count "
                         "%llu) out of order, empty or out of range", i, (unsigned long long)k,
                         ep->bucket[k], (unsigned long long)ep->count[k]);
                rc = CM_ERANGE;
            }
        at += ep->bucket_len[i];
    }
    free(seen);
    if (!rc && at != ep->n_entries)
        FAIL(CM_EFORMAT, "endpoints: lengths add up to %llu of %u entries",
             (unsigned long long)at, ep->n_entries);
    return rc;
}
