/* Chunk delivery: files under FLEETPROF_OUTPUT, and the collector's unix socket (cm/wire.h).
 *
 * Background thread only; never blocks the application: the socket is non-blocking and is
 * driven from the bg loop's poll(). Protocol (cm/wire.h): hello, then length-framed chunk
 * frames; the collector acks each message in order with (message number, status). Every
 * chunk stays queued until acked with status 0 (accepted) or a negative CM_E* (rejected: never
 * resent). At exit (ag_sender_exit) nothing waits for acks: what is queued is written as far as
 * the collector takes it without blocking, bounded in time. CM_SOCK_RETRY, EOF or any error
 * closes the connection; after a backoff (100 ms doubling to 5 s) we reconnect and resend
 * every unacked chunk (duplicates are removed by chunk id downstream). The queue holds
 * AG_QUEUE_MAX chunks; when full the oldest not on the wire (not written, or written on a
 * connection since closed) is discarded -- the new one if every queued chunk is written and
 * awaiting its ack -- and counted as DROP_CHUNK_QUEUE_FULL in the next chunk.
 * FLEETPROF_COLLECTOR=none disables the socket. A record numbered CM_SOCK_CMD_NO among the acks
 * is a command (`fleetprof capture`): CM_SOCK_CMD_CAPTURE asks the recorder for a manual capture
 * (ag_fr_request_capture); others are ignored.
 *
 * Files: written to ".<name>.tmp" and renamed, so a reader never sees half a chunk. Name:
 * <service>-<pid>-<sequence, 8 digits>.fpc.
 *
 * No silent loss: the first time the collector cannot be reached (no socket, refused by its
 * permissions, nobody listening) the agent says so on stderr, once per process, with the
 * reason and what happens to the chunks (queued, the oldest dropped and counted as
 * chunk_queue_full in the next chunk's header) -- or, when that first attempt is the one at
 * exit (a program shorter than an interval), that its profile is lost. Only a defaulted FLEETPROF_COLLECTOR whose
 * socket does not exist, with FLEETPROF_OUTPUT set, stays quiet: the chunks go to the files.
 * A FLEETPROF_OUTPUT directory that cannot be written (e.g. after the process dropped its
 * privileges with setuid, or a full disk) is reported once the same way; every chunk not
 * written is counted (ag_sender_file_failures).
 *
 * Every lost chunk counted, even when the chunks that would carry the count are
 * lost too: a chunk's header carries the drop counts of its interval (chunk.c), so losing
 * it would lose those counts. Whenever a chunk is lost for good (the oldest dropped from a
 * full queue: DROP_CHUNK_QUEUE_FULL; refused by the collector, or, with files as the only
 * sink, not written under FLEETPROF_OUTPUT, e.g. ENOSPC: DROP_OUTPUT_FAILED), its own drop
 * counts are given back to the agent's counters (ag_sender_give_back) along with the one for
 * the chunk itself, so the next chunk cut carries them, and so on until one gets through:
 * summed over the chunks delivered, every loss is counted exactly once (chunks delivered +
 * chunks counted dropped == chunks cut). Not covered: what is still queued when the process
 * exits (nothing is cut after it).
 */
#include "sysfile.h"
#include "agent.h"
#include "clock.h"
#include "record.h"
#include "sender.h"
#include "recorder/incid.h"

#include "cm/log.h"
#include "cm/wire.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

typedef struct {
    uint8_t *frame;
    size_t len;
    uint64_t seq;
    uint32_t msg_no; /* number on the current connection once fully written; 0: not sent */
    cm_drop_t *drops; /* the drop counts its header carries (given back if it is lost) */
    uint32_t ndrops;
} entry_t;

