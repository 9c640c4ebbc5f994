/* builtins_linalg.c — linear algebra built-ins (docs/builtins.md, "Linear
 * algebra"): outer, diag, trace, tril, triu, einsum, norm, and the LAPACK
 * ops solve, inv, det, cholesky. Everything but the ops of the table
 * (tril, triu, inv, solve, det, cholesky) is composed of existing ops
 * (reshape, slice, set_slice, transpose, matmul, sum, ...), so gradients,
 * staging and devices come with them. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "interp/builtins_args.h"
#include "interp/interp.h"
#include "tensor/op_scope.h"

#define PARSE(fname, spec, n)                                                          \
    Value a[n];                                                                        \
    bool p[n];                                                                         \
    (void)p;                                                                           \
    if (args_parse(I, fname, spec, argc, argv, nkw, kwnames, kwvals, a, p)) return -1

/* ---- a scope of temporaries (tensor/op_scope.h): a builtin reads as a
 * sequence of ops with one check at the end. */
typedef tfe_scope LScope;

static void ls_release(LScope *s) { scope_release(s); }

/* r (kept in s) as the builtin's result: 0, or -1 raising the tensor error */
static int ls_finish(Interp *I, LScope *s, tfe_tensor *r, Value *out) {
    if (r) tensor_incref(r);
    ls_release(s);
    if (!r) return interp_raise_tensor_error(I);
    *out = value_from_tensor_take(r);
    return 0;
}

static tfe_tensor *reshape(LScope *s, tfe_tensor *x, int rank, const int64_t *shape) {
    if (!x) return NULL;
    if (x->rank == rank && !memcmp(x->shape, shape, sizeof(int64_t) * (size_t)rank)) return x;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = rank;
    for (int i = 0; i < rank; i++) at.ints[i] = shape[i];
    return scope_call(s, OP_RESHAPE, 1, &x, &at);
}

static tfe_tensor *transpose(LScope *s, tfe_tensor *x, const int *perm) {
    if (!x) return NULL;
    bool id = true;
    for (int i = 0; i < x->rank; i++) id &= perm[i] == i;
    if (id) return x;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = x->rank;
    for (int i = 0; i < x->rank; i++) at.ints[i] = perm[i];
    return scope_call(s, OP_TRANSPOSE, 1, &x, &at);
}

/* x[start:stop:step] of a 1-D x (a view) */
static tfe_tensor *slice1(LScope *s, tfe_tensor *x, int64_t start, int64_t stop, int64_t step) {
    if (!x) return NULL;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.naxes = 0;
    at.nints = 3;
    at.ints[0] = start;
    at.ints[1] = stop;
    at.ints[2] = step;
    return scope_call(s, OP_SLICE, 1, &x, &at);
}

/* The argument as a tensor kept in s, or NULL after raising */
static tfe_tensor *arg(Interp *I, LScope *s, const char *fn, const char *name, Value v) {
    tfe_tensor *t = arg_tensor(I, fn, name, v);
    if (t && !scope_keep(s, t)) {
        interp_raise_tensor_error(I);
        return NULL;
    }
    return t;
}

/* ints and bools as float32 (exp's rule); floats as they are */
static tfe_tensor *floated(LScope *s, tfe_tensor *x) {
    if (!x || dtype_is_float(x->dtype)) return x;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.dtype = TFE_FLOAT32;
    return scope_call(s, OP_CAST, 1, &x, &at);
}

/* ---- outer, diag, trace, tril, triu ----------------------------------------------- */

/* outer(a, b): NumPy's, of the flattened operands: a[:, nil] * b[nil, :] */
BUILTIN(bi_outer)
{
    PARSE("outer", "a, b", 2);
    LScope S = {.n = 0}, *s = &S;
    tfe_tensor *x = arg(I, s, "outer", "a", a[0]), *y = x ? arg(I, s, "outer", "b", a[1]) : NULL;
    if (!y) {
        ls_release(s);
        return -1;
    }
    tfe_tensor *r = scope_op2(s, OP_MUL, reshape(s, x, 2, (int64_t[]){-1, 1}), reshape(s, y, 2, (int64_t[]){1, -1}));
    return ls_finish(I, s, r, out);
}

/* The k-th diagonal of a 2-D x as a strided slice of the flattened x: a
 * view, whose gradient (set_slice into zeros) is exact. */
