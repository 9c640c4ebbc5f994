/* graph_host.c — the interpreter as the graph core's host (graph/host.h):
 * the payload of G_HOST and G_VAR_READ nodes (stage/host_node.h) made,
 * copied, compared, printed and freed; host calls and variable reads run
 * back in the interpreter; run-time errors raised with the call frames an
 * eager run would have. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "graph/exec.h"
#include "graph/host.h"
#include "stage/check.h"
#include "stage/host_node.h"
#include "stage/host_reads.h"
#include "stage/sig.h"
#include "stage/staged.h"
#include "stage/trace.h"
#include "util/profile.h"
#include "util/xalloc.h"

/* --- the bindings kept in step with @host calls ------------------------------------------- */

static char *bytes_dup(const char *b, size_t n)
{
    char *d = xmalloc(n ? n : 1);
    mem_copy(d, b, n);
    return d;
}

HostSync *host_sync_copy(const HostSync *s)
{
    if (!s) return NULL;
    HostSync *d = xmalloc(sizeof *d);
    *d = *s;
    if (d->env) d->env->h.refcount++;
    value_incref(d->tmpl);
    d->sig = s->sig ? bytes_dup(s->sig, s->nsig) : NULL;
    d->after = s->nafter ? xmalloc(sizeof *d->after * (size_t)s->nafter) : NULL;
    for (int i = 0; i < s->nafter; i++) {
        d->after[i] = s->after[i];
        d->after[i].sig = bytes_dup(s->after[i].sig, s->after[i].nsig);
        if (d->after[i].env) d->after[i].env->h.refcount++;
    }
    d->ctx = s->nctx ? xmalloc(sizeof *d->ctx * (size_t)s->nctx) : NULL;
    for (int i = 0; i < s->nctx; i++) {
        d->ctx[i] = s->ctx[i];
        if (d->ctx[i].env) d->ctx[i].env->h.refcount++;
        value_incref(d->ctx[i].tmpl);
    }
    return d;
}

void host_sync_free(HostSync *s)
{
    if (!s) return;
    if (s->env) env_decref(s->env);
    value_decref(s->tmpl);
    free(s->sig);
    for (int i = 0; i < s->nafter; i++) {
        free(s->after[i].sig);
        if (s->after[i].env) env_decref(s->after[i].env);
    }
    free(s->after);
    for (int i = 0; i < s->nctx; i++) {
        if (s->ctx[i].env) env_decref(s->ctx[i].env);
        value_decref(s->ctx[i].tmpl);
    }
    free(s->ctx);
    free(s);
}

bool host_sync_same(const HostSync *a, const HostSync *b)
{
    if (!a || !b) return a == b;
    if (a->env != b->env || a->slot != b->slot || a->write != b->write || a->nsig != b->nsig ||
        mem_cmp(a->sig, b->sig, a->nsig) || a->nafter != b->nafter || a->nctx != b->nctx)
        return false;
    for (int i = 0; i < a->nctx; i++)
        if (a->ctx[i].env != b->ctx[i].env || a->ctx[i].slot != b->ctx[i].slot || a->ctx[i].nleaves != b->ctx[i].nleaves ||
            (!a->ctx[i].env && a->ctx[i].tmpl.u.o != b->ctx[i].tmpl.u.o))
            return false;
    for (int i = 0; i < a->nafter; i++) {
        const HostAfter *x = &a->after[i], *y = &b->after[i];
        if (x->arg != y->arg || x->outside != y->outside || x->nleaves != y->nleaves || x->nsig != y->nsig ||
            x->param != y->param || x->env != y->env || x->slot != y->slot ||
            mem_cmp(x->sig, y->sig, x->nsig))
            return false;
    }
    return true;
}


/* --- a node's payload ---------------------------------------------------------------------- */

void host_rng_note(HostRng *r)
{
    if (!r) return;
    tfe_random_state(&r->key, &r->counter);
    r->valid = true;
}

void host_rng_decref(HostRng *r)
{
    if (r && --r->refs == 0) free(r);
}

static HostNode *hnode_new(void)
{
    HostNode *h = xcalloc(1, sizeof *h);
    h->obj = v_nil();
    h->rng = xcalloc(1, sizeof *h->rng);
    h->rng->refs = 1;
    return h;
}