static struct {
    const ag_config_t *cfg;
    int use_socket;
    entry_t q[AG_QUEUE_MAX];
    uint32_t n;
    int fd;
    size_t hello_off;     /* bytes of hello written */
    uint32_t cur;         /* entry being written */
    size_t cur_off;       /* bytes of (length prefix + frame) written */
    uint32_t msgs;        /* messages fully written on this connection */
    int draining;         /* a retry came back: no more writes; collecting the acks of the
                           * messages written before it, then reconnecting (see do_read) */
    uint64_t drain_until_ns;
    uint8_t ack[CM_SOCK_ACK_SIZE];
    size_t ack_off;
    uint64_t next_try_ns;
    uint32_t backoff_ms;
    int warned_file;
    int warned_connect;
    int collector_explicit; /* FLEETPROF_COLLECTOR was set (not the default path) */
    uint64_t file_failures; /* chunks not written under FLEETPROF_OUTPUT */
    dev_t dev; /* the socket's identity (fstat at connect): see fd_ours */
    ino_t ino;
    uint64_t lost; /* connections found closed or replaced by the program */
} S = {.fd = -1};

/* A program may close descriptors it did not open (daemons close everything at start) and get
 * the number back for a file, pipe or socket of its own: a descriptor of ours is used (polled,
 * read, written, closed) only while fstat still shows the object it was created on. Sockets,
 * pipes and files have inodes of their own, so (st_dev, st_ino, file type) identify them. */
static int fd_ours(int fd, dev_t dev, ino_t ino, mode_t type) {
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == dev && st.st_ino == ino &&
           (st.st_mode & S_IFMT) == type;
}

static int fd_id(int fd, dev_t *dev, ino_t *ino) {
    struct stat st;
    if (fstat(fd, &st) != 0)
        return -1;
    *dev = st.st_dev;
    *ino = st.st_ino;
    return 0;
}

void ag_sender_init(const ag_config_t *cfg) {
    S.cfg = cfg;
    S.collector_explicit = ag_getenv("FLEETPROF_COLLECTOR") != NULL;
    S.use_socket = cfg->collector[0] && strcmp(cfg->collector, "none") != 0;
    S.fd = -1;
    S.backoff_ms = 100;
    S.next_try_ns = 0;
}

uint32_t ag_sender_queued(void) { return S.n; }

typedef struct {
    const char *prefix;
    size_t len;
    uint64_t next;
} seq_scan_t;

static int seq_entry(const char *name, void *arg) {
    seq_scan_t *sc = arg;
    if (strncmp(name, sc->prefix, sc->len) != 0)
        return 0;
    char *end;
    unsigned long long v = strtoull(name + sc->len, &end, 10);
    if (end != name + sc->len && !strcmp(end, CM_CHUNK_FILE_SUFFIX) && v + 1 > sc->next)
        sc->next = v + 1;
    return 0;
}

uint64_t ag_sender_first_sequence(void) {
    /* After exec the pid is the same and the sequence restarts: continue after the files the
     * previous image wrote instead of overwriting them. */
    if (!S.cfg->output[0])
        return 0;
    char prefix[512];
    int pl = snprintf(prefix, sizeof prefix, "%s-%d-", S.cfg->service, (int)ag.pid);
    seq_scan_t sc = {prefix, (size_t)pl, 0};
    ag_dir_each(S.cfg->output, seq_entry, &sc);
    return sc.next;
}

