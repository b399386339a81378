/* Deferred unwinding (agent/src/handler/defer.c, issue 14), compiled in with the unwinder and the CFI
 * tables: a stack copied in a signal handler and unwound later, after the stack was reused,
 * gives exactly the frames the live unwind gave in the same handler, with the thread's stack
 * bounds known or not; a stack deeper than the copy gives a prefix of them, flagged incomplete;
 * a full arena turns samples away (counted); a reset waits for claims in progress; four threads
 * claiming at once each get their own copy. Also the unwinder in an epilogue after `pop %rbp`. */
#define _GNU_SOURCE
#include "internal.h"
#include "support/runner.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

/* what the compiled-in agent files need from the rest of the agent */
ag_state_t ag;
ag_thread_t ag_threads[AG_MAX_THREADS];
_Atomic uint64_t ag_drops[CM_EV_COUNT][AG_DROP_REASONS];
uint32_t ag_thread_hw(void) { return 0; }
int ag_env_double(const char *var, double lo, double hi, const char *dflt, double *out) {
    (void)var, (void)lo, (void)hi, (void)dflt, (void)out;
    return 0;
}

/* One sample: the live unwind and the copy taken in the same handler. */
typedef struct {
    uintptr_t live[AG_MAX_DEPTH];
    uint32_t nlive, live_flags;
    uintptr_t rec[AG_REC_MAX / sizeof(uintptr_t) + 1]; /* the ring record the handler wrote */
    uintptr_t lo, hi;
    int nobounds; /* copy as for a thread whose stack bounds are unknown (process_vm_readv) */
    int taken, full;
} sample_t;

static __thread sample_t *t_sample;

static void on_signal(int sig, siginfo_t *si, void *ucv) {
    (void)sig, (void)si;
    sample_t *s = t_sample;
    const ucontext_t *uc = ucv;
    uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
    uintptr_t sp = (uintptr_t)uc->uc_mcontext.gregs[REG_RSP];
    uintptr_t fp = (uintptr_t)uc->uc_mcontext.gregs[REG_RBP];
    s->nlive = ag_unwind(NULL, pc, sp, fp, 1, s->lo, s->hi, 0, s->live, AG_MAX_DEPTH,
                         &s->live_flags);
    ag_rec_t *r = (ag_rec_t *)s->rec;
    memset(r, 0, sizeof *r);
    r->type = CM_EV_CPU;
    r->weight = 12345;
    int full = 0;
    uint32_t n = ag_defer_take(pc, sp, fp, 1, s->nobounds ? 0 : s->hi, r->pcs, &full);
    s->taken = n != 0;
    s->full = full;
    if (n)
        ag_defer_done(); /* as record.c once the ring record is committed */
    r->depth = (uint16_t)n;
    r->stack_flags = AG_STF_DEFERRED;
    r->len = (uint32_t)((sizeof *r + n * sizeof(uintptr_t) + 7) & ~7u);
}

/* -fomit-frame-pointer (tests/agent.cmake): the walk needs the tables. */
__attribute__((noinline)) static int descend(int d) {
    volatile char pad[64];
    pad[0] = (char)d;
    if (d == 0) {
        raise(SIGUSR1);
        return pad[0];
    }
    return descend(d - 1) + pad[0];
}

/* ~3 KiB a frame */
__attribute__((noinline)) static int descend_big(int d) {
    volatile char pad[3000];
    pad[0] = (char)d;
    if (d == 0) {
        raise(SIGUSR1);
        return pad[0];
    }
    return descend_big(d - 1) + pad[0];
}

/* overwrites the stack region the sample was taken on */
__attribute__((noinline)) static void scribble(void) {
    volatile char buf[96 << 10];
    memset((char *)buf, 0x5a, sizeof buf);
}

static void stack_bounds(uintptr_t *lo, uintptr_t *hi) {
    pthread_attr_t a;
    void *addr;
    size_t size;
    pthread_getattr_np(pthread_self(), &a);
    pthread_attr_getstack(&a, &addr, &size);
    pthread_attr_destroy(&a);
    *lo = (uintptr_t)addr;
    *hi = (uintptr_t)addr + size;
}

typedef struct {
    int depth, big;
    sample_t s;
    uint32_t nres, res_flags;
    uintptr_t res[AG_MAX_DEPTH];
    int resolved_same;
} job_t;

static void *run_job(void *arg) {
    job_t *j = arg;
    t_sample = &j->s;
    stack_bounds(&j->s.lo, &j->s.hi);
    if (j->big)
        descend_big(j->depth);
    else
        descend(j->depth);
    scribble(); /* the copy, not the stack, must be what resolves */
    return NULL;
}

