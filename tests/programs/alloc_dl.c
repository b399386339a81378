/* A module for alloc_work's dlopen mode: its constructor and destructor allocate (under the
 * loader lock), and dl_alloc_site allocates for the caller. Loaded and unloaded in a loop
 * while other threads allocate. */
#include <stdlib.h>
#include <string.h>

static void *g_keep[64];

__attribute__((constructor)) static void dl_init(void) {
    for (int i = 0; i < 64; i++)
        g_keep[i] = malloc(1000 + (size_t)i * 1000);
}

__attribute__((destructor)) static void dl_fini(void) {
    for (int i = 0; i < 64; i++)
        free(g_keep[i]);
    free(strdup("bye")); /* one more allocation while the loader lock is held */
}

__attribute__((noinline)) void *dl_alloc_site(size_t n) {
    void *p = malloc(n);
    if (p)
        memset(p, 1, 16);
    return p;
}
