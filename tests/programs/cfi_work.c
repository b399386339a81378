/* Workloads for the CFI unwinder tests (test-agent-cfi.c), built with -O2 -fomit-frame-pointer.
 *
 *   cfi_work graph SECONDS     3 threads + main with a known call graph: recursion, a call
 *                              through a function pointer, a tail call, setjmp/longjmp
 *   cfi_work dlclose N LIB     N dlopen/call/dlclose cycles of LIB (its code on sampled stacks)
 *   cfi_work jit SECONDS       a loop in anonymous executable memory without CFI
 *   cfi_work scribble SECONDS  a thread that overwrites its own return address and saved rbp
 *                              with garbage while it spins (restored before returning)
 *   cfi_work dlunwind SECONDS LIB  2 threads dlopen/dlclose LIB, 2 threads unwind themselves
 *                              with backtrace() (libgcc's unwinder, as a C++ throw: it takes the
 *                              loader lock through dl_iterate_phdr) while samples land in both
 *
 * The call graph (caller -> callee), which the test checks pairs against:
 *   main -> run_graph, run_graph -> use_longjmp, use_longjmp -> jumper, use_longjmp -> leaf_work,
 *   jumper -> leaf_work, worker -> rec, rec -> rec, rec -> leaf_work, worker -> leaf_work
 *   (via_ptr tail-calls leaf_work), worker -> tail_target (tail_caller tail-calls it),
 *   tail_target -> leaf_work, worker -> via_ptr, via_ptr -> leaf_work, worker -> tail_caller,
 *   tail_caller -> tail_target.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static volatile double sink;
static volatile int stop;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) double leaf_work(int n) {
    double s = 0;
    for (int i = 0; i < n; i++)
        s += sqrt(i * 1.0 + sink);
    return s;
}
__attribute__((noinline)) double rec(int d) {
    if (d == 0)
        return leaf_work(20000);
    double r = rec(d - 1);
    sink += r;
    return r + 1;
}
__attribute__((noinline)) double via_ptr(int x) { return leaf_work(x); }
double (*volatile fnp)(int) = via_ptr;
__attribute__((noinline)) double tail_target(int x) { return leaf_work(x) * 2; }
__attribute__((noinline)) double tail_caller(int x) {
    sink += 1;
    return tail_target(x + 1);
}
static jmp_buf jb;
__attribute__((noinline)) void jumper(void) {
    sink += leaf_work(5000);
    longjmp(jb, 1);
}
__attribute__((noinline)) void use_longjmp(void) {
    if (!setjmp(jb))
        jumper();
    sink += leaf_work(5000);
}
/* Fixed amounts of work (not of time): the sample count follows the CPU used, however loaded
 * the machine is. SECONDS scales them (1: ~1 s of CPU per thread on an idle machine). */
static double g_scale = 1;

__attribute__((noinline)) void *worker(void *a) {
    long k = (long)a;
    for (long it = 0, n = (long)(g_scale * (k == 0 ? 9000 : 3000)); it < n && !stop; it++) {
        if (k == 0)
            sink += rec(5);
        else if (k == 1)
            sink += fnp(30000);
        else
            sink += tail_caller(30000);
    }
    return NULL;
}
__attribute__((noinline)) void run_graph(double secs) {
    pthread_t t[3];
    for (long i = 0; i < 3; i++)
        pthread_create(&t[i], 0, worker, (void *)i);
    for (long i = 0, n = (long)(secs * 10000); i < n; i++)
        use_longjmp();
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], 0);
}

__attribute__((noinline)) static void run_dlclose(int n, const char *lib) {
    double total = 0;
    for (int i = 0; i < n; i++) {
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            fprintf(stderr, "dlopen: %s\n", dlerror());
            exit(2);
        }
        double (*spin)(double) = (double (*)(double))dlsym(h, "cfi_lib_spin");
        if (!spin)
            exit(3);
        total += spin(0.004);
        dlclose(h);
    }
    printf("dlclose_cycles=%d total=%g\n", n, total);
}

