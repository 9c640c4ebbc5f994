/* opt_cse.c — common subexpression elimination: an op with the same inputs
 * and attributes as an earlier one it can see (same region, or an enclosing
 * one) reads that one's outputs instead; equal small constants become one.
 * Random draws are never merged (each draws anew). */
#include <stdlib.h>
#include <string.h>
#include "graph/opt.h"
#include "util/xalloc.h"

static bool same_attrs(const tfe_attrs *a, const tfe_attrs *b)
{
    if (!a || !b) return a == b;
    if (a->naxes != b->naxes || a->keepdims != b->keepdims || a->dtype != b->dtype || a->nints != b->nints) return false;
    for (int i = 0; i < a->naxes && i < TFE_MAX_RANK; i++)
        if (a->axes[i] != b->axes[i]) return false;
    for (int i = 0; i < a->nints && i < 32; i++)
        if (a->ints[i] != b->ints[i]) return false;
    return !memcmp(a->f, b->f, sizeof a->f);
}

static bool same_const(const tfe_tensor *a, const tfe_tensor *b)
{
    return a->weak == b->weak && graph_tensor_equal(a, b, 64);
}

static bool same_node(const Graph *g, const GNode *a, const GNode *b)
{
    if (a->kind != b->kind) return false;
    if (a->kind == G_CONST) return same_const(a->value, b->value);
    if (a->kind != G_OP || a->op != b->op || a->nin != b->nin || a->nout != b->nout) return false;
    if (tfe_ops[a->op].flags & (F_RANDOM | F_COLLECTIVE)) return false;
    for (int k = 0; k < a->nin; k++)
        if (a->in[k].node != b->in[k].node || a->in[k].out != b->in[k].out) return false;
    (void)g;
    return same_attrs(a->at, b->at);
}

/* A hash of a constant's dtype, shape and (for the small ones same_const
 * compares) values, so thousands of distinct scalars do not share a bucket. */
static uint64_t const_hash(const tfe_tensor *c)
{
    uint64_t h = (uint64_t)c->dtype * 13 + (uint64_t)c->rank + (c->weak ? 7 : 0);
    for (int d = 0; d < c->rank; d++) h = h * 31 + (uint64_t)c->shape[d];
    int64_t n = tensor_numel(c);
    if (!c->storage || n > 64) return h;
    for (int64_t i = 0; i < n; i++) {
        uint64_t bits;
        if (dtype_is_float(c->dtype)) {
            double x = tensor_get_f64(c, i);
            mem_copy(&bits, &x, sizeof bits);
        } else bits = (uint64_t)tensor_get_i64(c, i);
        h = (h ^ bits) * 0x100000001B3u;
    }
    return h;
}

int opt_cse(Graph *g)
{
    int merged = 0;
    /* candidates bucketed by a hash of kind, op and inputs (or a constant's
     * value), about one node per bucket */
    uint64_t NB = 1024;
    while (NB < (uint64_t)g->n * 2) NB *= 2;
    int *head = xmalloc(sizeof *head * NB), *next = xmalloc(sizeof *next * (size_t)(g->n + 1));
    for (uint64_t i = 0; i < NB; i++) head[i] = -1;
    GRef *map = opt_redirect_new(g); /* merged values: one pass over the uses at the end */
    bool *pin = opt_pinned_values(g);
    for (int id = 0; id < g->n; id++) {
        GNode *n = &g->nodes[id];
        next[id] = -1;
        opt_redirect_node(g, map, id); /* inputs merged earlier: compare what they now read */
        if (n->kind != G_OP && n->kind != G_CONST) continue;
        if (n->kind == G_OP && (tfe_ops[n->op].flags & (F_RANDOM | F_COLLECTIVE))) continue;
        uint64_t h = (uint64_t)n->kind * 31 + (uint64_t)(n->kind == G_OP ? n->op : 0);
        for (int k = 0; k < n->nin; k++) h = h * 1000003u + (uint64_t)n->in[k].node * 33 + (uint64_t)n->in[k].out;
        if (n->kind == G_CONST) h = h * 7 + const_hash(n->value);
        h ^= h >> 29;
        int b = (int)(h % NB);
        int found = -1;
        for (int c = head[b]; c >= 0 && found < 0; c = next[c]) {
            const GNode *m = &g->nodes[c];
            /* the earlier node must be visible here */
            if (!graph_region_visible(g, m->region, n->region)) continue;
            if (same_node(g, m, n)) found = c;
        }
        /* a value a branch or loop body ends on stays its own node: merged
         * into an earlier one (tanh(x) before the if, a result too), the if
         * would hand on that tensor, which a tape after the call takes for
         * the other result, where eager code has two tensors (a last bit
         * apart: stage_cse_branch_result_bits); a constant, which has
         * no gradient and is handed out as a tensor of its own anyway,
         * merges */
        for (int k = 0; k < n->nout && found >= 0 && n->kind != G_CONST; k++)
            if (pin[n->vbase + k]) found = -1;
        if (found >= 0) {
            for (int k = 0; k < n->nout; k++) map[n->vbase + k] = (GRef){found, k};
            merged++;
            continue;
        }
        next[id] = head[b];
        head[b] = id;
    }
    opt_redirect_apply(g, map);
    free(pin);
    free(head);
    free(next);
    return merged;
}
