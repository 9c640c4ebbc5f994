/* export.c — export(f, args..., path=, dynamic=): a staged function's forward
 * graph for those arguments written as an ONNX model (IR version 8, opset 17)
 * with util/pb.h: inputs, initializers, regions (If, Loop) and the builtin;
 * the ops' forms are stage/export_ops.c's; docs/export.md has the mapping. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config.h"
#include "interp/builtins_args.h"
#include "interp/internal.h"
#include "graph/host.h"
#include "stage/export.h"
#include "stage/export_dyn.h"
#include "stage/export_int.h"
#include "stage/host_node.h"
#include "stage/sig.h"
#include "stage/staged.h"
#include "util/pb.h"
#include "util/xalloc.h"

/* --- the model ------------------------------------------------------------------------- */

/* ValueInfoProto: name, tensor type, dims (symbolic where unknown or named). */
static void value_info(Buf *out, int field, const char *name, const tfe_meta *m, char **dimnames)
{
    Buf shape = {0}, tt = {0}, ty = {0}, vi = {0};
    for (int d = 0; d < m->rank; d++) {
        Buf dim = {0};
        if (dimnames && dimnames[d]) pb_field_string(&dim, 2, dimnames[d]);
        else if (m->shape[d] >= 0) pb_field_varint(&dim, 1, (uint64_t)m->shape[d]);
        pb_field_bytes(&shape, 1, dim.s, dim.len);
        free(dim.s);
    }
    pb_field_varint(&tt, 1, (uint64_t)ox_onnx_dtype(m->dtype));
    pb_field_bytes(&tt, 2, shape.s, shape.len);
    pb_field_bytes(&ty, 1, tt.s, tt.len);
    pb_field_string(&vi, 1, name);
    pb_field_bytes(&vi, 2, ty.s, ty.len);
    pb_field_bytes(out, field, vi.s, vi.len);
    free(shape.s);
    free(tt.s);
    free(ty.s);
    free(vi.s);
}

