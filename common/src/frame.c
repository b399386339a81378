/* The frame around a serialized chunk: magic, version, flags, lengths, XXH3-64 checksum and an
 * LZ4 block-compressed payload. Layout in proto/fleetprof.proto. Pure functions, thread-safe. */
#include "cm/bytes.h"
#include "cm/chunk.h"
#include "cm/error.h"

#include <lz4.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Checksum: XXH3-64 of the payload, seeded with XXH3-64 of header bytes 0..15, so a flipped bit
 * anywhere in the frame but the checksum field itself is caught. */
static uint64_t frame_checksum(const uint8_t *hdr16, const uint8_t *payload, size_t n) {
    return XXH3_64bits_withSeed(payload, n, XXH3_64bits(hdr16, 16));
}

int cm_frame_peek(const uint8_t *buf, size_t len, cm_frame_info_t *info, char *errbuf,
                  size_t errbuf_size) {
    if (len < CM_FRAME_HEADER_SIZE) {
        snprintf(errbuf, errbuf_size, "frame of %zu bytes is shorter than the %d-byte header", len,
                 CM_FRAME_HEADER_SIZE);
        return len >= 4 && memcmp(buf, CM_FRAME_MAGIC, 4) != 0 ? CM_EMAGIC : CM_ETRUNCATED;
    }
    if (memcmp(buf, CM_FRAME_MAGIC, 4) != 0) {
        snprintf(errbuf, errbuf_size, "bad magic %02x%02x%02x%02x (want \"FPRF\")", buf[0], buf[1],
                 buf[2], buf[3]);
        return CM_EMAGIC;
    }
    info->major = buf[4];
    info->minor = buf[5];
    info->flags = cm_get_le16(buf + 6);
    info->raw_len = cm_get_le32(buf + 8);
    info->payload_len = cm_get_le32(buf + 12);
    info->checksum = cm_get_le64(buf + 16);
    if (info->major != CM_FORMAT_MAJOR) {
        snprintf(errbuf, errbuf_size,
                 "chunk format major version %u is not supported (this decoder reads %d.x)",
                 info->major, CM_FORMAT_MAJOR);
        return CM_EVERSION;
    }
    if (info->flags & ~CM_FRAME_FLAG_LZ4) {
        snprintf(errbuf, errbuf_size, "unknown frame flags 0x%x", info->flags);
        return CM_EFORMAT;
    }
    if (info->raw_len > CM_MAX_RAW_SIZE) {
        snprintf(errbuf, errbuf_size, "raw length %u exceeds the limit of %u bytes", info->raw_len,
                 CM_MAX_RAW_SIZE);
        return CM_ETOOBIG;
    }
    uint32_t max_payload = (info->flags & CM_FRAME_FLAG_LZ4)
                               ? (uint32_t)LZ4_COMPRESSBOUND(info->raw_len)
                               : info->raw_len;
    if (info->payload_len > max_payload ||
        (!(info->flags & CM_FRAME_FLAG_LZ4) && info->payload_len != info->raw_len)) {
        snprintf(errbuf, errbuf_size, "payload length %u inconsistent with raw length %u",
                 info->payload_len, info->raw_len);
        return CM_EFORMAT;
    }
    if (len - CM_FRAME_HEADER_SIZE < info->payload_len) {
        snprintf(errbuf, errbuf_size, "frame truncated: %zu of %u payload bytes",
                 len - CM_FRAME_HEADER_SIZE, info->payload_len);
        return CM_ETRUNCATED;
    }
    if (len - CM_FRAME_HEADER_SIZE > info->payload_len) {
        snprintf(errbuf, errbuf_size, "%zu trailing bytes after the payload",
                 len - CM_FRAME_HEADER_SIZE - info->payload_len);
        return CM_EFORMAT;
    }
    return 0;
}

int cm_frame_verify(const uint8_t *buf, size_t len, const cm_frame_info_t *info) {
    (void)len;
    uint64_t sum = frame_checksum(buf, buf + CM_FRAME_HEADER_SIZE, info->payload_len);
    return sum == info->checksum ? 0 : CM_ECHECKSUM;
}

int cm_frame_build(const uint8_t *raw, size_t raw_len, uint8_t **out, size_t *out_len) {
    if (raw_len > CM_MAX_RAW_SIZE)
        return CM_ETOOBIG;
    int bound = LZ4_compressBound((int)raw_len);
    uint8_t *f = malloc(CM_FRAME_HEADER_SIZE + (size_t)bound);
    if (!f)
        return CM_ENOMEM;
    uint16_t flags = CM_FRAME_FLAG_LZ4;
    int n = LZ4_compress_default((const char *)raw, (char *)f + CM_FRAME_HEADER_SIZE,
                                 (int)raw_len, bound);
    if (n <= 0 || (size_t)n >= raw_len) { /* incompressible (or tiny): store as is */
        flags = 0;
        n = (int)raw_len;
        memcpy(f + CM_FRAME_HEADER_SIZE, raw, raw_len);
    }
    memcpy(f, CM_FRAME_MAGIC, 4);
    f[4] = CM_FORMAT_MAJOR;
    f[5] = CM_FORMAT_MINOR;
    cm_put_le16(f + 6, flags);
    cm_put_le32(f + 8, (uint32_t)raw_len);
    cm_put_le32(f + 12, (uint32_t)n);
    cm_put_le64(f + 16, frame_checksum(f, f + CM_FRAME_HEADER_SIZE, (size_t)n));
    *out = f;
    *out_len = CM_FRAME_HEADER_SIZE + (size_t)n;
    return 0;
}

int cm_frame_unpack(const uint8_t *buf, const cm_frame_info_t *info, uint8_t *dst, char *errbuf,
                    size_t errbuf_size) {
    const uint8_t *payload = buf + CM_FRAME_HEADER_SIZE;
    if (!(info->flags & CM_FRAME_FLAG_LZ4)) {
        memcpy(dst, payload, info->raw_len);
        return 0;
    }
    int n = LZ4_decompress_safe((const char *)payload, (char *)dst, (int)info->payload_len,
                                (int)info->raw_len);
    if (n != (int)info->raw_len) {
        snprintf(errbuf, errbuf_size, "LZ4 payload is corrupt (decompressed %d of %u bytes)", n,
                 info->raw_len);
        return CM_ECOMPRESS;
    }
    return 0;
}
