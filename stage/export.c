/* export.c — export(f, args..., path=, dynamic=): a staged function's forward
 * graph for those arguments written as an ONNX model (IR version 8, opset 17)
 * with util/pb.h; docs/export.md has the op mapping and what cannot go. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config.h"
#include "interp/builtins_args.h"
#include "interp/internal.h"
#include "graph/host.h"
#include "stage/export.h"
#include "stage/host_node.h"
#include "stage/sig.h"
#include "stage/staged.h"
#include "util/pb.h"
#include "util/xalloc.h"

/* ONNX's TensorProto.DataType numbers (onnx/onnx.proto). */
static int onnx_dtype(tfe_dtype dt)
{
    switch ((int)dt) {
    case TFE_FLOAT32: return 1;
    case TFE_INT32: return 6;
    case TFE_INT64: return 7;
    case TFE_BOOL: return 9;
    case TFE_FLOAT16: return 10;
    case TFE_FLOAT64: return 11;
    case TFE_BFLOAT16: return 16;
    default: return 0;
    }
}

/* AttributeProto.AttributeType numbers. */
enum { AT_INT = 2, AT_STRING = 3, AT_INTS = 7 };

typedef struct GraphBuf { Buf g; } GraphBuf; /* an encoded GraphProto */

typedef struct Ex {
    Interp *I;
    Graph *g;
    int *off;            /* per node: its first slot in vn */
    char **vn;           /* per value: its ONNX name (owned) */
    Buf nodes, inits;    /* GraphProto's node and initializer fields, encoded */
    int ntmp;
    const GNode *at;     /* the node being written (errors name its line) */
    int nvar;            /* variables written (var0, var1, ...) */
    char err[300];       /* set: not exportable */
} Ex;

static char *fresh(Ex *E, const char *stem)
{
    char b[64];
    snprintf(b, sizeof b, "%s_%d", stem, E->ntmp++);
    return xstrdup(b);
}

/* Names made while writing one node: freed after it. */
#define MAXTMP 64
typedef struct Tmp { char *s[MAXTMP]; int n; } Tmp;
static const char *keep(Tmp *t, char *s)
{
    if (t->n < MAXTMP) t->s[t->n++] = s;
    return s;
}
static void tmp_free(Tmp *t)
{
    for (int i = 0; i < t->n; i++) free(t->s[i]);
    t->n = 0;
}

/* --- attributes (each an encoded AttributeProto, field 5 of NodeProto) --- */
static void attr_begin(Buf *m, const char *name, int type) { pb_field_string(m, 1, name); pb_field_varint(m, 20, (uint64_t)type); }
static void attr_end(Buf *attrs, Buf *m)
{
    pb_field_bytes(attrs, 5, m->s, m->len);
    free(m->s);
}
static void attr_int(Buf *a, const char *name, int64_t v)
{
    Buf m = {0};
    attr_begin(&m, name, AT_INT);
    pb_field_varint(&m, 3, (uint64_t)v);
    attr_end(a, &m);
}
static void attr_string(Buf *a, const char *name, const char *v)
{
    Buf m = {0};
    attr_begin(&m, name, AT_STRING);
    pb_field_string(&m, 4, v);
    attr_end(a, &m);
}
static void attr_ints(Buf *a, const char *name, const int64_t *v, int n)
{
    Buf m = {0};
    attr_begin(&m, name, AT_INTS);
    for (int i = 0; i < n; i++) pb_field_varint(&m, 8, (uint64_t)v[i]);
    attr_end(a, &m);
}

/* One NodeProto; attrs (encoded attributes) is consumed. */
static void node(Ex *E, const char *op, int nin, const char *const *in, int nout, const char *const *out, Buf *attrs)
{
    Buf m = {0};
    for (int i = 0; i < nin; i++) pb_field_string(&m, 1, in[i] ? in[i] : "");
    for (int i = 0; i < nout; i++) pb_field_string(&m, 2, out[i]);
    char nm[80];
    snprintf(nm, sizeof nm, "%s_%d", op, E->ntmp++);
    pb_field_string(&m, 3, nm);
    pb_field_string(&m, 4, op);
    if (attrs && attrs->len) buf_add(&m, attrs->s, attrs->len);
    if (attrs) { free(attrs->s); *attrs = (Buf){0}; }
    pb_field_bytes(&E->nodes, 1, m.s, m.len);
    free(m.s);
}

/* op(in...) -> a fresh name (kept in t) */
static const char *op1(Ex *E, Tmp *t, const char *op, int nin, const char *const *in, Buf *attrs)
{
    const char *o = keep(t, fresh(E, "t"));
    node(E, op, nin, in, 1, &o, attrs);
    return o;
}
static const char *un(Ex *E, Tmp *t, const char *op, const char *a) { return op1(E, t, op, 1, &a, NULL); }
static const char *bin(Ex *E, Tmp *t, const char *op, const char *a, const char *b)
{
    const char *in[2] = {a, b};
    return op1(E, t, op, 2, in, NULL);
}

/* --- tensors: TensorProto (dims 1, data_type 2, name 8, raw_data 9) --- */
static void tensor_proto(Buf *out, int field, const char *name, tfe_dtype dt, int rank, const int64_t *shape, const void *data,
                         size_t nbytes)
{
    Buf m = {0};
    for (int d = 0; d < rank; d++) pb_field_varint(&m, 1, (uint64_t)shape[d]);
    pb_field_varint(&m, 2, (uint64_t)onnx_dtype(dt));
    if (name) pb_field_string(&m, 8, name);
    pb_field_bytes(&m, 9, data, nbytes);
    pb_field_bytes(out, field, m.s, m.len);
    free(m.s);
}

static int init_tensor(Ex *E, const char *name, tfe_tensor *t)
{
    if (!t || !t->storage) return snprintf(E->err, sizeof E->err, "a value with no data"), -1;
    if (t->storage->device != 0) return snprintf(E->err, sizeof E->err, "a tensor not on cpu:0"), -1;
    tfe_tensor *c = tensor_contiguous(t);
    if (!c) return -1;
    tensor_proto(&E->inits, 5, name, c->dtype, c->rank, c->shape, tensor_data(c),
                 (size_t)tensor_numel(c) * dtype_size(c->dtype));
    tensor_decref(c);
    return 0;
}

/* A constant initializer of n int64s (a 1-D tensor, or a scalar). */
static const char *const_i64(Ex *E, Tmp *t, const int64_t *v, int n, bool scalar)
{
    const char *name = keep(t, fresh(E, "c"));
    int64_t shape[1] = {n};
    tensor_proto(&E->inits, 5, name, TFE_INT64, scalar ? 0 : 1, shape, v, (size_t)n * 8);
    return name;
}

/* A scalar constant of dtype dt. */
static const char *const_num(Ex *E, Tmp *t, tfe_dtype dt, double v)
{
    const char *name = keep(t, fresh(E, "c"));
    tfe_tensor *s = tensor_from_f64(v, dt);
    tensor_proto(&E->inits, 5, name, dt, 0, NULL, tensor_data(s), dtype_size(dt));
    tensor_decref(s);
    return name;
}

static const char *cast(Ex *E, Tmp *t, const char *x, tfe_dtype from, tfe_dtype to)
{
    if (from == to) return x;
    Buf a = {0};
    attr_int(&a, "to", onnx_dtype(to));
    return op1(E, t, "Cast", 1, &x, &a);
}

/* --- the op table's ONNX forms --------------------------------------------------------- */

static const tfe_meta *in_meta(Ex *E, const GNode *n, int i) { return &E->g->nodes[n->in[i].node].meta[n->in[i].out]; }
static const char *in_name(Ex *E, const GNode *n, int i) { return E->vn[E->off[n->in[i].node] + n->in[i].out]; }
static const char *out_name(Ex *E, const GNode *n, int k) { return E->vn[E->off[n - E->g->nodes] + k]; }

static int refuse(Ex *E, const char *why)
{
    snprintf(E->err, sizeof E->err, "%s", why);
    return -1;
}

/* The result under the node's own output name. */
static void finish(Ex *E, const GNode *n, const char *v)
{
    const char *o = out_name(E, n, 0);
    node(E, "Identity", 1, &v, 1, &o, NULL);
}

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
    attr_int(&a, "keepdims", keepdims);
    if (!strcmp(op, "ReduceSum")) {
        const char *in[2] = {x, const_i64(E, t, ax, nax, false)};
        if (!nax) attr_int(&a, "noop_with_empty_axes", 1);
        return op1(E, t, op, 2, in, &a);
    }
    if (!nax) {
        free(a.s);
        return x;
    }
    attr_ints(&a, "axes", ax, nax);
    return op1(E, t, op, 1, &x, &a);
}

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
    default: return NULL;
    }
}

