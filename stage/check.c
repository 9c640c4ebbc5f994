/* check.c — the differential check (TFE_CHECK_STAGED=1, --check-staged).
 *
 * Every cached call of a staged function runs twice: first its body eagerly
 * (as --eager would), then its graph. Effects happen once, in the eager run:
 * its host calls (@host functions and the effect builtins: print, assign,
 * seed, time, ...) run for real and are recorded with their arguments, their
 * result and what they changed (outside bindings, the variables the graph
 * reads, the random stream). The graph then runs from the state before the
 * call, and each host node, instead of calling out, checks that it calls the
 * same function with bitwise the same arguments, gets the recorded result and
 * applies the recorded changes. Then the results, the outside bindings and
 * the random stream must be bitwise the same as the eager run's. The first
 * difference is a located error; for a value, the graph as traced is run
 * again node by node and compared with the eager run's ops (matched in order
 * by op and source position) to name the first op whose value differs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "stage/check.h"
#include "graph/exec.h"
#include "stage/sig.h"
#include "stage/trace.h"
#include "tensor/device.h"
#include "tensor/grad.h"
#include "util/xalloc.h"

bool stage_check_on(Interp *I)
{
    if (I->check_staged < 0) {
        const char *s = getenv("TFE_CHECK_STAGED");
        I->check_staged = s && *s && strcmp(s, "0") != 0;
    }
    return I->check_staged > 0;
}

/* The eager run keeps every op's first output to find the first node that
 * differs; a body that runs more ops, or makes more bytes, than this is
 * compared on its first ones. */
enum { MAX_OPS = 200000 };
#define MAX_OP_BYTES ((int64_t)256 << 20)

typedef struct SlotSet { int idx; Value v; } SlotSet;       /* a binding's new value (owned) */
typedef struct VarSet { int var; tfe_tensor *t; } VarSet;   /* a variable's new value (owned) */

/* One host call of the eager run. */
typedef struct HostRec {
    Value f;
    Value *args;         /* positional, then keyword values as they were at the call:
                            lists and records copied (owned) */
    Value *orig;         /* the argument objects themselves (owned refs) */
    Value *after;        /* per argument: a copy of a list or record the call changed,
                            as it left it; nil when it did not change it (owned) */
    int nargs, nkw;
    char **kwnames;
    Value result;        /* owned */
    bool failed;         /* it raised the eager run's error */
    uint64_t key0, ctr0, key1, ctr1; /* the random stream before and after */
    SlotSet *slots;      /* the bindings it changed */
    int nslots;
    SlotSet *seen;       /* a @host function: the bindings unlike before the call, as it saw them */
    int nseen;
    SlotSet *held;       /* a @host function: copies of the lists and records the
                            watched bindings hold after it (it may change them in place) */
    int nheld;
    VarSet *vars;        /* the tracked variables it changed */
    int nvars;
    Loc loc;             /* the call */
} HostRec;

typedef struct OpRec { tfe_op op; Loc loc; tfe_tensor *t; } OpRec;

typedef struct Check {
    Interp *I;
    Closure *c;
    Trace *t;
    /* the bindings a call can change: every slot of these Envs, flattened */
    Env **envs;
    int nenv, capenv;
    int *base;           /* per env: its first index in the flat slot arrays */
    int nslot;
    /* the bindings the graph reads back after a @host call (`host load`, or
     * passed to it as the very object): a @host function may change the list
     * or record they hold in place, which the replay must make again */
    int *watch;
    int nwatch;
    Value *pre, *last, *eager_end; /* owned snapshots */
    /* the variables the graph reads */
    Value *vars;         /* borrowed from the graph's nodes */
    int nvars;
    tfe_tensor **var_pre, **var_last; /* owned */
    uint64_t key_pre, ctr_pre, key_eager, ctr_eager;
    HostRec *recs;
    int nrec, caprec, cursor;
    OpRec *ops;
    int nops, capops;
    int64_t op_bytes;
    /* under an outer tape: each run on a tape of its own that watches the
     * graph's float inputs and the variables it reads (the sources) */
    bool grads;
    tfe_tensor **src;    /* borrowed (lv's and var_pre's) */
    const char **src_name; /* NULL: a variable, named by its repr */
    Value *src_var;
    int nsrc;
    tfe_tape *tape_e, *tape_s;
    tfe_tensor *target_e, *target_s; /* the sum of every float leaf of the result (owned) */
    bool abort;          /* the replay found a difference (the error is raised) */
    bool limit;          /* the staged run stopped at a documented limit of staging */
    bool hit_error;      /* the replay reached the host call that failed eagerly */
    bool eager_failed;   /* the eager run stopped with an error */
    bool past_error;     /* the replay reached a host call past the place where the
                            eager run stopped (an op's error, not a host call's) */
} Check;

/* --- values: bitwise comparison with a description of the first difference -------------------- */

static bool same_bits(Value a, Value b)
{
    return a.kind == b.kind && a.dtype == b.dtype && a.weak == b.weak && a.u.i == b.u.i;
}

static void fmt_elem(const tfe_tensor *t, int64_t i, char *buf, size_t cap)
{
    /* as print shows a number: the shortest text that reads back to the same bits */
    Value v = t->dtype == TFE_BOOL ? v_bool(tensor_load_i64(t, i) != 0)
            : dtype_is_float(t->dtype) ? v_float(tensor_get_f64(t, i), t->dtype)
                                       : v_int(tensor_load_i64(t, i));
    if (!dtype_is_float(t->dtype) && t->dtype != TFE_BOOL) v.dtype = (uint8_t)t->dtype;
    char *r = value_repr(v);
    snprintf(buf, cap, "%s", r);
    free(r);
}

static bool elem_same(const tfe_tensor *a, const tfe_tensor *b, int64_t i)
{
    if (!dtype_is_float(a->dtype)) return tensor_load_i64(a, i) == tensor_load_i64(b, i);
    double x = tensor_get_f64(a, i), y = tensor_get_f64(b, i);
    if (isnan(x) && isnan(y)) return true;
    return memcmp(&x, &y, sizeof x) == 0;
}

/* "element [1, 2]" of a tensor of t's shape at flat index i */
static void fmt_index(const tfe_tensor *t, int64_t i, char *buf, size_t cap)
{
    int64_t idx[TFE_MAX_RANK];
    for (int d = t->rank - 1; d >= 0; d--) {
        idx[d] = t->shape[d] ? i % t->shape[d] : 0;
        i = t->shape[d] ? i / t->shape[d] : 0;
    }
    size_t n = (size_t)snprintf(buf, cap, ", element [");
    for (int d = 0; d < t->rank && n < cap; d++) n += (size_t)snprintf(buf + n, cap - n, "%s%lld", d ? ", " : "", (long long)idx[d]);
    if (n < cap) snprintf(buf + n, cap - n, "]");
}

static void fmt_type(const tfe_tensor *t, char *buf, size_t cap)
{
    char sh[200];
    snprintf(buf, cap, "%s %s", dtype_name(t->dtype), shape_str(t->rank, t->shape, sh));
}

/* Tensors (numbers count as 0-d tensors): "" if bitwise the same, else the
 * difference ("element [3]: staged 1.5, eager 1.25") into what. */
static bool tensor_diff_host(const tfe_tensor *s, const tfe_tensor *e, const char *path, char *what, size_t cap);

/* A tensor on a GPU is compared through a copy on the host. */
static bool tensor_diff(const tfe_tensor *s, const tfe_tensor *e, const char *path, char *what, size_t cap)
{
    bool sd = s->storage && s->storage->device, ed = e->storage && e->storage->device;
    if (!sd && !ed) return tensor_diff_host(s, e, path, what, cap);
    tfe_tensor *a = sd ? tensor_to_device((tfe_tensor *)s, 0) : (tfe_tensor *)s;
    tfe_tensor *b = ed ? tensor_to_device((tfe_tensor *)e, 0) : (tfe_tensor *)e;
    bool d = a && b ? tensor_diff_host(a, b, path, what, cap) : false;
    tfe_error_clear();
    if (sd && a) tensor_decref(a);
    if (ed && b) tensor_decref(b);
    return d;
}

