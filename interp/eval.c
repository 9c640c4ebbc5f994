/* eval.c — the tree-walking evaluator over resolved nodes: expressions,
 * statements, calls, closures, operators (with an unboxed-scalar fast path
 * that computes exactly what the tensor kernels would), and modules. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#include "interp/help.h"
#include "interp/internal.h"
#include "tensor/ops.h"
#include "stage/check.h"
#include "stage/host_reads.h"
#include "stage/staged.h"
#include "stage/trace.h"
#include "util/buf.h"
#include "util/xalloc.h"


static int eval(Interp *I, Node *n, Env *env, Value *out);
static int eval_call(Interp *I, Node *n, Env *env, Value *out);
static int exec(Interp *I, Node *n, Env *env);
static int exec_stmts(Interp *I, NodeList *l, Env *env, Program *prog);
static int exec_block(Interp *I, Node *b, Env *env);
static int bind_pattern(Interp *I, Node *p, Value v, Env *env);
static int assign_to(Interp *I, Node *t, Value v, Env *env, Loc loc);
static inline __attribute__((always_inline)) int exec_stmts_body(Interp *I, NodeList *l, Env *env, Program *prog);

static inline Env *env_up(Env *e, int depth)
{
    while (depth-- > 0) e = e->parent;
    return e;
}

static inline bool is_undefined(Value v) { return v.kind == V_NIL && v.dtype == 1; }
static inline Value v_undefined(void) { Value v = v_nil(); v.dtype = 1; return v; }

/* Leaves (a bound name, an int literal) are evaluated inline by their
 * parents; everything else goes through eval(). */
static inline int eval_fast(Interp *I, Node *n, Env *env, Value *out)
{
    if (n->kind == N_NAME && n->op == 0) {
        /* while tracing, a name of an enclosing function may be outside the trace */
        if (n->depth && __builtin_expect(I->tracer != NULL || I->host_reads != NULL, 0)) return eval(I, n, env, out);
        Env *e = env;
        for (int d = n->depth; d > 0; d--) e = e->parent;
        Value v = e->slots[n->slot];
        if (!is_undefined(v)) {
            value_incref(v);
            *out = v;
            return 0;
        }
    } else if (n->kind == N_INT) {
        *out = v_int(n->ival);
        out->weak = true;
        return 0;
    } else if (n->kind == N_CALL) {
        return eval_call(I, n, env, out); /* one C frame less per call */
    }
    return eval(I, n, env, out);
}

static inline void slot_set_take(Value *slot, Value v)
{
    Value old = *slot;
    *slot = v;
    value_decref(old);
}

static int poll_interrupt(Interp *I, Loc loc)
{
    if (tfe_interrupted) {
        tfe_interrupted = 0;
        return raise_at(I, loc, "interrupted");
    }
    return 0;
}

/* --- operators ------------------------------------------------------------------ */

static const tfe_op binop_to_op[] = {
    [AOP_ADD] = OP_ADD, [AOP_SUB] = OP_SUB, [AOP_MUL] = OP_MUL, [AOP_DIV] = OP_DIV,
    [AOP_FLOORDIV] = OP_FLOORDIV, [AOP_MOD] = OP_MOD, [AOP_POW] = OP_POW,
    [AOP_MATMUL] = OP_MATMUL, [AOP_EQ] = OP_EQ, [AOP_NE] = OP_NE, [AOP_LT] = OP_LT,
    [AOP_LE] = OP_LE, [AOP_GT] = OP_GT, [AOP_GE] = OP_GE,
};

static inline int64_t wrap_int(int64_t v, tfe_dtype dt)
{
    return dt == TFE_INT32 ? (int64_t)(int32_t)(uint32_t)(uint64_t)v : v;
}

/* Scalar fast path for int32/int64/float32/float64 operands: the same dtype
 * rule and the same arithmetic as the kernels (float32 rounds every result).
 * Returns 1 when it does not apply (bool operands, pow, matmul, division of
 * ints by zero), so the caller takes the tensor path and its error text. */
static int scalar_binop_general(int op, Value a, Value b, Value *out);

static inline __attribute__((always_inline)) int scalar_binop(int op, Value a, Value b, Value *out)
{
    /* the common case first: two int64 scalars (loop counters, indices) */
    if (a.dtype == TFE_INT64 && b.dtype == TFE_INT64) {
        uint64_t x = (uint64_t)a.u.i, y = (uint64_t)b.u.i;
        bool weak = a.weak && b.weak;
        switch (op) {
        case AOP_ADD: *out = v_int((int64_t)(x + y)); out->weak = weak; return 0;
        case AOP_SUB: *out = v_int((int64_t)(x - y)); out->weak = weak; return 0;
        case AOP_MUL: *out = v_int((int64_t)(x * y)); out->weak = weak; return 0;
        case AOP_LT: *out = v_bool(a.u.i < b.u.i); return 0;
        case AOP_LE: *out = v_bool(a.u.i <= b.u.i); return 0;
        case AOP_GT: *out = v_bool(a.u.i > b.u.i); return 0;
        case AOP_GE: *out = v_bool(a.u.i >= b.u.i); return 0;
        case AOP_EQ: *out = v_bool(a.u.i == b.u.i); return 0;
        case AOP_NE: *out = v_bool(a.u.i != b.u.i); return 0;
        default: break;
        }
    }
    return scalar_binop_general(op, a, b, out);
}

static int scalar_binop_general(int op, Value a, Value b, Value *out)
{
    if (a.dtype == TFE_BOOL || b.dtype == TFE_BOOL) return 1;
    bool weak;
    tfe_dtype dt = dtype_promote((tfe_dtype)a.dtype, a.weak, (tfe_dtype)b.dtype, b.weak, &weak);
    bool fa = dtype_is_float((tfe_dtype)a.dtype), fb = dtype_is_float((tfe_dtype)b.dtype);
    if (op >= AOP_EQ && op <= AOP_GE) {
        bool r;
        if (dtype_is_float(dt)) {
            double x = fa ? a.u.f : (double)a.u.i, y = fb ? b.u.f : (double)b.u.i;
            if (dt == TFE_FLOAT32) { x = (float)x; y = (float)y; }
            switch (op) {
            case AOP_EQ: r = x == y; break; case AOP_NE: r = x != y; break;
            case AOP_LT: r = x < y; break;  case AOP_LE: r = x <= y; break;
            case AOP_GT: r = x > y; break;  default: r = x >= y; break;
            }
        } else {
            int64_t x = wrap_int(a.u.i, dt), y = wrap_int(b.u.i, dt);
            switch (op) {
            case AOP_EQ: r = x == y; break; case AOP_NE: r = x != y; break;
            case AOP_LT: r = x < y; break;  case AOP_LE: r = x <= y; break;
            case AOP_GT: r = x > y; break;  default: r = x >= y; break;
            }
        }
        *out = v_bool(r);
        return 0;
    }
    if (op == AOP_DIV && !dtype_is_float(dt)) dt = TFE_FLOAT32;
    if (dtype_is_float(dt)) {
        double x = fa ? a.u.f : (double)a.u.i, y = fb ? b.u.f : (double)b.u.i, r;
        if (dt == TFE_FLOAT32) {
            float xf = (float)x, yf = (float)y, rf;
            switch (op) {
            case AOP_ADD: rf = xf + yf; break;
            case AOP_SUB: rf = xf - yf; break;
            case AOP_MUL: rf = xf * yf; break;
            case AOP_DIV: rf = xf / yf; break;
            default: return 1;
            }
            r = rf;
        } else {
            switch (op) {
            case AOP_ADD: r = x + y; break;
            case AOP_SUB: r = x - y; break;
            case AOP_MUL: r = x * y; break;
            case AOP_DIV: r = x / y; break;
            default: return 1;
            }
        }
        *out = v_float(r, dt);
        out->weak = weak;
        return 0;
    }
    uint64_t x = (uint64_t)a.u.i, y = (uint64_t)b.u.i;
    int64_t r;
    switch (op) {
    case AOP_ADD: r = (int64_t)(x + y); break;
    case AOP_SUB: r = (int64_t)(x - y); break;
    case AOP_MUL: r = (int64_t)(x * y); break;
    case AOP_FLOORDIV: case AOP_MOD: {
        int64_t xi = wrap_int(a.u.i, dt), yi = wrap_int(b.u.i, dt);
        if (yi == 0 || (yi == -1 && xi == INT64_MIN)) return 1;
        int64_t q = xi / yi, m = xi % yi;
        if (m != 0 && ((m < 0) != (yi < 0))) { q -= 1; m += yi; }
        r = op == AOP_FLOORDIV ? q : m;
        break;
    }
    default: return 1;
    }
    *out = v_int(wrap_int(r, dt));
    out->dtype = (uint8_t)dt;
    out->weak = weak;
    return 0;
}

static bool is_numeric(Value v)
{
    return v.kind == V_SCALAR || v.kind == V_TENSOR ||
           (v.kind == V_OBJECT && ((Object *)v.u.o)->cls->to_tensor);
}

static int tensor_binop(Interp *I, tfe_op op, Value a, Value b, Loc loc, Value *out)
{
    /* a float literal meets the other operand's dtype (exact in a float64
     * op); it makes no graph node, so boxing it second keeps node order */
    tfe_tensor *ta, *tb;
    if (a.kind == V_SCALAR && a.lit) {
        tb = value_to_tensor(b);
        ta = value_to_tensor_for(a, tb ? tb->dtype : TFE_FLOAT32);
    } else {
        ta = value_to_tensor(a);
        tb = value_to_tensor_for(b, ta ? ta->dtype : TFE_FLOAT32);
    }
    tfe_tensor *r = (ta && tb) ? tfe_binary(op, ta, tb) : NULL;
    if (ta) tensor_decref(ta);
    if (tb) tensor_decref(tb);
    if (!r) return raise_msg_at(I, loc, tfe_error_msg());
    *out = value_from_tensor_take(r);
    return 0;
}

static Value concat_seqs(Value a, Value b)
{
    Seq *x = (Seq *)a.u.o, *y = (Seq *)b.u.o;
    Seq *s = seq_new(x->n + y->n);
    s->h.kind = (uint8_t)a.kind;
    for (int i = 0; i < x->n; i++) { value_incref(x->items[i]); seq_push_take(s, x->items[i]); }
    for (int i = 0; i < y->n; i++) { value_incref(y->items[i]); seq_push_take(s, y->items[i]); }
    return v_obj((ValueKind)a.kind, s);
}

/* An int count for "-" * n: an int number or 0-d int tensor (staged code
 * reads it at trace time, as a string index is read). */
static bool repeat_count(Value v, int64_t *k)
{
    if (v.kind == V_SCALAR && (v.dtype == TFE_INT64 || v.dtype == TFE_INT32)) { *k = v.u.i; return true; }
    if (v.kind == V_TENSOR && v.u.t->rank == 0 && (v.u.t->dtype == TFE_INT64 || v.u.t->dtype == TFE_INT32)) {
        *k = tensor_get_i64(v.u.t, 0);
        return true;
    }
    return false;
}

/* x in xs (Python's membership test; not in negates it): an item of a list
 * or tuple equal to x by ==, a substring of a string, a key of a record, an
 * int of a range; for a tensor, NumPy's (xs == x).any(), a bool tensor made
 * by the ops == and any, so staged code traces it as any(xs == x). */
static int contains_value(Interp *I, bool negate, Value x, Value xs, Loc loc, Value *out)
{
    bool hit = false;
    switch ((ValueKind)xs.kind) {
    case V_LIST: case V_TUPLE: {
        Seq *s = (Seq *)xs.u.o;
        for (int i = 0; i < s->n && !hit; i++) {
            int err = 0;
            I->cur_loc = loc;
            hit = value_equal(x, s->items[i], &err);
            if (I->has_error) return -1; /* (a staged trace that cannot read a tensor nested in it) */
            if (err) return raise_msg_at(I, loc, tfe_error_msg());
        }
        break;
    }
    case V_STR: {
        if (x.kind != V_STR)
            return raise_at(I, loc, "'in <string>' needs a string on the left, got %s", value_kind_name(x));
        Str *s = (Str *)xs.u.o, *sub = (Str *)x.u.o;
        if (sub->len == 0) { hit = true; break; }
        for (size_t i = 0; i + sub->len <= s->len && !hit; i++)
            hit = memcmp(s->s + i, sub->s, sub->len) == 0;
        break;
    }
    case V_RECORD: case V_MODULE:
        if (x.kind != V_STR)
            return raise_at(I, loc, "'in <record>' tests a key, a string; got %s", value_kind_name(x));
        hit = record_get((Record *)xs.u.o, ((Str *)x.u.o)->s, ((Str *)x.u.o)->len) != NULL;
        break;
    case V_RANGE: {
        Range *r = (Range *)xs.u.o;
        int64_t k;
        if (x.kind == V_SCALAR && (x.dtype == TFE_INT64 || x.dtype == TFE_INT32)) {
            k = x.u.i;
            hit = r->step > 0 ? (k >= r->start && k < r->stop) : (k <= r->start && k > r->stop);
            uint64_t d = r->step > 0 ? (uint64_t)k - (uint64_t)r->start : (uint64_t)r->start - (uint64_t)k;
            hit = hit && d % (r->step > 0 ? (uint64_t)r->step : -(uint64_t)r->step) == 0;
        } else {
            /* a float or a tensor: compare with each, as a list of the ints */
            uint64_t n = range_count(r);
            for (uint64_t i = 0; i < n && !hit; i++) {
                int err = 0;
                I->cur_loc = loc;
                hit = value_equal(x, v_int(r->start + (int64_t)i * r->step), &err);
                if (I->has_error) return -1;
                if (err) return raise_msg_at(I, loc, tfe_error_msg());
            }
        }
        break;
    }
    case V_TENSOR: case V_OBJECT: {
        if (xs.kind == V_OBJECT && !((Object *)xs.u.o)->cls->to_tensor) goto unsupported;
        if (!is_numeric(x))
            return raise_at(I, loc, "'in <tensor>' needs a number or tensor on the left, got %s", value_kind_name(x));
        Value eq;
        if (tensor_binop(I, OP_EQ, xs, x, loc, &eq)) return -1;
        tfe_tensor *e = value_to_tensor(eq);
        tfe_attrs at;
        tfe_attrs_init(&at);
        tfe_tensor *r = e ? tfe_call1(OP_ANY, 1, &e, &at) : NULL;
        if (e) tensor_decref(e);
        value_decref(eq);
        if (r && negate) {
            tfe_tensor *nr = tfe_unary(OP_LOGICAL_NOT, r);
            tensor_decref(r);
            r = nr;
        }
        if (!r) return raise_msg_at(I, loc, tfe_error_msg());
        *out = value_from_tensor_take(r);
        return 0;
    }
    default:
    unsupported:
        return raise_at(I, loc, "'in' needs a list, tuple, string, record, range or tensor on the right, got %s",
                        value_kind_name(xs));
    }
    *out = v_bool(hit != negate);
    return 0;
}

