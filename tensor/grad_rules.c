/* grad_rules.c — the gradient rule of every op (column 8 of ops.def/ops_nn.def),
 * the table tfe_grads and tfe_unbroadcast. Rules are made of ops only (never
 * kernels or tensor data), so they are differentiable and can be staged. */

#include <stdio.h>
#include <string.h>

#include "tensor/grad.h"
#include "tensor/op_scope.h"
#include "tensor/base.h" /* kn_axis, kn_axes_mask */
#include "dist/comm.h"      /* the rank, for the collectives' rules */

/* On entry dx[i] is NULL (compute input i's gradient) or TFE_GRAD_SKIP
 * (tensor/grad.h: the caller does not need it, e.g. the tape for an input no
 * source reaches, such as the data x of x @ w, whose gradient would cost as
 * much as the forward matmul). Rules skip such inputs and store NULL. */

const tfe_grad_fn tfe_grads[TFE_NOPS] = {
#define OP(id, name, nin, nout, flags, infer, kernel, grad) [OP_##id] = grad,
#include "tensor/ops.def"
#undef OP
};

/* ---- a scope of temporaries (tensor/op_scope.h) ----------------------------------
 * Every op result a rule makes is kept in its scope and released at the end;
 * the results stored in dx[] get their own reference. U and B are the
 * rules' short names for an op of one and of two inputs. */
typedef tfe_scope scope;
#define U scope_op1
#define B scope_op2

/* a op constant v, in a's dtype */
static tfe_tensor *Bc(scope *s, tfe_op op, tfe_tensor *a, double v) { return B(s, op, a, scope_const(s, v, a)); }

static tfe_tensor *cast(scope *s, tfe_tensor *x, tfe_dtype dt) {
    if (!x) return NULL;
    if (x->dtype == dt) return x;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.dtype = dt;
    return scope_call(s, OP_CAST, 1, &x, &at);
}

static tfe_tensor *reshape(scope *s, tfe_tensor *x, int rank, const int64_t *shape) {
    if (!x) return NULL;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = rank;
    for (int i = 0; i < rank; i++) at.ints[i] = shape[i];
    return scope_call(s, OP_RESHAPE, 1, &x, &at);
}

static tfe_tensor *broadcast_to(scope *s, tfe_tensor *x, int rank, const int64_t *shape) {
    if (!x) return NULL;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = rank;
    for (int i = 0; i < rank; i++) at.ints[i] = shape[i];
    return scope_call(s, OP_BROADCAST_TO, 1, &x, &at);
}

static tfe_tensor *expand_dims(scope *s, tfe_tensor *x, int axis) {
    if (!x) return NULL;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.naxes = 1;
    at.axes[0] = axis;
    return scope_call(s, OP_EXPAND_DIMS, 1, &x, &at);
}

/* --- sizes that depend on the data ------------------------------------------------
 * While a tape inside a staged function records, the rows x[mask] selects
 * (and the sizes of what is computed from them) are known only when the
 * graph runs: tfe_dyn_dims(t) names such dims of t. A rule that needs them
 * reads them from the value at run time (a bool of x's shape, ones of it, a
 * reshape's -1); where it cannot, baked(t) makes the trace read the data as
 * a value, so its inputs join the signature by value (a trace per value, as
 * for int(x)): never a size of another call. */
static void baked(const tfe_tensor *t) {
    if (tfe_dyn_dims(t) && tfe_value_read_hook) tfe_value_read_hook(t);
}

/* a bool of x's shape, every element true */
static tfe_tensor *all_true(scope *s, tfe_tensor *x) {
    tfe_tensor *b = U(s, OP_ISNAN, x);
    return B(s, OP_EQ, b, b);
}

/* the number of elements of x in each group of the reduced axes (mask),
 * counted at run time, in dtype dt (keepdims shape) */
static tfe_tensor *group_count(scope *s, tfe_tensor *x, unsigned mask, tfe_dtype dt) {
    return cast(s, scope_reduce(s, OP_SUM, all_true(s, x), mask, true), dt); /* int64: exact */
}

/* g broadcast to x's shape: a view, or, where x's sizes come from the data,
 * g times ones of x's shape (the same bits: g * 1 is g; and its gradient is
 * the same sum) */
static tfe_tensor *broadcast_like(scope *s, tfe_tensor *g, tfe_tensor *x) {
    if (!g) return NULL;
    if (tfe_dyn_dims(x) && g->dtype < TFE_FLOAT16) {
        tfe_tensor *one = cast(s, scope_keep(s, tfe_filled_like(x, 1.0)), g->dtype);
        return one ? B(s, OP_MUL, g, one) : NULL;
    }
    baked(x);
    return broadcast_to(s, g, x->rank, x->shape);
}

/* zeros of x's shape in dtype dt */
static tfe_tensor *zeros_as(scope *s, tfe_dtype dt, tfe_tensor *x) {
    if (tfe_dyn_dims(x)) return cast(s, scope_keep(s, tfe_filled_like(x, 0.0)), dt);
    return scope_full(s, 0, dt, x->rank, x->shape);
}

/* the last two axes swapped (matmul) */
static tfe_tensor *mT(scope *s, tfe_tensor *x) {
    if (!x) return NULL;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = x->rank;
    for (int i = 0; i < x->rank; i++) at.ints[i] = i;
    at.ints[x->rank - 2] = x->rank - 1;
    at.ints[x->rank - 1] = x->rank - 2;
    return scope_call(s, OP_TRANSPOSE, 1, &x, &at);
}

/* Only float tensors take a gradient. */
static bool is_float(const tfe_tensor *x) { return dtype_is_float(x->dtype); }

/* Is input t's gradient wanted? t is float and its caller did not mark it
 * TFE_GRAD_SKIP (grad.h; inputs past the 64th are always computed). A
 * tensor passed twice (x * x) is found at its first position; the caller's
 * mark is per tensor, so both positions agree. */
static bool want_(const tfe_opcall *c, uint64_t skip, const tfe_tensor *t) {
    if (!is_float(t)) return false;
    for (int i = 0; i < c->nin && i < 64; i++)
        if (c->in[i] == t) return !((skip >> i) & 1);
    return true;
}

static tfe_tensor *unbroadcast(tfe_tensor *g, int rank, const int64_t *shape, const tfe_tensor *x);

/* Stores the gradient g of input x in *dx: broadcasting undone, cast to x's
 * dtype. x not float: *dx stays NULL. g NULL: an op failed (error set). */
static void set_dx(scope *s, tfe_tensor **dx, tfe_tensor *g, const tfe_tensor *x) {
    *dx = NULL;
    if (!is_float(x)) return;
    if (!g) {
        s->failed = true;
        return;
    }
    tfe_tensor *u = scope_keep(s, unbroadcast(g, x->rank, x->shape, x));
    u = cast(s, u, x->dtype);
    if (u) {
        tensor_incref(u);
        *dx = u;
    }
}

/* The end of every rule: releases the temporaries; on failure also the
 * gradients already stored (the caller sees NULLs and -1). */
static int finish(scope *s, const tfe_opcall *c, tfe_tensor **dx) {
    scope_release(s);
    if (!s->failed) return 0;
    for (int i = 0; i < c->nin; i++)
        if (dx[i]) {
            tensor_decref(dx[i]);
            dx[i] = NULL;
        }
    return -1;
}

#define RULE(name) \
    int name(const tfe_opcall *c, tfe_tensor *const *y, tfe_tensor *const *dy, tfe_tensor **dx)
/* BEGIN reads the caller's marks (dx[i] == TFE_GRAD_SKIP: not wanted) and
 * clears dx[]; wants(t) then tells whether input t needs its gradient. */
#define BEGIN                                                           \
    scope S_, *s = &S_;                                                 \
    S_.n = 0, S_.failed = false;                                        \
    uint64_t skip_ = 0;                                                 \
    for (int i_ = 0; i_ < c->nin; i_++) {                               \
        if (i_ < 64 && dx[i_] == TFE_GRAD_SKIP) skip_ |= (uint64_t)1 << i_; \
        dx[i_] = NULL;                                                  \
    }                                                                   \
    tfe_tensor *x = c->nin > 0 ? c->in[0] : NULL, *G = dy[0], *Y = y[0];   \
    (void)x; (void)G; (void)Y
#define END return finish(s, c, dx)
#define wants(t) want_(c, skip_, (t))

/* ---- tfe_unbroadcast -------------------------------------------------------------- */

tfe_tensor *tfe_unbroadcast(tfe_tensor *g, int rank, const int64_t *shape) {
    return unbroadcast(g, rank, shape, NULL);
}

/* g summed over at's axes (keepdims), but where its axes in one (sizes
 * from the data) have size 1 in this call, summed over the others only:
 * eager code sums no axis of size 1, and a sum of one -0.0 is 0.0 (the
 * product over a size-1 axis is its element; of none, 1, not an error) */
static tfe_tensor *sum_unless_one(tfe_tensor *g, const tfe_attrs *at, unsigned one) {
    scope S_, *s = &S_;
    S_.n = 0, S_.failed = false;
    unsigned rest = 0, all = g->rank >= 32 ? ~0u : (1u << g->rank) - 1;
    for (int i = 0; i < at->naxes; i++)
        if (!(one & (1u << at->axes[i]))) rest |= 1u << at->axes[i];
    tfe_tensor *A = scope_call(s, OP_SUM, 1, &g, at);
    tfe_tensor *Bv = scope_reduce(s, OP_SUM, scope_reduce(s, OP_PROD, g, one, true), rest, true);
    tfe_tensor *line = scope_reduce(s, OP_ANY, all_true(s, g), all & ~one, false);
    tfe_tensor *n = line ? scope_reduce(s, OP_SUM, line, line->rank >= 32 ? ~0u : (1u << line->rank) - 1, false) : NULL;
    tfe_tensor *r = scope_where(s, B(s, OP_EQ, n, scope_full(s, 1, TFE_INT64, 0, NULL)), Bv, A);
    if (r) tensor_incref(r);
    scope_release(s);
    return r;
}