static bool tensor_diff_host(const tfe_tensor *s, const tfe_tensor *e, const char *path, char *what, size_t cap)
{
    char a[256], b[256];
    if (s->dtype != e->dtype || s->rank != e->rank || memcmp(s->shape, e->shape, sizeof(int64_t) * (size_t)s->rank)) {
        fmt_type(s, a, sizeof a);
        fmt_type(e, b, sizeof b);
        snprintf(what, cap, "%s: staged %s, eager %s", path, a, b);
        return true;
    }
    int64_t n = tensor_numel(s);
    /* the common case, equal bytes, without a call per element */
    if (s == e || (s->storage && e->storage && tensor_is_contiguous(s) && tensor_is_contiguous(e) &&
                   !memcmp(tensor_data(s), tensor_data(e), (size_t)n * dtype_size(s->dtype))))
        return false;
    for (int64_t i = 0; i < n; i++) {
        if (elem_same(s, e, i)) continue;
        char ix[200] = "";
        if (s->rank) fmt_index(s, i, ix, sizeof ix);
        fmt_elem(s, i, a, sizeof a);
        fmt_elem(e, i, b, sizeof b);
        snprintf(what, cap, "%s%s: staged %s, eager %s", path, ix, a, b);
        return true;
    }
    return false;
}

static bool is_numeric(Value v) { return v.kind == V_SCALAR || v.kind == V_TENSOR; }

static bool vdiff(Value s, Value e, const char *path, char *what, size_t cap, int depth);

static bool seq_diff(Seq *s, Seq *e, const char *path, char *what, size_t cap, int depth)
{
    if (s->n != e->n) {
        snprintf(what, cap, "%s: staged %d items, eager %d", path, s->n, e->n);
        return true;
    }
    for (int i = 0; i < s->n; i++) {
        char p[300];
        snprintf(p, sizeof p, "%s[%d]", path, i);
        if (vdiff(s->items[i], e->items[i], p, what, cap, depth + 1)) return true;
    }
    return false;
}

static bool record_diff(Record *s, Record *e, const char *path, char *what, size_t cap, int depth)
{
    if (s->n != e->n) {
        snprintf(what, cap, "%s: staged %d fields, eager %d", path, s->n, e->n);
        return true;
    }
    for (int i = 0; i < s->n; i++) {
        char p[300];
        snprintf(p, sizeof p, "%s.%s", path, e->keys[i]->s);
        if (strcmp(s->keys[i]->s, e->keys[i]->s)) {
            snprintf(what, cap, "%s: staged field '%s', eager '%s'", p, s->keys[i]->s, e->keys[i]->s);
            return true;
        }
        if (vdiff(s->vals[i], e->vals[i], p, what, cap, depth + 1)) return true;
    }
    return false;
}

static bool same_builtin(Value a, Value b)
{
    Builtin *x = (Builtin *)a.u.o, *y = (Builtin *)b.u.o;
    return x == y || (x->fn == y->fn && x->data == y->data && same_bits(x->self, y->self));
}

/* The first difference between a staged value and an eager one (path names
 * where in it: "result[1].w"), into what; false when they are bitwise equal. */
static bool vdiff(Value s, Value e, const char *path, char *what, size_t cap, int depth)
{
    if (same_bits(s, e)) return false;
    if (is_numeric(s) && is_numeric(e)) {
        tfe_tensor *a = value_to_tensor(s), *b = value_to_tensor(e);
        bool d = tensor_diff(a, b, path, what, cap);
        tensor_decref(a);
        tensor_decref(b);
        return d;
    }
    if (s.kind != e.kind) {
        snprintf(what, cap, "%s: staged a %s, eager a %s", path, value_kind_name(s), value_kind_name(e));
        return true;
    }
    if (depth > 64) return false; /* a cycle: what is left compared equal so far */
    switch (s.kind) {
    case V_NIL: return false;
    case V_STR: {
        Str *a = (Str *)s.u.o, *b = (Str *)e.u.o;
        if (a->len == b->len && !memcmp(a->s, b->s, a->len)) return false;
        snprintf(what, cap, "%s: staged \"%.60s\", eager \"%.60s\"", path, a->s, b->s);
        return true;
    }
    case V_TUPLE: case V_LIST: return seq_diff((Seq *)s.u.o, (Seq *)e.u.o, path, what, cap, depth);
    case V_RECORD: return record_diff((Record *)s.u.o, (Record *)e.u.o, path, what, cap, depth);
    case V_RANGE: {
        Range *a = (Range *)s.u.o, *b = (Range *)e.u.o;
        if (a->start == b->start && a->stop == b->stop && a->step == b->step) return false;
        break;
    }
    case V_BUILTIN:
        if (same_builtin(s, e)) return false;
        break;
    case V_FN: /* the same code (a closure the body makes is a new one in each run) */
        if (((Closure *)s.u.o)->fn == ((Closure *)e.u.o)->fn) return false;
        break;
    default: break; /* modules, objects: the same one */
    }
    snprintf(what, cap, "%s: staged and eager hold different %ss", path, value_kind_name(s));
    return true;
}

/* --- lists and records a @host function changes in place ----------------------------------------- */

static bool value_same(Value a, Value b)
{
    char what[1000];
    return !vdiff(a, b, "", what, sizeof what, 0);
}

static bool is_container(Value v) { return v.kind == V_TUPLE || v.kind == V_LIST || v.kind == V_RECORD; }

static bool has_mutable(Value v)
{
    if (v.kind == V_LIST || v.kind == V_RECORD) return true;
    if (v.kind != V_TUPLE) return false;
    Seq *q = (Seq *)v.u.o;
    for (int i = 0; i < q->n; i++)
        if (has_mutable(q->items[i])) return true;
    return false;
}

static void contents_assign(Value dst, Value src, int depth);

/* One item of a container made what src is: left alone when it already is
 * (its tensors stay the staged run's), changed in place when it is a
 * container of the same kind, else replaced by a copy. */
static void item_assign(Value *slot, Value src, int depth)
{
    if (value_same(*slot, src)) return;
    if (slot->kind == src.kind && is_container(src) && depth < 64 &&
        (src.kind != V_TUPLE || ((Seq *)slot->u.o)->n == ((Seq *)src.u.o)->n)) {
        contents_assign(*slot, src, depth + 1);
        return;
    }
    Value old = *slot;
    *slot = sig_copy_containers(src);
    value_decref(old);
}

/* Make the list, record or tuple dst hold what src holds, keeping dst (and
 * the containers in it) the same objects: the staged run's copy of an
 * argument, or an outside binding's list, as the eager call left it. */
static void contents_assign(Value dst, Value src, int depth)
{
    if (dst.kind != src.kind || !is_container(src)) return;
    if (dst.kind == V_LIST || dst.kind == V_TUPLE) {
        Seq *d = (Seq *)dst.u.o, *e = (Seq *)src.u.o;
        if (dst.kind == V_TUPLE && d->n != e->n) return;
        for (int i = 0; i < d->n && i < e->n; i++) item_assign(&d->items[i], e->items[i], depth);
        for (int i = d->n; i < e->n; i++) seq_push_take(d, sig_copy_containers(e->items[i]));
        while (d->n > e->n) value_decref(d->items[--d->n]);
        return;
    }
    Record *d = (Record *)dst.u.o, *e = (Record *)src.u.o;
    bool same_keys = d->n == e->n;
    for (int i = 0; i < d->n && same_keys; i++)
        same_keys = d->keys[i]->len == e->keys[i]->len && !memcmp(d->keys[i]->s, e->keys[i]->s, d->keys[i]->len);
    if (same_keys) {
        for (int i = 0; i < d->n; i++) item_assign(&d->vals[i], e->vals[i], depth);
        return;
    }
    for (int i = 0; i < d->n; i++) { /* other keys: the fields anew, in src's order */
        value_decref(v_obj(V_STR, d->keys[i]));
        value_decref(d->vals[i]);
    }
    d->n = 0;
    for (int i = 0; i < e->n; i++) record_set_take(d, e->keys[i]->s, e->keys[i]->len, sig_copy_containers(e->vals[i]));
}

/* --- state: the bindings, the tracked variables, the random stream ---------------------------- */

