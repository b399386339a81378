/* A library an attacker names in FLEETPROF_LIBDW (tests/test-agent-secure.c): its constructor
 * writes "euid=N" to the file $FP_EVIL_MARKER, showing that it ran and with which privileges.
 * The agent must never load it into a setuid program. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) static void evil(void) {
    const char *path = getenv("FP_EVIL_MARKER");
    if (!path)
        return;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return;
    char buf[32];
    int n = snprintf(buf, sizeof buf, "euid=%d\n", (int)geteuid());
    if (n > 0 && write(fd, buf, (size_t)n) < 0)
        n = 0;
    close(fd);
}
