/* infer.c — shape/dtype rules of the ops in ops.def: each checks its inputs
 * and attributes, fills the result's tfe_meta, or sets an error that names
 * the op and the shapes. No data is touched here. */
#include "tensor/kernels.h"

#define NAME kn_opname(c)
#define SHP(t, buf) shape_str((t)->rank, (t)->shape, buf)

static int check_shape(const char *op, int n, const int64_t *shape) {
    if (n > TFE_MAX_RANK) {
        tfe_error_set("%s: rank %d exceeds the maximum rank %d", op, n, TFE_MAX_RANK);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (shape[i] < 0) {
            char b[200];
            tfe_error_set("%s: negative dimension %lld in shape %s", op, (long long)shape[i],
                          shape_str(n, shape, b));
            return -1;
        }
    if (shape_numel(n, shape) < 0) {
        char b[200];
        tfe_error_set("%s: shape %s is too large", op, shape_str(n, shape, b));
        return -1;
    }
    return 0;
}

/* ---- creation ------------------------------------------------------------- */
int infer_create(const tfe_opcall *c, tfe_meta *m) {
    if (check_shape(NAME, c->at->nints, c->at->ints)) return -1;
    kn_meta_set(m, c->at->dtype, false, c->at->nints, c->at->ints);
    return 0;
}

int infer_arange(const tfe_opcall *c, tfe_meta *m) {
    double start = c->at->f[0], stop = c->at->f[1], step = c->at->f[2];
    if (step == 0 || step != step) {
        tfe_error_set("arange: step must be nonzero");
        return -1;
    }
    /* ints[0], when given, is the length the caller computed from the values
     * as written (bi_arange); f[] may hold their dtype roundings. ints[1]
     * and ints[2], when given, are an int result's exact start and step. */
    double n = c->at->nints >= 1 ? (double)c->at->ints[0] : ceil((stop - start) / step);
    if (!(n > 0)) n = 0;
    if (n > 4e18) {
        tfe_error_set("arange: too many elements");
        return -1;
    }
    int64_t len = (int64_t)n;
    kn_meta_set(m, c->at->dtype, false, 1, &len);
    return 0;
}

int infer_linspace(const tfe_opcall *c, tfe_meta *m) {
    if (c->at->ints[0] < 0) {
        tfe_error_set("linspace: number of samples %lld must be non-negative",
                      (long long)c->at->ints[0]);
        return -1;
    }
    kn_meta_set(m, c->at->dtype, false, 1, c->at->ints);
    return 0;
}

int infer_eye(const tfe_opcall *c, tfe_meta *m) {
    int64_t s[2] = {c->at->ints[0], c->at->nints >= 2 ? c->at->ints[1] : c->at->ints[0]};
    if (check_shape("eye", 2, s)) return -1;
    kn_meta_set(m, c->at->dtype, false, 2, s);
    return 0;
}

/* ---- elementwise ------------------------------------------------------------ */
int infer_unary(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    kn_meta_set(m, x->dtype, x->weak, x->rank, x->shape);
    return 0;
}

int infer_unary_float(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    kn_meta_set(m, dtype_is_float(x->dtype) ? x->dtype : TFE_FLOAT32, x->weak, x->rank, x->shape);
    return 0;
}

int infer_unary_bool(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    kn_meta_set(m, TFE_BOOL, false, x->rank, x->shape);
    return 0;
}

int infer_cast(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    kn_meta_set(m, c->at->dtype, false, x->rank, x->shape);
    return 0;
}

static int binary_meta(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *a = c->in[0], *b = c->in[1];
    if (broadcast_shapes(NAME, a->rank, a->shape, b->rank, b->shape, &m->rank, m->shape)) return -1;
    m->dtype = dtype_promote(a->dtype, a->weak, b->dtype, b->weak, &m->weak);
    /* a weak int literal takes the other operand's int32: one outside its
     * range would wrap (x_int32 + 3000000000), which NumPy 2 refuses with
     * an OverflowError; so does tfe */
    for (int i = 0; m->dtype == TFE_INT32 && !m->weak && i < 2; i++) {
        const tfe_tensor *t = c->in[i];
        if (!t->weak || t->rank != 0 || !t->storage || !dtype_is_int(t->dtype) || t->dtype == TFE_INT32) continue;
        int64_t v = tensor_get_i64(t, 0);
        if (v < INT32_MIN || v > INT32_MAX) {
            tfe_error_set("%s: the int %lld does not fit int32, the other operand's dtype (cast that operand to "
                          "int64 first)", NAME, (long long)v);
            return -1;
        }
    }
    return 0;
}

int infer_binary(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *a = c->in[0], *b = c->in[1];
    /* hot path: same dtype and shape, no weak operand */
    if (a->dtype == b->dtype && a->rank == b->rank && !a->weak && !b->weak && a->dtype != TFE_BOOL) {
        int i = 0;
        while (i < a->rank && a->shape[i] == b->shape[i]) i++;
        if (i == a->rank) {
            kn_meta_set(m, a->dtype, false, a->rank, a->shape);
            return 0;
        }
    }
    if (binary_meta(c, m)) return -1;
    if (m->dtype == TFE_BOOL && c->op != OP_ADD && c->op != OP_MUL && c->op != OP_MAXIMUM &&
        c->op != OP_MINIMUM) {
        tfe_error_set("%s: not supported for bool operands (cast them to int first)", NAME);
        return -1;
    }
    return 0;
}

int infer_binary_div(const tfe_opcall *c, tfe_meta *m) {
    if (binary_meta(c, m)) return -1;
    if (!dtype_is_float(m->dtype)) m->dtype = TFE_FLOAT32;
    return 0;
}

int infer_compare(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *a = c->in[0], *b = c->in[1];
    if (broadcast_shapes(NAME, a->rank, a->shape, b->rank, b->shape, &m->rank, m->shape)) return -1;
    m->dtype = TFE_BOOL;
    m->weak = false;
    return 0;
}

int infer_logical(const tfe_opcall *c, tfe_meta *m) { return infer_compare(c, m); }

static int broadcast3(const char *op, tfe_tensor *const *in, tfe_meta *m) {
    int r;
    int64_t s[TFE_MAX_RANK];
    if (broadcast_shapes(op, in[0]->rank, in[0]->shape, in[1]->rank, in[1]->shape, &r, s) ||
        broadcast_shapes(op, r, s, in[2]->rank, in[2]->shape, &m->rank, m->shape)) {
        char b0[200], b1[200], b2[200];
        tfe_error_set("%s: shapes %s, %s and %s cannot be broadcast", op, SHP(in[0], b0),
                      SHP(in[1], b1), SHP(in[2], b2));
        return -1;
    }
    return 0;
}

int infer_where(const tfe_opcall *c, tfe_meta *m) {
    if (broadcast3("where", c->in, m)) return -1;
    const tfe_tensor *a = c->in[1], *b = c->in[2];
    m->dtype = dtype_promote(a->dtype, a->weak, b->dtype, b->weak, &m->weak);
    return 0;
}

int infer_clip(const tfe_opcall *c, tfe_meta *m) {
    if (broadcast3("clip", c->in, m)) return -1;
    tfe_tensor *const *in = c->in;
    bool w;
    tfe_dtype d = dtype_promote(in[1]->dtype, in[1]->weak, in[2]->dtype, in[2]->weak, &w);
    m->dtype = dtype_promote(in[0]->dtype, in[0]->weak, d, w, &m->weak);
    return 0;
}

/* ---- reductions -------------------------------------------------------------- */
static int reduce_shape(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    unsigned mask;
    if (kn_axes_mask(NAME, c->at, x->rank, &mask)) return -1;
    int r = 0;
    for (int i = 0; i < x->rank; i++) {
        if (!(mask & (1u << i))) m->shape[r++] = x->shape[i];
        else if (c->at->keepdims) m->shape[r++] = 1;
    }
    m->rank = r;
    m->weak = false;
    return 0;
}

int infer_reduce(const tfe_opcall *c, tfe_meta *m) {
    if (reduce_shape(c, m)) return -1;
    tfe_dtype dt = c->in[0]->dtype;
    m->dtype = dt == TFE_BOOL || dt == TFE_INT32 ? TFE_INT64 : dt;
    return 0;
}

int infer_reduce_float(const tfe_opcall *c, tfe_meta *m) {
    if (reduce_shape(c, m)) return -1;
    tfe_dtype dt = c->in[0]->dtype;
    m->dtype = dtype_is_float(dt) ? dt : TFE_FLOAT32;
    return 0;
}

int infer_reduce_keep(const tfe_opcall *c, tfe_meta *m) {
    if (reduce_shape(c, m)) return -1;
    m->dtype = c->in[0]->dtype;
    return 0;
}

int infer_reduce_bool(const tfe_opcall *c, tfe_meta *m) {
    if (reduce_shape(c, m)) return -1;
    m->dtype = TFE_BOOL;
    return 0;
}

/* argmax/argmin: naxes <= 0 means over the flattened tensor (NumPy axis=None) */
int infer_argreduce(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    m->dtype = TFE_INT64;
    m->weak = false;
    if (c->at->naxes > 1) {
        tfe_error_set("%s: takes one axis, got %d", NAME, c->at->naxes);
        return -1;
    }
    if (c->at->naxes <= 0) {
        m->rank = c->at->keepdims ? x->rank : 0;
        for (int i = 0; i < m->rank; i++) m->shape[i] = 1;
        return 0;
    }
    return reduce_shape(c, m);
}

int infer_softmax(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    int axis;
    if (x->rank == 0) {
        tfe_error_set("%s: needs a tensor of rank >= 1, got shape ()", NAME);
        return -1;
    }
    if (kn_axis(NAME, c->at->naxes > 0 ? c->at->axes[0] : -1, x->rank, &axis)) return -1;
    kn_meta_set(m, dtype_is_float(x->dtype) ? x->dtype : TFE_FLOAT32, false, x->rank, x->shape);
    return 0;
}

/* ---- linear algebra ------------------------------------------------------------ */
int infer_matmul(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *a = c->in[0], *b = c->in[1];
    char b1[200], b2[200];
    if (a->rank == 0 || b->rank == 0) {
        tfe_error_set("matmul: operands must be at least 1-D, got shapes %s and %s", SHP(a, b1),
                      SHP(b, b2));
        return -1;
    }
    m->dtype = dtype_promote(a->dtype, a->weak, b->dtype, b->weak, &m->weak);
    if (m->dtype == TFE_BOOL) {
        tfe_error_set("matmul: not supported for bool operands");
        return -1;
    }
    int64_t ka = a->shape[a->rank - 1], kb = b->rank == 1 ? b->shape[0] : b->shape[b->rank - 2];
    if (ka != kb) {
        tfe_error_set("matmul: shapes %s and %s are not aligned (%lld != %lld)", SHP(a, b1),
                      SHP(b, b2), (long long)ka, (long long)kb);
        return -1;
    }
    int ra = a->rank > 2 ? a->rank - 2 : 0, rb = b->rank > 2 ? b->rank - 2 : 0, r;
    if (ra || rb) {
        if (broadcast_shapes("matmul", ra, a->shape, rb, b->shape, &r, m->shape)) {
            tfe_error_set("matmul: batch dimensions of shapes %s and %s cannot be broadcast",
                          SHP(a, b1), SHP(b, b2));
            return -1;
        }
    } else r = 0;
    if (a->rank >= 2) m->shape[r++] = a->shape[a->rank - 2];
    if (b->rank >= 2) m->shape[r++] = b->shape[b->rank - 1];
    m->rank = r;
    m->weak = false;
    return 0;
}

/* ---- shape ------------------------------------------------------------------------ */
int infer_reshape(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    const tfe_attrs *at = c->at;
    int64_t n = tensor_numel(x), known = 1;
    int unknown = -1;
    char b1[200], b2[200];
    if (at->nints > TFE_MAX_RANK) return check_shape("reshape", at->nints, at->ints);
    for (int i = 0; i < at->nints; i++) {
        int64_t d = at->ints[i];
        if (d == -1) {
            if (unknown >= 0) {
                tfe_error_set("reshape: can only specify one unknown dimension");
                return -1;
            }
            unknown = i;
        } else if (d < 0) {
            return check_shape("reshape", at->nints, at->ints);
        } else known *= d;
    }
    kn_meta_set(m, x->dtype, x->weak, at->nints, at->ints);
    if (unknown >= 0) {
        if (known == 0 || n % known) goto fail;
        m->shape[unknown] = n / known;
    } else if (known != n) goto fail;
    return 0;
fail:
    tfe_error_set("reshape: cannot reshape %s (%lld elements) to %s", SHP(x, b1), (long long)n,
                  shape_str(at->nints, at->ints, b2));
    return -1;
}

int infer_transpose(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    const tfe_attrs *at = c->at;
    m->dtype = x->dtype;
    m->weak = x->weak;
    m->rank = x->rank;
    if (at->nints == 0) {
        for (int i = 0; i < x->rank; i++) m->shape[i] = x->shape[x->rank - 1 - i];
        return 0;
    }
    unsigned seen = 0;
    if (at->nints != x->rank) goto fail;
    for (int i = 0; i < x->rank; i++) {
        int a;
        int64_t p = at->ints[i] < 0 ? at->ints[i] + x->rank : at->ints[i];
        if (p < 0 || p >= x->rank || (seen & (1u << p))) goto fail;
        a = (int)p;
        seen |= 1u << a;
        m->shape[i] = x->shape[a];
    }
    return 0;
fail:;
    char b1[200], b2[200];
    tfe_error_set("transpose: axes %s are not a permutation of the axes of shape %s",
                  shape_str(at->nints, at->ints, b1), SHP(x, b2));
    return -1;
}

int infer_expand_dims(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    int a;
    if (x->rank >= TFE_MAX_RANK) return check_shape("expand_dims", x->rank + 1, x->shape);
    if (kn_axis("expand_dims", c->at->axes[0], x->rank + 1, &a)) return -1;
    m->dtype = x->dtype;
    m->weak = x->weak;
    m->rank = x->rank + 1;
    for (int i = 0, j = 0; i < m->rank; i++) m->shape[i] = i == a ? 1 : x->shape[j++];
    return 0;
}

int infer_squeeze(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    unsigned mask = 0;
    if (c->at->naxes < 0) {
        for (int i = 0; i < x->rank; i++)
            if (x->shape[i] == 1) mask |= 1u << i;
    } else {
        if (kn_axes_mask("squeeze", c->at, x->rank, &mask)) return -1;
        for (int i = 0; i < x->rank; i++)
            if ((mask & (1u << i)) && x->shape[i] != 1) {
                char b[200];
                tfe_error_set("squeeze: cannot squeeze axis %d of shape %s (size %lld, not 1)", i,
                              SHP(x, b), (long long)x->shape[i]);
                return -1;
            }
    }
    m->dtype = x->dtype;
    m->weak = x->weak;
    m->rank = 0;
    for (int i = 0; i < x->rank; i++)
        if (!(mask & (1u << i))) m->shape[m->rank++] = x->shape[i];
    return 0;
}

int infer_broadcast_to(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    const tfe_attrs *at = c->at;
    if (check_shape("broadcast_to", at->nints, at->ints)) return -1;
    int r = at->nints;
    bool ok = r >= x->rank;
    for (int i = 0; ok && i < x->rank; i++) {
        int64_t d = x->shape[x->rank - 1 - i];
        ok = d == 1 || d == at->ints[r - 1 - i];
    }
    if (!ok) {
        char b1[200], b2[200];
        tfe_error_set("broadcast_to: cannot broadcast shape %s to %s", SHP(x, b1),
                      shape_str(r, at->ints, b2));
        return -1;
    }
    kn_meta_set(m, x->dtype, x->weak, r, at->ints);
    return 0;
}

/* Slice geometry shared by infer_slice, k_slice and set_slice: per input
 * axis its length; dropped axes (integer index) flagged in *drop. */
int kn_slice_geometry(const tfe_opcall *c, const tfe_tensor *x, int64_t *len, unsigned *drop) {
    const tfe_attrs *at = c->at;
    char b[200];
    *drop = 0;
    for (int i = 0; i < at->naxes; i++) {
        int a;
        if (kn_axis(kn_opname(c), at->axes[i], x->rank, &a)) return -1;
        *drop |= 1u << a;
    }
    for (int k = 0; k < x->rank; k++) {
        if (3 * k + 2 >= at->nints) {
            len[k] = x->shape[k];
            continue;
        }
        int64_t start = at->ints[3 * k], stop = at->ints[3 * k + 1], step = at->ints[3 * k + 2];
        if (step == 0) {
            tfe_error_set("%s: slice step cannot be zero", kn_opname(c));
            return -1;
        }
        /* ceil((stop - start) / step) without "+ step - 1", which wraps for a
         * step near int64's limits */
        int64_t n = step > 0 ? (stop > start ? (stop - start - 1) / step + 1 : 0)
                  : start > stop ? (step == INT64_MIN ? 1 : (start - stop - 1) / -step + 1) : 0;
        if (n > 0 && (start < 0 || start >= x->shape[k] || start + (n - 1) * step < 0 ||
                      start + (n - 1) * step >= x->shape[k])) {
            tfe_error_set("%s: index %lld is out of range for axis %d of shape %s", kn_opname(c),
                          (long long)(start < 0 || start >= x->shape[k] ? start
                                                                        : start + (n - 1) * step),
                          k, SHP(x, b));
            return -1;
        }
        if ((*drop & (1u << k)) && n != 1) {
            tfe_error_set("%s: index %lld is out of range for axis %d of shape %s", kn_opname(c),
                          (long long)start, k, SHP(x, b));
            return -1;
        }
        len[k] = n;
    }
    return 0;
}

int infer_slice(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    int64_t len[TFE_MAX_RANK];
    unsigned drop;
    if (kn_slice_geometry(c, x, len, &drop)) return -1;
    m->dtype = x->dtype;
    m->weak = x->weak;
    m->rank = 0;
    for (int k = 0; k < x->rank; k++)
        if (!(drop & (1u << k))) m->shape[m->rank++] = len[k];
    return 0;
}

int infer_set_slice(const tfe_opcall *c, tfe_meta *m) {
    tfe_meta sm;
    const tfe_tensor *x = c->in[0], *v = c->in[1];
    if (infer_slice(c, &sm)) return -1;
    bool ok = v->rank <= sm.rank;
    for (int i = 0; ok && i < v->rank; i++) {
        int64_t d = v->shape[v->rank - 1 - i];
        ok = d == 1 || d == sm.shape[sm.rank - 1 - i];
    }
    if (!ok) {
        char b1[200], b2[200];
        tfe_error_set("%s: cannot broadcast value of shape %s into a slice of shape %s", NAME,
                      SHP(v, b1), shape_str(sm.rank, sm.shape, b2));
        return -1;
    }
    kn_meta_set(m, x->dtype, false, x->rank, x->shape);
    return 0;
}

int infer_concat(const tfe_opcall *c, tfe_meta *m) {
    if (c->nin < 1) {
        tfe_error_set("%s: needs at least one tensor", NAME);
        return -1;
    }
    const tfe_tensor *x0 = c->in[0];
    char b1[200], b2[200];
    if (x0->rank == 0) {
        tfe_error_set("concat: zero-dimensional tensors cannot be concatenated");
        return -1;
    }
    int axis;
    if (kn_axis("concat", c->at->axes[0], x0->rank, &axis)) return -1;
    kn_meta_set(m, x0->dtype, x0->weak, x0->rank, x0->shape);
    m->shape[axis] = 0;
    for (int i = 0; i < c->nin; i++) {
        const tfe_tensor *x = c->in[i];
        bool ok = x->rank == x0->rank;
        for (int k = 0; ok && k < x->rank; k++) ok = k == axis || x->shape[k] == x0->shape[k];
        if (!ok) {
            tfe_error_set("concat: shapes %s and %s differ outside axis %d", SHP(x0, b1),
                          SHP(x, b2), axis);
            return -1;
        }
        m->shape[axis] += x->shape[axis];
        if (i) m->dtype = dtype_promote(m->dtype, m->weak, x->dtype, x->weak, &m->weak);
    }
    return 0;
}

int infer_stack(const tfe_opcall *c, tfe_meta *m) {
    if (c->nin < 1) {
        tfe_error_set("%s: needs at least one tensor", NAME);
        return -1;
    }
    const tfe_tensor *x0 = c->in[0];
    char b1[200], b2[200];
    int axis;
    if (x0->rank >= TFE_MAX_RANK) return check_shape("stack", x0->rank + 1, x0->shape);
    if (kn_axis("stack", c->at->axes[0], x0->rank + 1, &axis)) return -1;
    m->dtype = x0->dtype;
    m->weak = x0->weak;
    m->rank = x0->rank + 1;
    for (int i = 0, j = 0; i < m->rank; i++) m->shape[i] = i == axis ? c->nin : x0->shape[j++];
    for (int i = 1; i < c->nin; i++) {
        const tfe_tensor *x = c->in[i];
        bool ok = x->rank == x0->rank;
        for (int k = 0; ok && k < x->rank; k++) ok = x->shape[k] == x0->shape[k];
        if (!ok) {
            tfe_error_set("stack: all tensors must have the same shape, got %s and %s",
                          SHP(x0, b1), SHP(x, b2));
            return -1;
        }
        m->dtype = dtype_promote(m->dtype, m->weak, x->dtype, x->weak, &m->weak);
    }
    return 0;
}

int infer_split(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    int axis;
    char b1[200], b2[200];
    if (x->rank == 0) {
        tfe_error_set("split: cannot split a zero-dimensional tensor");
        return -1;
    }
    if (kn_axis("split", c->at->axes[0], x->rank, &axis)) return -1;
    int64_t total = 0;
    for (int i = 0; i < c->at->nints; i++) {
        if (c->at->ints[i] < 0) goto fail;
        total += c->at->ints[i];
    }
    if (c->at->nints < 1 || total != x->shape[axis]) goto fail;
    kn_meta_set(m, x->dtype, x->weak, x->rank, x->shape);
    m->shape[axis] = c->at->ints[0];
    return 0;
fail:
    tfe_error_set("split: section sizes %s do not add up to %lld (axis %d of shape %s)",
                  shape_str(c->at->nints < TFE_MAX_RANK ? c->at->nints : TFE_MAX_RANK, c->at->ints, b1),
                  (long long)x->shape[axis], axis, SHP(x, b2));
    return -1;
}

int infer_tile(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    const tfe_attrs *at = c->at;
    int r = at->nints > x->rank ? at->nints : x->rank;
    if (check_shape("tile", at->nints, at->ints)) return -1;
    m->dtype = x->dtype;
    m->weak = x->weak;
    m->rank = r;
    for (int i = 0; i < r; i++) {
        int ix = i - (r - x->rank), ir = i - (r - at->nints);
        int64_t a = ix >= 0 ? x->shape[ix] : 1, b = ir >= 0 ? at->ints[ir] : 1;
        if (__builtin_mul_overflow(a, b, &m->shape[i])) { /* 3 * 6148914691236517206 wraps to 2 */
            char s1[200];
            tfe_error_set("tile: tiling shape %s by %s is too large", SHP(x, s1), shape_str(at->nints, at->ints, (char[200]){0}));
            return -1;
        }
    }
    return check_shape("tile", r, m->shape);
}
