/* opt_cse.c — common subexpression elimination: an op with the same inputs
 * and attributes as an earlier one it can see (same region, or an enclosing
 * one) reads that one's outputs instead; equal small constants become one.
 * Random draws are never merged (each draws anew). */
#include <stdlib.h>
#include <string.h>
#include "stage/opt.h"
#include "stage/sig.h"
#include "tensor/xalloc.h"

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
    return a->weak == b->weak && sig_tensor_equal(a, b, 64);
}

static bool same_node(const Graph *g, const GNode *a, const GNode *b)
{
    if (a->kind != b->kind) return false;
    if (a->kind == G_CONST) return same_const(a->value, b->value);
    if (a->kind != G_OP || a->op != b->op || a->nin != b->nin || a->nout != b->nout) return false;
    if (tfe_ops[a->op].flags & F_RANDOM) return false;
    for (int k = 0; k < a->nin; k++)
        if (a->in[k].node != b->in[k].node || a->in[k].out != b->in[k].out) return false;
    (void)g;
    return same_attrs(a->at, b->at);
}

int opt_cse(Graph *g)
{
    int merged = 0;
    /* candidates bucketed by a hash of kind, op and inputs */
    enum { NB = 1024 };
    int *head = xmalloc(sizeof *head * NB), *next = xmalloc(sizeof *next * (size_t)(g->n + 1));
    for (int i = 0; i < NB; i++) head[i] = -1;
    for (int id = 0; id < g->n; id++) {
        GNode *n = &g->nodes[id];
        next[id] = -1;
        if (n->kind != G_OP && n->kind != G_CONST) continue;
        if (n->kind == G_OP && (tfe_ops[n->op].flags & F_RANDOM)) continue;
        uint64_t h = (uint64_t)n->kind * 31 + (uint64_t)(n->kind == G_OP ? n->op : 0);
        for (int k = 0; k < n->nin; k++) h = h * 1000003u + (uint64_t)n->in[k].node * 33 + (uint64_t)n->in[k].out;
        if (n->kind == G_CONST) h = h * 7 + (uint64_t)n->value->dtype * 13 + (uint64_t)n->value->rank;
        int b = (int)(h % NB);
        int found = -1;
        for (int c = head[b]; c >= 0 && found < 0; c = next[c]) {
            const GNode *m = &g->nodes[c];
            /* the earlier node must be visible here */
            if (!graph_region_visible(g, m->region, n->region)) continue;
            if (same_node(g, m, n)) found = c;
        }
        if (found >= 0) {
            for (int k = 0; k < n->nout; k++) opt_replace_uses(g, (GRef){id, k}, (GRef){found, k});
            merged++;
            continue;
        }
        next[id] = head[b];
        head[b] = id;
    }
    free(head);
    free(next);
    return merged;
}
