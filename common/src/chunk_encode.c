/* cm_chunk_encode(): in-memory chunk -> protobuf-c message -> LZ4 frame.
 *
 * Columns are passed to protobuf-c without copying where the C types match. Two transforms
 * happen here: sample times become deltas in the header's time unit, and stacks are
 * front-coded (each stack names the earlier stack with which it shares the longest root
 * prefix, found with a hash trie over (parent node, location)). Optional columns whose every
 * row has the default value are left out.
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

_Static_assert(sizeof(Fleetprof__V1__IoKind) == sizeof(uint32_t), "enum columns alias uint32");

typedef struct {
    uint32_t parent, loc, node, first_stack;
} trie_slot_t;

static uint32_t slot_hash(uint32_t parent, uint32_t loc) {
    uint64_t k = ((uint64_t)parent << 32 | loc) * 0x9E3779B97F4A7C15ull;
    return (uint32_t)(k >> 32);
}

/* Front-codes the stacks of d into base/shared/suffix columns. Returns 0 or CM_ENOMEM. */
static int front_code(const cm_dict_t *d, uint32_t *base, uint32_t *shared, uint32_t *suffix_len,
                      uint32_t *locs, size_t *n_locs) {
    uint32_t total = d->stack_off[d->n_stacks];
    size_t cap = 16;
    while (cap < 2 * (size_t)total + 2)
        cap <<= 1;
    trie_slot_t *tab = calloc(cap, sizeof *tab); /* node == 0 marks an empty slot */
    if (!tab)
        return CM_ENOMEM;
    uint32_t next_node = 1;
    size_t out = 0;
    for (uint32_t i = 0; i < d->n_stacks; i++) {
        const uint32_t *f = d->stack_frames + d->stack_off[i];
        uint32_t depth = d->stack_off[i + 1] - d->stack_off[i];
        uint32_t parent = 0, k = 0;
        base[i] = 0;
        shared[i] = 0;
        for (; k < depth; k++) {
            size_t h = slot_hash(parent, f[k]) & (cap - 1);
            while (tab[h].node && !(tab[h].parent == parent && tab[h].loc == f[k]))
                h = (h + 1) & (cap - 1);
            if (!tab[h].node)
                break;
            parent = tab[h].node;
            base[i] = tab[h].first_stack;
            shared[i] = k + 1;
        }
        for (uint32_t j = k; j < depth; j++) {
            size_t h = slot_hash(parent, f[j]) & (cap - 1);
            while (tab[h].node)
                h = (h + 1) & (cap - 1);
            tab[h] = (trie_slot_t){parent, f[j], next_node, i};
            parent = next_node++;
            locs[out++] = f[j];
        }
        suffix_len[i] = depth - k;
    }
    free(tab);
    *n_locs = out;
    return 0;
}

static int all_default32(const uint32_t *col, uint32_t n) {
    if (!col)
        return 1;
    for (uint32_t i = 0; i < n; i++)
        if (col[i])
            return 0;
    return 1;
}
static int all_default64(const uint64_t *col, uint32_t n, uint64_t dflt) {
    if (!col)
        return 1;
    for (uint32_t i = 0; i < n; i++)
        if (col[i] != dflt)
            return 0;
    return 1;
}

/* A column of n rows (n_<field> and <field> of a protobuf-c message), pointed to. */
#define SET_COL(msg, field, col, n) ((msg)->n_##field = (n), (msg)->field = (void *)(col))
/* An optional column, left out (0 rows) when every row has the default value. */
#define SET_COL32(msg, field, col, n)                                                              \
    do {                                                                                           \
        if (!all_default32((col), (n)))                                                            \
            SET_COL(msg, field, col, n);                                                           \
    } while (0)
#define SET_COL64(msg, field, col, n, dflt)                                                        \
    do {                                                                                           \
        if (!all_default64((col), (n), (dflt)))                                                    \
            SET_COL(msg, field, col, n);                                                           \
    } while (0)

static char *dup_str(cm_str_t s) {
    char *p = malloc((size_t)s.len + 1);
    if (p) {
        if (s.len)
            memcpy(p, s.ptr, s.len);
        p[s.len] = '\0';
    }
    return p;
}

/* The message under construction; columns of the input chunk are pointed to, not copied.
 * What the encoder allocates for it is kept in owned[] and released with enc_free(). */
