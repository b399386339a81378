/* The CFI row lookup on a cold cache (issue 14, session 11): the plain binary search over a
 * table's rows (ag_cfi_find) against the bucket index (ag_cfi_find_idx), both from
 * agent/src/bg/cfi.c compiled in. Not a test.
 *
 *   bench-cfi-index [density] [cold [LOOKUPS]] [FILE...]
 *
 * density: for each object (default: libc, python3, redis-server, this program), its rows,
 *   text and row density, and for bucket shifts 5..10 the index's memory (beside the rows'), the
 *   rows a lookup searches (mean over uniform pcs, and the worst bucket) and the distinct
 *   cache lines a lookup reads (index + rows), counted by replaying the search.
 * cold: random pcs over the first object's table (libc), each lookup timed alone after the
 *   table and its index were flushed from every cache level (clflush; "memory-cold"), and
 *   again after a 32 MiB buffer was read (L1/L2 evicted, the L3 may keep the table: it is
 *   260 MiB on this VM), plain and indexed interleaved in one run. Time per lookup is
 *   clock_gettime(CLOCK_MONOTONIC) around it, the timer's own cost (measured) taken off.
 */
#define _GNU_SOURCE
#include "cfi.h"

#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

typedef struct {
    const char *path;
    ag_cfi_row_t *rows;
    uint32_t n;
    uint64_t text_len;
} table_t;

/* Compiles path's .eh_frame (as cfi_table.c does for a loaded object). */
static int load(const char *path, table_t *t) {
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        close(fd);
        return -1;
    }
    size_t size = (size_t)st.st_size;
    const uint8_t *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return -1;
    const Elf64_Ehdr *h = (const Elf64_Ehdr *)map;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(map + h->e_shoff);
    const char *ss = (const char *)map + sh[h->e_shstrndx].sh_offset;
    const Elf64_Shdr *eh = NULL;
    for (int i = 0; i < h->e_shnum; i++)
        if (!strcmp(ss + sh[i].sh_name, ".eh_frame"))
            eh = &sh[i];
    const Elf64_Phdr *ph = (const Elf64_Phdr *)(map + h->e_phoff);
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < h->e_phnum; i++)
        if (ph[i].p_type == PT_LOAD && (ph[i].p_flags & PF_X)) {
            if (ph[i].p_vaddr < lo)
                lo = ph[i].p_vaddr;
            if (ph[i].p_vaddr + ph[i].p_memsz > hi)
                hi = ph[i].p_vaddr + ph[i].p_memsz;
        }
    int rc = -1;
    if (eh && lo < hi) {
        ag_cfi_build_t *b = ag_cfi_build_new();
        ag_cfi_stats_t cs;
        if (b && ag_cfi_build_add(b, map + eh->sh_offset, eh->sh_size, eh->sh_addr, 0) == 0 &&
            ag_cfi_build_finish(b, lo, hi, &t->rows, &t->n, &cs) == 0 && t->n > 0) {
            t->path = path;
            t->text_len = hi - lo;
            rc = 0;
        }
    }
    munmap((void *)map, size);
    return rc;
}

/* The indexed search replayed, counting the distinct cache lines it reads (the result row
 * included: the unwinder reads it next). Returns the lines; *searched the rows in range. */
static int lines_of(const table_t *t, const uint32_t *idx, uint32_t nb, unsigned shift,
                    uint64_t pc, uint32_t *searched) {
    uintptr_t seen[64];
    int ns = 0;
#define TOUCH(p)                                                                               \
    do {                                                                                       \
        uintptr_t a_ = (uintptr_t)(p) >> 6, b_ = ((uintptr_t)(p) + sizeof *(p) - 1) >> 6;      \
        for (uintptr_t x_ = a_; x_ <= b_; x_++) {                                              \
            int f_ = 0;                                                                        \
            for (int i_ = 0; i_ < ns; i_++)                                                    \
                f_ |= seen[i_] == x_;                                                          \
            if (!f_ && ns < 64)                                                                \
                seen[ns++] = x_;                                                               \
        }                                                                                      \
    } while (0)
    uint32_t l = 0, h = t->n;
    uint64_t k = pc >> shift;
    if (idx) {
        if (k < nb) {
            TOUCH(&idx[k]);
            TOUCH(&idx[k + 1]);
            l = idx[k];
            h = idx[k + 1];
        } else {
            TOUCH(&idx[nb]);
            l = idx[nb];
        }
    }
    *searched = h - l;
    while (l < h) {
        uint32_t mid = l + (h - l) / 2;
        TOUCH(&t->rows[mid]);
        if (t->rows[mid].pc <= pc)
            l = mid + 1;
        else
            h = mid;
    }
    if (l > 0)
        TOUCH(&t->rows[l - 1]);
    return ns;
#undef TOUCH
}

