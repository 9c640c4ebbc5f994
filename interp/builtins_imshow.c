/* builtins_imshow.c — imshow(images, path, ...): one gray-scale image (h, w)
 * or a grid of them (n, h, w), e.g. digits, as SVG or PNG (plot_png.c).
 * Each image row is drawn as runs of equal gray, one rect per run, so a
 * mostly-blank digit stays small. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "interp/builtins_args.h"
#include "interp/plot.h"
#include "util/xalloc.h"

/* The caption of image i from labels (a list/tuple of strings or numbers,
 * or a 1-D tensor): a malloc'd string, NULL after raising. */
static char *caption(Interp *I, Value labels, const double *lt, int64_t i)
{
    if (lt) {
        char s[64];
        if (lt[i] == floor(lt[i]) && fabs(lt[i]) < 1e15) snprintf(s, sizeof s, "%lld", (long long)lt[i]);
        else snprintf(s, sizeof s, "%g", lt[i]);
        return xstrdup(s);
    }
    Value v = ((Seq *)labels.u.o)->items[i];
    if (v.kind == V_STR) return xstrdup(((Str *)v.u.o)->s);
    double d;
    if (arg_as_number(v, &d, NULL)) {
        char s[64];
        if (d == floor(d) && fabs(d) < 1e15) snprintf(s, sizeof s, "%lld", (long long)d);
        else snprintf(s, sizeof s, "%g", d);
        return xstrdup(s);
    }
    char arg[32];
    snprintf(arg, sizeof arg, "labels[%lld]", (long long)i);
    arg_error(I, "imshow()", arg, "a string or number", v);
    return NULL;
}