/* NHWC <-> NCHW around ONNX's Conv and pools. */
static const int64_t TO_NCHW[4] = {0, 3, 1, 2}, TO_NHWC[4] = {0, 2, 3, 1}, HWIO_OIHW[4] = {3, 2, 0, 1};
static const char *transpose(Ex *E, Tmp *t, const char *x, const int64_t *perm, int n)
{
    Buf a = {0};
    attr_ints(&a, "perm", perm, n);
    return op1(E, t, "Transpose", 1, &x, &a);
}

static int emit_op(Ex *E, const GNode *n)
{
    Tmp t = {0};
    tfe_op op = n->op;
    const tfe_attrs *at = n->at;
    const tfe_meta *om = &n->meta[0];
    const char *x = n->nin > 0 ? in_name(E, n, 0) : NULL;
    tfe_dtype xd = n->nin > 0 ? in_meta(E, n, 0)->dtype : om->dtype;
    int xr = n->nin > 0 ? in_meta(E, n, 0)->rank : 0;
    const char *r = NULL;
    Buf a = {0};
    const char *why = export_refusal(op);
    if (why) return refuse(E, why); /* (nothing made yet) */

    if (tfe_ops[op].flags & F_CREATE) {
        /* a constant: made now, written as an initializer */
        tfe_tensor *v = NULL;
        if (tfe_execute_eager(op, 0, NULL, at, &v)) return -1;
        int rc = init_tensor(E, out_name(E, n, 0), v);
        tensor_decref(v);
        return rc;
    }
    if (ELEM_UNARY[op]) {
        /* int -> float ops compute in the result's dtype */
        const char *p = op == OP_LOGICAL_NOT ? cast(E, &t, x, xd, TFE_BOOL)
                      : (tfe_ops[op].flags & F_COMPARISON) ? x : cast(E, &t, x, xd, om->dtype);
        r = un(E, &t, ELEM_UNARY[op], p);
    } else if (ELEM_BINARY[op]) {
        tfe_dtype bd = in_meta(E, n, 1)->dtype;
        tfe_dtype cd = om->dtype; /* arithmetic: in the result's dtype */
        if (tfe_ops[op].flags & F_COMPARISON) {
            /* the dtype both meet in: the larger (weak literals take the other's) */
            bool wa = in_meta(E, n, 0)->weak, wb = in_meta(E, n, 1)->weak;
            cd = dtype_promote(xd, wa, bd, wb, NULL);
            if (op == OP_LOGICAL_AND || op == OP_LOGICAL_OR) cd = TFE_BOOL;
            else if (cd == TFE_BOOL && op != OP_EQ) cd = TFE_INT32; /* Less etc. take no bools */
        }
        r = bin(E, &t, ELEM_BINARY[op], cast(E, &t, x, xd, cd), cast(E, &t, in_name(E, n, 1), bd, cd));
    } else {
        switch ((int)op) { /* int: the cases an enum switch would list are in the tables above */
        case OP_NE: {
            tfe_dtype bd = in_meta(E, n, 1)->dtype;
            tfe_dtype cd = dtype_promote(xd, in_meta(E, n, 0)->weak, bd, in_meta(E, n, 1)->weak, NULL);
            r = un(E, &t, "Not", bin(E, &t, "Equal", cast(E, &t, x, xd, cd), cast(E, &t, in_name(E, n, 1), bd, cd)));
            break;
        }
        case OP_FLOORDIV: case OP_MOD: {
            tfe_dtype cd = om->dtype;
            const char *p = cast(E, &t, x, xd, cd), *q = cast(E, &t, in_name(E, n, 1), in_meta(E, n, 1)->dtype, cd);
            if (dtype_is_int(cd)) {
                Buf m = {0};
                attr_int(&m, "fmod", 0); /* Python's: the sign of the divisor */
                const char *in[2] = {p, q};
                const char *md = op1(E, &t, "Mod", 2, in, &m);
                r = op == OP_MOD ? md : bin(E, &t, "Div", bin(E, &t, "Sub", p, md), q);
            } else if (op == OP_FLOORDIV) {
                r = un(E, &t, "Floor", bin(E, &t, "Div", p, q));
            } else {
                /* fmod, then moved to the divisor's sign */
                Buf m = {0};
                attr_int(&m, "fmod", 1);
                const char *in[2] = {p, q};
                const char *f = op1(E, &t, "Mod", 2, in, &m);
                const char *z = const_num(E, &t, cd, 0);
                const char *fix = bin(E, &t, "And", un(E, &t, "Not", bin(E, &t, "Equal", f, z)),
                                      un(E, &t, "Not", bin(E, &t, "Equal", bin(E, &t, "Less", f, z), bin(E, &t, "Less", q, z))));
                const char *w[3] = {fix, bin(E, &t, "Add", f, q), f};
                r = op1(E, &t, "Where", 3, w, NULL);
            }
            break;
        }
        case OP_LOG1P: r = un(E, &t, "Log", bin(E, &t, "Add", cast(E, &t, x, xd, om->dtype), const_num(E, &t, om->dtype, 1))); break;
        case OP_RSQRT: r = un(E, &t, "Reciprocal", un(E, &t, "Sqrt", cast(E, &t, x, xd, om->dtype))); break;
        case OP_GELU: {
            /* the exact (erf) form: x/2 (1 + erf(x/sqrt 2)) (opset 17 has no Gelu) */
            const char *c = cast(E, &t, x, xd, om->dtype);
            const char *e = un(E, &t, "Erf", bin(E, &t, "Mul", c, const_num(E, &t, om->dtype, 0.70710678118654752440)));
            r = bin(E, &t, "Mul", bin(E, &t, "Mul", c, const_num(E, &t, om->dtype, 0.5)),
                    bin(E, &t, "Add", e, const_num(E, &t, om->dtype, 1)));
            break;
        }
        case OP_ISFINITE: r = un(E, &t, "Not", bin(E, &t, "Or", un(E, &t, "IsNaN", x), un(E, &t, "IsInf", x))); break;
        case OP_LOG2: case OP_LOG10: {
            const char *l = un(E, &t, "Log", cast(E, &t, x, xd, om->dtype));
            r = bin(E, &t, "Div", l, const_num(E, &t, om->dtype, op == OP_LOG2 ? 0.69314718055994530942 : 2.30258509299404568402));
            break;
        }
        case OP_SQUARE: r = bin(E, &t, "Mul", x, x); break;
        case OP_CAST: r = cast(E, &t, x, xd, at->dtype); break;
        case OP_WHERE: {
            const char *w[3] = {cast(E, &t, x, xd, TFE_BOOL), cast(E, &t, in_name(E, n, 1), in_meta(E, n, 1)->dtype, om->dtype),
                                cast(E, &t, in_name(E, n, 2), in_meta(E, n, 2)->dtype, om->dtype)};
            r = op1(E, &t, "Where", 3, w, NULL);
            break;
        }
        case OP_CLIP: {
            const char *p = cast(E, &t, x, xd, om->dtype);
            const char *lo = cast(E, &t, in_name(E, n, 1), in_meta(E, n, 1)->dtype, om->dtype);
            const char *hi = cast(E, &t, in_name(E, n, 2), in_meta(E, n, 2)->dtype, om->dtype);
            r = bin(E, &t, "Min", bin(E, &t, "Max", p, lo), hi);
            break;
        }
        case OP_SUM: case OP_MEAN: case OP_PROD: case OP_MAX: case OP_MIN: case OP_LOGSUMEXP: case OP_ANY: case OP_ALL: {
            int64_t ax[TFE_MAX_RANK];
            int nax = red_axes(n, xr, ax);
            static const char *R[TFE_NOPS] = {[OP_SUM] = "ReduceSum", [OP_MEAN] = "ReduceMean", [OP_PROD] = "ReduceProd",
                                              [OP_MAX] = "ReduceMax", [OP_MIN] = "ReduceMin", [OP_LOGSUMEXP] = "ReduceLogSumExp",
                                              [OP_ANY] = "ReduceMax", [OP_ALL] = "ReduceMin"};
            bool logical = op == OP_ANY || op == OP_ALL;
            tfe_dtype cd = logical ? TFE_INT32 : om->dtype;
            r = reduce(E, &t, R[op], cast(E, &t, logical ? cast(E, &t, x, xd, TFE_BOOL) : x, logical ? TFE_BOOL : xd, cd),
                       ax, nax, at->keepdims);
            r = cast(E, &t, r, cd, om->dtype);
            break;
        }
        case OP_VAR: case OP_STD: {
            int64_t ax[TFE_MAX_RANK];
            int nax = red_axes(n, xr, ax);
            const char *c = cast(E, &t, x, xd, om->dtype);
            const char *m = reduce(E, &t, "ReduceMean", c, ax, nax, true);
            const char *d = bin(E, &t, "Sub", c, m);
            const char *s = reduce(E, &t, "ReduceSum", bin(E, &t, "Mul", d, d), ax, nax, at->keepdims);
            /* n = size(x) / size(mean): known at run time for any shape */
            const char *cnt = cast(E, &t, bin(E, &t, "Div", un(E, &t, "Size", c), un(E, &t, "Size", m)), TFE_INT64, om->dtype);
            const char *den = bin(E, &t, "Sub", cnt, const_num(E, &t, om->dtype, (double)at->ints[0]));
            r = bin(E, &t, "Div", s, den);
            if (op == OP_STD) r = un(E, &t, "Sqrt", r);
            break;
        }
        case OP_ARGMAX: case OP_ARGMIN: {
            const char *p = x;
            int64_t axis = 0;
            if (at->naxes < 0 || xr == 0) {
                int64_t m1 = -1;
                const char *in[2] = {x, const_i64(E, &t, &m1, 1, false)};
                p = op1(E, &t, "Reshape", 2, in, NULL);
            } else {
                axis = at->axes[0] < 0 ? at->axes[0] + xr : at->axes[0];
            }
            attr_int(&a, "axis", axis);
            attr_int(&a, "keepdims", at->naxes < 0 ? 0 : at->keepdims);
            r = op1(E, &t, op == OP_ARGMAX ? "ArgMax" : "ArgMin", 1, &p, &a);
            if (at->naxes < 0 && at->keepdims && xr) {
                int64_t ones[TFE_MAX_RANK];
                for (int d = 0; d < xr; d++) ones[d] = 1;
                const char *in[2] = {r, const_i64(E, &t, ones, xr, false)};
                r = op1(E, &t, "Reshape", 2, in, NULL);
            }
            break;
        }
        case OP_SOFTMAX: case OP_LOG_SOFTMAX:
            attr_int(&a, "axis", at->axes[0]);
            r = op1(E, &t, op == OP_SOFTMAX ? "Softmax" : "LogSoftmax", 1, &x, &a);
            break;
        case OP_MATMUL: {
            const char *in[2] = {cast(E, &t, x, xd, om->dtype), cast(E, &t, in_name(E, n, 1), in_meta(E, n, 1)->dtype, om->dtype)};
            r = op1(E, &t, "MatMul", 2, in, NULL);
            break;
        }
        case OP_TRIL: case OP_TRIU: {
            attr_int(&a, "upper", op == OP_TRIU);
            const char *in[2] = {x, const_i64(E, &t, &at->ints[0], 1, true)};
            r = op1(E, &t, "Trilu", 2, in, &a);
            break;
        }
        case OP_DET: r = un(E, &t, "Det", x); break;
        case OP_RESHAPE: {
            bool neg = false;
            for (int i = 0; i < at->nints; i++) neg |= at->ints[i] < 0;
            attr_int(&a, "allowzero", !neg); /* a 0 is a size 0, as in tfe (not "copy") */
            const char *in[2] = {x, const_i64(E, &t, at->ints, at->nints, false)};
            r = op1(E, &t, "Reshape", 2, in, &a);
            break;
        }
        case OP_TRANSPOSE:
            if (at->nints) attr_ints(&a, "perm", at->ints, at->nints);
            r = op1(E, &t, "Transpose", 1, &x, &a);
            break;
        case OP_EXPAND_DIMS: {
            int64_t ax = at->axes[0] < 0 ? at->axes[0] + om->rank : at->axes[0];
            const char *in[2] = {x, const_i64(E, &t, &ax, 1, false)};
            r = op1(E, &t, "Unsqueeze", 2, in, NULL);
            break;
        }
        case OP_SQUEEZE: {
            int64_t ax[TFE_MAX_RANK] = {0};
            int k = 0;
            if (at->naxes < 0) {
                for (int d = 0; d < xr; d++)
                    if (in_meta(E, n, 0)->shape[d] == 1) ax[k++] = d;
            } else {
                k = red_axes(n, xr, ax);
            }
            const char *in[2] = {x, const_i64(E, &t, ax, k, false)};
            r = k ? op1(E, &t, "Squeeze", 2, in, NULL) : x;
            break;
        }
        case OP_BROADCAST_TO: {
            const char *in[2] = {x, const_i64(E, &t, at->ints, at->nints, false)};
            r = op1(E, &t, "Expand", 2, in, NULL);
            break;
        }
        case OP_SLICE: {
            int64_t st[TFE_MAX_RANK] = {0}, en[TFE_MAX_RANK] = {0}, ax[TFE_MAX_RANK] = {0}, sp[TFE_MAX_RANK] = {0};
            for (int d = 0; d < xr; d++) {
                st[d] = at->ints[3 * d];
                en[d] = at->ints[3 * d + 1];
                sp[d] = at->ints[3 * d + 2];
                ax[d] = d;
                if (sp[d] < 0 && en[d] < 0) en[d] = INT64_MIN; /* before the first: not "from the end" */
            }
            const char *in[5] = {x, const_i64(E, &t, st, xr, false), const_i64(E, &t, en, xr, false),
                                 const_i64(E, &t, ax, xr, false), const_i64(E, &t, sp, xr, false)};
            r = xr ? op1(E, &t, "Slice", 5, in, NULL) : x;
            if (at->naxes > 0) {
                int64_t dax[TFE_MAX_RANK];
                for (int i = 0; i < at->naxes; i++) dax[i] = at->axes[i];
                const char *sq[2] = {r, const_i64(E, &t, dax, at->naxes, false)};
                r = op1(E, &t, "Squeeze", 2, sq, NULL);
            }
            break;
        }
        case OP_CONCAT: case OP_STACK: {
            const char **in = xcalloc((size_t)n->nin + 1, sizeof *in);
            int64_t axis = at->axes[0] < 0 ? at->axes[0] + om->rank : at->axes[0];
            for (int i = 0; i < n->nin; i++) {
                in[i] = cast(E, &t, in_name(E, n, i), in_meta(E, n, i)->dtype, om->dtype);
                if (op == OP_STACK) {
                    const char *u[2] = {in[i], const_i64(E, &t, &axis, 1, false)};
                    in[i] = op1(E, &t, "Unsqueeze", 2, u, NULL);
                }
            }
            attr_int(&a, "axis", axis);
            r = op1(E, &t, "Concat", n->nin, in, &a);
            free(in);
            break;
        }
        case OP_SPLIT: {
            const char **outs = xcalloc((size_t)n->nout, sizeof *outs);
            for (int k = 0; k < n->nout; k++) outs[k] = out_name(E, n, k);
            attr_int(&a, "axis", at->axes[0] < 0 ? at->axes[0] + xr : at->axes[0]);
            const char *in[2] = {x, const_i64(E, &t, at->ints, at->nints, false)};
            node(E, "Split", 2, in, n->nout, outs, &a);
            free(outs);
            tmp_free(&t);
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
                const char *u[2] = {x, const_i64(E, &t, ax, k - xr, false)};
                p = op1(E, &t, "Unsqueeze", 2, u, NULL);
            }
            const char *in[2] = {p, const_i64(E, &t, reps, k, false)};
            r = op1(E, &t, "Tile", 2, in, NULL);
            break;
        }
        case OP_GATHER: {
            attr_int(&a, "axis", at->axes[0]);
            const char *in[2] = {x, in_name(E, n, 1)};
            r = op1(E, &t, "Gather", 2, in, &a);
            break;
        }
        case OP_ONE_HOT: {
            int64_t depth = at->ints[0];
            const char *vals = keep(&t, fresh(E, "c"));
            tfe_tensor *v = tensor_zeros(at->dtype, 1, (int64_t[]){2});
            tfe_tensor *one = tensor_from_f64(1, at->dtype);
            memcpy(tensor_data(v) + dtype_size(at->dtype), tensor_data(one), dtype_size(at->dtype));
            tensor_proto(&E->inits, 5, vals, at->dtype, 1, v->shape, tensor_data(v), 2 * dtype_size(at->dtype));
            tensor_decref(v);
            tensor_decref(one);
            attr_int(&a, "axis", -1);
            const char *in[3] = {x, const_i64(E, &t, &depth, 1, true), vals};
            r = op1(E, &t, "OneHot", 3, in, &a);
            break;
        }
        case OP_CONV2D: {
            const char *xn = transpose(E, &t, x, TO_NCHW, 4);
            const char *wn = transpose(E, &t, in_name(E, n, 1), HWIO_OIHW, 4);
            attr_ints(&a, "strides", &at->ints[0], 2);
            attr_ints(&a, "dilations", &at->ints[2], 2);
            const tfe_meta *mw = in_meta(E, n, 1);
            bool known = xr == 4 && in_meta(E, n, 0)->shape[1] >= 0 && in_meta(E, n, 0)->shape[2] >= 0;
            if (at->ints[4] && known) {
                /* TensorFlow's "same", the extra cell at the end, as explicit pads
                 * (onnxruntime's SAME_UPPER refuses dilations) */
                int64_t pads[4];
                for (int d = 0; d < 2; d++) {
                    int64_t in = in_meta(E, n, 0)->shape[1 + d], st = at->ints[d], dil = at->ints[2 + d];
                    int64_t out = (in + st - 1) / st, total = (out - 1) * st + (mw->shape[d] - 1) * dil + 1 - in;
                    if (total < 0) total = 0;
                    pads[d] = total / 2;
                    pads[2 + d] = total - total / 2;
                }
                attr_ints(&a, "pads", pads, 4);
            } else if (at->ints[4] && (at->ints[2] != 1 || at->ints[3] != 1)) {
                return tmp_free(&t), free(a.s), refuse(E, "a dilated \"same\" convolution of an image of unknown size");
            } else {
                attr_string(&a, "auto_pad", at->ints[4] ? "SAME_UPPER" : "VALID"); /* TensorFlow's "same": extra at the end */
            }
            const char *in[2] = {xn, wn};
            r = transpose(E, &t, op1(E, &t, "Conv", 2, in, &a), TO_NHWC, 4);
            break;
        }
        case OP_MAX_POOL2D: case OP_AVG_POOL2D: {
            const char *xn = transpose(E, &t, x, TO_NCHW, 4);
            attr_ints(&a, "kernel_shape", &at->ints[0], 2);
            attr_ints(&a, "strides", &at->ints[2], 2);
            attr_string(&a, "auto_pad", at->ints[4] ? "SAME_UPPER" : "VALID");
            if (op == OP_AVG_POOL2D) attr_int(&a, "count_include_pad", 0);
            r = transpose(E, &t, op1(E, &t, op == OP_MAX_POOL2D ? "MaxPool" : "AveragePool", 1, &xn, &a), TO_NHWC, 4);
            break;
        }
        case OP_CUMSUM: {
            attr_int(&a, "reverse", at->nints > 0 && at->ints[0] == 1);
            int64_t axis = at->axes[0];
            const char *in[2] = {cast(E, &t, x, xd, om->dtype), const_i64(E, &t, &axis, 1, true)};
            r = op1(E, &t, "CumSum", 2, in, &a);
            break;
        }
        case OP_TAKE_ALONG_AXIS: {
            attr_int(&a, "axis", at->axes[0]);
            const char *in[2] = {x, in_name(E, n, 1)};
            r = op1(E, &t, "GatherElements", 2, in, &a);
            break;
        }
        case OP_PUT_ALONG_AXIS_ADD: {
            attr_int(&a, "axis", at->axes[0]);
            attr_string(&a, "reduction", "add");
            const char *in[3] = {x, in_name(E, n, 1), cast(E, &t, in_name(E, n, 2), in_meta(E, n, 2)->dtype, om->dtype)};
            r = op1(E, &t, "ScatterElements", 3, in, &a);
            break;
        }
        case OP_ISCLOSE: {
            /* the kernel's rule: |a - b| <= atol + rtol |b| where both are finite,
             * a == b where not (and NaN == NaN with equal_nan), in float32 or float64 */
            tfe_dtype bd = in_meta(E, n, 1)->dtype;
            tfe_dtype cd = dtype_promote(xd, in_meta(E, n, 0)->weak, bd, in_meta(E, n, 1)->weak, NULL) == TFE_FLOAT32
                               ? TFE_FLOAT32 : TFE_FLOAT64;
            const char *p = cast(E, &t, x, xd, cd), *q = cast(E, &t, in_name(E, n, 1), bd, cd);
            const char *fp = un(E, &t, "Not", bin(E, &t, "Or", un(E, &t, "IsNaN", p), un(E, &t, "IsInf", p)));
            const char *fq = un(E, &t, "Not", bin(E, &t, "Or", un(E, &t, "IsNaN", q), un(E, &t, "IsInf", q)));
            const char *tol = bin(E, &t, "Add", const_num(E, &t, cd, at->f[1]),
                                  bin(E, &t, "Mul", const_num(E, &t, cd, at->f[0]), un(E, &t, "Abs", q)));
            const char *close = bin(E, &t, "LessOrEqual", un(E, &t, "Abs", bin(E, &t, "Sub", p, q)), tol);
            const char *other = bin(E, &t, "Equal", p, q);
            if (at->ints[0]) other = bin(E, &t, "Or", other, bin(E, &t, "And", un(E, &t, "IsNaN", p), un(E, &t, "IsNaN", q)));
            const char *fin = bin(E, &t, "And", fp, fq); /* (onnxruntime has no Where of bools) */
            r = bin(E, &t, "Or", bin(E, &t, "And", fin, close), bin(E, &t, "And", un(E, &t, "Not", fin), other));
            break;
        }
        case OP_SCATTER: case OP_SCATTER_ADD: {
            /* ScatterND along axis 0 of x with the axis brought to the front;
             * v broadcast to x's shape with indices' dims for the axis, and
             * brought to the same order; negative indices wrap first */
            const tfe_meta *mx = in_meta(E, n, 0), *mi = in_meta(E, n, 1);
            int axis = at->axes[0] < 0 ? (int)at->axes[0] + xr : (int)at->axes[0];
            int gr = xr - 1 + mi->rank, k = 0;
            if (gr > TFE_MAX_RANK) return tmp_free(&t), free(a.s), refuse(E, "a scatter of too high a rank");
            int64_t gshape[TFE_MAX_RANK], perm[TFE_MAX_RANK], vperm[TFE_MAX_RANK], inv[TFE_MAX_RANK];
            for (int d = 0; d < axis; d++) gshape[k++] = mx->shape[d];
            for (int d = 0; d < mi->rank; d++) gshape[k++] = mi->shape[d];
            for (int d = axis + 1; d < xr; d++) gshape[k++] = mx->shape[d];
            for (int d = 0; d < gr; d++)
                if (gshape[d] < 0) return tmp_free(&t), free(a.s), refuse(E, "a scatter on a dim of unknown size");
            k = 0;
            perm[k++] = axis;
            for (int d = 0; d < xr; d++)
                if (d != axis) perm[k++] = d;
            for (int d = 0; d < xr; d++) inv[perm[d]] = d;
            k = 0;
            for (int d = 0; d < mi->rank; d++) vperm[k++] = axis + d;
            for (int d = 0; d < gr; d++)
                if (d < axis || d >= axis + mi->rank) vperm[k++] = d;
            const char *idx = cast(E, &t, in_name(E, n, 1), mi->dtype, TFE_INT64);
            const char *z = const_num(E, &t, TFE_INT64, 0);
            const char *wr[3] = {bin(E, &t, "Less", idx, z), bin(E, &t, "Add", idx, const_num(E, &t, TFE_INT64, (double)mx->shape[axis])), idx};
            idx = op1(E, &t, "Where", 3, wr, NULL);
            int64_t last = -1;
            const char *u[2] = {idx, const_i64(E, &t, &last, 1, false)};
            idx = op1(E, &t, "Unsqueeze", 2, u, NULL);
            const char *ex[2] = {cast(E, &t, in_name(E, n, 2), in_meta(E, n, 2)->dtype, om->dtype), const_i64(E, &t, gshape, gr, false)};
            const char *v = transpose(E, &t, op1(E, &t, "Expand", 2, ex, NULL), vperm, gr);
            if (op == OP_SCATTER_ADD) attr_string(&a, "reduction", "add");
            const char *in[3] = {transpose(E, &t, x, perm, xr), idx, v};
            r = transpose(E, &t, op1(E, &t, "ScatterND", 3, in, &a), inv, xr);
            break;
        }
        case OP_BOOL_MASK: {
            /* Compress of x with its masked axes made one */
            const tfe_meta *mx = in_meta(E, n, 0), *mm = in_meta(E, n, 1);
            int64_t shp[TFE_MAX_RANK + 1], k = 0, m1 = -1;
            shp[k++] = -1;
            for (int d = mm->rank; d < xr; d++) {
                if (mx->shape[d] < 0) return tmp_free(&t), free(a.s), refuse(E, "a mask of a tensor with unknown trailing dims");
                shp[k++] = mx->shape[d];
            }
            const char *rx[2] = {x, const_i64(E, &t, shp, (int)k, false)};
            const char *rm[2] = {cast(E, &t, in_name(E, n, 1), mm->dtype, TFE_BOOL), const_i64(E, &t, &m1, 1, false)};
            attr_int(&a, "axis", 0);
            const char *in[2] = {op1(E, &t, "Reshape", 2, rx, NULL), op1(E, &t, "Reshape", 2, rm, NULL)};
            r = op1(E, &t, "Compress", 2, in, &a);
            break;
        }
        case OP_SET_SLICE: {
            /* the flat positions of the slice, computed now (x's shape is known),
             * are where ScatterND writes v broadcast to the slice's shape */
            const tfe_meta *mx = in_meta(E, n, 0);
            for (int d = 0; d < xr; d++)
                if (mx->shape[d] < 0) return tmp_free(&t), free(a.s), refuse(E, "a slice assignment into a dim of unknown size");
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
                const char *ind = keep(&t, fresh(E, "c"));
                int64_t ishape[TFE_MAX_RANK + 1];
                for (int d = 0; d < slc->rank; d++) ishape[d] = slc->shape[d];
                ishape[slc->rank] = 1;
                tensor_proto(&E->inits, 5, ind, TFE_INT64, slc->rank + 1, ishape, tensor_data(slc), (size_t)tensor_numel(slc) * 8);
                int64_t m1 = -1;
                const char *fx[2] = {x, const_i64(E, &t, &m1, 1, false)};
                const char *ex[2] = {cast(E, &t, in_name(E, n, 1), in_meta(E, n, 1)->dtype, om->dtype),
                                     const_i64(E, &t, slc->shape, slc->rank, false)};
                /* ScatterND on the flat x: indices (slice shape, 1), updates the slice's shape */
                const char *in[3] = {op1(E, &t, "Reshape", 2, fx, NULL), ind, op1(E, &t, "Expand", 2, ex, NULL)};
                const char *back[2] = {op1(E, &t, "ScatterND", 3, in, NULL), const_i64(E, &t, mx->shape, xr, false)};
                r = op1(E, &t, "Reshape", 2, back, NULL);
            }
            tensor_decref(pos);
            tensor_decref(grid);
            tensor_decref(sl);
            tensor_decref(slc);
            if (!slc) return tmp_free(&t), free(a.s), -1;
            break;
        }
        default:
            return tmp_free(&t), free(a.s), refuse(E, "no ONNX form written for it");
        }
    }
    free(a.s);
    r = cast(E, &t, r, (op == OP_CAST) ? at->dtype : om->dtype, om->dtype);
    finish(E, n, r);
    tmp_free(&t);
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
    case OP_LOG2: case OP_LOG10: case OP_SQUARE: case OP_CAST: case OP_WHERE: case OP_CLIP: case OP_SUM: case OP_MEAN:
    case OP_PROD: case OP_MAX: case OP_MIN: case OP_LOGSUMEXP: case OP_ANY: case OP_ALL: case OP_VAR: case OP_STD:
    case OP_ARGMAX: case OP_ARGMIN: case OP_SOFTMAX: case OP_LOG_SOFTMAX: case OP_MATMUL: case OP_TRIL: case OP_TRIU:
    case OP_DET: case OP_RESHAPE: case OP_TRANSPOSE: case OP_EXPAND_DIMS: case OP_SQUEEZE: case OP_BROADCAST_TO:
    case OP_SLICE: case OP_CONCAT: case OP_STACK: case OP_SPLIT: case OP_TILE: case OP_GATHER: case OP_ONE_HOT:
    case OP_CONV2D: case OP_MAX_POOL2D: case OP_AVG_POOL2D: case OP_CUMSUM: case OP_TAKE_ALONG_AXIS:
    case OP_PUT_ALONG_AXIS_ADD: case OP_ISCLOSE: case OP_SCATTER: case OP_SCATTER_ADD: case OP_BOOL_MASK: case OP_SET_SLICE:
        return true;
    default: return false;
    }
}

