/* conv.c — conv2d and max/avg pooling, forward and backward, on the GPU
 * through cuDNN: NHWC float32 tensors (packed first when not contiguous),
 * tfe's HWIO filters transposed to cuDNN's KRSC (O, H, W, I) by the strided
 * copy kernel, and a filter gradient computed in KRSC and transposed back.
 * "same" padding is TensorFlow's (tensor/kernels_nn.c), which cuDNN can only
 * express when it is symmetric: otherwise the op stays on the CPU. FP32 math
 * by default (CUDNN_FMA_MATH: cuDNN's default math allows TF32 on Ampere and
 * later); TFE_GPU_TF32=1 allows TF32 tensor cores, as for matmul. Algorithms
 * come from cuDNN's heuristics (the _v7 queries), best first.
 * cuDNN is loaded with dlopen on first use, like cuBLAS (matmul.c). Without
 * cuDNN at build time these ops run on the CPU. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "config.h"
#include "gpu/gpu.h"
#include "tensor/base.h"

#ifndef HAVE_CUDNN
bool gpu_conv_supports(const tfe_opcall *c) {
    (void)c;
    return false;
}

int gpu_conv(const tfe_opcall *c, int dev) {
    tfe_error_set("%s: no cuDNN in this build for gpu:%d", kn_opname(c), dev - 1);
    return -1;
}
#else
#include <dlfcn.h>
#include <cudnn.h>

/* ---- geometry ------------------------------------------------------------------ */

/* one call as cuDNN sees it; x, y NHWC, w HWIO (conv only) */
typedef struct cgeom {
    int64_t x[4], w[4], y[4];
    int64_t kh, kw, sh, sw, dh, dw, ph, pw;
    bool conv, symmetric;
} cgeom;

static int64_t attr_or(const tfe_attrs *at, int i, int64_t dflt) { return i < at->nints ? at->ints[i] : dflt; }

/* output size and leading pad of one axis (TensorFlow's rule); false when the
 * padding is not the same on both sides */
static bool axis(int64_t in, int64_t k, int64_t d, int64_t s, bool same, int64_t *out, int64_t *pad) {
    if (!kn_conv_out_size(in, k, d, s, same, out, pad)) return false;
    int64_t total = (*out - 1) * s + (k - 1) * d + 1 - in;
    return total <= 0 ? *pad == 0 : total == 2 * *pad;
}

/* the op's infer rule has accepted the call: shapes and attributes are valid
 * (attributes as tensor/ops_nn.def lists them) */
static void geometry(const tfe_opcall *c, cgeom *g) {
    const tfe_attrs *at = c->at;
    const int64_t *x = c->in[0]->shape, *w = NULL;
    *g = (cgeom){.dh = 1, .dw = 1};
    if (c->op == OP_CONV2D) w = c->in[1]->shape;
    else if (c->op == OP_CONV2D_BACKPROP_INPUT) x = at->ints + 8, w = c->in[1]->shape;
    else if (c->op == OP_CONV2D_BACKPROP_FILTER) w = at->ints + 8;
    else if (c->op == OP_AVG_POOL2D_GRAD) x = at->ints + 8;
    /* else pooling, max_pool2d_grad: x is in[0] */
    g->conv = w != NULL;
    for (int d = 0; d < 4; d++) {
        g->x[d] = x[d];
        g->w[d] = w ? w[d] : 0;
    }
    if (g->conv) {
        g->kh = w[0];
        g->kw = w[1];
        g->sh = attr_or(at, 0, 1);
        g->sw = attr_or(at, 1, 1);
        g->dh = attr_or(at, 2, 1);
        g->dw = attr_or(at, 3, 1);
    } else {
        g->kh = at->ints[0];
        g->kw = at->ints[1];
        g->sh = attr_or(at, 2, g->kh);
        g->sw = attr_or(at, 3, g->kw);
    }
    bool same = attr_or(at, 4, 0) == 1;
    g->y[0] = x[0];
    g->y[3] = w ? w[3] : x[3];
    bool sym_h = axis(x[1], g->kh, g->dh, g->sh, same, &g->y[1], &g->ph);
    bool sym_w = axis(x[2], g->kw, g->dw, g->sw, same, &g->y[2], &g->pw);
    g->symmetric = sym_h && sym_w;
}

