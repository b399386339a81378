/* cm_chunk_decode(): frame -> checksum -> LZ4 -> protobuf-c -> in-memory chunk -> validation.
 *
 * Hostile input is the normal case here (collector and aggregator read what any process on a
 * node sent). Every count is checked before it sizes an allocation; protobuf-c allocates through
 * a budgeted allocator so a small message cannot make it allocate without bound; stacks are
 * expanded from their front coding only after their total size has been checked. The decoded
 * chunk points into the protobuf-c message where the C types match (no copy).
 * Thread-safe (no globals); allocates; not for signal handlers.
 */
#include "chunk_incident.h"
#include "cm/chunk.h"
#include "cm/error.h"
#include "chunk_fields.h"
#include "fleetprof.pb-c.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    ProtobufCAllocator alloc;
    size_t used, budget;
    int over_budget;
    Fleetprof__V1__Chunk *msg;
    void *arena; /* strings, stacks, label offsets, times, mappings: one block */
} owner_t;

static void *budget_alloc(void *data, size_t size) {
    owner_t *o = data;
    if (size > o->budget - o->used) {
        o->over_budget = 1;
        return NULL;
    }
    o->used += size;
    return malloc(size);
}
static void budget_free(void *data, void *p) {
    (void)data;
    free(p);
}

#define FAIL(code, ...)                                                                            \
    do {                                                                                           \
        snprintf(errbuf, errbuf_size, __VA_ARGS__);                                                \
        rc = (code);                                                                               \
        goto out;                                                                                  \
    } while (0)

/* The helpers below return their error at once: the caller frees. */
#define ERR(code, ...)                                                                             \
    do {                                                                                           \
        snprintf(errbuf, errbuf_size, __VA_ARGS__);                                                \
        return (code);                                                                             \
    } while (0)

/* An optional column has 0 or n entries. */
#define OPT_OK(m, field, n) ((m)->n_##field == 0 || (m)->n_##field == (n))

/* Sizes of everything that goes into the arena, checked before any of it is allocated. */
typedef struct {
    uint32_t ns, nst, nls; /* strings, stacks, label sets */
    uint64_t blob;         /* string bytes */
    uint64_t frames;       /* stack frames after front-coding expansion */
    uint64_t nsamples;     /* rows over every sample column */
} sizes_t;

/* Carves 8-byte aligned pieces off the arena (the +160 slack in arena_size() covers it). */
static void *take(char **arena, size_t bytes) {
    char *p = (char *)(((uintptr_t)*arena + 7) & ~(uintptr_t)7);
    *arena = p + bytes;
    return p;
}
#define TAKE(type, count) ((type *)take(arena, sizeof(type) * (count)))

void cm_chunk_free(cm_chunk_t *c) {
    if (!c)
        return;
    owner_t *o = c->owner_;
    if (o) {
        if (o->msg)
            fleetprof__v1__chunk__free_unpacked(o->msg, &o->alloc);
        free(o->arena);
        free(o);
    }
    free(c);
}

/* LZ4 frame payload -> protobuf-c message in o->msg, allocated within o's budget. */
static int unpack_message(const uint8_t *buf, const cm_frame_info_t *fi, owner_t *o, char *errbuf,
                          size_t errbuf_size) {
    uint8_t *raw = malloc(fi->raw_len + 1);
    if (!raw)
        ERR(CM_ENOMEM, "out of memory for a chunk of %u bytes", fi->raw_len);
    int rc = cm_frame_unpack(buf, fi, raw, errbuf, errbuf_size);
    if (rc) {
        free(raw);
        return rc;
    }
    /* protobuf-c may expand 1-byte varints into 8-byte integers and small messages into larger
     * structs: 12x the serialized size plus slack covers any valid chunk. */
    o->alloc.alloc = budget_alloc;
    o->alloc.free = budget_free;
    o->alloc.allocator_data = o;
    o->budget = (size_t)fi->raw_len * 12 + (1u << 20);
    o->msg = fleetprof__v1__chunk__unpack(&o->alloc, fi->raw_len, raw);
    free(raw);
    if (!o->msg) {
        if (o->over_budget)
            ERR(CM_ENOMEM, "chunk needs more than its decode budget of %zu bytes", o->budget);
        ERR(CM_EFORMAT, "payload is not a valid Chunk protobuf message");
    }
    if (!o->msg->header)
        ERR(CM_EFORMAT, "chunk has no header");
    if (!o->msg->dict)
        ERR(CM_EFORMAT, "chunk has no dictionary");
    return 0;
}

