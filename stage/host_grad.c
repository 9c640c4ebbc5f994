/* host_grad.c — gradients through @host calls (TensorFlow's py_function is
 * differentiable the same way): the backward of a host call is the gradient
 * of the host function, taken eagerly. It calls the function again on the
 * same inputs under a fresh tape and takes the vector-Jacobian product of
 * its result with the result's gradient. Inside a trace (a backward graph,
 * or a tape inside a staged function) that computation is itself a host
 * call, to `f.vjp`, recorded as a host node: it runs at every call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "stage/sig.h"
#include "stage/trace.h"
#include "tensor/grad.h"
#include "tensor/xalloc.h"

/* What a host call calls: the callable and its arguments' templates, whose
 * number/tensor leaves are the call's inputs (as a G_HOST node's). An
 * object, so that `f.vjp` builtins (which hold it as self) own it. */
typedef struct HostFn {
    Object o;
    Value f;
    HostArg *hargs;
    int nhargs, nhkw;
    Str **kwnames;
    char *vjp_name;      /* "f.vjp" */
} HostFn;

static void hostfn_free(Obj *o)
{
    HostFn *h = (HostFn *)o;
    value_decref(h->f);
    for (int a = 0; a < h->nhargs; a++) value_decref(h->hargs[a].v);
    free(h->hargs);
    for (int a = 0; a < h->nhkw; a++) value_decref(v_obj(V_STR, h->kwnames[a]));
    free(h->kwnames);
    free(h->vjp_name);
    free(h);
}

static char *hostfn_repr(Obj *o)
{
    char buf[300];
    snprintf(buf, sizeof buf, "<%s>", ((HostFn *)o)->vjp_name);
    return xstrdup(buf);
}

static const ObjectClass hostfn_class = {.name = "host_vjp", .free = hostfn_free, .repr = hostfn_repr};

static const char *callable_name(Value f)
{
    if (f.kind == V_FN) return ((Closure *)f.u.o)->name;
    if (f.kind == V_BUILTIN) return ((Builtin *)f.u.o)->name;
    return "host";
}

static HostFn *hostfn_new(Value f, const HostArg *hargs, int nhargs, int nhkw, Str *const *kwnames)
{
    HostFn *h = xcalloc(1, sizeof *h);
    h->o.h.refcount = 1;
    h->o.h.kind = V_OBJECT;
    h->o.cls = &hostfn_class;
    value_incref(f);
    h->f = f;
    h->nhargs = nhargs;
    h->hargs = xmalloc(sizeof *h->hargs * (size_t)(nhargs ? nhargs : 1));
    for (int a = 0; a < nhargs; a++) {
        h->hargs[a] = hargs[a];
        value_incref(h->hargs[a].v);
    }
    h->nhkw = nhkw;
    h->kwnames = xmalloc(sizeof *h->kwnames * (size_t)(nhkw ? nhkw : 1));
    for (int a = 0; a < nhkw; a++) {
        kwnames[a]->h.refcount++;
        h->kwnames[a] = kwnames[a];
    }
    const char *nm = callable_name(f);
    size_t len = strlen(nm) + 5;
    h->vjp_name = xmalloc(len);
    snprintf(h->vjp_name, len, "%s.vjp", nm);
    return h;
}

static int nleaves_of(const HostFn *h)
{
    int n = 0;
    for (int a = 0; a < h->nhargs; a++) n += h->hargs[a].nleaves;
    return n;
}

/* The gradient of h's result, weighted by dy, with respect to leaf k, computed
 * now: h's function called again under a tape of its own. New ref in *dx
 * (zeros when the result does not depend on it), or -1 with an error raised. */