__attribute__((noinline)) void jit_caller(double secs) {
    /* push rbp; mov rbp,rsp; 1: dec rdi; jnz 1b; pop rbp; ret */
    static const uint8_t code[] = {0x55, 0x48, 0x89, 0xe5, 0x48, 0xff, 0xcf,
                                   0x75, 0xfb, 0x5d, 0xc3};
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (m == MAP_FAILED)
        exit(4);
    memcpy(m, code, sizeof code);
    void (*fn)(long) = (void (*)(long))m;
    long calls = 0;
    for (long n = (long)(secs * 700); calls < n; calls++)
        fn(2000000);
    printf("jit_calls=%ld\n", calls);
}

/* Overwrites its own return address and saved rbp while it spins (frame pointer kept in this
 * one function so that the slots are known), then restores them. */
/* GCC keeps rbp by the attribute; clang has no optimize attribute, and keeps a frame pointer in
 * any function that takes __builtin_frame_address(0). */
#if defined(__clang__)
#define FP_KEPT
#else
#define FP_KEPT __attribute__((optimize("no-omit-frame-pointer")))
#endif
__attribute__((noinline)) FP_KEPT double scribble_once(uint64_t seed) {
    void **frame = (void **)__builtin_frame_address(0);
    void *saved_fp = frame[0], *saved_ra = frame[1];
    double s = 0;
    for (int k = 0; k < 64; k++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uintptr_t v = (uintptr_t)seed;
        switch (k & 3) {
        case 0: v = (uintptr_t)frame + (seed >> 40) * 8; break;  /* up the stack */
        case 1: v = (uintptr_t)frame - (seed >> 50) * 8; break;  /* below sp */
        case 2: v = (uintptr_t)&leaf_work + (seed >> 56); break; /* into code */
        default: break;                                          /* anything */
        }
        *(volatile uintptr_t *)&frame[0] = v;
        *(volatile uintptr_t *)&frame[1] = (uintptr_t)seed ^ (k & 1 ? 0 : v);
        for (int i = 0; i < 20000; i++)
            s += sqrt(i * 1.0 + sink);
    }
    *(void *volatile *)&frame[0] = saved_fp;
    *(void *volatile *)&frame[1] = saved_ra;
    return s;
}

static void *scribbler(void *a) {
    double secs = *(double *)a;
    uint64_t seed = 1;
    for (long n = (long)(secs * 400); (long)seed <= n;)
        sink += scribble_once(seed++);
    return NULL;
}

static const char *g_lib;
static double g_secs;
static volatile long g_cycles, g_traces;

static void *dl_loop(void *a) {
    (void)a;
    double end = now() + g_secs;
    while (now() < end) {
        void *h = dlopen(g_lib, RTLD_NOW | RTLD_LOCAL);
        if (!h)
            exit(5);
        double (*spin)(double) = (double (*)(double))dlsym(h, "cfi_lib_spin");
        sink += spin(0.0005);
        dlclose(h);
        __atomic_add_fetch(&g_cycles, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

__attribute__((noinline)) static int deep_trace(int d) {
    if (d > 0)
        return deep_trace(d - 1) + 1;
    void *pcs[64];
    return backtrace(pcs, 64);
}

static void *trace_loop(void *a) {
    (void)a;
    double end = now() + g_secs;
    while (now() < end) {
        if (deep_trace(20) < 20)
            exit(6);
        __atomic_add_fetch(&g_traces, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 3)
        return 2;
    double secs = atof(argv[2]);
    g_scale = secs;
    if (!strcmp(argv[1], "graph"))
        run_graph(secs);
    else if (!strcmp(argv[1], "dlclose") && argc > 3)
        run_dlclose(atoi(argv[2]), argv[3]);
    else if (!strcmp(argv[1], "dlunwind") && argc > 3) {
        g_lib = argv[3];
        g_secs = secs;
        pthread_t t[4];
        for (int i = 0; i < 4; i++)
            pthread_create(&t[i], 0, i < 2 ? dl_loop : trace_loop, NULL);
        for (int i = 0; i < 4; i++)
            pthread_join(t[i], 0);
        printf("dlunwind cycles=%ld traces=%ld\n", g_cycles, g_traces);
    } else if (!strcmp(argv[1], "jit"))
        jit_caller(secs);
    else if (!strcmp(argv[1], "scribble")) {
        pthread_t t;
        pthread_create(&t, 0, scribbler, &secs);
        pthread_join(t, 0);
        printf("scribble done\n");
    } else
        return 2;
    printf("ok %f\n", sink);
    return 0;
}