static cm_str_t header_str(const char *s) {
    return (cm_str_t){s, (uint32_t)strnlen(s, CM_MAX_SERVICE_LEN + 1)};
}

/* The header's scalars (sampling and drops come later, from the arena). */
static int decode_header(cm_header_t *h, const Fleetprof__V1__Header *ph, uint32_t minor,
                         char *errbuf, size_t errbuf_size) {
    h->service = header_str(ph->service);
    h->version = header_str(ph->version);
    h->host = header_str(ph->host);
    h->agent_version = header_str(ph->agent_version);
#define COPY(field) h->field = ph->field;
    CM_HEADER_SCALARS(COPY)
#undef COPY
    h->format_minor = minor;
    if (ph->chunk_id.len != CM_CHUNK_ID_LEN)
        ERR(CM_EFORMAT, "chunk id is %zu bytes (want %u)", ph->chunk_id.len, CM_CHUNK_ID_LEN);
    memcpy(h->chunk_id, ph->chunk_id.data, CM_CHUNK_ID_LEN);
    if (ph->n_sampling > CM_EV_COUNT * 4 || ph->n_drops > 1024)
        ERR(CM_ETOOBIG, "header has %zu sampling entries and %zu drop counters", ph->n_sampling,
            ph->n_drops);
    return 0;
}

/* The sum of len[0, n) while each is <= limit; *bad: the index of the first over it, or n. */
static uint64_t bounded_sum(const uint32_t *len, uint32_t n, uint32_t limit, uint32_t *bad) {
    uint64_t sum = 0;
    uint32_t i = 0;
    for (; i < n && len[i] <= limit; i++)
        sum += len[i];
    *bad = i;
    return sum;
}

/* Checks the string lengths against the blob; fills sz->blob. */
static int check_strings(const Fleetprof__V1__Dictionary *pd, sizes_t *sz, char *errbuf,
                         size_t errbuf_size) {
    uint32_t i;
    uint64_t blob = bounded_sum(pd->string_len, sz->ns, CM_MAX_STRING_LEN, &i);
    if (i < sz->ns)
        ERR(CM_ETOOBIG, "string %u is %u bytes (limit %u)", i, pd->string_len[i],
            CM_MAX_STRING_LEN);
    if (blob != pd->string_data.len)
        ERR(CM_EFORMAT, "string lengths add up to %llu but the string data holds %zu bytes",
            (unsigned long long)blob, pd->string_data.len);
    sz->blob = blob;
    return 0;
}

