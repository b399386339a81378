/* Hostile case: a SIGSEGV handler on a sigaltstack recovers (siglongjmp) from a stack overflow,
 * 60 times, while the recursion burns CPU (samples land at every depth, the deepest included).
 * Prints the recoveries, how many SIGSEGVs were not the program's own overflow (a signal the
 * kernel could not deliver on the full stack: SI_KERNEL), and that the alternate stack is the
 * one it set. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static sigjmp_buf jb;
static volatile unsigned long sink;

static volatile int odd;

static void on_segv(int sig, siginfo_t *si, void *uc) {
    (void)sig;
    (void)uc;
    if (si->si_code != SEGV_MAPERR && si->si_code != SEGV_ACCERR)
        odd++;
    siglongjmp(jb, 1);
}

static __attribute__((noinline)) unsigned long deep(unsigned long n) {
    volatile char pad[512];
    memset((char *)pad, (int)n, sizeof pad);
    for (int i = 0; i < 200; i++)
        sink += pad[i & 511];
    if (n > (1ul << 40)) /* never: the stack ends long before */
        return 0;
    return deep(n + 1) + pad[n & 511];
}

int main(void) {
    static char alt[64 << 10];
    stack_t ss = {.ss_sp = alt, .ss_size = sizeof alt, .ss_flags = 0};
    if (sigaltstack(&ss, NULL) != 0)
        return 1;
    struct sigaction sa = {0};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_ONSTACK | SA_NODEFER | SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    struct rlimit rl = {1 << 20, 1 << 20}; /* a 1 MiB stack overflows quickly */
    setrlimit(RLIMIT_STACK, &rl);
    volatile int recovered = 0;
    while (recovered < 60) {
        if (sigsetjmp(jb, 1)) {
            recovered++;
            continue;
        }
        sink += deep(0);
    }
    stack_t cur;
    sigaltstack(NULL, &cur);
    printf("recovered=%d odd_segv=%d\naltstack_is_ours=%d\n", recovered, odd,
           cur.ss_sp == alt && cur.ss_size == sizeof alt);
    return 0;
}
