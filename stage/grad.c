/* grad.c — gradients of graphs.
 *
 * A cached staged call under a tape is one tape entry. Its backward is the
 * gradient of the graph: the forward nodes are replayed (recomputed from the
 * call's inputs, so that an outer tape sees how every value depends on them:
 * higher order works) and then swept in reverse with the ops' gradient
 * rules (a call under two recording tapes or more hands out its forward's values as
 * outputs of its tape entry instead, and a backward a tape records reads
 * those: held values, GCallGrad.hold). The first backward of a graph runs
 * under a tracer of its own, so
 * it is recorded as the backward graph and cached on the forward graph;
 * later backwards run that graph (itself one tape entry, whose backward is
 * built the same way). Inside a trace, the same code records into the trace.
 *
 * Conditionals: the backward of a cond is a cond on the same predicate whose
 * branches replay the forward branch and sweep it. Loops: a while replayed
 * for a backward keeps the carried values of every iteration (stacked);
 * its backward is a while that runs the iterations in reverse, replaying
 * one body at a time from the stacked values. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "graph/exec.h"
#include "stage/host_reads.h"
#include "stage/staged.h"
#include "stage/trace.h"
#include "tensor/grad.h"
#include "tensor/fused.h"
#include "tensor/device.h"
#include "graph/opt.h"
#include "util/xalloc.h"

/* --- state of one backward ------------------------------------------------------------- */

#define NAL 5 /* aliases per slot (BP.alias) */

typedef struct BP {
    Interp *I;
    Tracer *T;
    Graph *G;            /* the forward graph */
    tfe_tensor **m;      /* forward value by G slot (owned refs) */
    tfe_tensor **g;      /* gradient by G slot (owned refs) */
    tfe_tensor **count;  /* by G node: a replayed while's number of iterations (owned) */
    const tfe_attrs *draws; /* by G node: what each random op drew in the forward run, or NULL */
    struct FusedVals **fused; /* by G node: a fused node's values, one per instruction */
    bool in_trace;       /* recorded into a trace in progress (a tape made inside it) */
    bool own;            /* the backward is recorded by a tracer of its own (not into
                            an enclosing trace) */
    bool drew;           /* it replayed a draw in a branch: it serves this call only */
    /* by G slot: a traced bool (in a branch or loop body, a value of it),
     * true where the slot's gradient is none in eager terms (nothing has
     * reached the value on this path: a loop that ran zero times, a branch
     * that does not use a captured value, a loop variable no later use
     * reaches); the gradient is then -0.0s, which adding leaves exact, and
     * what a rule makes from it is masked back to -0.0s (NULL: real; owned) */
    tfe_tensor **none;
    /* while a loop's reverse iterations are swept: by G slot of a loop
     * variable that started as a captured value, that value's slot, or -1
     * (NULL: none such yet), and a traced bool, true in the loop's first
     * iteration (alias_first[slot], owned). A loop nested in such a loop's
     * body may have its own: a chain (b = a, a = x). Two per slot, by
     * NAL * slot + w: w = 0 that one, w = 1 a value passed through (a loop's
     * output that is its initial value where it ran zero times, or a
     * captured value its body ends on; a param that is such a value after
     * the first iteration: alias_pass, loop_grad_body), under its own bool;
     * w = 2, 3 a value an if in the body ends it on, where the flags say so
     * (loop_cond_targets); w = 4 the initial value itself, an if's or a
     * loop's result that is another value only where its alias's bool
     * holds, in the first iteration elsewhere (GradCtx.pself). */
    int *alias;
    tfe_tensor **alias_first;
    bool noted_loops;    /* the graph is a loop a tape made in the trace it is recorded into
                            noted (Graph.noted_loops): that tape adds what eager code adds
                            for the tensors of a variable the loop reads and assigns */
    /* logged reads (a backward of its own: backward_run): reads in the body
     * of a loop of the top region that assigns their variable, one tensor
     * per iteration, which the forward run logged (lr_in[j]: node lr_node[j]'s
     * values stacked, traced; lr_loop[j]: its loop). The loop's replay and
     * backward take iteration i's value, and give each its own gradient,
     * stacked (lr_g[j], flags lr_f[j]: where none; owned, NULL: none reached) */
    int nlr;
    const int *lr_node, *lr_loop;
    tfe_tensor **lr_in, **lr_g, **lr_f;
    const int *lr_role, *lr_mate, *lr_pre, *lr_post; /* (logged_roles) */
    /* by logged read of role 2: the slot of the tensor the loop ends with,
     * whose gradient so far the loop takes over and hands back whole (the
     * read after the loop's, or a slot of its own, after G's, for the
     * caller's gradient so far), or -1 */
    int *lr_pslot;
    /* by G slot of an op in a branch of a replayed cond: that value as an
     * output of the replayed cond (owned; NULL: none), and the region the
     * cond was replayed into (xv_reg). The cond's backward reads these
     * rather than replaying the branch again: to a tape that records the
     * backward (a higher order), a value the rules read is then the one
     * tensor the forward made, as in eager code, not a second tanh(x)
     * whose gradient would be summed apart (replay_cond, grad_branch) */
    tfe_tensor **xv;
    int *xv_reg;
    /* by G slot of an output of a cond of the top region that is an output
     * of the graph: the tensor the forward call gave (owned; NULL:
     * none). Its replay reads that one, as an eager rule reads the output
     * the tape recorded, so a tape recording this backward (a higher
     * order) adds what reaches it there and through the forward's output
     * as one sum (backward_run) */
    tfe_tensor **fo;
    /* by G slot of a value in the branch that ran of a cond of the top
     * region: the tensor the forward call kept of it, an output of its
     * entry (owned; NULL: none; GCallGrad.xslot). The replayed cond hands
     * that one out in its place (replay_cond), as fo for the outputs */
    tfe_tensor **fx;
    /* by 2 * G slot of a loop's param + j, the replay's flags, stacked:
     * whether in iteration i the variable is the value an if in the body
     * ends it on, where that if's predicates say so (loop_cond_targets'
     * target j: a captured value, or another variable's value); by 2 * slot
     * of the loop's output + j, the last iteration's flag (owned; NULL: none
     * such) */
    tfe_tensor **af_hist, **af_last;
    /* by 2 * G slot of a cond's output + w: where branch w's result is a
     * value of the branch's own, not one of the values from outside that
     * the output's aliases hand its gradient to (an if nested in the
     * branch ends it on either: cond_out_alias); the branch takes what
     * reached the output there only (owned; NULL: all of it, or none where
     * the aliases take it all) */
    tfe_tensor **cond_rest;
} BP;

/* A fused node replayed op by op (its rules need every intermediate value):
 * vals[i] is instruction i's result, src[i][k] the instruction that wrote
 * its operand k (registers are reused, so this is resolved as it runs). */
typedef struct FusedVals {
    tfe_tensor **vals;
    int (*src)[2];
    int n, result;
    tfe_tensor *red;     /* a final reduction's value (the node's output), or NULL */
} FusedVals;

static void fused_free(FusedVals *f)
{
    if (!f) return;
    if (f->red) tensor_decref(f->red);
    for (int i = 0; i < f->n; i++)
        if (f->vals[i]) tensor_decref(f->vals[i]);
    free(f->vals);
    free(f->src);
    free(f);
}

static inline int slot_of(const Graph *G, GRef r) { return G->nodes[r.node].vbase + r.out; }

/* The node whose output slot s of G is. */
static const GNode *slot_node(const Graph *G, int s)
{
    for (int i = 0; i < G->n; i++)
        if (s >= G->nodes[i].vbase && s < G->nodes[i].vbase + G->nodes[i].nout) return &G->nodes[i];
    return NULL;
}

static void put(tfe_tensor **a, int slot, tfe_tensor *t)
{
    if (a[slot]) tensor_decref(a[slot]);
    a[slot] = t;
}

static tfe_tensor *zeros_like(const tfe_tensor *t) { return tfe_filled_like(t, 0.0); }

static tfe_tensor *filled(const tfe_tensor *t, double v)
{
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.dtype = t->dtype;
    at.nints = t->rank;
    for (int i = 0; i < t->rank; i++) at.ints[i] = t->shape[i] < 0 ? 0 : t->shape[i];
    at.f[0] = v;
    return tfe_call1(OP_FULL, 0, NULL, &at);
}

/* The slot's gradient is real from now on (something real was added to it). */
static void unflag(BP *b, int slot)
{
    if (b->none) put(b->none, slot, NULL);
}

static tfe_tensor *flag_const(bool v) { return tensor_from_i64(v, TFE_BOOL); }
static tfe_tensor *ref(tfe_tensor *t) { if (t) tensor_incref(t); return t; }

/* The flag of a sum of gradients flagged fa and fb (borrowed; NULL: real):
 * none only where both are (new ref, or NULL: real). */
static tfe_tensor *flag_and(tfe_tensor *fa, tfe_tensor *fb) { return tfe_grad_flag_and(fa, fb); }

/* c ? fa : fb for flags (borrowed; NULL: real), new ref or NULL. */
static tfe_tensor *flag_where(tfe_tensor *c, tfe_tensor *fa, tfe_tensor *fb)
{
    if (!fa && !fb) return NULL;
    if (fa == fb) return ref(fa);
    tfe_tensor *a = fa ? ref(fa) : flag_const(false), *bb = fb ? ref(fb) : flag_const(false);
    tfe_tensor *in[3] = {c, a, bb};
    tfe_tensor *r = a && bb ? tfe_call1(OP_WHERE, 3, in, NULL) : NULL;
    if (a) tensor_decref(a);
    if (bb) tensor_decref(bb);
    return r;
}

static int add_if(BP *b, int slot, const tfe_tensor *d, tfe_tensor *f, tfe_tensor *cond);

/* g[slot] += d (takes d), d's flag f (borrowed; NULL: real). */
static int acc_f(BP *b, int slot, tfe_tensor *d, tfe_tensor *f)
{
    if (!d) return -1;
    for (int w = 0; b->alias && w < NAL; w++)
        if (b->alias[NAL * slot + w] >= 0 && add_if(b, b->alias[NAL * slot + w], d, f, b->alias_first[NAL * slot + w])) {
            tensor_decref(d);
            return -1;
        }
    if (!dtype_is_float(d->dtype)) f = NULL; /* (an int's junk: no gradient, no flag) */
    put(b->none, slot, b->g[slot] ? flag_and(b->none[slot], f) : ref(f));
    return tfe_grad_add(&b->g[slot], d);
}

static int acc(BP *b, int slot, tfe_tensor *d) { return acc_f(b, slot, d, NULL); }

/* In a loop's first iteration, a loop variable that started as a captured
 * value is that value (eager code reads the one tensor): what reaches it
 * is added to the captured value's gradient then, in the order it comes;
 * the loop variable's own gradient of that iteration goes unused
 * (sweep_loop). add_if: g[slot] = cond ? g[slot] + d : g[slot] (cond a
 * traced bool, borrowed; d's flag f, borrowed, NULL: real), and on along
 * the chain when slot is such a loop variable itself, in its loop's first
 * iteration. */
static int add_if(BP *b, int slot, const tfe_tensor *d, tfe_tensor *f, tfe_tensor *cond)
{
    tensor_incref(cond);
    {
        tfe_tensor *cur = b->g[slot];
        tfe_tensor *sum = cur ? tfe_binary(OP_ADD, cur, (tfe_tensor *)d) : filled(d, -0.0);
        if (sum && !cur) { /* -0.0 + d: d */
            tfe_tensor *t = tfe_binary(OP_ADD, sum, (tfe_tensor *)d);
            tensor_decref(sum);
            sum = t;
        }
        tfe_tensor *keep = cur ? (tensor_incref(cur), cur) : filled(d, -0.0);
        tfe_tensor *in[3] = {cond, sum, keep};
        tfe_tensor *r = sum && keep ? tfe_call1(OP_WHERE, 3, in, NULL) : NULL;
        if (sum) tensor_decref(sum);
        if (keep) tensor_decref(keep);
        if (!r) {
            tensor_decref(cond);
            return -1;
        }
        /* none: cond ? (none so far and f) : none so far (no gradient: none) */
        if (b->none) {
            tfe_tensor *was = cur ? ref(b->none[slot]) : flag_const(true);
            tfe_tensor *now = flag_and(was, f);
            put(b->none, slot, flag_where(cond, now, was));
            if (now) tensor_decref(now);
            if (was) tensor_decref(was);
        }
        put(b->g, slot, r);
    }
    /* on along the chain: each alias under its own bool too */
    for (int w = 0; b->alias && w < NAL; w++) {
        if (b->alias[NAL * slot + w] < 0) continue;
        tfe_tensor *c2 = tfe_binary(OP_LOGICAL_AND, cond, b->alias_first[NAL * slot + w]);
        int rc = c2 ? add_if(b, b->alias[NAL * slot + w], d, f, c2) : -1;
        if (c2) tensor_decref(c2);
        if (rc) {
            tensor_decref(cond);
            return -1;
        }
    }
    tensor_decref(cond);
    return 0;
}

/* Does slot have an alias (BP.alias)? */
static bool has_alias(const BP *b, int slot)
{
    for (int w = 0; b->alias && w < NAL; w++)
        if (b->alias[NAL * slot + w] >= 0) return true;
    return false;
}

/* b->alias, made when first needed (none set). */
static void alias_init(BP *b)
{
    if (b->alias) return;
    int n = NAL * (b->G->nvals + 1);
    b->alias = xmalloc(sizeof *b->alias * (size_t)n);
    b->alias_first = xcalloc((size_t)n, sizeof *b->alias_first);
    for (int s = 0; s < n; s++) b->alias[s] = -1;
}

/* slot's alias w is to (-1: none), under cond (borrowed). */
static void alias_set(BP *b, int slot, int w, int to, tfe_tensor *cond)
{
    if (to >= 0) alias_init(b);
    if (!b->alias) return;
    b->alias[NAL * slot + w] = to;
    put(b->alias_first, NAL * slot + w, to >= 0 ? ref(cond) : NULL);
}

/* g[slot] = d + g[slot] (takes d; its flag f borrowed): a gradient so far,
 * before the rest. */
static int acc_first_f(BP *b, int slot, tfe_tensor *d, tfe_tensor *f)
{
    if (!dtype_is_float(d->dtype)) f = NULL;
    put(b->none, slot, b->g[slot] ? flag_and(b->none[slot], f) : ref(f));
    if (!b->g[slot]) {
        b->g[slot] = d;
        return 0;
    }
    tfe_tensor *s = tfe_binary(OP_ADD, d, b->g[slot]);
    tensor_decref(d);
    if (!s) return -1;
    put(b->g, slot, s);
    return 0;
}

static void bp_free(BP *b)
{
    for (int i = b->G->nvals + 1; i <= b->G->nvals + b->nlr; i++) {
        if (b->g[i]) tensor_decref(b->g[i]);
        if (b->none[i]) tensor_decref(b->none[i]);
    }
    free(b->lr_pslot);
    for (int j = 0; j < b->nlr; j++) {
        if (b->lr_in && b->lr_in[j]) tensor_decref(b->lr_in[j]);
        if (b->lr_g && b->lr_g[j]) tensor_decref(b->lr_g[j]);
        if (b->lr_f && b->lr_f[j]) tensor_decref(b->lr_f[j]);
    }
    free(b->lr_in);
    free(b->lr_g);
    free(b->lr_f);
    for (int i = 0; i <= b->G->nvals; i++) {
        if (b->m[i]) tensor_decref(b->m[i]);
        if (b->g[i]) tensor_decref(b->g[i]);
    }
    free(b->alias);
    for (int i = 0; i < NAL * (b->G->nvals + 1) && b->alias_first; i++)
        if (b->alias_first[i]) tensor_decref(b->alias_first[i]);
    free(b->alias_first);
    for (int i = 0; i <= b->G->nvals && b->none; i++)
        if (b->none[i]) tensor_decref(b->none[i]);
    free(b->none);
    for (int i = 0; i <= b->G->n; i++) {
        if (b->count[i]) tensor_decref(b->count[i]);
        if (b->fused) fused_free(b->fused[i]);
    }
    free(b->fused);
    for (int i = 0; i <= b->G->nvals && b->xv; i++)
        if (b->xv[i]) tensor_decref(b->xv[i]);
    for (int i = 0; i <= b->G->nvals && b->fo; i++)
        if (b->fo[i]) tensor_decref(b->fo[i]);
    for (int i = 0; i <= b->G->nvals && b->fx; i++)
        if (b->fx[i]) tensor_decref(b->fx[i]);
    free(b->fo);
    free(b->fx);
    for (int i = 0; i < 2 * (b->G->nvals + 1) && b->af_hist; i++) {
        if (b->af_hist[i]) tensor_decref(b->af_hist[i]);
        if (b->af_last[i]) tensor_decref(b->af_last[i]);
    }
    free(b->af_hist);
    free(b->af_last);
    for (int i = 0; i < 2 * (b->G->nvals + 1) && b->cond_rest; i++)
        if (b->cond_rest[i]) tensor_decref(b->cond_rest[i]);
    free(b->cond_rest);
    free(b->xv);
    free(b->xv_reg);
    free(b->m);
    free(b->g);
    free(b->count);
}

static bool differentiable(const tfe_meta *m) { return dtype_is_float(m->dtype); }

static int bp_error(BP *b, const GNode *n, const char *msg)
{
    return raise_at(b->I, n->loc, "%s", msg && *msg ? msg : "gradient failed");
}

/* --- the values a control-flow node uses from outside it ------------------------------ */

typedef struct Caps { int *slot; GRef *ref; int n; } Caps;

static bool node_inside(const Graph *G, int node, int id)
{
    for (int r = G->nodes[node].region; r >= 0; r = G->regions[r].parent)
        if (r == G->nodes[id].regions[0] || r == G->nodes[id].regions[1]) return true;
    return false;
}

/* The slot of the value from outside node id that v, a value in one of
 * id's regions, is on every path at run time (-1: none such): v itself
 * where it is from outside, or the result of a loop or an if nested in id
 * that is that one value every way it can end (a loop that starts from it
 * and whose body ends on it or passes it on: `a = x; for i in range(n) {
 * a = x }`; an if whose branches both end on it). Eager code holds that
 * one tensor by both names, so what reaches v adds to its running sum as
 * it comes (loop_out_alias, cond_out_alias; a nested loop's result used
 * to count as a value of its own: its sum, added to x's after, was a last
 * bit apart from eager's, stage_property seeds 262493 and 262776). */
static int outside_value(const Graph *G, int id, GRef v, int depth)
{
    if (depth > 8) return -1;
    if (!node_inside(G, v.node, id)) return slot_of(G, v);
    const GNode *x = &G->nodes[v.node];
    if (x->kind == G_WHILE) {
        const GRegion *rc = &G->regions[x->regions[0]], *rb = &G->regions[x->regions[1]];
        if (v.out >= rc->nparams || v.out >= rb->nouts || v.out >= x->nin) return -1;
        int s = outside_value(G, id, x->in[v.out], depth + 1);
        GRef o = rb->outs[v.out];
        bool passed = o.node == rc->params[v.out] || (v.out < rb->nparams && o.node == rb->params[v.out]);
        if (s < 0 || passed) return s; /* (passed on) */
        return outside_value(G, id, o, depth + 1) == s ? s : -1;
    }
    if (x->kind == G_COND) {
        int s[2];
        for (int br = 0; br < 2; br++) {
            const GRegion *r = &G->regions[x->regions[br]];
            s[br] = v.out < r->nouts ? outside_value(G, id, r->outs[v.out], depth + 1) : -1;
        }
        return s[0] >= 0 && s[0] == s[1] ? s[0] : -1;
    }
    return -1;
}

static void caps_add(Caps *c, const Graph *G, GRef r)
{
    int s = slot_of(G, r);
    for (int i = 0; i < c->n; i++)
        if (c->slot[i] == s) return;
    if (!differentiable(&G->nodes[r.node].meta[r.out])) return;
    c->slot = xrealloc(c->slot, sizeof *c->slot * (size_t)(c->n + 1));
    c->ref = xrealloc(c->ref, sizeof *c->ref * (size_t)(c->n + 1));
    c->slot[c->n] = s;
    c->ref[c->n++] = r;
}

static void caps_scan(Caps *c, const Graph *G, int id, int r)
{
    const GRegion *reg = &G->regions[r];
    for (int i = 0; i < reg->n; i++) {
        const GNode *n = &G->nodes[reg->nodes[i]];
        /* a variable read inside is a source too: its gradient leaves the
         * node like a captured value's */
        if (n->kind == G_VAR_READ) caps_add(c, G, (GRef){reg->nodes[i], 0});
        for (int k = 0; k < n->nin; k++)
            if (!node_inside(G, n->in[k].node, id)) caps_add(c, G, n->in[k]);
        if (n->kind == G_COND || n->kind == G_WHILE) {
            caps_scan(c, G, id, n->regions[0]);
            caps_scan(c, G, id, n->regions[1]);
        }
    }
    for (int k = 0; k < reg->nouts; k++)
        if (!node_inside(G, reg->outs[k].node, id)) caps_add(c, G, reg->outs[k]);
}

/* The differentiable values node id's regions read from outside it. */
static Caps captures(const Graph *G, int id)
{
    Caps c = {0};
    caps_scan(&c, G, id, G->nodes[id].regions[0]);
    caps_scan(&c, G, id, G->nodes[id].regions[1]);
    return c;
}

/* While a loop's first iteration is swept (b->alias), a node inside its
 * body that captures a loop variable which started as a captured value
 * captures that value too: what reaches the variable inside the node is
 * added to the value's gradient there (add_if), so the node hands the
 * value's whole gradient on, as it does its own captures'. */
static void caps_add_aliases(const BP *b, Caps *c)
{
    const Graph *G = b->G;
    for (int i = 0; b->alias && i < c->n; i++) /* (and those it adds: a chain) */
        for (int w = 0; w < NAL; w++) {
            int s = b->alias[NAL * c->slot[i] + w];
            for (int id = 0; s >= 0 && id < G->n; id++)
                if (s >= G->nodes[id].vbase && s < G->nodes[id].vbase + G->nodes[id].nout) {
                    caps_add(c, G, (GRef){id, s - G->nodes[id].vbase});
                    break;
                }
        }
}

static void caps_free(Caps *c)
{
    free(c->slot);
    free(c->ref);
}

/* --- replay: recompute forward values into the current trace -------------------------- */

static int replay_region(BP *b, int r);
static int sweep_region(BP *b, int r);

/* Build a region of the tracer's graph by running fn in symbolic mode. */
typedef int (*region_fn)(BP *b, void *ctx);
static int in_region(BP *b, int region, region_fn fn, void *ctx)
{
    Tracer *T = b->T;
    int saved_region = T->region, saved_effect = T->last_effect;
    bool saved_sym = T->symbolic;
    T->region = region;
    T->symbolic = true;
    T->last_effect = -1;
    int rc = fn(b, ctx);
    T->region = saved_region;
    T->symbolic = saved_sym;
    T->last_effect = saved_effect;
    return rc;
}

/* A new node of the tracer's graph with these inputs (already traced). */
static int new_cf_node(BP *b, GKind k, Loc loc, int nin, tfe_tensor *const *in, int nout)
{
    Tracer *T = b->T;
    GRef *refs = xmalloc(sizeof *refs * (size_t)(nin ? nin : 1));
    for (int i = 0; i < nin; i++) refs[i] = trace_ref(T, in[i]);
    int id = graph_add(T->g, T->region, k, nin, nout);
    GNode *n = gnode(T->g, id);
    mem_copy(n->in, refs, sizeof *refs * (size_t)nin);
    free(refs);
    n->loc = loc;
    n->frames = T->last_frames;
    n->effect_dep = T->last_effect;
    T->last_effect = id;
    return id;
}

static void set_outs(Graph *g, int region, int n, tfe_tensor *const *vals, Tracer *T)
{
    int saved = T->region;
    T->region = region;
    GRef *outs = xcalloc((size_t)(n ? n : 1), sizeof *outs);
    for (int k = 0; k < n; k++) outs[k] = trace_ref(T, vals[k]);
    g->regions[region].outs = outs;
    g->regions[region].nouts = n;
    T->region = saved;
}

/* The values of cond id's branches that its backward reads, handed out of
 * the replayed cond after its outputs: the outputs of the ops of each
 * branch's own region (not random, not collective) that are not the
 * branch's results (those are the cond's outputs already), where the
 * replay gave them a known shape. Each is branch br's; the other branch
 * gives zeros of its shape in its place. */
typedef struct CondX { int n, *slot, *br, *node; } CondX; /* node: whose value slot[j] is */

static bool is_branch_out(const GRegion *reg, int node, int out)
{
    for (int k = 0; k < reg->nouts; k++)
        if (reg->outs[k].node == node && reg->outs[k].out == out) return true;
    return false;
}

static bool x_node(const GNode *x)
{
    return x->kind == G_OP && !(tfe_ops[x->op].flags & (F_RANDOM | F_COLLECTIVE));
}

static void cond_x_add(CondX *x, int *cap, int slot, int br, int node)
{
    if (x->n == *cap) {
        *cap = *cap ? 2 * *cap : 8;
        x->slot = xrealloc(x->slot, sizeof *x->slot * (size_t)*cap);
        x->br = xrealloc(x->br, sizeof *x->br * (size_t)*cap);
        x->node = xrealloc(x->node, sizeof *x->node * (size_t)*cap);
    }
    x->slot[x->n] = slot;
    x->br[x->n] = br;
    x->node[x->n++] = node;
}

/* The values of region r (branch br's, or a region inside it): its ops'
 * that are not its results, and those of the conds in it: their outputs
 * (that are not r's results) and, inside them, the same again. A nested
 * cond hands those out of its own replay (replay_cond), so the outermost
 * one hands out every value its backward reads, at every depth. */
static void cond_x_region(const Graph *G, int r, int br, CondX *x, int *cap)
{
    const GRegion *reg = &G->regions[r];
    for (int i = 0; i < reg->n; i++) {
        const GNode *y = &G->nodes[reg->nodes[i]];
        if (!x_node(y) && y->kind != G_COND) continue;
        for (int k = 0; k < y->nout; k++)
            if (!is_branch_out(reg, reg->nodes[i], k)) cond_x_add(x, cap, y->vbase + k, br, reg->nodes[i]);
        if (y->kind == G_COND) {
            cond_x_region(G, y->regions[0], br, x, cap);
            cond_x_region(G, y->regions[1], br, x, cap);
        }
    }
}

static CondX cond_x(const Graph *G, const GNode *n)
{
    CondX x = {0, NULL, NULL, NULL};
    int cap = 0;
    for (int br = 0; br < 2; br++) cond_x_region(G, n->regions[br], br, &x, &cap);
    return x;
}

static void cond_x_free(CondX *x)
{
    free(x->slot);
    free(x->br);
    free(x->node);
}

static void meta_of(tfe_meta *m, const tfe_tensor *t);

/* vals: per branch, the outputs, then the handed-out values (borrowed) and
 * the other branch's zeros in their places (fill: owned) */
typedef struct CondCtx { int id, branch; tfe_tensor **outs; const CondX *x; tfe_tensor **fill, **other; } CondCtx;

static int replay_branch(BP *b, void *p)
{
    CondCtx *c = p;
    const GNode *n = &b->G->nodes[c->id];
    int r = n->regions[c->branch];
    if (replay_region(b, r)) return -1;
    const GRegion *reg = &b->G->regions[r];
    for (int k = 0; k < reg->nouts; k++) c->outs[k] = b->m[slot_of(b->G, reg->outs[k])];
    for (int j = 0; j < c->x->n; j++) {
        if (c->x->br[j] != c->branch) continue;
        int s = c->x->slot[j];
        /* a value inside a nested cond: what its replay here handed out
         * (none: replayed again in the backward) */
        if (b->G->nodes[c->x->node[j]].region != r)
            c->outs[n->nout + j] = b->xv && b->xv_reg[s] == b->T->region ? b->xv[s] : NULL;
        else
            c->outs[n->nout + j] = b->m[s];
    }
    return 0;
}

/* In branch c->branch's region: zeros for the other branch's values. */
static int fill_branch(BP *b, void *p)
{
    CondCtx *c = p;
    const GNode *n = &b->G->nodes[c->id];
    for (int j = 0; j < c->x->n; j++) {
        if (c->x->br[j] == c->branch) continue;
        if (!(c->fill[j] = filled(c->other[n->nout + j], 0.0))) return -1;
        c->outs[n->nout + j] = c->fill[j];
    }
    return 0;
}

static bool known_shape(const tfe_tensor *t)
{
    if (!t) return false;
    for (int d = 0; d < t->rank; d++)
        if (t->shape[d] < 0) return false;
    return true;
}

