/* value.c — construction, reference counting and equality of interpreter values,
 * boxing scalars to tensors, and the tracked-object list that breaks cycles. */
#include <stdlib.h>
#include <string.h>
#include <stdio.h>
#include "interp/internal.h"
#include "stage/staged.h"
#include "stage/trace.h"
#include "tensor/ops.h"
#include "tensor/grad.h"
#include "util/xalloc.h"

Interp *tfe_current_interp;

/* --- cycle tracking ---------------------------------------------------------- */

void track(TrackLink *l, Obj *o)
{
    l->obj = o;
    Interp *I = interp_current();
    if (!I) { l->prev = l->next = NULL; return; }
    TrackLink *head = &I->tracked;
    l->next = head->next;
    l->prev = head;
    head->next->prev = l;
    head->next = l;
}

void untrack(TrackLink *l)
{
    if (!l->prev) return;
    l->prev->next = l->next;
    l->next->prev = l->prev;
    l->prev = l->next = NULL;
}

static void clear_contents(Obj *o)
{
    switch (o->kind) {
    case V_LIST: case V_TUPLE: {
        Seq *s = (Seq *)o;
        int n = s->n;
        s->n = 0;
        for (int i = 0; i < n; i++) value_decref(s->items[i]);
        break;
    }
    case V_RECORD: case V_MODULE: {
        Record *r = (Record *)o;
        for (int i = 0; i < r->n; i++) {
            Value v = r->vals[i];
            r->vals[i] = v_nil();
            value_decref(v);
        }
        break;
    }
    case V_FN: {
        Closure *c = (Closure *)o;
        Env *e = c->env;
        c->env = NULL;
        if (e) env_decref(e);
        stage_cache_free(c);
        break;
    }
    case OBJ_ENV: {
        Env *e = (Env *)o;
        for (int i = 0; i < e->nslots; i++) {
            Value v = e->slots[i];
            e->slots[i] = v_nil();
            value_decref(v);
        }
        Env *p = e->parent;
        e->parent = NULL;
        if (p) env_decref(p);
        break;
    }
    default: break;
    }
}

/* Hold every tracked object, empty them all (which breaks every cycle), then
 * let go: each is freed as its count drops to zero. */
void tracked_clear_all(Interp *I)
{
    int n = 0;
    for (TrackLink *l = I->tracked.next; l != &I->tracked; l = l->next) n++;
    Obj **objs = xmalloc(sizeof(Obj *) * (size_t)(n ? n : 1));
    int k = 0;
    for (TrackLink *l = I->tracked.next; l != &I->tracked; l = l->next) {
        objs[k++] = l->obj;
        l->obj->refcount++;
    }
    for (int i = 0; i < k; i++) clear_contents(objs[i]);
    for (int i = 0; i < k; i++) {
        Obj *o = objs[i];
        if (o->kind == OBJ_ENV) env_decref((Env *)o);
        else value_decref(v_obj((ValueKind)o->kind, o));
    }
    free(objs);
}

/* --- scalars and tensors ------------------------------------------------------ */

Value v_float(double f, tfe_dtype dt)
{
    Value v = {0};
    v.kind = V_SCALAR;
    v.dtype = (uint8_t)dt;
    v.u.f = dt == TFE_FLOAT32 ? (double)(float)f : f;
    return v;
}

Value v_tensor_take(tfe_tensor *t)
{
    Value v = {0};
    v.kind = V_TENSOR;
    v.u.t = t;
    return v;
}

tfe_tensor *value_to_tensor(Value v)
{
    if (v.kind == V_TENSOR) {
        tensor_incref(v.u.t);
        return v.u.t;
    }
    if (v.kind == V_OBJECT) {
        const ObjectClass *cls = ((Object *)v.u.o)->cls;
        if (!cls->to_tensor) return NULL;
        /* a variable read in staged code is a node that reads it at every
         * call: its to_tensor makes the node (builtins_autodiff.c, var_read) */
        return cls->to_tensor(v.u.o);
    }
    if (v.kind != V_SCALAR) return NULL;
    tfe_tensor *t;
    if (dtype_is_float((tfe_dtype)v.dtype)) t = tensor_from_f64(scalar_f(v), (tfe_dtype)v.dtype);
    else t = tensor_from_i64(v.u.i, (tfe_dtype)v.dtype);
    if (t) t->weak = v.weak;
    return t;
}

