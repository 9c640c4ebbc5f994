/* kernels_bn.c — fused batch normalization over the last (channel) axis:
 * the training forward (y, batch mean, biased batch variance), its backward
 * (dx, dgamma, dbeta in two passes) and the inference form (given stats). */
#if defined(__GNUC__) && !defined(__clang__)
/* no fused multiply-adds (the avx512f clones could contract): y's roundings
 * are those of the unfused ops */
#pragma GCC optimize("O3", "fp-contract=off")
#endif
#include "tensor/kernels.h"

/* Layout: x is seen as rows of C channels (NHWC: the channel axis is the
 * last, as tfe's conv2d makes it), so every pass streams whole rows and the
 * per-channel work is a short contiguous loop that vectorizes.
 *
 * Statistics are summed by parts of rows fixed by the sizes alone (those of
 * k_reduce's column sums: one part below 2 KN_GRAIN elements, else about
 * KN_GRAIN elements each, at most 64), each part from zero in row order,
 * the parts added in order: any thread count gives the same bits. The mean
 * is mean(x, axis=0)'s (float sums of the dtype, then / N), the variance
 * var(x, axis=0)'s (a two-pass sum in double around the double mean). */

static const char *NAME_OF(const tfe_opcall *c) { return kn_opname(c); }

/* ---- infer rules ------------------------------------------------------------------ */

static int64_t channels(const tfe_tensor *x) { return x->rank ? x->shape[x->rank - 1] : 1; }

static int check_float(const tfe_opcall *c, const tfe_tensor *t, const char *what) {
    if (t->dtype != TFE_FLOAT32 && t->dtype != TFE_FLOAT64) {
        tfe_error_set("%s: %s must be float32 or float64, got %s", NAME_OF(c), what, dtype_name(t->dtype));
        return -1;
    }
    return 0;
}

/* t is float of x's dtype with shape (C,) (C = x's last dim; -1: unknown) */
static int check_vec(const tfe_opcall *c, const tfe_tensor *x, const tfe_tensor *t, const char *what) {
    char b1[200], b2[200];
    int64_t C = channels(x);
    if (t->dtype != x->dtype) {
        tfe_error_set("%s: %s is %s, x is %s", NAME_OF(c), what, dtype_name(t->dtype), dtype_name(x->dtype));
        return -1;
    }
    if (t->rank != 1 || (C >= 0 && t->shape[0] >= 0 && t->shape[0] != C)) {
        tfe_error_set("%s: %s must have shape (%lld,) (the channels of x %s), got %s", NAME_OF(c), what,
                      (long long)C, shape_str(x->rank, x->shape, b1), shape_str(t->rank, t->shape, b2));
        return -1;
    }
    return 0;
}

static int check_x(const tfe_opcall *c, const tfe_tensor *x, const char *what) {
    if (check_float(c, x, what)) return -1;
    if (x->rank < 1) {
        tfe_error_set("%s: %s must have rank 1 or more (channels last), got a scalar", NAME_OF(c), what);
        return -1;
    }
    return 0;
}

/* x, gamma, beta -> y (x's shape); outputs 1, 2 (mean, var) are (C,) */
int infer_batch_norm_train(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    if (check_x(c, x, "x") || check_vec(c, x, c->in[1], "gamma") || check_vec(c, x, c->in[2], "beta")) return -1;
    kn_meta_set(m, x->dtype, false, x->rank, x->shape);
    return 0;
}

/* dy, dmean, dvar, x, gamma, mean, var -> dx (x's shape); dgamma, dbeta (C,) */
int infer_batch_norm_grad(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *dy = c->in[0], *x = c->in[3];
    if (check_x(c, x, "x") || check_x(c, dy, "dy")) return -1;
    bool same = dy->rank == x->rank && dy->dtype == x->dtype;
    for (int i = 0; same && i < x->rank; i++) same = dy->shape[i] == x->shape[i];
    if (!same) {
        char b1[200], b2[200];
        tfe_error_set("%s: dy (%s %s) must be x's dtype and shape (%s %s)", NAME_OF(c), dtype_name(dy->dtype),
                      shape_str(dy->rank, dy->shape, b1), dtype_name(x->dtype), shape_str(x->rank, x->shape, b2));
        return -1;
    }
    if (check_vec(c, x, c->in[1], "dmean") || check_vec(c, x, c->in[2], "dvar") || check_vec(c, x, c->in[4], "gamma") ||
        check_vec(c, x, c->in[5], "mean") || check_vec(c, x, c->in[6], "var"))
        return -1;
    kn_meta_set(m, x->dtype, false, x->rank, x->shape);
    return 0;
}

/* x, gamma, beta, mean, var -> y (x's shape) */
int infer_batch_norm_infer(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    if (check_x(c, x, "x") || check_vec(c, x, c->in[1], "gamma") || check_vec(c, x, c->in[2], "beta") ||
        check_vec(c, x, c->in[3], "mean") || check_vec(c, x, c->in[4], "var"))
        return -1;
    kn_meta_set(m, x->dtype, false, x->rank, x->shape);
    return 0;
}

/* The metadata of output k of a batch-norm op (the tracer's symbolic
 * outputs: the infer rule describes output 0): (C,) past output 0. */
void tfe_batch_norm_out_meta(const tfe_opcall *c, int k, tfe_meta *m) {
    if (k == 0) return;
    const tfe_tensor *x = c->in[c->op == OP_BATCH_NORM_GRAD ? 3 : 0];
    int64_t C = channels(x);
    kn_meta_set(m, x->dtype, false, 1, &C);
}

/* ---- parts ---------------------------------------------------------------------- */

