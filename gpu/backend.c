/* backend.c — the CUDA backend's vtable (tensor/device.h): discovery, one
 * stream per device, copies, and the ops with a GPU kernel: elementwise
 * float32 (unary, binary with broadcasting, comparisons, where), copy,
 * sum/mean/max/min over any axes, softmax/log_softmax, matmul (matmul.c),
 * conv2d and pooling with their backward ops (conv.c, cuDNN), and the
 * collectives on device memory through NCCL when built with it (nccl.c).
 * Every op waits for its stream before it returns, so a CUDA error is
 * reported at the op that caused it and host reads of results are safe; a
 * later step (staged plans on the stream) will drop that wait. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "gpu/gpu.h"
#include "tensor/base.h"

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
/* How each F_GPU op runs (a table, not a switch over the op enum with a
 * default): the elementwise ops are tensor/elem.def's rows (gpu/kernels.cu
 * computes them from it), float32 in and float32 (K_EW) or bool (K_EW_BOOL)
 * out; where is the kernel's own. K_NONE: no GPU kernel. */
enum gpu_kind { K_NONE, K_EW, K_EW_BOOL, K_COPY, K_CAST, K_REDUCE, K_SOFTMAX, K_MATMUL, K_CONV };
static const int8_t ew_kind[TFE_NOPS] = {
#define ELEM_UNARY(ID, COST, EXPR) [OP_##ID] = K_EW,
#define ELEM_BINARY(ID, COST, EXPR) [OP_##ID] = K_EW,
#define ELEM_TEST(ID, EXPR) [OP_##ID] = K_EW_BOOL,
#define ELEM_COMPARE(ID, EXPR) [OP_##ID] = K_EW_BOOL,
#include "tensor/elem.def"
    [OP_WHERE] = K_EW,
};
/* the others (copy is elementwise too, but a byte copy of any dtype here) */
static const int8_t other_kind[TFE_NOPS] = {
    [OP_COPY] = K_COPY, [OP_STOP_GRADIENT] = K_COPY, [OP_CAST] = K_CAST,
    [OP_SUM] = K_REDUCE, [OP_MEAN] = K_REDUCE, [OP_MAX] = K_REDUCE, [OP_MIN] = K_REDUCE,
    [OP_SOFTMAX] = K_SOFTMAX, [OP_LOG_SOFTMAX] = K_SOFTMAX, [OP_MATMUL] = K_MATMUL,
    [OP_CONV2D] = K_CONV, [OP_CONV2D_BACKPROP_INPUT] = K_CONV, [OP_CONV2D_BACKPROP_FILTER] = K_CONV,
    [OP_MAX_POOL2D] = K_CONV, [OP_AVG_POOL2D] = K_CONV, [OP_MAX_POOL2D_GRAD] = K_CONV,
    [OP_AVG_POOL2D_GRAD] = K_CONV,
};
static enum gpu_kind kind_of(tfe_op op) { return other_kind[op] ? other_kind[op] : ew_kind[op]; }

/* a 0-d host tensor's value, read without telling a trace (tensor.h) */
static float host_value(const tfe_tensor *t) {
    const char *p = tensor_data(t);
    switch (t->dtype) {
    case TFE_BOOL: return *(const uint8_t *)p != 0;
    case TFE_INT32: return (float)*(const int32_t *)p;
    case TFE_INT64: return (float)*(const int64_t *)p;
    case TFE_FLOAT32: return *(const float *)p;
    case TFE_FLOAT64: case TFE_FLOAT16: case TFE_BFLOAT16: case TFE_NDTYPES:
    default: return (float)*(const double *)p;
    }
}

static bool on(const tfe_tensor *t, int dev) { return t->storage && t->storage->device == dev; }

