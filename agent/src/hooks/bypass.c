/* Hooks with nothing to do, taken out of the program's way: the loaded objects' GOT slots that
 * resolve to one of our hooks are rewritten to the function the hook forwards to.
 *
 * Why: an interposer that only forwards still costs its call. With allocation sampling off
 * (another allocator behind us, e.g. Debian's redis-server on libjemalloc; FLEETPROF_ALLOC=0;
 * FLEETPROF_ENABLED=0) the malloc family's hooks are plain forwards, yet redis-server calls
 * them ~18 times per request (malloc_usable_size 9.4, malloc and free 4.5 each): ~0.7% of its
 * CPU, most of what the agent then adds to it (bench/RESULTS.md, issue 14 session 12). After
 * the rewrite those calls go from the program's PLT or GOT straight to the allocator, as
 * without the agent.
 *
 * What is rewritten: in each object, the R_X86_64_JUMP_SLOT (PLT calls) and R_X86_64_GLOB_DAT
 * (GOT loads: calls through .plt.got, -fno-plt calls, the function's address) relocations
 * against an undefined symbol whose name is in the caller's list, and whose slot holds an
 * address in the agent (bound to our hook of that name: BIND_NOW, or called once) or a PLT stub
 * of the object itself (lazy binding, not called yet: what the resolver would bind is the
 * hook). A slot holding anything
 * else (an object bound to another definition: a program defining malloc itself, a second
 * interposer) is left alone. A GLOB_DAT slot is also the object's view of the function's
 * address, which then differs from other objects' (still the hook's): fine for the allocator
 * entry points, whose addresses programs pass around (hiredis' and Lua's allocator tables) but
 * do not compare across objects.
 *
 * Not rewritten: ld.so and libc, and before glibc 2.34 libdl and libpthread (the hooks'
 * bootstrap arena serves the allocations dlsym makes while the hooks resolve the real
 * functions; those objects free them, through the hooks: the real free would abort on them),
 * the agent itself, and the vDSO.
 *
 * RELRO: ld.so makes the relocated GOT of a BIND_NOW object read-only (PT_GNU_RELRO, from its
 * start rounded down to its end rounded down, as _dl_protect_relro does). A slot there is
 * written between mprotect(read-write) and mprotect(read-only) of its page; a slot elsewhere
 * is in a writable segment. Each slot is one aligned 8-byte store: a thread calling through
 * it meanwhile reaches the hook or the real function, both correct.
 *
 * Thread contract: called where every loaded object is fully relocated and no dlopen is under
 * way: hooks.c's constructor, before the program's main (a later dlopen'ed object keeps
 * calling the hooks: correct, only slower). Never from a signal handler. x86-64 only (elsewhere
 * nothing is rewritten).
 */
#include "bypass.h"

#include <elf.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct {
    const ag_bypass_t *b;
    size_t n;
    uintptr_t self_lo, self_hi; /* the agent's image */
    uintptr_t page;
    ag_bypass_stats_t *st;
} walk_t;

static int name_has(const char *path, const char *part) {
    const char *base = strrchr(path, '/');
    return strstr(base ? base + 1 : path, part) != NULL;
}

/* Is a in one of the object's loaded segments? */
static int in_object(const struct dl_phdr_info *info, uintptr_t a) {
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && a >= lo && a - lo < ph->p_memsz)
            return 1;
    }
    return 0;
}

#if defined(__x86_64__)
typedef struct {
    const ElfW(Sym) *sym;
    const char *str;
    size_t strsz;
    uintptr_t ro_lo, ro_hi; /* the pages ld.so made read-only */
    uintptr_t page;
} object_t;

/* The entries of a dynamic section that object_tables and dynsym_of read; addresses are
 * relocated (glibc's loader relocates d_ptr values in place; a value below the load address
 * is not yet: add it), 0 when absent. */
typedef struct {
    uintptr_t symtab, strtab, jmprel, rela, gnu, sysv;
    size_t strsz, pltsz, relasz, relaent;
    long pltrel;
} dyn_t;

static void dyn_read(const ElfW(Dyn) * dyn, uintptr_t base, dyn_t *t) {
    *t = (dyn_t){.relaent = sizeof(ElfW(Rela)), .pltrel = DT_RELA};
    for (; dyn && dyn->d_tag != DT_NULL; dyn++) {
        uintptr_t p = dyn->d_un.d_ptr;
        switch (dyn->d_tag) {
        case DT_SYMTAB: t->symtab = p; break;
        case DT_STRTAB: t->strtab = p; break;
        case DT_STRSZ: t->strsz = dyn->d_un.d_val; break;
        case DT_JMPREL: t->jmprel = p; break;
        case DT_PLTRELSZ: t->pltsz = dyn->d_un.d_val; break;
        case DT_PLTREL: t->pltrel = (long)dyn->d_un.d_val; break;
        case DT_RELA: t->rela = p; break;
        case DT_RELASZ: t->relasz = dyn->d_un.d_val; break;
        case DT_RELAENT: t->relaent = dyn->d_un.d_val; break;
        case DT_GNU_HASH: t->gnu = p; break;
        case DT_HASH: t->sysv = p; break;
        default: break;
        }
    }
    uintptr_t *addr[] = {&t->symtab, &t->strtab, &t->jmprel, &t->rela, &t->gnu, &t->sysv};
    for (size_t i = 0; i < sizeof addr / sizeof addr[0]; i++)
        if (*addr[i] && *addr[i] < base)
            *addr[i] += base;
}

