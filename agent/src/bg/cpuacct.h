/* The agent's own CPU, estimated (cpuacct.c). bg thread. */
#ifndef AG_CPUACCT_H
#define AG_CPUACCT_H

#include "base.h"

/* Estimated agent CPU so far (ns): this thread, every handler run, the lock hooks' cost. */
AG_HIDDEN uint64_t ag_agent_cpu_now(void);
/* What a CPU sample costs the agent's estimate: a signal and a handler body (ns). */
AG_HIDDEN uint64_t ag_cpu_sample_cost_ns(void);

#endif
