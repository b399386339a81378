/* Loaded objects and their symbols (background thread only; never from a handler).
 *
 * Objects come from dl_iterate_phdr (which takes the loader lock: fine here, fatal in a
 * handler). For each one we keep its executable segment's runtime range, file offset and GNU
 * build-id (read from the PT_NOTE segment in memory), so that every location carries what a
 * backend needs to re-symbolise it offline. Function names come from the object's ELF .symtab
 * (static functions included), else .dynsym, read once from the file with plain read/mmap and
 * cached for the life of the process; C++ names are demangled with __cxa_demangle when
 * libstdc++ is loaded (looked up with dlsym, so we never pull it in). An address outside every
 * known object triggers a rescan (dlopen'ed libraries), at most once per second.
 *
 * Memory: objects and symbol tables are never freed (bounded by what the process maps).
 */
#include "internal.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    uint64_t addr, size;
    uint32_t name; /* offset in strtab */
    char *dem;     /* demangled name, lazily; NULL: not yet or not mangled */
    uint8_t dem_done;
    uint8_t exported; /* global, default visibility */
    uint8_t fwd_done;
    uintptr_t fwd;    /* our own interposers: the real function (dlsym RTLD_NEXT), 0: none */
} sym_t;

struct ag_object {
    char *path;
    uintptr_t bias;
    uint64_t start, limit; /* runtime range of the executable segment(s) */
    uint64_t file_offset;
    uint8_t build_id[CM_MAX_BUILD_ID];
    uint32_t bid_len;
    int syms_loaded;
    sym_t *syms;
    uint32_t nsyms;
    char *strtab;
    uint32_t chunk_slot;
};

typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);

static ag_object_t **g_objs;
static uint32_t g_nobjs, g_capobjs;
static uint64_t g_last_refresh_ns;
static demangle_fn g_demangle;

static int cmp_sym(const void *a, const void *b) {
    const sym_t *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static void load_syms(ag_object_t *o) {
    o->syms_loaded = 1;
    if (!o->path || !o->path[0])
        return;
    int fd = open(o->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    struct stat st;
    uint8_t *map = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size >= (off_t)sizeof(Elf64_Ehdr))
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED)
        return;
    size_t fsize = (size_t)st.st_size;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)map;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_shoff == 0 || eh->e_shentsize != sizeof(Elf64_Shdr) ||
        eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > fsize)
        goto out;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(map + eh->e_shoff);
    const Elf64_Shdr *symtab = NULL;
    for (int pass = 0; pass < 2 && !symtab; pass++)
        for (uint32_t i = 0; i < eh->e_shnum; i++)
            if (sh[i].sh_type == (pass == 0 ? SHT_SYMTAB : SHT_DYNSYM) && sh[i].sh_size) {
                symtab = &sh[i];
                break;
            }
    if (!symtab || symtab->sh_link >= eh->e_shnum || symtab->sh_entsize != sizeof(Elf64_Sym))
        goto out;
    const Elf64_Shdr *strsh = &sh[symtab->sh_link];
    if (symtab->sh_offset + symtab->sh_size > fsize || strsh->sh_offset + strsh->sh_size > fsize)
        goto out;
    size_t n = symtab->sh_size / sizeof(Elf64_Sym);
    const Elf64_Sym *syms = (const Elf64_Sym *)(map + symtab->sh_offset);
    o->strtab = malloc(strsh->sh_size + 1);
    o->syms = malloc((n ? n : 1) * sizeof *o->syms);
    if (!o->strtab || !o->syms)
        goto out;
    memcpy(o->strtab, map + strsh->sh_offset, strsh->sh_size);
    o->strtab[strsh->sh_size] = '\0';
    uint32_t k = 0;
    for (size_t i = 0; i < n; i++) {
        int type = ELF64_ST_TYPE(syms[i].st_info);
        if ((type != STT_FUNC && type != STT_GNU_IFUNC) || syms[i].st_shndx == SHN_UNDEF ||
            syms[i].st_value == 0 || syms[i].st_name >= strsh->sh_size)
            continue;
        o->syms[k].addr = syms[i].st_value;
        o->syms[k].size = syms[i].st_size;
        o->syms[k].name = syms[i].st_name;
        o->syms[k].dem = NULL;
        o->syms[k].dem_done = 0;
        o->syms[k].exported = ELF64_ST_BIND(syms[i].st_info) != STB_LOCAL &&
                              ELF64_ST_VISIBILITY(syms[i].st_other) == STV_DEFAULT;
        o->syms[k].fwd_done = 0;
        o->syms[k].fwd = 0;
        k++;
    }
    qsort(o->syms, k, sizeof *o->syms, cmp_sym);
    /* Aliases: keep one symbol per address (the first global after sorting is fine). */
    uint32_t m = 0;
    for (uint32_t i = 0; i < k; i++)
        if (m == 0 || o->syms[m - 1].addr != o->syms[i].addr)
            o->syms[m++] = o->syms[i];
        else if (o->syms[i].exported && !o->syms[m - 1].exported)
            o->syms[m - 1] = o->syms[i]; /* the exported name of an address wins */
    o->nsyms = m;
out:
    munmap(map, fsize);
}

static void read_build_id(ag_object_t *o, const struct dl_phdr_info *info) {
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE)
            continue;
        const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
        const uint8_t *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            const uint8_t *name = p + sizeof *nh;
            const uint8_t *desc = name + ((nh->n_namesz + 3) & ~3u);
            const uint8_t *next = desc + ((nh->n_descsz + 3) & ~3u);
            if (next > end)
                break;
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && !memcmp(name, "GNU", 4) &&
                nh->n_descsz <= CM_MAX_BUILD_ID) {
                memcpy(o->build_id, desc, nh->n_descsz);
                o->bid_len = nh->n_descsz;
                return;
            }
            p = next;
        }
    }
}

