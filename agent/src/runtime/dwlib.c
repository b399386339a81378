/* elfutils' libdw and libelf, loaded on first need rather than linked ("do no harm").
 *
 * LD_PRELOAD is inherited: every program a profiled process execs loads the agent, and every
 * library in the agent's NEEDED list is opened, mapped and relocated in it before main, whether
 * or not it ever takes a sample. libdw pulls in libelf, libz, liblzma and libbz2: +0.36 ms of
 * CPU per exec of /bin/true on the reference box (bench-spawn), most of what the agent cost a
 * short-lived child. Only the symbolizer (symbols.c, background thread) needs them, and only
 * once there is a sample to name; so the first ag_dwlib_load dlopens libdw.so.1 (or
 * FLEETPROF_LIBDW), which brings libelf, with RTLD_LOCAL (nothing of theirs enters the
 * program's global scope; a program that links its own elfutils keeps its own), and resolves
 * every function once into ag_dw.
 *
 * If they cannot be loaded (not installed, a stripped-down container, a seccomp/namespace
 * that hides them, or a symbol missing from an old version), frames stay addresses (with
 * their object's build id and offset: the aggregator can still name them), one line says so
 * on stderr, and symbols.c counts the lookups left unnamed (ag_symstats_t.nolib).
 *
 * Not loaded at all when the program's malloc is one the agent's thread may not call (issue 13:
 * libdw, libelf and dlopen allocate through the global malloc; bgthread.c decides with
 * ag_malloc_trusted, symbols.c then names nothing).
 *
 * Thread: background thread only (symbols.c), under bgthread.c's work lock. Never called from
 * a signal handler (dlopen takes the loader's lock and allocates).
 */
#include "lazylibs.h"
#include "config.h"
#include "loader_gate.h"

#include "cm/log.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

ag_dwlib_t ag_dw;
static int g_state; /* 0: not tried, 1: loaded, -1: unavailable */
static char g_path[1024] = "libdw.so.1";

void ag_dwlib_init(void) {
    /* FLEETPROF_LIBDW: another libdw (e.g. a newer elfutils under /opt); the libelf it needs
     * comes with it (its NEEDED), and dlsym on its handle searches both. Read here, in the
     * constructor: the environment is not the bg thread's to read (setenv races getenv). */
    const char *v = ag_getenv("FLEETPROF_LIBDW"); /* NULL under AT_SECURE */
    if (v && *v)
        snprintf(g_path, sizeof g_path, "%s", v);
}

static int load(void) {
    if (g_state)
        return g_state > 0;
    g_state = -1;
    void *dw = dlopen(g_path, RTLD_NOW | RTLD_LOCAL);
    if (!dw) {
        const char *e = dlerror();
        CM_WARN("cannot load elfutils (%s): frames stay addresses in this process's profile "
                "(the aggregator can still name them by build id)", e ? e : g_path);
        return 0;
    }
#define AG_DW_RESOLVE(f)                                                                    \
    if (!(ag_dw.f = (__typeof__(f) *)dlsym(dw, #f))) {                                      \
        CM_WARN("%s has no %s: frames stay addresses in this process's profile", g_path, #f); \
        return 0;                                                                           \
    }
    AG_DW_FUNCS(AG_DW_RESOLVE)
#undef AG_DW_RESOLVE
    /* libdw and libelf keep their error codes in thread-local variables. A thread's first
     * access to a dlopened object's TLS decides its placement under ld.so's TLS lock
     * (glibc's tls_get_addr_tail): made later, outside the gate, a _Fork landing there would
     * leave that lock held in the child, whose pthread_create then waits for it forever. So
     * the first access of each object is made here, inside the gate: one errno read each
     * (both merely return and clear the thread's last error). */
    static const char *const tls_touch[] = {"dwfl_errno", "elf_errno"};
    for (size_t i = 0; i < sizeof tls_touch / sizeof tls_touch[0]; i++) {
        int (*f)(void) = (int (*)(void))dlsym(dw, tls_touch[i]);
        if (f)
            (void)f();
    }
    g_state = 1;
    return 1;
}

/* dlopen and dlsym take ld.so's locks: through the loader gate (loader_gate.c) */
int ag_dwlib_load(void) {
    return g_state ? g_state > 0 : ag_loader_call(load);
}