static int replay_cond(BP *b, int id)
{
    Graph *G = b->G, *g = b->T->g;
    const GNode *n = &G->nodes[id];
    int nout = n->nout;
    CondX x = cond_x(G, n);
    int nall = nout + x.n;
    int r[2];
    tfe_tensor **vals[2], **fill = xcalloc((size_t)x.n + 1, sizeof *fill);
    for (int br = 0; br < 2; br++) vals[br] = xcalloc((size_t)(nall ? nall : 1), sizeof *vals[br]);
    for (int br = 0; br < 2; br++) {
        r[br] = graph_add_region(g, b->T->region);
        CondCtx c = {id, br, vals[br], &x, fill, NULL};
        if (in_region(b, r[br], replay_branch, &c)) goto fail;
    }
    /* (a value of unknown size is replayed again in the backward instead) */
    int nx = 0;
    for (int j = 0; j < x.n; j++) {
        tfe_tensor *t = vals[x.br[j]][nout + j];
        if (!known_shape(t)) continue;
        x.slot[nx] = x.slot[j];
        x.br[nx] = x.br[j];
        x.node[nx] = x.node[j];
        for (int br = 0; br < 2; br++) vals[br][nout + nx] = vals[br][nout + j];
        nx++;
    }
    x.n = nx;
    nall = nout + nx;
    for (int br = 0; br < 2; br++) {
        CondCtx c = {id, br, vals[br], &x, fill, vals[1 - br]};
        int rc = in_region(b, r[br], fill_branch, &c);
        if (!rc) set_outs(g, r[br], nall, vals[br], b->T);
        for (int j = 0; j < x.n; j++)
            if (fill[j]) tensor_decref(fill[j]), fill[j] = NULL;
        if (rc) goto fail;
    }
    tfe_tensor *pred = b->m[slot_of(G, n->in[0])];
    int nid = new_cf_node(b, G_COND, n->loc, 1, &pred, nall);
    GNode *nn = gnode(g, nid);
    nn->regions[0] = r[0];
    nn->regions[1] = r[1];
    mem_copy(nn->meta, G->nodes[id].meta, sizeof *nn->meta * (size_t)nout);
    for (int j = 0; j < x.n; j++) meta_of(&nn->meta[nout + j], vals[x.br[j]][nout + j]);
    tfe_tensor **outs = xcalloc((size_t)(nall ? nall : 1), sizeof *outs);
    if (trace_node_outputs(b->T, nid, outs)) {
        free(outs);
        goto fail;
    }
    if (!b->xv) {
        b->xv = xcalloc((size_t)G->nvals + 1, sizeof *b->xv);
        b->xv_reg = xcalloc((size_t)G->nvals + 1, sizeof *b->xv_reg);
    }
    /* a branch's result is the cond's output: the backward reads that one */
    for (int br = 0; br < 2; br++) {
        const GRegion *reg = &G->regions[n->regions[br]];
        for (int k = 0; k < reg->nouts && k < nout; k++) {
            const GNode *y = &G->nodes[reg->outs[k].node];
            if (y->region != n->regions[br] || (!x_node(y) && y->kind != G_COND)) continue;
            int s = slot_of(G, reg->outs[k]);
            if (b->xv[s] && b->xv_reg[s] == b->T->region) continue; /* (the first output it is) */
            put(b->xv, s, ref(outs[k]));
            b->xv_reg[s] = b->T->region;
        }
    }
    for (int j = 0; j < x.n; j++) {
        tfe_tensor *f = b->fx && n->region == 0 ? b->fx[x.slot[j]] : NULL;
        if (f) { /* the forward's own value (kept): what the backward reads of it */
            tensor_decref(outs[nout + j]);
            outs[nout + j] = ref(f);
        }
        put(b->xv, x.slot[j], outs[nout + j]);
        b->xv_reg[x.slot[j]] = b->T->region;
    }
    for (int k = 0; k < nout; k++) {
        tfe_tensor *f = b->fo && n->region == 0 ? b->fo[n->vbase + k] : NULL;
        if (f) { /* the forward's own output: what the backward reads of it */
            for (int s = 0; s <= G->nvals; s++)
                if (b->xv[s] == outs[k]) put(b->xv, s, ref(f));
            tensor_decref(outs[k]);
            outs[k] = ref(f);
        }
        put(b->m, G->nodes[id].vbase + k, outs[k]);
    }
    free(outs);
    free(vals[0]);
    free(vals[1]);
    free(fill);
    cond_x_free(&x);
    return 0;
fail:
    free(vals[0]);
    free(vals[1]);
    free(fill);
    cond_x_free(&x);
    return -1;
}

/* A while replayed for a backward: outputs are the carried values, then
 * each carried value of every iteration stacked (shape (n, ...)), then n. */
static int logged_values_at(BP *b, int id, int region, tfe_tensor *i);
static tfe_tensor *alias_flag(BP *b, int body, GRef v, int target, int depth, bool *err);

typedef struct LoopCtx {
    int id;
    tfe_tensor **vals;
    tfe_tensor *counter; /* a loop with logged reads: the iteration, a param of its own (else NULL) */
    tfe_tensor *next;    /* ... and its next value (owned) */
    /* variables that are another value on some iterations (loop_cond_targets):
     * fk[q] the variable, ft[q] the value's slot, carried from fl0 on, as
     * the flag of whether the body ends it on that value (fl[q], owned) */
    int nfl, fl0;
    int *fk, *ft;
    tfe_tensor **fl;
} LoopCtx;

static int replay_loop_cond(BP *b, void *p)
{
    LoopCtx *c = p;
    const GNode *n = &b->G->nodes[c->id];
    const GRegion *rc = &b->G->regions[n->regions[0]];
    if (c->counter && logged_values_at(b, c->id, n->regions[0], c->counter)) return -1;
    if (replay_region(b, n->regions[0])) return -1;
    c->vals[0] = b->m[slot_of(b->G, rc->outs[0])];
    return 0;
}

static int replay_loop_body(BP *b, void *p)
{
    LoopCtx *c = p;
    const GNode *n = &b->G->nodes[c->id];
    const GRegion *rb = &b->G->regions[n->regions[1]];
    if (c->counter && logged_values_at(b, c->id, n->regions[1], c->counter)) return -1;
    if (replay_region(b, n->regions[1])) return -1;
    for (int k = 0; k < rb->nouts; k++) c->vals[k] = b->m[slot_of(b->G, rb->outs[k])];
    if (c->counter) {
        tfe_tensor *one = tensor_from_i64(1, TFE_INT64);
        c->next = one ? tfe_binary(OP_ADD, c->counter, one) : NULL;
        if (one) tensor_decref(one);
        if (!c->next) return -1;
        c->vals[rb->nouts] = c->next;
    }
    for (int q = 0; q < c->nfl; q++) {
        bool err = false;
        tfe_tensor *f = alias_flag(b, n->regions[1], rb->outs[c->fk[q]], c->ft[q], 0, &err);
        if (!f && !err) f = flag_const(false);
        if (!f) return -1;
        put(c->fl, q, f);
        c->vals[c->fl0 + q] = f;
    }
    return 0;
}

/* Params of a new while in the tracer's graph, standing for G's params. */
static void make_params(BP *b, int rcond, int nc, const tfe_meta *meta, const int *gparams, tfe_tensor **sym)
{
    Graph *g = b->T->g;
    GRegion *reg = &g->regions[rcond];
    reg->params = xcalloc((size_t)(nc ? nc : 1), sizeof *reg->params);
    reg->nparams = nc;
    for (int k = 0; k < nc; k++) {
        int p = graph_add(g, rcond, G_PARAM, 0, 1);
        gnode(g, p)->meta[0] = meta[k];
        g->regions[rcond].params[k] = p;
        tfe_tensor *sp = tensor_symbolic(meta[k].dtype, meta[k].weak, meta[k].rank, meta[k].shape);
        trace_note(b->T, sp, (GRef){p, 0});
        sym[k] = sp;
        if (gparams) put(b->m, b->G->nodes[gparams[k]].vbase, (tensor_incref(sp), sp));
        tensor_decref(sp); /* the tracer's note keeps it */
    }
}

/* The variables region r (and the regions in it) reads into reads[]
 * (at most cap; returns how many), and whether it calls a method bound to
 * one of them (assign, assign_add, assign_sub: host-call effects). */
static int region_var_reads(const Graph *G, int r, const Obj **reads, int n, int cap)
{
    const GRegion *reg = &G->regions[r];
    for (int i = 0; i < reg->n; i++) {
        const GNode *x = &G->nodes[reg->nodes[i]];
        /* (a read a traced cond hands on has its value: stage/trace_cf.c, export_reads) */
        if (x->kind == G_VAR_READ && !x->outer_out && n < cap) reads[n++] = x->host->obj.u.o;
        if (x->kind == G_COND || x->kind == G_WHILE)
            for (int k = 0; k < 2; k++) n = region_var_reads(G, x->regions[k], reads, n, cap);
    }
    return n;
}

static bool region_assigns(const Graph *G, int r, const Obj **reads, int n)
{
    const GRegion *reg = &G->regions[r];
    for (int i = 0; i < reg->n; i++) {
        const GNode *x = &G->nodes[reg->nodes[i]];
        if (x->kind == G_HOST && x->host->obj.kind == V_BUILTIN) {
            const Value self = ((const Builtin *)x->host->obj.u.o)->self;
            for (int k = 0; k < n && self.kind == V_OBJECT; k++)
                if (self.u.o == reads[k]) return true;
        }
        if ((x->kind == G_COND || x->kind == G_WHILE) &&
            (region_assigns(G, x->regions[0], reads, n) || region_assigns(G, x->regions[1], reads, n)))
            return true;
    }
    return false;
}

/* Marks in taint (by G node) what in region r depends on a read of one of
 * vars or on a node already marked (a nested cond or loop as a whole, when
 * anything in it does); returns whether anything new was marked. */
static bool taint_region(const Graph *G, int r, const Obj **vars, int nv, bool *taint)
{
    bool grew = false;
    const GRegion *reg = &G->regions[r];
    for (int i = 0; i < reg->n; i++) {
        int id = reg->nodes[i];
        const GNode *x = &G->nodes[id];
        bool t = false;
        if (x->kind == G_VAR_READ && !x->outer_out)
            for (int k = 0; k < nv && !t; k++) t = x->host->obj.u.o == vars[k];
        for (int k = 0; k < x->nin && !t; k++) t = taint[x->in[k].node];
        if (x->kind == G_COND || x->kind == G_WHILE)
            for (int k = 0; k < 2; k++) t |= taint_region(G, x->regions[k], vars, nv, taint);
        if (t && !taint[id]) taint[id] = grew = true;
    }
    return grew;
}

/* Does a read of one of vars in loop id reach its condition or a value its
 * body carries (in a later iteration too)? */
static bool loop_reads_reach(const Graph *G, int id, const Obj **vars, int nv)
{
    const GNode *w = &G->nodes[id];
    const GRegion *rc = &G->regions[w->regions[0]], *rb = &G->regions[w->regions[1]];
    bool *taint = xcalloc((size_t)G->n + 1, 1), hit = false;
    for (bool grew = true; grew && !hit;) {
        grew = taint_region(G, w->regions[0], vars, nv, taint);
        grew |= taint_region(G, w->regions[1], vars, nv, taint);
        for (int k = 0; k < rb->nouts && k < rc->nparams; k++)
            if (taint[rb->outs[k].node] && !taint[rc->params[k]]) taint[rc->params[k]] = grew = true;
        hit = rc->nouts && taint[rc->outs[0].node];
        for (int k = 0; k < rb->nouts && !hit; k++) hit = taint[rb->outs[k].node];
    }
    free(taint);
    return hit;
}

/* Can loop id's reads of the variables it assigns be logged (BP.lr_*):
 * a loop of the top region whose reads of those are all directly in its
 * body (a read in its condition, or in an if or loop inside it, runs a
 * number of times of its own)? *any: it reads a variable it assigns. */
static bool loop_loggable(const Graph *G, int id, bool *any)
{
    const GNode *w = &G->nodes[id];
    bool ok = w->region == 0;
    *any = false;
    for (int i = 0; i < G->n; i++) {
        const GNode *x = &G->nodes[i];
        if (x->kind != G_VAR_READ || x->outer_out || !node_inside(G, i, id)) continue;
        const Obj *o = x->host->obj.u.o;
        if (!region_assigns(G, w->regions[0], &o, 1) && !region_assigns(G, w->regions[1], &o, 1)) continue;
        *any = true;
        ok &= x->region == w->regions[0] || x->region == w->regions[1];
    }
    return ok && *any;
}

/* The logged reads of G (BP.lr_*): their nodes and loops (owned arrays),
 * in node order; returns how many. */
static int logged_reads(const Graph *G, int **nodes, int **loops)
{
    int n = 0;
    *nodes = *loops = NULL;
    for (int id = 0; id < G->n; id++) {
        bool any;
        if (G->nodes[id].kind != G_WHILE || !loop_loggable(G, id, &any)) continue;
        const GNode *w = &G->nodes[id];
        for (int i = 0; i < G->n; i++) {
            const GNode *x = &G->nodes[i];
            if (x->kind != G_VAR_READ || x->outer_out || (x->region != w->regions[0] && x->region != w->regions[1]))
                continue;
            const Obj *o = x->host->obj.u.o;
            if (!region_assigns(G, w->regions[0], &o, 1) && !region_assigns(G, w->regions[1], &o, 1)) continue;
            *nodes = xrealloc(*nodes, sizeof **nodes * (size_t)(n + 1));
            *loops = xrealloc(*loops, sizeof **loops * (size_t)(n + 1));
            (*nodes)[n] = i;
            (*loops)[n++] = id;
        }
    }
    return n;
}

/* Is x a host call of a method bound to o (an assign)? */
static bool host_of(const GNode *x, const Obj *o)
{
    return x->kind == G_HOST && x->host->obj.kind == V_BUILTIN &&
           ((const Builtin *)x->host->obj.u.o)->self.kind == V_OBJECT && ((const Builtin *)x->host->obj.u.o)->self.u.o == o;
}

/* The read of o in the top region next to loop id (dir -1: before it, +1:
 * after it) with nothing between that may assign o (a host call, an if or
 * loop), or -1: the tensor the loop starts (ends) with. */
static int read_next_to(const Graph *G, int id, const Obj *o, int dir)
{
    const GRegion *top = &G->regions[0];
    int at = -1;
    for (int i = 0; i < top->n && at < 0; i++)
        if (top->nodes[i] == id) at = i;
    for (int i = at + dir; at >= 0 && i >= 0 && i < top->n; i += dir) {
        const GNode *x = &G->nodes[top->nodes[i]];
        if (x->kind == G_VAR_READ && !x->outer_out && x->host->obj.u.o == o) return top->nodes[i];
        if (x->kind == G_HOST || x->kind == G_COND || x->kind == G_WHILE) return -1;
    }
    return -1;
}

/* Which logged reads are one tensor across iterations (role, by logged
 * read; 0: none). A loop whose body assigns o A > 0 times, all directly in
 * it, reads in iteration k the tensor it starts with before the first
 * assign (segment 0) and after the last one (segment A) the tensor the
 * next iteration starts with: a read in segment A (role 2) and one in
 * segment 0 (role 1; mate: each other's index, or -1) read one tensor in
 * iterations k and k + 1; and one in segment 0 in the first iteration the
 * tensor a read before the loop read (pre: its node, or -1), one in
 * segment A in the last the tensor a read after it reads (post). */
static void logged_roles(const Graph *G, const int *nodes, const int *loops, int n, int *role, int *mate, int *pre,
                         int *post)
{
    for (int j = 0; j < n; j++) {
        role[j] = 0;
        mate[j] = pre[j] = post[j] = -1;
    }
    for (int j = 0; j < n; j++)
        if (G->nodes[nodes[j]].region == G->nodes[loops[j]].regions[0]) role[j] = 3;
    for (int j = 0; j < n; j++) {
        const GNode *w = &G->nodes[loops[j]];
        const Obj *o = G->nodes[nodes[j]].host->obj.u.o;
        const GRegion *body = &G->regions[w->regions[1]];
        if (role[j] == 3) continue;
        bool direct = !region_assigns(G, w->regions[0], &o, 1);
        int A = 0;
        for (int i = 0; i < body->n; i++) {
            const GNode *x = &G->nodes[body->nodes[i]];
            A += host_of(x, o);
            if ((x->kind == G_COND || x->kind == G_WHILE) &&
                (region_assigns(G, x->regions[0], &o, 1) || region_assigns(G, x->regions[1], &o, 1)))
                direct = false;
        }
        if (!direct || !A) continue;
        int j0 = -1, jA = -1, n0 = 0, nA = 0;
        for (int q = 0; q < n; q++) {
            if (loops[q] != loops[j] || G->nodes[nodes[q]].host->obj.u.o != o || role[q] == 3) continue;
            int seg = 0;
            for (int i = 0; i < body->n && body->nodes[i] != nodes[q]; i++) seg += host_of(&G->nodes[body->nodes[i]], o);
            if (seg == 0) { j0 = q; n0++; }
            if (seg == A) { jA = q; nA++; }
        }
        if (n0 > 1 || nA > 1) continue; /* (then its tensors read twice are refused: log_check) */
        if (j0 >= 0) {
            role[j0] = 1;
            mate[j0] = jA;
            pre[j0] = read_next_to(G, loops[j], o, -1);
        }
        if (jA >= 0) {
            role[jA] = 2;
            mate[jA] = j0;
            post[jA] = read_next_to(G, loops[j], o, 1);
        }
    }
}

/* Is loop id's every read of a variable it assigns logged (BP.lr_*)? */
static bool loop_logged(const BP *b, int id)
{
    for (int j = 0; j < b->nlr; j++)
        if (b->lr_loop[j] == id && b->lr_in && b->lr_in[j]) return true;
    return false;
}

/* Iteration i's value of logged read j (new ref, traced), or NULL. */
static tfe_tensor *logged_value(BP *b, int j, tfe_tensor *i)
{
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.axes[0] = 0;
    at.naxes = 1;
    tfe_tensor *in[2] = {b->lr_in[j], i};
    return tfe_call1(OP_GATHER, 2, in, &at);
}

/* In loop id's iteration i, its logged reads in region (its condition's
 * or body's) take that iteration's values. */
static int logged_values_at(BP *b, int id, int region, tfe_tensor *i)
{
    for (int j = 0; j < b->nlr; j++) {
        if (b->lr_loop[j] != id || b->G->nodes[b->lr_node[j]].region != region) continue;
        tfe_tensor *t = logged_value(b, j, i);
        if (!t) return -1;
        put(b->m, b->G->nodes[b->lr_node[j]].vbase, t);
    }
    return 0;
}

/* --- loop variables that are another value on some iterations only --------------------- */

/* A loop variable k whose body ends it on an if's result, where a branch
 * ends that on a captured value (`if c { b = x }`) or on the value the
 * body ends another variable q on (`if c { b = acc }`), is that tensor in
 * the next iteration (and after the loop) only where the branch ran: eager
 * code adds what reaches it to that tensor's one running sum. The values
 * it may be (at most two), by slot in G (t[j]: the captured value, or q's
 * value in the body; kp[j] = q or -1); returns how many (ifs directly in
 * the body only, nested in branches too; not for a body with a fused node,
 * nor one ending it on a captured value always: loop_out_alias). */
/* Is region r a branch of a cond directly in region body, or of one in
 * such a branch, and so on (up to depth 8)? The replay of the outermost
 * such cond hands out the values of every branch inside it, at every depth
 * (cond_x_region, replay_cond). */
static bool in_body_branch(const Graph *G, int body, int r, int depth)
{
    if (depth > 8 || r < 0 || r == body) return false;
    int p = G->regions[r].parent;
    if (p < 0) return false;
    const GRegion *pr = &G->regions[p];
    for (int i = 0; i < pr->n; i++) {
        const GNode *y = &G->nodes[pr->nodes[i]];
        if (y->kind == G_COND && (y->regions[0] == r || y->regions[1] == r))
            return p == body || in_body_branch(G, body, p, depth + 1);
    }
    return false;
}

/* Is node x a cond directly in region body, or in a branch of one, at any
 * depth (whose predicate the replay of the outermost hands out)? */
static bool body_cond(const Graph *G, int body, int x)
{
    const GNode *c = &G->nodes[x];
    if (c->kind != G_COND) return false;
    return c->region == body || in_body_branch(G, body, c->region, 0);
}

static void leaves_of(const Graph *G, int id, int k, GRef v, int depth, int *t, int *kp, int *n)
{
    const GNode *w = &G->nodes[id], *c = &G->nodes[v.node];
    const GRegion *rc = &G->regions[w->regions[0]], *rb = &G->regions[w->regions[1]];
    if (depth > 8 || !body_cond(G, w->regions[1], v.node)) return;
    for (int br = 0; br < 2 && *n < 2; br++) {
        const GRegion *r = &G->regions[c->regions[br]];
        if (v.out >= r->nouts) continue;
        GRef o = r->outs[v.out];
        if (!differentiable(&G->nodes[o.node].meta[o.out])) continue;
        if (node_inside(G, o.node, v.node) && !body_cond(G, w->regions[1], o.node)) continue;
        int s = slot_of(G, o), q = -1;
        bool leaf = !node_inside(G, o.node, id);
        for (int p = 0; p < rb->nouts && p < rc->nparams && !leaf; p++)
            if (p != k && slot_of(G, rb->outs[p]) == s) {
                q = p;
                leaf = true;
            }
        if (!leaf) {
            leaves_of(G, id, k, o, depth + 1, t, kp, n);
            continue;
        }
        bool seen = false;
        for (int j = 0; j < *n; j++) seen |= t[j] == s;
        if (seen) continue;
        t[*n] = s;
        kp[(*n)++] = q;
    }
}

static int loop_cond_targets(const Graph *G, int id, int k, int *t, int *kp)
{
    const GNode *w = &G->nodes[id];
    const GRegion *rc = &G->regions[w->regions[0]], *rb = &G->regions[w->regions[1]];
    int n = 0;
    if (k >= rb->nouts || k >= rc->nparams || !differentiable(&w->meta[k])) return 0;
    for (int i = 0; i < rb->n; i++)
        if (G->nodes[rb->nodes[i]].kind == G_FUSED) return 0;
    /* (a body that always ends it on the value it ends an earlier variable
     * q on, b = acc last: that value at every iteration, flag true) */
    int s = slot_of(G, rb->outs[k]);
    for (int q = 0; q < k && q < rc->nparams; q++)
        if (slot_of(G, rb->outs[q]) == s && node_inside(G, rb->outs[k].node, id) &&
            differentiable(&G->nodes[rb->outs[k].node].meta[rb->outs[k].out])) {
            t[0] = s;
            kp[0] = q;
            return 1;
        }
    leaves_of(G, id, k, rb->outs[k], 0, t, kp, &n);
    return n;
}

/* Whether v (a value of loop body region body, as replayed) is the value
 * at slot target: a traced bool (new ref), NULL where never; *err on a
 * failure. */
static tfe_tensor *alias_flag(BP *b, int body, GRef v, int target, int depth, bool *err)
{
    const Graph *G = b->G;
    if (slot_of(G, v) == target) return flag_const(true);
    const GNode *c = &G->nodes[v.node];
    if (depth > 8 || !body_cond(G, body, v.node)) return NULL;
    /* (a predicate made in a branch, at any depth: the value the outermost
     * cond's replay handed out, false where another branch ran, which the
     * outer predicates mask) */
    int ps = slot_of(G, c->in[0]);
    const GNode *pn = &G->nodes[c->in[0].node];
    bool handed = in_body_branch(G, body, pn->region, 0);
    tfe_tensor *pred = handed ? (b->xv ? b->xv[ps] : NULL) : b->m[ps];
    if (!pred || pred->dtype != TFE_BOOL) return NULL;
    tfe_tensor *f[2] = {NULL, NULL};
    for (int br = 0; br < 2; br++) {
        const GRegion *r = &G->regions[c->regions[br]];
        if (v.out < r->nouts && (!node_inside(G, r->outs[v.out].node, v.node) || body_cond(G, body, r->outs[v.out].node)))
            f[br] = alias_flag(b, body, r->outs[v.out], target, depth + 1, err);
    }
    tfe_tensor *res = NULL;
    if (f[0] || f[1]) {
        for (int br = 0; br < 2; br++)
            if (!f[br]) f[br] = flag_const(false);
        tfe_tensor *in[3] = {pred, f[0], f[1]};
        res = f[0] && f[1] ? tfe_call1(OP_WHERE, 3, in, NULL) : NULL;
        if (!res) *err = true;
    }
    for (int br = 0; br < 2; br++)
        if (f[br]) tensor_decref(f[br]);
    return res;
}

static int replay_loop(BP *b, int id)
{
    /* A variable read in the loop is a source of the backward with one
     * value, like a captured one; a loop that also assigns it reads another
     * value at every iteration, which that cannot express: refuse rather
     * than give a wrong gradient. Unless those reads reach neither the
     * condition nor a value the loop carries (they feed its assigns, say):
     * then the replay's values and the backward do not depend on them, and
     * their gradients are none; with a tape made in the trace that ran the
     * loop, that tape adds what eager code adds for them (builtins_
     * autodiff.c, loop_zeros). A tape outside (a staged call's backward of
     * its own) has each iteration's tensors where the loop's reads are
     * logged (BP.lr_*: the replay below carries the iteration and takes
     * iteration i's); elsewhere refused. */
    {
        const Obj *reads[64];
        const GNode *w = &b->G->nodes[id];
        int nr = region_var_reads(b->G, w->regions[1], reads, 0, 64);
        nr = region_var_reads(b->G, w->regions[0], reads, nr, 64);
        if (nr && (nr == 64 || region_assigns(b->G, w->regions[1], reads, nr)) && !loop_logged(b, id) &&
            (!b->noted_loops || w->region != 0 || nr == 64 || loop_reads_reach(b->G, id, reads, nr)))
            return bp_error(b, w, "gradients through a staged loop that assigns a variable it reads are not "
                                  "supported (keep the value in a loop variable and assign the variable after "
                                  "the loop, or take the gradient eagerly: run_eagerly(true))");
    }
    Graph *G = b->G, *g = b->T->g;
    const GNode *n = &G->nodes[id];
    const GRegion *grc = &G->regions[n->regions[0]];
    int nc = grc->nparams;
    /* a while replayed for a backward has 2 nw + 1 outputs; one with logged
     * reads carries its iteration too (nw = nc + 1) */
    bool logged = loop_logged(b, id);
    int *fk = xcalloc((size_t)(2 * nc) + 1, sizeof *fk), *ft = xcalloc((size_t)(2 * nc) + 1, sizeof *ft), nfl = 0;
    for (int k = 0; k < nc; k++) { /* (flag q: variable fk[q]'s target q - first one of it) */
        int t[2], kp[2], nt = loop_cond_targets(G, id, k, t, kp);
        for (int j = 0; j < nt; j++) {
            fk[nfl] = k;
            ft[nfl++] = t[j];
        }
    }
    tfe_tensor **fl = xcalloc((size_t)nfl + 1, sizeof *fl), **finit = xcalloc((size_t)nfl + 1, sizeof *finit);
    int nw = nc + logged + nfl;
    int rcond = graph_add_region(g, b->T->region);
    int rbody = graph_add_region(g, rcond);
    tfe_tensor **sym = xcalloc((size_t)nw + 1, sizeof *sym);
    tfe_tensor **vals = xcalloc((size_t)nw + 1, sizeof *vals);
    tfe_tensor **init = xcalloc((size_t)nw + 1, sizeof *init);
    tfe_tensor *zero = NULL;
    int rc = -1;
    make_params(b, rcond, nc, n->meta, grc->params, sym);
    LoopCtx c = {id, vals, NULL, NULL, nfl, nc + logged, fk, ft, fl};
    if (logged) {
        GRegion *reg = &g->regions[rcond];
        reg->params = xrealloc(reg->params, sizeof *reg->params * (size_t)nw);
        int p = graph_add(g, rcond, G_PARAM, 0, 1);
        gnode(g, p)->meta[0] = (tfe_meta){.dtype = TFE_INT64, .rank = 0};
        g->regions[rcond].params[nc] = p;
        g->regions[rcond].nparams = nw;
        tfe_tensor *sp = tensor_symbolic(TFE_INT64, false, 0, NULL);
        trace_note(b->T, sp, (GRef){p, 0});
        sym[nc] = c.counter = sp;
        tensor_decref(sp); /* the tracer's note keeps it */
    }
    for (int q = 0; q < nfl; q++) { /* the flags: params of their own */
        GRegion *reg = &g->regions[rcond];
        reg->params = xrealloc(reg->params, sizeof *reg->params * (size_t)(nc + logged + q + 1));
        int p = graph_add(g, rcond, G_PARAM, 0, 1);
        gnode(g, p)->meta[0] = (tfe_meta){.dtype = TFE_BOOL, .rank = 0};
        g->regions[rcond].params[nc + logged + q] = p;
        g->regions[rcond].nparams = nc + logged + q + 1;
        tfe_tensor *sp = tensor_symbolic(TFE_BOOL, false, 0, NULL);
        trace_note(b->T, sp, (GRef){p, 0});
        sym[nc + logged + q] = sp;
        tensor_decref(sp);
    }
    if (in_region(b, rcond, replay_loop_cond, &c)) goto out;
    set_outs(g, rcond, 1, vals, b->T);
    if (in_region(b, rbody, replay_loop_body, &c)) goto out;
    set_outs(g, rbody, nw, vals, b->T);
    for (int k = 0; k < nc; k++) init[k] = b->m[slot_of(G, n->in[k])];
    if (logged) {
        if (!(zero = tensor_from_i64(0, TFE_INT64))) goto out;
        init[nc] = zero;
    }
    for (int q = 0; q < nfl; q++) /* (the first iteration's variable is its initial value) */
        if (!(init[nc + logged + q] = finit[q] = flag_const(false))) goto out;
    int nid = new_cf_node(b, G_WHILE, n->loc, nw, init, 2 * nw + 1);
    GNode *nn = gnode(g, nid);
    nn->regions[0] = rcond;
    nn->regions[1] = rbody;
    for (int k = 0; k < nw; k++) {
        nn->meta[k] = k < nc ? n->meta[k]
                      : k >= nc + logged ? (tfe_meta){.dtype = TFE_BOOL, .rank = 0}
                                         : (tfe_meta){.dtype = TFE_INT64, .rank = 0};
        tfe_meta h = nn->meta[k];
        mem_move(h.shape + 1, h.shape, sizeof(int64_t) * (size_t)h.rank);
        h.shape[0] = -1;
        h.rank++;
        h.weak = false;
        nn->meta[nw + k] = h;
    }
    nn->meta[2 * nw] = (tfe_meta){.dtype = TFE_INT64, .rank = 0};
    tfe_tensor **outs = xcalloc((size_t)(2 * nw + 1), sizeof *outs);
    if (trace_node_outputs(b->T, nid, outs)) {
        free(outs);
        goto out;
    }
    for (int k = 0; k < nc; k++) put(b->m, n->vbase + k, outs[k]);
    /* a loop that keeps its history itself (in a backward graph): what it
     * hands on are the same stacked values and count */
    for (int k = nc; k < n->nout && k <= 2 * nc; k++) {
        tfe_tensor *o = outs[k == 2 * nc ? 2 * nw : nw + (k - nc)];
        tensor_incref(o);
        put(b->m, n->vbase + k, o);
    }
    /* the history has no slot in G: it is kept in the slots of G's params
     * (nothing reads them outside the loop), the count by node */
    for (int k = 0; k < nc; k++) put(b->m, G->nodes[G->regions[G->nodes[id].regions[0]].params[k]].vbase, outs[nw + k]);
    put(b->count, id, outs[2 * nw]);
    if (logged) { /* (the iteration's: unused) */
        tensor_decref(outs[nc]);
        tensor_decref(outs[nw + nc]);
    }
    for (int q = 0; q < nfl; q++) { /* the flags: the last one, and by iteration */
        if (!b->af_hist) {
            b->af_hist = xcalloc((size_t)(2 * (G->nvals + 1)), sizeof *b->af_hist);
            b->af_last = xcalloc((size_t)(2 * (G->nvals + 1)), sizeof *b->af_last);
        }
        int j = q > 0 && fk[q - 1] == fk[q]; /* (its variable's first target or second) */
        put(b->af_last, 2 * (n->vbase + fk[q]) + j, outs[nc + logged + q]);
        put(b->af_hist, 2 * G->nodes[grc->params[fk[q]]].vbase + j, outs[nw + nc + logged + q]);
    }
    free(outs);
    rc = 0;
out:
    if (c.next) tensor_decref(c.next);
    if (zero) tensor_decref(zero);
    for (int q = 0; q < nfl; q++) {
        if (fl[q]) tensor_decref(fl[q]);
        if (finit[q]) tensor_decref(finit[q]);
    }
    free(fl);
    free(finit);
    free(fk);
    free(ft);
    free(sym);
    free(vals);
    free(init);
    return rc;
}

