/* builtins_plot.c — plot(xs, ys, path, ...): an SVG line chart (loss curves)
 * written atomically; sparkline(xs): a string of block characters for the
 * REPL. Both read numbers from tensors, lists and tuples of numbers. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "interp/builtins_args.h"
#include "interp/internal.h"
#include "util/buf.h"
#include "stage/trace.h"
#include "util/xalloc.h"

/* The numbers of v (a tensor of rank <= max_rank, flattened, or a list/tuple
 * of numbers) as a malloc'd array; -1 after raising. */
static int get_numbers(Interp *I, const char *fn, const char *arg, Value v, int max_rank, double **out, int64_t *n)
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
    if (get_numbers(I, "sparkline", "xs", a[0], TFE_MAX_RANK, &d, &n)) return -1;
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
        else if (hi > lo) level = (int)floor(7 * (d[i] - lo) / (hi - lo) + 0.5);
        else level = 3;
        buf_puts(&b, blocks[level < 0 ? 0 : level > 7 ? 7 : level]);
    }
    *out = v_str(b.s ? b.s : "", b.len);
    free(b.s);
    free(d);
    return 0;
}

/* --- plot --------------------------------------------------------------------------------- */

static void bprintf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(Buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    buf_grow(b, (size_t)n);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    b->len += (size_t)n;
}

/* Text for SVG: & < > and quotes escaped. */
static void add_text(Buf *b, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '&': buf_puts(b, "&amp;"); break;
        case '<': buf_puts(b, "&lt;"); break;
        case '>': buf_puts(b, "&gt;"); break;
        case '"': buf_puts(b, "&quot;"); break;
        default: buf_add(b, s, 1);
        }
    }
}

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

enum { W = 640, H = 400, ML = 70, MR = 20, MT = 40, MB = 55 };
static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

typedef struct Series { double *y; int64_t n; } Series;

static int get_label(Interp *I, const char *arg, Value v, bool present, const char **out)
{
    *out = NULL;
    if (!present) return 0;
    return arg_opt_string(I, "plot()", arg, v, out);
}

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
            if (get_numbers(I, "plot", what, s->items[i], 1, &sr[i].y, &sr[i].n)) {
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
        if (get_numbers(I, "plot", "ys", ys, 2, &d, &n)) return -1;
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
    if (get_numbers(I, "plot", "ys", ys, 1, &sr->y, &sr->n)) { free(sr); return -1; }
    *out = sr;
    *ns = 1;
    return 0;
}

