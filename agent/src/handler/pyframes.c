/* CPython frames merged into native stacks.
 *
 * Supported: CPython 3.11 on x86-64 (Debian 12's /usr/bin/python3, or a libpython3.11.so the
 * program loads). Any other version: native frames only, one log line.
 *
 * Detection (bg, ag_py_tick): `Py_Version` and `_PyRuntime` found by dlsym in the process
 * (the interpreter's executable exports them; so does libpython). The structure offsets are
 * those of the 3.11 release build for x86-64 (the layout is fixed within 3.11.x: CPython
 * freezes its ABI at a minor release; checked against python3.11-dbg's DWARF by
 * tests/test-agent-python), verified at start-up against invariants before anything is read
 * in the handler: the main interpreter's `runtime` points back at `_PyRuntime`, and its first
 * thread state's `interp` points at the interpreter. _PyEval_EvalFrameDefault's extent comes
 * from its ELF symbol (dladdr1).
 *
 * Handler (ag_py_merge, async-signal-safe): when the native stack passes through
 * _PyEval_EvalFrameDefault, finds the thread's PyThreadState (a per-slot cache checked against
 * its native_thread_id; else a bounded walk of the main interpreter's thread list), then walks
 * tstate->cframe->current_frame's `previous` chain (at most AG_PY_MAX frames). Each
 * _PyInterpreterFrame gives its code object and instruction pointer; `is_entry` marks the
 * first frame a C activation of _PyEval_EvalFrameDefault ran, so the chain splits into one
 * group per activation, matched with the native activations from the root (the innermost
 * activation may not have pushed its frame yet). Each native _PyEval_EvalFrameDefault frame
 * is replaced by its group's Python frames, as py-spy --native shows them. A Python frame is
 * one pcs word: bit 63 set (no user-space pc has it), the code object's address >> 3 in bits
 * 0-43, the instruction index (code units) in bits 44-62. Every read of interpreter memory is
 * a process_vm_readv of the process itself: a bad pointer reads as EFAULT, never a fault. No
 * lock, no allocation. The thread being sampled is the one interrupted, so its own frame
 * chain does not move under the walk; other threads' frames are never read by the handler.
 *
 * Naming (bg, ag_py_name): reads the code object (type checked against &PyCode_Type: it may
 * have been freed since the sample), its co_qualname and co_filename (type checked, ASCII or
 * UTF-8/UCS), and its line table (3.11 location table) for the line of the instruction.
 * Frames that cannot be named are counted (ag_py_stats.unnamed) and named "[python?]".
 *
 * Knobs: FLEETPROF_PYTHON=0 turns it off (default on); FLEETPROF_PYTHON_HOOKS=1 also merges
 * Python frames into hook records (default off: their cost, see ag_py_merge_hook).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config.h"
#include "thread.h"
#include "cfi_table.h"
#include "pyframes.h"

#include "cm/log.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <string.h>
#include <sys/syscall.h>
#include <stdio.h>
#include <sys/uio.h>
#include <unistd.h>

#define NO_SAN __attribute__((no_sanitize("address", "thread", "undefined")))

#define AG_PY_MAX 128       /* Python frames read per sample */
#define MAX_EVALS 64        /* native activations considered per sample */
#define MAX_TSTATES 512     /* thread states walked looking for a thread's */

ag_py_stats_t ag_py_stats;

static _Atomic int g_on;               /* handler reads Python frames */
static int g_state;                    /* bg: 0 looking, 1 on, 2 given up */
static int g_enabled = 1;              /* FLEETPROF_PYTHON */
static int g_hooks;                    /* FLEETPROF_PYTHON_HOOKS: also in hook records */
static uint64_t g_publishes;           /* bg: ag_cfi_stats.publishes at the last look */
static int g_syms;                     /* bg: Py_Version and _PyRuntime found */
static uintptr_t g_runtime, g_eval_lo, g_eval_hi;
static uintptr_t g_code_type, g_str_type, g_bytes_type;
static _Atomic uintptr_t g_ts_cache[AG_MAX_THREADS]; /* slot -> its PyThreadState */

