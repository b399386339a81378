/* The chunk: one process, one interval, every event type. In-memory model, codec and frame.
 *
 * The same struct is the encoder's input and the decoder's output. Tables are plain arrays
 * whose entry 0 is the zero entry (see proto/fleetprof.proto); references of 0 mean "none".
 * Stacks are root first: frames[off[i] .. off[i+1]) with off[0] == off[1] == 0.
 *
 * Ownership: an encoder input is owned by the caller. A decoded chunk owns everything it points
 * to and is released with cm_chunk_free(). Decoded strings are NUL-terminated.
 *
 * Threading: no global state; a chunk may be used by one thread at a time. Not for signal
 * handlers (allocates).
 */
#ifndef CM_CHUNK_H
#define CM_CHUNK_H

#include <stddef.h>
#include <stdint.h>

#define CM_FORMAT_MAJOR 1
#define CM_FORMAT_MINOR 3
#define CM_FRAME_MAGIC "FPRF"
#define CM_FRAME_HEADER_SIZE 24
#define CM_FRAME_FLAG_LZ4 0x1u

/* Limits enforced by the decoder (and checked by the encoder). Generous for a 10 s chunk of
 * a busy process; small enough that hostile input cannot make us allocate without bound. */
#define CM_MAX_RAW_SIZE (16u << 20)       /* serialized chunk before compression */
#define CM_MAX_STRINGS (1u << 20)
#define CM_MAX_STRING_LEN 4096u
#define CM_MAX_SERVICE_LEN 255u
#define CM_MAX_MAPPINGS 65536u
#define CM_MAX_FUNCTIONS (1u << 20)
#define CM_MAX_LOCATIONS (1u << 21)
#define CM_MAX_STACKS (1u << 20)
#define CM_MAX_STACK_DEPTH 512u
#define CM_MAX_TOTAL_FRAMES (1u << 24)    /* after front-coding expansion */
#define CM_MAX_CONTEXTS (1u << 20)
#define CM_MAX_LABEL_SETS 65536u
#define CM_MAX_LABELS_PER_SET 16u
#define CM_MAX_THREADS (1u << 20)
#define CM_MAX_SAMPLES (1u << 22)         /* per event type */
#define CM_MAX_SPANS (1u << 20)
#define CM_MAX_INTERVAL_NS (3600ull * 1000000000ull)
#define CM_MAX_BUILD_ID 64u
#define CM_CHUNK_ID_LEN 16u
#define CM_CONTEXT_SIZE 24u               /* 16-byte trace id + 8-byte span id */

/* One event (or aggregate of events) is worth CM_COUNT_ONE in a count column. */
#define CM_COUNT_ONE 1000u

typedef enum {
    CM_EV_CPU = 1,
    CM_EV_WALL = 2,
    CM_EV_ALLOC = 3,
    CM_EV_INUSE = 4,
    CM_EV_LOCK = 5,
    CM_EV_IO = 6,
} cm_event_type_t;
#define CM_EV_MAX 6
#define CM_EV_COUNT 7 /* array size indexed by cm_event_type_t */

/* Sample flags */
#define CM_SF_AGGREGATE 0x1u  /* row sums sub-threshold events; time is the interval's last */
#define CM_SF_ON_CPU 0x2u     /* wall sample: the thread was running */
#define CM_SF_SUBSAMPLED 0x4u /* row was kept by a rate cap; weight includes the rest */

/* Stack flags */
#define CM_STF_TRUNCATED 0x1u  /* cut at the unwinder's depth limit */
#define CM_STF_INCOMPLETE 0x2u /* the unwind could not go on to the outermost frame */

