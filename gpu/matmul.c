/* matmul.c — matmul on the GPU through cuBLAS, NumPy semantics (1-D
 * operands, broadcast batch axes). cuBLAS is column-major: the row-major
 * C = A B is computed as C^T = B^T A^T, and a transposed view (x.T) is passed
 * as a transpose flag, not copied. Batches with one stride each go to
 * cublasSgemmStridedBatched; other batch layouts loop over cublasSgemm.
 * FP32 math by default; TFE_GPU_TF32=1 allows TF32 tensor cores.
 * float16 and bfloat16 (both operands the same) go to cublasGemmEx /
 * cublasGemmStridedBatchedEx with float32 accumulation (CUBLAS_COMPUTE_32F):
 * tensor cores, and the same arithmetic as the CPU's reference
 * (tensor/kernels_linalg.c, matmul_half).
 * cuBLAS is loaded with dlopen on the first matmul: linking it would cost
 * every run of tfe ~0.2 s of start-up, GPU or not. */
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <cublas_v2.h>

#include "config.h"
#include "gpu/gpu.h"
#include "tensor/base.h"

static struct {
    bool tried, ok;
    typeof(&cublasCreate_v2) create;
    typeof(&cublasDestroy_v2) destroy;
    typeof(&cublasSetStream_v2) set_stream;
    typeof(&cublasSetMathMode) set_math_mode;
    typeof(&cublasGetStatusString) status_string;
    typeof(&cublasSgemm_v2) sgemm;
    typeof(&cublasSgemmStridedBatched) sgemm_strided_batched;
    typeof(&cublasGemmEx) gemm_ex;
    typeof(&cublasGemmStridedBatchedEx) gemm_strided_batched_ex;
} cb;

static int load_cublas(int dev) {
    if (!cb.tried) {
        cb.tried = true;
        void *h = dlopen(TFE_CUBLAS_LIB, RTLD_NOW | RTLD_LOCAL);
        if (!h) h = dlopen("libcublas.so", RTLD_NOW | RTLD_LOCAL);
        if (h) {
            cb.create = (typeof(cb.create))dlsym(h, "cublasCreate_v2");
            cb.destroy = (typeof(cb.destroy))dlsym(h, "cublasDestroy_v2");
            cb.set_stream = (typeof(cb.set_stream))dlsym(h, "cublasSetStream_v2");
            cb.set_math_mode = (typeof(cb.set_math_mode))dlsym(h, "cublasSetMathMode");
            cb.status_string = (typeof(cb.status_string))dlsym(h, "cublasGetStatusString");
            cb.sgemm = (typeof(cb.sgemm))dlsym(h, "cublasSgemm_v2");
            cb.sgemm_strided_batched = (typeof(cb.sgemm_strided_batched))dlsym(h, "cublasSgemmStridedBatched");
            cb.gemm_ex = (typeof(cb.gemm_ex))dlsym(h, "cublasGemmEx");
            cb.gemm_strided_batched_ex = (typeof(cb.gemm_strided_batched_ex))dlsym(h, "cublasGemmStridedBatchedEx");
            cb.ok = cb.create && cb.destroy && cb.set_stream && cb.set_math_mode && cb.status_string && cb.sgemm &&
                    cb.sgemm_strided_batched && cb.gemm_ex && cb.gemm_strided_batched_ex;
        }
    }
    if (!cb.ok) tfe_error_set("matmul: cannot load cuBLAS for gpu:%d (%s)", dev - 1, TFE_CUBLAS_LIB);
    return cb.ok ? 0 : -1;
}

static int cublas_check(cublasStatus_t s, const char *call, int dev) {
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    tfe_error_set("matmul: %s on gpu:%d failed: %s", call, dev - 1, cb.status_string(s));
    return -1;
}

static cublasHandle_t handle(gpu_state *g, int dev) {
    if (!g->cublas) {
        cublasHandle_t h;
        if (load_cublas(dev) || cublas_check(cb.create(&h), "cublasCreate", dev)) return NULL;
        if (cublas_check(cb.set_stream(h, g->stream), "cublasSetStream", dev)) {
            cb.destroy(h);
            return NULL;
        }
        const char *tf32 = getenv("TFE_GPU_TF32");
        if (tf32 && *tf32 == '1') cb.set_math_mode(h, CUBLAS_TF32_TENSOR_OP_MATH);
        g->cublas = h;
    }
    return g->cublas;
}

