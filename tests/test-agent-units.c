/* Agent mechanisms in-process, linked from fp_agent_core: the record ring (wrap with a skip
 * record, a full ring, one producer and one consumer on two threads), the chunk builder (records
 * in, a chunk out through common's decoder) and the wall sampler's choice of threads and
 * weights (wall.c). The thread registry and the wall request signal live in files the library
 * leaves out (thread.c, signal.c: they interpose libc functions); this file stands in for them
 * and records what the sampler asked of them. */
#define _GNU_SOURCE
#include "support/runner.h"

#include "agent.h"
#include "builder.h"
#include "record.h"
#include "sigroom.h"
#include "thread.h"
#include "wall.h"

#include "cm/chunk.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- what thread.c, signal.c and agent.c would provide ---- */
ag_state_t ag;
ag_thread_t ag_threads[AG_MAX_THREADS];
static uint32_t g_hw;                       /* slots in use */
static uint64_t g_cpu[AG_MAX_THREADS];      /* each slot's thread CPU clock (ns), by tid - 1000 */
static struct {
    pid_t tid;
    uint32_t slot;
    uint64_t weight;
    int on_cpu;
} g_sent[64];
static int g_nsent, g_disarmed;

uint32_t ag_thread_hw(void) { return g_hw; }
uint64_t ag_thread_cpu_ns(pid_t tid) { return g_cpu[tid - 1000]; }
void ag_thread_disarm(ag_thread_t *t) {
    (void)t;
    g_disarmed++;
}
int ag_signal_wall(pid_t tid, uint32_t slot, uint64_t weight_ns, int on_cpu) {
    if (g_nsent < 64)
        g_sent[g_nsent++] = (typeof(g_sent[0])){tid, slot, weight_ns, on_cpu};
    return 0;
}
uint64_t ag_process_start_ns(void) { return 1; }
int ag_unseen_child(void) { return 0; }

/* ---- the ring ---- */

/* Writes a record of len bytes (type CPU) whose weight is seq; 0 if the ring is full. */
static int put(ag_ring_t *r, uint32_t len, uint64_t seq) {
    ag_rec_t *rec = ag_ring_reserve(r, len);
    if (!rec)
        return 0;
    memset(rec, 0, sizeof *rec);
    rec->len = len;
    rec->type = CM_EV_CPU;
    rec->weight = seq;
    ag_ring_commit(r, len);
    return 1;
}

/* Reads one record: its weight, or -1 when the ring is empty. */
static int64_t take(ag_ring_t *r, uint32_t *len) {
    const ag_rec_t *rec = ag_ring_peek(r);
    if (!rec)
        return -1;
    CHECK(rec->type == CM_EV_CPU); /* never a skip record */
    *len = rec->len;
    int64_t w = (int64_t)rec->weight;
    ag_ring_release(r, rec->len);
    return w;
}

/* Records of 1000 bytes in a 4096-byte ring: the fifth does not fit before the end, so a
 * 96-byte skip record pads it and it starts at the buffer's start; the consumer never sees the
 * skip record and gets the records in order. */
static void test_ring_wrap_skip(void) {
    ag_ring_t r;
    CHECK(ag_ring_init(&r, 4096) == 0);
    uint32_t len;
    for (uint64_t i = 0; i < 4; i++)
        CHECK(put(&r, 1000, i));
    CHECK(!put(&r, 1000, 4)); /* 4000 + 96 of padding + 1000 > 4096 */
    CHECK_EQ(take(&r, &len), 0);
    CHECK_EQ(take(&r, &len), 1);
    CHECK(put(&r, 1000, 4));
    CHECK_EQ(atomic_load(&r.head), 4096 + 1000); /* the skip record's 96 bytes, then it */
    const ag_rec_t *first = (const ag_rec_t *)r.buf;
    CHECK_EQ(first->weight, 4); /* at the buffer's start */
    CHECK_EQ(((const ag_rec_t *)(r.buf + 4000))->type, AG_REC_SKIP);
    CHECK_EQ(take(&r, &len), 2);
    CHECK_EQ(take(&r, &len), 3);
    CHECK_EQ(take(&r, &len), 4);
    CHECK_EQ(len, 1000);
    CHECK_EQ(take(&r, &len), -1);
    CHECK_EQ(atomic_load(&r.tail), atomic_load(&r.head));
    ag_ring_destroy(&r);
}

/* A full ring refuses a record (nothing overwritten) and takes one again once a record is
 * released; a record over half the ring is always refused. */