typedef struct {
    Fleetprof__V1__Chunk msg;
    Fleetprof__V1__Header hdr;
    Fleetprof__V1__Dictionary dict;
    Fleetprof__V1__Spans spans;
    Fleetprof__V1__Incident incident; /* minor 3: set when the chunk is a capture's */
    Fleetprof__V1__Samples cols[CM_EV_COUNT], *cols_p[CM_EV_COUNT];
    void *owned[24]; /* 4 header strings, 10 tables, 6 delta columns */
    size_t n_owned;
} enc_t;

/* Keeps p (an allocation or NULL) for enc_free. Returns p, or NULL when owned[] is full
 * (it is sized for every allocation below: failing beats leaking if one is added). */
static void *own(enc_t *e, void *p) {
    if (p && e->n_owned == sizeof e->owned / sizeof e->owned[0]) {
        free(p);
        return NULL;
    }
    if (p)
        e->owned[e->n_owned++] = p;
    return p;
}

static void enc_free(enc_t *e) {
    for (size_t i = 0; i < e->n_owned; i++)
        free(e->owned[i]);
}

/* Header scalars, strings, sampling settings and drop counters. 0 or CM_ENOMEM. */
static int enc_header(enc_t *e, const cm_header_t *h) {
    Fleetprof__V1__Header *hdr = &e->hdr;
    if (!(hdr->service = own(e, dup_str(h->service))) ||
        !(hdr->version = own(e, dup_str(h->version))) ||
        !(hdr->host = own(e, dup_str(h->host))) ||
        !(hdr->agent_version = own(e, dup_str(h->agent_version))))
        return CM_ENOMEM;
#define COPY(field) hdr->field = h->field;
    CM_HEADER_SCALARS(COPY)
#undef COPY
    hdr->chunk_id.data = (uint8_t *)h->chunk_id;
    hdr->chunk_id.len = CM_CHUNK_ID_LEN;
    hdr->format_minor = CM_FORMAT_MINOR;
    Fleetprof__V1__Sampling *samp = own(e, calloc(h->n_sampling + 1, sizeof *samp));
    Fleetprof__V1__Sampling **samp_p = own(e, calloc(h->n_sampling + 1, sizeof *samp_p));
    Fleetprof__V1__Drop *drops = own(e, calloc(h->n_drops + 1, sizeof *drops));
    Fleetprof__V1__Drop **drops_p = own(e, calloc(h->n_drops + 1, sizeof *drops_p));
    if (!samp || !samp_p || !drops || !drops_p)
        return CM_ENOMEM;
    for (uint32_t i = 0; i < h->n_sampling; i++) {
        Fleetprof__V1__Sampling *ps = &samp[i];
        fleetprof__v1__sampling__init(ps);
        ps->type = (Fleetprof__V1__EventType)h->sampling[i].type;
        ps->period = h->sampling[i].period;
        ps->threshold_ns = h->sampling[i].threshold_ns;
        ps->target_per_sec = h->sampling[i].target_per_sec;
        ps->events_seen = h->sampling[i].events_seen;
        ps->samples_kept = h->sampling[i].samples_kept;
        samp_p[i] = ps;
    }
    hdr->n_sampling = h->n_sampling;
    hdr->sampling = samp_p;
    for (uint32_t i = 0; i < h->n_drops; i++) {
        fleetprof__v1__drop__init(&drops[i]);
        drops[i].reason = (Fleetprof__V1__DropReason)h->drops[i].reason;
        drops[i].type = (Fleetprof__V1__EventType)h->drops[i].type;
        drops[i].count = h->drops[i].count;
        drops_p[i] = &drops[i];
    }
    hdr->n_drops = h->n_drops;
    hdr->drops = drops_p;
    return 0;
}

