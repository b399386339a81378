/* See cm/thread.h. */
#include "cm/thread.h"

#include <time.h>

void cm_cond_init_monotonic(pthread_cond_t *cv) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

void cm_thread_stop(pthread_mutex_t *mu, pthread_cond_t *cv, int *stop, pthread_t th) {
    pthread_mutex_lock(mu);
    *stop = 1;
    pthread_cond_signal(cv);
    pthread_mutex_unlock(mu);
    pthread_join(th, NULL);
}
