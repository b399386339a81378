/* Clocks in nanoseconds (vDSO reads, no system call on x86-64 Linux). Any thread, the signal
 * handler included: clock_gettime is async-signal-safe. */
#ifndef AG_CLOCK_H
#define AG_CLOCK_H

#include <stdint.h>
#include <time.h>

/* The clock's time in ns; 0 if it cannot be read (a thread's clock after it exited). */
static inline uint64_t ag_clock_ns(clockid_t c) {
    struct timespec ts;
    if (clock_gettime(c, &ts) != 0)
        return 0;
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t ag_now_real(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t ag_now_mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