static void env_add(Check *ck, Env *e)
{
    for (int i = 0; i < ck->nenv; i++)
        if (ck->envs[i] == e) return;
    if (ck->nenv == ck->capenv) {
        ck->capenv = ck->capenv ? ck->capenv * 2 : 8;
        ck->envs = xrealloc(ck->envs, sizeof *ck->envs * (size_t)ck->capenv);
    }
    ck->envs[ck->nenv++] = e;
}

static Value *slot_at(Check *ck, int idx)
{
    int k = ck->nenv - 1;
    while (k > 0 && ck->base[k] > idx) k--;
    return &ck->envs[k]->slots[idx - ck->base[k]];
}

static Value *slots_take(Check *ck)
{
    Value *v = xmalloc(sizeof *v * (size_t)(ck->nslot + 1));
    for (int k = 0, i = 0; k < ck->nenv; k++)
        for (int j = 0; j < ck->envs[k]->nslots; j++, i++) {
            v[i] = ck->envs[k]->slots[j];
            value_incref(v[i]);
        }
    return v;
}

static void slots_free(Value *v, int n)
{
    if (!v) return;
    for (int i = 0; i < n; i++) value_decref(v[i]);
    free(v);
}

static void slot_set(Value *slot, Value v)
{
    if (same_bits(*slot, v)) return;
    value_incref(v);
    Value old = *slot;
    *slot = v;
    value_decref(old);
}

static void slots_restore(Check *ck, const Value *v)
{
    for (int k = 0, i = 0; k < ck->nenv; k++)
        for (int j = 0; j < ck->envs[k]->nslots; j++, i++) slot_set(&ck->envs[k]->slots[j], v[i]);
}

/* The name of a binding for a report: a global's name, or a description. */
static void binding_name(Check *ck, int idx, char *buf, size_t cap)
{
    int k = ck->nenv - 1;
    while (k > 0 && ck->base[k] > idx) k--;
    int slot = idx - ck->base[k];
    Scope *g = ck->I->global_scope;
    if (ck->envs[k] == ck->I->globals && g)
        for (int i = 0; i < g->n; i++)
            if (g->slots[i] == slot) {
                snprintf(buf, cap, "'%s'", g->names[i]);
                return;
            }
    snprintf(buf, cap, "a binding of an enclosing function (slot %d)", slot);
}

static void vars_collect(Check *ck)
{
    Graph *g = ck->t->g;
    ck->vars = xmalloc(sizeof *ck->vars * (size_t)(g->n + 1));
    for (int i = 0; i < g->n; i++) {
        if (g->nodes[i].kind != G_VAR_READ || !value_is_variable(g->nodes[i].host->obj)) continue;
        bool dup = false;
        for (int k = 0; k < ck->nvars && !dup; k++) dup = ck->vars[k].u.o == g->nodes[i].host->obj.u.o;
        if (!dup) ck->vars[ck->nvars++] = g->nodes[i].host->obj;
    }
    ck->var_pre = xcalloc((size_t)ck->nvars + 1, sizeof *ck->var_pre);
    ck->var_last = xcalloc((size_t)ck->nvars + 1, sizeof *ck->var_last);
    for (int k = 0; k < ck->nvars; k++) {
        ck->var_pre[k] = ck->var_last[k] = variable_peek(ck->vars[k]);
        tensor_incref(ck->var_pre[k]);
        tensor_incref(ck->var_last[k]);
    }
}

static void var_set(Value var, tfe_tensor *t)
{
    if (variable_peek(var) == t) return;
    tensor_incref(t);
    variable_replace_take(var, t);
}

/* For the staged run: t as the variable's value. Without a tape, a copy
 * that only the variable holds, as a default run's variable holds its
 * value alone: a fused update (graph/exec_update.c) then writes it in place
 * where a default run would, and the check sees what that run computes.
 * Under a tape the sources the check watches are these very tensors. */
static void var_set_staged(Check *ck, Value var, tfe_tensor *t)
{
    tfe_tensor *c = ck->grads ? NULL : tensor_copy(t);
    if (!c) {
        tfe_error_clear();
        var_set(var, t);
        return;
    }
    variable_replace_take(var, c);
}

/* Variables, bindings and the random stream as they were before the call. */
static void state_restore_pre(Check *ck)
{
    slots_restore(ck, ck->pre);
    for (int k = 0; k < ck->nvars; k++) var_set_staged(ck, ck->vars[k], ck->var_pre[k]);
    tfe_random_restore(ck->key_pre, ck->ctr_pre);
}

/* --- the eager run ------------------------------------------------------------------------------ */

static int exec_hook(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out)
{
    int rc = tfe_execute_eager(op, nin, in, at, out);
    Check *ck = interp_current()->check_eager; /* a tensor-layer hook: no Interp */
    if (rc || !ck || !ck->I->check_recording || ck->nops >= MAX_OPS || ck->op_bytes > MAX_OP_BYTES ||
        tfe_ops[op].nout < 1)
        return rc;
    ck->op_bytes += tensor_numel(out[0]) * (int64_t)dtype_size(out[0]->dtype);
    if (ck->nops == ck->capops) {
        ck->capops = ck->capops ? ck->capops * 2 : 64;
        ck->ops = xrealloc(ck->ops, sizeof *ck->ops * (size_t)ck->capops);
    }
    tensor_incref(out[0]);
    ck->ops[ck->nops++] = (OpRec){op, ck->I->cur_loc, out[0]};
    return rc;
}

static const char *callee_name(Value f)
{
    return f.kind == V_FN ? ((Closure *)f.u.o)->name : f.kind == V_BUILTIN ? ((Builtin *)f.u.o)->name : "?";
}

/* Before a host call: what the body itself changed since the last one is
 * not the call's doing (the graph must write it back on its own). */
static void sync_last(Check *ck)
{
    for (int i = 0; i < ck->nslot; i++) slot_set(&ck->last[i], *slot_at(ck, i));
}

/* A host function may read any binding: those the call changed so far, as
 * it sees them (the graph must show it the same). */
static void note_seen(Check *ck, HostRec *r)
{
    for (int i = 0; i < ck->nslot; i++) {
        if (same_bits(ck->last[i], ck->pre[i])) continue;
        r->seen = xrealloc(r->seen, sizeof *r->seen * (size_t)(r->nseen + 1));
        value_incref(ck->last[i]);
        r->seen[r->nseen++] = (SlotSet){i, ck->last[i]};
    }
}

/* After it: bindings and tracked variables unlike the state before it
 * (which becomes the current one) are what it changed. */
static void note_changes(Check *ck, HostRec *r)
{
    for (int i = 0; i < ck->nslot; i++) {
        Value cur = *slot_at(ck, i);
        if (same_bits(cur, ck->last[i])) continue;
        r->slots = xrealloc(r->slots, sizeof *r->slots * (size_t)(r->nslots + 1));
        value_incref(cur);
        r->slots[r->nslots++] = (SlotSet){i, cur};
        slot_set(&ck->last[i], cur);
    }
    for (int k = 0; k < ck->nvars; k++) {
        tfe_tensor *cur = variable_peek(ck->vars[k]);
        if (cur == ck->var_last[k]) continue;
        r->vars = xrealloc(r->vars, sizeof *r->vars * (size_t)(r->nvars + 1));
        tensor_incref(cur);
        r->vars[r->nvars++] = (VarSet){k, cur};
        tensor_incref(cur);
        tensor_decref(ck->var_last[k]);
        ck->var_last[k] = cur;
    }
}

/* A builtin that only checks values (Builtin.value_check): an eager run
 * checks inline, with no call to match, so both runs call it for real. */
static bool is_value_check(Value f)
{
    return f.kind == V_BUILTIN && ((const Builtin *)f.u.o)->value_check;
}

/* A call that computes a gradient inside a graph (f.vjp, the check that a
 * gradient is zero): not an effect of the body, so never recorded or
 * replayed; it runs for real in whichever run makes it (the eager run's
 * tapes make none). */
static int call_gradient(Interp *I, Value f, int argc, const Value *argv, int nkw, Str *const *kwnames,
                         const Value *kwvals, Value *out)
{
    bool saved = I->check_recording;
    I->check_recording = false;
    int rc = call_value(I, f, argc, argv, nkw, kwnames, kwvals, out);
    I->check_recording = saved;
    return rc;
}

/* After a @host call: what it did to the lists and records it got (their
 * state after it, when it changed them) and to those of the watched
 * bindings, which the graph reads back. */
