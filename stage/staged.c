/* staged.c — calling a staged function: the signature, the trace cache (with
 * shape relaxation and the retrace warning), tracing on a miss, running the
 * graph on a hit, and writing back the outside bindings it assigns. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "stage/check.h"
#include "graph/exec.h"
#include "graph/opt.h"
#include "graph/overlap.h"
#include "graph/plan.h"
#include "tensor/device.h"
#include "stage/sig.h"
#include "stage/staged.h"
#include "stage/export.h"
#include "stage/host_node.h"
#include "stage/trace.h"
#include "util/profile.h"
#include "util/xalloc.h"


/* --- traces and caches ---------------------------------------------------------------- */

static void trace_free(Trace *t)
{
    graph_decref(t->g);
    sig_free(&t->sig);
    free(t->relaxed);
    free(t->fit_dims);
    for (int i = 0; i < t->nouts; i++) {
        OutsideSig *o = &t->outs[i];
        env_decref(o->env);
        sig_free(&o->sig);
        value_decref(o->tmpl);
    }
    free(t->outs);
    free(t->same_out);
    free(t->grad_for);
    free(t->pass_ok);
    free(t->krules);
    free(t->kroot);
    for (int i = 0; i < t->g_ninputs; i++)
        if (t->static_val && t->static_val[i]) tensor_decref(t->static_val[i]);
    free(t->static_val);
    value_decref(t->ret_tmpl);
    for (int i = 0; i < t->narg_objs; i++) value_decref(t->arg_objs[i]);
    free(t->arg_objs);
    for (int i = 0; i < t->nheld; i++) value_decref(t->held[i]);
    free(t->held);
    free(t->desc);
    free(t);
}

void stage_cache_free(Closure *c)
{
    StageCache *sc = c->stage;
    if (!sc) return;
    c->stage = NULL;
    for (int i = 0; i < sc->n; i++) trace_free(sc->traces[i]);
    free(sc->traces);
    free(sc->sites);
    free(sc);
}

static StageCache *cache_of(Closure *c)
{
    if (!c->stage) c->stage = xcalloc(1, sizeof(StageCache));
    return c->stage;
}

/* A human description of each argument, for the retrace warning:
 * "float32 (3, 4)", "3 (int64)", "\"relu\"". One per line, joined by '\n'. */
static void describe_args(Closure *c, Env *e, char *buf, size_t cap)
{
    FnInfo *info = c->fn->info;
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < info->nparams && n + 1 < cap; i++) {
        Value v = e->slots[i];
        char one[300];
        if (v.kind == V_TENSOR) {
            char sh[200];
            snprintf(one, sizeof one, "%s %s", dtype_name(v.u.t->dtype), shape_str(v.u.t->rank, v.u.t->shape, sh));
        } else if (v.kind == V_SCALAR && v.dtype != TFE_BOOL) {
            char *r = value_repr(v);
            snprintf(one, sizeof one, "%s (%s)", r, dtype_name((tfe_dtype)v.dtype));
            free(r);
        } else {
            char *r = value_repr(v);
            snprintf(one, sizeof one, "%.60s", r);
            free(r);
        }
        n += (size_t)snprintf(buf + n, cap - n, "%s%s", i ? "\n" : "", one);
    }
}

/* --- matching a call against a trace ------------------------------------------------------ */

static bool dims_match(const SigBuf *want, const bool *relaxed, const int64_t *dims, int nd)
{
    if (want->nd != nd) return false;
    for (int i = 0; i < nd; i++)
        if (want->dims[i] != dims[i] && !(relaxed && relaxed[i])) return false;
    return true;
}


/* Does v hold a number that tensor ops made (not weak: not from literals
 * and number arithmetic on them alone)? */
static bool holds_op_number(Value v)
{
    if (v.kind == V_SCALAR) return !v.weak && !v.lit && v.dtype != TFE_BOOL;
    if (v.kind == V_TUPLE || v.kind == V_LIST) {
        const Seq *q = (const Seq *)v.u.o;
        for (int i = 0; i < q->n; i++)
            if (holds_op_number(q->items[i])) return true;
    } else if (v.kind == V_RECORD) {
        const Record *r = (const Record *)v.u.o;
        for (int i = 0; i < r->n; i++)
            if (holds_op_number(r->vals[i])) return true;
    }
    return false;
}

/* Does the call (its args' signature and leaves) match t? On a match the
 * outside bindings' leaves are appended to lv (the graph's inputs). */
static bool trace_matches(Trace *t, const SigBuf *sb, Leaves *lv, SigBuf *scratch)
{
    if (t->tapes_key >= 0 && t->tapes_key != (tfe_tapes_active > 0)) return false;
    if (t->sig.n != sb->n || mem_cmp(t->sig.b, sb->b, sb->n)) return false;
    if (!dims_match(&t->sig, t->relaxed, sb->dims, sb->nd)) return false;
    int nargs = lv->n;
    for (int i = 0; i < t->nouts; i++) {
        OutsideSig *o = &t->outs[i];
        sig_reset(scratch);
        sig_flatten(o->env->slots[o->slot], scratch, lv, SIG_INPUT);
        if (scratch->n != o->sig.n || mem_cmp(scratch->b, o->sig.b, o->sig.n) ||
            !dims_match(&o->sig, NULL, scratch->dims, scratch->nd))
            goto no;
    }
    if (lv->n != t->g_ninputs) goto no;
    for (int i = 0; t->static_val && i < t->g_ninputs; i++)
        if (t->static_val[i] && !sig_tensor_equal(t->static_val[i], lv->t[i], -1)) goto no;
    return true;
no:
    while (lv->n > nargs) tensor_decref(lv->t[--lv->n]);
    return false;
}

/* Relaxation: a signature that differs from an earlier trace's only in
 * some dims gets a trace with those dims unknown (docs/staging.md). */
static bool *relax_against(StageCache *sc, const SigBuf *sb, Trace **base)
{
    for (int i = 0; i < sc->n; i++) {
        Trace *t = sc->traces[i];
        if (t->shape_specialised || t->sig.n != sb->n || mem_cmp(t->sig.b, sb->b, sb->n) || t->sig.nd != sb->nd)
            continue;
        bool any = false;
        bool *r = xcalloc((size_t)sb->nd + 1, 1);
        for (int d = 0; d < sb->nd; d++) {
            r[d] = (t->relaxed && t->relaxed[d]) || t->sig.dims[d] != sb->dims[d];
            any |= r[d];
        }
        if (any) {
            *base = t;
            return r;
        }
        free(r);
    }
    return NULL;
}

/* --- running a cached trace ---------------------------------------------------------------- */

static bool is_container(Value v) { return v.kind == V_TUPLE || v.kind == V_LIST || v.kind == V_RECORD; }

/* The lists, tuples and records of v and everything in it, in pre-order. */
static void containers_of(Value v, Value **out, int *n)
{
    if (!is_container(v)) return;
    *out = xrealloc(*out, sizeof **out * (size_t)(*n + 1));
    (*out)[(*n)++] = v;
    if (v.kind == V_RECORD) {
        Record *r = (Record *)v.u.o;
        for (int i = 0; i < r->n; i++) containers_of(r->vals[i], out, n);
    } else {
        Seq *q = (Seq *)v.u.o;
        for (int i = 0; i < q->n; i++) containers_of(q->items[i], out, n);
    }
}

/* A list, tuple or record of an argument (or in one) that the result or a
 * binding written back holds is that very object of this call's arguments
 * (now), as eagerly: the body cannot have changed it. traced[j] is the
 * template's object for the arguments' j-th container (pre-order; nil when
 * the templates do not hold it); a call with the same signature has its
 * containers in the same order. */
static void seed_arg_objs(SigMemo *m, const Value *traced, int n, const Value *now, int nargs)
{
    if (!now) return;
    Value *cs = NULL;
    int nc = 0;
    for (int i = 0; i < nargs; i++) containers_of(now[i], &cs, &nc);
    for (int j = 0; j < n && j < nc; j++)
        if (traced[j].kind == cs[j].kind && is_container(traced[j])) sig_memo_add(m, traced[j].u.o, cs[j]);
    free(cs);
}

/* The target-th number/tensor leaf of template v, in sig.c's rebuild order
 * (a list held in two places counts in both), or NULL. */
static Value *tmpl_leaf(Value *v, int *k, int target)
{
    if ((v->kind == V_SCALAR && v->dtype != TFE_BOOL && !v->lit) || v->kind == V_TENSOR)
        return (*k)++ == target ? v : NULL;
    Value *r = NULL;
    if (v->kind == V_TUPLE || v->kind == V_LIST) {
        Seq *q = (Seq *)v->u.o;
        for (int i = 0; i < q->n && !r && *k <= target; i++) r = tmpl_leaf(&q->items[i], k, target);
    } else if (v->kind == V_RECORD) {
        Record *rc = (Record *)v->u.o;
        for (int i = 0; i < rc->n && !r && *k <= target; i++) r = tmpl_leaf(&rc->vals[i], k, target);
    }
    return r;
}

/* sig_rebuild_shared, where leaf i (counted from *k on) is, by want[i]
 * (TK_*; TK_NONE: as the template says), a number, a tensor, or what an
 * op's result is under the tapes now: an if's or loop's result whose kind
 * the way it went decides (Trace.krules). The template's leaves say so
 * during the rebuild only. */
