/* Per-thread span context and labels: the public fleetprof_span_* / fleetprof_label_* API.
 *
 * Torn reads are impossible by construction: the context lives in a thread-local double
 * buffer. The owning thread (the only writer) fills the inactive copy, then flips the index
 * with a single store behind a signal fence. The signal handler runs on that same thread, so
 * it interrupts the writer between two instructions: it reads the copy the index names, which
 * the writer never writes while it is named. No retry loop is needed (a seqlock would need
 * one, and a handler cannot wait for the thread it interrupted).
 *
 * Labels: a thread holds up to FLEETPROF_LABELS_MAX (key, value) pairs. The set is interned
 * (app context, under a mutex) into a global, never-freed table of at most AG_LABEL_SETS
 * sets, so the handler copies one integer. Beyond the bound a sample carries no labels and
 * DROP_DICT_FULL is counted. The bg thread reads the table lock-free (sets are published with
 * a release store and never change).
 *
 * TLS uses the initial-exec model: it never allocates on first access (safe in a handler),
 * and our few bytes fit in glibc's static TLS surplus even when the library is dlopen'ed.
 */
#include "record.h"
#include "context.h"
#include "agent.h"

#include "fleetprof.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <xxhash.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define AG_LABEL_SETS 4096

#define TLS __thread __attribute__((tls_model("initial-exec")))

typedef struct {
    ag_ctx_slot_t buf[2];
    volatile sig_atomic_t idx;
    /* app-only: the thread's labels (owned strings), in insertion order */
    uint8_t nlabels;
    char *keys[FLEETPROF_LABELS_MAX], *vals[FLEETPROF_LABELS_MAX];
} tls_ctx_t;

static TLS tls_ctx_t t_ctx;

typedef struct {
    uint64_t hash;
    uint32_t n;
    const char *kv[2 * FLEETPROF_LABELS_MAX];
} lset_t;

static lset_t *g_sets[AG_LABEL_SETS + 1]; /* id -> set; id 0 unused */
static pthread_key_t g_exit_key;
static pthread_once_t g_exit_once = PTHREAD_ONCE_INIT;

/* Thread exit: frees the thread's label strings (the interned sets stay). */
static void labels_exit(void *arg) {
    (void)arg;
    for (uint32_t i = 0; i < t_ctx.nlabels; i++) {
        free(t_ctx.keys[i]);
        free(t_ctx.vals[i]);
    }
    t_ctx.nlabels = 0;
}

static void exit_key_init(void) { pthread_key_create(&g_exit_key, labels_exit); }
static _Atomic uint32_t g_nsets;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

AG_NO_TSAN void ag_context_read(ag_ctx_slot_t *out) {
    sig_atomic_t i = t_ctx.idx;
    atomic_signal_fence(memory_order_acquire);
    const ag_ctx_slot_t *src = &t_ctx.buf[i & 1];
    for (uint32_t k = 0; k < CM_CONTEXT_SIZE; k++) /* no memcpy: a sanitizer may intercept it */
        out->ctx[k] = src->ctx[k];
    out->labels = src->labels;
}

uintptr_t ag_context_addr(void) { return (uintptr_t)&t_ctx; }

size_t ag_context_copy_size(void) { return offsetof(tls_ctx_t, nlabels); }

void ag_context_pick(const void *copy, ag_ctx_slot_t *out) {
    const tls_ctx_t *c = copy;
    *out = c->buf[c->idx & 1];
}

static void publish(const uint8_t *ctx, uint32_t labels) {
    sig_atomic_t next = !t_ctx.idx;
    memcpy(t_ctx.buf[next].ctx, ctx, CM_CONTEXT_SIZE);
    t_ctx.buf[next].labels = labels;
    atomic_signal_fence(memory_order_release);
    t_ctx.idx = next;
}

void fleetprof_span_set(const uint8_t trace_id[16], const uint8_t span_id[8]) {
    uint8_t ctx[CM_CONTEXT_SIZE] = {0};
    static const uint8_t zero[16];
    if (trace_id && span_id && memcmp(trace_id, zero, 16) != 0) {
        memcpy(ctx, trace_id, 16);
        memcpy(ctx + 16, span_id, 8);
    }
    publish(ctx, t_ctx.buf[t_ctx.idx & 1].labels);
}

/* Units of work counted by the application since the last chunk (fleetprof_work_done). */
static _Atomic uint64_t g_work_units;

void fleetprof_work_done(uint64_t units) {
    atomic_fetch_add_explicit(&g_work_units, units, memory_order_relaxed);
}

uint64_t ag_work_take(void) {
    return atomic_exchange_explicit(&g_work_units, 0, memory_order_relaxed);
}

void fleetprof_span_clear(void) {
    static const uint8_t zero[CM_CONTEXT_SIZE];
    publish(zero, t_ctx.buf[t_ctx.idx & 1].labels);
}

