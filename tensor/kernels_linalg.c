/* kernels_linalg.c — matmul with NumPy semantics (1-D operands promoted and
 * their axis dropped, leading batch axes broadcast): float32/float64 through
 * OpenBLAS GEMM (transposed layouts passed as flags, not copied), ints by a
 * plain blocked kernel. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include "tensor/blas.h"

#include "tensor/kernels.h"

#define INT_GEMM(name, T)                                                        \
    static void name(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T *a, int64_t lda, \
                     const T *b, int64_t ldb, T *c, int64_t ldc, bool acc) {     \
        for (int64_t i = 0; i < m; i++) {                                        \
            T *restrict ci = c + i * ldc;                                        \
            if (!acc)                                                            \
                for (int64_t j = 0; j < n; j++) ci[j] = 0;                       \
            for (int64_t p = 0; p < k; p++) {                                    \
                T av = ta ? a[p * lda + i] : a[i * lda + p];                     \
                if (!tb) {                                                       \
                    const T *restrict bp = b + p * ldb;                          \
                    for (int64_t j = 0; j < n; j++) ci[j] += av * bp[j];         \
                } else {                                                         \
                    for (int64_t j = 0; j < n; j++) ci[j] += av * b[j * ldb + p]; \
                }                                                                \
            }                                                                    \
        }                                                                        \
    }
INT_GEMM(gemm_i32, int32_t)
INT_GEMM(gemm_i64, int64_t)

static int gemm_call(tfe_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
                     int64_t lda, const void *b, int64_t ldb, void *c, int64_t ldc, bool accumulate) {
    switch (dt) {
    case TFE_FLOAT32:
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (int)m, (int)n, (int)k, 1.0f, a, (int)lda, b, (int)ldb, accumulate ? 1.0f : 0.0f,
                    c, (int)ldc);
        return 0;
    case TFE_FLOAT64:
        cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (int)m, (int)n, (int)k, 1.0, a, (int)lda, b, (int)ldb, accumulate ? 1.0 : 0.0,
                    c, (int)ldc);
        return 0;
    case TFE_INT32: gemm_i32(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate); return 0;
    case TFE_INT64: gemm_i64(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate); return 0;
    case TFE_BOOL: case TFE_FLOAT16: case TFE_BFLOAT16: case TFE_NDTYPES:
    default:
        tfe_error_set("matmul: dtype %s is not supported", dtype_name(dt));
        return -1;
    }
}

/* One GEMM call cannot be interrupted, and 8192^3 takes seconds here. So a
 * GEMM of more than GEMM_SLICE multiply-adds runs as slices of C's rows, each
 * about GEMM_SLICE (tens of milliseconds), with a Ctrl-C poll between them.
 * A slice keeps at least 64 rows, where OpenBLAS still runs at full speed
 * (the cost is packing B once per slice instead of once). */
#define GEMM_SLICE ((int64_t)1 << 30)

int kn_gemm(tfe_dtype dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a,
            int64_t lda, const void *b, int64_t ldb, void *c, int64_t ldc, bool accumulate) {
    if (m == 0 || n == 0) return 0;
    /* BLAS requires leading dimensions >= 1 even when unused */
    if (lda < 1) lda = 1;
    if (ldb < 1) ldb = 1;
    if (ldc < 1) ldc = 1;
    int64_t nk = n * (k ? k : 1), rows = m;
    if (nk > GEMM_SLICE / m) {
        rows = GEMM_SLICE / nk;
        if (rows < 64) rows = 64;
    }
    size_t esz = dtype_size(dt);
    for (int64_t i = 0; i < m; i += rows) {
        int64_t r = m - i < rows ? m - i : rows;
        /* row i of op(A): row i of A, or column i when A is transposed */
        const char *ai = (const char *)a + (size_t)(ta ? i : i * lda) * esz;
        if (gemm_call(dt, ta, tb, r, n, k, ai, lda, b, ldb, (char *)c + (size_t)(i * ldc) * esz, ldc, accumulate))
            return -1;
        if (i + r < m && kn_poll()) return -1;
    }
    return 0;
}

/* How a 2-D (rows, cols) matrix with byte strides (sr, sc) is handed to GEMM:
 * row-major (sc == esz) with ld = sr, or transposed (sr == esz) with ld = sc.
 * Size-1 axes may have any stride. */