static Value rebuild_kinds(Value tmpl, tfe_tensor *const *leaves, int *k, SigMemo *memo, const signed char *want,
                           int nwant)
{
    int base = *k, n = 0;
    Value **at = NULL, *was = NULL;
    for (int i = base; want && i < nwant; i++) {
        if (!want[i]) continue;
        int kk = 0;
        Value *l = tmpl_leaf(&tmpl, &kk, i - base);
        if (!l) break; /* (past this template's leaves) */
        if (!n) {
            at = xmalloc(sizeof *at * (size_t)(nwant - i));
            was = xmalloc(sizeof *was * (size_t)(nwant - i));
        }
        at[n] = l;
        was[n++] = *l;
        Value nv = {0};
        nv.kind = want[i] == TK_NUMBER ? V_SCALAR : V_TENSOR;
        nv.dtype = (uint8_t)leaves[i]->dtype;
        nv.weak = leaves[i]->weak;
        nv.boxed = want[i] == TK_BOXED;
        if (nv.kind == V_TENSOR) nv.u.t = leaves[i]; /* (not read: the leaf is leaves[i]) */
        *l = nv;
    }
    Value v = sig_rebuild_shared(tmpl, leaves, k, true, 0, memo);
    for (int j = n - 1; j >= 0; j--) *at[j] = was[j];
    free(at);
    free(was);
    return v;
}

/* The node of g that cond or loop cf_id (GNode.cf_id) is now, or -1. */
static int cf_node(const Graph *g, int cf_id)
{
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].cf_id == cf_id && (g->nodes[i].kind == G_COND || g->nodes[i].kind == G_WHILE)) return i;
    return -1;
}

static signed char krule_at(const Graph *g, const signed char *ran, GRef ref, const KRule *rules, int r, int iters,
                            int depth);

/* In the call that traces: its runs of ifs and loops (each its own graph,
 * Tracer.rans), where a rule's anchor is not in the one resolving it. */
static const Tracer *krule_tracer;

/* Rule r (Trace.krules), found by its anchor, by the ways a run of g went. */
static signed char krule_anchored(const Graph *g, const signed char *ran, const KRule *rules, int r, int depth)
{
    if (r < 0 || depth > 400) return TK_NONE;
    if (rules[r].k[0] == TK_OP) return krule_at(g, ran, (GRef){-1, 0}, rules, r, -1, depth);
    int node = cf_node(g, rules[r].anchor);
    for (int i = krule_tracer ? krule_tracer->nrans - 1 : -1; node < 0 && i >= 0; i--) {
        const struct RanRec *rr = &krule_tracer->rans[i];
        if (!rr->ran || (node = cf_node(rr->rg, rules[r].anchor)) < 0 || !rr->ran[node]) {
            node = -1;
            continue;
        }
        g = rr->rg;
        ran = rr->ran;
    }
    return node < 0 ? TK_NONE : krule_at(g, ran, (GRef){node, rules[r].out}, rules, r, -1, depth);
}

/* Rule r (Trace.krules) for value ref of g, by the ways a run of g went
 * (GRun.ran), a loop's after iters iterations (-1: as many as ran): the
 * kind eager code holds it as, or TK_NONE where that cannot be told (then
 * the template says). */
static signed char krule_at(const Graph *g, const signed char *ran, GRef ref, const KRule *rules, int r, int iters,
                            int depth)
{
    if (r < 0 || !ran || depth > 400) return TK_NONE;
    if (rules[r].k[0] == TK_OP) { /* a number where every operand is one on this way */
        signed char k = TK_NUMBER;
        for (int b = 0; b < 2; b++) {
            if (rules[r].sub[b] < 0) continue;
            signed char kb = krule_anchored(g, ran, rules, rules[r].sub[b], depth + 1);
            if (!kb) return TK_NONE;
            if (kb != TK_NUMBER) k = rules[r].k[1];
        }
        return k;
    }
    if (ref.node < 0) return TK_NONE;
    const GNode *n = &g->nodes[ref.node];
    if ((n->kind != G_COND && n->kind != G_WHILE) || !ran[ref.node]) return TK_NONE;
    int count = n->kind == G_WHILE ? (iters >= 0 ? iters : ran[ref.node] - 1) : 0;
    int way = n->kind == G_WHILE ? count > 0 : ran[ref.node] - 1;
    signed char k = rules[r].k[way];
    if (k == TK_PARAM) { /* the carried value it ends on, where this iteration began */
        int s = rules[r].sub[1];
        if (s < 0 || rules[s].anchor != n->cf_id) return TK_NONE;
        return krule_at(g, ran, (GRef){ref.node, rules[s].out}, rules, s, count - 1, depth + 1);
    }
    if (k != TK_FOLLOW) return k;
    GRef next;
    if (n->kind == G_COND || way == 1) { /* the branch that ran, the loop's body: what it ended on */
        if (n->kind == G_WHILE && count != ran[ref.node] - 1) return TK_NONE; /* (not the last iteration's way) */
        const GRegion *reg = &g->regions[n->regions[n->kind == G_COND ? way : 1]];
        if (ref.out >= reg->nouts) return TK_NONE;
        next = reg->outs[ref.out];
    } else { /* a loop that ran zero times: what it started from */
        if (ref.out >= n->nin) return TK_NONE;
        next = n->in[ref.out];
    }
    return krule_at(g, ran, next, rules, rules[r].sub[way], -1, depth + 1);
}

static signed char krule_resolve(const Graph *g, const signed char *ran, GRef ref, const KRule *rules, int r, int depth)
{
    return krule_at(g, ran, ref, rules, r, -1, depth);
}

/* TNote nt's rule as Trace.krules (its index), or -1; (*notes)[i]: rule
 * i's note (a rule met again is that one: a loop's carried values may
 * hand kinds round in a cycle). */
static int krule_add(Trace *t, const TNote *nt, const TNote ***notes, int depth)
{
    if (!nt || !nt->run_kind[0] || depth > 400) return -1;
    for (int i = 0; i < t->nkrules; i++)
        if ((*notes)[i] == nt) return i;
    int i = t->nkrules++;
    t->krules = xrealloc(t->krules, sizeof *t->krules * (size_t)t->nkrules);
    *notes = xrealloc(*notes, sizeof **notes * (size_t)t->nkrules);
    (*notes)[i] = nt;
    bool op = nt->run_kind[0] == TK_OP;
    t->krules[i].anchor = op ? -1 : nt->ref.node;
    t->krules[i].out = nt->ref.out;
    for (int b = 0; b < 2; b++) {
        t->krules[i].k[b] = nt->run_kind[b];
        t->krules[i].sub[b] = -1;
    }
    for (int b = 0; b < 2; b++) {
        if (!op && nt->run_kind[b] != TK_FOLLOW && nt->run_kind[b] != TK_PARAM) continue;
        if (op && !nt->sub[b]) continue;
        int sub = krule_add(t, nt->sub[b], notes, depth + 1);
        t->krules[i].sub[b] = sub;
        if (sub < 0 && op) t->krules[i].k[0] = t->krules[i].k[1] = TK_NONE;
        if (sub < 0 && !op) t->krules[i].k[b] = TK_NONE;
    }
    return i;
}

/* What nt's kind is in the call that traces, by the ways its ifs and
 * loops went there (Tracer.rans), or TK_NONE. */
static signed char krule_now(const Tracer *T, const Trace *t, const TNote *nt, const TNote *const *notes, int depth)
{
    if (!nt || depth > 400) return TK_NONE;
    int r = -1;
    for (int i = 0; i < t->nkrules && r < 0; i++)
        if (notes[i] == nt) r = i;
    if (r < 0) return TK_NONE;
    if (t->krules[r].k[0] == TK_OP) {
        signed char k = TK_NUMBER;
        for (int b = 0; b < 2; b++) {
            if (!nt->sub[b]) continue;
            signed char kb = krule_now(T, t, nt->sub[b], notes, depth + 1);
            if (!kb) return TK_NONE;
            if (kb != TK_NUMBER) k = t->krules[r].k[1];
        }
        return k;
    }
    if (nt->ran_rec < 0 || nt->ran_rec >= T->nrans) return TK_NONE;
    const struct RanRec *rr = &T->rans[nt->ran_rec];
    krule_tracer = T;
    signed char k = krule_resolve(rr->rg, rr->ran, nt->ran_ref, t->krules, r, 0);
    krule_tracer = NULL;
    return k;
}

