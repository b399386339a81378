/* Chunk cutting: the header (service, sampling, drops, agent and process CPU) of the interval
 * since the last cut, the builder's rows encoded, and the frame handed to the sender. bg thread
 * only, under the work lock. */
#include "chunk.h"
#include "agent.h"
#include "builder.h"
#include "clock.h"
#include "context.h"
#include "cpuacct.h"
#include "hooks.h"
#include "incid.h"
#include "perfmap.h"
#include "record.h"
#include "remap.h"
#include "sender.h"
#include "spans.h"
#include "symbols.h"

#include "cm/error.h"
#include "cm/log.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static struct {
    uint64_t chunk_start_real;
    uint64_t bg_cpu0, proc_cpu0;                      /* at chunk start */
    uint64_t seen0[CM_EV_COUNT];                      /* events_seen at chunk start */
    uint64_t stream0;                                 /* the recorder's split: stream CPU */
    uint64_t drops0[CM_EV_COUNT][AG_DROP_REASONS];    /* drops at chunk start */
    int warned_encode, warned_size;
    double enc_ratio; /* encoded / estimated size of the last chunk (LZ4 compresses rows) */
} C;

/* Events seen by the last cut (or the start, or a fork): read by ag_chunk_unsent on any
 * thread, written by bg. */
static _Atomic uint64_t g_seen_at_cut;

static uint64_t seen_total(void) {
    uint64_t n = 0;
    for (int t = 1; t < CM_EV_COUNT; t++)
        n += atomic_load_explicit(&ag_events_seen[t], memory_order_relaxed);
    return n;
}

/* Any thread, async-signal-safe (atomics only): 1 if samples were taken since the last cut or
 * spans wait for one -- what a process that ends now without its exit chunk would lose. */
int ag_chunk_unsent(void) {
    return seen_total() != atomic_load(&g_seen_at_cut) || ag_spans_pending();
}

void ag_chunk_begin(uint64_t start_real, uint64_t agent_cpu0, uint64_t proc_cpu0) {
    C.chunk_start_real = start_real;
    C.bg_cpu0 = agent_cpu0;
    C.proc_cpu0 = proc_cpu0;
    C.enc_ratio = 1;
}

/* split a heavy interval: the estimate scaled by what the last chunk compressed to, at least
 * 1/4 (rows that compressed well may be followed by rows that do not) */
int ag_chunk_full(const ag_builder_t *b) {
    return (double)ag_builder_bytes(b) * C.enc_ratio > (double)AG_CHUNK_SOFT;
}

/* at_exit: the process is exiting. Its last chunk is sent only if it has something to say
 * (a row or a drop): a process that exits before its first sample (a short-lived fork/exec'd
 * helper) writes nothing at all, so that it costs microseconds. */
/* Under g_work (b NULL before bg_main's start: nothing built yet). */
int ag_chunk_nothing_to_say(const ag_builder_t *b) {
    for (int t = 1; t < CM_EV_COUNT; t++)
        if ((b && ag_builder_samples(b, (cm_event_type_t)t)) ||
            atomic_load(&ag_events_seen[t]) != C.seen0[t])
            return 0;
    for (int t = 0; t < CM_EV_COUNT; t++)
        for (int r = 1; r < AG_DROP_REASONS; r++)
            if (atomic_load(&ag_drops[t][r]) != C.drops0[t][r])
                return 0;
    /* live sampled objects (INUSE rows) need an ALLOC sample at some point; aggregates a slot;
     * spans ended since the last cut or still open are carried by the exit chunk */
    return atomic_load(&ag_events_seen[CM_EV_ALLOC]) == 0 && !ag_agg_any() &&
           !ag_spans_pending();
}

/* The sampling rows (period, set point, events seen since seen0, samples kept) of each event
 * type that is on; returns their count (at most 5). */
