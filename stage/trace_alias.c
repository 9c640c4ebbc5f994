/* trace_alias.c — late aliases: a tape that begins in a staged function
 * after a traced if or loop that ends a name on a value from before it
 * (`if c { a0 = y }`), or in the body of a loop that does, sees the name's
 * value and that value as two tensors, where eager code, on a path that
 * hands the value on, holds one tensor and adds the gradients of both uses
 * (t.watch(a0) then sum(a0 * y): 2y eagerly, y as traced). The graph cannot
 * decide a tensor's identity from run to run, so such a call runs eagerly
 * instead, as do later calls (docs/staging.md, section 11).
 *
 * A tape made before the if or loop is not concerned: it records the whole
 * if or loop as one entry, whose backward follows the branch that ran (the
 * cond's conditional aliases, tensor/tape.c). What is checked is every
 * pair of float values such a late tape touches (watches, takes a gradient
 * with respect to, or reads in an op while it records): two different
 * values of the graph that can be one tensor at run time (through ifs'
 * branches and loops' start values and bodies) are a conflict. */
#include <stdlib.h>
#include <string.h>
#include "interp/internal.h"
#include "stage/trace.h"
#include "tensor/grad.h"
#include "util/xalloc.h"

/* at: the graph's size then; eager_seen: the call's bindings were made
 * eager's tensors when it began (specialize) */
typedef struct Born { const tfe_tape *tape; int region, at; bool eager_seen; } Born;
/* whole: the tape records the if or loop that made it as one entry;
 * tracked: the tape tracked it at some touch (watched, or made by an op it
 * recorded): a pair of which neither is tracked gives no gradient apart */
/* konst: a constant made at trace time, touched before the graph used it
 * (it has no node yet: ref {-1, 0}; owned): its node is looked up when
 * checked (ref_of), so that a loop's carried value that ends on it later
 * is seen as that constant */
typedef struct Touch { const tfe_tape *tape; GRef ref; tfe_tensor *konst; bool whole, tracked; Loc loc; } Touch;

struct TraceAlias {
    /* a loop whose body was just traced, before its node is made
     * (trace_alias_loop): its regions and its carried values' start */
    int pend_cond, pend_body, pend_n;
    tfe_tensor *const *pend_init;
    /* this call's values bound where eager code holds another tensor, made
     * that tensor when a tape began after effects a run again cannot make
     * (trace_alias_tape_start): the trace is this call's only */
    bool specialized;   /* a binding was made another tensor */
    bool under_tapes;   /* one-shot for a tape outside only (trace_alias_one_shot_under_tapes) */
    bool incomplete;    /* a tape began where that could not be done */
    Born *born;
    int nborn, capborn;
    Touch *t;
    int n, cap;
    int *slots;     /* open addressing over t[] by (tape, ref): each pair once */
    size_t nslots;
};

static TraceAlias *alias_of(Tracer *T)
{
    if (!T->alias) T->alias = xcalloc(1, sizeof *T->alias);
    return T->alias;
}

/* Is region a region r or one nested in it? (0 and -1: the top) */
static bool region_within(const Graph *g, int a, int r)
{
    if (r <= 0) return true;
    for (int depth = 0; a > 0 && a < g->nregions && depth < 1000; depth++, a = g->regions[a].parent)
        if (a == r) return true;
    return false;
}

void trace_alias_free(Tracer *T)
{
    TraceAlias *A = T->alias;
    if (!A) return;
    for (int k = 0; k < A->n; k++)
        if (A->t[k].konst) tensor_decref(A->t[k].konst);
    free(A->born);
    free(A->t);
    free(A->slots);
    free(A);
    T->alias = NULL;
}

/* --- this call's tensors -------------------------------------------------------------- */

static tfe_tensor *concrete_at(const Tracer *T, GRef r)
{
    int s = T->g->nodes[r.node].vbase + r.out;
    return s >= 0 && s < T->capconcrete ? T->concrete[s] : NULL;
}

/* A tape begins after effects that a run of the call again cannot make:
 * each binding of the staged function that holds an if's or loop's
 * result which eager code holds, on this call, as another tensor (a0 = y
 * in the branch that ran) is made that tensor, so that this call's tapes
 * see eager's tensors. The trace is then this call's only
 * (trace_alias_specialized); where a binding could not be told, or the
 * tape begins in another function, a conflict stays an error. */
