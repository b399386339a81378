/* libFuzzer target: the collector's agent-socket protocol (hello, length-prefixed frames,
 * acks) on arbitrary byte streams, through the real ingest module on a libuv loop in this
 * process: each input is sent on a fresh unix-socket connection, in pieces (the first byte
 * sets the piece size, so frames are split across reads), then the client half-closes and
 * reads every ack until the collector closes the connection. Must never crash, hang or read
 * past a buffer; every ack must carry the next message number in order. The spool is real
 * (a temporary directory, 8 MiB bound); there is no Kafka producer. */
#include "internal.h"

#include "cm/log.h"
#include "cm/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <unistd.h>

static uv_loop_t loop;
static col_config_t cfg;
static cm_kvlist_t kafka;
static col_node_ident_t node;
static col_spool_t *spool;
static col_ingest_t *ingest;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    static char dir[64], sock[128], spool_dir[128], a1[160], a2[160];
    snprintf(dir, sizeof dir, "/tmp/fuzz-frames-XXXXXX");
    if (!mkdtemp(dir))
        abort();
    snprintf(sock, sizeof sock, "%s/sock", dir);
    snprintf(spool_dir, sizeof spool_dir, "%s/spool", dir);
    snprintf(a1, sizeof a1, "--socket=%s", sock);
    snprintf(a2, sizeof a2, "--spool-dir=%s", spool_dir);
    char *args[] = {"fuzz",          a1, a2, "--http-listen=", "--spool-max=8MiB",
                    "--segment-size=1MiB", "--spool-fsync=none", "--max-msg=256KiB",
                    "--frame-timeout=10s", "--id=fuzz", NULL};
    char err[512];
    cm_log_set_level(CM_LOG_OFF);
    if (col_config_load(&cfg, &kafka, 10, args, err, sizeof err) != 0 ||
        mkdir(spool_dir, 0700) != 0) {
        fprintf(stderr, "config: %s\n", err);
        abort();
    }
    uv_loop_init(&loop);
    snprintf(node.host, sizeof node.host, "fuzz");
    if (col_spool_open(&loop, &cfg, &spool, err, sizeof err) ||
        col_ingest_start(&loop, &cfg, &node, spool, NULL, &ingest, err, sizeof err)) {
        fprintf(stderr, "start: %s\n", err);
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    size_t piece = 1 + (size_t)data[0] * 64; /* 1 .. 16321 bytes per write */
    data++, size--;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", cfg.socket);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa))
        abort();
    size_t off = 0;
    uint32_t expect = 1;
    int eof = 0;
    uint8_t ack[8];
    if (size == 0)
        shutdown(fd, SHUT_WR); /* nothing to send: the peer sees EOF at once, as after a send */
    size_t have = 0;
    for (int turns = 0; !eof; turns++) {
        if (turns > 200000)
            abort(); /* the collector neither answered nor closed: a hang */
        if (off < size) {
            size_t n = size - off < piece ? size - off : piece;
            ssize_t w = send(fd, data + off, n, MSG_NOSIGNAL);
            if (w > 0)
                off += (size_t)w;
            else if (w < 0 && errno != EAGAIN)
                off = size; /* closed on us (a bad hello, an oversized frame) */
            if (off == size)
                shutdown(fd, SHUT_WR);
        }
        uv_run(&loop, UV_RUN_NOWAIT);
        for (;;) {
            ssize_t r = recv(fd, ack + have, sizeof ack - have, 0);
            if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
                eof = 1;
                break;
            }
            if (r < 0)
                break;
            have += (size_t)r;
            if (have == sizeof ack) {
                uint32_t no;
                memcpy(&no, ack, 4);
                if (no != expect)
                    abort(); /* acks are numbered 1, 2, ... in order */
                expect++;
                have = 0;
            }
        }
    }
    close(fd);
    uv_run(&loop, UV_RUN_NOWAIT);
    /* keep the spool from growing without end: deliver nothing, read and commit everything */
    col_record_t r;
    col_spool_pos_t last = col_spool_tell(spool);
    int got = 0;
    while (col_spool_read(spool, &r) == 1) {
        free(r.frame);
        got = 1;
    }
    if (got) {
        last = col_spool_tell(spool);
        col_spool_commit(spool, last);
    }
    return 0;
}