static void note_containers(Check *ck, HostRec *r)
{
    r->after = xmalloc(sizeof *r->after * (size_t)(r->nargs + 1));
    for (int i = 0; i < r->nargs; i++) {
        Value now = r->orig[i];
        r->after[i] = has_mutable(now) && !value_same(now, r->args[i]) ? sig_copy_containers(now) : v_nil();
    }
    if (r->f.kind != V_FN) return;
    for (int w = 0; w < ck->nwatch; w++) {
        Value v = *slot_at(ck, ck->watch[w]);
        if (!has_mutable(v)) continue;
        r->held = xrealloc(r->held, sizeof *r->held * (size_t)(r->nheld + 1));
        r->held[r->nheld++] = (SlotSet){ck->watch[w], sig_copy_containers(v)};
    }
}

int check_host_eager(Interp *I, Value f, int argc, const Value *argv, int nkw,
                     Str *const *kwnames, const Value *kwvals, Value *out)
{
    Check *ck = I->check_eager;
    if (host_is_gradient_call(f) || is_value_check(f)) return call_gradient(I, f, argc, argv, nkw, kwnames, kwvals, out);
    if (ck->nrec == ck->caprec) {
        ck->caprec = ck->caprec ? ck->caprec * 2 : 8;
        ck->recs = xrealloc(ck->recs, sizeof *ck->recs * (size_t)ck->caprec);
    }
    HostRec r = {0};
    r.f = f;
    value_incref(f);
    r.nargs = argc + nkw;
    r.nkw = nkw;
    r.args = xmalloc(sizeof *r.args * (size_t)(r.nargs + 1));
    r.orig = xmalloc(sizeof *r.orig * (size_t)(r.nargs + 1));
    for (int i = 0; i < r.nargs; i++) {
        r.orig[i] = i < argc ? argv[i] : kwvals[i - argc];
        value_incref(r.orig[i]);
        /* as it is now: the call may change a list or record it gets; a
         * variable given to an assign, its value (the call reads it, and
         * the graph reads it first: stage/trace.c, trace_host_call) */
        if (value_is_variable(r.orig[i]) && variable_assign_target(f, NULL)) {
            tfe_tensor *t = variable_peek(r.orig[i]);
            tensor_incref(t);
            r.args[i] = v_tensor_take(t);
        } else {
            r.args[i] = sig_copy_containers(r.orig[i]);
        }
    }
    r.kwnames = xmalloc(sizeof *r.kwnames * (size_t)(nkw + 1));
    for (int k = 0; k < nkw; k++) r.kwnames[k] = xstrdup(kwnames[k]->s);
    r.loc = I->cur_loc;
    sync_last(ck);
    if (f.kind == V_FN) note_seen(ck, &r);
    tfe_random_state(&r.key0, &r.ctr0);
    /* its body is not part of the comparison: a host call is one node */
    I->check_recording = false;
    int rc = call_value(I, f, argc, argv, nkw, kwnames, kwvals, out);
    I->check_recording = true;
    tfe_random_state(&r.key1, &r.ctr1);
    r.failed = rc != 0;
    r.result = rc ? v_nil() : *out;
    value_incref(r.result);
    note_changes(ck, &r);
    note_containers(ck, &r);
    ck->recs[ck->nrec++] = r;
    return rc;
}

static void recs_free(Check *ck)
{
    for (int i = 0; i < ck->nrec; i++) {
        HostRec *r = &ck->recs[i];
        value_decref(r->f);
        for (int k = 0; k < r->nargs; k++) {
            value_decref(r->args[k]);
            value_decref(r->orig[k]);
            if (r->after) value_decref(r->after[k]);
        }
        free(r->args);
        free(r->orig);
        free(r->after);
        for (int k = 0; k < r->nheld; k++) value_decref(r->held[k].v);
        free(r->held);
        for (int k = 0; k < r->nkw; k++) free(r->kwnames[k]);
        free(r->kwnames);
        value_decref(r->result);
        for (int k = 0; k < r->nslots; k++) value_decref(r->slots[k].v);
        free(r->slots);
        for (int k = 0; k < r->nseen; k++) value_decref(r->seen[k].v);
        free(r->seen);
        for (int k = 0; k < r->nvars; k++) tensor_decref(r->vars[k].t);
        free(r->vars);
    }
    free(ck->recs);
    for (int i = 0; i < ck->nops; i++) tensor_decref(ck->ops[i].t);
    free(ck->ops);
}

/* --- the staged run's host calls ------------------------------------------------------------------ */

static int replay_abort(Check *ck, Interp *I, const char *fmt, const char *a, const char *b)
{
    char msg[1200], what[1000];
    snprintf(what, sizeof what, fmt, a, b);
    snprintf(msg, sizeof msg, "check-staged: %s(...) differs from eager: %s", ck->c->name, what);
    ck->abort = true;
    return raise_msg_at(I, I->cur_loc, msg);
}

/* The graph calls name() where the eager run made no more host calls:
 * a difference, or, when the eager run stopped with an error before this
 * place, that error's (conclude reports it: eager stops there, staged does
 * not; an allocation that fails in one run only, say). */
static int past_records(Check *ck, Interp *I, const char *name)
{
    if (!ck->eager_failed)
        return replay_abort(ck, I, "the graph calls %s() here, and the eager run made no host call here%s", name, "");
    ck->past_error = true;
    return raise_msg_at(I, I->cur_loc, "check-staged: past the place where the eager run stopped");
}

static bool same_callee(Value a, Value b)
{
    if (a.kind != b.kind) return false;
    if (a.kind == V_BUILTIN) return same_builtin(a, b);
    if (a.kind == V_FN) return ((Closure *)a.u.o)->fn == ((Closure *)b.u.o)->fn;
    return same_bits(a, b);
}

static int callee_differs(Check *ck, Interp *I, Value sf, Value ef)
{
    const char *name = callee_name(sf);
    if (strcmp(name, callee_name(ef)) || sf.kind != V_BUILTIN || ef.kind != V_BUILTIN)
        return replay_abort(ck, I, "the graph calls %s() here where the eager run called %s()", name, callee_name(ef));
    Value a = ((Builtin *)sf.u.o)->self, b = ((Builtin *)ef.u.o)->self;
    if (value_is_variable(a) && value_is_variable(b))
        return replay_abort(ck, I, "host call %s() acts on another variable staged than eagerly%s (a staged function "
                            "makes its variables at its first trace only, eager code at every call)", name, "");
    char *ra = value_repr(a), *rb = value_repr(b), what[600];
    snprintf(what, sizeof what, "host call %s() acts on another object: staged on %.200s, eager on %.200s", name, ra, rb);
    free(ra);
    free(rb);
    return replay_abort(ck, I, "%s%s", what, "");
}

static int replay_args(Check *ck, Interp *I, HostRec *r, const char *name, int argc, const Value *argv, int nkw,
                       Str *const *kwnames, const Value *kwvals)
{
    char n1[32], n2[32];
    if (argc + nkw != r->nargs || nkw != r->nkw) {
        snprintf(n1, sizeof n1, "%d", argc + nkw);
        snprintf(n2, sizeof n2, "%d", r->nargs);
        char fmt[200];
        snprintf(fmt, sizeof fmt, "host call %s() gets %%s arguments staged, %%s eagerly", name);
        return replay_abort(ck, I, fmt, n1, n2);
    }
    for (int k = 0; k < nkw; k++)
        if (strcmp(kwnames[k]->s, r->kwnames[k]))
            return replay_abort(ck, I, "host call keyword arguments differ: staged '%s', eager '%s'", kwnames[k]->s,
                                r->kwnames[k]);
    for (int i = 0; i < r->nargs; i++) {
        char path[300], what[900];
        if (i < argc) snprintf(path, sizeof path, "host call %s() argument %d", name, i + 1);
        else snprintf(path, sizeof path, "host call %s() argument %s", name, kwnames[i - argc]->s);
        Value a = i < argc ? argv[i] : kwvals[i - argc];
        /* the very object the eager call got (a list made outside): the
         * same argument, whatever the eager run did to it since */
        if (same_bits(a, r->orig[i])) continue;
        if (vdiff(a, r->args[i], path, what, sizeof what, 0)) return replay_abort(ck, I, "%s%s", what, "");
    }
    return 0;
}