/* Strings (one blob plus lengths) and mappings. 0 or CM_ENOMEM. */
static int enc_strings(enc_t *e, const cm_dict_t *d) {
    Fleetprof__V1__Dictionary *dict = &e->dict;
    size_t blob = 0;
    for (uint32_t i = 0; i < d->n_strings; i++)
        blob += d->strings[i].len;
    uint8_t *string_data = own(e, malloc(blob + 1));
    uint32_t *string_len = own(e, malloc(sizeof(uint32_t) * d->n_strings));
    if (!string_data || !string_len)
        return CM_ENOMEM;
    blob = 0;
    for (uint32_t i = 0; i < d->n_strings; i++) {
        if (d->strings[i].len)
            memcpy(string_data + blob, d->strings[i].ptr, d->strings[i].len);
        blob += d->strings[i].len;
        string_len[i] = d->strings[i].len;
    }
    dict->string_data.data = string_data;
    dict->string_data.len = blob;
    dict->n_string_len = d->n_strings;
    dict->string_len = string_len;

    Fleetprof__V1__Mapping *maps = own(e, calloc(d->n_mappings, sizeof *maps));
    Fleetprof__V1__Mapping **maps_p = own(e, calloc(d->n_mappings, sizeof *maps_p));
    if (!maps || !maps_p)
        return CM_ENOMEM;
    for (uint32_t i = 0; i < d->n_mappings; i++) {
        Fleetprof__V1__Mapping *pm = &maps[i];
        fleetprof__v1__mapping__init(pm);
        pm->start = d->mappings[i].start;
        pm->limit = d->mappings[i].limit;
        pm->file_offset = d->mappings[i].file_offset;
        pm->filename = d->mappings[i].filename;
        pm->build_id.data = (uint8_t *)d->mappings[i].build_id;
        pm->build_id.len = d->mappings[i].build_id_len;
        maps_p[i] = pm;
    }
    dict->n_mappings = d->n_mappings;
    dict->mappings = maps_p;
    return 0;
}

/* Functions, locations, front-coded stacks, contexts, label sets and threads.
 * 0 or CM_ENOMEM. */
static int enc_tables(enc_t *e, const cm_dict_t *d) {
    Fleetprof__V1__Dictionary *dict = &e->dict;
    SET_COL(dict, function_name, d->function_name, d->n_functions);
    SET_COL32(dict, function_system_name, d->function_system_name, d->n_functions);
    SET_COL32(dict, function_filename, d->function_filename, d->n_functions);
    SET_COL(dict, location_mapping, d->location_mapping, d->n_locations);
    SET_COL(dict, location_address, d->location_address, d->n_locations);
    SET_COL(dict, location_function, d->location_function, d->n_locations);
    SET_COL32(dict, location_line, d->location_line, d->n_locations);

    uint32_t nframes = d->stack_off[d->n_stacks];
    uint32_t *st_base = own(e, malloc(sizeof(uint32_t) * ((size_t)3 * d->n_stacks + nframes + 1)));
    if (!st_base)
        return CM_ENOMEM;
    uint32_t *st_shared = st_base + d->n_stacks, *st_suffix = st_shared + d->n_stacks;
    uint32_t *st_locs = st_suffix + d->n_stacks;
    size_t n_locs = 0;
    int rc = front_code(d, st_base, st_shared, st_suffix, st_locs, &n_locs);
    if (rc)
        return rc;
    dict->n_stack_base = dict->n_stack_shared = dict->n_stack_suffix_len = d->n_stacks;
    dict->stack_base = st_base;
    dict->stack_shared = st_shared;
    dict->stack_suffix_len = st_suffix;
    dict->n_stack_location = n_locs;
    dict->stack_location = st_locs;
    SET_COL32(dict, stack_flags, d->stack_flags, d->n_stacks);

    dict->context_ids.data = (uint8_t *)d->contexts;
    dict->context_ids.len = (size_t)d->n_contexts * CM_CONTEXT_SIZE;
    uint32_t *label_len = own(e, malloc(sizeof(uint32_t) * d->n_label_sets));
    if (!label_len)
        return CM_ENOMEM;
    for (uint32_t i = 0; i < d->n_label_sets; i++)
        label_len[i] = d->label_off[i + 1] - d->label_off[i];
    dict->n_label_set_len = d->n_label_sets;
    dict->label_set_len = label_len;
    SET_COL(dict, label_kv, d->label_kv, 2 * (size_t)d->label_off[d->n_label_sets]);
    SET_COL(dict, thread_tid, d->thread_tid, d->n_threads);
    SET_COL32(dict, thread_name, d->thread_name, d->n_threads);
    return 0;
}

/* Sample column of type t into m: times as deltas in the header's time unit, weights as
 * deltas, optional columns left out when every row has the default. 0 or CM_ENOMEM. */