/* Checks the front-coded stack columns; fills sz->frames. */
static int check_stacks(const Fleetprof__V1__Dictionary *pd, sizes_t *sz, char *errbuf,
                        size_t errbuf_size) {
    uint32_t nst = sz->nst;
    if (pd->n_stack_shared != nst || pd->n_stack_suffix_len != nst || !OPT_OK(pd, stack_flags, nst))
        ERR(CM_EFORMAT, "stack columns differ in length (base %u, shared %zu, suffix %zu, "
                        "flags %zu)",
            nst, pd->n_stack_shared, pd->n_stack_suffix_len, pd->n_stack_flags);
    uint64_t frames = 0, suffixes = 0;
    for (uint32_t i = 0; i < nst; i++) {
        uint32_t b = pd->stack_base[i], sh = pd->stack_shared[i], sf = pd->stack_suffix_len[i];
        if ((b >= i && !(b == 0 && sh == 0)) || sh > CM_MAX_STACK_DEPTH ||
            sf > CM_MAX_STACK_DEPTH || sh + sf > CM_MAX_STACK_DEPTH)
            ERR(CM_EFORMAT, "stack %u: base %u, shared %u, suffix %u are inconsistent", i, b, sh,
                sf);
        frames += sh + sf;
        suffixes += sf;
    }
    if (frames > CM_MAX_TOTAL_FRAMES)
        ERR(CM_ETOOBIG, "stacks expand to %llu frames (limit %u)", (unsigned long long)frames,
            CM_MAX_TOTAL_FRAMES);
    if (suffixes != pd->n_stack_location)
        ERR(CM_EFORMAT, "stack suffixes need %llu locations, the column has %zu",
            (unsigned long long)suffixes, pd->n_stack_location);
    sz->frames = frames;
    return 0;
}

/* Every count that sizes the arena, checked against its limit and its column. */
static int check_sizes(const Fleetprof__V1__Chunk *m, sizes_t *sz, char *errbuf,
                       size_t errbuf_size) {
    const Fleetprof__V1__Dictionary *pd = m->dict;
    int rc;
    sz->ns = (uint32_t)pd->n_string_len;
    sz->nst = (uint32_t)pd->n_stack_base;
    sz->nls = (uint32_t)pd->n_label_set_len;
    if (pd->n_string_len > CM_MAX_STRINGS || pd->n_stack_base > CM_MAX_STACKS ||
        pd->n_label_set_len > CM_MAX_LABEL_SETS || pd->n_mappings > CM_MAX_MAPPINGS)
        ERR(CM_ETOOBIG, "dictionary too large (strings %zu, stacks %zu, label sets %zu, "
                        "mappings %zu)",
            pd->n_string_len, pd->n_stack_base, pd->n_label_set_len, pd->n_mappings);
    if ((rc = check_strings(pd, sz, errbuf, errbuf_size)) ||
        (rc = check_stacks(pd, sz, errbuf, errbuf_size)))
        return rc;
    uint32_t i;
    uint64_t nlabels = bounded_sum(pd->label_set_len, sz->nls, CM_MAX_LABELS_PER_SET, &i);
    if (i < sz->nls)
        ERR(CM_ETOOBIG, "label set %u has %u labels (limit %u)", i, pd->label_set_len[i],
            CM_MAX_LABELS_PER_SET);
    if (2 * nlabels != pd->n_label_kv)
        ERR(CM_EFORMAT, "label sets need %llu key/value entries, the column has %zu",
            (unsigned long long)(2 * nlabels), pd->n_label_kv);
    if (pd->context_ids.len % CM_CONTEXT_SIZE)
        ERR(CM_EFORMAT, "context table of %zu bytes is not a multiple of %u", pd->context_ids.len,
            CM_CONTEXT_SIZE);
    sz->nsamples = 0;
    for (size_t k = 0; k < m->n_samples; k++) {
        if (m->samples[k]->n_stack > CM_MAX_SAMPLES)
            ERR(CM_ETOOBIG, "a sample column has %zu rows (limit %u)", m->samples[k]->n_stack,
                CM_MAX_SAMPLES);
        sz->nsamples += m->samples[k]->n_stack;
    }
    return 0;
}

/* Bytes of the one block that holds what the decoder cannot point into the message for.
 * Alignment slack: at most 7 bytes per take(); 8 dictionary takes + 2 per sample column
 * (at most 6 kept, skipped ones take nothing) = 20 takes, covered by the +160. */
