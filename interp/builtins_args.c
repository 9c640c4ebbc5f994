/* builtins_args.c — the typed argument checks of builtins_args.h: one text
 * per kind of mistake, whichever builtin makes it. */
#include "interp/builtins_args.h"
#include "tensor/ops.h"

int arg_error(Interp *I, const char *fn, const char *arg, const char *what, Value v)
{
    return interp_raise(I, "%s: %s must be %s, got %s", fn, arg, what, value_kind_name(v));
}

/* A tensor with a value (not a symbolic tensor inside a staged branch or
 * loop). Reading a traced one's value makes the trace depend on it
 * (stage/trace.c). */
static bool concrete(const tfe_tensor *t) { return t->storage != NULL; }

bool arg_as_int(Value v, int64_t *out)
{
    if (v.kind == V_SCALAR && dtype_is_int((tfe_dtype)v.dtype)) {
        *out = v.u.i;
        return true;
    }
    if (v.kind == V_TENSOR && v.u.t->rank == 0 && dtype_is_int(v.u.t->dtype) && concrete(v.u.t)) {
        *out = tensor_get_i64(v.u.t, 0);
        return true;
    }
    return false;
}

bool arg_as_number(Value v, double *out, tfe_dtype *dt)
{
    if (v.kind == V_SCALAR) {
        *out = dtype_is_float((tfe_dtype)v.dtype) ? scalar_f(v) : (double)v.u.i;
        if (dt) *dt = (tfe_dtype)v.dtype;
        return true;
    }
    if (v.kind == V_TENSOR && v.u.t->rank == 0 && concrete(v.u.t)) {
        *out = tensor_get_f64(v.u.t, 0);
        if (dt) *dt = v.u.t->dtype;
        return true;
    }
    return false;
}

int arg_int(Interp *I, const char *fn, const char *arg, Value v, int64_t *out)
{
    *out = 0;
    if (arg_as_int(v, out)) return 0;
    return arg_error(I, fn, arg, "an int", v);
}

int arg_number(Interp *I, const char *fn, const char *arg, Value v, double *out, tfe_dtype *dt)
{
    if (arg_as_number(v, out, dt)) return 0;
    return arg_error(I, fn, arg, "a number", v);
}

int arg_string(Interp *I, const char *fn, const char *arg, Value v, const char **out)
{
    if (v.kind != V_STR) return arg_error(I, fn, arg, "a string", v);
    *out = ((Str *)v.u.o)->s;
    return 0;
}

int arg_opt_string(Interp *I, const char *fn, const char *arg, Value v, const char **out)
{
    *out = NULL;
    return v.kind == V_NIL ? 0 : arg_string(I, fn, arg, v, out);
}

int arg_bool(Interp *I, const char *fn, const char *arg, Value v, bool *out)
{
    if (v.kind != V_SCALAR || v.dtype != TFE_BOOL) return arg_error(I, fn, arg, "true or false", v);
    *out = v.u.i != 0;
    return 0;
}

int arg_opt_bool(Interp *I, const char *fn, const char *arg, Value v, bool def, bool *out)
{
    *out = def;
    return v.kind == V_NIL ? 0 : arg_bool(I, fn, arg, v, out);
}

tfe_tensor *arg_tensor(Interp *I, const char *fn, const char *arg, Value v)
{
    return arg_tensor_for(I, fn, arg, v, TFE_FLOAT32);
}

tfe_tensor *arg_tensor_for(Interp *I, const char *fn, const char *arg, Value v, tfe_dtype dt)
{
    tfe_tensor *t = value_to_tensor_for(v, dt);
    if (!t) {
        if (v.kind == V_SCALAR || v.kind == V_TENSOR) interp_raise_tensor_error(I);
        else arg_error(I, fn, arg, "a tensor or number", v);
    }
    return t;
}
