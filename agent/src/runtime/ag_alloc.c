/* The agent's private allocator: nothing the agent allocates comes from the program's malloc.
 *
 * Why: the agent's background thread is a second thread in a program that may have been
 * single-threaded, and a program may define its own malloc without any locking (a bump arena,
 * a game's frame allocator): fine for its one thread, broken by a second (issue 13:
 * tests/programs/alloc_own.c's unsynchronised bump allocator crashed, or lost the agent's
 * chunks, in 1 of 12 runs under load while the agent allocated there).
 *
 * Layout: memory comes from the kernel in slabs of 256 KiB aligned to 256 KiB, so the slab of
 * any block is its address rounded down. Blocks up to 32 KiB are served from slabs of one size
 * class (16, 32, 48, 64, then four classes per power of two: 80, 96, 112, 128, 160, ...,
 * 32768: at most 25% rounding above 64 bytes); each slab has its own free list and a bump
 * pointer over blocks never used yet, and a class keeps a doubly linked list of its slabs with
 * room. A slab that becomes empty is unmapped, but one per class is kept (the builder frees
 * everything at each chunk and allocates it all again: each chunk would unmap its pages and
 * fault them back in). Larger blocks (and
 * alignments above 16) get a mapping of their own, 256 KiB-aligned too, with the same header
 * in front; a freed one is kept for reuse (up to 8 mappings, 32 MiB in all; a request takes
 * the smallest that fits within twice its size). Every slab and big block is in a registry (an
 * open-addressing set of slab addresses): free() of a pointer that is not ours is recognised
 * without reading its memory, counted and passed to the real free (a libc function that
 * returned memory from the program's malloc; none is known to reach us, the count says).
 * Every block is 16-byte aligned.
 *
 * Threads: one lock (a futex word, not a pthread mutex: the agent interposes those) around
 * every operation; the mmap of a new slab is made under it (a few microseconds, rare). Any
 * thread, never a signal handler.
 *
 * fork: agent.c's atfork prepare takes the lock last (after the agent's own locks), the parent
 * and child release it, so the child's heap is consistent. A child made without atfork
 * handlers (glibc's _Fork, a raw fork system call) may find the lock held by a thread that is
 * not there: the first contended lock in a process whose pid is not the one recorded fails,
 * and from then on every allocation returns NULL and every free is a no-op in that child (the
 * agent stops profiling there anyway: agent.c, ag_unseen_child). Never a hang.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "ag_alloc.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SLAB_SHIFT 18
#define SLAB ((size_t)1 << SLAB_SHIFT)
#define HDR 128 /* slab header; blocks start here (16-aligned) */
#define MAX_SMALL 32768
#define N_CLASSES 40
#define BIG UINT32_MAX
#define BIG_CACHE 8                  /* freed big mappings kept ... */
#define BIG_CACHE_BYTES (32u << 20)  /* ... up to this much in all */
#define MAGIC 0x6167616c6c6f6321ull /* "agalloc!" */

typedef struct slab {
    uint64_t magic;   /* MAGIC ^ address */
    uint32_t cls;     /* size class, or BIG */
    uint32_t used;    /* blocks handed out */
    size_t size;      /* block size (class size, or a big block's usable size) */
    size_t map_len;   /* length of the mapping */
    void *free;       /* free blocks, linked through their first word */
    char *bump, *end; /* blocks never handed out yet */
    struct slab *prev, *next; /* the class's slabs with room */
    int listed;               /* on that list */
    int kept;                 /* empty, counted in A.empty[cls] */
} slab_t;
_Static_assert(sizeof(slab_t) <= HDR, "slab header fits");

static struct {
    _Atomic int lock;  /* 0 free, 1 held, 2 held with waiters */
    int dead;          /* a fork child found the lock orphaned: nothing more */
    pid_t pid;         /* the process the lock belongs to */
    slab_t *avail[N_CLASSES];
    uint32_t empty[N_CLASSES]; /* slabs of the class with nothing handed out, kept */
    slab_t *big_free[BIG_CACHE]; /* freed big mappings kept for reuse */
    size_t big_free_bytes;
    uintptr_t *reg;    /* registry: slab addresses; 0 empty, 1 deleted */
    size_t reg_cap, reg_used, reg_n;
    ag_alloc_stats_t st;
} A;

/* Foreign pointers go to the real functions: the global ones the link's --wrap leaves under
 * __real_ (AG_ALLOC_WRAPPED, the agent outside sanitizer builds), else plain free/realloc
 * (the unit test; sanitizer builds, where the agent keeps the sanitizer's checked malloc). */
