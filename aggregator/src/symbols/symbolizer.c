/* Server-side symbolization: frames that arrived without a function name (stripped binaries
 * whose hosts have no debug files) are named by build id through debuginfod.
 *
 * For each build id asked, once: elfutils' libdebuginfod client fetches the debug file
 * (DEBUGINFOD_URLS or the configured servers; downloads are kept in debuginfod's cache
 * directory, so a restart reads them from disk), libdwfl opens it and we keep its function
 * symbols sorted by address (a symbol covers [value, value + size); a size-0 one up to the
 * next) plus the module for .debug_line. Names are demangled with libiberty's cplus_demangle.
 * A build id that cannot be fetched (unknown to the servers, server down or slow) is negative-
 * cached for retry_s here, on top of debuginfod's own negative cache; each download is bounded
 * by timeout_s (a progress callback aborts it), and a failure other than "no such file" (down,
 * unreachable, too slow) stops every request for retry_s, so a query waits at most one
 * timeout per retry period however many unnamed binaries it shows.
 *
 * Hostile input: build ids come from chunk senders and files from servers that may
 * be reached over plain http. A debug file larger than max_size is refused (the
 * X-DEBUGINFOD-MAXSIZE header, as DEBUGINFOD_MAXSIZE would send it, set per client: no setenv
 * at run time, which races getenv in librdkafka's and libdebuginfod's threads) for the
 * server, the progress callback for one that does not say its size, the file's size for one
 * already cached); the files kept open (fd and mmap each) total at most cache_bytes,
 * and at most MAX_ENTRIES build ids are remembered: past either bound the least recently used
 * are closed and their downloads deleted; DIE walks are bounded in depth (descend).
 *
 * Threading: one mutex around the table; never held during a download. A download runs on the
 * asking thread with a client of its own; the entry is marked fetching, and other askers of
 * that build id wait for it (g_cv), while every other lookup goes on. Lookups in memory take
 * well under a microsecond. Entries are allocated one by one (pointers stay valid) and pinned
 * (users) while a thread waits on or reads them.
 */
#define _GNU_SOURCE
#include "symbolizer.h"

#include "cm/array.h"
#include "cm/error.h"
#include "cm/log.h"

#include <elfutils/debuginfod.h>
#include <errno.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <libiberty/demangle.h>
#include <pthread.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_BID 64
#define MAX_ENTRIES 4096 /* build ids remembered (named or negative) */

typedef struct {
    uint64_t addr, end;
    const char *name; /* owned by the dwfl module */
} ssym_t;

typedef struct {
    uint8_t bid[MAX_BID];
    size_t bid_len;
    int ok;            /* 1: symbols loaded */
    int fetching;      /* a thread is downloading it (without g_mu) */
    int users;         /* threads waiting on or reading it: not evicted */
    uint64_t retry_ns; /* !ok: do not ask before this time */
    uint64_t used_ns;  /* last lookup (least recently used goes first) */
    uint64_t bytes;    /* ok: size of the debug file kept open */
    char *path;        /* ok: the download in debuginfod's cache */
    Dwfl *dwfl;
    Dwfl_Module *mod;
    ssym_t *syms;
    size_t nsyms;
} entry_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER; /* a fetch ended */
static int g_on;
static agg_symbolizer_cfg_t g_cfg;
static char *g_urls, *g_cache;
static entry_t **g_ents;
static size_t g_n, g_cap;
static uint64_t g_open_bytes; /* sum of bytes of the ok entries */
static agg_symbolizer_stats_t g_stats;
static uint64_t g_down_until_ns; /* the servers failed (not "no such file"): ask none until */

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

typedef struct {
    uint64_t deadline_ns;
    int too_big;
} fetch_ctx_t;

/* libdebuginfod's progress callback: a bytes received so far, b the size when the server said
 * it. Nonzero aborts the transfer: past the deadline, or past max_size (a server that does not
 * announce the size is not checked by DEBUGINFOD_MAXSIZE). */