static int run_trace(Interp *I, Trace *t, Leaves *lv, Value *out)
{
    Graph *g = t->g;
    int nouts = g->regions[0].nouts;
    tfe_tensor *outbuf[16], **outs = nouts <= 16 ? outbuf : xcalloc((size_t)nouts, sizeof *outs);
    int samebuf[16], *same_in = nouts <= 16 ? samebuf : xmalloc(sizeof *same_in * (size_t)nouts);
    signed char *ran = NULL;
    const Graph *rg = NULL;
    if (stage_graph_call_ran(I, t->g, lv->t, outs, same_in, t->kroot ? &ran : NULL, &rg)) {
        if (outs != outbuf) free(outs);
        if (same_in != samebuf) free(same_in);
        free(ran);
        return -1;
    }
    /* a result an if or loop left a number one way and a tensor the other
     * is what the way this run went left (Trace.krules) */
    signed char *want = NULL;
    for (int i = 0; ran && i < nouts && i < t->nkeep; i++) {
        if (t->kroot[i] < 0) continue;
        if (!want) want = xcalloc((size_t)nouts, 1);
        want[i] = krule_resolve(rg, ran, rg->regions[0].outs[i], t->krules, t->kroot[i], 0);
    }
    free(ran);
    /* a result that this run's if or loop made an input it handed on
     * unchanged (the branch that ran ends on it, the loop ran zero times)
     * is that input's own tensor, as eagerly (Trace.pass_ok) */
    for (int i = 0; t->pass_ok && i < nouts && i < t->nkeep; i++) {
        int s = same_in[i];
        if (!t->pass_ok[i] || s < 0 || s >= lv->n || !outs[i]) continue;
        tensor_incref(lv->t[s]);
        tensor_decref(outs[i]);
        outs[i] = lv->t[s];
    }
    if (same_in != samebuf) free(same_in);
    /* one tensor in several places, or an input passed through, is that
     * one tensor there, as eagerly (Trace.same_out) */
    for (int i = 0; t->same_out && i < nouts && i < t->nkeep; i++) {
        int s = t->same_out[i];
        tfe_tensor *one = s >= 0 ? outs[s] : s <= -2 && -2 - s < lv->n ? lv->t[-2 - s] : NULL;
        if (!one || !outs[i]) continue;
        tensor_incref(one);
        tensor_decref(outs[i]);
        outs[i] = one;
    }
    /* a tape's gradients of variables say so, as eagerly (Trace.grad_for) */
    for (int i = 0; t->grad_for && i < nouts && i < t->nkeep; i++) {
        uint16_t id = t->grad_for[i];
        if (id && outs[i]) outs[i]->grad_for = !outs[i]->grad_for || outs[i]->grad_for == id ? id : TFE_GRAD_FOR_MANY;
    }
    /* the outside bindings it assigned, then the result */
    int k = t->nret;
    SigMemo memo = {0}; /* one list in two places stays one list */
    seed_arg_objs(&memo, t->arg_objs, t->narg_objs, I->stage_call_args, t->nparams);
    for (int i = 0; i < t->nouts; i++) {
        OutsideSig *o = &t->outs[i];
        if (!o->written) continue;
        Value v = rebuild_kinds(o->tmpl, outs, &k, &memo, want, nouts);
        Value old = o->env->slots[o->slot];
        o->env->slots[o->slot] = v;
        value_decref(old);
    }
    k = 0;
    *out = rebuild_kinds(t->ret_tmpl, outs, &k, &memo, want, nouts);
    free(want);
    sig_memo_free(&memo);
    for (int i = 0; i < nouts; i++) tensor_decref(outs[i]);
    if (outs != outbuf) free(outs);
    return 0;
}

/* --- tracing a new signature ---------------------------------------------------------------- */

static void optimize_trace(Graph *g, tfe_tensor *const *static_val);

/* An input whose value the trace depends on (static_val[i], or NULL) is that
 * value in the optimized graph: a constant, which the optimizer can fold into
 * what uses it. Only there: the graph as traced (Graph.raw, which backwards
 * derive from) keeps reading the input, so its gradient still flows (an eager
 * tape differentiates through it whether or not its value was read). */
static void bake_static_inputs(Graph *g, tfe_tensor *const *static_val)
{
    if (!static_val) return;
    int *cid = xmalloc(sizeof *cid * ((size_t)g->ninputs + 1)), nc = 0;
    for (int i = 0; i < g->ninputs; i++) {
        cid[i] = -1;
        if (!static_val[i]) continue;
        tensor_incref(static_val[i]);
        cid[i] = graph_add(g, 0, G_CONST, 0, 1);
        opt_make_const(g, cid[i], static_val[i]);
        nc++;
    }
    if (nc) {
        GRef *map = opt_redirect_new(g); /* after the constants: it has their values too */
        for (int i = 0; i < g->ninputs; i++)
            if (cid[i] >= 0) map[g->nodes[g->inputs[i]].vbase] = (GRef){cid[i], 0};
        opt_redirect_apply(g, map);
    }
    free(cid);
}

/* Run the optimizer over a finished graph (not under --no-optimize), keep its
 * report on the graph, and print the dump --dump-graph asked for. */
void stage_optimize(Graph *g) { optimize_trace(g, NULL); }

/* Lines of text, each as one "tfe debug: " line (the first after head). */
static void debug_lines(const char *head, const char *text)
{
    fflush(stdout);
    fprintf(stderr, "tfe debug: %s\n", head);
    for (const char *p = text; *p;) {
        const char *e = strchr(p, '\n');
        int n = e ? (int)(e - p) : (int)strlen(p);
        fprintf(stderr, "tfe debug: %.*s\n", n, p);
        p += n + (e != NULL);
    }
    fflush(stderr);
}

/* TFE_DEBUG=3: a planned graph (its instructions, arena offsets, in-place
 * reuse); 4: its fused programs too. */
static void debug_plan(Graph *g)
{
    char head[300];
    if (!g->plan) {
        snprintf(head, sizeof head, "plan %s: none (a relaxed graph runs through the walker)", g->name);
        debug_lines(head, "");
    } else {
        char *t = exec_plan_to_text(g, g->plan);
        snprintf(head, sizeof head, "plan %s:", g->name);
        debug_lines(head, t);
        free(t);
    }
    if (prof_debug >= 4) {
        char *t = graph_fused_programs_text(g);
        if (*t) {
            snprintf(head, sizeof head, "fused programs of %s:", g->name);
            debug_lines(head, t);
        }
        free(t);
        /* and, in a build with the GPU backend, the CUDA C of each */
        for (int id = 0; id < g->n && tfe_device_fused_source; id++) {
            GNode *n = &g->nodes[id];
            if (n->kind != G_FUSED || !n->prog) continue;
            char *src = tfe_device_fused_source(n->prog);
            snprintf(head, sizeof head, "CUDA C of %%%d%s", id, src ? ":" : ": none (no GPU kernel for this program)");
            debug_lines(head, src ? src : "");
            free(src);
        }
    }
}

static void optimize_trace(Graph *g, tfe_tensor *const *static_val)
{
    const InterpOptions *o = &interp_current()->opt; /* the options of the program tracing */
    if (o->no_optimize) return;
    g->raw = graph_clone(g); /* gradients are derived from the graph as traced */
    bake_static_inputs(g, static_val);
    OptReport *r = xcalloc(1, sizeof *r);
    bool keep = true; /* graph(f).dump(pass) shows them; cheap next to tracing */
    if (graph_optimize(g, r, keep)) {
        /* a pass failed: the graph stays as traced (passes only rewrite what they understand) */
        tfe_error_clear();
    }
    g->opt = r;
    /* after the passes, which know nothing of halves; before the plan, which
     * compiles the order this makes */
    r->overlapped = graph_overlap_collectives(g);
    g->plan = exec_plan_build(g);
    if (g->plan) {
        r->arena_bytes = g->plan->arena_bytes;
        r->planned_bytes = g->plan->sum_bytes;
        r->in_place = g->plan->ninplace;
        r->updates = g->plan->nupdates;
    }
    if (prof_debug >= 3) debug_plan(g);
    int p = o->dump_pass ? opt_pass_index(o->dump_pass) : -1;
    if (p >= 0 && p < r->npasses && r->text[p] && r->text[p + 1]) {
        fflush(stdout);
        fprintf(stderr, "--- %s: before %s (%d nodes)\n%s--- %s: after %s (%d nodes)\n%s", g->name, o->dump_pass,
                r->before[p], r->text[p], g->name, o->dump_pass, r->after[p], r->text[p + 1]);
        fflush(stderr);
    }
}

/* In a relaxed trace the inputs have unknown dims; carry them through the
 * ops of the top region with the infer rules, so the graph prints what it
 * really knows. (Only for show: the executor infers every shape as it runs.)
 * An op whose rule cannot work with an unknown dim keeps its traced shape. */
static void relax_metas(Graph *g)
{
    GRegion *top = &g->regions[0];
    for (int i = 0; i < top->n; i++) {
        GNode *n = gnode(g, top->nodes[i]);
        if (n->kind != G_OP || n->nout != 1 || n->nin > 16) continue;
        tfe_tensor *in[16];
        bool unknown = false;
        for (int k = 0; k < n->nin; k++) {
            tfe_meta *m = &gnode(g, n->in[k].node)->meta[n->in[k].out];
            for (int d = 0; d < m->rank; d++) unknown |= m->shape[d] < 0;
            in[k] = tensor_symbolic(m->dtype, m->weak, m->rank, m->shape);
        }
        tfe_meta out;
        tfe_tensor *o[32];
        const tfe_opcall c = {.op = n->op, .nin = n->nin, .nout = 1, .in = in, .at = n->at, .out = o};
        if (unknown && tfe_ops[n->op].infer(&c, &out) == 0) n->meta[0] = out;
        tfe_error_clear();
        for (int k = 0; k < n->nin; k++) tensor_decref(in[k]);
    }
}

/* Input labels for graph dumps: "x", or "x[0]", "x[1]" for the leaves of a structure. */
static void label_inputs(Graph *g, const char *name, int first, int n, const char *suffix)
{
    for (int k = 0; k < n; k++) {
        GNode *in = gnode(g, g->inputs[first + k]);
        char buf[256];
        if (n == 1) snprintf(buf, sizeof buf, "%s%s", name ? name : "?", suffix);
        else snprintf(buf, sizeof buf, "%s[%d]%s", name ? name : "?", k, suffix);
        free(in->label);
        in->label = xstrdup(buf);
    }
}

static void note_site(StageCache *sc, Loc loc, const char *desc)
{
    for (int i = 0; i < sc->nsites; i++)
        if (sc->sites[i].src == loc.src && sc->sites[i].line == loc.line) return;
    if (sc->nsites < 8) {
        sc->sites = xrealloc(sc->sites, sizeof *sc->sites * (size_t)(sc->nsites + 1));
        sc->sites[sc->nsites++] = loc;
    }
    (void)desc;
}

