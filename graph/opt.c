/* opt.c — the optimizer's driver (graph_optimize runs the passes in order and
 * reports what each did) and the helpers the passes share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "graph/opt.h"
#include "util/xalloc.h"

const char *const opt_pass_names[] = {"dce", "fold", "algebra", "cse", "conv", "fuse", NULL};

int opt_pass_index(const char *name)
{
    for (int i = 0; opt_pass_names[i]; i++)
        if (!strcmp(opt_pass_names[i], name)) return i;
    return -1;
}

void opt_replace_uses(Graph *g, GRef old, GRef now)
{
    for (int i = 0; i < g->n; i++) {
        GNode *n = &g->nodes[i];
        for (int k = 0; k < n->nin; k++)
            if (n->in[k].node == old.node && n->in[k].out == old.out) n->in[k] = now;
    }
    for (int r = 0; r < g->nregions; r++) {
        GRegion *reg = &g->regions[r];
        for (int k = 0; k < reg->nouts; k++)
            if (reg->outs[k].node == old.node && reg->outs[k].out == old.out) reg->outs[k] = now;
    }
}

GRef *opt_redirect_new(const Graph *g)
{
    GRef *map = xmalloc(sizeof *map * ((size_t)g->nvals + 1));
    for (int v = 0; v <= g->nvals; v++) map[v] = (GRef){-1, 0};
    return map;
}

GRef opt_redirect_get(const Graph *g, const GRef *map, GRef r)
{
    for (int hops = 0; hops <= g->n; hops++) {
        GRef to = map[g->nodes[r.node].vbase + r.out];
        if (to.node < 0) break;
        r = to;
    }
    return r;
}

void opt_redirect_node(Graph *g, const GRef *map, int id)
{
    GNode *n = &g->nodes[id];
    for (int k = 0; k < n->nin; k++) n->in[k] = opt_redirect_get(g, map, n->in[k]);
}

void opt_redirect_apply(Graph *g, GRef *map)
{
    for (int i = 0; i < g->n; i++) opt_redirect_node(g, map, i);
    for (int r = 0; r < g->nregions; r++) {
        GRegion *reg = &g->regions[r];
        for (int k = 0; k < reg->nouts; k++) reg->outs[k] = opt_redirect_get(g, map, reg->outs[k]);
    }
    free(map);
}

/* Is every element of constant c, read as a double, such that ok(v)? */
static bool const_all(const tfe_tensor *c, bool (*ok)(double))
{
    if (!c || !c->storage) return false;
    int64_t n = tensor_numel(c);
    if (n > 4096) return false;
    for (int64_t i = 0; i < n; i++)
        if (!ok(dtype_is_float(c->dtype) ? tensor_get_f64(c, i) : (double)tensor_get_i64(c, i))) return false;
    return true;
}
static bool nonzero(double v) { return v != 0; }
static bool nonnegative(double v) { return v >= 0; }

static bool has_unknown_dim(const tfe_meta *m)
{
    for (int d = 0; d < m->rank; d++)
        if (m->shape[d] < 0) return true;
    return false;
}

/* Ops that cannot fail on any shapes their inputs' ranks and dtypes allow
 * (they were checked at trace time): unary elementwise ops, axis
 * permutations, and reductions that are defined on empty axes. */
static bool shape_safe(tfe_op op)
{
    const unsigned f = tfe_ops[op].flags;
    if ((f & F_ELEMWISE) && tfe_ops[op].nin == 1) return true;
    return op == OP_TRANSPOSE || op == OP_EXPAND_DIMS || op == OP_SUM || op == OP_MEAN || op == OP_PROD ||
           op == OP_ANY || op == OP_ALL || op == OP_LOGSUMEXP || op == OP_SOFTMAX || op == OP_LOG_SOFTMAX;
}

bool opt_graph_relaxed(const Graph *g)
{
    for (int i = 0; i < g->ninputs; i++)
        if (has_unknown_dim(&g->nodes[g->inputs[i]].meta[0])) return true;
    return false;
}

/* In a relaxed trace, which values' recorded dims can differ from their dims
 * at run time where they are known? relax_metas (stage/staged.c) carries
 * the inputs' unknown dims through the top region's ops, but a region's ops,
 * what conds, loops and host calls return, and an op whose infer rule could
 * not work with an unknown dim (tile: its output keeps the trace's dims) keep
 * the dims of the trace; so does whatever is computed from such a value.
 * Constants and variables keep theirs. One pass in node order (a node reads
 * values of lower ids, but for a region's ops, which are uncertain anyway). */
