/* kernels_nn_grad.c — the backward ops of conv2d and pooling (ops_nn.def):
 * infer rules and CPU kernels. The kernels call the backward functions of
 * nn_grad.h in their writing-into form (kn_*_into, kernels_nn.c);
 * max_pool2d_select (the adjoint of max_pool2d_grad) is here. */
#include <math.h>
#include <string.h>

#include "tensor/kernels.h"
#include "tensor/nn_grad.h"
#include "tensor/ops.h"

#define NAME kn_opname(c)

/* Geometry of a conv (ws: the filter shape) or a pool (ws NULL) over an input
 * of shape xs under attributes ints[0..4] (all given), as TensorFlow defines
 * it: the output shape (N, OH, OW, C) and the leading pads. */
typedef struct bgeom {
    int64_t oshape[4];
    int64_t kh, kw, sh, sw, pt, pl;
} bgeom;


static int bgeom_of(const tfe_opcall *c, const int64_t *xs, const int64_t *ws, bgeom *g) {
    const int64_t *a = c->at->ints;
    char b1[200], b2[200];
    if (c->at->nints < 5) {
        tfe_error_set("%s: attributes ints[0..4] are required", NAME);
        return -1;
    }
    for (int i = 0; i < 4; i++)
        if (xs[i] < 0 || (ws && ws[i] < 0)) {
            tfe_error_set("%s: negative dimension in shape %s", NAME,
                          shape_str(4, ws && ws[i] < 0 ? ws : xs, b1));
            return -1;
        }
    int64_t dh = 1, dw = 1;
    if (ws) {
        g->kh = ws[0];
        g->kw = ws[1];
        g->sh = a[0];
        g->sw = a[1];
        dh = a[2];
        dw = a[3];
        if (ws[2] != xs[3]) {
            tfe_error_set("%s: input channels %lld do not match filter input channels %lld "
                          "(input %s, filter %s)", NAME, (long long)xs[3], (long long)ws[2],
                          shape_str(4, xs, b1), shape_str(4, ws, b2));
            return -1;
        }
    } else {
        g->kh = a[0];
        g->kw = a[1];
        g->sh = a[2];
        g->sw = a[3];
    }
    if (g->kh < 1 || g->kw < 1 || g->sh < 1 || g->sw < 1 || dh < 1 || dw < 1 ||
        (a[4] != 0 && a[4] != 1)) {
        tfe_error_set("%s: invalid window, stride, dilation or padding", NAME);
        return -1;
    }
    g->oshape[0] = xs[0];
    g->oshape[3] = ws ? ws[3] : xs[3];
    if (!kn_conv_out_size(xs[1], g->kh, dh, g->sh, a[4] == 1, &g->oshape[1], &g->pt) ||
        !kn_conv_out_size(xs[2], g->kw, dw, g->sw, a[4] == 1, &g->oshape[2], &g->pl)) {
        tfe_error_set("%s: window (%lld, %lld) does not fit in the input %s with padding \"valid\"",
                      NAME, (long long)g->kh, (long long)g->kw, shape_str(4, xs, b1));
        return -1;
    }
    return 0;
}

static int check4(const tfe_opcall *c, const tfe_tensor *t, const char *what) {
    char b[200];
    if (t->rank != 4) {
        tfe_error_set("%s: %s must have rank 4, got shape %s", NAME, what, shape_str(t->rank, t->shape, b));
        return -1;
    }
    if (t->dtype != TFE_FLOAT32 && t->dtype != TFE_FLOAT64) {
        tfe_error_set("%s: %s must be float32 or float64, got %s", NAME, what, dtype_name(t->dtype));
        return -1;
    }
    return 0;
}

static int same_dtype(const tfe_opcall *c, const tfe_tensor *a, const tfe_tensor *b) {
    if (a->dtype != b->dtype) {
        tfe_error_set("%s: dtypes %s and %s differ", NAME, dtype_name(a->dtype), dtype_name(b->dtype));
        return -1;
    }
    return 0;
}