tfe_tensor *value_to_tensor_for(Value v, tfe_dtype dt)
{
    if (v.kind != V_SCALAR || !v.lit || dt != TFE_FLOAT64) return value_to_tensor(v);
    tfe_tensor *t = tensor_from_f64(v.u.f, TFE_FLOAT64);
    if (t) t->weak = true; /* still weak: it takes the other operand's dtype */
    return t;
}

Value value_from_tensor_take(tfe_tensor *t)
{
    /* while a tape records, results keep their identity (the tape knows them
     * by pointer), so they stay boxed */
    if (t->rank != 0 || t->node || t->storage->device != 0 || tfe_tapes_active) return v_tensor_take(t);
    return value_number_take(t);
}

Value value_number_take(tfe_tensor *t)
{
    if (t->rank != 0 || !t->storage || t->storage->device != 0) return v_tensor_take(t);
    Value v = {0};
    v.kind = V_SCALAR;
    v.dtype = (uint8_t)t->dtype;
    v.weak = t->weak;
    switch (t->dtype) {
    case TFE_FLOAT32: v.u.f = *(float *)tensor_data(t); break;
    case TFE_FLOAT64: v.u.f = *(double *)tensor_data(t); break;
    case TFE_BOOL: v.u.i = *(uint8_t *)tensor_data(t) != 0; break;
    case TFE_INT32: v.u.i = *(int32_t *)tensor_data(t); break;
    case TFE_INT64: v.u.i = *(int64_t *)tensor_data(t); break;
    default: return v_tensor_take(t);
    }
    tensor_decref(t);
    return v;
}

/* --- strings, sequences, records ------------------------------------------------ */

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

Str *str_new(const char *s, size_t len)
{
    Str *r = xmalloc(sizeof(Str) + len + 1);
    r->h.refcount = 1;
    r->h.kind = V_STR;
    r->len = len;
    if (len) memcpy(r->s, s, len);
    r->s[len] = 0;
    r->hash = hash_bytes(r->s, len);
    return r;
}

Value v_str(const char *s, size_t len) { return v_obj(V_STR, str_new(s, len)); }
Value v_cstr(const char *s) { return v_str(s, strlen(s)); }

Seq *seq_new(int cap)
{
    Seq *s = xmalloc(sizeof(Seq));
    s->h.refcount = 1;
    s->h.kind = V_LIST;
    s->n = 0;
    s->cap = cap > 0 ? cap : 0;
    s->items = s->cap ? xmalloc(sizeof(Value) * (size_t)s->cap) : NULL;
    Tracer *T = trace_current(); /* made from everywhere: no Interp at hand */
    s->trace_id = T ? T->id : 0;
    track(&s->link, &s->h);
    return s;
}

void seq_push_take(Seq *s, Value v)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 4;
        s->items = xrealloc(s->items, sizeof(Value) * (size_t)s->cap);
    }
    s->items[s->n++] = v;
}

Value value_seq_tuple(int n, const Value *items)
{
    Seq *s = seq_new(n);
    s->h.kind = V_TUPLE;
    for (int i = 0; i < n; i++) {
        value_incref(items[i]);
        s->items[i] = items[i];
    }
    s->n = n;
    return v_obj(V_TUPLE, s);
}

Seq *seq_as(Value v) { return (v.kind == V_TUPLE || v.kind == V_LIST) ? (Seq *)v.u.o : NULL; }

Record *record_new(void)
{
    Record *r = xcalloc(1, sizeof(Record));
    r->h.refcount = 1;
    r->h.kind = V_RECORD;
    Tracer *T = trace_current(); /* made from everywhere: no Interp at hand */
    r->trace_id = T ? T->id : 0;
    track(&r->link, &r->h);
    return r;
}

Value *record_get(Record *r, const char *key, size_t len)
{
    for (int i = 0; i < r->n; i++)
        if (r->keys[i]->len == len && memcmp(r->keys[i]->s, key, len) == 0) return &r->vals[i];
    return NULL;
}

void record_set_take(Record *r, const char *key, size_t len, Value v)
{
    Value *slot = record_get(r, key, len);
    if (slot) {
        Value old = *slot;
        *slot = v;
        value_decref(old);
        return;
    }
    if (r->n == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 4;
        r->keys = xrealloc(r->keys, sizeof(Str *) * (size_t)r->cap);
        r->vals = xrealloc(r->vals, sizeof(Value) * (size_t)r->cap);
    }
    r->keys[r->n] = str_new(key, len);
    r->vals[r->n] = v;
    r->n++;
}

/* --- environments and closures -------------------------------------------------- */

