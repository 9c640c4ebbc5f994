/* blas.c — loads OpenBLAS the first time a GEMM (or a LAPACK routine) runs,
 * not at start-up.
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
#include <string.h>
#include "tensor/blas.h"
#include "tensor/tensor.h"

#undef cblas_sgemm
#undef cblas_dgemm

static __typeof__(cblas_sgemm) *p_sgemm;
static __typeof__(cblas_dgemm) *p_dgemm;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static void threads_init(void *h);

/* LAPACK, from the same library (Debian's OpenBLAS ships it; configure
 * checks dgetrf_). Fortran calling convention: every argument by pointer,
 * and a hidden length after the arguments for each character argument. */
typedef void getrf_fn(const blasint *m, const blasint *n, void *a, const blasint *lda, blasint *ipiv,
                      blasint *info);
typedef void getrs_fn(const char *trans, const blasint *n, const blasint *nrhs, const void *a,
                      const blasint *lda, const blasint *ipiv, void *b, const blasint *ldb, blasint *info,
                      size_t trans_len);
typedef void potrf_fn(const char *uplo, const blasint *n, void *a, const blasint *lda, blasint *info,
                      size_t uplo_len);
static getrf_fn *p_getrf[2];
static getrs_fn *p_getrs[2];
static potrf_fn *p_potrf[2];
static const char *lapack_missing = "not loaded";
static const char *lapack_lib = "";

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
        if (p_sgemm && p_dgemm) {
            /* [0] float32, [1] float64; a BLAS without LAPACK (libblas.so.3)
             * runs every GEMM, and each LAPACK call reports what is missing */
            static const char *const lnames[3][2] = {
                {"sgetrf_", "dgetrf_"}, {"sgetrs_", "dgetrs_"}, {"spotrf_", "dpotrf_"}};
            lapack_missing = NULL;
            for (int t = 0; t < 2; t++) {
                p_getrf[t] = (getrf_fn *)dlsym(h, lnames[0][t]);
                p_getrs[t] = (getrs_fn *)dlsym(h, lnames[1][t]);
                p_potrf[t] = (potrf_fn *)dlsym(h, lnames[2][t]);
                for (int k = 0; k < 3 && !lapack_missing; k++)
                    if (!(k == 0 ? (void *)p_getrf[t] : k == 1 ? (void *)p_getrs[t] : (void *)p_potrf[t]))
                        lapack_missing = lnames[k][t];
            }
            lapack_lib = names[i];
            threads_init(h);
            return;
        }
        err = "cblas_sgemm/cblas_dgemm missing";
    }
    fprintf(stderr, "tfe: cannot load OpenBLAS (libopenblas.so.0): %s (apt-get install libopenblas0)\n", err);
    exit(1);
}

/* ---- threads per GEMM ----------------------------------------------------------
 * OpenBLAS threads a GEMM once m*n*k passes its own small threshold (2^18).
 * On this 2-core machine a second thread pays only from a few million
 * multiply-adds (docs/benchmarks.md, "GEMM threads and concurrent pairs"):
 * below, the hand-off and the sched_yield spin of the idle worker, which
 * takes the core the tfe pool needs next, cost more than it saves. So each
 * GEMM gets its thread count from its size: one thread up to GEMM_MT_MAX1
 * multiply-adds (just below 2^22: a 64x256x256 GEMM is split in two
 * halves of 2^21, SPLIT_MIN, since the pool spins between jobs,
 * tensor/thread.c), all of them above (TFE_NUM_THREADS,
 * capped by OpenBLAS's own count). openblas_set_num_threads is a store when
 * the count goes down or back up (~4 ns), and it runs only on a change.
 * The count is a process-wide setting of OpenBLAS, so only a thread outside
 * a tfe_parallel_for changes it, while no other GEMM runs; a GEMM inside one
 * (a conv chunk, a batched matmul's share, the planned executor's concurrent
 * pair) runs with one thread: tfe_parallel_for sets it before it wakes the
 * pool (tfe_blas_pool_enter), so such a GEMM's bits never depend on which
 * GEMM ran before.
 * The count is a function of the shape alone, so a GEMM gives the same bits
 * eager, staged, alone or beside another: OpenBLAS's threaded driver blocks
 * k differently from its one-thread driver for some shapes, so it matters. */
