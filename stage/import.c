/* import.c — import_onnx(path): an ONNX model (stage/onnx_model.c) as a
 * callable that runs its nodes as tfe ops, so a tape sees them (gradients)
 * and a trace records them (inside @staged code it is part of the graph).
 * The op set is what export writes for common models (docs/export.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "interp/builtins_args.h"
#include "interp/internal.h"
#include "stage/export.h"
#include "stage/import_nn.h"
#include "stage/onnx_model.h"
#include "tensor/op_scope.h"
#include "util/xalloc.h"

typedef struct OnnxObj { Object o; OxModel *m; char *path; } OnnxObj;

static const struct { const char *name; tfe_op op; } UNARY[] = {
    {"Neg", OP_NEG}, {"Abs", OP_ABS}, {"Exp", OP_EXP}, {"Log", OP_LOG}, {"Sqrt", OP_SQRT}, {"Tanh", OP_TANH},
    {"Sigmoid", OP_SIGMOID}, {"Relu", OP_RELU}, {"Sin", OP_SIN}, {"Cos", OP_COS}, {"Erf", OP_ERF}, {"Floor", OP_FLOOR},
    {"Ceil", OP_CEIL}, {"Not", OP_LOGICAL_NOT}, {"Sign", OP_SIGN}, {"Tan", OP_TAN},
    {"IsNaN", OP_ISNAN}, /* (export writes it where NaN decides: max, argmax) */
};
static const struct { const char *name; tfe_op op; } BINARY[] = {
    {"Add", OP_ADD}, {"Sub", OP_SUB}, {"Mul", OP_MUL}, {"Div", OP_DIV}, {"Pow", OP_POW}, {"Equal", OP_EQ}, {"Less", OP_LT}, {"LessOrEqual", OP_LE}, {"Greater", OP_GT},
    {"GreaterOrEqual", OP_GE}, {"And", OP_LOGICAL_AND}, {"Or", OP_LOGICAL_OR}, {"MatMul", OP_MATMUL},
    {"Xor", OP_NE}, /* (of bools: export writes it for a zero's sign) */
};
static const char *OTHER[] = {"Identity", "Softmax", "LogSoftmax", "Transpose", "Reshape", "Cast", "Unsqueeze",
                              "Squeeze", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "Concat", "Where"};

static int find_op(const char *name, bool *unary)
{
    for (size_t i = 0; i < sizeof UNARY / sizeof *UNARY; i++)
        if (!strcmp(UNARY[i].name, name)) return *unary = true, (int)UNARY[i].op;
    for (size_t i = 0; i < sizeof BINARY / sizeof *BINARY; i++)
        if (!strcmp(BINARY[i].name, name)) return *unary = false, (int)BINARY[i].op;
    return -1;
}

static bool supported(const char *name)
{
    bool u;
    if (find_op(name, &u) >= 0 || import_nn_handles(name)) return true;
    for (size_t i = 0; i < sizeof OTHER / sizeof *OTHER; i++)
        if (!strcmp(OTHER[i], name)) return true;
    return false;
}

/* The values by name while a call runs. */
typedef struct OxEnv { char **names; tfe_tensor **t; int n; } OxEnv;
static tfe_tensor *env_get(OxEnv *e, const char *name)
{
    for (int i = e->n - 1; i >= 0; i--)
        if (!strcmp(e->names[i], name)) return e->t[i];
    return NULL;
}
static void env_put(OxEnv *e, const char *name, tfe_tensor *t) /* takes t */
{
    e->names = xrealloc(e->names, sizeof *e->names * (size_t)(e->n + 1));
    e->t = xrealloc(e->t, sizeof *e->t * (size_t)(e->n + 1));
    e->names[e->n] = (char *)name;
    e->t[e->n++] = t;
}

/* A constant int64 input (axes, shapes) as ints. */
static int const_ints(tfe_tensor *t, int64_t *v, int cap, int *n)
{
    if (!t || !t->storage || t->dtype != TFE_INT64 || tensor_numel(t) > cap) return -1;
    tfe_tensor *c = tensor_contiguous(t);
    *n = (int)tensor_numel(c);
    memcpy(v, tensor_data(c), sizeof *v * (size_t)*n);
    tensor_decref(c);
    return 0;
}

