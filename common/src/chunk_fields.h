/* Fields the chunk codec copies as they are between cm_header_t and the protobuf Header
 * (same name, same width on both sides): the encoder and the decoder expand this one list,
 * so a new scalar header field is added once. Private to chunk_encode.c and chunk_decode.c. */
#ifndef CM_CHUNK_FIELDS_H
#define CM_CHUNK_FIELDS_H

#define CM_HEADER_SCALARS(X)                                                                       \
    X(pid)                                                                                         \
    X(process_start_unix_ns)                                                                       \
    X(start_unix_ns)                                                                               \
    X(end_unix_ns)                                                                                 \
    X(sequence)                                                                                    \
    X(agent_cpu_ns)                                                                                \
    X(process_cpu_ns)                                                                              \
    X(work_units)                                                                                  \
    X(time_unit_ns)

#endif
