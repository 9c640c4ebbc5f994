/* kernels_elem.c — the elementwise kernels: unary math, binary
 * arithmetic/comparisons, copy and cast (tensor/copy.c's copies), where and
 * clip. Loops are typed per dtype by macros; each has a contiguous
 * branch (restrict, vectorised at -O3), scalar-operand branches and a strided one.
 * The float formulas and the comparisons are tensor/elem.def's rows. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include "tensor/kernels.h"

typedef uint8_t tbool;

int k_copy(const tfe_opcall *c) { return kn_copy_into(c->out[0], c->in[0]); }
int k_cast(const tfe_opcall *c) { return kn_copy_into(c->out[0], c->in[0]); }

/* ---- flat runs ------------------------------------------------------------------
 * Runs fn over n elements of operands at p with steps s (steps 0 or the
 * element size), in parallel chunks when large. */
typedef struct flat_ctx {
    kn_loop_fn fn;
    int nops;
    char *p[KN_MAXOPS];
    int64_t s[KN_MAXOPS];
    void *ctx;
} flat_ctx;

static void flat_range(int64_t b, int64_t e, void *vctx) {
    flat_ctx *f = vctx;
    char *p[KN_MAXOPS];
    for (int k = 0; k < f->nops; k++) p[k] = f->p[k] + b * f->s[k];
    f->fn(e - b, p, f->s, f->ctx);
}

/* Below `serial` elements a run stays on the calling thread (elem_serial). */
static int flat_run(kn_loop_fn fn, int nops, char **p, const int64_t *s, int64_t n, int64_t serial, void *ctx) {
    if (n < serial) {
        fn(n, p, s, ctx);
        return 0;
    }
    flat_ctx f = {.fn = fn, .nops = nops, .ctx = ctx};
    for (int k = 0; k < nops; k++) {
        f.p[k] = p[k];
        f.s[k] = s[k];
    }
    tfe_parallel_for(n, KN_GRAIN, flat_range, &f);
    return kn_poll();
}

/* The size from which an op's run is split among threads. A cheap op (a
 * few adds per element, elem.def's cost <= 2: memory-bound, about 0.15 ns an
 * element on one core) needs 4 KN_GRAIN elements, ~20 us of work, before
 * waking a worker (a few us, more on a loaded machine) can pay; dearer
 * ones (exp, tanh, ...) 2 KN_GRAIN, as every kernel. */
static const uint8_t elem_cost[TFE_NOPS] = {
#define ELEM_UNARY(ID, COST, EXPR) [OP_##ID] = COST,
#define ELEM_BINARY(ID, COST, EXPR) [OP_##ID] = COST,
#include "tensor/elem.def"
};
static int64_t elem_serial(tfe_op op) { return elem_cost[op] > 2 ? 2 * KN_GRAIN : 4 * KN_GRAIN; }

/* ---- unary ---------------------------------------------------------------------- */
#define UN_LOOP(fname, T, OT, EXPR)                                              \
    static void fname(int64_t n, char **p, const int64_t *s, void *ctx) {        \
        (void)ctx;                                                               \
        OT *restrict o = (OT *)p[0];                                             \
        if (s[1] == sizeof(T)) {                                                 \
            const T *restrict a = (const T *)p[1];                               \
            for (int64_t i = 0; i < n; i++) {                                    \
                T x = a[i];                                                      \
                o[i] = (EXPR);                                                   \
            }                                                                    \
        } else {                                                                 \
            const char *a = p[1];                                                \
            int64_t sa = s[1];                                                   \
            for (int64_t i = 0; i < n; i++) {                                    \
                T x = *(const T *)(a + i * sa);                                  \
                o[i] = (EXPR);                                                   \
            }                                                                    \
        }                                                                        \
    }
#define UN_INT(name, EXPR) UN_LOOP(name##_i, int32_t, int32_t, EXPR) UN_LOOP(name##_l, int64_t, int64_t, EXPR)

/* integer and bool versions (their formulas differ: wrapping, no NaN) */
UN_INT(neg, (typeof(x))(0u - (uint64_t)x))
UN_INT(abs, x < 0 ? (typeof(x))(0u - (uint64_t)x) : x)
UN_INT(sign, (x > 0) - (x < 0))
UN_INT(relu, x > 0 ? x : 0)
UN_INT(square, (typeof(x))((uint64_t)x * (uint64_t)x)) /* wraps, as NumPy */
UN_LOOP(not_b, tbool, tbool, !x)