static void test_ring_full(void) {
    ag_ring_t r;
    CHECK(ag_ring_init(&r, 4096) == 0);
    int n = 0;
    while (put(&r, 512, (uint64_t)n))
        n++;
    CHECK_EQ(n, 8);
    uint32_t len;
    CHECK_EQ(take(&r, &len), 0);
    CHECK(put(&r, 512, 8));
    CHECK(!put(&r, 8, 9));
    for (int64_t i = 1; i <= 8; i++)
        CHECK_EQ(take(&r, &len), i);
    CHECK(!put(&r, 2056, 0));
    CHECK(put(&r, 2048, 0));
    ag_ring_destroy(&r);
}

/* One producer, one consumer, on two threads, 100,000 records of varied sizes through a
 * 32 KiB ring: each arrives once, in order, with its payload intact (a checksum over every
 * byte after the header). */
#define SPSC_N 100000u
static ag_ring_t g_spsc;

/* reserve and commit are not instrumented under ThreadSanitizer (AG_NO_TSAN: they run in the
 * signal handler), so it cannot see their acquire of tail and release of head: the producer
 * adds instrumented ones (an acquire load of tail after reserve; a release store of head's
 * current value after writing the record and before commit publishes it: TSan's clock for head
 * is then the one the consumer acquires with), which leave the ring as it is, so that TSan
 * checks the rest, the consumer's side and the records' bytes, against them. */
#if defined(__SANITIZE_THREAD__)
#define TSAN_ACQUIRE_TAIL(r) ((void)atomic_load_explicit(&(r)->tail, memory_order_acquire))
#define TSAN_RELEASE_HEAD(r)                                                                       \
    atomic_store_explicit(&(r)->head, atomic_load_explicit(&(r)->head, memory_order_relaxed),      \
                          memory_order_release)
#else
#define TSAN_ACQUIRE_TAIL(r) ((void)0)
#define TSAN_RELEASE_HEAD(r) ((void)0)
#endif

static uint32_t spsc_len(uint64_t seq) { return (uint32_t)(sizeof(ag_rec_t) + 8 * (seq % 61)); }

static void *spsc_producer(void *arg) {
    (void)arg;
    for (uint64_t seq = 0; seq < SPSC_N; seq++) {
        uint32_t len = spsc_len(seq);
        ag_rec_t *rec;
        while (!(rec = ag_ring_reserve(&g_spsc, len)))
            sched_yield();
        TSAN_ACQUIRE_TAIL(&g_spsc);
        rec->len = len;
        rec->type = CM_EV_CPU;
        rec->weight = seq;
        uint8_t *p = (uint8_t *)rec + sizeof *rec;
        uint32_t sum = 0;
        for (uint32_t i = 0; i < len - sizeof *rec; i++)
            sum += p[i] = (uint8_t)(seq * 31 + i);
        rec->size = sum;
        TSAN_RELEASE_HEAD(&g_spsc); /* before commit makes the record visible */
        ag_ring_commit(&g_spsc, len);
    }
    return NULL;
}

static void test_ring_spsc(void) {
    CHECK(ag_ring_init(&g_spsc, AG_RING_SIZE) == 0);
    pthread_t th;
    CHECK(pthread_create(&th, NULL, spsc_producer, NULL) == 0);
    uint64_t next = 0, bytes = 0;
    while (next < SPSC_N) {
        const ag_rec_t *rec = ag_ring_peek(&g_spsc);
        if (!rec) {
            sched_yield();
            continue;
        }
        CHECK_EQ(rec->type, CM_EV_CPU);
        CHECKF(rec->weight == next, "record %llu where %llu was due",
               (unsigned long long)rec->weight, (unsigned long long)next);
        CHECK_EQ(rec->len, spsc_len(next));
        const uint8_t *p = (const uint8_t *)rec + sizeof *rec;
        uint32_t sum = 0;
        for (uint32_t i = 0; i < rec->len - sizeof *rec; i++) {
            CHECK(p[i] == (uint8_t)(next * 31 + i));
            sum += p[i];
        }
        CHECK_EQ(rec->size, sum);
        bytes += rec->len;
        ag_ring_release(&g_spsc, rec->len);
        next++;
    }
    pthread_join(th, NULL);
    CHECK(ag_ring_peek(&g_spsc) == NULL);
    CHECKF(bytes > 30u * AG_RING_SIZE, "%llu bytes: the ring wrapped", (unsigned long long)bytes);
    ag_ring_destroy(&g_spsc);
}

