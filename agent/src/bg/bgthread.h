/* The background thread: start, stop, wake (bgthread.c). */
#ifndef AG_BGTHREAD_H
#define AG_BGTHREAD_H

#include "base.h"
#include <sys/types.h>

/* The bg thread's first sleep: what a process that is gone within it never pays for */
#define AG_START_DELAY_NS 20000000ull
AG_HIDDEN int ag_bg_start(void);
AG_HIDDEN void ag_bg_stop(void); /* final flush, joins */
/* A child forked without atfork handlers (sandbox.c): stop profiling, take no lock. */
AG_HIDDEN void ag_bg_forget_child(void);
AG_HIDDEN void ag_bg_force_join(void); /* the next ag_bg_stop joins the thread, always */
AG_HIDDEN int ag_bg_alive(void);       /* started and not stopped */
AG_HIDDEN pid_t ag_bg_tid(void);       /* its tid once it ran, else 0 (async-signal-safe) */
AG_HIDDEN __attribute__((noreturn)) void ag_bg_quit(void); /* bg thread, no lock held: ends it */
AG_HIDDEN void ag_bg_wake(int req); /* async-signal-safe */

#endif
