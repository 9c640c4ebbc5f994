/* sgemm_small.h — a float32 GEMM for products with a narrow side (the
 * column matrices of conv2d), without BLAS's packing copies (sgemm_small.c). */
#ifndef TFE_SGEMM_SMALL_H
#define TFE_SGEMM_SMALL_H

#include <stdbool.h>
#include <stdint.h>

/* Whether tfe_sgemm_small can run here (the CPU has AVX-512F). */
bool tfe_sgemm_small_ok(void);

/* C[r*ldc + j] (+)= sum_k A[r*ars + k*aks] * B[k*ldb + j] for r < m, j < n.
 * The sum is blocked as BLAS's is, which keeps long sums accurate: each block
 * of 64 consecutive k is summed from zero in k order with one fused
 * multiply-add a term, and the block sums are added in order to C (acc) or
 * to the first of them. So each element's value depends on neither m, n nor
 * the tiling. A is read through strides (ars = lda, aks = 1: A; ars = 1,
 * aks = lda: A^T).
 * Only when tfe_sgemm_small_ok(). */
void tfe_sgemm_small(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars, int64_t aks,
                     const float *b, int64_t ldb, float *c, int64_t ldc, bool acc);

/* The same with k running over nseg segments of seglen: A's element (r, k)
 * is a[r*ars + (k / seglen)*segstride + (k % seglen)*aks] (k = nseg*seglen);
 * the blocks are of kb (not 64) and start again at each segment.
 * A conv reads a padded image this way without im2col: rows are output
 * positions, segments the filter rows. */
void tfe_sgemm_small_seg(int64_t m, int64_t n, int64_t nseg, int64_t seglen, int64_t segstride,
                         int64_t kb, const float *a, int64_t ars, int64_t aks, const float *b,
                         int64_t ldb, float *c, int64_t ldc, bool acc);

/* An epilogue of the GEMM's last store: each finished element t of column
 * j becomes t + bias[j] (bias[j] + t when bias_first), or, with bn_m set,
 * ((t - bn_m[j]) * bn_rs[j]) * bn_g[j] + bn_b[j] (batch_norm_infer's
 * formula, tensor/kernels_bn.c, each op with t as its first operand) and,
 * with res, t + h (res_first: h + t), h the element res_off bytes from t's
 * place in C (a tensor of C's layout); then relu's (t > 0 || t != t ? t :
 * 0) when relu: the formulas of k_add,
 * batch_norm_infer and k_relu, on the sum still in registers (conv2d_bias,
 * the conv of a batch norm, tensor/kernels_nn.c). */
typedef struct tfe_sgemm_ep {
    const float *bias;
    bool bias_first, relu;
    const float *bn_m, *bn_rs, *bn_g, *bn_b;
    bool res, res_first;
    intptr_t res_off;
} tfe_sgemm_ep;

/* tfe_sgemm_small (acc false) and tfe_sgemm_small_seg with an epilogue
 * (NULL: none). */
void tfe_sgemm_small_ep(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars, int64_t aks,
                        const float *b, int64_t ldb, float *c, int64_t ldc, const tfe_sgemm_ep *ep);
void tfe_sgemm_small_seg_ep(int64_t m, int64_t n, int64_t nseg, int64_t seglen, int64_t segstride,
                            int64_t kb, const float *a, int64_t ars, int64_t aks, const float *b,
                            int64_t ldb, float *c, int64_t ldc, bool acc, const tfe_sgemm_ep *ep);

/* How many register tiles tfe_sgemm_small_seg(m, n, nseg, seglen, ..., kb)
 * runs; each reads all of its k rows of B (a conv's filter). */
int64_t tfe_sgemm_small_tiles(int64_t m, int64_t n, int64_t nseg, int64_t seglen, int64_t kb);

/* The attribute that compiles a function for the CPUs tfe_sgemm_small runs on. */
#if defined(__x86_64__) && defined(__GNUC__)
#define F32_TARGET __attribute__((target("avx512f")))
#else
#define F32_TARGET
#endif

#endif