/* ONNX's Div of ints truncates toward zero (7 / -2 is -3); tfe's / of ints
 * is true division: floordiv, plus one where the quotient is negative and
 * not whole (a remainder, and the operands' signs differ). */
static tfe_tensor *int_div(tfe_tensor *a, tfe_tensor *b)
{
    tfe_scope s;
    s.n = 0;
    s.failed = false;
    tfe_tensor *z = scope_keep(&s, tensor_from_f64(0, a->dtype)), *one = scope_keep(&s, tensor_from_f64(1, a->dtype));
    tfe_tensor *q = scope_op2(&s, OP_FLOORDIV, a, b), *m = scope_op2(&s, OP_MOD, a, b);
    tfe_tensor *c = scope_op2(&s, OP_LOGICAL_AND, scope_op2(&s, OP_NE, m, z),
                              scope_op2(&s, OP_NE, scope_op2(&s, OP_LT, a, z), scope_op2(&s, OP_LT, b, z)));
    tfe_tensor *r = scope_where(&s, c, scope_op2(&s, OP_ADD, q, one), q);
    if (r) tensor_incref(r);
    scope_release(&s);
    return r;
}

/* ONNX's ReduceMean of ints is an int (the sum divided as Div does:
 * toward zero); tfe's mean of ints is a float. */
static tfe_tensor *int_mean(tfe_tensor *x, const tfe_attrs *at)
{
    tfe_scope s;
    s.n = 0;
    s.failed = false;
    tfe_attrs ca;
    tfe_attrs_init(&ca);
    ca.dtype = x->dtype;
    tfe_tensor *sum = scope_call(&s, OP_SUM, 1, &x, at), *r = NULL;
    if (sum && tensor_numel(sum) && tensor_numel(x)) {
        tfe_tensor *cnt = scope_keep(&s, tensor_from_f64((double)(tensor_numel(x) / tensor_numel(sum)), sum->dtype));
        tfe_tensor *q = cnt ? scope_keep(&s, int_div(sum, cnt)) : NULL;
        r = scope_call(&s, OP_CAST, 1, &q, &ca);
    } else if (sum) {
        r = scope_call(&s, OP_CAST, 1, &sum, &ca); /* nothing to divide: an empty result, or a sum of nothing */
    }
    if (r) tensor_incref(r);
    scope_release(&s);
    return r;
}

/* ReduceMax or ReduceMin over an empty axis: onnxruntime's -inf or +inf (an
 * int's lowest or highest), where tfe's max of nothing is an error; the
 * shape is the sum's. NULL (no error set) when no reduced axis is empty. */
static tfe_tensor *reduce_empty(tfe_tensor *x, const tfe_attrs *at, bool is_max)
{
    bool empty = false;
    for (int d = 0; d < x->rank; d++) {
        bool reduced = at->naxes < 0;
        for (int k = 0; k < at->naxes; k++)
            if (at->axes[k] == d || at->axes[k] + x->rank == d) reduced = true;
        if (reduced && x->shape[d] == 0) empty = true;
    }
    if (!empty) return NULL;
    double v = x->dtype == TFE_INT32 ? (is_max ? -2147483648.0 : 2147483647.0)
             : x->dtype == TFE_INT64 ? (is_max ? -9223372036854775808.0 : 9223372036854775807.0)
             : x->dtype == TFE_BOOL ? !is_max : is_max ? -INFINITY : INFINITY;
    tfe_scope s;
    s.n = 0;
    s.failed = false;
    tfe_attrs ca;
    tfe_attrs_init(&ca);
    ca.dtype = x->dtype;
    tfe_tensor *zeros = scope_call(&s, OP_CAST, 1, (tfe_tensor *[]){scope_call(&s, OP_SUM, 1, &x, at)}, &ca);
    tfe_tensor *fill = scope_keep(&s, tensor_from_f64(v, x->dtype));
    tfe_attrs ba;
    tfe_attrs_init(&ba);
    if (zeros) {
        ba.nints = zeros->rank;
        for (int d = 0; d < zeros->rank; d++) ba.ints[d] = zeros->shape[d];
    }
    tfe_tensor *r = zeros ? scope_call(&s, OP_BROADCAST_TO, 1, &fill, &ba) : NULL;
    if (r) tensor_incref(r);
    scope_release(&s);
    return r ? r : (tfe_tensor *)-1;
}

