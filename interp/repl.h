/* repl.h — the interactive loop (interp/repl.c): readline prompt, multi-line
 * entries, history in ~/.tfe_history, completion, Ctrl-C handling. */
#ifndef TFE_REPL_H
#define TFE_REPL_H

#include "interp/interp.h"

/* Run the REPL on the terminal until :quit or EOF; returns the exit status. */
int repl_run(Interp *I);

/* The REPL's Tab completion for text, the word at line[start ...]: keyword
 * arguments of the call it is in, names, fields, attributes; add(candidate,
 * ctx) for each (tfe --kernel's completion, interp/kernel.c). */
void repl_complete_word(Interp *I, const char *line, int start, const char *text,
                        void (*add)(const char *, void *), void *ctx);

#endif
