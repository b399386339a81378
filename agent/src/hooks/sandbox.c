/* Process-level calls the agent must prepare for: fork() from a signal handler, and a seccomp
 * filter the program installs on itself.
 *
 * fork in a handler: a single-threaded program may fork in a signal handler even when the
 * signal interrupted malloc or stdio: glibc's fork takes its malloc, stdio and atfork locks
 * only when the process is multi-threaded, which the agent's thread makes it. A handler that
 * interrupted this thread inside libc (or inside the agent) may hold one of those locks, and
 * fork would wait on it forever. The fork interposer looks for that case: it scans up the
 * current stack (bounded by the thread's stack or its active alternate stack) for the signal
 * frame's return address (glibc's __restore_rt, the sa_restorer the kernel reports for our
 * own handler) of every live signal frame (see live_signal_frame), reads the interrupted pc
 * from the ucontext that follows it, and if one such pc is in libc or in the agent it forks
 * with _Fork() (no locks, no atfork handlers: as
 * async-signal-safe as the program expects its fork to be there). The child stops profiling
 * (it could not take our locks either). Otherwise, and whenever the scan finds no frame, the
 * real fork runs. Cost: a stack scan per fork (~1-2 µs), nothing on any other path.
 *
 * seccomp: a program that confines itself (prctl(PR_SET_SECCOMP) or the seccomp syscall
 * through syscall(), as libseccomp makes it) with a strict allow-list would be killed by the
 * first syscall of ours it does not allow (a handler's clock read, a timer, the bg thread's
 * poll). Before the filter goes in, the agent stops as at exit: timers deleted, the last chunk
 * written (it counts one DROP_HOST_UNSAFE: profiling stopped early), the bg thread joined, the
 * hooks forwarding only and exiting threads making no syscall of ours. Then the call proceeds.
 *
 * set*id, capset and the credential prctls: creds.c (the prctl and syscall interposers below
 * tell it of the calls that change credentials).
 *
 * Thread contract: the interposers run on application threads; the fork scan reads only the
 * calling thread's own stack.
 */
#include "ag_signal.h"
#include "record.h"
#include "agent.h"
#include "bgthread.h"
#include "sandbox.h"
#include "creds.h"
#include "loader_gate.h"

#include "hooks.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <linux/prctl.h>
#include <linux/seccomp.h>
#include <stdarg.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

typedef pid_t (*fork_fn)(void);
static fork_fn g_fork, g_raw_fork;
static uintptr_t g_restorer;              /* glibc's __restore_rt */
static uintptr_t g_libc_lo, g_libc_hi;    /* libc's mapped range */
_Atomic int ag_sandboxed;                 /* a seccomp filter is (about to be) in force */

void ag_sandbox_init(void) {
    g_fork = (fork_fn)dlsym(RTLD_NEXT, "fork");
    g_raw_fork = (fork_fn)dlsym(RTLD_NEXT, "_Fork"); /* glibc >= 2.34 */
    if (g_fork) /* libc's mapped range */
        ag_object_range((uintptr_t)g_fork, &g_libc_lo, &g_libc_hi);
    /* the restorer glibc installed with our handler (libc's sigaction, not our interposer) */
    struct sigaction cur;
    typedef int (*sa_fn)(int, const struct sigaction *, struct sigaction *);
    sa_fn real = (sa_fn)dlsym(RTLD_NEXT, "sigaction");
    if (ag_sig && real && real(ag_sig, NULL, &cur) == 0 && (cur.sa_flags & 0x04000000 /* SA_RESTORER */))
        g_restorer = (uintptr_t)cur.sa_restorer;
}

/* Is w[0] the return address of a live signal frame (the kernel's rt_sigframe: the restorer,
 * then its struct ucontext, then the siginfo -- written only for SA_SIGINFO handlers -- and
 * the FPU state just above)? Matching the restorer's address alone is not enough: the frames
 * above ours hold stale words of earlier signal deliveries (one pushed deeper while malloc ran,
 * say), restorer and ucontext included. A live frame's FPU state lies within a page above it,
 * and more signals are blocked now than its saved mask holds (the handler runs with its signal
 * and sa_mask added; a SA_NODEFER handler with an empty sa_mask is not recognised). */
#define AG_KERNEL_UC_SIGMASK 296 /* flags, link, stack_t, sigcontext; then the 64-bit mask */
__attribute__((no_sanitize("address", "thread", "undefined"), always_inline)) static inline int
live_signal_frame(const uintptr_t *w, uint64_t blocked) {
    const ucontext_t *uc = (const ucontext_t *)&w[1];
    uintptr_t fp = (uintptr_t)uc->uc_mcontext.fpregs;
    uint64_t saved = *(const uint64_t *)((const char *)uc + AG_KERNEL_UC_SIGMASK);
    return fp > (uintptr_t)w && fp - (uintptr_t)w < 4096 && (blocked & ~saved) != 0;
}

/* Did a signal handler below us on this stack interrupt libc or the agent? Every live signal
 * frame between us and the top of the stack counts (an outer handler may have interrupted
 * malloc and an inner one the outer handler), not just the first word that looks like one.
 * Reads the frames above ours (and their redzones under ASan): not instrumented. */
