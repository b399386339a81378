/* Allocation workloads for tests/test-agent-alloc.c (run under libfleetprof).
 *
 *   alloc_work bytes SECONDS      two sites with known byte totals: small_site (256 B objects)
 *                                 and big_site (48 KiB), freed at once; prints the totals
 *   alloc_work leak SECONDS       leak_site keeps 2 MiB/s alive; churn_site allocates 20 MiB/s
 *                                 and frees it; flushes a chunk every second
 *   alloc_work signal SECONDS     an application SIGALRM handler that mallocs and frees
 *   alloc_work fork               allocates in a child after fork (both must exit 0)
 *   alloc_work dlopen LIB         dlopen/dlclose LIB in a loop while allocating
 *   alloc_work full SECONDS       many small leaks (fills a small live-heap table)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef int (*flush_fn)(void);

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void flush(void) {
    flush_fn f = (flush_fn)dlsym(RTLD_DEFAULT, "fleetprof_flush");
    if (f)
        f();
}

static volatile uintptr_t g_sink;

__attribute__((noinline)) void *small_site(size_t n) {
    void *p = malloc(n);
    memset(p, 1, 8);
    g_sink += (uintptr_t)p;
    return p;
}

__attribute__((noinline)) void *big_site(size_t n) {
    void *p = malloc(n);
    memset(p, 1, 8);
    g_sink += (uintptr_t)p;
    return p;
}

__attribute__((noinline)) void *leak_site(size_t n) {
    void *p = malloc(n);
    memset(p, 2, n);
    return p;
}

__attribute__((noinline)) void *churn_site(size_t n) {
    void *p = calloc(1, n);
    g_sink += (uintptr_t)p;
    return p;
}

static void bytes(double secs) {
    uint64_t small_b = 0, big_b = 0, small_n = 0, big_n = 0;
    double end = now_s() + secs;
    while (now_s() < end) {
        for (int i = 0; i < 1000; i++) {
            free(small_site(256));
            small_b += 256;
            small_n++;
        }
        for (int i = 0; i < 10; i++) {
            free(big_site(48 << 10));
            big_b += 48 << 10;
            big_n++;
        }
    }
    printf("small_bytes=%llu small_n=%llu big_bytes=%llu big_n=%llu\n",
           (unsigned long long)small_b, (unsigned long long)small_n,
           (unsigned long long)big_b, (unsigned long long)big_n);
}

static void leak(double secs) {
    double start = now_s(), next = start + 1;
    uint64_t leaked = 0;
    while (now_s() < start + secs) {
        for (int i = 0; i < 20; i++) /* 20 x 1 MiB churn per 100 ms step... */
            free(churn_site(1 << 20));
        for (int i = 0; i < 2; i++) {
            leak_site(100 << 10); /* 200 KiB per step, 2 MiB/s */
            leaked += 100 << 10;
        }
        usleep(100000);
        if (now_s() >= next) {
            flush();
            next += 1;
        }
    }
    printf("leaked=%llu\n", (unsigned long long)leaked);
}

static volatile sig_atomic_t g_sig_allocs;
static void on_alarm(int s) {
    (void)s;
    for (int i = 0; i < 50; i++) {
        void *p = malloc(4096 + i);
        free(p);
    }
    g_sig_allocs++;
}

static void in_signal(double secs) {
    /* The main thread runs lock and I/O hooks (not malloc: glibc's own malloc is not
     * async-signal-safe); the handler allocates, and is sampled. */
    signal(SIGALRM, on_alarm);
    struct itimerval it = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_REAL, &it, NULL);
    double end = now_s() + secs;
    uint64_t n = 0;
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    int fd = open("/dev/zero", O_RDONLY);
    char buf[64];
    while (now_s() < end) {
        pthread_mutex_lock(&mu);
        n += read(fd, buf, sizeof buf) > 0;
        pthread_mutex_unlock(&mu);
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    close(fd);
    printf("signal_allocs=%d main_loops=%llu\n", (int)g_sig_allocs, (unsigned long long)n);
}

static void in_fork(void) {
    for (int round = 0; round < 5; round++) {
        for (int i = 0; i < 2000; i++)
            free(big_site(8192));
        pid_t pid = fork();
        if (pid == 0) {
            for (int i = 0; i < 20000; i++)
                free(big_site(8192));
            usleep(20000);
            leak_site(8 << 20);
            exit(0); /* destructors run: the child's last chunk is written */
        }
        int st;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            printf("child failed: %d\n", st);
            exit(1);
        }
    }
    printf("fork ok\n");
}

static void in_dlopen(const char *lib) {
    for (int i = 0; i < 200; i++) {
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            printf("dlopen %s: %s\n", lib, dlerror());
            exit(1);
        }
        for (int k = 0; k < 100; k++)
            free(big_site(10000));
        dlclose(h);
    }
    printf("dlopen ok\n");
}

static void full(double secs) {
    double end = now_s() + secs;
    uint64_t n = 0;
    while (now_s() < end) {
        for (int i = 0; i < 1000; i++, n++)
            leak_site(64 << 10);
        usleep(1000);
    }
    printf("leaked_objects=%llu\n", (unsigned long long)n);
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    double secs = argc > 2 ? atof(argv[2]) : 3;
    if (!strcmp(argv[1], "bytes"))
        bytes(secs);
    else if (!strcmp(argv[1], "leak"))
        leak(secs);
    else if (!strcmp(argv[1], "signal"))
        in_signal(secs);
    else if (!strcmp(argv[1], "fork"))
        in_fork();
    else if (!strcmp(argv[1], "dlopen"))
        in_dlopen(argv[2]);
    else if (!strcmp(argv[1], "full"))
        full(secs);
    else
        return 2;
    fflush(stdout);
    return 0;
}