static bool blas_layout(int64_t rows, int64_t cols, int64_t sr, int64_t sc, int64_t esz, bool *trans,
                        int64_t *ld) {
    if (cols == 1) sc = esz;
    if (rows == 1) sr = cols * esz;
    if (sc == esz && sr % esz == 0 && sr >= cols * esz) {
        *trans = false;
        *ld = sr / esz;
        return true;
    }
    if (rows == 1) sr = esz;
    if (cols == 1) sc = rows * esz;
    if (sr == esz && sc % esz == 0 && sc >= rows * esz) {
        *trans = true;
        *ld = sc / esz;
        return true;
    }
    return false;
}

/* Operand x of a matmul as GEMM takes it: its last two axes as a (rows,
 * cols) matrix (a 1-D left operand a row, a 1-D right operand a column),
 * row-major or transposed (blas_layout), or false: it needs a copy. */
static bool operand_layout(const tfe_tensor *x, bool right, int64_t esz, bool *trans, int64_t *ld) {
    int r = x->rank;
    if (r >= 2) return blas_layout(x->shape[r - 2], x->shape[r - 1], x->strides[r - 2], x->strides[r - 1], esz, trans, ld);
    return right ? blas_layout(x->shape[0], 1, x->strides[0], 0, esz, trans, ld)
                 : blas_layout(1, x->shape[0], 0, x->strides[0], esz, trans, ld);
}

static int matmul_half(const tfe_opcall *c);

/* A batch of GEMMs split over the pool: worth a hand-off (~20 µs) from
 * about 2^20 multiply-adds in all. */
#define BATCH_PAR_MIN 1048576.0

typedef struct batch_job {
    tfe_dtype dt;
    bool ta, tb;
    int64_t m, n, k, lda, ldb, esz;
    int br;
    const int64_t *bshape, *bsa, *bsb;
    const char *pa, *pb;
    char *po;
} batch_job;

static void batch_range(int64_t b, int64_t e, void *ctx) {
    const batch_job *j = ctx;
    for (int64_t t = b; t < e && !tfe_interrupted; t++) {
        int64_t oa = 0, ob = 0, r = t;
        for (int i = j->br - 1; i >= 0; i--) {
            int64_t q = r % j->bshape[i];
            r /= j->bshape[i];
            oa += q * j->bsa[i];
            ob += q * j->bsb[i];
        }
        /* the dtype is one kn_gemm takes: it cannot fail */
        kn_gemm(j->dt, j->ta, j->tb, j->m, j->n, j->k, j->pa + oa, j->lda, j->pb + ob, j->ldb,
                j->po + t * j->m * j->n * j->esz, j->n, false);
    }
}

/* o = a @ b, all three of o's dtype, through GEMM on the operands as they
 * lie: 0, -1 with the error set, or 1 when a layout needs a copy first.
 * It allocates nothing and leaves every refcount alone, so a pool thread may
 * run it (kn_matmul_direct). */
static int matmul_blas(tfe_tensor *o, tfe_tensor *a, tfe_tensor *b) {
    tfe_dtype dt = o->dtype;
    int64_t esz = (int64_t)dtype_size(dt);
    /* operands as (batch..., m, k) and (batch..., k, n) */
    int64_t m = a->rank >= 2 ? a->shape[a->rank - 2] : 1, k = a->shape[a->rank - 1];
    int64_t n = b->rank >= 2 ? b->shape[b->rank - 1] : 1;
    int br = o->rank - (a->rank >= 2) - (b->rank >= 2); /* batch rank */
    int64_t bshape[TFE_MAX_RANK], bsa[TFE_MAX_RANK] = {0}, bsb[TFE_MAX_RANK] = {0}, nb = 1;
    for (int i = 0; i < br; i++) {
        bshape[i] = o->shape[i];
        nb *= bshape[i];
        int ia = i - (br - (a->rank - 2)), ib = i - (br - (b->rank - 2));
        if (ia >= 0 && a->shape[ia] != 1) bsa[i] = a->strides[ia];
        if (ib >= 0 && b->shape[ib] != 1) bsb[i] = b->strides[ib];
    }
    if (m * n == 0 || nb == 0) return 0;
    bool ta, tb;
    int64_t lda, ldb;
    if (!operand_layout(a, false, esz, &ta, &lda) || !operand_layout(b, true, esz, &tb, &ldb)) return 1;
    if (k == 0) {
        memset(tensor_data(o), 0, (size_t)(nb * m * n * esz));
        return 0;
    }
    char *pa = tensor_data(a), *pb = tensor_data(b), *po = tensor_data(o);
    double mnk = (double)m * (double)n * (double)k;
    if (nb > 1 && mnk * (double)nb >= BATCH_PAR_MIN && tfe_num_threads() > 1 &&
        (dtype_is_int(dt) || dt == TFE_FLOAT64 || tfe_blas_gemm_threads(m, n, k) == 1)) {
        /* many GEMMs that each run on one OpenBLAS thread (float64 ones
         * always do: tfe_blas_dgemm): a share of the
         * batch per pool thread, one GEMM after another, rather than one
         * GEMM at a time with a core idle. Each GEMM is the one the loop
         * below would make, with the same one thread: the same bits. */
        const batch_job j = {dt, ta, tb, m, n, k, lda, ldb, esz, br, bshape, bsa, bsb, pa, pb, po};
        int64_t grain = (int64_t)(BATCH_PAR_MIN / 4 / mnk) + 1;
        tfe_parallel_for(nb, grain, batch_range, (void *)&j); /* one OpenBLAS thread in each */
        return kn_poll();
    }
    int64_t idx[TFE_MAX_RANK] = {0};
    for (int64_t t = 0; t < nb; t++) {
        int64_t oa = 0, ob = 0;
        for (int i = 0; i < br; i++) {
            oa += idx[i] * bsa[i];
            ob += idx[i] * bsb[i];
        }
        if (kn_gemm(dt, ta, tb, m, n, k, pa + oa, lda, pb + ob, ldb, po + t * m * n * esz, n, false))
            return -1;
        for (int i = br - 1; i >= 0; i--) {
            if (++idx[i] < bshape[i]) break;
            idx[i] = 0;
        }
        if ((t & 63) == 63 && kn_poll()) return -1;
    }
    return 0;
}

