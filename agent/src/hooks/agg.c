/* Sub-threshold aggregates of LOCK and IO events, and the ALLOC samples a full ring cannot
 * take (hook_alloc.c, issue 19: weight = estimated bytes, size = the samples' bytes): contended lock waits and I/O calls shorter
 * than their threshold are not shipped one by one but summed per (type, io kind, fd kind,
 * stack) and shipped at each chunk as rows flagged CM_SF_AGGREGATE (weight: total ns, count:
 * events in milli-units, size: total bytes). Aggregate rows carry no thread or span context.
 * A subsampled wait (hook_lock.c's flood sampling) adds its estimate: ns / q and 1000 / q.
 * A sampled I/O call (hook_io.c: 1 in N unwound) adds N x its ns, bytes and count through
 * ag_agg_add_sub, which also marks the slot: its next row is flagged CM_SF_SUBSAMPLED too.
 *
 * Application side (lock-free, no allocation): one process-wide table of AG_AGG_SLOTS entries
 * (mmap'ed at startup; stacks up to AG_AGG_DEPTH frames). A slot is claimed once by CAS
 * (EMPTY -> FILLING -> READY, stack written in between) and then only updated with atomic
 * adds. When no slot is free within AG_AGG_PROBE probes the event is counted as
 * DROP_DICT_FULL of its type. Slots are never freed (a process has few distinct contended
 * sites); the bg thread takes the sums with atomic exchanges at each chunk.
 */
#include "hooks.h"

#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

#define AG_AGG_SLOTS 4096
#define AG_AGG_PROBE 32
#define AG_AGG_DEPTH 64

typedef struct {
    _Atomic uint32_t state; /* 0 empty, 1 filling, 2 ready */
    uint8_t type;
    uint8_t io_kind, fd_kind;
    uint16_t depth;
    uint64_t key;
    _Atomic uint64_t count, ns, bytes; /* count in milli-units (CM_COUNT_ONE = one event) */
    _Atomic uint32_t sub;              /* a sampled estimate was added since the last row */
    uintptr_t pcs[AG_AGG_DEPTH];
} agg_slot_t;

static agg_slot_t *g_agg;
/* Claimed slots, so that the bg walk and the fork reset touch only those: reading the 2.3 MiB
 * table whole maps the zero page under every untouched page, and a later claim's write then
 * costs a TLB shootdown (an IPI to each CPU running the process); the fork reset wrote every
 * slot, committing the whole table in each child. */
static _Atomic uint64_t g_claimed[AG_AGG_SLOTS / 64];

/* The first claimed slot at or after *i (*i moves past it), or NULL. */
static agg_slot_t *next_claimed(uint32_t *i) {
    while (*i < AG_AGG_SLOTS) {
        uint64_t w = atomic_load_explicit(&g_claimed[*i / 64], memory_order_acquire) >> (*i % 64);
        if (!w) {
            *i = (*i / 64 + 1) * 64;
            continue;
        }
        *i += (uint32_t)__builtin_ctzll(w);
        return &g_agg[(*i)++];
    }
    return NULL;
}

int ag_agg_any(void) {
    for (uint32_t i = 0; i < AG_AGG_SLOTS / 64; i++)
        if (atomic_load_explicit(&g_claimed[i], memory_order_relaxed))
            return 1;
    return 0;
}

