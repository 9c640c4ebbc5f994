/* loc.h — a source location: plain data every layer can carry (the graph
 * core keeps the expression that made each node) without knowing the parser. */
#ifndef TFE_UTIL_LOC_H
#define TFE_UTIL_LOC_H

struct Source; /* parser/ast.h: the program text */

/* A location: 1-based line and column (columns count bytes), the byte
 * offset of the first byte, and the length in bytes of the span (>= 1). */
typedef struct Loc {
    struct Source *src; /* borrowed: the tree keeps its Source alive */
    int line, col;
    int off, len;
} Loc;

#endif