static tfe_tensor *diagonal(LScope *s, tfe_tensor *x, int64_t k) {
    int64_t n = x->shape[0], m = x->shape[1];
    int64_t len = k >= 0 ? (n < m - k ? n : m - k) : (n + k < m ? n + k : m);
    if (len < 0) len = 0;
    int64_t start = k >= 0 ? k : -k * m;
    tfe_tensor *flat = reshape(s, x, 1, (int64_t[]){n * m});
    if (len == 0) return slice1(s, flat, 0, 0, 1);
    return slice1(s, flat, start, start + (len - 1) * (m + 1) + 1, m + 1);
}

/* diag(x, k=0): a 1-D x gives the matrix with x on its k-th diagonal, a 2-D
 * x its k-th diagonal (NumPy's diag). */
BUILTIN(bi_diag)
{
    PARSE("diag", "x, k=", 2);
    int64_t k = 0;
    if (p[1] && arg_int(I, "diag", "k", a[1], &k)) return -1;
    LScope S = {.n = 0}, *s = &S;
    tfe_tensor *x = arg(I, s, "diag", "x", a[0]), *r = NULL;
    if (!x) return -1;
    if (x->rank == 1) {
        /* x into the flattened zeros at k, k + N + 1, ... (set_slice: its
         * gradient is a slice, exact) */
        int64_t n = x->shape[0], ak = k == INT64_MIN ? INT64_MAX : k < 0 ? -k : k, N, NN;
        if (__builtin_add_overflow(n, ak, &N) || __builtin_mul_overflow(N, N, &NN)) { /* no signed wrap first */
            ls_release(s);
            return interp_raise(I, "diag: k=%lld is too large (the matrix would have %lld + |k| rows)", (long long)k,
                                (long long)n);
        }
        tfe_tensor *z = scope_full(s, 0, x->dtype, 1, (int64_t[]){N * N});
        if (n > 0) {
            tfe_attrs at;
            tfe_attrs_init(&at);
            at.naxes = 0;
            at.nints = 3;
            at.ints[0] = k >= 0 ? k : ak * N;
            at.ints[1] = at.ints[0] + (n - 1) * (N + 1) + 1;
            at.ints[2] = N + 1;
            tfe_tensor *in[2] = {z, x};
            z = scope_call(s, OP_SET_SLICE, 2, in, &at);
        }
        r = reshape(s, z, 2, (int64_t[]){N, N});
    } else if (x->rank == 2) {
        r = diagonal(s, x, k);
    } else {
        ls_release(s);
        return interp_raise(I, "diag: x must be 1-D or 2-D, got a tensor of rank %d", x->rank);
    }
    return ls_finish(I, s, r, out);
}

/* trace(x, offset=0): the sum of a 2-D x's offset-th diagonal */
BUILTIN(bi_trace)
{
    PARSE("trace", "x, offset=", 2);
    int64_t k = 0;
    if (p[1] && arg_int(I, "trace", "offset", a[1], &k)) return -1;
    LScope S = {.n = 0}, *s = &S;
    tfe_tensor *x = arg(I, s, "trace", "x", a[0]);
    if (!x) return -1;
    if (x->rank != 2) {
        ls_release(s);
        return interp_raise(I, "trace: x must be 2-D, got a tensor of rank %d", x->rank);
    }
    return ls_finish(I, s, scope_reduce(s, OP_SUM, diagonal(s, x, k), 1, false), out);
}

/* tril(x, k=0), triu(x, k=0): the ops of the table, over the last two axes */
BUILTIN(bi_tri)
{
    tfe_op op = (tfe_op)(intptr_t)data;
    const char *fn = tfe_ops[op].name;
    PARSE(fn, "x, k=", 2);
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = 1;
    if (p[1] && arg_int(I, fn, "k", a[1], &at.ints[0])) return -1;
    LScope S = {.n = 0}, *s = &S;
    tfe_tensor *x = arg(I, s, fn, "x", a[0]);
    if (!x) return -1;
    return ls_finish(I, s, scope_call(s, op, 1, &x, &at), out);
}

/* ---- LAPACK: inv, det, cholesky, solve --------------------------------------------- */

/* inv(a), det(a), cholesky(a): ints become float32 */
BUILTIN(bi_lapack1)
{
    tfe_op op = (tfe_op)(intptr_t)data;
    const char *fn = tfe_ops[op].name;
    PARSE(fn, "a", 1);
    LScope S = {.n = 0}, *s = &S;
    tfe_tensor *x = arg(I, s, fn, "a", a[0]);
    if (!x) return -1;
    return ls_finish(I, s, scope_op1(s, op, floated(s, x)), out);
}

