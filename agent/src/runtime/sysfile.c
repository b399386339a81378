/* libc calls the agent makes without the program's malloc (issue 13; a program may define
 * malloc without locking, which the agent's thread may then not call; see ag_alloc.c):
 * /proc and directory reads without stdio or opendir (fopen and opendir take their FILE and
 * DIR from malloc): system calls and a caller's buffer only; and strerror, whose message
 * lookup goes through gettext (which allocates and frees): the agent's link wraps it
 * (-Wl,--wrap=strerror) to glibc's untranslated strerrordesc_np.
 *
 * Threads: any (the background thread mostly); not for signal handlers (open, read). */
#include "sysfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int ag_read_lines(const char *path, int (*cb)(char *line, void *arg), void *arg) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    char buf[4096];
    size_t have = 0;
    int stop = 0, skip = 0; /* skip: the rest of a line longer than the buffer */
    while (!stop) {
        ssize_t r = read(fd, buf + have, sizeof buf - 1 - have);
        if (r < 0 && errno == EINTR)
            continue;
        int eof = r <= 0;
        if (!eof)
            have += (size_t)r;
        size_t start = 0;
        while (start < have) {
            char *nl = memchr(buf + start, '\n', have - start);
            /* an unfinished line: read on, unless the buffer is full (the line is cut) */
            if (!nl && !eof && (start > 0 || have < sizeof buf - 1))
                break;
            size_t end = nl ? (size_t)(nl - buf) : have;
            buf[end] = '\0';
            if (!skip && cb(buf + start, arg)) {
                stop = 1;
                break;
            }
            skip = !nl && !eof;
            start = nl ? end + 1 : have;
        }
        if (stop || eof)
            break;
        memmove(buf, buf + start, have - start);
        have -= start;
    }
    close(fd);
    return 0;
}

int ag_dir_each(const char *path, int (*cb)(const char *name, void *arg), void *arg) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    _Alignas(8) char buf[4096];
    for (;;) {
        long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
        if (n <= 0)
            break;
        for (long off = 0; off < n;) {
            struct dirent64 *e = (struct dirent64 *)(buf + off);
            off += e->d_reclen;
            if (cb(e->d_name, arg)) {
                close(fd);
                return 0;
            }
        }
    }
    close(fd);
    return 0;
}

/* strerror without gettext: the English description (the agent's log lines are English). */
char *__wrap_strerror(int e) {
    const char *d = strerrordesc_np(e);
    return (char *)(d ? d : "Unknown error");
}
