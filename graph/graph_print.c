/* graph_print.c — the graph IR as text (stable: golden test output) and as
 * Graphviz dot. Neither prints pointers or addresses. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"
#include "graph/graph.h"
#include "graph/host.h"
#include "tensor/fused.h"

#define LINE_COL 64   /* "line N" starts at this column (at least 2 spaces) */
#define CONST_MAX 8   /* constants with more elements print without values */

static void bprintf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(Buf *b, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        buf_add(b, tmp, (size_t)n);
        return;
    }
    buf_grow(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

static void bspaces(Buf *b, int n)
{
    for (int i = 0; i < n; i++) buf_add(b, " ", 1);
}

static char *bfinish(Buf *b)
{
    buf_grow(b, 0);
    b->s[b->len] = '\0';
    return b->s;
}

/* s with '"' and '\\' escaped (and control characters as \n, \t, \xNN). */
static void bescaped(Buf *b, const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf_add(b, "\\", 1);
            buf_add(b, s, 1);
        } else if (c == '\n') buf_puts(b, "\\n");
        else if (c == '\t') buf_puts(b, "\\t");
        else if (c < 0x20) bprintf(b, "\\x%02x", c);
        else buf_add(b, s, 1);
    }
}

/* ---- pieces shared by both formats ---- */

void graph_put_ref(Buf *b, const Graph *g, GRef r)
{
    if (r.node >= 0 && r.node < g->n && g->nodes[r.node].nout > 1) bprintf(b, "%%%d.%d", r.node, r.out);
    else bprintf(b, "%%%d", r.node);
}

void graph_put_refs(Buf *b, const Graph *g, const GRef *r, int n)
{
    for (int i = 0; i < n; i++) {
        if (i) buf_puts(b, ", ");
        graph_put_ref(b, g, r[i]);
    }
}

static void put_dims(Buf *b, int rank, const int64_t *shape)
{
    buf_puts(b, "[");
    for (int i = 0; i < rank; i++) {
        if (i) buf_puts(b, ", ");
        if (shape[i] < 0) buf_puts(b, "?");
        else bprintf(b, "%lld", (long long)shape[i]);
    }
    buf_puts(b, "]");
}

void graph_put_meta(Buf *b, const tfe_meta *m)
{
    buf_puts(b, dtype_name(m->dtype));
    put_dims(b, m->rank, m->shape);
    if (m->weak) buf_puts(b, " weak");
}

static const tfe_meta *ref_meta(const Graph *g, GRef r)
{
    if (r.node < 0 || r.node >= g->n) return NULL;
    const GNode *n = &g->nodes[r.node];
    if (r.out < 0 || r.out >= n->nout || !n->meta) return NULL;
    return &n->meta[r.out];
}

static void put_node_types(Buf *b, const GNode *n)
{
    if ((n->kind == G_HOST || n->kind == G_VAR_READ) && graph_host.put_types && graph_host.put_types(b, n)) return;
    if (n->nout == 0) {
        buf_puts(b, "()");
        return;
    }
    for (int k = 0; k < n->nout; k++) {
        if (k) buf_puts(b, ", ");
        graph_put_meta(b, &n->meta[k]);
    }
}

/* A constant's value on one line, or NULL when it is big or has no value. */
static char *const_value_str(const tfe_tensor *t)
{
    if (!t || !t->storage || t->storage->device != 0) return NULL;
    int64_t numel = tensor_numel(t);
    if (numel < 0 || numel > CONST_MAX) return NULL;
    char *s = tensor_to_string(t);
    if (!s) return NULL;
    /* newlines become spaces; runs of spaces collapse to one */
    char *o = s;
    for (const char *p = s; *p; p++) {
        char c = *p == '\n' ? ' ' : *p;
        if (c == ' ' && o > s && o[-1] == ' ') continue;
        *o++ = c;
    }
    *o = '\0';
    return s;
}

