/* grad.c — a cached staged call under a tape: one tape entry for the whole
 * graph, whose backward is a graph of its own (traced once, then cached). */
#include <stdlib.h>
#include <string.h>
#include "stage/exec.h"
#include "stage/staged.h"
#include "stage/trace.h"
#include "tensor/grad.h"

int stage_graph_call(Interp *I, Trace *t, tfe_tensor *const *inputs, tfe_tensor **outs)
{
    Graph *g = t->g;
    GRun x;
    grun_init(&x, I, g, inputs);
    int saved_tapes = tfe_tapes_active;
    tfe_tapes_active = 0;
    int rc = grun_region(&x, 0);
    tfe_tapes_active = saved_tapes;
    GRegion *top = &g->regions[0];
    for (int k = 0; k < top->nouts; k++) {
        outs[k] = rc ? NULL : grun_value(&x, top->outs[k]);
        if (outs[k]) tensor_incref(outs[k]);
    }
    grun_release(&x);
    return rc;
}

void stage_grad_free(Trace *t) { (void)t; }
