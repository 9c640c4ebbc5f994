/* help.h — help(x) and the REPL's :help NAME (interp/help.c): the rows of
 * docs/reference.md, compiled in by interp/help_gen.awk (help_table.c, made
 * at build time), and descriptions of values. */
#ifndef TFE_HELP_H
#define TFE_HELP_H

#include <stdio.h>
#include "interp/interp.h"

/* One table row of docs/reference.md, cells as written (with backticks). */
typedef struct HelpRow {
    const char *section; /* the "## " heading above the table */
    const char *intro;   /* the text between the heading and the table */
    const char *names;   /* first cell: "`zeros(shape, dtype=float32)`, `ones(...)`" */
    const char *what, *example;
} HelpRow;
extern const HelpRow help_rows[];
extern const int help_nrows;

/* Help on a name: a reference entry ("print", "nn.dense"), a section
 * ("Reductions"), or a binding in scope (described as help_value does);
 * otherwise "no help for 'x'" and the closest names. Writes to f. */
void help_name(Interp *I, const char *name, FILE *f);
/* Help on a value: a function's signature and reference entry; a tensor's
 * dtype, shape and device; a variable's too; a record's fields. */
void help_value(Interp *I, Value v, FILE *f);
/* The topics: the reference's sections with their names, then the REPL's
 * commands when repl is true. */
void help_topics(FILE *f, bool repl);
/* The parameter names of a function known by name: from its reference
 * signature (a built-in or stdlib function) or, for a tfe function bound in
 * scope, from its definition. add(name, ctx) once per parameter. */
void help_params(Interp *I, const char *fname, void (*add)(const char *, void *), void *ctx);
/* The value bound to name ("w", "nn.dense": fields of records and modules)
 * in the globals or the built-ins; false when there is none. Borrowed. */
bool help_lookup_value(Interp *I, const char *name, Value *out);
/* The function's signature "f(x, y=1)" for a tfe function value (malloc'd). */
char *closure_signature(Obj *o);

/* How the REPL echoes a value: as value_repr, but a function shows its
 * signature ("<fn f(x, y=1)>") and a variable its value
 * ("<variable w float32 () = 0.5>"). malloc'd. */
char *value_echo_repr(Value v);

void builtins_help_register(Interp *I);

#endif
