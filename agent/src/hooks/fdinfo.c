/* File-descriptor descriptions for IO events: kind (fstat: regular file, socket, pipe,
 * other) and text (readlink /proc/self/fd/N, or the peer address from getpeername).
 *
 * Only I/O calls above the floor ask (slow ones for the description, aggregated ones for the
 * kind), so the system calls here are off the hot path, and both answers are cached per fd
 * (fds below AG_FD_CACHE): the kind (one byte, so that an aggregated call costs no fstat) and
 * the description's slot id; both are invalidated by the close/dup2/dup3/close_range/closefrom
 * hooks and for the fd an open/accept/socket/socketpair/pipe/pipe2/eventfd/dup/fcntl(F_DUPFD)
 * hook returns (hook_io.c). Not seen: an fd closed inside libc (fclose) and reused by a call
 * we do not interpose (fopen, epoll_create, an fd received over SCM_RIGHTS) keeps the old
 * fd's cache entries.
 * Descriptions live in a fixed ring of AG_FD_TEXTS slots.
 * The bg thread copies a slot's text by id and rechecks the id afterwards (a writer zeroes
 * it first), so an overwritten slot reads as "unknown" rather than as another fd's path.
 *
 * Contract: application threads (hook slow paths) and the bg thread; no locks, no
 * allocation; the system calls made here reach our hooks with the guard set (plain forward).
 */
#include "hooks.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define AG_FD_TEXTS 256
#define AG_FD_TEXT_LEN 200
#define AG_FD_CACHE 4096

typedef struct {
    _Atomic uint32_t id; /* (generation << 8 | slot), 0 while written */
    uint32_t kind;
    char text[AG_FD_TEXT_LEN];
} text_t;

static text_t g_texts[AG_FD_TEXTS];
static _Atomic uint32_t g_next = 1;
static _Atomic uint32_t g_cache[AG_FD_CACHE]; /* fd -> text id, 0 = unknown */
static _Atomic uint8_t g_kind[AG_FD_CACHE];   /* fd -> kind + 1, 0 = unknown */

static uint32_t fd_kind_stat(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0)
        return CM_FD_OTHER;
    if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode))
        return CM_FD_FILE;
    if (S_ISSOCK(st.st_mode))
        return CM_FD_SOCKET;
    if (S_ISFIFO(st.st_mode))
        return CM_FD_PIPE;
    return CM_FD_OTHER;
}

uint32_t ag_fd_kind(int fd) {
    if (fd < 0 || fd >= AG_FD_CACHE)
        return fd_kind_stat(fd);
    uint8_t k = atomic_load_explicit(&g_kind[fd], memory_order_relaxed);
    if (k)
        return k - 1u;
    uint32_t kind = fd_kind_stat(fd);
    atomic_store_explicit(&g_kind[fd], (uint8_t)(kind + 1), memory_order_relaxed);
    return kind;
}

static void peer_text(int fd, char *out, size_t size) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    out[0] = '\0';
    if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0) {
        len = sizeof ss;
        if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
            return;
    }
    char ip[INET6_ADDRSTRLEN];
    if (ss.ss_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
        snprintf(out, size, "%s:%u", ip, ntohs(a->sin_port));
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
        snprintf(out, size, "[%s]:%u", ip, ntohs(a->sin6_port));
    } else if (ss.ss_family == AF_UNIX) {
        struct sockaddr_un *a = (struct sockaddr_un *)&ss;
        if (len > offsetof(struct sockaddr_un, sun_path) && a->sun_path[0])
            snprintf(out, size, "unix:%.*s", (int)(len - offsetof(struct sockaddr_un, sun_path)),
                     a->sun_path);
        else
            snprintf(out, size, "unix:");
    }
}

uint32_t ag_fd_describe(int fd, uint32_t *kind) {
    if (fd >= 0 && fd < AG_FD_CACHE) {
        uint32_t id = atomic_load_explicit(&g_cache[fd], memory_order_acquire);
        if (id) {
            text_t *t = &g_texts[id & 0xff];
            if (atomic_load_explicit(&t->id, memory_order_acquire) == id) {
                *kind = t->kind;
                if (atomic_load_explicit(&t->id, memory_order_acquire) == id)
                    return id;
            }
        }
    }
    *kind = fd_kind_stat(fd); /* fresh: the description is being (re)made */
    if (fd >= 0 && fd < AG_FD_CACHE)
        atomic_store_explicit(&g_kind[fd], (uint8_t)(*kind + 1), memory_order_relaxed);
    char text[AG_FD_TEXT_LEN];
    text[0] = '\0';
    if (*kind == CM_FD_SOCKET) {
        peer_text(fd, text, sizeof text);
    } else {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, text, sizeof text - 1);
        text[n > 0 ? n : 0] = '\0';
    }
    uint32_t n = atomic_fetch_add(&g_next, 1);
    uint32_t slot = n % AG_FD_TEXTS, id = (n << 8) | slot;
    if (id == 0)
        id = 1u << 8;
    text_t *t = &g_texts[slot];
    atomic_store_explicit(&t->id, 0, memory_order_release);
    t->kind = *kind;
    memcpy(t->text, text, sizeof text);
    atomic_store_explicit(&t->id, id, memory_order_release);
    if (fd >= 0 && fd < AG_FD_CACHE)
        atomic_store_explicit(&g_cache[fd], id, memory_order_release);
    return id;
}

void ag_fd_forget(int fd) {
    if (fd < 0 || fd >= AG_FD_CACHE)
        return;
    if (atomic_load_explicit(&g_cache[fd], memory_order_relaxed) != 0)
        atomic_store_explicit(&g_cache[fd], 0, memory_order_relaxed);
    if (atomic_load_explicit(&g_kind[fd], memory_order_relaxed) != 0)
        atomic_store_explicit(&g_kind[fd], 0, memory_order_relaxed);
}

const char *ag_fd_text(uint32_t id, char *buf, size_t size) {
    text_t *t = &g_texts[id & 0xff];
    if (atomic_load_explicit(&t->id, memory_order_acquire) != id)
        return NULL;
    size_t n = size < AG_FD_TEXT_LEN ? size : AG_FD_TEXT_LEN;
    memcpy(buf, t->text, n);
    buf[n - 1] = '\0';
    if (atomic_load_explicit(&t->id, memory_order_acquire) != id)
        return NULL;
    return buf[0] ? buf : NULL;
}
