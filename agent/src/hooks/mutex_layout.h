/* The libc mutex layout check before hook_lock.c reads its fields (mutex_layout.c). */
#ifndef AG_MUTEX_LAYOUT_H
#define AG_MUTEX_LAYOUT_H

#include "base.h"
#include <pthread.h>

/* mutex_layout.c: 0 if the libc is glibc >= 2.17 (version) and a mutex locked and unlocked
 * through lock/unlock shows the private fields hook_lock.c reads; -1 otherwise. */
typedef int (*ag_mutex_fn)(pthread_mutex_t *);
AG_HIDDEN int ag_mutex_layout_check(const char *version, ag_mutex_fn lock, ag_mutex_fn unlock);
AG_HIDDEN const char *ag_libc_version(void); /* gnu_get_libc_version(), NULL if absent */

#endif
