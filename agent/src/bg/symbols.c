/* Loaded objects and their symbols (background thread only; never from a handler).
 *
 * Objects come from dl_iterate_phdr (which takes the loader lock: fine here, fatal in a
 * handler). For each one we keep its executable segment's runtime range, file offset and GNU
 * build-id (read from the PT_NOTE segment in memory), so that every location carries what a
 * backend needs to re-symbolise it offline. An address outside every known object triggers a
 * rescan (dlopen'ed libraries), at most once per second.
 *
 * Symbols: elfutils' libdwfl opens each object once (on its first sample) and picks the best
 * symbol table the binary offers: its own .symtab; else the .symtab of a separate debug file,
 * found by build-id (<dir>/.build-id/xx/rest.debug) or by .gnu_debuglink (next to the file, in
 * its .debug/ directory, or <dir>/<file's dir>/), <dir> being each of FLEETPROF_DEBUG_DIRS
 * (colon-separated, default /usr/lib/debug); else the MiniDebugInfo .gnu_debugdata (xz) merged
 * with .dynsym; else .dynsym. Our own find_debuginfo callback never asks debuginfod (a
 * profiled process must not go to the network; the aggregator does that). We copy the
 * function symbols into one array sorted by address and look pcs up by binary search: a
 * symbol covers [value, value + size), a size-0 symbol up to the next symbol, so every address
 * of a function maps to that one function (libdwfl's own dwfl_module_addrinfo is a linear
 * scan: 125 us per lookup on libc, against ~0.1 us here). Names are demangled with libiberty's
 * cplus_demangle (C++, Rust legacy and v0), lazily, once per symbol, without a length cut (the
 * chunk bounds strings at CM_MAX_STRING_LEN = 4096 bytes).
 *
 * Source lines (FLEETPROF_LINES=1; off by default): where the object or its debug file has
 * DWARF, the whole .debug_line of the module (every CU) is copied at load time; a pc's row is
 * the last one at or below it unless that row ends a sequence (what dwfl_module_getsrc does
 * within a CU), and the function's file is the one of its entry address. Off by default
 * because of what it costs in the host process (measured on Debian's python3 with its 11 MB
 * compressed debug file: +55 MB RSS and 1.4 s of loading, against ~10 ms and no visible RSS
 * for its symbols).
 *
 * Descriptors (issue 13, "do no harm"): libdwfl keeps a module's file descriptors (object,
 * debug file, dwz alt file) open until dwfl_end, so each object gets a Dwfl of its own, used
 * only inside load_syms: the function names (and with FLEETPROF_LINES=1 the whole line table,
 * as sorted (address, file, line) rows with interned file names) are copied into the object,
 * then dwfl_end closes every descriptor and unmaps the files. The agent keeps no descriptor of
 * an ELF or debug file; a load holds at most three for its duration. A load needs descriptors,
 * so it is deferred (the pc stays unnamed for this chunk, counted in `deferred`) while the
 * process has at most max(AG_SYM_FD_RESERVE, RLIMIT_NOFILE/64) descriptors free, and then for
 * a second.
 *
 * Memory: objects and their symbol (and line) tables are never freed (bounded by what the
 * process maps); names live in one string pool per object.
 */
#include "ag_alloc.h"
#include "config.h"
#include "clock.h"
#include "cfi_table.h"
#include "ag_unwind.h"
#include "symbols.h"
#include "lazylibs.h"
#include "loader_gate.h"

#include "cm/array.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <libiberty/demangle.h>
#include <link.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* descriptors that must stay free for the application before a load may take its (<= 3) */
#define AG_SYM_FD_RESERVE 8
/* descriptor numbers scanned to count the open ones (above it: assumed free) */
#define AG_SYM_FD_SCAN 65536

typedef struct {
    uint64_t addr, end; /* file vaddrs: [addr, end) */
    uint64_t sec_end;   /* end of the symbol's section (bounds a size-0 symbol) */
    const char *name;   /* in the object's pool (or static), alive for the process */
    char *dem;          /* demangled name, lazily; NULL: not yet or not mangled */
    const char *file;   /* source file of the entry address, lazily */
    uint8_t dem_done, file_done;
    uint8_t owned; /* name was malloc'ed (PLT, vdso) before it moved to the pool */
    uint8_t exported; /* global, default visibility */
    uint8_t fwd_done;
    uintptr_t fwd;    /* our own interposers: the real function (dlsym RTLD_NEXT), 0: none */
} sym_t;