int binop_values(Interp *I, int op, Value a, Value b, Loc loc, Value *out)
{
    if (op == AOP_IN || op == AOP_NOTIN) return contains_value(I, op == AOP_NOTIN, a, b, loc, out);
    if (a.kind == V_SCALAR && b.kind == V_SCALAR && scalar_binop(op, a, b, out) == 0) return 0;
    if (is_numeric(a) && is_numeric(b)) {
        if (tensor_binop(I, binop_to_op[op], a, b, loc, out)) return -1;
        /* traced numbers: eager code would take the fast path above and
         * hold a number, which a staged call then writes back (trace.h) */
        Value x, y, r;
        if (__builtin_expect(I->tracer != NULL, 0)) {
            if (trace_eager_number(a, &x) && trace_eager_number(b, &y) && scalar_binop(op, x, y, &r) == 0)
                trace_mark_number(*out);
            /* (one is an if's or loop's result, a number one way: so is
             * this where every operand is one on the way the call went) */
            else if (trace_kind_number(a, &x) && trace_kind_number(b, &y) && scalar_binop(op, x, y, &r) == 0)
                trace_note_op_kind(*out, a, b);
        }
        return 0;
    }
    if (op == AOP_EQ || op == AOP_NE) {
        int err = 0;
        I->cur_loc = loc;
        bool eq = value_equal(a, b, &err);
        /* (a tensor nested in a or b whose value a staged trace cannot read,
         * one from a variable: it raised, and eq is this call's answer) */
        if (I->has_error) return -1;
        if (err) return raise_msg_at(I, loc, tfe_error_msg());
        *out = v_bool(op == AOP_EQ ? eq : !eq);
        return 0;
    }
    if (op == AOP_ADD && a.kind == V_STR && b.kind == V_STR) {
        Str *x = (Str *)a.u.o, *y = (Str *)b.u.o;
        Str *s = str_new(NULL, 0);
        free(s);
        s = xmalloc(sizeof(Str) + x->len + y->len + 1);
        s->h.refcount = 1;
        s->h.kind = V_STR;
        s->len = x->len + y->len;
        memcpy(s->s, x->s, x->len);
        memcpy(s->s + x->len, y->s, y->len);
        s->s[s->len] = 0;
        s->hash = 0;
        *out = v_obj(V_STR, s);
        return 0;
    }
    if (op == AOP_ADD && a.kind == b.kind && (a.kind == V_TUPLE || a.kind == V_LIST)) {
        *out = concat_seqs(a, b);
        return 0;
    }
    int64_t k = 0;
    bool rep = false;
    if (op == AOP_MUL && (a.kind == V_STR || b.kind == V_STR)) {
        I->cur_loc = loc; /* (a staged trace that cannot read the count says so here) */
        rep = (a.kind == V_STR && repeat_count(b, &k)) || (b.kind == V_STR && repeat_count(a, &k));
        if (I->has_error) return -1; /* it refused: not the count of the call that traced */
    }
    if (rep) {
        /* Python's "-" * 40 */
        Str *x = (Str *)(a.kind == V_STR ? a : b).u.o;
        if (k < 0) k = 0;
        if (x->len && (uint64_t)k > (1u << 30) / x->len) return raise_at(I, loc, "*: string too long");
        char *buf = xmalloc(x->len * (size_t)k + 1);
        for (int64_t i = 0; i < k; i++) memcpy(buf + (size_t)i * x->len, x->s, x->len);
        *out = v_str(buf, x->len * (size_t)k);
        free(buf);
        return 0;
    }
    const char *hint = "";
    if (op == AOP_MOD && a.kind == V_STR)
        hint = " (tfe has no %-formatting: write f\"{x:.2f}\" or format(\"{:.2f}\", x))";
    else if (op == AOP_ADD && (a.kind == V_STR) != (b.kind == V_STR))
        hint = " (convert with str(x), or write an f-string f\"...{x}\")";
    return raise_at(I, loc, "unsupported operand types for %s: %s and %s%s", op_symbol(op),
                    value_kind_name(a), value_kind_name(b), hint);
}

static int unop_value(Interp *I, int op, Value a, Loc loc, Value *out)
{
    if (op == AOP_POS && is_numeric(a)) { value_incref(a); *out = a; return 0; }
    if (a.kind == V_SCALAR && a.dtype != TFE_BOOL) {
        *out = a;
        if (dtype_is_float((tfe_dtype)a.dtype)) out->u.f = -a.u.f;
        else out->u.i = wrap_int((int64_t)(0 - (uint64_t)a.u.i), (tfe_dtype)a.dtype);
        return 0;
    }
    if (is_numeric(a)) {
        tfe_tensor *t = value_to_tensor(a);
        tfe_tensor *r = tfe_unary(OP_NEG, t);
        tensor_decref(t);
        if (!r) return raise_msg_at(I, loc, tfe_error_msg());
        *out = value_from_tensor_take(r);
        Value x;
        if (__builtin_expect(I->tracer != NULL, 0)) {
            if (trace_eager_number(a, &x)) trace_mark_number(*out);
            else if (trace_kind_number(a, &x)) trace_note_op_kind(*out, a, v_nil());
        }
        return 0;
    }
    return raise_at(I, loc, "unsupported operand type for unary %s: %s", op == AOP_NEG ? "-" : "+",
                    value_kind_name(a));
}

int value_truth_op(Interp *I, Value v, Loc loc, bool *out, const char *word)
{
    if (v.kind == V_TENSOR && tensor_numel(v.u.t) != 1) {
        char sh[200];
        return raise_at(I, loc, "'%s' takes bools (or one-element tensors), got a tensor of shape %s: for masks "
                                "element by element write logical_%s(%s) (NumPy's %s); for one bool, any() or all()",
                        word, shape_str(v.u.t->rank, v.u.t->shape, sh), word,
                        !strcmp(word, "not") ? "x" : "a, b",
                        !strcmp(word, "and") ? "a & b" : !strcmp(word, "or") ? "a | b" : "~x");
    }
    return value_truth(I, v, loc, out);
}

/* A condition must be a bool or a one-element tensor. */
int value_truth(Interp *I, Value v, Loc loc, bool *out)
{
    if (__builtin_expect(v.kind == V_SCALAR, 1)) {
        *out = dtype_is_float((tfe_dtype)v.dtype) ? scalar_f(v) != 0 : v.u.i != 0;
        return 0;
    }
    if (v.kind == V_TENSOR && tensor_numel(v.u.t) == 1) {
        *out = tensor_get_f64(v.u.t, 0) != 0;
        if (__builtin_expect(I->tracer != NULL, 0) && I->has_error) return -1;
        return 0;
    }
    if (v.kind == V_TENSOR) {
        char sh[200];
        return raise_at(I, loc, "condition must be a bool or a one-element tensor, got a tensor of shape %s (use any() or all())",
                        shape_str(v.u.t->rank, v.u.t->shape, sh));
    }
    if (v.kind == V_NIL) /* "got a nil" read badly; Python's truthy nil is a test in tfe */
        return raise_at(I, loc, "condition must be a bool or a one-element tensor, got nil "
                                "(test for it: x == nil, x != nil)");
    return raise_at(I, loc, "condition must be a bool or a one-element tensor, got %s %s",
                    strchr("aeiou", value_kind_name(v)[0]) ? "an" : "a", value_kind_name(v));
}

/* --- calls ------------------------------------------------------------------------ */

static int push_frame(Interp *I, const char *name, Loc loc)
{
    if (I->nframes >= TFE_MAX_CALL_DEPTH)
        return raise_at(I, loc, "maximum recursion depth (%d) exceeded", TFE_MAX_CALL_DEPTH);
    if (I->nframes == I->cap_frames) {
        I->cap_frames = I->cap_frames ? I->cap_frames * 2 : 64;
        I->frames = xrealloc(I->frames, sizeof(Frame) * (size_t)I->cap_frames);
    }
    I->frames[I->nframes].fname = name;
    I->frames[I->nframes].call_loc = loc;
    I->nframes++;
    return 0;
}

/* Mark v, a parameter's default value, as made for the call (stamp
 * TRACE_ID_FRESH), or unmark it (0), when it is a list or record that only
 * the parameter holds. */
static void fresh_default(Value v, uint32_t stamp)
{
    if (v.kind == V_LIST && (((Seq *)v.u.o)->h.refcount == 1 || !stamp)) {
        Seq *q = (Seq *)v.u.o;
        if (stamp || q->trace_id == TRACE_ID_FRESH) q->trace_id = stamp;
    } else if (v.kind == V_RECORD && (((Record *)v.u.o)->h.refcount == 1 || !stamp)) {
        Record *r = (Record *)v.u.o;
        if (stamp || r->trace_id == TRACE_ID_FRESH) r->trace_id = stamp;
    }
}

/* Run a closure's body in its fresh Env e (arguments already in their slots;
 * set[i] false marks a parameter that takes its default; set NULL: all given). */
static inline __attribute__((always_inline)) int run_closure(Interp *I, Closure *c, Env *e, const bool *set, Loc call_loc, Value *out)
{
    Node *fn = c->fn;
    FnInfo *info = fn->info;
    if (push_frame(I, c->name, call_loc)) return -1;
    Program *saved = I->cur_prog;
    I->cur_prog = c->prog;
    int rc = 0;
    for (int i = 0; set && i < info->nparams && !rc; i++) {
        if (set[i]) continue;
        if (!info->defaults[i]) {
            I->nframes--;
            rc = raise_at(I, call_loc, "%s() missing argument '%s'", c->name, info->param_names[i]);
            I->nframes++;
            break;
        }
        Value d;
        if (eval(I, info->defaults[i], e, &d)) { rc = -1; break; }
        e->slots[i] = value_unlit(d);
    }
    if (!rc) {
        if (__builtin_expect(I->tracer != NULL, 0)) {
            /* inside a trace: recursion on traced values is checked, and a
             * staged function is inlined (stage_call runs its body) */
            rc = trace_enter_fn(I, fn, c->name, call_loc);
            if (!rc) rc = c->stage_forced ? stage_call(I, c, e, call_loc, out) : interp_run_body(I, c, e, out);
            trace_leave_fn(I, fn);
        } else if (__builtin_expect(c->stage_forced, 0)) {
            /* a list or record a default made for this call, which nothing
             * else holds, is the call's own: its trace may mutate it as one
             * it made (TRACE_ID_FRESH), and only for this call */
            for (int i = 0; set && i < info->nparams; i++)
                if (!set[i]) fresh_default(e->slots[i], TRACE_ID_FRESH);
            rc = stage_call(I, c, e, call_loc, out);
            for (int i = 0; set && i < info->nparams; i++)
                if (!set[i]) fresh_default(e->slots[i], 0);
        } else if (fn->is_lambda) {
            rc = eval(I, fn->a, e, out);
        } else {
            int x = exec_stmts_body(I, &fn->a->list, e, c->prog);
            if (x == XS_ERR) rc = -1;
            else if (x == XS_RETURN) { *out = I->retval; I->retval = v_nil(); }
            else *out = v_nil();
        }
    }
    I->cur_prog = saved;
    I->nframes--;
    return rc;
}

int interp_run_body(Interp *I, Closure *c, Env *e, Value *out)
{
    Node *fn = c->fn;
    if (fn->is_lambda) return eval(I, fn->a, e, out);
    Program *saved = I->cur_prog;
    I->cur_prog = c->prog;
    int x = exec_stmts(I, &fn->a->list, e, c->prog);
    I->cur_prog = saved;
    if (x == XS_ERR) return -1;
    if (x == XS_RETURN) { *out = I->retval; I->retval = v_nil(); }
    else *out = v_nil();
    return 0;
}

int interp_exec_branch(Interp *I, Node *n, Env *env)
{
    return n->kind == N_IF ? exec(I, n, env) : exec_block(I, n, env);
}

int interp_eval_expr(Interp *I, Node *n, Env *env, Value *out) { return eval(I, n, env, out); }

static int call_closure(Interp *I, Closure *c, int argc, const Value *argv, int nkw,
                        Str *const *kwnames, const Value *kwvals, Value *out)
{
    FnInfo *info = c->fn->info;
    const char *name = c->name;
    if (argc > info->nparams)
        return interp_raise(I, "%s() takes %d argument%s but %d %s given", name, info->nparams,
                            info->nparams == 1 ? "" : "s", argc, argc == 1 ? "was" : "were");
    Env *e = env_new(I, info->nslots, c->env);
    bool setbuf[64];
    bool *set = info->nparams <= 64 ? setbuf : xcalloc((size_t)info->nparams, 1);
    memset(set, 0, (size_t)(info->nparams < 64 ? info->nparams : 64));
    int rc = 0;
    for (int i = 0; i < argc; i++) {
        value_incref(argv[i]);
        e->slots[i] = value_unlit(argv[i]);
        set[i] = true;
    }
    for (int k = 0; k < nkw && !rc; k++) {
        int j = -1;
        for (int i = 0; i < info->nparams; i++)
            if (strcmp(info->param_names[i], kwnames[k]->s) == 0) { j = i; break; }
        if (j < 0) {
            char hint[64];
            rc = interp_raise(I, "%s() got an unexpected keyword argument '%s'%s", name, kwnames[k]->s,
                              kwarg_hint(kwnames[k]->s, (const char *const *)info->param_names, info->nparams,
                                         hint, sizeof hint));
        } else if (set[j])
            rc = interp_raise(I, "%s() got multiple values for argument '%s'", name, kwnames[k]->s);
        else {
            value_incref(kwvals[k]);
            e->slots[j] = value_unlit(kwvals[k]);
            set[j] = true;
        }
    }
    if (!rc) rc = run_closure(I, c, e, set, I->cur_loc, out);
    if (set != setbuf) free(set);
    env_decref(e);
    return rc;
}

/* A @host function's result is rounded to float32 if it is a float literal,
 * as a graph's host node gives it (a tensor). */
static inline void host_result(const Closure *c, Value *out)
{
    if (__builtin_expect(out->lit, 0) && (((FnInfo *)c->fn->info)->is_host || c->host_forced))
        *out = value_unlit(*out);
}

