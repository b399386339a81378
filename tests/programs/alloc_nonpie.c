/* A non-PIE executable (-no-pie -fno-pie) that takes malloc's address, as Debian's
 * /usr/bin/python3.11 does (issue 27): its dynamic symbol table then has an undefined malloc
 * with a non-zero value, the canonical PLT entry, which every object's address-of-malloc
 * resolves to while the calls go on to libc's. The agent must not take that for a malloc of
 * the program's own (it named nothing in such a process). Burns ~0.6 s of CPU in
 * nonpie_burn, allocating through the pointer, and prints whether malloc's address is in the
 * executable (canonical_plt=1: the case is what it claims to be). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern char __executable_start, _end;
void *(*volatile take_malloc)(size_t);

__attribute__((noinline)) unsigned long nonpie_burn(double seconds) {
    struct timespec t0, t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    unsigned long sum = 0;
    do {
        for (int i = 0; i < 20000; i++) {
            char *p = take_malloc(64);
            memset(p, i, 64);
            sum += (unsigned char)p[i % 64];
            free(p);
        }
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    } while ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) / 1e9 < seconds);
    return sum;
}

int main(void) {
    take_malloc = malloc; /* in code, not a data initializer: an absolute address, the PLT's */
    uintptr_t m = (uintptr_t)take_malloc;
    int in_exe = m >= (uintptr_t)&__executable_start && m < (uintptr_t)&_end;
    unsigned long s = nonpie_burn(0.6);
    printf("canonical_plt=%d sum=%lu\n", in_exe, s);
    return 0;
}