/* Function calls make and drop an Env each: keep freed ones for reuse. */
static Env *env_freelist;
static int env_nfree;
static uint64_t env_born;

uint64_t env_next_born(void) { return env_born; }

Env *env_new(Interp *I, int nslots, Env *parent)
{
    (void)I;
    Env *e = env_freelist;
    if (e) { env_freelist = e->parent; env_nfree--; }
    else e = xmalloc(sizeof(Env));
    e->h.refcount = 1;
    e->h.kind = OBJ_ENV;
    e->nslots = nslots;
    e->slots = nslots <= 8 ? e->inline_slots : xmalloc(sizeof(Value) * (size_t)nslots);
    for (int i = 0; i < nslots; i++) e->slots[i] = v_nil();
    e->parent = parent;
    e->trace_id = I->trace_id;
    e->born = env_born++;
    if (parent) parent->h.refcount++;
    /* Envs are not tracked: only closures refer to Envs, so clearing every
     * tracked closure at exit already breaks each cycle through an Env. */
    e->link.prev = e->link.next = NULL;
    return e;
}

void env_decref(Env *e)
{
    while (e && --e->h.refcount == 0) {
        untrack(&e->link);
        for (int i = 0; i < e->nslots; i++) value_decref(e->slots[i]);
        if (e->slots != e->inline_slots) free(e->slots);
        Env *p = e->parent;
        if (env_nfree < 256) { e->parent = env_freelist; env_freelist = e; env_nfree++; }
        else free(e);
        e = p;
    }
}

Closure *closure_new(Interp *I, Node *fn, Env *env, Program *prog)
{
    (void)I;
    Closure *c = xmalloc(sizeof(Closure));
    c->h.refcount = 1;
    c->h.kind = V_FN;
    c->fn = fn;
    c->env = env;
    if (env) env->h.refcount++;
    c->prog = prog;
    if (prog) prog->refcount++;
    const char *bound = ((FnInfo *)fn->info)->bound_name;
    c->name = fn->str ? fn->str : bound ? bound : "<lambda>";
    c->stage = NULL;
    c->stage_forced = ((FnInfo *)fn->info)->is_staged; /* @staged, or --stage-all */
    c->host_forced = c->stage_by_call = false;
    track(&c->link, &c->h);
    return c;
}

void program_decref(Program *p)
{
    if (p && --p->refcount == 0) {
        ast_free(p->root);
        source_decref(p->src);
        free(p);
    }
}

/* --- release ------------------------------------------------------------------ */

static void obj_release(Obj *o);

/* Objects whose last reference went while another was being released:
 * released by the outermost call, one after another, so that freeing a long
 * chain (a linked list of records, 300,000 links) does not recurse once per
 * link and run the C stack out. When value_decref returns, all is freed. */
static _Thread_local Obj **dying;
static _Thread_local int ndying, capdying;
static _Thread_local bool releasing;

void value_decref_slow(Value v)
{
    if (v.kind == V_TENSOR) { tensor_decref(v.u.t); return; }
    if (!v_is_obj(v)) return;
    Obj *o = v.u.o;
    if (--o->refcount > 0) return;
    if (releasing) {
        if (ndying == capdying) {
            capdying = capdying ? 2 * capdying : 64;
            dying = xrealloc(dying, sizeof *dying * (size_t)capdying);
        }
        dying[ndying++] = o;
        return;
    }
    releasing = true;
    obj_release(o);
    while (ndying > 0) obj_release(dying[--ndying]);
    releasing = false;
}

/* Free o (its count is 0), dropping its references to others. */
static void obj_release(Obj *o)
{
    switch ((ValueKind)o->kind) {
    case V_STR: case V_RANGE: free(o); break;
    case V_TUPLE: case V_LIST: {
        Seq *s = (Seq *)o;
        untrack(&s->link);
        for (int i = 0; i < s->n; i++) value_decref(s->items[i]);
        free(s->items);
        free(s);
        break;
    }
    case V_RECORD: case V_MODULE: {
        Record *r = (Record *)o;
        untrack(&r->link);
        for (int i = 0; i < r->n; i++) {
            value_decref(v_obj(V_STR, r->keys[i]));
            value_decref(r->vals[i]);
        }
        free(r->keys);
        free(r->vals);
        free(r->module_name);
        free(r->module_path);
        free(r);
        break;
    }
    case V_FN: {
        Closure *c = (Closure *)o;
        untrack(&c->link);
        stage_cache_free(c);
        if (c->env) env_decref(c->env);
        program_decref(c->prog);
        free(c);
        break;
    }
    case V_BUILTIN: {
        Builtin *b = (Builtin *)o;
        value_decref(b->self);
        free(b);
        break;
    }
    case V_OBJECT: {
        Object *ob = (Object *)o;
        if (ob->cls->free) ob->cls->free(o);
        else free(o);
        break;
    }
    case V_NIL: case V_SCALAR: case V_TENSOR: break;
    }
}

