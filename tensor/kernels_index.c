/* kernels_index.c — indexing ops: gather, scatter_add, scatter, boolean_mask
 * and one_hot (infer rules and CPU kernels). Inputs are made contiguous first;
 * outputs are contiguous (boolean_mask allocates its own: F_SELFOUT). */
#include <stdlib.h>
#include <string.h>

#include "tensor/kernels.h"
#include "tensor/ops.h"
#include "util/xalloc.h"

/* Below this many bytes of copying, a loop runs on the calling thread. */
#define INDEX_GRAIN_BYTES (1 << 16)

static bool is_cpu_dtype(tfe_dtype dt) { return dt <= TFE_FLOAT64; }

/* The axis attribute: axes[0] when given (negative counts from the end),
 * else 0. */
static int index_axis(const char *opname, const tfe_attrs *at, int rank, int *axis) {
    return kn_axis(opname, at->naxes >= 1 ? at->axes[0] : 0, rank, axis);
}

static int check_indices_dtype(const char *opname, const tfe_tensor *idx) {
    if (!dtype_is_int(idx->dtype)) {
        tfe_error_set("%s: indices must be int32 or int64, got %s", opname, dtype_name(idx->dtype));
        return -1;
    }
    return 0;
}

/* Shape of gather(x, idx, axis): x.shape[:axis] + idx.shape + x.shape[axis+1:]. */
static int gather_shape(const char *opname, const tfe_tensor *x, const tfe_tensor *idx, int axis,
                        int *rank, int64_t *shape) {
    int r = x->rank - 1 + idx->rank;
    if (r > TFE_MAX_RANK) {
        tfe_error_set("%s: result would have rank %d, more than the maximum %d", opname, r,
                      TFE_MAX_RANK);
        return -1;
    }
    int k = 0;
    for (int i = 0; i < axis; i++) shape[k++] = x->shape[i];
    for (int i = 0; i < idx->rank; i++) shape[k++] = idx->shape[i];
    for (int i = axis + 1; i < x->rank; i++) shape[k++] = x->shape[i];
    *rank = r;
    return 0;
}

/* Checks the common arguments of gather/scatter and computes the gather shape. */
static int index_common(const char *opname, const tfe_opcall *c, int *axis, int *grank,
                        int64_t *gshape) {
    const tfe_tensor *x = c->in[0], *idx = c->in[1];
    if (x->rank == 0) {
        tfe_error_set("%s: cannot index a 0-d tensor", opname);
        return -1;
    }
    if (check_indices_dtype(opname, idx) < 0) return -1;
    if (index_axis(opname, c->at, x->rank, axis) < 0) return -1;
    return gather_shape(opname, x, idx, *axis, grank, gshape);
}

/* Reads the indices into int64, wrapping negatives; errors on the first one
 * out of range. Returns a malloc'd array (NULL + error on failure; n may be 0). */
static int64_t *load_indices(const char *opname, const tfe_tensor *idx, int axis, int64_t size,
                             int64_t *n_out) {
    int64_t n = tensor_numel(idx);
    int64_t *v = try_malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) {
        tfe_error_set("%s: out of memory", opname);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t j = tensor_load_i64(idx, i);
        int64_t w = j < 0 ? j + size : j;
        if (w < 0 || w >= size) {
            /* a 0-d index is x[i]: the message of basic indexing, whichever
             * path ran it (a staged x[i] with a traced i gathers) */
            if (idx->rank == 0)
                tfe_error_set("index %lld is out of range for axis %d with size %lld", (long long)j, axis,
                              (long long)size);
            else
                tfe_error_set("%s: index %lld is out of range for axis %d with size %lld", opname,
                              (long long)j, axis, (long long)size);
            free(v);
            return NULL;
        }
        v[i] = w;
    }
    *n_out = n;
    return v;
}

static int64_t prod(const int64_t *s, int a, int b) {
    int64_t p = 1;
    for (int i = a; i < b; i++) p *= s[i];
    return p;
}

/* ---- gather ------------------------------------------------------------ */

int infer_gather(const tfe_opcall *c, tfe_meta *m) {
    int axis;
    if (index_common("gather", c, &axis, &m->rank, m->shape) < 0) return -1;
    m->dtype = c->in[0]->dtype;
    m->weak = false;
    return 0;
}

