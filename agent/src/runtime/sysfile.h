/* Reads without stdio or opendir (sysfile.c). */
#ifndef AG_SYSFILE_H
#define AG_SYSFILE_H

#include "base.h"
#include "cm/file.h"

/* sysfile.c: reads without stdio or opendir (their FILE and DIR come from the program's
 * malloc); whole small files: cm_read_file (cm/file.h).
 * ag_read_lines / ag_dir_each: cb per line (NUL-terminated, cut at 4 KiB) / per entry name
 * until it returns non-zero; 0 or -errno. */
AG_HIDDEN int ag_read_lines(const char *path, int (*cb)(char *line, void *arg), void *arg);
AG_HIDDEN int ag_dir_each(const char *path, int (*cb)(const char *name, void *arg), void *arg);

#endif