int call_value(Interp *I, Value f, int argc, const Value *argv, int nkw,
               Str *const *kwnames, const Value *kwvals, Value *out)
{
    if (f.kind == V_FN) {
        Closure *c = (Closure *)f.u.o;
        if (__builtin_expect(I->tracer != NULL, 0) && (((FnInfo *)c->fn->info)->is_host || c->host_forced) &&
            trace_recording(I))
            return trace_host_call(I, f, argc, argv, nkw, kwnames, kwvals, out);
        /* (a staged call's run again: the calls its trace made, stage/trace.h) */
        if (__builtin_expect(I->effect_replay != NULL, 0) && (((FnInfo *)c->fn->info)->is_host || c->host_forced)) {
            int r = effect_replay_call(I, f, out);
            if (r) return r < 0 ? -1 : 0;
        }
        if (__builtin_expect(I->check_recording, 0) && (((FnInfo *)c->fn->info)->is_host || c->host_forced))
            return check_host_eager(I, f, argc, argv, nkw, kwnames, kwvals, out);
        int rc = call_closure(I, c, argc, argv, nkw, kwnames, kwvals, out);
        if (!rc) host_result(c, out);
        return rc;
    }
    if (f.kind == V_BUILTIN) {
        Builtin *b = (Builtin *)f.u.o;
        /* the one place the registration flags (BF_*) meet the tracer: a
         * builtin staged code cannot call refuses (under --stage-all the
         * function then goes on eagerly: trace_fail returns 0), an effect is
         * recorded as a host call */
        if (__builtin_expect(I->tracer != NULL, 0) && (b->effect || b->unstageable) && trace_recording(I)) {
            if (b->unstageable) {
                if (trace_fail(I, I->cur_loc, "%s", b->unstageable)) return -1;
            } else {
                return trace_host_call(I, f, argc, argv, nkw, kwnames, kwvals, out);
            }
        }
        if (__builtin_expect(I->effect_replay != NULL, 0) && b->effect) {
            int r = effect_replay_call(I, f, out);
            if (r) return r < 0 ? -1 : 0;
        }
        if (__builtin_expect(I->check_recording, 0) && b->effect)
            return check_host_eager(I, f, argc, argv, nkw, kwnames, kwvals, out);
        Loc saved = I->cur_loc;
        int rc;
        if (b->self.kind != V_NIL) {
            Value buf[16];
            Value *args = argc + 1 <= 16 ? buf : xmalloc(sizeof(Value) * (size_t)(argc + 1));
            args[0] = b->self;
            memcpy(args + 1, argv, sizeof(Value) * (size_t)argc);
            rc = b->fn(I, argc + 1, args, nkw, kwnames, kwvals, out, b->data);
            if (args != buf) free(args);
        } else {
            rc = b->fn(I, argc, argv, nkw, kwnames, kwvals, out, b->data);
        }
        I->cur_loc = saved;
        if (__builtin_expect(I->tracer != NULL, 0) && I->has_error && !rc) { /* a trace failure */
            value_decref(*out);
            *out = v_nil();
            rc = -1;
        }
        if (rc && !I->has_error) interp_raise(I, "%s() failed", b->name);
        return rc ? -1 : 0;
    }
    if (f.kind == V_RECORD) {
        /* a record with a `call` field is callable: model(x) is model.call(x)
         * (the stdlib's layers and models); one level, so a record whose call
         * is a record is not called round and round */
        Value *c = record_get((Record *)f.u.o, "call", 4);
        if (c && (c->kind == V_FN || c->kind == V_BUILTIN)) {
            Value cv = *c; /* held: the call may replace the field */
            value_incref(cv);
            int rc = call_value(I, cv, argc, argv, nkw, kwnames, kwvals, out);
            value_decref(cv);
            return rc;
        }
        /* a record of one function (data.standardize's {mean, std,
         * transform}): say which field to call */
        Record *r = (Record *)f.u.o;
        const char *only = NULL;
        int nfn = 0;
        for (int i = 0; i < r->n; i++)
            if (r->vals[i].kind == V_FN || r->vals[i].kind == V_BUILTIN) { nfn++; only = r->keys[i]->s; }
        if (!c && nfn == 1)
            return interp_raise(I, "cannot call a record without a 'call' field (a record is callable when its 'call' "
                                   "field is a function; this one's one function is its field '%s', called as .%s(...))",
                                only, only);
        return interp_raise(I, "cannot call a record %s (a record is callable when its 'call' field is a function)",
                            c ? "whose 'call' field is not a function" : "without a 'call' field");
    }
    if (f.kind == V_STR) { /* NumPy's np.float32(x): tfe's dtype names are strings */
        static const char *const dts[] = {"bool", "int32", "int64", "float32", "float64", "float16", "bfloat16"};
        const char *sv = ((Str *)f.u.o)->s;
        for (size_t i = 0; i < sizeof dts / sizeof *dts; i++)
            if (!strcmp(sv, dts[i]))
                return interp_raise(I, "cannot call the dtype name %s (a string): write cast(x, %s) or "
                                       "x.astype(%s)%s", sv, sv, sv,
                                    !strcmp(sv, "bool") ? ", or x != 0" : "");
    }
    return interp_raise(I, "cannot call a value of type %s", value_kind_name(f));
}

/* f(a, b) of a closure with exactly that many parameters: arguments are
 * evaluated straight into the callee's Env (the common case, kept lean). */
static int call_direct(Interp *I, Node *n, Env *env, Closure *c, Value *out)
{
    FnInfo *info = c->fn->info;
    c->h.refcount++;
    /* A function that makes no closures cannot let its Env escape, so the Env
     * lives on the C stack (the closure, held here, keeps the parent alive). */
    Env stack_env, *e;
    if (!info->makes_closures && info->nslots <= 8) {
        e = &stack_env;
        e->h.refcount = 1;
        e->h.kind = OBJ_ENV;
        e->parent = c->env;
        e->nslots = info->nslots;
        e->slots = e->inline_slots;
        for (int i = 0; i < info->nslots; i++) e->slots[i] = v_nil();
    } else {
        e = env_new(I, info->nslots, c->env);
    }
    int rc = 0;
    for (int i = 0; i < n->list.n; i++) {
        if (eval_fast(I, n->list.items[i], env, &e->slots[i])) { rc = -1; break; }
        if (__builtin_expect(e->slots[i].lit, 0)) e->slots[i] = value_unlit(e->slots[i]);
    }
    if (!rc) {
        I->cur_loc = n->a->loc;
        if (tfe_interrupted && poll_interrupt(I, I->cur_loc)) rc = -1;
        else rc = run_closure(I, c, e, NULL, n->a->loc, out);
        if (!rc) host_result(c, out);
    }
    if (e == &stack_env) {
        for (int i = 0; i < e->nslots; i++) value_decref(e->slots[i]);
    } else {
        env_decref(e);
    }
    if (--c->h.refcount == 0) { /* the call outlived every other reference */
        c->h.refcount = 1;
        value_decref_slow(v_obj(V_FN, c));
    }
    return rc;
}

/* x.shape() or x.size() (PyTorch's size() is the shape): the properties are
 * not methods; says so instead of "cannot call a value of type tuple". */
static int property_call_hint(Interp *I, const char *name, Value f)
{
    static const struct { const char *name; uint8_t kind; const char *hint; } props[] = {
        {"shape", V_TUPLE, "x.shape is a tuple, not a method: write x.shape"},
        {"size", V_SCALAR, "x.size is the number of elements (NumPy's), not a method: write x.size, or x.shape "
                           "for PyTorch's x.size()"},
        {"ndim", V_SCALAR, "x.ndim is a number, not a method: write x.ndim"},
        {"dtype", V_STR, "x.dtype is a string, not a method: write x.dtype"},
        {"device", V_STR, "x.device is a string, not a method: write x.device"},
    };
    for (size_t i = 0; i < sizeof props / sizeof *props; i++)
        if (!strcmp(props[i].name, name) && f.kind == props[i].kind) return interp_raise(I, "%s", props[i].hint);
    if (!strcmp(name, "T") && (f.kind == V_TENSOR || f.kind == V_SCALAR))
        return interp_raise(I, "x.T is the transpose, not a method: write x.T");
    return 0;
}

/* t.gradient(loss, [w, b]), TensorFlow's form: a bracket literal written as
 * a tape's sources is the list of its elements, not the stacked tensor [...]
 * would make (variables or tensors of other shapes cannot stack, and a
 * stacked tensor is no source the tape watched). The user's intent is clear;
 * the result is a list, as TensorFlow's. */
static bool tape_sources_arg(Value f, Node *arg)
{
    if (arg->kind != N_ARRAY || f.kind != V_BUILTIN) return false;
    const Builtin *b = (const Builtin *)f.u.o;
    return b->self.kind == V_OBJECT && !strcmp(b->name, "gradient");
}

static int eval_list_of(Interp *I, Node *arr, Env *env, Value *out)
{
    Seq *s = seq_new(arr->list.n);
    s->h.kind = V_LIST;
    Value res = v_obj(V_LIST, s);
    for (int i = 0; i < arr->list.n; i++) {
        Value x;
        if (eval(I, arr->list.items[i], env, &x)) { value_decref(res); return -1; }
        seq_push_take(s, x);
    }
    *out = res;
    return 0;
}

/* t.watch(name) while a trace records, of a name that holds a number (a
 * number itself, or a traced tensor that stands for one: trace.h): boxed
 * as eagerly, into a tensor of its own bound to that name, which a later
 * result or write-back keeps a tensor (trace_unbox_numbers). For a binding
 * outside the staged function (a global, an enclosing function's) eager
 * code boxes that binding itself: the names of the body that read it
 * before hold the number still, and it is a tensor after the call (and at
 * the next one), so the box is written to it as an assignment would be.
 * In a branch or loop body traced symbolically that would happen only on
 * the calls that run it, which a graph's write-back cannot tell: the
 * attempt fails, and the if or loop runs at trace time (staging.md
 * section 7), as eagerly. */
static __attribute__((noinline)) int box_watched_traced(Interp *I, Node *a, Env *env, Value *arg)
{
    bool traced = arg->kind == V_TENSOR && trace_watch_unboxed(arg->u.t);
    if (!traced && arg->kind != V_SCALAR) return 0;
    Env *e = env_up(env, a->depth);
    bool outside = e->trace_id != I->trace_id && trace_recording(I);
    I->cur_loc = a->loc;
    if (outside && I->tracer->symbolic &&
        trace_fail(I, a->loc,
                   "watch: '%s', a number bound outside the staged function, is watched inside a staged "
                   "conditional or loop, so eager code makes that binding a tensor only on the calls that run "
                   "it, which a graph cannot tell; watch it before the if or loop",
                   a->str))
        return -1;
    tfe_tensor *box = traced ? trace_watch_box(I->tracer, arg->u.t, false) : value_to_tensor(*arg);
    if (!box) return interp_raise_tensor_error(I);
    if (!traced && trace_recording(I)) trace_box_constant(I->tracer, box);
    Value bv = v_tensor_take(box);
    value_incref(bv);
    if (outside) {
        if (trace_write_outside(I, e, a->slot, a->str, bv)) {
            value_decref(bv);
            return -1;
        }
    } else {
        slot_set_take(&e->slots[a->slot], bv);
    }
    value_decref(*arg);
    *arg = bv;
    return 0;
}

static int eval_call(Interp *I, Node *n, Env *env, Value *out)
{
    if (n->a->kind == N_NAME && n->list2.n == 0 && !I->tracer && !I->check_recording && !I->effect_replay) {
        Value fv = n->a->op == 2 ? I->builtin_vals[n->a->slot] : env_up(env, n->a->depth)->slots[n->a->slot];
        if (fv.kind == V_FN && ((FnInfo *)((Closure *)fv.u.o)->fn->info)->nparams == n->list.n)
            return call_direct(I, n, env, (Closure *)fv.u.o, out);
    }
    Value f;
    if (eval(I, n->a, env, &f)) return -1;
    int argc = n->list.n, nkw = n->list2.n;
    Value buf[8];
    Value *argv = argc + nkw <= 8 ? buf : xmalloc(sizeof(Value) * (size_t)(argc + nkw));
    Value *kwvals = argv + argc;
    Str *kwbuf[8];
    Str **kwnames = nkw <= 8 ? kwbuf : xmalloc(sizeof(Str *) * (size_t)nkw);
    int done = 0, kdone = 0, rc = 0;
    for (; done < argc; done++) {
        Node *a = n->list.items[done];
        if (done == 1 && tape_sources_arg(f, a) ? eval_list_of(I, a, env, &argv[done])
                                                : eval(I, a, env, &argv[done])) { rc = -1; goto out; }
    }
    for (; kdone < nkw; kdone++) {
        Node *kw = n->list2.items[kdone];
        if (!strcmp(kw->str, "xs") && tape_sources_arg(f, kw->a) ? eval_list_of(I, kw->a, env, &kwvals[kdone])
                                                                 : eval(I, kw->a, env, &kwvals[kdone])) {
            rc = -1;
            goto out;
        }
        kwnames[kdone] = str_new(kw->str, strlen(kw->str));
    }
    if (f.kind == V_BUILTIN && ((Builtin *)f.u.o)->box_names) {
        for (int i = 0; i < argc; i++) {
            Node *a = n->list.items[i];
            if (a->kind != N_NAME || a->op == 2) continue;
            if (__builtin_expect(I->tracer != NULL, 0)) {
                if (box_watched_traced(I, a, env, &argv[i])) { rc = -1; goto out; }
                continue;
            }
            if (argv[i].kind != V_SCALAR) continue;
            Value boxed = v_tensor_take(value_to_tensor(argv[i]));
            value_incref(boxed);
            slot_set_take(&env_up(env, a->depth)->slots[a->slot], boxed);
            argv[i] = boxed;
        }
    }
    I->cur_loc = n->a->kind == N_FIELD ? n->a->opl : n->a->loc;
    if (tfe_interrupted && poll_interrupt(I, I->cur_loc)) { rc = -1; goto out; }
    if (n->a->kind == N_FIELD && f.kind != V_FN && f.kind != V_BUILTIN && f.kind != V_RECORD &&
        property_call_hint(I, n->a->str, f)) { rc = -1; goto out; }
    rc = call_value(I, f, argc, argv, nkw, kwnames, kwvals, out);
out:
    for (int i = 0; i < done; i++) value_decref(argv[i]);
    for (int i = 0; i < kdone; i++) {
        value_decref(kwvals[i]);
        value_decref(v_obj(V_STR, kwnames[i]));
    }
    if (argv != buf) free(argv);
    if (kwnames != kwbuf) free(kwnames);
    value_decref(f);
    return rc;
}

/* --- indexing and fields ---------------------------------------------------------- */

static int eval_index_items(Interp *I, Node *n, Env *env, IndexItem *items)
{
    for (int i = 0; i < n->list.n; i++) {
        Node *it = n->list.items[i];
        IndexItem *x = &items[i];
        x->v = x->start = x->stop = x->step = v_nil();
        if (it->kind == N_ELLIPSIS) { x->kind = IX_ELLIPSIS; continue; }
        if (it->kind == N_SLICE) {
            x->kind = IX_SLICE;
            if (it->a && eval(I, it->a, env, &x->start)) return -1;
            if (it->b && eval(I, it->b, env, &x->stop)) return -1;
            if (it->c && eval(I, it->c, env, &x->step)) return -1;
            continue;
        }
        x->kind = IX_VALUE;
        if (eval(I, it, env, &x->v)) return -1;
    }
    return 0;
}

