/* Automated analysis ("insights"): a documented rule set evaluated over the profiles of one
 * service (or one version) in a window, each rule a score against a threshold, evidence (the
 * functions or sites and their shares, with the query that opens the profile filtered to
 * them) and what the finding means and what usually fixes it. Pure functions over profiles:
 * the store, the chunk files of a test and the CLI all fill the same input. See README.md,
 * "Insights", for every rule's metric, threshold and reasoning.
 *
 * Threading: no global state; the input profiles are only read. */
#ifndef AGG_INSIGHTS_H
#define AGG_INSIGHTS_H

#include "profile.h"

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* The I/O of one target (file path or peer address) in the window. */
typedef struct {
    const char *name;
    uint64_t wait_ns, count; /* count in milli-events */
} agg_insight_target_t;

#define AGG_INSIGHT_DROP_REASONS 32 /* reasons kept apart in the input; later ones: "other" */

/* What the rules read. Every profile may be NULL (that rule then says nothing). */
typedef struct {
    const agg_profile_t *cpu, *wall, *alloc, *lock, *io;
    /* Live heap per interval: one replicate per interval, its key the interval's start in
     * milliseconds (decimal), its work the number of heap snapshots (chunks) summed into it;
     * a site's live bytes in an interval = its weight / work. */
    const agg_profile_t *inuse;
    /* Optional: I/O calls with weight = bytes (the chunks' size column) and count = calls;
     * NULL: the small-I/O rule judges by calls and wait per call alone. */
    const agg_profile_t *io_bytes;
    /* Optional: the I/O calls by target (the store's io-target dimension, or the chunks'
     * target column); small_io then names the busiest targets too. */
    const agg_insight_target_t *io_targets;
    size_t n_io_targets;
    double process_seconds;       /* summed process wall time of the window (work) */
    uint64_t process_cpu_ns;      /* the processes' CPU time (0: unknown) */
    uint64_t agent_cpu_ns;        /* the agent's own CPU time within it */
    uint64_t samples, dropped;    /* samples kept, and lost by the agents (only the drop
                                   * reasons agg_insight_drop_counts() says are losses) */
    /* Optional: `dropped` by reason (cm_drop_reason_t; agg_insight_add_drop fills both); the
     * agent-overhead rule names the largest reasons in its evidence. */
    uint64_t drop_reasons[AGG_INSIGHT_DROP_REASONS];
} agg_insight_input_t;

/* Default thresholds (agg_insights_defaults); a rule fires when its score reaches its one. */
typedef struct {
    double lock_share;     /* lock wait of the top site / wall time (or process time) */
    double alloc_share;    /* CPU in the allocator / CPU */
    double leak_rate;      /* bytes/s of steady live-heap growth of one site, per process */
    double small_io_rate;  /* calls/s per process at one site ... */
    double small_io_bytes; /* ... with at most this many bytes per call (when bytes are known) */
    double small_io_wait;  /* ... or at most this mean wait per call, ns (bytes unknown) */
    double spin_share;     /* CPU in sched_yield / spin locks / pause loops / CPU */
    double except_share;   /* CPU in throwing and unwinding exceptions / CPU */
    double copy_share;     /* CPU in memcpy/memmove / CPU */
    double agent_share;    /* the agent's CPU / the processes' CPU */
    double drop_share;     /* samples dropped / samples seen */
    double min_cpu_samples; /* CPU-share rules need at least this many CPU samples */
} agg_insight_limits_t;

#define AGG_INSIGHT_MAX_EVIDENCE 8

typedef struct {
    char *name;    /* function (site), or "target <path or peer>" */
    double share;  /* of what the rule measures (its value / the rule's total) */
    double value;  /* in the rule's unit */
    char *include; /* an anchored include pattern selecting it (profile query), or NULL */
    char *io_target; /* a target: the io_target filter selecting it, else NULL */
} agg_evidence_t;

typedef struct {
    const char *rule;    /* id: "lock_contention", "alloc_churn", ... (static) */
    const char *title;   /* static */
    const char *unit;    /* of score and threshold: "share", "bytes/s", "calls/s" (static) */
    double score, threshold;
    cm_event_type_t type; /* the profile the evidence is in */
    char summary[320];    /* one sentence with the figures */
    const char *explain;  /* what it means (static) */
    const char *fix;      /* what usually fixes it (static) */
    agg_evidence_t ev[AGG_INSIGHT_MAX_EVIDENCE];
    size_t n_ev;
} agg_insight_t;

typedef struct {
    agg_insight_t *v; /* fired rules, highest score / threshold first */
    size_t n;
    size_t evaluated; /* rules that had their input */
} agg_insights_t;

void agg_insights_defaults(agg_insight_limits_t *lim);

/* Evaluates every rule on in. lim NULL: the defaults. Returns 0, CM_ENOMEM. Free with
 * agg_insights_free. */
int agg_insights_run(const agg_insight_input_t *in, const agg_insight_limits_t *lim,
                     agg_insights_t *out);
void agg_insights_free(agg_insights_t *r);

/* {"insights":[{rule,title,unit,score,threshold,type,summary,explain,fix,evidence:[{name,
 * share,value,include}]}],"evaluated":N}. NULL when out of memory. */
json_t *agg_insights_json(const agg_insights_t *r);

/* 1 when samples dropped for this reason (cm_drop_reason_t) are a loss the agent-overhead rule
 * counts: not the flood subsampling the agent does on purpose (CM_DROP_SUBSAMPLED, its rows
 * carry the weight of what they stand for), a truncated stack (the sample is kept), nor what
 * is not a sample: spans past their bounds (span_limit: a service with a span per short
 * request passes the per-chunk bound while every sample is kept) and incident captures not
 * taken (cooldown, cap) or not kept (the recorder's copy of samples the chunks carry). */
int agg_insight_drop_counts(uint32_t reason);

/* Adds count samples dropped for reason to in (dropped, drop_reasons) when the reason is a
 * loss (agg_insight_drop_counts). */
void agg_insight_add_drop(agg_insight_input_t *in, uint32_t reason, uint64_t count);

/* The categories of the rules' function names a function belongs to, as bits
 * AGG_INSIGHT_CAT_*: what the ingest's KPMs split the CPU samples by (patterns compiled once;
 * thread-safe). */
enum {
    AGG_INSIGHT_CAT_ALLOC = 1u << 0,  /* the allocator */
    AGG_INSIGHT_CAT_LOCK = 1u << 1,   /* lock primitives */
    AGG_INSIGHT_CAT_IO = 1u << 2,     /* I/O calls */
    AGG_INSIGHT_CAT_SPIN = 1u << 3,   /* yields and spin locks */
    AGG_INSIGHT_CAT_EXCEPT = 1u << 4, /* the C++ exception runtime */
    AGG_INSIGHT_CAT_COPY = 1u << 5,   /* memcpy and friends */
    AGG_INSIGHT_CAT_KERNEL = 1u << 6, /* system call wrappers */
};
uint32_t agg_insight_categories(const char *function);

/* The rule's id names, in evaluation order (for documentation and tests). */
extern const char *const agg_insight_rules[];

/* Helpers to fill the input from decoded chunks (tests, `fleetprof insights --chunks`):
 * adds one chunk's INUSE rows as one interval of p (key = start in ms, work = 1), and its IO
 * rows with weight = bytes into io_bytes. Returns 0 or a CM_E* code. */
struct cm_chunk;
int agg_insights_add_inuse_chunk(agg_profile_t *p, const struct cm_chunk *c);
int agg_insights_add_io_bytes_chunk(agg_profile_t *p, const struct cm_chunk *c);

#endif
