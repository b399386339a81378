/* TSan builds only: Debian's librdkafka is built with C11 threads, and glibc implements
 * thrd_create, mtx_* and cnd_* by calling its internal pthread functions, past
 * ThreadSanitizer's interceptors. TSan then crashes on librdkafka's threads (it never saw them
 * start) and, once that is fixed, reports false races on everything librdkafka hands between
 * its threads (it never saw the locks). These definitions interpose the C11 functions for the
 * whole process (librdkafka calls them through its PLT) and route them through the pthread
 * functions TSan intercepts; glibc's mtx_t/cnd_t are layout-compatible with pthread's.
 * Not compiled into normal builds; part of fp_common in TSan builds so every program linking
 * librdkafka gets it. Threading: any thread. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <threads.h>

typedef struct {
    thrd_start_t fn;
    void *arg;
} start_t;

static int map(int rc) {
    return rc == 0           ? thrd_success
           : rc == ETIMEDOUT ? thrd_timedout
           : rc == EBUSY     ? thrd_busy
           : rc == ENOMEM    ? thrd_nomem
                             : thrd_error;
}

static void *trampoline(void *p) {
    start_t s = *(start_t *)p;
    free(p);
    return (void *)(intptr_t)s.fn(s.arg);
}

int thrd_create(thrd_t *thr, thrd_start_t fn, void *arg) {
    start_t *s = malloc(sizeof *s);
    if (!s)
        return thrd_nomem;
    s->fn = fn;
    s->arg = arg;
    int rc = pthread_create((pthread_t *)thr, NULL, trampoline, s);
    if (rc)
        free(s);
    return rc == EAGAIN ? thrd_nomem : map(rc);
}

int thrd_join(thrd_t thr, int *res) {
    void *r;
    int rc = pthread_join((pthread_t)thr, &r);
    if (rc == 0 && res)
        *res = (int)(intptr_t)r;
    return map(rc);
}

int thrd_detach(thrd_t thr) { return map(pthread_detach((pthread_t)thr)); }

int mtx_init(mtx_t *m, int type) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    if (type & mtx_recursive)
        pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    int rc = pthread_mutex_init((pthread_mutex_t *)m, &a);
    pthread_mutexattr_destroy(&a);
    return map(rc);
}
int mtx_lock(mtx_t *m) { return map(pthread_mutex_lock((pthread_mutex_t *)m)); }
int mtx_trylock(mtx_t *m) { return map(pthread_mutex_trylock((pthread_mutex_t *)m)); }
int mtx_timedlock(mtx_t *restrict m, const struct timespec *restrict ts) {
    return map(pthread_mutex_timedlock((pthread_mutex_t *)m, ts));
}
int mtx_unlock(mtx_t *m) { return map(pthread_mutex_unlock((pthread_mutex_t *)m)); }
void mtx_destroy(mtx_t *m) { pthread_mutex_destroy((pthread_mutex_t *)m); }

int cnd_init(cnd_t *c) { return map(pthread_cond_init((pthread_cond_t *)c, NULL)); }
int cnd_signal(cnd_t *c) { return map(pthread_cond_signal((pthread_cond_t *)c)); }
int cnd_broadcast(cnd_t *c) { return map(pthread_cond_broadcast((pthread_cond_t *)c)); }
int cnd_wait(cnd_t *c, mtx_t *m) {
    return map(pthread_cond_wait((pthread_cond_t *)c, (pthread_mutex_t *)m));
}
int cnd_timedwait(cnd_t *restrict c, mtx_t *restrict m, const struct timespec *restrict ts) {
    return map(pthread_cond_timedwait((pthread_cond_t *)c, (pthread_mutex_t *)m, ts));
}
void cnd_destroy(cnd_t *c) { pthread_cond_destroy((pthread_cond_t *)c); }

void call_once(once_flag *f, void (*fn)(void)) { pthread_once((pthread_once_t *)f, fn); }

/* librdkafka itself is not instrumented: its atomics (reference counts handing message buffers
 * between its threads and ours) are invisible to TSan, which then reports the free of a buffer
 * we read earlier as a race. Races with a librdkafka frame are suppressed; ours are not. */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) { return "race:librdkafka.so\n"; }
