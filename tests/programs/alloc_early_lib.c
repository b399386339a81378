/* Linked into alloc_early (DT_NEEDED): its constructor runs before the preloaded agent's
 * (the loader initialises needed libraries first), so these allocations reach libfleetprof's
 * malloc before its constructor has run -- including from a second thread racing with the
 * agent's start. Keeps what it allocated for main to check. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

void *early_lib_blocks[32];
volatile int early_lib_thread_done;

static void *early_thread(void *arg) {
    (void)arg;
    for (int i = 0; i < 20000; i++) {
        void *p = malloc(16 + (size_t)i % 5000);
        if (p)
            memset(p, 7, 16);
        free(p);
    }
    early_lib_thread_done = 1;
    return NULL;
}

__attribute__((constructor)) static void early_lib_init(void) {
    for (int i = 0; i < 32; i++) {
        early_lib_blocks[i] = calloc(1, 100 + (size_t)i * 100);
        early_lib_blocks[i] = realloc(early_lib_blocks[i], 200 + (size_t)i * 300);
        memset(early_lib_blocks[i], i, 200 + (size_t)i * 300);
    }
    void *a = NULL;
    if (posix_memalign(&a, 256, 1000) == 0)
        free(a);
    pthread_t th;
    if (pthread_create(&th, NULL, early_thread, NULL) == 0)
        pthread_detach(th); /* still allocating while the agent's constructor runs */
}
