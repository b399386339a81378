/* The agent's CPU, estimated: this thread's own CPU clock, plus handler cost estimated as
 * samples x (calibrated kernel signal delivery cost + mean measured handler body), plus the
 * lock hooks' own measured cost. bg thread. */
#include "cpuacct.h"
#include "agent.h"
#include "clock.h"
#include "hooks.h"
#include "record.h"
#include "wall.h"

/* Estimated agent CPU so far: this thread + every handler run + the lock hooks' own measured
 * cost. LOCK records are written by the lock hooks, not by a handler: their cost is in
 * ag_lock_cost_ns, so they are charged neither a signal delivery nor a handler body; a wall
 * sample re-recorded by this thread (wall_reuse) had no signal either. (ALLOC and IO records
 * have no measured cost of their own yet: each is charged as one signal.) */
static uint64_t handler_body_ns(void) {
    uint64_t n = atomic_load(&ag_handler_ns_n);
    return n ? atomic_load(&ag_handler_ns_sum) / n : 0;
}

/* What a CPU sample costs the agent's estimate: a signal and a handler body. */
uint64_t ag_cpu_sample_cost_ns(void) { return handler_body_ns() + ag.signal_cost_ns; }

uint64_t ag_agent_cpu_now(void) {
    uint64_t body = handler_body_ns();
    uint64_t lock_recs = atomic_load(&ag_lock_records);
    uint64_t samples = atomic_load(&ag_samples_taken);
    samples = samples > lock_recs ? samples - lock_recs : 0;
    uint64_t signals = 0;
    for (int t = 1; t < CM_EV_COUNT; t++)
        if (t != CM_EV_LOCK)
            signals += atomic_load(&ag_events_seen[t]);
    signals -= atomic_load(&ag_wall_reused);
    return ag_clock_ns(CLOCK_THREAD_CPUTIME_ID) + samples * body + signals * ag.signal_cost_ns +
           atomic_load(&ag_lock_cost_ns);
}
