/* libFuzzer target: cm_chunk_decode() on arbitrary bytes. Two entry shapes: the input as a
 * frame, and the input as a raw serialized Chunk wrapped in a valid frame (so the fuzzer gets
 * past the checksum and exercises protobuf decoding and validation). A successful decode is
 * re-encoded and decoded again, which must succeed (what we accept we can write back). */
#include "cm/chunk.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check_roundtrip(const cm_chunk_t *c) {
    uint8_t *buf = NULL;
    size_t len = 0;
    char err[256];
    if (cm_chunk_encode(c, &buf, &len, err, sizeof err) != 0)
        abort(); /* a chunk that validated on decode must encode */
    cm_chunk_t *d = NULL;
    if (cm_chunk_decode(buf, len, &d, err, sizeof err) != 0)
        abort();
    cm_chunk_free(d);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[256];
    cm_chunk_t *c = NULL;
    if (size && (data[0] & 1)) {
        if (cm_chunk_decode(data, size, &c, err, sizeof err) == 0) {
            check_roundtrip(c);
            cm_chunk_free(c);
        }
        return 0;
    }
    uint8_t *frame = NULL;
    size_t flen = 0;
    if (size < 1 || cm_frame_build(data + 1, size - 1, &frame, &flen) != 0)
        return 0;
    if (cm_chunk_decode(frame, flen, &c, err, sizeof err) == 0) {
        check_roundtrip(c);
        cm_chunk_free(c);
    }
    free(frame);
    return 0;
}
