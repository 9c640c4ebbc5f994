/* trace.c — recording a staged function's body into a graph (see trace.h for
 * how tracing works): the tfe_execute hook, traced tensors, outside
 * bindings, values read on the host, effects, and the start and end of a trace. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "stage/exec.h"
#include "stage/sig.h"
#include "stage/trace.h"
#include "tensor/grad.h"
#include "tensor/xalloc.h"

Tracer *tfe_tracer;
uint32_t tfe_trace_id;
static uint32_t next_trace_id = 1;

static int trace_execute(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out);
static bool trace_value_read(const tfe_tensor *t);

/* --- start and end ------------------------------------------------------------------ */

Tracer *trace_begin(Interp *I, const char *name, bool implicit)
{
    Tracer *T = xcalloc(1, sizeof *T);
    T->I = I;
    T->g = graph_new(name);
    T->id = next_trace_id++;
    if (!next_trace_id) next_trace_id = 1;
    T->implicit = implicit;
    T->last_effect = -1;
    T->last_cf = -1;
    T->tapes_at_begin = tfe_tapes_active;
    T->frame_base = I->nframes;
    tfe_tracer = T;
    tfe_trace_id = T->id;
    tfe_trace_hook = trace_execute;
    tfe_value_read_hook = trace_value_read;
    return T;
}

void trace_end(Tracer *T)
{
    for (int i = 0; i < T->nnotes; i++) {
        TNote *n = T->notes[i];
        if (n->t->node == n) n->t->node = NULL;
        tensor_decref(n->t);
        free(n);
    }
    free(T->notes);
    free(T->concrete);
    for (int i = 0; i < T->nouts; i++) {
        env_decref(T->outs[i].env);
        value_decref(T->outs[i].traced);
        value_decref(T->outs[i].orig);
    }
    free(T->outs);
    free(T->static_in);
    free(T->walked);
    free(T->sym_fns);
    free(T->fail_msg);
    tfe_tracer = NULL;
    tfe_trace_id = 0;
    tfe_trace_hook = NULL;
    tfe_value_read_hook = NULL;
    free(T);
}

int trace_fail(Interp *I, Loc loc, const char *fmt, ...)
{
    Tracer *T = tfe_tracer;
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (T->implicit) {
        if (!T->failed) {
            T->failed = true;
            T->fail_msg = xstrdup(buf);
            T->fail_loc = loc;
            tfe_trace_hook = NULL;
        }
        /* outside a branch the program just goes on eagerly; inside one the
         * branch is abandoned and the conditional runs eagerly (trace_cond) */
        if (!T->symbolic) return 0;
    }
    return raise_at(I, loc, "%s", buf);
}

/* --- nodes and traced tensors ------------------------------------------------------------ */

/* The frames between the staged function and the current call, shared by
 * consecutive nodes made at the same depth. */
static GFrames *frames_now(Tracer *T)
{
    Interp *I = T->I;
    int n = I->nframes - T->frame_base;
    if (n < 0) n = 0;
    GFrames *f = T->last_frames;
    if (f && f->n == n && (n == 0 || !mem_cmp(f->f, I->frames + T->frame_base, sizeof(Frame) * (size_t)n))) return f;
    f = xcalloc(1, sizeof *f);
    f->n = n;
    f->f = n ? xmalloc(sizeof(Frame) * (size_t)n) : NULL;
    if (n) mem_copy(f->f, I->frames + T->frame_base, sizeof(Frame) * (size_t)n);
    for (int i = 0; i < n; i++)
        if (f->f[i].call_loc.src) source_incref(f->f[i].call_loc.src);
    f->next_all = T->g->frames_all;
    T->g->frames_all = f;
    T->last_frames = f;
    return f;
}

static int new_node_in(Tracer *T, int region, GKind k, int nin, int nout)
{
    int id = graph_add(T->g, region, k, nin, nout);
    GNode *n = gnode(T->g, id);
    n->loc = T->I->cur_loc;
    n->frames = frames_now(T);
    return id;
}

static int new_node(Tracer *T, GKind k, int nin, int nout) { return new_node_in(T, T->region, k, nin, nout); }

