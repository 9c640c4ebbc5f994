/* blas.h — OpenBLAS's GEMM and the LAPACK routines tfe uses, loaded on first
 * use (tensor/blas.c).
 * Include this instead of <cblas.h>: cblas_sgemm/cblas_dgemm then name
 * wrappers that load the library the first time a GEMM runs. */
#ifndef TFE_BLAS_H
#define TFE_BLAS_H

#include <cblas.h>
#include <stdint.h>

#include "tensor/tensor.h"

void tfe_blas_sgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta,
                    const enum CBLAS_TRANSPOSE tb, const blasint m, const blasint n, const blasint k,
                    const float alpha, const float *a, const blasint lda, const float *b,
                    const blasint ldb, const float beta, float *c, const blasint ldc);
void tfe_blas_dgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta,
                    const enum CBLAS_TRANSPOSE tb, const blasint m, const blasint n, const blasint k,
                    const double alpha, const double *a, const blasint lda, const double *b,
                    const blasint ldb, const double beta, double *c, const blasint ldc);

/* The threads a GEMM of m x k by k x n gets (tensor/blas.c): 1 below a
 * size, else all (TFE_NUM_THREADS, at most OpenBLAS's own count): blocks of
 * its result on the pool, one OpenBLAS thread each, or OpenBLAS's threads
 * for a GEMM too narrow to cut. */
int tfe_blas_gemm_threads(int64_t m, int64_t n, int64_t k);
/* tfe_parallel_for calls it before it wakes the pool: GEMMs inside pool
 * tasks run on one OpenBLAS thread each. It does not load OpenBLAS. */
void tfe_blas_pool_enter(void);

/* LAPACK from the same library, for float32 (s...) or float64 (d...) by dt;
 * matrices column-major, n x n, leading dimension n; pivots 1-based. Each
 * returns -1 with the error set (naming op) when the library loaded has no
 * LAPACK, else 0 with LAPACK's info in *info. */
int tfe_lapack_getrf(const char *op, tfe_dtype dt, int64_t n, void *a, int32_t *ipiv, int *info);
int tfe_lapack_getrs(const char *op, tfe_dtype dt, char trans, int64_t n, int64_t nrhs, const void *a,
                     const int32_t *ipiv, void *b, int *info);
int tfe_lapack_potrf(const char *op, tfe_dtype dt, char uplo, int64_t n, void *a, int *info);

#define cblas_sgemm tfe_blas_sgemm
#define cblas_dgemm tfe_blas_dgemm

#endif