static int replay_fused(BP *b, int id)
{
    Graph *G = b->G;
    const GNode *n = &G->nodes[id];
    const tfe_fprog *p = n->prog;
    FusedVals *f = xcalloc(1, sizeof *f);
    f->n = p->ninstr;
    f->vals = xcalloc((size_t)p->ninstr + 1, sizeof *f->vals);
    f->src = xcalloc((size_t)p->ninstr + 1, sizeof *f->src);
    int *writer = xmalloc(sizeof *writer * (size_t)(p->nregs + 1));
    int rc = 0;
    for (int i = 0; i < p->ninstr && !rc; i++) {
        const tfe_finstr *in = &p->code[i];
        if (in->op == FOP_LOAD) {
            f->vals[i] = b->m[slot_of(G, n->in[in->input])];
            tensor_incref(f->vals[i]);
        } else if (in->op == FOP_CONST) {
            f->vals[i] = tensor_from_f64(in->imm, p->dtype);
            if (f->vals[i]) f->vals[i]->weak = true; /* it was a literal */
        } else {
            int na = tfe_fop_nargs(in->op);
            f->src[i][0] = writer[in->a];
            f->src[i][1] = na > 1 ? writer[in->b] : -1;
            tfe_tensor *args[2] = {f->vals[f->src[i][0]], na > 1 ? f->vals[f->src[i][1]] : NULL};
            tfe_tensor *out[1];
            if (tfe_execute(opt_op_of_fop(in->op), na, args, NULL, out)) rc = -1;
            else f->vals[i] = out[0];
        }
        if (!rc && !f->vals[i]) rc = -1;
        writer[in->dst] = i;
    }
    f->result = rc ? -1 : writer[p->result];
    free(writer);
    if (!rc && p->red) { /* the final reduction, as the op it stands for */
        tfe_tensor *out[1];
        if (tfe_execute(n->op, 1, &f->vals[f->result], n->at, out)) rc = -1;
        else f->red = out[0];
    }
    if (rc) {
        fused_free(f);
        return bp_error(b, n, tfe_error_msg());
    }
    if (!b->fused) b->fused = xcalloc((size_t)G->n + 1, sizeof *b->fused);
    fused_free(b->fused[id]);
    b->fused[id] = f;
    tfe_tensor *v = f->red ? f->red : f->vals[f->result];
    tensor_incref(v);
    put(b->m, n->vbase, v);
    return 0;
}

/* Is region r inside a while (its condition or body, at any depth)? */
static bool region_in_loop(const Graph *G, int r)
{
    for (; r > 0; r = G->regions[r].parent)
        for (int i = 0; i < G->n; i++)
            if (G->nodes[i].kind == G_WHILE && (G->nodes[i].regions[0] == r || G->nodes[i].regions[1] == r))
                return true;
    return false;
}

/* A random draw inside a traced if's branch, replayed: the same op with the
 * seed and counter it drew in this call's forward run gives the same numbers
 * (the stream is counter-based). Only for a backward of this call alone (a
 * backward that replays draws is never cached, and one recorded into an
 * enclosing trace would draw anew), and not in a loop, whose draws differ at
 * every iteration. 0: done; -1: it cannot be replayed. */
static int replay_branch_draw(BP *b, int id)
{
    Graph *G = b->G;
    GNode *n = &G->nodes[id];
    if (region_in_loop(G, n->region)) return -1;
    /* recorded into an enclosing trace (a tape inside a staged function):
     * the replay takes, at every run, the seed and counter that the
     * forward draw it replays (the node of that trace with this node's
     * traced attrs, the first: a later draw may have been given the same
     * counter, trace.c) drew in the same run */
    int target = -1;
    Graph *TG = b->T ? b->T->g : NULL;
    for (int k = 0; !b->own && TG && k < TG->n && target < 0; k++) {
        const GNode *o = &TG->nodes[k];
        if (o->kind == G_OP && o->op == n->op && o->at->from_stream && o->at_from < 0 &&
            o->at->seed == n->at->seed && o->at->counter == n->at->counter)
            target = k;
    }
    if (!b->own && target < 0) return -1;
    tfe_tensor *inb[16] = {NULL}, **in = n->nin <= 16 ? inb : xmalloc(sizeof *in * (size_t)n->nin);
    for (int i = 0; i < n->nin; i++) in[i] = b->m[slot_of(G, n->in[i])];
    tfe_tensor *out[32];
    /* a fixed seed and counter: this very draw, wherever it is recorded (in
     * an enclosing trace, at_from below makes later runs take the run's);
     * a draw that did not run (a branch not taken) has no value to agree
     * with, and the backward of its branch does not run */
    tfe_attrs at = b->draws && b->draws[id].from_stream ? b->draws[id] : *n->at;
    at.from_stream = false;
    b->drew = true;
    int rc = tfe_execute(n->op, n->nin, in, &at, out);
    if (in != inb) free(in);
    if (rc) return -1;
    if (target >= 0 && out[0]->node && ((const TNote *)out[0]->node)->ref.node != target)
        TG->nodes[((const TNote *)out[0]->node)->ref.node].at_from = target;
    for (int k = 0; k < n->nout; k++) put(b->m, n->vbase + k, out[k]);
    return 0;
}

static int replay_node(BP *b, int id)
{
    Graph *G = b->G;
    GNode *n = &G->nodes[id];
    switch (n->kind) {
    case G_INPUT: case G_CONST: case G_PARAM: return 0;
    case G_VAR_READ: case G_HOST:
        if (n->nout && !b->m[n->vbase])
            return bp_error(b, n, "gradients through a variable read or host call inside a staged conditional or "
                                  "loop are not supported");
        return 0;
    case G_OP: {
        /* a collective of the top region was saved from the forward; one in
         * a branch runs again (every rank replays the same branch) */
        if ((tfe_ops[n->op].flags & F_COLLECTIVE) && n->region == 0 && b->m[n->vbase]) return 0;
        /* a value the forward run kept (keep_graph): the backward reads it */
        if (!(tfe_ops[n->op].flags & F_RANDOM) && n->region == 0 && b->m[n->vbase]) return 0;
        if (tfe_ops[n->op].flags & F_RANDOM) {
            /* one in a branch is drawn again wherever the branch is replayed
             * (a value from another replay of it is not visible there) */
            if ((n->region > 0 || !b->m[n->vbase]) && replay_branch_draw(b, id))
                return bp_error(b, n, "gradients through a random draw inside a staged conditional or loop are not supported "
                                     "(the graph keeps one draw of it): make the function's first call under the "
                                     "tape, or draw the numbers before the loop and index them");
            return 0;
        }
        tfe_tensor *inb[16], **in = n->nin <= 16 ? inb : xmalloc(sizeof *in * (size_t)n->nin);
        for (int i = 0; i < n->nin; i++) in[i] = b->m[slot_of(G, n->in[i])];
        tfe_tensor *out[32];
        Loc saved = b->I->cur_loc;
        b->I->cur_loc = n->loc;
        int rc = tfe_execute(n->op, n->nin, in, n->at, out);
        b->I->cur_loc = saved;
        if (in != inb) free(in);
        if (rc) return bp_error(b, n, tfe_error_msg());
        for (int k = 0; k < n->nout; k++) put(b->m, n->vbase + k, out[k]);
        return 0;
    }
    case G_COND: return replay_cond(b, id);
    case G_WHILE: return replay_loop(b, id);
    case G_FUSED: return replay_fused(b, id);
    }
    return 0;
}

static int replay_region(BP *b, int r)
{
    const GRegion *reg = &b->G->regions[r];
    for (int i = 0; i < reg->n; i++)
        if (replay_node(b, reg->nodes[i])) return -1;
    return 0;
}

/* --- the reverse sweep -------------------------------------------------------------------- */

/* An op's gradient: one step shared with the tape (tensor/grad_step.c), its
 * contributions added in order. Where every output's gradient is none (in
 * eager terms, where the flag is true), what the rule makes is none too. */
static int sweep_op(BP *b, const GNode *n)
{
    Graph *G = b->G;
    bool any = false;
    tfe_tensor *dy[32], *dyf[32], *y[32], *inb[16], *dxb[16], *none = NULL;
    bool skb[16];
    for (int k = 0; k < n->nout; k++) {
        int s = n->vbase + k;
        y[k] = b->m[s];
        dy[k] = b->g[s];
        dyf[k] = dy[k] ? b->none[s] : NULL;
        any |= dy[k] != NULL;
    }
    if (!any) return 0;
    tfe_tensor **in = n->nin <= 16 ? inb : xmalloc(sizeof *in * (size_t)n->nin);
    tfe_tensor **dx = n->nin <= 16 ? dxb : xmalloc(sizeof *dx * (size_t)n->nin);
    bool *skip = n->nin <= 16 ? skb : xmalloc(sizeof *skip * (size_t)n->nin);
    for (int i = 0; i < n->nin; i++) {
        in[i] = b->m[slot_of(G, n->in[i])];
        skip[i] = !differentiable(&G->nodes[n->in[i].node].meta[n->in[i].out]);
    }
    /* a random op's rule replays the forward run's draw (dropout's mask) */
    int id = (int)(n - G->nodes);
    const tfe_attrs *at = (tfe_ops[n->op].flags & F_RANDOM) && b->draws && b->draws[id].from_stream ? &b->draws[id] : n->at;
    const tfe_opcall c = {.op = n->op, .nin = n->nin, .nout = n->nout, .in = in, .at = at, .out = y};
    Loc saved = b->I->cur_loc;
    b->I->cur_loc = n->loc;
    int rc = tfe_grad_step(&c, dy, dyf, skip, dx, &none);
    b->I->cur_loc = saved;
    for (int i = 0; i < n->nin && !rc; i++)
        if (dx[i] && acc_f(b, slot_of(G, n->in[i]), dx[i], none)) rc = -1;
    if (none) tensor_decref(none);
    if (in != inb) free(in);
    if (dx != dxb) free(dx);
    if (skip != skb) free(skip);
    return rc ? bp_error(b, n, tfe_error_msg()) : 0;
}

/* A fused node's gradient: its instructions in reverse, with their ops' rules. */
static int sweep_fused(BP *b, int id)
{
    Graph *G = b->G;
    const GNode *n = &G->nodes[id];
    FusedVals *f = b->fused ? b->fused[id] : NULL;
    if (!b->g[n->vbase] || !f) return 0;
    const tfe_fprog *p = n->prog;
    tfe_tensor **gv = xcalloc((size_t)p->ninstr + 1, sizeof *gv);
    int rc = 0;
    if (f->red) { /* through the final reduction first */
        tfe_tensor *dx[1] = {NULL}, *nonef = NULL;
        const tfe_opcall c = {.op = n->op, .nin = 1, .nout = 1, .in = &f->vals[f->result], .at = n->at, .out = &f->red};
        if (tfe_grad_step(&c, &b->g[n->vbase], NULL, NULL, dx, &nonef)) rc = -1;
        else gv[f->result] = dx[0];
    } else {
        gv[f->result] = b->g[n->vbase];
        tensor_incref(gv[f->result]);
    }
    for (int i = p->ninstr - 1; i >= 0 && !rc; i--) {
        if (!gv[i]) continue;
        const tfe_finstr *in = &p->code[i];
        if (in->op == FOP_LOAD) {
            tfe_tensor *none = b->none[n->vbase], *d = gv[i];
            gv[i] = NULL;
            if (none) { /* -0.0s where none: what adds nothing */
                tfe_tensor *m = tfe_grad_flag_fill(none, d, -0.0);
                tensor_decref(d);
                d = m;
            }
            rc = d ? acc_f(b, slot_of(G, n->in[in->input]), d, none) : -1;
            continue;
        }
        if (in->op == FOP_CONST) continue;
        int na = tfe_fop_nargs(in->op);
        tfe_op op = opt_op_of_fop(in->op);
        tfe_tensor *args[2] = {f->vals[f->src[i][0]], na > 1 ? f->vals[f->src[i][1]] : NULL};
        tfe_tensor *dx[2] = {NULL, NULL};
        static const tfe_attrs none = {.naxes = -1, .dtype = TFE_FLOAT32};
        const tfe_opcall c = {.op = op, .nin = na, .nout = 1, .in = args, .at = &none, .out = &f->vals[i]};
        tfe_tensor *nonef = NULL; /* (no flags inside a fused node: NULL) */
        if (tfe_grad_step(&c, &gv[i], NULL, NULL, dx, &nonef)) {
            rc = -1;
            break;
        }
        for (int k = 0; k < na; k++)
            if (dx[k] && !rc && tfe_grad_add(&gv[f->src[i][k]], dx[k])) rc = -1;
            else if (dx[k] && rc) tensor_decref(dx[k]);
    }
    for (int i = 0; i < p->ninstr; i++)
        if (gv[i]) tensor_decref(gv[i]);
    free(gv);
    return rc ? bp_error(b, n, tfe_error_msg()) : 0;
}

/* The gradients of a region's captures, for one branch (or loop body). */
typedef struct GradCtx {
    int id, branch;
    Caps *caps;
    tfe_tensor *const *dy;   /* per output of the region */
    tfe_tensor **res;        /* per capture (and, for loops, per carried value first) */
    int nres;
    int nparams;             /* loops: gradients of the params come first */
    tfe_tensor *const *hist; /* loops: stacked carried values */
    tfe_tensor *index;       /* loops: the iteration (a traced int64) */
    tfe_tensor *const *dcap; /* loops: the capture gradients so far */
    tfe_tensor *const *sofar; /* conds: the capture gradients before the node (NULL: none) */
    const bool *zero_dy;     /* conds: dy[k] is zeros made for an output no gradient reached */
    const bool *pass_dy;     /* conds: the branch ends output k on a captured value, whose
                                gradient has what reached the output (cond_out_alias) */
    const int *palias;       /* loops: by carried value, the capture it started as, or -1 */
    const int *pinit;        /* loops: by 2 * carried value + w, the capture its initial value
                                (an if's result) is where branch w ran (pcin[...], borrowed), or -1 */
    tfe_tensor *const *pcin;
    const int *pself;        /* loops: by carried value, the capture its initial value (an if's
                                or a loop's result with pinit aliases) is itself where none of
                                those holds, or -1 */
    const int *ppass;        /* loops: by carried value, the capture the body ends it on, or -1 */
    const int *pcs, *pct;    /* loops: by carried value, the value it is where the previous
                                iteration's flag says so (BP.af_hist; the capture's slot, or
                                another param's), and that value's slot in the body, or -1 */
    /* none flags (traced bools; NULL: real): */
    tfe_tensor *const *dyf;  /* per output of the region (borrowed) */
    tfe_tensor *const *sofarf; /* conds: sofar's; loops: dcap's (borrowed) */
    tfe_tensor **resf;       /* per res, its flag (new refs; NULL: real) */
    bool preal;              /* loops: set false when a param's gradient may be none */
    /* loops: its logged reads (BP.lr_*, lw[q] their j), whose gradients
     * (each iteration's its own) are carried stacked, with their flags, at
     * res[lwoff[q]] and after it; where a read's tensor is read in the next
     * iteration too (logged_roles), the gradient so far of that tensor at
     * res[lwp[q]] (and its flag after it), and, where a read after the
     * loop reads it in the last, that one's at res[lwq[q]] (-1: none);
     * lsym: the carried values, last: the first reverse iteration's index */
    int nlw;
    const int *lw, *lwoff, *lwp, *lwq;
    tfe_tensor *const *lsym;
    tfe_tensor *last;
} GradCtx;

/* Clear b->g at the slots of region r's own nodes (recursively). */
static void clear_region_grads(BP *b, int r)
{
    const GRegion *reg = &b->G->regions[r];
    for (int i = 0; i < reg->n; i++) {
        const GNode *n = &b->G->nodes[reg->nodes[i]];
        if (n->kind == G_VAR_READ) continue; /* a source: its gradient is a capture's */
        for (int k = 0; k < n->nout; k++) {
            put(b->g, n->vbase + k, NULL);
            put(b->none, n->vbase + k, NULL);
        }
        if (n->kind == G_COND || n->kind == G_WHILE) {
            clear_region_grads(b, n->regions[0]);
            clear_region_grads(b, n->regions[1]);
        }
    }
}

/* A capture's (or param's) gradient as a region's output: its gradient
 * and flag, or, where nothing reached it, -0.0s flagged none (as eager
 * code, which adds nothing there). Clears the slot. */
static int region_result(BP *b, int slot, tfe_tensor **res, tfe_tensor **resf)
{
    tfe_tensor *gv = b->g[slot];
    if (gv) {
        *res = ref(gv);
        *resf = ref(b->none[slot]);
    } else {
        *res = filled(b->m[slot], -0.0);
        *resf = flag_const(true);
        if (!*res || !*resf) return -1;
    }
    put(b->g, slot, NULL);
    put(b->none, slot, NULL);
    return 0;
}

/* Branch r replayed for its backward, traced in a region inside the one the
 * cond was replayed in: an op, or a nested cond, whose values a replayed
 * cond handed out where they are seen from here (replay_cond) takes them,
 * the rest run again. A nested cond taken so is not replayed: its branches'
 * values (handed out by the outer cond too) serve its own backward, and its
 * branches' results are its outputs. */
static int replay_kept(BP *b, int r)
{
    const GRegion *reg = &b->G->regions[r];
    for (int i = 0; i < reg->n; i++) {
        const GNode *x = &b->G->nodes[reg->nodes[i]];
        bool kept = (x->kind == G_OP || x->kind == G_COND) && b->xv && x->nout > 0;
        for (int k = 0; kept && k < x->nout; k++)
            kept = b->xv[x->vbase + k] && graph_region_visible(b->T->g, b->xv_reg[x->vbase + k], b->T->region);
        if (!kept) {
            if (replay_node(b, reg->nodes[i])) return -1;
            continue;
        }
        for (int k = 0; k < x->nout; k++) put(b->m, x->vbase + k, ref(b->xv[x->vbase + k]));
        for (int br = 0; br < 2 && x->kind == G_COND; br++) {
            const GRegion *xr = &b->G->regions[x->regions[br]];
            for (int k = 0; k < xr->nouts && k < x->nout; k++) {
                const GNode *y = &b->G->nodes[xr->outs[k].node];
                int s = slot_of(b->G, xr->outs[k]);
                if (y->region != x->regions[br] || (!x_node(y) && y->kind != G_COND) || b->xv[s] == b->xv[x->vbase + k])
                    continue;
                put(b->xv, s, ref(b->xv[x->vbase + k]));
                b->xv_reg[s] = b->xv_reg[x->vbase + k];
            }
        }
    }
    return 0;
}

static int grad_branch(BP *b, void *p)
{
    GradCtx *c = p;
    Graph *G = b->G;
    const GNode *n = &G->nodes[c->id];
    int r = n->regions[c->branch];
    const GRegion *reg = &G->regions[r];
    if (replay_kept(b, r)) return -1;
    for (int k = 0; k < reg->nouts; k++) {
        if (c->zero_dy[k]) continue; /* as an eager tape: nothing, rather than + 0.0 */
        if (c->pass_dy && c->pass_dy[k]) continue;
        tfe_tensor *rest = b->cond_rest && k < n->nout ? b->cond_rest[2 * (n->vbase + k) + c->branch] : NULL;
        if (rest) { /* (the rest only: cond_out_alias) */
            if (add_if(b, slot_of(G, reg->outs[k]), c->dy[k], c->dyf[k], rest)) return -1;
            continue;
        }
        tensor_incref(c->dy[k]);
        if (acc_f(b, slot_of(G, reg->outs[k]), c->dy[k], c->dyf[k])) return -1;
    }
    /* the captures' gradients so far first: the branch adds to them in the
     * order an eager tape would */
    for (int i = 0; i < c->caps->n; i++) /* (before a seed: a branch may pass a capture through) */
        if (c->sofar[i]) {
            tensor_incref(c->sofar[i]);
            if (acc_first_f(b, c->caps->slot[i], c->sofar[i], c->sofarf[i])) return -1;
        }
    if (sweep_region(b, r)) return -1;
    for (int i = 0; i < c->caps->n; i++)
        if (region_result(b, c->caps->slot[i], &c->res[i], &c->resf[i])) return -1;
    clear_region_grads(b, r);
    return 0;
}

/* Take (and clear) the outer gradients of the captures (and their flags,
 * after them) while a branch computes its own; add them back after. */
static tfe_tensor **stash(BP *b, const Caps *caps)
{
    tfe_tensor **s = xcalloc((size_t)(2 * caps->n) + 1, sizeof *s);
    for (int i = 0; i < caps->n; i++) {
        s[i] = b->g[caps->slot[i]];
        b->g[caps->slot[i]] = NULL;
        s[caps->n + i] = b->none[caps->slot[i]];
        b->none[caps->slot[i]] = NULL;
    }
    return s;
}

static int unstash(BP *b, const Caps *caps, tfe_tensor **s)
{
    int rc = 0;
    for (int i = 0; i < caps->n; i++) {
        put(b->g, caps->slot[i], NULL);
        put(b->none, caps->slot[i], NULL);
        if (s[i] && acc_f(b, caps->slot[i], s[i], s[caps->n + i])) rc = -1;
        if (s[caps->n + i]) tensor_decref(s[caps->n + i]);
    }
    free(s);
    return rc;
}

/* After a node whose outputs are the captures' whole gradients (stashed
 * ones included): the stash goes. */
static void drop_stash(BP *b, const Caps *caps, tfe_tensor **s)
{
    for (int i = 0; i < caps->n; i++) {
        put(b->g, caps->slot[i], NULL);
        put(b->none, caps->slot[i], NULL);
        if (s[i]) tensor_decref(s[i]);
        if (s[caps->n + i]) tensor_decref(s[caps->n + i]);
    }
    free(s);
}

static int region_var_reads(const Graph *G, int r, const Obj **reads, int n, int cap);
static bool region_assigns(const Graph *G, int r, const Obj **reads, int n);

/* Recorded into a trace, a backward's variable sources are nodes of that
 * trace that read the variable when the call runs (stage/trace_cf.c,
 * reread_vars): a read inside cond id of a variable it also assigns is
 * neither the value before nor the one after it, and no node has it. */
static int check_read_assign(BP *b, int id)
{
    const GNode *n = &b->G->nodes[id];
    const Obj *reads[64];
    int nr = region_var_reads(b->G, n->regions[0], reads, 0, 64);
    nr = region_var_reads(b->G, n->regions[1], reads, nr, 64);
    if (!nr || (nr < 64 && !region_assigns(b->G, n->regions[0], reads, nr) &&
                !region_assigns(b->G, n->regions[1], reads, nr)))
        return 0;
    return trace_fail(b->I, n->loc, "gradients through a staged conditional that assigns a variable it reads, with "
                                    "a tape made inside the staged function, are not supported (read the variable "
                                    "into a name before the conditional, or assign it after)");
}

/* Do the branches of cond id give an output that a gradient reached other
 * dims? Each branch's backward would be traced on the one gradient, shaped
 * as the branch the call took gives it (the other branch's would slice or
 * reduce the wrong shape), and kept for later calls. A cond traced under a
 * tape is never such a node (stage/trace_cf.c decides it at trace time);
 * one traced with no tape and taped later is this error. */
static int check_branch_shapes(BP *b, int id)
{
    const Graph *G = b->G;
    const GNode *n = &G->nodes[id];
    const GRegion *r0 = &G->regions[n->regions[0]], *r1 = &G->regions[n->regions[1]];
    for (int k = 0; k < n->nout && k < r0->nouts && k < r1->nouts; k++) {
        if (!b->g[n->vbase + k]) continue;
        const tfe_meta *a = &G->nodes[r0->outs[k].node].meta[r0->outs[k].out];
        const tfe_meta *c = &G->nodes[r1->outs[k].node].meta[r1->outs[k].out];
        bool same = a->rank == c->rank;
        for (int d = 0; same && d < a->rank; d++) same = a->shape[d] == c->shape[d];
        if (!same) {
            char msg[480];
            snprintf(msg, sizeof msg,
                     "gradients through a staged conditional (the 'if' at line %d) whose branches give a value "
                     "different shapes are not supported when the function was traced with no tape recording "
                     "(make its first call under the tape, decide the condition with a bool computed outside "
                     "the staged function, or give both branches the same shape)", n->loc.line);
            return bp_error(b, n, msg);
        }
    }
    return 0;
}

static int sweep_cond_rest(BP *b, int id, bool *const *pass);

/* Has a value of region r (or of one inside it) a gradient? */
static bool region_reached(const BP *b, int r)
{
    const GRegion *reg = &b->G->regions[r];
    for (int i = 0; i < reg->n; i++) {
        const GNode *x = &b->G->nodes[reg->nodes[i]];
        for (int k = 0; k < x->nout && (x->kind == G_OP || x->kind == G_COND); k++) /* (a read: a source) */
            if (b->g[x->vbase + k]) return true;
        if (x->kind == G_COND && (region_reached(b, x->regions[0]) || region_reached(b, x->regions[1]))) return true;
    }
    return false;
}

static int sweep_cond(BP *b, int id)
{
    Graph *G = b->G;
    const GNode *n = &G->nodes[id];
    bool any = false;
    for (int k = 0; k < n->nout; k++) any |= b->g[n->vbase + k] != NULL;
    /* (or a value in a branch that was an output of the call, kept: the
     * gradient reached it there) */
    any = any || region_reached(b, n->regions[0]) || region_reached(b, n->regions[1]);
    /* its outputs' aliases (cond_out_alias) end here */
    bool *pass[2] = {xcalloc((size_t)n->nout + 1, sizeof(bool)), xcalloc((size_t)n->nout + 1, sizeof(bool))};
    for (int k = 0; k < n->nout; k++)
        for (int w = 0; w < 2; w++) {
            pass[w][k] = b->alias && b->alias[NAL * (n->vbase + k) + w] >= 0 &&
                         !(b->cond_rest && b->cond_rest[2 * (n->vbase + k) + w]);
            alias_set(b, n->vbase + k, w, -1, NULL);
        }
    for (int k = 0; k < n->nout; k++) /* (a cond's output has those two only) */
        for (int w = 2; w < NAL; w++) alias_set(b, n->vbase + k, w, -1, NULL);
    int rc0 = any ? sweep_cond_rest(b, id, pass) : 0;
    for (int k = 0; k < 2 * n->nout && b->cond_rest; k++) put(b->cond_rest, 2 * n->vbase + k, NULL);
    free(pass[0]);
    free(pass[1]);
    return rc0;
}

static int sweep_cond_rest(BP *b, int id, bool *const *pass)
{
    Graph *G = b->G, *g = b->T->g;
    const GNode *n = &G->nodes[id];
    if (check_branch_shapes(b, id)) return -1;
    if (b->in_trace && check_read_assign(b, id)) return -1;
    Caps caps = captures(G, id);
    caps_add_aliases(b, &caps);
    tfe_tensor **dy = xcalloc((size_t)n->nout + 1, sizeof *dy);
    tfe_tensor **dyf = xcalloc((size_t)n->nout + 1, sizeof *dyf);
    bool *zero_dy = xcalloc((size_t)n->nout + 1, sizeof *zero_dy);
    /* per branch: the captures' gradients, then their flags */
    tfe_tensor **res[2], **resf[2];
    for (int br = 0; br < 2; br++) {
        res[br] = xcalloc((size_t)(2 * caps.n) + 1, sizeof *res[br]);
        resf[br] = res[br] + caps.n;
    }
    bool *flagged = xcalloc((size_t)caps.n + 1, sizeof *flagged);
    int rc = -1, r[2], nflag = 0;
    for (int k = 0; k < n->nout; k++) {
        dy[k] = b->g[n->vbase + k];
        dyf[k] = b->none[n->vbase + k];
        if (dy[k]) tensor_incref(dy[k]);
        else if (!(dy[k] = zeros_like(b->m[n->vbase + k]))) goto out;
        else zero_dy[k] = true;
    }
    /* each branch's outputs are the captures' whole gradients: what they
     * had before, plus the branch's contributions (stash: cleared
     * meanwhile); and, for those none on a path (nothing reached them
     * there), where they are none */
    tfe_tensor **saved = stash(b, &caps);
    for (int br = 0; br < 2; br++) {
        r[br] = graph_add_region(g, b->T->region);
        GradCtx c = {.id = id, .branch = br, .caps = &caps, .dy = dy, .res = res[br], .nres = caps.n,
                     .sofar = saved, .zero_dy = zero_dy, .pass_dy = pass[br], .dyf = dyf, .sofarf = saved + caps.n,
                     .resf = resf[br]};
        if (in_region(b, r[br], grad_branch, &c)) {
            unstash(b, &caps, saved);
            goto out;
        }
    }
    for (int i = 0; i < caps.n; i++)
        if ((flagged[i] = resf[0][i] || resf[1][i])) nflag++;
    for (int br = 0; br < 2; br++) {
        for (int i = 0, k = caps.n; i < caps.n; i++)
            if (flagged[i]) {
                tfe_tensor *f = resf[br][i] ? resf[br][i] : flag_const(false);
                resf[br][i] = NULL;
                if (!(res[br][k++] = f)) {
                    unstash(b, &caps, saved);
                    goto out;
                }
            }
        set_outs(g, r[br], caps.n + nflag, res[br], b->T);
    }
    drop_stash(b, &caps, saved);
    tfe_tensor *pred = b->m[slot_of(G, n->in[0])];
    int nid = new_cf_node(b, G_COND, n->loc, 1, &pred, caps.n + nflag);
    GNode *nn = gnode(g, nid);
    nn->regions[0] = r[0];
    nn->regions[1] = r[1];
    for (int i = 0; i < caps.n; i++) nn->meta[i] = G->nodes[caps.ref[i].node].meta[caps.ref[i].out];
    for (int k = caps.n; k < caps.n + nflag; k++) nn->meta[k] = (tfe_meta){.dtype = TFE_BOOL, .rank = 0};
    tfe_tensor **outs = xcalloc((size_t)(caps.n + nflag) + 1, sizeof *outs);
    if (trace_node_outputs(b->T, nid, outs)) {
        free(outs);
        goto out;
    }
    rc = 0;
    for (int i = 0, k = caps.n; i < caps.n; i++) { /* the whole gradients */
        put(b->g, caps.slot[i], outs[i]);
        put(b->none, caps.slot[i], flagged[i] ? outs[k++] : NULL);
    }
    free(outs);
out:
    for (int k = 0; k < n->nout; k++)
        if (dy[k]) tensor_decref(dy[k]);
    for (int br = 0; br < 2; br++) {
        for (int i = 0; i < 2 * caps.n; i++)
            if (res[br][i]) tensor_decref(res[br][i]);
        free(res[br]);
    }
    free(dy);
    free(dyf);
    free(zero_dy);
    free(flagged);
    caps_free(&caps);
    return rc;
}

