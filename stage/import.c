/* import.c — import_onnx(path): an ONNX model (stage/onnx_model.c) as a
 * callable that runs its nodes as tfe ops, so a tape sees them (gradients)
 * and a trace records them (inside @staged code it is part of the graph).
 * The op set is what export writes for common models (docs/export.md);
 * If and Loop run their subgraphs eagerly, or as a graph cond/while when
 * traced (trace_cond_fn, trace_while_fn: stage/trace_cf.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "interp/builtins_args.h"
#include "interp/internal.h"
#include "stage/export.h"
#include "stage/import_nn.h"
#include "stage/onnx_model.h"
#include "stage/trace.h"
#include "tensor/op_scope.h"
#include "util/xalloc.h"

typedef struct OnnxObj { Object o; OxModel *m; char *path; } OnnxObj;

static const struct { const char *name; tfe_op op; } UNARY[] = {
    {"Neg", OP_NEG}, {"Abs", OP_ABS}, {"Exp", OP_EXP}, {"Log", OP_LOG}, {"Sqrt", OP_SQRT}, {"Tanh", OP_TANH},
    {"Sigmoid", OP_SIGMOID}, {"Relu", OP_RELU}, {"Sin", OP_SIN}, {"Cos", OP_COS}, {"Erf", OP_ERF}, {"Floor", OP_FLOOR},
    {"Ceil", OP_CEIL}, {"Not", OP_LOGICAL_NOT}, {"Sign", OP_SIGN}, {"Tan", OP_TAN},
    {"IsNaN", OP_ISNAN}, /* (export writes it where NaN decides: max, argmax) */
    {"Round", OP_ROUND}, {"Softplus", OP_SOFTPLUS}, {"Det", OP_DET},
};
static const struct { const char *name; tfe_op op; } BINARY[] = {
    {"Add", OP_ADD}, {"Sub", OP_SUB}, {"Mul", OP_MUL}, {"Div", OP_DIV}, {"Pow", OP_POW}, {"Equal", OP_EQ}, {"Less", OP_LT}, {"LessOrEqual", OP_LE}, {"Greater", OP_GT},
    {"GreaterOrEqual", OP_GE}, {"And", OP_LOGICAL_AND}, {"Or", OP_LOGICAL_OR}, {"MatMul", OP_MATMUL},
    {"Xor", OP_NE}, /* (of bools: export writes it for a zero's sign) */
};
static const char *OTHER[] = {"Identity", "Softmax", "LogSoftmax", "Transpose", "Reshape", "Cast", "Unsqueeze",
                              "Squeeze", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "Concat", "Where",
                              /* the rest of what export writes (run_more) */
                              "Mod", "ArgMax", "ArgMin", "IsInf", "Reciprocal", "ReduceProd",
                              "ReduceLogSumExp", "Expand", "Tile", "CumSum", "Trilu", "Gather", "GatherElements",
                              "Shape", "Size", "Slice", "OneHot", "ScatterElements", "ScatterND", "Compress", "Split",
                              "If", "Loop"};

static int find_op(const char *name, bool *unary)
{
    for (size_t i = 0; i < sizeof UNARY / sizeof *UNARY; i++)
        if (!strcmp(UNARY[i].name, name)) return *unary = true, (int)UNARY[i].op;
    for (size_t i = 0; i < sizeof BINARY / sizeof *BINARY; i++)
        if (!strcmp(BINARY[i].name, name)) return *unary = false, (int)BINARY[i].op;
    return -1;
}

static bool supported(const char *name)
{
    bool u;
    if (find_op(name, &u) >= 0 || import_nn_handles(name)) return true;
    for (size_t i = 0; i < sizeof OTHER / sizeof *OTHER; i++)
        if (!strcmp(OTHER[i], name)) return true;
    return false;
}

/* The values by name while a call runs. */
typedef struct OxEnv { char **names; tfe_tensor **t; int n; } OxEnv;
static tfe_tensor *env_get(OxEnv *e, const char *name)
{
    for (int i = e->n - 1; i >= 0; i--)
        if (!strcmp(e->names[i], name)) return e->t[i];
    return NULL;
}
static void env_put(OxEnv *e, const char *name, tfe_tensor *t) /* takes t */
{
    e->names = xrealloc(e->names, sizeof *e->names * (size_t)(e->n + 1));
    e->t = xrealloc(e->t, sizeof *e->t * (size_t)(e->n + 1));
    e->names[e->n] = (char *)name;
    e->t[e->n++] = t;
}

/* A constant int64 input (axes, shapes) as ints. */
static int const_ints(tfe_tensor *t, int64_t *v, int cap, int *n)
{
    if (!t || !t->storage || t->dtype != TFE_INT64 || tensor_numel(t) > cap) return -1;
    tfe_tensor *c = tensor_contiguous(t);
    *n = (int)tensor_numel(c);
    memcpy(v, tensor_data(c), sizeof *v * (size_t)*n);
    tensor_decref(c);
    return 0;
}

/* ONNX's Div of ints truncates toward zero (7 / -2 is -3); tfe's / of ints
 * is true division: floordiv, plus one where the quotient is negative and
 * not whole (a remainder, and the operands' signs differ). */
static tfe_tensor *int_div(tfe_tensor *a, tfe_tensor *b)
{
    tfe_scope s;
    s.n = 0;
    s.failed = false;
    tfe_tensor *z = scope_keep(&s, tensor_from_f64(0, a->dtype)), *one = scope_keep(&s, tensor_from_f64(1, a->dtype));
    tfe_tensor *q = scope_op2(&s, OP_FLOORDIV, a, b), *m = scope_op2(&s, OP_MOD, a, b);
    tfe_tensor *c = scope_op2(&s, OP_LOGICAL_AND, scope_op2(&s, OP_NE, m, z),
                              scope_op2(&s, OP_NE, scope_op2(&s, OP_LT, a, z), scope_op2(&s, OP_LT, b, z)));
    tfe_tensor *r = scope_where(&s, c, scope_op2(&s, OP_ADD, q, one), q);
    if (r) tensor_incref(r);
    scope_release(&s);
    return r;
}

/* ONNX's ReduceMean of ints is an int (the sum divided as Div does:
 * toward zero); tfe's mean of ints is a float. */
static tfe_tensor *int_mean(tfe_tensor *x, const tfe_attrs *at)
{
    tfe_scope s;
    s.n = 0;
    s.failed = false;
    tfe_attrs ca;
    tfe_attrs_init(&ca);
    ca.dtype = x->dtype;
    tfe_tensor *sum = scope_call(&s, OP_SUM, 1, &x, at), *r = NULL;
    if (sum && tensor_numel(sum) && tensor_numel(x)) {
        tfe_tensor *cnt = scope_keep(&s, tensor_from_f64((double)(tensor_numel(x) / tensor_numel(sum)), sum->dtype));
        tfe_tensor *q = cnt ? scope_keep(&s, int_div(sum, cnt)) : NULL;
        r = scope_call(&s, OP_CAST, 1, &q, &ca);
    } else if (sum) {
        r = scope_call(&s, OP_CAST, 1, &sum, &ca); /* nothing to divide: an empty result, or a sum of nothing */
    }
    if (r) tensor_incref(r);
    scope_release(&s);
    return r;
}

/* ReduceMax or ReduceMin over an empty axis: onnxruntime's -inf or +inf (an
 * int's lowest or highest), where tfe's max of nothing is an error; the
 * shape is the sum's. NULL (no error set) when no reduced axis is empty. */