/* The one warning for a function traced more than 5 times: its name, the
 * call sites that traced it, and what changed between the last two traces. */
static void retrace_warning(Interp *I, Closure *c, StageCache *sc, const char *prev, const char *now)
{
    FnInfo *info = c->fn->info;
    const char *pre = I->opt.stage_all ? "tfe: --stage-all: " : "";
    fflush(stdout);
    fprintf(stderr, "%swarning: staged function '%s' was traced %d times: each call with a new "
                    "signature traces it again\n", *pre ? pre : "tfe: ", c->name, sc->ntraced);
    fprintf(stderr, "%s  traced from:", pre);
    for (int i = 0; i < sc->nsites; i++)
        fprintf(stderr, " %s:%d", sc->sites[i].src ? sc->sites[i].src->name : "?", sc->sites[i].line);
    fprintf(stderr, "\n");
    const char *p = prev, *q = now;
    bool any = false;
    for (int i = 0; i < info->nparams && p && q; i++) {
        const char *pe = strchr(p, '\n'), *qe = strchr(q, '\n');
        int pl = pe ? (int)(pe - p) : (int)strlen(p), ql = qe ? (int)(qe - q) : (int)strlen(q);
        if (pl != ql || strncmp(p, q, (size_t)pl)) {
            fprintf(stderr, "%s  %s: %.*s -> %.*s\n", pre, info->param_names[i], pl, p, ql, q);
            any = true;
        }
        p = pe ? pe + 1 : NULL;
        q = qe ? qe + 1 : NULL;
    }
    /* (a tensor argument is described by its dtype and shape: one whose
     * value the trace read, int(sum(x)), is part of the signature by value
     * but reads the same here; a long list or record is cut at 60
     * characters) */
    if (!any)
        fprintf(stderr, "%s  no argument changed as described here (kind, dtype, shape): what changed is a value "
                        "of a tensor argument that the trace read (as int(x) reads it), or a binding outside "
                        "the function\n", pre);
    fflush(stderr);
}

static void values_free(Value *v, int n)
{
    for (int i = 0; i < n; i++) value_decref(v[i]);
    free(v);
}

/* How many ways value r of g can be graph input i handed on unchanged: i
 * itself, or a cond's output whose branch ends on such a value, or a
 * loop's whose start value or body's end is one. */
static int pass_ways(const Graph *g, GRef r, int i, int depth)
{
    const GNode *n = &g->nodes[r.node];
    if (depth > 32) return 1000; /* (a loop's params that go round: many) */
    if (n->kind == G_INPUT) return n->input_index == i;
    if (n->kind == G_COND) {
        int w = 0;
        for (int b = 0; b < 2; b++) {
            const GRegion *reg = &g->regions[n->regions[b]];
            if (r.out < reg->nouts) w += pass_ways(g, reg->outs[r.out], i, depth + 1);
        }
        return w;
    }
    if (n->kind == G_WHILE && r.out < n->nin) {
        const GRegion *rc = &g->regions[n->regions[0]], *rb = &g->regions[n->regions[1]];
        int w = pass_ways(g, n->in[r.out], i, depth + 1);
        if (r.out < rb->nouts) {
            GRef e = rb->outs[r.out];
            int p = -1;
            for (int k = 0; k < rc->nparams; k++)
                if (rc->params[k] == e.node) p = k;
            /* (a body that ends it on its own carried value: its start) */
            if (p == r.out) return w;
            w += p >= 0 ? pass_ways(g, (GRef){r.node, p}, i, depth + 1) : pass_ways(g, e, i, depth + 1);
        }
        return w;
    }
    return 0;
}

/* Trace.pass_ok: per result, whether a graph run that hands an input on
 * as it (stage_graph_call_same) did so where the graph as traced does:
 * the optimizer makes x * 1.0 and a reshape to x's own shape x itself,
 * which eager code computes as a tensor of its own. So only where the
 * optimized graph has as many ways to be each input as the traced one.
 * (graph/opt_algebra.c keeps such an op where a branch or loop body ends
 * on it, opt_pinned_values, so a result an if or loop hands on keeps its
 * ways; this check is for what is left: `return reshape(r)`.) */
static void mark_pass_ok(Trace *t)
{
    Graph *g = t->g, *raw = g->raw ? g->raw : g;
    const GRegion *top = &g->regions[0], *rtop = &raw->regions[0];
    for (int k = 0; k < t->nkeep && k < top->nouts && k < rtop->nouts; k++) {
        bool ok = false, bad = false;
        for (int i = 0; i < g->ninputs && i < raw->ninputs && !bad; i++) {
            int wr = pass_ways(raw, rtop->outs[k], i, 0);
            bad = wr != pass_ways(g, top->outs[k], i, 0);
            ok |= wr > 0;
        }
        if (!ok || bad) continue;
        if (!t->pass_ok) t->pass_ok = xcalloc((size_t)t->nkeep, sizeof *t->pass_ok);
        t->pass_ok[k] = true;
    }
}

