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

typedef struct Born { const tfe_tape *tape; int region; } Born;
typedef struct Touch { const tfe_tape *tape; GRef ref; bool whole; Loc loc; } Touch;

struct TraceAlias {
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

void trace_alias_free(Tracer *T)
{
    TraceAlias *A = T->alias;
    if (!A) return;
    free(A->born);
    free(A->t);
    free(A->slots);
    free(A);
    T->alias = NULL;
}

void trace_alias_tape_start(Tracer *T, const tfe_tape *tape)
{
    TraceAlias *A = alias_of(T);
    for (int i = 0; i < A->nborn; i++)
        if (A->born[i].tape == tape) return; /* (a persistent tape entered again) */
    if (A->nborn == A->capborn) {
        A->capborn = A->capborn ? 2 * A->capborn : 4;
        A->born = xrealloc(A->born, sizeof *A->born * (size_t)A->capborn);
    }
    A->born[A->nborn++] = (Born){tape, T->region};
}

static const Born *born_of(const TraceAlias *A, const tfe_tape *tape)
{
    for (int i = 0; A && i < A->nborn; i++)
        if (A->born[i].tape == tape) return &A->born[i];
    return NULL;
}

/* Is region a region r or one nested in it? (0 and -1: the top) */
static bool region_within(const Graph *g, int a, int r)
{
    if (r <= 0) return true;
    for (int depth = 0; a > 0 && a < g->nregions && depth < 1000; depth++, a = g->regions[a].parent)
        if (a == r) return true;
    return false;
}

static size_t touch_hash(const tfe_tape *tape, GRef r)
{
    size_t h = (size_t)(uintptr_t)tape * 0x9E3779B97F4A7C15u;
    h ^= (size_t)r.node * 0x85EBCA6Bu + (size_t)r.out * 0xC2B2AE35u;
    return h ^ (h >> 29);
}

/* The index of (tape, r) in A->t, or where it goes (-1 - slot). */
static long touch_find(const TraceAlias *A, const tfe_tape *tape, GRef r)
{
    size_t mask = A->nslots - 1, s = touch_hash(tape, r) & mask;
    for (;; s = (s + 1) & mask) {
        int k = A->slots[s];
        if (k < 0) return -1 - (long)s;
        if (A->t[k].tape == tape && A->t[k].ref.node == r.node && A->t[k].ref.out == r.out) return k;
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
        long at = touch_find(A, A->t[k].tape, A->t[k].ref);
        A->slots[-1 - at] = k;
    }
}

void trace_alias_touch(Tracer *T, const tfe_tape *tape, const tfe_tensor *x)
{
    const TNote *note = x ? x->node : NULL;
    if (!T || !note || !dtype_is_float(x->dtype) || note->ref.node < 0 || note->ref.node >= T->g->n) return;
    TraceAlias *A = T->alias;
    const Born *b = born_of(A, tape);
    if (!b) return; /* a tape from outside: it records the call as a whole */
    GRef r = note->ref;
    if (2 * (size_t)(A->n + 1) > A->nslots) touch_grow(A);
    long at = touch_find(A, tape, r);
    if (at >= 0) return;
    const GNode *n = &T->g->nodes[r.node];
    /* a value of a branch or loop body the tape began outside of: the
     * tape records that if or loop as one entry; an if's or loop's result
     * the tape recorded so: its entry picks the branch (tensor/tape.c) */
    bool whole = !region_within(T->g, b->region, n->region) ||
                 ((n->kind == G_COND || n->kind == G_WHILE) && tfe_tape_made(tape, x));
    if (A->n == A->cap) {
        A->cap = A->cap ? 2 * A->cap : 64;
        A->t = xrealloc(A->t, sizeof *A->t * (size_t)A->cap);
    }
    A->slots[-1 - at] = A->n;
    A->t[A->n++] = (Touch){tape, r, whole, T->I->cur_loc};
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

static void origins_of(const Graph *g, GRef r, Origins *o, int depth);

/* Carried value p of loop w: its start value, or what the body ends it on. */
static void carried_origins(const Graph *g, int w, int p, Origins *o, int depth)
{
    for (int i = 0; i < o->nseen; i++)
        if (o->seen[i][0] == w && o->seen[i][1] == p) return;
    if (o->nseen == ORIGINS_CAP) {
        o->over = true;
        return;
    }
    o->seen[o->nseen][0] = w;
    o->seen[o->nseen++][1] = p;
    const GNode *nd = &g->nodes[w];
    const GRegion *body = &g->regions[nd->regions[1]];
    origins_of(g, nd->in[p], o, depth + 1);
    if (p < body->nouts) origins_of(g, body->outs[p], o, depth + 1);
}

/* The loop whose region holds carried value node, and its index (-1: none). */
static int param_loop(const Graph *g, int node, int *p)
{
    int reg = g->nodes[node].region;
    for (int w = 0; w < g->n; w++) {
        const GNode *nd = &g->nodes[w];
        if (nd->kind != G_WHILE) continue;
        for (int k = 0; k < 2; k++) {
            if (nd->regions[k] != reg) continue;
            const GRegion *rg = &g->regions[reg];
            for (int i = 0; i < rg->nparams; i++)
                if (rg->params[i] == node && i < nd->nin) {
                    *p = i;
                    return w;
                }
        }
    }
    return -1;
}

static void origins_of(const Graph *g, GRef r, Origins *o, int depth)
{
    if (depth > 200) {
        o->over = true;
        return;
    }
    const GNode *nd = &g->nodes[r.node];
    if (nd->kind == G_COND) {
        for (int b = 0; b < 2; b++) {
            const GRegion *reg = &g->regions[nd->regions[b]];
            if (r.out < reg->nouts) origins_of(g, reg->outs[r.out], o, depth + 1);
        }
        return;
    }
    if (nd->kind == G_WHILE && r.out < nd->nin) {
        carried_origins(g, r.node, r.out, o, depth);
        return;
    }
    int p = -1, w = nd->kind == G_PARAM ? param_loop(g, r.node, &p) : -1;
    if (w >= 0) {
        carried_origins(g, w, p, o, depth);
        return;
    }
    for (int i = 0; i < o->n; i++)
        if (o->r[i].node == r.node && o->r[i].out == r.out) return;
    if (o->n == ORIGINS_CAP) o->over = true;
    else o->r[o->n++] = r;
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
 * time, or -1. */
static int first_conflict(const Tracer *T)
{
    const TraceAlias *A = T->alias;
    if (!A || A->n < 2) return -1;
    bool any = false; /* (no touched if or loop result, nor carried value: none) */
    for (int k = 0; k < A->n && !any; k++) {
        GKind kd = T->g->nodes[A->t[k].ref.node].kind;
        any = !A->t[k].whole && (kd == G_COND || kd == G_WHILE || kd == G_PARAM);
    }
    if (!any) return -1;
    Claim *c = NULL;
    int nc = 0, capc = 0, worst = -1;
    for (int k = 0; k < A->n; k++) {
        Origins o = {.n = 0};
        if (A->t[k].whole) o.r[o.n++] = A->t[k].ref;
        else origins_of(T->g, A->t[k].ref, &o, 0);
        if (o.over && (worst < 0 || k > worst)) worst = k; /* (too many ways to follow: one) */
        if (nc + o.n > capc) {
            capc = 2 * (nc + o.n);
            c = xrealloc(c, sizeof *c * (size_t)capc);
        }
        for (int i = 0; i < o.n; i++) c[nc++] = (Claim){A->t[k].tape, o.r[i], k};
    }
    if (nc) qsort(c, (size_t)nc, sizeof *c, claim_cmp);
    int found = worst;
    for (int i = 1; i < nc; i++)
        if (c[i].tape == c[i - 1].tape && c[i].origin.node == c[i - 1].origin.node &&
            c[i].origin.out == c[i - 1].origin.out && c[i].touch != c[i - 1].touch) {
            int later = c[i].touch > c[i - 1].touch ? c[i].touch : c[i - 1].touch;
            if (found < 0 || later < found) found = later;
        }
    free(c);
    return found;
}

int trace_alias_check(Interp *I, Tracer *T)
{
    int k = first_conflict(T);
    if (k < 0) return 0;
    Loc loc = T->alias->t[k].loc;
    /* the call runs eagerly from its start, as do later ones (ntapes 0) */
    if (trace_nothing_done(T)) return trace_redo_eagerly(I, loc, 0, "(unused)");
    if (trace_effects_replayable(T)) return trace_redo_replaying(I, loc, 0);
    return raise_at(I, loc, "a tape made in this staged function after a traced if or loop (or in a loop's "
                            "body) uses a value that the if or loop can hand on unchanged together with that "
                            "value itself: eager code holds one tensor there and adds the gradients of both "
                            "uses, which a graph cannot; the call would run eagerly, but an effect made before "
                            "it cannot be made again; make the tape before the if or loop, or bind a new "
                            "tensor after it (let a = a0 * 1.0)");
}