static int vjp_now(Interp *I, HostFn *h, int k, tfe_tensor *const *leaves, tfe_tensor *dy, tfe_tensor **dx)
{
    int nl = nleaves_of(h), rc = 0, kk = 0;
    tfe_tensor **own = xmalloc(sizeof *own * (size_t)(nl ? nl : 1));
    /* the leaves themselves, so that a tape outside sees how the gradient
     * depends on them (higher order); one passed twice gets a second
     * identity (each leaf's gradient is its own) */
    for (int i = 0; i < nl; i++) {
        bool dup = false;
        for (int j = 0; j < i && !dup; j++) dup = leaves[j] == leaves[i];
        own[i] = dup ? tensor_alias(leaves[i]) : (tensor_incref(leaves[i]), leaves[i]);
    }
    Value *args = xcalloc((size_t)(h->nhargs ? h->nhargs : 1), sizeof *args);
    for (int a = 0; a < h->nhargs; a++) {
        if (h->hargs[a].nleaves || h->hargs[a].v.kind == V_LIST || h->hargs[a].v.kind == V_RECORD)
            args[a] = sig_rebuild(h->hargs[a].v, own, &kk, false, 0);
        else {
            args[a] = h->hargs[a].v;
            value_incref(args[a]);
        }
    }
    tfe_tape *tape = tfe_tape_new(false);
    tfe_tape_push(tape);
    tfe_tape_watch(tape, own[k]);
    int argc = h->nhargs - h->nhkw;
    Value r = v_nil();
    if (tfe_tracer) tfe_tracer->suspended++; /* the function itself, not a node for it */
    rc = call_value(I, h->f, argc, args, h->nhkw, h->kwnames, args + argc, &r);
    if (tfe_tracer) tfe_tracer->suspended--;
    tfe_tensor *target = NULL;
    if (!rc) {
        tfe_tensor *y = value_to_tensor(r);
        if (!y) rc = raise_at(I, I->cur_loc, "%s(), called from staged code, must return a tensor, a number or nil",
                              callable_name(h->f));
        else {
            target = tfe_binary(OP_MUL, y, dy);
            tensor_decref(y);
            if (!target) rc = raise_at(I, I->cur_loc, "%s", tfe_error_msg());
        }
    }
    tfe_tape_pop(tape);
    *dx = NULL;
    if (!rc) {
        tfe_tensor *g = NULL;
        if (tfe_tape_gradient(tape, target, 1, &own[k], &g)) rc = raise_at(I, I->cur_loc, "%s", tfe_error_msg());
        else *dx = g;
    }
    tfe_tape_free(tape);
    if (target) tensor_decref(target);
    value_decref(r);
    for (int a = 0; a < h->nhargs; a++) value_decref(args[a]);
    free(args);
    for (int i = 0; i < nl; i++) tensor_decref(own[i]);
    free(own);
    return rc;
}

/* f.vjp(self, leaf0, ..., leafN-1, dy): the gradient with respect to the leaf
 * whose index is the builtin's data. */
static int bi_vjp(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwnames, const Value *kwvals,
                  Value *out, void *data)
{
    (void)nkw, (void)kwnames, (void)kwvals;
    HostFn *h = (HostFn *)argv[0].u.o;
    int nl = nleaves_of(h), k = (int)(intptr_t)data;
    if (argc != nl + 2) return raise_at(I, I->cur_loc, "%s: wrong number of arguments", h->vjp_name);
    tfe_tensor **lv = xmalloc(sizeof *lv * (size_t)(nl + 1));
    for (int i = 0; i <= nl; i++) lv[i] = value_to_tensor(argv[1 + i]);
    tfe_tensor *dx = NULL;
    int rc = vjp_now(I, h, k, lv, lv[nl], &dx);
    for (int i = 0; i <= nl; i++)
        if (lv[i]) tensor_decref(lv[i]);
    free(lv);
    if (!rc) *out = v_tensor_take(dx);
    return rc;
}

/* The gradient with respect to leaf k as a value of the trace being
 * recorded: a host call of f.vjp (so it runs at every call of the graph). */
static int vjp_traced(Interp *I, HostFn *h, int k, tfe_tensor *const *leaves, tfe_tensor *dy, tfe_tensor **dx)
{
    int nl = nleaves_of(h);
    Value f = builtin_new(h->vjp_name, bi_vjp, (void *)(intptr_t)k);
    Builtin *b = (Builtin *)f.u.o;
    h->o.h.refcount++;
    b->self = v_obj(V_OBJECT, h);
    b->effect = 2;
    Value *argv = xmalloc(sizeof *argv * (size_t)(nl + 1));
    for (int i = 0; i <= nl; i++) {
        tfe_tensor *t = i < nl ? leaves[i] : dy;
        tensor_incref(t);
        argv[i] = v_tensor_take(t);
    }
    Value r = v_nil();
    int rc = trace_host_call(I, f, nl + 1, argv, 0, NULL, NULL, &r);
    for (int i = 0; i <= nl; i++) value_decref(argv[i]);
    free(argv);
    value_decref(f);
    *dx = NULL;
    if (!rc) *dx = value_to_tensor(r);
    value_decref(r);
    return rc;
}

