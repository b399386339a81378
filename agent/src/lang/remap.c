/* Copies of a loaded object's code mapped at another address. V8 (Node.js 20) maps the pages
 * of its embedded builtins from the node binary a second time, next to its JIT code, so that
 * JIT code reaches them with short calls; pcs in that copy are in no loaded object
 * (dl_iterate_phdr lists the original only) and in no perf map (V8 writes the builtins at
 * their original addresses). /proc/self/maps shows the copy as an executable mapping of the
 * same file (device, inode) at another offset range: a pc in it is translated to the address
 * the same file byte has in the mapping that is part of a loaded object, where the ELF
 * symbols name it.
 *
 * Threads: the background thread only (the builder names frames there); no locks. */
#include "remap.h"

#include "clock.h"
#include "symbols.h"
#include "sysfile.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    uint64_t lo, hi, off, dev, ino;
} rm_map_t;

#define RM_SCAN_MAX 512 /* executable file mappings considered per scan */

static struct {
    struct {
        uint64_t lo, hi;
        int64_t delta; /* original address - copy address */
    } copy[AG_REMAP_MAX];
    uint32_t n;
    uint64_t last_scan_ns;
    ag_remap_stats_t st;
} ag_remap;

typedef struct {
    rm_map_t m[RM_SCAN_MAX];
    uint32_t n;
} rm_scan_t;

/* One /proc/self/maps line: keeps executable mappings of a file. */
static int rm_line(char *line, void *arg) {
    rm_scan_t *s = arg;
    uint64_t lo, hi, off, ino;
    unsigned maj, min;
    char perms[8];
    if (s->n == RM_SCAN_MAX ||
        sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %x:%x %" SCNu64, &lo, &hi, perms,
               &off, &maj, &min, &ino) != 7 ||
        perms[2] != 'x' || !ino)
        return 0;
    s->m[s->n++] = (rm_map_t){lo, hi, off, ((uint64_t)maj << 32) | min, ino};
    return 0;
}

static void rm_scan(void) {
    static rm_scan_t s;
    s.n = 0;
    ag_remap.n = 0;
    ag_remap.st.scans++;
    if (ag_read_lines("/proc/self/maps", rm_line, &s) != 0)
        return;
    for (uint32_t i = 0; i < s.n; i++) {
        const rm_map_t *c = &s.m[i];
        if (ag_symbols_in_object((uintptr_t)c->lo))
            continue; /* part of a loaded object: an original */
        for (uint32_t j = 0; j < s.n; j++) {
            const rm_map_t *o = &s.m[j];
            if (j == i || o->dev != c->dev || o->ino != c->ino || c->off < o->off ||
                c->off + (c->hi - c->lo) > o->off + (o->hi - o->lo))
                continue;
            if (!ag_symbols_in_object((uintptr_t)o->lo))
                continue;
            if (ag_remap.n == AG_REMAP_MAX) {
                ag_remap.st.full++;
                break;
            }
            ag_remap.copy[ag_remap.n].lo = c->lo;
            ag_remap.copy[ag_remap.n].hi = c->hi;
            ag_remap.copy[ag_remap.n++].delta =
                (int64_t)(o->lo - o->off) - (int64_t)(c->lo - c->off);
            break;
        }
    }
    ag_remap.st.copies = ag_remap.n;
}

uintptr_t ag_remap_pc(uintptr_t pc) {
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t i = 0; i < ag_remap.n; i++)
            if (pc >= ag_remap.copy[i].lo && pc < ag_remap.copy[i].hi)
                return (uintptr_t)((int64_t)pc + ag_remap.copy[i].delta);
        uint64_t now = ag_now_mono();
        if (pass || now - ag_remap.last_scan_ns < 1000000000ull)
            break;
        ag_remap.last_scan_ns = now;
        rm_scan();
    }
    return 0;
}

void ag_remap_stats(ag_remap_stats_t *st) { *st = ag_remap.st; }
