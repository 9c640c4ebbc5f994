/* exec_update.c — a planned variable update (PI_UPDATE, graph/plan.h):
 * `w.assign_sub(lr * g)` as one fused pass that computes lr * g and w - it
 * and writes the result over w's own buffer, instead of a pass making
 * lr * g, a pass making w - lr * g in a new tensor, and w's old tensor freed.
 *
 * Each element is computed by the ops eager code runs, in its order (the
 * operand's op or fused program, then the update's op: k_sub's formula), so
 * the variable gets the same bits. In place only where nothing can see it:
 * the variable's tensor is held by the variable alone (and by the operand's
 * own inputs that are that very tensor and are read for the last time here:
 * each chunk of it is read before the same chunk is written), its storage by
 * that tensor alone, on the CPU, contiguous, of the operand's dtype and
 * shape. Otherwise (a tape or a binding keeps the old value, a view of it is
 * alive, a read of the variable before the update is still to be read after
 * it, a shape or dtype that eager would refuse or broadcast) the operand and
 * the host call run as they would unfused: same results, same errors. Under
 * TFE_CHECK_STAGED the host checks the value written against the eager
 * run's (var_updated). */
#include <stdlib.h>
#include "graph/exec.h"
#include "graph/host.h"
#include "graph/plan.h"
#include "tensor/fused.h"
#include "tensor/fused_axpy.h"
#include "util/xalloc.h"

/* Is value slot s released right after the update c (its last reader in
 * the plan: PInstr.drop)? */
static bool dies_at(const PInstr *c, int s)
{
    for (int k = 0; k < c->ndrop; k++)
        if (c->drop[k] == s) return true;
    return false;
}

/* Can the update c write *slot in place? Its refs: the variable's own, and
 * one per input slot of the operand that holds that tensor and dies at the
 * update. A slot holding it that is read later (by an instruction or fused
 * group after the update, a region, or as a result) keeps its ref: that
 * reader must see the value as it was read (eager's read is a snapshot),
 * so the update then makes a new tensor. */
static bool in_place_ok(GRun *x, const PInstr *c, const PInstr *pc, const tfe_meta *m, const tfe_tensor *w)
{
    if (!w || w->node || w->weak || !w->storage || w->storage->device != 0 || w->storage->refcount != 1) return false;
    if (w->dtype != m->dtype || w->rank != m->rank) return false;
    for (int d = 0; d < w->rank; d++)
        if (w->shape[d] != m->shape[d]) return false;
    if (!tensor_is_contiguous(w)) return false;
    int refs = 1;
    for (int k = 0; k < pc->nin; k++) {
        bool dup = false;
        for (int j = 0; j < k; j++) dup |= pc->in[j] == pc->in[k];
        refs += !dup && x->v[pc->in[k]] == w && dies_at(c, pc->in[k]);
    }
    return w->refcount == refs;
}

int grun_update(GRun *x, PInstr *c)
{
    ExecPlan *p = x->plan;
    PInstr *pc = &p->code[c->prod];
    const GNode *h = &x->g->nodes[c->node], *pn = &x->g->nodes[pc->node];
    tfe_tensor **slot = NULL;
    int mode = x->keep ? 0 : graph_host.var_update(x->host, h, &slot);
    if (mode == c->mode && slot && in_place_ok(x, c, pc, &pn->meta[0], *slot)) {
        tfe_tensor *w = *slot;
        tfe_tensor *inb[17], **in = pc->nin < 17 ? inb : xmalloc(sizeof *in * (size_t)(pc->nin + 1));
        in[0] = w;
        for (int k = 0; k < pc->nin; k++) in[k + 1] = x->v[pc->in[k]];
        /* plain SGD's w - lr * g: one AVX-512 pass where it can (same bits) */
        int rc;
        if (!tfe_axpy_exec(&c->upd_axpy, in, pc->nin + 1, w, &rc)) rc = tfe_fused_exec(c->upd, in, w);
        if (in != inb) free(in);
        x->nops += 2;
        if (!rc) return graph_host.var_updated ? graph_host.var_updated(x, h, w) : 0;
        /* the fused VM fails only before it writes (bad input, out of
         * memory) or when interrupted: eager's error is the same kind */
        return graph_host.node_error ? graph_host.node_error(x, pn, tfe_error_msg()) : -1;
    }
    if (grun_plan_instr(x, pc)) return -1;
    return grun_node(x, c->node);
}
