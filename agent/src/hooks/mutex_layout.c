/* Checks that the running libc's pthread_mutex_t has the layout hook_lock.c reads (glibc's
 * NPTL: __data.__lock, the lock word, first; __data.__owner the holder's tid; __data.__count
 * the recursion depth; __data.__kind the type), before the fast path reads those private
 * fields. Two parts: the libc says it is glibc >= 2.17 (gnu_get_libc_version, looked up with
 * dlsym so that another libc simply lacks it), and a mutex the agent creates behaves as
 * expected when locked and unlocked through the real functions: the word 0 when free and
 * non-zero when held, the owner our tid, a recursive mutex's kind and count. Anything else
 * (another libc, a future layout) and hook_lock.c never reads the fields: every lock goes the
 * plain way (a trylock, then the real lock when busy).
 *
 * Constructor context (hook_lock.c's lock_init), before any agent thread; no allocation.
 */
#include "mutex_layout.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int ag_mutex_layout_check(const char *version, ag_mutex_fn lock, ag_mutex_fn unlock) {
    if (!version || strncmp(version, "2.", 2) != 0 || atoi(version + 2) < 17)
        return -1; /* not glibc, or older than the layout checked here */
    if (!lock || !unlock)
        return -1;
    pid_t tid = (pid_t)syscall(SYS_gettid);
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    if (m.__data.__lock != 0 || m.__data.__owner != 0)
        return -1;
    if (lock(&m) != 0)
        return -1;
    int held = m.__data.__lock != 0 && m.__data.__owner == tid;
    if (unlock(&m) != 0 || !held || m.__data.__lock != 0 || m.__data.__owner != 0)
        return -1;
    pthread_mutexattr_t a;
    pthread_mutex_t r;
    if (pthread_mutexattr_init(&a) != 0 ||
        pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE_NP) != 0 ||
        pthread_mutex_init(&r, &a) != 0)
        return -1;
    pthread_mutexattr_destroy(&a);
    int ok = (r.__data.__kind & 3) == PTHREAD_MUTEX_RECURSIVE_NP;
    if (ok && lock(&r) == 0) {
        if (lock(&r) == 0) {
            ok = r.__data.__lock != 0 && r.__data.__count == 2 && r.__data.__owner == tid;
            unlock(&r);
        } else {
            ok = 0;
        }
        unlock(&r);
        ok = ok && r.__data.__lock == 0 && r.__data.__count == 0;
    } else {
        ok = 0;
    }
    pthread_mutex_destroy(&r);
    return ok ? 0 : -1;
}

const char *ag_libc_version(void) {
    const char *(*f)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "gnu_get_libc_version");
    return f ? f() : NULL;
}