/* A @host function sees the bindings as the eager run showed them: one the
 * body assigned before the call must already hold its new value. */
static int replay_seen(Check *ck, Interp *I, HostRec *r, const char *name)
{
    for (int i = 0, k = 0; i < ck->nslot; i++) {
        Value want = ck->pre[i];
        if (k < r->nseen && r->seen[k].idx == i) want = r->seen[k++].v;
        char bname[300], path[400], what[900];
        binding_name(ck, i, bname, sizeof bname);
        snprintf(path, sizeof path, "host call %s() sees binding %s", name, bname);
        if (vdiff(*slot_at(ck, i), want, path, what, sizeof what, 0)) return replay_abort(ck, I, "%s%s", what, "");
    }
    return 0;
}

/* What the eager host call changed, made again in the staged run. A draw
 * inside it advances the stream by as much; seed() sets it. A list or
 * record it changed in place, an argument (the staged run's copy, or the
 * object itself) or one a watched binding holds, is made to hold what the
 * eager call left in it, so the host node's outputs and `host load` read
 * that back. */
static void replay_changes(Check *ck, HostRec *r, const Value *args, int skip_var)
{
    if (r->key1 != r->key0) tfe_random_restore(r->key1, r->ctr1);
    else if (r->ctr1 != r->ctr0) {
        uint64_t key, ctr;
        tfe_random_state(&key, &ctr);
        tfe_random_restore(key, ctr + (r->ctr1 - r->ctr0));
    }
    for (int k = 0; k < r->nslots; k++) slot_set(slot_at(ck, r->slots[k].idx), r->slots[k].v);
    for (int k = 0; k < r->nvars; k++)
        if (r->vars[k].var != skip_var) var_set_staged(ck, ck->vars[r->vars[k].var], r->vars[k].t);
    for (int i = 0; i < r->nargs; i++)
        if (args && r->after[i].kind != V_NIL) contents_assign(args[i], r->after[i], 0);
    for (int k = 0; k < r->nheld; k++) contents_assign(*slot_at(ck, r->held[k].idx), r->held[k].v, 0);
}

int check_host_replay(Interp *I, Value f, int argc, const Value *argv, int nkw,
                      Str *const *kwnames, const Value *kwvals, Value *out)
{
    Check *ck = I->check_replay;
    const char *name = callee_name(f);
    *out = v_nil();
    if (host_is_gradient_call(f) || is_value_check(f)) return call_gradient(I, f, argc, argv, nkw, kwnames, kwvals, out);
    if (ck->cursor >= ck->nrec) return past_records(ck, I, name);
    HostRec *r = &ck->recs[ck->cursor++];
    if (!same_callee(f, r->f)) return callee_differs(ck, I, f, r->f);
    if (replay_args(ck, I, r, name, argc, argv, nkw, kwnames, kwvals)) return -1;
    if (f.kind == V_FN && replay_seen(ck, I, r, name)) return -1;
    Value *args = xmalloc(sizeof *args * (size_t)(r->nargs + 1));
    for (int i = 0; i < r->nargs; i++) args[i] = i < argc ? argv[i] : kwvals[i - argc];
    replay_changes(ck, r, args, -1);
    free(args);
    if (r->failed) { /* the eager run stopped in this call; so does this one, with that error */
        ck->hit_error = true;
        return raise_msg_at(I, I->cur_loc, "check-staged: the eager run's error");
    }
    *out = r->result;
    value_incref(*out);
    return 0;
}

/* The index of variable var among those the check restores, or -1. */
static int var_index(Check *ck, Value var)
{
    for (int k = 0; k < ck->nvars; k++)
        if (ck->vars[k].u.o == var.u.o) return k;
    return -1;
}

bool check_update_tracked(Interp *I, Value f)
{
    Check *ck = I->check_replay;
    return ck && !ck->grads && f.kind == V_BUILTIN && value_is_variable(((Builtin *)f.u.o)->self) &&
           var_index(ck, ((Builtin *)f.u.o)->self) >= 0;
}

/* The graph wrote the update's result over the variable (its call did not
 * run, so there is no argument to compare): the eager call it stands for
 * must be the same update, and must have left the variable with the same
 * bits. Its other changes are made again as a replay makes them. */
int check_update_replay(Interp *I, Value f, const tfe_tensor *w)
{
    Check *ck = I->check_replay;
    const char *name = callee_name(f);
    if (ck->cursor >= ck->nrec) return past_records(ck, I, name);
    HostRec *r = &ck->recs[ck->cursor++];
    if (!same_callee(f, r->f)) return callee_differs(ck, I, f, r->f);
    int k = var_index(ck, ((Builtin *)f.u.o)->self);
    const tfe_tensor *want = NULL;
    for (int j = 0; j < r->nvars; j++)
        if (r->vars[j].var == k) want = r->vars[j].t;
    if (!r->failed) {
        char path[300], what[900];
        snprintf(path, sizeof path, "the variable after host call %s()", name);
        if (!want) return replay_abort(ck, I, "%s: the eager call left it as it was%s", path, "");
        if (tensor_diff(w, want, path, what, sizeof what)) return replay_abort(ck, I, "%s%s", what, "");
    }
    replay_changes(ck, r, NULL, k);
    if (r->failed) {
        ck->hit_error = true;
        return raise_msg_at(I, I->cur_loc, "check-staged: the eager run's error");
    }
    return 0;
}

/* --- reporting -------------------------------------------------------------------------------------- */

/* Raise msg at loc with the frames of an eager run there: the current ones
 * (the staged function's) and the calls the trace inlined on the way. */
static int raise_with_frames(Interp *I, Loc loc, const GFrames *fr, const char *msg)
{
    int saved = frames_push_at(I, I->nframes, fr ? fr->f : NULL, fr ? fr->n : 0);
    raise_msg_at(I, loc, msg);
    frames_pop_to(I, saved);
    return -1;
}

static bool same_loc(Loc a, Loc b) { return a.src == b.src && a.off == b.off && a.len == b.len; }

/* The key an op is matched by: the op, the expression, the result's type. */
static uint64_t op_key(tfe_op op, Loc loc, const tfe_tensor *t)
{
    uint64_t h = 1469598103934665603u;
    uint64_t parts[5] = {(uint64_t)op, (uint64_t)(uintptr_t)loc.src, (uint64_t)loc.off, (uint64_t)loc.len,
                         (uint64_t)t->dtype << 8 | (uint64_t)t->rank};
    for (int i = 0; i < 5 + t->rank; i++) {
        h ^= i < 5 ? parts[i] : (uint64_t)t->shape[i - 5];
        h *= 1099511628211u;
    }
    return h ? h : 1;
}

/* Per key: how many eager ops and top-level graph nodes have it, and the
 * next eager op of it not yet matched (open addressing; 0: empty). */
typedef struct KeyCount { uint64_t key; int ne, ng, next; } KeyCount;

static KeyCount *key_slot(KeyCount *m, int cap, uint64_t key)
{
    int i = (int)(key % (uint64_t)cap);
    while (m[i].key && m[i].key != key) i = (i + 1) % cap;
    if (!m[i].key) m[i] = (KeyCount){key, 0, 0, -1};
    return &m[i];
}

/* Pair top-level graph ops with eager ops: the k-th op of a key with the
 * k-th eager op of that key, for keys the graph and the eager run have as
 * many of. Others are left out: an expression that made ops inside a staged
 * loop (a gradient's, say) made more eagerly than at the top, and their
 * order tells nothing. pair[i] for top->nodes[i]: an eager op, or -1. */