static tfe_tensor *reduce_empty(tfe_tensor *x, const tfe_attrs *at, bool is_max)
{
    bool empty = false;
    for (int d = 0; d < x->rank; d++) {
        bool reduced = at->naxes < 0;
        for (int k = 0; k < at->naxes; k++)
            if (at->axes[k] == d || at->axes[k] + x->rank == d) reduced = true;
        if (reduced && x->shape[d] == 0) empty = true;
    }
    if (!empty) return NULL;
    double v = x->dtype == TFE_INT32 ? (is_max ? -2147483648.0 : 2147483647.0)
             : x->dtype == TFE_INT64 ? (is_max ? -9223372036854775808.0 : 9223372036854775807.0)
             : x->dtype == TFE_BOOL ? !is_max : is_max ? -INFINITY : INFINITY;
    tfe_scope s;
    s.n = 0;
    s.failed = false;
    tfe_attrs ca;
    tfe_attrs_init(&ca);
    ca.dtype = x->dtype;
    tfe_tensor *zeros = scope_call(&s, OP_CAST, 1, (tfe_tensor *[]){scope_call(&s, OP_SUM, 1, &x, at)}, &ca);
    tfe_tensor *fill = scope_keep(&s, tensor_from_f64(v, x->dtype));
    tfe_attrs ba;
    tfe_attrs_init(&ba);
    if (zeros) {
        ba.nints = zeros->rank;
        for (int d = 0; d < zeros->rank; d++) ba.ints[d] = zeros->shape[d];
    }
    tfe_tensor *r = zeros ? scope_call(&s, OP_BROADCAST_TO, 1, &fill, &ba) : NULL;
    if (r) tensor_incref(r);
    scope_release(&s);
    return r ? r : (tfe_tensor *)-1;
}

static const char *MORE[] = {"Mod", "ArgMax", "ArgMin", "IsInf", "Reciprocal", "Expand", "Tile", "CumSum",
                             "Trilu", "Gather", "GatherElements", "Shape", "Size", "Slice",
                             "OneHot", "ScatterElements", "ScatterND", "Compress"};
static bool is_more(const char *op)
{
    for (size_t i = 0; i < sizeof MORE / sizeof *MORE; i++)
        if (!strcmp(MORE[i], op)) return true;
    return false;
}

static int64_t attr_i(const OxNode *n, const char *name, int64_t d)
{
    const OxAttr *a = ox_attr(n, name);
    return a ? a->i : d;
}

/* an int64 tensor of the values v (Shape, Size) */
static tfe_tensor *i64_vec(const int64_t *v, int n, bool scalar)
{
    int64_t sh[1] = {n};
    tfe_tensor *t = tensor_zeros(TFE_INT64, scalar ? 0 : 1, sh);
    if (t) memcpy(tensor_data(t), v, sizeof *v * (size_t)n);
    return t;
}

/* x reversed along axis (ArgMax's select_last_index); a stop of -1 is
 * before index 0 (the slice op does not wrap it) */
static tfe_tensor *reversed(tfe_scope *s, tfe_tensor *x, int axis)
{
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = 3 * x->rank;
    for (int d = 0; d < x->rank; d++) {
        bool r = d == axis;
        at.ints[3 * d] = r ? x->shape[d] - 1 : 0;
        at.ints[3 * d + 1] = r ? -1 : x->shape[d];
        at.ints[3 * d + 2] = r ? -1 : 1;
    }
    return scope_call(s, OP_SLICE, 1, &x, &at);
}

/* The ops export writes beyond the common ones, each with ONNX's semantics
 * built from tfe ops (so a tape and a trace see them). NULL on an error:
 * err set for the model's fault, else the tensor error. */