typedef struct gather_ctx {
    const char *src;
    char *dst;
    const int64_t *idx;
    int64_t nidx, axis_size;
    size_t row;        /* bytes per copied row (the axes after `axis`) */
    bool add;          /* scatter_add */
    tfe_dtype dt;
} gather_ctx;

/* Rows r = o*nidx + j of the result take source row o*axis_size + idx[j]. */
static void gather_range(int64_t r0, int64_t r1, void *vctx) {
    gather_ctx *g = vctx;
    for (int64_t r = r0; r < r1; r++) {
        int64_t o = r / g->nidx, j = r % g->nidx;
        memcpy(g->dst + (size_t)r * g->row, g->src + (size_t)(o * g->axis_size + g->idx[j]) * g->row,
               g->row);
    }
}

static int64_t grain_rows(size_t row) {
    int64_t g = (int64_t)(INDEX_GRAIN_BYTES / (row ? row : 1));
    return g < 1 ? 1 : g;
}

int k_gather(const tfe_opcall *c) {
    tfe_tensor *x = c->in[0], *idx = c->in[1], *out = c->out[0];
    int axis, grank;
    int64_t gshape[TFE_MAX_RANK];
    if (index_common("gather", c, &axis, &grank, gshape) < 0) return -1;
    int64_t nidx;
    int64_t *iv = load_indices("gather", idx, axis, x->shape[axis], &nidx);
    if (!iv) return -1;
    tfe_tensor *xc = tensor_contiguous(x);
    if (!xc) {
        free(iv);
        return -1;
    }
    gather_ctx g = {
        .src = tensor_data(xc), .dst = tensor_data(out), .idx = iv, .nidx = nidx,
        .axis_size = x->shape[axis],
        .row = (size_t)prod(x->shape, axis + 1, x->rank) * dtype_size(x->dtype),
    };
    int64_t rows = prod(x->shape, 0, axis) * nidx;
    if (rows > 0 && g.row > 0) tfe_parallel_for(rows, grain_rows(g.row), gather_range, &g);
    tensor_decref(xc);
    free(iv);
    return 0;
}

/* ---- scatter_add, scatter ------------------------------------------------ */

/* v broadcast (NumPy rules) to shape and converted to dtype dt by the cast
 * rules, as a fresh contiguous tensor. */
static tfe_tensor *broadcast_convert(tfe_tensor *v, int rank, const int64_t *shape, tfe_dtype dt) {
    tfe_tensor *o = tensor_new(dt, rank, shape);
    if (o && kn_copy_into(o, v) < 0) {
        tensor_decref(o);
        return NULL;
    }
    return o;
}

