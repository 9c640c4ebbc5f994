/* resolve.c — binds every name to a (depth, slot) pair before anything runs,
 * so evaluation never looks a name up by string.
 * Rules: a block scope's slots live in its function's Env; depth counts the
 * function boundaries between a use and its binding. A name not bound in any
 * enclosing scope is a late global when it sits inside a function body
 * (checked when read, as in Python) and an error in top-level code. */
#include <stdlib.h>
#include <string.h>
#include "interp/internal.h"
#include "util/buf.h"
#include "util/xalloc.h"

typedef struct Resolver {
    Interp *I;
    Scope *scope;
    int fn_level;     /* function nesting: 0 at the top level */
    int loop_depth;
    bool in_function;
    FnInfo *fn_info;  /* the function being resolved (NULL at the top level) */
} Resolver;

static Scope *scope_push(Resolver *R, bool is_function, ScopeFn *fn)
{
    Scope *s = xcalloc(1, sizeof(Scope));
    s->parent = R->scope;
    s->is_function = is_function;
    s->fn = fn ? fn : R->scope->fn;
    R->scope = s;
    return s;
}

static void scope_free(Scope *s)
{
    free(s->names);
    free(s->slots);
    free(s);
}

static void scope_pop(Resolver *R)
{
    Scope *s = R->scope;
    R->scope = s->parent;
    scope_free(s);
}

static int scope_declare(Scope *s, const char *name)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 8;
        s->names = xrealloc(s->names, sizeof(char *) * (size_t)s->cap);
        s->slots = xrealloc(s->slots, sizeof(int) * (size_t)s->cap);
    }
    int slot = s->fn->nslots++;
    s->names[s->n] = (char *)name;
    s->slots[s->n] = slot;
    s->n++;
    return slot;
}

/* The global scope owns copies of its names (it outlives REPL entries). */
int global_slot(Interp *I, const char *name, bool create)
{
    Scope *g = I->global_scope;
    for (int i = g->n - 1; i >= 0; i--)
        if (strcmp(g->names[i], name) == 0) return g->slots[i];
    if (!create) return -1;
    return scope_declare(g, xstrdup(name));
}

static int declare(Resolver *R, const char *name)
{
    if (R->scope == R->I->global_scope) {
        /* top level: a repeated let rebinds the same global slot */
        return global_slot(R->I, name, true);
    }
    return scope_declare(R->scope, name);
}

/* Find name: slot and depth (function boundaries crossed); -1 if unbound. */
static int lookup(Resolver *R, const char *name, int *depth)
{
    int d = 0;
    for (Scope *s = R->scope; s; s = s->parent) {
        for (int i = s->n - 1; i >= 0; i--)
            if (strcmp(s->names[i], name) == 0) { *depth = d; return s->slots[i]; }
        if (s->is_function) d++;
    }
    return -1;
}

static int resolve_node(Resolver *R, Node *n);
static int resolve_stmts(Resolver *R, NodeList *l);

static int resolve_list(Resolver *R, NodeList *l)
{
    for (int i = 0; i < l->n; i++)
        if (l->items[i] && resolve_node(R, l->items[i])) return -1;
    return 0;
}

static int declare_pattern(Resolver *R, Node *p)
{
    if (p->kind == N_PNAME) {
        p->slot = declare(R, p->str);
        p->depth = 0;
        return 0;
    }
    for (int i = 0; i < p->list.n; i++)
        if (declare_pattern(R, p->list.items[i])) return -1;
    return 0;
}

/* --- undefined names: hints and "did you mean" --------------------------------------- */

/* Edit distance with transpositions (optimal string alignment), or a value
 * above max once it must exceed it. */
static int edit_distance(const char *a, const char *b, int max)
{
    int la = (int)strlen(a), lb = (int)strlen(b);
    if (la - lb > max || lb - la > max || la > 64 || lb > 64) return max + 1;
    int d[65][65];
    for (int i = 0; i <= la; i++) d[i][0] = i;
    for (int j = 0; j <= lb; j++) d[0][j] = j;
    for (int i = 1; i <= la; i++)
        for (int j = 1; j <= lb; j++) {
            int c = a[i - 1] == b[j - 1] ? 0 : 1, v = d[i - 1][j - 1] + c;
            if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < v)
                v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[la][lb];
}

