/* The loader gate: keeps the agent's own calls that take ld.so's locks (dlopen, dlsym,
 * dl_iterate_phdr) from overlapping a fork made with glibc's _Fork (see loader_gate.c). */
#ifndef AG_LOADER_GATE_H
#define AG_LOADER_GATE_H

#include <sys/types.h>

#include "base.h"

/* Around every dlopen/dlsym/dl_iterate_phdr the agent makes after start (background thread):
 * enter waits while a _Fork is under way. Not in a signal handler. */
AG_HIDDEN void ag_loader_enter(void);
AG_HIDDEN void ag_loader_leave(void);
/* fn() between enter and leave, its result: a lazy dlopen's first load (dwlib.c, pblib.c). */
AG_HIDDEN int ag_loader_call(int (*fn)(void));

/* Calls raw (libc's _Fork) once no agent thread is inside the loader, or after 50 ms (the
 * thread inside may be waiting for something the caller holds). Async-signal-safe. */
AG_HIDDEN pid_t ag_loader_fork(pid_t (*raw)(void));

/* The range [*lo, *hi) its PT_LOAD segments span, of the loaded object that contains addr
 * (dl_iterate_phdr: constructors only, before the gate matters). 0, or -1 if none does. */
AG_HIDDEN int ag_object_range(uintptr_t addr, uintptr_t *lo, uintptr_t *hi);

#endif