BUILTIN(bi_solve)
{
    PARSE("solve", "a, b", 2);
    LScope S = {.n = 0}, *s = &S;
    tfe_tensor *x = arg(I, s, "solve", "a", a[0]), *y = x ? arg(I, s, "solve", "b", a[1]) : NULL;
    if (!y) {
        ls_release(s);
        return -1;
    }
    return ls_finish(I, s, scope_op2(s, OP_SOLVE, floated(s, x), floated(s, y)), out);
}

/* ---- norm --------------------------------------------------------------------------- */

/* sum^(1/p) (p = 2: sqrt) with the value 0 and the gradient 0 where sum is
 * 0: a root's derivative is infinite there and would make the chain rule
 * 0 * inf = NaN. The double where keeps the unused branch finite too, so
 * higher derivatives stay NaN-free (PyTorch's choice: the subgradient 0). */
static tfe_tensor *safe_root(LScope *s, tfe_tensor *sum, double p) {
    if (!sum) return NULL;
    tfe_tensor *z = scope_op2(s, OP_EQ, sum, scope_const(s, 0, sum));
    tfe_tensor *safe = scope_where(s, z, scope_const(s, 1, sum), sum);
    tfe_tensor *r = p == 2 ? scope_op1(s, OP_SQRT, safe) : scope_op2(s, OP_POW, safe, scope_const(s, 1 / p, sum));
    return scope_where(s, z, scope_const(s, 0, sum), r);
}

/* ord: 0 none (nil), 1 a number (*pv), 2 "fro", 3 "nuc" */
static int get_ord(Interp *I, Value v, int *kind, double *pv) {
    *kind = 0;
    if (v.kind == V_NIL) return 0;
    if (v.kind == V_STR) {
        const char *str = ((Str *)v.u.o)->s;
        if (!strcmp(str, "fro")) *kind = 2;
        else if (!strcmp(str, "nuc")) *kind = 3;
        else return interp_raise(I, "norm: ord must be a number, \"fro\", \"nuc\" or nil, got \"%s\"", str);
        return 0;
    }
    tfe_dtype dt;
    if (!arg_as_number(v, pv, &dt) || dt == TFE_BOOL)
        return arg_error(I, "norm", "ord", "a number, \"fro\", \"nuc\" or nil", v);
    *kind = 1;
    return 0;
}

/* The vector norm of x over axis (keepdims) */
static tfe_tensor *vector_norm(LScope *s, tfe_tensor *x, int kind, double p, unsigned mask) {
    if (kind == 0 || (kind == 1 && p == 2)) return safe_root(s, scope_reduce(s, OP_SUM, scope_op2(s, OP_MUL, x, x), mask, true), 2);
    tfe_tensor *ax = scope_op1(s, OP_ABS, x);
    if (p == 1) return scope_reduce(s, OP_SUM, ax, mask, true);
    if (p == INFINITY) return scope_reduce(s, OP_MAX, ax, mask, true);
    if (p == -INFINITY) return scope_reduce(s, OP_MIN, ax, mask, true);
    if (p == 0) {
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.dtype = x->dtype;
        tfe_tensor *nz = scope_op2(s, OP_NE, x, scope_const(s, 0, x));
        return scope_reduce(s, OP_SUM, nz ? scope_call(s, OP_CAST, 1, &nz, &at) : NULL, mask, true);
    }
    tfe_tensor *pw;
    if (p > 0 && p < 1) {
        /* |x|^p has an infinite slope at 0 for p < 1: the same guard, so a
         * zero element gets gradient 0 (PyTorch's choice) */
        tfe_tensor *z = scope_op2(s, OP_EQ, ax, scope_const(s, 0, ax));
        pw = scope_where(s, z, scope_const(s, 0, ax), scope_op2(s, OP_POW, scope_where(s, z, scope_const(s, 1, ax), ax), scope_const(s, p, x)));
    } else {
        pw = scope_op2(s, OP_POW, ax, scope_const(s, p, x));
    }
    return safe_root(s, scope_reduce(s, OP_SUM, pw, mask, true), p);
}

