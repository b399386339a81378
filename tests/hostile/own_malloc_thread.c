/* Hostile case (issue 13, foreign allocators): a single-threaded program with a malloc of its
 * own that takes no lock (a bump arena: correct for one thread) and that no other thread may
 * call. The agent's threads must never call it: each call is checked against the main thread
 * (gettid() == getpid()); a call from another thread is counted, its caller written to stderr
 * (write(2) and dladdr only), and after main returns it aborts at once (the agent's exit
 * work). Meanwhile the program does what the agent samples: CPU (a checksum loop), its own
 * allocations, uncontended and timed-out mutex waits, a timed condition wait, file I/O and
 * sleeps, for argv[1] seconds (default 3). stdout: the checksums and `foreign=0`, identical
 * with and without the agent unless the agent calls this malloc from its thread. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* malloc and realloc are ours: GCC, seeing both inline, warns about realloc on g_heap */
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"

static _Alignas(16) char g_heap[512 << 20];
static size_t g_used; /* no lock, no atomics: one thread only */
static unsigned long g_foreign;
static int g_main_done;

static void say(const char *s) {
    ssize_t w = write(2, s, strlen(s));
    (void)w;
}

/* Every entry point checks its thread first. */
static void check_thread(const char *fn, void *caller) {
    if (syscall(SYS_gettid) == getpid())
        return;
    __atomic_add_fetch(&g_foreign, 1, __ATOMIC_RELAXED);
    char line[512];
    Dl_info di;
    memset(&di, 0, sizeof di);
    dladdr(caller, &di);
    snprintf(line, sizeof line, "foreign %s from thread %ld: %p %s+%#lx (%s)\n", fn,
             (long)syscall(SYS_gettid), caller, di.dli_sname ? di.dli_sname : "?",
             (unsigned long)((char *)caller - (char *)(di.dli_saddr ? di.dli_saddr : di.dli_fbase)),
             di.dli_fname ? di.dli_fname : "?");
    say(line);
    if (g_main_done)
        abort();
}

static void *bump(size_t n, size_t align) {
    size_t a = (g_used + 16 + align - 1) & ~(align - 1);
    if (a + n > sizeof g_heap)
        return NULL;
    g_used = a + n;
    memcpy(g_heap + a - 16, &n, sizeof n);
    return g_heap + a;
}

static size_t size_of(void *p) {
    size_t n;
    memcpy(&n, (char *)p - 16, sizeof n);
    return n;
}

void *malloc(size_t n) {
    check_thread("malloc", __builtin_return_address(0));
    return bump(n, 16);
}
void free(void *p) {
    check_thread("free", __builtin_return_address(0));
    (void)p;
}
void *calloc(size_t a, size_t b) {
    check_thread("calloc", __builtin_return_address(0));
    void *p = bump(a * b, 16); /* the arena is never reused: already zero */
    return p;
}
void *realloc(void *p, size_t n) {
    check_thread("realloc", __builtin_return_address(0));
    void *q = bump(n, 16);
    if (p && q) {
        size_t o = size_of(p);
        memcpy(q, p, o < n ? o : n);
    }
    return q;
}
void *memalign(size_t al, size_t n) {
    check_thread("memalign", __builtin_return_address(0));
    return bump(n, al < 16 ? 16 : al);
}
void *aligned_alloc(size_t al, size_t n) {
    check_thread("aligned_alloc", __builtin_return_address(0));
    return bump(n, al < 16 ? 16 : al);
}
int posix_memalign(void **out, size_t al, size_t n) {
    check_thread("posix_memalign", __builtin_return_address(0));
    void *p = bump(n, al < 16 ? 16 : al);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}
size_t malloc_usable_size(void *p) {
    check_thread("malloc_usable_size", __builtin_return_address(0));
    return p ? size_of(p) : 0;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static uint64_t __attribute__((noinline)) burn(uint64_t x, int n) {
    for (int i = 0; i < n; i++)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x;
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 3;
    char path[] = "/tmp/fp-own-malloc-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 2;
    unlink(path);
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
    uint64_t x = 1, bytes = 0, rounds = 0, timeouts = 0, io = 0;
    char buf[65536];
    double end = now() + secs;
    while (now() < end || rounds < 4) {
        x = burn(x, 2000000); /* CPU */
        for (int i = 0; i < 500; i++) { /* its own allocator */
            size_t n = 16 + (size_t)((x >> (i % 40)) & 1023);
            char *p = malloc(n);
            p[0] = (char)i;
            bytes += n;
            p = realloc(p, n * 2);
            free(p);
        }
        pthread_mutex_lock(&m); /* uncontended; then a wait that times out on itself */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 20000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        timeouts += pthread_cond_timedwait(&cv, &m, &ts) == ETIMEDOUT;
        pthread_mutex_unlock(&m);
        memset(buf, (int)(x & 0xff), sizeof buf); /* file I/O */
        io += pwrite(fd, buf, sizeof buf, 0) == (ssize_t)sizeof buf;
        io += pread(fd, buf, sizeof buf, 0) == (ssize_t)sizeof buf;
        io += fsync(fd) == 0;
        struct timespec nap = {0, 10000000}; /* off CPU */
        nanosleep(&nap, NULL);
        rounds++;
    }
    close(fd);
    /* rounds depend on the machine's speed: print only what must match */
    printf("own_malloc_thread ok checksum_ok=%d bytes_ok=%d timeouts_ok=%d io_ok=%d foreign=%lu\n",
           x != 1, bytes > 0, timeouts == rounds, io == 3 * rounds,
           __atomic_load_n(&g_foreign, __ATOMIC_RELAXED));
    fflush(stdout);
    g_main_done = 1;
    return 0;
}
