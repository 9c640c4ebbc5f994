/* builtins_plot.c — charts written as SVG (or PNG, plot_png.c), atomically:
 * plot(xs, ys, path, ...) line charts (loss curves), scatter(xs, ys, path,
 * ...) points, hist(xs, path, bins=10, ...) a histogram; linear or log axes
 * and a legend beside the plot area, never over the data. sparkline(xs): a
 * string of block characters for the REPL. All read numbers from tensors,
 * lists and tuples of numbers; imshow is builtins_imshow.c. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "interp/builtins_args.h"
#include "interp/plot.h"
#include "stage/trace.h"
#include "util/xalloc.h"

/* The numbers of v (plot.h). */
int plot_numbers(Interp *I, const char *fn, const char *arg, Value v, int max_rank, double **out, int64_t *n)
{
    tfe_tensor *t = NULL;
    if (v.kind == V_LIST || v.kind == V_TUPLE) {
        Seq *s = (Seq *)v.u.o;
        for (int i = 0; i < s->n; i++)
            if (s->items[i].kind != V_SCALAR && s->items[i].kind != V_TENSOR)
                return interp_raise(I, "%s(): %s must hold numbers, but item %d is %s %s", fn, arg, i,
                                    s->items[i].kind == V_STR ? "a" : "a value of type", value_kind_name(s->items[i]));
        Value tv;
        if (s->n == 0) { *out = xmalloc(1); *n = 0; return 0; }
        if (tensor_literal(I, s->n, s->items, &tv)) return -1;
        t = value_to_tensor(tv);
        value_decref(tv);
    } else {
        t = value_to_tensor(v);
    }
    char f[32];
    snprintf(f, sizeof f, "%s()", fn);
    if (!t) return arg_error(I, f, arg, "a tensor or a list of numbers", v);
    if (t->rank > max_rank) {
        char sh[200];
        int r = interp_raise(I, "%s(): %s must have rank %s, got shape %s", fn, arg, max_rank == 1 ? "1" : "1 or 2",
                             shape_str(t->rank, t->shape, sh));
        tensor_decref(t);
        return r;
    }
    int64_t k = tensor_numel(t);
    double *d = xmalloc(sizeof(double) * (size_t)(k ? k : 1));
    for (int64_t i = 0; i < k; i++) d[i] = tensor_get_f64(t, i);
    tensor_decref(t);
    *out = d;
    *n = k;
    return 0;
}

/* A traced tensor among the arguments of a builtin that returns no tensor
 * (its answer would be fixed at trace time). */
static bool any_traced(Value v)
{
    if (v.kind == V_TENSOR) return v.u.t->node != NULL;
    if (v.kind == V_LIST || v.kind == V_TUPLE) {
        Seq *s = (Seq *)v.u.o;
        for (int i = 0; i < s->n; i++)
            if (any_traced(s->items[i])) return true;
    }
    return false;
}

/* --- sparkline ------------------------------------------------------------------------------ */

/* sparkline(xs, width=nil): one of ▁▂▃▄▅▆▇█ per number, level
 * round(7 (x - min) / (max - min)); all equal: ▄; NaN: a space. With
 * width=w a longer series is first averaged into w buckets. */
