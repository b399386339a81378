/* The CFI compiler (agent/src/bg/cfi.c), compiled in: synthetic CIE/FDE byte sequences with known
 * rows, malformed input, and real libraries compared row by row with
 * `readelf --debug-dump=frames-interp` (binutils) as ground truth. The bucket index over rows
 * (ag_cfi_index_build, ag_cfi_find_idx): every entry against a count of the rows, and the
 * indexed lookup against the plain binary search for every byte of libc's and this program's
 * text (and random pcs far beyond), for synthetic edge cases, and a deliberately broken index
 * must be caught. */
#define _GNU_SOURCE
#include "cfi.h"
#include "support/runner.h"

#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    uint8_t b[4096];
    size_t n;
} buf_t;

static void put(buf_t *b, const void *p, size_t n) {
    memcpy(b->b + b->n, p, n);
    b->n += n;
}
static void u8(buf_t *b, uint8_t v) { put(b, &v, 1); }
static void u32(buf_t *b, uint32_t v) { put(b, &v, 4); }

/* A CIE: "zR" (or "zRS"), pcrel|sdata4, code 1, data -8, ra 16, CFA rsp+8, ra at cfa-8. */
static size_t cie(buf_t *b, int signal) {
    size_t at = b->n;
    uint8_t body[] = {0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 16, 1, 0x1b,
                      0x0c, 7, 8, 0x90, 1, 0, 0};
    uint8_t sbody[] = {0, 0, 0, 0, 1, 'z', 'R', 'S', 0, 1, 0x78, 16, 1, 0x1b,
                       0x0c, 7, 8, 0x90, 1, 0};
    if (signal) {
        u32(b, sizeof sbody);
        put(b, sbody, sizeof sbody);
    } else {
        u32(b, sizeof body);
        put(b, body, sizeof body);
    }
    return at;
}

/* An FDE for [pc, pc + len) with the CFA program ins; vaddr is the section's address. */
static void fde(buf_t *b, size_t cie_at, uint64_t vaddr, uint64_t pc, uint32_t len,
                const uint8_t *ins, size_t nins) {
    size_t body = 4 + 4 + 4 + 1 + nins;
    size_t pad = (8 - (4 + body) % 8) % 8;
    u32(b, (uint32_t)(body + pad));
    u32(b, (uint32_t)(b->n - cie_at));
    int32_t rel = (int32_t)(pc - (vaddr + b->n));
    u32(b, (uint32_t)rel);
    u32(b, len);
    u8(b, 0); /* augmentation data length */
    put(b, ins, nins);
    for (size_t i = 0; i < pad; i++)
        u8(b, 0); /* DW_CFA_nop */
}

static const ag_cfi_row_t *at(const ag_cfi_row_t *r, uint32_t n, uint64_t pc) {
    return ag_cfi_find(r, n, pc);
}

