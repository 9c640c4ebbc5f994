/* op_scope.h — a scope of temporary op results, for C code written as a
 * sequence of ops (the gradient rules, builtins composed of ops). */
#ifndef TFE_OP_SCOPE_H
#define TFE_OP_SCOPE_H

#include <stdbool.h>

#include "tensor/ops.h"

/* Every op result made through a scope is kept in it and released together
 * at the end (scope_release); what outlives the scope takes its own
 * reference. The helpers pass NULL through (an earlier op failed and set
 * the tensor error; `failed` says so), so the code reads as a straight
 * sequence of ops and checks for failure once, at the end. A scope is
 * 2 KiB: set n and failed, not the whole struct. */
#define TFE_SCOPE_CAP 256

typedef struct tfe_scope {
    tfe_tensor *t[TFE_SCOPE_CAP];
    int n;
    bool failed;
} tfe_scope;

static inline tfe_tensor *scope_keep(tfe_scope *s, tfe_tensor *t) {
    if (!t) {
        s->failed = true;
        return NULL;
    }
    if (s->n == TFE_SCOPE_CAP) { /* a bug in the caller, not a user error */
        tensor_decref(t);
        tfe_error_set("internal: too many temporaries in one op scope");
        s->failed = true;
        return NULL;
    }
    return s->t[s->n++] = t;
}

static inline void scope_release(tfe_scope *s) {
    for (int i = 0; i < s->n; i++) tensor_decref(s->t[i]);
    s->n = 0;
}

static inline tfe_tensor *scope_call(tfe_scope *s, tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at) {
    for (int i = 0; i < nin; i++)
        if (!in[i]) return NULL;
    return scope_keep(s, tfe_call1(op, nin, in, at));
}

static inline tfe_tensor *scope_op1(tfe_scope *s, tfe_op op, tfe_tensor *x) { return scope_call(s, op, 1, &x, NULL); }

static inline tfe_tensor *scope_op2(tfe_scope *s, tfe_op op, tfe_tensor *a, tfe_tensor *b) {
    tfe_tensor *in[2] = {a, b};
    return scope_call(s, op, 2, in, NULL);
}

static inline tfe_tensor *scope_where(tfe_scope *s, tfe_tensor *cond, tfe_tensor *a, tfe_tensor *b) {
    tfe_tensor *in[3] = {cond, a, b};
    return scope_call(s, OP_WHERE, 3, in, NULL);
}

/* A tensor of shape (rank, shape) filled with v, dtype dt (0-d: rank 0). */
static inline tfe_tensor *scope_full(tfe_scope *s, double v, tfe_dtype dt, int rank, const int64_t *shape) {
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.dtype = dt;
    at.f[0] = v;
    at.nints = rank;
    for (int i = 0; i < rank; i++) at.ints[i] = shape[i];
    return scope_call(s, OP_FULL, 0, NULL, &at);
}

/* A 0-d constant of t's dtype (so that it never promotes t). */
static inline tfe_tensor *scope_const(tfe_scope *s, double v, const tfe_tensor *t) {
    return t ? scope_full(s, v, t->dtype, 0, NULL) : NULL;
}

/* op (a reduction) over the axes in mask; an empty mask: x itself. */
static inline tfe_tensor *scope_reduce(tfe_scope *s, tfe_op op, tfe_tensor *x, unsigned mask, bool keepdims) {
    if (!x) return NULL;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.naxes = 0;
    at.keepdims = keepdims;
    for (int i = 0; i < x->rank; i++)
        if (mask & (1u << i)) at.axes[at.naxes++] = i;
    if (at.naxes == 0) return scope_keep(s, (tensor_incref(x), x));
    return scope_call(s, op, 1, &x, &at);
}

#endif
