/* A program with its own allocator: defines malloc, free, calloc and realloc (a bump arena
 * without any lock: correct for its one thread), so libfleetprof's interposers are never
 * reached for them, and the agent's threads must never call it (issue 13: ag_alloc.c). Must
 * run unharmed under the agent. Prints "own ok" and how many of its own mallocs ran. */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static _Alignas(16) char g_heap[256 << 20];
static size_t g_used;
static unsigned long g_calls;

void *malloc(size_t n) {
    size_t a = (g_used + 15) & ~(size_t)15;
    if (a + n + 16 > sizeof g_heap)
        return NULL;
    g_used = a + n + 16;
    memcpy(g_heap + a, &n, sizeof n);
    __atomic_add_fetch(&g_calls, 1, __ATOMIC_RELAXED);
    return g_heap + a + 16;
}
void free(void *p) { (void)p; }
void *calloc(size_t a, size_t b) {
    void *p = malloc(a * b);
    if (p)
        memset(p, 0, a * b);
    return p;
}
void *realloc(void *p, size_t n) {
    void *q = malloc(n);
    if (p && q) {
        size_t o;
        memcpy(&o, (char *)p - 16, sizeof o);
        memcpy(q, p, o < n ? o : n);
    }
    return q;
}

int main(void) {
    for (int i = 0; i < 100000; i++) {
        char *p = malloc(100 + i % 1000);
        p[0] = 1;
        free(p);
    }
    usleep(300000);
    printf("own ok calls=%lu\n", g_calls);
    return 0;
}
