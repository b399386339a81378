/* Is a thread running? Its state in /proc/self/task/TID/stat, for the wall sampler.
 *
 * /proc/self/task/TID/stat descriptors kept open per thread slot: opening the file (a path
 * walk and an allocation) is two thirds of a read's cost, and a thread on CPU for part of each
 * interval needs a read every tick. At most AG_STAT_FDS are kept (O_CLOEXEC), and at most 1/64
 * of RLIMIT_NOFILE (stat_keep_max); the others are opened and closed per read. An application may close descriptors it did not open (closefrom,
 * close_range) and get the number back for a file of its own: a kept descriptor is read only
 * while its content starts with "TID (", and closed only while fstat still shows the file it
 * was opened on; otherwise it is forgotten, never closed. Closed when the thread is gone (the
 * sweep after each /proc scan) and in a fork child. bg thread only. */
#include "procstat.h"
#include "thread.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define AG_STAT_FDS 32
static struct {
    int fd1; /* descriptor + 1; 0: none */
    pid_t tid;
    dev_t dev;
    ino_t ino;
} g_stat[AG_MAX_THREADS];
static uint32_t g_stat_open;

static ssize_t stat_read(int fd, pid_t tid, char *buf, size_t size) {
    ssize_t n = pread(fd, buf, size - 1, 0);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char want[24];
    int k = snprintf(want, sizeof want, "%d (", (int)tid);
    return strncmp(buf, want, (size_t)k) ? -1 : n;
}

static void stat_drop(uint32_t slot) {
    if (!g_stat[slot].fd1)
        return;
    int fd = g_stat[slot].fd1 - 1;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_dev == g_stat[slot].dev && st.st_ino == g_stat[slot].ino)
        close(fd);
    g_stat[slot].fd1 = 0;
    g_stat_open--;
}

/* Closes the descriptors of threads that are gone (all = 1: every one, fork child). */
void ag_procstat_sweep(int all) {
    for (uint32_t i = 0; i < AG_MAX_THREADS && g_stat_open; i++)
        if (g_stat[i].fd1 && (all || atomic_load(&ag_threads[i].state) != AG_TS_ACTIVE ||
                              atomic_load(&ag_threads[i].tid) != g_stat[i].tid))
            stat_drop(i);
}

/* Descriptors are the program's resource: at most 1/64 of RLIMIT_NOFILE's soft limit is kept
 * (16 at the usual 1024; none below 64, where every read opens and closes its file). */
static uint32_t stat_keep_max(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    rlim_t k = rl.rlim_cur / 64;
    return k < AG_STAT_FDS ? (uint32_t)k : AG_STAT_FDS;
}

/* Is the thread in slot `slot` running or runnable ('R' in /proc/self/task/TID/stat)? */
int ag_procstat_running(uint32_t slot, pid_t tid) {
    char buf[512];
    ssize_t n = -1;
    if (g_stat[slot].fd1 && g_stat[slot].tid == tid)
        n = stat_read(g_stat[slot].fd1 - 1, tid, buf, sizeof buf);
    if (n < 0) {
        /* none kept; or closed or replaced under us; or the slot's previous thread's */
        stat_drop(slot);
        char path[64];
        snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return 0;
        n = stat_read(fd, tid, buf, sizeof buf);
        struct stat st;
        if (n >= 0 && g_stat_open < stat_keep_max() && fstat(fd, &st) == 0) {
            g_stat[slot].fd1 = fd + 1;
            g_stat[slot].tid = tid;
            g_stat[slot].dev = st.st_dev;
            g_stat[slot].ino = st.st_ino;
            g_stat_open++;
        } else {
            close(fd);
        }
        if (n < 0)
            return 0;
    }
    const char *p = strrchr(buf, ')'); /* comm may contain spaces and parentheses */
    return p && p[1] == ' ' && p[2] == 'R';
}