static size_t arena_size(const Fleetprof__V1__Chunk *m, const sizes_t *sz) {
    return sizeof(cm_str_t) * sz->ns + sz->blob + sz->ns +          /* strings */
           sizeof(uint32_t) * (sz->nst + 1 + sz->frames) +          /* stacks */
           sizeof(uint32_t) * (sz->nls + 1) +                       /* label offsets */
           2 * sizeof(uint64_t) * sz->nsamples +                    /* times, weights */
           sizeof(cm_mapping_t) * m->dict->n_mappings +             /* mappings */
           sizeof(cm_sampling_t) * m->header->n_sampling +
           sizeof(cm_drop_t) * m->header->n_drops + 160;
}

/* Strings (copied, NUL-terminated) and mappings. */
static void decode_strings(cm_dict_t *d, const Fleetprof__V1__Dictionary *pd, const sizes_t *sz,
                           char **arena) {
    d->n_strings = sz->ns;
    d->strings = TAKE(cm_str_t, sz->ns);
    char *sdata = TAKE(char, sz->blob + sz->ns);
    const uint8_t *src = pd->string_data.data;
    for (uint32_t i = 0; i < sz->ns; i++) {
        uint32_t l = pd->string_len[i];
        if (l)
            memcpy(sdata, src, l);
        sdata[l] = '\0';
        d->strings[i] = (cm_str_t){sdata, l};
        sdata += l + 1;
        src += l;
    }

    d->n_mappings = (uint32_t)pd->n_mappings;
    d->mappings = TAKE(cm_mapping_t, pd->n_mappings);
    for (uint32_t i = 0; i < d->n_mappings; i++) {
        const Fleetprof__V1__Mapping *pm = pd->mappings[i];
        d->mappings[i] = (cm_mapping_t){pm->start,    pm->limit,   pm->file_offset,
                                        pm->filename, pm->build_id.data,
                                        (uint32_t)(pm->build_id.len > 0xFFFFFFFFu
                                                       ? 0xFFFFFFFFu
                                                       : pm->build_id.len)};
    }
}

/* Function and location columns: pointed to in the message. */
static int decode_functions(cm_dict_t *d, const Fleetprof__V1__Dictionary *pd, char *errbuf,
                            size_t errbuf_size) {
    uint32_t nf = (uint32_t)pd->n_function_name, nl = (uint32_t)pd->n_location_mapping;
    if (pd->n_function_name > CM_MAX_FUNCTIONS || pd->n_location_mapping > CM_MAX_LOCATIONS)
        ERR(CM_ETOOBIG, "%zu functions, %zu locations exceed the limits", pd->n_function_name,
            pd->n_location_mapping);
    if (!OPT_OK(pd, function_system_name, nf) || !OPT_OK(pd, function_filename, nf))
        ERR(CM_EFORMAT, "function columns differ in length");
    if (pd->n_location_address != nl || pd->n_location_function != nl ||
        !OPT_OK(pd, location_line, nl))
        ERR(CM_EFORMAT, "location columns differ in length");
    d->n_functions = nf;
    d->function_name = pd->function_name;
    d->function_system_name = pd->n_function_system_name ? pd->function_system_name : NULL;
    d->function_filename = pd->n_function_filename ? pd->function_filename : NULL;
    d->n_locations = nl;
    d->location_mapping = pd->location_mapping;
    d->location_address = pd->location_address;
    d->location_function = pd->location_function;
    d->location_line = pd->n_location_line ? pd->location_line : NULL;
    return 0;
}

