/* overlap.c — an allreduce of a staged graph split into a start and a wait,
 * and the top region reordered so the start runs as soon as its input is
 * ready and the wait only where the result is read (graph/overlap.h).
 *
 * Why: in a data-parallel training step the gradients of the last layers are
 * ready long before the first layer's; a bucket's allreduce started then
 * travels while the rest of the backward pass computes (docs/distributed.md,
 * "Gradient buckets and overlap"). Only the timing changes: the start sends
 * what the whole allreduce would have, so the sums are the same bit for bit.
 *
 * The order. Each top-region node gets an anchor: the position after which
 * it runs. A node that stays put is anchored at its own position. A start
 * is anchored right after the latest of its inputs and of the last barrier
 * before it (below); the pure ops its input is computed from (no effect,
 * cannot fail) are anchored right after their own inputs, so a bucket's
 * concat or reshapes move up with it. Sorting by (anchor, stays before
 * moved, old position) is a topological order: what a node reads is
 * anchored no later than it, and among equal anchors in the old order.
 * A wait goes just before the first node that reads its result.
 *
 * Barriers: a start never moves above another collective (every rank must
 * issue them in the same order, and every rank runs the same plan), a host
 * call (it may talk to the other ranks, or print), an op that can fail (an
 * eager run stops there, before the allreduce), nor a cond or while. It may
 * move above variable reads and random draws: an allreduce does not touch
 * them. */
#include <stdlib.h>
#include <string.h>
#include "graph/overlap.h"
#include "graph/opt.h"
#include "util/xalloc.h"

static bool splittable(const GNode *n)
{
    return n->kind == G_OP && n->op == OP_ALLREDUCE && n->half == GH_WHOLE && n->region == 0 && n->nin == 1 &&
           n->nout == 1;
}

/* The top-region node each node is (itself) or lies inside (a cond's or
 * while's); owner[r]: the node whose region r is. */
static int top_of(const Graph *g, const int *owner, int *memo, int id)
{
    if (memo[id] >= 0) return memo[id];
    int r = g->nodes[id].region;
    return memo[id] = r == 0 ? id : top_of(g, owner, memo, owner[r]);
}

typedef struct Edges { int *start, *to; } Edges; /* CSR, by node id: the top nodes a top node reads */

static void add_dep(int **lst, int *n, int *cap, int v)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        *lst = xrealloc(*lst, sizeof **lst * (size_t)*cap);
    }
    (*lst)[(*n)++] = v;
}

/* deps of each top node: its inputs and what the regions inside it read from outside */
static Edges top_deps(const Graph *g, const int *top, const int *owner)
{
    int *from = NULL, *to = NULL, nf = 0, cf = 0, nt = 0, ct = 0;
    for (int id = 0; id < g->n; id++) {
        const GNode *n = &g->nodes[id];
        for (int k = 0; k < n->nin; k++) {
            int d = top[n->in[k].node];
            if (d != top[id]) add_dep(&from, &nf, &cf, top[id]), add_dep(&to, &nt, &ct, d);
        }
    }
    for (int r = 1; r < g->nregions; r++) {
        const GRegion *reg = &g->regions[r];
        int owner_top = owner[r] >= 0 ? top[owner[r]] : -1; /* (a branch may hold no node) */
        for (int k = 0; k < reg->nouts && owner_top >= 0; k++) {
            int d = top[reg->outs[k].node];
            if (d != owner_top) add_dep(&from, &nf, &cf, owner_top), add_dep(&to, &nt, &ct, d);
        }
    }
    Edges e = {xcalloc((size_t)g->n + 2, sizeof *e.start), xmalloc(sizeof *e.to * (size_t)(nf + 1))};
    for (int i = 0; i < nf; i++) e.start[from[i] + 1]++;
    for (int i = 0; i < g->n; i++) e.start[i + 1] += e.start[i];
    int *fill = xmalloc(sizeof *fill * (size_t)(g->n + 1));
    mem_copy(fill, e.start, sizeof *fill * (size_t)g->n);
    for (int i = 0; i < nf; i++) e.to[fill[from[i]]++] = to[i];
    free(fill);
    free(from);
    free(to);
    return e;
}

/* Renumber g so that ids follow the top region's order (the nodes inside a
 * cond or while keep their place next to it), as if traced in that order. */
