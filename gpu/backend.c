/* backend.c — the CUDA backend's vtable (tensor/device.h): discovery, one
 * stream per device, copies, and the ops with a GPU kernel: elementwise
 * float32 (unary, binary with broadcasting, comparisons, where), copy,
 * sum/mean/max/min over any axes, softmax/log_softmax, matmul (matmul.c),
 * conv2d and pooling with their backward ops (conv.c, cuDNN).
 * Every op waits for its stream before it returns, so a CUDA error is
 * reported at the op that caused it and host reads of results are safe; a
 * later step (staged plans on the stream) will drop that wait. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu.h"
#include "tensor/kernels.h"

enum { MAXDEV = 16 };
static gpu_state states[MAXDEV];
static bool ready[MAXDEV];
static int ordinals[MAXDEV];
static int current = -1;

int gpu_check(cudaError_t e, const char *what, const char *call, int dev) {
    if (e == cudaSuccess) return 0;
    cudaGetLastError(); /* clear a non-sticky error so the next call can work */
    tfe_error_set("%s: %s on gpu:%d failed: %s (%s)", what, call, dev - 1, cudaGetErrorName(e),
                  cudaGetErrorString(e));
    return -1;
}

gpu_state *gpu_use(int dev) {
    gpu_state *g = &states[dev];
    if (current != ordinals[dev]) {
        if (gpu_check(cudaSetDevice(ordinals[dev]), "device", "cudaSetDevice", dev)) return NULL;
        current = ordinals[dev];
    }
    if (!ready[dev]) {
        g->ordinal = ordinals[dev];
        if (gpu_check(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking), "device",
                      "cudaStreamCreateWithFlags", dev))
            return NULL;
        ready[dev] = true;
    }
    return g;
}

static int sync_op(gpu_state *g, const char *what, int dev) {
    return gpu_check(cudaStreamSynchronize(g->stream), what, "cudaStreamSynchronize", dev);
}

static int copy_bytes(int dst_dev, void *dst, int src_dev, const void *src, size_t nbytes) {
    int dev = dst_dev ? dst_dev : src_dev;
    gpu_state *g = gpu_use(dev);
    if (!g) return -1;
    if (gpu_check(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, g->stream), "to", "cudaMemcpyAsync", dev))
        return -1;
    return sync_op(g, "to", dev);
}

static int launch_copy(gpu_state *g, tfe_tensor *dst, const tfe_tensor *src, const char *what, int dev) {
    gpu_copy c = {.rank = src->rank, .esz = (int)kn_esz(src->dtype), .n = tensor_numel(src),
                  .src = tensor_data(src), .dst = tensor_data(dst)};
    for (int d = 0; d < src->rank; d++) {
        c.shape[d] = src->shape[d];
        c.st[d] = src->strides[d];
    }
    return gpu_check(gpu_launch_copy(&c, g->stream), what, "kernel launch", dev);
}

/* the gpu_float code of a float dtype the cast kernel converts, or -1 */
static int float_code(tfe_dtype dt) {
    return dt == TFE_FLOAT32 ? GF_F32 : dt == TFE_FLOAT16 ? GF_F16 : dt == TFE_BFLOAT16 ? GF_BF16 : -1;
}

static int launch_cast(gpu_state *g, const tfe_opcall *c, int dev) {
    const tfe_tensor *src = c->in[0];
    tfe_tensor *dst = c->out[0];
    gpu_cast k = {.c = {.rank = src->rank, .esz = (int)kn_esz(dst->dtype), .n = tensor_numel(src),
                        .src = tensor_data(src), .dst = tensor_data(dst)},
                  .from = float_code(src->dtype), .to = float_code(dst->dtype)};
    for (int d = 0; d < src->rank; d++) {
        k.c.shape[d] = src->shape[d];
        k.c.st[d] = src->strides[d];
    }
    return gpu_check(gpu_launch_cast(&k, g->stream), "cast", "kernel launch", dev);
}

static int contiguous(tfe_tensor *dst, const tfe_tensor *src) {
    int dev = src->storage->device;
    gpu_state *g = gpu_use(dev);
    if (!g || launch_copy(g, dst, src, "to", dev)) return -1;
    return sync_op(g, "to", dev);
}