static tfe_tensor *run_more(const OxNode *n, tfe_tensor *const *in, char *err, size_t cap)
{
    tfe_scope s;
    s.n = 0;
    s.failed = false;
    tfe_attrs at;
    tfe_attrs_init(&at);
    tfe_tensor *x = in[0], *r = NULL;
    int64_t v[32];
    int nv = 0;
    const char *op = n->op;
    if (!strcmp(op, "Mod")) {
        if (n->nin != 2) return snprintf(err, cap, "Mod takes 2 inputs, not %d", n->nin), NULL;
        if (!attr_i(n, "fmod", 0)) {
            r = scope_op2(&s, OP_MOD, x, in[1]); /* tfe's %: the divisor's sign, as fmod 0 */
        } else if (dtype_is_int(x->dtype) && dtype_is_int(in[1]->dtype)) {
            /* C's %: a - b trunc(a / b), exact in ints (abs would wrap at the lowest) */
            tfe_tensor *q = scope_keep(&s, int_div(x, in[1]));
            r = scope_op2(&s, OP_SUB, x, scope_op2(&s, OP_MUL, q, in[1]));
        } else {
            /* C's fmod: the dividend's sign. |a| mod |b| is fmod of them (no
             * sign to move), exact; then the dividend's sign, -0.0 included */
            tfe_tensor *m = scope_op2(&s, OP_MOD, scope_op1(&s, OP_ABS, x), scope_op1(&s, OP_ABS, in[1]));
            tfe_tensor *z = scope_keep(&s, tensor_from_f64(0, x->dtype)), *neg = scope_op2(&s, OP_LT, x, z);
            if (dtype_is_float(x->dtype)) {
                tfe_tensor *one = scope_keep(&s, tensor_from_f64(1, x->dtype));
                neg = scope_op2(&s, OP_LOGICAL_OR, neg, scope_op2(&s, OP_LT, scope_op2(&s, OP_DIV, one, x), z));
            }
            r = scope_where(&s, neg, scope_op1(&s, OP_NEG, m), m);
        }
    } else if (!strcmp(op, "ArgMax") || !strcmp(op, "ArgMin")) {
        int64_t axis = attr_i(n, "axis", 0);
        if (axis < -x->rank || axis >= x->rank || x->rank == 0)
            return snprintf(err, cap, "%s's axis %lld of a rank-%d input", op, (long long)axis, x->rank), NULL;
        if (axis < 0) axis += x->rank;
        at.naxes = 1;
        at.axes[0] = axis;
        at.keepdims = attr_i(n, "keepdims", 1) != 0;
        tfe_op top = op[3] == 'M' && op[4] == 'a' ? OP_ARGMAX : OP_ARGMIN;
        if (!attr_i(n, "select_last_index", 0)) {
            r = scope_call(&s, top, 1, &x, &at);
        } else {
            /* the first index in x reversed along axis, counted from the end */
            tfe_tensor *rx = reversed(&s, x, (int)axis);
            tfe_tensor *i = rx ? scope_call(&s, top, 1, &rx, &at) : NULL;
            tfe_tensor *last = scope_keep(&s, tensor_from_f64((double)(x->shape[axis] - 1), TFE_INT64));
            r = scope_op2(&s, OP_SUB, last, i);
        }
    } else if (!strcmp(op, "IsInf")) {
        if (!dtype_is_float(x->dtype)) return snprintf(err, cap, "IsInf of %s (it takes floats)", dtype_name(x->dtype)), NULL;
        tfe_tensor *pi = scope_keep(&s, tensor_from_f64(INFINITY, x->dtype)), *ni = scope_keep(&s, tensor_from_f64(-INFINITY, x->dtype));
        tfe_tensor *p = scope_op2(&s, OP_EQ, x, pi), *q = scope_op2(&s, OP_EQ, x, ni);
        bool dp = attr_i(n, "detect_positive", 1) != 0, dn = attr_i(n, "detect_negative", 1) != 0;
        r = dp && dn ? scope_op2(&s, OP_LOGICAL_OR, p, q) : dp ? p : dn ? q : scope_op2(&s, OP_LOGICAL_AND, p, q);
    } else if (!strcmp(op, "Reciprocal")) {
        r = scope_op2(&s, OP_DIV, scope_keep(&s, tensor_from_f64(1, x->dtype)), x);
    } else if (!strcmp(op, "Shape")) {
        int64_t st = attr_i(n, "start", 0), en = attr_i(n, "end", x->rank);
        st = st < 0 ? st + x->rank : st, en = en < 0 ? en + x->rank : en;
        st = st < 0 ? 0 : st > x->rank ? x->rank : st, en = en < 0 ? 0 : en > x->rank ? x->rank : en;
        r = scope_keep(&s, i64_vec(x->shape + st, en > st ? (int)(en - st) : 0, false));
    } else if (!strcmp(op, "OneHot")) {
        /* where(index == position, on, off), an index wrapped once by depth
         * (one out of range: all off, as ONNX says) */
        if (n->nin != 3) return snprintf(err, cap, "OneHot takes 3 inputs, not %d", n->nin), NULL;
        tfe_tensor *dp = in[1], *vals = in[2];
        if (dp->storage == NULL || tensor_numel(dp) != 1 || tensor_numel(vals) != 2 || x->rank >= TFE_MAX_RANK)
            return snprintf(err, cap, "OneHot's depth must be a constant of one value and its values two"), NULL;
        tfe_attrs ca;
        tfe_attrs_init(&ca);
        ca.dtype = TFE_INT64;
        tfe_tensor *d64 = scope_call(&s, OP_CAST, 1, &dp, &ca), *i64 = scope_call(&s, OP_CAST, 1, &x, &ca);
        int64_t depth = (int64_t)tensor_load_f64(dp, 0);
        int64_t axis = attr_i(n, "axis", -1);
        if (axis < 0) axis += x->rank + 1;
        if (axis < 0 || axis > x->rank) return snprintf(err, cap, "OneHot's axis %lld of a rank-%d input", (long long)attr_i(n, "axis", -1), x->rank), NULL;
        tfe_tensor *z = scope_keep(&s, tensor_from_f64(0, TFE_INT64));
        i64 = scope_where(&s, scope_op2(&s, OP_LT, i64, z), scope_op2(&s, OP_ADD, i64, d64), i64);
        at.naxes = 1;
        at.axes[0] = axis;
        i64 = i64 ? scope_call(&s, OP_EXPAND_DIMS, 1, &i64, &at) : NULL;
        tfe_attrs ar;
        tfe_attrs_init(&ar);
        ar.f[0] = 0, ar.f[1] = (double)depth, ar.f[2] = 1, ar.dtype = TFE_INT64;
        tfe_tensor *pos = scope_call(&s, OP_ARANGE, 0, NULL, &ar);
        tfe_attrs rs;
        tfe_attrs_init(&rs);
        rs.nints = x->rank + 1;
        for (int d = 0; d <= x->rank; d++) rs.ints[d] = d == axis ? depth : 1;
        pos = pos ? scope_call(&s, OP_RESHAPE, 1, &pos, &rs) : NULL;
        tfe_attrs s0, s1;
        tfe_attrs_init(&s0);
        tfe_attrs_init(&s1);
        s0.naxes = s1.naxes = 1, s0.axes[0] = s1.axes[0] = 0, s0.nints = s1.nints = 3;
        s0.ints[0] = 0, s0.ints[1] = 1, s0.ints[2] = 1, s1.ints[0] = 1, s1.ints[1] = 2, s1.ints[2] = 1;
        tfe_tensor *off = scope_call(&s, OP_SLICE, 1, &vals, &s0), *on = scope_call(&s, OP_SLICE, 1, &vals, &s1);
        r = scope_where(&s, scope_op2(&s, OP_EQ, i64, pos), on, off);
    } else if (!strcmp(op, "ScatterElements") || !strcmp(op, "ScatterND")) {
        const OxAttr *ra = ox_attr(n, "reduction");
        const char *red = ra && ra->s ? ra->s : "none";
        bool nd = op[7] == 'N', add = !strcmp(red, "add");
        if (n->nin != 3) return snprintf(err, cap, "%s takes 3 inputs, not %d", op, n->nin), NULL;
        if (!add && (!nd || strcmp(red, "none")))
            return snprintf(err, cap, "%s's reduction '%.20s' (tfe imports %s)", op, red, nd ? "none and add" : "add"), NULL;
        tfe_tensor *idx = in[1];
        if (nd) {
            /* indices (..., 1): rows of data along axis 0, the form export writes */
            if (idx->rank < 1 || idx->shape[idx->rank - 1] != 1)
                return snprintf(err, cap, "ScatterND with indices of last dim %lld (tfe imports 1)", idx->rank ? (long long)idx->shape[idx->rank - 1] : 0LL), NULL;
            tfe_attrs sq;
            tfe_attrs_init(&sq);
            sq.naxes = 1;
            sq.axes[0] = -1;
            idx = scope_call(&s, OP_SQUEEZE, 1, &idx, &sq);
            at.naxes = 1;
            at.axes[0] = 0;
        } else {
            at.naxes = 1;
            at.axes[0] = attr_i(n, "axis", 0);
        }
        tfe_tensor *si[3] = {x, idx, in[2]};
        r = idx ? scope_call(&s, nd ? (add ? OP_SCATTER_ADD : OP_SCATTER) : OP_PUT_ALONG_AXIS_ADD, 3, si, &at) : NULL;
    } else if (!strcmp(op, "Compress")) {
        /* the slices along axis where the condition holds (no axis: of x flat);
         * a condition shorter than the axis is false past its end */
        if (n->nin != 2) return snprintf(err, cap, "Compress takes 2 inputs, not %d", n->nin), NULL;
        const OxAttr *aa = ox_attr(n, "axis");
        tfe_tensor *c = in[1], *y = x;
        if (c->rank != 1) return snprintf(err, cap, "Compress with a rank-%d condition (it takes a vector)", c->rank), NULL;
        int64_t axis = aa ? aa->i : 0;
        if (!aa) {
            tfe_attrs rs;
            tfe_attrs_init(&rs);
            rs.nints = 1;
            rs.ints[0] = -1;
            y = scope_call(&s, OP_RESHAPE, 1, &y, &rs);
        }
        if (!y) return NULL;
        if (axis < 0) axis += y->rank;
        if (axis < 0 || axis >= y->rank) return snprintf(err, cap, "Compress's axis %lld of a rank-%d input", (long long)(aa ? aa->i : 0), x->rank), NULL;
        int64_t len = y->shape[axis];
        if (c->shape[0] > len) return snprintf(err, cap, "Compress with a condition of %lld values along an axis of %lld", (long long)c->shape[0], (long long)len), NULL;
        tfe_attrs ca;
        tfe_attrs_init(&ca);
        ca.dtype = TFE_BOOL;
        c = scope_call(&s, OP_CAST, 1, &c, &ca);
        if (c && c->shape[0] < len) {
            int64_t pad = len - c->shape[0];
            tfe_attrs cc;
            tfe_attrs_init(&cc);
            cc.naxes = 1;
            cc.axes[0] = 0;
            tfe_tensor *parts[2] = {c, scope_keep(&s, tensor_zeros(TFE_BOOL, 1, &pad))};
            c = parts[1] ? scope_call(&s, OP_CONCAT, 2, parts, &cc) : NULL;
        }
        /* axis to the front, masked, back */
        tfe_attrs tp;
        tfe_attrs_init(&tp);
        tp.nints = y->rank;
        for (int d = 0, k = 1; d < y->rank; d++) tp.ints[d == axis ? 0 : k++] = d;
        tfe_tensor *t = axis ? scope_call(&s, OP_TRANSPOSE, 1, &y, &tp) : y;
        tfe_tensor *mi[2] = {t, c};
        tfe_tensor *m = t && c ? scope_call(&s, OP_BOOL_MASK, 2, mi, NULL) : NULL;
        if (m && axis) {
            tfe_attrs bk;
            tfe_attrs_init(&bk);
            bk.nints = y->rank;
            for (int d = 0; d < y->rank; d++) bk.ints[tp.ints[d]] = d;
            m = scope_call(&s, OP_TRANSPOSE, 1, &m, &bk);
        }
        r = m;
    } else if (!strcmp(op, "Size")) {
        int64_t k = tensor_numel(x);
        r = scope_keep(&s, i64_vec(&k, 1, true));
    } else {
        /* the rest read constant int inputs */
        if (strncmp(op, "Gather", 6) && n->nin > 1 && in[1] && const_ints(in[1], v, 32, &nv)) return snprintf(err, cap, "%s's input 2 must be a constant", op), NULL;
        if (!strcmp(op, "Expand")) {
            /* to the two shapes broadcast together */
            int rk = nv > x->rank ? nv : x->rank;
            at.nints = rk;
            for (int d = 0; d < rk; d++) {
                int64_t a = d - (rk - x->rank) >= 0 ? x->shape[d - (rk - x->rank)] : 1, b = d - (rk - nv) >= 0 ? v[d - (rk - nv)] : 1;
                if (a != b && a != 1 && b != 1)
                    return snprintf(err, cap, "Expand of a dimension %lld to %lld", (long long)a, (long long)b), NULL;
                at.ints[d] = a == 1 ? b : a;
            }
            r = scope_call(&s, OP_BROADCAST_TO, 1, &x, &at);
        } else if (!strcmp(op, "Tile")) {
            at.nints = nv;
            memcpy(at.ints, v, sizeof *v * (size_t)nv);
            r = scope_call(&s, OP_TILE, 1, &x, &at);
        } else if (!strcmp(op, "CumSum")) {
            if (nv != 1) return snprintf(err, cap, "CumSum's axis must be one constant"), NULL;
            if (attr_i(n, "exclusive", 0)) return snprintf(err, cap, "CumSum's exclusive 1 (tfe's cumsum is inclusive)"), NULL;
            at.naxes = 1;
            at.axes[0] = v[0];
            at.nints = 1;
            at.ints[0] = attr_i(n, "reverse", 0) != 0;
            r = scope_call(&s, OP_CUMSUM, 1, &x, &at);
            if (r && r->dtype != x->dtype) { /* ONNX's is of the input's type (tfe's of an int32: int64) */
                tfe_attrs ca;
                tfe_attrs_init(&ca);
                ca.dtype = x->dtype;
                r = scope_call(&s, OP_CAST, 1, &r, &ca);
            }
        } else if (!strcmp(op, "Trilu")) {
            at.nints = 1;
            at.ints[0] = n->nin > 1 && in[1] ? (nv == 1 ? v[0] : (snprintf(err, cap, "Trilu's k must be one constant"), 0)) : 0;
            if (err[0]) return NULL;
            r = scope_call(&s, attr_i(n, "upper", 1) ? OP_TRIU : OP_TRIL, 1, &x, &at);
        } else if (!strcmp(op, "Gather") || !strcmp(op, "GatherElements")) {
            at.naxes = 1;
            at.axes[0] = attr_i(n, "axis", 0);
            tfe_tensor *gi[2] = {x, in[1]};
            r = scope_call(&s, op[6] ? OP_TAKE_ALONG_AXIS : OP_GATHER, 2, gi, &at);
        } else { /* Slice: starts, ends, axes, steps, resolved as ONNX clamps them */
            int64_t e[32], ax[32], st[32];
            int ne = 0, na = 0, ns = 0;
            if (n->nin < 3 || const_ints(in[2], e, 32, &ne) || (n->nin > 3 && in[3] && const_ints(in[3], ax, 32, &na)) ||
                (n->nin > 4 && in[4] && const_ints(in[4], st, 32, &ns)) || ne != nv || (na && na != nv) || (ns && ns != nv))
                return snprintf(err, cap, "Slice's starts, ends, axes and steps must be constants of one length"), NULL;
            at.nints = 3 * x->rank;
            for (int d = 0; d < x->rank; d++) at.ints[3 * d] = 0, at.ints[3 * d + 1] = x->shape[d], at.ints[3 * d + 2] = 1;
            for (int i = 0; i < nv; i++) {
                int64_t a = na ? ax[i] : i, step = ns ? st[i] : 1;
                if (a < 0) a += x->rank;
                if (a < 0 || a >= x->rank || step == 0) return snprintf(err, cap, "Slice's axis %lld or step %lld", (long long)(na ? ax[i] : i), (long long)step), NULL;
                int64_t dim = x->shape[a], b = v[i], c = e[i];
                b = b < 0 ? b + dim : b, c = c < 0 ? c + dim : c;
                if (step > 0) b = b < 0 ? 0 : b > dim ? dim : b, c = c < 0 ? 0 : c > dim ? dim : c;
                else b = b < 0 ? 0 : b > dim - 1 ? dim - 1 : b, c = c < -1 ? -1 : c > dim - 1 ? dim - 1 : c;
                at.ints[3 * a] = b, at.ints[3 * a + 1] = c, at.ints[3 * a + 2] = step;
            }
            r = scope_call(&s, OP_SLICE, 1, &x, &at);
        }
    }
    if (r) tensor_incref(r);
    scope_release(&s);
    return r;
}