#ifdef AG_ALLOC_WRAPPED
void __real_free(void *p);
void *__real_realloc(void *p, size_t n);
char *__real_strdup(const char *s);
#define REAL_FREE __real_free
#define REAL_REALLOC __real_realloc
#define REAL_STRDUP __real_strdup
#else
#define REAL_FREE free
#define REAL_REALLOC realloc
#define REAL_STRDUP strdup
#endif

/* ---- lock ---- */

static long futex(_Atomic int *w, int op, int val, const struct timespec *ts) {
    return syscall(SYS_futex, (int *)w, op | FUTEX_PRIVATE_FLAG, val, ts, NULL, 0);
}

/* 0 held, -1 refused (a fork child with an orphaned lock). */
static int lock(void) {
    int c = 0;
    if (atomic_compare_exchange_strong(&A.lock, &c, 1))
        return A.dead ? (atomic_store(&A.lock, 0), -1) : 0;
    if (A.dead)
        return -1;
    for (int spin = 0; spin < 100; spin++) {
        c = 0;
        if (atomic_compare_exchange_weak(&A.lock, &c, 1))
            return 0;
        __builtin_ia32_pause();
    }
    if (c != 2)
        c = atomic_exchange(&A.lock, 2);
    while (c != 0) {
        if (A.pid && (pid_t)syscall(SYS_getpid) != A.pid) {
            A.dead = 1; /* a child made without our atfork handlers: the holder is not here */
            return -1;
        }
        struct timespec ts = {0, 100000000};
        futex(&A.lock, FUTEX_WAIT, 2, &ts);
        c = atomic_exchange(&A.lock, 2);
    }
    return 0;
}

static void unlock(void) {
    if (atomic_exchange(&A.lock, 0) == 2)
        futex(&A.lock, FUTEX_WAKE, 1, NULL);
}

/* ---- size classes ---- */

static unsigned size_class(size_t n) {
    if (n <= 64)
        return n ? (unsigned)((n + 15) >> 4) - 1 : 0;
    unsigned k = 63u - (unsigned)__builtin_clzll((unsigned long long)(n - 1)); /* 2^k < n */
    size_t step = ((size_t)1 << k) >> 2;
    return 4 + (k - 6) * 4 + (unsigned)((n - ((size_t)1 << k) + step - 1) / step) - 1;
}

static size_t class_size(unsigned c) {
    if (c < 4)
        return 16 * (size_t)(c + 1);
    unsigned k = 6 + (c - 4) / 4, j = (c - 4) % 4 + 1;
    return ((size_t)1 << k) + j * (((size_t)1 << k) >> 2);
}

/* ---- registry ---- */

static size_t reg_hash(uintptr_t base) {
    return (size_t)(((uint64_t)(base >> SLAB_SHIFT) * 0x9E3779B97F4A7C15ull) >> 20);
}

static int reg_grow(void) {
    size_t cap = A.reg_cap ? A.reg_cap * 2 : 1024;
    uintptr_t *t = mmap(NULL, cap * sizeof *t, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                        -1, 0);
    if (t == MAP_FAILED)
        return -1;
    for (size_t i = 0; i < A.reg_cap; i++) {
        uintptr_t b = A.reg[i];
        if (b <= 1)
            continue;
        size_t h = reg_hash(b) & (cap - 1);
        while (t[h])
            h = (h + 1) & (cap - 1);
        t[h] = b;
    }
    if (A.reg)
        munmap(A.reg, A.reg_cap * sizeof *A.reg);
    A.reg = t;
    A.reg_cap = cap;
    A.reg_used = A.reg_n;
    return 0;
}

static int reg_add(uintptr_t base) {
    if ((A.reg_used + 1) * 2 > A.reg_cap && reg_grow() != 0)
        return -1;
    size_t h = reg_hash(base) & (A.reg_cap - 1);
    while (A.reg[h] > 1)
        h = (h + 1) & (A.reg_cap - 1);
    if (A.reg[h] == 0)
        A.reg_used++;
    A.reg[h] = base;
    A.reg_n++;
    return 0;
}

static size_t reg_find(uintptr_t base) {
    if (!A.reg_cap)
        return SIZE_MAX;
    size_t h = reg_hash(base) & (A.reg_cap - 1);
    for (;;) {
        if (A.reg[h] == base)
            return h;
        if (A.reg[h] == 0)
            return SIZE_MAX;
        h = (h + 1) & (A.reg_cap - 1);
    }
}

static void reg_del(size_t slot) {
    A.reg[slot] = 1;
    A.reg_n--;
}