void suggest_init(Suggest *sg, const char *name)
{
    int len = (int)strlen(name);
    sg->name = name;
    sg->best = NULL;
    /* one edit for short names, two for long ones; none for one or two letters */
    sg->max = len <= 2 ? 0 : len <= 5 ? 1 : 2;
    sg->dist = sg->max + 1;
}

void suggest_add(Suggest *sg, const char *cand)
{
    if (!cand || strcmp(cand, sg->name) == 0 || strchr(cand, ' ')) return;
    int d = strcasecmp(cand, sg->name) == 0 ? 0 : edit_distance(sg->name, cand, sg->max);
    if (d < sg->dist) {
        sg->dist = d;
        sg->best = cand;
    }
}

void suggest_builtins(Interp *I, Suggest *sg)
{
    for (int i = 0; i < I->nbuiltins; i++) suggest_add(sg, I->builtin_names[i]);
}

/* " (did you mean 'x'?)" or "" */
const char *suggest_text(const Suggest *sg, char *buf, size_t n)
{
    if (!sg->best) return "";
    snprintf(buf, n, " (did you mean '%s'?)", sg->best);
    return buf;
}

/* An unknown keyword argument kw of a function with these parameters:
 * " (tfe writes axis=)" for NumPy's / PyTorch's spellings of a parameter
 * (torch's dim=, keepdim=, clamp's min=, max=; np.random's size=, loc=,
 * scale=, low=, high=),
 * else the nearest parameter, else "". */
const char *kwarg_hint(const char *kw, const char *const *params, int n, char *buf, size_t bufn)
{
    static const char *const habits[][2] = {
        {"dim", "axis"}, {"keepdim", "keepdims"}, {"size", "shape"}, {"loc", "mean"},
        {"scale", "std"}, {"low", "lo"}, {"high", "hi"}, {"dims", "perm"}, {"axes", "perm"},
        {"min", "lo"}, {"max", "hi"}, {"a_min", "lo"}, {"a_max", "hi"},
        /* the stdlib's parameters in Keras' and PyTorch's spellings */
        {"learning_rate", "lr"}, {"num_classes", "depth"}, {"in_features", "n_in"}, {"out_features", "n_out"},
        {"units", "n_out"}, {"p", "rate"}, {"bias", "use_bias"},
    };
    for (size_t h = 0; h < sizeof habits / sizeof *habits; h++) {
        if (strcmp(habits[h][0], kw)) continue;
        for (int i = 0; i < n; i++)
            if (!strcmp(params[i], habits[h][1])) {
                snprintf(buf, bufn, " (tfe writes %s=)", habits[h][1]);
                return buf;
            }
    }
    Suggest sg;
    suggest_init(&sg, kw);
    for (int i = 0; i < n; i++) suggest_add(&sg, params[i]);
    return suggest_text(&sg, buf, bufn);
}

/* The stdlib's modules and functions named without their import, and
 * NumPy's / PyTorch's names for tfe's built-ins. */
static const char *stdlib_name_hint(const char *name)
{
    static const char *const modules[] = {"nn", "optim", "losses", "metrics", "data", "dist", "summary"};
    static char buf[120]; /* read at once by raise_undefined */
    for (size_t i = 0; i < sizeof modules / sizeof *modules; i++)
        if (!strcmp(name, modules[i])) {
            snprintf(buf, sizeof buf, " (a module of tfe's stdlib: write 'import %s' at the top of the file)", name);
            return buf;
        }
    static const char *const hints[][2] = {
        {"mse", " (it is losses.mse: import losses)"},
        {"softmax_cross_entropy", " (it is losses.softmax_cross_entropy: import losses)"},
        {"sparse_softmax_cross_entropy", " (it is losses.sparse_softmax_cross_entropy: import losses)"},
        {"binary_cross_entropy", " (it is losses.binary_cross_entropy: import losses)"},
        {"cross_entropy", " (tfe writes losses.sparse_softmax_cross_entropy(logits, labels) for class ids, "
                          "losses.softmax_cross_entropy(logits, targets) for one-hot targets: import losses)"},
        {"accuracy", " (it is metrics.accuracy: import metrics)"},
        {"binary_accuracy", " (it is metrics.binary_accuracy: import metrics)"},
        {"confusion_matrix", " (it is metrics.confusion_matrix: import metrics)"},
        {"sgd", " (it is optim.sgd: import optim)"},
        {"adam", " (it is optim.adam: import optim)"},
        {"adamw", " (it is optim.adamw: import optim)"},
        {"rmsprop", " (it is optim.rmsprop: import optim)"},
        {"dense", " (it is nn.dense: import nn)"},
        {"sequential", " (it is nn.sequential: import nn)"},
        {"Linear", " (tfe writes nn.dense(n_in, n_out): import nn)"},
        {"concatenate", " (tfe writes concat((a, b), axis=0))"},
        {"cat", " (tfe writes concat((a, b), axis=0))"},
        {"unsqueeze", " (tfe writes expand_dims(x, axis))"},
        {"clamp", " (tfe writes clip(x, lo, hi))"},
        {"permute", " (tfe writes transpose(x, perm))"},
        {"swapaxes", " (tfe writes transpose(x, perm): transpose(x, (0, 2, 1)) swaps the last two axes)"},
        {"moveaxis", " (tfe writes transpose(x, perm) with the axes in their new order)"},
        {"view", " (tfe writes reshape(x, shape))"},
        {"array", " (brackets make a tensor: [1, 2]; or tensor(xs))"},
        {"asarray", " (brackets make a tensor: [1, 2]; or tensor(xs))"},
        {"dot", " (tfe writes a @ b, or matmul(a, b))"},
        {"exit", " (the REPL ends at :quit or Ctrl-D, a program at its last line)"},
        {"quit", " (the REPL ends at :quit or Ctrl-D, a program at its last line)"},
    };
    for (size_t i = 0; i < sizeof hints / sizeof *hints; i++)
        if (!strcmp(name, hints[i][0])) return hints[i][1];
    return NULL;
}