static void test_synthetic(void) {
    const uint64_t va = 0x2000, text = 0x1000;
    buf_t b = {{0}, 0};
    size_t c = cie(&b, 0);
    /* push %rbp; mov %rsp,%rbp; ...; leave; ret */
    const uint8_t f1[] = {0x41, 0x0e, 16, 0x86, 2, 0x43, 0x0d, 6, 0x50, 0x0c, 7, 8};
    fde(&b, c, va, 0x1000, 0x20, f1, sizeof f1);
    /* PLT: def_cfa_offset 16 at +6, then the PLT expression at +16 */
    const uint8_t f2[] = {0x0e, 16, 0x46, 0x0e, 24, 0x4a, 0x0f, 11, 0x77, 8, 0x80, 0,
                          0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22};
    fde(&b, c, va, 0x1100, 0x40, f2, sizeof f2);
    /* remember/restore state, a DW_CFA_expression for r12 (ignored), and undefined ra */
    const uint8_t f3[] = {0x41, 0x0e, 32, 0x0a, 0x41, 0x0e, 8, 0x41, 0x0b,
                          0x10, 12, 2, 0x77, 0, 0x41, 0x07, 16};
    fde(&b, c, va, 0x1200, 0x10, f3, sizeof f3);
    /* CFA in r10 (stack realignment) -> fallback; *(rbp - 8) -> DEREF */
    const uint8_t f4[] = {0x0c, 10, 0, 0x44, 0x0f, 3, 0x76, 0x78, 0x06};
    fde(&b, c, va, 0x1300, 0x10, f4, sizeof f4);
    size_t cs = cie(&b, 1);
    const uint8_t f5[] = {0x41, 0x0e, 16};
    fde(&b, cs, va, 0x1400, 0x8, f5, sizeof f5);
    u32(&b, 0); /* terminator */

    ag_cfi_build_t *bd = ag_cfi_build_new();
    CHECK(bd != NULL);
    CHECK(ag_cfi_build_add(bd, b.b, b.n, va, 0) == 0);
    ag_cfi_row_t *r;
    uint32_t n;
    ag_cfi_stats_t st;
    CHECK(ag_cfi_build_finish(bd, text, text + 0x1000, &r, &n, &st) == 0);
    CHECK_EQ(st.fdes, 5);
    CHECK_EQ(st.cies, 2);
    CHECK_EQ(st.bad, 0);
    CHECK_EQ(st.fallback_rows, 1);
    const ag_cfi_row_t *x;
    /* f1 */
    x = at(r, n, 0x000);
    CHECK(x && x->kind == AG_CFI_RSP && x->cfa_off == 8 && x->fp_off == 0);
    x = at(r, n, 0x001);
    CHECK(x && x->kind == AG_CFI_RSP && x->cfa_off == 16 && x->fp_off == -16);
    x = at(r, n, 0x003);
    CHECK(x && x->kind == AG_CFI_RSP && x->cfa_off == 16);
    x = at(r, n, 0x004);
    CHECK(x && x->kind == AG_CFI_RBP && x->cfa_off == 16 && x->fp_off == -16);
    x = at(r, n, 0x013);
    CHECK(x && x->kind == AG_CFI_RBP);
    x = at(r, n, 0x014);
    CHECK(x && x->kind == AG_CFI_RSP && x->cfa_off == 8 && x->fp_off == -16);
    x = at(r, n, 0x020); /* after f1: a gap */
    CHECK(x && x->kind == AG_CFI_NONE);
    /* f2 */
    x = at(r, n, 0x105);
    CHECK(x && x->kind == AG_CFI_RSP && x->cfa_off == 16);
    x = at(r, n, 0x106);
    CHECK(x && x->kind == AG_CFI_RSP && x->cfa_off == 24);
    x = at(r, n, 0x110);
    CHECK(x && x->kind == AG_CFI_PLT && x->cfa_off == 11);
    x = at(r, n, 0x13f);
    CHECK(x && x->kind == AG_CFI_PLT);
    /* f3 */
    x = at(r, n, 0x201);
    CHECK(x && x->kind == AG_CFI_RSP && x->cfa_off == 32);
    x = at(r, n, 0x202);
    CHECK(x && x->kind == AG_CFI_RSP && x->cfa_off == 8);
    x = at(r, n, 0x203); /* restored */
    CHECK(x && x->kind == AG_CFI_RSP && x->cfa_off == 32);
    x = at(r, n, 0x204);
    CHECK(x && x->kind == AG_CFI_END);
    /* f4 */
    x = at(r, n, 0x300);
    CHECK(x && x->kind == AG_CFI_FALLBACK);
    x = at(r, n, 0x304);
    CHECK(x && x->kind == AG_CFI_DEREF && x->cfa_off == -8);
    /* f5: signal trampoline */
    x = at(r, n, 0x400);
    CHECK(x && x->kind == AG_CFI_SIGNAL);
    x = at(r, n, 0x408);
    CHECK(x && x->kind == AG_CFI_NONE);
    CHECK(at(r, n, 0) == &r[0]);
    /* rows sorted, consecutive rows differ */
    for (uint32_t i = 1; i < n; i++) {
        CHECK(r[i].pc > r[i - 1].pc);
        CHECK(r[i].kind != r[i - 1].kind || r[i].cfa_off != r[i - 1].cfa_off ||
              r[i].fp_off != r[i - 1].fp_off);
    }
    free(r);

    /* Malformed: every truncation of the section, and random corruption, never crash; the
     * FDEs before the damage still compile. */
    for (size_t cut = 0; cut < b.n; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, b.b, cut);
        bd = ag_cfi_build_new();
        CHECK(ag_cfi_build_add(bd, copy, cut, va, 0) == 0);
        CHECK(ag_cfi_build_finish(bd, text, text + 0x1000, &r, &n, &st) == 0);
        if (cut >= 0x60)
            CHECK(n > 0);
        free(r);
        free(copy);
    }
    srand(7);
    uint64_t bad = 0;
    for (int k = 0; k < 2000; k++) {
        uint8_t *copy = malloc(b.n);
        memcpy(copy, b.b, b.n);
        for (int j = 0; j < 4; j++)
            copy[rand() % b.n] = (uint8_t)rand();
        bd = ag_cfi_build_new();
        CHECK(ag_cfi_build_add(bd, copy, b.n, va, 0) == 0);
        CHECK(ag_cfi_build_finish(bd, text, text + 0x1000, &r, &n, &st) == 0);
        bad += st.bad;
        free(r);
        free(copy);
    }
    CHECK(bad > 0); /* corruption was seen and counted */
}