/* --- the model ------------------------------------------------------------------------- */

/* ValueInfoProto: name, tensor type, dims (symbolic where unknown or named). */
static void value_info(Buf *out, int field, const char *name, const tfe_meta *m, char **dimnames)
{
    Buf shape = {0}, tt = {0}, ty = {0}, vi = {0};
    for (int d = 0; d < m->rank; d++) {
        Buf dim = {0};
        if (dimnames && dimnames[d]) pb_field_string(&dim, 2, dimnames[d]);
        else if (m->shape[d] >= 0) pb_field_varint(&dim, 1, (uint64_t)m->shape[d]);
        pb_field_bytes(&shape, 1, dim.s, dim.len);
        free(dim.s);
    }
    pb_field_varint(&tt, 1, (uint64_t)onnx_dtype(m->dtype));
    pb_field_bytes(&tt, 2, shape.s, shape.len);
    pb_field_bytes(&ty, 1, tt.s, tt.len);
    pb_field_string(&vi, 1, name);
    pb_field_bytes(&vi, 2, ty.s, ty.len);
    pb_field_bytes(out, field, vi.s, vi.len);
    free(shape.s);
    free(tt.s);
    free(ty.s);
    free(vi.s);
}

/* "x[1]" -> "x_1": ONNX names are free text, but tools show them as identifiers. */
static char *clean_name(const char *s)
{
    char *c = xstrdup(s ? s : "input");
    char *p = strstr(c, " (");
    if (p) *p = 0;
    size_t k = 0;
    for (char *q = c; *q; q++) {
        if ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '_') c[k++] = *q;
        else if (k && c[k - 1] != '_') c[k++] = '_';
    }
    while (k && c[k - 1] == '_') k--;
    c[k] = 0;
    return c;
}