static int run_node(Interp *I, const OxNode *n, OxEnv *e, tfe_tensor **out)
{
    tfe_tensor *in[64] = {0};
    if (n->nin > 64) return interp_raise(I, "import_onnx(): %s with %d inputs", n->op, n->nin);
    for (int i = 0; i < n->nin; i++) {
        if (!n->in[i][0]) continue;
        in[i] = env_get(e, n->in[i]);
        if (!in[i]) return interp_raise(I, "import_onnx(): %s reads '%s', which nothing made", n->op, n->in[i]);
    }
    if (import_nn_handles(n->op)) {
        char err[300];
        if (!import_nn_run(n, in, out, err, sizeof err)) return 0;
        return err[0] ? interp_raise(I, "import_onnx(): %s", err) : interp_raise_tensor_error(I);
    }
    bool unary;
    int op = find_op(n->op, &unary);
    tfe_attrs at;
    tfe_attrs_init(&at);
    if (op >= 0) {
        if (n->nin != (unary ? 1 : 2)) return interp_raise(I, "import_onnx(): %s takes %d input%s, not %d", n->op, unary ? 1 : 2, unary ? "" : "s", n->nin);
        if (op == OP_DIV && dtype_is_int(in[0]->dtype) && dtype_is_int(in[1]->dtype)) {
            *out = int_div(in[0], in[1]);
            return *out ? 0 : interp_raise_tensor_error(I);
        }
        if (op == OP_POW && in[0] && in[1] && in[1]->dtype != in[0]->dtype) {
            /* ONNX's Pow is of the base's type (an int base to a float power: an int) */
            tfe_tensor *p = tfe_call1(OP_POW, 2, in, &at);
            if (!p || p->dtype == in[0]->dtype) return (*out = p) ? 0 : interp_raise_tensor_error(I);
            at.dtype = in[0]->dtype;
            *out = tfe_call1(OP_CAST, 1, &p, &at);
            tensor_decref(p);
            return *out ? 0 : interp_raise_tensor_error(I);
        }
        *out = tfe_call1((tfe_op)op, n->nin, in, &at);
        return *out ? 0 : interp_raise_tensor_error(I);
    }
    const OxAttr *a;
    int64_t v[32];
    int nv = 0;
    tfe_op top;
    int nin = 1;
    if (!strcmp(n->op, "Identity")) {
        tensor_incref(in[0]);
        *out = in[0];
        return 0;
    } else if (!strcmp(n->op, "Softmax") || !strcmp(n->op, "LogSoftmax")) {
        top = n->op[0] == 'S' ? OP_SOFTMAX : OP_LOG_SOFTMAX;
        a = ox_attr(n, "axis");
        at.naxes = 1;
        at.axes[0] = a ? a->i : -1;
    } else if (!strcmp(n->op, "Transpose")) {
        top = OP_TRANSPOSE;
        a = ox_attr(n, "perm");
        if (a) {
            if (a->nints > 32) return interp_raise(I, "import_onnx(): Transpose of rank %d", a->nints);
            at.nints = a->nints;
            memcpy(at.ints, a->ints, sizeof *a->ints * (size_t)a->nints);
        }
    } else if (!strcmp(n->op, "Reshape")) {
        top = OP_RESHAPE;
        if (const_ints(in[1], v, 32, &nv)) return interp_raise(I, "import_onnx(): Reshape's shape must be a constant");
        a = ox_attr(n, "allowzero");
        for (int d = 0; d < nv; d++)
            if (v[d] == 0 && !(a && a->i)) v[d] = d < in[0]->rank ? in[0]->shape[d] : 0; /* 0: the input's dim */
        at.nints = nv;
        memcpy(at.ints, v, sizeof *v * (size_t)nv);
    } else if (!strcmp(n->op, "Cast")) {
        top = OP_CAST;
        bool ok;
        a = ox_attr(n, "to");
        at.dtype = ox_dtype_of(a ? a->i : 0, &ok);
        if (!ok) return interp_raise(I, "import_onnx(): Cast to %s: tfe has no such dtype", ox_dtype_name(a ? a->i : 0));
    } else if (!strcmp(n->op, "Unsqueeze") || !strcmp(n->op, "Squeeze")) {
        if (n->nin > 1 && const_ints(in[1], v, 32, &nv)) return interp_raise(I, "import_onnx(): %s's axes must be a constant", n->op);
        if (n->op[0] == 'U') {
            /* one axis at a time, in increasing order */
            tfe_tensor *cur = in[0];
            tensor_incref(cur);
            for (int k = 0; k < nv; k++) {
                at.naxes = 1;
                at.axes[0] = v[k];
                tfe_tensor *nx = tfe_call1(OP_EXPAND_DIMS, 1, &cur, &at);
                tensor_decref(cur);
                if (!nx) return interp_raise_tensor_error(I);
                cur = nx;
            }
            *out = cur;
            return 0;
        }
        top = OP_SQUEEZE;
        if (nv) {
            at.naxes = nv;
            memcpy(at.axes, v, sizeof *v * (size_t)nv);
        }
    } else if (!strncmp(n->op, "Reduce", 6)) {
        top = !strcmp(n->op, "ReduceSum") ? OP_SUM : !strcmp(n->op, "ReduceMean") ? OP_MEAN
            : !strcmp(n->op, "ReduceMax") ? OP_MAX : OP_MIN;
        if (top == OP_SUM) {
            if (n->nin > 1 && in[1] && const_ints(in[1], v, TFE_MAX_RANK, &nv))
                return interp_raise(I, "import_onnx(): ReduceSum's axes must be a constant");
        } else if ((a = ox_attr(n, "axes"))) {
            if (a->nints > TFE_MAX_RANK) return interp_raise(I, "import_onnx(): %s over %d axes", n->op, a->nints);
            nv = a->nints;
            memcpy(v, a->ints, sizeof *v * (size_t)nv);
        }
        a = ox_attr(n, "noop_with_empty_axes");
        if (!nv && a && a->i) {
            tensor_incref(in[0]);
            *out = in[0];
            return 0;
        }
        at.naxes = nv ? nv : -1;
        memcpy(at.axes, v, sizeof *v * (size_t)nv);
        a = ox_attr(n, "keepdims");
        at.keepdims = a ? a->i != 0 : true;
        if (top == OP_MEAN && dtype_is_int(in[0]->dtype)) {
            *out = int_mean(in[0], &at);
            return *out ? 0 : interp_raise_tensor_error(I);
        }
        if (top == OP_MAX || top == OP_MIN) {
            tfe_tensor *r = reduce_empty(in[0], &at, top == OP_MAX);
            if (r == (tfe_tensor *)-1) return interp_raise_tensor_error(I);
            if (r) return *out = r, 0;
        }
    } else if (!strcmp(n->op, "Concat")) {
        top = OP_CONCAT;
        a = ox_attr(n, "axis");
        at.naxes = 1;
        at.axes[0] = a ? a->i : 0;
        nin = n->nin;
    } else { /* Where */
        top = OP_WHERE;
        nin = 3;
        if (n->nin != 3) return interp_raise(I, "import_onnx(): Where takes 3 inputs");
    }
    *out = tfe_call1(top, nin, in, &at);
    return *out ? 0 : interp_raise_tensor_error(I);
}

