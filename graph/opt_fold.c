/* opt_fold.c — constant folding: an op whose inputs are all constants runs
 * once, now, and becomes a constant (random draws excepted: they must draw
 * at every run; and results over a million elements stay computed at run
 * time rather than held in the graph). */
#include "graph/opt.h"

enum { FOLD_MAX_ELEMS = 1 << 20 };

int opt_fold(Graph *g)
{
    int folded = 0;
    for (int id = 0; id < g->n; id++) {
        GNode *n = &g->nodes[id];
        if (n->kind != G_OP || n->nout != 1 || (tfe_ops[n->op].flags & (F_RANDOM | F_COLLECTIVE)) || n->nin > 16) continue;
        if (n->nin == 0 && !(tfe_ops[n->op].flags & F_CREATE)) continue;
        tfe_tensor *in[16];
        bool all = true;
        for (int k = 0; k < n->nin && all; k++) all = (in[k] = opt_const(g, n->in[k])) != NULL;
        if (!all) continue;
        if (n->meta[0].rank >= 0 && shape_numel(n->meta[0].rank, n->meta[0].shape) > FOLD_MAX_ELEMS) continue;
        tfe_tensor *out[32];
        if (tfe_execute_eager(n->op, n->nin, in, n->at, out)) {
            tfe_error_clear(); /* it fails at run time too, with its location: leave it */
            continue;
        }
        tfe_tensor *c = tensor_contiguous(out[0]); /* a view would keep its base alive */
        tensor_decref(out[0]);
        if (!c) {
            tfe_error_clear();
            continue;
        }
        opt_make_const(g, id, c);
        folded++;
    }
    return folded;
}
