/* builtins_random.c — NumPy's random helpers on the global stream: normal,
 * uniform, choice, shuffle and permutation (docs/builtins.md, "Random").
 * Each is made of ops (randn, rand, randint, randperm, choice, then
 * arithmetic or gather), so a staged function records the same draws and the
 * stream moves by the same count as in an eager run. */
#include <stdint.h>
#include <string.h>

#include "interp/builtins_args.h"
#include "interp/internal.h"
#include "tensor/device.h"
#include "tensor/ops.h"

#define PARSE(fname, spec, n)                                                          \
    Value a[n];                                                                        \
    bool p[n];                                                                         \
    (void)p;                                                                           \
    if (args_parse(I, fname, spec, argc, argv, nkw, kwnames, kwvals, a, p)) return -1

static int finish(Interp *I, tfe_tensor *r, Value *out)
{
    if (!r) return interp_raise_tensor_error(I);
    *out = value_from_tensor_take(r);
    return 0;
}

static void drop(tfe_tensor *t)
{
    if (t) tensor_decref(t);
}

/* A shape argument: an int or a tuple/list of non-negative ints. */
static int get_size(Interp *I, const char *fn, const char *what, Value v, int *rank, int64_t *shape)
{
    int64_t one;
    if (arg_as_int(v, &one)) {
        *rank = 1;
        shape[0] = one;
    } else if (v.kind == V_TUPLE || v.kind == V_LIST) {
        Seq *s = (Seq *)v.u.o;
        if (s->n > TFE_MAX_RANK)
            return interp_raise(I, "%s: %s has %d dimensions; at most %d are supported", fn, what, s->n,
                                TFE_MAX_RANK);
        for (int i = 0; i < s->n; i++)
            if (!arg_as_int(s->items[i], &shape[i])) return arg_error(I, fn, what, "a tuple of ints", v);
        *rank = s->n;
    } else {
        return arg_error(I, fn, what, "an int or a tuple of ints", v);
    }
    for (int i = 0; i < *rank; i++)
        if (shape[i] < 0)
            return interp_raise(I, "%s: negative dimension %lld in %s", fn, (long long)shape[i], what);
    return 0;
}

static tfe_dtype dtype_arg(Interp *I, const char *fn, Value v, tfe_dtype def, int *rc)
{
    *rc = 0;
    if (v.kind == V_NIL) return def;
    int d = v.kind == V_STR ? dtype_from_name(((Str *)v.u.o)->s) : -1;
    if (d != TFE_FLOAT32 && d != TFE_FLOAT64) {
        *rc = v.kind == V_STR ? interp_raise(I, "%s: dtype must be float32 or float64, got %s", fn, ((Str *)v.u.o)->s)
                              : arg_error(I, fn, "dtype", "a string such as \"float32\"", v);
        return def;
    }
    return (tfe_dtype)d;
}

/* Raises normal's error when a std element is negative (NaN passes, as in
 * NumPy); returns whether it raised. */
static bool std_negative(Interp *I, tfe_tensor *std)
{
    tfe_tensor *h = tensor_to_device(std, 0);
    if (!h) return interp_raise_tensor_error(I), true;
    int64_t n = tensor_numel(h), bad = -1;
    for (int64_t i = 0; i < n && bad < 0; i++)
        if (tensor_load_f64(h, i) < 0) bad = i;
    double sv = bad >= 0 ? tensor_load_f64(h, bad) : 0;
    tensor_decref(h);
    if (bad < 0) return false;
    interp_raise(I, "normal: std must be >= 0 (a standard deviation), got %g%s", sv, n > 1 ? " in the std tensor" : "");
    return true;
}

/* _check_normal_std(std): normal's check of a std a staged function
 * computes, made by the graph at every call (a host node). */