/* .debug_frame: CIE id 0xffffffff, version 1, no augmentation, FDEs pointing at their CIE by
 * section offset, absolute 8-byte addresses. */
static void test_debug_frame(void) {
    buf_t b = {{0}, 0};
    const uint8_t cie_body[] = {0xff, 0xff, 0xff, 0xff, 1, 0, 1, 0x78, 16,
                                0x0c, 7, 8, 0x90, 1, 0, 0};
    u32(&b, sizeof cie_body);
    put(&b, cie_body, sizeof cie_body);
    const uint8_t ins[] = {0x41, 0x0e, 16, 0x86, 2, 0x41, 0x0d, 6, 0, 0, 0, 0};
    u32(&b, 4 + 8 + 8 + sizeof ins);
    u32(&b, 0); /* CIE at offset 0 */
    uint64_t pc = 0x401000, len = 0x40;
    put(&b, &pc, 8);
    put(&b, &len, 8);
    put(&b, ins, sizeof ins);
    ag_cfi_build_t *bd = ag_cfi_build_new();
    CHECK(ag_cfi_build_add(bd, b.b, b.n, 0, 1) == 0);
    ag_cfi_row_t *r;
    uint32_t n;
    ag_cfi_stats_t st;
    CHECK(ag_cfi_build_finish(bd, 0x401000, 0x402000, &r, &n, &st) == 0);
    CHECK_EQ(st.fdes, 1);
    CHECK_EQ(st.bad, 0);
    const ag_cfi_row_t *x = ag_cfi_find(r, n, 0);
    CHECK(x && x->kind == AG_CFI_RSP && x->cfa_off == 8);
    x = ag_cfi_find(r, n, 1);
    CHECK(x && x->kind == AG_CFI_RSP && x->cfa_off == 16 && x->fp_off == -16);
    x = ag_cfi_find(r, n, 2);
    CHECK(x && x->kind == AG_CFI_RBP && x->cfa_off == 16 && x->fp_off == -16);
    x = ag_cfi_find(r, n, 0x40);
    CHECK(x && x->kind == AG_CFI_NONE);
    free(r);
}

/* ---- real libraries against readelf ---- */

typedef struct {
    const uint8_t *map;
    size_t size;
    const Elf64_Shdr *eh;
    uint64_t text_lo, text_hi;
} elf_t;

