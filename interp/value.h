/* value.h — the interpreter's values: unboxed scalars and refcounted objects.
 * Ownership: a Value held in a variable, container or return slot owns one
 * reference; functions taking `Value` arguments borrow them unless their name
 * ends in _take; functions returning a Value return a new reference. */
#ifndef TFE_VALUE_H
#define TFE_VALUE_H

#include <stdbool.h>
#include <stdint.h>
#include "tensor/tensor.h"

typedef enum ValueKind {
    V_NIL,
    V_SCALAR,    /* unboxed 0-d tensor: dtype + i/f; behaves exactly like tfe_tensor 0-d */
    V_TENSOR,    /* u.t */
    V_STR,       /* u.o -> Str */
    V_TUPLE,     /* u.o -> Seq (immutable) */
    V_LIST,      /* u.o -> Seq (mutable) */
    V_RECORD,    /* u.o -> Record */
    V_FN,        /* u.o -> Closure */
    V_BUILTIN,   /* u.o -> Builtin */
    V_RANGE,     /* u.o -> Range */
    V_MODULE,    /* u.o -> Record (a module's top-level names) */
    V_OBJECT,    /* u.o -> Object with a class vtable (variables, tapes, graphs, ...) */
} ValueKind;

typedef struct Obj { int refcount; uint8_t kind; } Obj;

typedef struct Value {
    uint8_t kind;
    uint8_t dtype;  /* V_SCALAR: bool/int32/int64/float32/float64 */
    bool weak;      /* V_SCALAR: a bare literal (or result of weak operands only) */
    /* V_SCALAR float32: a float literal not exact in float32 (0.1); u.f holds
     * its exact double, which it keeps until it meets a float64 (then that
     * double is its value); anywhere else it is u.f rounded to float32
     * (scalar_f). Copies keep it; any computed value has it false. */
    bool lit;
    /* V_TENSOR in what a staged call rebuilds its result and written-back
     * bindings from (stage/sig.c): a 0-d tensor eager code holds boxed (a
     * watched number's box, a result made while a tape of the body records:
     * stage/trace.c, trace_unbox_numbers), which must stay a tensor there
     * rather than become a number. False everywhere else. */
    bool boxed;
    union {
        int64_t i;  /* bool and int scalars */
        double f;   /* float scalars (float32 kept rounded to float) */
        Obj *o;
        tfe_tensor *t;
    } u;
} Value;

/* Containers that can form reference cycles sit on the interpreter's list of
 * tracked objects (interp/value.c), so every cycle is broken at exit. */
typedef struct TrackLink { struct TrackLink *prev, *next; Obj *obj; } TrackLink;

typedef struct Str { Obj h; size_t len; uint64_t hash; char s[]; } Str;
/* trace_id: the trace that made it (0: none); staged code may mutate only
 * the lists and records its own trace made (stage/trace.c). */
/* TRACE_ID_FRESH: a list or record that a default argument made for this
 * call of a staged function and nothing else holds (docs/language.md: a
 * default is made at each call): its trace may mutate it, as one it made
 * (interp/eval.c, run_closure; the signature tells it from one passed in). */
#define TRACE_ID_FRESH UINT32_MAX
typedef struct Seq { Obj h; int n, cap; Value *items; TrackLink link; uint32_t trace_id; } Seq;
/* Records keep insertion order; printing and iteration follow it. */
/* module_name, module_path: a module's (its file's real path, what :reload
 * imports again; NULL for stdlib modules built in and plain records) */
typedef struct Record { Obj h; int n, cap; Str **keys; Value *vals; char *module_name, *module_path; TrackLink link; uint32_t trace_id; } Record;
typedef struct Range { Obj h; int64_t start, stop, step; } Range;
/* How many values a range yields. Computed unsigned: stop - start overflows
 * int64 for ranges like range(-9*10**18, 9*10**18), which then looked empty.
 * The true count always fits in uint64 (step != 0). */
static inline uint64_t range_count(const Range *r)
{
    if (r->step > 0)
        return r->stop <= r->start ? 0 : ((uint64_t)r->stop - (uint64_t)r->start - 1) / (uint64_t)r->step + 1;
    return r->stop >= r->start ? 0 : ((uint64_t)r->start - (uint64_t)r->stop - 1) / (0 - (uint64_t)r->step) + 1;
}
/* Its i-th value (i < range_count(r)), without signed overflow in i * step. */
static inline int64_t range_at(const Range *r, int64_t i)
{
    return (int64_t)((uint64_t)r->start + (uint64_t)i * (uint64_t)r->step);
}

struct Interp;
typedef struct Builtin {
    Obj h;
    const char *name;
    /* Positional args, then keyword args (names and values). Returns 0 and a
     * new reference in *out, or -1 after raising an error. */
    int (*fn)(struct Interp *I, int argc, const Value *argv, int nkw,
              Str *const *kwnames, const Value *kwvals, Value *out, void *data);
    void *data;
    Value self;     /* bound method receiver, or nil */
    /* Scalar arguments written as plain names are boxed into 0-d tensors in
     * their binding before the call (t.watch(x) needs a tensor's identity;
     * a boxed scalar behaves exactly like the unboxed one). */
    bool box_names;
    /* An effect (stage/trace.c records it as a host call that runs at every
     * call of a staged function): 1 returns nil, 2 returns a value. Set at
     * registration (BF_EFFECT, BF_EFFECT_VALUE in interp/interp.h). */
    uint8_t effect;
    /* An effect that only checks its arguments' values (it returns nil or
     * raises, and changes nothing): staged code calls it at every call, as
     * any effect, and --check-staged runs it in both runs rather than
     * matching the graph's call with the eager run's (stage/check.c), since
     * an eager run checks such values inline, without a call. */
    bool value_check;
    /* Why a staged function cannot call it (BF_NOT_STAGEABLE), or NULL. */
    const char *unstageable;
} Builtin;