/* every dimension in 1..INT_MAX, and at most INT_MAX elements */
static bool fits(const int64_t *s) {
    for (int d = 0; d < 4; d++)
        if (s[d] < 1 || s[d] > INT_MAX) return false;
    return shape_numel(4, s) >= 0 && shape_numel(4, s) <= INT_MAX;
}

bool gpu_conv_supports(const tfe_opcall *c) {
    tfe_meta m;
    if (tfe_ops[c->op].infer(c, &m)) {
        tfe_error_clear();
        return false; /* the CPU path says what is wrong */
    }
    if (m.dtype != TFE_FLOAT32) return false;
    for (int i = 0; i < c->nin; i++)
        if (c->in[i]->dtype != TFE_FLOAT32) return false;
    cgeom g;
    geometry(c, &g);
    if (!g.symmetric || !fits(g.x) || !fits(g.y) || (g.conv && !fits(g.w))) return false;
    int64_t p[] = {g.kh, g.kw, g.sh, g.sw, g.dh, g.dw, g.ph, g.pw};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        if (p[i] > INT_MAX) return false;
    return true;
}

/* ---- cuDNN ------------------------------------------------------------------------ */

static struct {
    bool tried, ok, tf32;
    typeof(&cudnnCreate) create;
    typeof(&cudnnDestroy) destroy;
    typeof(&cudnnSetStream) set_stream;
    typeof(&cudnnGetErrorString) error_string;
    typeof(&cudnnCreateTensorDescriptor) create_tensor;
    typeof(&cudnnDestroyTensorDescriptor) destroy_tensor;
    typeof(&cudnnSetTensor4dDescriptor) set_tensor;
    typeof(&cudnnCreateFilterDescriptor) create_filter;
    typeof(&cudnnDestroyFilterDescriptor) destroy_filter;
    typeof(&cudnnSetFilter4dDescriptor) set_filter;
    typeof(&cudnnCreateConvolutionDescriptor) create_conv;
    typeof(&cudnnDestroyConvolutionDescriptor) destroy_conv;
    typeof(&cudnnSetConvolution2dDescriptor) set_conv;
    typeof(&cudnnSetConvolutionMathType) set_math;
    typeof(&cudnnGetConvolution2dForwardOutputDim) conv_out_dim;
    typeof(&cudnnGetConvolutionForwardAlgorithm_v7) fwd_algo;
    typeof(&cudnnGetConvolutionForwardWorkspaceSize) fwd_ws;
    typeof(&cudnnConvolutionForward) fwd;
    typeof(&cudnnGetConvolutionBackwardDataAlgorithm_v7) bwd_data_algo;
    typeof(&cudnnGetConvolutionBackwardDataWorkspaceSize) bwd_data_ws;
    typeof(&cudnnConvolutionBackwardData) bwd_data;
    typeof(&cudnnGetConvolutionBackwardFilterAlgorithm_v7) bwd_filter_algo;
    typeof(&cudnnGetConvolutionBackwardFilterWorkspaceSize) bwd_filter_ws;
    typeof(&cudnnConvolutionBackwardFilter) bwd_filter;
    typeof(&cudnnCreatePoolingDescriptor) create_pool;
    typeof(&cudnnDestroyPoolingDescriptor) destroy_pool;
    typeof(&cudnnSetPooling2dDescriptor) set_pool;
    typeof(&cudnnGetPooling2dForwardOutputDim) pool_out_dim;
    typeof(&cudnnPoolingForward) pool_fwd;
    typeof(&cudnnPoolingBackward) pool_bwd;
} dn;

#define SYM(field, name) (ok = ok && (dn.field = (typeof(dn.field))dlsym(h, name)) != NULL)

