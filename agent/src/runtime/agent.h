/* The agent's global state and lifecycle (agent.c). */
#ifndef AG_AGENT_H
#define AG_AGENT_H

#include "base.h"
#include "config.h"
#include "controller.h"
#include <sys/types.h>

enum { AG_REQ_FLUSH = 1, AG_REQ_STOP = 2, AG_REQ_SIGTERM = 4, AG_REQ_CAPS = 8 };
typedef struct {
    ag_config_t cfg;
    pid_t pid;
    char host[256];
    uint64_t process_start_ns;
    _Atomic int running;          /* handlers record only when set */
    _Atomic int requests;         /* AG_REQ_* bits */
    _Atomic uint64_t flush_done;  /* generation counter of completed flushes */
    ag_ctl_t ctl[CM_EV_COUNT];
    _Atomic uint64_t cpu_period_ns; /* period in force, read by the handler */
    uint64_t signal_cost_ns;      /* calibrated kernel delivery cost per sample */
    uint64_t sequence;            /* next chunk sequence number */
} ag_state_t;
AG_HIDDEN extern ag_state_t ag;
AG_HIDDEN uint64_t ag_process_start_ns(void); /* agent.c; bg thread */
/* agent.c: in a child forked without our atfork handlers? Then profiling stops (1). */
AG_HIDDEN int ag_unseen_child(void);
/* The destructor's work: timers off, last chunk written, bg thread joined, running = 0. */
AG_HIDDEN void ag_agent_stop(void);

#endif