typedef struct { /* one row of the line table (FLEETPROF_LINES=1) */
    uint64_t addr;  /* file vaddr */
    uint32_t file;  /* index in the object's files; UINT32_MAX: end of a sequence */
    uint32_t line;
} line_t;

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
    char *pool; /* the names of syms */
    line_t *lines;
    uint32_t nlines;
    char **files; /* source file names of lines */
    uint32_t nfiles;
    uint32_t chunk_slot;
};

static ag_object_t **g_objs;
static uint32_t g_nobjs, g_capobjs;
static uint64_t g_last_refresh_ns;
static int g_lines; /* FLEETPROF_LINES=1 */
static char g_debug_dirs[1024] = "/usr/lib/debug";
static ag_symstats_t g_stats;
static uint64_t g_defer_until_ns; /* no load before (near RLIMIT_NOFILE) */
static int g_dw_state; /* elfutils: 0 not tried, 1 loaded, -1 unavailable, 2 not allowed */

static int try_open(const char *path, char **out_name) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) /* libdwfl frees it: from the global malloc (trusted, or libdw is not loaded) */
        *out_name = ag_global_strdup(path);
    return fd;
}

/* libdwfl's find_debuginfo callback: local files only (see the head comment). */
static int find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname,
                          GElf_Addr base, const char *file_name, const char *debuglink_file,
                          GElf_Word debuglink_crc, char **debuginfo_file_name) {
    (void)userdata, (void)modname, (void)base, (void)debuglink_crc;
    const unsigned char *bits;
    GElf_Addr vaddr;
    int bl = ag_dw.dwfl_module_build_id(mod, &bits, &vaddr);
    char path[4096], dirs[sizeof g_debug_dirs];
    snprintf(dirs, sizeof dirs, "%s", g_debug_dirs);
    for (int pass = 0; pass < 2; pass++) {
        char *save = NULL;
        snprintf(dirs, sizeof dirs, "%s", g_debug_dirs);
        for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
            int fd = -1;
            if (pass == 0 && bl >= 2 && bl <= (int)CM_MAX_BUILD_ID) {
                int n = snprintf(path, sizeof path, "%s/.build-id/%02x/", d, bits[0]);
                for (int i = 1; i < bl && n < (int)sizeof path - 8; i++)
                    n += snprintf(path + n, sizeof path - (size_t)n, "%02x", bits[i]);
                snprintf(path + n, sizeof path - (size_t)n, ".debug");
                fd = try_open(path, debuginfo_file_name);
            } else if (pass == 1 && debuglink_file && file_name) {
                const char *slash = strrchr(file_name, '/');
                int dl = slash ? (int)(slash - file_name) : 0;
                snprintf(path, sizeof path, "%s%.*s/%s", d, dl, file_name, debuglink_file);
                fd = try_open(path, debuginfo_file_name);
            }
            if (fd >= 0)
                return fd;
        }
    }
    if (debuglink_file && file_name) { /* next to the file, and in its .debug/ */
        const char *slash = strrchr(file_name, '/');
        int dl = slash ? (int)(slash - file_name) : 1;
        const char *dir = slash ? file_name : ".";
        snprintf(path, sizeof path, "%.*s/.debug/%s", dl, dir, debuglink_file);
        int fd = try_open(path, debuginfo_file_name);
        if (fd >= 0)
            return fd;
        snprintf(path, sizeof path, "%.*s/%s", dl, dir, debuglink_file);
        if (strcmp(path, file_name) != 0 && (fd = try_open(path, debuginfo_file_name)) >= 0)
            return fd;
    }
    return -1;
}

static char *g_dwfl_debuginfo_path;
static Dwfl_Callbacks g_callbacks = { /* libdwfl's own callbacks set once it is loaded */
    .find_debuginfo = find_debuginfo,
    .debuginfo_path = &g_dwfl_debuginfo_path,
};