/* x (NULL: none) is the tensor of that shape: where its sizes, or g's,
 * come from the data (tfe_dyn_dims), the traced sizes do not decide alone.
 * A dim of g from the data against a 1 of x's own is summed (x was
 * broadcast there at every call); x's data-sized dim of 1 against another
 * size may be broadcast in this call only, so the trace reads the data
 * (baked). And the axes summed are kept and the leading ones squeezed,
 * rather than a reshape to shape (the same sum: keepdims changes only the
 * shape). */
static tfe_tensor *unbroadcast(tfe_tensor *g, int rank, const int64_t *shape, const tfe_tensor *x) {
    char b1[200], b2[200];
    int lead = g->rank - rank;
    uint32_t xd = tfe_dyn_dims(x), gd = tfe_dyn_dims(g);
    unsigned one = 0; /* the axes summed by that first rule */
    bool dyn = xd != 0;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.naxes = 0;
    bool ok = lead >= 0;
    for (int i = 0; ok && i < g->rank; i++) {
        if (i < lead) at.axes[at.naxes++] = i;
        else if (((gd >> i) & 1) && !((xd >> (i - lead)) & 1) && shape[i - lead] == 1) {
            one |= 1u << i;
            at.axes[at.naxes++] = i;
        }
        else if (g->shape[i] != shape[i - lead]) {
            if (((xd >> (i - lead)) & 1) && tfe_value_read_hook) tfe_value_read_hook(x);
            if (shape[i - lead] == 1) at.axes[at.naxes++] = i;
            else ok = false;
        }
    }
    if (!ok) {
        tfe_error_set("gradient: cannot reduce a gradient of shape %s to shape %s",
                      shape_str(g->rank, g->shape, b1), shape_str(rank, shape, b2));
        return NULL;
    }
    if (at.naxes == 0) {
        tensor_incref(g);
        return g;
    }
    /* a float16/bfloat16 gradient is summed in float32 (no half kernels but
     * cast and matmul; and the half matmul's rule too accumulates in float32):
     * the result stays float32, set_dx casts it back to the input's dtype */
    tfe_tensor *gs = g;
    if (g->dtype >= TFE_FLOAT16) {
        tfe_attrs ct;
        tfe_attrs_init(&ct);
        ct.dtype = TFE_FLOAT32;
        if (!(gs = tfe_call1(OP_CAST, 1, &g, &ct))) return NULL;
    } else {
        tensor_incref(gs);
    }
    at.keepdims = one || (dyn && at.axes[at.naxes - 1] >= lead);
    tfe_tensor *r = one ? sum_unless_one(gs, &at, one) : tfe_call1(OP_SUM, 1, &gs, &at);
    tensor_decref(gs);
    if (!r || r->rank == rank) return r; /* only leading axes were summed */
    if (at.keepdims) {
        tfe_attrs qt;
        tfe_attrs_init(&qt);
        qt.naxes = lead;
        for (int i = 0; i < lead; i++) qt.axes[i] = i;
        tfe_tensor *o = tfe_call1(OP_SQUEEZE, 1, &r, &qt);
        tensor_decref(r);
        return o;
    }
    tfe_attrs rt;
    tfe_attrs_init(&rt);
    rt.nints = rank;
    for (int i = 0; i < rank; i++) rt.ints[i] = shape[i];
    tfe_tensor *o = tfe_call1(OP_RESHAPE, 1, &r, &rt);
    tensor_decref(r);
    return o;
}

/* ---- no gradient --------------------------------------------------------------- */

RULE(grad_none) {
    (void)y;
    (void)dy;
    for (int i = 0; i < c->nin; i++) dx[i] = NULL;
    return 0;
}

/* ---- unary elementwise --------------------------------------------------------- */

RULE(grad_neg) { BEGIN; if (wants(x)) set_dx(s, &dx[0], U(s, OP_NEG, G), x); END; }
RULE(grad_copy) { BEGIN; if (wants(x)) set_dx(s, &dx[0], G, x); END; }

/* d|x| = sign(x): 0 at x = 0 (the subgradient TensorFlow, JAX, PyTorch use) */
RULE(grad_abs) {
    BEGIN;
    if (wants(x)) set_dx(s, &dx[0], B(s, OP_MUL, G, U(s, OP_SIGN, x)), x);
    END;
}

/* sign is piecewise constant: a zero gradient (also at 0) */
RULE(grad_sign) {
    BEGIN;
    if (wants(x)) set_dx(s, &dx[0], zeros_as(s, G->dtype, x), x);
    END;
}

RULE(grad_exp) { BEGIN; if (wants(x)) set_dx(s, &dx[0], B(s, OP_MUL, G, Y), x); END; }
RULE(grad_log) { BEGIN; if (wants(x)) set_dx(s, &dx[0], B(s, OP_DIV, G, x), x); END; }
RULE(grad_log1p) {
    BEGIN;
    if (wants(x)) set_dx(s, &dx[0], B(s, OP_DIV, G, Bc(s, OP_ADD, x, 1)), x);
    END;
}

/* d sqrt(x) = 0.5 / sqrt(x) (inf at 0, as everywhere) */
RULE(grad_sqrt) {
    BEGIN;
    if (wants(x)) set_dx(s, &dx[0], B(s, OP_DIV, Bc(s, OP_MUL, G, 0.5), Y), x);
    END;
}

/* d x^(-1/2) = -0.5 y^3 */
RULE(grad_rsqrt) {
    BEGIN;
    if (wants(x)) {
        tfe_tensor *y3 = B(s, OP_MUL, B(s, OP_MUL, Y, Y), Y);
        set_dx(s, &dx[0], B(s, OP_MUL, Bc(s, OP_MUL, G, -0.5), y3), x);
    }
    END;
}

RULE(grad_sin) { BEGIN; if (wants(x)) set_dx(s, &dx[0], B(s, OP_MUL, G, U(s, OP_COS, x)), x); END; }
RULE(grad_cos) {
    BEGIN;
    if (wants(x)) set_dx(s, &dx[0], U(s, OP_NEG, B(s, OP_MUL, G, U(s, OP_SIN, x))), x);
    END;
}

/* 1 - y^2 */
RULE(grad_tanh) {
    BEGIN;
    if (wants(x)) {
        tfe_tensor *d = B(s, OP_SUB, scope_const(s, 1, Y), B(s, OP_MUL, Y, Y));
        set_dx(s, &dx[0], B(s, OP_MUL, G, d), x);
    }
    END;
}

/* y (1 - y) */
RULE(grad_sigmoid) {
    BEGIN;
    if (wants(x)) {
        tfe_tensor *d = B(s, OP_MUL, Y, B(s, OP_SUB, scope_const(s, 1, Y), Y));
        set_dx(s, &dx[0], B(s, OP_MUL, G, d), x);
    }
    END;
}

/* 1 where x > 0; 0 at x = 0 (as TensorFlow, JAX and PyTorch): one op,
 * relu_grad(G, x), the value of where(x > 0, G, 0) */
RULE(grad_relu) {
    BEGIN;
    if (wants(x)) set_dx(s, &dx[0], B(s, OP_RELU_GRAD, G, x), x);
    END;
}

/* relu_grad(d, x) is linear in d; x only selects (no gradient, as where's
 * condition) */
RULE(grad_relu_grad) {
    BEGIN;
    if (wants(x)) set_dx(s, &dx[0], B(s, OP_RELU_GRAD, G, c->in[1]), x);
    END;
}

/* gelu(x) = x Phi(x); d = Phi(x) + x phi(x). Phi is gelu(x) / x (written
 * before the erf op; kept, so gradients are as they were), and at x = 0 it is 1/2 + x phi(x): the value 1/2 with the
 * right derivative phi(0), so that higher orders are right at 0 too. The
 * division is guarded (x replaced by 1 where x = 0) so that a higher-order
 * gradient never meets 0/0. */
RULE(grad_gelu) {
    BEGIN;
    if (wants(x)) {
        /* phi(x) = exp(-x^2/2) / sqrt(2 pi) */
        tfe_tensor *phi = Bc(s, OP_MUL, U(s, OP_EXP, Bc(s, OP_MUL, B(s, OP_MUL, x, x), -0.5)),
                             0.39894228040143267794);
        tfe_tensor *xphi = B(s, OP_MUL, x, phi);
        tfe_tensor *is0 = B(s, OP_EQ, x, scope_const(s, 0, x));
        tfe_tensor *xs = scope_where(s, is0, scope_const(s, 1, x), x);
        tfe_tensor *Phi = scope_where(s, is0, Bc(s, OP_ADD, xphi, 0.5), B(s, OP_DIV, Y, xs));
        tfe_tensor *d = B(s, OP_ADD, Phi, xphi);
        set_dx(s, &dx[0], B(s, OP_MUL, G, d), x);
    }
    END;
}

RULE(grad_softplus) {
    BEGIN;
    if (wants(x)) set_dx(s, &dx[0], B(s, OP_MUL, G, U(s, OP_SIGMOID, x)), x);
    END;
}

/* float -> float: the gradient cast back (set_dx casts); to or from an int/bool
 * dtype: no gradient */
RULE(grad_cast) {
    BEGIN;
    if (wants(x) && dtype_is_float(c->at->dtype)) set_dx(s, &dx[0], G, x);
    END;
}

/* ---- binary elementwise (broadcasting undone by set_dx) --------------------------- */

RULE(grad_add) {
    BEGIN;
    if (wants(c->in[0])) set_dx(s, &dx[0], G, c->in[0]);
    if (wants(c->in[1])) set_dx(s, &dx[1], G, c->in[1]);
    END;
}

RULE(grad_sub) {
    BEGIN;
    if (wants(c->in[0])) set_dx(s, &dx[0], G, c->in[0]);
    if (wants(c->in[1])) set_dx(s, &dx[1], U(s, OP_NEG, G), c->in[1]);
    END;
}

RULE(grad_mul) {
    BEGIN;
    tfe_tensor *a = c->in[0], *b = c->in[1];
    if (wants(a)) set_dx(s, &dx[0], B(s, OP_MUL, G, b), a);
    if (wants(b)) set_dx(s, &dx[1], B(s, OP_MUL, G, a), b);
    END;
}

