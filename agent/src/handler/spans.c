/* Named spans with their real start and end: fleetprof_span_begin / fleetprof_span_end.
 *
 * A span is one request or operation on one thread. fleetprof_span_begin sets the thread's
 * span context (context.c, what samples carry) and records the name and the start; its end
 * records the end and restores the enclosing span's context. Every chunk carries the spans
 * that ended in its interval and the outermost span of every thread still active at its cut
 * (flag CM_SPF_ACTIVE, with its duration so far): a stuck request shows in every chunk until
 * it ends.
 *
 * Hot path (app code, no lock, no allocation once a name was seen):
 *   - names are interned once per process into g_names (bounded, never freed); a thread keeps
 *     a small cache hash -> id and checks the interned string, so a known name costs a hash
 *     and a compare. A new name takes the context lock once (ag_context_lock: fork-safe).
 *   - the outermost active span of a thread sits in the thread's slot of g_active, claimed
 *     once per thread by a compare-and-swap and written under a per-slot sequence count (the
 *     bg thread retries a torn read; the owner never waits).
 *   - an ended span is appended to the current half of g_done: one fetch-add claims a row,
 *     the row is written, then published by storing the half's epoch in it. The bg thread
 *     flips the half at each cut and waits (bounded) for the rows claimed before the flip.
 *   - times are stamps (stamp_now): TSC ticks once the hooks calibrated an invariant TSC over
 *     >= 2 s (an
 *     rdtsc, ~8 ns, where the vDSO's CLOCK_REALTIME costs ~22 ns: two per span), else
 *     CLOCK_REALTIME ns; the bg thread turns them into real time against a reference pair it
 *     takes at each cut (stamp_real).
 * Bounds: AG_SPANS_PER_CHUNK ended spans per chunk, AG_SPAN_DEPTH nested spans per thread,
 * AG_SPAN_THREADS threads with an active span, AG_SPAN_NAMES names: beyond them a span is not
 * recorded and DROP_SPAN_LIMIT is counted (its samples keep its context). Nothing here runs in
 * a signal handler.
 */
#include "recorder/incid.h"
#include "hooks.h"
#include "internal.h"

#include "fleetprof.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#define AG_SPANS_PER_CHUNK 16384
#define AG_SPAN_DEPTH 8
#define AG_SPAN_THREADS 1024
#define AG_SPAN_NAMES AG_INCID_NAMES /* triggers.c keeps a threshold per name */
#define AG_SPAN_NAME_MAX AG_INCID_NAME_MAX /* bytes kept of a name */
#define NAME_CACHE 16

#define TLS __thread __attribute__((tls_model("initial-exec")))

typedef struct {
    uint8_t ctx[CM_CONTEXT_SIZE];
    uint32_t name;
    pid_t tid;
    uint64_t start_ns, end_ns;
    _Atomic uint32_t epoch; /* published: the epoch of the half it was written in */
} done_t;

typedef struct {
    _Atomic int32_t owner;  /* tid of the owning thread, 0: free */
    _Atomic uint32_t seq;   /* odd while the owner writes */
    uint32_t active;
    uint32_t name;
    uint64_t start_ns;
    uint8_t ctx[CM_CONTEXT_SIZE];
} active_t;

typedef struct {
    uint64_t hash;
    char *s;
} name_t;

static done_t g_done[2][AG_SPANS_PER_CHUNK];
/* epoch << 32 | rows claimed in the epoch's half; epochs start at 1 (a row's 0: never written) */
static _Atomic uint64_t g_done_state = (uint64_t)1 << 32;
static active_t g_active[AG_SPAN_THREADS];
static _Atomic int32_t g_active_hw; /* slots ever claimed are below it */
static name_t g_names[AG_SPAN_NAMES + 1]; /* id 0: unnamed */
static _Atomic uint32_t g_nnames;

typedef struct {
    uint8_t ctx[CM_CONTEXT_SIZE]; /* the enclosing context, restored at the end */
    uint32_t name;
    uint64_t start_ns;
} frame_t;

typedef struct {
    pid_t tid;    /* cached: gettid is a system call */
    int32_t slot; /* index in g_active + 1, 0: none yet */
    uint32_t depth, over; /* spans begun and not ended; over: those beyond AG_SPAN_DEPTH */
    frame_t stack[AG_SPAN_DEPTH];
    uint32_t cache[NAME_CACHE]; /* by the name's hash */
    struct {
        const char *s;
        uint32_t id;
    } pcache[NAME_CACHE]; /* by the name's address: a literal costs a compare, no hash */
} tls_span_t;

