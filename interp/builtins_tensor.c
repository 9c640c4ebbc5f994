/* builtins_tensor.c — the language bindings of the tensor ops: argument
 * parsing for every tensor builtin (docs/builtins.md), [...] literals, indexing
 * and tensor fields. Every op runs through tfe_execute and its wrappers. */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp/builtins_args.h"
#include "interp/interp.h"
#include "tensor/ops.h"
#include "stage/trace.h"
#include "util/xalloc.h"

/* Axis convention: the bindings normalise every axis (negative counts from
 * the end) and check its range before calling an op, so the attrs handed to
 * tfe_execute always hold 0 <= axis < rank (rank + 1 for expand_dims/stack). */

#define PARSE(fname, spec, n)                                                          \
    Value a[n];                                                                        \
    bool p[n];                                                                         \
    (void)p;                                                                           \
    if (args_parse(I, fname, spec, argc, argv, nkw, kwnames, kwvals, a, p)) return -1

#define OP_OF(data) ((tfe_op)(intptr_t)(data))

/* ---- value helpers --------------------------------------------------------- */

static const char *article(const char *word)
{
    return strchr("aeiou", word[0]) && word[0] ? "an" : "a";
}

static const char *str_of(Value v) { return ((Str *)v.u.o)->s; }

/* A tensor with a value (not a symbolic tensor inside a staged branch or
 * loop). Reading a traced one's value makes the trace depend on it
 * (stage/trace.c). */
static bool concrete(const tfe_tensor *t) { return t->storage != NULL; }

/* A dtype given by name ("float32"); nil gives def. */
static int get_dtype(Interp *I, const char *fn, Value v, tfe_dtype def, tfe_dtype *out)
{
    *out = def;
    if (v.kind == V_NIL) {
        *out = def;
        return 0;
    }
    if (v.kind == V_BUILTIN && (!strcmp(((Builtin *)v.u.o)->name, "float") || !strcmp(((Builtin *)v.u.o)->name, "int"))) {
        /* NumPy's astype(float) / astype(int), PyTorch's .to(float): the
         * conversion functions, not dtypes; NumPy takes them as 64 bits */
        const char *nm = ((Builtin *)v.u.o)->name;
        return interp_raise(I, "%s: dtype must be a dtype name, got the function %s; write %s (NumPy's "
                               "astype(%s) is %s)", fn, nm,
                            !strcmp(nm, "float") ? "float32 or float64" : "int64 or int32", nm,
                            !strcmp(nm, "float") ? "float64" : "int64");
    }
    if (v.kind != V_STR)
        return arg_error(I, fn, "dtype", "a string such as \"float32\"", v);
    int d = dtype_from_name(str_of(v));
    if (d < 0)
        return interp_raise(I, "%s: unknown dtype \"%s\" (expected bool, int32, int64, float32, "
                            "float64, float16 or bfloat16)", fn, str_of(v));
    *out = (tfe_dtype)d;
    return 0;
}

/* The elements of a tuple or list (borrowed), or false. */
static bool as_seq(Value v, int *n, const Value **items)
{
    if (v.kind != V_TUPLE && v.kind != V_LIST) return false;
    Seq *s = (Seq *)v.u.o;
    *n = s->n;
    *items = s->items;
    return true;
}

/* A shape: an int, a tuple/list of ints, or a 1-D int tensor. allow_neg1
 * admits one -1 (reshape); what names the argument in messages. */
static int get_shape(Interp *I, const char *fn, const char *what, Value v, bool allow_neg1,
                     int *rank, int64_t *shape)
{
    int64_t one;
    int n = 0;
    const Value *items = NULL;
    tfe_tensor *t = NULL;
    if (arg_as_int(v, &one)) {
        n = 1;
        shape[0] = one;
    } else if (as_seq(v, &n, &items)) {
        if (n > TFE_MAX_RANK)
            return interp_raise(I, "%s: %s has %d dimensions; at most %d are supported", fn, what, n,
                                TFE_MAX_RANK);
        for (int i = 0; i < n; i++)
            if (!arg_as_int(items[i], &shape[i]))
                return interp_raise(I, "%s: %s must be a tuple of ints, got %s %s in it", fn, what,
                                    article(value_kind_name(items[i])), value_kind_name(items[i]));
    } else if (v.kind == V_TENSOR && (t = v.u.t)->rank == 1 && dtype_is_int(t->dtype) && concrete(t)) {
        if (t->shape[0] > TFE_MAX_RANK)
            return interp_raise(I, "%s: %s has %lld dimensions; at most %d are supported", fn, what,
                                (long long)t->shape[0], TFE_MAX_RANK);
        n = (int)t->shape[0];
        for (int i = 0; i < n; i++) shape[i] = tensor_get_i64(t, i);
    } else {
        return arg_error(I, fn, what, "a tuple of ints", v);
    }
    int nneg = 0;
    for (int i = 0; i < n; i++) {
        if (shape[i] >= 0) continue;
        if (allow_neg1 && shape[i] == -1 && nneg++ == 0) continue;
        if (allow_neg1 && shape[i] == -1)
            return interp_raise(I, "%s: %s can have only one -1", fn, what);
        return interp_raise(I, "%s: negative dimension %lld in %s", fn, (long long)shape[i], what);
    }
    *rank = n;
    return 0;
}

/* The varargs form of a shape, as NumPy's and PyTorch's: zeros(2, 3) is
 * zeros((2, 3)), x.reshape(2, 3) is reshape(x, (2, 3)). A run of two or more
 * int arguments from position k on is packed into one tuple and fn called
 * again with it; 1 when there is no such run (the caller goes on). */
static bool int_like(Value v)
{
    return (v.kind == V_SCALAR && dtype_is_int((tfe_dtype)v.dtype)) ||
           (v.kind == V_TENSOR && v.u.t->rank == 0 && dtype_is_int(v.u.t->dtype));
}

static int shape_varargs(Interp *I, BuiltinFn fn, int k, int argc, const Value *argv, int nkw,
                         Str *const *kwnames, const Value *kwvals, Value *out, void *data)
{
    int end = k;
    while (end < argc && int_like(argv[end])) end++;
    if (end - k < 2) return 1;
    Seq *t = seq_new(end - k);
    t->h.kind = V_TUPLE;
    for (int i = k; i < end; i++) {
        value_incref(argv[i]);
        seq_push_take(t, argv[i]);
    }
    Value buf[16];
    int n = argc - (end - k) + 1;
    Value *args = n <= 16 ? buf : xmalloc(sizeof(Value) * (size_t)n);
    memcpy(args, argv, sizeof(Value) * (size_t)k);
    args[k] = v_obj(V_TUPLE, t);
    memcpy(args + k + 1, argv + end, sizeof(Value) * (size_t)(argc - end));
    int rc = fn(I, n, args, nkw, kwnames, kwvals, out, data);
    if (args != buf) free(args);
    value_decref(v_obj(V_TUPLE, t));
    return rc;
}

#define SHAPE_VARARGS(fn, k)                                                              \
    do {                                                                                  \
        int rc_ = shape_varargs(I, fn, k, argc, argv, nkw, kwnames, kwvals, out, data);    \
        if (rc_ != 1) return rc_;                                                         \
    } while (0)

