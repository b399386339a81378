/* Thread states from /proc/self/task/TID/stat, descriptors kept open (procstat.c). bg thread. */
#ifndef AG_PROCSTAT_H
#define AG_PROCSTAT_H

#include "base.h"
#include <sys/types.h>

/* Is the thread in slot `slot` (tid) running or runnable ('R')? 0 also when unreadable. */
AG_HIDDEN int ag_procstat_running(uint32_t slot, pid_t tid);
/* Closes the descriptors of threads that are gone (all = 1: every one, fork child). */
AG_HIDDEN void ag_procstat_sweep(int all);

#endif
