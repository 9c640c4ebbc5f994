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
#include "stage/check.h"
#include "stage/host_reads.h"
#include "stage/sig.h"
#include "stage/trace.h"
#include "tensor/grad.h"
#include "util/xalloc.h"

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
    bool has_result;     /* output 0 is the call's result */
    int *after, nafter;  /* then the leaves of these arguments after the call */
    int nouts;
    struct HostCtx *ctx; /* outside bindings it may read (HostSync.ctx; owned) */
    int nctx;
    /* by leaf, the first leaf that is the same tensor (set by vjp_all, so a
     * traced vjp run later groups the places as the trace did); NULL: none */
    int *grp;
    /* traced into a graph (a tape made inside a staged function): the outside
     * bindings holding float tensors and the variables the body read, not
     * inputs of the node, whose gradient that tape may take; a run of the
     * vjp node that finds the function reading one (it did not when traced)
     * is an error, as the trace's gradient for it does not go through the
     * function (stage/host_reads.h). sus_done: they were gathered */
    HostSuspect *sus;
    int nsus;
    bool sus_done;
    /* its number among the host calls of a cached call's graph run (the
     * backward's run of the function sees what that call read: HostSnap.call),
     * or -1 */
    int call;
    /* the global random state its forward call began with (a tape entry of
     * a call made while tracing), so that the run again for its gradient
     * draws what that call drew: known always for an entry on a tape
     * outside the trace (one call's), only while trace rng_trace records
     * for one on a tape inside it (the vjp node of the graph, run by later
     * calls, does not know their forward's state) */
    bool rng_known;
    uint64_t rng_key, rng_counter;
    uint32_t rng_trace; /* 0: outside */
    HostRng *rng_cell;  /* (one inside) its node's, for the graph's runs: HostRng */
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
    free(h->after);
    for (int i = 0; i < h->nctx; i++) {
        if (h->ctx[i].env) env_decref(h->ctx[i].env);
        value_decref(h->ctx[i].tmpl);
    }
    free(h->ctx);
    free(h->grp);
    for (int i = 0; i < h->nsus; i++) {
        if (h->sus[i].env) env_decref(h->sus[i].env);
        if (h->sus[i].var) value_decref(v_obj(V_OBJECT, h->sus[i].var));
    }
    free(h->sus);
    host_rng_decref(h->rng_cell);
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

static HostFn *hostfn_new(Value f, const HostArg *hargs, int nhargs, int nhkw, Str *const *kwnames, const GNode *n)
{
    HostFn *h = object_new(sizeof *h, &hostfn_class);
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
    h->call = -1;
    h->has_result = !n->host_nil;
    h->nouts = n->nout;
    h->after = xmalloc(sizeof *h->after * (size_t)(n->host->sync ? n->host->sync->nafter + 1 : 1));
    for (int i = 0; n->host->sync && i < n->host->sync->nafter; i++)
        if (host_after_reads(&n->host->sync->after[i])) h->after[h->nafter++] = n->host->sync->after[i].arg;
    h->nctx = n->host->sync ? n->host->sync->nctx : 0;
    h->ctx = h->nctx ? xmalloc(sizeof *h->ctx * (size_t)h->nctx) : NULL;
    for (int i = 0; i < h->nctx; i++) {
        h->ctx[i] = n->host->sync->ctx[i];
        if (h->ctx[i].env) h->ctx[i].env->h.refcount++;
        value_incref(h->ctx[i].tmpl);
    }
    return h;
}

/* A copy of h for a call of the vjp itself: one result. */
static HostFn *hostfn_of_vjp(Value f, const HostArg *hargs, int nhargs)
{
    GNode n = {0};
    HostNode hn = {0};
    n.host = &hn;
    n.nout = 1;
    return hostfn_new(f, hargs, nhargs, 0, NULL, &n);
}

static tfe_tensor *zeros_like(const tfe_tensor *t) { return tfe_filled_like(t, 0.0); }

