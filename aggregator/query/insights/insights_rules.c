/* The share rules of insights.h: CPU spent in a category of functions (allocator, spinning,
 * exceptions, memory copying), wall time waiting for locks, and I/O made of many small calls;
 * and the agent's own overhead. Each rule's metric, threshold and reasoning: README.md,
 * "Insights". Threading: as insights.c. */
#include "insights_int.h"

#include "cm/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *rule, *title;
    int cat, mode;
    size_t lim_off; /* offsetof the threshold in agg_insight_limits_t */
    const char *what; /* "in the allocator" */
    const char *explain, *fix;
} cpu_rule_t;

#define LIM(f) offsetof(agg_insight_limits_t, f)

static const cpu_rule_t cpu_rules[] = {
    {"alloc_churn", "Allocation churn", INS_CAT_ALLOC, INS_ANY, LIM(alloc_share),
     "in the allocator (malloc/free/new/delete)",
     "A large share of CPU goes to allocating and freeing memory, mostly short-lived objects "
     "from the sites listed (the callers of the allocator).",
     "Allocate less at the top sites: reuse buffers or objects, reserve container capacity, "
     "pass by reference instead of copying, pool or arena-allocate per request; or link a "
     "faster allocator (jemalloc, tcmalloc, mimalloc)."},
    {"busy_wait", "Busy waiting", INS_CAT_SPIN, INS_ANY, LIM(spin_share),
     "spinning (sched_yield, spin locks)",
     "Threads burn CPU waiting for something instead of sleeping: a loop around sched_yield "
     "or a spin lock held too long or contended by more threads than cores.",
     "Block instead of spinning (a mutex, a condition variable, futex, eventfd or a blocking "
     "queue), or bound the spin and then sleep; shorten what the spin lock protects."},
    {"exception_heavy", "Exception-heavy code", INS_CAT_EXCEPT, INS_ANY, LIM(except_share),
     "throwing and unwinding C++ exceptions",
     "Exceptions are thrown on a hot path: each throw allocates the exception, walks the "
     "unwind tables of every frame and runs the personality routines, microseconds each.",
     "Do not use exceptions for expected outcomes at the throwing sites listed: return an "
     "error code, std::optional or std::expected; validate before calling code that throws."},
    {"memory_copy", "Memory copying", INS_CAT_COPY, INS_LEAF, LIM(copy_share),
     "copying memory (memcpy/memmove)",
     "A large share of CPU copies bytes: buffers copied between layers, containers or strings "
     "passed by value, vectors reallocating as they grow.",
     "At the callers listed, move instead of copying, pass views (std::string_view, spans, "
     "iovecs), reserve capacity ahead, or read/write into the final buffer (zero-copy)."},
};

static int rule_cpu(ins_ctx_t *x, const cpu_rule_t *r) {
    const agg_profile_t *p = x->in->cpu;
    ins_split_t sp;
    int rc = ins_sites(x, p, r->cat, r->mode, &sp);
    if (rc)
        return rc;
    double thr = *(const double *)((const char *)x->lim + r->lim_off);
    double samples = (double)sp.total_count / CM_COUNT_ONE;
    if (samples < x->lim->min_cpu_samples || !sp.total) {
        free(sp.sites);
        return 0;
    }
    x->out->evaluated++;
    double share = (double)sp.in_cat / (double)sp.total;
    if (share >= thr) {
        agg_insight_t ins = {.rule = r->rule, .title = r->title, .unit = "share",
                             .score = share, .threshold = thr, .type = CM_EV_CPU,
                             .explain = r->explain, .fix = r->fix};
        const char *top = sp.n_sites ? p->frames[sp.sites[0].frame].name : "?";
        snprintf(ins.summary, sizeof ins.summary,
                 "%.1f%% of CPU is spent %s (%.0f of %.0f samples); %.0f%% of it from %s.",
                 share * 100, r->what, (double)sp.in_cat_count / CM_COUNT_ONE, samples,
                 sp.n_sites ? 100.0 * (double)sp.sites[0].weight / (double)sp.in_cat : 0, top);
        rc = ins_evidence_sites(&ins, p, &sp, 1e-9, 5);
        rc = rc ? (ins_insight_clear(&ins), rc) : ins_push(x->out, &ins);
    }
    free(sp.sites);
    return rc;
}

/* Lock waits of the heaviest site against the wall time of the window (wall profile total,
 * else process-seconds: one thread's time). */