/* Python's spellings of tfe's words. */
static const char *python_name_hint(const char *name)
{
    if (strcmp(name, "True") == 0) return " (tfe writes true)";
    if (strcmp(name, "False") == 0) return " (tfe writes false)";
    if (strcmp(name, "None") == 0) return " (tfe writes nil)";
    if (strcmp(name, "pass") == 0) return " (tfe has no 'pass': an empty block is { })";
    if (strcmp(name, "np") == 0 || strcmp(name, "numpy") == 0 || strcmp(name, "torch") == 0)
        return " (tfe needs no numpy or torch: tensors and their ops are built in, e.g. zeros((2, 3)), matmul(a, b))";
    if (strcmp(name, "self") == 0) return " (tfe has no classes: pass a record of state to functions)";
    if (strcmp(name, "math") == 0) return " (tfe needs no math module: pi, sqrt, exp, log, floor, ... are built in)";
    if (strcmp(name, "random") == 0)
        return " (random numbers are built in: rand, randn, randint, normal, uniform, choice, shuffle)";
    if (strcmp(name, "no_grad") == 0)
        return " (only a tape records gradients: outside with tape() { ... } nothing is recorded)";
    if (strcmp(name, "sorted") == 0) return " (tfe writes sort(x) for a tensor)";
    /* NumPy's and PyTorch's other dtypes (images come as uint8): say which there are */
    if (!strcmp(name, "uint8") || !strcmp(name, "int8") || !strcmp(name, "int16") || !strcmp(name, "uint16") ||
        !strcmp(name, "uint32") || !strcmp(name, "uint64") || !strcmp(name, "complex64") ||
        !strcmp(name, "complex128") || !strcmp(name, "half") || !strcmp(name, "double"))
        return " (tfe's dtypes are bool, int32, int64, float16, bfloat16, float32 and float64: for 0..255 pixel "
               "values use int32, or float32 / 255.0)";
    return stdlib_name_hint(name);
}

int raise_undefined(Interp *I, Loc loc, const char *name, void *scope)
{
    const char *py = python_name_hint(name);
    if (py) return raise_at(I, loc, "undefined name '%s'%s", name, py);
    Suggest sg;
    suggest_init(&sg, name);
    for (Scope *s = scope ? (Scope *)scope : I->global_scope; s; s = s->parent)
        for (int i = 0; i < s->n; i++) {
            /* at run time (no scope), a global not bound yet is no suggestion */
            if (!scope && I->globals && s->slots[i] < I->globals->nslots &&
                I->globals->slots[s->slots[i]].kind == V_NIL && I->globals->slots[s->slots[i]].dtype == 1)
                continue;
            suggest_add(&sg, s->names[i]);
        }
    suggest_builtins(I, &sg);
    char buf[160];
    return raise_at(I, loc, "undefined name '%s'%s", name, suggest_text(&sg, buf, sizeof buf));
}

