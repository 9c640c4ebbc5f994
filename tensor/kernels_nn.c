/* kernels_nn.c — conv2d (im2col + GEMM), max/avg pooling, and their backward
 * functions (nn_grad.h). Layout: NHWC activations, HWIO filters; padding
 * "valid"/"same" as TensorFlow defines them. float32 and float64 only. */
#include "tensor/blas.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/kernels.h"
#include "tensor/nn_grad.h"
#include "tensor/ops.h"

/* im2col works on batch chunks whose column matrix stays below this many
 * elements, so memory does not grow with the batch. */
#define COL_LIMIT ((int64_t)1 << 23)

/* Geometry shared by conv and pooling. For pooling, kh/kw is the window,
 * dh = dw = 1 and co = c. */
typedef struct geom {
    int64_t n, h, w, c;
    int64_t kh, kw, co;
    int64_t sh, sw, dh, dw;
    int64_t oh, ow, pt, pl;
} geom;

/* TensorFlow's output size and leading pad for one spatial axis. */
static bool out_size(int64_t in, int64_t k, int64_t d, int64_t s, bool same, int64_t *out,
                     int64_t *pad) {
    int64_t keff = (k - 1) * d + 1;
    if (same) {
        *out = (in + s - 1) / s;
        int64_t total = (*out - 1) * s + keff - in;
        *pad = total > 0 ? total / 2 : 0;
        return true;
    }
    *pad = 0;
    if (in < keff) return false;
    *out = (in - keff) / s + 1;
    return true;
}

static int64_t attr_or(const tfe_attrs *at, int i, int64_t dflt) {
    return i < at->nints ? at->ints[i] : dflt;
}

static int check_float(const char *op, const tfe_tensor *t) {
    if (t->dtype != TFE_FLOAT32 && t->dtype != TFE_FLOAT64) {
        tfe_error_set("%s: expected float32 or float64, got %s", op, dtype_name(t->dtype));
        return -1;
    }
    return 0;
}

/* Fills g from the input shape xs, the filter shape ws (NULL for pooling)
 * and the attributes; errors name the op and the shapes. */
static int make_geom(const char *op, const int64_t *xs, const int64_t *ws, const tfe_attrs *at,
                     geom *g) {
    char b1[200], b2[200];
    bool pool = ws == NULL;
    *g = (geom){.n = xs[0], .h = xs[1], .w = xs[2], .c = xs[3], .dh = 1, .dw = 1};
    if (pool) {
        if (at->nints < 2) {
            tfe_error_set("%s: the window size is required", op);
            return -1;
        }
        g->kh = at->ints[0];
        g->kw = at->ints[1];
        g->co = g->c;
        if (g->kh < 1 || g->kw < 1) {
            tfe_error_set("%s: window must be positive, got (%lld, %lld)", op, (long long)g->kh,
                          (long long)g->kw);
            return -1;
        }
        g->sh = attr_or(at, 2, g->kh);
        g->sw = attr_or(at, 3, g->kw);
    } else {
        g->kh = ws[0];
        g->kw = ws[1];
        g->co = ws[3];
        if (ws[2] != g->c) {
            tfe_error_set("%s: input channels %lld do not match filter input channels %lld "
                          "(input %s, filter %s)", op, (long long)g->c, (long long)ws[2],
                          shape_str(4, xs, b1), shape_str(4, ws, b2));
            return -1;
        }
        if (g->kh < 1 || g->kw < 1) {
            tfe_error_set("%s: filter height and width must be positive (filter %s)", op,
                          shape_str(4, ws, b2));
            return -1;
        }
        g->sh = attr_or(at, 0, 1);
        g->sw = attr_or(at, 1, 1);
        g->dh = attr_or(at, 2, 1);
        g->dw = attr_or(at, 3, 1);
        if (g->dh < 1 || g->dw < 1) {
            tfe_error_set("%s: dilations must be positive, got (%lld, %lld)", op,
                          (long long)g->dh, (long long)g->dw);
            return -1;
        }
    }
    if (g->sh < 1 || g->sw < 1) {
        tfe_error_set("%s: strides must be positive, got (%lld, %lld)", op, (long long)g->sh,
                      (long long)g->sw);
        return -1;
    }
    int64_t padding = attr_or(at, 4, 0);
    if (padding != 0 && padding != 1) {
        tfe_error_set("%s: padding must be 0 (\"valid\") or 1 (\"same\"), got %lld", op,
                      (long long)padding);
        return -1;
    }
    bool same = padding == 1;
    if (!out_size(g->h, g->kh, g->dh, g->sh, same, &g->oh, &g->pt) ||
        !out_size(g->w, g->kw, g->dw, g->sw, same, &g->ow, &g->pl)) {
        tfe_error_set("%s: %s (%lld, %lld) with dilation (%lld, %lld) does not fit in the input "
                      "(%lld, %lld) with padding \"valid\" (input %s)", op,
                      pool ? "window" : "filter", (long long)g->kh, (long long)g->kw,
                      (long long)g->dh, (long long)g->dw, (long long)g->h, (long long)g->w,
                      shape_str(4, xs, b1));
        return -1;
    }
    return 0;
}