static void density(const table_t *t) {
    printf("%s: %u rows (%.1f KiB), text %.1f KiB, %.1f bytes of text a row\n", t->path, t->n,
           t->n * sizeof(ag_cfi_row_t) / 1024.0, t->text_len / 1024.0,
           (double)t->text_len / t->n);
    printf("  shift  bucket  index_KiB  index/rows  rows_searched(mean,max)  lines/lookup\n");
    uint32_t dummy;
    double plain_lines = 0;
    uint64_t step = t->text_len / 200000 + 1, cnt = 0;
    for (uint64_t pc = 0; pc < t->text_len; pc += step, cnt++)
        plain_lines += lines_of(t, NULL, 0, 0, pc, &dummy);
    printf("  plain binary search: %.2f lines/lookup\n", plain_lines / (double)cnt);
    for (unsigned s = 5; s <= 10; s++) {
        uint32_t nb;
        uint8_t shift;
        uint32_t *idx = ag_cfi_index_build(t->rows, t->n, t->text_len, s, &nb, &shift);
        if (!idx)
            continue;
        if (shift != s) { /* a sparse table: the shift grew (printed at its own row) */
            free(idx);
            continue;
        }
        double lines = 0, searched = 0;
        uint32_t worst = 0;
        for (uint32_t k = 0; k < nb; k++)
            if (idx[k + 1] - idx[k] > worst)
                worst = idx[k + 1] - idx[k];
        for (uint64_t pc = 0; pc < t->text_len; pc += step) {
            uint32_t sr;
            lines += lines_of(t, idx, nb, shift, pc, &sr);
            searched += sr;
        }
        printf("  %5u  %6u  %9.1f  %9.1f%%  %10.2f %12u  %12.2f\n", shift, 1u << shift,
               (nb + 1) * 4.0 / 1024, 100.0 * (nb + 1) * 4 / (t->n * sizeof(ag_cfi_row_t)),
               searched / (double)cnt, worst, lines / (double)cnt);
        free(idx);
    }
}

static inline double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void flush(const void *p, size_t len) {
    for (uintptr_t a = (uintptr_t)p & ~(uintptr_t)63; a < (uintptr_t)p + len; a += 64)
        _mm_clflush((const void *)a);
    _mm_mfence();
}

static volatile uint64_t g_sink;

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void report(const char *what, double *plain, double *ix, int n, double timer) {
    qsort(plain, (size_t)n, sizeof *plain, cmp_d);
    qsort(ix, (size_t)n, sizeof *ix, cmp_d);
    double sp = 0, si = 0;
    for (int i = 0; i < n; i++) {
        sp += plain[i] - timer;
        si += ix[i] - timer;
    }
    printf("  %-24s plain: median %7.1f ns, mean %7.1f ns | indexed: median %6.1f ns, mean %6.1f "
           "ns | plain/indexed: %.1fx (median), %.1fx (mean)\n",
           what, plain[n / 2] - timer, sp / n, ix[n / 2] - timer, si / n,
           (plain[n / 2] - timer) / (ix[n / 2] - timer), sp / si);
}

