/* builtins_lib.c — the bindings of the library ops (docs/builtins.md, "More
 * math, scans, sorting, counting"): cumsum, cumprod, sort, argsort, topk,
 * take_along_axis, unique, bincount, searchsorted, isclose, allclose. The
 * elementwise ones (tan, erf, ...) are bound from the op table. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "interp/builtins_args.h"
#include "interp/internal.h"
#include "interp/interp.h"
#include "tensor/ops.h"

#define PARSE(fname, spec, n)                                                          \
    Value a[n];                                                                        \
    bool p[n];                                                                         \
    (void)p;                                                                           \
    if (args_parse(I, fname, spec, argc, argv, nkw, kwnames, kwvals, a, p)) return -1

static int norm_axis(Interp *I, const char *fn, int64_t axis, int rank, int *out)
{
    if (axis < -rank || axis >= rank)
        return interp_raise(I, "%s: axis %lld is out of range for a tensor of rank %d", fn, (long long)axis,
                            rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return 0;
}

/* axis= of a one-axis builtin: an int (def when absent) normalised for x */
static int get_axis(Interp *I, const char *fn, bool given, Value v, int64_t def, const tfe_tensor *x,
                    tfe_attrs *at)
{
    int64_t ax = def;
    int n = 0;
    if (given && arg_int(I, fn, "axis", v, &ax)) return -1;
    if (norm_axis(I, fn, ax, x->rank, &n)) return -1;
    at->naxes = 1;
    at->axes[0] = n;
    return 0;
}

static int finish(Interp *I, tfe_tensor *r, Value *out)
{
    if (!r) return interp_raise_tensor_error(I);
    *out = value_from_tensor_take(r);
    return 0;
}

static Value pair(tfe_tensor *a, tfe_tensor *b)
{
    Seq *s = seq_new(2);
    seq_push_take(s, value_from_tensor_take(a));
    seq_push_take(s, value_from_tensor_take(b));
    return v_obj(V_TUPLE, s);
}

/* x flattened to 1-D (a new reference) */
static tfe_tensor *flat(tfe_tensor *x)
{
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = 1;
    at.ints[0] = -1;
    return tfe_call1(OP_RESHAPE, 1, &x, &at);
}

/* cumsum(x, axis=nil), cumprod: axis nil scans the flattened x (NumPy) */
BUILTIN(bi_cumulative)
{
    tfe_op op = (tfe_op)(intptr_t)data;
    const char *fn = tfe_ops[op].name;
    PARSE(fn, "x, axis=", 2);
    tfe_tensor *x = arg_tensor(I, fn, "x", a[0]);
    if (!x) return -1;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = 1;
    int rc = -1;
    if (a[1].kind == V_NIL) {
        tfe_tensor *f = flat(x);
        tensor_decref(x);
        if (!(x = f)) return interp_raise_tensor_error(I);
    }
    if (!get_axis(I, fn, a[1].kind != V_NIL, a[1], 0, x, &at)) rc = finish(I, tfe_call1(op, 1, &x, &at), out);
    tensor_decref(x);
    return rc;
}

/* The indices that sort x along at's axis (k >= 0: the first k only). */
static tfe_tensor *argsort_of(tfe_tensor *x, const tfe_attrs *axis, bool desc, int64_t k)
{
    tfe_attrs at = *axis;
    at.ints[0] = desc;
    at.nints = 1;
    if (k >= 0) {
        at.ints[1] = k;
        at.nints = 2;
    }
    return tfe_call1(OP_ARGSORT, 1, &x, &at);
}

static tfe_tensor *take_along(tfe_tensor *x, tfe_tensor *idx, const tfe_attrs *axis)
{
    tfe_tensor *in[2] = {x, idx};
    return tfe_call1(OP_TAKE_ALONG_AXIS, 2, in, axis);
}

/* sort(x, axis=-1, descending=false) and argsort(...); data 1: argsort */
BUILTIN(bi_sort)
{
    const char *fn = data ? "argsort" : "sort";
    PARSE(fn, "x, axis=, descending=", 3);
    bool desc = false;
    if (arg_opt_bool(I, fn, "descending", a[2], false, &desc)) return -1;
    tfe_tensor *x = arg_tensor(I, fn, "x", a[0]);
    if (!x) return -1;
    tfe_attrs at;
    tfe_attrs_init(&at);
    int rc = -1;
    if (!get_axis(I, fn, p[1], a[1], -1, x, &at)) {
        tfe_tensor *idx = argsort_of(x, &at, desc, -1);
        if (data || !idx) {
            rc = finish(I, idx, out);
        } else {
            rc = finish(I, take_along(x, idx, &at), out);
            tensor_decref(idx);
        }
    }
    tensor_decref(x);
    return rc;
}