static void specialize(Tracer *T)
{
    TraceAlias *A = T->alias;
    if (T->I->nframes != T->frame_base) A->incomplete = true;
    Env *e = T->call_env;
    for (int i = 0; e && i < e->nslots; i++) {
        Value v = e->slots[i];
        if (v.kind != V_TENSOR || !v.u.t->node || !dtype_is_float(v.u.t->dtype)) continue;
        /* (the run of the if or loop handed on that value's very tensor:
         * TNote.handed, followed through ifs and loops that hand it on) */
        tfe_tensor *to = v.u.t;
        for (int depth = 0; depth < 64; depth++) {
            const TNote *nt = to->node;
            if (!nt || nt->handed.node == -1) break;
            tfe_tensor *c = nt->handed.node >= 0 ? concrete_at(T, nt->handed) : NULL;
            if (!c) {
                A->incomplete = true;
                break;
            }
            to = c;
        }
        if (to == v.u.t) continue;
        tensor_incref(to);
        e->slots[i] = v_tensor_take(to);
        value_decref(v);
        A->specialized = true;
    }
}

int trace_alias_specialized(const Tracer *T)
{
    if (!T->alias) return 0;
    return T->alias->specialized ? 1 : T->alias->under_tapes ? 2 : 0;
}

void trace_alias_one_shot(Tracer *T) { alias_of(T)->specialized = true; }

void trace_alias_one_shot_under_tapes(Tracer *T) { alias_of(T)->under_tapes = true; }

static void touch_grow(TraceAlias *A);

/* A tape freed and another made at its address: the first one's notes go. */
static void forget_tape(TraceAlias *A, const tfe_tape *tape)
{
    int keep = 0;
    for (int i = 0; i < A->nborn; i++)
        if (A->born[i].tape != tape) A->born[keep++] = A->born[i];
    A->nborn = keep;
    keep = 0;
    for (int k = 0; k < A->n; k++)
        if (A->t[k].tape != tape) A->t[keep++] = A->t[k];
        else if (A->t[k].konst) tensor_decref(A->t[k].konst);
    if (keep == A->n) return;
    A->n = keep;
    A->nslots /= 2; /* (touch_grow doubles it back, placing those kept) */
    touch_grow(A);
}

void trace_alias_tape_start(Tracer *T, const tfe_tape *tape, bool first)
{
    TraceAlias *A = alias_of(T);
    if (first) forget_tape(A, tape);
    for (int i = 0; i < A->nborn; i++)
        if (A->born[i].tape == tape) return; /* (a persistent tape entered again) */
    if (A->nborn == A->capborn) {
        A->capborn = A->capborn ? 2 * A->capborn : 4;
        A->born = xrealloc(A->born, sizeof *A->born * (size_t)A->capborn);
    }
    A->born[A->nborn] = (Born){tape, T->region, T->g->n, false};
    /* (where the call can run eagerly again from its start, a conflict
     * found at the end does that: trace_alias_check) */
    if (!T->symbolic && !trace_nothing_done(T) && !trace_effects_replayable(T)) {
        specialize(T);
        A->born[A->nborn].eager_seen = true;
    }
    A->nborn++;
}

static const Born *born_of(const TraceAlias *A, const tfe_tape *tape)
{
    for (int i = 0; A && i < A->nborn; i++)
        if (A->born[i].tape == tape) return &A->born[i];
    return NULL;
}

static size_t touch_hash(const tfe_tape *tape, GRef r, const tfe_tensor *konst)
{
    size_t h = (size_t)(uintptr_t)tape * 0x9E3779B97F4A7C15u ^ (size_t)(uintptr_t)konst * 0xFF51AFD7ED558CCDu;
    h ^= (size_t)r.node * 0x85EBCA6Bu + (size_t)r.out * 0xC2B2AE35u;
    return h ^ (h >> 29);
}

/* The index of (tape, r, konst) in A->t, or where it goes (-1 - slot). */
static long touch_find(const TraceAlias *A, const tfe_tape *tape, GRef r, const tfe_tensor *konst)
{
    size_t mask = A->nslots - 1, s = touch_hash(tape, r, konst) & mask;
    for (;; s = (s + 1) & mask) {
        int k = A->slots[s];
        if (k < 0) return -1 - (long)s;
        if (A->t[k].tape == tape && A->t[k].ref.node == r.node && A->t[k].ref.out == r.out && A->t[k].konst == konst)
            return k;
    }
}

static void touch_grow(TraceAlias *A)
{
    size_t n = A->nslots ? 2 * A->nslots : 64;
    free(A->slots);
    A->slots = xmalloc(sizeof *A->slots * n);
    for (size_t i = 0; i < n; i++) A->slots[i] = -1;
    A->nslots = n;
    for (int k = 0; k < A->n; k++) {
        long at = touch_find(A, A->t[k].tape, A->t[k].ref, A->t[k].konst);
        A->slots[-1 - at] = k;
    }
}

