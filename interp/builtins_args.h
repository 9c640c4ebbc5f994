/* builtins_args.h — typed argument checks shared by every builtin (as Lua's
 * luaL_check*). fn names the builtin as its errors do ("save()", "variable",
 * "sum"), arg the parameter; each check returns 0, or -1 after raising
 * "<fn>: <arg> must be <what>, got <kind>". Values are borrowed. */
#ifndef TFE_BUILTINS_ARGS_H
#define TFE_BUILTINS_ARGS_H

#include "interp/interp.h"

/* The type error every check raises: "<fn>: <arg> must be <what>, got <kind
 * of v>". Always -1, so a builtin can `return arg_error(...)`. */
int arg_error(Interp *I, const char *fn, const char *arg, const char *what, Value v);

/* No error: an int from an int scalar or a concrete 0-d int tensor (bools
 * excluded); a number from any scalar (bools count as 0/1) or concrete 0-d
 * tensor, with its dtype when dt is not NULL. A symbolic tensor (inside a
 * staged branch or loop) has no value and is neither. */
bool arg_as_int(Value v, int64_t *out);
bool arg_as_number(Value v, double *out, tfe_dtype *dt);

int arg_int(Interp *I, const char *fn, const char *arg, Value v, int64_t *out);   /* "an int" */
int arg_number(Interp *I, const char *fn, const char *arg, Value v, double *out, tfe_dtype *dt); /* "a number" */
int arg_string(Interp *I, const char *fn, const char *arg, Value v, const char **out); /* "a string" */
/* nil (an absent keyword) gives NULL */
int arg_opt_string(Interp *I, const char *fn, const char *arg, Value v, const char **out);
int arg_bool(Interp *I, const char *fn, const char *arg, Value v, bool *out);      /* "true or false" */
/* nil (an absent keyword) gives def */
int arg_opt_bool(Interp *I, const char *fn, const char *arg, Value v, bool def, bool *out);
/* A tensor; a number is boxed ("a tensor or number"). A new reference, or
 * NULL after raising (an allocation failure raises the tensor error). */
tfe_tensor *arg_tensor(Interp *I, const char *fn, const char *arg, Value v);
/* As arg_tensor, for an operand of an op whose other operands have dtype
 * dt: a float literal is exact there when dt is float64 (value_to_tensor_for). */
tfe_tensor *arg_tensor_for(Interp *I, const char *fn, const char *arg, Value v, tfe_dtype dt);

#endif
