/* trace_cf.c — conditionals and loops on traced tensors: both branches (or
 * the loop's condition and body) are traced symbolically into regions of a
 * G_COND (G_WHILE) node; the bindings they change become its outputs. In a
 * trace that has values, the new node then runs at once on them, so the
 * tracing call still computes what an eager call would. */
#include <stdlib.h>
#include <string.h>
#include "graph/exec.h"
#include "stage/sig.h"
#include "stage/staged.h"
#include "stage/trace.h"
#include "tensor/grad.h"
#include "util/xalloc.h"

/* --- what a block binds and assigns (from the AST) ------------------------------------- */

static void pattern_slots(Node *p, bool *mask, int ns)
{
    if (p->kind == N_PNAME) {
        if (p->depth == 0 && p->slot < ns) mask[p->slot] = true;
        return;
    }
    for (int i = 0; i < p->list.n; i++) pattern_slots(p->list.items[i], mask, ns);
}

/* The names of an assignment target (a name, x[i] rebinding x, or a tuple
 * of targets) into mask. */
static void target_slots(Node *t, bool *mask, int ns)
{
    if (t->kind == N_TUPLE) {
        for (int i = 0; i < t->list.n; i++) target_slots(t->list.items[i], mask, ns);
        return;
    }
    while (t->kind == N_INDEX) t = t->a; /* x[i] = v rebinds x */
    if (t->kind == N_NAME && t->depth == 0 && t->op != 2 && t->slot < ns) mask[t->slot] = true;
}

/* Slots expressions bind for themselves (a comprehension's loop variables,
 * a conditional expression's hidden slot) are local wherever they sit.
 * Functions made inside are not entered: their slots are their own. */
static void scan_hidden(Node *n, bool *local, int ns)
{
    if (!n || n->kind == N_FN) return;
    if (n->kind == N_COMP)
        for (int i = 0; i < n->list.n; i++)
            if (n->list.items[i]->kind == N_FOR) pattern_slots(n->list.items[i]->a, local, ns);
    if (n->kind == N_IFEXPR && n->slot < ns) local[n->slot] = true;
    scan_hidden(n->a, local, ns);
    scan_hidden(n->b, local, ns);
    scan_hidden(n->c, local, ns);
    for (int i = 0; i < n->list.n; i++) scan_hidden(n->list.items[i], local, ns);
    for (int i = 0; i < n->list2.n; i++) scan_hidden(n->list2.items[i], local, ns);
}

/* local: names a block declares (let, for, fn, with-as, import): they die
 * with it. assigned: names of the enclosing function it assigns. */
static void scan_block_stmts(Node *n, bool *local, bool *assigned, int ns);
static void scan_block(Node *n, bool *local, bool *assigned, int ns)
{
    scan_block_stmts(n, local, assigned, ns);
    scan_hidden(n, local, ns);
}

static void scan_block_stmts(Node *n, bool *local, bool *assigned, int ns)
{
    if (!n) return;
    switch (n->kind) {
    case N_BLOCK:
        for (int i = 0; i < n->list.n; i++) scan_block_stmts(n->list.items[i], local, assigned, ns);
        break;
    case N_LET: pattern_slots(n->a, local, ns); break;
    case N_FOR: pattern_slots(n->a, local, ns); scan_block_stmts(n->c, local, assigned, ns); break;
    case N_FNDECL: if (n->slot < ns) local[n->slot] = true; break;
    case N_WITH: if (n->str && n->slot < ns) local[n->slot] = true; scan_block_stmts(n->b, local, assigned, ns); break;
    case N_IMPORT: if (n->slot < ns) local[n->slot] = true; break;
    case N_IF: scan_block_stmts(n->b, local, assigned, ns); scan_block_stmts(n->c, local, assigned, ns); break;
    case N_WHILE: scan_block_stmts(n->b, local, assigned, ns); break;
    case N_ASSIGN: target_slots(n->a, assigned, ns); break;
    default: break;
    }
}

/* The first assignment to slot in n (for names and lines in messages). */
static Node *find_assign(Node *n, int slot)
{
    if (!n) return NULL;
    switch (n->kind) {
    case N_BLOCK:
        for (int i = 0; i < n->list.n; i++) {
            Node *r = find_assign(n->list.items[i], slot);
            if (r) return r;
        }
        return NULL;
    case N_ASSIGN: {
        Node *t = n->a;
        if (t->kind == N_TUPLE) { /* a, b = ...: the target that is slot */
            for (int i = 0; i < t->list.n; i++) {
                Node fake = *n;
                fake.a = t->list.items[i];
                Node *r = find_assign(&fake, slot);
                if (r) return r;
            }
            return NULL;
        }
        while (t->kind == N_INDEX) t = t->a;
        return t->kind == N_NAME && t->depth == 0 && t->slot == slot ? t : NULL;
    }
    case N_IF: {
        Node *r = find_assign(n->b, slot);
        return r ? r : find_assign(n->c, slot);
    }
    case N_WHILE: return find_assign(n->b, slot);
    case N_FOR: return find_assign(n->c, slot);
    case N_WITH: return find_assign(n->b, slot);
    default: return NULL;
    }
}

/* --- env snapshots --------------------------------------------------------------------- */

static Value *snapshot(Env *e)
{
    Value *s = xmalloc(sizeof *s * (size_t)(e->nslots ? e->nslots : 1));
    for (int i = 0; i < e->nslots; i++) {
        s[i] = e->slots[i];
        value_incref(s[i]);
    }
    return s;
}

static void restore(Env *e, const Value *s)
{
    for (int i = 0; i < e->nslots; i++) {
        Value old = e->slots[i];
        value_incref(s[i]);
        e->slots[i] = s[i];
        value_decref(old);
    }
}

static void drop(Value *s, int n)
{
    if (!s) return;
    for (int i = 0; i < n; i++) value_decref(s[i]);
    free(s);
}

static bool same_value(Value a, Value b)
{
    if (a.kind != b.kind) return false;
    if (a.kind == V_SCALAR) return a.dtype == b.dtype && a.weak == b.weak && a.u.i == b.u.i;
    if (a.kind == V_NIL) return a.dtype == b.dtype;
    return a.u.o == b.u.o;
}

static bool is_leafy(Value v) { return v.kind == V_TENSOR || v.kind == V_SCALAR; }
/* A float literal not exact in float32 (Value.lit): as a region's output or
 * loop value it would be rounded, so such a conditional runs at trace time. */
static bool is_lit(Value v) { return v.kind == V_SCALAR && v.lit; }

/* Two buffers in turn: one message names two kinds. */
static const char *kind_with_article(Value v)
{
    static char buf[2][64];
    static int turn;
    char *b = buf[turn ^= 1];
    const char *k = value_kind_name(v);
    snprintf(b, sizeof buf[0], "%s %s", strchr("aeiou", k[0]) ? "an" : "a", k);
    return b;
}

/* A binding's name in quotes; the hidden binding of a conditional
 * expression (parser/grammar.y names it in words) without. */
static const char *quoted(const char *name, char *buf, size_t n)
{
    snprintf(buf, n, strchr(name, ' ') ? "%s" : "'%s'", name);
    return buf;
}

/* Run node id (a cond or while just traced) on the trace's values. */
/* TNote.ran_rec: a record of the ways run g's ifs and loops went (takes
 * ran; g gets a reference), or -1 where none ran */
static int add_ran(Tracer *T, Graph *own, const Graph *rg, signed char *ran)
{
    if (!ran) return -1;
    T->rans = xrealloc(T->rans, sizeof *T->rans * (size_t)(T->nrans + 1));
    own->refcount++;
    T->rans[T->nrans] = (struct RanRec){own, rg, ran};
    return T->nrans++;
}

static int run_now(Tracer *T, int id, tfe_tensor **outs, int *rec)
{
    Graph *g = T->g;
    GRun x;
    grun_init(&x, T->I, g, NULL);
    for (int i = 0; i < T->capconcrete && i < g->nvals; i++)
        if (T->concrete[i] && !x.v[i]) {
            tensor_incref(T->concrete[i]);
            x.v[i] = T->concrete[i];
        }
    x.frame_base = T->frame_base;
    T->suspended++;
    int rc = grun_node(&x, id);
    T->suspended--;
    *rec = rc ? -1 : add_ran(T, g, g, x.ran); /* (the ways its ifs and loops went: TNote.ran_rec) */
    if (*rec >= 0) x.ran = NULL;
    GNode *n = gnode(g, id);
    for (int k = 0; k < n->nout; k++) {
        outs[k] = rc ? NULL : x.v[n->vbase + k];
        if (outs[k]) tensor_incref(outs[k]);
    }
    grun_release(&x);
    return rc;
}

/* Is x a host call of a method bound to var (assign, assign_add,
 * assign_sub: host-call effects)? */
static bool calls_method_of(const GNode *x, const Obj *var)
{
    if (x->kind != G_HOST || x->host->obj.kind != V_BUILTIN) return false;
    const Value self = ((const Builtin *)x->host->obj.u.o)->self;
    return self.kind == V_OBJECT && self.u.o == var;
}

/* Does a region of m (or one inside it) call a method bound to var? */
static bool assigns_var(const Graph *m, const Obj *var)
{
    for (int i = 0; i < m->n; i++)
        if (calls_method_of(&m->nodes[i], var)) return true;
    return false;
}

static int top_pos(const Graph *g, int id);
static int region_owner(const Graph *g, int r);
static int region_assign_kind(const Graph *g, int r, const Obj *var);

/* May the variable var hold another tensor at top position hi than it
 * held at lo on some call? Going back from hi: an assign of it at the top
 * (not in an if or loop) stored what it holds at hi on every call (it ran
 * after lo: the tensor it holds came from it); before that, an if or loop
 * that may assign it, or a host call that may, could. */
static bool may_assign_between(const Graph *g, const Obj *var, int lo, int hi)
{
    const GRegion *reg = &g->regions[0];
    for (int i = (hi < reg->n ? hi : reg->n) - 1; i >= lo; i--) {
        const GNode *x = &g->nodes[reg->nodes[i]];
        if (x->kind == G_HOST) {
            const Value self = x->host->obj.kind == V_BUILTIN ? ((const Builtin *)x->host->obj.u.o)->self : v_nil();
            if (self.kind == V_OBJECT && self.u.o == var && value_is_variable(self)) return false;
            if (!trace_host_harmless(x, var)) return true;
        } else if ((x->kind == G_COND || x->kind == G_WHILE) &&
                   (region_assign_kind(g, x->regions[0], var) || region_assign_kind(g, x->regions[1], var))) {
            return true;
        }
    }
    return false;
}

/* Does region r of g (or one inside it) read var? */
static bool region_reads_var(const Graph *g, int r, const Obj *var)
{
    const GRegion *reg = &g->regions[r];
    for (int i = 0; i < reg->n; i++) {
        const GNode *x = &g->nodes[reg->nodes[i]];
        if (x->kind == G_VAR_READ && x->host->obj.u.o == var) return true;
        if ((x->kind == G_COND || x->kind == G_WHILE) &&
            (region_reads_var(g, x->regions[0], var) || region_reads_var(g, x->regions[1], var)))
            return true;
    }
    return false;
}

/* The header of its own a tape made in this trace has for tensor a, a read
 * of var by cond or while id: a read where the branches that read it run
 * (a loop's body: where it runs at least once; its condition: always), as
 * eager code reads nothing on the calls that skip them. */
static void note_reread(Tracer *T, int id, Value var, tfe_tensor *a)
{
    const GNode *n = gnode(T->g, id);
    const Obj *o = var.u.o;
    if (n->kind == G_WHILE && region_reads_var(T->g, n->regions[0], o) &&
        !region_reads_var(T->g, n->regions[1], o)) {
        tapes_read_fresh(T->id, var, a, 0, false, false);
        return;
    }
    bool any = false;
    for (int k = n->kind == G_WHILE ? 1 : 0; k < 2; k++)
        if (region_reads_var(T->g, n->regions[k], o)) {
            tapes_read_fresh(T->id, var, a, n->regions[k], false, false);
            any = true;
        }
    if (!any) tapes_read_fresh(T->id, var, a, 0, false, false);
}

/* Loop id reads var and assigns it. Its first reads of var (its
 * condition's first, its body's before the body assigns var) are of t0, the
 * tensor var held when it started, where they run; nothing reaches them (the
 * loop's backward is refused where something would: stage/grad.c). A tape
 * made in this trace noted them as reads of t0: one read with an earlier
 * read of t0 (or that read's regions with the loop's added), or one of their
 * own. Unless the earlier read is t0 on every call (nothing between can
 * assign var), they are taken off the tape's reads, and the loop's note says
 * so (TL_APART): its gradient adds zeros for them where they run and no read
 * the graph can place is of t0 on that call (builtins_autodiff.c,
 * loop_zeros), which needs no if or loop to pick among. Returns TL_APART or
 * 0. */
static int reread_loop_start(Tracer *T, int id, Value var, tfe_tensor *t0, int kinds)
{
    if (!(kinds & (TL_FIRST | TL_COND))) return 0;
    const TNote *nt = t0->node;
    if (nt && nt->ref.node < id) {
        int top = nt->ref.node;
        while (top >= 0 && gnode(T->g, top)->region != 0) top = region_owner(T->g, gnode(T->g, top)->region);
        int lo = top >= 0 && top != id ? top_pos(T->g, top) : -1;
        if (lo >= 0 && !may_assign_between(T->g, var.u.o, top == nt->ref.node ? lo + 1 : lo, top_pos(T->g, id)))
            return 0; /* one tensor with that read on every call */
    }
    const GNode *wn = gnode(T->g, id);
    tapes_read_unnote(T->id, var, t0, wn->regions[0], wn->regions[1]);
    return TL_APART;
}

/* After m (a cond or while) ran as one tape entry: the entry's sources are
 * the variables' tensors it read, and a tape made inside this trace records
 * its backward here, reading them. Each is the variable's tensor now (when m
 * does not assign it; else stage/grad.c, check_read_assign), and it must
 * stand for a read of the variable at this point of every call: not a
 * constant (the value at trace time), nor an earlier read (node id, or a
 * traced cond or loop before it, may assign the variable). When nothing
 * between the tensor's node and id may assign it, the tensor is noted as the
 * new read (its earlier uses have that value on every call too). Else the
 * earlier uses keep their node: the entries these tapes recorded for m
 * (at n0[k] on the k-th of them; m's inputs come before its reads) get
 * a header of their own for the tensor, noted as the new read and as a read
 * of the variable on those tapes (builtins_autodiff.c merges it with the
 * reads that are one tensor with it on a call). */
static void reread_vars(Tracer *T, const Graph *m, int id, const int *n0)
{
    if (tfe_tapes_active <= T->tapes_at_begin) return; /* no tape of this trace */
    const tfe_tape_stack *st = &T->I->tapes;
    if (gnode(T->g, id)->kind == G_WHILE) /* (loop_core: the variables it reads and assigns) */
        for (int k = 0; k < T->nloop_fresh; k++)
            T->loop_fresh[k].kinds |= reread_loop_start(T, id, v_obj(V_OBJECT, (Obj *)T->loop_fresh[k].var),
                                                        T->loop_fresh[k].start, T->loop_fresh[k].kinds);
    for (int i = 0; i < m->n; i++) {
        const GNode *x = &m->nodes[i];
        if (x->kind != G_VAR_READ || assigns_var(m, x->host->obj.u.o)) continue;
        /* (no node for this read: a new one is made below; nor a read a
         * tape notes: the run noted m's) */
        tfe_tensor *t = variable_peek(x->host->obj);
        if (!t) continue;
        tensor_incref(t);
        TNote *nt = t->node;
        if (!nt) {
            trace_var_reread(T, x->host->obj, t);
        } else if (nt->ref.node < id) {
            /* (a note inside a branch or body: the if or loop at the top
             * that holds it, which may assign the variable too; id itself
             * when the trace of its branch first read the tensor, which
             * nothing before id used) */
            int top = nt->ref.node;
            while (top >= 0 && gnode(T->g, top)->region != 0) top = region_owner(T->g, gnode(T->g, top)->region);
            int lo = top >= 0 ? top_pos(T->g, top) : -1;
            if (top == id || (lo >= 0 && !may_assign_between(T->g, x->host->obj.u.o, top == nt->ref.node ? lo + 1 : lo,
                                                              top_pos(T->g, id)))) {
                trace_var_reread(T, x->host->obj, t);
            } else {
                tfe_tensor *a = tensor_alias(t);
                int swapped = 0;
                for (int k = T->tapes_at_begin; a && k < st->n; k++) {
                    tfe_tape *tp = st->active[k];
                    int e0 = n0[k - T->tapes_at_begin];
                    if (tfe_tape_nentries(tp) > e0) swapped += tfe_tape_entry_swap_in(tp, e0, m->ninputs, t, a);
                }
                if (swapped) {
                    /* to a tape outside the call (later reads of the
                     * variable take a here) a copy of the tensor, which
                     * eager code reads: one sum (as trace_var_read) */
                    if (T->tapes_at_begin) {
                        static const tfe_attrs none = {.naxes = -1};
                        const tfe_opcall c = {.op = OP_COPY, .nin = 1, .nout = 1, .in = &t, .at = &none, .out = &a};
                        tfe_tape_record_outer(&c, T->tapes_at_begin);
                    }
                    trace_var_reread(T, x->host->obj, a);
                    /* the reads the trace of id's branches or body noted
                     * of t (a variable's value then) are a's now */
                    const GNode *cn = gnode(T->g, id);
                    tapes_read_unnote(T->id, x->host->obj, t, cn->regions[0], cn->regions[1]);
                    note_reread(T, id, x->host->obj, a);
                }
                if (a) tensor_decref(a); /* the note and the entries keep it */
            }
        }
        tensor_decref(t);
    }
}

/* The last effect node of region r (for a node appended to it), or -1. */
static int last_effect_in(Graph *g, int r)
{
    const GRegion *reg = &g->regions[r];
    for (int i = reg->n - 1; i >= 0; i--) {
        const GNode *x = &g->nodes[reg->nodes[i]];
        if (x->kind == G_VAR_READ || x->kind == G_HOST || x->kind == G_COND || x->kind == G_WHILE ||
            (x->kind == G_OP && (tfe_ops[x->op].flags & (F_RANDOM | F_COLLECTIVE))))
            return reg->nodes[i];
    }
    return -1;
}

static bool region_assigns_var(const Graph *g, int r, const Obj *var);

/* Does node x of g assign var: a method call bound to it, or a cond or
 * while whose regions do? */
static bool node_assigns_var(const Graph *g, const GNode *x, const Obj *var)
{
    if (calls_method_of(x, var)) return true;
    return (x->kind == G_COND || x->kind == G_WHILE) &&
           (region_assigns_var(g, x->regions[0], var) || region_assigns_var(g, x->regions[1], var));
}

/* Does region r of g (or one inside it) assign var? */
static bool region_assigns_var(const Graph *g, int r, const Obj *var)
{
    const GRegion *reg = &g->regions[r];
    for (int i = 0; i < reg->n; i++) {
        if (node_assigns_var(g, &g->nodes[reg->nodes[i]], var)) return true;
    }
    return false;
}

/* A cond under a tape made inside this trace, which reads a variable it
 * also assigns: that read's value is neither the variable's before the cond
 * nor after it, yet a backward recorded here replays the branch with it.
 * So the cond hands it on as one more output (the other branch hands on a
 * read of the variable at its end, a value no backward uses), and the read
 * notes which (outer_out). Only reads at the top of a branch; one inside a
 * nested cond or loop is refused (stage/grad.c, check_read_assign).
 * Returns how many outputs were added. */
static int export_reads(Tracer *T, int id, int **real)
{
    Graph *g = T->g;
    if (g->nodes[id].kind != G_COND || tfe_tapes_active <= T->tapes_at_begin) return 0;
    int added = 0;
    int n0[2] = {g->regions[g->nodes[id].regions[0]].n, g->regions[g->nodes[id].regions[1]].n};
    for (int br = 0; br < 2; br++) {
        int r = g->nodes[id].regions[br], other = g->nodes[id].regions[1 - br];
        for (int i = 0; i < n0[br]; i++) { /* not the stand-ins added here */
            int rid = g->regions[r].nodes[i];
            if (g->nodes[rid].kind != G_VAR_READ) continue;
            const Obj *var = g->nodes[rid].host->obj.u.o;
            if (!region_assigns_var(g, g->nodes[id].regions[0], var) &&
                !region_assigns_var(g, g->nodes[id].regions[1], var))
                continue;
            /* the other branch's stand-in: a read at its end */
            int dep = last_effect_in(g, other);
            int sid = graph_add(g, other, G_VAR_READ, 0, 1);
            GNode *sn = &g->nodes[sid];
            sn->host->obj = g->nodes[rid].host->obj;
            value_incref(sn->host->obj);
            sn->meta[0] = g->nodes[rid].meta[0];
            sn->loc = g->nodes[rid].loc;
            sn->frames = g->nodes[rid].frames;
            sn->effect_dep = dep;
            /* one more output of the cond, with new value slots */
            GNode *c = &g->nodes[id];
            int k = c->nout++;
            c->meta = xrealloc(c->meta, sizeof *c->meta * (size_t)c->nout);
            c->meta[k] = g->nodes[rid].meta[0];
            c->vbase = g->nvals;
            g->nvals += c->nout;
            for (int b = 0; b < 2; b++) {
                GRegion *reg = &g->regions[c->regions[b]];
                reg->outs = xrealloc(reg->outs, sizeof *reg->outs * (size_t)(reg->nouts + 1));
                reg->outs[reg->nouts++] = (GRef){b == br ? rid : sid, 0};
            }
            g->nodes[rid].outer_out = g->nodes[sid].outer_out = 1 + k;
            g->nodes[rid].outer_node = g->nodes[sid].outer_node = id;
            *real = xrealloc(*real, sizeof **real * (size_t)(added + 1));
            (*real)[added] = rid; /* the read (the other branch has the stand-in) */
            added++;
        }
    }
    return added;
}