/* topk(x, k, axis=-1) -> (values, indices): the k largest, largest first
 * (ties: the first index first; NaN counts as the largest) */
BUILTIN(bi_topk)
{
    PARSE("topk", "x, k, axis=", 3);
    int64_t k;
    if (arg_int(I, "topk", "k", a[1], &k)) return -1;
    tfe_tensor *x = arg_tensor(I, "topk", "x", a[0]);
    if (!x) return -1;
    tfe_attrs at;
    tfe_attrs_init(&at);
    int rc = -1;
    if (!get_axis(I, "topk", p[2], a[2], -1, x, &at)) {
        int64_t n = x->shape[at.axes[0]];
        if (k < 0 || (n >= 0 && k > n)) {
            interp_raise(I, "topk: k = %lld is out of range for an axis of size %lld", (long long)k, (long long)n);
        } else {
            tfe_tensor *idx = argsort_of(x, &at, true, k), *v = idx ? take_along(x, idx, &at) : NULL;
            if (!v) {
                tensor_decref(idx);
                rc = interp_raise_tensor_error(I);
            } else {
                *out = pair(v, idx);
                rc = 0;
            }
        }
    }
    tensor_decref(x);
    return rc;
}

/* take_along_axis(x, indices, axis): NumPy's */
BUILTIN(bi_take_along_axis)
{
    PARSE("take_along_axis", "x, indices, axis", 3);
    tfe_tensor *x = arg_tensor(I, "take_along_axis", "x", a[0]);
    if (!x) return -1;
    tfe_tensor *idx = arg_tensor(I, "take_along_axis", "indices", a[1]);
    tfe_attrs at;
    tfe_attrs_init(&at);
    int rc = -1;
    if (idx && !get_axis(I, "take_along_axis", true, a[2], 0, x, &at)) rc = finish(I, take_along(x, idx, &at), out);
    tensor_decref(x);
    tensor_decref(idx);
    return rc;
}

/* unique(x, return_counts=false): sorted distinct values of the flattened x */
BUILTIN(bi_unique)
{
    PARSE("unique", "x, return_counts=", 2);
    bool counts = false;
    if (arg_opt_bool(I, "unique", "return_counts", a[1], false, &counts)) return -1;
    tfe_tensor *x = arg_tensor(I, "unique", "x", a[0]);
    if (!x) return -1;
    tfe_tensor *r[2] = {0};
    tfe_attrs at;
    tfe_attrs_init(&at);
    int rc = tfe_execute(OP_UNIQUE, 1, &x, &at, r);
    tensor_decref(x);
    if (rc) return interp_raise_tensor_error(I);
    if (counts) {
        *out = pair(r[0], r[1]);
    } else {
        tensor_decref(r[1]);
        *out = value_from_tensor_take(r[0]);
    }
    return 0;
}

/* bincount(x, weights=nil, minlength=0) */
BUILTIN(bi_bincount)
{
    PARSE("bincount", "x, weights=, minlength=", 3);
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = 1;
    if (p[2] && arg_int(I, "bincount", "minlength", a[2], &at.ints[0])) return -1;
    tfe_tensor *in[2] = {arg_tensor(I, "bincount", "x", a[0]), NULL};
    if (!in[0]) return -1;
    int n = 1, rc = -1;
    if (a[1].kind != V_NIL && !(in[n++] = arg_tensor(I, "bincount", "weights", a[1]))) goto done;
    tfe_tensor *r = NULL;
    if (tfe_execute(OP_BINCOUNT, n, in, &at, &r)) rc = interp_raise_tensor_error(I);
    else rc = finish(I, r, out);
done:
    tensor_decref(in[0]);
    tensor_decref(in[1]);
    return rc;
}