static void put_const(Buf *b, const GNode *n)
{
    char *s = const_value_str(n->value);
    if (s) {
        buf_puts(b, s);
        free(s);
    } else if (n->value) {
        buf_puts(b, dtype_name(n->value->dtype));
        put_dims(b, n->value->rank, n->value->shape);
    } else if (n->nout > 0) {
        buf_puts(b, dtype_name(n->meta[0].dtype));
        put_dims(b, n->meta[0].rank, n->meta[0].shape);
    } else buf_puts(b, "?");
}

static void put_attrs(Buf *b, const GNode *n)
{
    const tfe_attrs *at = n->at;
    if (!at || (unsigned)n->op >= TFE_NOPS) return;
    const tfe_opinfo *info = &tfe_ops[n->op];
    bool any = false;
#define SEP() do { buf_puts(b, any ? ", " : " {"); any = true; } while (0)
    if (at->naxes >= 0) {
        SEP();
        buf_puts(b, "axes=[");
        for (int i = 0; i < at->naxes && i < TFE_MAX_RANK; i++)
            bprintf(b, "%s%lld", i ? ", " : "", (long long)at->axes[i]);
        buf_puts(b, "]");
    }
    if (at->keepdims) {
        SEP();
        buf_puts(b, "keepdims=true");
    }
    if (n->op == OP_CAST || (info->flags & F_CREATE)) {
        SEP();
        bprintf(b, "dtype=%s", dtype_name(at->dtype));
    }
    if (at->nints > 0) {
        SEP();
        buf_puts(b, "ints=[");
        int m = at->nints < 32 ? at->nints : 32;
        for (int i = 0; i < m; i++) bprintf(b, "%s%lld", i ? ", " : "", (long long)at->ints[i]);
        buf_puts(b, "]");
    }
    int nf = 0;
    for (int i = 0; i < 4; i++)
        if (at->f[i] != 0) nf = i + 1;
    if (nf) {
        SEP();
        buf_puts(b, "f=[");
        for (int i = 0; i < nf; i++) {
            char tmp[64];
            format_float_shortest(at->f[i], TFE_FLOAT64, tmp, sizeof tmp);
            bprintf(b, "%s%s", i ? ", " : "", tmp);
        }
        buf_puts(b, "]");
    }
#undef SEP
    if (any) buf_puts(b, "}");
}

/* A host or variable node: the host prints it (graph/host.h). */
static void put_host_node(Buf *b, const Graph *g, const GNode *n, bool brief)
{
    if (n->host && graph_host.put_operation) graph_host.put_operation(b, g, n, brief);
    else buf_puts(b, n->kind == G_HOST ? "host ?" : "var_read ?");
}

static int param_index(const Graph *g, int id)
{
    int r = g->nodes[id].region;
    if (r < 0 || r >= g->nregions) return -1;
    const GRegion *reg = &g->regions[r];
    for (int i = 0; i < reg->nparams; i++)
        if (reg->params[i] == id) return i;
    return -1;
}

static bool is_param_of(const GRegion *reg, int id)
{
    for (int i = 0; i < reg->nparams; i++)
        if (reg->params[i] == id) return true;
    return false;
}

/* ---- text ---- */

static void text_region(Buf *b, const Graph *g, int r, int indent, int depth);