static int cmp_sym(const void *a, const void *b) {
    const sym_t *x = a, *y = b;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    /* aliases: the sized one first, then a global name before a local one (kept: the first) */
    return (x->end == x->addr) - (y->end == y->addr);
}

static sym_t *add_sym(ag_object_t *o, uint32_t *cap) {
    if (o->nsyms == *cap) {
        uint32_t nc = *cap ? 2 * *cap : 256;
        sym_t *n = realloc(o->syms, (size_t)nc * sizeof *n);
        if (!n)
            return NULL;
        o->syms = n;
        *cap = nc;
    }
    sym_t *sy = &o->syms[o->nsyms++];
    memset(sy, 0, sizeof *sy);
    sy->sec_end = UINT64_MAX;
    return sy;
}

static Elf_Scn *find_section(Elf *elf, const char *name, GElf_Shdr *sh) {
    size_t shstrndx;
    if (ag_dw.elf_getshdrstrndx(elf, &shstrndx) != 0)
        return NULL;
    for (Elf_Scn *scn = ag_dw.elf_nextscn(elf, NULL); scn; scn = ag_dw.elf_nextscn(elf, scn)) {
        const char *n = ag_dw.gelf_getshdr(scn, sh) ? ag_dw.elf_strptr(elf, shstrndx, sh->sh_name) : NULL;
        if (n && !strcmp(n, name))
            return scn;
    }
    return NULL;
}

/* PLT stubs have no symbol: entry i of .plt.sec (or i + 1 of .plt, after PLT0) jumps through
 * the slot of relocation i of .rela.plt, so it is named "<symbol>@plt" as perf and gdb do;
 * PLT0 and .plt.got stubs are "[plt]". elf is the object's own file (its addresses are file
 * vaddrs + ebias = runtime). */
static void add_plt(ag_object_t *o, uint32_t *cap, Elf *elf, GElf_Addr ebias) {
    GElf_Shdr plt, pltsec, rela, pltgot, dsh;
    Elf_Scn *s_plt = find_section(elf, ".plt", &plt), *s_sec = find_section(elf, ".plt.sec", &pltsec);
    Elf_Scn *s_rela = find_section(elf, ".rela.plt", &rela);
    Elf_Scn *s_got = find_section(elf, ".plt.got", &pltgot);
    Elf_Scn *s_dyn = s_rela ? ag_dw.elf_getscn(elf, rela.sh_link) : NULL;
    Elf_Data *rd = s_rela && rela.sh_type == SHT_RELA ? ag_dw.elf_getdata(s_rela, NULL) : NULL;
    Elf_Data *dd = s_dyn && ag_dw.gelf_getshdr(s_dyn, &dsh) ? ag_dw.elf_getdata(s_dyn, NULL) : NULL;
    const GElf_Shdr *stubs = s_sec ? &pltsec : s_plt ? &plt : NULL;
    if (stubs && stubs->sh_type == SHT_PROGBITS && rd && dd && rela.sh_entsize) {
        size_t n = rela.sh_size / rela.sh_entsize;
        for (size_t i = 0; i < n; i++) {
            GElf_Rela r;
            GElf_Sym sym;
            uint64_t a = stubs->sh_addr + 16 * (i + (s_sec ? 0 : 1));
            if (a + 16 > stubs->sh_addr + stubs->sh_size)
                break;
            if (!ag_dw.gelf_getrela(rd, (int)i, &r) || !ag_dw.gelf_getsym(dd, (int)GELF_R_SYM(r.r_info), &sym))
                continue;
            const char *nm = ag_dw.elf_strptr(elf, dsh.sh_link, sym.st_name);
            size_t nl = nm ? strlen(nm) : 0;
            char *name = nl ? malloc(nl + sizeof "@plt") : NULL; /* ag_alloc.c's */
            if (!name)
                continue;
            memcpy(name, nm, nl);
            memcpy(name + nl, "@plt", sizeof "@plt");
            sym_t *sy = add_sym(o, cap);
            if (!sy) {
                free(name);
                return;
            }
            sy->addr = a + ebias - o->bias;
            sy->end = sy->addr + 16;
            sy->name = name;
            sy->owned = 1;
        }
    }
    static const char plt_name[] = "[plt]";
    if (s_plt && plt.sh_type == SHT_PROGBITS) { /* PLT0 (and the lazy stubs under .plt.sec) */
        sym_t *sy = add_sym(o, cap);
        if (sy) {
            sy->addr = plt.sh_addr + ebias - o->bias;
            sy->end = sy->addr + (s_sec ? plt.sh_size : 16);
            sy->name = plt_name;
        }
    }
    if (s_got && pltgot.sh_type == SHT_PROGBITS) {
        sym_t *sy = add_sym(o, cap);
        if (sy) {
            sy->addr = pltgot.sh_addr + ebias - o->bias;
            sy->end = sy->addr + pltgot.sh_size;
            sy->name = plt_name;
        }
    }
}