static int check_rank4(const char *op, const char *what, const char *layout, const tfe_tensor *t) {
    char b[200];
    if (t->rank != 4) {
        tfe_error_set("%s: %s must have rank 4 %s, got shape %s", op, what, layout,
                      shape_str(t->rank, t->shape, b));
        return -1;
    }
    return 0;
}

static int conv_check(const tfe_opcall *c, geom *g) {
    const tfe_tensor *x = c->in[0], *w = c->in[1];
    if (check_rank4("conv2d", "input", "(N, H, W, C)", x) < 0 ||
        check_rank4("conv2d", "filter", "(KH, KW, Cin, Cout)", w) < 0 ||
        check_float("conv2d", x) < 0 || check_float("conv2d", w) < 0)
        return -1;
    if (x->dtype != w->dtype) {
        tfe_error_set("conv2d: input dtype %s does not match filter dtype %s",
                      dtype_name(x->dtype), dtype_name(w->dtype));
        return -1;
    }
    return make_geom("conv2d", x->shape, w->shape, c->at, g);
}

int infer_conv2d(const tfe_opcall *c, tfe_meta *m) {
    geom g;
    if (conv_check(c, &g) < 0) return -1;
    *m = (tfe_meta){.dtype = c->in[0]->dtype, .rank = 4, .shape = {g.n, g.oh, g.ow, g.co}};
    return 0;
}

static const char *pool_name(const tfe_opcall *c) { return tfe_ops[c->op].name; }

static int pool_check(const tfe_opcall *c, geom *g) {
    const char *op = pool_name(c);
    const tfe_tensor *x = c->in[0];
    if (check_rank4(op, "input", "(N, H, W, C)", x) < 0 || check_float(op, x) < 0) return -1;
    return make_geom(op, x->shape, NULL, c->at, g);
}

int infer_pool2d(const tfe_opcall *c, tfe_meta *m) {
    geom g;
    if (pool_check(c, &g) < 0) return -1;
    *m = (tfe_meta){.dtype = c->in[0]->dtype, .rank = 4, .shape = {g.n, g.oh, g.ow, g.c}};
    return 0;
}

/* ---- im2col / col2im ------------------------------------------------------- */

/* col row r (r = (n - n0)*oh*ow + oh_i*ow + ow_i) holds, for each (kh, kw),
 * the c input channels under that filter tap, zeros where it falls in the
 * padding: exactly the rows of an HWIO filter viewed as (KH*KW*Cin, Cout). */
typedef struct col_ctx {
    const geom *g;
    const char *x;     /* contiguous NHWC input */
    char *col;
    int64_t n0;        /* first batch of this chunk */
    size_t es;
} col_ctx;

