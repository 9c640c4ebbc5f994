/* export_ops.c — the op table's ONNX forms (opset 17): emit_op writes one
 * op node, export_refusal says why an op has none (docs/export.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "stage/export.h"
#include "stage/export_int.h"
#include "util/xalloc.h"

/* Reduction axes normalised to 0..rank-1 (n->at->naxes -1: all). */
static int red_axes(const GNode *n, int rank, int64_t *ax)
{
    int k = n->at->naxes;
    if (k < 0) {
        for (int d = 0; d < rank; d++) ax[d] = d;
        return rank;
    }
    for (int i = 0; i < k; i++) ax[i] = n->at->axes[i] < 0 ? n->at->axes[i] + rank : n->at->axes[i];
    return k;
}

static const char *reduce(Ex *E, Tmp *t, const char *op, const char *x, const int64_t *ax, int nax, bool keepdims)
{
    Buf a = {0};
    ox_attr_int(&a, "keepdims", keepdims);
    if (!strcmp(op, "ReduceSum")) {
        const char *in[2] = {x, ox_const_i64(E, t, ax, nax, false)};
        if (!nax) ox_attr_int(&a, "noop_with_empty_axes", 1);
        return ox_op1(E, t, op, 2, in, &a);
    }
    if (!nax) {
        free(a.s);
        return x;
    }
    ox_attr_ints(&a, "axes", ax, nax);
    return ox_op1(E, t, op, 1, &x, &a);
}

static const char *where3(Ex *E, Tmp *t, const char *c, const char *a, const char *b)
{
    const char *w[3] = {c, a, b};
    return ox_op1(E, t, "Where", 3, w, NULL);
}

/* Whether a float v is negative or -0.0 (1/v < 0), not NaN. */
static const char *signbit_of(Ex *E, Tmp *t, tfe_dtype dt, const char *v)
{
    const char *z = ox_const_num(E, t, dt, 0);
    return ox_bin(E, t, "Or", ox_bin(E, t, "Less", v, z), ox_bin(E, t, "Less", ox_bin(E, t, "Div", ox_const_num(E, t, dt, 1), v), z));
}

/* r with its zeros' signs set: -0.0 where neg, 0.0 elsewhere (onnxruntime's
 * Where may give 0.0 for a -0.0 it selects, so the sign is set after it:
 * r times -1 where a zero has the other sign) */
static const char *neg_zero_where(Ex *E, Tmp *t, tfe_dtype dt, const char *r, const char *neg)
{
    const char *z = ox_const_num(E, t, dt, 0);
    const char *rneg = ox_bin(E, t, "Less", ox_bin(E, t, "Div", ox_const_num(E, t, dt, 1), r), z);
    const char *w[3] = {ox_bin(E, t, "And", ox_bin(E, t, "Xor", neg, rneg), ox_bin(E, t, "Equal", r, z)),
                        ox_const_num(E, t, dt, -1), ox_const_num(E, t, dt, 1)};
    return ox_bin(E, t, "Mul", r, ox_op1(E, t, "Where", 3, w, NULL));
}

/* NaN where any element reduced is NaN (onnxruntime's ReduceMax and
 * ReduceMin skip NaN; tfe's max and min give it, as NumPy's) */
static const char *nan_wins(Ex *E, Tmp *t, tfe_dtype dt, const char *x, const char *r, const int64_t *ax, int nax, bool keep);

/* r, a mean of x, NaN where nothing was reduced (tfe's 0 / 0; ReduceMean
 * gives 0) */
static const char *empty_nan(Ex *E, Tmp *t, tfe_dtype dt, const char *x, const char *r);

static const char *ELEM_UNARY[TFE_NOPS] = {
    [OP_NEG] = "Neg", [OP_ABS] = "Abs", [OP_SIGN] = "Sign", [OP_EXP] = "Exp", [OP_LOG] = "Log",
    [OP_SQRT] = "Sqrt", [OP_SIN] = "Sin", [OP_COS] = "Cos", [OP_TANH] = "Tanh", [OP_SIGMOID] = "Sigmoid",
    [OP_RELU] = "Relu", [OP_SOFTPLUS] = "Softplus", [OP_FLOOR] = "Floor", [OP_CEIL] = "Ceil", [OP_ROUND] = "Round",
    [OP_ISNAN] = "IsNaN", [OP_LOGICAL_NOT] = "Not", [OP_STOP_GRADIENT] = "Identity", [OP_COPY] = "Identity",
    [OP_TAN] = "Tan", [OP_ERF] = "Erf",
};
static const char *ELEM_BINARY[TFE_NOPS] = {
    [OP_ADD] = "Add", [OP_SUB] = "Sub", [OP_MUL] = "Mul", [OP_DIV] = "Div", [OP_POW] = "Pow",
    [OP_MAXIMUM] = "Max", [OP_MINIMUM] = "Min", [OP_EQ] = "Equal", [OP_LT] = "Less", [OP_LE] = "LessOrEqual",
    [OP_GT] = "Greater", [OP_GE] = "GreaterOrEqual", [OP_LOGICAL_AND] = "And", [OP_LOGICAL_OR] = "Or",
};

/* Ops with no ONNX form, and why (docs/export.md lists them; a test checks
 * every op is either here or written by emit_op). */
const char *export_refusal(tfe_op op)
{
    switch ((int)op) { /* int: the cases an enum switch would list are in the tables above */
    case OP_RANDN: case OP_RAND: case OP_RANDINT: case OP_DROPOUT: case OP_RANDPERM: case OP_CHOICE:
        return "a random draw (ONNX's random ops draw other numbers)";
    case OP_INV: case OP_SOLVE: case OP_CHOLESKY: return "ONNX has no matrix inverse, solve or factorization";
    case OP_CUMPROD: return "ONNX has no cumulative product";
    case OP_ARGSORT: return "ONNX's TopK does not promise a stable order of ties";
    case OP_SEARCHSORTED: return "ONNX has no such op";
    case OP_UNIQUE: case OP_BINCOUNT: return "its result's shape depends on the data: never in a staged function";
    case OP_CONV2D_BACKPROP_INPUT: case OP_CONV2D_BACKPROP_FILTER: case OP_MAX_POOL2D_GRAD: case OP_AVG_POOL2D_GRAD:
    case OP_MAX_POOL2D_SELECT:
        return "a gradient op (export writes forward graphs)";
    case OP_ALLREDUCE: case OP_BROADCAST: case OP_ALLGATHER: return "a collective of a distributed run";
    case OP_CONV2D_BIAS: case OP_CONV2D_BIAS_RELU:
        return "made by the optimizer from conv2d, add and relu; export reads the graph as traced";
    case OP_BATCH_NORM_GRAD: return "a gradient op (export writes forward graphs)";
    default: return NULL;
    }
}

/* NHWC <-> NCHW around ONNX's Conv and pools. */
static const int64_t TO_NCHW[4] = {0, 3, 1, 2}, TO_NHWC[4] = {0, 2, 3, 1}, HWIO_OIHW[4] = {3, 2, 0, 1};
static const char *transpose(Ex *E, Tmp *t, const char *x, const int64_t *perm, int n)
{
    Buf a = {0};
    ox_attr_ints(&a, "perm", perm, n);
    return ox_op1(E, t, "Transpose", 1, &x, &a);
}