static int elf_open(const char *path, elf_t *e) {
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    struct stat st;
    CHECK(fstat(fd, &st) == 0);
    e->size = (size_t)st.st_size;
    e->map = mmap(NULL, e->size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    CHECK(e->map != MAP_FAILED);
    const Elf64_Ehdr *h = (const Elf64_Ehdr *)e->map;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(e->map + h->e_shoff);
    const char *ss = (const char *)e->map + sh[h->e_shstrndx].sh_offset;
    e->eh = NULL;
    for (int i = 0; i < h->e_shnum; i++)
        if (!strcmp(ss + sh[i].sh_name, ".eh_frame"))
            e->eh = &sh[i];
    const Elf64_Phdr *ph = (const Elf64_Phdr *)(e->map + h->e_phoff);
    e->text_lo = UINT64_MAX;
    e->text_hi = 0;
    for (int i = 0; i < h->e_phnum; i++)
        if (ph[i].p_type == PT_LOAD && (ph[i].p_flags & PF_X)) {
            if (ph[i].p_vaddr < e->text_lo)
                e->text_lo = ph[i].p_vaddr;
            if (ph[i].p_vaddr + ph[i].p_memsz > e->text_hi)
                e->text_hi = ph[i].p_vaddr + ph[i].p_memsz;
        }
    return e->eh ? 0 : -1;
}

/* What a readelf row means in our terms. */
static int expect(const char *cfa, const char *rbp, const char *ra, int signal, ag_cfi_row_t *w) {
    memset(w, 0, sizeof *w);
    if (signal) {
        w->kind = AG_CFI_SIGNAL;
        return 0;
    }
    if (!strcmp(ra, "u")) {
        w->kind = AG_CFI_END;
        return 0;
    }
    if (strcmp(ra, "c-8") != 0 || (strcmp(rbp, "u") && strcmp(rbp, "s") && strncmp(rbp, "c", 1))) {
        w->kind = AG_CFI_FALLBACK;
        return 0;
    }
    if (!strncmp(rbp, "c", 1))
        w->fp_off = (int16_t)atoi(rbp + 1);
    if (!strncmp(cfa, "rsp+", 4))
        w->kind = AG_CFI_RSP;
    else if (!strncmp(cfa, "rbp+", 4))
        w->kind = AG_CFI_RBP;
    else if (!strcmp(cfa, "exp"))
        return 1; /* PLT, DEREF or FALLBACK: readelf does not print the expression */
    else {
        w->kind = AG_CFI_FALLBACK;
        w->fp_off = 0;
        return 0;
    }
    w->cfa_off = atoi(cfa + 4);
    return 0;
}

static void compare_readelf(const char *path) {
    elf_t e;
    if (elf_open(path, &e) != 0) {
        printf("  %s: not found or no .eh_frame: skipped\n", path);
        return;
    }
    ag_cfi_build_t *bd = ag_cfi_build_new();
    CHECK(ag_cfi_build_add(bd, e.map + e.eh->sh_offset, e.eh->sh_size, e.eh->sh_addr, 0) == 0);
    ag_cfi_row_t *r;
    uint32_t n;
    ag_cfi_stats_t st;
    CHECK(ag_cfi_build_finish(bd, e.text_lo, e.text_hi, &r, &n, &st) == 0);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "readelf --debug-dump=frames-interp '%s' 2>/dev/null", path);
    FILE *f = popen(cmd, "r");
    CHECK(f != NULL);
    char line[1024];
    int rbp_col = -1, ra_col = -1, signal = 0;
    char sig_cies[64][16];
    int nsig = 0;
    uint64_t rows = 0, match = 0, exp_rows = 0;
    while (fgets(line, sizeof line, f)) {
        if (strstr(line, "Contents of the .debug_frame"))
            break;
        char *cie = strstr(line, " CIE \"");
        if (cie && strchr(cie + 6, 'S') && strchr(cie + 6, 'S') < strchr(cie + 6, '"') &&
            nsig < 64) {
            snprintf(sig_cies[nsig++], 16, "%.8s", line);
            continue;
        }
        char *fd = strstr(line, " FDE cie=");
        if (fd) {
            signal = 0;
            for (int i = 0; i < nsig; i++)
                if (!strncmp(fd + 9, sig_cies[i], 8))
                    signal = 1;
            rbp_col = ra_col = -1;
            continue;
        }
        if (strstr(line, "   LOC ")) {
            char *tok = strtok(line, " \n");
            for (int i = 0; tok; i++, tok = strtok(NULL, " \n")) {
                if (!strcmp(tok, "rbp"))
                    rbp_col = i;
                if (!strcmp(tok, "ra"))
                    ra_col = i;
            }
            continue;
        }
        if (strlen(line) < 17 || line[16] != ' ' || ra_col < 0)
            continue;
        char *cols[32];
        int nc = 0;
        for (char *tok = strtok(line, " \n"); tok && nc < 32; tok = strtok(NULL, " \n"))
            if (tok[0] != '(') /* "r10 (r10)": one column */
                cols[nc++] = tok;
        if (nc <= ra_col)
            continue;
        uint64_t loc = strtoull(cols[0], NULL, 16);
        if (loc < e.text_lo || loc >= e.text_hi)
            continue;
        ag_cfi_row_t want;
        int ex = expect(cols[1], rbp_col >= 0 ? cols[rbp_col] : "u", cols[ra_col], signal, &want);
        const ag_cfi_row_t *got = ag_cfi_find(r, n, loc - e.text_lo);
        rows++;
        if (!got)
            continue;
        if (ex) {
            exp_rows++;
            if (got->kind == AG_CFI_PLT || got->kind == AG_CFI_DEREF ||
                got->kind == AG_CFI_FALLBACK)
                match++;
            continue;
        }
        if (got->kind == want.kind &&
            (want.kind == AG_CFI_FALLBACK || want.kind == AG_CFI_END ||
             want.kind == AG_CFI_SIGNAL ||
             (got->cfa_off == want.cfa_off && got->fp_off == want.fp_off)))
            match++;
        else if (rows - match <= 5)
            printf("  mismatch at %#lx: readelf %s rbp %s ra %s, ours kind %u cfa %d fp %d\n",
                   (unsigned long)loc, cols[1], rbp_col >= 0 ? cols[rbp_col] : "u", cols[ra_col],
                   got->kind, got->cfa_off, got->fp_off);
    }
    pclose(f);
    printf("  %s: %lu readelf rows, %lu match (%lu expressions), %u compiled rows (%lu fallback, "
           "%lu bad), %.1f KiB\n",
           path, (unsigned long)rows, (unsigned long)match, (unsigned long)exp_rows, n,
           (unsigned long)st.fallback_rows, (unsigned long)st.bad, n * sizeof *r / 1024.0);
    CHECKF(rows > 50, "%s: readelf printed only %lu rows", path, (unsigned long)rows);
    CHECKF(match == rows, "%s: %lu of %lu rows differ from readelf", path,
           (unsigned long)(rows - match), (unsigned long)rows);
    CHECK_EQ(st.bad, 0);
    free(r);
    munmap((void *)e.map, e.size);
}