/* imshow(images, path, cols=nil, labels=nil, title=nil, cmap="gray", vmin=nil, vmax=nil) */
BUILTIN(bi_imshow)
{
    Value a[8];
    bool p[8];
    if (args_parse(I, "imshow", "images, path, cols=, labels=, title=, cmap=, vmin=, vmax=", argc, argv, nkw, kwnames,
                   kwvals, a, p))
        return -1;
    const char *path, *title = NULL, *cmap = NULL;
    if (arg_string(I, "imshow()", "path", a[1], &path)) return -1;
    if ((p[4] && arg_opt_string(I, "imshow()", "title", a[4], &title)) ||
        (p[5] && arg_opt_string(I, "imshow()", "cmap", a[5], &cmap)))
        return -1;
    bool reversed = false;
    if (cmap && strcmp(cmap, "gray") != 0) {
        if (strcmp(cmap, "gray_r") != 0)
            return interp_raise(I, "imshow(): cmap must be \"gray\" (low values black) or \"gray_r\" (low values "
                                   "white), got \"%s\"", cmap);
        reversed = true;
    }
    tfe_tensor *t = value_to_tensor(a[0]);
    if (!t) return arg_error(I, "imshow()", "images", "a tensor", a[0]);
    if (t->rank != 2 && t->rank != 3) {
        char sh[200];
        shape_str(t->rank, t->shape, sh);
        int r = t->rank;
        tensor_decref(t);
        return interp_raise(I, "imshow(): images must have shape (h, w) or (n, h, w), got %s%s", sh,
                            r == 1 ? " (reshape a flat image first: reshape(x, (8, 8)))" : "");
    }
    int64_t n = t->rank == 3 ? t->shape[0] : 1, h = t->shape[t->rank - 2], w = t->shape[t->rank - 1];
    tensor_decref(t);
    if (n == 0 || h == 0 || w == 0) return interp_raise(I, "imshow(): images is empty");
    /* an SVG rect per run of pixels: millions of them make a file no viewer opens */
    if (n > 10000 || h > 4096 || w > 4096 || n * h * w > (1 << 22))
        return interp_raise(I, "imshow(): too large to draw (%lld images of %lld x %lld pixels; at most 4,194,304 "
                               "pixels in all)", (long long)n, (long long)h, (long long)w);
    int64_t cols = (int64_t)ceil(sqrt((double)n));
    if (p[2] && a[2].kind != V_NIL) {
        if (arg_int(I, "imshow()", "cols", a[2], &cols)) return -1;
        if (cols < 1) return interp_raise(I, "imshow(): cols must be at least 1, got %lld", (long long)cols);
    }
    if (cols > n) cols = n;
    int64_t rows = (n + cols - 1) / cols;
    double vmin = NAN, vmax = NAN;
    if ((p[6] && a[6].kind != V_NIL && arg_number(I, "imshow()", "vmin", a[6], &vmin, NULL)) ||
        (p[7] && a[7].kind != V_NIL && arg_number(I, "imshow()", "vmax", a[7], &vmax, NULL)))
        return -1;
    double *px = NULL, *lt = NULL;
    int64_t np, nl;
    Buf b = {0};
    char **caps = NULL;
    int rc = -1;
    bool with_labels = p[3] && a[3].kind != V_NIL;
    if (plot_numbers(I, "imshow", "images", a[0], 3, &px, &np)) goto out;
    if (with_labels) {
        if (a[3].kind == V_LIST || a[3].kind == V_TUPLE) {
            nl = ((Seq *)a[3].u.o)->n;
        } else if (plot_numbers(I, "imshow", "labels", a[3], 1, &lt, &nl)) {
            goto out;
        }
        if (nl != n) {
            interp_raise(I, "imshow(): labels has %lld items but there %s %lld image%s", (long long)nl,
                         n == 1 ? "is" : "are", (long long)n, n == 1 ? "" : "s");
            goto out;
        }
        caps = xcalloc((size_t)n, sizeof *caps);
        for (int64_t i = 0; i < n; i++)
            if (!(caps[i] = caption(I, a[3], lt, i))) goto out;
    }
    /* the gray scale: vmin black, vmax white (reversed for gray_r), over all images */
    if (isnan(vmin) || isnan(vmax)) {
        double lo = INFINITY, hi = -INFINITY;
        for (int64_t k = 0; k < np; k++)
            if (isfinite(px[k])) { lo = fmin(lo, px[k]); hi = fmax(hi, px[k]); }
        if (isnan(vmin)) vmin = isfinite(lo) ? lo : 0;
        if (isnan(vmax)) vmax = isfinite(hi) ? hi : 1;
    }
    /* pixels per image pixel: a single image about 280 wide, grid cells about 84 */
    int64_t side = h > w ? h : w, target = n == 1 ? 280 : 84;
    int64_t s = target / side > 1 ? target / side : 1;
    int gap = 8, cap_h = with_labels ? 16 : 0, top = title ? 32 : gap;
    int64_t cw = w * s, ch = h * s;
    int64_t width = gap + cols * (cw + gap), height = top + rows * (ch + cap_h + gap);
    if (title && width < 200) width = 200;
    plot_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                    "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%lld\" height=\"%lld\" viewBox=\"0 0 %lld %lld\" "
                    "font-family=\"sans-serif\" font-size=\"12\">\n",
                (long long)width, (long long)height, (long long)width, (long long)height);
    plot_printf(&b, "<rect width=\"%lld\" height=\"%lld\" fill=\"white\"/>\n", (long long)width, (long long)height);
    if (title) {
        plot_printf(&b, "<text class=\"title\" x=\"%lld\" y=\"22\" text-anchor=\"middle\" font-size=\"16\">", (long long)width / 2);
        plot_text(&b, title);
        buf_puts(&b, "</text>\n");
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t x0 = gap + (i % cols) * (cw + gap), y0 = top + (i / cols) * (ch + cap_h + gap);
        /* scale(s): one unit per image pixel; crispEdges keeps the pixels square */
        plot_printf(&b, "<g class=\"image\" data-shape=\"%lld %lld\" transform=\"translate(%lld %lld) scale(%lld)\" "
                        "shape-rendering=\"crispEdges\">\n",
                    (long long)h, (long long)w, (long long)x0, (long long)y0, (long long)s);
        const double *img = px + i * h * w;
        for (int64_t r = 0; r < h; r++)
            for (int64_t c0 = 0; c0 < w;) {
                /* a run of pixels of one colour; NaN and infinities are red */
                char col[8];
                int64_t c1 = c0;
                char prev[8] = "";
                for (; c1 < w; c1++) {
                    double v = img[r * w + c1];
                    if (!isfinite(v)) snprintf(col, sizeof col, "#ff0000");
                    else {
                        double f = vmax > vmin ? (v - vmin) / (vmax - vmin) : 0.5;
                        int g = (int)floor(255 * (f < 0 ? 0 : f > 1 ? 1 : f) + 0.5);
                        if (reversed) g = 255 - g;
                        snprintf(col, sizeof col, "#%02x%02x%02x", g, g, g);
                    }
                    if (c1 > c0 && strcmp(col, prev) != 0) break;
                    memcpy(prev, col, sizeof prev);
                }
                plot_printf(&b, "<rect x=\"%lld\" y=\"%lld\" width=\"%lld\" height=\"1\" fill=\"%s\"/>\n",
                            (long long)c0, (long long)r, (long long)(c1 - c0), prev);
                c0 = c1;
            }
        buf_puts(&b, "</g>\n");
        if (caps) {
            plot_printf(&b, "<text class=\"caption\" x=\"%lld\" y=\"%lld\" text-anchor=\"middle\">", (long long)(x0 + cw / 2),
                        (long long)(y0 + ch + 13));
            plot_text(&b, caps[i]);
            buf_puts(&b, "</text>\n");
        }
    }
    buf_puts(&b, "</svg>\n");
    if (plot_write(I, "imshow", path, &b, (int)width, (int)height)) goto out;
    *out = v_nil();
    rc = 0;
out:
    if (caps)
        for (int64_t i = 0; i < n; i++) free(caps[i]);
    free(caps);
    free(px);
    free(lt);
    free(b.s);
    return rc;
}

void builtins_imshow_register(Interp *I)
{
    interp_define_builtin_flags(I, "imshow", bi_imshow, NULL, BF_EFFECT, NULL);
}