/* norm(x, ord=nil, axis=nil, keepdims=false): numpy.linalg.norm */
BUILTIN(bi_norm)
{
    PARSE("norm", "x, ord=, axis=, keepdims=", 4);
    int kind;
    double pv = 0;
    bool keepdims;
    if (get_ord(I, a[1], &kind, &pv) || arg_opt_bool(I, "norm", "keepdims", a[3], false, &keepdims)) return -1;
    LScope S = {.n = 0}, *s = &S;
    tfe_tensor *x = arg(I, s, "norm", "x", a[0]), *r = NULL;
    if (!x) return -1;
    x = floated(s, x);
    if (!x) return ls_finish(I, s, NULL, out);
    int rank = x->rank, axes[2], naxes = 0;
    /* the axes: nil (all, or the matrix/vector x is with an ord), an int, or a pair */
    int n;
    const Value *items = NULL;
    int64_t one;
    if (a[2].kind == V_NIL) {
        if (kind == 0) {
            naxes = -1;
        } else if (rank == 1 || rank == 2) {
            naxes = rank;
            axes[0] = 0;
            axes[1] = 1;
        } else {
            ls_release(s);
            return interp_raise(I, "norm: with ord, x must be 1-D or 2-D unless axis is given; got a tensor of rank %d",
                                rank);
        }
    } else if (arg_as_int(a[2], &one)) {
        naxes = 1;
        axes[0] = (int)one;
    } else if ((a[2].kind == V_TUPLE || a[2].kind == V_LIST) && (n = ((Seq *)a[2].u.o)->n) >= 1 && n <= 2) {
        items = ((Seq *)a[2].u.o)->items;
        naxes = n;
        for (int i = 0; i < n; i++) {
            if (!arg_as_int(items[i], &one)) {
                ls_release(s);
                return arg_error(I, "norm", "axis", "an int, a pair of ints or nil", a[2]);
            }
            axes[i] = (int)one;
        }
    } else {
        ls_release(s);
        return arg_error(I, "norm", "axis", "an int, a pair of ints or nil", a[2]);
    }
    unsigned mask = 0;
    for (int i = 0; i < naxes; i++) {
        int64_t ax = axes[i];
        if (ax < -rank || ax >= rank) {
            ls_release(s);
            return interp_raise(I, "norm: axis %lld is out of range for a tensor of rank %d", (long long)ax, rank);
        }
        axes[i] = (int)(ax < 0 ? ax + rank : ax);
        if (mask & (1u << axes[i])) {
            ls_release(s);
            return interp_raise(I, "norm: axis %d is repeated", axes[i]);
        }
        mask |= 1u << axes[i];
    }
    if (naxes == -1) {
        mask = rank >= 32 ? ~0u : (1u << rank) - 1;
        r = vector_norm(s, x, 0, 0, mask);
    } else if (naxes == 1) {
        if (kind >= 2) {
            ls_release(s);
            return interp_raise(I, "norm: ord \"%s\" is a matrix norm; it needs two axes",
                                kind == 2 ? "fro" : "nuc");
        }
        r = vector_norm(s, x, kind, pv, mask);
    } else {
        /* matrix norms over (row axis, col axis) */
        unsigned rows = 1u << axes[0], cols = 1u << axes[1];
        if (kind == 0 || kind == 2) {
            r = vector_norm(s, x, 0, 0, mask);
        } else if (kind == 1 && (pv == 1 || pv == -1)) {
            /* the largest (smallest) column sum */
            r = scope_reduce(s, pv > 0 ? OP_MAX : OP_MIN, scope_reduce(s, OP_SUM, scope_op1(s, OP_ABS, x), rows, true), cols, true);
        } else if (kind == 1 && (pv == INFINITY || pv == -INFINITY)) {
            /* the largest (smallest) row sum */
            r = scope_reduce(s, pv > 0 ? OP_MAX : OP_MIN, scope_reduce(s, OP_SUM, scope_op1(s, OP_ABS, x), cols, true), rows, true);
        } else {
            char o[64];
            if (kind == 3) snprintf(o, sizeof o, "\"nuc\"");
            else snprintf(o, sizeof o, "%g", pv);
            ls_release(s);
            return interp_raise(I, "norm: matrix norm ord=%s is not supported (ord=2, -2 and \"nuc\" need singular "
                                "values); supported: nil, \"fro\", 1, -1, inf, -inf",
                                o);
        }
    }
    if (!keepdims && r) {
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.naxes = 0;
        for (int i = 0; i < rank; i++)
            if (mask & (1u << i)) at.axes[at.naxes++] = i;
        if (at.naxes) r = scope_call(s, OP_SQUEEZE, 1, &r, &at);
    }
    return ls_finish(I, s, r, out);
}

