/* The wall-clock sampler (wall.c). bg thread only. */
#ifndef AG_WALL_H
#define AG_WALL_H

#include "base.h"

typedef struct ag_builder ag_builder_t;
/* One tick at monotonic time now: up to cfg.wall_threads threads sampled, from the slot after
 * the last one the previous tick reached, each weighted by the time since its last tick. Adds
 * the samples taken without a signal to b; signalled threads record theirs in their rings. */
AG_HIDDEN void ag_wall_tick(ag_builder_t *b, uint64_t now);
/* A tick of the flight recorder's own (recorder/density.c): up to cfg.wall_threads threads
 * that need no signal sampled for the recorder alone (its rotation, its weights). */
AG_HIDDEN void ag_wall_tick_extra(ag_builder_t *b, uint64_t now);
AG_HIDDEN void ag_wall_after_fork_child(void);
/* Wall samples recorded without a signal (not charged a signal's cost: cpuacct.c). */
AG_HIDDEN extern _Atomic uint64_t ag_wall_reused;

#endif
