/* fused_axpy.h — one AVX-512 pass for the fused program out = w op (p * q)
 * (op add or sub; p, q each a tensor or a broadcast scalar), the shape of a
 * planned SGD update `w.assign_sub(lr * g)` (fused_axpy.c). */
#ifndef TFE_FUSED_AXPY_H
#define TFE_FUSED_AXPY_H

#include <stdbool.h>
#include <stdint.h>

/* The operands of one such program, as tfe_fused_exec found them: w, p and
 * q contiguous over out's n elements, or (ps, qs) one element broadcast. */
typedef struct tfe_axpy {
    const float *w, *p, *q;
    bool ps, qs;  /* p (q) is a scalar */
    bool sub;     /* w - t, else w + t (t = p * q) */
    bool wfirst;  /* w is the op's first operand (w - t), else t op w */
} tfe_axpy;

/* Whether tfe_axpy_f32 can run here (the CPU has AVX-512F). */
bool tfe_axpy_ok(void);

/* out[i] = w[i] op (p[i] * q[i]) for i in [begin, end): k_mul's and then
 * k_sub's (k_add's) formulas, each rounded to float32, never contracted
 * into one fused multiply-add, operands in the program's order: the bits of
 * the chunked VM's two loops. out may be w itself (each element is read
 * before it is written). Only when tfe_axpy_ok(). */
void tfe_axpy_f32(const tfe_axpy *a, float *out, int64_t begin, int64_t end);

#endif
