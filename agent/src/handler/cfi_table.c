#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dl_iterate_phdr (the bench compiles this file on its own) */
#endif
/* The process's unwind tables: one compiled CFI table (cfi.c) per loaded object, published for
 * the signal handler, retired safely when objects go away.
 *
 * Thread contract: ag_cfi_tick() runs on the background thread only (it allocates, opens
 * files and calls dl_iterate_phdr, which takes the loader lock). The handler reads only the
 * published snapshot (ag_cfi_snap), never the loader's lists, never code bytes.
 *
 * Discovery: every tick, dl_iterate_phdr's first callback compares dlpi_adds/dlpi_subs with
 * the last values and stops at once when nothing was loaded or unloaded (one callback). On a
 * change the objects are listed (under the loader lock: names and ranges only) and new ones are
 * compiled after the iteration, outside the lock, from the file on disk (mmap): .eh_frame, and
 * .debug_frame when the file has no .eh_frame; the vDSO, which has no file, from memory (it is
 * never unmapped). A file whose executable segment does not match the loaded one (replaced on
 * disk since) is not used. An object without a table is still listed, so the unwinder knows
 * its range and falls back to frame pointers there.
 *
 * Publication: a snapshot is an immutable array of objects sorted by address, each pointing at
 * an immutable row array and the bucket index over it (cfi.h, built here right after the rows,
 * never changed after); the bg thread builds a new one and swaps one atomic pointer, so a
 * handler sees the old or the new one, complete. Freeing: each thread counts its unwinds in
 * progress (unw_depth, a locked increment before it loads the pointer) and completed outermost
 * ones (unw_gen). After a swap, the old snapshot and the tables of removed objects wait until
 * every thread that was inside an unwind at the swap has left it (depth 0 or gen moved); they
 * (rows and index alike) are checked each tick and freed then. An unloaded object's rows may thus be used for a few
 * microseconds after dlclose: they only steer bounded stack reads; the handler never reads the
 * object's memory.
 *
 * Memory: total rows and indexes are capped at AG_CFI_MAX_BYTES; an object that would exceed
 * it gets no table (counted in ag_cfi_stats.skipped, frame-pointer fallback). Its index, when
 * there is no memory for it alone, is left out (the plain search serves that object).
 */
#include "clock.h"
#include "thread.h"
#include "cfi_table.h"
#include "loader_gate.h"
#include "cm/log.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define AG_CFI_MAX_BYTES (64u << 20)

_Atomic(ag_cfi_snap_t *) ag_cfi_snap;
ag_cfi_counters_t ag_cfi_stats;

typedef struct {
    char *path;
    uintptr_t bias, lo, hi; /* runtime text range [lo, hi) */
    uint64_t text_vaddr;    /* ELF vaddr of lo */
    ag_cfi_row_t *rows;
    uint32_t nrows;
    uint32_t *idx;
    uint32_t nbuckets;
    uint8_t shift;
    int seen, vdso;
} entry_t;

/* memory of a bucket index of nb buckets (NULL: none) */
static size_t idx_bytes(const uint32_t *idx, uint32_t nb) {
    return idx ? ((size_t)nb + 1) * sizeof *idx : 0;
}

static entry_t *g_ent;
static uint32_t g_nent, g_capent;
static unsigned long long g_adds, g_subs;
static int g_have_counts;
static size_t g_bytes, g_idx_bytes;

/* retirement: at most one batch pending */
static struct {
    void **ptrs;
    uint32_t n;
    uint32_t *slots;
    uint32_t *gens;
    uint32_t nslots;
} g_ret;

typedef struct {
    char *path;
    uintptr_t bias, lo, hi;
    uint64_t text_vaddr;
    int vdso;
} found_t;

static found_t *g_found;
static uint32_t g_nfound, g_capfound;
static int g_changed;