static int progress(debuginfod_client *c, long a, long b) {
    fetch_ctx_t *x = debuginfod_get_user_data(c);
    if ((a > 0 && (uint64_t)a > g_cfg.max_size) || (b > 0 && (uint64_t)b > g_cfg.max_size))
        x->too_big = 1; /* b is -1 or 0 when the size is unknown */
    return x->too_big || now_ns() > x->deadline_ns;
}

int agg_symbolizer_init(const agg_symbolizer_cfg_t *cfg) {
    pthread_mutex_lock(&g_mu);
    int rc = 0;
    g_cfg = *cfg;
    if (g_cfg.timeout_s <= 0)
        g_cfg.timeout_s = 5;
    if (g_cfg.retry_s <= 0)
        g_cfg.retry_s = 60;
    if (!g_cfg.max_size)
        g_cfg.max_size = AGG_SYMBOLIZER_MAX_SIZE;
    if (!g_cfg.cache_bytes)
        g_cfg.cache_bytes = AGG_SYMBOLIZER_CACHE_BYTES;
    const char *urls = cfg->urls && *cfg->urls ? cfg->urls : getenv("DEBUGINFOD_URLS");
    if (!urls || !*urls)
        goto out;
    /* libdebuginfod reads these from the environment at each request */
    g_urls = strdup(urls);
    setenv("DEBUGINFOD_URLS", urls, 1);
    if (cfg->cache_dir && *cfg->cache_dir) {
        g_cache = strdup(cfg->cache_dir);
        setenv("DEBUGINFOD_CACHE_PATH", cfg->cache_dir, 1);
    }
    char t[32];
    snprintf(t, sizeof t, "%d", (int)(g_cfg.timeout_s + 0.999));
    setenv("DEBUGINFOD_TIMEOUT", t, 1);
    /* the size bound goes per client, as the header DEBUGINFOD_MAXSIZE would make (fetch):
     * nothing here may change after threads that call getenv run */
    debuginfod_client *probe = debuginfod_begin();
    if (!probe) {
        CM_WARN("symbolizer: debuginfod_begin failed: server-side symbolization off");
        rc = CM_ENOMEM;
        goto out;
    }
    debuginfod_end(probe);
    g_on = 1;
    CM_INFO("symbolizer: debuginfod %s (timeout %.1fs, retry after %.0fs, files up to %llu "
            "bytes, %llu bytes kept open)", urls, g_cfg.timeout_s, g_cfg.retry_s,
            (unsigned long long)g_cfg.max_size, (unsigned long long)g_cfg.cache_bytes);
out:
    pthread_mutex_unlock(&g_mu);
    return rc;
}

/* Closes e's debug file and forgets its symbols (g_mu held; e not in use). */
static void entry_close(entry_t *e) {
    free(e->syms);
    if (e->dwfl)
        dwfl_end(e->dwfl);
    free(e->path);
    if (e->ok)
        g_open_bytes -= e->bytes;
    e->syms = NULL;
    e->dwfl = NULL;
    e->mod = NULL;
    e->path = NULL;
    e->nsyms = 0;
    e->bytes = 0;
    e->ok = 0;
}

void agg_symbolizer_shutdown(void) {
    pthread_mutex_lock(&g_mu);
    for (size_t i = 0; i < g_n; i++) {
        entry_close(g_ents[i]);
        free(g_ents[i]);
    }
    free(g_ents);
    g_ents = NULL;
    g_n = g_cap = 0;
    g_open_bytes = 0;
    free(g_urls);
    free(g_cache);
    g_urls = g_cache = NULL;
    g_on = 0;
    g_down_until_ns = 0;
    memset(&g_stats, 0, sizeof g_stats);
    pthread_mutex_unlock(&g_mu);
}

int agg_symbolizer_enabled(void) {
    pthread_mutex_lock(&g_mu);
    int on = g_on;
    pthread_mutex_unlock(&g_mu);
    return on;
}

static int cmp_ssym(const void *a, const void *b) {
    const ssym_t *x = a, *y = b;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    return (x->end == x->addr) - (y->end == y->addr);
}