static void test_readelf(void) {
    if (system("readelf --version >/dev/null 2>&1") != 0) {
        printf("  readelf (binutils) missing\n");
        CHECK(0);
    }
    compare_readelf("/lib/x86_64-linux-gnu/libc.so.6");
    compare_readelf("/lib/x86_64-linux-gnu/libstdc++.so.6");
    compare_readelf("/usr/bin/python3");
    char self[4096];
    ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(l > 0);
    self[l] = 0;
    compare_readelf(self);
}

/* ---- the bucket index ---- */

/* Checks idx against its definition (idx[k] = rows with pc <= k << shift) and the indexed
 * lookup against the plain one for every pc in [0, end) and nrand random pcs (some far beyond
 * the text, some at the top of the range). Returns the pcs where they differ. */
static uint64_t idx_mismatches(const ag_cfi_row_t *r, uint32_t n, const uint32_t *idx,
                               uint32_t nb, unsigned shift, uint64_t end, uint32_t nrand) {
    uint64_t bad = 0;
    for (uint64_t pc = 0; pc < end; pc++)
        bad += ag_cfi_find_idx(r, n, idx, nb, shift, pc) != ag_cfi_find(r, n, pc);
    uint64_t x = 0x9e3779b97f4a7c15ull ^ n;
    for (uint32_t i = 0; i < nrand; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        uint64_t pc = i % 4 == 0 ? x : i % 4 == 1 ? x % (end + 1) : i % 4 == 2
                                                     ? x % ((uint64_t)(nb + 2) << shift)
                                                     : UINT64_MAX - (x & 0xffff);
        bad += ag_cfi_find_idx(r, n, idx, nb, shift, pc) != ag_cfi_find(r, n, pc);
    }
    return bad;
}