/* --- loops ------------------------------------------------------------------------------ */

/* The reverse loop's condition: i >= 0. */
static int loop_grad_cond(BP *b, void *p)
{
    GradCtx *c = p;
    tfe_tensor *zero = tensor_from_i64(0, TFE_INT64);
    tfe_tensor *t = tfe_binary(OP_GE, c->index, zero);
    tensor_decref(zero);
    if (!t) return -1;
    c->res[0] = t;
    return 0;
}

/* After a reverse iteration: the loop's variables are their own again. */
static void unalias(BP *b, const GradCtx *c)
{
    const GRegion *grc = &b->G->regions[b->G->nodes[c->id].regions[0]];
    for (int k = 0; k < grc->nparams && b->alias; k++) {
        int s = b->G->nodes[grc->params[k]].vbase;
        if (c->palias[k] >= 0 || c->pinit[2 * k] >= 0) alias_set(b, s, 0, -1, NULL);
        if (c->ppass[k] >= 0 || c->pinit[2 * k + 1] >= 0) alias_set(b, s, 1, -1, NULL);
        if (c->pself[k] >= 0) alias_set(b, s, 4, -1, NULL);
        for (int j = 0; j < 2; j++)
            if (c->pcs[2 * k + j] >= 0) alias_set(b, s, 2 + j, -1, NULL);
    }
}

/* One reverse iteration's gradients of the logged reads (GradCtx.lw*):
 * row i of each one's stack, or, for a tensor read in two iterations
 * (logged_roles), its gradient so far handed on, the row of the read that
 * completes it. */
static int logged_rows(BP *b, GradCtx *c)
{
    const Graph *G = b->G;
    tfe_tensor *zero = tensor_from_i64(0, TFE_INT64);
    tfe_tensor *first = zero ? tfe_binary(OP_EQ, c->index, zero) : NULL;
    tfe_tensor *later = zero ? tfe_binary(OP_NE, c->index, zero) : NULL;
    tfe_tensor *last = tfe_binary(OP_EQ, c->index, c->last);
    int rc = zero && first && later && last ? 0 : -1;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.axes[0] = 0;
    at.naxes = 1;
    for (int q = 0; q < c->nlw && !rc; q++) {
        int j = c->lw[q], role = b->lr_role[j], o = c->lwoff[q];
        tfe_tensor *gq = NULL, *fq = NULL, *row = NULL;
        if (region_result(b, G->nodes[b->lr_node[j]].vbase, &gq, &fq)) { rc = -1; break; }
        if (!fq && !(fq = flag_const(false))) { rc = -1; tensor_decref(gq); break; }
        row = ref(fq);
        if (role == 2 && c->lwq[q] >= 0) { /* the last iteration's: the read after the loop's */
            int k = c->lwq[q];
            tfe_tensor *in[3] = {last, gq, c->lsym[k]};
            c->res[k] = tfe_call1(OP_WHERE, 3, in, NULL);
            in[1] = fq;
            in[2] = c->lsym[k + 1];
            c->res[k + 1] = tfe_call1(OP_WHERE, 3, in, NULL);
            tfe_tensor *r2 = tfe_binary(OP_LOGICAL_OR, row, last);
            tensor_decref(row);
            row = r2;
        }
        if (role == 2 && b->lr_mate[j] < 0) { /* (no read of the tensor before in the next iteration down) */
            c->res[c->lwp[q]] = filled(gq, -0.0);
            c->res[c->lwp[q] + 1] = flag_const(true);
        }
        if (role == 1) {
            int pq = -1; /* where its gradient goes on: the mate's, or to the read before the loop */
            for (int m = 0; m < c->nlw; m++)
                if (c->lw[m] == (b->lr_mate[j] >= 0 ? b->lr_mate[j] : j)) pq = c->lwp[m];
            tfe_tensor *r2 = row;
            if (b->lr_mate[j] >= 0 && r2) r2 = tfe_binary(OP_LOGICAL_OR, row, later);
            if (b->lr_pre[j] >= 0 && r2) {
                tfe_tensor *r3 = tfe_binary(OP_LOGICAL_OR, r2, first);
                if (r2 != row) tensor_decref(r2);
                r2 = r3;
            }
            if (r2 != row) tensor_decref(row);
            row = r2;
            if (pq >= 0) {
                c->res[pq] = ref(gq);
                c->res[pq + 1] = ref(fq);
            }
        }
        tfe_tensor *in[3] = {c->lsym[o], c->index, gq};
        if (row) c->res[o] = tfe_call1(OP_SCATTER, 3, in, &at);
        in[0] = c->lsym[o + 1];
        in[2] = row;
        if (row) c->res[o + 1] = tfe_call1(OP_SCATTER, 3, in, &at);
        if (row) tensor_decref(row);
        tensor_decref(gq);
        tensor_decref(fq);
        if (!c->res[o] || !c->res[o + 1]) rc = -1;
    }
    for (int q = 0; q < c->nlw && !rc; q++) {
        if (c->lwp[q] >= 0 && (!c->res[c->lwp[q]] || !c->res[c->lwp[q] + 1])) rc = -1;
        if (c->lwq[q] >= 0 && (!c->res[c->lwq[q]] || !c->res[c->lwq[q] + 1])) rc = -1;
    }
    if (zero) tensor_decref(zero);
    if (first) tensor_decref(first);
    if (later) tensor_decref(later);
    if (last) tensor_decref(last);
    return rc;
}

/* One reverse iteration: the body replayed from the stacked values of
 * iteration i, swept with the carried gradients. */
static int loop_grad_body(BP *b, void *p)
{
    GradCtx *c = p;
    Graph *G = b->G;
    const GNode *n = &G->nodes[c->id];
    const GRegion *grc = &G->regions[n->regions[0]], *grb = &G->regions[n->regions[1]];
    int nc = grc->nparams;
    for (int k = 0; k < nc; k++) {
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.axes[0] = 0;
        at.naxes = 1;
        tfe_tensor *in[2] = {c->hist[k], c->index};
        tfe_tensor *x = tfe_call1(OP_GATHER, 2, in, &at);
        if (!x) return -1;
        put(b->m, G->nodes[grc->params[k]].vbase, x);
    }
    if (c->nlw && logged_values_at(b, c->id, n->regions[1], c->index)) return -1;
    for (int q = 0; q < c->nlw; q++) { /* (a read of this iteration's own: no gradient so far) */
        int s = G->nodes[b->lr_node[c->lw[q]]].vbase;
        put(b->g, s, NULL);
        put(b->none, s, NULL);
        /* ... but the one after the assign: the next iteration's so far */
        if (b->lr_role[c->lw[q]] == 2 && acc_first_f(b, s, ref(c->lsym[c->lwp[q]]), c->lsym[c->lwp[q] + 1]))
            return -1;
    }
    if (replay_region(b, n->regions[1])) return -1;
    /* the first iteration: loop variables that started as a capture are it */
    /* ... and those the body ends on a captured value are it in the later
     * iterations (the next iteration's value is that tensor) */
    bool aliased = false;
    for (int k = 0; k < nc; k++)
        aliased |= c->palias[k] >= 0 || c->ppass[k] >= 0 || c->pinit[2 * k] >= 0 || c->pinit[2 * k + 1] >= 0;
    if (aliased) {
        tfe_tensor *zero = tensor_from_i64(0, TFE_INT64);
        tfe_tensor *first = zero ? tfe_binary(OP_EQ, c->index, zero) : NULL;
        tfe_tensor *later = zero ? tfe_binary(OP_NE, c->index, zero) : NULL;
        if (zero) tensor_decref(zero);
        if (!first || !later) {
            if (first) tensor_decref(first);
            if (later) tensor_decref(later);
            return -1;
        }
        for (int k = 0; k < nc; k++) {
            int s = G->nodes[grc->params[k]].vbase;
            if (c->palias[k] >= 0) alias_set(b, s, 0, c->caps->slot[c->palias[k]], first);
            if (c->ppass[k] >= 0) alias_set(b, s, 1, c->caps->slot[c->ppass[k]], later);
            /* (one that started as an if's result: the capture the branch
             * that ran ended it on, there) */
            for (int w = 0; w < 2; w++) {
                if (c->pinit[2 * k + w] < 0) continue;
                tfe_tensor *both = tfe_binary(OP_LOGICAL_AND, first, c->pcin[2 * k + w]);
                if (!both) {
                    tensor_decref(first);
                    tensor_decref(later);
                    return -1;
                }
                alias_set(b, s, w, c->pinit[2 * k + w], both);
                tensor_decref(both);
            }
            /* (... and the initial value itself where none of those holds) */
            if (c->pself[k] >= 0) {
                tfe_tensor *went = NULL;
                for (int w = 0; w < 2; w++) {
                    if (c->pinit[2 * k + w] < 0) continue;
                    tfe_tensor *t = went ? tfe_binary(OP_LOGICAL_OR, went, c->pcin[2 * k + w]) : ref(c->pcin[2 * k + w]);
                    if (went) tensor_decref(went);
                    went = t;
                    if (!went) break;
                }
                tfe_tensor *nw = went ? tfe_call1(OP_LOGICAL_NOT, 1, &went, NULL) : NULL;
                tfe_tensor *own = nw ? tfe_binary(OP_LOGICAL_AND, first, nw) : went ? NULL : ref(first);
                if (went) tensor_decref(went);
                if (nw) tensor_decref(nw);
                if (!own) {
                    tensor_decref(first);
                    tensor_decref(later);
                    return -1;
                }
                alias_set(b, s, 4, c->caps->slot[c->pself[k]], own);
                tensor_decref(own);
            }
        }
        tensor_decref(first);
        tensor_decref(later);
    }
    /* a variable that is, where the previous iteration's flag says so,
     * another value (a captured one, or another variable's): what reaches
     * it adds to that value's gradient as it comes */
    for (int q = 0; q < 2 * nc; q++) {
        if (c->pcs[q] < 0) continue;
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.axes[0] = 0;
        at.naxes = 1;
        int s = G->nodes[grc->params[q / 2]].vbase;
        tfe_tensor *in[2] = {b->af_hist[2 * s + q % 2], c->index};
        tfe_tensor *fh = tfe_call1(OP_GATHER, 2, in, &at);
        if (!fh) goto fail;
        alias_set(b, s, 2 + q % 2, c->pcs[q], fh);
        tensor_decref(fh);
    }
    for (int k = 0; k < nc; k++) {
        /* (one the body ends on a captured value: that value's gradient
         * has what reached it, by the aliases) */
        if (c->ppass[k] >= 0) continue;
        if (c->pct[2 * k] >= 0) { /* ... where this iteration's flags say so */
            bool err = false;
            tfe_tensor *f = alias_flag(b, n->regions[1], grb->outs[k], c->pct[2 * k], 0, &err);
            tfe_tensor *f2 = c->pct[2 * k + 1] >= 0 ? alias_flag(b, n->regions[1], grb->outs[k], c->pct[2 * k + 1], 0, &err) : NULL;
            if (f && f2) {
                tfe_tensor *o = tfe_binary(OP_LOGICAL_OR, f, f2);
                tensor_decref(f);
                tensor_decref(f2);
                f = o;
                err |= !o;
            } else if (f2) {
                f = f2;
            }
            tfe_tensor *nf = f ? tfe_call1(OP_LOGICAL_NOT, 1, &f, NULL) : NULL;
            int rc = nf ? add_if(b, slot_of(G, grb->outs[k]), c->dy[k], c->dyf ? c->dyf[k] : NULL, nf) : -1;
            if (f) tensor_decref(f);
            if (nf) tensor_decref(nf);
            if (f || err) {
                if (rc) goto fail;
                continue;
            }
        }
        tensor_incref(c->dy[k]);
        if (acc_f(b, slot_of(G, grb->outs[k]), c->dy[k], c->dyf ? c->dyf[k] : NULL)) goto fail;
    }
    /* the captures' gradients so far first: this iteration adds to them in
     * the order an eager tape would */
    for (int i = 0; i < c->caps->n; i++) { /* (before a seed: the body may pass a capture through) */
        tensor_incref(c->dcap[i]);
        if (acc_first_f(b, c->caps->slot[i], c->dcap[i], c->sofarf[i])) goto fail;
    }
    int src = sweep_region(b, n->regions[1]);
    unalias(b, c);
    if (src) return -1;
    /* new carried gradients: those of the params (none where nothing
     * reached them), then the captures', then their flags */
    int ncap = c->caps->n;
    for (int k = 0; k < nc; k++)
        if (region_result(b, G->nodes[grc->params[k]].vbase, &c->res[1 + k], &c->res[1 + nc + ncap + k]))
            return -1;
    for (int i = 0; i < ncap; i++) /* dcap and this iteration's contributions */
        if (region_result(b, c->caps->slot[i], &c->res[1 + nc + i], &c->res[1 + 2 * nc + ncap + i])) return -1;
    if (c->nlw && logged_rows(b, c)) return -1;
    for (int k = 1 + nc + ncap; k < c->nres; k++) {
        if (c->res[k] && k < 1 + 2 * nc + ncap && differentiable(&n->meta[k - (1 + nc + ncap)])) c->preal = false;
        if (!c->res[k] && !(c->res[k] = flag_const(false))) return -1;
    }
    clear_region_grads(b, n->regions[1]);
    for (int k = 0; k < nc; k++) put(b->g, G->nodes[grc->params[k]].vbase, NULL);
    tfe_tensor *one = tensor_from_i64(1, TFE_INT64);
    c->res[0] = tfe_binary(OP_SUB, c->index, one);
    tensor_decref(one);
    return c->res[0] ? 0 : -1;
fail:
    unalias(b, c);
    return -1;
}

static void meta_of(tfe_meta *m, const tfe_tensor *t);

/* Whether r, an if's or a loop's result, may be another value (cond_out_
 * alias, loop_out_alias): then that value, not r, is what a loop starting
 * from r starts from where the alias's bool holds. */
static bool init_aliased(const BP *b, GRef r)
{
    const GNode *x = &b->G->nodes[r.node];
    if (x->kind != G_COND && x->kind != G_WHILE) return false;
    int s = slot_of(b->G, r);
    return b->alias && (b->alias[NAL * s] >= 0 || b->alias[NAL * s + 1] >= 0);
}

static int sweep_loop(BP *b, int id)
{
    Graph *G = b->G, *g = b->T->g;
    const GNode *n = &G->nodes[id];
    const GRegion *grc = &G->regions[n->regions[0]];
    int nc = grc->nparams;
    bool any = false;
    for (int k = 0; k < nc; k++) any |= b->g[n->vbase + k] != NULL;
    /* its outputs' aliases (loop_out_alias) end here: the carried
     * gradients are what reached the outputs themselves */
    bool *out_a = xcalloc((size_t)nc + 1, sizeof *out_a);
    int *out_b = xmalloc(sizeof *out_b * ((size_t)nc + 1));
    for (int k = 0; k < nc; k++) {
        int os = n->vbase + k;
        out_a[k] = b->alias && b->alias[NAL * os] >= 0;
        out_b[k] = b->alias ? b->alias[NAL * os + 1] : -1;
        for (int w = 0; w < NAL; w++) alias_set(b, os, w, -1, NULL);
    }
    /* a loop a backward replayed keeps its iterations' values (outputs nc
     * and on); a gradient reaching those (a second-order gradient through
     * a staged loop) would have to flow back through every iteration's
     * stacking: the reverse loop's gather, whose gradient is a scatter into
     * zeros of the history's shape, which a backward graph would bake in
     * for one iteration count */
    for (int k = nc; k < n->nout; k++)
        if (b->g[n->vbase + k])
        {
            free(out_a);
            free(out_b);
            return bp_error(b, n, "second-order gradients through a loop on a traced tensor are not supported "
                                  "(take them eagerly: run_eagerly(true))");
        }
    if (!any) {
        free(out_a);
        free(out_b);
        return 0;
    }
    Caps caps = captures(G, id);
    /* its logged reads are no captures: each iteration's has a gradient of
     * its own, carried stacked (two values each, after the others) */
    int *lw = xcalloc((size_t)b->nlr + 1, sizeof *lw), nlw = 0;
    for (int j = 0; j < b->nlr && loop_logged(b, id); j++) {
        if (b->lr_loop[j] != id) continue;
        if (b->lr_role[j] != 3) lw[nlw++] = j; /* (one in its condition: no gradient) */
        int s = G->nodes[b->lr_node[j]].vbase;
        for (int i = 0; i < caps.n; i++)
            if (caps.slot[i] == s) {
                mem_move(caps.slot + i, caps.slot + i + 1, sizeof *caps.slot * (size_t)(caps.n - i - 1));
                mem_move(caps.ref + i, caps.ref + i + 1, sizeof *caps.ref * (size_t)(caps.n - i - 1));
                caps.n--;
                break;
            }
    }
    caps_add_aliases(b, &caps);
    /* an initial value the body does not read (acc = w before the loop, w
     * nowhere in it) is, in the first iteration, the variable's tensor to
     * eager code all the same: what reaches the variable there adds to w's
     * running sum as it comes, after what reached w after the loop. So it
     * counts as a capture the body does not use (palias below), which
     * starts from w's gradient so far; only where something reached w
     * already (else the sum starts from nothing either way: no carried
     * value more), for a loop at the top (one nested in another's body
     * crashed a cached backward: a none flag with no value), not for a
     * body with a fused node */
    bool flat0 = true;
    const GRegion *rb0 = &G->regions[n->regions[1]];
    for (int i = 0; i < rb0->n; i++) flat0 &= G->nodes[rb0->nodes[i]].kind != G_FUSED;
    for (int k = 0; k < nc && flat0; k++)
        if (G->nodes[n->in[k].node].kind != G_CONST && b->g[slot_of(G, n->in[k])] && n->region == 0 &&
            !init_aliased(b, n->in[k]))
            caps_add(&caps, G, n->in[k]);
    /* ... and one that is an if's or a loop's result, which is such a value
     * where a branch ended it on it (cond_out_alias) or the loop ran zero
     * times (loop_out_alias): that value counts so too, and the first
     * iteration goes to it under the alias's bool (pinit below) */
    for (int k = 0; k < nc && flat0 && b->alias && n->region == 0; k++) {
        int is = slot_of(G, n->in[k]);
        if (G->nodes[n->in[k].node].kind != G_COND && G->nodes[n->in[k].node].kind != G_WHILE) continue;
        for (int w = 0; w < 2; w++) {
            int s = b->alias[NAL * is + w];
            for (int j = 0; s >= 0 && b->g[s] && j < G->n; j++)
                if (s >= G->nodes[j].vbase && s < G->nodes[j].vbase + G->nodes[j].nout) {
                    caps_add(&caps, G, (GRef){j, s - G->nodes[j].vbase});
                    break;
                }
        }
        /* (and the result itself, where it is a value of its own: pself) */
        if (b->g[is] && init_aliased(b, n->in[k])) caps_add(&caps, G, n->in[k]);
    }
    /* (what those are in turn, where the body adds to them: a chain, as
     * for the body's own captures) */
    caps_add_aliases(b, &caps);
    /* the loop's own initial values are not captures: their gradients are
     * the carried gradients at the end */
    int ncarry0 = 1 + 2 * (nc + caps.n), nf = 1 + nc + caps.n; /* flags from nf on */
    int ncarry = ncarry0;
    int *lwoff = xcalloc((size_t)nlw + 1, sizeof *lwoff), *lwp = xcalloc((size_t)nlw + 1, sizeof *lwp);
    int *lwq = xcalloc((size_t)nlw + 1, sizeof *lwq);
    for (int q = 0; q < nlw; q++) { /* (GradCtx.lw*) */
        int j = lw[q], role = b->lr_role[j];
        lwoff[q] = ncarry;
        ncarry += 2;
        lwp[q] = lwq[q] = -1;
        if (role == 2 || (role == 1 && b->lr_mate[j] < 0 && b->lr_pre[j] >= 0)) {
            lwp[q] = ncarry;
            ncarry += 2;
        }
        if (role == 2 && b->lr_pslot[j] >= 0) {
            lwq[q] = ncarry;
            ncarry += 2;
        }
    }
    tfe_tensor **init = xcalloc((size_t)ncarry, sizeof *init);
    tfe_tensor **res = xcalloc((size_t)ncarry, sizeof *res);
    tfe_tensor **hist = xcalloc((size_t)nc + 1, sizeof *hist);
    tfe_tensor **sym = xcalloc((size_t)ncarry, sizeof *sym);
    tfe_meta *meta = xcalloc((size_t)ncarry, sizeof *meta);
    bool *capreal = xcalloc((size_t)caps.n + 1, sizeof *capreal), *initreal = xcalloc((size_t)nc + 1, sizeof *initreal);
    int *palias = NULL, *ppass = NULL, *pcs = NULL, *pct = NULL, *pinit = NULL, *pself = NULL;
    tfe_tensor **pcin = NULL;
    int rc = -1;
    for (int k = 0; k < nc; k++) hist[k] = b->m[G->nodes[grc->params[k]].vbase];
    tfe_tensor *count = b->count[id];
    tfe_tensor *one = tensor_from_i64(1, TFE_INT64);
    init[0] = tfe_binary(OP_SUB, count, one);
    tensor_decref(one);
    if (!init[0]) goto out;
    meta[0] = (tfe_meta){.dtype = TFE_INT64, .rank = 0};
    for (int k = nf; k < ncarry0; k++) meta[k] = (tfe_meta){.dtype = TFE_BOOL, .rank = 0};
    for (int q = 0; q < nlw; q++) { /* -0.0s, none everywhere: the iterations fill them in */
        tfe_tensor *st = b->lr_in[lw[q]];
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.dtype = TFE_BOOL;
        at.nints = 1;
        at.ints[0] = st->shape[0];
        at.f[0] = 1.0;
        int o = lwoff[q];
        init[o] = filled(st, -0.0);
        init[o + 1] = tfe_call1(OP_FULL, 0, NULL, &at);
        if (!init[o] || !init[o + 1]) goto out;
        /* a tensor's gradient so far: none, or, for the tensor a read after
         * the loop reads, that read's (which the loop takes over) */
        int ps = lwq[q] >= 0 ? b->lr_pslot[lw[q]] : -1;
        for (int k = 0; k < 2; k++) {
            int at2 = k ? lwq[q] : lwp[q];
            if (at2 < 0) continue;
            tfe_tensor *gs = ps >= 0 ? b->g[ps] : NULL;
            init[at2] = gs ? ref(gs) : filled(b->m[G->nodes[b->lr_node[lw[q]]].vbase], -0.0);
            init[at2 + 1] = gs ? (b->none[ps] ? ref(b->none[ps]) : flag_const(false)) : flag_const(true);
            if (!init[at2] || !init[at2 + 1]) goto out;
        }
        if (ps >= 0) {
            put(b->g, ps, NULL);
            put(b->none, ps, NULL);
        }
    }
    for (int k = ncarry0; k < ncarry; k++) meta_of(&meta[k], init[k]);
    /* the outputs' gradients and the captures' gradients so far; where
     * none (nothing reached them yet), -0.0s, which the first contribution
     * added to leaves as it is (as eager code sets it), flagged as none */
    for (int k = 0; k < nc + caps.n; k++) {
        int slot = k < nc ? n->vbase + k : caps.slot[k - nc];
        tfe_tensor *d = ref(b->g[slot]);
        if (k >= nc) capreal[k - nc] = d && !b->none[slot];
        else initreal[k] = (d && !b->none[slot]) || !differentiable(&n->meta[k]); /* (an int's: no gradient) */
        init[nf + k] = d ? (b->none[slot] ? ref(b->none[slot]) : flag_const(false)) : flag_const(true);
        if (!d && !(d = filled(b->m[slot], -0.0))) goto out;
        init[1 + k] = d;
        if (!init[nf + k]) goto out;
        meta[1 + k] = k < nc ? n->meta[k] : G->nodes[caps.ref[k - nc].node].meta[caps.ref[k - nc].out];
        meta[1 + k].weak = false;
        meta[1 + k].dtype = d->dtype;
    }
    /* a loop variable that starts as a value the body captures (a = x,
     * then x in the body) is that value in the first iteration (a cond or
     * loop in the body captures the value too: caps_add_aliases, and a
     * loop there may start from such a variable in turn: a chain); not for
     * a body with a fused node */
    palias = xmalloc(sizeof *palias * ((size_t)nc + 1));
    ppass = xmalloc(sizeof *ppass * ((size_t)nc + 1));
    const GRegion *grb = &G->regions[n->regions[1]];
    for (int k = 0; k < nc; k++) { /* (the body ends it on a captured value) */
        ppass[k] = -1;
        bool direct = k < grb->nouts && outside_value(G, id, grb->outs[k], 0) >= 0;
        for (int i = 0; i < caps.n && out_b[k] >= 0 && direct; i++)
            if (caps.slot[i] == out_b[k]) ppass[k] = i;
    }
    /* (... on some iterations: loop_cond_targets) */
    pcs = xmalloc(sizeof *pcs * ((size_t)(2 * nc) + 1));
    pct = xmalloc(sizeof *pct * ((size_t)(2 * nc) + 1));
    for (int k = 0; k < nc; k++) {
        int t[2], kp[2], nt = b->af_hist ? loop_cond_targets(G, id, k, t, kp) : 0;
        for (int j = 0; j < 2; j++) {
            pcs[2 * k + j] = pct[2 * k + j] = -1;
            if (j >= nt || !b->af_hist[2 * G->nodes[grc->params[k]].vbase + j]) continue;
            pct[2 * k + j] = t[j];
            pcs[2 * k + j] = kp[j] >= 0 ? G->nodes[grc->params[kp[j]]].vbase : t[j];
        }
    }
    bool flat = true;
    for (int i = 0; i < grb->n; i++) flat &= G->nodes[grb->nodes[i]].kind != G_FUSED;
    pself = xmalloc(sizeof *pself * ((size_t)nc + 1));
    for (int k = 0; k < nc; k++) {
        palias[k] = pself[k] = -1;
        for (int i = 0; i < caps.n && flat; i++)
            if (caps.slot[i] == slot_of(G, n->in[k])) palias[k] = i;
        /* (an if's or a loop's result that may be another value: that one
         * by pinit, where its bool holds; itself elsewhere) */
        if (palias[k] >= 0 && init_aliased(b, n->in[k])) {
            pself[k] = palias[k];
            palias[k] = -1;
        }
    }
    /* one that starts as an if's result, which is a value the body
     * captures where a branch ran (cond_out_alias): that value there */
    pinit = xmalloc(sizeof *pinit * ((size_t)(2 * nc) + 1));
    pcin = xcalloc((size_t)(2 * nc) + 1, sizeof *pcin);
    for (int k = 0; k < nc; k++) {
        int is = slot_of(G, n->in[k]);
        for (int w = 0; w < 2; w++) {
            pinit[2 * k + w] = -1;
            if (!flat || palias[k] >= 0 || !b->alias ||
                (G->nodes[n->in[k].node].kind != G_COND && G->nodes[n->in[k].node].kind != G_WHILE))
                continue;
            if (w == 1 && ppass[k] >= 0) continue; /* (its alias 1 is that one's) */
            for (int i = 0; i < caps.n; i++)
                if (b->alias[NAL * is + w] == caps.slot[i]) {
                    pinit[2 * k + w] = caps.slot[i];
                    pcin[2 * k + w] = b->alias_first[NAL * is + w];
                }
        }
    }
    tfe_tensor **saved = stash(b, &caps);
    int rcond = graph_add_region(g, b->T->region);
    int rbody = graph_add_region(g, rcond);
    make_params(b, rcond, ncarry, meta, NULL, sym);
    /* the flags the body reads: a capture's only where it may be none so
     * far; the outputs' gradients' only where one may be none, which a
     * backward of its own first assumes is nowhere: if then every param's
     * gradient is real in the body, no carried gradient is ever none and
     * the body needs no masks (a loop's usual case); if not, it traces the
     * body again, with the flags (the first try is left unused) */
    tfe_tensor **capf = xcalloc((size_t)caps.n + 1, sizeof *capf);
    for (int i = 0; i < caps.n; i++) capf[i] = capreal[i] ? NULL : sym[nf + nc + i];
    bool pflags = !b->own;
    for (int k = 0; k < nc; k++) pflags |= !initreal[k];
    GradCtx c = {.id = id, .caps = &caps, .dy = sym + 1, .res = res, .nres = ncarry0, .hist = hist,
                 .index = sym[0], .dcap = sym + 1 + nc, .palias = palias, .pinit = pinit, .pself = pself, .pcin = pcin, .ppass = ppass, .pcs = pcs, .pct = pct, .dyf = pflags ? sym + nf : NULL,
                 .sofarf = capf, .nlw = nlw, .lw = lw, .lwoff = lwoff, .lwp = lwp, .lwq = lwq,
                 .lsym = sym, .last = init[0]};
    if (in_region(b, rcond, loop_grad_cond, &c)) { unstash(b, &caps, saved); free(capf); goto out; }
    set_outs(g, rcond, 1, res, b->T);
    tensor_decref(res[0]);
    res[0] = NULL;
    for (;;) {
        c.preal = true;
        if (in_region(b, rbody, loop_grad_body, &c)) { unstash(b, &caps, saved); free(capf); goto out; }
        if (pflags || c.preal) break;
        for (int k = 0; k < ncarry; k++) put(res, k, NULL);
        pflags = true;
        c.dyf = sym + nf;
        rbody = graph_add_region(g, rcond);
    }
    free(capf);
    set_outs(g, rbody, ncarry, res, b->T);
    drop_stash(b, &caps, saved);
    int nid = new_cf_node(b, G_WHILE, n->loc, ncarry, init, ncarry);
    GNode *nn = gnode(g, nid);
    nn->regions[0] = rcond;
    nn->regions[1] = rbody;
    mem_copy(nn->meta, meta, sizeof *meta * (size_t)ncarry);
    tfe_tensor **outs = xcalloc((size_t)ncarry, sizeof *outs);
    if (trace_node_outputs(b->T, nid, outs)) {
        free(outs);
        goto out;
    }
    rc = 0;
    tensor_decref(outs[0]);
    for (int q = 0; q < nlw; q++) { /* the logged reads' gradients, by iteration */
        int j = lw[q];
        put(b->lr_g, j, outs[lwoff[q]]);
        put(b->lr_f, j, outs[lwoff[q] + 1]);
        if (lwq[q] >= 0) { /* the read after the loop's, whole */
            int ps = b->lr_pslot[j];
            put(b->g, ps, outs[lwq[q]]);
            put(b->none, ps, outs[lwq[q] + 1]);
        }
    }
    for (int q = 0; q < nlw; q++) { /* the first iteration's tensor: the read before the loop's */
        int j = lw[q];
        if (b->lr_role[j] != 1 || b->lr_pre[j] < 0) continue;
        int pq = -1;
        for (int m = 0; m < nlw; m++)
            if (lw[m] == (b->lr_mate[j] >= 0 ? b->lr_mate[j] : j)) pq = lwp[m];
        if (pq < 0) continue;
        if (acc_f(b, G->nodes[b->lr_pre[j]].vbase, ref(outs[pq]), outs[pq + 1])) rc = -1;
    }
    for (int q = 0; q < nlw; q++)
        if (lwp[q] >= 0) {
            tensor_decref(outs[lwp[q]]);
            tensor_decref(outs[lwp[q] + 1]);
        }
    /* the captures' whole gradients first, then the initial values' (a value
     * can be both: the loop starts from x and reads x) */
    tfe_tensor *zero = tensor_from_i64(0, TFE_INT64);
    tfe_tensor *ran0 = zero ? tfe_binary(OP_EQ, count, zero) : NULL;
    tfe_tensor *ran1 = zero ? tfe_binary(OP_NE, count, zero) : NULL;
    if (zero) tensor_decref(zero);
    if (!ran0 || !ran1) rc = -1;
    for (int i = 0; i < caps.n; i++) { /* (one with a real gradient so far stays real) */
        bool real = capreal[i];
        put(b->g, caps.slot[i], outs[1 + nc + i]);
        put(b->none, caps.slot[i], real ? NULL : outs[nf + nc + i]);
        if (real) tensor_decref(outs[nf + nc + i]);
    }
    for (int k = 0; k < nc; k++) {
        tfe_tensor *f = outs[nf + k];
        /* (one that started as an if's result: where the loop ran and the
         * branch ended it on a captured value, its first iteration went to
         * that value) */
        tfe_tensor *went = NULL, *rest = NULL;
        for (int w = 0; w < 2 && !rc; w++) {
            if (pinit[2 * k + w] < 0) continue;
            tfe_tensor *t = went ? tfe_binary(OP_LOGICAL_OR, went, pcin[2 * k + w]) : ref(pcin[2 * k + w]);
            if (went) tensor_decref(went);
            if (!(went = t)) rc = -1;
        }
        if (went) {
            tfe_tensor *w1 = ran1 ? tfe_binary(OP_LOGICAL_AND, ran1, went) : NULL;
            rest = w1 ? tfe_call1(OP_LOGICAL_NOT, 1, &w1, NULL) : NULL; /* none ran, or not there */
            if (w1) tensor_decref(w1);
            tensor_decref(went);
            if (!rest) rc = -1;
        }
        if (pself[k] >= 0) { /* its first iteration went to it or to its alias: only when none ran */
            int s = caps.slot[pself[k]];
            if (!out_a[k] && (!ran0 || add_if(b, s, outs[1 + k], f, ran0))) rc = -1;
            tensor_decref(outs[1 + k]);
        } else if (rest && (out_a[k] || differentiable(&G->nodes[n->in[k].node].meta[n->in[k].out]))) {
            tfe_tensor *r2 = out_a[k] && ran1 ? tfe_binary(OP_LOGICAL_AND, ran1, rest) : ref(rest);
            if (!r2 || add_if(b, slot_of(G, n->in[k]), outs[1 + k], f, r2)) rc = -1;
            if (r2) tensor_decref(r2);
            tensor_decref(outs[1 + k]);
        } else if (out_a[k]) { /* where none ran, what reached the output went to its initial value */
            if (palias[k] < 0 && (!ran0 || add_if(b, slot_of(G, n->in[k]), outs[1 + k], f, ran1))) rc = -1;
            tensor_decref(outs[1 + k]);
        } else if (palias[k] >= 0) { /* its first iteration went to the capture: only when none ran */
            int s = caps.slot[palias[k]];
            if (!ran0 || add_if(b, s, outs[1 + k], f, ran0)) rc = -1;
            tensor_decref(outs[1 + k]);
        } else if (!differentiable(&G->nodes[n->in[k].node].meta[n->in[k].out])) {
            tensor_decref(outs[1 + k]); /* (an int counter's: no gradient) */
        } else if (acc_f(b, slot_of(G, n->in[k]), outs[1 + k], f)) {
            rc = -1;
        }
        if (rest) tensor_decref(rest);
        tensor_decref(f);
    }
    if (ran0) tensor_decref(ran0);
    if (ran1) tensor_decref(ran1);
    free(outs);
out:
    for (int i = 0; i < ncarry; i++) {
        if (init[i]) tensor_decref(init[i]);
        if (res[i]) tensor_decref(res[i]);
    }
    free(init);
    free(res);
    free(hist);
    free(sym);
    free(meta);
    free(capreal);
    free(initreal);
    free(palias);
    free(pself);
    free(pinit);
    free(pcin);
    free(ppass);
    free(pcs);
    free(pct);
    free(out_a);
    free(out_b);
    free(lw);
    free(lwoff);
    free(lwp);
    free(lwq);
    caps_free(&caps);
    return rc;
}