static int rule_lock(ins_ctx_t *x) {
    const agg_profile_t *p = x->in->lock;
    ins_split_t sp;
    int rc = ins_sites(x, p, INS_CAT_LOCK, INS_FALLBACK_LEAF, &sp);
    if (rc)
        return rc;
    uint64_t wall = 0, wc;
    double work;
    if (x->in->wall)
        agg_profile_totals(x->in->wall, &wall, &wc, &work);
    double denom = wall ? (double)wall : x->in->process_seconds * 1e9;
    if (denom <= 0) {
        free(sp.sites);
        return 0;
    }
    x->out->evaluated++;
    double top = sp.n_sites ? (double)sp.sites[0].weight / denom : 0;
    if (top >= x->lim->lock_share) {
        agg_insight_t ins = {.rule = "lock_contention", .title = "Lock contention hotspot",
                             .unit = "share", .score = top, .threshold = x->lim->lock_share,
                             .type = CM_EV_LOCK};
        ins.explain = "Threads spend a large share of their wall time waiting for a lock taken "
                      "at the site listed first: work behind one lock is serialised.";
        ins.fix = "Hold the lock for less (move work, I/O and allocation out of the critical "
                  "section), split it (per-shard or per-object locks), use a reader-writer "
                  "lock for read-mostly data, or per-thread state merged later.";
        snprintf(ins.summary, sizeof ins.summary,
                 "Lock waits at %s take %.1f%% of %s (%.2f s); all lock waits %.1f%%.",
                 p->frames[sp.sites[0].frame].name, top * 100,
                 wall ? "the wall time" : "one thread's time", (double)sp.sites[0].weight / 1e9,
                 100.0 * (double)sp.total / denom);
        rc = ins_evidence_sites(&ins, p, &sp, 1e-9, 5);
        rc = rc ? (ins_insight_clear(&ins), rc) : ins_push(x->out, &ins);
    }
    free(sp.sites);
    return rc;
}

/* Bytes of site frame `name` in the io_bytes profile (its own split), or -1 when unknown. */
static double site_bytes(const ins_split_t *bs, const agg_profile_t *bp, const char *name) {
    if (!bp)
        return -1;
    for (size_t i = 0; i < bs->n_sites; i++)
        if (!strcmp(bp->frames[bs->sites[i].frame].name, name))
            return (double)bs->sites[i].weight;
    return -1;
}

static int cmp_target(const void *a, const void *b) {
    const agg_insight_target_t *x = *(const agg_insight_target_t *const *)a;
    const agg_insight_target_t *y = *(const agg_insight_target_t *const *)b;
    return x->count != y->count ? (x->count < y->count ? 1 : -1) : strcmp(x->name, y->name);
}

/* The busiest targets (by calls) as evidence "target NAME", at most 3. */
static int target_evidence(ins_ctx_t *x, agg_insight_t *ins) {
    size_t n = x->in->n_io_targets;
    const agg_insight_target_t **t = malloc((n + 1) * sizeof *t);
    if (!t)
        return CM_ENOMEM;
    double all = 0;
    for (size_t i = 0; i < n; i++) {
        t[i] = &x->in->io_targets[i];
        all += (double)t[i]->count;
    }
    qsort(t, n, sizeof *t, cmp_target);
    int rc = 0;
    for (size_t i = 0; !rc && i < n && i < 3 && t[i]->name && t[i]->count; i++) {
        char name[600];
        snprintf(name, sizeof name, "target %s", t[i]->name);
        double calls = (double)t[i]->count / CM_COUNT_ONE;
        size_t had = ins->n_ev;
        rc = ins_evidence(ins, name, all > 0 ? (double)t[i]->count / all : 0,
                          calls / x->in->process_seconds, 0);
        if (!rc && ins->n_ev > had && !(ins->ev[had].io_target = strdup(t[i]->name)))
            rc = CM_ENOMEM;
    }
    free(t);
    return rc;
}