static void hnode_free(HostNode *h)
{
    value_decref(h->obj);
    for (int a = 0; a < h->nhargs; a++) value_decref(h->hargs[a].v);
    free(h->hargs);
    for (int a = 0; a < h->nhkw; a++) value_decref(v_obj(V_STR, h->hkwnames[a]));
    free(h->hkwnames);
    host_sync_free(h->sync);
    host_rng_decref(h->rng);
    free(h);
}

/* A copy with its own references: callable, arguments, keyword names. */
static HostNode *hnode_copy(const HostNode *o)
{
    HostNode *n = xcalloc(1, sizeof *n);
    n->obj = o->obj;
    value_incref(n->obj);
    n->nhargs = o->nhargs;
    n->dims_fixed = o->dims_fixed;
    n->rng = o->rng;
    if (n->rng) n->rng->refs++;
    if (o->nhargs) {
        n->hargs = xmalloc(sizeof *n->hargs * (size_t)o->nhargs);
        for (int a = 0; a < o->nhargs; a++) {
            n->hargs[a] = o->hargs[a];
            value_incref(n->hargs[a].v);
        }
    }
    n->sync = host_sync_copy(o->sync);
    n->nhkw = o->nhkw;
    if (o->nhkw) {
        n->hkwnames = xmalloc(sizeof *n->hkwnames * (size_t)o->nhkw);
        for (int a = 0; a < o->nhkw; a++) {
            n->hkwnames[a] = o->hkwnames[a];
            n->hkwnames[a]->h.refcount++;
        }
    }
    return n;
}

/* graph_same_but_dims: the same variable; the same callable with the same
 * non-leaf arguments and bindings. */
static bool hnode_same(const GNode *gx, const GNode *gy)
{
    const HostNode *x = gx->host, *y = gy->host;
    if (gx->kind == G_VAR_READ) return x->obj.u.o == y->obj.u.o;
    if (x->obj.u.o != y->obj.u.o || x->nhargs != y->nhargs || x->nhkw != y->nhkw || x->dims_fixed != y->dims_fixed)
        return false;
    for (int k = 0; k < x->nhargs; k++) {
        int err = 0;
        if (x->hargs[k].nleaves != y->hargs[k].nleaves) return false;
        if (!x->hargs[k].nleaves && (!value_equal(x->hargs[k].v, y->hargs[k].v, &err) || err)) return false;
    }
    return host_sync_same(x->sync, y->sync);
}

static void frames_release(GFrames *f)
{
    for (int i = 0; i < f->n; i++)
        if (f->f[i].call_loc.src) source_decref(f->f[i].call_loc.src);
}

static const char *frames_name(const GFrames *f) { return f->f[f->n - 1].fname; }

/* --- printing (graph/graph_print.c) ------------------------------------------------------- */

