/* builtins.c — the core built-ins that are not tensor ops: print, format, len,
 * range, str, int, float, list, time, argv, dtype names, the argument checks
 * of library functions (check_same_shape, check_labels), and argument binding
 * (args_parse) shared by every builtin. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "interp/builtins_args.h"
#include "interp/internal.h"
#include "stage/trace.h"
#include "tensor/device.h"
#include "util/xalloc.h"

Value builtin_new(const char *name, BuiltinFn fn, void *data)
{
    Builtin *b = xcalloc(1, sizeof(Builtin));
    b->h.refcount = 1;
    b->h.kind = V_BUILTIN;
    b->name = name;
    b->fn = fn;
    b->data = data;
    b->self = v_nil();
    return v_obj(V_BUILTIN, b);
}

static void define_value(Interp *I, const char *name, Value v)
{
    int i = builtin_index(I, name);
    if (i >= 0) {
        value_decref(I->builtin_vals[i]);
        I->builtin_vals[i] = v;
        return;
    }
    if (I->nbuiltins == I->cap_builtins) {
        I->cap_builtins = I->cap_builtins ? I->cap_builtins * 2 : 128;
        I->builtin_names = xrealloc(I->builtin_names, sizeof(char *) * (size_t)I->cap_builtins);
        I->builtin_vals = xrealloc(I->builtin_vals, sizeof(Value) * (size_t)I->cap_builtins);
    }
    I->builtin_names[I->nbuiltins] = xstrdup(name);
    I->builtin_vals[I->nbuiltins] = v;
    I->nbuiltins++;
}

void interp_define_builtin(Interp *I, const char *name, BuiltinFn fn, void *data)
{
    define_value(I, name, builtin_new(name, fn, data));
}

void interp_define_builtin_flags(Interp *I, const char *name, BuiltinFn fn, void *data, int flags,
                                 const char *why)
{
    Value v = builtin_new(name, fn, data);
    Builtin *b = (Builtin *)v.u.o;
    b->effect = (uint8_t)(flags & (BF_EFFECT | BF_EFFECT_VALUE));
    b->unstageable = (flags & BF_NOT_STAGEABLE) ? why : NULL;
    define_value(I, name, v);
}

/* --- argument binding --------------------------------------------------------------- */

int args_parse(Interp *I, const char *fname, const char *spec,
               int argc, const Value *argv, int nkw, Str *const *kwnames, const Value *kwvals,
               Value *slots, bool *present)
{
    char names[16][32];
    bool optional[16];
    int np = 0;
    for (const char *p = spec; *p && np < 16;) {
        while (*p == ' ' || *p == ',') p++;
        if (!*p) break;
        int k = 0;
        while (*p && *p != ',' && *p != '=' && *p != ' ' && k < 31) names[np][k++] = *p++;
        names[np][k] = 0;
        while (*p == ' ') p++;
        optional[np] = *p == '=';
        while (*p && *p != ',') p++;
        np++;
    }
    for (int i = 0; i < np; i++) { slots[i] = v_nil(); present[i] = false; }
    if (argc > np)
        return interp_raise(I, "%s() takes %d argument%s but %d %s given", fname, np, np == 1 ? "" : "s",
                            argc, argc == 1 ? "was" : "were");
    for (int i = 0; i < argc; i++) { slots[i] = argv[i]; present[i] = true; }
    for (int k = 0; k < nkw; k++) {
        int j = -1;
        for (int i = 0; i < np; i++)
            if (strcmp(names[i], kwnames[k]->s) == 0) { j = i; break; }
        if (j < 0) {
            const char *ps[16];
            char hint[64];
            for (int i = 0; i < np; i++) ps[i] = names[i];
            return interp_raise(I, "%s() got an unexpected keyword argument '%s'%s", fname, kwnames[k]->s,
                                kwarg_hint(kwnames[k]->s, ps, np, hint, sizeof hint));
        }
        if (present[j]) return interp_raise(I, "%s() got multiple values for argument '%s'", fname, kwnames[k]->s);
        slots[j] = kwvals[k];
        present[j] = true;
    }
    for (int i = 0; i < np; i++)
        if (!present[i] && !optional[i]) return interp_raise(I, "%s() missing argument '%s'", fname, names[i]);
    return 0;
}

/* --- io ------------------------------------------------------------------------------- */

static int print_parts(Interp *I, int argc, const Value *argv, const char *sep, size_t seplen, FILE *f)
{
    for (int i = 0; i < argc; i++) {
        if (i) fwrite(sep, 1, seplen, f);
        if (argv[i].kind == V_STR) {
            Str *s = (Str *)argv[i].u.o;
            fwrite(s->s, 1, s->len, f);
        } else {
            char *s = value_str(argv[i]);
            fputs(s, f);
            free(s);
        }
    }
    return 0;
}

BUILTIN(bi_print)
{
    const char *sep = " ", *end = "\n";
    size_t seplen = 1, endlen = 1;
    for (int k = 0; k < nkw; k++) {
        Value v = kwvals[k];
        bool is_sep = strcmp(kwnames[k]->s, "sep") == 0, is_end = strcmp(kwnames[k]->s, "end") == 0;
        if (!is_sep && !is_end) return interp_raise(I, "print() got an unexpected keyword argument '%s'", kwnames[k]->s);
        const char *str;
        if (arg_string(I, "print()", kwnames[k]->s, v, &str)) return -1;
        Str *s = (Str *)v.u.o;
        if (is_sep) { sep = s->s; seplen = s->len; } else { end = s->s; endlen = s->len; }
    }
    progress_print_begin();
    print_parts(I, argc, argv, sep, seplen, stdout);
    fwrite(end, 1, endlen, stdout);
    if (I->repl) fflush(stdout);
    progress_print_end();
    *out = v_nil();
    return 0;
}

BUILTIN(bi_format)
{
    if (nkw) return interp_raise(I, "format() takes no keyword arguments");
    if (argc < 1 || argv[0].kind != V_STR) return interp_raise(I, "format() needs a format string first");
    Str *f = (Str *)argv[0].u.o;
    char *err = NULL;
    size_t n = 0;
    char *s = format_values(f->s, f->len, argc - 1, argv + 1, &n, &err);
    if (!s) {
        interp_raise(I, "%s", err ? err : "format: failed");
        free(err);
        return -1;
    }
    *out = v_str(s, n);
    free(s);
    return 0;
}

BUILTIN(bi_str)
{
    Value s[1];
    bool p[1];
    if (args_parse(I, "str", "x", argc, argv, nkw, kwnames, kwvals, s, p)) return -1;
    if (s[0].kind == V_STR) { value_incref(s[0]); *out = s[0]; return 0; }
    char *r = value_str(s[0]);
    *out = v_cstr(r);
    free(r);
    return 0;
}

static int scalar_of(Interp *I, const char *fname, Value v, double *f, int64_t *i, bool *is_float)
{
    if (v.kind == V_SCALAR) {
        *is_float = dtype_is_float((tfe_dtype)v.dtype);
        if (*is_float) *f = scalar_f(v); else *i = v.u.i;
        return 0;
    }
    if (v.kind == V_TENSOR && tensor_numel(v.u.t) == 1) {
        *is_float = dtype_is_float(v.u.t->dtype);
        if (*is_float) *f = tensor_get_f64(v.u.t, 0); else *i = tensor_get_i64(v.u.t, 0);
        return 0;
    }
    if (v.kind == V_STR) {
        Str *s = (Str *)v.u.o;
        char *end;
        const char *p = s->s;
        while (*p == ' ') p++;
        errno = 0;
        long long iv = strtoll(p, &end, 10);
        /* beyond int64 strtoll clamps (ERANGE): read as a float, which
         * int() then finds out of its range, as for int(1e30) */
        bool range = errno == ERANGE;
        while (*end == ' ') end++;
        if (*p && !*end && (size_t)(end - s->s) == s->len && !range) {
            *is_float = false;
            *i = iv;
            return 0;
        }
        double dv = strtod(p, &end);
        while (*end == ' ') end++;
        if (*p && !*end && (size_t)(end - s->s) == s->len) { *is_float = true; *f = dv; return 0; }
        return interp_raise(I, "%s(): cannot convert the string \"%s\" to a number", fname, s->s);
    }
    if (v.kind == V_TENSOR) {
        char sh[200];
        return interp_raise(I, "%s(): only a one-element tensor can be converted, got shape %s", fname,
                            shape_str(v.u.t->rank, v.u.t->shape, sh));
    }
    return interp_raise(I, "%s(): cannot convert a value of type %s to a number", fname, value_kind_name(v));
}