/* A node of the op given with the attributes' dtype, appended to region
 * r, at node at's location. */
static int add_op(Graph *g, int r, tfe_op op, int nin, tfe_dtype dtype, int at)
{
    int id = graph_add(g, r, G_OP, nin, 1);
    GNode *x = &g->nodes[id];
    x->op = op;
    x->at = xmalloc(sizeof *x->at);
    tfe_attrs_init(x->at);
    x->at->dtype = dtype;
    x->loc = g->nodes[at].loc;
    x->frames = g->nodes[at].frames;
    return id;
}

/* A scalar zero of dtype in branch r of cond c (for kept value xid): made
 * from the predicate, false where r runs, so that no constant folding turns
 * its broadcast into a constant of the full size (graph/opt_fold.c folds up
 * to a million elements, which a run then copies). A predicate that is no
 * scalar bool: a zero constant. */
static int zero_scalar(Graph *g, int c, int r, tfe_dtype dtype, int xid)
{
    GRef p = g->nodes[c].in[0];
    tfe_meta pm = g->nodes[p.node].meta[p.out];
    if (pm.dtype != TFE_BOOL || pm.rank != 0) {
        int sid = add_op(g, r, OP_FULL, 0, dtype, xid);
        g->nodes[sid].at->f[0] = 0.0;
        g->nodes[sid].meta[0] = (tfe_meta){.dtype = dtype};
        return sid;
    }
    /* not p in the then branch, not not p in the else branch: false */
    GRef f = p;
    for (int i = 0; i < (r == g->nodes[c].regions[0] ? 1 : 2); i++) {
        int nid = add_op(g, r, OP_LOGICAL_NOT, 1, TFE_BOOL, xid);
        g->nodes[nid].in[0] = f;
        g->nodes[nid].meta[0] = (tfe_meta){.dtype = TFE_BOOL};
        f = (GRef){nid, 0};
    }
    int sid = add_op(g, r, OP_CAST, 1, dtype, xid);
    g->nodes[sid].in[0] = f;
    g->nodes[sid].meta[0] = (tfe_meta){.dtype = dtype};
    return sid;
}

/* A cond under a tape made inside this trace: the values of its branches'
 * ops that a backward recorded here reads (gradient rules read an op's
 * inputs and outputs: sigmoid's its output, batch_norm_train's its mean
 * and variance) are outputs of the cond too, kept values (the other branch
 * hands out zeros in their places). A backward reads the very tensor the
 * forward made, as in eager code, not a replay of it (stage/grad.c,
 * replay_cond): a tape recording that backward (a higher order) adds what
 * reaches such a value through the backward and through the forward to one
 * sum. The ops of each branch's own region, not random, not collective, of
 * known shape, whose values are not the branch's results already; which
 * of them a backward reads is known only when the trace ends, and
 * trace_prune_kept then drops the others. Returns how many outputs were
 * added. */
static int keep_branch_values(Tracer *T, int id)
{
    Graph *g = T->g;
    if (g->nodes[id].kind != G_COND || tfe_tapes_active <= T->tapes_at_begin) return 0;
    int added = 0;
    int n0[2] = {g->regions[g->nodes[id].regions[0]].n, g->regions[g->nodes[id].regions[1]].n};
    for (int br = 0; br < 2; br++) {
        int r = g->nodes[id].regions[br], other = g->nodes[id].regions[1 - br];
        for (int i = 0; i < n0[br]; i++) { /* (not the zeros added here) */
            int xid = g->regions[r].nodes[i];
            if (g->nodes[xid].kind != G_OP || (tfe_ops[g->nodes[xid].op].flags & (F_RANDOM | F_COLLECTIVE)))
                continue;
            for (int k = 0; k < g->nodes[xid].nout; k++) {
                const GRegion *reg = &g->regions[r];
                bool out = false, known = true;
                for (int j = 0; j < reg->nouts && !out; j++) out = reg->outs[j].node == xid && reg->outs[j].out == k;
                tfe_meta m = g->nodes[xid].meta[k];
                for (int d = 0; d < m.rank; d++) known &= m.shape[d] >= 0;
                if (out || !known) continue;
                /* the other branch's zeros: one scalar zero broadcast to
                 * the shape (a view, no storage of that size), as no
                 * backward reads them (the backward's cond takes the
                 * branch the forward took) */
                int sid = zero_scalar(g, id, other, m.dtype, xid);
                int zid = sid;
                if (m.rank > 0) {
                    zid = graph_add(g, other, G_OP, 1, 1);
                    GNode *z = &g->nodes[zid];
                    z->op = OP_BROADCAST_TO;
                    z->in[0] = (GRef){sid, 0};
                    z->at = xmalloc(sizeof *z->at);
                    tfe_attrs_init(z->at);
                    z->at->nints = m.rank;
                    for (int d = 0; d < m.rank; d++) z->at->ints[d] = m.shape[d];
                    z->meta[0] = m;
                    z->loc = g->nodes[xid].loc;
                    z->frames = g->nodes[xid].frames;
                }
                /* one more output of the cond, with new value slots */
                GNode *c = &g->nodes[id];
                int o = c->nout++;
                c->meta = xrealloc(c->meta, sizeof *c->meta * (size_t)c->nout);
                c->meta[o] = m;
                c->vbase = g->nvals;
                g->nvals += c->nout;
                for (int b = 0; b < 2; b++) {
                    GRegion *rb = &g->regions[c->regions[b]];
                    rb->outs = xrealloc(rb->outs, sizeof *rb->outs * (size_t)(rb->nouts + 1));
                    rb->outs[rb->nouts++] = b == br ? (GRef){xid, k} : (GRef){zid, 0};
                }
                added++;
            }
        }
    }
    return added;
}

/* Does a node of g (in any region, or a region's results) read output k
 * of node c? */
static bool output_read(const Graph *g, int c, int k)
{
    for (int i = 0; i < g->n; i++)
        for (int j = 0; j < g->nodes[i].nin; j++)
            if (g->nodes[i].in[j].node == c && g->nodes[i].in[j].out == k) return true;
    for (int r = 0; r < g->nregions; r++)
        for (int j = 0; j < g->regions[r].nouts; j++)
            if (g->regions[r].outs[j].node == c && g->regions[r].outs[j].out == k) return true;
    return false;
}

/* Cond c no longer has output k: the later ones move down one (their value
 * slots too: c's slots stay reserved), and each branch's result k goes (its
 * node, unread now, is dead code). */
static void drop_output(Graph *g, int c, int k)
{
    for (int i = 0; i < g->n; i++)
        for (int j = 0; j < g->nodes[i].nin; j++)
            if (g->nodes[i].in[j].node == c && g->nodes[i].in[j].out > k) g->nodes[i].in[j].out--;
    for (int r = 0; r < g->nregions; r++)
        for (int j = 0; j < g->regions[r].nouts; j++)
            if (g->regions[r].outs[j].node == c && g->regions[r].outs[j].out > k) g->regions[r].outs[j].out--;
    GNode *n = &g->nodes[c];
    mem_move(&n->meta[k], &n->meta[k + 1], sizeof *n->meta * (size_t)(n->nout - k - 1));
    n->nout--;
    for (int b = 0; b < 2; b++) {
        GRegion *rb = &g->regions[n->regions[b]];
        mem_move(&rb->outs[k], &rb->outs[k + 1], sizeof *rb->outs * (size_t)(rb->nouts - k - 1));
        rb->nouts--;
    }
}

/* The trace is finished: a kept branch value that no backward recorded in
 * it read (a gradient rule reads only some of an op's inputs and outputs,
 * and only the ops the gradients asked for run backward) is no output of
 * its cond, so the branch that made it frees it as eager code does, and
 * the other branch makes no stand-in for it. */
void trace_prune_kept(Tracer *T)
{
    Graph *g = T->g;
    for (int e = T->nkept - 1; e >= 0; e--) {
        const struct Kept *kp = &T->kept[e];
        for (int k = kp->first + kp->n - 1; k >= kp->first; k--)
            if (!output_read(g, kp->id, k)) drop_output(g, kp->id, k);
    }
    free(T->kept);
    T->kept = NULL;
    T->nkept = 0;
}

/* Does read rid of var follow an assign of var in its region (before:
 * true), or precede one (before: false)? */
static bool read_near_assign(const Graph *g, int rid, bool before)
{
    const GRegion *reg = &g->regions[g->nodes[rid].region];
    const Obj *var = g->nodes[rid].host->obj.u.o;
    int at = 0;
    while (at < reg->n && reg->nodes[at] != rid) at++;
    for (int i = before ? 0 : at + 1; i < (before ? at : reg->n); i++) {
        if (node_assigns_var(g, &g->nodes[reg->nodes[i]], var)) return true;
    }
    return false;
}

/* m (extracted from the trace's cond id) notes, for each read export_reads
 * handed on, the output of id that has its value; for the reads themselves
 * (real, not their stand-ins) their branch's region, and whether an assign
 * precedes them there. Where the run now does not go through it, a read's
 * source in the backward is what eager code reads on the calls that take
 * that branch (stage/grad.c, source_value): after an assign a tensor of its
 * own, else the variable's value when the if started; the stand-in the
 * other branch runs is no read (stage/graph_host.c). */
static void mark_exported(const Graph *g, int id, Graph *m, const int *real, int nreal)
{
    const GNode *c = &g->nodes[id];
    int mc = -1;
    for (int i = 0; i < m->regions[0].n && mc < 0; i++)
        if (m->nodes[m->regions[0].nodes[i]].kind == G_COND) mc = m->regions[0].nodes[i];
    if (mc < 0) return;
    for (int b = 0; b < 2; b++) {
        const GRegion *reg = &g->regions[c->regions[b]], *mreg = &m->regions[m->nodes[mc].regions[b]];
        for (int k = 0; k < reg->nouts && k < mreg->nouts; k++) {
            const GNode *x = &g->nodes[reg->outs[k].node];
            if (x->kind == G_VAR_READ && x->outer_out == 1 + k && x->outer_node == id) {
                m->nodes[mreg->outs[k].node].outer_out = 1 + k;
                m->nodes[mreg->outs[k].node].outer_node = id;
                bool is_real = false;
                for (int r = 0; r < nreal && !is_real; r++) is_real = real[r] == reg->outs[k].node;
                GNode *mx = &m->nodes[mreg->outs[k].node];
                if (is_real) {
                    mx->fresh_region = c->regions[b];
                    mx->after_assign = read_near_assign(g, reg->outs[k].node, true);
                    mx->at_end = !read_near_assign(g, reg->outs[k].node, false);
                } else {
                    mx->stand_in = true;
                }
            }
        }
    }
}

/* The region of cond or while id (at the top, with values) that a run of
 * it now goes through: the branch its predicate takes, or the loop's body. */
static int cf_run_region(Tracer *T, int id)
{
    const GNode *n = gnode(T->g, id);
    if (n->kind == G_WHILE) return n->regions[1];
    int ps = gnode(T->g, n->in[0].node)->vbase + n->in[0].out;
    tfe_tensor *p = ps < T->capconcrete ? T->concrete[ps] : NULL;
    if (!p || !p->storage) return 0;
    return n->regions[tensor_load_f64(p, 0) != 0.0 ? 0 : 1];
}

/* The outputs of node id as traced tensors: run now when the trace has
 * values, symbolic otherwise. */
/* For the tapes made in trace T: the entry of cond graph m (graph_extract's,
 * its inputs in[], its outputs all[]) has output k, where the branch that
 * ran ends it on a value from outside the cond (one of m's inputs), that
 * value (tfe_tape_cond_alias, under the predicate or its negation). */
static void cond_pass_aliases(Tracer *T, const Graph *m, tfe_tensor *const *in, int nout, tfe_tensor *const *all)
{
    const GRegion *top = &m->regions[0];
    int c = -1;
    for (int i = 0; i < top->n; i++)
        if (m->nodes[top->nodes[i]].kind == G_COND) c = top->nodes[i];
    if (c < 0) return;
    const GNode *cn = &m->nodes[c];
    int pi = -1;
    for (int i = 0; i < m->ninputs; i++)
        if (m->inputs[i] == cn->in[0].node && cn->in[0].out == 0) pi = i;
    if (pi < 0 || !in[pi] || in[pi]->dtype != TFE_BOOL) return;
    tfe_tensor *pc[2] = {in[pi], tfe_call1(OP_LOGICAL_NOT, 1, (tfe_tensor **)&in[pi], NULL)};
    if (!pc[1]) {
        tfe_error_clear();
        return;
    }
    int *outk = xmalloc(sizeof *outk * (size_t)(2 * nout + 1)), *to = xmalloc(sizeof *to * (size_t)(2 * nout + 1)), na = 0;
    tfe_tensor **cc = xmalloc(sizeof *cc * (size_t)(2 * nout + 1));
    for (int k = 0; k < nout && k < top->nouts; k++) {
        GRef o = top->outs[k];
        if (o.node != c || !all[k] || !dtype_is_float(all[k]->dtype)) continue;
        for (int w = 0; w < 2; w++) {
            const GRegion *rb = &m->regions[cn->regions[w]];
            if (o.out >= rb->nouts) continue;
            GRef r = rb->outs[o.out];
            for (int i = 0; i < m->ninputs; i++)
                if (m->inputs[i] == r.node && r.out == 0 && in[i] && dtype_is_float(in[i]->dtype)) {
                    outk[na] = k;
                    to[na] = i;
                    cc[na++] = pc[w];
                }
            /* (or on the value of the branch it ends an earlier output on:
             * a0 = tanh(v); a1 = a0 in the branch, that output's tensor,
             * -2 - q, as a loop's b = acc) */
            for (int q = 0; q < k && m->nodes[r.node].region != 0; q++) {
                GRef oq = top->outs[q];
                if (oq.node != c || oq.out >= rb->nouts || oq.out == o.out || !all[q] ||
                    !dtype_is_float(all[q]->dtype))
                    continue;
                GRef rq = rb->outs[oq.out];
                if (rq.node != r.node || rq.out != r.out) continue;
                outk[na] = k;
                to[na] = -2 - q;
                cc[na++] = pc[w];
                break;
            }
        }
    }
    if (na) tfe_tape_cond_alias(T->tapes_at_begin, nout, all, na, outk, to, cc);
    tensor_decref(pc[1]);
    free(outk);
    free(to);
    free(cc);
}

/* The graph input t is at trace time (its tensor, or a cond's or loop's
 * output that handed it on), or -1. */
static int passed_input(Tracer *T, const tfe_tensor *t)
{
    const TNote *n = t ? t->node : NULL;
    if (!n) return -1;
    const GNode *g = gnode(T->g, n->ref.node);
    return n->input && g->kind == G_INPUT ? g->input_index : n->passed;
}

/* The value an output of cond or loop node id that its run handed on as
 * the very tensor t stands for (TNote.handed); {-2, 0} where eager code's
 * tensor is not told by it: a constant made while the branch or body was
 * traced (tanh of a literal), one tensor to the graph at every iteration,
 * a new one to eager code at each. */
static GRef handed_ref(const Tracer *T, int id, const tfe_tensor *t)
{
    GRef r = ((const TNote *)t->node)->ref;
    const GNode *n = gnode(T->g, id);
    if (gnode(T->g, r.node)->kind != G_CONST) return r;
    int first = id;
    for (int b = 0; b < 2; b++) {
        const GRegion *reg = &T->g->regions[n->regions[b]];
        for (int i = 0; i < reg->n; i++)
            if (reg->nodes[i] < first) first = reg->nodes[i];
        for (int i = 0; i < reg->nparams; i++)
            if (reg->params[i] < first) first = reg->params[i];
    }
    return r.node > first ? (GRef){-2, 0} : r;
}

/* TNote.handed of the outputs the run gave as traced tensors. A constant
 * made in the branch or body (not known: handed_ref) is, to eager code, a
 * tensor made anew where it was evaluated, apart from every value outside:
 * where only one output is it, a tensor of its own. Two outputs that are
 * it are one evaluation where the branch that ran, or the body, ends both
 * on one value (a0 = c; a1 = a0), and two where the body ends one on the
 * constant and the other on a carried value (a1 = a0; a0 = c: the
 * previous iteration's); else not known. */
static void lone_constants(int id, int nout, tfe_tensor *const *outs, GRef *handed, const Tracer *T)
{
    const Graph *g = T->g;
    const GNode *n = &g->nodes[id];
    const GRegion *end = NULL; /* the region whose outputs the run's are */
    if (n->kind == G_WHILE) {
        end = &g->regions[n->regions[1]];
    } else if (n->kind == G_COND) {
        int ps = g->nodes[n->in[0].node].vbase + n->in[0].out;
        const tfe_tensor *pred = ps < T->capconcrete ? T->concrete[ps] : NULL;
        if (pred && pred->storage) end = &g->regions[n->regions[tensor_load_f64(pred, 0) != 0.0 ? 0 : 1]];
    }
    for (int k = 0; k < nout; k++)
        if (outs[k]->node) handed[k] = handed_ref(T, id, outs[k]);
    for (int k = 0; k < nout; k++) {
        if (handed[k].node != -2) continue;
        int state = -1; /* -1: its own; -2: not known; j >= 0: output j's tensor */
        for (int j = 0; j < nout && state != -2; j++) {
            if (j == k || outs[j] != outs[k]) continue;
            GRef a = end && k < end->nouts ? end->outs[k] : (GRef){-1, 0};
            GRef b = end && j < end->nouts ? end->outs[j] : (GRef){-1, 0};
            if (a.node >= 0 && a.node == b.node && a.out == b.out) {
                if (j < k) state = j;
            } else if (n->kind == G_WHILE && a.node >= 0 && b.node >= 0 &&
                       ((g->nodes[a.node].kind == G_PARAM && g->nodes[b.node].kind == G_CONST) ||
                        (g->nodes[b.node].kind == G_PARAM && g->nodes[a.node].kind == G_CONST))) {
                continue; /* (two evaluations) */
            } else {
                state = -2;
            }
        }
        handed[k] = state >= 0 ? (GRef){id, state} : (GRef){state, 0};
    }
}