static const char *kind_word(const GNode *n)
{
    if (n->kind == G_HOST) return "an effect: a call back into the interpreter (print, an assignment, a @host function)";
    if (n->kind == G_COND) return "an if that depends on a tensor (cond)";
    if (n->kind == G_WHILE) return "a loop that depends on a tensor (while)";
    return "this node";
}

static int emit_region(Ex *E, const ExportSpec *sp, int r, GraphBuf *out);

static int emit_node(Ex *E, const ExportSpec *sp, Buf *inputs, int id);

/* An encoded If of c: then the region r, else the values vals unchanged;
 * its outputs outs. */
static int emit_if(Ex *E, const ExportSpec *sp, const char *c, int r, int nv, const char *const *vals,
                   const tfe_meta *metas, int nout, const char *const *outs)
{
    GraphBuf then = {{0}};
    int rc = emit_region(E, sp, r, &then);
    if (rc) return rc;
    /* the else branch: Identities of the carried values */
    Buf saved = E->nodes, eo = {0}, els = {0}, a = {0}, m = {0};
    E->nodes = (Buf){0};
    for (int k = 0; k < nv; k++) {
        char *o = fresh(E, "same");
        node(E, "Identity", 1, &vals[k], 1, (const char *const *)&o, NULL);
        tfe_meta mm = metas[k];
        for (int d = 0; d < mm.rank; d++) mm.shape[d] = -1; /* a loop may change sizes */
        value_info(&eo, 12, o, &mm, NULL);
        free(o);
    }
    buf_add(&els, E->nodes.s ? E->nodes.s : "", E->nodes.len);
    pb_field_string(&els, 2, "unchanged");
    if (eo.len) buf_add(&els, eo.s, eo.len);
    free(E->nodes.s);
    E->nodes = saved;
    attr_begin(&m, "then_branch", 5 /* GRAPH */);
    pb_field_bytes(&m, 6, then.g.s, then.g.len);
    attr_end(&a, &m);
    m = (Buf){0};
    attr_begin(&m, "else_branch", 5);
    pb_field_bytes(&m, 6, els.s, els.len);
    attr_end(&a, &m);
    node(E, "If", 1, &c, nout, outs, &a);
    free(then.g.s);
    free(els.s);
    free(eo.s);
    return 0;
}