typedef enum {
    CM_DROP_RING_FULL = 1,
    CM_DROP_CHUNK_QUEUE_FULL = 2,
    CM_DROP_HEAP_TABLE_FULL = 3,
    CM_DROP_SUBSAMPLED = 4,
    CM_DROP_UNWIND_FAILED = 5,
    CM_DROP_STACK_TRUNCATED = 6,
    CM_DROP_DICT_FULL = 7,
    CM_DROP_OVER_BUDGET = 8,
    CM_DROP_THREAD_LIMIT = 9,
    CM_DROP_ENCODE_FAILED = 10,
    CM_DROP_HOST_UNSAFE = 11, /* not taken: it could have harmed the host (see agent README) */
    CM_DROP_OUTPUT_FAILED = 12, /* chunk not written: FLEETPROF_OUTPUT full or unwritable */
    CM_DROP_SIGNAL_LIMIT = 13,  /* not taken: RLIMIT_SIGPENDING room left to the program */
    CM_DROP_SPAN_LIMIT = 14,    /* span not recorded: a per-chunk or per-thread bound */
    CM_DROP_INCIDENT_COOLDOWN = 15, /* minor 3: trigger fired within the cooldown, no capture */
    CM_DROP_INCIDENT_CAP = 16,      /* minor 3: trigger fired past the per-process cap */
    CM_DROP_INCIDENT_LOST = 17,     /* minor 3: capture segment not kept (recorder bound) */
} cm_drop_reason_t;

typedef enum { CM_IO_READ = 1, CM_IO_WRITE, CM_IO_CONNECT, CM_IO_ACCEPT, CM_IO_SYNC, CM_IO_OPEN } cm_io_kind_t;
typedef enum { CM_FD_FILE = 1, CM_FD_SOCKET, CM_FD_PIPE, CM_FD_OTHER } cm_fd_kind_t;

typedef struct {
    const char *ptr; /* decoded: NUL-terminated */
    uint32_t len;
} cm_str_t;

typedef struct {
    cm_event_type_t type;
    uint64_t period;
    uint64_t threshold_ns;
    uint32_t target_per_sec;
    uint64_t events_seen;
    uint64_t samples_kept;
} cm_sampling_t;

typedef struct {
    uint32_t reason; /* cm_drop_reason_t, or a newer one kept as a number */
    uint32_t type;   /* cm_event_type_t or 0 */
    uint64_t count;
} cm_drop_t;

typedef struct {
    cm_str_t service, version, host, agent_version;
    uint32_t pid;
    uint64_t process_start_unix_ns;
    uint64_t start_unix_ns, end_unix_ns;
    uint8_t chunk_id[CM_CHUNK_ID_LEN];
    uint64_t sequence;
    cm_sampling_t *sampling;
    uint32_t n_sampling;
    cm_drop_t *drops;
    uint32_t n_drops;
    uint64_t agent_cpu_ns, process_cpu_ns;
    uint64_t work_units;   /* minor 1: units of work the application counted (0: none) */
    uint32_t time_unit_ns; /* sample times are multiples of this from start_unix_ns */
    uint32_t format_minor; /* decoded: the writer's minor version */
} cm_header_t;

typedef struct {
    uint64_t start, limit, file_offset;
    uint32_t filename;
    const uint8_t *build_id;
    uint32_t build_id_len;
} cm_mapping_t;

typedef struct {
    cm_str_t *strings;
    uint32_t n_strings;
    cm_mapping_t *mappings;
    uint32_t n_mappings;
    /* functions: parallel arrays; system_name/filename may be NULL (all 0) */
    uint32_t *function_name, *function_system_name, *function_filename;
    uint32_t n_functions;
    /* locations: parallel arrays; line may be NULL */
    uint32_t *location_mapping, *location_function, *location_line;
    uint64_t *location_address;
    uint32_t n_locations;
    /* stacks: root first, frames[stack_off[i] .. stack_off[i + 1]); stack_flags may be NULL */
    uint32_t *stack_off; /* n_stacks + 1 entries */
    uint32_t *stack_frames;
    uint32_t *stack_flags;
    uint32_t n_stacks;
    /* contexts: n_contexts records of CM_CONTEXT_SIZE bytes (trace id, span id) */
    const uint8_t *contexts;
    uint32_t n_contexts;
    /* label sets: set i is label_kv[2*label_off[i] .. 2*label_off[i+1]) as (key, value) */
    uint32_t *label_off; /* n_label_sets + 1 entries */
    uint32_t *label_kv;
    uint32_t n_label_sets;
    /* threads; thread_name may be NULL */
    uint32_t *thread_tid, *thread_name;
    uint32_t n_threads;
} cm_dict_t;

