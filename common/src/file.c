/* Small files read whole into a caller's buffer (see cm/file.h). */
#include "cm/file.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

ssize_t cm_read_file(const char *path, char *buf, size_t size) {
    if (!size)
        return -EINVAL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t n = 0;
    while (n + 1 < size) {
        ssize_t r = read(fd, buf + n, size - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    return (ssize_t)n;
}
