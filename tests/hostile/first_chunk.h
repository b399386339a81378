/* For hostile cases that must act after the agent's first interval chunk (a privilege drop
 * that takes away its output directory, an exit that may cut its last chunk short): wait at
 * least min_s, and, when FLEETPROF_OUTPUT names a directory (the agent's run), until a chunk
 * file is in it, at most max_s. The plain run waits min_s, and both print the same. A fixed
 * sleep raced the agent's start on a loaded machine. */
#ifndef HOSTILE_FIRST_CHUNK_H
#define HOSTILE_FIRST_CHUNK_H
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double fc_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int fc_has_chunk(const char *dir) {
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        found = l > 4 && strcmp(e->d_name + l - 4, ".fpc") == 0;
    }
    closedir(d);
    return found;
}

static void first_chunk_wait(double min_s, double max_s) {
    const char *dir = getenv("FLEETPROF_OUTPUT");
    double t0 = fc_now();
    struct timespec step = {0, 20000000};
    while (fc_now() - t0 < min_s || (dir && !fc_has_chunk(dir) && fc_now() - t0 < max_s))
        nanosleep(&step, NULL);
}
#endif