/* plot(xs, ys, path, title=nil, xlabel=nil, ylabel=nil, labels=nil) */
BUILTIN(bi_plot)
{
    Value a[7];
    bool p[7];
    if (args_parse(I, "plot", "xs, ys, path, title=, xlabel=, ylabel=, labels=", argc, argv, nkw, kwnames, kwvals, a, p))
        return -1;
    const char *path;
    if (arg_string(I, "plot()", "path", a[2], &path)) return -1;
    const char *title, *xlabel, *ylabel;
    if (get_label(I, "title", a[3], p[3], &title) || get_label(I, "xlabel", a[4], p[4], &xlabel) ||
        get_label(I, "ylabel", a[5], p[5], &ylabel))
        return -1;
    Series *sr;
    int ns;
    if (get_series(I, a[1], &sr, &ns)) return -1;
    int rc = -1;
    double *xs = NULL;
    int64_t nx = -1;
    Seq *labels = NULL;
    Buf b = {0};
    if (ns == 0) { interp_raise(I, "plot(): ys holds no series"); goto out; }
    if (p[6] && a[6].kind != V_NIL) {
        labels = a[6].kind == V_LIST || a[6].kind == V_TUPLE ? (Seq *)a[6].u.o : NULL;
        if (!labels || labels->n != ns) {
            interp_raise(I, "plot(): labels must be a list or tuple of %d string%s, one per series", ns, ns == 1 ? "" : "s");
            goto out;
        }
        for (int i = 0; i < ns; i++)
            if (labels->items[i].kind != V_STR) {
                char arg[32];
                snprintf(arg, sizeof arg, "labels[%d]", i);
                arg_error(I, "plot()", arg, "a string", labels->items[i]);
                goto out;
            }
    }
    if (a[0].kind != V_NIL) {
        if (get_numbers(I, "plot", "xs", a[0], 1, &xs, &nx)) goto out;
        for (int i = 0; i < ns; i++)
            if (sr[i].n != nx) {
                interp_raise(I, "plot(): xs has %lld values but series %d of ys has %lld", (long long)nx, i, (long long)sr[i].n);
                goto out;
            }
    }
    /* the data's range (finite values only; NaN and infinities break the line) */
    double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
    for (int i = 0; i < ns; i++)
        for (int64_t k = 0; k < sr[i].n; k++) {
            double x = xs ? xs[k] : (double)k, y = sr[i].y[k];
            if (!isfinite(x) || !isfinite(y)) continue;
            x0 = fmin(x0, x); x1 = fmax(x1, x);
            y0 = fmin(y0, y); y1 = fmax(y1, y);
        }
    if (!(x1 >= x0)) x0 = x1 = 0;
    if (!(y1 >= y0)) y0 = y1 = 0;
    double xstep = nice_step(&x0, &x1), ystep = nice_step(&y0, &y1);
    const double pw = W - ML - MR, ph = H - MT - MB;
#define PX(x) (ML + ((x) - x0) / (x1 - x0) * pw)
#define PY(y) (MT + ph - ((y) - y0) / (y1 - y0) * ph)
    bprintf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                "font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
    bprintf(&b, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    if (title) {
        bprintf(&b, "<text class=\"title\" x=\"%g\" y=\"24\" text-anchor=\"middle\" font-size=\"16\">", ML + pw / 2);
        add_text(&b, title);
        buf_puts(&b, "</text>\n");
    }
    /* grid lines and tick labels */
    /* ticks by count, not by adding steps (which can stall far from 0) */
    int nxt = ticks_between(x0, x1, xstep), nyt = ticks_between(y0, y1, ystep);
    buf_puts(&b, "<g class=\"xticks\" stroke=\"#ddd\">\n");
    for (int k = 0; k < nxt; k++) {
        double v = nxt > 1 ? x0 + (x1 - x0) * k / (nxt - 1) : x0;
        char lab[64];
        tick_label(v, xstep, lab, sizeof lab);
        bprintf(&b, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%.2f\"/>"
                    "<text x=\"%.2f\" y=\"%.2f\" text-anchor=\"middle\" stroke=\"none\" fill=\"black\">%s</text>\n",
                PX(v), MT, PX(v), MT + ph + 5, PX(v), MT + ph + 18, lab);
    }
    buf_puts(&b, "</g>\n<g class=\"yticks\" stroke=\"#ddd\">\n");
    for (int k = 0; k < nyt; k++) {
        double v = nyt > 1 ? y0 + (y1 - y0) * k / (nyt - 1) : y0;
        char lab[64];
        tick_label(v, ystep, lab, sizeof lab);
        bprintf(&b, "<line x1=\"%d\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\"/>"
                    "<text x=\"%d\" y=\"%.2f\" text-anchor=\"end\" stroke=\"none\" fill=\"black\">%s</text>\n",
                ML - 5, PY(v), ML + pw, PY(v), ML - 8, PY(v) + 4, lab);
    }
    buf_puts(&b, "</g>\n");
    /* axes */
    bprintf(&b, "<path class=\"axes\" d=\"M%d %d V%.2f H%.2f\" fill=\"none\" stroke=\"black\"/>\n", ML, MT, MT + ph, ML + pw);
    if (xlabel) {
        bprintf(&b, "<text class=\"xlabel\" x=\"%.2f\" y=\"%d\" text-anchor=\"middle\">", ML + pw / 2, H - 12);
        add_text(&b, xlabel);
        buf_puts(&b, "</text>\n");
    }
    if (ylabel) {
        bprintf(&b, "<text class=\"ylabel\" x=\"16\" y=\"%.2f\" text-anchor=\"middle\" transform=\"rotate(-90 16 %.2f)\">",
                MT + ph / 2, MT + ph / 2);
        add_text(&b, ylabel);
        buf_puts(&b, "</text>\n");
    }
    /* one path per series; a non-finite point lifts the pen */
    for (int i = 0; i < ns; i++) {
        const char *color = palette[i % (int)(sizeof palette / sizeof *palette)];
        bprintf(&b, "<path class=\"series\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" d=\"", color);
        bool pen = false, first = true;
        for (int64_t k = 0; k < sr[i].n; k++) {
            double x = xs ? xs[k] : (double)k, y = sr[i].y[k];
            if (!isfinite(x) || !isfinite(y)) { pen = false; continue; }
            bprintf(&b, "%s%.2f %.2f", pen ? " L" : first ? "M" : " M", PX(x), PY(y));
            pen = true;
            first = false;
        }
        buf_puts(&b, "\"/>\n");
    }
    if (labels) { /* legend, top right inside the plot area */
        for (int i = 0; i < ns; i++) {
            const char *color = palette[i % (int)(sizeof palette / sizeof *palette)];
            double ly = MT + 14 + 16 * i;
            bprintf(&b, "<g class=\"legend\"><line x1=\"%.2f\" y1=\"%.2f\" x2=\"%.2f\" y2=\"%.2f\" stroke=\"%s\" "
                        "stroke-width=\"2\"/><text x=\"%.2f\" y=\"%.2f\" text-anchor=\"end\">",
                    ML + pw - 30, ly - 4, ML + pw - 10, ly - 4, color, ML + pw - 36, ly);
            add_text(&b, ((Str *)labels->items[i].u.o)->s);
            buf_puts(&b, "</text></g>\n");
        }
    }
    buf_puts(&b, "</svg>\n");
#undef PX
#undef PY
    {
        const void *parts[1] = {b.s};
        size_t sizes[1] = {b.len};
        char err[512];
        if (write_file_atomic(path, parts, sizes, 1, err, sizeof err)) {
            interp_raise(I, "plot(): %s", err);
            goto out;
        }
    }
    *out = v_nil();
    rc = 0;
out:
    for (int i = 0; i < ns; i++) free(sr[i].y);
    free(sr);
    free(xs);
    free(b.s);
    return rc;
}

void builtins_plot_register(Interp *I)
{
    interp_define_builtin_flags(I, "plot", bi_plot, NULL, BF_EFFECT, NULL);
    interp_define_builtin(I, "sparkline", bi_sparkline, NULL);
}
