/* tape_view.c — t.graph(): what a tape recorded as a Graphviz picture, as
 * micrograd's draw_dot draws it: a box per tensor (its name when it is a
 * variable's value, dtype and shape, its value when small, and after a
 * gradient call of a tape(draw=true) its gradient), an ellipse per op,
 * edges from inputs to op to outputs. The picture is a value that prints
 * as its DOT text and has .dot() and .svg(path) (interp/graphviz.c). */
#include <stdlib.h>
#include <string.h>
#include "interp/builtins_args.h"
#include "interp/graphviz.h"
#include "interp/internal.h"
#include "interp/tape_view.h"
#include "tensor/grad.h"
#include "util/buf.h"
#include "util/xalloc.h"

#define VALUE_MAX 8 /* tensors with more elements are drawn without values */

/* A tensor's value on one line ("[1.0, 2.0]"), or its dtype and shape when
 * it is big. */
static void put_value(Buf *b, const tfe_tensor *t)
{
    int64_t n = tensor_numel(t);
    char *s = n >= 0 && n <= VALUE_MAX ? tensor_to_string(t) : NULL;
    if (!s) {
        buf_puts(b, "...");
        return;
    }
    for (const char *p = s; *p; p++) { /* newlines as spaces, runs of spaces as one */
        char c = *p == '\n' ? ' ' : *p;
        if (c == ' ' && b->len && b->s[b->len - 1] == ' ') continue;
        buf_add(b, &c, 1);
    }
    free(s);
}

static void put_type(Buf *b, const tfe_tensor *t)
{
    buf_puts(b, dtype_name(t->dtype));
    buf_puts(b, "[");
    for (int i = 0; i < t->rank; i++) {
        char d[32];
        snprintf(d, sizeof d, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
        buf_puts(b, d);
    }
    buf_puts(b, "]");
}

/* s with dot's string escapes ('"', '\\'; a newline as \n). */
static void put_escaped(Buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') buf_add(b, "\\", 1);
        if (*s == '\n') buf_puts(b, "\\n");
        else buf_add(b, s, 1);
    }
}

typedef struct Seen { const tfe_tensor **t; int n, cap; } Seen;

/* t's number in the picture, drawing its box the first time. */
static int tensor_node(Buf *b, Seen *seen, const tfe_tape *tape, const tfe_tensor *t, int nnames,
                       const tfe_tensor *const *named, const char *const *names)
{
    for (int i = 0; i < seen->n; i++)
        if (seen->t[i] == t) return i;
    if (seen->n == seen->cap) {
        seen->cap = seen->cap ? 2 * seen->cap : 16;
        seen->t = xrealloc(seen->t, sizeof *seen->t * (size_t)seen->cap);
    }
    int id = seen->n;
    seen->t[seen->n++] = t;
    Buf l = {0};
    for (int i = 0; i < nnames; i++)
        if (named[i] == t && names[i]) {
            buf_puts(&l, names[i]);
            buf_puts(&l, "\n");
            break;
        }
    put_type(&l, t);
    buf_puts(&l, "\nvalue ");
    put_value(&l, t);
    const tfe_tensor *g = tfe_tape_view_grad(tape, t);
    if (g) {
        buf_puts(&l, "\ngrad ");
        put_value(&l, g);
    }
    char head[64];
    snprintf(head, sizeof head, "  t%d [shape=box, label=\"", id);
    buf_puts(b, head);
    put_escaped(b, l.s ? l.s : "");
    buf_puts(b, "\"];\n");
    free(l.s);
    return id;
}

char *tape_to_dot(const tfe_tape *tape, int nnames, const tfe_tensor *const *named, const char *const *names)
{
    Buf b = {0}, edges = {0};
    buf_puts(&b, "digraph tape {\n  rankdir=LR;\n");
    Seen seen = {0};
    int n = tfe_tape_nentries(tape);
    for (int k = 0; k < n; k++) {
        tfe_op op;
        bool custom;
        int nin, nout;
        tfe_tensor *const *ts;
        if (!tfe_tape_entry(tape, k, &op, &custom, &nin, &nout, &ts)) continue;
        char line[160];
        snprintf(line, sizeof line, "  op%d [shape=ellipse, label=\"%s\"];\n", k,
                 custom ? "staged call" : tfe_ops[op].name);
        buf_puts(&b, line);
        for (int i = 0; i < nin + nout; i++) {
            int id = tensor_node(&b, &seen, tape, ts[i], nnames, named, names);
            if (i < nin) snprintf(line, sizeof line, "  t%d -> op%d;\n", id, k);
            else snprintf(line, sizeof line, "  op%d -> t%d;\n", k, id);
            buf_puts(&edges, line);
        }
    }
    if (edges.s) buf_puts(&b, edges.s);
    buf_puts(&b, "}\n");
    free(edges.s);
    free(seen.t);
    return b.s;
}

/* ---- the picture as a value ---- */

typedef struct DotPic { Object o; char *dot; } DotPic;

static void dotpic_free(Obj *o)
{
    free(((DotPic *)o)->dot);
    free(o);
}

static char *dotpic_repr(Obj *o)
{
    char *s = xstrdup(((DotPic *)o)->dot);
    size_t n = strlen(s);
    if (n && s[n - 1] == '\n') s[n - 1] = '\0'; /* print adds the newline */
    return s;
}

BUILTIN(bi_dotpic_dot)
{
    (void)data;
    Value self[1];
    bool has[1];
    if (args_parse(I, "dot", "self", argc, argv, nkw, kwnames, kwvals, self, has)) return -1;
    *out = v_cstr(((DotPic *)argv[0].u.o)->dot);
    return 0;
}

BUILTIN(bi_dotpic_svg)
{
    (void)data;
    Value a[2];
    bool p[2];
    if (args_parse(I, "svg", "self, path", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    const char *path;
    if (arg_string(I, "svg()", "path", a[1], &path)) return -1;
    if (graphviz_svg(I, "svg", ((DotPic *)a[0].u.o)->dot, path)) return -1;
    *out = v_nil();
    return 0;
}

static int dotpic_getattr(Interp *I, Obj *o, const char *name, Value *out)
{
    (void)I;
    BuiltinFn fn = !strcmp(name, "dot") ? bi_dotpic_dot : !strcmp(name, "svg") ? bi_dotpic_svg : NULL;
    if (!fn) return 1;
    Value b = builtin_new(name, fn, NULL);
    o->refcount++;
    ((Builtin *)b.u.o)->self = v_obj(V_OBJECT, o);
    *out = b;
    return 0;
}

static const ObjectClass dotpic_class = {
    .name = "picture", .free = dotpic_free, .repr = dotpic_repr, .getattr = dotpic_getattr,
};

Value dot_picture_new(char *dot)
{
    DotPic *p = object_new(sizeof *p, &dotpic_class);
    p->dot = dot;
    return v_obj(V_OBJECT, p);
}