/* t must have shape want (what: the argument's name) */
static int check_shape_is(const tfe_opcall *c, const tfe_tensor *t, const int64_t *want,
                          const char *what) {
    bool ok = t->rank == 4;
    for (int i = 0; ok && i < 4; i++) ok = t->shape[i] == want[i];
    if (!ok) {
        char b1[200], b2[200];
        tfe_error_set("%s: %s has shape %s, expected %s", NAME, what, shape_str(t->rank, t->shape, b1),
                      shape_str(4, want, b2));
        return -1;
    }
    return 0;
}

static int need_shape_attr(const tfe_opcall *c) {
    if (c->at->nints < 12) {
        tfe_error_set("%s: the shape attribute ints[8..11] is required", NAME);
        return -1;
    }
    return 0;
}

/* ---- infer rules ----------------------------------------------------------------- */

/* dy, w -> dx of shape ints[8..11] */
int infer_conv2d_backprop_input(const tfe_opcall *c, tfe_meta *m) {
    tfe_tensor *dy = c->in[0], *w = c->in[1];
    bgeom g;
    if (check4(c, dy, "dy") || check4(c, w, "filter") || same_dtype(c, dy, w) ||
        need_shape_attr(c) || bgeom_of(c, c->at->ints + 8, w->shape, &g) ||
        check_shape_is(c, dy, g.oshape, "dy"))
        return -1;
    kn_meta_set(m, w->dtype, false, 4, c->at->ints + 8);
    return 0;
}

/* x, dy -> dw of shape ints[8..11] */
int infer_conv2d_backprop_filter(const tfe_opcall *c, tfe_meta *m) {
    tfe_tensor *x = c->in[0], *dy = c->in[1];
    bgeom g;
    if (check4(c, x, "input") || check4(c, dy, "dy") || same_dtype(c, x, dy) ||
        need_shape_attr(c) || bgeom_of(c, x->shape, c->at->ints + 8, &g) ||
        check_shape_is(c, dy, g.oshape, "dy"))
        return -1;
    kn_meta_set(m, x->dtype, false, 4, c->at->ints + 8);
    return 0;
}

/* x, dy -> dx of x's shape */
int infer_max_pool2d_grad(const tfe_opcall *c, tfe_meta *m) {
    tfe_tensor *x = c->in[0], *dy = c->in[1];
    bgeom g;
    if (check4(c, x, "input") || check4(c, dy, "dy") || same_dtype(c, x, dy) ||
        bgeom_of(c, x->shape, NULL, &g) || check_shape_is(c, dy, g.oshape, "dy"))
        return -1;
    kn_meta_set(m, x->dtype, false, 4, x->shape);
    return 0;
}

/* dy -> dx of shape ints[8..11] */
int infer_avg_pool2d_grad(const tfe_opcall *c, tfe_meta *m) {
    tfe_tensor *dy = c->in[0];
    bgeom g;
    if (check4(c, dy, "dy") || need_shape_attr(c) || bgeom_of(c, c->at->ints + 8, NULL, &g) ||
        check_shape_is(c, dy, g.oshape, "dy"))
        return -1;
    kn_meta_set(m, dy->dtype, false, 4, c->at->ints + 8);
    return 0;
}

/* x, h (x's shape) -> the pooled shape */
int infer_max_pool2d_select(const tfe_opcall *c, tfe_meta *m) {
    tfe_tensor *x = c->in[0], *h = c->in[1];
    bgeom g;
    if (check4(c, x, "input") || check4(c, h, "h") || same_dtype(c, x, h) ||
        check_shape_is(c, h, x->shape, "h") || bgeom_of(c, x->shape, NULL, &g))
        return -1;
    kn_meta_set(m, x->dtype, false, 4, g.oshape);
    return 0;
}

/* ---- kernels ----------------------------------------------------------------------- */


int k_conv2d_backprop_input(const tfe_opcall *c) {
    return kn_conv2d_grad_input_into(c->in[0], c->in[1], c->at->ints + 8, c->at, c->out[0]);
}