/* ---- the chunk builder ---- */

__attribute__((noinline)) static int unit_leaf(int x) { return x * 3 + 1; }
__attribute__((noinline)) static int unit_caller(int x) { return unit_leaf(x) + 2; }

/* A record of type with its weight, its time from it, and a stack of depth (1 or 2) frames:
 * unit_leaf, called from unit_caller. */
static ag_rec_t *mkrec(uintptr_t *buf, cm_event_type_t type, uint64_t weight, int depth) {
    ag_rec_t *r = (ag_rec_t *)buf;
    memset(r, 0, sizeof *r);
    r->type = (uint8_t)type;
    r->time_ns = 1700000000000000000ull + weight;
    r->weight = weight;
    r->count = CM_COUNT_ONE;
    r->depth = (uint16_t)depth;
    r->pcs[0] = (uintptr_t)unit_leaf + 4;
    r->pcs[1] = (uintptr_t)unit_caller + 4;
    r->len = (uint32_t)(sizeof *r + r->depth * sizeof(uintptr_t));
    return r;
}

/* The leaf function's name of a decoded stack. */
static const char *leaf_name(const cm_chunk_t *c, uint32_t stack) {
    const cm_dict_t *d = &c->dict;
    uint32_t n = cm_stack_depth(d, stack);
    uint32_t loc = d->stack_frames[d->stack_off[stack] + n - 1]; /* root first */
    uint32_t fn = d->location_function[loc];
    return fn ? d->strings[d->function_name[fn]].ptr : "";
}

/* Three CPU records over two stacks and a WALL record: the chunk has two stacks (identical
 * ones interned once), each row's weight and stack, the leaf named, and the header's drops
 * and sampling as given. */
static void test_builder_roundtrip(void) {
    uintptr_t buf[4][AG_REC_MAX / sizeof(uintptr_t) + 1];
    ag_builder_t *b = ag_builder_new();
    CHECK(b != NULL);
    ag_builder_add(b, &ag_threads[0], 4242, mkrec(buf[0], CM_EV_CPU, 1000, 1));
    ag_builder_add(b, &ag_threads[0], 4242, mkrec(buf[1], CM_EV_CPU, 2000, 2));
    ag_builder_add(b, &ag_threads[0], 4243, mkrec(buf[2], CM_EV_CPU, 3000, 1));
    ag_builder_add(b, &ag_threads[0], 4243, mkrec(buf[3], CM_EV_WALL, 5000, 2));
    CHECK_EQ(ag_builder_samples(b, CM_EV_CPU), 3);
    CHECK_EQ(ag_builder_samples(b, CM_EV_WALL), 1);
    CHECK(ag_builder_bytes(b) > 0);
    cm_header_t h;
    memset(&h, 0, sizeof h);
    h.service = (cm_str_t){"units", 5};
    h.pid = 77;
    h.start_unix_ns = 1700000000000000000ull;
    h.end_unix_ns = h.start_unix_ns + 1000000000ull;
    h.format_minor = CM_FORMAT_MINOR;
    cm_drop_t drops[] = {{CM_DROP_RING_FULL, CM_EV_CPU, 7}, {CM_DROP_STACK_TRUNCATED, CM_EV_WALL, 2}};
    h.drops = drops;
    h.n_drops = 2;
    cm_sampling_t samp = {CM_EV_CPU, 10000000, 0, 100, 9, 3};
    h.sampling = &samp;
    h.n_sampling = 1;
    uint8_t *frame = NULL;
    size_t len = 0;
    char err[256] = "";
    CHECKF(ag_builder_finish(b, &h, &frame, &len, err, sizeof err) == 0, "%s", err);
    CHECK_EQ(ag_builder_samples(b, CM_EV_CPU), 0); /* reset for the next chunk */
    cm_chunk_t *c = NULL;
    CHECKF(cm_chunk_decode(frame, len, &c, err, sizeof err) == 0, "%s", err);
    CHECK_EQ(c->header.pid, 77);
    CHECK(strcmp(c->header.service.ptr, "units") == 0);
    CHECK_EQ(c->header.n_drops, 2);
    CHECK_EQ(c->header.drops[0].reason, CM_DROP_RING_FULL);
    CHECK_EQ(c->header.drops[0].count, 7);
    CHECK_EQ(c->header.drops[1].type, CM_EV_WALL);
    CHECK_EQ(c->header.drops[1].count, 2);
    CHECK_EQ(c->header.n_sampling, 1);
    CHECK_EQ(c->header.sampling[0].samples_kept, 3);
    const cm_samples_t *cpu = &c->samples[CM_EV_CPU];
    CHECK_EQ(cpu->n, 3);
    CHECK_EQ(c->samples[CM_EV_WALL].n, 1);
    CHECK_EQ(c->samples[CM_EV_WALL].weight[0], 5000);
    CHECK_EQ(c->dict.n_stacks, 3); /* stack 0 is the empty one */
    CHECK_EQ(cm_stack_depth(&c->dict, 0), 0);
    uint64_t weights = 0;
    for (uint32_t i = 0; i < cpu->n; i++)
        weights += cpu->weight[i];
    CHECK_EQ(weights, 6000);
    CHECK_EQ(cpu->stack[0], cpu->stack[2]); /* the same one-frame stack */
    CHECK(cpu->stack[0] != cpu->stack[1]);
    CHECK_EQ(cm_stack_depth(&c->dict, cpu->stack[0]), 1);
    CHECK_EQ(cm_stack_depth(&c->dict, cpu->stack[1]), 2);
    CHECK_EQ(c->samples[CM_EV_WALL].stack[0], cpu->stack[1]);
    CHECKF(strcmp(leaf_name(c, cpu->stack[0]), "unit_leaf") == 0, "leaf %s",
           leaf_name(c, cpu->stack[0]));
    CHECK(cpu->thread[0] == cpu->thread[1] && cpu->thread[0] != cpu->thread[2]);
    CHECK_EQ(c->dict.thread_tid[cpu->thread[2]], 4243);
    cm_chunk_free(c);
    free(frame);
    ag_builder_free(b);
}