/* Threads from 8 KN_GRAIN elements (a tensor of 1 MiB): every pass is
 * cheap and memory-bound (~15 us for ResNet-20's 32x8x8x64 on one core),
 * less than a worker's wake-up and join cost, and four passes each way
 * would pay it four times (on a loaded machine a late worker stalls them). */
#define BN_THREADS (8 * KN_GRAIN)

typedef struct bn_parts { int64_t n, chunk; bool threads; } bn_parts;

/* k_reduce's run_colparts split of rows R of C channels */
static bn_parts parts_of(int64_t R, int64_t C) {
    int64_t total = R * C;
    int64_t n = total < 2 * KN_GRAIN ? 1 : total / KN_GRAIN;
    if (n > 64) n = 64;
    if (n > R) n = R;
    if (n < 1) n = 1;
    int64_t chunk = (R + n - 1) / n;
    if (chunk < 1) chunk = 1;
    n = R ? (R + chunk - 1) / chunk : 1;
    return (bn_parts){n, chunk, total >= BN_THREADS};
}

/* elementwise passes: chunks of rows of at least 2 KN_GRAIN elements, on
 * several threads only from BN_THREADS elements */
static void rows_for(int64_t R, int64_t C, tfe_range_fn fn, void *ctx) {
    if (R * C < BN_THREADS) {
        fn(0, R, ctx);
        return;
    }
    int64_t grain = 2 * KN_GRAIN / (C ? C : 1);
    tfe_parallel_for(R, grain ? grain : 1, fn, ctx);
}

/* ---- the kernels, per dtype ------------------------------------------------------- */

/* Each pass is compiled for AVX-512, AVX2 and the baseline, picked at load
 * time: every channel has its own accumulator, summed in row order, so the
 * vector width changes no bit. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define CLONES
#endif

typedef struct bn_ctx {
    const void *x, *dy, *g, *b;
    const void *mk;    /* batch_norm_grad_relu: relu_grad's mask input a (dy' where a > 0) */
    const void *h;     /* batch_norm_train_add_relu: the value added to y before relu */
    void *y;
    int64_t R, C;
    bn_parts p;
    bool hfirst;       /* h + y rather than y + h */
    void *fs;          /* per part: sums in the dtype (the mean), C each */
    double *ds, *ds2;  /* per part: double sums, C each */
    double *md;        /* the double mean (the variance's centre) */
    void *m, *rs, *k1, *k2, *k3; /* per channel, the dtype: mean, 1/sqrt(var+eps), coefficients */
} bn_ctx;

/* c ? v : +0.0 without a branch (a relu mask is random: a branch
 * mispredicts half the time, and GCC does not if-convert the select):
 * v's bits, or all-zero bits, which are +0.0: exactly the select's value */
#define KEEP_IF(U, T, c, v)                                                        \
    __extension__({                                                                \
        T v_ = (v);                                                                \
        U b_;                                                                      \
        memcpy(&b_, &v_, sizeof b_);                                               \
        b_ &= (U)0 - (U)(c);                                                       \
        memcpy(&v_, &b_, sizeof v_);                                               \
        v_;                                                                        \
    })

/* The sums of the statistics passes for a channel count CC known at
 * compile time (16, 32, 64: ResNet-20's), rows [r0, r1): the running sums
 * live in registers rather than in the part's arrays, which the generic
 * loop loads and stores at every row (a store-to-load chain a row: these
 * read-only passes ran as slowly as the passes that also write). The same
 * adds in the same order, so the same bits. Inlined into each clone. */
#define BN_ROWS(SUF, T, U)                                                          \
    static inline __attribute__((always_inline)) void sum_rows_##SUF(               \
        const int CC, const T *restrict xs, int64_t r0, int64_t r1, T *restrict fs,  \
        double *restrict ds) {                                                     \
        T f[64];                                                                   \
        double d[64];                                                              \
        for (int j = 0; j < CC; j++) f[j] = fs[j], d[j] = ds[j];                   \
        for (int64_t r = r0; r < r1; r++) {                                        \
            const T *restrict x = xs + r * CC;                                     \
            for (int j = 0; j < CC; j++) f[j] += x[j];                             \
            for (int j = 0; j < CC; j++) d[j] += x[j];                             \
        }                                                                          \
        for (int j = 0; j < CC; j++) fs[j] = f[j], ds[j] = d[j];                   \
    }                                                                              \
    static inline __attribute__((always_inline)) void sq_rows_##SUF(                \
        const int CC, const T *restrict xs, int64_t r0, int64_t r1,                 \
        const double *restrict md, double *restrict ss) {                          \
        double q[64], mm[64];                                                      \
        for (int j = 0; j < CC; j++) q[j] = ss[j], mm[j] = md[j];                  \
        for (int64_t r = r0; r < r1; r++) {                                        \
            const T *restrict x = xs + r * CC;                                     \
            for (int j = 0; j < CC; j++) {                                         \
                double e = x[j] - mm[j];                                           \
                q[j] += e * e;                                                     \
            }                                                                      \
        }                                                                          \
        for (int j = 0; j < CC; j++) ss[j] = q[j];                                 \
    }                                                                              \
    /* gsum (as NULL) and gsumr (as: relu_grad's mask input) */                    \
    static inline __attribute__((always_inline)) void gsum_rows_##SUF(              \
        const int CC, const T *restrict xs, const T *restrict dys,                  \
        const T *restrict as, int64_t r0, int64_t r1, const T *restrict m,          \
        const T *restrict rs, double *restrict s1, double *restrict s2) {          \
        double a1[64], a2[64];                                                     \
        for (int j = 0; j < CC; j++) a1[j] = s1[j], a2[j] = s2[j];                 \
        for (int64_t r = r0; r < r1; r++) {                                        \
            const T *restrict x = xs + r * CC, *restrict dy = dys + r * CC;         \
            for (int j = 0; j < CC; j++) {                                         \
                T d = as ? KEEP_IF(U, T, as[r * CC + j] > (T)0, dy[j]) : dy[j];     \
                T xh = (x[j] - m[j]) * rs[j];                                      \
                a1[j] += d;                                                        \
                a2[j] += (double)d * xh;                                           \
            }                                                                      \
        }                                                                          \
        for (int j = 0; j < CC; j++) s1[j] = a1[j], s2[j] = a2[j];                 \
    }