/* da = G / b, db = -G a / b^2 = -G y / b */
RULE(grad_div) {
    BEGIN;
    tfe_tensor *a = c->in[0], *b = c->in[1];
    if (wants(a)) set_dx(s, &dx[0], B(s, OP_DIV, G, b), a);
    if (wants(b)) set_dx(s, &dx[1], U(s, OP_NEG, B(s, OP_DIV, B(s, OP_MUL, G, Y), b)), b);
    END;
}

/* mod(a, b) = a - b floor(a / b): da = 1, db = -floor(a / b) (the jumps of
 * floor are ignored, as everywhere) */
RULE(grad_mod) {
    BEGIN;
    tfe_tensor *a = c->in[0], *b = c->in[1];
    if (wants(a)) set_dx(s, &dx[0], G, a);
    if (wants(b)) {
        tfe_tensor *q = U(s, OP_FLOOR, B(s, OP_DIV, a, b));
        set_dx(s, &dx[1], U(s, OP_NEG, B(s, OP_MUL, G, q)), b);
    }
    END;
}

/* y = a^b. da = b a^(b-1), computed as b * a^(b'-1) with b' = 1 where b = 0, so
 * that b = 0 gives 0 even at a = 0 (no 0 * inf). db = y log(a) where a > 0 and
 * 0 where a <= 0 (JAX's convention; log is taken of a guarded a, so no NaN
 * reaches a higher-order gradient). */
RULE(grad_pow) {
    BEGIN;
    tfe_tensor *a0 = c->in[0], *b0 = c->in[1];
    /* Both operands in y's dtype first (NumPy's and PyTorch's promotion):
     * with a float32 operand and a float64 one, log(a) of a float32 a would
     * be float32 (2^p ln 2 off in its 8th digit), and b - 1 of a float32 b
     * would round in float32; set_dx casts each gradient back to its own
     * operand's dtype. A float y only: ints have no gradient. */
    bool fy = is_float(Y);
    tfe_tensor *a = fy ? cast(s, a0, Y->dtype) : a0, *b = fy ? cast(s, b0, Y->dtype) : b0;
    if (!a || !b) {
        s->failed = true;
        END;
    }
    if (wants(a0)) {
        tfe_tensor *bs = scope_where(s, B(s, OP_EQ, b, scope_const(s, 0, b)), scope_const(s, 1, b), b);
        tfe_tensor *p = B(s, OP_POW, a, Bc(s, OP_SUB, bs, 1));
        set_dx(s, &dx[0], B(s, OP_MUL, G, B(s, OP_MUL, b, p)), a0);
    }
    if (wants(b0)) {
        tfe_tensor *pos = B(s, OP_GT, a, scope_const(s, 0, a));
        tfe_tensor *as = scope_where(s, pos, a, scope_const(s, 1, a));
        tfe_tensor *d = B(s, OP_MUL, B(s, OP_MUL, G, Y), U(s, OP_LOG, as));
        set_dx(s, &dx[1], scope_where(s, pos, d, scope_const(s, 0, d)), b0);
    }
    END;
}

/* maximum/minimum: the gradient goes to the larger (smaller) operand; at a tie
 * it is split evenly, half to each (as JAX and PyTorch; TensorFlow gives all
 * to a). NaN propagates from either operand, and the gradient goes to the
 * operand the NaN came from (to a when both are NaN). */
static int minmax_rule(const tfe_opcall *c, tfe_tensor *const *y, tfe_tensor *const *dy,
                       tfe_tensor **dx, tfe_op cmp) {
    BEGIN;
    tfe_tensor *a = c->in[0], *b = c->in[1];
    if (wants(a) || wants(b)) {
        tfe_tensor *to_a = B(s, OP_LOGICAL_OR, B(s, cmp, a, b), U(s, OP_ISNAN, a));
        tfe_tensor *wa = scope_where(s, to_a, scope_const(s, 1, G),
                               scope_where(s, B(s, OP_EQ, a, b), scope_const(s, 0.5, G), scope_const(s, 0, G)));
        if (wants(a)) set_dx(s, &dx[0], B(s, OP_MUL, G, wa), a);
        if (wants(b)) set_dx(s, &dx[1], B(s, OP_MUL, G, B(s, OP_SUB, scope_const(s, 1, G), wa)), b);
    }
    END;
}
RULE(grad_maximum) { return minmax_rule(c, y, dy, dx, OP_GT); }
RULE(grad_minimum) { return minmax_rule(c, y, dy, dx, OP_LT); }

/* ---- ternary ------------------------------------------------------------------- */

/* where(cond, a, b): cond gets none; a gets G where cond, b the rest */
RULE(grad_where) {
    BEGIN;
    tfe_tensor *cond = c->in[0], *a = c->in[1], *b = c->in[2];
    if (wants(a)) set_dx(s, &dx[1], scope_where(s, cond, G, scope_const(s, 0, G)), a);
    if (wants(b)) set_dx(s, &dx[2], scope_where(s, cond, scope_const(s, 0, G), G), b);
    END;
}

/* clip(x, lo, hi) = min(max(x, lo), hi). The gradient goes to x where
 * lo <= x <= hi (bounds included), to lo where x < lo <= hi, to hi where
 * x > hi or lo > hi (then the result is hi everywhere): the three masks
 * partition every element except a NaN x (result NaN), which sends none. */
RULE(grad_clip) {
    BEGIN;
    tfe_tensor *lo = c->in[1], *hi = c->in[2];
    tfe_tensor *z = scope_const(s, 0, G);
    if (wants(x)) {
        tfe_tensor *m = B(s, OP_LOGICAL_AND, B(s, OP_LE, lo, x), B(s, OP_LE, x, hi));
        set_dx(s, &dx[0], scope_where(s, m, G, z), x);
    }
    if (wants(lo)) {
        tfe_tensor *m = B(s, OP_LOGICAL_AND, B(s, OP_LT, x, lo), B(s, OP_LE, lo, hi));
        set_dx(s, &dx[1], scope_where(s, m, G, z), lo);
    }
    if (wants(hi)) {
        tfe_tensor *m = B(s, OP_LOGICAL_OR, B(s, OP_GT, x, hi), B(s, OP_GT, lo, hi));
        set_dx(s, &dx[2], scope_where(s, m, G, z), hi);
    }
    END;
}

/* ---- reductions ----------------------------------------------------------------- */

/* The reduced axes of c as a mask, the keepdims shape of x (reduced axes 1)
 * and the element count of one reduced group. */
typedef struct red_geom {
    unsigned mask;
    int64_t kshape[TFE_MAX_RANK];
    int64_t count;
} red_geom;

static int red_geom_of(const tfe_opcall *c, red_geom *r) {
    const tfe_tensor *x = c->in[0];
    if (kn_axes_mask(tfe_ops[c->op].name, c->at, x->rank, &r->mask)) return -1;
    r->count = 1;
    for (int i = 0; i < x->rank; i++) {
        bool red = r->mask & (1u << i);
        r->kshape[i] = red ? 1 : x->shape[i];
        if (red) r->count *= x->shape[i];
    }
    return 0;
}

/* t (a result of the reduction, or a gradient of one) with the reduced
 * axes kept as size 1, so that it broadcasts against x */
static tfe_tensor *keepdims(scope *s, const tfe_opcall *c, const red_geom *r, tfe_tensor *t) {
    if (!t || c->at->keepdims) return t;
    const tfe_tensor *x = c->in[0];
    if (tfe_dyn_dims(x) & ~r->mask) { /* sizes of the data: the kept axes as they come */
        for (int i = 0; i < x->rank && t; i++)
            if (r->mask & (1u << i)) t = expand_dims(s, t, i);
        return t;
    }
    return reshape(s, t, x->rank, r->kshape);
}

#define RED_BEGIN                                           \
    BEGIN;                                                  \
    red_geom rg;                                            \
    if (!wants(x)) END;                                     \
    if (red_geom_of(c, &rg)) return -1;                     \
    tfe_tensor *Gk = keepdims(s, c, &rg, G);                \
    (void)Gk

RULE(grad_sum) {
    RED_BEGIN;
    set_dx(s, &dx[0], broadcast_like(s, Gk, x), x);
    END;
}

RULE(grad_mean) {
    RED_BEGIN;
    tfe_tensor *g;
    if ((tfe_dyn_dims(x) & rg.mask) && Gk && Gk->dtype < TFE_FLOAT16) {
        g = B(s, OP_DIV, Gk, group_count(s, x, rg.mask, Gk->dtype));
    } else {
        if (tfe_dyn_dims(x) & rg.mask) baked(x);
        g = Bc(s, OP_DIV, Gk, (double)rg.count);
    }
    set_dx(s, &dx[0], broadcast_like(s, g, x), x);
    END;
}

/* prod: d/dx_i = the product of the other elements of its group, exactly,
 * zeros included: with P' = prod(x with its zeros replaced by 1) and z = the
 * number of zeros in the group, an x_i != 0 gets y / x_i (which is 0 when
 * z >= 1), an x_i = 0 gets P' when it is the only zero, else 0. */
RULE(grad_prod) {
    RED_BEGIN;
    tfe_tensor *is0 = B(s, OP_EQ, x, scope_const(s, 0, x));
    tfe_tensor *xs = scope_where(s, is0, scope_const(s, 1, x), x);
    tfe_tensor *P = scope_reduce(s, OP_PROD, xs, rg.mask, true);
    tfe_tensor *z = scope_reduce(s, OP_SUM, is0, rg.mask, true);
    tfe_tensor *Yk = keepdims(s, c, &rg, Y);
    tfe_tensor *at0 = scope_where(s, B(s, OP_EQ, z, scope_const(s, 1, z)), P, scope_const(s, 0, P));
    tfe_tensor *d = scope_where(s, is0, at0, B(s, OP_DIV, Yk, xs));
    set_dx(s, &dx[0], B(s, OP_MUL, Gk, d), x);
    END;
}

/* max/min: the gradient is shared evenly among the elements equal to the
 * result (ties split, as JAX and TensorFlow's reduce_max). A group whose
 * result is NaN shares it among its NaN elements (only such a group holds
 * NaNs, as the reduction propagates them). */