static TLS tls_span_t t_span;
static pthread_key_t g_exit_key;
static pthread_once_t g_exit_once = PTHREAD_ONCE_INIT;

static uint64_t now_real(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ns per TSC tick, 32.32 fixed point, 0 until calibrated (hooks.c, tsc_calibrate); settled:
 * calibrated over >= 2 s */
_Atomic uint64_t ag_tsc_scale;
_Atomic int ag_tsc_settled;

/* A span's time: TSC ticks with STAMP_TSC set (the TSC calibrated over >= 2 s: the first
 * scale, over 200 ms, may be off by a few tenths of a percent), else CLOCK_REALTIME ns. */
#define STAMP_TSC ((uint64_t)1 << 63)
static uint64_t stamp_now(void) {
    if (atomic_load_explicit(&ag_tsc_settled, memory_order_relaxed))
        return ag_tsc() | STAMP_TSC;
    return now_real();
}

/* The reference pair (TSC, real ns) stamps are turned into real time against: taken by the
 * bg thread at each cut (ref_take) and first by the first span that needs it. */
static _Atomic uint64_t g_ref_tsc, g_ref_real;

static void ref_take(void) {
    uint64_t r = now_real(), t = ag_tsc();
    atomic_store_explicit(&g_ref_tsc, t, memory_order_relaxed);
    atomic_store_explicit(&g_ref_real, r, memory_order_release);
}

/* Real ns of a stamp. The TSC's scale error (calibrated over >= 200 ms, refined since) times
 * the distance to the reference: microseconds over a chunk interval. */
static uint64_t stamp_real(uint64_t st) {
    if (!(st & STAMP_TSC))
        return st;
    uint64_t scale = atomic_load_explicit(&ag_tsc_scale, memory_order_relaxed);
    if (!atomic_load_explicit(&g_ref_real, memory_order_acquire))
        ref_take();
    uint64_t rr = atomic_load_explicit(&g_ref_real, memory_order_acquire);
    uint64_t rt = atomic_load_explicit(&g_ref_tsc, memory_order_relaxed);
    int64_t d = (int64_t)((st & ~STAMP_TSC) - rt);
    int64_t ns = (int64_t)(((__int128)d * (__int128)scale) >> 32);
    return ns < 0 && (uint64_t)-ns > rr ? 0 : rr + (uint64_t)ns;
}

/* end - start in ns (0 when end is not after start). */
static uint64_t stamp_diff(uint64_t start, uint64_t end) {
    uint64_t scale = atomic_load_explicit(&ag_tsc_scale, memory_order_relaxed);
    if ((start & STAMP_TSC) && (end & STAMP_TSC) && scale)
        return end > start ? (uint64_t)(((__int128)(end - start) * scale) >> 32) : 0;
    uint64_t s = stamp_real(start), e = stamp_real(end); /* the TSC calibrated in between */
    return e > s ? e - s : 0;
}

static pid_t my_tid(void) {
    if (!t_span.tid)
        t_span.tid = (pid_t)syscall(SYS_gettid);
    return t_span.tid;
}

static void slot_exit(void *arg) {
    (void)arg;
    if (t_span.slot) {
        active_t *a = &g_active[t_span.slot - 1];
        atomic_fetch_add_explicit(&a->seq, 1, memory_order_acq_rel);
        a->active = 0;
        atomic_fetch_add_explicit(&a->seq, 1, memory_order_release);
        atomic_store_explicit(&a->owner, 0, memory_order_release);
        t_span.slot = 0;
    }
}

static void exit_key_init(void) { pthread_key_create(&g_exit_key, slot_exit); }

/* The calling thread's slot in g_active, claimed on first use. NULL when all are taken. */
static active_t *my_slot(void) {
    if (t_span.slot)
        return &g_active[t_span.slot - 1];
    int32_t tid = (int32_t)my_tid();
    for (int32_t i = 0; i < AG_SPAN_THREADS; i++) {
        int32_t free_ = 0;
        if (atomic_load_explicit(&g_active[i].owner, memory_order_relaxed) == 0 &&
            atomic_compare_exchange_strong(&g_active[i].owner, &free_, tid)) {
            t_span.slot = i + 1;
            int32_t hw = atomic_load(&g_active_hw);
            while (hw < i + 1 && !atomic_compare_exchange_weak(&g_active_hw, &hw, i + 1))
                ;
            pthread_once(&g_exit_once, exit_key_init);
            pthread_setspecific(g_exit_key, (void *)1); /* non-NULL: run slot_exit at exit */
            return &g_active[i];
        }
    }
    return NULL;
}

static int name_is(uint32_t id, uint64_t h, const char *s, size_t len) {
    const name_t *n = &g_names[id];
    return n->hash == h && !strncmp(n->s, s, len) && n->s[len] == '\0';
}

/* intern_name past the address cache: by the name's hash, then in g_names. */
static uint32_t intern_hashed(const char *s) {
    size_t len = strnlen(s, AG_SPAN_NAME_MAX);
    uint64_t h = XXH3_64bits(s, len);
    uint32_t *c = &t_span.cache[h % NAME_CACHE];
    if (*c && name_is(*c, h, s, len))
        return *c;
    uint32_t n = atomic_load_explicit(&g_nnames, memory_order_acquire), id = 0;
    for (uint32_t i = 1; i <= n && !id; i++)
        if (name_is(i, h, s, len))
            id = i;
    if (!id && !ag_unseen_child()) { /* the lock may be held by a thread not in this process */
        ag_context_lock();
        n = atomic_load_explicit(&g_nnames, memory_order_relaxed);
        for (uint32_t i = 1; i <= n && !id; i++)
            if (name_is(i, h, s, len))
                id = i;
        if (!id && n < AG_SPAN_NAMES && (g_names[n + 1].s = strndup(s, len))) {
            g_names[n + 1].hash = h;
            ag_trig_name_added(n + 1, s, len); /* its slow threshold, before it is seen */
            atomic_store_explicit(&g_nnames, n + 1, memory_order_release);
            id = n + 1;
        }
        ag_context_unlock();
    }
    if (!id)
        ag_drop_count(0, CM_DROP_SPAN_LIMIT, 1); /* the span is kept, without a name */
    return *c = id;
}

/* Interns a name (cut at AG_SPAN_NAME_MAX bytes). Returns its id, 0 for none or when full.
 * A name passed again at the same address (a literal) is found by its address and checked by
 * one compare with the interned string (what was cut must match too); else by its hash. */
static uint32_t intern_name(const char *s) {
    if (!s || !*s)
        return 0;
    uint32_t slot = (uint32_t)(((uintptr_t)s >> 3) % NAME_CACHE);
    uint32_t pid = t_span.pcache[slot].id;
    if (pid && t_span.pcache[slot].s == s && !strncmp(g_names[pid].s, s, AG_SPAN_NAME_MAX))
        return pid;
    uint32_t id = intern_hashed(s);
    t_span.pcache[slot].s = s;
    t_span.pcache[slot].id = id;
    return id;
}

/* The outermost span of the thread: published to the bg thread (seq odd while writing). A
 * sequence lock races by design (the reader retries a torn copy): not for ThreadSanitizer. */
AG_NO_TSAN static void publish_active(active_t *a, uint32_t active, const frame_t *f, const uint8_t *ctx) {
    /* the owner is seq's only writer: plain stores, no locked instruction */
    uint32_t s = atomic_load_explicit(&a->seq, memory_order_relaxed);
    atomic_store_explicit(&a->seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    a->active = active;
    if (active) {
        a->name = f->name;
        a->start_ns = f->start_ns;
        memcpy(a->ctx, ctx, CM_CONTEXT_SIZE);
    }
    atomic_store_explicit(&a->seq, s + 2, memory_order_release);
}

/* start: the time of the call (read first: the span's duration includes our own work). */
static int begin(const uint8_t trace[16], const uint8_t span[8], const char *name,
                 uint64_t start) {
    static const uint8_t zero[16];
    if (!trace || !span || !memcmp(trace, zero, 16) || !memcmp(span, zero, 8))
        return -EINVAL;
    if (!atomic_load_explicit(&ag.running, memory_order_relaxed))
        return 0;
    if (t_span.depth >= AG_SPAN_DEPTH || t_span.over) {
        t_span.over++;
        ag_drop_count(0, CM_DROP_SPAN_LIMIT, 1);
        fleetprof_span_set(trace, span);
        return 0;
    }
    frame_t *f = &t_span.stack[t_span.depth];
    ag_ctx_slot_t cur;
    ag_context_read(&cur);
    memcpy(f->ctx, cur.ctx, CM_CONTEXT_SIZE);
    f->name = intern_name(name);
    f->start_ns = start;
    fleetprof_span_set(trace, span);
    if (t_span.depth++ == 0) {
        active_t *a = my_slot();
        uint8_t ctx[CM_CONTEXT_SIZE];
        memcpy(ctx, trace, 16);
        memcpy(ctx + 16, span, 8);
        if (a)
            publish_active(a, 1, f, ctx);
        else
            ag_drop_count(0, CM_DROP_SPAN_LIMIT, 1); /* ends are still recorded */
    }
    return 0;
}

int fleetprof_span_begin_ids(const uint8_t trace_id[16], const uint8_t span_id[8],
                             const char *name) {
    return begin(trace_id, span_id, name, stamp_now());
}

int fleetprof_span_begin(const char *traceparent, const char *name) {
    uint64_t start = stamp_now();
    uint8_t trace[16], span[8];
    if (ag_parse_traceparent(traceparent, trace, span) != 0)
        return -EINVAL;
    return begin(trace, span, name, start);
}

int fleetprof_span_end(void) {
    uint64_t end = stamp_now(); /* first: the end is the call's time */
    if (!atomic_load_explicit(&ag.running, memory_order_relaxed) && t_span.depth == 0)
        return 0;
    if (t_span.over) { /* a span beyond the depth: its context stays until its parent ends */
        t_span.over--;
        return 0;
    }
    if (t_span.depth == 0)
        return -ENOENT;
    uint64_t st = atomic_fetch_add_explicit(&g_done_state, 1, memory_order_acq_rel);
    frame_t *f = &t_span.stack[--t_span.depth];
    ag_ctx_slot_t cur;
    ag_context_read(&cur);
    uint32_t idx = (uint32_t)st, epoch = (uint32_t)(st >> 32);
    if (idx < AG_SPANS_PER_CHUNK) {
        done_t *d = &g_done[epoch & 1][idx];
        memcpy(d->ctx, cur.ctx, CM_CONTEXT_SIZE);
        d->name = f->name;
        d->tid = (pid_t)my_tid();
        d->start_ns = f->start_ns;
        d->end_ns = end;
        atomic_store_explicit(&d->epoch, epoch, memory_order_release);
    } else {
        ag_drop_count(0, CM_DROP_SPAN_LIMIT, 1);
    }
    if (t_span.depth == 0 && t_span.slot)
        publish_active(&g_active[t_span.slot - 1], 0, NULL, NULL);
    if (t_span.depth == 0) /* a request ended: incident triggers (recorder/triggers.c) */
        ag_trig_span_ended(stamp_diff(f->start_ns, end), f->name);
    static const uint8_t zero[16];
    if (!memcmp(f->ctx, zero, 16))
        fleetprof_span_clear();
    else
        fleetprof_span_set(f->ctx, f->ctx + 16);
    return 0;
}

/* bg: the current half is closed; returns its epoch and the rows claimed in it. Rows claimed
 * before the flip are waited for up to 10 ms in all (a writer between its claim and its
 * publish); a row not published by then is skipped (counted span_limit). */
static uint32_t g_closed_epoch, g_closed_n;

void ag_spans_flip(void) {
    ref_take();
    uint64_t st = atomic_load_explicit(&g_done_state, memory_order_relaxed), next;
    do
        next = ((st >> 32) + 1) << 32;
    while (!atomic_compare_exchange_weak(&g_done_state, &st, next));
    g_closed_epoch = (uint32_t)(st >> 32);
    g_closed_n = (uint32_t)st < AG_SPANS_PER_CHUNK ? (uint32_t)st : AG_SPANS_PER_CHUNK;
    uint64_t deadline = ag_now_mono() + 10000000u;
    for (uint32_t i = 0; i < g_closed_n; i++) {
        const done_t *d = &g_done[g_closed_epoch & 1][i];
        while (atomic_load_explicit(&d->epoch, memory_order_acquire) != g_closed_epoch &&
               ag_now_mono() < deadline)
            sched_yield();
    }
}

/* bg: a consistent copy of a thread's slot (retried while its owner writes; *act = 0 when no
 * consistent copy was had in 100 tries). */
AG_NO_TSAN static void read_active(active_t *a, uint32_t *act, uint32_t *name, uint64_t *st,
                                   uint8_t *ctx) {
    *act = 0;
    for (int tries = 0; tries < 100; tries++) {
        uint32_t s0 = atomic_load_explicit(&a->seq, memory_order_acquire);
        if (s0 & 1) {
            sched_yield();
            continue;
        }
        *act = a->active;
        *name = a->name;
        *st = a->start_ns;
        memcpy(ctx, a->ctx, CM_CONTEXT_SIZE);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&a->seq, memory_order_relaxed) == s0)
            return;
        *act = 0;
    }
}

