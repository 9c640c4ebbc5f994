/* gpu.h — the CUDA backend's internals, shared by the C side (backend.c,
 * alloc.c, matmul.c, conv.c) and the kernels (kernels.cu, compiled by
 * nvcc). Kernel launchers take plain structs and return the launch's
 * cudaError_t. */
#ifndef TFE_GPU_H
#define TFE_GPU_H

#include <stdint.h>
#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPU_MAX_RANK 8 /* = TFE_MAX_RANK */

#ifdef __CUDACC__
/* nvcc sees no tfe header: the op enum (tensor/ops.h's), from the same table */
typedef enum tfe_op {
#define OP(id, name, nin, nout, flags, infer, kernel, grad) OP_##id,
#include "tensor/ops.def"
#undef OP
    TFE_NOPS
} tfe_op;
#else
#include "tensor/ops.h"
#endif

/* out (contiguous, float32 or bool bytes) = op(a, b, c) over out's shape:
 * op a tfe_op with a tensor/elem.def formula, or OP_WHERE (a = cond as bool
 * bytes, b, c); bout: out is bool bytes (ELEM_TEST, ELEM_COMPARE).
 * Operand k is a device pointer with element strides st[k] in out's index
 * space (0 on broadcast axes), or, when p[k] is NULL, the value v[k]. */
typedef struct gpu_ew {
    int op, bout, rank;
    int64_t n;
    int64_t shape[GPU_MAX_RANK];
    const void *p[3];
    float v[3];
    int64_t st[3][GPU_MAX_RANK];
    int flat; /* every pointer operand is contiguous in out's layout */
    void *out;
} gpu_ew;
cudaError_t gpu_launch_ew(const gpu_ew *e, cudaStream_t s);

/* dst (contiguous) = src with byte strides st; esz 1, 2, 4 or 8 */
typedef struct gpu_copy {
    int rank, esz;
    int64_t n;
    int64_t shape[GPU_MAX_RANK], st[GPU_MAX_RANK];
    const char *src;
    char *dst;
} gpu_copy;
cudaError_t gpu_launch_copy(const gpu_copy *c, cudaStream_t s);

/* the same walk, converting between float formats: c.esz is the size of the
 * destination's elements; from/to are gpu_float codes. Rounding is to
 * nearest even, as the CPU's casts (tensor/dtype.c). */
enum gpu_float { GF_F32, GF_F16, GF_BF16 };
typedef struct gpu_cast {
    gpu_copy c;
    int from, to;
} gpu_cast;
cudaError_t gpu_launch_cast(const gpu_cast *k, cudaStream_t s);

/* out[o] = reduce over the reduced axes (element strides rst) of in at the
 * kept index o (kept axes kshape/kst, out is contiguous); float32 */
enum gpu_red_op { GR_SUM, GR_MEAN, GR_MAX, GR_MIN };
typedef struct gpu_red {
    int op, nk, nr;
    int64_t nout, nred;
    int64_t kshape[GPU_MAX_RANK], kst[GPU_MAX_RANK];
    int64_t rshape[GPU_MAX_RANK], rst[GPU_MAX_RANK];
    const float *in;
    float *out;
} gpu_red;
cudaError_t gpu_launch_reduce(const gpu_red *r, cudaStream_t s);

/* softmax / log_softmax of a contiguous (outer, n, inner) float32 block
 * along the middle axis */
typedef struct gpu_softmax {
    int64_t outer, n, inner;
    int log;
    const float *in;
    float *out;
} gpu_softmax;
cudaError_t gpu_launch_softmax(const gpu_softmax *m, cudaStream_t s);

#ifndef __CUDACC__
/* ---- C side only ---------------------------------------------------------- */
#include "tensor/device.h"

typedef struct gpu_state {
    int ordinal;         /* CUDA device number */
    cudaStream_t stream; /* the device's one stream: every op and copy */
    void *cublas;        /* cublasHandle_t, created on first matmul */
    void *cudnn;         /* cudnnHandle_t, created on first conv or pooling */
} gpu_state;

/* the state of tfe device dev (1..), made current; NULL + error set when CUDA
 * fails to set it up */
gpu_state *gpu_use(int dev);
/* 0, or -1 with "what: CALL on gpu:N failed: reason" as the error */
int gpu_check(cudaError_t e, const char *what, const char *call, int dev);

void *gpu_alloc(int dev, size_t nbytes);
void gpu_free(int dev, void *p, size_t nbytes);
void gpu_alloc_trim(int dev); /* every cached block back to CUDA */

int gpu_matmul(const tfe_opcall *c, int dev);
bool gpu_matmul_supports(const tfe_opcall *c);
/* conv2d, pooling and their backward ops through cuDNN (conv.c); false
 * without cuDNN or when the padding is not symmetric */
int gpu_conv(const tfe_opcall *c, int dev);
bool gpu_conv_supports(const tfe_opcall *c);

/* Collectives on device buffers through NCCL (nccl.c, HAVE_NCCL builds;
 * docs/distributed.md, "Devices: NCCL"): the backend's coll_path, allreduce,
 * broadcast and allgather (tensor/device.h). NCCL is loaded on first use. */
int gpu_nccl_path(int dev);
int gpu_nccl_allreduce(int dev, void *buf, size_t count, dist_type t, dist_op op);
int gpu_nccl_broadcast(int dev, void *buf, size_t bytes, int root);
int gpu_nccl_allgather(int dev, const void *send, size_t bytes, void *recv);
/* the loaded library's NCCL_VERSION_CODE (loading it), or -1 + error; no
 * device needed (tests/unit/test_nccl.c) */
int gpu_nccl_version(void);

/* Fused elementwise groups (tensor/fused.h) as one kernel each, compiled
 * with NVRTC (fuse.c): float32 programs without a final reduction, at most
 * GPU_FUSED_MAX_IN inputs. */
#define GPU_FUSED_MAX_IN 16
#include "tensor/fused.h"
/* The kernel's CUDA C (malloc'd), extern "C" __global__ void name(...);
 * NULL + error when the program is invalid or not supported. */
char *gpu_fused_source(const tfe_fprog *p, const char *name);
/* NVRTC: *ptx (malloc'd) for compute_80; *log (malloc'd, may be NULL or
 * empty; log may be NULL) the compiler's messages. 0, or -1 + error (the
 * log included) when NVRTC cannot be loaded or the compile fails. */
int gpu_fused_compile(const tfe_fprog *p, char **ptx, char **log);
/* out = p(in) on device dev (the backend's `fused`, tensor/device.h): out
 * contiguous float32 on dev, inputs on dev or 0-d cpu:0 values (passed by
 * value). Kernels are cached by program and device. 0; 1 when the program
 * is not supported (nothing done: run it on the CPU); -1 + error. */
int gpu_fused_run(const tfe_fprog *p, tfe_tensor *const *in, tfe_tensor *out, int dev);
/* TFE_GPU_FUSED_PTX_CHECK (tests/gpu_fused_ptx.sh): compiles p to PTX once
 * per distinct program, with a line on stderr ("fused-ptx: ok NAME ..." or
 * "skipped"), and its source first when show_source. 0, or -1 + error. */
int gpu_fused_check(const tfe_fprog *p, bool show_source);
#endif

#ifdef __cplusplus
}
#endif
#endif