#define GEMM_MT_MAX1 (((int64_t)1 << 22) - 1)

static void (*p_set_threads)(int);
static int max_threads = 1, cur_threads = 1;
static int64_t mt_max1 = GEMM_MT_MAX1;
static bool split_on = true; /* TFE_GEMM_SPLIT=0: OpenBLAS's threads, for measuring */

static void threads_init(void *h)
{
    p_set_threads = (void (*)(int))dlsym(h, "openblas_set_num_threads");
    int (*get)(void) = (int (*)(void))dlsym(h, "openblas_get_num_threads");
    if (!p_set_threads || !get) return; /* another BLAS: its own threads */
    max_threads = get();
    if (max_threads > tfe_num_threads()) max_threads = tfe_num_threads();
    if (max_threads < 1) max_threads = 1;
    const char *e = getenv("TFE_GEMM_MT_MAX1"); /* for measuring the crossover */
    if (e && *e) mt_max1 = strtoll(e, NULL, 10);
    e = getenv("TFE_GEMM_SPLIT");
    if (e && *e == '0') split_on = false;
    cur_threads = tfe_in_parallel() ? 1 : max_threads; /* loaded by a GEMM in a pool task: one */
    p_set_threads(cur_threads);
}

static void set_threads(int t)
{
    if (t == cur_threads || !p_set_threads) return;
    p_set_threads(t);
    cur_threads = t;
}

int tfe_blas_gemm_threads(int64_t m, int64_t n, int64_t k)
{
    pthread_once(&once, load);
    return (double)m * (double)n * (double)k > (double)mt_max1 ? max_threads : 1;
}

static void gemm_threads(int64_t m, int64_t n, int64_t k)
{
    if (!tfe_in_parallel()) set_threads(tfe_blas_gemm_threads(m, n, k));
}

void tfe_blas_pool_enter(void)
{
    /* p_set_threads and cur_threads are written by load, under the once,
     * and by threads outside the pool; this runs outside it */
    if (p_set_threads && !tfe_in_parallel()) set_threads(1);
}

/* ---- splitting a large GEMM over the pool ------------------------------------
 * A GEMM that gets several threads (tfe_blas_gemm_threads) runs as P
 * row or column blocks of its result, each one one-thread OpenBLAS GEMM on
 * a thread of tfe's pool, instead of on OpenBLAS's threaded driver. Why:
 *  - speed: on this 2-core machine OpenBLAS's two threads gain 1.1-1.4x on
 *    the MLP's 12.8M-multiply-add GEMMs, the two halves 1.6-1.9x
 *    (docs/benchmarks.md, "Large GEMMs split over the pool"), and no
 *    OpenBLAS worker is left spinning in sched_yield after it;
 *  - bits: each element of C is summed by the one-thread driver, whose k
 *    blocks depend on k alone, so a block of rows or columns gets the bits
 *    the whole one-thread GEMM gives (the threaded driver blocks k
 *    differently for some shapes). A GEMM that can be cut then has bits
 *    that do not depend on the thread count (one too narrow to cut still
 *    runs on OpenBLAS's threads, e.g. 33x70000x2). Each part keeps at least SPLIT_MIN multiply-adds, far
 *    above the size where OpenBLAS switches to its small-matrix kernels
 *    (10^6), whose sums could be ordered differently; the last, shorter
 *    block at least SPLIT_LAST.
 * Blocks start at multiples of SPLIT_ALIGN rows or columns. A GEMM neither
 * of whose sides can be split (m and n under 2 * SPLIT_ALIGN, about), and one in a
 * pool task, runs whole (on OpenBLAS's threads when its size gives it
 * several, as before). Only row-major calls (all of tfe's) are split, and
 * only float32 ones: float64 GEMMs run on one thread (tfe_blas_dgemm). */