/* The vdso has no file: its ELF image is mapped whole, section headers included. */
static void add_vdso(ag_object_t *o, uint32_t *cap) {
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)o->bias;
    if (!o->bias || memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_shentsize != sizeof(Elf64_Shdr))
        return;
    size_t size = eh->e_shoff + (size_t)eh->e_shnum * sizeof(Elf64_Shdr);
    Elf *elf = ag_dw.elf_memory((char *)o->bias, size);
    if (!elf)
        return;
    for (Elf_Scn *scn = ag_dw.elf_nextscn(elf, NULL); scn; scn = ag_dw.elf_nextscn(elf, scn)) {
        GElf_Shdr sh;
        Elf_Data *d;
        if (!ag_dw.gelf_getshdr(scn, &sh) || sh.sh_type != SHT_DYNSYM || !(d = ag_dw.elf_getdata(scn, NULL)))
            continue;
        for (size_t i = 1; sh.sh_entsize && i < sh.sh_size / sh.sh_entsize; i++) {
            GElf_Sym sym;
            const char *nm;
            if (!ag_dw.gelf_getsym(d, (int)i, &sym) || GELF_ST_TYPE(sym.st_info) != STT_FUNC ||
                sym.st_shndx == SHN_UNDEF || !(nm = ag_dw.elf_strptr(elf, sh.sh_link, sym.st_name)) ||
                !*nm || !(nm = strdup(nm)))
                continue;
            sym_t *sy = add_sym(o, cap);
            if (!sy)
                break;
            sy->addr = sym.st_value;
            sy->end = sym.st_value + sym.st_size;
            sy->name = nm;
            sy->owned = 1;
        }
    }
    ag_dw.elf_end(elf);
}

/* Has the process more than max(AG_SYM_FD_RESERVE, RLIMIT_NOFILE/64) descriptors free? Its
 * open ones are counted with poll(), which flags a closed number POLLNVAL, in batches. A count
 * that found plenty (four times the reserve and 256 more) is trusted for 200 ms: the objects
 * named in one chunk are loaded one after another, each using a few descriptors for a moment,
 * and a process with a raised limit (redis-server: 10,032) paid 40 poll calls per object. */
static int fds_enough(uint64_t now) {
    static uint64_t plenty_until;
    struct rlimit rl;
    if (now < plenty_until || getrlimit(RLIMIT_NOFILE, &rl) != 0 ||
        rl.rlim_cur == RLIM_INFINITY)
        return 1;
    uint64_t lim = rl.rlim_cur, scan = lim < AG_SYM_FD_SCAN ? lim : AG_SYM_FD_SCAN;
    struct pollfd p[256];
    uint64_t open_n = 0;
    for (uint64_t base = 0; base < scan; base += 256) {
        int n = (int)(scan - base < 256 ? scan - base : 256);
        for (int i = 0; i < n; i++)
            p[i] = (struct pollfd){.fd = (int)(base + (uint64_t)i), .events = 0};
        if (poll(p, (nfds_t)n, 0) < 0)
            return 1;
        for (int i = 0; i < n; i++)
            open_n += !(p[i].revents & POLLNVAL);
    }
    uint64_t reserve = lim / 64 > AG_SYM_FD_RESERVE ? lim / 64 : AG_SYM_FD_RESERVE;
    if (open_n + 4 * reserve + 256 <= lim)
        plenty_until = now + 200000000ull;
    return open_n + reserve < lim;
}