int ag_agg_init(void) {
    void *m = mmap(NULL, AG_AGG_SLOTS * sizeof(agg_slot_t), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return -1;
    g_agg = m;
    return 0;
}

void ag_agg_add(cm_event_type_t type, uint32_t io_kind, uint32_t fd_kind, const uintptr_t *pcs,
                uint32_t depth, uint64_t ns, uint64_t bytes) {
    ag_agg_add_n(type, io_kind, fd_kind, pcs, depth, ns, bytes, CM_COUNT_ONE);
}

void ag_agg_add_n(cm_event_type_t type, uint32_t io_kind, uint32_t fd_kind, const uintptr_t *pcs,
                  uint32_t depth, uint64_t ns, uint64_t bytes, uint64_t count_milli) {
    ag_agg_add_sub(type, io_kind, fd_kind, pcs, depth, ns, bytes, count_milli, 0);
}

void ag_agg_add_sub(cm_event_type_t type, uint32_t io_kind, uint32_t fd_kind,
                    const uintptr_t *pcs, uint32_t depth, uint64_t ns, uint64_t bytes,
                    uint64_t count_milli, int sampled) {
    if (!g_agg || depth == 0)
        return;
    if (depth > AG_AGG_DEPTH)
        depth = AG_AGG_DEPTH;
    uint64_t key = XXH3_64bits_withSeed(pcs, depth * sizeof *pcs,
                                        (uint64_t)type << 16 | io_kind << 8 | fd_kind);
    for (uint32_t i = 0; i < AG_AGG_PROBE; i++) {
        uint32_t at = (uint32_t)(key + i) & (AG_AGG_SLOTS - 1);
        agg_slot_t *s = &g_agg[at];
        uint32_t st = atomic_load_explicit(&s->state, memory_order_acquire);
        if (st == 0) {
            if (!atomic_compare_exchange_strong(&s->state, &st, 1))
                continue;
            s->type = (uint8_t)type;
            s->io_kind = (uint8_t)io_kind;
            s->fd_kind = (uint8_t)fd_kind;
            s->depth = (uint16_t)depth;
            s->key = key;
            memcpy(s->pcs, pcs, depth * sizeof *pcs);
            atomic_store_explicit(&s->state, 2, memory_order_release);
            atomic_fetch_or_explicit(&g_claimed[at / 64], 1ull << (at % 64), memory_order_release);
            st = 2;
        }
        if (st != 2 || s->key != key || s->type != type || s->depth != depth ||
            memcmp(s->pcs, pcs, depth * sizeof *pcs) != 0)
            continue;
        atomic_fetch_add_explicit(&s->ns, ns, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->bytes, bytes, memory_order_relaxed);
        atomic_fetch_add_explicit(&s->count, count_milli, memory_order_relaxed);
        if (sampled && !atomic_load_explicit(&s->sub, memory_order_relaxed))
            atomic_store_explicit(&s->sub, 1, memory_order_relaxed);
        return;
    }
    ag_drop_count(type, CM_DROP_DICT_FULL, 1);
}

void ag_agg_bg_emit(ag_builder_t *b, uint64_t now_real) {
    if (!g_agg)
        return;
    static uintptr_t buf[(AG_REC_MAX + sizeof(uintptr_t) - 1) / sizeof(uintptr_t)];
    ag_rec_t *r = (ag_rec_t *)buf;
    agg_slot_t *s;
    for (uint32_t i = 0; (s = next_claimed(&i));) {
        uint64_t c = atomic_exchange_explicit(&s->count, 0, memory_order_relaxed);
        if (!c)
            continue;
        uint64_t ns = atomic_exchange_explicit(&s->ns, 0, memory_order_relaxed);
        uint64_t bytes = atomic_exchange_explicit(&s->bytes, 0, memory_order_relaxed);
        uint32_t sub = atomic_exchange_explicit(&s->sub, 0, memory_order_relaxed);
        memset(r, 0, sizeof *r);
        r->type = s->type;
        r->flags = CM_SF_AGGREGATE | (sub ? CM_SF_SUBSAMPLED : 0);
        r->depth = s->depth;
        r->time_ns = now_real;
        r->weight = ns;
        r->count = c;
        r->size = bytes;
        r->io_kind = s->io_kind;
        r->fd_kind = s->fd_kind;
        memcpy(r->pcs, s->pcs, s->depth * sizeof(uintptr_t));
        r->len = (uint32_t)(sizeof *r + s->depth * sizeof(uintptr_t));
        ag_builder_add(b, NULL, 0, r);
    }
}

void ag_agg_after_fork_child(void) {
    if (!g_agg)
        return;
    agg_slot_t *s;
    for (uint32_t i = 0; (s = next_claimed(&i));) { /* the parent's sums are the parent's */
        atomic_store(&s->count, 0);
        atomic_store(&s->ns, 0);
        atomic_store(&s->bytes, 0);
        atomic_store(&s->sub, 0);
    }
}
