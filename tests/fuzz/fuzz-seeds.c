/* Writes a seed corpus per fuzz target into DIR/<target>/:
 *   fuzz-chunk-decode: 40 small valid chunks, each as one byte 0x00 followed by the serialized
 *     Chunk (the target wraps such input in a valid frame); inputs with an odd first byte are
 *     decoded as frames, which the fuzzer reaches by mutation;
 *   fuzz-collector-frames: a hello and 1-3 valid frames, length-prefixed, at several piece
 *     sizes; a bad hello; a frame length over max-msg;
 *   fuzz-spool-recovery: real segment files written by the spool (with and without the header
 *     byte convention, with a commit offset);
 *   fuzz-api-params: a valid request per route, for the services the target's store holds. */
#include "cm/chunk.h"
#include "cm/wire.h"
#include "internal.h"
#include "support/chunkgen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *root;

static void put(const char *target, int i, const void *a, size_t na, const void *b, size_t nb) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", root, target);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/seed-%02d", root, target, i);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fwrite(a, 1, na, f);
    if (nb)
        fwrite(b, 1, nb, f);
    fclose(f);
}

static cm_chunk_t *small_chunk(uint64_t *r, int i) {
    ts_gen_params_t p = ts_gen_random_params(r);
    if (i == 0) { /* an interval with nothing sampled: every table at its zero entry */
        p.samples = 0;
        p.stacks = 0;
        p.contexts = 0;
        p.types_mask = 0;
    }
    p.samples %= 50;
    p.stacks = i == 0 ? 0 : 1 + p.stacks % 20;
    p.max_depth = p.min_depth + p.max_depth % 12;
    return ts_gen_chunk(&p, (uint64_t)i);
}

static void chunk_seeds(void) {
    uint64_t r = 7;
    for (int i = 0; i < 40; i++) {
        cm_chunk_t *c = small_chunk(&r, i);
        uint8_t *frame;
        size_t len;
        char err[256];
        if (cm_chunk_encode(c, &frame, &len, err, sizeof err) != 0) {
            fprintf(stderr, "encode: %s\n", err);
            exit(1);
        }
        cm_frame_info_t fi;
        cm_frame_peek(frame, len, &fi, err, sizeof err);
        uint8_t *raw = malloc(fi.raw_len + 1);
        raw[0] = 0;
        cm_frame_unpack(frame, &fi, raw + 1, err, sizeof err);
        put("fuzz-chunk-decode", i, raw, fi.raw_len + 1, NULL, 0);
        free(raw);
        free(frame);
        ts_gen_free(c);
    }
}

static void frame_seeds(void) {
    uint64_t r = 11;
    int k = 0;
    for (int i = 0; i < 12; i++) {
        uint8_t *buf = malloc(1 << 20);
        size_t n = 0;
        buf[n++] = (uint8_t)(i * 40); /* piece size */
        memcpy(buf + n, CM_SOCK_HELLO_MAGIC, 4);
        uint32_t v = CM_SOCK_VERSION;
        memcpy(buf + n + 4, &v, 4);
        n += CM_SOCK_HELLO_SIZE;
        for (int f = 0; f < 1 + i % 3; f++) {
            cm_chunk_t *c = small_chunk(&r, 1 + i * 3 + f);
            uint8_t *frame;
            size_t len;
            char err[256];
            if (cm_chunk_encode(c, &frame, &len, err, sizeof err) != 0)
                exit(1);
            uint32_t l = (uint32_t)len;
            memcpy(buf + n, &l, 4);
            memcpy(buf + n + 4, frame, len);
            n += 4 + len;
            free(frame);
            ts_gen_free(c);
        }
        if (i == 10) /* a bad hello */
            buf[1] ^= 0xff;
        if (i == 11) { /* a length over max-msg */
            uint32_t l = 1u << 30;
            memcpy(buf + 1 + CM_SOCK_HELLO_SIZE, &l, 4);
        }
        put("fuzz-collector-frames", k++, buf, n, NULL, 0);
        free(buf);
    }
}

