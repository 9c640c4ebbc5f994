/* opt_dce.c — dead code elimination: nodes whose values no result needs go,
 * unless running them does something (stage/opt.c: opt_has_effect); effects
 * keep their order because no node moves. */
#include <stdlib.h>
#include "stage/opt.h"
#include "tensor/xalloc.h"

static void mark_ref(const Graph *g, GRef r, bool *live, bool *changed)
{
    (void)g;
    if (!live[r.node]) {
        live[r.node] = true;
        *changed = true;
    }
}

int opt_dce(Graph *g)
{
    bool *live = xcalloc((size_t)g->n + 1, 1), *live_r = xcalloc((size_t)g->nregions + 1, 1);
    live_r[0] = true;
    for (int k = 0; k < g->regions[0].nouts; k++) live[g->regions[0].outs[k].node] = true;
    for (int i = 0; i < g->ninputs; i++) live[g->inputs[i]] = true;
    bool changed = true;
    while (changed) {
        changed = false;
        for (int r = 0; r < g->nregions; r++) {
            if (!live_r[r]) continue;
            const GRegion *reg = &g->regions[r];
            for (int i = 0; i < reg->n; i++) {
                int id = reg->nodes[i];
                const GNode *n = &g->nodes[id];
                if (!live[id] && (n->kind == G_PARAM || opt_has_effect(g, id))) {
                    live[id] = true;
                    changed = true;
                }
                if (!live[id]) continue;
                for (int k = 0; k < n->nin; k++) mark_ref(g, n->in[k], live, &changed);
                if (n->kind == G_COND || n->kind == G_WHILE)
                    for (int b = 0; b < 2; b++) {
                        int sub = n->regions[b];
                        if (!live_r[sub]) {
                            live_r[sub] = true;
                            changed = true;
                        }
                        const GRegion *sr = &g->regions[sub];
                        for (int k = 0; k < sr->nouts; k++) mark_ref(g, sr->outs[k], live, &changed);
                    }
            }
        }
    }
    int removed = 0;
    for (int r = 0; r < g->nregions; r++) {
        GRegion *reg = &g->regions[r];
        int keep = 0;
        for (int i = 0; i < reg->n; i++) {
            if (live[reg->nodes[i]]) reg->nodes[keep++] = reg->nodes[i];
            else removed++;
        }
        reg->n = keep;
    }
    free(live);
    free(live_r);
    return removed;
}
