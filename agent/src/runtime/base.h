/* Definitions every agent module shares: visibility, sanitizer attributes, the fixed limits.
 * Nothing here is exported (libfleetprof.so exports agent/include/fleetprof.h only). */
#ifndef AG_BASE_H
#define AG_BASE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define AG_HIDDEN __attribute__((visibility("hidden")))
/* GCC's copy() attribute gives an alias the attributes of its target (else -Wmissing-attributes);
 * clang does not know it and needs nothing. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 9
#define AG_COPY_ATTRS(fn) copy(fn),
#else
#define AG_COPY_ATTRS(fn)
#endif
/* For libc interposers: a sanitizer runtime may call them (as its "real" function) before it
 * is initialised, so they must not call into it. */
#define AG_NO_TSAN __attribute__((no_sanitize("thread")))
/* The next definition of a libc function the agent interposes (dlsym RTLD_NEXT, <dlfcn.h>),
 * looked up on first use and kept; NULL if there is none. */
#define AG_NEXT_FN(type, name)                                                                     \
    ({                                                                                             \
        static _Atomic(type) next_;                                                                \
        type f_ = atomic_load(&next_);                                                             \
        if (!f_) {                                                                                 \
            f_ = (type)dlsym(RTLD_NEXT, name);                                                     \
            atomic_store(&next_, f_);                                                              \
        }                                                                                          \
        f_;                                                                                        \
    })

#define AG_MAX_THREADS 1024          /* registry slots; beyond: DROP_THREAD_LIMIT */
#define AG_MAX_DEPTH 128             /* frames per sample; deeper stacks are truncated */
#define AG_RING_SIZE (32u << 10)     /* bytes per thread ring, power of two */
#define AG_DROP_REASONS 18           /* cm_drop_reason_t values + 1 */

#endif
