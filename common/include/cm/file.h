/* Small files (/proc entries, machine ids) read whole into a caller's buffer, with system
 * calls only: no stdio, no allocation (the agent calls it where the program's malloc must not
 * be called). Threads: any; not from a signal handler (open, read). */
#ifndef CM_FILE_H
#define CM_FILE_H

#include <stddef.h>
#include <sys/types.h>

/* Reads at most size - 1 bytes of path into buf and NUL-terminates them; returns the length,
 * or -errno (-EINVAL when size is 0). Retries reads interrupted by a signal. */
ssize_t cm_read_file(const char *path, char *buf, size_t size);

#endif