static void effect_chain(Tracer *T, int id)
{
    gnode(T->g, id)->effect_dep = T->last_effect;
    T->last_effect = id;
}

static void meta_of(tfe_meta *m, const tfe_tensor *t)
{
    m->dtype = t->dtype;
    m->weak = t->weak;
    m->rank = t->rank;
    mem_copy(m->shape, t->shape, sizeof(int64_t) * (size_t)t->rank);
}

void trace_note(Tracer *T, tfe_tensor *t, GRef ref)
{
    TNote *n = xmalloc(sizeof *n);
    n->t = t;
    n->ref = ref;
    tensor_incref(t);
    t->node = n;
    if (T->nnotes == T->capnotes) {
        T->capnotes = T->capnotes ? T->capnotes * 2 : 64;
        T->notes = xrealloc(T->notes, sizeof *T->notes * (size_t)T->capnotes);
    }
    T->notes[T->nnotes++] = n;
    if (t->storage) {
        int slot = gnode(T->g, ref.node)->vbase + ref.out;
        if (slot >= T->capconcrete) {
            int ncap = (slot + 1) * 2;
            T->concrete = xrealloc(T->concrete, sizeof *T->concrete * (size_t)ncap);
            memset(T->concrete + T->capconcrete, 0, sizeof *T->concrete * (size_t)(ncap - T->capconcrete));
            T->capconcrete = ncap;
        }
        T->concrete[slot] = t;
    }
}

GRef trace_ref(Tracer *T, tfe_tensor *t)
{
    TNote *n = t->node;
    if (n && graph_region_visible(T->g, gnode(T->g, n->ref.node)->region, T->region)) return n->ref;
    /* a tensor made at trace time (or one from a branch we cannot see,
     * which only a variable's unchanged value can be): a constant */
    int id = new_node_in(T, 0, G_CONST, 0, 1);
    GNode *g = gnode(T->g, id);
    g->loc = (Loc){0};
    tensor_incref(t);
    g->value = t;
    meta_of(&g->meta[0], t);
    GRef r = {id, 0};
    if (!n) trace_note(T, t, r);
    return r;
}

/* A new graph input whose value at this call is t. t itself stands for it
 * from now on (so identity is kept: a tape that watches t sees its uses),
 * unless t already stands for something else. */
int trace_input(Tracer *T, tfe_tensor *t)
{
    Graph *g = T->g;
    int id = new_node_in(T, 0, G_INPUT, 0, 1);
    GNode *n = gnode(g, id);
    n->loc = (Loc){0};
    meta_of(&n->meta[0], t);
    n->input_index = g->ninputs;
    g->inputs = xrealloc(g->inputs, sizeof *g->inputs * (size_t)(g->ninputs + 1));
    g->inputs[g->ninputs++] = id;
    if (g->ninputs > T->cap_static) {
        int ncap = g->ninputs * 2;
        T->static_in = xrealloc(T->static_in, sizeof *T->static_in * (size_t)ncap);
        memset(T->static_in + T->cap_static, 0, sizeof *T->static_in * (size_t)(ncap - T->cap_static));
        T->cap_static = ncap;
    }
    if (!t->node) trace_note(T, t, (GRef){id, 0});
    return id;
}

Value trace_value_leaves(Tracer *T, Value v, int *first, int *n)
{
    SigBuf s = {0};
    Leaves lv = {0};
    sig_flatten(v, &s, &lv, SIG_INPUT);
    *first = T->g->ninputs;
    *n = lv.n;
    for (int i = 0; i < lv.n; i++) trace_input(T, lv.t[i]);
    Value r = v;
    if (v.kind == V_SCALAR && v.dtype != TFE_BOOL) { /* a number: its boxed tensor stands for it */
        tensor_incref(lv.t[0]);
        r = v_tensor_take(lv.t[0]);
    } else {
        value_incref(r);
    }
    leaves_free(&lv);
    sig_free(&s);
    return r;
}

/* --- the tfe_execute hook ------------------------------------------------------------------ */

