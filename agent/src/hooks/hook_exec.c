/* exec and _exit from a profiled process: no signal of ours may be pending on the thread that
 * execs, and a process that ends with _exit still sends its last chunk.
 *
 * The kernel keeps a thread's pending queued signals across execve (it drops only POSIX
 * timer expiries, SI_TIMER, with the timers), and resets every handler to SIG_DFL: a wall
 * request (SI_QUEUE, wall.c) queued to the thread while it is inside execve is delivered
 * in the new image, whose disposition of our number is SIG_DFL, terminate. A bash script
 * under the agent died of it ("Real-time signal 27") in about one run in 30 of pyenv's shim;
 * tests/hostile/exec_signal.c forks 300 children that exec with wall ticks at 1 kHz.
 *
 * So every exec entry point is interposed (glibc's execl* and execvp reach execve internally,
 * not through the PLT, hence all of them): the calling thread's slot is marked exec_pending,
 * which the bg thread checks between wall_sending flags before each send (so once the mark is
 * set and wall_sending seen 0, no new request can come); then our signal is blocked for a
 * moment, every one already pending is taken with a zero-timeout sigtimedwait (ours: dropped;
 * another on our number, the application's: queued back to the thread, delivered as soon as
 * the mask is restored, before the exec, as it would have been), and the real exec is called
 * with the application's mask. If it returns (failed), the mark is cleared.
 *
 * A vfork or _Fork child (its pid is not ours; it shares the parent's TLS under vfork) is
 * not touched: our requests go to the parent's threads' tids only.
 *
 * Contract: app context, and async-signal-safe like execve itself (a handler may exec): only
 * system calls and atomics, no lock, no allocation (execl*'s argument arrays are on the
 * stack). errno is what the real exec left.
 */
#include "thread.h"
#include "agent.h"
#include "bgthread.h"
#include "chunk.h"
#include "ag_signal.h"
#include "sandbox.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execv_fn)(const char *, char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);
typedef int (*execveat_fn)(int, const char *, char *const[], char *const[], int);

static struct {
    _Atomic(execve_fn) execve, execvpe;
    _Atomic(execv_fn) execv, execvp;
    _Atomic(fexecve_fn) fexecve;
    _Atomic(execveat_fn) execveat;
} R;

#define REAL(f) real_##f()
#define DEFINE_REAL(f, type)                                                                   \
    static type real_##f(void) {                                                               \
        type r = atomic_load(&R.f);                                                            \
        if (!r) {                                                                              \
            r = (type)dlsym(RTLD_NEXT, #f);                                                    \
            atomic_store(&R.f, r);                                                             \
        }                                                                                      \
        return r;                                                                              \
    }
DEFINE_REAL(execve, execve_fn)
DEFINE_REAL(execvpe, execve_fn)
DEFINE_REAL(execv, execv_fn)
DEFINE_REAL(execvp, execv_fn)
DEFINE_REAL(fexecve, fexecve_fn)
DEFINE_REAL(execveat, execveat_fn)

/* Resolved here, in a constructor, so that an exec from a signal handler needs no dlsym. */
__attribute__((constructor(102))) static void exec_init(void) {
    (void)REAL(execve), (void)REAL(execvpe), (void)REAL(execv), (void)REAL(execvp);
    (void)REAL(fexecve), (void)REAL(execveat);
}

/* Before an exec: see the head comment. Returns the marked slot or NULL. */
static ag_thread_t *exec_begin(void) {
    if (!ag_sig || !atomic_load(&ag.running) || atomic_load(&ag_sandboxed))
        return NULL; /* sandboxed: a seccomp filter may forbid our system calls (sandbox.c) */
    int saved = errno;
    pid_t tid = (pid_t)syscall(SYS_gettid);
    ag_thread_t *t = NULL;
    if ((pid_t)syscall(SYS_getpid) == ag.pid) { /* not a vfork or _Fork child */
        uint32_t hw = ag_thread_hw();
        for (uint32_t i = 0; i < hw && !t; i++)
            if (atomic_load(&ag_threads[i].tid) == tid &&
                atomic_load(&ag_threads[i].state) == AG_TS_ACTIVE)
                t = &ag_threads[i];
    }
    if (!t) {
        errno = saved;
        return NULL;
    }
    atomic_store(&t->exec_pending, 1);
    while (atomic_load(&t->wall_sending))
        sched_yield();
    /* the kernel's sigset (8 bytes) inside glibc's */
    sigset_t one, old;
    sigemptyset(&one);
    sigaddset(&one, ag_sig);
    if (syscall(SYS_rt_sigprocmask, SIG_BLOCK, &one, &old, 8) == 0) {
        siginfo_t si, back[8];
        int nback = 0;
        struct timespec zero = {0, 0};
        for (int i = 0; i < 1024 && syscall(SYS_rt_sigtimedwait, &one, &si, &zero, 8) == ag_sig;
             i++) {
            if (ag_signal_is_ours(&si))
                atomic_store(&t->wall_pending, 0); /* the handler would have cleared it */
            else if (nback < 8)
                back[nback++] = si;
        }
        for (int i = 0; i < nback; i++)
            syscall(SYS_rt_tgsigqueueinfo, ag.pid, tid, ag_sig, &back[i]);
        syscall(SYS_rt_sigprocmask, SIG_SETMASK, &old, NULL, 8);
    }
    errno = saved;
    return t;
}

