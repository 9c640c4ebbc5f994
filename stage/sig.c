/* sig.c — flattening values into signatures and leaves, and rebuilding them. */
#include <stdlib.h>
#include <string.h>
#include "stage/sig.h"
#include "util/xalloc.h"

void sig_free(SigBuf *s)
{
    free(s->b);
    free(s->dims);
    *s = (SigBuf){0};
}

void sig_copy(SigBuf *dst, const SigBuf *src)
{
    *dst = (SigBuf){0};
    dst->cap = src->n ? src->n : 1;
    dst->b = xmalloc(dst->cap);
    mem_copy(dst->b, src->b, src->n);
    dst->n = src->n;
    dst->capd = src->nd ? src->nd : 1;
    dst->dims = xmalloc(sizeof *dst->dims * (size_t)dst->capd);
    mem_copy(dst->dims, src->dims, sizeof *dst->dims * (size_t)src->nd);
    dst->nd = src->nd;
}

void leaves_free(Leaves *l)
{
    for (int i = 0; i < l->n; i++) tensor_decref(l->t[i]);
    if (l->heap || !l->cap) free(l->t);
    *l = (Leaves){0};
}

void leaves_push(Leaves *l, tfe_tensor *t)
{
    if (l->n == l->cap) {
        int ncap = l->cap ? l->cap * 2 : 8;
        tfe_tensor **nt = xmalloc(sizeof *nt * (size_t)ncap);
        mem_copy(nt, l->t, sizeof *nt * (size_t)l->n);
        if (l->heap || !l->cap) free(l->t);
        l->t = nt;
        l->cap = ncap;
        l->heap = true;
    }
    l->t[l->n++] = t;
}

static void put(SigBuf *s, const void *p, size_t n)
{
    if (s->n + n > s->cap) {
        s->cap = (s->n + n) * 2 + 64;
        s->b = xrealloc(s->b, s->cap);
    }
    mem_copy(s->b + s->n, p, n);
    s->n += n;
}

static void put_tag(SigBuf *s, char tag) { put(s, &tag, 1); }

static void put_dims(SigBuf *s, int rank, const int64_t *shape)
{
    if (s->nd + rank > s->capd) {
        s->capd = (s->nd + rank) * 2 + 16;
        s->dims = xrealloc(s->dims, sizeof *s->dims * (size_t)s->capd);
    }
    if (rank > 0) mem_copy(s->dims + s->nd, shape, sizeof *shape * (size_t)rank); /* dims may be NULL */
    s->nd += rank;
}

static void flatten(Value v, SigBuf *s, Leaves *lv, int mode, int depth);

void sig_flatten(Value v, SigBuf *s, Leaves *lv, int mode) { flatten(v, s, lv, mode, 0); }