static void free_index_items(IndexItem *items, int n)
{
    for (int i = 0; i < n; i++) {
        value_decref(items[i].v);
        value_decref(items[i].start);
        value_decref(items[i].stop);
        value_decref(items[i].step);
    }
}

static int int_of(Interp *I, Value v, Loc loc, const char *what, int64_t *out)
{
    if (v.kind == V_SCALAR && dtype_is_int((tfe_dtype)v.dtype)) { *out = v.u.i; return 0; }
    if (v.kind == V_TENSOR && v.u.t->rank == 0 && dtype_is_int(v.u.t->dtype)) {
        I->cur_loc = loc;
        I->indexing = true;
        *out = tensor_get_i64(v.u.t, 0);
        I->indexing = false;
        return I->has_error ? -1 : 0; /* (a staged trace refused to read it) */
    }
    return raise_at(I, loc, "%s must be an int, got %s", what, value_kind_name(v));
}

/* Python slice bounds over a sequence of length len. */
static int seq_slice_bounds(Interp *I, IndexItem *x, int64_t len, Loc loc, int64_t *start, int64_t *stop, int64_t *step)
{
    *step = 1;
    if (x->step.kind != V_NIL && int_of(I, x->step, loc, "slice step", step)) return -1;
    if (*step == 0) return raise_at(I, loc, "slice step cannot be zero");
    int64_t lo = *step > 0 ? 0 : -1, hi = *step > 0 ? len : len - 1;
    *start = *step > 0 ? lo : hi;
    *stop = *step > 0 ? hi : lo;
    if (x->start.kind != V_NIL) {
        if (int_of(I, x->start, loc, "slice start", start)) return -1;
        if (*start < 0) *start += len;
        if (*start < lo) *start = lo;
        if (*start > hi) *start = hi;
    }
    if (x->stop.kind != V_NIL) {
        if (int_of(I, x->stop, loc, "slice stop", stop)) return -1;
        if (*stop < 0) *stop += len;
        if (*stop < lo) *stop = lo;
        if (*stop > hi) *stop = hi;
    }
    return 0;
}

static int index_seq(Interp *I, Value base, IndexItem *items, int n, Loc loc, Value *out)
{
    const char *kind = base.kind == V_STR ? "string" : value_kind_name(base);
    if (n != 1 || items[0].kind == IX_ELLIPSIS)
        return raise_at(I, loc, "%s index must be one int or slice", kind);
    int64_t len = base.kind == V_STR ? (int64_t)((Str *)base.u.o)->len : ((Seq *)base.u.o)->n;
    if (items[0].kind == IX_SLICE) {
        int64_t a = 0, b = 0, s = 1;
        if (seq_slice_bounds(I, &items[0], len, loc, &a, &b, &s)) return -1;
        if (base.kind == V_STR) {
            Str *src = (Str *)base.u.o;
            char *buf = xmalloc((size_t)len + 1);
            size_t k = 0;
            for (int64_t i = a; s > 0 ? i < b : i > b; i += s) buf[k++] = src->s[i];
            *out = v_str(buf, k);
            free(buf);
            return 0;
        }
        Seq *src = (Seq *)base.u.o;
        Seq *r = seq_new(0);
        r->h.kind = (uint8_t)base.kind;
        for (int64_t i = a; s > 0 ? i < b : i > b; i += s) {
            value_incref(src->items[i]);
            seq_push_take(r, src->items[i]);
        }
        *out = v_obj((ValueKind)base.kind, r);
        return 0;
    }
    int64_t i = 0;
    if (int_of(I, items[0].v, loc, "index", &i)) return -1;
    int64_t j = i < 0 ? i + len : i;
    if (j < 0 || j >= len)
        return raise_at(I, loc, "%s index %lld is out of range (length %lld)", kind, (long long)i, (long long)len);
    if (base.kind == V_STR) *out = v_str(((Str *)base.u.o)->s + j, 1);
    else { *out = ((Seq *)base.u.o)->items[j]; value_incref(*out); }
    return 0;
}

static int index_value(Interp *I, Value base, IndexItem *items, int n, Loc loc, Value *out)
{
    switch ((ValueKind)base.kind) {
    case V_SCALAR: case V_TENSOR: {
        Loc saved = I->cur_loc;
        I->cur_loc = loc;
        int rc = tensor_index(I, base, n, items, out);
        I->cur_loc = saved;
        return rc;
    }
    case V_TUPLE: case V_LIST: case V_STR:
        return index_seq(I, base, items, n, loc, out);
    case V_RECORD: case V_MODULE: {
        if (n != 1 || items[0].kind != IX_VALUE || items[0].v.kind != V_STR)
            return raise_at(I, loc, "record index must be a string");
        Str *k = (Str *)items[0].v.u.o;
        Value *v = record_get((Record *)base.u.o, k->s, k->len);
        if (!v) return raise_at(I, loc, "record has no field '%s'", k->s);
        value_incref(*v);
        *out = *v;
        return 0;
    }
    case V_OBJECT: {
        /* a variable indexes its value, as PyTorch's w[0] on a parameter
         * (read as any op reads it: watched by tapes, a var_read when staged) */
        const ObjectClass *cls = ((Object *)base.u.o)->cls;
        if (!cls->to_tensor) break;
        tfe_tensor *t = value_to_tensor(base);
        if (!t) return I->has_error ? -1 : raise_msg_at(I, loc, tfe_error_msg());
        Value tv = v_tensor_take(t);
        Loc saved = I->cur_loc;
        I->cur_loc = loc;
        int rc = tensor_index(I, tv, n, items, out);
        I->cur_loc = saved;
        value_decref(tv);
        return rc;
    }
    default: break;
    }
    return raise_at(I, loc, "a value of type %s cannot be indexed", value_kind_name(base));
}

/* Methods of lists: bound builtins with the list as self. */
static int list_push(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwn,
                     const Value *kwv, Value *out, void *data)
{
    if (argc != 2 || nkw) return interp_raise(I, "push() takes 1 argument");
    if (I->tracer && trace_check_mutation(I, ((Seq *)argv[0].u.o)->trace_id, I->cur_loc)) return -1;
    value_incref(argv[1]);
    seq_push_take((Seq *)argv[0].u.o, argv[1]);
    *out = v_nil();
    return 0;
}

static int list_pop(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwn,
                    const Value *kwv, Value *out, void *data)
{
    if (argc != 1 || nkw) return interp_raise(I, "pop() takes no arguments");
    Seq *s = (Seq *)argv[0].u.o;
    if (I->tracer && trace_check_mutation(I, s->trace_id, I->cur_loc)) return -1;
    if (s->n == 0) return interp_raise(I, "pop() from an empty list");
    *out = s->items[--s->n];
    return 0;
}

static Value bound_method(const char *name, BuiltinFn fn, Value self)
{
    Value b = builtin_new(name, fn, NULL);
    value_incref(self);
    ((Builtin *)b.u.o)->self = self;
    return b;
}

/* Keras' and PyTorch's names of the stdlib's losses, optimizers and layers,
 * named with what tfe writes (ahead of a "did you mean": Conv2d's note on
 * NHWC images says more than conv2d alone), or NULL. */
static const char *stdlib_member_hint(const char *module, const char *name)
{
    static const char *const hints[][3] = {
        {"losses", "cross_entropy", "tfe writes losses.sparse_softmax_cross_entropy(logits, labels) for class ids, "
                                    "losses.softmax_cross_entropy(logits, targets) for one-hot targets; both take logits"},
        {"losses", "categorical_crossentropy", "tfe writes losses.softmax_cross_entropy(logits, targets) for one-hot "
                                               "targets; it takes logits, not probabilities"},
        {"losses", "sparse_categorical_crossentropy", "tfe writes losses.sparse_softmax_cross_entropy(logits, labels); "
                                                      "it takes logits, not probabilities"},
        {"losses", "binary_crossentropy", "tfe writes losses.binary_cross_entropy(logits, targets); it takes logits, "
                                          "not probabilities"},
        {"losses", "binary_cross_entropy_with_logits", "tfe writes losses.binary_cross_entropy(logits, targets)"},
        {"losses", "mean_squared_error", "tfe writes losses.mse(pred, target)"},
        {"losses", "mse_loss", "tfe writes losses.mse(pred, target)"},
        {"optim", "SGD", "tfe writes optim.sgd(params(model), lr=0.01)"},
        {"optim", "Adam", "tfe writes optim.adam(params(model), lr=0.001)"},
        {"optim", "AdamW", "tfe writes optim.adamw(params(model), lr=0.001)"},
        {"optim", "RMSprop", "tfe writes optim.rmsprop(params(model), lr=0.01)"},
        {"nn", "Linear", "tfe writes nn.dense(n_in, n_out)"},
        {"nn", "Dense", "tfe writes nn.dense(n_in, n_out)"},
        {"nn", "Conv2d", "tfe writes nn.conv2d(in_channels, out_channels, kernel_size), on NHWC images"},
        {"nn", "Sequential", "tfe writes nn.sequential(layer, layer, ...)"},
        {"nn", "ReLU", "tfe writes nn.lambda_layer(relu), or activation=relu in nn.dense"},
        {"nn", "Dropout", "tfe writes nn.dropout(rate)"},
        {"nn", "Flatten", "tfe writes nn.flatten()"},
        {"nn", "MaxPool2d", "tfe writes nn.max_pool2d(size)"},
        {"nn", "BatchNorm1d", "tfe writes nn.batch_norm(features)"},
        {"nn", "BatchNorm2d", "tfe writes nn.batch_norm(channels), on NHWC images"},
        {"nn", "CrossEntropyLoss", "tfe writes losses.sparse_softmax_cross_entropy(logits, labels): import losses"},
        {"nn", "MSELoss", "tfe writes losses.mse(pred, target): import losses"},
    };
    for (size_t i = 0; module && i < sizeof hints / sizeof *hints; i++)
        if (!strcmp(module, hints[i][0]) && !strcmp(name, hints[i][1])) return hints[i][2];
    return NULL;
}

static int get_field(Interp *I, Value base, const char *name, Loc loc, Value *out)
{
    int rc = 1;
    switch ((ValueKind)base.kind) {
    case V_RECORD: case V_MODULE: {
        Value *v = record_get((Record *)base.u.o, name, strlen(name));
        if (v) { value_incref(*v); *out = *v; return 0; }
        Suggest sg;
        char hint[160];
        suggest_init(&sg, name);
        for (int i = 0; i < ((Record *)base.u.o)->n; i++) suggest_add(&sg, ((Record *)base.u.o)->keys[i]->s);
        if (base.kind == V_MODULE) {
            const char *habit = stdlib_member_hint(((Record *)base.u.o)->module_name, name);
            if (habit)
                return raise_at(I, loc, "module '%s' has no field '%s' (%s)", ((Record *)base.u.o)->module_name, name,
                                habit);
            return raise_at(I, loc, "module '%s' has no field '%s'%s", ((Record *)base.u.o)->module_name, name,
                            suggest_text(&sg, hint, sizeof hint));
        }
        if (!sg.best && (!strcmp(name, "keys") || !strcmp(name, "items") || !strcmp(name, "values") ||
                         !strcmp(name, "get")))
            /* Python's dict methods: a record is walked by its keys */
            return raise_at(I, loc, "record has no field '%s' (a record is not a dict: for k in r { ... r[k] ... } "
                                    "walks its keys)", name);
        /* PyTorch's module API, on a layer or model (a record) */
        static const char *const torch_habits[][2] = {
            {"parameters", "params(model) gives its trainable variables"},
            {"named_parameters", "params(model) gives its trainable variables by path"},
            {"state_dict", "params(model), or save(path, model) for a checkpoint"},
            {"forward", "model(x) calls its call field"},
            {"zero_grad", "there is none: each tape's t.gradient is fresh"},
            {"weight", "nn's layers call their weight w"},
            {"bias", "nn's layers call their bias b"},
            {"eval", "layers take training=false (the default) in model(x, training=false)"},
            {"train", "layers take training=true in model(x, training=true)"},
        };
        if (!sg.best)
            for (size_t i = 0; i < sizeof torch_habits / sizeof *torch_habits; i++)
                if (!strcmp(torch_habits[i][0], name))
                    return raise_at(I, loc, "record has no field '%s' (%s)", name, torch_habits[i][1]);
        return raise_at(I, loc, "record has no field '%s'%s", name, suggest_text(&sg, hint, sizeof hint));
    }
    case V_SCALAR: case V_TENSOR: {
        Loc saved = I->cur_loc;
        I->cur_loc = loc;
        rc = tensor_getattr(I, base, name, out);
        if (rc == 1) rc = tensor_method(I, base, name, out);
        I->cur_loc = saved;
        break;
    }
    case V_LIST:
        /* append is Python's name of push */
        if (strcmp(name, "push") == 0 || strcmp(name, "append") == 0) {
            *out = bound_method("push", list_push, base);
            return 0;
        }
        if (strcmp(name, "pop") == 0) { *out = bound_method("pop", list_pop, base); return 0; }
        break;
    case V_STR:
        if (!string_method(I, base, name, out)) return 0;
        break;
    case V_OBJECT: {
        Object *o = (Object *)base.u.o;
        if (o->cls->getattr) {
            Loc saved = I->cur_loc;
            I->cur_loc = loc;
            rc = o->cls->getattr(I, base.u.o, name, out);
            I->cur_loc = saved;
        }
        break;
    }
    default: break;
    }
    if (rc == 1) {
        const char *near = NULL;
        bool tensorish = base.kind == V_SCALAR || base.kind == V_TENSOR ||
                         (base.kind == V_OBJECT && !strcmp(((Object *)base.u.o)->cls->name, "variable"));
        const char *habit = tensorish ? tensor_attr_habit(name) : NULL;
        if (habit) return raise_at(I, loc, "%s has no field '%s' (tfe writes %s)", value_kind_name(base), name, habit);
        if (base.kind == V_TENSOR && (!strcmp(name, "append") || !strcmp(name, "push")))
            return raise_at(I, loc, "tensor has no field '%s' ([...] makes a tensor, which does not grow: "
                                    "collect values in a list, let xs = list(), with xs.push(v))", name);
        if (base.kind == V_LIST)
            return raise_at(I, loc, "list has no field '%s' (a list has push(v), also spelt append(v), and pop())",
                            name);
        if (base.kind == V_STR) {
            Suggest sg;
            char hint[160];
            suggest_init(&sg, name);
            for (const char *const *m = interp_string_method_names(); *m; m++) suggest_add(&sg, *m);
            if (!strcmp(name, "format")) /* Python's "{:.2f}".format(x) */
                return raise_at(I, loc, "string has no field 'format' (tfe writes format(s, x, ...), or an "
                                        "f-string f\"...{x}\")");
            if (sg.best) return raise_at(I, loc, "string has no field '%s'%s", name, suggest_text(&sg, hint, sizeof hint));
            return raise_at(I, loc, "string has no field '%s' (a string has split, join, strip, lstrip, rstrip, "
                                    "lower, upper, replace, startswith, endswith, find and count)", name);
        }
        if (tensorish) near = tensor_attr_suggest(name);
        if (near)
            return raise_at(I, loc, "%s has no field '%s' (did you mean '%s'?)", value_kind_name(base), name, near);
        return raise_at(I, loc, "%s has no field '%s'", value_kind_name(base), name);
    }
    return rc;
}