static int resolve_name(Resolver *R, Node *n, bool assign)
{
    int depth;
    int slot = lookup(R, n->str, &depth);
    n->op = 0;
    if (slot >= 0) {
        n->slot = slot;
        n->depth = depth;
        return 0;
    }
    int b = builtin_index(R->I, n->str);
    if (b >= 0 && !assign) {
        n->slot = b;
        n->depth = 0;
        n->op = 2;
        return 0;
    }
    if (!assign && (!strcmp(n->str, "True") || !strcmp(n->str, "False") || !strcmp(n->str, "None")))
        return raise_undefined(R->I, n->loc, n->str, R->scope); /* Python's words: never a late global */
    if (R->in_function) {
        /* late global: bound by the time the function runs, or an error then */
        n->slot = global_slot(R->I, n->str, true);
        n->depth = R->fn_level;
        n->op = 1;
        return 0;
    }
    if (assign)
        return raise_at(R->I, n->loc, "assignment to undeclared name '%s' (declare it with 'let')", n->str);
    return raise_undefined(R->I, n->loc, n->str, R->scope);
}

/* The target of '=': a name, x[i], r.field or a tuple of targets. */
static int resolve_target(Resolver *R, Node *t)
{
    if (t->kind == N_NAME) {
        if (resolve_name(R, t, true)) return -1;
        /* Top-level code: a declared name whose `let` failed in an earlier
         * REPL entry is not bound, and assigning it is the undeclared-name
         * error at run time (eval.c), as for a late global (op 1). */
        if (!R->in_function && t->op == 0) t->op = 1;
        return 0;
    }
    if (t->kind == N_TUPLE) {
        for (int i = 0; i < t->list.n; i++)
            if (resolve_target(R, t->list.items[i])) return -1;
        return 0;
    }
    return resolve_node(R, t);
}

/* name = fn ... (resolved): the anonymous function is called `name` in
 * tracebacks and notes, as a function declared with it would be; so is one
 * wrapped as a whole by varargs, staged or host (the stdlib's
 * `let sequential = varargs(fn (layers) { ... })`). The first binding names it. */
static void name_bound_fn(Node *v, const char *name)
{
    while (v->kind == N_CALL && v->a->kind == N_NAME && v->a->op == 2 && v->list.n == 1 && v->list2.n == 0 &&
           (!strcmp(v->a->str, "varargs") || !strcmp(v->a->str, "staged") || !strcmp(v->a->str, "host")))
        v = v->list.items[0];
    if (v->kind != N_FN || v->str || !v->info) return;
    FnInfo *info = v->info;
    if (!info->bound_name) info->bound_name = name;
}

/* breakpoint() with no arguments: the call gets the bindings in scope
 * here that are not globals (the function's, its enclosing functions',
 * those of blocks at the top level; the innermost of a name), as arguments, and their names, as the keyword _frame ("a\nb"):
 * the builtin's prompt can read them (interp/repl.c), and in a staged
 * function they are the host call's arguments, concrete at every call.
 * Names declared later are not in scope yet, so every one is bound. */
static void pass_frame(Resolver *R, Node *call)
{
    Buf names = {0};
    for (Scope *s = R->scope; s && s != R->I->global_scope; s = s->parent)
        for (int i = s->n - 1; i >= 0; i--) {
            const char *name = s->names[i];
            bool seen = false;
            for (int k = 0; k < call->list.n && !seen; k++) seen = !strcmp(call->list.items[k]->str, name);
            if (seen) continue;
            Node *v = node_new(N_NAME, call->loc);
            v->str = xstrdup(name);
            nodelist_push(&call->list, v);
            if (names.len) buf_add(&names, "\n", 1);
            buf_puts(&names, name);
        }
    Node *kw = node_new(N_KWARG, call->loc);
    kw->str = xstrdup("_frame");
    kw->a = node_new(N_STR, call->loc);
    kw->a->str = names.s ? names.s : xstrdup("");
    kw->a->slen = names.len;
    nodelist_push(&call->list2, kw);
}

