/* Chunk codec: round trips of random and realistic chunks, and hostile input (truncation at
 * every offset, bit flips, bad magic and versions, lengths claiming gigabytes, out-of-range
 * indices, broken front coding, allocation bombs). Every failure must be the right CM_E* code
 * with a reason, never a crash (this file also runs under ASan+UBSan). */
#include "cm/buf.h"
#include "cm/chunk.h"
#include "cm/error.h"
#include "fleetprof.pb-c.h"
#include "support/chunkgen.h"
#include "support/runner.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static uint8_t *encode(const cm_chunk_t *c, size_t *len) {
    uint8_t *buf = NULL;
    char err[256] = "";
    int rc = cm_chunk_encode(c, &buf, len, err, sizeof err);
    CHECKF(rc == 0, "encode: %s: %s", cm_errname(rc), err);
    return buf;
}

static void roundtrip(const cm_chunk_t *c) {
    size_t len;
    uint8_t *buf = encode(c, &len);
    cm_chunk_t *d = NULL;
    char err[256] = "", why[256] = "";
    int rc = cm_chunk_decode(buf, len, &d, err, sizeof err);
    CHECKF(rc == 0, "decode: %s: %s", cm_errname(rc), err);
    CHECKF(ts_chunk_equal(c, d, why, sizeof why), "round trip: %s", why);
    /* decoding is deterministic and re-encoding gives the same bytes */
    size_t len2;
    uint8_t *buf2 = encode(d, &len2);
    CHECK(len2 == len && memcmp(buf, buf2, len) == 0);
    free(buf2);
    cm_chunk_free(d);
    free(buf);
}

static void test_roundtrip_realistic(void) {
    ts_gen_params_t p = ts_gen_realistic();
    for (uint64_t seed = 1; seed <= 5; seed++) {
        cm_chunk_t *c = ts_gen_chunk(&p, seed);
        roundtrip(c);
        ts_gen_free(c);
    }
}

static void test_roundtrip_random(void) {
    uint64_t r = 12345;
    int n = getenv("ROUNDTRIP_SEEDS") ? atoi(getenv("ROUNDTRIP_SEEDS")) : 400;
    for (int i = 0; i < n; i++) {
        ts_gen_params_t p = ts_gen_random_params(&r);
        cm_chunk_t *c = ts_gen_chunk(&p, (uint64_t)i);
        roundtrip(c);
        ts_gen_free(c);
    }
}

/* An interval with nothing sampled: only the zero entries of every table, no frames at all
 * (empty packed columns decode to NULL pointers: nothing may be copied from them). */
static void test_roundtrip_empty_chunk(void) {
    ts_gen_params_t p = ts_gen_realistic();
    p.samples = 0;
    p.stacks = 0;
    p.contexts = 0;
    p.types_mask = 0;
    cm_chunk_t *c = ts_gen_chunk(&p, 3);
    CHECK_EQ(c->dict.n_stacks, 1);
    CHECK_EQ(c->dict.stack_off[1], 0);
    roundtrip(c);
    ts_gen_free(c);
}

static void test_roundtrip_all_types(void) {
    ts_gen_params_t p = ts_gen_realistic();
    p.types_mask = 0x7e; /* cpu..io */
    p.label_sets = 5;
    p.samples = 2000;
    cm_chunk_t *c = ts_gen_chunk(&p, 77);
    roundtrip(c);
    /* the decoded chunk keeps every column of every type */
    size_t len;
    uint8_t *buf = encode(c, &len);
    cm_chunk_t *d;
    char err[256];
    CHECK(cm_chunk_decode(buf, len, &d, err, sizeof err) == 0);
    for (int t = 1; t <= CM_EV_MAX; t++)
        CHECK_EQ(d->samples[t].n, 2000);
    CHECK(d->samples[CM_EV_IO].target != NULL);
    CHECK(d->samples[CM_EV_LOCK].address != NULL);
    CHECK(d->samples[CM_EV_CPU].count == NULL); /* all default: not on the wire */
    cm_chunk_free(d);
    free(buf);
    ts_gen_free(c);
}