/* Split: its outputs are slices along axis, of the sizes given or equal
 * (the one op of several outputs import reads) */
static int run_split(Interp *I, const OxNode *n, OxEnv *e)
{
    tfe_tensor *x = n->in[0][0] ? env_get(e, n->in[0]) : NULL;
    tfe_tensor *sp = n->nin > 1 && n->in[1][0] ? env_get(e, n->in[1]) : NULL;
    if (!x) return interp_raise(I, "import_onnx(): Split reads '%s', which nothing made", n->in[0]);
    int64_t axis = attr_i(n, "axis", 0), v[64];
    int nv = 0;
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis >= x->rank) return interp_raise(I, "import_onnx(): Split's axis %lld of a rank-%d input", (long long)attr_i(n, "axis", 0), x->rank);
    int64_t len = x->shape[axis];
    if (sp) {
        if (const_ints(sp, v, 64, &nv) || nv != n->nout) return interp_raise(I, "import_onnx(): Split's sizes must be a constant of one per output");
        int64_t tot = 0;
        bool neg = false;
        for (int i = 0; i < nv; i++) tot += v[i], neg |= v[i] < 0;
        if (neg || tot != len) return interp_raise(I, "import_onnx(): Split's sizes do not add up to the axis' %lld", (long long)len);
    } else {
        if (n->nout > 64 || len % n->nout) return interp_raise(I, "import_onnx(): Split of %lld into %d equal parts", (long long)len, n->nout);
        for (nv = 0; nv < n->nout; nv++) v[nv] = len / n->nout;
    }
    int64_t at0 = 0;
    for (int i = 0; i < nv; i++) {
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.nints = 3 * x->rank;
        for (int d = 0; d < x->rank; d++) at.ints[3 * d] = 0, at.ints[3 * d + 1] = x->shape[d], at.ints[3 * d + 2] = 1;
        at.ints[3 * axis] = at0, at.ints[3 * axis + 1] = at0 + v[i];
        at0 += v[i];
        tfe_tensor *o = tfe_call1(OP_SLICE, 1, &x, &at);
        if (!o) return interp_raise_tensor_error(I);
        env_put(e, n->out[i], o);
    }
    return 0;
}