/* Stacks: expands the front coding; base < i so its frames are already in place. */
static int decode_stacks(cm_dict_t *d, const Fleetprof__V1__Dictionary *pd, const sizes_t *sz,
                         char **arena, char *errbuf, size_t errbuf_size) {
    uint32_t nst = sz->nst;
    d->n_stacks = nst;
    d->stack_off = TAKE(uint32_t, nst + 1);
    d->stack_frames = TAKE(uint32_t, sz->frames);
    d->stack_flags = pd->n_stack_flags ? pd->stack_flags : NULL;
    uint32_t pos = 0, lpos = 0;
    for (uint32_t i = 0; i < nst; i++) {
        uint32_t b = pd->stack_base[i], sh = pd->stack_shared[i], sf = pd->stack_suffix_len[i];
        d->stack_off[i] = pos;
        if (sh > (i ? d->stack_off[b + 1] - d->stack_off[b] : 0))
            ERR(CM_EFORMAT, "stack %u shares %u frames with stack %u, which is shorter", i, sh, b);
        if (sh)
            memcpy(d->stack_frames + pos, d->stack_frames + d->stack_off[b], sh * sizeof(uint32_t));
        if (sf) /* stack_location is NULL when no stack has a frame */
            memcpy(d->stack_frames + pos + sh, pd->stack_location + lpos, sf * sizeof(uint32_t));
        pos += sh + sf;
        lpos += sf;
    }
    d->stack_off[nst] = pos;
    if (nst == 0)
        ERR(CM_EFORMAT, "a dictionary table lacks its zero entry (stacks)");
    return 0;
}

/* Contexts, label sets (offsets rebuilt from the lengths) and threads. */
static int decode_labels(cm_dict_t *d, const Fleetprof__V1__Dictionary *pd, const sizes_t *sz,
                         char **arena, char *errbuf, size_t errbuf_size) {
    d->n_contexts = (uint32_t)(pd->context_ids.len / CM_CONTEXT_SIZE);
    if (d->n_contexts > CM_MAX_CONTEXTS)
        ERR(CM_ETOOBIG, "%u contexts exceed the limit of %u", d->n_contexts, CM_MAX_CONTEXTS);
    d->contexts = pd->context_ids.data;

    uint32_t nls = sz->nls;
    d->n_label_sets = nls;
    d->label_off = TAKE(uint32_t, nls + 1);
    uint32_t acc = 0;
    for (uint32_t i = 0; i < nls; i++) {
        d->label_off[i] = acc;
        acc += pd->label_set_len[i];
    }
    d->label_off[nls] = acc;
    d->label_kv = pd->label_kv;
    if (nls == 0)
        ERR(CM_EFORMAT, "a dictionary table lacks its zero entry (label sets)");

    d->n_threads = (uint32_t)pd->n_thread_tid;
    if (pd->n_thread_tid > CM_MAX_THREADS || !OPT_OK(pd, thread_name, pd->n_thread_tid))
        ERR(CM_EFORMAT, "thread columns differ in length or exceed %u", CM_MAX_THREADS);
    d->thread_tid = pd->thread_tid;
    d->thread_name = pd->n_thread_name ? pd->thread_name : NULL;
    return 0;
}

/* The header's sampling settings and drop counters, copied into the arena. */
static void decode_sampling(cm_header_t *h, const Fleetprof__V1__Header *ph, char **arena) {
    h->n_sampling = (uint32_t)ph->n_sampling;
    h->sampling = TAKE(cm_sampling_t, ph->n_sampling);
    for (uint32_t i = 0; i < h->n_sampling; i++) {
        const Fleetprof__V1__Sampling *ps = ph->sampling[i];
        h->sampling[i] = (cm_sampling_t){(cm_event_type_t)ps->type, ps->period, ps->threshold_ns,
                                         ps->target_per_sec, ps->events_seen, ps->samples_kept};
    }
    h->n_drops = (uint32_t)ph->n_drops;
    h->drops = TAKE(cm_drop_t, ph->n_drops);
    for (uint32_t i = 0; i < h->n_drops; i++)
        h->drops[i] = (cm_drop_t){(uint32_t)ph->drops[i]->reason, (uint32_t)ph->drops[i]->type,
                                  ph->drops[i]->count};
}

/* One sample column of event type t (1..CM_EV_MAX, not seen before): weights and times
 * undeltaed into the arena, times checked to fall within [0, max_units] time units. */
