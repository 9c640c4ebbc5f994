/* blas.c — loads OpenBLAS the first time a GEMM runs, not at start-up.
 * Why: linking it eagerly costs every `tfe` start its relocations and starts
 * its worker threads, which then spin (sched_yield) for ~0.1 s, taking a core
 * from the interpreter even in programs that never multiply a matrix. Loading
 * it lazily also lets us shorten that spin (OPENBLAS_THREAD_TIMEOUT, unless the
 * user set it). A missing library is reported once, plainly, and ends tfe, as
 * the dynamic linker would have at start-up. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include "tensor/blas.h"

#undef cblas_sgemm
#undef cblas_dgemm

static __typeof__(cblas_sgemm) *p_sgemm;
static __typeof__(cblas_dgemm) *p_dgemm;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void)
{
    /* 2^22 cycles (~1.5 ms): workers stay hot across the GEMMs of one step */
    setenv("OPENBLAS_THREAD_TIMEOUT", "22", 0);
    static const char *const names[] = {"libopenblas.so.0", "libopenblas.so", "libblas.so.3"};
    const char *err = "not found";
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h) { err = dlerror(); continue; }
        p_sgemm = (__typeof__(p_sgemm))dlsym(h, "cblas_sgemm");
        p_dgemm = (__typeof__(p_dgemm))dlsym(h, "cblas_dgemm");
        if (p_sgemm && p_dgemm) return;
        err = "cblas_sgemm/cblas_dgemm missing";
    }
    fprintf(stderr, "tfe: cannot load OpenBLAS (libopenblas.so.0): %s (apt-get install libopenblas0)\n", err);
    exit(1);
}

void tfe_blas_sgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta,
                    const enum CBLAS_TRANSPOSE tb, const blasint m, const blasint n, const blasint k,
                    const float alpha, const float *a, const blasint lda, const float *b,
                    const blasint ldb, const float beta, float *c, const blasint ldc)
{
    pthread_once(&once, load);
    p_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void tfe_blas_dgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta,
                    const enum CBLAS_TRANSPOSE tb, const blasint m, const blasint n, const blasint k,
                    const double alpha, const double *a, const blasint lda, const double *b,
                    const blasint ldb, const double beta, double *c, const blasint ldc)
{
    pthread_once(&once, load);
    p_dgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