int emit_op(Ex *E, const GNode *n)
{
    Tmp t = {0};
    tfe_op op = n->op;
    const tfe_attrs *at = n->at;
    const tfe_meta *om = &n->meta[0];
    const char *x = n->nin > 0 ? ox_in_name(E, n, 0) : NULL;
    tfe_dtype xd = n->nin > 0 ? ox_in_meta(E, n, 0)->dtype : om->dtype;
    int xr = n->nin > 0 ? ox_in_meta(E, n, 0)->rank : 0;
    const char *r = NULL;
    Buf a = {0};
    const char *why = export_refusal(op);
    if (why) return ox_refuse(E, why); /* (nothing made yet) */

    if (tfe_ops[op].flags & F_CREATE) {
        /* a constant: made now, written as an initializer */
        tfe_tensor *v = NULL;
        if (tfe_execute_eager(op, 0, NULL, at, &v)) return -1;
        int rc = ox_init_tensor(E, ox_out_name(E, n, 0), v);
        tensor_decref(v);
        return rc;
    }
    if (ELEM_UNARY[op]) {
        /* int -> float ops compute in the result's dtype; a bool result of
         * arithmetic (abs, relu of bools) in int32, cast back */
        bool logic = op == OP_LOGICAL_NOT || (tfe_ops[op].flags & F_COMPARISON);
        tfe_dtype ud = om->dtype == TFE_BOOL && !logic ? TFE_INT32 : om->dtype;
        const char *p = op == OP_LOGICAL_NOT ? ox_cast(E, &t, x, xd, TFE_BOOL)
                      : (tfe_ops[op].flags & F_COMPARISON) ? x : ox_cast(E, &t, x, xd, ud);
        if (op == OP_ISNAN && !dtype_is_float(xd)) {
            r = ox_un(E, &t, "Not", ox_bin(E, &t, "Equal", x, x)); /* (IsNaN takes floats: an int is never NaN) */
        } else if ((op == OP_FLOOR || op == OP_CEIL || op == OP_ROUND) && !dtype_is_float(ud)) {
            r = p; /* an int rounds to itself (Floor, Ceil, Round take floats) */
        } else if (op == OP_RELU) {
            /* tfe's x > 0 || isnan(x) ? x : 0: relu(-0.0) is 0.0, and onnxruntime has no int64 Relu */
            const char *z = ox_const_num(E, &t, ud, 0);
            r = where3(E, &t, ox_un(E, &t, "Not", ox_bin(E, &t, "LessOrEqual", p, z)), p, z);
        } else if (op == OP_SIGN && dtype_is_float(om->dtype)) {
            /* tfe's sign keeps a zero's sign (and NaN): x where x is neither > 0 nor < 0 */
            const char *z = ox_const_num(E, &t, om->dtype, 0);
            r = where3(E, &t, ox_bin(E, &t, "Or", ox_bin(E, &t, "Greater", p, z), ox_bin(E, &t, "Less", p, z)),
                       ox_un(E, &t, "Sign", p), p);
            r = neg_zero_where(E, &t, om->dtype, r, signbit_of(E, &t, om->dtype, p));
        } else {
            r = ox_un(E, &t, ELEM_UNARY[op], p);
        }
        if (!logic) r = ox_cast(E, &t, r, ud, om->dtype);
    } else if (ELEM_BINARY[op]) {
        tfe_dtype bd = ox_in_meta(E, n, 1)->dtype;
        tfe_dtype cd = om->dtype; /* arithmetic: in the result's dtype */
        if (tfe_ops[op].flags & F_COMPARISON) {
            /* the dtype both meet in: the larger (weak literals take the other's) */
            bool wa = ox_in_meta(E, n, 0)->weak, wb = ox_in_meta(E, n, 1)->weak;
            cd = dtype_promote(xd, wa, bd, wb, NULL);
            if (op == OP_LOGICAL_AND || op == OP_LOGICAL_OR) cd = TFE_BOOL;
            else if (cd == TFE_BOOL && op != OP_EQ) cd = TFE_INT32; /* Less etc. take no bools */
        }
        /* bool arithmetic (True + True is True in tfe, as NumPy): in int32, the
         * result back to bool (ONNX's Add, Mul, Max, Min take no bools) */
        tfe_dtype rd = cd;
        if (cd == TFE_BOOL && !(tfe_ops[op].flags & F_COMPARISON)) cd = TFE_INT32;
        r = ox_bin(E, &t, ELEM_BINARY[op], ox_cast(E, &t, x, xd, cd), ox_cast(E, &t, ox_in_name(E, n, 1), bd, cd));
        r = ox_cast(E, &t, r, cd, rd);
    } else {
        switch ((int)op) { /* int: the cases an enum switch would list are in the tables above */
        case OP_NE: {
            tfe_dtype bd = ox_in_meta(E, n, 1)->dtype;
            tfe_dtype cd = dtype_promote(xd, ox_in_meta(E, n, 0)->weak, bd, ox_in_meta(E, n, 1)->weak, NULL);
            r = ox_un(E, &t, "Not", ox_bin(E, &t, "Equal", ox_cast(E, &t, x, xd, cd), ox_cast(E, &t, ox_in_name(E, n, 1), bd, cd)));
            break;
        }
        case OP_FLOORDIV: case OP_MOD: {
            tfe_dtype cd = om->dtype;
            const char *p = ox_cast(E, &t, x, xd, cd), *q = ox_cast(E, &t, ox_in_name(E, n, 1), ox_in_meta(E, n, 1)->dtype, cd);
            if (dtype_is_int(cd)) {
                Buf m = {0};
                ox_attr_int(&m, "fmod", 0); /* Python's: the sign of the divisor */
                const char *in[2] = {p, q};
                const char *md = ox_op1(E, &t, "Mod", 2, in, &m);
                r = op == OP_MOD ? md : ox_bin(E, &t, "Div", ox_bin(E, &t, "Sub", p, md), q);
            } else if (op == OP_FLOORDIV) {
                /* tfe's kernel (CPython's float_divmod) step by step: Floor(Div)
                 * differs at an infinite dividend (NaN), an infinite divisor and
                 * a zero's sign */
                Buf m = {0};
                ox_attr_int(&m, "fmod", 1);
                const char *in[2] = {p, q};
                const char *md = ox_op1(E, &t, "Mod", 2, in, &m);
                const char *z = ox_const_num(E, &t, cd, 0), *one = ox_const_num(E, &t, cd, 1);
                const char *dv = ox_bin(E, &t, "Div", ox_bin(E, &t, "Sub", p, md), q);
                const char *adj = ox_bin(E, &t, "And", ox_un(E, &t, "Not", ox_bin(E, &t, "Equal", md, z)),
                                         ox_bin(E, &t, "Xor", ox_bin(E, &t, "Less", q, z), ox_bin(E, &t, "Less", md, z)));
                dv = where3(E, &t, adj, ox_bin(E, &t, "Sub", dv, one), dv);
                const char *fd = ox_un(E, &t, "Floor", dv);
                fd = where3(E, &t, ox_bin(E, &t, "Greater", ox_bin(E, &t, "Sub", dv, fd), ox_const_num(E, &t, cd, 0.5)),
                            ox_bin(E, &t, "Add", fd, one), fd);
                const char *qq = ox_bin(E, &t, "Div", p, q), *dz = ox_bin(E, &t, "Equal", dv, z), *qz = ox_bin(E, &t, "Equal", q, z);
                r = where3(E, &t, qz, qq, where3(E, &t, dz, z, fd));
                /* a zero quotient has the sign of a / b (copysign(0, a / b)) */
                r = neg_zero_where(E, &t, cd, r, ox_bin(E, &t, "And", ox_un(E, &t, "Not", qz),
                                                        ox_bin(E, &t, "And", dz, signbit_of(E, &t, cd, qq))));
            } else {
                /* fmod, then moved to the divisor's sign */
                Buf m = {0};
                ox_attr_int(&m, "fmod", 1);
                const char *in[2] = {p, q};
                const char *f = ox_op1(E, &t, "Mod", 2, in, &m);
                const char *z = ox_const_num(E, &t, cd, 0);
                const char *fix = ox_bin(E, &t, "And", ox_un(E, &t, "Not", ox_bin(E, &t, "Equal", f, z)),
                                      ox_un(E, &t, "Not", ox_bin(E, &t, "Equal", ox_bin(E, &t, "Less", f, z), ox_bin(E, &t, "Less", q, z))));
                r = where3(E, &t, fix, ox_bin(E, &t, "Add", f, q), f);
                /* a zero result takes the divisor's sign (0.0 % -0.75 is -0.0) */
                r = neg_zero_where(E, &t, cd, where3(E, &t, ox_bin(E, &t, "Equal", f, z), z, r), ox_bin(E, &t, "Less", q, z));
            }
            break;
        }
        case OP_LOG1P: {
            /* log(u) x / (u - 1) with u = 1 + x (Goldberg's form: exact to a few
             * ulps where Log(1 + x) gives 0 for a tiny x), x where u is 1, u where
             * u is infinite */
            const char *c = ox_cast(E, &t, x, xd, om->dtype), *one = ox_const_num(E, &t, om->dtype, 1);
            const char *u = ox_bin(E, &t, "Add", c, one);
            const char *g = ox_bin(E, &t, "Div", ox_bin(E, &t, "Mul", ox_un(E, &t, "Log", u), c), ox_bin(E, &t, "Sub", u, one));
            r = where3(E, &t, ox_bin(E, &t, "Equal", u, one), c, where3(E, &t, ox_un(E, &t, "IsInf", u), u, g));
            r = neg_zero_where(E, &t, om->dtype, r, signbit_of(E, &t, om->dtype, c)); /* (log1p(-0.0) is -0.0) */
            break;
        }
        case OP_RSQRT: r = ox_un(E, &t, "Reciprocal", ox_un(E, &t, "Sqrt", ox_cast(E, &t, x, xd, om->dtype))); break;
        case OP_GELU: {
            /* the exact (erf) form: x/2 (1 + erf(x/sqrt 2)) (opset 17 has no Gelu) */
            const char *c = ox_cast(E, &t, x, xd, om->dtype);
            const char *e = ox_un(E, &t, "Erf", ox_bin(E, &t, "Mul", c, ox_const_num(E, &t, om->dtype, 0.70710678118654752440)));
            r = ox_bin(E, &t, "Mul", ox_bin(E, &t, "Mul", c, ox_const_num(E, &t, om->dtype, 0.5)),
                    ox_bin(E, &t, "Add", e, ox_const_num(E, &t, om->dtype, 1)));
            break;
        }
        case OP_ISFINITE:
            r = !dtype_is_float(xd) ? ox_bin(E, &t, "Equal", x, x) /* (an int is finite: IsNaN, IsInf take floats) */
                                    : ox_un(E, &t, "Not", ox_bin(E, &t, "Or", ox_un(E, &t, "IsNaN", x), ox_un(E, &t, "IsInf", x)));
            break;
        case OP_LOG2: case OP_LOG10: {
            const char *l = ox_un(E, &t, "Log", ox_cast(E, &t, x, xd, om->dtype));
            r = ox_bin(E, &t, "Div", l, ox_const_num(E, &t, om->dtype, op == OP_LOG2 ? 0.69314718055994530942 : 2.30258509299404568402));
            break;
        }
        case OP_SQUARE: {
            tfe_dtype sd = om->dtype == TFE_BOOL ? TFE_INT32 : om->dtype; /* (no Mul of bools) */
            const char *c = ox_cast(E, &t, x, xd, sd);
            r = ox_cast(E, &t, ox_bin(E, &t, "Mul", c, c), sd, om->dtype);
            break;
        }
        case OP_CAST:
            if (dtype_is_float(xd) && dtype_is_int(at->dtype)) {
                /* tfe saturates (NaN is 0); ONNX leaves a value out of range
                 * undefined (onnxruntime gives the lowest int): clipped to the
                 * largest float below 2^(bits-1), then the ends and NaN set.
                 * A float16 or bfloat16 is made float32 first: exact (float32
                 * holds each of their values), and it needs only float32's
                 * constants (bfloat16 reaches past 2^63, and float16's inf
                 * and NaN need setting as float32's do) */
                if (xd == TFE_FLOAT16 || xd == TFE_BFLOAT16) {
                    x = ox_cast(E, &t, x, xd, TFE_FLOAT32);
                    xd = TFE_FLOAT32;
                }
                double top = ldexp(1, at->dtype == TFE_INT32 ? 31 : 63);
                double below = xd == TFE_FLOAT32 ? (double)nextafterf((float)top, 0) : nextafter(top, 0);
                const char *lo = ox_const_num(E, &t, xd, -top);
                const char *c = ox_bin(E, &t, "Min", ox_bin(E, &t, "Max", x, lo), ox_const_num(E, &t, xd, below));
                r = ox_cast(E, &t, c, xd, at->dtype);
                r = where3(E, &t, ox_bin(E, &t, "GreaterOrEqual", x, ox_const_num(E, &t, xd, top)),
                           ox_const_num(E, &t, at->dtype, at->dtype == TFE_INT32 ? 2147483647.0 : 9223372036854775807.0), r);
                r = where3(E, &t, ox_un(E, &t, "IsNaN", x), ox_const_num(E, &t, at->dtype, 0), r);
            } else {
                r = ox_cast(E, &t, x, xd, at->dtype);
            }
            break;
        case OP_WHERE: {
            /* onnxruntime has no Where of bools: of int32s, the result back to bool */
            tfe_dtype wd = om->dtype == TFE_BOOL ? TFE_INT32 : om->dtype;
            const char *w[3] = {ox_cast(E, &t, x, xd, TFE_BOOL), ox_cast(E, &t, ox_in_name(E, n, 1), ox_in_meta(E, n, 1)->dtype, wd),
                                ox_cast(E, &t, ox_in_name(E, n, 2), ox_in_meta(E, n, 2)->dtype, wd)};
            r = ox_cast(E, &t, ox_op1(E, &t, "Where", 3, w, NULL), wd, om->dtype);
            break;
        }
        case OP_RELU_GRAD: {
            /* dy where x > 0, else 0: Where(Greater(x, 0), dy, 0) */
            const char *dy = ox_cast(E, &t, x, xd, om->dtype);
            const char *xs = ox_cast(E, &t, ox_in_name(E, n, 1), ox_in_meta(E, n, 1)->dtype, om->dtype);
            const char *z = ox_const_num(E, &t, om->dtype, 0);
            const char *gt = ox_bin(E, &t, "Greater", xs, z);
            r = where3(E, &t, gt, dy, z);
            if (dtype_is_float(om->dtype)) /* (a -0.0 of dy stays -0.0) */
                r = neg_zero_where(E, &t, om->dtype, r, ox_bin(E, &t, "And", gt, signbit_of(E, &t, om->dtype, dy)));
            break;
        }
        case OP_CLIP: {
            tfe_dtype kd = om->dtype == TFE_BOOL ? TFE_INT32 : om->dtype; /* (no Max of bools) */
            const char *p = ox_cast(E, &t, x, xd, kd);
            const char *lo = ox_cast(E, &t, ox_in_name(E, n, 1), ox_in_meta(E, n, 1)->dtype, kd);
            const char *hi = ox_cast(E, &t, ox_in_name(E, n, 2), ox_in_meta(E, n, 2)->dtype, kd);
            r = ox_cast(E, &t, ox_bin(E, &t, "Min", ox_bin(E, &t, "Max", p, lo), hi), kd, om->dtype);
            break;
        }
        case OP_SUM: case OP_MEAN: case OP_PROD: case OP_MAX: case OP_MIN: case OP_LOGSUMEXP: case OP_ANY: case OP_ALL: {
            int64_t ax[TFE_MAX_RANK];
            int nax = red_axes(n, xr, ax);
            static const char *R[TFE_NOPS] = {[OP_SUM] = "ReduceSum", [OP_MEAN] = "ReduceMean", [OP_PROD] = "ReduceProd",
                                              [OP_MAX] = "ReduceMax", [OP_MIN] = "ReduceMin", [OP_LOGSUMEXP] = "ReduceLogSumExp",
                                              [OP_ANY] = "ReduceMax", [OP_ALL] = "ReduceMin"};
            if (op == OP_ANY || op == OP_ALL) {
                /* a count of the trues (of the falses for all): ReduceMax of
                 * nothing is the lowest int, which any() of an empty tensor
                 * would read as true */
                const char *b = ox_cast(E, &t, x, xd, TFE_BOOL);
                if (op == OP_ALL) b = ox_un(E, &t, "Not", b);
                const char *cnt = reduce(E, &t, "ReduceSum", ox_cast(E, &t, b, TFE_BOOL, TFE_INT64), ax, nax, at->keepdims);
                const char *z = ox_const_num(E, &t, TFE_INT64, 0);
                r = op == OP_ANY ? ox_bin(E, &t, "Greater", cnt, z) : ox_bin(E, &t, "Equal", cnt, z);
                r = ox_cast(E, &t, r, TFE_BOOL, om->dtype);
                break;
            }
            tfe_dtype cd = om->dtype == TFE_BOOL ? TFE_INT32 : om->dtype; /* (no ReduceMax of bools) */
            r = reduce(E, &t, R[op], ox_cast(E, &t, x, xd, cd), ax, nax, at->keepdims);
            if (op == OP_MEAN && dtype_is_float(cd)) r = empty_nan(E, &t, cd, x, r);
            if ((op == OP_MAX || op == OP_MIN) && dtype_is_float(cd)) r = nan_wins(E, &t, cd, ox_cast(E, &t, x, xd, cd), r, ax, nax, at->keepdims);
            r = ox_cast(E, &t, r, cd, om->dtype);
            break;
        }
        case OP_VAR: case OP_STD: {
            int64_t ax[TFE_MAX_RANK];
            int nax = red_axes(n, xr, ax);
            const char *c = ox_cast(E, &t, x, xd, om->dtype);
            const char *m = reduce(E, &t, "ReduceMean", c, ax, nax, true);
            const char *d = ox_bin(E, &t, "Sub", c, m);
            const char *s = reduce(E, &t, "ReduceSum", ox_bin(E, &t, "Mul", d, d), ax, nax, at->keepdims);
            /* n = size(x) / size(mean): known at run time for any shape */
            const char *cnt = ox_cast(E, &t, ox_bin(E, &t, "Div", ox_un(E, &t, "Size", c), ox_un(E, &t, "Size", m)), TFE_INT64, om->dtype);
            const char *den = ox_bin(E, &t, "Sub", cnt, ox_const_num(E, &t, om->dtype, (double)at->ints[0]));
            r = ox_bin(E, &t, "Div", s, den);
            if (op == OP_STD) r = ox_un(E, &t, "Sqrt", r);
            break;
        }
        case OP_ARGMAX: case OP_ARGMIN: {
            const char *p = xd == TFE_BOOL ? ox_cast(E, &t, x, xd, TFE_INT32) : x; /* (no ArgMax of bools) */
            int64_t axis = 0;
            if (at->naxes < 0 || xr == 0) {
                int64_t m1 = -1;
                const char *in[2] = {p, ox_const_i64(E, &t, &m1, 1, false)};
                p = ox_op1(E, &t, "Reshape", 2, in, NULL);
            } else {
                axis = at->axes[0] < 0 ? at->axes[0] + xr : at->axes[0];
            }
            ox_attr_int(&a, "axis", axis);
            ox_attr_int(&a, "keepdims", at->naxes < 0 ? 0 : at->keepdims);
            r = ox_op1(E, &t, op == OP_ARGMAX ? "ArgMax" : "ArgMin", 1, &p, &a);
            if (dtype_is_float(xd)) {
                /* tfe's (NumPy's): the first NaN's index where there is one */
                Buf a2 = {0}, a3 = {0};
                ox_attr_int(&a2, "axis", axis);
                ox_attr_int(&a2, "keepdims", at->naxes < 0 ? 0 : at->keepdims);
                ox_attr_ints(&a3, "axes", &axis, 1);
                ox_attr_int(&a3, "keepdims", at->naxes < 0 ? 0 : at->keepdims);
                const char *nn = ox_cast(E, &t, ox_un(E, &t, "IsNaN", p), TFE_BOOL, TFE_INT32);
                const char *first = ox_op1(E, &t, "ArgMax", 1, &nn, &a2);
                const char *has = ox_op1(E, &t, "ReduceMax", 1, &nn, &a3);
                r = where3(E, &t, ox_cast(E, &t, has, TFE_INT32, TFE_BOOL), first, r);
            }
            if (at->naxes < 0 && at->keepdims && xr) {
                int64_t ones[TFE_MAX_RANK];
                for (int d = 0; d < xr; d++) ones[d] = 1;
                const char *in[2] = {r, ox_const_i64(E, &t, ones, xr, false)};
                r = ox_op1(E, &t, "Reshape", 2, in, NULL);
            }
            break;
        }
        case OP_SOFTMAX: case OP_LOG_SOFTMAX: {
            /* an int tensor's in the result's float dtype, as tfe computes it
             * (Softmax and LogSoftmax take floats only) */
            const char *p = ox_cast(E, &t, x, xd, om->dtype);
            ox_attr_int(&a, "axis", at->axes[0]);
            r = ox_op1(E, &t, op == OP_SOFTMAX ? "Softmax" : "LogSoftmax", 1, &p, &a);
            break;
        }
        case OP_MATMUL: {
            const char *in[2] = {ox_cast(E, &t, x, xd, om->dtype), ox_cast(E, &t, ox_in_name(E, n, 1), ox_in_meta(E, n, 1)->dtype, om->dtype)};
            r = ox_op1(E, &t, "MatMul", 2, in, NULL);
            break;
        }
        case OP_TRIL: case OP_TRIU: {
            ox_attr_int(&a, "upper", op == OP_TRIU);
            const char *in[2] = {x, ox_const_i64(E, &t, &at->ints[0], 1, true)};
            r = ox_op1(E, &t, "Trilu", 2, in, &a);
            break;
        }
        case OP_DET: r = ox_un(E, &t, "Det", x); break;
        case OP_RESHAPE: {
            bool neg = false;
            for (int i = 0; i < at->nints; i++) neg |= at->ints[i] < 0;
            ox_attr_int(&a, "allowzero", !neg); /* a 0 is a size 0, as in tfe (not "copy") */
            const char *in[2] = {x, ox_const_i64(E, &t, at->ints, at->nints, false)};
            r = ox_op1(E, &t, "Reshape", 2, in, &a);
            break;
        }
        case OP_TRANSPOSE:
            if (at->nints) ox_attr_ints(&a, "perm", at->ints, at->nints);
            r = ox_op1(E, &t, "Transpose", 1, &x, &a);
            break;
        case OP_EXPAND_DIMS: {
            int64_t ax = at->axes[0] < 0 ? at->axes[0] + om->rank : at->axes[0];
            const char *in[2] = {x, ox_const_i64(E, &t, &ax, 1, false)};
            r = ox_op1(E, &t, "Unsqueeze", 2, in, NULL);
            break;
        }
        case OP_SQUEEZE: {
            int64_t ax[TFE_MAX_RANK] = {0};
            int k = 0;
            if (at->naxes < 0) {
                for (int d = 0; d < xr; d++)
                    if (ox_in_meta(E, n, 0)->shape[d] == 1) ax[k++] = d;
            } else {
                k = red_axes(n, xr, ax);
            }
            const char *in[2] = {x, ox_const_i64(E, &t, ax, k, false)};
            r = k ? ox_op1(E, &t, "Squeeze", 2, in, NULL) : x;
            break;
        }
        case OP_BROADCAST_TO: {
            const char *in[2] = {x, ox_const_i64(E, &t, at->ints, at->nints, false)};
            r = ox_op1(E, &t, "Expand", 2, in, NULL);
            break;
        }
        case OP_SLICE: {
            int64_t st[TFE_MAX_RANK] = {0}, en[TFE_MAX_RANK] = {0}, ax[TFE_MAX_RANK] = {0}, sp[TFE_MAX_RANK] = {0};
            const int64_t *se = E->slice_se ? E->slice_se[n - E->g->nodes] : NULL; /* (a dynamic dim's) */
            for (int d = 0; d < xr; d++) {
                st[d] = se ? se[d] : at->ints[3 * d];
                en[d] = se ? se[TFE_MAX_RANK + d] : at->ints[3 * d + 1];
                sp[d] = at->ints[3 * d + 2];
                ax[d] = d;
                if (!se && sp[d] < 0 && en[d] < 0) en[d] = INT64_MIN; /* before the first: not "from the end" */
            }
            const char *in[5] = {x, ox_const_i64(E, &t, st, xr, false), ox_const_i64(E, &t, en, xr, false),
                                 ox_const_i64(E, &t, ax, xr, false), ox_const_i64(E, &t, sp, xr, false)};
            r = xr ? ox_op1(E, &t, "Slice", 5, in, NULL) : x;
            if (at->naxes > 0) {
                int64_t dax[TFE_MAX_RANK];
                for (int i = 0; i < at->naxes; i++) dax[i] = at->axes[i];
                const char *sq[2] = {r, ox_const_i64(E, &t, dax, at->naxes, false)};
                r = ox_op1(E, &t, "Squeeze", 2, sq, NULL);
            }
            break;
        }
        case OP_CONCAT: case OP_STACK: {
            const char **in = xcalloc((size_t)n->nin + 1, sizeof *in);
            int64_t axis = at->axes[0] < 0 ? at->axes[0] + om->rank : at->axes[0];
            for (int i = 0; i < n->nin; i++) {
                in[i] = ox_cast(E, &t, ox_in_name(E, n, i), ox_in_meta(E, n, i)->dtype, om->dtype);
                if (op == OP_STACK) {
                    const char *u[2] = {in[i], ox_const_i64(E, &t, &axis, 1, false)};
                    in[i] = ox_op1(E, &t, "Unsqueeze", 2, u, NULL);
                }
            }
            ox_attr_int(&a, "axis", axis);
            r = ox_op1(E, &t, "Concat", n->nin, in, &a);
            free(in);
            break;
        }
        case OP_SPLIT: {
            const char **outs = xcalloc((size_t)n->nout, sizeof *outs);
            for (int k = 0; k < n->nout; k++) outs[k] = ox_out_name(E, n, k);
            ox_attr_int(&a, "axis", at->axes[0] < 0 ? at->axes[0] + xr : at->axes[0]);
            const char *in[2] = {x, ox_const_i64(E, &t, at->ints, at->nints, false)};
            ox_node(E, "Split", 2, in, n->nout, outs, &a);
            free(outs);
            ox_tmp_free(&t);
            return 0;
        }
        case OP_TILE: {
            /* NumPy's tile: reps and rank meet with ones in front */
            int k = at->nints > xr ? at->nints : xr;
            int64_t reps[32];
            for (int i = 0; i < k; i++) reps[i] = 1;
            for (int i = 0; i < at->nints; i++) reps[k - at->nints + i] = at->ints[i];
            const char *p = x;
            if (k > xr) {
                int64_t ax[32];
                for (int i = 0; i < k - xr; i++) ax[i] = i;
                const char *u[2] = {x, ox_const_i64(E, &t, ax, k - xr, false)};
                p = ox_op1(E, &t, "Unsqueeze", 2, u, NULL);
            }
            const char *in[2] = {p, ox_const_i64(E, &t, reps, k, false)};
            r = ox_op1(E, &t, "Tile", 2, in, NULL);
            break;
        }
        case OP_GATHER: {
            ox_attr_int(&a, "axis", at->axes[0]);
            const char *in[2] = {x, ox_in_name(E, n, 1)};
            r = ox_op1(E, &t, "Gather", 2, in, &a);
            break;
        }
        case OP_ONE_HOT: {
            /* onnxruntime's OneHot runs for a few types only (no bool, no
             * int32 index with an int64 depth): int64 indices, and float32
             * values (int64 kept) cast to the dtype after, exact for 0 and 1 */
            int64_t depth = at->ints[0];
            tfe_dtype vd = at->dtype == TFE_INT64 ? TFE_INT64 : TFE_FLOAT32;
            const char *vals = ox_keep(&t, ox_fresh(E, "c"));
            tfe_tensor *v = tensor_zeros(vd, 1, (int64_t[]){2});
            tfe_tensor *one = tensor_from_f64(1, vd);
            memcpy(tensor_data(v) + dtype_size(vd), tensor_data(one), dtype_size(vd));
            ox_tensor_proto(&E->inits, 5, vals, vd, 1, v->shape, tensor_data(v), 2 * dtype_size(vd));
            tensor_decref(v);
            tensor_decref(one);
            /* tfe's row for an index outside [0, depth) is all zeros, where
             * OneHot wraps a negative one (-1 is the last): a negative index
             * is made depth, which OneHot (and import_onnx) read as out of
             * range, all off. (Indices are int32 or int64.) */
            const char *i64 = ox_cast(E, &t, x, xd, TFE_INT64);
            const char *lt = ox_bin(E, &t, "Less", i64, ox_const_num(E, &t, TFE_INT64, 0));
            const char *idx = where3(E, &t, lt, ox_const_num(E, &t, TFE_INT64, (double)depth), i64);
            ox_attr_int(&a, "axis", -1);
            const char *in[3] = {idx, ox_const_i64(E, &t, &depth, 1, true), vals};
            r = ox_cast(E, &t, ox_op1(E, &t, "OneHot", 3, in, &a), vd, at->dtype);
            break;
        }
        case OP_CONV2D: {
            const char *xn = transpose(E, &t, x, TO_NCHW, 4);
            const char *wn = transpose(E, &t, ox_in_name(E, n, 1), HWIO_OIHW, 4);
            ox_attr_ints(&a, "strides", &at->ints[0], 2);
            ox_attr_ints(&a, "dilations", &at->ints[2], 2);
            const tfe_meta *mw = ox_in_meta(E, n, 1);
            bool known = xr == 4 && ox_in_meta(E, n, 0)->shape[1] >= 0 && ox_in_meta(E, n, 0)->shape[2] >= 0;
            if (at->ints[4] && known) {
                /* TensorFlow's "same", the extra cell at the end, as explicit pads
                 * (onnxruntime's SAME_UPPER refuses dilations) */
                int64_t pads[4];
                for (int d = 0; d < 2; d++) {
                    int64_t in = ox_in_meta(E, n, 0)->shape[1 + d], st = at->ints[d], dil = at->ints[2 + d];
                    int64_t out = (in + st - 1) / st, total = (out - 1) * st + (mw->shape[d] - 1) * dil + 1 - in;
                    if (total < 0) total = 0;
                    pads[d] = total / 2;
                    pads[2 + d] = total - total / 2;
                }
                ox_attr_ints(&a, "pads", pads, 4);
            } else if (at->ints[4] && (at->ints[2] != 1 || at->ints[3] != 1)) {
                return ox_tmp_free(&t), free(a.s), ox_refuse(E, "a dilated \"same\" convolution of an image of unknown size");
            } else {
                ox_attr_string(&a, "auto_pad", at->ints[4] ? "SAME_UPPER" : "VALID"); /* TensorFlow's "same": extra at the end */
            }
            const char *in[2] = {xn, wn};
            r = transpose(E, &t, ox_op1(E, &t, "Conv", 2, in, &a), TO_NHWC, 4);
            break;
        }
        case OP_MAX_POOL2D: case OP_AVG_POOL2D: {
            const char *xn = transpose(E, &t, x, TO_NCHW, 4);
            ox_attr_ints(&a, "kernel_shape", &at->ints[0], 2);
            ox_attr_ints(&a, "strides", &at->ints[2], 2);
            ox_attr_string(&a, "auto_pad", at->ints[4] ? "SAME_UPPER" : "VALID");
            if (op == OP_AVG_POOL2D) ox_attr_int(&a, "count_include_pad", 0);
            r = transpose(E, &t, ox_op1(E, &t, op == OP_MAX_POOL2D ? "MaxPool" : "AveragePool", 1, &xn, &a), TO_NHWC, 4);
            break;
        }
        case OP_CUMSUM: {
            ox_attr_int(&a, "reverse", at->nints > 0 && at->ints[0] == 1);
            int64_t axis = at->axes[0];
            const char *in[2] = {ox_cast(E, &t, x, xd, om->dtype), ox_const_i64(E, &t, &axis, 1, true)};
            r = ox_op1(E, &t, "CumSum", 2, in, &a);
            break;
        }
        case OP_TAKE_ALONG_AXIS: {
            ox_attr_int(&a, "axis", at->axes[0]);
            const char *in[2] = {x, ox_in_name(E, n, 1)};
            r = ox_op1(E, &t, "GatherElements", 2, in, &a);
            break;
        }
        case OP_PUT_ALONG_AXIS_ADD: {
            ox_attr_int(&a, "axis", at->axes[0]);
            ox_attr_string(&a, "reduction", "add");
            const char *in[3] = {x, ox_in_name(E, n, 1), ox_cast(E, &t, ox_in_name(E, n, 2), ox_in_meta(E, n, 2)->dtype, om->dtype)};
            r = ox_op1(E, &t, "ScatterElements", 3, in, &a);
            break;
        }
        case OP_ISCLOSE: {
            /* the kernel's rule: |a - b| <= atol + rtol |b| where both are finite,
             * a == b where not (and NaN == NaN with equal_nan), in float32 or float64 */
            tfe_dtype bd = ox_in_meta(E, n, 1)->dtype;
            tfe_dtype cd = dtype_promote(xd, ox_in_meta(E, n, 0)->weak, bd, ox_in_meta(E, n, 1)->weak, NULL) == TFE_FLOAT32
                               ? TFE_FLOAT32 : TFE_FLOAT64;
            const char *p = ox_cast(E, &t, x, xd, cd), *q = ox_cast(E, &t, ox_in_name(E, n, 1), bd, cd);
            const char *fp = ox_un(E, &t, "Not", ox_bin(E, &t, "Or", ox_un(E, &t, "IsNaN", p), ox_un(E, &t, "IsInf", p)));
            const char *fq = ox_un(E, &t, "Not", ox_bin(E, &t, "Or", ox_un(E, &t, "IsNaN", q), ox_un(E, &t, "IsInf", q)));
            const char *tol = ox_bin(E, &t, "Add", ox_const_num(E, &t, cd, at->f[1]),
                                  ox_bin(E, &t, "Mul", ox_const_num(E, &t, cd, at->f[0]), ox_un(E, &t, "Abs", q)));
            const char *close = ox_bin(E, &t, "LessOrEqual", ox_un(E, &t, "Abs", ox_bin(E, &t, "Sub", p, q)), tol);
            const char *other = ox_bin(E, &t, "Equal", p, q);
            if (at->ints[0]) other = ox_bin(E, &t, "Or", other, ox_bin(E, &t, "And", ox_un(E, &t, "IsNaN", p), ox_un(E, &t, "IsNaN", q)));
            const char *fin = ox_bin(E, &t, "And", fp, fq); /* (onnxruntime has no Where of bools) */
            r = ox_bin(E, &t, "Or", ox_bin(E, &t, "And", fin, close), ox_bin(E, &t, "And", ox_un(E, &t, "Not", fin), other));
            break;
        }
        case OP_SCATTER: case OP_SCATTER_ADD: {
            /* ScatterND along axis 0 of x with the axis brought to the front;
             * v broadcast to x's shape with indices' dims for the axis, and
             * brought to the same order; negative indices wrap first */
            const tfe_meta *mx = ox_in_meta(E, n, 0), *mi = ox_in_meta(E, n, 1);
            int axis = at->axes[0] < 0 ? (int)at->axes[0] + xr : (int)at->axes[0];
            int gr = xr - 1 + mi->rank, k = 0;
            if (gr > TFE_MAX_RANK) return ox_tmp_free(&t), free(a.s), ox_refuse(E, "a scatter of too high a rank");
            int64_t gshape[TFE_MAX_RANK], perm[TFE_MAX_RANK], vperm[TFE_MAX_RANK], inv[TFE_MAX_RANK];
            for (int d = 0; d < axis; d++) gshape[k++] = mx->shape[d];
            for (int d = 0; d < mi->rank; d++) gshape[k++] = mi->shape[d];
            for (int d = axis + 1; d < xr; d++) gshape[k++] = mx->shape[d];
            for (int d = 0; d < gr; d++)
                if (gshape[d] < 0) return ox_tmp_free(&t), free(a.s), ox_refuse(E, "a scatter on a dim of unknown size");
            k = 0;
            perm[k++] = axis;
            for (int d = 0; d < xr; d++)
                if (d != axis) perm[k++] = d;
            for (int d = 0; d < xr; d++) inv[perm[d]] = d;
            k = 0;
            for (int d = 0; d < mi->rank; d++) vperm[k++] = axis + d;
            for (int d = 0; d < gr; d++)
                if (d < axis || d >= axis + mi->rank) vperm[k++] = d;
            const char *idx = ox_cast(E, &t, ox_in_name(E, n, 1), mi->dtype, TFE_INT64);
            const char *z = ox_const_num(E, &t, TFE_INT64, 0);
            /* negative indices wrap by the axis' size: known, or read at run time (a dynamic dim) */
            const char *len = mx->shape[axis] >= 0 ? ox_const_num(E, &t, TFE_INT64, (double)mx->shape[axis]) : NULL;
            if (!len) {
                int64_t ax1 = axis;
                const char *g[2] = {ox_un(E, &t, "Shape", x), ox_const_i64(E, &t, &ax1, 1, true)};
                len = ox_op1(E, &t, "Gather", 2, g, NULL);
            }
            const char *wr[3] = {ox_bin(E, &t, "Less", idx, z), ox_bin(E, &t, "Add", idx, len), idx};
            idx = ox_op1(E, &t, "Where", 3, wr, NULL);
            int64_t last = -1;
            const char *u[2] = {idx, ox_const_i64(E, &t, &last, 1, false)};
            idx = ox_op1(E, &t, "Unsqueeze", 2, u, NULL);
            const char *ex[2] = {ox_cast(E, &t, ox_in_name(E, n, 2), ox_in_meta(E, n, 2)->dtype, om->dtype), ox_const_i64(E, &t, gshape, gr, false)};
            const char *v = transpose(E, &t, ox_op1(E, &t, "Expand", 2, ex, NULL), vperm, gr);
            if (op == OP_SCATTER_ADD) ox_attr_string(&a, "reduction", "add");
            const char *in[3] = {transpose(E, &t, x, perm, xr), idx, v};
            r = transpose(E, &t, ox_op1(E, &t, "ScatterND", 3, in, &a), inv, xr);
            break;
        }
        case OP_BOOL_MASK: {
            /* Compress of x with its masked axes made one */
            const tfe_meta *mx = ox_in_meta(E, n, 0), *mm = ox_in_meta(E, n, 1);
            int64_t shp[TFE_MAX_RANK + 1], k = 0, m1 = -1;
            shp[k++] = -1;
            for (int d = mm->rank; d < xr; d++) {
                if (mx->shape[d] < 0) return ox_tmp_free(&t), free(a.s), ox_refuse(E, "a mask of a tensor with unknown trailing dims");
                shp[k++] = mx->shape[d];
            }
            const char *rx[2] = {x, ox_const_i64(E, &t, shp, (int)k, false)};
            const char *rm[2] = {ox_cast(E, &t, ox_in_name(E, n, 1), mm->dtype, TFE_BOOL), ox_const_i64(E, &t, &m1, 1, false)};
            ox_attr_int(&a, "axis", 0);
            const char *in[2] = {ox_op1(E, &t, "Reshape", 2, rx, NULL), ox_op1(E, &t, "Reshape", 2, rm, NULL)};
            r = ox_op1(E, &t, "Compress", 2, in, &a);
            break;
        }
        case OP_SET_SLICE: {
            /* the flat positions of the slice, computed now (x's shape is known),
             * are where ScatterND writes v broadcast to the slice's shape */
            const tfe_meta *mx = ox_in_meta(E, n, 0);
            for (int d = 0; d < xr; d++)
                if (mx->shape[d] < 0) return ox_tmp_free(&t), free(a.s), ox_refuse(E, "a slice assignment into a dim of unknown size");
            int64_t numel = 1;
            for (int d = 0; d < xr; d++) numel *= mx->shape[d];
            tfe_attrs ar;
            tfe_attrs_init(&ar);
            ar.f[0] = 0;
            ar.f[1] = (double)numel;
            ar.f[2] = 1;
            ar.dtype = TFE_INT64;
            tfe_tensor *pos = NULL, *grid = NULL, *sl = NULL;
            tfe_attrs rs;
            tfe_attrs_init(&rs);
            rs.nints = xr;
            for (int d = 0; d < xr; d++) rs.ints[d] = mx->shape[d];
            int bad = tfe_execute_eager(OP_ARANGE, 0, NULL, &ar, &pos) || tfe_execute_eager(OP_RESHAPE, 1, &pos, &rs, &grid) ||
                      tfe_execute_eager(OP_SLICE, 1, &grid, at, &sl);
            tfe_tensor *slc = bad ? NULL : tensor_contiguous(sl);
            if (slc) {
                const char *ind = ox_keep(&t, ox_fresh(E, "c"));
                int64_t ishape[TFE_MAX_RANK + 1];
                for (int d = 0; d < slc->rank; d++) ishape[d] = slc->shape[d];
                ishape[slc->rank] = 1;
                ox_tensor_proto(&E->inits, 5, ind, TFE_INT64, slc->rank + 1, ishape, tensor_data(slc), (size_t)tensor_numel(slc) * 8);
                int64_t m1 = -1;
                const char *fx[2] = {x, ox_const_i64(E, &t, &m1, 1, false)};
                const char *ex[2] = {ox_cast(E, &t, ox_in_name(E, n, 1), ox_in_meta(E, n, 1)->dtype, om->dtype),
                                     ox_const_i64(E, &t, slc->shape, slc->rank, false)};
                /* ScatterND on the flat x: indices (slice shape, 1), updates the slice's shape */
                const char *in[3] = {ox_op1(E, &t, "Reshape", 2, fx, NULL), ind, ox_op1(E, &t, "Expand", 2, ex, NULL)};
                const char *back[2] = {ox_op1(E, &t, "ScatterND", 3, in, NULL), ox_const_i64(E, &t, mx->shape, xr, false)};
                r = ox_op1(E, &t, "Reshape", 2, back, NULL);
            }
            tensor_decref(pos);
            tensor_decref(grid);
            tensor_decref(sl);
            tensor_decref(slc);
            if (!slc) return ox_tmp_free(&t), free(a.s), -1;
            break;
        }
        case OP_BATCH_NORM_TRAIN: case OP_BATCH_NORM_INFER: {
            /* batch norm over every axis but the last (the channels of NHWC),
             * expanded into ops rather than BatchNormalization: that op
             * normalises axis 1 (NCHW), and these ops keep tfe's roundings,
             * (x - mean) * (1 / sqrt(var + eps)) * gamma + beta. Training:
             * the batch's mean and biased variance, two more outputs. */
            int64_t ax[TFE_MAX_RANK];
            for (int d = 0; d < xr - 1; d++) ax[d] = d;
            const char *g = ox_in_name(E, n, 1), *b = ox_in_name(E, n, 2), *m, *v, *d;
            if (op == OP_BATCH_NORM_TRAIN) {
                /* an empty batch's statistics are NaN, as tfe's 0 / 0 (ReduceMean gives 0) */
                m = empty_nan(E, &t, xd, x, reduce(E, &t, "ReduceMean", x, ax, xr - 1, false));
                d = ox_bin(E, &t, "Sub", x, m);
                v = empty_nan(E, &t, xd, x, reduce(E, &t, "ReduceMean", ox_bin(E, &t, "Mul", d, d), ax, xr - 1, false));
            } else {
                m = ox_in_name(E, n, 3);
                v = ox_in_name(E, n, 4);
                d = ox_bin(E, &t, "Sub", x, m);
            }
            const char *rs = ox_un(E, &t, "Reciprocal", ox_un(E, &t, "Sqrt", ox_bin(E, &t, "Add", v, ox_const_num(E, &t, xd, at->f[0]))));
            r = ox_bin(E, &t, "Add", ox_bin(E, &t, "Mul", ox_bin(E, &t, "Mul", d, rs), g), b);
            if (op == OP_BATCH_NORM_INFER) break;
            const char *vals[3] = {r, m, v};
            for (int k = 0; k < 3; k++) {
                const char *o = ox_out_name(E, n, k);
                ox_node(E, "Identity", 1, &vals[k], 1, &o, NULL);
            }
            free(a.s);
            ox_tmp_free(&t);
            return 0;
        }
        default:
            return ox_tmp_free(&t), free(a.s), ox_refuse(E, "no ONNX form written for it");
        }
    }
    free(a.s);
    r = ox_cast(E, &t, r, (op == OP_CAST) ? at->dtype : om->dtype, om->dtype);
    ox_finish(E, n, r);
    ox_tmp_free(&t);
    return 0;
}