static char *g_dbgpath;
static const Dwfl_Callbacks g_cb = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = &g_dbgpath,
};

/* Opens the debug file on fd and reads its function symbols into e. Returns 0 or -1. */
static int load(entry_t *e, int fd, const char *path) {
    if (!(e->dwfl = dwfl_begin(&g_cb)))
        return -1;
    dwfl_report_begin(e->dwfl);
    e->mod = dwfl_report_elf(e->dwfl, path, path, fd, 0, false);
    dwfl_report_end(e->dwfl, NULL, NULL);
    if (!e->mod)
        return -1;
    int n = dwfl_module_getsymtab(e->mod);
    if (n <= 0 || !(e->syms = malloc((size_t)n * sizeof *e->syms)))
        return -1;
    size_t k = 0;
    for (int i = 1; i < n; i++) {
        GElf_Sym sym;
        GElf_Addr addr;
        const char *name = dwfl_module_getsym_info(e->mod, i, &sym, &addr, NULL, NULL, NULL);
        int type = GELF_ST_TYPE(sym.st_info);
        if (!name || !*name || (type != STT_FUNC && type != STT_GNU_IFUNC) ||
            sym.st_shndx == SHN_UNDEF || addr == 0)
            continue;
        e->syms[k++] = (ssym_t){addr, addr + sym.st_size, name};
    }
    qsort(e->syms, k, sizeof *e->syms, cmp_ssym);
    size_t m = 0;
    for (size_t i = 0; i < k; i++)
        if (m == 0 || e->syms[m - 1].addr != e->syms[i].addr)
            e->syms[m++] = e->syms[i];
    for (size_t i = 0; i < m; i++)
        if (e->syms[i].end == e->syms[i].addr && i + 1 < m)
            e->syms[i].end = e->syms[i + 1].addr;
    e->nsyms = m;
    return 0;
}

/* The least recently used entry other than keep that no thread uses (ok ones only when
 * open_only), or NULL. */
static entry_t *lru(const entry_t *keep, int open_only) {
    entry_t *best = NULL;
    for (size_t i = 0; i < g_n; i++) {
        entry_t *e = g_ents[i];
        if (e == keep || e->users || e->fetching || (open_only && !e->ok))
            continue;
        if (!best || e->used_ns < best->used_ns)
            best = e;
    }
    return best;
}

/* Closes e and deletes its download (g_mu held): asked again, it is fetched again. */
static void evict_files(entry_t *e) {
    if (e->path && g_cache && !strncmp(e->path, g_cache, strlen(g_cache))) {
        unlink(e->path);
        char *dir = strdup(e->path);
        if (dir)
            rmdir(dirname(dir)); /* <cache>/<build id>/, when empty */
        free(dir);
    }
    entry_close(e);
    g_stats.evicted++;
}

/* Removes entry e from the table and frees it (g_mu held, e not in use). */
static void entry_drop(entry_t *e) {
    for (size_t i = 0; i < g_n; i++)
        if (g_ents[i] == e) {
            g_ents[i] = g_ents[--g_n];
            break;
        }
    if (e->ok)
        evict_files(e);
    else
        entry_close(e);
    free(e);
}

/* The entry of a build id, added when new (past MAX_ENTRIES the least recently used goes).
 * A linear scan: at most MAX_ENTRIES build ids of 20 bytes, a few microseconds at worst. */
static entry_t *get_entry(const uint8_t *bid, size_t bl) {
    for (size_t i = 0; i < g_n; i++)
        if (g_ents[i]->bid_len == bl && !memcmp(g_ents[i]->bid, bid, bl))
            return g_ents[i];
    entry_t *old = g_n >= MAX_ENTRIES ? lru(NULL, 0) : NULL;
    if (old)
        entry_drop(old);
    if (g_n == g_cap) {
        size_t nc = g_cap ? 2 * g_cap : 64;
        entry_t **ne = realloc(g_ents, nc * sizeof *ne);
        if (!ne)
            return NULL;
        g_ents = ne;
        g_cap = nc;
    }
    entry_t *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    memcpy(e->bid, bid, bl);
    e->bid_len = bl;
    g_ents[g_n++] = e;
    return e;
}