static void pair_ops(Check *ck, Graph *B, GRun *x, int *pair)
{
    GRegion *top = &B->regions[0];
    int cap = 2 * (ck->nops + top->n) + 1;
    KeyCount *m = xcalloc((size_t)cap, sizeof *m);
    uint64_t *gk = xcalloc((size_t)top->n + 1, sizeof *gk);
    int *next = xmalloc(sizeof *next * (size_t)(ck->nops + 1));
    for (int k = ck->nops - 1; k >= 0; k--) { /* a list per key, in order */
        KeyCount *c = key_slot(m, cap, op_key(ck->ops[k].op, ck->ops[k].loc, ck->ops[k].t));
        c->ne++;
        next[k] = c->next;
        c->next = k;
    }
    for (int i = 0; i < top->n; i++) {
        const GNode *n = &B->nodes[top->nodes[i]];
        tfe_tensor *sv = n->kind == G_OP && n->nout >= 1 ? x->v[n->vbase] : NULL;
        if (sv) key_slot(m, cap, gk[i] = op_key(n->op, n->loc, sv))->ng++;
    }
    for (int i = 0; i < top->n; i++) {
        pair[i] = -1;
        if (!gk[i]) continue;
        KeyCount *c = key_slot(m, cap, gk[i]);
        if (c->ne != c->ng || c->next < 0) continue;
        pair[i] = c->next;
        c->next = next[c->next];
    }
    free(next);
    free(gk);
    free(m);
}

/* Run the graph as traced again, node by node, from the state before the
 * call (host nodes replayed again), and compare each top-level op with its
 * eager op (pair_ops): the first one whose value differs, with the
 * difference into what; NULL if none does. */
static int eager_outputs(Check *ck, Value eres, Leaves *el);

static const GNode *first_bad_node(Check *ck, Leaves *lv, Value eres, Graph **gp, char *what, size_t cap)
{
    Interp *I = ck->I;
    Graph *B = ck->t->g->raw ? ck->t->g->raw : ck->t->g;
    *gp = B;
    state_restore_pre(ck);
    ck->cursor = 0;
    GRun x;
    grun_init(&x, I, B, lv->t);
    int saved_tapes = tfe_tapes_active;
    tfe_tapes_active = 0;
    ck->I->check_replay = ck;
    int rc = grun_region(&x, 0);
    ck->I->check_replay = NULL;
    tfe_tapes_active = saved_tapes;
    if (rc) error_clear(I);
    const GNode *bad = NULL;
    GRegion *top = &B->regions[0];
    int *pair = xmalloc(sizeof *pair * (size_t)(top->n + 1));
    pair_ops(ck, B, &x, pair);
    for (int i = 0; i < top->n && !bad; i++) {
        const GNode *n = &B->nodes[top->nodes[i]];
        if (pair[i] >= 0 && tensor_diff(x.v[n->vbase], ck->ops[pair[i]].t, "", what, cap)) bad = n;
    }
    /* no op differs: the node that made the first output that does (a cond
     * or while as a whole, a host call, a variable read) */
    Leaves el = {0};
    if (!bad && eager_outputs(ck, eres, &el) == top->nouts)
        for (int k = 0; k < top->nouts && !bad; k++) {
            tfe_tensor *sv = grun_value(&x, top->outs[k]);
            if (sv && tensor_diff(sv, el.t[k], "", what, cap)) bad = &B->nodes[top->outs[k].node];
        }
    leaves_free(&el);
    free(pair);
    grun_release(&x);
    return bad;
}

/* The eager run's values of the graph's outputs: the result's leaves, then
 * those of each outside binding the graph writes. Returns how many. */
static int eager_outputs(Check *ck, Value eres, Leaves *el)
{
    SigBuf sb = {0};
    sig_flatten(eres, &sb, el, SIG_OUTPUT);
    for (int i = 0; i < ck->t->nouts; i++) {
        OutsideSig *o = &ck->t->outs[i];
        if (!o->written) continue;
        int k = 0;
        while (k < ck->nenv && ck->envs[k] != o->env) k++;
        if (k == ck->nenv) return -1;
        sig_reset(&sb);
        sig_flatten(ck->eager_end[ck->base[k] + o->slot], &sb, el, SIG_OUTPUT);
    }
    sig_free(&sb);
    return el->n;
}

/* A difference in a value: where it is (what), located at the first node
 * that differs, else at the call. */
static int report_value(Check *ck, Leaves *lv, Value eres, Loc call_loc, const char *what)
{
    Interp *I = ck->I;
    char msg[2400], nwhat[900] = "";
    Graph *B = NULL;
    const GNode *bad = first_bad_node(ck, lv, eres, &B, nwhat, sizeof nwhat);
    /* (a node with no line, an input or a constant, is not where the
     * difference starts: the call is) */
    if (bad && bad->loc.line > 0) {
        const char *kind = bad->kind == G_OP ? tfe_ops[bad->op].name : bad->kind == G_COND ? "cond"
                         : bad->kind == G_WHILE ? "while" : bad->kind == G_HOST ? "host"
                         : bad->kind == G_VAR_READ ? "var_read" : bad->kind == G_INPUT ? "input"
                         : bad->kind == G_CONST ? "const" : bad->kind == G_PARAM ? "param" : "fused";
        snprintf(msg, sizeof msg, "check-staged: %s(...) differs from eager: %s; first %s that differs: "
                 "%%%d = %s, line %d%s", ck->c->name, what, bad->kind == G_OP ? "op" : "node",
                 (int)(bad - B->nodes), kind, bad->loc.line, nwhat);
        return raise_with_frames(I, bad->loc, bad->frames, msg);
    }
    snprintf(msg, sizeof msg, "check-staged: %s(...) differs from eager: %s", ck->c->name, what);
    I->nframes--; /* at the call site: the staged function's frame is not yet entered */
    raise_msg_at(I, call_loc, msg);
    I->nframes++;
    return -1;
}

/* Both runs returned: the first difference in results, bindings, the random
 * stream and host calls, into what; false if there is none. */
static bool outcome_diff(Check *ck, Value sres, Value eres, char *what, size_t cap)
{
    if (vdiff(sres, eres, "result", what, cap, 0)) return true;
    for (int i = 0; i < ck->nslot; i++) {
        char name[300], path[400];
        binding_name(ck, i, name, sizeof name);
        snprintf(path, sizeof path, "binding %s", name);
        if (vdiff(*slot_at(ck, i), ck->eager_end[i], path, what, cap, 0)) return true;
    }
    uint64_t key, ctr;
    tfe_random_state(&key, &ctr);
    if (key != ck->key_eager || ctr != ck->ctr_eager) {
        snprintf(what, cap, "the random stream: staged drew %lld values, eager %lld%s",
                 (long long)(ctr - ck->ctr_pre), (long long)(ck->ctr_eager - ck->ctr_pre),
                 key != ck->key_eager ? " (and the seed differs)" : "");
        return true;
    }
    if (ck->cursor < ck->nrec) {
        snprintf(what, cap, "the eager run calls %s() at line %d, the graph does not",
                 callee_name(ck->recs[ck->cursor].f), ck->recs[ck->cursor].loc.line);
        return true;
    }
    return false;
}

/* --- gradients ------------------------------------------------------------------------------------------ */

static void sources_collect(Check *ck, Leaves *lv)
{
    Graph *g = ck->t->g;
    int cap = lv->n + ck->nvars + 1;
    ck->src = xmalloc(sizeof *ck->src * (size_t)cap);
    ck->src_name = xmalloc(sizeof *ck->src_name * (size_t)cap);
    ck->src_var = xmalloc(sizeof *ck->src_var * (size_t)cap);
    for (int i = 0; i < lv->n; i++) {
        /* a number's leaf is a tensor made for the graph (only lv holds it):
         * the eager run never sees it, so it has no eager gradient */
        if (!dtype_is_float(lv->t[i]->dtype) || lv->t[i]->refcount < 2) continue;
        const char *label = i < g->ninputs ? gnode(g, g->inputs[i])->label : NULL;
        ck->src_name[ck->nsrc] = label ? label : "an input";
        ck->src_var[ck->nsrc] = v_nil();
        ck->src[ck->nsrc++] = lv->t[i];
    }
    for (int k = 0; k < ck->nvars; k++) {
        if (!dtype_is_float(ck->var_pre[k]->dtype)) continue;
        ck->src_name[ck->nsrc] = NULL;
        ck->src_var[ck->nsrc] = ck->vars[k];
        ck->src[ck->nsrc++] = ck->var_pre[k];
    }
}

static tfe_tape *tape_begin(Check *ck)
{
    tfe_tape *t = tfe_tape_new(false);
    tfe_tape_set_aside(t); /* (a second order takes the program's path: tfe_tapes_recording) */
    tfe_tape_push(t);
    for (int i = 0; i < ck->nsrc; i++) tfe_tape_watch(t, ck->src[i]);
    return t;
}