static void flatten(Value v, SigBuf *s, Leaves *lv, int mode, int depth)
{
    if (depth > SIG_MAX_DEPTH) {
        s->too_deep = true;
        return;
    }
    switch ((ValueKind)v.kind) {
    case V_SCALAR:
        if (v.dtype == TFE_BOOL) {
            put_tag(s, v.u.i ? 'T' : 'F');
            break;
        }
        /* a float literal not exact in float32 (v.lit) is a constant by
         * value too, in and out: a tensor leaf would round it */
        if ((mode == SIG_INPUT && depth > 0) || v.lit) {
            put_tag(s, 'v');
            put(s, &v.dtype, 1);
            put(s, &v.weak, 1);
            put(s, &v.lit, 1);
            put(s, &v.u.i, sizeof v.u.i);
            break;
        }
        if (mode == SIG_OUTPUT) { /* a result: a number is a 0-d tensor like any other */
            char hdr[3] = {'t', (char)v.dtype, 0};
            put(s, hdr, 3);
        } else {
            put_tag(s, 'n');
            put(s, &v.dtype, 1);
            put(s, &v.weak, 1);
        }
        if (lv) leaves_push(lv, value_to_tensor(v));
        break;
    case V_TENSOR: {
        tfe_tensor *t = v.u.t;
        if (mode == SIG_OUTPUT) { /* results: dtype and rank (weak and dims may differ) */
            char hdr[3] = {'t', (char)t->dtype, (char)t->rank};
            put(s, hdr, 3);
            if (lv) {
                tensor_incref(t);
                leaves_push(lv, t);
            }
            break;
        }
        /* the same tensor object twice: which earlier leaf it is (a graph
         * traced for f(x, x) reads one input for both) */
        for (int i = 0; lv && i < lv->n; i++)
            if (lv->t[i] == t) {
                put_tag(s, 'd');
                put(s, &i, sizeof i);
                break;
            }
        /* a softmax's or sigmoid's result is another input for a loss's check_logits */
        char hdr[4] = {'t', (char)t->dtype, (char)(t->weak | t->softmax_out << 1 | t->sigmoid_out << 2), (char)t->rank};
        put(s, hdr, 4);
        /* and a gradient's variable, for an optimizer's check_grads */
        put(s, &t->grad_for, sizeof t->grad_for);
        int dev = t->storage ? t->storage->device : 0;
        put(s, &dev, sizeof dev);
        put_dims(s, t->rank, t->shape);
        if (lv) {
            tensor_incref(t);
            leaves_push(lv, t);
        }
        break;
    }
    case V_NIL: put_tag(s, 'z'); break;
    case V_STR: {
        Str *str = (Str *)v.u.o;
        put_tag(s, 's');
        put(s, &str->len, sizeof str->len);
        put(s, str->s, str->len);
        break;
    }
    case V_RANGE: {
        Range *r = (Range *)v.u.o;
        put_tag(s, 'r');
        put(s, &r->start, sizeof(int64_t) * 3);
        break;
    }
    case V_TUPLE: case V_LIST: {
        Seq *q = (Seq *)v.u.o;
        /* a fresh default list (TRACE_ID_FRESH) is not the caller's: its
         * trace may mutate it, so a list passed in must not match it */
        put_tag(s, v.kind == V_TUPLE ? '(' : q->trace_id == TRACE_ID_FRESH ? ']' : '[');
        put(s, &q->n, sizeof q->n);
        for (int i = 0; i < q->n; i++) flatten(q->items[i], s, lv, mode, depth + 1);
        break;
    }
    case V_RECORD: {
        Record *r = (Record *)v.u.o;
        put_tag(s, r->trace_id == TRACE_ID_FRESH ? '}' : '{');
        put(s, &r->n, sizeof r->n);
        for (int i = 0; i < r->n; i++) {
            put(s, &r->keys[i]->len, sizeof r->keys[i]->len);
            put(s, r->keys[i]->s, r->keys[i]->len);
            flatten(r->vals[i], s, lv, mode, depth + 1);
        }
        break;
    }
    default: /* functions, builtins, modules, objects: identity */
        put_tag(s, 'p');
        put(s, &v.u.o, sizeof v.u.o);
        break;
    }
}

static int count_leaves(Value v)
{
    switch ((ValueKind)v.kind) {
    case V_SCALAR: return v.dtype == TFE_BOOL || v.lit ? 0 : 1;
    case V_TENSOR: return 1;
    case V_TUPLE: case V_LIST: {
        Seq *q = (Seq *)v.u.o;
        int n = 0;
        for (int i = 0; i < q->n; i++) n += count_leaves(q->items[i]);
        return n;
    }
    case V_RECORD: {
        Record *r = (Record *)v.u.o;
        int n = 0;
        for (int i = 0; i < r->n; i++) n += count_leaves(r->vals[i]);
        return n;
    }
    default: return 0;
    }
}

