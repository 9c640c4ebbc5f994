/* relax_fit.c — does a relaxed trace fit a call's sizes? Its slices keep
 * their bounds as numbers (docs/staging.md, section 4): where a bound is
 * past the end at this call's sizes, eager code clamps it (or raises, for
 * an integer index), and the graph would stop at that slice, perhaps after
 * an effect (a print, a step counter) already ran. So before the graph runs,
 * the shapes of its values are inferred from the call's inputs (the infer
 * rules touch no data), and a call at whose sizes a slice does not fit
 * traces for its own sizes instead (stage/staged.c, stage_call). */
#include <stdlib.h>
#include "graph/graph.h"
#include "stage/staged.h"
#include "util/xalloc.h"

typedef struct Fit {
    const Graph *g;
    tfe_tensor *const *inputs;
    tfe_meta *m;   /* by value slot: its shape at this call, where known[] */
    bool *known;
} Fit;

static bool meta_static(const tfe_meta *m)
{
    for (int d = 0; d < m->rank; d++)
        if (m->shape[d] < 0) return false;
    return true;
}

static void meta_of(tfe_meta *m, const tfe_tensor *t)
{
    m->dtype = t->dtype;
    m->weak = t->weak;
    m->rank = t->rank;
    for (int d = 0; d < t->rank; d++) m->shape[d] = t->shape[d];
}

static bool is_slice(tfe_op op) { return op == OP_SLICE || op == OP_SET_SLICE; }

/* An op's output shape from its inputs' at this call; false: a slice of it
 * does not fit (its infer rule fails at these sizes). An input of unknown
 * shape leaves the output unknown, or its traced shape where that has no
 * unknown dim (a traced shape is one the slices fitted when traced). */
static bool fit_op(Fit *f, const GNode *n)
{
    bool all = n->nin <= 16 && n->nout <= 32;
    for (int k = 0; all && k < n->nin; k++) all = f->known[f->g->nodes[n->in[k].node].vbase + n->in[k].out];
    if (!all) return true;
    tfe_tensor *in[16];
    for (int k = 0; k < n->nin; k++) {
        const tfe_meta *m = &f->m[f->g->nodes[n->in[k].node].vbase + n->in[k].out];
        in[k] = tensor_symbolic(m->dtype, m->weak, m->rank, m->shape);
    }
    tfe_meta out;
    tfe_tensor *o[32];
    const tfe_opcall c = {.op = n->op, .nin = n->nin, .nout = n->nout, .in = in, .at = n->at, .out = o};
    int rc = tfe_ops[n->op].infer(&c, &out);
    tfe_error_clear();
    for (int k = 0; k < n->nin; k++) tensor_decref(in[k]);
    if (rc) return !is_slice(n->op);
    f->m[n->vbase] = out;
    f->known[n->vbase] = true;
    return true;
}

static bool fit_region(Fit *f, int r)
{
    const GRegion *reg = &f->g->regions[r];
    for (int i = 0; i < reg->n; i++) {
        const GNode *n = &f->g->nodes[reg->nodes[i]];
        switch (n->kind) {
        case G_INPUT:
            if (n->input_index >= 0 && n->input_index < f->g->ninputs) {
                meta_of(&f->m[n->vbase], f->inputs[n->input_index]);
                f->known[n->vbase] = true;
            }
            continue;
        case G_CONST:
            if (!n->value) continue;
            meta_of(&f->m[n->vbase], n->value);
            f->known[n->vbase] = true;
            continue;
        case G_OP:
            if (!fit_op(f, n)) return false;
            continue;
        case G_COND:
        case G_WHILE:
            /* both branches, the condition and the body: a slice that does
             * not fit in a branch this call does not take costs a trace */
            if (!fit_region(f, n->regions[0]) || !fit_region(f, n->regions[1])) return false;
            break;
        case G_VAR_READ:
        case G_HOST:
        case G_PARAM:
        case G_FUSED:
            break;
        }
        /* the rest (host calls, variable reads, loop parameters, fused
         * groups, a cond's or loop's results): their traced shape */
        for (int k = 0; k < n->nout; k++)
            if (meta_static(&n->meta[k])) {
                f->m[n->vbase + k] = n->meta[k];
                f->known[n->vbase + k] = true;
            }
    }
    return true;
}

bool stage_relaxed_fits(const Trace *t, tfe_tensor *const *inputs)
{
    /* the graph as traced: the optimizer may have dropped a slice whose
     * result is unused, which eager code still runs (and an index out of
     * range still raises) */
    const Graph *g = t->g->raw ? t->g->raw : t->g;
    bool any = false; /* (most graphs slice nothing: no inference for them) */
    for (int i = 0; i < g->n && !any; i++) any = g->nodes[i].kind == G_OP && is_slice(g->nodes[i].op);
    if (!any) return true;
    Fit f = {.g = g, .inputs = inputs};
    f.m = xmalloc(sizeof *f.m * ((size_t)g->nvals + 1));
    f.known = xcalloc((size_t)g->nvals + 1, sizeof *f.known);
    bool fits = fit_region(&f, 0);
    free(f.m);
    free(f.known);
    return fits;
}