/* Whether a call's argument is of its input's declared dtype, rank and
 * fixed sizes (a model run on another shape computes something else, or
 * fails deep inside with a message about a node). */
static bool type_fits(const OxType *ty, const tfe_tensor *t)
{
    bool ok;
    tfe_dtype dt = ox_dtype_of(ty->elem, &ok);
    if (ty->elem && (!ok || dt != t->dtype)) return false;
    if (ty->rank < 0) return true;
    if (ty->rank != t->rank) return false;
    for (int d = 0; d < t->rank; d++)
        if (ty->dims[d] >= 0 && !ty->dnames[d] && ty->dims[d] != t->shape[d]) return false;
    return true;
}

/* "float32[batch, 4]" of a declared type (ty) or of a tensor (t) */
static void type_str(const OxType *ty, const tfe_tensor *t, char *b, size_t cap)
{
    bool ok = true;
    tfe_dtype dt = t ? t->dtype : ox_dtype_of(ty->elem, &ok);
    int rank = t ? t->rank : ty->rank;
    size_t n;
    if (!t && !ty->elem) n = (size_t)snprintf(b, cap, "any type");
    else if (ok) n = (size_t)snprintf(b, cap, "%s", dtype_name(dt));
    else n = (size_t)snprintf(b, cap, "%s", ox_dtype_name(ty->elem));
    if (rank < 0 || n >= cap) return;
    n += (size_t)snprintf(b + n, cap - n, "[");
    for (int d = 0; d < rank && d < TFE_MAX_RANK && n < cap; d++) {
        const char *sep = d ? ", " : "";
        if (t) n += (size_t)snprintf(b + n, cap - n, "%s%lld", sep, (long long)t->shape[d]);
        else if (ty->dnames[d]) n += (size_t)snprintf(b + n, cap - n, "%s%.40s", sep, ty->dnames[d]);
        else if (ty->dims[d] >= 0) n += (size_t)snprintf(b + n, cap - n, "%s%lld", sep, (long long)ty->dims[d]);
        else n += (size_t)snprintf(b + n, cap - n, "%s?", sep);
    }
    if (n < cap) snprintf(b + n, cap - n, "]");
}