static int run_node(Interp *I, const OxNode *n, OxEnv *e, tfe_tensor **out)
{
    tfe_tensor *in[64] = {0};
    if (n->nin > 64) return interp_raise(I, "import_onnx(): %s with %d inputs", n->op, n->nin);
    for (int i = 0; i < n->nin; i++) {
        if (!n->in[i][0]) continue;
        in[i] = env_get(e, n->in[i]);
        if (!in[i]) return interp_raise(I, "import_onnx(): %s reads '%s', which nothing made", n->op, n->in[i]);
    }
    if (import_nn_handles(n->op)) {
        char err[300];
        if (!import_nn_run(n, in, out, err, sizeof err)) return 0;
        return err[0] ? interp_raise(I, "import_onnx(): %s", err) : interp_raise_tensor_error(I);
    }
    bool unary;
    int op = find_op(n->op, &unary);
    tfe_attrs at;
    tfe_attrs_init(&at);
    if (op >= 0) {
        if (n->nin != (unary ? 1 : 2)) return interp_raise(I, "import_onnx(): %s takes %d input%s, not %d", n->op, unary ? 1 : 2, unary ? "" : "s", n->nin);
        if (op == OP_DIV && dtype_is_int(in[0]->dtype) && dtype_is_int(in[1]->dtype)) {
            *out = int_div(in[0], in[1]);
            return *out ? 0 : interp_raise_tensor_error(I);
        }
        if (op == OP_POW && in[0] && in[1] && in[1]->dtype != in[0]->dtype) {
            /* ONNX's Pow is of the base's type (an int base to a float power: an int) */
            tfe_tensor *p = tfe_call1(OP_POW, 2, in, &at);
            if (!p || p->dtype == in[0]->dtype) return (*out = p) ? 0 : interp_raise_tensor_error(I);
            at.dtype = in[0]->dtype;
            *out = tfe_call1(OP_CAST, 1, &p, &at);
            tensor_decref(p);
            return *out ? 0 : interp_raise_tensor_error(I);
        }
        *out = tfe_call1((tfe_op)op, n->nin, in, &at);
        return *out ? 0 : interp_raise_tensor_error(I);
    }
    const OxAttr *a;
    int64_t v[32];
    int nv = 0;
    tfe_op top;
    int nin = 1;
    if (is_more(n->op)) {
        char err[300] = "";
        *out = run_more(n, in, err, sizeof err);
        if (*out) return 0;
        return err[0] ? interp_raise(I, "import_onnx(): %s", err) : interp_raise_tensor_error(I);
    }
    if (!strcmp(n->op, "Identity")) {
        tensor_incref(in[0]);
        *out = in[0];
        return 0;
    } else if (!strcmp(n->op, "Softmax") || !strcmp(n->op, "LogSoftmax")) {
        top = n->op[0] == 'S' ? OP_SOFTMAX : OP_LOG_SOFTMAX;
        a = ox_attr(n, "axis");
        at.naxes = 1;
        at.axes[0] = a ? a->i : -1;
    } else if (!strcmp(n->op, "Transpose")) {
        top = OP_TRANSPOSE;
        a = ox_attr(n, "perm");
        if (a) {
            if (a->nints > 32) return interp_raise(I, "import_onnx(): Transpose of rank %d", a->nints);
            at.nints = a->nints;
            memcpy(at.ints, a->ints, sizeof *a->ints * (size_t)a->nints);
        }
    } else if (!strcmp(n->op, "Reshape")) {
        top = OP_RESHAPE;
        if (const_ints(in[1], v, 32, &nv)) return interp_raise(I, "import_onnx(): Reshape's shape must be a constant");
        a = ox_attr(n, "allowzero");
        for (int d = 0; d < nv; d++)
            if (v[d] == 0 && !(a && a->i)) v[d] = d < in[0]->rank ? in[0]->shape[d] : 0; /* 0: the input's dim */
        at.nints = nv;
        memcpy(at.ints, v, sizeof *v * (size_t)nv);
    } else if (!strcmp(n->op, "Cast")) {
        top = OP_CAST;
        bool ok;
        a = ox_attr(n, "to");
        at.dtype = ox_dtype_of(a ? a->i : 0, &ok);
        if (!ok) return interp_raise(I, "import_onnx(): Cast to %s: tfe has no such dtype", ox_dtype_name(a ? a->i : 0));
    } else if (!strcmp(n->op, "Unsqueeze") || !strcmp(n->op, "Squeeze")) {
        if (n->nin > 1 && const_ints(in[1], v, 32, &nv)) return interp_raise(I, "import_onnx(): %s's axes must be a constant", n->op);
        if (n->op[0] == 'U') {
            /* one axis at a time, in increasing order */
            tfe_tensor *cur = in[0];
            tensor_incref(cur);
            for (int k = 0; k < nv; k++) {
                at.naxes = 1;
                at.axes[0] = v[k];
                tfe_tensor *nx = tfe_call1(OP_EXPAND_DIMS, 1, &cur, &at);
                tensor_decref(cur);
                if (!nx) return interp_raise_tensor_error(I);
                cur = nx;
            }
            *out = cur;
            return 0;
        }
        top = OP_SQUEEZE;
        if (nv) {
            at.naxes = nv;
            memcpy(at.axes, v, sizeof *v * (size_t)nv);
        }
    } else if (!strncmp(n->op, "Reduce", 6)) {
        top = !strcmp(n->op, "ReduceSum") ? OP_SUM : !strcmp(n->op, "ReduceMean") ? OP_MEAN
            : !strcmp(n->op, "ReduceMax") ? OP_MAX : !strcmp(n->op, "ReduceProd") ? OP_PROD
            : !strcmp(n->op, "ReduceLogSumExp") ? OP_LOGSUMEXP : OP_MIN;
        if (top == OP_SUM) {
            if (n->nin > 1 && in[1] && const_ints(in[1], v, TFE_MAX_RANK, &nv))
                return interp_raise(I, "import_onnx(): ReduceSum's axes must be a constant");
        } else if ((a = ox_attr(n, "axes"))) {
            if (a->nints > TFE_MAX_RANK) return interp_raise(I, "import_onnx(): %s over %d axes", n->op, a->nints);
            nv = a->nints;
            memcpy(v, a->ints, sizeof *v * (size_t)nv);
        }
        a = ox_attr(n, "noop_with_empty_axes");
        if (!nv && a && a->i) {
            tensor_incref(in[0]);
            *out = in[0];
            return 0;
        }
        at.naxes = nv ? nv : -1;
        memcpy(at.axes, v, sizeof *v * (size_t)nv);
        a = ox_attr(n, "keepdims");
        at.keepdims = a ? a->i != 0 : true;
        if (top == OP_MEAN && dtype_is_int(in[0]->dtype)) {
            *out = int_mean(in[0], &at);
            return *out ? 0 : interp_raise_tensor_error(I);
        }
        if (top == OP_MAX || top == OP_MIN) {
            tfe_tensor *r = reduce_empty(in[0], &at, top == OP_MAX);
            if (r == (tfe_tensor *)-1) return interp_raise_tensor_error(I);
            if (r) return *out = r, 0;
        }
    } else if (!strcmp(n->op, "Concat")) {
        top = OP_CONCAT;
        a = ox_attr(n, "axis");
        at.naxes = 1;
        at.axes[0] = a ? a->i : 0;
        nin = n->nin;
    } else { /* Where */
        top = OP_WHERE;
        nin = 3;
        if (n->nin != 3) return interp_raise(I, "import_onnx(): Where takes 3 inputs");
    }
    *out = tfe_call1(top, nin, in, &at);
    return *out ? 0 : interp_raise_tensor_error(I);
}

static int run_if(Interp *I, const OxNode *n, OxEnv *e);
static int run_loop(Interp *I, const OxNode *n, OxEnv *e);

/* A graph's nodes in order, each output into e by name. */
static int run_nodes(Interp *I, const OxModel *m, OxEnv *e)
{
    int rc = 0;
    for (int i = 0; i < m->nnodes && !rc; i++) {
        const OxNode *n = &m->nodes[i];
        if (!strcmp(n->op, "If")) {
            rc = run_if(I, n, e);
            continue;
        }
        if (!strcmp(n->op, "Loop")) {
            rc = run_loop(I, n, e);
            continue;
        }
        if (!strcmp(n->op, "Split") && n->nin >= 1 && n->nout >= 1) {
            rc = run_split(I, n, e);
            continue;
        }
        if (n->nout != 1 || n->nin < 1) {
            rc = n->nout != 1 ? interp_raise(I, "import_onnx(): %s with %d outputs (tfe imports ops of one)", n->op, n->nout)
                              : interp_raise(I, "import_onnx(): %s with no inputs", n->op);
            break;
        }
        tfe_tensor *o = NULL;
        rc = run_node(I, n, e, &o);
        if (!rc) env_put(e, n->out[0], o);
    }
    return rc;
}

/* --- If and Loop: subgraphs that read the values around them by name --------------------- */

/* Subgraph g run in e (its nodes see e's values by name; its inputs are
 * ins), its outputs (new refs) into outs; e is as it was after. */
