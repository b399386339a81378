/* Test program for symbolization (tests/test-symbols.c): CPU in static functions that only a
 * symbol table names (no -rdynamic). Built with -g; the build derives stripped variants
 * (tests/symbols.cmake). Usage: symwork SECONDS
 * SYMWORK_FDS=path: at the end, writes the target of every open descriptor (/proc/self/fd) to
 * path, one a line. SYMWORK_FREE_FDS=n: first opens /dev/null until EMFILE, then closes n of
 * them, so that the process runs with only n descriptors free. SYMWORK_MAPS=path: at the end,
 * copies /proc/self/maps to path. */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile double sink;
static volatile int work = 200000; /* volatile: the pure functions are really called each time */

__attribute__((noinline)) static double symwork_inner_loop(int n) {
    double x = 0;
    for (int i = 1; i < n; i++)
        x += (double)(i % 7) / (double)i;
    return x;
}

__attribute__((noinline)) static double symwork_outer_step(int n) {
    double x = 0;
    for (int k = 0; k < 4; k++)
        x += symwork_inner_loop(n + k);
    return x;
}

static void list_fds(const char *path) {
    char targets[1 << 14];
    size_t n = 0;
    targets[0] = '\0';
    DIR *d = opendir("/proc/self/fd");
    if (!d)
        exit(3);
    for (struct dirent *e; (e = readdir(d));) {
        char link[300], to[1024];
        if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
            continue;
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t l = readlink(link, to, sizeof to - 1);
        to[l > 0 ? l : 0] = '\0';
        n += (size_t)snprintf(targets + n, n < sizeof targets ? sizeof targets - n : 0, "%s %s\n",
                              e->d_name, to);
        if (n >= sizeof targets)
            exit(3);
    }
    closedir(d);
    FILE *f = fopen(path, "w"); /* after the listing: its own descriptor is not listed */
    if (!f || fputs(targets, f) < 0 || fclose(f) != 0)
        exit(3);
}

int main(int argc, char **argv) {
    double secs = argc > 1 ? atof(argv[1]) : 1;
    const char *keep_free = getenv("SYMWORK_FREE_FDS");
    if (keep_free) {
        static int opened[4096];
        int n = 0, fd;
        while (n < 4096 && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
            opened[n++] = fd;
        for (int i = 0; i < atoi(keep_free) && n > 0; i++)
            close(opened[--n]);
    }
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        for (int j = 0; j < 20; j++) /* clock_gettime can be a system call: rarely */
            sink += symwork_outer_step(work);
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9 < secs);
    printf("%f\n", sink);
    const char *fds = getenv("SYMWORK_FDS");
    if (fds)
        list_fds(fds);
    const char *maps = getenv("SYMWORK_MAPS");
    FILE *in = maps ? fopen("/proc/self/maps", "r") : NULL, *out = in ? fopen(maps, "w") : NULL;
    char line[1024];
    while (out && fgets(line, sizeof line, in))
        fputs(line, out);
    if (in)
        fclose(in);
    if (out)
        fclose(out);
    return 0;
}