static int trace_new(Interp *I, Closure *c, Env *e, SigBuf *sb, bool *relaxed, Trace *base, Loc call_loc,
                     Value *out)
{
    FnInfo *info = c->fn->info;
    StageCache *sc = cache_of(c);
    char desc[1000];
    describe_args(c, e, desc, sizeof desc);
    sc->last = NULL; /* until this trace succeeds */
    Tracer *T = trace_begin(I, c->name, info->stage_implicit && !c->stage_by_call);
    uint32_t saved_trace_id = e->trace_id;
    e->trace_id = T->id; /* the body's own bindings are inside the trace */
    trace_enter_fn(I, c->fn, c->name, call_loc);
    /* the arguments as called: the body may assign to a parameter (s = ...
     * for a nil default), and the signature is the call's, not the end's */
    Value *args = xmalloc(sizeof *args * (size_t)(info->nparams + 1));
    for (int i = 0; i < info->nparams; i++) {
        args[i] = e->slots[i];
        value_incref(args[i]);
    }
    /* the arguments, with their number/tensor leaves as the graph's inputs */
    for (int i = 0; i < info->nparams; i++) {
        int first, n;
        Value tv = trace_value_leaves(T, e->slots[i], &first, &n);
        label_inputs(T->g, info->param_names[i], first, n, "");
        Value old = e->slots[i];
        e->slots[i] = tv;
        value_decref(old);
    }
    T->args = args;
    T->nargs = info->nparams;
    T->call_env = e;
    Value ret = v_nil();
    int rc = trace_refusal_pending(I, interp_run_body(I, c, e, &ret));
    if (!rc && !T->failed && sig_has_function(ret))
        rc = trace_fail(I, call_loc, "staged function '%s' returns a function, which a graph cannot", c->name);
    /* a tape begun in the call that touched two values one tensor can be
     * (stage/trace_alias.c): the call runs eagerly (or a located error) */
    if (!rc && !T->failed) rc = trace_alias_check(I, T);
    if (rc && T->eager_redo) {
        /* the trace stopped where the tapes recording the call would not get
         * eager's gradients (a @host call's gradient taken in it under a tape
         * outside, an if on a varying condition under three tapes: trace.c,
         * trace_cf.c), with nothing done yet: the call runs eagerly from the
         * same random state, as do later ones under as many recording tapes */
        int ntapes = T->eager_redo;
        /* (the effects it made, replayed by the run again: trace.c) */
        EffectReplay *replay = T->done;
        T->done = NULL;
        error_clear(I);
        tfe_random_restore(T->rkey, T->rcounter);
        value_decref(ret);
        graph_decref(T->g);
        trace_end(T);
        free(relaxed);
        e->trace_id = saved_trace_id;
        for (int i = 0; i < info->nparams; i++) {
            value_decref(e->slots[i]);
            e->slots[i] = args[i];
        }
        free(args);
        if (!sc->eager_under_tapes || ntapes < sc->eager_under_tapes) sc->eager_under_tapes = ntapes;
        if (!replay) return interp_run_body(I, c, e, out);
        replay->prev = I->effect_replay;
        I->effect_replay = replay;
        rc = interp_run_body(I, c, e, out);
        I->effect_replay = replay->prev;
        /* (it makes them again in order before it reaches that if) */
        if (!rc && replay->next < replay->n) {
            value_decref(*out);
            *out = v_nil();
            rc = raise_at(I, call_loc, "internal error: staged function '%s', run again eagerly, made %d of the "
                          "%d effects its trace made", c->name, replay->next, replay->n);
        }
        effect_replay_free(replay);
        return rc;
    }
    if (rc) {
        value_decref(ret);
        graph_decref(T->g);
        trace_end(T);
        free(relaxed);
        values_free(args, info->nparams);
        return -1;
    }
    int one_shot = T->failed ? 0 : trace_alias_specialized(T);
    if (one_shot) {
        /* the trace holds this call's tensors where eager code's identity
         * changes from call to call (stage/trace_alias.c), or read values
         * that vary from call to call (stage/trace_cf.c): this call's
         * result is eager's; later calls run eagerly (those under a tape
         * outside, for 2) */
        if (!sc->eager_under_tapes || one_shot < sc->eager_under_tapes) sc->eager_under_tapes = one_shot;
        graph_decref(T->g);
        trace_end(T);
        free(relaxed);
        values_free(args, info->nparams);
        *out = ret;
        return 0;
    }
    if (T->failed) {
        /* --stage-all: this function cannot be staged; the call ran eagerly */
        if (!info->stage_failed) {
            info->stage_failed = true;
            fflush(stdout);
            fprintf(stderr, "tfe: --stage-all: %s runs eagerly: %s (%s:%d)\n", c->name, T->fail_msg,
                    T->fail_loc.src ? T->fail_loc.src->name : "?", T->fail_loc.line);
        }
        graph_decref(T->g);
        trace_end(T);
        free(relaxed);
        values_free(args, info->nparams);
        *out = ret;
        return 0;
    }
    Graph *g = T->g;
    Trace *t = xcalloc(1, sizeof *t);
    t->g = g;
    t->sig = *sb;
    *sb = (SigBuf){0};
    t->relaxed = relaxed;
    t->shape_specialised = T->shape_read;
    t->shape_read = T->shape_read;
    if (T->shape_read && !T->read_not_clamp) t->clamp_loc = T->clamp_loc;
    t->makes_vars = T->made_vars;
    t->made_var_loc = T->made_var_loc;
    /* a body that read a shape may have read a @host result's, and a
     * zeros_like of one is a constant of its shape: its dims are then part
     * of what the trace assumed of it (graph_host.c) */
    for (int i = 0; (T->shape_read || T->host_size_used) && i < g->n; i++)
        if (g->nodes[i].kind == G_HOST && g->nodes[i].host) g->nodes[i].host->dims_fixed = true;
    t->desc = xstrdup(desc);
    for (int i = 0; i < info->nparams; i++) sig_hold(args[i], &t->held, &t->nheld);
    /* outputs: the result's leaves, then each assigned outside binding's */
    Leaves rl = {0};
    SigBuf rs = {0};
    sig_flatten(ret, &rs, &rl, SIG_OUTPUT);
    sig_free(&rs);
    t->nret = rl.n;
    /* templates are copies of the containers as they are now (the caller
     * may change an argument it gets back, the body a list it stored) */
    SigMemo snap = {0};
    t->ret_tmpl = sig_copy_shared(ret, &snap);
    t->nouts = T->nouts;
    t->outs = xcalloc((size_t)(T->nouts ? T->nouts : 1), sizeof *t->outs);
    /* outside signatures as a call will compute them: after the arguments'
     * leaves (so a tensor that is also an argument is seen as the same one) */
    SigBuf argsig = {0};
    Leaves argleaves = {0};
    for (int i = 0; i < info->nparams; i++) sig_flatten(args[i], &argsig, &argleaves, SIG_INPUT);
    sig_free(&argsig);
    for (int i = 0; i < T->nouts; i++) {
        Outside *o = &T->outs[i];
        OutsideSig *os = &t->outs[i];
        os->env = o->env;
        o->env->h.refcount++;
        os->slot = o->slot;
        sig_flatten(o->orig, &os->sig, &argleaves, SIG_INPUT);
        sig_hold(o->orig, &t->held, &t->nheld);
        os->ninputs = o->ninputs;
        /* one stored before a @host call and not assigned since is where
         * it belongs (the host function may have changed it since) */
        os->written = o->written && o->dirty;
        os->assigned = o->written;
        os->tmpl = v_nil();
        if (os->written) {
            os->tmpl = sig_copy_shared(o->traced, &snap);
            SigBuf ws = {0};
            sig_flatten(o->traced, &ws, &rl, SIG_OUTPUT);
            sig_free(&ws);
        }
    }
    leaves_free(&argleaves);
    /* outputs that are one tensor in eager code: the same tensor as an
     * earlier output, or an input's own tensor (an argument or outside
     * binding passed straight through), at trace time, when the body runs
     * on real tensors. A graph run hands each out as its own tensor (the
     * tape entry of a call under a tape knows them apart), so run_trace
     * gives the caller the one tensor again: a tape after the call adds
     * the uses of every place to one sum, as eagerly. (By trace-time
     * identity, not run-time: the optimizer merges duplicate nodes that
     * eager code computes as two tensors.) */
    for (int i = 0; i < rl.n; i++) {
        const TNote *nt = rl.t[i]->node;
        int same = -1;
        for (int j = 0; j < i && same == -1; j++)
            if (rl.t[j] == rl.t[i]) same = j;
        if (same == -1 && nt && nt->input && gnode(g, nt->ref.node)->kind == G_INPUT)
            same = -2 - gnode(g, nt->ref.node)->input_index;
        if (same == -1) continue;
        if (!t->same_out) {
            t->same_out = xmalloc(sizeof *t->same_out * (size_t)rl.n);
            for (int j = 0; j < rl.n; j++) t->same_out[j] = -1;
        }
        t->same_out[i] = same;
    }
    t->nkeep = rl.n;
    for (int i = 0; i < rl.n; i++) {
        if (!rl.t[i]->grad_for) continue;
        if (!t->grad_for) t->grad_for = xcalloc((size_t)rl.n, sizeof *t->grad_for);
        t->grad_for[i] = rl.t[i]->grad_for;
    }
    /* results that are, in this (tracing) run, an input a traced if or loop
     * handed on unchanged (a branch that ends `r = y` ran, a loop ran zero
     * times: TNote.passed): eager code's result is the input itself, so
     * this call hands it out (cached calls: Trace.pass_ok) */
    tfe_tensor **passed_t = NULL;
    for (int i = 0; i < rl.n; i++) {
        const TNote *nt = rl.t[i]->node;
        int j = t->same_out ? t->same_out[i] : -1;
        if (j >= 0 && passed_t && passed_t[j]) { /* (one tensor in both places) */
            tensor_incref(passed_t[j]);
            passed_t[i] = passed_t[j];
            continue;
        }
        if (!nt || nt->passed < 0 || nt->passed >= g->ninputs || j != -1) continue;
        int slot = gnode(g, g->inputs[nt->passed])->vbase;
        tfe_tensor *in = slot < T->capconcrete ? T->concrete[slot] : NULL;
        if (!in) continue;
        if (!passed_t) passed_t = xcalloc((size_t)rl.n, sizeof *passed_t);
        tensor_incref(in);
        passed_t[i] = in;
    }
    /* the arguments' copies in the templates: what stands for the call's
     * own argument objects there */
    {
        Value *cs = NULL;
        int nc = 0;
        for (int i = 0; i < info->nparams; i++) containers_of(args[i], &cs, &nc);
        t->arg_objs = xcalloc((size_t)(nc ? nc : 1), sizeof *t->arg_objs);
        t->narg_objs = nc;
        t->nparams = info->nparams;
        for (int j = 0; j < nc; j++) {
            /* (a fresh default list or record the body may have changed: the
             * result holds its copy in the template, rebuilt) */
            bool fresh = (cs[j].kind == V_LIST && ((Seq *)cs[j].u.o)->trace_id == TRACE_ID_FRESH) ||
                         (cs[j].kind == V_RECORD && ((Record *)cs[j].u.o)->trace_id == TRACE_ID_FRESH);
            const Value *cp = fresh ? NULL : sig_memo_find(&snap, cs[j].u.o);
            t->arg_objs[j] = cp ? *cp : v_nil();
            value_incref(t->arg_objs[j]);
        }
        free(cs);
    }
    sig_memo_free(&snap);
    GRegion *top = &g->regions[0];
    top->nouts = rl.n;
    top->outs = xcalloc((size_t)(rl.n ? rl.n : 1), sizeof *top->outs);
    T->region = 0;
    for (int i = 0; i < rl.n; i++) g->regions[0].outs[i] = trace_ref(T, rl.t[i]);
    /* results whose number-or-tensor kind the way an if or loop went
     * decides (TNote.run_kind): at every run (Trace.krules), and in this
     * call by the way the tracing run went (want_now) */
    signed char *want_now = NULL;
    const TNote **knotes = NULL; /* (krule_add) */
    for (int i = 0; i < rl.n; i++) {
        const TNote *nt = rl.t[i]->node;
        if (!nt || !nt->run_kind[0]) continue;
        if (!t->kroot) {
            t->kroot = xmalloc(sizeof *t->kroot * (size_t)rl.n);
            for (int j = 0; j < rl.n; j++) t->kroot[j] = -1;
            want_now = xcalloc((size_t)rl.n, 1);
        }
        t->kroot[i] = krule_add(t, nt, &knotes, 0);
        want_now[i] = krule_now(T, t, nt, knotes, 0);
    }
    free(knotes);
    t->g_ninputs = g->ninputs;
    for (int i = 0; i < g->ninputs; i++) {
        if (!T->static_in || !T->static_in[i]) continue;
        if (!t->static_val) t->static_val = xcalloc((size_t)g->ninputs, sizeof *t->static_val);
        GNode *in = gnode(g, g->inputs[i]);
        tfe_tensor *cv = in->vbase < T->capconcrete ? T->concrete[in->vbase] : NULL;
        if (cv) {
            T->suspended++;
            t->static_val[i] = tensor_copy(cv);
            T->suspended--;
        }
    }
    for (int i = 0; i < T->nouts; i++)
        label_inputs(g, T->outs[i].name, T->outs[i].first_input, T->outs[i].ninputs, " (outside)");
    trace_prune_kept(T);
    /* a number made from tensors with no tape recording (a 0-d result of
     * ops on constants, value_from_tensor_take) would be a tensor under a
     * tape, and the other way round: the trace is for this state only */
    bool op_number = holds_op_number(ret);
    for (int i = 0; i < T->nouts && !op_number; i++)
        if (t->outs[i].assigned) op_number = holds_op_number(t->outs[i].env->slots[t->outs[i].slot]);
    t->tapes_key = op_number ? tfe_tapes_active > 0 : -1;
    /* numbers eager code would hold unboxed (arithmetic on numbers) are
     * numbers in the result and the bindings written back, this call's and
     * every graph run's (sig.c's rebuild), tape or not: a tape that watches
     * a copy of one must not see the tensor the next call reads */
    ret = trace_unbox_numbers(ret);
    t->ret_tmpl = trace_unbox_numbers(t->ret_tmpl);
    for (int i = 0; i < T->nouts; i++) {
        if (!t->outs[i].assigned) continue;
        t->outs[i].tmpl = trace_unbox_numbers(t->outs[i].tmpl);
        Value *slot = &t->outs[i].env->slots[t->outs[i].slot];
        *slot = trace_unbox_numbers(*slot);
    }
    trace_end(T);
    graph_compact(g); /* what failed attempts at conds and loops left behind */
    /* Relaxation is sound only when the size was never made into something:
     * this trace (for the new sizes) must be the trace it relaxes (for the
     * old ones) but for dims. sum(ones_like(x)) folds x's size into a
     * constant, a gradient's seed has x's shape: then this trace keeps its
     * sizes, and neither trace relaxes again. */
    if (relaxed) {
        const Graph *bg = base->g->raw ? base->g->raw : base->g;
        /* (a shape read, or a slice bound clamped to this size, at the new sizes) */
        if (t->shape_read || !graph_same_but_dims(g, bg)) {
            free(relaxed);
            relaxed = t->relaxed = NULL;
            t->shape_specialised = base->shape_specialised = true;
        }
    }
    /* a relaxed trace: its inputs' unknown dims print as '?' */
    for (int i = 0, d = 0; relaxed && i < g->ninputs; i++) {
        tfe_meta *m = &gnode(g, g->inputs[i])->meta[0];
        for (int k = 0; k < m->rank && d < t->sig.nd; k++, d++)
            if (relaxed[d]) m->shape[k] = -1;
    }
    if (relaxed) relax_metas(g);
    optimize_trace(g, t->static_val);
    mark_pass_ok(t);
    /* assigned outside bindings hold what a graph run would write back
     * (numbers unboxed), so the next call's signature matches */
    SigMemo memo = {0}; /* one list in two places stays one list */
    {
        Value *cs = NULL;
        int nc = 0;
        for (int i = 0; i < info->nparams; i++) containers_of(args[i], &cs, &nc);
        for (int j = 0; j < nc; j++) sig_memo_add(&memo, cs[j].u.o, cs[j]);
        free(cs);
    }
    for (int i = 0; i < t->nouts; i++) {
        OutsideSig *o = &t->outs[i];
        if (!o->assigned) continue;
        SigBuf ws = {0};
        Leaves wl = {0};
        sig_flatten(o->env->slots[o->slot], &ws, &wl, SIG_OUTPUT);
        signed char *wantw = want_now ? xcalloc((size_t)wl.n + 1, 1) : NULL;
        for (int m = 0; wantw && m < wl.n; m++)
            for (int j = 0; j < rl.n; j++)
                if (wl.t[m] == rl.t[j]) {
                    wantw[m] = want_now[j];
                    break;
                }
        /* (an input an if or loop handed on, as in the result below) */
        for (int m = 0; passed_t && m < wl.n; m++)
            for (int j = 0; j < rl.n; j++)
                if (passed_t[j] && wl.t[m] == rl.t[j]) {
                    tensor_incref(passed_t[j]);
                    tensor_decref(wl.t[m]);
                    wl.t[m] = passed_t[j];
                    break;
                }
        int kk = 0;
        Value v = rebuild_kinds(o->env->slots[o->slot], wl.t, &kk, &memo, wantw, wl.n);
        free(wantw);
        Value old = o->env->slots[o->slot];
        o->env->slots[o->slot] = v;
        value_decref(old);
        leaves_free(&wl);
        sig_free(&ws);
    }
    /* this call's result: what the traced (eager) run computed */
    for (int i = 0; passed_t && i < rl.n; i++)
        if (passed_t[i]) {
            tensor_decref(rl.t[i]);
            rl.t[i] = passed_t[i]; /* (the reference moves) */
        }
    free(passed_t);
    int k = 0;
    *out = rebuild_kinds(ret, rl.t, &k, &memo, want_now, rl.n);
    free(want_now);
    sig_memo_free(&memo);
    values_free(args, info->nparams);
    value_decref(ret);
    leaves_free(&rl);
    if (sc->n == sc->cap) {
        sc->cap = sc->cap ? sc->cap * 2 : 4;
        sc->traces = xrealloc(sc->traces, sizeof *sc->traces * (size_t)sc->cap);
    }
    /* the newest first: a relaxed trace is found before the ones it covers */
    mem_move(sc->traces + 1, sc->traces, sizeof *sc->traces * (size_t)sc->n);
    sc->traces[0] = t;
    sc->last = t;
    sc->n++;
    sc->ntraced++;
    note_site(sc, call_loc, desc);
    if (sc->ntraced > 5 && !sc->warned) {
        sc->warned = true;
        retrace_warning(I, c, sc, sc->n > 1 ? sc->traces[1]->desc : "", desc);
    }
    return 0;
}