static int cmp_line(const void *a, const void *b) {
    const line_t *x = a, *y = b;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    /* at one address an end of sequence first, so that the row starting there is the one
     * found; otherwise table order (kept by the index stashed in line while sorting) */
    int ex = x->file == UINT32_MAX, ey = y->file == UINT32_MAX;
    if (ex != ey)
        return ey - ex;
    return x->line < y->line ? -1 : x->line > y->line;
}

/* Interns a file name in o->files (linear probing on a table sized by the caller). */
static uint32_t intern_file(ag_object_t *o, uint32_t *tab, uint32_t tabsz, const char *f) {
    uint64_t h = 1469598103934665603ull;
    for (const char *c = f; *c; c++)
        h = (h ^ (uint8_t)*c) * 1099511628211ull;
    for (uint32_t i = (uint32_t)h & (tabsz - 1);; i = (i + 1) & (tabsz - 1)) {
        if (tab[i] == UINT32_MAX) {
            char *c = strdup(f);
            if (!c)
                return UINT32_MAX;
            o->files[o->nfiles] = c;
            tab[i] = o->nfiles;
            return o->nfiles++;
        }
        if (!strcmp(o->files[tab[i]], f))
            return tab[i];
    }
}

/* Copies the module's whole line table (what dwfl_module_getsrc would search, CU by CU). */
static void load_lines(ag_object_t *o, Dwfl_Module *mod) {
    size_t total = 0, nfiles = 0;
    Dwarf_Addr bias;
    for (Dwarf_Die *cu = NULL; (cu = ag_dw.dwfl_module_nextcu(mod, cu, &bias));) {
        size_t n = 0, nf = 0;
        Dwarf_Files *files;
        if (ag_dw.dwfl_getsrclines(cu, &n) == 0)
            total += n;
        if (ag_dw.dwarf_getsrcfiles(cu, &files, &nf) == 0)
            nfiles += nf;
    }
    if (!total || total > UINT32_MAX / 2)
        return;
    uint32_t tabsz = 16;
    while (tabsz < 2 * nfiles + 2)
        tabsz *= 2;
    uint32_t *tab = malloc(tabsz * sizeof *tab);
    o->files = malloc((nfiles + 1) * sizeof *o->files);
    o->lines = malloc(total * sizeof *o->lines);
    if (!tab || !o->files || !o->lines) {
        free(tab), free(o->files), free(o->lines);
        o->files = NULL, o->lines = NULL;
        return;
    }
    memset(tab, 0xff, tabsz * sizeof *tab);
    size_t k = 0;
    for (Dwarf_Die *cu = NULL; (cu = ag_dw.dwfl_module_nextcu(mod, cu, &bias));) {
        size_t n = 0;
        if (ag_dw.dwfl_getsrclines(cu, &n) != 0)
            continue;
        for (size_t i = 0; i < n && k < total; i++) {
            Dwfl_Line *l = ag_dw.dwfl_onesrcline(cu, i);
            Dwarf_Addr a, db;
            int ln = 0;
            bool end = false;
            const char *f = l ? ag_dw.dwfl_lineinfo(l, &a, &ln, NULL, NULL, NULL) : NULL;
            Dwarf_Line *dl = l ? ag_dw.dwfl_dwarf_line(l, &db) : NULL;
            if (!l || !dl || a < o->bias)
                continue;
            ag_dw.dwarf_lineendsequence(dl, &end);
            uint32_t fi = end ? UINT32_MAX : f && o->nfiles < nfiles + 1 ? intern_file(o, tab, tabsz, f) : UINT32_MAX;
            if (!end && fi == UINT32_MAX)
                continue;
            o->lines[k++] = (line_t){a - o->bias, fi, ln < 0 ? 0 : (uint32_t)ln};
        }
    }
    free(tab);
    /* stable by table order: sort (addr, kind, seq) with the row's index in line, then put
     * the lines back */
    uint32_t *ln = malloc(k * sizeof *ln + 1);
    if (!ln) {
        o->nlines = 0;
        return;
    }
    for (size_t i = 0; i < k; i++) {
        ln[i] = o->lines[i].line;
        o->lines[i].line = (uint32_t)i;
    }
    qsort(o->lines, k, sizeof *o->lines, cmp_line);
    for (size_t i = 0; i < k; i++)
        o->lines[i].line = ln[o->lines[i].line];
    free(ln);
    o->nlines = (uint32_t)k;
    line_t *shrunk = realloc(o->lines, k * sizeof *o->lines + 1);
    if (shrunk)
        o->lines = shrunk;
}