/* Downloads and loads the debug file of e's build id into f (g_mu NOT held: e is marked
 * fetching, no other thread touches it). Returns 0, -ENOENT (no server has it), -EFBIG (larger
 * than max_size), or another negative errno (down, unreachable, too slow). */
static int fetch(const entry_t *e, entry_t *f) {
    debuginfod_client *c = debuginfod_begin();
    if (!c)
        return -ENOMEM;
    fetch_ctx_t ctx = {now_ns() + (uint64_t)(g_cfg.timeout_s * 1e9), 0};
    debuginfod_set_user_data(c, &ctx);
    debuginfod_set_progressfn(c, progress);
    char maxsize[64]; /* the server refuses a larger file, or says its size first */
    snprintf(maxsize, sizeof maxsize, "X-DEBUGINFOD-MAXSIZE: %llu",
             (unsigned long long)g_cfg.max_size);
    debuginfod_add_http_header(c, maxsize);
    char *path = NULL;
    int fd = debuginfod_find_debuginfo(c, e->bid, (int)e->bid_len, &path);
    debuginfod_end(c);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_size > g_cfg.max_size)
        ctx.too_big = 1; /* cached before the bound was lowered, or a server ignoring it */
    if (ctx.too_big || fd == -EFBIG) {
        if (fd >= 0)
            close(fd);
        if (path && g_cache && !strncmp(path, g_cache, strlen(g_cache)))
            unlink(path);
        free(path);
        return -EFBIG;
    }
    if (fd < 0) {
        free(path);
        return fd;
    }
    f->path = path;
    f->bytes = (uint64_t)st.st_size;
    if (load(f, fd, path) != 0) {
        if (!f->dwfl)
            close(fd);
        return -EINVAL;
    }
    return 0;
}

/* Asks the servers for e (g_mu held on entry and on return; released during the download),
 * then keeps the open files within cache_bytes. */
static void fetch_entry(entry_t *e) {
    uint64_t t0 = now_ns();
    g_stats.fetches++;
    e->fetching = 1;
    pthread_mutex_unlock(&g_mu);
    entry_t f = {0};
    int rc = fetch(e, &f);
    pthread_mutex_lock(&g_mu);
    e->fetching = 0;
    pthread_cond_broadcast(&g_cv);
    g_stats.fetch_ns += now_ns() - t0;
    if (rc == 0) {
        e->dwfl = f.dwfl;
        e->mod = f.mod;
        e->syms = f.syms;
        e->nsyms = f.nsyms;
        e->path = f.path;
        e->bytes = f.bytes;
        e->ok = 1;
        g_open_bytes += e->bytes;
        for (entry_t *v; g_open_bytes > g_cfg.cache_bytes && (v = lru(e, 1));)
            evict_files(v);
        return;
    }
    f.ok = 0;
    entry_close(&f);
    char hex[2 * MAX_BID + 1];
    for (size_t i = 0; i < e->bid_len; i++)
        snprintf(hex + 2 * i, 3, "%02x", e->bid[i]);
    CM_WARN("symbolizer: no debug file for build id %s: %s (next try in %.0fs)", hex,
            rc == -EFBIG ? "larger than debuginfod-max-size" : rc == -EINVAL ? "unreadable"
                                                                 : strerror(-rc),
            g_cfg.retry_s);
    g_stats.fetch_fail++;
    g_stats.too_big += rc == -EFBIG;
    e->retry_ns = now_ns() + (uint64_t)(g_cfg.retry_s * 1e9);
    /* down, unreachable or too slow (anything but "the servers have no such file" or "too
     * large"): no other build id asks them before retry_s either, so one query waits at most
     * one timeout however many binaries it shows (a transfer cut at the deadline says ENOENT) */
    if (rc != -EFBIG && rc != -EINVAL &&
        (rc != -ENOENT || now_ns() - t0 >= (uint64_t)(0.8 * g_cfg.timeout_s * 1e9)))
        g_down_until_ns = e->retry_ns;
}