static int trace_execute(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out)
{
    static const tfe_attrs default_attrs = {.naxes = -1, .dtype = TFE_FLOAT32};
    Tracer *T = tfe_tracer;
    const tfe_opinfo *info = &tfe_ops[op];
    if (T->failed || T->suspended) return tfe_execute_eager(op, nin, in, at, out);
    bool any = false, sym = T->symbolic;
    for (int i = 0; i < nin; i++) {
        if (in[i]->node) any = true;
        if (!in[i]->storage) sym = true;
    }
    if (!any && !(info->flags & F_RANDOM)) return tfe_execute_eager(op, nin, in, at, out);
    if (!at) at = &default_attrs;
    int nout = info->nout >= 0 ? info->nout : at->nints;
    if (!sym) {
        if (tfe_execute_eager(op, nin, in, at, out)) return -1;
    } else {
        if (info->flags & F_SELFOUT) {
            tfe_error_set("%s: the shape of its result depends on the data, so it cannot be traced "
                          "inside a staged conditional or loop", info->name);
            return -1;
        }
        if (info->nin >= 0 && nin != info->nin) return tfe_execute_eager(op, nin, in, at, out); /* the error */
        const tfe_opcall c = {.op = op, .nin = nin, .nout = nout, .in = in, .at = at, .out = out};
        tfe_meta m;
        if (info->infer(&c, &m)) return -1;
        for (int k = 0; k < nout; k++) {
            if (op == OP_SPLIT) {
                int axis = (int)(at->axes[0] < 0 ? at->axes[0] + m.rank : at->axes[0]);
                m.shape[axis] = at->ints[k];
            }
            out[k] = tensor_symbolic(m.dtype, m.weak, m.rank, m.shape);
        }
        /* a tape inside a loop body or branch traced without values: it
         * records the symbolic op (the eager path records concrete ones), so
         * its gradient becomes nodes of the same region */
        if (tfe_tapes_active) tfe_tape_record(&c);
    }
    GRef refs[64], *rp = nin <= 64 ? refs : xmalloc(sizeof *rp * (size_t)nin);
    for (int i = 0; i < nin; i++) rp[i] = trace_ref(T, in[i]); /* constants first */
    int id = new_node(T, G_OP, nin, nout);
    GNode *n = gnode(T->g, id);
    n->op = op;
    n->at = xmalloc(sizeof *n->at);
    *n->at = *at;
    mem_copy(n->in, rp, sizeof *rp * (size_t)nin);
    if (rp != refs) free(rp);
    for (int k = 0; k < nout; k++) {
        meta_of(&n->meta[k], out[k]);
        bool is_input = false;
        for (int i = 0; i < nin; i++) is_input |= out[k] == in[i];
        if (!is_input) trace_note(T, out[k], (GRef){id, k});
    }
    if (info->flags & F_RANDOM) {
        effect_chain(T, id);
        /* the same draw again (a gradient rule replaying dropout's mask):
         * at run time it takes the first node's seed and counter */
        for (int k = 0; k < id && at->from_stream; k++) {
            GNode *o = gnode(T->g, k);
            if (o->kind == G_OP && (tfe_ops[o->op].flags & F_RANDOM) && o->at->from_stream &&
                o->at_from < 0 && o->at->seed == at->seed && o->at->counter == at->counter) {
                gnode(T->g, id)->at_from = k;
                break;
            }
        }
    }
    return 0;
}

/* --- values read on the host ----------------------------------------------------------------
 * A traced tensor's value used at trace time (int(x), range(n), a shape
 * made from a tensor) is baked into the graph. That is right only while
 * the inputs it comes from keep their values, so those inputs join the
 * signature by value. A value from a variable, a random draw or a host call
 * changes between calls with the same signature: staging fails. */

/* Where a value read at trace time comes from: a problem (a variable, a host
 * call, a random draw) or NULL, marking the inputs it depends on static.
 * T->walked remembers the nodes already checked for the whole trace, so n
 * reads cost O(nodes) in all, not O(n * nodes) (a clean node stays clean: its
 * ancestors never change; after a problem the trace fails anyway). */
