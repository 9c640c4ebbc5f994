/* graphviz.h — DOT text rendered to SVG by Graphviz's `dot` program
 * (graph(f, x).svg(path), t.graph().svg(path); docs/visualizing.md). */
#ifndef TFE_GRAPHVIZ_H
#define TFE_GRAPHVIZ_H

#include "interp/interp.h"

/* Runs `dot -Tsvg -o path` on the text dot. 0, or -1 after raising a
 * located error that names fn: `dot` not installed (the Debian package
 * graphviz), or dot's own message. $TFE_DOT names another program. */
int graphviz_svg(Interp *I, const char *fn, const char *dot, const char *path);

#endif
