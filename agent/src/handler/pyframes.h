/* CPython frames in native stacks (pyframes.c). */
#ifndef AG_PYFRAMES_H
#define AG_PYFRAMES_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* A Python frame in a record's pcs: bit 63 set (no user-space pc has it), code object >> 3 in
 * bits 0-43, instruction index (code units) in bits 44-62. */
#define AG_PY_TAG (1ULL << 63)
#define AG_PY_IS(pc) (((uint64_t)(pc) & AG_PY_TAG) != 0)

/* CPython 3.11, x86-64: offsets in the release build (gdb `ptype/o` on python3.11-dbg's DWARF
 * for Debian's 3.11.2; tests/test-agent-python.c checks them against it). */
#define PY311_RT_INTERP_HEAD 40   /* _PyRuntime.interpreters.head */
#define PY311_IS_THREADS_HEAD 16  /* PyInterpreterState.threads.head */
#define PY311_IS_RUNTIME 40       /* PyInterpreterState.runtime */
#define PY311_TS_NEXT 8           /* PyThreadState.next */
#define PY311_TS_INTERP 16
#define PY311_TS_CFRAME 56
#define PY311_TS_NATIVE_TID 160
#define PY311_TS_READ 168
#define PY311_CF_CURRENT 8        /* _PyCFrame.current_frame */
#define PY311_IF_CODE 32          /* _PyInterpreterFrame.f_code; read from here: */
#define PY311_IF_PREVIOUS 48
#define PY311_IF_PREV_INSTR 56
#define PY311_IF_IS_ENTRY 68
#define PY311_IF_OWNER 69
#define PY311_IF_READ 40          /* f_code .. owner */
#define PY311_CO_TYPE 8           /* ob_type */
#define PY311_CO_FIRSTLINE 72
#define PY311_CO_FILENAME 112
#define PY311_CO_NAME 120
#define PY311_CO_QUALNAME 128
#define PY311_CO_LINETABLE 136
#define PY311_CO_CODE 184         /* co_code_adaptive */
#define PY311_CO_READ 192
#define PY311_BY_SIZE 16          /* PyBytesObject.ob_size */
#define PY311_BY_DATA 32
#define PY311_UO_LENGTH 16        /* PyASCIIObject.length */
#define PY311_UO_STATE 32
#define PY311_UO_ASCII_DATA 48
#define PY311_UO_UTF8_LEN 48      /* PyCompactUnicodeObject.utf8_length */
#define PY311_UO_UTF8 56
#define PY311_UO_DATA 72

typedef struct {
    _Atomic uint64_t samples;    /* handler: samples whose native stack ran the interpreter */
    _Atomic uint64_t merged;     /* of those, with Python frames merged in */
    _Atomic uint64_t no_tstate;  /* no PyThreadState found for the thread */
    _Atomic uint64_t mismatch;   /* activations and frame groups differed in number */
    _Atomic uint64_t bad_chain;  /* a frame that could not be read (chain ended there) */
    _Atomic uint64_t denied;     /* process_vm_readv refused: turned off */
    uint64_t named, unnamed;     /* bg: frames named; not (code object gone, bad strings) */
} ag_py_stats_t;
extern ag_py_stats_t ag_py_stats __attribute__((visibility("hidden")));

typedef struct {
    char name[256]; /* co_qualname */
    char file[512]; /* co_filename */
    uint32_t line;  /* 0: unknown */
} ag_py_frame_t;

struct ag_thread;
/* constructor: reads FLEETPROF_PYTHON. */
__attribute__((visibility("hidden"))) void ag_py_init(void);
/* bg, every tick: looks for a supported interpreter until found or given up. */
__attribute__((visibility("hidden"))) void ag_py_tick(void);
__attribute__((visibility("hidden"))) int ag_py_on(void);
/* handler-safe: replaces the native _PyEval_EvalFrameDefault frames of pcs[0..n) (leaf first)
 * by the Python frames each activation runs; returns the new count (<= max). */
__attribute__((visibility("hidden"))) uint32_t ag_py_merge(struct ag_thread *t, uintptr_t *pcs,
                                                           uint32_t n, uint32_t max);
/* ag_py_merge for a hook record: only with FLEETPROF_PYTHON_HOOKS=1 (pyframes.c). */
__attribute__((visibility("hidden"))) uint32_t ag_py_merge_hook(struct ag_thread *t, uintptr_t *pcs,
                                                           uint32_t n, uint32_t max);
/* bg: names a Python frame word. 0, or -1 (out named "[python?]", counted unnamed). */
__attribute__((visibility("hidden"))) int ag_py_name(uintptr_t word, ag_py_frame_t *out);
/* The line of instruction lasti (code units) from a 3.11 location table; -1: none. */
__attribute__((visibility("hidden"))) int ag_py_line(const uint8_t *table, size_t len,
                                                     int firstlineno, uint32_t lasti);

#endif