/* Whether no symbols are read for o now: the process is near RLIMIT_NOFILE (then for a second
 * none is tried), or there is no elfutils, or a foreign malloc forbids it (then never: o keeps
 * addresses only). */
static int syms_not_now(ag_object_t *o, uint64_t t0) {
    /* the application is near RLIMIT_NOFILE: not now, and for a second no load is tried
     * (counting the descriptors costs up to 256 poll calls); first, as loading elfutils
     * needs descriptors too */
    if (o->path && o->path[0] == '/' && (t0 < g_defer_until_ns || !fds_enough(t0))) {
        if (t0 >= g_defer_until_ns)
            g_defer_until_ns = t0 + 1000000000ull;
        g_stats.deferred++;
        return 1;
    }
    if (!g_dw_state) { /* elfutils: loaded by the first object to name (dwlib.c); a process
                        * with nothing to say (a short-lived child without a sample) cuts no
                        * chunk and never gets here */
        g_dw_state = ag_dwlib_load() ? 1 : -1;
        if (g_dw_state > 0) {
            g_callbacks.find_elf = ag_dw.dwfl_build_id_find_elf;
            g_callbacks.section_address = ag_dw.dwfl_offline_section_address;
        }
    }
    if (g_dw_state < 0) { /* no elfutils (reported once by dwlib.c): addresses only */
        o->syms_loaded = 1;
        g_stats.nolib++;
        return 1;
    }
    if (g_dw_state == 2) { /* a foreign malloc (ag_symbols_disable): addresses only */
        o->syms_loaded = 1;
        g_stats.foreign++;
        return 1;
    }
    return 0;
}

/* o's function symbols from its file (.symtab or .dynsym, through libdwfl; its PLT entries; its
 * lines when asked for). *dwfl: to end once the names are copied. 0, or -1 if the file could
 * not be reported. */
static int read_file_syms(ag_object_t *o, uint32_t *cap, Dwfl **dwfl) {
    if (!(*dwfl = ag_dw.dwfl_begin(&g_callbacks)))
        return -1;
    ag_dw.dwfl_report_begin(*dwfl);
    Dwfl_Module *mod = ag_dw.dwfl_report_elf(*dwfl, o->path, o->path, -1, o->bias, false);
    ag_dw.dwfl_report_end(*dwfl, NULL, NULL);
    if (!mod)
        return -1;
    GElf_Addr ebias = 0;
    Elf *main_elf = ag_dw.dwfl_module_getelf(mod, &ebias);
    int n = ag_dw.dwfl_module_getsymtab(mod);
    for (int i = 1; i < n; i++) {
        GElf_Sym sym;
        GElf_Addr addr, sbias = 0;
        GElf_Word shndx = 0;
        Elf *elf = NULL;
        const char *name = ag_dw.dwfl_module_getsym_info(mod, i, &sym, &addr, &shndx, &elf, &sbias);
        int type = GELF_ST_TYPE(sym.st_info);
        if (!name || !name[0] || (type != STT_FUNC && type != STT_GNU_IFUNC) ||
            sym.st_shndx == SHN_UNDEF || addr < o->bias || addr == 0)
            continue;
        sym_t *s = add_sym(o, cap);
        if (!s)
            break;
        s->addr = addr - o->bias;
        s->end = s->addr + sym.st_size;
        s->name = name;
        s->exported = GELF_ST_BIND(sym.st_info) != STB_LOCAL &&
                      GELF_ST_VISIBILITY(sym.st_other) == STV_DEFAULT;
        GElf_Shdr shdr;
        Elf_Scn *scn = elf && shndx != SHN_UNDEF && shndx < SHN_LORESERVE ? ag_dw.elf_getscn(elf, shndx)
                                                                          : NULL;
        if (scn && ag_dw.gelf_getshdr(scn, &shdr) && shdr.sh_addr + shdr.sh_size + sbias > o->bias)
            s->sec_end = shdr.sh_addr + shdr.sh_size + sbias - o->bias;
    }
    if (main_elf)
        add_plt(o, cap, main_elf, ebias);
    if (g_lines)
        load_lines(o, mod);
    return 0;
}