/* --- names of functions stored in records --------------------------------------- */

/* Tracebacks name a function by where it is stored, as params() names
 * variables: an anonymous function in field f of a record whose `kind` is K
 * is "K.f" (a dense layer's call is "dense.call"); a layer (a record with a
 * `call` function) stored in field p of a record, alone or as element i of a
 * tuple or list there, has its call named "p (K)" or "p.i (K)" (the layers
 * of nn.sequential: "layers.0 (dense)"). Functions declared with a name keep
 * it. The names are the interpreter's (frames and graphs point at them). */
static const char *fn_name_intern(Interp *I, const char *s)
{
    for (int i = I->n_fn_names - 1; i >= 0; i--)
        if (!strcmp(I->fn_names[i], s)) return I->fn_names[i];
    I->fn_names = xrealloc(I->fn_names, sizeof(char *) * (size_t)(I->n_fn_names + 1));
    return I->fn_names[I->n_fn_names++] = xstrdup(s);
}

static const char *record_kind(Record *r)
{
    Value *k = record_get(r, "kind", 4);
    return k && k->kind == V_STR ? ((Str *)k->u.o)->s : NULL;
}

static void name_fn(Interp *I, Value f, const char *name)
{
    if (f.kind != V_FN) return;
    Closure *c = (Closure *)f.u.o;
    if (!c->fn->str && strcmp(c->name, name)) c->name = fn_name_intern(I, name);
}

static void name_layer(Interp *I, Value v, const char *path)
{
    if (v.kind != V_RECORD) return;
    Value *call = record_get((Record *)v.u.o, "call", 4);
    if (!call) return;
    const char *k = record_kind((Record *)v.u.o);
    char buf[160];
    if (k) snprintf(buf, sizeof buf, "%s (%s)", path, k);
    else snprintf(buf, sizeof buf, "%s", path);
    name_fn(I, *call, buf);
}

static void name_stored(Interp *I, Record *r, const char *field, Value v)
{
    char buf[160];
    if (v.kind == V_FN) {
        const char *k = record_kind(r);
        if (k) snprintf(buf, sizeof buf, "%s.%s", k, field);
        else snprintf(buf, sizeof buf, "%s", field);
        name_fn(I, v, buf);
    } else if (v.kind == V_RECORD) {
        name_layer(I, v, field);
    } else if (v.kind == V_TUPLE || v.kind == V_LIST) {
        Seq *q = (Seq *)v.u.o;
        for (int i = 0; i < q->n && i < 1000; i++) {
            if (q->items[i].kind != V_RECORD && q->items[i].kind != V_FN) continue;
            snprintf(buf, sizeof buf, "%s.%d", field, i);
            if (q->items[i].kind == V_FN) name_fn(I, q->items[i], buf);
            else name_layer(I, q->items[i], buf);
        }
    }
}

/* --- literals ------------------------------------------------------------------------ */

static int eval_items(Interp *I, NodeList *l, Env *env, Value *vals)
{
    for (int i = 0; i < l->n; i++)
        if (eval(I, l->items[i], env, &vals[i])) {
            for (int j = 0; j < i; j++) value_decref(vals[j]);
            return -1;
        }
    return 0;
}

static int make_closure(Interp *I, Node *fn, Env *env, Value *out)
{
    Closure *c = closure_new(I, fn, env, I->cur_prog);
    Value f = v_obj(V_FN, c);
    /* decorators apply innermost (closest to fn) first */
    for (int i = fn->list2.n - 1; i >= 0; i--) {
        Node *d = fn->list2.items[i];
        Value dv, r;
        if (eval(I, d, env, &dv)) { value_decref(f); return -1; }
        I->cur_loc = d->loc;
        int rc = call_value(I, dv, 1, &f, 0, NULL, NULL, &r);
        value_decref(dv);
        value_decref(f);
        if (rc) return -1;
        f = r;
    }
    *out = f;
    return 0;
}

/* Kept out of eval() so its stack frame stays small for deep recursion. */
static __attribute__((noinline)) int eval_index(Interp *I, Node *n, Env *env, Value *out)
{
    Value base;
    if (eval(I, n->a, env, &base)) return -1;
    IndexItem buf[8];
    int k = n->list.n;
    IndexItem *items = k <= 8 ? buf : xcalloc((size_t)k, sizeof(IndexItem));
    memset(items, 0, sizeof(IndexItem) * (size_t)k);
    int rc = eval_index_items(I, n, env, items);
    if (!rc) rc = index_value(I, base, items, k, n->loc, out);
    free_index_items(items, k);
    if (items != buf) free(items);
    value_decref(base);
    return rc;
}

static __attribute__((noinline)) int eval_array(Interp *I, Node *n, Env *env, Value *out)
{
    int k = n->list.n;
    Value buf[16] = {{0}};
    Value *vals = k <= 16 ? buf : xmalloc(sizeof(Value) * (size_t)k);
    int rc = eval_items(I, &n->list, env, vals);
    if (!rc) {
        Loc saved = I->cur_loc;
        I->cur_loc = n->loc;
        rc = tensor_literal(I, k, vals, out);
        I->cur_loc = saved;
        for (int i = 0; i < k; i++) value_decref(vals[i]);
    }
    if (vals != buf) free(vals);
    return rc;
}

/* --- conditional expressions, comprehensions, f-strings ---------------------------- */

/* a if c else b. n->a is the if statement it stands for (parser/grammar.y):
 * with a traced tensor condition it is traced as exactly that statement (a
 * cond node, or the same located error), and the value is read from the
 * hidden slot its branches assign; otherwise only the chosen branch runs. */
static __attribute__((noinline)) int eval_ifexpr(Interp *I, Node *n, Env *env, Value *out)
{
    Node *s = n->a;
    Value c;
    if (I->tracer ? trace_cond_value(I, s->a, env, &c) : eval(I, s->a, env, &c)) return -1;
    if (__builtin_expect(I->tracer != NULL, 0) && trace_recording(I) && c.kind == V_TENSOR && c.u.t->node &&
        tensor_numel(c.u.t) == 1) {
        int xs = XS_OK;
        int rc = trace_cond(I, s, env, c, NULL, 0, &xs);
        value_decref(c);
        if (rc || xs == XS_ERR) return -1;
        Value *slot = &env->slots[n->slot];
        *out = *slot;
        *slot = v_nil();
        return 0;
    }
    bool t = false;
    int rc = value_truth(I, c, s->a->loc, &t);
    value_decref(c);
    if (rc) return -1;
    return eval(I, (t ? s->b : s->c)->list.items[0]->b, env, out);
}

int iter_item(Interp *I, Value it, int64_t i, Loc loc, Value *x)
{
    switch ((ValueKind)it.kind) {
    case V_RANGE:
        if ((uint64_t)i >= range_count((Range *)it.u.o)) return 1;
        *x = v_int(range_at((Range *)it.u.o, i));
        return 0;
    case V_TUPLE: case V_LIST: {
        Seq *s = (Seq *)it.u.o;
        if (i >= s->n) return 1;
        *x = s->items[i];
        value_incref(*x);
        return 0;
    }
    case V_RECORD: case V_MODULE: {
        Record *r = (Record *)it.u.o;
        if (i >= r->n) return 1;
        *x = v_str(r->keys[i]->s, r->keys[i]->len);
        return 0;
    }
    case V_STR: {
        Str *s = (Str *)it.u.o;
        if (i >= (int64_t)s->len) return 1;
        *x = v_str(s->s + i, 1);
        return 0;
    }
    case V_TENSOR: {
        if (it.u.t->rank == 0) return raise_at(I, loc, "cannot iterate over a 0-d tensor");
        if (i >= it.u.t->shape[0]) return 1;
        IndexItem ix = { .kind = IX_VALUE, .v = v_int(i) };
        Loc saved = I->cur_loc;
        I->cur_loc = loc;
        int rc = tensor_index(I, it, 1, &ix, x);
        I->cur_loc = saved;
        return rc ? -1 : 0;
    }
    default:
        return raise_at(I, loc, "cannot iterate over a value of type %s", value_kind_name(it));
    }
}

/* The clauses k.. of a comprehension, then its element, into acc. */
static int comp_run(Interp *I, Node *n, int k, Env *env, Seq *acc)
{
    if (k == n->list.n) {
        Value v;
        if (eval(I, n->a, env, &v)) return -1;
        seq_push_take(acc, v);
        return 0;
    }
    Node *c = n->list.items[k];
    if (c->kind == N_IF) {
        Value v;
        bool t = false;
        if (eval(I, c->a, env, &v)) return -1;
        int rc = value_truth(I, v, c->a->loc, &t);
        value_decref(v);
        if (rc) return -1;
        return t ? comp_run(I, n, k + 1, env, acc) : 0;
    }
    Value it;
    if (eval(I, c->b, env, &it)) return -1;
    int rc = 0;
    for (int64_t i = 0;; i++) {
        Value x;
        int r = iter_item(I, it, i, c->b->loc, &x);
        if (r == 1) break;
        if (r < 0) { rc = -1; break; }
        r = bind_pattern(I, c->a, x, env);
        value_decref(x);
        if (r || comp_run(I, n, k + 1, env, acc)) { rc = -1; break; }
        if (tfe_interrupted && poll_interrupt(I, c->loc)) { rc = -1; break; }
    }
    value_decref(it);
    return rc;
}

/* [e for x in xs if c]: the tensor literal of the elements, as if they were
 * written out ([e1, e2, ...]); see docs/language.md. */
static __attribute__((noinline)) int eval_comp(Interp *I, Node *n, Env *env, Value *out)
{
    Seq *acc = seq_new(0);
    acc->h.kind = V_LIST;
    Value held = v_obj(V_LIST, acc);
    int rc = comp_run(I, n, 0, env, acc);
    for (int i = 0; !rc && i < acc->n; i++) {
        Value v = acc->items[i];
        if (is_numeric(v)) continue; /* the literal's own errors (shapes) */
        rc = raise_at(I, n->loc, "[e for ...] makes a tensor, but element %d is %s %s; collect other values "
                      "in a list with a loop (ys.push(e))", i, strchr("aeiou", value_kind_name(v)[0]) ? "an" : "a",
                      value_kind_name(v));
    }
    if (!rc) {
        Loc saved = I->cur_loc;
        I->cur_loc = n->loc;
        rc = tensor_literal(I, acc->n, acc->items, out);
        I->cur_loc = saved;
    }
    value_decref(held);
    return rc;
}

/* f"...": the pieces, each field formatted by format() (interp/format.c)
 * with its own format string, so that an error names the field. */
static __attribute__((noinline)) int eval_fstring(Interp *I, Node *n, Env *env, Value *out)
{
    Buf b = {0};
    for (int i = 0; i < n->list.n; i++) {
        Node *p = n->list.items[i];
        if (p->kind == N_STR) {
            buf_add(&b, p->str, p->slen);
            continue;
        }
        int argc = 1 + p->list.n;
        Value buf[8];
        Value *argv = argc <= 8 ? buf : xmalloc(sizeof(Value) * (size_t)argc);
        int done = 0, rc = 0;
        if (eval(I, p->a, env, &argv[0])) rc = -1;
        else done = 1;
        for (; !rc && done < argc; done++)
            if (eval(I, p->list.items[done - 1], env, &argv[done])) rc = -1;
        char *err = NULL, *s = NULL;
        size_t slen = 0;
        if (!rc) {
            /* staged code reads the values here: an error names this field */
            Loc saved = I->cur_loc;
            I->cur_loc = p->a->loc;
            I->formatting = true;
            s = format_values(p->str, p->slen, argc, argv, &slen, &err);
            I->formatting = false;
            I->cur_loc = saved;
            /* a value not known at trace time (in a traced branch or loop
             * body) failed the trace: the branch runs at trace time instead,
             * as for print(x) or str(x), never with "<traced tensor>" */
            if (s && __builtin_expect(I->tracer != NULL, 0) && I->has_error) {
                free(s);
                rc = -1;
            } else if (!s) {
                const char *m = err ? err : "format: failed";
                if (strncmp(m, "format: ", 8) == 0) m += 8;
                rc = raise_at(I, p->opl, "f-string: %s", m);
                free(err);
            }
        }
        for (int k = 0; k < done; k++) value_decref(argv[k]);
        if (argv != buf) free(argv);
        if (rc) { free(b.s); return -1; }
        buf_add(&b, s, slen);
        free(s);
    }
    *out = v_str(b.s ? b.s : "", b.len);
    free(b.s);
    return 0;
}

/* --- expressions ------------------------------------------------------------------- */

static int eval_other(Interp *I, Node *n, Env *env, Value *out);

/* A name read while a trace records: a binding outside the trace becomes an
 * input of the graph (stage/trace.c). */
static __attribute__((noinline)) int read_name_traced(Interp *I, Node *n, Env *env, Value *out)
{
    Value v;
    if (n->op == 2) {
        v = I->builtin_vals[n->slot];
        value_incref(v);
    } else if (!I->tracer) { /* a cached graph's @host call under a tape (stage/host_reads.c) */
        Env *e = env_up(env, n->depth);
        host_reads_binding(I, e, n->slot, n->str);
        v = e->slots[n->slot];
        value_incref(v);
    } else {
        Env *e = env_up(env, n->depth);
        if (e->trace_id != I->trace_id) {
            if (trace_read_outside(I, e, n->slot, n->str, &v)) return -1;
        } else {
            v = e->slots[n->slot];
            /* (a @host closure made in the body reading the body's values) */
            if (I->tracer->host_reading && trace_host_reads_body(I, e, v, n->str, n->loc)) return -1;
            value_incref(v);
        }
    }
    if (is_undefined(v)) return raise_undefined(I, n->loc, n->str, NULL);
    *out = v;
    return 0;
}

/* The hot node kinds (names, ints, binary operators, calls) are kept here,
 * in a small function with a cheap prologue; the rest are in eval_other,
 * which only eval calls. */
