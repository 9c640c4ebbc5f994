// kernels.cu — the CUDA kernels of the GPU backend: one generic strided
// elementwise kernel (unary, binary, where; broadcasting by zero strides), a
// strided copy, float32/float16/bfloat16 casts, reductions over any axes,
// softmax/log_softmax. float32; the elementwise formulas are
// tensor/elem.def's, as on the CPU (no fast-math: same rounding as libm
// within a few ulp). Launchers return the launch's error (gpu/backend.c
// turns it into a tfe error).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "gpu/gpu.h"

#define THREADS 256

static unsigned blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : b > 65536 ? 65536 : b); // grid-stride past this
}

// ---- elementwise ------------------------------------------------------------
// the formulas of tensor/elem.def in float32 (T float; F(exp) is expf)
#define T float
#define F(fn) fn##f
#define ELEM_HELPER(NAME, PARAMS, ...) __device__ static inline T F(NAME) PARAMS __VA_ARGS__
#include "tensor/elem.def"

// the value of op at one element; x, y are the operands. op is an int (the
// launch's), not a tfe_op: the cases are elem.def's rows, and backend.c
// launches no other op
__device__ static inline float ew_apply(int op, float x, float y) {
    switch (op) {
#define ELEM_UNARY(ID, COST, EXPR) case OP_##ID: return (EXPR);
#define ELEM_BINARY(ID, COST, EXPR) case OP_##ID: return (EXPR);
#define ELEM_TEST(ID, EXPR) case OP_##ID: return (EXPR);
#define ELEM_COMPARE(ID, EXPR) case OP_##ID: return (EXPR);
#include "tensor/elem.def"
    default: return 0.0f;
    }
}
#undef T
#undef F

__global__ void ew_kernel(gpu_ew e) {
    const float *a = (const float *)e.p[0], *b = (const float *)e.p[1], *c = (const float *)e.p[2];
    const unsigned char *cond = (const unsigned char *)e.p[0];
    bool where = e.op == OP_WHERE, bout = e.bout;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < e.n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t o0 = i, o1 = i, o2 = i;
        if (!e.flat) {
            o0 = o1 = o2 = 0;
            int64_t r = i;
            for (int d = e.rank - 1; d >= 0; d--) {
                int64_t k = r % e.shape[d];
                r /= e.shape[d];
                o0 += k * e.st[0][d];
                o1 += k * e.st[1][d];
                o2 += k * e.st[2][d];
            }
        }
        float y = b ? b[o1] : e.v[1];
        float r;
        if (where) {
            bool t = cond ? cond[o0] != 0 : e.v[0] != 0;
            r = t ? y : (c ? c[o2] : e.v[2]);
        } else {
            r = ew_apply(e.op, a ? a[o0] : e.v[0], y);
        }
        if (bout) ((unsigned char *)e.out)[i] = r != 0;
        else ((float *)e.out)[i] = r;
    }
}

extern "C" cudaError_t gpu_launch_ew(const gpu_ew *e, cudaStream_t s) {
    if (e->n == 0) return cudaSuccess;
    ew_kernel<<<blocks_for(e->n), THREADS, 0, s>>>(*e);
    return cudaGetLastError();
}

// ---- strided copy -------------------------------------------------------------
template <typename T> __global__ void copy_kernel(gpu_copy c) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < c.n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off = 0, r = i;
        for (int d = c.rank - 1; d >= 0; d--) {
            off += (r % c.shape[d]) * c.st[d];
            r /= c.shape[d];
        }
        ((T *)c.dst)[i] = *(const T *)(c.src + off);
    }
}

