/* blas.h — OpenBLAS's GEMM, loaded on first use (tensor/blas.c).
 * Include this instead of <cblas.h>: cblas_sgemm/cblas_dgemm then name
 * wrappers that load the library the first time a GEMM runs. */
#ifndef TFE_BLAS_H
#define TFE_BLAS_H

#include <cblas.h>

void tfe_blas_sgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta,
                    const enum CBLAS_TRANSPOSE tb, const blasint m, const blasint n, const blasint k,
                    const float alpha, const float *a, const blasint lda, const float *b,
                    const blasint ldb, const float beta, float *c, const blasint ldc);
void tfe_blas_dgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta,
                    const enum CBLAS_TRANSPOSE tb, const blasint m, const blasint n, const blasint k,
                    const double alpha, const double *a, const blasint lda, const double *b,
                    const blasint ldb, const double beta, double *c, const blasint ldc);

#define cblas_sgemm tfe_blas_sgemm
#define cblas_dgemm tfe_blas_dgemm

#endif