int trace_node_outputs(Tracer *T, int id, tfe_tensor **outs)
{
    GNode *n = gnode(T->g, id);
    int nout = n->nout;
    /* per output, the graph input it hands on unchanged in this run (TNote.passed) */
    int *pin = xmalloc(sizeof *pin * ((size_t)nout + 1));
    for (int k = 0; k < nout; k++) pin[k] = -1;
    /* ... and the value it hands on unchanged (TNote.handed) */
    GRef *handed = xmalloc(sizeof *handed * ((size_t)nout + 1));
    for (int k = 0; k < nout; k++) handed[k] = (GRef){-1, 0};
    tfe_tensor **src = xcalloc((size_t)nout + 1, sizeof *src); /* (what each output is: lone_constants) */
    int rec = -1; /* the ways it and the ifs and loops in it went (TNote.ran_rec) */
    const Graph *rg = T->g;
    if (!T->symbolic && tfe_tapes_active) {
        /* under a tape: the node runs as a graph of its own, one tape entry
         * whose backward is traced like any staged call's (stage/grad.c) */
        int *real = NULL; /* per handed-on read, the read node it stands for */
        int nextra = export_reads(T, id, &real);
        int nkeep = keep_branch_values(T, id), nmore = nextra + nkeep;
        if (nkeep) { /* (trace_prune_kept drops those nothing reads) */
            T->kept = xrealloc(T->kept, sizeof *T->kept * (size_t)(T->nkept + 1));
            T->kept[T->nkept++] = (struct Kept){id, nout + nextra, nkeep};
        }
        n = gnode(T->g, id); /* (nodes were added) */
        GRef *caps;
        int ncaps;
        Graph *m = graph_extract(T->g, id, &caps, &ncaps);
        m->noted_loops = true; /* (a loop at its top: tapes_loop_count, loop_core) */
        if (nextra) mark_exported(T->g, id, m, real, nextra);
        tfe_tensor **in = xcalloc((size_t)ncaps + 1, sizeof *in);
        for (int i = 0; i < ncaps; i++) in[i] = T->concrete[gnode(T->g, caps[i].node)->vbase + caps[i].out];
        tfe_tensor **all = nmore ? xcalloc((size_t)(nout + nmore), sizeof *all) : outs;
        /* (its reads are the ones a tape made in this trace noted, with
         * where they are, when the branches were traced: builtins_autodiff.c) */
        int saved_region = T->cf_region;
        struct CfStart *saved_start = T->cf_start;
        int saved_nstart = T->ncf_start;
        T->cf_start = NULL;
        T->ncf_start = 0;
        if (nextra) {
            T->cf_start = xcalloc((size_t)nextra, sizeof *T->cf_start);
            for (int k = 0; k < nextra; k++) {
                Value var = gnode(T->g, real[k])->host->obj;
                T->cf_start[k].var = var.u.o;
                if ((T->cf_start[k].t = variable_peek(var))) tensor_incref(T->cf_start[k].t);
            }
            T->ncf_start = nextra;
        }
        int ran_region = cf_run_region(T, id); /* (for the reads handed on, below) */
        T->cf_region = ran_region;
        /* (where the entry will be on each tape made in this trace) */
        int ninner = T->I->tapes.n - T->tapes_at_begin;
        int *n0 = xmalloc(sizeof *n0 * (size_t)(ninner > 0 ? ninner : 1));
        for (int k = 0; k < ninner; k++) n0[k] = tfe_tape_nentries(T->I->tapes.active[T->tapes_at_begin + k]);
        /* a loop's result is, where it ran zero times, the value it started
         * from: to a tape made in this trace, one tensor there (eager
         * code's), under the traced bool (tfe_tape_cond_same) */
        tfe_tensor *zero_trip = NULL;
        if (n->kind == G_WHILE && ninner > 0) {
            tfe_tensor *runs = stage_loop_runs(T, id, false);
            if (runs) zero_trip = tfe_call1(OP_LOGICAL_NOT, 1, &runs, NULL);
            if (runs) tensor_decref(runs);
        }
        T->suspended++;
        T->cf_running++;
        int *same_in = xmalloc(sizeof *same_in * ((size_t)(nout + nmore) + 1));
        signed char *ways = NULL;
        int rc = stage_graph_call_ran(T->I, m, in, all, same_in, &ways, &rg);
        if (!rc) rec = add_ran(T, m, rg, ways);
        else free(ways);
        T->suspended--;
        for (int k = 0; k < nout && !rc; k++) {
            if (same_in[k] >= 0 && same_in[k] < ncaps) pin[k] = passed_input(T, in[same_in[k]]);
            /* (the run handed on that input, or an earlier output: TNote.handed) */
            src[k] = same_in[k] >= 0 && same_in[k] < ncaps ? in[same_in[k]] : NULL;
            if (same_in[k] <= -2 && -2 - same_in[k] < k) handed[k] = (GRef){id, -2 - same_in[k]};
        }
        free(same_in);
        if (!rc && zero_trip) {
            const GRegion *top = &m->regions[0];
            int *csame = xmalloc(sizeof *csame * ((size_t)nout + 1));
            tfe_tensor **cc = xmalloc(sizeof *cc * ((size_t)nout + 1));
            for (int k = 0; k < nout; k++) {
                csame[k] = -1;
                cc[k] = zero_trip;
                if (k >= top->nouts || !all[k] || !dtype_is_float(all[k]->dtype)) continue;
                const GNode *w = &m->nodes[top->outs[k].node];
                if (w->kind != G_WHILE || top->outs[k].out >= w->nin) continue;
                GRef init = w->in[top->outs[k].out];
                for (int i = 0; i < m->ninputs; i++)
                    if (m->inputs[i] == init.node && init.out == 0) csame[k] = i;
            }
            tfe_tape_cond_same(T->tapes_at_begin, nout, all, csame, cc);
            /* ... and where it ran, a result whose body always ends it on
             * the value it ends an earlier one on (b = acc last) is that
             * one's tensor (-2 - q: the entry's output q) */
            tfe_tensor *ran = tfe_call1(OP_LOGICAL_NOT, 1, &zero_trip, NULL);
            int *outk = xmalloc(sizeof *outk * ((size_t)nout + 1)), na = 0;
            for (int k = 0; k < nout && ran; k++) {
                if (k >= top->nouts || !all[k] || !dtype_is_float(all[k]->dtype)) continue;
                GRef o = top->outs[k];
                const GNode *w = &m->nodes[o.node];
                if (w->kind != G_WHILE) continue;
                const GRegion *rb = &m->regions[w->regions[1]];
                for (int q = 0; q < k && o.out < rb->nouts; q++) {
                    GRef oq = top->outs[q];
                    if (oq.node != o.node || oq.out >= rb->nouts || oq.out == o.out) continue;
                    GRef a = rb->outs[o.out], bq = rb->outs[oq.out];
                    if (a.node != bq.node || a.out != bq.out || m->nodes[a.node].region == 0) continue;
                    outk[na] = k;
                    csame[na] = -2 - q;
                    cc[na++] = ran;
                    break;
                }
            }
            if (na) tfe_tape_cond_alias(T->tapes_at_begin, nout, all, na, outk, csame, cc);
            if (ran) tensor_decref(ran);
            else tfe_error_clear();
            free(outk);
            free(csame);
            free(cc);
        }
        /* an if's result is, where the branch that ran ends it on a value
         * from outside it (b = x), that value: one tensor to such a tape.
         * (A loop whose body holds an if is never such an entry: under a
         * tape made in this trace it runs at trace time, its ifs traced one
         * by one, each aliased so.) */
        /* (gnode again: n may be stale, running the node added nodes) */
        if (!rc && gnode(T->g, id)->kind == G_COND && ninner > 0) cond_pass_aliases(T, m, in, nout, all);
        if (zero_trip) tensor_decref(zero_trip);
        free(in);
        free(caps);
        T->cf_region = 0;
        if (!rc && T->I->tapes.n - T->tapes_at_begin == ninner) reread_vars(T, m, id, n0);
        free(n0);
        T->cf_running--;
        T->cf_region = saved_region;
        for (int k = 0; k < T->ncf_start; k++) {
            if (T->cf_start[k].t) tensor_decref(T->cf_start[k].t);
            if (T->cf_start[k].own) tensor_decref(T->cf_start[k].own);
        }
        free(T->cf_start);
        T->cf_start = saved_start;
        T->ncf_start = saved_nstart;
        graph_decref(m);
        if (nmore) {
            /* the handed-on reads: only a backward recorded here uses them
             * (stage/grad.c finds them by their slots); a header of their
             * own, as the tensor may stand for something else here */
            for (int k = 0; k < nout; k++) outs[k] = all[k];
            for (int k = nout; k < nout + nextra; k++) {
                if (!all[k]) continue;
                /* what the run read there (a tape made in this trace noted
                 * it) is a read where the branch that reads it runs; in the
                 * other, the stand-in's value is used by nothing */
                if (!rc) {
                    const GNode *rn = gnode(T->g, real[k - nout]);
                    /* (else source_value noted it: where the branch did not
                     * run, or, before an assign there, as a header of its
                     * own, stage/grad.c, ran_read_own) */
                    if (rn->region == ran_region && read_near_assign(T->g, real[k - nout], true))
                        tapes_read_in_region(T->id, rn->host->obj, all[k], rn->region);
                }
                if (!rc) {
                    tfe_tensor *a = tensor_alias(all[k]);
                    trace_note(T, a, (GRef){id, k});
                    tensor_decref(a); /* the note keeps it */
                }
                tensor_decref(all[k]);
            }
            /* the kept values: the tensors the entry gave, which a backward
             * recorded here reads, are these outputs of the node */
            for (int k = nout + nextra; k < nout + nmore; k++) {
                if (!all[k]) continue;
                if (!rc && !all[k]->node) trace_note(T, all[k], (GRef){id, k});
                tensor_decref(all[k]);
            }
            free(all);
        }
        free(real);
        tapes_reads_settle(T->id);
        if (rc) {
            free(pin);
            free(handed);
            free(src);
            return -1;
        }
        for (int k = 0; k < nout; k++)
            if (!src[k]) src[k] = outs[k];
        lone_constants(id, nout, src, handed, T);
        for (int k = 0; k < nout; k++)
            if (outs[k]->node) { /* one header per value: the note is the node's */
                tfe_tensor *a = tensor_alias(outs[k]);
                tensor_decref(outs[k]);
                outs[k] = a;
            }
    } else if (!T->symbolic) {
        if (run_now(T, id, outs, &rec)) {
            free(pin);
            free(handed);
            free(src);
            return -1;
        }
        /* (a tensor the run made, handed out as two outputs: the later
         * ones are the first, to eager code too) */
        for (int k = 0; k < nout; k++)
            for (int j = 0; j < k && !outs[k]->node && handed[k].node == -1; j++)
                if (outs[j] == outs[k]) handed[k] = (GRef){id, j};
        lone_constants(id, nout, outs, handed, T);
        for (int k = 0; k < nout; k++) { /* one header per value: the note is the node's */
            pin[k] = passed_input(T, outs[k]);
            tfe_tensor *a = tensor_alias(outs[k]);
            tensor_decref(outs[k]);
            outs[k] = a;
        }
    } else {
        /* A tape made inside this branch or loop body (traced without
         * values) has no entry for a nested cond or loop: its gradient
         * through it would be zero. Refuse rather than be silently wrong. */
        if (tfe_tapes_active > T->tapes_at_begin) {
            free(pin);
            free(handed);
            free(src);
            return trace_fail(T->I, gnode(T->g, id)->loc,
                              "a tape inside a staged conditional or loop cannot differentiate through "
                              "another conditional or loop inside it");
        }
        for (int k = 0; k < nout; k++) {
            tfe_meta *m = &gnode(T->g, id)->meta[k];
            outs[k] = tensor_symbolic(m->dtype, m->weak, m->rank, m->shape);
        }
    }
    for (int k = 0; k < nout; k++) {
        trace_note(T, outs[k], (GRef){id, k});
        ((TNote *)outs[k]->node)->passed = pin[k];
        ((TNote *)outs[k]->node)->handed = handed[k];
        TNote *nt = outs[k]->node;
        nt->ran_rec = rec;
        if (rec >= 0) nt->ran_ref = rg == T->g ? (GRef){id, k} : rg->regions[0].outs[k];
    }
    free(pin);
    free(handed);
    free(src);
    return 0;
}

/* The last steps for a new cond or while node: it joins the effect chain,
 * its outputs are computed (or made symbolic) into outs, and the first
 * nbind of them become the bindings at slots (the references move there). */
/* What eager code holds v, a binding or result at the end of a branch or
 * loop body, as (TK_*): TK_FOLLOW where the way another if or loop went
 * decides (an output of one with a rule of its own: *sub, its note). */
static signed char value_kind(Value v, const TNote **sub)
{
    Value as;
    *sub = NULL;
    if (trace_eager_number(v, &as)) return TK_NUMBER;
    if (v.kind != V_TENSOR || !v.u.t->node) return TK_DEFAULT;
    const TNote *nt = v.u.t->node;
    if (nt->run_kind[0]) { /* (another if's or loop's way decides) */
        *sub = nt;
        return TK_FOLLOW;
    }
    return nt->boxed ? TK_BOXED : TK_DEFAULT;
}

/* The target-th number/tensor leaf of v, in sig_flatten's order, or nil. */
static Value leaf_value(Value v, int *k, int target)
{
    if ((v.kind == V_SCALAR && v.dtype != TFE_BOOL && !v.lit) || v.kind == V_TENSOR) return (*k)++ == target ? v : v_nil();
    Value r = v_nil();
    if (v.kind == V_TUPLE || v.kind == V_LIST) {
        Seq *q = (Seq *)v.u.o;
        for (int i = 0; i < q->n && r.kind == V_NIL && *k <= target; i++) r = leaf_value(q->items[i], k, target);
    } else if (v.kind == V_RECORD) {
        Record *rc = (Record *)v.u.o;
        for (int i = 0; i < rc->n && r.kind == V_NIL && *k <= target; i++) r = leaf_value(rc->vals[i], k, target);
    }
    return r;
}

/* Output t (0-d, not bool) of a cond or loop, whose
 * branches (start and body) leave kinds k0 and k1: eager code's kind after
 * the call is the one of the way it went (TNote.run_kind); where both are
 * tensors, a tensor whatever the tape. */
static void note_run_kind(tfe_tensor *t, signed char k0, signed char k1, const TNote *s0, const TNote *s1)
{
    TNote *nt = t->node;
    if (!nt || t->rank != 0 || t->dtype == TFE_BOOL || nt->number || !k0 || !k1) return;
    if (k0 == k1 && k0 != TK_FOLLOW) {
        if (k0 == TK_BOXED) nt->boxed = true;
        return;
    }
    nt->run_kind[0] = k0;
    nt->run_kind[1] = k1;
    nt->sub[0] = s0;
    nt->sub[1] = s1;
}

static int bind_outputs(Tracer *T, int id, Env *env, const int *slots, int nbind, tfe_tensor **outs)
{
    gnode(T->g, id)->effect_dep = T->last_effect;
    T->last_effect = id;
    T->last_cf = id;
    trace_share_reads(T, id);
    if (trace_node_outputs(T, id, outs)) return -1;
    for (int k = 0; k < nbind; k++) {
        Value old = env->slots[slots[k]];
        env->slots[slots[k]] = v_tensor_take(outs[k]);
        value_decref(old);
    }
    return 0;
}

/* A conditional or loop that could not become a graph node. Nested in
 * another one, the failure goes up to it. At the top it runs on the value
 * its condition has in this call, and the trace then depends on that value
 * (trace.c marks the inputs it comes from as part of the signature; when it
 * comes from a variable or a random draw, staging fails there). Returns -1
 * (error raised) or 1 (run it eagerly). */
static int give_up(Interp *I, Tracer *T, Loc loc, const char *what)
{
    if (T->symbolic) {
        if (!I->has_error) raise_at(I, loc, "%s could not be traced", what);
        return -1;
    }
    /* the refusal of a read in the attempt is caught here: the if or loop
     * runs at trace time, where such a read raises again */
    if (I->has_error) T->refused = false;
    error_clear(I);
    return 1;
}

void trace_fallback_done(Interp *I)
{
    Tracer *T = I->tracer;
    if (!T) return;
    free(T->fallback_why);
    T->fallback_why = NULL;
}

/* Where a trace stood before an attempt at a cond or while node, so that a
 * failed attempt leaves nothing behind: constants it added to the top region
 * are taken out again, and tensors noted for its nodes forget them (its
 * regions are simply never used). */
typedef struct Mark { int nodes, top, notes; uint64_t rkey, rcounter; int writes; uint64_t born; } Mark;

static Mark mark_of(Tracer *T)
{
    Mark m = {T->g->n, T->g->regions[0].n, T->nnotes, 0, 0, T->nwrites, env_next_born()};
    tfe_random_state(&m.rkey, &m.rcounter);
    return m;
}

/* Symbolic tracing runs no draws, but the random builtins reserved counters
 * for them: the stream goes back to where it was before the attempt, so the
 * node (or the eager fallback) draws what eager code would. */
static void rewind_random(Mark m) { tfe_random_restore(m.rkey, m.rcounter); }

static void roll_back(Tracer *T, Mark m)
{
    rewind_random(m);
    trace_alias_roll_back(T, m.nodes);
    GRegion *top = &T->g->regions[0];
    int keep = m.top;
    for (int i = m.top; i < top->n; i++) /* inputs made meanwhile stay: they are outside reads */
        if (gnode(T->g, top->nodes[i])->kind == G_INPUT) top->nodes[keep++] = top->nodes[i];
    top->n = keep;
    for (int i = m.notes; i < T->nnotes; i++) {
        TNote *nt = T->notes[i];
        GNode *gn = gnode(T->g, nt->ref.node);
        if (nt->ref.node >= m.nodes && gn->kind != G_INPUT && nt->t->node == nt) nt->t->node = NULL;
    }
}

/* After a failed attempt: the tracer's place and the bindings as they were
 * before it; then give_up, and when the statement is to run eagerly the
 * attempt's leftovers go (roll_back). Returns -1 or 1. */
static int attempt_failed(Interp *I, Tracer *T, Env *env, const Value *before, int region, bool sym, int effect,
                          Mark mark, Loc loc, const char *what)
{
    T->region = region;
    T->symbolic = sym;
    T->last_effect = effect;
    trace_writes_undo(T, mark.writes); /* (bindings of other functions it assigned) */
    restore(env, before);
    /* (the reason, for an error reading its condition or bounds now) */
    free(T->fallback_why);
    T->fallback_why = !sym && I->has_error && I->err_msg ? xstrdup(I->err_msg) : NULL;
    T->fallback_line = I->has_error ? I->err_loc.line : 0;
    /* (a reason in another file, a stdlib function's (optim.tfe's line
     * 263) or a module's, names it: the line alone would send the reader
     * to the file of the error) */
    T->fallback_file = NULL;
    if (I->has_error && I->err_loc.src && loc.src && I->err_loc.src != loc.src &&
        strcmp(I->err_loc.src->name, loc.src->name)) {
        const char *nm = I->err_loc.src->name, *sl = strrchr(nm, '/');
        T->fallback_file = sl ? sl + 1 : nm;
    }
    int rc = give_up(I, T, loc, what);
    if (rc == 1) {
        roll_back(T, mark);
        /* the statement now reads its condition's (or bounds') value at
         * trace time: an error about that value points at it, not at the
         * place inside the attempt (a nested if's condition) it stopped */
        I->cur_loc = loc;
    }
    return rc;
}

static bool region_draws(const Graph *g, int r)
{
    const GRegion *reg = &g->regions[r];
    for (int i = 0; i < reg->n; i++) {
        const GNode *x = &g->nodes[reg->nodes[i]];
        if (x->kind == G_OP && (tfe_ops[x->op].flags & F_RANDOM)) return true;
        if ((x->kind == G_COND || x->kind == G_WHILE) && (region_draws(g, x->regions[0]) || region_draws(g, x->regions[1])))
            return true;
    }
    return false;
}

/* A loop body that draws random numbers, about to become a node at the top
 * while a tape records: its backward would have to replay a draw of every
 * iteration, and a run keeps only the last. The loop then runs at trace
 * time instead (like one that cannot be a node), and the tape sees its ops
 * one by one, as eagerly. (A branch's draw is replayed exactly,
 * stage/grad.c.) */
static bool tape_meets_draw(const Tracer *T, const Graph *g, int r)
{
    return !T->symbolic && tfe_tapes_active && region_draws(g, r);
}

/* Does a region read a value that varies from call to call (a variable,
 * a draw, a host call), in it or in a region nested in it? */
static bool region_varies(const Graph *g, int r)
{
    const GRegion *reg = &g->regions[r];
    for (int i = 0; i < reg->n; i++) {
        const GNode *x = &g->nodes[reg->nodes[i]];
        if (x->kind == G_VAR_READ || x->kind == G_HOST) return true;
        if (x->kind == G_OP && (tfe_ops[x->op].flags & F_RANDOM)) return true;
        if ((x->kind == G_COND || x->kind == G_WHILE) && (region_varies(g, x->regions[0]) || region_varies(g, x->regions[1])))
            return true;
    }
    return false;
}

/* A loop met with values (not in a branch traced symbolically) while two
 * tapes or more record (a second order may be taken): as a node, its tape
 * entry's backward graph, differentiated again by the outer tape, gave
 * second orders that differ from eager's in the last bit in the call that
 * traces (stage_grad2_loop_trace_bits; a cached call under two tapes runs
 * its body eagerly, stage/grad.c). *varies: its condition or body reads a
 * value that varies from call to call (a variable, a draw, a host call). */
static bool tapes_meet_loop(Tracer *T, const Graph *g, int rcond, int rbody, bool *varies)
{
    *varies = false;
    if (T->symbolic || !tfe_tapes_active) return false;
    tfe_tape *also[16];
    if (tfe_tapes_recording_or(also, tapes_watching_vars(also, 16)) < 2) return false;
    *varies = region_varies(g, rcond) || region_varies(g, rbody);
    return true;
}

/* An if met with values (not in a branch traced symbolically) while three
 * tapes or more record (a third order may be taken): run as a tape entry,
 * its backward graphs, run again under the outer tapes, gave third and
 * fourth orders that differ from eager's in the last bit (stage_grad3_if,
 * stage_grad3_nested_if, stage_grad4_if). It runs at trace time instead, so
 * the tapes see its branch's ops one by one, as eagerly (an if nested there
 * is met with values in turn); the trace then depends on its condition's
 * value (section 7 of docs/staging.md). */
static bool tapes_meet_if(Tracer *T, const tfe_tensor *pred)
{
    /* (a condition whose value varies from call to call, from a variable,
     * a draw or a host call, cannot be read at trace time: the if stays a
     * node, section 14) */
    if (T->symbolic || !tfe_tapes_active || trace_value_varies(T->I, pred)) return false;
    tfe_tape *also[16];
    return tfe_tapes_recording_or(also, tapes_watching_vars(also, 16)) >= 3;
}