/* ---- mappings ---- */

/* A mapping of len bytes (a multiple of SLAB) aligned to SLAB, or NULL. */
static void *map_aligned(size_t len) {
    if (len > SIZE_MAX - SLAB)
        return NULL;
    char *m = mmap(NULL, len + SLAB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    uintptr_t a = ((uintptr_t)m + SLAB - 1) & ~(uintptr_t)(SLAB - 1);
    if (a > (uintptr_t)m)
        munmap(m, a - (uintptr_t)m);
    size_t tail = (uintptr_t)m + len + SLAB - (a + len);
    if (tail)
        munmap((char *)a + len, tail);
    A.st.maps++;
    return (void *)a;
}

static slab_t *slab_new(size_t map_len, uint32_t cls, size_t size) {
    slab_t *s = map_aligned(map_len);
    if (!s)
        return NULL;
    if (reg_add((uintptr_t)s) != 0) {
        munmap(s, map_len);
        return NULL;
    }
    s->magic = MAGIC ^ (uintptr_t)s;
    s->cls = cls;
    s->size = size;
    s->map_len = map_len;
    s->bump = (char *)s + HDR;
    s->end = (char *)s + HDR + (cls == BIG ? 0 : (SLAB - HDR) / size * size);
    A.st.mapped_bytes += map_len;
    return s;
}

static void list_add(slab_t *s) {
    s->prev = NULL;
    s->next = A.avail[s->cls];
    if (s->next)
        s->next->prev = s;
    A.avail[s->cls] = s;
    s->listed = 1;
}

static void list_del(slab_t *s) {
    if (s->prev)
        s->prev->next = s->next;
    else
        A.avail[s->cls] = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->prev = s->next = NULL;
    s->listed = 0;
}

/* Unmaps s (under the lock; its registry slot given). */
static void slab_drop(slab_t *s, size_t slot) {
    reg_del(slot);
    A.st.mapped_bytes -= s->map_len;
    A.st.unmaps++;
    munmap(s, s->map_len);
}

/* A freed big mapping goes to the cache (the largest one there leaves if it would overflow),
 * else back to the kernel. Under the lock. */
static void big_keep(slab_t *s, size_t slot) {
    int at = -1, largest = -1;
    for (int i = 0; i < BIG_CACHE; i++) {
        if (!A.big_free[i]) {
            if (at < 0)
                at = i;
        } else if (largest < 0 || A.big_free[i]->map_len > A.big_free[largest]->map_len) {
            largest = i;
        }
    }
    while (largest >= 0 && (at < 0 || A.big_free_bytes + s->map_len > BIG_CACHE_BYTES)) {
        slab_t *l = A.big_free[largest];
        if (l->map_len <= s->map_len && A.big_free_bytes + s->map_len > BIG_CACHE_BYTES)
            break; /* s is the largest: it goes itself */
        A.big_free[largest] = NULL;
        A.big_free_bytes -= l->map_len;
        slab_drop(l, reg_find((uintptr_t)l));
        at = largest;
        largest = -1;
        for (int i = 0; i < BIG_CACHE; i++)
            if (A.big_free[i] &&
                (largest < 0 || A.big_free[i]->map_len > A.big_free[largest]->map_len))
                largest = i;
    }
    if (at >= 0 && A.big_free_bytes + s->map_len <= BIG_CACHE_BYTES) {
        A.big_free[at] = s;
        A.big_free_bytes += s->map_len;
        return;
    }
    slab_drop(s, slot);
}

/* ---- the interface ---- */

static void *big_alloc(size_t n, size_t align) {
    size_t off = align > HDR ? align : HDR;
    if (n > SIZE_MAX - off - SLAB || align > SLAB / 2)
        return NULL;
    size_t len = (off + n + SLAB - 1) & ~(SLAB - 1);
    if (lock() != 0)
        return NULL;
    /* a freed mapping of at least len and at most twice that: the smallest */
    int best = -1;
    for (int i = 0; i < BIG_CACHE; i++) {
        slab_t *c = A.big_free[i];
        if (c && c->map_len >= len && c->map_len <= 2 * len &&
            (best < 0 || c->map_len < A.big_free[best]->map_len))
            best = i;
    }
    slab_t *s;
    if (best >= 0) {
        s = A.big_free[best];
        A.big_free[best] = NULL;
        A.big_free_bytes -= s->map_len;
        s->size = n;
        s->used = 1;
    } else {
        s = slab_new(len, BIG, n);
        if (s)
            s->used = 1;
    }
    if (s)
        A.st.live_blocks++;
    else
        A.st.failed++;
    unlock();
    return s ? (char *)s + off : NULL;
}

void *ag_malloc(size_t n) {
    if (n > MAX_SMALL)
        return big_alloc(n, 16);
    unsigned c = size_class(n);
    if (lock() != 0)
        return NULL;
    slab_t *s = A.avail[c];
    if (!s) {
        size_t sz = class_size(c);
        if (!(s = slab_new(SLAB, c, sz))) {
            A.st.failed++;
            unlock();
            return NULL;
        }
        list_add(s);
    }
    if (s->kept) { /* the class's kept empty slab is in use again */
        s->kept = 0;
        A.empty[c]--;
    }
    void *p;
    if (s->free) {
        p = s->free;
        memcpy(&s->free, p, sizeof s->free);
    } else {
        p = s->bump;
        s->bump += s->size;
    }
    s->used++;
    if (!s->free && s->bump == s->end)
        list_del(s);
    A.st.live_blocks++;
    unlock();
    return p;
}

void ag_free(void *p) {
    if (!p)
        return;
    uintptr_t base = (uintptr_t)p & ~(uintptr_t)(SLAB - 1);
    if (lock() != 0)
        return;
    size_t slot = reg_find(base);
    if (slot == SIZE_MAX) {
        A.st.foreign_frees++;
        unlock();
        REAL_FREE(p);
        return;
    }
    slab_t *s = (slab_t *)base;
    A.st.live_blocks--;
    if (s->cls == BIG) {
        if (!s->used) { /* already freed (in the cache): a double free, ignored */
            A.st.live_blocks++;
            unlock();
            return;
        }
        s->used = 0;
        big_keep(s, slot);
        unlock();
        return;
    }
    memcpy(p, &s->free, sizeof s->free);
    s->free = p;
    s->used--;
    if (!s->listed)
        list_add(s);
    if (!s->used) { /* empty: one per class is kept (the builder frees everything at
                      * each chunk and allocates it again), the others go back */
        if (A.empty[s->cls] >= 1 && (s->prev || s->next)) {
            list_del(s);
            slab_drop(s, slot);
        } else {
            A.empty[s->cls]++;
            s->kept = 1;
        }
    }
    unlock();
}

int ag_alloc_owns(const void *p) {
    if (lock() != 0)
        return 0;
    int own = reg_find((uintptr_t)p & ~(uintptr_t)(SLAB - 1)) != SIZE_MAX;
    unlock();
    return own;
}

size_t ag_alloc_usable(const void *p) {
    if (!p || !ag_alloc_owns(p))
        return 0;
    const slab_t *s = (const slab_t *)((uintptr_t)p & ~(uintptr_t)(SLAB - 1));
    if (s->cls == BIG)
        return s->map_len - (size_t)((uintptr_t)p - (uintptr_t)s);
    return s->size;
}

void *ag_calloc(size_t a, size_t b) {
    size_t n;
    if (__builtin_mul_overflow(a, b, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    void *p = ag_malloc(n);
    if (p)
        memset(p, 0, n); /* a freed block holds old data; a fresh big mapping is zero anyway */
    return p;
}

void *ag_realloc(void *p, size_t n) {
    if (!p)
        return ag_malloc(n);
    if (n == 0) { /* glibc's: frees and returns NULL */
        ag_free(p);
        return NULL;
    }
    size_t have = ag_alloc_usable(p);
    if (!have) { /* not ours: never expected; the real realloc keeps the program's semantics */
        return REAL_REALLOC(p, n);
    }
    slab_t *s = (slab_t *)((uintptr_t)p & ~(uintptr_t)(SLAB - 1)); /* ours: p is live */
    if (n <= have && (n > MAX_SMALL ? n >= have / 2 : size_class(n) == size_class(have))) {
        if (s->cls == BIG)
            s->size = n; /* only the block's owner reads it (here) */
        return p;
    }
    if (s->cls == BIG)
        have = s->size; /* what was asked: the rest of the mapping was never written */
    void *q = ag_malloc(n);
    if (!q)
        return NULL; /* p untouched */
    memcpy(q, p, have < n ? have : n);
    ag_free(p);
    return q;
}

void *ag_reallocarray(void *p, size_t a, size_t b) {
    size_t n;
    if (__builtin_mul_overflow(a, b, &n)) {
        errno = ENOMEM;
        return NULL;
    }
    return ag_realloc(p, n);
}

char *ag_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = ag_malloc(n);
    return p ? memcpy(p, s, n) : NULL;
}

char *ag_global_strdup(const char *s) { return REAL_STRDUP(s); }

char *ag_strndup(const char *s, size_t n) {
    size_t len = strnlen(s, n);
    char *p = ag_malloc(len + 1);
    if (p) {
        memcpy(p, s, len);
        p[len] = '\0';
    }
    return p;
}

int ag_posix_memalign(void **out, size_t align, size_t n) {
    if (!align || (align & (align - 1)) || align % sizeof(void *))
        return EINVAL;
    void *p = align <= 16 ? ag_malloc(n) : big_alloc(n, align);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

void *ag_aligned_alloc(size_t align, size_t n) {
    void *p = NULL;
    int rc = ag_posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, n);
    if (rc)
        errno = rc;
    return p;
}

void ag_alloc_stats(ag_alloc_stats_t *out) {
    if (lock() != 0) {
        memset(out, 0, sizeof *out);
        return;
    }
    *out = A.st;
    unlock();
}

void ag_alloc_fork_prepare(void) {
    if (lock() != 0)
        A.dead = 1;
}

void ag_alloc_fork_parent(void) {
    if (!A.dead)
        unlock();
}

void ag_alloc_fork_child(void) {
    A.pid = (pid_t)syscall(SYS_getpid);
    atomic_store(&A.lock, 0);
}

__attribute__((constructor)) static void ag_alloc_init(void) {
    A.pid = (pid_t)syscall(SYS_getpid);
}

/* ---- sort ---- */

static void insertion(char *b, size_t n, size_t sz, int (*cmp)(const void *, const void *),
                      char *tmp) {
    for (size_t i = 1; i < n; i++) {
        size_t j = i;
        if (cmp(b + (j - 1) * sz, b + j * sz) <= 0)
            continue;
        memcpy(tmp, b + i * sz, sz);
        while (j > 0 && cmp(b + (j - 1) * sz, tmp) > 0) {
            memcpy(b + j * sz, b + (j - 1) * sz, sz);
            j--;
        }
        memcpy(b + j * sz, tmp, sz);
    }
}

/* Bottom-up merge sort of n elements of sz bytes: runs of 16 by insertion, then passes
 * between b and t (n * sz bytes). */
static void merge_sort(char *b, char *t, size_t n, size_t sz,
                       int (*cmp)(const void *, const void *), char *one) {
    for (size_t i = 0; i < n; i += 16)
        insertion(b + i * sz, n - i < 16 ? n - i : 16, sz, cmp, one);
    char *src = b, *dst = t;
    for (size_t w = 16; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                memcpy(dst + k++ * sz, cmp(src + j * sz, src + i * sz) < 0 ? src + j++ * sz
                                                                             : src + i++ * sz,
                       sz);
            memcpy(dst + k * sz, src + i * sz, (mid - i) * sz);
            k += mid - i;
            memcpy(dst + k * sz, src + j * sz, (hi - j) * sz);
        }
        char *x = src;
        src = dst;
        dst = x;
    }
    if (src != b)
        memcpy(b, src, n * sz);
}

void ag_qsort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *)) {
    if (n < 2 || !size)
        return;
    char small[256], *one = size <= sizeof small ? small : ag_malloc(size);
    if (!one)
        return; /* an element over 256 bytes and no memory: never the agent's case */
    char *t = n > 16 && size <= SIZE_MAX / n ? ag_malloc(n * size) : NULL;
    if (t)
        merge_sort(base, t, n, size, cmp, one);
    else
        insertion(base, n, size, cmp, one); /* stable too; quadratic, only without memory */
    ag_free(t);
    if (one != small)
        ag_free(one);
}

/* The agent's link wraps these (-Wl,--wrap): every reference outside the object that defines
 * the symbol (hook_alloc.c's interposers) comes here. */
#define AG_ALIAS(name, target) __typeof__(target) name __attribute__((alias(#target)))
AG_ALIAS(__wrap_malloc, ag_malloc);
AG_ALIAS(__wrap_calloc, ag_calloc);
AG_ALIAS(__wrap_realloc, ag_realloc);
AG_ALIAS(__wrap_reallocarray, ag_reallocarray);
AG_ALIAS(__wrap_free, ag_free);
AG_ALIAS(__wrap_strdup, ag_strdup);
AG_ALIAS(__wrap_strndup, ag_strndup);
AG_ALIAS(__wrap_posix_memalign, ag_posix_memalign);
AG_ALIAS(__wrap_aligned_alloc, ag_aligned_alloc);
AG_ALIAS(__wrap_qsort, ag_qsort);