/* ---- the wall sampler ---- */

/* nthreads registered threads (tids 1000...), per_tick of them sampled per tick; the room for
 * wall requests read from RLIMIT_SIGPENDING, as the agent's constructor does. */
static void wall_setup(uint32_t nthreads, uint32_t per_tick) {
    ag_sigroom_init();
    CHECK(!ag_sigroom_off);
    memset(ag_threads, 0, sizeof ag_threads);
    memset(g_cpu, 0, sizeof g_cpu);
    g_nsent = g_disarmed = 0;
    g_hw = nthreads;
    ag.cfg.wall_threads = per_tick;
    for (uint32_t i = 0; i < nthreads; i++) {
        atomic_store(&ag_threads[i].state, AG_TS_ACTIVE);
        atomic_store(&ag_threads[i].tid, (pid_t)(1000 + i));
    }
}

/* Threads are taken round robin, per_tick at a time from where the last tick stopped, each
 * weighted by the time since its own last tick; threads with a request still pending, ones
 * that block our signal, ones in exec and free slots are passed over (a pending one counted
 * HOST_UNSAFE), a raw clone sharing TLS is disarmed, never signalled. */
static void test_wall_selection(void) {
    ag_builder_t *b = ag_builder_new();
    wall_setup(6, 2);
    atomic_store(&ag_threads[5].state, AG_TS_FREE);
    ag_wall_after_fork_child(); /* the cursor at slot 0 */
    uint64_t t0 = 1000000000ull;
    for (uint32_t i = 0; i < 5; i++)
        ag_threads[i].wall_last_ns = t0 - 100000000ull * (i + 1);
    ag_wall_tick(b, t0);
    CHECK_EQ(g_nsent, 2);
    CHECK_EQ(g_sent[0].slot, 0);
    CHECK_EQ(g_sent[0].tid, 1000);
    CHECK_EQ(g_sent[0].weight, 100000000ull);
    CHECK_EQ(g_sent[1].slot, 1);
    CHECK_EQ(g_sent[1].weight, 200000000ull);
    CHECK(atomic_load(&ag_threads[0].wall_pending));
    /* slot 2 has its request pending, 3 blocks our signal, 4 is in exec: the next tick goes
     * round to 0 and 1 again (their requests taken meanwhile) */
    atomic_store(&ag_threads[0].wall_pending, 0);
    atomic_store(&ag_threads[1].wall_pending, 0);
    atomic_store(&ag_threads[2].wall_pending, 1);
    atomic_store(&ag_threads[3].sig_blocked, 1);
    atomic_store(&ag_threads[4].exec_pending, 1);
    uint64_t drops0 = atomic_load(&ag_drops[CM_EV_WALL][CM_DROP_HOST_UNSAFE]);
    g_nsent = 0;
    ag_wall_tick(b, t0 + 50000000ull);
    CHECK_EQ(g_nsent, 2);
    CHECK_EQ(g_sent[0].slot, 0);
    CHECK_EQ(g_sent[0].weight, 50000000ull); /* since its last tick */
    CHECK_EQ(g_sent[1].slot, 1);
    CHECK_EQ(atomic_load(&ag_drops[CM_EV_WALL][CM_DROP_HOST_UNSAFE]) - drops0, 1);
    CHECK(!atomic_load(&ag_threads[4].wall_pending));
    /* a raw clone: disarmed, and the tick goes on to the next thread */
    wall_setup(3, 1);
    atomic_store(&ag_threads[0].foreign_tls, 1);
    ag_wall_after_fork_child();
    g_nsent = 0;
    ag_wall_tick(b, t0);
    CHECK_EQ(g_disarmed, 1);
    CHECK_EQ(g_nsent, 1);
    CHECK_EQ(g_sent[0].slot, 1);
    ag_builder_free(b);
}

