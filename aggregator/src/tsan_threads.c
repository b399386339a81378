/* ThreadSanitizer builds only: routes C11 threads, mutexes and condition variables to pthreads.
 *
 * Debian's librdkafka starts its threads with glibc's C11 thrd_create, which calls pthread
 * internals that TSan (GCC 12) does not intercept: TSan never sets up those threads and the
 * first malloc in one of them crashes (getaddrinfo -> realloc -> SEGV in the TSan allocator).
 * Defining the three functions in the executable interposes them for librdkafka (the linker
 * exports a symbol a linked shared library references), so its threads are created through the
 * intercepted pthread_create. Linked into executables only when FLEETPROF_SANITIZE=thread.
 * Threading: as pthreads. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <threads.h>

typedef struct {
    thrd_start_t fn;
    void *arg;
} tramp_t;

static void *tramp(void *p) {
    tramp_t t = *(tramp_t *)p;
    free(p);
    return (void *)(intptr_t)t.fn(t.arg);
}

int thrd_create(thrd_t *thr, thrd_start_t fn, void *arg) {
    tramp_t *t = malloc(sizeof *t);
    if (!t)
        return thrd_nomem;
    t->fn = fn;
    t->arg = arg;
    pthread_t pt;
    int rc = pthread_create(&pt, NULL, tramp, t);
    if (rc) {
        free(t);
        return thrd_error;
    }
    *thr = (thrd_t)pt;
    return thrd_success;
}

int thrd_join(thrd_t thr, int *res) {
    void *r;
    if (pthread_join((pthread_t)thr, &r))
        return thrd_error;
    if (res)
        *res = (int)(intptr_t)r;
    return thrd_success;
}

int thrd_detach(thrd_t thr) { return pthread_detach((pthread_t)thr) ? thrd_error : thrd_success; }

/* C11 mutexes and condition variables: glibc implements them on pthread internals that TSan
 * does not see, so librdkafka's locking would look like data races. Same memory layout
 * (glibc's mtx_t/cnd_t are unions of the pthread types). */
_Static_assert(sizeof(mtx_t) >= sizeof(pthread_mutex_t), "mtx_t holds a pthread mutex");
_Static_assert(sizeof(cnd_t) >= sizeof(pthread_cond_t), "cnd_t holds a pthread cond");

int mtx_init(mtx_t *m, int type) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    if (type & mtx_recursive)
        pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
    int rc = pthread_mutex_init((pthread_mutex_t *)m, &a);
    pthread_mutexattr_destroy(&a);
    return rc ? thrd_error : thrd_success;
}
int mtx_lock(mtx_t *m) { return pthread_mutex_lock((pthread_mutex_t *)m) ? thrd_error : thrd_success; }
int mtx_trylock(mtx_t *m) {
    int rc = pthread_mutex_trylock((pthread_mutex_t *)m);
    return rc == 0 ? thrd_success : rc == EBUSY ? thrd_busy : thrd_error;
}
int mtx_timedlock(mtx_t *restrict m, const struct timespec *restrict ts) {
    int rc = pthread_mutex_timedlock((pthread_mutex_t *)m, ts);
    return rc == 0 ? thrd_success : rc == ETIMEDOUT ? thrd_timedout : thrd_error;
}
int mtx_unlock(mtx_t *m) {
    return pthread_mutex_unlock((pthread_mutex_t *)m) ? thrd_error : thrd_success;
}
void mtx_destroy(mtx_t *m) { pthread_mutex_destroy((pthread_mutex_t *)m); }

int cnd_init(cnd_t *c) { return pthread_cond_init((pthread_cond_t *)c, NULL) ? thrd_error : thrd_success; }
int cnd_signal(cnd_t *c) { return pthread_cond_signal((pthread_cond_t *)c) ? thrd_error : thrd_success; }
int cnd_broadcast(cnd_t *c) {
    return pthread_cond_broadcast((pthread_cond_t *)c) ? thrd_error : thrd_success;
}
int cnd_wait(cnd_t *c, mtx_t *m) {
    return pthread_cond_wait((pthread_cond_t *)c, (pthread_mutex_t *)m) ? thrd_error : thrd_success;
}
int cnd_timedwait(cnd_t *restrict c, mtx_t *restrict m, const struct timespec *restrict ts) {
    int rc = pthread_cond_timedwait((pthread_cond_t *)c, (pthread_mutex_t *)m, ts);
    return rc == 0 ? thrd_success : rc == ETIMEDOUT ? thrd_timedout : thrd_error;
}
void cnd_destroy(cnd_t *c) { pthread_cond_destroy((pthread_cond_t *)c); }

/* librdkafka itself is not instrumented: its atomics (reference counts handing message buffers
 * between its threads and ours) are invisible to TSan, which then reports the free of a buffer
 * we read earlier as a race. Races with a librdkafka frame are suppressed; ours are not. */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) { return "race:librdkafka.so\n"; }