/* ---- einsum -------------------------------------------------------------------------- */

#define EMAX 16 /* operands */

typedef struct Term {
    char ix[TFE_MAX_RANK + 1]; /* one letter per axis */
    int n;
} Term;

/* Take the diagonal of every repeated letter of operand x (term t): the two
 * axes moved last, merged, and every (n+1)-th element sliced. */
static tfe_tensor *ein_diagonals(LScope *s, tfe_tensor *x, Term *t) {
    for (;;) {
        int p = -1, q = -1;
        for (int i = 0; i < t->n && p < 0; i++)
            for (int j = i + 1; j < t->n; j++)
                if (t->ix[i] == t->ix[j]) {
                    p = i;
                    q = j;
                    break;
                }
        if (p < 0 || !x) return x;
        int perm[TFE_MAX_RANK], r = 0;
        Term nt = {.n = 0};
        int64_t sh[TFE_MAX_RANK];
        for (int i = 0; i < t->n; i++)
            if (i != p && i != q) {
                perm[r] = i;
                sh[r++] = x->shape[i];
                nt.ix[nt.n++] = t->ix[i];
            }
        perm[r] = p;
        perm[r + 1] = q;
        int64_t n = x->shape[p];
        sh[r] = n * n;
        x = reshape(s, transpose(s, x, perm), r + 1, sh);
        if (!x) return NULL;
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.naxes = 0;
        for (int i = 0; i < r; i++) {
            at.ints[3 * i] = 0;
            at.ints[3 * i + 1] = sh[i];
            at.ints[3 * i + 2] = 1;
        }
        at.ints[3 * r] = 0;
        at.ints[3 * r + 1] = n * n;
        at.ints[3 * r + 2] = n + 1;
        at.nints = 3 * (r + 1);
        x = scope_call(s, OP_SLICE, 1, &x, &at);
        nt.ix[nt.n++] = t->ix[p];
        nt.ix[nt.n] = 0;
        *t = nt;
    }
}

static int ein_index(const Term *t, char c) {
    for (int i = 0; i < t->n; i++)
        if (t->ix[i] == c) return i;
    return -1;
}

/* Contract x (term tx) with y (term ty), keeping the letters in `keep` (a
 * set: keep[c]): batch letters (in both, kept), x's and y's own (kept) and
 * the contracted ones (in both, not kept) become one matmul of (B, M, K)
 * by (B, K, N), or a broadcast product when nothing is contracted. */
static tfe_tensor *ein_pair(LScope *s, tfe_tensor *x, Term *tx, tfe_tensor *y, const Term *ty, const bool *keep,
                            const int64_t *letter_size, Term *tr) {
    Term bt = {.n = 0}, lt = {.n = 0}, rt = {.n = 0}, ct = {.n = 0};
    for (int i = 0; i < tx->n; i++) {
        char c = tx->ix[i];
        bool in_y = ein_index(ty, c) >= 0;
        if (in_y && keep[(int)c]) bt.ix[bt.n++] = c;
        else if (in_y) ct.ix[ct.n++] = c;
        else lt.ix[lt.n++] = c;
    }
    for (int i = 0; i < ty->n; i++)
        if (ein_index(tx, ty->ix[i]) < 0) rt.ix[rt.n++] = ty->ix[i];
    int px[TFE_MAX_RANK], py[TFE_MAX_RANK], k = 0;
    int64_t nb = 1, m = 1, n = 1, kk = 1;
    for (int i = 0; i < bt.n; i++) nb *= letter_size[(int)bt.ix[i]];
    for (int i = 0; i < lt.n; i++) m *= letter_size[(int)lt.ix[i]];
    for (int i = 0; i < rt.n; i++) n *= letter_size[(int)rt.ix[i]];
    for (int i = 0; i < ct.n; i++) kk *= letter_size[(int)ct.ix[i]];
    for (int i = 0; i < bt.n; i++) px[k++] = ein_index(tx, bt.ix[i]);
    for (int i = 0; i < lt.n; i++) px[k++] = ein_index(tx, lt.ix[i]);
    for (int i = 0; i < ct.n; i++) px[k++] = ein_index(tx, ct.ix[i]);
    k = 0;
    for (int i = 0; i < bt.n; i++) py[k++] = ein_index(ty, bt.ix[i]);
    for (int i = 0; i < ct.n; i++) py[k++] = ein_index(ty, ct.ix[i]);
    for (int i = 0; i < rt.n; i++) py[k++] = ein_index(ty, rt.ix[i]);
    tfe_tensor *r;
    if (ct.n == 0) {
        tfe_tensor *x3 = reshape(s, transpose(s, x, px), 3, (int64_t[]){nb, m, 1});
        tfe_tensor *y3 = reshape(s, transpose(s, y, py), 3, (int64_t[]){nb, 1, n});
        r = scope_op2(s, OP_MUL, x3, y3);
    } else {
        tfe_tensor *x3 = reshape(s, transpose(s, x, px), 3, (int64_t[]){nb, m, kk});
        tfe_tensor *y3 = reshape(s, transpose(s, y, py), 3, (int64_t[]){nb, kk, n});
        r = scope_op2(s, OP_MATMUL, x3, y3);
    }
    tr->n = 0;
    int64_t sh[TFE_MAX_RANK];
    for (int i = 0; i < bt.n; i++) sh[tr->n] = letter_size[(int)bt.ix[i]], tr->ix[tr->n++] = bt.ix[i];
    for (int i = 0; i < lt.n; i++) sh[tr->n] = letter_size[(int)lt.ix[i]], tr->ix[tr->n++] = lt.ix[i];
    for (int i = 0; i < rt.n; i++) sh[tr->n] = letter_size[(int)rt.ix[i]], tr->ix[tr->n++] = rt.ix[i];
    tr->ix[tr->n] = 0;
    return reshape(s, r, tr->n, sh);
}

