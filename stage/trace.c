/* trace.c — recording a staged function's body into a graph (see trace.h for
 * how tracing works): the tfe_execute hook, traced tensors, outside
 * bindings, values read on the host, effects, and the start and end of a trace. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "interp/internal.h"
#include "graph/exec.h"
#include "stage/check.h"
#include "stage/host_node.h"
#include "stage/sig.h"
#include "stage/trace.h"
#include "tensor/base.h" /* kn_axes_mask */
#include "tensor/grad.h"
#include "util/xalloc.h"

static void host_vars_clear(Tracer *T);

/* process-wide, so that no two traces share an id even across interpreters
 * (an id stamps the Env/Seq/Record made during a trace) */
static uint32_t next_trace_id = 1;

static int trace_execute(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out);
static bool trace_value_read(const tfe_tensor *t);
static uint32_t trace_dyn_dims(const tfe_tensor *t);

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
    tfe_random_state(&T->rkey, &T->rcounter);
    T->frame_base = I->nframes;
    I->tracer = T;
    I->trace_id = T->id;
    tfe_trace_hook = trace_execute;
    tfe_value_read_hook = trace_value_read;
    tfe_dyn_dims_hook = trace_dyn_dims;
    return T;
}

void trace_note_write(Tracer *T, Env *e, int slot, Node *target)
{
    if (T->nwrites == T->capwrites) {
        T->capwrites = T->capwrites ? 2 * T->capwrites : 16;
        T->writes = xrealloc(T->writes, sizeof *T->writes * (size_t)T->capwrites);
    }
    e->h.refcount++; /* (a closure's Env may go while the if or loop still undoes its writes) */
    value_incref(e->slots[slot]);
    T->writes[T->nwrites++] = (struct SymWrite){e, slot, target, e->slots[slot]};
}

void trace_writes_drop(Tracer *T, int from)
{
    for (int i = T->nwrites - 1; i >= from; i--) {
        value_decref(T->writes[i].old);
        env_decref(T->writes[i].env);
    }
    if (from < T->nwrites) T->nwrites = from;
}

void trace_writes_undo(Tracer *T, int from)
{
    for (int i = T->nwrites - 1; i >= from; i--) {
        struct SymWrite *w = &T->writes[i];
        Value cur = w->env->slots[w->slot];
        w->env->slots[w->slot] = w->old;
        w->old = v_nil();
        value_decref(cur);
        env_decref(w->env);
    }
    if (from < T->nwrites) T->nwrites = from;
}

void trace_end(Tracer *T)
{
    trace_alias_free(T);
    for (int i = 0; i < T->nnotes; i++) {
        TNote *n = T->notes[i];
        if (n->t->node == n) n->t->node = NULL;
        tensor_decref(n->t);
        free(n);
    }
    free(T->notes);
    for (int i = 0; i < T->nrans; i++) {
        graph_decref(T->rans[i].g);
        free(T->rans[i].ran);
    }
    free(T->rans);
    free(T->concrete);
    for (int i = 0; i < T->nouts; i++) {
        env_decref(T->outs[i].env);
        value_decref(T->outs[i].traced);
        value_decref(T->outs[i].orig);
    }
    free(T->outs);
    for (int i = 0; i < T->nstart; i++) value_decref(T->start[i].v);
    free(T->start);
    for (int i = 0; i < T->npre; i++) value_decref(T->pre[i].v);
    free(T->pre);
    free(T->hreads);
    host_vars_clear(T);
    free(T->static_in);
    free(T->walked);
    free(T->dyn);
    trace_writes_drop(T, 0);
    free(T->writes);
    free(T->sym_fns);
    free(T->sym_names);
    free(T->fail_msg);
    free(T->fallback_why);
    free(T->pending_why);
    free(T->refused_msg);
    free(T->kept);
    effect_replay_free(T->done);
    T->I->tracer = NULL;
    T->I->trace_id = 0;
    tfe_trace_hook = NULL;
    tfe_value_read_hook = NULL;
    tfe_dyn_dims_hook = NULL;
    free(T);
}

void trace_set_aside(Interp *I, TraceAside *a)
{
    a->tracer = I->tracer;
    a->trace_id = I->trace_id;
    a->exec_hook = tfe_trace_hook;
    a->read_hook = tfe_value_read_hook;
    a->dyn_hook = tfe_dyn_dims_hook;
    I->tracer = NULL;
    I->trace_id = 0;
    tfe_trace_hook = NULL;
    tfe_value_read_hook = NULL;
    tfe_dyn_dims_hook = NULL;
}

void trace_put_back(Interp *I, const TraceAside *a)
{
    I->tracer = a->tracer;
    I->trace_id = a->trace_id;
    tfe_trace_hook = a->exec_hook;
    tfe_value_read_hook = a->read_hook;
    tfe_dyn_dims_hook = a->dyn_hook;
}

int trace_fail(Interp *I, Loc loc, const char *fmt, ...)
{
    Tracer *T = I->tracer;
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
    T->fail_raised = true;
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
    if (tfe_tapes_active - T->tapes_at_begin > T->g->inner_tapes) T->g->inner_tapes = tfe_tapes_active - T->tapes_at_begin;
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
    n->number = false;
    n->unboxed = false;
    /* a 0-d value made while a tape of the body's own records is a tensor
     * to eager code at every call (a tape from outside may not be there at
     * the next): op results, and conds', loops', host calls' and variable
     * reads' alike */
    n->boxed = t->rank == 0 && tfe_tapes_active > T->tapes_at_begin;
    n->input = false;
    n->passed = -1;
    n->handed = (GRef){-1, 0};
    n->run_kind[0] = n->run_kind[1] = TK_NONE;
    n->sub[0] = n->sub[1] = NULL;
    n->ran_rec = -1;
    n->ran_ref = (GRef){-1, 0};
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
    if (!t->node) {
        trace_note(T, t, (GRef){id, 0});
        ((TNote *)t->node)->input = true;
    }
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
    if (v.kind == V_SCALAR && lv.n == 1) { /* a number: its boxed tensor stands for it */
        if (lv.t[0]->node) ((TNote *)lv.t[0]->node)->number = true;
        tensor_incref(lv.t[0]);
        r = v_tensor_take(lv.t[0]);
    } else {
        value_incref(r);
    }
    leaves_free(&lv);
    sig_free(&s);
    return r;
}

bool trace_eager_number(Value v, Value *as)
{
    if (v.kind == V_SCALAR) {
        *as = v;
        return v.dtype != TFE_BOOL;
    }
    if (v.kind != V_TENSOR || v.u.t->rank != 0 || !v.u.t->node || !((const TNote *)v.u.t->node)->number) return false;
    /* its value is not needed: the fast path's choice depends on dtypes
     * (a divisor of 1 keeps an int floordiv on it) */
    *as = dtype_is_float(v.u.t->dtype) ? v_float(1.0, v.u.t->dtype) : v_int(1);
    as->dtype = (uint8_t)v.u.t->dtype;
    as->weak = v.u.t->weak;
    return true;
}

void trace_mark_number(Value out)
{
    if (out.kind == V_TENSOR && out.u.t->rank == 0 && out.u.t->dtype != TFE_BOOL && out.u.t->node)
        ((TNote *)out.u.t->node)->number = true;
}

bool trace_kind_number(Value v, Value *as)
{
    if (trace_eager_number(v, as)) return true;
    if (v.kind != V_TENSOR || v.u.t->rank != 0 || v.u.t->dtype == TFE_BOOL || !v.u.t->node ||
        !((const TNote *)v.u.t->node)->run_kind[0])
        return false;
    *as = dtype_is_float(v.u.t->dtype) ? v_float(1.0, v.u.t->dtype) : v_int(1);
    as->dtype = (uint8_t)v.u.t->dtype;
    as->weak = v.u.t->weak;
    return true;
}

/* (a's note where a rule gives its kind; NULL where it is a number) */
static const TNote *kind_note(Value a)
{
    if (a.kind != V_TENSOR || !a.u.t->node) return NULL;
    const TNote *n = a.u.t->node;
    return n->run_kind[0] && !n->number ? n : NULL;
}

void trace_note_op_kind(Value out, Value a, Value b)
{
    if (out.kind != V_TENSOR || out.u.t->rank != 0 || out.u.t->dtype == TFE_BOOL || !out.u.t->node) return;
    TNote *n = out.u.t->node;
    const TNote *sa = kind_note(a), *sb = kind_note(b);
    if (n->number || (!sa && !sb) || n->run_kind[0]) return;
    n->run_kind[0] = TK_OP;
    n->run_kind[1] = n->boxed ? TK_BOXED : TK_DEFAULT; /* (not all numbers: the op's result) */
    n->sub[0] = sa;
    n->sub[1] = sb;
}

void trace_unmark_number(Value v)
{
    if (v.kind == V_TENSOR && v.u.t->node) ((TNote *)v.u.t->node)->number = false;
}

bool trace_watch_unboxed(const tfe_tensor *t)
{
    const TNote *n = t->node;
    if (!n || t->rank != 0 || !(n->number || n->unboxed)) return false;
    tfe_dtype d = t->dtype; /* the dtypes value_number_take unboxes */
    return d == TFE_FLOAT32 || d == TFE_FLOAT64 || d == TFE_INT32 || d == TFE_INT64 || d == TFE_BOOL;
}

tfe_tensor *trace_watch_box(Tracer *T, tfe_tensor *t, bool unboxed)
{
    tfe_tensor *a = tensor_alias(t);
    if (!a) return NULL;
    GRef ref = ((TNote *)t->node)->ref;
    int slot = gnode(T->g, ref.node)->vbase + ref.out;
    tfe_tensor *was = slot < T->capconcrete ? T->concrete[slot] : NULL;
    trace_note(T, a, ref);
    ((TNote *)a->node)->unboxed = unboxed;
    ((TNote *)a->node)->boxed = !unboxed;
    /* the graph value's tensor stays the variable's (a read's copy is no
     * tensor the tape machinery knows); a watched box is it from now on */
    if (unboxed && slot < T->capconcrete) T->concrete[slot] = was;
    return a;
}

void trace_box_constant(Tracer *T, tfe_tensor *t)
{
    trace_ref(T, t);
    if (t->node) ((TNote *)t->node)->boxed = true;
}

Value trace_unbox_numbers(Value v)
{
    if (v.kind == V_TENSOR) {
        const TNote *n = v.u.t->node;
        /* (a watch's box, a result made while a tape of the body records:
         * tensors in eager code, kept so by sig.c's rebuild) */
        if (n && n->boxed && !n->number && v.u.t->rank == 0) v.boxed = true;
        if (!n || !n->number || !v.u.t->storage || v.u.t->rank != 0) return v;
        tensor_incref(v.u.t);
        Value r = value_number_take(v.u.t);
        value_decref(v);
        return r;
    }
    if (v.kind == V_TUPLE || v.kind == V_LIST) {
        Seq *q = (Seq *)v.u.o;
        for (int i = 0; i < q->n; i++) q->items[i] = trace_unbox_numbers(q->items[i]);
    } else if (v.kind == V_RECORD) {
        Record *r = (Record *)v.u.o;
        for (int i = 0; i < r->n; i++) r->vals[i] = trace_unbox_numbers(r->vals[i]);
    }
    return v;
}

/* --- the tfe_execute hook ------------------------------------------------------------------ */