void ag_py_init(void) {
    g_enabled = ag_env_bool("FLEETPROF_PYTHON", 1);
    g_hooks = ag_env_bool("FLEETPROF_PYTHON_HOOKS", 0);
}

/* Hook records (allocations, lock and I/O waits) read the frame chain only when asked: a
 * blocking call is recorded on every keep-alive request of a Python server, and each read of a
 * ~15-frame chain is 15 process_vm_readv calls (+6 % CPU per request on bench/python's HTTP
 * server). Their native frames still show the interpreter. */
uint32_t ag_py_merge_hook(ag_thread_t *t, uintptr_t *pcs, uint32_t n, uint32_t max) {
    return g_hooks ? ag_py_merge(t, pcs, n, max) : n;
}

/* Fault-safe read of our own memory: 0 or -1 (unmapped, or the syscall refused). */
NO_SAN static int rd(pid_t pid, uintptr_t a, void *buf, size_t n) {
    struct iovec l = {buf, n}, r = {(void *)a, n};
    if (a < 4096)
        return -1;
    long got = syscall(SYS_process_vm_readv, pid, &l, 1UL, &r, 1UL, 0UL);
    if (got == (long)n)
        return 0;
    if (got < 0 && (errno == EPERM || errno == ENOSYS)) {
        atomic_store_explicit(&g_on, 0, memory_order_relaxed); /* seccomp, a sandbox */
        atomic_fetch_add_explicit(&ag_py_stats.denied, 1, memory_order_relaxed);
    }
    return -1;
}

NO_SAN static uintptr_t rdp(pid_t pid, uintptr_t a) {
    uintptr_t v = 0;
    return rd(pid, a, &v, sizeof v) == 0 ? v : 0;
}

#define U64(buf, off) (*(const uint64_t *)((const char *)(buf) + (off)))

/* The calling thread's PyThreadState, 0 if it has none. */
NO_SAN static uintptr_t find_tstate(pid_t pid, uint32_t slot, pid_t tid, uintptr_t interp) {
    uint64_t ts[PY311_TS_READ / 8];
    uintptr_t c = atomic_load_explicit(&g_ts_cache[slot], memory_order_relaxed);
    if (c && rd(pid, c, ts, sizeof ts) == 0 && U64(ts, PY311_TS_INTERP) == interp &&
        U64(ts, PY311_TS_NATIVE_TID) == (uint64_t)tid)
        return c;
    uintptr_t p = rdp(pid, interp + PY311_IS_THREADS_HEAD);
    for (int i = 0; p && i < MAX_TSTATES; i++) {
        if (rd(pid, p, ts, sizeof ts) != 0)
            break;
        if (U64(ts, PY311_TS_NATIVE_TID) == (uint64_t)tid) {
            atomic_store_explicit(&g_ts_cache[slot], p, memory_order_relaxed);
            return p;
        }
        p = U64(ts, PY311_TS_NEXT);
    }
    return 0;
}

/* Reads the thread's frame chain into py (leaf first) and the end of each activation's group
 * into gend (group k: py[gend[k-1] .. gend[k])). Returns the number of groups. */