/* --- equality -------------------------------------------------------------------- */

/* Containers compared inside containers deeper than this: an error (a list
 * or record that contains itself, compared with another such: the walk
 * would never end, and ran the C stack out) */
enum { EQUAL_MAX_DEPTH = 1000 };

static bool equal_at(Value a, Value b, int *err, int depth);

/* Structural equality for ==/!= on non-tensor values, and for tensors nested in
 * containers (same shape and all elements equal). */
bool value_equal(Value a, Value b, int *err)
{
    return equal_at(a, b, err, 0);
}

static bool equal_at(Value a, Value b, int *err, int depth)
{
    if ((a.kind == V_SCALAR || a.kind == V_TENSOR) && (b.kind == V_SCALAR || b.kind == V_TENSOR)) {
        if (a.kind == V_SCALAR && b.kind == V_SCALAR) {
            bool fa = dtype_is_float((tfe_dtype)a.dtype), fb = dtype_is_float((tfe_dtype)b.dtype);
            if (!fa && !fb) return a.u.i == b.u.i;
            tfe_dtype dt = dtype_promote((tfe_dtype)a.dtype, a.weak, (tfe_dtype)b.dtype, b.weak, NULL);
            double x = fa ? scalar_f_in(a, dt) : (double)a.u.i, y = fb ? scalar_f_in(b, dt) : (double)b.u.i;
            return x == y;
        }
        tfe_tensor *ta = value_to_tensor(a), *tb = value_to_tensor(b);
        bool eq = false;
        if (ta->rank == tb->rank && memcmp(ta->shape, tb->shape, sizeof(int64_t) * (size_t)ta->rank) == 0) {
            tfe_tensor *e = tfe_binary(OP_EQ, ta, tb);
            if (!e) { if (err) *err = 1; }
            else {
                tfe_attrs at;
                tfe_attrs_init(&at);
                tfe_tensor *all = tfe_call1(OP_ALL, 1, &e, &at);
                if (!all) { if (err) *err = 1; }
                else { eq = tensor_get_i64(all, 0) != 0; tensor_decref(all); }
                tensor_decref(e);
            }
        }
        tensor_decref(ta);
        tensor_decref(tb);
        return eq;
    }
    if (a.kind != b.kind) return false;
    if ((a.kind == V_TUPLE || a.kind == V_LIST || a.kind == V_RECORD) && a.u.o != b.u.o &&
        depth >= EQUAL_MAX_DEPTH) {
        tfe_error_set("==: lists or records nested more than %d deep (one that contains itself?): compare their "
                      "parts", EQUAL_MAX_DEPTH);
        if (err) *err = 1;
        return false;
    }
    switch ((ValueKind)a.kind) {
    case V_NIL: return true;
    case V_STR: {
        Str *x = (Str *)a.u.o, *y = (Str *)b.u.o;
        return x->len == y->len && memcmp(x->s, y->s, x->len) == 0;
    }
    case V_TUPLE: case V_LIST: {
        Seq *x = (Seq *)a.u.o, *y = (Seq *)b.u.o;
        if (x == y) return true;
        if (x->n != y->n) return false;
        for (int i = 0; i < x->n; i++)
            if (!equal_at(x->items[i], y->items[i], err, depth + 1)) return false;
        return true;
    }
    case V_RECORD: {
        Record *x = (Record *)a.u.o, *y = (Record *)b.u.o;
        if (x == y) return true;
        if (x->n != y->n) return false;
        for (int i = 0; i < x->n; i++) {
            Value *w = record_get(y, x->keys[i]->s, x->keys[i]->len);
            if (!w || !equal_at(x->vals[i], *w, err, depth + 1)) return false;
        }
        return true;
    }
    case V_RANGE: {
        Range *x = (Range *)a.u.o, *y = (Range *)b.u.o;
        return x->start == y->start && x->stop == y->stop && x->step == y->step;
    }
    default: return a.u.o == b.u.o;
    }
}

void *object_new(size_t size, const ObjectClass *cls)
{
    Object *o = xcalloc(1, size);
    o->h.refcount = 1;
    o->h.kind = V_OBJECT;
    o->cls = cls;
    return o;
}
