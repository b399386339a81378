/* Exports of a profile: pprof (gzipped profile.proto that `go tool pprof` reads) and folded
 * stacks ("root;caller;leaf value", read by flamegraph.pl, speedscope, inferno).
 * Threading: reads the profile only; outputs are malloc'ed and owned by the caller. */
#ifndef AGG_EXPORT_H
#define AGG_EXPORT_H

#include "profile.h"

#include <stddef.h>
#include <stdint.h>

/* pprof sample types of an event type: values[0] is the count ("samples"/"count",
 * "alloc_objects"/"count", "contentions"/"count", ...), values[1] the weight ("cpu"/
 * "nanoseconds", "alloc_space"/"bytes", "delay"/"nanoseconds", ...). */
void agg_pprof_sample_types(cm_event_type_t type, const char *names[2], const char *units[2]);

/* Serializes p as a gzipped pprof Profile into *out (malloc'ed, *out_len bytes). One Sample
 * per distinct (stack, context): values {events, weight} (events rounded from milli-events),
 * locations leaf first, labels trace_id (32 hex) and span_id (16 hex) when the rows carry a
 * context. Functions and locations: one per frame (ids = frame id + 1); mappings: one per
 * distinct (module, build id), with has_functions set so pprof does not try to symbolize.
 * Returns 0 or CM_ENOMEM / CM_ECOMPRESS. */
int agg_export_pprof(const agg_profile_t *p, uint8_t **out, size_t *out_len);

/* Folded stacks, one line per distinct stack "root;...;leaf value\n", value = summed weight
 * (counts = 1: events instead), sorted by value descending then text. ';' in a name becomes
 * ':' and whitespace '_', as `fleetprof fold` does. Empty stacks print as "[unknown]". Returns 0
 * or CM_ENOMEM; *out is NUL-terminated, *out_len excludes the NUL. */
int agg_export_folded(const agg_profile_t *p, int counts, char **out, size_t *out_len);

#endif