/* A while on a tensor: an ONNX Loop whose body tests tfe's condition first
 * and runs tfe's body under an If of it, passing the values on unchanged
 * when it is false (ONNX tests the loop's condition before each pass, tfe
 * computes it from the carried values: one extra pass does nothing). */
static int emit_while(Ex *E, const ExportSpec *sp, const GNode *n)
{
    const Graph *g = E->g;
    const GRegion *rc = &g->regions[n->regions[0]];
    int nc = rc->nparams;
    if (n->nout != nc) return refuse(E, "a loop whose iterations a gradient keeps");
    Tmp t = {0};
    const char **pn = xcalloc((size_t)nc + 1, sizeof *pn), **ws = xcalloc((size_t)nc + 1, sizeof *ws);
    tfe_meta *pm = xcalloc((size_t)nc + 1, sizeof *pm);
    for (int k = 0; k < nc; k++) {
        int id = rc->params[k];
        if (!E->vn[E->off[id]]) {
            char b[64];
            snprintf(b, sizeof b, "v%d_0", id);
            E->vn[E->off[id]] = xstrdup(b);
        }
        pn[k] = E->vn[E->off[id]];
        pm[k] = g->nodes[id].meta[0];
        ws[k] = keep(&t, fresh(E, "carried"));
    }
    Buf saved = E->nodes, body = {0}, bin_ = {0}, bout = {0};
    E->nodes = (Buf){0};
    int rcode = 0;
    for (int i = 0; i < rc->n && !rcode; i++) rcode = emit_node(E, sp, NULL, rc->nodes[i]);
    const char *cond_out = keep(&t, fresh(E, "go_on"));
    if (!rcode) {
        GRef co = rc->outs[0];
        const char *c = cast(E, &t, E->vn[E->off[co.node] + co.out], g->nodes[co.node].meta[co.out].dtype, TFE_BOOL);
        rcode = emit_if(E, sp, c, n->regions[1], nc, pn, pm, nc, ws);
        if (!rcode) node(E, "Identity", 1, &c, 1, &cond_out, NULL);
    }
    if (!rcode) {
        tfe_meta scalar_i64 = {.dtype = TFE_INT64}, scalar_b = {.dtype = TFE_BOOL};
        value_info(&bin_, 11, keep(&t, fresh(E, "iteration")), &scalar_i64, NULL);
        value_info(&bin_, 11, keep(&t, fresh(E, "go_on_in")), &scalar_b, NULL);
        value_info(&bout, 12, cond_out, &scalar_b, NULL);
        for (int k = 0; k < nc; k++) {
            tfe_meta mm = pm[k];
            for (int d = 0; d < mm.rank; d++) mm.shape[d] = -1;
            value_info(&bin_, 11, pn[k], &mm, NULL);
            value_info(&bout, 12, ws[k], &mm, NULL);
        }
        buf_add(&body, E->nodes.s ? E->nodes.s : "", E->nodes.len);
        char nm[64];
        snprintf(nm, sizeof nm, "loop%d", (int)(n - g->nodes));
        pb_field_string(&body, 2, nm);
        buf_add(&body, bin_.s, bin_.len);
        buf_add(&body, bout.s, bout.len);
    }
    free(E->nodes.s);
    E->nodes = saved;
    if (!rcode) {
        E->at = n;
        Buf a = {0}, m = {0};
        attr_begin(&m, "body", 5 /* GRAPH */);
        pb_field_bytes(&m, 6, body.s, body.len);
        attr_end(&a, &m);
        const char **in = xcalloc((size_t)nc + 2, sizeof *in), **outs = xcalloc((size_t)nc + 1, sizeof *outs);
        in[0] = "";
        in[1] = const_num(E, &t, TFE_BOOL, 1);
        for (int k = 0; k < nc; k++) in[2 + k] = in_name(E, n, k);
        for (int k = 0; k < nc; k++) outs[k] = out_name(E, n, k);
        node(E, "Loop", nc + 2, in, nc, outs, &a);
        free(in);
        free(outs);
    }
    free(body.s);
    free(bin_.s);
    free(bout.s);
    free(pn);
    free(ws);
    free(pm);
    tmp_free(&t);
    return rcode;
}