/* bg: adds the closed half's spans and every thread's active outermost span to the builder.
 * An ended span's times are kept inside [start, end] of the chunk (a span that ended while the
 * cut was being made may straddle it by microseconds). */
void ag_spans_emit(ag_builder_t *b, uint64_t start, uint64_t end) {
    uint32_t n = atomic_load_explicit(&g_nnames, memory_order_acquire);
    for (uint32_t i = 0; i < g_closed_n; i++) {
        const done_t *d = &g_done[g_closed_epoch & 1][i];
        if (atomic_load_explicit(&d->epoch, memory_order_acquire) != g_closed_epoch) {
            ag_drop_count(0, CM_DROP_SPAN_LIMIT, 1);
            continue;
        }
        uint64_t de = stamp_real(d->end_ns), ds = de - stamp_diff(d->start_ns, d->end_ns);
        uint64_t e = de < start ? start : de > end ? end : de;
        uint64_t s = ds > e ? e : ds;
        ag_builder_add_span(b, d->ctx, d->name && d->name <= n ? g_names[d->name].s : NULL,
                            s, e - s, d->tid, 0);
    }
    g_closed_n = 0;
    for (uint32_t i = 0; i < AG_SPAN_THREADS; i++) {
        active_t *a = &g_active[i];
        int32_t tid = atomic_load_explicit(&a->owner, memory_order_acquire);
        if (!tid)
            continue;
        uint32_t act, name;
        uint64_t st;
        uint8_t ctx[CM_CONTEXT_SIZE];
        read_active(a, &act, &name, &st, ctx);
        st = stamp_real(st);
        if (act && st <= end)
            ag_builder_add_span(b, ctx, name && name <= n ? g_names[name].s : NULL, st,
                                end - st, (pid_t)tid, CM_SPF_ACTIVE);
    }
}

