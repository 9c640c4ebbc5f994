/* opt.c — the optimizer's driver (graph_optimize runs the passes in order and
 * reports what each did) and the helpers the passes share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "stage/opt.h"
#include "tensor/xalloc.h"

const char *tfe_dump_pass;
bool tfe_no_optimize;

const char *const opt_pass_names[] = {"dce", "fold", "algebra", "cse", "fuse", NULL};

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

static bool region_has_effect(const Graph *g, int r)
{
    const GRegion *reg = &g->regions[r];
    for (int i = 0; i < reg->n; i++)
        if (opt_has_effect(g, reg->nodes[i])) return true;
    return false;
}

bool opt_has_effect(const Graph *g, int id)
{
    const GNode *n = &g->nodes[id];
    switch (n->kind) {
    case G_HOST: case G_VAR_READ: return true;
    case G_OP: return (tfe_ops[n->op].flags & F_RANDOM) != 0;
    case G_COND: case G_WHILE: return region_has_effect(g, n->regions[0]) || region_has_effect(g, n->regions[1]);
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
        snprintf(buf + n, sizeof buf - n, " (%d in place)", r->in_place);
    return xstrdup(buf);
}