void trace_alias_touch(Tracer *T, const tfe_tape *tape, const tfe_tensor *x)
{
    if (!T || !x || !dtype_is_float(x->dtype)) return;
    const TNote *note = x->node;
    if (note && (note->ref.node < 0 || note->ref.node >= T->g->n)) return;
    /* (no node: a constant made at trace time, or a tensor from outside the
     * trace that the graph never read) */
    if (!note && !x->storage) return;
    TraceAlias *A = T->alias;
    const Born *b = born_of(A, tape);
    if (!b) return; /* a tape from outside: it records the call as a whole */
    GRef r = note ? note->ref : (GRef){-1, 0};
    tfe_tensor *konst = note ? NULL : (tfe_tensor *)x;
    if (2 * (size_t)(A->n + 1) > A->nslots) touch_grow(A);
    long at = touch_find(A, tape, r, konst);
    bool tracked = tfe_tape_is_watched(tape, x);
    if (at >= 0) {
        A->t[at].tracked |= tracked;
        return;
    }
    const GNode *n = note ? &T->g->nodes[r.node] : NULL;
    /* a value of a branch or loop body the tape began outside of: the
     * tape records that if or loop as one entry; an if's or loop's result
     * the tape recorded so: its entry picks the branch (tensor/tape.c) */
    bool whole = n && (!region_within(T->g, b->region, n->region) ||
                       ((n->kind == G_COND || n->kind == G_WHILE) && tfe_tape_made(tape, x)));
    if (A->n == A->cap) {
        A->cap = A->cap ? 2 * A->cap : 64;
        A->t = xrealloc(A->t, sizeof *A->t * (size_t)A->cap);
    }
    if (konst) tensor_incref(konst);
    A->slots[-1 - at] = A->n;
    A->t[A->n++] = (Touch){tape, r, konst, whole, tracked, T->I->cur_loc};
}

void trace_alias_roll_back(Tracer *T, int nodes)
{
    TraceAlias *A = T->alias;
    if (!A) return;
    int keep = 0;
    for (int i = 0; i < A->nborn; i++)
        if (A->born[i].at < nodes) A->born[keep++] = A->born[i];
    A->nborn = keep;
    keep = 0;
    for (int k = 0; k < A->n; k++)
        if (A->t[k].ref.node < nodes && born_of(A, A->t[k].tape)) A->t[keep++] = A->t[k];
        else if (A->t[k].konst) tensor_decref(A->t[k].konst);
    A->n = keep;
    A->nslots /= 2; /* (touch_grow doubles it back, placing those kept) */
    touch_grow(A);
}

void trace_alias_touch_ins(Tracer *T, int nin, tfe_tensor *const *in)
{
    if (!T->alias || !T->alias->nborn) return;
    const tfe_tape_stack *st = &T->I->tapes;
    for (int k = T->tapes_at_begin; k < st->n; k++)
        for (int i = 0; i < nin; i++) trace_alias_touch(T, st->active[k], in[i]);
}

/* --- the values a value can be at run time ---------------------------------------------- */

enum { ORIGINS_CAP = 64 };
typedef struct Origins {
    GRef r[ORIGINS_CAP];
    int n;
    bool over;
    int seen[ORIGINS_CAP][2]; /* the loops' carried values followed: (loop, index) */
    int nseen;
} Origins;

static void origins_of(const TraceAlias *A, const Graph *g, GRef r, Origins *o, int depth);

/* Carried value p of loop w: its start value, or what the body ends it on
 * (w < 0: the loop being traced, A->pend_*). */
static void carried_origins(const TraceAlias *A, const Graph *g, int w, int p, Origins *o, int depth)
{
    for (int i = 0; i < o->nseen; i++)
        if (o->seen[i][0] == w && o->seen[i][1] == p) return;
    if (o->nseen == ORIGINS_CAP) {
        o->over = true;
        return;
    }
    o->seen[o->nseen][0] = w;
    o->seen[o->nseen++][1] = p;
    const GRegion *body;
    if (w >= 0) {
        const GNode *nd = &g->nodes[w];
        body = &g->regions[nd->regions[1]];
        origins_of(A, g, nd->in[p], o, depth + 1);
    } else {
        body = &g->regions[A->pend_body];
        const tfe_tensor *x = p < A->pend_n ? A->pend_init[p] : NULL;
        const TNote *note = x ? x->node : NULL;
        /* (a constant: a tensor of its own, which no other value is) */
        if (note) origins_of(A, g, note->ref, o, depth + 1);
    }
    if (p < body->nouts) origins_of(A, g, body->outs[p], o, depth + 1);
}

