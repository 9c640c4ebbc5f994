/* opt_fuse.c — elementwise fusion: a tree of float elementwise ops whose
 * intermediate values nothing else reads becomes one G_FUSED node, run by
 * tensor/fused.c as one loop over the data with no intermediate tensors.
 *
 * A group has one result (its root). A member's inputs are other members, or
 * the group's inputs: values of the program's dtype that broadcast to the
 * result's shape (NumPy rules), or one-element weak constants, which become
 * immediates. Each instruction is the op the unfused graph ran, in the same
 * dtype and order, so results are bitwise equal to the unfused graph's
 * (tensor/fused.h). Random ops, comparisons, casts and ints are not fused.
 *
 * A sum or mean over trailing axes whose input is such a group (read by
 * nothing else) joins it as a final reduction: the VM sums each row of the
 * group's values as k_reduce would sum the materialised tensor, so even the
 * reduction is bitwise the unfused one, and the tensor is never made. The
 * fused node then keeps the reduction's op and attrs (n->op, n->at). */
#include <stdlib.h>
#include <string.h>
#include "stage/opt.h"
#include "tensor/fused.h"
#include "tensor/xalloc.h"

tfe_op opt_op_of_fop(int fop)
{
    static int table[FOP_COUNT];
    static bool made;
    if (!made) {
        for (int f = 0; f < FOP_COUNT; f++) table[f] = -1;
        for (int op = 0; op < TFE_NOPS; op++) {
            int f = tfe_fop_of_op((tfe_op)op);
            if (f >= 0 && f < FOP_COUNT && table[f] < 0) table[f] = op;
        }
        made = true;
    }
    return fop >= 0 && fop < FOP_COUNT ? (tfe_op)table[fop] : (tfe_op)-1;
}

/* Can node id be a member of a group of this dtype and result shape? */
static bool fusable(const Graph *g, int id)
{
    const GNode *n = &g->nodes[id];
    if (n->kind != G_OP || n->nout != 1 || n->nin < 1 || n->nin > 2) return false;
    const tfe_opinfo *info = &tfe_ops[n->op];
    if (!(info->flags & F_ELEMWISE) || (info->flags & (F_RANDOM | F_COMPARISON | F_NODIFF))) return false;
    if (tfe_fop_of_op(n->op) < 0) return false;
    const tfe_meta *m = &n->meta[0];
    if (m->dtype != TFE_FLOAT32 && m->dtype != TFE_FLOAT64) return false;
    /* every input of the op's dtype (or a weak one-element constant, which
     * the op converts to it exactly as the program does) */
    for (int k = 0; k < n->nin; k++) {
        const tfe_meta *im = &g->nodes[n->in[k].node].meta[n->in[k].out];
        if (im->dtype == m->dtype) continue;
        const tfe_tensor *c = opt_const(g, n->in[k]);
        if (!(c && c->weak && tensor_numel(c) == 1)) return false;
    }
    return true;
}