/* An outside binding read after a @host call: a leaf the call left as it
 * was passes its gradient to the graph's value of it (times the run's flag,
 * 1 for such a leaf and 0 for a changed one). */
static int host_load_grad(BP *b, const GNode *n)
{
    Graph *G = b->G;
    int nl = n->nout / 2;
    /* one a @host call changed: its gradient would go through the
     * function's ops, which the graph does not have; checked when it runs
     * (a zero gradient, of a value the result does not use, is fine) */
    for (int k = 0; k < nl && n->host->sync->changed; k++)
        if (b->g[n->vbase + k] && differentiable(&n->meta[k]) &&
            host_check_no_gradient(b->I, n->loc, n->host->sync->name, b->g[n->vbase + k]))
            return -1;
    for (int k = 0; k < nl && k < n->nin; k++) {
        tfe_tensor *dy = b->g[n->vbase + k], *flag = b->m[n->vbase + nl + k];
        if (!dy || !flag || !differentiable(&n->meta[k])) continue;
        tfe_tensor *dx = tfe_binary(OP_MUL, dy, flag);
        /* (-0.0 times the flag is -0.0: a none stays exact) */
        if (!dx || acc_f(b, slot_of(G, n->in[k]), dx, b->none[n->vbase + k])) return bp_error(b, n, tfe_error_msg());
    }
    return 0;
}

/* A host call: the gradient of its outputs (its result, then what is in the
 * lists and records it got, after it) is the function's own
 * (stage/host_grad.c). */
static int sweep_host(BP *b, const GNode *n)
{
    Graph *G = b->G;
    if (n->host->sync && n->host->sync->env) return host_load_grad(b, n);
    bool any = false;
    for (int k = 0; k < n->nout; k++) any |= b->g[n->vbase + k] && differentiable(&n->meta[k]);
    if (!any) return 0;
    if (!host_node_differentiable(n))
        return bp_error(b, n, "gradients through this host call are not supported");
    tfe_tensor *inb[16] = {NULL}, *dxb[16] = {NULL};
    tfe_tensor **in = n->nin <= 16 ? inb : xmalloc(sizeof *in * (size_t)n->nin);
    tfe_tensor **dx = n->nin <= 16 ? dxb : xmalloc(sizeof *dx * (size_t)n->nin);
    /* an input's gradient so far goes in (first place only, not one a loop
     * adds to a captured value): the function's uses of it add to it in
     * eager order, and what comes back is the total */
    bool totb[16], *total = n->nin <= 16 ? totb : xmalloc(sizeof *total * (size_t)n->nin);
    for (int i = 0; i < n->nin; i++) {
        int slot = slot_of(G, n->in[i]);
        in[i] = b->m[slot];
        const GNode *src = &G->nodes[n->in[i].node];
        dx[i] = differentiable(&src->meta[n->in[i].out]) && src->kind != G_CONST ? NULL : TFE_GRAD_SKIP;
        total[i] = dx[i] == NULL && !has_alias(b, slot);
        for (int j = 0; j < i && total[i]; j++) total[i] = slot_of(G, n->in[j]) != slot;
        if (total[i]) dx[i] = b->g[slot]; /* borrowed; NULL: none yet */
    }
    tfe_tensor **out = xcalloc((size_t)n->nout + 1, sizeof *out), **dy = xcalloc((size_t)n->nout + 1, sizeof *dy);
    for (int k = 0; k < n->nout; k++) {
        out[k] = b->m[n->vbase + k];
        dy[k] = differentiable(&n->meta[k]) ? b->g[n->vbase + k] : NULL;
    }
    /* it runs again with what this call of the function read then
     * (stage/host_reads.h): the calls are numbered in the effect order */
    int call = 0;
    for (const GNode *m = G->nodes; m < n; m++) call += host_call_counts(m);
    /* where every gradient that reaches its results is none in eager terms
     * (a loop's carried value that nothing after the loop used), what the
     * function's gradient gives is none too, as sweep_op's: no -0.0 from
     * zeros through a negative factor (stage_grad_host_none_loop) */
    tfe_tensor *none = NULL;
    bool first = true;
    for (int k = 0; k < n->nout && b->none; k++) {
        if (!dy[k]) continue;
        tfe_tensor *f = first ? ref(b->none[n->vbase + k]) : flag_and(none, b->none[n->vbase + k]);
        if (none) tensor_decref(none);
        none = f;
        first = false;
    }
    int rc = host_node_vjp(b->I, n, call, in, out, dy, dx);
    free(out);
    free(dy);
    for (int i = 0; i < n->nin; i++) {
        if (dx[i] == TFE_GRAD_SKIP) dx[i] = NULL;
        if (!dx[i]) continue;
        int slot = slot_of(G, n->in[i]);
        if (rc) {
            tensor_decref(dx[i]);
        } else if (total[i] && none) {
            /* the total where real; else the gradient so far, and its flag */
            tfe_tensor *was = b->g[slot] ? ref(b->g[slot]) : filled(dx[i], -0.0);
            tfe_tensor *in3[3] = {none, was, dx[i]};
            tfe_tensor *r = was ? tfe_call1(OP_WHERE, 3, in3, NULL) : NULL;
            tfe_tensor *wf = b->g[slot] ? ref(b->none[slot]) : flag_const(true);
            put(b->none, slot, flag_where(none, wf, NULL));
            if (wf) tensor_decref(wf);
            if (was) tensor_decref(was);
            tensor_decref(dx[i]);
            if (!r) rc = -1;
            else put(b->g, slot, r);
        } else if (total[i]) {
            unflag(b, slot);
            put(b->g, slot, dx[i]);
        } else if (none) {
            tfe_tensor *d = tfe_grad_flag_fill(none, dx[i], -0.0); /* -0.0s where none: what adds nothing */
            tensor_decref(dx[i]);
            if (!d || acc_f(b, slot, d, none)) rc = -1;
        } else if (acc(b, slot, dx[i])) {
            rc = -1;
        }
    }
    if (none) tensor_decref(none);
    if (total != totb) free(total);
    if (in != inb) free(in);
    if (dx != dxb) free(dx);
    return rc ? bp_error(b, n, tfe_error_msg()) : 0;
}

/* A loop's output is, at run time, a tensor eager code holds by another
 * name: its initial value where it ran zero times (alias 0), or, where it
 * ran, the captured value its body ends it on (`acc = x` last; alias 1; not
 * for a body with a fused node). What reaches the output after the loop is
 * added to that value's gradient as it comes, there (eager code's one
 * running sum); sweep_loop hands on only the rest. Set before the region's
 * sweep (what reached the output already, the region's seed, goes now). */
static int loop_out_alias(BP *b, int id)
{
    const Graph *G = b->G;
    const GNode *n = &G->nodes[id];
    const GRegion *grc = &G->regions[n->regions[0]], *grb = &G->regions[n->regions[1]];
    if (!b->count[id]) return 0;
    bool flat = true;
    for (int i = 0; i < grb->n; i++) flat &= G->nodes[grb->nodes[i]].kind != G_FUSED;
    tfe_tensor *zero = tensor_from_i64(0, TFE_INT64);
    tfe_tensor *c[2] = {zero ? tfe_binary(OP_EQ, b->count[id], zero) : NULL,
                        zero ? tfe_binary(OP_NE, b->count[id], zero) : NULL};
    int rc = zero && c[0] && c[1] ? 0 : -1;
    for (int k = 0; k < grc->nparams && k < grb->nouts && !rc; k++) {
        int os = n->vbase + k;
        if (!differentiable(&n->meta[k])) continue;
        int to[NAL] = {-1, -1, -1, -1, -1};
        if (differentiable(&G->nodes[n->in[k].node].meta[n->in[k].out])) to[0] = slot_of(G, n->in[k]);
        if (flat && differentiable(&G->nodes[grb->outs[k].node].meta[grb->outs[k].out]))
            to[1] = outside_value(G, id, grb->outs[k], 0);
        /* (or, where the last iteration's flags say so, a value an if in
         * the body ends it on: loop_cond_targets; aliases 2 and 3) */
        tfe_tensor *cw[NAL] = {c[0], c[1], NULL, NULL, NULL};
        int t[2], kp[2], nt = to[1] < 0 && b->af_last ? loop_cond_targets(G, id, k, t, kp) : 0;
        for (int j = 0; j < nt; j++)
            if ((cw[2 + j] = b->af_last[2 * os + j])) to[2 + j] = kp[j] >= 0 ? n->vbase + kp[j] : t[j];
        for (int w = 0; w < NAL && !rc; w++) {
            if (to[w] < 0 || to[w] == os) continue;
            alias_set(b, os, w, to[w], cw[w]);
            if (b->g[os] && add_if(b, to[w], b->g[os], b->none ? b->none[os] : NULL, cw[w])) rc = -1;
        }
    }
    if (zero) tensor_decref(zero);
    if (c[0]) tensor_decref(c[0]);
    if (c[1]) tensor_decref(c[1]);
    return rc;
}

/* The values from outside cond id that v, a branch's result, may be:
 * each leaf of the ifs nested in the branch that end it (and of loops
 * there that end it on one such value: outside_value), at most two slots
 * in t (*nt; false where more); *own: some leaf is a value of the
 * branch's own. */
static bool cond_leaves(const Graph *G, int id, GRef v, int *t, int *nt, bool *own, int depth)
{
    int s = outside_value(G, id, v, 0);
    if (s >= 0) {
        for (int i = 0; i < *nt; i++)
            if (t[i] == s) return true;
        if (*nt == 2) return false;
        t[(*nt)++] = s;
        return true;
    }
    const GNode *c = &G->nodes[v.node];
    if (depth > 8) return false;
    if (c->kind != G_COND) {
        *own = true;
        return true;
    }
    for (int br = 0; br < 2; br++) {
        const GRegion *r = &G->regions[c->regions[br]];
        if (v.out >= r->nouts || !cond_leaves(G, id, r->outs[v.out], t, nt, own, depth + 1)) return false;
    }
    return true;
}

/* A traced bool, true where v (cond_leaves) is the value of slot target
 * (new ref; NULL: a predicate the replay did not hand out, or an error).
 * A predicate made in a branch is the value the replay of cond id handed
 * out (false where another branch ran, which the outer predicates mask:
 * alias_flag's way for a loop body's ifs). */
static tfe_tensor *cond_leaf_flag(BP *b, int id, GRef v, int target, int depth)
{
    const Graph *G = b->G;
    int s = outside_value(G, id, v, 0);
    if (s >= 0) return flag_const(s == target);
    const GNode *c = &G->nodes[v.node];
    if (depth > 8) return NULL;
    if (c->kind != G_COND) return flag_const(false); /* (a value of the branch's own) */
    int ps = slot_of(G, c->in[0]);
    tfe_tensor *pred = !node_inside(G, c->in[0].node, id) ? b->m[ps]
                       : b->xv && b->xv[ps] && graph_region_visible(b->T->g, b->xv_reg[ps], b->T->region) ? b->xv[ps]
                                                                                                            : NULL;
    if (!pred || pred->dtype != TFE_BOOL) return NULL;
    tfe_tensor *f[2];
    for (int br = 0; br < 2; br++)
        f[br] = cond_leaf_flag(b, id, G->regions[c->regions[br]].outs[v.out], target, depth + 1);
    tfe_tensor *r = f[0] && f[1] ? flag_where(pred, f[0], f[1]) : NULL;
    if (f[0]) tensor_decref(f[0]);
    if (f[1]) tensor_decref(f[1]);
    return r;
}

/* The same for a cond: its output is, where branch w runs, the captured
 * value that branch ends it on (alias w); sweep_cond hands on the rest.
 * So is an output that branch w ends on the value it ends an earlier
 * output on (a0 = tanh(v); a1 = a0 in the branch): eager code has one
 * tensor, whose gradient adds the uses of a0 and of a1 after the if into
 * one running sum in tape order; the cond's backward adding the two
 * outputs' sums at the branch's value differed in the last bit (property
 * seed 270801). What reaches the later output goes to the earlier one as
 * it comes, where branch w runs, and the branch takes the earlier's only. */
static int cond_out_alias(BP *b, int id)
{
    const Graph *G = b->G;
    const GNode *n = &G->nodes[id];
    tfe_tensor *pred = b->m[slot_of(G, n->in[0])];
    if (!pred || pred->dtype != TFE_BOOL) return 0;
    tfe_tensor *c[2] = {pred, tfe_call1(OP_LOGICAL_NOT, 1, &pred, NULL)};
    if (!c[1]) return -1;
    int rc = 0;
    for (int k = 0; k < n->nout && !rc; k++) {
        int os = n->vbase + k;
        if (!differentiable(&n->meta[k])) continue;
        for (int w = 0; w < 2 && !rc; w++) {
            const GRegion *rb = &G->regions[n->regions[w]];
            if (k >= rb->nouts || !differentiable(&G->nodes[rb->outs[k].node].meta[rb->outs[k].out])) continue;
            /* (an output the branch ends on the value, made in it, that it
             * ends an earlier output on: a1 = a0, one tensor to eager code;
             * what reaches it goes to the earlier one as it comes, seed
             * 270801) */
            if (node_inside(G, rb->outs[k].node, id)) {
                int to = slot_of(G, rb->outs[k]), e = 0;
                while (e < k && !(slot_of(G, rb->outs[e]) == to && differentiable(&n->meta[e]))) e++;
                if (e < k) {
                    alias_set(b, os, w, n->vbase + e, c[w]);
                    if (b->g[os] && add_if(b, n->vbase + e, b->g[os], b->none ? b->none[os] : NULL, c[w])) rc = -1;
                    continue;
                }
            }
            /* (or the result of an if or a loop nested in the branch that
             * is such a value, or one of two, where its predicates say so:
             * alias 2 + w for the second; stage_grad_nested_if_alias_bits) */
            int t[2], nt = 0;
            bool own = false;
            if (!cond_leaves(G, id, rb->outs[k], t, &nt, &own, 0) || !nt) continue;
            tfe_tensor *cw[2] = {NULL, NULL}, *lf[2] = {NULL, NULL}, *rest = NULL;
            bool ok = true;
            for (int j = 0; j < nt && ok; j++) {
                ok = t[j] != os;
                lf[j] = ok ? (nt == 1 && !own ? flag_const(true) : cond_leaf_flag(b, id, rb->outs[k], t[j], 0)) : NULL;
                cw[j] = !lf[j] ? NULL : nt == 1 && !own ? ref(c[w]) : tfe_binary(OP_LOGICAL_AND, c[w], lf[j]);
                ok = ok && cw[j];
            }
            if (ok && own) { /* (the branch takes the rest: where no alias holds) */
                tfe_tensor *any = nt == 2 ? tfe_binary(OP_LOGICAL_OR, lf[0], lf[1]) : ref(lf[0]);
                rest = any ? tfe_call1(OP_LOGICAL_NOT, 1, &any, NULL) : NULL;
                if (any) tensor_decref(any);
                ok = rest != NULL;
            }
            if (ok) {
                if (own) {
                    if (!b->cond_rest) b->cond_rest = xcalloc((size_t)(2 * (G->nvals + 1)), sizeof *b->cond_rest);
                    put(b->cond_rest, 2 * os + w, ref(rest));
                }
                for (int j = 0; j < nt && !rc; j++) {
                    alias_set(b, os, j ? 2 + w : w, t[j], cw[j]);
                    if (b->g[os] && add_if(b, t[j], b->g[os], b->none ? b->none[os] : NULL, cw[j])) rc = -1;
                }
            }
            for (int j = 0; j < 2; j++) {
                if (cw[j]) tensor_decref(cw[j]);
                if (lf[j]) tensor_decref(lf[j]);
            }
            if (rest) tensor_decref(rest);
        }
    }
    tensor_decref(c[1]);
    return rc;
}

static int sweep_region(BP *b, int r)
{
    const GRegion *reg = &b->G->regions[r];
    for (int i = 0; i < reg->n; i++) {
        const GNode *n = &b->G->nodes[reg->nodes[i]];
        if (n->kind == G_WHILE && loop_out_alias(b, reg->nodes[i])) return -1;
        if (n->kind == G_COND && cond_out_alias(b, reg->nodes[i])) return -1;
    }
    for (int i = reg->n - 1; i >= 0; i--) {
        int id = reg->nodes[i];
        const GNode *n = &b->G->nodes[id];
        int rc = 0;
        if (n->kind == G_OP) rc = sweep_op(b, n);
        else if (n->kind == G_FUSED) rc = sweep_fused(b, id);
        else if (n->kind == G_COND) rc = sweep_cond(b, id);
        else if (n->kind == G_WHILE) rc = sweep_loop(b, id);
        else if (n->kind == G_HOST) rc = sweep_host(b, n);
        if (rc) return -1;
    }
    return 0;
}

/* Is t the value of one of G's constants? */
static bool const_value(const Graph *G, const tfe_tensor *t)
{
    for (int i = 0; i < G->n; i++)
        if (G->nodes[i].kind == G_CONST && G->nodes[i].value == t) return true;
    return false;
}

/* The same asked for many tensors: G's constants' values sorted, searched
 * in log time (a backward of a 10,000-op chain asks for each of its
 * inputs; const_value over every node made its first run quadratic). */
typedef struct ConstSet { const tfe_tensor **v; int n; } ConstSet;

static int ptr_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t)*(const tfe_tensor *const *)a, y = (uintptr_t)*(const tfe_tensor *const *)b;
    return x < y ? -1 : x > y;
}

static ConstSet const_set(const Graph *G)
{
    ConstSet cs = {xmalloc(sizeof *cs.v * ((size_t)G->n + 1)), 0};
    for (int i = 0; i < G->n; i++)
        if (G->nodes[i].kind == G_CONST && G->nodes[i].value) cs.v[cs.n++] = G->nodes[i].value;
    qsort(cs.v, (size_t)cs.n, sizeof *cs.v, ptr_cmp);
    return cs;
}

static bool const_set_has(const ConstSet *cs, const tfe_tensor *t)
{
    return cs->n && bsearch(&t, cs->v, (size_t)cs->n, sizeof *cs->v, ptr_cmp) != NULL;
}

/* --- a graph call as one tape entry ------------------------------------------------------- */

/* Which forward values a backward starts from: the graph's inputs and the
 * variable reads of its top region are the entry's inputs (the sources of
 * gradients); host calls, random draws and collectives of the top region are
 * saved (replaying them would not give the same values, or would talk to
 * the other ranks again). */
typedef struct Plan { int *src, *node, nsrc; int *saved, nsaved; } Plan; /* node: each source's */

static Plan plan_of(const Graph *G)
{
    Plan p = {0};
    p.src = xmalloc(sizeof *p.src * (size_t)(G->ninputs + G->n + 1));
    p.node = xmalloc(sizeof *p.node * (size_t)(G->ninputs + G->n + 1));
    p.saved = xmalloc(sizeof *p.saved * (size_t)(G->n + 1));
    for (int i = 0; i < G->ninputs; i++) {
        p.node[p.nsrc] = G->inputs[i];
        p.src[p.nsrc++] = G->nodes[G->inputs[i]].vbase;
    }
    const GRegion *top = &G->regions[0];
    for (int i = 0; i < G->n; i++) /* variable reads anywhere: sources */
        if (G->nodes[i].kind == G_VAR_READ) {
            p.node[p.nsrc] = i;
            p.src[p.nsrc++] = G->nodes[i].vbase;
        }
    for (int i = 0; i < top->n; i++) {
        const GNode *n = &G->nodes[top->nodes[i]];
        if ((n->kind == G_HOST && n->nout) || (n->kind == G_OP && (tfe_ops[n->op].flags & (F_RANDOM | F_COLLECTIVE))))
            for (int k = 0; k < n->nout; k++) p.saved[p.nsaved++] = n->vbase + k;
    }
    return p;
}

/* The differentiable host call whose result slot s of G is, or NULL. */
static const GNode *saved_host(const Graph *G, int s)
{
    for (int i = 0; i < G->n; i++) {
        const GNode *n = &G->nodes[i];
        if (s >= n->vbase && s < n->vbase + n->nout)
            return n->kind == G_HOST && host_node_differentiable(n) && differentiable(&n->meta[s - n->vbase]) ? n : NULL;
    }
    return NULL;
}

/* A graph run executed R (optimized) while its backward derives from B (R as
 * traced, R->raw). The optimizer never removes, merges or reorders inputs and
 * effect nodes (variable reads, host calls, random draws), so those of B and
 * R pair up in order: map[B node] = R node for them, -1 for the rest. NULL
 * when they do not pair up (then the backward derives from R itself). */
static bool effect_kind(const GNode *n)
{
    return n->kind == G_VAR_READ || n->kind == G_HOST ||
           (n->kind == G_OP && (tfe_ops[n->op].flags & (F_RANDOM | F_COLLECTIVE)));
}

static int wait_of(const Graph *R, int start)
{
    for (int w = 0; w < R->n; w++)
        if (R->nodes[w].half == GH_WAIT && R->nodes[w].in[0].node == start) return w;
    return -1;
}

static int *effect_map(const Graph *B, const Graph *R)
{
    int *map = xmalloc(sizeof *map * (size_t)(B->n + 1));
    int j = 0;
    for (int i = 0; i < B->n; i++) {
        map[i] = -1;
        if (B->nodes[i].kind == G_INPUT) {
            map[i] = R->inputs[B->nodes[i].input_index];
            continue;
        }
        if (!effect_kind(&B->nodes[i])) continue;
        /* an allreduce that graph/overlap.c split: the start stands where the
         * whole node stood, the wait (added last) holds its result */
        while (j < R->n && (!effect_kind(&R->nodes[j]) || R->nodes[j].half == GH_WAIT)) j++;
        if (j == R->n || R->nodes[j].kind != B->nodes[i].kind) {
            free(map);
            return NULL;
        }
        map[i] = R->nodes[j].half == GH_START ? wait_of(R, j) : j;
        j++;
    }
    return map;
}

/* The run's value of B's slot s, or NULL (not computed, or not an input or
 * effect node). */
static tfe_tensor *run_value(const Graph *B, const Graph *R, const int *map, GRun *x, int s)
{
    for (int k = 0; k < B->n; k++) {
        const GNode *n = &B->nodes[k];
        if (s < n->vbase || s >= n->vbase + n->nout) continue;
        int rk = map ? map[k] : k;
        return rk < 0 ? NULL : x->v[R->nodes[rk].vbase + (s - n->vbase)];
    }
    return NULL;
}

/* Source i of this call is a read a traced cond hands on, in the branch the
 * run went through, before any assign of its variable there (mark_exported),
 * recorded into a trace by a tape made there: it read t, the variable's
 * value when the cond started. That is one tensor with an earlier read of t
 * only on the calls where nothing between assigned the variable (another
 * traced if, say), where eager code reads another tensor and sums its
 * gradient apart. So, as a read in the branch not taken (below), it is a
 * header of its own, noted as a read where its branch runs, and the
 * gradient merges it with the reads that are one tensor with it on a call
 * (builtins_autodiff.c, merge_reads); the branch's reads of t, which the
 * trace of the branch noted as t's, are no longer. One header for all the
 * run's reads of t there. New ref, or NULL: not such a read. */
static tfe_tensor *ran_read_own(Interp *I, const Graph *B, const Plan *p, int i, tfe_tensor *t)
{
    Tracer *tr = I->tracer;
    if (!tr || !tr->cf_running) return NULL;
    for (int k = 0; k < B->n; k++) {
        const GNode *n = &B->nodes[k];
        if (n->kind != G_VAR_READ || n->vbase != p->src[i]) continue;
        if (!n->fresh_region || n->after_assign) return NULL;
        struct CfStart *cs = trace_cf_entry(tr, n->host->obj.u.o);
        if (!cs || cs->t != t) return NULL;
        if (!cs->own) {
            if (!(cs->own = tensor_alias(t))) return NULL;
            /* to a tape outside the call (which read t as eager code does)
             * the header is a copy of t: one sum, as trace_var_read's */
            if (tr->tapes_at_begin) {
                static const tfe_attrs none = {.naxes = -1};
                const tfe_opcall c = {.op = OP_COPY, .nin = 1, .nout = 1, .in = &t, .at = &none, .out = &cs->own};
                tfe_tape_record_outer(&c, tr->tapes_at_begin);
            }
            tapes_read_unnote(tr->id, n->host->obj, t, n->fresh_region, n->fresh_region);
            tapes_read_fresh(tr->id, n->host->obj, cs->own, n->fresh_region, false, n->at_end);
        }
        tensor_incref(cs->own);
        return cs->own;
    }
    return NULL;
}