BN_ROWS(f, float, uint32_t)
BN_ROWS(d, double, uint64_t)

/* body(c, b, e, C) with C a constant for 16, 32 and 64 channels
 * (ResNet-20's: the channel loop unrolled, the per-channel rows in
 * registers), else with c->C */
#define BY_CHANNELS(body, c, b, e)                     \
    switch ((c)->C) {                                  \
    case 16: body(c, b, e, 16); break;                 \
    case 32: body(c, b, e, 32); break;                 \
    case 64: body(c, b, e, 64); break;                 \
    default: body(c, b, e, (c)->C); break;             \
    }

#define BN_FNS(SUF, T, U)                                                           \
    /* pass 1: per part, sums of x in T and in double */                           \
    CLONES static void sum_##SUF(int64_t b, int64_t e, void *vc) {                        \
        bn_ctx *c = vc;                                                            \
        int64_t C = c->C;                                                          \
        for (int64_t k = b; k < e; k++) {                                          \
            T *restrict fs = (T *)c->fs + k * C;                                   \
            double *restrict ds = c->ds + k * C;                                   \
            for (int64_t j = 0; j < C; j++) fs[j] = 0, ds[j] = 0;                  \
            int64_t r0 = k * c->p.chunk, r1 = r0 + c->p.chunk < c->R ? r0 + c->p.chunk : c->R; \
            const T *xs = (const T *)c->x;                                         \
            switch (C) {                                                           \
            case 16: sum_rows_##SUF(16, xs, r0, r1, fs, ds); break;                \
            case 32: sum_rows_##SUF(32, xs, r0, r1, fs, ds); break;                \
            case 64: sum_rows_##SUF(64, xs, r0, r1, fs, ds); break;                \
            default:                                                               \
                for (int64_t r = r0; r < r1; r++) {                                \
                    const T *restrict x = xs + r * C;                              \
                    for (int64_t j = 0; j < C; j++) fs[j] += x[j];                 \
                    for (int64_t j = 0; j < C; j++) ds[j] += x[j];                 \
                }                                                                  \
            }                                                                      \
        }                                                                          \
    }                                                                              \
    /* pass 2: per part, sums of squares around the double mean */                 \
    CLONES static void sq_##SUF(int64_t b, int64_t e, void *vc) {                         \
        bn_ctx *c = vc;                                                            \
        int64_t C = c->C;                                                          \
        const double *restrict md = c->md;                                         \
        for (int64_t k = b; k < e; k++) {                                          \
            double *restrict ss = c->ds + k * C;                                   \
            for (int64_t j = 0; j < C; j++) ss[j] = 0;                             \
            int64_t r0 = k * c->p.chunk, r1 = r0 + c->p.chunk < c->R ? r0 + c->p.chunk : c->R; \
            const T *xs = (const T *)c->x;                                         \
            switch (C) {                                                           \
            case 16: sq_rows_##SUF(16, xs, r0, r1, md, ss); break;                 \
            case 32: sq_rows_##SUF(32, xs, r0, r1, md, ss); break;                 \
            case 64: sq_rows_##SUF(64, xs, r0, r1, md, ss); break;                 \
            default:                                                               \
                for (int64_t r = r0; r < r1; r++) {                                \
                    const T *restrict x = xs + r * C;                              \
                    for (int64_t j = 0; j < C; j++) {                              \
                        double d = x[j] - md[j];                                   \
                        ss[j] += d * d;                                            \
                    }                                                              \
                }                                                                  \
            }                                                                      \
        }                                                                          \
    }                                                                              \
    /* y = ((x - m) * rs) * g + b: the unfused ops' roundings, in their order */   \
    static inline __attribute__((always_inline)) void norm_body_##SUF(      \
        bn_ctx *c, int64_t b, int64_t e, const int64_t C) {                     \
        const T *restrict m = c->m, *restrict rs = c->rs, *restrict g = c->g, *restrict bb = c->b; \
        for (int64_t r = b; r < e && c->y == c->x; r++) { /* in place (graph/plan.c) */ \
            T *restrict xy = (T *)c->y + r * C;                                    \
            for (int64_t j = 0; j < C; j++) {                                      \
                T t = xy[j] - m[j];                                                \
                t = t * rs[j];                                                     \
                t = t * g[j];                                                      \
                xy[j] = t + bb[j];                                                 \
            }                                                                      \
        }                                                                          \
        for (int64_t r = b; r < e && c->y != c->x; r++) {                         \
            const T *restrict x = (const T *)c->x + r * C;                         \
            T *restrict y = (T *)c->y + r * C;                                     \
            for (int64_t j = 0; j < C; j++) {                                      \
                T t = x[j] - m[j];                                                 \
                t = t * rs[j];                                                     \
                t = t * g[j];                                                      \
                y[j] = t + bb[j];                                                  \
            }                                                                      \
        }                                                                          \
    }                                                                              \
    /* C of 16, 32, 64 (ResNet-20's) a constant: the channel loop unrolled,    \
     * the per-channel rows (m, rs, g, b or k1..k3) kept in registers */        \
    CLONES static void norm_##SUF(int64_t b, int64_t e, void *vc) {                                    \
        bn_ctx *c = vc;                                                            \
        BY_CHANNELS(norm_body_##SUF, c, b, e);                                                        \
    } \
    /* backward pass 1: per part, sums of dy and of dy * xhat, in double */        \
    CLONES static void gsum_##SUF(int64_t b, int64_t e, void *vc) {                       \
        bn_ctx *c = vc;                                                            \
        int64_t C = c->C;                                                          \
        const T *restrict m = c->m, *restrict rs = c->rs;                          \
        for (int64_t k = b; k < e; k++) {                                          \
            double *restrict s1 = c->ds + k * C, *restrict s2 = c->ds2 + k * C;    \
            for (int64_t j = 0; j < C; j++) s1[j] = 0, s2[j] = 0;                  \
            int64_t r0 = k * c->p.chunk, r1 = r0 + c->p.chunk < c->R ? r0 + c->p.chunk : c->R; \
            const T *xs = (const T *)c->x, *dys = (const T *)c->dy;               \
            switch (C) {                                                           \
            case 16: gsum_rows_##SUF(16, xs, dys, NULL, r0, r1, m, rs, s1, s2); break; \
            case 32: gsum_rows_##SUF(32, xs, dys, NULL, r0, r1, m, rs, s1, s2); break; \
            case 64: gsum_rows_##SUF(64, xs, dys, NULL, r0, r1, m, rs, s1, s2); break; \
            default:                                                               \
                for (int64_t r = r0; r < r1; r++) {                                \
                    const T *restrict x = xs + r * C, *restrict dy = dys + r * C;  \
                    for (int64_t j = 0; j < C; j++) {                              \
                        T xh = (x[j] - m[j]) * rs[j];                              \
                        s1[j] += dy[j];                                            \
                        s2[j] += (double)dy[j] * xh;                               \
                    }                                                              \
                }                                                                  \
            }                                                                      \
        }                                                                          \
    }                                                                              \
    /* backward pass 2: dx = (k1 dy + k2 (x - m)) + k3 */                          \
    static inline __attribute__((always_inline)) void gdx_body_##SUF(      \
        bn_ctx *c, int64_t b, int64_t e, const int64_t C) {                     \
        const T *restrict m = c->m, *restrict k1 = c->k1, *restrict k2 = c->k2, *restrict k3 = c->k3; \
        for (int64_t r = b; r < e && c->y == c->dy; r++) { /* in place of dy (graph/plan.c) */ \
            const T *restrict x = (const T *)c->x + r * C;                         \
            T *restrict d = (T *)c->y + r * C;                                     \
            for (int64_t j = 0; j < C; j++) d[j] = (k1[j] * d[j] + k2[j] * (x[j] - m[j])) + k3[j]; \
        }                                                                          \
        for (int64_t r = b; r < e && c->y != c->dy; r++) {                        \
            const T *restrict x = (const T *)c->x + r * C, *restrict dy = (const T *)c->dy + r * C; \
            T *restrict dx = (T *)c->y + r * C;                                    \
            for (int64_t j = 0; j < C; j++) dx[j] = (k1[j] * dy[j] + k2[j] * (x[j] - m[j])) + k3[j]; \
        }                                                                          \
    }                                                                              \
    /* C of 16, 32, 64 (ResNet-20's) a constant: the channel loop unrolled,    \
     * the per-channel rows (m, rs, g, b or k1..k3) kept in registers */        \
    CLONES static void gdx_##SUF(int64_t b, int64_t e, void *vc) {                                     \
        bn_ctx *c = vc;                                                            \
        BY_CHANNELS(gdx_body_##SUF, c, b, e);                                                         \
    } \
    /* norm, then relu's formula (elem.def) on each y: batch_norm_train_relu */    \
    static inline __attribute__((always_inline)) void normr_body_##SUF(      \
        bn_ctx *c, int64_t b, int64_t e, const int64_t C) {                     \
        const T *restrict m = c->m, *restrict rs = c->rs, *restrict g = c->g, *restrict bb = c->b; \
        for (int64_t r = b; r < e && c->y == c->x; r++) {                          \
            T *restrict xy = (T *)c->y + r * C;                                    \
            for (int64_t j = 0; j < C; j++) {                                      \
                T t = xy[j] - m[j];                                                \
                t = t * rs[j];                                                     \
                t = t * g[j];                                                      \
                t = t + bb[j];                                                     \
                xy[j] = KEEP_IF(U, T, t > 0 || t != t, t); /* relu */            \
            }                                                                      \
        }                                                                          \
        for (int64_t r = b; r < e && c->y != c->x; r++) {                         \
            const T *restrict x = (const T *)c->x + r * C;                         \
            T *restrict y = (T *)c->y + r * C;                                     \
            for (int64_t j = 0; j < C; j++) {                                      \
                T t = x[j] - m[j];                                                 \
                t = t * rs[j];                                                     \
                t = t * g[j];                                                      \
                t = t + bb[j];                                                     \
                y[j] = KEEP_IF(U, T, t > 0 || t != t, t); /* relu */             \
            }                                                                      \
        }                                                                          \
    }                                                                              \
    /* C of 16, 32, 64 (ResNet-20's) a constant: the channel loop unrolled,    \
     * the per-channel rows (m, rs, g, b or k1..k3) kept in registers */        \
    CLONES static void normr_##SUF(int64_t b, int64_t e, void *vc) {                                   \
        bn_ctx *c = vc;                                                            \
        BY_CHANNELS(normr_body_##SUF, c, b, e);                                                       \
    } \
    /* norm, then y + h (h + y when hfirst: NaN payloads follow the operand       \
     * order) and relu: batch_norm_train_add_relu. y may be x's or h's buffer:     \
     * no restrict, each element is read before it is written */                   \
    static inline __attribute__((always_inline)) void norma_body_##SUF(      \
        bn_ctx *c, int64_t b, int64_t e, const int64_t C) {                     \
        const T *restrict m = c->m, *restrict rs = c->rs, *restrict g = c->g, *restrict bb = c->b; \
        const bool hf = c->hfirst;                                                 \
        for (int64_t r = b; r < e; r++) {                                          \
            const T *x = (const T *)c->x + r * C, *h = (const T *)c->h + r * C;    \
            T *y = (T *)c->y + r * C;                                              \
            for (int64_t j = 0; j < C; j++) {                                      \
                T t = x[j] - m[j];                                                 \
                t = t * rs[j];                                                     \
                t = t * g[j];                                                      \
                t = t + bb[j];                                                     \
                t = hf ? h[j] + t : t + h[j];                                      \
                y[j] = KEEP_IF(U, T, t > 0 || t != t, t); /* relu */             \
            }                                                                      \
        }                                                                          \
    }                                                                              \
    /* C of 16, 32, 64 (ResNet-20's) a constant: the channel loop unrolled,    \
     * the per-channel rows (m, rs, g, b or k1..k3) kept in registers */        \
    CLONES static void norma_##SUF(int64_t b, int64_t e, void *vc) {                                   \
        bn_ctx *c = vc;                                                            \
        BY_CHANNELS(norma_body_##SUF, c, b, e);                                                       \
    } \
    /* gsum and gdx reading dy as relu_grad(dy', a) = a > 0 ? dy' : 0 */           \
    CLONES static void gsumr_##SUF(int64_t b, int64_t e, void *vc) {               \
        bn_ctx *c = vc;                                                            \
        int64_t C = c->C;                                                          \
        const T *restrict m = c->m, *restrict rs = c->rs;                          \
        for (int64_t k = b; k < e; k++) {                                          \
            double *restrict s1 = c->ds + k * C, *restrict s2 = c->ds2 + k * C;    \
            for (int64_t j = 0; j < C; j++) s1[j] = 0, s2[j] = 0;                  \
            int64_t r0 = k * c->p.chunk, r1 = r0 + c->p.chunk < c->R ? r0 + c->p.chunk : c->R; \
            const T *xs = (const T *)c->x, *dys = (const T *)c->dy, *as = (const T *)c->mk; \
            switch (C) {                                                           \
            case 16: gsum_rows_##SUF(16, xs, dys, as, r0, r1, m, rs, s1, s2); break; \
            case 32: gsum_rows_##SUF(32, xs, dys, as, r0, r1, m, rs, s1, s2); break; \
            case 64: gsum_rows_##SUF(64, xs, dys, as, r0, r1, m, rs, s1, s2); break; \
            default:                                                               \
                for (int64_t r = r0; r < r1; r++) {                                \
                    const T *restrict x = xs + r * C, *restrict dy = dys + r * C;  \
                    const T *restrict a = as + r * C;                              \
                    for (int64_t j = 0; j < C; j++) {                              \
                        T d = KEEP_IF(U, T, a[j] > (T)0, dy[j]); /* relu_grad */     \
                        T xh = (x[j] - m[j]) * rs[j];                              \
                        s1[j] += d;                                                \
                        s2[j] += (double)d * xh;                                   \
                    }                                                              \
                }                                                                  \
            }                                                                      \
        }                                                                          \
    }                                                                              \
    static inline __attribute__((always_inline)) void gdxr_body_##SUF(      \
        bn_ctx *c, int64_t b, int64_t e, const int64_t C) {                     \
        const T *restrict m = c->m, *restrict k1 = c->k1, *restrict k2 = c->k2, *restrict k3 = c->k3; \
        for (int64_t r = b; r < e && c->y == c->dy; r++) { /* in place of dy' */   \
            const T *restrict x = (const T *)c->x + r * C, *restrict a = (const T *)c->mk + r * C; \
            T *restrict d = (T *)c->y + r * C;                                     \
            for (int64_t j = 0; j < C; j++) {                                      \
                T dd = KEEP_IF(U, T, a[j] > (T)0, d[j]);                          \
                d[j] = (k1[j] * dd + k2[j] * (x[j] - m[j])) + k3[j];               \
            }                                                                      \
        }                                                                          \
        for (int64_t r = b; r < e && c->y != c->dy; r++) {                        \
            const T *restrict x = (const T *)c->x + r * C, *restrict dy = (const T *)c->dy + r * C; \
            const T *restrict a = (const T *)c->mk + r * C;                        \
            T *restrict dx = (T *)c->y + r * C;                                    \
            for (int64_t j = 0; j < C; j++) {                                      \
                T dd = KEEP_IF(U, T, a[j] > (T)0, dy[j]);                         \
                dx[j] = (k1[j] * dd + k2[j] * (x[j] - m[j])) + k3[j];              \
            }                                                                      \
        }                                                                          \
    }                                                                              \
    /* C of 16, 32, 64 (ResNet-20's) a constant: the channel loop unrolled,    \
     * the per-channel rows (m, rs, g, b or k1..k3) kept in registers */        \
    CLONES static void gdxr_##SUF(int64_t b, int64_t e, void *vc) {                                    \
        bn_ctx *c = vc;                                                            \
        BY_CHANNELS(gdxr_body_##SUF, c, b, e);                                                        \
    }