NO_SAN static uint32_t read_chain(pid_t pid, uintptr_t tstate, uintptr_t *py, uint32_t *npy,
                                  uint32_t *gend) {
    uint32_t n = 0, g = 0;
    uintptr_t cf = rdp(pid, tstate + PY311_TS_CFRAME);
    uintptr_t f = cf ? rdp(pid, cf + PY311_CF_CURRENT) : 0;
    int open = 0;
    while (f && n < AG_PY_MAX && g < MAX_EVALS) {
        uint8_t b[PY311_IF_READ];
        if (rd(pid, f + PY311_IF_CODE, b, sizeof b) != 0 || (f & 7)) {
            atomic_fetch_add_explicit(&ag_py_stats.bad_chain, 1, memory_order_relaxed);
            break;
        }
        uintptr_t code = U64(b, 0), prev = U64(b, PY311_IF_PREVIOUS - PY311_IF_CODE);
        uintptr_t ip = U64(b, PY311_IF_PREV_INSTR - PY311_IF_CODE);
        int entry = b[PY311_IF_IS_ENTRY - PY311_IF_CODE] != 0;
        if (!code || (code & 7) || code >= (1ULL << 47))
            break;
        uint64_t lasti = ip >= code + PY311_CO_CODE ? (ip - code - PY311_CO_CODE) / 2 : 0;
        if (lasti >= (1ULL << 19))
            lasti = (1ULL << 19) - 1;
        py[n++] = AG_PY_TAG | lasti << 44 | code >> 3;
        open = 1;
        if (entry) {
            gend[g++] = n;
            open = 0;
        }
        f = prev;
    }
    if (open && g < MAX_EVALS)
        gend[g++] = n;
    *npy = n;
    return g;
}

NO_SAN uint32_t ag_py_merge(ag_thread_t *t, uintptr_t *pcs, uint32_t n, uint32_t max) {
    if (!atomic_load_explicit(&g_on, memory_order_relaxed))
        return n;
    uint32_t ev[MAX_EVALS], e = 0;
    for (uint32_t i = 0; i < n && e < MAX_EVALS; i++) {
        uintptr_t a = i ? pcs[i] - 1 : pcs[i];
        if (a - g_eval_lo < g_eval_hi - g_eval_lo)
            ev[e++] = i;
    }
    if (e == 0)
        return n; /* not in the interpreter */
    atomic_fetch_add_explicit(&ag_py_stats.samples, 1, memory_order_relaxed);
    int saved = errno;
    pid_t pid = (pid_t)syscall(SYS_getpid), tid = atomic_load_explicit(&t->tid,
                                                                        memory_order_relaxed);
    uint32_t slot = (uint32_t)(t - ag_threads);
    uintptr_t interp = rdp(pid, g_runtime + PY311_RT_INTERP_HEAD);
    uintptr_t ts = interp && slot < AG_MAX_THREADS ? find_tstate(pid, slot, tid, interp) : 0;
    uintptr_t py[AG_PY_MAX];
    uint32_t gend[MAX_EVALS], npy = 0, g = ts ? read_chain(pid, ts, py, &npy, gend) : 0;
    errno = saved;
    if (!ts)
        atomic_fetch_add_explicit(&ag_py_stats.no_tstate, 1, memory_order_relaxed);
    if (g == 0)
        return n;
    if (g != e)
        atomic_fetch_add_explicit(&ag_py_stats.mismatch, 1, memory_order_relaxed);
    /* Match from the root: native activation ev[e-1-j] <-> group g-1-j. */
    uintptr_t out[AG_MAX_DEPTH];
    uint32_t k = 0, j = 0; /* j: native activations passed, leaf first */
    for (uint32_t i = 0; i < n && k < max && k < AG_MAX_DEPTH; i++) {
        int is_eval = j < e && ev[j] == i;
        if (!is_eval) {
            out[k++] = pcs[i];
            continue;
        }
        uint32_t from_root = e - 1 - j++;
        if (from_root >= g) { /* no Python frames for this one (yet): the native frame */
            out[k++] = pcs[i];
            continue;
        }
        uint32_t gi = g - 1 - from_root, lo = gi ? gend[gi - 1] : 0;
        for (uint32_t q = lo; q < gend[gi] && k < max && k < AG_MAX_DEPTH; q++)
            out[k++] = py[q];
    }
    atomic_fetch_add_explicit(&ag_py_stats.merged, 1, memory_order_relaxed);
    for (uint32_t i = 0; i < k; i++)
        pcs[i] = out[i];
    return k;
}

/* ---- background thread ---- */