static Value rebuild(Value tmpl, tfe_tensor *const *leaves, int *k, bool unbox, uint32_t stamp, SigMemo *m)
{
    switch ((ValueKind)tmpl.kind) {
    case V_SCALAR:
        if (tmpl.dtype == TFE_BOOL || tmpl.lit) return tmpl; /* by value (flatten) */
        /* fall through */
    case V_TENSOR: {
        tfe_tensor *t = leaves[(*k)++];
        tensor_incref(t);
        /* a number in the template is one eager code holds unboxed, even
         * while a tape records (its arithmetic on numbers stays numbers);
         * a traced one stays a tensor (the trace knows it by identity) */
        if (unbox && tmpl.kind == V_SCALAR && !t->node) return value_number_take(t);
        /* a watch's box (trace_unbox_numbers): a tensor in eager code too */
        if (tmpl.kind == V_TENSOR && tmpl.boxed) return v_tensor_take(t);
        return unbox ? value_from_tensor_take(t) : v_tensor_take(t);
    }
    case V_TUPLE: case V_LIST: case V_RECORD:
        for (int i = 0; m && i < m->n; i++)
            if (m->from[i] == (const void *)tmpl.u.o) { /* the same object again: its leaves again too */
                *k += count_leaves(tmpl);
                value_incref(m->to[i]);
                return m->to[i];
            }
        break;
    default:
        value_incref(tmpl);
        return tmpl;
    }
    Value out;
    if (tmpl.kind == V_RECORD) {
        Record *r = (Record *)tmpl.u.o;
        Record *n = record_new();
        n->trace_id = stamp;
        for (int i = 0; i < r->n; i++)
            record_set_take(n, r->keys[i]->s, r->keys[i]->len, rebuild(r->vals[i], leaves, k, unbox, stamp, m));
        out = v_obj(V_RECORD, n);
    } else {
        Seq *q = (Seq *)tmpl.u.o;
        Seq *n = seq_new(q->n);
        n->trace_id = stamp;
        for (int i = 0; i < q->n; i++) seq_push_take(n, rebuild(q->items[i], leaves, k, unbox, stamp, m));
        if (tmpl.kind == V_TUPLE) n->h.kind = V_TUPLE;
        out = v_obj((ValueKind)tmpl.kind, n);
    }
    if (m) sig_memo_add(m, tmpl.u.o, out);
    return out;
}

const Value *sig_memo_find(const SigMemo *m, const void *from)
{
    for (int i = 0; i < m->n; i++)
        if (m->from[i] == from) return &m->to[i];
    return NULL;
}

Value sig_copy_shared(Value v, SigMemo *m)
{
    if (!(v.kind == V_TUPLE || v.kind == V_LIST || v.kind == V_RECORD)) {
        value_incref(v);
        return v;
    }
    const Value *seen = sig_memo_find(m, v.u.o);
    if (seen) {
        value_incref(*seen);
        return *seen;
    }
    Value out;
    if (v.kind == V_RECORD) {
        Record *r = (Record *)v.u.o;
        Record *n = record_new();
        n->trace_id = r->trace_id;
        out = v_obj(V_RECORD, n);
        sig_memo_add(m, v.u.o, out);
        for (int i = 0; i < r->n; i++) record_set_take(n, r->keys[i]->s, r->keys[i]->len, sig_copy_shared(r->vals[i], m));
    } else {
        Seq *q = (Seq *)v.u.o;
        Seq *n = seq_new(q->n);
        n->trace_id = q->trace_id;
        n->h.kind = q->h.kind;
        out = v_obj((ValueKind)v.kind, n);
        sig_memo_add(m, v.u.o, out);
        for (int i = 0; i < q->n; i++) seq_push_take(n, sig_copy_shared(q->items[i], m));
    }
    return out;
}

void sig_memo_add(SigMemo *m, const void *from, Value to)
{
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 8;
        m->from = xrealloc(m->from, sizeof *m->from * (size_t)m->cap);
        m->to = xrealloc(m->to, sizeof *m->to * (size_t)m->cap);
    }
    m->from[m->n] = from;
    value_incref(to);
    m->to[m->n++] = to;
}

Value sig_rebuild(Value tmpl, tfe_tensor *const *leaves, int *k, bool unbox, uint32_t stamp)
{
    return rebuild(tmpl, leaves, k, unbox, stamp, NULL);
}

Value sig_rebuild_shared(Value tmpl, tfe_tensor *const *leaves, int *k, bool unbox, uint32_t stamp, SigMemo *m)
{
    return rebuild(tmpl, leaves, k, unbox, stamp, m);
}

void sig_memo_free(SigMemo *m)
{
    for (int i = 0; i < m->n; i++) value_decref(m->to[i]);
    free(m->from);
    free(m->to);
    *m = (SigMemo){0};
}

