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
 * fused node then keeps the reduction's op and attrs (n->op, n->at).
 *
 * Before grouping, relu's mask moves to relu's output (opt_relu_masks): a
 * backward's `a > 0` becomes `relu(a) > 0`, the same bools, so the forward's
 * pre-activation `a = x @ w + b` is read by relu alone and the bias add and
 * relu fuse into one pass over the matmul's output (the plan runs it in the
 * matmul output's own block: graph/plan.c). */
#include <stdlib.h>
#include <string.h>
#include "graph/opt.h"
#include "tensor/fused.h"
#include "util/xalloc.h"

/* The op an opcode computes: the opcode itself (tensor/fused.h), or -1 for
 * FOP_LOAD and FOP_CONST */
tfe_op opt_op_of_fop(int fop)
{
    return tfe_fop_nargs(fop) > 0 ? (tfe_op)fop : (tfe_op)-1;
}

/* Can node id be a member of a group of this dtype and result shape? */
static bool fusable(const Graph *g, int id, const bool *unc)
{
    const GNode *n = &g->nodes[id];
    if (n->kind != G_OP || n->nout != 1 || n->nin < 1 || n->nin > 2) return false;
    const tfe_opinfo *info = &tfe_ops[n->op];
    if (!(info->flags & F_ELEMWISE) || (info->flags & (F_RANDOM | F_COMPARISON | F_NODIFF | F_COLLECTIVE))) return false;
    if (tfe_fop_of_op(n->op) < 0) return false;
    /* an op that may fail (a relaxed trace's unknown dims that may not
     * broadcast) runs on its own, where eager would stop, with eager's error */
    if (opt_may_fail(g, id, unc)) return false;
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

/* The pass's working state, made once per graph so each group costs time in
 * its own size only (a chain of thousands of ops is one long group). */
typedef struct Fuser {
    const Graph *g;
    const int *uses;     /* uses of each value (count_uses) */
    bool *taken;         /* node ids already in a group */
    int *stamp;          /* per node id: the group it is a member of (gid) */
    int *inside;         /* per node id: its uses from members of the current group */
    int *stack;          /* members whose producers are still to look at */
    int *reg_of;         /* per node id: a member's register in fuse() */
    int *in_gid, *in_slot; /* per value: the group it is an input of, and its slot */
    bool *unc;           /* opt_uncertain_dims */
    int gid;             /* the current group (stamps start at 0: gid 0 is none) */
} Fuser;

typedef struct Group {
    int *members;        /* node ids, ascending at the end */
    int n, cap;
} Group;

/* At most this many ops in a group: its virtual registers (about three per
 * op) must fit the VM's 16-bit register numbers. */
enum { FUSE_MAX_OPS = 4000 };

static void group_add(Fuser *f, Group *gr, int id)
{
    if (gr->n == gr->cap) {
        gr->cap = gr->cap ? gr->cap * 2 : 8;
        gr->members = xrealloc(gr->members, sizeof *gr->members * (size_t)gr->cap);
    }
    gr->members[gr->n++] = id;
    f->stamp[id] = f->gid;
    const GNode *n = &f->g->nodes[id];
    for (int k = 0; k < n->nin; k++) f->inside[n->in[k].node]++;
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

/* Grow the group from its first member: a producer joins when it is fusable,
 * in the same region, of the same dtype and result shape, and read only by
 * members (its uses from members, counted as they join, are all its uses).
 * Depth first with a stack of our own (a chain may be thousands deep); at
 * most FUSE_MAX_OPS members (the producers left out become groups of their
 * own later). A producer read twice by the group may be met before its
 * second reader joins: it is looked at again from that reader. */
static void grow(Fuser *f, Group *gr, const tfe_meta *root)
{
    const Graph *g = f->g;
    int sp = 0;
    f->stack[sp++] = gr->members[0];
    while (sp > 0 && gr->n < FUSE_MAX_OPS) {
        const GNode *n = &g->nodes[f->stack[--sp]];
        for (int k = n->nin - 1; k >= 0 && gr->n < FUSE_MAX_OPS; k--) {
            int p = n->in[k].node;
            if (f->taken[p] || f->stamp[p] == f->gid || !fusable(g, p, f->unc)) continue;
            const GNode *pn = &g->nodes[p];
            if (pn->region != n->region || pn->meta[0].dtype != root->dtype || !same_shape(&pn->meta[0], root)) continue;
            if (f->inside[p] != f->uses[pn->vbase]) continue;
            group_add(f, gr, p);
            f->stack[sp++] = p;
        }
    }
}

/* Forget the current group's use counts (only its members' inputs were counted). */
static void group_clear(Fuser *f, const Group *gr)
{
    for (int i = 0; i < gr->n; i++) {
        const GNode *n = &f->g->nodes[gr->members[i]];
        for (int k = 0; k < n->nin; k++) f->inside[n->in[k].node] = 0;
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
static bool reducible(const Graph *g, int id, const int *uses, const bool *taken, const bool *unc, int *red_axes)
{
    const GNode *n = &g->nodes[id];
    if (n->kind != G_OP || (n->op != OP_SUM && n->op != OP_MEAN) || n->nin != 1 || !n->at) return false;
    int p = n->in[0].node;
    const GNode *pn = &g->nodes[p];
    if (taken[p] || !fusable(g, p, unc) || pn->region != n->region || uses[pn->vbase] != 1) return false;
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

/* The immediates of a group: one register per distinct value (bitwise),
 * found by an open-addressing hash table of the values' bits. */
typedef struct Imms { uint64_t *bits; int *reg; int cap; } Imms;

static int *imm_slot(Imms *t, double v, bool *fresh)
{
    uint64_t b;
    mem_copy(&b, &v, sizeof b);
    uint64_t h = b * 0x9E3779B97F4A7C15u;
    for (int i = (int)(h >> 40) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        if (t->reg[i] < 0) {
            t->bits[i] = b;
            *fresh = true;
            return &t->reg[i];
        }
        if (t->bits[i] == b) {
            *fresh = false;
            return &t->reg[i];
        }
    }
}

/* Turn root into a G_FUSED node computing the group (and, when red is not
 * TFE_FRED_NONE, root's reduction of it over its last red_axes axes). Members
 * and inputs are found through the Fuser's per-node arrays (reg_of: a member's
 * register once emitted; in_slot: a value's input slot in this group, valid
 * where in_gid is this group's), so a group costs time in its size only. */
static void fuse(Graph *g, Fuser *f, Group *gr, int root, int red, int red_axes)
{
    qsort(gr->members, (size_t)gr->n, sizeof *gr->members, cmp_int);
    const tfe_meta *rm = &g->nodes[root].meta[0];
    tfe_finstr *code = xcalloc((size_t)(gr->n * 3 + 4), sizeof *code);
    int *lines = xcalloc((size_t)(gr->n * 3 + 4), sizeof *lines); /* per instruction (graph.h) */
    GRef *ins = xcalloc((size_t)(gr->n * 2 + 1), sizeof *ins);
    int *in_reg = xcalloc((size_t)(gr->n * 2 + 1), sizeof *in_reg);
    Imms imms = {0};
    for (imms.cap = 16; imms.cap < gr->n * 4; imms.cap *= 2) {}
    imms.bits = xcalloc((size_t)imms.cap, sizeof *imms.bits);
    imms.reg = xmalloc(sizeof *imms.reg * (size_t)imms.cap);
    for (int i = 0; i < imms.cap; i++) imms.reg[i] = -1;
    int nins = 0, ncode = 0, nvirt = 0;
    for (int i = 0; i < gr->n; i++) f->reg_of[gr->members[i]] = -1;
    for (int i = 0; i < gr->n; i++) {
        const GNode *n = &g->nodes[gr->members[i]];
        int args[2] = {0, 0};
        for (int k = 0; k < n->nin; k++) {
            GRef r = n->in[k];
            if (f->stamp[r.node] == f->gid && f->reg_of[r.node] >= 0) { /* an earlier member */
                args[k] = f->reg_of[r.node];
                continue;
            }
            const tfe_tensor *c = opt_const(g, r);
            if (c && tensor_numel(c) == 1 && c->storage) { /* an immediate, one register per value */
                double v = dtype_is_float(c->dtype) ? tensor_get_f64(c, 0) : (double)tensor_get_i64(c, 0);
                bool fresh;
                int *reg = imm_slot(&imms, v, &fresh);
                if (fresh) {
                    *reg = nvirt;
                    code[ncode++] = (tfe_finstr){.op = FOP_CONST, .dst = (int16_t)nvirt++, .imm = v};
                }
                args[k] = *reg;
                continue;
            }
            int val = g->nodes[r.node].vbase + r.out;
            if (f->in_gid[val] != f->gid) { /* an input, loaded once where it is first needed */
                f->in_gid[val] = f->gid;
                f->in_slot[val] = nins;
                ins[nins] = r;
                in_reg[nins] = nvirt;
                code[ncode++] = (tfe_finstr){.op = FOP_LOAD, .dst = (int16_t)nvirt++, .input = (int16_t)nins};
                nins++;
            }
            args[k] = in_reg[f->in_slot[val]];
        }
        lines[ncode] = n->loc.src ? n->loc.line : 0;
        code[ncode++] = (tfe_finstr){.op = (uint16_t)tfe_fop_of_op(n->op), .a = (int16_t)args[0],
                                     .b = (int16_t)(n->nin > 1 ? args[1] : 0), .dst = (int16_t)nvirt};
        f->reg_of[gr->members[i]] = nvirt++;
    }
    int result = f->reg_of[gr->members[gr->n - 1]];
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
    free(in_reg);
    free(imms.bits);
    free(imms.reg);
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
    r->prov_known = false;
    r->sig_known = false;
    free(r->fused_lines);
    r->fused_lines = lines;
}

/* Make a group from its first member (start) and fuse it into root when it
 * has at least min_ops ops; returns whether it did. */
static bool try_group(Graph *g, Fuser *f, int start, int root, int red, int red_axes, int min_ops, OptReport *rep)
{
    Group gr = {0};
    f->gid++;
    group_add(f, &gr, start);
    tfe_meta rmeta = g->nodes[start].meta[0];
    grow(f, &gr, &rmeta);
    bool ok = gr.n >= min_ops;
    group_clear(f, &gr);
    if (ok) {
        for (int i = 0; i < gr.n; i++) f->taken[gr.members[i]] = true;
        f->taken[root] = true;
        fuse(g, f, &gr, root, red, red_axes); /* sorts members: the largest id (start) is last */
        rep->fused_ops += gr.n + (root != start);
    }
    free(gr.members);
    return ok;
}

/* Is r a one-element float constant holding zero (either sign)? */
static bool const_zero(const Graph *g, GRef r)
{
    const tfe_tensor *c = opt_const(g, r);
    return c && c->storage && tensor_numel(c) == 1 && dtype_is_float(c->dtype) && tensor_get_f64(c, 0) == 0.0;
}

/* greater(a, 0) -> greater(relu(a), 0), and relu_grad(dy, a) ->
 * relu_grad(dy, relu(a)), where relu(a) is computed before it
 * in the same region: relu(a) > 0 exactly when a > 0 (relu keeps a positive
 * a, makes the rest 0 and keeps NaN, which is not > 0 either way). The
 * backward of relu(x @ w + b) reads the pre-activation only through that
 * mask; after this, only relu reads it, so the add and relu fuse. Returns
 * the number of rewrites. */
int opt_relu_masks(Graph *g)
{
    int *relu_of = xmalloc(sizeof *relu_of * ((size_t)g->n + 1)); /* by node: its first relu reader */
    for (int i = 0; i < g->n; i++) relu_of[i] = -1;
    int nrw = 0;
    for (int id = 0; id < g->n; id++) {
        GNode *n = &g->nodes[id];
        if (n->kind != G_OP || n->nin < 1) continue;
        GRef a = n->in[0];
        const GNode *an = &g->nodes[a.node];
        /* (output 0 of any node: batch_norm_train's y too) */
        if (n->op == OP_RELU && n->nin == 1 && a.out == 0 && relu_of[a.node] < 0) {
            relu_of[a.node] = id;
            continue;
        }
        /* relu_grad(dy, a) reads a only as the mask a > 0 too */
        int k = n->op == OP_RELU_GRAD && n->nin == 2 ? 1 : 0;
        if (k) {
            a = n->in[1];
            an = &g->nodes[a.node];
            if (a.out != 0) continue;
        } else if (n->op != OP_GT || n->nin != 2 || a.out != 0 || !const_zero(g, n->in[1]))
            continue;
        int r = relu_of[a.node];
        if (r < 0 || g->nodes[r].region != n->region) continue;
        const tfe_meta *am = &an->meta[0], *rm = &g->nodes[r].meta[0];
        if (!dtype_is_float(am->dtype) || rm->dtype != am->dtype || !same_shape(am, rm)) continue;
        n->in[k] = (GRef){r, 0};
        nrw++;
    }
    free(relu_of);
    return nrw;
}

int opt_fuse(Graph *g, OptReport *rep)
{
    opt_relu_masks(g);
    Fuser f = {.g = g, .uses = count_uses(g), .gid = 0, .unc = opt_uncertain_dims(g)};
    size_t n1 = (size_t)g->n + 1, v1 = (size_t)g->nvals + 1;
    f.taken = xcalloc(n1, 1);
    f.stamp = xcalloc(n1, sizeof *f.stamp);
    f.inside = xcalloc(n1, sizeof *f.inside);
    f.stack = xmalloc(sizeof *f.stack * n1);
    f.reg_of = xmalloc(sizeof *f.reg_of * n1);
    f.in_gid = xcalloc(v1, sizeof *f.in_gid);
    f.in_slot = xmalloc(sizeof *f.in_slot * v1);
    int groups = 0;
    for (int id = g->n - 1; id >= 0; id--) {
        int red_axes;
        if (!f.taken[id] && reducible(g, id, f.uses, f.taken, f.unc, &red_axes)) {
            int red = g->nodes[id].op == OP_SUM ? TFE_FRED_SUM : TFE_FRED_MEAN;
            groups += try_group(g, &f, g->nodes[id].in[0].node, id, red, red_axes, 1, rep);
            continue;
        }
        if (f.taken[id] || !fusable(g, id, f.unc)) continue;
        groups += try_group(g, &f, id, id, TFE_FRED_NONE, 0, 2, rep);
    }
    rep->fused_groups += groups;
    free((void *)f.uses);
    free(f.taken);
    free(f.stamp);
    free(f.inside);
    free(f.stack);
    free(f.reg_of);
    free(f.in_gid);
    free(f.in_slot);
    free(f.unc);
    return groups;
}
