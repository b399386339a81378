/* ag_alloc.c, the agent's private allocator (issue 13), on its own: every size class and big
 * blocks (16-byte alignment, usable size, contents intact), realloc growing and shrinking,
 * calloc of reused memory, aligned blocks, 4 threads allocating and freeing at once, memory
 * given back, a pointer that is not ours passed to the real free and counted, fork (the atfork
 * protocol while a thread allocates; a child without it whose lock is orphaned: NULL at once,
 * never a hang), and the stable sort that replaces glibc's qsort. */
#include "ag_alloc.h"
#include "support/runner.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/wait.h>

/* As agent.c registers them at start (the runner forks each test, too). */
__attribute__((constructor)) static void register_atfork(void) {
    pthread_atfork(ag_alloc_fork_prepare, ag_alloc_fork_parent, ag_alloc_fork_child);
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(seed + i * 31);
}

static int intact(const unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(seed + i * 31))
            return 0;
    return 1;
}

static uint64_t live(void) {
    ag_alloc_stats_t st;
    ag_alloc_stats(&st);
    return st.live_blocks;
}

/* Every size up to 4 KiB, then every class boundary up to big blocks: aligned, usable >= n,
 * writable to the end without touching a neighbour. */
static void test_sizes(void) {
    enum { N = 6000 };
    static unsigned char *p[N];
    static size_t sz[N];
    int k = 0;
    for (size_t n = 0; n <= 4096; n++)
        sz[k++] = n;
    for (size_t b = 4096; b <= (1u << 21); b *= 2)
        for (int d = -17; d <= 17; d += 17)
            sz[k++] = (size_t)((long)b + b / 4 + d);
    uint64_t live0 = live();
    for (int i = 0; i < k; i++) {
        p[i] = ag_malloc(sz[i]);
        CHECKF(p[i] != NULL, "size %zu", sz[i]);
        CHECKF(((uintptr_t)p[i] & 15) == 0, "size %zu at %p", sz[i], (void *)p[i]);
        size_t u = ag_alloc_usable(p[i]);
        CHECKF(u >= sz[i] && u <= (sz[i] > 32768 ? sz[i] + (256u << 10)
                                   : sz[i] > 64   ? sz[i] + sz[i] / 4
                                                  : 64),
               "size %zu usable %zu", sz[i], u);
        CHECK(ag_alloc_owns(p[i]));
        fill(p[i], u < 8192 ? u : 8192, (unsigned)i); /* and the last bytes: */
        memset(p[i] + u - (u < 16 ? u : 16), 0xa5, u < 16 ? u : 16);
    }
    CHECK_EQ(live() - live0, k);
    for (int i = 0; i < k; i++) {
        size_t u = ag_alloc_usable(p[i]), tail = u < 16 ? u : 16;
        CHECKF(intact(p[i], u - tail < 8192 ? u - tail : 8192, (unsigned)i),
               "size %zu overwritten", sz[i]);
        for (size_t j = u - tail; j < u; j++)
            CHECKF(p[i][j] == 0xa5, "size %zu: end overwritten", sz[i]);
        ag_free(p[i]);
    }
    CHECK_EQ(live(), live0);
    ag_free(NULL);
}

/* Growth by 1.37x from 1 byte to 4 MiB and back down: the contents follow. */
static void test_realloc(void) {
    unsigned char *p = ag_realloc(NULL, 1);
    CHECK(p != NULL);
    size_t n = 1;
    fill(p, n, 7);
    while (n < (4u << 20)) {
        size_t m = n + n * 37 / 100 + 1;
        p = ag_realloc(p, m);
        CHECK(p != NULL && ((uintptr_t)p & 15) == 0);
        CHECKF(intact(p, n, 7), "grown %zu -> %zu", n, m);
        fill(p, m, 7);
        n = m;
    }
    while (n > 3) {
        n /= 3;
        p = ag_realloc(p, n);
        CHECK(p != NULL);
        CHECKF(intact(p, n, 7), "shrunk to %zu", n);
    }
    uint64_t before = live();
    CHECK(ag_realloc(p, 0) == NULL); /* frees */
    CHECK_EQ(live(), before - 1);
}