/* The value of source i of this call (new ref): a variable read that did not
 * run (a branch not taken) stands for the variable's current value. */
static tfe_tensor *source_value(Interp *I, const Graph *B, const Graph *R, const int *map, const Plan *p, GRun *x, int i)
{
    tfe_tensor *t = run_value(B, R, map, x, p->src[i]);
    if (t) {
        tfe_tensor *own = ran_read_own(I, B, p, i, t);
        if (own) return own;
        tensor_incref(t);
        return t;
    }
    /* a read that did not run (in a branch not taken): eager code did not
     * read the variable there, so no tape may note it as a read (a tape's
     * gradient for a variable adds those of all the tensors it was read
     * as, and this one's would be zeros: -0.0 + 0.0 is 0.0). Its current
     * value stands in, seen by no tape; its gradient is none. (While a
     * trace records, the read is a node of it.) */
    for (int k = 0; k < B->n; k++) {
        const GNode *n = &B->nodes[k];
        if (n->kind != G_VAR_READ || n->vbase != p->src[i]) continue;
        if (n->fresh_region && I->tracer && I->tracer->cf_running) {
            /* ... except a read a traced cond hands on, recorded into a
             * trace by a tape made there (stage/trace_cf.c, mark_exported):
             * it stands for what eager code reads on the calls that take
             * its branch. After an assign there, a tensor of its own, whose
             * gradient eager code sums apart and adds to the variable's
             * (zeros where nothing reached it). Else the variable's value
             * when the cond started, which is one tensor with a read before
             * it on the calls where nothing between assigned the variable.
             * A header of its own either way, noted as a read where that
             * branch runs: the gradient merges the reads that are one
             * tensor on the calls where they are (builtins_autodiff.c,
             * merge_reads). */
            tfe_tensor *s0 = n->after_assign ? NULL : trace_cf_start(I->tracer, n->host->obj.u.o);
            tfe_tensor *a = tensor_alias(s0 ? s0 : variable_peek(n->host->obj));
            if (a) tapes_read_fresh(I->tracer->id, n->host->obj, a, n->fresh_region, n->after_assign, n->at_end);
            return a;
        }
        if (trace_recording(I)) return value_to_tensor(n->host->obj);
        t = variable_peek(n->host->obj);
        tensor_incref(t);
        return t;
    }
    return NULL;
}

typedef struct GCallGrad {
    tfe_custom_grad base;
    Interp *I;
    Graph *G;            /* the graph the backward derives from (the run's, as traced): ref */
    Graph *run;          /* the graph that ran (keeps G's frames alive): ref */
    Plan plan;
    tfe_tensor **saved;  /* plan.nsaved values of this call (owned) */
    tfe_attrs *draws;    /* by node: the random draws of this call (owned), or NULL */
    /* the saved results of differentiable host calls, which are outputs of
     * the entry after the graph's own (indices into saved): a backward
     * reads them, and a tape outside it (a higher order) reaches the host
     * call's inputs through them */
    int *hout, nhout;
    /* kept branch values: the values of the ops in the branch that ran of
     * a cond of the top region, which the cond's backward reads (CondX),
     * outputs of the entry after the saved host results, by slot of G
     * (xslot); only where G is a cond of a trace in progress, run as one
     * tape entry (Graph.noted_loops: the tracing call). A backward reads
     * them rather than a replay of them, so to a tape recording it (a
     * higher order) a value a rule reads is the tensor the forward made,
     * as in eager code: what reaches it through the backward and through
     * the forward adds to one sum (branch_kept, replay_cond).
     * With hold set (a call under two recording tapes or more, any of which may
     * record the backward, a higher order: held_slots), they are instead
     * every value of the forward that is no output of the graph: its top
     * region's ops' and conds' outputs and the values of the branches
     * that ran (the backward puts the ops' in BP.m, the conds' outputs in
     * BP.fo, the branch values in BP.fx), and a backward recorded by a tape reads them (and
     * the graph's outputs that are ops' values) rather than a replay */
    int *xslot, nx;
    bool hold;
    /* by output of the top region: the input it was at this call (a loop's
     * result passed through: stage_graph_call_ran's same), or -1 (owned) */
    int *same_out, nsame_out;
    /* the values of the forward's ops, kept from its run (owned), by slot
     * of G: a backward with no tape watching it reads them instead of
     * replaying the forward (nkept 0: none kept) */
    tfe_tensor **kept;
    int *kslot, nkept;
    /* G's logged reads (BP.lr_*): nodes, loops, and how many values each
     * read in this call; those values are sources of the entry after the
     * plan's (nlog in all), read j's in iteration order */
    int nlr, *lr_node, *lr_loop, *lr_count, nlog;
    int *lr_role, *lr_mate, *lr_pre, *lr_post; /* (logged_roles) */
    /* the shapes of this call's values whose shape depends on the data
     * (data_shapes): part of its backward graph's key (-1: not known, so
     * no backward graph is kept or taken for it) */
    tfe_meta *dd;
    int ndd;
    /* tensors a tape tracks that a @host call of this run read without its
     * node taking them as inputs (stage/host_reads.h): the entry's last
     * sources, whose gradient the backward cannot give; a gradient that
     * reaches one is an error. extra_what: its message (owned) */
    int nextra;
    char **extra_what;
    /* the bindings and variables those calls read that their nodes do not
     * take, with their values then: the backward runs with them */
    HostSnap *snap;
    int nsnap;
} GCallGrad;

static void gcall_release(tfe_custom_grad *self)
{
    GCallGrad *c = (GCallGrad *)self;
    for (int i = 0; i < c->plan.nsaved; i++)
        if (c->saved[i]) tensor_decref(c->saved[i]);
    free(c->saved);
    free(c->same_out);
    for (int i = 0; i < c->nkept; i++)
        if (c->kept[i]) tensor_decref(c->kept[i]);
    free(c->kept);
    free(c->kslot);
    free(c->hout);
    free(c->xslot);
    free(c->lr_node);
    free(c->lr_loop);
    free(c->lr_count);
    free(c->lr_role);
    free(c->lr_mate);
    free(c->lr_pre);
    free(c->lr_post);
    free(c->draws);
    free(c->dd);
    for (int i = 0; i < c->nextra; i++) free(c->extra_what[i]);
    free(c->extra_what);
    host_snaps_free(c->snap, c->nsnap);
    free(c->plan.src);
    free(c->plan.node);
    free(c->plan.saved);
    graph_decref(c->G);
    graph_decref(c->run);
    free(c);
}

/* --- cached backward graphs ------------------------------------------------------------ */

/* Does G have an op whose result's shape depends on the data (x[mask],
 * unique, bincount: F_SELFOUT)? Its backward is traced from one call's
 * values, so that size is in it as any other (sum's gradient broadcasts to
 * it, mean's divides by it), though no input's shape tells it. */
static bool data_shaped(const Graph *G)
{
    for (int i = 0; i < G->n; i++)
        if (G->nodes[i].kind == G_OP && (tfe_ops[G->nodes[i].op].flags & F_SELFOUT)) return true;
    return false;
}

/* The shapes of those values in this call (run x of B), for the backward
 * graph's key; x NULL (B did not run as itself): not known. */
static void data_shapes(GCallGrad *c, const Graph *B, GRun *x)
{
    if (!data_shaped(B)) return;
    if (!x) {
        c->ndd = -1;
        return;
    }
    c->dd = xcalloc((size_t)B->nvals + 1, sizeof *c->dd);
    for (int i = 0; i < B->n; i++) {
        const GNode *n = &B->nodes[i];
        if (n->kind != G_OP || !(tfe_ops[n->op].flags & F_SELFOUT)) continue;
        for (int k = 0; k < n->nout; k++) {
            const tfe_tensor *t = x->v[n->vbase + k];
            if (!t) {
                free(c->dd);
                c->dd = NULL;
                c->ndd = -1;
                return;
            }
            meta_of(&c->dd[c->ndd++], t);
        }
    }
}

/* A backward graph is traced from one call's values, so the sizes it was
 * traced with are in it (a mean's divisor, a broadcast's target shape): it
 * serves only calls whose backward inputs have the same dtypes and shapes.
 * A relaxed graph runs with many sizes; a few backwards are kept for it. */
enum { BWD_KEEP = 8 };

static void meta_of(tfe_meta *m, const tfe_tensor *t)
{
    memset(m, 0, sizeof *m);
    m->dtype = t->dtype;
    m->weak = t->weak;
    m->rank = t->rank;
    for (int d = 0; d < t->rank; d++) m->shape[d] = t->shape[d];
}

static GBwd *bwd_find(Graph *G, tfe_tensor *const *bin, int nb, const bool *pres, int npres, const int *one,
                      int nin, const GCallGrad *c)
{
    for (GBwd *w = G->bwd; w; w = w->next) {
        if (w->nkey != nb + c->ndd || w->nsrc != npres || !w->same != !one) continue;
        bool same = true;
        for (int i = 0; i < npres && same; i++) same = w->acc[i] == pres[i];
        for (int i = 0; i < nin && one && same; i++) same = w->same[i] == one[i];
        for (int i = 0; i < nb && same; i++) {
            tfe_meta m;
            meta_of(&m, bin[i]);
            same = m.weak == w->key[i].weak && meta_same_shape(&m, &w->key[i]);
        }
        for (int i = 0; i < c->ndd && same; i++) same = meta_same_shape(&c->dd[i], &w->key[nb + i]);
        /* (the forward tensors it reads stand for those slots) */
        same = same && w->nheld == 1 + c->nx && w->held[0] == c->hold;
        for (int j = 0; j < c->nx && same; j++) same = w->held[1 + j] == c->xslot[j];
        if (same) return w;
    }
    return NULL;
}

/* Keep bg (takes a reference; takes has, one) as G's backward for these
 * inputs and c's data-shaped values, newest first; the oldest beyond
 * BWD_KEEP is dropped. */
static void bwd_add(Graph *G, Graph *bg, bool *has, tfe_tensor *const *bin, int nb, const bool *pres, int npres,
                    int *one, const GCallGrad *c)
{
    GBwd *w = xcalloc(1, sizeof *w);
    w->nsrc = npres;
    w->same = one;
    w->acc = xcalloc((size_t)npres + 1, sizeof *w->acc);
    mem_copy(w->acc, pres, sizeof *pres * (size_t)npres);
    w->g = bg;
    bg->refcount++;
    w->has = has;
    w->nkey = nb + c->ndd;
    w->key = xcalloc((size_t)w->nkey + 1, sizeof *w->key);
    for (int i = 0; i < nb; i++) meta_of(&w->key[i], bin[i]);
    for (int i = 0; i < c->ndd; i++) w->key[nb + i] = c->dd[i];
    w->nheld = 1 + c->nx;
    w->held = xmalloc(sizeof *w->held * (size_t)w->nheld);
    w->held[0] = c->hold;
    mem_copy(w->held + 1, c->xslot, sizeof *c->xslot * (size_t)c->nx);
    w->next = G->bwd;
    G->bwd = w;
    GBwd *last = G->bwd;
    for (int n = 1; n < BWD_KEEP && last->next; n++) last = last->next;
    GBwd *old = last->next;
    last->next = NULL;
    while (old) {
        GBwd *next = old->next;
        graph_decref(old->g);
        free(old->has);
        free(old->key);
        free(old->acc);
        free(old->same);
        free(old->held);
        free(old);
        old = next;
    }
}

/* --- a relaxed graph's backward, for one call's sizes -----------------------------------
 * A relaxed trace's graph (staging.md section 4) has unknown dims in its
 * inputs and top region, but the nodes inside its conds and loops keep the
 * sizes of the call that traced it. The backward traces those regions
 * symbolically from the metas (a loop's params, a cond's outputs, the
 * shapes of gradients carried through), so it would bake in the traced
 * sizes and fail, or blame the branches' shapes, on a call with others. So
 * the backward of such a call is traced from a copy of the graph whose
 * metas are inferred again from this call's inputs. */

static void infer_region(Graph *g, int r);

/* n takes m's rank and dims (its dtype and weakness stay). */
static void meta_shape(tfe_meta *n, const tfe_meta *m)
{
    n->rank = m->rank;
    mem_copy(n->shape, m->shape, sizeof(int64_t) * (size_t)m->rank);
}

static void infer_node(Graph *g, int id)
{
    GNode *n = gnode(g, id);
    if (n->kind == G_OP && n->nout <= 16 && n->nin <= 16) {
        tfe_tensor *in[16];
        for (int k = 0; k < n->nin; k++) {
            tfe_meta *m = &gnode(g, n->in[k].node)->meta[n->in[k].out];
            in[k] = tensor_symbolic(m->dtype, m->weak, m->rank, m->shape);
        }
        tfe_meta out[16];
        tfe_tensor *o[32];
        const tfe_opcall c = {.op = n->op, .nin = n->nin, .nout = n->nout, .in = in, .at = n->at, .out = o};
        if (tfe_ops[n->op].infer(&c, out) == 0)
            for (int k = 0; k < n->nout; k++) n->meta[k] = out[k];
        tfe_error_clear(); /* a rule that cannot: the meta stays as traced */
        for (int k = 0; k < n->nin; k++) tensor_decref(in[k]);
    } else if (n->kind == G_WHILE) {
        /* a loop keeps its carried values' shapes: those it starts from */
        for (int w = 0; w < 2; w++) {
            GRegion *reg = &g->regions[n->regions[w]];
            for (int k = 0; k < reg->nparams && k < n->nin; k++)
                meta_shape(&gnode(g, reg->params[k])->meta[0], &gnode(g, n->in[k].node)->meta[n->in[k].out]);
        }
        infer_region(g, n->regions[0]);
        infer_region(g, n->regions[1]);
        for (int k = 0; k < n->nout && k < n->nin; k++)
            meta_shape(&n->meta[k], &gnode(g, n->in[k].node)->meta[n->in[k].out]);
    } else if (n->kind == G_COND) {
        infer_region(g, n->regions[0]);
        infer_region(g, n->regions[1]);
        const GRegion *a = &g->regions[n->regions[0]], *b = &g->regions[n->regions[1]];
        for (int k = 0; k < n->nout && k < a->nouts && k < b->nouts; k++) {
            const tfe_meta *x = &gnode(g, a->outs[k].node)->meta[a->outs[k].out];
            const tfe_meta *y = &gnode(g, b->outs[k].node)->meta[b->outs[k].out];
            if (x->rank != y->rank) continue;
            tfe_meta m = *x;
            for (int d = 0; d < m.rank; d++)
                if (x->shape[d] != y->shape[d]) m.shape[d] = -1;
            meta_shape(&n->meta[k], &m);
        }
    }
}

static void infer_region(Graph *g, int r)
{
    for (int i = 0; i < g->regions[r].n; i++) infer_node(g, g->regions[r].nodes[i]);
}

/* A copy of G with its metas inferred from the call's sources in[] (the
 * plan's: its inputs, then the variables it reads), when G has a cond or
 * loop and a source of another shape than traced (a relaxed graph's
 * unknown dims); NULL when G serves as it is. */
static Graph *sized_for(const Graph *G, const Plan *p, tfe_tensor *const *in, int nin)
{
    bool cf = false, other = false;
    for (int i = 0; i < G->n && !cf; i++) cf = G->nodes[i].kind == G_COND || G->nodes[i].kind == G_WHILE;
    for (int i = 0; i < nin && cf; i++) {
        const GNode *n = &G->nodes[p->node[i]];
        if (n->kind != G_INPUT) continue; /* a variable keeps its shape */
        const tfe_meta *m = &n->meta[0];
        if (in[i]->rank != m->rank) return NULL;
        for (int d = 0; d < m->rank; d++) {
            if (in[i]->shape[d] < 0) return NULL; /* not known here either */
            other |= m->shape[d] != in[i]->shape[d];
        }
    }
    if (!cf || !other) return NULL;
    Graph *S = graph_clone(G);
    for (int i = 0; i < nin; i++) {
        GNode *n = gnode(S, p->node[i]);
        if (n->kind != G_INPUT) continue;
        n->meta[0].rank = in[i]->rank;
        mem_copy(n->meta[0].shape, in[i]->shape, sizeof(int64_t) * (size_t)in[i]->rank);
    }
    infer_region(S, 0);
    return S;
}

/* --- sources that are one tensor ---------------------------------------------------------
 * Two sources of a call can be one tensor: a variable read before a traced
 * if or loop that could assign it (so the graph reads it again after, and
 * inside it) when nothing assigned it on this call. Eager code has one
 * tensor there, and its tape adds the gradients of all the uses to one sum
 * in tape order; two sources would be two partial sums, added at the end
 * (a last bit apart). So the backward takes such a call's graph with all
 * the uses made one source's, its home (sources are values before the
 * replay starts, so the home may even be a read the graph makes later),
 * and keeps it for the calls whose sources are one tensor the same way.
 * The tape hands a tensor's gradient so far to its first place only, and
 * takes the total there. */

/* The node whose region r is (-1: the top). */
static int region_owner(const Graph *G, int r)
{
    for (int i = 0; r > 0 && i < G->n; i++)
        if ((G->nodes[i].kind == G_COND || G->nodes[i].kind == G_WHILE) &&
            (G->nodes[i].regions[0] == r || G->nodes[i].regions[1] == r))
            return i;
    return -1;
}

/* Are regions a and b inside the two branches of one cond (one runs, the
 * other not), with no loop body between that cond and a? A home in a's
 * branch serves uses in b's too: the uses in b are replayed and swept only
 * when b's branch runs, and the home's slot, a read inside the cond, is
 * one of the cond's captures, so its gradient leaves the cond from either
 * branch. */
static bool other_branch(const Graph *G, int a, int b)
{
    for (int ca = a; ca > 0; ca = G->regions[ca].parent) {
        int o = region_owner(G, ca);
        if (o < 0 || G->nodes[o].kind != G_COND) return false;
        int other = G->nodes[o].regions[G->nodes[o].regions[0] == ca ? 1 : 0];
        if (graph_region_visible(G, other, b)) return true;
    }
    return false;
}

/* The home of the sources that are the tensor of source f (the first of
 * them; one[i] == f for the others): the first whose value every other
 * one's uses can see (its region encloses theirs, or theirs is in the
 * other branch of a cond around it), or -1. */
static int group_home(const Graph *G, const Plan *p, int nin, const int *one, int f)
{
    for (int h = f; h < nin; h++) {
        if (h != f && one[h] != f) continue;
        int rh = G->nodes[p->node[h]].region;
        bool all = true;
        for (int i = f; i < nin && all; i++)
            if (i == f || one[i] == f) {
                int ri = G->nodes[p->node[i]].region;
                all = graph_region_visible(G, rh, ri) || other_branch(G, rh, ri);
            }
        if (all) return h;
    }
    return -1;
}

/* The node of the top region that is or holds region r's node (-1: r is
 * the top region's own). */
static int top_holder(const Graph *G, int r)
{
    int o = -1;
    for (; r > 0; r = G->regions[r].parent) o = region_owner(G, r);
    return o;
}

/* Can the sources that are the tensor of source f, with no home among
 * them, get one made: variable reads only, each inside a traced if or loop
 * of the top region (reads in two loops, or in a loop and a branch: none
 * encloses another)? The home is then the first of them taken out to the
 * top region, before the first if or loop that holds one (one_sources):
 * the tensor it reads is theirs (they are one tensor on this call, or, in
 * a graph recorded into a trace, one at every call: no host call assigns
 * the variable), and as a value of the top region each if's or loop's
 * backward counts it as a capture, whose sweep starts from its gradient so
 * far (what the ifs and loops after it gave), so every use adds to one
 * running sum in tape order, as eager code's. Two partial sums, one per
 * loop, added at the end, differed from eager's in the last bit. */
static bool hoistable(const Graph *G, const Plan *p, int nin, const int *one, int f)
{
    for (int i = f; i < nin; i++) {
        if (i != f && one[i] != f) continue;
        const GNode *x = &G->nodes[p->node[i]];
        if (i < G->ninputs || x->kind != G_VAR_READ || x->region == 0 || top_holder(G, x->region) < 0) return false;
    }
    return true;
}

/* In copy c, source f's node (a variable read inside an if or loop) taken
 * out to the top region, right before the first if or loop of it that
 * holds a read of the group (hoistable). */
static void hoist_home(Graph *c, const Plan *p, int nin, const int *one, int f)
{
    int id = p->node[f];
    GRegion *top = &c->regions[0];
    int at = top->n;
    for (int i = f; i < nin; i++) {
        if (i != f && one[i] != f) continue;
        int h = top_holder(c, c->nodes[p->node[i]].region);
        for (int k = 0; k < top->n; k++)
            if (top->nodes[k] == h && k < at) at = k;
    }
    GRegion *r = &c->regions[c->nodes[id].region];
    for (int k = 0; k < r->n; k++)
        if (r->nodes[k] == id) {
            mem_move(r->nodes + k, r->nodes + k + 1, sizeof *r->nodes * (size_t)(r->n - k - 1));
            r->n--;
            break;
        }
    top = &c->regions[0];
    top->nodes = xrealloc(top->nodes, sizeof *top->nodes * (size_t)(top->n + 2));
    if (top->cap < top->n + 2) top->cap = top->n + 2;
    mem_move(top->nodes + at + 1, top->nodes + at, sizeof *top->nodes * (size_t)(top->n - at));
    top->nodes[at] = id;
    top->n++;
    c->nodes[id].region = 0;
}

/* By source: the first source that is the same float tensor, or -1; only
 * for tensors whose sources have a home (or can get one: hoistable). NULL when there is none (nor in a
 * graph with fused nodes, which are not copied). Recorded into a trace, the
 * backward serves every later call, so only what is one tensor at every
 * call counts: the reads of a variable in a graph with no host call (no
 * assign between them; trace_cf.c runs a traced if or loop under a tape
 * as such a graph). */
static int *same_sources(const Graph *G, const Plan *p, int nin, tfe_tensor *const *in, bool traced, bool inputs)
{
    int *one = NULL;
    for (int k = 0; traced && k < G->n; k++)
        if (G->nodes[k].kind == G_HOST) return NULL;
    /* (inputs: the tape hands the graph's inputs as one tensor where that
     * is so at every call, tfe_custom_grad.one_inputs; a variable's reads
     * stay apart from them) */
    for (int i = traced && !inputs ? G->ninputs + 1 : 1; i < nin; i++) {
        if (!in[i] || !dtype_is_float(in[i]->dtype)) continue;
        int j = traced && (!inputs || i >= G->ninputs) ? G->ninputs : 0;
        while (j < i && (in[j] != in[i] ||
                         (traced && i >= G->ninputs &&
                          G->nodes[p->node[j]].host->obj.u.o != G->nodes[p->node[i]].host->obj.u.o)))
            j++;
        if (j == i) continue;
        if (!one) {
            for (int k = 0; k < G->n; k++)
                if (G->nodes[k].kind == G_FUSED) return NULL;
            one = xmalloc(sizeof *one * (size_t)nin);
            for (int k = 0; k < nin; k++) one[k] = -1;
        }
        one[i] = j;
    }
    bool any = false;
    for (int f = 0; one && f < nin; f++) {
        if (one[f] >= 0) continue;
        bool group = false;
        for (int i = f + 1; i < nin && !group; i++) group = one[i] == f;
        if (!group) continue;
        if (group_home(G, p, nin, one, f) >= 0 || hoistable(G, p, nin, one, f)) {
            any = true;
            continue;
        }
        for (int i = f + 1; i < nin; i++) /* no home: each keeps its own gradient */
            if (one[i] == f) one[i] = -1;
    }
    if (!any) {
        free(one);
        return NULL;
    }
    return one;
}

/* A copy of G where the uses of the sources that are one tensor are their
 * home's; gslot[i] (nin of them) gets the slot whose gradient is source i's
 * (the home's, for the first; -1 for the others). */
static Graph *one_sources(const Graph *G, const Plan *p, int nin, const int *one, int *gslot)
{
    Graph *c = graph_clone(G);
    for (int i = 0; i < nin; i++) gslot[i] = one[i] >= 0 ? -1 : p->src[i];
    for (int f = 0; f < nin; f++) {
        if (one[f] >= 0) continue;
        int h = -1;
        bool grouped = false;
        for (int i = f + 1; i < nin && !grouped; i++) grouped = one[i] == f;
        if (!grouped) continue;
        h = group_home(G, p, nin, one, f);
        if (h < 0 && hoistable(G, p, nin, one, f)) { /* (a home made: the first read, in the top region) */
            hoist_home(c, p, nin, one, f);
            h = f;
        }
        if (h < 0) continue;
        gslot[f] = p->src[h];
        int to = p->node[h];
        for (int i = f; i < nin; i++) {
            if ((i != f && one[i] != f) || i == h) continue;
            int from = p->node[i];
            for (int k = 0; k < c->n; k++)
                for (int a = 0; a < c->nodes[k].nin; a++)
                    if (c->nodes[k].in[a].node == from && c->nodes[k].in[a].out == 0) c->nodes[k].in[a] = (GRef){to, 0};
            for (int r = 0; r < c->nregions; r++)
                for (int a = 0; a < c->regions[r].nouts; a++)
                    if (c->regions[r].outs[a].node == from && c->regions[r].outs[a].out == 0)
                        c->regions[r].outs[a] = (GRef){to, 0};
        }
    }
    return c;
}

/* The kept values backward graph bg reads (its inputs first..first+nk-1
 * are c's kept ones): later calls of G keep only those and the ones other
 * backward graphs read. A backward that no longer gets the others replays
 * them, and its optimizer drops them (nothing reads them). */
static void note_kept_use(Graph *G, const Graph *bg, const GCallGrad *c, int first, int nk)
{
    bool *read = xcalloc((size_t)bg->n + 1, sizeof *read); /* by node */
    for (int i = 0; i < bg->n; i++)
        for (int a = 0; a < bg->nodes[i].nin; a++) read[bg->nodes[i].in[a].node] = true;
    for (int r = 0; r < bg->nregions; r++)
        for (int a = 0; a < bg->regions[r].nouts; a++) read[bg->regions[r].outs[a].node] = true;
    if (!G->keep_use) G->keep_use = xcalloc((size_t)G->nvals + 1, sizeof *G->keep_use);
    for (int i = 0; i < nk && first + i < bg->ninputs; i++)
        if (read[bg->inputs[first + i]]) G->keep_use[c->kslot[i]] = true;
    free(read);
}

/* Is node id a logged read? */
static bool logged_node(const GCallGrad *c, int id)
{
    for (int j = 0; j < c->nlr; j++)
        if (c->lr_node[j] == id) return true;
    return false;
}

/* Place (entry input) of logged read j's value in iteration k. */
static int log_place(const GCallGrad *c, int np, int j, int k)
{
    for (int i = 0; i < j; i++) np += c->lr_count[i];
    return np + k;
}

/* The plan's place of node id (a source), or -1. */
static int plan_place(const GCallGrad *c, int id)
{
    for (int i = 0; i < c->plan.nsrc; i++)
        if (c->plan.node[i] == id) return i;
    return -1;
}

/* Are places p and q (q a logged read's value) one tensor by the loop's
 * structure (logged_roles), whose gradient the backward sums whole? */
static int log_role(const GCallGrad *c, int np, int p)
{
    for (int j = 0, at = np; j < c->nlr; at += c->lr_count[j++])
        if (p >= at && p < at + c->lr_count[j]) return c->lr_role[j];
    return -1;
}

static bool log_pair(const GCallGrad *c, int np, int p, int q)
{
    if (log_role(c, np, p) == 3) return true; /* (a read in the loop's condition: no gradient) */
    for (int j = 0; j < c->nlr; j++) {
        int n = c->lr_count[j];
        if (!n) continue;
        if (p < np && c->plan.node[p] == c->lr_node[j]) return true; /* (its own: the last value, unused) */
        if (c->lr_role[j] == 1 && c->lr_pre[j] >= 0 && p == plan_place(c, c->lr_pre[j]) && q == log_place(c, np, j, 0))
            return true;
        if (c->lr_role[j] == 2 && c->lr_post[j] >= 0 && p == plan_place(c, c->lr_post[j]) &&
            q == log_place(c, np, j, n - 1))
            return true;
        int m = c->lr_mate[j];
        if (c->lr_role[j] == 2 && m >= 0)
            for (int k = 0; k + 1 < n; k++) {
                int a = log_place(c, np, j, k), b = log_place(c, np, m, k + 1);
                if ((p == a && q == b) || (p == b && q == a)) return true;
            }
    }
    return false;
}

/* A loop's logged reads (BP.lr_*) with a tape outside the call: each
 * iteration's tensor is a source of the entry, whose gradient is the one
 * that iteration gives it, as eager code's. A tensor read in two places
 * gets its gradient summed whole in eager order where the loop's
 * structure says they are one tensor (logged_roles: a read after the
 * assign and the next iteration's before it, a read before or after the
 * loop); those must be one tensor on this call, and no tensor the loop
 * reads may have a gradient so far (none can: a later op of the caller
 * reads the variable's newer tensor, but where a read after the loop's
 * assign reads the tensor the call leaves). Else the loop's error (0:
 * fine). */
static int log_check(GCallGrad *c, int nall, tfe_tensor *const *in, tfe_tensor *const *dx)
{
    const Graph *G = c->G;
    int np = nall - c->nlog, bad = -1;
    for (int q = np; q < nall && bad < 0; q++) {
        if (log_role(c, np, q) == 3) continue; /* (no gradient: the others' are whole) */
        if (dx[q] && dx[q] != TFE_GRAD_SKIP) bad = q;
        for (int p = 0; p < nall && bad < 0; p++) {
            if (p == q || in[p] != in[q]) continue;
            if (!log_pair(c, np, p, q)) bad = q;
            /* a gradient so far: only the caller's, of the tensor the loop
             * ends with, at its first place (a read's in the last iteration
             * after the assign: BP.lr_pslot) */
            if (dx[p] && dx[p] != TFE_GRAD_SKIP) {
                bool end = false;
                for (int j = 0; j < c->nlr; j++)
                    end |= c->lr_role[j] == 2 && c->lr_count[j] && in[p] == in[log_place(c, np, j, c->lr_count[j] - 1)];
                for (int e = 0; e < p && end; e++) end = in[e] != in[p];
                if (!end) bad = q;
            }
        }
    }
    /* what the structure says is one tensor must be one on this call */
    for (int j = 0; j < c->nlr && bad < 0; j++) {
        int n = c->lr_count[j], m = c->lr_mate[j];
        if (!n) continue;
        int pre = c->lr_role[j] == 1 && c->lr_pre[j] >= 0 ? plan_place(c, c->lr_pre[j]) : -1;
        int post = c->lr_role[j] == 2 && c->lr_post[j] >= 0 ? plan_place(c, c->lr_post[j]) : -1;
        if (pre >= 0 && in[pre] != in[log_place(c, np, j, 0)]) bad = log_place(c, np, j, 0);
        if (post >= 0 && in[post] != in[log_place(c, np, j, n - 1)]) bad = log_place(c, np, j, n - 1);
        for (int k = 0; c->lr_role[j] == 2 && m >= 0 && k + 1 < n && bad < 0; k++)
            if (in[log_place(c, np, j, k)] != in[log_place(c, np, m, k + 1)]) bad = log_place(c, np, j, k);
    }
    if (bad < 0) return 0;
    int j = 0;
    while (j + 1 < c->nlr && bad >= log_place(c, np, j + 1, 0)) j++;
    return raise_at(c->I, G->nodes[c->lr_loop[j]].loc, "%s",
                    "gradients through a staged loop that assigns a variable it reads are not supported where a "
                    "tensor of the variable it reads is read elsewhere too, or used by the caller after the call "
                    "(keep the value in a loop variable and assign the variable after the loop, or take the "
                    "gradient eagerly: run_eagerly(true))");
}