static int eval(Interp *I, Node *n, Env *env, Value *out)
{
    switch (n->kind) {
    case N_NAME: {
        if (n->depth && __builtin_expect(I->tracer != NULL || I->host_reads != NULL, 0))
            return read_name_traced(I, n, env, out);
        Value v = n->op == 2 ? I->builtin_vals[n->slot] : env_up(env, n->depth)->slots[n->slot];
        if (__builtin_expect(is_undefined(v), 0)) return raise_undefined(I, n->loc, n->str, NULL);
        value_incref(v);
        *out = v;
        return 0;
    }
    case N_INT:
        *out = v_int(n->ival);
        out->weak = true;
        return 0;
    case N_BINOP: {
        Value a, b;
        if (eval_fast(I, n->a, env, &a)) return -1;
        if (eval_fast(I, n->b, env, &b)) { value_decref(a); return -1; }
        if (a.kind == V_SCALAR && b.kind == V_SCALAR && scalar_binop(n->op, a, b, out) == 0) return 0;
        I->cur_loc = n->opl;
        int rc = binop_values(I, n->op, a, b, n->opl, out);
        value_decref(a);
        value_decref(b);
        return rc;
    }
    case N_CALL:
        return eval_call(I, n, env, out);
    default:
        return eval_other(I, n, env, out);
    }
}

static __attribute__((noinline)) int eval_other(Interp *I, Node *n, Env *env, Value *out)
{
    switch (n->kind) {
    case N_FLOAT:
        *out = v_float(n->fval, TFE_FLOAT32);
        out->weak = true;
        if (out->u.f != n->fval) { /* not exact in float32: kept until it meets a dtype */
            out->u.f = n->fval;
            out->lit = true;
        }
        return 0;
    case N_STR: *out = v_str(n->str, n->slen); return 0;
    case N_TRUE: *out = v_bool(true); return 0;
    case N_FALSE: *out = v_bool(false); return 0;
    case N_NIL: *out = v_nil(); return 0;
    case N_UNOP: {
        Value a;
        if (eval(I, n->a, env, &a)) return -1;
        int rc = unop_value(I, n->op, a, n->loc, out);
        value_decref(a);
        return rc;
    }
    case N_AND: case N_OR: {
        Value a;
        bool t;
        if (eval(I, n->a, env, &a)) return -1;
        const char *word = n->kind == N_AND ? "and" : "or";
        int rc = value_truth_op(I, a, n->a->loc, &t, word);
        value_decref(a);
        if (rc) return -1;
        if (n->kind == N_AND ? !t : t) { *out = v_bool(t); return 0; }
        Value b;
        if (eval(I, n->b, env, &b)) return -1;
        rc = value_truth_op(I, b, n->b->loc, &t, word);
        value_decref(b);
        if (rc) return -1;
        *out = v_bool(t);
        return 0;
    }
    case N_NOT: {
        Value a;
        bool t;
        if (eval(I, n->a, env, &a)) return -1;
        int rc = value_truth_op(I, a, n->a->loc, &t, "not");
        value_decref(a);
        if (rc) return -1;
        *out = v_bool(!t);
        return 0;
    }
    case N_INDEX:
        return eval_index(I, n, env, out);
    case N_FIELD: {
        Value base;
        if (eval(I, n->a, env, &base)) return -1;
        int rc = get_field(I, base, n->str, n->opl, out);
        value_decref(base);
        return rc;
    }
    case N_ARRAY:
        return eval_array(I, n, env, out);
    case N_TUPLE: {
        Seq *s = seq_new(n->list.n);
        s->h.kind = V_TUPLE;
        if (eval_items(I, &n->list, env, s->items)) { free(s->items); s->items = NULL; s->n = 0; value_decref(v_obj(V_TUPLE, s)); return -1; }
        s->n = n->list.n;
        *out = v_obj(V_TUPLE, s);
        return 0;
    }
    case N_RECORD: {
        Record *r = record_new();
        for (int i = 0; i < n->list.n; i++) {
            Node *f = n->list.items[i];
            Value v;
            if (eval(I, f->a, env, &v)) { value_decref(v_obj(V_RECORD, r)); return -1; }
            if (v.kind >= V_TUPLE) name_stored(I, r, f->str, v);
            record_set_take(r, f->str, strlen(f->str), v);
        }
        *out = v_obj(V_RECORD, r);
        return 0;
    }
    case N_FN:
        return make_closure(I, n, env, out);
    case N_IFEXPR:
        return eval_ifexpr(I, n, env, out);
    case N_COMP:
        return eval_comp(I, n, env, out);
    case N_FSTRING:
        return eval_fstring(I, n, env, out);
    default:
        return raise_at(I, n->loc, "internal error: node kind %d is not an expression", (int)n->kind);
    }
}

/* --- statements ---------------------------------------------------------------------- */

/* a, b = x on a tensor (or a variable): as Python unpacks a NumPy array,
 * the items are x[0], x[1], ... taken by indexing, so a tape records them and
 * a staged function traces them as slices. Returns 1 when v is no tensor
 * (the caller reports it), 0 with *out a tuple of the n items, -1 on error. */
static int unpack_tensor(Interp *I, Value v, int n, Loc loc, Value *out)
{
    bool obj = v.kind == V_OBJECT && ((Object *)v.u.o)->cls->to_tensor;
    if (v.kind != V_TENSOR && v.kind != V_SCALAR && !obj) return 1;
    if (v.kind == V_SCALAR || (v.kind == V_TENSOR && v.u.t->rank == 0)) {
        /* named by dtype, boxed or not (a tape keeps numbers boxed) */
        tfe_dtype dt = v.kind == V_SCALAR ? (tfe_dtype)v.dtype : v.u.t->dtype;
        return raise_at(I, loc, "cannot unpack a 0-d tensor (a %s) into %d targets",
                        dt == TFE_BOOL ? "bool" : dtype_is_int(dt) ? "int" : "float", n);
    }
    Value tv = v;
    if (obj) {
        /* a variable is read once, as any op reads it */
        tfe_tensor *t = value_to_tensor(v);
        if (!t) return I->has_error ? -1 : raise_msg_at(I, loc, tfe_error_msg());
        tv = v_tensor_take(t);
        if (t->rank == 0) {
            value_decref(tv);
            return raise_at(I, loc, "cannot unpack a 0-d tensor (a variable of shape ()) into %d targets", n);
        }
    } else {
        value_incref(tv);
    }
    int64_t len = tv.u.t->shape[0];
    if (len != n) {
        value_decref(tv);
        return raise_at(I, loc, "cannot unpack a tensor of length %lld into %d targets", (long long)len, n);
    }
    Seq *s = seq_new(n);
    s->h.kind = V_TUPLE;
    Value res = v_obj(V_TUPLE, s);
    Loc saved = I->cur_loc;
    I->cur_loc = loc;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        IndexItem ix = { .kind = IX_VALUE, .v = v_int(i) };
        Value x;
        rc = tensor_index(I, tv, 1, &ix, &x);
        if (!rc) seq_push_take(s, x);
    }
    I->cur_loc = saved;
    value_decref(tv);
    if (rc) { value_decref(res); return -1; }
    *out = res;
    return 0;
}

static int bind_pattern(Interp *I, Node *p, Value v, Env *env)
{
    if (p->kind == N_PNAME) {
        value_incref(v);
        slot_set_take(&env_up(env, p->depth)->slots[p->slot], v);
        return 0;
    }
    Seq *s = seq_as(v);
    if (!s) {
        Value items;
        int u = unpack_tensor(I, v, p->list.n, p->loc, &items);
        if (u < 0) return -1;
        if (u == 0) {
            int rc = bind_pattern(I, p, items, env);
            value_decref(items);
            return rc;
        }
    }
    if (!s) return raise_at(I, p->loc, "cannot destructure a value of type %s (a tuple or list is needed)", value_kind_name(v));
    if (s->n != p->list.n) {
        /* enumerate's (i, (x, y)) taken as i, x, y: the pairs nest */
        Seq *last = s->n >= 1 ? seq_as(s->items[s->n - 1]) : NULL;
        if (last && s->n < p->list.n && last->n == p->list.n - s->n + 1)
            return raise_at(I, p->loc, "cannot destructure a %s of %d values into %d names: its last value is itself "
                                       "a %s of %d; nest the names as the values nest, as in "
                                       "for i, (x, y) in enumerate(pairs)",
                            value_kind_name(v), s->n, p->list.n, value_kind_name(s->items[s->n - 1]), last->n);
        return raise_at(I, p->loc, "cannot destructure a %s of %d value%s into %d names", value_kind_name(v),
                        s->n, s->n == 1 ? "" : "s", p->list.n);
    }
    for (int i = 0; i < s->n; i++)
        if (bind_pattern(I, p->list.items[i], s->items[i], env)) return -1;
    return 0;
}

/* target = v (takes v). For x[i] = v on a tensor the updated copy is bound
 * back to x (value semantics), recursively through fields and indices. */
/* r.w = tensor where r.w holds a variable (or xs[i] = tensor where a list
 * slot holds one): the record would drop the variable for a constant, so a
 * model keeps reading the old variable (or a params() record stops
 * reaching it) and training silently stops updating it: the trap of
 * `ps[k] = ps[k] - lr * g` for `ps[k] -= lr * g` (PyTorch refuses a tensor
 * for a parameter too). A number (opt.lr = 0.01) is told to assign; a
 * tensor is told to update in place, or to give a variable to replace it
 * on purpose (freezing). A variable, nil or any other value may still
 * replace it. old: the slot's value (NULL: none); at: the target as
 * written. Takes v on error. */
static int refuse_variable_replace(Interp *I, const Value *old, const char *at, Value *v, Loc loc)
{
    if (v->kind != V_TENSOR && v->kind != V_SCALAR) return 0;
    if (!old || !value_is_variable(*old)) return 0;
    if (v->kind == V_SCALAR) {
        char *txt = value_repr(*v);
        const char *shown = txt && strlen(txt) <= 24 ? txt : "x";
        int rc = raise_at(I, loc, "cannot replace the variable at %s with a number: whatever holds it (a model, an "
                                  "optimizer) would keep reading the old variable, and the number would be silently "
                                  "lost; set the variable in place: %s.assign(%s)",
                          at, at, shown);
        free(txt);
        value_decref(*v);
        return rc;
    }
    value_decref(*v);
    return raise_at(I, loc, "cannot replace the variable at %s with a tensor: the model would keep the old variable "
                            "(or read a constant), and training would silently stop updating it; update the variable "
                            "in place: %s -= lr * g, or %s.assign(x); to replace it on purpose (to freeze it, say), "
                            "give a variable: %s = variable(x, trainable=false)",
                    at, at, at, at);
}

/* The target as written (r.key, r["key"], xs[i]) for refuse_variable_replace:
 * the base's name where it is a name, else dflt. */
static void target_text(char *at, size_t n, const Node *base, const char *dflt, const char *key, size_t len,
                        bool field, bool quoted)
{
    const char *b = base->kind == N_NAME ? base->str : dflt;
    if (field) snprintf(at, n, "%s.%.*s", b, (int)len, key);
    else if (quoted) snprintf(at, n, "%s[\"%.*s\"]", b, (int)len, key);
    else snprintf(at, n, "%s[%.*s]", b, (int)len, key);
}

static int assign_to(Interp *I, Node *t, Value v, Env *env, Loc loc)
{
    switch (t->kind) {
    case N_NAME: {
        Env *e = env_up(env, t->depth);
        Value *slot = &e->slots[t->slot];
        if (t->op == 1 && is_undefined(*slot)) {
            value_decref(v);
            return raise_at(I, t->loc, "assignment to undeclared name '%s' (declare it with 'let')", t->str);
        }
        if (__builtin_expect(I->tracer != NULL, 0)) {
            if (e->trace_id != I->trace_id) {
                I->cur_loc = loc;
                return trace_write_outside(I, e, t->slot, t->str, v);
            }
            if (I->tracer->symbolic) trace_note_write(I->tracer, e, t->slot, t);
            else if (I->tracer->host_reading && trace_host_writes_body(I, e, t->str, t->loc)) {
                value_decref(v);
                return -1;
            }
        }
        slot_set_take(slot, v);
        return 0;
    }
    case N_FIELD: {
        Value base;
        if (eval(I, t->a, env, &base)) { value_decref(v); return -1; }
        int rc = 0;
        if (base.kind == V_RECORD && I->tracer && trace_check_mutation(I, ((Record *)base.u.o)->trace_id, t->opl)) {
            value_decref(v);
            rc = -1;
        } else if (base.kind == V_RECORD) {
            char at[300];
            target_text(at, sizeof at, t->a, "r", t->str, strlen(t->str), true, false);
            if (refuse_variable_replace(I, record_get((Record *)base.u.o, t->str, strlen(t->str)), at, &v, t->opl)) {
                rc = -1;
            } else {
                if (v.kind >= V_TUPLE) name_stored(I, (Record *)base.u.o, t->str, v);
                record_set_take((Record *)base.u.o, t->str, strlen(t->str), v);
            }
        }
        else {
            value_decref(v);
            rc = raise_at(I, t->opl, "cannot set field '%s' of a value of type %s", t->str, value_kind_name(base));
        }
        value_decref(base);
        return rc;
    }
    case N_INDEX: {
        Value base;
        if (eval(I, t->a, env, &base)) { value_decref(v); return -1; }
        int k = t->list.n;
        IndexItem *items = xcalloc((size_t)(k ? k : 1), sizeof(IndexItem));
        int rc = eval_index_items(I, t, env, items);
        if (rc) { value_decref(v); goto done; }
        if ((base.kind == V_LIST || base.kind == V_RECORD) && I->tracer &&
            trace_check_mutation(I, base.kind == V_LIST ? ((Seq *)base.u.o)->trace_id : ((Record *)base.u.o)->trace_id, t->loc)) {
            value_decref(v);
            rc = -1;
            goto done;
        }
        if (base.kind == V_LIST) {
            Seq *s = (Seq *)base.u.o;
            int64_t i = 0;
            if (k != 1 || items[0].kind != IX_VALUE) { value_decref(v); rc = raise_at(I, t->loc, "list index must be one int"); goto done; }
            if ((rc = int_of(I, items[0].v, t->loc, "index", &i))) { value_decref(v); goto done; }
            int64_t j = i < 0 ? i + s->n : i;
            if (j < 0 || j >= s->n) {
                value_decref(v);
                rc = raise_at(I, t->loc, "list index %lld is out of range (length %d)", (long long)i, s->n);
                goto done;
            }
            char at[300], ix[32];
            snprintf(ix, sizeof ix, "%lld", (long long)i);
            target_text(at, sizeof at, t->a, "xs", ix, strlen(ix), false, false);
            if (refuse_variable_replace(I, &s->items[j], at, &v, t->loc)) {
                rc = -1;
                goto done;
            }
            slot_set_take(&s->items[j], v);
        } else if (base.kind == V_RECORD) {
            if (k != 1 || items[0].kind != IX_VALUE || items[0].v.kind != V_STR) {
                value_decref(v);
                rc = raise_at(I, t->loc, "record index must be a string");
                goto done;
            }
            Str *key = (Str *)items[0].v.u.o;
            char at[300];
            target_text(at, sizeof at, t->a, "r", key->s, key->len, false, true);
            if (refuse_variable_replace(I, record_get((Record *)base.u.o, key->s, key->len), at, &v, t->loc)) {
                rc = -1;
                goto done;
            }
            record_set_take((Record *)base.u.o, key->s, key->len, v);
        } else if (base.kind == V_TENSOR || base.kind == V_SCALAR) {
            Value upd;
            Loc saved = I->cur_loc;
            I->cur_loc = t->loc;
            rc = tensor_index_assign(I, base, k, items, v, &upd);
            I->cur_loc = saved;
            value_decref(v);
            if (!rc) rc = assign_to(I, t->a, upd, env, loc);
        } else {
            value_decref(v);
            if (value_is_variable(base)) /* PyTorch's w[0] = 1.0 under no_grad */
                rc = raise_at(I, t->loc, "cannot assign to an element of a variable: a variable changes only as a whole, "
                                         "through assign; update a copy of its value and assign that: "
                                         "let a = v.value; a[i] = x; v.assign(a)");
            else
                rc = raise_at(I, t->loc, base.kind == V_TUPLE ? "cannot assign to an element of a tuple (tuples are immutable)"
                                                              : "cannot assign to an element of a value of type %s",
                              value_kind_name(base));
        }
    done:
        free_index_items(items, k);
        free(items);
        value_decref(base);
        return rc;
    }
    case N_TUPLE: {
        /* a, b = v: v (already evaluated in full) is unpacked into the
         * targets, left to right */
        Seq *s = seq_as(v);
        int rc = 0;
        if (!s) {
            Value items;
            int u = unpack_tensor(I, v, t->list.n, t->loc, &items);
            if (u <= 0) {
                value_decref(v);
                return u < 0 ? -1 : assign_to(I, t, items, env, loc);
            }
        }
        if (!s)
            rc = raise_at(I, t->loc, "cannot unpack a value of type %s into %d targets (a tuple or list is needed)",
                          value_kind_name(v), t->list.n);
        else if (s->n != t->list.n)
            rc = raise_at(I, t->loc, "cannot unpack a %s of %d value%s into %d targets", value_kind_name(v), s->n,
                          s->n == 1 ? "" : "s", t->list.n);
        for (int i = 0; !rc && i < s->n; i++) {
            value_incref(s->items[i]);
            rc = assign_to(I, t->list.items[i], s->items[i], env, loc);
        }
        value_decref(v);
        return rc;
    }
    default:
        value_decref(v);
        return raise_at(I, t->loc, "cannot assign to this expression");
    }
}