static void im2col_range(int64_t r0, int64_t r1, void *vctx) {
    col_ctx *k = vctx;
    const geom *g = k->g;
    size_t chan = (size_t)g->c * k->es;
    int64_t krow = g->kh * g->kw * g->c;
    for (int64_t r = r0; r < r1; r++) {
        int64_t n = k->n0 + r / (g->oh * g->ow), rem = r % (g->oh * g->ow);
        int64_t ih0 = (rem / g->ow) * g->sh - g->pt, iw0 = (rem % g->ow) * g->sw - g->pl;
        char *dst = k->col + (size_t)(r * krow) * k->es;
        for (int64_t a = 0; a < g->kh; a++) {
            int64_t ih = ih0 + a * g->dh;
            for (int64_t b = 0; b < g->kw; b++, dst += chan) {
                int64_t iw = iw0 + b * g->dw;
                if (ih < 0 || ih >= g->h || iw < 0 || iw >= g->w) memset(dst, 0, chan);
                else memcpy(dst, k->x + (size_t)(((n * g->h + ih) * g->w + iw) * g->c) * k->es, chan);
            }
        }
    }
}

/* dx[n] += col2im(dcol) for each batch n of the chunk; batches are disjoint,
 * so each task owns its images. */
#define COL2IM(T)                                                                   \
    for (int64_t n = n0; n < n1; n++) {                                             \
        T *dx = (T *)k->x_out + (size_t)(k->n0 + n) * g->h * g->w * g->c;           \
        const T *col = (const T *)k->col + (size_t)(n * g->oh * g->ow) * krow;      \
        for (int64_t p = 0; p < g->oh * g->ow; p++, col += krow) {                  \
            int64_t ih0 = (p / g->ow) * g->sh - g->pt, iw0 = (p % g->ow) * g->sw - g->pl; \
            const T *s = col;                                                       \
            for (int64_t a = 0; a < g->kh; a++) {                                   \
                int64_t ih = ih0 + a * g->dh;                                       \
                for (int64_t b = 0; b < g->kw; b++, s += g->c) {                    \
                    int64_t iw = iw0 + b * g->dw;                                   \
                    if (ih < 0 || ih >= g->h || iw < 0 || iw >= g->w) continue;     \
                    T *d = dx + (ih * g->w + iw) * g->c;                            \
                    for (int64_t ci = 0; ci < g->c; ci++) d[ci] += s[ci];           \
                }                                                                   \
            }                                                                       \
        }                                                                           \
    }

typedef struct col2im_ctx {
    const geom *g;
    const char *col;
    char *x_out;
    int64_t n0;
    bool f64;
} col2im_ctx;

static void col2im_range(int64_t n0, int64_t n1, void *vctx) {
    col2im_ctx *k = vctx;
    const geom *g = k->g;
    int64_t krow = g->kh * g->kw * g->c;
    if (k->f64) { COL2IM(double) } else { COL2IM(float) }
}