static int scan_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    int *first = arg;
    if (*first) {
        *first = 0;
        if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
            if (g_have_counts && info->dlpi_adds == g_adds && info->dlpi_subs == g_subs)
                return 1; /* nothing loaded or unloaded since the last tick */
            g_adds = info->dlpi_adds;
            g_subs = info->dlpi_subs;
            g_have_counts = 1;
        }
        g_changed = 1;
    }
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        if (ph->p_vaddr < lo)
            lo = ph->p_vaddr;
        if (ph->p_vaddr + ph->p_memsz > hi)
            hi = ph->p_vaddr + ph->p_memsz;
    }
    if (lo >= hi)
        return 0;
    if (g_nfound == g_capfound) {
        uint32_t nc = g_capfound ? 2 * g_capfound : 64;
        found_t *n = realloc(g_found, nc * sizeof *n);
        if (!n)
            return 1;
        g_found = n;
        g_capfound = nc;
    }
    found_t *f = &g_found[g_nfound];
    f->vdso = info->dlpi_addr && info->dlpi_addr == (uintptr_t)getauxval(AT_SYSINFO_EHDR);
    const char *name = info->dlpi_name;
    char exe[4096];
    if (!f->vdso && (!name || !name[0])) {
        ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[l > 0 ? l : 0] = '\0';
        name = exe;
    }
    f->path = strdup(name ? name : "");
    if (!f->path)
        return 1;
    f->bias = info->dlpi_addr;
    f->lo = info->dlpi_addr + lo;
    f->hi = info->dlpi_addr + hi;
    f->text_vaddr = lo;
    g_nfound++;
    return 0;
}

/* The vaddr range [va, va + *len) as a pointer into a file mapped at map (via PT_LOAD). */
static const uint8_t *file_ptr(const uint8_t *map, size_t fsize, const Elf64_Phdr *ph, int phnum,
                               uint64_t va, uint64_t *len) {
    for (int i = 0; i < phnum; i++) {
        if (ph[i].p_type != PT_LOAD || va < ph[i].p_vaddr ||
            va >= ph[i].p_vaddr + ph[i].p_filesz)
            continue;
        uint64_t off = ph[i].p_offset + (va - ph[i].p_vaddr);
        uint64_t avail = ph[i].p_vaddr + ph[i].p_filesz - va;
        if (off >= fsize)
            return NULL;
        if (avail > fsize - off)
            avail = fsize - off;
        *len = avail;
        return map + off;
    }
    return NULL;
}

/* .eh_frame's vaddr from an .eh_frame_hdr at hdr (vaddr hva). */
static int eh_from_hdr(const uint8_t *hdr, uint64_t hlen, uint64_t hva, uint64_t *eh_va) {
    if (hlen < 8 || hdr[0] != 1)
        return -1;
    uint8_t enc = hdr[1];
    int32_t v;
    memcpy(&v, hdr + 4, 4);
    if (enc == 0x1b) /* pcrel | sdata4 */
        *eh_va = hva + 4 + (uint64_t)(int64_t)v;
    else if (enc == 0x03 || enc == 0x0b)
        *eh_va = (uint64_t)(int64_t)v;
    else
        return -1;
    return 0;
}

static int build_mem(const found_t *f, ag_cfi_build_t *b) {
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)f->bias;
    const Elf64_Phdr *ph = (const Elf64_Phdr *)(f->bias + eh->e_phoff);
    for (int i = 0; i < eh->e_phnum; i++) {
        if (ph[i].p_type != PT_GNU_EH_FRAME)
            continue;
        uint64_t eh_va;
        if (eh_from_hdr((const uint8_t *)(f->bias + ph[i].p_vaddr), ph[i].p_memsz, ph[i].p_vaddr,
                        &eh_va) != 0)
            return -1;
        for (int j = 0; j < eh->e_phnum; j++)
            if (ph[j].p_type == PT_LOAD && eh_va >= ph[j].p_vaddr &&
                eh_va < ph[j].p_vaddr + ph[j].p_filesz)
                return ag_cfi_build_add(b, (const uint8_t *)(f->bias + eh_va),
                                        ph[j].p_vaddr + ph[j].p_filesz - eh_va, eh_va, 0);
    }
    return -1;
}