/* sum of out[j] * dy[j] over the outputs: what the tape differentiates. */
static int weighted(Interp *I, HostFn *h, Value r, const Value *args, tfe_tensor *const *dy, tfe_tensor **target)
{
    Leaves outs = {0};
    SigBuf sb = {0};
    if (h->has_result) {
        tfe_tensor *y = value_to_tensor(r);
        if (!y) return raise_at(I, I->cur_loc, "%s(), called from staged code, must return a tensor, a number or nil",
                                callable_name(h->f));
        leaves_push(&outs, y);
    }
    for (int i = 0; i < h->nafter; i++) sig_flatten(args[h->after[i]], &sb, &outs, SIG_OUTPUT);
    sig_free(&sb);
    int rc = 0;
    if (outs.n != h->nouts)
        rc = raise_at(I, I->cur_loc, "%s() changed a list or record passed to it in another way than when its "
                                     "gradient was traced", callable_name(h->f));
    tfe_tensor *acc = NULL;
    for (int j = 0; !rc && j < outs.n; j++) {
        if (!dy[j]) continue;
        tfe_tensor *t = tfe_binary(OP_MUL, outs.t[j], dy[j]);
        if (t) {
            tfe_attrs at;
            tfe_attrs_init(&at);
            at.naxes = -1;
            tfe_tensor *s = tfe_call1(OP_SUM, 1, &t, &at);
            tensor_decref(t);
            t = s;
        }
        if (t && acc) {
            tfe_tensor *u = tfe_binary(OP_ADD, acc, t);
            tensor_decref(t);
            tensor_decref(acc);
            t = u;
        }
        acc = t;
        if (!acc) rc = raise_at(I, I->cur_loc, "%s", tfe_error_msg());
    }
    leaves_free(&outs);
    if (rc && acc) tensor_decref(acc);
    *target = rc ? NULL : acc;
    return rc;
}

static int nleaves_of(const HostFn *h)
{
    int n = 0;
    for (int a = 0; a < h->nhargs; a++) n += h->hargs[a].nleaves;
    for (int i = 0; i < h->nctx; i++) n += h->ctx[i].nleaves;
    return n;
}

/* The gradient of h's result, weighted by dy, with respect to leaf k, computed
 * now: h's function called again under a tape of its own. The leaves of k's
 * group (h->grp: one tensor passed in several places) are one tensor there,
 * so the gradient covers every place, its uses added in the function's
 * order, as an eager tape adds them. init: leaf k's gradient so far (NULL:
 * none), which the function's uses of it add to one by one, as an eager
 * tape's would (bit for bit its sum). New ref in *dx (init, or zeros, when
 * the result does not depend on it), or -1 with an error raised. */