/* C (m x n) = op(A) op(B) (+ C when accumulate), row-major, either float type. */
static void gemm(bool f64, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
                 int64_t lda, const void *b, int64_t ldb, bool accumulate, void *c, int64_t ldc) {
    if (m == 0 || n == 0) return;
    if (k == 0) {
        if (!accumulate) memset(c, 0, (size_t)(m * n) * (f64 ? 8 : 4));
        return;
    }
    enum CBLAS_TRANSPOSE tra = ta ? CblasTrans : CblasNoTrans, trb = tb ? CblasTrans : CblasNoTrans;
    if (f64)
        cblas_dgemm(CblasRowMajor, tra, trb, (int)m, (int)n, (int)k, 1.0, a, (int)lda, b, (int)ldb,
                    accumulate ? 1.0 : 0.0, c, (int)ldc);
    else
        cblas_sgemm(CblasRowMajor, tra, trb, (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb,
                    accumulate ? 1.0f : 0.0f, c, (int)ldc);
}

/* A 1x1 filter with stride 1 and no padding needs no im2col: x is the column
 * matrix (while its row count fits BLAS's int). */
static bool is_pointwise(const geom *g) {
    return g->kh == 1 && g->kw == 1 && g->sh == 1 && g->sw == 1 && g->pt == 0 && g->pl == 0 &&
           g->n * g->oh * g->ow <= INT32_MAX;
}

static int64_t chunk_batches(const geom *g) {
    int64_t per = g->oh * g->ow * g->kh * g->kw * g->c;
    int64_t nb = per > 0 ? COL_LIMIT / per : g->n;
    return nb < 1 ? 1 : nb > g->n ? g->n : nb;
}

static int64_t im2col_grain(const geom *g) {
    int64_t per = g->kh * g->kw * g->c;
    int64_t gr = 16384 / (per ? per : 1);
    return gr < 1 ? 1 : gr;
}

static char *col_alloc(const geom *g, int64_t nb, size_t es, size_t *nbytes) {
    *nbytes = (size_t)(nb * g->oh * g->ow * g->kh * g->kw * g->c) * es;
    if (*nbytes == 0) *nbytes = es;
    return tfe_alloc(*nbytes);
}

/* out (N, OH, OW, Cout) = conv(x, w), x contiguous. */
static int conv_forward(const geom *g, const tfe_tensor *x, const tfe_tensor *w, tfe_tensor *out) {
    bool f64 = x->dtype == TFE_FLOAT64;
    size_t es = dtype_size(x->dtype);
    int64_t K = g->kh * g->kw * g->c, P = g->oh * g->ow;
    if (g->n * P * g->co == 0) return 0;
    if (is_pointwise(g)) {
        gemm(f64, false, false, g->n * P, g->co, K, tensor_data(x), K ? K : 1, tensor_data(w),
             g->co, false, tensor_data(out), g->co);
        return 0;
    }
    int64_t nb = chunk_batches(g);
    size_t colbytes;
    char *col = col_alloc(g, nb, es, &colbytes);
    if (!col) return -1;
    for (int64_t n0 = 0; n0 < g->n; n0 += nb) {
        if (kn_poll() < 0) {
            tfe_free(col, colbytes);
            return -1;
        }
        int64_t cnt = g->n - n0 < nb ? g->n - n0 : nb;
        col_ctx k = {.g = g, .x = tensor_data(x), .col = col, .n0 = n0, .es = es};
        tfe_parallel_for(cnt * P, im2col_grain(g), im2col_range, &k);
        gemm(f64, false, false, cnt * P, g->co, K, col, K ? K : 1, tensor_data(w), g->co, false,
             tensor_data(out) + (size_t)(n0 * P * g->co) * es, g->co);
    }
    tfe_free(col, colbytes);
    return 0;
}

int k_conv2d(const tfe_opcall *c) {
    geom g;
    if (conv_check(c, &g) < 0) return -1;
    tfe_tensor *x = tensor_contiguous(c->in[0]);
    if (!x) return -1;
    tfe_tensor *w = tensor_contiguous(c->in[1]);
    if (!w) {
        tensor_decref(x);
        return -1;
    }
    int rc = conv_forward(&g, x, w, c->out[0]);
    tensor_decref(w);
    tensor_decref(x);
    return rc;
}

/* ---- conv2d backward -------------------------------------------------------- */

static int check_dy(const char *op, const geom *g, const tfe_tensor *dy, tfe_dtype dt) {
    char b1[200], b2[200];
    int64_t want[4] = {g->n, g->oh, g->ow, g->co};
    bool ok = dy->rank == 4;
    for (int i = 0; ok && i < 4; i++) ok = dy->shape[i] == want[i];
    if (!ok) {
        tfe_error_set("%s gradient: dy shape %s does not match the output shape %s", op,
                      shape_str(dy->rank, dy->shape, b1), shape_str(4, want, b2));
        return -1;
    }
    if (dy->dtype != dt) {
        tfe_error_set("%s gradient: dy dtype %s does not match %s", op, dtype_name(dy->dtype),
                      dtype_name(dt));
        return -1;
    }
    return 0;
}

tfe_tensor *tfe_conv2d_grad_input(tfe_tensor *dy, tfe_tensor *w, const int64_t x_shape[4],
                                  const tfe_attrs *at) {
    geom g;
    if (check_rank4("conv2d", "filter", "(KH, KW, Cin, Cout)", w) < 0 ||
        check_float("conv2d", w) < 0 || make_geom("conv2d", x_shape, w->shape, at, &g) < 0 ||
        check_dy("conv2d", &g, dy, w->dtype) < 0)
        return NULL;
    bool f64 = w->dtype == TFE_FLOAT64;
    size_t es = dtype_size(w->dtype);
    int64_t K = g.kh * g.kw * g.c, P = g.oh * g.ow;
    tfe_tensor *dx = tensor_zeros(w->dtype, 4, x_shape);
    if (!dx || tensor_numel(dx) == 0 || P * g.co == 0) return dx;
    tfe_tensor *dyc = tensor_contiguous(dy), *wc = dyc ? tensor_contiguous(w) : NULL;
    if (!wc) goto fail;
    if (is_pointwise(&g)) {
        /* dx = dy (N*P, Cout) @ W^T (Cout, Cin) */
        gemm(f64, false, true, g.n * P, K, g.co, tensor_data(dyc), g.co, tensor_data(wc), g.co,
             false, tensor_data(dx), K);
    } else {
        int64_t nb = chunk_batches(&g);
        size_t colbytes;
        char *col = col_alloc(&g, nb, es, &colbytes);
        if (!col) goto fail;
        for (int64_t n0 = 0; n0 < g.n; n0 += nb) {
            if (kn_poll() < 0) {
                tfe_free(col, colbytes);
                goto fail;
            }
            int64_t cnt = g.n - n0 < nb ? g.n - n0 : nb;
            gemm(f64, false, true, cnt * P, K, g.co,
                 tensor_data(dyc) + (size_t)(n0 * P * g.co) * es, g.co, tensor_data(wc), g.co,
                 false, col, K);
            col2im_ctx k = {.g = &g, .col = col, .x_out = tensor_data(dx), .n0 = n0, .f64 = f64};
            tfe_parallel_for(cnt, 1, col2im_range, &k);
        }
        tfe_free(col, colbytes);
    }
    tensor_decref(wc);
    tensor_decref(dyc);
    return dx;
fail:
    if (wc) tensor_decref(wc);
    if (dyc) tensor_decref(dyc);
    tensor_decref(dx);
    return NULL;
}

tfe_tensor *tfe_conv2d_grad_filter(tfe_tensor *x, tfe_tensor *dy, const int64_t w_shape[4],
                                   const tfe_attrs *at) {
    geom g;
    if (check_rank4("conv2d", "input", "(N, H, W, C)", x) < 0 || check_float("conv2d", x) < 0 ||
        make_geom("conv2d", x->shape, w_shape, at, &g) < 0 ||
        check_dy("conv2d", &g, dy, x->dtype) < 0)
        return NULL;
    bool f64 = x->dtype == TFE_FLOAT64;
    size_t es = dtype_size(x->dtype);
    int64_t K = g.kh * g.kw * g.c, P = g.oh * g.ow;
    tfe_tensor *dw = tensor_zeros(x->dtype, 4, w_shape);
    if (!dw || K * g.co == 0 || g.n * P == 0) return dw;
    tfe_tensor *xc = tensor_contiguous(x), *dyc = xc ? tensor_contiguous(dy) : NULL;
    if (!dyc) goto fail;
    if (is_pointwise(&g)) {
        /* dW (Cin, Cout) = x^T (Cin, N*P) @ dy (N*P, Cout) */
        gemm(f64, true, false, K, g.co, g.n * P, tensor_data(xc), K, tensor_data(dyc), g.co, false,
             tensor_data(dw), g.co);
    } else {
        int64_t nb = chunk_batches(&g);
        size_t colbytes;
        char *col = col_alloc(&g, nb, es, &colbytes);
        if (!col) goto fail;
        for (int64_t n0 = 0; n0 < g.n; n0 += nb) {
            if (kn_poll() < 0) {
                tfe_free(col, colbytes);
                goto fail;
            }
            int64_t cnt = g.n - n0 < nb ? g.n - n0 : nb;
            col_ctx k = {.g = &g, .x = tensor_data(xc), .col = col, .n0 = n0, .es = es};
            tfe_parallel_for(cnt * P, im2col_grain(&g), im2col_range, &k);
            gemm(f64, true, false, K, g.co, cnt * P, col, K,
                 tensor_data(dyc) + (size_t)(n0 * P * g.co) * es, g.co, n0 > 0, tensor_data(dw),
                 g.co);
        }
        tfe_free(col, colbytes);
    }
    tensor_decref(dyc);
    tensor_decref(xc);
    return dw;
fail:
    if (dyc) tensor_decref(dyc);
    if (xc) tensor_decref(xc);
    tensor_decref(dw);
    return NULL;
}

/* ---- pooling ------------------------------------------------------------------ */

typedef struct pool_ctx {
    const geom *g;
    const char *x;    /* contiguous input (forward, max backward) */
    const char *dy;   /* contiguous dy (backward) */
    char *out;        /* forward: output; backward: dx (zeroed) */
    bool f64, max;
} pool_ctx;

/* The clipped window of output cell (oh_i, ow_i): rows [h0, h1), cols [w0, w1).
 * With TensorFlow's padding every window holds at least one valid cell. */
#define WINDOW(g, oi, oj)                                                     \
    int64_t h0 = (oi) * (g)->sh - (g)->pt, w0 = (oj) * (g)->sw - (g)->pl;        \
    int64_t h1 = h0 + (g)->kh, w1 = w0 + (g)->kw;                              \
    if (h0 < 0) h0 = 0;                                                       \
    if (w0 < 0) w0 = 0;                                                       \
    if (h1 > (g)->h) h1 = (g)->h;                                             \
    if (w1 > (g)->w) w1 = (g)->w;

/* Forward: tasks are output rows r = n*oh + oh_i. Max propagates NaN. */
#define POOL_FWD(T)                                                               \
    for (int64_t r = r0; r < r1; r++) {                                           \
        int64_t n = r / g->oh, oi = r % g->oh;                                    \
        const T *x = (const T *)k->x + (size_t)n * g->h * g->w * g->c;            \
        T *o = (T *)k->out + (size_t)r * g->ow * g->c;                            \
        for (int64_t oj = 0; oj < g->ow; oj++, o += g->c) {                       \
            WINDOW(g, oi, oj)                                                     \
            for (int64_t ci = 0; ci < g->c; ci++) o[ci] = k->max ? -(T)INFINITY : 0; \
            for (int64_t i = h0; i < h1; i++)                                     \
                for (int64_t j = w0; j < w1; j++) {                               \
                    const T *s = x + (i * g->w + j) * g->c;                       \
                    if (k->max) {                                                 \
                        for (int64_t ci = 0; ci < g->c; ci++)                     \
                            if (s[ci] > o[ci] || isnan(s[ci])) o[ci] = isnan(o[ci]) ? o[ci] : s[ci]; \
                    } else {                                                      \
                        for (int64_t ci = 0; ci < g->c; ci++) o[ci] += s[ci];     \
                    }                                                             \
                }                                                                 \
            if (!k->max) {                                                        \
                T inv = (T)1 / (T)((h1 - h0) * (w1 - w0));                        \
                for (int64_t ci = 0; ci < g->c; ci++) o[ci] *= inv;               \
            }                                                                     \
        }                                                                         \
    }

static void pool_fwd_range(int64_t r0, int64_t r1, void *vctx) {
    pool_ctx *k = vctx;
    const geom *g = k->g;
    if (k->f64) { POOL_FWD(double) } else { POOL_FWD(float) }
}

static int pool_forward(const tfe_opcall *c, bool max) {
    geom g;
    if (pool_check(c, &g) < 0) return -1;
    if (g.n * g.oh * g.ow * g.c == 0) return 0;
    tfe_tensor *x = tensor_contiguous(c->in[0]);
    if (!x) return -1;
    pool_ctx k = {.g = &g, .x = tensor_data(x), .out = tensor_data(c->out[0]),
                  .f64 = x->dtype == TFE_FLOAT64, .max = max};
    int64_t work = g.ow * g.c * g.kh * g.kw;
    int64_t grain = 32768 / (work ? work : 1);
    tfe_parallel_for(g.n * g.oh, grain < 1 ? 1 : grain, pool_fwd_range, &k);
    tensor_decref(x);
    return 0;
}

int k_max_pool2d(const tfe_opcall *c) { return pool_forward(c, true); }
int k_avg_pool2d(const tfe_opcall *c) { return pool_forward(c, false); }

/* Backward: tasks are batches n, whose dx images are disjoint. Max sends each
 * dy cell to the first maximum of its window (NaN counts as the maximum). */
#define POOL_BWD(T)                                                                 \
    for (int64_t n = n0; n < n1; n++) {                                             \
        size_t img = (size_t)n * g->h * g->w * g->c;                                \
        const T *x = (const T *)k->x + img;                                         \
        T *dx = (T *)k->out + img;                                                  \
        const T *dy = (const T *)k->dy + (size_t)n * g->oh * g->ow * g->c;          \
        for (int64_t oi = 0; oi < g->oh; oi++)                                      \
            for (int64_t oj = 0; oj < g->ow; oj++, dy += g->c) {                    \
                WINDOW(g, oi, oj)                                                   \
                if (!k->max) {                                                      \
                    T inv = (T)1 / (T)((h1 - h0) * (w1 - w0));                      \
                    for (int64_t i = h0; i < h1; i++)                               \
                        for (int64_t j = w0; j < w1; j++) {                         \
                            T *d = dx + (i * g->w + j) * g->c;                      \
                            for (int64_t ci = 0; ci < g->c; ci++) d[ci] += dy[ci] * inv; \
                        }                                                           \
                    continue;                                                       \
                }                                                                   \
                for (int64_t ci = 0; ci < g->c; ci++) {                             \
                    int64_t best = h0 * g->w + w0;                                  \
                    T bv = x[best * g->c + ci];                                     \
                    for (int64_t i = h0; i < h1 && !isnan(bv); i++)                 \
                        for (int64_t j = w0; j < w1; j++) {                         \
                            T v = x[(i * g->w + j) * g->c + ci];                    \
                            if (v > bv || isnan(v)) {                               \
                                bv = v;                                             \
                                best = i * g->w + j;                                \
                                if (isnan(v)) break;                                \
                            }                                                       \
                        }                                                           \
                    dx[best * g->c + ci] += dy[ci];                                 \
                }                                                                   \
            }                                                                       \
    }

static void pool_bwd_range(int64_t n0, int64_t n1, void *vctx) {
    pool_ctx *k = vctx;
    const geom *g = k->g;
    if (k->f64) { POOL_BWD(double) } else { POOL_BWD(float) }
}

static tfe_tensor *pool_backward(const char *op, bool max, tfe_tensor *x, tfe_tensor *dy,
                                 const int64_t *x_shape, const tfe_attrs *at) {
    geom g;
    if (check_float(op, dy) < 0 || make_geom(op, x_shape, NULL, at, &g) < 0 ||
        check_dy(op, &g, dy, x ? x->dtype : dy->dtype) < 0)
        return NULL;
    tfe_tensor *dx = tensor_zeros(dy->dtype, 4, x_shape);
    if (!dx || tensor_numel(dy) == 0) return dx;
    tfe_tensor *xc = x ? tensor_contiguous(x) : NULL;
    tfe_tensor *dyc = tensor_contiguous(dy);
    if ((x && !xc) || !dyc) {
        if (xc) tensor_decref(xc);
        if (dyc) tensor_decref(dyc);
        tensor_decref(dx);
        return NULL;
    }
    pool_ctx k = {.g = &g, .x = xc ? tensor_data(xc) : NULL, .dy = tensor_data(dyc),
                  .out = tensor_data(dx), .f64 = dy->dtype == TFE_FLOAT64, .max = max};
    tfe_parallel_for(g.n, 1, pool_bwd_range, &k);
    if (xc) tensor_decref(xc);
    tensor_decref(dyc);
    return dx;
}

tfe_tensor *tfe_max_pool2d_grad(tfe_tensor *x, tfe_tensor *dy, const tfe_attrs *at) {
    if (check_rank4("max_pool2d", "input", "(N, H, W, C)", x) < 0 ||
        check_float("max_pool2d", x) < 0)
        return NULL;
    return pool_backward("max_pool2d", true, x, dy, x->shape, at);
}

tfe_tensor *tfe_avg_pool2d_grad(tfe_tensor *dy, const int64_t x_shape[4], const tfe_attrs *at) {
    return pool_backward("avg_pool2d", false, NULL, dy, x_shape, at);
}
