/* RLIMIT_SIGPENDING slots the agent may take (sigroom.c). */
#ifndef AG_SIGROOM_H
#define AG_SIGROOM_H

#include "base.h"

AG_HIDDEN extern int ag_sigroom_off;  /* no timer, wall request or wake signal at all */
#define AG_SIGROOM_POLL_MS 50         /* then the bg thread's longest sleep */
AG_HIDDEN void ag_sigroom_init(void); /* constructor, before any timer */
AG_HIDDEN int ag_sigroom_take_timer(void); /* 0: none (counted signal_limit) */
AG_HIDDEN void ag_sigroom_give_timer(void);
AG_HIDDEN void ag_sigroom_fork_child(void);
AG_HIDDEN int ag_sigroom_wall_ok(uint32_t in_flight); /* 0: not sent (counted) */
AG_HIDDEN int ag_sigroom_walls_limited(void);

#endif
