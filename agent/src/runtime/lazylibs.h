/* Libraries the agent loads on first need rather than links (every program a profiled process
 * execs would map them): elfutils (libdw, libelf) through function pointers (dwlib.c,
 * background thread only) and libprotobuf-c (pblib.c). */
#ifndef AG_LAZYLIBS_H
#define AG_LAZYLIBS_H

#include <elfutils/libdwfl.h>
#include <gelf.h>

#include "base.h"

/* Every elfutils function symbols.c calls. */
#define AG_DW_FUNCS(X)                                                                          \
    X(dwarf_getsrcfiles) X(dwarf_lineendsequence) X(dwfl_begin) X(dwfl_build_id_find_elf)       \
    X(dwfl_dwarf_line) X(dwfl_end) X(dwfl_getsrclines) X(dwfl_lineinfo) X(dwfl_module_build_id) \
    X(dwfl_module_getelf) X(dwfl_module_getsym_info) X(dwfl_module_getsymtab)                   \
    X(dwfl_module_nextcu) X(dwfl_offline_section_address) X(dwfl_onesrcline)                    \
    X(dwfl_report_begin) X(dwfl_report_elf) X(dwfl_report_end) X(elf_end) X(elf_getdata)       \
    X(elf_getscn) X(elf_getshdrstrndx) X(elf_memory) X(elf_nextscn) X(elf_strptr)               \
    X(gelf_getrela) X(gelf_getshdr) X(gelf_getsym)

typedef struct {
#define AG_DW_MEMBER(f) __typeof__(f) *f;
    AG_DW_FUNCS(AG_DW_MEMBER)
#undef AG_DW_MEMBER
} ag_dwlib_t;

/* Filled by a successful ag_dwlib_load; read only after it returned 1. */
AG_HIDDEN extern ag_dwlib_t ag_dw;

/* Constructor: reads FLEETPROF_LIBDW (default libdw.so.1). */
AG_HIDDEN void ag_dwlib_init(void);

/* 1: the libraries are loaded and every pointer of ag_dw is set (the first call loads them);
 * 0: they cannot be (reported once on stderr; every later call returns 0 at once). */
AG_HIDDEN int ag_dwlib_load(void);

/* pblib.c: loads libprotobuf-c now (the constructor, when the program's malloc is foreign:
 * dlopen allocates through it, which only the program's own thread may do). */
AG_HIDDEN void ag_pblib_preload(void);

#endif