/* The float formulas of tensor/elem.def as float32 (_f) and float64 (_d)
 * loops: elem_ID_f, elem_ID_d; the binary ones below. */
#define ELEM_HELPER(NAME, PARAMS, ...) static inline T F(NAME) PARAMS __VA_ARGS__
#define ELEM_UNARY(ID, COST, EXPR) UN_LOOP(elem_##ID##_f, T, T, EXPR)
#define ELEM_TEST(ID, EXPR) UN_LOOP(elem_##ID##_f, T, tbool, EXPR)
#define T float
#define F(fn) fn##f
#include "tensor/elem.def"
#undef T
#undef F
#define ELEM_HELPER(NAME, PARAMS, ...) static inline T F(NAME) PARAMS __VA_ARGS__
#define ELEM_UNARY(ID, COST, EXPR) UN_LOOP(elem_##ID##_d, T, T, EXPR)
#define ELEM_TEST(ID, EXPR) UN_LOOP(elem_##ID##_d, T, tbool, EXPR)
#define T double
#define F(fn) fn
#include "tensor/elem.def"
#undef T
#undef F

/* the loops of each unary op: [op][0] float32, [op][1] float64 */
static const kn_loop_fn unary_float[TFE_NOPS][2] = {
#define ELEM_UNARY(ID, COST, EXPR) [OP_##ID] = {elem_##ID##_f, elem_##ID##_d},
#define ELEM_TEST(ID, EXPR) [OP_##ID] = {elem_##ID##_f, elem_##ID##_d},
#include "tensor/elem.def"
};
/* [op][0] int32, [op][1] int64 */
static const kn_loop_fn unary_int[TFE_NOPS][2] = {
    [OP_NEG] = {neg_i, neg_l}, [OP_ABS] = {abs_i, abs_l}, [OP_SIGN] = {sign_i, sign_l},
    [OP_RELU] = {relu_i, relu_l},
    [OP_SQUARE] = {square_i, square_l},
};

/* Is op the identity on dtype dt (the kernel copies)? */
static bool unary_identity(tfe_op op, tfe_dtype dt) {
    bool rounding = op == OP_FLOOR || op == OP_CEIL || op == OP_ROUND;
    if (dt == TFE_BOOL) return op == OP_ABS || op == OP_RELU || op == OP_SQUARE || rounding;
    return dtype_is_int(dt) && rounding;
}

/* The loop of a unary op for compute dtype dt; NULL: none (an error, unless
 * unary_identity). */
static kn_loop_fn unary_loop(tfe_op op, tfe_dtype dt) {
    if (dt == TFE_FLOAT32 || dt == TFE_FLOAT64) return unary_float[op][dt == TFE_FLOAT64];
    if (dt == TFE_INT32 || dt == TFE_INT64) return unary_int[op][dt == TFE_INT64];
    return dt == TFE_BOOL && op == OP_LOGICAL_NOT ? not_b : NULL;
}

int k_unary(const tfe_opcall *c) {
    tfe_tensor *x = c->in[0], *o = c->out[0];
    tfe_op op = c->op;
    if (x->dtype == TFE_BOOL && (op == OP_NEG || op == OP_SIGN)) {
        tfe_error_set("%s: not supported for bool (use logical_not)", kn_opname(c));
        return -1;
    }
    if ((op == OP_ISNAN || op == OP_ISFINITE) && !dtype_is_float(x->dtype)) {
        memset(tensor_data(o), op == OP_ISFINITE, (size_t)tensor_numel(o));
        return 0;
    }
    /* compute dtype: the output's, except predicates (their input's, or bool) */
    tfe_dtype dt = o->dtype;
    if (op == OP_ISNAN || op == OP_ISFINITE) dt = x->dtype;
    if (unary_identity(op, dt)) return kn_copy_into(o, x);
    kn_loop_fn fn = unary_loop(op, dt);
    if (!fn) {
        tfe_error_set("%s: no kernel for %s", kn_opname(c), dtype_name(dt));
        return -1;
    }
    int64_t n = tensor_numel(o);
    if (x->dtype == dt && tensor_is_contiguous(x)) {
        char *p[2] = {tensor_data(o), tensor_data(x)};
        int64_t s[2] = {(int64_t)kn_esz(o->dtype), (int64_t)kn_esz(dt)};
        return flat_run(fn, 2, p, s, n, elem_serial(op), NULL);
    }
    tfe_tensor *xc = x->dtype == dt ? x : kn_contig_as(x, dt);
    if (!xc) return -1;
    tfe_tensor *ops[2] = {o, xc};
    int r = kn_foreach(2, ops, o->rank, o->shape, fn, NULL);
    if (xc != x) tensor_decref(xc);
    return r;
}

