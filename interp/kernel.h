/* kernel.h — tfe --kernel (interp/kernel.c): the interpreter behind a line
 * protocol on stdin/stdout, for notebooks (docs/notebooks.md). */
#ifndef TFE_KERNEL_H
#define TFE_KERNEL_H

#include "interp/interp.h"

/* Serve requests on stdin until it ends; returns the exit status. */
int kernel_run(Interp *I);

#endif
