/* Incidents in the agent: the flight recorder (flightrec.c) and its triggers (triggers.c).
 *
 * The recorder keeps the last FLEETPROF_RECORDER_WINDOW of CPU and wall samples, encoded as
 * one-second chunks (segments) that are never sent; a trigger makes them, plus a burst after
 * it, an incident capture (chunk format minor 3, proto message Incident). Everything runs on
 * the background thread under ag_work_mu, except fleetprof_capture() (any thread: one atomic
 * store and a wake) and the span counters (app threads: relaxed atomic adds).
 */
#ifndef AG_INCID_H
#define AG_INCID_H

#include "internal.h"

/* flightrec.c (bg) */
AG_HIDDEN void ag_fr_start(uint64_t now_real);   /* bg thread start (no-op when off) */
AG_HIDDEN void ag_fr_stop(void);                 /* bg thread end: frees everything */
/* a drained CPU or WALL record (bgthread.c: drain, wall_add) */
AG_HIDDEN void ag_fr_add(const ag_thread_t *t, pid_t tid, const ag_rec_t *r);
/* every loop pass, after the drain: triggers, segment cuts, captures out */
AG_HIDDEN void ag_fr_tick(uint64_t now_mono);
/* the process exits (bg, before the last chunk's cut): a capture in progress goes out */
AG_HIDDEN void ag_fr_exit(void);
/* Starts a capture; returns 0, or the drop reason that suppressed it (counted). */
AG_HIDDEN int ag_fr_capture(const char *trigger, double threshold, double value);
AG_HIDDEN int ag_fr_capturing(void);
AG_HIDDEN int ag_fr_on(void); /* the recorder records (started, on) */

/* density.c (bg): the recorder's own sampling density, the stream's split, its budget */
/* 1 while the recorder is on with a density above 1: records are split (else the stream's) */
AG_HIDDEN int ag_rd_split(void);
/* 1 while that split is in force: configured so and the recorder recording (ag_fr_on) */
static inline int ag_rd_active(void) { return ag_rd_split() && ag_fr_on(); }
/* the recorder's effective density (1 + f (FLEETPROF_RECORDER_DENSITY - 1); 1 when off) */
AG_HIDDEN double ag_rd_density(void);
AG_HIDDEN double ag_rd_factor(void); /* f, the budget's factor on the extra density */
/* the recorder's wall ticks per stream tick: 1 up to f = 1/2, then up to the density at f = 1 */
AG_HIDDEN double ag_rd_wall_density(void);
/* the CPU timers' period for a stream period (ns) */
AG_HIDDEN uint64_t ag_rd_timer_period(double stream_period);
/* A drained CPU record r of thread t (already given to the recorder): 1 if it is the stream's,
 * its weight and count then rewritten as a timer of the stream's period would have them. */
AG_HIDDEN int ag_rd_cpu_split(ag_thread_t *t, ag_rec_t *r, double stream_period);
AG_HIDDEN uint64_t ag_rd_stream_seen(void); /* CPU records kept for the stream so far */
AG_HIDDEN void ag_rd_charge(uint64_t ns);   /* recorder work measured on the bg thread */
AG_HIDDEN uint64_t ag_rd_charged(void);
/* once a budget window: the recorder's extra work over the process's CPU */
AG_HIDDEN void ag_rd_budget_step(double extra_ns, double proc_ns, double wall_ns);
AG_HIDDEN void ag_rd_reset(void);

/* triggers.c (bg) */
AG_HIDDEN void ag_trig_reset(uint64_t now_mono);
AG_HIDDEN void ag_trig_eval(uint64_t now_mono);
AG_HIDDEN extern _Atomic int ag_trig_manual; /* fleetprof_capture() asked */
/* A manual capture asked from outside the process (the collector's capture command, read by
 * the sender): the same as fleetprof_capture(), on the next loop pass. Any thread. */
static inline void ag_fr_request_capture(void) { atomic_store(&ag_trig_manual, 1); }
/* the capture signal's number, from its handler (signal.c: one atomic store and a wake) */
AG_HIDDEN extern _Atomic int ag_trig_signal;
/* bg (flightrec.c): a drained alloc/lock/io record's weight (bytes, wait ns) */
AG_HIDDEN void ag_trig_add_weight(uint32_t type, uint64_t weight);
/* requests ended since the start (flightrec.c: a segment's work_units) */
AG_HIDDEN uint64_t ag_trig_requests_ended(void);
/* app threads, fleetprof_span_end: a request of duration_ns named name (spans.c's id, 0:
 * unnamed) ended */
AG_HIDDEN void ag_trig_span_ended(uint64_t duration_ns, uint32_t name);
/* spans.c, under its name lock, before the name's id is published: name id is s (len bytes);
 * its slow threshold is looked up once (FLEETPROF_SLOW_MS_BY_ENDPOINT) */
AG_HIDDEN void ag_trig_name_added(uint32_t id, const char *s, size_t len);
/* the slow threshold of name id: its endpoint's, else dflt */
AG_HIDDEN uint64_t ag_trig_slow_ns(uint32_t id, uint64_t dflt);

/* spans.c (bg): spans active now, how many began at least their slow threshold before
 * now_real (ag_trig_slow_ns of their name, slow_ns by default), and the oldest one's age (0 if
 * none). */
AG_HIDDEN uint32_t ag_spans_active_stats(uint64_t now_real, uint64_t slow_ns, uint32_t *slow,
                                         uint64_t *oldest_ns);

#endif