static int run_sub(Interp *I, const OxModel *g, OxEnv *e, tfe_tensor *const *ins, tfe_tensor **outs)
{
    int base = e->n, rc = 0;
    for (int i = 0; i < g->ninits; i++) {
        tensor_incref(g->inits[i]);
        env_put(e, g->init_names[i], g->inits[i]);
    }
    for (int i = 0; i < g->ninputs; i++) {
        tensor_incref(ins[i]);
        env_put(e, g->inputs[i], ins[i]);
    }
    rc = run_nodes(I, g, e);
    for (int k = 0; k < g->noutputs && !rc; k++) {
        outs[k] = env_get(e, g->outputs[k]);
        if (!outs[k]) rc = interp_raise(I, "import_onnx(): nothing in the subgraph makes its output '%s'", g->outputs[k]);
        else tensor_incref(outs[k]);
    }
    if (rc)
        for (int k = 0; k < g->noutputs; k++)
            if (outs[k]) tensor_decref(outs[k]), outs[k] = NULL;
    for (int i = base; i < e->n; i++) tensor_decref(e->t[i]);
    e->n = base;
    return rc;
}

static const OxModel *attr_graph(const OxNode *n, const char *name)
{
    const OxAttr *a = ox_attr(n, name);
    return a ? a->g : NULL;
}

/* Does t stand for a traced value (a trace records it; inside a traced
 * branch it has no value)? Then a condition on it is a graph cond/while. */
static bool traced(Interp *I, const tfe_tensor *t) { return trace_recording(I) && (t->node || !t->storage); }

/* The truth of a one-element condition; in a trace, a read of its value
 * that the trace depends on (as tfe's own if on a value at trace time). */
static int truth_of(Interp *I, const OxNode *n, tfe_tensor *c, bool *out)
{
    if (tensor_numel(c) != 1)
        return interp_raise(I, "import_onnx(): the condition of the %s making '%s' has %lld elements, not one", n->op,
                            n->nout ? n->out[0] : "?", (long long)tensor_numel(c));
    *out = tensor_get_f64(c, 0) != 0;
    return I->has_error ? -1 : 0;
}

typedef struct IfCtx { Interp *I; const OxNode *n; OxEnv *e; } IfCtx;

static int if_branch(void *ctx, int part, tfe_tensor *const *in, tfe_tensor **outs)
{
    (void)in;
    IfCtx *c = ctx;
    return run_sub(c->I, attr_graph(c->n, part == 0 ? "then_branch" : "else_branch"), c->e, NULL, outs);
}

static int run_if(Interp *I, const OxNode *n, OxEnv *e)
{
    tfe_tensor *c = env_get(e, n->in[0]);
    if (!c) return interp_raise(I, "import_onnx(): If reads '%s', which nothing made", n->in[0]);
    tfe_tensor **outs = xcalloc((size_t)n->nout + 1, sizeof *outs);
    IfCtx cx = {I, n, e};
    int rc = 1;
    if (traced(I, c)) {
        if (tensor_numel(c) != 1)
            rc = interp_raise(I, "import_onnx(): the condition of the If making '%s' has %lld elements, not one", n->out[0],
                              (long long)tensor_numel(c));
        else rc = trace_cond_fn(I, I->cur_loc, c, n->nout, if_branch, &cx, outs);
    }
    if (rc == 1) { /* eagerly, or decided at trace time */
        bool t = false;
        rc = truth_of(I, n, c, &t);
        if (!rc) rc = if_branch(&cx, t ? 0 : 1, NULL, outs);
    }
    if (!rc)
        for (int k = 0; k < n->nout; k++) env_put(e, n->out[k], outs[k]);
    free(outs);
    return rc;
}

/* ONNX's Loop as a while on the carried values (iteration, cond, v...):
 * it goes on while iteration < M (when M is given) and cond (true when not
 * given); each pass runs the body on them, whose cond output is the next
 * cond (onnxruntime's reading: a body's false ends a loop of M only too). */
typedef struct LoopCtx { Interp *I; const OxNode *n; OxEnv *e; tfe_tensor *M; int nv; } LoopCtx;

static int loop_part(void *ctx, int part, tfe_tensor *const *in, tfe_tensor **outs)
{
    LoopCtx *c = ctx;
    tfe_attrs at;
    tfe_attrs_init(&at);
    if (part == 0) {
        tfe_tensor *r = NULL;
        if (c->M) {
            tfe_tensor *ab[2] = {in[0], c->M};
            r = tfe_call1(OP_LT, 2, ab, &at);
            if (!r) return interp_raise_tensor_error(c->I);
        }
        tfe_tensor *ab[2] = {r, in[1]};
        tfe_tensor *q = r ? tfe_call1(OP_LOGICAL_AND, 2, ab, &at) : (tensor_incref(in[1]), in[1]);
        if (r) tensor_decref(r);
        if (!q) return interp_raise_tensor_error(c->I);
        r = q;
        outs[0] = r;
        return 0;
    }
    const OxModel *body = attr_graph(c->n, "body");
    tfe_tensor **bo = xcalloc((size_t)body->noutputs + 1, sizeof *bo);
    int rc = run_sub(c->I, body, c->e, in, bo);
    if (!rc) {
        tfe_tensor *one = tensor_from_f64(1, TFE_INT64);
        tfe_tensor *ab[2] = {in[0], one};
        if (one) one->weak = false;
        outs[0] = one ? tfe_call1(OP_ADD, 2, ab, &at) : NULL;
        if (one) tensor_decref(one);
        if (!outs[0]) rc = interp_raise_tensor_error(c->I);
    }
    if (!rc) {
        /* the body's cond: a bool of one element (it decides only when the loop has a cond) */
        tfe_tensor *bc = bo[0];
        if (bc->dtype != TFE_BOOL || tensor_numel(bc) != 1 || bc->rank)
            rc = interp_raise(c->I, "import_onnx(): the body of the Loop making '%s' gives a condition of %s with %lld "
                              "elements (a bool scalar it must be)", c->n->out[0], dtype_name(bc->dtype),
                              (long long)tensor_numel(bc));
        else {
            tensor_incref(bc);
            outs[1] = bc;
        }
        for (int k = 0; k < c->nv && !rc; k++) {
            tensor_incref(bo[1 + k]);
            outs[2 + k] = bo[1 + k];
        }
    }
    for (int k = 0; k < body->noutputs; k++)
        if (bo[k]) tensor_decref(bo[k]);
    free(bo);
    if (rc)
        for (int k = 0; k < c->nv + 2; k++)
            if (outs[k]) tensor_decref(outs[k]), outs[k] = NULL;
    return rc;
}