BN_FNS(f, float, uint32_t)
BN_FNS(d, double, uint64_t)

/* Pass 1 for float32 rows of 16 channels (ResNet-20's first stage), in
 * AVX-512: GCC compiles sum_rows_f's float sums for CC = 16 to 16 scalar
 * adds a row (its 32- and 64-channel loops are vectors), ~9 cycles a row
 * where the vector form takes 3: about 0.1 ms of each 32x32x32x16 batch
 * norm. The same adds in the same order, each channel's float sum and
 * double sum with the running sum as the first operand (x86 returns the
 * first operand's NaN when both are NaN), as sum_f's code has them: asm,
 * so that the compiler cannot swap them (benchmarks.md, "A float add's
 * operands are the compiler's to order"). sum_f itself is unchanged, so
 * its other loops compile as before. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include "tensor/sgemm_small.h"
#define AVX512 __attribute__((target("avx512f")))
AVX512 __attribute__((noinline)) static void sum16_f(int64_t b, int64_t e, void *vc) {
    bn_ctx *c = vc;
    const float *xs = (const float *)c->x;
    for (int64_t k = b; k < e; k++) {
        float *fs = (float *)c->fs + k * 16;
        double *ds = c->ds + k * 16;
        int64_t r0 = k * c->p.chunk, r1 = r0 + c->p.chunk < c->R ? r0 + c->p.chunk : c->R;
        __m512 f = _mm512_setzero_ps();
        __m512d d0 = _mm512_setzero_pd(), d1 = _mm512_setzero_pd();
        for (int64_t r = r0; r < r1; r++) {
            __m512 x = _mm512_loadu_ps(xs + r * 16);
            __m512d x0 = _mm512_cvtps_pd(_mm512_castps512_ps256(x));
            __m512d x1 = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
            __asm__("vaddps %2, %1, %0" : "=v"(f) : "v"(f), "v"(x));
            __asm__("vaddpd %2, %1, %0" : "=v"(d0) : "v"(d0), "v"(x0));
            __asm__("vaddpd %2, %1, %0" : "=v"(d1) : "v"(d1), "v"(x1));
        }
        _mm512_storeu_ps(fs, f);
        _mm512_storeu_pd(ds, d0);
        _mm512_storeu_pd(ds + 8, d1);
    }
}
/* y = ((x - m) * rs) * g + b for float32 rows of 16 channels, not in place:
 * GCC compiles norm_f's loop for CC = 16 to scalar code (4 ops and a store
 * an element, m, rs, g, b reloaded each time): ~0.6 ms of 0.8 for a
 * 32x32x32x16 batch norm eagerly. Each op here has norm_f's operands in
 * its order (t first: x - m, t * rs, t * g, t + b, read from its
 * disassembly), pinned by asm; in place (the planner's y in x's block), or
 * without AVX-512, norm_f runs. */
