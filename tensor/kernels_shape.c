/* kernels_shape.c — creation kernels (full, arange, linspace, eye) and the
 * shape kernels: views (reshape of compatible layouts, transpose,
 * broadcast_to, slice, split) and copies (set_slice, concat, stack, tile). */
#include "tensor/kernels.h"

/* ---- creation ------------------------------------------------------------------ */
static void fill(tfe_tensor *t, double v) {
    int64_t n = tensor_numel(t);
    char *p = tensor_data(t);
    union { uint8_t b; uint16_t h; uint32_t w; uint64_t l; char bytes[8]; } x = {.l = 0};
    kn_store_f64(x.bytes, t->dtype, v);
    switch (dtype_size(t->dtype)) {
    case 1: memset(p, x.b, (size_t)n); break;
    case 2: for (int64_t i = 0; i < n; i++) ((uint16_t *)p)[i] = x.h; break;
    case 4: for (int64_t i = 0; i < n; i++) ((uint32_t *)p)[i] = x.w; break;
    default: for (int64_t i = 0; i < n; i++) ((uint64_t *)p)[i] = x.l; break;
    }
}

int k_full(const tfe_opcall *c) {
    fill(c->out[0], c->at->f[0]);
    return 0;
}

int k_arange(const tfe_opcall *c) {
    tfe_tensor *o = c->out[0];
    double start = c->at->f[0], step = c->at->f[2];
    int64_t n = tensor_numel(o);
    size_t esz = dtype_size(o->dtype);
    char *p = tensor_data(o);
    if (c->at->nints == 3 && dtype_is_int(o->dtype)) { /* exact int start and step (bi_arange) */
        for (int64_t i = 0; i < n; i++) kn_store_i64(p + i * esz, o->dtype, /* unsigned: i * step may pass int64's max where the sum does not */
                         (int64_t)((uint64_t)c->at->ints[1] + (uint64_t)i * (uint64_t)c->at->ints[2]));
    } else if (dtype_is_int(o->dtype) && start == floor(start) && step == floor(step)) {
        int64_t s0 = (int64_t)start, st = (int64_t)step;
        for (int64_t i = 0; i < n; i++) kn_store_i64(p + i * esz, o->dtype, s0 + i * st);
    } else {
        for (int64_t i = 0; i < n; i++) kn_store_f64(p + i * esz, o->dtype, start + (double)i * step);
    }
    return 0;
}

int k_linspace(const tfe_opcall *c) {
    tfe_tensor *o = c->out[0];
    double start = c->at->f[0], stop = c->at->f[1];
    int64_t n = tensor_numel(o);
    size_t esz = dtype_size(o->dtype);
    char *p = tensor_data(o);
    double step = n > 1 ? (stop - start) / (double)(n - 1) : 0;
    for (int64_t i = 0; i < n; i++) kn_store_f64(p + i * esz, o->dtype, start + (double)i * step);
    if (n > 1) kn_store_f64(p + (n - 1) * esz, o->dtype, stop);
    return 0;
}

int k_eye(const tfe_opcall *c) {
    tfe_tensor *o = c->out[0];
    fill(o, 0);
    int64_t r = o->shape[0], m = o->shape[1], k = r < m ? r : m;
    for (int64_t i = 0; i < k; i++) kn_store_f64(tensor_data(o) + i * o->strides[0] + i * o->strides[1], o->dtype, 1);
    return 0;
}

/* ---- views ------------------------------------------------------------------------- */
tfe_tensor *kn_permute(tfe_tensor *t, const int *perm) {
    int64_t shape[TFE_MAX_RANK], strides[TFE_MAX_RANK];
    for (int i = 0; i < t->rank; i++) {
        shape[i] = t->shape[perm[i]];
        strides[i] = t->strides[perm[i]];
    }
    return tensor_view(t, t->rank, shape, strides, t->offset);
}

/* Strides for viewing x with a new shape without copying (NumPy's
 * _attempt_nocopy_reshape); false when the layout does not allow it. */