BUILTIN(bi_onnx_call)
{
    (void)data;
    (void)kwnames;
    (void)kwvals;
    OnnxObj *ob = (OnnxObj *)argv[0].u.o;
    OxModel *m = ob->m;
    if (nkw) return interp_raise(I, "an imported ONNX model takes its inputs by position");
    if (argc - 1 != m->ninputs)
        return interp_raise(I, "the ONNX model '%s' takes %d input%s, got %d", ob->path, m->ninputs, m->ninputs == 1 ? "" : "s",
                            argc - 1);
    OxEnv e = {0};
    int rc = 0;
    for (int i = 0; i < m->ninits; i++) {
        tensor_incref(m->inits[i]);
        env_put(&e, m->init_names[i], m->inits[i]);
    }
    for (int i = 0; i < m->ninputs && !rc; i++) {
        tfe_tensor *t = arg_tensor(I, "ONNX model", m->inputs[i], argv[1 + i]);
        if (!t) rc = -1;
        else if (!type_fits(&m->in_types[i], t)) {
            char want[400], got[400];
            type_str(&m->in_types[i], NULL, want, sizeof want);
            type_str(NULL, t, got, sizeof got);
            rc = interp_raise(I, "the ONNX model '%s' takes its input '%s' as %s, given %s", ob->path, m->inputs[i], want, got);
            tensor_decref(t);
        } else env_put(&e, m->inputs[i], t);
    }
    for (int i = 0; i < m->nnodes && !rc; i++) {
        const OxNode *n = &m->nodes[i];
        if (n->nout != 1 || n->nin < 1) {
            rc = n->nout != 1 ? interp_raise(I, "import_onnx(): %s with %d outputs (tfe imports ops of one)", n->op, n->nout)
                              : interp_raise(I, "import_onnx(): %s with no inputs", n->op);
            break;
        }
        tfe_tensor *o = NULL;
        rc = run_node(I, n, &e, &o);
        if (!rc) env_put(&e, n->out[0], o);
    }
    Value res = v_nil();
    if (!rc) {
        Seq *t = m->noutputs == 1 ? NULL : seq_new(m->noutputs);
        if (t) t->h.kind = V_TUPLE;
        for (int i = 0; i < m->noutputs && !rc; i++) {
            tfe_tensor *o = env_get(&e, m->outputs[i]);
            if (!o) {
                rc = interp_raise(I, "import_onnx(): nothing makes the output '%s'", m->outputs[i]);
                break;
            }
            tensor_incref(o);
            if (t) seq_push_take(t, v_tensor_take(o));
            else res = v_tensor_take(o);
        }
        if (t) {
            if (rc) value_decref(v_obj(V_TUPLE, t));
            else res = v_obj(V_TUPLE, t);
        }
    }
    for (int i = 0; i < e.n; i++) tensor_decref(e.t[i]);
    free(e.names);
    free(e.t);
    if (!rc) *out = res;
    return rc;
}

