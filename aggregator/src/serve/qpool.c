/* Bounded pool of query store handles (see qpool.h). A free list of handles, a count of
 * waiters, one condition variable; a handle is opened outside the lock on its first lease.
 * Threading: any thread; the mutex is held only to take or give back a slot. */
#include "qpool.h"

#include "cm/error.h"
#include "cm/log.h"
#include "cm/thread.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct agg_qpool {
    char *dir;
    agg_qpool_cfg_t cfg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    agg_qstore_t **handles; /* cfg.workers slots: an opened handle or NULL (not yet opened) */
    size_t *free_slots;     /* stack of free slot indexes */
    size_t n_free, waiting, peak_running;
    uint64_t leased, refused_full, refused_timeout;
    double wait_seconds;
};

int agg_qpool_new(const char *dir, const agg_qpool_cfg_t *cfg, agg_qpool_t **out, char *err,
                  size_t err_size) {
    if (cfg->workers < 1)
        return CM_EINVAL;
    agg_qpool_t *p = calloc(1, sizeof *p);
    if (!p)
        return CM_ENOMEM;
    p->cfg = *cfg;
    p->dir = strdup(dir);
    p->handles = calloc(cfg->workers, sizeof *p->handles);
    p->free_slots = calloc(cfg->workers, sizeof *p->free_slots);
    pthread_mutex_init(&p->mu, NULL);
    cm_cond_init_monotonic(&p->cv);
    if (!p->dir || !p->handles || !p->free_slots) {
        agg_qpool_free(p);
        return CM_ENOMEM;
    }
    int rc = agg_qstore_open(dir, &p->handles[0], err, err_size);
    if (rc) {
        agg_qpool_free(p);
        return rc;
    }
    /* slot 0 on top: a lone client keeps using the handle with warm caches */
    for (size_t i = 0; i < cfg->workers; i++)
        p->free_slots[p->n_free++] = cfg->workers - 1 - i;
    *out = p;
    return 0;
}

void agg_qpool_free(agg_qpool_t *p) {
    if (!p)
        return;
    if (p->handles)
        for (size_t i = 0; i < p->cfg.workers; i++)
            agg_qstore_close(p->handles[i]);
    free(p->handles);
    free(p->free_slots);
    free(p->dir);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Takes a free slot (p->mu held, n_free > 0; unlocks it) and opens its handle on first use. */
static int lease(agg_qpool_t *p, agg_qstore_t **out) {
    size_t slot = p->free_slots[--p->n_free];
    size_t running = p->cfg.workers - p->n_free;
    if (running > p->peak_running)
        p->peak_running = running;
    p->leased++;
    agg_qstore_t *qs = p->handles[slot];
    pthread_mutex_unlock(&p->mu);
    if (!qs) { /* first lease of this slot: open outside the lock (scans the directory) */
        char err[512];
        int rc = agg_qstore_open(p->dir, &qs, err, sizeof err);
        pthread_mutex_lock(&p->mu);
        if (rc) {
            p->free_slots[p->n_free++] = slot;
            pthread_cond_signal(&p->cv);
            pthread_mutex_unlock(&p->mu);
            CM_WARN("query: %s", err);
            return rc == -EBUSY ? CM_EIO : rc; /* -EBUSY: the pool saturated, to the caller */
        }
        p->handles[slot] = qs;
        pthread_mutex_unlock(&p->mu);
    }
    *out = qs;
    return 0;
}

int agg_qpool_acquire(agg_qpool_t *p, agg_qstore_t **out, agg_qpool_busy_t *busy) {
    pthread_mutex_lock(&p->mu);
    if (!p->n_free) {
        if (p->waiting >= p->cfg.queue) {
            p->refused_full++;
            *busy = (agg_qpool_busy_t){p->cfg.workers, p->waiting, 0};
            pthread_mutex_unlock(&p->mu);
            return -EBUSY;
        }
        double t0 = mono_s();
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_sec += p->cfg.wait_ms / 1000;
        dl.tv_nsec += (p->cfg.wait_ms % 1000) * 1000000;
        if (dl.tv_nsec >= 1000000000) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000;
        }
        p->waiting++;
        int rc = 0;
        while (!p->n_free && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&p->cv, &p->mu, &dl);
        p->waiting--;
        p->wait_seconds += mono_s() - t0;
        if (!p->n_free) {
            p->refused_timeout++;
            *busy = (agg_qpool_busy_t){p->cfg.workers, p->waiting, 1};
            pthread_mutex_unlock(&p->mu);
            return -EBUSY;
        }
    }
    return lease(p, out);
}

int agg_qpool_try_acquire(agg_qpool_t *p, agg_qstore_t **out) {
    pthread_mutex_lock(&p->mu);
    if (!p->n_free || p->waiting) { /* never ahead of a request that waits */
        pthread_mutex_unlock(&p->mu);
        return -EBUSY;
    }
    return lease(p, out);
}

void agg_qpool_release(agg_qpool_t *p, agg_qstore_t *qs) {
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->cfg.workers; i++)
        if (p->handles[i] == qs) {
            p->free_slots[p->n_free++] = i;
            break;
        }
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void agg_qpool_stats(agg_qpool_t *p, agg_qpool_stats_t *s) {
    pthread_mutex_lock(&p->mu);
    *s = (agg_qpool_stats_t){p->cfg.workers, p->cfg.workers - p->n_free, p->waiting,
                             p->peak_running, p->leased, p->refused_full, p->refused_timeout,
                             p->wait_seconds};
    pthread_mutex_unlock(&p->mu);
}