/* searchsorted(sorted, values, side="left") */
BUILTIN(bi_searchsorted)
{
    PARSE("searchsorted", "sorted, values, side=", 3);
    const char *side = NULL;
    if (arg_opt_string(I, "searchsorted", "side", a[2], &side)) return -1;
    if (side && strcmp(side, "left") && strcmp(side, "right"))
        return interp_raise(I, "searchsorted: side must be \"left\" or \"right\", got \"%s\"", side);
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = 1;
    at.ints[0] = side && !strcmp(side, "right");
    tfe_tensor *in[2] = {arg_tensor(I, "searchsorted", "sorted", a[0]), NULL};
    if (!in[0]) return -1;
    int rc = -1;
    /* a float literal meets sorted's dtype: its double where that is float64
     * (searchsorted(tensor((0.1, 0.3), dtype=float64), 0.3) is 1, as NumPy's;
     * through float32, 0.3 would round above the 0.3 in sorted) */
    if ((in[1] = arg_tensor_for(I, "searchsorted", "values", a[1], in[0]->dtype)))
        rc = finish(I, tfe_call1(OP_SEARCHSORTED, 2, in, &at), out);
    tensor_decref(in[0]);
    tensor_decref(in[1]);
    return rc;
}

/* isclose(a, b, rtol=1e-5, atol=1e-8, equal_nan=false), allclose (data 1):
 * NumPy's defaults and rule, |a - b| <= atol + rtol |b| */
BUILTIN(bi_isclose)
{
    const char *fn = data ? "allclose" : "isclose";
    PARSE(fn, "a, b, rtol=, atol=, equal_nan=", 5);
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.f[0] = 1e-5;
    at.f[1] = 1e-8;
    bool eqnan = false;
    if ((p[2] && arg_number(I, fn, "rtol", a[2], &at.f[0], NULL)) ||
        (p[3] && arg_number(I, fn, "atol", a[3], &at.f[1], NULL)) ||
        arg_opt_bool(I, fn, "equal_nan", a[4], false, &eqnan))
        return -1;
    at.nints = 1;
    at.ints[0] = eqnan;
    /* A float literal meets the other operand's dtype, as in a - b: its
     * double where that is float64 (through float32, isclose(x64, 0.3,
     * rtol=0.0, atol=0.0) is false where x64 holds 0.3). The operand that is
     * not a literal is read first, so a literal a meets b's dtype too. */
    int first = a[0].kind == V_SCALAR && a[0].lit ? 1 : 0;
    static const char *const names[2] = {"a", "b"};
    tfe_tensor *in[2] = {NULL, NULL};
    if (!(in[first] = arg_tensor(I, fn, names[first], a[first]))) return -1;
    int rc = -1;
    if ((in[1 - first] = arg_tensor_for(I, fn, names[1 - first], a[1 - first], in[first]->dtype))) {
        /* rtol and atol as literals are written: k_isclose compares in
         * float64 (float64 or int operands) with their doubles, as NumPy's,
         * and rounds them to float32 itself for float32 operands */
        if (p[2] && a[2].kind == V_SCALAR && a[2].lit) at.f[0] = a[2].u.f;
        if (p[3] && a[3].kind == V_SCALAR && a[3].lit) at.f[1] = a[3].u.f;
        tfe_tensor *r = tfe_call1(OP_ISCLOSE, 2, in, &at);
        if (r && data) {
            tfe_attrs all;
            tfe_attrs_init(&all);
            tfe_tensor *t = tfe_call1(OP_ALL, 1, &r, &all);
            tensor_decref(r);
            r = t;
        }
        rc = finish(I, r, out);
    }
    tensor_decref(in[0]);
    tensor_decref(in[1]);
    return rc;
}

void builtins_lib_register(Interp *I)
{
    static const char data_dependent[] =
        "%s: the shape of its result depends on the data, so a staged function cannot call it; "
        "call it outside @staged and pass the result in";
    static char why_unique[200], why_bincount[200];
    snprintf(why_unique, sizeof why_unique, data_dependent, "unique");
    snprintf(why_bincount, sizeof why_bincount, data_dependent, "bincount");
    interp_define_builtin(I, "cumsum", bi_cumulative, (void *)(intptr_t)OP_CUMSUM);
    interp_define_builtin(I, "cumprod", bi_cumulative, (void *)(intptr_t)OP_CUMPROD);
    interp_define_builtin(I, "sort", bi_sort, NULL);
    interp_define_builtin(I, "argsort", bi_sort, (void *)1);
    interp_define_builtin(I, "topk", bi_topk, NULL);
    interp_define_builtin(I, "take_along_axis", bi_take_along_axis, NULL);
    interp_define_builtin_flags(I, "unique", bi_unique, NULL, BF_NOT_STAGEABLE, why_unique);
    interp_define_builtin_flags(I, "bincount", bi_bincount, NULL, BF_NOT_STAGEABLE, why_bincount);
    interp_define_builtin(I, "searchsorted", bi_searchsorted, NULL);
    interp_define_builtin(I, "isclose", bi_isclose, NULL);
    interp_define_builtin(I, "allclose", bi_isclose, (void *)1);
}
