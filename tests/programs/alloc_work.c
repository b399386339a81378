/* Allocation workloads for tests/test-agent-alloc.c (run under libfleetprof).
 *
 *   alloc_work bytes SECONDS      two sites with known byte totals: small_site (256 B objects)
 *                                 and big_site (48 KiB), freed at once; prints the totals
 *   alloc_work sites SECONDS      the three sites, interleaved: site_16 (16 B),
 *                                 site_4k (4 KiB), site_1m (1 MiB), 1 MiB each per step, freed
 *                                 at once, for SECONDS and until each site allocated 2 GiB (at
 *                                 most 4 x SECONDS); prints bytes and calls per site
 *   alloc_work phases ORDER SCALE SECONDS
 *                                 issue 19: the three sites one after another, not interleaved:
 *                                 ORDER fwd (site_16 x 80 M x SCALE, then site_4k x 320 K x
 *                                 SCALE, then site_1m x 1280 x SCALE) or rev (1 MiB first);
 *                                 each object freed at once. SECONDS 0: as fast as possible;
 *                                 else each phase is spread over SECONDS (100 slices, a sleep
 *                                 after each that keeps the phase on schedule). Prints bytes and
 *                                 calls per site and each phase's duration
 *   alloc_work chain SECONDS      align_site (posix_memalign 64, 4 KiB), grow_site (a realloc
 *                                 chain 8 KiB -> 512 KiB from a posix_memalign'ed block, contents
 *                                 checked at every step), misc_site (memalign, aligned_alloc,
 *                                 valloc, pvalloc, reallocarray, calloc: 4 KiB each), for
 *                                 SECONDS and until each site allocated 24 GiB (at most 4 x
 *                                 SECONDS); prints bytes per site
 *   alloc_work leak SECONDS       leak_site keeps 2 MiB/s alive (8 KiB objects); churn_site
 *                                 allocates 200 MiB/s (1 MiB objects) and frees all of it;
 *                                 flushes a chunk every second
 *   alloc_work signal SECONDS     an application SIGALRM handler that mallocs and frees
 *   alloc_work fork               allocates in a child after fork (both must exit 0)
 *   alloc_work bypass             whether this program's malloc, free and malloc_usable_size
 *                                 (addresses through its GOT) are libc's own or the agent's
 *                                 hooks; then the headers checks with 20 rounds
 *   alloc_work mtfork N           4 threads allocate, lock and write a pipe without pause while
 *                                 the main thread forks N children (each allocates from 2 new
 *                                 threads, then exits 0; a child stuck for 20 s dies of SIGALRM)
 *   alloc_work dlopen LIB [N]     dlopen/dlclose LIB N times (default 200) while allocating; if
 *                                 LIB has dl_alloc_site, calls it; 2 threads allocate throughout
 *   alloc_work full SECONDS       many small leaks (fills a small live-heap table)
 *   alloc_work headers ROUNDS     every entry point from hdr_site, run with a period so small
 *                                 that nearly every allocation is sampled (has a header): checks
 *                                 alignment, calloc's zeros, malloc_usable_size (writes all of
 *                                 it), contents across realloc growth and shrinkage (to and from
 *                                 sampled and unsampled blocks), realloc(p, 0), page-aligned
 *                                 blocks; frees everything, keeps 100 objects of 1000 B live
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
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

/* ---- the three sites ---- */

__attribute__((noinline)) void *site_16(void) {
    void *p = malloc(16);
    g_sink += (uintptr_t)p;
    return p;
}

__attribute__((noinline)) void *site_4k(void) {
    void *p = malloc(4096);
    g_sink += (uintptr_t)p;
    return p;
}

__attribute__((noinline)) void *site_1m(void) {
    void *p = malloc(1 << 20);
    g_sink += (uintptr_t)p;
    return p;
}

static void sites(double secs) {
    uint64_t n16 = 0, n4k = 0, n1m = 0;
    double start = now_s();
    /* SECONDS, and longer (up to 4x) until each site allocated 2 GiB: a loaded machine still
     * gets enough samples at a fixed period */
    while (now_s() < start + secs || (n1m < 2048 && now_s() < start + 4 * secs)) {
        free(site_1m());
        n1m++;
        for (int i = 0; i < 256; i++)
            free(site_4k());
        n4k += 256;
        for (int i = 0; i < 65536; i++)
            free(site_16());
        n16 += 65536;
    }
    printf("b16=%llu n16=%llu b4k=%llu n4k=%llu b1m=%llu n1m=%llu\n",
           (unsigned long long)(n16 * 16), (unsigned long long)n16,
           (unsigned long long)(n4k * 4096), (unsigned long long)n4k,
           (unsigned long long)(n1m << 20), (unsigned long long)n1m);
}