/* Without a signal: a thread that has not run since its last wall sample gets that sample
 * again (weight: the time since; not on CPU); one that ran over half the interval and has a
 * CPU sample since its last tick gets that sample as its wall sample, on CPU. Both are added
 * to the builder and counted as recorded without a signal. */
static void test_wall_without_signal(void) {
    ag_builder_t *b = ag_builder_new();
    wall_setup(2, 2);
    ag_wall_after_fork_child();
    uintptr_t wbuf[AG_REC_MAX / sizeof(uintptr_t) + 1], cbuf[AG_REC_MAX / sizeof(uintptr_t) + 1];
    ag_thread_t *idle = &ag_threads[0], *busy = &ag_threads[1];
    idle->wall_rec = mkrec(wbuf, CM_EV_WALL, 1, 2);
    idle->wall_rec->flags = CM_SF_ON_CPU;
    g_cpu[0] = 5000000;
    atomic_store(&idle->wall_cpu_after, 5000000 - 1000); /* ran 1 us since: the handler's exit */
    idle->wall_cpu_prev = 5000000 - 1000;
    busy->cpu_rec = mkrec(cbuf, CM_EV_CPU, 1, 1);
    busy->wall_cpu_prev = 1000000;
    g_cpu[1] = 1000000 + 80000000; /* 80 ms of CPU over a 100 ms interval */
    uint64_t t0 = 2000000000ull;
    idle->wall_last_ns = busy->wall_last_ns = t0 - 100000000ull;
    uint64_t reused0 = atomic_load(&ag_wall_reused);
    ag_wall_tick(b, t0);
    CHECK_EQ(g_nsent, 0);
    CHECK_EQ(atomic_load(&ag_wall_reused) - reused0, 2);
    CHECK_EQ(ag_builder_samples(b, CM_EV_WALL), 2);
    CHECK_EQ(idle->wall_rec->weight, 100000000ull);
    CHECK_EQ(idle->wall_rec->flags, 0);
    CHECK_EQ(busy->cpu_rec->type, CM_EV_WALL);
    CHECK_EQ(busy->cpu_rec->weight, 100000000ull);
    CHECK_EQ(busy->cpu_rec->flags, CM_SF_ON_CPU);
    CHECK_EQ(busy->cpu_rec->len, 0); /* used: the next tick needs a newer CPU sample */
    /* the idle thread ran meanwhile (30 us of CPU): a signal this time */
    g_cpu[0] += 30000;
    g_cpu[1] += 80000000;
    ag_wall_tick(b, t0 + 100000000ull);
    CHECK_EQ(g_nsent, 2);
    CHECK_EQ(g_sent[0].slot, 0);
    CHECK_EQ(g_sent[0].on_cpu, 0); /* 30 us of 100 ms: under 1%, blocked */
    CHECK_EQ(g_sent[1].slot, 1);
    CHECK_EQ(g_sent[1].on_cpu, 1); /* no CPU sample left: a signal, on CPU */
    idle->wall_rec = busy->cpu_rec = NULL;
    ag_builder_free(b);
}

static const tr_test_t tests[] = {
    {"ring_wrap_skip", test_ring_wrap_skip},
    {"ring_full", test_ring_full},
    {"ring_spsc", test_ring_spsc},
    {"builder_roundtrip", test_builder_roundtrip},
    {"wall_selection", test_wall_selection},
    {"wall_without_signal", test_wall_without_signal},
    {0},
};
TR_MAIN(tests)
