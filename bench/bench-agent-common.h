/* Shared by the agent benchmarks that run themselves as children under libfleetprof
 * (bench-agent-hooks, bench-agent-mixed). */
#ifndef BENCH_AGENT_COMMON_H
#define BENCH_AGENT_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* qsort order for doubles */
static int cmpd(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* This executable's path into self, and the agent library into lib: FLEETPROF_LIB, else
 * ../agent/libfleetprof.so next to the executable (the build tree's layout). -1 on failure. */
static int agent_paths(char *self, size_t self_size, char *lib, size_t lib_size) {
    ssize_t n = readlink("/proc/self/exe", self, self_size - 1);
    if (n <= 0)
        return -1;
    self[n] = '\0';
    const char *env_lib = getenv("FLEETPROF_LIB");
    if (env_lib)
        snprintf(lib, lib_size, "%s", env_lib);
    else
        snprintf(lib, lib_size, "%.*s/../agent/libfleetprof.so", (int)(strrchr(self, '/') - self),
                 self);
    return 0;
}

#endif