static bool nocopy_strides(const tfe_tensor *x, int nd, const int64_t *nshape, int64_t *nstrides) {
    int64_t od[TFE_MAX_RANK], os[TFE_MAX_RANK];
    int ond = 0;
    for (int i = 0; i < x->rank; i++)
        if (x->shape[i] != 1) {
            od[ond] = x->shape[i];
            os[ond++] = x->strides[i];
        }
    int oi = 0, oj = 1, ni = 0, nj = 1;
    while (ni < nd && oi < ond) {
        int64_t np = nshape[ni], op = od[oi];
        while (np != op) {
            if (np < op) np *= nshape[nj++];
            else op *= od[oj++];
        }
        for (int ok = oi; ok < oj - 1; ok++)
            if (os[ok] != od[ok + 1] * os[ok + 1]) return false;
        nstrides[nj - 1] = os[oj - 1];
        for (int nk = nj - 1; nk > ni; nk--) nstrides[nk - 1] = nstrides[nk] * nshape[nk];
        ni = nj++;
        oi = oj++;
    }
    int64_t last = ni > 0 ? nstrides[ni - 1] : (int64_t)dtype_size(x->dtype);
    for (int nk = ni; nk < nd; nk++) nstrides[nk] = last;
    return true;
}

/* reshape, expand_dims, squeeze: a view when the layout allows, else a copy */
int k_reshape(const tfe_opcall *c) {
    tfe_tensor *x = c->in[0];
    tfe_meta m;
    if (tfe_ops[c->op].infer(c, &m)) return -1;
    int64_t strides[TFE_MAX_RANK];
    tfe_tensor *o;
    if (tensor_numel(x) > 0 && nocopy_strides(x, m.rank, m.shape, strides)) {
        o = tensor_view(x, m.rank, m.shape, strides, x->offset);
    } else {
        tfe_tensor *xc = tensor_contiguous(x);
        if (!xc) return -1;
        int64_t st = (int64_t)dtype_size(x->dtype);
        for (int i = m.rank - 1; i >= 0; i--) {
            strides[i] = st;
            st *= m.shape[i];
        }
        o = tensor_view(xc, m.rank, m.shape, strides, xc->offset);
        tensor_decref(xc);
    }
    if (!o) return -1;
    o->weak = x->weak;
    c->out[0] = o;
    return 0;
}

int k_transpose(const tfe_opcall *c) {
    tfe_tensor *x = c->in[0];
    int perm[TFE_MAX_RANK];
    for (int i = 0; i < x->rank; i++) {
        if (c->at->nints == 0) perm[i] = x->rank - 1 - i;
        else perm[i] = (int)(c->at->ints[i] < 0 ? c->at->ints[i] + x->rank : c->at->ints[i]);
    }
    tfe_tensor *o = kn_permute(x, perm);
    if (!o) return -1;
    c->out[0] = o;
    return 0;
}

int k_broadcast_to(const tfe_opcall *c) {
    tfe_tensor *x = c->in[0];
    int64_t strides[TFE_MAX_RANK];
    kn_bcast_strides(x, c->at->nints, c->at->ints, strides);
    tfe_tensor *o = tensor_view(x, c->at->nints, c->at->ints, strides, x->offset);
    if (!o) return -1;
    c->out[0] = o;
    return 0;
}

/* The slice of x described by c's attributes, as a view. */
static tfe_tensor *slice_view(const tfe_opcall *c, tfe_tensor *x) {
    int64_t len[TFE_MAX_RANK], shape[TFE_MAX_RANK], strides[TFE_MAX_RANK];
    unsigned drop;
    if (kn_slice_geometry(c, x, len, &drop)) return NULL;
    int64_t off = x->offset;
    int r = 0;
    for (int k = 0; k < x->rank; k++) {
        int64_t start = 0, step = 1;
        if (3 * k + 2 < c->at->nints) {
            start = c->at->ints[3 * k];
            step = c->at->ints[3 * k + 2];
        }
        if (len[k] > 0) off += start * x->strides[k];
        if (drop & (1u << k)) continue;
        shape[r] = len[k];
        strides[r++] = step * x->strides[k];
    }
    return tensor_view(x, r, shape, strides, off);
}

int k_slice(const tfe_opcall *c) {
    tfe_tensor *o = slice_view(c, c->in[0]);
    if (!o) return -1;
    c->out[0] = o;
    return 0;
}

/* Whether t is one element whose bytes are all zero, broadcast (every axis
 * of more than one element has stride 0): slice's gradient, zeros to
 * scatter into. Copying it is clearing, bit for bit (+0.0, integer 0, false). */