static int enc_column(enc_t *e, Fleetprof__V1__Samples *m, uint32_t t, const cm_samples_t *s,
                      const cm_header_t *h) {
    fleetprof__v1__samples__init(m);
    m->type = (Fleetprof__V1__EventType)t;
    SET_COL(m, stack, s->stack, s->n);
    int64_t *td = own(e, malloc(2 * sizeof(int64_t) * s->n)); /* times, then weights */
    if (!td)
        return CM_ENOMEM;
    int64_t prev = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        int64_t u = (int64_t)((s->time_ns[i] - h->start_unix_ns) / h->time_unit_ns);
        td[i] = u - prev;
        prev = u;
    }
    m->n_time_delta = s->n;
    m->time_delta = td;
    int64_t *wd = td + s->n; /* second half of the same allocation */
    uint64_t pw = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        wd[i] = (int64_t)(s->weight[i] - pw); /* two's complement wrap is exact */
        pw = s->weight[i];
    }
    m->n_weight_delta = s->n;
    m->weight_delta = wd;
    SET_COL64(m, count, s->count, s->n, CM_COUNT_ONE);
    SET_COL32(m, thread, s->thread, s->n);
    SET_COL32(m, context, s->context, s->n);
    SET_COL32(m, labels, s->labels, s->n);
    SET_COL32(m, flags, s->flags, s->n);
    SET_COL32(m, io_kind, s->io_kind, s->n);
    SET_COL32(m, fd_kind, s->fd_kind, s->n);
    SET_COL32(m, target, s->target, s->n);
    SET_COL64(m, size, s->size, s->n, 0);
    SET_COL64(m, address, s->address, s->n, 0);
    return 0;
}

/* Non-empty sample columns, then the spans (pointed to, not copied) and the incident of a
 * capture chunk. 0 or CM_ENOMEM. */
static int enc_samples(enc_t *e, const cm_chunk_t *c) {
    size_t ncols = 0;
    for (uint32_t t = 1; t <= CM_EV_MAX; t++) {
        if (c->samples[t].n == 0)
            continue;
        int rc = enc_column(e, &e->cols[ncols], t, &c->samples[t], &c->header);
        if (rc)
            return rc;
        e->cols_p[ncols] = &e->cols[ncols];
        ncols++;
    }
    e->msg.n_samples = ncols;
    e->msg.samples = e->cols_p;
    const cm_spans_t *sp = &c->spans;
    if (sp->n) {
        Fleetprof__V1__Spans *spans = &e->spans;
        SET_COL(spans, context, sp->context, sp->n);
        SET_COL(spans, name, sp->name, sp->n);
        SET_COL(spans, start_unix_ns, sp->start_unix_ns, sp->n);
        SET_COL(spans, duration_ns, sp->duration_ns, sp->n);
        SET_COL(spans, thread, sp->thread, sp->n);
        SET_COL32(spans, flags, sp->flags, sp->n);
        e->msg.spans = spans;
    }
    if (c->incident.present) {
        cm_incident_pb(&c->incident, &e->incident);
        e->msg.incident = &e->incident;
    }
    return 0;
}

/* Serializes the message and frames it into *out (malloc'd). */
static int enc_pack(const enc_t *e, uint8_t **out, size_t *out_len, char *errbuf,
                    size_t errbuf_size) {
    size_t raw_len = fleetprof__v1__chunk__get_packed_size(&e->msg);
    if (raw_len > CM_MAX_RAW_SIZE) {
        snprintf(errbuf, errbuf_size, "chunk serializes to %zu bytes (limit %u)", raw_len,
                 CM_MAX_RAW_SIZE);
        return CM_ETOOBIG;
    }
    uint8_t *raw = malloc(raw_len + 1);
    if (!raw)
        return CM_ENOMEM;
    fleetprof__v1__chunk__pack(&e->msg, raw);
    int rc = cm_frame_build(raw, raw_len, out, out_len);
    free(raw);
    return rc;
}

int cm_chunk_encode(const cm_chunk_t *c, uint8_t **out, size_t *out_len, char *errbuf,
                    size_t errbuf_size) {
    int rc = cm_chunk_validate(c, errbuf, errbuf_size);
    if (rc)
        return rc;
    enc_t e = {.msg = FLEETPROF__V1__CHUNK__INIT,
               .hdr = FLEETPROF__V1__HEADER__INIT,
               .dict = FLEETPROF__V1__DICTIONARY__INIT,
               .spans = FLEETPROF__V1__SPANS__INIT};
    e.msg.header = &e.hdr;
    e.msg.dict = &e.dict;
    if (!(rc = enc_header(&e, &c->header)) && !(rc = enc_strings(&e, &c->dict)) &&
        !(rc = enc_tables(&e, &c->dict)) && !(rc = enc_samples(&e, c)))
        rc = enc_pack(&e, out, out_len, errbuf, errbuf_size);
    if (rc == CM_ENOMEM)
        snprintf(errbuf, errbuf_size, "out of memory while encoding a chunk");
    enc_free(&e);
    return rc;
}
