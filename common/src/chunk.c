/* Chunk model helpers: event and drop names, hex formatting, and cm_chunk_validate(), the one
 * place where the semantic rules of a chunk (indices, counts, times) are checked. The decoder
 * checks the wire encoding and then calls cm_chunk_validate(); the encoder calls it on its input.
 * Pure functions, thread-safe, not async-signal-safe (snprintf). */
#include "cm/chunk.h"
#include "cm/error.h"

#include <stdio.h>
#include <string.h>

static const char *const event_names[CM_EV_COUNT] = {"unknown", "cpu",   "wall", "alloc",
                                                     "inuse",   "lock",  "io"};

const char *cm_event_name(uint32_t type) {
    return type >= 1 && type <= CM_EV_MAX ? event_names[type] : "unknown";
}

int cm_event_parse(const char *name, cm_event_type_t *out) {
    for (uint32_t t = 1; t <= CM_EV_MAX; t++) {
        if (name && strcmp(name, event_names[t]) == 0) {
            *out = (cm_event_type_t)t;
            return 0;
        }
    }
    return CM_EINVAL;
}

/* The length of a version token "@VER" / "@@VER" at s (s[0] == '@') that ends at a space or
 * the end of the name, or 0 when s does not start one. A version has an upper-case letter or a
 * digit (GLIBC_2.17, GCC_3.0, OPENSSL_3.0.0): "memcpy@plt", a PLT stub's name, keeps its
 * suffix. */