/* The exec returned: it failed; the thread goes on being profiled. */
static void exec_end(ag_thread_t *t) {
    if (t)
        atomic_store(&t->exec_pending, 0);
}

#define EXPORT __attribute__((visibility("default")))

/* The body of every v-form wrapper: the real function between exec_begin and exec_end, the
 * exec's errno kept. */
#define AROUND_EXEC(name, ...)                                                                 \
    __typeof__(real_##name()) f_ = REAL(name);                                                 \
    if (!f_)                                                                                   \
        return errno = ENOSYS, -1;                                                             \
    ag_thread_t *t_ = exec_begin();                                                            \
    int rc_ = f_(__VA_ARGS__);                                                                 \
    int e_ = errno;                                                                            \
    exec_end(t_);                                                                              \
    errno = e_;                                                                                \
    return rc_

EXPORT int execve(const char *path, char *const argv[], char *const envp[]) {
    AROUND_EXEC(execve, path, argv, envp);
}

EXPORT int execv(const char *path, char *const argv[]) {
    AROUND_EXEC(execv, path, argv);
}

EXPORT int execvp(const char *file, char *const argv[]) {
    AROUND_EXEC(execvp, file, argv);
}

EXPORT int execvpe(const char *file, char *const argv[], char *const envp[]) {
    AROUND_EXEC(execvpe, file, argv, envp);
}

EXPORT int fexecve(int fd, char *const argv[], char *const envp[]) {
    AROUND_EXEC(fexecve, fd, argv, envp);
}

EXPORT int execveat(int dirfd, const char *path, char *const argv[], char *const envp[],
                    int flags) {
    AROUND_EXEC(execveat, dirfd, path, argv, envp, flags);
}

/* execl, execle, execlp: their argument lists copied to an array on the stack (as glibc
 * does), then the v-form above. */
static size_t count_args(const char *arg0, va_list ap) {
    size_t n = 1;
    if (arg0)
        while (va_arg(ap, const char *) != NULL)
            n++;
    return n;
}

/* Declares char *argv[] holding arg and the variadic arguments after it up to the NULL, and
 * leaves ap started after that NULL (execle reads envp next; the caller ends ap). arg is
 * declared nonnull, yet NULL is an empty argv to the kernel: the asm keeps the compiler from
 * assuming otherwise. */
#define ARGV_FROM_VARARGS(argv, arg, ap)                                                       \
    const char *a0_ = (arg);                                                                   \
    __asm__("" : "+r"(a0_));                                                                   \
    va_list ap;                                                                                \
    va_start(ap, arg);                                                                         \
    size_t n_ = count_args(a0_, ap);                                                           \
    va_end(ap);                                                                                \
    char *argv[n_ + 1];                                                                        \
    va_start(ap, arg);                                                                         \
    argv[0] = (char *)a0_;                                                                     \
    for (size_t i_ = 1; i_ < n_; i_++)                                                         \
        argv[i_] = va_arg(ap, char *);                                                         \
    argv[n_] = NULL;                                                                           \
    if (a0_)                                                                                   \
        (void)va_arg(ap, char *) /* the terminating NULL */

EXPORT int execl(const char *path, const char *arg, ...) {
    ARGV_FROM_VARARGS(argv, arg, ap);
    va_end(ap);
    return execv(path, argv);
}

EXPORT int execlp(const char *file, const char *arg, ...) {
    ARGV_FROM_VARARGS(argv, arg, ap);
    va_end(ap);
    return execvp(file, argv);
}

EXPORT int execle(const char *path, const char *arg, ...) {
    ARGV_FROM_VARARGS(argv, arg, ap);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, argv, envp);
}

/* ---- _exit ----
 * A process that ends with _exit or _Exit runs no atexit handler, so the agent's exit chunk
 * (agent.c) was never written: a short program lost its whole profile without a word (dash's
 * `sh -c` ends that way). Here the bg thread cuts the last chunk first, as for SIGTERM
 * (signal.c: at most 2 s), when there is something to send. Not in a vfork or _Fork child
 * (its pid is not the agent's; under vfork it shares the parent's memory), not on the bg
 * thread itself, and not when nothing was sampled since the last chunk: a fork's child that
 * exits at once costs nothing more. Async-signal-safe like _exit itself (system calls and
 * atomics): handlers call _exit. The next definition of _exit is looked up at load time. */
typedef void (*exit_fn)(int);
static exit_fn g_real_exit, g_real_Exit;

__attribute__((constructor)) static void exit_hooks_init(void) {
    g_real_exit = (exit_fn)dlsym(RTLD_NEXT, "_exit");
    g_real_Exit = (exit_fn)dlsym(RTLD_NEXT, "_Exit");
}

static void exit_last_chunk(void) {
    if (!atomic_load(&ag.running) || (pid_t)syscall(SYS_getpid) != ag.pid)
        return;
    pid_t bg = ag_bg_tid();
    if (bg && bg != (pid_t)syscall(SYS_gettid) && ag_chunk_unsent())
        ag_signal_last_chunk();
}

static _Noreturn void exit_now(exit_fn real, int status) {
    if (real)
        real(status);
    for (;;)
        syscall(SYS_exit_group, status);
}

EXPORT _Noreturn void _exit(int status) {
    exit_last_chunk();
    exit_now(g_real_exit, status);
}

EXPORT _Noreturn void _Exit(int status) {
    exit_last_chunk();
    exit_now(g_real_Exit, status);
}