/* einsum(spec, x, y, ...): see docs/builtins.md for the subset */
BUILTIN(bi_einsum)
{
    (void)data;
    (void)kwvals;
    if (nkw) return interp_raise(I, "einsum() got an unexpected keyword argument '%s'", kwnames[0]->s);
    if (argc < 2) return interp_raise(I, "einsum: expected a subscripts string and at least one operand");
    const char *spec;
    if (arg_string(I, "einsum", "subscripts", argv[0], &spec)) return -1;
    int nop = argc - 1;
    if (nop > EMAX) return interp_raise(I, "einsum: at most %d operands are supported, got %d", EMAX, nop);
    /* parse "ij,jk->ik" (spaces ignored) */
    Term in[EMAX], outt = {.n = 0};
    int nin = 0;
    bool has_out = false;
    Term *cur = &in[0];
    in[0].n = 0;
    for (const char *c = spec; *c; c++) {
        if (*c == ' ') continue;
        if (*c == '.') return interp_raise(I, "einsum: '...' (an ellipsis) is not supported; name every axis, e.g. \"bij,bjk->bik\"");
        if (*c == ',' && !has_out) {
            if (++nin >= EMAX) return interp_raise(I, "einsum: more subscripts than operands in \"%s\"", spec);
            cur = &in[nin];
            cur->n = 0;
            continue;
        }
        if (c[0] == '-' && c[1] == '>' && !has_out) {
            has_out = true;
            cur = &outt;
            c++;
            continue;
        }
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z')))
            return interp_raise(I, "einsum: unexpected '%c' in subscripts \"%s\" (letters, ',' and one '->')", *c, spec);
        if (cur->n == TFE_MAX_RANK)
            return interp_raise(I, "einsum: a term of \"%s\" has more than %d subscripts", spec, TFE_MAX_RANK);
        cur->ix[cur->n++] = *c;
    }
    nin++;
    for (int i = 0; i < nin; i++) in[i].ix[in[i].n] = 0;
    outt.ix[outt.n] = 0;
    if (nin != nop)
        return interp_raise(I, "einsum: \"%s\" has %d input term%s but %d operand%s %s given", spec, nin,
                            nin == 1 ? "" : "s", nop, nop == 1 ? "" : "s", nop == 1 ? "was" : "were");
    int count[128] = {0};
    for (int i = 0; i < nin; i++)
        for (int j = 0; j < in[i].n; j++) count[(int)in[i].ix[j]]++;
    if (!has_out) /* implicit output: the letters used once, in alphabetical (ASCII) order */
        for (int c = 'A'; c <= 'z'; c++)
            if (count[c] == 1) outt.ix[outt.n++] = (char)c;
    outt.ix[outt.n] = 0;
    bool in_out[128] = {0};
    for (int i = 0; i < outt.n; i++) {
        int c = outt.ix[i];
        if (in_out[c]) return interp_raise(I, "einsum: output subscript '%c' appears twice in \"%s\"", c, spec);
        if (!count[c]) return interp_raise(I, "einsum: output subscript '%c' does not appear in the inputs of \"%s\"", c, spec);
        in_out[c] = true;
    }
    LScope S = {.n = 0}, *s = &S;
    tfe_tensor *xs[EMAX];
    int owner[128];
    int64_t letter_size[128] = {0};
    for (int c = 0; c < 128; c++) owner[c] = -1;
    for (int i = 0; i < nop; i++) {
        char name[32];
        snprintf(name, sizeof name, "operand %d", i);
        if (!(xs[i] = arg(I, s, "einsum", name, argv[i + 1]))) {
            ls_release(s);
            return -1;
        }
        if (xs[i]->rank != in[i].n) {
            ls_release(s);
            return interp_raise(I, "einsum: operand %d has rank %d but its subscripts \"%s\" name %d ax%s", i,
                                xs[i]->rank, in[i].ix, in[i].n, in[i].n == 1 ? "is" : "es");
        }
        for (int j = 0; j < in[i].n; j++) {
            int c = in[i].ix[j];
            int64_t d = xs[i]->shape[j];
            if (owner[c] >= 0 && letter_size[c] != d) {
                ls_release(s);
                return interp_raise(I, "einsum: subscript '%c' has size %lld in operand %d but %lld in operand %d",
                                    c, (long long)letter_size[c], owner[c], (long long)d, i);
            }
            owner[c] = i;
            letter_size[c] = d;
        }
    }
    /* each operand: diagonals of repeated letters, then sums of the letters
     * no other operand and not the output uses */
    for (int i = 0; i < nop; i++) {
        xs[i] = ein_diagonals(s, xs[i], &in[i]);
        unsigned mask = 0;
        Term nt = {.n = 0};
        for (int j = 0; j < in[i].n; j++) {
            int c = in[i].ix[j], others = 0;
            for (int o = 0; o < nop; o++)
                if (o != i && ein_index(&in[o], (char)c) >= 0) others++;
            if (!others && !in_out[c]) mask |= 1u << j;
            else nt.ix[nt.n++] = (char)c;
        }
        nt.ix[nt.n] = 0;
        xs[i] = scope_reduce(s, OP_SUM, xs[i], mask, false);
        in[i] = nt;
    }
    /* left to right: each contraction keeps the letters of the output and
     * of the operands still to come */
    tfe_tensor *r = xs[0];
    Term tr = in[0];
    for (int i = 1; i < nop && r; i++) {
        bool keep_set[128] = {0};
        for (int c = 0; c < 128; c++) keep_set[c] = in_out[c];
        for (int o = i + 1; o < nop; o++)
            for (int j = 0; j < in[o].n; j++) keep_set[(int)in[o].ix[j]] = true;
        Term nt;
        r = ein_pair(s, r, &tr, xs[i], &in[i], keep_set, letter_size, &nt);
        tr = nt;
    }
    if (r) {
        int perm[TFE_MAX_RANK];
        for (int i = 0; i < outt.n; i++) perm[i] = ein_index(&tr, outt.ix[i]);
        r = transpose(s, r, perm);
    }
    return ls_finish(I, s, r, out);
}

/* ---- registration --------------------------------------------------------------------- */

void builtins_linalg_register(Interp *I)
{
    interp_define_builtin(I, "outer", bi_outer, NULL);
    interp_define_builtin(I, "diag", bi_diag, NULL);
    interp_define_builtin(I, "trace", bi_trace, NULL);
    interp_define_builtin(I, "tril", bi_tri, (void *)(intptr_t)OP_TRIL);
    interp_define_builtin(I, "triu", bi_tri, (void *)(intptr_t)OP_TRIU);
    interp_define_builtin(I, "einsum", bi_einsum, NULL);
    interp_define_builtin(I, "norm", bi_norm, NULL);
    interp_define_builtin(I, "inv", bi_lapack1, (void *)(intptr_t)OP_INV);
    interp_define_builtin(I, "det", bi_lapack1, (void *)(intptr_t)OP_DET);
    interp_define_builtin(I, "cholesky", bi_lapack1, (void *)(intptr_t)OP_CHOLESKY);
    interp_define_builtin(I, "solve", bi_solve, NULL);
}
