/* sched.c — the concurrent pairs of a plan (graph/sched.h).
 *
 * With an idle core, two independent GEMMs that are each too small to gain
 * from OpenBLAS's second thread (tfe_blas_gemm_threads gives them one) but
 * big enough to pay for waking a pool thread (PAIR_MIN multiply-adds each)
 * run at once, one per core: the data and weight gradients of a layer in an
 * MLP's backward. A pair (i, j), i < j in program order, runs at j's place:
 * i is delayed to it. It is a pair only when
 *  - both are matmul PI_KERNELs of float32 or float64 on inputs of that dtype;
 *  - nothing in (i, j] reads i's result (j does not depend on i);
 *  - every instruction in between is a view op on static values (the
 *    transposes autodiff puts there): pure and unable to fail, so delaying i
 *    moves it past no effect and past no error, and the executor reports
 *    i's error before j's: the first in program order, as before;
 *  - neither makes a fused update's operand (PInstr.defer), and no value i
 *    reads is released in between (PInstr.drop);
 *  - the arena agrees: the planner placed values for program order, so i's
 *    inputs (which may die at i and give their bytes away) must share none
 *    with a value written in (i, j], nor i's output with one touched there.
 * The bits are those of the sequential run: each GEMM runs alone on its
 * thread with one OpenBLAS thread, the count its size gives it anyway.
 * Why only GEMMs, and only pairs: docs/optimizer.md, "Concurrency". */
#include <stdlib.h>
#include "graph/sched.h"
#include "tensor/blas.h"
#include "util/xalloc.h"

/* each GEMM of a pair: about 20 µs or more on one core, the price of a
 * pool thread's wake-up (bench/pool_handoff.c) */
#define PAIR_MIN ((int64_t)1 << 20)
/* how far apart the two may be (the views between them) */
#define PAIR_WINDOW 4

typedef struct Ctx {
    const ExecPlan *p;
    const Graph *g;
    const tfe_meta **meta; /* by slot */
    int *prod;             /* by slot: the producing instruction, or -1 */
} Ctx;

/* The input slot k of instruction c (also for a PI_NODE). */
static int in_slot(const Ctx *x, const PInstr *c, int k)
{
    const GNode *n = &x->g->nodes[c->node];
    return x->g->nodes[n->in[k].node].vbase + n->in[k].out;
}

static int64_t slot_bytes(const Ctx *x, int s)
{
    const tfe_meta *m = x->meta[s];
    return m ? (int64_t)dtype_size(m->dtype) * shape_numel(m->rank, m->shape) : 0;
}

static bool overlap(const Ctx *x, int s, int t)
{
    int64_t a = x->p->offset[s], b = x->p->offset[t];
    if (a < 0 || b < 0) return false;
    return a < b + slot_bytes(x, t) && b < a + slot_bytes(x, s);
}

/* A matmul worth running beside another: its GEMMs run with one thread
 * and are big enough. */
static bool candidate(const Ctx *x, const PInstr *c)
{
    const GNode *n = &x->g->nodes[c->node];
    if (c->kind != PI_KERNEL || c->defer || n->kind != G_OP || n->op != OP_MATMUL || c->nin != 2) return false;
    const tfe_meta *o = &n->meta[0], *a = x->meta[c->in[0]], *b = x->meta[c->in[1]];
    if ((o->dtype != TFE_FLOAT32 && o->dtype != TFE_FLOAT64) || !a || !b) return false;
    if (a->dtype != o->dtype || b->dtype != o->dtype || a->rank < 1 || b->rank < 1) return false;
    /* one GEMM's m, n, k as k_matmul computes them (kernels_linalg.c) */
    int64_t m = a->rank >= 2 ? a->shape[a->rank - 2] : 1, k = a->shape[a->rank - 1];
    int64_t nn = b->rank >= 2 ? b->shape[b->rank - 1] : 1;
    if ((double)m * (double)nn * (double)k < (double)PAIR_MIN) return false;
    return tfe_blas_gemm_threads(m, nn, k) == 1;
}

/* A view op whose inputs are static: it does not fail and has no effect. */
static bool quiet_view(const Ctx *x, const PInstr *c)
{
    const GNode *n = &x->g->nodes[c->node];
    if (c->kind != PI_NODE || n->kind != G_OP || n->half) return false;
    unsigned f = tfe_ops[n->op].flags;
    if (!(f & F_VIEW) || (f & (F_SELFOUT | F_RANDOM | F_COLLECTIVE))) return false;
    for (int k = 0; k < n->nin; k++) {
        int s = in_slot(x, c, k), pi = x->prod[s];
        int kind = x->g->nodes[n->in[k].node].kind;
        bool stat = pi >= 0 ? x->p->code[pi].kind != PI_NODE
                            : kind == G_INPUT || kind == G_CONST;
        if (pi >= 0 && x->g->nodes[x->p->code[pi].node].kind == G_VAR_READ) stat = true;
        if (!stat) return false;
    }
    return true;
}

/* May i be delayed to run with j (see the top)? */
static bool pairable(const Ctx *x, int i, int j)
{
    const PInstr *ci = &x->p->code[i];
    for (int t = i + 1; t <= j; t++) {
        const PInstr *c = &x->p->code[t];
        const GNode *n = &x->g->nodes[c->node];
        if (t < j && !quiet_view(x, c)) return false;
        /* a value i reads must not be released before i runs (PInstr.drop:
         * an instruction in between may be its last reader in program order) */
        for (int d = 0; t < j && d < c->ndrop; d++)
            for (int q = 0; q < ci->nin; q++)
                if (c->drop[d] == ci->in[q]) return false;
        for (int k = 0; k < n->nin; k++) {
            int s = in_slot(x, c, k);
            if (s == ci->out || overlap(x, s, ci->out)) return false;
        }
        for (int k = 0; k < n->nout; k++) {
            int s = n->vbase + k;
            if (overlap(x, s, ci->out)) return false;
            for (int q = 0; q < ci->nin; q++)
                if (overlap(x, s, ci->in[q])) return false;
        }
    }
    return true;
}

void sched_pairs(ExecPlan *p, const Graph *g)
{
    if (tfe_num_threads() < 2 || p->ncode < 2) return;
    Ctx x = {.p = p, .g = g};
    x.meta = xcalloc((size_t)g->nvals + 1, sizeof *x.meta);
    x.prod = xmalloc(sizeof *x.prod * (size_t)(g->nvals + 1));
    for (int s = 0; s < g->nvals; s++) x.prod[s] = -1;
    for (int id = 0; id < g->n; id++)
        for (int k = 0; k < g->nodes[id].nout; k++) x.meta[g->nodes[id].vbase + k] = &g->nodes[id].meta[k];
    for (int i = 0; i < p->ncode; i++) {
        const GNode *n = &g->nodes[p->code[i].node];
        for (int k = 0; k < n->nout; k++) x.prod[n->vbase + k] = i;
    }
    for (int i = 0; i < p->ncode; i++) {
        if (p->code[i].pair || !candidate(&x, &p->code[i])) continue;
        for (int j = i + 1; j < p->ncode && j <= i + PAIR_WINDOW; j++) {
            if (!p->code[j].pair && candidate(&x, &p->code[j]) && pairable(&x, i, j)) {
                p->code[i].pair = j + 1;
                p->code[j].pair = i + 1;
                p->npairs++;
                break;
            }
            if (!quiet_view(&x, &p->code[j])) break;
        }
    }
    free(x.meta);
    free(x.prod);
}
