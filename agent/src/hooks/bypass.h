/* Hooks with nothing to do, out of the program's call path (bypass.c). */
#ifndef AG_BYPASS_H
#define AG_BYPASS_H

#include "base.h"

#include <stddef.h>
#include <stdint.h>

/* The name of a hook (an exported interposer of ours) and the function it forwards to. */
typedef struct {
    const char *name;
    uintptr_t real;
} ag_bypass_t;

typedef struct ag_bypass_stats {
    uint32_t objects; /* objects with a slot rewritten */
    uint32_t slots;   /* slots rewritten */
    uint32_t foreign; /* slots of a listed name bound elsewhere: left alone */
    uint32_t failed;  /* slots whose read-only page could not be opened (mprotect) */
} ag_bypass_stats_t;

/* Rewrites, in every loaded object but ld.so, libc, the vDSO and the agent (its image: [self_lo,
 * self_hi), ag_self_lo/ag_self_hi in the agent), the GOT slots of the n listed names that
 * resolve into the agent (to our hook of that name) to the real function. Only where every
 * loaded object is relocated and no dlopen is under way (see bypass.c). */
AG_HIDDEN void ag_bypass_apply(const ag_bypass_t *b, size_t n, uintptr_t self_lo,
                               uintptr_t self_hi, ag_bypass_stats_t *st);

/* The address of the first definition of function `name` (a defined dynamic symbol, not a
 * canonical PLT entry) in load order, skipping the object that holds address `self`; 0 if
 * none (bypass.c). */
AG_HIDDEN uintptr_t ag_definition_of(const char *name, uintptr_t self);

#endif