static int trace_execute(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out)
{
    static const tfe_attrs default_attrs = {.naxes = -1, .dtype = TFE_FLOAT32};
    Tracer *T = trace_current(); /* a hook of the tensor layer: no Interp */
    const tfe_opinfo *info = &tfe_ops[op];
    if (T->failed || T->suspended) return tfe_execute_eager(op, nin, in, at, out);
    bool any = false, sym = T->symbolic;
    if (tfe_tapes_active > T->tapes_at_begin) trace_alias_touch_ins(T, nin, in);
    for (int i = 0; i < nin; i++) {
        if (in[i]->node) any = true;
        if (!in[i]->storage) sym = true;
    }
    /* a draw or a collective on constants is still a node: it runs at every call */
    if (!any && !(info->flags & (F_RANDOM | F_COLLECTIVE))) return tfe_execute_eager(op, nin, in, at, out);
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
            if ((op == OP_BATCH_NORM_TRAIN || op == OP_BATCH_NORM_GRAD) && k > 0) tfe_batch_norm_out_meta(&c, k, &m);
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
        if (!is_input) {
            trace_note(T, out[k], (GRef){id, k});
            /* (value_from_tensor_take's rule: a number in eager code) */
            ((TNote *)out[k]->node)->unboxed = out[k]->rank == 0 && !tfe_tapes_active &&
                                                (!out[k]->storage || out[k]->storage->device == 0);
            /* ... and a tensor, made while a tape of the body records: kept
             * one where the call hands it back (a tape outside the call is
             * not one of every call's: there the call's rule decides) */
            ((TNote *)out[k]->node)->boxed = out[k]->rank == 0 && tfe_tapes_active > T->tapes_at_begin;
        }
    }
    if (info->flags & F_COLLECTIVE) effect_chain(T, id);
    if (info->flags & F_SELFOUT) T->data_shaped = true;
    if (info->flags & F_RANDOM) {
        effect_chain(T, id);
        /* the same draw again (a gradient rule replaying dropout's mask):
         * at run time it takes the first node's seed and counter. Only a
         * node this one can see: a draw inside a traced branch or loop body
         * before it has the counter symbolic tracing reserved and gave back
         * (trace_cf.c), which a later draw of the stream gets again. */
        for (int k = 0; k < id && at->from_stream; k++) {
            GNode *o = gnode(T->g, k);
            if (o->kind == G_OP && (tfe_ops[o->op].flags & F_RANDOM) && o->at->from_stream &&
                graph_region_visible(T->g, o->region, T->region) &&
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
        if (tfe_ops[n->op].flags & F_COLLECTIVE) return "a collective (its value depends on the other ranks)";
        break;
    case G_COND: case G_WHILE: case G_PARAM: case G_FUSED:
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

static bool varies_from(const Graph *g, int id, bool *seen)
{
    if (seen[id]) return false;
    seen[id] = true;
    const GNode *n = &g->nodes[id];
    if (n->kind == G_VAR_READ || n->kind == G_HOST) return true;
    if (n->kind == G_OP && (tfe_ops[n->op].flags & (F_RANDOM | F_COLLECTIVE))) return true;
    for (int i = 0; i < n->nin; i++)
        if (varies_from(g, n->in[i].node, seen)) return true;
    return false;
}

bool trace_value_varies(Interp *I, const tfe_tensor *t)
{
    Tracer *T = I->tracer;
    const TNote *note = t->node;
    if (!T || T->failed || T->suspended || !note || note->ref.node >= T->g->n) return false;
    bool *seen = xcalloc((size_t)T->g->n, sizeof *seen);
    bool v = varies_from(T->g, note->ref.node, seen);
    free(seen);
    return v;
}

static bool from_host(const Graph *g, int id, bool *seen)
{
    if (seen[id]) return false;
    seen[id] = true;
    const GNode *n = &g->nodes[id];
    if (n->kind == G_HOST) return true;
    for (int i = 0; i < n->nin; i++)
        if (from_host(g, n->in[i].node, seen)) return true;
    return false;
}

void trace_size_used(Interp *I, const tfe_tensor *t)
{
    Tracer *T = I->tracer;
    const TNote *note = t ? t->node : NULL;
    if (!T || T->failed || T->suspended || T->host_size_used || !T->nhost || !note || note->ref.node >= T->g->n) return;
    bool *seen = xcalloc((size_t)T->g->n, sizeof *seen);
    T->host_size_used = from_host(T->g, note->ref.node, seen);
    free(seen);
}

static bool trace_value_read(const tfe_tensor *t)
{
    Tracer *T = trace_current(); /* a hook of the tensor layer: no Interp */
    if (!T || T->failed || T->suspended) return !t->storage;
    TNote *note = t->node;
    Interp *I = T->I;
    if (!t->storage) {
        /* raised by the caller's error check, or when the branch ends */
        trace_fail(I, I->cur_loc, "the value of a traced tensor is needed here, inside a staged "
                                  "conditional or loop, where it is not known until the graph runs "
                                  "(float(t) and int(t) read it: cast(t, float32) stays in the graph)");
        return true;
    }
    if (T->capwalked < T->g->n) {
        int cap = T->g->n * 2;
        T->walked = xrealloc(T->walked, sizeof *T->walked * (size_t)cap);
        memset(T->walked + T->capwalked, 0, sizeof *T->walked * (size_t)(cap - T->capwalked));
        T->capwalked = cap;
    }
    const char *p = value_source_problem(T, note->ref.node);
    /* (a trace that serves this call only reads what it needs) */
    if (p && trace_alias_specialized(T)) p = NULL;
    if (p) {
        bool had_error = I->has_error;
        if (!I->has_error && I->formatting)
            trace_fail(I, I->cur_loc, "an f-string formats at trace time the value of a tensor that comes from %s, "
                                      "which can change from call to call (print the tensor itself, "
                                      "print(\"loss\", loss), or format it in a @host function)", p);
        else if (!I->has_error && I->indexing)
            trace_fail(I, I->cur_loc, "this index is read at trace time, and it is a tensor that comes from %s, "
                                      "which can change from call to call: index a tensor with gather(x, i) "
                                      "(a graph op), or %s", p,
                       strcmp(p, "a host call") ? "read the index outside the staged function and pass it in"
                                                : "do this inside the @host function and return what the body needs");
        else if (!I->has_error && T->fallback_why)
            /* the condition or bounds of an if or loop that runs at trace
             * time: why it could not be a node is what to change */
            trace_fail(I, I->cur_loc, "this uses at trace time the value of a tensor that comes from %s, "
                                      "which can change from call to call: this conditional or loop runs "
                                      "at trace time, as it could not be traced (%s%sline %d: %s)", p,
                       T->fallback_file ? T->fallback_file : "", T->fallback_file ? " " : "",
                       T->fallback_line, T->fallback_why);
        else if (!I->has_error)
            trace_fail(I, I->cur_loc, "this uses at trace time the value of a tensor that comes from %s, "
                                      "which can change from call to call (keep it a tensor, or %s)", p,
                       strcmp(p, "a host call") ? "use a @host function"
                                                : "do this inside the @host function and return what the body needs");
        if (!T->failed && !T->refused) { /* (--stage-all: the call runs eagerly) */
            T->refused = true;
            T->refused_loc = I->cur_loc;
            free(T->refused_msg);
            char buf[400];
            snprintf(buf, sizeof buf, "this uses at trace time the value of a tensor that comes from %s, which can "
                     "change from call to call (keep it a tensor, or use a @host function)", p);
            T->refused_msg = xstrdup(!had_error && I->has_error && I->err_msg ? I->err_msg : buf);
        }
    }
    return false;
}

int trace_refusal_pending(Interp *I, int rc)
{
    Tracer *T = I->tracer;
    if (!rc && T && !T->failed && T->pending_loop && T->pending_why) {
        /* a while loop's first iteration ran at trace time to meet its
         * body's error, and did not: the error about its condition */
        T->pending_loop = NULL;
        return trace_fail(I, T->pending_loc, "%s", T->pending_why) ? -1 : rc;
    }
    if (rc || !T || T->failed || !T->refused) return rc;
    /* the error the read raised, as raised (with its frames), when no one
     * cleared it; else raised again at the read */
    if (I->has_error) return -1;
    return trace_fail(I, T->refused_loc, "%s", T->refused_msg) ? -1 : rc;
}

/* Is node id's result computed from an op whose result's shape depends on
 * the data (x[mask], then anything of it)? Then its shape, read as a value
 * (len(x[mask])), tells the data: the inputs it comes from join the
 * signature by value, as for int(x). (Conservative: sum(x[mask]).shape
 * counts too.) */
void trace_data_shape_read(Interp *I, const tfe_tensor *t)
{
    Tracer *T = I->tracer;
    if (!T || T->failed || T->suspended || !t->node) return;
    const TNote *note = t->node;
    int n = T->g->n, top = 0;
    int *stack = xmalloc(sizeof *stack * (size_t)(n + 1));
    bool *seen = xcalloc((size_t)n + 1, sizeof *seen), found = false;
    stack[top++] = note->ref.node;
    seen[note->ref.node] = true;
    while (top && !found) {
        const GNode *x = gnode(T->g, stack[--top]);
        found = x->kind == G_OP && (tfe_ops[x->op].flags & F_SELFOUT);
        for (int i = 0; i < x->nin && !found; i++)
            if (!seen[x->in[i].node]) {
                seen[x->in[i].node] = true;
                stack[top++] = x->in[i].node;
            }
    }
    free(stack);
    free(seen);
    if (found) trace_value_read(t);
}

/* --- sizes that depend on the data ------------------------------------------------------------
 * The number of rows x[mask] selects is known only when the graph runs, and
 * so are the sizes of what is computed from it. A gradient rule traced by a
 * tape inside the staged function must not make a shape of such a size (a
 * broadcast to it, a mean's divisor): it asks which dims of a value are such
 * (tfe_dyn_dims) and reads them from the value at run time instead. */

static uint32_t all_dims(int rank) { return rank <= 0 ? 0 : rank >= 32 ? ~0u : (1u << rank) - 1; }

/* The data-sized dims of node n's output k, from its inputs' (in[i]). */
static uint32_t node_dyn_dims(const Graph *g, const GNode *n, int k, const uint32_t *in, bool any)
{
    int rank = n->meta[k].rank;
    if (n->kind != G_OP) return any ? all_dims(rank) : 0;
    unsigned f = tfe_ops[n->op].flags;
    if (n->op == OP_BOOL_MASK) { /* the selected rows, then x's dims past the mask's */
        int mr = g->nodes[n->in[1].node].meta[n->in[1].out].rank;
        return (1u | (in[0] >> mr) << 1) & all_dims(rank);
    }
    if (f & F_SELFOUT) return all_dims(rank);
    if (!any) return 0;
    if (f & F_ELEMWISE) { /* broadcasting: dims aligned at the right */
        uint32_t d = 0;
        for (int i = 0; i < n->nin; i++) {
            int r = g->nodes[n->in[i].node].meta[n->in[i].out].rank;
            for (int j = 0; j < r; j++)
                if (in[i] & (1u << j)) d |= 1u << (rank - r + j);
        }
        return d & all_dims(rank);
    }
    int r0 = n->nin > 0 ? g->nodes[n->in[0].node].meta[n->in[0].out].rank : 0;
    if (f & F_REDUCTION) {
        unsigned mask;
        if (kn_axes_mask(tfe_ops[n->op].name, n->at, r0, &mask)) {
            tfe_error_clear();
            return all_dims(rank);
        }
        uint32_t d = 0;
        for (int j = 0, o = 0; j < r0; j++) {
            bool red = mask & (1u << j);
            if (red && !n->at->keepdims) continue;
            if (!red && (in[0] & (1u << j))) d |= 1u << o;
            o++;
        }
        return d & all_dims(rank);
    }
    if (n->op == OP_SOFTMAX || n->op == OP_LOG_SOFTMAX || n->op == OP_CUMSUM || n->op == OP_CUMPROD)
        return in[0] & all_dims(rank); /* x's shape */
    if (n->op == OP_TRANSPOSE) {
        uint32_t d = 0;
        for (int j = 0; j < rank; j++) {
            int p = n->at->nints ? (int)n->at->ints[j] : rank - 1 - j;
            if (in[0] & (1u << p)) d |= 1u << j;
        }
        return d;
    }
    if (n->op == OP_EXPAND_DIMS) {
        int a = (int)n->at->axes[0];
        if (a < 0) a += rank;
        uint32_t low = in[0] & all_dims(a);
        return low | ((in[0] & ~all_dims(a)) << 1);
    }
    if (n->op == OP_RESHAPE) { /* only a -1 dim takes its size from the input */
        uint32_t d = 0;
        for (int j = 0; j < n->at->nints && j < rank; j++)
            if (n->at->ints[j] < 0) d |= 1u << j;
        return d ? d : all_dims(rank);
    }
    return all_dims(rank); /* not known which: all of them */
}

static uint32_t trace_dyn_dims(const tfe_tensor *t)
{
    Tracer *T = trace_current(); /* a hook of the tensor layer: no Interp */
    const TNote *note = t->node;
    if (!T || !T->data_shaped || !note || note->ref.node >= T->g->n) return 0;
    const Graph *g = T->g;
    if (T->capdyn < g->nvals) {
        int cap = g->nvals * 2 + 16;
        T->dyn = xrealloc(T->dyn, sizeof *T->dyn * (size_t)cap);
        T->capdyn = cap;
    }
    for (; T->ndyn < g->n; T->ndyn++) {
        const GNode *n = &g->nodes[T->ndyn];
        uint32_t in[64];
        bool any = false;
        for (int i = 0; i < n->nin; i++) {
            const GNode *x = &g->nodes[n->in[i].node];
            /* an input made later (a region's parameter): not known, so data-sized */
            uint32_t d = n->in[i].node < T->ndyn ? T->dyn[x->vbase + n->in[i].out] : ~0u;
            if (i < 64) in[i] = d;
            any |= d != 0;
        }
        for (int k = 0; k < n->nout; k++)
            T->dyn[n->vbase + k] = n->nin > 64 ? (any ? all_dims(n->meta[k].rank) : 0) : node_dyn_dims(g, n, k, in, any);
    }
    return T->dyn[g->nodes[note->ref.node].vbase + note->ref.out];
}

/* --- outside bindings ------------------------------------------------------------------------- */

static Outside *find_outside(Tracer *T, Env *e, int slot)
{
    for (int i = 0; i < T->nouts; i++)
        if (T->outs[i].env == e && T->outs[i].slot == slot) return &T->outs[i];
    return NULL;
}

static bool has_mutable(Value v);

/* v as it is now: a list or record in it is copied (the signature is of the
 * value when the body first read it, not of what a @host call made of it). */
static Value snapshot(Value v)
{
    if (!has_mutable(v)) {
        value_incref(v);
        return v;
    }
    return sig_copy_containers(v);
}

static Outside *add_outside_value(Tracer *T, Env *e, int slot, const char *name, Value v);

static Outside *add_outside(Tracer *T, Env *e, int slot, const char *name)
{
    Value v = e->slots[slot];
    /* first met after a @host call: the call's value is what it was when the
     * call started (the signature and the inputs); a read node then gives
     * the body its value now */
    for (int i = 0; T->nhost && i < T->nstart; i++)
        if (T->start[i].env == e && T->start[i].slot == slot) v = T->start[i].v;
    return add_outside_value(T, e, slot, name, v);
}

static Outside *add_outside_value(Tracer *T, Env *e, int slot, const char *name, Value v)
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
    o->orig = snapshot(v);
    o->traced = trace_value_leaves(T, v, &o->first_input, &o->ninputs);
    return o;
}

static int outside_read_node_of(Tracer *T, Outside *o, Value v);
static int count_tensors(Value v, int limit);
static int outside_read_node(Tracer *T, Outside *o) { return outside_read_node_of(T, o, o->env->slots[o->slot]); }
static void note_host_read(Tracer *T, Env *e, int slot, const char *name);

int trace_read_outside(Interp *I, Env *e, int slot, const char *name, Value *out)
{
    Tracer *T = I->tracer;
    Value v = e->slots[slot];
    if (T && T->host_reading && T->suspended == T->host_reading) note_host_read(T, e, slot, name);
    if (!trace_recording(I) || (v.kind == V_NIL && v.dtype == 1)) {
        value_incref(v);
        *out = v;
        return 0;
    }
    Outside *o = find_outside(T, e, slot);
    if (!o && sig_too_deep(v, 0)) {
        if (trace_fail(I, I->cur_loc, "'%s' nests lists or records more than %d deep (one that contains itself?); "
                       "a staged function reads outside values that are trees: pass it the parts it reads",
                       name, SIG_MAX_DEPTH))
            return -1;
        value_incref(v); /* an implicit trace stopped recording: the body goes on eagerly */
        *out = v;
        return 0;
    }
    if (!o) o = add_outside(T, e, slot, name);
    if (o->synced < T->nhost && outside_read_node(T, o)) return -1;
    value_incref(o->traced);
    *out = o->traced;
    return 0;
}

int trace_write_outside(Interp *I, Env *e, int slot, const char *name, Value v)
{
    Tracer *T = I->tracer;
    if (trace_recording(I) && T->symbolic) {
        if (trace_fail(I, I->cur_loc, "assigning '%s', a binding outside the staged function, inside a "
                                      "staged conditional or loop is not supported", name)) {
            value_decref(v);
            return -1;
        }
    }
    if (trace_recording(I)) {
        if (sig_has_function(v)) {
            /* the lazy-build pattern (`if m == nil { m = nn.dense(...) }`)
             * lands here with a record (a layer, a model, an optimizer):
             * the graph's write-back cannot make the closures eager code
             * makes, so name the value and say where to build it */
            const char *what = v.kind == V_FN ? "a function"
                               : v.kind == V_RECORD ? "a record holding functions (a layer, a model, an optimizer)"
                                                    : "a list or tuple holding functions";
            if (trace_fail(I, I->cur_loc, "a staged function cannot store %s in '%s', a binding outside it: "
                                          "make it outside the staged function, before its first call", what, name)) {
                value_decref(v);
                return -1;
            }
        } else {
            Outside *o = find_outside(T, e, slot);
            if (!o) o = add_outside(T, e, slot, name);
            o->written = true;
            o->dirty = true;
            o->synced = T->nhost;
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
    Tracer *T = I->tracer;
    if (!trace_recording(I)) return 0;
    if (stamp != T->id && stamp != TRACE_ID_FRESH)
        return trace_fail(I, loc, "a staged function cannot mutate a list or record made outside it "
                                  "(return a new one instead)");
    if (T->symbolic)
        return trace_fail(I, loc, "mutating a list or record inside a staged conditional or loop is not supported");
    return 0;
}

/* --- variables and host calls ------------------------------------------------------------------- */

/* May host node x assign var? Any host call may (a @host function, a
 * restore), except a method bound to another variable (its assign,
 * assign_add, assign_sub change only that one) and the built-in effects
 * that change no variable (print: stage/trace_cf.c, trace_host_harmless). */
static bool host_may_assign(const GNode *x, const Obj *var)
{
    return !trace_host_harmless(x, var);
}

/* May region r of g (or one inside it) assign var? */
static bool region_may_assign(const Graph *g, int r, const Obj *var)
{
    const GRegion *reg = &g->regions[r];
    for (int i = 0; i < reg->n; i++) {
        const GNode *x = &g->nodes[reg->nodes[i]];
        if (x->kind == G_HOST && host_may_assign(x, var)) return true;
        if ((x->kind == G_COND || x->kind == G_WHILE) &&
            (region_may_assign(g, x->regions[0], var) || region_may_assign(g, x->regions[1], var)))
            return true;
    }
    return false;
}

/* May node x of g (in a region) assign var? */
static bool node_may_assign(const Graph *g, const GNode *x, const Obj *var)
{
    if (x->kind == G_HOST) return host_may_assign(x, var);
    if (x->kind == G_COND || x->kind == G_WHILE)
        return region_may_assign(g, x->regions[0], var) || region_may_assign(g, x->regions[1], var);
    return false;
}

/* The tensor of the last read of var in this region, when nothing that
 * could assign it (a host call, a cond or loop holding one) came after it:
 * eager code reads the same tensor then, and a tape sums the gradients of
 * all its uses in one running sum (bit for bit; two tensors would sum two
 * partial sums). NULL otherwise. */
static tfe_tensor *last_read(Tracer *T, Value var)
{
    const GRegion *reg = &T->g->regions[T->region];
    for (int i = reg->n - 1; i >= 0; i--) {
        int id = reg->nodes[i];
        const GNode *x = gnode(T->g, id);
        if (node_may_assign(T->g, x, var.u.o)) return NULL;
        if (x->kind != G_VAR_READ || x->host->obj.u.o != var.u.o) continue;
        for (int k = T->nnotes - 1; k >= 0; k--) {
            TNote *nt = T->notes[k];
            if (nt->ref.node == id && nt->ref.out == 0) return nt->t->node == nt ? nt->t : NULL;
        }
        return NULL;
    }
    return NULL;
}

/* The read of var in region r before node id (which is in r) that later
 * code could use instead of a new read: nothing that could assign var comes
 * between (see last_read). -1 if none. */
static int read_before(const Graph *g, int r, int id, const Obj *var)
{
    const GRegion *reg = &g->regions[r];
    int i = reg->n - 1;
    while (i >= 0 && reg->nodes[i] != id) i--;
    for (i--; i >= 0; i--) {
        const GNode *x = &g->nodes[reg->nodes[i]];
        if (node_may_assign(g, x, var)) return -1;
        if (x->kind == G_VAR_READ && x->host->obj.u.o == var && !x->outer_out) return reg->nodes[i];
    }
    return -1;
}

tfe_tensor *trace_read_at_start(Tracer *T, int id, const Obj *var)
{
    const Graph *g = T->g;
    const GNode *n = &g->nodes[id];
    int rid = read_before(g, n->region, id, var);
    if (rid < 0) { /* a read right after it, when the node cannot assign var */
        if (node_may_assign(g, n, var)) return NULL;
        const GRegion *reg = &g->regions[n->region];
        int i = 0;
        while (i < reg->n && reg->nodes[i] != id) i++;
        for (i++; i < reg->n && rid < 0; i++) {
            const GNode *x = &g->nodes[reg->nodes[i]];
            if (node_may_assign(g, x, var)) return NULL;
            if (x->kind == G_VAR_READ && x->host->obj.u.o == var && !x->outer_out) rid = reg->nodes[i];
        }
    }
    int slot = rid < 0 ? -1 : g->nodes[rid].vbase;
    return slot >= 0 && slot < T->capconcrete ? T->concrete[slot] : NULL;
}

static int var_read_node(Tracer *T, Value var, const tfe_tensor *value);

tfe_tensor *trace_read_after(Tracer *T, int id, Value v)
{
    Graph *g = T->g;
    const GNode *n = &g->nodes[id];
    if (T->symbolic || n->region != T->region) return NULL;
    /* (nothing from the node on may assign var: then a read at the end of
     * the region has the value the node started with) */
    const GRegion *reg = &g->regions[n->region];
    int i = 0;
    while (i < reg->n && reg->nodes[i] != id) i++;
    if (i == reg->n) return NULL;
    for (; i < reg->n; i++)
        if (node_may_assign(g, &g->nodes[reg->nodes[i]], v.u.o)) return NULL;
    tfe_tensor *now = variable_peek(v);
    if (!now) return NULL;
    /* (a tensor of its own: the variable's tensor keeps its own note, and
     * no tape sees this one but through what the trace computes from it) */
    tfe_tensor *a = tensor_alias(now);
    if (!a) return NULL;
    trace_note(T, a, (GRef){var_read_node(T, v, a), 0});
    return a;
}

/* In region r (and those inside it), uses of (from, 0) become uses of to. */
static void use_instead(Graph *g, int r, int from, GRef to)
{
    GRegion *reg = &g->regions[r];
    for (int i = 0; i < reg->n; i++) {
        GNode *x = &g->nodes[reg->nodes[i]];
        for (int k = 0; k < x->nin; k++)
            if (x->in[k].node == from && x->in[k].out == 0) x->in[k] = to;
        if (x->kind == G_COND || x->kind == G_WHILE)
            for (int k = 0; k < 2; k++) use_instead(g, x->regions[k], from, to);
    }
    for (int k = 0; k < reg->nouts; k++)
        if (reg->outs[k].node == from && reg->outs[k].out == 0) reg->outs[k] = to;
}

static void share_in(Tracer *T, int r, int id, int top)
{
    Graph *g = T->g;
    for (int i = 0; i < g->regions[r].n; i++) {
        int rid = g->regions[r].nodes[i];
        const GNode *x = &g->nodes[rid];
        if (x->kind == G_COND || x->kind == G_WHILE)
            for (int k = 0; k < 2; k++) share_in(T, x->regions[k], id, top);
        if (x->kind != G_VAR_READ || x->outer_out || node_may_assign(g, &g->nodes[id], x->host->obj.u.o)) continue;
        int before = read_before(g, g->nodes[id].region, id, x->host->obj.u.o);
        /* not where a tape made in this trace is recording and the read
         * before is a header of its own for the variable's tensor (a read
         * again after an if that may assign it): that tape knows the
         * variable by its tensor, and the if or loop, run as its entry,
         * would read the header, which it never saw read (a gradient of
         * zeros: stage_grad_inner_reread_shared) */
        if (before >= 0 && T->I->tapes.n > T->tapes_at_begin) {
            int slot = g->nodes[before].vbase;
            const tfe_tensor *c = slot >= 0 && slot < T->capconcrete ? T->concrete[slot] : NULL;
            if (!c || c != variable_peek(x->host->obj)) continue;
        }
        if (before >= 0) use_instead(g, top, rid, (GRef){before, 0});
    }
}

/* Cond or while id was just traced: its reads of a variable it cannot
 * assign, which the region read before it (with nothing that could assign
 * it between), use that read instead, as eager code uses the same tensor:
 * a tape then sums the gradients of all the uses in one running sum, in
 * eager order (two reads, two partial sums). The reads stay, unused
 * (effect nodes). */
void trace_share_reads(Tracer *T, int id)
{
    Graph *g = T->g;
    for (int k = 0; k < 2; k++) share_in(T, gnode(g, id)->regions[k], id, gnode(g, id)->regions[k]);
}

/* A var_read node of var, of value's dtype and shape, on the effect chain. */
static int var_read_node(Tracer *T, Value var, const tfe_tensor *value)
{
    int id = new_node(T, G_VAR_READ, 0, 1);
    GNode *g = gnode(T->g, id);
    value_incref(var);
    g->host->obj = var;
    meta_of(&g->meta[0], value);
    effect_chain(T, id);
    return id;
}

tfe_tensor *trace_var_read(Tracer *T, Value var, tfe_tensor *value)
{
    if (!trace_recording(T->I) || !value) return value;
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
    int id = var_read_node(T, var, value);
    if (n) { /* read before: a second header for this read */
        tfe_tensor *a = tensor_alias(value);
        /* ... which eager code reads as the one tensor: to a tape outside
         * the call the header is a copy of it, so the gradients of all its
         * uses add to one sum in tape order (bit for bit eager's; two
         * sources would be two partial sums added at the end). The
         * variable's reads on such a tape are the tensor's (builtins_
         * autodiff.c, var_read). Not to a tape made inside the call: what
         * it records is traced into the graph, and serves the calls that
         * assign the variable too. The copy is the tensor itself to that
         * tape (its uses add to the tensor's running sum one by one). */
        /* (where no tape outside has seen the tensor yet, an earlier read
         * being one only the trace made, in a branch traced symbolically
         * and not taken: the tapes outside read it here first, as eager
         * code does, or the header would be a read of its own to them, and
         * the variable's gradient two partial sums; stage_grad2_if_not_taken_var) */
        if (a && T->tapes_at_begin && !T->symbolic) tapes_read_outer(T->id, var, value);
        if (a && T->tapes_at_begin) tfe_tape_record_same_outer(value, a, T->tapes_at_begin);
        tensor_decref(value);
        value = a;
    }
    trace_note(T, value, (GRef){id, 0});
    return value;
}

/* value (var's tensor now) stands from here on for a new read of var: the
 * value a cond or while run as one tape entry read (stage/trace_cf.c). */
void trace_var_reread(Tracer *T, Value var, tfe_tensor *value)
{
    if (!trace_recording(T->I) || T->symbolic || !value) return;
    trace_note(T, value, (GRef){var_read_node(T, var, value), 0});
}

/* --- host calls and the state around them ----------------------------------------------------
 * A @host function runs in the interpreter when the graph runs, and may read
 * and change what the body sees: outside bindings, and the lists and records
 * passed to it. The eager order is kept with nodes around its host node
 * (HostSync, stage/host_node.h): before it, a write node for each outside
 * binding the body assigned since the last @host call (so the function sees
 * the body's value, and a change it makes is not overwritten by a later
 * write-back); after it, the leaves of the lists and records it got are
 * extra outputs of the host node, and the body's next read of an outside
 * binding is a read node after it. What cannot be a graph value (a length,
 * keys, a string) is checked at run time against the trace. */

static bool has_mutable(Value v)
{
    if (v.kind == V_LIST || v.kind == V_RECORD) return true;
    if (v.kind == V_TUPLE) {
        Seq *q = (Seq *)v.u.o;
        for (int i = 0; i < q->n; i++)
            if (has_mutable(q->items[i])) return true;
    }
    return false;
}

/* Does v hold a tuple, list or record made outside this trace? */
static bool made_outside(Tracer *T, Value v)
{
    if (v.kind == V_TUPLE || v.kind == V_LIST) {
        Seq *q = (Seq *)v.u.o;
        if (q->trace_id != T->id) return true;
        for (int i = 0; i < q->n; i++)
            if (made_outside(T, q->items[i])) return true;
    } else if (v.kind == V_RECORD) {
        Record *r = (Record *)v.u.o;
        if (r->trace_id != T->id) return true;
        for (int i = 0; i < r->n; i++)
            if (made_outside(T, r->vals[i])) return true;
    }
    return false;
}

/* Does v hold a list or record made by this trace's body? */
static bool holds_inside(Tracer *T, Value v)
{
    if (v.kind == V_TUPLE || v.kind == V_LIST) {
        Seq *q = (Seq *)v.u.o;
        if (v.kind == V_LIST && q->trace_id == T->id) return true;
        for (int i = 0; i < q->n; i++)
            if (holds_inside(T, q->items[i])) return true;
    } else if (v.kind == V_RECORD) {
        Record *r = (Record *)v.u.o;
        if (r->trace_id == T->id) return true;
        for (int i = 0; i < r->n; i++)
            if (holds_inside(T, r->vals[i])) return true;
    }
    return false;
}

/* A @host function that can reach a list or record the body made through an
 * outside binding could change it behind the graph's back: the graph stores
 * a copy in the binding (the body's own object is not a run-time value), so
 * what the function does to it would not reach the body's later reads. Only
 * arguments are kept in step (their leaves are read back after the call). */
static int check_reachable(Tracer *T, const char *fname, Loc loc)
{
    for (int i = 0; i < T->nouts; i++) {
        Outside *o = &T->outs[i];
        if (holds_inside(T, o->env->slots[o->slot]))
            return trace_fail(T->I, loc,
                              "%s(), a @host function, is called while the outside binding '%s' holds a list or "
                              "record made in the staged function, which a graph cannot keep in step with what "
                              "the function does to it (pass it to the function as an argument, or assign the "
                              "binding after the call)",
                              fname, o->name);
    }
    return 0;
}

static char *bytes_copy(const SigBuf *s)
{
    char *d = xmalloc(s->n ? s->n : 1);
    mem_copy(d, s->b, s->n);
    return d;
}

static HostSync *binding_sync(Outside *o, bool write)
{
    HostSync *s = xcalloc(1, sizeof *s);
    s->env = o->env;
    o->env->h.refcount++;
    s->slot = o->slot;
    s->name = o->name;
    s->write = write;
    s->tmpl = v_nil();
    return s;
}

/* Before the first @host call: the value of every binding outside the body
 * (its enclosing Envs), which the call may change before the body first
 * reads one of them. */
static void remember_start(Tracer *T)
{
    for (Env *e = T->call_env ? T->call_env->parent : NULL; e; e = e->parent)
        for (int s = 0; s < e->nslots; s++) {
            T->start = xrealloc(T->start, sizeof *T->start * (size_t)(T->nstart + 1));
            T->start[T->nstart++] = (struct StartSlot){e, s, snapshot(e->slots[s])};
        }
}

/* Store the body's value of each outside binding it assigned since the last
 * @host call, before the next one runs. */
static void flush_outsides(Tracer *T)
{
    for (int i = 0; i < T->nouts; i++) {
        Outside *o = &T->outs[i];
        if (!o->dirty) continue;
        SigBuf sb = {0};
        Leaves lv = {0};
        sig_flatten(o->traced, &sb, &lv, SIG_OUTPUT);
        sig_free(&sb);
        GRef *rp = xmalloc(sizeof *rp * (size_t)(lv.n ? lv.n : 1));
        for (int k = 0; k < lv.n; k++) rp[k] = trace_ref(T, lv.t[k]); /* constants first */
        int id = new_node(T, G_HOST, lv.n, 0);
        GNode *n = gnode(T->g, id);
        mem_copy(n->in, rp, sizeof *rp * (size_t)lv.n);
        free(rp);
        n->host_nil = true;
        n->host->sync = binding_sync(o, true);
        int k = 0;
        n->host->sync->tmpl = sig_rebuild(o->traced, lv.t, &k, false, 0);
        effect_chain(T, id);
        leaves_free(&lv);
        o->dirty = false;
    }
}

/* The body reads an outside binding after a @host call that may have changed
 * it: a read node, in the top region (inside a traced branch it goes before
 * the conditional, which is after the host call: a branch makes none). */
static int outside_read_node_of(Tracer *T, Outside *o, Value v)
{
    if (sig_has_function(v)) { /* a function's identity is all there is to it */
        value_incref(v);
        value_decref(o->traced);
        o->traced = v;
        o->synced = T->nhost;
        return 0;
    }
    SigBuf sb = {0}, bb = {0};
    Leaves lv = {0}, bl = {0};
    sig_flatten(v, &sb, &lv, SIG_OUTPUT);
    /* the value the graph holds for it: a leaf the call left as it was is
     * that value (and its gradient goes there) */
    sig_flatten(o->traced, &bb, &bl, SIG_OUTPUT);
    bool pass = bb.n == sb.n && !mem_cmp(bb.b, sb.b, sb.n) && bl.n == lv.n;
    int nin = pass ? bl.n : 0, saved_region = T->region;
    GRef *rp = xmalloc(sizeof *rp * (size_t)(nin ? nin : 1));
    T->region = 0;
    for (int k = 0; k < nin; k++) rp[k] = trace_ref(T, bl.t[k]); /* constants first */
    T->region = saved_region;
    int id = new_node_in(T, 0, G_HOST, nin, 2 * lv.n);
    GNode *n = gnode(T->g, id);
    mem_copy(n->in, rp, sizeof *rp * (size_t)nin);
    free(rp);
    n->host_nil = true;
    n->host->sync = binding_sync(o, false);
    n->host->sync->sig = bytes_copy(&sb);
    n->host->sync->nsig = sb.n;
    n->host->sync->changed = !pass;
    T->suspended++; /* comparing values is not a use of them (no signature by value) */
    for (int k = 0; pass && k < lv.n; k++) n->host->sync->changed |= !sig_same_leaf(lv.t[k], bl.t[k]);
    T->suspended--;
    /* numbers (0-d tensors too: they are unboxed) the body never assigned,
     * and the call left numbers: nothing a tape watches led to them (a
     * tensor the call made of them, c = c + x, may come from its input) */
    if (!o->written && count_tensors(o->orig, 0) == 0 && count_tensors(v, 0) == 0) n->host->sync->changed = false;
    if (T->region == 0) effect_chain(T, id);
    tfe_tensor **al = xmalloc(sizeof *al * (size_t)(lv.n ? lv.n : 1));
    for (int k = 0; k < lv.n; k++) {
        al[k] = tensor_alias(lv.t[k]);
        meta_of(&gnode(T->g, id)->meta[k], al[k]);
        /* leaf k unchanged by the call (1) or not (0): its gradient's factor */
        tfe_meta *fm = &gnode(T->g, id)->meta[lv.n + k];
        fm->dtype = dtype_is_float(al[k]->dtype) ? al[k]->dtype : TFE_FLOAT32;
        fm->weak = false;
        fm->rank = 0;
        trace_note(T, al[k], (GRef){id, k});
        if (tfe_tapes_active) host_record_identity(lv.t[k], al[k]); /* the tracing call is eager */
    }
    int k = 0;
    Value view = sig_rebuild(v, al, &k, false, 0);
    for (int i = 0; i < lv.n; i++) tensor_decref(al[i]);
    free(al);
    leaves_free(&lv);
    leaves_free(&bl);
    sig_free(&sb);
    sig_free(&bb);
    value_decref(o->traced);
    o->traced = view;
    o->synced = T->nhost;
    return 0;
}

/* Outside bindings the body assigned (and the graph holds now) with float
 * leaves: a @host function may read them, and its gradient then reaches
 * them. Their leaves go after the arguments' in lv. */
static bool in_ctx(const struct HostCtx *ctx, int n, const Outside *o)
{
    for (int i = 0; i < n; i++)
        if (ctx[i].env == o->env && ctx[i].slot == o->slot) return true;
    return false;
}

static void add_ctx(Outside *o, Leaves *lv, struct HostCtx **pctx, int *n);

static struct HostCtx *host_context(Tracer *T, Leaves *lv, int *n)
{
    struct HostCtx *ctx = NULL;
    for (int i = 0; i < T->nouts; i++) {
        Outside *o = &T->outs[i];
        if (!o->written || o->synced != T->nhost) continue;
        add_ctx(o, lv, &ctx, n);
    }
    return ctx;
}

/* o's graph value as one more input of a host call that may read it. */
static void add_ctx(Outside *o, Leaves *lv, struct HostCtx **pctx, int *n)
{
    struct HostCtx *ctx = *pctx;
    {
        SigBuf sb = {0};
        Leaves l = {0};
        sig_flatten(o->traced, &sb, &l, SIG_OUTPUT);
        sig_free(&sb);
        bool fl = o->orig.kind == V_SCALAR; /* (an int too: the function's backward reads it) */
        for (int k = 0; k < l.n; k++) fl |= dtype_is_float(l.t[k]->dtype);
        if (fl) {
            ctx = xrealloc(ctx, sizeof *ctx * (size_t)(*n + 1));
            struct HostCtx *c = &ctx[(*n)++];
            c->env = o->env;
            o->env->h.refcount++;
            c->slot = o->slot;
            int k = 0;
            c->tmpl = sig_rebuild(o->traced, l.t, &k, false, 0);
            c->nleaves = l.n;
            for (int j = 0; j < l.n; j++) {
                tensor_incref(l.t[j]);
                leaves_push(lv, l.t[j]);
            }
        }
        leaves_free(&l);
    }
    *pctx = ctx;
}

/* How many tensors v holds (numbers aside: a tape watches tensors), up to
 * more than limit. */
static int count_tensors(Value v, int limit)
{
    int n = 0;
    if (v.kind == V_TENSOR) return 1;
    if (v.kind == V_TUPLE || v.kind == V_LIST) {
        Seq *q = (Seq *)v.u.o;
        for (int i = 0; i < q->n && n <= limit; i++) n += count_tensors(q->items[i], limit);
    } else if (v.kind == V_RECORD) {
        Record *r = (Record *)v.u.o;
        for (int i = 0; i < r->n && n <= limit; i++) n += count_tensors(r->vals[i], limit);
    }
    return n;
}

/* While a @host function runs at trace time: the outside bindings it reads. */
static void note_host_read(Tracer *T, Env *e, int slot, const char *name)
{
    for (int i = 0; i < T->nhreads; i++)
        if (T->hreads[i].env == e && T->hreads[i].slot == slot) return;
    T->hreads = xrealloc(T->hreads, sizeof *T->hreads * (size_t)(T->nhreads + 1));
    T->hreads[T->nhreads++] = (struct HostRead){e, slot, name};
}

/* A @host function made inside the staged body (host(fn () => y + 1.0), a
 * nested @host fn) reads a binding of the body: the graph's host node calls
 * that very closure at every call, whose Env holds the values of the call
 * that traced, so a value the body computed would be stale. */
/* A function of the body handed to a @host function (call_it(fn () => y),
 * in a list or record too) is the same: the graph hands the host node the
 * closure of the call that traced. An Env of the body is one of this trace
 * made before the @host call began (T->host_born). */
static bool body_env(const Tracer *T, const Env *e) { return e->trace_id == T->id && e->born < T->host_born; }

int trace_host_reads_body(Interp *I, Env *e, Value v, const char *name, Loc loc)
{
    Tracer *T = I->tracer;
    if (!T || T->failed || !T->host_reading || T->suspended != T->host_reading) return 0;
    bool captured = false;
    for (Env *x = T->host_env; x && !captured; x = x->parent) captured = x == e;
    bool handed = !captured && body_env(T, e);
    if (!captured && !handed) return 0;
    SigBuf sb = {0};
    Leaves lv = {0};
    sig_flatten(v, &sb, &lv, SIG_OUTPUT);
    bool traced = false;
    for (int k = 0; k < lv.n && !traced; k++) traced = lv.t[k]->node != NULL;
    leaves_free(&lv);
    sig_free(&sb);
    if (!traced) return 0;
    if (handed)
        return trace_fail(I, loc, "a function of the staged function, called by a @host function, reads '%s', a "
                                  "value of the body that is not known until the graph runs (the function would "
                                  "keep the value of the call that traced it): pass '%s' to the @host function as "
                                  "an argument instead", name, name);
    return trace_fail(I, loc, "a @host function made inside the staged function reads '%s', a value of the body "
                              "that is not known until the graph runs (the function would keep the value of the "
                              "call that traced it): pass '%s' to the function as an argument, or define the "
                              "function outside the staged function", name, name);
}

/* The graph's host node calls the closure of the call that traced, whose
 * Env is that call's: an assignment there would never reach the body of a
 * later call. */
int trace_host_writes_body(Interp *I, Env *e, const char *name, Loc loc)
{
    Tracer *T = I->tracer;
    if (!T || T->failed || !T->host_reading || T->suspended != T->host_reading || !body_env(T, e)) return 0;
    return trace_fail(I, loc, "a function called at run time by the staged function's graph (a @host function, "
                              "or a function handed to one) assigns '%s', a binding of the staged function: the "
                              "graph would call it with the bindings of the call that traced it; return the new "
                              "value and assign '%s' in the staged function", name, name);
}

/* While a @host function runs at trace time: the variables it reads (float
 * ones: a gradient can reach them), with the value of the first read. */
void trace_note_host_var(Tracer *T, Value var, const tfe_tensor *value)
{
    if (!T || !T->host_reading || T->suspended != T->host_reading || !value || !dtype_is_float(value->dtype)) return;
    for (int i = 0; i < T->nhvars; i++)
        if (T->hvars[i].var.u.o == var.u.o) return;
    T->hvars = xrealloc(T->hvars, sizeof *T->hvars * (size_t)(T->nhvars + 1));
    value_incref(var);
    tensor_incref((tfe_tensor *)value);
    T->hvars[T->nhvars++] = (struct HostVar){var, (tfe_tensor *)value};
}

static void host_vars_clear(Tracer *T)
{
    for (int i = 0; i < T->nhvars; i++) {
        value_decref(T->hvars[i].var);
        tensor_decref(T->hvars[i].t);
    }
    free(T->hvars);
    T->hvars = NULL;
    T->nhvars = 0;
}

/* After a @host call at trace time: the variables it read become inputs of
 * its node too, reads of them before it (their values at the call), so its
 * gradient reaches them, and its backward runs the function again with
 * these values (stage/host_grad.c), not the ones at gradient time. A
 * variable the function assigned before reading it gets none (its value
 * then came from the call). tapes: the read is one to the tapes (the call
 * is one tape entry for them, whose inputs these are). */
static void host_read_vars(Tracer *T, Leaves *lv, struct HostCtx **pctx, int *n, bool tapes)
{
    for (int i = 0; i < T->nhvars; i++) {
        Value var = T->hvars[i].var;
        tfe_tensor *now = variable_peek(var);
        bool seen = false;
        for (int j = 0; j < *n && !seen; j++) seen = !(*pctx)[j].env && (*pctx)[j].tmpl.u.o == var.u.o;
        if (seen || now != T->hvars[i].t) continue;
        tfe_tensor *t;
        if (tapes) t = value_to_tensor(var);
        else {
            tensor_incref(now);
            t = trace_var_read(T, var, now);
        }
        if (!t) continue;
        *pctx = xrealloc(*pctx, sizeof **pctx * (size_t)(*n + 1));
        value_incref(var);
        (*pctx)[(*n)++] = (struct HostCtx){.env = NULL, .slot = -1, .tmpl = var, .nleaves = 1};
        leaves_push(lv, t);
    }
    host_vars_clear(T);
}

/* Before a @host call: every outside binding's value (what the call sees). */
static void snapshot_envs(Tracer *T)
{
    for (int i = 0; i < T->npre; i++) value_decref(T->pre[i].v);
    T->npre = 0;
    for (Env *e = T->call_env ? T->call_env->parent : NULL; e; e = e->parent)
        for (int s = 0; s < e->nslots; s++) {
            T->pre = xrealloc(T->pre, sizeof *T->pre * (size_t)(T->npre + 1));
            T->pre[T->npre++] = (struct StartSlot){e, s, snapshot(e->slots[s])};
        }
}

/* After a @host call at trace time: the outside bindings holding tensors it
 * read become inputs of its node too (their values before it: a read node
 * when a call before may have changed them), so its gradient reaches them. */
static void host_read_context(Tracer *T, Leaves *lv, struct HostCtx **ctx, int *n)
{
    for (int i = 0; i < T->nhreads; i++) {
        struct HostRead *h = &T->hreads[i];
        Value before = h->env->slots[h->slot];
        for (int k = 0; k < T->npre; k++)
            if (T->pre[k].env == h->env && T->pre[k].slot == h->slot) before = T->pre[k].v;
        /* a big container (a data set in a global) would make every call
         * flatten it: such a binding gets no gradient (docs/staging.md) */
        int nt = count_tensors(before, 64);
        /* a number: its backward runs the function with the value of the call */
        bool number = before.kind == V_SCALAR && before.dtype != TFE_BOOL && !before.lit;
        if ((nt == 0 && !number) || nt > 64) continue;
        Outside *o = find_outside(T, h->env, h->slot);
        if (!o) o = add_outside_value(T, h->env, h->slot, h->name, before);
        if (o->synced < T->nhost && outside_read_node_of(T, o, before)) continue;
        if (!in_ctx(*ctx, *n, o)) add_ctx(o, lv, ctx, n);
    }
    T->nhreads = 0;
}

/* After a @host call at trace time: what it did to the lists and records
 * it got. One the body made: its structure now is what every call must
 * leave (checked at run time), its leaves (in *after) become outputs. One
 * made outside gets a copy at run time, so it must not change. */
/* Where each list/record argument made outside the trace comes from, before
 * the call: -1, p (the staged function's argument p) or -2 - i (the value of
 * outside binding i, as the body sees it) — then the call gets that object
 * at run time too. */
static int *host_arg_sources(Tracer *T, int argc, int nargs, const Value *argv, const Value *kwvals)
{
    int *src = xmalloc(sizeof *src * (size_t)(nargs ? nargs : 1));
    for (int i = 0; i < nargs; i++) {
        Value a = i < argc ? argv[i] : kwvals[i - argc];
        src[i] = -1;
        if (!(a.kind == V_LIST || a.kind == V_RECORD) || !made_outside(T, a)) continue;
        for (int p = 0; p < T->nargs && src[i] == -1; p++)
            if (T->args[p].kind == a.kind && T->args[p].u.o == a.u.o) src[i] = p;
        for (int k = 0; k < T->nouts && src[i] == -1; k++) {
            Outside *o = &T->outs[k];
            Value v = o->env->slots[o->slot];
            if (v.kind == a.kind && v.u.o == a.u.o && o->traced.u.o == a.u.o) src[i] = -2 - k;
        }
    }
    return src;
}

static int host_after_args(Tracer *T, const char *fname, Loc loc, int argc, int nargs, const Value *argv,
                           const Value *kwvals, const HostArg *ha, const SigBuf *pre, const Leaves *in,
                           const int *src, HostSync **sync, Leaves *after)
{
    HostSync *s = NULL;
    int first = 0, rc = 0;
    for (int i = 0; i < nargs && !rc; first += ha[i].nleaves, i++) {
        Value a = i < argc ? argv[i] : kwvals[i - argc];
        if (!has_mutable(a)) continue;
        if (!s) s = xcalloc(1, sizeof *s), s->tmpl = v_nil();
        s->after = xrealloc(s->after, sizeof *s->after * (size_t)(s->nafter + 1));
        HostAfter *h = &s->after[s->nafter++];
        *h = (HostAfter){.arg = i, .outside = made_outside(T, a), .param = -1};
        if (src[i] >= 0) h->param = src[i];
        if (src[i] <= -2) {
            Outside *o = &T->outs[-2 - src[i]];
            h->env = o->env;
            o->env->h.refcount++;
            h->slot = o->slot;
        }
        SigBuf sb = {0};
        Leaves lv = {0};
        sig_flatten(a, &sb, &lv, SIG_OUTPUT);
        h->sig = bytes_copy(&sb);
        h->nsig = sb.n;
        if (h->outside && h->env) {
            /* the very object, at every call: what the call does to it is
             * done, and the body reads it back with `host load` */
        } else if (h->outside && h->param < 0) {
            bool same = sb.n == pre[i].n && !mem_cmp(sb.b, pre[i].b, sb.n) && lv.n == ha[i].nleaves;
            T->suspended++; /* comparing values is not a use of them (no signature by value) */
            for (int k = 0; same && k < lv.n; k++) same = sig_same_leaf(lv.t[k], in->t[first + k]);
            T->suspended--;
            if (!same)
                rc = trace_fail(T->I, loc, "%s(), a @host function, changed a list or record made outside the "
                                           "staged function; staged code passes it a copy (make it inside the "
                                           "staged function, or have the @host function return the new values)",
                                fname);
        } else {
            h->nleaves = lv.n;
            for (int k = 0; k < lv.n; k++) {
                tensor_incref(lv.t[k]);
                leaves_push(after, lv.t[k]);
            }
        }
        leaves_free(&lv);
        sig_free(&sb);
    }
    *sync = s;
    return rc;
}

/* The leaves of the lists and records the body made and passed to host node
 * id, after the call: outputs from out0 on, which now stand in them. */
static void host_after_outputs(Tracer *T, int id, int out0, int argc, const Value *argv, const Value *kwvals,
                               const Leaves *after, tfe_tensor **outs)
{
    HostSync *s = gnode(T->g, id)->host->sync;
    int out = out0, k = 0;
    for (int i = 0; i < s->nafter; i++) {
        HostAfter *h = &s->after[i];
        if (!host_after_reads(h)) continue;
        tfe_tensor **al = outs + out;
        for (int j = 0; j < h->nleaves; j++, k++, out++) {
            al[j] = tensor_alias(after->t[k]);
            meta_of(&gnode(T->g, id)->meta[out], al[j]);
            trace_note(T, al[j], (GRef){id, out});
        }
        int kk = 0;
        Value a = h->arg < argc ? argv[h->arg] : kwvals[h->arg - argc];
        sig_replace_leaves(a, al, &kk);
    }
}

/* A builtin whose call is an effect, and whether it returns nil. */
static bool known_nil(Value f) { return f.kind == V_BUILTIN && ((Builtin *)f.u.o)->effect == 1; }

/* Has the trace T done nothing that a run of the body again would do
 * twice: no effect (a host call, a variable assign, a collective), no
 * outside binding written? (A draw is drawn again from the state the trace
 * began with: staged.c rewinds it.) */
bool trace_nothing_done(const Tracer *T)
{
    for (int i = 0; i < T->g->n; i++) {
        const GNode *m = &T->g->nodes[i];
        if (m->kind == G_HOST || (m->kind == G_OP && (tfe_ops[m->op].flags & F_COLLECTIVE))) return false;
    }
    for (int i = 0; i < T->nouts; i++)
        if (T->outs[i].written) return false;
    return true;
}

/* --- effects replayed by a run again ---------------------------------------------------------- */

void effect_replay_free(EffectReplay *r)
{
    if (!r) return;
    for (int i = 0; i < r->n; i++) {
        value_decref(r->e[i].f);
        value_decref(r->e[i].result);
        effect_state_free(&r->e[i].post);
    }
    free(r->e);
    effect_state_free(&r->pre);
    free(r);
}

static void state_push(EffectState *st, Env *e, int slot, Value var, Value v)
{
    st->s = xrealloc(st->s, sizeof *st->s * (size_t)(st->n + 1));
    if (e) e->h.refcount++;
    value_incref(var);
    value_incref(v);
    st->s[st->n++] = (EffectSlot){e, slot, var, v};
}

void effect_state_take(const EffectReplay *r, EffectState *st)
{
    *st = (EffectState){0};
    for (Env *e = r->outer; e; e = e->parent)
        for (int s = 0; s < e->nslots; s++) state_push(st, e, s, v_nil(), e->slots[s]);
    for (int i = 0; r->g && i < r->g->n; i++) {
        const GNode *n = &r->g->nodes[i];
        Value var = v_nil();
        if (n->kind == G_VAR_READ) var = n->host->obj;
        else if (n->kind == G_HOST && n->host->obj.kind == V_BUILTIN && value_is_variable(((Builtin *)n->host->obj.u.o)->self))
            var = ((Builtin *)n->host->obj.u.o)->self;
        if (var.kind == V_NIL) continue;
        bool seen = false;
        for (int k = 0; k < st->n && !seen; k++) seen = !st->s[k].env && st->s[k].var.u.o == var.u.o;
        if (seen) continue;
        tfe_tensor *t = variable_peek(var);
        tensor_incref(t);
        Value v = v_tensor_take(t);
        state_push(st, NULL, -1, var, v);
        value_decref(v);
    }
}

void effect_state_put(const EffectState *st)
{
    for (int i = 0; i < st->n; i++) {
        const EffectSlot *x = &st->s[i];
        if (x->env) {
            value_incref(x->v);
            value_decref(x->env->slots[x->slot]);
            x->env->slots[x->slot] = x->v;
        } else {
            variable_replace_take(x->var, value_to_tensor(x->v));
        }
    }
}

void effect_state_free(EffectState *st)
{
    for (int i = 0; i < st->n; i++) {
        if (st->s[i].env) env_decref(st->s[i].env);
        value_decref(st->s[i].var);
        value_decref(st->s[i].v);
    }
    free(st->s);
    *st = (EffectState){0};
}

/* A new entry at the end of *rp (made if NULL), for f (a new reference). */
static EffectDone *effect_push(EffectReplay **rp, Value f)
{
    if (!*rp) *rp = xcalloc(1, sizeof **rp);
    EffectReplay *r = *rp;
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 4;
        r->e = xrealloc(r->e, sizeof *r->e * (size_t)r->cap);
    }
    EffectDone *d = &r->e[r->n++];
    *d = (EffectDone){0};
    value_incref(f);
    d->f = f;
    return d;
}

void effect_replay_note(EffectReplay **rp, Value f, Value result)
{
    EffectDone *d = effect_push(rp, f);
    value_incref(result);
    d->result = result;
    tfe_random_state(&d->rkey, &d->rcounter);
    d->replayable = true;
}

/* After an effect made at trace time (not in a branch traced symbolically):
 * noted in T->done, with its result as a copy no tape tracks, or itself
 * where the tapes outside track an argument (tracked: the entries of the
 * function's ops lead to it; trace.h, EffectDone). */
static void note_effect_done(Tracer *T, Value f, Value result, bool replayable, bool tracked)
{
    EffectDone *d = effect_push(&T->done, f);
    d->result = v_nil();
    if (result.kind == V_TENSOR && !tracked) {
        tfe_tensor *c = tensor_copy(result.u.t);
        if (c) d->result = v_tensor_take(c);
        else replayable = false;
    } else {
        value_incref(result);
        d->result = result;
    }
    tfe_random_state(&d->rkey, &d->rcounter);
    d->replayable = replayable;
    d->tracked = tracked && result.kind == V_TENSOR;
}

static bool same_callable(Value a, Value b)
{
    if (a.kind != b.kind) return false;
    if (a.kind == V_FN) return ((Closure *)a.u.o)->fn == ((Closure *)b.u.o)->fn;
    if (a.kind == V_BUILTIN) {
        const Builtin *x = (const Builtin *)a.u.o, *y = (const Builtin *)b.u.o;
        return x->fn == y->fn && x->data == y->data && x->self.kind == y->self.kind &&
               (x->self.kind == V_NIL || x->self.u.o == y->self.u.o);
    }
    return a.u.o == b.u.o;
}

static const char *callable_name(Value f)
{
    return f.kind == V_FN ? ((Closure *)f.u.o)->name : f.kind == V_BUILTIN ? ((Builtin *)f.u.o)->name : "?";
}

int effect_replay_call(Interp *I, Value f, Value *out)
{
    EffectReplay *r = I->effect_replay;
    while (r && r->next >= r->n) r = r->prev;
    if (!r) return 0;
    EffectDone *d = &r->e[r->next];
    if (!same_callable(d->f, f)) {
        raise_at(I, I->cur_loc, "internal error: a staged call run again eagerly (its trace stopped at an `if` "
                                "under three tapes) called %s() where its trace had called %s()",
                 callable_name(f), callable_name(d->f));
        return -1;
    }
    r->next++;
    if (d->rerun) return 0; /* (made again: stage/staged.c, stage_error_redo) */
    *out = d->result;
    d->result = v_nil();
    tfe_random_restore(d->rkey, d->rcounter);
    /* what the @host function assigned, as it was right after it */
    effect_state_put(&d->post);
    return 1;
}

/* Do two values hold the same things (tensors and objects the same ones,
 * numbers the same bits, containers the same items)? */
static bool value_same(Value a, Value b)
{
    if (a.kind != b.kind) return false;
    if (a.kind == V_SCALAR)
        return a.dtype == b.dtype && a.weak == b.weak && a.lit == b.lit && !mem_cmp(&a.u, &b.u, sizeof a.u);
    if (a.kind == V_NIL) return true;
    if (a.kind == V_TUPLE || a.kind == V_LIST) {
        const Seq *x = (const Seq *)a.u.o, *y = (const Seq *)b.u.o;
        if (x->n != y->n) return false;
        for (int i = 0; i < x->n; i++)
            if (!value_same(x->items[i], y->items[i])) return false;
        return true;
    }
    if (a.kind == V_RECORD) {
        const Record *x = (const Record *)a.u.o, *y = (const Record *)b.u.o;
        if (x->n != y->n) return false;
        for (int i = 0; i < x->n; i++)
            if (x->keys[i] != y->keys[i] || !value_same(x->vals[i], y->vals[i])) return false;
        return true;
    }
    return a.u.o == b.u.o;
}

/* A run of the body again from its start, replaying the trace's effects
 * (Tracer.done), sees what the trace saw when: every effect so far is one
 * noted there and replayable (each gives the body only its result), the
 * body wrote no outside binding (that write would be made twice, and read
 * back by the run again), no collective ran, no if or loop that draws,
 * reads a variable or makes an effect is a node of the top region (the run
 * again makes its draws and effects in between; one that only computes
 * makes none),
 * no variable read before a @host call holds another value now (the call
 * assigned it), no built-in effect but the harmless ones (print; not
 * v.assign) was made, and every outside
 * binding is what it was before the first @host call (none changed what
 * the run again reads before that call). */
/* Does region r (and every if or loop nested in it) only compute: no host
 * call, draw, collective or variable read, nothing a run again would make
 * or see differently? */
static bool region_only_computes(const Graph *g, int r)
{
    const GRegion *reg = &g->regions[r];
    for (int i = 0; i < reg->n; i++) {
        const GNode *x = &g->nodes[reg->nodes[i]];
        if (x->kind == G_HOST || x->kind == G_VAR_READ) return false;
        if (x->kind == G_OP && (tfe_ops[x->op].flags & (F_RANDOM | F_COLLECTIVE))) return false;
        if ((x->kind == G_COND || x->kind == G_WHILE) &&
            (!region_only_computes(g, x->regions[0]) || !region_only_computes(g, x->regions[1])))
            return false;
    }
    return true;
}

bool trace_effects_replayable(const Tracer *T)
{
    const EffectReplay *r = T->done;
    if (!r || T->I->check_replay || T->I->check_recording) return false;
    for (int i = 0; i < r->n; i++)
        if (!r->e[i].replayable) return false;
    for (int i = 0; i < T->nouts; i++)
        if (T->outs[i].written) return false;
    /* (a variable read before a @host call that assigned it since: the run
     * again would read the value after; nodes are made in order) */
    /* (the top region's nodes: those of a branch traced and then run at
     * trace time instead are no part of the call) */
    const GRegion *top = &T->g->regions[0];
    int last_call = -1;
    for (int k = 0; k < top->n; k++)
        if (T->g->nodes[top->nodes[k]].kind == G_HOST && T->g->nodes[top->nodes[k]].host->obj.kind == V_FN)
            last_call = top->nodes[k];
    for (int k = 0; k < top->n; k++) {
        int i = top->nodes[k];
        const GNode *m = &T->g->nodes[i];
        if (m->kind == G_OP && (tfe_ops[m->op].flags & F_COLLECTIVE)) return false;
        /* (a traced if or loop: the run again makes its draws and effects
         * between the replayed ones) */
        /* (one whose branches or body only compute makes none: the run
         * again computes it eagerly) */
        if ((m->kind == G_COND || m->kind == G_WHILE) &&
            (!region_only_computes(T->g, m->regions[0]) || !region_only_computes(T->g, m->regions[1])))
            return false;
        if (m->kind == G_VAR_READ && i < last_call) {
            int slot = m->vbase;
            const tfe_tensor *was = slot >= 0 && slot < T->capconcrete ? T->concrete[slot] : NULL;
            if (!was || was != variable_peek(m->host->obj)) return false;
        }
        /* (a built-in effect: one that assigns no variable, print) */
        if (m->kind == G_HOST && m->host->obj.kind == V_BUILTIN &&
            (((const Builtin *)m->host->obj.u.o)->self.kind != V_NIL || !trace_host_harmless(m, NULL)))
            return false;
    }
    for (int i = 0; T->nhost && i < T->nstart; i++)
        if (!value_same(T->start[i].v, T->start[i].env->slots[T->start[i].slot])) return false;
    return true;
}

int trace_redo_replaying(Interp *I, Loc loc, int ntapes)
{
    I->tracer->eager_redo = (ntapes < 0 ? 0 : ntapes) + 1;
    return raise_at(I, loc, "(the call runs eagerly)");
}

int trace_redo_eagerly(Interp *I, Loc loc, int ntapes, const char *fmt, ...)
{
    Tracer *T = I->tracer;
    if (trace_nothing_done(T)) {
        T->eager_redo = (ntapes < 0 ? 0 : ntapes) + 1;
        return raise_at(I, loc, "(the call runs eagerly)");
    }
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    /* (--stage-all: 0, the function goes on eagerly from here) */
    return trace_fail(I, loc, "%s", buf);
}

/* Did an effect done so far give a result a tape outside tracks? Its
 * replay hands that result on with the entries its ops recorded, which
 * serves a run again for an if on a varying value (stage/trace_cf.c) but
 * gave a wrong second order before a @host call's gradient taken inside
 * (a staged function taking grad(fn (v) => f(u, v)) under grad over u,
 * where f calls h(u) then h(v * u)): such a call keeps the error. */
bool trace_done_tracked(const Tracer *T)
{
    for (int i = 0; T->done && i < T->done->n; i++)
        if (T->done->e[i].tracked) return true;
    return false;
}

int trace_host_call(Interp *I, Value f, int argc, const Value *argv, int nkw,
                    Str *const *kwnames, const Value *kwvals, Value *out)
{
    Tracer *T = I->tracer;
    /* v.assign(w) (or v -= w, ...) with a variable w reads w, which an eager
     * tape notes: the read is a node of its own (also in a branch traced
     * symbolically, where the call itself does not run), and the call gets
     * the tensor read */
    bool reads_var = false;
    for (int i = 0; i < argc + nkw && !reads_var && variable_assign_target(f, NULL); i++)
        reads_var = value_is_variable(i < argc ? argv[i] : kwvals[i - argc]);
    if (reads_var) {
        int n = argc + nkw, rc = 0;
        Value *rd = xcalloc((size_t)n, sizeof *rd);
        for (int i = 0; i < n && !rc; i++) {
            Value a = i < argc ? argv[i] : kwvals[i - argc];
            tfe_tensor *t = value_is_variable(a) ? value_to_tensor(a) : NULL;
            if (t) rd[i] = v_tensor_take(t);
            else if (value_is_variable(a)) rc = interp_raise_tensor_error(I);
            else rd[i] = (value_incref(a), a);
        }
        if (!rc) rc = trace_host_call(I, f, argc, rd, nkw, kwnames, rd + argc, out);
        for (int i = 0; i < n; i++) value_decref(rd[i]);
        free(rd);
        return rc;
    }
    const char *fname = f.kind == V_FN ? ((Closure *)f.u.o)->name : ((Builtin *)f.u.o)->name;
    if (T->symbolic && !known_nil(f))
        return trace_fail(I, I->cur_loc, "%s() is called back at run time, and its result cannot be "
                                         "traced inside a staged conditional or loop", fname);
    /* a @host function may read and change what the body sees (builtin
     * effects do not): the body's assignments go first */
    bool user = f.kind == V_FN && !T->symbolic;
    if (user && check_reachable(T, fname, I->cur_loc)) return -1;
    /* a method of a traced tensor (x.sum) holds the tensor of the call that
     * traced: the graph would hand the host node that one at every call */
    for (int i = 0; user && i < argc + nkw; i++) {
        Value a = i < argc ? argv[i] : kwvals[i - argc];
        if (a.kind != V_BUILTIN) continue;
        Value self = ((Builtin *)a.u.o)->self;
        if (self.kind == V_TENSOR && self.u.t->node)
            return trace_fail(I, I->cur_loc, "argument %d of %s() is the method %s of a tensor of the staged "
                              "function: the graph would hand it the tensor of the call that traced; pass the "
                              "tensor and call the method in %s()", i + 1, fname, ((Builtin *)a.u.o)->name, fname);
    }
    /* a tape made in this trace would take the call's gradient (a host
     * node: its backward runs the function again under a tape of its own),
     * while another tape records it too (a higher order: one outside the
     * trace, or a second one made in it): to that tape the function's values
     * would be those of the forward and of the run again, two sums where
     * eager code has one, so the last bit can differ. The call of the staged
     * function runs eagerly instead, where nothing has happened yet
     * (stage/staged.c); else a located error */
    if (user && tfe_tapes_active > T->tapes_at_begin && host_is_differentiable(f) && !I->check_replay &&
        !I->host_redo.armed) {
        SigBuf hs = {0};
        Leaves hl = {0};
        for (int i = 0; i < argc + nkw; i++) sig_flatten(i < argc ? argv[i] : kwvals[i - argc], &hs, &hl, SIG_OUTPUT);
        int nouter = tfe_tapes_tracking(0, T->tapes_at_begin, hl.n, hl.t);
        int ninner = tfe_tapes_tracking(T->tapes_at_begin, tfe_tapes_active, hl.n, hl.t);
        sig_free(&hs);
        leaves_free(&hl);
        bool higher = ninner >= 1 && nouter + ninner >= 2;
        /* (later calls run eagerly under as many tapes outside as made it so;
         * after effects the run again replays them where it can, as for an
         * if on a varying value, stage/trace_cf.c; --stage-all, after an
         * effect it cannot replay: the function goes on eagerly) */
        if (higher && !trace_nothing_done(T) && trace_effects_replayable(T) && !trace_done_tracked(T))
            return trace_redo_replaying(I, I->cur_loc, ninner >= 2 ? 0 : 1);
        if (higher && trace_redo_eagerly(I, I->cur_loc, ninner >= 2 ? 0 : 1,
                                      "the gradient of %s(), a @host call, is taken inside this staged function "
                                      "while another tape records the call (a higher order), after an effect of "
                                      "the call that a run again cannot replay (a write of an outside binding or a "
                                      "variable, a @host call given a list, reading an outside tensor or on a "
                                      "value a tape outside tracks): the "
                                      "staged gradient would not be eager's bit for bit; make "
                                      "the @host call before the call's other effects (the call then runs "
                                      "eagerly), or run it eagerly (run_eagerly(true))",
                                      fname))
            return -1;
        if (higher) return call_value(I, f, argc, argv, nkw, kwnames, kwvals, out);
    }
    if (user) flush_outsides(T);
    if (user && !T->nhost) remember_start(T);
    /* leaves of every argument become the node's inputs; each argument is
     * kept as it is now (a template: the call, or the body, may change a
     * list or record later) */
    int nargs = argc + nkw;
    HostArg *ha = xcalloc((size_t)(nargs ? nargs : 1), sizeof *ha);
    Leaves lv = {0};
    SigBuf *pre = xcalloc((size_t)(nargs ? nargs : 1), sizeof *pre);
    for (int i = 0; i < nargs; i++) {
        Value a = i < argc ? argv[i] : kwvals[i - argc];
        int before = lv.n;
        sig_flatten(a, &pre[i], &lv, SIG_OUTPUT);
        ha[i].nleaves = lv.n - before;
        if (has_mutable(a)) {
            int k = before;
            ha[i].v = sig_rebuild(a, lv.t, &k, false, 0);
        } else {
            value_incref(a);
            ha[i].v = a;
        }
    }
    int *src = user ? host_arg_sources(T, argc, nargs, argv, kwvals) : NULL;
    int nctx = 0;
    struct HostCtx *ctx = user ? host_context(T, &lv, &nctx) : NULL;
    Value result = v_nil();
    int rc = 0;
    Loc call_loc = I->cur_loc; /* the call site (the callee moves cur_loc) */
    /* a tape made inside this trace would record the function's ops with the
     * values of this call, into the graph: it gets one entry for the call
     * instead, whose backward is a host call too (stage/host_grad.c) */
    bool inner_tape = host_is_differentiable(f) && tfe_tapes_active > T->tapes_at_begin;
    int saved_tapes = tfe_tapes_active;
    if (user) {
        snapshot_envs(T);
        T->nhreads = 0;
        host_vars_clear(T);
    }
    /* a cached call that stopped at this call, its first effect, because the
     * function returned another kind than traced: its result, not a second
     * call (stage/staged.c, host_redo) */
    bool redone = user && I->host_redo.armed && ((Closure *)I->host_redo.f.u.o)->fn == ((Closure *)f.u.o)->fn;
    uint64_t rng[2] = {0, 0}; /* the random state the function began with (host_record_tape_entry) */
    bool rng_known = false;
    if (redone) {
        result = I->host_redo.result;
        I->host_redo.result = v_nil();
        value_decref(I->host_redo.f);
        I->host_redo.f = v_nil();
        I->host_redo.armed = false;
    } else if (!T->symbolic) {
        tfe_random_state(&rng[0], &rng[1]);
        rng_known = true;
        T->suspended++;
        if (inner_tape) tfe_tapes_active = 0;
        if (user) T->host_reading = T->suspended;
        if (user) T->host_born = env_next_born();
        if (user) {
            Env *ce = ((Closure *)f.u.o)->env;
            T->host_env = ce && ce->trace_id == T->id ? ce : NULL;
        }
        /* (under the check, tracing again a call whose eager run made them:
         * that run's calls, stage/check.c) */
        rc = I->check_replay ? check_host_replay(I, f, argc, argv, nkw, kwnames, kwvals, &result)
                             : call_value(I, f, argc, argv, nkw, kwnames, kwvals, &result);
        if (user) T->host_reading = 0;
        T->host_env = NULL;
        tfe_tapes_active = saved_tapes;
        T->suspended--;
    }
    /* (an effect made: noted for a run again, trace_effects_replayable) */
    if (!rc && !T->symbolic) {
        bool tracked = user && tfe_tapes_tracking(0, T->tapes_at_begin, lv.n, lv.t);
        bool replayable = !I->check_replay &&
                          (user ? !T->nhreads && !T->nhvars && !tfe_tapes_tracking(T->tapes_at_begin, tfe_tapes_active, lv.n, lv.t)
                                : f.kind == V_BUILTIN && ((Builtin *)f.u.o)->self.kind == V_NIL);
        /* (a list or record it got: what it did to it would not reach the
         * run again's own) */
        for (int i = 0; i < nargs && replayable; i++) replayable = !has_mutable(i < argc ? argv[i] : kwvals[i - argc]);
        note_effect_done(T, f, result, replayable, tracked);
    }
    if (!rc && user) host_read_context(T, &lv, &ctx, &nctx);
    HostSync *sync = NULL;
    Leaves after = {0};
    if (!rc && user) {
        T->nhost++;
        rc = host_after_args(T, fname, call_loc, argc, nargs, argv, kwvals, ha, pre, &lv, src, &sync, &after);
    }
    /* (whether the call is one entry to the tapes: see below) */
    bool entry = (result.kind != V_NIL || after.n) &&
                 (inner_tape || ((redone || I->check_replay) && tfe_tapes_active && host_is_differentiable(f)));
    if (!rc && user && host_is_differentiable(f)) host_read_vars(T, &lv, &ctx, &nctx, entry);
    else if (user) host_vars_clear(T);
    free(src);
    if (nctx) {
        if (!sync) sync = xcalloc(1, sizeof *sync), sync->tmpl = v_nil();
        sync->ctx = ctx;
        sync->nctx = nctx;
    }
    for (int i = 0; i < nargs; i++) sig_free(&pre[i]);
    free(pre);
    if (!rc && !(result.kind == V_NIL || result.kind == V_TENSOR || (result.kind == V_SCALAR))) {
        value_decref(result);
        result = v_nil();
        rc = raise_at(I, I->cur_loc, "%s(), called from staged code, must return a tensor, a number or nil", fname);
    }
    if (rc || T->failed) {
        for (int i = 0; i < nargs; i++) value_decref(ha[i].v);
        free(ha);
        leaves_free(&lv);
        leaves_free(&after);
        host_sync_free(sync);
        *out = result;
        return rc;
    }
    bool has_out = result.kind != V_NIL;
    GRef *rp = xmalloc(sizeof *rp * (size_t)(lv.n ? lv.n : 1));
    for (int i = 0; i < lv.n; i++) rp[i] = trace_ref(T, lv.t[i]); /* constants first */
    I->cur_loc = call_loc;
    int id = new_node(T, G_HOST, lv.n, (has_out ? 1 : 0) + after.n);
    GNode *n = gnode(T->g, id);
    mem_copy(n->in, rp, sizeof *rp * (size_t)lv.n);
    free(rp);
    value_incref(f);
    n->host->obj = f;
    n->host->hargs = ha;
    n->host->nhargs = nargs;
    n->host->nhkw = nkw;
    if (nkw) {
        n->host->hkwnames = xmalloc(sizeof *n->host->hkwnames * (size_t)nkw);
        for (int k = 0; k < nkw; k++) {
            kwnames[k]->h.refcount++;
            n->host->hkwnames[k] = kwnames[k];
        }
    }
    n->host_nil = !has_out;
    n->host->sync = sync;
    if (n->host->rng) { /* (the state its function began with) */
        n->host->rng->valid = rng_known;
        n->host->rng->key = rng[0], n->host->rng->counter = rng[1];
    }
    effect_chain(T, id);
    /* the node's outputs as traced tensors: the result, then the leaves of
     * the lists and records it got (outs); what the call made (actual) */
    int nouts = gnode(T->g, id)->nout;
    tfe_tensor **outs = xcalloc((size_t)nouts + 1, sizeof *outs), **actual = xcalloc((size_t)nouts + 1, sizeof *actual);
    if (has_out) {
        actual[0] = value_to_tensor(result);
        value_decref(result);
        outs[0] = tensor_alias(actual[0]);
        meta_of(&gnode(T->g, id)->meta[0], outs[0]);
        trace_note(T, outs[0], (GRef){id, 0});
        tensor_incref(outs[0]);
        result = v_tensor_take(outs[0]);
    }
    for (int k = 0; k < after.n; k++) {
        actual[(has_out ? 1 : 0) + k] = after.t[k];
        tensor_incref(after.t[k]);
    }
    if (sync) host_after_outputs(T, id, has_out ? 1 : 0, argc, argv, kwvals, &after, outs);
    /* under a tape: the outputs' gradients reach the inputs (a tape outside
     * the trace recorded the function's ops on what it made) */
    /* (a result made before this trace, or the check's eager run's: no tape
     * saw the function's ops, so its gradient is the function's own, as a
     * cached call's) */
    if (nouts && (inner_tape || ((redone || I->check_replay) && tfe_tapes_active && host_is_differentiable(f))))
        host_record_tape_entry(I, gnode(T->g, id), call_loc, lv.n, lv.t, nouts, outs, rng_known ? rng : NULL,
                               inner_tape ? T->id : 0);
    else if (nouts && tfe_tapes_active && host_is_differentiable(f))
        for (int k = 0; k < nouts; k++) host_record_identity(actual[k], outs[k]);
    for (int k = 0; k < nouts; k++) {
        if (outs[k]) tensor_decref(outs[k]);
        if (actual[k]) tensor_decref(actual[k]);
    }
    free(outs);
    free(actual);
    leaves_free(&lv);
    leaves_free(&after);
    *out = result;
    return 0;
}

/* --- recursion --------------------------------------------------------------------------------- */

int trace_enter_fn(Interp *I, Node *fn, const char *name, Loc loc)
{
    Tracer *T = I->tracer;
    if (T->symbolic && !T->failed)
        for (int i = 0; i < T->nsym_fns; i++)
            if (T->sym_fns[i] == fn) {
                const char *via = i < T->nsym_fns - 1 ? T->sym_names[T->nsym_fns - 1] : NULL; /* mutual */
                return trace_fail(I, loc, "'%s' calls itself%s%s%s inside a staged conditional or loop, so the "
                                          "depth of the recursion would depend on data", name,
                                  via ? " (through '" : "", via ? via : "", via ? "')" : "");
            }
    if (T->nsym_fns == T->capsym_fns) {
        T->capsym_fns = T->capsym_fns ? T->capsym_fns * 2 : 16;
        T->sym_fns = xrealloc(T->sym_fns, sizeof *T->sym_fns * (size_t)T->capsym_fns);
        T->sym_names = xrealloc(T->sym_names, sizeof *T->sym_names * (size_t)T->capsym_fns);
    }
    T->sym_names[T->nsym_fns] = name;
    T->sym_fns[T->nsym_fns++] = fn;
    return 0;
}

void trace_leave_fn(Interp *I, Node *fn)
{
    Tracer *T = I->tracer;
    if (T && T->nsym_fns && T->sym_fns[T->nsym_fns - 1] == fn) T->nsym_fns--;
}
