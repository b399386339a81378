/* Process-level calls the agent prepares for: fork from a signal handler, seccomp (sandbox.c). */
#ifndef AG_SANDBOX_H
#define AG_SANDBOX_H

#include "base.h"

AG_HIDDEN void ag_sandbox_init(void); /* constructor, after ag_signal_init */
/* A system call without errno and without our syscall() interposer (whose variadic reads of
 * six arguments a shorter call would have ASan report): -errno on failure. x86-64. */
static inline long ag_rawsys(long nr, long a, long b, long c, long d, long e) {
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    long ret;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8)
                     : "rcx", "r11", "memory");
    return ret;
}

AG_HIDDEN extern _Atomic int ag_sandboxed; /* a seccomp filter: no syscall of ours any more */

#endif
