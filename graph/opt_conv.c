/* opt_conv.c — conv epilogues: conv2d(x, w) + b, and relu of that, become one
 * conv2d_bias or conv2d_bias_relu op (tensor/ops_nn.def), whose kernel adds
 * the bias and applies relu where it writes the conv's output (in the GEMM's
 * registers, or to each chunk's rows while they are in cache), instead of two
 * more passes over the activations (tensor/kernels_nn.c).
 *
 * Bitwise: the kernel computes the conv's sums as conv2d does, then the add
 * (in the program's operand order) and relu with their own formulas.
 *
 * Only where nothing else can see the difference: the conv's output is read
 * by the add alone, the add's (when relu joins) by the relu alone (a
 * backward's relu mask reads relu's output instead: opt_relu_masks), the
 * bias is a (Cout,) vector of the conv's dtype read by the add alone, the
 * add's result has the conv's dtype and shape, all three are in one region,
 * and none can fail at run time (a relaxed trace's unknown sizes: the error
 * is then eager's, from the op that makes it). Not while a GPU is in use:
 * these ops have no GPU kernel, and conv2d's runs there. */
#include <stdlib.h>
#include "graph/opt.h"
#include "tensor/device.h"
#include "util/xalloc.h"

/* Per value: how many node inputs and region results read it, and, when
 * one node input is the only reader, which node (-1: none or several, or
 * a region result). */
static void readers(const Graph *g, int *uses, int *reader)
{
    for (int v = 0; v <= g->nvals; v++) uses[v] = 0, reader[v] = -1;
    for (int i = 0; i < g->n; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) {
            int v = g->nodes[g->nodes[i].in[k].node].vbase + g->nodes[i].in[k].out;
            reader[v] = uses[v]++ ? -1 : i;
        }
    for (int r = 0; r < g->nregions; r++)
        for (int k = 0; k < g->regions[r].nouts; k++) {
            int v = g->nodes[g->regions[r].outs[k].node].vbase + g->regions[r].outs[k].out;
            uses[v]++;
            reader[v] = -1;
        }
}

static const tfe_meta *meta_of(const Graph *g, GRef r) { return &g->nodes[r.node].meta[r.out]; }

static bool is_op(const GNode *n, tfe_op op, int nin)
{
    return n->kind == G_OP && n->op == op && n->nin == nin && n->nout == 1;
}

/* Is the add node a (one input the conv, the other the bias) of the kind
 * that fuses? *k: the conv's position in the add (0 or 1). */
static bool conv_add(const Graph *g, int a, const int *uses, const bool *unc, int *k)
{
    const GNode *an = &g->nodes[a];
    if (!is_op(an, OP_ADD, 2)) return false; /* (a node without outputs has no metas) */
    const tfe_meta *am = &an->meta[0];
    if ((am->dtype != TFE_FLOAT32 && am->dtype != TFE_FLOAT64) || am->weak) return false;
    for (*k = 0; *k < 2; (*k)++) {
        GRef c = an->in[*k], b = an->in[1 - *k];
        const GNode *cn = &g->nodes[c.node];
        if (!is_op(cn, OP_CONV2D, 2) || cn->region != an->region || uses[cn->vbase] != 1) continue;
        const tfe_meta *cm = &cn->meta[0], *bm = meta_of(g, b);
        if (!opt_same_meta(cm, am) || cm->rank != 4) continue;
        if (bm->rank != 1 || bm->dtype != am->dtype || bm->weak || bm->shape[0] != cm->shape[3] ||
            uses[g->nodes[b.node].vbase + b.out] != 1)
            continue;
        if (opt_may_fail(g, c.node, unc) || opt_may_fail(g, a, unc)) continue;
        return true;
    }
    return false;
}

int opt_conv(Graph *g)
{
    if (tfe_devices_used) return 0;
    opt_relu_masks(g);
    int *uses = xmalloc(sizeof *uses * ((size_t)g->nvals + 1));
    int *reader = xmalloc(sizeof *reader * ((size_t)g->nvals + 1));
    readers(g, uses, reader);
    bool *unc = opt_uncertain_dims(g);
    int nrw = 0;
    for (int a = 0; a < g->n; a++) {
        int k;
        if (!conv_add(g, a, uses, unc, &k)) continue;
        GNode *an = &g->nodes[a];
        int conv = an->in[k].node, root = a;
        GRef bias = an->in[1 - k];
        int r = reader[an->vbase];
        if (r >= 0 && uses[an->vbase] == 1 && is_op(&g->nodes[r], OP_RELU, 1) &&
            g->nodes[r].region == an->region && opt_same_meta(&g->nodes[r].meta[0], &an->meta[0]) &&
            !opt_may_fail(g, r, unc))
            root = r;
        const GNode *cn = &g->nodes[conv];
        GNode *rn = &g->nodes[root];
        /* the conv's attributes with its defaults made explicit (ops_nn.def) */
        tfe_attrs *at = xmalloc(sizeof *at);
        *at = *cn->at;
        const int64_t dflt[5] = {1, 1, 1, 1, 0};
        for (int i = at->nints; i < 5; i++) at->ints[i] = dflt[i];
        at->ints[5] = k == 1; /* the bias was the add's first operand */
        at->nints = 6;
        GRef in[3] = {cn->in[0], cn->in[1], bias};
        free(rn->in);
        rn->in = xmalloc(sizeof in);
        mem_copy(rn->in, in, sizeof in);
        rn->nin = 3;
        free(rn->at);
        rn->at = at;
        rn->op = root == a ? OP_CONV2D_BIAS : OP_CONV2D_BIAS_RELU;
        /* the conv's line: the op's errors would be conv2d's */
        rn->loc = cn->loc;
        rn->frames = cn->frames;
        nrw++;
        /* the conv and the add (when relu is the root) are now read by
         * nothing: dce removes them */
    }
    free(unc);
    free(uses);
    free(reader);
    return nrw;
}