#define SPLIT_MIN ((int64_t)1 << 21)
#define SPLIT_ALIGN 16
#define SPLIT_ROWS 64
#define SPLIT_LAST ((int64_t)1 << 20)

typedef struct Split {
    enum CBLAS_TRANSPOSE ta, tb;
    blasint m, n, k, lda, ldb, ldc, step; /* step: rows or columns per part */
    bool by_n;                            /* column blocks, else row blocks */
    double alpha, beta;
    const void *a, *b;
    void *c;
    char ran[64]; /* by part: the pool skips chunks after a Ctrl-C */
} Split;

static void split_part(int64_t lo, int64_t hi, void *ctx)
{
    Split *s = ctx;
    for (int64_t p = lo; p < hi; p++) {
        s->ran[p] = 1;
        blasint len = s->by_n ? s->n : s->m, b0 = (blasint)p * s->step;
        if (b0 >= len) continue;
        blasint e = b0 + s->step < len ? b0 + s->step : len;
        size_t ao = 0, bo = 0, co;
        if (s->by_n) { /* columns b0..e of C: those of op(B) */
            bo = s->tb == CblasNoTrans ? (size_t)b0 : (size_t)b0 * (size_t)s->ldb;
            co = (size_t)b0;
        } else {       /* rows b0..e of C: those of op(A) */
            ao = s->ta == CblasNoTrans ? (size_t)b0 * (size_t)s->lda : (size_t)b0;
            co = (size_t)b0 * (size_t)s->ldc;
        }
        blasint mm = s->by_n ? s->m : e - b0, nn = s->by_n ? e - b0 : s->n;
        p_sgemm(CblasRowMajor, s->ta, s->tb, mm, nn, s->k, (float)s->alpha, (const float *)s->a + ao, s->lda,
                (const float *)s->b + bo, s->ldb, (float)s->beta, (float *)s->c + co, s->ldc);
    }
}

/* How many blocks of len rows (or columns), each worth macs multiply-adds,
 * for at most parts of them: blocks of *step (a multiple of SPLIT_ALIGN),
 * the last one shorter but still SPLIT_LAST or more. 0 or 1: do not split. */
static int64_t split_blocks(blasint len, double macs, int64_t parts, blasint *step)
{
    for (; parts >= 2; parts--) {
        int64_t per = (len + parts - 1) / parts;
        *step = (blasint)((per + SPLIT_ALIGN - 1) / SPLIT_ALIGN * SPLIT_ALIGN);
        int64_t np = (len + *step - 1) / *step, last = len - (np - 1) * *step;
        if (np >= 2 && macs * (double)last >= (double)SPLIT_LAST) return np;
    }
    return 0;
}

/* Runs s as blocks over the pool when it should and can; false: run it whole. */
static bool split_run(Split *s, const enum CBLAS_ORDER order)
{
    if (order != CblasRowMajor || !split_on || tfe_in_parallel() || !p_set_threads) return false;
    double mnk = (double)s->m * (double)s->n * (double)s->k;
    if (mnk <= (double)mt_max1 || max_threads < 2) return false;
    int64_t want = (int64_t)(mnk / (double)SPLIT_MIN), parts;
    if (want > max_threads) want = max_threads;
    if (want > (int64_t)sizeof s->ran) want = (int64_t)sizeof s->ran;
    /* rows when each block gets SPLIT_ROWS of them, else columns: a row
     * block of a short C (64 rows: a batch) runs slower than a column
     * block (bench/gemm_split.c); the other side when that one is too short */
    s->by_n = s->m < SPLIT_ROWS * want;
    for (int side = 0;; side++) {
        blasint len = s->by_n ? s->n : s->m;
        parts = split_blocks(len, mnk / (double)len, want, &s->step);
        if (parts >= 2) break;
        if (side) return false;
        s->by_n = !s->by_n;
    }
    /* one chunk per part; tfe_parallel_for sets OpenBLAS to one thread */
    memset(s->ran, 0, sizeof s->ran);
    tfe_parallel_for(parts, 1, split_part, s);
    /* a part the pool skipped (Ctrl-C) runs here: a GEMM's result is
     * always whole, as OpenBLAS's own threads leave it */
    for (int64_t p = 0; p < parts; p++)
        if (!s->ran[p]) split_part(p, p + 1, s);
    return true;
}

