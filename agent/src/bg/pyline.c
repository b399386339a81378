/* The line of an instruction from a CPython 3.11 location table (co_linetable), as
 * PyCode_Addr2Line computes it (Objects/locations.md): entries of a header byte (bit 7 set,
 * bits 3-6 the code, bits 0-2 the length in code units - 1) and code-dependent bytes; codes
 * 13 (no column) and 14 (long form) start with a signed varint line delta, 10-12 add 0-2,
 * 15 has no location, 0-9 keep the line. Pure: used by pyframes.c on the bg thread and by
 * tests/test-agent-pyline.c (also under the sanitizers). Bounded by len, never reads past.
 */
#include "pyframes.h"

static uint32_t varint(const uint8_t **p, const uint8_t *end) {
    uint32_t v = 0, shift = 0;
    while (*p < end) {
        uint8_t b = *(*p)++;
        v |= (uint32_t)(b & 63) << shift;
        shift += 6;
        if (!(b & 64) || shift > 24)
            break;
    }
    return v;
}

int ag_py_line(const uint8_t *t, size_t len, int first, uint32_t lasti) {
    const uint8_t *p = t, *end = t + len;
    uint64_t addr = 0; /* code units */
    int line = first;
    while (p < end) {
        uint8_t h = *p++;
        if (!(h & 0x80))
            return -1; /* not at an entry: a malformed table */
        unsigned code = (h >> 3) & 15, units = (h & 7) + 1;
        int delta = 0;
        if (code == 13 || code == 14) {
            uint32_t u = varint(&p, end);
            delta = (u & 1) ? -(int)(u >> 1) : (int)(u >> 1);
        } else if (code >= 10 && code <= 12) {
            delta = (int)code - 10;
        }
        line += delta;
        if (lasti < addr + units)
            return code == 15 ? -1 : line;
        addr += units;
        while (p < end && !(*p & 0x80)) /* the entry's remaining bytes */
            p++;
    }
    return -1;
}