static int small_io_fire(ins_ctx_t *x, const agg_profile_t *p, const ins_split_t *sp,
                         const ins_split_t *bs) {
    const agg_insight_limits_t *l = x->lim;
    double secs = x->in->process_seconds;
    agg_insight_t ins = {.rule = "small_io", .title = "Small I/O", .unit = "calls/s",
                         .threshold = l->small_io_rate, .type = CM_EV_IO};
    ins.explain = "One site makes many I/O calls that each move few bytes: every call is a "
                  "system call (and, on a socket, often a packet), so the fixed cost per call "
                  "dominates.";
    ins.fix = "Buffer: batch the writes (a user-space buffer, writev, stdio with a large "
              "buffer), read in large blocks, coalesce small messages; avoid fsync per record.";
    double calls_all = (double)sp->in_cat_count / CM_COUNT_ONE;
    for (size_t i = 0; i < sp->n_sites && ins.n_ev < 4; i++) {
        const char *name = p->frames[sp->sites[i].frame].name;
        double calls = (double)sp->sites[i].count / CM_COUNT_ONE;
        double rate = calls / secs, bytes = site_bytes(bs, x->in->io_bytes, name);
        double per = bytes >= 0 && calls > 0 ? bytes / calls : -1;
        double wait = calls > 0 ? (double)sp->sites[i].weight / calls : 0;
        int small = per >= 0 ? per <= l->small_io_bytes : wait <= l->small_io_wait;
        if (rate < l->small_io_rate || !small)
            continue;
        if (!ins.n_ev) {
            char bytes_txt[48] = "";
            if (per >= 0)
                snprintf(bytes_txt, sizeof bytes_txt, " of %.0f bytes each", per);
            ins.score = rate;
            snprintf(ins.summary, sizeof ins.summary,
                     "%s makes %.0f I/O calls per second per process%s (%.0f us wait each).",
                     name, rate, bytes_txt, wait / 1e3);
        }
        int rc = ins_evidence(&ins, name, calls_all > 0 ? calls / calls_all : 0, rate, 1);
        if (rc) {
            ins_insight_clear(&ins);
            return rc;
        }
    }
    if (!ins.n_ev)
        return 0;
    int rc = target_evidence(x, &ins);
    if (rc) {
        ins_insight_clear(&ins);
        return rc;
    }
    return ins_push(x->out, &ins);
}

static int rule_small_io(ins_ctx_t *x) {
    const agg_profile_t *p = x->in->io;
    if (x->in->process_seconds <= 0)
        return 0;
    ins_split_t sp, bs = {0};
    int rc = ins_sites(x, p, INS_CAT_IO, INS_FALLBACK_LEAF, &sp);
    if (!rc && x->in->io_bytes)
        rc = ins_sites(x, x->in->io_bytes, INS_CAT_IO, INS_FALLBACK_LEAF, &bs);
    if (!rc) {
        x->out->evaluated++;
        rc = small_io_fire(x, p, &sp, &bs);
    }
    free(sp.sites);
    free(bs.sites);
    return rc;
}

int ins_rules_share(ins_ctx_t *x) {
    int rc = 0;
    if (x->in->lock)
        rc = rule_lock(x);
    for (size_t i = 0; !rc && x->in->cpu && i < sizeof cpu_rules / sizeof *cpu_rules; i++)
        rc = rule_cpu(x, &cpu_rules[i]);
    if (!rc && x->in->io)
        rc = rule_small_io(x);
    return rc;
}

int agg_insight_drop_counts(uint32_t reason) {
    switch (reason) {
    case CM_DROP_SUBSAMPLED:
    case CM_DROP_STACK_TRUNCATED:
    case CM_DROP_SPAN_LIMIT:
    case CM_DROP_INCIDENT_COOLDOWN:
    case CM_DROP_INCIDENT_CAP:
    case CM_DROP_INCIDENT_LOST:
        return 0;
    default:
        return 1;
    }
}

void agg_insight_add_drop(agg_insight_input_t *in, uint32_t reason, uint64_t count) {
    if (!agg_insight_drop_counts(reason))
        return;
    in->dropped += count;
    in->drop_reasons[reason < AGG_INSIGHT_DROP_REASONS ? reason : 0] += count;
}

/* Evidence for the drops: the largest reasons first (up to three, each at least 1 % of them;
 * reasons not kept apart go under "unspecified"), or the bare count when none were given. */
