/* buf.h — a growable, NUL-terminated output buffer for building strings
 * (printing, format). Allocation failure exits (xalloc.h): running out of memory while
 * printing is not a recoverable language error. */
#ifndef TFE_BUF_H
#define TFE_BUF_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util/xalloc.h"

typedef struct Buf { char *s; size_t len, cap; } Buf;

static inline void buf_grow(Buf *b, size_t more)
{
    if (b->len + more + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + more + 1) cap *= 2;
    b->s = xrealloc(b->s, cap);
    b->cap = cap;
}

static inline void buf_add(Buf *b, const char *s, size_t n)
{
    buf_grow(b, n);
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static inline void buf_puts(Buf *b, const char *s) { buf_add(b, s, strlen(s)); }

#endif