BUILTIN(bi_sparkline)
{
    static const char *const blocks[8] = {"\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587", "\u2588"};
    Value a[2];
    bool p[2];
    if (args_parse(I, "sparkline", "xs, width=", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    int64_t width = -1;
    if (p[1] && a[1].kind != V_NIL) {
        if (a[1].kind != V_SCALAR || !dtype_is_int((tfe_dtype)a[1].dtype) || a[1].u.i < 1)
            return interp_raise(I, "sparkline(): width must be a positive int");
        width = a[1].u.i;
    }
    /* not a registration flag (BF_NOT_STAGEABLE): sparkline of host numbers
     * is fine in a staged function; only traced arguments are refused */
    if (trace_recording(I) && any_traced(a[0]) &&
        trace_fail(I, I->cur_loc, "sparkline() returns a string, which a staged function cannot compute from "
                                  "traced values; call it outside the staged function"))
        return -1;
    double *d;
    int64_t n;
    if (plot_numbers(I, "sparkline", "xs", a[0], TFE_MAX_RANK, &d, &n)) return -1;
    if (width > 0 && n > width) {
        /* bucket b averages items [b n / w, (b + 1) n / w) */
        for (int64_t b = 0; b < width; b++) {
            int64_t lo = b * n / width, hi = (b + 1) * n / width;
            double s = 0;
            for (int64_t i = lo; i < hi; i++) s += d[i];
            d[b] = s / (double)(hi - lo);
        }
        n = width;
    }
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(d[i])) { lo = fmin(lo, d[i]); hi = fmax(hi, d[i]); }
    Buf b = {0};
    buf_grow(&b, (size_t)n * 3);
    for (int64_t i = 0; i < n; i++) {
        if (isnan(d[i])) { buf_puts(&b, " "); continue; }
        int level;
        if (d[i] == INFINITY) level = 7;
        else if (d[i] == -INFINITY) level = 0;
        else if (hi > lo) /* halves: max - min may pass double's range (-1.7e308 .. 1.7e308) */
            level = (int)floor(7 * ((d[i] / 2 - lo / 2) / (hi / 2 - lo / 2)) + 0.5);
        else level = 3;
        buf_puts(&b, blocks[level < 0 ? 0 : level > 7 ? 7 : level]);
    }
    *out = v_str(b.s ? b.s : "", b.len);
    free(b.s);
    free(d);
    return 0;
}

/* --- axes and the chart frame ------------------------------------------------------------ */

/* Ticks at multiples of a "nice" step (1, 2 or 5 times a power of ten)
 * giving about five intervals over [*lo, *hi], which widen to whole steps. */
static double nice_step(double *lo, double *hi)
{
    if (!(*hi > *lo)) { /* one value (or none): a unit range around it */
        double c = isfinite(*lo) ? *lo : 0, h = c != 0 ? fabs(c) * 0.5 : 1;
        *lo = c - h;
        *hi = c + h;
    }
    if (!isfinite(*hi - *lo)) { /* beyond double range: the ends are the ticks */
        *lo = -DBL_MAX; *hi = DBL_MAX;
        return INFINITY;
    }
    double raw = (*hi - *lo) / 5, mag = pow(10, floor(log10(raw))), f = raw / mag;
    double step = (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * mag;
    *lo = floor(*lo / step + 1e-9) * step;
    *hi = ceil(*hi / step - 1e-9) * step;
    return step;
}

/* How many ticks [lo, hi] holds at step (2..51; 1 when they cannot be told apart). */
static int ticks_between(double lo, double hi, double step)
{
    double n = (hi - lo) / step;
    if (!isfinite(n) || n < 1 || !(hi > lo)) return 1;
    return n > 50 ? 51 : (int)floor(n + 0.5) + 1;
}

static void tick_label(double v, double step, char *buf, size_t n)
{
    if (fabs(v) < step * 1e-9) v = 0;
    double m = fmax(fabs(v), step);
    if (m >= 1e6 || step < 1e-4) snprintf(buf, n, "%.3g", v);
    else {
        int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
        snprintf(buf, n, "%.*f", dec, v);
    }
}

/* An axis: linear over [lo, hi] with ticks every step, or log (lo and hi
 * are then powers of ten, the ticks every step decades). */
typedef struct Axis { bool log; double lo, hi, step; int nticks; } Axis;

/* Whether v can be drawn on the axis (a log axis has no place for v <= 0). */
static bool axis_ok(const Axis *a, double v) { return isfinite(v) && (!a->log || v > 0); }

/* Fits the axis to the data range [dlo, dhi] (lo > hi: no data). */
static void axis_fit(Axis *a, double dlo, double dhi)
{
    if (!a->log) {
        if (!(dhi >= dlo)) dlo = dhi = 0;
        a->step = nice_step(&dlo, &dhi);
        a->lo = dlo;
        a->hi = dhi;
        a->nticks = ticks_between(dlo, dhi, a->step);
        return;
    }
    if (!(dhi >= dlo)) dlo = dhi = 1;
    /* a float32 0.01 is a hair below 10^-2: it still sits on that decade */
    double klo = floor(log10(dlo) + 1e-6), khi = ceil(log10(dhi) - 1e-6);
    if (khi <= klo) khi = klo + 1;
    /* at most about eight labelled decades */
    double step = ceil((khi - klo) / 8);
    klo = floor(klo / step) * step;
    khi = ceil(khi / step) * step;
    a->lo = klo;
    a->hi = khi;
    a->step = step;
    a->nticks = (int)((khi - klo) / step) + 1;
}

/* Where v lies on the axis, 0 at lo and 1 at hi. */
static double axis_frac(const Axis *a, double v)
{
    if (a->log) return (log10(v) - a->lo) / (a->hi - a->lo);
    return (v - a->lo) / (a->hi - a->lo);
}

/* The value of tick k. */
static double axis_tick(const Axis *a, int k)
{
    if (a->log) return pow(10, a->lo + a->step * k);
    return a->nticks > 1 ? a->lo + (a->hi - a->lo) * k / (a->nticks - 1) : a->lo;
}

static void axis_label(const Axis *a, double v, char *buf, size_t n)
{
    if (a->log) snprintf(buf, n, "%g", v);
    else tick_label(v, a->step, buf, n);
}

enum { W = 640, H = 400, ML = 70, MR = 20, MT = 40, MB = 55 };
static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
static const char *color_of(int i) { return palette[i % (int)(sizeof palette / sizeof *palette)]; }

/* What the legend draws beside each label. */
typedef enum { MARK_LINE, MARK_POINT, MARK_BAR } Mark;

typedef struct Chart {
    Buf b;
    Axis x, y;
    int width, height;        /* the picture */
    double pw, ph;            /* the plot area, at (ML, MT) */
    const char *title, *xlabel, *ylabel, *xscale, *yscale;
    const char **legend;      /* nlegend labels (borrowed), or none */
    int nlegend;
    double legend_w;
} Chart;

#define PX(c, v) (ML + axis_frac(&(c)->x, (v)) * (c)->pw)
#define PY(c, v) (MT + (c)->ph - axis_frac(&(c)->y, (v)) * (c)->ph)

/* The display width of UTF-8 text, in characters. */
static int text_chars(const char *s)
{
    int n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* Parses the options every chart has: title, xlabel and ylabel at a[k..k+2],
 * then xscale (when with_xscale) and yscale from a[ks]. */
static int chart_options(Interp *I, const char *fn, Chart *c, Value *a, bool *p, int k, int ks, bool with_xscale)
{
    char f[32];
    snprintf(f, sizeof f, "%s()", fn);
    const char *names[] = {"title", "xlabel", "ylabel"};
    const char **dst[] = {&c->title, &c->xlabel, &c->ylabel};
    for (int i = 0; i < 3; i++, k++)
        if (p[k] && arg_opt_string(I, f, names[i], a[k], dst[i])) return -1;
    k = ks;
    for (int i = with_xscale ? 0 : 1; i < 2; i++, k++) {
        const char *s = NULL;
        if (p[k] && arg_opt_string(I, f, i ? "yscale" : "xscale", a[k], &s)) return -1;
        if (s && strcmp(s, "linear") != 0 && strcmp(s, "log") != 0)
            return interp_raise(I, "%s(): %s must be \"linear\" or \"log\", got \"%s\"", fn, i ? "yscale" : "xscale", s);
        (i ? &c->y : &c->x)->log = s && strcmp(s, "log") == 0;
    }
    return 0;
}

/* labels: nil, or a list/tuple of n strings (one per series, what) */
static int chart_labels(Interp *I, const char *fn, Chart *c, Value v, bool present, int n, const char *what)
{
    if (!present || v.kind == V_NIL) return 0;
    Seq *s = v.kind == V_LIST || v.kind == V_TUPLE ? (Seq *)v.u.o : NULL;
    if (!s || s->n != n)
        return interp_raise(I, "%s(): labels must be a list or tuple of %d string%s, one per %s", fn, n, n == 1 ? "" : "s", what);
    for (int i = 0; i < n; i++)
        if (s->items[i].kind != V_STR) {
            char f[32], arg[32];
            snprintf(f, sizeof f, "%s()", fn);
            snprintf(arg, sizeof arg, "labels[%d]", i);
            return arg_error(I, f, arg, "a string", s->items[i]);
        }
    c->legend = xcalloc((size_t)(n ? n : 1), sizeof *c->legend);
    for (int i = 0; i < n; i++) c->legend[i] = ((Str *)s->items[i].u.o)->s;
    c->nlegend = n;
    return 0;
}

/* A log axis with no drawable value is an error, not an empty chart. */
static int chart_need_data(Interp *I, const char *fn, const Axis *a, const char *name, double lo, double hi)
{
    if (a->log && !(hi >= lo))
        return interp_raise(I, "%s(): %sscale=\"log\" needs positive values, but %ss has none", fn, name, name);
    return 0;
}

/* The frame: size, title, grid and tick labels, axis labels. The
 * legend, when there is one, gets its own column right of the plot area, so
 * it never covers the data. */
static void chart_begin(Chart *c, double xlo, double xhi, double ylo, double yhi)
{
    axis_fit(&c->x, xlo, xhi);
    axis_fit(&c->y, ylo, yhi);
    c->pw = W - ML - MR;
    c->ph = H - MT - MB;
    c->width = W;
    c->height = H;
    if (c->nlegend) {
        int chars = 0;
        for (int i = 0; i < c->nlegend; i++) chars = chars > text_chars(c->legend[i]) ? chars : text_chars(c->legend[i]);
        c->legend_w = 44 + 7.5 * chars;
        c->width = (int)ceil(W + 10 + c->legend_w);
        int lh = MT + 12 + 18 * c->nlegend + 10;
        if (lh > c->height) c->height = lh;
    }
    Buf *b = &c->b;
    plot_printf(b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                   "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                   "font-family=\"sans-serif\" font-size=\"12\">\n", c->width, c->height, c->width, c->height);
    plot_printf(b, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", c->width, c->height);
    plot_printf(b, "<rect class=\"plotarea\" x=\"%d\" y=\"%d\" width=\"%.2f\" height=\"%.2f\" fill=\"none\"/>\n",
                ML, MT, c->pw, c->ph);
    if (c->title) {
        plot_printf(b, "<text class=\"title\" x=\"%g\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">", ML + c->pw / 2);
        plot_text(b, c->title);
        buf_puts(b, "</text>\n");
    }
    /* minor grid lines of a log axis: 2..9 times each decade, when the
     * decades are few enough to tell them apart */
    for (int ax = 0; ax < 2; ax++) {
        const Axis *a = ax ? &c->y : &c->x;
        if (!a->log || a->step != 1 || a->hi - a->lo > 5) continue;
        plot_printf(b, "<g class=\"%s\" stroke=\"#eee\">\n", ax ? "yminor" : "xminor");
        for (double k = a->lo; k < a->hi; k++)
            for (int m = 2; m <= 9; m++) {
                double v = m * pow(10, k);
                if (ax) plot_printf(b, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>\n", ML, PY(c, v), ML + c->pw, PY(c, v));
                else plot_printf(b, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%.2f\"/>\n", PX(c, v), MT, PX(c, v), MT + c->ph);
            }
        buf_puts(b, "</g>\n");
    }
    /* grid lines and tick labels, by count, not by adding steps (which can
     * stall far from 0) */
    buf_puts(b, "<g class=\"xticks\" stroke=\"#ddd\">\n");
    for (int k = 0; k < c->x.nticks; k++) {
        double v = axis_tick(&c->x, k);
        char lab[64];
        axis_label(&c->x, v, lab, sizeof lab);
        plot_printf(b, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%.2f\"/>"
                       "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" stroke=\"none\" fill=\"black\">%s</text>\n",
                    PX(c, v), MT, PX(c, v), MT + c->ph + 5, PX(c, v), MT + c->ph + 18, lab);
    }
    buf_puts(b, "</g>\n<g class=\"yticks\" stroke=\"#ddd\">\n");
    for (int k = 0; k < c->y.nticks; k++) {
        double v = axis_tick(&c->y, k);
        char lab[64];
        axis_label(&c->y, v, lab, sizeof lab);
        plot_printf(b, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>"
                       "<text x=\"%d\" y=\"%.2f\" text-anchor=\"end\" stroke=\"none\" fill=\"black\">%s</text>\n",
                    ML - 5, PY(c, v), ML + c->pw, PY(c, v), ML - 8, PY(c, v) + 4, lab);
    }
    buf_puts(b, "</g>\n");
    if (c->xlabel) {
        plot_printf(b, "<text class=\"xlabel\" x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">", ML + c->pw / 2, c->height - 12);
        plot_text(b, c->xlabel);
        buf_puts(b, "</text>\n");
    }
    if (c->ylabel) {
        plot_printf(b, "<text class=\"ylabel\" x=\"16\" y=\"%.2f\" text-anchor=\"middle\" transform=\"rotate(-90 16 %.2f)\">",
                    MT + c->ph / 2, MT + c->ph / 2);
        plot_text(b, c->ylabel);
        buf_puts(b, "</text>\n");
    }
}

/* The axes, the legend (if any) right of the plot area, the closing tag,
 * the file. */
static int chart_end(Interp *I, const char *fn, Chart *c, const char *path, Mark mark)
{
    Buf *b = &c->b;
    /* the axes over the data, so a bar at the edge does not hide them */
    plot_printf(b, "<path class=\"axes\" d=\"M%d %d V%.2f H%.2f\" fill=\"none\" stroke=\"black\"/>\n",
                ML, MT, MT + c->ph, ML + c->pw);
    if (c->nlegend) {
        double x0 = ML + c->pw + 10, y0 = MT;
        plot_printf(b, "<g class=\"legendbox\">\n<rect class=\"legendframe\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" "
                       "height=\"%d\" fill=\"white\" stroke=\"#ccc\"/>\n",
                    x0, y0, c->legend_w, 12 + 18 * c->nlegend);
        for (int i = 0; i < c->nlegend; i++) {
            double ly = y0 + 20 + 18 * i;
            buf_puts(b, "<g class=\"legend\">");
            if (mark == MARK_LINE)
                plot_printf(b, "<line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" stroke-width=\"2\"/>",
                            x0 + 8, ly - 4, x0 + 28, ly - 4, color_of(i));
            else if (mark == MARK_POINT)
                plot_printf(b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"4\" fill=\"%s\"/>", x0 + 18, ly - 4, color_of(i));
            else
                plot_printf(b, "<rect x=\"%.2f\" y=\"%.2f\" width=\"14\" height=\"10\" fill=\"%s\"/>", x0 + 11, ly - 9, color_of(i));
            plot_printf(b, "<text x=\"%.2f\" y=\"%.2f\">", x0 + 36, ly);
            plot_text(b, c->legend[i]);
            buf_puts(b, "</text></g>\n");
        }
        buf_puts(b, "</g>\n");
    }
    buf_puts(b, "</svg>\n");
    return plot_write(I, fn, path, b, c->width, c->height);
}

static void chart_free(Chart *c)
{
    free(c->b.s);
    free(c->legend);
}

/* --- plot --------------------------------------------------------------------------------- */

typedef struct Series { double *y; int64_t n; } Series;

/* The series of ys: a 2-D tensor's rows, the items of a list/tuple of
 * tensors or lists, or ys itself. */
static int get_series(Interp *I, Value ys, Series **out, int *ns)
{
    Seq *s = ys.kind == V_LIST || ys.kind == V_TUPLE ? (Seq *)ys.u.o : NULL;
    bool many = s && s->n > 0 && (s->items[0].kind == V_LIST || s->items[0].kind == V_TUPLE ||
                                  (s->items[0].kind == V_TENSOR && s->items[0].u.t->rank >= 1));
    if (many) {
        Series *sr = xcalloc((size_t)s->n, sizeof *sr);
        for (int i = 0; i < s->n; i++) {
            char what[32];
            snprintf(what, sizeof what, "ys[%d]", i);
            if (plot_numbers(I, "plot", what, s->items[i], 1, &sr[i].y, &sr[i].n)) {
                for (int k = 0; k < i; k++) free(sr[k].y);
                free(sr);
                return -1;
            }
        }
        *out = sr;
        *ns = s->n;
        return 0;
    }
    tfe_tensor *t = value_to_tensor(ys);
    int64_t rows = t && t->rank == 2 ? t->shape[0] : -1, cols = t && t->rank == 2 ? t->shape[1] : 0;
    if (t) tensor_decref(t);
    if (rows >= 0) {
        double *d;
        int64_t n;
        if (plot_numbers(I, "plot", "ys", ys, 2, &d, &n)) return -1;
        Series *sr = xcalloc((size_t)(rows ? rows : 1), sizeof *sr);
        for (int64_t r = 0; r < rows; r++) {
            sr[r].y = xmalloc(sizeof(double) * (size_t)(cols ? cols : 1));
            memcpy(sr[r].y, d + r * cols, sizeof(double) * (size_t)cols);
            sr[r].n = cols;
        }
        free(d);
        *out = sr;
        *ns = (int)rows;
        return 0;
    }
    Series *sr = xcalloc(1, sizeof *sr);
    if (plot_numbers(I, "plot", "ys", ys, 1, &sr->y, &sr->n)) { free(sr); return -1; }
    *out = sr;
    *ns = 1;
    return 0;
}

/* plot(xs, ys, path, title=nil, xlabel=nil, ylabel=nil, labels=nil, xscale=nil, yscale=nil) */
BUILTIN(bi_plot)
{
    Value a[9];
    bool p[9];
    if (args_parse(I, "plot", "xs, ys, path=, title=, xlabel=, ylabel=, labels=, xscale=, yscale=", argc, argv, nkw,
                   kwnames, kwvals, a, p))
        return -1;
    const char *path = NULL; /* none: shown inline in a notebook (plot_write) */
    if (a[2].kind != V_NIL && arg_string(I, "plot()", "path", a[2], &path)) return -1;
    Chart c = {0};
    if (chart_options(I, "plot", &c, a, p, 3, 7, true)) return -1;
    Series *sr;
    int ns;
    if (get_series(I, a[1], &sr, &ns)) return -1;
    int rc = -1;
    double *xs = NULL;
    int64_t nx = -1;
    if (ns == 0) { interp_raise(I, "plot(): ys holds no series"); goto out; }
    if (chart_labels(I, "plot", &c, a[6], p[6], ns, "series")) goto out;
    if (a[0].kind != V_NIL) {
        if (plot_numbers(I, "plot", "xs", a[0], 1, &xs, &nx)) goto out;
        for (int i = 0; i < ns; i++)
            if (sr[i].n != nx) {
                interp_raise(I, "plot(): xs has %lld values but series %d of ys has %lld", (long long)nx, i, (long long)sr[i].n);
                goto out;
            }
    }
    /* the data's range (points the axes can show; the others break the line) */
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int i = 0; i < ns; i++)
        for (int64_t k = 0; k < sr[i].n; k++) {
            double x = xs ? xs[k] : (double)k, y = sr[i].y[k];
            if (!axis_ok(&c.x, x) || !axis_ok(&c.y, y)) continue;
            x0 = fmin(x0, x); x1 = fmax(x1, x);
            y0 = fmin(y0, y); y1 = fmax(y1, y);
        }
    if (chart_need_data(I, "plot", &c.x, "x", x0, x1) || chart_need_data(I, "plot", &c.y, "y", y0, y1)) goto out;
    chart_begin(&c, x0, x1, y0, y1);
    /* one path per series; a point the axes cannot show lifts the pen */
    for (int i = 0; i < ns; i++) {
        plot_printf(&c.b, "<path class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" d=\"", color_of(i));
        bool pen = false, first = true;
        for (int64_t k = 0; k < sr[i].n; k++) {
            double x = xs ? xs[k] : (double)k, y = sr[i].y[k];
            if (!axis_ok(&c.x, x) || !axis_ok(&c.y, y)) { pen = false; continue; }
            plot_printf(&c.b, "%s%.2f %.2f", pen ? " L" : first ? "M" : " M", PX(&c, x), PY(&c, y));
            pen = true;
            first = false;
        }
        buf_puts(&c.b, "\"/>\n");
    }
    if (chart_end(I, "plot", &c, path, MARK_LINE)) goto out;
    *out = v_nil();
    rc = 0;
out:
    for (int i = 0; i < ns; i++) free(sr[i].y);
    free(sr);
    free(xs);
    chart_free(&c);
    return rc;
}

/* --- scatter ------------------------------------------------------------------------------ */

/* scatter(xs, ys, path, title=nil, xlabel=nil, ylabel=nil, labels=nil, groups=nil, xscale=nil, yscale=nil) */
BUILTIN(bi_scatter)
{
    Value a[10];
    bool p[10];
    if (args_parse(I, "scatter", "xs, ys, path=, title=, xlabel=, ylabel=, labels=, groups=, xscale=, yscale=", argc, argv,
                   nkw, kwnames, kwvals, a, p))
        return -1;
    const char *path = NULL; /* none: shown inline in a notebook (plot_write) */
    if (a[2].kind != V_NIL && arg_string(I, "scatter()", "path", a[2], &path)) return -1;
    Chart c = {0};
    if (chart_options(I, "scatter", &c, a, p, 3, 8, true)) return -1;
    double *xs = NULL, *ys = NULL, *gs = NULL;
    int64_t nx, ny, ng;
    int rc = -1, ngroups = 1;
    char *name_store = NULL; /* the legend's "0", "1", ... without labels */
    if (plot_numbers(I, "scatter", "xs", a[0], 1, &xs, &nx) || plot_numbers(I, "scatter", "ys", a[1], 1, &ys, &ny)) goto out;
    if (nx != ny) {
        interp_raise(I, "scatter(): xs has %lld values but ys has %lld", (long long)nx, (long long)ny);
        goto out;
    }
    if (p[7] && a[7].kind != V_NIL) {
        /* groups: a class id in [0, 100) per point; colour and legend entry per id */
        if (plot_numbers(I, "scatter", "groups", a[7], 1, &gs, &ng)) goto out;
        if (ng != nx) {
            interp_raise(I, "scatter(): groups has %lld values but xs has %lld", (long long)ng, (long long)nx);
            goto out;
        }
        int64_t top = -1;
        for (int64_t k = 0; k < ng; k++) {
            if (!(gs[k] >= 0 && gs[k] < 100 && gs[k] == floor(gs[k]))) {
                interp_raise(I, "scatter(): groups must hold ints in [0, 100), but item %lld is %g", (long long)k, gs[k]);
                goto out;
            }
            if (gs[k] > top) top = (int64_t)gs[k];
        }
        ngroups = (int)top + 1;
        if (p[6] && a[6].kind != V_NIL) {
            if (chart_labels(I, "scatter", &c, a[6], true, ngroups, "group (0 to the largest id in groups)")) goto out;
        } else { /* the ids themselves name the groups */
            c.legend = xcalloc((size_t)ngroups, sizeof *c.legend);
            name_store = xmalloc((size_t)ngroups * 12);
            for (int g = 0; g < ngroups; g++) {
                snprintf(name_store + 12 * g, 12, "%d", g);
                c.legend[g] = name_store + 12 * g;
            }
            c.nlegend = ngroups;
        }
    } else if (chart_labels(I, "scatter", &c, a[6], p[6], 1, "series")) {
        goto out;
    }
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int64_t k = 0; k < nx; k++) {
        if (!axis_ok(&c.x, xs[k]) || !axis_ok(&c.y, ys[k])) continue;
        x0 = fmin(x0, xs[k]); x1 = fmax(x1, xs[k]);
        y0 = fmin(y0, ys[k]); y1 = fmax(y1, ys[k]);
    }
    if (chart_need_data(I, "scatter", &c.x, "x", x0, x1) || chart_need_data(I, "scatter", &c.y, "y", y0, y1)) goto out;
    chart_begin(&c, x0, x1, y0, y1);
    /* one group of circles per colour; points the axes cannot show are left out */
    for (int g = 0; g < ngroups; g++) {
        plot_printf(&c.b, "<g class=\"points\" fill=\"%s\" fill-opacity=\"0.8\">\n", color_of(g));
        for (int64_t k = 0; k < nx; k++) {
            if ((gs ? (int)gs[k] : 0) != g || !axis_ok(&c.x, xs[k]) || !axis_ok(&c.y, ys[k])) continue;
            plot_printf(&c.b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3\"/>\n", PX(&c, xs[k]), PY(&c, ys[k]));
        }
        buf_puts(&c.b, "</g>\n");
    }
    if (chart_end(I, "scatter", &c, path, MARK_POINT)) goto out;
    *out = v_nil();
    rc = 0;
out:
    free(name_store);
    free(xs);
    free(ys);
    free(gs);
    chart_free(&c);
    return rc;
}

/* --- hist --------------------------------------------------------------------------------- */

/* The bin of each value as numpy.histogram finds it: equal bins over
 * [lo, hi], the last one closed, edges from linspace, then a correction
 * where rounding put a value on the wrong side of an edge. */
static int64_t bin_of(double v, double lo, double hi, int64_t bins, const double *edges)
{
    int64_t i = (int64_t)((v - lo) * ((double)bins / (hi - lo)));
    if (i >= bins) i = bins - 1;
    if (i < 0) i = 0;
    if (v < edges[i]) i--;
    else if (v >= edges[i + 1] && i != bins - 1) i++;
    return i;
}

/* hist(xs, path, bins=10, title=nil, xlabel=nil, ylabel=nil, yscale=nil) */
BUILTIN(bi_hist)
{
    Value a[7];
    bool p[7];
    if (args_parse(I, "hist", "xs, path=, bins=, title=, xlabel=, ylabel=, yscale=", argc, argv, nkw, kwnames, kwvals, a, p))
        return -1;
    const char *path = NULL; /* none: shown inline in a notebook (plot_write) */
    if (a[1].kind != V_NIL && arg_string(I, "hist()", "path", a[1], &path)) return -1;
    int64_t bins = 10;
    if (p[2] && a[2].kind != V_NIL) {
        if (arg_int(I, "hist()", "bins", a[2], &bins)) return -1;
        if (bins < 1 || bins > 10000) return interp_raise(I, "hist(): bins must be in [1, 10000], got %lld", (long long)bins);
    }
    Chart c = {0};
    if (chart_options(I, "hist", &c, a, p, 3, 6, false)) return -1;
    double *xs = NULL, *edges = NULL;
    int64_t n, *count = NULL;
    int rc = -1;
    if (plot_numbers(I, "hist", "xs", a[0], TFE_MAX_RANK, &xs, &n)) goto out;
    if (n == 0) { interp_raise(I, "hist(): xs holds no values"); goto out; }
    double lo = INFINITY, hi = -INFINITY;
    for (int64_t k = 0; k < n; k++) {
        if (!isfinite(xs[k])) { /* as numpy.histogram: no range to bin into */
            interp_raise(I, "hist(): xs holds %s at index %lld (flattened); histograms take finite values",
                         isnan(xs[k]) ? "nan" : xs[k] > 0 ? "inf" : "-inf", (long long)k);
            goto out;
        }
        lo = fmin(lo, xs[k]);
        hi = fmax(hi, xs[k]);
    }
    if (lo == hi) { lo -= 0.5; hi += 0.5; } /* numpy's range for one value */
    edges = xmalloc(sizeof(double) * (size_t)(bins + 1));
    for (int64_t i = 0; i <= bins; i++) edges[i] = i == bins ? hi : lo + (hi - lo) * (double)i / (double)bins;
    count = xcalloc((size_t)bins, sizeof *count);
    for (int64_t k = 0; k < n; k++) count[bin_of(xs[k], lo, hi, bins, edges)]++;
    double top = 0, least = INFINITY;
    for (int64_t i = 0; i < bins; i++) {
        top = fmax(top, (double)count[i]);
        if (count[i] > 0) least = fmin(least, (double)count[i]);
    }
    /* the bars stand on 0 (on a log axis: on the bottom decade) */
    chart_begin(&c, lo, hi, c.y.log ? least : 0, top);
    double base = c.y.log ? MT + c.ph : PY(&c, 0.0);
    plot_printf(&c.b, "<g class=\"bars\" fill=\"%s\" stroke=\"white\" stroke-width=\"0.5\">\n", color_of(0));
    for (int64_t i = 0; i < bins; i++) {
        double x = PX(&c, edges[i]), w = PX(&c, edges[i + 1]) - x;
        double top_y = count[i] > 0 || !c.y.log ? PY(&c, (double)count[i]) : base;
        plot_printf(&c.b, "<rect class=\"bar\" data-count=\"%lld\" x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.2f\"/>\n",
                    (long long)count[i], x, top_y, w, base - top_y);
    }
    buf_puts(&c.b, "</g>\n");
    if (chart_end(I, "hist", &c, path, MARK_BAR)) goto out;
    *out = v_nil();
    rc = 0;
out:
    free(xs);
    free(edges);
    free(count);
    chart_free(&c);
    return rc;
}

void builtins_plot_register(Interp *I)
{
    interp_define_builtin_flags(I, "plot", bi_plot, NULL, BF_EFFECT, NULL);
    interp_define_builtin_flags(I, "scatter", bi_scatter, NULL, BF_EFFECT, NULL);
    interp_define_builtin_flags(I, "hist", bi_hist, NULL, BF_EFFECT, NULL);
    interp_define_builtin(I, "sparkline", bi_sparkline, NULL);
}