__attribute__((no_sanitize("address", "thread", "undefined"), noinline)) static int
interrupted_in_libc(void) {
    if (!g_restorer || !g_libc_hi)
        return 0;
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0), top = 0;
    stack_t ss;
    if (syscall(SYS_sigaltstack, NULL, &ss) == 0 && (ss.ss_flags & SS_ONSTACK))
        top = (uintptr_t)ss.ss_sp + ss.ss_size;
    else if (ag_t_self) {
        uintptr_t lo = atomic_load(&ag_t_self->stack_lo), hi = atomic_load(&ag_t_self->stack_hi);
        if (sp >= lo && sp < hi)
            top = hi;
    }
    if (top <= sp)
        return 0;
    const uintptr_t *w = (const uintptr_t *)(sp & ~(uintptr_t)7);
    size_t n = (top - (uintptr_t)w) / sizeof *w;
    if (n > 8192)
        n = 8192; /* 64 KiB of frames between the handler and fork() */
    uint64_t blocked = 0;
    int have_mask = 0;
    for (size_t i = 0; i + 1 + (AG_KERNEL_UC_SIGMASK + 8) / sizeof *w < n; i++) {
        if (w[i] != g_restorer)
            continue;
        if (!have_mask) { /* only once a candidate is seen: a plain fork pays nothing */
            have_mask = 1;
            if (syscall(SYS_rt_sigprocmask, SIG_BLOCK, NULL, &blocked, sizeof blocked) != 0)
                return 0;
        }
        if (!live_signal_frame(&w[i], blocked))
            continue;
        const ucontext_t *uc = (const ucontext_t *)&w[i + 1];
        uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
        if ((pc >= g_libc_lo && pc < g_libc_hi) || ag_hook_is_agent_pc(pc))
            return 1;
    }
    return 0;
}

__attribute__((no_sanitize("address", "thread", "undefined"), visibility("default"))) pid_t
fork(void) {
    if (!g_fork) {
        g_fork = (fork_fn)dlsym(RTLD_NEXT, "fork");
        if (!g_fork) {
            errno = ENOSYS;
            return -1;
        }
    }
    if (!g_raw_fork || !atomic_load(&ag.running) || !interrupted_in_libc())
        return g_fork();
    pid_t p = ag_loader_fork(g_raw_fork);
    if (p == 0) /* no lock of ours is safe to take here: this child is not profiled */
        ag_bg_forget_child();
    return p;
}

/* glibc's _Fork as the program calls it: not inside one of the agent's loader calls, whose
 * lock the child would inherit held (loader_gate.c). */
__attribute__((visibility("default"))) pid_t _Fork(void) {
    if (!g_raw_fork) {
        errno = ENOSYS;
        return -1;
    }
    return ag_loader_fork(g_raw_fork);
}

/* ---- seccomp ---- */

static void quiesce(void) {
    if (atomic_exchange(&ag_sandboxed, 1) || !atomic_load(&ag.running))
        return;
    ag_drop_count(0, CM_DROP_HOST_UNSAFE, 1);
    ag_agent_stop();
}

typedef int (*prctl_fn)(int, unsigned long, unsigned long, unsigned long, unsigned long);

static _Atomic(prctl_fn) g_real_prctl;

/* Resolved in a constructor (as signal.c's masks_init): a prctl from a signal handler or a
 * vfork child needs no dlsym. Before it ran (another object's constructor): looked up then. */
__attribute__((constructor(102))) static void prctl_init(void) {
    atomic_store(&g_real_prctl, (prctl_fn)dlsym(RTLD_NEXT, "prctl"));
}

AG_NO_TSAN __attribute__((visibility("default"))) int prctl(int op, unsigned long a2,
                                                            unsigned long a3, unsigned long a4,
                                                            unsigned long a5) {
    prctl_fn real = atomic_load(&g_real_prctl);
    if (!real) {
        real = (prctl_fn)dlsym(RTLD_NEXT, "prctl");
        atomic_store(&g_real_prctl, real);
    }
    if (op == PR_SET_SECCOMP)
        quiesce();
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    int rc = real(op, a2, a3, a4, a5);
    if (rc == 0 && ag_creds_prctl_op(op, (long)a2))
        ag_creds_changed();
    return rc;
}

/* syscall(3) itself, without libc's: the agent calls syscall() too (gettid in handlers), and
 * those calls now land here, so this must need no lazy lookup. x86-64 convention; a result in
 * [-4095, -1] is -errno. */
AG_NO_TSAN __attribute__((visibility("default"))) long syscall(long nr, ...) {
    va_list ap;
    va_start(ap, nr);
    long a[6];
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (AG_UNLIKELY(nr == SYS_seccomp && a[0] == SECCOMP_SET_MODE_FILTER))
        quiesce();
    register long r10 __asm__("r10") = a[3];
    register long r8 __asm__("r8") = a[4];
    register long r9 __asm__("r9") = a[5];
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a[0]), "S"(a[1]), "d"(a[2]), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    if ((unsigned long)ret > -4096ul) {
        errno = (int)-ret;
        return -1;
    }
    if (AG_UNLIKELY(ag_creds_syscall_nr(nr, a[0], a[1])) && ret == 0)
        ag_creds_changed(); /* one thread's credentials (creds.c) */
    return ret;
}
