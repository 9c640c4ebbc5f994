/* graph_value.c — graph(f, args...): the graph a staged function runs for
 * those arguments, as a value that prints as text IR and has .dot() and
 * .svg(path). */
#include <stdlib.h>
#include <string.h>
#include "graph/opt.h"
#include "interp/builtins_args.h"
#include "interp/graphviz.h"
#include "stage/staged.h"
#include "stage/trace.h"
#include "util/xalloc.h"

typedef struct GraphObj { Object o; Graph *g; } GraphObj;

static void graphobj_free(Obj *o)
{
    graph_decref(((GraphObj *)o)->g);
    free(o);
}

/* The text IR, then (for an optimized graph) one line of what each pass did. */
static char *graphobj_repr(Obj *o)
{
    const Graph *g = ((GraphObj *)o)->g;
    char *s = graph_to_text(g);
    size_t n = strlen(s);
    if (n && s[n - 1] == '\n') s[n - 1] = 0; /* print adds the newline */
    if (g->opt && g->opt->npasses) {
        char *line = opt_report_line(g->opt);
        size_t m = strlen(s) + strlen(line) + 16;
        char *t = xmalloc(m);
        snprintf(t, m, "%s\n# passes: %s", s, line);
        free(line);
        free(s);
        s = t;
    }
    return s;
}

/* g.dump(pass): the graph before and after that pass, as the optimizer saw it. */
BUILTIN(bi_graph_dump)
{
    (void)data;
    (void)kwnames;
    (void)kwvals;
    if (argc != 2 || nkw || argv[1].kind != V_STR) return interp_raise(I, "dump() takes the name of a pass");
    const Graph *g = ((GraphObj *)argv[0].u.o)->g;
    const char *name = ((Str *)argv[1].u.o)->s;
    int p = opt_pass_index(name);
    if (p < 0) return interp_raise(I, "dump(): no pass '%s' (passes: dce, fold, algebra, cse, conv, fuse)", name);
    if (!g->opt || p >= g->opt->npasses || !g->opt->text[p] || !g->opt->text[p + 1])
        return interp_raise(I, "dump(): this graph was not optimized (--no-optimize)");
    const OptReport *r = g->opt;
    size_t m = strlen(r->text[p]) + strlen(r->text[p + 1]) + 200;
    char *t = xmalloc(m);
    snprintf(t, m, "--- before %s (%d nodes)\n%s--- after %s (%d nodes)\n%s", name, r->before[p], r->text[p], name,
             r->after[p], r->text[p + 1]);
    *out = v_cstr(t);
    free(t);
    return 0;
}

/* g.report(): "dce 9 -> 7, fold 7 -> 6, ...". */
BUILTIN(bi_graph_report)
{
    (void)data;
    (void)kwnames;
    (void)kwvals;
    if (argc != 1 || nkw) return interp_raise(I, "report() takes no arguments");
    const Graph *g = ((GraphObj *)argv[0].u.o)->g;
    char *line = g->opt ? opt_report_line(g->opt) : xstrdup("not optimized");
    *out = v_cstr(line);
    free(line);
    return 0;
}

/* g.dot() and g.text(): data is "dot" or "text". */
BUILTIN(bi_graph_render)
{
    const char *what = data;
    (void)kwnames;
    (void)kwvals;
    if (argc != 1 || nkw) return interp_raise(I, "%s() takes no arguments", what);
    const Graph *g = ((GraphObj *)argv[0].u.o)->g;
    char *s = !strcmp(what, "dot") ? graph_to_dot(g) : graph_to_text(g);
    *out = v_cstr(s);
    free(s);
    return 0;
}

/* g.svg(path): the dot picture drawn by Graphviz into path (interp/graphviz.c). */
BUILTIN(bi_graph_svg)
{
    (void)data;
    Value a[2];
    bool p[2];
    if (args_parse(I, "svg", "self, path", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    const char *path;
    if (arg_string(I, "svg()", "path", a[1], &path)) return -1;
    char *s = graph_to_dot(((GraphObj *)a[0].u.o)->g);
    int r = graphviz_svg(I, "svg", s, path);
    free(s);
    if (!r) *out = v_nil();
    return r;
}

static int graphobj_getattr(Interp *I, Obj *o, const char *name, Value *out)
{
    (void)I;
    const char *what = !strcmp(name, "dot") ? "dot" : !strcmp(name, "text") ? "text"
                     : !strcmp(name, "dump") ? "dump" : !strcmp(name, "report") ? "report"
                     : !strcmp(name, "svg") ? "svg" : NULL;
    if (!what) return 1;
    BuiltinFn fn = !strcmp(what, "dump") ? bi_graph_dump : !strcmp(what, "report") ? bi_graph_report
                 : !strcmp(what, "svg") ? bi_graph_svg : bi_graph_render;
    Value b = builtin_new(what, fn, (void *)what);
    o->refcount++;
    ((Builtin *)b.u.o)->self = v_obj(V_OBJECT, o);
    *out = b;
    return 0;
}

static const ObjectClass graph_class = {
    .name = "graph", .free = graphobj_free, .repr = graphobj_repr, .getattr = graphobj_getattr,
};

/* graph(f, args...): calls f with args when that signature has no trace
 * yet (so the call's effects happen, as the first staged call's would),
 * then returns the graph the cache holds for them. */
BUILTIN(bi_graph)
{
    (void)data;
    if (argc < 1 || argv[0].kind != V_FN)
        return interp_raise(I, "graph() needs a staged function and its arguments, got %s",
                            argc ? value_kind_name(argv[0]) : "nothing");
    Closure *c = (Closure *)argv[0].u.o;
    if (I->opt.eager || I->run_eagerly)
        return interp_raise(I, "graph(): staged functions run eagerly (--eager or run_eagerly(true)), so there is no graph");
    FnInfo *info = c->fn->info;
    if (!info->is_staged && !c->stage_forced)
        return interp_raise(I, "graph(): '%s' is not staged (mark it @staged)", c->name);
    Trace *t = nkw ? NULL : stage_find(c, argc - 1, argv + 1);
    if (!t) {
        Value r;
        if (call_value(I, argv[0], argc - 1, argv + 1, nkw, kwnames, kwvals, &r)) return -1;
        value_decref(r);
        t = stage_last_trace(c);
    }
    if (!t) return interp_raise(I, "graph(): '%s' could not be staged for these arguments", c->name);
    GraphObj *go = object_new(sizeof *go, &graph_class);
    go->g = t->g;
    t->g->refcount++;
    *out = v_obj(V_OBJECT, go);
    return 0;
}

void stage_graph_builtins_register(Interp *I)
{
    interp_define_builtin(I, "graph", bi_graph, NULL);
}