static void resolve(job_t *j) {
    static uintptr_t out[AG_REC_MAX / sizeof(uintptr_t) + 1];
    const ag_rec_t *r = ag_defer_resolve((const ag_rec_t *)j->s.rec, (ag_rec_t *)out);
    j->nres = r->depth;
    j->res_flags = r->stack_flags;
    memcpy(j->res, r->pcs, r->depth * sizeof(uintptr_t));
    CHECK_EQ(r->weight, 12345); /* the sample's own fields are kept */
    CHECK(!(r->stack_flags & AG_STF_DEFERRED));
}

static void setup(void) {
    static int done;
    if (done)
        return;
    done = 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGUSR1, &sa, NULL);
    ag_cfi_tick(); /* tables for this program and its libraries */
    CHECK(atomic_load(&ag_cfi_snap) != NULL);
}

static void run_threads(job_t *jobs, int n) {
    pthread_t th[8];
    for (int i = 0; i < n; i++)
        CHECK(pthread_create(&th[i], NULL, run_job, &jobs[i]) == 0);
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
}

/* A copy unwound after the thread is gone gives the live unwind's frames, complete; also when
 * the thread's bounds are unknown (copied with process_vm_readv up to the first unmapped byte).
 */
static void test_same_frames(void) {
    setup();
    CHECK(ag_defer_init(1 << 20) == 0);
    for (int nb = 0; nb < 2; nb++) {
        job_t j = {.depth = 20};
        j.s.nobounds = nb;
        run_threads(&j, 1);
        CHECK(j.s.taken);
        resolve(&j);
        printf("  %s: live %u frames (flags %u), from the copy %u (flags %u)\n",
               nb ? "bounds unknown" : "bounds known", j.s.nlive, j.s.live_flags, j.nres,
               j.res_flags);
        CHECK(j.s.nlive >= 23); /* descend x 21, run_job, start_thread, clone3 */
        CHECK_EQ(j.s.live_flags & AG_UW_INCOMPLETE, 0);
        CHECK_EQ(j.nres, j.s.nlive);
        CHECK_EQ(memcmp(j.res, j.s.live, j.nres * sizeof(uintptr_t)), 0);
        CHECK_EQ(j.res_flags & (CM_STF_INCOMPLETE | CM_STF_TRUNCATED), 0);
    }
}

/* A stack deeper than AG_DEFER_COPY_MAX: the frames inside the copy, flagged incomplete. */
static void test_deep_prefix(void) {
    setup();
    CHECK(ag_defer_init(1 << 20) == 0);
    job_t j = {.depth = 40, .big = 1}; /* ~120 KiB of frames */
    run_threads(&j, 1);
    CHECK(j.s.taken);
    resolve(&j);
    printf("  live %u frames, from the 32 KiB copy %u (flags %u)\n", j.s.nlive, j.nres,
           j.res_flags);
    CHECK(j.nres > 5 && j.nres < j.s.nlive);
    CHECK_EQ(memcmp(j.res, j.s.live, j.nres * sizeof(uintptr_t)), 0);
    CHECK(j.res_flags & CM_STF_INCOMPLETE);
}

/* A full arena turns samples away (counted, *full set); a reset waits for a claim in progress,
 * takes no copy meanwhile, and rewinds the arena once none is; a record naming no copy of the
 * arena resolves to its leaf alone, flagged incomplete. */
static void test_full_reset(void) {
    setup();
    /* stacks deeper than AG_DEFER_COPY_MAX: each copy is that plus a 32-byte header */
    CHECK(ag_defer_init(2 * (AG_DEFER_COPY_MAX + 32) + 100) == 0);
    uint64_t full0 = atomic_load(&ag_defer_stats.full);
    job_t j[3] = {{.depth = 20, .big = 1}, {.depth = 20, .big = 1}, {.depth = 20, .big = 1}};
    for (int i = 0; i < 3; i++)
        run_threads(&j[i], 1);
    int taken = j[0].s.taken + j[1].s.taken + j[2].s.taken;
    printf("  arena for two copies: %d of 3 copies taken, %llu turned away\n", taken,
           (unsigned long long)(atomic_load(&ag_defer_stats.full) - full0));
    CHECK_EQ(taken, 2);
    CHECK(!j[2].s.taken && j[2].s.full);
    CHECK_EQ(atomic_load(&ag_defer_stats.full) - full0, 1);
    for (int i = 0; i < 2; i++) { /* unwound before the reset */
        resolve(&j[i]);
        CHECK_EQ(memcmp(j[i].res, j[i].s.live, j[i].nres * sizeof(uintptr_t)), 0);
    }

    /* a claim in progress (taken, not yet committed): the reset waits, no copy meanwhile */
    uintptr_t pcs[2];
    int full = 0;
    CHECK(ag_defer_reset_begin() == 1);
    ag_defer_reset_end();
    CHECK_EQ(ag_defer_take(0x1234, (uintptr_t)&pcs, 0, 1, (uintptr_t)&pcs + 16, pcs, &full), 2);
    CHECK(ag_defer_reset_begin() == 0);
    job_t k = {.depth = 3};
    run_threads(&k, 1);
    CHECK(!k.s.taken && !k.s.full);
    ag_defer_done();
    CHECK(ag_defer_reset_begin() == 1);
    ag_defer_reset_end();
    CHECK(ag_defer_reset_begin() == 0); /* empty: nothing to do, copies taken again */
    job_t m = {.depth = 3};
    run_threads(&m, 1);
    CHECK(m.s.taken);
    resolve(&m);
    CHECK_EQ(m.nres, m.s.nlive);

    /* a record whose copy is not the arena's */
    ((ag_rec_t *)m.s.rec)->pcs[1] = (uintptr_t)pcs;
    ((ag_rec_t *)m.s.rec)->stack_flags = AG_STF_DEFERRED;
    resolve(&m);
    CHECK_EQ(m.nres, 1);
    CHECK_EQ(m.res[0], m.s.live[0]);
    CHECK(m.res_flags & CM_STF_INCOMPLETE);
}