static int extremum_rule(const tfe_opcall *c, tfe_tensor *const *y, tfe_tensor *const *dy,
                         tfe_tensor **dx) {
    RED_BEGIN;
    tfe_tensor *hit = B(s, OP_LOGICAL_OR, B(s, OP_EQ, x, keepdims(s, c, &rg, Y)), U(s, OP_ISNAN, x));
    tfe_tensor *eq = cast(s, hit, G->dtype);
    tfe_tensor *n = scope_reduce(s, OP_SUM, eq, rg.mask, true);
    set_dx(s, &dx[0], B(s, OP_MUL, B(s, OP_DIV, Gk, n), eq), x);
    END;
}
RULE(grad_max) { return extremum_rule(c, y, dy, dx); }
RULE(grad_min) { return extremum_rule(c, y, dy, dx); }

/* softmax of x over the reduced axes: exp(x - y) */
RULE(grad_logsumexp) {
    RED_BEGIN;
    tfe_tensor *p = U(s, OP_EXP, B(s, OP_SUB, x, keepdims(s, c, &rg, Y)));
    set_dx(s, &dx[0], B(s, OP_MUL, Gk, p), x);
    END;
}

/* var = sum((x - mean)^2) / (n - ddof): d = 2 (x - mean) / (n - ddof) */
static tfe_tensor *centered(scope *s, tfe_tensor *x, const red_geom *rg) {
    return B(s, OP_SUB, x, scope_reduce(s, OP_MEAN, x, rg->mask, true));
}

/* num / (n - ddof) in t's dtype, n the group's count: a constant, or, where
 * the count comes from the data, the same double arithmetic at run time */
static tfe_tensor *per_dof(scope *s, const tfe_opcall *c, const red_geom *rg, double num, tfe_tensor *t) {
    tfe_tensor *x = c->in[0];
    if (!t) return NULL;
    if (!(tfe_dyn_dims(x) & rg->mask) || t->dtype >= TFE_FLOAT16) {
        if (tfe_dyn_dims(x) & rg->mask) baked(x);
        return scope_const(s, num / (double)(rg->count - c->at->ints[0]), t);
    }
    tfe_tensor *n = group_count(s, x, rg->mask, TFE_FLOAT64);
    tfe_tensor *dof = B(s, OP_SUB, n, scope_full(s, (double)c->at->ints[0], TFE_FLOAT64, 0, NULL));
    return cast(s, B(s, OP_DIV, scope_full(s, num, TFE_FLOAT64, 0, NULL), dof), t->dtype);
}

RULE(grad_var) {
    RED_BEGIN;
    tfe_tensor *xc = centered(s, x, &rg);
    tfe_tensor *d = B(s, OP_MUL, xc, per_dof(s, c, &rg, 2.0, xc));
    set_dx(s, &dx[0], B(s, OP_MUL, Gk, d), x);
    END;
}

/* std = sqrt(var): d = (x - mean) / ((n - ddof) std). Where std = 0 the group
 * is constant and the gradient 0 (std replaced by 1 in the division). */
RULE(grad_std) {
    RED_BEGIN;
    tfe_tensor *Yk = keepdims(s, c, &rg, Y);
    tfe_tensor *ys = scope_where(s, B(s, OP_EQ, Yk, scope_const(s, 0, Yk)), scope_const(s, 1, Yk), Yk);
    tfe_tensor *xc = centered(s, x, &rg);
    tfe_tensor *d = B(s, OP_DIV, B(s, OP_MUL, xc, per_dof(s, c, &rg, 1.0, xc)), ys);
    set_dx(s, &dx[0], B(s, OP_MUL, Gk, d), x);
    END;
}

/* softmax/log_softmax reduce over one axis (axes[0], default -1) */
static tfe_tensor *sum_axis(scope *s, const tfe_opcall *c, tfe_tensor *t) {
    int axis;
    if (!t) return NULL;
    if (kn_axis(tfe_ops[c->op].name, c->at->naxes > 0 ? c->at->axes[0] : -1, t->rank, &axis)) {
        s->failed = true;
        return NULL;
    }
    return scope_reduce(s, OP_SUM, t, 1u << axis, true);
}

/* y (G - sum(G y)) */
RULE(grad_softmax) {
    BEGIN;
    if (wants(x)) {
        tfe_tensor *gy = B(s, OP_MUL, G, Y);
        set_dx(s, &dx[0], B(s, OP_SUB, gy, B(s, OP_MUL, Y, sum_axis(s, c, gy))), x);
    }
    END;
}

/* G - exp(y) sum(G) */
RULE(grad_log_softmax) {
    BEGIN;
    if (wants(x)) set_dx(s, &dx[0], B(s, OP_SUB, G, B(s, OP_MUL, U(s, OP_EXP, Y), sum_axis(s, c, G))), x);
    END;
}

/* ---- matmul ----------------------------------------------------------------------- */

/* NumPy semantics: a 1-D a is (1, k) with the 1 dropped from the result, a
 * 1-D b is (k, 1) likewise; leading axes broadcast. The rule works on the 2-D
 * forms: da2 = G2 b2^T, db2 = a2^T G2, then undoes the broadcast batch axes. */
RULE(grad_matmul) {
    BEGIN;
    tfe_tensor *a = c->in[0], *b = c->in[1];
    if (!wants(a) && !wants(b)) END;
    int ra = a->rank, rb = b->rank;
    int64_t sh[TFE_MAX_RANK];
    tfe_tensor *a2 = a, *b2 = b;
    if (ra == 1) a2 = reshape(s, a, 2, (int64_t[]){1, a->shape[0]});
    if (rb == 1) b2 = reshape(s, b, 2, (int64_t[]){b->shape[0], 1});
    /* G2: G with the dropped size-1 axes restored */
    int nb = G->rank - (ra >= 2) - (rb >= 2), r = 0;
    for (; r < nb; r++) sh[r] = G->shape[r];
    sh[r++] = ra >= 2 ? G->shape[nb] : 1;
    sh[r++] = rb >= 2 ? G->shape[G->rank - 1] : 1;
    tfe_tensor *G2 = reshape(s, G, r, sh);
    if (wants(a)) {
        /* (.., 1, k) reduces to a 1-D a's (k,) by summing leading axes */
        set_dx(s, &dx[0], B(s, OP_MATMUL, G2, mT(s, b2)), a);
    }
    if (wants(b)) {
        tfe_tensor *db2 = B(s, OP_MATMUL, mT(s, a2), G2);
        if (rb == 1 && db2) db2 = reshape(s, db2, db2->rank - 1, db2->shape); /* drop the 1 */
        set_dx(s, &dx[1], db2, b);
    }
    END;
}

/* ---- shape ---------------------------------------------------------------------------- */

/* reshape, expand_dims, squeeze: G back to x's shape */
RULE(grad_reshape) {
    BEGIN;
    if (wants(x)) {
        /* one dim whose size comes from the data: the reshape infers it (-1) */
        uint32_t d = tfe_dyn_dims(x);
        int64_t sh[TFE_MAX_RANK], rest = 1;
        int at = d && !(d & (d - 1)) ? __builtin_ctz(d) : -1;
        for (int i = 0; i < x->rank; i++) {
            sh[i] = i == at ? -1 : x->shape[i];
            if (i != at) rest *= x->shape[i];
        }
        if (at < 0 || rest == 0) {
            baked(x);
            if (at >= 0) sh[at] = x->shape[at];
        }
        set_dx(s, &dx[0], reshape(s, G, x->rank, sh), x);
    }
    END;
}
RULE(grad_expand_dims) { return grad_reshape(c, y, dy, dx); }
RULE(grad_squeeze) { return grad_reshape(c, y, dy, dx); }

/* the inverse permutation */
RULE(grad_transpose) {
    BEGIN;
    if (wants(x)) {
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.nints = c->at->nints; /* 0: the reversal, its own inverse */
        for (int i = 0; i < c->at->nints; i++) {
            int64_t p = c->at->ints[i] < 0 ? c->at->ints[i] + x->rank : c->at->ints[i];
            at.ints[p] = i;
        }
        set_dx(s, &dx[0], scope_call(s, OP_TRANSPOSE, 1, &G, &at), x);
    }
    END;
}

RULE(grad_broadcast_to) { BEGIN; if (wants(x)) set_dx(s, &dx[0], G, x); END; }

/* slice: G scattered into zeros (set_slice with the same attributes). The
 * zeros are one 0-d zero broadcast to x's shape (a view: no buffer of x's
 * size to fill and copy from; k_set_slice clears its output instead). */
RULE(grad_slice) {
    BEGIN;
    if (wants(x)) {
        tfe_tensor *z = tfe_dyn_dims(x) ? scope_full(s, 0, G->dtype, x->rank, x->shape)
                                        : broadcast_to(s, scope_full(s, 0, G->dtype, 0, NULL),
                                                       x->rank, x->shape);
        tfe_tensor *in[2] = {z, G};
        set_dx(s, &dx[0], scope_call(s, OP_SET_SLICE, 2, in, c->at), x);
    }
    END;
}

/* set_slice(x, v): x gets G with the slice zeroed, v gets G[slice] */
RULE(grad_set_slice) {
    BEGIN;
    tfe_tensor *v = c->in[1];
    if (wants(x)) {
        tfe_tensor *in[2] = {G, scope_const(s, 0, G)};
        set_dx(s, &dx[0], scope_call(s, OP_SET_SLICE, 2, in, c->at), x);
    }
    if (wants(v)) set_dx(s, &dx[1], scope_call(s, OP_SLICE, 1, &G, c->at), v);
    END;
}

/* G[..., lo:hi, ...] along axis (a view) */
static tfe_tensor *slice_axis(scope *s, tfe_tensor *t, int axis, int64_t lo, int64_t hi,
                              bool drop) {
    if (!t) return NULL;
    tfe_attrs at;
    tfe_attrs_init(&at);
    for (int k = 0; k <= axis; k++) {
        at.ints[3 * k] = k == axis ? lo : 0;
        at.ints[3 * k + 1] = k == axis ? hi : t->shape[k];
        at.ints[3 * k + 2] = 1;
    }
    at.nints = 3 * (axis + 1);
    at.naxes = 0;
    if (drop) at.axes[at.naxes++] = axis;
    return scope_call(s, OP_SLICE, 1, &t, &at);
}

