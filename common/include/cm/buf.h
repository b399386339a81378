/* A growable byte buffer on the heap (COPY data, metrics text). An append that runs out of
 * memory sets fail and every later one is dropped, so the writer checks once, at the end. */
#ifndef CM_BUF_H
#define CM_BUF_H

#include <stddef.h>

typedef struct {
    char *p;     /* the bytes; after cm_buf_printf also a C string */
    size_t n;    /* bytes written */
    size_t cap;  /* bytes allocated */
    int fail;    /* an append ran out of memory: the contents are incomplete */
} cm_buf_t;

/* Appends len bytes of s. */
void cm_buf_put(cm_buf_t *b, const void *s, size_t len);
/* Appends the text fmt prints, and keeps a NUL after it (not counted in n). */
void cm_buf_printf(cm_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Frees the bytes; b is empty again. */
void cm_buf_free(cm_buf_t *b);

#endif
