/* opt_dce.c — dead code elimination: nodes whose values no result needs go,
 * unless running them does something (graph/opt.c: opt_has_effect) or can
 * stop the run with an error (opt_may_fail: an eager run would stop there
 * too); effects and failures keep their order because no node moves.
 *
 * Liveness spreads from the results by a work list, so each node and each
 * input is looked at once (a graph of thousands of ops in a chain costs time
 * in its size, not its square). */
#include <stdlib.h>
#include "graph/opt.h"
#include "util/xalloc.h"

typedef struct Dce {
    Graph *g;
    bool *live, *live_r;
    signed char *must;   /* per node: must it run though unused? -1: not yet known */
    int *work, nwork;
    bool *unc;           /* opt_uncertain_dims */
} Dce;

static bool must_run(Dce *d, int id);

static bool region_must_run(Dce *d, int r)
{
    const GRegion *reg = &d->g->regions[r];
    bool any = false;
    for (int i = 0; i < reg->n; i++) any |= must_run(d, reg->nodes[i]);
    return any;
}

/* An effect or a possible failure (a cond or loop: one inside), memoised. */
static bool must_run(Dce *d, int id)
{
    if (d->must[id] >= 0) return d->must[id];
    const GNode *n = &d->g->nodes[id];
    bool m;
    if (n->kind == G_COND || n->kind == G_WHILE) {
        d->must[id] = 0; /* no cycles through regions, but be safe */
        bool r0 = region_must_run(d, n->regions[0]), r1 = region_must_run(d, n->regions[1]);
        m = r0 || r1; /* what opt_has_effect asks, memoised */
    } else m = opt_has_effect(d->g, id) || opt_may_fail(d->g, id, d->unc);
    d->must[id] = m;
    return m;
}

static void mark(Dce *d, int id)
{
    if (d->live[id]) return;
    d->live[id] = true;
    d->work[d->nwork++] = id;
}

/* A region a live node runs: its parameters, results and what must run in it. */
static void mark_region(Dce *d, int r)
{
    if (d->live_r[r]) return;
    d->live_r[r] = true;
    const GRegion *reg = &d->g->regions[r];
    for (int i = 0; i < reg->n; i++) {
        int id = reg->nodes[i];
        if (d->g->nodes[id].kind == G_PARAM || must_run(d, id)) mark(d, id);
    }
    for (int k = 0; k < reg->nouts; k++) mark(d, reg->outs[k].node);
}

int opt_dce(Graph *g)
{
    Dce d = {.g = g, .unc = opt_uncertain_dims(g)};
    d.live = xcalloc((size_t)g->n + 1, 1);
    d.live_r = xcalloc((size_t)g->nregions + 1, 1);
    d.must = xmalloc((size_t)g->n + 1);
    for (int i = 0; i < g->n; i++) d.must[i] = -1;
    d.work = xmalloc(sizeof *d.work * ((size_t)g->n + 1)); /* each node is pushed once */
    for (int i = 0; i < g->ninputs; i++) mark(&d, g->inputs[i]);
    mark_region(&d, 0);
    while (d.nwork > 0) {
        const GNode *n = &g->nodes[d.work[--d.nwork]];
        for (int k = 0; k < n->nin; k++) mark(&d, n->in[k].node);
        if (n->kind == G_COND || n->kind == G_WHILE)
            for (int b = 0; b < 2; b++) mark_region(&d, n->regions[b]);
    }
    int removed = 0;
    for (int r = 0; r < g->nregions; r++) {
        GRegion *reg = &g->regions[r];
        int keep = 0;
        for (int i = 0; i < reg->n; i++) {
            if (d.live[reg->nodes[i]]) reg->nodes[keep++] = reg->nodes[i];
            else removed++;
        }
        reg->n = keep;
    }
    free(d.live);
    free(d.live_r);
    free(d.must);
    free(d.work);
    free(d.unc);
    return removed;
}