/* "x[1]" -> "x_1": ONNX names are free text, but tools show them as identifiers. */
static char *clean_name(const char *s)
{
    char *c = xstrdup(s ? s : "input");
    char *p = strstr(c, " (");
    if (p) *p = 0;
    size_t k = 0;
    for (char *q = c; *q; q++) {
        if ((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '_') c[k++] = *q;
        else if (k && c[k - 1] != '_') c[k++] = '_';
    }
    while (k && c[k - 1] == '_') k--;
    c[k] = 0;
    return c;
}

/* A host node that only checks an argument's value (Builtin.value_check:
 * normal()'s _check_normal_std for a traced std): it changes nothing, and
 * what it guards is what export cannot write. */
static bool is_value_check(const GNode *n)
{
    return n->kind == G_HOST && n->host && n->host->obj.kind == V_BUILTIN &&
           ((const Builtin *)n->host->obj.u.o)->value_check;
}

/* The first random draw of g (its order), or NULL: what a value check
 * guards (a traced normal() std checks it, then draws). */
static const GNode *first_random(const Graph *g)
{
    for (int i = 0; i < g->n; i++)
        if (g->nodes[i].kind == G_OP && (tfe_ops[g->nodes[i].op].flags & F_RANDOM)) return &g->nodes[i];
    return NULL;
}

static const char *kind_word(const GNode *n)
{
    if (is_value_check(n)) return "a check of an argument's value that ONNX cannot run";
    if (n->kind == G_HOST) return "an effect: a call back into the interpreter (print, an assignment, a @host function)";
    if (n->kind == G_COND) return "an if that depends on a tensor (cond)";
    if (n->kind == G_WHILE) return "a loop that depends on a tensor (while)";
    return "this node";
}

static int emit_region(Ex *E, const ExportSpec *sp, int r, GraphBuf *out);

static int emit_node(Ex *E, const ExportSpec *sp, Buf *inputs, int id);

/* An encoded If of c: then the region r, else the values vals unchanged;
 * its outputs outs. */
static int emit_if(Ex *E, const ExportSpec *sp, const char *c, int r, int nv, const char *const *vals,
                   const tfe_meta *metas, int nout, const char *const *outs)
{
    GraphBuf then = {{0}};
    int rc = emit_region(E, sp, r, &then);
    if (rc) return rc;
    /* the else branch: Identities of the carried values */
    Buf saved = E->nodes, eo = {0}, els = {0}, a = {0}, m = {0};
    E->nodes = (Buf){0};
    for (int k = 0; k < nv; k++) {
        char *o = ox_fresh(E, "same");
        ox_node(E, "Identity", 1, &vals[k], 1, (const char *const *)&o, NULL);
        tfe_meta mm = metas[k];
        for (int d = 0; d < mm.rank; d++) mm.shape[d] = -1; /* a loop may change sizes */
        value_info(&eo, 12, o, &mm, NULL);
        free(o);
    }
    buf_add(&els, E->nodes.s ? E->nodes.s : "", E->nodes.len);
    pb_field_string(&els, 2, "unchanged");
    if (eo.len) buf_add(&els, eo.s, eo.len);
    free(E->nodes.s);
    E->nodes = saved;
    ox_attr_begin(&m, "then_branch", 5 /* GRAPH */);
    pb_field_bytes(&m, 6, then.g.s, then.g.len);
    ox_attr_end(&a, &m);
    m = (Buf){0};
    ox_attr_begin(&m, "else_branch", 5);
    pb_field_bytes(&m, 6, els.s, els.len);
    ox_attr_end(&a, &m);
    ox_node(E, "If", 1, &c, nout, outs, &a);
    free(then.g.s);
    free(els.s);
    free(eo.s);
    return 0;
}

/* A while on a tensor: an ONNX Loop whose body tests tfe's condition first
 * and runs tfe's body under an If of it, passing the values on unchanged
 * when it is false (ONNX tests the loop's condition before each pass, tfe
 * computes it from the carried values: one extra pass does nothing). */
static int emit_while(Ex *E, const ExportSpec *sp, const GNode *n)
{
    const Graph *g = E->g;
    const GRegion *rc = &g->regions[n->regions[0]];
    int nc = rc->nparams;
    if (n->nout != nc) return ox_refuse(E, "a loop whose iterations a gradient keeps");
    Tmp t = {0};
    const char **pn = xcalloc((size_t)nc + 1, sizeof *pn), **ws = xcalloc((size_t)nc + 1, sizeof *ws);
    tfe_meta *pm = xcalloc((size_t)nc + 1, sizeof *pm);
    for (int k = 0; k < nc; k++) {
        int id = rc->params[k];
        if (!E->vn[E->off[id]]) {
            char b[64];
            snprintf(b, sizeof b, "v%d_0", id);
            E->vn[E->off[id]] = ox_avoid(E, b);
        }
        pn[k] = E->vn[E->off[id]];
        pm[k] = g->nodes[id].meta[0];
        ws[k] = ox_keep(&t, ox_fresh(E, "carried"));
    }
    Buf saved = E->nodes, body = {0}, bin_ = {0}, bout = {0};
    E->nodes = (Buf){0};
    int rcode = 0;
    for (int i = 0; i < rc->n && !rcode; i++) rcode = emit_node(E, sp, NULL, rc->nodes[i]);
    const char *cond_out = ox_keep(&t, ox_fresh(E, "go_on"));
    if (!rcode) {
        GRef co = rc->outs[0];
        const char *c = ox_cast(E, &t, E->vn[E->off[co.node] + co.out], g->nodes[co.node].meta[co.out].dtype, TFE_BOOL);
        rcode = emit_if(E, sp, c, n->regions[1], nc, pn, pm, nc, ws);
        if (!rcode) ox_node(E, "Identity", 1, &c, 1, &cond_out, NULL);
    }
    if (!rcode) {
        tfe_meta scalar_i64 = {.dtype = TFE_INT64}, scalar_b = {.dtype = TFE_BOOL};
        value_info(&bin_, 11, ox_keep(&t, ox_fresh(E, "iteration")), &scalar_i64, NULL);
        value_info(&bin_, 11, ox_keep(&t, ox_fresh(E, "go_on_in")), &scalar_b, NULL);
        value_info(&bout, 12, cond_out, &scalar_b, NULL);
        for (int k = 0; k < nc; k++) {
            tfe_meta mm = pm[k];
            for (int d = 0; d < mm.rank; d++) mm.shape[d] = -1;
            value_info(&bin_, 11, pn[k], &mm, NULL);
            value_info(&bout, 12, ws[k], &mm, NULL);
        }
        buf_add(&body, E->nodes.s ? E->nodes.s : "", E->nodes.len);
        char nm[64];
        snprintf(nm, sizeof nm, "loop%d", (int)(n - g->nodes));
        pb_field_string(&body, 2, nm);
        buf_add(&body, bin_.s, bin_.len);
        buf_add(&body, bout.s, bout.len);
    }
    free(E->nodes.s);
    E->nodes = saved;
    if (!rcode) {
        E->at = n;
        Buf a = {0}, m = {0};
        ox_attr_begin(&m, "body", 5 /* GRAPH */);
        pb_field_bytes(&m, 6, body.s, body.len);
        ox_attr_end(&a, &m);
        const char **in = xcalloc((size_t)nc + 2, sizeof *in), **outs = xcalloc((size_t)nc + 1, sizeof *outs);
        in[0] = "";
        in[1] = ox_const_num(E, &t, TFE_BOOL, 1);
        for (int k = 0; k < nc; k++) in[2 + k] = ox_in_name(E, n, k);
        for (int k = 0; k < nc; k++) outs[k] = ox_out_name(E, n, k);
        ox_node(E, "Loop", nc + 2, in, nc, outs, &a);
        free(in);
        free(outs);
    }
    free(body.s);
    free(bin_.s);
    free(bout.s);
    free(pn);
    free(ws);
    free(pm);
    ox_tmp_free(&t);
    return rcode;
}

/* One node of a region into E->nodes (a top-level input's ValueInfo into inputs). */
static int emit_node(Ex *E, const ExportSpec *sp, Buf *inputs, int id)
{
    GNode *n = &E->g->nodes[id];
    E->at = n;
    for (int k = 0; k < n->nout; k++)
        if (!E->vn[E->off[id] + k]) {
            char b[64];
            snprintf(b, sizeof b, "v%d_%d", id, k);
            E->vn[E->off[id] + k] = ox_avoid(E, b);
        }
    const char *nm = E->vn[E->off[id]];
    switch ((int)n->kind) {
    case G_INPUT: {
        int ix = n->input_index;
        if (ix >= sp->nargs || sp->baked[ix]) return ox_init_tensor(E, nm, sp->values[ix]);
        char *c = clean_name(sp->in_names[ix]);
        /* the input's own name; an output that is an input goes through an Identity */
        if (strcmp(nm, c)) ox_node(E, "Identity", 1, (const char *const *)&c, 1, &nm, NULL);
        value_info(inputs, 11, c, &n->meta[0], sp->dims[ix]);
        free(c);
        return 0;
    }
    case G_CONST: return ox_init_tensor(E, nm, n->value);
    case G_VAR_READ: {
        char b[64];
        snprintf(b, sizeof b, "var%d", E->nvar++);
        char *vname = ox_avoid(E, b);
        int rc = ox_init_tensor(E, vname, variable_peek(n->host->obj));
        if (!rc) ox_node(E, "Identity", 1, (const char *const *)&vname, 1, &nm, NULL);
        free(vname);
        return rc;
    }
    case G_OP:
        if (tfe_ops[n->op].flags & F_RANDOM) return ox_refuse(E, "a random draw");
        return emit_op(E, n);
    case G_COND: {
        /* If: each branch a subgraph reading the values around it by name */
        GraphBuf br[2] = {{{0}}, {{0}}};
        int rc = emit_region(E, sp, n->regions[0], &br[0]);
        if (!rc) rc = emit_region(E, sp, n->regions[1], &br[1]);
        if (!rc) E->at = n; /* (else the branch's node that failed is named) */
        if (!rc) {
            Tmp t = {0};
            Buf a = {0};
            static const char *names[2] = {"then_branch", "else_branch"};
            for (int b = 0; b < 2; b++) {
                Buf m = {0};
                ox_attr_begin(&m, names[b], 5 /* GRAPH */);
                pb_field_bytes(&m, 6, br[b].g.s, br[b].g.len);
                ox_attr_end(&a, &m);
            }
            const char *c = ox_cast(E, &t, ox_in_name(E, n, 0), ox_in_meta(E, n, 0)->dtype, TFE_BOOL);
            const char **outs = xcalloc((size_t)n->nout + 1, sizeof *outs);
            for (int k = 0; k < n->nout; k++) outs[k] = ox_out_name(E, n, k);
            ox_node(E, "If", 1, &c, n->nout, outs, &a);
            free(outs);
            ox_tmp_free(&t);
        }
        for (int b = 0; b < 2; b++) free(br[b].g.s);
        return rc;
    }
    case G_WHILE: return emit_while(E, sp, n);
    case G_PARAM: return 0; /* named by its loop (emit_while) */
    case G_FUSED: return ox_refuse(E, "a fused group (export reads the graph before fusion)");
    default:
        if (is_value_check(n) && first_random(E->g)) { /* the draw it guards, named as a draw */
            E->at = first_random(E->g);
            return ox_refuse(E, "a random draw");
        }
        return ox_refuse(E, kind_word(n));
    }
}

/* A region as a GraphProto (the body of an If): its nodes, then its results
 * as outputs under fresh names (a result may be a value of the graph around it). */
static int emit_region(Ex *E, const ExportSpec *sp, int r, GraphBuf *out)
{
    const GRegion *R = &E->g->regions[r];
    Buf saved = E->nodes;
    E->nodes = (Buf){0};
    int rc = 0;
    for (int i = 0; i < R->n && !rc; i++) rc = emit_node(E, sp, NULL, R->nodes[i]);
    Buf outputs = {0};
    for (int k = 0; k < R->nouts && !rc; k++) {
        GRef o = R->outs[k];
        const char *have = E->vn[E->off[o.node] + o.out];
        char *nm = ox_fresh(E, "branch_out");
        ox_node(E, "Identity", 1, &have, 1, (const char *const *)&nm, NULL);
        /* a region's values keep the sizes of the trace they were made in
         * (the doubled one of a dynamic export): a symbolic dim leaves them unsaid */
        tfe_meta mm = E->g->nodes[o.node].meta[o.out];
        for (int d = 0; E->dynamic && d < mm.rank; d++) mm.shape[d] = -1;
        value_info(&outputs, 12, nm, &mm, NULL);
        free(nm);
    }
    if (!rc) {
        char nm[64];
        snprintf(nm, sizeof nm, "region%d", r);
        buf_add(&out->g, E->nodes.s ? E->nodes.s : "", E->nodes.len);
        pb_field_string(&out->g, 2, nm);
        if (outputs.len) buf_add(&out->g, outputs.s, outputs.len);
    }
    free(outputs.s);
    free(E->nodes.s);
    E->nodes = saved;
    return rc;
}

/* What a branch reads from around it is live (regions read by name, not through in[]). */
static void mark_reads(const Graph *g, int r, bool *live)
{
    const GRegion *R = &g->regions[r];
    for (int k = 0; k < R->nouts; k++) live[R->outs[k].node] = true;
    for (int i = 0; i < R->n; i++) {
        const GNode *n = &g->nodes[R->nodes[i]];
        for (int k = 0; k < n->nin; k++) live[n->in[k].node] = true;
        if (n->kind == G_COND || n->kind == G_WHILE) {
            mark_reads(g, n->regions[0], live);
            mark_reads(g, n->regions[1], live);
        }
    }
}

/* The error for the node n that has no ONNX form, why saying what it is. */
static int not_exportable(Interp *I, const Graph *g, const GNode *n, const char *why)
{
    Buf w = {0};
    if (n->kind == G_HOST && graph_host.put_operation) {
        graph_host.put_operation(&w, g, n, true); /* "host print" */
        buf_add(&w, "", 1);
    }
    const char *what = n->kind == G_OP ? tfe_ops[n->op].name : n->kind == G_HOST ? (w.s ? w.s + 5 : "host call")
                     : n->kind == G_COND ? "cond" : n->kind == G_WHILE ? "while" : "node";
    int rc = raise_at(I, n->loc, "export(): not exportable: %s at line %d (%s)", what, n->loc.line, why);
    free(w.s);
    return rc;
}

/* The first node of region r, in the order export_graph writes them, that
 * is an effect (-1: the error raised), or one of another kind it refuses
 * (0: export_graph names it). An effect comes first: running f again at the
 * doubled size would run it again, and its graph need not be the same. */
static int first_effect(Interp *I, const Graph *g, int r, bool *stop)
{
    const GRegion *R = &g->regions[r];
    for (int i = 0; i < R->n && !*stop; i++) {
        const GNode *n = &g->nodes[R->nodes[i]];
        if (is_value_check(n) && first_random(g)) /* not an effect: the draw it guards is refused */
            return not_exportable(I, g, first_random(g), "a random draw");
        if (n->kind == G_HOST) return not_exportable(I, g, n, kind_word(n));
        if (n->kind == G_FUSED || (n->kind == G_OP && ((tfe_ops[n->op].flags & F_RANDOM) || !export_op_mapped(n->op))))
            *stop = true;
        if (n->kind == G_COND || n->kind == G_WHILE)
            for (int b = 0; b < 2 && !*stop; b++)
                if (first_effect(I, g, n->regions[b], stop)) return -1;
    }
    return 0;
}

int export_graph(Interp *I, Graph *g, const ExportSpec *sp, Buf *model)
{
    Ex E = {.I = I, .g = g, .slice_se = sp->slice_se};
    for (int i = 0; i < sp->nargs; i++)
        for (int d = 0; sp->dims && sp->dims[i] && d < TFE_MAX_RANK; d++) E.dynamic |= sp->dims[i][d] != NULL;
    /* the names the user sees: what the graph makes avoids them */
    const GRegion *top = &g->regions[0];
    char **user = xcalloc((size_t)sp->nargs + (size_t)top->nouts + 1, sizeof *user);
    for (int i = 0; i < sp->nargs; i++)
        if (!sp->baked[i]) user[E.nuser++] = clean_name(sp->in_names[i]);
    for (int i = 0; i < top->nouts; i++) user[E.nuser++] = xstrdup(sp->out_names[i]);
    E.user = (const char *const *)user;
    E.off = xcalloc((size_t)g->n + 1, sizeof *E.off);
    int nv = 0;
    for (int i = 0; i < g->n; i++) {
        E.off[i] = nv;
        nv += g->nodes[i].nout;
    }
    E.vn = xcalloc((size_t)nv + 1, sizeof *E.vn);
    Buf inputs = {0}, outputs = {0};
    int rc = 0;
    /* Is each value a graph output? (outputs are named after the results) */
    for (int i = 0; i < top->nouts && !rc; i++) {
        GRef o = top->outs[i];
        int slot = E.off[o.node] + o.out;
        if (!E.vn[slot]) E.vn[slot] = xstrdup(sp->out_names[i]);
    }
    /* the graph as traced keeps what the optimizer's dce would drop: only
     * what the results need goes to the file (effects are refused anyway) */
    bool *live = xcalloc((size_t)g->n + 1, sizeof *live);
    for (int i = 0; i < top->nouts; i++) live[top->outs[i].node] = true;
    for (int ri = top->n - 1; ri >= 0; ri--) {
        const GNode *n = &g->nodes[top->nodes[ri]];
        if (n->kind == G_HOST || n->kind == G_COND || n->kind == G_WHILE) live[top->nodes[ri]] = true;
        if (live[top->nodes[ri]]) {
            for (int k = 0; k < n->nin; k++) live[n->in[k].node] = true;
            if (n->kind == G_COND || n->kind == G_WHILE) {
                mark_reads(g, n->regions[0], live);
                mark_reads(g, n->regions[1], live);
            }
        }
    }
    for (int ri = 0; ri < top->n && !rc; ri++) {
        int id = top->nodes[ri];
        GNode *n = &g->nodes[id];
        bool model_input = n->kind == G_INPUT && n->input_index < sp->nargs && !sp->baked[n->input_index];
        if (!live[id] && !model_input) continue; /* (every argument stays an input of the model) */
        rc = emit_node(&E, sp, &inputs, id);
    }
    if (rc) {
        if (!E.err[0]) snprintf(E.err, sizeof E.err, "%s", tfe_error_msg());
        not_exportable(I, g, E.at, E.err);
    } else {
        /* a result downstream of x[mask] has the size the data gives it, not
         * the traced one, and one of an if or while of a dynamic export the
         * doubled trace's: its dims are left unknown */
        bool *dyn = xcalloc((size_t)g->n + 1, sizeof *dyn);
        for (int ri = 0; ri < top->n; ri++) {
            const GNode *n = &g->nodes[top->nodes[ri]];
            bool d = (n->kind == G_OP && (tfe_ops[n->op].flags & F_SELFOUT)) ||
                     (E.dynamic && (n->kind == G_COND || n->kind == G_WHILE)); /* (emit_region) */
            for (int k = 0; k < n->nin; k++) d |= dyn[n->in[k].node];
            dyn[top->nodes[ri]] = d;
        }
        for (int i = 0; i < top->nouts; i++) {
            GRef o = top->outs[i];
            tfe_meta m = g->nodes[o.node].meta[o.out];
            for (int d = 0; dyn[o.node] && d < m.rank; d++) m.shape[d] = -1;
            value_info(&outputs, 12, sp->out_names[i], &m, NULL);
            /* a result that is a value named otherwise (an input, twice the same) */
            const char *have = E.vn[E.off[o.node] + o.out];
            if (strcmp(have, sp->out_names[i])) ox_node(&E, "Identity", 1, &have, 1, (const char *const *)&sp->out_names[i], NULL);
        }
        free(dyn);
        Buf gr = {0};
        buf_add(&gr, E.nodes.s ? E.nodes.s : "", E.nodes.len);
        pb_field_string(&gr, 2, g->name ? g->name : "tfe");
        if (E.inits.len) buf_add(&gr, E.inits.s, E.inits.len);
        if (inputs.len) buf_add(&gr, inputs.s, inputs.len);
        if (outputs.len) buf_add(&gr, outputs.s, outputs.len);
        pb_field_varint(model, 1, 8); /* ir_version */
        pb_field_string(model, 2, "tfe");
        pb_field_string(model, 3, PACKAGE_VERSION);
        pb_field_bytes(model, 7, gr.s, gr.len);
        Buf ops = {0};
        pb_field_string(&ops, 1, "");
        pb_field_varint(&ops, 2, 17);
        pb_field_bytes(model, 8, ops.s, ops.len);
        free(ops.s);
        free(gr.s);
    }
    for (int i = 0; i < nv; i++) free(E.vn[i]);
    for (int i = 0; i < E.nuser; i++) free(user[i]);
    free(user);
    free(live);
    free(E.vn);
    free(E.off);
    free(E.nodes.s);
    free(E.inits.s);
    free(inputs.s);
    free(outputs.s);
    return rc;
}

/* --- export(f, args..., path=, dynamic=, outputs=) ----------------------------------------- */

static void free_dims(char ***dims, int n)
{
    for (int i = 0; dims && i < n; i++) {
        for (int d = 0; dims[i] && d < TFE_MAX_RANK; d++) free(dims[i][d]);
        free(dims[i]);
    }
    free(dims);
}

/* Where the result template v holds a variable: true, its path ("", "[1]",
 * ".w[0]") in path. A variable in a result is the variable object itself,
 * not a tensor the graph computes, so the model would have no output for it. */
static bool find_variable(Value v, char *path, size_t cap)
{
    if (value_is_variable(v)) return true;
    size_t len = strlen(path);
    if (v.kind == V_TUPLE || v.kind == V_LIST) {
        Seq *s = (Seq *)v.u.o;
        for (int i = 0; i < s->n; i++) {
            snprintf(path + len, cap - len, "[%d]", i);
            if (find_variable(s->items[i], path, cap)) return true;
        }
    } else if (v.kind == V_RECORD) {
        Record *r = (Record *)v.u.o;
        for (int i = 0; i < r->n; i++) {
            snprintf(path + len, cap - len, ".%s", r->keys[i]->s);
            if (find_variable(r->vals[i], path, cap)) return true;
        }
    }
    path[len] = 0;
    return false;
}

static Graph *export_source(Trace *t) { return t->g->raw ? t->g->raw : t->g; }

/* Does g leave every named dim of the arguments' leaves unknown? */
static bool named_dims_free(const Graph *g, char ***dims, int nleaf)
{
    for (int l = 0; l < nleaf; l++)
        for (int d = 0; dims[l] && d < TFE_MAX_RANK; d++)
            if (dims[l][d] && (!g || l >= g->ninputs || g->nodes[g->inputs[l]].meta[0].shape[d] >= 0)) return false;
    return true;
}

/* The model's input and output names: the parameters' (a tuple's leaves
 * xs_0, xs_1, ...), and outputs= or output, output0, output1, ... An ONNX
 * graph defines each name once: two inputs of one name, or an outputs= name
 * that an input or another output has, is an error; a default output name
 * that a parameter has gets a '_'. */
static int name_outputs(Interp *I, const char *fname, const ExportSpec *sp, Value outs_v, int nout, const char **onames)
{
    int nin = 0;
    char **in = xcalloc((size_t)sp->nargs + 1, sizeof *in);
    int rc = 0;
    for (int i = 0; i < sp->nargs && !rc; i++) {
        if (sp->baked[i]) continue;
        in[nin] = clean_name(sp->in_names[i]);
        for (int j = 0; j < nin && !rc; j++)
            if (!strcmp(in[j], in[nin]))
                rc = interp_raise(I, "export(): two inputs of the model would be named '%s' (a parameter, and a "
                                  "leaf of a tuple or record argument: xs_0 is xs[0]); rename a parameter of '%s'",
                                  in[nin], fname);
        nin++;
    }
    Seq *os = outs_v.kind != V_NIL ? (Seq *)outs_v.u.o : NULL;
    if (!rc && nout == 0)
        rc = interp_raise(I, "export(): '%s' returns nothing (nil), and a model needs an output: return what it "
                          "computes (return y, or return (y, z) for two outputs)", fname);
    else if (!rc && os && os->n != nout)
        rc = interp_raise(I, "export(): outputs names %d results, but '%s' returns %d: give one name per result, "
                          "as outputs=(%s)", os->n, fname, nout, nout == 1 ? "\"y\"," : "\"y\", \"z\", ...");
    for (int i = 0; i < nout && !rc; i++) {
        if (os) {
            if (os->items[i].kind != V_STR) {
                rc = arg_error(I, "export()", "outputs", "a tuple of strings", os->items[i]);
                break;
            }
            const char *s = ((Str *)os->items[i].u.o)->s;
            if (!*s) {
                rc = interp_raise(I, "export(): outputs[%d] is \"\": an output needs a name (ONNX reads \"\" as "
                                  "no value)", i);
                break;
            }
            for (int j = 0; j < i && !rc; j++)
                if (!strcmp(onames[j], s))
                    rc = interp_raise(I, "export(): outputs names '%s' twice (results %d and %d): each output needs "
                                      "a name of its own", s, j, i);
            for (int j = 0; j < nin && !rc; j++)
                if (!strcmp(in[j], s))
                    rc = interp_raise(I, "export(): outputs[%d] is '%s', the name of an input of the model: give the "
                                      "output another name", i, s);
            if (!rc) onames[i] = xstrdup(s);
        } else {
            char b[64];
            snprintf(b, sizeof b, nout == 1 ? "output" : "output%d", i);
            size_t n = strlen(b);
            for (int j = 0; j < nin; j++)
                if (!strcmp(in[j], b) && n + 1 < sizeof b) b[n++] = '_', b[n] = 0, j = -1;
            onames[i] = xstrdup(b);
        }
    }
    for (int i = 0; i < nin; i++) free(in[i]);
    free(in);
    return rc;
}

BUILTIN(bi_export)
{
    (void)data;
    if (argc < 1 || argv[0].kind != V_FN)
        return interp_raise(I, "export() needs a staged function and its arguments, got %s",
                            argc ? value_kind_name(argv[0]) : "nothing");
    Closure *c = (Closure *)argv[0].u.o;
    const Loc here = I->cur_loc; /* calling f moves it; errors after that are export()'s */
    const char *path = "model.onnx";
    Value dyn = v_nil(), outs_v = v_nil();
    for (int k = 0; k < nkw; k++) {
        const char *kn = kwnames[k]->s;
        if (!strcmp(kn, "path")) {
            if (arg_string(I, "export()", "path", kwvals[k], &path)) return -1;
        } else if (!strcmp(kn, "dynamic")) {
            dyn = kwvals[k];
            if (dyn.kind != V_NIL && dyn.kind != V_STR && dyn.kind != V_RECORD)
                return arg_error(I, "export()", "dynamic", "a dim name or a record of argument name -> dim names", dyn);
        } else if (!strcmp(kn, "outputs")) {
            outs_v = kwvals[k];
            if (outs_v.kind != V_TUPLE && outs_v.kind != V_LIST)
                return arg_error(I, "export()", "outputs", "a tuple of names", outs_v);
        } else {
            return interp_raise(I, "export(): unknown keyword '%s' (path, dynamic, outputs)", kn);
        }
    }
    if (I->opt.eager || I->run_eagerly)
        return interp_raise(I, "export(): staged functions run eagerly (--eager or run_eagerly(true)), so there is no graph");
    FnInfo *info = c->fn->info;
    if (!info->is_staged && !c->stage_forced)
        return interp_raise(I, "export(): '%s' is not staged (mark it @staged)", c->name);
    int nargs = argc - 1;
    const Value *args = argv + 1;
    for (int i = 0; i < nargs; i++)
        if (args[i].kind != V_TENSOR && args[i].kind != V_SCALAR && args[i].kind != V_TUPLE && args[i].kind != V_LIST &&
            args[i].kind != V_RECORD)
            return interp_raise(I, "export(): argument %d of '%s' is %s; the model's inputs are tensors", i + 1, c->name,
                                value_kind_name(args[i]));
    /* each argument's first leaf */
    int nleaf = 0;
    SigBuf sb = {0};
    Leaves lv = {0};
    int *leaf_first = xcalloc((size_t)nargs + 1, sizeof *leaf_first);
    for (int i = 0; i < nargs; i++) {
        int before = lv.n;
        sig_flatten(args[i], &sb, &lv, SIG_INPUT);
        leaf_first[i] = before;
    }
    nleaf = lv.n;
    char ***dims = xcalloc((size_t)nleaf + 1, sizeof *dims); /* per leaf: its dims' names */
    int rc = dyn.kind != V_NIL ? ex_parse_dynamic(I, dyn, info, nargs, args, dims) : 0;
    Trace *t = NULL;
    if (!rc) {
        t = stage_find(c, nargs, args);
        if (!t) {
            Value r;
            rc = call_value(I, argv[0], nargs, args, 0, NULL, NULL, &r);
            if (!rc) value_decref(r);
            t = rc ? NULL : stage_last_trace(c);
        }
        if (!rc && !t) rc = interp_raise(I, "export(): '%s' could not be staged for these arguments", c->name);
    }
    I->cur_loc = here;
    /* named dims the trace fixed: a second call with them doubled relaxes
     * it, or gives a trace for those sizes that differs only in slices'
     * bounds (x[1:], x[:-1]), which ONNX's Slice reads from the end */
    Graph *merged = NULL;
    int64_t **slice_se = NULL;
    Value *dargs = NULL;
    bool stop = false;
    if (!rc && !named_dims_free(t ? export_source(t) : NULL, dims, nleaf) && !(rc = first_effect(I, export_source(t), 0, &stop))) {
        bool read = t->shape_read;
        Loc clamp = t->clamp_loc; /* (line 0 unless only clamped slices read a size) */
        dargs = xcalloc((size_t)nargs + 1, sizeof *dargs);
        rc = ex_retrace_doubled(I, argv[0], nargs, args, dims, dargs);
        if (!rc) t = stage_find(c, nargs, args);
        I->cur_loc = here;
        int bad = -1;
        if (!rc && !named_dims_free(t ? export_source(t) : NULL, dims, nleaf)) {
            Trace *t2 = stage_find(c, nargs, dargs);
            if (t && t2 && t2 != t && !read) {
                Graph *m = ex_merge_traces(export_source(t), export_source(t2), &slice_se, &bad);
                if (m && named_dims_free(m, dims, nleaf)) merged = m;
                else if (m) graph_decref(m);
            }
            if (!merged) {
                int leaf = -1, dim = 0; /* the first named dim the trace fixed */
                const Graph *tg = t ? export_source(t) : NULL;
                for (int l = 0; l < nleaf && leaf < 0; l++)
                    for (int d = 0; dims[l] && d < TFE_MAX_RANK && leaf < 0; d++)
                        if (dims[l][d] && !(tg && l < tg->ninputs && tg->nodes[tg->inputs[l]].meta[0].shape[d] < 0))
                            leaf = l, dim = d;
                const GNode *in = tg && leaf >= 0 && leaf < tg->ninputs ? &tg->nodes[tg->inputs[leaf]] : NULL;
                const char *nm = in && in->label ? in->label : "?";
                if (read && clamp.line) {
                    /* the trace holds the bounds clamped (x[:100] of 4 rows is
                     * 0:4, at 8 rows 0:8): the program's 100 is not in it, so
                     * no bound of ONNX's Slice gives tfe's rows at every size */
                    rc = raise_at(I, clamp, "export(): dim %d of '%s' cannot be dynamic: a bound of the slice at line %d "
                                  "is past the size traced (a bound clamped to the size, as in x[:100] of 4 rows, "
                                  "is the size in the trace, not the bound): export with an example larger than "
                                  "the slice's bounds", dim, nm, clamp.line);
                } else if (bad >= 0) {
                    const GNode *sl = &export_source(t)->nodes[bad];
                    rc = raise_at(I, sl->loc, "export(): dim %d of '%s' cannot be dynamic: the slice at line %d has a "
                                  "bound that %s computes from the size (ONNX's Slice holds a number, a negative one "
                                  "counted from the end, or an open end: x[1:], x[:-1], x[-3:])",
                                  dim, nm, sl->loc.line, c->name);
                } else {
                    rc = interp_raise(I, "export(): dim %d of '%s' cannot be dynamic: %s's graph depends on its size "
                                      "(it reads a shape, as nn.flatten does, or makes something of that size)",
                                      dim, nm, c->name);
                }
            }
        }
    }
    Graph *g = merged ? merged : t ? export_source(t) : NULL, *own = NULL;
    /* the sizes the model declares follow the unknown dims through the ops */
    bool any_unknown = false;
    for (int i = 0; !rc && g && i < g->ninputs; i++) {
        const tfe_meta *m = &g->nodes[g->inputs[i]].meta[0];
        for (int d = 0; d < m->rank; d++) any_unknown |= m->shape[d] < 0;
    }
    if (any_unknown) {
        if (!merged) g = own = graph_clone(g);
        ex_dyn_metas(g, true);
    }
    ExportSpec sp = {0};
    char ***ldims = NULL;
    const char **onames = NULL;
    int nout = 0;
    if (!rc) {
        /* the outside bindings' values follow the arguments' leaves */
        SigBuf scratch = {0};
        for (int i = 0; i < t->nouts; i++) sig_flatten(t->outs[i].env->slots[t->outs[i].slot], &scratch, &lv, SIG_INPUT);
        sig_free(&scratch);
        if (lv.n != g->ninputs)
            rc = interp_raise(I, "export(): '%s''s graph has %d inputs, the call %d", c->name, g->ninputs, lv.n);
    }
    if (!rc) {
        sp.nargs = nleaf;
        sp.values = lv.t;
        sp.in_names = xcalloc((size_t)nleaf + 1, sizeof *sp.in_names);
        sp.baked = xcalloc((size_t)g->ninputs + 1, sizeof *sp.baked);
        ldims = xcalloc((size_t)nleaf + 1, sizeof *ldims);
        for (int i = 0; i < g->ninputs; i++) sp.baked[i] = t->static_val && t->static_val[i];
        /* a tensor argument (or a tensor in a tuple argument) whose value the
         * trace used would be no input of the model; a number's may be */
        for (int i = 0; i < nargs && !rc; i++) {
            int end = i + 1 < nargs ? leaf_first[i + 1] : nleaf;
            for (int l = leaf_first[i]; l < end && !rc; l++)
                if (sp.baked[l] && args[i].kind != V_SCALAR)
                    rc = interp_raise(I, "export(): the trace of '%s' used the value of its argument '%s' (a condition "
                                      "on it decided while tracing: and, or, an if on a host value), so the model would "
                                      "not read it; write the condition with tensor ops (logical_and, where)",
                                      c->name, g->nodes[g->inputs[l]].label ? g->nodes[g->inputs[l]].label : "?");
        }
        for (int i = 0; i < nleaf; i++) sp.in_names[i] = g->nodes[g->inputs[i]].label;
        for (int i = 0; i < nleaf; i++) ldims[i] = dims[i];
        /* relaxed dims with no name: "<input>_dim<d>" */
        char ***auto_dims = xcalloc((size_t)nleaf + 1, sizeof *auto_dims);
        for (int i = 0; i < nleaf; i++) {
            const tfe_meta *m = &g->nodes[g->inputs[i]].meta[0];
            for (int d = 0; d < m->rank; d++)
                if (m->shape[d] < 0 && !(ldims[i] && ldims[i][d])) {
                    if (!auto_dims[i]) {
                        auto_dims[i] = xcalloc(TFE_MAX_RANK, sizeof **auto_dims);
                        for (int e = 0; ldims[i] && e < TFE_MAX_RANK; e++)
                            if (ldims[i][e]) auto_dims[i][e] = xstrdup(ldims[i][e]);
                    }
                    char b[200], *cn = clean_name(sp.in_names[i]);
                    snprintf(b, sizeof b, "%.180s_dim%d", cn, d);
                    free(cn);
                    auto_dims[i][d] = xstrdup(b);
                }
            if (auto_dims[i]) ldims[i] = auto_dims[i];
        }
        sp.dims = ldims;
        nout = rc ? 0 : g->regions[0].nouts;
        onames = xcalloc((size_t)nout + 1, sizeof *onames);
        char vpath[200] = "";
        if (!rc && find_variable(t->ret_tmpl, vpath, sizeof vpath))
            rc = interp_raise(I, "export(): '%s' returns a variable%s%s, not a tensor it computes, so the model would "
                              "have no output for it: return its value (return V.value)", c->name,
                              *vpath ? " as its result" : "", vpath);
        if (!rc) rc = name_outputs(I, c->name, &sp, outs_v, nout, onames);
        sp.out_names = onames;
        sp.slice_se = slice_se;
        Buf model = {0};
        if (!rc) rc = export_graph(I, g, &sp, &model);
        if (!rc) {
            char err[400];
            snprintf(err, sizeof err, "cannot write '%s'", path);
            const void *parts[1] = {model.s};
            size_t sizes[1] = {model.len};
            if (write_file_atomic(path, parts, sizes, 1, err, sizeof err))
                rc = interp_raise(I, "export(): %s", err); /* (err names the file) */
        }
        free(model.s);
        for (int i = 0; i < nleaf; i++)
            if (auto_dims[i]) {
                for (int d = 0; d < TFE_MAX_RANK; d++) free(auto_dims[i][d]);
                free(auto_dims[i]);
            }
        free(auto_dims);
        for (int i = 0; i < nout; i++) free((char *)onames[i]);
    }
    free(onames);
    free(ldims);
    free(sp.in_names);
    free(sp.baked);
    if (own) graph_decref(own);
    if (merged) {
        ex_free_slices(slice_se, merged->n);
        graph_decref(merged);
    }
    for (int i = 0; dargs && i < nargs; i++) value_decref(dargs[i]);
    free(dargs);
    free_dims(dims, nleaf);
    free(leaf_first);
    sig_free(&sb);
    leaves_free(&lv);
    if (!rc) *out = v_nil();
    return rc;
}

/* onnx_ops(): a record of op name -> "onnx" or why it cannot be exported. */
BUILTIN(bi_onnx_ops)
{
    (void)data;
    (void)argv;
    (void)kwnames;
    (void)kwvals;
    if (argc || nkw) return interp_raise(I, "onnx_ops() takes no arguments");
    Record *r = record_new();
    for (int op = 0; op < TFE_NOPS; op++) {
        const char *why = export_refusal((tfe_op)op);
        const char *s = export_op_mapped((tfe_op)op) ? "onnx" : why ? why : "MISSING";
        record_set_take(r, tfe_ops[op].name, strlen(tfe_ops[op].name), v_cstr(s));
    }
    *out = v_obj(V_RECORD, r);
    return 0;
}

void stage_export_builtins_register(Interp *I)
{
    interp_define_builtin(I, "export", bi_export, NULL);
    interp_define_builtin(I, "onnx_ops", bi_onnx_ops, NULL);
}
