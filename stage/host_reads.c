/* host_reads.c — the reads of a cached graph's @host call, under a tape,
 * that its node does not take as inputs (stage/host_reads.h): the tensors
 * a tape tracks among them become extra sources of the call's tape entry,
 * so that a gradient reaching one is refused where it is taken rather than
 * silently zero. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "stage/host_node.h"
#include "stage/host_reads.h"
#include "stage/sig.h"
#include "tensor/grad.h"
#include "util/xalloc.h"

/* What to pass instead (the advice of the errors): the binding, or the
 * variable's value read in the staged function. */
static void advice(char *b, size_t n, const char *what, const char *var_name)
{
    if (!var_name) snprintf(b, n, "%s (or the tensor of it the function uses)", what);
    else snprintf(b, n, "its value (%s.value, read in the staged function)", var_name);
}

void host_snaps_free(HostSnap *snap, int n)
{
    for (int i = 0; i < n; i++) {
        if (snap[i].env && !snap[i].weak) env_decref(snap[i].env);
        value_decref(snap[i].var);
        value_decref(snap[i].v);
        value_decref(snap[i].orig);
    }
    free(snap);
}

void host_unlinked_free(HostUnlinked *u)
{
    for (int i = 0; i < u->n; i++) {
        tensor_decref(u->t[i]);
        free(u->what[i]);
    }
    free(u->t);
    free(u->what);
    host_snaps_free(u->snap, u->nsnap);
    *u = (HostUnlinked){0};
}

bool host_call_counts(const GNode *n) { return n->kind == G_HOST && n->nout > 0 && n->host->obj.kind == V_FN; }

void host_snaps_swap(HostSnap *snap, int n, int call)
{
    for (int i = 0; i < n; i++) {
        if (snap[i].call != call || snap[i].rng) continue;
        if (snap[i].env) {
            Value t = snap[i].env->slots[snap[i].slot];
            snap[i].env->slots[snap[i].slot] = snap[i].v;
            snap[i].v = t;
            continue;
        }
        tfe_tensor *now = variable_peek(snap[i].var);
        tensor_incref(now);
        variable_replace_take(snap[i].var, value_to_tensor(snap[i].v)); /* (a new ref) */
        value_decref(snap[i].v);
        snap[i].v = v_tensor_take(now);
    }
}

bool host_snaps_rng(const HostSnap *snap, int n, int call, uint64_t *key, uint64_t *counter)
{
    for (int i = 0; i < n; i++)
        if (snap[i].rng && snap[i].call == call) {
            *key = snap[i].key, *counter = snap[i].counter;
            return true;
        }
    return false;
}

static HostSnap *snap_push(HostUnlinked *u)
{
    if (u->nsnap == u->capsnap) {
        u->capsnap = u->capsnap ? 2 * u->capsnap : 4;
        u->snap = xrealloc(u->snap, sizeof *u->snap * (size_t)u->capsnap);
    }
    return &u->snap[u->nsnap++];
}

/* Does v hold a list or record (not a module: the program does not change
 * one in place, and copying it at every read would cost)? */
static bool has_mutable(Value v, int depth)
{
    if (depth > 8) return false;
    if (v.kind == V_LIST) return true;
    if (v.kind == V_RECORD) return !((Record *)v.u.o)->module_name;
    if (v.kind == V_TUPLE) {
        Seq *q = (Seq *)v.u.o;
        for (int i = 0; i < q->n; i++)
            if (has_mutable(q->items[i], depth + 1)) return true;
    }
    return false;
}

/* The value binding (e, slot), or variable var, held at the watched call's
 * first read of it; a list or record in it is copied, so that a change the
 * program makes in place before the gradient is not seen by the backward
 * (eager code differentiated the ops as they ran). Each host call of the
 * run notes its own (HostSnap.call): the body, or an earlier call, may
 * change the binding in between. Returns whether an earlier read noted
 * this very value (its tensors were looked at then: a data set in a list
 * read at every call, or in a loop, is walked once per graph call). */