/* The index's entries, each against a count of the rows. */
static void check_entries(const ag_cfi_row_t *r, uint32_t n, const uint32_t *idx, uint32_t nb,
                          unsigned shift) {
    uint64_t wrong = 0;
    uint32_t j = 0;
    for (uint64_t k = 0; k <= nb; k++) {
        uint32_t c = 0;
        if (k < 64 || k + 64 > nb || k % 97 == 0) { /* by definition: count them */
            for (uint32_t i = 0; i < n; i++)
                c += r[i].pc <= k << shift;
        } else { /* rows are sorted: the same count, incrementally */
            while (j < n && r[j].pc <= k << shift)
                j++;
            c = j;
        }
        if (k < 64 || k + 64 > nb || k % 97 == 0)
            while (j < n && r[j].pc <= k << shift)
                j++;
        wrong += idx[k] != c;
    }
    CHECKF(wrong == 0, "%lu of %u index entries differ from the row counts", (unsigned long)wrong,
           nb + 1);
}

/* len bytes of src copied next to an inaccessible page: right before it (at_end) or right after
 * it, so that a lookup reading one element out of bounds faults (ASan cannot see into the
 * handler-side lookups: they are built without instrumentation). */
typedef struct {
    uint8_t *map;
    size_t len;
} guard_t;
static void *guarded(const void *src, size_t len, int at_end, guard_t *g) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    g->len = (len + pg - 1) / pg * pg + 2 * pg;
    g->map = mmap(NULL, g->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(g->map != MAP_FAILED);
    CHECK(mprotect(g->map, pg, PROT_NONE) == 0);
    CHECK(mprotect(g->map + g->len - pg, pg, PROT_NONE) == 0);
    uint8_t *dst = at_end ? g->map + g->len - pg - len : g->map + pg;
    memcpy(dst, src, len);
    return dst;
}

/* Builds the index of rows[0..n) over text_len bytes (min_shift) and checks it whole. */
static void check_index(const char *what, const ag_cfi_row_t *r, uint32_t n, uint64_t text_len,
                        unsigned min_shift, uint64_t end, uint32_t nrand) {
    uint32_t nb;
    uint8_t shift;
    uint32_t *idx = ag_cfi_index_build(r, n, text_len, min_shift, &nb, &shift);
    CHECKF(idx != NULL, "%s: no index", what);
    CHECK(shift >= min_shift);
    CHECKF((uint64_t)nb << shift >= text_len, "%s: %u buckets of 2^%u do not cover %lu bytes",
           what, nb, shift, (unsigned long)text_len);
    CHECK(nb == 0 || (uint64_t)(nb - 1) << shift < text_len);
    /* never larger than its rows */
    CHECKF((nb + 1) * sizeof *idx <= n * sizeof *r, "%s: index %zu bytes, rows %zu", what,
           (nb + 1) * sizeof *idx, n * sizeof *r);
    check_entries(r, n, idx, nb, shift);
    /* rows and index against guard pages: after them, then before them */
    uint64_t bad = 0;
    for (int at_end = 1; at_end >= 0; at_end--) {
        guard_t gr, gi;
        const ag_cfi_row_t *rg = guarded(r, n * sizeof *r, at_end, &gr);
        const uint32_t *ig = guarded(idx, (nb + 1) * sizeof *idx, at_end, &gi);
        uint64_t e = at_end ? end : end < 65536 ? end : 65536;
        uint64_t d = idx_mismatches(rg, n, ig, nb, shift, e, nrand);
        /* (a copy: compare positions, not addresses) */
        for (uint64_t pc = 0; pc < e; pc += 1 + pc / 64) {
            const ag_cfi_row_t *x = ag_cfi_find_idx(rg, n, ig, nb, shift, pc),
                               *y = ag_cfi_find(r, n, pc);
            d += (x ? x - rg : -1) != (y ? y - r : -1);
        }
        bad += d;
        munmap(gr.map, gr.len);
        munmap(gi.map, gi.len);
    }
    uint64_t searched = 0, worst = 0;
    for (uint32_t k = 0; k < nb; k++) {
        searched += idx[k + 1] - idx[k];
        if (idx[k + 1] - idx[k] > worst)
            worst = idx[k + 1] - idx[k];
    }
    printf("  %s: %u rows, text %lu bytes, shift %u (asked %u): %u buckets, %zu index bytes, "
           "%.2f rows a bucket (worst %lu), %lu pcs compared, %lu differ\n",
           what, n, (unsigned long)text_len, shift, min_shift, nb, (nb + 1) * sizeof *idx,
           nb ? (double)searched / nb : 0.0, (unsigned long)worst,
           (unsigned long)(end + nrand), (unsigned long)bad);
    CHECKF(bad == 0, "%s: the indexed lookup differs from the plain one on %lu pcs", what,
           (unsigned long)bad);
    free(idx);
}