/* --- the call ---------------------------------------------------------------------------------- */

/* The profiler's name of a staged call: "f (trace)" or "f (cached)". */
static __attribute__((noinline)) const char *staged_event_name(const char *fname, bool trace)
{
    char b[300];
    snprintf(b, sizeof b, "%s (%s)", fname, trace ? "trace" : "cached");
    return prof_intern(b);
}

/* Why a call traces: its first call, or what differs from the trace the
 * previous call used (the arguments as the retrace warning names them). */
static __attribute__((noinline)) void trace_reason(Closure *c, Env *e, StageCache *sc, bool relaxed, char *buf, size_t cap)
{
    if (!sc->ntraced) {
        snprintf(buf, cap, "first call");
        return;
    }
    char now[1000];
    describe_args(c, e, now, sizeof now);
    const Trace *prev = sc->last ? sc->last : sc->n ? sc->traces[0] : NULL;
    const char *p = prev ? prev->desc : NULL, *q = now;
    FnInfo *info = c->fn->info;
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < info->nparams && p && q && n + 1 < cap; i++) {
        const char *pe = strchr(p, '\n'), *qe = strchr(q, '\n');
        int pl = pe ? (int)(pe - p) : (int)strlen(p), ql = qe ? (int)(qe - q) : (int)strlen(q);
        if (pl != ql || strncmp(p, q, (size_t)pl))
            n += (size_t)snprintf(buf + n, cap - n, "%s%s: %.*s -> %.*s", n ? ", " : "", info->param_names[i], pl, p,
                                  ql, q);
        p = pe ? pe + 1 : NULL;
        q = qe ? qe + 1 : NULL;
    }
    if (!n) n = (size_t)snprintf(buf, cap, "same arguments: a value read at trace time or an outside binding changed");
    if (relaxed && n + 1 < cap) snprintf(buf + n, cap - n, " (relaxed)");
}

/* TFE_TEST_STAGED_VARS_PERSIST=1, for tests/check_staged only: the cached
 * calls of a trace that made variables run its graph, on the variables it
 * made (as before this was fixed), a real difference from eager code for
 * the differential check's own tests to report. Never for programs. */
static bool vars_persist_for_tests(void)
{
    static int on = -1;
    if (on < 0) {
        const char *s = getenv("TFE_TEST_STAGED_VARS_PERSIST");
        on = s && *s && strcmp(s, "0") != 0;
    }
    return on > 0;
}

/* TFE_DEBUG=1: once per function, why its calls after the trace run eagerly. */
static __attribute__((noinline)) void vars_note(Closure *c, Trace *t)
{
    cache_of(c)->noted_vars = true;
    fflush(stdout);
    fprintf(stderr, "tfe debug: %s runs eagerly after the trace that made a variable (%s:%d): eager code makes "
            "new ones at every call (make them outside the staged function, or once behind `if v == nil`, to "
            "stage it)\n", c->name, t->made_var_loc.src ? t->made_var_loc.src->name : "?", t->made_var_loc.line);
    fflush(stderr);
}

/* A call that traces, with the profiler's and TFE_DEBUG=1's record of why.
 * A function of its own, never inlined: its reason buffer must not sit in
 * stage_call's frame, which recursion through staged functions stacks up
 * once per level (err_recursion and fn_recursion_deep under ASan). */
static __attribute__((noinline)) int trace_call(Interp *I, Closure *c, Env *e, StageCache *sc, const SigBuf *sb,
                                                Loc call_loc, bool norelax, Value *out)
{
    int rc;
    SigBuf own = {0}; /* the new trace keeps its signature */
    sig_copy(&own, sb);
    Trace *base = NULL;
    bool *relaxed = norelax ? NULL : relax_against(sc, &own, &base);
    /* the profiler and TFE_DEBUG=1: why it traces, and how long that took */
    bool seen = prof_recording || prof_debug >= 1;
    char reason[1200];
    int ntrace = sc->ntraced + 1;
    if (seen) trace_reason(c, e, sc, relaxed != NULL, reason, sizeof reason);
    int64_t pt0 = seen ? prof_now() : 0;
    rc = trace_new(I, c, e, &own, relaxed, base, call_loc, out);
    if (seen && !rc) {
        if (prof_recording) prof_complete(PROF_STAGED, staged_event_name(c->name, true), pt0, reason, -1, -1);
        if (prof_debug >= 1) {
            char tb[32];
            fflush(stdout);
            fprintf(stderr, "tfe debug: %s %s (trace %d): %s; %s\n", ntrace > 1 ? "retrace" : "trace", c->name,
                    ntrace, reason, prof_debug_time(prof_ns(prof_now() - pt0), tb, sizeof tb));
            fflush(stderr);
        }
    }
    sig_free(&own);
    return rc;
}