AVX512 __attribute__((noinline)) static void norm16_f(int64_t b, int64_t e, void *vc) {
    bn_ctx *c = vc;
    if (c->y == c->x) {
        norm_f(b, e, vc);
        return;
    }
    const float *xs = (const float *)c->x;
    float *ys = (float *)c->y;
    __m512 m = _mm512_loadu_ps(c->m), rs = _mm512_loadu_ps(c->rs), g = _mm512_loadu_ps(c->g),
           bb = _mm512_loadu_ps(c->b);
    for (int64_t r = b; r < e; r++) {
        __m512 x = _mm512_loadu_ps(xs + r * 16), t;
        __asm__("vsubps %2, %1, %0" : "=v"(t) : "v"(x), "v"(m));
        __asm__("vmulps %2, %1, %0" : "=v"(t) : "v"(t), "v"(rs));
        __asm__("vmulps %2, %1, %0" : "=v"(t) : "v"(t), "v"(g));
        __asm__("vaddps %2, %1, %0" : "=v"(t) : "v"(t), "v"(bb));
        _mm512_storeu_ps(ys + r * 16, t);
    }
}
#undef AVX512
static tfe_range_fn sum_fn_f(int64_t C) { return C == 16 && tfe_sgemm_small_ok() ? sum16_f : sum_f; }
static tfe_range_fn norm_fn_f(int64_t C) { return C == 16 && tfe_sgemm_small_ok() ? norm16_f : norm_f; }
#else
static tfe_range_fn sum_fn_f(int64_t C) { (void)C; return sum_f; }
static tfe_range_fn norm_fn_f(int64_t C) { (void)C; return norm_f; }
#endif