static const char *value_source_problem(Tracer *T, int id)
{
    if (T->walked[id]) return NULL;
    T->walked[id] = true;
    GNode *n = gnode(T->g, id);
    switch (n->kind) {
    case G_INPUT: T->static_in[n->input_index] = true; return NULL;
    case G_CONST: return NULL;
    case G_VAR_READ: return "a variable";
    case G_HOST: return "a host call";
    case G_OP:
        if (tfe_ops[n->op].flags & F_RANDOM) return "a random draw";
        break;
    default: /* cond, while: depend on everything they can see */
        for (int i = 0; i < T->g->ninputs; i++) T->static_in[i] = true;
        break;
    }
    for (int i = 0; i < n->nin; i++) {
        const char *p = value_source_problem(T, n->in[i].node);
        if (p) return p;
    }
    return NULL;
}

static bool trace_value_read(const tfe_tensor *t)
{
    Tracer *T = tfe_tracer;
    if (!T || T->failed || T->suspended) return !t->storage;
    TNote *note = t->node;
    Interp *I = T->I;
    if (!t->storage) {
        /* raised by the caller's error check, or when the branch ends */
        trace_fail(I, I->cur_loc, "the value of a traced tensor is needed here, inside a staged "
                                  "conditional or loop, where it is not known until the graph runs");
        return true;
    }
    if (T->capwalked < T->g->n) {
        int cap = T->g->n * 2;
        T->walked = xrealloc(T->walked, sizeof *T->walked * (size_t)cap);
        memset(T->walked + T->capwalked, 0, sizeof *T->walked * (size_t)(cap - T->capwalked));
        T->capwalked = cap;
    }
    const char *p = value_source_problem(T, note->ref.node);
    if (p) {
        if (!I->has_error)
            trace_fail(I, I->cur_loc, "this uses at trace time the value of a tensor that comes from %s, "
                                      "which can change from call to call (keep it a tensor, or use a @host function)", p);
    }
    return false;
}

/* --- outside bindings ------------------------------------------------------------------------- */

static Outside *find_outside(Tracer *T, Env *e, int slot)
{
    for (int i = 0; i < T->nouts; i++)
        if (T->outs[i].env == e && T->outs[i].slot == slot) return &T->outs[i];
    return NULL;
}

static Outside *add_outside(Tracer *T, Env *e, int slot, const char *name)
{
    if (T->nouts == T->capouts) {
        T->capouts = T->capouts ? T->capouts * 2 : 8;
        T->outs = xrealloc(T->outs, sizeof *T->outs * (size_t)T->capouts);
    }
    Outside *o = &T->outs[T->nouts++];
    *o = (Outside){0};
    o->env = e;
    e->h.refcount++;
    o->slot = slot;
    o->name = name;
    Value v = e->slots[slot];
    value_incref(v);
    o->orig = v;
    o->traced = trace_value_leaves(T, v, &o->first_input, &o->ninputs);
    return o;
}

int trace_read_outside(Interp *I, Env *e, int slot, const char *name, Value *out)
{
    Tracer *T = tfe_tracer;
    Value v = e->slots[slot];
    if (!trace_recording() || (v.kind == V_NIL && v.dtype == 1)) {
        value_incref(v);
        *out = v;
        return 0;
    }
    Outside *o = find_outside(T, e, slot);
    if (!o) o = add_outside(T, e, slot, name);
    (void)I;
    value_incref(o->traced);
    *out = o->traced;
    return 0;
}

int trace_write_outside(Interp *I, Env *e, int slot, const char *name, Value v)
{
    Tracer *T = tfe_tracer;
    if (trace_recording() && T->symbolic) {
        if (trace_fail(I, I->cur_loc, "assigning '%s', a binding outside the staged function, inside a "
                                      "staged conditional or loop is not supported", name)) {
            value_decref(v);
            return -1;
        }
    }
    if (trace_recording()) {
        if (sig_has_function(v)) {
            if (trace_fail(I, I->cur_loc, "a staged function cannot store a function in '%s', a binding outside it", name)) {
                value_decref(v);
                return -1;
            }
        } else {
            Outside *o = find_outside(T, e, slot);
            if (!o) o = add_outside(T, e, slot, name);
            o->written = true;
            value_decref(o->traced);
            value_incref(v);
            o->traced = v;
        }
    }
    Value old = e->slots[slot];
    e->slots[slot] = v;
    value_decref(old);
    return 0;
}

