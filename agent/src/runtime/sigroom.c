/* Signal resources: the queued-signal slots of RLIMIT_SIGPENDING are the user's,
 * and the program's own timer_create and sigqueue need them.
 *
 * Every POSIX timer holds one slot for its life (the kernel preallocates its sigqueue entry
 * at timer_create, counted against the limit, even when the timer is idle), and every signal
 * queued with rt_tgsigqueueinfo (a wall request, a wake of the bg thread) holds one until it
 * is taken. The count is the user's (all of the user's processes). At start the agent reads
 * the limit and, when it is under AG_SIGROOM_PROC_BELOW, the user's count (SigQ in
 * /proc/self/status; above, the room is taken as the limit: thousands of queued signals would
 * have to be there), and takes at most a quarter of the room left:
 *   - under AG_SIGROOM_MIN slots (a limit of 1 or 4 as a user with nothing queued): no CPU
 *     timer, no wall request and no wake signal at all (the bg thread then wakes at least
 *     every AG_SIGROOM_POLL_MS); wall ticks that need no signal (a blocked or idle thread's,
 *     or one on CPU with a recent CPU sample) go on;
 *   - else half for per-thread CPU timers (threads beyond: not CPU-sampled) and half for wall
 *     requests in flight (a tick beyond: not taken).
 * Whatever is not taken for want of room is counted DROP_SIGNAL_LIMIT in the chunks (CPU: one
 * per thread without a timer; wall: one per tick not sent), and one info line says so.
 *
 * The other half of the bound, signals queued to a thread that blocks ours, is in signal.c
 * (the sigprocmask interposers). Thread contract: ag_sigroom_init in the constructor; the rest
 * from any thread (atomics).
 */
#include "record.h"
#include "sigroom.h"

#include "cm/log.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#define AG_SIGROOM_PROC_BELOW 16384 /* a limit this low: the user's queued count is read */
#define AG_SIGROOM_MIN 4            /* fewer slots for us: no signal-based sampling at all */

int ag_sigroom_off;
static uint32_t g_timers_max, g_walls_max;
static _Atomic uint32_t g_timers;
static unsigned long long g_limit, g_used;

static unsigned long long sigq_used(void) {
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    unsigned long long used = 0, lim;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "SigQ: %llu/%llu", &used, &lim) == 2)
            break;
    if (f)
        fclose(f);
    return used;
}

void ag_sigroom_init(void) {
    struct rlimit rl;
    g_limit = getrlimit(RLIMIT_SIGPENDING, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY
                  ? (unsigned long long)rl.rlim_cur
                  : ~0ull;
    g_used = g_limit < AG_SIGROOM_PROC_BELOW ? sigq_used() : 0;
    unsigned long long cap = (g_limit > g_used ? g_limit - g_used : 0) / 4;
    ag_sigroom_off = cap < AG_SIGROOM_MIN;
    if (cap > 2ull * AG_MAX_THREADS + 2)
        cap = 2ull * AG_MAX_THREADS + 2;
    g_timers_max = (uint32_t)(cap / 2);
    g_walls_max = (uint32_t)(cap - cap / 2 - 1); /* one for the bg thread's wake */
    if (ag_sigroom_off)
        CM_INFO("CPU and wall sampling off: RLIMIT_SIGPENDING %llu with %llu signals queued by "
                "this user leaves the program too little room (the agent takes at most a "
                "quarter of it, and none under %d); counted as signal_limit",
                g_limit, g_used, 4 * AG_SIGROOM_MIN);
}

static void told(void) {
    static _Atomic int once;
    if (!atomic_exchange(&once, 1))
        CM_INFO("fewer signals: RLIMIT_SIGPENDING %llu with %llu queued by this user; the agent "
                "keeps to %u CPU timers and %u wall requests in flight (a quarter of the room); "
                "the rest is counted as signal_limit", g_limit, g_used, g_timers_max,
                g_walls_max);
}

int ag_sigroom_take_timer(void) {
    if (!ag_sigroom_off && atomic_fetch_add(&g_timers, 1) < g_timers_max)
        return 1;
    if (!ag_sigroom_off) {
        atomic_fetch_sub(&g_timers, 1);
        told();
    }
    ag_drop_count(CM_EV_CPU, CM_DROP_SIGNAL_LIMIT, 1);
    return 0;
}

void ag_sigroom_give_timer(void) { atomic_fetch_sub(&g_timers, 1); }

void ag_sigroom_fork_child(void) { atomic_store(&g_timers, 0); }

/* bg thread, wall tick: may one more request go out, with in_flight not yet taken? */
int ag_sigroom_wall_ok(uint32_t in_flight) {
    if (!ag_sigroom_off && in_flight < g_walls_max)
        return 1;
    if (!ag_sigroom_off)
        told();
    ag_drop_count(CM_EV_WALL, CM_DROP_SIGNAL_LIMIT, 1);
    return 0;
}

int ag_sigroom_walls_limited(void) { return ag_sigroom_off || g_walls_max < AG_MAX_THREADS; }