int infer_scatter(const tfe_opcall *c, tfe_meta *m) {
    const char *opname = tfe_ops[c->op].name;
    tfe_tensor *x = c->in[0], *v = c->in[2];
    int axis, grank;
    int64_t gshape[TFE_MAX_RANK];
    char b1[200], b2[200];
    if (index_common(opname, c, &axis, &grank, gshape) < 0) return -1;
    bool ok = v->rank <= grank;
    for (int i = 0; ok && i < v->rank; i++) {
        int64_t d = v->shape[v->rank - 1 - i];
        ok = d == 1 || d == gshape[grank - 1 - i];
    }
    if (!ok) {
        tfe_error_set("%s: values of shape %s cannot be broadcast to %s", opname,
                      shape_str(v->rank, v->shape, b1), shape_str(grank, gshape, b2));
        return -1;
    }
    m->dtype = x->dtype;
    m->weak = false;
    m->rank = x->rank;
    memcpy(m->shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
    return 0;
}

#define ADD_ROW(T)                                                   \
    do {                                                             \
        T *d_ = (T *)drow;                                           \
        const T *s_ = (const T *)srow;                               \
        for (int64_t e = 0; e < n; e++) d_[e] += s_[e];               \
    } while (0)

/* One task per outer index o: the rows o*axis_size + idx[j] that it writes
 * are disjoint from every other o's, so duplicates inside one o stay in
 * order (last write wins for scatter) and no two threads touch one row. */
static void scatter_range(int64_t o0, int64_t o1, void *vctx) {
    gather_ctx *g = vctx;
    size_t es = dtype_size(g->dt);
    int64_t n = (int64_t)(g->row / es);
    for (int64_t o = o0; o < o1; o++) {
        for (int64_t j = 0; j < g->nidx; j++) {
            char *drow = (char *)g->dst + (size_t)(o * g->axis_size + g->idx[j]) * g->row;
            const char *srow = g->src + (size_t)(o * g->nidx + j) * g->row;
            if (!g->add) {
                memcpy(drow, srow, g->row);
                continue;
            }
            switch (g->dt) {
            case TFE_BOOL: for (int64_t e = 0; e < n; e++) ((bool *)drow)[e] |= ((const bool *)srow)[e]; break;
            case TFE_INT32: ADD_ROW(int32_t); break;
            case TFE_INT64: ADD_ROW(int64_t); break;
            case TFE_FLOAT32: ADD_ROW(float); break;
            case TFE_FLOAT64: ADD_ROW(double); break;
            case TFE_FLOAT16: case TFE_BFLOAT16: case TFE_NDTYPES:
            default: break;
            }
        }
    }
}

static int scatter_common(const tfe_opcall *c, bool add) {
    const char *opname = add ? "scatter_add" : "scatter";
    tfe_tensor *x = c->in[0], *idx = c->in[1], *v = c->in[2], *out = c->out[0];
    int axis, grank;
    int64_t gshape[TFE_MAX_RANK];
    if (!is_cpu_dtype(x->dtype)) {
        tfe_error_set("%s: dtype %s is not supported on the CPU", opname, dtype_name(x->dtype));
        return -1;
    }
    if (index_common(opname, c, &axis, &grank, gshape) < 0) return -1;
    int64_t nidx;
    int64_t *iv = load_indices(opname, idx, axis, x->shape[axis], &nidx);
    if (!iv) return -1;
    tfe_tensor *xc = tensor_contiguous(x);
    tfe_tensor *vb = xc ? broadcast_convert(v, grank, gshape, x->dtype) : NULL;
    if (!vb) {
        if (xc) tensor_decref(xc);
        free(iv);
        return -1;
    }
    size_t es = dtype_size(x->dtype);
    int64_t n = tensor_numel(x);
    if (n) memcpy(tensor_data(out), tensor_data(xc), (size_t)n * es);
    gather_ctx g = {
        .src = tensor_data(vb), .dst = tensor_data(out), .idx = iv, .nidx = nidx,
        .axis_size = x->shape[axis], .add = add, .dt = x->dtype,
        .row = (size_t)prod(x->shape, axis + 1, x->rank) * es,
    };
    int64_t outer = prod(x->shape, 0, axis);
    if (outer > 0 && nidx > 0 && g.row > 0) {
        size_t per_o = g.row * (size_t)nidx;
        int64_t grain = (int64_t)(INDEX_GRAIN_BYTES / per_o);
        tfe_parallel_for(outer, grain < 1 ? 1 : grain, scatter_range, &g);
    }
    tensor_decref(vb);
    tensor_decref(xc);
    free(iv);
    return 0;
}

int k_scatter_add(const tfe_opcall *c) { return scatter_common(c, true); }
int k_scatter(const tfe_opcall *c) { return scatter_common(c, false); }

/* ---- boolean_mask -------------------------------------------------------- */

static int mask_check(const tfe_opcall *c) {
    const tfe_tensor *x = c->in[0], *mask = c->in[1];
    char b1[200], b2[200];
    if (mask->dtype != TFE_BOOL) {
        tfe_error_set("boolean_mask: mask must be bool, got %s", dtype_name(mask->dtype));
        return -1;
    }
    bool ok = mask->rank <= x->rank;
    for (int i = 0; ok && i < mask->rank; i++) ok = mask->shape[i] == x->shape[i];
    if (!ok) {
        tfe_error_set("boolean_mask: mask shape %s does not match the leading axes of shape %s",
                      shape_str(mask->rank, mask->shape, b1), shape_str(x->rank, x->shape, b2));
        return -1;
    }
    if (1 + x->rank - mask->rank > TFE_MAX_RANK) {
        tfe_error_set("boolean_mask: result would have rank %d, more than the maximum %d",
                      1 + x->rank - mask->rank, TFE_MAX_RANK);
        return -1;
    }
    return 0;
}

/* The length of the first axis depends on the data: the meta says -1. */
int infer_bool_mask(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0], *mask = c->in[1];
    if (mask_check(c) < 0) return -1;
    m->dtype = x->dtype;
    m->weak = false;
    m->rank = 1 + x->rank - mask->rank;
    m->shape[0] = -1;
    for (int i = mask->rank; i < x->rank; i++) m->shape[1 + i - mask->rank] = x->shape[i];
    return 0;
}