/* Hex digit values by byte; 0xf0 marks a byte that is not a hex digit (tested once per
 * string: the parse has no branch per character). */
#define HX(c)                                                                                      \
    ((c) >= '0' && (c) <= '9'   ? (c) - '0'                                                        \
     : (c) >= 'a' && (c) <= 'f' ? (c) - 'a' + 10                                                   \
     : (c) >= 'A' && (c) <= 'F' ? (c) - 'A' + 10                                                   \
                                : 0xf0)
#define HX4(c) HX(c), HX((c) + 1), HX((c) + 2), HX((c) + 3)
#define HX16(c) HX4(c), HX4((c) + 4), HX4((c) + 8), HX4((c) + 12)
#define HX64(c) HX16(c), HX16((c) + 16), HX16((c) + 32), HX16((c) + 48)
static const uint8_t g_hex[256] = {HX64(0), HX64(64), HX64(128), HX64(192)};

/* Parses 2n hex digits of s (all readable) into out. Returns 0, or -1 if one is not a digit. */
static int parse_hex(const char *s, uint8_t *out, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t hi = g_hex[u[2 * i]], lo = g_hex[u[2 * i + 1]];
        bad |= hi | lo;
        out[i] = (uint8_t)(hi << 4 | (lo & 0x0f));
    }
    return bad & 0xf0 ? -1 : 0;
}

#if defined(__SSE2__)
/* parse_hex for 16 digits (8 bytes) with SSE2: every digit's value and validity at once
 * (~3 ns, where the table costs ~1 ns a digit). */
static int parse_hex16(const char *s, uint8_t out[8]) {
    __m128i v = _mm_loadu_si128((const __m128i *)(const void *)s);
    __m128i lc = _mm_or_si128(v, _mm_set1_epi8(0x20)); /* 'A'-'F' -> 'a'-'f'; digits stay */
    /* signed compares: bytes >= 0x80 are negative, never in a range */
    __m128i dig = _mm_and_si128(_mm_cmpgt_epi8(v, _mm_set1_epi8('0' - 1)),
                                _mm_cmpgt_epi8(_mm_set1_epi8('9' + 1), v));
    __m128i alp = _mm_and_si128(_mm_cmpgt_epi8(lc, _mm_set1_epi8('a' - 1)),
                                _mm_cmpgt_epi8(_mm_set1_epi8('f' + 1), lc));
    if (_mm_movemask_epi8(_mm_or_si128(dig, alp)) != 0xffff)
        return -1;
    __m128i val = _mm_or_si128(_mm_and_si128(dig, _mm_sub_epi8(v, _mm_set1_epi8('0'))),
                               _mm_andnot_si128(dig, _mm_sub_epi8(lc, _mm_set1_epi8('a' - 10))));
    /* a 16-bit lane holds digit 2i (low byte) and 2i+1 (high byte): (d0 << 4) | d1 */
    __m128i b = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(val, _mm_set1_epi16(0x00ff)), 4),
                             _mm_srli_epi16(val, 8));
    _mm_storel_epi64((__m128i *)(void *)out, _mm_packus_epi16(b, b));
    return 0;
}
#else
static int parse_hex16(const char *s, uint8_t out[8]) { return parse_hex(s, out, 8); }
#endif

int ag_parse_traceparent(const char *tp, uint8_t trace[16], uint8_t span[8]) {
    /* 00-<32 hex>-<16 hex>-<2 hex>: 55 characters. Version ff is invalid; future versions
     * may append fields after the flags, separated by '-'. */
    uint8_t ver, flags;
    static const uint8_t zero[16];
    if (!tp || strnlen(tp, 56) < 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' ||
        (tp[55] != '\0' && tp[55] != '-'))
        return -EINVAL;
    if (parse_hex(tp, &ver, 1) || ver == 0xff || (ver == 0 && tp[55] != '\0') ||
        parse_hex16(tp + 3, trace) || parse_hex16(tp + 19, trace + 8) ||
        parse_hex16(tp + 36, span) ||
        parse_hex(tp + 53, &flags, 1))
        return -EINVAL;
    if (!memcmp(trace, zero, 16) || !memcmp(span, zero, 8))
        return -EINVAL;
    return 0;
}

int fleetprof_span_set_traceparent(const char *tp) {
    uint8_t trace[16], span[8];
    if (ag_parse_traceparent(tp, trace, span) != 0)
        return -EINVAL;
    fleetprof_span_set(trace, span);
    return 0;
}