BUILTIN(bi_check_normal_std)
{
    (void)data;
    Value a[1];
    bool p[1];
    if (args_parse(I, "normal", "std", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    tfe_tensor *t = arg_tensor(I, "normal", "std", a[0]);
    if (!t) return -1;
    bool bad = std_negative(I, t);
    tensor_decref(t);
    *out = v_nil();
    return bad ? -1 : 0;
}

/* normal(mean=0.0, std=1.0, shape=nil, dtype=nil) and uniform(lo=0.0,
 * hi=1.0, shape=nil, dtype=nil): mean + std * randn(shape) and
 * lo + (hi - lo) * rand(shape), NumPy's formulas. data: 0 normal, 1 uniform.
 * shape nil is the broadcast shape of the two parameters; a shape given must
 * be that broadcast shape or one they broadcast to. dtype nil: float64 when a
 * parameter is a float64 tensor, else float32. */
BUILTIN(bi_normal_uniform)
{
    bool uni = data != NULL;
    const char *fn = uni ? "uniform" : "normal";
    PARSE(fn, uni ? "lo=, hi=, shape=, dtype=" : "mean=, std=, shape=, dtype=", 4);
    const char *names[2] = {uni ? "lo" : "mean", uni ? "hi" : "std"};
    tfe_tensor *par[2] = {NULL, NULL}, *z = NULL, *t = NULL, *r = NULL;
    int rc = -1;
    Value pv[2];
    for (int i = 0; i < 2; i++) {
        pv[i] = a[i];
        if (pv[i].kind == V_NIL) { /* the default: a weak literal, as if written */
            pv[i] = v_float(i == 0 ? 0.0 : 1.0, TFE_FLOAT32);
            pv[i].weak = true;
        }
    }
    /* The draws' dtype: dtype=, else float64 when a parameter that is not a
     * literal is float64, else float32. Float literals are read last, in that
     * dtype: a literal's double in float64 (normal(0.3, 0.0, (1,),
     * dtype=float64) is 0.3, not 0.3's float32 rounding), as in 0.3 + x64. */
    tfe_dtype def = TFE_FLOAT32;
    for (int i = 0; i < 2; i++) {
        if (pv[i].kind == V_SCALAR && pv[i].lit) continue;
        if (!(par[i] = arg_tensor(I, fn, names[i], pv[i]))) goto done;
        if (par[i]->dtype == TFE_FLOAT64) def = TFE_FLOAT64;
    }
    int drc;
    tfe_dtype dt = dtype_arg(I, fn, a[3], def, &drc);
    if (drc) goto done;
    for (int i = 0; i < 2; i++)
        if (!par[i] && !(par[i] = arg_tensor_for(I, fn, names[i], pv[i], dt))) goto done;
    /* NumPy's normal raises for scale < 0, which would flip the draws
     * silently; a uniform with hi < lo is NumPy's too (it mirrors). A std
     * a trace computes has no value until the graph runs: the check is then
     * a call of _check_normal_std, an effect, so the graph makes it at every
     * call, with that call's std, and raises eager code's error there. */
    if (!uni && par[1]->node && I->tracer) {
        int k = builtin_index(I, "_check_normal_std");
        tensor_incref(par[1]);
        Value sv = v_tensor_take(par[1]), nil = v_nil();
        int crc = k < 0 ? -1 : call_value(I, I->builtin_vals[k], 1, &sv, 0, NULL, NULL, &nil);
        value_decref(sv);
        value_decref(nil);
        if (crc) goto done;
    } else if (!uni && std_negative(I, par[1])) {
        goto done;
    }
    int brank;
    int64_t bshape[TFE_MAX_RANK];
    if (broadcast_shapes(fn, par[0]->rank, par[0]->shape, par[1]->rank, par[1]->shape, &brank, bshape)) {
        interp_raise_tensor_error(I);
        goto done;
    }
    tfe_attrs at;
    tfe_attrs_init(&at);
    int rank = brank;
    memcpy(at.ints, bshape, sizeof bshape);
    if (a[2].kind != V_NIL) {
        if (get_size(I, fn, "shape", a[2], &rank, at.ints)) goto done;
        int orank;
        int64_t oshape[TFE_MAX_RANK];
        char b1[200], b2[200];
        if (broadcast_shapes(fn, brank, bshape, rank, at.ints, &orank, oshape) || orank != rank ||
            memcmp(oshape, at.ints, sizeof(int64_t) * (size_t)rank)) {
            interp_raise(I, "%s: %s and %s of shape %s do not broadcast to shape %s", fn, names[0], names[1],
                         shape_str(brank, bshape, b1), shape_str(rank, at.ints, b2));
            goto done;
        }
    }
    at.nints = rank;
    at.dtype = dt;
    tfe_random_next(&at, (uint64_t)shape_numel(rank, at.ints));
    if (!(z = tfe_call1(uni ? OP_RAND : OP_RANDN, 0, NULL, &at))) goto tensor_error;
    if (uni) {
        tfe_tensor *width = tfe_binary(OP_SUB, par[1], par[0]);
        if (!width) goto tensor_error;
        t = tfe_binary(OP_MUL, width, z);
        tensor_decref(width);
    } else {
        t = tfe_binary(OP_MUL, par[1], z);
    }
    if (!t || !(r = tfe_binary(OP_ADD, par[0], t))) goto tensor_error;
    rc = finish(I, r, out);
    r = NULL;
    goto done;
tensor_error:
    rc = interp_raise_tensor_error(I);
done:
    drop(par[0]);
    drop(par[1]);
    drop(z);
    drop(t);
    return rc;
}

/* randperm(n): a random order of 0..n-1, n blocks of the stream. */
static tfe_tensor *randperm(int64_t n)
{
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.dtype = TFE_INT64;
    at.nints = 1;
    at.ints[0] = n;
    tfe_random_next(&at, (uint64_t)n);
    return tfe_call1(OP_RANDPERM, 0, NULL, &at);
}

/* x's rows in the order of the int64 indices idx (gather on axis 0). */
static tfe_tensor *rows(tfe_tensor *x, tfe_tensor *idx)
{
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.naxes = 1;
    at.axes[0] = 0;
    tfe_tensor *in[2] = {x, idx};
    return tfe_call1(OP_GATHER, 2, in, &at);
}

/* shuffle(x): a copy of x with its rows (axis 0) in a random order. */
static int shuffled(Interp *I, const char *fn, Value v, Value *out)
{
    tfe_tensor *x = arg_tensor(I, fn, "x", v);
    if (!x) return -1;
    if (x->rank == 0) {
        tensor_decref(x);
        return interp_raise(I, "%s: x must have at least one axis, got a 0-d %s", fn, dtype_name(x->dtype));
    }
    tfe_tensor *perm = randperm(x->shape[0]), *r = perm ? rows(x, perm) : NULL;
    tensor_decref(x);
    drop(perm);
    return finish(I, r, out);
}

BUILTIN(bi_shuffle)
{
    PARSE("shuffle", "x", 1);
    return shuffled(I, "shuffle", a[0], out);
}

/* permutation(n_or_x): NumPy's: an int n gives a random order of 0..n-1
 * (int64), a tensor a copy shuffled along axis 0. */
BUILTIN(bi_permutation)
{
    PARSE("permutation", "x", 1);
    int64_t n;
    if (a[0].kind == V_SCALAR && a[0].dtype != TFE_BOOL && arg_as_int(a[0], &n)) {
        if (n < 0) return interp_raise(I, "permutation: n must be non-negative, got %lld", (long long)n);
        return finish(I, randperm(n), out);
    }
    if (a[0].kind != V_TENSOR) return arg_error(I, "permutation", "x", "an int or a tensor", a[0]);
    return shuffled(I, "permutation", a[0], out);
}

/* choice(a, size=nil, replace=true, p=nil): NumPy's Generator.choice. a is
 * an int n (draw from 0..n-1) or a tensor (draw rows of axis 0); size nil
 * draws one (a scalar or a row); p the probabilities of the n entries. */
BUILTIN(bi_choice)
{
    PARSE("choice", "a, size=, replace=, p=", 4);
    tfe_tensor *pop = NULL, *pt = NULL, *idx = NULL, *t = NULL;
    int rc = -1;
    int64_t n;
    if (a[0].kind == V_SCALAR && a[0].dtype != TFE_BOOL && arg_as_int(a[0], &n)) {
        if (n < 0) return interp_raise(I, "choice: a must be a non-negative int or a tensor, got %lld", (long long)n);
    } else if (a[0].kind == V_TENSOR && a[0].u.t->rank > 0) {
        pop = a[0].u.t;
        tensor_incref(pop);
        n = pop->shape[0];
    } else {
        return arg_error(I, "choice", "a", "an int or a tensor of rank >= 1", a[0]);
    }
    tfe_attrs at;
    tfe_attrs_init(&at);
    int rank = 0;
    bool replace = true;
    if ((a[1].kind != V_NIL && get_size(I, "choice", "size", a[1], &rank, at.ints)) ||
        arg_opt_bool(I, "choice", "replace", a[2], true, &replace))
        goto done;
    at.nints = rank;
    int64_t k = shape_numel(rank, at.ints);
    if (a[3].kind != V_NIL) {
        if (!(pt = arg_tensor(I, "choice", "p", a[3]))) goto done;
        if (pt->rank != 1 || pt->shape[0] != n) {
            char b[200];
            interp_raise(I, "choice: p must be a vector of %lld probabilities, one per entry of a, got shape %s",
                         (long long)n, shape_str(pt->rank, pt->shape, b));
            goto done;
        }
        at.f[0] = replace ? 1.0 : 0.0;
        at.dtype = TFE_INT64;
        tfe_random_next(&at, (uint64_t)k);
        if (!(idx = tfe_call1(OP_CHOICE, 1, &pt, &at))) goto tensor_error;
    } else if (k > 0 && n == 0) {
        interp_raise(I, "choice: cannot draw from an empty population");
        goto done;
    } else if (replace) {
        at.dtype = TFE_INT64;
        at.f[0] = 0;
        at.f[1] = (double)(n > 0 ? n : 1);
        tfe_random_next(&at, (uint64_t)k);
        if (!(idx = tfe_call1(OP_RANDINT, 0, NULL, &at))) goto tensor_error;
    } else {
        if (k > n) {
            interp_raise(I, "choice: cannot take %lld samples from a population of %lld without replacement",
                         (long long)k, (long long)n);
            goto done;
        }
        /* the first k places of a permutation of all n, shaped as size */
        if (!(t = randperm(n))) goto tensor_error;
        tfe_attrs sl;
        tfe_attrs_init(&sl);
        sl.naxes = 0;
        sl.nints = 3;
        sl.ints[0] = 0, sl.ints[1] = k, sl.ints[2] = 1;
        tfe_tensor *head = tfe_call1(OP_SLICE, 1, &t, &sl);
        if (!head) goto tensor_error;
        tfe_attrs rs;
        tfe_attrs_init(&rs);
        rs.nints = rank;
        memcpy(rs.ints, at.ints, sizeof(int64_t) * (size_t)rank);
        idx = tfe_call1(OP_RESHAPE, 1, &head, &rs);
        tensor_decref(head);
        if (!idx) goto tensor_error;
    }
    if (pop) {
        rc = finish(I, rows(pop, idx), out);
    } else {
        rc = finish(I, idx, out);
        idx = NULL;
    }
    goto done;
tensor_error:
    rc = interp_raise_tensor_error(I);
done:
    drop(pop);
    drop(pt);
    drop(idx);
    drop(t);
    return rc;
}

void builtins_random_register(Interp *I)
{
    interp_define_builtin(I, "normal", bi_normal_uniform, NULL);
    interp_define_builtin(I, "uniform", bi_normal_uniform, (void *)1);
    interp_define_builtin(I, "choice", bi_choice, NULL);
    interp_define_builtin_flags(I, "_check_normal_std", bi_check_normal_std, NULL, BF_EFFECT, NULL);
    ((Builtin *)I->builtin_vals[builtin_index(I, "_check_normal_std")].u.o)->value_check = true;
    interp_define_builtin(I, "shuffle", bi_shuffle, NULL);
    interp_define_builtin(I, "permutation", bi_permutation, NULL);
}
