/* fused_axpy.h — one AVX-512 pass for the fused program out = w op (p * q)
 * (op add or sub; p, q each a tensor or a broadcast scalar), the shape of a
 * planned SGD update `w.assign_sub(lr * g)` (fused_axpy.c). */
#ifndef TFE_FUSED_AXPY_H
#define TFE_FUSED_AXPY_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor/fused.h"

/* What tfe_axpy_match found in a program: its inputs w, p, q, the op, and
 * whether w is the op's first operand (w - p * q) or second. */
typedef struct tfe_axpy_prog {
    bool ok;
    bool sub, wfirst;
    int w, p, q;
} tfe_axpy_prog;

/* Is p the float32 program out = w op (p * q): three loads into distinct
 * registers, a multiply of two of them, then add or sub of the product and
 * the third, writing the result? Fills m (m->ok false when not). */
void tfe_axpy_match(const tfe_fprog *p, tfe_axpy_prog *m);

/* Whether tfe_axpy_exec can run here (the CPU has AVX-512F). */
bool tfe_axpy_ok(void);

/* Runs a matched program (m->ok) as one pass when it can: the CPU has
 * AVX-512, out is a contiguous float32 tensor, w is contiguous of out's
 * shape, p and q each contiguous of out's shape or one element. Each
 * element gets k_mul's and then k_sub's (k_add's) formula, two roundings,
 * never one fused multiply-add, operands in the program's order: the bits
 * of tfe_fused_exec's VM. out may be w itself (each element is read before
 * it is written); large tensors are split over threads. Returns 1 when it
 * ran (0 done, or -1 with an error set when interrupted: then *rc), 0 when
 * the program must go to tfe_fused_exec instead. */
int tfe_axpy_exec(const tfe_axpy_prog *m, tfe_tensor *const *inputs, int ninputs, tfe_tensor *out, int *rc);

#endif