/* The call that traces runs eagerly from its start instead, where it can
 * (nothing done in it yet, or its effects so far can be made again: a
 * replay gives each its logged result), and so do later calls under
 * ntapes recording tapes or more (counting those the trace made): true
 * with *rc the code that stops the trace (staged.c runs the call again). */
static bool redo_call_eagerly(Interp *I, Tracer *T, Loc loc, int ntapes, int *rc)
{
    int nt = ntapes - (tfe_tapes_active - T->tapes_at_begin);
    if (trace_nothing_done(T)) *rc = trace_redo_eagerly(I, loc, nt, "(unused)");
    else if (trace_effects_replayable(T)) *rc = trace_redo_replaying(I, loc, nt);
    else return false;
    return true;
}

/* How the call that traces could run again eagerly, as it stood before an
 * if or loop was traced (its branches' or body's nodes and effects are
 * not done: they count in trace_nothing_done once traced): decided first,
 * used after (outer_tape_meets_nesting). */
typedef enum { REDO_NONE, REDO_FRESH, REDO_REPLAY } RedoHow;

static RedoHow redo_how(const Tracer *T)
{
    /* (only asked for where a tape outside records: the scans below are
     * over the whole graph, at every if and loop) */
    if (T->symbolic || !tfe_tapes_active) return REDO_NONE;
    tfe_tape *also[16];
    if (tfe_tapes_recording_below(T->tapes_at_begin, also, tapes_watching_vars(also, 16)) < 1) return REDO_NONE;
    if (trace_nothing_done(T)) return REDO_FRESH;
    /* (an effect whose result the tape outside tracks, a @host call's
     * value: replayed, its entries would be the trace's, added in another
     * order than eager code's, a last bit apart) */
    return trace_effects_replayable(T) && !trace_done_tracked(T) ? REDO_REPLAY : REDO_NONE;
}

/* redo_call_eagerly, as the call stood then (how). */
static bool redo_as_before(Interp *I, Tracer *T, RedoHow how, Loc loc, int ntapes, int *rc)
{
    if (how == REDO_NONE) return false;
    /* (the replay holds the effects made before the if or loop: none for
     * REDO_FRESH) */
    *rc = trace_redo_replaying(I, loc, ntapes - (tfe_tapes_active - T->tapes_at_begin));
    return true;
}

/* An if met with values while exactly two tapes record the call that
 * traces (a second order may be taken): as a node, nested ifs on traced
 * data under a target that reads the call's result as well as the first
 * order gave the outer tape two sums (stage_grad2_if_trace_result_bits).
 * Where nothing was done yet in the call, or its effects can be made
 * again, the call runs eagerly instead, as do later calls under as many
 * tapes (run at trace time, the if would make a trace per condition
 * value: a retrace at every call with new data); else it stays a node. */
static bool two_tapes_meet_if(Tracer *T)
{
    if (T->symbolic || !tfe_tapes_active) return false;
    tfe_tape *also[16];
    return tfe_tapes_recording_or(also, tapes_watching_vars(also, 16)) == 2;
}

/* The same if met with values, whose condition varies from call to call
 * (from a variable, a draw or a host call: not readable at trace time, so
 * it stays a node), while three tapes or more record: its tape entry would
 * give third and fourth orders that can differ from eager's in the last
 * bit, so the whole call runs eagerly instead (trace_redo_eagerly), and so
 * do later calls whose cached graph has an if under three tapes
 * (stage_grad_runs_eagerly) */
static bool tapes_meet_varying_if(Tracer *T, const tfe_tensor *pred)
{
    if (T->symbolic || !tfe_tapes_active || !trace_value_varies(T->I, pred)) return false;
    tfe_tape *also[16];
    return tfe_tapes_recording_or(also, tapes_watching_vars(also, 16)) >= 3;
}

/* Does region r hold an if or loop (nested in the one being traced)? */
static bool region_has_control_flow(const Graph *g, int r)
{
    const GRegion *reg = &g->regions[r];
    for (int i = 0; i < reg->n; i++)
        if (g->nodes[reg->nodes[i]].kind == G_COND || g->nodes[reg->nodes[i]].kind == G_WHILE) return true;
    return false;
}

/* An if or loop met with values (not in a branch traced symbolically) that
 * holds another if or loop in a branch or its body, while a tape outside
 * the call records it: as a node, its tape entry's backward adds the uses
 * of a value the inner one hands on (a0 = a2 in a nested loop's body, a1 =
 * a0 in a nested if's branch) or reads a variable it assigns as sums of
 * their own, where eager code adds them to one running sum in tape order:
 * gradients a last bit apart (stage_grad_nested_cf_outer_tape, property
 * seeds 265277, 265583, 272416, 276238, 276666). The call runs eagerly
 * instead where it can (redo_as_before; a cached call of a graph with
 * such nesting under a tape outside runs eagerly too: stage/grad.c), or
 * the if or loop runs at trace time (the trace then reads its condition's
 * values, section 7). */
static bool outer_tape_meets_nesting(Tracer *T, const Graph *g, int ra, int rb)
{
    if (T->symbolic || !tfe_tapes_active) return false;
    if (!region_has_control_flow(g, ra) && !region_has_control_flow(g, rb)) return false;
    tfe_tape *also[16];
    return tfe_tapes_recording_below(T->tapes_at_begin, also, tapes_watching_vars(also, 16)) >= 1;
}

/* A symbolic-context check that fails the whole attempt. */
#define FAIL(...) do { trace_fail(I, __VA_ARGS__); goto failed; } while (0)

/* An int that is a number (weak: a literal, arithmetic on literals) after
 * one branch of a traced if and a strong tensor after the other: eager
 * code's later promotions differ (a weak int64 with an int32 tensor gives
 * int32, a strong one int64), and a graph's value has one weakness. (The
 * node used to hand on one weakness for both, read at trace time by
 * dtype(t + y).) */
static bool weak_int_differs(const tfe_tensor *a, const tfe_tensor *b)
{
    return a->weak != b->weak && a->dtype == b->dtype && !dtype_is_float(a->dtype) && a->dtype != TFE_BOOL;
}
#define WEAK_INT_MSG "%s is a number (a weak %s) in one branch of this if on a traced tensor and a strong " \
    "%s tensor in the other, which promote differently (with an int32 tensor); make both tensors " \
    "(write tensor(5) where it is the literal 5)"

/* --- assignments that the statements of a block do not name --------------------------- */

/* Where slot of env was first assigned by the writes noted since `from`
 * (a closure's `c += 1`), or NULL. */
static Node *noted_assign(const Tracer *T, int from, const Env *env, int slot)
{
    for (int i = from; i < T->nwrites; i++)
        if (T->writes[i].env == env && T->writes[i].slot == slot) return T->writes[i].at;
    return NULL;
}

/* The first write noted since `from` to a binding of another function that
 * was there before the if or loop began (born before `born`): an enclosing
 * function's, or a closure's made earlier. Such a binding is not in the
 * bindings the if or loop hands on, so it cannot be one of its outputs. */
static const struct SymWrite *foreign_write(const Tracer *T, int from, const Env *env, uint64_t born)
{
    for (int i = from; i < T->nwrites; i++)
        if (T->writes[i].env != env && T->writes[i].env->born < born) return &T->writes[i];
    return NULL;
}

#define FOREIGN_HOW "; return the new value from the function and assign it where the binding is declared, " \
                    "or make the condition a plain value (not a traced tensor)"

/* --- if --------------------------------------------------------------------------------- */

typedef struct Pair { int slot; tfe_tensor *t[2]; } Pair;

static tfe_tensor *as_tensor(Value v) { return value_to_tensor(v); }

/* A binding (or returned value) with other dims after each branch, while a
 * tape records: the gradients of the ops after the if would be shaped by
 * the branch this call took, and a cached graph's backward, built once,
 * would keep those shapes when a later call takes the other one. So such an
 * if is decided at trace time, as one on a known value: the trace depends
 * on its condition's value (a new value traces again). Inside a traced
 * branch or loop the failure goes up, and the outermost one is decided at
 * trace time instead. With no tape it stays a node (one trace for both
 * shapes); a gradient through it later is an error (stage/grad.c). */