bool export_op_mapped(tfe_op op)
{
    /* what emit_op's switch writes (kept in step by tests/onnx_export.py, which
     * exports every op this says yes to) */
    if (export_refusal(op)) return false;
    if (ELEM_UNARY[op] || ELEM_BINARY[op] || (tfe_ops[op].flags & F_CREATE)) return true;
    switch ((int)op) { /* int: the cases an enum switch would list are in the tables above */
    case OP_NE: case OP_FLOORDIV: case OP_MOD: case OP_LOG1P: case OP_RSQRT: case OP_GELU: case OP_ISFINITE:
    case OP_LOG2: case OP_LOG10: case OP_SQUARE: case OP_CAST: case OP_WHERE: case OP_RELU_GRAD: case OP_CLIP: case OP_SUM: case OP_MEAN:
    case OP_PROD: case OP_MAX: case OP_MIN: case OP_LOGSUMEXP: case OP_ANY: case OP_ALL: case OP_VAR: case OP_STD:
    case OP_ARGMAX: case OP_ARGMIN: case OP_SOFTMAX: case OP_LOG_SOFTMAX: case OP_MATMUL: case OP_TRIL: case OP_TRIU:
    case OP_DET: case OP_RESHAPE: case OP_TRANSPOSE: case OP_EXPAND_DIMS: case OP_SQUEEZE: case OP_BROADCAST_TO:
    case OP_SLICE: case OP_CONCAT: case OP_STACK: case OP_SPLIT: case OP_TILE: case OP_GATHER: case OP_ONE_HOT:
    case OP_CONV2D: case OP_MAX_POOL2D: case OP_AVG_POOL2D: case OP_CUMSUM: case OP_TAKE_ALONG_AXIS:
    case OP_PUT_ALONG_AXIS_ADD: case OP_ISCLOSE: case OP_SCATTER: case OP_SCATTER_ADD: case OP_BOOL_MASK: case OP_SET_SLICE:
    case OP_BATCH_NORM_TRAIN: case OP_BATCH_NORM_INFER:
        return true;
    default: return false;
    }
}