static bool snap(Interp *I, Env *e, int slot, Value var, Value v)
{
    HostUnlinked *u = I->host_unlinked;
    if (!u) return false;
    int call = I->host_reads->call;
    bool seen = false;
    for (int i = 0; i < u->nsnap; i++) {
        HostSnap *s = &u->snap[i];
        if (s->rng) continue;
        if (!(e ? s->env == e && s->slot == slot : s->var.u.o == var.u.o)) continue;
        Value was = s->orig.kind != V_NIL ? s->orig : s->v;
        bool same = was.kind == v.kind && v.kind >= V_TENSOR &&
                    (v.kind == V_TENSOR ? was.u.t == v.u.t : was.u.o == v.u.o);
        if (s->call == call) return same;
        seen |= same && v.kind == V_TENSOR; /* (a list's contents may have changed since) */
    }
    bool weak = e == I->globals;
    if (e && !weak) e->h.refcount++;
    value_incref(var);
    Value kept = v, orig = v_nil();
    if (has_mutable(v, 0)) {
        SigMemo m = {0};
        kept = sig_copy_shared(v, &m);
        sig_memo_free(&m);
        orig = v;
        value_incref(orig);
    } else {
        value_incref(v);
    }
    *snap_push(u) = (HostSnap){.env = e, .slot = slot, .var = var, .v = kept, .orig = orig, .weak = weak, .call = call};
    return seen;
}


bool host_reads_begin(Interp *I, HostReads *w, const GNode *n)
{
    /* (under TFE_CHECK_STAGED the call is replayed, not run; a redone
     * call's result was already made) */
    if (!I->host_unlinked || I->tracer || I->check_replay || n->nout == 0 || n->host->obj.kind != V_FN) return false;
    *w = (HostReads){0};
    w->call = host_call_counts(n) ? I->host_unlinked->ncalls++ : -1;
    if (w->call >= 0) { /* (a function that draws: its gradient's run again draws the same) */
        HostSnap *s = snap_push(I->host_unlinked);
        *s = (HostSnap){.slot = -1, .var = v_nil(), .v = v_nil(), .orig = v_nil(), .call = w->call, .rng = true};
        tfe_random_state(&s->key, &s->counter);
    }
    w->born = env_next_born();
    w->fname = ((Closure *)n->host->obj.u.o)->name;
    w->ctx = n->host->sync ? n->host->sync->ctx : NULL;
    w->nctx = n->host->sync ? n->host->sync->nctx : 0;
    w->prev = I->host_reads;
    I->host_reads = w;
    return true;
}

void host_reads_begin_suspects(Interp *I, HostReads *w, const char *fname, const struct HostCtx *ctx, int nctx,
                               const HostSuspect *sus, int nsus)
{
    *w = (HostReads){.born = env_next_born(), .fname = fname, .ctx = ctx, .nctx = nctx, .sus = sus, .nsus = nsus, .call = -1,
                     .prev = I->host_reads};
    I->host_reads = w;
}

void host_reads_end(Interp *I, HostReads *w) { I->host_reads = w->prev; }

/* Does v hold a float tensor? */
static bool has_float(Value v, int depth)
{
    if (v.kind == V_TENSOR) return dtype_is_float(v.u.t->dtype);
    if (depth > 8) return false;
    if (v.kind == V_TUPLE || v.kind == V_LIST) {
        Seq *q = (Seq *)v.u.o;
        for (int i = 0; i < q->n; i++)
            if (has_float(q->items[i], depth + 1)) return true;
    } else if (v.kind == V_RECORD) {
        Record *r = (Record *)v.u.o;
        for (int i = 0; i < r->n; i++)
            if (has_float(r->vals[i], depth + 1)) return true;
    }
    return false;
}

static void hit(HostReads *w, const char *what, const char *var_name)
{
    if (w->hit) return;
    char b[1600], a[400];
    advice(a, sizeof a, what, var_name);
    snprintf(b, sizeof b, "%s() read %s in this call, where the call that traced the staged function did not, so "
                          "the graph's gradient with respect to it does not go through the function, as eager "
                          "code's does: pass %s to %s() as an argument", w->fname, what, a, w->fname);
    w->hit = xstrdup(b);
}

