/* grad_step.c — one op's step of a reverse sweep, shared by the tape
 * (tensor/tape.c) and a staged function's backward (stage/grad.c), so the
 * two sweeps cannot drift: how a missing output gradient is filled, which
 * inputs the rule skips, how "none" flags mask what a rule makes, and where
 * a gradient lives. Accumulation (g += d) is tfe_grad_add, also shared. */
#include "tensor/grad.h"
#include "tensor/device.h"

tfe_tensor *tfe_grad_flag_and(tfe_tensor *a, tfe_tensor *b) {
    if (!a || !b) return NULL;
    if (a == b) {
        tensor_incref(a);
        return a;
    }
    return tfe_binary(OP_LOGICAL_AND, a, b);
}

tfe_tensor *tfe_grad_flag_fill(tfe_tensor *flag, tfe_tensor *d, double v) {
    tfe_tensor *z = tfe_filled_like(d, v);
    tfe_tensor *in[3] = {flag, z, d};
    tfe_tensor *r = z ? tfe_call1(OP_WHERE, 3, in, NULL) : NULL;
    if (z) tensor_decref(z);
    return r;
}

tfe_tensor *tfe_grad_none_all(int nout, tfe_tensor *const *dy, tfe_tensor *const *flag) {
    if (!flag) return NULL;
    tfe_tensor *f = NULL;
    bool any = false;
    for (int j = 0; j < nout; j++) {
        if (!dy[j]) continue;
        tfe_tensor *nf = any ? tfe_grad_flag_and(f, flag[j]) : flag[j] ? (tensor_incref(flag[j]), flag[j]) : NULL;
        if (f) tensor_decref(f);
        any = true;
        if (!(f = nf)) return NULL;
    }
    return f;
}

int tfe_grad_add(tfe_tensor **g, tfe_tensor *d) {
    if (!*g) {
        *g = d;
        return 0;
    }
    tfe_tensor *sum = tfe_binary(OP_ADD, *g, d);
    tensor_decref(d);
    if (!sum) return -1;
    tensor_decref(*g);
    *g = sum;
    return 0;
}

int tfe_grad_place(tfe_tensor **d, const tfe_tensor *x) {
    /* a rule may make constants on the default device (docs/gpu.md); not
     * while an outer tape or a trace records: the copy is no op they could
     * see (a trace would take the copy for a constant) */
    const tfe_storage *xs = x->storage, *gs = (*d)->storage;
    if (!xs || !gs || xs->device == gs->device || tfe_tapes_active || tfe_trace_hook) return 0;
    tfe_tensor *moved = tensor_to_device(*d, xs->device);
    tensor_decref(*d);
    *d = moved;
    return moved ? 0 : -1;
}

/* Does op's rule read the sizes that come from the data (tfe_dyn_dims) at
 * run time? Elementwise ops, reductions and the reshapes do
 * (tensor/grad_rules.c); the others make shapes of their tensors' sizes. */
static bool dyn_safe(tfe_op op) {
    unsigned f = tfe_ops[op].flags;
    if (f & (F_ELEMWISE | F_REDUCTION)) return true;
    return op == OP_SOFTMAX || op == OP_LOG_SOFTMAX || op == OP_RESHAPE || op == OP_EXPAND_DIMS ||
           op == OP_SQUEEZE || op == OP_TRANSPOSE || op == OP_BROADCAST_TO || op == OP_BOOL_MASK || op == OP_CUMSUM ||
           op == OP_CONCAT || op == OP_GATHER;
}

int tfe_grad_step(const tfe_opcall *c, tfe_tensor *const *dy_in, tfe_tensor *const *dyflag,
                  const bool *skip, tfe_tensor **dx, tfe_tensor **none) {
    *none = NULL;
    for (int i = 0; i < c->nin; i++) dx[i] = NULL;
    tfe_grad_fn rule = tfe_grads[c->op];
    if (!rule || (tfe_ops[c->op].flags & F_NODIFF)) return 0;
    /* ops have nout <= 32 (split's sections are counted in at->ints[32]) */
    tfe_tensor *dy[32];
    bool made[32] = {false}, any = false;
    for (int j = 0; j < c->nout; j++) any |= (dy[j] = dy_in[j]) != NULL;
    if (!any) return 0;
    int rc = 0;
    /* where every output's gradient is none, what the rule makes is none too */
    tfe_tensor *all = tfe_grad_none_all(c->nout, dy_in, dyflag);
    for (int j = 0; j < c->nout && !rc; j++) {
        /* an output nobody used gets zeros, as does a none beside a real one */
        if (dy[j] && !(dyflag && dyflag[j] && !all)) continue;
        if (!(dy[j] = dy[j] ? tfe_grad_flag_fill(dyflag[j], dy[j], 0.0) : tfe_filled_like(c->out[j], 0.0))) rc = -1;
        else made[j] = true;
    }
    for (int i = 0; i < c->nin; i++) dx[i] = skip && skip[i] ? TFE_GRAD_SKIP : NULL;
    if (!rc && tfe_dyn_dims_hook && !dyn_safe(c->op)) {
        /* a rule that makes shapes of its tensors' traced sizes: where some
         * come from the data (x[mask]), the trace reads it as a value, so it
         * is for this call's data (tensor/grad_rules.c, baked) */
        for (int i = 0; i < c->nin; i++)
            if (tfe_dyn_dims(c->in[i]) && tfe_value_read_hook) tfe_value_read_hook(c->in[i]);
        for (int j = 0; j < c->nout; j++)
            if (tfe_dyn_dims(c->out[j]) && tfe_value_read_hook) tfe_value_read_hook(c->out[j]);
    }
    if (!rc) rc = rule(c, c->out, dy, dx);
    for (int i = 0; i < c->nin; i++) {
        if (dx[i] == TFE_GRAD_SKIP) dx[i] = NULL;
        if (!dx[i]) continue;
        if (rc) {
            tensor_decref(dx[i]);
            dx[i] = NULL;
            continue;
        }
        if (all) { /* -0.0s where none: what adds nothing */
            tfe_tensor *m = tfe_grad_flag_fill(all, dx[i], -0.0);
            tensor_decref(dx[i]);
            if (!(dx[i] = m)) rc = -1;
            continue;
        }
        if (tfe_grad_place(&dx[i], c->in[i])) rc = -1;
    }
    for (int j = 0; j < c->nout; j++)
        if (made[j]) tensor_decref(dy[j]);
    if (rc) {
        for (int i = 0; i < c->nin; i++)
            if (dx[i]) {
                tensor_decref(dx[i]);
                dx[i] = NULL;
            }
        if (all) tensor_decref(all);
        return -1;
    }
    *none = all;
    return 0;
}