/* The loop whose region holds carried value node, and its index: -1 for
 * the loop being traced; -2: none. */
static int param_loop(const TraceAlias *A, const Graph *g, int node, int *p)
{
    int reg = g->nodes[node].region;
    const GRegion *rg = &g->regions[reg];
    for (int i = 0; i < rg->nparams; i++)
        if (rg->params[i] == node) *p = i;
    if (*p < 0) return -2;
    if (A->pend_n && (reg == A->pend_cond || reg == A->pend_body)) return *p < A->pend_n ? -1 : -2;
    for (int w = 0; w < g->n; w++) {
        const GNode *nd = &g->nodes[w];
        if (nd->kind == G_WHILE && (nd->regions[0] == reg || nd->regions[1] == reg)) return *p < nd->nin ? w : -2;
    }
    return -2;
}

static void origins_of(const TraceAlias *A, const Graph *g, GRef r, Origins *o, int depth)
{
    if (depth > 200) {
        o->over = true;
        return;
    }
    const GNode *nd = &g->nodes[r.node];
    if (nd->kind == G_COND) {
        for (int b = 0; b < 2; b++) {
            const GRegion *reg = &g->regions[nd->regions[b]];
            if (r.out < reg->nouts) origins_of(A, g, reg->outs[r.out], o, depth + 1);
        }
        return;
    }
    if (nd->kind == G_WHILE && r.out < nd->nin) {
        carried_origins(A, g, r.node, r.out, o, depth);
        return;
    }
    int p = -1, w = nd->kind == G_PARAM ? param_loop(A, g, r.node, &p) : -2;
    if (w >= -1) {
        carried_origins(A, g, w, p, o, depth);
        return;
    }
    for (int i = 0; i < o->n; i++)
        if (o->r[i].node == r.node && o->r[i].out == r.out) return;
    if (o->n == ORIGINS_CAP) o->over = true;
    else o->r[o->n++] = r;
}

/* A touch's value: its node, or the node the graph gave its constant since
 * ({-1, 0}: none, a tensor of its own). */
static GRef ref_of(const Tracer *T, const Touch *t)
{
    if (!t->konst) return t->ref;
    const TNote *note = t->konst->node;
    return note && note->ref.node >= 0 && note->ref.node < T->g->n ? note->ref : (GRef){-1, 0};
}

/* --- the check -------------------------------------------------------------------------- */

typedef struct Claim { const tfe_tape *tape; GRef origin; int touch; } Claim;

static int claim_cmp(const void *pa, const void *pb)
{
    const Claim *a = pa, *b = pb;
    if (a->tape != b->tape) return (uintptr_t)a->tape < (uintptr_t)b->tape ? -1 : 1;
    if (a->origin.node != b->origin.node) return a->origin.node < b->origin.node ? -1 : 1;
    if (a->origin.out != b->origin.out) return a->origin.out < b->origin.out ? -1 : 1;
    return a->touch - b->touch;
}

/* The later touch of the first pair found that can be one tensor at run
 * time, or -1; within > 0: of the tapes begun in that region only;
 * unseen: of those that did not see eager's tensors only (specialize);
 * only: of that tape only (NULL: all). */