static size_t version_token(const char *s) {
    size_t i = s[1] == '@' ? 2 : 1, start = i;
    int tagged = 0;
    for (;; i++) {
        char c = s[i];
        if ((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
            tagged = 1;
        else if (!((c >= 'a' && c <= 'z') || c == '_' || c == '.'))
            break;
    }
    return i > start && tagged && (s[i] == '\0' || s[i] == ' ') ? i : 0;
}

size_t cm_name_unversioned(const char *name, char *out, size_t size) {
    size_t o = 0;
    for (size_t i = 0; name[i] && o + 1 < size;) {
        size_t v = name[i] == '@' && i > 0 && name[i - 1] != ' ' && name[i - 1] != '@'
                       ? version_token(name + i)
                       : 0;
        if (v)
            i += v;
        else
            out[o++] = name[i++];
    }
    out[o] = '\0';
    return o;
}

/* A unit ladder for cm_format_weight: the first step whose threshold |v| reaches. */
typedef struct {
    double threshold; /* and divisor */
    const char *fmt;
} unit_step_t;

void cm_format_weight(cm_event_type_t type, double v, char *buf, size_t size) {
    static const unit_step_t bytes[] = {
        {1073741824.0, "%.2fGB"}, {1048576.0, "%.2fMB"}, {1024.0, "%.1fKB"}, {0, "%.0fB"}};
    static const unit_step_t nanos[] = {
        {1e9, "%.2fs"}, {1e6, "%.1fms"}, {1e3, "%.1fus"}, {0, "%.0fns"}};
    const unit_step_t *u = type == CM_EV_ALLOC || type == CM_EV_INUSE ? bytes : nanos;
    double a = v < 0 ? -v : v;
    while (u->threshold && !(a >= u->threshold)) /* NaN: the last step, as v itself */
        u++;
    snprintf(buf, size, u->fmt, u->threshold ? v / u->threshold : v);
}

const char *cm_drop_reason_name(uint32_t reason) {
    static const char *const names[] = {
        "unspecified", "ring_full",    "chunk_queue_full", "heap_table_full",
        "subsampled",  "unwind_failed", "stack_truncated", "dict_full",
        "over_budget", "thread_limit", "encode_failed", "host_unsafe",
        "output_failed", "signal_limit", "span_limit", "incident_cooldown",
        "incident_cap", "incident_lost"};
    return reason < sizeof names / sizeof names[0] ? names[reason] : "unknown";
}

void cm_hex(const uint8_t *bytes, size_t n, char *out) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

#define FAIL(code, ...)                                                                            \
    do {                                                                                           \
        snprintf(errbuf, errbuf_size, __VA_ARGS__);                                                \
        return (code);                                                                             \
    } while (0)

/* Checks idx[0..n) < limit; names the column in the error. */
static int check_refs(const uint32_t *idx, uint32_t n, uint32_t limit, const char *what,
                      const char *table, char *errbuf, size_t errbuf_size) {
    if (!idx)
        return 0;
    for (uint32_t i = 0; i < n; i++)
        if (idx[i] >= limit)
            FAIL(CM_ERANGE, "%s[%u]=%u out of range (%u %s)", what, i, idx[i], limit, table);
    return 0;
}

static int check_str(const cm_str_t *s, uint32_t max, const char *what, char *errbuf,
                     size_t errbuf_size) {
    if (s->len > max)
        FAIL(CM_ETOOBIG, "header.%s is %u bytes (limit %u)", what, s->len, max);
    if (s->len && !s->ptr)
        FAIL(CM_EINVAL, "header.%s has a length but no bytes", what);
    if (s->len && memchr(s->ptr, 0, s->len))
        FAIL(CM_EFORMAT, "header.%s contains a NUL byte", what);
    return 0;
}

static int validate_header(const cm_header_t *h, char *errbuf, size_t errbuf_size) {
    int rc;
    if (h->service.len == 0)
        FAIL(CM_EFORMAT, "header.service is empty");
    if ((rc = check_str(&h->service, CM_MAX_SERVICE_LEN, "service", errbuf, errbuf_size)) ||
        (rc = check_str(&h->version, CM_MAX_SERVICE_LEN, "version", errbuf, errbuf_size)) ||
        (rc = check_str(&h->host, CM_MAX_SERVICE_LEN, "host", errbuf, errbuf_size)) ||
        (rc = check_str(&h->agent_version, CM_MAX_SERVICE_LEN, "agent_version", errbuf,
                        errbuf_size)))
        return rc;
    if (h->time_unit_ns == 0)
        FAIL(CM_EFORMAT, "header.time_unit_ns is 0");
    if (h->end_unix_ns < h->start_unix_ns)
        FAIL(CM_EFORMAT, "header.end_unix_ns %llu is before start_unix_ns %llu",
             (unsigned long long)h->end_unix_ns, (unsigned long long)h->start_unix_ns);
    if (h->end_unix_ns - h->start_unix_ns > CM_MAX_INTERVAL_NS)
        FAIL(CM_ETOOBIG, "chunk interval of %llu ns exceeds the limit of %llu ns",
             (unsigned long long)(h->end_unix_ns - h->start_unix_ns),
             (unsigned long long)CM_MAX_INTERVAL_NS);
    if (h->n_sampling > CM_EV_COUNT * 4 || h->n_drops > 1024)
        FAIL(CM_ETOOBIG, "header has %u sampling entries and %u drop counters (limits %d, 1024)",
             h->n_sampling, h->n_drops, CM_EV_COUNT * 4);
    return 0;
}

static int validate_dict(const cm_dict_t *d, char *errbuf, size_t errbuf_size) {
    int rc;
    if (d->n_strings < 1 || d->n_mappings < 1 || d->n_functions < 1 || d->n_locations < 1 ||
        d->n_stacks < 1 || d->n_contexts < 1 || d->n_label_sets < 1 || d->n_threads < 1)
        FAIL(CM_EFORMAT, "a dictionary table lacks its zero entry");
    if (d->n_strings > CM_MAX_STRINGS || d->n_mappings > CM_MAX_MAPPINGS ||
        d->n_functions > CM_MAX_FUNCTIONS || d->n_locations > CM_MAX_LOCATIONS ||
        d->n_stacks > CM_MAX_STACKS || d->n_contexts > CM_MAX_CONTEXTS ||
        d->n_label_sets > CM_MAX_LABEL_SETS || d->n_threads > CM_MAX_THREADS)
        FAIL(CM_ETOOBIG, "a dictionary table exceeds its limit (strings %u, mappings %u, "
                         "functions %u, locations %u, stacks %u, contexts %u, label sets %u, "
                         "threads %u)",
             d->n_strings, d->n_mappings, d->n_functions, d->n_locations, d->n_stacks,
             d->n_contexts, d->n_label_sets, d->n_threads);
    if (d->strings[0].len != 0)
        FAIL(CM_EFORMAT, "string 0 must be empty");
    for (uint32_t i = 0; i < d->n_strings; i++) {
        if (d->strings[i].len > CM_MAX_STRING_LEN)
            FAIL(CM_ETOOBIG, "string %u is %u bytes (limit %u)", i, d->strings[i].len,
                 CM_MAX_STRING_LEN);
        if (d->strings[i].len && !d->strings[i].ptr)
            FAIL(CM_EINVAL, "string %u has a length but no bytes", i);
    }
    for (uint32_t i = 0; i < d->n_mappings; i++) {
        const cm_mapping_t *m = &d->mappings[i];
        if (m->filename >= d->n_strings)
            FAIL(CM_ERANGE, "mapping[%u].filename=%u out of range (%u strings)", i, m->filename,
                 d->n_strings);
        if (m->build_id_len > CM_MAX_BUILD_ID)
            FAIL(CM_ETOOBIG, "mapping[%u].build_id is %u bytes (limit %u)", i, m->build_id_len,
                 CM_MAX_BUILD_ID);
        if (m->limit < m->start)
            FAIL(CM_EFORMAT, "mapping[%u] ends before it starts", i);
    }
    uint32_t ns = d->n_strings, nf = d->n_functions, nl = d->n_locations;
    if ((rc = check_refs(d->function_name, nf, ns, "function.name", "strings", errbuf,
                         errbuf_size)) ||
        (rc = check_refs(d->function_system_name, nf, ns, "function.system_name", "strings",
                         errbuf, errbuf_size)) ||
        (rc = check_refs(d->function_filename, nf, ns, "function.filename", "strings", errbuf,
                         errbuf_size)) ||
        (rc = check_refs(d->location_mapping, nl, d->n_mappings, "location.mapping", "mappings",
                         errbuf, errbuf_size)) ||
        (rc = check_refs(d->location_function, nl, nf, "location.function", "functions", errbuf,
                         errbuf_size)))
        return rc;
    if (d->stack_off[0] != 0 || d->stack_off[1] != 0)
        FAIL(CM_EFORMAT, "stack 0 must be empty");
    for (uint32_t i = 0; i < d->n_stacks; i++) {
        if (d->stack_off[i + 1] < d->stack_off[i])
            FAIL(CM_EFORMAT, "stack %u has a negative length", i);
        if (d->stack_off[i + 1] - d->stack_off[i] > CM_MAX_STACK_DEPTH)
            FAIL(CM_ETOOBIG, "stack %u has %u frames (limit %u)", i,
                 d->stack_off[i + 1] - d->stack_off[i], CM_MAX_STACK_DEPTH);
    }
    uint32_t nframes = d->stack_off[d->n_stacks];
    if (nframes > CM_MAX_TOTAL_FRAMES)
        FAIL(CM_ETOOBIG, "stacks hold %u frames (limit %u)", nframes, CM_MAX_TOTAL_FRAMES);
    if ((rc = check_refs(d->stack_frames, nframes, nl, "stack.frame", "locations", errbuf,
                         errbuf_size)))
        return rc;
    static const uint8_t zero_ctx[CM_CONTEXT_SIZE];
    if (memcmp(d->contexts, zero_ctx, CM_CONTEXT_SIZE) != 0)
        FAIL(CM_EFORMAT, "context 0 must be all zero");
    if (d->label_off[0] != 0 || d->label_off[1] != 0)
        FAIL(CM_EFORMAT, "label set 0 must be empty");
    for (uint32_t i = 0; i < d->n_label_sets; i++) {
        if (d->label_off[i + 1] < d->label_off[i] ||
            d->label_off[i + 1] - d->label_off[i] > CM_MAX_LABELS_PER_SET)
            FAIL(CM_ETOOBIG, "label set %u has a bad size (limit %u labels)", i,
                 CM_MAX_LABELS_PER_SET);
    }
    if ((rc = check_refs(d->label_kv, 2 * d->label_off[d->n_label_sets], ns, "label", "strings",
                         errbuf, errbuf_size)) ||
        (rc = check_refs(d->thread_name, d->n_threads, ns, "thread.name", "strings", errbuf,
                         errbuf_size)))
        return rc;
    return 0;
}

static int validate_samples(const cm_chunk_t *c, const cm_samples_t *s, char *errbuf,
                            size_t errbuf_size) {
    const cm_dict_t *d = &c->dict;
    const char *tn = cm_event_name(s->type);
    if (s->n > CM_MAX_SAMPLES)
        FAIL(CM_ETOOBIG, "samples[%s] has %u rows (limit %u)", tn, s->n, CM_MAX_SAMPLES);
    if (!s->stack || !s->time_ns || !s->weight)
        FAIL(CM_EFORMAT, "samples[%s] lacks a required column (stack, time, weight)", tn);
    uint64_t lo = c->header.start_unix_ns, hi = c->header.end_unix_ns;
    for (uint32_t i = 0; i < s->n; i++) {
        if (s->stack[i] >= d->n_stacks)
            FAIL(CM_ERANGE, "samples[%s].stack[%u]=%u out of range (%u stacks)", tn, i,
                 s->stack[i], d->n_stacks);
        if (s->time_ns[i] < lo || s->time_ns[i] > hi)
            FAIL(CM_ERANGE, "samples[%s].time[%u]=%llu outside the chunk interval [%llu, %llu]", tn,
                 i, (unsigned long long)s->time_ns[i], (unsigned long long)lo,
                 (unsigned long long)hi);
    }
    char what[64];
#define REFS(col, limit, table)                                                                    \
    do {                                                                                           \
        snprintf(what, sizeof what, "samples[%s]." #col, tn);                                      \
        int rc_ = check_refs(s->col, s->n, (limit), what, table, errbuf, errbuf_size);             \
        if (rc_)                                                                                   \
            return rc_;                                                                            \
    } while (0)
    REFS(thread, d->n_threads, "threads");
    REFS(context, d->n_contexts, "contexts");
    REFS(labels, d->n_label_sets, "label sets");
    REFS(target, d->n_strings, "strings");
    REFS(io_kind, 256, "io kinds");
    REFS(fd_kind, 256, "fd kinds");
#undef REFS
    return 0;
}

/* Spans: every reference in range, a context of 0 never, an ended span inside the interval
 * (it ended after the chunk began, at or before its end), an active one begun by the end. */
static int validate_spans(const cm_chunk_t *c, char *errbuf, size_t errbuf_size) {
    const cm_spans_t *s = &c->spans;
    const cm_dict_t *d = &c->dict;
    if (s->n > CM_MAX_SPANS)
        FAIL(CM_ETOOBIG, "spans has %u rows (limit %u)", s->n, CM_MAX_SPANS);
    if (s->n && (!s->context || !s->name || !s->start_unix_ns || !s->duration_ns || !s->thread))
        FAIL(CM_EFORMAT, "spans lacks a required column (context, name, start, duration, thread)");
    uint64_t lo = c->header.start_unix_ns, hi = c->header.end_unix_ns;
    for (uint32_t i = 0; i < s->n; i++) {
        if (s->context[i] == 0 || s->context[i] >= d->n_contexts)
            FAIL(CM_ERANGE, "spans.context[%u]=%u out of range (1..%u)", i, s->context[i],
                 d->n_contexts - 1);
        if (s->name[i] >= d->n_strings || s->thread[i] >= d->n_threads)
            FAIL(CM_ERANGE, "spans[%u]: name %u or thread %u out of range (%u strings, %u "
                            "threads)",
                 i, s->name[i], s->thread[i], d->n_strings, d->n_threads);
        uint64_t st = s->start_unix_ns[i], du = s->duration_ns[i];
        if (st > hi || du > hi - st || st + du < lo)
            FAIL(CM_ERANGE, "spans[%u] (start %llu, duration %llu ns) is not in the chunk "
                            "interval [%llu, %llu]",
                 i, (unsigned long long)st, (unsigned long long)du, (unsigned long long)lo,
                 (unsigned long long)hi);
    }
    return 0;
}

int cm_chunk_validate(const cm_chunk_t *c, char *errbuf, size_t errbuf_size) {
    int rc;
    if ((rc = validate_header(&c->header, errbuf, errbuf_size)) ||
        (rc = validate_dict(&c->dict, errbuf, errbuf_size)))
        return rc;
    for (uint32_t t = 1; t <= CM_EV_MAX; t++) {
        const cm_samples_t *s = &c->samples[t];
        if (s->n == 0)
            continue;
        if (s->type != (cm_event_type_t)t)
            FAIL(CM_EFORMAT, "samples slot %u holds type %u", t, (unsigned)s->type);
        if ((rc = validate_samples(c, s, errbuf, errbuf_size)))
            return rc;
    }
    return validate_spans(c, errbuf, errbuf_size);
}