/* The object's dynamic tables (dyn_t). 0 when it has no symbol table. */
static int object_tables(const struct dl_phdr_info *info, uintptr_t page, object_t *o,
                         const ElfW(Rela) * rel[2], size_t nrel[2]) {
    const ElfW(Dyn) *dyn = NULL;
    uintptr_t base = info->dlpi_addr;
    memset(o, 0, sizeof *o);
    o->page = page;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(base + ph->p_vaddr);
        else if (ph->p_type == PT_GNU_RELRO) {
            o->ro_lo = (base + ph->p_vaddr) & ~(uintptr_t)(page - 1);
            o->ro_hi = (base + ph->p_vaddr + ph->p_memsz) & ~(uintptr_t)(page - 1);
        }
    }
    if (!dyn)
        return 0;
    dyn_t t;
    dyn_read(dyn, base, &t);
    o->strsz = t.strsz;
    if (!t.symtab || !t.strtab || !o->strsz || t.relaent != sizeof(ElfW(Rela)) ||
        t.pltrel != DT_RELA)
        return 0;
    o->sym = (const ElfW(Sym) *)t.symtab;
    o->str = (const char *)t.strtab;
    rel[0] = (const ElfW(Rela) *)t.jmprel;
    rel[1] = (const ElfW(Rela) *)t.rela;
    nrel[0] = rel[0] ? t.pltsz / sizeof(ElfW(Rela)) : 0;
    nrel[1] = rel[1] ? t.relasz / sizeof(ElfW(Rela)) : 0;
    return 1;
}

/* The entry of list b whose name the relocation's symbol has, or NULL. */
static const ag_bypass_t *wanted(const walk_t *w, const object_t *o, const ElfW(Rela) * r) {
    uint32_t type = (uint32_t)ELF64_R_TYPE(r->r_info);
    if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT)
        return NULL;
    const ElfW(Sym) *s = &o->sym[ELF64_R_SYM(r->r_info)];
    if (s->st_shndx != SHN_UNDEF || s->st_name >= o->strsz)
        return NULL;
    const char *name = o->str + s->st_name;
    for (size_t i = 0; i < w->n; i++)
        if (name[0] == w->b[i].name[0] && !strcmp(name, w->b[i].name))
            return &w->b[i];
    return NULL;
}

/* One aligned store; a slot on a page ld.so made read-only is opened for it, then closed. */
static int store(const object_t *o, uintptr_t slot, uintptr_t v) {
    uintptr_t pg = slot & ~(o->page - 1);
    int ro = pg >= o->ro_lo && pg < o->ro_hi;
    if (ro && mprotect((void *)pg, o->page, PROT_READ | PROT_WRITE) != 0)
        return -1;
    __atomic_store_n((uintptr_t *)slot, v, __ATOMIC_RELAXED);
    if (ro)
        mprotect((void *)pg, o->page, PROT_READ);
    return 0;
}

static int object_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    walk_t *w = arg;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    if (in_object(info, w->self_lo) || name_has(name, "ld-linux") || name_has(name, "libc.so") ||
        name_has(name, "libdl.so") || name_has(name, "libpthread.so") ||
        name_has(name, "linux-vdso") || name_has(name, "linux-gate"))
        return 0;
    object_t o;
    const ElfW(Rela) *rel[2];
    size_t nrel[2];
    if (!object_tables(info, w->page, &o, rel, nrel))
        return 0;
    uint32_t done = 0;
    for (int t = 0; t < 2; t++)
        for (size_t i = 0; i < nrel[t]; i++) {
            const ag_bypass_t *b = wanted(w, &o, &rel[t][i]);
            if (!b)
                continue;
            uintptr_t slot = info->dlpi_addr + rel[t][i].r_offset;
            uintptr_t v = *(const uintptr_t *)slot;
            if (v == b->real)
                continue;
            if (v - w->self_lo >= w->self_hi - w->self_lo && !(t == 0 && in_object(info, v))) {
                w->st->foreign++;
                continue;
            }
            if (store(&o, slot, b->real) == 0)
                done++;
            else
                w->st->failed++;
        }
    w->st->slots += done;
    w->st->objects += done > 0;
    return 0;
}
#endif