int trace_check_mutation(Interp *I, uint32_t stamp, Loc loc)
{
    Tracer *T = tfe_tracer;
    if (!trace_recording()) return 0;
    if (stamp != T->id)
        return trace_fail(I, loc, "a staged function cannot mutate a list or record made outside it "
                                  "(return a new one instead)");
    if (T->symbolic)
        return trace_fail(I, loc, "mutating a list or record inside a staged conditional or loop is not supported");
    return 0;
}

/* --- variables and host calls ------------------------------------------------------------------- */

/* The tensor of the last read of var in this region, when nothing that
 * could assign it (a host call, a cond, a loop) came after it:
 * eager code reads the same tensor then, and a tape sums the gradients of
 * both uses in one running sum (bit for bit). NULL otherwise. */
static tfe_tensor *last_read(Tracer *T, Value var)
{
    const GRegion *reg = &T->g->regions[T->region];
    for (int i = reg->n - 1; i >= 0; i--) {
        int id = reg->nodes[i];
        const GNode *x = gnode(T->g, id);
        if (x->kind == G_HOST || x->kind == G_COND || x->kind == G_WHILE) return NULL;
        if (x->kind != G_VAR_READ || x->obj.u.o != var.u.o) continue;
        for (int k = T->nnotes - 1; k >= 0; k--) {
            TNote *nt = T->notes[k];
            if (nt->ref.node == id && nt->ref.out == 0) return nt->t->node == nt ? nt->t : NULL;
        }
        return NULL;
    }
    return NULL;
}

tfe_tensor *trace_var_read(Value var, tfe_tensor *value)
{
    Tracer *T = tfe_tracer;
    if (!trace_recording() || !value) return value;
    TNote *n = value->node;
    /* With values, an earlier read of this very tensor can serve (an assign
     * runs and gives the variable a new tensor). Symbolically the assigns
     * only become nodes, so every read is a read of its own: it reads the
     * variable when it runs (a loop re-reads it at every iteration). */
    /* ... unless a cond or while was traced since: its branch or body may
     * assign the variable symbolically, which leaves `value` as it was */
    if (n && !T->symbolic && n->ref.node > T->last_cf &&
        graph_region_visible(T->g, gnode(T->g, n->ref.node)->region, T->region))
        return value;
    tfe_tensor *again = last_read(T, var);
    if (again) {
        tensor_decref(value);
        tensor_incref(again);
        return again;
    }
    int id = new_node(T, G_VAR_READ, 0, 1);
    GNode *g = gnode(T->g, id);
    value_incref(var);
    g->obj = var;
    meta_of(&g->meta[0], value);
    effect_chain(T, id);
    if (n) { /* read before: a second header for this read */
        tfe_tensor *a = tensor_alias(value);
        tensor_decref(value);
        value = a;
    }
    trace_note(T, value, (GRef){id, 0});
    return value;
}

/* value (var's tensor now) stands from here on for a new read of var: the
 * value a cond or while run as one tape entry read (stage/trace_cf.c). */
void trace_var_reread(Value var, tfe_tensor *value)
{
    Tracer *T = tfe_tracer;
    if (!trace_recording() || T->symbolic || !value) return;
    int id = new_node(T, G_VAR_READ, 0, 1);
    GNode *g = gnode(T->g, id);
    value_incref(var);
    g->obj = var;
    meta_of(&g->meta[0], value);
    effect_chain(T, id);
    trace_note(T, value, (GRef){id, 0});
}

/* A builtin whose call is an effect, and whether it returns nil. */
static bool known_nil(Value f) { return f.kind == V_BUILTIN && ((Builtin *)f.u.o)->effect == 1; }