/* On the active tapes: the sum of every float leaf of v (a gradient of 1
 * for each element of the result), or NULL when it has none. */
static tfe_tensor *total_of(Value v)
{
    SigBuf sb = {0};
    Leaves lv = {0};
    sig_flatten(v, &sb, &lv, SIG_OUTPUT);
    sig_free(&sb);
    tfe_tensor *total = NULL;
    tfe_attrs at;
    tfe_attrs_init(&at);
    for (int i = 0; i < lv.n; i++) {
        if (!dtype_is_float(lv.t[i]->dtype)) continue;
        tfe_tensor *s, *sum2;
        if (tfe_execute(OP_SUM, 1, &lv.t[i], &at, &s)) break;
        if (!total) {
            total = s;
            continue;
        }
        tfe_tensor *in[2] = {total, s};
        int rc = tfe_execute(OP_ADD, 2, in, NULL, &sum2);
        tensor_decref(total);
        tensor_decref(s);
        total = rc ? NULL : sum2;
        if (!total) break;
    }
    tfe_error_clear();
    leaves_free(&lv);
    return total;
}

static void tape_end(tfe_tape **t, Value res, tfe_tensor **target)
{
    *target = total_of(res);
    tfe_tape_pop(*t);
}

/* The bindings, the variables the graph reads and the random stream, as
 * they are now, to put back after something the program did not ask for. */
typedef struct StateKeep { Value *slots; tfe_tensor **vars; uint64_t key, ctr; } StateKeep;

static void state_keep(Check *ck, StateKeep *k)
{
    k->slots = slots_take(ck);
    k->vars = xmalloc(sizeof *k->vars * (size_t)(ck->nvars + 1));
    for (int i = 0; i < ck->nvars; i++) {
        k->vars[i] = variable_peek(ck->vars[i]);
        tensor_incref(k->vars[i]);
    }
    tfe_random_state(&k->key, &k->ctr);
}

static void state_put_back(Check *ck, StateKeep *k)
{
    slots_restore(ck, k->slots);
    slots_free(k->slots, ck->nslot);
    for (int i = 0; i < ck->nvars; i++) {
        var_set(ck->vars[i], k->vars[i]);
        tensor_decref(k->vars[i]);
    }
    free(k->vars);
    tfe_random_restore(k->key, k->ctr);
}

/* The gradients of both runs' totals with respect to the sources: the first
 * difference into what (a missing gradient counts as zeros). */
static bool grad_diff(Check *ck, char *what, size_t cap)
{
    if (!ck->target_e || !ck->target_s || !ck->nsrc) return false;
    tfe_tensor **ge = xcalloc((size_t)ck->nsrc, sizeof *ge), **gs = xcalloc((size_t)ck->nsrc, sizeof *gs);
    bool d = false;
    /* eager's gradient, then the staged one (even where eager's stops: an
     * error both give is the program's, not a difference) */
    int rce = tfe_tape_gradient(ck->tape_e, ck->target_e, ck->nsrc, ck->src, ge);
    char emsg[600] = "";
    if (rce) {
        snprintf(emsg, sizeof emsg, "%s", tfe_error_msg());
        tfe_error_clear();
    }
    ck->I->stage_limit = false;
    /* the staged backward calls @host functions again (their f.vjp);
     * this gradient is the check's own, not the program's: what they
     * change is put back */
    StateKeep keep;
    state_keep(ck, &keep);
    int rcs = tfe_tape_gradient(ck->tape_s, ck->target_s, ck->nsrc, ck->src, gs);
    state_put_back(ck, &keep);
    if ((rcs && ck->I->stage_limit) || (rce && rcs)) {
        /* the staged gradient stops at a documented limit, or both stop
         * (eager's det at a singular matrix): the program's own gradient,
         * if it takes one, stops there with its error, which is not a
         * difference. (The texts are not compared: this tape's staged
         * backward is the check's, and may stop at another op of the same
         * rule, inv for det, than the program's gradient does.) */
        tfe_error_clear();
        if (ck->I->has_error) error_clear(ck->I);
        for (int i = 0; i < ck->nsrc; i++) {
            if (ge[i]) tensor_decref(ge[i]);
            if (gs[i]) tensor_decref(gs[i]);
            ge[i] = gs[i] = NULL;
        }
    } else if (rcs) {
        snprintf(what, cap, "the gradient: %s", tfe_error_msg());
        tfe_error_clear();
        d = true;
    } else if (rce) {
        snprintf(what, cap, "the gradient: eager stops with \"%s\", staged does not", emsg);
        d = true;
    }
    for (int i = 0; i < ck->nsrc && !d; i++) {
        char path[400];
        if (ck->src_name[i]) snprintf(path, sizeof path, "the gradient with respect to %s", ck->src_name[i]);
        else {
            char *r = value_repr(ck->src_var[i]);
            snprintf(path, sizeof path, "the gradient with respect to %s", r);
            free(r);
        }
        tfe_tensor *a = gs[i] ? gs[i] : tensor_zeros(ck->src[i]->dtype, ck->src[i]->rank, ck->src[i]->shape);
        tfe_tensor *b = ge[i] ? ge[i] : tensor_zeros(ck->src[i]->dtype, ck->src[i]->rank, ck->src[i]->shape);
        if (gs[i] || ge[i]) d = tensor_diff(a, b, path, what, cap);
        if (!gs[i]) tensor_decref(a);
        if (!ge[i]) tensor_decref(b);
    }
    for (int i = 0; i < ck->nsrc; i++) {
        if (ge[i]) tensor_decref(ge[i]);
        if (gs[i]) tensor_decref(gs[i]);
    }
    free(ge);
    free(gs);
    return d;
}

static void grads_free(Check *ck)
{
    if (ck->tape_e) tfe_tape_free(ck->tape_e);
    if (ck->tape_s) tfe_tape_free(ck->tape_s);
    if (ck->target_e) tensor_decref(ck->target_e);
    if (ck->target_s) tensor_decref(ck->target_s);
    free(ck->src);
    free(ck->src_name);
    free(ck->src_var);
}

/* --- the call ------------------------------------------------------------------------------------------ */

typedef struct SavedError { bool has; char *msg; Loc loc; Frame *frames; int nframes; } SavedError;

static void error_take(Interp *I, SavedError *s)
{
    *s = (SavedError){I->has_error, I->err_msg, I->err_loc, I->err_frames, I->err_nframes};
    I->has_error = false;
    I->err_msg = NULL;
    I->err_loc.src = NULL;
    I->err_frames = NULL;
    I->err_nframes = 0;
}

static void error_put(Interp *I, SavedError *s)
{
    error_clear(I);
    I->has_error = s->has;
    I->err_msg = s->msg;
    I->err_loc = s->loc;
    I->err_frames = s->frames;
    I->err_nframes = s->nframes;
    *s = (SavedError){0};
}

static void error_drop(Interp *I, SavedError *s)
{
    if (!s->has) return;
    SavedError mine;
    error_take(I, &mine);
    error_put(I, s);
    error_clear(I);
    error_put(I, &mine);
}

/* Replace the pending error's message (its place and frames stay). */
static void error_retext(Interp *I, const char *fmt, const char *a, const char *b)
{
    char msg[2400];
    snprintf(msg, sizeof msg, fmt, a, b);
    free(I->err_msg);
    I->err_msg = xstrdup(msg);
}

static int run_eager(Check *ck, Env *e, Value *out)
{
    Interp *I = ck->I;
    Closure *c = ck->c;
    FnInfo *info = c->fn->info;
    Env *e2 = env_new(I, info->nslots, c->env);
    for (int i = 0; i < info->nparams; i++) {
        e2->slots[i] = e->slots[i];
        value_incref(e2->slots[i]);
    }
    bool saved_eager = ck->I->run_eagerly;
    int saved_tapes = tfe_tapes_active;
    int (*saved_hook)(tfe_op, int, tfe_tensor *const *, const tfe_attrs *, tfe_tensor **) = tfe_trace_hook;
    ck->I->check_eager = ck;
    ck->I->check_recording = true;
    ck->I->run_eagerly = true;   /* staged calls inside are inlined by a trace: eager here */
    /* the staged run is what an outer tape records; under one, this run has
     * a tape of its own (which an outer one sees too, to no effect) */
    if (ck->grads) ck->tape_e = tape_begin(ck);
    else tfe_tapes_active = 0;
    tfe_trace_hook = exec_hook;
    int rc = interp_run_body(I, c, e2, out);
    tfe_trace_hook = saved_hook;
    if (ck->grads) tape_end(&ck->tape_e, rc ? v_nil() : *out, &ck->target_e);
    tfe_tapes_active = saved_tapes;
    ck->I->run_eagerly = saved_eager;
    ck->I->check_recording = false;
    ck->I->check_eager = NULL;
    env_decref(e2);
    return rc;
}