static int resolve_fn(Resolver *R, Node *fn)
{
    /* one allocation, so that ast_free can release it with free(node->info) */
    size_t np = (size_t)fn->list.n;
    FnInfo *info = xcalloc(1, sizeof(FnInfo) + np * (sizeof(char *) + sizeof(Node *)));
    free(fn->info); /* a REPL entry that failed to resolve may be resolved again */
    fn->info = info;
    info->nparams = fn->list.n;
    info->param_names = (char **)(info + 1);
    info->defaults = (Node **)(info->param_names + np);
    for (int i = 0; i < fn->list2.n; i++) {
        Node *d = fn->list2.items[i];
        if (resolve_node(R, d)) return -1;
        if (d->kind == N_NAME && strcmp(d->str, "staged") == 0) info->is_staged = true;
        if (d->kind == N_NAME && strcmp(d->str, "host") == 0) info->is_host = true;
    }
    /* --stage-all: every function that is not @host is staged; one that
     * turns out not to be stageable runs eagerly (stage/staged.c) */
    if (R->I->opt.stage_all && !info->is_host && !info->is_staged) info->is_staged = info->stage_implicit = true;
    ScopeFn *sf = xcalloc(1, sizeof(ScopeFn));
    Resolver inner = *R;
    inner.fn_level = R->fn_level + 1;
    inner.loop_depth = 0;
    inner.in_function = true;
    inner.fn_info = info;
    inner.scope = R->scope;
    scope_push(&inner, true, sf);
    int rc = 0;
    for (int i = 0; i < fn->list.n; i++) {
        Node *p = fn->list.items[i];
        for (int j = 0; j < i; j++)
            if (strcmp(fn->list.items[j]->str, p->str) == 0) {
                rc = raise_at(R->I, p->loc, "duplicate parameter '%s'", p->str);
                goto out;
            }
        p->slot = scope_declare(inner.scope, p->str);
        info->param_names[i] = p->str;
    }
    for (int i = 0; i < fn->list.n; i++) {
        Node *p = fn->list.items[i];
        info->defaults[i] = p->a;
        if (p->a && (rc = resolve_node(&inner, p->a))) goto out;
    }
    if (fn->is_lambda) rc = resolve_node(&inner, fn->a);
    else rc = resolve_stmts(&inner, &fn->a->list);
out:
    info->nslots = sf->nslots;
    while (inner.scope != R->scope) scope_pop(&inner);
    free(sf);
    return rc;
}

/* Function declarations are hoisted: bound before the block's statements run. */
static int resolve_stmts(Resolver *R, NodeList *l)
{
    for (int i = 0; i < l->n; i++) {
        Node *s = l->items[i];
        if (s->kind == N_FNDECL) {
            s->slot = declare(R, s->a->str);
            l->has_fn = true;
        }
    }
    return resolve_list(R, l);
}

static int resolve_block(Resolver *R, Node *block)
{
    scope_push(R, false, NULL);
    int rc = resolve_stmts(R, &block->list);
    scope_pop(R);
    return rc;
}

