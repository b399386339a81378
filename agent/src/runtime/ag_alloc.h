/* The agent's private allocator (ag_alloc.c): everything the agent's own code allocates, on
 * any thread, never the program's malloc. The agent's link wraps malloc, calloc, realloc,
 * free, strdup, strndup, reallocarray, posix_memalign, aligned_alloc and qsort
 * (-Wl,--wrap, agent/CMakeLists.txt): every call from agent/src (hook_alloc.c's interposers
 * excepted: their calls stay within their own object), fp_common, libiberty and lz4 lands
 * here. Not for signal handlers (it takes a lock). */
#ifndef AG_ALLOC_H
#define AG_ALLOC_H

#include <stddef.h>
#include <stdint.h>

void *ag_malloc(size_t n);
void *ag_calloc(size_t a, size_t b);
void *ag_realloc(void *p, size_t n);
void ag_free(void *p);
char *ag_strdup(const char *s);
char *ag_strndup(const char *s, size_t n);
int ag_posix_memalign(void **out, size_t align, size_t n);
/* Stable sort (merge sort; a temporary from ag_malloc, in place by insertion if that fails):
 * glibc's qsort takes its temporary from the program's malloc. */
void ag_qsort(void *base, size_t n, size_t size, int (*cmp)(const void *, const void *));
/* A copy from the global malloc (not ours), for a library that frees it itself: libdwfl's
 * find_debuginfo callback hands it the debug file's name. Only where that malloc is trusted. */
char *ag_global_strdup(const char *s);
/* Usable size of a block of ours (>= the size asked), 0 for a pointer that is not ours. */
size_t ag_alloc_usable(const void *p);
/* Is p a block of ours? (Any address; never touches memory outside our own maps.) */
int ag_alloc_owns(const void *p);

typedef struct {
    uint64_t mapped_bytes; /* slabs and big blocks mapped now */
    uint64_t live_blocks;  /* allocated, not yet freed */
    uint64_t maps, unmaps; /* mmap / munmap calls */
    uint64_t foreign_frees; /* ag_free of a pointer that is not ours, passed to the real free */
    uint64_t failed;        /* allocations refused (out of memory, a child with a stale lock) */
} ag_alloc_stats_t;
void ag_alloc_stats(ag_alloc_stats_t *out);

/* fork: prepare takes the allocator's lock (agent.c's atfork prepare, after its own locks), the
 * parent and the child release it; the child also notes its pid. A child made without our
 * atfork handlers (_Fork, a raw fork system call) that finds the lock held by a thread that
 * does not exist in it gets NULL from every allocation and frees nothing (see ag_alloc.c). */
void ag_alloc_fork_prepare(void);
void ag_alloc_fork_parent(void);
void ag_alloc_fork_child(void);

#endif