static void give_up(const char *why) {
    g_state = 2;
    CM_INFO("python frames off: %s (native frames only)", why);
}

static int has_libpython(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    (void)arg;
    return info->dlpi_name && strstr(info->dlpi_name, "libpython") != NULL;
}

/* A python executable or a libpython loaded: only then dlsym (a failed dlsym leaves the
 * thread a dlerror buffer, and a program that is not Python has no reason to pay a lookup). */
static int maybe_python(void) {
    static int exe = -1;
    if (exe < 0) {
        char path[256];
        ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
        path[n > 0 ? n : 0] = 0;
        const char *base = strrchr(path, '/');
        exe = !strncmp(base ? base + 1 : path, "python", 6);
    }
    return exe || dl_iterate_phdr(has_libpython, NULL);
}

/* One look for a supported interpreter; on when it is found and verified. */
static void look(void) {
    if (!maybe_python())
        return;
    const unsigned long *ver = dlsym(RTLD_DEFAULT, "Py_Version");
    void *rt = dlsym(RTLD_DEFAULT, "_PyRuntime");
    if (!ver && rt) {
        give_up("CPython older than 3.11 (no Py_Version)");
        return;
    }
    if (!ver || !rt)
        return; /* not (yet) a Python process */
    g_syms = 1;
    unsigned long v = *ver;
    if ((v >> 16) != 0x030b) {
        char why[96];
        snprintf(why, sizeof why, "CPython %lu.%lu is not supported (3.11 is)", v >> 24,
                 (v >> 16) & 0xff);
        give_up(why);
        return;
    }
    pid_t pid = getpid();
    uintptr_t interp = rdp(pid, (uintptr_t)rt + PY311_RT_INTERP_HEAD);
    if (!interp)
        return; /* the runtime is not initialised yet: look again on the next tick */
    uintptr_t ts = rdp(pid, interp + PY311_IS_THREADS_HEAD);
    if (rdp(pid, interp + PY311_IS_RUNTIME) != (uintptr_t)rt || (ts && rdp(pid, ts + PY311_TS_INTERP) != interp)) {
        give_up("CPython 3.11's structures are not where expected (another build?)");
        return;
    }
    void *eval = dlsym(RTLD_DEFAULT, "_PyEval_EvalFrameDefault");
    Dl_info info;
    const ElfW(Sym) *sym = NULL;
    if (!eval || !dladdr1(eval, &info, (void **)&sym, RTLD_DL_SYMENT) || !sym || !sym->st_size) {
        give_up("_PyEval_EvalFrameDefault has no symbol size");
        return;
    }
    g_code_type = (uintptr_t)dlsym(RTLD_DEFAULT, "PyCode_Type");
    g_str_type = (uintptr_t)dlsym(RTLD_DEFAULT, "PyUnicode_Type");
    g_bytes_type = (uintptr_t)dlsym(RTLD_DEFAULT, "PyBytes_Type");
    if (!g_code_type || !g_str_type || !g_bytes_type) {
        give_up("CPython's type objects are not exported");
        return;
    }
    g_runtime = (uintptr_t)rt;
    g_eval_lo = (uintptr_t)eval;
    g_eval_hi = g_eval_lo + sym->st_size;
    g_state = 1;
    atomic_store(&g_on, 1);
    CM_INFO("python frames on: CPython %lu.%lu.%lu", v >> 24, (v >> 16) & 0xff, (v >> 8) & 0xff);
}

void ag_py_tick(void) {
    if (!g_enabled || g_state != 0)
        return;
    /* look again only when objects were loaded (a libpython dlopen'ed), or, once the symbols
     * are found, on every tick until the runtime is initialised */
    uint64_t p = atomic_load_explicit(&ag_cfi_stats.publishes, memory_order_relaxed);
    if (p == g_publishes && !g_syms && g_publishes)
        return;
    g_publishes = p;
    look();
}

int ag_py_on(void) { return atomic_load(&g_on); }