static void run_parts(bn_ctx *c, tfe_range_fn fn) {
    if (c->p.threads && c->p.n > 1) tfe_parallel_for(c->p.n, 1, fn, c);
    else fn(0, c->p.n, c);
}

/* x, gamma, beta contiguous in the op's dtype (the infer rule checked the
 * dtypes; a view is copied) */
static const void *contig(tfe_tensor *t, tfe_tensor **keep) {
    *keep = NULL;
    if (tensor_is_contiguous(t)) return tensor_data(t);
    if (!(*keep = kn_contig_as(t, t->dtype))) return NULL;
    return tensor_data(*keep);
}

#define NKEEP 8
static void release(tfe_tensor **keep) {
    for (int i = 0; i < NKEEP; i++)
        if (keep[i]) tensor_decref(keep[i]);
}

/* per-channel scratch: n doubles or elements, zeroed */
static void *scratch(size_t bytes, void **list, size_t *sizes, int *n) {
    void *p = tfe_alloc(bytes ? bytes : 8);
    if (!p) return NULL;
    memset(p, 0, bytes);
    list[*n] = p;
    sizes[(*n)++] = bytes ? bytes : 8;
    return p;
}

/* Output k (1 or 2, of shape (C,)): the tensor the caller placed there (the
 * executor's arena, graph/plan.c: contiguous, of the inferred dtype and
 * shape), or a new one when it is NULL (eager dispatch passes NULLs). */
static tfe_tensor *given_or_new(const tfe_opcall *c, int k, tfe_dtype dt, int64_t C) {
    return c->out[k] ? c->out[k] : tensor_new(dt, 1, &C);
}

/* The end of the two ops with three outputs: scratch and copies freed, and
 * outputs 1 and 2 handed to the caller (or, on an error, the ones this
 * kernel made freed). */