static uint32_t header_sampling(ag_builder_t *b, cm_sampling_t samp[5], const uint64_t *seen) {
    uint32_t ns = 0;
    /* with the flight recorder's own density, the CPU samples seen are the stream's share
     * (recorder/density.c); the rest are the recorder's */
    uint64_t cpu_seen = ag_rd_active() ? ag_rd_stream_seen() - C.stream0
                                                    : seen[CM_EV_CPU] - C.seen0[CM_EV_CPU];
    if (ag.cfg.cpu_rate > 0)
        samp[ns++] = (cm_sampling_t){CM_EV_CPU, (uint64_t)ag.ctl[CM_EV_CPU].period, 0,
                                     (uint32_t)(ag.ctl[CM_EV_CPU].target + 0.5), cpu_seen,
                                     ag_builder_samples(b, CM_EV_CPU)};
    if (ag.cfg.wall_hz > 0)
        samp[ns++] = (cm_sampling_t){CM_EV_WALL, (uint64_t)(1e9 / ag.cfg.wall_hz), 0,
                                     (uint32_t)(ag.cfg.wall_hz * ag.cfg.wall_threads + 0.5),
                                     seen[CM_EV_WALL] - C.seen0[CM_EV_WALL],
                                     ag_builder_samples(b, CM_EV_WALL)};
    return ns + ag_hooks_sampling(b, samp + ns, C.seen0);
}

/* The drops counted since the last cut, as header rows; the baselines move on. */
static uint32_t take_drops(cm_drop_t *drops) {
    uint32_t nd = 0;
    for (int t = 0; t < CM_EV_COUNT; t++)
        for (int r = 1; r < AG_DROP_REASONS; r++) {
            uint64_t v = atomic_load(&ag_drops[t][r]);
            if (v != C.drops0[t][r])
                drops[nd++] = (cm_drop_t){(uint32_t)r, (uint32_t)t, v - C.drops0[t][r]};
            C.drops0[t][r] = v;
        }
    return nd;
}

/* Debug lines: what the agent's CPU estimate is made of, and the symbol tables' cost. */
static void log_costs(const cm_header_t *h) {
    uint64_t n = atomic_load(&ag_handler_ns_n);
    CM_DEBUG("chunk %llu: agent cpu %llu ns (bg thread %llu total, handler body %llu ns x %llu, "
             "signal %llu ns, records %llu of which %llu LOCK, lock hooks %llu ns total), "
             "process cpu %llu ns",
             (unsigned long long)h->sequence, (unsigned long long)h->agent_cpu_ns,
             (unsigned long long)ag_clock_ns(CLOCK_THREAD_CPUTIME_ID),
             (unsigned long long)(n ? atomic_load(&ag_handler_ns_sum) / n : 0),
             (unsigned long long)n, (unsigned long long)ag.signal_cost_ns,
             (unsigned long long)atomic_load(&ag_samples_taken),
             (unsigned long long)atomic_load(&ag_lock_records),
             (unsigned long long)atomic_load(&ag_lock_cost_ns),
             (unsigned long long)h->process_cpu_ns);
    ag_symstats_t ss;
    ag_symbols_stats(&ss);
    CM_DEBUG("symbols: %llu objects opened (%llu function symbols) in %llu ns; %llu lookups "
             "in %llu ns in total, opening included; %llu loads deferred (descriptors); %llu "
             "objects unnamed (no elfutils); %llu objects unnamed (foreign malloc)",
             (unsigned long long)ss.objects, (unsigned long long)ss.symbols,
             (unsigned long long)ss.load_ns, (unsigned long long)ss.lookups,
             (unsigned long long)ss.lookup_ns, (unsigned long long)ss.deferred,
             (unsigned long long)ss.nolib, (unsigned long long)ss.foreign);
    ag_perfmap_stats_t ps;
    ag_remap_stats_t rs;
    ag_perfmap_stats(&ps);
    ag_remap_stats(&rs);
    if (ps.refreshes || rs.scans) /* JIT code (lang/perfmap.c, lang/remap.c) */
        CM_DEBUG("perf map: %" PRIu64 " ranges kept, %" PRIu64 " lines in %" PRIu64
                 " refreshes (%" PRIu64 " bytes), %" PRIu64 " malformed, %" PRIu64
                 " dropped (bounds), %" PRIu64 " restarts; code copies: %" PRIu64 " (%" PRIu64
                 " scans, %" PRIu64 " not kept)", ps.entries, ps.lines, ps.refreshes, ps.bytes,
                 ps.malformed, ps.full, ps.restarts, rs.copies, rs.scans, rs.full);
}

/* Encodes b's rows under header h and hands the frame to the sender; a chunk that cannot be
 * encoded or sent gives its drop counts back (the next chunk reports them). */