/* t, tracked by a tape, read by the watched call as `what`. */
static void note(Interp *I, tfe_tensor *t, const char *what, const char *var_name)
{
    HostUnlinked *u = I->host_unlinked;
    if (!u || !t || !dtype_is_float(t->dtype) || tfe_tapes_tracking(0, 1 << 30, 1, &t) == 0) return;
    for (int i = 0; i < u->n; i++)
        if (u->t[i] == t) return;
    if (u->n == u->cap) {
        u->cap = u->cap ? 2 * u->cap : 4;
        u->t = xrealloc(u->t, sizeof *u->t * (size_t)u->cap);
        u->what = xrealloc(u->what, sizeof *u->what * (size_t)u->cap);
    }
    tensor_incref(t);
    u->t[u->n] = t;
    char b[1600], a[400];
    const char *f = I->host_reads->fname;
    advice(a, sizeof a, what, var_name);
    snprintf(b, sizeof b, "gradient: %s(), a @host function, read %s in this staged call, where the graph does not "
                          "take it as an input (the call that traced did not read it%s), so the gradient through it, "
                          "which eager code gives, would be lost: pass %s to %s() as an argument", f, what,
             var_name ? "" : ", or it is in a binding holding more than 64 tensors", a, f);
    u->what[u->n++] = xstrdup(b);
}

static void note_value(Interp *I, Value v, const char *what, int depth)
{
    if (v.kind == V_TENSOR) note(I, v.u.t, what, NULL);
    if (depth > 8) return; /* (a cycle: a list holding itself) */
    if (v.kind == V_TUPLE || v.kind == V_LIST) {
        Seq *q = (Seq *)v.u.o;
        for (int i = 0; i < q->n; i++) note_value(I, q->items[i], what, depth + 1);
    } else if (v.kind == V_RECORD) {
        Record *r = (Record *)v.u.o;
        for (int i = 0; i < r->n; i++) note_value(I, r->vals[i], what, depth + 1);
    }
}

void host_reads_binding(Interp *I, Env *e, int slot, const char *name)
{
    HostReads *w = I->host_reads;
    if (!w || e->born >= w->born) return; /* (the function's own, or a closure's made in it) */
    for (int i = 0; i < w->nctx; i++)
        if (w->ctx[i].env == e && w->ctx[i].slot == slot) return; /* an input of the node */
    char what[300];
    snprintf(what, sizeof what, "'%s'", name);
    if (!w->sus) {
        if (!snap(I, e, slot, v_nil(), e->slots[slot])) note_value(I, e->slots[slot], what, 0);
        return;
    }
    for (int i = 0; i < w->nsus; i++)
        if (w->sus[i].env == e && w->sus[i].slot == slot && has_float(e->slots[slot], 0)) hit(w, what, NULL);
}

void host_reads_var(Interp *I, Value var, const char *var_name, bool trainable, tfe_tensor *t)
{
    HostReads *w = I->host_reads;
    if (!w) return;
    for (int i = 0; i < w->nctx; i++)
        if (!w->ctx[i].env && w->ctx[i].tmpl.u.o == var.u.o) return; /* an input of the node */
    char what[300];
    if (var_name) snprintf(what, sizeof what, "the variable '%s'", var_name);
    else snprintf(what, sizeof what, "a variable");
    if (!w->sus) {
        tensor_incref(variable_peek(var));
        Value stored = v_tensor_take(variable_peek(var));
        snap(I, NULL, -1, var, stored);
        value_decref(stored);
        if (trainable) note(I, t, what, var_name ? var_name : "v");
        return;
    }
    for (int i = 0; i < w->nsus && trainable; i++)
        if (w->sus[i].var == var.u.o && dtype_is_float(t->dtype)) hit(w, what, var_name ? var_name : "v");
}