static void test_calloc_aligned(void) {
    for (int round = 0; round < 3; round++) {
        unsigned char *a = ag_malloc(1000);
        memset(a, 0xff, 1000);
        ag_free(a);
        unsigned char *z = ag_calloc(10, 100); /* most likely a's block again */
        for (int i = 0; i < 1000; i++)
            CHECK(z[i] == 0);
        ag_free(z);
    }
    errno = 0;
    CHECK(ag_calloc(SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
    size_t al[] = {8, 16, 32, 64, 256, 4096};
    for (size_t i = 0; i < sizeof al / sizeof al[0]; i++) {
        void *q = NULL;
        CHECK(ag_posix_memalign(&q, al[i], 100) == 0);
        CHECKF(((uintptr_t)q % al[i]) == 0, "align %zu: %p", al[i], q);
        memset(q, 1, 100);
        ag_free(q);
    }
    void *q = NULL;
    CHECK(ag_posix_memalign(&q, 24, 100) == EINVAL);
    char *s = ag_strdup("fleetprof"), *t = ag_strndup("fleetprof", 5);
    CHECK(!strcmp(s, "fleetprof") && !strcmp(t, "fleet") && ag_alloc_owns(s) && ag_alloc_owns(t));
    ag_free(s);
    ag_free(t);
}

/* Memory goes back: a freed big block is kept for reuse (up to 32 MiB in all), the rest is
 * unmapped; an empty slab is unmapped unless it is the one kept for its class. */
static void test_give_back(void) {
    ag_alloc_stats_t a, b, c, d;
    ag_alloc_stats(&a);
    void *big = ag_malloc(10u << 20);
    memset(big, 1, 10u << 20);
    ag_alloc_stats(&b);
    CHECK(b.mapped_bytes >= a.mapped_bytes + (10u << 20));
    ag_free(big);
    void *again = ag_malloc(9u << 20); /* within 2x: the same mapping, no new one */
    ag_alloc_stats(&c);
    CHECK(again == big && c.maps == b.maps);
    ag_free(again);
    void *six[6];
    for (int i = 0; i < 6; i++)
        CHECK((six[i] = ag_malloc(10u << 20)) != NULL);
    for (int i = 0; i < 6; i++)
        ag_free(six[i]);
    ag_alloc_stats(&c);
    CHECKF(c.mapped_bytes <= a.mapped_bytes + (32u << 20), "mapped %llu, was %llu",
           (unsigned long long)c.mapped_bytes, (unsigned long long)a.mapped_bytes);
    CHECK(c.unmaps > b.unmaps);
    enum { M = 20000 };
    static void *p[M];
    for (int i = 0; i < M; i++) /* 20000 x 400 B: ~8 MiB of slabs of one class */
        CHECK((p[i] = ag_malloc(400)) != NULL);
    for (int i = 0; i < M; i++)
        ag_free(p[i]);
    ag_alloc_stats(&d);
    CHECKF(d.mapped_bytes <= c.mapped_bytes + (256u << 10), "mapped %llu, was %llu",
           (unsigned long long)d.mapped_bytes, (unsigned long long)c.mapped_bytes);
    CHECK(d.unmaps >= c.unmaps + 20);
}

/* A pointer from the real malloc (a libc function's result) is not ours: passed on, counted. */
static void test_foreign(void) {
    ag_alloc_stats_t a, b;
    ag_alloc_stats(&a);
    char *m = malloc(100), buf[16];
    CHECK(!ag_alloc_owns(m) && !ag_alloc_owns(buf) && !ag_alloc_usable(buf));
    ag_free(m);
    ag_alloc_stats(&b);
    CHECK_EQ(b.foreign_frees, a.foreign_frees + 1);
}

typedef struct {
    unsigned id;
    unsigned long ops;
} worker_t;

static _Atomic int g_stop;

static void *worker(void *arg) {
    worker_t *w = arg;
    enum { K = 256 };
    unsigned char *p[K] = {0};
    size_t n[K] = {0};
    uint64_t x = 0x9E3779B97F4A7C15ull * (w->id + 1);
    for (unsigned long i = 0; !atomic_load(&g_stop) || i < 20000; i++) {
        if (w->ops && i >= w->ops)
            break;
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        unsigned k = (unsigned)(x % K);
        if (p[k]) {
            if (!intact(p[k], n[k] < 64 ? n[k] : 64, w->id * 977 + k))
                return (void *)1;
            ag_free(p[k]);
            p[k] = NULL;
        } else {
            n[k] = (x >> 20) % 64 == 0 ? (size_t)(x >> 32) % 200000 : (size_t)(x >> 32) % 2048;
            if (!(p[k] = ag_malloc(n[k])))
                return (void *)2;
            fill(p[k], n[k] < 64 ? n[k] : 64, w->id * 977 + k);
        }
    }
    for (unsigned k = 0; k < K; k++)
        ag_free(p[k]);
    return NULL;
}

static void test_threads(void) {
    uint64_t live0 = live();
    pthread_t t[4];
    worker_t w[4];
    for (unsigned i = 0; i < 4; i++) {
        w[i] = (worker_t){i, 100000};
        CHECK(pthread_create(&t[i], NULL, worker, &w[i]) == 0);
    }
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        CHECKF(r == NULL, "thread %d: %s", i, r == (void *)1 ? "a block was overwritten"
                                                              : "allocation failed");
    }
    CHECK_EQ(live(), live0);
}

/* fork() with the atfork protocol (as agent.c's handlers do) while a thread allocates: each
 * child allocates, frees and checks, 30 times (10 under ThreadSanitizer). */
static void test_fork(void) {
    atomic_store(&g_stop, 0);
    worker_t w = {9, 0};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, worker, &w) == 0);