static bool same_shape(const tfe_tensor *a, const tfe_tensor *b)
{
    if (!tfe_tapes_active) return true;
    if (a->rank != b->rank) return false;
    for (int d = 0; d < a->rank; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

/* An if on a value that varies from call to call (a variable, a draw, a
 * @host call's result) whose branch b raised an error while traced
 * symbolically cannot run at trace time: its condition cannot be read
 * there. Where this call takes that branch, eager code runs it too and
 * meets the error: the branch runs (its condition's value peeked, as the
 * trace goes no further either way), so the call raises eager's error, with
 * eager's line and caret, not the one about the condition. A branch that
 * runs through here (its symbolic failure was one only a trace meets)
 * ends in that error about the condition as before. Returns -1 (an error
 * raised), 0 (the branch ran and an implicit trace ended: the call goes on
 * eagerly) or 1 (not taken: the caller reads the condition as before). */
static int run_failed_branch(Interp *I, Tracer *T, Node *n, Env *env, Value cond, int b, int *xs)
{
    bool t = false, susp = T->suspended;
    T->suspended = true; /* (a peek: no trace-time read is noted) */
    int rc = value_truth(I, cond, n->a->loc, &t);
    T->suspended = susp;
    if (rc) return -1;
    if ((t ? 0 : 1) != b) return 1;
    char *why = T->fallback_why ? xstrdup(T->fallback_why) : NULL;
    int line = T->fallback_line;
    const char *file = T->fallback_file;
    Node *body = b == 0 ? n->b : n->c;
    *xs = body ? interp_exec_branch(I, body, env) : XS_OK;
    if (*xs == XS_ERR) {
        free(why);
        trace_fallback_done(I);
        return -1;
    }
    free(T->fallback_why);
    T->fallback_why = why;
    T->fallback_line = line;
    T->fallback_file = file;
    I->cur_loc = n->a->loc;
    /* raises the error about the condition; under --stage-all (an
     * implicit trace) it only ends the trace, and the call goes on
     * eagerly after the branch it ran */
    rc = value_truth(I, cond, n->a->loc, &t);
    trace_fallback_done(I);
    if (!rc && !I->has_error && T->failed) return 0;
    if (*xs == XS_RETURN) {
        value_decref(I->retval);
        I->retval = v_nil();
    }
    *xs = XS_ERR;
    if (!I->has_error) raise_at(I, n->a->loc, "this if on a traced tensor could not be traced");
    return -1;
}

int trace_loop_peek(Interp *I, Node *n, Value cond, bool *t)
{
    Tracer *T = I->tracer;
    if (!T || T->symbolic || !T->loop_body_err || !T->fallback_why || cond.kind != V_TENSOR ||
        !trace_value_varies(I, cond.u.t))
        return 1;
    T->loop_body_err = false;
    bool susp = T->suspended;
    T->suspended = true; /* (a peek: no trace-time read is noted) */
    int rc = value_truth(I, cond, n->a->loc, t);
    T->suspended = susp;
    if (rc) return -1;
    if (!*t) return 1;
    /* the read as the loop would make it: the error about the condition,
     * kept for the next condition or the trace's end (a break or return in
     * the body ends the loop first); under --stage-all it only ends the
     * trace, and the loop runs eagerly from here */
    bool t2 = false;
    I->cur_loc = n->a->loc;
    rc = value_truth(I, cond, n->a->loc, &t2);
    trace_fallback_done(I);
    if (T->failed) {
        if (rc) return -1;
        return 0;
    }
    if (!rc || !I->has_error || !I->err_msg) return 1; /* (read after all: as before) */
    free(T->pending_why);
    T->pending_why = xstrdup(I->err_msg);
    T->pending_loc = n->a->loc;
    T->pending_loop = n;
    error_clear(I);
    return 0;
}

int trace_loop_pending(Interp *I, Node *n)
{
    Tracer *T = I->tracer;
    if (!T || T->pending_loop != n) return 1;
    return trace_refusal_pending(I, 0) ? -1 : 1;
}

int trace_cond(Interp *I, Node *n, Env *env, Value cond, NodeList *rest, int rest_k, int *xs)
{
    Tracer *T = I->tracer;
    Graph *g = T->g;
    int ns = env->nslots;
    Value *before = snapshot(env), *after[2] = {NULL, NULL};
    Value ret[2] = {v_nil(), v_nil()};
    int x[2] = {XS_OK, XS_OK};
    int saved_region = T->region, saved_effect = T->last_effect;
    bool saved_sym = T->symbolic;
    int r[2];
    r[0] = graph_add_region(g, T->region);
    r[1] = graph_add_region(g, T->region);
    Pair *pairs = NULL;
    int npairs = 0, nret = 0;
    Leaves rl[2] = {{0}, {0}};
    SigBuf rs[2] = {{0}, {0}};
    bool *local = xcalloc((size_t)ns + 1, 1), *assigned = xcalloc((size_t)ns + 1, 1);
    int rc = 0;
    Mark mark = mark_of(T);
    RedoHow redo = redo_how(T);
    int saved_if[2] = {T->if_regions[0], T->if_regions[1]};
    int err_branch = -1; /* the branch whose symbolic trace raised an error, if one did */

    if (two_tapes_meet_if(T) && redo_call_eagerly(I, T, n->a->loc, 2, &rc)) goto done;
    /* (where the effects so far cannot be made again, the call cannot run
     * again, and as a node the if's third and fourth orders could differ
     * from eager's in the last bit (docs/staging.md section 14,
     * stage_err_grad4_varying_if_effect): a located error instead of a
     * silent difference) */
    if (tapes_meet_varying_if(T, cond.u.t)) {
        if (redo_call_eagerly(I, T, n->a->loc, 3, &rc)) goto done;
        FAIL(n->a->loc, "this if on a value that varies from call to call is met while three tapes or more "
             "record the call (a third order or higher), after an effect of the call that cannot be made "
             "again (a @host call that changes an outside binding or gets a list, an assign, ...): the "
             "staged gradient would not be eager's bit for bit; make the effects after this if, compute the "
             "condition before the staged call and pass it in, or run the function eagerly "
             "(run_eagerly(true))");
    }
    T->symbolic = true;
    T->if_regions[0] = r[0];
    T->if_regions[1] = r[1];
    for (int b = 0; b < 2; b++) {
        T->region = r[b];
        T->last_effect = -1;
        Node *body = b == 0 ? n->b : n->c;
        T->fail_raised = false;
        x[b] = body ? interp_exec_branch(I, body, env) : XS_OK;
        if (x[b] == XS_RETURN) {
            ret[b] = I->retval;
            I->retval = v_nil();
        }
        after[b] = snapshot(env);
        restore(env, before);
        if (x[b] == XS_ERR && !T->failed && !T->fail_raised) err_branch = b;
        if (x[b] == XS_ERR || T->failed) break;
        const struct SymWrite *fw = foreign_write(T, mark.writes, env, mark.born);
        if (fw)
            FAIL(fw->at->loc, "'%s' is a binding of an enclosing function, assigned in this if on a traced "
                 "tensor inside a function; a traced if can change only the bindings of the function it is "
                 "in" FOREIGN_HOW, fw->at->str);
    }
    if (x[0] == XS_ERR || x[1] == XS_ERR || T->failed) goto failed;
    for (int b = 0; b < 2; b++)
        if (x[b] == XS_BREAK || x[b] == XS_CONTINUE)
            FAIL(n->loc, "'%s' inside an if on a traced tensor is not supported", x[b] == XS_BREAK ? "break" : "continue");
    if ((x[0] == XS_RETURN) != (x[1] == XS_RETURN)) {
        /* An early return: in the body of the traced function, the branch
         * that does not return goes on with the statements after the if. */
        Node *top = T->nsym_fns ? T->sym_fns[T->nsym_fns - 1] : NULL;
        if (!rest || !top || top->is_lambda || rest != &top->a->list)
            FAIL(n->loc, "only one branch of this if on a traced tensor returns");
        int b = x[0] == XS_RETURN ? 1 : 0;
        drop(after[b], ns);
        r[b] = graph_add_region(g, saved_region);
        T->region = r[b];
        T->if_regions[b] = r[b];
        T->last_effect = -1;
        Node *body = b == 0 ? n->b : n->c;
        x[b] = body ? interp_exec_branch(I, body, env) : XS_OK;
        if (x[b] == XS_OK) x[b] = interp_exec_rest(I, rest, rest_k, env);
        if (x[b] == XS_OK) {
            x[b] = XS_RETURN; /* off the end of the function: nil */
            ret[b] = v_nil();
        } else if (x[b] == XS_RETURN) {
            ret[b] = I->retval;
            I->retval = v_nil();
        }
        after[b] = snapshot(env);
        restore(env, before);
        if (x[b] == XS_ERR || T->failed) goto failed;
        const struct SymWrite *fw = foreign_write(T, mark.writes, env, mark.born);
        if (fw)
            FAIL(fw->at->loc, "'%s' is a binding of an enclosing function, assigned in this if on a traced "
                 "tensor inside a function; a traced if can change only the bindings of the function it is "
                 "in" FOREIGN_HOW, fw->at->str);
        if (x[b] != XS_RETURN) FAIL(n->loc, "'break' or 'continue' after an early return on a traced tensor");
    }

    /* the bindings the branches changed (none matter when both return) */
    scan_block(n->b, local, assigned, ns);
    scan_block(n->c, local, assigned, ns);
    pairs = xcalloc((size_t)ns + 1, sizeof *pairs);
    for (int s = 0; s < ns && x[0] != XS_RETURN; s++) {
        if (local[s]) continue;
        Value a0 = after[0][s], a1 = after[1][s], b0 = before[s];
        if (same_value(a0, b0) && same_value(a1, b0)) continue;
        Node *where = find_assign(n->b, s);
        if (!where) where = find_assign(n->c, s);
        if (!where) where = noted_assign(T, mark.writes, env, s); /* (by a function it calls) */
        char qn[96];
        const char *name = where ? where->str : "a binding";
        if (!is_leafy(a0) || !is_leafy(a1) || is_lit(a0) || is_lit(a1)) {
            if (same_value(a0, a1)) { /* e.g. the same string in both: no output needed */
                Value old = env->slots[s];
                value_incref(a0);
                env->slots[s] = a0;
                value_decref(old);
                continue;
            }
            if (is_leafy(a0) && is_leafy(a1))
                FAIL(where ? where->loc : n->loc, "%s is a float literal after a branch of this if on a traced "
                     "tensor (a tensor would round it to float32)", quoted(name, qn, sizeof qn));
            /* (a variable itself, b = v, is an object a graph cannot hand
             * on; its value, b = v.value, is a tensor read where it runs) */
            FAIL(where ? where->loc : n->loc, "%s is %s after one branch of this if on a traced tensor and %s "
                 "after the other; staged code needs tensors (or equal values) in both%s",
                 quoted(name, qn, sizeof qn), kind_with_article(a0), kind_with_article(a1),
                 value_is_variable(a0) || value_is_variable(a1)
                     ? "; to hand on the variable's value, read it with .value" : "");
        }
        tfe_tensor *t0 = as_tensor(a0), *t1 = as_tensor(a1);
        pairs[npairs++] = (Pair){s, {t0, t1}};
        if (t0->dtype != t1->dtype)
            FAIL(where ? where->loc : n->loc, "%s is %s in one branch of this if on a traced tensor and %s in "
                 "the other; a binding assigned in both branches must keep its dtype",
                 quoted(name, qn, sizeof qn), dtype_name(t0->dtype), dtype_name(t1->dtype));
        if (t0->rank != t1->rank)
            FAIL(where ? where->loc : n->loc, "%s has rank %d in one branch of this if on a traced tensor and "
                 "%d in the other; a binding assigned in both branches must keep its rank",
                 quoted(name, qn, sizeof qn), t0->rank, t1->rank);
        if (weak_int_differs(t0, t1))
            FAIL(where ? where->loc : n->loc, WEAK_INT_MSG, quoted(name, qn, sizeof qn),
                 dtype_name(t0->dtype), dtype_name(t0->dtype));
        if (!same_shape(t0, t1)) goto failed; /* decided at trace time (same_shape says why) */
    }
    if (x[0] == XS_RETURN) {
        for (int b = 0; b < 2; b++) sig_flatten(ret[b], &rs[b], &rl[b], SIG_OUTPUT);
        if (rs[0].n != rs[1].n || mem_cmp(rs[0].b, rs[1].b, rs[0].n) || sig_has_function(ret[0]))
            FAIL(n->loc, "the branches of this if on a traced tensor return values of different kinds "
                 "(staged code needs the same structure and dtypes from both)");
        nret = rl[0].n;
        for (int k = 0; k < nret; k++)
            if (!same_shape(rl[0].t[k], rl[1].t[k])) goto failed;
    }

    /* the node: outputs are the changed bindings, then the returned leaves */
    int nout = npairs + nret;
    for (int b = 0; b < 2; b++) {
        T->region = r[b];
        GRegion *reg = &g->regions[r[b]];
        reg->nouts = nout;
        reg->outs = xcalloc((size_t)(nout ? nout : 1), sizeof *reg->outs);
        for (int k = 0; k < nout; k++) {
            tfe_tensor *t = k < npairs ? pairs[k].t[b] : rl[b].t[k - npairs];
            GRef ref = trace_ref(T, t);
            g->regions[r[b]].outs[k] = ref;
        }
    }
    T->region = saved_region;
    T->symbolic = saved_sym;
    T->last_effect = saved_effect;
    T->if_regions[0] = saved_if[0];
    T->if_regions[1] = saved_if[1];
    /* a tape begun in a branch that touches two values one tensor can be
     * (stage/trace_alias.c): the if runs at trace time, its branch's tapes
     * seeing the tensors of this call */
    if (trace_alias_branches(T, r[0], r[1])) {
        /* (on a condition it cannot read at trace time, or inside a branch
         * traced without values, whose if runs at trace time in turn: the
         * trace serves this call only, and later calls run eagerly) */
        if (T->symbolic || trace_value_varies(I, cond.u.t)) trace_alias_one_shot(T);
        FAIL(n->loc, "a tape begun in a branch of this if uses a value that an earlier if or loop can hand "
             "on unchanged together with that value itself");
    }
    if (tapes_meet_if(T, cond.u.t)) goto failed;
    if (outer_tape_meets_nesting(T, g, r[0], r[1])) {
        if (redo_as_before(I, T, redo, n->a->loc, 1 + tfe_tapes_active - T->tapes_at_begin, &rc)) goto done;
        /* (else it runs at trace time; on a condition that varies from
         * call to call, the trace then serves this call only, and later
         * calls under a tape outside run eagerly) */
        if (trace_value_varies(I, cond.u.t)) trace_alias_one_shot_under_tapes(T);
        goto failed;
    }
    rewind_random(mark); /* the node draws when it runs */
    {
        I->cur_loc = n->a->loc;
        GRef cref = trace_ref(T, cond.u.t);
        int id = graph_add(g, T->region, G_COND, 1, nout);
        GNode *cn = gnode(g, id);
        cn->loc = n->a->loc;
        cn->frames = T->last_frames;
        cn->regions[0] = r[0];
        cn->regions[1] = r[1];
        cn->in[0] = cref;
        for (int k = 0; k < nout; k++) {
            tfe_tensor *t0 = k < npairs ? pairs[k].t[0] : rl[0].t[k - npairs];
            tfe_tensor *t1 = k < npairs ? pairs[k].t[1] : rl[1].t[k - npairs];
            tfe_tensor *t = t0;
            tfe_meta *m = &cn->meta[k];
            m->dtype = t->dtype;
            m->weak = t0->weak && t1->weak;
            m->rank = t->rank;
            for (int d = 0; d < t->rank; d++) m->shape[d] = t0->shape[d] == t1->shape[d] ? t0->shape[d] : -1;
        }
        tfe_tensor **outs = xcalloc((size_t)(nout ? nout : 1), sizeof *outs);
        int *pslots = xcalloc((size_t)npairs + 1, sizeof *pslots);
        for (int k = 0; k < npairs; k++) pslots[k] = pairs[k].slot;
        rc = bind_outputs(T, id, env, pslots, npairs, outs);
        free(pslots);
        if (rc) {
            free(outs);
            goto done;
        }
        /* a binding both branches leave a number (arithmetic on numbers)
         * is one after the if, as eagerly (trace.h, trace_eager_number) */
        Value as;
        for (int k = 0; k < npairs; k++)
            if (trace_eager_number(after[0][pairs[k].slot], &as) && trace_eager_number(after[1][pairs[k].slot], &as))
                trace_mark_number(env->slots[pairs[k].slot]);
        /* ... and one a branch leaves a number and the other a tensor is
         * what the branch that ran left, at every call (TNote.run_kind) */
        for (int k = 0; k < nout; k++) {
            signed char kb[2];
            const TNote *sb[2];
            for (int b = 0; b < 2; b++) {
                int kk = 0;
                kb[b] = value_kind(k < npairs ? after[b][pairs[k].slot] : leaf_value(ret[b], &kk, k - npairs), &sb[b]);
            }
            note_run_kind(outs[k], kb[0], kb[1], sb[0], sb[1]);
        }
        if (x[0] == XS_RETURN) {
            int kk = 0;
            value_decref(I->retval);
            I->retval = sig_rebuild(ret[0], outs + npairs, &kk, false, T->id);
            if (trace_eager_number(ret[0], &as) && trace_eager_number(ret[1], &as)) trace_mark_number(I->retval);
            for (int k = npairs; k < nout; k++) tensor_decref(outs[k]);
            *xs = XS_RETURN;
        } else {
            *xs = XS_OK;
        }
        free(outs);
    }
    goto done;

failed:
    T->if_regions[0] = saved_if[0];
    T->if_regions[1] = saved_if[1];
    rc = attempt_failed(I, T, env, before, saved_region, saved_sym, saved_effect, mark, n->a->loc,
                        "this if on a traced tensor");
    if (rc == 1 && err_branch >= 0 && cond.kind == V_TENSOR && trace_value_varies(I, cond.u.t)) {
        rc = run_failed_branch(I, T, n, env, cond, err_branch, xs);
        if (rc != 1) goto done; /* (0: the branch ran, the trace ended) */
    }
    if (rc == 1) {
        bool t = false;
        rc = value_truth(I, cond, n->a->loc, &t);
        trace_fallback_done(I);
        if (!rc) {
            Node *body = t ? n->b : n->c;
            *xs = body ? interp_exec_branch(I, body, env) : XS_OK;
            if (*xs == XS_ERR) rc = -1;
        }
    }
done:
    for (int k = 0; k < npairs; k++) {
        tensor_decref(pairs[k].t[0]);
        tensor_decref(pairs[k].t[1]);
    }
    free(pairs);
    for (int b = 0; b < 2; b++) {
        value_decref(ret[b]);
        drop(after[b], ns);
        leaves_free(&rl[b]);
        sig_free(&rs[b]);
    }
    drop(before, ns);
    free(local);
    free(assigned);
    if (!saved_sym) trace_writes_drop(T, mark.writes); /* (nothing above undoes them) */
    return rc;
}

/* --- while -------------------------------------------------------------------------------- */

/* What differs between a while loop and a for over a traced range. */
typedef struct LoopHooks {
    Node *body;          /* the loop's block */
    Node *cond;          /* while: the condition */
    int counter;         /* for: the loop variable's slot (carried first), else -1 */
    tfe_tensor *stop;    /* for: the bound (a traced tensor or a constant) */
    tfe_tensor *step;    /* for: the step (a constant) */
    bool down;           /* for: a negative step (i > stop) */
} LoopHooks;

static int loop_core(Interp *I, Node *n, Env *env, const LoopHooks *h, int *xs);
static int loop_attempt(Interp *I, Node *n, Env *env, const LoopHooks *h, int *xs, Node **extra, signed char *pk);

/* How loop (condition region rc, body rb) reads var, which its body assigns
 * at its top: TL_* (trace.h), 0 when it does not both read and assign it.
 * Eager code reads a new tensor of var at each iteration, whose gradient,
 * to a tape made in this trace, is zeros when nothing reached it (the
 * loop's backward is refused where something does: stage/grad.c), and
 * those zeros are added to the variable's gradient (-0.0 + 0.0 is 0.0). */
static int loop_read_kinds(const Graph *g, int rc, int rb, const Obj *var)
{
    int kinds = 0, nassign = 0;
    bool pending = false, unknown = false;
    const GRegion *reg = &g->regions[rb];
    for (int i = 0; i < reg->n; i++) {
        const GNode *x = &g->nodes[reg->nodes[i]];
        if (x->kind == G_VAR_READ && x->host->obj.u.o == var && !x->outer_out) {
            if (nassign) pending = true;
            else kinds |= TL_FIRST;
        } else if (calls_method_of(x, var)) {
            if (pending) kinds |= TL_MID;
            pending = false;
            nassign++;
        } else if (x->kind == G_HOST) {
            unknown |= !trace_host_harmless(x, var);
        } else if (x->kind == G_COND || x->kind == G_WHILE) {
            unknown |= region_reads_var(g, x->regions[0], var) || region_reads_var(g, x->regions[1], var) ||
                       region_assigns_var(g, x->regions[0], var) || region_assigns_var(g, x->regions[1], var);
        }
    }
    if (pending) kinds |= TL_END;
    if (region_reads_var(g, rc, var)) kinds |= TL_COND;
    if (!kinds || (!nassign && !unknown)) return 0;
    return unknown ? kinds | TL_UNKNOWN : kinds;
}

/* Marks in taint (by node of g) what in region r depends on a read of var
 * or on a node already marked (a nested cond or loop as a whole); returns
 * whether anything new was marked. */
static bool taint_var_reads(const Graph *g, int r, const Obj *var, bool *taint)
{
    bool grew = false;
    const GRegion *reg = &g->regions[r];
    for (int i = 0; i < reg->n; i++) {
        int id = reg->nodes[i];
        const GNode *x = &g->nodes[id];
        bool t = x->kind == G_VAR_READ && !x->outer_out && x->host->obj.u.o == var;
        for (int k = 0; k < x->nin && !t; k++) t = taint[x->in[k].node];
        if (x->kind == G_COND || x->kind == G_WHILE)
            for (int k = 0; k < 2; k++) t |= taint_var_reads(g, x->regions[k], var, taint);
        if (t && !taint[id]) taint[id] = grew = true;
    }
    return grew;
}

/* Does a read of var in loop (rc, rb) reach a value its body carries (in a
 * later iteration too)? Then a gradient with respect to var through the
 * loop would need its every tensor (TL_REACH); its condition has none. */
static bool loop_var_reaches(const Graph *g, int rc, int rb, const Obj *var, bool *outs)
{
    const GRegion *c = &g->regions[rc], *b = &g->regions[rb];
    bool *taint = xcalloc((size_t)g->n + 1, 1), hit = false;
    for (bool grew = true; grew;) {
        grew = taint_var_reads(g, rc, var, taint);
        grew |= taint_var_reads(g, rb, var, taint);
        for (int k = 0; k < b->nouts && k < c->nparams; k++)
            if (taint[b->outs[k].node] && !taint[c->params[k]]) taint[c->params[k]] = grew = true;
    }
    for (int k = 0; k < b->nouts; k++) {
        if (outs) outs[k] = taint[b->outs[k].node];
        hit |= taint[b->outs[k].node];
    }
    free(taint);
    return hit;
}

/* The variables loop (rc, rb) reads and assigns, with their TL_* kinds
 * (new arrays; returns how many). */
static int loop_fresh_vars(const Graph *g, int rc, int rb, Value **vars, int **kinds)
{
    int n = 0;
    *vars = NULL;
    *kinds = NULL;
    for (int k = 0; k < 2; k++) {
        const GRegion *reg = &g->regions[k ? rb : rc];
        for (int i = 0; i < reg->n; i++) {
            const GNode *x = &g->nodes[reg->nodes[i]];
            if (x->kind != G_VAR_READ || x->outer_out || !value_is_variable(x->host->obj)) continue;
            bool seen = false;
            for (int j = 0; j < n && !seen; j++) seen = (*vars)[j].u.o == x->host->obj.u.o;
            int kd = seen ? 0 : loop_read_kinds(g, rc, rb, x->host->obj.u.o);
            if (!kd) continue;
            if (loop_var_reaches(g, rc, rb, x->host->obj.u.o, NULL)) kd |= TL_REACH;
            *vars = xrealloc(*vars, sizeof **vars * (size_t)(n + 1));
            *kinds = xrealloc(*kinds, sizeof **kinds * (size_t)(n + 1));
            (*vars)[n] = x->host->obj;
            (*kinds)[n++] = kd;
        }
    }
    return n;
}

int trace_loop(Interp *I, Node *n, Env *env, Value cond, int *xs)
{
    (void)cond;
    LoopHooks h = {.body = n->b, .cond = n->a, .counter = -1};
    return loop_core(I, n, env, &h, xs);
}

/* What a loop's attempts found a carried value's kind to be (loop_attempt). */
enum { PK_BOXED = 1, PK_VARIES = 2 };

/* Does the kind of the value noted nt (TNote.run_kind) depend on a
 * carried value's that starts as a number and becomes a tensor (TK_PARAM)? */
static bool reaches_param_kind(const TNote *nt, int depth)
{
    if (!nt || !nt->run_kind[0] || depth > 64) return false;
    if (nt->run_kind[0] == TK_PARAM && nt->run_kind[1] == TK_PARAM && !nt->sub[1]) return true;
    return reaches_param_kind(nt->sub[0], depth + 1) || reaches_param_kind(nt->sub[1], depth + 1);
}

/* The loop carries the bindings its statements assign; one that only a
 * function it calls assigns (a closure's `c += 1`) is found when its body has
 * been traced, and the loop is traced again carrying that one too. */
static int loop_core(Interp *I, Node *n, Env *env, const LoopHooks *h, int *xs)
{
    Node **extra = xcalloc((size_t)env->nslots + 1, sizeof *extra); /* by slot: where a called function assigns it */
    signed char *pk = xcalloc((size_t)env->nslots + 1, 1); /* by slot: PK_*, what the body's
                                                              attempts found its kind to be */
    int rc;
    while ((rc = loop_attempt(I, n, env, h, xs, extra, pk)) == 3) {}
    free(extra);
    free(pk);
    return rc;
}

static int loop_attempt(Interp *I, Node *n, Env *env, const LoopHooks *h, int *xs, Node **extra, signed char *pk)
{
    Tracer *T = I->tracer;
    Graph *g = T->g;
    int ns = env->nslots;
    T->loop_body_err = false;
    Value *before = snapshot(env);
    int saved_region = T->region, saved_effect = T->last_effect;
    bool saved_sym = T->symbolic;
    bool *local = xcalloc((size_t)ns + 1, 1), *assigned = xcalloc((size_t)ns + 1, 1);
    int *carried = xcalloc((size_t)ns + 1, sizeof *carried), nc = 0;
    tfe_tensor **init = xcalloc((size_t)ns + 1, sizeof *init);
    bool *number = xcalloc((size_t)ns + 1, 1), numbers = true;
    /* per carried value: the kind it starts with, the kind the body leaves
     * (TK_*: note_run_kind) */
    signed char *startk = xcalloc((size_t)ns + 1, 1), *bodyk = xcalloc((size_t)ns + 1, 1);
    int *param_of = xcalloc((size_t)ns + 1, sizeof *param_of); /* TK_PARAM: the carried value it ends on */
    const TNote **starts = xcalloc((size_t)ns + 1, sizeof *starts), **bodys = xcalloc((size_t)ns + 1, sizeof *bodys);
    tfe_tensor *counter_param = NULL;
    Loc loop_loc = h->cond ? h->cond->loc : n->b->loc;
    Mark mark = mark_of(T);
    RedoHow redo = redo_how(T);
    const char *what = h->cond ? "while loop" : "for loop";
    int rc = 0;
    Value *cvars = NULL; /* the variables it reads and assigns, for a tape made in this trace */
    int *ckinds = NULL, ncv = 0, ntot = 0;

    scan_block(h->body, local, assigned, ns);
    for (int s = 0; s < ns; s++) assigned[s] |= extra[s] != NULL;
    if (h->counter >= 0) { /* the loop variable counts: carried first */
        init[nc] = as_tensor(before[h->counter]);
        carried[nc++] = h->counter;
    }
    for (int s = 0; s < ns; s++) {
        if (!assigned[s] || local[s] || s == h->counter) continue;
        Value v = before[s];
        Node *where = find_assign(h->body, s);
        if (!where) where = extra[s];
        if (!is_leafy(v))
            FAIL(where ? where->loc : n->loc, "'%s' is %s changed by a %s on a traced tensor; "
                 "staged loops can only change tensors and numbers", where ? where->str : "a binding",
                 kind_with_article(v), what);
        if (is_lit(v))
            FAIL(where ? where->loc : n->loc, "'%s' is a float literal changed by a %s on a traced tensor "
                 "(a tensor would round it to float32)", where ? where->str : "a binding", what);
        init[nc] = as_tensor(v);
        carried[nc++] = s;
    }
    int rcond = graph_add_region(g, T->region);
    int rbody = graph_add_region(g, rcond);
    GRegion *reg = &g->regions[rcond];
    reg->params = xcalloc((size_t)(nc ? nc : 1), sizeof *reg->params);
    reg->nparams = nc;
    T->symbolic = true;
    for (int k = 0; k < nc; k++) {
        int p = graph_add(g, rcond, G_PARAM, 0, 1);
        GNode *pn = gnode(g, p);
        pn->loc = n->loc;
        pn->meta[0] = (tfe_meta){.dtype = init[k]->dtype, .weak = init[k]->weak, .rank = init[k]->rank};
        mem_copy(pn->meta[0].shape, init[k]->shape, sizeof(int64_t) * (size_t)init[k]->rank);
        g->regions[rcond].params[k] = p;
        tfe_tensor *sp = tensor_symbolic(init[k]->dtype, init[k]->weak, init[k]->rank, init[k]->shape);
        trace_note(T, sp, (GRef){p, 0});
        if (k == 0 && h->counter >= 0) counter_param = sp;
        Value as;
        startk[k] = k == 0 && h->counter >= 0 ? TK_NONE : value_kind(before[carried[k]], &starts[k]);
        if (!(k == 0 && h->counter >= 0) && pk[carried[k]]) {
            /* a kind the last attempt found: a tensor at every iteration
             * (PK_BOXED), or a number or a tensor by the iteration, which
             * a rule decides (TK_PARAM: checked below) */
            TNote *spn = sp->node;
            if (pk[carried[k]] == PK_BOXED) spn->boxed = true;
            else spn->run_kind[0] = spn->run_kind[1] = TK_PARAM;
        } else if ((k == 0 && h->counter >= 0) || trace_eager_number(before[carried[k]], &as)) {
            /* a number it starts with (a loop variable counts in numbers):
             * the body sees one, as eagerly (trace.h) */
            Value spv = {.kind = V_TENSOR};
            spv.u.t = sp;
            trace_mark_number(spv);
            number[k] = true;
        }
        Value old = env->slots[carried[k]];
        env->slots[carried[k]] = v_tensor_take(sp);
        value_decref(old);
    }
    /* the condition, on the carried values */
    T->region = rcond;
    T->last_effect = -1;
    Value cv;
    if (h->cond) {
        if (trace_cond_value(I, h->cond, env, &cv) || T->failed) goto failed;
        /* (a function the condition calls assigns a binding: the value the
         * loop ends with would miss the last test's assignment) */
        const struct SymWrite *cw = NULL;
        for (int i = mark.writes; !cw && i < T->nwrites; i++)
            if (T->writes[i].env->born < mark.born) cw = &T->writes[i];
        if (cw) {
            value_decref(cv);
            FAIL(cw->at->loc, "'%s' is assigned by a function that the condition of this while loop on a traced "
                 "tensor calls; staged code cannot carry it: assign it in the loop's body instead", cw->at->str);
        }
    } else {
        I->cur_loc = loop_loc;
        tfe_tensor *c = tfe_binary(h->down ? OP_GT : OP_LT, counter_param, h->stop);
        if (!c || T->failed) goto failed;
        cv = v_tensor_take(c);
    }
    if (!is_leafy(cv)) {
        value_decref(cv);
        FAIL(loop_loc, "the condition of this while loop is not a tensor or a bool");
    }
    {
        tfe_tensor *ct = as_tensor(cv);
        value_decref(cv);
        GRef cref = trace_ref(T, ct);
        tensor_decref(ct);
        reg = &g->regions[rcond];
        reg->outs = xmalloc(sizeof *reg->outs);
        reg->outs[0] = cref;
        reg->nouts = 1;
    }
    /* the body */
    T->region = rbody;
    T->last_effect = -1;
    int wbody = T->nwrites;
    T->fail_raised = false;
    int xb = interp_exec_branch(I, h->body, env);
    T->loop_body_err = h->cond && xb == XS_ERR && !T->failed && !T->fail_raised;
    if (xb == XS_ERR || T->failed) goto failed;
    {
        const struct SymWrite *fw = foreign_write(T, wbody, env, mark.born);
        if (fw)
            FAIL(fw->at->loc, "'%s' is a binding of an enclosing function, assigned in this %s on a traced "
                 "tensor inside a function; a traced loop can change only the bindings of the function it "
                 "is in" FOREIGN_HOW, fw->at->str, what);
        bool more = false; /* bindings of this function that only a function it calls assigns */
        for (int i = wbody; i < T->nwrites; i++) {
            int s = T->writes[i].slot;
            if (T->writes[i].env == env && s < ns && !local[s] && !assigned[s] && s != h->counter && !extra[s]) {
                extra[s] = T->writes[i].at;
                more = true;
            }
        }
        if (more) {
            goto retrace;
        }
    }
    if (xb != XS_OK)
        FAIL(n->loc, "'%s' inside a %s on a traced tensor is not supported",
             xb == XS_BREAK ? "break" : xb == XS_CONTINUE ? "continue" : "return", what);
    if (h->counter >= 0) { /* the next value of the loop variable, whatever the body did with it */
        I->cur_loc = loop_loc;
        tfe_tensor *next = tfe_binary(OP_ADD, counter_param, h->step);
        if (!next || T->failed) goto failed;
        Value old = env->slots[h->counter];
        env->slots[h->counter] = v_tensor_take(next);
        value_decref(old);
    }
    g->regions[rbody].outs = xcalloc((size_t)(nc ? nc : 1), sizeof(GRef));
    g->regions[rbody].nouts = nc;
    for (int k = 0; k < nc; k++) {
        Value v = env->slots[carried[k]];
        Node *where = find_assign(h->body, carried[k]);
        if (!where) where = noted_assign(T, wbody, env, carried[k]);
        const char *name = where ? where->str : "a binding";
        if (!is_leafy(v))
            FAIL(where ? where->loc : n->loc, "'%s' becomes %s in a %s on a traced tensor", name, kind_with_article(v), what);
        if (is_lit(v))
            FAIL(where ? where->loc : n->loc, "'%s' becomes a float literal in a %s on a traced tensor "
                 "(a tensor would round it to float32)", name, what);
        Value as;
        /* a number that the body leaves a tensor: eager code's kind after
         * the loop depends on its count, and so does what the body makes
         * of it; the body is traced again with it no number (PK_VARIES) */
        if (number[k] && !(k == 0 && h->counter >= 0) && !trace_eager_number(v, &as)) {
            numbers = false;
            pk[carried[k]] = PK_VARIES;
        }
        /* arithmetic on such a value (as the loop's result, or through an
         * if in the body) is a number or an op's result by the iteration,
         * which no graph run tells: the loop runs at trace time */
        if (!(v.kind == V_TENSOR && v.u.t->node &&
              gnode(g, ((const TNote *)v.u.t->node)->ref.node)->kind == G_PARAM) &&
            v.kind == V_TENSOR && reaches_param_kind(v.u.t->node, 0))
            FAIL(where ? where->loc : n->loc, "'%s' is computed in this %s on a traced tensor from a value "
                 "it carries that starts as a number and becomes a tensor, so eager code's result is a "
                 "number or a tensor by the iteration, which a graph run does not keep; start that value "
                 "as a tensor (tensor(...)) or compute this after the loop", name, what);
        /* (a body that ends it on a carried value: its kind where an
         * iteration ends is that value's where the iteration began, so at
         * the second that value's after the first: TK_PARAM, param_of) */
        bodyk[k] = value_kind(v, &bodys[k]);
        param_of[k] = -1;
        if (v.kind == V_TENSOR && v.u.t->node && gnode(g, ((const TNote *)v.u.t->node)->ref.node)->kind == G_PARAM) {
            int pnode = ((const TNote *)v.u.t->node)->ref.node;
            bodyk[k] = TK_NONE;
            for (int j = 0; j < nc; j++)
                if (g->regions[rcond].params[j] == pnode) param_of[k] = j;
            if (param_of[k] >= 0 && v.u.t->rank == 0 && v.u.t->dtype != TFE_BOOL) bodyk[k] = TK_PARAM;
        }
        tfe_tensor *t = as_tensor(v);
        bool same = t->dtype == init[k]->dtype && t->rank == init[k]->rank &&
                    !mem_cmp(t->shape, init[k]->shape, sizeof(int64_t) * (size_t)t->rank);
        /* A weak number (a literal, `let s = 0`) that the body makes a
         * strong tensor of another dtype (int32, float64), or a strong int
         * (int64: it promotes with int32 as int64 where the weak one gives
         * int32): after zero iterations eager code keeps the number, after
         * one the tensor, and a graph's result has one dtype and weakness.
         * So the loop cannot be a node (it runs at trace time, on this
         * call's condition); the loop variable of a for is not seen after
         * it. (The graph used to cast the number to the body's dtype: a
         * zero-trip call gave int32 for eager's int64, float64 products
         * for eager's float32.) */
        if (t->weak == false && init[k]->weak && !(k == 0 && h->counter >= 0) && t->rank == init[k]->rank &&
            !mem_cmp(t->shape, init[k]->shape, sizeof(int64_t) * (size_t)t->rank) &&
            dtype_is_float(t->dtype) == dtype_is_float(init[k]->dtype) &&
            (t->dtype != init[k]->dtype || !dtype_is_float(t->dtype))) {
            tfe_dtype td = t->dtype;
            char v0[64] = "0"; /* the number it starts with, as the hint writes it */
            if (init[k]->rank == 0 && init[k]->storage) {
                double d = tensor_load_f64(init[k], 0);
                snprintf(v0, sizeof v0, dtype_is_float(init[k]->dtype) ? "%.9g" : "%.0f", d);
                if (dtype_is_float(init[k]->dtype) && !strpbrk(v0, ".eni")) strcat(v0, ".0");
            }
            tensor_decref(t);
            FAIL(where ? where->loc : n->loc, "'%s' starts as a number (%s, weak) and becomes %s %s tensor in this "
                 "%s on a traced tensor: after zero iterations eager code keeps the number, which a graph "
                 "cannot give; start it as a tensor (let %s = tensor(%s, dtype=%s))", name,
                 dtype_name(init[k]->dtype), dtype_name(td)[0] == 'i' ? "an" : "a", dtype_name(td), what, name,
                 v0, dtype_name(td));
        }
        if (!same && k == 0 && h->counter >= 0 && t->weak == false && init[k]->weak && t->rank == init[k]->rank &&
            dtype_is_float(t->dtype) == dtype_is_float(init[k]->dtype))
            same = true; /* the loop variable (a number) takes its step's dtype */
        if (!same) {
            char s1[200], s2[200];
            tfe_tensor tmp = *t;
            tensor_decref(t);
            FAIL(where ? where->loc : n->loc, "'%s' changes from %s %s to %s %s in one iteration of this %s on a "
                 "traced tensor; staged loops must keep the dtype and shape of what they change", name,
                 dtype_name(init[k]->dtype), shape_str(init[k]->rank, init[k]->shape, s1),
                 dtype_name(tmp.dtype), shape_str(tmp.rank, tmp.shape, s2), what);
        }
        if (t->dtype != init[k]->dtype) { /* the weak initial value takes the body's dtype */
            tfe_attrs at;
            tfe_attrs_init(&at);
            at.dtype = t->dtype;
            T->region = saved_region;
            T->symbolic = saved_sym;
            tfe_tensor *c = tfe_call1(OP_CAST, 1, &init[k], &at);
            T->symbolic = true;
            T->region = rbody;
            if (!c) { tensor_decref(t); goto failed; }
            tensor_decref(init[k]);
            init[k] = c;
            GNode *pn = gnode(g, g->regions[rcond].params[k]);
            pn->meta[0].dtype = t->dtype;
            pn->meta[0].weak = false;
        }
        GRef ref = trace_ref(T, t);
        g->regions[rbody].outs[k] = ref;
        tensor_decref(t);
    }
    if (!numbers) { /* (a number it starts with the body leaves a tensor: again, with it no number) */
        goto retrace;
    }
    /* A value the body ends on another carried value (`b = a`): its kind
     * after n iterations is that value's after n - 1 (the start's after
     * one). Where every kind along the chain is one, that is its kind;
     * otherwise the way the run went tells (GRun.ran counts a loop's
     * iterations), unless the chain reaches a value whose kind an if or
     * loop inside the body decides (the run keeps the way of the last
     * iteration only), or a cycle whose length does not divide 60 (the
     * count kept past 120 is modulo 60): then the loop runs at trace time */
    for (int k = 0; k < nc; k++) {
        if (bodyk[k] != TK_PARAM) continue;
        signed char kind0 = startk[k];
        bool same = kind0 != TK_FOLLOW && kind0 != TK_NONE, follow = false;
        bool *seen = xcalloc((size_t)nc + 1, 1);
        int j = param_of[k], len = 0;
        while (j >= 0 && !seen[j]) {
            seen[j] = true;
            signed char sk = j == 0 && h->counter >= 0 ? TK_NUMBER : startk[j];
            if (sk != kind0) same = false;
            if (bodyk[j] == TK_PARAM) {
                j = param_of[j];
                continue;
            }
            signed char bk = j == 0 && h->counter >= 0 ? TK_NUMBER : bodyk[j];
            follow = bk == TK_FOLLOW;
            if (bk != kind0) same = false;
            j = -1;
        }
        if (j >= 0) /* (a cycle through j) */
            for (int c = param_of[j]; ++len <= nc + 1 && c != j; c = param_of[c]) {}
        free(seen);
        if (same) {
            bodyk[k] = kind0;
            continue;
        }
        Node *where = find_assign(h->body, carried[k]);
        if (follow)
            FAIL(where ? where->loc : n->loc, "'%s' ends each iteration of this %s on a traced tensor on a "
                 "value carried from the iteration before, whose kind there (a number or a tensor) an if or "
                 "loop inside the body decided, which a graph run does not keep for every iteration",
                 where ? where->str : "a binding", what);
        if (len > 6 || nc > 60)
            FAIL(where ? where->loc : n->loc, "'%s' ends each iteration of this %s on a traced tensor on a "
                 "value carried from the iteration before, in a chain of such values too long for a graph "
                 "run to tell its kind (a number or a tensor) by", where ? where->str : "a binding", what);
    }
    /* A 0-d value the body sees where an iteration begins is, there, what
     * the loop left it so far: a tensor at every iteration where it starts
     * as one and the body leaves one (its note says so: an if in the body
     * that ends on it gives it), otherwise by the iteration (TK_PARAM, on
     * which nothing may depend but a value handed on as it is). Where
     * that differs from what this attempt took, the body is traced again */
    {
        bool again = false;
        for (int k = 0; k < nc; k++) {
            if ((k == 0 && h->counter >= 0) || number[k] || pk[carried[k]] == PK_VARIES ||
                init[k]->rank != 0 || init[k]->dtype == TFE_BOOL)
                continue;
            signed char want = startk[k] == TK_BOXED && bodyk[k] == TK_BOXED ? PK_BOXED
                               : startk[k] == TK_DEFAULT && bodyk[k] == TK_DEFAULT ? 0 : PK_VARIES;
            if (want != pk[carried[k]]) {
                pk[carried[k]] = want;
                again = true;
            }
        }
        if (again) {
            goto retrace;
        }
    }
    /* Under a tape made in this trace, a loop that reads a variable and
     * assigns it reads a new tensor of it at every iteration (its gradient
     * zeros, added to the variable's): it counts its iterations, one more
     * carried value, for that tape's gradient (tapes_loop_count) */
    ntot = nc;
    if (!saved_sym && saved_region == 0 && tfe_tapes_active > T->tapes_at_begin)
        ncv = loop_fresh_vars(g, rcond, rbody, &cvars, &ckinds);
    if (ncv) {
        int p = graph_add(g, rcond, G_PARAM, 0, 1);
        GNode *pn = gnode(g, p);
        pn->loc = n->loc;
        pn->meta[0] = (tfe_meta){.dtype = TFE_INT64, .rank = 0};
        GRegion *rg = &g->regions[rcond];
        rg->params = xrealloc(rg->params, sizeof *rg->params * (size_t)(nc + 1));
        rg->params[nc] = p;
        rg->nparams = nc + 1;
        tfe_tensor *sp = tensor_symbolic(TFE_INT64, false, 0, NULL);
        trace_note(T, sp, (GRef){p, 0});
        tfe_tensor *one = tensor_from_f64(1.0, TFE_INT64);
        I->cur_loc = loop_loc;
        tfe_tensor *next = one ? tfe_binary(OP_ADD, sp, one) : NULL;
        if (one) tensor_decref(one);
        tensor_decref(sp); /* the note keeps it */
        init[nc] = tensor_from_f64(0.0, TFE_INT64);
        if (!next || !init[nc] || T->failed) {
            if (next) tensor_decref(next);
            ntot = nc + 1; /* (init[nc] is released below) */
            goto failed;
        }
        init[nc]->weak = false;
        rg = &g->regions[rbody];
        rg->outs = xrealloc(rg->outs, sizeof *rg->outs * (size_t)(nc + 1));
        rg->outs[nc] = trace_ref(T, next);
        rg->nouts = nc + 1;
        tensor_decref(next);
        ntot = nc + 1;
    }
    T->region = saved_region;
    T->symbolic = saved_sym;
    T->last_effect = saved_effect;
    restore(env, before);
    if (tape_meets_draw(T, g, rcond) || tape_meets_draw(T, g, rbody))
        FAIL(loop_loc, "a tape cannot differentiate a random draw inside a staged loop");
    /* (so the call runs eagerly from its start, as do later ones under as
     * many tapes, where nothing was done in it yet or its effects can be
     * made again; else the loop runs at trace time, the trace reading its
     * condition's values, section 7 -- where they vary from call to call,
     * which a trace cannot depend on, an error) */
    /* a tape begun in the body that touches two values one tensor can be
     * (a carried name the body ends on another value, a0 = y, read with
     * that value): eager code's tensors change identity from one iteration
     * to the next, which a graph cannot follow (stage/trace_alias.c) */
    if (trace_alias_loop(T, rcond, rbody, ntot, init)) {
        /* (as for an if: a condition that reads a varying value, or a carried
         * one that starts from one) */
        bool vary = T->symbolic || region_varies(g, rcond);
        for (int k = 0; k < ntot && !vary; k++) vary = init[k] && trace_value_varies(I, init[k]);
        if (vary) trace_alias_one_shot(T);
        FAIL(loop_loc, "a tape begun in the loop's body uses a carried value together with a value the body "
             "ends it on, which eager code holds as one tensor from the next iteration on");
    }
    bool varies;
    if (tapes_meet_loop(T, g, rcond, rbody, &varies)) {
        if (redo_call_eagerly(I, T, loop_loc, 2, &rc)) goto done;
        if (!varies) FAIL(loop_loc, "a loop met while two tapes record runs at trace time");
        FAIL(loop_loc, "this loop on a value that varies from call to call (a variable, a draw, a @host call) "
             "is met while two tapes or more record the call (a second order or higher), after an effect of "
             "the call that cannot be made again (a @host call that changes an outside binding or gets a "
             "list, an assign, ...): the staged gradient would not be eager's bit for bit; make the effects "
             "after this loop, or run the function eagerly (run_eagerly(true))");
    }
    if (outer_tape_meets_nesting(T, g, rcond, rbody)) {
        if (redo_as_before(I, T, redo, loop_loc, 1 + tfe_tapes_active - T->tapes_at_begin, &rc)) goto done;
        /* (one on a value that varies from call to call: as for an if) */
        bool vary = region_varies(g, rcond) || region_varies(g, rbody);
        for (int k = 0; k < ntot && !vary; k++) vary = init[k] && trace_value_varies(I, init[k]);
        if (vary) trace_alias_one_shot_under_tapes(T);
        FAIL(loop_loc, "a loop holding an if or loop met while a tape outside records runs at trace time");
    }
    rewind_random(mark); /* the node draws when it runs */
    {
        I->cur_loc = loop_loc;
        GRef *refs = xcalloc((size_t)ntot + 1, sizeof *refs);
        for (int k = 0; k < ntot; k++) refs[k] = trace_ref(T, init[k]); /* constants first */
        int id = graph_add(g, T->region, G_WHILE, ntot, ntot);
        GNode *wn = gnode(g, id);
        wn->loc = loop_loc;
        wn->frames = T->last_frames;
        wn->regions[0] = rcond;
        wn->regions[1] = rbody;
        mem_copy(wn->in, refs, sizeof *refs * (size_t)ntot);
        free(refs);
        for (int k = 0; k < ntot; k++) wn->meta[k] = gnode(g, g->regions[rcond].params[k])->meta[0];
        tfe_tensor **outs = xcalloc((size_t)(ntot ? ntot : 1), sizeof *outs);
        /* (its run notes only the reads of the values the variables
         * start with: tapes_loop_count covers the others) */
        struct LoopFresh *saved_fresh = T->loop_fresh;
        int saved_nfresh = T->nloop_fresh;
        if (ncv) {
            T->loop_fresh = xcalloc((size_t)ncv, sizeof *T->loop_fresh);
            for (int k = 0; k < ncv; k++) {
                T->loop_fresh[k] = (struct LoopFresh){cvars[k].u.o, variable_peek(cvars[k]), ckinds[k]};
                tensor_incref(T->loop_fresh[k].start); /* (the run assigns the variable) */
            }
            T->nloop_fresh = ncv;
        }
        rc = bind_outputs(T, id, env, carried, nc, outs);
        for (int k = 0; k < ncv; k++) {
            tensor_decref(T->loop_fresh[k].start);
            ckinds[k] = T->loop_fresh[k].kinds; /* (TL_APART: reread_loop_start) */
        }
        if (ncv) free(T->loop_fresh);
        T->loop_fresh = saved_fresh;
        T->nloop_fresh = saved_nfresh;
        if (rc) {
            free(outs);
            goto done;
        }
        for (int k = 0; k < nc && numbers; k++)
            if (number[k]) trace_mark_number(env->slots[carried[k]]);
        /* a number that the body leaves a tensor (or the other way round)
         * is what eager code holds after as many iterations as ran: the
         * kind it started with where none did (TNote.run_kind) */
        /* (a body that ends it on another carried value: that one's
         * output stands for it, TNote.run_kind) */
        for (int k = 0; k < nc; k++) {
            if (bodyk[k] != TK_PARAM) continue;
            int j = param_of[k];
            Value o = env->slots[carried[j]];
            if ((j == 0 && h->counter >= 0) || (number[j] && numbers)) bodyk[k] = TK_NUMBER;
            else if (o.kind == V_TENSOR && o.u.t->node) bodys[k] = o.u.t->node;
            else bodyk[k] = TK_NONE;
        }
        for (int k = 0; k < nc; k++)
            if (!(number[k] && numbers) && env->slots[carried[k]].kind == V_TENSOR)
                note_run_kind(env->slots[carried[k]].u.t, startk[k], bodyk[k], starts[k], bodys[k]);
        /* ... and where that one's kind is the same either way, it has a
         * rule too, which the chain's resolves through */
        for (int k = 0; k < nc; k++) {
            if (bodyk[k] != TK_PARAM) continue;
            int j = param_of[k];
            TNote *tn = (TNote *)bodys[k];
            if (!tn->run_kind[0] && !tn->number && startk[j] && bodyk[j]) {
                tn->run_kind[0] = startk[j];
                tn->run_kind[1] = bodyk[j];
                tn->sub[0] = starts[j];
                tn->sub[1] = bodys[j];
            }
        }
        for (int k = 0; k < ncv; k++) {
            /* (the values it carries that a read of the variable reaches) */
            bool *reach = xcalloc((size_t)ntot + 1, 1);
            if (ckinds[k] & TL_REACH) loop_var_reaches(g, rcond, rbody, cvars[k].u.o, reach);
            tapes_loop_count(T->id, cvars[k], ckinds[k], id, outs[nc], reach, ntot);
            free(reach);
        }
        if (ntot > nc) tensor_decref(outs[nc]);
        free(outs);
        *xs = XS_OK;
    }
    goto done;

retrace: /* trace the loop again (rc 3), with what this attempt found */
    T->region = saved_region;
    T->symbolic = saved_sym;
    T->last_effect = saved_effect;
    trace_writes_undo(T, mark.writes);
    restore(env, before);
    roll_back(T, mark);
    rc = 3;
    goto done;

failed:
    rc = attempt_failed(I, T, env, before, saved_region, saved_sym, saved_effect, mark, loop_loc,
                        h->cond ? "this while loop on a traced tensor" : "this for loop over a traced range");
    if (rc == 1) rc = 2; /* the caller runs the loop eagerly */
done:
    for (int k = 0; k < (ntot > nc ? ntot : nc); k++)
        if (init[k]) tensor_decref(init[k]);
    free(init);
    free(number);
    free(startk);
    free(bodyk);
    free(param_of);
    free(starts);
    free(bodys);
    free(carried);
    free(cvars);
    free(ckinds);
    drop(before, ns);
    free(local);
    free(assigned);
    if (!saved_sym && rc != 3) trace_writes_drop(T, mark.writes); /* (nothing above undoes them) */
    return rc;
}

/* for i in range(start, stop, step) with a traced bound: a while loop whose
 * first carried value is i. args: the range's 1 to 3 arguments. */
int trace_for_range(Interp *I, Node *n, Env *env, int nargs, const Value *args, int *xs)
{
    Tracer *T = I->tracer;
    Value start = nargs >= 2 ? args[0] : v_int(0), stop = nargs >= 2 ? args[1] : args[0];
    Value step = nargs == 3 ? args[2] : v_int(1);
    /* the step's sign decides the condition: it must be known now */
    if (n->a->kind != N_PNAME || n->a->depth != 0 || step.kind != V_SCALAR || !dtype_is_int((tfe_dtype)step.dtype) ||
        step.u.i == 0)
        return 2;
    for (int i = 0; i < nargs; i++) {
        tfe_dtype dt = args[i].kind == V_SCALAR ? (tfe_dtype)args[i].dtype : args[i].kind == V_TENSOR ? args[i].u.t->dtype : TFE_BOOL;
        if (!dtype_is_int(dt) || (args[i].kind == V_TENSOR && args[i].u.t->rank != 0)) return 2;
    }
    (void)T;
    LoopHooks h = {.body = n->c, .counter = n->a->slot, .down = step.u.i < 0};
    /* eager code's loop variable is a strong int64 whatever the bounds
     * (a literal start is weak, an int32 one int32): so is the graph's,
     * or `b = b + i` stayed a weak number in it (int32 with an int32
     * tensor where eager code gives int64) */
    if (start.kind == V_SCALAR) {
        start = v_int(start.u.i);
    } else if (start.kind == V_TENSOR && start.u.t->dtype != TFE_INT64) {
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.dtype = TFE_INT64;
        tfe_tensor *c = tfe_call1(OP_CAST, 1, &start.u.t, &at);
        if (!c) return -1;
        start = v_tensor_take(c);
    } else {
        value_incref(start);
    }
    Value old = env->slots[h.counter];
    env->slots[h.counter] = start;
    value_decref(old);
    h.stop = as_tensor(stop);
    h.step = as_tensor(step);
    int rc = loop_core(I, n, env, &h, xs);
    tensor_decref(h.stop);
    tensor_decref(h.step);
    return rc;
}

/* --- gradients with respect to a name a traced cond rebinds ---------------------------- */

/* Read by nothing on the tape but the cond or loop that hands it on, and
 * not handed on by a cond or loop this tape recorded: its gradient is the
 * output's then. */
static bool only_handed_on(Tracer *T, const tfe_tape *tape, const tfe_tensor *c, const tfe_tensor *target)
{
    if (tfe_tape_uses(tape, c, target) > 1) return false;
    const TNote *note = c->node;
    if (!note || note->ref.node >= T->g->n) return true;
    GKind k = T->g->nodes[note->ref.node].kind;
    return (k != G_COND && k != G_WHILE) || !tfe_tape_made(tape, c);
}

static bool inside_cond(const Graph *g, int node, int id)
{
    for (int r = g->nodes[node].region; r >= 0; r = g->regions[r].parent)
        if (r == g->nodes[id].regions[0] || r == g->nodes[id].regions[1]) return true;
    return false;
}

/* Whether eager code's tape would track value r of cond id's branch: it
 * records an op when one of its inputs is tracked. What cannot be told
 * here (variable reads, host calls, nested control flow) counts as
 * tracked, which is what the cond's tape entry says of every output. */
static bool branch_tracked(Tracer *T, const tfe_tape *tape, int id, GRef r, signed char *memo)
{
    const Graph *g = T->g;
    if (!inside_cond(g, r.node, id)) {
        int slot = g->nodes[r.node].vbase + r.out;
        tfe_tensor *t = slot < T->capconcrete ? T->concrete[slot] : NULL;
        return t && tfe_tape_is_watched(tape, t);
    }
    if (memo[r.node] >= 0) return memo[r.node];
    const GNode *n = &g->nodes[r.node];
    bool tr = true;
    if (n->kind == G_CONST) tr = false;
    else if (n->kind == G_OP && (tfe_ops[n->op].flags & F_NODIFF)) tr = false;
    else if (n->kind == G_OP) {
        tr = false;
        for (int k = 0; k < n->nin && !tr; k++) tr = branch_tracked(T, tape, id, n->in[k], memo);
    }
    memo[r.node] = tr;
    return tr;
}

/* A traced loop's output k: what the body made when it ran (branch 0), the
 * value it started from when it ran zero times (branch 1). 2 when whether
 * it ran cannot be told again (stage_loop_runs). */
static int loop_source(Tracer *T, const tfe_tape *tape, const tfe_tensor *target, const tfe_tensor *t, int id, int k,
                       CondSource *cs)
{
    const Graph *g = T->g;
    const GNode *n = &g->nodes[id];
    const GRegion *body = &g->regions[n->regions[1]];
    if (k >= n->nin || k >= body->nouts) return 0;
    int slot = g->nodes[n->in[k].node].vbase + n->in[k].out;
    tfe_tensor *c = slot < T->capconcrete ? T->concrete[slot] : NULL;
    bool watched = tfe_tape_watches(tape, t);
    signed char *memo = xmalloc((size_t)g->n + 1);
    memset(memo, -1, (size_t)g->n + 1);
    cs->kind[0] = watched || branch_tracked(T, tape, id, body->outs[k], memo) ? CS_COMPUTED : CS_UNTRACKED;
    free(memo);
    cs->pass[0] = cs->pass[1] = NULL;
    if (c && tfe_tape_is_watched(tape, c)) {
        cs->kind[1] = CS_PASS;
        cs->pass[1] = c;
    } else {
        cs->kind[1] = watched ? CS_COMPUTED : CS_UNTRACKED;
    }
    /* (then no backward of the loop is needed, which may not be supported) */
    if (cs->kind[1] == CS_PASS && only_handed_on(T, tape, c, target)) cs->kind[1] = CS_COMPUTED;
    if (cs->kind[0] == CS_COMPUTED && cs->kind[1] == CS_COMPUTED) return 0;
    tfe_tensor *runs = stage_loop_runs(T, id, false);
    if (!runs) return 2;
    cs->pred = runs;
    tensor_decref(runs); /* the trace's note keeps it */
    cs->taken = tensor_load_f64(runs, 0) != 0.0 ? 0 : 1;
    return 1;
}

int trace_cond_source(Tracer *T, const tfe_tape *tape, const tfe_tensor *target, const tfe_tensor *t, CondSource *cs)
{
    const TNote *note = t->node;
    if (!T || !note || note->ref.node >= T->g->n) return 0;
    const Graph *g = T->g;
    int id = note->ref.node, k = note->ref.out;
    const GNode *n = &g->nodes[id];
    if (n->kind == G_WHILE) return loop_source(T, tape, target, t, id, k, cs);
    if (n->kind != G_COND) return 0;
    int ps = g->nodes[n->in[0].node].vbase + n->in[0].out;
    cs->pred = ps < T->capconcrete ? T->concrete[ps] : NULL;
    if (!cs->pred || !cs->pred->storage) return 0;
    cs->taken = tensor_load_f64(cs->pred, 0) != 0.0 ? 0 : 1;
    signed char *memo = xmalloc((size_t)g->n + 1);
    for (int br = 0; br < 2; br++) {
        const GRegion *reg = &g->regions[n->regions[br]];
        cs->kind[br] = CS_COMPUTED;
        cs->pass[br] = NULL;
        if (k >= reg->nouts) continue; /* a read the cond hands on (export_reads) */
        GRef y = reg->outs[k];
        memset(memo, -1, (size_t)g->n + 1);
        if (!branch_tracked(T, tape, id, y, memo)) cs->kind[br] = CS_UNTRACKED;
        else if (!inside_cond(g, y.node, id)) {
            int slot = g->nodes[y.node].vbase + y.out;
            cs->kind[br] = CS_PASS;
            cs->pass[br] = T->concrete[slot];
            if (only_handed_on(T, tape, cs->pass[br], target)) cs->kind[br] = CS_COMPUTED;
        }
    }
    free(memo);
    /* watched itself after the cond: tracked whichever branch ran */
    for (int br = 0; br < 2; br++)
        if (cs->kind[br] == CS_UNTRACKED && tfe_tape_watches(tape, t)) cs->kind[br] = CS_COMPUTED;
    return 1;
}

/* --- whether a region runs (a tape's reads inside it) ---------------------------------- */

bool trace_branch_assigned(Tracer *T, Value var)
{
    if (!T->symbolic) return false;
    for (int r = T->region; r > 0; r = T->g->regions[r].parent)
        if (region_assigns_var(T->g, r, var.u.o)) return true;
    return false;
}

bool trace_made_in_region(const Tracer *T, const tfe_tensor *t)
{
    const TNote *n = t->node;
    return n && n->ref.node >= 0 && n->ref.node < T->g->n && T->g->nodes[n->ref.node].region == T->region;
}

/* A one-element predicate as a bool scalar, negated when neg (new ref). */
static tfe_tensor *truth(tfe_tensor *t, bool neg)
{
    tfe_tensor *b = NULL;
    if (t->dtype == TFE_BOOL && t->rank == 0) {
        tensor_incref(t);
        b = t;
    } else { /* taken as a bool: not zero (as an if takes it) */
        tfe_tensor *zero = tensor_from_f64(0.0, t->dtype), *ne = zero ? tfe_binary(OP_NE, t, zero) : NULL;
        if (zero) tensor_decref(zero);
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.nints = 0;
        b = ne ? tfe_call1(OP_RESHAPE, 1, &ne, &at) : NULL;
        if (ne) tensor_decref(ne);
    }
    if (!b || !neg) return b;
    tfe_tensor *nb = tfe_call1(OP_LOGICAL_NOT, 1, &b, NULL);
    tensor_decref(b);
    return nb;
}

/* The cond or while node that has region r and sits in its region's list
 * (a node of an attempt rolled back does not), or -1. A while's body is
 * inside its condition's region. */
static int region_owner(const Graph *g, int r)
{
    int p = g->regions[r].parent;
    for (int up = 0; up < 2 && p >= 0; up++, p = g->regions[p].parent) {
        const GRegion *reg = &g->regions[p];
        for (int i = 0; i < reg->n; i++) {
            const GNode *n = &g->nodes[reg->nodes[i]];
            if ((n->kind == G_COND || n->kind == G_WHILE) && (n->regions[0] == r || n->regions[1] == r))
                return reg->nodes[i];
        }
    }
    return -1;
}

int trace_region_runs(Tracer *T, int region, tfe_tensor **runs)
{
    *runs = NULL;
    const Graph *g = T->g;
    if (region <= 0 || region >= g->nregions) return 1;
    int id = region_owner(g, region);
    if (id < 0) return 0; /* an attempt rolled back */
    const GNode *n = &g->nodes[id];
    if (n->region != 0) { /* deeper (see trace.h), unless in an attempt rolled back */
        for (int x = id; g->nodes[x].region != 0;)
            if ((x = region_owner(g, g->nodes[x].region)) < 0) return 0;
        return 1;
    }
    if (n->kind == G_WHILE) {
        if (region == n->regions[0]) return 1; /* the condition runs at least once */
        tfe_tensor *w = stage_loop_runs(T, id, true);
        if (!w) return 1; /* (a condition a replay cannot evaluate again: trace.h) */
        *runs = truth(w, false);
        tensor_decref(w);
    } else {
        int ps = g->nodes[n->in[0].node].vbase + n->in[0].out;
        tfe_tensor *p = ps < T->capconcrete ? T->concrete[ps] : NULL;
        if (!p) return 1;
        *runs = truth(p, region == n->regions[1]);
    }
    return *runs ? 2 : -1;
}

/* pred ? (b ? a + b : a) : e, as a cond node on pred (a traced bool
 * scalar): a gradient through it reaches only the branch the call takes,
 * none the other (a where would hand the other zeros, which can change the
 * sign of a zero gradient). Not recording: by pred's value, as eager code
 * (new ref, or NULL on a tensor error). */
tfe_tensor *trace_pick(Tracer *T, tfe_tensor *pred, tfe_tensor *a, tfe_tensor *b, tfe_tensor *e)
{
    if (!trace_recording(T->I)) {
        if (!(pred->storage && tensor_load_f64(pred, 0) != 0.0)) {
            tensor_incref(e);
            return e;
        }
        if (b) return tfe_binary(OP_ADD, a, b);
        tensor_incref(a);
        return a;
    }
    Graph *g = T->g;
    int r[2] = {graph_add_region(g, T->region), graph_add_region(g, T->region)};
    int saved_region = T->region, saved_effect = T->last_effect;
    bool saved_sym = T->symbolic;
    T->symbolic = true;
    T->last_effect = -1;
    T->region = r[0];
    tfe_tensor *then = b ? tfe_binary(OP_ADD, a, b) : (tensor_incref(a), a);
    for (int br = 0; br < 2 && then; br++) {
        T->region = r[br];
        g->regions[r[br]].outs = xcalloc(1, sizeof(GRef));
        g->regions[r[br]].outs[0] = trace_ref(T, br ? e : then);
        g->regions[r[br]].nouts = 1;
    }
    T->region = saved_region;
    T->symbolic = saved_sym;
    T->last_effect = saved_effect;
    if (!then) return NULL;
    GRef pref = trace_ref(T, pred);
    int id = graph_add(g, T->region, G_COND, 1, 1);
    GNode *cn = gnode(g, id);
    cn->loc = T->I->cur_loc;
    cn->frames = T->last_frames;
    cn->regions[0] = r[0];
    cn->regions[1] = r[1];
    cn->in[0] = pref;
    tfe_meta *m = &cn->meta[0];
    m->dtype = then->dtype;
    m->weak = then->weak && e->weak;
    m->rank = then->rank;
    for (int d = 0; d < then->rank; d++) m->shape[d] = then->shape[d] == e->shape[d] ? then->shape[d] : -1;
    tensor_decref(then);
    cn->effect_dep = T->last_effect;
    T->last_effect = id;
    tfe_tensor *out = NULL;
    if (trace_node_outputs(T, id, &out)) return NULL;
    return out;
}

/* --- whether the variable was assigned between two reads (a tape's merged sums) --------- */

bool trace_host_harmless(const GNode *x, const Obj *var)
{
    if (x->host->obj.kind != V_BUILTIN) return false;
    const Builtin *b = (const Builtin *)x->host->obj.u.o;
    if (value_is_variable(b->self)) return b->self.u.o != var;
    if (b->value_check) return true;
    /* (the effects a traced branch can hold; restore assigns variables) */
    static const char *const harmless[] = {"print", "save_npy", "seed", "assert", "check_labels",
                                           "check_same_shape", "check_range", "check_batch", "plot", "save", "write_text"};
    for (size_t i = 0; b->name && i < sizeof harmless / sizeof *harmless; i++)
        if (!strcmp(b->name, harmless[i])) return true;
    return false;
}

/* Region r (a branch or loop body): 0 nothing in it can assign var, 1 it
 * assigns var at its top (so on every run of it), -1 it may in a way whose
 * running the graph cannot tell (a host call, a nested cond or loop). */
static int region_assign_kind(const Graph *g, int r, const Obj *var)
{
    const GRegion *reg = &g->regions[r];
    int kind = 0;
    for (int i = 0; i < reg->n; i++) {
        const GNode *x = &g->nodes[reg->nodes[i]];
        if (x->kind == G_HOST) {
            if (x->host->obj.kind == V_BUILTIN && ((const Builtin *)x->host->obj.u.o)->self.u.o == var &&
                value_is_variable(((const Builtin *)x->host->obj.u.o)->self))
                kind = 1;
            else if (!trace_host_harmless(x, var))
                return -1;
        } else if (x->kind == G_COND || x->kind == G_WHILE) {
            if (region_assign_kind(g, x->regions[0], var) || region_assign_kind(g, x->regions[1], var)) return -1;
        }
    }
    return kind;
}

/* The var_read node of var at the top that tensor t is the note of, or -1. */
static int top_read_of(const Tracer *T, const tfe_tensor *t, const Obj *var)
{
    const TNote *nt = t->node;
    if (!nt || nt->t != t || nt->ref.out != 0) return -1;
    const GNode *x = gnode(T->g, nt->ref.node);
    return x->kind == G_VAR_READ && x->region == 0 && x->host->obj.u.o == var && !x->outer_out ? nt->ref.node : -1;
}

static int top_pos(const Graph *g, int id)
{
    const GRegion *reg = &g->regions[0];
    for (int i = 0; i < reg->n; i++)
        if (reg->nodes[i] == id) return i;
    return -1;
}

int trace_read_point(Tracer *T, const Obj *var, const tfe_tensor *t, const int *regs, int nregs, bool after,
                     bool at_end, TReadPoint *pt)
{
    const Graph *g = T->g;
    if (!nregs) {
        int id = top_read_of(T, t, var), q = id < 0 ? -1 : top_pos(g, id);
        if (q < 0) return -1;
        *pt = (TReadPoint){q + 1, q, 2 * q + 1};
        return 0;
    }
    /* one tensor read in the branches of several ifs (nothing between them
     * assigned the variable when the call traced): its value is the one
     * when the first of them started */
    int c = -1, q = -1;
    for (int k = 0; k < nregs; k++) {
        int r = regs[k];
        if (r <= 0 || r >= g->nregions) return -1;
        int id = region_owner(g, r);
        /* (a read in a loop that does not assign the variable: its value
         * when the loop started) */
        bool loop = id >= 0 && g->nodes[id].kind == G_WHILE && !after &&
                    !region_assign_kind(g, g->nodes[id].regions[0], var) &&
                    !region_assign_kind(g, g->nodes[id].regions[1], var);
        /* (a read in the condition of a loop that assigns var at the top of
         * its body: its first read is of the value when the loop started;
         * the later ones' zeros are the loop count's, tapes_loop_count) */
        loop |= id >= 0 && g->nodes[id].kind == G_WHILE && !after && r == g->nodes[id].regions[0] &&
                !region_assign_kind(g, r, var) && region_assign_kind(g, g->nodes[id].regions[1], var) > 0;
        /* (a read in the body of such a loop, before its assign: noted only
         * there, builtins_autodiff.c; where the body runs, its first
         * iteration reads the value when the loop started) */
        loop |= id >= 0 && g->nodes[id].kind == G_WHILE && !after && r == g->nodes[id].regions[1] &&
                !region_assign_kind(g, g->nodes[id].regions[0], var) && region_assign_kind(g, r, var) > 0;
        if (id < 0 || (g->nodes[id].kind != G_COND && !loop) || g->nodes[id].region != 0 ||
            (after && c >= 0 && id != c))
            return -1;
        c = id;
        int qc = top_pos(g, id);
        if (qc < 0) return -1;
        if (q < 0 || qc < q) q = qc;
        /* after an assign: its value is the one after the if only when no
         * assign follows it in its branch (and none is nested) */
        if (after && (region_assign_kind(g, r, var) < 0 || !at_end)) return -1;
    }
    *pt = after ? (TReadPoint){q + 1, -1, 2 * q + 1} : (TReadPoint){q, q, 2 * q};
    return 0;
}

int trace_assigned_between(Tracer *T, const Obj *var, int lo, int hi, tfe_tensor **assigned, int *where)
{
    *assigned = NULL;
    *where = -1;
    const Graph *g = T->g;
    if (hi < lo) return 1;
    const GRegion *reg = &g->regions[0];
    tfe_tensor *any = NULL;
    int st = 0;
    for (int i = lo; i < hi && i < reg->n; i++) {
        int id = reg->nodes[i];
        const GNode *x = &g->nodes[id];
        if (x->kind == G_HOST) {
            if (x->host->obj.kind == V_BUILTIN && value_is_variable(((const Builtin *)x->host->obj.u.o)->self) &&
                ((const Builtin *)x->host->obj.u.o)->self.u.o == var) {
                st = 1;
                break;
            }
            if (!trace_host_harmless(x, var)) {
                st = -1;
                *where = id;
                break;
            }
            continue;
        }
        if (x->kind != G_COND && x->kind != G_WHILE) continue;
        for (int k = 0; k < 2 && st >= 0 && st != 1; k++) {
            int kind = region_assign_kind(g, x->regions[k], var);
            if (kind == 0) continue;
            tfe_tensor *runs = NULL;
            if (kind > 0) {
                if (x->kind == G_WHILE && k == 0) {
                    st = 1; /* the condition runs at least once */
                    break;
                }
                if (x->kind == G_WHILE) {
                    tfe_tensor *w = stage_loop_runs(T, id, true);
                    runs = w ? truth(w, false) : NULL;
                    if (w) tensor_decref(w);
                    if (!w) kind = -1;
                } else {
                    int ps = g->nodes[x->in[0].node].vbase + x->in[0].out;
                    tfe_tensor *p = ps < T->capconcrete ? T->concrete[ps] : NULL;
                    runs = p ? truth(p, k == 1) : NULL;
                    if (!p) kind = -1;
                }
                if (kind > 0 && !runs) st = -2;
            }
            if (kind < 0) {
                st = -1;
                *where = id;
                break;
            }
            if (!runs) break;
            if (any) {
                tfe_tensor *o = tfe_binary(OP_LOGICAL_OR, any, runs);
                tensor_decref(any);
                any = o;
                if (!o) st = -2;
            } else {
                any = runs;
                runs = NULL;
            }
            if (runs) tensor_decref(runs);
            if (*where < 0) *where = id;
        }
        if (st < 0 || st == 1) break;
    }
    if (st != 0) {
        if (any) tensor_decref(any);
        return st;
    }
    *assigned = any;
    return any ? 2 : 0;
}

bool trace_read_split(Tracer *T, const Obj *var, const int *regs, int nregs)
{
    const Graph *g = T->g;
    int q = -1;
    for (int k = 0; k < nregs; k++) {
        if (regs[k] <= 0 || regs[k] >= g->nregions) return false;
        int id = region_owner(g, regs[k]);
        if (id < 0 || g->nodes[id].region != 0 || g->nodes[id].kind != G_WHILE || regs[k] != g->nodes[id].regions[1] ||
            region_assign_kind(g, g->nodes[id].regions[1], var) <= 0)
            return false;
        int qk = top_pos(g, id);
        if (qk < 0) return false;
        if (q < 0 || qk < q) q = qk;
    }
    return q >= 0 && may_assign_between(g, var, q, g->regions[0].n);
}

bool trace_loop_fresh(const Tracer *T, const Obj *var, const tfe_tensor *t)
{
    for (int k = 0; k < T->nloop_fresh; k++)
        if (T->loop_fresh[k].var == var) return t != T->loop_fresh[k].start;
    return false;
}

/* Marks in seen the nodes whose values node x of g reads, through the regions
 * of a cond or loop too (what they read from outside), and in used the
 * outputs of node id read so. */
static void deps_of(const Graph *g, int x, int id, bool *seen, bool *used)
{
    if (seen[x]) return;
    seen[x] = true;
    const GNode *n = &g->nodes[x];
    for (int k = 0; k < n->nin; k++) {
        if (n->in[k].node == id && n->in[k].out < g->nodes[id].nout) used[n->in[k].out] = true;
        deps_of(g, n->in[k].node, id, seen, used);
    }
    if (n->kind == G_COND || n->kind == G_WHILE)
        for (int r = 0; r < 2; r++) {
            const GRegion *reg = &g->regions[n->regions[r]];
            for (int i = 0; i < reg->n; i++) deps_of(g, reg->nodes[i], id, seen, used);
            for (int i = 0; i < reg->nouts; i++) {
                if (reg->outs[i].node == id && reg->outs[i].out < g->nodes[id].nout) used[reg->outs[i].out] = true;
                deps_of(g, reg->outs[i].node, id, seen, used);
            }
        }
}

bool trace_uses_output(Tracer *T, const tfe_tensor *t, int id, const bool *outs)
{
    const TNote *nt = t->node;
    const Graph *g = T->g;
    if (!nt || nt->ref.node < 0 || nt->ref.node >= g->n || id < 0 || id >= g->n) return true; /* (cannot tell) */
    if (nt->ref.node == id) return nt->ref.out < g->nodes[id].nout && outs[nt->ref.out];
    bool *seen = xcalloc((size_t)g->n + 1, 1), *used = xcalloc((size_t)g->nodes[id].nout + 1, 1);
    deps_of(g, nt->ref.node, id, seen, used);
    bool any = false;
    for (int k = 0; k < g->nodes[id].nout && !any; k++) any = used[k] && outs[k];
    free(seen);
    free(used);
    return any;
}

int trace_top_pos(Tracer *T, int id) { return id >= 0 && id < T->g->n ? top_pos(T->g, id) : -1; }

int trace_regions_pos(Tracer *T, const int *regs, int nregs, int id, bool *only_in)
{
    const Graph *g = T->g;
    int q = -1;
    *only_in = nregs > 0;
    for (int k = 0; k < nregs; k++) {
        if (regs[k] <= 0 || regs[k] >= g->nregions) return -1;
        int top = region_owner(g, regs[k]);
        while (top >= 0 && g->nodes[top].region != 0) top = region_owner(g, g->nodes[top].region);
        int qk = top < 0 ? -1 : top_pos(g, top);
        if (qk < 0) return -1;
        if (top != id) *only_in = false;
        if (q < 0 || qk < q) q = qk;
    }
    return q;
}

struct CfStart *trace_cf_entry(Tracer *T, const Obj *var)
{
    for (int k = 0; k < T->ncf_start; k++)
        if (T->cf_start[k].var == var) return &T->cf_start[k];
    return NULL;
}

tfe_tensor *trace_cf_start(const Tracer *T, const Obj *var)
{
    for (int k = 0; k < T->ncf_start; k++)
        if (T->cf_start[k].var == var) return T->cf_start[k].t;
    return NULL;
}


/* --- a cond or while for code without an AST (import_onnx's If and Loop) ------------------ */

/* As trace_cond and loop_core build theirs, with the branches (the
 * condition and body) run by a callback instead of the interpreter: the
 * same regions, node, run on the trace's values and tape entry. */
int trace_cond_fn(Interp *I, Loc loc, tfe_tensor *pred, int nout, TraceRunFn run, void *ctx, tfe_tensor **outs)
{
    Tracer *T = I->tracer;
    Graph *g = T->g;
    int saved_region = T->region, saved_effect = T->last_effect;
    bool saved_sym = T->symbolic;
    Mark mark = mark_of(T);
    tfe_tensor **bo[2];
    int r[2], rc = 0;
    for (int b = 0; b < 2; b++) {
        bo[b] = xcalloc((size_t)nout + 1, sizeof *bo[b]);
        r[b] = graph_add_region(g, T->region);
    }
    T->symbolic = true;
    for (int b = 0; b < 2; b++) {
        T->region = r[b];
        T->last_effect = -1;
        if (run(ctx, b, NULL, bo[b]) || T->failed) goto failed;
    }
    for (int k = 0; k < nout; k++) {
        tfe_tensor *t0 = bo[0][k], *t1 = bo[1][k];
        if (t0->dtype != t1->dtype || t0->rank != t1->rank) {
            raise_at(I, loc, "output %d of this conditional is %s of rank %d in one branch and %s of rank %d in the "
                     "other (staged code needs the same dtype and rank from both)", k, dtype_name(t0->dtype), t0->rank,
                     dtype_name(t1->dtype), t1->rank);
            goto failed;
        }
        if (!same_shape(t0, t1)) goto failed; /* decided at trace time (same_shape says why) */
    }
    for (int b = 0; b < 2; b++) {
        T->region = r[b];
        GRegion *reg = &g->regions[r[b]];
        reg->nouts = nout;
        reg->outs = xcalloc((size_t)(nout ? nout : 1), sizeof *reg->outs);
        for (int k = 0; k < nout; k++) {
            GRef ref = trace_ref(T, bo[b][k]);
            g->regions[r[b]].outs[k] = ref;
        }
    }
    T->region = saved_region;
    T->symbolic = saved_sym;
    T->last_effect = saved_effect;
    rewind_random(mark);
    {
        I->cur_loc = loc;
        GRef cref = trace_ref(T, pred);
        int id = graph_add(g, T->region, G_COND, 1, nout);
        GNode *cn = gnode(g, id);
        cn->loc = loc;
        cn->frames = T->last_frames;
        cn->regions[0] = r[0];
        cn->regions[1] = r[1];
        cn->in[0] = cref;
        for (int k = 0; k < nout; k++) {
            tfe_tensor *t0 = bo[0][k], *t1 = bo[1][k];
            tfe_meta *m = &cn->meta[k];
            m->dtype = t0->dtype;
            m->weak = t0->weak && t1->weak;
            m->rank = t0->rank;
            for (int d = 0; d < t0->rank; d++) m->shape[d] = t0->shape[d] == t1->shape[d] ? t0->shape[d] : -1;
        }
        rc = bind_outputs(T, id, NULL, NULL, 0, outs);
    }
    goto done;
failed:
    T->region = saved_region;
    T->symbolic = saved_sym;
    T->last_effect = saved_effect;
    rc = give_up(I, T, loc, "this conditional on a traced tensor");
    if (rc == 1) roll_back(T, mark);
done:
    for (int b = 0; b < 2; b++) {
        for (int k = 0; k < nout; k++)
            if (bo[b][k]) tensor_decref(bo[b][k]);
        free(bo[b]);
    }
    return rc;
}

int trace_while_fn(Interp *I, Loc loc, int nc, tfe_tensor *const *init, TraceRunFn run, void *ctx, tfe_tensor **outs)
{
    Tracer *T = I->tracer;
    Graph *g = T->g;
    int saved_region = T->region, saved_effect = T->last_effect;
    bool saved_sym = T->symbolic;
    Mark mark = mark_of(T);
    tfe_tensor **sp = xcalloc((size_t)nc + 1, sizeof *sp), **nx = xcalloc((size_t)nc + 1, sizeof *nx), *c = NULL;
    int rc = 0;
    int rcond = graph_add_region(g, T->region);
    int rbody = graph_add_region(g, rcond);
    GRegion *reg = &g->regions[rcond];
    reg->params = xcalloc((size_t)(nc ? nc : 1), sizeof *reg->params);
    reg->nparams = nc;
    T->symbolic = true;
    for (int k = 0; k < nc; k++) {
        int p = graph_add(g, rcond, G_PARAM, 0, 1);
        GNode *pn = gnode(g, p);
        pn->loc = loc;
        pn->meta[0] = (tfe_meta){.dtype = init[k]->dtype, .weak = init[k]->weak, .rank = init[k]->rank};
        mem_copy(pn->meta[0].shape, init[k]->shape, sizeof(int64_t) * (size_t)init[k]->rank);
        g->regions[rcond].params[k] = p;
        sp[k] = tensor_symbolic(init[k]->dtype, init[k]->weak, init[k]->rank, init[k]->shape);
        trace_note(T, sp[k], (GRef){p, 0});
    }
    T->region = rcond;
    T->last_effect = -1;
    if (run(ctx, 0, sp, &c) || T->failed) goto failed;
    if (tensor_numel(c) != 1) {
        raise_at(I, loc, "the condition of this loop has %lld elements, not one", (long long)tensor_numel(c));
        goto failed;
    }
    reg = &g->regions[rcond];
    reg->outs = xmalloc(sizeof *reg->outs);
    reg->outs[0] = trace_ref(T, c);
    reg->nouts = 1;
    T->region = rbody;
    T->last_effect = -1;
    if (run(ctx, 1, sp, nx) || T->failed) goto failed;
    g->regions[rbody].outs = xcalloc((size_t)(nc ? nc : 1), sizeof(GRef));
    g->regions[rbody].nouts = nc;
    for (int k = 0; k < nc; k++) {
        tfe_tensor *t = nx[k];
        if (t->dtype != init[k]->dtype || t->rank != init[k]->rank ||
            mem_cmp(t->shape, init[k]->shape, sizeof(int64_t) * (size_t)t->rank)) {
            char s1[200], s2[200];
            raise_at(I, loc, "loop value %d changes from %s %s to %s %s in one iteration; staged loops must keep "
                     "the dtype and shape of what they carry", k, dtype_name(init[k]->dtype),
                     shape_str(init[k]->rank, init[k]->shape, s1), dtype_name(t->dtype), shape_str(t->rank, t->shape, s2));
            goto failed;
        }
        GRef ref = trace_ref(T, t);
        g->regions[rbody].outs[k] = ref;
    }
    T->region = saved_region;
    T->symbolic = saved_sym;
    T->last_effect = saved_effect;
    if (tape_meets_draw(T, g, rcond) || tape_meets_draw(T, g, rbody)) {
        raise_at(I, loc, "a tape cannot differentiate a random draw inside a staged loop");
        goto failed;
    }
    rewind_random(mark);
    {
        I->cur_loc = loc;
        GRef *refs = xcalloc((size_t)nc + 1, sizeof *refs);
        for (int k = 0; k < nc; k++) refs[k] = trace_ref(T, init[k]);
        int id = graph_add(g, T->region, G_WHILE, nc, nc);
        GNode *wn = gnode(g, id);
        wn->loc = loc;
        wn->frames = T->last_frames;
        wn->regions[0] = rcond;
        wn->regions[1] = rbody;
        mem_copy(wn->in, refs, sizeof *refs * (size_t)nc);
        free(refs);
        for (int k = 0; k < nc; k++) wn->meta[k] = gnode(g, g->regions[rcond].params[k])->meta[0];
        rc = bind_outputs(T, id, NULL, NULL, 0, outs);
    }
    goto done;
failed:
    T->region = saved_region;
    T->symbolic = saved_sym;
    T->last_effect = saved_effect;
    rc = give_up(I, T, loc, "this loop on a traced tensor");
    if (rc == 1) roll_back(T, mark);
done:
    if (c) tensor_decref(c);
    for (int k = 0; k < nc; k++) {
        if (sp[k]) tensor_decref(sp[k]); /* (the notes keep them) */
        if (nx[k]) tensor_decref(nx[k]);
    }
    free(sp);
    free(nx);
    return rc;
}

/* --- `and` / `or` in a traced condition ------------------------------------------------------
 * Eager code reads the truth of an `and`'s left operand and, unless that
 * decides, the right one's. A left operand whose value varies from call to
 * call (it comes from a variable, a host call or a draw) cannot be read at
 * trace time; where evaluating the right operand does nothing but compute
 * (names, literals, operators, indexing, builtins that are no effects) and
 * cannot fail, computing both and combining their truths with logical_and
 * (logical_or) gives what eager code decides: the if or while then traces
 * on that tensor. Otherwise a located error says how to write it. */

static bool pure_list(Interp *I, const NodeList *l, Env *env);

static bool pure_expr(Interp *I, Node *n, Env *env)
{
    if (!n) return true;
    switch (n->kind) {
    case N_INT: case N_FLOAT: case N_STR: case N_TRUE: case N_FALSE: case N_NIL: case N_NAME: case N_ELLIPSIS:
        return true;
    case N_INDEX:
        /* an int index can be out of range on a call where eager code
         * skips the operand (x[i] once i reached the end: `while i < n and
         * x[i] > 0`), and the graph would raise it; slices clamp */
        for (int i = 0; i < n->list.n; i++) {
            Node *it = n->list.items[i];
            if (it->kind == N_SLICE || it->kind == N_ELLIPSIS || it->kind == N_STR) continue;
            /* a literal int into a name whose size is the same on every
             * call (a variable, a list, a tensor of no relaxed dim) fails
             * at trace time if ever: `v[1] > 4.0` */
            bool lit = it->kind == N_INT || (it->kind == N_UNOP && it->op == AOP_NEG && it->a && it->a->kind == N_INT);
            if (!lit || !n->a || n->a->kind != N_NAME) return false;
            Value b;
            if (interp_eval_expr(I, n->a, env, &b)) {
                error_clear(I);
                return false;
            }
            bool fixed = value_is_variable(b) || b.kind == V_LIST || b.kind == V_TUPLE ||
                         (b.kind == V_TENSOR && !tfe_dyn_dims(b.u.t));
            value_decref(b);
            if (!fixed) return false;
        }
        return pure_expr(I, n->a, env) && pure_list(I, &n->list, env);
    case N_BINOP:
        /* an int // or % by zero raises (`k > 0 and 10 // k > 2`) */
        if (n->op == AOP_FLOORDIV || n->op == AOP_MOD) return false;
        /* and an int ** a negative int (`x ** k`); a literal exponent >= 0
         * or a float one cannot raise */
        if (n->op == AOP_POW && !(n->b && (n->b->kind == N_FLOAT || (n->b->kind == N_INT && n->b->ival >= 0))))
            return false;
        return pure_expr(I, n->a, env) && pure_expr(I, n->b, env) && pure_expr(I, n->c, env) &&
               pure_list(I, &n->list, env);
    case N_UNOP: case N_AND: case N_OR: case N_NOT: case N_SLICE: case N_FIELD:
    case N_ARRAY: case N_TUPLE: case N_KWARG:
        return pure_expr(I, n->a, env) && pure_expr(I, n->b, env) && pure_expr(I, n->c, env) &&
               pure_list(I, &n->list, env);
    case N_CALL: {
        if (!n->a || n->a->kind != N_NAME || !pure_list(I, &n->list, env) || !pure_list(I, &n->list2, env))
            return false;
        Value f;
        if (interp_eval_expr(I, n->a, env, &f)) {
            error_clear(I);
            return false;
        }
        bool ok = f.kind == V_BUILTIN && !((Builtin *)f.u.o)->effect && !((Builtin *)f.u.o)->unstageable;
        /* (those that raise on some values: an index out of range, a
         * singular matrix, where eager code skips the operand) */
        static const char *const raising[] = {"gather", "take_along_axis", "solve", "inv", "cholesky",
                                              "one_hot", "choice", "assert"};
        for (size_t i = 0; ok && i < sizeof raising / sizeof *raising; i++)
            if (!strcmp(((Builtin *)f.u.o)->name, raising[i])) ok = false;
        value_decref(f);
        return ok;
    }
    default:
        return false;
    }
}

static bool pure_list(Interp *I, const NodeList *l, Env *env)
{
    for (int i = 0; i < l->n; i++)
        if (!pure_expr(I, l->items[i], env)) return false;
    return true;
}

/* Is v a one-element tensor of the trace (a value the graph computes)? */
static bool traced_one(Value v) { return v.kind == V_TENSOR && v.u.t->node && tensor_numel(v.u.t) == 1; }

/* Is v such a tensor whose value cannot be read at trace time: one that
 * varies from call to call, or one of a region traced symbolically (no
 * value until the graph runs)? */
static bool unreadable(Interp *I, Value v)
{
    return traced_one(v) && (!v.u.t->storage || trace_value_varies(I, v.u.t));
}

/* v as a traced bool tensor (v != 0), or NULL with an error raised. */
static tfe_tensor *truth_tensor(Interp *I, Value v)
{
    tfe_tensor *t = v.u.t;
    if (t->dtype == TFE_BOOL) {
        tensor_incref(t);
        return t;
    }
    tfe_tensor *zero = tensor_from_f64(0.0, t->dtype);
    tfe_tensor *r = zero ? tfe_binary(OP_NE, t, zero) : NULL;
    if (zero) tensor_decref(zero);
    if (!r) interp_raise_tensor_error(I);
    return r;
}

int trace_cond_value(Interp *I, Node *c, Env *env, Value *out)
{
    if ((c->kind != N_AND && c->kind != N_OR) || !trace_recording(I)) return interp_eval_expr(I, c, env, out);
    Tracer *T = I->tracer;
    bool is_and = c->kind == N_AND;
    const char *word = is_and ? "and" : "or";
    Value a, b;
    bool t;
    if (trace_cond_value(I, c->a, env, &a)) return -1;
    if (!unreadable(I, a)) {
        /* the left operand's truth is read as eager code reads it */
        int rc = value_truth_op(I, a, c->a->loc, &t, word);
        value_decref(a);
        if (rc) return -1;
        if (is_and ? !t : t) {
            *out = v_bool(t);
            return 0;
        }
        if (trace_cond_value(I, c->b, env, &b)) return -1;
        if (unreadable(I, b)) {
            tfe_tensor *r = truth_tensor(I, b);
            value_decref(b);
            if (!r) return -1;
            *out = v_tensor_take(r);
            return 0;
        }
        rc = value_truth_op(I, b, c->b->loc, &t, word);
        value_decref(b);
        if (rc) return -1;
        *out = v_bool(t);
        return 0;
    }
    /* the right operand runs whatever the left one's value: only when that
     * changes nothing eager code would see */
    uint64_t k0, c0, k1, c1;
    tfe_random_state(&k0, &c0);
    int n0 = T->g->n, nhost = T->nhost;
    bool pure = pure_expr(I, c->b, env);
    int rc = pure ? trace_cond_value(I, c->b, env, &b) : -1;
    tfe_random_state(&k1, &c1);
    bool effect = k0 != k1 || c0 != c1 || T->nhost != nhost;
    for (int id = n0; id < T->g->n && !effect; id++) { /* (a variable read is none) */
        const GNode *m = &T->g->nodes[id];
        effect = m->kind == G_HOST || (m->kind == G_OP && (tfe_ops[m->op].flags & (F_RANDOM | F_COLLECTIVE)));
    }
    if (!rc && effect) {
        value_decref(b);
        rc = -1;
    }
    if (rc) {
        value_decref(a);
        if (T->failed) return -1;
        error_clear(I);
        return trace_fail(I, c->loc,
                          "'%s' here would need at trace time the value of its left operand, a tensor that comes from "
                          "a variable, a host call or a random draw, or is computed in a staged conditional or loop "
                          "(not known until the graph runs); eager code evaluates the right operand only when the "
                          "left one is %s, and that one %s; write the condition with tensor ops, logical_%s(a, b), "
                          "which computes both, or test the left operand in an if of its own",
                          word, is_and ? "true" : "false", pure ? "failed or had an effect here" : "may have an effect or fail",
                          word);
    }
    tfe_tensor *ta = truth_tensor(I, a);
    value_decref(a);
    if (!ta) {
        value_decref(b);
        return -1;
    }
    if (traced_one(b)) {
        tfe_tensor *tb = truth_tensor(I, b);
        value_decref(b);
        tfe_tensor *r = tb ? tfe_binary(is_and ? OP_LOGICAL_AND : OP_LOGICAL_OR, ta, tb) : NULL;
        tensor_decref(ta);
        if (tb) tensor_decref(tb);
        if (!r) return tb ? interp_raise_tensor_error(I) : -1;
        *out = v_tensor_take(r);
        return 0;
    }
    rc = value_truth(I, b, c->b->loc, &t);
    value_decref(b);
    if (rc) {
        tensor_decref(ta);
        return -1;
    }
    if (is_and ? t : !t) {
        *out = v_tensor_take(ta); /* a and true, a or false: a's truth */
    } else {
        tensor_decref(ta);
        *out = v_bool(t); /* a and false, a or true: decided */
    }
    return 0;
}