int ag_sender_write_file(const uint8_t *frame, size_t len, uint64_t seq) {
    if (!S.cfg->output[0])
        return 0;
    char name[512], tmp[4096 + 600], final[4096 + 600];
    snprintf(name, sizeof name, "%s-%d-%08llu%s", S.cfg->service, (int)ag.pid,
             (unsigned long long)seq, CM_CHUNK_FILE_SUFFIX);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", S.cfg->output, name);
    snprintf(final, sizeof final, "%s/%s", S.cfg->output, name);
    /* A fresh file of our own, never one somebody planted: FLEETPROF_OUTPUT may be shared
     * (a symlink there named like our temporary file would make us write through it, with our
     * privileges). A leftover temporary (a crashed process of the same pid) is removed once;
     * rename replaces a symlink at the final name itself, never its target. */
    int fd = -1;
    for (int i = 0; i < 2 && fd < 0; i++) {
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  (mode_t)S.cfg->output_mode);
        if (fd < 0 && (errno != EEXIST || unlink(tmp) != 0))
            break;
    }
    if (fd >= 0 && fchmod(fd, (mode_t)S.cfg->output_mode) != 0) { /* past the umask */
        close(fd);
        fd = -1;
    }
    dev_t dev = 0;
    ino_t ino = 0;
    int ok = fd >= 0 && fd_id(fd, &dev, &ino) == 0;
    size_t off = 0;
    while (ok && off < len) {
        if (!fd_ours(fd, dev, ino, S_IFREG)) { /* closed under us (another thread): not ours */
            fd = -1;
            ok = 0;
            errno = EBADF;
            break;
        }
        ssize_t w = write(fd, frame + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        ok = w > 0;
        off += w > 0 ? (size_t)w : 0;
    }
    if (fd >= 0 && fd_ours(fd, dev, ino, S_IFREG) && close(fd) != 0)
        ok = 0;
    if (ok && rename(tmp, final) != 0)
        ok = 0;
    if (!ok) {
        int e = errno;
        unlink(tmp);
        S.file_failures++;
        if (!S.warned_file++)
            CM_WARN("msg=\"cannot write chunk files under FLEETPROF_OUTPUT (reported once); "
                    "each chunk not written is counted as output_failed in the next chunk "
                    "that is\" file=%s err=\"%s\" uid=%d hint=\"the directory must be "
                    "writable by uid %d (a process that changed uid after start needs a "
                    "directory its new uid can write) and its file system must have room\"",
                    final, strerror(e), (int)geteuid(), (int)geteuid());
        return -1;
    }
    return 0;
}

int ag_sender_uses_socket(void) { return S.use_socket; }

void ag_sender_give_back(const cm_drop_t *drops, uint32_t n, uint32_t reason) {
    for (uint32_t i = 0; i < n; i++)
        if (drops[i].reason < AG_DROP_REASONS && drops[i].type < CM_EV_COUNT)
            ag_drop_count((cm_event_type_t)drops[i].type, (cm_drop_reason_t)drops[i].reason,
                          drops[i].count);
    ag_drop_count(0, (cm_drop_reason_t)reason, 1);
}

/* Removes queue entry i (acked; or lost: give its counts back first). */
static void entry_drop(uint32_t i) {
    free(S.q[i].frame);
    free(S.q[i].drops);
    memmove(&S.q[i], &S.q[i + 1], (S.n - i - 1) * sizeof S.q[0]);
    S.n--;
    if (S.cur > i)
        S.cur--;
    else if (S.cur == i)
        S.cur_off = 0; /* a half-written message is lost with it: the stream is now broken */
}

/* A connection's state from its start: fd (-1: none), nothing sent or acknowledged on it. */
static void conn_start(int fd) {
    S.fd = fd;
    S.cur = 0;
    S.cur_off = 0;
    S.ack_off = 0;
    S.hello_off = 0;
    S.msgs = 0;
    S.draining = 0;
}

static void disconnect(void) {
    if (S.fd >= 0 && fd_ours(S.fd, S.dev, S.ino, S_IFSOCK))
        close(S.fd);
    conn_start(-1);
    for (uint32_t i = 0; i < S.n; i++)
        S.q[i].msg_no = 0;
    S.next_try_ns = ag_now_mono() + (uint64_t)S.backoff_ms * 1000000u;
    S.backoff_ms = S.backoff_ms * 2 > 5000 ? 5000 : S.backoff_ms * 2;
}

