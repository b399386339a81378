/* Incident captures (format minor 3): the Incident message of a chunk, and adding one to a
 * chunk already framed (the agent's flight recorder encodes its segments before it knows
 * whether an incident will want them; chunk_encode.c and chunk_decode.c use the two
 * conversions). A field appended to a serialized protobuf message is that field of the
 * message, so the frame is unpacked, the field appended and the frame built again: no decode.
 * Thread-safe (no globals); allocates; not for signal handlers.
 */
#include "chunk_incident.h"

#include "cm/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cm_incident_pb(const cm_incident_t *inc, Fleetprof__V1__Incident *m) {
    fleetprof__v1__incident__init(m);
    m->id = (ProtobufCBinaryData){CM_INCIDENT_ID_LEN, (uint8_t *)inc->id};
    m->trigger = (char *)(inc->trigger.ptr ? inc->trigger.ptr : "");
    m->threshold_milli = inc->threshold_milli, m->value_milli = inc->value_milli;
    m->trigger_unix_ns = inc->trigger_unix_ns;
    m->part = inc->part, m->parts = inc->parts;
    m->capture_start_unix_ns = inc->capture_start_unix_ns;
    m->capture_end_unix_ns = inc->capture_end_unix_ns;
}

int cm_incident_from_pb(const Fleetprof__V1__Incident *m, cm_incident_t *inc, char *errbuf,
                        size_t errbuf_size) {
    if (m->id.len != CM_INCIDENT_ID_LEN) {
        snprintf(errbuf, errbuf_size, "incident id is %zu bytes (want %u)", m->id.len,
                 CM_INCIDENT_ID_LEN);
        return CM_EFORMAT;
    }
    size_t tl = strnlen(m->trigger, CM_MAX_TRIGGER_LEN + 1);
    if (tl == 0 || tl > CM_MAX_TRIGGER_LEN) {
        snprintf(errbuf, errbuf_size, "incident trigger name is %s (1 to %u bytes)",
                 tl ? "too long" : "empty", CM_MAX_TRIGGER_LEN);
        return CM_EFORMAT;
    }
    if (m->parts == 0 || m->part >= m->parts ||
        m->capture_end_unix_ns < m->capture_start_unix_ns) {
        snprintf(errbuf, errbuf_size, "incident part %u of %u, capture %llu..%llu: inconsistent",
                 m->part, m->parts, (unsigned long long)m->capture_start_unix_ns,
                 (unsigned long long)m->capture_end_unix_ns);
        return CM_EFORMAT;
    }
    *inc = (cm_incident_t){.present = 1,
                           .trigger = {m->trigger, (uint32_t)tl},
                           .threshold_milli = m->threshold_milli,
                           .value_milli = m->value_milli,
                           .trigger_unix_ns = m->trigger_unix_ns,
                           .part = m->part,
                           .parts = m->parts,
                           .capture_start_unix_ns = m->capture_start_unix_ns,
                           .capture_end_unix_ns = m->capture_end_unix_ns};
    memcpy(inc->id, m->id.data, CM_INCIDENT_ID_LEN);
    return 0;
}

int cm_frame_add_incident(const uint8_t *frame, size_t len, const cm_incident_t *inc,
                          uint8_t **out, size_t *out_len, char *errbuf, size_t errbuf_size) {
    cm_frame_info_t fi;
    int rc = cm_frame_peek(frame, len, &fi, errbuf, errbuf_size);
    if (rc)
        return rc;
    Fleetprof__V1__Incident m;
    cm_incident_pb(inc, &m);
    size_t body = fleetprof__v1__incident__get_packed_size(&m);
    /* tag (field 5, length-delimited) + varint length (< 2^14: 2 bytes at most) + body */
    size_t extra = 1 + 2 + body;
    if (body >= (1u << 14) || (size_t)fi.raw_len + extra > CM_MAX_RAW_SIZE) {
        snprintf(errbuf, errbuf_size, "chunk with its incident would be %zu bytes (limit %u)",
                 (size_t)fi.raw_len + extra, CM_MAX_RAW_SIZE);
        return CM_ETOOBIG;
    }
    uint8_t *raw = malloc((size_t)fi.raw_len + extra);
    if (!raw) {
        snprintf(errbuf, errbuf_size, "out of memory while adding an incident to a chunk");
        return CM_ENOMEM;
    }
    if ((rc = cm_frame_unpack(frame, &fi, raw, errbuf, errbuf_size))) {
        free(raw);
        return rc;
    }
    size_t n = fi.raw_len;
    raw[n++] = (5u << 3) | 2u;
    if (body >= 0x80) {
        raw[n++] = (uint8_t)(body | 0x80);
        raw[n++] = (uint8_t)(body >> 7);
    } else {
        raw[n++] = (uint8_t)body;
    }
    fleetprof__v1__incident__pack(&m, raw + n);
    n += body;
    rc = cm_frame_build(raw, n, out, out_len);
    free(raw);
    if (rc)
        snprintf(errbuf, errbuf_size, "incident chunk not framed: %s", cm_errname(rc));
    return rc;
}
