/* Hostile case: after a second of work the program confines itself with a strict seccomp
 * allow-list (read, write, exit, exit_group, rt_sigreturn, brk, mmap, munmap, futex; anything
 * else kills it with SIGSYS), as sandboxed workers do, then computes and prints. */
#define _GNU_SOURCE
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ALLOW(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), \
                  BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

int main(void) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    volatile unsigned long x = 0;
    do {
        for (int i = 0; i < 100000; i++)
            x++;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 1000);
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        ALLOW(SYS_read), ALLOW(SYS_write), ALLOW(SYS_exit), ALLOW(SYS_exit_group),
        ALLOW(SYS_rt_sigreturn), ALLOW(SYS_brk), ALLOW(SYS_mmap), ALLOW(SYS_munmap),
        ALLOW(SYS_futex),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof f / sizeof f[0]), f};
    printf("confining\n");
    fflush(stdout);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) {
        printf("seccomp failed\n");
        return 1;
    }
    unsigned long h = 5381; /* half a second of confined work */
    for (unsigned long i = 0; i < 150000000ul; i++)
        h = h * 33 + i;
    char buf[64];
    int n = snprintf(buf, sizeof buf, "confined work done %lu\n", h % 1000);
    if (write(1, buf, (size_t)n) != n)
        return 2;
    syscall(SYS_exit_group, 0);
    return 0;
}