void ag_sender_submit(uint8_t *frame, size_t len, uint64_t seq, const cm_drop_t *drops,
                      uint32_t ndrops) {
    int file_failed = ag_sender_write_file(frame, len, seq) != 0;
    if (!S.use_socket) {
        if (file_failed) /* the files are the only sink: this chunk is lost */
            ag_sender_give_back(drops, ndrops, CM_DROP_OUTPUT_FAILED);
        free(frame);
        return;
    }
    cm_drop_t *copy = NULL;
    if (ndrops && (copy = malloc(ndrops * sizeof *copy)) != NULL)
        memcpy(copy, drops, ndrops * sizeof *copy);
    if (S.n == AG_QUEUE_MAX) {
        /* The oldest chunk not on the wire is the one lost. One written in full and not yet
         * acked may still be accepted (its ack is on its way): counting it lost would count a
         * delivered chunk (test-agent-output-full spool_full saw 39 spooled + 10 counted for
         * 48 cut); one half-written would break the stream. When every queued chunk is on the
         * wire, the new one is lost instead. */
        uint32_t i = 0;
        while (i < S.n && (S.q[i].msg_no || (i == S.cur && S.cur_off > 0)))
            i++;
        if (i == S.n) {
            ag_sender_give_back(drops, ndrops, CM_DROP_CHUNK_QUEUE_FULL);
            free(copy);
            free(frame);
            return;
        }
        ag_sender_give_back(S.q[i].drops, S.q[i].ndrops, CM_DROP_CHUNK_QUEUE_FULL);
        entry_drop(i);
    }
    S.q[S.n++] = (entry_t){frame, len, seq, 0, copy, copy ? ndrops : 0};
}

static int try_connect(void) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", S.cfg->collector);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || fd_id(fd, &S.dev, &S.ino) != 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    conn_start(fd);
    return 0;
}

uint64_t ag_sender_file_failures(void) { return S.file_failures; }

/* The one stderr line of a process whose collector is out of reach (see the top comment).
 * lost_at_exit > 0: the process is exiting with that many chunks queued, which are lost (a
 * program that ends before its first interval has no other chance to say so). */
static void report_unreachable(int e, uint32_t lost_at_exit) {
    if (S.warned_connect)
        return;
    if (e == ENOENT && !S.collector_explicit && S.cfg->output[0])
        return; /* no collector on this machine, files requested: nothing is lost */
    S.warned_connect = 1;
    const char *hint =
        e == EACCES || e == EPERM
            ? "the collector's socket refuses this uid: it must allow every local uid "
              "(socket-mode=438, the default) or a group this process is in (socket-group)"
        : e == ENOENT       ? "no socket there: is fleetprof-collector running on this node, "
                              "and is FLEETPROF_COLLECTOR its socket path?"
        : e == ECONNREFUSED ? "nothing listens on the socket: the collector has stopped"
                            : "cannot connect";
    if (lost_at_exit)
        CM_WARN("msg=\"cannot reach the collector; the process exits and its profile (%u "
                "chunk%s) is lost%s\" collector=%s err=\"%s\" uid=%d hint=\"%s\"",
                (unsigned)lost_at_exit, lost_at_exit == 1 ? "" : "s",
                S.cfg->output[0] ? " to the collector (FLEETPROF_OUTPUT has it)" : "",
                S.cfg->collector, strerror(e), (int)geteuid(), hint);
    else
        CM_WARN("msg=\"cannot reach the collector; chunks wait in a queue of %d, the oldest are "
                "dropped and counted (chunk_queue_full); retrying with backoff, reported once\" "
                "collector=%s err=\"%s\" uid=%d hint=\"%s\"",
                AG_QUEUE_MAX, S.cfg->collector, strerror(e), (int)geteuid(), hint);
}