/* Sorted by address, one symbol an address (the exported name wins); returns the count. */
static uint32_t syms_dedupe(ag_object_t *o) {
    uint32_t k = o->nsyms;
    qsort(o->syms, k, sizeof *o->syms, cmp_sym);
    uint32_t m = 0;
    for (uint32_t i = 0; i < k; i++) {
        if (m == 0 || o->syms[m - 1].addr != o->syms[i].addr)
            o->syms[m++] = o->syms[i];
        else if (o->syms[i].exported && !o->syms[m - 1].exported &&
                 o->syms[i].end > o->syms[i].addr) {
            if (o->syms[m - 1].owned)
                free((char *)o->syms[m - 1].name);
            o->syms[m - 1] = o->syms[i]; /* the exported name of an address wins */
        } else if (o->syms[i].owned)
            free((char *)o->syms[i].name);
    }
    return m;
}

/* The m symbols: sizes for size-0 ones, then their names in one pool. */
static void syms_finish(ag_object_t *o, uint32_t m) {
    /* a size-0 symbol (hand-written assembly) covers up to the next symbol, within its section
     * (so _init, alone in .init, never swallows the static functions of a .dynsym-only .text) */
    for (uint32_t i = 0; i < m; i++) {
        sym_t *s = &o->syms[i];
        if (s->end != s->addr)
            continue;
        s->end = i + 1 < m ? o->syms[i + 1].addr : o->limit - o->bias;
        if (s->sec_end < s->end)
            s->end = s->sec_end;
    }
    /* the names move to one pool: libdwfl's strings go with dwfl_end */
    size_t bytes = 0;
    for (uint32_t i = 0; i < m; i++)
        bytes += strlen(o->syms[i].name) + 1;
    o->pool = malloc(bytes + 1);
    char *p = o->pool;
    uint32_t kept = 0;
    for (uint32_t i = 0; i < m; i++) {
        sym_t *s = &o->syms[i];
        if (p) {
            /* without its symbol version: libc's .symtab says clock_gettime@@GLIBC_2.17 where
             * .dynsym says clock_gettime, and one function must have one name */
            size_t l = cm_name_unversioned(s->name, p, strlen(s->name) + 1) + 1;
            if (s->owned)
                free((char *)s->name);
            s->name = p;
            s->owned = 0;
            p += l;
            o->syms[kept++] = *s;
        } else if (s->owned) { /* no memory for the pool: keep only our own names */
            o->syms[kept++] = *s;
        }
    }
    o->nsyms = kept;
    if (kept) {
        sym_t *shrunk = realloc(o->syms, kept * sizeof *o->syms);
        if (shrunk)
            o->syms = shrunk;
    }
}

static void load_syms(ag_object_t *o) {
    uint64_t t0 = ag_now_mono();
    if (syms_not_now(o, t0))
        return;
    o->syms_loaded = 1;
    uint32_t cap = 0;
    Dwfl *dwfl = NULL;
    if (!o->path || o->path[0] != '/') { /* no file: the vdso ("linux-vdso.so.1") */
        if (o->path && strstr(o->path, "vdso"))
            add_vdso(o, &cap);
        syms_finish(o, syms_dedupe(o));
    } else if (read_file_syms(o, &cap, &dwfl) == 0) {
        syms_finish(o, syms_dedupe(o));
    }
    if (dwfl)
        ag_dw.dwfl_end(dwfl); /* closes the module's descriptors and unmaps its files */
    g_stats.objects++;
    g_stats.symbols += o->nsyms;
    g_stats.load_ns += ag_now_mono() - t0;
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
    ag_loader_enter();
    dl_iterate_phdr(add_object, NULL);
    ag_loader_leave();
}