static int finish3(const tfe_opcall *c, int rc, tfe_tensor *o1, tfe_tensor *o2, void **mem, size_t *sizes,
                   int nmem, tfe_tensor **keep) {
    for (int i = 0; i < nmem; i++) tfe_free(mem[i], sizes[i]);
    release(keep);
    if (rc) {
        if (o1 && o1 != c->out[1]) tensor_decref(o1);
        if (o2 && o2 != c->out[2]) tensor_decref(o2);
        return -1;
    }
    c->out[1] = o1;
    c->out[2] = o2;
    return 0;
}

/* ep: 0 y, 1 relu(y), 2 relu(y + h), 3 relu(h + y) (h: input 3) */
static int bn_train(const tfe_opcall *c, int ep) {
    tfe_tensor *x = c->in[0], *keep[NKEEP] = {0};
    bool f32 = x->dtype == TFE_FLOAT32;
    size_t es = f32 ? 4 : 8;
    int64_t C = channels(x), R = C ? tensor_numel(x) / C : 0;
    double eps = c->at->f[0];
    void *mem[8];
    size_t sizes[8];
    int nmem = 0, rc = -1;
    tfe_tensor *mo = given_or_new(c, 1, x->dtype, C), *vo = mo ? given_or_new(c, 2, x->dtype, C) : NULL;
    if (!vo) goto out;
    bn_ctx b = {.x = contig(x, &keep[0]), .g = contig(c->in[1], &keep[1]), .b = contig(c->in[2], &keep[2]),
                .y = tensor_data(c->out[0]), .R = R, .C = C, .p = parts_of(R, C)};
    if (ep >= 2) b.h = contig(c->in[3], &keep[3]), b.hfirst = ep == 3;
    if (!b.x || !b.g || !b.b || (ep >= 2 && !b.h)) goto out;
    size_t pc = (size_t)(b.p.n * C);
    if (!(b.fs = scratch(pc * es, mem, sizes, &nmem)) || !(b.ds = scratch(pc * 8, mem, sizes, &nmem)) ||
        !(b.md = scratch((size_t)C * 8, mem, sizes, &nmem)) || !(b.rs = scratch((size_t)C * es, mem, sizes, &nmem)))
        goto out;
    b.m = tensor_data(mo);
    run_parts(&b, f32 ? sum_fn_f(C) : sum_d);
    /* the parts in order, from zero: mean(x, axis=0)'s column sum */
    for (int64_t j = 0; j < C; j++) {
        double s = 0;
        if (f32) {
            float a = 0;
            for (int64_t k = 0; k < b.p.n; k++) a += ((float *)b.fs)[k * C + j];
            ((float *)b.m)[j] = a / (float)R;
        } else {
            double a = 0;
            for (int64_t k = 0; k < b.p.n; k++) a += ((double *)b.fs)[k * C + j];
            ((double *)b.m)[j] = a / (double)R;
        }
        for (int64_t k = 0; k < b.p.n; k++) s += b.ds[k * C + j];
        b.md[j] = s / (double)R;
    }
    run_parts(&b, f32 ? sq_f : sq_d);
    for (int64_t j = 0; j < C; j++) {
        double ss = 0;
        for (int64_t k = 0; k < b.p.n; k++) ss += b.ds[k * C + j];
        if (f32) {
            float v = (float)(ss / (double)R);
            ((float *)tensor_data(vo))[j] = v;
            ((float *)b.rs)[j] = 1.0f / sqrtf(v + (float)eps); /* rsqrt(v + eps), as the ops */
        } else {
            double v = ss / (double)R;
            ((double *)tensor_data(vo))[j] = v;
            ((double *)b.rs)[j] = 1.0 / sqrt(v + eps);
        }
    }
    static const tfe_range_fn fns[2][3] = {{norm_d, normr_d, norma_d}, {norm_f, normr_f, norma_f}};
    rows_for(R, C, f32 && ep == 0 ? norm_fn_f(C) : fns[f32][ep < 2 ? ep : 2], &b);
    rc = kn_poll();
out:
    return finish3(c, rc, mo, vo, mem, sizes, nmem, keep);
}

int k_batch_norm_train(const tfe_opcall *c) { return bn_train(c, 0); }
int k_batch_norm_train_relu(const tfe_opcall *c) { return bn_train(c, 1); }
int k_batch_norm_train_add_relu(const tfe_opcall *c) { return bn_train(c, 2); }
int k_batch_norm_train_radd_relu(const tfe_opcall *c) { return bn_train(c, 3); }

/* The closed form, with mean/var's own gradients folded in (they are zeros
 * when no one used them): xh = (x - m) rs, A = g rs,
 *   dbeta = sum dy, dgamma = sum dy xh,
 *   dx = A (dy - dbeta/N - xh dgamma/N) + dmean/N + 2 dvar (x - m)/N
 *      = (A dy + k2 (x - m)) + k3, k2 = 2 dvar/N - A rs dgamma/N,
 *        k3 = dmean/N - A dbeta/N (per channel, in double, then the dtype). */