/* ---- which ops ------------------------------------------------------------------ */
static int ew_code(tfe_op op) {
    switch (op) {
    case OP_NEG: return G_NEG;
    case OP_ABS: return G_ABS;
    case OP_SIGN: return G_SIGN;
    case OP_EXP: return G_EXP;
    case OP_LOG: return G_LOG;
    case OP_LOG1P: return G_LOG1P;
    case OP_SQRT: return G_SQRT;
    case OP_RSQRT: return G_RSQRT;
    case OP_SIN: return G_SIN;
    case OP_COS: return G_COS;
    case OP_TANH: return G_TANH;
    case OP_SIGMOID: return G_SIGMOID;
    case OP_RELU: return G_RELU;
    case OP_GELU: return G_GELU;
    case OP_SOFTPLUS: return G_SOFTPLUS;
    case OP_FLOOR: return G_FLOOR;
    case OP_CEIL: return G_CEIL;
    case OP_ROUND: return G_ROUND;
    case OP_ISNAN: return G_ISNAN;
    case OP_ISFINITE: return G_ISFINITE;
    case OP_ADD: return G_ADD;
    case OP_SUB: return G_SUB;
    case OP_MUL: return G_MUL;
    case OP_DIV: return G_DIV;
    case OP_FLOORDIV: return G_FLOORDIV;
    case OP_MOD: return G_MOD;
    case OP_POW: return G_POW;
    case OP_MAXIMUM: return G_MAXIMUM;
    case OP_MINIMUM: return G_MINIMUM;
    case OP_EQ: return G_EQ;
    case OP_NE: return G_NE;
    case OP_LT: return G_LT;
    case OP_LE: return G_LE;
    case OP_GT: return G_GT;
    case OP_GE: return G_GE;
    case OP_WHERE: return G_WHERE;
    default: return -1;
    }
}

/* a 0-d host tensor's value, read without telling a trace (tensor.h) */
static float host_value(const tfe_tensor *t) {
    const char *p = tensor_data(t);
    switch (t->dtype) {
    case TFE_BOOL: return *(const uint8_t *)p != 0;
    case TFE_INT32: return (float)*(const int32_t *)p;
    case TFE_INT64: return (float)*(const int64_t *)p;
    case TFE_FLOAT32: return *(const float *)p;
    default: return (float)*(const double *)p;
    }
}

static bool on(const tfe_tensor *t, int dev) { return t->storage && t->storage->device == dev; }

/* conv2d, pooling and their backward ops: cuDNN (conv.c) */
static bool conv_op(tfe_op op) {
    return op == OP_CONV2D || op == OP_CONV2D_BACKPROP_INPUT || op == OP_CONV2D_BACKPROP_FILTER ||
           op == OP_MAX_POOL2D || op == OP_AVG_POOL2D || op == OP_MAX_POOL2D_GRAD || op == OP_AVG_POOL2D_GRAD;
}

static bool supports(const tfe_opcall *c, int dev) {
    const tfe_tensor *x = c->in[0];
    if (!(tfe_ops[c->op].flags & F_GPU)) return false; /* ops.def says which */
    if (conv_op(c->op)) return gpu_conv_supports(c);
    switch (c->op) {
    case OP_COPY:
    case OP_STOP_GRADIENT: /* any dtype: a byte copy; the input must be here */
        return on(x, dev) && kn_esz(x->dtype) <= 8;
    case OP_CAST: /* between float32, float16 and bfloat16 */
        return on(x, dev) && float_code(x->dtype) >= 0 && float_code(c->at->dtype) >= 0;
    case OP_SUM:
    case OP_MEAN:
    case OP_MAX:
    case OP_MIN: {
        unsigned mask;
        if (x->dtype != TFE_FLOAT32 || kn_axes_mask("", c->at, x->rank, &mask)) return false;
        for (int d = 0; d < x->rank; d++)
            if ((mask & (1u << d)) && x->shape[d] == 0) return false; /* empty: the CPU's rule */
        return true;
    }
    case OP_SOFTMAX:
    case OP_LOG_SOFTMAX: return x->dtype == TFE_FLOAT32 && x->rank >= 1;
    case OP_MATMUL: return gpu_matmul_supports(c);
    default: break;
    }
    int g = ew_code(c->op);
    if (g < 0) return false;
    tfe_meta m;
    if (tfe_ops[c->op].infer(c, &m)) {
        tfe_error_clear();
        return false; /* the CPU path reports it */
    }
    bool bout = g == G_ISNAN || g == G_ISFINITE || (g >= G_EQ && g <= G_GE);
    if (m.dtype != (bout ? TFE_BOOL : TFE_FLOAT32)) return false;
    for (int i = 0; i < c->nin; i++) {
        const tfe_tensor *t = c->in[i];
        tfe_dtype want = g == G_WHERE && i == 0 ? TFE_BOOL : TFE_FLOAT32;
        bool host_scalar = t->rank == 0 && on(t, 0);
        if (host_scalar ? !(t->weak || t->dtype != TFE_FLOAT64) : t->dtype != want) return false;
    }
    return true;
}

/* ---- running them ------------------------------------------------------------------ */
static int run_ew(gpu_state *g, const tfe_opcall *c, int dev) {
    tfe_tensor *o = c->out[0];
    gpu_ew e = {.op = ew_code(c->op), .rank = o->rank, .n = tensor_numel(o), .out = tensor_data(o), .flat = 1};
    for (int d = 0; d < o->rank; d++) e.shape[d] = o->shape[d];
    for (int k = 0; k < c->nin; k++) {
        const tfe_tensor *t = c->in[k];
        if (on(t, 0)) { /* a 0-d host value (tensor/device.c leaves those here) */
            e.v[k] = host_value(t);
            continue;
        }
        e.p[k] = tensor_data(t);
        int64_t esz = (int64_t)kn_esz(t->dtype);
        bool same = t->rank == o->rank && tensor_is_contiguous(t);
        for (int d = 0; d < o->rank; d++) {
            int td = d - (o->rank - t->rank);
            int64_t st = td < 0 || t->shape[td] == 1 ? 0 : t->strides[td] / esz;
            e.st[k][d] = st;
            if (td >= 0 && t->shape[td] != o->shape[d]) same = false;
        }
        if (!same) e.flat = 0;
    }
    return gpu_check(gpu_launch_ew(&e, g->stream), kn_opname(c), "kernel launch", dev);
}

