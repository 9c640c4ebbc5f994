/* builtins_autodiff.c — tape, variable, grad (being written for issue 4). */
#include "interp/internal.h"

void builtins_autodiff_register(Interp *I) { (void)I; }