/* ---- binary ------------------------------------------------------------------------
 * p[0] out (contiguous), p[1] a, p[2] b. ctx, when not NULL, is an int the
 * loop sets on an integer error (1 division by zero, 2 negative power). */
#define BIN_LOOP(fname, T, OT, EXPR)                                                      \
    static void fname(int64_t n, char **p, const int64_t *s, void *ctx) {                 \
        int err = 0;                                                                      \
        OT *restrict o = (OT *)p[0];                                                      \
        const char *pa = p[1], *pb = p[2];                                                \
        int64_t sa = s[1], sb = s[2];                                                     \
        if (sa == sizeof(T) && sb == sizeof(T)) {                                         \
            const T *restrict a = (const T *)pa, *restrict b = (const T *)pb;             \
            for (int64_t i = 0; i < n; i++) {                                             \
                T x = a[i], y = b[i];                                                     \
                o[i] = (EXPR);                                                            \
            }                                                                             \
        } else if (sa == 0 && sb == sizeof(T)) {                                          \
            const T x = *(const T *)pa;                                                   \
            const T *restrict b = (const T *)pb;                                          \
            for (int64_t i = 0; i < n; i++) {                                             \
                T y = b[i];                                                               \
                o[i] = (EXPR);                                                            \
            }                                                                             \
        } else if (sb == 0 && sa == sizeof(T)) {                                          \
            const T y = *(const T *)pb;                                                   \
            const T *restrict a = (const T *)pa;                                          \
            for (int64_t i = 0; i < n; i++) {                                             \
                T x = a[i];                                                               \
                o[i] = (EXPR);                                                            \
            }                                                                             \
        } else {                                                                          \
            for (int64_t i = 0; i < n; i++) {                                             \
                T x = *(const T *)(pa + i * sa), y = *(const T *)(pb + i * sb);           \
                o[i] = (EXPR);                                                            \
            }                                                                             \
        }                                                                                 \
        if (err && ctx) __atomic_store_n((int *)ctx, err, __ATOMIC_RELAXED);              \
    }
#define BIN_I(name, EXPR) BIN_LOOP(name##_i, int32_t, int32_t, EXPR) BIN_LOOP(name##_l, int64_t, int64_t, EXPR)

/* Python/NumPy floor division and modulo */
#define IFLOORDIV(x, y) ({                                                        \
    typeof((x) + 0) q_ = 0;                                                             \
    if (y == 0) err = 1;                                                          \
    else if (y == -1) q_ = (typeof(x))(0u - (uint64_t)x);                          \
    else { q_ = x / y; if ((x % y != 0) && ((x < 0) != (y < 0))) q_--; }           \
    q_; })
#define IMOD(x, y) ({                                                             \
    typeof((x) + 0) r_ = 0;                                                             \
    if (y == 0) err = 1;                                                          \
    else if (y != -1) { r_ = x % y; if (r_ != 0 && ((r_ < 0) != (y < 0))) r_ += y; } \
    r_; })
#define IPOW(x, y) ({                                                             \
    uint64_t r_ = 1, b_ = (uint64_t)x;                                            \
    typeof((y) + 0) e_ = y;                                                             \
    if (e_ < 0) { err = 2; r_ = 0; }                                              \
    else while (e_) { if (e_ & 1) r_ *= b_; b_ *= b_; e_ >>= 1; }                  \
    (typeof(x))r_; })

/* maximum/minimum of integers, and clip (maximum then minimum, as elem.def) */
#define FMAX(x, y) ((x) > (y) || (x) != (x) ? (x) : (y))
#define FMIN(x, y) ((x) < (y) || (x) != (x) ? (x) : (y))