/* A DIE's function name: its linkage name demangled, else its name (both through its
 * abstract origin, for an inlined instance). malloc'ed or NULL. */
static char *die_fn_name(Dwarf_Die *die) {
    Dwarf_Attribute a;
    const char *ln = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &a));
    if (!ln)
        ln = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a));
    if (ln && ln[0] == '_' && (ln[1] == 'Z' || ln[1] == 'R')) {
        char *dem = cplus_demangle(ln, DMGL_PARAMS | DMGL_ANSI | DMGL_AUTO);
        if (dem)
            return dem;
    }
    const char *n = dwarf_diename(die);
    return n ? strdup(n) : ln ? strdup(ln) : NULL;
}

/* Appends "name\tfile\tline\n" to the growing string *buf. Returns 0 or -1. */
static int chain_add(char **buf, size_t *len, const char *name, const char *file, int line) {
    size_t add = strlen(name) + (file ? strlen(file) : 0) + 16;
    char *nb = realloc(*buf, *len + add + 1);
    if (!nb)
        return -1;
    *buf = nb;
    *len += (size_t)snprintf(nb + *len, add + 1, "%s\t%s\t%d\n", name, file ? file : "",
                             line > 0 ? line : 0);
    return 0;
}

#define MAX_SCOPES 64
#define MAX_NEST 64 /* namespaces and classes nested in one another that descend enters */

/* The scopes containing pc below parent into path[n..] (outermost first); returns the new
 * count. Only the DIEs that can hold code are entered (functions, inlined instances, blocks;
 * namespaces and classes for C++ member functions), so a lookup reads the top-level DIEs of
 * its CU and the children of the scopes on its way down, not the whole CU as dwarf_getscopes
 * does (which cost ~2.6 ms per address on python3's debug file). The recursion is bounded:
 * MAX_SCOPES scopes, and at most MAX_NEST namespaces/classes (nest) around each, so a debug
 * file with a million nested namespaces cannot exhaust the stack. */
static int descend(Dwarf_Die *parent, Dwarf_Addr pc, Dwarf_Die *path, int n, int nest) {
    Dwarf_Die child;
    if (n >= MAX_SCOPES || dwarf_child(parent, &child) != 0)
        return n;
    do {
        int tag = dwarf_tag(&child);
        if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine ||
            tag == DW_TAG_lexical_block) {
            if (dwarf_haspc(&child, pc) == 1) {
                path[n] = child;
                return descend(&path[n], pc, path, n + 1, 0);
            }
        } else if ((tag == DW_TAG_namespace || tag == DW_TAG_class_type ||
                    tag == DW_TAG_structure_type || tag == DW_TAG_module) &&
                   nest < MAX_NEST) {
            int m = descend(&child, pc, path, n, nest + 1);
            if (m > n)
                return m;
        }
    } while (dwarf_siblingof(&child, &child) == 0);
    return n;
}

/* The inlined frames at addr (see agg_sym_t.chain), from the scopes containing it (descend):
 * each DW_TAG_inlined_subroutine from the innermost out, then the subprogram (named outer,
 * the symbol's name); the innermost at addr's own line, each caller at the call site
 * (DW_AT_call_file/line) of the frame inlined into it. NULL when nothing is inlined. */