/* Issue 13: libdw, libelf and dlopen itself allocate through the global malloc, which a
 * program may define without locking (bgthread.c decides, ag_malloc_trusted): then no object
 * is opened and nothing is demangled; frames keep build id and file offset. */
void ag_symbols_disable(void) { g_dw_state = 2; }

void ag_symbols_init(void) {
    const char *v = ag_getenv("FLEETPROF_DEBUG_DIRS");
    if (v && *v)
        snprintf(g_debug_dirs, sizeof g_debug_dirs, "%s", v);
    v = ag_getenv("FLEETPROF_LINES");
    g_lines = v && (!strcmp(v, "1") || !strcmp(v, "on") || !strcmp(v, "true"));
    ag_dwlib_init();
    /* no object list yet: the first lookup misses and scans (a process that never samples
     * never pays for it) */
}

static ag_object_t *find_object(uintptr_t pc) {
    for (uint32_t i = g_nobjs; i-- > 0;) /* newest first: a reused range is the new object */
        if (pc >= g_objs[i]->start && pc < g_objs[i]->limit)
            return g_objs[i];
    return NULL;
}

int ag_symbols_in_object(uintptr_t pc) { return find_object(pc) != NULL; }

/* The demangled form of a linker name, or NULL when it is not mangled (C++ "_Z", Rust legacy
 * "_ZN...17h<hash>E", Rust v0 "_R") or libiberty cannot read it. malloc'ed. */
char *ag_demangle(const char *name) {
    if (!name || name[0] != '_' || (name[1] != 'Z' && name[1] != 'R'))
        return NULL;
    return cplus_demangle(name, DMGL_PARAMS | DMGL_ANSI | DMGL_AUTO);
}

/* The last row at or below pc, unless it ends a sequence (as dwfl_module_getsrc). */
static const char *line_of(ag_object_t *o, uint64_t file_addr, int *line) {
    size_t lo = CM_COUNT_LE(o->lines, o->nlines, addr, file_addr);
    if (!lo || o->lines[lo - 1].file == UINT32_MAX)
        return NULL;
    *line = (int)o->lines[lo - 1].line;
    return o->files[o->lines[lo - 1].file];
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
    uint64_t t0 = ag_now_mono();
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
    sym_t *s = lo ? &o->syms[lo - 1] : NULL;
    if (s && out->file_addr < s->end) {
        out->sysname = s->name;
        /* One of our interposers (malloc, writev...) at the leaf of a hooked call: name the
         * real function the application called, so no agent frame shows (record.c keeps only
         * the outermost agent frame of a stack's leading run). */
        if (ag_self_hi && pc - ag_self_lo < ag_self_hi - ag_self_lo) {
            if (!s->fwd_done) {
                s->fwd_done = 1;
                /* an exported interposer, or a part of one: split off by GCC ("malloc.cold")
                 * or a hook's slow half (hook_io.c, hook_alloc.c: "read.slow") */
                char base[128];
                const char *dot = strchr(out->sysname, '.');
                size_t len = dot ? (size_t)(dot - out->sysname) : strlen(out->sysname);
                int exported = s->exported;
                if (dot && len < sizeof base) {
                    memcpy(base, out->sysname, len);
                    base[len] = '\0';
                    for (uint32_t i = 0; i < o->nsyms && !exported; i++)
                        exported = o->syms[i].exported && !strcmp(o->syms[i].name, base);
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
            s->dem = ag_demangle(s->name);
        }
        out->name = s->dem ? s->dem : s->name;
        out->sym_id = lo; /* index + 1 */
        if (g_lines && o->nlines) {
            if (!s->file_done) {
                int l = 0;
                s->file_done = 1;
                s->file = line_of(o, s->addr, &l);
            }
            out->file = s->file;
        }
    }
    if (g_lines && o->nlines && (out->name || !o->nsyms)) {
        int l = 0;
        if (line_of(o, out->file_addr, &l))
            out->line = (uint32_t)l;
    }
    g_stats.lookups++;
    g_stats.lookup_ns += ag_now_mono() - t0;
}

void ag_symbols_stats(ag_symstats_t *st) { *st = g_stats; }

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