static int load_cudnn(const tfe_opcall *c, int dev) {
    if (!dn.tried) {
        dn.tried = true;
        void *h = dlopen(TFE_CUDNN_LIB, RTLD_NOW | RTLD_LOCAL);
        if (!h) h = dlopen("libcudnn.so", RTLD_NOW | RTLD_LOCAL);
        bool ok = h != NULL;
        SYM(create, "cudnnCreate");
        SYM(destroy, "cudnnDestroy");
        SYM(set_stream, "cudnnSetStream");
        SYM(error_string, "cudnnGetErrorString");
        SYM(create_tensor, "cudnnCreateTensorDescriptor");
        SYM(destroy_tensor, "cudnnDestroyTensorDescriptor");
        SYM(set_tensor, "cudnnSetTensor4dDescriptor");
        SYM(create_filter, "cudnnCreateFilterDescriptor");
        SYM(destroy_filter, "cudnnDestroyFilterDescriptor");
        SYM(set_filter, "cudnnSetFilter4dDescriptor");
        SYM(create_conv, "cudnnCreateConvolutionDescriptor");
        SYM(destroy_conv, "cudnnDestroyConvolutionDescriptor");
        SYM(set_conv, "cudnnSetConvolution2dDescriptor");
        SYM(set_math, "cudnnSetConvolutionMathType");
        SYM(conv_out_dim, "cudnnGetConvolution2dForwardOutputDim");
        SYM(fwd_algo, "cudnnGetConvolutionForwardAlgorithm_v7");
        SYM(fwd_ws, "cudnnGetConvolutionForwardWorkspaceSize");
        SYM(fwd, "cudnnConvolutionForward");
        SYM(bwd_data_algo, "cudnnGetConvolutionBackwardDataAlgorithm_v7");
        SYM(bwd_data_ws, "cudnnGetConvolutionBackwardDataWorkspaceSize");
        SYM(bwd_data, "cudnnConvolutionBackwardData");
        SYM(bwd_filter_algo, "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
        SYM(bwd_filter_ws, "cudnnGetConvolutionBackwardFilterWorkspaceSize");
        SYM(bwd_filter, "cudnnConvolutionBackwardFilter");
        SYM(create_pool, "cudnnCreatePoolingDescriptor");
        SYM(destroy_pool, "cudnnDestroyPoolingDescriptor");
        SYM(set_pool, "cudnnSetPooling2dDescriptor");
        SYM(pool_out_dim, "cudnnGetPooling2dForwardOutputDim");
        SYM(pool_fwd, "cudnnPoolingForward");
        SYM(pool_bwd, "cudnnPoolingBackward");
        dn.ok = ok;
        const char *tf32 = getenv("TFE_GPU_TF32");
        dn.tf32 = tf32 && *tf32 == '1';
    }
    if (!dn.ok) tfe_error_set("%s: cannot load cuDNN for gpu:%d (%s)", kn_opname(c), dev - 1, TFE_CUDNN_LIB);
    return dn.ok ? 0 : -1;
}

/* one call on the device: descriptors and scratch tensors, released by done() */
typedef struct job {
    const tfe_opcall *c;
    int dev;
    gpu_state *g;
    cudnnHandle_t h;
    cgeom q;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    cudnnPoolingDescriptor_t pd;
    tfe_tensor *tmp[4];
    int ntmp;
} job;

static int check(job *j, cudnnStatus_t s, const char *call) {
    if (s == CUDNN_STATUS_SUCCESS) return 0;
    tfe_error_set("%s: %s on gpu:%d failed: %s", kn_opname(j->c), call, j->dev - 1, dn.error_string(s));
    return -1;
}

static cudnnHandle_t handle(job *j) {
    if (!j->g->cudnn) {
        cudnnHandle_t h;
        if (load_cudnn(j->c, j->dev) || check(j, dn.create(&h), "cudnnCreate")) return NULL;
        if (check(j, dn.set_stream(h, j->g->stream), "cudnnSetStream")) {
            dn.destroy(h);
            return NULL;
        }
        j->g->cudnn = h;
    }
    return j->g->cudnn;
}

/* a contiguous float32 tensor on the device, released by done() */
static tfe_tensor *scratch(job *j, const int64_t *shape) {
    tfe_tensor *t = tensor_new_on(TFE_FLOAT32, 4, shape, j->dev);
    if (t) j->tmp[j->ntmp++] = t;
    return t;
}

/* dst (contiguous, shape shp) = src read with byte strides st, one per axis
 * of dst: transposes filters and packs inputs */
static int permute(job *j, void *dst, const void *src, const int64_t *shp, const int64_t *st) {
    gpu_copy cp = {.rank = 4, .esz = 4, .n = shape_numel(4, shp), .src = src, .dst = dst};
    for (int d = 0; d < 4; d++) {
        cp.shape[d] = shp[d];
        cp.st[d] = st[d];
    }
    return gpu_check(gpu_launch_copy(&cp, j->g->stream), kn_opname(j->c), "kernel launch", j->dev);
}

/* t's elements as cuDNN reads them: contiguous (NHWC) and 16-byte aligned
 * (a view may start anywhere), else a packed copy; NULL + error */
static const void *input(job *j, const tfe_tensor *t) {
    if (tensor_is_contiguous(t) && (uintptr_t)tensor_data(t) % 16 == 0) return tensor_data(t);
    tfe_tensor *p = scratch(j, t->shape);
    if (!p || permute(j, tensor_data(p), tensor_data(t), t->shape, t->strides)) return NULL;
    return tensor_data(p);
}

/* an HWIO filter (any strides) as a KRSC copy */
static const void *filter_krsc(job *j, const tfe_tensor *w) {
    int64_t shp[4] = {w->shape[3], w->shape[0], w->shape[1], w->shape[2]};
    int64_t st[4] = {w->strides[3], w->strides[0], w->strides[1], w->strides[2]};
    tfe_tensor *k = scratch(j, shp);
    if (!k || permute(j, tensor_data(k), tensor_data(w), shp, st)) return NULL;
    return tensor_data(k);
}

static int tensor_desc(job *j, cudnnTensorDescriptor_t *d, const int64_t *s) {
    if (check(j, dn.create_tensor(d), "cudnnCreateTensorDescriptor")) {
        *d = NULL;
        return -1;
    }
    /* dimensions are given as N, C, H, W whatever the layout */
    return check(j, dn.set_tensor(*d, CUDNN_TENSOR_NHWC, CUDNN_DATA_FLOAT, (int)s[0], (int)s[3], (int)s[1], (int)s[2]),
                 "cudnnSetTensor4dDescriptor");
}

/* cuDNN's output shape must be tfe's: a guard against a geometry mismatch */
static int same_out(job *j, const char *call, int n, int c, int h, int w) {
    const int64_t *y = j->q.y;
    if (n == y[0] && h == y[1] && w == y[2] && c == y[3]) return 0;
    tfe_error_set("%s: %s on gpu:%d gives (%d, %d, %d, %d), expected (%lld, %lld, %lld, %lld)", kn_opname(j->c),
                  call, j->dev - 1, n, h, w, c, (long long)y[0], (long long)y[1], (long long)y[2], (long long)y[3]);
    return -1;
}

static int conv_descs(job *j) {
    const cgeom *q = &j->q;
    if (tensor_desc(j, &j->xd, q->x) || tensor_desc(j, &j->yd, q->y)) return -1;
    if (check(j, dn.create_filter(&j->wd), "cudnnCreateFilterDescriptor")) {
        j->wd = NULL;
        return -1;
    }
    /* KRSC: k = out channels, c = in channels, h, w = the window */
    if (check(j, dn.set_filter(j->wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NHWC, (int)q->w[3], (int)q->w[2], (int)q->w[0],
                               (int)q->w[1]),
              "cudnnSetFilter4dDescriptor"))
        return -1;
    if (check(j, dn.create_conv(&j->cd), "cudnnCreateConvolutionDescriptor")) {
        j->cd = NULL;
        return -1;
    }
    if (check(j, dn.set_conv(j->cd, (int)q->ph, (int)q->pw, (int)q->sh, (int)q->sw, (int)q->dh, (int)q->dw,
                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
              "cudnnSetConvolution2dDescriptor") ||
        check(j, dn.set_math(j->cd, dn.tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH), "cudnnSetConvolutionMathType"))
        return -1;
    int n, c, h, w;
    if (check(j, dn.conv_out_dim(j->cd, j->xd, j->wd, &n, &c, &h, &w), "cudnnGetConvolution2dForwardOutputDim"))
        return -1;
    return same_out(j, "cudnnGetConvolution2dForwardOutputDim", n, c, h, w);
}

static int pool_descs(job *j) {
    const cgeom *q = &j->q;
    bool max = j->c->op == OP_MAX_POOL2D || j->c->op == OP_MAX_POOL2D_GRAD;
    if (tensor_desc(j, &j->xd, q->x) || tensor_desc(j, &j->yd, q->y)) return -1;
    if (check(j, dn.create_pool(&j->pd), "cudnnCreatePoolingDescriptor")) {
        j->pd = NULL;
        return -1;
    }
    /* "same" averages over the valid cells only; a NaN is a window's maximum,
     * as on the CPU */
    if (check(j, dn.set_pool(j->pd, max ? CUDNN_POOLING_MAX : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
                             CUDNN_PROPAGATE_NAN, (int)q->kh, (int)q->kw, (int)q->ph, (int)q->pw, (int)q->sh,
                             (int)q->sw),
              "cudnnSetPooling2dDescriptor"))
        return -1;
    int n, c, h, w;
    if (check(j, dn.pool_out_dim(j->pd, j->xd, &n, &c, &h, &w), "cudnnGetPooling2dForwardOutputDim")) return -1;
    return same_out(j, "cudnnGetPooling2dForwardOutputDim", n, c, h, w);
}

enum { FWD, BWD_DATA, BWD_FILTER };

/* One convolution (FWD: a = x, b = w -> y; BWD_DATA: a = w, b = dy -> dx;
 * BWD_FILTER: a = x, b = dy -> dw) with the first algorithm in the
 * heuristics' order that runs here. An algorithm the heuristics list as
 * usable can still be refused at run time (they do not see everything:
 * alignment, the math type), so CUDNN_STATUS_NOT_SUPPORTED moves on to the
 * next one; any other failure is reported. */
static int convolve(job *j, int dir, const void *a, const void *b, void *out) {
    static const char *const calls[3][3] = {
        {"cudnnGetConvolutionForwardAlgorithm_v7", "cudnnGetConvolutionForwardWorkspaceSize",
         "cudnnConvolutionForward"},
        {"cudnnGetConvolutionBackwardDataAlgorithm_v7", "cudnnGetConvolutionBackwardDataWorkspaceSize",
         "cudnnConvolutionBackwardData"},
        {"cudnnGetConvolutionBackwardFilterAlgorithm_v7", "cudnnGetConvolutionBackwardFilterWorkspaceSize",
         "cudnnConvolutionBackwardFilter"}};
    enum { MAXALGO = 16 };
    struct {
        int algo;
        cudnnStatus_t status;
        cudnnMathType_t math;
    } cand[MAXALGO];
    int n = 0;
    cudnnStatus_t s;
    switch (dir) {
    case FWD: {
        cudnnConvolutionFwdAlgoPerf_t p[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        s = dn.fwd_algo(j->h, j->xd, j->wd, j->cd, j->yd, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, p);
        for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < n && i < MAXALGO; i++)
            cand[i].algo = p[i].algo, cand[i].status = p[i].status, cand[i].math = p[i].mathType;
        break;
    }
    case BWD_DATA: {
        cudnnConvolutionBwdDataAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        s = dn.bwd_data_algo(j->h, j->wd, j->yd, j->cd, j->xd, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, p);
        for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < n && i < MAXALGO; i++)
            cand[i].algo = p[i].algo, cand[i].status = p[i].status, cand[i].math = p[i].mathType;
        break;
    }
    default: {
        cudnnConvolutionBwdFilterAlgoPerf_t p[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        s = dn.bwd_filter_algo(j->h, j->xd, j->yd, j->cd, j->wd, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, p);
        for (int i = 0; s == CUDNN_STATUS_SUCCESS && i < n && i < MAXALGO; i++)
            cand[i].algo = p[i].algo, cand[i].status = p[i].status, cand[i].math = p[i].mathType;
        break;
    }
    }
    if (check(j, s, calls[dir][0])) return -1;
    if (n > MAXALGO) n = MAXALGO;
    const float one = 1.0f, zero = 0.0f;
    cudnnStatus_t last = CUDNN_STATUS_SUCCESS;
    const char *last_call = NULL;
    for (int i = 0; i < n; i++) {
        if (cand[i].status != CUDNN_STATUS_SUCCESS) continue;
        bool tensor_op = cand[i].math == CUDNN_TENSOR_OP_MATH || cand[i].math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
        if (tensor_op && !dn.tf32) continue;
        /* with TF32 the descriptor takes the math type the heuristics paired
         * with the algorithm (else cuDNN may run a slower kernel); without,
         * it stays FMA-only */
        if (check(j, dn.set_math(j->cd, dn.tf32 ? cand[i].math : CUDNN_FMA_MATH), "cudnnSetConvolutionMathType"))
            return -1;
        size_t ws = 0;
        switch (dir) {
        case FWD:
            s = dn.fwd_ws(j->h, j->xd, j->wd, j->cd, j->yd, (cudnnConvolutionFwdAlgo_t)cand[i].algo, &ws);
            break;
        case BWD_DATA:
            s = dn.bwd_data_ws(j->h, j->wd, j->yd, j->cd, j->xd, (cudnnConvolutionBwdDataAlgo_t)cand[i].algo, &ws);
            break;
        default:
            s = dn.bwd_filter_ws(j->h, j->xd, j->yd, j->cd, j->wd, (cudnnConvolutionBwdFilterAlgo_t)cand[i].algo,
                                 &ws);
            break;
        }
        if (s != CUDNN_STATUS_SUCCESS) {
            last = s, last_call = calls[dir][1];
            continue;
        }
        /* from the caching allocator; freed before the stream has run the
         * convolution, which is safe: a block is only reused by work queued
         * later on this stream, and the op waits for the stream anyway */
        void *w = NULL;
        if (ws && !(w = gpu_alloc(j->dev, ws))) return -1;
        switch (dir) {
        case FWD:
            s = dn.fwd(j->h, &one, j->xd, a, j->wd, b, j->cd, (cudnnConvolutionFwdAlgo_t)cand[i].algo, w, ws, &zero,
                       j->yd, out);
            break;
        case BWD_DATA:
            s = dn.bwd_data(j->h, &one, j->wd, a, j->yd, b, j->cd, (cudnnConvolutionBwdDataAlgo_t)cand[i].algo, w,
                            ws, &zero, j->xd, out);
            break;
        default:
            s = dn.bwd_filter(j->h, &one, j->xd, a, j->yd, b, j->cd, (cudnnConvolutionBwdFilterAlgo_t)cand[i].algo,
                              w, ws, &zero, j->wd, out);
            break;
        }
        if (w) gpu_free(j->dev, w, ws);
        if (s == CUDNN_STATUS_SUCCESS) return 0;
        last = s, last_call = calls[dir][2];
        if (s != CUDNN_STATUS_NOT_SUPPORTED) break;
    }
    if (!last_call) {
        tfe_error_set("%s: %s on gpu:%d found no usable algorithm", kn_opname(j->c), calls[dir][0], j->dev - 1);
        return -1;
    }
    return check(j, last, last_call);
}

static int run_conv(job *j) {
    const tfe_opcall *c = j->c;
    void *out = tensor_data(c->out[0]);
    if (conv_descs(j)) return -1;
    if (c->op == OP_CONV2D) { /* x, w -> y */
        const void *x = input(j, c->in[0]), *w = x ? filter_krsc(j, c->in[1]) : NULL;
        return w ? convolve(j, FWD, x, w, out) : -1;
    }
    if (c->op == OP_CONV2D_BACKPROP_INPUT) { /* dy, w -> dx */
        const void *dy = input(j, c->in[0]), *w = dy ? filter_krsc(j, c->in[1]) : NULL;
        return w ? convolve(j, BWD_DATA, w, dy, out) : -1;
    }
    { /* OP_CONV2D_BACKPROP_FILTER: x, dy -> dw, computed in KRSC and transposed to HWIO */
        const int64_t *hwio = j->q.w;
        int64_t krsc[4] = {hwio[3], hwio[0], hwio[1], hwio[2]};
        const void *x = input(j, c->in[0]), *dy = x ? input(j, c->in[1]) : NULL;
        tfe_tensor *dw = dy ? scratch(j, krsc) : NULL;
        if (!dw || convolve(j, BWD_FILTER, x, dy, tensor_data(dw))) return -1;
        int64_t e = sizeof(float); /* dw's byte strides, in out's axis order */
        int64_t st[4] = {hwio[1] * hwio[2] * e, hwio[2] * e, e, hwio[0] * hwio[1] * hwio[2] * e};
        return permute(j, out, tensor_data(dw), hwio, st);
    }
}

static int run_pool(job *j) {
    const tfe_opcall *c = j->c;
    void *out = tensor_data(c->out[0]);
    const float one = 1.0f, zero = 0.0f;
    if (pool_descs(j)) return -1;
    if (c->op == OP_MAX_POOL2D || c->op == OP_AVG_POOL2D) {
        const void *x = input(j, c->in[0]);
        return x ? check(j, dn.pool_fwd(j->h, j->pd, &one, j->xd, x, &zero, j->yd, out), "cudnnPoolingForward") : -1;
    }
    if (c->op == OP_MAX_POOL2D_GRAD) { /* x, dy -> dx; cuDNN finds the maxima from x and y = max_pool2d(x) */
        const void *x = input(j, c->in[0]), *dy = x ? input(j, c->in[1]) : NULL;
        tfe_tensor *y = dy ? scratch(j, j->q.y) : NULL;
        if (!y || check(j, dn.pool_fwd(j->h, j->pd, &one, j->xd, x, &zero, j->yd, tensor_data(y)),
                        "cudnnPoolingForward"))
            return -1;
        return check(j, dn.pool_bwd(j->h, j->pd, &one, j->yd, tensor_data(y), j->yd, dy, j->xd, x, &zero, j->xd, out),
                     "cudnnPoolingBackward");
    }
    { /* OP_AVG_POOL2D_GRAD: dy -> dx. Averaging reads neither x nor y, but
       * cuDNN takes both; dy stands in for y and a scratch block for x */
        const void *dy = input(j, c->in[0]);
        tfe_tensor *x = dy ? scratch(j, j->q.x) : NULL;
        if (!x) return -1;
        return check(j, dn.pool_bwd(j->h, j->pd, &one, j->yd, dy, j->yd, dy, j->xd, tensor_data(x), &zero, j->xd, out),
                     "cudnnPoolingBackward");
    }
}

int gpu_conv(const tfe_opcall *c, int dev) {
    job j = {.c = c, .dev = dev, .g = gpu_use(dev)};
    if (!j.g || !(j.h = handle(&j))) return -1;
    geometry(c, &j.q);
    bool conv = j.q.conv;
    int rc = conv ? run_conv(&j) : run_pool(&j);
    if (j.xd) dn.destroy_tensor(j.xd);
    if (j.yd) dn.destroy_tensor(j.yd);
    if (j.wd) dn.destroy_filter(j.wd);
    if (j.cd) dn.destroy_conv(j.cd);
    if (j.pd) dn.destroy_pool(j.pd);
    /* scratch blocks go back to the cache; the stream orders any reuse after
     * the cuDNN calls, and the op waits for the stream before returning */
    for (int i = 0; i < j.ntmp; i++) tensor_decref(j.tmp[i]);
    return rc;
}
#endif