/* integer add/sub/mul wrap (two's complement, as NumPy): computed in uint64,
 * since signed overflow is undefined behaviour in C */
#define IWRAP(x, y, OP) ((typeof((x) + 0))((uint64_t)(x) OP (uint64_t)(y)))
BIN_I(add, IWRAP(x, y, +))
BIN_LOOP(add_b, tbool, tbool, x | y)
BIN_I(sub, IWRAP(x, y, -))
BIN_I(mul, IWRAP(x, y, *))
BIN_LOOP(mul_b, tbool, tbool, x & y)
BIN_I(floordiv, IFLOORDIV(x, y))
BIN_I(mod, IMOD(x, y))
BIN_I(pow, IPOW(x, y))
BIN_I(maximum, FMAX(x, y))
BIN_LOOP(maximum_b, tbool, tbool, x | y)
BIN_I(minimum, FMIN(x, y))
BIN_LOOP(minimum_b, tbool, tbool, x & y)
BIN_LOOP(and_b, tbool, tbool, x & y)
BIN_LOOP(or_b, tbool, tbool, x | y)

/* tensor/elem.def's binary float formulas (elem_ID_f, elem_ID_d; the
 * helpers were defined with the unary ones), and its comparisons for every
 * dtype (elem_ID_b, _i, _l, _f, _d) */
