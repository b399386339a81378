/* The CFI compiler (agent/src/cfi.c), compiled in: synthetic CIE/FDE byte sequences with known
 * rows, malformed input, and real libraries compared row by row with
 * `readelf --debug-dump=frames-interp` (binutils) as ground truth. */
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

static const tr_test_t tests[] = {
    {"synthetic", test_synthetic},
    {"debug_frame", test_debug_frame},
    {"readelf", test_readelf},
    {0},
};
TR_MAIN(tests)