static int add_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    uint64_t start = UINT64_MAX, limit = 0, off = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        uint64_t s = info->dlpi_addr + ph->p_vaddr;
        if (s < start) {
            start = s;
            off = ph->p_offset;
        }
        if (s + ph->p_memsz > limit)
            limit = s + ph->p_memsz;
    }
    if (start >= limit)
        return 0;
    for (uint32_t i = 0; i < g_nobjs; i++)
        if (g_objs[i]->start == start && g_objs[i]->limit == limit)
            return 0;
    if (g_nobjs == g_capobjs) {
        uint32_t ncap = g_capobjs ? 2 * g_capobjs : 32;
        ag_object_t **n = realloc(g_objs, ncap * sizeof *n);
        if (!n)
            return 1;
        g_objs = n;
        g_capobjs = ncap;
    }
    ag_object_t *o = calloc(1, sizeof *o);
    if (!o)
        return 1;
    char exe[4096];
    const char *name = info->dlpi_name;
    if (!name || !name[0]) { /* the main program */
        ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[l > 0 ? l : 0] = '\0';
        name = exe;
    }
    o->path = strdup(name);
    o->bias = info->dlpi_addr;
    o->start = start;
    o->limit = limit;
    o->file_offset = off;
    o->chunk_slot = 0;
    read_build_id(o, info);
    g_objs[g_nobjs++] = o;
    return 0;
}

static void refresh(void) {
    g_last_refresh_ns = ag_now_mono();
    uint32_t before = g_nobjs;
    dl_iterate_phdr(add_object, NULL);
    (void)before;
}

void ag_symbols_init(void) {
    g_demangle = (demangle_fn)dlsym(RTLD_DEFAULT, "__cxa_demangle");
    refresh();
}

static ag_object_t *find_object(uintptr_t pc) {
    for (uint32_t i = g_nobjs; i-- > 0;) /* newest first: a reused range is the new object */
        if (pc >= g_objs[i]->start && pc < g_objs[i]->limit)
            return g_objs[i];
    return NULL;
}

void ag_symbols_lookup(uintptr_t pc, ag_sym_t *out) {
    memset(out, 0, sizeof *out);
    ag_object_t *o = find_object(pc);
    /* a miss: rescan when objects were loaded since (cfi_table.c counts publications), else
     * at most once per second */
    static uint64_t seen_gen;
    uint64_t gen = atomic_load_explicit(&ag_cfi_stats.publishes, memory_order_relaxed);
    if (!o && (gen != seen_gen || ag_now_mono() - g_last_refresh_ns > 1000000000ull)) {
        seen_gen = gen;
        refresh();
        o = find_object(pc);
    }
    if (!o) {
        out->file_addr = pc;
        return;
    }
    out->obj = o;
    out->file_addr = pc - o->bias;
    if (!o->syms_loaded)
        load_syms(o);
    uint32_t lo = 0, hi = o->nsyms;
    while (lo < hi) { /* first symbol with addr > file_addr */
        uint32_t mid = (lo + hi) / 2;
        if (o->syms[mid].addr <= out->file_addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return;
    sym_t *s = &o->syms[lo - 1];
    if (s->size && out->file_addr >= s->addr + s->size)
        return;
    out->sysname = o->strtab + s->name;
    /* One of our interposers (malloc, writev...) at the leaf of a hooked call: name the real
     * function the application called, so no agent frame shows (record.c keeps only the
     * outermost agent frame of a stack's leading run). */
    if (ag_self_hi && pc - ag_self_lo < ag_self_hi - ag_self_lo) {
        if (!s->fwd_done) {
            s->fwd_done = 1;
            /* an exported interposer, or its cold part split off by GCC ("malloc.cold") */
            char base[128];
            const char *dot = strchr(out->sysname, '.');
            size_t len = dot ? (size_t)(dot - out->sysname) : strlen(out->sysname);
            int exported = s->exported;
            if (dot && len < sizeof base) {
                memcpy(base, out->sysname, len);
                base[len] = '\0';
                for (uint32_t i = 0; i < o->nsyms && !exported; i++)
                    exported = o->syms[i].exported && !strcmp(o->strtab + o->syms[i].name, base);
            } else if (len < sizeof base) {
                memcpy(base, out->sysname, len + 1);
            } else {
                exported = 0;
            }
            if (exported) {
                void *next = dlsym(RTLD_NEXT, base);
                if (next && (uintptr_t)next - ag_self_lo >= ag_self_hi - ag_self_lo)
                    s->fwd = (uintptr_t)next;
            }
        }
        if (s->fwd) {
            ag_symbols_lookup(s->fwd, out);
            return;
        }
    }
    if (!s->dem_done) {
        s->dem_done = 1;
        if (g_demangle && !strncmp(out->sysname, "_Z", 2)) {
            int status = 0;
            s->dem = g_demangle(out->sysname, NULL, NULL, &status);
            if (status != 0)
                s->dem = NULL;
        }
    }
    out->name = s->dem ? s->dem : out->sysname;
    out->sym_id = lo; /* index + 1 */
}

const char *ag_object_path(const ag_object_t *o) { return o->path; }

void ag_object_mapping(const ag_object_t *o, uint64_t *start, uint64_t *limit, uint64_t *off,
                       const uint8_t **build_id, uint32_t *bid_len) {
    *start = o->start;
    *limit = o->limit;
    *off = o->file_offset;
    *build_id = o->build_id;
    *bid_len = o->bid_len;
}

uint32_t *ag_object_chunk_slot(ag_object_t *o) { return &o->chunk_slot; }