static const char *nan_wins(Ex *E, Tmp *t, tfe_dtype dt, const char *x, const char *r, const int64_t *ax, int nax, bool keep)
{
    const char *cnt = reduce(E, t, "ReduceSum", ox_cast(E, t, ox_un(E, t, "IsNaN", x), TFE_BOOL, TFE_INT64), ax, nax, keep);
    const char *has = ox_bin(E, t, "Greater", cnt, ox_const_num(E, t, TFE_INT64, 0));
    return where3(E, t, has, ox_const_num(E, t, dt, NAN), r);
}

static const char *empty_nan(Ex *E, Tmp *t, tfe_dtype dt, const char *x, const char *r)
{
    /* x empty: every mean is over nothing, or there is none (a kept dim of
     * size 0), so one test of Size(x) serves any axes, any shape at run
     * time. r times a factor, NaN or 1 (Where of the constants): r * 1 is r
     * bit for bit (-0.0, inf and NaN too), where a Where selecting r itself
     * may give a -0.0 as 0.0 (neg_zero_where) */
    const char *empty = ox_bin(E, t, "Equal", ox_un(E, t, "Size", x), ox_const_num(E, t, TFE_INT64, 0));
    const char *f = where3(E, t, empty, ox_const_num(E, t, dt, NAN), ox_const_num(E, t, dt, 1));
    return ox_bin(E, t, "Mul", r, f);
}
