/* Named spans: fleetprof_span_begin / _end (spans.c). */
#ifndef AG_SPANS_H
#define AG_SPANS_H

#include "base.h"

typedef struct ag_builder ag_builder_t;
/* bg, at a cut: closes the current half of ended spans (waits, bounded, for rows being
 * written), then adds them and the active spans to the chunk being built. */
AG_HIDDEN void ag_spans_flip(void);
AG_HIDDEN void ag_spans_emit(ag_builder_t *b, uint64_t start_ns, uint64_t end_ns);
AG_HIDDEN void ag_spans_after_fork_child(void);
/* 1 when a span ended since the last cut or a thread has one open (in a fork child: one it
 * began itself): the exit chunk has spans to carry even without a sample. */
AG_HIDDEN int ag_spans_pending(void);

#endif
