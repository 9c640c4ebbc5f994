/* tape_view.h — t.graph(): a tape's recording drawn as Graphviz DOT
 * (interp/tape_view.c; docs/visualizing.md). */
#ifndef TFE_TAPE_VIEW_H
#define TFE_TAPE_VIEW_H

#include "interp/value.h"
#include "tensor/grad.h"

/* The DOT text (malloc'd) of what tape recorded; named[i] is drawn with
 * the name names[i] (the variables the tape read). */
char *tape_to_dot(const tfe_tape *tape, int nnames, const tfe_tensor *const *named, const char *const *names);
/* A value that prints as the DOT text dot (taken over) and has .dot() and
 * .svg(path). */
Value dot_picture_new(char *dot);

#endif