BUILTIN(bi_int)
{
    Value s[1];
    bool p[1], isf = false;
    double f = 0;
    int64_t i = 0;
    if (args_parse(I, "int", "x", argc, argv, nkw, kwnames, kwvals, s, p)) return -1;
    if (scalar_of(I, "int", s[0], &f, &i, &isf)) return -1;
    if (isf) {
        if (!isfinite(f)) return interp_raise(I, "int(): cannot convert %s to an int", isnan(f) ? "nan" : "inf");
        if (f >= 9223372036854775808.0 || f < -9223372036854775808.0)
            return interp_raise(I, "int(): %g is out of the int64 range", f);
        i = (int64_t)f; /* truncates toward zero, as Python's int() */
    }
    *out = v_int(i);
    return 0;
}

BUILTIN(bi_float)
{
    Value s[1];
    bool p[1], isf = false;
    double f = 0;
    int64_t i = 0;
    if (args_parse(I, "float", "x", argc, argv, nkw, kwnames, kwvals, s, p)) return -1;
    if (scalar_of(I, "float", s[0], &f, &i, &isf)) return -1;
    if (!isf) f = (double)i;
    /* float() makes the default float dtype, float32; float64 values stay float64 */
    tfe_dtype dt = (s[0].kind == V_SCALAR && s[0].dtype == TFE_FLOAT64) ||
                   (s[0].kind == V_TENSOR && s[0].u.t->dtype == TFE_FLOAT64) ? TFE_FLOAT64 : TFE_FLOAT32;
    *out = v_float(f, dt);
    return 0;
}

BUILTIN(bi_len)
{
    Value s[1];
    bool p[1];
    if (args_parse(I, "len", "x", argc, argv, nkw, kwnames, kwvals, s, p)) return -1;
    Value v = s[0];
    int64_t n;
    switch ((ValueKind)v.kind) {
    case V_STR: n = (int64_t)((Str *)v.u.o)->len; break;
    case V_TUPLE: case V_LIST: n = ((Seq *)v.u.o)->n; break;
    case V_RECORD: case V_MODULE: n = ((Record *)v.u.o)->n; break;
    case V_RANGE: {
        uint64_t c = range_count((Range *)v.u.o);
        if (c > INT64_MAX) return interp_raise(I, "len() of a range with %llu values: more than an int can hold", (unsigned long long)c);
        n = (int64_t)c;
        break;
    }
    case V_TENSOR:
        trace_shape_read(I, v.u.t);
        if (v.u.t->rank > 0) { n = v.u.t->shape[0]; break; }
        /* fall through */
    case V_SCALAR:
        return interp_raise(I, "len() of a 0-d tensor");
    default:
        return interp_raise(I, "len() of a value of type %s", value_kind_name(v));
    }
    *out = v_int(n);
    return 0;
}

BUILTIN(bi_range)
{
    if (nkw) return interp_raise(I, "range() takes no keyword arguments");
    if (argc < 1 || argc > 3) return interp_raise(I, "range() takes 1 to 3 arguments but %d were given", argc);
    int64_t v[3] = {0, 0, 1};
    for (int i = 0; i < argc; i++) {
        Value a = argv[i];
        if (a.kind == V_SCALAR && dtype_is_int((tfe_dtype)a.dtype)) v[i] = a.u.i;
        else if (a.kind == V_TENSOR && a.u.t->rank == 0 && dtype_is_int(a.u.t->dtype)) v[i] = tensor_get_i64(a.u.t, 0);
        else if ((a.kind == V_SCALAR && dtype_is_float((tfe_dtype)a.dtype)) ||
                 (a.kind == V_TENSOR && a.u.t->rank == 0 && dtype_is_float(a.u.t->dtype)))
            /* epochs = n / 2 is a float in tfe as in Python 3 */
            return interp_raise(I, "range() arguments must be ints, got float (/ divides into a float: "
                                   "write n // 2 for an int, or int(x))");
        else return interp_raise(I, "range() arguments must be ints, got %s", value_kind_name(a));
    }
    Range *r = xmalloc(sizeof(Range));
    r->h.refcount = 1;
    r->h.kind = V_RANGE;
    if (argc == 1) { r->start = 0; r->stop = v[0]; r->step = 1; }
    else { r->start = v[0]; r->stop = v[1]; r->step = argc == 3 ? v[2] : 1; }
    if (r->step == 0) { free(r); return interp_raise(I, "range() step cannot be zero"); }
    *out = v_obj(V_RANGE, r);
    return 0;
}

BUILTIN(bi_list)
{
    if (nkw) return interp_raise(I, "list() takes no keyword arguments");
    if (argc == 1 && argv[0].kind == V_RANGE) /* Python's list(range(5)) is its numbers */
        return interp_raise(I, "list(range(...)) would be a list holding the range itself (list(a, b) holds its "
                               "arguments): for the numbers write arange(...).tolist()");
    Seq *s = seq_new(argc);
    for (int i = 0; i < argc; i++) { value_incref(argv[i]); seq_push_take(s, argv[i]); }
    *out = v_obj(V_LIST, s);
    return 0;
}

/* varargs(f): a function that calls f with its positional arguments as one
 * tuple (Python's *args), keywords passed through; a lone tuple or list is
 * passed as it is, so g(a, b) and g((a, b)) agree (as zeros(2, 3) and
 * zeros((2, 3))). nn.sequential is one. */
static int varargs_call(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwnames,
                        const Value *kwvals, Value *out, void *data)
{
    (void)data;
    Value f = argv[0];
    argc--;
    argv++;
    if (argc == 1 && (argv[0].kind == V_TUPLE || argv[0].kind == V_LIST))
        return call_value(I, f, 1, argv, nkw, kwnames, kwvals, out);
    Seq *t = seq_new(argc);
    t->h.kind = V_TUPLE;
    for (int i = 0; i < argc; i++) { value_incref(argv[i]); seq_push_take(t, argv[i]); }
    Value packed = v_obj(V_TUPLE, t);
    int rc = call_value(I, f, 1, &packed, nkw, kwnames, kwvals, out);
    value_decref(packed);
    return rc;
}

