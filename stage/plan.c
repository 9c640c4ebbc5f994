/* plan.c — placing a graph's intermediates in one arena by liveness.
 *
 * A value is planned when an op of the top region makes it (not a view, not
 * a data-dependent shape, not a random draw), its shape is fully known, and
 * only ops and fused nodes of the top region read it: not a result of the
 * graph (results outlive the call, the arena does not), not a host call's
 * argument (it could keep it), not a value a cond/while region reads, and
 * not the input of a view op (the view would share its bytes). Walking the
 * top region in order, a planned output takes a free block (first fit) or
 * the end of the arena, and the blocks of the inputs read for the last time
 * are freed after it, so an output never overlaps what it is computed from. */
#include <stdlib.h>
#include <string.h>
#include "stage/plan.h"

typedef struct Block { int64_t off, size; } Block;

static int64_t align64(int64_t n) { return (n + 63) & ~(int64_t)63; }

static bool plannable_op(const GNode *n)
{
    if (n->kind == G_FUSED) return n->nout == 1;
    if (n->kind != G_OP || n->nout != 1) return false;
    unsigned f = tfe_ops[n->op].flags;
    return !(f & (F_VIEW | F_SELFOUT | F_RANDOM));
}

ExecPlan *exec_plan_build(const Graph *g)
{
    const GRegion *top = &g->regions[0];
    /* a relaxed graph: shapes change from call to call */
    for (int i = 0; i < g->ninputs; i++) {
        const tfe_meta *m = &g->nodes[g->inputs[i]].meta[0];
        for (int d = 0; d < m->rank; d++)
            if (m->shape[d] < 0) return NULL;
    }
    int nv = g->nvals;
    /* where each value is last read in the top region, and whether anything
     * else reads it */
    int *last = malloc(sizeof *last * (size_t)(nv + 1));
    bool *ok = malloc(sizeof *ok * (size_t)(nv + 1));
    for (int s = 0; s < nv; s++) last[s] = -1, ok[s] = false;
    for (int i = 0; i < top->n; i++) {
        const GNode *n = &g->nodes[top->nodes[i]];
        if (plannable_op(n)) {
            const tfe_meta *m = &n->meta[0];
            bool known = m->dtype < TFE_FLOAT16;
            for (int d = 0; d < m->rank; d++) known &= m->shape[d] >= 0;
            ok[n->vbase] = known;
        }
    }
    for (int id = 0; id < g->n; id++) {
        const GNode *n = &g->nodes[id];
        bool reader_ok = n->region == 0 && plannable_op(n);
        for (int k = 0; k < n->nin; k++) {
            int s = g->nodes[n->in[k].node].vbase + n->in[k].out;
            if (!reader_ok) ok[s] = false;
        }
    }
    for (int r = 0; r < g->nregions; r++)
        for (int k = 0; k < g->regions[r].nouts; k++)
            ok[g->nodes[g->regions[r].outs[k].node].vbase + g->regions[r].outs[k].out] = false;
    for (int i = 0; i < top->n; i++) {
        const GNode *n = &g->nodes[top->nodes[i]];
        for (int k = 0; k < n->nin; k++) last[g->nodes[n->in[k].node].vbase + n->in[k].out] = i;
    }
    ExecPlan *p = calloc(1, sizeof *p);
    p->nslots = nv;
    p->offset = malloc(sizeof *p->offset * (size_t)(nv + 1));
    for (int s = 0; s < nv; s++) p->offset[s] = -1;
    Block *freeb = malloc(sizeof *freeb * (size_t)(nv + 1));
    int nfree = 0;
    int64_t end = 0;
    for (int i = 0; i < top->n; i++) {
        const GNode *n = &g->nodes[top->nodes[i]];
        int s = n->vbase;
        if (n->nout == 1 && ok[s] && last[s] > i) {
            const tfe_meta *m = &n->meta[0];
            int64_t size = align64((int64_t)dtype_size(m->dtype) * shape_numel(m->rank, m->shape));
            if (size == 0) size = 64;
            int best = -1;
            for (int b = 0; b < nfree; b++)
                if (freeb[b].size >= size && (best < 0 || freeb[b].size < freeb[best].size)) best = b;
            if (best >= 0) {
                p->offset[s] = freeb[best].off;
                freeb[best].off += size;
                freeb[best].size -= size;
            } else {
                p->offset[s] = end;
                end += size;
            }
            p->sum_bytes += (size_t)size;
            p->nplanned++;
        }
        /* inputs read here for the last time free their blocks (after the
         * output took its own: an output never overlaps its inputs) */
        for (int k = 0; k < n->nin; k++) {
            int is = g->nodes[n->in[k].node].vbase + n->in[k].out;
            if (p->offset[is] < 0 || last[is] != i) continue;
            bool dup = false; /* the same input twice */
            for (int j = 0; j < k; j++) dup |= g->nodes[n->in[j].node].vbase + n->in[j].out == is;
            if (dup) continue;
            const tfe_meta *m = &g->nodes[n->in[k].node].meta[n->in[k].out];
            int64_t size = align64((int64_t)dtype_size(m->dtype) * shape_numel(m->rank, m->shape));
            freeb[nfree++] = (Block){p->offset[is], size ? size : 64};
        }
    }
    p->arena_bytes = (size_t)end;
    free(freeb);
    free(last);
    free(ok);
    if (!p->nplanned) {
        exec_plan_free(p);
        return NULL;
    }
    return p;
}

void exec_plan_free(ExecPlan *p)
{
    if (!p) return;
    if (p->arena) tensor_decref(p->arena);
    free(p->offset);
    free(p);
}

tfe_tensor *exec_plan_tensor(ExecPlan *p, int slot, const tfe_meta *m)
{
    if (slot >= p->nslots || p->offset[slot] < 0) return NULL;
    if (!p->arena) {
        int64_t n = (int64_t)p->arena_bytes;
        if (!(p->arena = tensor_new(TFE_BOOL, 1, &n))) {
            tfe_error_clear();
            return NULL;
        }
    }
    int64_t strides[TFE_MAX_RANK], st = (int64_t)dtype_size(m->dtype);
    for (int d = m->rank - 1; d >= 0; d--) {
        strides[d] = st;
        st *= m->shape[d];
    }
    tfe_tensor *t = tensor_view(p->arena, m->rank, m->shape, strides, p->arena->offset + p->offset[slot]);
    if (!t) return NULL;
    t->dtype = m->dtype;
    t->weak = m->weak;
    return t;
}