static void test_index_real(void) {
    char self[4096];
    ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(l > 0);
    self[l] = 0;
    const char *paths[] = {"/lib/x86_64-linux-gnu/libc.so.6", self};
    for (size_t p = 0; p < sizeof paths / sizeof paths[0]; p++) {
        elf_t e;
        CHECKF(elf_open(paths[p], &e) == 0, "%s: not found or no .eh_frame", paths[p]);
        ag_cfi_build_t *bd = ag_cfi_build_new();
        CHECK(ag_cfi_build_add(bd, e.map + e.eh->sh_offset, e.eh->sh_size, e.eh->sh_addr, 0) ==
              0);
        ag_cfi_row_t *r;
        uint32_t n;
        ag_cfi_stats_t st;
        CHECK(ag_cfi_build_finish(bd, e.text_lo, e.text_hi, &r, &n, &st) == 0);
        CHECK(n > 50);
        uint64_t len = e.text_hi - e.text_lo;
        /* every byte of the text and a few buckets past it, at the agent's bucket size; the
         * neighbouring sizes on the first 256 KiB */
        check_index(paths[p], r, n, len, AG_CFI_IDX_SHIFT, len + 4096, 200000);
        check_index(paths[p], r, n, len, AG_CFI_IDX_SHIFT - 2, len < 262144 ? len : 262144,
                    50000);
        check_index(paths[p], r, n, len, AG_CFI_IDX_SHIFT + 3, len < 262144 ? len : 262144,
                    50000);
        free(r);
        munmap((void *)e.map, e.size);
    }
}