static int exec_block(Interp *I, Node *b, Env *env) { return exec_stmts(I, &b->list, env, I->cur_prog); }

/* Iterate v: tensors over axis 0, tuples, lists, ranges, records (keys), strings. */
/* for over range(...) while tracing: with a traced bound the loop becomes a
 * graph loop (stage/trace_cf.c); otherwise *it is the range. Returns XS_OK
 * with *it set, XS_DONE when the loop is done, or XS_ERR. */
static __attribute__((noinline)) int for_range_traced(Interp *I, Node *n, Env *env, Value *it, int *xs)
{
    Node *call = n->b;
    int argc = call->list.n;
    Value args[3] = {v_nil(), v_nil(), v_nil()};
    for (int i = 0; i < argc; i++)
        if (eval(I, call->list.items[i], env, &args[i])) {
            for (int k = 0; k < i; k++) value_decref(args[k]);
            return XS_ERR;
        }
    int rc = 2;
    for (int i = 0; i < argc && rc == 2; i++)
        if (args[i].kind == V_TENSOR && args[i].u.t->node && trace_recording(I))
            rc = trace_for_range(I, n, env, argc, args, xs);
    if (rc == 2) { /* an ordinary range (reading a traced bound specialises the trace) */
        I->cur_loc = call->a->loc;
        rc = call_value(I, I->builtin_vals[call->a->slot], argc, args, 0, NULL, NULL, it) ? -1 : 1;
        trace_fallback_done(I);
    }
    for (int i = 0; i < argc; i++) value_decref(args[i]);
    return rc == -1 ? XS_ERR : rc == 0 ? XS_DONE : XS_OK;
}

static int exec_for(Interp *I, Node *n, Env *env)
{
    Value it;
    Node *rng = n->b;
    if (__builtin_expect(I->tracer != NULL, 0) && rng->kind == N_CALL && rng->a->kind == N_NAME && rng->a->op == 2 &&
        !strcmp(rng->a->str, "range") && rng->list2.n == 0 && rng->list.n >= 1 && rng->list.n <= 3) {
        int xs = XS_OK;
        int r = for_range_traced(I, n, env, &it, &xs);
        if (r == XS_ERR) return XS_ERR;
        if (r == XS_DONE) return xs;
    } else if (eval(I, n->b, env, &it)) return -1;
    int rc = XS_OK;
    int64_t count;
    /* progress(x): walk x, telling the bar (builtins_progress.c) as we go */
    Value bar = v_nil();
    if (__builtin_expect(it.kind == V_OBJECT, 0) && progress_iterable(it).kind != V_NIL) {
        bar = it;
        it = progress_iterable(bar);
        value_incref(it);
    }
    switch ((ValueKind)it.kind) {
    case V_RANGE: {
        /* a count past INT64_MAX is clamped: no loop runs that long, and
         * break/return/Ctrl-C still end it (range_count explains why unsigned) */
        uint64_t c = range_count((Range *)it.u.o);
        count = c > INT64_MAX ? INT64_MAX : (int64_t)c;
        break;
    }
    case V_TUPLE: case V_LIST: count = -1; break;
    case V_RECORD: case V_MODULE: count = ((Record *)it.u.o)->n; break;
    case V_STR: count = (int64_t)((Str *)it.u.o)->len; break;
    case V_TENSOR:
        if (it.u.t->rank == 0) { rc = raise_at(I, n->b->loc, "cannot iterate over a 0-d tensor"); goto out; }
        count = it.u.t->shape[0];
        break;
    default:
        rc = raise_at(I, n->b->loc, "cannot iterate over a value of type %s", value_kind_name(it));
        goto out;
    }
    int64_t i = 0;
    if (bar.kind != V_NIL &&
        progress_begin(I, bar, it.kind == V_TUPLE || it.kind == V_LIST ? ((Seq *)it.u.o)->n : count, n->b->loc)) {
        rc = XS_ERR;
        goto out;
    }
    for (;; i++) {
        Value x;
        if (it.kind == V_TUPLE || it.kind == V_LIST) {
            Seq *s = (Seq *)it.u.o;
            if (i >= s->n) break;
            x = s->items[i];
            value_incref(x);
        } else {
            if (i >= count) break;
            if (it.kind == V_RANGE) {
                x = v_int(range_at((Range *)it.u.o, i));
            } else if (it.kind == V_RECORD || it.kind == V_MODULE) {
                Str *k = ((Record *)it.u.o)->keys[i];
                x = v_str(k->s, k->len);
            } else if (it.kind == V_STR) {
                x = v_str(((Str *)it.u.o)->s + i, 1);
            } else {
                IndexItem ix = { .kind = IX_VALUE, .v = v_int(i) };
                I->cur_loc = n->b->loc;
                if (tensor_index(I, it, 1, &ix, &x)) { rc = XS_ERR; break; }
            }
        }
        int b = bind_pattern(I, n->a, x, env);
        value_decref(x);
        if (b) { rc = XS_ERR; break; }
        int r = exec_block(I, n->c, env);
        if (r == XS_BREAK) break;
        if (r == XS_ERR || r == XS_RETURN) { rc = r; break; }
        if (bar.kind != V_NIL) progress_step(bar, i + 1, false);
        if (tfe_interrupted && poll_interrupt(I, n->loc)) { i++; rc = XS_ERR; break; }
    }
    if (bar.kind != V_NIL) progress_step(bar, i, true);
out:
    value_decref(it);
    value_decref(bar);
    return rc;
}

static int exec_with(Interp *I, Node *n, Env *env)
{
    Value ctx;
    if (eval(I, n->a, env, &ctx)) return XS_ERR;
    const ObjectClass *cls = ctx.kind == V_OBJECT ? ((Object *)ctx.u.o)->cls : NULL;
    if (!cls || !cls->enter) {
        int rc = raise_at(I, n->a->loc, "a value of type %s cannot be used in 'with' (not a context manager)",
                          value_kind_name(ctx));
        value_decref(ctx);
        return rc;
    }
    Value as = v_nil();
    I->cur_loc = n->a->loc;
    if (cls->enter(I, ctx.u.o, &as)) { value_decref(ctx); return XS_ERR; }
    if (n->str) slot_set_take(&env->slots[n->slot], as);
    else value_decref(as);
    int r = exec_stmts(I, &n->b->list, env, I->cur_prog);
    if (cls->exit && cls->exit(I, ctx.u.o, r == XS_ERR) && r != XS_ERR) r = XS_ERR;
    value_decref(ctx);
    return r;
}

/* Evaluate a condition to a C bool; comparisons of two scalars skip the
 * intermediate bool value. */
static inline __attribute__((always_inline)) int eval_cond(Interp *I, Node *c, Env *env, bool *t)
{
    Value v;
    if (c->kind == N_BINOP && c->op >= AOP_EQ && c->op <= AOP_GE) {
        Value a, b;
        if (eval_fast(I, c->a, env, &a)) return -1;
        if (eval_fast(I, c->b, env, &b)) { value_decref(a); return -1; }
        if (a.kind == V_SCALAR && b.kind == V_SCALAR && scalar_binop(c->op, a, b, &v) == 0) {
            *t = v.u.i != 0;
            return 0;
        }
        I->cur_loc = c->opl;
        int rc = binop_values(I, c->op, a, b, c->opl, &v);
        value_decref(a);
        value_decref(b);
        if (rc) return -1;
    } else if (eval(I, c, env, &v)) {
        return -1;
    }
    int rc = value_truth(I, v, c->loc, t);
    value_decref(v);
    return rc;
}

/* if on a traced tensor: a graph conditional (stage/trace_cf.c). rest/k:
 * the statements after it in its block, for an early return. */
static __attribute__((noinline)) int exec_if_traced(Interp *I, Node *n, Env *env, NodeList *rest, int k)
{
    Value c;
    if (trace_cond_value(I, n->a, env, &c)) return XS_ERR;
    if (trace_recording(I) && c.kind == V_TENSOR && c.u.t->node && tensor_numel(c.u.t) == 1) {
        int xs = XS_OK;
        int rc = trace_cond(I, n, env, c, rest, k, &xs);
        value_decref(c);
        return rc ? XS_ERR : xs;
    }
    bool t = false;
    int rc = value_truth(I, c, n->a->loc, &t);
    value_decref(c);
    if (rc) return XS_ERR;
    if (t) return exec_block(I, n->b, env);
    if (!n->c) return XS_OK;
    return n->c->kind == N_IF ? exec(I, n->c, env) : exec_block(I, n->c, env);
}

/* The condition of a while loop while tracing: on a traced tensor the rest
 * of the loop becomes a graph loop (returns XS_RETURN-free XS codes: XS_BREAK
 * means the loop is done). XS_OK: go on eagerly with *t. */
static __attribute__((noinline)) int while_cond_traced(Interp *I, Node *n, Env *env, bool *t)
{
    Value c;
    if (trace_loop_pending(I, n) != 1) return XS_ERR;
    if (trace_cond_value(I, n->a, env, &c)) return XS_ERR;
    if (c.kind == V_TENSOR && c.u.t->node && tensor_numel(c.u.t) == 1) {
        int xs = XS_OK;
        int rc = trace_loop(I, n, env, c, &xs);
        if (rc == 0 || rc == -1) {
            value_decref(c);
            return rc ? XS_ERR : XS_DONE;
        }
        /* (run at trace time: its body's error, where eager code meets it) */
        int peek = trace_loop_peek(I, n, c, t);
        if (peek != 1) {
            value_decref(c);
            return peek ? XS_ERR : XS_OK;
        }
    }
    int rc = value_truth(I, c, n->a->loc, t);
    trace_fallback_done(I);
    value_decref(c);
    return rc ? XS_ERR : XS_OK;
}

/* While tracing: the statements l[k..], each `if` told what follows it. */
int interp_exec_rest(Interp *I, NodeList *l, int k, Env *env)
{
    for (int i = k; i < l->n; i++) {
        Node *s = l->items[i];
        int r = s->kind == N_IF ? exec_if_traced(I, s, env, l, i + 1) : exec(I, s, env);
        if (r != XS_OK) return r;
    }
    return XS_OK;
}

static int exec(Interp *I, Node *n, Env *env)
{
    switch (n->kind) {
    case N_EXPR: {
        Value v;
        if (eval(I, n->a, env, &v)) return XS_ERR;
        value_decref(v);
        return XS_OK;
    }
    case N_LET: {
        Value v;
        if (eval(I, n->b, env, &v)) return XS_ERR;
        int rc = bind_pattern(I, n->a, v, env);
        value_decref(v);
        return rc ? XS_ERR : XS_OK;
    }
    case N_ASSIGN: {
        Value v;
        if (eval(I, n->b, env, &v)) return XS_ERR;
        if (n->op && n->a->kind == N_NAME && v.kind == V_SCALAR && !I->tracer) {
            /* x += scalar on a scalar binding: update the slot directly */
            Value *slot = &env_up(env, n->a->depth)->slots[n->a->slot];
            if (slot->kind == V_SCALAR && scalar_binop(n->op, *slot, v, slot) == 0) return XS_OK;
        }
        if (n->op) {
            Value cur, r;
            if (eval(I, n->a, env, &cur)) { value_decref(v); return XS_ERR; }
            I->cur_loc = n->opl;
            if (n->op <= AOP_DIV && value_is_variable(cur)) {
                /* in place: the binding stays the variable (see variable_update) */
                int rc = variable_update(I, cur, n->op, v);
                value_decref(cur);
                value_decref(v);
                return rc ? XS_ERR : XS_OK;
            }
            int rc = binop_values(I, n->op, cur, v, n->opl, &r);
            value_decref(cur);
            value_decref(v);
            if (rc) return XS_ERR;
            v = r;
        }
        return assign_to(I, n->a, v, env, n->opl) ? XS_ERR : XS_OK;
    }
    case N_FNDECL:
        return XS_OK; /* bound when its block was entered (hoisting) */
    case N_IF: {
        if (__builtin_expect(I->tracer != NULL, 0)) return exec_if_traced(I, n, env, NULL, 0);
        bool t = false;
        if (eval_cond(I, n->a, env, &t)) return XS_ERR;
        if (t) return exec_block(I, n->b, env);
        if (!n->c) return XS_OK;
        return n->c->kind == N_IF ? exec(I, n->c, env) : exec_block(I, n->c, env);
    }
    case N_WHILE:
        for (;;) {
            bool t = false;
            if (__builtin_expect(I->tracer != NULL, 0) && trace_recording(I)) {
                int x = while_cond_traced(I, n, env, &t);
                if (x == XS_DONE) return XS_OK; /* the rest of the loop became a graph loop */
                if (x != XS_OK) return x;
            } else if (eval_cond(I, n->a, env, &t)) return XS_ERR;
            if (!t) return XS_OK;
            int r = exec_block(I, n->b, env);
            if (r == XS_BREAK) return XS_OK;
            if (r == XS_ERR || r == XS_RETURN) return r;
            if (tfe_interrupted && poll_interrupt(I, n->loc)) return XS_ERR;
        }
    case N_FOR: return exec_for(I, n, env);
    case N_BREAK: return XS_BREAK;
    case N_CONTINUE: return XS_CONTINUE;
    case N_RETURN: {
        Value v = v_nil();
        if (n->a && eval_fast(I, n->a, env, &v)) return XS_ERR;
        value_decref(I->retval);
        I->retval = v;
        return XS_RETURN;
    }
    case N_WITH: return exec_with(I, n, env);
    case N_IMPORT: {
        Value m;
        if (import_module(I, n, &m)) return XS_ERR;
        slot_set_take(&env->slots[n->slot], m);
        return XS_OK;
    }
    case N_BLOCK: return exec_block(I, n, env);
    default: {
        Value v;
        if (eval(I, n, env, &v)) return XS_ERR;
        value_decref(v);
        return XS_OK;
    }
    }
}