static int run_loop(Interp *I, const OxNode *n, OxEnv *e)
{
    int nv = n->nin - 2 > 0 ? n->nin - 2 : 0, rc = 0;
    tfe_tensor **v = xcalloc((size_t)nv + 2, sizeof *v), **nx = xcalloc((size_t)nv + 2, sizeof *nx);
    tfe_tensor *in[2] = {NULL, NULL};
    for (int i = 0; i < n->nin && !rc; i++) {
        if (!n->in[i][0]) continue;
        tfe_tensor *t = env_get(e, n->in[i]);
        if (!t) rc = interp_raise(I, "import_onnx(): Loop reads '%s', which nothing made", n->in[i]);
        else if (i < 2) in[i] = t;
        else {
            tensor_incref(t);
            v[2 + i - 2] = t;
        }
    }
    LoopCtx cx = {I, n, e, in[0], nv};
    if (!rc && in[0] && (in[0]->dtype != TFE_INT64 || tensor_numel(in[0]) != 1))
        rc = interp_raise(I, "import_onnx(): the trip count M of the Loop making '%s' is %s with %lld elements (an int64 "
                          "scalar it must be)", n->nout ? n->out[0] : "?", dtype_name(in[0]->dtype), (long long)tensor_numel(in[0]));
    if (!rc && in[1] && (in[1]->dtype != TFE_BOOL || tensor_numel(in[1]) != 1))
        rc = interp_raise(I, "import_onnx(): the condition of the Loop making '%s' is %s with %lld elements (a bool "
                          "scalar it must be)", n->nout ? n->out[0] : "?", dtype_name(in[1]->dtype), (long long)tensor_numel(in[1]));
    if (!rc) {
        /* (iteration, cond) carried first; the body's cond input is a scalar */
        tfe_tensor *it = tensor_from_f64(0, TFE_INT64), *c0 = NULL;
        it->weak = false;
        v[0] = it;
        if (in[1]) {
            tfe_attrs at;
            tfe_attrs_init(&at);
            at.nints = 0;
            c0 = in[1]->rank ? tfe_call1(OP_RESHAPE, 1, &in[1], &at) : (tensor_incref(in[1]), in[1]);
            if (!c0) rc = interp_raise_tensor_error(I);
        } else {
            c0 = tensor_from_f64(1, TFE_BOOL);
            c0->weak = false;
        }
        v[1] = c0;
    }
    int nc = nv + 2;
    rc = rc ? rc : 1;
    if (rc == 1 && trace_recording(I)) rc = trace_while_fn(I, I->cur_loc, nc, v, loop_part, &cx, nx);
    if (rc == 0) {
        for (int k = 0; k < nc; k++) tensor_decref(v[k]), v[k] = nx[k], nx[k] = NULL;
    }
    while (rc == 1) { /* eagerly, or decided at trace time */
        tfe_tensor *c = NULL;
        bool go = false;
        rc = loop_part(&cx, 0, v, &c);
        if (!rc) rc = truth_of(I, n, c, &go);
        if (c) tensor_decref(c);
        if (rc) break;
        if (!go) break;
        rc = loop_part(&cx, 1, v, nx);
        if (rc) break;
        for (int k = 0; k < nc; k++) tensor_decref(v[k]), v[k] = nx[k], nx[k] = NULL;
        rc = 1;
    }
    if (rc == 1) rc = 0;
    for (int k = 0; k < n->nout && !rc; k++) {
        tensor_incref(v[2 + k]);
        env_put(e, n->out[k], v[2 + k]);
    }
    for (int k = 0; k < nc; k++) {
        if (v[k]) tensor_decref(v[k]);
        if (nx[k]) tensor_decref(nx[k]);
    }
    free(v);
    free(nx);
    return rc;
}

/* Whether a call's argument is of its input's declared dtype, rank and
 * fixed sizes (a model run on another shape computes something else, or
 * fails deep inside with a message about a node). */
static bool type_fits(const OxType *ty, const tfe_tensor *t)
{
    bool ok;
    tfe_dtype dt = ox_dtype_of(ty->elem, &ok);
    if (ty->elem && (!ok || dt != t->dtype)) return false;
    if (ty->rank < 0) return true;
    if (ty->rank != t->rank) return false;
    for (int d = 0; d < t->rank; d++)
        if (ty->dims[d] >= 0 && !ty->dnames[d] && ty->dims[d] != t->shape[d]) return false;
    return true;
}

/* "float32[batch, 4]" of a declared type (ty) or of a tensor (t) */
static void type_str(const OxType *ty, const tfe_tensor *t, char *b, size_t cap)
{
    bool ok = true;
    tfe_dtype dt = t ? t->dtype : ox_dtype_of(ty->elem, &ok);
    int rank = t ? t->rank : ty->rank;
    size_t n;
    if (!t && !ty->elem) n = (size_t)snprintf(b, cap, "any type");
    else if (ok) n = (size_t)snprintf(b, cap, "%s", dtype_name(dt));
    else n = (size_t)snprintf(b, cap, "%s", ox_dtype_name(ty->elem));
    if (rank < 0 || n >= cap) return;
    n += (size_t)snprintf(b + n, cap - n, "[");
    for (int d = 0; d < rank && d < TFE_MAX_RANK && n < cap; d++) {
        const char *sep = d ? ", " : "";
        if (t) n += (size_t)snprintf(b + n, cap - n, "%s%lld", sep, (long long)t->shape[d]);
        else if (ty->dnames[d]) n += (size_t)snprintf(b + n, cap - n, "%s%.40s", sep, ty->dnames[d]);
        else if (ty->dims[d] >= 0) n += (size_t)snprintf(b + n, cap - n, "%s%lld", sep, (long long)ty->dims[d]);
        else n += (size_t)snprintf(b + n, cap - n, "%s?", sep);
    }
    if (n < cap) snprintf(b + n, cap - n, "]");
}

BUILTIN(bi_onnx_call)
{
    (void)data;
    (void)kwnames;
    (void)kwvals;
    OnnxObj *ob = (OnnxObj *)argv[0].u.o;
    OxModel *m = ob->m;
    if (nkw) return interp_raise(I, "an imported ONNX model takes its inputs by position");
    if (argc - 1 != m->ninputs)
        return interp_raise(I, "the ONNX model '%s' takes %d input%s, got %d", ob->path, m->ninputs, m->ninputs == 1 ? "" : "s",
                            argc - 1);
    OxEnv e = {0};
    int rc = 0;
    for (int i = 0; i < m->ninits; i++) {
        tensor_incref(m->inits[i]);
        env_put(&e, m->init_names[i], m->inits[i]);
    }
    for (int i = 0; i < m->ninputs && !rc; i++) {
        tfe_tensor *t = arg_tensor(I, "ONNX model", m->inputs[i], argv[1 + i]);
        if (!t) rc = -1;
        else if (!type_fits(&m->in_types[i], t)) {
            char want[400], got[400];
            type_str(&m->in_types[i], NULL, want, sizeof want);
            type_str(NULL, t, got, sizeof got);
            rc = interp_raise(I, "the ONNX model '%s' takes its input '%s' as %s, given %s", ob->path, m->inputs[i], want, got);
            tensor_decref(t);
        } else env_put(&e, m->inputs[i], t);
    }
    if (!rc) rc = run_nodes(I, m, &e);
    Value res = v_nil();
    if (!rc) {
        Seq *t = m->noutputs == 1 ? NULL : seq_new(m->noutputs);
        if (t) t->h.kind = V_TUPLE;
        for (int i = 0; i < m->noutputs && !rc; i++) {
            tfe_tensor *o = env_get(&e, m->outputs[i]);
            if (!o) {
                rc = interp_raise(I, "import_onnx(): nothing makes the output '%s'", m->outputs[i]);
                break;
            }
            tensor_incref(o);
            if (t) seq_push_take(t, v_tensor_take(o));
            else res = v_tensor_take(o);
        }
        if (t) {
            if (rc) value_decref(v_obj(V_TUPLE, t));
            else res = v_obj(V_TUPLE, t);
        }
    }
    for (int i = 0; i < e.n; i++) tensor_decref(e.t[i]);
    free(e.names);
    free(e.t);
    if (!rc) *out = res;
    return rc;
}

static void onnxobj_free(Obj *o)
{
    OnnxObj *ob = (OnnxObj *)o;
    ox_model_free(ob->m);
    free(ob->path);
    free(o);
}

static char *onnxobj_repr(Obj *o)
{
    OnnxObj *ob = (OnnxObj *)o;
    char b[600];
    snprintf(b, sizeof b, "<onnx model %s: %d inputs, %d outputs, %d nodes>", ob->path, ob->m->ninputs, ob->m->noutputs,
             ob->m->nnodes);
    return xstrdup(b);
}

static const ObjectClass onnx_class = {.name = "onnx model", .free = onnxobj_free, .repr = onnxobj_repr};

/* The ops of g and its subgraphs that import does not read, each once
 * (seen: the names listed so far). */