/* Interns the thread's current label set. Returns its id, 0 for none or when full. */
static uint32_t intern_current(void) {
    if (t_ctx.nlabels == 0)
        return 0;
    /* Canonical order: sorted by key, so {a,b} and {b,a} are one set. */
    const char *kv[2 * FLEETPROF_LABELS_MAX];
    uint32_t n = t_ctx.nlabels;
    for (uint32_t i = 0; i < n; i++) {
        kv[2 * i] = t_ctx.keys[i];
        kv[2 * i + 1] = t_ctx.vals[i];
    }
    for (uint32_t i = 1; i < n; i++)
        for (uint32_t j = i; j > 0 && strcmp(kv[2 * j - 2], kv[2 * j]) > 0; j--) {
            const char *k = kv[2 * j - 2], *v = kv[2 * j - 1];
            kv[2 * j - 2] = kv[2 * j];
            kv[2 * j - 1] = kv[2 * j + 1];
            kv[2 * j] = k;
            kv[2 * j + 1] = v;
        }
    char flat[2 * FLEETPROF_LABELS_MAX * (FLEETPROF_LABEL_VALUE_MAX + 1)];
    size_t fl = 0;
    for (uint32_t i = 0; i < 2 * n; i++) {
        size_t l = strlen(kv[i]) + 1;
        memcpy(flat + fl, kv[i], l);
        fl += l;
    }
    uint64_t h = XXH3_64bits(flat, fl);

    uint32_t id = 0;
    if (ag_unseen_child()) /* g_lock may be held by a thread that is not in this process */
        return 0;
    pthread_mutex_lock(&g_lock);
    uint32_t nsets = atomic_load_explicit(&g_nsets, memory_order_relaxed);
    for (uint32_t i = 1; i <= nsets && !id; i++) {
        lset_t *s = g_sets[i];
        if (s->hash != h || s->n != n)
            continue;
        uint32_t k = 0;
        while (k < 2 * n && !strcmp(s->kv[k], kv[k]))
            k++;
        if (k == 2 * n)
            id = i;
    }
    if (!id && nsets < AG_LABEL_SETS) {
        lset_t *s = calloc(1, sizeof *s);
        int ok = s != NULL;
        for (uint32_t i = 0; ok && i < 2 * n; i++)
            ok = (s->kv[i] = strdup(kv[i])) != NULL;
        if (ok) {
            s->hash = h;
            s->n = n;
            g_sets[nsets + 1] = s;
            atomic_store_explicit(&g_nsets, nsets + 1, memory_order_release);
            id = nsets + 1;
        } /* on ENOMEM the few bytes already duplicated are leaked: labels are dropped */
    }
    pthread_mutex_unlock(&g_lock);
    if (!id)
        ag_drop_count(0, CM_DROP_DICT_FULL, 1);
    return id;
}

int fleetprof_label_set(const char *key, const char *value) {
    if (!key || !*key || !value || strlen(key) > FLEETPROF_LABEL_KEY_MAX ||
        strlen(value) > FLEETPROF_LABEL_VALUE_MAX)
        return -EINVAL;
    uint32_t i = 0;
    while (i < t_ctx.nlabels && strcmp(t_ctx.keys[i], key))
        i++;
    if (i == FLEETPROF_LABELS_MAX)
        return -ENOSPC;
    char *v = strdup(value);
    if (!v)
        return -ENOMEM;
    if (i == t_ctx.nlabels) {
        pthread_once(&g_exit_once, exit_key_init);
        pthread_setspecific(g_exit_key, (void *)1); /* non-NULL: run labels_exit at exit */
        if (!(t_ctx.keys[i] = strdup(key))) {
            free(v);
            return -ENOMEM;
        }
        t_ctx.nlabels++;
    } else {
        free(t_ctx.vals[i]);
    }
    t_ctx.vals[i] = v;
    publish(t_ctx.buf[t_ctx.idx & 1].ctx, intern_current());
    return 0;
}

int fleetprof_label_clear(const char *key) {
    if (!key)
        return -EINVAL;
    uint32_t i = 0;
    while (i < t_ctx.nlabels && strcmp(t_ctx.keys[i], key))
        i++;
    if (i == t_ctx.nlabels)
        return -ENOENT;
    free(t_ctx.keys[i]);
    free(t_ctx.vals[i]);
    t_ctx.nlabels--;
    t_ctx.keys[i] = t_ctx.keys[t_ctx.nlabels];
    t_ctx.vals[i] = t_ctx.vals[t_ctx.nlabels];
    publish(t_ctx.buf[t_ctx.idx & 1].ctx, intern_current());
    return 0;
}

uint32_t ag_context_labels(uint32_t id, const char *kv[2 * 4]) {
    if (id == 0 || id > atomic_load_explicit(&g_nsets, memory_order_acquire))
        return 0;
    const lset_t *s = g_sets[id];
    for (uint32_t i = 0; i < 2 * s->n; i++)
        kv[i] = s->kv[i];
    return s->n;
}

void ag_context_lock(void) { pthread_mutex_lock(&g_lock); }
void ag_context_unlock(void) { pthread_mutex_unlock(&g_lock); }
void ag_context_after_fork_child(void) {
    pthread_mutex_init(&g_lock, NULL);
    atomic_store(&g_work_units, 0); /* the parent's units are the parent's */
}