/* A str object into buf (UTF-8, NUL-terminated). 0 or -1. */
static int read_str(pid_t pid, uintptr_t o, char *buf, size_t size) {
    uint8_t h[PY311_UO_DATA];
    if (!o || rd(pid, o, h, sizeof h) != 0 || U64(h, PY311_CO_TYPE) != g_str_type)
        return -1;
    uint32_t state = *(const uint32_t *)(h + PY311_UO_STATE);
    unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
    uint64_t len = U64(h, PY311_UO_LENGTH);
    if (!compact)
        return -1;
    if (ascii || (U64(h, PY311_UO_UTF8) && U64(h, PY311_UO_UTF8_LEN) < size)) {
        uintptr_t at = ascii ? o + PY311_UO_ASCII_DATA : U64(h, PY311_UO_UTF8);
        size_t n = ascii ? len : U64(h, PY311_UO_UTF8_LEN);
        if (n >= size)
            n = size - 1;
        if (rd(pid, at, buf, n) != 0)
            return -1;
        buf[n] = 0;
        return 0;
    }
    if (kind != 1 && kind != 2 && kind != 4)
        return -1;
    size_t k = 0;
    for (uint64_t i = 0; i < len && k + 5 < size; i++) {
        uint32_t c = 0;
        if (rd(pid, o + PY311_UO_DATA + i * kind, &c, kind) != 0)
            return -1;
        if (c < 0x80) {
            buf[k++] = (char)c;
        } else if (c < 0x800) {
            buf[k++] = (char)(0xc0 | c >> 6);
            buf[k++] = (char)(0x80 | (c & 63));
        } else if (c < 0x10000) {
            buf[k++] = (char)(0xe0 | c >> 12);
            buf[k++] = (char)(0x80 | ((c >> 6) & 63));
            buf[k++] = (char)(0x80 | (c & 63));
        } else {
            buf[k++] = (char)(0xf0 | c >> 18);
            buf[k++] = (char)(0x80 | ((c >> 12) & 63));
            buf[k++] = (char)(0x80 | ((c >> 6) & 63));
            buf[k++] = (char)(0x80 | (c & 63));
        }
    }
    buf[k] = 0;
    return 0;
}

int ag_py_name(uintptr_t word, ag_py_frame_t *out) {
    uintptr_t code = (word & ((1ULL << 44) - 1)) << 3;
    uint32_t lasti = (uint32_t)((word >> 44) & ((1u << 19) - 1));
    pid_t pid = getpid();
    uint8_t co[PY311_CO_READ];
    out->line = 0;
    if (rd(pid, code, co, sizeof co) != 0 || U64(co, PY311_CO_TYPE) != g_code_type ||
        read_str(pid, U64(co, PY311_CO_QUALNAME), out->name, sizeof out->name) != 0 ||
        read_str(pid, U64(co, PY311_CO_FILENAME), out->file, sizeof out->file) != 0) {
        ag_py_stats.unnamed++;
        snprintf(out->name, sizeof out->name, "[python?]");
        out->file[0] = 0;
        return -1;
    }
    int first = *(const int32_t *)(co + PY311_CO_FIRSTLINE);
    uintptr_t lt = U64(co, PY311_CO_LINETABLE);
    uint8_t bh[PY311_BY_DATA];
    if (lt && rd(pid, lt, bh, sizeof bh) == 0 && U64(bh, PY311_CO_TYPE) == g_bytes_type &&
        U64(bh, PY311_BY_SIZE) <= (64u << 10)) {
        static uint8_t table[64u << 10];
        size_t len = U64(bh, PY311_BY_SIZE);
        if (rd(pid, lt + PY311_BY_DATA, table, len) == 0) {
            int line = ag_py_line(table, len, first, lasti);
            out->line = line > 0 ? (uint32_t)line : (first > 0 ? (uint32_t)first : 0);
        }
    }
    ag_py_stats.named++;
    return 0;
}