/* The node's operation, without its outputs or type: "mul(%0, %2) {axes=[0]}". */
static void put_operation(Buf *b, const Graph *g, int id)
{
    const GNode *n = &g->nodes[id];
    switch (n->kind) {
    case G_INPUT:
        bprintf(b, "input %d", n->input_index);
        if (n->label) {
            buf_puts(b, " \"");
            bescaped(b, n->label);
            buf_puts(b, "\"");
        }
        break;
    case G_CONST:
        buf_puts(b, "const ");
        put_const(b, n);
        break;
    case G_OP:
        buf_puts(b, (unsigned)n->op < TFE_NOPS ? tfe_ops[n->op].name : "?op");
        buf_puts(b, n->half == GH_START ? ".start(" : n->half == GH_WAIT ? ".wait(" : "(");
        graph_put_refs(b, g, n->in, n->nin);
        buf_puts(b, ")");
        if (n->half != GH_WAIT) put_attrs(b, n); /* (the wait's are its start's) */
        break;
    case G_VAR_READ: case G_HOST:
        put_host_node(b, g, n, false);
        break;
    case G_FUSED: {
        buf_puts(b, "fused(");
        graph_put_refs(b, g, n->in, n->nin);
        buf_puts(b, ") {");
        int k = 0;
        for (int i = 0; i < n->prog->ninstr; i++) {
            int op = n->prog->code[i].op;
            if (op == FOP_LOAD || op == FOP_CONST) continue;
            bprintf(b, "%s%s", k++ ? " " : "", tfe_fop_name(op));
        }
        buf_puts(b, "}");
        if (n->prog->red) { /* its final reduction */
            bprintf(b, " then %s", tfe_ops[n->op].name);
            put_attrs(b, n);
        }
        break;
    }
    case G_COND:
    case G_WHILE:
        buf_puts(b, n->kind == G_COND ? "cond(" : "while(");
        graph_put_refs(b, g, n->in, n->nin);
        buf_puts(b, ")");
        break;
    case G_PARAM:
        bprintf(b, "param %d", param_index(g, id));
        break;
    default:
        bprintf(b, "?kind%d", (int)n->kind);
        break;
    }
}

static void text_node(Buf *b, const Graph *g, int id, int indent, int depth)
{
    const GNode *n = &g->nodes[id];
    size_t start = b->len;
    bspaces(b, indent);
    if (n->nout > 1) {
        for (int k = 0; k < n->nout; k++) bprintf(b, "%s%%%d.%d", k ? ", " : "", id, k);
    } else bprintf(b, "%%%d", id);
    buf_puts(b, " = ");
    put_operation(b, g, id);
    buf_puts(b, " : ");
    put_node_types(b, n);
    if (n->loc.src && n->loc.line > 0) {
        int len = (int)(b->len - start);
        bspaces(b, len + 2 <= LINE_COL ? LINE_COL - len : 2);
        bprintf(b, "line %d", n->loc.line);
        /* a node of a function the trace inlined (a nested call) names it */
        const char *fname = n->frames && n->frames->n > 0 && graph_host.frames_name ? graph_host.frames_name(n->frames) : NULL;
        if (fname) bprintf(b, " in %s", fname);
    }
    buf_puts(b, "\n");
    if ((n->kind == G_COND || n->kind == G_WHILE) && depth < 200) {
        const char *names[2][2] = {{"then", "else"}, {"cond", "body"}};
        for (int i = 0; i < 2; i++) {
            int r = n->regions[i];
            bspaces(b, indent + 2);
            buf_puts(b, names[n->kind == G_WHILE][i]);
            if (r >= 0 && r < g->nregions && g->regions[r].nparams > 0) {
                const GRegion *reg = &g->regions[r];
                buf_puts(b, "(");
                for (int p = 0; p < reg->nparams; p++) bprintf(b, "%s%%%d", p ? ", " : "", reg->params[p]);
                buf_puts(b, ")");
            }
            buf_puts(b, ":\n");
            if (r >= 0 && r < g->nregions) text_region(b, g, r, indent + 4, depth + 1);
        }
    }
}

static void text_region(Buf *b, const Graph *g, int r, int indent, int depth)
{
    const GRegion *reg = &g->regions[r];
    for (int i = 0; i < reg->nparams; i++)
        if (reg->params[i] >= 0 && reg->params[i] < g->n) text_node(b, g, reg->params[i], indent, depth);
    for (int i = 0; i < reg->n; i++) {
        int id = reg->nodes[i];
        if (id < 0 || id >= g->n || is_param_of(reg, id)) continue;
        text_node(b, g, id, indent, depth);
    }
    if (r == 0) {
        bspaces(b, indent);
        buf_puts(b, reg->nouts ? "return " : "return");
        graph_put_refs(b, g, reg->outs, reg->nouts);
        buf_puts(b, "\n");
    } else if (reg->nouts) {
        bspaces(b, indent);
        buf_puts(b, "yield ");
        graph_put_refs(b, g, reg->outs, reg->nouts);
        buf_puts(b, "\n");
    }
}