bool *opt_uncertain_dims(const Graph *g)
{
    if (!opt_graph_relaxed(g)) return NULL;
    bool *u = xcalloc((size_t)g->nvals + 1, sizeof *u);
    for (int id = 0; id < g->n; id++) {
        const GNode *n = &g->nodes[id];
        bool unc;
        if (n->kind == G_CONST || n->kind == G_VAR_READ || n->kind == G_INPUT) unc = false;
        else if (n->region != 0 || (n->kind != G_OP && n->kind != G_FUSED)) unc = true;
        else {
            bool from_unc = false, from_unknown = false;
            for (int k = 0; k < n->nin; k++) {
                const GNode *p = &g->nodes[n->in[k].node];
                from_unc |= u[p->vbase + n->in[k].out];
                from_unknown |= has_unknown_dim(&p->meta[n->in[k].out]);
            }
            bool known_out = true;
            for (int k = 0; k < n->nout; k++) known_out &= !has_unknown_dim(&n->meta[k]);
            unc = from_unc || (from_unknown && known_out && n->kind == G_OP &&
                               !(tfe_ops[n->op].flags & F_REDUCTION));
        }
        for (int k = 0; k < n->nout; k++) u[n->vbase + k] = unc;
    }
    return u;
}

static bool uncertain(const Graph *g, const bool *unc, GRef r)
{
    return unc && unc[g->nodes[r.node].vbase + r.out];
}

/* Can the broadcast of an elementwise op's inputs fail at run time? Only
 * where, in some axis, two different values have dims that are not known
 * to agree: an unknown dim against another unknown one or a known one other
 * than 1 (known dims were checked when the op was traced). */
static bool broadcast_may_fail(const Graph *g, const GNode *n, const bool *unc)
{
    for (int a = 0; a < n->nin; a++)
        for (int b = a + 1; b < n->nin; b++) {
            if (n->in[a].node == n->in[b].node && n->in[a].out == n->in[b].out) continue;
            const tfe_meta *x = &g->nodes[n->in[a].node].meta[n->in[a].out];
            const tfe_meta *y = &g->nodes[n->in[b].node].meta[n->in[b].out];
            bool ux = uncertain(g, unc, n->in[a]), uy = uncertain(g, unc, n->in[b]);
            for (int i = 1; i <= x->rank && i <= y->rank; i++) {
                int64_t p = ux ? -1 : x->shape[x->rank - i], q = uy ? -1 : y->shape[y->rank - i];
                if ((p < 0 || q < 0) && p != 1 && q != 1) return true;
            }
        }
    return false;
}

bool opt_may_fail(const Graph *g, int id, const bool *unc)
{
    const GNode *n = &g->nodes[id];
    if (n->kind != G_OP && n->kind != G_FUSED) return false;
    /* a relaxed trace's unknown dims are checked as the ops run (a
     * broadcast, a matmul, a reshape of the new size may not work) */
    bool unknown = false;
    for (int k = 0; k < n->nin && !unknown; k++)
        unknown = has_unknown_dim(&g->nodes[n->in[k].node].meta[n->in[k].out]) ||
                  uncertain(g, unc, n->in[k]);
    if (n->kind == G_FUSED) return unknown && broadcast_may_fail(g, n, unc);
    if (unknown && !shape_safe(n->op) && (!(tfe_ops[n->op].flags & F_ELEMWISE) || broadcast_may_fail(g, n, unc)))
        return true;
    if (!(tfe_ops[n->op].flags & F_MAYFAIL)) return false;
    /* failures on values: integer division by zero, integer negative powers
     * (a float result never fails), indices out of range */
    bool is_int = !dtype_is_float(n->meta[0].dtype);
    if (n->op == OP_FLOORDIV || n->op == OP_MOD)
        return is_int && !(n->nin == 2 && const_all(opt_const(g, n->in[1]), nonzero));
    if (n->op == OP_POW)
        return is_int && !(n->nin == 2 && const_all(opt_const(g, n->in[1]), nonnegative));
    return true; /* every other F_MAYFAIL op (indices out of range) */
}

static bool region_has_effect(const Graph *g, int r)
{
    const GRegion *reg = &g->regions[r];
    for (int i = 0; i < reg->n; i++)
        if (opt_has_effect(g, reg->nodes[i])) return true;
    return false;
}

/* The values that a branch or a loop body ends on, or a loop starts from.
 * A run hands out an input that an if or loop passed on unchanged as that
 * input itself, as eager code does (stage/staged.c, Trace.pass_ok); were
 * `r = y * 1.0` in one branch made y, the run could not tell that branch
 * from one that ends `r = y`, where eager code has a new tensor. Such a
 * value keeps its op where the op's input may be an input handed on. */
