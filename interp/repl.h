/* repl.h — the interactive loop (interp/repl.c): readline prompt, multi-line
 * entries, history in ~/.tfe_history, completion, Ctrl-C handling. */
#ifndef TFE_REPL_H
#define TFE_REPL_H

#include "interp/interp.h"

/* Run the REPL on the terminal until :quit or EOF; returns the exit status. */
int repl_run(Interp *I);

#endif