/* --- a @host call that returned another kind than traced ----------------------------------- */

static void host_redo_drop(Interp *I)
{
    value_decref(I->host_redo.f);
    value_decref(I->host_redo.result);
    I->host_redo.f = I->host_redo.result = v_nil();
    I->host_redo.pending = I->host_redo.armed = false;
}

/* Is t's graph's first effect a call of f (its code) that returned a value
 * of r's kind (host_kind_same) when t was traced? */
static bool first_host_is(const Trace *t, Value f, Value r)
{
    int id = stage_first_effect(t->g);
    if (id < 0) return false;
    const GNode *n = &t->g->nodes[id];
    return n->kind == G_HOST && n->host->obj.kind == V_FN && !(n->host->sync && n->host->sync->env) &&
           ((Closure *)n->host->obj.u.o)->fn == ((Closure *)f.u.o)->fn && host_kind_same(n, r);
}

/* The graph of the call (tried) stopped at its first effect, a @host call
 * that returned another kind of value (nil, a tensor) than when traced
 * (graph_host.c): nothing has changed yet, so the call goes on with a trace
 * of the same signature made for that kind, or traces again; either way the
 * function is not called again (host_redo.armed: its call gets the result;
 * under the check, the eager run's calls are replayed from the first). */
int stage_host_redo(Interp *I, Closure *c, Env *e, Trace *tried, Loc call_loc, Value *out)
{
    StageCache *sc = cache_of(c);
    error_clear(I);
    I->host_redo.pending = false;
    FnInfo *info = c->fn->info;
    SigBuf sb = {0}, scratch = {0};
    Leaves lv = {0};
    for (int i = 0; i < info->nparams; i++) sig_flatten(e->slots[i], &sb, &lv, SIG_INPUT);
    Trace *alt = NULL;
    for (int i = 0; i < sc->n && !alt; i++) {
        Trace *t = sc->traces[i];
        /* (not one that made variables: that call runs eagerly, and this one
         * traces again, making its own as eager code would) */
        if (t != tried && !t->makes_vars && first_host_is(t, I->host_redo.f, I->host_redo.result) && trace_matches(t, &sb, &lv, &scratch)) alt = t;
    }
    if (I->check_replay) host_redo_drop(I);
    else I->host_redo.armed = true;
    int rc;
    if (alt) {
        sc->last = alt;
        rc = run_trace(I, alt, &lv, out);
    } else {
        /* not relaxed: this trace is for the kind, not for other sizes */
        rc = trace_call(I, c, e, sc, &sb, call_loc, true, out);
    }
    if (I->host_redo.armed) host_redo_drop(I); /* (a trace that did not call it again) */
    sig_free(&sb);
    sig_free(&scratch);
    leaves_free(&lv);
    return rc;
}

/* A relaxed graph failed for this call's sizes: a slice bound that holds at
 * the traced sizes is out of range at these (Python clamps it), or an index
 * is out of range. With no effect run yet, the call traces for its own sizes
 * instead, as eager would run it: its result, or eager's error. */
/* A cached call's graph failed (an index out of range, an assert, an
 * integer division by zero) after the body assigned an outside binding:
 * eager code keeps the values assigned before the error, and a REPL or a
 * notebook goes on with them, where the graph's write-back never ran. Where
 * the graph has no collective and ran no host node before it failed but
 * print and assert calls, variable assigns and @host calls that got no
 * list or record (where the body reads none from outside), the call runs
 * again eagerly from the random state, outside bindings and variables it
 * began with, the prints and @host calls replayed rather than made twice
 * (a replayed call puts the state as it left it) and the assigns made
 * again: that assigns what eager code assigns and raises eager's error
 * (docs/staging.md, section 14). */
/* Does g (its regions too: they share the node array) call a @host function? */
static bool graph_calls_host_fn(const Graph *g)
{
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].kind == G_HOST && g->nodes[i].host->obj.kind == V_FN) return true;
    return false;
}

static bool stage_error_redo_ok(Trace *t)
{
    /* (asked at every cached call: the answer is kept) */
    if (t->error_redo) return t->error_redo > 0;
    t->error_redo = -1;
    bool writes = false;
    for (int i = 0; i < t->nouts && !writes; i++) writes = t->outs[i].written;
    if (!writes) return false;
    bool state = false;
    for (int i = 0; i < t->g->n; i++) {
        const GNode *m = &t->g->nodes[i];
        if (m->kind == G_OP && (tfe_ops[m->op].flags & F_COLLECTIVE)) return false;
        state |= m->kind == G_HOST && (m->host->obj.kind == V_FN ||
                                       (m->host->obj.kind == V_BUILTIN && value_is_variable(((Builtin *)m->host->obj.u.o)->self)));
    }
    t->error_redo = state ? 2 : 1;
    return true;
}

/* Does v hold a list or record (depth-bounded: a cycle)? */
static bool holds_container(Value v, int depth)
{
    if (v.kind == V_LIST || v.kind == V_RECORD) return true;
    if (v.kind != V_TUPLE || depth > 8) return false;
    const Seq *q = (const Seq *)v.u.o;
    for (int i = 0; i < q->n; i++)
        if (holds_container(q->items[i], depth + 1)) return true;
    return false;
}

/* The log of a cached call of t whose graph has @host calls or variable
 * assigns, for a run again if it fails: the state before the call, which
 * the run again starts from; a @host call is replayed (not made again)
 * only where the body reads no list or record from outside or as an
 * argument (the function may have changed one in place, which the run
 * again would see before the call). */
static EffectReplay *error_redo_log(Closure *c, Env *e, Trace *t)
{
    EffectReplay *log = xcalloc(1, sizeof *log);
    log->outer = c->env;
    log->g = t->g;
    effect_state_take(log, &log->pre);
    log->host_ok = true;
    for (int i = 0; i < t->nouts && log->host_ok; i++)
        log->host_ok = !holds_container(t->outs[i].env->slots[t->outs[i].slot], 0);
    for (int i = 0; i < ((FnInfo *)c->fn->info)->nparams && log->host_ok; i++) log->host_ok = !holds_container(e->slots[i], 0);
    return log;
}

static int stage_error_redo(Interp *I, Closure *c, Env *e, uint64_t rkey, uint64_t rctr, EffectReplay *log, Value *out)
{
    error_clear(I);
    tfe_random_restore(rkey, rctr);
    if (!log) return interp_run_body(I, c, e, out);
    /* from the outside bindings and variables as they were before the call
     * (a @host call it replays puts them as they were after it) */
    effect_state_put(&log->pre);
    log->next = 0;
    log->prev = I->effect_replay;
    I->effect_replay = log;
    int rc = interp_run_body(I, c, e, out);
    I->effect_replay = log->prev;
    return rc;
}

bool stage_relaxed_redo_ok(const Trace *t)
{
    if (!t->relaxed || stage_first_effect(t->g) >= 0) return false;
    for (int i = 0; i < t->nouts; i++)
        if (t->outs[i].assigned) return false;
    return true;
}

int stage_relaxed_redo(Interp *I, Closure *c, Env *e, Loc call_loc, Value *out)
{
    error_clear(I);
    FnInfo *info = c->fn->info;
    SigBuf sb = {0};
    Leaves lv = {0};
    for (int i = 0; i < info->nparams; i++) sig_flatten(e->slots[i], &sb, &lv, SIG_INPUT);
    int rc = trace_call(I, c, e, cache_of(c), &sb, call_loc, true, out);
    sig_free(&sb);
    leaves_free(&lv);
    return rc;
}

/* A relaxed graph stopped at a slice that did not fit this call's sizes,
 * which could not be seen before the run (stage/relax_fit.c: the shape it
 * slices came from a @host call or a loop), after an effect ran: a located
 * limit that says how to write it (docs/staging.md, section 14). */
/* stage_relaxed_fits, asked once for the dims of a run of calls (a
 * training loop's batches): the last dims that fitted are kept. */
static bool relaxed_fits_memo(Trace *t, const SigBuf *sb, tfe_tensor *const *inputs)
{
    if (t->fit_dims && t->nfit_dims == sb->nd && !mem_cmp(t->fit_dims, sb->dims, sizeof *sb->dims * (size_t)sb->nd))
        return true;
    if (!stage_relaxed_fits(t, inputs)) return false;
    free(t->fit_dims);
    t->fit_dims = xmalloc(sizeof *t->fit_dims * (size_t)(sb->nd + 1));
    mem_copy(t->fit_dims, sb->dims, sizeof *sb->dims * (size_t)sb->nd);
    t->nfit_dims = sb->nd;
    return true;
}

void stage_relaxed_slice_limit(Interp *I)
{
    if (!I->has_error || !I->err_msg || strncmp(I->err_msg, "slice: index ", 13)) return;
    char msg[1400];
    snprintf(msg, sizeof msg,
             "%s, in a graph traced for other sizes, which cannot trace again for these sizes as an effect "
             "before the slice already ran (eager code clamps a slice bound past the end): slice what the "
             "function's arguments give rather than a @host call's result or a loop's carried value, or "
             "call it with sizes the slice fits",
             I->err_msg);
    free(I->err_msg);
    I->err_msg = xstrdup(msg);
    I->stage_limit = true;
}