/* Four threads claiming at once, two of them without bounds: each copy is its own. */
static void test_threads(void) {
    setup();
    CHECK(ag_defer_init(1 << 20) == 0);
    job_t j[4] = {{.depth = 5}, {.depth = 9}, {.depth = 13}, {.depth = 17}};
    j[1].s.nobounds = j[3].s.nobounds = 1;
    run_threads(j, 4);
    for (int i = 0; i < 4; i++) {
        CHECK(j[i].s.taken);
        resolve(&j[i]);
        CHECK_EQ(j[i].nres, j[i].s.nlive);
        CHECK_EQ(memcmp(j[i].res, j[i].s.live, j[i].nres * sizeof(uintptr_t)), 0);
        CHECK_EQ(j[i].res_flags & CM_STF_INCOMPLETE, 0);
        CHECK(j[i].nres >= (uint32_t)(j[i].depth + 4)); /* descend x (depth+1), run_job, ... */
    }
}

/* The unwinder on a sample in an epilogue after `pop %rbp` (GCC keeps the "rbp saved at
 * CFA-16" rule up to the ret): the slot is below sp, rbp already holds the caller's value, and
 * the walk goes on (it stopped there, incomplete, on 1-2% of python3's samples). */
static void test_epilogue(void) {
    static ag_cfi_row_t rows[] = {
        {0x000, 16, -16, AG_CFI_RSP, 0}, /* body: return address at sp+8, rbp saved at sp */
        {0x100, 8, -16, AG_CFI_RSP, 0},  /* at the ret: rbp popped, its slot at sp-8 */
        {0x200, 0, 0, AG_CFI_END, 0},    /* the caller: outermost */
    };
    static struct {
        uint32_t n;
        ag_cfi_obj_t o[1];
    } snap = {1, {{0x10000, 0x20000, rows, 3, 0, NULL, 0}}}; /* no index: the plain search */
    uintptr_t stack[4] = {0x10201, 0, 0, 0}, pcs[8];
    uintptr_t lo = (uintptr_t)stack, hi = (uintptr_t)(stack + 4);
    ag_cfi_snap_t *old = atomic_exchange(&ag_cfi_snap, (ag_cfi_snap_t *)&snap);
    uint32_t fl = 0, n = ag_unwind(NULL, 0x10100, lo, 0x1234, 1, lo, hi, 0, pcs, 8, &fl);
    printf("  at the ret: %u frames, flags %u\n", n, fl);
    CHECK_EQ(n, 2);
    CHECK_EQ(pcs[1], 0x10201);
    CHECK_EQ(fl & AG_UW_INCOMPLETE, 0);
    /* in the body the slot is above sp and is read */
    stack[0] = 0x5678;
    stack[1] = 0x10201;
    n = ag_unwind(NULL, 0x10010, lo, 0x1234, 1, lo, hi, 0, pcs, 8, &fl);
    CHECK_EQ(n, 2);
    CHECK_EQ(fl & AG_UW_INCOMPLETE, 0);
    atomic_store(&ag_cfi_snap, old);
}

static const tr_test_t tests[] = {
    {"unwind_epilogue", test_epilogue},
    {"defer_same_frames", test_same_frames},
    {"defer_deep_prefix", test_deep_prefix},
    {"defer_full_reset", test_full_reset},
    {"defer_threads", test_threads},
    {0, 0},
};

TR_MAIN(tests)