/* concat with an input whose sizes come from the data (the zero row and
 * x[mask]'s gradient of boolean_mask's rule): each input's part of G is
 * gathered at its positions along the axis, counted at run time (the same
 * values a slice gives, whose bounds would fix every dim up to the axis).
 * False: no such input. */
static bool concat_dyn(scope *s, const tfe_opcall *c, tfe_tensor **dx, tfe_tensor *G, int axis, uint64_t skip_) {
    bool dyn = false;
    for (int i = 0; i < c->nin; i++) dyn |= tfe_dyn_dims(c->in[i]) != 0;
    if (!dyn) return false;
    tfe_attrs ax;
    tfe_attrs_init(&ax);
    ax.naxes = 1;
    ax.axes[0] = axis;
    tfe_tensor *off = scope_full(s, 0, TFE_INT64, 0, NULL);
    for (int i = 0; i < c->nin && off; i++) {
        tfe_tensor *t = c->in[i];
        /* a bool of t's length along the axis (all true): the other axes reduced */
        unsigned other = 0;
        for (int k = 0; k < t->rank; k++)
            if (k != axis) other |= 1u << k;
        tfe_tensor *line = scope_reduce(s, OP_ANY, all_true(s, t), other, false);
        tfe_attrs cs;
        tfe_attrs_init(&cs);
        cs.naxes = 1;
        cs.axes[0] = 0;
        tfe_tensor *pos = line ? scope_call(s, OP_CUMSUM, 1, &line, &cs) : NULL; /* 1, 2, ..: int64 */
        tfe_tensor *idx = B(s, OP_ADD, B(s, OP_SUB, pos, scope_full(s, 1, TFE_INT64, 0, NULL)), off);
        if (wants(t)) {
            tfe_tensor *in[2] = {G, idx};
            set_dx(s, &dx[i], idx ? scope_call(s, OP_GATHER, 2, in, &ax) : NULL, t);
        }
        off = B(s, OP_ADD, off, scope_reduce(s, OP_SUM, line, 1u, false));
    }
    if (!off) s->failed = true;
    return true;
}

RULE(grad_concat) {
    BEGIN;
    int axis;
    if (kn_axis("concat", c->at->axes[0], x->rank, &axis)) return -1;
    if (concat_dyn(s, c, dx, G, axis, skip_)) END;
    int64_t off = 0;
    for (int i = 0; i < c->nin; i++) {
        int64_t len = c->in[i]->shape[axis];
        if (wants(c->in[i])) set_dx(s, &dx[i], slice_axis(s, G, axis, off, off + len, false), c->in[i]);
        off += len;
    }
    END;
}

RULE(grad_stack) {
    BEGIN;
    int axis;
    if (kn_axis("stack", c->at->axes[0], x->rank + 1, &axis)) return -1;
    for (int i = 0; i < c->nin; i++)
        if (wants(c->in[i])) set_dx(s, &dx[i], slice_axis(s, G, axis, i, i + 1, true), c->in[i]);
    END;
}

/* split: the output gradients concatenated back (the tape passes zeros for
 * outputs nobody used) */
RULE(grad_split) {
    BEGIN;
    if (wants(x)) {
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.naxes = 1;
        at.axes[0] = c->at->axes[0];
        set_dx(s, &dx[0], scope_call(s, OP_CONCAT, c->nout, dy, &at), x);
    }
    END;
}

/* tile: each repeated axis i is summed over its repetitions, G seen as
 * (before, reps_i, x_i * after) so that the rank never exceeds 3 */
RULE(grad_tile) {
    BEGIN;
    if (wants(x)) {
        const tfe_attrs *at = c->at;
        int r = G->rank;
        tfe_tensor *g = G;
        int64_t cur[TFE_MAX_RANK];
        for (int i = 0; i < r; i++) cur[i] = G->shape[i];
        bool empty = false;
        for (int i = 0; i < at->nints; i++) empty |= at->ints[i] == 0;
        if (empty) g = scope_full(s, 0, G->dtype, x->rank, x->shape); /* no element was tiled */
        for (int i = 0; i < r && g && !empty; i++) {
            int ir = i - (r - at->nints);
            int64_t rep = ir >= 0 ? at->ints[ir] : 1;
            if (rep == 1) continue;
            int64_t before = 1, after = 1, xi = cur[i] / rep;
            for (int k = 0; k < i; k++) before *= cur[k];
            for (int k = i + 1; k < r; k++) after *= cur[k];
            g = reshape(s, g, 3, (int64_t[]){before, rep, xi * after});
            g = scope_reduce(s, OP_SUM, g, 1u << 1, false);
            cur[i] = xi;
            g = reshape(s, g, r, cur);
        }
        set_dx(s, &dx[0], reshape(s, g, x->rank, x->shape), x);
    }
    END;
}

/* ---- indexing and random ----------------------------------------------------------------- */

static tfe_attrs axis_attrs(const tfe_opcall *c) {
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.naxes = c->at->naxes;
    at.axes[0] = c->at->axes[0];
    return at;
}

/* The backward of a gather-like op (gather, take_along_axis): x gets G added
 * into zeros at the indices by add (repeated indices accumulate). */
static void back_gather(scope *s, const tfe_opcall *c, tfe_tensor **dx, tfe_tensor *G, tfe_op add) {
    tfe_tensor *x = c->in[0];
    tfe_attrs at = axis_attrs(c);
    tfe_tensor *in[3] = {zeros_as(s, G->dtype, x), c->in[1], G};
    set_dx(s, &dx[0], scope_call(s, add, 3, in, &at), x);
}

/* The backward of a scatter-add-like op (scatter_add, put_along_axis_add)
 * for its values v: G taken at the indices by take. */
static void back_scatter_values(scope *s, const tfe_opcall *c, tfe_tensor **dx, tfe_tensor *G, tfe_op take) {
    tfe_attrs at = axis_attrs(c);
    tfe_tensor *in[2] = {G, c->in[1]};
    set_dx(s, &dx[2], scope_call(s, take, 2, in, &at), c->in[2]);
}

/* gather: G added into zeros at the indices */
RULE(grad_gather) {
    BEGIN;
    if (wants(x)) back_gather(s, c, dx, G, OP_SCATTER_ADD);
    END;
}

/* scatter_add(x, idx, v): x gets G, v gets G at the indices */
RULE(grad_scatter_add) {
    BEGIN;
    if (wants(x)) set_dx(s, &dx[0], G, x);
    if (wants(c->in[2])) back_scatter_values(s, c, dx, G, OP_GATHER);
    END;
}

/* scatter(x, idx, v): x gets G with the written rows zeroed. v gets G at the
 * indices, but with a repeated index only the write that won (the last, as
 * the kernel writes in order) gets it; the others were overwritten and get 0.
 * The winner is found with ops: scattering the positions 0..n-1 into a
 * vector of the axis length leaves the last position at each index. */
/* boolean_mask(x, m), m over x's leading axes: each selected row's gradient
 * goes back to its position, zeros elsewhere (PyTorch's masked_select).
 * Written as a gather so that G's data-dependent length (the number of
 * selected rows) never becomes a shape: row i of the flattened mask takes
 * row cumsum(m)[i] of [0; G] where m[i], else row 0 (the zero row). */
RULE(grad_bool_mask) {
    BEGIN;
    if (wants(x)) {
        tfe_tensor *m = c->in[1];
        int mr = m->rank, rr = x->rank - mr;
        int64_t n = 1, zshape[TFE_MAX_RANK];
        for (int i = 0; i < mr; i++) n *= m->shape[i];
        zshape[0] = 1;
        for (int i = 0; i < rr; i++) zshape[1 + i] = x->shape[mr + i];
        /* sizes from the data (a mask of x[mask]'s rows): read at run time */
        if (tfe_dyn_dims(m)) n = -1;
        if (tfe_dyn_dims(x) >> mr) baked(x);
        tfe_tensor *flat = reshape(s, m, 1, &n);
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.naxes = 1;
        at.axes[0] = 0;
        tfe_tensor *pos = flat ? scope_call(s, OP_CUMSUM, 1, &flat, &at) : NULL; /* int64 */
        tfe_tensor *idx = B(s, OP_MUL, pos, cast(s, flat, TFE_INT64));
        tfe_tensor *cat[2] = {scope_full(s, 0, G->dtype, 1 + rr, zshape), G};
        tfe_tensor *padded = cat[0] && G ? scope_call(s, OP_CONCAT, 2, cat, &at) : NULL;
        tfe_tensor *gin[2] = {padded, idx};
        tfe_tensor *g = padded && idx ? scope_call(s, OP_GATHER, 2, gin, &at) : NULL;
        if (mr == 1 && tfe_dyn_dims(x)) { /* g has x's shape, at run time too */
            set_dx(s, &dx[0], g, x);
        } else {
            baked(x);
            set_dx(s, &dx[0], reshape(s, g, x->rank, x->shape), x);
        }
    }
    END;
}

