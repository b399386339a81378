/* Allocations before main (tests/test-agent-alloc.c early_start): a needed library's
 * constructor (before the agent's), this program's constructor (after it) and main all
 * allocate. Checks that every early block kept its contents; prints "early ok" and the bytes
 * ctor_site allocated. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern void *early_lib_blocks[32];
extern volatile int early_lib_thread_done;

static volatile uintptr_t g_sink;
static uint64_t g_ctor_bytes;

__attribute__((noinline)) void *ctor_site(size_t n) {
    void *p = malloc(n);
    g_sink += (uintptr_t)p;
    return p;
}

__attribute__((constructor)) static void early_main_init(void) {
    for (int i = 0; i < 200000; i++) { /* 200000 x 2 KiB = 400 MiB, freed at once */
        free(ctor_site(2048));
        g_ctor_bytes += 2048;
    }
}

int main(void) {
    for (int i = 0; i < 32; i++) {
        const unsigned char *b = early_lib_blocks[i];
        for (size_t k = 0; k < 200 + (size_t)i * 300; k++)
            if (b[k] != (unsigned char)i) {
                printf("early block %d corrupt at %zu\n", i, k);
                return 1;
            }
        free(early_lib_blocks[i]);
    }
    struct timespec ts = {0, 1000000};
    for (int i = 0; i < 5000 && !early_lib_thread_done; i++)
        nanosleep(&ts, NULL);
    printf("early ok thread_done=%d ctor_bytes=%llu\n", early_lib_thread_done,
           (unsigned long long)g_ctor_bytes);
    return early_lib_thread_done ? 0 : 1;
}