static void spool_seeds(void) {
    char dir[] = "/tmp/fuzz-seeds-spool-XXXXXX";
    if (!mkdtemp(dir))
        exit(1);
    col_config_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.spool_dir = dir;
    cfg.spool_max = 1 << 20;
    cfg.segment_size = 64 << 10;
    cfg.fsync_mode = COL_FSYNC_NONE;
    cfg.fsync_interval = 1000000000;
    cfg.max_msg = 256 << 10;
    uv_loop_t loop;
    uv_loop_init(&loop);
    char err[256];
    col_spool_t *s;
    if (col_spool_open(&loop, &cfg, &s, err, sizeof err)) {
        fprintf(stderr, "spool: %s\n", err);
        exit(1);
    }
    col_hdrs_t h = {0};
    h.n = 2;
    h.name[0] = CM_HDR_HOST;
    snprintf(h.value[0], sizeof h.value[0], "host-a");
    h.name[1] = CM_HDR_PEER_PID;
    snprintf(h.value[1], sizeof h.value[1], "1234");
    uint8_t frame[300];
    for (int i = 0; i < 6; i++) {
        memset(frame, i, sizeof frame);
        col_spool_append(s, 0, i % 2 ? "svc-a" : "svc-b", &h, 1000 + (uint64_t)i, frame,
                         50 * (size_t)(i + 1));
    }
    col_spool_close(s);
    uv_run(&loop, UV_RUN_NOWAIT);
    uv_loop_close(&loop);
    char path[4096];
    snprintf(path, sizeof path, "%s/0000000000000001.seg", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    static uint8_t seg[1 << 16];
    size_t n = fread(seg, 1, sizeof seg, f);
    fclose(f);
    uint8_t odd = 1, even = 0, commit[3] = {3, 16, 0};
    put("fuzz-spool-recovery", 0, &odd, 1, seg, n);        /* the whole file */
    put("fuzz-spool-recovery", 1, &even, 1, seg + 16, n - 16); /* records only */
    put("fuzz-spool-recovery", 2, commit, 3, seg, n);      /* with a commit file */
    put("fuzz-spool-recovery", 3, &odd, 1, seg, n - 7);    /* a torn tail */
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        exit(1);
}

static void api_seeds(void) {
    static const char *const req[] = {
        "\x00",
        "\x01svc-000/versions",
        "\x02service=svc-001",
        "\x03service=svc-000&type=cpu",
        "\x03service=svc-001&type=alloc&view=tree&format=json&limit=20",
        "\x03service=svc-002&type=cpu&format=folded&version=1.0.2&label=endpoint:/a",
        "\x03service=svc-000&type=wall&format=pprof&from=0&to=9999999999999999999",
        "\x03service=svc-000&type=cpu&view=callers&focus=main&format=text",
        "\x04service=svc-000&type=cpu&from=1&to=2000000000000000000",
        "\x03service=svc-000&type=io&group_by=io-target&group_limit=2&limit=1",
        "\x03service=svc-001&group_by=pid&host=sim-host&pod=ns/pod-1",
        "\x04service=svc-000&type=lock&lock=0x10&label=endpoint:/a",
        "\x05service=svc-000&type=cpu&base=1.0.0&test=1.1.0&limit=10",
        "\x05service=svc-001&type=cpu&base_from=0&base_to=1&test_from=1&test_to=99&format=text",
        "\x06service=svc-000",
        "\x07service=svc-000&type=cpu&limit=5",
        "\x08trace=0102030405060708090a0b0c0d0e0f10&span=0102030405060708&service=svc-000",
        "\x09x=y",
        "\x0aservice=svc-000&version=1.0.0",
        "\x0bservice=svc-000&endpoint=GET /a&view=tree",
        "\x0cservice=svc-000&stuck=1&min=2s&seen=1m",
        "\x0dservice=svc-000&base=1.0.0&test=1.1.0&q=0.05&min_change=0.1&format=text",
        "\x03service=svc-000&endpoint=GET /a&format=pprof",
        "\x05service=svc-000&base=1.0.0&test=1.1.0&endpoint=GET /a",
    };
    for (size_t i = 0; i < sizeof req / sizeof *req; i++)
        put("fuzz-api-params", (int)i, req[i], i == 0 ? 1 : strlen(req[i]), NULL, 0);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz-seeds DIR\n");
        return 2;
    }
    root = argv[1];
    mkdir(root, 0755);
    chunk_seeds();
    frame_seeds();
    spool_seeds();
    api_seeds();
    return 0;
}