/* Objects with behaviour (variables, tapes, graphs, devices...). */
typedef struct ObjectClass {
    const char *name;
    void (*free)(Obj *o);
    /* "<variable w float32 (3, 1)>"; malloc'd string */
    char *(*repr)(Obj *o);
    /* Field or method: 0 ok, 1 no such field (caller raises), -1 error raised */
    int (*getattr)(struct Interp *I, Obj *o, const char *name, Value *out);
    /* Context managers (`with x as y { }`): enter gives the `as` value; exit
     * runs when the block ends, also after an error (then `failed` is true). */
    int (*enter)(struct Interp *I, Obj *o, Value *as);
    int (*exit)(struct Interp *I, Obj *o, bool failed);
    /* Objects that stand for a tensor in ops (variables): its current value
     * as a new reference; value_to_tensor uses it. */
    tfe_tensor *(*to_tensor)(Obj *o);
} ObjectClass;
typedef struct Object { Obj h; const ObjectClass *cls; } Object;
/* A new object of class cls, size bytes (a struct whose first member is an
 * Object), zeroed, with one reference (the caller's). */
void *object_new(size_t size, const ObjectClass *cls);

static inline Value v_nil(void) { Value v = {0}; v.kind = V_NIL; return v; }
static inline Value v_bool(bool b) { Value v = {0}; v.kind = V_SCALAR; v.dtype = TFE_BOOL; v.u.i = b; return v; }
static inline Value v_int(int64_t i) { Value v = {0}; v.kind = V_SCALAR; v.dtype = TFE_INT64; v.u.i = i; return v; }
Value v_float(double f, tfe_dtype dt); /* rounds to float32 when dt is float32 */
/* A float scalar's value as its dtype holds it (a literal rounded to
 * float32), and as it is in an op of dtype dt (exact in a float64 one). */
static inline double scalar_f(Value v) { return v.lit ? (double)(float)v.u.f : v.u.f; }
static inline double scalar_f_in(Value v, tfe_dtype dt) { return dt == TFE_FLOAT64 ? v.u.f : scalar_f(v); }
/* v as a parameter receives it: a float literal rounded to float32 (numbers
 * passed to functions are 0-d tensors, so f(0.1) and f(0.2) share a trace). */
static inline Value value_unlit(Value v)
{
    if (v.kind == V_SCALAR && v.lit) {
        v.u.f = (double)(float)v.u.f;
        v.lit = false;
    }
    return v;
}
/* A float literal's exact value as a tensor when it meets dtype dt: float64
 * (weak, exact) when dt is float64, else value_to_tensor (new ref). */
tfe_tensor *value_to_tensor_for(Value v, tfe_dtype dt);
static inline Value v_obj(ValueKind k, void *o) { Value v = {0}; v.kind = k; v.u.o = (Obj *)o; return v; }
Value v_tensor_take(tfe_tensor *t);    /* takes the reference */

static inline bool v_is_obj(Value v) { return v.kind >= V_STR; }
static inline void value_incref(Value v) {
    if (v.kind == V_TENSOR) v.u.t->refcount++;
    else if (v_is_obj(v)) v.u.o->refcount++;
}
void value_decref_slow(Value v);
static inline void value_decref(Value v) { if (v.kind >= V_TENSOR) value_decref_slow(v); }

Str *str_new(const char *s, size_t len);
Value v_str(const char *s, size_t len);
Value v_cstr(const char *s);
Seq *seq_new(int cap);
void seq_push_take(Seq *s, Value v);
Record *record_new(void);
/* Record fields: get returns a borrowed pointer or NULL; set takes v. */
Value *record_get(Record *r, const char *key, size_t len);
void record_set_take(Record *r, const char *key, size_t len, Value v);

/* Boxing: a scalar or tensor value as a tensor (new ref); NULL for others. */
tfe_tensor *value_to_tensor(Value v);
/* A 0-d tensor result becomes an unboxed scalar again (takes the ref). */
Value value_from_tensor_take(tfe_tensor *t);
/* The same, tape or not: a number eager code holds unboxed (a staged call's
 * result that eager arithmetic on numbers made; stage/staged.c). */
Value value_number_take(tfe_tensor *t);

/* Printing per docs/language.md "Values" (interp/print.c). str: how print() shows the
 * value (strings bare); repr: how it shows inside containers (strings quoted).
 * Both return malloc'd strings. */
char *value_str(Value v);
char *value_repr(Value v);
/* value_str with its length (a string's text may hold NUL bytes) */
char *value_str_n(Value v, size_t *len);
/* value_repr with non-ASCII escaped as \u{...} (Python's ascii(), {!a}) */
char *value_ascii(Value v, size_t *len);
const char *value_kind_name(Value v); /* "tensor", "string", "list", ... for errors */
/* "<fn step at train.tfe:12>" for a V_FN (interp/eval.c); malloc'd. */
char *closure_repr(Obj *o);

/* format("{} {:.4f}", args) — Python's format mini-language (interp/format.c).
 * Returns a malloc'd string, or NULL with *err set to a malloc'd message. */
char *format_values(const char *fmt, size_t fmtlen, int argc, const Value *argv, size_t *outlen,
                    char **err);

#endif