static cm_chunk_t *small_chunk(uint64_t seed) {
    ts_gen_params_t p = ts_gen_realistic();
    p.samples = 40;
    p.stacks = 12;
    p.functions = 20;
    p.min_depth = 2;
    p.max_depth = 6;
    p.types_mask = 0x7e;
    p.label_sets = 2;
    return ts_gen_chunk(&p, seed);
}

static int decode_rc(const uint8_t *buf, size_t len, char *err, size_t errlen) {
    cm_chunk_t *d = NULL;
    err[0] = '\0';
    int rc = cm_chunk_decode(buf, len, &d, err, errlen);
    if (rc == 0) {
        CHECK(d != NULL);
        cm_chunk_free(d);
    } else {
        CHECK(d == NULL);
        CHECKF(err[0] != '\0', "error %s without a reason", cm_errname(rc));
    }
    return rc;
}

static void test_truncated_every_offset(void) {
    cm_chunk_t *c = small_chunk(3);
    size_t len;
    uint8_t *buf = encode(c, &len);
    char err[256];
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1); /* exact size so ASan sees any over-read */
        memcpy(copy, buf, cut);
        int rc = decode_rc(copy, cut, err, sizeof err);
        CHECKF(rc == CM_ETRUNCATED, "cut at %zu of %zu: %s (%s)", cut, len, cm_errname(rc), err);
        free(copy);
    }
    CHECK(decode_rc(buf, len, err, sizeof err) == 0);
    free(buf);
    ts_gen_free(c);
}