bool gpu_matmul_supports(const tfe_opcall *c) {
    const tfe_tensor *a = c->in[0], *b = c->in[1];
    bool half = a->dtype == TFE_FLOAT16 || a->dtype == TFE_BFLOAT16;
    if ((a->dtype != TFE_FLOAT32 && !half) || b->dtype != a->dtype || !a->rank || !b->rank) return false;
    for (int i = 0; i < 2; i++)
        for (int d = 0; d < c->in[i]->rank; d++)
            if (c->in[i]->shape[d] > INT_MAX) return false;
    tfe_meta m;
    if (tfe_ops[OP_MATMUL].infer(c, &m)) {
        tfe_error_clear();
        return false; /* the CPU path says what is wrong */
    }
    return shape_numel(m.rank - (a->rank >= 2) - (b->rank >= 2), m.shape) <= INT_MAX;
}

/* An R x C matrix with element strides rs, cs as cuBLAS sees it: 'N' (its
 * memory is the column-major C x R transpose, ld rs), 'T' (column-major R x C,
 * ld cs), or 0 when neither (it is copied first). */
static char layout(int64_t R, int64_t C, int64_t rs, int64_t cs, int64_t *ld) {
    int64_t mc = C > 1 ? C : 1, mr = R > 1 ? R : 1;
    if ((C == 1 || cs == 1) && (R == 1 || rs >= mc)) {
        *ld = R == 1 ? mc : rs;
        return *ld <= INT_MAX ? 'N' : 0;
    }
    if ((R == 1 || rs == 1) && (C == 1 || cs >= mr)) {
        *ld = C == 1 ? mr : cs;
        return *ld <= INT_MAX ? 'T' : 0;
    }
    return 0;
}

/* one operand: pointer, matrix strides and batch strides in out's batch
 * axes, all in elements */
typedef struct opnd {
    const char *p;
    int64_t rs, cs, bst[TFE_MAX_RANK];
} opnd;

static void describe(const tfe_tensor *t, bool matrix_rows, int nb, const int64_t *bshape, opnd *o) {
    int r = t->rank, mr = r >= 2 ? 2 : 1;
    int64_t esz = (int64_t)kn_esz(t->dtype);
    o->p = tensor_data(t);
    int64_t last = t->strides[r - 1] / esz;
    if (r >= 2) {
        o->rs = t->strides[r - 2] / esz;
        o->cs = last;
    } else if (matrix_rows) { /* a 1-D left operand is a row: 1 x K */
        o->rs = 0;
        o->cs = last;
    } else { /* a 1-D right operand is a column: K x 1 */
        o->rs = last;
        o->cs = 0;
    }
    int tb = r - mr; /* t's batch axes, aligned to the right of out's */
    for (int d = 0; d < nb; d++) {
        int td = d - (nb - tb);
        o->bst[d] = td < 0 || t->shape[td] == 1 ? 0 : t->strides[td] / esz;
    }
    (void)bshape;
}

/* true when batch i sits at i * *s (one stride for the flattened batch) */
static bool one_stride(int nb, const int64_t *bshape, const int64_t *bst, int64_t *s) {
    int64_t want = -1, span = 1;
    for (int d = nb - 1; d >= 0; d--) {
        if (bshape[d] == 1) continue;
        if (want < 0) want = bst[d]; /* the innermost real axis sets the stride */
        if (bst[d] != want * span) return false;
        span *= bshape[d];
    }
    *s = want < 0 ? 0 : want;
    return true;
}

static int64_t batch_offset(int nb, const int64_t *bshape, const int64_t *bst, int64_t i) {
    int64_t off = 0;
    for (int d = nb - 1; d >= 0; d--) {
        off += (i % bshape[d]) * bst[d];
        i /= bshape[d];
    }
    return off;
}

/* a contiguous copy on the device when cuBLAS cannot read t's layout */
static tfe_tensor *packed(gpu_state *g, const tfe_tensor *t, int dev) {
    tfe_tensor *c = tensor_new_on(t->dtype, t->rank, t->shape, dev);
    if (!c) return NULL;
    gpu_copy cp = {.rank = t->rank, .esz = (int)kn_esz(t->dtype), .n = tensor_numel(t), .src = tensor_data(t), .dst = tensor_data(c)};
    for (int d = 0; d < t->rank; d++) {
        cp.shape[d] = t->shape[d];
        cp.st[d] = t->strides[d];
    }
    if (gpu_check(gpu_launch_copy(&cp, g->stream), "matmul", "kernel launch", dev)) {
        tensor_decref(c);
        return NULL;
    }
    return c;
}