static void renumber(Graph *g, const int *top)
{
    const GRegion *t = &g->regions[0];
    int *byt = xmalloc(sizeof *byt * (size_t)(g->n + 1)), *nmap = xmalloc(sizeof *nmap * (size_t)(g->n + 1));
    int nn = 0;
    /* nested nodes grouped by their top node, in id order */
    int *cnt = xcalloc((size_t)g->n + 2, sizeof *cnt);
    for (int id = 0; id < g->n; id++) cnt[top[id] + 1]++;
    for (int i = 0; i < g->n; i++) cnt[i + 1] += cnt[i];
    int *fill = xmalloc(sizeof *fill * (size_t)(g->n + 1));
    mem_copy(fill, cnt, sizeof *fill * (size_t)g->n);
    for (int id = 0; id < g->n; id++) byt[fill[top[id]]++] = id;
    for (int i = 0; i < t->n; i++) {
        int T = t->nodes[i];
        for (int j = cnt[T]; j < cnt[T + 1]; j++) nmap[byt[j]] = nn++;
    }
    GNode *nodes = xcalloc((size_t)g->cap + 1, sizeof *nodes);
    int nv = 0;
    int *order = xmalloc(sizeof *order * (size_t)(g->n + 1));
    for (int id = 0; id < g->n; id++) order[nmap[id]] = id;
    for (int j = 0; j < g->n; j++) {
        GNode n = g->nodes[order[j]];
        for (int k = 0; k < n.nin; k++) n.in[k].node = nmap[n.in[k].node];
        n.effect_dep = n.effect_dep >= 0 ? nmap[n.effect_dep] : -1;
        n.at_from = n.at_from >= 0 ? nmap[n.at_from] : -1;
        n.vbase = nv;
        nv += n.nout;
        nodes[j] = n;
    }
    free(g->nodes);
    g->nodes = nodes;
    for (int r = 0; r < g->nregions; r++) {
        GRegion *reg = &g->regions[r];
        for (int i = 0; i < reg->n; i++) reg->nodes[i] = nmap[reg->nodes[i]];
        for (int k = 0; k < reg->nouts; k++) reg->outs[k].node = nmap[reg->outs[k].node];
        for (int k = 0; k < reg->nparams; k++) reg->params[k] = nmap[reg->params[k]];
    }
    for (int i = 0; i < g->ninputs; i++) g->inputs[i] = nmap[g->inputs[i]];
    g->nvals = nv;
    free(g->scratch); /* sized and indexed for the old numbering */
    g->scratch = NULL;
    g->scratch_cap = 0;
    free(order);
    free(fill);
    free(cnt);
    free(byt);
    free(nmap);
}

typedef struct Key { int anchor, moved, pos, id; } Key;