static int first_conflict(const Tracer *T, int within, bool unseen, const tfe_tape *only)
{
    const TraceAlias *A = T->alias;
    if (!A || A->n < 2) return -1;
    bool any = false; /* (no touched if or loop result, nor carried value: none) */
    for (int k = 0; k < A->n && !any; k++) {
        GRef r = ref_of(T, &A->t[k]);
        GKind kd = r.node >= 0 ? T->g->nodes[r.node].kind : G_CONST;
        any = !A->t[k].whole && (kd == G_COND || kd == G_WHILE || kd == G_PARAM) && (!only || A->t[k].tape == only);
    }
    if (!any) return -1;
    Claim *c = NULL;
    int nc = 0, capc = 0, worst = -1;
    for (int k = 0; k < A->n; k++) {
        const Born *b = born_of(A, A->t[k].tape);
        if ((within > 0 && !region_within(T->g, b->region, within)) || (unseen && b->eager_seen) ||
            (only && A->t[k].tape != only))
            continue;
        GRef r = ref_of(T, &A->t[k]);
        if (r.node < 0) continue;
        Origins o = {.n = 0};
        if (A->t[k].whole) o.r[o.n++] = r;
        else origins_of(A, T->g, r, &o, 0);
        if (o.over && (worst < 0 || k > worst)) worst = k; /* (too many ways to follow: one) */
        if (nc + o.n > capc) {
            capc = 2 * (nc + o.n);
            c = xrealloc(c, sizeof *c * (size_t)capc);
        }
        for (int i = 0; i < o.n; i++) c[nc++] = (Claim){A->t[k].tape, o.r[i], k};
    }
    if (nc) qsort(c, (size_t)nc, sizeof *c, claim_cmp);
    int found = worst;
    /* (each run of claims on one origin by one tape: two touches, one of
     * them tracked; the later of the run's last two) */
    for (int i = 0, e; i < nc; i = e) {
        bool tracked = false, two = false;
        GRef first = ref_of(T, &A->t[c[i].touch]);
        for (e = i; e < nc && c[e].tape == c[i].tape && c[e].origin.node == c[i].origin.node &&
                    c[e].origin.out == c[i].origin.out; e++) {
            tracked |= A->t[c[e].touch].tracked;
            /* (one value touched twice, as a constant and then by its node:
             * one tensor to eager code too) */
            GRef r = ref_of(T, &A->t[c[e].touch]);
            two |= r.node != first.node || r.out != first.out;
        }
        int later = c[e - 1].touch;
        if (two && tracked && (found < 0 || later < found)) found = later;
    }
    free(c);
    return found;
}

bool trace_alias_loop(Tracer *T, int rcond, int rbody, int n, tfe_tensor *const *init)
{
    TraceAlias *A = T->alias;
    if (!A || !A->n) return false;
    A->pend_cond = rcond;
    A->pend_body = rbody;
    A->pend_n = n;
    A->pend_init = init;
    bool found = first_conflict(T, rbody, false, NULL) >= 0 || first_conflict(T, rcond, false, NULL) >= 0;
    A->pend_n = 0;
    A->pend_init = NULL;
    return found;
}

bool trace_alias_branches(Tracer *T, int r0, int r1)
{
    return T->alias && T->alias->n && (first_conflict(T, r0, false, NULL) >= 0 || first_conflict(T, r1, false, NULL) >= 0);
}

static int resolve(Interp *I, Tracer *T, int k);

int trace_alias_now(Interp *I, Tracer *T, const tfe_tape *tape)
{
    if (!T->alias || !T->alias->n) return 0;
    /* (in a branch or loop body traced without values: the attempt fails,
     * and the if or loop runs at trace time, where the tapes see this
     * call's tensors) */
    int k = first_conflict(T, T->symbolic ? T->region : 0, false, tape);
    if (k < 0) return 0;
    if (!T->symbolic) return resolve(I, T, k);
    /* (the if or loop that holds it may not be readable at trace time:
     * the trace serves this call only, as for trace_alias_branches) */
    trace_alias_one_shot(T);
    return trace_fail(I, I->cur_loc, "a tape begun in a branch or loop body uses a value that an if or loop can "
                                     "hand on unchanged together with that value itself");
}

/* Touch k conflicts (first_conflict): the call runs eagerly again, or its
 * trace serves it only, or a located error. */
static int resolve(Interp *I, Tracer *T, int k)
{
    Loc loc = T->alias->t[k].loc;
    /* the call runs eagerly from its start, as do later ones (ntapes 0) */
    if (trace_nothing_done(T)) return trace_redo_eagerly(I, loc, 0, "(unused)");
    if (trace_effects_replayable(T)) return trace_redo_replaying(I, loc, 0);
    /* (else this call's tapes saw eager's tensors where every tape begun
     * since the effects could be made to: the trace is this call's only,
     * and later calls run eagerly: stage/staged.c) */
    if (!T->alias->incomplete && first_conflict(T, 0, true, NULL) < 0) {
        T->alias->specialized = true;
        return 0;
    }
    return raise_at(I, loc, "a tape made in this staged function after a traced if or loop (or in a loop's "
                            "body) uses a value that the if or loop can hand on unchanged (a0 = y in a branch) "
                            "together with that value itself: eager code holds one tensor there and adds the "
                            "gradients of both uses, which a graph cannot follow from call to call; the call "
                            "would run eagerly, but an effect made before it cannot be made again; make the "
                            "tape before the if or loop, or bind a tensor of its own after it (a0 = a0 * 1.0)");
}

int trace_alias_check(Interp *I, Tracer *T)
{
    int k = first_conflict(T, 0, false, NULL);
    return k < 0 ? 0 : resolve(I, T, k);
}
