/* mutex_layout.c (issue 13): hook_lock.c reads glibc's private pthread_mutex_t fields only
 * after checking them on the running libc. The check accepts this glibc with its real lock and
 * unlock, and refuses: another libc (no version, or not "2.x"), a glibc older than 2.17, and
 * lock functions that do not leave the fields as glibc's do (a stand-in libc whose lock is a
 * separate flag: the word stays 0 while "held"). */
#include "internal.h"
#include "support/runner.h"

#include <gnu/libc-version.h>
#include <pthread.h>

static int g_flag; /* the stand-in libc's own lock state */
static int other_lock(pthread_mutex_t *m) {
    (void)m;
    g_flag = 1;
    return 0;
}
static int other_unlock(pthread_mutex_t *m) {
    (void)m;
    g_flag = 0;
    return 0;
}
/* A libc that keeps the word but not the owner. */
static int no_owner_lock(pthread_mutex_t *m) {
    m->__data.__lock = 1;
    m->__data.__count++;
    return 0;
}
static int no_owner_unlock(pthread_mutex_t *m) {
    if (--m->__data.__count == 0)
        m->__data.__lock = 0;
    return 0;
}

static void test_this_glibc(void) {
    const char *v = ag_libc_version();
    CHECK(v != NULL && !strcmp(v, gnu_get_libc_version()));
    CHECK(ag_mutex_layout_check(v, pthread_mutex_lock, pthread_mutex_unlock) == 0);
}

static void test_refused(void) {
    CHECK(ag_mutex_layout_check(NULL, pthread_mutex_lock, pthread_mutex_unlock) == -1);
    CHECK(ag_mutex_layout_check("1.2.3", pthread_mutex_lock, pthread_mutex_unlock) == -1);
    CHECK(ag_mutex_layout_check("2.12", pthread_mutex_lock, pthread_mutex_unlock) == -1);
    CHECK(ag_mutex_layout_check("2.36", NULL, pthread_mutex_unlock) == -1);
    CHECK(ag_mutex_layout_check("2.36", other_lock, other_unlock) == -1);
    CHECK(g_flag == 0);
    CHECK(ag_mutex_layout_check("2.36", no_owner_lock, no_owner_unlock) == -1);
}

static const tr_test_t tests[] = {
    {"this_glibc", test_this_glibc},
    {"refused", test_refused},
    {0, 0},
};
TR_MAIN(tests)
