/* Human-readable tables of the views and the diff, for the CLI (its default output), and the
 * CI deploy gate of `fleetprof diff --fail-on-regression PCT`.
 * Threading: reads the results only; writes to the caller's FILE. */
#ifndef AGG_PRINT_H
#define AGG_PRINT_H

#include "diff.h"
#include "views.h"

#include <stdio.h>

/* Formats a value of an event type's unit with a scaled unit: "1.25s", "830ms", "12.0us",
 * "512ns", "3.00MB", "12.5KB", "100B". */
void agg_format_value(cm_event_type_t type, double v, char *buf, size_t size);

/* Header (total, samples, functions), the entries, and a line counting the functions the
 * limit left out. */
void agg_top_print(FILE *f, const agg_profile_t *p, const agg_top_t *t);

/* For a profile read with lines (top/tree --lines): when no frame has a source line, a line
 * saying why (the agent ran without FLEETPROF_LINES=1, no debug file found) and what to do. */
void agg_lines_note_print(FILE *f, const agg_profile_t *p);

/* Indented tree, one node per line: total, share of the root, self, name; then a line
 * counting the call paths folded into "(other)" nodes, if any. */
void agg_tree_print(FILE *f, const agg_profile_t *p, const agg_tree_t *t);

/* Summary (totals per unit of work, samples, replicates, common ratio, warnings) then the
 * entries (limit 0 = all): class, base, test, change, overweight, responsibility, q, name.
 * Values per second of work. */
void agg_diff_print(FILE *f, const agg_diff_t *d, size_t limit);

/* The deploy gate: returns 1 when a significant regression's change of its tested cost is at
 * least pct percent of the base total (per unit of work), naming it in why; else 0. */
int agg_diff_gate(const agg_diff_t *d, double pct, char *why, size_t why_size);

#endif