/* ---- issue 19: the sites in sequence ---- */

static void sleep_until(double t) {
    double d = t - now_s();
    if (d <= 0)
        return;
    struct timespec ts = {(time_t)d, (long)((d - (double)(time_t)d) * 1e9)};
    nanosleep(&ts, NULL);
}

/* One phase: n calls of site, spread over secs (0: at full speed). Returns its duration. */
static double phase(void *(*site)(void), uint64_t n, double secs) {
    double start = now_s();
    uint64_t slices = secs > 0 ? 100 : 1, done = 0;
    for (uint64_t k = 1; k <= slices; k++) {
        uint64_t upto = n * k / slices;
        for (; done < upto; done++)
            free(site());
        if (secs > 0)
            sleep_until(start + secs * (double)k / (double)slices);
    }
    return now_s() - start;
}

static void phases(const char *order, double scale, double secs) {
    uint64_t n16 = (uint64_t)(80e6 * scale), n4k = (uint64_t)(320e3 * scale);
    uint64_t n1m = (uint64_t)(1280 * scale);
    double d16, d4k, d1m;
    if (!strcmp(order, "rev")) {
        d1m = phase(site_1m, n1m, secs);
        d4k = phase(site_4k, n4k, secs);
        d16 = phase(site_16, n16, secs);
    } else {
        d16 = phase(site_16, n16, secs);
        d4k = phase(site_4k, n4k, secs);
        d1m = phase(site_1m, n1m, secs);
    }
    printf("b16=%llu n16=%llu b4k=%llu n4k=%llu b1m=%llu n1m=%llu t16=%.4f t4k=%.4f t1m=%.4f\n",
           (unsigned long long)(n16 * 16), (unsigned long long)n16,
           (unsigned long long)(n4k * 4096), (unsigned long long)n4k,
           (unsigned long long)(n1m << 20), (unsigned long long)n1m, d16, d4k, d1m);
}

/* ---- posix_memalign, realloc chains and the rest of the family ---- */

static void fail(const char *what) {
    printf("FAIL %s\n", what);
    fflush(stdout);
    exit(1);
}

__attribute__((noinline)) void *align_site(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n) != 0 || ((uintptr_t)p & 63))
        fail("posix_memalign");
    g_sink += (uintptr_t)p;
    return p;
}

__attribute__((noinline)) void *grow_site(void *p, size_t n) {
    void *q = realloc(p, n);
    if (!q)
        fail("realloc");
    return q;
}

__attribute__((noinline)) void misc_site(void) {
    void *p[6];
    p[0] = memalign(64, 4096);
    p[1] = aligned_alloc(64, 4096);
    p[2] = valloc(4096);
    p[3] = pvalloc(4096);
    p[4] = reallocarray(NULL, 512, 8);
    p[5] = calloc(512, 8);
    for (int i = 0; i < 6; i++) {
        uintptr_t mask = i < 2 ? 63 : i < 4 ? 4095 : 0; /* 64-byte / page alignment */
        if (!p[i] || ((uintptr_t)p[i] & mask))
            fail("misc alloc");
        if (i == 5 && ((char *)p[i])[4095] != 0)
            fail("calloc not zeroed");
        g_sink += (uintptr_t)p[i];
        free(p[i]);
    }
}

static void chain(double secs) {
    uint64_t ba = 0, bg = 0, bm = 0, chains = 0;
    double start = now_s();
    /* SECONDS, and longer (up to 4x) until each site allocated 24 GiB */
    while (now_s() < start + secs || (bm < (24ull << 30) && now_s() < start + 4 * secs)) {
        for (int i = 0; i < 256; i++) /* 1 MiB of posix_memalign per step */
            free(align_site(4096));
        ba += 256 * 4096;
        /* one chain: 4 KiB (align_site) then realloc 8 KiB, 16 KiB, ..., 512 KiB (1016 KiB) */
        unsigned char *p = align_site(4096);
        ba += 4096;
        size_t have = 4096;
        memset(p, 0x5a, have);
        for (size_t n = 8192; n <= (512 << 10); n *= 2) {
            p = grow_site(p, n);
            bg += n;
            if (p[0] != 0x5a || p[have - 1] != 0x5a)
                fail("realloc lost the contents");
            memset(p + have, 0x5a, n - have);
            have = n;
        }
        free(p);
        chains++;
        for (int i = 0; i < 40; i++) /* 40 x 6 x 4 KiB = 960 KiB per step */
            misc_site();
        bm += 40 * 6 * 4096;
    }
    printf("align_bytes=%llu grow_bytes=%llu misc_bytes=%llu chains=%llu\n",
           (unsigned long long)ba, (unsigned long long)bg, (unsigned long long)bm,
           (unsigned long long)chains);
}