void ag_bypass_apply(const ag_bypass_t *b, size_t n, uintptr_t self_lo, uintptr_t self_hi,
                     ag_bypass_stats_t *st) {
    memset(st, 0, sizeof *st);
#if defined(__x86_64__)
    walk_t w = {b, n, self_lo, self_hi, (uintptr_t)sysconf(_SC_PAGESIZE), st};
    if (self_lo < self_hi)
        dl_iterate_phdr(object_cb, &w);
#else
    (void)b;
    (void)n;
    (void)self_lo;
    (void)self_hi;
#endif
}

/* ---- where a function is defined ----
 *
 * The object whose definition of a function the program's calls reach: the first object, in
 * load order (the global scope's order for the objects loaded at start), whose dynamic symbol
 * table DEFINES it (a section index, not SHN_UNDEF), other than the one holding `self`. The
 * address a data relocation resolves to is not that: a non-PIE executable that takes
 * malloc's address (Debian's python3.11) has an undefined `malloc` with a non-zero value, its
 * canonical PLT entry, which every address-of-malloc (ours included) resolves to, while its
 * calls go on to libc's. */
typedef struct {
    const char *name;
    uintptr_t self, addr;
} def_walk_t;

static uint32_t hash_gnu(const char *s) {
    uint32_t h = 5381;
    for (; *s; s++)
        h = h * 33 + (unsigned char)*s;
    return h;
}

static uint32_t hash_sysv(const char *s) {
    uint32_t h = 0;
    for (; *s; s++) {
        h = (h << 4) + (unsigned char)*s;
        uint32_t g = h & 0xf0000000u;
        h ^= g >> 24;
        h &= ~g;
    }
    return h;
}

typedef struct {
    const ElfW(Sym) *sym;
    const char *str;
    size_t strsz;
    const uint32_t *gnu, *sysv;
} dynsym_t;

static int dynsym_of(const struct dl_phdr_info *info, dynsym_t *d) {
    const ElfW(Dyn) *dyn = NULL;
    uintptr_t base = info->dlpi_addr;
    memset(d, 0, sizeof *d);
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
            dyn = (const ElfW(Dyn) *)(base + info->dlpi_phdr[i].p_vaddr);
    dyn_t t;
    dyn_read(dyn, base, &t);
    d->strsz = t.strsz;
    d->sym = (const ElfW(Sym) *)t.symtab;
    d->str = (const char *)t.strtab;
    d->gnu = (const uint32_t *)t.gnu;
    d->sysv = (const uint32_t *)t.sysv;
    return d->sym && d->str && d->strsz && (d->gnu || d->sysv);
}

static int sym_is(const dynsym_t *d, uint32_t i, const char *name) {
    return d->sym[i].st_name < d->strsz && !strcmp(d->str + d->sym[i].st_name, name);
}

/* The object's dynamic symbol of that name (defined or not), or NULL. */
static const ElfW(Sym) *dynsym_find(const dynsym_t *d, const char *name) {
    if (d->gnu) {
        uint32_t nb = d->gnu[0], off = d->gnu[1], bloom = d->gnu[2];
        const uint32_t *bucket = d->gnu + 4 + bloom * (sizeof(ElfW(Addr)) / 4);
        const uint32_t *chain = bucket + nb;
        uint32_t h = hash_gnu(name);
        uint32_t i = nb ? bucket[h % nb] : 0;
        if (i < off)
            return NULL;
        for (;; i++) {
            uint32_t c = chain[i - off];
            if ((c | 1) == (h | 1) && sym_is(d, i, name))
                return &d->sym[i];
            if (c & 1)
                return NULL;
        }
    }
    uint32_t nb = d->sysv[0], nchain = d->sysv[1];
    const uint32_t *bucket = d->sysv + 2, *chain = bucket + nb;
    for (uint32_t i = nb ? bucket[hash_sysv(name) % nb] : 0, n = 0; i && i < nchain && n < nchain;
         i = chain[i], n++)
        if (sym_is(d, i, name))
            return &d->sym[i];
    return NULL;
}

static int def_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    def_walk_t *w = arg;
    dynsym_t d;
    if (in_object(info, w->self) || !dynsym_of(info, &d))
        return 0;
    const ElfW(Sym) *s = dynsym_find(&d, w->name);
    if (!s || s->st_shndx == SHN_UNDEF || s->st_value == 0) /* UND: a canonical PLT entry */
        return 0;
    int type = ELF64_ST_TYPE(s->st_info), bind = ELF64_ST_BIND(s->st_info);
    if ((type != STT_FUNC && type != STT_GNU_IFUNC) || (bind != STB_GLOBAL && bind != STB_WEAK))
        return 0;
    w->addr = info->dlpi_addr + s->st_value;
    return 1;
}

uintptr_t ag_definition_of(const char *name, uintptr_t self) {
    def_walk_t w = {name, self, 0};
    dl_iterate_phdr(def_cb, &w);
    return w.addr;
}