static int resolve_node(Resolver *R, Node *n)
{
    switch (n->kind) {
    case N_INT: case N_FLOAT: case N_STR: case N_TRUE: case N_FALSE: case N_NIL:
    case N_ELLIPSIS:
        return 0;
    case N_NAME:
        return resolve_name(R, n, false);
    case N_BINOP: case N_AND: case N_OR:
        if (resolve_node(R, n->a)) return -1;
        return resolve_node(R, n->b);
    case N_UNOP: case N_NOT: case N_KWARG: case N_FIELDINIT: case N_FIELD: case N_EXPR:
        return n->a ? resolve_node(R, n->a) : 0;
    case N_CALL:
        if (resolve_node(R, n->a)) return -1;
        if (n->a->kind == N_NAME && n->a->op == 2 && !strcmp(n->a->str, "breakpoint") && !n->list.n && !n->list2.n)
            pass_frame(R, n);
        if (resolve_list(R, &n->list)) return -1;
        return resolve_list(R, &n->list2);
    case N_INDEX:
        if (resolve_node(R, n->a)) return -1;
        return resolve_list(R, &n->list);
    case N_SLICE:
        if (n->a && resolve_node(R, n->a)) return -1;
        if (n->b && resolve_node(R, n->b)) return -1;
        return n->c ? resolve_node(R, n->c) : 0;
    case N_ARRAY: case N_TUPLE: case N_RECORD:
        return resolve_list(R, &n->list);
    case N_FN:
        if (R->fn_info) R->fn_info->makes_closures = true;
        return resolve_fn(R, n);
    case N_PARAM: case N_PNAME: case N_PTUPLE:
        return 0;
    case N_LET:
        /* the value is resolved before the new names exist: let x = x + 1 */
        if (resolve_node(R, n->b)) return -1;
        if (n->a->kind == N_PNAME) name_bound_fn(n->b, n->a->str);
        return declare_pattern(R, n->a);
    case N_ASSIGN:
        if (resolve_node(R, n->b)) return -1;
        if (n->a->kind == N_NAME && n->op == 0) name_bound_fn(n->b, n->a->str);
        return resolve_target(R, n->a);
    case N_IFEXPR: {
        /* the branches assign a slot of its own, which no name reaches
         * (staged code reads the value from it, interp/eval.c) */
        Node *s = n->a;
        n->slot = R->scope->fn->nslots++;
        if (resolve_node(R, s->a)) return -1;
        for (int i = 0; i < 2; i++) {
            Node *set = (i ? s->c : s->b)->list.items[0];
            set->a->slot = n->slot;
            set->a->depth = 0;
            set->a->op = 0;
            if (resolve_node(R, set->b)) return -1;
        }
        return 0;
    }
    case N_COMP: {
        /* the loop variables are the comprehension's own, as in Python 3 */
        scope_push(R, false, NULL);
        int rc = 0;
        for (int i = 0; i < n->list.n && !rc; i++) {
            Node *c = n->list.items[i];
            rc = resolve_node(R, c->kind == N_FOR ? c->b : c->a);
            if (!rc && c->kind == N_FOR) rc = declare_pattern(R, c->a);
        }
        if (!rc) rc = resolve_node(R, n->a);
        scope_pop(R);
        return rc;
    }
    case N_FSTRING:
        return resolve_list(R, &n->list);
    case N_FMTFIELD:
        if (resolve_node(R, n->a)) return -1;
        return resolve_list(R, &n->list);
    case N_FNDECL:
        /* slot declared by resolve_stmts (hoisting) */
        if (R->fn_info) R->fn_info->makes_closures = true;
        return resolve_fn(R, n->a);
    case N_IF:
        if (resolve_node(R, n->a) || resolve_block(R, n->b)) return -1;
        if (!n->c) return 0;
        return n->c->kind == N_IF ? resolve_node(R, n->c) : resolve_block(R, n->c);
    case N_WHILE: {
        if (resolve_node(R, n->a)) return -1;
        R->loop_depth++;
        int rc = resolve_block(R, n->b);
        R->loop_depth--;
        return rc;
    }
    case N_FOR: {
        if (resolve_node(R, n->b)) return -1;
        scope_push(R, false, NULL);
        int rc = declare_pattern(R, n->a);
        R->loop_depth++;
        if (!rc) rc = resolve_block(R, n->c);
        R->loop_depth--;
        scope_pop(R);
        return rc;
    }
    case N_BREAK:
        if (!R->loop_depth) return raise_at(R->I, n->loc, "'break' outside a loop");
        return 0;
    case N_CONTINUE:
        if (!R->loop_depth) return raise_at(R->I, n->loc, "'continue' outside a loop");
        return 0;
    case N_RETURN:
        if (!R->in_function) return raise_at(R->I, n->loc, "'return' outside a function");
        return n->a ? resolve_node(R, n->a) : 0;
    case N_WITH:
        if (resolve_node(R, n->a)) return -1;
        /* the block of a with does not open a scope: its bindings stay visible */
        if (n->str) n->slot = declare(R, n->str);
        return resolve_stmts(R, &n->b->list);
    case N_IMPORT:
        n->slot = declare(R, n->str2);
        return 0;
    case N_BLOCK:
        return resolve_block(R, n);
    case N_PROGRAM:
        return resolve_stmts(R, &n->list);
    case N_KIND_COUNT:
        break;
    }
    return raise_at(R->I, n->loc, "internal error: cannot resolve node kind %d", (int)n->kind);
}

int builtin_index(Interp *I, const char *name)
{
    for (int i = 0; i < I->nbuiltins; i++)
        if (strcmp(I->builtin_names[i], name) == 0) return i;
    return -1;
}

Scope *global_scope_new(void)
{
    Scope *s = xcalloc(1, sizeof(Scope));
    s->is_function = true;
    s->fn = xcalloc(1, sizeof(ScopeFn));
    return s;
}

void global_scope_free(Scope *s)
{
    for (int i = 0; i < s->n; i++) free(s->names[i]);
    free(s->fn);
    scope_free(s);
}

/* Resolve a whole program against the interpreter's global scope. */
int resolve_program(Interp *I, Node *prog, bool repl)
{
    (void)repl;
    Resolver R = { .I = I, .scope = I->global_scope, .fn_level = 0 };
    return resolve_node(&R, prog);
}