/* Normalise one axis for a tensor of the given rank. */
static int norm_axis(Interp *I, const char *fn, int64_t axis, int rank, int *out)
{
    if (axis < -rank || axis >= rank)
        return interp_raise(I, "%s: axis %lld is out of range for a tensor of rank %d", fn,
                            (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return 0;
}

/* axis=: nil (all axes: naxes -1), an int, or a tuple/list of ints; into at. */
static int get_axes(Interp *I, const char *fn, Value v, int rank, tfe_attrs *at)
{
    if (v.kind == V_NIL) {
        at->naxes = -1;
        return 0;
    }
    int64_t one;
    int n;
    const Value *items;
    if (arg_as_int(v, &one)) {
        int ax = 0;
        if (norm_axis(I, fn, one, rank, &ax)) return -1;
        at->naxes = 1;
        at->axes[0] = ax;
        return 0;
    }
    if (!as_seq(v, &n, &items))
        return arg_error(I, fn, "axis", "an int, a tuple of ints or nil", v);
    if (n > rank)
        return interp_raise(I, "%s: %d axes given for a tensor of rank %d", fn, n, rank);
    for (int i = 0; i < n; i++) {
        int ax = 0;
        if (!arg_as_int(items[i], &one))
            return interp_raise(I, "%s: axis must be a tuple of ints, got %s %s in it", fn,
                                article(value_kind_name(items[i])), value_kind_name(items[i]));
        if (norm_axis(I, fn, one, rank, &ax)) return -1;
        for (int j = 0; j < i; j++)
            if (at->axes[j] == ax) return interp_raise(I, "%s: axis %d is repeated", fn, ax);
        at->axes[i] = ax;
    }
    at->naxes = n;
    return 0;
}

/* An int or a pair (h, w) of positive ints: stride, dilation, pool size. */
static int get_pair(Interp *I, const char *fn, const char *arg, Value v, int64_t out[2])
{
    int n;
    const Value *items;
    if (arg_as_int(v, &out[0])) {
        out[1] = out[0];
    } else if (as_seq(v, &n, &items) && n == 2 && arg_as_int(items[0], &out[0]) &&
               arg_as_int(items[1], &out[1])) {
    } else {
        return arg_error(I, fn, arg, "an int or a pair (h, w) of ints", v);
    }
    if (out[0] < 1 || out[1] < 1)
        return interp_raise(I, "%s: %s must be positive, got (%lld, %lld)", fn, arg,
                            (long long)out[0], (long long)out[1]);
    return 0;
}

static int get_padding(Interp *I, const char *fn, Value v, int64_t *out)
{
    if (v.kind == V_NIL) {
        *out = 0;
        return 0;
    }
    if (v.kind == V_STR) {
        const char *s = str_of(v);
        if (!strcmp(s, "valid") || !strcmp(s, "VALID")) { *out = 0; return 0; }
        if (!strcmp(s, "same") || !strcmp(s, "SAME")) { *out = 1; return 0; }
        return interp_raise(I, "%s: padding must be \"valid\" or \"same\", got \"%s\"", fn, s);
    }
    return arg_error(I, fn, "padding", "\"valid\" or \"same\"", v);
}

/* An op result into *out (0-d results become scalars); NULL raises the
 * tensor library's error. */
static int finish(Interp *I, tfe_tensor *r, Value *out)
{
    if (!r) return interp_raise_tensor_error(I);
    *out = value_from_tensor_take(r);
    return 0;
}

static Value shape_tuple(int rank, const int64_t *shape)
{
    Seq *s = seq_new(rank);
    for (int i = 0; i < rank; i++) seq_push_take(s, v_int(shape[i]));
    return v_obj(V_TUPLE, s);
}

static void shape_attrs(tfe_attrs *at, int rank, const int64_t *shape)
{
    at->nints = rank;
    memcpy(at->ints, shape, sizeof(int64_t) * (size_t)rank);
}

/* One op on one tensor argument with attrs: op(x) -> *out. */
static int run1(Interp *I, tfe_op op, tfe_tensor *x, const tfe_attrs *at, Value *out)
{
    tfe_tensor *r = tfe_call1(op, 1, &x, at);
    return finish(I, r, out);
}

/* Decref a set of borrowed-then-boxed tensors (NULLs skipped). */
static void release(int n, tfe_tensor **ts)
{
    for (int i = 0; i < n; i++)
        if (ts[i]) tensor_decref(ts[i]);
}

/* Boxes a tuple/list of tensors (fn's xs argument). Returns a malloc'd array of
 * new references, or NULL (raised). */
static tfe_tensor **get_tensor_seq(Interp *I, const char *fn, Value v, int *n_out)
{
    int n;
    const Value *items;
    if (!as_seq(v, &n, &items)) {
        interp_raise(I, "%s: expected a tuple or list of tensors, got %s", fn, value_kind_name(v));
        return NULL;
    }
    if (n == 0) {
        interp_raise(I, "%s: needs at least one tensor", fn);
        return NULL;
    }
    tfe_tensor **ts = try_calloc((size_t)n, sizeof *ts);
    if (!ts) {
        interp_raise(I, "%s: out of memory", fn);
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        ts[i] = value_to_tensor(items[i]);
        if (!ts[i]) {
            interp_raise(I, "%s: element %d is %s %s, not a tensor", fn, i,
                         article(value_kind_name(items[i])), value_kind_name(items[i]));
            release(i, ts);
            free(ts);
            return NULL;
        }
    }
    *n_out = n;
    return ts;
}

/* ---- create ---------------------------------------------------------------- */

static tfe_tensor *build_stack(Interp *I, const char *who, int n, const Value *items, bool nested,
                               tfe_dtype want);

/* tensor(x, dtype=nil): like numpy.array; nested tuples/lists are stacked. */
BUILTIN(bi_tensor)
{
    PARSE("tensor", "x, dtype=", 2);
    tfe_tensor *t;
    int n;
    const Value *items;
    /* a float literal meets the dtype asked for: tensor(0.1, dtype=float64)
     * holds the double 0.1 */
    tfe_dtype want = TFE_BOOL;
    if (a[1].kind != V_NIL && get_dtype(I, "tensor", a[1], TFE_BOOL, &want)) return -1;
    if (as_seq(a[0], &n, &items)) t = build_stack(I, "tensor", n, items, true, want);
    else if (a[0].kind == V_SCALAR) t = value_to_tensor_for(a[0], want);
    else t = arg_tensor(I, "tensor", "x", a[0]);
    if (!t) return -1;
    tfe_dtype dt = a[1].kind != V_NIL ? want : t->dtype;
    if (dt != t->dtype) {
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.dtype = dt;
        tfe_tensor *c = tfe_call1(OP_CAST, 1, &t, &at);
        tensor_decref(t);
        if (!c) return interp_raise_tensor_error(I);
        t = c;
    }
    if (t->weak) {
        /* tensor(2) is a committed int64, not a weak literal */
        if (t->refcount == 1) {
            t->weak = false;
        } else {
            tfe_tensor *c = tfe_unary(OP_COPY, t);
            tensor_decref(t);
            if (!c) return interp_raise_tensor_error(I);
            t = c;
            t->weak = false;
        }
    }
    return finish(I, t, out);
}

/* A number argument v read as x (rounded to its dtype), in a result of dtype
 * dt: a float literal's exact value when dt is float64. */
static double lit_value(Value v, double x, tfe_dtype dt)
{
    return v.kind == V_SCALAR && v.lit && dt == TFE_FLOAT64 ? v.u.f : x;
}

/* FULL with a shape, a value and a dtype. */
static int make_full(Interp *I, int rank, const int64_t *shape, double v, tfe_dtype dt, Value *out)
{
    tfe_attrs at;
    tfe_attrs_init(&at);
    shape_attrs(&at, rank, shape);
    at.dtype = dt;
    at.f[0] = v;
    return finish(I, tfe_call1(OP_FULL, 0, NULL, &at), out);
}

/* zeros(shape, dtype=float32), ones(...): data is the fill value 0 or 1. */
BUILTIN(bi_zeros_ones)
{
    SHAPE_VARARGS(bi_zeros_ones, 0);
    const char *fn = data ? "ones" : "zeros";
    PARSE(fn, "shape, dtype=", 2);
    int rank;
    int64_t shape[TFE_MAX_RANK];
    tfe_dtype dt = TFE_FLOAT32;
    if (get_shape(I, fn, "shape", a[0], false, &rank, shape) || get_dtype(I, fn, a[1], TFE_FLOAT32, &dt))
        return -1;
    return make_full(I, rank, shape, data ? 1.0 : 0.0, dt, out);
}

/* zeros_like(x, dtype=nil), ones_like */
BUILTIN(bi_like)
{
    const char *fn = data ? "ones_like" : "zeros_like";
    PARSE(fn, "x, dtype=", 2);
    tfe_tensor *x = arg_tensor(I, fn, "x", a[0]);
    if (!x) return -1;
    tfe_dtype dt = TFE_FLOAT32;
    if (I->tracer) trace_size_used(I, x); /* a constant of x's shape */
    int rc = get_dtype(I, fn, a[1], x->dtype, &dt);
    if (!rc) rc = make_full(I, x->rank, x->shape, data ? 1.0 : 0.0, dt, out);
    tensor_decref(x);
    return rc;
}

/* full(shape, value, dtype=nil): dtype from the value (literals: int64/float32/bool). */
BUILTIN(bi_full)
{
    PARSE("full", "shape, value, dtype=", 3);
    int rank;
    int64_t shape[TFE_MAX_RANK];
    double v = 0;
    tfe_dtype vdt = TFE_FLOAT32, dt = TFE_FLOAT32;
    if (get_shape(I, "full", "shape", a[0], false, &rank, shape) ||
        arg_number(I, "full", "value", a[1], &v, &vdt) || get_dtype(I, "full", a[2], vdt, &dt))
        return -1;
    if (a[1].kind != V_SCALAR) {
        /* a tensor value (0-d; a variable's): the value cast and broadcast,
         * so that a tape sees where it came from (full's own kernel holds
         * a number: the gradient was silently zeros). The same bits: the
         * cast rounds as the fill does. */
        tfe_tensor *t = value_to_tensor(a[1]), *c = NULL, *r = NULL;
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.dtype = dt;
        if (t) c = tfe_call1(OP_CAST, 1, &t, &at);
        tfe_attrs_init(&at);
        shape_attrs(&at, rank, shape);
        if (c) r = tfe_call1(OP_BROADCAST_TO, 1, &c, &at);
        if (t) tensor_decref(t);
        if (c) tensor_decref(c);
        return finish(I, r, out);
    }
    v = lit_value(a[1], v, dt);
    return make_full(I, rank, shape, v, dt, out);
}

/* arange(stop) / arange(start, stop, step=1, dtype=nil) */
BUILTIN(bi_arange)
{
    PARSE("arange", "start, stop=, step=, dtype=", 4);
    double lim[3] = {0, 0, 1};
    tfe_dtype dts[3] = {TFE_INT64, TFE_INT64, TFE_INT64};
    bool weak[3] = {true, true, true};
    const char *names[3] = {"start", "stop", "step"};
    Value vals[3] = {a[0], a[1], a[2]};
    if (!p[1]) { /* arange(stop) */
        vals[0] = v_nil();
        vals[1] = a[0];
    }
    for (int i = 0; i < 3; i++) {
        if (vals[i].kind == V_NIL) continue;
        if (arg_number(I, "arange", names[i], vals[i], &lim[i], &dts[i])) return -1;
        weak[i] = vals[i].kind == V_SCALAR ? vals[i].weak : vals[i].u.t->weak;
    }
    if (lim[2] == 0) return interp_raise(I, "arange: step must not be zero");
    bool w;
    tfe_dtype def = dtype_promote(dts[0], weak[0], dts[1], weak[1], &w);
    def = dtype_promote(def, w, dts[2], weak[2], &w);
    if (def == TFE_BOOL) def = TFE_INT64;
    tfe_dtype dt = TFE_FLOAT32;
    if (get_dtype(I, "arange", a[3], def, &dt)) return -1;
    /* The length is NumPy's ceil((stop - start) / step) in double from the
     * values as written (a float literal's double, not its float32 rounding:
     * arange(0.0, 0.3, 0.1) has 3 elements); it travels in ints[0] so that
     * shape inference, eager or staged, uses the same count. */
    double raw[3];
    for (int i = 0; i < 3; i++)
        raw[i] = vals[i].kind == V_SCALAR && vals[i].lit && dtype_is_float((tfe_dtype)vals[i].dtype)
                     ? vals[i].u.f : lim[i];
    double n = ceil((raw[1] - raw[0]) / raw[2]);
    /* All three ints: the length (and, for an int result, the values) exact
     * in integers, as NumPy's; a double holds ints only to 2^53, and
     * arange(2**62 + 1, 2**62 + 3) would be off (or empty near int64's max). */
    int64_t exact[3] = {0, 0, 1};
    bool all_int = true;
    for (int i = 0; i < 3; i++)
        if (vals[i].kind != V_NIL && !arg_as_int(vals[i], &exact[i])) all_int = false;
    if (all_int) {
        __int128 span = (__int128)exact[1] - exact[0], st = exact[2];
        __int128 q = span / st;
        if (q * st != span && (span < 0) == (st < 0)) q++; /* ceil, for a positive quotient */
        n = q > 0 ? (double)q : 0;
    }
    if (!(n > 0)) n = 0;
    if (n > 4e18) return interp_raise(I, "arange: too many elements");
    for (int i = 0; i < 3; i++) lim[i] = lit_value(vals[i], lim[i], dt);
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.dtype = dt;
    memcpy(at.f, lim, sizeof lim);
    at.ints[0] = (int64_t)n;
    at.nints = 1;
    if (all_int && dtype_is_int(dt)) { /* k_arange computes start + i * step in int64 */
        at.ints[1] = exact[0];
        at.ints[2] = exact[2];
        at.nints = 3;
    }
    return finish(I, tfe_call1(OP_ARANGE, 0, NULL, &at), out);
}

/* linspace of 0-d tensor endpoints (a variable's, a tape's): k_linspace's
 * arithmetic as ops, so that a tape sees the endpoints (linspace's own
 * kernel holds numbers: their gradient was silently zeros). The kernel
 * computes start + i * ((stop - start) / (num - 1)) in double and puts
 * stop last, then rounds once to the dtype: the ops do the same in
 * float64, then cast, so the bits are the kernel's. */
static int linspace_of_tensors(Interp *I, Value va, Value vb, int64_t num, tfe_dtype dt, Value *out)
{
    tfe_tensor *t[16] = {0}; /* every tensor made below, at most 13 */
    tfe_attrs at;
    int k = 0, rc;
#define OP1(op, x) (t[k++] = tfe_call1((op), 1, (tfe_tensor *[]){(x)}, &at))
#define OP2(op, x, y) (t[k++] = tfe_call1((op), 2, (tfe_tensor *[]){(x), (y)}, &at))
    /* (a literal endpoint keeps its double where the dtype is float64) */
    tfe_tensor *a = t[k++] = value_to_tensor_for(va, dt), *b = t[k++] = value_to_tensor_for(vb, dt), *r = NULL;
    if (!a || !b) { rc = interp_raise(I, "linspace: start and stop must be numbers"); goto out; }
    tfe_attrs_init(&at);
    at.dtype = TFE_FLOAT64;
    tfe_tensor *a64 = OP1(OP_CAST, a), *b64 = OP1(OP_CAST, b);
    tfe_attrs_init(&at);
    at.dtype = TFE_FLOAT64;
    at.f[0] = 0;
    at.f[1] = (double)(num - 1);
    at.f[2] = 1;
    at.ints[0] = num - 1;
    at.nints = 1;
    tfe_tensor *idx = t[k++] = tfe_call1(OP_ARANGE, 0, NULL, &at); /* 0 .. num - 2: stop goes last */
    tfe_attrs_init(&at);
    tfe_tensor *span = a64 && b64 ? OP2(OP_SUB, b64, a64) : NULL;
    at.dtype = TFE_FLOAT64;
    tfe_tensor *den = t[k++] = tensor_from_f64(num > 1 ? (double)(num - 1) : 1.0, TFE_FLOAT64);
    tfe_attrs_init(&at);
    tfe_tensor *step = span && den ? OP2(OP_DIV, span, den) : NULL;
    tfe_tensor *off = step && idx ? OP2(OP_MUL, idx, step) : NULL;
    tfe_tensor *head = off ? OP2(OP_ADD, a64, off) : NULL;
    tfe_attrs_init(&at);
    at.ints[at.nints++] = 1;
    tfe_tensor *last = num > 1 ? (b64 ? OP1(OP_RESHAPE, b64) : NULL) /* one point: start, as the kernel */
                               : (a64 ? OP1(OP_RESHAPE, a64) : NULL);
    if (num == 1) head = idx ? OP2(OP_MUL, idx, idx) : NULL; /* empty: arange(0) */
    tfe_attrs_init(&at);
    at.naxes = 1;
    tfe_tensor *all = head && last ? OP2(OP_CONCAT, head, last) : NULL;
    tfe_attrs_init(&at);
    at.dtype = dt;
    r = all ? tfe_call1(OP_CAST, 1, &all, &at) : NULL;
    rc = finish(I, r, out);
out:
    for (int i = 0; i < k; i++)
        if (t[i]) tensor_decref(t[i]);
    return rc;
#undef OP1
#undef OP2
}

/* linspace(start, stop, num=50, dtype=float32): endpoint included */
BUILTIN(bi_linspace)
{
    PARSE("linspace", "start, stop, num=, dtype=", 4);
    tfe_attrs at;
    tfe_attrs_init(&at);
    int64_t num = 50;
    if (arg_number(I, "linspace", "start", a[0], &at.f[0], NULL) ||
        arg_number(I, "linspace", "stop", a[1], &at.f[1], NULL) ||
        (p[2] && arg_int(I, "linspace", "num", a[2], &num)) ||
        get_dtype(I, "linspace", a[3], TFE_FLOAT32, &at.dtype))
        return -1;
    at.f[0] = lit_value(a[0], at.f[0], at.dtype);
    at.f[1] = lit_value(a[1], at.f[1], at.dtype);
    if (num < 0) return interp_raise(I, "linspace: num must be non-negative, got %lld", (long long)num);
    if ((a[0].kind != V_SCALAR || a[1].kind != V_SCALAR) && num > 0)
        return linspace_of_tensors(I, a[0], a[1], num, at.dtype, out);
    at.nints = 1;
    at.ints[0] = num;
    return finish(I, tfe_call1(OP_LINSPACE, 0, NULL, &at), out);
}

/* eye(n, m=nil, dtype=float32) */
BUILTIN(bi_eye)
{
    PARSE("eye", "n, m=, dtype=", 3);
    tfe_attrs at;
    tfe_attrs_init(&at);
    if (arg_int(I, "eye", "n", a[0], &at.ints[0])) return -1;
    at.ints[1] = at.ints[0];
    if ((a[1].kind != V_NIL && arg_int(I, "eye", "m", a[1], &at.ints[1])) ||
        get_dtype(I, "eye", a[2], TFE_FLOAT32, &at.dtype))
        return -1;
    if (at.ints[0] < 0 || at.ints[1] < 0)
        return interp_raise(I, "eye: sizes must be non-negative, got (%lld, %lld)",
                            (long long)at.ints[0], (long long)at.ints[1]);
    at.nints = 2;
    return finish(I, tfe_call1(OP_EYE, 0, NULL, &at), out);
}

/* randn(shape, dtype=float32), rand(shape, dtype=float32) */
BUILTIN(bi_random)
{
    SHAPE_VARARGS(bi_random, 0);
    tfe_op op = OP_OF(data);
    const char *fn = tfe_ops[op].name;
    PARSE(fn, "shape, dtype=", 2);
    tfe_attrs at;
    tfe_attrs_init(&at);
    int rank;
    if (get_shape(I, fn, "shape", a[0], false, &rank, at.ints) ||
        get_dtype(I, fn, a[1], TFE_FLOAT32, &at.dtype))
        return -1;
    at.nints = rank;
    if (!dtype_is_float(at.dtype))
        return interp_raise(I, "%s: dtype must be a float type, got %s", fn, dtype_name(at.dtype));
    tfe_random_next(&at, (uint64_t)shape_numel(rank, at.ints));
    return finish(I, tfe_call1(op, 0, NULL, &at), out);
}

/* randint(low, high, shape=(), dtype=int64): uniform in [low, high); also
 * NumPy's randint(high) and PyTorch's randint(high, shape), low 0 */
BUILTIN(bi_randint)
{
    PARSE("randint", "low, high=, shape=, dtype=", 4);
    tfe_attrs at;
    tfe_attrs_init(&at);
    int64_t lo = 0, hi = 0;
    int rank = 0;
    if (argc == 2 && !p[2] && (a[1].kind == V_TUPLE || a[1].kind == V_LIST)) { /* randint(high, shape) */
        a[2] = a[1];
        p[2] = true;
        p[1] = false;
    }
    if (!p[1]) { /* randint(high) */
        a[1] = a[0];
        a[0] = v_int(0);
    }
    if (arg_int(I, "randint", "low", a[0], &lo) || arg_int(I, "randint", "high", a[1], &hi) ||
        (p[2] && get_shape(I, "randint", "shape", a[2], false, &rank, at.ints)) ||
        get_dtype(I, "randint", a[3], TFE_INT64, &at.dtype))
        return -1;
    if (hi <= lo)
        return interp_raise(I, "randint: high (%lld) must be greater than low (%lld)", (long long)hi,
                            (long long)lo);
    if (!dtype_is_int(at.dtype))
        return interp_raise(I, "randint: dtype must be int32 or int64, got %s", dtype_name(at.dtype));
    at.nints = rank;
    at.f[0] = (double)lo;
    at.f[1] = (double)hi;
    tfe_random_next(&at, (uint64_t)shape_numel(rank, at.ints));
    return finish(I, tfe_call1(OP_RANDINT, 0, NULL, &at), out);
}

/* seed(n): resets the random stream */
BUILTIN(bi_seed)
{
    PARSE("seed", "n", 1);
    int64_t s = 0;
    if (arg_int(I, "seed", "n", a[0], &s)) return -1;
    tfe_random_seed((uint64_t)s);
    *out = v_nil();
    return 0;
}

/* ---- shape ----------------------------------------------------------------- */

/* shape(x), rank(x), size(x), dtype(x): data selects which (0..3). */
BUILTIN(bi_meta)
{
    static const char *names[] = {"shape", "rank", "size", "dtype"};
    const char *fn = names[(intptr_t)data];
    PARSE(fn, "x", 1);
    if (a[0].kind != V_SCALAR && a[0].kind != V_TENSOR)
        return interp_raise(I, "%s: expected a tensor, got %s", fn, value_kind_name(a[0]));
    bool sc = a[0].kind == V_SCALAR;
    const tfe_tensor *t = sc ? NULL : a[0].u.t;
    if ((intptr_t)data == 0 || (intptr_t)data == 2) trace_shape_read(I, t);
    switch ((intptr_t)data) {
    case 0: *out = sc ? shape_tuple(0, NULL) : shape_tuple(t->rank, t->shape); break;
    case 1: *out = v_int(sc ? 0 : t->rank); break;
    case 2: *out = v_int(sc ? 1 : shape_numel(t->rank, t->shape)); break;
    default: *out = v_cstr(dtype_name(sc ? (tfe_dtype)a[0].dtype : t->dtype)); break;
    }
    return 0;
}

/* cast(x, dtype) */
BUILTIN(bi_cast)
{
    PARSE("cast", "x, dtype", 2);
    tfe_attrs at;
    tfe_attrs_init(&at);
    if (a[1].kind == V_NIL) return interp_raise(I, "cast: dtype must be a string such as \"float32\", got nil");
    if (get_dtype(I, "cast", a[1], TFE_FLOAT32, &at.dtype)) return -1;
    tfe_tensor *x = arg_tensor_for(I, "cast", "x", a[0], at.dtype); /* cast(0.1, float64): exact */
    if (!x) return -1;
    int rc = run1(I, OP_CAST, x, &at, out);
    tensor_decref(x);
    return rc;
}

/* reshape(x, shape): one -1 allowed */
BUILTIN(bi_reshape)
{
    SHAPE_VARARGS(bi_reshape, 1);
    PARSE("reshape", "x, shape", 2);
    tfe_attrs at;
    tfe_attrs_init(&at);
    int rank;
    if (get_shape(I, "reshape", "shape", a[1], true, &rank, at.ints)) return -1;
    at.nints = rank;
    tfe_tensor *x = arg_tensor(I, "reshape", "x", a[0]);
    if (!x) return -1;
    int rc = run1(I, OP_RESHAPE, x, &at, out);
    tensor_decref(x);
    return rc;
}

/* item(x): the one element of x as a number of x's dtype (NumPy's and
 * PyTorch's x.item()); a reshape to (), so staged code reads no value. */
BUILTIN(bi_item)
{
    PARSE("item", "x", 1);
    tfe_tensor *x = arg_tensor(I, "item", "x", a[0]);
    if (!x) return -1;
    int64_t n = shape_numel(x->rank, x->shape);
    int rc;
    if (n != 1) {
        rc = interp_raise(I, "item: the tensor must have exactly one element, it has %lld", (long long)n);
    } else {
        tfe_attrs at;
        tfe_attrs_init(&at);
        rc = run1(I, OP_RESHAPE, x, &at, out);
    }
    tensor_decref(x);
    return rc;
}

/* tolist(x): x as nested lists of numbers (NumPy's x.tolist(); a 0-d tensor
 * gives a number). Host values: in a staged function the values are read at
 * trace time, as float(x) reads them (stage/trace.c says when that is an
 * error). */
static Value tolist_number(const tfe_tensor *t, int64_t flat)
{
    Value v = {0};
    v.kind = V_SCALAR;
    switch (t->dtype) {
    case TFE_FLOAT32: case TFE_FLOAT64:
        return v_float(tensor_load_f64(t, flat), t->dtype);
    case TFE_BOOL: return v_bool(tensor_load_i64(t, flat) != 0);
    case TFE_INT32:
        v.dtype = TFE_INT32;
        v.u.i = tensor_load_i64(t, flat);
        return v;
    default:
        /* float16, bfloat16: a float32 number holds them exactly */
        if (dtype_is_float(t->dtype)) return v_float(tensor_load_f64(t, flat), TFE_FLOAT32);
        return v_int(tensor_load_i64(t, flat));
    }
}

static Value tolist_axis(const tfe_tensor *t, int axis, int64_t *flat)
{
    if (axis == t->rank) return tolist_number(t, (*flat)++);
    Seq *s = seq_new((int)t->shape[axis]);
    s->h.kind = V_LIST;
    for (int64_t i = 0; i < t->shape[axis]; i++) seq_push_take(s, tolist_axis(t, axis + 1, flat));
    return v_obj(V_LIST, s);
}

BUILTIN(bi_tolist)
{
    PARSE("tolist", "x", 1);
    tfe_tensor *x = arg_tensor(I, "tolist", "x", a[0]);
    if (!x) return -1;
    /* one read of the value for the whole tensor (a traced one: the trace
     * depends on it, or it is not known yet) */
    if ((x->node && tfe_value_read_hook && tfe_value_read_hook(x)) || I->has_error) {
        tensor_decref(x);
        return I->has_error ? -1 : interp_raise(I, "tolist: the value of a traced tensor is not known here");
    }
    int64_t flat = 0;
    *out = tolist_axis(x, 0, &flat);
    tensor_decref(x);
    return 0;
}

/* flatten(x): reshape to (-1,) */
BUILTIN(bi_flatten)
{
    PARSE("flatten", "x", 1);
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = 1;
    at.ints[0] = -1;
    tfe_tensor *x = arg_tensor(I, "flatten", "x", a[0]);
    if (!x) return -1;
    int rc = run1(I, OP_RESHAPE, x, &at, out);
    tensor_decref(x);
    return rc;
}

/* transpose(x, perm=nil): nil reverses the axes */
BUILTIN(bi_transpose)
{
    /* x.transpose(i, j): two axes, NumPy's permutation but PyTorch's swap
     * of axes i and j. They agree on a matrix's (1, 0); (0, 1) would leave
     * a matrix as it is where PyTorch transposes it, and on another rank
     * the two ints are no permutation: errors that say how to write it. */
    if (argc == 3 && nkw == 0 && argv[1].kind == V_SCALAR && argv[2].kind == V_SCALAR &&
        dtype_is_int((tfe_dtype)argv[1].dtype) && dtype_is_int((tfe_dtype)argv[2].dtype) &&
        (argv[0].kind == V_TENSOR || argv[0].kind == V_SCALAR)) {
        int r = argv[0].kind == V_TENSOR ? argv[0].u.t->rank : 0;
        int64_t i = argv[1].u.i, j = argv[2].u.i;
        if (r == 2 && (i == 0 || i == -2) && (j == 1 || j == -1))
            return interp_raise(I, "transpose: x.transpose(%lld, %lld) is the identity permutation (NumPy's meaning), "
                                   "which leaves the matrix as it is; PyTorch's transpose(0, 1) swaps the axes: "
                                   "write x.T or x.transpose(1, 0)", (long long)i, (long long)j);
        if (r > 2 && i >= -r && i < r && j >= -r && j < r) {
            int a0 = (int)(i < 0 ? i + r : i), b0 = (int)(j < 0 ? j + r : j);
            char perm[160];
            size_t k = 0;
            for (int d = 0; d < r && k < sizeof perm; d++)
                k += (size_t)snprintf(perm + k, sizeof perm - k, d ? ", %d" : "(%d", d == a0 ? b0 : d == b0 ? a0 : d);
            if (k < sizeof perm - 1) strcat(perm, ")");
            return interp_raise(I, "transpose: x.transpose(%lld, %lld) on a tensor of rank %d: tfe's transpose takes "
                                   "the whole permutation, as NumPy's; to swap axes %d and %d as PyTorch's "
                                   "transpose(%lld, %lld) does, write x.transpose(%s)",
                                (long long)i, (long long)j, r, a0, b0, (long long)i, (long long)j, perm);
        }
    }
    SHAPE_VARARGS(bi_transpose, 1);
    PARSE("transpose", "x, perm=", 2);
    tfe_tensor *x = arg_tensor(I, "transpose", "x", a[0]);
    if (!x) return -1;
    tfe_attrs at;
    tfe_attrs_init(&at);
    int rc = -1;
    if (a[1].kind != V_NIL) {
        int n;
        const Value *items;
        bool seen[TFE_MAX_RANK] = {0};
        if (!as_seq(a[1], &n, &items)) {
            arg_error(I, "transpose", "perm", "a tuple of ints", a[1]);
            goto done;
        }
        if (n != x->rank) {
            interp_raise(I, "transpose: perm has %d axes for a tensor of rank %d", n, x->rank);
            goto done;
        }
        for (int i = 0; i < n; i++) {
            int64_t v;
            int ax = 0;
            if (arg_int(I, "transpose", "perm entry", items[i], &v) ||
                norm_axis(I, "transpose", v, x->rank, &ax))
                goto done;
            if (seen[ax]) {
                interp_raise(I, "transpose: axis %d is repeated in perm", ax);
                goto done;
            }
            seen[ax] = true;
            at.ints[i] = ax;
        }
        at.nints = n;
    }
    rc = run1(I, OP_TRANSPOSE, x, &at, out);
done:
    tensor_decref(x);
    return rc;
}

/* expand_dims(x, axis): axis in [-(rank+1), rank] */
BUILTIN(bi_expand_dims)
{
    PARSE("expand_dims", "x, axis", 2);
    tfe_tensor *x = arg_tensor(I, "expand_dims", "x", a[0]);
    if (!x) return -1;
    tfe_attrs at;
    tfe_attrs_init(&at);
    int64_t v;
    int ax = 0, rc = -1;
    if (!arg_int(I, "expand_dims", "axis", a[1], &v) && !norm_axis(I, "expand_dims", v, x->rank + 1, &ax)) {
        at.naxes = 1;
        at.axes[0] = ax;
        rc = run1(I, OP_EXPAND_DIMS, x, &at, out);
    }
    tensor_decref(x);
    return rc;
}

/* squeeze(x, axis=nil): nil drops every size-1 axis */
BUILTIN(bi_squeeze)
{
    PARSE("squeeze", "x, axis=", 2);
    tfe_tensor *x = arg_tensor(I, "squeeze", "x", a[0]);
    if (!x) return -1;
    tfe_attrs at;
    tfe_attrs_init(&at);
    int rc = -1;
    if (get_axes(I, "squeeze", a[1], x->rank, &at)) goto done;
    for (int i = 0; i < at.naxes; i++)
        if (x->shape[at.axes[i]] != 1) {
            interp_raise(I, "squeeze: axis %d has size %lld, not 1", (int)at.axes[i],
                         (long long)x->shape[at.axes[i]]);
            goto done;
        }
    rc = run1(I, OP_SQUEEZE, x, &at, out);
done:
    tensor_decref(x);
    return rc;
}

/* broadcast_to(x, shape) */
BUILTIN(bi_broadcast_to)
{
    PARSE("broadcast_to", "x, shape", 2);
    tfe_attrs at;
    tfe_attrs_init(&at);
    int rank;
    if (get_shape(I, "broadcast_to", "shape", a[1], false, &rank, at.ints)) return -1;
    at.nints = rank;
    tfe_tensor *x = arg_tensor(I, "broadcast_to", "x", a[0]);
    if (!x) return -1;
    int rc = run1(I, OP_BROADCAST_TO, x, &at, out);
    tensor_decref(x);
    return rc;
}

/* concat/stack of a tensor xs, i.e. of its slices along axis 0 (what the
 * literal [a, b] gives): stack moves axis 0 to `axis`; concat then merges it
 * with the axis after it. Two view-like ops instead of n slices. */
static int concat_stack_tensor(Interp *I, tfe_op op, const char *fn, tfe_tensor *t, bool has_axis,
                               Value axv, Value *out)
{
    int64_t v = 0;
    int ax = 0;
    if (t->rank == 0 || (op == OP_CONCAT && t->rank == 1))
        return interp_raise(I, "%s: expected a tuple or list of tensors, got a tensor of rank %d",
                            fn, t->rank);
    if ((has_axis && arg_int(I, fn, "axis", axv, &v)) ||
        norm_axis(I, fn, v, t->rank - 1 + (op == OP_STACK), &ax))
        return -1;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = t->rank;
    for (int i = 0; i < t->rank; i++) at.ints[i] = i < ax ? i + 1 : i == ax ? 0 : i;
    tfe_tensor *r = t;
    if (ax == 0) tensor_incref(r);
    else if (!(r = tfe_call1(OP_TRANSPOSE, 1, &t, &at))) return interp_raise_tensor_error(I);
    if (op == OP_CONCAT) {
        tfe_attrs_init(&at);
        for (int i = 0, k = 0; i < r->rank; i++) {
            if (i == ax + 1) at.ints[k - 1] *= r->shape[i];
            else at.ints[k++] = r->shape[i];
            at.nints = k;
        }
        tfe_tensor *m = tfe_call1(OP_RESHAPE, 1, &r, &at);
        tensor_decref(r);
        r = m;
    }
    return finish(I, r, out);
}

/* concat(xs, axis=0), stack(xs, axis=0): data is the op */
BUILTIN(bi_concat_stack)
{
    tfe_op op = OP_OF(data);
    const char *fn = tfe_ops[op].name;
    PARSE(fn, "xs, axis=", 2);
    if (a[0].kind == V_TENSOR) return concat_stack_tensor(I, op, fn, a[0].u.t, p[1], a[1], out);
    int n;
    tfe_tensor **ts = get_tensor_seq(I, fn, a[0], &n);
    if (!ts) return -1;
    int64_t v = 0;
    int ax = 0, rc = -1;
    /* stack inserts a new axis: its range is one wider */
    int rank = ts[0]->rank + (op == OP_STACK);
    if (op == OP_CONCAT && rank == 0)
        interp_raise(I, "concat: cannot concatenate 0-d tensors; use stack");
    else if ((!p[1] || !arg_int(I, fn, "axis", a[1], &v)) && !norm_axis(I, fn, v, rank, &ax)) {
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.naxes = 1;
        at.axes[0] = ax;
        rc = finish(I, tfe_call1(op, n, ts, &at), out);
    }
    release(n, ts);
    free(ts);
    return rc;
}

/* split(x, n_or_sizes, axis=0): an int n gives n equal parts; a tuple gives
 * the section sizes (TensorFlow's convention; one -1 takes the rest). */
BUILTIN(bi_split)
{
    PARSE("split", "x, n_or_sizes, axis=", 3);
    tfe_tensor *x = arg_tensor(I, "split", "x", a[0]);
    if (!x) return -1;
    tfe_attrs at;
    tfe_attrs_init(&at);
    int64_t v = 0, nparts;
    int ax = 0, rc = -1, n;
    const Value *items;
    tfe_tensor *outs[32] = {0};
    if (x->rank == 0) {
        interp_raise(I, "split: cannot split a 0-d tensor");
        goto done;
    }
    if ((p[2] && arg_int(I, "split", "axis", a[2], &v)) || norm_axis(I, "split", v, x->rank, &ax))
        goto done;
    int64_t size = x->shape[ax];
    if (arg_as_int(a[1], &nparts)) {
        if (nparts < 1 || nparts > 32) {
            interp_raise(I, "split: the number of parts must be between 1 and 32, got %lld",
                         (long long)nparts);
            goto done;
        }
        if (size % nparts) {
            interp_raise(I, "split: axis %d of size %lld cannot be split into %lld equal parts", ax,
                         (long long)size, (long long)nparts);
            goto done;
        }
        for (int i = 0; i < nparts; i++) at.ints[i] = size / nparts;
        at.nints = (int)nparts;
    } else if (as_seq(a[1], &n, &items)) {
        if (n < 1 || n > 32) {
            interp_raise(I, "split: between 1 and 32 section sizes are supported, got %d", n);
            goto done;
        }
        int64_t sum = 0;
        int hole = -1;
        for (int i = 0; i < n; i++) {
            if (arg_int(I, "split", "a section size", items[i], &at.ints[i])) goto done;
            if (at.ints[i] == -1 && hole < 0) hole = i;
            else if (at.ints[i] < 0) {
                interp_raise(I, "split: section sizes must be non-negative (one -1 allowed), got %lld",
                             (long long)at.ints[i]);
                goto done;
            } else if (__builtin_add_overflow(sum, at.ints[i], &sum)) {
                interp_raise(I, "split: section sizes add up to more than int64 holds, but axis %d has size %lld",
                             ax, (long long)size);
                goto done;
            }
        }
        if (hole >= 0 && sum <= size) at.ints[hole] = size - sum, sum = size;
        if (sum != size) {
            interp_raise(I, "split: section sizes add up to %lld but axis %d has size %lld",
                         (long long)sum, ax, (long long)size);
            goto done;
        }
        at.nints = n;
    } else {
        arg_error(I, "split", "n_or_sizes", "an int or a tuple of ints", a[1]);
        goto done;
    }
    at.naxes = 1;
    at.axes[0] = ax;
    if (tfe_execute(OP_SPLIT, 1, &x, &at, outs)) {
        rc = interp_raise_tensor_error(I);
        goto done;
    }
    Seq *s = seq_new(at.nints);
    for (int i = 0; i < at.nints; i++) seq_push_take(s, value_from_tensor_take(outs[i]));
    *out = v_obj(V_TUPLE, s);
    rc = 0;
done:
    tensor_decref(x);
    return rc;
}

/* tile(x, reps): NumPy's rule: reps shorter than the rank are padded with
 * leading 1s; a longer reps gives x leading size-1 axes first. */
BUILTIN(bi_tile)
{
    PARSE("tile", "x, reps", 2);
    int n;
    int64_t reps[TFE_MAX_RANK];
    if (get_shape(I, "tile", "reps", a[1], false, &n, reps)) return -1;
    tfe_tensor *x = arg_tensor(I, "tile", "x", a[0]);
    if (!x) return -1;
    tfe_attrs at;
    tfe_attrs_init(&at);
    if (n > x->rank) {
        int64_t shape[TFE_MAX_RANK];
        int pad = n - x->rank;
        for (int i = 0; i < n; i++) shape[i] = i < pad ? 1 : x->shape[i - pad];
        shape_attrs(&at, n, shape);
        tfe_tensor *r = tfe_call1(OP_RESHAPE, 1, &x, &at);
        tensor_decref(x);
        if (!r) return interp_raise_tensor_error(I);
        x = r;
    }
    int pad = x->rank - n;
    for (int i = 0; i < x->rank; i++) at.ints[i] = i < pad ? 1 : reps[i - pad];
    at.nints = x->rank;
    int rc = run1(I, OP_TILE, x, &at, out);
    tensor_decref(x);
    return rc;
}

/* ---- math ------------------------------------------------------------------ */

/* round(x, decimals): NumPy's np.round, x * 10^d rounded (half to even)
 * and divided back, in x's dtype; an int x is itself for decimals >= 0 */
static int round_decimals(Interp *I, tfe_tensor *x, int64_t d, Value *out)
{
    if (!dtype_is_float(x->dtype)) {
        if (d < 0) return interp_raise(I, "round: decimals < 0 needs a float tensor, got %s", dtype_name(x->dtype));
        tensor_incref(x);
        return finish(I, x, out);
    }
    if (d > 300 || d < -300) return interp_raise(I, "round: decimals %lld is out of range", (long long)d);
    tfe_tensor *p = tensor_from_f64(pow(10.0, (double)(d < 0 ? -d : d)), x->dtype);
    if (!p) return interp_raise_tensor_error(I);
    tfe_tensor *y = tfe_binary(d < 0 ? OP_DIV : OP_MUL, x, p);
    tfe_tensor *r = y ? tfe_unary(OP_ROUND, y) : NULL;
    tfe_tensor *z = r ? tfe_binary(d < 0 ? OP_MUL : OP_DIV, r, p) : NULL;
    if (y) tensor_decref(y);
    if (r) tensor_decref(r);
    tensor_decref(p);
    return finish(I, z, out);
}

/* Every F_UNARY op of the table: name(x); round(x, decimals=0) too. */
BUILTIN(bi_unary)
{
    tfe_op op = OP_OF(data);
    PARSE(tfe_ops[op].name, op == OP_ROUND ? "x, decimals=" : "x", 2);
    tfe_tensor *x = arg_tensor(I, tfe_ops[op].name, "x", a[0]);
    if (!x) return -1;
    if (op == OP_ROUND && a[1].kind != V_NIL) {
        int64_t d = 0;
        int rc = arg_int(I, "round", "decimals", a[1], &d) ? -1 : round_decimals(I, x, d, out);
        tensor_decref(x);
        return rc;
    }
    tfe_tensor *r = tfe_unary(op, x);
    tensor_decref(x);
    return finish(I, r, out);
}

/* Every F_BINARY op of the table, and matmul: name(a, b). */
BUILTIN(bi_binary)
{
    tfe_op op = OP_OF(data);
    const char *fn = tfe_ops[op].name;
    PARSE(fn, "a, b", 2);
    /* a float literal meets the other operand's dtype, as in a + b */
    bool lit0 = a[0].kind == V_SCALAR && a[0].lit;
    tfe_tensor *x = NULL, *y = NULL;
    if (lit0 && !(y = arg_tensor(I, fn, "b", a[1]))) return -1;
    if (!(x = arg_tensor_for(I, fn, "a", a[0], y ? y->dtype : TFE_FLOAT32))) {
        if (y) tensor_decref(y);
        return -1;
    }
    if (!y && !(y = arg_tensor_for(I, fn, "b", a[1], x->dtype))) {
        tensor_decref(x);
        return -1;
    }
    tfe_tensor *r = tfe_binary(op, x, y);
    tensor_decref(x);
    tensor_decref(y);
    return finish(I, r, out);
}

/* stop_gradient(x) (not F_UNARY: it is not an elementwise math function) */
BUILTIN(bi_stop_gradient)
{
    PARSE("stop_gradient", "x", 1);
    tfe_tensor *x = arg_tensor(I, "stop_gradient", "x", a[0]);
    if (!x) return -1;
    tfe_tensor *r = tfe_unary(OP_STOP_GRADIENT, x);
    tensor_decref(x);
    return finish(I, r, out);
}

/* A ternary elementwise op over three tensor arguments. */
static int run3(Interp *I, const char *fn, tfe_op op, const char *const names[3], const Value *vals,
                Value *out)
{
    tfe_tensor *in[3] = {0};
    int rc = -1;
    /* float literals last: they meet the others' dtype (exact if float64) */
    tfe_dtype dt = TFE_FLOAT32;
    for (int i = 0; i < 3; i++) {
        if (vals[i].kind == V_SCALAR && vals[i].lit) continue;
        if (!(in[i] = arg_tensor(I, fn, names[i], vals[i]))) goto done;
        if (in[i]->dtype == TFE_FLOAT64) dt = TFE_FLOAT64;
    }
    for (int i = 0; i < 3; i++)
        if (!in[i] && !(in[i] = arg_tensor_for(I, fn, names[i], vals[i], dt))) goto done;
    tfe_attrs at;
    tfe_attrs_init(&at);
    rc = finish(I, tfe_call1(op, 3, in, &at), out);
done:
    release(3, in);
    return rc;
}

/* where(cond, a, b): a non-bool cond is compared with zero (NumPy's truth) */
BUILTIN(bi_where)
{
    PARSE("where", "cond, a, b", 3);
    static const char *const names[3] = {"cond", "a", "b"};
    Value vals[3] = {a[0], a[1], a[2]};
    tfe_tensor *c = NULL;
    if ((a[0].kind == V_SCALAR && a[0].dtype != TFE_BOOL) ||
        (a[0].kind == V_TENSOR && a[0].u.t->dtype != TFE_BOOL)) {
        tfe_tensor *x = arg_tensor(I, "where", "cond", a[0]);
        if (!x) return -1;
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.dtype = TFE_BOOL;
        c = tfe_call1(OP_CAST, 1, &x, &at);
        tensor_decref(x);
        if (!c) return interp_raise_tensor_error(I);
        vals[0] = v_tensor_take(c);
    }
    int rc = run3(I, "where", OP_WHERE, names, vals, out);
    if (c) value_decref(vals[0]);
    return rc;
}

/* clip(x, lo=nil, hi=nil): either bound may be nil or left out (not both) */
BUILTIN(bi_clip)
{
    PARSE("clip", "x, lo=, hi=", 3);
    static const char *const names[3] = {"x", "lo", "hi"};
    if (a[1].kind == V_NIL && a[2].kind == V_NIL)
        return interp_raise(I, "clip: lo and hi cannot both be nil");
    if (a[1].kind != V_NIL && a[2].kind != V_NIL) return run3(I, "clip", OP_CLIP, names, a, out);
    bool has_lo = a[1].kind != V_NIL;
    /* One bound: clip with the other at the end of x's range, so the
     * gradient at the bound is clip's 1 (maximum's tie gave 1/2), and a
     * float literal bound meets a float64 x as its double (run3). */
    tfe_dtype xd = a[0].kind == V_SCALAR ? (tfe_dtype)a[0].dtype : a[0].kind == V_TENSOR ? a[0].u.t->dtype : TFE_BOOL;
    if (dtype_is_float(xd) || xd == TFE_INT32 || xd == TFE_INT64) {
        Value v[3] = {a[0], a[1], a[2]};
        Value end = dtype_is_float(xd) ? v_float(has_lo ? INFINITY : -INFINITY, TFE_FLOAT32)
                  : v_int(has_lo ? (xd == TFE_INT32 ? INT32_MAX : INT64_MAX) : (xd == TFE_INT32 ? INT32_MIN : INT64_MIN));
        end.weak = true;
        v[has_lo ? 2 : 1] = end;
        return run3(I, "clip", OP_CLIP, names, v, out);
    }
    tfe_tensor *x = arg_tensor(I, "clip", "x", a[0]);
    if (!x) return -1;
    tfe_tensor *b = arg_tensor(I, "clip", has_lo ? "lo" : "hi", a[has_lo ? 1 : 2]);
    if (!b) {
        tensor_decref(x);
        return -1;
    }
    tfe_tensor *r = tfe_binary(has_lo ? OP_MAXIMUM : OP_MINIMUM, x, b);
    tensor_decref(x);
    tensor_decref(b);
    return finish(I, r, out);
}

/* ---- reduce ---------------------------------------------------------------- */

/* Every F_REDUCTION op: name(x, axis=nil, keepdims=false); var/std add
 * ddof=0; argmax/argmin take one int axis (nil: index into the flattened x). */
BUILTIN(bi_reduce)
{
    tfe_op op = OP_OF(data);
    const char *fn = tfe_ops[op].name;
    bool ddof = op == OP_VAR || op == OP_STD;
    bool arg = op == OP_ARGMAX || op == OP_ARGMIN;
    PARSE(fn, ddof ? "x, axis=, keepdims=, ddof=" : "x, axis=, keepdims=", 4);
    int nseq;
    const Value *seq;
    /* NumPy's np.mean(a_list): a list or tuple is read as tensor(xs) is */
    tfe_tensor *x = as_seq(a[0], &nseq, &seq) ? build_stack(I, fn, nseq, seq, true, TFE_BOOL)
                                              : arg_tensor(I, fn, "x", a[0]);
    if (!x) return -1;
    tfe_attrs at;
    tfe_attrs_init(&at);
    int rc = -1;
    if (arg && a[1].kind != V_NIL && !arg_as_int(a[1], &(int64_t){0})) {
        arg_error(I, fn, "axis", "an int or nil", a[1]);
        goto done;
    }
    if ((op == OP_MAX || op == OP_MIN) && argc >= 2 && a[1].kind != V_NIL &&
        (x->rank == 0 || (a[1].kind != V_TUPLE && a[1].kind != V_LIST && !arg_as_int(a[1], &(int64_t){0})))) {
        /* Python's max(a, b): here the second argument is the axis */
        interp_raise(I, "%s(x, axis) reduces x along an axis; the %s of two values is %s(a, b)", fn,
                     op == OP_MAX ? "larger" : "smaller", op == OP_MAX ? "maximum" : "minimum");
        goto done;
    }
    if (get_axes(I, fn, a[1], x->rank, &at) || arg_opt_bool(I, fn, "keepdims", a[2], false, &at.keepdims))
        goto done;
    if (ddof) {
        at.nints = 1;
        if (p[3] && arg_int(I, fn, "ddof", a[3], &at.ints[0])) goto done;
    }
    rc = run1(I, op, x, &at, out);
done:
    tensor_decref(x);
    return rc;
}

/* ---- nn -------------------------------------------------------------------- */

/* softmax(x, axis=-1), log_softmax */
BUILTIN(bi_softmax)
{
    tfe_op op = OP_OF(data);
    const char *fn = tfe_ops[op].name;
    PARSE(fn, "x, axis=", 2);
    tfe_tensor *x = arg_tensor(I, fn, "x", a[0]);
    if (!x) return -1;
    tfe_attrs at;
    tfe_attrs_init(&at);
    int64_t v = -1;
    int ax = 0, rc = -1;
    if (x->rank == 0) interp_raise(I, "%s: expected a tensor of rank >= 1, got a 0-d tensor", fn);
    else if ((!p[1] || !arg_int(I, fn, "axis", a[1], &v)) && !norm_axis(I, fn, v, x->rank, &ax)) {
        at.naxes = 1;
        at.axes[0] = ax;
        rc = run1(I, op, x, &at, out);
    }
    tensor_decref(x);
    return rc;
}

/* one_hot(indices, depth, dtype=float32) */
BUILTIN(bi_one_hot)
{
    PARSE("one_hot", "indices, depth, dtype=", 3);
    tfe_attrs at;
    tfe_attrs_init(&at);
    if (arg_int(I, "one_hot", "depth", a[1], &at.ints[0]) ||
        get_dtype(I, "one_hot", a[2], TFE_FLOAT32, &at.dtype))
        return -1;
    if (at.ints[0] < 0) return interp_raise(I, "one_hot: depth must be non-negative");
    at.nints = 1;
    tfe_tensor *x = arg_tensor(I, "one_hot", "indices", a[0]);
    if (!x) return -1;
    int rc = run1(I, OP_ONE_HOT, x, &at, out);
    tensor_decref(x);
    return rc;
}

/* gather(x, indices, axis=0) */
BUILTIN(bi_gather)
{
    PARSE("gather", "x, indices, axis=", 3);
    tfe_tensor *in[2] = {0};
    int64_t v = 0;
    int ax = 0, rc = -1;
    if (!(in[0] = arg_tensor(I, "gather", "x", a[0])) || !(in[1] = arg_tensor(I, "gather", "indices", a[1])))
        goto done;
    if (in[0]->rank == 0) {
        interp_raise(I, "gather: cannot gather from a 0-d tensor");
        goto done;
    }
    if ((p[2] && arg_int(I, "gather", "axis", a[2], &v)) || norm_axis(I, "gather", v, in[0]->rank, &ax))
        goto done;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.naxes = 1;
    at.axes[0] = ax;
    rc = finish(I, tfe_call1(OP_GATHER, 2, in, &at), out);
done:
    release(2, in);
    return rc;
}

/* conv2d(x, w, stride=1, padding="valid", dilation=1): NHWC x, HWIO w */
BUILTIN(bi_conv2d)
{
    PARSE("conv2d", "x, w, stride=, padding=, dilation=", 5);
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.ints[0] = at.ints[1] = at.ints[2] = at.ints[3] = 1;
    if ((p[2] && get_pair(I, "conv2d", "stride", a[2], &at.ints[0])) ||
        (p[4] && get_pair(I, "conv2d", "dilation", a[4], &at.ints[2])) ||
        get_padding(I, "conv2d", a[3], &at.ints[4]))
        return -1;
    at.nints = 5;
    tfe_tensor *in[2] = {0};
    int rc = -1;
    if ((in[0] = arg_tensor(I, "conv2d", "x", a[0])) && (in[1] = arg_tensor(I, "conv2d", "w", a[1])))
        rc = finish(I, tfe_call1(OP_CONV2D, 2, in, &at), out);
    release(2, in);
    return rc;
}

/* max_pool2d(x, size, stride=nil (= size), padding="valid"), avg_pool2d */
BUILTIN(bi_pool)
{
    tfe_op op = OP_OF(data);
    const char *fn = tfe_ops[op].name;
    PARSE(fn, "x, size, stride=, padding=", 4);
    tfe_attrs at;
    tfe_attrs_init(&at);
    if (get_pair(I, fn, "size", a[1], &at.ints[0])) return -1;
    at.ints[2] = at.ints[0];
    at.ints[3] = at.ints[1];
    if ((a[2].kind != V_NIL && get_pair(I, fn, "stride", a[2], &at.ints[2])) ||
        get_padding(I, fn, a[3], &at.ints[4]))
        return -1;
    at.nints = 5;
    tfe_tensor *x = arg_tensor(I, fn, "x", a[0]);
    if (!x) return -1;
    int rc = run1(I, op, x, &at, out);
    tensor_decref(x);
    return rc;
}

/* dropout(x, rate, seed=nil): an explicit seed gives a fixed mask and leaves
 * the global random stream alone. */
BUILTIN(bi_dropout)
{
    PARSE("dropout", "x, rate, seed=", 3);
    tfe_attrs at;
    tfe_attrs_init(&at);
    int64_t s = 0;
    if (arg_number(I, "dropout", "rate", a[1], &at.f[0], NULL) ||
        (a[2].kind != V_NIL && arg_int(I, "dropout", "seed", a[2], &s)))
        return -1;
    if (!(at.f[0] >= 0 && at.f[0] < 1))
        return interp_raise(I, "dropout: rate must be in [0, 1), got %g", at.f[0]);
    tfe_tensor *x = arg_tensor(I, "dropout", "x", a[0]);
    if (!x) return -1;
    /* a float64 x: a literal rate's double, so the kept elements scale by
     * 1 / (1 - rate) in float64, as NumPy's (not by 0.1's float32 rounding) */
    at.f[0] = lit_value(a[1], at.f[0], x->dtype);
    if (a[2].kind != V_NIL) {
        at.seed = (uint64_t)s;
        at.counter = 0;
    } else {
        tfe_random_next(&at, (uint64_t)shape_numel(x->rank, x->shape));
    }
    int rc = run1(I, OP_DROPOUT, x, &at, out);
    tensor_decref(x);
    return rc;
}

/* ---- [...] literals -------------------------------------------------------- */

/* float -> int without C's undefined behaviour: truncate, saturate, NaN -> 0. */
static int64_t f2i(double f)
{
    if (f != f) return 0;
    if (f >= 9223372036854775807.0) return INT64_MAX;
    if (f <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)f;
}

/* Writes scalar v into one element of dtype dt (NumPy's conversion). */
static void put_scalar(char *dst, tfe_dtype dt, Value v)
{
    bool f = dtype_is_float((tfe_dtype)v.dtype);
    switch (dt) {
    case TFE_BOOL: *(uint8_t *)dst = f ? scalar_f(v) != 0 : v.u.i != 0; break;
    case TFE_INT32: { /* a float saturates at int32's range, as cast does (an int wraps, as cast does) */
        int64_t i = f ? f2i(scalar_f(v)) : v.u.i;
        if (f) i = i > INT32_MAX ? INT32_MAX : i < INT32_MIN ? INT32_MIN : i;
        *(int32_t *)dst = (int32_t)i;
        break;
    }
    case TFE_INT64: *(int64_t *)dst = f ? f2i(scalar_f(v)) : v.u.i; break;
    case TFE_FLOAT32: *(float *)dst = f ? (float)v.u.f : (float)v.u.i; break;
    case TFE_FLOAT64: *(double *)dst = f ? v.u.f : (double)v.u.i; break; /* a literal's exact value */
    default: break; /* scalars are never float16/bfloat16 */
    }
}

/* Stacks numbers/bools/tensors of one shape along a new axis 0 (who names the
 * caller in messages: "[...]" or "tensor"). nested: tuple/list elements are
 * stacked first (tensor()). want: the dtype the caller casts the result to
 * (TFE_BOOL: none); float64 makes a float32 stack float64 here, so float
 * literals keep their exact values. Returns a new, non-weak tensor or NULL
 * (raised). */
static tfe_tensor *stack_at(Interp *I, const char *who, int n, const Value *items, bool nested, tfe_dtype want,
                            int depth);

static tfe_tensor *build_stack(Interp *I, const char *who, int n, const Value *items, bool nested,
                               tfe_dtype want)
{
    return stack_at(I, who, n, items, nested, want, 1);
}

/* build_stack at nesting depth (axes made so far, this one included): a
 * list nested deeper than a tensor's axes (one that contains itself, say)
 * is an error before it runs the C stack out */
static tfe_tensor *stack_at(Interp *I, const char *who, int n, const Value *items, bool nested, tfe_dtype want,
                            int depth)
{
    if (depth > TFE_MAX_RANK) {
        interp_raise(I, "%s: the lists are nested more than %d deep (a tensor has at most %d axes; a list that "
                     "contains itself?)", who, TFE_MAX_RANK, TFE_MAX_RANK);
        return NULL;
    }
    if (n == 0) return tensor_zeros(TFE_FLOAT32, 1, (int64_t[]){0});
    tfe_tensor **ts = try_calloc((size_t)n, sizeof *ts);
    tfe_tensor *res = NULL;
    if (!ts) {
        interp_raise(I, "%s: out of memory", who);
        return NULL;
    }
    bool all_scalars = true, weak = false;
    tfe_dtype dt = TFE_BOOL;
    char b1[200], b2[200];
    int rank0 = 0;
    const int64_t *shape0 = NULL;
    for (int i = 0; i < n; i++) {
        Value v = items[i];
        int m;
        const Value *sub;
        if (nested && as_seq(v, &m, &sub)) {
            if (!(ts[i] = stack_at(I, who, m, sub, true, want, depth + 1))) goto done;
        } else if (v.kind != V_SCALAR && v.kind != V_TENSOR) {
            const char *k = value_kind_name(v);
            interp_raise(I, "%s: element %d is %s %s, not a number; use a tuple (...) for mixed "
                         "collections", who, i, article(k), k);
            goto done;
        }
        int r = ts[i] ? ts[i]->rank : v.kind == V_TENSOR ? v.u.t->rank : 0;
        const int64_t *s = ts[i] ? ts[i]->shape : v.kind == V_TENSOR ? v.u.t->shape : NULL;
        tfe_dtype edt = ts[i] ? ts[i]->dtype : v.kind == V_TENSOR ? v.u.t->dtype : (tfe_dtype)v.dtype;
        bool ew = ts[i] ? false : v.kind == V_TENSOR ? v.u.t->weak : v.weak;
        if (v.kind != V_SCALAR) all_scalars = false;
        if (i == 0) {
            rank0 = r;
            shape0 = s;
            dt = edt;
            weak = ew;
            continue;
        }
        if (r != rank0 || (r && memcmp(s, shape0, sizeof(int64_t) * (size_t)r))) {
            interp_raise(I, "%s: elements have different shapes %s and %s; use a tuple (...) for "
                         "ragged collections", who, shape_str(rank0, shape0, b1), shape_str(r, s, b2));
            goto done;
        }
        dt = dtype_promote(dt, weak, edt, ew, &weak);
    }
    if (want == TFE_FLOAT64 && dt == TFE_FLOAT32) dt = TFE_FLOAT64;
    if (all_scalars) {
        /* numbers only: a constant built directly, as value_to_tensor would */
        if (!(res = tensor_new(dt, 1, (int64_t[]){n}))) {
            interp_raise_tensor_error(I);
            goto done;
        }
        size_t es = dtype_size(dt);
        for (int i = 0; i < n; i++) put_scalar(tensor_data(res) + (size_t)i * es, dt, items[i]);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        Value v = items[i];
        if (!ts[i] && v.kind == V_SCALAR) {
            if ((ts[i] = tensor_new(dt, 0, NULL))) put_scalar(tensor_data(ts[i]), dt, v);
        } else if (!ts[i]) {
            ts[i] = value_to_tensor(v);
        }
        if (!ts[i]) {
            interp_raise_tensor_error(I);
            goto done;
        }
        if (ts[i]->dtype != dt) {
            tfe_attrs at;
            tfe_attrs_init(&at);
            at.dtype = dt;
            tfe_tensor *c = tfe_call1(OP_CAST, 1, &ts[i], &at);
            tensor_decref(ts[i]);
            if (!(ts[i] = c)) {
                interp_raise_tensor_error(I);
                goto done;
            }
        }
    }
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.naxes = 1;
    at.axes[0] = 0;
    if (!(res = tfe_call1(OP_STACK, n, ts, &at))) interp_raise_tensor_error(I);
done:
    release(n, ts);
    free(ts);
    if (res) res->weak = false;
    return res;
}

int tensor_literal(Interp *I, int n, const Value *items, Value *out)
{
    tfe_tensor *t = build_stack(I, "[...]", n, items, false, TFE_BOOL);
    if (!t) return -1;
    *out = v_tensor_take(t);
    return 0;
}

/* ---- indexing -------------------------------------------------------------- */

/* Python's slice.indices(): normalises (start, stop, step) for an axis of size
 * n; omitted parts are flagged. An empty slice becomes (0, 0, 1) so that the
 * SLICE op always sees 0 <= start. Returns the length. */
static int64_t norm_slice(int64_t n, bool has_start, int64_t start, bool has_stop, int64_t stop,
                          int64_t step, int64_t *o)
{
    if (step > 0) {
        start = !has_start ? 0 : start < 0 ? (start + n < 0 ? 0 : start + n) : (start > n ? n : start);
        stop = !has_stop ? n : stop < 0 ? (stop + n < 0 ? 0 : stop + n) : (stop > n ? n : stop);
    } else {
        start = !has_start ? n - 1
              : start < 0 ? (start + n < 0 ? -1 : start + n) : (start >= n ? n - 1 : start);
        stop = !has_stop ? -1 : stop < 0 ? (stop + n < 0 ? -1 : stop + n) : (stop >= n ? n - 1 : stop);
    }
    /* ceil((stop - start) / step) as 1 + (span - 1) / |step|, without
     * "+ step - 1", which wraps for a step near int64's limits (x[::2**63 - 1]
     * was empty); |step| of INT64_MIN is past any span, so its length is 1 */
    int64_t len = step > 0 ? (stop > start ? (stop - start - 1) / step + 1 : 0)
                : start > stop ? (step == INT64_MIN ? 1 : (start - stop - 1) / -step + 1) : 0;
    if (len == 0) start = stop = 0, step = 1;
    if (len == 1 && (step > n || step < -n)) step = step > 0 ? n : -n; /* one element: no view stride of a huge step */
    o[0] = start;
    o[1] = stop;
    o[2] = step;
    return len;
}

/* The plan of x[items]: SLICE attrs over every axis of x (an advanced index's
 * axes kept whole), plus where the one advanced index (int or bool tensor)
 * applies in the sliced result. */
typedef struct IndexPlan {
    tfe_attrs at;
    bool trivial;            /* SLICE would return x unchanged */
    tfe_tensor *adv;         /* the advanced index (new reference), or NULL */
    bool mask;               /* adv is a bool mask over adv->rank axes */
    int pos;                 /* its first axis in the sliced result */
    bool front;              /* NumPy: ints and the advanced index are not adjacent
                                items, so the advanced result axes go first */
    int nmulti;              /* integer-tensor indices (several: merge_advanced) */
    tfe_tensor *multi[TFE_MAX_RANK]; /* each (new reference) */
    int multi_pos[TFE_MAX_RANK];     /* its axis in the sliced result */
    int nnew;                /* nil items: size-1 axes inserted into the result */
    int newax[2 * TFE_MAX_RANK]; /* their positions among the basic result axes */
    bool new_after[2 * TFE_MAX_RANK]; /* placed after the advanced index */
} IndexPlan;

static int plan_index(Interp *I, const tfe_tensor *x, int n, const IndexItem *items, IndexPlan *pl)
{
    tfe_attrs_init(&pl->at);
    pl->at.naxes = 0;
    pl->trivial = true;
    pl->adv = NULL;
    pl->mask = false;
    pl->pos = 0;
    pl->front = false;
    pl->nnew = 0;
    pl->nmulti = 0;
    int consumed = 0, ell = -1, first_adv = n, last_adv = -1, nadv = 0;
    for (int i = 0; i < n; i++) {
        const IndexItem *it = &items[i];
        int64_t k;
        if (it->kind == IX_ELLIPSIS) {
            if (ell >= 0) return interp_raise(I, "index: an index can have only one ellipsis (...)");
            ell = i;
        } else if (it->kind == IX_SLICE) {
            consumed++;
        } else if (arg_as_int(it->v, &k)) {
            consumed++;
            first_adv = first_adv < i ? first_adv : i;
            last_adv = i;
            nadv++;
        } else if (it->v.kind == V_TENSOR && (it->v.u.t->dtype == TFE_BOOL || dtype_is_int(it->v.u.t->dtype))) {
            bool mask = it->v.u.t->dtype == TFE_BOOL;
            if (pl->adv && (mask || pl->mask)) {
                interp_raise(I, "index: a bool mask cannot be combined with another integer-tensor or "
                             "bool-mask index");
                goto fail;
            }
            if (!mask) pl->multi[pl->nmulti++] = value_to_tensor(it->v);
            if (pl->adv) { /* several integer tensors: merged in tensor_index */
                consumed++;
                last_adv = i;
                nadv++;
                continue;
            }
            pl->adv = value_to_tensor(it->v);
            pl->mask = mask;
            if (pl->mask && pl->adv->rank == 0) {
                interp_raise(I, "index: a 0-d bool index is not supported");
                goto fail;
            }
            consumed += pl->mask ? pl->adv->rank : 1;
            first_adv = first_adv < i ? first_adv : i;
            last_adv = i;
            nadv++;
        } else if (it->v.kind == V_NIL) {
            /* a new axis: consumes nothing (placed in the second pass) */
        } else if (it->v.kind == V_TUPLE || it->v.kind == V_LIST) {
            interp_raise(I, "index: a %s of indices is not an index; use a tensor [...] of ints",
                         value_kind_name(it->v));
            goto fail;
        } else {
            const char *what = it->v.kind == V_SCALAR ? dtype_name((tfe_dtype)it->v.dtype)
                             : it->v.kind == V_TENSOR ? dtype_name(it->v.u.t->dtype)
                                                     : value_kind_name(it->v);
            interp_raise(I, "index: indices must be ints, slices, ..., int tensors or bool masks, "
                         "got %s%s%s", what, it->v.kind == V_TENSOR ? " tensor" : "",
                         it->v.kind == V_SCALAR && it->v.dtype == TFE_BOOL
                             ? " (a bool mask is a bool tensor of the indexed axes' shape)" : "");
            goto fail;
        }
    }
    pl->front = pl->adv && last_adv - first_adv + 1 != nadv;
    if (consumed > x->rank) {
        interp_raise(I, "index: too many indices (%d) for a tensor of rank %d", consumed, x->rank);
        goto fail;
    }
    int axis = 0, dropped = 0, adv_in = 0;
    int64_t *sl = pl->at.ints;
    for (int i = 0; i <= n; i++) {
        /* i == n: the axes left after the last item are taken whole */
        int whole = i == n ? x->rank - axis : 0;
        if (i < n && items[i].kind == IX_ELLIPSIS) whole = x->rank - consumed;
        for (int k = 0; k < whole; k++, axis++) {
            sl[3 * axis] = 0;
            sl[3 * axis + 1] = x->shape[axis];
            sl[3 * axis + 2] = 1;
        }
        if (i == n || items[i].kind == IX_ELLIPSIS) continue;
        const IndexItem *it = &items[i];
        if (it->kind == IX_VALUE && it->v.kind == V_NIL) {
            if (pl->nnew == 2 * TFE_MAX_RANK) {
                interp_raise(I, "index: too many new axes (nil)");
                goto fail;
            }
            pl->newax[pl->nnew] = axis - dropped - adv_in + pl->nnew;
            pl->new_after[pl->nnew] = adv_in > 0;
            pl->nnew++;
            continue;
        }
        int64_t size = x->shape[axis], k;
        if (it->kind == IX_SLICE) {
            int64_t st = 0, sp = 0, step = 1;
            const Value *parts[3] = {&it->start, &it->stop, &it->step};
            int64_t *dst[3] = {&st, &sp, &step};
            for (int j = 0; j < 3; j++)
                if (parts[j]->kind != V_NIL && !arg_as_int(*parts[j], dst[j])) {
                    arg_error(I, "index", "slice bounds", "ints or omitted", *parts[j]);
                    goto fail;
                }
            if (step == 0) {
                interp_raise(I, "index: slice step cannot be zero");
                goto fail;
            }
            int64_t len = norm_slice(size, it->start.kind != V_NIL, st, it->stop.kind != V_NIL, sp, step,
                                     &sl[3 * axis]);
            /* A bound clamped to the size (or an empty slice) gives bounds
             * that hold for this size only, though they look the same at
             * other sizes: a relaxed trace would use them where Python
             * clamps otherwise, so the trace keeps its sizes. */
            bool clamped = len == 0;
            for (int j = 0; j < 2; j++) {
                int64_t v = j ? sp : st;
                if (parts[j]->kind != V_NIL && (v < -size || v > size || (step < 0 && v >= size))) clamped = true;
            }
            if (clamped) trace_clamp_read(I, x, I->cur_loc);
            if (sl[3 * axis] != 0 || sl[3 * axis + 1] != size || sl[3 * axis + 2] != 1) pl->trivial = false;
            axis++;
        } else if (arg_as_int(it->v, &k)) {
            if (k < -size || k >= size) {
                interp_raise(I, "index %lld is out of range for axis %d with size %lld", (long long)k,
                             axis, (long long)size);
                goto fail;
            }
            if (k < 0) k += size;
            sl[3 * axis] = k;
            sl[3 * axis + 1] = k + 1;
            sl[3 * axis + 2] = 1;
            pl->at.axes[pl->at.naxes++] = axis;
            pl->trivial = false;
            axis++;
            dropped++;
        } else { /* an advanced index: its axes stay whole here */
            if (!adv_in) pl->pos = axis - dropped;
            int m = pl->mask ? pl->adv->rank : 1;
            if (!pl->mask) pl->multi_pos[adv_in] = axis - dropped;
            adv_in += m;
            for (int j = 0; j < m; j++, axis++) {
                sl[3 * axis] = 0;
                sl[3 * axis + 1] = x->shape[axis];
                sl[3 * axis + 2] = 1;
            }
        }
    }
    pl->at.nints = 3 * x->rank;
    return 0;
fail:
    if (pl->adv) tensor_decref(pl->adv);
    pl->adv = NULL;
    for (int i = 0; i < pl->nmulti; i++) tensor_decref(pl->multi[i]);
    pl->nmulti = 0;
    return -1;
}

static tfe_tensor *transpose_by(tfe_tensor *x, const int64_t *perm);

/* x[i, j, ...] with several integer-tensor indices, NumPy's way: they
 * broadcast together and pick one element of their axes per position. The
 * sliced r gets those axes next to each other (first when the advanced
 * items are not adjacent, NumPy's rule) and merged into one; each index is
 * checked and wrapped by a gather from arange(size), and the broadcast
 * indices become one linear index into the merged axis, which replaces
 * pl->adv, so the one-index path (a gather, with its scatter-add gradient)
 * does the rest. Returns the new r (new reference) or NULL (tensor error). */
/* The axes of r with the advanced ones first (in index order), the others
 * after in order: NumPy's layout when the advanced items are not adjacent. */
static void front_perm(const IndexPlan *pl, int rank, int64_t *perm)
{
    int m = 0, k = pl->nmulti;
    for (int j = 0; j < k; j++) perm[m++] = pl->multi_pos[j];
    for (int i = 0; i < rank; i++) {
        bool adv = false;
        for (int j = 0; j < k; j++) adv |= pl->multi_pos[j] == i;
        if (!adv) perm[m++] = i;
    }
}

static tfe_tensor *merge_advanced(tfe_tensor *r, IndexPlan *pl)
{
    int k = pl->nmulti, p = pl->front ? 0 : pl->multi_pos[0];
    int64_t sizes[TFE_MAX_RANK], total = 1;
    for (int j = 0; j < k; j++) total *= sizes[j] = r->shape[pl->multi_pos[j]];
    tfe_tensor *t = r, *lin = NULL, *tmp;
    tensor_incref(t);
    if (pl->front) {
        int64_t perm[TFE_MAX_RANK];
        front_perm(pl, r->rank, perm);
        tmp = transpose_by(t, perm);
        tensor_decref(t);
        if (!(t = tmp)) return NULL;
    }
    tfe_attrs at;
    tfe_attrs_init(&at);
    int m = 0;
    for (int i = 0; i < p; i++) at.ints[m++] = t->shape[i];
    at.ints[m++] = total;
    for (int i = p + k; i < t->rank; i++) at.ints[m++] = t->shape[i];
    at.nints = m;
    tmp = tfe_call1(OP_RESHAPE, 1, &t, &at);
    tensor_decref(t);
    if (!(t = tmp)) return NULL;
    int64_t stride = 1;
    for (int j = k - 1; j >= 0; j--) {
        tfe_attrs ar;
        tfe_attrs_init(&ar);
        ar.dtype = TFE_INT64;
        ar.f[0] = 0;
        ar.f[1] = (double)sizes[j];
        ar.f[2] = 1;
        /* arange(size) as shape (1, ..., 1, size) with size at the index's
         * axis a, so the gather's range error names that axis, as x[:, i]'s */
        int a = pl->multi_pos[j];
        tfe_tensor *range = tfe_call1(OP_ARANGE, 0, NULL, &ar), *idx = NULL, *scaled = NULL;
        if (range && a > 0) {
            tfe_attrs ash;
            tfe_attrs_init(&ash);
            for (int i = 0; i < a; i++) ash.ints[i] = 1;
            ash.ints[a] = sizes[j];
            ash.nints = a + 1;
            tmp = tfe_call1(OP_RESHAPE, 1, &range, &ash);
            tensor_decref(range);
            range = tmp;
        }
        if (range) {
            tfe_attrs ag;
            tfe_attrs_init(&ag);
            ag.naxes = 1;
            ag.axes[0] = a;
            tfe_tensor *in[2] = {range, pl->multi[j]};
            idx = tfe_call1(OP_GATHER, 2, in, &ag); /* checks the range, wraps negatives */
            tensor_decref(range);
        }
        if (idx && a > 0) { /* the leading size-1 axes go */
            tfe_attrs asq;
            tfe_attrs_init(&asq);
            for (int i = 0; i < a; i++) asq.axes[i] = i;
            asq.naxes = a;
            tmp = tfe_call1(OP_SQUEEZE, 1, &idx, &asq);
            tensor_decref(idx);
            idx = tmp;
        }
        if (idx && stride != 1) {
            tfe_tensor *st = tensor_from_i64(stride, TFE_INT64);
            if (st) {
                st->weak = true;
                scaled = tfe_binary(OP_MUL, idx, st);
                tensor_decref(st);
            }
            tensor_decref(idx);
        } else {
            scaled = idx;
        }
        if (!scaled) goto fail;
        if (lin) {
            tmp = tfe_binary(OP_ADD, scaled, lin);
            tensor_decref(scaled);
            tensor_decref(lin);
            if (!(lin = tmp)) goto fail;
        } else {
            lin = scaled;
        }
        stride *= sizes[j];
    }
    tensor_decref(pl->adv);
    pl->adv = lin;
    pl->pos = p;
    return t;
fail:
    if (lin) tensor_decref(lin);
    tensor_decref(t);
    return NULL;
}

/* Checks that a bool mask matches the axes [pos, pos + rank) of r. */
static int check_mask(Interp *I, const tfe_tensor *r, const IndexPlan *pl)
{
    const tfe_tensor *m = pl->adv;
    bool ok = pl->pos + m->rank <= r->rank;
    for (int i = 0; ok && i < m->rank; i++) ok = m->shape[i] == r->shape[pl->pos + i];
    if (ok) return 0;
    char b1[200], b2[200];
    return interp_raise(I, "index: bool mask of shape %s does not match the indexed axes of a tensor "
                        "of shape %s", shape_str(m->rank, m->shape, b1), shape_str(r->rank, r->shape, b2));
}

static tfe_tensor *transpose_by(tfe_tensor *x, const int64_t *perm)
{
    tfe_attrs at;
    tfe_attrs_init(&at);
    shape_attrs(&at, x->rank, perm);
    return tfe_call1(OP_TRANSPOSE, 1, &x, &at);
}

/* x[mask] with the mask over axes [pos, pos + mask rank): BOOL_MASK works on
 * leading axes, so other axes are moved out of the way and back. */
static tfe_tensor *apply_mask(tfe_tensor *r, tfe_tensor *mask, int pos)
{
    tfe_tensor *in[2] = {r, mask};
    tfe_attrs at;
    tfe_attrs_init(&at);
    if (pos == 0) return tfe_call1(OP_BOOL_MASK, 2, in, &at);
    int mr = mask->rank, k = 0;
    int64_t perm[TFE_MAX_RANK];
    for (int i = 0; i < mr; i++) perm[k++] = pos + i;
    for (int i = 0; i < pos; i++) perm[k++] = i;
    for (int i = pos + mr; i < r->rank; i++) perm[k++] = i;
    tfe_tensor *t = transpose_by(r, perm);
    if (!t) return NULL;
    in[0] = t;
    tfe_tensor *m = tfe_call1(OP_BOOL_MASK, 2, in, &at);
    tensor_decref(t);
    if (!m) return NULL;
    /* the selected axis (0) goes back to pos */
    k = 0;
    for (int i = 1; i <= pos; i++) perm[k++] = i;
    perm[k++] = 0;
    for (int i = pos + 1; i < m->rank; i++) perm[k++] = i;
    tfe_tensor *res = transpose_by(m, perm);
    tensor_decref(m);
    return res;
}

/* r[..., mask, ...] = v with v holding a value per selected element (the
 * mask over axes [pos, pos + mask rank) of r; v broadcasts to the shape
 * r[..., mask, ...] has, the selected elements in C order at pos): NumPy's
 * x[m] = y[m], and what x[m] += v assigns. The mask's axes are moved to
 * the front and flattened, and v's rows scattered at the positions of the
 * mask's true elements; its size depends on the data, as x[mask]'s does. */
static tfe_tensor *scatter_through_mask(Interp *I, tfe_tensor *r, tfe_tensor *mask, int pos, tfe_tensor *v)
{
    int mr = mask->rank, rank = r->rank, ns = rank - mr + 1; /* the selection's rank */
    int64_t perm[TFE_MAX_RANK], inv[TFE_MAX_RANK], n = 1;
    int k = 0;
    for (int i = 0; i < mr; i++) perm[k++] = pos + i;
    for (int i = 0; i < pos; i++) perm[k++] = i;
    for (int i = pos + mr; i < rank; i++) perm[k++] = i;
    for (int i = 0; i < rank; i++) inv[perm[i]] = i;
    for (int i = 0; i < mr; i++) n *= mask->shape[i];
    if (v->rank > ns) {
        char b1[200];
        interp_raise(I, "index: a value of shape %s cannot be assigned through a bool mask: it has more axes "
                     "than the %d of what the mask selects", shape_str(v->rank, v->shape, b1), ns);
        return NULL;
    }
    tfe_tensor *t = NULL, *flat = NULL, *fm = NULL, *cs = NULL, *fmi = NULL, *idx = NULL, *vf = NULL, *zero = NULL,
               *padded = NULL, *g = NULL, *mb = NULL, *wf = NULL, *back = NULL, *res = NULL, *sel = NULL,
               *yes = NULL, *rows = NULL;
    tfe_attrs at;
#define CALL(dst, op, nin, ins) do { if (!((dst) = tfe_call1((op), (nin), (ins), &at))) goto out; } while (0)
    /* r with the mask's axes first, flattened to (n, the other axes) */
    if (pos) {
        if (!(t = transpose_by(r, perm))) goto out;
    } else {
        t = r;
        tensor_incref(t);
    }
    tfe_attrs_init(&at);
    at.ints[at.nints++] = n;
    for (int i = mr; i < rank; i++) at.ints[at.nints++] = t->shape[i];
    CALL(flat, OP_RESHAPE, 1, &t);
    tfe_attrs_init(&at);
    at.ints[at.nints++] = n;
    CALL(fm, OP_RESHAPE, 1, &mask);
    /* row i of the result takes row cumsum(m)[i] of [0; v's rows] where
     * m[i] (grad_bool_mask's gather): no size here depends on the data */
    tfe_attrs_init(&at);
    at.dtype = TFE_INT64;
    CALL(fmi, OP_CAST, 1, &fm);
    tfe_attrs_init(&at);
    at.naxes = 1;
    CALL(cs, OP_CUMSUM, 1, &fmi);
    tfe_tensor *mi[2] = {cs, fmi};
    tfe_attrs_init(&at);
    CALL(idx, OP_MUL, 2, mi);
    /* v's rows: v at full rank, its selection axis (pos) first */
    vf = v;
    tensor_incref(vf);
    while (vf->rank < ns) {
        tfe_attrs_init(&at);
        at.naxes = 1;
        tfe_tensor *e;
        CALL(e, OP_EXPAND_DIMS, 1, &vf);
        tensor_decref(vf);
        vf = e;
    }
    if (pos) {
        int64_t p2[TFE_MAX_RANK];
        int j = 0;
        p2[j++] = pos;
        for (int i = 0; i < ns; i++)
            if (i != pos) p2[j++] = i;
        tfe_tensor *tv = transpose_by(vf, p2);
        tensor_decref(vf);
        if (!(vf = tv)) goto out;
    }
    /* v's rows broadcast to the selected rows (r's own, picked by the mask:
     * their number comes from the data), so that a value of the wrong
     * number of rows is where's shape error at every call, eager or staged,
     * and one row is repeated as NumPy repeats it */
    tfe_attrs_init(&at);
    CALL(sel, OP_BOOL_MASK, 2, ((tfe_tensor *[]){flat, fm}));
    tfe_attrs_init(&at);
    at.dtype = TFE_BOOL;
    at.f[0] = 1;
    CALL(yes, OP_FULL, 0, NULL);
    tfe_attrs_init(&at);
    CALL(rows, OP_WHERE, 3, ((tfe_tensor *[]){yes, vf, sel}));
    tfe_attrs_init(&at);
    at.dtype = r->dtype;
    at.ints[at.nints++] = 1;
    for (int i = 1; i < ns; i++) at.ints[at.nints++] = flat->shape[i];
    CALL(zero, OP_FULL, 0, NULL);
    tfe_tensor *cat[2] = {zero, rows};
    tfe_attrs_init(&at);
    at.naxes = 1;
    CALL(padded, OP_CONCAT, 2, cat);
    tfe_tensor *gi[2] = {padded, idx};
    CALL(g, OP_GATHER, 2, gi);
    /* where(m, g, rows): m with size-1 axes for the other axes */
    tfe_attrs_init(&at);
    at.ints[at.nints++] = n;
    for (int i = 1; i < ns; i++) at.ints[at.nints++] = 1;
    CALL(mb, OP_RESHAPE, 1, &fm);
    tfe_tensor *wi[3] = {mb, g, flat};
    tfe_attrs_init(&at);
    CALL(wf, OP_WHERE, 3, wi);
    tfe_attrs_init(&at);
    for (int i = 0; i < rank; i++) at.ints[at.nints++] = t->shape[i];
    CALL(back, OP_RESHAPE, 1, &wf);
    if (pos) {
        res = transpose_by(back, inv);
    } else {
        res = back;
        back = NULL;
    }
#undef CALL
out:;
    tfe_tensor *tmp[] = {t, flat, fm, cs, fmi, idx, vf, zero, padded, g, mb, wf, back, sel, yes, rows};
    for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++)
        if (tmp[i]) tensor_decref(tmp[i]);
    return res;
}

int tensor_index(Interp *I, Value xv, int n, const IndexItem *items, Value *out)
{
    tfe_tensor *x = value_to_tensor(xv);
    if (!x) return interp_raise(I, "index: %s is not indexable", value_kind_name(xv));
    IndexPlan pl;
    tfe_tensor *r = NULL;
    int rc = -1;
    /* (reading an int index of a traced tensor whose value varies from
     * call to call, a variable's say, raises the trace's error and reads
     * on: it must stop here, not index with this call's value baked in) */
    I->indexing = true;
    int planned = plan_index(I, x, n, items, &pl);
    I->indexing = false;
    if (planned || I->has_error) goto done;
    if (pl.trivial) {
        r = x;
        tensor_incref(r);
    } else if (!(r = tfe_call1(OP_SLICE, 1, &x, &pl.at))) {
        interp_raise_tensor_error(I);
        goto done;
    }
    if (pl.nmulti > 1) {
        trace_shape_read(I, x); /* the merge reshapes by x's dims: traces specific to them */
        tfe_tensor *g = merge_advanced(r, &pl);
        if (!g) {
            interp_raise_tensor_error(I);
            goto done;
        }
        tensor_decref(r);
        r = g;
    }
    if (pl.adv) {
        tfe_tensor *g = NULL;
        if (pl.mask) {
            if (check_mask(I, r, &pl)) goto done;
            g = apply_mask(r, pl.adv, pl.pos);
        } else {
            tfe_attrs at;
            tfe_attrs_init(&at);
            at.naxes = 1;
            at.axes[0] = pl.pos;
            tfe_tensor *in[2] = {r, pl.adv};
            g = tfe_call1(OP_GATHER, 2, in, &at);
        }
        if (!g) {
            interp_raise_tensor_error(I);
            goto done;
        }
        tensor_decref(r);
        r = g;
        int k = pl.mask ? 1 : pl.adv->rank;
        if (pl.front && pl.pos > 0 && k > 0) {
            int64_t perm[TFE_MAX_RANK];
            int j = 0;
            for (int i = 0; i < k; i++) perm[j++] = pl.pos + i;
            for (int i = 0; i < r->rank; i++)
                if (i < pl.pos || i >= pl.pos + k) perm[j++] = i;
            if (!(g = transpose_by(r, perm))) {
                interp_raise_tensor_error(I);
                goto done;
            }
            tensor_decref(r);
            r = g;
        }
    }
    if (pl.nnew) {
        tfe_attrs at;
        tfe_attrs_init(&at);
        int rank = r->rank + pl.nnew;
        if (rank > TFE_MAX_RANK) {
            interp_raise(I, "index: the result would have rank %d; at most %d is supported", rank,
                         TFE_MAX_RANK);
            goto done;
        }
        /* the advanced index's result axes sit in place, or first (front) */
        int nadv = pl.adv ? (pl.mask ? 1 : pl.adv->rank) : 0;
        int pos[2 * TFE_MAX_RANK];
        for (int k = 0; k < pl.nnew; k++)
            pos[k] = pl.newax[k] + (pl.front || pl.new_after[k] ? nadv : 0);
        for (int i = 0, j = 0, k = 0; i < rank; i++)
            at.ints[i] = k < pl.nnew && pos[k] == i ? (k++, 1) : r->shape[j++];
        at.nints = rank;
        tfe_tensor *g = tfe_call1(OP_RESHAPE, 1, &r, &at);
        if (!g) {
            interp_raise_tensor_error(I);
            goto done;
        }
        tensor_decref(r);
        r = g;
    }
    *out = value_from_tensor_take(r);
    r = NULL;
    rc = 0;
done:
    if (r) tensor_decref(r);
    if (pl.adv) tensor_decref(pl.adv);
    for (int i = 0; i < pl.nmulti; i++) tensor_decref(pl.multi[i]);
    tensor_decref(x);
    return rc;
}

/* region[items] = v through several integer-tensor indices, or through one
 * whose result axes go first (NumPy's layout, so v is placed as NumPy
 * places it): the read's merge (merge_advanced) gives region with those
 * axes merged into one at pl->pos and the linear index, one scatter writes
 * v there (duplicates: the last in C order wins, as the scatter kernel
 * writes in order; its gradient gives v's gradient to that write only), and
 * the merge is undone (reshape, then the inverse transpose). Returns the
 * updated region (new reference) or NULL (tensor error). */
static tfe_tensor *scatter_merged(Interp *I, tfe_tensor *x, tfe_tensor *region, IndexPlan *pl,
                                  tfe_tensor *vt)
{
    trace_shape_read(I, x); /* the merge reshapes by x's dims: traces specific to them */
    int64_t perm[TFE_MAX_RANK], inv[TFE_MAX_RANK];
    tfe_attrs at;
    tfe_attrs_init(&at);
    shape_attrs(&at, region->rank, region->shape);
    if (pl->front) {
        front_perm(pl, region->rank, perm);
        for (int i = 0; i < region->rank; i++) {
            at.ints[i] = region->shape[perm[i]];
            inv[perm[i]] = i;
        }
    }
    tfe_tensor *t = merge_advanced(region, pl), *u = NULL, *tmp;
    if (!t) return NULL;
    tfe_attrs as;
    tfe_attrs_init(&as);
    as.naxes = 1;
    as.axes[0] = pl->pos;
    tfe_tensor *in[3] = {t, pl->adv, vt};
    u = tfe_call1(OP_SCATTER, 3, in, &as);
    tensor_decref(t);
    if (!u) return NULL;
    tmp = tfe_call1(OP_RESHAPE, 1, &u, &at); /* the merged axis split again */
    tensor_decref(u);
    if (!(u = tmp) || !pl->front) return u;
    tmp = transpose_by(u, inv);
    tensor_decref(u);
    return tmp;
}

int tensor_index_assign(Interp *I, Value xv, int n, const IndexItem *items, Value v, Value *out)
{
    if (xv.kind == V_SCALAR)
        return interp_raise(I, "index: cannot assign into %s %s; scalars are not indexable",
                            article(value_kind_name(xv)), value_kind_name(xv));
    if (xv.kind != V_TENSOR)
        return interp_raise(I, "index: %s does not support item assignment", value_kind_name(xv));
    tfe_tensor *x = xv.u.t;
    tfe_tensor *vt;
    if (v.kind == V_SCALAR && x->dtype <= TFE_FLOAT64) { /* a constant: convert it directly */
        if ((vt = tensor_new(x->dtype, 0, NULL))) put_scalar(tensor_data(vt), x->dtype, v);
        else return interp_raise_tensor_error(I);
    } else {
        vt = value_to_tensor(v);
    }
    if (!vt)
        return interp_raise(I, "index: cannot assign %s %s to tensor elements",
                            article(value_kind_name(v)), value_kind_name(v));
    IndexPlan pl = {.adv = NULL};
    tfe_tensor *region = NULL, *upd = NULL, *res = NULL;
    int rc = -1;
    if (vt->dtype != x->dtype) { /* NumPy assignment casting (unsafe) */
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.dtype = x->dtype;
        tfe_tensor *c = tfe_call1(OP_CAST, 1, &vt, &at);
        tensor_decref(vt);
        if (!(vt = c)) {
            interp_raise_tensor_error(I);
            goto done;
        }
    }
    /* (reading an int index of a traced tensor whose value varies from
     * call to call, a variable's say, raises the trace's error and reads
     * on: it must stop here, not index with this call's value baked in) */
    I->indexing = true;
    int planned = plan_index(I, x, n, items, &pl);
    I->indexing = false;
    if (planned || I->has_error) goto done;
    if (!pl.adv) {
        tfe_tensor *in[2] = {x, vt};
        if (!(res = tfe_call1(OP_SET_SLICE, 2, in, &pl.at))) interp_raise_tensor_error(I);
        goto done;
    }
    if (pl.trivial) {
        region = x;
        tensor_incref(region);
    } else if (!(region = tfe_call1(OP_SLICE, 1, &x, &pl.at))) {
        interp_raise_tensor_error(I);
        goto done;
    }
    if (pl.mask) {
        if (check_mask(I, region, &pl)) goto done;
        int rest = region->rank - pl.pos - pl.adv->rank;
        if (vt->rank == rest + 1 && vt->shape[0] == 1 && !(tfe_dyn_dims(vt) & 1u)) {
            /* one row, (1, rest...): the same as one element */
            tfe_attrs at;
            tfe_attrs_init(&at);
            shape_attrs(&at, vt->rank - 1, vt->shape + 1);
            tfe_tensor *sq = tfe_call1(OP_RESHAPE, 1, &vt, &at);
            tensor_decref(vt);
            if (!(vt = sq)) {
                interp_raise_tensor_error(I);
                goto done;
            }
        }
        if (vt->rank > rest) { /* a value per selected element: x[m] = y[m], x[m] += v */
            upd = scatter_through_mask(I, region, pl.adv, pl.pos, vt);
            goto updated;
        }
        tfe_tensor *m = pl.adv;
        tensor_incref(m);
        if (rest > 0) { /* align the mask with its axes: trailing size-1 axes */
            tfe_attrs at;
            tfe_attrs_init(&at);
            shape_attrs(&at, m->rank, m->shape);
            for (int i = 0; i < rest; i++) at.ints[at.nints++] = 1;
            tfe_tensor *mr = tfe_call1(OP_RESHAPE, 1, &m, &at);
            tensor_decref(m);
            if (!(m = mr)) {
                interp_raise_tensor_error(I);
                goto done;
            }
        }
        tfe_attrs at;
        tfe_attrs_init(&at);
        tfe_tensor *in[3] = {m, vt, region};
        upd = tfe_call1(OP_WHERE, 3, in, &at);
        tensor_decref(m);
    } else if (pl.nmulti > 1 || (pl.front && pl.pos > 0)) {
        upd = scatter_merged(I, x, region, &pl, vt);
    } else {
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.naxes = 1;
        at.axes[0] = pl.pos;
        tfe_tensor *in[3] = {region, pl.adv, vt};
        upd = tfe_call1(OP_SCATTER, 3, in, &at);
    }
updated:
    if (!upd) {
        if (!I->has_error) interp_raise_tensor_error(I);
        goto done;
    }
    if (pl.trivial) {
        res = upd;
        upd = NULL;
    } else {
        tfe_tensor *in[2] = {x, upd};
        if (!(res = tfe_call1(OP_SET_SLICE, 2, in, &pl.at))) interp_raise_tensor_error(I);
    }
done:
    if (res) {
        *out = value_from_tensor_take(res);
        rc = 0;
    }
    if (upd) tensor_decref(upd);
    if (region) tensor_decref(region);
    if (pl.adv) tensor_decref(pl.adv);
    for (int i = 0; i < pl.nmulti; i++) tensor_decref(pl.multi[i]);
    tensor_decref(vt);
    return rc;
}

/* ---- fused batch normalization (tensor/kernels_bn.c) ------------------------ */

/* Arguments a[0..n) as tensors of one float dtype: float64 if any is, else
 * float32 (casts are ops, so tapes and traces see them). */
static int bn_tensors(Interp *I, const char *fn, const char *const *names, const Value *a, int n, tfe_tensor **t)
{
    tfe_dtype dt = TFE_FLOAT32;
    for (int i = 0; i < n; i++) {
        if (!(t[i] = arg_tensor(I, fn, names[i], a[i]))) return -1;
        if (t[i]->dtype == TFE_FLOAT64) dt = TFE_FLOAT64;
    }
    for (int i = 0; i < n; i++) {
        if (t[i]->dtype == dt) continue;
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.dtype = dt;
        tfe_tensor *c = tfe_call1(OP_CAST, 1, &t[i], &at);
        if (!c) return interp_raise_tensor_error(I);
        tensor_decref(t[i]);
        t[i] = c;
    }
    return 0;
}

/* eps as an op of dtype dt reads it (a float literal exact in float64) */
static int bn_eps(Interp *I, const char *fn, Value v, tfe_dtype dt, double *eps)
{
    if (v.kind == V_SCALAR && dtype_is_float((tfe_dtype)v.dtype)) {
        *eps = scalar_f_in(v, dt);
        return 0;
    }
    return arg_number(I, fn, "eps", v, eps, NULL);
}

/* batch_norm_train(x, gamma, beta, eps=0.001) -> (y, mean, var) over every
 * axis but the last */
BUILTIN(bi_batch_norm_train)
{
    PARSE("batch_norm_train", "x, gamma, beta, eps=", 4);
    static const char *const names[3] = {"x", "gamma", "beta"};
    tfe_tensor *in[3] = {0}, *o[3] = {0};
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.f[0] = 0.001;
    int rc = -1;
    if (bn_tensors(I, "batch_norm_train", names, a, 3, in) ||
        (p[3] && bn_eps(I, "batch_norm_train", a[3], in[0]->dtype, &at.f[0])))
        goto done;
    if (!p[3] && in[0]->dtype == TFE_FLOAT32) at.f[0] = (float)0.001;
    if (tfe_execute(OP_BATCH_NORM_TRAIN, 3, in, &at, o)) {
        rc = interp_raise_tensor_error(I);
        goto done;
    }
    Seq *s = seq_new(3);
    for (int i = 0; i < 3; i++) seq_push_take(s, value_from_tensor_take(o[i]));
    *out = v_obj(V_TUPLE, s);
    rc = 0;
done:
    release(3, in);
    return rc;
}

/* batch_norm_infer(x, gamma, beta, mean, var, eps=0.001): the given statistics */
BUILTIN(bi_batch_norm_infer)
{
    PARSE("batch_norm_infer", "x, gamma, beta, mean, var, eps=", 6);
    static const char *const names[5] = {"x", "gamma", "beta", "mean", "var"};
    tfe_tensor *in[5] = {0};
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.f[0] = 0.001;
    int rc = -1;
    if (bn_tensors(I, "batch_norm_infer", names, a, 5, in) ||
        (p[5] && bn_eps(I, "batch_norm_infer", a[5], in[0]->dtype, &at.f[0])))
        goto done;
    if (!p[5] && in[0]->dtype == TFE_FLOAT32) at.f[0] = (float)0.001;
    rc = finish(I, tfe_call1(OP_BATCH_NORM_INFER, 5, in, &at), out);
done:
    release(5, in);
    return rc;
}

/* ---- fields ---------------------------------------------------------------- */

int tensor_getattr(Interp *I, Value x, const char *name, Value *out)
{
    if (x.kind != V_SCALAR && x.kind != V_TENSOR) return 1;
    bool sc = x.kind == V_SCALAR;
    const tfe_tensor *t = sc ? NULL : x.u.t;
    int rank = sc ? 0 : t->rank;
    if (!strcmp(name, "shape") || !strcmp(name, "size")) trace_shape_read(I, t);
    if (!strcmp(name, "shape")) {
        *out = shape_tuple(rank, sc ? NULL : t->shape);
    } else if (!strcmp(name, "dtype")) {
        *out = v_cstr(dtype_name(sc ? (tfe_dtype)x.dtype : t->dtype));
    } else if (!strcmp(name, "ndim")) {
        *out = v_int(rank);
    } else if (!strcmp(name, "size")) {
        *out = v_int(sc ? 1 : shape_numel(t->rank, t->shape));
    } else if (!strcmp(name, "device")) {
        int dev = sc || !t->storage ? 0 : t->storage->device;
        char buf[32];
        if (dev == 0) snprintf(buf, sizeof buf, "cpu:0");
        else snprintf(buf, sizeof buf, "gpu:%d", dev - 1);
        *out = v_cstr(buf);
    } else if (!strcmp(name, "T")) {
        if (rank < 2) {
            *out = x;
            value_incref(x);
            return 0;
        }
        tfe_attrs at;
        tfe_attrs_init(&at);
        return run1(I, OP_TRANSPOSE, x.u.t, &at, out);
    } else {
        return 1;
    }
    return 0;
}

/* ---- registration ---------------------------------------------------------- */

void builtins_tensor_register(Interp *I)
{
    /* The op table generates the elementwise and reduction builtins. */
    for (int op = 0; op < TFE_NOPS; op++) {
        unsigned fl = tfe_ops[op].flags;
        void *d = (void *)(intptr_t)op;
        if (fl & F_UNARY) interp_define_builtin(I, tfe_ops[op].name, bi_unary, d);
        else if (fl & F_BINARY) interp_define_builtin(I, tfe_ops[op].name, bi_binary, d);
        else if (fl & F_REDUCTION) interp_define_builtin(I, tfe_ops[op].name, bi_reduce, d);
    }
    /* flags: how staged code treats the calls (BF_*, interp/interp.h) */
    static const struct { const char *name; BuiltinFn fn; intptr_t data; int flags; } table[] = {
        {"tensor", bi_tensor, 0, 0},
        {"zeros", bi_zeros_ones, 0, 0},
        {"ones", bi_zeros_ones, 1, 0},
        {"zeros_like", bi_like, 0, 0},
        {"ones_like", bi_like, 1, 0},
        {"full", bi_full, 0, 0},
        {"arange", bi_arange, 0, 0},
        {"linspace", bi_linspace, 0, 0},
        {"eye", bi_eye, 0, 0},
        {"randn", bi_random, OP_RANDN, 0},
        {"rand", bi_random, OP_RAND, 0},
        {"randint", bi_randint, 0, 0},
        {"seed", bi_seed, 0, BF_EFFECT}, /* resets the random stream: again at every call */
        {"shape", bi_meta, 0, 0},
        {"rank", bi_meta, 1, 0},
        {"size", bi_meta, 2, 0},
        {"dtype", bi_meta, 3, 0},
        {"cast", bi_cast, 0, 0},
        {"reshape", bi_reshape, 0, 0},
        {"flatten", bi_flatten, 0, 0},
        {"transpose", bi_transpose, 0, 0},
        {"expand_dims", bi_expand_dims, 0, 0},
        {"squeeze", bi_squeeze, 0, 0},
        {"broadcast_to", bi_broadcast_to, 0, 0},
        {"concat", bi_concat_stack, OP_CONCAT, 0},
        {"stack", bi_concat_stack, OP_STACK, 0},
        {"split", bi_split, 0, 0},
        {"tile", bi_tile, 0, 0},
        {"where", bi_where, 0, 0},
        {"clip", bi_clip, 0, 0},
        {"matmul", bi_binary, OP_MATMUL, 0},
        {"softmax", bi_softmax, OP_SOFTMAX, 0},
        {"log_softmax", bi_softmax, OP_LOG_SOFTMAX, 0},
        {"one_hot", bi_one_hot, 0, 0},
        {"gather", bi_gather, 0, 0},
        {"conv2d", bi_conv2d, 0, 0},
        {"max_pool2d", bi_pool, OP_MAX_POOL2D, 0},
        {"avg_pool2d", bi_pool, OP_AVG_POOL2D, 0},
        {"dropout", bi_dropout, 0, 0},
        {"stop_gradient", bi_stop_gradient, 0, 0},
        {"item", bi_item, 0, 0},
        {"tolist", bi_tolist, 0, 0},
        {"batch_norm_train", bi_batch_norm_train, 0, 0},
        {"batch_norm_infer", bi_batch_norm_infer, 0, 0},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        interp_define_builtin_flags(I, table[i].name, table[i].fn, (void *)table[i].data, table[i].flags,
                                    NULL);
}