void tfe_blas_sgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta,
                    const enum CBLAS_TRANSPOSE tb, const blasint m, const blasint n, const blasint k,
                    const float alpha, const float *a, const blasint lda, const float *b,
                    const blasint ldb, const float beta, float *c, const blasint ldc)
{
    pthread_once(&once, load);
    Split s = {.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .lda = lda, .ldb = ldb, .ldc = ldc,
               .alpha = alpha, .beta = beta, .a = a, .b = b, .c = c};
    if (split_run(&s, order)) return;
    gemm_threads(m, n, k);
    p_sgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void tfe_blas_dgemm(const enum CBLAS_ORDER order, const enum CBLAS_TRANSPOSE ta,
                    const enum CBLAS_TRANSPOSE tb, const blasint m, const blasint n, const blasint k,
                    const double alpha, const double *a, const blasint lda, const double *b,
                    const blasint ldb, const double beta, double *c, const blasint ldc)
{
    pthread_once(&once, load);
    /* float64: one thread, never split. OpenBLAS's AVX-512 dgemm sums the
     * columns past the last multiple of 8 in an order that depends on the
     * number of rows (a 64x300x257 product: rows or columns cut anywhere
     * change some of those sums' last bits), so no cut over the pool, nor
     * its own threaded driver, keeps the one-thread bits, and results must
     * not depend on the thread count (tests/thread_invariance.sh). float64
     * is where exact checking is done; float32 is where speed matters */
    if (!tfe_in_parallel()) set_threads(1);
    p_dgemm(order, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* ---- LAPACK ------------------------------------------------------------------- */

/* pivots are handed over as int32_t: an OpenBLAS built with 64-bit
 * integers (INTERFACE64) would need wider ones */
_Static_assert(sizeof(blasint) == sizeof(int32_t), "blasint is not 32-bit");

/* 0, or -1 with the error set when the loaded library has no LAPACK. */
static int lapack_ready(const char *op)
{
    pthread_once(&once, load);
    if (!lapack_missing) return 0;
    tfe_error_set("%s: the BLAS library loaded (%s) has no LAPACK routine %s (install OpenBLAS: "
                  "apt-get install libopenblas0)", op, lapack_lib, lapack_missing);
    return -1;
}

int tfe_lapack_getrf(const char *op, tfe_dtype dt, int64_t n, void *a, int32_t *ipiv, int *info)
{
    if (lapack_ready(op)) return -1;
    blasint nn = (blasint)n, lda = nn > 1 ? nn : 1, inf = 0;
    p_getrf[dt == TFE_FLOAT64](&nn, &nn, a, &lda, (blasint *)ipiv, &inf);
    *info = (int)inf;
    return 0;
}

int tfe_lapack_getrs(const char *op, tfe_dtype dt, char trans, int64_t n, int64_t nrhs, const void *a,
                     const int32_t *ipiv, void *b, int *info)
{
    if (lapack_ready(op)) return -1;
    blasint nn = (blasint)n, nr = (blasint)nrhs, ld = nn > 1 ? nn : 1, inf = 0;
    p_getrs[dt == TFE_FLOAT64](&trans, &nn, &nr, a, &ld, (const blasint *)ipiv, b, &ld, &inf, 1);
    *info = (int)inf;
    return 0;
}

int tfe_lapack_potrf(const char *op, tfe_dtype dt, char uplo, int64_t n, void *a, int *info)
{
    if (lapack_ready(op)) return -1;
    blasint nn = (blasint)n, lda = nn > 1 ? nn : 1, inf = 0;
    p_potrf[dt == TFE_FLOAT64](&uplo, &nn, a, &lda, &inf, 1);
    *info = (int)inf;
    return 0;
}