int trace_host_call(Interp *I, Value f, int argc, const Value *argv, int nkw,
                    Str *const *kwnames, const Value *kwvals, Value *out)
{
    Tracer *T = tfe_tracer;
    const char *fname = f.kind == V_FN ? ((Closure *)f.u.o)->name : ((Builtin *)f.u.o)->name;
    if (T->symbolic && !known_nil(f))
        return trace_fail(I, I->cur_loc, "%s() is called back at run time, and its result cannot be "
                                         "traced inside a staged conditional or loop", fname);
    /* leaves of every argument become the node's inputs */
    int nargs = argc + nkw;
    HostArg *ha = xcalloc((size_t)(nargs ? nargs : 1), sizeof *ha);
    Leaves lv = {0};
    SigBuf sb = {0};
    for (int i = 0; i < nargs; i++) {
        Value a = i < argc ? argv[i] : kwvals[i - argc];
        int before = lv.n;
        sig_flatten(a, &sb, &lv, SIG_OUTPUT);
        value_incref(a);
        ha[i].v = a;
        ha[i].nleaves = lv.n - before;
    }
    sig_free(&sb);
    Value result = v_nil();
    int rc = 0;
    Loc call_loc = I->cur_loc; /* the call site (the callee moves cur_loc) */
    if (!T->symbolic) {
        T->suspended++;
        rc = call_value(I, f, argc, argv, nkw, kwnames, kwvals, &result);
        T->suspended--;
    }
    if (!rc && !(result.kind == V_NIL || result.kind == V_TENSOR || (result.kind == V_SCALAR))) {
        value_decref(result);
        result = v_nil();
        rc = raise_at(I, I->cur_loc, "%s(), called from staged code, must return a tensor, a number or nil", fname);
    }
    if (rc || T->failed) {
        for (int i = 0; i < nargs; i++) value_decref(ha[i].v);
        free(ha);
        leaves_free(&lv);
        *out = result;
        return rc;
    }
    bool has_out = result.kind != V_NIL;
    GRef *rp = xmalloc(sizeof *rp * (size_t)(lv.n ? lv.n : 1));
    for (int i = 0; i < lv.n; i++) rp[i] = trace_ref(T, lv.t[i]); /* constants first */
    I->cur_loc = call_loc;
    int id = new_node(T, G_HOST, lv.n, has_out ? 1 : 0);
    GNode *n = gnode(T->g, id);
    mem_copy(n->in, rp, sizeof *rp * (size_t)lv.n);
    free(rp);
    value_incref(f);
    n->obj = f;
    n->hargs = ha;
    n->nhargs = nargs;
    n->nhkw = nkw;
    if (nkw) {
        n->hkwnames = xmalloc(sizeof *n->hkwnames * (size_t)nkw);
        for (int k = 0; k < nkw; k++) {
            kwnames[k]->h.refcount++;
            n->hkwnames[k] = kwnames[k];
        }
    }
    n->host_nil = !has_out;
    effect_chain(T, id);
    leaves_free(&lv);
    if (has_out) {
        tfe_tensor *r = value_to_tensor(result);
        value_decref(result);
        tfe_tensor *a = tensor_alias(r);
        tensor_decref(r);
        meta_of(&gnode(T->g, id)->meta[0], a);
        trace_note(T, a, (GRef){id, 0});
        result = v_tensor_take(a);
    }
    *out = result;
    return 0;
}

/* --- recursion --------------------------------------------------------------------------------- */

int trace_enter_fn(Interp *I, Node *fn, const char *name, Loc loc)
{
    Tracer *T = tfe_tracer;
    if (T->symbolic && !T->failed)
        for (int i = 0; i < T->nsym_fns; i++)
            if (T->sym_fns[i] == fn)
                return trace_fail(I, loc, "'%s' calls itself inside a staged conditional or loop, so the "
                                          "depth of the recursion would depend on data", name);
    if (T->nsym_fns == T->capsym_fns) {
        T->capsym_fns = T->capsym_fns ? T->capsym_fns * 2 : 16;
        T->sym_fns = xrealloc(T->sym_fns, sizeof *T->sym_fns * (size_t)T->capsym_fns);
    }
    T->sym_fns[T->nsym_fns++] = fn;
    return 0;
}

void trace_leave_fn(Node *fn)
{
    Tracer *T = tfe_tracer;
    if (T && T->nsym_fns && T->sym_fns[T->nsym_fns - 1] == fn) T->nsym_fns--;
}
