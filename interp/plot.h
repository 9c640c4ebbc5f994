/* plot.h — what the chart builtins share (builtins_plot.c, builtins_imshow.c,
 * plot_png.c): SVG text helpers, reading numbers from values, and the writer
 * that makes an .svg or, through librsvg, a .png. */
#ifndef TFE_PLOT_H
#define TFE_PLOT_H

#include "interp/internal.h"
#include "util/buf.h"

/* printf onto a Buf */
void plot_printf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* text for SVG: & < > and quotes escaped */
void plot_text(Buf *b, const char *s);

/* The numbers of v (a tensor of rank <= max_rank, flattened, or a list/tuple
 * of numbers) as a malloc'd array; -1 after raising "fn(): arg ...". */
int plot_numbers(Interp *I, const char *fn, const char *arg, Value v, int max_rank, double **out, int64_t *n);

/* Writes the SVG document svg (width x height pixels) to path, atomically:
 * as it is when path ends in .svg, rendered to a PNG when it ends in .png;
 * any other ending is an error (a .jpg must not hold SVG text). 0, or -1
 * after raising "fn(): ...". */
int plot_write(Interp *I, const char *fn, const char *path, const Buf *svg, int width, int height);

#endif