int k_matmul(const tfe_opcall *c) {
    tfe_tensor *o = c->out[0];
    tfe_dtype dt = o->dtype;
    if (dt >= TFE_FLOAT16) return matmul_half(c);
    /* only a dtype change copies here; strided views go to BLAS as they are */
    tfe_tensor *a = c->in[0], *b = c->in[1];
    a = a->dtype == dt ? (tensor_incref(a), a) : kn_contig_as(a, dt);
    b = b->dtype == dt ? (tensor_incref(b), b) : kn_contig_as(b, dt);
    int rc = -1;
    if (a && b) rc = matmul_blas(o, a, b);
    if (rc == 1) {
        /* an awkward view (a broadcast, a strided slice): a contiguous copy
         * of that operand alone. The other keeps its layout, whose GEMM
         * flag decides the bits (OpenBLAS sums a transposed operand
         * differently from a row-major copy of it): the flag depends on
         * the operand itself, never on the other one, so a folded
         * constant in a staged graph, contiguous where eager code has a
         * broadcast, multiplies a transposed view as eager code does */
        bool t;
        int64_t ld, esz = (int64_t)dtype_size(dt);
        tfe_tensor *ac = operand_layout(a, false, esz, &t, &ld) ? (tensor_incref(a), a) : tensor_contiguous(a);
        tfe_tensor *bc = !ac ? NULL : operand_layout(b, true, esz, &t, &ld) ? (tensor_incref(b), b) : tensor_contiguous(b);
        rc = bc ? matmul_blas(o, ac, bc) : -1;
        if (ac) tensor_decref(ac);
        if (bc) tensor_decref(bc);
    }
    if (a) tensor_decref(a);
    if (b) tensor_decref(b);
    return rc;
}

int kn_matmul_direct(const tfe_opcall *c) {
    tfe_tensor *o = c->out[0];
    if (o->dtype >= TFE_FLOAT16 || c->in[0]->dtype != o->dtype || c->in[1]->dtype != o->dtype) return 1;
    return matmul_blas(o, c->in[0], c->in[1]);
}

/* float16/bfloat16 on the CPU: the reference the GPU's tensor-core GEMMs are
 * checked against, not a fast path. Inputs are widened to float32 (exact),
 * multiplied with float32 accumulation as cuBLAS does, and the result is
 * rounded once to the output dtype (nearest even). */
static int matmul_half(const tfe_opcall *c) {
    tfe_tensor *o = c->out[0];
    tfe_tensor *in[2] = {kn_contig_as(c->in[0], TFE_FLOAT32), NULL};
    in[1] = in[0] ? kn_contig_as(c->in[1], TFE_FLOAT32) : NULL;
    tfe_tensor *o32 = in[1] ? tensor_new(TFE_FLOAT32, o->rank, o->shape) : NULL;
    int rc = -1;
    if (o32) {
        tfe_tensor *out[1] = {o32};
        tfe_opcall c32 = *c;
        c32.in = in;
        c32.out = out;
        rc = k_matmul(&c32);
        if (!rc) rc = kn_copy_into(o, o32);
    }
    tensor_decref(in[0]);
    tensor_decref(in[1]);
    tensor_decref(o32);
    return rc;
}
