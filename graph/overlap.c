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
 * The order: a topological sort of the top region (Kahn's, with a heap)
 * that picks, among the nodes ready to run, first what the first start
 * needs, then what the second needs, and so on, then the rest, each group
 * in the old order. What must run before what: the data (what a node reads,
 * directly or inside its regions), the effects among themselves in their old
 * order (pure ops are free to move: they neither do nor see anything else),
 * and each start after the barrier before it and before the barrier after
 * it. A wait is then placed just before the first node that reads it (a
 * reader waits for the start in the sort).
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

/* elements of a value; a dim unknown until the run counts as large */
static double meta_numel(const tfe_meta *m)
{
    double n = 1;
    for (int i = 0; i < m->rank; i++) n *= m->shape[i] < 0 ? 1e12 : (double)m->shape[i];
    return n;
}

static bool splittable(const GNode *n)
{
    return n->kind == G_OP && n->op == OP_ALLREDUCE && n->half == GH_WHOLE && n->region == 0 && n->nin == 1 &&
           n->nout == 1 && n->at;
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

/* sorted by key, then old position: key is a priority (the sort) or a place (the waits) */
typedef struct Key { int key, pos, id; } Key;

static int key_cmp(const void *a, const void *b)
{
    const Key *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static void heap_push(Key *h, int *n, Key k)
{
    int i = (*n)++;
    while (i > 0 && key_cmp(&k, &h[(i - 1) / 2]) < 0) {
        h[i] = h[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h[i] = k;
}

static Key heap_pop(Key *h, int *n)
{
    Key top = h[0], last = h[--*n];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && key_cmp(&h[c + 1], &h[c]) < 0) c++;
        if (key_cmp(&h[c], &last) >= 0) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
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
    case G_INPUT: case G_CONST: case G_VAR_READ: case G_PARAM: default: return false;
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
    /* what must run before what: data (a wait's readers wait for its start
     * here; the wait is placed after), the effects in their order (pure
     * nodes are free), and each start between the barriers around it */
    int *pf = NULL, *pt = NULL, npf = 0, cpf = 0, npt = 0, cpt = 0;
    int prev_eff = -1, last_bar = -1;
    for (int i = 0; i < m; i++) {
        int id = tr->nodes[i];
        const GNode *nd = &g->nodes[id];
        if (nd->half == GH_WAIT) continue;
        for (int j = e.start[id]; j < e.start[id + 1]; j++) {
            int d = e.to[j];
            if (g->nodes[d].half == GH_WAIT) d = g->nodes[d].in[0].node;
            add_dep(&pf, &npf, &cpf, d), add_dep(&pt, &npt, &cpt, id);
        }
        int before = -1, kind = nd->kind;
        if (nd->half == GH_START) {
            before = last_bar;
            last_bar = id;
        } else if (kind != G_INPUT && kind != G_CONST && !pure_node(g, id, unc)) {
            if (prev_eff >= 0) add_dep(&pf, &npf, &cpf, prev_eff), add_dep(&pt, &npt, &cpt, id);
            prev_eff = id;
            if (barrier_node(g, id, unc)) {
                before = last_bar;
                last_bar = id;
            }
        }
        if (before >= 0) add_dep(&pf, &npf, &cpf, before), add_dep(&pt, &npt, &cpt, id);
    }
    /* both ways, by node id */
    int *sb = xcalloc((size_t)n + 2, sizeof *sb), *pb = xcalloc((size_t)n + 2, sizeof *pb);
    int *succ = xmalloc(sizeof *succ * (size_t)(npf + 1)), *pred = xmalloc(sizeof *pred * (size_t)(npf + 1));
    for (int k = 0; k < npf; k++) sb[pf[k] + 1]++, pb[pt[k] + 1]++;
    for (int id = 0; id < n; id++) sb[id + 1] += sb[id], pb[id + 1] += pb[id];
    int *fs = xmalloc(sizeof *fs * (size_t)(n + 1)), *fp = xmalloc(sizeof *fp * (size_t)(n + 1));
    mem_copy(fs, sb, sizeof *fs * (size_t)n);
    mem_copy(fp, pb, sizeof *fp * (size_t)n);
    for (int k = 0; k < npf; k++) succ[fs[pf[k]]++] = pt[k], pred[fp[pt[k]]++] = pf[k];
    free(fs);
    free(fp);
    free(pf);
    free(pt);
    /* priority: what the first start needs, then what the second needs, ...,
     * then the rest; inputs and constants (no instruction) first */
    int *rank = xmalloc(sizeof *rank * (size_t)(n + 1)), *pos = xmalloc(sizeof *pos * (size_t)(n + 1));
    int nstarts = 0;
    for (int i = 0; i < m; i++) rank[tr->nodes[i]] = -2, pos[tr->nodes[i]] = i;
    int *stack = xmalloc(sizeof *stack * (size_t)(n + 1));
    for (int i = 0; i < m; i++) {
        int sid = tr->nodes[i];
        if (g->nodes[sid].half != GH_START) continue;
        int sp = 0, r = nstarts++;
        if (rank[sid] == -2) rank[sid] = r, stack[sp++] = sid;
        while (sp) {
            int id = stack[--sp];
            for (int j = pb[id]; j < pb[id + 1]; j++)
                if (rank[pred[j]] == -2) rank[pred[j]] = r, stack[sp++] = pred[j];
        }
    }
    for (int i = 0; i < m; i++) {
        int id = tr->nodes[i];
        if (g->nodes[id].kind == G_INPUT || g->nodes[id].kind == G_CONST) rank[id] = -1;
        else if (rank[id] == -2) rank[id] = nstarts;
    }
    /* Kahn's order with a heap on (rank, old position) */
    int *indeg = xcalloc((size_t)n + 1, sizeof *indeg);
    for (int id = 0; id < n; id++) indeg[id] = pb[id + 1] - pb[id];
    Key *heap = xmalloc(sizeof *heap * (size_t)(m + 1));
    Key *keys = xmalloc(sizeof *keys * (size_t)(m + 1));
    int nh = 0, nk = 0;
    for (int i = 0; i < m; i++) {
        int id = tr->nodes[i];
        if (g->nodes[id].half != GH_WAIT && indeg[id] == 0) heap_push(heap, &nh, (Key){rank[id], i, id});
    }
    while (nh) {
        Key k = heap_pop(heap, &nh);
        keys[nk++] = k;
        for (int j = sb[k.id]; j < sb[k.id + 1]; j++)
            if (--indeg[succ[j]] == 0) heap_push(heap, &nh, (Key){rank[succ[j]], pos[succ[j]], succ[j]});
    }
    if (nk != m - nsplit) { /* a cycle: cannot happen (every edge goes forward in the old order); keep it */
        nk = 0;
        for (int i = 0; i < m; i++)
            if (g->nodes[tr->nodes[i]].half != GH_WAIT) keys[nk++] = (Key){0, i, tr->nodes[i]};
    }
    free(heap);
    free(indeg);
    free(rank);
    free(pos);
    free(sb);
    free(pb);
    free(succ);
    free(pred);
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
        if (g->nodes[w].half == GH_WAIT) wk[nw++] = (Key){wait_at[w], newpos[g->nodes[w].in[0].node], w};
    }
    qsort(wk, (size_t)nw, sizeof *wk, key_cmp);
    int *order = xmalloc(sizeof *order * (size_t)(m + 1)), no = 0;
    for (int k = 0, q = 0; k <= nk; k++) {
        while (q < nw && wk[q].key == k) order[no++] = wk[q++].id;
        if (k < nk) order[no++] = keys[k].id;
    }
    free(wk);
    /* a start whose wait follows with too little work between has nothing
     * to hide it behind: it makes the blocking call (an MPI_Iallreduce
     * waited for soon costs more than MPI_Allreduce). "Too little": ops
     * between that write fewer elements in all than the allreduce moves
     * (variable reads, constants and views write none); a loop, branch or
     * host call between, or a dim unknown until the run, counts as enough. */
    for (int i = 0; i < no; i++) {
        GNode *S = &g->nodes[order[i]];
        if (S->half != GH_START) continue;
        double need = meta_numel(&S->meta[0]), work = 0;
        int j = i + 1;
        for (; j < no && work < need; j++) {
            const GNode *b = &g->nodes[order[j]];
            if (b->half == GH_WAIT && b->in[0].node == order[i]) break;
            if (b->kind == G_HOST || b->kind == G_COND || b->kind == G_WHILE) work = need;
            else if ((b->kind == G_OP && !(tfe_ops[b->op].flags & F_VIEW)) || b->kind == G_FUSED)
                for (int k = 0; k < b->nout; k++) work += meta_numel(&b->meta[k]);
        }
        S->start_blocks = work < need;
    }
    mem_copy(tr->nodes, order, sizeof *order * (size_t)m);
    renumber(g, top);
    free(order);
    free(wait_at);
    free(newpos);
    free(keys);
    free(stack);
    free(unc);
    free(e.start);
    free(e.to);
    free(top);
    free(owner);
    return nsplit;
}