static void collect_bad(const OxModel *g, const char ***seen, int *nbad, Buf *bad)
{
    for (int i = 0; i < g->nnodes; i++) {
        const OxNode *n = &g->nodes[i];
        const char *op = n->op;
        bool listed = supported(op);
        for (int j = 0; j < *nbad && !listed; j++) listed = !strcmp((*seen)[j], op);
        if (!listed) {
            *seen = xrealloc(*seen, sizeof **seen * (size_t)(*nbad + 1));
            (*seen)[*nbad] = op;
            if ((*nbad)++) buf_puts(bad, ", ");
            /* a name from the file: printable ASCII only in the message */
            for (const char *c = op; *c && c - op < 60; c++) buf_add(bad, (*c >= 32 && *c < 127) ? c : "?", 1);
            if (!*op) buf_puts(bad, "(no op type)");
        }
        for (int a = 0; a < n->nat; a++)
            if (n->at[a].g) collect_bad(n->at[a].g, seen, nbad, bad);
    }
}

/* The node's name in a message: its first output (printable ASCII). */
static const char *node_name(const OxNode *n, char *b, size_t cap)
{
    size_t k = 0;
    const char *o = n->nout ? n->out[0] : "";
    for (; *o && k + 1 < cap && k < 60; o++) b[k++] = (*o >= 32 && *o < 127) ? *o : '?';
    b[k] = 0;
    return b;
}

/* The index of the node of g that makes value name, or -1. */
static int maker_of(const OxModel *g, const char *name)
{
    for (int j = 0; j < g->nnodes; j++)
        for (int o = 0; o < g->nodes[j].nout; o++)
            if (g->nodes[j].out[o][0] && !strcmp(g->nodes[j].out[o], name)) return j;
    return -1;
}

/* ONNX's single assignment and order, which import's run relies on: a value
 * made twice (by two nodes, or a node and an input or initializer) is an
 * invalid model that the later maker would silently win; a node reading a
 * value that a later node makes is out of order (or in a cycle). */
static int check_order(const OxModel *g, char *why, size_t cap)
{
    char nm[64];
    for (int i = 0; i < g->nnodes; i++) {
        const OxNode *n = &g->nodes[i];
        for (int o = 0; o < n->nout; o++) {
            const char *v = n->out[o];
            if (!v[0]) continue;
            int first = maker_of(g, v);
            bool given = false;
            for (int k = 0; k < g->ninputs && !given; k++) given = !strcmp(g->inputs[k], v);
            for (int k = 0; k < g->ninits && !given; k++) given = !strcmp(g->init_names[k], v);
            if (first != i || given)
                return snprintf(why, cap, "the value '%.60s' is made twice (by the %s making '%s'%s), which ONNX forbids",
                                v, n->op, node_name(n, nm, sizeof nm), given ? " and as an input or initializer" : " and an earlier node"), -1;
        }
        for (int k = 0; k < n->nin; k++) {
            if (!n->in[k][0]) continue;
            int j = maker_of(g, n->in[k]);
            if (j >= i)
                return snprintf(why, cap, "the %s making '%s' reads '%.60s', which %s makes after it (ONNX's nodes are in "
                                "order: a cycle?)", n->op, node_name(n, nm, sizeof nm), n->in[k], j == i ? "it itself" : "a node"), -1;
        }
    }
    return 0;
}

/* What import cannot run, said before a call: an op's attributes
 * (import_nn_check), an If's or a Loop's subgraphs of the wrong form. */
static int check_graph(const OxModel *g, int depth, char *why, size_t cap)
{
    if (check_order(g, why, cap)) return -1;
    for (int i = 0; i < g->nnodes; i++) {
        const OxNode *n = &g->nodes[i];
        char nm[64];
        if (import_nn_handles(n->op) && import_nn_check(n, why, cap)) return -1;
        if (!strcmp(n->op, "If")) {
            const OxModel *b[2] = {attr_graph(n, "then_branch"), attr_graph(n, "else_branch")};
            if (n->nin != 1) return snprintf(why, cap, "the If making '%s' has %d inputs, not 1 (its condition)", node_name(n, nm, sizeof nm), n->nin), -1;
            for (int k = 0; k < 2; k++) {
                const char *bn = k ? "else_branch" : "then_branch";
                if (!b[k]) return snprintf(why, cap, "the If making '%s' has no %s graph", node_name(n, nm, sizeof nm), bn), -1;
                if (b[k]->ninputs) return snprintf(why, cap, "the %s of the If making '%s' has %d inputs (a branch takes none)", bn, node_name(n, nm, sizeof nm), b[k]->ninputs), -1;
                if (b[k]->noutputs != n->nout)
                    return snprintf(why, cap, "the %s of the If making '%s' has %d outputs, the If %d", bn, node_name(n, nm, sizeof nm), b[k]->noutputs, n->nout), -1;
            }
        } else if (!strcmp(n->op, "Loop")) {
            const OxModel *b = attr_graph(n, "body");
            int nv = n->nin - 2 > 0 ? n->nin - 2 : 0;
            if (!b) return snprintf(why, cap, "the Loop making '%s' has no body graph", node_name(n, nm, sizeof nm)), -1;
            if (b->ninputs != nv + 2)
                return snprintf(why, cap, "the body of the Loop making '%s' takes %d inputs, not %d (iteration, condition and %d carried)", node_name(n, nm, sizeof nm), b->ninputs, nv + 2, nv), -1;
            if (b->noutputs < nv + 1)
                return snprintf(why, cap, "the body of the Loop making '%s' has %d outputs, not %d (condition and %d carried)", node_name(n, nm, sizeof nm), b->noutputs, nv + 1, nv), -1;
            if (b->noutputs > nv + 1 || n->nout > nv) {
                int ns = b->noutputs - nv - 1;
                return snprintf(why, cap, "the Loop making '%s' has %d scan output%s ('%.60s'...), which tfe does not import "
                                "(only loop-carried values)", node_name(n, nm, sizeof nm), ns > 0 ? ns : n->nout - nv, ns == 1 ? "" : "s",
                                ns > 0 ? b->outputs[nv + 1] : n->out[nv]), -1;
            }
        }
        for (int a = 0; a < n->nat; a++)
            if (n->at[a].g && check_graph(n->at[a].g, depth + 1, why, cap)) return -1;
    }
    return 0;
}

/* import_onnx(path): the model as a callable (docs/export.md, "Importing"). */
BUILTIN(bi_import_onnx)
{
    (void)data;
    Value a[1];
    bool p[1];
    if (args_parse(I, "import_onnx", "path", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    const char *path;
    if (arg_string(I, "import_onnx()", "path", a[0], &path)) return -1;
    FILE *f = fopen(path, "rb");
    if (!f) return interp_raise(I, "import_onnx(): cannot open '%s'", path);
    Buf b = {0};
    char tmp[65536];
    size_t k;
    while ((k = fread(tmp, 1, sizeof tmp, f)) > 0) buf_add(&b, tmp, k);
    fclose(f);
    char err[300] = "";
    OxModel *m = ox_model_read(b.s ? b.s : "", b.len, err, sizeof err);
    free(b.s);
    if (!m) return interp_raise(I, "import_onnx(): '%s': %s", path, err);
    /* every unsupported op at once (subgraphs' included) */
    Buf bad = {0};
    int nbad = 0;
    const char **seen = NULL;
    collect_bad(m, &seen, &nbad, &bad);
    free(seen);
    if (!nbad) {
        char why[300] = "";
        if (check_graph(m, 0, why, sizeof why)) {
            int rc = interp_raise(I, "import_onnx(): '%s': %s", path, why);
            ox_model_free(m);
            return rc;
        }
    }
    if (nbad) {
        buf_add(&bad, "", 1);
        int rc = interp_raise(I, "import_onnx(): '%s' has ops tfe does not import: %s", path, bad.s);
        free(bad.s);
        ox_model_free(m);
        return rc;
    }
    OnnxObj *ob = object_new(sizeof *ob, &onnx_class);
    ob->m = m;
    ob->path = xstrdup(path);
    Value fn = builtin_new("onnx model", bi_onnx_call, NULL);
    ((Builtin *)fn.u.o)->self = v_obj(V_OBJECT, ob);
    *out = fn;
    return 0;
}

void stage_import_builtins_register(Interp *I) { interp_define_builtin(I, "import_onnx", bi_import_onnx, NULL); }