#define ELEM_BINARY(ID, COST, EXPR) BIN_LOOP(elem_##ID##_f, T, T, EXPR)
#define T float
#define F(fn) fn##f
#include "tensor/elem.def"
#undef T
#undef F
#define ELEM_BINARY(ID, COST, EXPR) BIN_LOOP(elem_##ID##_d, T, T, EXPR)
#define T double
#define F(fn) fn
#include "tensor/elem.def"
#undef T
#undef F
#define ELEM_COMPARE(ID, EXPR)                        \
    BIN_LOOP(elem_##ID##_b, tbool, tbool, EXPR)       \
    BIN_LOOP(elem_##ID##_i, int32_t, tbool, EXPR)     \
    BIN_LOOP(elem_##ID##_l, int64_t, tbool, EXPR)     \
    BIN_LOOP(elem_##ID##_f, float, tbool, EXPR)       \
    BIN_LOOP(elem_##ID##_d, double, tbool, EXPR)
#include "tensor/elem.def"

/* the loops of each binary op by compute dtype: [op][0..4] bool, int32,
 * int64, float32, float64 (tfe_dtype's order) */
static const kn_loop_fn binary_loops[TFE_NOPS][5] = {
#define ELEM_BINARY(ID, COST, EXPR) [OP_##ID] = {[TFE_FLOAT32] = elem_##ID##_f, [TFE_FLOAT64] = elem_##ID##_d},
#define ELEM_COMPARE(ID, EXPR) [OP_##ID] = {elem_##ID##_b, elem_##ID##_i, elem_##ID##_l, elem_##ID##_f, elem_##ID##_d},
#include "tensor/elem.def"
};
_Static_assert(TFE_BOOL == 0 && TFE_INT32 == 1 && TFE_INT64 == 2 && TFE_FLOAT32 == 3 && TFE_FLOAT64 == 4,
               "binary_loops is indexed by dtype");
/* the integer and bool versions: [op][0..2] bool, int32, int64 */
static const kn_loop_fn binary_ints[TFE_NOPS][3] = {
    [OP_ADD] = {add_b, add_i, add_l},
    [OP_SUB] = {NULL, sub_i, sub_l},
    [OP_MUL] = {mul_b, mul_i, mul_l},
    [OP_FLOORDIV] = {NULL, floordiv_i, floordiv_l},
    [OP_MOD] = {NULL, mod_i, mod_l},
    [OP_POW] = {NULL, pow_i, pow_l},
    [OP_MAXIMUM] = {maximum_b, maximum_i, maximum_l},
    [OP_MINIMUM] = {minimum_b, minimum_i, minimum_l},
    [OP_LOGICAL_AND] = {and_b},
    [OP_LOGICAL_OR] = {or_b},
};

void kn_add_relu_rows(bool f64, void *y, const void *h, int64_t n, bool h_first) {
    int64_t es = f64 ? 8 : 4, s[3] = {es, es, es};
    char *p[3] = {y, h_first ? (char *)h : y, h_first ? y : (char *)h};
    (f64 ? elem_ADD_d : elem_ADD_f)(n, p, s, NULL);
    p[1] = y; /* relu of the sum, in place */
    (f64 ? elem_RELU_d : elem_RELU_f)(n, p, s, NULL);
}

/* The loop of a binary op for compute dtype dt, or NULL (an error). */
static kn_loop_fn binary_loop(tfe_op op, tfe_dtype dt) {
    if (dt > TFE_FLOAT64) return NULL;
    if (binary_loops[op][dt]) return binary_loops[op][dt];
    return dt <= TFE_INT64 ? binary_ints[op][dt] : NULL;
}

/* An operand of an elementwise kernel, converted to the compute dtype:
 * a 1-element input of another dtype is converted into `scalar` (no
 * allocation: `x_f32 * 2` is the common case); larger ones into `tmp`. */
typedef struct operand {
    char *data;
    tfe_tensor *t;    /* the tensor whose strides apply (input or tmp) */
    tfe_tensor *tmp;  /* owned converted copy, or NULL */
    bool scalar;
    union { double d; int64_t l; char bytes[8]; } sbuf;
} operand;

static int operand_init(operand *op, tfe_tensor *t, tfe_dtype dt) {
    op->tmp = NULL;
    op->t = t;
    op->scalar = false;
    if (t->dtype == dt) {
        op->data = tensor_data(t);
        return 0;
    }
    if (tensor_numel(t) == 1) {
        const char *src = tensor_data(t);
        if (dtype_is_float(t->dtype)) kn_store_f64(op->sbuf.bytes, dt, kn_load_f64(src, t->dtype));
        else kn_store_i64(op->sbuf.bytes, dt, kn_load_i64(src, t->dtype));
        op->data = op->sbuf.bytes;
        op->scalar = true;
        return 0;
    }
    op->tmp = kn_contig_as(t, dt);
    if (!op->tmp) return -1;
    op->t = op->tmp;
    op->data = tensor_data(op->tmp);
    return 0;
}

static bool same_shape(const tfe_tensor *a, const tfe_tensor *b) {
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

/* ---- periodic runs ----------------------------------------------------------------
 * (N, H, W, C) op (C,): an operand that is contiguous and equal to the
 * output's trailing axes repeats with period P = its size along the flat
 * output. It is tiled K times into a buffer of L = K P elements, so that the
 * loop runs over blocks of L with every operand contiguous (or scalar):
 * vectorised, no per-element index arithmetic, one call per block rather
 * than per row of C. The arithmetic is the flat loop's, so results are too. */
#define PERIOD_BLOCK 2048 /* elements per call: amortises the call, tiles stay in L1 */

typedef struct period_ctx {
    kn_loop_fn fn;
    int nops;
    char *p[KN_MAXOPS];
    int64_t s[KN_MAXOPS];
    bool tiled[KN_MAXOPS];   /* p[k] is a tile: the same for every block */
    int64_t n, L;
    void *ctx;
} period_ctx;

static void period_range(int64_t b, int64_t e, void *vctx) {
    period_ctx *f = vctx;
    char *p[KN_MAXOPS];
    for (int64_t blk = b; blk < e; blk++) {
        int64_t off = blk * f->L, len = f->n - off < f->L ? f->n - off : f->L;
        for (int k = 0; k < f->nops; k++) p[k] = f->tiled[k] ? f->p[k] : f->p[k] + off * f->s[k];
        f->fn(len, p, f->s, f->ctx);
    }
}

/* The period of operand t along output o's flat index, or 0: t (by
 * broadcasting, or as a view with stride 0 there: broadcast_to's) is
 * constant along o's leading axes and contiguous over the trailing ones. */
static int64_t operand_period(const tfe_tensor *t, const tfe_tensor *o) {
    int64_t st[KN_MAXDIM];
    kn_bcast_strides(t, o->rank, o->shape, st);
    int64_t P = 1, want = (int64_t)kn_esz(t->dtype);
    int d = o->rank;
    /* trailing axes: contiguous (size-1 axes have any stride) */
    while (d > 0 && (o->shape[d - 1] == 1 || st[d - 1] == want)) {
        d--;
        want *= o->shape[d];
        P *= o->shape[d];
    }
    for (int i = 0; i < d; i++)
        if (st[i] != 0 && o->shape[i] != 1) return 0;
    return P;
}

/* Runs fn periodically when every operand is scalar, full or periodic with
 * one common period; returns 1 when it does not apply (the caller iterates). */
static int period_run(kn_loop_fn fn, tfe_tensor *o, int nin, operand *ops, char **p, int64_t *s, int64_t serial,
                      void *ctx) {
    int64_t n = tensor_numel(o), P = 0;
    int64_t per[KN_MAXOPS] = {0};
    for (int k = 0; k < nin; k++) {
        if (s[k + 1] != -1) continue; /* scalar or full */
        per[k] = operand_period(ops[k].t, o);
        if (per[k] <= 1 || (P && per[k] != P)) return 1;
        P = per[k];
    }
    if (!P || n % P) return 1;
    int64_t K = P >= PERIOD_BLOCK ? 1 : PERIOD_BLOCK / P, L = K * P;
    period_ctx f = {.fn = fn, .nops = nin + 1, .n = n, .L = L, .ctx = ctx};
    f.p[0] = p[0];
    f.s[0] = s[0];
    char *tiles[KN_MAXOPS] = {0};
    size_t tbytes[KN_MAXOPS] = {0};
    int rc = 0;
    for (int k = 0; k < nin; k++) {
        f.p[k + 1] = p[k + 1];
        f.s[k + 1] = s[k + 1];
        if (!per[k]) continue;
        size_t esz = kn_esz(ops[k].t->dtype);
        f.s[k + 1] = (int64_t)esz;
        f.tiled[k + 1] = true;
        if (K == 1) continue;
        tbytes[k] = (size_t)L * esz;
        tiles[k] = tfe_alloc(tbytes[k]);
        if (!tiles[k]) {
            rc = -1;
            goto done;
        }
        for (int64_t r = 0; r < K; r++) memcpy(tiles[k] + (size_t)(r * P) * esz, p[k + 1], (size_t)P * esz);
        f.p[k + 1] = tiles[k];
    }
    int64_t nblocks = (n + L - 1) / L;
    if (n < serial) period_range(0, nblocks, &f);
    else {
        int64_t grain = KN_GRAIN / L;
        tfe_parallel_for(nblocks, grain < 1 ? 1 : grain, period_range, &f);
        rc = kn_poll();
    }
done:
    for (int k = 0; k < nin; k++)
        if (tiles[k]) tfe_free(tiles[k], tbytes[k]);
    return rc;
}

/* Runs an elementwise loop over out and nin converted operands: flat when
 * every operand is a scalar or contiguous of the output's shape; periodic
 * when the others repeat over the output's trailing axes. */
static int elementwise_run(kn_loop_fn fn, tfe_tensor *o, int nin, operand *ops, int64_t serial, void *ctx) {
    int64_t n = tensor_numel(o);
    if (n == 0) return 0;
    char *p[KN_MAXOPS];
    int64_t s[KN_MAXOPS];
    p[0] = tensor_data(o);
    s[0] = (int64_t)kn_esz(o->dtype);
    bool flat = true;
    for (int k = 0; k < nin; k++) {
        operand *q = &ops[k];
        p[k + 1] = q->data;
        if (q->scalar || tensor_numel(q->t) == 1) s[k + 1] = 0;
        else if (same_shape(q->t, o) && tensor_is_contiguous(q->t)) s[k + 1] = (int64_t)kn_esz(q->t->dtype);
        else {
            s[k + 1] = -1; /* neither: period_run looks closer */
            flat = false;
        }
    }
    if (flat) return flat_run(fn, nin + 1, p, s, n, serial, ctx);
    if (tensor_is_contiguous(o)) {
        int r = period_run(fn, o, nin, ops, p, s, serial, ctx);
        if (r <= 0) return r;
    }
    int64_t strides[KN_MAXOPS][KN_MAXDIM];
    for (int i = 0; i < o->rank; i++) strides[0][i] = o->strides[i];
    for (int k = 0; k < nin; k++) {
        if (ops[k].scalar) memset(strides[k + 1], 0, sizeof strides[k + 1]);
        else kn_bcast_strides(ops[k].t, o->rank, o->shape, strides[k + 1]);
    }
    return kn_foreach_raw(nin + 1, p, strides, o->rank, o->shape, fn, ctx);
}

int k_binary(const tfe_opcall *c) {
    tfe_tensor *a = c->in[0], *b = c->in[1], *o = c->out[0];
    tfe_op op = c->op;
    tfe_dtype dt = o->dtype;
    if (op == OP_LOGICAL_AND || op == OP_LOGICAL_OR) dt = TFE_BOOL;
    else if (o->dtype == TFE_BOOL && op != OP_ADD && op != OP_MUL && op != OP_MAXIMUM && op != OP_MINIMUM)
        dt = dtype_promote(a->dtype, a->weak, b->dtype, b->weak, NULL); /* comparisons */
    kn_loop_fn fn = binary_loop(op, dt);
    if (!fn) {
        tfe_error_set("%s: no kernel for %s", kn_opname(c), dtype_name(dt));
        return -1;
    }
    size_t esz = kn_esz(dt);

    /* hot path: same dtype, same shape, contiguous, small */
    if (a->dtype == dt && b->dtype == dt && same_shape(a, o) && same_shape(b, o) &&
        tensor_is_contiguous(a) && tensor_is_contiguous(b)) {
        int64_t n = tensor_numel(o);
        if (n < elem_serial(op) && !dtype_is_int(dt)) {
            char *p[3] = {tensor_data(o), tensor_data(a), tensor_data(b)};
            int64_t s[3] = {(int64_t)kn_esz(o->dtype), (int64_t)esz, (int64_t)esz};
            fn(n, p, s, NULL);
            return 0;
        }
    }
    /* hot path: tensor op 1-element operand (`x * 2`), small */
    int64_t n = tensor_numel(o);
    if (n < elem_serial(op) && !dtype_is_int(dt) && (a->rank == 0 || b->rank == 0)) {
        tfe_tensor *t = a->rank == 0 ? b : a, *sc = a->rank == 0 ? a : b;
        if (t->dtype == dt && same_shape(t, o) && tensor_is_contiguous(t)) {
            union { double d; char bytes[8]; } buf;
            kn_store_f64(buf.bytes, dt, kn_load_f64(tensor_data(sc), sc->dtype));
            char *p[3] = {tensor_data(o), a == sc ? buf.bytes : tensor_data(a), b == sc ? buf.bytes : tensor_data(b)};
            int64_t s[3] = {(int64_t)kn_esz(o->dtype), a == sc ? 0 : (int64_t)esz, b == sc ? 0 : (int64_t)esz};
            fn(n, p, s, NULL);
            return 0;
        }
    }
    operand ops[2];
    if (operand_init(&ops[0], a, dt)) return -1;
    if (operand_init(&ops[1], b, dt)) {
        tensor_decref(ops[0].tmp);
        return -1;
    }
    int err = 0;
    int r = elementwise_run(fn, o, 2, ops, elem_serial(op), &err);
    tensor_decref(ops[0].tmp);
    tensor_decref(ops[1].tmp);
    if (r) return -1;
    if (err == 1) {
        tfe_error_set("%s: integer division by zero", kn_opname(c));
        return -1;
    }
    if (err == 2) {
        tfe_error_set("pow: integers to negative integer powers are not allowed");
        return -1;
    }
    return 0;
}

/* ---- where, clip ------------------------------------------------------------------- */
/* Selected by a mask, not a branch: cond is random in a gradient (relu's,
 * clip's), and a mispredicted branch per element cost 4 ns. The bits are
 * copied, as the branch did. */
#define WHERE_SEL(T, c, a, b) ((T)(((a) & (T)(0u - (T)((c) != 0))) | ((b) & (T)~(T)(0u - (T)((c) != 0)))))
#define WHERE_LOOP(fname, T)                                                     \
    static void fname(int64_t n, char **p, const int64_t *s, void *ctx) {        \
        (void)ctx;                                                               \
        T *restrict o = (T *)p[0];                                               \
        const tbool *restrict c = (const tbool *)p[1];                           \
        if (s[1] == 1 && s[2] == sizeof(T) && s[3] == sizeof(T)) {               \
            const T *restrict a = (const T *)p[2], *restrict b = (const T *)p[3]; \
            for (int64_t i = 0; i < n; i++) o[i] = WHERE_SEL(T, c[i], a[i], b[i]);  \
        } else if (s[1] == 1 && s[2] == sizeof(T) && s[3] == 0) {                \
            const T *restrict a = (const T *)p[2], b = *(const T *)p[3];         \
            for (int64_t i = 0; i < n; i++) o[i] = WHERE_SEL(T, c[i], a[i], b);     \
        } else if (s[1] == 1 && s[2] == 0 && s[3] == sizeof(T)) {                \
            const T a = *(const T *)p[2], *restrict b = (const T *)p[3];         \
            for (int64_t i = 0; i < n; i++) o[i] = WHERE_SEL(T, c[i], a, b[i]);     \
        } else {                                                                 \
            const char *pc = p[1], *pa = p[2], *pb = p[3];                       \
            int64_t sc = s[1], sa = s[2], sb = s[3];                             \
            for (int64_t i = 0; i < n; i++)                                      \
                o[i] = WHERE_SEL(T, *(const tbool *)(pc + i * sc), *(const T *)(pa + i * sa), \
                                 *(const T *)(pb + i * sb));                     \
        }                                                                        \
    }
WHERE_LOOP(where_1, uint8_t)
WHERE_LOOP(where_4, uint32_t)
WHERE_LOOP(where_8, uint64_t)

#define CLIP_LOOP(fname, T)                                                      \
    static void fname(int64_t n, char **p, const int64_t *s, void *ctx) {        \
        (void)ctx;                                                               \
        T *restrict o = (T *)p[0];                                               \
        for (int64_t i = 0; i < n; i++) {                                        \
            T x = *(const T *)(p[1] + i * s[1]), lo = *(const T *)(p[2] + i * s[2]), \
              hi = *(const T *)(p[3] + i * s[3]);                                \
            T v = FMAX(x, lo);                                                   \
            o[i] = FMIN(v, hi);                                                  \
        }                                                                        \
    }
CLIP_LOOP(clip_b, tbool)
CLIP_LOOP(clip_i, int32_t)
CLIP_LOOP(clip_l, int64_t)
CLIP_LOOP(clip_f, float)
CLIP_LOOP(clip_d, double)

static int ternary(const tfe_opcall *c, kn_loop_fn fn, tfe_dtype dt0) {
    tfe_tensor *o = c->out[0];
    operand ops[3];
    int n = 0, r = -1;
    for (; n < 3; n++)
        if (operand_init(&ops[n], c->in[n], n == 0 ? dt0 : o->dtype)) goto done;
    r = elementwise_run(fn, o, 3, ops, 4 * KN_GRAIN, NULL); /* cheap: a select, a clip */
done:
    for (int k = 0; k < n; k++) tensor_decref(ops[k].tmp);
    return r;
}

int k_where(const tfe_opcall *c) {
    size_t esz = kn_esz(c->out[0]->dtype);
    return ternary(c, esz == 1 ? where_1 : esz == 4 ? where_4 : where_8, TFE_BOOL);
}

int k_clip(const tfe_opcall *c) {
    tfe_dtype dt = c->out[0]->dtype;
    return ternary(c, dt == TFE_BOOL ? clip_b : dt == TFE_INT32 ? clip_i : dt == TFE_INT64 ? clip_l
                      : dt == TFE_FLOAT32 ? clip_f : clip_d, dt);
}

/* Tripwire: each elem.def row is an elementwise op of ops.def with its arity
 * and F_GPU (its formula is the GPU's kernel too, gpu/kernels.cu). */
enum {
#define OP(id, name, nin, nout, flags, infer, kernel, grad) OPFLAGS_##id = (flags), OPNIN_##id = (nin),
#include "tensor/ops.def"
#undef OP
};
#define ELEM_ROW(ID, NIN)                                                                          \
    _Static_assert((OPFLAGS_##ID & F_ELEMWISE) && (OPFLAGS_##ID & F_GPU) && OPNIN_##ID == (NIN), \
                   "tensor/elem.def: " #ID " is not an elementwise F_GPU op of " #NIN " input(s) in ops.def");
#define ELEM_UNARY(ID, COST, EXPR) ELEM_ROW(ID, 1)
#define ELEM_BINARY(ID, COST, EXPR) ELEM_ROW(ID, 2)
#define ELEM_TEST(ID, EXPR) ELEM_ROW(ID, 1)
#define ELEM_COMPARE(ID, EXPR) ELEM_ROW(ID, 2)
#include "tensor/elem.def"
#undef ELEM_ROW