Value sig_copy_containers(Value v)
{
    if (v.kind == V_TUPLE || v.kind == V_LIST) {
        Seq *q = (Seq *)v.u.o;
        Seq *n = seq_new(q->n);
        n->trace_id = q->trace_id;
        for (int i = 0; i < q->n; i++) seq_push_take(n, sig_copy_containers(q->items[i]));
        n->h.kind = q->h.kind;
        return v_obj((ValueKind)v.kind, n);
    }
    if (v.kind == V_RECORD) {
        Record *r = (Record *)v.u.o;
        Record *n = record_new();
        n->trace_id = r->trace_id;
        for (int i = 0; i < r->n; i++)
            record_set_take(n, r->keys[i]->s, r->keys[i]->len, sig_copy_containers(r->vals[i]));
        return v_obj(V_RECORD, n);
    }
    value_incref(v);
    return v;
}

static bool is_leaf(Value v) { return v.kind == V_TENSOR || (v.kind == V_SCALAR && v.dtype != TFE_BOOL && !v.lit); }

static void replace_slot(Value *slot, tfe_tensor *const *leaves, int *k)
{
    if (is_leaf(*slot)) {
        tfe_tensor *t = leaves[(*k)++];
        tensor_incref(t);
        value_decref(*slot);
        *slot = v_tensor_take(t);
    } else {
        sig_replace_leaves(*slot, leaves, k);
    }
}

void sig_replace_leaves(Value v, tfe_tensor *const *leaves, int *k)
{
    if (v.kind == V_TUPLE || v.kind == V_LIST) {
        Seq *q = (Seq *)v.u.o;
        for (int i = 0; i < q->n; i++) replace_slot(&q->items[i], leaves, k);
    } else if (v.kind == V_RECORD) {
        Record *r = (Record *)v.u.o;
        for (int i = 0; i < r->n; i++) replace_slot(&r->vals[i], leaves, k);
    }
}

bool sig_same_leaf(const tfe_tensor *a, const tfe_tensor *b)
{
    return a == b || (tensor_numel(a) == 1 && sig_tensor_equal(a, b, 1));
}

bool sig_too_deep(Value v, int depth)
{
    if (depth > SIG_MAX_DEPTH) return true;
    if (v.kind == V_TUPLE || v.kind == V_LIST) {
        Seq *q = (Seq *)v.u.o;
        for (int i = 0; i < q->n; i++)
            if (sig_too_deep(q->items[i], depth + 1)) return true;
    } else if (v.kind == V_RECORD) {
        Record *r = (Record *)v.u.o;
        for (int i = 0; i < r->n; i++)
            if (sig_too_deep(r->vals[i], depth + 1)) return true;
    }
    return false;
}

bool sig_has_function(Value v)
{
    switch ((ValueKind)v.kind) {
    case V_FN: return true;
    case V_TUPLE: case V_LIST: {
        Seq *q = (Seq *)v.u.o;
        for (int i = 0; i < q->n; i++)
            if (sig_has_function(q->items[i])) return true;
        return false;
    }
    case V_RECORD: {
        Record *r = (Record *)v.u.o;
        for (int i = 0; i < r->n; i++)
            if (sig_has_function(r->vals[i])) return true;
        return false;
    }
    default: return false;
    }
}

void sig_hold(Value v, Value **held, int *nheld)
{
    switch ((ValueKind)v.kind) {
    case V_NIL: case V_SCALAR: case V_TENSOR: case V_STR: case V_RANGE: return;
    case V_TUPLE: case V_LIST: {
        Seq *q = (Seq *)v.u.o;
        for (int i = 0; i < q->n; i++) sig_hold(q->items[i], held, nheld);
        return;
    }
    case V_RECORD: {
        Record *r = (Record *)v.u.o;
        for (int i = 0; i < r->n; i++) sig_hold(r->vals[i], held, nheld);
        return;
    }
    default:
        *held = xrealloc(*held, sizeof **held * (size_t)(*nheld + 1));
        value_incref(v);
        (*held)[(*nheld)++] = v;
    }
}