int stage_call(Interp *I, Closure *c, Env *e, Loc call_loc, Value *out)
{
    FnInfo *info = c->fn->info;
    /* eagerly: --eager, run_eagerly(true), a function --stage-all gave up
     * on, and staged calls inside a trace (inlined into the caller's graph) */
    if (I->opt.eager || I->run_eagerly || (info->stage_failed && !c->stage_by_call) || I->tracer)
        return interp_run_body(I, c, e, out);
    StageCache *sc = cache_of(c);
    /* Matching uses buffers kept from call to call: a call made while this
     * one runs its graph (a host callback) starts after matching is done. */
    static SigBuf sb, scratch;
    sig_reset(&sb);
    LEAVES_ON_STACK(lv, lvbuf);
    for (int i = 0; i < info->nparams; i++) {
        sig_flatten(e->slots[i], &sb, &lv, SIG_INPUT);
        if (sb.too_deep) { /* the walks over an argument's leaves would never end */
            sb.too_deep = false;
            leaves_free(&lv);
            /* --stage-all: this call runs eagerly, as eager code would */
            if (info->stage_implicit && !c->stage_by_call) return interp_run_body(I, c, e, out);
            return interp_raise(I, "%s: argument '%s' nests lists or records more than %d deep (one that contains "
                                   "itself?); a staged function's arguments are trees: pass the parts it reads",
                                c->name, info->param_names[i], SIG_MAX_DEPTH);
        }
    }
    int rc;
    Trace *hit = NULL;
    for (int i = 0; i < sc->n && !hit; i++)
        if (trace_matches(sc->traces[i], &sb, &lv, &scratch)) hit = sc->traces[i];
    /* a relaxed trace whose slices would stop at this call's sizes (eager
     * code clamps the bound, or raises for an index): the call traces for
     * its sizes before anything ran, so it gets eager's result or error */
    bool unfit = hit && hit->relaxed && !relaxed_fits_memo(hit, &sb, lv.t);
    /* a higher order through a graph whose backward would replay values
     * eager code shares with the forward: eagerly, bit for bit (stage/grad.c) */
    /* a trace that made variables: eager code makes new ones at every call,
     * the graph would use the ones it made when it traced; eagerly, so each
     * call makes its own (docs/staging.md, section 8) */
    if (hit && !unfit && hit->makes_vars && !vars_persist_for_tests()) {
        sc->hits++;
        leaves_free(&lv);
        if (prof_debug >= 1 && !sc->noted_vars) vars_note(c, hit);
        return interp_run_body(I, c, e, out);
    }
    if ((hit && !unfit && stage_grad_runs_eagerly(I, hit->g)) ||
        (sc->eager_under_tapes &&
         (sc->eager_under_tapes == 1 || (tfe_tapes_active && tfe_tapes_recording() >= sc->eager_under_tapes - 1)))) {
        if (hit) sc->hits++;
        leaves_free(&lv);
        return interp_run_body(I, c, e, out);
    }
    if (hit && !unfit) {
        sc->hits++;
        sc->last = hit;
        const Value *saved_args = I->stage_call_args;
        I->stage_call_args = e->slots;
        int64_t pt0 = prof_recording ? prof_now() : 0;
        /* TFE_CHECK_STAGED: also eagerly, and compared (stage/check.c);
         * not a call under a recording tape whose graph calls a @host
         * function: the check replays the eager run's host calls, so the
         * graph run could not note what they read for the call's backward
         * (stage/host_reads.h), and that gradient would be lost */
        if (stage_check_on(I) && !(tfe_tapes_active && tfe_tapes_recording() > 0 && graph_calls_host_fn(hit->g))) {
            rc = stage_check_call(I, c, e, hit, &lv, call_loc, run_trace, out);
        } else {
            bool ok = I->host_redo.ok;
            I->host_redo.ok = true;
            uint64_t rkey, rctr;
            tfe_random_state(&rkey, &rctr);
            /* (noting its prints for a run again if it fails: stage_error_redo) */
            bool redo_ok = stage_error_redo_ok(hit), log_on = I->graph_log_on, log_bad = I->graph_log_bad;
            EffectReplay *log_saved = I->graph_log;
            I->graph_log = redo_ok && hit->error_redo == 2 ? error_redo_log(c, e, hit) : NULL;
            I->graph_log_on = redo_ok;
            I->graph_log_bad = false;
            rc = run_trace(I, hit, &lv, out);
            EffectReplay *log = I->graph_log;
            bool bad = I->graph_log_bad;
            I->graph_log = log_saved;
            I->graph_log_on = log_on;
            I->graph_log_bad = log_bad;
            I->host_redo.ok = ok;
            if (I->host_redo.pending) rc = rc ? stage_host_redo(I, c, e, hit, call_loc, out) : (host_redo_drop(I), rc);
            else if (rc && stage_relaxed_redo_ok(hit)) rc = stage_relaxed_redo(I, c, e, call_loc, out);
            /* (not after an interrupt: the user stopped the call) */
            else if (rc && redo_ok && !bad && !(I->err_msg && !strcmp(I->err_msg, "interrupted")))
                rc = stage_error_redo(I, c, e, rkey, rctr, log, out);
            else if (rc && hit->relaxed) stage_relaxed_slice_limit(I);
            effect_replay_free(log);
        }
        if (pt0 && !rc) prof_complete(PROF_STAGED, staged_event_name(c->name, false), pt0, NULL, -1, -1);
        I->stage_call_args = saved_args;
    } else {
        rc = trace_call(I, c, e, sc, &sb, call_loc, unfit, out);
    }
    leaves_free(&lv);
    return rc;
}

Trace *stage_find(Closure *c, int argc, const Value *argv)
{
    FnInfo *info = c->fn->info;
    StageCache *sc = c->stage;
    if (!sc || argc != info->nparams) return NULL;
    SigBuf sb = {0}, scratch = {0};
    Leaves lv = {0};
    for (int i = 0; i < argc; i++) sig_flatten(argv[i], &sb, &lv, SIG_INPUT);
    Trace *hit = NULL;
    for (int i = 0; i < sc->n && !hit; i++)
        if (trace_matches(sc->traces[i], &sb, &lv, &scratch)) hit = sc->traces[i];
    sig_free(&sb);
    sig_free(&scratch);
    leaves_free(&lv);
    return hit;
}

Trace *stage_last_trace(Closure *c)
{
    StageCache *sc = c->stage;
    if (!sc || !sc->n) return NULL;
    return sc->last ? sc->last : sc->traces[0];
}

/* --- builtins ------------------------------------------------------------------------------------ */

static Closure *staged_arg(Interp *I, const char *fname, int argc, const Value *argv)
{
    if (argc < 1 || argv[0].kind != V_FN) {
        interp_raise(I, "%s() needs a function, got %s", fname, argc ? value_kind_name(argv[0]) : "nothing");
        return NULL;
    }
    return (Closure *)argv[0].u.o;
}

BUILTIN(bi_trace_count)
{
    (void)data;
    (void)kwnames;
    (void)kwvals;
    if (argc != 1 || nkw) return interp_raise(I, "trace_count() takes 1 argument");
    Closure *c = staged_arg(I, "trace_count", argc, argv);
    if (!c) return -1;
    *out = v_int(c->stage ? c->stage->ntraced : 0);
    return 0;
}

BUILTIN(bi_run_eagerly)
{
    (void)data;
    (void)kwnames;
    (void)kwvals;
    if (argc > 1 || nkw) return interp_raise(I, "run_eagerly() takes 0 or 1 argument");
    bool old = I->run_eagerly || I->opt.eager;
    if (argc == 1) {
        if (argv[0].kind != V_SCALAR || argv[0].dtype != TFE_BOOL)
            return interp_raise(I, "run_eagerly() needs a bool, got %s", value_kind_name(argv[0]));
        I->run_eagerly = argv[0].u.i != 0;
    }
    *out = v_bool(old);
    return 0;
}

/* staged(f) and host(f) as calls (the decorators mark the function itself):
 * a closure over the same code and bindings, marked. */
BUILTIN(bi_mark)
{
    const char *what = data;
    (void)kwnames;
    (void)kwvals;
    if (argc != 1 || nkw) return interp_raise(I, "%s() takes 1 argument", what);
    Closure *c = staged_arg(I, what, argc, argv);
    if (!c) return -1;
    FnInfo *info = c->fn->info;
    bool want_staged = !strcmp(what, "staged");
    if ((want_staged && info->is_staged && !info->stage_implicit) || (!want_staged && info->is_host)) {
        value_incref(argv[0]);
        *out = argv[0];
        return 0;
    }
    Closure *m = closure_new(I, c->fn, c->env, c->prog);
    m->name = c->name;
    if (want_staged) m->stage_forced = m->stage_by_call = true;
    else m->host_forced = true;
    *out = v_obj(V_FN, m);
    return 0;
}

void stage_builtins_register(Interp *I)
{
    stage_graph_host_register(); /* the graph core calls back through it (graph/host.h) */
    interp_define_builtin(I, "trace_count", bi_trace_count, NULL);
    interp_define_builtin(I, "run_eagerly", bi_run_eagerly, NULL);
    interp_define_builtin(I, "staged", bi_mark, (void *)"staged");
    interp_define_builtin(I, "host", bi_mark, (void *)"host");
    stage_graph_builtins_register(I);
    stage_export_builtins_register(I); /* export(f, args...): ONNX (stage/export.c) */
    stage_import_builtins_register(I); /* import_onnx(path) (stage/import.c) */
}