/* dx[i] for each float leaf i (NULL entries stay NULL for the others). */
static int vjp_all(Interp *I, HostFn *h, tfe_tensor *const *leaves, tfe_tensor *dy, tfe_tensor **dx)
{
    int nl = nleaves_of(h);
    bool traced = trace_recording();
    for (int i = 0; i < nl; i++) {
        if (dx[i] == TFE_GRAD_SKIP || !dtype_is_float(leaves[i]->dtype)) continue;
        if (traced ? vjp_traced(I, h, i, leaves, dy, &dx[i]) : vjp_now(I, h, i, leaves, dy, &dx[i])) return -1;
    }
    return 0;
}

bool host_is_differentiable(Value f)
{
    return f.kind == V_FN || (f.kind == V_BUILTIN && ((Builtin *)f.u.o)->fn == bi_vjp);
}

bool host_node_differentiable(const GNode *n)
{
    if (n->kind != G_HOST || n->host_nil || (n->sync && n->sync->env)) return false;
    return host_is_differentiable(n->obj);
}

int host_node_vjp(Interp *I, const GNode *n, tfe_tensor *const *in, tfe_tensor *dy, tfe_tensor **dx)
{
    HostFn *h = hostfn_new(n->obj, n->hargs, n->nhargs, n->nhkw, n->hkwnames);
    Loc saved = I->cur_loc;
    I->cur_loc = n->loc;
    int rc = vjp_all(I, h, in, dy, dx);
    I->cur_loc = saved;
    value_decref(v_obj(V_OBJECT, h));
    return rc;
}

/* --- a tape entry for a host call made while tracing --------------------------------------- */

typedef struct HostGrad {
    tfe_custom_grad base;
    Interp *I;
    HostFn *h;
    Loc loc;
} HostGrad;

static int hostgrad_backward(tfe_custom_grad *self, int nin, tfe_tensor *const *in, int nout,
                             tfe_tensor *const *out, tfe_tensor *const *dy, tfe_tensor **dx)
{
    (void)nin, (void)nout, (void)out;
    HostGrad *g = (HostGrad *)self;
    Loc saved = g->I->cur_loc;
    g->I->cur_loc = g->loc;
    int rc = vjp_all(g->I, g->h, in, dy[0], dx);
    g->I->cur_loc = saved;
    if (rc && g->I->has_error) { /* the tape reports the error */
        tfe_error_set("%s", g->I->err_msg);
        error_clear(g->I);
    }
    return rc;
}

static void hostgrad_release(tfe_custom_grad *self)
{
    HostGrad *g = (HostGrad *)self;
    value_decref(v_obj(V_OBJECT, g->h));
    free(g);
}

void host_record_tape_entry(Interp *I, Loc loc, Value f, const HostArg *hargs, int nhargs, int nhkw,
                            Str *const *kwnames, int nleaves, tfe_tensor *const *leaves, tfe_tensor *out)
{
    HostGrad *g = xcalloc(1, sizeof *g);
    g->base.backward = hostgrad_backward;
    g->base.release = hostgrad_release;
    g->I = I;
    g->loc = loc;
    g->h = hostfn_new(f, hargs, nhargs, nhkw, kwnames);
    tfe_tape_record_custom(&g->base, nleaves, leaves, 1, &out);
    if (g->base.refcount == 0) hostgrad_release(&g->base); /* no tape tracks its inputs */
}

/* --- the result of a host call made while tracing, under a tape outside the trace ---------- */

typedef struct Identity { tfe_custom_grad base; } Identity;

static int identity_backward(tfe_custom_grad *self, int nin, tfe_tensor *const *in, int nout,
                             tfe_tensor *const *out, tfe_tensor *const *dy, tfe_tensor **dx)
{
    (void)self, (void)nin, (void)in, (void)nout, (void)out;
    if (dx[0] != TFE_GRAD_SKIP) {
        tensor_incref(dy[0]);
        dx[0] = dy[0];
    }
    return 0;
}

static void identity_release(tfe_custom_grad *self) { free(self); }

void host_record_identity(tfe_tensor *from, tfe_tensor *to)
{
    Identity *g = xcalloc(1, sizeof *g);
    g->base.backward = identity_backward;
    g->base.release = identity_release;
    tfe_tape_record_custom(&g->base, 1, &from, 1, &to);
    if (g->base.refcount == 0) identity_release(&g->base);
}