char *graph_to_text(const Graph *g)
{
    Buf b = {0};
    buf_puts(&b, "graph ");
    buf_puts(&b, g->name ? g->name : "<fn>");
    buf_puts(&b, "(");
    for (int i = 0; i < g->ninputs; i++) {
        if (i) buf_puts(&b, ", ");
        int id = g->inputs[i];
        if (id < 0 || id >= g->n) {
            buf_puts(&b, "?");
            continue;
        }
        const GNode *n = &g->nodes[id];
        if (n->label) buf_puts(&b, n->label);
        else bprintf(&b, "%%%d", id);
        buf_puts(&b, ": ");
        put_node_types(&b, n);
    }
    buf_puts(&b, ")");
    if (g->nregions > 0) {
        const GRegion *top = &g->regions[0];
        buf_puts(&b, " ->");
        if (top->nouts == 0) buf_puts(&b, " ()");
        for (int i = 0; i < top->nouts; i++) {
            buf_puts(&b, i ? ", " : " ");
            const tfe_meta *m = ref_meta(g, top->outs[i]);
            if (m) graph_put_meta(&b, m);
            else buf_puts(&b, "?");
        }
    }
    buf_puts(&b, "\n");
    if (g->nregions > 0) text_region(&b, g, 0, 2, 0);
    return bfinish(&b);
}

/* ---- dot ---- */

static const char *dot_shape(GKind k)
{
    switch (k) {
    case G_INPUT: case G_CONST: case G_PARAM: return "ellipse";
    case G_COND: case G_WHILE: return "diamond";
    case G_HOST: return "note";
    case G_OP: case G_VAR_READ: case G_FUSED:
    default: return "box";
    }
}

/* A fused node's label: "fused", then each op it computes, in order, with
 * the source line that made it ("mul  line 3"), then its final reduction
 * (one line each: dot_label escapes the newlines). */
static void dot_fused(Buf *t, const GNode *n)
{
    buf_puts(t, "fused");
    for (int i = 0; i < n->prog->ninstr; i++) {
        int op = n->prog->code[i].op;
        if (op == FOP_LOAD || op == FOP_CONST) continue;
        bprintf(t, "\n%s", tfe_fop_name(op));
        if (n->fused_lines && n->fused_lines[i] > 0) bprintf(t, "  line %d", n->fused_lines[i]);
    }
    if (n->prog->red) {
        bprintf(t, "\nthen %s", tfe_ops[n->op].name);
        put_attrs(t, n);
        if (n->loc.src && n->loc.line > 0) bprintf(t, "  line %d", n->loc.line);
    }
}

/* The label of a node: its operation (without inputs) and its type. */
static void dot_label(Buf *b, const Graph *g, int id)
{
    const GNode *n = &g->nodes[id];
    Buf t = {0};
    switch (n->kind) {
    case G_INPUT:
        if (n->label) buf_puts(&t, n->label);
        else bprintf(&t, "input %d", n->input_index);
        break;
    case G_CONST:
        buf_puts(&t, "const ");
        put_const(&t, n);
        break;
    case G_OP:
        buf_puts(&t, (unsigned)n->op < TFE_NOPS ? tfe_ops[n->op].name : "?op");
        if (n->half) buf_puts(&t, n->half == GH_START ? ".start" : ".wait");
        put_attrs(&t, n);
        /* a conv with its epilogue (graph/opt_conv.c): the ops it stands for */
        if ((n->op == OP_CONV2D_BIAS || n->op == OP_CONV2D_BIAS_RELU) && n->loc.src && n->loc.line > 0)
            bprintf(&t, "\nconv2d + add%s  line %d", n->op == OP_CONV2D_BIAS_RELU ? " + relu" : "",
                    n->loc.line);
        break;
    case G_VAR_READ: case G_HOST:
        put_host_node(&t, g, n, true);
        break;
    case G_FUSED: dot_fused(&t, n); break;
    case G_COND: buf_puts(&t, "cond"); break;
    case G_WHILE: buf_puts(&t, "while"); break;
    case G_PARAM: bprintf(&t, "param %d", param_index(g, id)); break;
    default: bprintf(&t, "?kind%d", (int)n->kind); break;
    }
    bescaped(b, t.s ? t.s : "");
    free(t.s);
    t = (Buf){0};
    put_node_types(&t, n);
    buf_puts(b, "\\n");
    bescaped(b, t.s ? t.s : "");
    free(t.s);
}

