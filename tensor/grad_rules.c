/* grad_rules.c — gradient rules of every op (being written for issue 4). */
#include "tensor/grad.h"