/* The bindings graph g reads back after @host calls: a `host load` node's,
 * and one whose value a host node passes as that very object. Called twice:
 * first to add their Envs (add), then to list their flat indices. */
static void watch_graph(Check *ck, const Graph *g, bool add)
{
    for (int i = 0; g && i < g->n; i++) {
        const HostSync *s = g->nodes[i].kind == G_HOST ? g->nodes[i].host->sync : NULL;
        for (int j = -1; s && j < s->nafter; j++) {
            Env *e = j < 0 ? (s->write ? NULL : s->env) : s->after[j].env;
            int slot = j < 0 ? s->slot : s->after[j].slot;
            if (!e) continue;
            if (add) {
                env_add(ck, e);
                continue;
            }
            int k = 0;
            while (k < ck->nenv && ck->envs[k] != e) k++;
            int idx = ck->base[k] + slot;
            bool dup = false;
            for (int w = 0; w < ck->nwatch && !dup; w++) dup = ck->watch[w] == idx;
            if (dup) continue;
            ck->watch = xrealloc(ck->watch, sizeof *ck->watch * (size_t)(ck->nwatch + 1));
            ck->watch[ck->nwatch++] = idx;
        }
    }
}

static void check_setup(Check *ck)
{
    for (Env *p = ck->c->env; p; p = p->parent) env_add(ck, p);
    for (int i = 0; i < ck->t->nouts; i++) env_add(ck, ck->t->outs[i].env);
    watch_graph(ck, ck->t->g, true);
    watch_graph(ck, ck->t->g->raw, true);
    ck->base = xmalloc(sizeof *ck->base * (size_t)(ck->nenv + 1));
    for (int k = 0; k < ck->nenv; k++) {
        ck->base[k] = ck->nslot;
        ck->nslot += ck->envs[k]->nslots;
    }
    watch_graph(ck, ck->t->g, false);
    watch_graph(ck, ck->t->g->raw, false);
    ck->pre = slots_take(ck);
    ck->last = slots_take(ck);
    vars_collect(ck);
    tfe_random_state(&ck->key_pre, &ck->ctr_pre);
}

static void check_free(Check *ck)
{
    recs_free(ck);
    slots_free(ck->pre, ck->nslot);
    slots_free(ck->last, ck->nslot);
    slots_free(ck->eager_end, ck->nslot);
    for (int k = 0; k < ck->nvars; k++) {
        tensor_decref(ck->var_pre[k]);
        tensor_decref(ck->var_last[k]);
    }
    free(ck->var_pre);
    free(ck->var_last);
    free(ck->vars);
    free(ck->envs);
    free(ck->base);
    free(ck->watch);
}

/* Both runs over: keep the staged result, or raise the difference. */
static int conclude(Check *ck, Leaves *lv, Loc call_loc, int erc, Value eres, SavedError *eerr, int src, Value *sres)
{
    Interp *I = ck->I;
    const char *name = ck->c->name;
    char what[1000];
    if (ck->abort) return -1; /* a host call differed: that error is raised */
    if (ck->past_error) src = 0; /* the graph went on where eager code stopped (below) */
    if (src && ck->hit_error) { /* the same host call failed: the eager error is the error */
        error_put(I, eerr);
        return -1;
    }
    if (src && erc) {
        if (!strcmp(I->err_msg, eerr->msg) && same_loc(I->err_loc, eerr->loc)) return -1;
        snprintf(what, sizeof what, "check-staged: %s(...) differs from eager: staged stops here with \"%%s\", "
                 "eager with \"%%s\"", name);
        error_retext(I, what, I->err_msg, eerr->msg);
        return -1;
    }
    if (src && ck->limit) return -1; /* a located error that says how to write it so it stages */
    if (src) {
        snprintf(what, sizeof what, "check-staged: %s(...) differs from eager: staged stops here with \"%%s\"%%s, "
                 "eager does not", name);
        error_retext(I, what, I->err_msg, "");
        return -1;
    }
    if (erc) {
        value_decref(*sres);
        *sres = v_nil();
        error_clear(I);
        error_put(I, eerr);
        snprintf(what, sizeof what, "check-staged: %s(...) differs from eager: eager stops here with \"%%s\"%%s, "
                 "staged does not", name);
        error_retext(I, what, I->err_msg, "");
        return -1;
    }
    if (outcome_diff(ck, *sres, eres, what, sizeof what)) {
        value_decref(*sres);
        *sres = v_nil();
        return report_value(ck, lv, eres, call_loc, what);
    }
    if (ck->grads && grad_diff(ck, what, sizeof what)) {
        char msg[1200];
        snprintf(msg, sizeof msg, "check-staged: %s(...) differs from eager: %s", name, what);
        I->nframes--;
        raise_msg_at(I, call_loc, msg);
        I->nframes++;
        return -1;
    }
    return 0;
}

int stage_check_call(Interp *I, Closure *c, Env *e, Trace *t, Leaves *lv, Loc call_loc,
                     CheckRunFn run_graph, Value *out)
{
    if (I->check_eager || I->check_replay) return run_graph(I, t, lv, out);
    Check ck = {.I = I, .c = c, .t = t, .grads = tfe_tapes_active > 0};
    check_setup(&ck);
    if (ck.grads) sources_collect(&ck, lv);
    Value eres = v_nil();
    SavedError eerr = {0};
    int erc = run_eager(&ck, e, &eres);
    if (erc) error_take(I, &eerr);
    ck.eager_failed = erc != 0;
    ck.eager_end = slots_take(&ck);
    tfe_random_state(&ck.key_eager, &ck.ctr_eager);
    /* the graph runs from the state before the call; its host nodes replay */
    state_restore_pre(&ck);
    I->check_replay = &ck;
    Value sres = v_nil();
    if (ck.grads) ck.tape_s = tape_begin(&ck);
    I->stage_limit = false;
    bool redo_ok = I->host_redo.ok;
    I->host_redo.ok = true;
    int src = run_graph(I, t, lv, &sres);
    I->host_redo.ok = redo_ok;
    if (I->host_redo.pending && src) {
        /* it stopped at its first effect, a @host call that returned another
         * kind than traced: it goes on with another trace (stage/staged.c),
         * from the state before the call, the eager run's calls replayed
         * from the first */
        state_restore_pre(&ck);
        ck.cursor = 0;
        src = stage_host_redo(I, c, e, t, call_loc, &sres);
    } else if (src && stage_relaxed_redo_ok(t)) {
        /* a relaxed graph failed at these sizes: a trace for them instead */
        state_restore_pre(&ck);
        ck.cursor = 0;
        src = stage_relaxed_redo(I, c, e, call_loc, &sres);
    } else if (src && t->relaxed && !I->host_redo.pending) {
        stage_relaxed_slice_limit(I);
    } else if (I->host_redo.pending) {
        value_decref(I->host_redo.f);
        value_decref(I->host_redo.result);
        I->host_redo.f = I->host_redo.result = v_nil();
        I->host_redo.pending = false;
    }
    ck.limit = src && I->stage_limit;
    if (ck.grads) tape_end(&ck.tape_s, src ? v_nil() : sres, &ck.target_s);
    I->check_replay = NULL;
    int rc = conclude(&ck, lv, call_loc, erc, eres, &eerr, src, &sres);
    if (rc) {
        value_decref(sres);
        /* the state the eager run left: the program stops here as it would eagerly */
        slots_restore(&ck, ck.eager_end);
        tfe_random_restore(ck.key_eager, ck.ctr_eager);
    } else {
        *out = sres;
    }
    error_drop(I, &eerr);
    value_decref(eres);
    grads_free(&ck);
    check_free(&ck);
    return rc;
}
