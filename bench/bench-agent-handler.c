/* Cost of one sample in the signal handler, measured in-process (not a test).
 *
 * Linked to libfleetprof. Sends this thread N wall-sample requests exactly as the agent's
 * ticker does (rt_tgsigqueueinfo with the agent's tag, so the handler unwinds and writes a
 * full record), in bursts that the agent's ring can hold, and compares the thread CPU time per
 * signal with the same loop on a second real-time signal whose handler does nothing. The
 * difference is the handler body (classification, unwinding, context copy, ring write); the
 * null loop is the kernel's delivery + sigreturn + the sending syscall.
 *
 *   bench-agent-handler [N] [DEPTH]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define WALL_MAGIC 0x4657ull /* agent/src/internal.h: AG_WALL_MAGIC */

struct ksigaction { /* the kernel's view: our interposer would report the app's view */
    void *handler;
    unsigned long flags;
    void *restorer;
    uint64_t mask;
};

static uint64_t cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void null_handler(int sig, siginfo_t *si, void *uc) { (void)sig, (void)si, (void)uc; }

static int send_one(int sig, uint64_t value) {
    siginfo_t si;
    memset(&si, 0, sizeof si);
    si.si_signo = sig;
    si.si_code = SI_QUEUE;
    si.si_pid = getpid();
    si.si_uid = getuid();
    si.si_value.sival_ptr = (void *)(uintptr_t)value;
    return (int)syscall(SYS_rt_tgsigqueueinfo, getpid(), (pid_t)syscall(SYS_gettid), sig, &si);
}

static double g_result[2];
static long g_n = 20000;

__attribute__((noinline)) static void loop(int which, int sig, uint64_t value) {
    uint64_t total = 0;
    for (long done = 0; done < g_n;) {
        uint64_t t0 = cpu_ns();
        for (int i = 0; i < 64; i++)
            send_one(sig, value);
        total += cpu_ns() - t0;
        done += 64;
        usleep(60000); /* the agent drains rings every 50 ms: never measure the full-ring path */
    }
    g_result[which] = (double)total / (double)g_n;
}

__attribute__((noinline)) static void recurse(int d, int depth, int ag_sig, int null_sig) {
    if (d < depth) {
        recurse(d + 1, depth, ag_sig, null_sig);
        __asm__ volatile("" ::: "memory");
        return;
    }
    loop(0, ag_sig, WALL_MAGIC << 48 | 1000u << 1); /* 1 ms wall sample */
    loop(1, null_sig, 0);
}

int main(int argc, char **argv) {
    if (argc > 1)
        g_n = atol(argv[1]);
    int depth = argc > 2 ? atoi(argv[2]) : 20;
    int ag_sig = 0, null_sig = 0;
    for (int s = SIGRTMAX; s >= SIGRTMIN && !ag_sig; s--) {
        struct ksigaction ka;
        if (syscall(SYS_rt_sigaction, s, NULL, &ka, 8) == 0 && ka.handler &&
            ka.handler != (void *)SIG_IGN && (ka.flags & SA_SIGINFO))
            ag_sig = s;
    }
    if (!ag_sig) {
        fprintf(stderr, "bench-agent-handler: the agent's signal handler is not installed\n");
        return 1;
    }
    null_sig = ag_sig == SIGRTMIN + 2 ? SIGRTMIN + 3 : SIGRTMIN + 2;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = null_handler;
    sa.sa_flags = SA_SIGINFO;
    sigaction(null_sig, &sa, NULL);
    recurse(0, depth, ag_sig, null_sig);
    printf("signals: %ld per loop, stack depth ~%d\n", g_n, depth + 4);
    printf("  agent handler (delivery + full wall sample): %.0f ns/signal\n", g_result[0]);
    printf("  null handler  (delivery + sigreturn + send):  %.0f ns/signal\n", g_result[1]);
    printf("  => agent handler body: %.0f ns/sample\n", g_result[0] - g_result[1]);
    return 0;
}