RULE(grad_scatter) {
    BEGIN;
    tfe_tensor *idx = c->in[1], *v = c->in[2];
    tfe_attrs at = axis_attrs(c);
    int axis;
    if (kn_axis("scatter", at.naxes >= 1 ? at.axes[0] : 0, x->rank, &axis)) return -1;
    if (wants(x)) {
        tfe_tensor *in[3] = {G, idx, scope_const(s, 0, G)};
        set_dx(s, &dx[0], scope_call(s, OP_SCATTER, 3, in, &at), x);
    }
    if (wants(v)) {
        int64_t n = tensor_numel(idx);
        tfe_attrs ar;
        tfe_attrs_init(&ar);
        ar.dtype = TFE_INT64;
        ar.f[0] = 0;
        ar.f[1] = (double)n;
        ar.f[2] = 1;
        tfe_tensor *pos = reshape(s, scope_call(s, OP_ARANGE, 0, NULL, &ar), idx->rank, idx->shape);
        tfe_tensor *last = scope_full(s, -1, TFE_INT64, 1, &x->shape[axis]);
        tfe_attrs a0;
        tfe_attrs_init(&a0);
        a0.naxes = 1;
        a0.axes[0] = 0;
        tfe_tensor *in3[3] = {last, idx, pos};
        tfe_tensor *winner = scope_call(s, OP_SCATTER, 3, in3, &a0);
        tfe_tensor *in2[2] = {winner, idx};
        tfe_tensor *won = B(s, OP_EQ, scope_call(s, OP_GATHER, 2, in2, &a0), pos);
        /* won has idx's shape; the gathered rows are x.shape[:axis] + idx.shape
         * + x.shape[axis+1:]: append the trailing axes as 1 */
        int64_t sh[TFE_MAX_RANK];
        int r = 0;
        for (int i = 0; i < idx->rank; i++) sh[r++] = idx->shape[i];
        for (int i = axis + 1; i < x->rank; i++) sh[r++] = 1;
        won = reshape(s, won, r, sh);
        tfe_tensor *in[2] = {G, idx};
        tfe_tensor *gv = scope_call(s, OP_GATHER, 2, in, &at);
        set_dx(s, &dx[2], scope_where(s, won, gv, scope_const(s, 0, G)), v);
    }
    END;
}

/* dropout: the same mask, by running dropout on G with the same attributes
 * (the same seed and counter draw the same numbers, see random.c) */
RULE(grad_dropout) {
    BEGIN;
    if (wants(x)) {
        tfe_tensor *g = cast(s, G, x->dtype);
        set_dx(s, &dx[0], scope_call(s, OP_DROPOUT, 1, &g, c->at), x);
    }
    END;
}

/* ---- convolution and pooling --------------------------------------------------------------
 * The backward ops (ops_nn.def, kernels_nn_grad.c) take the forward attributes
 * with ints[0..4] all given (defaults filled in) and a shape in ints[8..11]. */

/* at: the forward attributes with the defaults of conv2d (pool: false) or
 * pooling made explicit, and shape in ints[8..11] (when shape is not NULL) */
static tfe_attrs backprop_attrs(const tfe_attrs *fwd, bool pool, const int64_t *shape) {
    tfe_attrs at = *fwd;
    int64_t dflt[5] = {1, 1, 1, 1, 0};
    if (pool) {
        dflt[2] = fwd->ints[0];
        dflt[3] = fwd->ints[1];
    }
    for (int i = fwd->nints; i < 5; i++) at.ints[i] = dflt[i];
    for (int i = 5; i < 8; i++) at.ints[i] = 0;
    for (int i = 0; i < 4; i++) at.ints[8 + i] = shape ? shape[i] : 0;
    at.nints = 12;
    return at;
}

/* forward attributes again (ints[0..4]) from a backward op's */
static tfe_attrs forward_attrs(const tfe_attrs *bwd) {
    tfe_attrs at = *bwd;
    at.nints = 5;
    return at;
}

RULE(grad_conv2d) {
    BEGIN;
    tfe_tensor *w = c->in[1];
    if (wants(x)) {
        tfe_attrs at = backprop_attrs(c->at, false, x->shape);
        tfe_tensor *in[2] = {cast(s, G, w->dtype), w};
        set_dx(s, &dx[0], scope_call(s, OP_CONV2D_BACKPROP_INPUT, 2, in, &at), x);
    }
    if (wants(w)) {
        tfe_attrs at = backprop_attrs(c->at, false, w->shape);
        tfe_tensor *in[2] = {x, cast(s, G, x->dtype)};
        set_dx(s, &dx[1], scope_call(s, OP_CONV2D_BACKPROP_FILTER, 2, in, &at), w);
    }
    END;
}

/* conv2d_bias(_relu)(x, w, b) = [relu](conv2d(x, w) + b): the rules of relu,
 * add and conv2d in turn, as a tape runs them, with the same ops. relu's
 * mask reads the output instead of the pre-activation: relu(a) > 0 exactly
 * when a > 0 (graph/opt_fuse.c, relu_masks). */
RULE(grad_conv2d_bias) {
    BEGIN;
    tfe_tensor *w = c->in[1], *b = c->in[2];
    tfe_tensor *dz = c->op == OP_CONV2D_BIAS_RELU ? B(s, OP_RELU_GRAD, G, Y) : G;
    dz = cast(s, dz, Y->dtype);
    if (!dz) s->failed = true;
    if (dz && wants(b)) set_dx(s, &dx[2], dz, b);
    if (dz && wants(x)) {
        tfe_attrs at = backprop_attrs(c->at, false, x->shape);
        tfe_tensor *in[2] = {cast(s, dz, w->dtype), w};
        set_dx(s, &dx[0], scope_call(s, OP_CONV2D_BACKPROP_INPUT, 2, in, &at), x);
    }
    if (dz && wants(w)) {
        tfe_attrs at = backprop_attrs(c->at, false, w->shape);
        tfe_tensor *in[2] = {x, cast(s, dz, x->dtype)};
        set_dx(s, &dx[1], scope_call(s, OP_CONV2D_BACKPROP_FILTER, 2, in, &at), w);
    }
    END;
}

RULE(grad_max_pool2d) {
    BEGIN;
    if (wants(x)) {
        tfe_attrs at = backprop_attrs(c->at, true, NULL);
        tfe_tensor *in[2] = {x, cast(s, G, x->dtype)};
        set_dx(s, &dx[0], scope_call(s, OP_MAX_POOL2D_GRAD, 2, in, &at), x);
    }
    END;
}

RULE(grad_avg_pool2d) {
    BEGIN;
    if (wants(x)) {
        tfe_attrs at = backprop_attrs(c->at, true, x->shape);
        tfe_tensor *g = cast(s, G, x->dtype);
        set_dx(s, &dx[0], scope_call(s, OP_AVG_POOL2D_GRAD, 1, &g, &at), x);
    }
    END;
}

/* conv2d_backprop_input(dy, w) = B(dy, w) is bilinear with
 * <H, B(dy, w)> = <conv2d(H, w), dy>: d/d dy = conv2d(H, w) and
 * d/dw = conv2d_backprop_filter(H, dy) (H in the role of the input). */
RULE(grad_conv2d_backprop_input) {
    BEGIN;
    tfe_tensor *d = c->in[0], *w = c->in[1];
    tfe_tensor *H = cast(s, G, w->dtype);
    if (wants(d)) {
        tfe_attrs at = forward_attrs(c->at);
        tfe_tensor *in[2] = {H, w};
        set_dx(s, &dx[0], scope_call(s, OP_CONV2D, 2, in, &at), d);
    }
    if (wants(w)) {
        tfe_attrs at = backprop_attrs(c->at, false, w->shape);
        tfe_tensor *in[2] = {H, d};
        set_dx(s, &dx[1], scope_call(s, OP_CONV2D_BACKPROP_FILTER, 2, in, &at), w);
    }
    END;
}

/* conv2d_backprop_filter(x, dy) = F(x, dy) with <H, F(x, dy)> = <conv2d(x, H), dy>:
 * d/dx = conv2d_backprop_input(dy, H), d/d dy = conv2d(x, H). */
RULE(grad_conv2d_backprop_filter) {
    BEGIN;
    tfe_tensor *d = c->in[1];
    tfe_tensor *H = cast(s, G, x->dtype);
    if (wants(x)) {
        tfe_attrs at = backprop_attrs(c->at, false, x->shape);
        tfe_tensor *in[2] = {d, H};
        set_dx(s, &dx[0], scope_call(s, OP_CONV2D_BACKPROP_INPUT, 2, in, &at), x);
    }
    if (wants(d)) {
        tfe_attrs at = forward_attrs(c->at);
        tfe_tensor *in[2] = {x, H};
        set_dx(s, &dx[1], scope_call(s, OP_CONV2D, 2, in, &at), d);
    }
    END;
}

/* avg_pool2d_grad is linear in dy, the adjoint of avg_pool2d */
RULE(grad_avg_pool2d_grad) {
    BEGIN;
    if (wants(x)) {
        tfe_attrs at = forward_attrs(c->at);
        tfe_tensor *H = cast(s, G, x->dtype);
        set_dx(s, &dx[0], scope_call(s, OP_AVG_POOL2D, 1, &H, &at), x);
    }
    END;
}

/* max_pool2d_grad(x, dy) is piecewise constant in x (its gradient there is 0:
 * none) and linear in dy: the adjoint picks, for every window, H at the
 * window's first maximum of x (op max_pool2d_select). */
RULE(grad_max_pool2d_grad) {
    BEGIN;
    tfe_tensor *d = c->in[1];
    if (wants(d)) {
        tfe_tensor *in[2] = {x, cast(s, G, x->dtype)};
        set_dx(s, &dx[1], scope_call(s, OP_MAX_POOL2D_SELECT, 2, in, c->at), d);
    }
    END;
}

/* max_pool2d_select(x, h) is linear in h, the adjoint of max_pool2d_grad(x, .) */
RULE(grad_max_pool2d_select) {
    BEGIN;
    tfe_tensor *h = c->in[1];
    if (wants(h)) {
        tfe_tensor *in[2] = {x, cast(s, G, x->dtype)};
        set_dx(s, &dx[1], scope_call(s, OP_MAX_POOL2D_GRAD, 2, in, c->at), h);
    }
    END;
}

/* ---- library ops: math, scans, sorting ----------------------------------------- */

/* d tan x = 1 + tan^2 x */
RULE(grad_tan) {
    BEGIN;
    if (wants(x)) set_dx(s, &dx[0], B(s, OP_MUL, G, Bc(s, OP_ADD, B(s, OP_MUL, Y, Y), 1)), x);
    END;
}

/* d erf x = 2/sqrt(pi) exp(-x^2) */
RULE(grad_erf) {
    BEGIN;
    if (wants(x)) {
        tfe_tensor *e = U(s, OP_EXP, U(s, OP_NEG, B(s, OP_MUL, x, x)));
        set_dx(s, &dx[0], B(s, OP_MUL, G, Bc(s, OP_MUL, e, 1.12837916709551257390)), x); /* M_2_SQRTPI */
    }
    END;
}

