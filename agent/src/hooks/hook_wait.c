/* Blocking calls that are neither I/O nor locks: poll, ppoll, select, pselect, epoll_wait,
 * epoll_pwait, nanosleep, clock_nanosleep, sleep, usleep, pause, sigsuspend, sigwait,
 * sigwaitinfo, sigtimedwait, pthread_join, sem_wait, sem_timedwait, wait, waitpid, waitid.
 *
 * They are not timed and make no events: each call is only marked as blocking (hooks.h:
 * ag_blk_begin/end, two stores to the thread's own cache line) so that the wall sampler walks
 * the stack of a thread blocked in one of them instead of signalling it (wall.c:
 * wall_from_blocked). A signal would wake it: poll, epoll_wait, select, nanosleep and the others
 * fail with EINTR when a handler runs, SA_RESTART or not, and a program that does not retry
 * sees the error. glibc's sleep and usleep call nanosleep internally (not through the PLT), so
 * they are hooked themselves. On when wall sampling is (FLEETPROF_WALL_HZ > 0); a plain
 * forward when the agent is off, inside a hook's slow path and on agent threads.
 * Contract: no locks, no allocation, errno untouched.
 */
#include "hooks.h"

#include <dlfcn.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static inline int wait_on(void) {
    return AG_LIKELY(atomic_load_explicit(&ag_hooks_state, memory_order_relaxed) > 0) &&
           ag_hcfg.wait_on && !ag_hook_guard;
}

/* The real functions, looked up by the constructor below (hooks.h, AG_REAL_DECLARE): an
 * application's signal handler may call nanosleep, sigsuspend or waitpid. */
#define WAIT_FUNCS(X)                                                                              \
    X(poll) X(ppoll) X(select) X(pselect) X(epoll_wait) X(epoll_pwait) X(nanosleep)               \
    X(clock_nanosleep) X(sleep) X(usleep) X(pause) X(sigsuspend) X(sigwait) X(sigwaitinfo)        \
    X(sigtimedwait) X(pthread_join) X(sem_wait) X(sem_timedwait) X(wait) X(waitpid) X(waitid)
WAIT_FUNCS(AG_REAL_DECLARE)
__attribute__((constructor(102))) static void wait_init(void) {
    ag_hook_guard++;
    WAIT_FUNCS(AG_REAL_LOOKUP)
    ag_hook_guard--;
}

/* Forwards call (returning ret_t), marked as blocking when the hooks are on. */
#define MARKED(ret_t, call)                                                                        \
    do {                                                                                           \
        if (!wait_on())                                                                            \
            return call;                                                                           \
        ag_thread_t *bt_ = AG_BLK_BEGIN(real);                                                     \
        ret_t r_ = call;                                                                           \
        ag_blk_end(bt_);                                                                           \
        return r_;                                                                                 \
    } while (0)

AG_EXPORT AG_HOT AG_NO_TSAN int poll(struct pollfd *fds, nfds_t n, int timeout) {
    AG_RESOLVE(real, poll);
    MARKED(int, real(fds, n, timeout));
}
AG_EXPORT AG_NO_TSAN int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *ts,
                               const sigset_t *mask) {
    AG_RESOLVE(real, ppoll);
    MARKED(int, real(fds, n, ts, mask));
}
AG_EXPORT AG_NO_TSAN int select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *tv) {
    AG_RESOLVE(real, select);
    MARKED(int, real(n, r, w, e, tv));
}
AG_EXPORT AG_NO_TSAN int pselect(int n, fd_set *r, fd_set *w, fd_set *e,
                                 const struct timespec *ts, const sigset_t *mask) {
    AG_RESOLVE(real, pselect);
    MARKED(int, real(n, r, w, e, ts, mask));
}
AG_EXPORT AG_HOT AG_NO_TSAN int epoll_wait(int fd, struct epoll_event *ev, int n, int timeout) {
    AG_RESOLVE(real, epoll_wait);
    MARKED(int, real(fd, ev, n, timeout));
}
AG_EXPORT AG_NO_TSAN int epoll_pwait(int fd, struct epoll_event *ev, int n, int timeout,
                                     const sigset_t *mask) {
    AG_RESOLVE(real, epoll_pwait);
    MARKED(int, real(fd, ev, n, timeout, mask));
}
AG_EXPORT AG_NO_TSAN int nanosleep(const struct timespec *req, struct timespec *rem) {
    AG_RESOLVE(real, nanosleep);
    MARKED(int, real(req, rem));
}
AG_EXPORT AG_NO_TSAN int clock_nanosleep(clockid_t c, int fl, const struct timespec *req,
                                         struct timespec *rem) {
    AG_RESOLVE(real, clock_nanosleep);
    MARKED(int, real(c, fl, req, rem));
}
AG_EXPORT AG_NO_TSAN unsigned sleep(unsigned s) {
    AG_RESOLVE(real, sleep);
    MARKED(unsigned, real(s));
}
AG_EXPORT AG_NO_TSAN int usleep(useconds_t us) {
    AG_RESOLVE(real, usleep);
    MARKED(int, real(us));
}
AG_EXPORT AG_NO_TSAN int pause(void) {
    AG_RESOLVE(real, pause);
    MARKED(int, real());
}
AG_EXPORT AG_NO_TSAN int sigsuspend(const sigset_t *mask) {
    AG_RESOLVE(real, sigsuspend);
    MARKED(int, real(mask));
}
AG_EXPORT AG_NO_TSAN int sigwait(const sigset_t *set, int *sig) {
    AG_RESOLVE(real, sigwait);
    MARKED(int, real(set, sig));
}
AG_EXPORT AG_NO_TSAN int sigwaitinfo(const sigset_t *set, siginfo_t *info) {
    AG_RESOLVE(real, sigwaitinfo);
    MARKED(int, real(set, info));
}
AG_EXPORT AG_NO_TSAN int sigtimedwait(const sigset_t *set, siginfo_t *info,
                                      const struct timespec *ts) {
    AG_RESOLVE(real, sigtimedwait);
    MARKED(int, real(set, info, ts));
}
AG_EXPORT AG_NO_TSAN int pthread_join(pthread_t th, void **ret) {
    AG_RESOLVE(real, pthread_join);
    MARKED(int, real(th, ret));
}
AG_EXPORT AG_NO_TSAN int sem_wait(sem_t *s) {
    AG_RESOLVE(real, sem_wait);
    MARKED(int, real(s));
}
AG_EXPORT AG_NO_TSAN int sem_timedwait(sem_t *s, const struct timespec *ts) {
    AG_RESOLVE(real, sem_timedwait);
    MARKED(int, real(s, ts));
}
AG_EXPORT AG_NO_TSAN pid_t wait(int *st) {
    AG_RESOLVE(real, wait);
    MARKED(pid_t, real(st));
}
AG_EXPORT AG_NO_TSAN pid_t waitpid(pid_t pid, int *st, int opt) {
    AG_RESOLVE(real, waitpid);
    MARKED(pid_t, real(pid, st, opt));
}
AG_EXPORT AG_NO_TSAN int waitid(idtype_t t, id_t id, siginfo_t *info, int opt) {
    AG_RESOLVE(real, waitid);
    MARKED(int, real(t, id, info, opt));
}