/* The logged reads' values stacked, one per read (new refs into st). */
static int log_stacks(const GCallGrad *c, const Graph *G, tfe_tensor *const *in, tfe_tensor **st)
{
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.naxes = 1;
    at.axes[0] = 0;
    for (int j = 0, off = 0; j < c->nlr; off += c->lr_count[j++]) {
        if (c->lr_count[j]) {
            st[j] = tfe_call1(OP_STACK, c->lr_count[j], (tfe_tensor **)in + off, &at);
        } else {
            const tfe_meta *m = &G->nodes[c->lr_node[j]].meta[0];
            int64_t shape[TFE_MAX_RANK + 1] = {0};
            mem_copy(shape + 1, m->shape, sizeof(int64_t) * (size_t)m->rank);
            st[j] = tensor_zeros(m->dtype, m->rank + 1, shape);
        }
        if (!st[j]) return -1;
    }
    return 0;
}

/* dx of the logged reads' values (ldx, in the entry's order; a SKIP stays)
 * from their stacked gradients lg and flags lf: none where flagged. */
static int log_dx(const GCallGrad *c, tfe_tensor *const *lg, tfe_tensor *const *lf, tfe_tensor **ldx)
{
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.naxes = 1;
    at.axes[0] = 0;
    for (int j = 0, q = 0; j < c->nlr; j++)
        for (int k = 0; k < c->lr_count[j]; k++, q++) {
            if (ldx[q] == TFE_GRAD_SKIP) continue;
            ldx[q] = NULL;
            if (!lg[j] || !lf[j] || tensor_load_f64(lf[j], k) != 0.0) continue;
            tfe_tensor *i = tensor_from_i64(k, TFE_INT64);
            tfe_tensor *in[2] = {lg[j], i};
            ldx[q] = i ? tfe_call1(OP_GATHER, 2, in, &at) : NULL;
            if (i) tensor_decref(i);
            if (!ldx[q]) return -1;
        }
    return 0;
}

/* Backward of a graph call: dx for the plan's sources (NULL: none). Runs
 * the cached backward graph, or builds it (recording into a new trace, or
 * into the trace in progress). */
