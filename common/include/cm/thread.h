/* Small pthread helpers shared by the daemons' background threads (aggregator: the HTTP
 * reaper, the query pool, the report thread, the SQLite checkpointer). */
#ifndef CM_THREAD_H
#define CM_THREAD_H

#include <pthread.h>

/* Initializes cv to measure pthread_cond_timedwait deadlines on CLOCK_MONOTONIC (a wall-clock
 * step neither shortens nor stretches a wait). */
void cm_cond_init_monotonic(pthread_cond_t *cv);

/* Stops a thread that waits on cv for work or for *stop: sets *stop to 1 under mu, signals cv
 * and joins th. */
void cm_thread_stop(pthread_mutex_t *mu, pthread_cond_t *cv, int *stop, pthread_t th);

#endif