static void deliver(ag_builder_t *b, cm_header_t *h, const cm_drop_t *drops, uint32_t nd) {
    uint8_t *frame = NULL;
    size_t len = 0;
    char err[256] = "";
    size_t est = ag_builder_bytes(b);
    int rc = ag_builder_finish(b, h, &frame, &len, err, sizeof err);
    if (rc == 0 && est > 65536) { /* small chunks say little about compression */
        C.enc_ratio = (double)len / (double)est;
        if (C.enc_ratio < 0.25)
            C.enc_ratio = 0.25;
    }
    if (rc == 0 && len > AG_CHUNK_MAX) {
        /* The collector would refuse it (and Kafka could not carry it): files only. Rare:
         * the early cut (AG_CHUNK_SOFT) keeps chunks well below; what it does not see is
         * added at the cut (INUSE rows of a huge live heap, aggregates). */
        if (!C.warned_size++)
            CM_WARN("chunk %llu is %zu bytes, above the %u-byte limit: not sent to the "
                    "collector (written to FLEETPROF_OUTPUT only, if set)",
                    (unsigned long long)h->sequence, len, AG_CHUNK_MAX);
        int filed = ag_sender_write_file(frame, len, h->sequence) == 0;
        /* lost to the collector's pipeline (or, files only, not written): its counts go on */
        if (ag_sender_uses_socket())
            ag_sender_give_back(drops, nd, CM_DROP_ENCODE_FAILED);
        else if (!filed)
            ag_sender_give_back(drops, nd, CM_DROP_OUTPUT_FAILED);
        free(frame);
    } else if (rc == 0) {
        ag_sender_submit(frame, len, h->sequence, drops, nd);
    } else {
        ag_sender_give_back(drops, nd, CM_DROP_ENCODE_FAILED);
        if (!C.warned_encode++)
            CM_WARN("chunk %llu not encoded: %s: %s", (unsigned long long)h->sequence,
                    cm_errname(rc), err);
    }
}

void ag_chunk_cut(ag_builder_t *b, int at_exit) {
    if (at_exit && ag_chunk_nothing_to_say(b))
        return;
    ag_spans_flip(); /* before the cut's time: the spans it closes all ended by then */
    uint64_t end = ag_now_real();
    if (end <= C.chunk_start_real)
        end = C.chunk_start_real + 1;
    cm_header_t h;
    ag_chunk_header_ids(&h, C.chunk_start_real, end, ag.sequence);
    ag_hooks_bg_chunk(b, end); /* INUSE rows and sub-threshold aggregates */
    ag_spans_emit(b, C.chunk_start_real, end);
    uint64_t seen[CM_EV_COUNT];
    for (int t = 1; t < CM_EV_COUNT; t++)
        seen[t] = atomic_load(&ag_events_seen[t]);
    cm_sampling_t samp[5];
    h.sampling = samp;
    h.n_sampling = header_sampling(b, samp, seen);
    cm_drop_t drops[CM_EV_COUNT * AG_DROP_REASONS];
    uint32_t nd = take_drops(drops);
    h.drops = drops;
    h.n_drops = nd;
    h.sequence = ag.sequence++;
    uint64_t a = ag_agent_cpu_now(), p = ag_clock_ns(CLOCK_PROCESS_CPUTIME_ID);
    h.agent_cpu_ns = a - C.bg_cpu0;
    h.process_cpu_ns = p - C.proc_cpu0;
    h.work_units = ag_work_take();
    log_costs(&h);
    deliver(b, &h, drops, nd);
    C.bg_cpu0 = a;
    C.proc_cpu0 = p;
    uint64_t total = 0;
    for (int t = 1; t < CM_EV_COUNT; t++) {
        C.seen0[t] = seen[t];
        total += seen[t];
    }
    C.stream0 = ag_rd_stream_seen();
    atomic_store(&g_seen_at_cut, total);
    C.chunk_start_real = end;
}

void ag_chunk_after_fork_child(void) {
    memset(&C, 0, sizeof C);
    for (int t = 1; t < CM_EV_COUNT; t++) /* the parent's counts are the parent's */
        C.seen0[t] = atomic_load(&ag_events_seen[t]);
    atomic_store(&g_seen_at_cut, seen_total());
    for (int t = 0; t < CM_EV_COUNT; t++)
        for (int r = 0; r < AG_DROP_REASONS; r++)
            C.drops0[t][r] = atomic_load(&ag_drops[t][r]);
}