bool *opt_pinned_values(const Graph *g)
{
    bool *pin = xcalloc((size_t)g->nvals + 1, sizeof *pin);
    for (int r = 1; r < g->nregions; r++) {
        const GRegion *reg = &g->regions[r];
        for (int k = 0; k < reg->nouts; k++) pin[g->nodes[reg->outs[k].node].vbase + reg->outs[k].out] = true;
    }
    for (int i = 0; i < g->n; i++) {
        const GNode *n = &g->nodes[i];
        if (n->kind != G_WHILE) continue;
        for (int k = 0; k < n->nin; k++) pin[g->nodes[n->in[k].node].vbase + n->in[k].out] = true;
    }
    return pin;
}

bool opt_has_effect(const Graph *g, int id)
{
    const GNode *n = &g->nodes[id];
    switch (n->kind) {
    case G_HOST: case G_VAR_READ: return true;
    case G_OP: return (tfe_ops[n->op].flags & (F_RANDOM | F_COLLECTIVE)) != 0;
    case G_COND: case G_WHILE: return region_has_effect(g, n->regions[0]) || region_has_effect(g, n->regions[1]);
    case G_INPUT: case G_CONST: case G_PARAM: case G_FUSED:
    default: return false;
    }
}

void opt_make_const(Graph *g, int id, tfe_tensor *t)
{
    GNode *n = &g->nodes[id];
    free(n->in);
    n->in = NULL;
    n->nin = 0;
    free(n->at);
    n->at = NULL;
    n->kind = G_CONST;
    n->value = t;
    n->effect_dep = -1;
    n->meta[0] = (tfe_meta){.dtype = t->dtype, .weak = t->weak, .rank = t->rank};
    mem_copy(n->meta[0].shape, t->shape, sizeof(int64_t) * (size_t)t->rank);
}

/* Nodes in the regions a run can reach. */
static int live_nodes(const Graph *g, int r)
{
    const GRegion *reg = &g->regions[r];
    int n = reg->n;
    for (int i = 0; i < reg->n; i++) {
        const GNode *x = &g->nodes[reg->nodes[i]];
        if (x->kind == G_COND || x->kind == G_WHILE) n += live_nodes(g, x->regions[0]) + live_nodes(g, x->regions[1]);
    }
    return n;
}

int graph_optimize(Graph *g, OptReport *r, bool keep_text)
{
    *r = (OptReport){0};
    if (keep_text) r->text[0] = graph_to_text(g);
    for (int p = 0; opt_pass_names[p] && p < OPT_MAX_PASSES; p++) {
        r->names[p] = opt_pass_names[p];
        r->before[p] = live_nodes(g, 0);
        int rc;
        switch (p) {
        case 0: rc = opt_dce(g); break;
        case 1: rc = opt_fold(g); break;
        case 2: rc = opt_algebra(g); break;
        case 3: rc = opt_cse(g); break;
        case 4: rc = opt_conv(g); break;
        default: rc = opt_fuse(g, r); break;
        }
        if (rc < 0) return -1;
        if (p > 0 && rc > 0 && opt_dce(g) < 0) return -1; /* what the rewrites left unused */
        graph_compact(g);
        r->after[p] = live_nodes(g, 0);
        r->npasses = p + 1;
        if (keep_text) r->text[p + 1] = graph_to_text(g);
    }
    return 0;
}

void opt_report_free(OptReport *r)
{
    for (int i = 0; i <= OPT_MAX_PASSES; i++) free(r->text[i]);
    *r = (OptReport){0};
}

char *opt_report_line(const OptReport *r)
{
    char buf[1024];
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < r->npasses && n < sizeof buf; i++)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s %d -> %d", i ? ", " : "", r->names[i], r->before[i], r->after[i]);
    if (r->fused_groups && n < sizeof buf)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "; %d fused group%s of %d ops", r->fused_groups,
                              r->fused_groups == 1 ? "" : "s", r->fused_ops);
    if (r->planned_bytes && n < sizeof buf)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "; arena %zu bytes for %zu bytes of intermediates",
                              r->arena_bytes, r->planned_bytes);
    if (r->in_place && n < sizeof buf)
        n += (size_t)snprintf(buf + n, sizeof buf - n, " (%d in place)", r->in_place);
    if (r->updates && n < sizeof buf)
        n += (size_t)snprintf(buf + n, sizeof buf - n, "; %d update%s fused", r->updates, r->updates == 1 ? "" : "s");
    if (r->overlapped && n < sizeof buf)
        snprintf(buf + n, sizeof buf - n, "; %d allreduce%s overlapped", r->overlapped, r->overlapped == 1 ? "" : "s");
    return xstrdup(buf);
}