static bool supports(const tfe_opcall *c, int dev) {
    const tfe_tensor *x = c->in[0];
    if (!(tfe_ops[c->op].flags & F_GPU)) return false; /* ops.def says which */
    enum gpu_kind kind = kind_of(c->op);
    switch (kind) {
    case K_NONE: return false;
    case K_CONV: return gpu_conv_supports(c);
    case K_COPY: /* any dtype: a byte copy; the input must be here */
        return on(x, dev) && kn_esz(x->dtype) <= 8;
    case K_CAST: /* between float32, float16 and bfloat16 */
        return on(x, dev) && float_code(x->dtype) >= 0 && float_code(c->at->dtype) >= 0;
    case K_REDUCE: {
        unsigned mask;
        if (x->dtype != TFE_FLOAT32 || kn_axes_mask("", c->at, x->rank, &mask)) return false;
        for (int d = 0; d < x->rank; d++)
            if ((mask & (1u << d)) && x->shape[d] == 0) return false; /* empty: the CPU's rule */
        return true;
    }
    case K_SOFTMAX: return x->dtype == TFE_FLOAT32 && x->rank >= 1;
    case K_MATMUL: return gpu_matmul_supports(c);
    case K_EW:
    case K_EW_BOOL: break;
    }
    tfe_meta m;
    if (tfe_ops[c->op].infer(c, &m)) {
        tfe_error_clear();
        return false; /* the CPU path reports it */
    }
    if (m.dtype != (kind == K_EW_BOOL ? TFE_BOOL : TFE_FLOAT32)) return false;
    for (int i = 0; i < c->nin; i++) {
        const tfe_tensor *t = c->in[i];
        tfe_dtype want = c->op == OP_WHERE && i == 0 ? TFE_BOOL : TFE_FLOAT32;
        bool host_scalar = t->rank == 0 && on(t, 0);
        if (host_scalar ? !(t->weak || t->dtype != TFE_FLOAT64) : t->dtype != want) return false;
    }
    return true;
}

/* ---- running them ------------------------------------------------------------------ */
static int run_ew(gpu_state *g, const tfe_opcall *c, int dev) {
    tfe_tensor *o = c->out[0];
    gpu_ew e = {.op = c->op, .bout = ew_kind[c->op] == K_EW_BOOL, .rank = o->rank, .n = tensor_numel(o), .out = tensor_data(o), .flat = 1};
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
    switch (kind_of(c->op)) {
    case K_COPY: rc = launch_copy(g, c->out[0], c->in[0], kn_opname(c), dev); break;
    case K_REDUCE: rc = run_reduce(g, c, dev); break;
    case K_SOFTMAX: rc = run_softmax(g, c, dev); break;
    case K_MATMUL: rc = gpu_matmul(c, dev); break;
    case K_CAST: rc = launch_cast(g, c, dev); break;
    case K_CONV: rc = gpu_conv(c, dev); break;
    case K_EW:
    case K_EW_BOOL: rc = run_ew(g, c, dev); break;
    case K_NONE:
    default: /* supports() said no */
        tfe_error_set("%s: no GPU kernel", kn_opname(c));
        return -1;
    }
    if (rc) return rc;
    return sync_op(g, kn_opname(c), dev);
}

static tfe_backend backend = {
    .alloc = gpu_alloc, .free = gpu_free, .copy = copy_bytes, .contiguous = contiguous,
    .supports = supports, .run = run, .fused = gpu_fused_run,
#ifdef HAVE_NCCL /* collectives on GPU tensors: NCCL (nccl.c); without it, through the host */
    .coll_path = gpu_nccl_path, .allreduce = gpu_nccl_allreduce, .broadcast = gpu_nccl_broadcast,
    .allgather = gpu_nccl_allgather,
#endif
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
/* TFE_DEBUG=4: a fused program's CUDA C (the kernel named as the debug
 * line shows it), or NULL with the reason cleared (no GPU kernel for it). */
static char *debug_fused_source(const tfe_fprog *p) {
    char *s = gpu_fused_source(p, "tfe_fused_debug");
    if (!s) tfe_error_clear();
    return s;
}

void tfe_gpu_register(void) {
    tfe_device_register(tfe_gpu_probe, gpu_fused_check);
    tfe_device_fused_source = debug_fused_source;
}