static int build_file(const found_t *f, ag_cfi_build_t *b) {
    int fd = open(f->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    struct stat st;
    uint8_t *map = MAP_FAILED;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= (off_t)sizeof(Elf64_Ehdr))
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return -1;
    size_t fsize = (size_t)st.st_size;
    int rc = -1, used = 0;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)map;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_phentsize != sizeof(Elf64_Phdr) ||
        eh->e_phoff + (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr) > fsize)
        goto out;
    const Elf64_Phdr *ph = (const Elf64_Phdr *)(map + eh->e_phoff);
    /* the file must be the one loaded: same executable segment(s) */
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < eh->e_phnum; i++)
        if (ph[i].p_type == PT_LOAD && (ph[i].p_flags & PF_X)) {
            if (ph[i].p_vaddr < lo)
                lo = ph[i].p_vaddr;
            if (ph[i].p_vaddr + ph[i].p_memsz > hi)
                hi = ph[i].p_vaddr + ph[i].p_memsz;
        }
    if (lo != f->text_vaddr || f->bias + hi != f->hi) {
        atomic_fetch_add_explicit(&ag_cfi_stats.stale_files, 1, memory_order_relaxed);
        goto out;
    }
    const uint8_t *dbg = NULL;
    uint64_t dbg_len = 0;
    if (eh->e_shoff && eh->e_shentsize == sizeof(Elf64_Shdr) && eh->e_shstrndx < eh->e_shnum &&
        eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) <= fsize) {
        const Elf64_Shdr *sh = (const Elf64_Shdr *)(map + eh->e_shoff);
        const Elf64_Shdr *ss = &sh[eh->e_shstrndx];
        for (uint32_t i = 0; i < eh->e_shnum && ss->sh_offset + ss->sh_size <= fsize; i++) {
            if (sh[i].sh_name >= ss->sh_size || sh[i].sh_type == SHT_NOBITS ||
                sh[i].sh_offset + sh[i].sh_size > fsize)
                continue;
            const char *nm = (const char *)map + ss->sh_offset + sh[i].sh_name;
            size_t room = ss->sh_size - sh[i].sh_name;
            if (room > 12 && !strcmp(nm, ".eh_frame")) {
                if (ag_cfi_build_add(b, map + sh[i].sh_offset, sh[i].sh_size, sh[i].sh_addr,
                                     0) != 0)
                    goto out;
                used = 1;
            } else if (room > 12 && !strcmp(nm, ".debug_frame")) {
                dbg = map + sh[i].sh_offset;
                dbg_len = sh[i].sh_size;
            }
        }
    }
    if (!used) {
        for (int i = 0; i < eh->e_phnum && !used; i++) {
            uint64_t hlen, eh_va, elen;
            const uint8_t *hdr;
            if (ph[i].p_type != PT_GNU_EH_FRAME ||
                !(hdr = file_ptr(map, fsize, ph, eh->e_phnum, ph[i].p_vaddr, &hlen)) ||
                eh_from_hdr(hdr, hlen, ph[i].p_vaddr, &eh_va) != 0)
                continue;
            const uint8_t *e = file_ptr(map, fsize, ph, eh->e_phnum, eh_va, &elen);
            if (e) {
                if (ag_cfi_build_add(b, e, elen, eh_va, 0) != 0)
                    goto out;
                used = 1;
            }
        }
    }
    if (!used && dbg) {
        if (ag_cfi_build_add(b, dbg, dbg_len, 0, 1) != 0)
            goto out;
        used = 1;
    }
    rc = used ? 0 : -1;
out:
    munmap(map, fsize);
    return rc;
}

static void build(entry_t *e, const found_t *f) {
    ag_cfi_build_t *b = ag_cfi_build_new();
    if (!b)
        return;
    uint64_t t0 = ag_now_mono();
    int rc = f->vdso ? build_mem(f, b) : build_file(f, b);
    if (rc != 0) {
        ag_cfi_build_free(b);
        atomic_fetch_add_explicit(&ag_cfi_stats.no_cfi, 1, memory_order_relaxed);
        return;
    }
    ag_cfi_stats_t st;
    ag_cfi_row_t *rows;
    uint32_t n;
    if (ag_cfi_build_finish(b, f->text_vaddr, f->text_vaddr + (f->hi - f->lo), &rows, &n, &st) !=
        0)
        return;
    uint32_t nb = 0;
    uint8_t shift = 0;
    uint32_t *idx = ag_cfi_index_build(rows, n, f->hi - f->lo, AG_CFI_IDX_SHIFT, &nb, &shift);
    size_t ibytes = idx_bytes(idx, nb);
    size_t bytes = (size_t)n * sizeof *rows + ibytes;
    if (g_bytes + bytes > AG_CFI_MAX_BYTES) {
        free(rows);
        free(idx);
        atomic_fetch_add_explicit(&ag_cfi_stats.skipped, 1, memory_order_relaxed);
        return;
    }
    g_bytes += bytes;
    g_idx_bytes += ibytes;
    e->rows = rows;
    e->nrows = n;
    e->idx = idx;
    e->nbuckets = nb;
    e->shift = shift;
    atomic_store_explicit(&ag_cfi_stats.bytes, g_bytes, memory_order_relaxed);
    atomic_store_explicit(&ag_cfi_stats.index_bytes, g_idx_bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&ag_cfi_stats.rows, n, memory_order_relaxed);
    atomic_fetch_add_explicit(&ag_cfi_stats.fallback_rows, st.fallback_rows,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&ag_cfi_stats.bad, st.bad, memory_order_relaxed);
    atomic_fetch_add_explicit(&ag_cfi_stats.build_ns, ag_now_mono() - t0, memory_order_relaxed);
    struct timespec cts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cts);
    CM_DEBUG("unwind table: %s: %u rows, %.2f ms (thread CPU now %.2f ms)", f->path, n,
             (double)(ag_now_mono() - t0) / 1e6, cts.tv_sec * 1e3 + cts.tv_nsec / 1e6);
}