static int decode_column(cm_samples_t *s, const Fleetprof__V1__Samples *ps, uint32_t t,
                         const cm_header_t *h, int64_t max_units, char **arena, char *errbuf,
                         size_t errbuf_size) {
    uint32_t n = (uint32_t)ps->n_stack;
    const char *tn = cm_event_name(t);
    if (ps->n_time_delta != n || ps->n_weight_delta != n)
        ERR(CM_EFORMAT, "samples[%s]: %u stacks, %zu times, %zu weights", tn, n, ps->n_time_delta,
            ps->n_weight_delta);
    if (!OPT_OK(ps, count, n) || !OPT_OK(ps, thread, n) || !OPT_OK(ps, context, n) ||
        !OPT_OK(ps, labels, n) || !OPT_OK(ps, flags, n) || !OPT_OK(ps, size, n) ||
        !OPT_OK(ps, address, n) || !OPT_OK(ps, io_kind, n) || !OPT_OK(ps, fd_kind, n) ||
        !OPT_OK(ps, target, n))
        ERR(CM_EFORMAT, "samples[%s]: an optional column is neither empty nor %u rows", tn, n);
    s->type = (cm_event_type_t)t;
    s->n = n;
    s->stack = ps->stack;
    s->weight = TAKE(uint64_t, n);
    uint64_t w = 0;
    for (uint32_t i = 0; i < n; i++) /* unsigned wrap-around undoes the encoder's */
        s->weight[i] = w += (uint64_t)ps->weight_delta[i];
    s->time_ns = TAKE(uint64_t, n);
    int64_t u = 0;
    for (uint32_t i = 0; i < n; i++) {
        int64_t dlt = ps->time_delta[i];
        if (dlt > max_units || dlt < -max_units || (u += dlt) < 0 || u > max_units)
            ERR(CM_ERANGE, "samples[%s].time[%u] falls outside the chunk interval", tn, i);
        s->time_ns[i] = h->start_unix_ns + (uint64_t)u * h->time_unit_ns;
    }
#define OPT(field) s->field = ps->n_##field ? (void *)ps->field : NULL
    OPT(count);
    OPT(thread);
    OPT(context);
    OPT(labels);
    OPT(flags);
    OPT(size);
    OPT(address);
    OPT(io_kind);
    OPT(fd_kind);
    OPT(target);
#undef OPT
    return 0;
}

/* Every sample column; a newer minor's event type is counted in skipped_columns. */
static int decode_samples(cm_chunk_t *c, const Fleetprof__V1__Chunk *m, char **arena,
                          char *errbuf, size_t errbuf_size) {
    const cm_header_t *h = &c->header;
    if (h->time_unit_ns == 0)
        ERR(CM_EFORMAT, "header.time_unit_ns is 0");
    if (h->end_unix_ns < h->start_unix_ns)
        ERR(CM_EFORMAT, "header.end_unix_ns is before start_unix_ns");
    int64_t max_units = (int64_t)((h->end_unix_ns - h->start_unix_ns) / h->time_unit_ns);
    for (size_t k = 0; k < m->n_samples; k++) {
        const Fleetprof__V1__Samples *ps = m->samples[k];
        uint32_t t = (uint32_t)ps->type;
        if (t == 0)
            ERR(CM_EFORMAT, "sample column %zu has no event type", k);
        if (t > CM_EV_MAX) { /* a newer minor's event type: skip it */
            c->skipped_columns++;
            continue;
        }
        if (c->samples[t].type)
            ERR(CM_EFORMAT, "two sample columns of type %s", cm_event_name(t));
        int rc = decode_column(&c->samples[t], ps, t, h, max_units, arena, errbuf, errbuf_size);
        if (rc)
            return rc;
    }
    return 0;
}

