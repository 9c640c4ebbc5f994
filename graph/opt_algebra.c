/* opt_algebra.c — algebraic simplification: x * 1, x / 1, x - 0, x + (-0)
 * (x + 0 only for ints: -0.0 + 0.0 is +0.0, so for floats it is not x),
 * a cast or a reshape-like view to the type and shape x already has, a
 * transpose of a transpose that gives the order back, and a reshape of a
 * reshape (one reshape does). Only where the result has x's dtype, weak flag
 * and shape, so nothing downstream can tell, and not where that would make
 * an if's branch or a loop hand on an input unchanged (opt_pinned_values),
 * and, for the rules that drop a copy (x * 1, a cast), only where x is
 * contiguous (surely_contiguous). */
#include <math.h>
#include <stdlib.h>
#include "graph/opt.h"
#include "util/xalloc.h"

/* Is every element of c equal to v (and, for floats, of v's sign)? */
static bool all_equal(const tfe_tensor *c, double v)
{
    if (!c || !c->storage) return false;
    int64_t n = tensor_numel(c);
    if (n < 1 || n > 4096) return false;
    for (int64_t i = 0; i < n; i++) {
        double x = dtype_is_float(c->dtype) ? tensor_get_f64(c, i) : (double)tensor_get_i64(c, i);
        /* the sign counts for every dtype: an int 0 is +0.0, which is not
         * the identity of a float add (x + 0 turns -0.0 into +0.0) */
        if (x != v || signbit(x) != signbit(v)) return false;
    }
    return true;
}

/* The permutation a transpose applies (nints 0: reversed axes). */
static void perm_of(const GNode *n, int rank, int64_t *p)
{
    for (int i = 0; i < rank; i++) p[i] = n->at->nints ? n->at->ints[i] : rank - 1 - i;
}

/* Is r a contiguous tensor on every call: the result of an op that makes
 * no view, of a fused group, or a contiguous constant? Eager code's x * 1.0
 * (and x + -0.0, a cast to x's own dtype...) is a contiguous copy where x
 * is a transposed view; the graph's x would be the view itself, which
 * matmul hands to GEMM as a transposed operand, summed differently from
 * the copy (tensor/kernels_linalg.c): those rules apply to such x only. */
static bool surely_contiguous(const Graph *g, GRef r)
{
    const GNode *n = &g->nodes[r.node];
    if (n->kind == G_FUSED) return true;
    if (n->kind == G_OP) return !(tfe_ops[n->op].flags & F_VIEW);
    const tfe_tensor *c = n->kind == G_CONST ? opt_const(g, r) : NULL;
    return c && tensor_is_contiguous(c);
}

/* The value node id can be replaced by, or a ref with node -1. */
static GRef simpler(const Graph *g, int id)
{
    const GNode *n = &g->nodes[id];
    GRef none = {-1, 0};
    if (n->kind != G_OP || n->nout != 1) return none;
    const tfe_meta *out = &n->meta[0];
    GRef a = n->nin > 0 ? n->in[0] : none, b = n->nin > 1 ? n->in[1] : none;
    const tfe_meta *ma = a.node >= 0 ? &g->nodes[a.node].meta[a.out] : NULL;
    const tfe_meta *mb = b.node >= 0 ? &g->nodes[b.node].meta[b.out] : NULL;
    bool keeps_a = ma && opt_same_meta(out, ma), keeps_b = mb && opt_same_meta(out, mb);
    /* the rules that drop a copy eager code makes: x must be contiguous */
    bool copy_a = keeps_a && surely_contiguous(g, a), copy_b = keeps_b && surely_contiguous(g, b);
    bool is_int = !dtype_is_float(out->dtype);
    /* the ops with a rule (an if chain: a switch over the op enum lists every op) */
    tfe_op op = n->op;
    if (op == OP_MUL) {
        if (copy_a && all_equal(opt_const(g, b), 1.0)) return a;
        if (copy_b && all_equal(opt_const(g, a), 1.0)) return b;
    } else if (op == OP_DIV) {
        if (copy_a && all_equal(opt_const(g, b), 1.0)) return a;
    } else if (op == OP_ADD) {
        if (copy_a && all_equal(opt_const(g, b), is_int ? 0.0 : -0.0)) return a;
        if (copy_b && all_equal(opt_const(g, a), is_int ? 0.0 : -0.0)) return b;
    } else if (op == OP_SUB) {
        if (copy_a && all_equal(opt_const(g, b), 0.0)) return a;
    } else if (op == OP_CAST) {
        if (copy_a) return a;
    } else if (op == OP_RESHAPE || op == OP_EXPAND_DIMS || op == OP_SQUEEZE || op == OP_BROADCAST_TO) {
        if (keeps_a) return a; /* views of x's own layout, eagerly too */
    } else if (op == OP_TRANSPOSE) {
        const GNode *in = &g->nodes[a.node];
        if (!keeps_a || in->kind != G_OP || in->op != OP_TRANSPOSE) return none;
        int rank = out->rank;
        int64_t p1[TFE_MAX_RANK], p2[TFE_MAX_RANK];
        perm_of(in, rank, p1);
        perm_of(n, rank, p2);
        for (int i = 0; i < rank; i++)
            if (p1[p2[i]] != i) return none;
        return in->in[0];
    }
    return none;
}

/* Could r be an input handed on unchanged (what stage/staged.c's pass_ways
 * follows: an input, a loop's carried value, a cond's or loop's result)? */
static bool may_pass(const Graph *g, GRef r)
{
    GKind k = g->nodes[r.node].kind;
    return k == G_INPUT || k == G_PARAM || k == G_COND || k == G_WHILE;
}

int opt_algebra(Graph *g)
{
    int rewrites = 0;
    GRef *map = opt_redirect_new(g); /* replaced values: one pass over the uses at the end */
    bool *pin = opt_pinned_values(g);
    for (int id = 0; id < g->n; id++) {
        GNode *n = &g->nodes[id];
        if (n->kind != G_OP) continue;
        opt_redirect_node(g, map, id);
        /* reshape(reshape(x)): the outer reshape reads x */
        if (n->op == OP_RESHAPE) {
            const GNode *in = &g->nodes[n->in[0].node];
            if (in->kind == G_OP && in->op == OP_RESHAPE) {
                n->in[0] = in->in[0];
                rewrites++;
            }
        }
        GRef r = simpler(g, id);
        /* (nor to another region's value, or another pinned one: the
         * if or loop would hand on a tensor that eager code computes apart,
         * `b = a * 1.0` in a branch, a also a result, and a tape after the
         * call would take the two for one: stage_cse_branch_result_bits) */
        if (r.node >= 0 && pin[n->vbase]) {
            GRef t = opt_redirect_get(g, map, r);
            if (may_pass(g, t) || g->nodes[t.node].region != n->region || pin[g->nodes[t.node].vbase + t.out]) continue;
        }
        if (r.node >= 0) {
            map[n->vbase] = r;
            rewrites++;
        }
    }
    free(pin);
    opt_redirect_apply(g, map);
    return rewrites;
}
