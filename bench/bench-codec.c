/* Codec benchmark: encode and decode throughput (MB/s of frame, samples/s) and bytes per
 * sample on the wire, for the realistic chunk of issue 2 (10 s, 10,000 CPU samples over 500
 * stacks of depth 20-40, 20% with span context). Also reports the raw protobuf size and the
 * same chunk with every event type, for comparison. Prints one line per figure. */
#include "cm/chunk.h"
#include "support/chunkgen.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void run(const char *name, const ts_gen_params_t *p, double seconds) {
    cm_chunk_t *c = ts_gen_chunk(p, 1);
    uint32_t samples = 0;
    for (int t = 1; t <= CM_EV_MAX; t++)
        samples += c->samples[t].n;
    uint8_t *buf = NULL;
    size_t len = 0;
    char err[256];
    if (cm_chunk_encode(c, &buf, &len, err, sizeof err)) {
        fprintf(stderr, "encode: %s\n", err);
        exit(1);
    }
    cm_frame_info_t fi;
    cm_frame_peek(buf, len, &fi, err, sizeof err);

    long n = 0;
    double t0 = now_s(), t1;
    do {
        uint8_t *b2;
        size_t l2;
        cm_chunk_encode(c, &b2, &l2, err, sizeof err);
        free(b2);
        n++;
    } while ((t1 = now_s()) - t0 < seconds);
    double enc = (t1 - t0) / n;

    n = 0;
    t0 = now_s();
    do {
        cm_chunk_t *d;
        if (cm_chunk_decode(buf, len, &d, err, sizeof err)) {
            fprintf(stderr, "decode: %s\n", err);
            exit(1);
        }
        cm_chunk_free(d);
        n++;
    } while ((t1 = now_s()) - t0 < seconds);
    double dec = (t1 - t0) / n;

    /* baseline in the same run: LZ4 decompression of the same payload alone, the floor any
     * decoder of this frame pays */
    uint8_t *rawbuf = malloc(fi.raw_len + 1);
    n = 0;
    t0 = now_s();
    do {
        cm_frame_unpack(buf, &fi, rawbuf, err, sizeof err);
        n++;
    } while ((t1 = now_s()) - t0 < seconds);
    double lz4 = (t1 - t0) / n;
    free(rawbuf);

    printf("%s: samples=%u stacks=%u frame_bytes=%zu raw_bytes=%u bytes_per_sample=%.2f\n", name,
           samples, c->dict.n_stacks - 1, len, fi.raw_len, (double)len / samples);
    printf("%s: encode %.1f us/chunk, %.1f MB/s, %.2f M samples/s\n", name, enc * 1e6,
           len / enc / 1e6, samples / enc / 1e6);
    printf("%s: decode %.1f us/chunk, %.1f MB/s, %.2f M samples/s\n", name, dec * 1e6,
           len / dec / 1e6, samples / dec / 1e6);
    printf("%s: baseline lz4-only %.1f us/chunk; decode/lz4 = %.2fx\n", name, lz4 * 1e6,
           dec / lz4);
    free(buf);
    ts_gen_free(c);
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 2.0;
    ts_gen_params_t p = ts_gen_realistic();
    run("realistic-cpu", &p, seconds);
    p.time_unit_ns = 1000;
    run("realistic-cpu-1us", &p, seconds);
    p = ts_gen_realistic();
    p.call_graph = 0;
    run("uniform-random-stacks", &p, seconds);
    p = ts_gen_realistic();
    p.types_mask = 0x7e;
    p.label_sets = 4;
    run("all-types", &p, seconds);
    return 0;
}
