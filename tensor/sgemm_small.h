/* sgemm_small.h — a float32 GEMM for products with a narrow side (the
 * column matrices of conv2d), without BLAS's packing copies (sgemm_small.c). */
#ifndef TFE_SGEMM_SMALL_H
#define TFE_SGEMM_SMALL_H

#include <stdbool.h>
#include <stdint.h>

/* Whether tfe_sgemm_small can run here (the CPU has AVX-512F). */
bool tfe_sgemm_small_ok(void);

/* C[r*ldc + j] = (acc ? C[r*ldc + j] : 0) + S, S = sum_k A[r*ars + k*aks] * B[k*ldb + j]
 * for r < m, j < n, S taken from zero in k order with one fused multiply-add
 * a term (and added to C last, as BLAS does with beta 1, which keeps long
 * sums accumulated over chunks accurate), so each element's value depends on
 * neither m, n nor the tiling. A is read through strides (ars = lda, aks = 1:
 * A; ars = 1, aks = lda: A^T).
 * Only when tfe_sgemm_small_ok(). */
void tfe_sgemm_small(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars, int64_t aks,
                     const float *b, int64_t ldb, float *c, int64_t ldc, bool acc);

/* The attribute that compiles a function for the CPUs tfe_sgemm_small runs on. */
#if defined(__x86_64__) && defined(__GNUC__)
#define F32_TARGET __attribute__((target("avx512f")))
#else
#define F32_TARGET
#endif

#endif