static void test_bit_flips(void) {
    cm_chunk_t *c = small_chunk(4);
    size_t len;
    uint8_t *buf = encode(c, &len);
    char err[256];
    for (size_t bit = 0; bit < len * 8; bit++) {
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        int rc = decode_rc(buf, len, err, sizeof err);
        CHECKF(rc != 0, "flipped bit %zu decoded", bit);
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    free(buf);
    ts_gen_free(c);
}

/* Corrupts the serialized protobuf (not the frame) and re-frames it with a valid checksum, so
 * the protobuf and semantic checks are what stands between the input and a crash. */
static void test_payload_corruption_survives(void) {
    uint64_t r = 99;
    int ok = 0, bad = 0;
    for (int iter = 0; iter < 3000; iter++) {
        cm_chunk_t *c = small_chunk((uint64_t)iter % 13);
        size_t len;
        uint8_t *buf = encode(c, &len);
        cm_frame_info_t fi;
        char err[256];
        CHECK(cm_frame_peek(buf, len, &fi, err, sizeof err) == 0);
        uint8_t *raw = malloc(fi.raw_len);
        CHECK(cm_frame_unpack(buf, &fi, raw, err, sizeof err) == 0);
        int flips = 1 + (int)ts_randn(&r, 4);
        for (int k = 0; k < flips; k++) {
            size_t at = ts_randn(&r, fi.raw_len);
            raw[at] = ts_randn(&r, 2) ? (uint8_t)ts_rand(&r) : raw[at] ^ (uint8_t)(1u << ts_randn(&r, 8));
        }
        uint8_t *f2;
        size_t l2;
        CHECK(cm_frame_build(raw, fi.raw_len, &f2, &l2) == 0);
        if (decode_rc(f2, l2, err, sizeof err) == 0)
            ok++;
        else
            bad++;
        free(f2);
        free(raw);
        free(buf);
        ts_gen_free(c);
    }
    CHECK(bad > 0); /* most corruptions must be caught */
    printf("payload corruption: %d still valid, %d rejected\n", ok, bad);
}

static void test_bad_magic_and_versions(void) {
    cm_chunk_t *c = small_chunk(5);
    size_t len;
    uint8_t *buf = encode(c, &len);
    char err[256];
    uint8_t *b = malloc(len);
    memcpy(b, buf, len);
    b[0] = 'X';
    CHECK(decode_rc(b, len, err, sizeof err) == CM_EMAGIC);
    CHECK(strstr(err, "magic"));
    memcpy(b, buf, len);
    b[4] = 2; /* major 2 */
    CHECK(decode_rc(b, len, err, sizeof err) == CM_EVERSION);
    CHECKF(strstr(err, "2") && strstr(err, "1.x"), "%s", err);
    /* a newer minor is accepted (checksum covers the header: rebuild it) */
    cm_frame_info_t fi;
    CHECK(cm_frame_peek(buf, len, &fi, err, sizeof err) == 0);
    uint8_t *raw = malloc(fi.raw_len);
    CHECK(cm_frame_unpack(buf, &fi, raw, err, sizeof err) == 0);
    uint8_t *f2;
    size_t l2;
    CHECK(cm_frame_build(raw, fi.raw_len, &f2, &l2) == 0);
    f2[5] = 7;
    CHECK(decode_rc(f2, l2, err, sizeof err) == CM_ECHECKSUM); /* header is checksummed */
    free(f2);
    free(raw);
    free(b);
    free(buf);
    ts_gen_free(c);
    /* empty input and a header-only frame */
    CHECK(decode_rc(NULL, 0, err, sizeof err) == CM_ETRUNCATED);
    uint8_t *empty;
    size_t el;
    CHECK(cm_frame_build((const uint8_t *)"", 0, &empty, &el) == 0);
    CHECK(decode_rc(empty, el, err, sizeof err) == CM_EFORMAT);
    CHECKF(strstr(err, "header"), "%s", err);
    free(empty);
}

static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void test_lengths_claiming_gigabytes(void) {
    cm_chunk_t *c = small_chunk(6);
    size_t len;
    uint8_t *buf = encode(c, &len);
    char err[256];
    put_le32(buf + 8, 0xFFFFFFF0u); /* raw length 4 GiB */
    CHECK(decode_rc(buf, len, err, sizeof err) == CM_ETOOBIG);
    put_le32(buf + 8, CM_MAX_RAW_SIZE);
    put_le32(buf + 12, 0x7FFFFFFFu); /* payload 2 GiB */
    int rc = decode_rc(buf, len, err, sizeof err);
    CHECKF(rc == CM_EFORMAT || rc == CM_ETRUNCATED, "%s", cm_errname(rc));
    free(buf);
    ts_gen_free(c);
}

/* Serializes a chunk, lets `mutate` edit the protobuf message, re-serializes and re-frames. */
typedef void (*mutator_t)(Fleetprof__V1__Chunk *m);
static int decode_mutated(uint64_t seed, mutator_t mutate, char *err, size_t errlen) {
    cm_chunk_t *c = small_chunk(seed);
    size_t len;
    uint8_t *buf = encode(c, &len);
    cm_frame_info_t fi;
    CHECK(cm_frame_peek(buf, len, &fi, err, errlen) == 0);
    uint8_t *raw = malloc(fi.raw_len);
    CHECK(cm_frame_unpack(buf, &fi, raw, err, errlen) == 0);
    Fleetprof__V1__Chunk *m = fleetprof__v1__chunk__unpack(NULL, fi.raw_len, raw);
    CHECK(m != NULL);
    mutate(m);
    size_t n2 = fleetprof__v1__chunk__get_packed_size(m);
    uint8_t *raw2 = malloc(n2 + 1);
    fleetprof__v1__chunk__pack(m, raw2);
    uint8_t *f2;
    size_t l2;
    CHECK(cm_frame_build(raw2, n2, &f2, &l2) == 0);
    int rc = decode_rc(f2, l2, err, errlen);
    free(f2);
    free(raw2);
    fleetprof__v1__chunk__free_unpacked(m, NULL);
    free(raw);
    free(buf);
    ts_gen_free(c);
    return rc;
}

static Fleetprof__V1__Samples *col(Fleetprof__V1__Chunk *m, int type) {
    for (size_t i = 0; i < m->n_samples; i++)
        if ((int)m->samples[i]->type == type)
            return m->samples[i];
    abort();
}
static void mut_stack_oob(Fleetprof__V1__Chunk *m) { col(m, CM_EV_CPU)->stack[3] = 13; }
static void mut_location_oob(Fleetprof__V1__Chunk *m) {
    m->dict->stack_location[0] = (uint32_t)m->dict->n_location_mapping;
}
static void mut_function_oob(Fleetprof__V1__Chunk *m) { m->dict->location_function[1] = 1u << 30; }
static void mut_string_oob(Fleetprof__V1__Chunk *m) { m->dict->function_name[1] = 1000000; }
static void mut_thread_oob(Fleetprof__V1__Chunk *m) { col(m, CM_EV_WALL)->thread[0] = 500; }
static void mut_context_oob(Fleetprof__V1__Chunk *m) { col(m, CM_EV_LOCK)->context[1] = 9999; }
static void mut_span_ctx_zero(Fleetprof__V1__Chunk *m) { m->spans->context[1] = 0; }
static void mut_span_name_oob(Fleetprof__V1__Chunk *m) { m->spans->name[0] = 99999; }
static void mut_span_outside(Fleetprof__V1__Chunk *m) {
    m->spans->start_unix_ns[0] = m->header->end_unix_ns + 1;
}
static void mut_span_short(Fleetprof__V1__Chunk *m) { m->spans->n_duration_ns--; }
static void mut_target_oob(Fleetprof__V1__Chunk *m) { col(m, CM_EV_IO)->target[0] = 9999; }
static void mut_base_forward(Fleetprof__V1__Chunk *m) {
    m->dict->stack_base[2] = 5;
    m->dict->stack_shared[2] = 1;
}
static void mut_shared_too_long(Fleetprof__V1__Chunk *m) {
    m->dict->stack_base[3] = 1;
    m->dict->stack_shared[3] = 400;
}
static void mut_time_outside(Fleetprof__V1__Chunk *m) {
    col(m, CM_EV_CPU)->time_delta[5] = 1000000000;
}
static void mut_time_negative(Fleetprof__V1__Chunk *m) { col(m, CM_EV_CPU)->time_delta[0] = -1; }
static void mut_string_lens(Fleetprof__V1__Chunk *m) { m->dict->string_len[1] += 1; }
static void mut_ctx_size(Fleetprof__V1__Chunk *m) { m->dict->context_ids.len -= 1; }
static void mut_label_lens(Fleetprof__V1__Chunk *m) { m->dict->label_set_len[1] += 1; }
static void mut_weight_short(Fleetprof__V1__Chunk *m) { col(m, CM_EV_CPU)->n_weight_delta -= 1; }
static void mut_opt_short(Fleetprof__V1__Chunk *m) {
    Fleetprof__V1__Samples *s = col(m, CM_EV_ALLOC);
    s->n_size = s->n_size / 2;
}
static void mut_dup_type(Fleetprof__V1__Chunk *m) { m->samples[1]->type = m->samples[0]->type; }
static void mut_new_type(Fleetprof__V1__Chunk *m) { m->samples[1]->type = 42; }
static void mut_no_type(Fleetprof__V1__Chunk *m) { m->samples[1]->type = 0; }
static void mut_chunk_id(Fleetprof__V1__Chunk *m) { m->header->chunk_id.len = 8; }
static void mut_no_service(Fleetprof__V1__Chunk *m) { m->header->service[0] = 0; }
static void mut_time_unit(Fleetprof__V1__Chunk *m) { m->header->time_unit_ns = 0; }
static void mut_no_zero_string(Fleetprof__V1__Chunk *m) {
    m->dict->string_len[0] = 1;
    m->dict->string_len[1] -= 1;
}
static void mut_stack_too_deep(Fleetprof__V1__Chunk *m) {
    m->dict->stack_suffix_len[1] = CM_MAX_STACK_DEPTH + 1;
}
static void mut_huge_label_set(Fleetprof__V1__Chunk *m) { m->dict->label_set_len[1] = 1u << 31; }

static void test_out_of_range_and_malformed(void) {
    struct {
        const char *name;
        mutator_t fn;
        int want;
        const char *word; /* the reason must name what was wrong */
    } cases[] = {
        {"sample stack", mut_stack_oob, CM_ERANGE, "stack"},
        {"stack location", mut_location_oob, CM_ERANGE, "locations"},
        {"location function", mut_function_oob, CM_ERANGE, "function"},
        {"function name", mut_string_oob, CM_ERANGE, "strings"},
        {"sample thread", mut_thread_oob, CM_ERANGE, "thread"},
        {"sample context", mut_context_oob, CM_ERANGE, "context"},
        {"io target", mut_target_oob, CM_ERANGE, "target"},
        {"span context 0", mut_span_ctx_zero, CM_ERANGE, "spans.context"},
        {"span name", mut_span_name_oob, CM_ERANGE, "name"},
        {"span after the interval", mut_span_outside, CM_ERANGE, "interval"},
        {"span column short", mut_span_short, CM_EFORMAT, "span columns"},
        {"front coding forward base", mut_base_forward, CM_EFORMAT, "stack 2"},
        {"front coding shared too long", mut_shared_too_long, CM_EFORMAT, "stack 3"},
        {"time after end", mut_time_outside, CM_ERANGE, "interval"},
        {"time before start", mut_time_negative, CM_ERANGE, "interval"},
        {"string lengths", mut_string_lens, CM_EFORMAT, "string"},
        {"context size", mut_ctx_size, CM_EFORMAT, "context"},
        {"label lengths", mut_label_lens, CM_EFORMAT, "label"},
        {"weight column short", mut_weight_short, CM_EFORMAT, "weights"},
        {"optional column short", mut_opt_short, CM_EFORMAT, "optional"},
        {"duplicate type", mut_dup_type, CM_EFORMAT, "two"},
        {"no type", mut_no_type, CM_EFORMAT, "type"},
        {"chunk id", mut_chunk_id, CM_EFORMAT, "chunk id"},
        {"empty service", mut_no_service, CM_EFORMAT, "service"},
        {"time unit", mut_time_unit, CM_EFORMAT, "time_unit"},
        {"string 0 not empty", mut_no_zero_string, CM_EFORMAT, "string 0"},
        {"stack too deep", mut_stack_too_deep, CM_EFORMAT, "stack 1"},
        {"label set claims 2^31", mut_huge_label_set, CM_ETOOBIG, "label set"},
    };
    char err[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = decode_mutated(8, cases[i].fn, err, sizeof err);
        CHECKF(rc == cases[i].want, "%s: got %s (%s), want %s", cases[i].name, cm_errname(rc),
               err, cm_errname(cases[i].want));
        CHECKF(strstr(err, cases[i].word), "%s: reason '%s' does not mention '%s'", cases[i].name,
               err, cases[i].word);
    }
    /* a column of an event type from a newer minor is skipped, the rest decodes */
    CHECK(decode_mutated(8, mut_new_type, err, sizeof err) == 0);
}

static void test_newer_minor_skips_unknown_column(void) {
    cm_chunk_t *c = small_chunk(9);
    size_t len;
    uint8_t *buf = encode(c, &len);
    cm_frame_info_t fi;
    char err[256];
    CHECK(cm_frame_peek(buf, len, &fi, err, sizeof err) == 0);
    uint8_t *raw = malloc(fi.raw_len);
    CHECK(cm_frame_unpack(buf, &fi, raw, err, sizeof err) == 0);
    Fleetprof__V1__Chunk *m = fleetprof__v1__chunk__unpack(NULL, fi.raw_len, raw);
    m->samples[0]->type = 9; /* a type this decoder does not know */
    size_t n2 = fleetprof__v1__chunk__get_packed_size(m);
    uint8_t *raw2 = malloc(n2);
    fleetprof__v1__chunk__pack(m, raw2);
    /* plus an unknown field (number 99, varint 5) appended to the top-level message */
    raw2 = realloc(raw2, n2 + 3);
    raw2[n2] = (uint8_t)(((99 << 3) & 0x7f) | 0x80);
    raw2[n2 + 1] = (uint8_t)((99 << 3) >> 7);
    raw2[n2 + 2] = 5;
    uint8_t *f2;
    size_t l2;
    CHECK(cm_frame_build(raw2, n2 + 3, &f2, &l2) == 0);
    /* written by a newer minor (3): set the byte and recompute the frame checksum */
    f2[5] = 3;
    uint64_t sum = XXH3_64bits_withSeed(f2 + CM_FRAME_HEADER_SIZE, l2 - CM_FRAME_HEADER_SIZE,
                                        XXH3_64bits(f2, 16));
    for (int i = 0; i < 8; i++)
        f2[16 + i] = (uint8_t)(sum >> (8 * i));
    cm_chunk_t *d = NULL;
    int rc = cm_chunk_decode(f2, l2, &d, err, sizeof err);
    CHECKF(rc == 0, "%s: %s", cm_errname(rc), err);
    CHECK_EQ(d->header.format_minor, 3);
    CHECK_EQ(d->skipped_columns, 1);
    CHECK_EQ(d->samples[CM_EV_CPU].n, 0);
    CHECK_EQ(d->samples[CM_EV_WALL].n, 40);
    CHECKF(d->spans.n > 0 && d->spans.n == c->spans.n, "spans: %u of %u", d->spans.n,
           c->spans.n); /* minor 2's spans survive a newer minor's unknown field */
    cm_chunk_free(d);
    free(f2);
    free(raw2);
    fleetprof__v1__chunk__free_unpacked(m, NULL);
    free(raw);
    free(buf);
    ts_gen_free(c);
}

/* One million empty Mapping messages: 2 MB on the wire, ~80 MB as protobuf-c structs. The
 * budgeted allocator must refuse it instead of allocating. */
static void test_allocation_bomb(void) {
    size_t n = 1000000;
    uint8_t *raw = malloc(2 * n + 16);
    size_t pos = 0;
    raw[pos++] = (2 << 3) | 2; /* field 2 (dict), length-delimited */
    size_t inner = 2 * n;
    do { /* varint length */
        raw[pos++] = (uint8_t)((inner & 0x7f) | (inner > 0x7f ? 0x80 : 0));
        inner >>= 7;
    } while (inner);
    for (size_t i = 0; i < n; i++) {
        raw[pos++] = (3 << 3) | 2; /* dict.mappings */
        raw[pos++] = 0;
    }
    uint8_t *f;
    size_t fl;
    CHECK(cm_frame_build(raw, pos, &f, &fl) == 0);
    char err[256];
    int rc = decode_rc(f, fl, err, sizeof err);
    CHECKF(rc == CM_ENOMEM || rc == CM_ETOOBIG, "%s: %s", cm_errname(rc), err);
    free(f);
    free(raw);
}

static void test_encoder_refuses_invalid(void) {
    cm_chunk_t *c = small_chunk(10);
    c->samples[CM_EV_CPU].stack[0] = c->dict.n_stacks; /* out of range */
    uint8_t *buf = NULL;
    size_t len = 0;
    char err[256] = "";
    CHECK(cm_chunk_encode(c, &buf, &len, err, sizeof err) == CM_ERANGE);
    CHECK(buf == NULL && strstr(err, "samples[cpu].stack[0]"));
    ts_gen_free(c);
}

/* Minor 3: an incident added to a framed chunk (the flight recorder's path) decodes with the
 * chunk's samples unchanged and every incident field; an inconsistent incident is refused. */
static void test_incident_added_to_frame(void) {
    cm_chunk_t *c = small_chunk(10);
    size_t len;
    uint8_t *buf = encode(c, &len);
    cm_incident_t inc = {0};
    memset(inc.id, 0xab, sizeof inc.id);
    inc.trigger = (cm_str_t){"overload", 8};
    inc.threshold_milli = 250;
    inc.value_milli = 731;
    inc.trigger_unix_ns = c->header.end_unix_ns;
    inc.part = 2;
    inc.parts = 5;
    inc.capture_start_unix_ns = c->header.start_unix_ns;
    inc.capture_end_unix_ns = c->header.end_unix_ns + 1000;
    uint8_t *f = NULL;
    size_t fl = 0;
    char err[256] = "", why[256] = "";
    int rc = cm_frame_add_incident(buf, len, &inc, &f, &fl, err, sizeof err);
    CHECKF(rc == 0, "%s: %s", cm_errname(rc), err);
    cm_chunk_t *d = NULL;
    rc = cm_chunk_decode(f, fl, &d, err, sizeof err);
    CHECKF(rc == 0, "%s: %s", cm_errname(rc), err);
    CHECKF(ts_chunk_equal(c, d, why, sizeof why), "samples changed: %s", why);
    CHECK(d->incident.present && !memcmp(d->incident.id, inc.id, sizeof inc.id));
    CHECK(strcmp(d->incident.trigger.ptr, "overload") == 0);
    CHECK_EQ(d->incident.threshold_milli, 250);
    CHECK_EQ(d->incident.value_milli, 731);
    CHECK_EQ(d->incident.part, 2);
    CHECK_EQ(d->incident.parts, 5);
    CHECK_EQ(d->incident.capture_end_unix_ns, inc.capture_end_unix_ns);
    CHECK_EQ(d->header.format_minor, CM_FORMAT_MINOR);
    /* the encoder writes the same field from the in-memory chunk */
    d->incident.part = 4;
    size_t l2;
    uint8_t *b2 = encode(d, &l2);
    cm_chunk_t *d2 = NULL;
    CHECK(cm_chunk_decode(b2, l2, &d2, err, sizeof err) == 0 && d2->incident.part == 4);
    cm_chunk_free(d2);
    free(b2);
    cm_chunk_free(d);
    free(f);
    /* an ordinary chunk has none */
    CHECK(cm_chunk_decode(buf, len, &d, err, sizeof err) == 0 && !d->incident.present);
    cm_chunk_free(d);
    inc.part = 5; /* not below parts */
    CHECK(cm_frame_add_incident(buf, len, &inc, &f, &fl, err, sizeof err) == 0);
    CHECK_EQ(cm_chunk_decode(f, fl, &d, err, sizeof err), CM_EFORMAT);
    CHECKF(strstr(err, "incident part 5 of 5"), "%s", err);
    free(f);
    free(buf);
    ts_gen_free(c);
}

static void test_error_strings(void) {
    CHECK(strcmp(cm_errname(CM_EFORMAT), "EFORMAT") == 0);
    CHECK(strstr(cm_strerror(CM_EVERSION), "version"));
    CHECK(strcmp(cm_errname(-2), "ENOENT") == 0);
    CHECK(strcmp(cm_event_name(CM_EV_LOCK), "lock") == 0);
    cm_event_type_t t;
    CHECK(cm_event_parse("inuse", &t) == 0 && t == CM_EV_INUSE);
    CHECK(cm_event_parse("heap", &t) == CM_EINVAL);
}

/* cm_buf (common): bytes and text appended across its growth steps come back in order, the
 * text NUL-terminated and not counted; free empties it. */
static void test_buf_grows(void) {
    cm_buf_t b = {0};
    unsigned char want[20000];
    for (size_t i = 0; i < sizeof want; i++)
        want[i] = (unsigned char)(i * 7 + i / 256);
    for (size_t o = 0; o < sizeof want; o += 333)
        cm_buf_put(&b, want + o, o + 333 <= sizeof want ? 333 : sizeof want - o);
    CHECK(!b.fail && b.n == sizeof want && b.cap >= b.n);
    CHECK(memcmp(b.p, want, sizeof want) == 0);
    cm_buf_free(&b);
    CHECK(!b.p && !b.n && !b.cap);
    char big[10000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    cm_buf_printf(&b, "%s=%d;", "a", 1);
    cm_buf_printf(&b, "%s|", big); /* past the first 8 KiB at once */
    cm_buf_printf(&b, "%llu", 18446744073709551615ull);
    CHECK(!b.fail && b.n == 4 + sizeof big + 20);
    CHECK(strncmp(b.p, "a=1;xxx", 7) == 0 && b.p[4 + sizeof big - 1] == '|');
    CHECK(strcmp(b.p + 4 + sizeof big, "18446744073709551615") == 0);
    CHECK(strlen(b.p) == b.n);
    cm_buf_free(&b);
}

static const tr_test_t tests[] = {
    {"roundtrip_realistic", test_roundtrip_realistic},
    {"roundtrip_random", test_roundtrip_random},
    {"roundtrip_all_types", test_roundtrip_all_types},
    {"roundtrip_empty_chunk", test_roundtrip_empty_chunk},
    {"truncated_every_offset", test_truncated_every_offset},
    {"bit_flips", test_bit_flips},
    {"payload_corruption_survives", test_payload_corruption_survives},
    {"bad_magic_and_versions", test_bad_magic_and_versions},
    {"lengths_claiming_gigabytes", test_lengths_claiming_gigabytes},
    {"out_of_range_and_malformed", test_out_of_range_and_malformed},
    {"newer_minor_skips_unknown_column", test_newer_minor_skips_unknown_column},
    {"allocation_bomb", test_allocation_bomb},
    {"encoder_refuses_invalid", test_encoder_refuses_invalid},
    {"incident_added_to_frame", test_incident_added_to_frame},
    {"error_strings", test_error_strings},
    {"buf_grows", test_buf_grows},
    {0, 0},
};
TR_MAIN(tests)
