/* libprotobuf-c loaded on first need (pblib.c). */
#ifndef AG_PBLIB_H
#define AG_PBLIB_H

#include "base.h"

/* pblib.c: loads libprotobuf-c now (the constructor, when the program's malloc is foreign:
 * dlopen allocates through it, which only the program's own thread may do). */
AG_HIDDEN void ag_pblib_preload(void);

#endif