static bool broadcast_zero(const tfe_tensor *t) {
    if (tensor_numel(t) == 0) return false;
    for (int k = 0; k < t->rank; k++)
        if (t->shape[k] > 1 && t->strides[k] != 0) return false;
    const unsigned char *b = (const unsigned char *)tensor_data(t);
    for (size_t i = 0; i < kn_esz(t->dtype); i++)
        if (b[i]) return false;
    return true;
}

int k_set_slice(const tfe_opcall *c) {
    tfe_tensor *o = c->out[0];
    if (o->dtype == c->in[0]->dtype && tensor_is_contiguous(o) && broadcast_zero(c->in[0]))
        memset(tensor_data(o), 0, (size_t)tensor_numel(o) * kn_esz(o->dtype));
    else if (kn_copy_into(o, c->in[0]))
        return -1;
    tfe_tensor *v = slice_view(c, o);
    if (!v) return -1;
    int r = kn_copy_into(v, c->in[1]);
    tensor_decref(v);
    return r;
}

int k_split(const tfe_opcall *c) {
    tfe_tensor *x = c->in[0];
    int axis;
    if (kn_axis("split", c->at->axes[0], x->rank, &axis)) return -1;
    int64_t shape[TFE_MAX_RANK], pos = 0;
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->rank);
    for (int i = 0; i < c->at->nints; i++) {
        shape[axis] = c->at->ints[i];
        int64_t off = x->offset + (shape[axis] > 0 ? pos * x->strides[axis] : 0);
        c->out[i] = tensor_view(x, x->rank, shape, x->strides, off);
        if (!c->out[i]) return -1;
        pos += c->at->ints[i];
    }
    return 0;
}

/* ---- copies --------------------------------------------------------------------------- */
int k_concat(const tfe_opcall *c) {
    tfe_tensor *o = c->out[0];
    int axis;
    if (kn_axis("concat", c->at->axes[0], o->rank, &axis)) return -1;
    int64_t shape[TFE_MAX_RANK], pos = 0;
    memcpy(shape, o->shape, sizeof(int64_t) * (size_t)o->rank);
    for (int i = 0; i < c->nin; i++) {
        shape[axis] = c->in[i]->shape[axis];
        if (shape[axis] == 0) continue;
        tfe_tensor *v = tensor_view(o, o->rank, shape, o->strides, o->offset + pos * o->strides[axis]);
        if (!v) return -1;
        int r = kn_copy_into(v, c->in[i]);
        tensor_decref(v);
        if (r) return -1;
        pos += shape[axis];
    }
    return 0;
}

int k_stack(const tfe_opcall *c) {
    tfe_tensor *o = c->out[0];
    int axis;
    if (kn_axis("stack", c->at->axes[0], o->rank, &axis)) return -1;
    int64_t shape[TFE_MAX_RANK], strides[TFE_MAX_RANK];
    for (int i = 0, j = 0; i < o->rank; i++)
        if (i != axis) {
            shape[j] = o->shape[i];
            strides[j++] = o->strides[i];
        }
    for (int i = 0; i < c->nin; i++) {
        tfe_tensor *v = tensor_view(o, o->rank - 1, shape, strides, o->offset + i * o->strides[axis]);
        if (!v) return -1;
        int r = kn_copy_into(v, c->in[i]);
        tensor_decref(v);
        if (r) return -1;
    }
    return 0;
}

/* tile: the output seen as (reps0, d0, reps1, d1, ...) with the input
 * repeated along each reps axis by a zero stride. */
int k_tile(const tfe_opcall *c) {
    tfe_tensor *x = c->in[0], *o = c->out[0];
    int r = o->rank, d = r - x->rank;
    if (tensor_numel(o) == 0) return 0;
    int64_t shape[KN_MAXDIM], strides[2][KN_MAXDIM];
    for (int i = 0; i < r; i++) {
        int64_t xd = i >= d ? x->shape[i - d] : 1;
        shape[2 * i] = o->shape[i] / xd;
        shape[2 * i + 1] = xd;
        strides[0][2 * i] = o->strides[i] * xd;
        strides[0][2 * i + 1] = o->strides[i];
        strides[1][2 * i] = 0;
        strides[1][2 * i + 1] = i >= d ? x->strides[i - d] : 0;
    }
    char *base[2] = {tensor_data(o), tensor_data(x)};
    return kn_copy_raw(o->dtype, base, strides, 2 * r, shape);
}