static int vjp_now(Interp *I, HostFn *h, int k, tfe_tensor *const *leaves, tfe_tensor *const *dy, tfe_tensor *init,
                   tfe_tensor **dx)
{
    int nl = nleaves_of(h), rc = 0, kk = 0;
    tfe_tensor **own = xmalloc(sizeof *own * (size_t)(nl ? nl : 1));
    /* the leaves themselves, so that a tape outside sees how the gradient
     * depends on them (higher order); the leaves of a group are its one
     * tensor; one that is the same tensor as an earlier leaf of another
     * group gets a second identity (its gradient is its own) */
    for (int i = 0; i < nl; i++) {
        int g = h->grp ? h->grp[i] : i;
        bool dup = false;
        for (int j = 0; j < i && !dup && g == i; j++) dup = leaves[j] == leaves[i];
        if (g != i) own[i] = own[g], tensor_incref(own[g]);
        else own[i] = dup ? tensor_alias(leaves[i]) : (tensor_incref(leaves[i]), leaves[i]);
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
    /* the outside bindings and variables it may read hold this call's
     * values (restored after) */
    Value *saved = xcalloc((size_t)(h->nctx ? h->nctx : 1), sizeof *saved);
    for (int i = 0; i < h->nctx; i++) {
        if (!h->ctx[i].env) {
            tfe_tensor *old = variable_peek(h->ctx[i].tmpl);
            tensor_incref(old);
            saved[i] = v_tensor_take(old);
            tensor_incref(own[kk]);
            variable_replace_take(h->ctx[i].tmpl, own[kk++]);
            continue;
        }
        Value *slot = &h->ctx[i].env->slots[h->ctx[i].slot];
        saved[i] = *slot;
        *slot = sig_rebuild(h->ctx[i].tmpl, own, &kk, false, 0);
    }
    /* an output's gradient that is the very tensor of a leaf (an optimized
     * graph hands `1 * x` on as x) gets an identity of its own, else the
     * tape below would differentiate through it too; a tape outside still
     * sees it as that tensor (higher order) */
    tfe_tensor **dyl = xcalloc((size_t)h->nouts + 1, sizeof *dyl);
    for (int j = 0; j < h->nouts; j++) {
        bool same = false;
        for (int i = 0; dy[j] && i < nl && !same; i++) same = dy[j] == leaves[i] || dy[j] == own[i];
        dyl[j] = !dy[j] ? NULL : same ? tensor_alias(dy[j]) : (tensor_incref(dy[j]), dy[j]);
        if (same && tfe_tapes_active) host_record_identity(dy[j], dyl[j]);
    }
    /* the global random stream stays where the forward left it: an eager
     * backward draws nothing */
    uint64_t rkey, rcounter;
    tfe_random_state(&rkey, &rcounter);
    /* the function draws what its forward call drew, where that call's
     * random state is known (eager code's tape kept the draws); where it is
     * not, a function that draws is an error below, not other draws */
    uint64_t fkey, fcounter;
    bool rng_known = host_snaps_rng(I->host_snaps, I->host_nsnaps, h->call, &fkey, &fcounter);
    if (!rng_known && h->rng_known && (!h->rng_trace || (I->tracer && I->tracer->id == h->rng_trace)))
        rng_known = true, fkey = h->rng_key, fcounter = h->rng_counter;
    else if (!rng_known && !I->tracer && h->rng_cell && h->rng_cell->valid) /* a run of the graph */
        rng_known = true, fkey = h->rng_cell->key, fcounter = h->rng_cell->counter;
    if (rng_known) tfe_random_restore(fkey, fcounter);
    tfe_random_state(&fkey, &fcounter);
    /* and the outside values it read in this call that its node does not
     * take (stage/host_reads.h), swapped back after */
    host_snaps_swap(I->host_snaps, I->host_nsnaps, h->call);
    tfe_tape *tape = tfe_tape_new(false);
    tfe_tape_push(tape);
    tfe_tape_watch(tape, own[k]);
    int argc = h->nhargs - h->nhkw;
    Value r = v_nil();
    if (I->tracer) I->tracer->suspended++; /* the function itself, not a node for it */
    /* a vjp node of a graph (not the trace): does the function read what
     * the trace's tapes may differentiate with respect to, through it,
     * where the call that traced did not (h->sus)? */
    HostReads w;
    bool watch = !I->tracer && h->nsus;
    Loc call_loc = I->cur_loc; /* (the host call's) */
    if (watch) host_reads_begin_suspects(I, &w, callable_name(h->f), h->ctx, h->nctx, h->sus, h->nsus);
    rc = call_value(I, h->f, argc, args, h->nhkw, h->kwnames, args + argc, &r);
    if (watch) {
        host_reads_end(I, &w);
        if (!rc && w.hit) {
            I->stage_limit = true;
            rc = raise_at(I, call_loc, "the gradient taken inside this staged function through %s(), a @host call: %s",
                          callable_name(h->f), w.hit);
        }
        free(w.hit);
    }
    if (I->tracer) I->tracer->suspended--;
    host_snaps_swap(I->host_snaps, I->host_nsnaps, h->call);
    uint64_t akey, acounter;
    tfe_random_state(&akey, &acounter);
    tfe_random_restore(rkey, rcounter);
    if (!rc && !rng_known && (akey != fkey || acounter != fcounter)) {
        I->stage_limit = true;
        rc = raise_at(I, call_loc, "the gradient through %s(), a @host function that draws random numbers, taken in "
                                   "a staged function: the gradient's run of it again cannot draw what this call's "
                                   "forward drew, so it would differ from eager code's; draw them before the call and "
                                   "pass them to %s() as an argument",
                      callable_name(h->f), callable_name(h->f));
    }
    for (int i = 0; i < h->nctx; i++) {
        if (!h->ctx[i].env) {
            variable_replace_take(h->ctx[i].tmpl, value_to_tensor(saved[i]));
            value_decref(saved[i]);
            continue;
        }
        Value *slot = &h->ctx[i].env->slots[h->ctx[i].slot];
        value_decref(*slot);
        *slot = saved[i];
    }
    free(saved);
    tfe_tensor *target = NULL;
    if (!rc) rc = weighted(I, h, r, args, dyl, &target);
    tfe_tape_pop(tape);
    *dx = NULL;
    if (!rc && !target) /* no output has a gradient */
        *dx = init ? (tensor_incref(init), init) : zeros_like(leaves[k]);
    else if (!rc) {
        tfe_tensor *g = NULL;
        if (tfe_tape_gradient_from(tape, target, 1, &own[k], &init, &g)) rc = raise_at(I, I->cur_loc, "%s", tfe_error_msg());
        else *dx = g;
    }
    tfe_tape_free(tape);
    for (int j = 0; j < h->nouts; j++)
        if (dyl[j]) tensor_decref(dyl[j]);
    free(dyl);
    if (target) tensor_decref(target);
    value_decref(r);
    for (int a = 0; a < h->nhargs; a++) value_decref(args[a]);
    free(args);
    for (int i = 0; i < nl; i++) tensor_decref(own[i]);
    free(own);
    return rc;
}

/* f.vjp(self, leaf0, ..., leafN-1, dy[, sofar]): the gradient with respect
 * to leaf k, where the builtin's data is k * 2 + 1 when the leaf's gradient
 * so far is passed last (the result is then the total), k * 2 otherwise. */
static int bi_vjp(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwnames, const Value *kwvals,
                  Value *out, void *data)
{
    (void)nkw, (void)kwnames, (void)kwvals;
    HostFn *h = (HostFn *)argv[0].u.o;
    int nl = nleaves_of(h), k = (int)((intptr_t)data >> 1), na = nl + h->nouts;
    bool sofar = (intptr_t)data & 1;
    if (argc != na + 1 + sofar) return raise_at(I, I->cur_loc, "%s: wrong number of arguments", h->vjp_name);
    tfe_tensor **lv = xmalloc(sizeof *lv * (size_t)(na + 1));
    for (int i = 0; i < na; i++) lv[i] = value_to_tensor(argv[1 + i]);
    tfe_tensor *dx = NULL;
    tfe_tensor *init = sofar ? value_to_tensor(argv[1 + na]) : NULL;
    int rc = vjp_now(I, h, k, lv, lv + nl, init, &dx);
    if (init) tensor_decref(init);
    for (int i = 0; i < na; i++)
        if (lv[i]) tensor_decref(lv[i]);
    free(lv);
    if (!rc) *out = v_tensor_take(dx);
    return rc;
}

/* The gradient with respect to leaf k as a value of the trace being
 * recorded: a host call of f.vjp (so it runs at every call of the graph). */
static bool in_host_ctx(const HostFn *h, const Env *e, int slot, const void *var)
{
    for (int i = 0; i < h->nctx; i++)
        if (var ? !h->ctx[i].env && h->ctx[i].tmpl.u.o == var : h->ctx[i].env == e && h->ctx[i].slot == slot)
            return true;
    return false;
}

static bool holds_float(Value v)
{
    SigBuf sb = {0};
    Leaves l = {0};
    sig_flatten(v, &sb, &l, SIG_OUTPUT);
    bool fl = false;
    for (int i = 0; i < l.n && !fl; i++) fl = dtype_is_float(l.t[i]->dtype);
    leaves_free(&l);
    sig_free(&sb);
    return fl;
}

/* h->sus from the trace T: what its tapes may differentiate with respect
 * to that the node does not take (the body's reads of outside bindings
 * holding float tensors, and of trainable variables). */
static void gather_suspects(HostFn *h, Tracer *T)
{
    h->sus_done = true;
    for (int i = 0; i < T->nouts; i++) {
        Outside *o = &T->outs[i];
        if (in_host_ctx(h, o->env, o->slot, NULL) || !holds_float(o->traced)) continue;
        h->sus = xrealloc(h->sus, sizeof *h->sus * (size_t)(h->nsus + 1));
        o->env->h.refcount++;
        h->sus[h->nsus++] = (HostSuspect){o->env, o->slot, NULL};
    }
    for (int i = 0; i < T->g->n; i++) {
        const GNode *n = &T->g->nodes[i];
        if (n->kind != G_VAR_READ || in_host_ctx(h, NULL, -1, n->host->obj.u.o)) continue;
        bool seen = false;
        for (int j = 0; j < h->nsus && !seen; j++) seen = h->sus[j].var == n->host->obj.u.o;
        if (seen) continue;
        h->sus = xrealloc(h->sus, sizeof *h->sus * (size_t)(h->nsus + 1));
        value_incref(n->host->obj);
        h->sus[h->nsus++] = (HostSuspect){NULL, -1, n->host->obj.u.o};
    }
}

static int vjp_traced(Interp *I, HostFn *h, int k, tfe_tensor *const *leaves, tfe_tensor *const *dy,
                      tfe_tensor *init, tfe_tensor **dx)
{
    if (!h->sus_done && I->tracer) gather_suspects(h, I->tracer);
    int nl = nleaves_of(h), na = nl + h->nouts + (init != NULL);
    Value f = builtin_new(h->vjp_name, bi_vjp, (void *)(intptr_t)(k * 2 + (init != NULL)));
    Builtin *b = (Builtin *)f.u.o;
    h->o.h.refcount++;
    b->self = v_obj(V_OBJECT, h);
    b->effect = 2;
    Value *argv = xmalloc(sizeof *argv * (size_t)(na + 1));
    for (int i = 0; i < na; i++) {
        tfe_tensor *t = i < nl ? leaves[i] : i < nl + h->nouts ? dy[i - nl] : init;
        tensor_incref(t);
        argv[i] = v_tensor_take(t);
    }
    Value r = v_nil();
    int rc = trace_host_call(I, f, na, argv, 0, NULL, NULL, &r);
    for (int i = 0; i < na; i++) value_decref(argv[i]);
    free(argv);
    value_decref(f);
    *dx = NULL;
    if (!rc) *dx = value_to_tensor(r);
    value_decref(r);
    return rc;
}

/* dx[i] for each float leaf i (NULL entries stay NULL for the others); dy[j]
 * NULL: output j (out[j]) has no gradient. A dx[i] set on entry (other than
 * TFE_GRAD_SKIP) is leaf i's gradient so far (borrowed): dx[i] is then the
 * total, the function's contributions added to it in eager order. A leaf
 * that is the same tensor as an earlier one gets NULL: the earlier one's
 * gradient has its part. */
static int vjp_all(Interp *I, HostFn *h, tfe_tensor *const *leaves, tfe_tensor *const *out, tfe_tensor *const *dy,
                   tfe_tensor **dx)
{
    int nl = nleaves_of(h), rc = 0;
    bool traced = trace_recording(I);
    /* a host call of the vjp takes a tensor for every output's gradient */
    tfe_tensor **full = xcalloc((size_t)h->nouts + 1, sizeof *full);
    for (int j = 0; j < h->nouts; j++) {
        full[j] = dy[j] ? (tensor_incref(dy[j]), dy[j]) : traced ? zeros_like(out[j]) : NULL;
        if (traced && !full[j]) rc = -1;
    }
    /* the gradients so far, out of dx (a failure leaves NULL there, not them) */
    tfe_tensor **init = xcalloc((size_t)nl + 1, sizeof *init);
    for (int i = 0; i < nl; i++)
        if (dx[i] != TFE_GRAD_SKIP) {
            init[i] = dx[i];
            dx[i] = NULL;
        }
    /* one tensor in several places is one source, as to an eager tape: its
     * first place that wants a gradient gets the whole of it (starting from
     * the gradient so far, which only a tensor's first place has), the others
     * nothing, so each use adds to one sum in the function's order */
    free(h->grp);
    h->grp = xmalloc(sizeof *h->grp * (size_t)(nl ? nl : 1));
    for (int i = 0; i < nl; i++) {
        h->grp[i] = i;
        for (int j = 0; j < i && h->grp[i] == i; j++)
            if (leaves[j] == leaves[i]) h->grp[i] = j;
    }
    for (int i = 0; i < nl && !rc; i++) {
        if (dx[i] == TFE_GRAD_SKIP || !dtype_is_float(leaves[i]->dtype)) continue;
        bool taken = false; /* an earlier place of its tensor has it */
        for (int j = h->grp[i]; j < i && !taken; j++) taken = h->grp[j] == h->grp[i] && dx[j] != TFE_GRAD_SKIP;
        if (taken) continue;
        rc = traced ? vjp_traced(I, h, i, leaves, full, init[i], &dx[i])
                    : vjp_now(I, h, i, leaves, full, init[i], &dx[i]);
    }
    free(init);
    for (int j = 0; j < h->nouts; j++)
        if (full[j]) tensor_decref(full[j]);
    free(full);
    return rc;
}

/* What host node n calls: for a call of a vjp, the vjp's own (one result). */
static HostFn *node_hostfn(const GNode *n)
{
    if (n->host->obj.kind == V_BUILTIN && ((Builtin *)n->host->obj.u.o)->fn == bi_vjp)
        return hostfn_of_vjp(n->host->obj, n->host->hargs, n->host->nhargs);
    return hostfn_new(n->host->obj, n->host->hargs, n->host->nhargs, n->host->nhkw, n->host->hkwnames, n);
}

bool host_is_differentiable(Value f)
{
    return f.kind == V_FN || (f.kind == V_BUILTIN && ((Builtin *)f.u.o)->fn == bi_vjp);
}

static int bi_no_gradient(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwnames, const Value *kwvals,
                          Value *out, void *data);

bool host_is_gradient_call(Value f)
{
    if (f.kind != V_BUILTIN) return false;
    Builtin *b = (Builtin *)f.u.o;
    return b->fn == bi_vjp || b->fn == bi_no_gradient;
}

bool host_node_differentiable(const GNode *n)
{
    if (n->kind != G_HOST || n->nout == 0 || (n->host->sync && n->host->sync->env)) return false;
    return host_is_differentiable(n->host->obj);
}

int host_node_vjp(Interp *I, const GNode *n, int call, tfe_tensor *const *in, tfe_tensor *const *out,
                  tfe_tensor *const *dy, tfe_tensor **dx)
{
    HostFn *h = node_hostfn(n);
    h->call = call;
    Loc saved = I->cur_loc;
    I->cur_loc = n->loc;
    int rc = vjp_all(I, h, in, out, dy, dx);
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
    (void)nin, (void)nout;
    HostGrad *g = (HostGrad *)self;
    Loc saved = g->I->cur_loc;
    g->I->cur_loc = g->loc;
    int rc = vjp_all(g->I, g->h, in, out, dy, dx);
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

void host_record_tape_entry(Interp *I, const GNode *n, Loc loc, int nleaves, tfe_tensor *const *leaves, int nout,
                            tfe_tensor *const *outs, const uint64_t *rng, uint32_t rng_trace)
{
    HostGrad *g = xcalloc(1, sizeof *g);
    g->base.backward = hostgrad_backward;
    g->base.release = hostgrad_release;
    g->base.totals = true; /* vjp_all adds to the gradients so far */
    g->I = I;
    g->loc = loc;
    g->h = node_hostfn(n);
    if (rng) {
        g->h->rng_known = true;
        g->h->rng_key = rng[0], g->h->rng_counter = rng[1];
        g->h->rng_trace = rng_trace;
    }
    if (rng_trace && n->host->rng) {
        g->h->rng_cell = n->host->rng;
        g->h->rng_cell->refs++;
    }
    tfe_tape_record_custom(&g->base, nleaves, leaves, nout, outs);
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

/* --- a gradient that must be zero ------------------------------------------------------------- */

/* no_gradient(g, name): an error when g is not all zeros. data: the binding's name. */
static int bi_no_gradient(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwnames, const Value *kwvals,
                          Value *out, void *data)
{
    (void)nkw, (void)kwnames, (void)kwvals;
    *out = v_nil();
    tfe_tensor *g = argc == 1 ? value_to_tensor(argv[0]) : NULL;
    bool zero = true;
    for (int64_t i = 0; g && g->storage && i < tensor_numel(g) && zero; i++) zero = tensor_get_f64(g, i) == 0.0;
    if (g) tensor_decref(g);
    if (zero) return 0;
    I->stage_limit = true;
    return raise_at(I, I->cur_loc, "gradients through '%s', which a @host call changed, are not supported (pass it "
                                   "to the function and return the new value)", (const char *)data);
}

int host_check_no_gradient(Interp *I, Loc loc, const char *name, tfe_tensor *g)
{
    Value f = builtin_new("no_gradient", bi_no_gradient, (void *)name);
    ((Builtin *)f.u.o)->effect = 1;
    tensor_incref(g);
    Value arg = v_tensor_take(g);
    Loc saved = I->cur_loc;
    I->cur_loc = loc;
    Value r = v_nil();
    int rc = trace_recording(I) ? trace_host_call(I, f, 1, &arg, 0, NULL, NULL, &r)
                               : bi_no_gradient(I, 1, &arg, 0, NULL, NULL, &r, (void *)name);
    I->cur_loc = saved;
    value_decref(r);
    value_decref(arg);
    value_decref(f);
    return rc;
}