static bool same_shape(const tfe_meta *a, const tfe_meta *b)
{
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

typedef struct Group {
    int *members;        /* node ids, ascending at the end */
    int n, cap;
} Group;

static void group_add(Group *gr, int id)
{
    if (gr->n == gr->cap) {
        gr->cap = gr->cap ? gr->cap * 2 : 8;
        gr->members = xrealloc(gr->members, sizeof *gr->members * (size_t)gr->cap);
    }
    gr->members[gr->n++] = id;
}

static bool in_group(const Group *gr, int id)
{
    for (int i = 0; i < gr->n; i++)
        if (gr->members[i] == id) return true;
    return false;
}

/* Uses of each value: node inputs (in any region) and region results. */
static int *count_uses(const Graph *g)
{
    int *uses = xcalloc((size_t)g->nvals + 1, sizeof *uses);
    for (int i = 0; i < g->n; i++)
        for (int k = 0; k < g->nodes[i].nin; k++) uses[g->nodes[g->nodes[i].in[k].node].vbase + g->nodes[i].in[k].out]++;
    for (int r = 0; r < g->nregions; r++)
        for (int k = 0; k < g->regions[r].nouts; k++)
            uses[g->nodes[g->regions[r].outs[k].node].vbase + g->regions[r].outs[k].out]++;
    return uses;
}

/* Grow the group from member id: a producer joins when it is fusable, in the
 * same region, of the same dtype and result shape, and read only by members. */
static void grow(const Graph *g, Group *gr, int id, const int *uses, bool *taken, const tfe_meta *root)
{
    const GNode *n = &g->nodes[id];
    for (int k = 0; k < n->nin; k++) {
        int p = n->in[k].node;
        if (taken[p] || in_group(gr, p) || !fusable(g, p)) continue;
        const GNode *pn = &g->nodes[p];
        if (pn->region != n->region || pn->meta[0].dtype != root->dtype || !same_shape(&pn->meta[0], root)) continue;
        /* every use of p must come from the group (counted over its members) */
        int inside = 0;
        for (int i = 0; i < gr->n; i++) {
            const GNode *m = &g->nodes[gr->members[i]];
            for (int j = 0; j < m->nin; j++) inside += m->in[j].node == p;
        }
        if (inside != uses[pn->vbase]) continue;
        group_add(gr, p);
        grow(g, gr, p, uses, taken, root);
    }
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

/* Registers: the code is first written with a new (virtual) register for
 * every value, then each gets a real one that is free again after its last
 * use, so a long chain needs a few registers, not one per op (a register is
 * a chunk of TFE_FUSED_CHUNK elements: they should stay in cache). */
static int allocate_registers(tfe_finstr *code, int ncode, int nvirt, int *result)
{
    int *last = xmalloc(sizeof *last * (size_t)(nvirt + 1)), *phys = xmalloc(sizeof *phys * (size_t)(nvirt + 1));
    int *free_list = xmalloc(sizeof *free_list * (size_t)(nvirt + 1));
    for (int v = 0; v < nvirt; v++) last[v] = -1, phys[v] = -1;
    for (int i = 0; i < ncode; i++) {
        int na = tfe_fop_nargs(code[i].op);
        if (na >= 1) last[code[i].a] = i;
        if (na >= 2) last[code[i].b] = i;
    }
    last[*result] = ncode; /* the result lives to the end */
    int nfree = 0, nphys = 0;
    for (int i = 0; i < ncode; i++) {
        tfe_finstr *in = &code[i];
        int na = tfe_fop_nargs(in->op);
        int a = in->a, b = in->b;
        if (na >= 1) in->a = (int16_t)phys[a];
        if (na >= 2) in->b = (int16_t)phys[b];
        /* operands read for the last time here free their registers first
         * (dst may be an operand: instructions run element-wise in place) */
        if (na >= 1 && last[a] == i) free_list[nfree++] = phys[a];
        if (na >= 2 && last[b] == i && b != a) free_list[nfree++] = phys[b];
        int d = in->dst;
        phys[d] = nfree ? free_list[--nfree] : nphys++;
        in->dst = (int16_t)phys[d];
    }
    *result = phys[*result];
    free(last);
    free(phys);
    free(free_list);
    return nphys;
}

/* Is node id a sum or mean over the trailing axes of a value a group could
 * compute? *red_axes: how many axes it reduces. */
static bool reducible(const Graph *g, int id, const int *uses, const bool *taken, int *red_axes)
{
    const GNode *n = &g->nodes[id];
    if (n->kind != G_OP || (n->op != OP_SUM && n->op != OP_MEAN) || n->nin != 1 || !n->at) return false;
    int p = n->in[0].node;
    const GNode *pn = &g->nodes[p];
    if (taken[p] || !fusable(g, p) || pn->region != n->region || uses[pn->vbase] != 1) return false;
    const tfe_meta *pm = &pn->meta[0];
    if (n->meta[0].dtype != pm->dtype) return false;
    unsigned mask = 0;
    if (n->at->naxes < 0) mask = pm->rank ? (1u << pm->rank) - 1 : 0;
    for (int i = 0; i < n->at->naxes; i++) {
        int64_t a = n->at->axes[i] < 0 ? n->at->axes[i] + pm->rank : n->at->axes[i];
        if (a < 0 || a >= pm->rank || (mask & (1u << a))) return false;
        mask |= 1u << a;
    }
    if (n->at->naxes == 0) return false;
    int k = 0; /* the mask must be the last k axes */
    while (k < pm->rank && (mask & (1u << (pm->rank - 1 - k)))) k++;
    if (mask != (k ? ((1u << pm->rank) - 1) & ~((1u << (pm->rank - k)) - 1) : 0u)) return false;
    *red_axes = k;
    return true;
}

/* Turn root into a G_FUSED node computing the group (and, when red is not
 * TFE_FRED_NONE, root's reduction of it over its last red_axes axes). */
static void fuse(Graph *g, Group *gr, int root, int red, int red_axes)
{
    qsort(gr->members, (size_t)gr->n, sizeof *gr->members, cmp_int);
    const tfe_meta *rm = &g->nodes[root].meta[0];
    tfe_finstr *code = xcalloc((size_t)(gr->n * 3 + 4), sizeof *code);
    GRef *ins = xcalloc((size_t)(gr->n * 2 + 1), sizeof *ins);
    int *in_reg = xcalloc((size_t)(gr->n * 2 + 1), sizeof *in_reg);
    double *imms = xcalloc((size_t)(gr->n * 2 + 1), sizeof *imms);
    int *imm_reg = xcalloc((size_t)(gr->n * 2 + 1), sizeof *imm_reg);
    int nins = 0, nimms = 0, ncode = 0, nvirt = 0;
    int *reg_of = xcalloc((size_t)gr->n + 1, sizeof *reg_of); /* gr->n >= 1 */
    for (int i = 0; i < gr->n; i++) {
        const GNode *n = &g->nodes[gr->members[i]];
        int args[2] = {0, 0};
        for (int k = 0; k < n->nin; k++) {
            GRef r = n->in[k];
            int member = -1;
            for (int j = 0; j < i; j++)
                if (gr->members[j] == r.node) member = j;
            if (member >= 0) {
                args[k] = reg_of[member];
                continue;
            }
            const tfe_tensor *c = opt_const(g, r);
            if (c && tensor_numel(c) == 1 && c->storage) { /* an immediate, one register per value */
                double v = dtype_is_float(c->dtype) ? tensor_get_f64(c, 0) : (double)tensor_get_i64(c, 0);
                int slot = -1;
                for (int j = 0; j < nimms; j++)
                    if (!memcmp(&imms[j], &v, sizeof v)) slot = j;
                if (slot < 0) {
                    slot = nimms++;
                    imms[slot] = v;
                    imm_reg[slot] = nvirt;
                    code[ncode++] = (tfe_finstr){.op = FOP_CONST, .dst = (int16_t)nvirt++, .imm = v};
                }
                args[k] = imm_reg[slot];
                continue;
            }
            int slot = -1;
            for (int j = 0; j < nins; j++)
                if (ins[j].node == r.node && ins[j].out == r.out) slot = j;
            if (slot < 0) { /* an input, loaded once where it is first needed */
                slot = nins++;
                ins[slot] = r;
                in_reg[slot] = nvirt;
                code[ncode++] = (tfe_finstr){.op = FOP_LOAD, .dst = (int16_t)nvirt++, .input = (int16_t)slot};
            }
            args[k] = in_reg[slot];
        }
        code[ncode++] = (tfe_finstr){.op = (uint8_t)tfe_fop_of_op(n->op), .a = (int16_t)args[0],
                                     .b = (int16_t)(n->nin > 1 ? args[1] : 0), .dst = (int16_t)nvirt};
        reg_of[i] = nvirt++;
    }
    int result = reg_of[gr->n - 1];
    int nregs = allocate_registers(code, ncode, nvirt, &result);
    tfe_fprog *p = xcalloc(1, sizeof *p);
    p->dtype = rm->dtype;
    p->red = red;
    p->red_axes = red_axes;
    p->rank = g->nodes[gr->members[gr->n - 1]].meta[0].rank;
    p->ninputs = nins;
    p->nregs = nregs;
    p->ninstr = ncode;
    p->code = code;
    p->result = result;
    free(reg_of);
    free(in_reg);
    free(imms);
    free(imm_reg);
    /* the root becomes the fused node (it keeps its id, meta, location) */
    GNode *r = &g->nodes[root];
    free(r->in);
    if (!red) {
        free(r->at);
        r->at = NULL;
    }
    r->kind = G_FUSED;
    r->in = ins;
    r->nin = nins;
    r->prog = p;
}

int opt_fuse(Graph *g, OptReport *rep)
{
    int *uses = count_uses(g);
    bool *taken = xcalloc((size_t)g->n + 1, 1);
    int groups = 0;
    for (int id = g->n - 1; id >= 0; id--) {
        int red_axes;
        if (!taken[id] && reducible(g, id, uses, taken, &red_axes)) {
            int p = g->nodes[id].in[0].node;
            Group gr = {0};
            group_add(&gr, p);
            tfe_meta root = g->nodes[p].meta[0];
            grow(g, &gr, p, uses, taken, &root);
            if (gr.n <= 4000) {
                for (int i = 0; i < gr.n; i++) taken[gr.members[i]] = true;
                taken[id] = true;
                fuse(g, &gr, id, g->nodes[id].op == OP_SUM ? TFE_FRED_SUM : TFE_FRED_MEAN, red_axes);
                groups++;
                rep->fused_ops += gr.n + 1;
            }
            free(gr.members);
            continue;
        }
        if (taken[id] || !fusable(g, id)) continue;
        Group gr = {0};
        group_add(&gr, id);
        tfe_meta root = g->nodes[id].meta[0];
        grow(g, &gr, id, uses, taken, &root);
        if (gr.n >= 2 && gr.n <= 4000) {
            for (int i = 0; i < gr.n; i++) taken[gr.members[i]] = true;
            fuse(g, &gr, id, TFE_FRED_NONE, 0); /* sorts members: the root (the largest id) is last */
            groups++;
            rep->fused_ops += gr.n;
        }
        free(gr.members);
    }
    rep->fused_groups += groups;
    free(uses);
    free(taken);
    return groups;
}
