/* tape.c — the autodiff tape (being written for issue 4). */
#include "tensor/grad.h"

int tfe_tapes_active;