static int do_write(void) {
    static uint8_t hello[CM_SOCK_HELLO_SIZE] = {'F', 'P', 'R', 'H', CM_SOCK_VERSION, 0, 0, 0};
    while (S.hello_off < sizeof hello) {
        ssize_t w = send(S.fd, hello + S.hello_off, sizeof hello - S.hello_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -errno;
        S.hello_off += (size_t)w;
    }
    while (S.cur < S.n && !S.draining) {
        entry_t *e = &S.q[S.cur];
        if (e->msg_no) {
            S.cur++;
            continue;
        }
        uint8_t pre[4] = {(uint8_t)e->len, (uint8_t)(e->len >> 8), (uint8_t)(e->len >> 16),
                          (uint8_t)(e->len >> 24)};
        while (S.cur_off < 4 + e->len) {
            ssize_t w;
            if (S.cur_off < 4)
                w = send(S.fd, pre + S.cur_off, 4 - S.cur_off, MSG_NOSIGNAL | MSG_DONTWAIT);
            else
                w = send(S.fd, e->frame + (S.cur_off - 4), e->len - (S.cur_off - 4),
                         MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0)
                return errno == EAGAIN || errno == EINTR ? 0 : -errno;
            S.cur_off += (size_t)w;
        }
        e->msg_no = ++S.msgs;
        S.cur++;
        S.cur_off = 0;
    }
    return 0;
}

static int do_read(void) {
    for (;;) {
        ssize_t r = recv(S.fd, S.ack + S.ack_off, sizeof S.ack - S.ack_off, MSG_DONTWAIT);
        if (r == 0)
            return -ECONNRESET;
        if (r < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : -errno;
        S.ack_off += (size_t)r;
        if (S.ack_off < sizeof S.ack)
            continue;
        S.ack_off = 0;
        uint32_t no = (uint32_t)S.ack[0] | (uint32_t)S.ack[1] << 8 | (uint32_t)S.ack[2] << 16 |
                      (uint32_t)S.ack[3] << 24;
        int32_t status = (int32_t)((uint32_t)S.ack[4] | (uint32_t)S.ack[5] << 8 |
                                   (uint32_t)S.ack[6] << 16 | (uint32_t)S.ack[7] << 24);
        if (no == CM_SOCK_CMD_NO) { /* a command, not an ack (cm/wire.h) */
            if (status == CM_SOCK_CMD_CAPTURE)
                ag_fr_request_capture();
            continue;
        }
        if (status == CM_SOCK_RETRY) {
            /* The collector shed this one (load, or its spool's disk full). The messages
             * written after it may still be accepted (a smaller one fits where this did not):
             * their acks are collected first, or a chunk the collector has would stay queued
             * here, be resent (a duplicate) or, the queue full, dropped and counted as lost
             * (an over-count). Then back off and resend what is left. */
            if (!S.draining)
                S.drain_until_ns = ag_now_mono() + 1000000000ull;
            S.draining = 1;
            for (uint32_t i = 0; i < S.n; i++)
                if (S.q[i].msg_no == no)
                    S.q[i].msg_no = 0;
        }
        for (uint32_t i = 0; i < S.n && status != CM_SOCK_RETRY; i++) {
            if (S.q[i].msg_no != no)
                continue;
            if (status != 0) { /* refused for good: lost, counted */
                CM_WARN("collector rejected chunk %llu: status %d; counted as output_failed",
                        (unsigned long long)S.q[i].seq, (int)status);
                ag_sender_give_back(S.q[i].drops, S.q[i].ndrops, CM_DROP_OUTPUT_FAILED);
            }
            entry_drop(i);
            break;
        }
        if (status != CM_SOCK_RETRY)
            S.backoff_ms = 100; /* a working connection resets the backoff */
        if (S.draining) {
            uint32_t out = 0;
            for (uint32_t i = 0; i < S.n; i++)
                out += S.q[i].msg_no != 0;
            if (out == 0 || ag_now_mono() > S.drain_until_ns)
                return -EAGAIN; /* every answer in: back off, resend later */
        }
    }
}

int ag_sender_step(short *events, int *wake_ms) {
    *events = 0;
    *wake_ms = -1;
    if (!S.use_socket)
        return -1;
    if (S.fd >= 0 && !fd_ours(S.fd, S.dev, S.ino, S_IFSOCK)) {
        /* The program closed our socket (and may have its own under the number): forget it
         * without touching it, and reconnect after the usual backoff. */
        S.lost++;
        if (S.lost == 1)
            CM_WARN("the collector connection was closed by the program (descriptor %d); "
                    "reconnecting", S.fd);
        S.fd = -1;
        disconnect();
    }
    if (S.fd < 0) {
        if (S.n == 0)
            return -1;
        uint64_t now = ag_now_mono();
        if (now < S.next_try_ns) {
            *wake_ms = (int)((S.next_try_ns - now) / 1000000u) + 1;
            return -1;
        }
        int e = try_connect();
        if (e != 0) {
            report_unreachable(-e, 0);
            S.fd = -1;
            disconnect();
            *wake_ms = (int)S.backoff_ms;
            return -1;
        }
    }
    int rc = do_write();
    if (rc == 0)
        rc = do_read();
    if (rc != 0) {
        disconnect();
        *wake_ms = (int)S.backoff_ms;
        return -1;
    }
    if (S.draining && ag_now_mono() > S.drain_until_ns) { /* the answers do not come */
        disconnect();
        *wake_ms = (int)S.backoff_ms;
        return -1;
    }
    *events = POLLIN;
    if (!S.draining && (S.hello_off < CM_SOCK_HELLO_SIZE || S.cur < S.n))
        *events |= POLLOUT;
    if (S.draining)
        *wake_ms = 100; /* re-check the drain deadline */
    return S.fd;
}

void ag_sender_exit(int timeout_ms) {
    /* An exiting process never waits for acks: they would only matter for a resend it will
     * not live to make. What is written into the socket is the collector's once it reads it
     * (lost only if the collector dies before that: the files under FLEETPROF_OUTPUT, when
     * set, have it too). One connection attempt whatever the backoff (a unix connect does not
     * block: it succeeds, or fails at once when the socket is absent or its backlog full);
     * then non-blocking writes, with a wait for room only while the collector keeps taking
     * bytes, for timeout_ms at most in all. */
    if (!S.use_socket || S.n == 0)
        return;
    if (S.fd >= 0 && !fd_ours(S.fd, S.dev, S.ino, S_IFSOCK))
        S.fd = -1; /* closed by the program: not ours any more, not touched */
    int e;
    if (S.fd < 0 && (e = try_connect()) != 0) {
        report_unreachable(-e, S.n); /* silent if reported already, or the files have it */
        S.fd = -1;
        return;
    }
    uint64_t deadline = ag_now_mono() + (uint64_t)timeout_ms * 1000000u;
    for (;;) {
        uint32_t cur = S.cur;
        size_t off = S.cur_off, hello = S.hello_off;
        if (do_write() != 0 || (S.hello_off == CM_SOCK_HELLO_SIZE && S.cur >= S.n))
            break; /* an error, or everything written */
        uint64_t now = ag_now_mono();
        if (now >= deadline || (S.cur == cur && S.cur_off == off && S.hello_off == hello))
            break; /* out of time, or the collector took nothing (stopped, or shedding) */
        struct pollfd p = {S.fd, POLLOUT, 0};
        int left = (int)((deadline - now) / 1000000u) + 1;
        if (poll(&p, 1, left) <= 0)
            break;
    }
}

void ag_sender_after_fork_child(void) {
    /* The parent owns the connection and the queued chunks (its profile, its pid). */
    if (S.fd >= 0 && fd_ours(S.fd, S.dev, S.ino, S_IFSOCK))
        close(S.fd);
    S.fd = -1;
    for (uint32_t i = 0; i < S.n; i++) {
        free(S.q[i].frame);
        free(S.q[i].drops);
    }
    S.n = 0;
    S.cur = 0;
    S.cur_off = 0;
    S.backoff_ms = 100;
    S.next_try_ns = 0;
}
