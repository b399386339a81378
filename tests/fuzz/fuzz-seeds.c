/* Writes a seed corpus for fuzz-chunk-decode: 40 small valid chunks, each as one byte 0x00
 * followed by the serialized Chunk (the target wraps such input in a valid frame). Inputs with
 * an odd first byte are decoded as frames; the fuzzer reaches those by mutation. */
#include "cm/chunk.h"
#include "support/chunkgen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: fuzz-seeds DIR\n");
        return 2;
    }
    uint64_t r = 7;
    for (int i = 0; i < 40; i++) {
        ts_gen_params_t p = ts_gen_random_params(&r);
        if (i == 0) { /* an interval with nothing sampled: every table at its zero entry */
            p.samples = 0;
            p.stacks = 0;
            p.contexts = 0;
            p.types_mask = 0;
        }
        p.samples %= 50;
        p.stacks = i == 0 ? 0 : 1 + p.stacks % 20;
        p.max_depth = p.min_depth + p.max_depth % 12;
        cm_chunk_t *c = ts_gen_chunk(&p, (uint64_t)i);
        uint8_t *frame;
        size_t len;
        char err[256];
        if (cm_chunk_encode(c, &frame, &len, err, sizeof err) != 0) {
            fprintf(stderr, "encode: %s\n", err);
            return 1;
        }
        cm_frame_info_t fi;
        cm_frame_peek(frame, len, &fi, err, sizeof err);
        uint8_t *raw = malloc(fi.raw_len + 1);
        raw[0] = 0;
        cm_frame_unpack(frame, &fi, raw + 1, err, sizeof err);
        char path[4096];
        snprintf(path, sizeof path, "%s/seed-%02d", argv[1], i);
        FILE *f = fopen(path, "wb");
        if (!f) {
            perror(path);
            return 1;
        }
        fwrite(raw, 1, fi.raw_len + 1, f);
        fclose(f);
        free(raw);
        free(frame);
        ts_gen_free(c);
    }
    return 0;
}