static void leak(double secs) {
    double start = now_s(), next = start + 1;
    uint64_t leaked = 0, churned = 0;
    while (now_s() < start + secs) {
        for (int i = 0; i < 20; i++) /* 20 x 1 MiB churn per 100 ms step... */
            free(churn_site(1 << 20));
        churned += 20 << 20;
        for (int i = 0; i < 25; i++) {
            leak_site(8 << 10); /* 200 KiB per step, 2 MiB/s */
            leaked += 8 << 10;
        }
        usleep(100000);
        if (now_s() >= next) {
            flush();
            next += 1;
        }
    }
    printf("leaked=%llu churned=%llu\n", (unsigned long long)leaked,
           (unsigned long long)churned);
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

/* Background allocators for mtfork and dlopen: malloc/free of mixed sizes, a shared mutex
 * and (mtfork) a pipe write, until g_bg_stop. */
static volatile int g_bg_stop;
static pthread_mutex_t g_bg_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_bg_pipe[2] = {-1, -1};

__attribute__((noinline)) void *bg_site(size_t n) {
    void *p = malloc(n);
    if (p)
        memset(p, 3, n < 64 ? n : 64);
    return p;
}

static void *bg_alloc_thread(void *arg) {
    uintptr_t k = (uintptr_t)arg;
    while (!g_bg_stop) {
        void *keep[16];
        for (int i = 0; i < 16; i++)
            keep[i] = bg_site(16u << ((k + (unsigned)i) % 14)); /* 16 B .. 128 KiB */
        pthread_mutex_lock(&g_bg_mu);
        g_sink += (uintptr_t)keep[0];
        pthread_mutex_unlock(&g_bg_mu);
        for (int i = 0; i < 16; i++)
            free(keep[i]);
        if (g_bg_pipe[1] >= 0) {
            char c = 'x';
            if (write(g_bg_pipe[1], &c, 1) < 0) { /* full pipe (non-blocking): fine */
            }
        }
    }
    return NULL;
}

static void *child_thread(void *arg) {
    (void)arg;
    for (int i = 0; i < 2000; i++)
        free(bg_site(100 + (size_t)i * 37 % 70000));
    return NULL;
}

static void in_mtfork(int n) {
    if (pipe(g_bg_pipe) != 0)
        exit(1);
    fcntl(g_bg_pipe[1], F_SETFL, O_NONBLOCK);
    fcntl(g_bg_pipe[0], F_SETFL, O_NONBLOCK);
    pthread_t th[4];
    for (uintptr_t i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, bg_alloc_thread, (void *)i);
    int ok = 0;
    for (int round = 0; round < n; round++) {
        char drain[4096];
        while (read(g_bg_pipe[0], drain, sizeof drain) > 0)
            ;
        pid_t pid = fork();
        if (pid == 0) {
            alarm(20); /* a deadlocked child dies of SIGALRM, so the parent reports it */
            pthread_t ct[2];
            for (int i = 0; i < 2; i++)
                if (pthread_create(&ct[i], NULL, child_thread, NULL) != 0)
                    _exit(3);
            free(bg_site(12345));
            for (int i = 0; i < 2; i++)
                pthread_join(ct[i], NULL);
            exit(0);
        }
        if (pid < 0)
            exit(1);
        int st;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            printf("child %d of %d failed: status %d%s\n", round, n, st,
                   WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM ? " (hung 20 s)" : "");
            exit(1);
        }
        ok++;
    }
    g_bg_stop = 1;
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    printf("mtfork ok children=%d\n", ok);
}

static void in_dlopen(const char *lib, int n) {
    pthread_t th[2];
    for (uintptr_t i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, bg_alloc_thread, (void *)i);
    uint64_t calls = 0;
    for (int i = 0; i < n; i++) {
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            printf("dlopen %s: %s\n", lib, dlerror());
            exit(1);
        }
        void *(*f)(size_t) = (void *(*)(size_t))dlsym(h, "dl_alloc_site");
        for (int k = 0; k < 100; k++) {
            free(big_site(10000));
            if (f) {
                free(f(20000));
                calls++;
            }
        }
        dlclose(h);
    }
    g_bg_stop = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    printf("dlopen ok lib_calls=%llu\n", (unsigned long long)calls);
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

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(seed + i * 7);
}