/* Fork child: when it was made (a span open since before is the parent's to report). */
static uint64_t g_fork_real;

int ag_spans_pending(void) {
    if ((uint32_t)atomic_load_explicit(&g_done_state, memory_order_acquire) != 0)
        return 1;
    int32_t hw = atomic_load(&g_active_hw);
    for (int32_t i = 0; i < hw; i++) {
        uint32_t act = 0, name;
        uint64_t st;
        uint8_t ctx[CM_CONTEXT_SIZE];
        if (atomic_load_explicit(&g_active[i].owner, memory_order_acquire))
            read_active(&g_active[i], &act, &name, &st, ctx);
        if (act && stamp_real(st) >= g_fork_real)
            return 1;
    }
    return 0;
}

/* Fork child: only the forking thread survives; the others' active spans are not ours. */
void ag_spans_after_fork_child(void) {
    int32_t mine = t_span.slot;
    t_span.tid = 0;
    g_fork_real = now_real();
    /* Only the slots ever claimed: the child does not touch the pages of the rest. */
    int32_t hw = atomic_load(&g_active_hw);
    for (int32_t i = 0; i < hw; i++)
        if (i + 1 != mine) {
            atomic_store(&g_active[i].owner, 0);
            g_active[i].active = 0;
        } else {
            atomic_store(&g_active[i].owner, (int32_t)my_tid());
        }
    /* A fresh epoch in the same half, no rows claimed: the parent's rows (older epochs) are
     * never read as this epoch's, and none of the 2 MB of rows is touched here. */
    uint32_t e = (uint32_t)(atomic_load(&g_done_state) >> 32);
    atomic_store(&g_done_state, (uint64_t)(e + 2) << 32);
    g_closed_n = 0;
}

/* bg: incident triggers (recorder/triggers.c) read the outermost active spans. */
uint32_t ag_spans_active_stats(uint64_t now, uint64_t slow_ns, uint32_t *slow,
                               uint64_t *oldest_ns) {
    uint32_t n = 0;
    *slow = 0;
    *oldest_ns = 0;
    for (uint32_t i = 0; i < AG_SPAN_THREADS; i++) {
        active_t *a = &g_active[i];
        if (!atomic_load_explicit(&a->owner, memory_order_acquire))
            continue;
        uint32_t act, name;
        uint64_t st;
        uint8_t ctx[CM_CONTEXT_SIZE];
        read_active(a, &act, &name, &st, ctx);
        st = stamp_real(st);
        if (!act || st > now)
            continue;
        n++;
        *slow += now - st >= ag_trig_slow_ns(name, slow_ns);
        if (now - st > *oldest_ns)
            *oldest_ns = now - st;
    }
    return n;
}
