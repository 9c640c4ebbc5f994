/* kernels_nn.c — conv2d (im2col + GEMM), max/avg pooling, and their backward
 * functions (nn_grad.h). Layout: NHWC activations, HWIO filters; padding
 * "valid"/"same" as TensorFlow defines them. float32 and float64 only. */
#include "tensor/blas.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "tensor/kernels.h"
#include "tensor/nn_grad.h"
#include "tensor/ops.h"
#include "tensor/sgemm_small.h"

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

static int64_t attr_or(const tfe_attrs *at, int i, int64_t dflt) {
    return i < at->nints ? at->ints[i] : dflt;
}

static int check_float(const char *op, const tfe_tensor *t) {
    if (t->dtype != TFE_FLOAT32 && t->dtype != TFE_FLOAT64) {
        tfe_error_set("%s: expected float32 or float64, got %s%s", op, dtype_name(t->dtype),
                      dtype_is_int(t->dtype) || t->dtype == TFE_BOOL ? " (cast it: cast(x, float32))" : "");
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
            /* PyTorch's images are NCHW: channels on axis 1 is the likely slip */
            tfe_error_set("%s: input channels %lld do not match filter input channels %lld "
                          "(input %s, filter %s)%s", op, (long long)g->c, (long long)ws[2],
                          shape_str(4, xs, b1), shape_str(4, ws, b2),
                          xs[1] == ws[2] ? "; images are NHWC: transpose(x, (0, 2, 3, 1)) turns NCHW into NHWC" : "");
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
    if (!kn_conv_out_size(g->h, g->kh, g->dh, g->sh, same, &g->oh, &g->pt) ||
        !kn_conv_out_size(g->w, g->kw, g->dw, g->sw, same, &g->ow, &g->pl)) {
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

/* col row r (r = output row index counted from the chunk's first row; output
 * rows are (n, oh_i, ow_i) in order) holds, for each (kh, kw), the c input
 * channels under that filter tap, zeros where it falls in the padding: exactly
 * the rows of an HWIO filter viewed as (KH*KW*Cin, Cout).
 *
 * With dilation 1 along the width (the common case), the kw*c inputs under
 * one filter row are contiguous in NHWC, so they are copied as one run,
 * clipped to the image, instead of kw separate taps: with small channel
 * counts (6 in LeNet's second conv) the per-tap memcpy calls were the
 * dominant cost. The copies are plain loops, not memcpy, because runs are
 * only a few elements. */

/* Taps [*b0, *b1) of a filter row whose leftmost input column is iw0 fall
 * inside a row of w columns (dilation 1). */
static inline void tap_range(const geom *g, int64_t iw0, int64_t *b0, int64_t *b1) {
    int64_t lo = iw0 < 0 ? -iw0 : 0, hi = g->w - iw0;
    if (lo > g->kw) lo = g->kw;
    if (hi > g->kw) hi = g->kw;
    if (hi < lo) hi = lo;
    *b0 = lo;
    *b1 = hi;
}

/* Output rows (n, oh_i) in [q0, q1) (q = n*oh + oh_i) -> col, whose first row
 * belongs to output row q0. */
#define IM2COL(T, SUF, ATTR)                                                           \
    ATTR static void im2col_##T##SUF(const geom *g, const char *xv, char *colv, int64_t q0, \
                           int64_t q1) {                                               \
        const T *x = (const T *)xv;                                                    \
        T *restrict d = (T *)colv;                                                     \
        int64_t C = g->c, seg = g->kw * C;                                             \
        for (int64_t q = q0; q < q1; q++) {                                            \
            int64_t n = q / g->oh, oi = q % g->oh;                                     \
            const T *xn = x + (size_t)n * g->h * g->w * C;                             \
            for (int64_t oj = 0; oj < g->ow; oj++) {                                   \
                int64_t iw0 = oj * g->sw - g->pl, b0, b1;                              \
                tap_range(g, iw0, &b0, &b1);                                           \
                for (int64_t a = 0; a < g->kh; a++) {                                  \
                    int64_t ih = oi * g->sh - g->pt + a * g->dh;                       \
                    bool row_in = ih >= 0 && ih < g->h;                                \
                    if (g->dw == 1) {                                                  \
                        int64_t i = 0, lo = row_in ? b0 * C : seg, hi = row_in ? b1 * C : seg; \
                        const T *restrict s = row_in ? xn + (ih * g->w + iw0) * C : NULL; \
                        for (; i < lo; i++) d[i] = 0;                                  \
                        for (; i < hi; i++) d[i] = s[i];                               \
                        for (; i < seg; i++) d[i] = 0;                                 \
                        d += seg;                                                      \
                        continue;                                                      \
                    }                                                                  \
                    for (int64_t b = 0; b < g->kw; b++, d += C) {                      \
                        int64_t iw = iw0 + b * g->dw;                                  \
                        if (!row_in || iw < 0 || iw >= g->w) {                         \
                            for (int64_t ci = 0; ci < C; ci++) d[ci] = 0;              \
                        } else {                                                       \
                            const T *s = xn + (ih * g->w + iw) * C;                    \
                            for (int64_t ci = 0; ci < C; ci++) d[ci] = s[ci];          \
                        }                                                              \
                    }                                                                  \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }
IM2COL(float, , )
IM2COL(double, , )
/* the float32 path's copies (run only where AVX-512 is, sgemm_small.h) */
IM2COL(float, _avx512, F32_TARGET)

/* dx[n] += col2im(col) for the output rows [q0, q1) that col holds (see
 * IM2COL). The caller owns the dx rows these windows touch. */
#define COL2IM(T, SUF, ATTR)                                                           \
    ATTR static void col2im_##T##SUF(const geom *g, const char *colv, char *dxv, int64_t q0, \
                           int64_t q1) {                                               \
        const T *s = (const T *)colv;                                                  \
        T *dx = (T *)dxv;                                                              \
        int64_t C = g->c, seg = g->kw * C;                                             \
        for (int64_t q = q0; q < q1; q++) {                                            \
            int64_t n = q / g->oh, oi = q % g->oh;                                     \
            T *dxn = dx + (size_t)n * g->h * g->w * C;                                 \
            for (int64_t oj = 0; oj < g->ow; oj++) {                                   \
                int64_t iw0 = oj * g->sw - g->pl, b0, b1;                              \
                tap_range(g, iw0, &b0, &b1);                                           \
                for (int64_t a = 0; a < g->kh; a++, s += seg) {                        \
                    int64_t ih = oi * g->sh - g->pt + a * g->dh;                       \
                    if (ih < 0 || ih >= g->h) continue;                                \
                    if (g->dw == 1) {                                                  \
                        if (b1 == b0) continue;                                        \
                        T *restrict t = dxn + (ih * g->w + iw0 + b0) * C;              \
                        const T *restrict u = s + b0 * C;                              \
                        for (int64_t i = 0; i < (b1 - b0) * C; i++) t[i] += u[i];      \
                        continue;                                                      \
                    }                                                                  \
                    for (int64_t b = 0; b < g->kw; b++) {                              \
                        int64_t iw = iw0 + b * g->dw;                                  \
                        if (iw < 0 || iw >= g->w) continue;                            \
                        T *t = dxn + (ih * g->w + iw) * C;                             \
                        const T *u = s + b * C;                                        \
                        for (int64_t ci = 0; ci < C; ci++) t[ci] += u[ci];             \
                    }                                                                  \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }
COL2IM(float, , )
COL2IM(double, , )
/* noinline: compiled on its own, as before its caller below existed */
COL2IM(float, _avx512, F32_TARGET __attribute__((noinline)))

/* col2im_float_avx512 for the float32 chunked d/dx (f32_chunk), which clears
 * dx itself: a chunk that starts an image first zeroes the images its rows
 * reach (an image's chunks run in order in one task), so col2im adds into
 * rows still in cache instead of reading back a whole batch cleared to
 * memory before the pass. A function of its own so that f32_slots, into
 * which f32_chunk is inlined, compiles as before (GCC may commute a float
 * add when it reallocates registers, which picks the other NaN of two). */
F32_TARGET __attribute__((noinline)) static void col2im_clear_float_avx512(const geom *g, const char *colv,
                                                                          char *dxv, int64_t q0, int64_t q1) {
    if (q0 % g->oh == 0) {
        int64_t img = g->h * g->w * g->c, n0 = q0 / g->oh, n1 = (q1 + g->oh - 1) / g->oh;
        memset((float *)dxv + n0 * img, 0, (size_t)((n1 - n0) * img) * sizeof(float));
    }
    col2im_float_avx512(g, colv, dxv, q0, q1);
}

/* acc[i] += sum[i] for a d/dw chunk's sum, 16 floats a step where the loops
 * this replaces ran 4 (GCC's baseline vectorisation: ~1.5% of the ResNet-20
 * step). Bit for bit those loops: x86 returns the first operand's NaN when
 * both are NaN, and GCC had compiled them, for n = 4q + r, to add elements
 * [0, 4q) with sum first (sum_first, dwd_slots) or acc first (f32_chunk),
 * the next two when r >= 2 with sum first, and the last when r is odd with
 * acc first. Each add here is asm, so that the compiler cannot swap its
 * operands (it treats a float add as commutative, and an intrinsic's add
 * moved with register allocation before). */
#if defined(__x86_64__) && defined(__GNUC__)
F32_TARGET static inline __m128 add1(__m128 x, __m128 y) { /* x + y, x's NaN */
    __m128 r;
    __asm__("vaddss %2, %1, %0" : "=v"(r) : "v"(x), "v"(y));
    return r;
}
F32_TARGET __attribute__((noinline)) static void chunk_add_f32(float *acc, const float *sum,
                                                               int64_t n, bool sum_first) {
    int64_t q4 = n & ~(int64_t)3, i = 0;
    for (; i + 16 <= q4; i += 16) {
        __m512 a = _mm512_loadu_ps(acc + i), s = _mm512_loadu_ps(sum + i), r;
        if (sum_first)
            __asm__("vaddps %2, %1, %0" : "=v"(r) : "v"(s), "v"(a));
        else
            __asm__("vaddps %2, %1, %0" : "=v"(r) : "v"(a), "v"(s));
        _mm512_storeu_ps(acc + i, r);
    }
    for (; i < q4; i++) {
        __m128 a = _mm_load_ss(acc + i), s = _mm_load_ss(sum + i);
        _mm_store_ss(acc + i, sum_first ? add1(s, a) : add1(a, s));
    }
    if (n - q4 >= 2)
        for (int e = 0; e < 2; e++, i++)
            _mm_store_ss(acc + i, add1(_mm_load_ss(sum + i), _mm_load_ss(acc + i)));
    if ((n - q4) & 1) _mm_store_ss(acc + i, add1(_mm_load_ss(acc + i), _mm_load_ss(sum + i)));
}
#else
/* (the float32 paths that call it need AVX-512: never run here) */
static void chunk_add_f32(float *acc, const float *sum, int64_t n, bool sum_first) {
    (void)sum_first;
    for (int64_t i = 0; i < n; i++) acc[i] += sum[i];
}
#endif

/* The transposed column matrix (K x M, M = the chunk's output positions),
 * used for inputs with few channels: row (kh, kw, c) holds that tap's input
 * for every output position, so with stride 1 and one channel each output
 * row's values are one contiguous run of the input row. The row layout would
 * copy runs of only kw*c elements (5 for a 5x5 filter over one channel). */

/* Output columns [*j0, *j1) whose tap at input column offset off (kw index
 * times dilation, minus the left pad) falls inside the row. */
static inline void col_range(const geom *g, int64_t off, int64_t *j0, int64_t *j1) {
    /* iw = oj*sw + off must lie in [0, w); stride 1 skips the divisions */
    int64_t lo, hi;
    if (g->sw == 1) {
        lo = off >= 0 ? 0 : -off;
        hi = g->w - off <= 0 ? 0 : g->w - off;
    } else {
        lo = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;
        hi = g->w - off <= 0 ? 0 : (g->w - off - 1) / g->sw + 1;
    }
    if (lo > g->ow) lo = g->ow;
    if (hi > g->ow) hi = g->ow;
    if (hi < lo) hi = lo;
    *j0 = lo;
    *j1 = hi;
}

#define IM2COL_T(T)                                                                    \
    static void im2colT_##T(const geom *g, const char *xv, char *colv, int64_t q0,     \
                            int64_t q1) {                                              \
        const T *x = (const T *)xv;                                                    \
        int64_t C = g->c, M = (q1 - q0) * g->ow;                                       \
        for (int64_t q = q0; q < q1; q++) {                                            \
            int64_t n = q / g->oh, oi = q % g->oh;                                     \
            const T *xn = x + (size_t)n * g->h * g->w * C;                             \
            T *col = (T *)colv + (q - q0) * g->ow;                                     \
            for (int64_t a = 0; a < g->kh; a++) {                                      \
                int64_t ih = oi * g->sh - g->pt + a * g->dh;                           \
                bool row_in = ih >= 0 && ih < g->h;                                    \
                for (int64_t b = 0; b < g->kw; b++) {                                  \
                    int64_t off = b * g->dw - g->pl, j0, j1;                           \
                    col_range(g, off, &j0, &j1);                                       \
                    if (!row_in) j0 = j1 = g->ow;                                      \
                    for (int64_t ci = 0; ci < C; ci++) {                               \
                        T *restrict d = col + ((a * g->kw + b) * C + ci) * M;          \
                        int64_t j = 0;                                                 \
                        for (; j < j0; j++) d[j] = 0;                                  \
                        if (j1 > j0) {                                                 \
                            const T *restrict s = xn + (ih * g->w + j0 * g->sw + off) * C + ci; \
                            int64_t st = g->sw * C;                                    \
                            if (st == 1) {                                             \
                                memcpy(d + j0, s, (size_t)(j1 - j0) * sizeof(T));      \
                                j = j1;                                                \
                            } else {                                                   \
                                for (; j < j1; j++) d[j] = s[(j - j0) * st];           \
                            }                                                          \
                        }                                                              \
                        for (; j < g->ow; j++) d[j] = 0;                               \
                    }                                                                  \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }
IM2COL_T(float)
IM2COL_T(double)

#define COL2IM_T(T)                                                                    \
    static void col2imT_##T(const geom *g, const char *colv, char *dxv, int64_t q0,    \
                            int64_t q1) {                                              \
        T *dx = (T *)dxv;                                                              \
        int64_t C = g->c, M = (q1 - q0) * g->ow;                                       \
        for (int64_t q = q0; q < q1; q++) {                                            \
            int64_t n = q / g->oh, oi = q % g->oh;                                     \
            T *dxn = dx + (size_t)n * g->h * g->w * C;                                 \
            const T *col = (const T *)colv + (q - q0) * g->ow;                         \
            for (int64_t a = 0; a < g->kh; a++) {                                      \
                int64_t ih = oi * g->sh - g->pt + a * g->dh;                           \
                if (ih < 0 || ih >= g->h) continue;                                    \
                for (int64_t b = 0; b < g->kw; b++) {                                  \
                    int64_t off = b * g->dw - g->pl, j0, j1;                           \
                    col_range(g, off, &j0, &j1);                                       \
                    if (j1 == j0) continue;                                            \
                    for (int64_t ci = 0; ci < C; ci++) {                               \
                        const T *restrict s = col + ((a * g->kw + b) * C + ci) * M;    \
                        T *restrict t = dxn + (ih * g->w + j0 * g->sw + off) * C + ci; \
                        int64_t st = g->sw * C;                                        \
                        for (int64_t j = j0; j < j1; j++) t[(j - j0) * st] += s[j];    \
                    }                                                                  \
                }                                                                      \
            }                                                                          \
        }                                                                              \
    }
COL2IM_T(float)
COL2IM_T(double)

/* The layout a chunked pass uses: transposed for fewer than 4 channels. */
static bool col_transposed(const geom *g) { return g->c < 4; }

static void im2col(bool f64, const geom *g, const char *x, char *col, int64_t q0, int64_t q1) {
    if (f64) im2col_double(g, x, col, q0, q1);
    else im2col_float(g, x, col, q0, q1);
}

static void col2im(bool f64, const geom *g, const char *col, char *dx, int64_t q0, int64_t q1) {
    if (f64) col2im_double(g, col, dx, q0, q1);
    else col2im_float(g, col, dx, q0, q1);
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

/* The epilogue of conv2d_bias and conv2d_bias_relu: each output element t of
 * channel j becomes t + bias[j] (bias[j] + t when bias_first: the add's
 * operand order), then relu(t), with the formulas of k_add and k_relu
 * (tensor/elem.def), so the fused op is bitwise conv2d, add and relu run one
 * after the other. The passes apply it where they write the output: in the
 * register tiles' last store (float32 paths), or to each chunk's rows right
 * after its GEMM (OpenBLAS paths), while they are in cache. */
typedef struct conv_ep {
    const void *bias;
    bool bias_first, relu;
    /* or, with bn_m set, batch_norm_infer's ((t - m) * rs) * g + b in place
     * of the bias (k_conv2d_bn_infer), and with res then t + h (h + t when
     * res_first) before the relu, h the element res_off bytes from t's
     * place in the output (a residual of the output's layout) */
    const void *bn_m, *bn_rs, *bn_g, *bn_b;
    bool res, res_first;
    intptr_t res_off;
} conv_ep;

/* y[k] (k < n, from a row's start) with p[k] (the bias repeated), one
 * variant a loop with the flags constant, so that each vectorizes */
#define EP_LOOP(T, ADD, RELU)                                                          \
    for (int64_t k = 0; k < n; k++) {                                                  \
        T t = ADD;                                                                     \
        if (RELU) t = t > 0 || t != t ? t : (T)0;                                      \
        yy[k] = t;                                                                     \
    }
/* Rows of few channels (6 in LeNet's first conv) are too short a loop: the
 * bias is repeated over about 1024 elements, rows back to back, so the
 * loop runs over those. */
#define EP_ROWS(T)                                                                     \
    static void ep_rows_##T(T *y, int64_t rows, int64_t co, const T *b, bool bias_first, \
                            bool relu) {                                               \
        T pat[1024];                                                                   \
        const T *p = b;                                                                \
        int64_t len = co, total = rows * co;                                           \
        if (co < 64) {                                                                 \
            int64_t m = 1024 / co;                                                     \
            for (int64_t r = 0; r < m; r++)                                            \
                for (int64_t j = 0; j < co; j++) pat[r * co + j] = b[j];               \
            p = pat;                                                                   \
            len = m * co;                                                              \
        }                                                                              \
        for (int64_t i0 = 0; i0 < total; i0 += len) {                                  \
            int64_t n = total - i0 < len ? total - i0 : len;                           \
            T *restrict yy = y + i0;                                                   \
            const T *restrict q = p;                                                   \
            if (bias_first && relu) EP_LOOP(T, q[k] + yy[k], 1)                        \
            else if (bias_first) EP_LOOP(T, q[k] + yy[k], 0)                           \
            else if (relu) EP_LOOP(T, yy[k] + q[k], 1)                                 \
            else EP_LOOP(T, yy[k] + q[k], 0)                                           \
        }                                                                              \
    }
EP_ROWS(float)
EP_ROWS(double)

/* relu alone over n elements (after a batch norm's epilogue) */
#define RELU_ROWS(T)                                                                   \
    static void relu_rows_##T(T *restrict yy, int64_t n) { EP_LOOP(T, yy[k], 1) }
RELU_ROWS(float)
RELU_ROWS(double)

static void ep_rows(bool f64, char *y, int64_t rows, int64_t co, const conv_ep *ep) {
    if (!ep) return;
    if (ep->bn_m) {
        /* batch_norm_infer's own pass over the rows, then relu's */
        kn_bn_infer_rows(f64, y, rows, co, ep->bn_m, ep->bn_rs, ep->bn_g, ep->bn_b);
        if (ep->res) /* then add's and relu's loops: relu(t + h) */
            kn_add_relu_rows(f64, y, y + ep->res_off, rows * co, ep->res_first);
        else if (ep->relu && f64) relu_rows_double((double *)y, rows * co);
        else if (ep->relu) relu_rows_float((float *)y, rows * co);
        return;
    }
    if (f64) ep_rows_double((double *)y, rows, co, ep->bias, ep->bias_first, ep->relu);
    else ep_rows_float((float *)y, rows, co, ep->bias, ep->bias_first, ep->relu);
}

typedef struct ep_job {
    bool f64;
    char *y;
    int64_t co;
    const conv_ep *ep;
} ep_job;

static void ep_range(int64_t r0, int64_t r1, void *vctx) {
    const ep_job *e = vctx;
    ep_rows(e->f64, e->y + (size_t)(r0 * e->co) * (e->f64 ? 8 : 4), r1 - r0, e->co, e->ep);
}

/* The epilogue over rows of a GEMM's output that OpenBLAS wrote in one call
 * (pointwise convs, the batched form), split over the threads. */
static void ep_rows_par(bool f64, char *y, int64_t rows, int64_t co, const conv_ep *ep) {
    if (!ep || rows * co == 0) return;
    ep_job e = {.f64 = f64, .y = y, .co = co, .ep = ep};
    int64_t grain = 16384 / co;
    tfe_parallel_for(rows, grain < 1 ? 1 : grain, ep_range, &e);
}

/* The float32 register tiles' form of an epilogue (NULL: none). */
static const tfe_sgemm_ep *sgemm_ep(const conv_ep *ep, tfe_sgemm_ep *buf) {
    if (!ep) return NULL;
    *buf = (tfe_sgemm_ep){.bias = ep->bias, .bias_first = ep->bias_first, .relu = ep->relu,
                          .bn_m = ep->bn_m, .bn_rs = ep->bn_rs, .bn_g = ep->bn_g, .bn_b = ep->bn_b,
                          .res = ep->res, .res_first = ep->res_first, .res_off = ep->res_off};
    return buf;
}

/* ---- the conv passes, im2col + GEMM per chunk of images ----------------------
 * All three passes (forward, d/dx, d/dw) walk the batch in chunks of nb
 * images. Small problems (a chunk's GEMM below OpenBLAS's own threading
 * threshold) run the chunks in parallel, each task doing its im2col and its
 * single-threaded GEMM back to back on a column buffer that stays in cache;
 * this replaces one parallel im2col of the whole batch followed by one large
 * GEMM, which streamed the column matrix through memory twice and left
 * OpenBLAS to thread GEMMs with as few as 6 columns. Larger problems keep the
 * batched form: there OpenBLAS threads each GEMM well. */

/* OpenBLAS runs a GEMM on one thread when m*n*k is at most this (interface/
 * gemm.c: SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD); chunk GEMMs are
 * kept below it so that tasks never contend for OpenBLAS's thread pool. */
#define BLAS_ST_MNK ((int64_t)65536 * 4)
/* Column buffer of one parallel task, in elements: fits in L2 with room for
 * the GEMM's packed panels. */
#define COL_TASK 49152

enum { CONV_FWD, CONV_DX, CONV_DW };

typedef struct conv_job {
    const geom *g;
    int kind;
    bool f64;
    size_t es;
    const char *x, *w, *dy;   /* FWD: x, w; DX: dy, w; DW: x, dy (all contiguous) */
    char *out;                /* FWD: y; DX: dx (zeroed); DW: nslots accumulators */
    char *col;                /* nslots column buffers of colsz bytes */
    size_t colsz;
    int64_t nb, nchunks, nslots, ngroups;
    int64_t next;             /* next chunk (FWD, DX) or group (DW) to claim (atomic) */
    const conv_ep *ep;        /* FWD: the epilogue, or NULL */
} conv_job;

/* One chunk (images [ch*nb, ...)) of a pass; DW adds into (or, first,
 * writes) the K x Cout accumulator acc. */
static void conv_chunk(const conv_job *j, int64_t ch, char *col, char *acc, bool first) {
    const geom *g = j->g;
    int64_t K = g->kh * g->kw * g->c, P = g->oh * g->ow;
    int64_t n0 = ch * j->nb, cnt = g->n - n0 < j->nb ? g->n - n0 : j->nb, M = cnt * P;
    int64_t q0 = n0 * g->oh, q1 = (n0 + cnt) * g->oh;
    size_t es = j->es;
    bool f64 = j->f64, tr = col_transposed(g);
    const char *dy = j->dy ? j->dy + (size_t)(n0 * P * g->co) * es : NULL;
    switch (j->kind) {
    case CONV_FWD:
        if (tr) {
            if (f64) im2colT_double(g, j->x, col, q0, q1);
            else im2colT_float(g, j->x, col, q0, q1);
        } else {
            im2col(f64, g, j->x, col, q0, q1);
        }
        /* y (M x Cout) = col (M x K) @ w (K x Cout) */
        gemm(f64, tr, false, M, g->co, K, col, tr ? M : K, j->w, g->co, false,
             j->out + (size_t)(n0 * P * g->co) * es, g->co);
        ep_rows(f64, j->out + (size_t)(n0 * P * g->co) * es, M, g->co, j->ep);
        break;
    case CONV_DX:
        /* dcol (M x K) = dy (M x Cout) @ w^T, or its transpose */
        if (tr) {
            gemm(f64, false, true, K, M, g->co, j->w, g->co, dy, g->co, false, col, M);
            if (f64) col2imT_double(g, col, j->out, q0, q1);
            else col2imT_float(g, col, j->out, q0, q1);
        } else {
            gemm(f64, false, true, M, K, g->co, dy, g->co, j->w, g->co, false, col, K);
            col2im(f64, g, col, j->out, q0, q1);
        }
        break;
    default:
        if (tr) {
            if (f64) im2colT_double(g, j->x, col, q0, q1);
            else im2colT_float(g, j->x, col, q0, q1);
        } else {
            im2col(f64, g, j->x, col, q0, q1);
        }
        /* dw (K x Cout) (+)= col^T (K x M) @ dy (M x Cout) */
        gemm(f64, !tr, false, K, g->co, M, col, tr ? M : K, dy, g->co, !first, acc, g->co);
        break;
    }
}

/* Tasks are slots: each has its own column buffer. FWD and DX claim chunks
 * dynamically (every output is written once). DW sums: the slots claim the
 * ngroups groups of consecutive chunks, each summed in order into its own
 * accumulator, so the sum depends neither on scheduling nor on the thread
 * count. */
static void conv_slots(int64_t s0, int64_t s1, void *vctx) {
    conv_job *j = vctx;
    const geom *g = j->g;
    size_t accsz = (size_t)(g->kh * g->kw * g->c * g->co) * j->es;
    (void)s1;
    if (j->kind == CONV_DW) {
        for (;;) {
            int64_t t = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
            if (t >= j->ngroups || tfe_interrupted) break;
            char *acc = j->out + t * accsz;
            int64_t c1 = (t + 1) * j->nchunks / j->ngroups;
            for (int64_t ch = t * j->nchunks / j->ngroups; ch < c1 && !tfe_interrupted; ch++)
                conv_chunk(j, ch, j->col + s0 * j->colsz, acc, ch == t * j->nchunks / j->ngroups);
        }
        return;
    }
    for (;;) {
        int64_t ch = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (ch >= j->nchunks || tfe_interrupted) break;
        conv_chunk(j, ch, j->col + s0 * j->colsz, NULL, false);
    }
}

/* Plans a pass: the chunk size and slot count, or false when the problem is
 * too large for per-task GEMMs (the caller then uses the batched form). */
static bool conv_plan(const geom *g, conv_job *j) {
    int64_t K = g->kh * g->kw * g->c, P = g->oh * g->ow;
    int64_t col_img = P * K, mnk_img = P * K * g->co;
    if (mnk_img > BLAS_ST_MNK || col_img == 0) return false;
    int64_t nslots = tfe_num_threads();
    int64_t nb = COL_TASK / col_img;
    if (nb > BLAS_ST_MNK / mnk_img) nb = BLAS_ST_MNK / mnk_img;
    /* at least 8 chunks, for balance; never by the thread count, which
     * would make the sums of DW depend on it */
    int64_t most = (g->n + 7) / 8;
    if (nb > most) nb = most;
    if (nb < 1) nb = 1;
    j->nb = nb;
    j->nchunks = (g->n + nb - 1) / nb;
    j->ngroups = j->nchunks < 4 ? j->nchunks : 4;
    int64_t ntasks = j->kind == CONV_DW ? j->ngroups : j->nchunks;
    j->nslots = nslots < ntasks ? nslots : ntasks;
    j->colsz = (size_t)(nb * col_img) * j->es;
    j->next = 0;
    return true;
}

/* Runs a planned pass; j->out for DW must hold ngroups accumulators. */
static int conv_run(conv_job *j) {
    size_t bytes = j->colsz * (size_t)j->nslots;
    j->col = tfe_alloc(bytes);
    if (!j->col) return -1;
    tfe_parallel_for(j->nslots, 1, conv_slots, j);
    tfe_free(j->col, bytes);
    return kn_poll();
}

/* ---- float32 passes on the register-tiled GEMM (tensor/sgemm_small.c) ----------
 * Where the CPU has AVX-512, float32 convs with 8 or more output channels,
 * other than the pointwise ones, run here at every size, unless the direct
 * passes below (no column matrix) take them. The batch is cut into chunks
 * of output rows whose
 * column matrix (F32_COL elements) stays in L2 between its im2col and its
 * GEMM: a column matrix of the whole batch (19 MB for a 3x3x16 conv over a
 * CIFAR batch of 32) went through memory twice, and OpenBLAS's packing copies
 * of it cost as much as the arithmetic. The chunks depend only on the shapes,
 * never on the thread count, and tfe_sgemm_small sums each element in k order
 * whatever the tiling, so every thread count gives the same bits:
 * - forward: chunks are tasks (each writes its own output rows);
 * - d/dx: dcol = dy @ w^T per chunk, then col2im into dx; an image's chunks
 *   touch the same dx rows, so one task takes a whole image's chunks in order;
 * - d/dw: F32_GROUPS fixed groups of consecutive chunks each accumulate
 *   col^T @ dy into their own K x Cout sum (the GEMM adds into it, so a
 *   group's sum runs over its rows in order); the group sums are added in
 *   group order. */
#define F32_COL 32768
#define F32_GROUPS 4
#define F32_SUM 32

typedef struct f32_job {
    const geom *g;
    int kind;
    const float *x, *w, *dy;  /* FWD: x, w; DX: dy, w^T (Cout x K); DW: x, dy */
    float *out;               /* FWD: y; DX: dx (zeroed); DW: dw (group 0's sum) */
    float *sums;              /* DW: the sums of groups 1, 2, ... */
    float *col;               /* nslots buffers of colsz elements */
    int64_t colsz;
    int64_t nq, nb, cpi;      /* rows a chunk (nq < oh) or images a chunk (nb), chunks an image */
    int64_t nchunks, ntasks;
    int64_t next;             /* next task to claim (atomic) */
    const tfe_sgemm_ep *ep;   /* FWD: the epilogue, or NULL */
} f32_job;

/* Output rows [*q0, *q1) of chunk ch. */
static void f32_chunk_rows(const f32_job *j, int64_t ch, int64_t *q0, int64_t *q1) {
    const geom *g = j->g;
    if (j->nb) {
        *q0 = ch * j->nb * g->oh;
        int64_t e = (ch + 1) * j->nb;
        *q1 = (e < g->n ? e : g->n) * g->oh;
    } else {
        int64_t r = (ch % j->cpi) * j->nq;
        *q0 = ch / j->cpi * g->oh + r;
        *q1 = *q0 + (g->oh - r < j->nq ? g->oh - r : j->nq);
    }
}

/* Task t's chunks [*c0, *c1). */
static void f32_task_chunks(const f32_job *j, int64_t t, int64_t *c0, int64_t *c1) {
    if (j->kind == CONV_DW) {
        *c0 = t * j->nchunks / j->ntasks;
        *c1 = (t + 1) * j->nchunks / j->ntasks;
    } else if (j->kind == CONV_DX && !j->nb) {
        *c0 = t * j->cpi;
        *c1 = *c0 + j->cpi;
    } else {
        *c0 = t;
        *c1 = t + 1;
    }
}

static void f32_chunk(const f32_job *j, int64_t ch, float *col, float *acc, bool first) {
    const geom *g = j->g;
    int64_t K = g->kh * g->kw * g->c, q0, q1;
    f32_chunk_rows(j, ch, &q0, &q1);
    int64_t M = (q1 - q0) * g->ow, r0 = q0 * g->ow;
    switch (j->kind) {
    case CONV_FWD:
        im2col_float_avx512(g, (const char *)j->x, (char *)col, q0, q1);
        tfe_sgemm_small_ep(M, g->co, K, col, K, 1, j->w, g->co, j->out + r0 * g->co, g->co, j->ep);
        break;
    case CONV_DX:
        tfe_sgemm_small(M, K, g->co, j->dy + r0 * g->co, g->co, 1, j->w, K, col, K, false);
        col2im_clear_float_avx512(g, (const char *)col, (char *)j->out, q0, q1);
        break;
    default: {
        /* the chunk's sum of sums of F32_SUM rows, added into acc: the
         * rounding error of a long sum stays as small as BLAS's blocked
         * sums made it (the first chunk sums in acc itself) */
        float *sum = first ? acc : col + j->colsz - K * g->co;
        im2col_float_avx512(g, (const char *)j->x, (char *)col, q0, q1);
        /* the whole runs of F32_SUM rows in one call, as segments (its
         * blocks restart at each: the same sums, added in the same order,
         * as one call a run, and the running sum stays in registers), then
         * the short run left */
        int64_t full = M / F32_SUM;
        if (full > 0)
            tfe_sgemm_small_seg(K, g->co, full, F32_SUM, F32_SUM * K, F32_SUM, col, 1, K,
                                j->dy + r0 * g->co, g->co, sum, g->co, false);
        if (M > full * F32_SUM)
            tfe_sgemm_small(K, g->co, M - full * F32_SUM, col + full * F32_SUM * K, 1, K,
                            j->dy + (r0 + full * F32_SUM) * g->co, g->co, sum, g->co, full > 0);
        if (!first) chunk_add_f32(acc, sum, K * g->co, false);
        break;
    }
    }
}

static void f32_slots(int64_t s0, int64_t s1, void *vctx) {
    f32_job *j = vctx;
    int64_t kc = j->g->kh * j->g->kw * j->g->c * j->g->co;
    (void)s1;
    for (;;) {
        int64_t t = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED), c0, c1;
        if (t >= j->ntasks || tfe_interrupted) break;
        f32_task_chunks(j, t, &c0, &c1);
        float *acc = t == 0 ? j->out : j->sums + (t - 1) * kc;
        for (int64_t ch = c0; ch < c1 && !tfe_interrupted; ch++)
            f32_chunk(j, ch, j->col + s0 * j->colsz, acc, ch == c0);
    }
}

/* Whether the float32 path takes this conv. */
static bool f32_path(bool f64, const geom *g) {
    int64_t K = g->kh * g->kw * g->c;
    /* fewer than 8 output channels fill too little of a 16-wide vector: the
     * chunked OpenBLAS passes with the transposed columns do better there */
    return !f64 && !is_pointwise(g) && g->co >= 8 && K > 0 && g->oh * g->ow > 0 &&
           tfe_sgemm_small_ok();
}

/* Runs one pass (out: y, dx, which its chunks clear, or dw). */
static int f32_run(const geom *g, int kind, const void *x, const void *w, const void *dy,
                   void *out, const tfe_sgemm_ep *ep) {
    int64_t K = g->kh * g->kw * g->c, rowk = g->ow * K;
    f32_job j = {.g = g, .kind = kind, .x = x, .w = w, .dy = dy, .out = out, .ep = ep};
    /* d/dw's chunks are larger: each adds its K x Cout sum into the group's */
    int64_t budget = kind == CONV_DW ? 4 * F32_COL : F32_COL;
    if (g->oh * rowk <= budget) {
        /* whole images a chunk, and at least 8 chunks for the threads */
        int64_t nb = budget / (g->oh * rowk), most = (g->n + 7) / 8;
        j.nb = nb < 1 ? 1 : nb > most ? most : nb;
        j.nchunks = (g->n + j.nb - 1) / j.nb;
        j.colsz = j.nb * g->oh * rowk;
    } else {
        j.nq = budget / rowk < 1 ? 1 : budget / rowk;
        j.cpi = (g->oh + j.nq - 1) / j.nq;
        j.nchunks = g->n * j.cpi;
        j.colsz = j.nq * rowk;
    }
    j.ntasks = kind == CONV_DW ? (j.nchunks < F32_GROUPS ? j.nchunks : F32_GROUPS)
             : kind == CONV_DX && !j.nb ? g->n : j.nchunks;
    int64_t nslots = tfe_num_threads() < j.ntasks ? tfe_num_threads() : j.ntasks;
    int64_t kc = K * g->co, nsums = kind == CONV_DW ? j.ntasks - 1 : 0;
    if (kind == CONV_DW) j.colsz += kc; /* a chunk's sum after its columns */
    size_t bytes = (size_t)(j.colsz * nslots + nsums * kc) * sizeof(float);
    j.col = tfe_alloc(bytes);
    if (!j.col) return -1;
    j.sums = j.col + j.colsz * nslots;
    tfe_parallel_for(nslots, 1, f32_slots, &j);
    for (int64_t t = 0; t < nsums; t++)
        for (int64_t i = 0; i < kc; i++) j.out[i] += j.sums[t * kc + i];
    tfe_free(j.col, bytes);
    return kn_poll();
}

/* ---- float32 direct passes: no column matrix at all ----------------------------
 * With dilation 1 along the width, the column row of output position (oi, oj)
 * is, filter row by filter row, kw*C contiguous inputs of the zero-padded
 * image; tfe_sgemm_small_seg reads them there (one segment a filter row), so
 * the forward pass needs only a padded copy of x, and sums each output in the
 * column matrix's k order: the same bits as im2col + GEMM. The d/dx of a
 * stride-1 conv is the forward conv of dy, padded by the filter's reach, with
 * the filter flipped and its channels swapped; that replaces the
 * (M x K) = dy @ w^T product and the col2im pass with one narrow GEMM; its
 * sums are blocked by filter tap (Cout terms), as col2im's were, which keeps
 * them as accurate. */

typedef struct direct_job {
    const float *src;         /* padded (N, hp, wp, cs), or NULL: pad (x, img) per image */
    const float *x;           /* unpadded (N, h, w, cs) */
    float *img;               /* nslots padded images of hp*wp*cs (per image) */
    const float *w;           /* (kh, kw, cs, co) */
    float *out;               /* (N, oh, ow, co) */
    int64_t h, wd, top, left; /* x's extent, where it lies in the padded image */
    int64_t hp, wp, cs, kh, kw, dh, sh, sw, oh, ow, co;
    int64_t kb;               /* the GEMM's sum blocks */
    int64_t n, next;          /* images; next to claim (atomic) */
    int64_t nslots;           /* the slots claiming them (direct_images) */
    const tfe_sgemm_ep *ep;   /* the epilogue, or NULL */
} direct_job;

/* Asks for bytes [part0/parts, part1/parts) of [p, p + bytes) to be
 * brought into L2 (a hint: no value is read). */
static void prefetch_part(const void *p, size_t bytes, int64_t part0, int64_t part1,
                          int64_t parts) {
    const char *b = p;
    size_t e = bytes * (size_t)part1 / (size_t)parts;
    for (size_t i = bytes * (size_t)part0 / (size_t)parts & ~(size_t)63; i < e; i += 64)
        __builtin_prefetch(b + i, 0, 2);
}

/* Output rows [q0, q1) of the padded images at src, whose first is image
 * n0 (image n at src + (n - n0)*hp*wp*cs); pre (or NULL): prebytes to
 * prefetch, a part a row. */
static void direct_run_rows(const direct_job *d, const float *src, int64_t n0, int64_t q0,
                            int64_t q1, const void *pre, size_t prebytes) {
    for (int64_t q = q0; q < q1 && !tfe_interrupted; q++) {
        int64_t n = q / d->oh - n0, oi = q % d->oh;
        if (pre) prefetch_part(pre, prebytes, q - q0, q - q0 + 1, q1 - q0);
        const float *a = src + ((n * d->hp + oi * d->sh) * d->wp) * d->cs;
        tfe_sgemm_small_seg_ep(d->ow, d->co, d->kh, d->kw * d->cs, d->dh * d->wp * d->cs, d->kb,
                               a, d->sw * d->cs, 1, d->w, d->co, d->out + q * d->ow * d->co,
                               d->co, false, d->ep);
    }
}

static void direct_rows(int64_t q0, int64_t q1, void *vctx) {
    const direct_job *d = vctx;
    direct_run_rows(d, d->src, 0, q0, q1, NULL, 0);
}

static void pad_one(const float *src, float *d, int64_t h, int64_t w, int64_t c, int64_t hp,
                    int64_t wp, int64_t top, int64_t left) {
    size_t row = (size_t)(wp * c);
    memset(d, 0, (size_t)top * row * sizeof(float));
    for (int64_t i = 0; i < h; i++) {
        float *r = d + (top + i) * row;
        memset(r, 0, (size_t)(left * c) * sizeof(float));
        memcpy(r + left * c, src + (size_t)i * w * c, (size_t)(w * c) * sizeof(float));
        int64_t e = (left + w) * c;
        memset(r + e, 0, (size_t)((int64_t)row - e) * sizeof(float));
    }
    memset(d + (top + h) * row, 0, (size_t)(hp - top - h) * row * sizeof(float));
}

/* Padded rows [r0, r1), padded columns [c0, c1) of one image x (h, w, c)
 * that lies at (top, left) in its zero padding, into d (rows of (c1-c0)*c). */
static void pad_part(const float *x, float *d, int64_t h, int64_t w, int64_t c, int64_t top,
                     int64_t left, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
    int64_t row = (c1 - c0) * c;
    /* the columns of x inside [c0, c1): [x0, x1) in padded coordinates */
    int64_t x0 = c0 > left ? c0 : left, x1 = c1 < left + w ? c1 : left + w;
    for (int64_t r = r0; r < r1; r++) {
        float *o = d + (r - r0) * row;
        int64_t i = r - top;
        if (i < 0 || i >= h || x1 <= x0) {
            memset(o, 0, (size_t)row * sizeof(float));
            continue;
        }
        memset(o, 0, (size_t)((x0 - c0) * c) * sizeof(float));
        memcpy(o + (x0 - c0) * c, x + (i * w + x0 - left) * c, (size_t)((x1 - x0) * c) * sizeof(float));
        memset(o + (x1 - c0) * c, 0, (size_t)((c1 - x1) * c) * sizeof(float));
    }
}

/* One image's output rows without a padded copy of the whole image: the
 * outputs whose windows lie inside x, rows [i0, i1) by columns [j0, j1),
 * read x where it lies; only the border's windows read padded copies of
 * the few rows (top and bottom) or columns (left and right) they reach,
 * made in buf. Each output is the same GEMM sum over the same values in
 * the same k order as from the padded image (tfe_sgemm_small_seg: an
 * element's value depends on neither m nor the tiling), so the bits are
 * those of the padded copy's; the copy of a 32x32x16 image, read from
 * memory and written to L2 on every pass, was ~6% of a ResNet-20 step. */
static void direct_image_parts(const direct_job *d, int64_t n, float *buf, int64_t i0, int64_t i1,
                               int64_t j0, int64_t j1) {
    int64_t cs = d->cs, co = d->co, sh = d->sh, sw = d->sw, reach = (d->kh - 1) * d->dh + 1;
    const float *x = d->x + (size_t)n * d->h * d->wd * cs;
    float *out = d->out + (size_t)n * d->oh * d->ow * co;
    int64_t seglen = d->kw * cs;
    /* the inside: one GEMM an output row over columns [j0, j1) */
    for (int64_t oi = i0; oi < i1; oi++)
        tfe_sgemm_small_seg_ep(j1 - j0, co, d->kh, seglen, d->dh * d->wd * cs, d->kb,
                               x + ((oi * sh - d->top) * d->wd + j0 * sw - d->left) * cs, sw * cs,
                               1, d->w, co, out + (oi * d->ow + j0) * co, co, false, d->ep);
    /* the top rows [0, i0) and the bottom rows [i1, oh), whole: their
     * padded rows at full padded width */
    for (int part = 0; part < 2; part++) {
        int64_t q0 = part ? i1 : 0, q1 = part ? d->oh : i0;
        if (q1 <= q0) continue;
        int64_t r0 = q0 * sh, r1 = (q1 - 1) * sh + reach;
        pad_part(x, buf, d->h, d->wd, cs, d->top, d->left, r0, r1, 0, d->wp);
        for (int64_t oi = q0; oi < q1; oi++)
            tfe_sgemm_small_seg_ep(d->ow, co, d->kh, seglen, d->dh * d->wp * cs, d->kb,
                                   buf + (oi * sh - r0) * d->wp * cs, sw * cs, 1, d->w, co,
                                   out + oi * d->ow * co, co, false, d->ep);
    }
    /* the left columns [0, j0) and the right columns [j1, ow) of the inside
     * rows: a strip of the padded columns they reach, one GEMM a column
     * over the rows */
    if (i1 <= i0) return;
    for (int part = 0; part < 2; part++) {
        int64_t p0 = part ? j1 : 0, p1 = part ? d->ow : j0;
        if (p1 <= p0) continue;
        int64_t c0 = p0 * sw, c1 = (p1 - 1) * sw + d->kw, sl = c1 - c0;
        int64_t r0 = i0 * sh, r1 = (i1 - 1) * sh + reach;
        pad_part(x, buf, d->h, d->wd, cs, d->top, d->left, r0, r1, c0, c1);
        for (int64_t oj = p0; oj < p1; oj++)
            tfe_sgemm_small_seg_ep(i1 - i0, co, d->kh, seglen, d->dh * sl * cs, d->kb,
                                   buf + (oj - p0) * sw * cs, sh * sl * cs, 1, d->w, co,
                                   out + (i0 * d->ow + oj) * co, d->ow * co, false, d->ep);
    }
}

/* Slot s0 runs the images it claims; those with an inside (outputs whose
 * windows need no padding) read x in place, the others are padded into
 * the slot's own buffer (hp*wp*cs, in L2), not the whole batch. */
static void direct_images(int64_t s0, int64_t s1, void *vctx) {
    direct_job *d = vctx;
    size_t isz = (size_t)(d->hp * d->wp * d->cs);
    float *img = d->img + (size_t)s0 * isz;
    (void)s1;
    /* the inside: rows oi with oi*sh - top >= 0 and oi*sh - top + reach <= h
     * (columns the same with kw) */
    int64_t reach = (d->kh - 1) * d->dh + 1;
    int64_t i0 = (d->top + d->sh - 1) / d->sh, j0 = (d->left + d->sw - 1) / d->sw;
    int64_t i1 = d->h - reach + d->top < 0 ? 0 : (d->h - reach + d->top) / d->sh + 1;
    int64_t j1 = d->wd - d->kw + d->left < 0 ? 0 : (d->wd - d->kw + d->left) / d->sw + 1;
    if (i1 > d->oh) i1 = d->oh;
    if (j1 > d->ow) j1 = d->ow;
    bool inside = i1 > i0 && j1 > j0;
    if (inside) {
        /* the parts run more, smaller tiles than whole rows, each reading
         * all of the filter (B). Measured (benchmarks.md): faster with a
         * small filter (32x32x16: 9 KB) and where the parts need fewer
         * tiles (8x8x64: 12 for 16), ~5% slower for 16x16x32 (36 KB, 36
         * tiles for 32) while its 14-row parts ran as 8 + 6 rows, a 6 x 2
         * tile being ~10% slower than 8 x 2. As 7 + 7 (tfe_sgemm_small
         * now) the parts were no faster there in the staged step (forward
         * ~1% faster, d/dx ~1% slower), so only in the first two cases:
         * B at most 24 KB (L1 is 32 KB), or no more tiles */
        int64_t kl = d->kw * d->cs, ni = i1 - i0, nj = j1 - j0;
#define TILES(m) tfe_sgemm_small_tiles(m, d->co, d->kh, kl, d->kb)
        int64_t whole = d->oh * TILES(d->ow);
        int64_t parts = ni * TILES(nj) + (d->oh - ni) * TILES(d->ow) + (d->ow - nj) * TILES(ni);
#undef TILES
        inside = d->kh * kl * d->co * (int64_t)sizeof(float) <= 24 * 1024 || parts <= whole;
    }
    for (;;) {
        int64_t n = __atomic_fetch_add(&d->next, 1, __ATOMIC_RELAXED);
        if (n >= d->n || tfe_interrupted) break;
        if (inside) {
            direct_image_parts(d, n, img, i0, i1, j0, j1);
            continue;
        }
        pad_one(d->x + (size_t)n * d->h * d->wd * d->cs, img, d->h, d->wd, d->cs, d->hp, d->wp,
                d->top, d->left);
        /* the image this slot likely claims next (images go in turn),
         * brought in while this one's rows run: x can be out of cache, and
         * pad_one's copy would wait on it */
        size_t xsz = (size_t)(d->h * d->wd * d->cs);
        int64_t nx = n + d->nslots;
        direct_run_rows(d, img, n, n * d->oh, (n + 1) * d->oh,
                        nx < d->n ? d->x + (size_t)nx * xsz : NULL, xsz * sizeof(float));
    }
}

typedef struct pad_job {
    const float *src;         /* (N, h, w, c) */
    float *dst;               /* (N, hp, wp, c), src at (top, left), zeros around */
    int64_t h, w, c, hp, wp, top, left;
} pad_job;

static void pad_images(int64_t n0, int64_t n1, void *vctx) {
    const pad_job *p = vctx;
    for (int64_t n = n0; n < n1; n++)
        pad_one(p->src + (size_t)n * p->h * p->w * p->c, p->dst + (size_t)n * p->hp * p->wp * p->c,
                p->h, p->w, p->c, p->hp, p->wp, p->top, p->left);
}

/* out = the valid, width-dilation-1 conv of src (N, h, w, cs) padded by
 * (top, left) and zeros to (hp, wp), with w (kh, kw, cs, co), summed in
 * blocks of kb (tfe_sgemm_small_seg). */
static int direct_conv(const float *src, int64_t n, int64_t h, int64_t w, int64_t cs, int64_t top,
                       int64_t left, int64_t hp, int64_t wp, const float *wv, int64_t kh,
                       int64_t kw, int64_t dh, int64_t sh, int64_t sw, int64_t oh, int64_t ow,
                       int64_t co, int64_t kb, float *out, const tfe_sgemm_ep *ep) {
    direct_job d = {.src = src, .x = src, .w = wv, .out = out, .h = h, .wd = w, .top = top,
                    .left = left, .hp = hp, .wp = wp, .cs = cs, .kh = kh, .kw = kw, .dh = dh,
                    .sh = sh, .sw = sw, .oh = oh, .ow = ow, .co = co, .kb = kb, .n = n, .ep = ep};
    bool pad = top || left || hp != h || wp != w;
    int64_t nt = tfe_num_threads();
    if (pad && n >= 2 * nt) {
        /* enough images for the threads: each pads its own, one at a time */
        int64_t nslots = nt < n ? nt : n;
        size_t bytes = (size_t)(nslots * hp * wp * cs) * sizeof(float);
        d.nslots = nslots;
        d.img = tfe_alloc(bytes);
        if (!d.img) return -1;
        tfe_parallel_for(nslots, 1, direct_images, &d);
        tfe_free(d.img, bytes);
        return kn_poll();
    }
    float *padv = NULL;
    size_t padb = 0;
    if (pad) {
        padb = (size_t)(n * hp * wp * cs) * sizeof(float);
        padv = tfe_alloc(padb);
        if (!padv) return -1;
        pad_job p = {.src = src, .dst = padv, .h = h, .w = w, .c = cs, .hp = hp, .wp = wp,
                     .top = top, .left = left};
        tfe_parallel_for(n, 1, pad_images, &p);
        d.src = padv;
    }
    int64_t per = ow * kh * kw * cs * co, grain = per ? 4 * F32_COL * 16 / per : 1;
    tfe_parallel_for(n * oh, grain < 1 ? 1 : grain, direct_rows, &d);
    if (padv) tfe_free(padv, padb);
    return kn_poll();
}

/* The padded extent of an input of size x read by an output of size o:
 * at least the input with its leading pad, and all that the windows reach. */
static int64_t padded(int64_t x, int64_t lead, int64_t o, int64_t s, int64_t k, int64_t d) {
    int64_t reach = (o - 1) * s + (k - 1) * d + 1;
    return x + lead > reach ? x + lead : reach;
}

static bool f32_direct_fwd(bool f64, const geom *g) { return f32_path(f64, g) && g->dw == 1; }

static int f32_forward(const geom *g, const float *x, const float *w, float *y,
                       const tfe_sgemm_ep *ep) {
    return direct_conv(x, g->n, g->h, g->w, g->c, g->pt, g->pl,
                       padded(g->h, g->pt, g->oh, g->sh, g->kh, g->dh),
                       padded(g->w, g->pl, g->ow, g->sw, g->kw, 1), w, g->kh, g->kw, g->dh,
                       g->sh, g->sw, g->oh, g->ow, g->co, 64, y, ep);
}

/* d/dx as a forward conv: stride 1, width dilation 1, at least 8 input
 * channels (the product's narrow side), and dy's padding not negative. */
static bool f32_direct_dx(bool f64, const geom *g) {
    return f32_path(f64, g) && g->sh == 1 && g->sw == 1 && g->dw == 1 && g->c >= 8 &&
           g->pt <= (g->kh - 1) * g->dh && g->pl <= g->kw - 1 &&
           (g->kh - 1) * g->dh - g->pt + g->oh <= g->h + (g->kh - 1) * g->dh &&
           g->kw - 1 - g->pl + g->ow <= g->w + g->kw - 1;
}

/* wf (kh, kw, Cout, Cin): w flipped in both filter axes, channels swapped.
 * Each tap's C x Cout block is transposed 4 x 4 at a time in registers where
 * both counts are multiples of 4 (ResNet-20's 16, 32, 64): the element loop
 * stored to a new cache line at every element, ~5 cycles an element and
 * ~0.3 ms of the staged ResNet-20 step (a copy: no bit can change). Not
 * inlined, so that grad_input_into compiles as it did. */
__attribute__((noinline)) static void flip_filter(const geom *g, const float *w, float *wf) {
    int64_t C = g->c, Co = g->co;
    for (int64_t a = 0; a < g->kh; a++)
        for (int64_t b = 0; b < g->kw; b++) {
            const float *s = w + ((g->kh - 1 - a) * g->kw + (g->kw - 1 - b)) * C * Co;
            float *d = wf + (a * g->kw + b) * Co * C;
#if defined(__x86_64__) && defined(__GNUC__)
            if (C % 4 == 0 && Co % 4 == 0) {
                for (int64_t i = 0; i < C; i += 4)
                    for (int64_t o = 0; o < Co; o += 4) {
                        __m128 r0 = _mm_loadu_ps(s + i * Co + o), r1 = _mm_loadu_ps(s + (i + 1) * Co + o),
                               r2 = _mm_loadu_ps(s + (i + 2) * Co + o), r3 = _mm_loadu_ps(s + (i + 3) * Co + o);
                        _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
                        _mm_storeu_ps(d + o * C + i, r0);
                        _mm_storeu_ps(d + (o + 1) * C + i, r1);
                        _mm_storeu_ps(d + (o + 2) * C + i, r2);
                        _mm_storeu_ps(d + (o + 3) * C + i, r3);
                    }
                continue;
            }
#endif
            for (int64_t i = 0; i < C; i++)
                for (int64_t o = 0; o < Co; o++) d[o * C + i] = s[i * Co + o];
        }
}

static int f32_grad_input_direct(const geom *g, const float *dy, const float *w, float *dx) {
    int64_t K = g->kh * g->kw * g->c * g->co;
    size_t wfb = (size_t)K * sizeof(float);
    float *wf = tfe_alloc(wfb);
    if (!wf) return -1;
    flip_filter(g, w, wf);
    int64_t top = (g->kh - 1) * g->dh - g->pt, left = g->kw - 1 - g->pl;
    int rc = direct_conv(dy, g->n, g->oh, g->ow, g->co, top, left, g->h + (g->kh - 1) * g->dh,
                         g->w + g->kw - 1, wf, g->kh, g->kw, g->dh, 1, 1, g->h, g->w, g->c,
                         g->co, dx, NULL);
    tfe_free(wf, wfb);
    return rc;
}

/* d/dw without im2col: filter row a's block of dw (kw*C x Cout) gains
 * A^T @ dy over each output row, A (ow x kw*C) read in the padded input as
 * the forward pass reads it. Each chunk of output rows sums into its own
 * K x Cout (row by row), added to its group's sum, as f32_run's d/dw does.
 * Worth it where an output row is long (ow >= 16): each GEMM then sums ow
 * terms before it adds into dw. */
typedef struct dwd_job {
    const geom *g;
    const float *xp, *dy;     /* x (N, h, w, C) (padded when !img), dy */
    float *img;               /* NULL, or one padded image (hp, wp, C) a slot */
    float *dw, *sums, *tmp;   /* dw (group 0), groups 1.., one chunk sum a slot */
    int64_t hp, wp, rows, nchunks, ngroups, nslots;
    int64_t next;             /* next group to claim (atomic) */
} dwd_job;

static bool f32_direct_dw(bool f64, const geom *g) {
    return f32_path(f64, g) && g->dw == 1 && g->ow >= 16;
}

static void dwd_slots(int64_t s0, int64_t s1, void *vctx) {
    dwd_job *j = vctx;
    const geom *g = j->g;
    int64_t seg = g->kw * g->c, kc = g->kh * seg * g->co, nq = g->n * g->oh;
    size_t isz = (size_t)(j->hp * j->wp * g->c), xsz = (size_t)(g->h * g->w * g->c);
    float *img = j->img ? j->img + (size_t)s0 * isz : NULL;
    int64_t cur = -1; /* the image padded in img */
    (void)s1;
    for (;;) {
        int64_t t = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
        if (t >= j->ngroups || tfe_interrupted) break;
        float *acc = t == 0 ? j->dw : j->sums + (t - 1) * kc;
        int64_t c0 = t * j->nchunks / j->ngroups, c1 = (t + 1) * j->nchunks / j->ngroups;
        int64_t qg = c1 * j->rows < nq ? c1 * j->rows : nq; /* the group's rows' end */
        for (int64_t ch = c0; ch < c1 && !tfe_interrupted; ch++) {
            float *sum = ch == c0 ? acc : j->tmp + s0 * kc;
            int64_t q0 = ch * j->rows, q1 = q0 + j->rows < nq ? q0 + j->rows : nq;
            /* the chunk's rows in runs within one image: one GEMM a run and
             * filter row, its output rows the segments of k (blocks of 64
             * restarting at each: the sums of one GEMM a row) */
            for (int64_t q = q0, qe; q < q1; q = qe) {
                int64_t n = q / g->oh, oi = q % g->oh;
                qe = (n + 1) * g->oh < q1 ? (n + 1) * g->oh : q1;
                const float *xn = j->xp + (size_t)n * isz, *pre = NULL;
                if (img) {
                    /* a slot pads its images one at a time, in L2 */
                    if (n != cur)
                        pad_one(j->xp + (size_t)n * xsz, img, g->h, g->w, g->c, j->hp, j->wp,
                                g->pt, g->pl);
                    cur = n;
                    xn = img;
                    /* the image this slot pads next, a part before each
                     * GEMM: x was written in the forward pass, long out of
                     * cache, and pad_one's copy waited on memory (~2% of
                     * a ResNet-20 step). After the group's last image,
                     * the first of the group this slot likely claims next
                     * (t + nslots: groups are claimed in turn) */
                    int64_t nx = (n + 1) * g->oh < qg ? n + 1 : -1;
                    if (nx < 0 && t + j->nslots < j->ngroups)
                        nx = (t + j->nslots) * j->nchunks / j->ngroups * j->rows / g->oh;
                    pre = nx >= 0 ? j->xp + (size_t)nx * xsz : NULL;
                }
                for (int64_t a = 0; a < g->kh; a++) {
                    if (pre)
                        prefetch_part(pre, xsz * sizeof(float),
                                      oi * g->kh + a * (qe - q), oi * g->kh + (a + 1) * (qe - q),
                                      g->oh * g->kh);
                    const float *xr = xn + ((oi * g->sh + a * g->dh) * j->wp) * g->c;
                    tfe_sgemm_small_seg(seg, g->co, qe - q, g->ow, g->sh * j->wp * g->c, 64, xr, 1,
                                        g->sw * g->c, j->dy + q * g->ow * g->co, g->co,
                                        sum + a * seg * g->co, g->co, q > q0);
                }
            }
            if (ch > c0) chunk_add_f32(acc, sum, kc, true);
        }
    }
}

static int f32_grad_filter_direct(const geom *g, const float *x, const float *dy, float *dw) {
    int64_t hp = padded(g->h, g->pt, g->oh, g->sh, g->kh, g->dh);
    int64_t wp = padded(g->w, g->pl, g->ow, g->sw, g->kw, 1);
    int64_t K = g->kh * g->kw * g->c, kc = K * g->co, nq = g->n * g->oh;
    dwd_job j = {.g = g, .xp = x, .dy = dy, .dw = dw, .hp = hp, .wp = wp};
    j.rows = F32_COL / (g->ow * K) < 1 ? 1 : F32_COL / (g->ow * K);
    j.nchunks = (nq + j.rows - 1) / j.rows;
    j.ngroups = j.nchunks < F32_GROUPS ? j.nchunks : F32_GROUPS;
    int64_t nslots = tfe_num_threads() < j.ngroups ? tfe_num_threads() : j.ngroups;
    j.nslots = nslots;
    bool pad = g->pt || g->pl || hp != g->h || wp != g->w;
    size_t padn = pad ? (size_t)(nslots * hp * wp * g->c) : 0;
    size_t bytes = (padn + (size_t)((j.ngroups - 1 + nslots) * kc)) * sizeof(float);
    float *buf = tfe_alloc(bytes);
    if (!buf) return -1;
    j.sums = buf + padn;
    j.tmp = j.sums + (j.ngroups - 1) * kc;
    if (pad) j.img = buf;
    tfe_parallel_for(nslots, 1, dwd_slots, &j);
    for (int64_t t = 0; t < j.ngroups - 1; t++)
        for (int64_t i = 0; i < kc; i++) dw[i] += j.sums[t * kc + i];
    tfe_free(buf, bytes);
    return kn_poll();
}

/* The batched form: im2col of nb images in parallel over output rows, then
 * one GEMM (threaded by OpenBLAS). */
static int64_t chunk_batches(const geom *g) {
    int64_t per = g->oh * g->ow * g->kh * g->kw * g->c;
    int64_t nb = per > 0 ? COL_LIMIT / per : g->n;
    return nb < 1 ? 1 : nb > g->n ? g->n : nb;
}

static char *col_alloc(const geom *g, int64_t nb, size_t es, size_t *nbytes) {
    *nbytes = (size_t)(nb * g->oh * g->ow * g->kh * g->kw * g->c) * es;
    if (*nbytes == 0) *nbytes = es;
    return tfe_alloc(*nbytes);
}

typedef struct col_ctx {
    const geom *g;
    const char *x;
    char *col;
    int64_t q0;        /* first output row (n, oh_i) of the chunk */
    size_t es;
    bool f64;
} col_ctx;

static void im2col_range(int64_t r0, int64_t r1, void *vctx) {
    col_ctx *k = vctx;
    size_t row = (size_t)(k->g->ow * k->g->kh * k->g->kw * k->g->c) * k->es;
    im2col(k->f64, k->g, k->x, k->col + (size_t)r0 * row, k->q0 + r0, k->q0 + r1);
}

static void im2col_batched(const geom *g, bool f64, const char *x, char *col, int64_t n0,
                           int64_t cnt) {
    int64_t per = g->ow * g->kh * g->kw * g->c;
    int64_t grain = 16384 / (per ? per : 1);
    col_ctx k = {.g = g, .x = x, .col = col, .q0 = n0 * g->oh, .es = f64 ? 8 : 4, .f64 = f64};
    tfe_parallel_for(cnt * g->oh, grain < 1 ? 1 : grain, im2col_range, &k);
}

typedef struct col2im_ctx {
    const geom *g;
    const char *col;
    char *dx;
    int64_t n0;
    bool f64;
} col2im_ctx;

/* Tasks are whole images, whose dx are disjoint. */
static void col2im_range(int64_t i0, int64_t i1, void *vctx) {
    col2im_ctx *k = vctx;
    const geom *g = k->g;
    size_t img = (size_t)(g->oh * g->ow * g->kh * g->kw * g->c) * (k->f64 ? 8 : 4);
    col2im(k->f64, g, k->col + (size_t)i0 * img, k->dx, (k->n0 + i0) * g->oh, (k->n0 + i1) * g->oh);
}

/* out (N, OH, OW, Cout) = conv(x, w), x contiguous, then the epilogue ep
 * (NULL: none) as each pass writes its rows. */
static int conv_forward(const geom *g, const tfe_tensor *x, const tfe_tensor *w, tfe_tensor *out,
                        const conv_ep *ep) {
    bool f64 = x->dtype == TFE_FLOAT64;
    size_t es = dtype_size(x->dtype);
    int64_t K = g->kh * g->kw * g->c, P = g->oh * g->ow;
    tfe_sgemm_ep sep;
    if (g->n * P * g->co == 0) return 0;
    if (is_pointwise(g)) {
        gemm(f64, false, false, g->n * P, g->co, K, tensor_data(x), K ? K : 1, tensor_data(w),
             g->co, false, tensor_data(out), g->co);
        ep_rows_par(f64, tensor_data(out), g->n * P, g->co, ep);
        return 0;
    }
    if (f32_direct_fwd(f64, g))
        return f32_forward(g, (const float *)tensor_data(x), (const float *)tensor_data(w),
                           (float *)tensor_data(out), sgemm_ep(ep, &sep));
    if (f32_path(f64, g))
        return f32_run(g, CONV_FWD, tensor_data(x), tensor_data(w), NULL, tensor_data(out),
                       sgemm_ep(ep, &sep));
    conv_job j = {.g = g, .kind = CONV_FWD, .f64 = f64, .es = es, .x = tensor_data(x),
                  .w = tensor_data(w), .out = tensor_data(out), .ep = ep};
    if (conv_plan(g, &j)) return conv_run(&j);
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
        im2col_batched(g, f64, tensor_data(x), col, n0, cnt);
        gemm(f64, false, false, cnt * P, g->co, K, col, K ? K : 1, tensor_data(w), g->co, false,
             tensor_data(out) + (size_t)(n0 * P * g->co) * es, g->co);
        ep_rows_par(f64, tensor_data(out) + (size_t)(n0 * P * g->co) * es, cnt * P, g->co, ep);
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
    int rc = conv_forward(&g, x, w, c->out[0], NULL);
    tensor_decref(w);
    tensor_decref(x);
    return rc;
}

/* conv2d_bias(x, w, b) and conv2d_bias_relu(x, w, b) (ops_nn.def): conv2d,
 * then + b (b a vector of the output channels, x's dtype), then relu; what
 * the optimizer makes of those ops in a staged graph (graph/opt_conv.c).
 * ints[5] = 1: b was the add's first operand. */
static int conv_bias_check(const tfe_opcall *c, geom *g) {
    if (conv_check(c, g) < 0) return -1;
    const tfe_tensor *b = c->in[2];
    if (b->rank != 1 || b->shape[0] != g->co || b->dtype != c->in[0]->dtype) {
        char s[200];
        tfe_error_set("%s: the bias must be a %s vector of the %lld output channels, got %s %s",
                      tfe_ops[c->op].name, dtype_name(c->in[0]->dtype), (long long)g->co,
                      dtype_name(b->dtype), shape_str(b->rank, b->shape, s));
        return -1;
    }
    return 0;
}

int infer_conv2d_bias(const tfe_opcall *c, tfe_meta *m) {
    geom g;
    if (conv_bias_check(c, &g) < 0) return -1;
    *m = (tfe_meta){.dtype = c->in[0]->dtype, .rank = 4, .shape = {g.n, g.oh, g.ow, g.co}};
    return 0;
}

int k_conv2d_bias(const tfe_opcall *c) {
    geom g;
    if (conv_bias_check(c, &g) < 0) return -1;
    tfe_tensor *in[3] = {NULL, NULL, NULL};
    int rc = -1;
    for (int i = 0; i < 3; i++)
        if (!(in[i] = tensor_contiguous(c->in[i]))) goto out;
    conv_ep ep = {.bias = tensor_data(in[2]), .bias_first = attr_or(c->at, 5, 0) == 1,
                  .relu = c->op == OP_CONV2D_BIAS_RELU};
    rc = conv_forward(&g, in[0], in[1], c->out[0], &ep);
out:
    for (int i = 0; i < 3; i++) tensor_decref(in[i]);
    return rc;
}

/* conv2d(x, w) followed by batch_norm_infer(y, gamma, beta, mean, var) (and
 * relu, or a fused relu(y + h)) that reads nothing else: inputs x, w,
 * gamma, beta, mean, var (and h), the conv's attributes with f[0] the
 * batch norm's eps. A plan makes these calls (graph/plan.c, plan_conv_bn):
 * the output is the batch norm's (the relu's), each element
 * batch_norm_infer's formula on the conv's sum as the passes write it (in
 * the register tiles' last store, or to each chunk's rows right after its
 * GEMM), so the bits are those of the ops one after the other, and the
 * conv's output is never made. The output never shares memory with h (the
 * plan keeps them apart): a tile can store partial sums before its last
 * store reads h. ep: 0 y, 1 relu(y), 2 relu(y + h), 3 relu(h + y). */
static int conv_bn(const tfe_opcall *c, int ep_kind) {
    geom g;
    if (conv_check(c, &g) < 0) return -1;
    int nin = ep_kind >= 2 ? 7 : 6;
    tfe_tensor *in[7] = {NULL};
    void *rs = NULL;
    size_t rsb = (size_t)g.co * dtype_size(c->in[0]->dtype);
    int rc = -1;
    for (int i = 0; i < nin; i++)
        if (!(in[i] = tensor_contiguous(c->in[i]))) goto out;
    if (!(rs = tfe_alloc(rsb ? rsb : 1))) goto out;
    bool f64 = in[0]->dtype == TFE_FLOAT64;
    kn_bn_infer_scale(f64, tensor_data(in[5]), c->at->f[0], g.co, rs);
    conv_ep ep = {.relu = ep_kind > 0, .bn_m = tensor_data(in[4]), .bn_rs = rs, .bn_g = tensor_data(in[2]),
                  .bn_b = tensor_data(in[3]), .res = ep_kind >= 2, .res_first = ep_kind == 3};
    if (ep.res) {
        const tfe_tensor *h = in[6], *y = c->out[0];
        bool fits = h->dtype == y->dtype && h->rank == 4 && tensor_is_contiguous(y);
        for (int d = 0; fits && d < 4; d++) fits = h->shape[d] == y->shape[d];
        if (!fits) {
            tfe_error_set("conv2d+batch_norm_infer: the residual must have the output's dtype and shape");
            goto out;
        }
        ep.res_off = (intptr_t)tensor_data(h) - (intptr_t)tensor_data(y);
    }
    rc = conv_forward(&g, in[0], in[1], c->out[0], &ep);
out:
    if (rs) tfe_free(rs, rsb ? rsb : 1);
    for (int i = 0; i < nin; i++) tensor_decref(in[i]);
    return rc;
}

int k_conv2d_bn_infer(const tfe_opcall *c) { return conv_bn(c, 0); }
int k_conv2d_bn_infer_relu(const tfe_opcall *c) { return conv_bn(c, 1); }
int k_conv2d_bn_infer_add_relu(const tfe_opcall *c) { return conv_bn(c, 2); }
int k_conv2d_bn_infer_radd_relu(const tfe_opcall *c) { return conv_bn(c, 3); }

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

/* The nn_grad.h backward functions in two forms: returning a new tensor
 * (nn_grad.h, for the autodiff rules) and writing into a given contiguous,
 * uninitialised tensor of the result's shape and dtype (kn_*_into: the op
 * kernels of kernels_nn_grad.c pass the output the dispatcher allocated,
 * which saves copying each result). */

static int grad_input_geom(tfe_tensor *dy, tfe_tensor *w, const int64_t x_shape[4],
                           const tfe_attrs *at, geom *g) {
    if (check_rank4("conv2d", "filter", "(KH, KW, Cin, Cout)", w) < 0 ||
        check_float("conv2d", w) < 0 || make_geom("conv2d", x_shape, w->shape, at, g) < 0 ||
        check_dy("conv2d", g, dy, w->dtype) < 0)
        return -1;
    return 0;
}

static int grad_input_into(const geom *gp, tfe_tensor *dy, tfe_tensor *w, tfe_tensor *dx) {
    geom g = *gp;
    bool f64 = w->dtype == TFE_FLOAT64;
    size_t es = dtype_size(w->dtype);
    int64_t K = g.kh * g.kw * g.c, P = g.oh * g.ow;
    int64_t numel = tensor_numel(dx);
    if (numel == 0) return 0;
    /* col2im accumulates; the pointwise GEMM and the direct pass overwrite,
     * and the float32 chunked pass clears each image itself */
    bool overwrite = P * g.co != 0 && (is_pointwise(&g) || f32_direct_dx(f64, &g) || f32_path(f64, &g));
    if (!overwrite) memset(tensor_data(dx), 0, (size_t)numel * es);
    if (P * g.co == 0) return 0;
    tfe_tensor *dyc = tensor_contiguous(dy), *wc = dyc ? tensor_contiguous(w) : NULL;
    if (!wc) goto fail;
    conv_job j = {.g = &g, .kind = CONV_DX, .f64 = f64, .es = es, .dy = tensor_data(dyc),
                  .w = tensor_data(wc), .out = tensor_data(dx)};
    if (f32_direct_dx(f64, &g)) {
        if (f32_grad_input_direct(&g, (const float *)tensor_data(dyc),
                                  (const float *)tensor_data(wc), (float *)tensor_data(dx)) < 0)
            goto fail;
    } else if (f32_path(f64, &g)) {
        /* w^T (Cout x K), the B of dcol = dy @ w^T */
        size_t wtb = (size_t)(K * g.co) * sizeof(float);
        float *wt = tfe_alloc(wtb);
        if (!wt) goto fail;
        const float *wv = (const float *)tensor_data(wc);
        for (int64_t k = 0; k < K; k++)
            for (int64_t o = 0; o < g.co; o++) wt[o * K + k] = wv[k * g.co + o];
        int rc = f32_run(&g, CONV_DX, NULL, wt, tensor_data(dyc), tensor_data(dx), NULL);
        tfe_free(wt, wtb);
        if (rc < 0) goto fail;
    } else if (is_pointwise(&g)) {
        /* dx = dy (N*P, Cout) @ W^T (Cout, Cin) */
        gemm(f64, false, true, g.n * P, K, g.co, tensor_data(dyc), g.co, tensor_data(wc), g.co,
             false, tensor_data(dx), K);
    } else if (conv_plan(&g, &j)) {
        if (conv_run(&j) < 0) goto fail;
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
            col2im_ctx k = {.g = &g, .col = col, .dx = tensor_data(dx), .n0 = n0, .f64 = f64};
            tfe_parallel_for(cnt, 1, col2im_range, &k);
        }
        tfe_free(col, colbytes);
    }
    tensor_decref(wc);
    tensor_decref(dyc);
    return 0;
fail:
    if (wc) tensor_decref(wc);
    if (dyc) tensor_decref(dyc);
    return -1;
}

tfe_tensor *tfe_conv2d_grad_input(tfe_tensor *dy, tfe_tensor *w, const int64_t x_shape[4],
                                  const tfe_attrs *at) {
    geom g;
    if (grad_input_geom(dy, w, x_shape, at, &g) < 0) return NULL;
    tfe_tensor *dx = tensor_new(w->dtype, 4, x_shape);
    if (dx && grad_input_into(&g, dy, w, dx) < 0) {
        tensor_decref(dx);
        return NULL;
    }
    return dx;
}

int kn_conv2d_grad_input_into(tfe_tensor *dy, tfe_tensor *w, const int64_t x_shape[4],
                              const tfe_attrs *at, tfe_tensor *dx) {
    geom g;
    if (grad_input_geom(dy, w, x_shape, at, &g) < 0) return -1;
    return grad_input_into(&g, dy, w, dx);
}

/* dw += the nrest accumulators at rest (len elements each), in order. */
static void add_slots(bool f64, char *dw, const char *rest, int64_t nrest, int64_t len) {
    for (int64_t s = 0; s < nrest; s++) {
        if (f64) {
            double *d = (double *)dw;
            const double *a = (const double *)rest + s * len;
            for (int64_t i = 0; i < len; i++) d[i] += a[i];
        } else {
            float *d = (float *)dw;
            const float *a = (const float *)rest + s * len;
            for (int64_t i = 0; i < len; i++) d[i] += a[i];
        }
    }
}

static int grad_filter_geom(tfe_tensor *x, tfe_tensor *dy, const int64_t w_shape[4],
                            const tfe_attrs *at, geom *g) {
    if (check_rank4("conv2d", "input", "(N, H, W, C)", x) < 0 || check_float("conv2d", x) < 0 ||
        make_geom("conv2d", x->shape, w_shape, at, g) < 0 ||
        check_dy("conv2d", g, dy, x->dtype) < 0)
        return -1;
    return 0;
}

static int grad_filter_into(const geom *gp, tfe_tensor *x, tfe_tensor *dy, tfe_tensor *dw) {
    geom g = *gp;
    bool f64 = x->dtype == TFE_FLOAT64;
    size_t es = dtype_size(x->dtype);
    int64_t K = g.kh * g.kw * g.c, P = g.oh * g.ow;
    if (K * g.co == 0) return 0;
    if (g.n * P == 0) {
        memset(tensor_data(dw), 0, (size_t)(K * g.co) * es);
        return 0;
    }
    /* from here every path writes all of dw (its first GEMM with beta 0) */
    tfe_tensor *xc = tensor_contiguous(x), *dyc = xc ? tensor_contiguous(dy) : NULL;
    if (!dyc) goto fail;
    conv_job j = {.g = &g, .kind = CONV_DW, .f64 = f64, .es = es, .x = tensor_data(xc),
                  .dy = tensor_data(dyc)};
    if (f32_direct_dw(f64, &g)) {
        if (f32_grad_filter_direct(&g, (const float *)tensor_data(xc), (const float *)tensor_data(dyc),
                                   (float *)tensor_data(dw)) < 0)
            goto fail;
    } else if (f32_path(f64, &g)) {
        if (f32_run(&g, CONV_DW, tensor_data(xc), NULL, tensor_data(dyc), tensor_data(dw), NULL) < 0)
            goto fail;
    } else if (is_pointwise(&g)) {
        /* dW (Cin, Cout) = x^T (Cin, N*P) @ dy (N*P, Cout) */
        gemm(f64, true, false, K, g.co, g.n * P, tensor_data(xc), K, tensor_data(dyc), g.co, false,
             tensor_data(dw), g.co);
    } else if (conv_plan(&g, &j)) {
        /* one accumulator per group, summed in group order afterwards */
        size_t accsz = (size_t)(K * g.co) * es;
        char *acc = tfe_alloc(accsz * (size_t)j.ngroups);
        if (!acc) goto fail;
        j.out = acc;
        int rc = conv_run(&j);
        if (rc == 0) {
            memcpy(tensor_data(dw), acc, accsz);
            add_slots(f64, tensor_data(dw), acc + accsz, j.ngroups - 1, K * g.co);
        }
        tfe_free(acc, accsz * (size_t)j.ngroups);
        if (rc < 0) goto fail;
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
            im2col_batched(&g, f64, tensor_data(xc), col, n0, cnt);
            gemm(f64, true, false, K, g.co, cnt * P, col, K,
                 tensor_data(dyc) + (size_t)(n0 * P * g.co) * es, g.co, n0 > 0, tensor_data(dw),
                 g.co);
        }
        tfe_free(col, colbytes);
    }
    tensor_decref(dyc);
    tensor_decref(xc);
    return 0;
fail:
    if (dyc) tensor_decref(dyc);
    if (xc) tensor_decref(xc);
    return -1;
}

tfe_tensor *tfe_conv2d_grad_filter(tfe_tensor *x, tfe_tensor *dy, const int64_t w_shape[4],
                                   const tfe_attrs *at) {
    geom g;
    if (grad_filter_geom(x, dy, w_shape, at, &g) < 0) return NULL;
    tfe_tensor *dw = tensor_new(x->dtype, 4, w_shape);
    if (dw && grad_filter_into(&g, x, dy, dw) < 0) {
        tensor_decref(dw);
        return NULL;
    }
    return dw;
}

int kn_conv2d_grad_filter_into(tfe_tensor *x, tfe_tensor *dy, const int64_t w_shape[4],
                               const tfe_attrs *at, tfe_tensor *dw) {
    geom g;
    if (grad_filter_geom(x, dy, w_shape, at, &g) < 0) return -1;
    return grad_filter_into(&g, x, dy, dw);
}

/* ---- pooling ------------------------------------------------------------------ */

typedef struct pool_ctx {
    const geom *g;
    const char *x;    /* contiguous input (forward, max backward) */
    const char *dy;   /* contiguous dy (backward) */
    char *out;        /* forward: output; backward: dx (zeroed unless tiled) */
    bool f64, max;
    bool tiled;       /* backward: the windows tile dx exactly (each cell in one window) */
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

/* Max pooling sends the window's first NaN, else its first maximum. The scan
 * that keeps the maximum with a plain "v > m" select compiles without
 * branches (maxss / cmov), where the NaN-aware comparison compiled to
 * branches that mispredicted on every other cell of random data; NaNs are
 * only noted (u) and a window holding one is scanned again, exactly. */

/* Forward: tasks are output rows r = n*oh + oh_i. */
#define POOL_FWD(T)                                                               \
    for (int64_t r = r0; r < r1; r++) {                                           \
        int64_t n = r / g->oh, oi = r % g->oh, C = g->c;                          \
        const T *x = (const T *)k->x + (size_t)n * g->h * g->w * C;               \
        T *o = (T *)k->out + (size_t)r * g->ow * C;                               \
        for (int64_t oj = 0; oj < g->ow; oj++, o += C) {                          \
            WINDOW(g, oi, oj)                                                     \
            if (!k->max) {                                                        \
                T inv = (T)1 / (T)((h1 - h0) * (w1 - w0));                        \
                for (int64_t ci = 0; ci < C; ci++) {                              \
                    T acc = 0;                                                    \
                    for (int64_t i = h0; i < h1; i++)                             \
                        for (int64_t j = w0; j < w1; j++) acc += x[(i * g->w + j) * C + ci]; \
                    o[ci] = acc * inv;                                            \
                }                                                                 \
                continue;                                                         \
            }                                                                     \
            if (h1 - h0 == 2 && w1 - w0 == 2) {                                   \
                /* the common 2x2 window, unrolled */                             \
                const T *s0 = x + (h0 * g->w + w0) * C, *s2 = s0 + g->w * C;      \
                for (int64_t ci = 0; ci < C; ci++) {                              \
                    T v0 = s0[ci], v1 = s0[C + ci], v2 = s2[ci], v3 = s2[C + ci]; \
                    T m = v0;                                                     \
                    m = v1 > m ? v1 : m;                                          \
                    m = v2 > m ? v2 : m;                                          \
                    m = v3 > m ? v3 : m;                                          \
                    if ((v0 != v0) | (v1 != v1) | (v2 != v2) | (v3 != v3))        \
                        m = v0 != v0 ? v0 : v1 != v1 ? v1 : v2 != v2 ? v2 : v3;   \
                    o[ci] = m;                                                    \
                }                                                                 \
                continue;                                                         \
            }                                                                     \
            for (int64_t ci = 0; ci < C; ci++) {                                  \
                const T *s = x + ci;                                              \
                T m = s[(h0 * g->w + w0) * C];                                    \
                int u = 0;                                                        \
                for (int64_t i = h0; i < h1; i++)                                 \
                    for (int64_t j = w0; j < w1; j++) {                           \
                        T v = s[(i * g->w + j) * C];                              \
                        m = v > m ? v : m;                                        \
                        u |= v != v;                                              \
                    }                                                             \
                if (u) {                                                          \
                    m = -(T)INFINITY;                                             \
                    for (int64_t i = h0; i < h1 && m == m; i++)                   \
                        for (int64_t j = w0; j < w1; j++) {                       \
                            T v = s[(i * g->w + j) * C];                          \
                            if (v > m || v != v) m = v;                           \
                            if (v != v) break;                                    \
                        }                                                         \
                }                                                                 \
                o[ci] = m;                                                        \
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
 * dy cell to the first maximum of its window (NaN counts as the maximum; see
 * POOL_FWD for the branch-free scan). When the windows tile dx, every cell is
 * written exactly once (zero, or dy at the maximum), so dx needs no zeroing
 * beforehand; otherwise dy is added at the maximum as before. */
#define POOL_BWD(T)                                                                 \
    for (int64_t n = n0; n < n1; n++) {                                             \
        int64_t C = g->c;                                                           \
        size_t img = (size_t)n * g->h * g->w * C;                                   \
        const T *x = (const T *)k->x + img;                                         \
        T *dx = (T *)k->out + img;                                                  \
        const T *dy = (const T *)k->dy + (size_t)n * g->oh * g->ow * C;             \
        for (int64_t oi = 0; oi < g->oh; oi++)                                      \
            for (int64_t oj = 0; oj < g->ow; oj++, dy += C) {                       \
                WINDOW(g, oi, oj)                                                   \
                if (!k->max) {                                                      \
                    T inv = (T)1 / (T)((h1 - h0) * (w1 - w0));                      \
                    for (int64_t i = h0; i < h1; i++)                               \
                        for (int64_t j = w0; j < w1; j++) {                         \
                            T *d = dx + (i * g->w + j) * C;                         \
                            for (int64_t ci = 0; ci < C; ci++) d[ci] += dy[ci] * inv; \
                        }                                                           \
                    continue;                                                       \
                }                                                                   \
                if (k->tiled && h1 - h0 == 2 && w1 - w0 == 2) {                     \
                    /* the common 2x2 window, unrolled */                           \
                    int64_t p0 = h0 * g->w + w0, p2 = p0 + g->w;                    \
                    T *d0 = dx + p0 * C, *d2 = dx + p2 * C;                         \
                    const T *s0 = x + p0 * C, *s2 = x + p2 * C;                     \
                    for (int64_t ci = 0; ci < C; ci++) {                            \
                        T v0 = s0[ci], v1 = s0[C + ci], v2 = s2[ci], v3 = s2[C + ci]; \
                        if ((v0 != v0) | (v1 != v1) | (v2 != v2) | (v3 != v3)) {    \
                            int64_t b = v0 != v0 ? 0 : v1 != v1 ? 1 : v2 != v2 ? 2 : 3; \
                            d0[ci] = b == 0 ? dy[ci] : 0;                           \
                            d0[C + ci] = b == 1 ? dy[ci] : 0;                       \
                            d2[ci] = b == 2 ? dy[ci] : 0;                           \
                            d2[C + ci] = b == 3 ? dy[ci] : 0;                       \
                            continue;                                               \
                        }                                                           \
                        int b = 0;                                                  \
                        T m = v0;                                                   \
                        b = v1 > m ? 1 : b;                                         \
                        m = v1 > m ? v1 : m;                                        \
                        b = v2 > m ? 2 : b;                                         \
                        m = v2 > m ? v2 : m;                                        \
                        b = v3 > m ? 3 : b;                                         \
                        d0[ci] = 0;                                                 \
                        d0[C + ci] = 0;                                             \
                        d2[ci] = 0;                                                 \
                        d2[C + ci] = 0;                                             \
                        T *t = b < 2 ? d0 : d2;                                     \
                        t[(b & 1) * C + ci] = dy[ci];                               \
                    }                                                               \
                    continue;                                                       \
                }                                                                   \
                for (int64_t ci = 0; ci < C; ci++) {                                \
                    const T *s = x + ci;                                            \
                    int64_t best = h0 * g->w + w0;                                  \
                    T bv = s[best * C];                                             \
                    int u = 0;                                                      \
                    for (int64_t i = h0; i < h1; i++)                               \
                        for (int64_t j = w0; j < w1; j++) {                         \
                            int64_t at = i * g->w + j;                              \
                            T v = s[at * C];                                        \
                            bool gt = v > bv;                                       \
                            best = gt ? at : best;                                  \
                            bv = gt ? v : bv;                                       \
                            u |= v != v;                                            \
                        }                                                           \
                    if (u) {                                                        \
                        best = h0 * g->w + w0;                                      \
                        bv = s[best * C];                                           \
                        for (int64_t i = h0; i < h1 && bv == bv; i++)               \
                            for (int64_t j = w0; j < w1; j++) {                     \
                                T v = s[(i * g->w + j) * C];                        \
                                if (v > bv || v != v) {                             \
                                    bv = v;                                         \
                                    best = i * g->w + j;                            \
                                    if (v != v) break;                              \
                                }                                                   \
                            }                                                       \
                    }                                                               \
                    if (k->tiled) {                                                 \
                        for (int64_t i = h0; i < h1; i++)                           \
                            for (int64_t j = w0; j < w1; j++) dx[(i * g->w + j) * C + ci] = 0; \
                        dx[best * C + ci] = dy[ci];                                 \
                    } else {                                                        \
                        dx[best * C + ci] += dy[ci];                                \
                    }                                                               \
                }                                                                   \
            }                                                                       \
    }

static void pool_bwd_range(int64_t n0, int64_t n1, void *vctx) {
    pool_ctx *k = vctx;
    const geom *g = k->g;
    if (k->f64) { POOL_BWD(double) } else { POOL_BWD(float) }
}

/* dx (x_shape, contiguous, uninitialised) = the backward of max (x given) or
 * avg (x NULL) pooling. */
static int pool_backward(const char *op, bool max, tfe_tensor *x, tfe_tensor *dy,
                         const int64_t *x_shape, const tfe_attrs *at, tfe_tensor *dx) {
    geom g;
    if (check_float(op, dy) < 0 || make_geom(op, x_shape, NULL, at, &g) < 0 ||
        check_dy(op, &g, dy, x ? x->dtype : dy->dtype) < 0)
        return -1;
    /* windows that cover every cell of x exactly once (max only: there each
     * cell is written once, so dx needs no zeroing) */
    bool tiled = max && g.sh == g.kh && g.sw == g.kw && g.pt == 0 && g.pl == 0 &&
                 g.oh * g.kh == g.h && g.ow * g.kw == g.w && tensor_numel(dy) > 0;
    int64_t numel = tensor_numel(dx);
    if (!tiled && numel) memset(tensor_data(dx), 0, (size_t)numel * dtype_size(dx->dtype));
    if (tensor_numel(dy) == 0) return 0;
    tfe_tensor *xc = x ? tensor_contiguous(x) : NULL;
    tfe_tensor *dyc = tensor_contiguous(dy);
    if ((x && !xc) || !dyc) {
        if (xc) tensor_decref(xc);
        if (dyc) tensor_decref(dyc);
        return -1;
    }
    pool_ctx k = {.g = &g, .x = xc ? tensor_data(xc) : NULL, .dy = tensor_data(dyc),
                  .out = tensor_data(dx), .f64 = dy->dtype == TFE_FLOAT64, .max = max,
                  .tiled = tiled};
    tfe_parallel_for(g.n, 1, pool_bwd_range, &k);
    if (xc) tensor_decref(xc);
    tensor_decref(dyc);
    return 0;
}

/* a new tensor for pool_backward (NULL + error on failure) */
static tfe_tensor *pool_backward_new(const char *op, bool max, tfe_tensor *x, tfe_tensor *dy,
                                     const int64_t *x_shape, const tfe_attrs *at) {
    tfe_tensor *dx = tensor_new(dy->dtype, 4, x_shape);
    if (dx && pool_backward(op, max, x, dy, x_shape, at, dx) < 0) {
        tensor_decref(dx);
        return NULL;
    }
    return dx;
}

static int max_pool_check(tfe_tensor *x) {
    if (check_rank4("max_pool2d", "input", "(N, H, W, C)", x) < 0 ||
        check_float("max_pool2d", x) < 0)
        return -1;
    return 0;
}

tfe_tensor *tfe_max_pool2d_grad(tfe_tensor *x, tfe_tensor *dy, const tfe_attrs *at) {
    if (max_pool_check(x) < 0) return NULL;
    return pool_backward_new("max_pool2d", true, x, dy, x->shape, at);
}

tfe_tensor *tfe_avg_pool2d_grad(tfe_tensor *dy, const int64_t x_shape[4], const tfe_attrs *at) {
    return pool_backward_new("avg_pool2d", false, NULL, dy, x_shape, at);
}

int kn_max_pool2d_grad_into(tfe_tensor *x, tfe_tensor *dy, const tfe_attrs *at, tfe_tensor *dx) {
    if (max_pool_check(x) < 0) return -1;
    return pool_backward("max_pool2d", true, x, dy, x->shape, at, dx);
}

int kn_avg_pool2d_grad_into(tfe_tensor *dy, const int64_t x_shape[4], const tfe_attrs *at,
                            tfe_tensor *dx) {
    return pool_backward("avg_pool2d", false, NULL, dy, x_shape, at, dx);
}