static void dot_region(Buf *b, const Graph *g, int r, int indent, int depth);

static void dot_node(Buf *b, const Graph *g, int id, int indent, int depth)
{
    const GNode *n = &g->nodes[id];
    bspaces(b, indent);
    bprintf(b, "n%d [shape=%s, label=\"", id, dot_shape(n->kind));
    dot_label(b, g, id);
    buf_puts(b, "\"];\n");
    if ((n->kind == G_COND || n->kind == G_WHILE) && depth < 200) {
        const char *names[2][2] = {{"then", "else"}, {"cond", "body"}};
        for (int i = 0; i < 2; i++) {
            int r = n->regions[i];
            if (r < 0 || r >= g->nregions) continue;
            bspaces(b, indent);
            bprintf(b, "subgraph cluster_%d {\n", r);
            bspaces(b, indent + 2);
            bprintf(b, "label=\"%s\";\n", names[n->kind == G_WHILE][i]);
            dot_region(b, g, r, indent + 2, depth + 1);
            bspaces(b, indent);
            buf_puts(b, "}\n");
        }
    }
}

static void dot_region(Buf *b, const Graph *g, int r, int indent, int depth)
{
    const GRegion *reg = &g->regions[r];
    for (int i = 0; i < reg->nparams; i++)
        if (reg->params[i] >= 0 && reg->params[i] < g->n) dot_node(b, g, reg->params[i], indent, depth);
    for (int i = 0; i < reg->n; i++) {
        int id = reg->nodes[i];
        if (id < 0 || id >= g->n || is_param_of(reg, id)) continue;
        dot_node(b, g, id, indent, depth);
    }
}

char *graph_to_dot(const Graph *g)
{
    Buf b = {0};
    buf_puts(&b, "digraph \"");
    bescaped(&b, g->name ? g->name : "<fn>");
    buf_puts(&b, "\" {\n");
    if (g->nregions > 0) dot_region(&b, g, 0, 2, 0);
    /* data edges, control (effect) edges, and region results flowing to
     * their control-flow node */
    for (int i = 0; i < g->n; i++) {
        const GNode *n = &g->nodes[i];
        for (int k = 0; k < n->nin; k++) bprintf(&b, "  n%d -> n%d;\n", n->in[k].node, i);
        if (n->effect_dep >= 0) bprintf(&b, "  n%d -> n%d [style=dashed];\n", n->effect_dep, i);
        if (n->kind == G_COND || n->kind == G_WHILE)
            for (int j = 0; j < 2; j++) {
                int r = n->regions[j];
                if (r < 0 || r >= g->nregions) continue;
                for (int k = 0; k < g->regions[r].nouts; k++)
                    bprintf(&b, "  n%d -> n%d [style=dotted];\n", g->regions[r].outs[k].node, i);
            }
    }
    buf_puts(&b, "  out [shape=plaintext, label=\"return\"];\n");
    if (g->nregions > 0)
        for (int k = 0; k < g->regions[0].nouts; k++)
            bprintf(&b, "  n%d -> out;\n", g->regions[0].outs[k].node);
    buf_puts(&b, "}\n");
    return bfinish(&b);
}