/* One node of a region into E->nodes (a top-level input's ValueInfo into inputs). */
static int emit_node(Ex *E, const ExportSpec *sp, Buf *inputs, int id)
{
    GNode *n = &E->g->nodes[id];
    E->at = n;
    for (int k = 0; k < n->nout; k++)
        if (!E->vn[E->off[id] + k]) {
            char b[64];
            snprintf(b, sizeof b, "v%d_%d", id, k);
            E->vn[E->off[id] + k] = xstrdup(b);
        }
    const char *nm = E->vn[E->off[id]];
    switch ((int)n->kind) {
    case G_INPUT: {
        int ix = n->input_index;
        if (ix >= sp->nargs || sp->baked[ix]) return init_tensor(E, nm, sp->values[ix]);
        char *c = clean_name(sp->in_names[ix]);
        /* the input's own name; an output that is an input goes through an Identity */
        if (strcmp(nm, c)) node(E, "Identity", 1, (const char *const *)&c, 1, &nm, NULL);
        value_info(inputs, 11, c, &n->meta[0], sp->dims[ix]);
        free(c);
        return 0;
    }
    case G_CONST: return init_tensor(E, nm, n->value);
    case G_VAR_READ: {
        char b[64];
        snprintf(b, sizeof b, "var%d", E->nvar++);
        if (init_tensor(E, b, variable_peek(n->host->obj))) return -1;
        const char *in = b;
        node(E, "Identity", 1, &in, 1, &nm, NULL);
        return 0;
    }
    case G_OP:
        if (tfe_ops[n->op].flags & F_RANDOM) return refuse(E, "a random draw");
        return emit_op(E, n);
    case G_COND: {
        /* If: each branch a subgraph reading the values around it by name */
        GraphBuf br[2] = {{{0}}, {{0}}};
        int rc = emit_region(E, sp, n->regions[0], &br[0]);
        if (!rc) rc = emit_region(E, sp, n->regions[1], &br[1]);
        E->at = n;
        if (!rc) {
            Tmp t = {0};
            Buf a = {0};
            static const char *names[2] = {"then_branch", "else_branch"};
            for (int b = 0; b < 2; b++) {
                Buf m = {0};
                attr_begin(&m, names[b], 5 /* GRAPH */);
                pb_field_bytes(&m, 6, br[b].g.s, br[b].g.len);
                attr_end(&a, &m);
            }
            const char *c = cast(E, &t, in_name(E, n, 0), in_meta(E, n, 0)->dtype, TFE_BOOL);
            const char **outs = xcalloc((size_t)n->nout + 1, sizeof *outs);
            for (int k = 0; k < n->nout; k++) outs[k] = out_name(E, n, k);
            node(E, "If", 1, &c, n->nout, outs, &a);
            free(outs);
            tmp_free(&t);
        }
        for (int b = 0; b < 2; b++) free(br[b].g.s);
        return rc;
    }
    case G_WHILE: return emit_while(E, sp, n);
    case G_PARAM: return 0; /* named by its loop (emit_while) */
    case G_FUSED: return refuse(E, "a fused group (export reads the graph before fusion)");
    default: return refuse(E, kind_word(n));
    }
}

/* A region as a GraphProto (the body of an If): its nodes, then its results
 * as outputs under fresh names (a result may be a value of the graph around it). */
static int emit_region(Ex *E, const ExportSpec *sp, int r, GraphBuf *out)
{
    const GRegion *R = &E->g->regions[r];
    Buf saved = E->nodes;
    E->nodes = (Buf){0};
    int rc = 0;
    for (int i = 0; i < R->n && !rc; i++) rc = emit_node(E, sp, NULL, R->nodes[i]);
    Buf outputs = {0};
    for (int k = 0; k < R->nouts && !rc; k++) {
        GRef o = R->outs[k];
        const char *have = E->vn[E->off[o.node] + o.out];
        char *nm = fresh(E, "branch_out");
        node(E, "Identity", 1, &have, 1, (const char *const *)&nm, NULL);
        value_info(&outputs, 12, nm, &E->g->nodes[o.node].meta[o.out], NULL);
        free(nm);
    }
    if (!rc) {
        char nm[64];
        snprintf(nm, sizeof nm, "region%d", r);
        buf_add(&out->g, E->nodes.s ? E->nodes.s : "", E->nodes.len);
        pb_field_string(&out->g, 2, nm);
        if (outputs.len) buf_add(&out->g, outputs.s, outputs.len);
    }
    free(outputs.s);
    free(E->nodes.s);
    E->nodes = saved;
    return rc;
}

/* What a branch reads from around it is live (regions read by name, not through in[]). */
static void mark_reads(const Graph *g, int r, bool *live)
{
    const GRegion *R = &g->regions[r];
    for (int k = 0; k < R->nouts; k++) live[R->outs[k].node] = true;
    for (int i = 0; i < R->n; i++) {
        const GNode *n = &g->nodes[R->nodes[i]];
        for (int k = 0; k < n->nin; k++) live[n->in[k].node] = true;
        if (n->kind == G_COND || n->kind == G_WHILE) {
            mark_reads(g, n->regions[0], live);
            mark_reads(g, n->regions[1], live);
        }
    }
}