static int backward_run(tfe_custom_grad *self, int nall, tfe_tensor *const *in, int nout,
                        tfe_tensor *const *out, tfe_tensor *const *dy, tfe_tensor **dx)
{
    GCallGrad *c = (GCallGrad *)self;
    Interp *I = c->I;
    Graph *G = c->G;
    (void)out;
    ConstSet consts = {0}; /* (the backward graph's constants, made at the first use) */
    /* the plan's sources, then the logged reads' values (log_*) */
    int nin = nall - c->nlog, nlr = c->nlr;
    tfe_tensor **ldx = dx + nin, *lg[64] = {NULL}, *lf[64] = {NULL}, *lst[64] = {NULL};
    if (nlr > 64) nlr = 0; /* (then the loops' error) */
    if (c->nlog && log_check(c, nall, in, dx)) return -1;
    for (int q = 0; q < c->nlog; q++)
        if (ldx[q] != TFE_GRAD_SKIP) ldx[q] = NULL;
    bool logged = nlr && !I->tracer; /* (recorded into a trace: the loops' error) */
    if (logged && log_stacks(c, G, in + nin, lst)) {
        for (int j = 0; j < nlr; j++)
            if (lst[j]) tensor_decref(lst[j]);
        return -1;
    }
    if (!logged) nlr = 0;
    /* the sources' gradients so far (the tape's, borrowed): the sweep adds
     * to them in eager order; inputs of the backward after the others */
    tfe_tensor **sofar = xcalloc((size_t)nin + 1, sizeof *sofar);
    int nacc = 0;
    for (int i = 0; i < nin; i++) {
        if (dx[i] == TFE_GRAD_SKIP) continue;
        if (dx[i] && dtype_is_float(in[i]->dtype)) {
            sofar[i] = dx[i];
            nacc++;
        }
        dx[i] = NULL;
    }
    /* a loop's result that is, on this call, an input passed through (its
     * body's ifs handed it on unchanged at every iteration, or it ran zero
     * times), to which the tape gave no gradient (the caller's uses of it
     * went to the input's sum, one tensor to the tape): the input's
     * gradient so far seeds that result instead, so the loop's backward
     * adds its iterations' uses to it one by one, as eager code's running
     * sum of the one tensor (they had been summed from nothing and added
     * to it at the end, a last bit apart: stage_property seed 274673) */
    tfe_tensor **dyv = NULL;
    for (int k = 0; c->same_out && k < nout && k < c->nsame_out && !self->dy_none && !self->dx_none_in; k++) {
        int i = c->same_out[k];
        if (i < 0 || i >= nin || i >= G->ninputs || dy[k] || !sofar[i] ||
            G->nodes[G->regions[0].outs[k].node].kind != G_WHILE)
            continue;
        bool once = true;
        for (int j = 0; j < c->nsame_out; j++) once &= j == k || c->same_out[j] != i;
        if (!once) continue;
        if (!dyv) {
            dyv = xcalloc((size_t)nout + 1, sizeof *dyv);
            for (int j = 0; j < nout; j++) dyv[j] = dy[j];
            dy = dyv;
        }
        dyv[k] = sofar[i];
        sofar[i] = NULL;
        nacc--;
    }
    /* the outputs a gradient reached (the others seed nothing) */
    int *outk = xmalloc(sizeof *outk * (size_t)(nout + 1)), ndy = 0;
    for (int k = 0; k < nout; k++)
        if (dy[k]) outk[ndy++] = k;
    /* which of these a backward graph takes as inputs: it is for them */
    /* ... and which sources want a gradient (no other is computed) */
    int npres = 2 * nin + nout;
    bool *pres = xcalloc((size_t)npres + 1, sizeof *pres);
    for (int i = 0; i < nin; i++) pres[i] = sofar[i] != NULL;
    for (int k = 0; k < nout; k++) pres[nin + k] = dy[k] != NULL;
    for (int i = 0; i < nin; i++) pres[nin + nout + i] = dx[i] != TFE_GRAD_SKIP;
    /* the forward's kept values stand in for its replay where nothing
     * records this backward (a tape watching it, a higher order, needs
     * the replay: it sees there how every value depends on the sources) */
    int nk = c->nkept && !tfe_tapes_active && !I->tracer ? c->nkept : 0;
    int ns = c->plan.nsaved + nk; /* saved, then kept */
    int nb = nin + ns + ndy + nacc;
    /* the outputs of conds of the top region that are the graph's: the
     * forward's tensors, after the others (BP.fo) */
    /* (a call that held its values for a higher order replays the ops
     * whose values are its results: reading the call's output tensors for
     * them gave wrong second-order gradients where the target reduces the
     * result outside the call, sum(f(x)) of `return sigmoid(x)`:
     * 0.0539 for eager's 0.0364; stage_grad2_cached_result) */
    int ngo = G->regions[0].nouts, nfo = 0;
    int *fok = xmalloc(sizeof *fok * (size_t)(ngo + 1));
    for (int k = 0; k < ngo && k < nout && !nk; k++) {
        const GNode *x = &G->nodes[G->regions[0].outs[k].node];
        if (out && out[k] && x->region == 0 && x->kind == G_COND) fok[nfo++] = k;
    }
    /* the kept branch values (GCallGrad.xslot), after those: a backward
     * recorded into a trace reads the replay (they are no values of it) */
    int nto = G->regions[0].nouts, nfx = I->tracer || nk || !out ? 0 : c->nx;
    tfe_tensor **bin = xmalloc(sizeof *bin * (size_t)(nb + nlr + nfo + nfx + 1));
    for (int q = 0; q < nfo; q++) bin[nb + nlr + q] = out[fok[q]];
    for (int j = 0; j < nfx; j++) bin[nb + nlr + nfo + j] = out[nto + c->nhout + j];
    for (int i = 0; i < nin; i++) bin[i] = in[i];
    for (int j = 0; j < nlr; j++) bin[nb + j] = lst[j]; /* (after the others) */
    for (int i = 0; i < c->plan.nsaved; i++) bin[nin + i] = c->saved[i];
    for (int i = 0; i < nk; i++) bin[nin + c->plan.nsaved + i] = c->kept[i];
    for (int j = 0; j < ndy; j++) bin[nin + ns + j] = dy[outk[j]];
    for (int i = 0, k = nin + ns + ndy; i < nin; i++)
        if (sofar[i]) bin[k++] = sofar[i];
    int rc = -1;
    /* sources that are one tensor share a gradient */
    /* (not a logged read's: its gradient is its values') */
    tfe_tensor **inn = xmalloc(sizeof *inn * (size_t)(nin + 1));
    for (int i = 0; i < nin; i++) {
        inn[i] = in[i];
        for (int j = 0; j < c->nlr; j++)
            if (c->plan.node[i] == c->lr_node[j]) inn[i] = NULL;
    }
    int *one = same_sources(G, &c->plan, nin, inn, I->tracer != NULL, c->base.one_inputs);
    free(inn);
    GBwd *w = I->tracer || c->ndd < 0 ? NULL : bwd_find(G, bin, nb + nlr + nfo + nfx, pres, npres, one, nin, c);
    if (w) {
        free(one);
        /* outputs: the gradients, then the none flags, then the logged
         * reads' stacked gradients and flags */
        int nbo = 0, nflags = 0;
        for (int i = 0; i < nin; i++) {
            nbo += w->has[i];
            nflags += w->has[nin + i];
        }
        tfe_tensor **bo = xcalloc((size_t)(nbo + nflags + 2 * nlr) + 1, sizeof *bo);
        rc = stage_graph_call(I, w->g, bin, bo);
        for (int j = 0; j < nlr; j++) {
            lg[j] = bo[nbo + nflags + 2 * j];
            lf[j] = bo[nbo + nflags + 2 * j + 1];
        }
        if (!rc && nlr && log_dx(c, lg, lf, ldx)) rc = -1;
        for (int j = 0; j < nlr; j++) {
            if (lg[j]) tensor_decref(lg[j]);
            if (lf[j]) tensor_decref(lf[j]);
            tensor_decref(lst[j]);
        }
        for (int i = 0, k = 0, kf = nbo; i < nin; i++) {
            if (!w->has[i]) continue; /* no gradient: none, rather than zeros (-0.0 + 0.0 is 0.0) */
            tfe_tensor *gv = bo[k++];
            /* none in eager terms (a loop ran zero times): none, not -0.0s */
            bool isnone = !rc && w->has[nin + i] && tensor_load_f64(bo[kf++], 0) != 0.0;
            if (rc || isnone || dx[i] == TFE_GRAD_SKIP || !dtype_is_float(in[i]->dtype)) {
                if (gv) tensor_decref(gv);
                continue;
            }
            dx[i] = gv;
        }
        for (int k = nbo; k < nbo + nflags; k++)
            if (bo[k]) tensor_decref(bo[k]);
        free(bo);
        free(bin);
        free(fok);
        free(sofar);
        free(dyv);
        free(outk);
        free(pres);
        return rc;
    }
    /* build it: replay and sweep, recording */
    bool own = I->tracer == NULL;
    Tracer *T = own ? trace_begin(I, G->name, false) : I->tracer;
    if (own) {
        char name[300];
        snprintf(name, sizeof name, "%s.backward", G->name);
        free(T->g->name);
        T->g->name = xstrdup(name);
    }
    /* by source: the slot that has its gradient (-1: none) */
    int *gslot = xmalloc(sizeof *gslot * (size_t)(nin + 1));
    for (int i = 0; i < nin; i++) gslot[i] = c->plan.src[i];
    Graph *SG = sized_for(G, &c->plan, in, nin), *G0 = SG ? SG : G; /* metas for this call's sizes */
    Graph *BG = one ? one_sources(G0, &c->plan, nin, one, gslot) : G0; /* what is swept */
    if (BG != G0 && SG) graph_decref(SG), SG = NULL;
    size_t nsl = (size_t)G->nvals + 1 + (size_t)nlr; /* (a slot of its own per logged read after G's) */
    BP b = {I, T, BG, xcalloc(nsl, sizeof(tfe_tensor *)), xcalloc(nsl, sizeof(tfe_tensor *)),
            xcalloc((size_t)G->n + 1, sizeof(tfe_tensor *)), c->draws, NULL, !own, own, false,
            xcalloc(nsl, sizeof(tfe_tensor *)), NULL, NULL, G->noted_loops && !own,
            0, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    if (nlr) {
        b.nlr = nlr;
        b.lr_node = c->lr_node;
        b.lr_loop = c->lr_loop;
        b.lr_role = c->lr_role;
        b.lr_mate = c->lr_mate;
        b.lr_pre = c->lr_pre;
        b.lr_post = c->lr_post;
        b.lr_pslot = xmalloc(sizeof *b.lr_pslot * (size_t)nlr);
        for (int j = 0; j < nlr; j++) {
            b.lr_pslot[j] = -1;
            if (c->lr_role[j] != 2) continue;
            /* (the first place of the tensor the loop ends with, where it
             * ran: the caller's gradient so far) */
            int p = plan_place(c, c->lr_node[j]);
            if (p >= 0 && (!c->lr_count[j] || in[p] != in[log_place(c, nin, j, c->lr_count[j] - 1)])) p = -1;
            for (int e = 0; p >= 0 && e < p; e++)
                if (in[e] == in[p]) p = e;
            if (c->lr_post[j] >= 0) {
                b.lr_pslot[j] = G->nodes[c->lr_post[j]].vbase;
                /* the caller's gradient so far of that tensor (its first
                 * place is this read's) goes to the read after the loop,
                 * which has it whole in the end */
                if (p >= 0 && sofar[p]) {
                    int pp = plan_place(c, c->lr_post[j]);
                    gslot[p] = b.lr_pslot[j];
                    if (pp >= 0) gslot[pp] = -1;
                }
            } else if (p >= 0 && sofar[p]) {
                b.lr_pslot[j] = G->nvals + 1 + j;
                gslot[p] = b.lr_pslot[j];
            }
        }
        /* a logged read's own place (its last value, whose gradient is its
         * values'), first of a tensor with a gradient so far that another
         * read has too (a loop that did not run): that one has it whole */
        for (int p = 0; p < nin; p++) {
            if (!sofar[p] || gslot[p] != c->plan.src[p] || !logged_node(c, c->plan.node[p])) continue;
            for (int p2 = p + 1; p2 < nin; p2++)
                if (in[p2] == in[p] && gslot[p2] >= 0 && !logged_node(c, c->plan.node[p2])) {
                    gslot[p] = gslot[p2];
                    gslot[p2] = -1;
                    break;
                }
        }
        b.lr_in = xcalloc((size_t)nlr, sizeof *b.lr_in);
        b.lr_g = xcalloc((size_t)nlr, sizeof *b.lr_g);
        b.lr_f = xcalloc((size_t)nlr, sizeof *b.lr_f);
    }
    tfe_tensor **accin = xcalloc((size_t)nacc + 1, sizeof *accin);
    for (int i = 0; i < BG->n; i++)
        if (BG->nodes[i].kind == G_CONST) {
            tensor_incref(BG->nodes[i].value);
            b.m[BG->nodes[i].vbase] = BG->nodes[i].value;
        }
    if (nfo) b.fo = xcalloc((size_t)G->nvals + 1, sizeof *b.fo);
    if (nfx) b.fx = xcalloc((size_t)G->nvals + 1, sizeof *b.fx);
    for (int i = 0; i < nb + nlr + nfo + nfx; i++) {
        tfe_tensor *t = bin[i];
        if (own) {
            /* the same tensor twice: two inputs; and a tensor that is
             * also one of BG's constants (a cond that yields a constant
             * hands that very tensor out as its output, fo): the replay
             * reads the constant as itself, so the input must be another
             * tensor, or the recorded backward reads the input where the
             * constant stood and a later call's output there */
            if (own && !consts.v) consts = const_set(BG);
            if (t->node || const_set_has(&consts, t)) {
                tfe_tensor *a = tensor_alias(t);
                /* to a tape recording this backward (higher order), the
                 * second is a copy of the first: the ops on it reach it */
                if (a && tfe_tapes_active) {
                    static const tfe_attrs none = {.naxes = -1};
                    const tfe_opcall cp = {.op = OP_COPY, .nin = 1, .nout = 1, .in = &t, .at = &none, .out = &a};
                    tfe_tape_record(&cp);
                }
                t = a;
            } else {
                tensor_incref(t);
            }
            trace_input(T, t);
        } else {
            tensor_incref(t);
        }
        if (i >= nb + nlr + nfo) {
            /* (a held value: an op's of the top region is not replayed, a
             * cond's output or a branch value replaces the replay's) */
            int slot = c->xslot[i - nb - nlr - nfo];
            const GNode *x = slot_node(G, slot);
            if (x->region != 0) put(b.fx, slot, t);
            else if (x->kind == G_COND) put(b.fo ? b.fo : (b.fo = xcalloc((size_t)G->nvals + 1, sizeof *b.fo)), slot, t);
            else put(b.m, slot, t);
        } else if (i >= nb + nlr) {
            int q = i - nb - nlr, slot = slot_of(G, G->regions[0].outs[fok[q]]);
            if (G->nodes[G->regions[0].outs[fok[q]].node].kind == G_COND) put(b.fo, slot, t);
            else put(b.m, slot, t); /* (held: an op's value, not replayed) */
        } else if (i >= nb) b.lr_in[i - nb] = t;
        else if (i < nin) put(b.m, c->plan.src[i], t);
        else if (i < nin + c->plan.nsaved) put(b.m, c->plan.saved[i - nin], t);
        else if (i < nin + ns) put(b.m, c->kslot[i - nin - c->plan.nsaved], t);
        else if (i < nin + ns + ndy) {
            /* an output of the graph, a saved host result, or a kept branch
             * value (its gradient so far: the cond's backward adds to it) */
            int k = outk[i - nin - ns];
            int slot = k < nto ? slot_of(BG, BG->regions[0].outs[k])
                       : k < nto + c->nhout ? c->plan.saved[c->hout[k - nto]]
                                            : c->xslot[k - nto - c->nhout];
            if (acc_f(&b, slot, t, self->dy_none ? self->dy_none[k] : NULL)) goto done;
        } else {
            accin[i - (nin + ns + ndy)] = t; /* placed below */
        }
    }
    /* a source's gradient so far comes first: the sweep adds to it. (An
     * output that is a source itself got its seed above, before it: then
     * the order is not eager's; a tape entry cannot say better.) */
    for (int i = 0, k = 0; i < nin; i++) {
        if (!sofar[i]) continue;
        tfe_tensor *t = accin[k];
        accin[k++] = NULL;
        if (gslot[i] < 0) { /* not a tensor's first place: the tape gives it none */
            tensor_decref(t);
            continue;
        }
        if (acc_first_f(&b, gslot[i], t, self->dx_none_in ? self->dx_none_in[i] : NULL)) goto done;
    }
    /* recorded into a trace: a read the cond this graph stands for hands on
     * is that output of it there (the tensor trace_cf.c noted for it) */
    for (int i = 0; i < G->n && !own; i++) {
        const GNode *x = &G->nodes[i];
        if (x->kind != G_VAR_READ || !x->outer_out) continue;
        int slot = T->g->nodes[x->outer_node].vbase + x->outer_out - 1;
        tfe_tensor *a = slot < T->capconcrete ? T->concrete[slot] : NULL;
        if (!a || !a->node) continue;
        tensor_incref(a);
        put(b.m, x->vbase, a);
    }
    if (replay_region(&b, 0) || sweep_region(&b, 0)) goto done;
    for (int j = 0; j < nlr; j++) { /* (a loop no gradient reached: none) */
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.dtype = TFE_BOOL;
        at.nints = 1;
        at.ints[0] = b.lr_in[j]->shape[0];
        at.f[0] = 1.0;
        if (!b.lr_g[j]) b.lr_g[j] = filled(b.lr_in[j], -0.0);
        if (!b.lr_f[j]) b.lr_f[j] = tfe_call1(OP_FULL, 0, NULL, &at);
        if (!b.lr_g[j] || !b.lr_f[j]) goto done;
        lg[j] = ref(b.lr_g[j]);
        lf[j] = ref(b.lr_f[j]);
    }
    rc = 0;
    /* a source no gradient reaches gets none (the tape then adds nothing) */
    tfe_tensor **res = xcalloc((size_t)nin + 1, sizeof *res);
    tfe_tensor **none = xcalloc((size_t)nin + 1, sizeof *none); /* flags (borrowed from b) */
    int nres = 0, nnone = 0;
    for (int i = 0; i < nin; i++) {
        tfe_tensor *gv = gslot[i] >= 0 ? b.g[gslot[i]] : NULL;
        if (gv) {
            tensor_incref(gv);
            nres++;
            if (dtype_is_float(in[i]->dtype) && (none[i] = b.none[gslot[i]])) nnone++;
        }
        res[i] = gv;
    }
    if (!rc && own && !T->failed) {
        /* a graph that draws random numbers: this backward replays this
         * call's draws, so it cannot serve another call */
        bool reusable = c->draws == NULL && !b.drew && c->ndd >= 0;
        for (int i = 0; i < T->g->ninputs && T->static_in; i++) reusable &= !T->static_in[i];
        if (reusable) {
            /* outputs: the gradients, then the none flags (has[nin + i]),
             * of the sources that want one (the rest go: not computed) */
            tfe_tensor **outs = xcalloc((size_t)(nres + nnone + 2 * nlr) + 1, sizeof *outs);
            bool *has = xcalloc((size_t)(2 * nin) + 1, sizeof *has);
            int k = 0;
            for (int i = 0; i < nin; i++)
                if (res[i] && dx[i] != TFE_GRAD_SKIP) {
                    has[i] = true;
                    outs[k++] = res[i];
                }
            for (int i = 0; i < nin; i++)
                if (res[i] && none[i] && dx[i] != TFE_GRAD_SKIP) {
                    has[nin + i] = true;
                    outs[k++] = none[i];
                }
            for (int j = 0; j < nlr; j++) {
                outs[k++] = lg[j];
                outs[k++] = lf[j];
            }
            set_outs(T->g, 0, k, outs, T);
            free(outs);
            bwd_add(G, T->g, has, bin, nb + nlr + nfo + nfx, pres, npres, one, c);
            one = NULL;
        }
    }
    for (int i = 0; i < nin; i++) {
        /* none in eager terms (a loop ran zero times): none, not -0.0s;
         * recorded into a trace, where that is known only when it runs:
         * -0.0s and the flag, which the tape keeps (or, where it takes
         * none, zeros: what it gives a source nothing reached) */
        bool isnone = own && none[i] && tensor_load_f64(none[i], 0) != 0.0;
        if (!own && none[i] && res[i] && !rc && self->dx_none && dx[i] != TFE_GRAD_SKIP) {
            self->dx_none[i] = ref(none[i]);
        } else if (!own && none[i] && res[i] && !rc) {
            tfe_tensor *z = tfe_grad_flag_fill(none[i], res[i], 0.0);
            tensor_decref(res[i]);
            if (!(res[i] = z)) rc = -1;
        }
        if (rc || isnone || dx[i] == TFE_GRAD_SKIP || !dtype_is_float(in[i]->dtype)) {
            if (res[i]) tensor_decref(res[i]);
            continue;
        }
        dx[i] = res[i];
    }
    free(res);
    free(none);
done:
    free(consts.v);
    for (int k = 0; k < nacc; k++)
        if (accin[k]) tensor_decref(accin[k]);
    free(accin);
    bp_free(&b);
    free(one);
    free(gslot);
    if (BG != G) graph_decref(BG);
    if (own) {
        Graph *bg = T->g;
        trace_end(T);
        if (G->bwd && G->bwd->g == bg) {
            graph_compact(bg);
            stage_optimize(bg);
            if (nk) note_kept_use(G, bg, c, nin + c->plan.nsaved, nk);
        }
        graph_decref(bg);
    }
    if (!rc && nlr && log_dx(c, lg, lf, ldx)) rc = -1;
    for (int j = 0; j < nlr; j++) {
        if (lg[j]) tensor_decref(lg[j]);
        if (lf[j]) tensor_decref(lf[j]);
        tensor_decref(lst[j]);
    }
    free(bin);
    free(fok);
    free(sofar);
    free(dyv);
    free(outk);
    free(pres);
    return rc;
}

/* The tape reports a failed backward where the gradient was asked for, as
 * an eager tape does: a graph run moves the current location to its nodes. */
static int gcall_backward(tfe_custom_grad *self, int nin, tfe_tensor *const *in, int nout,
                          tfe_tensor *const *out, tfe_tensor *const *dy, tfe_tensor **dx)
{
    Interp *I = ((GCallGrad *)self)->I;
    Loc at = I->cur_loc;
    /* A tape that began after the call records this backward: to it eager
     * code's inner values of the call are constants, made before it, while
     * the backward's replay of the forward would be differentiated (a
     * second derivative through them, silently not eager's) */
    if (tfe_tapes_late(nin, in, nout, out)) {
        tfe_error_set("gradient: a tape that began after this staged call records its gradient; "
                      "eager code would treat the call's inner values as constants to that tape, "
                      "which a staged call's backward cannot: begin that tape before the call "
                      "(make the call inside its with block), or call the function eagerly");
        return -1;
    }
    /* a tensor a @host call read that its node does not take (read only on
     * calls after the one that traced, or in a binding of more than 64
     * tensors): eager code would give it a gradient through the function,
     * the graph none, so one that the gradient reaches is refused rather
     * than left zero */
    GCallGrad *c = (GCallGrad *)self;
    for (int i = nin - c->nextra; i < nin; i++) {
        if (dx[i] == TFE_GRAD_SKIP) continue;
        tfe_error_set("%s", c->extra_what[i - (nin - c->nextra)]);
        return -1;
    }
    nin -= c->nextra;
    /* the @host functions it runs again see what each read in the call
     * (sweep_host) */
    struct HostSnap *snaps = I->host_snaps;
    int nsnaps = I->host_nsnaps;
    I->host_snaps = c->snap;
    I->host_nsnaps = c->nsnap;
    int rc = backward_run(self, nin, in, nout, out, dy, dx);
    I->host_snaps = snaps;
    I->host_nsnaps = nsnaps;
    I->cur_loc = at;
    if (rc && I->has_error) {
        /* the tape reports tensor errors: hand the message over */
        tfe_error_set("%s", I->err_msg);
        error_clear(I);
    }
    if (rc && !tfe_error_msg()[0]) tfe_error_set("gradient of a staged call failed");
    return rc;
}

/* Does a call of G under a tape keep its forward's values for the backward
 * (kept values)? Where G as traced (the graph the backward derives from) is
 * ops of its top region only: no host call, random draw, collective, branch
 * or loop, whose values the backward takes otherwise (saved, replayed). */
static Graph *keep_graph(Interp *I, Graph *G)
{
    if (I->tracer) return NULL; /* recorded into a trace: the replay is recorded */
    Graph *B = G->raw ? G->raw : G;
    if (B->ninputs != G->ninputs || B->regions[0].nouts != G->regions[0].nouts) return NULL;
    for (int i = 0; i < B->n; i++) {
        const GNode *n = &B->nodes[i];
        if (n->region != 0) return NULL;
        if (n->kind == G_OP ? (tfe_ops[n->op].flags & (F_RANDOM | F_COLLECTIVE)) != 0
                            : n->kind != G_INPUT && n->kind != G_CONST && n->kind != G_VAR_READ)
            return NULL;
    }
    return B;
}

/* How many tapes record a call of G: those tracking something, and, where
 * G reads a variable, the user tapes that watch it as it is read (a tape
 * with no watch of its own, second_v of stage_grad2_replay_var_branch). */
static int tapes_recording_call(const Graph *G)
{
    bool reads = false;
    for (int i = 0; i < G->n && !reads; i++) reads = G->nodes[i].kind == G_VAR_READ;
    tfe_tape *also[16];
    int nalso = reads ? tapes_watching_vars(also, 16) : 0;
    return tfe_tapes_recording_or(also, nalso);
}

/* Does a call of G under two recording tapes or more hand out its values for a
 * higher order (GCallGrad.hold)? Where G as traced is ops (no collective),
 * conds, variable reads of its top region and host calls with no value (a
 * print): the values the backward reads are then all computed by a run of
 * it (no loop's iterations, no host call's, whose gradient runs the
 * function again). A random draw's value is the run's (saved in the top
 * region, drawn again with the run's seed and counter in a branch) and has
 * no gradient (stage_grad2_cached_rand). (A variable read in a branch is a
 * source too, but holding such a graph's values gave second orders that
 * differ from eager's in the last bit where a replay did not, with ifs
 * nested in branches: docs/staging.md section 14.) */
static Graph *hold_graph(Interp *I, Graph *G)
{
    if (I->tracer) return NULL; /* recorded into a trace: the replay is recorded */
    Graph *B = G->raw ? G->raw : G;
    if (B->ninputs != G->ninputs || B->regions[0].nouts != G->regions[0].nouts) return NULL;
    for (int i = 0; i < B->n; i++) {
        const GNode *n = &B->nodes[i];
        bool ok = n->kind == G_OP ? !(tfe_ops[n->op].flags & F_COLLECTIVE)
                                  : n->kind == G_INPUT || n->kind == G_CONST || n->kind == G_COND ||
                                        (n->kind == G_VAR_READ && n->region == 0) ||
                                        (n->kind == G_HOST && !n->nout);
        if (!ok) return NULL;
    }
    return B;
}

/* Does the gradient rule of op read the op's output (Y in
 * tensor/grad_rules.c: exp's G * Y, tanh's 1 - Y * Y, gelu's Y / x, ...)? */
static bool rule_reads_output(tfe_op op)
{
    static const tfe_op ops[] = {OP_EXP, OP_TANH, OP_SIGMOID, OP_GELU, OP_SQRT, OP_RSQRT, OP_TAN, OP_DIV,
                                 OP_POW, OP_SOFTMAX, OP_LOG_SOFTMAX, OP_LOGSUMEXP, OP_PROD, OP_CUMPROD,
                                 OP_STD, OP_DET, OP_INV, OP_SOLVE, OP_CHOLESKY, OP_TRIL, OP_TRIU,
                                 OP_CONV2D_BIAS_RELU};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (ops[i] == op) return true;
    return false;
}

/* Does the backward of a held call of B read, for a rule, the value of an
 * op that is also one of B's results? The backward replays such an op
 * (stage_grad2_cached_result: reading the call's output there was wrong),
 * so to a tape recording it the rule reads a tensor of the replay, and the
 * caller's uses of the result reach the call's entry: what reaches that
 * value comes to the input in two sums ((a + b) * f'(x) as a * f'(x) +
 * b * f'(x)), where eager code has one running sum of the result's uses.
 * A target that uses the result other than linearly (tanh(f(x)),
 * f(x) * f(x) of `return tanh(x)`) then differs in the last bit
 * (stage_grad2_result_read). The rule reads it where the op's own rule
 * reads its output, or where another op of the graph reads it. */
static bool result_read_by_rule(const Graph *B)
{
    const GRegion *top = &B->regions[0];
    for (int k = 0; k < top->nouts; k++) {
        GRef o = top->outs[k];
        const GNode *x = &B->nodes[o.node];
        if (x->region != 0 || !x_node(x)) continue;
        if (rule_reads_output(x->op)) return true;
        for (int i = 0; i < B->n; i++) {
            const GNode *n = &B->nodes[i];
            if (n->kind != G_OP) continue;
            for (int j = 0; j < n->nin; j++)
                if (n->in[j].node == o.node && n->in[j].out == o.out) return true;
        }
    }
    return false;
}

/* Does B hold an if or loop nested in another's branch or body? Under a
 * tape outside, its cached call runs eagerly: the node's backward adds
 * the uses of what the inner one hands on apart, a last bit from eager's
 * (outer_tape_meets_nesting in stage/trace_cf.c, for the call that
 * traces). */
static bool nested_control_flow(const Graph *B)
{
    for (int i = 0; i < B->n; i++)
        if ((B->nodes[i].kind == G_COND || B->nodes[i].kind == G_WHILE) && B->nodes[i].region != 0) return true;
    return false;
}

/* Should a cached call of G run its body eagerly instead (stage_call)?
 * Under two recording tapes or more (a higher order may be taken), a graph
 * that cannot hold its values (hold_graph) has a backward that replays the
 * forward, and an outer tape then reaches a value a rule reads through the
 * replay and through the call's entry: two sums, where eager code has one
 * running sum in tape order, so the last bit can differ. That happens with
 * a host call with a value (its gradient runs the function again under a
 * tape of its own), a variable read in a branch, or a collective:
 * stage_grad2_replay_host, stage_grad2_replay_var_branch. Run eagerly, the
 * call is eager code to every tape, bit for bit. (A loop keeps its graph:
 * a second order through it is refused where it is reached.) */
bool stage_grad_runs_eagerly(Interp *I, Graph *G)
{
    if (I->tracer || !tfe_tapes_active) return false;
    const Graph *B = G->raw ? G->raw : G;
    int nrec = tapes_recording_call(B);
    /* a @host call's gradient taken inside the graph (a vjp host node): to
     * a tape recording the call, the function's values are those of its
     * forward and of its run again, two sums where eager code has one (as
     * in the call that traces, stage/trace.c) */
    for (int i = 0; i < B->n && nrec >= 1; i++)
        if (B->nodes[i].kind == G_HOST && B->nodes[i].nout && host_is_gradient_call(B->nodes[i].host->obj)) return true;
    /* tapes made inside the trace took gradients that are now ops of the
     * graph: a tape outside takes one order more of them (grad(g3), g3
     * staged taking grad(g2), g2 taking grad(f)): they count as recording */
    if (nrec >= 1) nrec += G->inner_tapes;
    if (nrec >= 1 && nested_control_flow(B)) return true;
    if (nrec < 2) return false;
    /* a loop on a traced tensor: its backward cannot be differentiated
     * (the error at the gradient call), except in the call whose backward
     * graph traces, which took a second order through it silently, a last
     * bit apart from eager's (0.18514805 for 0.18514806), and the calls
     * after it refused: the body run eagerly is eager code to every tape,
     * on every call (stage_grad2_loop_cached) */
    for (int i = 0; i < B->n; i++)
        if (B->nodes[i].kind == G_WHILE) return true;
    /* under three or more (a third order may be taken), a traced if: the
     * held values' backward graphs, cached and run again under the outer
     * tapes, gave third and fourth orders that can differ from eager's in
     * the last bit (stage_grad3_if, stage_grad3_nested_if, stage_grad4_if) */
    for (int i = 0; i < B->n && nrec >= 3; i++)
        if (B->nodes[i].kind == G_COND) return true;
    /* ... and any graph there: held values gave third orders far from
     * eager's where the backward graphs run cached (from the second or
     * third call): f(x) = tanh(x) * x, -1.4039994 for -2.0088372, and
     * sin(x) * x under a target sum(f(z) * f(z)), 4.7425623 for
     * 7.1892204 (stage_grad3_cached_wrong). Where the held values'
     * backward graphs go wrong is not found yet; the body run eagerly is
     * eager code to every tape */
    if (nrec >= 3) return true;
    if (hold_graph(I, G)) return result_read_by_rule(B);
    for (int i = 0; i < B->n; i++) {
        const GNode *n = &B->nodes[i];
        if ((n->kind == G_HOST && n->nout) || (n->kind == G_VAR_READ && n->region != 0) ||
            (n->kind == G_OP && (tfe_ops[n->op].flags & F_COLLECTIVE)))
            return true;
    }
    return false;
}

/* The held values of run x of G (GCallGrad.xslot, hold): the values of
 * its top region's ops and conds that are not outputs of the graph, and
 * those of the branches that ran of its conds (cond_x), of known shape,
 * run x's. *slots: owned. */
static int held_slots(const Graph *G, GRun *x, int **slots)
{
    int n = 0, cap = 0;
    *slots = NULL;
    const GRegion *top = &G->regions[0];
    bool *isout = xcalloc((size_t)G->nvals + 1, sizeof *isout);
    for (int k = 0; k < top->nouts; k++) isout[slot_of(G, top->outs[k])] = true;
    for (int i = 0; i < top->n; i++) {
        const GNode *c = &G->nodes[top->nodes[i]];
        if (!x_node(c) && c->kind != G_COND) continue;
        CondX cx = {0, NULL, NULL, NULL};
        if (c->kind == G_COND) cx = cond_x(G, c);
        for (int j = -c->nout; j < cx.n; j++) {
            int s = j < 0 ? c->vbase + c->nout + j : cx.slot[j];
            const tfe_tensor *t = x->v[s];
            if (!t || isout[s] || (j >= 0 && !known_shape(t))) continue;
            if (n == cap) *slots = xrealloc(*slots, sizeof **slots * (size_t)(cap = cap ? 2 * cap : 8));
            (*slots)[n++] = s;
        }
        cond_x_free(&cx);
    }
    free(isout);
    return n;
}

/* The kept branch values of run x of G (GCallGrad.xslot): the slots of
 * the values, in the branch that ran, that the backward of a cond of G's
 * top region reads (cond_x), of known shape. *slots: owned. */
static int branch_kept(const Graph *G, GRun *x, int **slots)
{
    int n = 0, cap = 0;
    *slots = NULL;
    const GRegion *top = &G->regions[0];
    for (int i = 0; i < top->n; i++) {
        const GNode *c = &G->nodes[top->nodes[i]];
        if (c->kind != G_COND) continue;
        CondX cx = cond_x(G, c);
        for (int j = 0; j < cx.n; j++) {
            const tfe_tensor *t = x->v[cx.slot[j]];
            if (!t || !known_shape(t)) continue;
            if (n == cap) *slots = xrealloc(*slots, sizeof **slots * (size_t)(cap = cap ? 2 * cap : 8));
            (*slots)[n++] = cx.slot[j];
        }
        cond_x_free(&cx);
    }
    return n;
}

int stage_graph_call(Interp *I, Graph *G, tfe_tensor *const *inputs, tfe_tensor **outs)
{
    return stage_graph_call_same(I, G, inputs, outs, NULL);
}

int stage_graph_call_same(Interp *I, Graph *G, tfe_tensor *const *inputs, tfe_tensor **outs, int *same_in)
{
    return stage_graph_call_ran(I, G, inputs, outs, same_in, NULL, NULL);
}

/* How the run of R went at the if or loop of the graph as traced whose id
 * is cf (its note in ran, graph/exec.h: 1 + the branch, or 1 + the
 * iterations), or 0 where that is not known (the optimizer dropped it). */
static int traced_way(const Graph *R, const signed char *ran, int cf)
{
    for (int i = 0; ran && i < R->n; i++)
        if ((R->nodes[i].kind == G_COND || R->nodes[i].kind == G_WHILE) && R->nodes[i].cf_id == cf) return ran[i];
    return 0;
}

/* The values a top-region value r of the graph as traced T can be at run
 * time: r itself, or, for an if's output, those of its branches' outputs
 * (a value made in the branch, or one from outside it handed on), for a
 * loop's, its initial value's and its body's; where the run of R says which
 * branch ran, or whether the loop ran at all, only that one (two tanh(v)
 * CSE merged, handed on by two loops that ran zero times, are two tensors
 * in eager code; acc and b = acc, one where the loop ran:
 * stage_grad_cse_cond_outputs_bits), collected into bases[] (*over: more
 * than cap). */
enum { TRACED_BASES = 32 };
static void traced_bases(const Graph *T, const Graph *R, const signed char *ran, GRef r, GRef *bases, int *n,
                         bool *over)
{
    const GNode *nd = &T->nodes[r.node];
    int way = nd->kind == G_COND || nd->kind == G_WHILE ? traced_way(R, ran, nd->cf_id) : 0;
    if (nd->kind == G_COND) {
        for (int b = 0; b < 2; b++)
            if (!way || way == 1 + b) traced_bases(T, R, ran, T->regions[nd->regions[b]].outs[r.out], bases, n, over);
        return;
    }
    /* a loop's carried value: its initial value (the loop ran zero times)
     * or what the body ends it on (a value made there, a capture, or a
     * carried value, whose identity the run decides) */
    const GRegion *rc = nd->kind == G_WHILE ? &T->regions[nd->regions[0]] : NULL;
    if (rc && r.out < rc->nparams && r.out < nd->nin && r.out < T->regions[nd->regions[1]].nouts) {
        if (way <= 1) traced_bases(T, R, ran, nd->in[r.out], bases, n, over);
        if (way != 1) traced_bases(T, R, ran, T->regions[nd->regions[1]].outs[r.out], bases, n, over);
        return;
    }
    if (*n == TRACED_BASES) *over = true;
    else bases[(*n)++] = r;
}

/* Is a base value one tensor with another exactly where the run hands out
 * one (an input: the caller's tensors; a variable's read; a loop's result,
 * b = acc last in its body)? Any other node makes a tensor of its own. */
static bool run_decides(const Graph *T, GRef r)
{
    GKind k = T->nodes[r.node].kind;
    return k == G_INPUT || k == G_VAR_READ || k == G_WHILE || k == G_PARAM;
}

/* Is output k of a run of R one tensor with output j (j >= 0) or with an
 * input (j == -1) in eager code, given that the run handed out one tensor
 * for both? By the graph as traced, not by run-time identity alone: the
 * optimized graph merges duplicate nodes (two tanh(v)) and folds ops into
 * their operands (x * 1.0 into x), which eager code computes as tensors of
 * their own, and a tape that took them for one would add their gradients
 * in another order (stage_grad_cse_outputs_bits). They are one where some
 * value either can be (through ifs) is one node of the traced graph, or
 * both are values whose identity the run decides. */
static bool traced_same(const Graph *R, const signed char *ran, const Graph *G, int k, int j)
{
    const Graph *T = G->raw ? G->raw : G;
    if (R == T) return true;
    const GRegion *top = &T->regions[0];
    if (top->nouts != R->regions[0].nouts) return true; /* no map: as run */
    GRef a[TRACED_BASES], b[TRACED_BASES];
    int na = 0, nb = 0;
    bool over = false;
    traced_bases(T, R, ran, top->outs[k], a, &na, &over);
    if (j >= 0) traced_bases(T, R, ran, top->outs[j], b, &nb, &over);
    if (over) return true;
    for (int x = 0; x < na; x++) {
        if (j < 0 && run_decides(T, a[x])) return true;
        for (int y = 0; y < nb; y++)
            if ((a[x].node == b[y].node && a[x].out == b[y].out) || (run_decides(T, a[x]) && run_decides(T, b[y])))
                return true;
    }
    return false;
}

int stage_graph_call_ran(Interp *I, Graph *G, tfe_tensor *const *inputs, tfe_tensor **outs, int *same_in,
                         signed char **ran, const Graph **ran_g)
{
    GRun x;
    int saved_tapes = tfe_tapes_active;
    /* under a tape, a graph whose backward can read its values runs as
     * traced, keeping every value (the optimized graph's fused nodes and
     * arena hold no value of the traced one); its results are the same
     * bits, as the optimizer's are eager's */
    Graph *K = saved_tapes ? keep_graph(I, G) : NULL, *R = K ? K : G;
    /* ... and so does one under two recording tapes or more (any may record
     * another's gradient, a higher order) whose values it can hand out as
     * outputs of its tape entry (hold_graph, GCallGrad.hold) */
    Graph *H = saved_tapes && tapes_recording_call(G->raw ? G->raw : G) >= 2 ? hold_graph(I, G) : NULL;
    /* (under three or more, a cached call now runs its body eagerly
     * instead: stage_grad_runs_eagerly, stage_grad3_cached_wrong; before:
     * the backward graph's own call, under the outer tapes, held its values in
     * turn, so a third or fourth order was
     * eager's where the target reads the call's result and the lower
     * orders' gradients, which the replay's two sums were not,
     * stage_grad3_cached_targets; held values had given wrong third orders
     * before a held call replayed the ops of its results,
     * stage_grad2_cached_result, stage_grad3_cached. Still open: a graph
     * with an if nested in a branch, whose third order can differ in the
     * last bit on a call that runs its cached backward graphs) */
    if (H) R = H;
    /* ... and so does one with an op whose result's shape depends on the
     * data (x[mask]): its backward graph is for those sizes (data_shapes) */
    Graph *D = saved_tapes && !K && !H && !I->tracer && data_shaped(G->raw ? G->raw : G) ? (G->raw ? G->raw : G) : NULL;
    if (D) R = D;
    grun_init(&x, I, R, inputs);
    /* the plan calls CPU kernels into a host arena: only while no tensor has
     * gone to another device (then every op goes through device dispatch) */
    if (!K && !H && !D && !tfe_devices_used) grun_use_plan(&x);
    x.keep = saved_tapes != 0; /* the backward's saved values are read from the run below */
    /* a loop that reads a variable it assigns reads a new tensor of it at
     * every iteration: the backward needs each (logged reads) */
    for (int i = 0; i < R->n && saved_tapes && !x.logreads; i++)
        x.logreads = R->nodes[i].kind == G_VAR_READ && R->nodes[i].region != 0;
    tfe_tapes_active = 0; /* under a tape the whole call is one entry */
    /* what its @host calls read that their nodes do not take (stage/host_reads.h) */
    HostUnlinked unl = {0}, *unl_outer = I->host_unlinked;
    I->host_unlinked = saved_tapes && !I->tracer ? &unl : NULL;
    int rc = x.plan ? grun_plan(&x) : grun_region(&x, 0);
    I->host_unlinked = unl_outer;
    tfe_tapes_active = saved_tapes;
    GRegion *top = &R->regions[0];
    /* by output: the input it is (a value passed through: a loop that ran
     * zero times, or ends on a captured input), or -1 */
    int *same = xmalloc(sizeof *same * ((size_t)top->nouts + 1));
    for (int k = 0; k < top->nouts; k++) {
        same[k] = -1;
        if (same_in) same_in[k] = -1;
        outs[k] = rc ? NULL : grun_value(&x, top->outs[k]);
        if (!outs[k]) continue;
        /* each output its own tensor (the tape knows tensors by identity) */
        bool dup = false;
        for (int i = 0; i < R->ninputs && !dup; i++)
            if ((dup = outs[k] == inputs[i]) && traced_same(R, x.ran, G, k, -1)) same[k] = i;
        /* (one tensor twice, b = acc last in a loop's body: eager code's
         * one tensor, whose uses add to one sum; -2 - j: output j) */
        for (int j = 0; j < k && !dup; j++)
            if ((dup = outs[k] == outs[j]) && traced_same(R, x.ran, G, k, j)) same[k] = -2 - j;
        /* (a graph constant, directly or through a branch that left a
         * binding on it, is handed out as a tensor of its own: eager code
         * makes a new one at every call, and a caller that passes it back
         * in must not be the constant to the tape) */
        GKind ok = R->nodes[top->outs[k].node].kind;
        if (!dup && (ok == G_CONST || ok == G_COND || ok == G_WHILE)) dup = const_value(R, outs[k]);
        outs[k] = dup ? tensor_alias(outs[k]) : (tensor_incref(outs[k]), outs[k]);
        if (same_in) same_in[k] = same[k];
    }
    if (!rc && saved_tapes) {
        GCallGrad *c = xcalloc(1, sizeof *c);
        c->base.refcount = 0;
        c->base.backward = gcall_backward;
        c->base.totals = true; /* backward_run adds to the gradients so far */
        /* (a second run of the backward, the tape's merge_pick, is seen by
         * nothing where no host code runs in it: no host call in G) */
        c->base.rerun = true;
        for (int i = 0; i < G->n; i++) c->base.rerun &= G->nodes[i].kind != G_HOST;
        c->base.release = gcall_release;
        c->base.composite = true;
        c->I = I;
        c->same_out = xmalloc(sizeof *c->same_out * ((size_t)top->nouts + 1));
        for (int k = 0; k < top->nouts; k++) c->same_out[k] = same[k] >= 0 ? same[k] : -1;
        c->nsame_out = top->nouts;
        /* the backward derives from the graph as traced, so that its sums
         * run in the order an eager tape's do (bitwise the same gradients) */
        Graph *B = K ? K : H ? H : G->raw ? G->raw : G;
        int *map = B != R ? effect_map(B, R) : NULL;
        data_shapes(c, B, B == R ? &x : NULL);
        if (B != R && !map) B = R;
        c->G = B;
        B->refcount++;
        c->run = G;
        G->refcount++;
        c->plan = plan_of(B);
        if (K) { /* the values of its ops, for a backward no tape records */
            c->kept = xmalloc(sizeof *c->kept * (size_t)(B->nvals + 1));
            c->kslot = xmalloc(sizeof *c->kslot * (size_t)(B->nvals + 1));
            for (int i = 0; i < B->n; i++)
                for (int k = 0; B->nodes[i].kind == G_OP && k < B->nodes[i].nout; k++) {
                    tfe_tensor *t = x.v[B->nodes[i].vbase + k];
                    if (!t || (B->keep_use && !B->keep_use[B->nodes[i].vbase + k])) continue;
                    tensor_incref(t);
                    c->kslot[c->nkept] = B->nodes[i].vbase + k;
                    c->kept[c->nkept++] = t;
                }
        }
        c->saved = xcalloc((size_t)c->plan.nsaved + 1, sizeof *c->saved);
        for (int i = 0; i < c->plan.nsaved; i++)
            if ((c->saved[i] = run_value(B, R, map, &x, c->plan.saved[i]))) tensor_incref(c->saved[i]);
        if (x.draws) {
            c->draws = xcalloc((size_t)B->n + 1, sizeof *c->draws);
            for (int i = 0; i < B->n; i++) {
                int r = map ? map[i] : i;
                if (r >= 0) c->draws[i] = x.draws[r];
            }
        }
        /* the logged reads' values, after the plan's sources */
        c->nlr = logged_reads(B, &c->lr_node, &c->lr_loop);
        c->lr_count = xcalloc((size_t)c->nlr + 1, sizeof *c->lr_count);
        c->lr_role = xcalloc((size_t)c->nlr + 1, sizeof *c->lr_role);
        c->lr_mate = xcalloc((size_t)c->nlr + 1, sizeof *c->lr_mate);
        c->lr_pre = xcalloc((size_t)c->nlr + 1, sizeof *c->lr_pre);
        c->lr_post = xcalloc((size_t)c->nlr + 1, sizeof *c->lr_post);
        logged_roles(B, c->lr_node, c->lr_loop, c->nlr, c->lr_role, c->lr_mate, c->lr_pre, c->lr_post);
        for (int k = 0; k < x.nlog && c->nlr; k++)
            for (int j = 0; j < c->nlr; j++)
                if ((map ? map[c->lr_node[j]] : c->lr_node[j]) == x.lognode[k]) {
                    c->lr_count[j]++;
                    c->nlog++;
                }
        int nsrc = c->plan.nsrc + c->nlog + unl.n;
        tfe_tensor **src = xmalloc(sizeof *src * (size_t)(nsrc + 1));
        /* then what its @host calls read that their nodes do not take */
        c->nextra = unl.n;
        c->extra_what = unl.n ? xmalloc(sizeof *c->extra_what * (size_t)unl.n) : NULL;
        for (int j = 0; j < unl.n; j++) {
            src[nsrc - unl.n + j] = unl.t[j];
            c->extra_what[j] = unl.what[j];
        }
        unl.n = 0;
        c->snap = unl.snap;
        c->nsnap = unl.nsnap;
        unl.snap = NULL;
        unl.nsnap = 0;
        for (int i = 0; i < c->plan.nsrc; i++) {
            /* a logged read that did not run (its loop ran zero times):
             * the variable's tensor as it is, which no tape notes (its
             * gradient is its values', none), as in a run outside a trace */
            int jl = -1;
            for (int j = 0; j < c->nlr; j++)
                if (c->lr_node[j] == c->plan.node[i] && !c->lr_count[j]) jl = j;
            if (jl >= 0) {
                src[i] = variable_peek(B->nodes[c->plan.node[i]].host->obj);
                tensor_incref(src[i]);
                continue;
            }
            src[i] = source_value(I, B, R, map, &c->plan, &x, i);
        }
        for (int j = 0, at = c->plan.nsrc; j < c->nlr; j++)
            for (int k = 0; k < x.nlog; k++)
                if ((map ? map[c->lr_node[j]] : c->lr_node[j]) == x.lognode[k]) {
                    tensor_incref(x.log[k]);
                    src[at++] = x.log[k];
                }
        /* an output that is a source too (a variable's read a cond hands on:
         * stage/trace_cf.c, export_reads), or the tensor such a source has
         * a header of its own for (ran_read_own), is its own tensor as well */
        for (int k = 0; k < top->nouts; k++)
            for (int i = G->ninputs; i < nsrc && outs[k]; i++)
                if (outs[k] == src[i] ||
                    (i < c->plan.nsrc && outs[k] == run_value(B, R, map, &x, c->plan.src[i]))) {
                    tfe_tensor *a = tensor_alias(outs[k]);
                    tensor_decref(outs[k]);
                    outs[k] = a;
                    break;
                }
        free(map);
        /* then the saved host results (each its own tensor too) */
        c->hout = xmalloc(sizeof *c->hout * (size_t)(c->plan.nsaved + 1));
        tfe_tensor **all = xmalloc(sizeof *all * (size_t)(top->nouts + c->plan.nsaved + 1));
        mem_copy(all, outs, sizeof *outs * (size_t)top->nouts);
        for (int i = 0; i < c->plan.nsaved; i++) {
            tfe_tensor *t = c->saved[i];
            const GNode *hn = saved_host(B, c->plan.saved[i]);
            if (!t || !hn || !dtype_is_float(t->dtype)) continue;
            bool dup = false;
            for (int j = 0; j < nsrc && !dup; j++) dup = t == src[j];
            for (int j = 0; j < top->nouts + c->nhout && !dup; j++) dup = t == all[j];
            if (dup) {
                c->saved[i] = tensor_alias(t);
                tensor_decref(t);
            }
            all[top->nouts + c->nhout] = c->saved[i];
            c->hout[c->nhout++] = i;
        }
        /* then the kept branch values, or the held values (each its own
         * tensor too; one that is not is left to the backward's replay) */
        int nall = top->nouts + c->nhout, nxo = 0;
        tfe_tensor **xo = NULL; /* (owned until the tapes hold them) */
        c->hold = H && B == R && !B->noted_loops;
        if ((B->noted_loops || c->hold) && B == R) {
            int cap = c->hold ? held_slots(B, &x, &c->xslot) : branch_kept(B, &x, &c->xslot);
            all = xrealloc(all, sizeof *all * (size_t)(nall + cap + 1));
            xo = xcalloc((size_t)cap + 1, sizeof *xo);
            for (int j = 0; j < cap; j++) {
                tfe_tensor *t = x.v[c->xslot[j]];
                bool dup = false;
                for (int i = 0; i < nsrc && !dup; i++) dup = t == src[i];
                for (int i = 0; i < nall && !dup; i++) dup = t == all[i];
                if (dup && c->hold) continue;
                if (!(t = dup ? tensor_alias(t) : (tensor_incref(t), t))) continue;
                c->xslot[c->nx++] = c->xslot[j];
                all[nall++] = xo[nxo++] = t;
            }
        }
        /* (to a tape outside any trace in progress: one made in it records
         * what serves every later call) */
        int *same_all = xmalloc(sizeof *same_all * ((size_t)nall + 1));
        for (int k = 0; k < nall; k++) /* (an earlier output: its place among in, then out) */
            same_all[k] = k >= top->nouts ? -1 : same[k] <= -2 ? nsrc + (-2 - same[k]) : same[k];
        tfe_tape_record_custom_same(&c->base, nsrc, src, nall, all, same_all,
                                    I->tracer ? I->tracer->tapes_at_begin : tfe_tapes_active);
        for (int j = 0; j < nxo; j++) tensor_decref(xo[j]);
        free(xo);
        free(same_all);
        free(all);
        for (int i = 0; i < nsrc; i++)
            if (src[i]) tensor_decref(src[i]);
        free(src);
        if (c->base.refcount == 0) gcall_release(&c->base); /* no tape tracks its inputs */
    }
    free(same);
    host_unlinked_free(&unl);
    if (ran) { /* (the ways its ifs and loops went: the caller's now) */
        *ran = x.ran;
        *ran_g = R;
        x.ran = NULL;
    }
    grun_release(&x);
    return rc;
}

/* Whether loop id of the trace in progress runs at least once: its
 * condition replayed on the values the loop started from, recorded into the
 * trace (a traced one-element tensor, new ref). NULL when the condition
 * reads what a replay cannot give again (a host call, a random draw,
 * another loop or cond; a variable, unless a read of it outside the loop
 * has its value then, trace_read_at_start, with reads, or nothing from the
 * loop on in its region may assign it: a new read after it,
 * trace_read_after). */
tfe_tensor *stage_loop_runs(Tracer *T, int id, bool reads)
{
    GRef *caps;
    int ncaps;
    Graph *m = graph_extract(T->g, id, &caps, &ncaps);
    BP b = {T->I, T, m, xcalloc((size_t)m->nvals + 1, sizeof(tfe_tensor *)),
            xcalloc((size_t)m->nvals + 1, sizeof(tfe_tensor *)), xcalloc((size_t)m->n + 1, sizeof(tfe_tensor *)),
            .in_trace = true};
    tfe_tensor *res = NULL;
    int w = -1;
    for (int i = 0; i < m->regions[0].n; i++)
        if (m->nodes[m->regions[0].nodes[i]].kind == G_WHILE) w = m->regions[0].nodes[i];
    bool ok = w >= 0;
    for (int i = 0; i < m->ninputs && ok; i++) {
        int slot = T->g->nodes[caps[i].node].vbase + caps[i].out;
        tfe_tensor *t = slot < T->capconcrete ? T->concrete[slot] : NULL;
        if (!(ok = t != NULL)) break;
        tensor_incref(t);
        b.m[m->nodes[m->inputs[i]].vbase] = t;
    }
    for (int i = 0; i < m->n && ok; i++) {
        const GNode *x = &m->nodes[i];
        if (x->kind == G_CONST) {
            tensor_incref(x->value);
            put(b.m, x->vbase, x->value);
        }
    }
    if (ok) {
        const GNode *wn = &m->nodes[w];
        const GRegion *rc = &m->regions[wn->regions[0]];
        for (int i = 0; i < rc->n && ok; i++) {
            const GNode *x = &m->nodes[rc->nodes[i]];
            ok = x->kind == G_OP ? !(tfe_ops[x->op].flags & (F_RANDOM | F_COLLECTIVE)) : x->kind == G_CONST || x->kind == G_PARAM;
            if (x->kind == G_VAR_READ && !x->outer_out) {
                /* (its first evaluation reads the value the variable had
                 * when the loop started: a read of it outside the loop
                 * then, or, where there is none, a new one after the loop
                 * when the loop cannot assign it) */
                tfe_tensor *t = reads ? trace_read_at_start(T, id, x->host->obj.u.o) : NULL;
                if (t) tensor_incref(t);
                else t = trace_read_after(T, id, x->host->obj);
                if ((ok = t != NULL)) put(b.m, x->vbase, t);
            }
        }
        for (int k = 0; k < rc->nparams && ok; k++) {
            tfe_tensor *t = b.m[slot_of(m, wn->in[k])];
            if (!(ok = t != NULL)) break;
            tensor_incref(t);
            put(b.m, m->nodes[rc->params[k]].vbase, t);
        }
        if (ok && !replay_region(&b, wn->regions[0]) && (res = b.m[slot_of(m, rc->outs[0])])) tensor_incref(res);
    }
    bp_free(&b);
    graph_decref(m);
    free(caps);
    return res;
}