extern "C" cudaError_t gpu_launch_copy(const gpu_copy *c, cudaStream_t s) {
    if (c->n == 0) return cudaSuccess;
    unsigned nb = blocks_for(c->n);
    switch (c->esz) {
    case 1: copy_kernel<unsigned char><<<nb, THREADS, 0, s>>>(*c); break;
    case 2: copy_kernel<unsigned short><<<nb, THREADS, 0, s>>>(*c); break;
    case 4: copy_kernel<unsigned int><<<nb, THREADS, 0, s>>>(*c); break;
    case 8: copy_kernel<unsigned long long><<<nb, THREADS, 0, s>>>(*c); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

// ---- casts between float formats --------------------------------------------
__device__ static inline float load_float(const char *p, int fmt) {
    if (fmt == GF_F16) return __half2float(*(const __half *)p);
    if (fmt == GF_BF16) return __bfloat162float(*(const __nv_bfloat16 *)p);
    return *(const float *)p;
}

__device__ static inline void store_float(char *p, int fmt, float v) {
    if (fmt == GF_F16) *(__half *)p = __float2half_rn(v);
    else if (fmt == GF_BF16) *(__nv_bfloat16 *)p = __float2bfloat16_rn(v);
    else *(float *)p = v;
}

__global__ void cast_kernel(gpu_cast k) {
    const gpu_copy &c = k.c;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < c.n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t off = 0, r = i;
        for (int d = c.rank - 1; d >= 0; d--) {
            off += (r % c.shape[d]) * c.st[d];
            r /= c.shape[d];
        }
        store_float(c.dst + i * c.esz, k.to, load_float(c.src + off, k.from));
    }
}

extern "C" cudaError_t gpu_launch_cast(const gpu_cast *k, cudaStream_t s) {
    if (k->c.n == 0) return cudaSuccess;
    cast_kernel<<<blocks_for(k->c.n), THREADS, 0, s>>>(*k);
    return cudaGetLastError();
}

// ---- reductions ---------------------------------------------------------------
__device__ static inline float red_init(int op) {
    return op == GR_MAX ? -INFINITY : op == GR_MIN ? INFINITY : 0.0f;
}
__device__ static inline float red_comb(int op, float a, float b) { // NaN wins, as on the CPU
    switch (op) {
    case GR_MAX: return b > a || b != b ? b : a;
    case GR_MIN: return b < a || b != b ? b : a;
    default: return a + b;
    }
}
__device__ static inline int64_t red_offset(int n, const int64_t *shape, const int64_t *st, int64_t i) {
    int64_t off = 0;
    for (int d = n - 1; d >= 0; d--) {
        off += (i % shape[d]) * st[d];
        i /= shape[d];
    }
    return off;
}

// one block per output element: threads split the reduced elements, then a
// tree in shared memory
__global__ void reduce_block_kernel(gpu_red r) {
    __shared__ float sh[THREADS];
    for (int64_t o = blockIdx.x; o < r.nout; o += gridDim.x) {
        const float *base = r.in + red_offset(r.nk, r.kshape, r.kst, o);
        float acc = red_init(r.op);
        for (int64_t j = threadIdx.x; j < r.nred; j += blockDim.x)
            acc = red_comb(r.op, acc, base[red_offset(r.nr, r.rshape, r.rst, j)]);
        sh[threadIdx.x] = acc;
        __syncthreads();
        for (int w = THREADS / 2; w > 0; w /= 2) {
            if ((int)threadIdx.x < w) sh[threadIdx.x] = red_comb(r.op, sh[threadIdx.x], sh[threadIdx.x + w]);
            __syncthreads();
        }
        if (threadIdx.x == 0) r.out[o] = r.op == GR_MEAN ? sh[0] / (float)r.nred : sh[0];
        __syncthreads();
    }
}

// one thread per output element: short reductions (bias gradients, sums over
// a small axis), where a block each would idle
__global__ void reduce_thread_kernel(gpu_red r) {
    for (int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; o < r.nout; o += (int64_t)gridDim.x * blockDim.x) {
        const float *base = r.in + red_offset(r.nk, r.kshape, r.kst, o);
        float acc = red_init(r.op);
        for (int64_t j = 0; j < r.nred; j++) acc = red_comb(r.op, acc, base[red_offset(r.nr, r.rshape, r.rst, j)]);
        r.out[o] = r.op == GR_MEAN ? acc / (float)r.nred : acc;
    }
}

extern "C" cudaError_t gpu_launch_reduce(const gpu_red *r, cudaStream_t s) {
    if (r->nout == 0) return cudaSuccess;
    if (r->nred <= 64 && r->nout >= 1024)
        reduce_thread_kernel<<<blocks_for(r->nout), THREADS, 0, s>>>(*r);
    else
        reduce_block_kernel<<<(unsigned)(r->nout < 65536 ? r->nout : 65536), THREADS, 0, s>>>(*r);
    return cudaGetLastError();
}

// ---- softmax --------------------------------------------------------------------
__device__ static float block_reduce(float v, bool is_max, float *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = THREADS / 2; w > 0; w /= 2) {
        if ((int)threadIdx.x < w) {
            float a = sh[threadIdx.x], b = sh[threadIdx.x + w];
            sh[threadIdx.x] = is_max ? (b > a || b != b ? b : a) : a + b;
        }
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

// one block per row (outer index, inner index); the row's stride is inner
__global__ void softmax_kernel(gpu_softmax m) {
    __shared__ float sh[THREADS];
    for (int64_t row = blockIdx.x; row < m.outer * m.inner; row += gridDim.x) {
        int64_t base = (row / m.inner) * m.n * m.inner + row % m.inner;
        const float *x = m.in + base;
        float *y = m.out + base;
        float mx = -INFINITY;
        for (int64_t j = threadIdx.x; j < m.n; j += blockDim.x) {
            float v = x[j * m.inner];
            mx = v > mx || v != v ? v : mx;
        }
        mx = block_reduce(mx, true, sh);
        float sum = 0;
        for (int64_t j = threadIdx.x; j < m.n; j += blockDim.x) sum += expf(x[j * m.inner] - mx);
        sum = block_reduce(sum, false, sh);
        float ls = logf(sum), inv = 1.0f / sum;
        for (int64_t j = threadIdx.x; j < m.n; j += blockDim.x) {
            float v = x[j * m.inner];
            y[j * m.inner] = m.log ? v - mx - ls : expf(v - mx) * inv;
        }
    }
}

extern "C" cudaError_t gpu_launch_softmax(const gpu_softmax *m, cudaStream_t s) {
    int64_t rows = m->outer * m->inner;
    if (rows == 0 || m->n == 0) return cudaSuccess;
    softmax_kernel<<<(unsigned)(rows < 65536 ? rows : 65536), THREADS, 0, s>>>(*m);
    return cudaGetLastError();
}