static void bprintf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(Buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    buf_grow(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* Append a malloc'd string and free it. */
static void btake(Buf *b, char *s)
{
    buf_puts(b, s ? s : "<?>");
    free(s);
}

static const char *callable_name(Value f)
{
    const char *s = NULL;
    if (f.kind == V_BUILTIN) s = ((const Builtin *)f.u.o)->name;
    else if (f.kind == V_FN) s = ((const Closure *)f.u.o)->name;
    return s ? s : "<fn>";
}

/* host f(args): leaves of structured arguments are the node's inputs. */
static void put_host_call(Buf *b, const Graph *g, const GNode *n)
{
    if (n->host->sync && n->host->sync->env) { /* an outside binding kept in step with @host calls */
        bprintf(b, "%s %s", n->host->sync->write ? "store" : "load", n->host->sync->name);
        if (n->host->sync->write) {
            buf_puts(b, "(");
            graph_put_refs(b, g, n->in, n->nin);
            buf_puts(b, ")");
        }
        return;
    }
    buf_puts(b, callable_name(n->host->obj));
    buf_puts(b, "(");
    int k = 0, argc = n->host->nhargs - n->host->nhkw;
    for (int a = 0; a < n->host->nhargs; a++) {
        if (a) buf_puts(b, ", ");
        if (a >= argc && n->host->hkwnames && n->host->hkwnames[a - argc]) {
            buf_puts(b, n->host->hkwnames[a - argc]->s);
            buf_puts(b, "=");
        }
        const HostArg *h = &n->host->hargs[a];
        if (h->nleaves == 0) {
            btake(b, value_repr(h->v));
            continue;
        }
        if (h->nleaves > 1) buf_puts(b, "(");
        for (int l = 0; l < h->nleaves; l++, k++) {
            if (l) buf_puts(b, ", ");
            if (k < n->nin) graph_put_ref(b, g, n->in[k]);
            else buf_puts(b, "?");
        }
        if (h->nleaves > 1) buf_puts(b, ")");
    }
    buf_puts(b, ")");
}

static void put_operation(Buf *b, const Graph *g, const GNode *n, bool brief)
{
    if (n->kind == G_VAR_READ) {
        buf_puts(b, "var_read ");
        btake(b, value_repr(n->host->obj));
    } else if (brief) {
        buf_puts(b, "host ");
        buf_puts(b, callable_name(n->host->obj));
    } else {
        buf_puts(b, "host ");
        put_host_call(b, g, n);
    }
}

static bool put_types(Buf *b, const GNode *n)
{
    if (n->kind == G_HOST && n->host->sync && !n->host->sync->env && n->nout > !n->host_nil) {
        /* a @host call's result, then its list/record arguments' leaves after it */
        int r = n->host_nil ? 0 : 1;
        if (r) graph_put_meta(b, &n->meta[0]);
        else buf_puts(b, "nil");
        buf_puts(b, "; arguments after it: ");
        for (int k = r; k < n->nout; k++) {
            if (k > r) buf_puts(b, ", ");
            graph_put_meta(b, &n->meta[k]);
        }
        return true;
    }
    if (n->kind == G_HOST && n->host_nil && (!n->host->sync || n->host->sync->write)) {
        buf_puts(b, "nil");
        return true;
    }
    return false;
}

/* --- running (graph/exec.c) ---------------------------------------------------------------- */

/* Raise msg at n with the frames an eager run would have: the staged call's,
 * then the calls the trace inlined. */
static int node_error(GRun *x, const GNode *n, const char *msg)
{
    Interp *I = x->host;
    int saved = frames_push_at(I, x->frame_base, n->frames ? n->frames->f : NULL, n->frames ? n->frames->n : 0);
    raise_msg_at(I, n->loc, msg);
    frames_pop_to(I, saved);
    return -1;
}

static bool is_container(Value v) { return v.kind == V_TUPLE || v.kind == V_LIST || v.kind == V_RECORD; }

/* A binding outside the staged function, kept in step with @host calls
 * (HostSync): the body's value stored before the call, or the value after
 * it read back (its structure must be the traced one: the graph was made
 * for it). */
static int run_binding(GRun *x, GNode *n)
{
    HostSync *s = n->host->sync;
    if (s->write) {
        tfe_tensor *lb[16] = {NULL}, **leaves = n->nin <= 16 ? lb : xmalloc(sizeof *leaves * (size_t)n->nin);
        for (int i = 0; i < n->nin; i++) leaves[i] = grun_value(x, n->in[i]);
        int k = 0;
        Value v = sig_rebuild(s->tmpl, leaves, &k, true, 0);
        if (leaves != lb) free(leaves);
        Value old = s->env->slots[s->slot];
        s->env->slots[s->slot] = v;
        value_decref(old);
        return 0;
    }
    SigBuf sb = {0};
    Leaves lv = {0};
    sig_flatten(s->env->slots[s->slot], &sb, &lv, SIG_OUTPUT);
    int rc = 0;
    if (sb.n != s->nsig || mem_cmp(sb.b, s->sig, sb.n) || 2 * lv.n != n->nout) {
        char msg[400];
        ((Interp *)x->host)->stage_limit = true;
        snprintf(msg, sizeof msg, "'%s' was changed by a @host call into a value of another kind, structure or "
                                  "length than when the staged function was traced, which its graph cannot read "
                                  "(keep its structure, or return the changing part from the @host function)", s->name);
        rc = node_error(x, n, msg);
    } else {
        for (int i = 0; i < lv.n; i++) {
            /* a leaf the call left as it was is the graph's value (n->in) */
            tfe_tensor *before = i < n->nin ? grun_value(x, n->in[i]) : NULL;
            bool same = before && sig_same_leaf(lv.t[i], before);
            if (same) {
                tensor_incref(before);
                tensor_decref(lv.t[i]);
                lv.t[i] = before;
            }
            grun_set(x, n->vbase + i, lv.t[i]);
            tfe_tensor *flag = tensor_from_f64(same ? 1.0 : 0.0, n->meta[lv.n + i].dtype);
            grun_set(x, n->vbase + lv.n + i, flag);
        }
        lv.n = 0;
    }
    leaves_free(&lv);
    sig_free(&sb);
    return rc;
}

/* A @host call's list/record arguments after it (HostSync.after): the
 * leaves of each one the body made become the node's outputs; one made
 * outside must come back as it went (the call got a copy). */
static int host_after(GRun *x, GNode *n, const Value *args, tfe_tensor *const *in)
{
    HostSync *s = n->host->sync;
    int out = n->host_nil ? 0 : 1, rc = 0;
    for (int i = 0; i < s->nafter && !rc; i++) {
        HostAfter *h = &s->after[i];
        if (h->outside && h->env) continue; /* the binding's object itself: `host load` reads it */
        bool reads = host_after_reads(h);
        int first = 0;
        for (int a = 0; a < h->arg; a++) first += n->host->hargs[a].nleaves;
        SigBuf sb = {0};
        Leaves lv = {0};
        sig_flatten(args[h->arg], &sb, &lv, SIG_OUTPUT);
        bool ok = sb.n == h->nsig && !mem_cmp(sb.b, h->sig, sb.n) && lv.n == (reads ? h->nleaves : n->host->hargs[h->arg].nleaves);
        for (int k = 0; ok && !reads && k < lv.n; k++) ok = sig_same_leaf(lv.t[k], in[first + k]);
        if (!ok) {
            const char *fname = n->host->obj.kind == V_FN ? ((Closure *)n->host->obj.u.o)->name : "a host function";
            char msg[500];
            if (!reads)
                snprintf(msg, sizeof msg, "%s(), a @host function, changed a list or record made outside the staged "
                                          "function; staged code passes it a copy (make it inside the staged "
                                          "function, or have the @host function return the new values)", fname);
            else
                snprintf(msg, sizeof msg, "%s(), a @host function, changed a list or record passed to it in another "
                                          "way than in the call that traced the staged function (its length, keys "
                                          "or non-tensor values differ; have the @host function return the new "
                                          "values instead)", fname);
            ((Interp *)x->host)->stage_limit = true;
            rc = node_error(x, n, msg);
        } else if (reads) {
            for (int k = 0; k < lv.n; k++) grun_set(x, n->vbase + out + k, lv.t[k]);
            out += lv.n;
            lv.n = 0;
        }
        leaves_free(&lv);
        sig_free(&sb);
    }
    return rc;
}

/* A list or record argument of a @host call that is an object of the caller
 * (the staged call's argument, or an outside binding's value): that object. */
static bool host_arg_source(GRun *x, const GNode *n, int a, Value *v)
{
    const Value *call_args = ((Interp *)x->host)->stage_call_args;
    for (int i = 0; n->host->sync && i < n->host->sync->nafter; i++) {
        const HostAfter *h = &n->host->sync->after[i];
        if (h->arg != a) continue;
        if (h->env) *v = h->env->slots[h->slot];
        else if (h->param >= 0 && call_args) *v = call_args[h->param];
        else return false;
        return v->kind == n->host->hargs[a].v.kind;
    }
    return false;
}

static int run_host_untimed(GRun *x, GNode *n);

/* Does region r hold an effect a run cannot undo (anything but a variable
 * read: a host call, a random draw, a collective)? */
static bool region_effect(const Graph *g, int r)
{
    const GRegion *reg = &g->regions[r];
    for (int i = 0; i < reg->n; i++) {
        const GNode *m = &g->nodes[reg->nodes[i]];
        if (m->kind == G_HOST) return true;
        if (m->kind == G_OP && (tfe_ops[m->op].flags & (F_RANDOM | F_COLLECTIVE))) return true;
        if ((m->kind == G_COND || m->kind == G_WHILE) && (region_effect(g, m->regions[0]) || region_effect(g, m->regions[1])))
            return true;
    }
    return false;
}

int stage_first_effect(const Graph *g)
{
    const GRegion *top = &g->regions[0];
    for (int i = 0; i < top->n; i++) {
        const GNode *m = &g->nodes[top->nodes[i]];
        if (m->kind == G_HOST) return top->nodes[i];
        if (m->kind == G_OP && (tfe_ops[m->op].flags & (F_RANDOM | F_COLLECTIVE))) return top->nodes[i];
        if ((m->kind == G_COND || m->kind == G_WHILE) && (region_effect(g, m->regions[0]) || region_effect(g, m->regions[1])))
            return top->nodes[i];
    }
    return -1;
}

bool host_kind_same(const GNode *n, Value r)
{
    if (n->host_nil || r.kind == V_NIL) return n->host_nil == (r.kind == V_NIL);
    if (r.kind != V_TENSOR && r.kind != V_SCALAR) return true; /* (an error of its own) */
    tfe_tensor *t = value_to_tensor(r);
    if (!t) return true;
    const tfe_meta *m = &n->meta[0];
    bool same = t->dtype == m->dtype && t->weak == m->weak && t->rank == m->rank;
    for (int i = 0; same && n->host->dims_fixed && i < t->rank; i++) same = m->shape[i] < 0 || t->shape[i] == m->shape[i];
    tensor_decref(t);
    return same;
}

/* "nil", "a tensor", or with what differs from the traced kind (node n):
 * "a float64 tensor of shape [1]", "a weak float32 scalar". */
static void kind_text(char *b, size_t cap, const GNode *n, Value r, bool traced)
{
    if (traced ? n->host_nil : r.kind == V_NIL) {
        snprintf(b, cap, "nil");
        return;
    }
    if (!traced && r.kind != V_TENSOR && r.kind != V_SCALAR) {
        snprintf(b, cap, "%s", value_kind_name(r));
        return;
    }
    if (n->host_nil || r.kind == V_NIL) {
        snprintf(b, cap, "a tensor");
        return;
    }
    tfe_tensor *t = traced ? NULL : value_to_tensor(r);
    tfe_meta m = n->meta[0];
    if (t) {
        m.dtype = t->dtype, m.weak = t->weak, m.rank = t->rank;
        for (int i = 0; i < t->rank; i++) m.shape[i] = t->shape[i];
        tensor_decref(t);
    }
    int k = snprintf(b, cap, "a %s%s %s", m.weak ? "weak " : "", dtype_name(m.dtype), m.rank ? "tensor of shape [" : "scalar");
    for (int i = 0; i < m.rank && k < (int)cap; i++) k += snprintf(b + k, cap - (size_t)k, "%s%lld", i ? ", " : "", (long long)m.shape[i]);
    if (m.rank && k < (int)cap) snprintf(b + k, cap - (size_t)k, "]");
}

/* A @host function returned r, of another kind than when the call that
 * traced the graph made it (nil where that gave a tensor, or the other way
 * round, or a tensor of another dtype or rank, or dims the trace relied on:
 * host_kind_same): the graph was made for that kind. As the run's first
 * effect (and with no list or record argument), the call stops here and
 * goes on with another trace (stage/staged.c); else a located error. */
static int host_kind_changed(GRun *x, GNode *n, Value r)
{
    Interp *I = x->host;
    const char *fname = ((Closure *)n->host->obj.u.o)->name;
    /* (not with a list or record argument: what the call did to it would
     * not reach the trace, or the trace would start from what it did) */
    bool containers = n->host->sync && n->host->sync->nafter;
    if (I->host_redo.ok && !I->host_redo.pending && !containers && stage_first_effect(x->g) == (int)(n - x->g->nodes)) {
        I->host_redo.pending = true;
        value_incref(n->host->obj);
        I->host_redo.f = n->host->obj;
        value_incref(r);
        I->host_redo.result = r;
        return raise_at(I, n->loc, "%s() returned another kind of value than when traced", fname);
    }
    char msg[900], now[200], then[200];
    I->stage_limit = true;
    kind_text(now, sizeof now, n, r, false);
    kind_text(then, sizeof then, n, r, true);
    snprintf(msg, sizeof msg,
             "%s(), a @host function, returned %s here, where in the call that traced the staged function it "
             "returned %s: the graph was made for that, and the call cannot trace again from here, as an effect "
             "before this call already ran, or a list or record passed to it may have changed (return one kind "
             "at every call, or make the @host call the first effect of the staged function)",
             fname, now, then);
    return node_error(x, n, msg);
}

/* The profiler's name of a host call: "host print", "host f". */
static const char *host_event_name(Value f)
{
    const char *fn = f.kind == V_FN ? ((Closure *)f.u.o)->name : f.kind == V_BUILTIN ? ((Builtin *)f.u.o)->name : NULL;
    char b[300];
    snprintf(b, sizeof b, "host %s", fn ? fn : "call");
    return prof_intern(b);
}

static int run_host(GRun *x, GNode *n)
{
    if (!prof_recording) return run_host_untimed(x, n);
    int64_t t0 = prof_now();
    int rc = run_host_untimed(x, n);
    if (!rc) prof_complete(PROF_HOST, host_event_name(n->host->obj), t0, NULL, -1, -1);
    return rc;
}

/* Does host call n get a list or record (what the function does to it a
 * replay of its result would not do again)? */
static bool host_gets_container(const GNode *n)
{
    for (int a = 0; a < n->host->nhargs; a++)
        if (is_container(n->host->hargs[a].v)) return true;
    return n->host->sync && n->host->sync->nafter > 0;
}

static int run_host_untimed(GRun *x, GNode *n)
{
    if (n->host->sync && n->host->sync->env) return run_binding(x, n);
    Interp *I = x->host;
    int nargs = n->host->nhargs, argc = nargs - n->host->nhkw, k = 0;
    Value *args = xcalloc((size_t)(nargs ? nargs : 1), sizeof *args);
    tfe_tensor **leaves = xmalloc(sizeof *leaves * (size_t)(n->nin ? n->nin : 1));
    for (int i = 0; i < n->nin; i++) leaves[i] = grun_value(x, n->in[i]);
    for (int a = 0; a < nargs; a++) {
        Value own;
        if (host_arg_source(x, n, a, &own)) {
            k += n->host->hargs[a].nleaves;
            value_incref(own);
            args[a] = own;
        } else if (n->host->hargs[a].nleaves || is_container(n->host->hargs[a].v))
            /* a list or record is made anew at every call (the call may change it) */
            args[a] = sig_rebuild(n->host->hargs[a].v, leaves, &k, true, 0);
        else {
            args[a] = n->host->hargs[a].v;
            value_incref(args[a]);
        }
    }
    int saved = frames_push_at(I, x->frame_base, n->frames ? n->frames->f : NULL, n->frames ? n->frames->n : 0);
    Loc saved_loc = I->cur_loc;
    I->cur_loc = n->loc;
    Value r = v_nil();
    /* under TFE_CHECK_STAGED the eager run made the call: replay it (stage/check.c) */
    bool user = n->host->obj.kind == V_FN;
    int rc;
    if (user && I->host_redo.armed && ((Closure *)I->host_redo.f.u.o)->fn == ((Closure *)n->host->obj.u.o)->fn) {
        /* the result this call already got from the function (staged.c) */
        I->host_redo.armed = false;
        if (n->host->rng) n->host->rng->valid = false; /* (not known here) */
        r = I->host_redo.result;
        I->host_redo.result = v_nil();
        value_decref(I->host_redo.f);
        I->host_redo.f = v_nil();
        rc = 0;
    } else {
        bool ok = I->host_redo.ok; /* not for graphs the function runs */
        I->host_redo.ok = false;
        /* under a tape, what it reads that the node does not take as an
         * input (stage/host_reads.h) */
        HostReads w;
        bool watch = host_reads_begin(I, &w, n);
        host_rng_note(n->host->rng);
        rc = I->check_replay ? check_host_replay(I, n->host->obj, argc, args, n->host->nhkw, n->host->hkwnames, args + argc, &r)
                             : call_value(I, n->host->obj, argc, args, n->host->nhkw, n->host->hkwnames, args + argc, &r);
        if (watch) host_reads_end(I, &w);
        I->host_redo.ok = ok;
    }
    I->cur_loc = saved_loc;
    if (I->graph_log_on && !I->graph_log_bad) {
        /* print and assert change nothing the body reads: a run again
         * eagerly replays them (staged.c, stage_error_redo); a variable's
         * assign it makes again, from the variables' values before the call
         * (EffectReplay.pre); a @host call's result it replays, and takes on
         * the state right after it (what the function assigned) */
        const Builtin *b = n->host->obj.kind == V_BUILTIN ? (const Builtin *)n->host->obj.u.o : NULL;
        const char *bn = b ? b->name : NULL;
        EffectReplay *log = I->graph_log;
        if (!rc && bn && (!strcmp(bn, "print") || !strcmp(bn, "assert")))
            effect_replay_note(&I->graph_log, n->host->obj, r);
        else if (!rc && log && b && value_is_variable(b->self)) {
            effect_replay_note(&I->graph_log, n->host->obj, r);
            log->e[log->n - 1].rerun = true;
        } else if (!rc && log && log->host_ok && user && !host_gets_container(n) && host_kind_same(n, r)) {
            /* (not one of another kind than traced: that is the call's error) */
            effect_replay_note(&I->graph_log, n->host->obj, r);
            effect_state_take(log, &log->e[log->n - 1].post);
        } else if (!(rc && bn && !strcmp(bn, "assert")))
            I->graph_log_bad = true;
    }
    if (!rc && user && !host_kind_same(n, r)) {
        rc = host_kind_changed(x, n, r);
    } else if (!rc && !n->host_nil) {
        tfe_tensor *t = value_to_tensor(r);
        if (!t) rc = raise_at(I, n->loc, "a host function called from staged code returned %s, not a tensor",
                              value_kind_name(r));
        else grun_set(x, n->vbase, t);
    }
    frames_pop_to(I, saved);
    if (!rc && n->host->sync) rc = host_after(x, n, args, leaves);
    free(leaves);
    for (int a = 0; a < nargs; a++) value_decref(args[a]);
    free(args);
    value_decref(r);
    return rc;
}


static tfe_tensor *var_read(GRun *x, GNode *n)
{
    (void)x;
    if (n->stand_in) { /* a value no backward uses: no tape notes it (stage/trace_cf.c, mark_exported) */
        tfe_tensor *t = variable_peek(n->host->obj);
        if (t) tensor_incref(t);
        return t;
    }
    return value_to_tensor(n->host->obj);
}

static int frame_depth(void *host) { return ((Interp *)host)->nframes; }

/* v.assign*(x) with x the node's one input, a positional argument: the kinds
 * of graph/host.h are variable_assign_target's modes. Under TFE_CHECK_STAGED
 * the eager run's calls are replayed: an update may run in place only for a
 * variable the check restored before the graph's run (stage/check.c), so the
 * staged side runs what a default run runs; the call must run otherwise. */
static int var_update(void *host, const GNode *n, tfe_tensor ***slot)
{
    const HostNode *h = n->host;
    if (!h || h->sync || h->nhargs != 1 || h->nhkw || h->hargs[0].nleaves != 1 || h->hargs[0].v.kind != V_TENSOR ||
        n->nin != 1)
        return 0;
    if (host && ((Interp *)host)->check_replay && !check_update_tracked((Interp *)host, h->obj)) return 0;
    return variable_assign_target(h->obj, slot);
}

/* An update written in place: under TFE_CHECK_STAGED, the eager run's call
 * it stands for is checked against the variable's new value. */
static int var_updated(GRun *x, const GNode *n, const tfe_tensor *w)
{
    Interp *I = x->host;
    if (!I->check_replay) return 0;
    Loc saved_loc = I->cur_loc;
    I->cur_loc = n->loc;
    int saved = frames_push_at(I, x->frame_base, n->frames ? n->frames->f : NULL, n->frames ? n->frames->n : 0);
    int rc = check_update_replay(I, n->host->obj, w);
    frames_pop_to(I, saved);
    I->cur_loc = saved_loc;
    return rc;
}

void stage_graph_host_register(void)
{
    static const GHost host = {
        .node_new = hnode_new, .node_copy = hnode_copy, .node_free = hnode_free, .node_same = hnode_same,
        .frames_release = frames_release, .frames_name = frames_name,
        .put_operation = put_operation, .put_types = put_types,
        .run_host = run_host, .var_read = var_read, .frame_depth = frame_depth, .node_error = node_error,
        .var_update = var_update, .var_updated = var_updated,
    };
    graph_set_host(&host);
}