static char *inline_chain(entry_t *e, uint64_t addr, const char *file, int line,
                          const char *outer) {
    Dwarf_Addr bias = 0;
    Dwarf_Die *cu = dwfl_module_addrdie(e->mod, addr, &bias);
    Dwarf_Die path[MAX_SCOPES], scopes[MAX_SCOPES];
    int n = cu ? descend(cu, addr - bias, path, 0, 0) : 0;
    for (int i = 0; i < n; i++) /* innermost first */
        scopes[i] = path[n - 1 - i];
    int ninl = 0;
    for (int i = 0; i < n; i++) {
        int tag = dwarf_tag(&scopes[i]);
        if (tag == DW_TAG_subprogram)
            break;
        ninl += tag == DW_TAG_inlined_subroutine;
    }
    char *buf = NULL;
    size_t len = 0;
    Dwarf_Files *files = NULL;
    size_t nfiles = 0;
    if (ninl && dwarf_getsrcfiles(cu, &files, &nfiles) != 0)
        files = NULL;
    for (int i = 0; ninl && i < n; i++) {
        int tag = dwarf_tag(&scopes[i]);
        if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram)
            continue;
        char *nm = tag == DW_TAG_subprogram ? NULL : die_fn_name(&scopes[i]);
        int bad = chain_add(&buf, &len, nm ? nm : tag == DW_TAG_subprogram ? outer : "??", file,
                            line);
        free(nm);
        if (bad) {
            free(buf);
            buf = NULL;
            break;
        }
        if (tag == DW_TAG_subprogram)
            break;
        Dwarf_Attribute a;
        Dwarf_Word v;
        file = NULL;
        line = 0;
        if (files && dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_file, &a), &v) == 0)
            file = dwarf_filesrc(files, v, NULL, NULL);
        if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_line, &a), &v) == 0)
            line = (int)v;
    }
    return buf;
}

void agg_sym_free(agg_sym_t *s) {
    if (!s)
        return;
    free(s->name);
    free(s->file);
    free(s->chain);
    memset(s, 0, sizeof *s);
}

int agg_symbolize(const uint8_t *build_id, size_t bid_len, uint64_t addr, agg_sym_t *out) {
    memset(out, 0, sizeof *out);
    if (!build_id || bid_len == 0 || bid_len > MAX_BID)
        return -1;
    pthread_mutex_lock(&g_mu);
    int rc = -1;
    entry_t *e = NULL;
    if (!g_on)
        goto out;
    g_stats.lookups++;
    if (!(e = get_entry(build_id, bid_len)))
        goto out;
    e->users++;
    while (e->fetching) /* another thread downloads it: wait for that, not for others */
        pthread_cond_wait(&g_cv, &g_mu);
    e->used_ns = now_ns();
    if (!e->ok) {
        uint64_t now = now_ns();
        if ((e->retry_ns && now < e->retry_ns) || now < g_down_until_ns) {
            g_stats.neg_hits++;
            goto out;
        }
        fetch_entry(e);
        if (!e->ok)
            goto out;
    }
    rc = 0; /* the debug file is there: from here on, "no symbol at this address" */
    size_t lo = CM_COUNT_LE(e->syms, e->nsyms, addr, addr);
    if (lo == 0 || addr >= e->syms[lo - 1].end)
        goto out;
    const char *sys = e->syms[lo - 1].name;
    char *dem = NULL;
    if (sys[0] == '_' && (sys[1] == 'Z' || sys[1] == 'R'))
        dem = cplus_demangle(sys, DMGL_PARAMS | DMGL_ANSI | DMGL_AUTO);
    out->name = dem ? dem : strdup(sys);
    if (!out->name) {
        rc = -1; /* out of memory: not an answer to keep */
        goto out;
    }
    Dwfl_Line *l = dwfl_module_getsrc(e->mod, addr);
    if (l) {
        int ln = 0;
        const char *f = dwfl_lineinfo(l, NULL, &ln, NULL, NULL, NULL);
        if (f)
            out->file = strdup(f);
        if (ln > 0)
            out->line = (uint32_t)ln;
    }
    out->chain = inline_chain(e, addr, out->file, (int)out->line, out->name);
    g_stats.named++;
    rc = 1;
out:
    if (e)
        e->users--;
    pthread_mutex_unlock(&g_mu);
    return rc;
}

void agg_symbolizer_stats(agg_symbolizer_stats_t *st) {
    pthread_mutex_lock(&g_mu);
    *st = g_stats;
    pthread_mutex_unlock(&g_mu);
}
