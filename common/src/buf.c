/* A growable byte buffer (cm/buf.h). Threading: one writer per buffer. */
#include "cm/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for need more bytes: 0, or -1 with b->fail set. Capacity doubles from 8 KiB. */
static int reserve(cm_buf_t *b, size_t need) {
    if (b->fail)
        return -1;
    if (need <= b->cap - b->n)
        return 0;
    size_t nc = b->cap ? b->cap : 8192;
    while (nc - b->n < need) {
        if (nc > ((size_t)-1) / 2) {
            b->fail = 1;
            return -1;
        }
        nc *= 2;
    }
    char *np = realloc(b->p, nc);
    if (!np) {
        b->fail = 1;
        return -1;
    }
    b->p = np;
    b->cap = nc;
    return 0;
}

void cm_buf_put(cm_buf_t *b, const void *s, size_t len) {
    if (reserve(b, len))
        return;
    memcpy(b->p + b->n, s, len);
    b->n += len;
}

void cm_buf_printf(cm_buf_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (len < 0) {
        b->fail = 1;
        return;
    }
    if (reserve(b, (size_t)len + 1))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, (size_t)len + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)len;
}

void cm_buf_free(cm_buf_t *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}
