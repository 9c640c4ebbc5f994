/* interp.h — the interpreter's public entry points (used by main.c and repl.c).
 * Ownership: the Interp owns every binding; run functions borrow their text. */
#ifndef TFE_INTERP_H
#define TFE_INTERP_H

#include <stdbool.h>
#include <stdio.h>
#include "interp/value.h"

typedef struct Interp Interp;

typedef struct InterpOptions {
    bool eager;          /* --eager: run staged functions as plain functions */
    bool stage_all;      /* --stage-all */
    bool no_optimize;    /* --no-optimize: graphs run as traced */
    bool check_staged;   /* --check-staged (stage/check.h) */
    const char *dump_pass; /* --dump-graph=PASS: print the graph before and after that
                            optimizer pass for every trace made (stage/staged.c); NULL: none */
    int argc;            /* script arguments (argv builtin) */
    char **argv;
} InterpOptions;

Interp *interp_new(const InterpOptions *opt);
void interp_free(Interp *I);

/* Run a whole program (file, -e, stdin). Errors are reported on stderr with
 * location, caret and traceback. Returns 0 on success, 1 after an error. */
int interp_run_source(Interp *I, const char *name, const char *text, size_t len);
int interp_run_file(Interp *I, const char *path);

/* Run one REPL entry: like interp_run_source, but top-level bindings persist
 * across entries and the value of a final expression statement is echoed
 * (unless nil). After an error every earlier binding is kept. Locations in
 * the entry are named "<repl:NUMBER>" (errors say "<repl:7>:2:15"). */
int interp_run_repl_entry(Interp *I, int number, const char *text, size_t len);
/* An entry typed at a breakpoint's prompt, named <breakpoint:N>; the call
 * stack of the paused program is kept (interp/repl.c). */
int interp_run_breakpoint_entry(Interp *I, int number, const char *text, size_t len);
/* A notebook cell (interp/kernel.c): a REPL entry named <cell:NUMBER> whose
 * error, located with its caret and traceback, is written to err. */
int interp_run_cell(Interp *I, int number, const char *text, size_t len, FILE *err);
/* Set by tfe --kernel (interp/kernel.c), NULL otherwise: the echo of an
 * entry's final expression goes to interp_echo_hook instead of stdout, and
 * interp_display_hook shows a picture (plot() without a path) inline; a
 * mime type with a leading '+' ("+image/png") is the same picture again in
 * another format. */
extern int (*interp_echo_hook)(Interp *I, Value v);
extern int (*interp_display_hook)(const char *mime, const char *data, size_t len);
/* progress() bars redraw in place with \r though stderr is no terminal
 * (a notebook's stream handles \r); set by tfe --kernel. */
extern bool progress_in_place;

/* Completion candidates for the REPL: names in scope, keywords, and when the
 * prefix is "expr.partial" the fields of a record/module binding.
 * Calls add(candidate, ctx) for each; candidates are full replacement words. */
void interp_complete(Interp *I, const char *prefix, void (*add)(const char *, void *), void *ctx);

/* :reload NAME: forgets the module bound to NAME in the import cache and
 * returns the entry that imports its file again ("import \"/path/m.tfe\" as
 * NAME", malloc'd), or prints why not and returns NULL. */
char *interp_reload_code(Interp *I, const char *name);

/* --- for built-in functions (interp/builtins*.c) --------------------------- */
typedef int (*BuiltinFn)(Interp *I, int argc, const Value *argv, int nkw,
                         Str *const *kwnames, const Value *kwvals, Value *out, void *data);
/* Define a builtin with the BuiltinFn signature. */
#define BUILTIN(name)                                                                  \
    static int name(Interp *I, int argc, const Value *argv, int nkw,                   \
                    Str *const *kwnames, const Value *kwvals, Value *out, void *data)