static void cold(const table_t *t, int lookups) {
    uint32_t nb;
    uint8_t shift;
    uint32_t *idx = ag_cfi_index_build(t->rows, t->n, t->text_len, AG_CFI_IDX_SHIFT, &nb, &shift);
    if (!idx) {
        printf("no index\n");
        return;
    }
    size_t rbytes = t->n * sizeof(ag_cfi_row_t), ibytes = (nb + 1) * sizeof(uint32_t);
    printf("cold lookups: %s, %u rows (%.1f KiB) + index %.1f KiB (shift %u), %d random pcs\n",
           t->path, t->n, rbytes / 1024.0, ibytes / 1024.0, shift, lookups);
    uint64_t *pcs = malloc((size_t)lookups * sizeof *pcs);
    double *tp = malloc((size_t)lookups * sizeof *tp), *ti = malloc((size_t)lookups * sizeof *ti);
    double *tn = malloc((size_t)lookups * sizeof *tn);
    size_t evsz = 32u << 20;
    volatile uint8_t *ev = malloc(evsz);
    if (!pcs || !tp || !ti || !tn || !ev)
        return;
    memset((void *)ev, 1, evsz);
    srand(14);
    for (int i = 0; i < lookups; i++)
        pcs[i] = ((uint64_t)rand() << 16 ^ (uint64_t)rand()) % t->text_len;
    /* the timer's own cost */
    double tm[1001];
    for (int i = 0; i < 1001; i++) {
        double a = now_ns();
        tm[i] = now_ns() - a;
    }
    qsort(tm, 1001, sizeof *tm, cmp_d);
    double timer = tm[500];
    printf("  timer pair, warm: %.1f ns\n", timer);
    for (int mode = 0; mode < 2; mode++) {
        for (int i = 0; i < lookups; i++) {
            for (int v = 0; v < 3; v++) { /* plain, indexed, none: same pc, interleaved */
                if (mode == 0) {
                    flush(t->rows, rbytes);
                    flush(idx, ibytes);
                } else {
                    uint64_t s = 0;
                    for (size_t o = 0; o < evsz; o += 64)
                        s += ev[o];
                    g_sink += s;
                    _mm_mfence();
                }
                const ag_cfi_row_t *r;
                double a = now_ns();
                if (v == 0)
                    r = ag_cfi_find(t->rows, t->n, pcs[i]);
                else if (v == 1)
                    r = ag_cfi_find_idx(t->rows, t->n, idx, nb, shift, pcs[i]);
                else
                    r = NULL;
                g_sink += r ? r->kind : 9;
                double d = now_ns() - a;
                (v == 0 ? tp : v == 1 ? ti : tn)[i] = d;
            }
        }
        /* the timer after the same eviction (its own data may have been evicted too) */
        qsort(tn, (size_t)lookups, sizeof *tn, cmp_d);
        double tmode = tn[lookups / 2] > timer ? tn[lookups / 2] : timer;
        printf("  timer pair after this eviction: %.1f ns (taken off)\n", tmode);
        report(mode == 0 ? "memory-cold (clflush):" : "after 32 MiB read:", tp, ti, lookups,
               tmode);
    }
    free(idx);
    free(pcs);
    free(tp);
    free(ti);
    free(tn);
    free((void *)ev);
}

int main(int argc, char **argv) {
    int do_density = 0, do_cold = 0, lookups = 2000;
    const char *files[32];
    int nf = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "density"))
            do_density = 1;
        else if (!strcmp(argv[i], "cold")) {
            do_cold = 1;
            if (i + 1 < argc && atoi(argv[i + 1]) > 0)
                lookups = atoi(argv[++i]);
        } else if (nf < 32)
            files[nf++] = argv[i];
    }
    if (!do_density && !do_cold)
        do_density = do_cold = 1;
    if (nf == 0) {
        files[nf++] = "/lib/x86_64-linux-gnu/libc.so.6";
        files[nf++] = "/usr/bin/python3.11";
        files[nf++] = "/usr/bin/redis-server";
        files[nf++] = "/proc/self/exe";
    }
    table_t t[32];
    int nt = 0;
    for (int i = 0; i < nf; i++) {
        if (load(files[i], &t[nt]) == 0)
            nt++;
        else
            printf("%s: not found or no .eh_frame: skipped\n", files[i]);
    }
    if (do_density)
        for (int i = 0; i < nt; i++)
            density(&t[i]);
    if (do_cold && nt > 0)
        cold(&t[0], lookups);
    for (int i = 0; i < nt; i++)
        free(t[i].rows);
    return 0;
}