int k_conv2d_backprop_filter(const tfe_opcall *c) {
    return kn_conv2d_grad_filter_into(c->in[0], c->in[1], c->at->ints + 8, c->at, c->out[0]);
}

int k_max_pool2d_grad(const tfe_opcall *c) {
    return kn_max_pool2d_grad_into(c->in[0], c->in[1], c->at, c->out[0]);
}

int k_avg_pool2d_grad(const tfe_opcall *c) {
    return kn_avg_pool2d_grad_into(c->in[0], c->at->ints + 8, c->at, c->out[0]);
}

/* max_pool2d_select: out[n, i, j, ch] = h at the first maximum of x in window
 * (i, j) — the same cell max_pool2d_grad sends dy to (NaN counts as the
 * maximum), which makes the two ops adjoint. Tasks are batch images. */
typedef struct sel_ctx {
    const bgeom *g;
    int64_t h, w, ch;
    const char *x, *hv;
    char *out;
    bool f64;
} sel_ctx;

#define SELECT(T)                                                                    \
    for (int64_t n = n0; n < n1; n++) {                                              \
        const T *x = (const T *)k->x + (size_t)n * k->h * k->w * k->ch;              \
        const T *hv = (const T *)k->hv + (size_t)n * k->h * k->w * k->ch;            \
        T *o = (T *)k->out + (size_t)n * g->oshape[1] * g->oshape[2] * k->ch;        \
        for (int64_t oi = 0; oi < g->oshape[1]; oi++)                                \
            for (int64_t oj = 0; oj < g->oshape[2]; oj++, o += k->ch) {              \
                int64_t h0 = oi * g->sh - g->pt, w0 = oj * g->sw - g->pl;            \
                int64_t h1 = h0 + g->kh, w1 = w0 + g->kw;                            \
                if (h0 < 0) h0 = 0;                                                  \
                if (w0 < 0) w0 = 0;                                                  \
                if (h1 > k->h) h1 = k->h;                                            \
                if (w1 > k->w) w1 = k->w;                                            \
                for (int64_t ci = 0; ci < k->ch; ci++) {                             \
                    int64_t best = h0 * k->w + w0;                                   \
                    T bv = x[best * k->ch + ci];                                     \
                    for (int64_t i = h0; i < h1 && !isnan(bv); i++)                  \
                        for (int64_t j = w0; j < w1; j++) {                          \
                            T v = x[(i * k->w + j) * k->ch + ci];                    \
                            if (v > bv || isnan(v)) {                                \
                                bv = v;                                              \
                                best = i * k->w + j;                                 \
                                if (isnan(v)) break;                                 \
                            }                                                        \
                        }                                                            \
                    o[ci] = hv[best * k->ch + ci];                                   \
                }                                                                    \
            }                                                                        \
    }

static void select_range(int64_t n0, int64_t n1, void *vctx) {
    sel_ctx *k = vctx;
    const bgeom *g = k->g;
    if (k->f64) { SELECT(double) } else { SELECT(float) }
}

int k_max_pool2d_select(const tfe_opcall *c) {
    bgeom g;
    if (bgeom_of(c, c->in[0]->shape, NULL, &g)) return -1;
    if (tensor_numel(c->out[0]) == 0) return 0;
    tfe_tensor *x = tensor_contiguous(c->in[0]);
    tfe_tensor *h = x ? tensor_contiguous(c->in[1]) : NULL;
    if (!h) {
        if (x) tensor_decref(x);
        return -1;
    }
    sel_ctx k = {.g = &g, .h = x->shape[1], .w = x->shape[2], .ch = x->shape[3],
                 .x = tensor_data(x), .hv = tensor_data(h), .out = tensor_data(c->out[0]),
                 .f64 = x->dtype == TFE_FLOAT64};
    tfe_parallel_for(x->shape[0], 1, select_range, &k);
    tensor_decref(h);
    tensor_decref(x);
    return 0;
}