static int key_cmp(const void *a, const void *b)
{
    const Key *x = a, *y = b;
    if (x->anchor != y->anchor) return x->anchor < y->anchor ? -1 : 1;
    if (x->moved != y->moved) return x->moved - y->moved;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static bool pure_node(const Graph *g, int id, const bool *unc)
{
    const GNode *n = &g->nodes[id];
    if (n->kind == G_FUSED) return !opt_may_fail(g, id, unc);
    if (n->kind != G_OP) return false;
    return !(tfe_ops[n->op].flags & (F_RANDOM | F_COLLECTIVE)) && !opt_may_fail(g, id, unc);
}

static bool barrier_node(const Graph *g, int id, const bool *unc)
{
    const GNode *n = &g->nodes[id];
    switch (n->kind) {
    case G_HOST: case G_COND: case G_WHILE: return true;
    case G_OP: return (tfe_ops[n->op].flags & F_COLLECTIVE) || opt_may_fail(g, id, unc);
    case G_FUSED: return opt_may_fail(g, id, unc);
    default: return false;
    }
}

int graph_overlap_collectives(Graph *g)
{
    const char *env = getenv("TFE_OVERLAP"); /* 0: blocking allreduces, for comparison (bench/) */
    if (env && !strcmp(env, "0")) return 0;
    int nsplit = 0;
    for (int i = 0; i < g->regions[0].n; i++) nsplit += splittable(&g->nodes[g->regions[0].nodes[i]]);
    if (!nsplit) return 0;
    /* split: the node becomes the start; a new wait takes over its readers */
    int m0 = g->regions[0].n;
    int *old = xmalloc(sizeof *old * (size_t)(m0 + 1));
    mem_copy(old, g->regions[0].nodes, sizeof *old * (size_t)m0);
    for (int i = 0; i < m0; i++) {
        int s = old[i];
        if (!splittable(&g->nodes[s])) continue;
        int w = graph_add(g, 0, G_OP, 1, 1);
        GNode *S = &g->nodes[s], *W = &g->nodes[w];
        opt_replace_uses(g, (GRef){s, 0}, (GRef){w, 0});
        W->op = S->op;
        W->at = xmalloc(sizeof *W->at);
        *W->at = *S->at;
        W->in[0] = (GRef){s, 0};
        W->meta[0] = S->meta[0];
        W->loc = S->loc;
        W->frames = S->frames;
        W->effect_dep = s;
        W->half = GH_WAIT;
        S->half = GH_START;
    }
    free(old);
    int n = g->n;
    int *owner = xmalloc(sizeof *owner * (size_t)(g->nregions + 1));
    for (int r = 0; r < g->nregions; r++) owner[r] = -1;
    for (int id = 0; id < n; id++)
        if (g->nodes[id].kind == G_COND || g->nodes[id].kind == G_WHILE)
            for (int k = 0; k < 2; k++)
                if (g->nodes[id].regions[k] >= 0) owner[g->nodes[id].regions[k]] = id;
    int *top = xmalloc(sizeof *top * (size_t)(n + 1));
    for (int id = 0; id < n; id++) top[id] = -1;
    for (int id = 0; id < n; id++) top_of(g, owner, top, id);
    Edges e = top_deps(g, top, owner);
    bool *unc = opt_uncertain_dims(g);
    GRegion *tr = &g->regions[0];
    int m = tr->n;
    /* the cone: what a start's input is computed from by pure ops */
    bool *cone = xcalloc((size_t)n + 1, sizeof *cone);
    int *stack = xmalloc(sizeof *stack * (size_t)(n + 1)), sp = 0;
    for (int i = 0; i < m; i++)
        if (g->nodes[tr->nodes[i]].half == GH_START) stack[sp++] = tr->nodes[i];
    while (sp) {
        int id = stack[--sp];
        for (int j = e.start[id]; j < e.start[id + 1]; j++) {
            int d = e.to[j];
            if (!cone[d] && pure_node(g, d, unc)) cone[d] = true, stack[sp++] = d;
        }
    }
    /* anchors, in the old order (waits left out: placed after) */
    int *anchor = xmalloc(sizeof *anchor * (size_t)(n + 1));
    Key *keys = xmalloc(sizeof *keys * (size_t)(m + 1));
    int nk = 0, last_barrier = -1;
    for (int i = 0; i < m; i++) {
        int id = tr->nodes[i];
        const GNode *nd = &g->nodes[id];
        if (nd->half == GH_WAIT) continue;
        bool start = nd->half == GH_START;
        int a = -1;
        if (cone[id] || start) {
            for (int j = e.start[id]; j < e.start[id + 1]; j++) {
                const GNode *d = &g->nodes[e.to[j]];
                int da = d->kind == G_INPUT || d->kind == G_CONST ? -1
                       : d->half == GH_WAIT ? anchor[d->in[0].node] /* a start's key stands for its wait */
                       : anchor[e.to[j]];
                if (da > a) a = da;
            }
            if (start && last_barrier > a) a = last_barrier;
        } else {
            a = i;
        }
        anchor[id] = a;
        if (start || (!cone[id] && barrier_node(g, id, unc))) last_barrier = a;
        keys[nk++] = (Key){a, cone[id] || start, i, id};
    }
    qsort(keys, (size_t)nk, sizeof *keys, key_cmp);
    int *newpos = xmalloc(sizeof *newpos * (size_t)(n + 1));
    for (int id = 0; id < n; id++) newpos[id] = -1;
    for (int k = 0; k < nk; k++) newpos[keys[k].id] = k;
    /* each wait just before its first reader (nk: the end) */
    int *wait_at = xmalloc(sizeof *wait_at * (size_t)(n + 1));
    for (int id = 0; id < n; id++) wait_at[id] = -1;
    for (int i = 0; i < m; i++) {
        int id = tr->nodes[i];
        if (g->nodes[id].half == GH_WAIT) wait_at[id] = nk;
    }
    for (int k = 0; k < nk; k++) {
        int id = keys[k].id;
        for (int j = e.start[id]; j < e.start[id + 1]; j++)
            if (g->nodes[e.to[j]].half == GH_WAIT && wait_at[e.to[j]] > k) wait_at[e.to[j]] = k;
    }
    /* the waits by where they go, and by their starts' order there */
    Key *wk = xmalloc(sizeof *wk * (size_t)(m + 1));
    int nw = 0;
    for (int i = 0; i < m; i++) {
        int w = tr->nodes[i];
        if (g->nodes[w].half == GH_WAIT) wk[nw++] = (Key){wait_at[w], 0, newpos[g->nodes[w].in[0].node], w};
    }
    qsort(wk, (size_t)nw, sizeof *wk, key_cmp);
    int *order = xmalloc(sizeof *order * (size_t)(m + 1)), no = 0;
    for (int k = 0, q = 0; k <= nk; k++) {
        while (q < nw && wk[q].anchor == k) order[no++] = wk[q++].id;
        if (k < nk) order[no++] = keys[k].id;
    }
    free(wk);
    mem_copy(tr->nodes, order, sizeof *order * (size_t)m);
    renumber(g, top);
    free(order);
    free(wait_at);
    free(newpos);
    free(keys);
    free(anchor);
    free(stack);
    free(cone);
    free(unc);
    free(e.start);
    free(e.to);
    free(top);
    free(owner);
    return nsplit;
}