static int same(const unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed + i * 7))
            return 0;
    return 1;
}

#define HCHECK(c)                                                                                  \
    do {                                                                                           \
        if (!(c)) {                                                                                \
            printf("headers: check failed at line %d: %s\n", __LINE__, #c);                        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* One object of n bytes from entry point k (0..8), checked and written through its usable size. */
__attribute__((noinline)) void *hdr_site(int k, size_t n) {
    void *p = NULL;
    size_t al = 0;
    switch (k) {
    case 0: p = malloc(n); break;
    case 1: p = calloc(n, 1); break;
    case 2: al = 64; HCHECK(posix_memalign(&p, al, n) == 0); break;
    case 3: al = 4096; HCHECK(posix_memalign(&p, al, n) == 0); break;
    case 4: al = 256; p = aligned_alloc(al, (n + al - 1) / al * al); break;
    case 5: al = 8192; p = memalign(al, n); break;
    case 6: al = 4096; p = valloc(n); break;
    case 7: al = 4096; p = pvalloc(n); break;
    default: p = reallocarray(NULL, n, 1); break;
    }
    HCHECK(p != NULL);
    if (al)
        HCHECK((uintptr_t)p % al == 0);
    if (k == 1)
        for (size_t i = 0; i < n; i++)
            HCHECK(((unsigned char *)p)[i] == 0);
    size_t u = malloc_usable_size(p);
    HCHECK(u >= n);
    memset(p, 0xa5, u); /* a usable size too large would overwrite the allocator's next header */
    return p;
}

static void headers(int rounds) {
    static const size_t sizes[] = {1, 16, 100, 1000, 4096, 5000, 70000, 300000};
    void *keep[100];
    for (int i = 0; i < 100; i++)
        keep[i] = hdr_site(0, 1000);
    uint64_t objects = 0;
    for (int r = 0; r < rounds; r++) {
        for (int k = 0; k < 9; k++)
            for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++, objects++) {
                size_t n = sizes[s];
                unsigned char *p = hdr_site(k, n);
                fill(p, n, (unsigned)(r + k));
                size_t m = n * 3 + 1; /* grow, then shrink below the original */
                p = realloc(p, m);
                HCHECK(p && same(p, n, (unsigned)(r + k)));
                fill(p, m, (unsigned)s);
                p = realloc(p, n / 2 + 1);
                HCHECK(p && same(p, n / 2 + 1, (unsigned)s));
                if (s % 2) {
                    HCHECK(realloc(p, 0) == NULL); /* glibc: frees p */
                } else {
                    free(p);
                }
            }
        free(NULL);
        void *p = realloc(NULL, 100);
        HCHECK(p);
        free(p);
    }
    for (int i = 0; i < 100; i++)
        HCHECK(malloc_usable_size(keep[i]) >= 1000);
    flush();
    printf("headers ok objects=%llu live=100\n", (unsigned long long)objects);
}

/* The program's view of three allocator entry points: libc's own (direct=1), or the global
 * definition the loader bound (the agent's hook when preloaded: hooked=1). */
static void bypass(void) {
    void *libc = dlopen("libc.so.6", RTLD_NOLOAD | RTLD_LAZY);
    void *(*volatile m)(size_t) = malloc;
    void (*volatile f)(void *) = free;
    size_t (*volatile u)(void *) = malloc_usable_size;
    int direct = libc && (void *)m == dlsym(libc, "malloc") && (void *)f == dlsym(libc, "free") &&
                 (void *)u == dlsym(libc, "malloc_usable_size");
    int hooked = (void *)m == dlsym(RTLD_DEFAULT, "malloc") && (void *)m != dlsym(libc, "malloc");
    printf("direct=%d hooked=%d\n", direct, hooked);
    headers(20);
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
        in_dlopen(argv[2], argc > 3 ? atoi(argv[3]) : 200);
    else if (!strcmp(argv[1], "mtfork"))
        in_mtfork(argc > 2 ? atoi(argv[2]) : 50);
    else if (!strcmp(argv[1], "sites"))
        sites(secs);
    else if (!strcmp(argv[1], "phases") && argc > 4)
        phases(argv[2], atof(argv[3]), atof(argv[4]));
    else if (!strcmp(argv[1], "chain"))
        chain(secs);
    else if (!strcmp(argv[1], "full"))
        full(secs);
    else if (!strcmp(argv[1], "headers"))
        headers(argc > 2 ? atoi(argv[2]) : 100);
    else if (!strcmp(argv[1], "bypass"))
        bypass();
    else
        return 2;
    fflush(stdout);
    return 0;
}