static void test_index_edges(void) {
    /* one row at 0; one row after the start (pcs before it: no row) */
    ag_cfi_row_t one[] = {{0, 8, 0, AG_CFI_RSP, 0}};
    check_index("one row at 0", one, 1, 1, 0, 64, 1000);
    ag_cfi_row_t late[] = {{100, 8, 0, AG_CFI_RSP, 0}};
    check_index("one row at 100", late, 1, 200, 0, 400, 1000);
    CHECK(ag_cfi_find_idx(late, 1, NULL, 0, 0, 99) == NULL);
    /* rows exactly on bucket boundaries, one byte either side, a dense run inside one bucket */
    const unsigned s = AG_CFI_IDX_SHIFT;
    const uint32_t b = 1u << s;
    ag_cfi_row_t edge[] = {
        {b - 1, 8, 0, AG_CFI_RSP, 0},      {b, 16, 0, AG_CFI_RSP, 0},
        {b + 1, 24, 0, AG_CFI_RSP, 0},     {2 * b, 8, 0, AG_CFI_NONE, 0},
        {3 * b - 1, 8, 0, AG_CFI_RSP, 0},  {3 * b, 8, 0, AG_CFI_RBP, 0},
        {3 * b + 2, 8, 0, AG_CFI_RSP, 0},  {3 * b + 3, 16, 0, AG_CFI_RSP, 0},
        {3 * b + 4, 24, 0, AG_CFI_RSP, 0}, {3 * b + 5, 32, 0, AG_CFI_RSP, 0},
        {3 * b + 6, 40, 0, AG_CFI_RSP, 0}, {3 * b + 7, 48, 0, AG_CFI_RSP, 0},
        {4 * b, 8, 0, AG_CFI_NONE, 0},     {6 * b, 8, 0, AG_CFI_RSP, 0},
        {6 * b + 1, 8, 0, AG_CFI_NONE, 0}, {8 * b, 8, 0, AG_CFI_END, 0},
    };
    uint32_t ne = sizeof edge / sizeof edge[0];
    /* text ending on a boundary, inside a bucket, and before the last rows (pcs past the
     * buckets: the rows from idx[nb] on) */
    check_index("boundaries, text 8 buckets", edge, ne, 8 * b, s, 12 * b, 20000);
    check_index("boundaries, text 7.5 buckets", edge, ne, 7 * b + b / 2, s, 12 * b, 20000);
    check_index("boundaries, text 2 buckets", edge, ne, 2 * b, s, 12 * b, 20000);
    check_index("boundaries, text 0", edge, ne, 0, s, 12 * b, 20000);
    /* huge gaps: the shift grows until the index is no larger than the rows */
    ag_cfi_row_t gap[] = {
        {0, 8, 0, AG_CFI_RSP, 0},          {10, 16, 0, AG_CFI_RSP, 0},
        {1u << 20, 8, 0, AG_CFI_RSP, 0},   {(1u << 20) + 1, 8, 0, AG_CFI_NONE, 0},
        {1u << 30, 8, 0, AG_CFI_RSP, 0},   {(1u << 30) + 64, 8, 0, AG_CFI_NONE, 0},
        {UINT32_MAX - 1, 8, 0, AG_CFI_RSP, 0},
    };
    uint32_t ng = sizeof gap / sizeof gap[0];
    check_index("huge gaps", gap, ng, (uint64_t)UINT32_MAX + 1, s, 1u << 21, 200000);
    /* no rows: no index, and no row for any pc */
    uint32_t nb = 7;
    uint8_t sh = 7;
    CHECK(ag_cfi_index_build(edge, 0, 4096, s, &nb, &sh) == NULL);
    CHECK_EQ(nb, 0);
    CHECK(ag_cfi_find_idx(edge, 0, NULL, 0, 0, 0) == NULL);
    CHECK(ag_cfi_find_idx(edge, 0, NULL, 0, 0, 12345) == NULL);

    /* the comparison catches an index off by one: each entry one too high, and each bucket's
     * end one too low where that row starts inside the bucket; the entries are checked
     * against their definition */
    uint32_t *idx = ag_cfi_index_build(edge, ne, 8 * b, s, &nb, &sh);
    CHECK(idx != NULL && sh == s);
    uint32_t caught = 0, tried = 0;
    for (uint32_t k = 0; k < nb; k++) {
        uint32_t keep = idx[k];
        if (idx[k] < ne) {
            idx[k]++;
            tried++;
            caught += idx_mismatches(edge, ne, idx, nb, sh, 12 * b, 0) > 0;
            idx[k] = keep;
        }
        keep = idx[k + 1];
        /* (a row on the next bucket's first byte may go either side: no result changes, but
         * check_entries catches it) */
        if (keep > idx[k] && edge[keep - 1].pc > (uint64_t)k << s &&
            edge[keep - 1].pc < (uint64_t)(k + 1) << s) {
            idx[k + 1]--;
            tried++;
            caught += idx_mismatches(edge, ne, idx, nb, sh, 12 * b, 0) > 0;
            idx[k + 1] = keep;
        }
    }
    printf("  broken indexes: %u of %u caught\n", caught, tried);
    CHECK(tried >= 8);
    CHECK_EQ(caught, tried);
    CHECK_EQ(idx_mismatches(edge, ne, idx, nb, sh, 12 * b, 0), 0); /* restored */
    check_entries(edge, ne, idx, nb, sh);
    /* and a lookup one bucket off (pc >> shift + 1) */
    uint64_t off = 0;
    for (uint64_t pc = 0; pc + b < 8 * b; pc++)
        off += ag_cfi_find_idx(edge, ne, idx, nb, sh, pc + b) != ag_cfi_find(edge, ne, pc);
    CHECK(off > 0);
    free(idx);
}

static const tr_test_t tests[] = {
    {"synthetic", test_synthetic},
    {"debug_frame", test_debug_frame},
    {"readelf", test_readelf},
    {"index_real", test_index_real},
    {"index_edges", test_index_edges},
    {0},
};
TR_MAIN(tests)
