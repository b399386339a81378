/* fleetprof: the in-process agent's public API (libfleetprof.so).
 *
 * The agent starts by itself when the library is loaded (LD_PRELOAD or linked) and is
 * configured by environment only (see agent/README.md). This header is only needed to attach
 * span context and labels to samples, or to force a flush.
 *
 * Threading: every function may be called from any thread, and none of them from a signal
 * handler. Span context and labels are per thread: they describe what the calling thread is
 * doing and are attached to the samples taken on that thread until changed or cleared.
 * All functions are cheap (a few stores) except fleetprof_flush() and the first
 * fleetprof_label_set() of a new key/value combination (interning, takes a lock).
 * When the agent is disabled (FLEETPROF_ENABLED=0) every function is a no-op returning 0.
 */
#ifndef FLEETPROF_H
#define FLEETPROF_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(FLEETPROF_BUILDING)
#define FLEETPROF_EXTERN __attribute__((visibility("default")))
#else
#define FLEETPROF_EXTERN
#endif

#define FLEETPROF_LABELS_MAX 4       /* labels per thread */
#define FLEETPROF_LABEL_KEY_MAX 32   /* bytes, without the NUL */
#define FLEETPROF_LABEL_VALUE_MAX 64 /* bytes, without the NUL */

/* Sets the calling thread's span context (W3C ids: 16-byte trace id, 8-byte span id).
 * An all-zero trace id clears the context. */
FLEETPROF_EXTERN void fleetprof_span_set(const uint8_t trace_id[16], const uint8_t span_id[8]);
/* Clears the calling thread's span context. */
FLEETPROF_EXTERN void fleetprof_span_clear(void);
/* Parses a W3C traceparent "00-<32 hex>-<16 hex>-<2 hex>" and sets the context.
 * Returns 0, or -EINVAL (context unchanged) for a malformed value or all-zero ids. */
FLEETPROF_EXTERN int fleetprof_span_set_traceparent(const char *traceparent);

/* Named spans with their real duration (requests, operations): fleetprof_span_begin sets the
 * calling thread's span context like fleetprof_span_set_traceparent, names the span (the
 * endpoint or operation, e.g. "GET /checkout"; NULL or "": unnamed; cut at 128 bytes) and
 * records its start; fleetprof_span_end records its end and restores the context the thread
 * had before the begin (spans nest, up to 8 deep per thread). Each chunk carries the spans
 * that ended in its interval and the outermost span of each thread still active at its end.
 * Cost: two clock reads and a few stores, no lock once a name was seen (the first begin with
 * a new name interns it under a lock; at most 1024 names). Spans beyond the bounds (16384
 * ended per chunk, 1024 threads in a span, 8 deep) are counted span_limit in the chunk.
 * begin returns 0, or -EINVAL (nothing changed) for a malformed traceparent or all-zero ids;
 * end returns 0, or -ENOENT when the thread has no span begun. */
FLEETPROF_EXTERN int fleetprof_span_begin(const char *traceparent, const char *name);
FLEETPROF_EXTERN int fleetprof_span_begin_ids(const uint8_t trace_id[16], const uint8_t span_id[8],
                                              const char *name);
FLEETPROF_EXTERN int fleetprof_span_end(void);

/* Sets label key=value on the calling thread (replaces the key's previous value).
 * Returns 0, -EINVAL for a NULL/empty key or a key/value over the limits above, or -ENOSPC
 * when the thread already holds FLEETPROF_LABELS_MAX other keys. */
FLEETPROF_EXTERN int fleetprof_label_set(const char *key, const char *value);
/* Removes label key from the calling thread. Returns 0, or -ENOENT if it was not set. */
FLEETPROF_EXTERN int fleetprof_label_clear(const char *key);

/* Counts `units` units of work done (requests served, jobs run): each chunk carries the units
 * counted in its interval, so a diff can compare versions per unit of work instead of per
 * second (`fleetprof diff --per request`). One relaxed atomic add; async-signal-safe. */
FLEETPROF_EXTERN void fleetprof_work_done(uint64_t units);

/* Ends the current chunk now and writes/sends it (FLEETPROF_OUTPUT, collector). Blocks up to
 * 5 s for the background thread. Returns 0, -ETIMEDOUT, or -ESRCH if the agent is not
 * running. */
FLEETPROF_EXTERN int fleetprof_flush(void);

/* Asks the flight recorder (FLEETPROF_RECORDER=1) for an incident capture now, trigger
 * "manual": the seconds it holds plus its burst after are sent as one incident. Cheap (an
 * atomic store and a wake); the background thread does the work. Returns 0, -ENOTSUP when
 * the recorder is off, or -ESRCH if the agent is not running. A request within the cooldown
 * or past the cap is counted, not captured. */
FLEETPROF_EXTERN int fleetprof_capture(void);

/* Returns 1 if the agent is running in this process, else 0. */
FLEETPROF_EXTERN int fleetprof_enabled(void);

#ifdef __cplusplus
}
#endif

#endif