/* The samples of one event type. Required: stack, time_ns, weight. Optional columns are NULL
 * when every row has the default (0; CM_COUNT_ONE for count): use the accessors below. */
typedef struct {
    cm_event_type_t type;
    uint32_t n;
    uint32_t *stack;
    uint64_t *time_ns; /* absolute, unix ns */
    uint64_t *weight;
    uint64_t *count; /* milli-events */
    uint32_t *thread, *context, *labels, *flags;
    uint64_t *size, *address;
    uint32_t *io_kind, *fd_kind, *target;
} cm_samples_t;

/* Span flags */
#define CM_SPF_ACTIVE 0x1u /* still active at the chunk's end: duration is end - start so far */

/* Minor 2: the spans the application marked (fleetprof_span_begin/_end), one row each; all
 * columns have n rows except flags, NULL when every row is 0. */
typedef struct {
    uint32_t n;
    uint32_t *context;       /* context index, never 0 */
    uint32_t *name;          /* string index: the span's name */
    uint64_t *start_unix_ns; /* may precede the chunk's start */
    uint64_t *duration_ns;   /* ended: end - start; active: header.end_unix_ns - start */
    uint32_t *thread;        /* thread index */
    uint32_t *flags;         /* CM_SPF_*, may be NULL */
} cm_spans_t;

/* Minor 3: the chunk is part of an incident capture (proto message Incident). present == 0:
 * an ordinary chunk. trigger is NUL-terminated when decoded. */
#define CM_INCIDENT_ID_LEN 16u
#define CM_MAX_TRIGGER_LEN 32u
typedef struct {
    int present;
    uint8_t id[CM_INCIDENT_ID_LEN];
    cm_str_t trigger;
    uint64_t threshold_milli, value_milli;
    uint64_t trigger_unix_ns;
    uint32_t part, parts;
    uint64_t capture_start_unix_ns, capture_end_unix_ns;
} cm_incident_t;

typedef struct cm_chunk {
    cm_header_t header;
    cm_dict_t dict;
    cm_samples_t samples[CM_EV_COUNT]; /* indexed by type; n == 0 when absent */
    cm_spans_t spans;                  /* minor 2; n == 0 when absent */
    cm_incident_t incident;            /* minor 3; present == 0 when absent */
    uint32_t skipped_columns;          /* decoded: sample columns of unknown (newer) types */
    void *owner_;                      /* decoded: private storage */
} cm_chunk_t;

static inline uint64_t cm_samples_count(const cm_samples_t *s, uint32_t i) {
    return s->count ? s->count[i] : CM_COUNT_ONE;
}
#define CM_COL(s, col, i) ((s)->col ? (s)->col[i] : 0)

static inline uint32_t cm_stack_depth(const cm_dict_t *d, uint32_t stack) {
    return d->stack_off[stack + 1] - d->stack_off[stack];
}

/* Returns the name of an event type ("cpu", "wall", ...) or "unknown". */
const char *cm_event_name(uint32_t type);
/* Parses an event type name. Returns 0 or CM_EINVAL. */
int cm_event_parse(const char *name, cm_event_type_t *out);
/* Copies a function name into out (size > 0) without ELF symbol versions: a token "@VER" or
 * "@@VER" (VER of letters, digits, '_' and '.') that ends the name or a word of it:
 * "clock_gettime@@GLIBC_2.17" -> "clock_gettime", "memcpy@GLIBC_2.2.5 memcpy.S:12" ->
 * "memcpy memcpy.S:12" ("memcpy@plt", a PLT stub, stays: a version has an upper-case letter
 * or a digit). One function, one name, whichever symbol table named it. Returns
 * the length written (the name cut at size - 1 if longer). */