/* d log_b x = 1 / (x ln b) */
RULE(grad_log2) {
    BEGIN;
    if (wants(x)) set_dx(s, &dx[0], B(s, OP_DIV, G, Bc(s, OP_MUL, x, 0.69314718055994530942)), x);
    END;
}
RULE(grad_log10) {
    BEGIN;
    if (wants(x)) set_dx(s, &dx[0], B(s, OP_DIV, G, Bc(s, OP_MUL, x, 2.30258509299404568402)), x);
    END;
}

RULE(grad_square) {
    BEGIN;
    if (wants(x)) set_dx(s, &dx[0], B(s, OP_MUL, G, Bc(s, OP_MUL, x, 2)), x);
    END;
}

/* cumsum or cumprod of t along c's axis, from the end when rev */
static tfe_tensor *scan(scope *s, tfe_op op, tfe_tensor *t, const tfe_opcall *c, bool rev) {
    if (!t) return NULL;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.naxes = 1;
    at.axes[0] = c->at->axes[0];
    at.nints = 1;
    at.ints[0] = rev;
    return scope_call(s, op, 1, &t, &at);
}

/* cumsum's adjoint is the cumsum the other way */
RULE(grad_cumsum) {
    BEGIN;
    if (wants(x)) set_dx(s, &dx[0], scan(s, OP_CUMSUM, G, c, !c->at->ints[0]), x);
    END;
}

/* cumprod: dx_i = sum over j >= i (in scan order) of G_j prod_{k <= j, k != i} x_k,
 * exactly, zeros included. With n_i the zeros of x up to i and z the first
 * zero: before z (n_i = 0) it is cumsum_back(G y)_i / x_i; at z it is
 * cumsum_back(G y')_z, y' the cumprod with x_z replaced by 1; after z it is
 * 0, written x_z cumsum_back(G y')_i / x_i (x_i = 1 where x_i = 0) so that
 * the second derivative is exact with one zero in a line too (with two or
 * more, as prod's, it is not: a known limit). */
RULE(grad_cumprod) {
    BEGIN;
    if (wants(x)) {
        bool rev = c->at->ints[0];
        unsigned mask = 1u << c->at->axes[0];
        tfe_tensor *is0 = B(s, OP_EQ, x, scope_const(s, 0, x));
        tfe_tensor *n = scan(s, OP_CUMSUM, cast(s, is0, x->dtype), c, rev);
        tfe_tensor *first = B(s, OP_LOGICAL_AND, is0, B(s, OP_EQ, n, scope_const(s, 1, n)));
        tfe_tensor *xs = scope_where(s, is0, scope_const(s, 1, x), x);
        tfe_tensor *y1 = scan(s, OP_CUMPROD, scope_where(s, first, scope_const(s, 1, x), x), c, rev);
        tfe_tensor *A = B(s, OP_DIV, scan(s, OP_CUMSUM, B(s, OP_MUL, G, Y), c, !rev), xs);
        tfe_tensor *Q = B(s, OP_DIV, scan(s, OP_CUMSUM, B(s, OP_MUL, G, y1), c, !rev), xs);
        tfe_tensor *xz = scope_reduce(s, OP_SUM, scope_where(s, first, x, scope_const(s, 0, x)), mask, true);
        tfe_tensor *after = scope_where(s, first, Q, B(s, OP_MUL, xz, Q));
        set_dx(s, &dx[0], scope_where(s, B(s, OP_EQ, n, scope_const(s, 0, n)), A, after), x);
    }
    END;
}

/* take_along_axis(x, idx): x gets G added back at the indices */
RULE(grad_take_along_axis) {
    BEGIN;
    if (wants(x)) back_gather(s, c, dx, G, OP_PUT_ALONG_AXIS_ADD);
    END;
}

/* put_along_axis_add(x, idx, v): x gets G, v gets G at the indices */
RULE(grad_put_along_axis_add) {
    BEGIN;
    if (wants(x)) set_dx(s, &dx[0], G, x);
    if (wants(c->in[2])) back_scatter_values(s, c, dx, G, OP_TAKE_ALONG_AXIS);
    END;
}

/* ---- matrices: tril/triu and LAPACK (tensor/kernels_lapack.c) ---------------------------- */

static tfe_tensor *tri(scope *s, tfe_op op, tfe_tensor *x, int64_t k) {
    if (!x) return NULL;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = 1;
    at.ints[0] = k;
    return scope_call(s, op, 1, &x, &at);
}

/* tril/triu are linear: the same mask on G */
RULE(grad_tri) { BEGIN; if (wants(x)) set_dx(s, &dx[0], tri(s, c->op, G, c->at->ints[0]), x); END; }

/* Y = A^-1: dY = -Y dA Y, so dA = -Y^T G Y^T */
RULE(grad_inv) {
    BEGIN;
    if (wants(x)) {
        tfe_tensor *yt = mT(s, Y);
        set_dx(s, &dx[0], U(s, OP_NEG, B(s, OP_MATMUL, B(s, OP_MATMUL, yt, G), yt)), x);
    }
    END;
}

/* X = solve(A, B) = A^-1 B: dB = A^-T G = solve(A^T, G), dA = -dB X^T. A
 * 1-D b is one column (n, 1) here, so solve(A^T, .) sees a matrix too. */
RULE(grad_solve) {
    BEGIN;
    tfe_tensor *a = c->in[0], *b = c->in[1];
    if (!wants(a) && !wants(b)) END;
    bool vec = b->rank == 1;
    int64_t sh[TFE_MAX_RANK];
    for (int i = 0; i < G->rank; i++) sh[i] = G->shape[i];
    sh[G->rank] = 1;
    tfe_tensor *G2 = vec ? reshape(s, G, G->rank + 1, sh) : G;
    tfe_tensor *X2 = vec ? reshape(s, Y, Y->rank + 1, sh) : Y;
    tfe_tensor *db = B(s, OP_SOLVE, mT(s, a), G2);
    if (wants(b)) set_dx(s, &dx[1], vec ? reshape(s, db, G->rank, G->shape) : db, b);
    if (wants(a)) set_dx(s, &dx[0], U(s, OP_NEG, B(s, OP_MATMUL, db, mT(s, X2))), a);
    END;
}

/* d det(A) = det(A) tr(A^-1 dA), so dA = G det(A) A^-T. A singular A has no
 * inverse: its gradient is an error rather than a wrong one. */
RULE(grad_det) {
    BEGIN;
    if (wants(x)) {
        int64_t sh[TFE_MAX_RANK];
        for (int i = 0; i < Y->rank; i++) sh[i] = Y->shape[i];
        sh[Y->rank] = sh[Y->rank + 1] = 1;
        tfe_tensor *inv = tfe_unary(OP_INV, x);
        if (!inv) {
            char msg[300];
            snprintf(msg, sizeof msg, "%s", tfe_error_msg());
            if (strstr(msg, "singular"))
                tfe_error_set("det: the gradient at a singular matrix is not supported (it is det(a) * inv(a)^T)");
            s->failed = true;
        } else {
            scope_keep(s, inv);
            tfe_tensor *gy = reshape(s, B(s, OP_MUL, G, Y), Y->rank + 2, sh);
            set_dx(s, &dx[0], B(s, OP_MUL, gy, mT(s, inv)), x);
        }
    }
    END;
}

/* A = L L^T (PyTorch's rule, and Murray 2016): with P = Phi(L^T G), Phi the
 * lower triangle with its diagonal halved, made symmetric,
 * dA = L^-T P L^-1. The gradient is symmetric: it is the derivative along
 * symmetric perturbations of A (cholesky reads only A's lower triangle). */
RULE(grad_cholesky) {
    BEGIN;
    if (wants(x)) {
        tfe_tensor *phi = tri(s, OP_TRIL, B(s, OP_MATMUL, mT(s, Y), G), 0);
        tfe_tensor *p = Bc(s, OP_MUL, B(s, OP_ADD, phi, mT(s, tri(s, OP_TRIL, phi, -1))), 0.5);
        tfe_tensor *linv = U(s, OP_INV, Y);
        set_dx(s, &dx[0], B(s, OP_MATMUL, B(s, OP_MATMUL, mT(s, linv), p), linv), x);
    }
    END;
}

/* ---- collectives (ops_dist.def; docs/distributed.md, "Gradients through
 * collectives"). The SPMD convention: the loss is the sum of every rank's
 * loss, so a rank's input reaches the loss through every rank's output, and
 * each rule is itself a collective that every rank runs (a rank whose own
 * upstream gradient is zeros still takes part). The packing attributes
 * (ints[1], ints[2]) go with it: the gradient has the forward's shape. */

static tfe_tensor *coll(scope *s, tfe_op op, tfe_tensor *g, const tfe_attrs *fwd, int64_t arg) {
    if (!g) return NULL;
    tfe_attrs at = *fwd;
    if (at.nints < 1) at.nints = 1;
    at.ints[0] = arg;
    return scope_call(s, op, 1, &g, &at);
}

/* sum: d(sum_r y_r)/dx_q = sum_r dy_r; mean: the same over the size */
RULE(grad_allreduce) {
    BEGIN;
    int64_t red = c->at->nints > 0 ? c->at->ints[0] : 0;
    if (!wants(x)) END;
    if (red <= 1) {
        set_dx(s, &dx[0], coll(s, OP_ALLREDUCE, G, c->at, red), x);
        END;
    }
    /* max/min: the summed upstream goes where x is the result, shared
     * evenly among the ranks that tie (as the max reduction's rule) */
    tfe_tensor *xf = x->dtype >= TFE_FLOAT16 ? cast(s, x, TFE_FLOAT32) : x;
    tfe_tensor *yf = Y->dtype >= TFE_FLOAT16 ? cast(s, Y, TFE_FLOAT32) : Y;
    tfe_tensor *hit = cast(s, B(s, OP_EQ, xf, yf), G->dtype);
    tfe_tensor *n = coll(s, OP_ALLREDUCE, hit, c->at, 0);
    tfe_tensor *sg = coll(s, OP_ALLREDUCE, G, c->at, 0);
    tfe_tensor *share = scope_where(s, B(s, OP_GT, n, scope_const(s, 0, n)), B(s, OP_DIV, sg, n),
                                    scope_const(s, 0, G)); /* no tie: a NaN result */
    set_dx(s, &dx[0], B(s, OP_MUL, share, hit), x);
    END;
}