static void onnxobj_free(Obj *o)
{
    OnnxObj *ob = (OnnxObj *)o;
    ox_model_free(ob->m);
    free(ob->path);
    free(o);
}

static char *onnxobj_repr(Obj *o)
{
    OnnxObj *ob = (OnnxObj *)o;
    char b[600];
    snprintf(b, sizeof b, "<onnx model %s: %d inputs, %d outputs, %d nodes>", ob->path, ob->m->ninputs, ob->m->noutputs,
             ob->m->nnodes);
    return xstrdup(b);
}

static const ObjectClass onnx_class = {.name = "onnx model", .free = onnxobj_free, .repr = onnxobj_repr};

/* import_onnx(path): the model as a callable (docs/export.md, "Importing"). */
BUILTIN(bi_import_onnx)
{
    (void)data;
    Value a[1];
    bool p[1];
    if (args_parse(I, "import_onnx", "path", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    const char *path;
    if (arg_string(I, "import_onnx()", "path", a[0], &path)) return -1;
    FILE *f = fopen(path, "rb");
    if (!f) return interp_raise(I, "import_onnx(): cannot open '%s'", path);
    Buf b = {0};
    char tmp[65536];
    size_t k;
    while ((k = fread(tmp, 1, sizeof tmp, f)) > 0) buf_add(&b, tmp, k);
    fclose(f);
    char err[300] = "";
    OxModel *m = ox_model_read(b.s ? b.s : "", b.len, err, sizeof err);
    free(b.s);
    if (!m) return interp_raise(I, "import_onnx(): '%s': %s", path, err);
    /* every unsupported op at once */
    Buf bad = {0};
    int nbad = 0;
    for (int i = 0; i < m->nnodes; i++) {
        const char *op = m->nodes[i].op;
        if (supported(op)) continue;
        bool seen = false;
        for (int j = 0; j < i && !seen; j++) seen = !strcmp(m->nodes[j].op, op);
        if (seen) continue;
        if (nbad++) buf_puts(&bad, ", ");
        /* a name from the file: printable ASCII only in the message */
        for (const char *c = op; *c && c - op < 60; c++) buf_add(&bad, (*c >= 32 && *c < 127) ? c : "?", 1);
        if (!*op) buf_puts(&bad, "(no op type)");
    }
    for (int i = 0; i < m->nnodes && !nbad; i++) {
        char why[300];
        if (import_nn_handles(m->nodes[i].op) && import_nn_check(&m->nodes[i], why, sizeof why)) {
            int rc = interp_raise(I, "import_onnx(): '%s': %s", path, why);
            ox_model_free(m);
            return rc;
        }
    }
    if (nbad) {
        buf_add(&bad, "", 1);
        int rc = interp_raise(I, "import_onnx(): '%s' has ops tfe does not import: %s", path, bad.s);
        free(bad.s);
        ox_model_free(m);
        return rc;
    }
    OnnxObj *ob = object_new(sizeof *ob, &onnx_class);
    ob->m = m;
    ob->path = xstrdup(path);
    Value fn = builtin_new("onnx model", bi_onnx_call, NULL);
    ((Builtin *)fn.u.o)->self = v_obj(V_OBJECT, ob);
    *out = fn;
    return 0;
}

void stage_import_builtins_register(Interp *I) { interp_define_builtin(I, "import_onnx", bi_import_onnx, NULL); }