BUILTIN(bi_varargs)
{
    Value a[1];
    bool p[1];
    if (args_parse(I, "varargs", "f", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    if (a[0].kind != V_FN && a[0].kind != V_BUILTIN) return arg_error(I, "varargs", "f", "a function", a[0]);
    Value b = builtin_new("varargs", varargs_call, data);
    value_incref(a[0]);
    ((Builtin *)b.u.o)->self = a[0];
    *out = b;
    return 0;
}

/* memory(reset_peak=false): the tensor allocator's bytes, as a record
 * {live, peak, cached}: live in tensors now, the most live since the start
 * (or the last reset), and freed blocks kept for reuse. */
BUILTIN(bi_memory)
{
    (void)data;
    Value a[1];
    bool p[1];
    if (args_parse(I, "memory", "reset_peak=", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    bool reset = false;
    if (p[0] && arg_bool(I, "memory", "reset_peak", a[0], &reset)) return -1;
    tfe_alloc_stats st = tfe_alloc_get_stats();
    Record *r = record_new();
    record_set_take(r, "live", 4, v_int((int64_t)st.live_bytes));
    record_set_take(r, "peak", 4, v_int((int64_t)st.peak_bytes));
    record_set_take(r, "cached", 6, v_int((int64_t)st.cached_bytes));
    if (reset) tfe_alloc_reset_peak();
    *out = v_obj(V_RECORD, r);
    return 0;
}

BUILTIN(bi_time)
{
    if (argc || nkw) return interp_raise(I, "time() takes no arguments");
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *out = v_float((double)ts.tv_sec + (double)ts.tv_nsec * 1e-9, TFE_FLOAT64);
    return 0;
}

/* getenv(name, default=nil): an environment variable's value as a string,
 * or default when it is not set. Not an effect: the environment does not
 * change while tfe runs, so staged code may read it at trace time. */
BUILTIN(bi_getenv)
{
    (void)data;
    Value a[2];
    bool p[2];
    if (args_parse(I, "getenv", "name, default=", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    const char *name;
    if (arg_string(I, "getenv", "name", a[0], &name)) return -1;
    const char *v = getenv(name);
    if (v) *out = v_str(v, strlen(v));
    else {
        *out = p[1] ? a[1] : v_nil();
        value_incref(*out);
    }
    return 0;
}

/* assert(cond, message=nil): nothing when cond is true (a bool or a
 * one-element tensor, as `if` reads it), else an error at the call:
 * "assertion failed: MESSAGE". Examples check their figures with it. An
 * effect: staged code checks at every call. */
BUILTIN(bi_assert)
{
    (void)data;
    Value a[2];
    bool p[2];
    if (args_parse(I, "assert", "cond, message=", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    bool t;
    if (value_truth(I, a[0], I->cur_loc, &t)) return -1;
    *out = v_nil();
    if (t) return 0;
    if (!p[1] || a[1].kind == V_NIL) return interp_raise(I, "assertion failed");
    const char *msg;
    if (arg_string(I, "assert", "message", a[1], &msg)) return -1;
    return interp_raise(I, "assertion failed: %s", msg);
}

/* --- argument checks for library functions (stdlib/losses.tfe, metrics.tfe) ---
 * They raise at the call of the function that called them (the user's call
 * of losses.mse, not a line of the library), and they are effects: staged
 * code runs them at every call, with that call's shapes and values, inlined
 * frames included (graph/exec.c: run_host), so every mode says the same. */

static int raise_at_caller(Interp *I, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int raise_at_caller(Interp *I, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (!I->nframes) return raise_msg_at(I, I->cur_loc, buf);
    /* the library function's own frame is where the error is, so it is
     * left out of the traceback; so are the stdlib's frames that called it
     * (a layer inside nn.sequential, opt.step inside optim.minimize): the
     * error is at the user's call */
    int saved = I->nframes, k = I->nframes - 1;
    while (k > 0 && I->frames[k].call_loc.src && I->frames[k].call_loc.src->library) k--;
    /* the skipped frame the library function was called in names the part
     * (nn.sequential's "layers.1 (dense)") */
    if (k < saved - 1 && I->frames[saved - 1].fname) {
        size_t len = strlen(buf);
        snprintf(buf + len, sizeof buf - len, " (in %s)", I->frames[saved - 1].fname);
    }
    I->nframes = k;
    int rc = raise_msg_at(I, I->frames[k].call_loc, buf);
    I->nframes = saved;
    return rc;
}

static const char *article(const char *w);

/* A tensor argument of a check (new ref), or NULL after raising. */
static tfe_tensor *check_tensor(Interp *I, const char *where, const char *name, Value v)
{
    tfe_tensor *t = value_to_tensor(v);
    if (!t) { /* at the user's call of the library function, as the checks' other errors */
        const char *k = value_kind_name(v);
        raise_at_caller(I, "%s: %s must be a tensor, got %s%s%s%s", where, name, v.kind == V_NIL ? "" : article(k),
                        v.kind == V_NIL ? "" : " ", k,
                        v.kind == V_LIST || v.kind == V_TUPLE ? " (make one: tensor(xs))" : "");
    }
    return t;
}

static bool shapes_equal(const tfe_tensor *a, const tfe_tensor *b)
{
    if (a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

/* check_same_shape(where, a, b, a_name, b_name): nil, or an error naming
 * both shapes (a loss of pred (n, 1) and target (n,) would broadcast to
 * (n, n) and return a number). */
BUILTIN(bi_check_same_shape)
{
    (void)data;
    Value a[5];
    bool p[5];
    if (args_parse(I, "check_same_shape", "where, a, b, a_name, b_name", argc, argv, nkw, kwnames, kwvals, a, p))
        return -1;
    if (a[0].kind != V_STR || a[3].kind != V_STR || a[4].kind != V_STR)
        return interp_raise(I, "check_same_shape: where, a_name and b_name must be strings");
    const char *where = ((Str *)a[0].u.o)->s, *an = ((Str *)a[3].u.o)->s, *bn = ((Str *)a[4].u.o)->s;
    *out = v_nil();
    tfe_tensor *x = check_tensor(I, where, an, a[1]);
    if (!x) return -1;
    tfe_tensor *y = check_tensor(I, where, bn, a[2]);
    if (!y) { tensor_decref(x); return -1; }
    int rc = 0;
    char s1[200], s2[200];
    bool softmax_ce = !strcmp(where, "losses.softmax_cross_entropy");
    /* targets of the logits' shape without the class axis are class ids */
    bool ids = softmax_ce && y->rank == x->rank - 1;
    for (int i = 0; ids && i < y->rank; i++) ids = y->shape[i] == x->shape[i];
    if (ids)
        rc = raise_at_caller(I, "%s: %s has shape %s and %s has shape %s, one class id per row: for class ids use "
                                "losses.sparse_softmax_cross_entropy(logits, labels), or make one-hot targets: "
                                "one_hot(labels, %lld)",
                             where, an, shape_str(x->rank, x->shape, s1), bn, shape_str(y->rank, y->shape, s2),
                             (long long)x->shape[x->rank - 1]);
    else if (!shapes_equal(x, y))
        rc = raise_at_caller(I, "%s: %s has shape %s and %s has shape %s; they must have the same shape "
                                "(broadcasting them would give a wrong result silently: reshape one of them)",
                             where, an, shape_str(x->rank, x->shape, s1), bn, shape_str(y->rank, y->shape, s2));
    else if (softmax_ce && x->rank > 0 && x->shape[x->rank - 1] == 1)
        /* the softmax of one score is 1: the loss is 0 whatever the model */
        rc = raise_at_caller(I, "%s: %s has shape %s, one class: the softmax of a single score is always 1, so the "
                                "loss would be 0 and its gradient 0; for two classes with one score per row use "
                                "losses.binary_cross_entropy(logits, targets)",
                             where, an, shape_str(x->rank, x->shape, s1));
    tensor_decref(x);
    tensor_decref(y);
    return rc;
}

/* check_labels(where, labels, classes, name="labels"): labels must be
 * integer class ids in [0, n). classes is n, or a tensor of scores
 * (..., n) whose leading shape the labels must have. The values are read
 * at every call (one_hot gives a zero row for a bad label, so a loss would
 * stay finite and wrong). */
BUILTIN(bi_check_labels)
{
    (void)data;
    Value a[4];
    bool p[4];
    if (args_parse(I, "check_labels", "where, labels, classes, name=", argc, argv, nkw, kwnames, kwvals, a, p))
        return -1;
    if (a[0].kind != V_STR || (p[3] && a[3].kind != V_STR))
        return interp_raise(I, "check_labels: where and name must be strings");
    const char *where = ((Str *)a[0].u.o)->s, *name = p[3] ? ((Str *)a[3].u.o)->s : "labels";
    *out = v_nil();
    tfe_tensor *lab = check_tensor(I, where, name, a[1]);
    if (!lab) return -1;
    tfe_tensor *cls = check_tensor(I, where, "classes", a[2]);
    if (!cls) { tensor_decref(lab); return -1; }
    char s1[200], s2[200];
    int rc = 0;
    int64_t n = 0;
    /* float labels of the scores' own shape are one-hot rows (or swapped
     * arguments): casting them, as the dtype error says, would not help */
    bool lab_like_cls = cls->rank > 0 && shapes_equal(lab, cls);
    bool swapped = cls->rank > 0 && dtype_is_int(cls->dtype) && lab->rank == cls->rank + 1;
    for (int i = 0; swapped && i < cls->rank; i++) swapped = lab->shape[i] == cls->shape[i];
    if (!dtype_is_int(lab->dtype) && lab_like_cls) {
        const char *dense = !strcmp(where, "losses.sparse_softmax_cross_entropy")
                                ? "; for one-hot or probability targets use losses.softmax_cross_entropy(logits, targets)"
                                : "";
        rc = raise_at_caller(I, "%s: %s have shape %s, the scores' own shape, and dtype %s: one-hot rows? %s must be "
                                "class ids, one per row: argmax(%s, axis=-1) gives them%s",
                             where, name, shape_str(lab->rank, lab->shape, s1), dtype_name(lab->dtype), name, name,
                             dense);
    } else if (!dtype_is_int(lab->dtype) && swapped) {
        rc = raise_at_caller(I, "%s: %s have shape %s and dtype %s, and the scores are %s class ids of shape %s: the "
                                "arguments are swapped? the scores (batch, classes) come first, then the labels",
                             where, name, shape_str(lab->rank, lab->shape, s1), dtype_name(lab->dtype),
                             dtype_name(cls->dtype), shape_str(cls->rank, cls->shape, s2));
    } else if (!dtype_is_int(lab->dtype)) {
        rc = raise_at_caller(I, "%s: %s must be integer class ids, got %s (cast them: int(...) or cast(%s, int64))",
                             where, name, dtype_name(lab->dtype), name);
    } else if (cls->rank == 0) {
        tfe_tensor *c = tensor_to_device(cls, 0);
        n = dtype_is_int(c->dtype) ? tensor_load_i64(c, 0) : -1;
        tensor_decref(c);
    } else {
        n = cls->shape[cls->rank - 1];
        bool fits = lab->rank == cls->rank - 1;
        for (int i = 0; fits && i < lab->rank; i++) fits = lab->shape[i] == cls->shape[i];
        /* scores of the labels' own shape are most likely class ids
         * already (argmax taken before the call) */
        bool same = !fits && lab->rank == cls->rank;
        for (int i = 0; same && i < lab->rank; i++) same = lab->shape[i] == cls->shape[i];
        /* one score per row, shape (n, 1): a binary model's output, for
         * which argmax is always 0 (binary_accuracy/binary_cross_entropy) */
        const char *binary = !strcmp(where, "metrics.accuracy") ? "metrics.binary_accuracy(probs, labels)"
                             : !strcmp(where, "losses.sparse_softmax_cross_entropy") ? "losses.binary_cross_entropy(logits, targets)"
                                                                                      : NULL;
        if (same && binary && cls->rank >= 1 && cls->shape[cls->rank - 1] == 1)
            rc = raise_at_caller(I, "%s: the scores have shape %s: one score per row, a binary model's output, whose "
                                    "argmax is always class 0; for 0/1 %s of that shape use %s",
                                 where, shape_str(cls->rank, cls->shape, s2), name, binary);
        else if (same)
            rc = raise_at_caller(I, "%s: the scores have shape %s, the %s' own shape; the scores must be one row of "
                                    "class scores (logits or probabilities) per label, shape (batch, classes), as the "
                                    "model gives them (predicted class ids are compared directly: "
                                    "mean(cast(preds == %s, float32)))",
                                 where, shape_str(cls->rank, cls->shape, s2), name, name);
        else if (!fits)
            rc = raise_at_caller(I, "%s: %s have shape %s but the scores have shape %s; %s must have the scores' "
                                    "shape without its last axis (one class id per row)",
                                 where, name, shape_str(lab->rank, lab->shape, s1), shape_str(cls->rank, cls->shape, s2),
                                 name);
    }
    if (!rc && n == 1 && cls->rank > 0 && !strcmp(where, "metrics.accuracy"))
        /* argmax of one column is always 0: every batch whose labels are all 0
         * would score 1.0 (the label check below catches only a 1) */
        rc = raise_at_caller(I, "%s: the scores have shape %s, one column, so argmax is always class 0 (a batch of "
                                "0 labels would score 1.0 whatever the model); for two classes with one score per row "
                                "use metrics.binary_accuracy(probs, labels), with the scores reshaped to the labels' "
                                "shape (reshape(scores, (-1,)))",
                             where, shape_str(cls->rank, cls->shape, s2));
    if (!rc && n == 1 && cls->rank > 0 && !strncmp(where, "losses.", 7))
        /* every label must be 0 then, and the loss is 0 whatever the model */
        rc = raise_at_caller(I, "%s: the scores have shape %s, one column, so there is 1 class: the softmax of a single "
                                "score is always 1, so the loss would be 0 and its gradient 0; for two classes with one "
                                "score per row use losses.binary_cross_entropy(logits, cast(labels, float32)), with the "
                                "scores reshaped to the labels' shape (reshape(scores, (-1,)))",
                             where, shape_str(cls->rank, cls->shape, s2));
    if (!rc && n < 0) /* a float count (num_classes=2.0, or n / k) */
        rc = raise_at_caller(I, "%s: the number of classes must be an int, got %s (int(n) converts it)", where,
                             dtype_name(cls->dtype));
    if (!rc) {
        tfe_tensor *h = tensor_to_device(lab, 0);
        int64_t m = tensor_numel(h);
        for (int64_t i = 0; i < m; i++) {
            int64_t v = tensor_load_i64(h, i);
            if (v >= 0 && v < n) continue;
            /* where the first bad label is, as the user would index it */
            char at[300] = "";
            if (h->rank) {
                int64_t idx[TFE_MAX_RANK], r = i;
                for (int d = h->rank - 1; d >= 0; d--) { idx[d] = r % h->shape[d]; r /= h->shape[d]; }
                size_t k = (size_t)snprintf(at, sizeof at, " at %s[", name);
                for (int d = 0; d < h->rank && k < sizeof at; d++)
                    k += (size_t)snprintf(at + k, sizeof at - k, d ? ", %lld" : "%lld", (long long)idx[d]);
                if (k < sizeof at - 1) strcat(at, "]");
            }
            if (!strcmp(name, "ids")) /* nn.embedding's table rows */
                rc = raise_at_caller(I, "%s: id %lld%s is outside [0, %lld): the table has %lld rows (vocab_size)",
                                     where, (long long)v, at, (long long)n, (long long)n);
            else if (n == 1 && cls->rank > 0) /* one score per row: a binary classifier's */
                rc = raise_at_caller(I, "%s: label %lld%s is outside [0, 1): the scores have one column, so there is "
                                        "1 class; for two classes with one score per row use %s, with the scores "
                                        "reshaped to the labels' shape (reshape(scores, (-1,)))",
                                     where, (long long)v, at,
                                     !strncmp(where, "losses.", 7) ? "losses.binary_cross_entropy(logits, cast(labels, float32))"
                                                                   : "metrics.binary_accuracy(probs, labels)");
            else
                rc = raise_at_caller(I, "%s: label %lld%s is outside [0, %lld): there are %lld classes",
                                     where, (long long)v, at, (long long)n, (long long)n);
            break;
        }
        tensor_decref(h);
    }
    tensor_decref(lab);
    tensor_decref(cls);
    return rc;
}

/* check_range(where, x, lo, hi, name, hint=""): nil, or an error at the
 * caller's call naming the first element of x outside [lo, hi] (NaN
 * passes). The cross-entropies' targets are probabilities: labels -1/+1,
 * pixel values 0..255 or the logits themselves (arguments swapped) would
 * give a finite loss that is unbounded below and trains to nonsense. An
 * effect, as check_labels: staged code reads the values at every call. */
BUILTIN(bi_check_range)
{
    (void)data;
    Value a[6];
    bool p[6];
    if (args_parse(I, "check_range", "where, x, lo, hi, name, hint=", argc, argv, nkw, kwnames, kwvals, a, p))
        return -1;
    if (a[0].kind != V_STR || a[4].kind != V_STR || (p[5] && a[5].kind != V_STR))
        return interp_raise(I, "check_range: where, name and hint must be strings");
    const char *where = ((Str *)a[0].u.o)->s, *name = ((Str *)a[4].u.o)->s, *hint = p[5] ? ((Str *)a[5].u.o)->s : "";
    double lo, hi;
    tfe_dtype dt;
    if (!arg_as_number(a[2], &lo, &dt) || !arg_as_number(a[3], &hi, &dt))
        return interp_raise(I, "check_range: lo and hi must be numbers");
    *out = v_nil();
    tfe_tensor *x = check_tensor(I, where, name, a[1]);
    if (!x) return -1;
    int rc = 0;
    if (x->dtype != TFE_BOOL) {
        tfe_tensor *h = tensor_to_device(x, 0);
        int64_t m = tensor_numel(h);
        for (int64_t i = 0; i < m; i++) {
            double v = tensor_load_f64(h, i);
            if (!(v < lo || v > hi)) continue;
            char at[300] = "";
            if (h->rank) {
                int64_t idx[TFE_MAX_RANK], r = i;
                for (int d = h->rank - 1; d >= 0; d--) { idx[d] = r % h->shape[d]; r /= h->shape[d]; }
                size_t k = (size_t)snprintf(at, sizeof at, "%s[", name);
                for (int d = 0; d < h->rank && k < sizeof at; d++)
                    k += (size_t)snprintf(at + k, sizeof at - k, d ? ", %lld" : "%lld", (long long)idx[d]);
                if (k < sizeof at - 1) strcat(at, "]");
            } else
                snprintf(at, sizeof at, "%s", name);
            rc = raise_at_caller(I, "%s: %s is %.9g, outside [%g, %g]%s", where, at, v, lo, hi, hint);
            break;
        }
        tensor_decref(h);
    }
    tensor_decref(x);
    return rc;
}

/* check_logits(where, x, name, binary=false): nil, or an error at the
 * caller's call when x is the result of softmax itself (tfe_tensor.
 * softmax_out), or with binary (a loss that applies sigmoid) of sigmoid
 * (sigmoid_out): a loss from logits would apply it again, and training on
 * it goes on silently badly (the gradient is squeezed through both; a
 * sigmoid's output, in (0, 1), as logits keeps the loss's sigmoid near
 * 0.5..0.73 whatever the model says). Structural, not
 * an effect: a staged function's inputs carry the mark in their signature
 * (stage/sig.c), so the check made while tracing holds for every call. */
BUILTIN(bi_check_logits)
{
    (void)data;
    Value a[4];
    bool p[4];
    if (args_parse(I, "check_logits", "where, x, name, binary=false", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    if (a[0].kind != V_STR || a[2].kind != V_STR) return interp_raise(I, "check_logits: where and name must be strings");
    const char *where = ((Str *)a[0].u.o)->s, *name = ((Str *)a[2].u.o)->s;
    *out = v_nil();
    tfe_tensor *x = check_tensor(I, where, name, a[1]);
    if (!x) return -1;
    int rc = 0;
    bool binary = false;
    if (p[3] && arg_bool(I, "check_logits", "binary", a[3], &binary)) rc = -1;
    else if (binary && x->sigmoid_out)
        rc = raise_at_caller(I, "%s: %s is the output of sigmoid (probabilities), but the loss takes logits and "
                                "applies sigmoid itself, so the model would train on a sigmoid of a sigmoid: pass the "
                                "scores before the sigmoid (a last layer without activation=sigmoid) and apply sigmoid "
                                "only to read probabilities out",
                             where, name);
    else if (x->softmax_out)
        rc = raise_at_caller(I, "%s: %s is the output of softmax (probabilities), but the loss takes logits and "
                                "applies softmax itself, so the model would train on a softmax of a softmax: pass the "
                                "scores before the softmax (a last layer without activation=softmax) and apply softmax "
                                "only to read probabilities out",
                             where, name);
    tensor_decref(x);
    return rc;
}

/* check_batch(where, x, name, per_feature=false): nil, or an error at the
 * caller's call when x holds no examples (a loss or a metric is a mean over
 * them: NaN of an empty batch, as a batch loop past the last row makes),
 * or, with per_feature, fewer than two values per feature (its last axis):
 * batch statistics of one row are the row itself, so batch norm would
 * output zeros (PyTorch refuses it too). An effect: staged code checks the
 * batch of every call. */
BUILTIN(bi_check_batch)
{
    (void)data;
    Value a[4];
    bool p[4];
    if (args_parse(I, "check_batch", "where, x, name, per_feature=", argc, argv, nkw, kwnames, kwvals, a, p))
        return -1;
    if (a[0].kind != V_STR || a[2].kind != V_STR) return interp_raise(I, "check_batch: where and name must be strings");
    const char *where = ((Str *)a[0].u.o)->s, *name = ((Str *)a[2].u.o)->s;
    bool per_feature = false;
    if (p[3] && value_truth(I, a[3], I->cur_loc, &per_feature)) return -1;
    *out = v_nil();
    tfe_tensor *x = check_tensor(I, where, name, a[1]);
    if (!x) return -1;
    char s1[200];
    int rc = 0;
    int64_t m = tensor_numel(x);
    if (m == 0)
        rc = raise_at_caller(I, "%s: %s has shape %s: the batch is empty, and a mean over no examples is NaN (a batch "
                                "loop past the last row? range(0, n, batch_size) starts a batch at each row that "
                                "exists, and data.batches makes no empty batch)",
                             where, name, shape_str(x->rank, x->shape, s1));
    else if (per_feature && (x->rank < 2 || m / x->shape[x->rank - 1] < 2))
        rc = raise_at_caller(I, "%s: training needs more than one value per feature for the batch statistics, got %s "
                                "of shape %s (the statistics of one row are the row itself: the output would be "
                                "zeros)%s",
                             where, name, shape_str(x->rank, x->shape, s1),
                             x->rank < 2 ? "; one example without its batch axis is expand_dims(x, 0), and it is "
                                           "normalised with training=false"
                                         : "; use batches of two rows or more (data.batches(x, y, b, drop_last=true) drops a "
                                           "short last batch), or training=false for one example");
    tensor_decref(x);
    return rc;
}

/* --- structural checks for the stdlib (optim.tfe, nn.tfe) ---
 * A learner's mistake (a list of variables for an optimizer, a function in
 * nn.sequential, a second positional argument to a layer) would otherwise
 * fail later, inside the library, or not at all. They look only at the
 * kinds of values, which a trace's signature fixes, so they are not effects:
 * a staged caller runs them while it traces. */

/* "a"/"an" before a kind name */
static const char *article(const char *w) { return strchr("aeiou", w[0]) ? "an" : "a"; }

/* check_params(where, ps): ps is a record of variables (params(model)). */
BUILTIN(bi_check_params)
{
    (void)data;
    Value a[2];
    bool p[2];
    if (args_parse(I, "check_params", "where, ps", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    if (a[0].kind != V_STR) return interp_raise(I, "check_params: where must be a string");
    const char *where = ((Str *)a[0].u.o)->s, *k = value_kind_name(a[1]);
    *out = v_nil();
    if (a[1].kind != V_RECORD)
        return raise_at_caller(I, "%s: the parameters must be a record of variables (path -> variable, as params(model) "
                                  "returns), got %s %s; pass params(model), or name them: {w: w, b: b}",
                               where, article(k), k);
    Record *r = (Record *)a[1].u.o;
    for (int i = 0; i < r->n; i++)
        if (!value_is_variable(r->vals[i])) {
            k = value_kind_name(r->vals[i]);
            return raise_at_caller(I, "%s: the parameters must be variables, but [\"%s\"] is %s %s; pass params(model), "
                                      "or make it a variable: variable(x)",
                                   where, r->keys[i]->s, article(k), k);
        } else if (!dtype_is_float(variable_peek(r->vals[i])->dtype)) {
            /* the gradient would fail inside the library's minimize, or
             * an update be truncated to ints */
            tfe_dtype dt = variable_peek(r->vals[i])->dtype;
            return raise_at_caller(I, "%s: the parameter [\"%s\"] is %s %s variable; an optimizer trains float "
                                      "variables: make it variable(3.0) rather than variable(3), or "
                                      "variable(cast(x, float32)) (a counter that is not trained takes trainable=false)",
                                   where, r->keys[i]->s, article(dtype_name(dt)), dtype_name(dt));
        }
    return 0;
}

/* check_grads(where, grads, ps): grads is a record with every key of ps. */
BUILTIN(bi_check_grads)
{
    (void)data;
    Value a[3];
    bool p[3];
    if (args_parse(I, "check_grads", "where, grads, ps", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    if (a[0].kind != V_STR || (a[2].kind != V_RECORD && a[2].kind != V_NIL))
        return interp_raise(I, "check_grads: where must be a string and ps a record or nil");
    const char *where = ((Str *)a[0].u.o)->s, *k = value_kind_name(a[1]);
    *out = v_nil();
    /* ps nil: a record of gradients of any keys (optim.clip_by_global_norm) */
    if (a[2].kind == V_NIL) {
        if (a[1].kind == V_RECORD) return 0;
        return raise_at_caller(I, "%s: the gradients must be a record (path -> gradient), as t.gradient(loss, ps) "
                                  "returns for a record ps such as params(model); got %s %s (the gradient of one "
                                  "variable w is a record too when asked for one: t.gradient(loss, {w: w}))",
                               where, article(k), k);
    }
    if (a[1].kind != V_RECORD)
        return raise_at_caller(I, "%s: the gradients must be a record with the parameters' paths, as "
                                  "t.gradient(loss, ps) returns for the record ps the optimizer was built with; got %s %s",
                               where, article(k), k);
    Record *g = (Record *)a[1].u.o, *ps = (Record *)a[2].u.o;
    for (int i = 0; i < ps->n; i++) {
        Value *gv = record_get(g, ps->keys[i]->s, strlen(ps->keys[i]->s));
        if (!gv)
            return raise_at_caller(I, "%s: the gradients have no entry \"%s\"; the optimizer updates every parameter it "
                                      "was built with: pass t.gradient(loss, ps) for that same record ps",
                                   where, ps->keys[i]->s);
        /* nil (a gradient of nothing: a source given as nil) or a string
         * would fail inside the update, in the library's code */
        if (gv->kind != V_TENSOR && gv->kind != V_SCALAR) {
            const char *gk = value_kind_name(*gv);
            return raise_at_caller(I, "%s: the gradient for '%s' is %s%s%s, not a tensor; pass t.gradient(loss, ps) "
                                      "for the record ps the optimizer was built with",
                                   where, ps->keys[i]->s, gv->kind == V_NIL ? "" : article(gk),
                                   gv->kind == V_NIL ? "" : " ", gk);
        }
        /* a gradient that only broadcasts to its parameter ((1,) for (2, 1))
         * would update every element alike */
        if (!value_is_variable(ps->vals[i])) continue;
        const tfe_tensor *w = variable_peek(ps->vals[i]);
        int grank = gv->kind == V_TENSOR ? gv->u.t->rank : 0;
        const int64_t *gshape = gv->kind == V_TENSOR ? gv->u.t->shape : NULL;
        bool same = grank == w->rank;
        for (int d = 0; same && d < grank; d++) same = gshape[d] == w->shape[d];
        if (!same) {
            char s1[200], s2[200];
            return raise_at_caller(I, "%s: the gradient for '%s' has shape %s, the parameter %s; each gradient must "
                                      "have its parameter's shape, as t.gradient(loss, ps) returns",
                                   where, ps->keys[i]->s, shape_str(grank, gshape, s1), shape_str(w->rank, w->shape, s2));
        }
        /* a tape's gradient of another variable (model B's gradients for
         * model A's optimizer: same paths, same shapes) would train A on
         * B's loss silently (tfe_tensor.grad_for: ids that differ are two
         * variables; a gradient made by any other op carries none) */
        unsigned gid = gv->kind == V_TENSOR ? gv->u.t->grad_for : 0, want = variable_grad_id(ps->vals[i]);
        if (gid && gid != TFE_GRAD_FOR_MANY && want && gid != want) {
            int other = -1; /* the parameter it is the gradient of, if this optimizer's */
            for (int j = 0; j < ps->n && other < 0; j++)
                if (variable_grad_id(ps->vals[j]) == gid) other = j;
            if (other >= 0)
                return raise_at_caller(I, "%s: the gradient for '%s' is the gradient of the parameter '%s': the record pairs "
                                          "its keys with other parameters' gradients; pass "
                                          "t.gradient(loss, ps) for the record ps the optimizer was built with",
                                       where, ps->keys[i]->s, ps->keys[other]->s);
            return raise_at_caller(I, "%s: the gradient for '%s' is a tape's gradient of a variable this optimizer "
                                      "does not update (another model's gradients, or the model made again after "
                                      "its optimizer?): pass t.gradient(loss, ps) for the record ps the optimizer "
                                      "was built with",
                                   where, ps->keys[i]->s);
        }
    }
    return 0;
}

/* check_layers(where, layers): every item is a layer (a record with call). */
BUILTIN(bi_check_layers)
{
    (void)data;
    Value a[2];
    bool p[2];
    if (args_parse(I, "check_layers", "where, layers", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    if (a[0].kind != V_STR || (a[1].kind != V_TUPLE && a[1].kind != V_LIST))
        return interp_raise(I, "check_layers: where must be a string and layers a tuple or list");
    const char *where = ((Str *)a[0].u.o)->s;
    *out = v_nil();
    Seq *s = (Seq *)a[1].u.o;
    for (int i = 0; i < s->n; i++) {
        Value v = s->items[i];
        if ((v.kind == V_RECORD || v.kind == V_MODULE) && record_get((Record *)v.u.o, "call", 4)) continue;
        const char *k = value_kind_name(v);
        if (v.kind == V_BUILTIN || v.kind == V_FN) {
            const char *name = v.kind == V_BUILTIN ? ((Builtin *)v.u.o)->name : "f";
            return raise_at_caller(I, "%s: layer %d is a function, not a layer; wrap a function of one tensor as a "
                                      "layer: nn.lambda_layer(%s)", where, i, name);
        }
        return raise_at_caller(I, "%s: layer %d is %s %s, not a layer (a record with a call field, such as "
                                  "nn.dense(...) returns)", where, i, article(k), k);
    }
    return 0;
}

/* check_fn(where, name, f, what, hint="", nil_ok=true): nil, or an error at
 * the caller's call unless f is callable (or nil, when nil_ok) (a function, a builtin, a record with a call
 * function): a layer's activation="relu" or an optimizer's schedule=0.01
 * would otherwise fail at the first call, inside the library. what says
 * which functions fit ("a function of one tensor (relu, tanh, ...)"). */
BUILTIN(bi_check_fn)
{
    (void)data;
    Value a[7];
    bool p[7];
    if (args_parse(I, "check_fn", "where, name, f, what, hint=, nil_ok=, nargs=", argc, argv, nkw, kwnames, kwvals, a,
                   p))
        return -1;
    if (a[0].kind != V_STR || a[1].kind != V_STR || a[3].kind != V_STR || (p[4] && a[4].kind != V_STR))
        return interp_raise(I, "check_fn: where, name, what and hint must be strings");
    bool nil_ok = true;
    if (p[5] && value_truth(I, a[5], I->cur_loc, &nil_ok)) return -1;
    *out = v_nil();
    Value f = a[2];
    int64_t nargs = -1;
    if (p[6] && arg_int(I, "check_fn", "nargs", a[6], &nargs)) return -1;
    if (f.kind == V_FN && nargs >= 0) {
        /* a function that needs more arguments than the library passes
         * (opt.minimize(fn (x) => ...)) would fail at the library's call */
        const FnInfo *fi = (const FnInfo *)((Closure *)f.u.o)->fn->info;
        int required = 0;
        char names[200] = "";
        for (int i = 0; i < fi->nparams; i++) {
            if (fi->defaults && fi->defaults[i]) continue;
            size_t len = strlen(names);
            snprintf(names + len, sizeof names - len, "%s%s", required ? ", " : "", fi->param_names[i]);
            required++;
        }
        if (fi->nparams < nargs) /* fn () => 0.1 as a schedule: called with the step, too many */
            return raise_at_caller(I, "%s: %s must be %s, got a function of %d argument%s", ((Str *)a[0].u.o)->s,
                                   ((Str *)a[1].u.o)->s, ((Str *)a[3].u.o)->s, fi->nparams,
                                   fi->nparams == 1 ? "" : "s");
        if (required > nargs)
            return raise_at_caller(I, "%s: %s must be %s, got a function of %d argument%s (%s)", ((Str *)a[0].u.o)->s,
                                   ((Str *)a[1].u.o)->s, ((Str *)a[3].u.o)->s, required,
                                   required == 1 ? "" : "s", names);
    }
    if ((f.kind == V_NIL && nil_ok) || f.kind == V_FN || f.kind == V_BUILTIN || f.kind == V_OBJECT) return 0;
    if (f.kind == V_RECORD || f.kind == V_MODULE) {
        Value *c = record_get((Record *)f.u.o, "call", 4);
        if (c && (c->kind == V_FN || c->kind == V_BUILTIN)) return 0;
    }
    const char *where = ((Str *)a[0].u.o)->s, *name = ((Str *)a[1].u.o)->s, *k = value_kind_name(f);
    if (f.kind == V_STR) {
        const char *sv = ((Str *)f.u.o)->s;
        return raise_at_caller(I, "%s: %s must be %s%s, got the string \"%s\"; pass the function itself, not its "
                                  "name in quotes",
                               where, name, ((Str *)a[3].u.o)->s, nil_ok ? " or nil" : "", sv);
    }
    return raise_at_caller(I, "%s: %s must be %s%s, got %s %s%s", where, name, ((Str *)a[3].u.o)->s,
                           nil_ok ? " or nil" : "", article(k), k, p[4] ? ((Str *)a[4].u.o)->s : "");
}

/* check_number(where, name, x): nil, or an error at the caller's call
 * unless x is a number (or a one-element tensor, or a variable holding
 * one): an optimizer's lr="0.1" would otherwise fail inside the library. */
BUILTIN(bi_check_number)
{
    (void)data;
    Value a[3];
    bool p[3];
    if (args_parse(I, "check_number", "where, name, x", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    if (a[0].kind != V_STR || a[1].kind != V_STR) return interp_raise(I, "check_number: where and name must be strings");
    *out = v_nil();
    Value x = a[2];
    if (x.kind == V_SCALAR && x.dtype != TFE_BOOL) return 0;
    if (x.kind == V_TENSOR && tensor_numel(x.u.t) == 1 && x.u.t->dtype != TFE_BOOL) return 0;
    if (value_is_variable(x)) {
        const tfe_tensor *w = variable_peek(x);
        if (tensor_numel(w) == 1 && w->dtype != TFE_BOOL) return 0;
    }
    const char *k = value_kind_name(x);
    if (x.kind == V_STR)
        return raise_at_caller(I, "%s: %s must be a number, got the string \"%s\"; write the number without quotes",
                               ((Str *)a[0].u.o)->s, ((Str *)a[1].u.o)->s, ((Str *)x.u.o)->s);
    char sh[220] = "";
    if (x.kind == V_TENSOR) {
        char s1[200];
        snprintf(sh, sizeof sh, " of shape %s", shape_str(x.u.t->rank, x.u.t->shape, s1));
    }
    return raise_at_caller(I, "%s: %s must be a number, got %s %s%s", ((Str *)a[0].u.o)->s, ((Str *)a[1].u.o)->s,
                           article(k), k, sh);
}

/* check_tensor(where, name, x): nil, or an error at the caller's call
 * unless x is a tensor (or a number): data.batches given lists or nil
 * would otherwise fail at a line of data.tfe. */
BUILTIN(bi_check_tensor)
{
    (void)data;
    Value a[3];
    bool p[3];
    if (args_parse(I, "check_tensor", "where, name, x", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    if (a[0].kind != V_STR || a[1].kind != V_STR) return interp_raise(I, "check_tensor: where and name must be strings");
    *out = v_nil();
    tfe_tensor *t = check_tensor(I, ((Str *)a[0].u.o)->s, ((Str *)a[1].u.o)->s, a[2]);
    if (!t) return -1;
    tensor_decref(t);
    return 0;
}

/* The error for an image layer's x (conv, pools) whose rank is not 4, with
 * the way to make a batch of NHWC images of what was given; n is the
 * layer's input channels, or 0 when it has none (a pool). */
static int images_rank_error(Interp *I, const char *where, const tfe_tensor *x, int64_t n)
{
    char s1[200], hint[300] = "";
    shape_str(x->rank, x->shape, s1);
    if (x->rank == 2)
        snprintf(hint, sizeof hint, "; one grayscale image (h, w) is reshape(x, (1, %lld, %lld, 1))",
                 (long long)x->shape[0], (long long)x->shape[1]);
    else if (x->rank == 3 && n > 0 && x->shape[2] == n)
        snprintf(hint, sizeof hint, "; one image (h, w, c) is expand_dims(x, 0)");
    else if (x->rank == 3 && n == 1)
        snprintf(hint, sizeof hint, "; a batch of one-channel images (n, h, w) is expand_dims(x, -1)");
    else if (x->rank == 3 && n == 0)
        snprintf(hint, sizeof hint, "; one image (h, w, c) is expand_dims(x, 0), a batch of one-channel images "
                                    "(n, h, w) expand_dims(x, -1)");
    return raise_at_caller(I, "%s: x must be a batch of NHWC images (n, h, w, c), got shape %s%s", where, s1, hint);
}

/* A layer's size given to a check: an int, or the layer's own variable (or
 * tensor) whose axis `axis` holds it (nn.dense's w: its n_in is w's axis
 * 0): read from the variable's static shape, the check keeps the layer's
 * outside ints out of a staged graph's inputs. */
static int check_size_arg(Interp *I, const char *fn, Value v, int axis, int64_t *n)
{
    const tfe_tensor *t = NULL;
    if (value_is_variable(v)) t = variable_peek(v);
    else if (v.kind == V_TENSOR && v.u.t->rank > 0) t = v.u.t;
    if (t) {
        if (axis >= t->rank) return interp_raise(I, "%s: n's rank %d has no axis %d", fn, t->rank, axis);
        *n = t->shape[axis];
        return 0;
    }
    return arg_int(I, fn, "n", v, n);
}

/* check_features(where, x, n, name, rank2=false, channels=false, what=nil):
 * nil, or an error at the caller's call unless x's last axis is a layer's n
 * inputs (and x has rank 2 with rank2: a recurrent cell's (batch,
 * features)); the layer's matmul would otherwise fail at a line of nn.tfe.
 * n is an int or the layer's weight (its axis 0; a conv kernel's axis 2).
 * With channels (a conv layer) x must have rank 4 (NHWC images), the axis is
 * called channels, and an x whose axis 1 holds the channels is told that
 * images are NHWC. what, when given, names what the last axis must be ("the
 * 3 columns that ..." instead of "the layer's 3 inputs (name=3)"). It reads
 * only x's rank and its axes, and not as a shape read by the program: a
 * staged layer's graph stays free of the batch size (export's dynamic
 * dims). */
BUILTIN(bi_check_features)
{
    (void)data;
    Value a[7];
    bool p[7];
    if (args_parse(I, "check_features", "where, x, n, name, rank2=, channels=, what=", argc, argv, nkw, kwnames,
                   kwvals, a, p))
        return -1;
    if (a[0].kind != V_STR || a[3].kind != V_STR || (p[6] && a[6].kind != V_STR))
        return interp_raise(I, "check_features: where, name and what must be strings");
    const char *where = ((Str *)a[0].u.o)->s, *name = ((Str *)a[3].u.o)->s;
    *out = v_nil();
    bool rank2 = false;
    if (p[4] && value_truth(I, a[4], I->cur_loc, &rank2)) return -1;
    bool channels = false;
    if (p[5] && value_truth(I, a[5], I->cur_loc, &channels)) return -1;
    int64_t n;
    if (check_size_arg(I, "check_features", a[2], channels ? 2 : 0, &n)) return -1;
    tfe_tensor *x = check_tensor(I, where, "x", a[1]);
    if (!x) return -1;
    bool ok = x->rank > 0 && x->shape[x->rank - 1] == n && (!rank2 || x->rank == 2);
    int rc = 0;
    if (channels) {
        if (x->rank != 4) rc = images_rank_error(I, where, x, n);
        else if (!dtype_is_float(x->dtype)) /* conv2d's kernel takes floats only (a line of nn.tfe otherwise) */
            rc = raise_at_caller(I, "%s: x has dtype %s; images must be floats: cast(x, float32) (pixel values "
                                    "0..255 are usually scaled as well: cast(x, float32) / 255.0)",
                                 where, dtype_name(x->dtype));
        else if (x->shape[3] != n) {
            char s1[200];
            rc = raise_at_caller(I, "%s: x has shape %s, whose last axis (channels) must be the layer's %lld input channels%s",
                                 where, shape_str(x->rank, x->shape, s1), (long long)n,
                                 x->shape[1] == n ? "; images are NHWC: transpose(x, (0, 2, 3, 1)) turns NCHW into NHWC"
                                                  : "");
        }
    } else if (!ok && p[6]) {
        char s1[200];
        rc = raise_at_caller(I, "%s: x has shape %s; its last axis must be the %lld %s", where,
                             shape_str(x->rank, x->shape, s1), (long long)n, ((Str *)a[6].u.o)->s);
    } else if (!ok) {
        char s1[200];
        rc = raise_at_caller(I, "%s: x has shape %s; %s must be the layer's %lld inputs (%s=%lld)", where,
                             shape_str(x->rank, x->shape, s1),
                             rank2 ? "it must be (batch, features), and its last axis" : "its last axis (features)",
                             (long long)n, name, (long long)n);
    }
    tensor_decref(x);
    return rc;
}

/* check_images(where, x): nil, or an error at the caller's call unless x
 * has rank 4 (a pool's NHWC images; the op would fail at a line of nn.tfe).
 * It reads only the rank: no effect, nothing in a staged graph. */
BUILTIN(bi_check_images)
{
    (void)data;
    Value a[2];
    bool p[2];
    if (args_parse(I, "check_images", "where, x", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    if (a[0].kind != V_STR) return interp_raise(I, "check_images: where must be a string");
    *out = v_nil();
    tfe_tensor *x = check_tensor(I, ((Str *)a[0].u.o)->s, "x", a[1]);
    if (!x) return -1;
    int rc = x->rank == 4 ? 0 : images_rank_error(I, ((Str *)a[0].u.o)->s, x, 0);
    tensor_decref(x);
    return rc;
}

/* check_state(where, what, s, x, n): nil, or an error at the caller's call
 * unless the recurrent state s has shape (x's batch, n): a state of batch 1
 * would broadcast against a batch-2 input. n is an int or the cell's
 * recurrent weight u (its axis 0). As check_features it reads the shapes
 * in C, not as the program's shape reads, and is no effect: a staged cell
 * exports (docs/export.md). */
BUILTIN(bi_check_state)
{
    (void)data;
    Value a[5];
    bool p[5];
    if (args_parse(I, "check_state", "where, what, s, x, n", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    if (a[0].kind != V_STR || a[1].kind != V_STR) return interp_raise(I, "check_state: where and what must be strings");
    const char *where = ((Str *)a[0].u.o)->s, *what = ((Str *)a[1].u.o)->s;
    *out = v_nil();
    int64_t n;
    if (check_size_arg(I, "check_state", a[4], 0, &n)) return -1;
    tfe_tensor *x = check_tensor(I, where, "x", a[3]);
    if (!x) return -1;
    tfe_tensor *s = check_tensor(I, where, what, a[2]);
    if (!s) { tensor_decref(x); return -1; }
    int rc = 0;
    int64_t batch = x->rank > 0 ? x->shape[0] : 1;
    if (s->rank != 2 || s->shape[0] != batch || s->shape[1] != n) {
        char s1[200], s2[200];
        rc = raise_at_caller(I, "%s: %s has shape %s, but x %s needs (%lld, %lld), (batch, n_hidden); pass nil for zeros",
                             where, what, shape_str(s->rank, s->shape, s1), shape_str(x->rank, x->shape, s2),
                             (long long)batch, (long long)n);
    }
    tensor_decref(s);
    tensor_decref(x);
    return rc;
}

/* check_size(where, name, n): nil, or an error at the caller's call unless
 * n is a positive int: a layer's size 3.0 (n / 2 is a float) would fail in
 * an initialiser inside nn.tfe. */
BUILTIN(bi_check_size)
{
    (void)data;
    Value a[3];
    bool p[3];
    if (args_parse(I, "check_size", "where, name, n", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    if (a[0].kind != V_STR || a[1].kind != V_STR) return interp_raise(I, "check_size: where and name must be strings");
    const char *where = ((Str *)a[0].u.o)->s, *name = ((Str *)a[1].u.o)->s;
    *out = v_nil();
    int64_t n;
    Value v = a[2];
    if (v.kind != V_SCALAR || v.dtype != TFE_BOOL) {
        if (arg_as_int(v, &n)) {
            if (n > 0) return 0;
            return raise_at_caller(I, "%s: %s must be a positive int, got %lld", where, name, (long long)n);
        }
    }
    double f;
    tfe_dtype dt;
    if (v.kind != V_STR && !(v.kind == V_SCALAR && v.dtype == TFE_BOOL) && arg_as_number(v, &f, &dt)) {
        char *r = value_repr(v);
        int rc;
        if (f == floor(f) && f > 0)
            rc = raise_at_caller(I, "%s: %s must be a positive int, got %s; int(...) converts it, and // divides into an int",
                                 where, name, r);
        else
            rc = raise_at_caller(I, "%s: %s must be a positive int, got %s", where, name, r);
        free(r);
        return rc;
    }
    const char *k = value_kind_name(v);
    if (v.kind == V_STR)
        return raise_at_caller(I, "%s: %s must be a positive int, got the string \"%s\"; write the number without quotes",
                               where, name, ((Str *)v.u.o)->s);
    return raise_at_caller(I, "%s: %s must be a positive int, got %s %s", where, name, article(k), k);
}

/* check_data_file(where, dir, file): nil, or an error at the caller's call
 * unless dir is nil (the bundled copy) or a folder (a string) with a
 * readable file in it: a data loader's dir="data" with no such file would
 * otherwise fail at load_csv's line in data.tfe. */
BUILTIN(bi_check_data_file)
{
    (void)data;
    Value a[3];
    bool p[3];
    if (args_parse(I, "check_data_file", "where, dir, file", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    if (a[0].kind != V_STR || a[2].kind != V_STR) return interp_raise(I, "check_data_file: where and file must be strings");
    const char *where = ((Str *)a[0].u.o)->s, *file = ((Str *)a[2].u.o)->s;
    *out = v_nil();
    if (a[1].kind == V_NIL) return 0;
    if (a[1].kind != V_STR) {
        const char *k = value_kind_name(a[1]);
        return raise_at_caller(I, "%s: dir must be a folder's name (a string) or nil, got %s %s", where, article(k), k);
    }
    const char *dir = ((Str *)a[1].u.o)->s;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    errno = 0;
    FILE *f = fopen(path, "rb");
    if (f) { fclose(f); return 0; }
    return raise_at_caller(I, "%s: cannot open '%s': %s; dir is the folder that holds %s (relative to the current "
                              "directory); leave dir out to load the copy bundled with tfe",
                           where, path, errno ? strerror(errno) : "out of memory", file);
}

/* check_training(where, training): true or false (a layer's call takes one
 * input; a second positional argument would be taken as training). */
BUILTIN(bi_check_training)
{
    (void)data;
    Value a[2];
    bool p[2];
    if (args_parse(I, "check_training", "where, training", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    if (a[0].kind != V_STR) return interp_raise(I, "check_training: where must be a string");
    *out = v_nil();
    Value t = a[1];
    if ((t.kind == V_SCALAR && t.dtype == TFE_BOOL) ||
        (t.kind == V_TENSOR && t.u.t->rank == 0 && t.u.t->dtype == TFE_BOOL))
        return 0;
    const char *k = value_kind_name(t);
    return raise_at_caller(I, "%s: training must be true or false, got %s %s; a layer takes one input: call it as "
                              "layer(x), or layer(x, training=true) by name",
                           ((Str *)a[0].u.o)->s, article(k), k);
}

/* check_arg(where, cond, message): nil, or the error "where: message" at the
 * caller's call when cond is false (a library function's own argument
 * checks: data.batches, nn.layer_norm), located at the user's line as the
 * other checks are. */
BUILTIN(bi_check_arg)
{
    (void)data;
    Value a[3];
    bool p[3];
    if (args_parse(I, "check_arg", "where, cond, message", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    if (a[0].kind != V_STR || a[2].kind != V_STR)
        return interp_raise(I, "check_arg: where and message must be strings");
    bool t;
    if (value_truth(I, a[1], I->cur_loc, &t)) return -1;
    *out = v_nil();
    if (t) return 0;
    return raise_at_caller(I, "%s: %s", ((Str *)a[0].u.o)->s, ((Str *)a[2].u.o)->s);
}

/* enumerate(xs, start=0), zip(a, b, ...): lists of tuples, walking each
 * iterable as 'for' does (tensors along axis 0, tuples, lists, ranges,
 * record keys, strings); zip stops at the shortest. */
BUILTIN(bi_enumerate)
{
    (void)data;
    Value a[2];
    bool p[2];
    if (args_parse(I, "enumerate", "xs, start=", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    int64_t start = 0;
    if (p[1]) {
        if (a[1].kind != V_SCALAR || !dtype_is_int((tfe_dtype)a[1].dtype))
            return interp_raise(I, "enumerate: start must be an int, got %s", value_kind_name(a[1]));
        start = a[1].u.i;
    }
    Seq *s = seq_new(0);
    Value r = v_obj(V_LIST, s);
    for (int64_t i = 0;; i++) {
        Value pair[2];
        int k = iter_item(I, a[0], i, I->cur_loc, &pair[1]);
        if (k == 1) break;
        if (k < 0) { value_decref(r); return -1; }
        pair[0] = v_int(start + i);
        seq_push_take(s, value_seq_tuple(2, pair));
        value_decref(pair[1]);
    }
    *out = r;
    return 0;
}

BUILTIN(bi_zip)
{
    (void)data;
    if (nkw) return interp_raise(I, "zip() takes no keyword arguments");
    Seq *s = seq_new(0);
    Value r = v_obj(V_LIST, s);
    Value buf[8];
    Value *items = argc <= 8 ? buf : xmalloc(sizeof(Value) * (size_t)argc);
    int rc = 0;
    for (int64_t i = 0; argc > 0 && !rc; i++) {
        int got = 0, k = 0;
        for (; got < argc; got++)
            if ((k = iter_item(I, argv[got], i, I->cur_loc, &items[got])) != 0) break;
        if (got == argc) seq_push_take(s, value_seq_tuple(argc, items));
        for (int j = 0; j < got; j++) value_decref(items[j]);
        if (k < 0) rc = -1;
        else if (got < argc) break;
    }
    if (items != buf) free(items);
    if (rc) { value_decref(r); return -1; }
    *out = r;
    return 0;
}

void builtins_register(Interp *I)
{
    interp_define_builtin_flags(I, "check_same_shape", bi_check_same_shape, NULL, BF_EFFECT, NULL);
    interp_define_builtin_flags(I, "check_labels", bi_check_labels, NULL, BF_EFFECT, NULL);
    interp_define_builtin_flags(I, "check_range", bi_check_range, NULL, BF_EFFECT, NULL);
    interp_define_builtin_flags(I, "check_batch", bi_check_batch, NULL, BF_EFFECT, NULL);
    interp_define_builtin(I, "check_logits", bi_check_logits, NULL);
    interp_define_builtin_flags(I, "assert", bi_assert, NULL, BF_EFFECT, NULL);
    interp_define_builtin(I, "getenv", bi_getenv, NULL);
    interp_define_builtin_flags(I, "print", bi_print, NULL, BF_EFFECT, NULL);
    interp_define_builtin(I, "format", bi_format, NULL);
    interp_define_builtin(I, "str", bi_str, NULL);
    interp_define_builtin(I, "int", bi_int, NULL);
    interp_define_builtin(I, "float", bi_float, NULL);
    interp_define_builtin(I, "len", bi_len, NULL);
    interp_define_builtin(I, "range", bi_range, NULL);
    interp_define_builtin(I, "list", bi_list, NULL);
    interp_define_builtin_flags(I, "time", bi_time, NULL, BF_EFFECT_VALUE, NULL);
    interp_define_builtin(I, "memory", bi_memory, NULL);
    interp_define_builtin(I, "varargs", bi_varargs, NULL);
    static const char *dtypes[] = {"bool", "int32", "int64", "float32", "float64", "float16", "bfloat16"};
    for (size_t i = 0; i < sizeof dtypes / sizeof *dtypes; i++) define_value(I, dtypes[i], v_cstr(dtypes[i]));
    Seq *args = seq_new(I->opt.argc);
    for (int i = 0; i < I->opt.argc; i++) seq_push_take(args, v_cstr(I->opt.argv[i]));
    define_value(I, "argv", v_obj(V_LIST, args));
    interp_define_builtin(I, "enumerate", bi_enumerate, NULL);
    interp_define_builtin(I, "zip", bi_zip, NULL);
    /* NumPy's np.pi, np.inf, np.nan: weak float numbers, as the literals would
     * be (pi keeps its exact double until it meets a dtype, as 3.14159... does) */
    const double consts[] = {3.141592653589793, HUGE_VAL, NAN};
    const char *cnames[] = {"pi", "inf", "nan"};
    for (int i = 0; i < 3; i++) {
        Value c = v_float(consts[i], TFE_FLOAT32);
        c.weak = true;
        if (c.u.f != consts[i] && !isnan(consts[i])) {
            c.u.f = consts[i];
            c.lit = true;
        }
        define_value(I, cnames[i], c);
    }
    interp_define_builtin(I, "check_params", bi_check_params, NULL);
    interp_define_builtin(I, "check_grads", bi_check_grads, NULL);
    interp_define_builtin(I, "check_layers", bi_check_layers, NULL);
    interp_define_builtin(I, "check_training", bi_check_training, NULL);
    interp_define_builtin(I, "check_fn", bi_check_fn, NULL);
    interp_define_builtin(I, "check_number", bi_check_number, NULL);
    interp_define_builtin(I, "check_features", bi_check_features, NULL);
    interp_define_builtin(I, "check_images", bi_check_images, NULL);
    interp_define_builtin(I, "check_state", bi_check_state, NULL);
    interp_define_builtin(I, "check_size", bi_check_size, NULL);
    interp_define_builtin(I, "check_data_file", bi_check_data_file, NULL);
    interp_define_builtin(I, "check_tensor", bi_check_tensor, NULL);
    interp_define_builtin_flags(I, "check_arg", bi_check_arg, NULL, BF_EFFECT, NULL);
}