/* The statement loop; inlined into function calls (one C frame less per
 * call), reached through exec_stmts for nested blocks. */
static inline __attribute__((always_inline)) int exec_stmts_body(Interp *I, NodeList *l, Env *env, Program *prog)
{
    (void)prog;
    /* hoisting: every fn declared in this block is bound before any statement runs */
    for (int i = 0; l->has_fn && i < l->n; i++) {
        Node *s = l->items[i];
        if (s->kind != N_FNDECL) continue;
        Value f;
        if (make_closure(I, s->a, env, &f)) return XS_ERR;
        slot_set_take(&env->slots[s->slot], f);
    }
    if (__builtin_expect(I->tracer != NULL, 0)) return interp_exec_rest(I, l, 0, env);
    for (int i = 0; i < l->n; i++) {
        Node *s = l->items[i];
        int r;
        /* the two statements of every small function, without a call to exec */
        if (s->kind == N_RETURN) {
            Value v = v_nil();
            if (s->a && eval_fast(I, s->a, env, &v)) return XS_ERR;
            value_decref(I->retval);
            I->retval = v;
            return XS_RETURN;
        } else if (s->kind == N_IF) {
            bool t = false;
            if (eval_cond(I, s->a, env, &t)) return XS_ERR;
            if (t) r = exec_stmts(I, &s->b->list, env, prog);
            else if (!s->c) r = XS_OK;
            else r = s->c->kind == N_IF ? exec(I, s->c, env) : exec_stmts(I, &s->c->list, env, prog);
        } else {
            r = exec(I, s, env);
        }
        if (r != XS_OK) return r;
    }
    return XS_OK;
}

static int exec_stmts(Interp *I, NodeList *l, Env *env, Program *prog)
{
    return exec_stmts_body(I, l, env, prog);
}

/* --- programs ------------------------------------------------------------------------ */

static void globals_grow(Interp *I)
{
    Env *g = I->globals;
    int need = I->global_scope->fn->nslots;
    if (need <= g->nslots) return;
    Value *slots = xmalloc(sizeof(Value) * (size_t)need);
    memcpy(slots, g->slots, sizeof(Value) * (size_t)g->nslots);
    for (int i = g->nslots; i < need; i++) slots[i] = v_undefined();
    if (g->slots != g->inline_slots) free(g->slots);
    g->slots = slots;
    g->nslots = need;
}

/* Resolve and run a parsed program in the current globals. */
void interp_globals_grow(Interp *I) { globals_grow(I); }

int eval_program(Interp *I, Program *p, bool echo)
{
    if (resolve_program(I, p->root, I->repl)) { globals_grow(I); return -1; }
    globals_grow(I);
    Program *saved = I->cur_prog;
    I->cur_prog = p;
    NodeList *l = &p->root->list;
    int r = XS_OK;
    if (echo && l->n > 0 && l->items[l->n - 1]->kind == N_EXPR) {
        NodeList head = *l;
        head.n--;
        r = exec_stmts(I, &head, I->globals, p);
        if (r == XS_OK) {
            Value v;
            if (eval(I, l->items[l->n - 1]->a, I->globals, &v)) r = XS_ERR;
            else {
                if (v.kind != V_NIL && interp_echo_hook) {
                    interp_echo_hook(I, v);
                } else if (v.kind != V_NIL) {
                    char *s = value_echo_repr(v);
                    printf("%s\n", s);
                    free(s);
                }
                value_decref(v);
            }
        }
    } else {
        r = exec_stmts(I, l, I->globals, p);
    }
    I->cur_prog = saved;
    return r == XS_ERR ? -1 : 0;
}

char *closure_repr(Obj *o)
{
    Closure *c = (Closure *)o;
    const char *file = c->fn->loc.src ? c->fn->loc.src->name : "?";
    char *s = NULL;
    if (asprintf(&s, "<fn %s at %s:%d>", c->name, file, c->fn->loc.line) < 0) return xstrdup("<fn>");
    return s;
}

/* --- modules ----------------------------------------------------------------------- */

static char *exe_dir(void)
{
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return NULL;
    buf[n] = 0;
    char *slash = strrchr(buf, '/');
    if (!slash) return NULL;
    *slash = 0;
    return xstrdup(buf);
}

static bool file_exists(const char *p)
{
    FILE *f = fopen(p, "r");
    if (!f) return false;
    fclose(f);
    return true;
}

/* The folders import searches, in order: the stdlib (next to the binary
 * in a build tree, else the installed one), the script's folder, then each
 * folder of TFE_PATH. Fills dirs (the caller frees each); returns how many.
 * data_dir() (builtins_io.c) finds the bundled data sets from them. */
int module_search_dirs(Interp *I, char **dirs, int cap)
{
    int nd = 0;
    char *ed = exe_dir();
    if (ed) {
        char *d;
        if (asprintf(&d, "%s/stdlib", ed) >= 0) dirs[nd++] = d;
        free(ed);
    }
    dirs[nd++] = xstrdup(TFE_STDLIB_DIR);
    dirs[nd++] = xstrdup(I->script_dir ? I->script_dir : ".");
    const char *tp = getenv("TFE_PATH");
    if (tp && *tp) {
        char *copy = xstrdup(tp), *save = NULL;
        for (char *tok = strtok_r(copy, ":", &save); tok && nd < cap; tok = strtok_r(NULL, ":", &save))
            dirs[nd++] = xstrdup(tok);
        free(copy);
    }
    /* one folder named twice (the build tree's stdlib again in TFE_PATH)
     * is searched, and listed in a not-found error, once */
    int kept = 0;
    for (int i = 0; i < nd; i++) {
        bool dup = false;
        char *ri = realpath(dirs[i], NULL);
        for (int j = 0; j < kept && !dup; j++) {
            char *rj = realpath(dirs[j], NULL);
            dup = ri && rj ? !strcmp(ri, rj) : !strcmp(dirs[i], dirs[j]);
            free(rj);
        }
        free(ri);
        if (dup) free(dirs[i]);
        else dirs[kept++] = dirs[i];
    }
    return kept;
}

/* Whether folder d is the stdlib's: the installed one, the build tree's
 * next to the binary (built), or the source tree's, which a build in
 * another folder (make distcheck's) finds through TFE_PATH; compared as
 * real paths (TFE_PATH may hold "sub/../../stdlib"). */
static bool is_stdlib_dir(const char *d, const char *built)
{
    const char *known[] = {TFE_STDLIB_DIR, built, TFE_SRC_STDLIB_DIR};
    char *rd = realpath(d, NULL);
    bool yes = false;
    for (size_t i = 0; i < sizeof known / sizeof *known && !yes; i++) {
        if (!known[i]) continue;
        char *rk = realpath(known[i], NULL);
        yes = rd && rk ? !strcmp(rd, rk) : !strcmp(d, known[i]);
        free(rk);
    }
    free(rd);
    return yes;
}

/* import nn: the first of module_search_dirs holding nn.tfe; *library:
 * found in the stdlib's folder (the build tree's or the installed one). */
static char *find_module(Interp *I, const char *name, char *searched, size_t cap, bool *library)
{
    char *dirs[64];
    int nd = module_search_dirs(I, dirs, 63);
    char *found = NULL, *ed = exe_dir(), *built = NULL;
    if (ed && asprintf(&built, "%s/stdlib", ed) < 0) built = NULL;
    free(ed);
    searched[0] = 0;
    *library = false;
    for (int i = 0; i < nd; i++) {
        char *p;
        if (!found && asprintf(&p, "%s/%s.tfe", dirs[i], name) >= 0) {
            if (file_exists(p)) {
                found = p;
                *library = is_stdlib_dir(dirs[i], built);
            } else {
                free(p);
            }
        }
        size_t len = strlen(searched);
        snprintf(searched + len, cap - len, "%s%s", len ? ", " : "", dirs[i]);
        free(dirs[i]);
    }
    free(built);
    return found;
}

/* "mtime size" of a file, to tell an edited module from the one imported
 * (nanoseconds and the size: two edits within a second differ too). */
static void file_stamp(const char *path, char *buf, size_t n)
{
    struct stat st;
    if (stat(path, &st) != 0) snprintf(buf, n, "?");
    else snprintf(buf, n, "%lld.%09ld %lld", (long long)st.st_mtim.tv_sec, (long)st.st_mtim.tv_nsec,
                  (long long)st.st_size);
}

int import_module(Interp *I, Node *n, Value *out)
{
    char *path = NULL;
    bool library = false;
    if (n->is_path) {
        const char *base = n->loc.src && n->loc.src->dir ? n->loc.src->dir : ".";
        if (n->str[0] == '/') path = xstrdup(n->str);
        else if (asprintf(&path, "%s/%s", base, n->str) < 0) path = NULL;
    } else {
        char searched[2048];
        path = find_module(I, n->str, searched, sizeof searched, &library);
        if (!path) {
            static const char *const python[] = { "numpy", "torch", "tensorflow", "jax", "math", "random", NULL };
            for (int i = 0; python[i]; i++)
                if (strcmp(n->str, python[i]) == 0)
                    return raise_at(I, n->loc, "module '%s' not found: tfe needs no Python modules (tensors, their "
                                    "ops and random numbers are built in, e.g. zeros((2, 3)), matmul(a, b), "
                                    "randn((3,)); docs/reference.md lists them)", n->str);
            return raise_at(I, n->loc, "module '%s' not found (searched: %s)", n->str, searched);
        }
    }
    char *real = realpath(path, NULL);
    const char *key = real ? real : path;
    Value *cached = record_get(I->modules, key, strlen(key));
    char stamp[96];
    if (cached && cached->kind == V_MODULE && I->repl) {
        /* in the REPL, a module whose file was edited since is imported again */
        Value *old = record_get(I->module_stamps, key, strlen(key));
        file_stamp(key, stamp, sizeof stamp);
        if (old && old->kind == V_STR && strcmp(((Str *)old->u.o)->s, stamp) != 0) cached = NULL;
    }
    if (cached && (cached->kind == V_NIL || cached->kind == V_MODULE)) {
        /* nil marks a module whose import is still running */
        int rc = 0;
        if (cached->kind == V_NIL) rc = raise_at(I, n->loc, "circular import of '%s'", n->str);
        else { value_incref(*cached); *out = *cached; }
        free(real);
        free(path);
        return rc;
    }
    /* A module runs once per process, eagerly, where the import first
     * runs. Inside a conditional or loop on a traced tensor, traced
     * without values (both branches, the body whatever its trip count),
     * that place is not known: the error makes it run at trace time
     * instead (stage/trace_cf.c, give_up), where the import runs or not,
     * as eagerly. It stays an error only where that cannot be. */
    if (trace_recording(I) && I->tracer->symbolic) {
        free(real);
        free(path);
        return raise_at(I, n->loc, "module '%s' is imported for the first time inside a staged conditional or "
                        "loop on a traced tensor, where it is not known whether the import runs (import it "
                        "before the conditional or loop, or at the top of the program)", n->str);
    }
    Source *src = source_from_file(path);
    if (!src) {
        int rc = raise_at(I, n->loc, "cannot open module '%s': %s", n->str, strerror(errno));
        free(real);
        free(path);
        return rc;
    }
    src->library = library;
    record_set_take(I->modules, key, strlen(key), v_nil());
    ParseError pe;
    Node *root = parse_program(src, &pe);
    int rc = 0;
    Record *mod = NULL;
    if (!root) {
        rc = raise_msg_at(I, pe.loc, pe.msg);
    } else {
        Program *p = xcalloc(1, sizeof(Program));
        p->refcount = 1;
        p->src = src;
        source_incref(src);
        p->root = root;
        /* run the module in globals of its own; under a trace (an import
         * inside a staged function), as at the top of the program: its
         * code is no part of the graph, and its values are real ones */
        TraceAside aside;
        trace_set_aside(I, &aside);
        /* (and the place of the code running goes back to the import: the
         * module's Source may be freed below, when nothing keeps it) */
        Loc saved_loc = I->cur_loc;
        Scope *saved_scope = I->global_scope;
        Env *saved_globals = I->globals;
        I->global_scope = global_scope_new();
        I->globals = env_new(I, 0, NULL);
        rc = eval_program(I, p, false);
        if (!rc) {
            mod = record_new();
            mod->h.kind = V_MODULE;
            const char *slash = strrchr(n->str, '/');
            mod->module_name = xstrdup(slash ? slash + 1 : n->str);
            mod->module_path = xstrdup(key);
            char *dot = strrchr(mod->module_name, '.');
            if (dot && strcmp(dot, ".tfe") == 0) *dot = 0;
            Scope *g = I->global_scope;
            for (int i = 0; i < g->n; i++) {
                Value v = I->globals->slots[g->slots[i]];
                if (is_undefined(v)) continue;
                value_incref(v);
                record_set_take(mod, g->names[i], strlen(g->names[i]), v);
            }
        }
        global_scope_free(I->global_scope);
        env_decref(I->globals);
        I->global_scope = saved_scope;
        I->globals = saved_globals;
        trace_put_back(I, &aside);
        I->cur_loc = saved_loc;
        program_decref(p);
    }
    source_decref(src);
    if (mod) {
        value_incref(v_obj(V_MODULE, mod));
        record_set_take(I->modules, key, strlen(key), v_obj(V_MODULE, mod));
        file_stamp(key, stamp, sizeof stamp);
        record_set_take(I->module_stamps, key, strlen(key), v_cstr(stamp));
        *out = v_obj(V_MODULE, mod);
    } else {
        /* forget the failed import so a corrected module can be imported again */
        Value *slot = record_get(I->modules, key, strlen(key));
        if (slot) { slot->kind = V_SCALAR; slot->dtype = TFE_BOOL; slot->u.i = 0; }
    }
    free(real);
    free(path);
    return rc ? -1 : 0;
}