size_t cm_name_unversioned(const char *name, char *out, size_t size);

/* Formats a weight of an event type in its unit, scaled for a reader: "1.25s", "830.0ms",
 * "12.0us", "512ns" (cpu, wall, lock, io: nanoseconds), "3.00MB", "12.5KB", "100B" (alloc,
 * inuse: bytes). The CLI's tables and the query library's text views use this one. */
void cm_format_weight(cm_event_type_t type, double v, char *buf, size_t size);
const char *cm_drop_reason_name(uint32_t reason);

/* Checks every cross-reference, count and time of a chunk against the limits above.
 * Returns 0, or a CM_E* code with a reason in errbuf ("samples[cpu].stack[17]=900 >= 500
 * stacks"). Run on every decoded chunk; encoders may run it on their input in tests. */
int cm_chunk_validate(const cm_chunk_t *c, char *errbuf, size_t errbuf_size);

/* Encodes c into a freshly malloc'ed frame (*out, *out_len). Times are truncated to the
 * header's time unit. Returns 0 or a CM_E* code with a reason in errbuf. The input is
 * validated first: an invalid chunk is never written. */
int cm_chunk_encode(const cm_chunk_t *c, uint8_t **out, size_t *out_len, char *errbuf,
                    size_t errbuf_size);

/* Decodes and fully validates one frame. On success *out is a new chunk to release with
 * cm_chunk_free(). On failure returns CM_EMAGIC, CM_EVERSION, CM_ECHECKSUM, CM_ETRUNCATED,
 * CM_ETOOBIG, CM_EFORMAT, CM_ERANGE, CM_ECOMPRESS or CM_ENOMEM, with the reason in errbuf.
 * Memory used is bounded by a budget derived from CM_MAX_RAW_SIZE whatever the input says. */
int cm_chunk_decode(const uint8_t *buf, size_t len, cm_chunk_t **out, char *errbuf,
                    size_t errbuf_size);
void cm_chunk_free(cm_chunk_t *c);

/* Frame helpers (frame.c). Reads and checks the 24-byte header only: magic, major version,
 * flags, lengths against len and the limits. Returns 0 and fills the out values. */
typedef struct {
    uint8_t major, minor;
    uint16_t flags;
    uint32_t raw_len, payload_len;
    uint64_t checksum;
} cm_frame_info_t;
int cm_frame_peek(const uint8_t *buf, size_t len, cm_frame_info_t *info, char *errbuf,
                  size_t errbuf_size);
/* Verifies the checksum of a whole frame (header + payload). Returns 0 or CM_ECHECKSUM. */
int cm_frame_verify(const uint8_t *buf, size_t len, const cm_frame_info_t *info);
/* Builds a frame around an already serialized chunk (raw, raw_len): compresses with LZ4 when
 * it helps. Returns 0 and a malloc'ed frame. */
int cm_frame_build(const uint8_t *raw, size_t raw_len, uint8_t **out, size_t *out_len);
/* Decompresses (or copies) the payload into dst, which holds info->raw_len bytes. */
int cm_frame_unpack(const uint8_t *buf, const cm_frame_info_t *info, uint8_t *dst, char *errbuf,
                    size_t errbuf_size);

/* Minor 3: a copy of frame (a whole chunk frame) with inc appended as the chunk's Incident
 * field (protobuf merges an appended field), re-framed. Returns 0 and a malloc'ed frame, or a
 * CM_E* code with a reason in errbuf. */
int cm_frame_add_incident(const uint8_t *frame, size_t len, const cm_incident_t *inc,
                          uint8_t **out, size_t *out_len, char *errbuf, size_t errbuf_size);

/* Formats 16 bytes as 32 lowercase hex characters plus NUL (out holds 33). */
void cm_hex(const uint8_t *bytes, size_t n, char *out);

#endif