static int drop_evidence(agg_insight_t *ins, const agg_insight_input_t *in, double drop) {
    uint64_t done = 0; /* reasons already named, as bits */
    for (int k = 0; k < 3; k++) {
        uint32_t best = 0;
        uint64_t n = 0;
        for (uint32_t r = 0; r < AGG_INSIGHT_DROP_REASONS; r++)
            if (!(done >> r & 1) && in->drop_reasons[r] > n)
                n = in->drop_reasons[best = r];
        if (!n || (k > 0 && (double)n < 0.01 * (double)in->dropped))
            break;
        done |= (uint64_t)1 << best;
        char name[64];
        snprintf(name, sizeof name, "samples dropped: %s", cm_drop_reason_name(best));
        int rc = ins_evidence(ins, name, in->dropped ? (double)n / (double)in->dropped : 0,
                              (double)n, 0);
        if (rc)
            return rc;
    }
    return done ? 0 : ins_evidence(ins, "samples dropped", drop, (double)in->dropped, 0);
}

/* The agent's CPU against the processes' CPU, and the samples it dropped. Judged on enough
 * of each: AGENT_MIN_CPU_S of process CPU (the agent's start-up, ~50 ms of unwind tables and
 * symbols, is then at most 1 %) and AGENT_MIN_DROPS losses (a few lost samples of a short,
 * starved run are not a trend). */
#define AGENT_MIN_CPU_S 5.0
#define AGENT_MIN_DROPS 50
int ins_rule_agent(ins_ctx_t *x) {
    const agg_insight_input_t *in = x->in;
    if (!in->process_cpu_ns && !in->samples && !in->dropped)
        return 0;
    x->out->evaluated++;
    double cpu = (double)in->process_cpu_ns >= AGENT_MIN_CPU_S * 1e9
                     ? (double)in->agent_cpu_ns / (double)in->process_cpu_ns
                     : 0;
    double seen = (double)in->samples + (double)in->dropped;
    double drop = seen > 0 && in->dropped >= AGENT_MIN_DROPS ? (double)in->dropped / seen : 0;
    double rc_cpu = cpu / x->lim->agent_share, rc_drop = drop / x->lim->drop_share;
    if (rc_cpu < 1 && rc_drop < 1)
        return 0;
    agg_insight_t ins = {.rule = "agent_overhead", .title = "Profiler overhead or drops",
                         .unit = "share", .type = CM_EV_CPU};
    ins.score = rc_cpu >= rc_drop ? cpu : drop;
    ins.threshold = rc_cpu >= rc_drop ? x->lim->agent_share : x->lim->drop_share;
    ins.explain = "The agent used more of the processes' CPU than its budget, or dropped "
                  "samples (full rings, full tables, a slow collector): the profiles are then "
                  "costlier or less complete than they should be.";
    ins.fix = "Lower the agent's rates (FLEETPROF_CPU_RATE, FLEETPROF_ALLOC_RATE, "
              "FLEETPROF_WALL_HZ) or raise FLEETPROF_CPU_BUDGET; for drops, the first "
              "evidence is the reason: over_budget (the budget: raise it or lower the rates), "
              "thread_limit (more live threads than the agent's 1,024 slots: a thread per "
              "connection; use a pool), ring_full or heap_table_full (bursts past the rings or "
              "FLEETPROF_HEAP_ENTRIES), chunk_queue_full (a slow or absent collector).";
    uint32_t top = 0; /* the largest reason, for the summary */
    for (uint32_t r = 1; r < AGG_INSIGHT_DROP_REASONS; r++)
        top = in->drop_reasons[r] > in->drop_reasons[top] ? r : top;
    double share = in->process_cpu_ns ? (double)in->agent_cpu_ns / (double)in->process_cpu_ns : 0;
    int named = in->drop_reasons[top] > 0;
    snprintf(ins.summary, sizeof ins.summary,
             "The agent used %.2f%% of the processes' CPU (budget %.1f%%%s) and dropped %.2f%% of "
             "samples (%llu%s%s).", share * 100, x->lim->agent_share * 100,
             cpu > 0 ? "" : ", not judged under 5 s of CPU",
             seen > 0 ? (double)in->dropped / seen * 100 : 0, (unsigned long long)in->dropped,
             named ? ", most " : "", named ? cm_drop_reason_name(top) : "");
    /* what made it fire first: the CPU share, or the drops by reason */
    int by_cpu = rc_cpu >= rc_drop, rc = 0;
    if (!by_cpu)
        rc = drop_evidence(&ins, in, drop);
    if (!rc)
        rc = ins_evidence(&ins, "agent CPU share", cpu, (double)in->agent_cpu_ns / 1e9, 0);
    if (!rc && by_cpu && in->dropped)
        rc = drop_evidence(&ins, in, drop);
    if (rc) {
        ins_insight_clear(&ins);
        return rc;
    }
    return ins_push(x->out, &ins);
}