/* Spans (minor 2): columns point into the message. */
static int decode_spans(cm_chunk_t *c, const Fleetprof__V1__Spans *psp, char *errbuf,
                        size_t errbuf_size) {
    if (!psp || !psp->n_context)
        return 0;
    uint32_t n = (uint32_t)psp->n_context;
    if (psp->n_context > CM_MAX_SPANS)
        ERR(CM_ETOOBIG, "%zu spans exceed the limit of %u", psp->n_context, CM_MAX_SPANS);
    if (psp->n_name != n || psp->n_start_unix_ns != n || psp->n_duration_ns != n ||
        psp->n_thread != n || !OPT_OK(psp, flags, n))
        ERR(CM_EFORMAT, "span columns differ in length (%u contexts, %zu names, %zu starts, "
                        "%zu durations, %zu threads, %zu flags)",
            n, psp->n_name, psp->n_start_unix_ns, psp->n_duration_ns, psp->n_thread,
            psp->n_flags);
    c->spans = (cm_spans_t){n, psp->context, psp->name, psp->start_unix_ns, psp->duration_ns,
                            psp->thread, psp->n_flags ? psp->flags : NULL};
    return 0;
}

/* The message's dictionary and samples into c, in the order the checks must run: sizes
 * first, then the arena, then each table. */
static int decode_body(cm_chunk_t *c, owner_t *o, char *errbuf, size_t errbuf_size) {
    const Fleetprof__V1__Chunk *m = o->msg;
    const Fleetprof__V1__Dictionary *pd = m->dict;
    sizes_t sz;
    int rc;
    if ((rc = check_sizes(m, &sz, errbuf, errbuf_size)))
        return rc;
    size_t bytes = arena_size(m, &sz);
    char *arena_p = o->arena = malloc(bytes), **arena = &arena_p;
    if (!arena_p)
        ERR(CM_ENOMEM, "out of memory for a decoded chunk of %zu bytes", bytes);
    cm_dict_t *d = &c->dict;
    decode_strings(d, pd, &sz, arena);
    if ((rc = decode_functions(d, pd, errbuf, errbuf_size)) ||
        (rc = decode_stacks(d, pd, &sz, arena, errbuf, errbuf_size)) ||
        (rc = decode_labels(d, pd, &sz, arena, errbuf, errbuf_size)))
        return rc;
    decode_sampling(&c->header, m->header, arena);
    if ((rc = decode_samples(c, m, arena, errbuf, errbuf_size)) ||
        (rc = decode_spans(c, m->spans, errbuf, errbuf_size)))
        return rc;
    if (m->incident && (rc = cm_incident_from_pb(m->incident, &c->incident, errbuf, errbuf_size)))
        return rc;
    return 0;
}

int cm_chunk_decode(const uint8_t *buf, size_t len, cm_chunk_t **out, char *errbuf,
                    size_t errbuf_size) {
    int rc = 0;
    cm_frame_info_t fi;
    cm_chunk_t *c = NULL;
    owner_t *o = NULL;
    *out = NULL;
    if (!buf)
        len = 0;
    if ((rc = cm_frame_peek(buf, len, &fi, errbuf, errbuf_size)))
        return rc;
    if (cm_frame_verify(buf, len, &fi) != 0) {
        snprintf(errbuf, errbuf_size, "checksum mismatch over %u payload bytes", fi.payload_len);
        return CM_ECHECKSUM;
    }
    c = calloc(1, sizeof *c);
    o = calloc(1, sizeof *o);
    if (c)
        c->owner_ = o;
    if (!c || !o)
        FAIL(CM_ENOMEM, "out of memory for a chunk of %u bytes", fi.raw_len);
    if ((rc = unpack_message(buf, &fi, o, errbuf, errbuf_size)) ||
        (rc = decode_header(&c->header, o->msg->header, fi.minor, errbuf, errbuf_size)) ||
        (rc = decode_body(c, o, errbuf, errbuf_size)) ||
        (rc = cm_chunk_validate(c, errbuf, errbuf_size)))
        goto out;
    *out = c;
    return 0;
out:
    cm_chunk_free(c);
    if (!c)
        free(o);
    return rc;
}
