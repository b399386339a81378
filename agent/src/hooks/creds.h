/* Our thread takes the credentials of a thread that changes its own (creds.c). */
#ifndef AG_CREDS_H
#define AG_CREDS_H

#include "base.h"

AG_HIDDEN void ag_creds_serve(void); /* bg thread: take the posted credentials, if any */
AG_HIDDEN int ag_creds_prctl_op(long op, long a2); /* a prctl that changes credentials? */
AG_HIDDEN int ag_creds_syscall_nr(long nr, long a0, long a1); /* such a raw syscall? */
AG_HIDDEN void ag_creds_changed(void); /* app thread, after such a call: wait for ours */
AG_HIDDEN void ag_creds_after_fork_child(void);
AG_HIDDEN extern _Atomic uint64_t ag_creds_mirrors, ag_creds_failures, ag_creds_stuck;
AG_HIDDEN void ag_creds_serve_quick(void); /* the same inside a step that may hold a lock */
AG_HIDDEN void ag_creds_quit_point(void);  /* bg thread, no lock held: exits on a give-up */

#endif