/* Bind a global name to a builtin (at start-up). */
void interp_define_builtin(Interp *I, const char *name, BuiltinFn fn, void *data);
/* How staged code treats a builtin's calls, given at registration and checked
 * in one place, call_value (interp/eval.c), when a builtin is called while
 * tracing (and while --check-staged records host calls). */
enum {
    BF_EFFECT = 1,        /* an effect that returns nil: a host call at every call */
    BF_EFFECT_VALUE = 2,  /* an effect that returns a value (read from the host) */
    BF_NOT_STAGEABLE = 4, /* a staged function cannot call it: why is the error */
};
void interp_define_builtin_flags(Interp *I, const char *name, BuiltinFn fn, void *data, int flags,
                                 const char *why);
/* Raise a located error (the location of the call being evaluated is
 * attached by the interpreter). Always returns -1 so builtins can
 * `return interp_raise(I, "...")`. */
int interp_raise(Interp *I, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Raise the tensor library's pending error (tfe_error_msg()). */
int interp_raise_tensor_error(Interp *I);

/* Argument binding for builtins: spec is a comma-separated parameter list,
 * e.g. "x, axis=, keepdims=". Names with '=' are optional. Fills slots[i]
 * with a borrowed value or, when absent, kind V_NIL and present[i] = false.
 * Errors (missing/unknown/duplicate/too many arguments) name fname.
 * Returns 0 or -1 (raised). */
int args_parse(Interp *I, const char *fname, const char *spec,
               int argc, const Value *argv, int nkw, Str *const *kwnames, const Value *kwvals,
               Value *slots, bool *present);

/* Hooks implemented by interp/builtins_tensor.c, called by the evaluator. */
void builtins_tensor_register(Interp *I);
/* interp/builtins_linalg.c: outer, diag, einsum, norm, solve, inv, ... */
void builtins_linalg_register(Interp *I);
/* [a, b, ...]: stack numbers/bools/tensors of one shape (ragged or non-numeric:
 * an error that suggests a tuple). */
int tensor_literal(Interp *I, int n, const Value *items, Value *out);
/* Index items as evaluated: a value (int scalar, int tensor, bool tensor),
 * a slice, or an ellipsis. */
typedef struct IndexItem {
    enum { IX_VALUE, IX_SLICE, IX_ELLIPSIS } kind;
    Value v;                 /* IX_VALUE */
    Value start, stop, step; /* IX_SLICE: nil when omitted */
} IndexItem;
int tensor_index(Interp *I, Value x, int n, const IndexItem *items, Value *out);
/* x[items] = v: the updated copy of x in *out. */
int tensor_index_assign(Interp *I, Value x, int n, const IndexItem *items, Value v, Value *out);
/* x.shape, x.dtype, x.T, x.device, x.ndim, ...: 0 ok, 1 no such field, -1 raised. */
int tensor_getattr(Interp *I, Value x, const char *name, Value *out);
/* Tensor methods (interp/methods.c): x.f(args) is the builtin f(x, args)
 * bound to self (a tensor, number or variable): 0 bound, 1 not a method.
 * interp_tensor_attr_names: every property and method name, NULL-ended (the
 * REPL completes them); tensor_attr_suggest: the one a misspelt name is
 * close to, or NULL. */
int tensor_method(Interp *I, Value self, const char *name, Value *out);
const char *const *interp_tensor_attr_names(void);
const char *tensor_attr_suggest(const char *name);
/* String methods (interp/builtins_str.c): s.split(...) and the others bound
 * to the string: 0 bound, 1 not a method; their names, NULL-ended. */
int string_method(Interp *I, Value self, const char *name, Value *out);
const char *const *interp_string_method_names(void);
/* the tfe spelling of a PyTorch/NumPy tensor method ('unsqueeze' -> 'x.expand_dims(axis)'), or NULL */
const char *tensor_attr_habit(const char *name);

/* Ctrl-C: the SIGINT handler sets tfe_interrupted (tensor.h); the interpreter
 * polls it at loop back-edges and calls and raises "interrupted". */

#endif