static int run_reduce(gpu_state *g, const tfe_opcall *c, int dev) {
    const tfe_tensor *x = c->in[0];
    unsigned mask;
    if (kn_axes_mask(kn_opname(c), c->at, x->rank, &mask)) return -1;
    gpu_red r = {.op = c->op == OP_SUM ? GR_SUM : c->op == OP_MEAN ? GR_MEAN : c->op == OP_MAX ? GR_MAX : GR_MIN,
                 .nout = 1, .nred = 1, .in = (const float *)tensor_data(x), .out = (float *)tensor_data(c->out[0])};
    for (int d = 0; d < x->rank; d++) {
        int64_t st = x->strides[d] / (int64_t)sizeof(float);
        if (mask & (1u << d)) {
            r.rshape[r.nr] = x->shape[d];
            r.rst[r.nr++] = st;
            r.nred *= x->shape[d];
        } else {
            r.kshape[r.nk] = x->shape[d];
            r.kst[r.nk++] = st;
            r.nout *= x->shape[d];
        }
    }
    return gpu_check(gpu_launch_reduce(&r, g->stream), kn_opname(c), "kernel launch", dev);
}

static int run_softmax(gpu_state *g, const tfe_opcall *c, int dev) {
    tfe_tensor *x = c->in[0], *xc = x;
    int axis;
    if (kn_axis(kn_opname(c), c->at->naxes > 0 ? c->at->axes[0] : -1, x->rank, &axis)) return -1;
    if (!tensor_is_contiguous(x)) { /* the kernel walks (outer, n, inner) blocks */
        if (!(xc = tensor_new_on(x->dtype, x->rank, x->shape, dev))) return -1;
        if (launch_copy(g, xc, x, kn_opname(c), dev)) {
            tensor_decref(xc);
            return -1;
        }
    }
    gpu_softmax m = {.outer = 1, .n = x->shape[axis], .inner = 1, .log = c->op == OP_LOG_SOFTMAX,
                     .in = (const float *)tensor_data(xc), .out = (float *)tensor_data(c->out[0])};
    for (int d = 0; d < axis; d++) m.outer *= x->shape[d];
    for (int d = axis + 1; d < x->rank; d++) m.inner *= x->shape[d];
    int rc = gpu_check(gpu_launch_softmax(&m, g->stream), kn_opname(c), "kernel launch", dev);
    /* xc may be released before the kernel ran: the block goes back to the
     * cache, and nothing else is queued on this stream until the wait below */
    if (xc != x) tensor_decref(xc);
    return rc;
}

static int run(const tfe_opcall *c, int dev) {
    gpu_state *g = gpu_use(dev);
    if (!g) return -1;
    int rc;
    switch (c->op) {
    case OP_COPY:
    case OP_STOP_GRADIENT: rc = launch_copy(g, c->out[0], c->in[0], kn_opname(c), dev); break;
    case OP_SUM:
    case OP_MEAN:
    case OP_MAX:
    case OP_MIN: rc = run_reduce(g, c, dev); break;
    case OP_SOFTMAX:
    case OP_LOG_SOFTMAX: rc = run_softmax(g, c, dev); break;
    case OP_MATMUL: rc = gpu_matmul(c, dev); break;
    case OP_CAST: rc = launch_cast(g, c, dev); break;
    default: rc = conv_op(c->op) ? gpu_conv(c, dev) : run_ew(g, c, dev); break;
    }
    if (rc) return rc;
    return sync_op(g, kn_opname(c), dev);
}

static tfe_backend backend = {
    .alloc = gpu_alloc, .free = gpu_free, .copy = copy_bytes, .contiguous = contiguous,
    .supports = supports, .run = run, .fused = gpu_fused_run,
};

/* Called once (tensor/device.c, through tfe_gpu_register). No driver, no device, or any CUDA error:
 * NULL, and tfe runs on the CPU without a word. */
const tfe_backend *tfe_gpu_probe(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
        cudaGetLastError();
        return NULL;
    }
    int k = 0;
    for (int i = 0; i < n && k + 1 < MAXDEV; i++) {
        int managed = 0; /* the allocator's blocks are managed memory */
        if (cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, i) == cudaSuccess && managed)
            ordinals[++k] = i;
    }
    cudaGetLastError();
    if (!k) return NULL;
    backend.ndev = k;
    return &backend;
}

/* Plugs this backend into the device layer (from interp_new, before any
 * device query): tensor/ names no gpu/ function. */
void tfe_gpu_register(void);
void tfe_gpu_register(void) { tfe_device_register(tfe_gpu_probe, gpu_fused_check); }