int export_graph(Interp *I, Graph *g, const ExportSpec *sp, Buf *model)
{
    Ex E = {.I = I, .g = g};
    E.off = xcalloc((size_t)g->n + 1, sizeof *E.off);
    int nv = 0;
    for (int i = 0; i < g->n; i++) {
        E.off[i] = nv;
        nv += g->nodes[i].nout;
    }
    E.vn = xcalloc((size_t)nv + 1, sizeof *E.vn);
    Buf inputs = {0}, outputs = {0};
    int rc = 0;
    const GRegion *top = &g->regions[0];
    /* Is each value a graph output? (outputs are named after the results) */
    for (int i = 0; i < top->nouts && !rc; i++) {
        GRef o = top->outs[i];
        int slot = E.off[o.node] + o.out;
        if (!E.vn[slot]) E.vn[slot] = xstrdup(sp->out_names[i]);
    }
    /* the graph as traced keeps what the optimizer's dce would drop: only
     * what the results need goes to the file (effects are refused anyway) */
    bool *live = xcalloc((size_t)g->n + 1, sizeof *live);
    for (int i = 0; i < top->nouts; i++) live[top->outs[i].node] = true;
    for (int ri = top->n - 1; ri >= 0; ri--) {
        const GNode *n = &g->nodes[top->nodes[ri]];
        if (n->kind == G_HOST || n->kind == G_COND || n->kind == G_WHILE) live[top->nodes[ri]] = true;
        if (live[top->nodes[ri]]) {
            for (int k = 0; k < n->nin; k++) live[n->in[k].node] = true;
            if (n->kind == G_COND || n->kind == G_WHILE) {
                mark_reads(g, n->regions[0], live);
                mark_reads(g, n->regions[1], live);
            }
        }
    }
    for (int ri = 0; ri < top->n && !rc; ri++) {
        int id = top->nodes[ri];
        GNode *n = &g->nodes[id];
        bool model_input = n->kind == G_INPUT && n->input_index < sp->nargs && !sp->baked[n->input_index];
        if (!live[id] && !model_input) continue; /* (every argument stays an input of the model) */
        rc = emit_node(&E, sp, &inputs, id);
    }
    if (rc) {
        const GNode *n = E.at;
        Buf w = {0};
        if (n->kind == G_HOST && graph_host.put_operation) {
            graph_host.put_operation(&w, g, n, true); /* "host print" */
            buf_add(&w, "", 1);
        }
        const char *what = n->kind == G_OP ? tfe_ops[n->op].name : n->kind == G_HOST ? (w.s ? w.s + 5 : "host call")
                         : n->kind == G_COND ? "cond" : n->kind == G_WHILE ? "while" : "node";
        if (!E.err[0]) snprintf(E.err, sizeof E.err, "%s", tfe_error_msg());
        raise_at(I, n->loc, "export(): not exportable: %s at line %d (%s)", what, n->loc.line, E.err);
        free(w.s);
    } else {
        /* a result downstream of x[mask] has the size the data gives it, not
         * the traced one: its dims are left unknown */
        bool *dyn = xcalloc((size_t)g->n + 1, sizeof *dyn);
        for (int ri = 0; ri < top->n; ri++) {
            const GNode *n = &g->nodes[top->nodes[ri]];
            bool d = n->kind == G_OP && (tfe_ops[n->op].flags & F_SELFOUT);
            for (int k = 0; k < n->nin; k++) d |= dyn[n->in[k].node];
            dyn[top->nodes[ri]] = d;
        }
        for (int i = 0; i < top->nouts; i++) {
            GRef o = top->outs[i];
            tfe_meta m = g->nodes[o.node].meta[o.out];
            for (int d = 0; dyn[o.node] && d < m.rank; d++) m.shape[d] = -1;
            value_info(&outputs, 12, sp->out_names[i], &m, NULL);
            /* a result that is a value named otherwise (an input, twice the same) */
            const char *have = E.vn[E.off[o.node] + o.out];
            if (strcmp(have, sp->out_names[i])) node(&E, "Identity", 1, &have, 1, (const char *const *)&sp->out_names[i], NULL);
        }
        free(dyn);
        Buf gr = {0};
        buf_add(&gr, E.nodes.s ? E.nodes.s : "", E.nodes.len);
        pb_field_string(&gr, 2, g->name ? g->name : "tfe");
        if (E.inits.len) buf_add(&gr, E.inits.s, E.inits.len);
        if (inputs.len) buf_add(&gr, inputs.s, inputs.len);
        if (outputs.len) buf_add(&gr, outputs.s, outputs.len);
        pb_field_varint(model, 1, 8); /* ir_version */
        pb_field_string(model, 2, "tfe");
        pb_field_string(model, 3, PACKAGE_VERSION);
        pb_field_bytes(model, 7, gr.s, gr.len);
        Buf ops = {0};
        pb_field_string(&ops, 1, "");
        pb_field_varint(&ops, 2, 17);
        pb_field_bytes(model, 8, ops.s, ops.len);
        free(ops.s);
        free(gr.s);
    }
    for (int i = 0; i < nv; i++) free(E.vn[i]);
    free(live);
    free(E.vn);
    free(E.off);
    free(E.nodes.s);
    free(E.inits.s);
    free(inputs.s);
    free(outputs.s);
    return rc;
}

/* --- export(f, args..., path=, dynamic=, outputs=) ----------------------------------------- */

static void free_dims(char ***dims, int n)
{
    for (int i = 0; dims && i < n; i++) {
        for (int d = 0; dims[i] && d < TFE_MAX_RANK; d++) free(dims[i][d]);
        free(dims[i]);
    }
    free(dims);
}

/* dynamic="batch" (dim 0 of every tensor argument) or a record of argument
 * name -> tuple of per-dim names (a string, or nil for a fixed dim). */
static int parse_dynamic(Interp *I, Value dyn, FnInfo *info, int argc, const Value *argv, char ***dims)
{
    for (int i = 0; i < argc; i++) {
        Value spec = v_nil();
        const char *pname = i < info->nparams ? info->param_names[i] : "?";
        if (dyn.kind == V_STR) {
            if (argv[i].kind != V_TENSOR || argv[i].u.t->rank == 0) continue;
            dims[i] = xcalloc(TFE_MAX_RANK, sizeof **dims);
            dims[i][0] = xstrdup(((Str *)dyn.u.o)->s);
            continue;
        }
        Value *p = record_get((Record *)dyn.u.o, pname, strlen(pname));
        if (!p) continue;
        spec = *p;
        if (argv[i].kind != V_TENSOR)
            return interp_raise(I, "export(): dynamic names dims of '%s', which is not a tensor", pname);
        int rank = argv[i].u.t->rank;
        if (spec.kind != V_TUPLE && spec.kind != V_LIST)
            return interp_raise(I, "export(): dynamic.%s must be a tuple of dim names (a string or nil per dim), got %s",
                                pname, value_kind_name(spec));
        Seq *s = (Seq *)spec.u.o;
        if (s->n != rank)
            return interp_raise(I, "export(): dynamic.%s names %d dims, but '%s' has %d", pname, s->n, pname, rank);
        dims[i] = xcalloc(TFE_MAX_RANK, sizeof **dims);
        for (int d = 0; d < rank; d++) {
            if (s->items[d].kind == V_NIL) continue;
            if (s->items[d].kind != V_STR)
                return interp_raise(I, "export(): dynamic.%s[%d] must be a dim name (a string) or nil, got %s", pname, d,
                                    value_kind_name(s->items[d]));
            dims[i][d] = xstrdup(((Str *)s->items[d].u.o)->s);
        }
    }
    if (dyn.kind == V_RECORD) {
        Record *r = (Record *)dyn.u.o;
        for (int k = 0; k < r->n; k++) {
            bool found = false;
            for (int i = 0; i < info->nparams && i < argc; i++) found |= !strcmp(info->param_names[i], r->keys[k]->s);
            if (!found) return interp_raise(I, "export(): dynamic names '%s', which is not a parameter given", r->keys[k]->s);
        }
    }
    return 0;
}

/* Does the trace's raw graph keep dim d of argument leaf i unknown? */
static Graph *export_source(Trace *t) { return t->g->raw ? t->g->raw : t->g; }
static bool dim_free(Trace *t, int leaf, int d)
{
    Graph *g = export_source(t);
    return leaf < g->ninputs && g->nodes[g->inputs[leaf]].meta[0].shape[d] < 0;
}

/* The call that makes a relaxed trace: each argument with a dim to free
 * doubled along it (its values repeated, so indices stay in range). */
static int retrace_relaxed(Interp *I, Value f, int argc, const Value *argv, char ***dims, int *leaf_of)
{
    Value *a = xcalloc((size_t)argc + 1, sizeof *a);
    int rc = 0;
    for (int i = 0; i < argc && !rc; i++) {
        a[i] = argv[i];
        value_incref(a[i]);
        for (int d = 0; dims[i] && d < TFE_MAX_RANK && !rc; d++) {
            if (!dims[i][d] || leaf_of[i] < 0) continue;
            tfe_attrs at;
            tfe_attrs_init(&at);
            at.axes[0] = d;
            tfe_tensor *in[2] = {a[i].u.t, a[i].u.t}, *o = NULL;
            if (tfe_execute_eager(OP_CONCAT, 2, in, &at, &o)) { rc = interp_raise_tensor_error(I); break; }
            value_decref(a[i]);
            a[i] = v_tensor_take(o);
        }
    }
    Value r;
    if (!rc) rc = call_value(I, f, argc, a, 0, NULL, NULL, &r);
    if (!rc) value_decref(r);
    for (int i = 0; i < argc; i++) value_decref(a[i]);
    free(a);
    return rc;
}