/* broadcast: y_r = x_root on every rank, so x_root gets every rank's
 * upstream summed and the other ranks' x get zeros */
RULE(grad_broadcast) {
    BEGIN;
    if (!wants(x)) END;
    int64_t root = c->at->nints > 0 ? c->at->ints[0] : 0;
    tfe_attrs at = *c->at;
    at.nints = at.nints < 1 ? 1 : at.nints;
    at.ints[0] = 0; /* sum */
    tfe_tensor *sg = scope_call(s, OP_ALLREDUCE, 1, &G, &at);
    if (root != dist_rank())
        sg = scope_where(s, scope_full(s, 0, TFE_BOOL, 0, NULL), sg, scope_const(s, 0, sg));
    set_dx(s, &dx[0], sg, x);
    END;
}

/* allgather: x_q is rows [q d0, (q+1) d0) of every rank's y, so it gets
 * those rows of the summed upstream (a reduce-scatter) */
RULE(grad_allgather) {
    BEGIN;
    if (!wants(x)) END;
    tfe_tensor *sg = coll(s, OP_ALLREDUCE, G, c->at, 0);
    int64_t rows = x->rank == 0 ? 1 : x->shape[0], q = dist_rank();
    set_dx(s, &dx[0], slice_axis(s, sg, 0, q * rows, (q + 1) * rows, x->rank == 0), x);
    END;
}

/* ---- fused batch normalization (tensor/kernels_bn.c) ---------------------------- */

/* per-channel sums: t summed over every axis but the last, to shape (C,) */
static tfe_tensor *csum(scope *s, tfe_tensor *t, int64_t C) {
    return t ? scope_keep(s, tfe_unbroadcast(t, 1, &C)) : NULL;
}

/* the rows N (elements per channel) of x; -1 + error when unknown */
static double bn_rows(scope *s, const tfe_tensor *x) {
    int64_t n = 1;
    for (int i = 0; i < x->rank - 1; i++) {
        if (x->shape[i] < 0) {
            tfe_error_set("batch_norm: second derivatives need the batch's shape known when traced");
            s->failed = true;
            return -1;
        }
        n *= x->shape[i];
    }
    return (double)n;
}

/* batch_norm_train(x, gamma, beta) -> y, mean, var: one batch_norm_grad op
 * (the closed form, mean's and var's gradients folded in) */
RULE(grad_batch_norm_train) {
    BEGIN;
    tfe_tensor *g = c->in[1], *b = c->in[2];
    if (!wants(x) && !wants(g) && !wants(b)) END;
    tfe_tensor *in[7] = {cast(s, G, x->dtype), cast(s, dy[1], x->dtype), cast(s, dy[2], x->dtype), x, g, y[1], y[2]};
    tfe_tensor *o[3] = {0};
    for (int i = 0; i < 3; i++)
        if (!in[i]) s->failed = true;
    if (!s->failed) {
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.f[0] = c->at->f[0];
        if (tfe_execute(OP_BATCH_NORM_GRAD, 7, in, &at, o)) s->failed = true;
        for (int i = 0; i < 3 && !s->failed; i++) scope_keep(s, o[i]);
    }
    if (!s->failed) {
        if (wants(x)) set_dx(s, &dx[0], o[0], x);
        if (wants(g)) set_dx(s, &dx[1], o[1], g);
        if (wants(b)) set_dx(s, &dx[2], o[2], b);
    }
    END;
}

/* batch_norm_grad(dy, dmean, dvar, x, g, m, v): with r = rsqrt(v + eps),
 * xc = x - m, xh = xc r, S sums over rows, N rows, its outputs are
 *   dx = g r (dy - S(dy)/N - xh S(dy xh)/N) + dmean/N + 2 dvar xc/N,
 *   dgamma = S(dy xh), dbeta = S(dy);
 * this rule is their derivative (second derivatives of batch norm), made of
 * ops. With Gx, Gg, Gb the upstream and u = Gx g r, w = S(u xh),
 * K = S(Gx dy) - S(Gx) S(dy)/N - S(Gx xh) S(dy xh)/N:
 *   d dy = Gb + Gg xh + u - S(u)/N - xh w/N, d dmean = S(Gx)/N,
 *   d dvar = 2 S(Gx xc)/N, d g = r K,
 *   d xh = Gg dy - dy w/N - u S(dy xh)/N, d xc = 2 Gx dvar/N + r d xh,
 *   d r = g K + S(xc d xh), d x = d xc, d m = -S(d xc), d v = -r^3/2 d r. */
RULE(grad_batch_norm_grad) {
    BEGIN;
    tfe_tensor *dyv = c->in[0], *dm = c->in[1], *dv = c->in[2], *xx = c->in[3], *g = c->in[4], *m = c->in[5],
               *v = c->in[6];
    int64_t C = xx->rank ? xx->shape[xx->rank - 1] : 1;
    double N = bn_rows(s, xx);
    if (s->failed) END;
    tfe_tensor *Gx = cast(s, G, xx->dtype), *Gg = cast(s, dy[1], xx->dtype), *Gb = cast(s, dy[2], xx->dtype);
    tfe_tensor *r = U(s, OP_RSQRT, Bc(s, OP_ADD, v, c->at->f[0]));
    tfe_tensor *xc = B(s, OP_SUB, xx, m), *xh = B(s, OP_MUL, xc, r);
    tfe_tensor *Sdy = csum(s, dyv, C), *Sdyxh = csum(s, B(s, OP_MUL, dyv, xh), C);
    tfe_tensor *u = B(s, OP_MUL, Gx, B(s, OP_MUL, g, r));
    tfe_tensor *w = csum(s, B(s, OP_MUL, u, xh), C);
    tfe_tensor *SGx = csum(s, Gx, C);
    tfe_tensor *K = B(s, OP_SUB,
                      B(s, OP_SUB, csum(s, B(s, OP_MUL, Gx, dyv), C), Bc(s, OP_MUL, B(s, OP_MUL, SGx, Sdy), 1 / N)),
                      Bc(s, OP_MUL, B(s, OP_MUL, csum(s, B(s, OP_MUL, Gx, xh), C), Sdyxh), 1 / N));
    if (wants(dyv)) {
        tfe_tensor *t = B(s, OP_ADD, B(s, OP_ADD, Gb, B(s, OP_MUL, Gg, xh)), u);
        t = B(s, OP_SUB, t, Bc(s, OP_MUL, csum(s, u, C), 1 / N));
        t = B(s, OP_SUB, t, Bc(s, OP_MUL, B(s, OP_MUL, xh, w), 1 / N));
        set_dx(s, &dx[0], t, dyv);
    }
    if (wants(dm)) set_dx(s, &dx[1], Bc(s, OP_MUL, SGx, 1 / N), dm);
    if (wants(dv)) set_dx(s, &dx[2], Bc(s, OP_MUL, csum(s, B(s, OP_MUL, Gx, xc), C), 2 / N), dv);
    if (wants(g)) set_dx(s, &dx[4], B(s, OP_MUL, r, K), g);
    if (wants(xx) || wants(m) || wants(v)) {
        tfe_tensor *dxh = B(s, OP_SUB, B(s, OP_SUB, B(s, OP_MUL, Gg, dyv), Bc(s, OP_MUL, B(s, OP_MUL, dyv, w), 1 / N)),
                            Bc(s, OP_MUL, B(s, OP_MUL, u, Sdyxh), 1 / N));
        tfe_tensor *dxc = B(s, OP_ADD, Bc(s, OP_MUL, B(s, OP_MUL, Gx, dv), 2 / N), B(s, OP_MUL, r, dxh));
        if (wants(xx)) set_dx(s, &dx[3], dxc, xx);
        if (wants(m)) set_dx(s, &dx[5], U(s, OP_NEG, csum(s, dxc, C)), m);
        if (wants(v)) {
            tfe_tensor *dr = B(s, OP_ADD, B(s, OP_MUL, g, K), csum(s, B(s, OP_MUL, xc, dxh), C));
            tfe_tensor *r3 = B(s, OP_MUL, B(s, OP_MUL, r, r), r);
            set_dx(s, &dx[6], B(s, OP_MUL, Bc(s, OP_MUL, r3, -0.5), dr), v);
        }
    }
    END;
}

/* batch_norm_infer(x, g, b, m, v) = (x - m) r g + b, r = rsqrt(v + eps) */
RULE(grad_batch_norm_infer) {
    BEGIN;
    tfe_tensor *g = c->in[1], *b = c->in[2], *m = c->in[3], *v = c->in[4];
    int64_t C = x->rank ? x->shape[x->rank - 1] : 1;
    tfe_tensor *Gx = cast(s, G, x->dtype);
    tfe_tensor *r = U(s, OP_RSQRT, Bc(s, OP_ADD, v, c->at->f[0]));
    tfe_tensor *xc = B(s, OP_SUB, x, m);
    tfe_tensor *Ggr = B(s, OP_MUL, Gx, B(s, OP_MUL, g, r));
    if (wants(x)) set_dx(s, &dx[0], Ggr, x);
    if (wants(g)) set_dx(s, &dx[1], csum(s, B(s, OP_MUL, B(s, OP_MUL, Gx, xc), r), C), g);
    if (wants(b)) set_dx(s, &dx[2], csum(s, Gx, C), b);
    if (wants(m)) set_dx(s, &dx[3], U(s, OP_NEG, csum(s, Ggr, C)), m);
    if (wants(v)) {
        tfe_tensor *r3 = B(s, OP_MUL, B(s, OP_MUL, r, r), r);
        set_dx(s, &dx[4], B(s, OP_MUL, csum(s, B(s, OP_MUL, B(s, OP_MUL, Gx, g), xc), C), Bc(s, OP_MUL, r3, -0.5)), v);
    }
    END;
}