static int cmp_obj(const void *a, const void *b) {
    const ag_cfi_obj_t *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Is the pending batch free of readers? */
static int retire_quiet(void) {
    for (uint32_t i = 0; i < g_ret.nslots; i++) {
        ag_thread_t *t = &ag_threads[g_ret.slots[i]];
        if (atomic_load(&t->unw_depth) != 0 && atomic_load(&t->unw_gen) == g_ret.gens[i])
            return 0;
    }
    return 1;
}

static void retire_free(void) {
    for (uint32_t i = 0; i < g_ret.n; i++)
        free(g_ret.ptrs[i]);
    free(g_ret.ptrs);
    free(g_ret.slots);
    free(g_ret.gens);
    memset(&g_ret, 0, sizeof g_ret);
}

/* Waits (bounded) for the pending batch; a batch still read after 200 ms (a thread stopped in
 * its handler) is leaked and counted rather than freed under a reader. */
static void retire_flush(void) {
    if (!g_ret.ptrs)
        return;
    for (int i = 0; i < 2000 && !retire_quiet(); i++) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    if (retire_quiet()) {
        retire_free();
        return;
    }
    atomic_fetch_add_explicit(&ag_cfi_stats.leaked, g_ret.n, memory_order_relaxed);
    free(g_ret.ptrs);
    free(g_ret.slots);
    free(g_ret.gens);
    memset(&g_ret, 0, sizeof g_ret);
}

static void publish(void **old, uint32_t nold) {
    ag_cfi_snap_t *s = malloc(sizeof *s + (g_nent ? g_nent : 1) * sizeof(ag_cfi_obj_t));
    if (!s)
        return;
    s->n = g_nent;
    for (uint32_t i = 0; i < g_nent; i++) {
        s->o[i].lo = g_ent[i].lo;
        s->o[i].hi = g_ent[i].hi;
        s->o[i].rows = g_ent[i].rows;
        s->o[i].nrows = g_ent[i].nrows;
        s->o[i].idx = g_ent[i].idx;
        s->o[i].nbuckets = g_ent[i].nbuckets;
        s->o[i].shift = g_ent[i].shift;
    }
    qsort(s->o, s->n, sizeof s->o[0], cmp_obj);
    retire_flush();
    ag_cfi_snap_t *prev = atomic_exchange(&ag_cfi_snap, s); /* seq_cst */
    atomic_fetch_add_explicit(&ag_cfi_stats.publishes, 1, memory_order_relaxed);
    uint32_t hw = ag_thread_hw();
    g_ret.ptrs = malloc((nold + 1) * sizeof *g_ret.ptrs);
    g_ret.slots = malloc((hw ? hw : 1) * sizeof *g_ret.slots);
    g_ret.gens = malloc((hw ? hw : 1) * sizeof *g_ret.gens);
    if (!g_ret.ptrs || !g_ret.slots || !g_ret.gens) {
        /* cannot track readers: leak rather than risk a free under one */
        atomic_fetch_add_explicit(&ag_cfi_stats.leaked, nold + 1, memory_order_relaxed);
        free(g_ret.ptrs);
        free(g_ret.slots);
        free(g_ret.gens);
        memset(&g_ret, 0, sizeof g_ret);
        return;
    }
    for (uint32_t i = 0; i < nold; i++)
        g_ret.ptrs[g_ret.n++] = old[i];
    g_ret.ptrs[g_ret.n++] = prev; /* free(NULL) is fine */
    for (uint32_t i = 0; i < hw; i++) {
        ag_thread_t *t = &ag_threads[i];
        uint32_t gen = atomic_load(&t->unw_gen);
        if (atomic_load(&t->unw_depth) != 0) {
            g_ret.slots[g_ret.nslots] = i;
            g_ret.gens[g_ret.nslots++] = gen;
        }
    }
}

void (*ag_cfi_between_objects)(void);

void ag_cfi_tick(void) {
    if (g_ret.ptrs && retire_quiet())
        retire_free();
    int first = 1;
    g_changed = 0;
    g_nfound = 0;
    ag_loader_enter();
    dl_iterate_phdr(scan_cb, &first);
    ag_loader_leave();
    if (!g_changed)
        return;
    for (uint32_t i = 0; i < g_nent; i++)
        g_ent[i].seen = 0;
    uint32_t added = 0;
    for (uint32_t k = 0; k < g_nfound; k++) {
        found_t *f = &g_found[k];
        uint32_t i;
        for (i = 0; i < g_nent; i++)
            if (!g_ent[i].seen && g_ent[i].lo == f->lo && g_ent[i].hi == f->hi &&
                g_ent[i].bias == f->bias && !strcmp(g_ent[i].path, f->path))
                break;
        if (i < g_nent) {
            g_ent[i].seen = 1;
            free(f->path);
            continue;
        }
        if (g_nent == g_capent) {
            uint32_t nc = g_capent ? 2 * g_capent : 64;
            entry_t *n = realloc(g_ent, nc * sizeof *n);
            if (!n) {
                free(f->path);
                continue;
            }
            g_ent = n;
            g_capent = nc;
        }
        entry_t *e = &g_ent[g_nent++];
        *e = (entry_t){.path = f->path, .bias = f->bias, .lo = f->lo, .hi = f->hi,
                       .text_vaddr = f->text_vaddr, .vdso = f->vdso, .seen = 1};
        build(e, f);
        added++;
        if (ag_cfi_between_objects) /* a set*id caller waits: not for the whole tick */
            ag_cfi_between_objects();
    }
    /* removed objects: their rows and indexes retire with the old snapshot */
    void **old = malloc((g_nent ? 2 * g_nent : 1) * sizeof *old);
    uint32_t nold = 0, m = 0;
    for (uint32_t i = 0; i < g_nent; i++) {
        if (g_ent[i].seen) {
            g_ent[m++] = g_ent[i];
            continue;
        }
        size_t ibytes = idx_bytes(g_ent[i].idx, g_ent[i].nbuckets);
        g_bytes -= (size_t)g_ent[i].nrows * sizeof(ag_cfi_row_t) + ibytes;
        g_idx_bytes -= ibytes;
        free(g_ent[i].path);
        if (old) {
            old[nold++] = g_ent[i].rows;
            old[nold++] = g_ent[i].idx;
        } else if (g_ent[i].rows) { /* no memory to retire them: leak */
            atomic_fetch_add_explicit(&ag_cfi_stats.leaked, 1, memory_order_relaxed);
        }
    }
    uint32_t removed = g_nent - m;
    g_nent = m;
    atomic_store_explicit(&ag_cfi_stats.bytes, g_bytes, memory_order_relaxed);
    atomic_store_explicit(&ag_cfi_stats.index_bytes, g_idx_bytes, memory_order_relaxed);
    atomic_store_explicit(&ag_cfi_stats.objects, g_nent, memory_order_relaxed);
    if (added || removed || !atomic_load(&ag_cfi_snap)) {
        publish(old, nold);
        CM_DEBUG("unwind tables: %u objects (+%u -%u), %llu rows, %.2f MiB (index %.2f MiB), "
                 "%.1f ms compiling in all, %llu without CFI, %llu over the cap, %llu fallback "
                 "rows",
                 g_nent, added, removed, (unsigned long long)atomic_load(&ag_cfi_stats.rows),
                 (double)g_bytes / 1048576.0, (double)g_idx_bytes / 1048576.0,
                 (double)atomic_load(&ag_cfi_stats.build_ns) / 1e6,
                 (unsigned long long)atomic_load(&ag_cfi_stats.no_cfi),
                 (unsigned long long)atomic_load(&ag_cfi_stats.skipped),
                 (unsigned long long)atomic_load(&ag_cfi_stats.fallback_rows));
    }
    free(old);
}

void ag_cfi_after_fork_child(void) {
    /* Only the forking thread lives on in the child, outside any unwind: a thread that was
     * inside one at the fork left its depth behind, and nobody reads the pending batch. */
    uint32_t hw = ag_thread_hw();
    for (uint32_t i = 0; i < hw; i++)
        atomic_store_explicit(&ag_threads[i].unw_depth, 0, memory_order_relaxed);
    if (g_ret.ptrs)
        retire_free();
}