int gpu_matmul(const tfe_opcall *c, int dev) {
    gpu_state *g = gpu_use(dev);
    cublasHandle_t h = g ? handle(g, dev) : NULL;
    if (!h) return -1;
    tfe_tensor *a = c->in[0], *b = c->in[1], *o = c->out[0];
    int64_t M = a->rank >= 2 ? a->shape[a->rank - 2] : 1, K = a->shape[a->rank - 1];
    int64_t N = b->rank >= 2 ? b->shape[b->rank - 1] : 1;
    int nb = o->rank - (a->rank >= 2) - (b->rank >= 2);
    int64_t nbatch = shape_numel(nb, o->shape);
    char *C = tensor_data(o);
    int64_t esz = (int64_t)kn_esz(o->dtype);
    if (M * N * nbatch == 0) return 0;
    if (K == 0) /* empty sums: zeros (all-zero bits in every float format) */
        return gpu_check(cudaMemsetAsync(C, 0, (size_t)(M * N * nbatch * esz), g->stream), "matmul",
                         "cudaMemsetAsync", dev);

    tfe_tensor *ac = a, *bc = b;
    opnd A, B;
    int64_t lda = 0, ldb = 0;
    describe(a, true, nb, o->shape, &A);
    char ta = layout(M, K, A.rs, A.cs, &lda);
    if (!ta) {
        if (!(ac = packed(g, a, dev))) return -1;
        describe(ac, true, nb, o->shape, &A);
        ta = layout(M, K, A.rs, A.cs, &lda);
    }
    describe(b, false, nb, o->shape, &B);
    char tb = layout(K, N, B.rs, B.cs, &ldb);
    int rc = 0;
    if (!tb) {
        if (!(bc = packed(g, b, dev))) rc = -1;
        else {
            describe(bc, false, nb, o->shape, &B);
            tb = layout(K, N, B.rs, B.cs, &ldb);
        }
    }
    const float one = 1.0f, zero = 0.0f;
    /* C^T (N x M, ld N) = op(B-side) (N x K) * op(A-side) (K x M) */
    cublasOperation_t opx = tb == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T, opy = ta == 'N' ? CUBLAS_OP_N : CUBLAS_OP_T;
    int64_t sa, sb;
    bool half = o->dtype != TFE_FLOAT32;
    cudaDataType_t t = o->dtype == TFE_FLOAT16 ? CUDA_R_16F : CUDA_R_16BF;
    if (rc) {
    } else if (one_stride(nb, o->shape, A.bst, &sa) && one_stride(nb, o->shape, B.bst, &sb)) {
        if (half)
            rc = cublas_check(cb.gemm_strided_batched_ex(h, opx, opy, (int)N, (int)M, (int)K, &one, B.p, t, (int)ldb,
                                                         sb, A.p, t, (int)lda, sa, &zero, C, t, (int)N, M * N,
                                                         (int)nbatch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                              "cublasGemmStridedBatchedEx", dev);
        else
            rc = cublas_check(cb.sgemm_strided_batched(h, opx, opy, (int)N, (int)M, (int)K, &one,
                                                        (const float *)B.p, (int)ldb, sb, (const float *)A.p,
                                                        (int)lda, sa, &zero, (float *)C, (int)N, M * N, (int)nbatch),
                              "cublasSgemmStridedBatched", dev);
    } else {
        for (int64_t i = 0; i < nbatch && !rc; i++) {
            const char *pb = B.p + batch_offset(nb, o->shape, B.bst, i) * esz;
            const char *pa = A.p + batch_offset(nb, o->shape, A.bst, i) * esz;
            char *pc = C + i * M * N * esz;
            if (half)
                rc = cublas_check(cb.gemm_ex(h, opx, opy, (int)N, (int)M, (int)K, &one, pb, t, (int)ldb, pa, t,
                                             (int)lda, &zero, pc, t, (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                                  "cublasGemmEx", dev);
            else
                rc = cublas_check(cb.sgemm(h, opx, opy, (int)N, (int)M, (int)K, &one, (const float *)pb, (int)ldb,
                                           (const float *)pa, (int)lda, &zero, (float *)pc, (int)N),
                                  "cublasSgemm", dev);
        }
    }
    /* packed copies go back to the cache; the stream orders any reuse after
     * the GEMM, and the op waits for the stream before returning */
    if (ac != a) tensor_decref(ac);
    if (bc != b) tensor_decref(bc);
    return rc;
}