static int bn_grad(const tfe_opcall *c, bool relu) {
    tfe_tensor *x = c->in[3], *keep[NKEEP] = {0};
    bool f32 = x->dtype == TFE_FLOAT32;
    size_t es = f32 ? 4 : 8;
    int64_t C = channels(x), R = C ? tensor_numel(x) / C : 0;
    double eps = c->at->f[0];
    void *mem[8];
    size_t sizes[8];
    int nmem = 0, rc = -1;
    tfe_tensor *go = given_or_new(c, 1, x->dtype, C), *bo = go ? given_or_new(c, 2, x->dtype, C) : NULL;
    if (!bo) goto out;
    const void *dm = contig(c->in[1], &keep[1]), *dv = contig(c->in[2], &keep[2]), *g = contig(c->in[4], &keep[4]),
               *v = contig(c->in[6], &keep[6]);
    bn_ctx b = {.dy = contig(c->in[0], &keep[0]), .x = contig(x, &keep[3]), .m = (void *)contig(c->in[5], &keep[5]),
                .y = tensor_data(c->out[0]), .R = R, .C = C, .p = parts_of(R, C)};
    if (relu) b.mk = contig(c->in[7], &keep[7]);
    if (!b.dy || !b.x || !b.m || !dm || !dv || !g || !v || (relu && !b.mk)) goto out;
    size_t pc = (size_t)(b.p.n * C);
    if (!(b.ds = scratch(pc * 8, mem, sizes, &nmem)) || !(b.ds2 = scratch(pc * 8, mem, sizes, &nmem)) ||
        !(b.rs = scratch((size_t)C * es, mem, sizes, &nmem)) || !(b.k1 = scratch((size_t)C * es, mem, sizes, &nmem)) ||
        !(b.k2 = scratch((size_t)C * es, mem, sizes, &nmem)) || !(b.k3 = scratch((size_t)C * es, mem, sizes, &nmem)))
        goto out;
    for (int64_t j = 0; j < C; j++) {
        if (f32) ((float *)b.rs)[j] = 1.0f / sqrtf(((const float *)v)[j] + (float)eps);
        else ((double *)b.rs)[j] = 1.0 / sqrt(((const double *)v)[j] + eps);
    }
    run_parts(&b, relu ? (f32 ? gsumr_f : gsumr_d) : (f32 ? gsum_f : gsum_d));
    double N = (double)R;
    for (int64_t j = 0; j < C; j++) {
        double s1 = 0, s2 = 0;
        for (int64_t k = 0; k < b.p.n; k++) s1 += b.ds[k * C + j], s2 += b.ds2[k * C + j];
#define GET(p) (f32 ? (double)((const float *)(p))[j] : ((const double *)(p))[j])
        double rs = GET(b.rs), A = GET(g) * rs;
        double k2 = 2 * GET(dv) / N - A * rs * s2 / N, k3 = GET(dm) / N - A * s1 / N;
#undef GET
        if (f32) {
            ((float *)b.k1)[j] = (float)A, ((float *)b.k2)[j] = (float)k2, ((float *)b.k3)[j] = (float)k3;
            ((float *)tensor_data(go))[j] = (float)s2, ((float *)tensor_data(bo))[j] = (float)s1;
        } else {
            ((double *)b.k1)[j] = A, ((double *)b.k2)[j] = k2, ((double *)b.k3)[j] = k3;
            ((double *)tensor_data(go))[j] = s2, ((double *)tensor_data(bo))[j] = s1;
        }
    }
    rows_for(R, C, relu ? (f32 ? gdxr_f : gdxr_d) : (f32 ? gdx_f : gdx_d), &b);
    rc = kn_poll();
out:
    return finish3(c, rc, go, bo, mem, sizes, nmem, keep);
}

int k_batch_norm_grad(const tfe_opcall *c) { return bn_grad(c, false); }
int k_batch_norm_grad_relu(const tfe_opcall *c) { return bn_grad(c, true); }

/* batch_norm_infer's per-channel factor: rs[j] = 1 / sqrt(var[j] + eps) in
 * x's dtype (C of them) */
void kn_bn_infer_scale(bool f64, const void *var, double eps, int64_t C, void *rs) {
    for (int64_t j = 0; j < C; j++) {
        if (!f64) ((float *)rs)[j] = 1.0f / sqrtf(((const float *)var)[j] + (float)eps);
        else ((double *)rs)[j] = 1.0 / sqrt(((const double *)var)[j] + eps);
    }
}

/* batch_norm_infer's pass over rows [0, rows) of C channels at y, in place,
 * on this thread: norm_f / norm_d, the code k_batch_norm_infer runs (its
 * in-place loop, whose ops are those of the out-of-place one and of
 * norm16_f), so a conv's epilogue (tensor/kernels_nn.c) gives its bits */
void kn_bn_infer_rows(bool f64, void *y, int64_t rows, int64_t C, const void *m, const void *rs,
                      const void *g, const void *b) {
    bn_ctx ctx = {.x = y, .y = y, .m = (void *)m, .rs = (void *)rs, .g = g, .b = b, .R = rows, .C = C};
    if (f64) norm_d(0, rows, &ctx);
    else norm_f(0, rows, &ctx);
}

/* y = ((x - mean) * rsqrt(var + eps)) * gamma + beta, the given statistics */
int k_batch_norm_infer(const tfe_opcall *c) {
    tfe_tensor *x = c->in[0], *keep[NKEEP] = {0};
    bool f32 = x->dtype == TFE_FLOAT32;
    int64_t C = channels(x), R = C ? tensor_numel(x) / C : 0;
    double eps = c->at->f[0];
    void *mem[2];
    size_t sizes[2];
    int nmem = 0, rc = -1;
    const void *v = contig(c->in[4], &keep[4]);
    bn_ctx b = {.x = contig(x, &keep[0]), .g = contig(c->in[1], &keep[1]), .b = contig(c->in[2], &keep[2]),
                .m = (void *)contig(c->in[3], &keep[3]), .y = tensor_data(c->out[0]), .R = R, .C = C};
    if (!b.x || !b.g || !b.b || !b.m || !v || !(b.rs = scratch((size_t)C * (f32 ? 4 : 8), mem, sizes, &nmem)))
        goto out;
    kn_bn_infer_scale(!f32, v, eps, C, b.rs);
    rows_for(R, C, f32 ? norm_fn_f(C) : norm_d, &b);
    rc = kn_poll();
out:
    for (int i = 0; i < nmem; i++) tfe_free(mem[i], sizes[i]);
    release(keep);
    return rc;
}