int k_bool_mask(const tfe_opcall *c) {
    tfe_tensor *x = c->in[0], *mask = c->in[1];
    if (mask_check(c) < 0) return -1;
    tfe_tensor *mc = tensor_contiguous(mask);
    if (!mc) return -1;
    tfe_tensor *xc = tensor_contiguous(x);
    if (!xc) {
        tensor_decref(mc);
        return -1;
    }
    const bool *mv = (const bool *)tensor_data(mc);
    int64_t nm = tensor_numel(mask), count = 0;
    for (int64_t i = 0; i < nm; i++) count += mv[i] != 0;
    int rank = 1 + x->rank - mask->rank;
    int64_t shape[TFE_MAX_RANK];
    shape[0] = count;
    for (int i = mask->rank; i < x->rank; i++) shape[1 + i - mask->rank] = x->shape[i];
    tfe_tensor *out = tensor_new(x->dtype, rank, shape);
    if (out) {
        size_t row = (size_t)prod(x->shape, mask->rank, x->rank) * dtype_size(x->dtype);
        const char *src = tensor_data(xc);
        char *dst = tensor_data(out);
        for (int64_t i = 0; i < nm && row; i++)
            if (mv[i]) {
                memcpy(dst, src + (size_t)i * row, row);
                dst += row;
            }
        c->out[0] = out;
    }
    tensor_decref(xc);
    tensor_decref(mc);
    return out ? 0 : -1;
}

/* ---- one_hot --------------------------------------------------------------- */

static int one_hot_check(const tfe_opcall *c, int64_t *depth) {
    const tfe_tensor *idx = c->in[0];
    if (check_indices_dtype("one_hot", idx) < 0) return -1;
    if (c->at->nints < 1 || c->at->ints[0] < 0) {
        tfe_error_set("one_hot: depth must be a non-negative integer%s",
                      c->at->nints < 1 ? " (none given)" : "");
        return -1;
    }
    if (!is_cpu_dtype(c->at->dtype)) {
        tfe_error_set("one_hot: dtype %s is not supported on the CPU", dtype_name(c->at->dtype));
        return -1;
    }
    if (idx->rank + 1 > TFE_MAX_RANK) {
        tfe_error_set("one_hot: result would have rank %d, more than the maximum %d",
                      idx->rank + 1, TFE_MAX_RANK);
        return -1;
    }
    *depth = c->at->ints[0];
    return 0;
}

int infer_one_hot(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *idx = c->in[0];
    int64_t depth;
    if (one_hot_check(c, &depth) < 0) return -1;
    m->dtype = c->at->dtype;
    m->weak = false;
    m->rank = idx->rank + 1;
    memcpy(m->shape, idx->shape, sizeof(int64_t) * (size_t)idx->rank);
    m->shape[idx->rank] = depth;
    return 0;
}

/* Indices outside [0, depth) give a row of zeros, as in TensorFlow. */
int k_one_hot(const tfe_opcall *c) {
    tfe_tensor *idx = c->in[0], *out = c->out[0];
    int64_t depth;
    if (one_hot_check(c, &depth) < 0) return -1;
    tfe_dtype dt = out->dtype;
    size_t es = dtype_size(dt);
    int64_t n = tensor_numel(idx);
    char *dst = tensor_data(out);
    if (n * depth == 0) return 0;
    memset(dst, 0, (size_t)(n * depth) * es);
    for (int64_t i = 0; i < n; i++) {
        int64_t j = tensor_load_i64(idx, i);
        if (j < 0 || j >= depth) continue;
        char *p = dst + (size_t)(i * depth + j) * es;
        switch (dt) {
        case TFE_BOOL: *(bool *)p = true; break;
        case TFE_INT32: *(int32_t *)p = 1; break;
        case TFE_INT64: *(int64_t *)p = 1; break;
        case TFE_FLOAT32: *(float *)p = 1.0f; break;
        case TFE_FLOAT64: *(double *)p = 1.0; break;
        case TFE_FLOAT16: case TFE_BFLOAT16: case TFE_NDTYPES:
        default: break;
        }
    }
    return 0;
}
