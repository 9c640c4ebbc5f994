/* graph_prov.c — the provenance of a staged call's outputs (tfe_tensor.prov):
 * which variables each was computed from, found once per graph from the
 * graph as traced, so that a graph run, whose planned and fused kernels
 * skip tfe_execute's propagation, hands out what eager code would. */
#include <stdint.h>
#include <stdlib.h>
#include "stage/host_node.h"
#include "stage/staged.h"
#include "util/xalloc.h"

/* by value: the variable bits (v) and the inputs it was computed from (in:
 * bit i for input i, bit 63 for input 63 and later) */
typedef struct Prov { uint64_t v, in; } Prov;

static bool prov_or(Prov *to, Prov from)
{
    Prov was = *to;
    to->v |= from.v;
    to->in |= from.in;
    return was.v != to->v || was.in != to->in;
}

static Prov region_outs(const Graph *g, const Prov *p, int r)
{
    Prov m = {0, 0};
    for (int k = 0; r >= 0 && r < g->nregions && k < g->regions[r].nouts; k++) {
        const GRef o = g->regions[r].outs[k];
        prov_or(&m, p[g->nodes[o.node].vbase + o.out]);
    }
    return m;
}

/* one pass over the nodes in order; whether anything changed (a while's
 * carried values go round until nothing does) */
static bool prov_pass(const Graph *g, Prov *p)
{
    bool changed = false;
    for (int i = 0; i < g->n; i++) {
        const GNode *n = &g->nodes[i];
        Prov m = {0, 0};
        switch (n->kind) {
        case G_INPUT: m.in = (uint64_t)1 << (n->input_index < 63 ? n->input_index : 63); break;
        case G_CONST: case G_PARAM: continue;
        case G_VAR_READ: m.v = n->host ? variable_prov(n->host->obj) : 0; break;
        case G_OP:
            if (tfe_ops[n->op].flags & F_NODIFF) continue;
            /* fallthrough */
        case G_FUSED: case G_HOST:
            for (int k = 0; k < n->nin; k++) prov_or(&m, p[g->nodes[n->in[k].node].vbase + n->in[k].out]);
            break;
        case G_COND: /* in[0] is the condition: no gradient */
            for (int k = 1; k < n->nin; k++) prov_or(&m, p[g->nodes[n->in[k].node].vbase + n->in[k].out]);
            prov_or(&m, region_outs(g, p, n->regions[0]));
            prov_or(&m, region_outs(g, p, n->regions[1]));
            break;
        case G_WHILE:
            for (int k = 0; k < n->nin; k++) prov_or(&m, p[g->nodes[n->in[k].node].vbase + n->in[k].out]);
            prov_or(&m, region_outs(g, p, n->regions[1]));
            for (int r = 0; r < 2; r++) {
                const GRegion *R = n->regions[r] >= 0 && n->regions[r] < g->nregions ? &g->regions[n->regions[r]] : NULL;
                for (int k = 0; R && k < R->nparams; k++) changed |= prov_or(&p[g->nodes[R->params[k]].vbase], m);
            }
            break;
        }
        for (int k = 0; k < n->nout; k++)
            if (!n->meta || dtype_is_float(n->meta[k].dtype)) changed |= prov_or(&p[n->vbase + k], m);
    }
    return changed;
}

/* by output of g: its Prov, two words each (made once; owned by g) */
static const uint64_t *graph_prov(Graph *g)
{
    if (g->prov) return g->prov;
    Prov *p = xcalloc((size_t)g->nvals + 1, sizeof *p);
    for (int round = 0; round < 64 && prov_pass(g, p); round++) {
    }
    const GRegion *top = &g->regions[0];
    g->prov = xcalloc(2 * (size_t)top->nouts + 1, sizeof *g->prov);
    for (int k = 0; k < top->nouts; k++) {
        Prov o = p[g->nodes[top->outs[k].node].vbase + top->outs[k].out];
        g->prov[2 * k] = o.v;
        g->prov[2 * k + 1] = o.in;
    }
    free(p);
    return g->prov;
}

uint64_t graph_value_inputs(const Graph *g, GRef r)
{
    Prov *p = xcalloc((size_t)g->nvals + 1, sizeof *p);
    for (int round = 0; round < 64 && prov_pass(g, p); round++) {
    }
    uint64_t in = r.node >= 0 && r.node < g->n ? p[g->nodes[r.node].vbase + r.out].in : 0;
    free(p);
    return in;
}

void graph_out_prov(Graph *g, int ninputs, tfe_tensor *const *inputs, int nouts, tfe_tensor *const *outs)
{
    const uint64_t *gp = graph_prov(g);
    if (nouts > g->regions[0].nouts) nouts = g->regions[0].nouts;
    for (int k = 0; k < nouts; k++) {
        if (!outs[k] || !dtype_is_float(outs[k]->dtype)) continue;
        uint64_t m = gp[2 * k], in = gp[2 * k + 1];
        for (int i = 0; in && i < ninputs; i++)
            if (inputs[i] && (in >> (i < 63 ? i : 63)) & 1) m |= inputs[i]->prov;
        outs[k]->prov |= m;
    }
}