#ifdef __SANITIZE_THREAD__
    const int forks = 10; /* each fork of a ThreadSanitizer process costs ~40 ms */
#else
    const int forks = 30;
#endif
    for (int i = 0; i < forks; i++) {
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            worker_t c = {10, 20000};
            _exit(worker(&c) == NULL ? 0 : 3);
        }
        int st;
        CHECK(waitpid(pid, &st, 0) == pid);
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child %d: status %#x", i, st);
    }
    atomic_store(&g_stop, 1);
    pthread_join(t, NULL);
}

static double mono(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* A child made without atfork handlers (a raw fork system call, as glibc's _Fork) while the
 * lock is held: its allocations fail within about 100 ms instead of waiting forever, and
 * frees do nothing. The parent goes on. */
static void test_orphaned_lock(void) {
    void *keep = ag_malloc(100);
    ag_alloc_fork_prepare(); /* holds the lock, as a thread of the parent would */
    pid_t pid = (pid_t)syscall(SYS_fork);
    if (pid == 0) {
        double t0 = mono();
        void *p = ag_malloc(32);
        ag_free(keep);
        void *q = ag_malloc(32);
        _exit(p == NULL && q == NULL && mono() - t0 < 2 ? 0 : 4);
    }
    ag_alloc_fork_parent();
    CHECK(pid > 0);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
    void *p = ag_malloc(32); /* the parent's allocator is untouched */
    CHECK(p != NULL);
    ag_free(p);
    ag_free(keep);
}

typedef struct {
    uint32_t key, order;
} pair_t;

static int cmp_pair(const void *a, const void *b) {
    const pair_t *x = a, *y = b;
    return (x->key > y->key) - (x->key < y->key);
}

/* ag_qsort: sorted, stable (equal keys keep their order), the same multiset. */
static void test_sort(void) {
    size_t ns[] = {0, 1, 2, 15, 16, 17, 100, 1000, 100003};
    for (size_t t = 0; t < sizeof ns / sizeof ns[0]; t++) {
        size_t n = ns[t];
        pair_t *a = ag_malloc((n + 1) * sizeof *a);
        uint64_t x = 88172645463325252ull, sum = 0;
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            a[i] = (pair_t){(uint32_t)(x % (n / 4 + 1)), (uint32_t)i};
            sum += a[i].key;
        }
        ag_qsort(a, n, sizeof *a, cmp_pair);
        for (size_t i = 1; i < n; i++) {
            CHECKF(a[i - 1].key <= a[i].key, "n %zu at %zu", n, i);
            CHECKF(a[i - 1].key < a[i].key || a[i - 1].order < a[i].order, "unstable at %zu", i);
        }
        for (size_t i = 0; i < n; i++)
            sum -= a[i].key;
        CHECK(sum == 0);
        ag_free(a);
    }
}

static const tr_test_t tests[] = {
    {"sizes", test_sizes},
    {"realloc", test_realloc},
    {"calloc_aligned", test_calloc_aligned},
    {"give_back", test_give_back},
    {"foreign", test_foreign},
    {"threads", test_threads},
    {"fork", test_fork},
    {"orphaned_lock", test_orphaned_lock},
    {"sort", test_sort},
    {0, 0},
};
TR_MAIN(tests)
