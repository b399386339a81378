/* Hostile case: raw clone() threads (CLONE_THREAD without CLONE_SETTLS) share the main
 * thread's TLS, errno included. They burn CPU for a second (only raw syscalls), while the
 * main thread sets errno and checks it never changes under it. Prints the clobbers (0). */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile int stop, alive;

static int worker(void *arg) {
    (void)arg;
    volatile unsigned long x = 0;
    while (!stop)
        for (int i = 0; i < 100000; i++)
            x++;
    __atomic_fetch_sub(&alive, 1, __ATOMIC_SEQ_CST);
    syscall(SYS_exit, 0); /* no libc exit path: it would use the main thread's TLS */
    return 0;
}

int main(void) {
    enum { N = 3, STACK = 256 << 10 };
    int flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
                CLONE_SYSVSEM;
    alive = N;
    for (int i = 0; i < N; i++) {
        char *stk = mmap(NULL, STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (clone(worker, stk + STACK, flags, NULL) < 0) {
            perror("clone");
            return 1;
        }
    }
    long checks = 0, clobbers = 0;
    volatile int *err = &errno; /* every access a real load and store */
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        for (int i = 0; i < 1000; i++) {
            *err = 1000 + i;
            for (volatile int k = 0; k < 5; k++)
                ;
            if (*err != 1000 + i)
                clobbers++;
            checks++;
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 1200);
    stop = 1;
    while (alive) /* their exits, before ours */
        sched_yield();
    printf("errno_clobbers=%ld enough_checks=%d\n", clobbers, checks > 100000);
    return 0;
}