BUILTIN(bi_export)
{
    (void)data;
    if (argc < 1 || argv[0].kind != V_FN)
        return interp_raise(I, "export() needs a staged function and its arguments, got %s",
                            argc ? value_kind_name(argv[0]) : "nothing");
    Closure *c = (Closure *)argv[0].u.o;
    const Loc here = I->cur_loc; /* calling f moves it; errors after that are export()'s */
    const char *path = "model.onnx";
    Value dyn = v_nil(), outs_v = v_nil();
    for (int k = 0; k < nkw; k++) {
        const char *kn = kwnames[k]->s;
        if (!strcmp(kn, "path")) {
            if (arg_string(I, "export()", "path", kwvals[k], &path)) return -1;
        } else if (!strcmp(kn, "dynamic")) {
            dyn = kwvals[k];
            if (dyn.kind != V_NIL && dyn.kind != V_STR && dyn.kind != V_RECORD)
                return arg_error(I, "export()", "dynamic", "a dim name or a record of argument name -> dim names", dyn);
        } else if (!strcmp(kn, "outputs")) {
            outs_v = kwvals[k];
            if (outs_v.kind != V_TUPLE && outs_v.kind != V_LIST)
                return arg_error(I, "export()", "outputs", "a tuple of names", outs_v);
        } else {
            return interp_raise(I, "export(): unknown keyword '%s' (path, dynamic, outputs)", kn);
        }
    }
    if (I->opt.eager || I->run_eagerly)
        return interp_raise(I, "export(): staged functions run eagerly (--eager or run_eagerly(true)), so there is no graph");
    FnInfo *info = c->fn->info;
    if (!info->is_staged && !c->stage_forced)
        return interp_raise(I, "export(): '%s' is not staged (mark it @staged)", c->name);
    int nargs = argc - 1;
    const Value *args = argv + 1;
    for (int i = 0; i < nargs; i++)
        if (args[i].kind != V_TENSOR && args[i].kind != V_SCALAR && args[i].kind != V_TUPLE && args[i].kind != V_LIST &&
            args[i].kind != V_RECORD)
            return interp_raise(I, "export(): argument %d of '%s' is %s; the model's inputs are tensors", i + 1, c->name,
                                value_kind_name(args[i]));
    char ***dims = xcalloc((size_t)nargs + 1, sizeof *dims);
    int *leaf_of = xcalloc((size_t)nargs + 1, sizeof *leaf_of);
    int rc = dyn.kind != V_NIL ? parse_dynamic(I, dyn, info, nargs, args, dims) : 0;
    /* each tensor argument's leaf index */
    int nleaf = 0;
    SigBuf sb = {0};
    Leaves lv = {0};
    for (int i = 0; i < nargs; i++) {
        int before = lv.n;
        sig_flatten(args[i], &sb, &lv, SIG_INPUT);
        leaf_of[i] = (args[i].kind == V_TENSOR && lv.n == before + 1) ? before : -1;
    }
    nleaf = lv.n;
    Trace *t = NULL;
    if (!rc) {
        t = stage_find(c, nargs, args);
        if (!t) {
            Value r;
            rc = call_value(I, argv[0], nargs, args, 0, NULL, NULL, &r);
            if (!rc) value_decref(r);
            t = rc ? NULL : stage_last_trace(c);
        }
        if (!rc && !t) rc = interp_raise(I, "export(): '%s' could not be staged for these arguments", c->name);
    }
    I->cur_loc = here;
    /* named dims the trace fixed: a second call with them changed relaxes it */
    bool need = false;
    for (int i = 0; !rc && i < nargs; i++)
        for (int d = 0; dims[i] && d < TFE_MAX_RANK; d++)
            if (dims[i][d] && leaf_of[i] >= 0 && !dim_free(t, leaf_of[i], d)) need = true;
    if (!rc && need) {
        rc = retrace_relaxed(I, argv[0], nargs, args, dims, leaf_of);
        if (!rc) t = stage_find(c, nargs, args);
        I->cur_loc = here;
        for (int i = 0; !rc && i < nargs; i++)
            for (int d = 0; dims[i] && d < TFE_MAX_RANK && !rc; d++)
                if (dims[i][d] && leaf_of[i] >= 0 && (!t || !dim_free(t, leaf_of[i], d)))
                    rc = interp_raise(I, "export(): dim %d of '%s' cannot be dynamic: %s's graph depends on its size "
                                      "(it reads a shape, as nn.flatten does, or makes something of that size)",
                                      d, i < info->nparams ? info->param_names[i] : "?", c->name);
    }
    Graph *g = t ? export_source(t) : NULL;
    ExportSpec sp = {0};
    char ***ldims = NULL;
    const char **onames = NULL;
    int nout = 0;
    if (!rc) {
        /* the outside bindings' values follow the arguments' leaves */
        SigBuf scratch = {0};
        for (int i = 0; i < t->nouts; i++) sig_flatten(t->outs[i].env->slots[t->outs[i].slot], &scratch, &lv, SIG_INPUT);
        sig_free(&scratch);
        if (lv.n != g->ninputs)
            rc = interp_raise(I, "export(): '%s''s graph has %d inputs, the call %d", c->name, g->ninputs, lv.n);
    }
    if (!rc) {
        sp.nargs = nleaf;
        sp.values = lv.t;
        sp.in_names = xcalloc((size_t)nleaf + 1, sizeof *sp.in_names);
        sp.baked = xcalloc((size_t)g->ninputs + 1, sizeof *sp.baked);
        ldims = xcalloc((size_t)nleaf + 1, sizeof *ldims);
        for (int i = 0; i < g->ninputs; i++) sp.baked[i] = t->static_val && t->static_val[i];
        /* a tensor argument whose value the trace used would be no input of the model */
        for (int i = 0; i < nargs && !rc; i++)
            if (leaf_of[i] >= 0 && sp.baked[leaf_of[i]])
                rc = interp_raise(I, "export(): the trace of '%s' used the value of its argument '%s' (a condition on it "
                                  "decided while tracing: and, or, an if on a host value), so the model would not read it; "
                                  "write the condition with tensor ops (logical_and, where)",
                                  c->name, i < info->nparams ? info->param_names[i] : "?");
        for (int i = 0; i < nleaf; i++) sp.in_names[i] = g->nodes[g->inputs[i]].label;
        for (int i = 0; i < nargs; i++)
            if (leaf_of[i] >= 0) ldims[leaf_of[i]] = dims[i];
        /* relaxed dims with no name: "<input>_dim<d>" */
        char ***auto_dims = xcalloc((size_t)nleaf + 1, sizeof *auto_dims);
        for (int i = 0; i < nleaf; i++) {
            const tfe_meta *m = &g->nodes[g->inputs[i]].meta[0];
            for (int d = 0; d < m->rank; d++)
                if (m->shape[d] < 0 && !(ldims[i] && ldims[i][d])) {
                    if (!auto_dims[i]) {
                        auto_dims[i] = xcalloc(TFE_MAX_RANK, sizeof **auto_dims);
                        for (int e = 0; ldims[i] && e < TFE_MAX_RANK; e++)
                            if (ldims[i][e]) auto_dims[i][e] = xstrdup(ldims[i][e]);
                    }
                    char b[200];
                    snprintf(b, sizeof b, "%s_dim%d", sp.in_names[i] ? sp.in_names[i] : "input", d);
                    auto_dims[i][d] = xstrdup(b);
                }
            if (auto_dims[i]) ldims[i] = auto_dims[i];
        }
        sp.dims = ldims;
        nout = rc ? 0 : g->regions[0].nouts;
        onames = xcalloc((size_t)nout + 1, sizeof *onames);
        Seq *os = outs_v.kind != V_NIL ? (Seq *)outs_v.u.o : NULL;
        if (os && os->n != nout)
            rc = interp_raise(I, "export(): outputs names %d results, but '%s' returns %d", os->n, c->name, nout);
        for (int i = 0; i < nout && !rc; i++) {
            char b[64];
            if (os) {
                if (os->items[i].kind != V_STR) {
                    rc = arg_error(I, "export()", "outputs", "a tuple of strings", os->items[i]);
                    break;
                }
                onames[i] = xstrdup(((Str *)os->items[i].u.o)->s);
            } else {
                snprintf(b, sizeof b, nout == 1 ? "output" : "output%d", i);
                onames[i] = xstrdup(b);
            }
        }
        sp.out_names = onames;
        Buf model = {0};
        if (!rc) rc = export_graph(I, g, &sp, &model);
        if (!rc) {
            char err[400];
            const void *parts[1] = {model.s};
            size_t sizes[1] = {model.len};
            if (write_file_atomic(path, parts, sizes, 1, err, sizeof err))
                rc = interp_raise(I, "export(): cannot write '%s': %s", path, err);
        }
        free(model.s);
        for (int i = 0; i < nleaf; i++)
            if (auto_dims[i]) {
                for (int d = 0; d < TFE_MAX_RANK; d++) free(auto_dims[i][d]);
                free(auto_dims[i]);
            }
        free(auto_dims);
        for (int i = 0; i < nout; i++) free((char *)onames[i]);
    }
    free(onames);
    free(ldims);
    free(sp.in_names);
    free(sp.baked);
    free_dims(dims, nargs);
    free(leaf_of);
    sig_free(&sb);
    leaves_free(&lv);
    if (!rc) *out = v_nil();
    return rc;
}

/* onnx_ops(): a record of op name -> "onnx" or why it cannot be exported. */
BUILTIN(bi_onnx_ops)
{
    (void)data;
    (void)argv;
    (void)kwnames;
    (void)kwvals;
    if (argc || nkw) return interp_raise(I, "onnx_ops() takes no arguments");
    Record *r = record_new();
    for (int op = 0; op < TFE_NOPS; op++) {
        const char *why = export_refusal((tfe_op)op);
        const char *s = export_op_mapped((tfe_op)op) ? "onnx" : why ? why : "MISSING";
        record_set_take(r, tfe_ops[op].name, strlen(tfe_ops[op].name), v_cstr(s));
    }
    *out = v_obj(V_RECORD, r);
    return 0;
}

void stage_export_builtins_register(Interp *I)
{
    interp_define_builtin(I, "export", bi_export, NULL);
    interp_define_builtin(I, "onnx_ops", bi_onnx_ops, NULL);
}
