/* kernels_lib.c — the library ops of ops.def's last block: cumsum/cumprod,
 * argsort and take/put along an axis, unique, bincount, searchsorted and
 * isclose (infer rules and CPU kernels). Inputs are made contiguous first.
 * Every order here is NumPy's: NaN after everything (so first when
 * descending), and sorts are stable. */
#include <stdlib.h>

#include "tensor/kernels.h"
#include "util/xalloc.h"

#define NAME kn_opname(c)

typedef uint8_t tbool;

/* shape split at axis into [outer, n, inner] (row-major) */
static void split3(int rank, const int64_t *shape, int axis, int64_t *outer, int64_t *n, int64_t *inner) {
    *outer = *inner = 1;
    for (int i = 0; i < axis; i++) *outer *= shape[i];
    for (int i = axis + 1; i < rank; i++) *inner *= shape[i];
    *n = shape[axis];
}

static int one_axis(const tfe_opcall *c, int rank, int *axis) {
    if (rank == 0) {
        tfe_error_set("%s: expected a tensor of rank >= 1, got a 0-d tensor", NAME);
        return -1;
    }
    if (c->at->naxes != 1) {
        tfe_error_set("%s: takes one axis", NAME);
        return -1;
    }
    return kn_axis(NAME, c->at->axes[0], rank, axis);
}

static void *scratch(const char *op, size_t n) {
    void *p = try_malloc(n ? n : 1);
    if (!p) tfe_error_set("%s: out of memory", op);
    return p;
}

/* ---- cumsum, cumprod ------------------------------------------------------------ */

int infer_cumulative(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    int axis;
    if (one_axis(c, x->rank, &axis)) return -1;
    tfe_dtype dt = x->dtype;
    if (dt >= TFE_FLOAT16) {
        tfe_error_set("%s: dtype %s is not supported", NAME, dtype_name(dt));
        return -1;
    }
    kn_meta_set(m, dt == TFE_BOOL || dt == TFE_INT32 ? TFE_INT64 : dt, false, x->rank, x->shape);
    return 0;
}

/* In place over d ([outer, n, inner]): row k = row k-1 (op) row k, in scan
 * order, so each element is the running sum/product in sequence (NumPy's
 * order of additions). Integers wrap (computed unsigned). */
#define SCAN_FN(name, T, UT)                                                                    \
    static void name(T *d, int64_t outer, int64_t n, int64_t inner, bool prod, bool rev) {     \
        for (int64_t o = 0; o < outer; o++) {                                                   \
            T *base = d + o * n * inner;                                                        \
            for (int64_t k = 1; k < n; k++) {                                                   \
                int64_t kc = rev ? n - 1 - k : k, kp = rev ? kc + 1 : kc - 1;                   \
                T *cur = base + kc * inner;                                                     \
                const T *prev = base + kp * inner;                                              \
                if (prod)                                                                       \
                    for (int64_t i = 0; i < inner; i++) cur[i] = (T)((UT)prev[i] * (UT)cur[i]); \
                else                                                                            \
                    for (int64_t i = 0; i < inner; i++) cur[i] = (T)((UT)prev[i] + (UT)cur[i]); \
            }                                                                                   \
        }                                                                                       \
    }
SCAN_FN(scan_f, float, float)
SCAN_FN(scan_d, double, double)
SCAN_FN(scan_l, int64_t, uint64_t)

int k_cumulative(const tfe_opcall *c) {
    tfe_tensor *o = c->out[0];
    int axis;
    if (one_axis(c, o->rank, &axis) || kn_copy_into(o, c->in[0])) return -1;
    int64_t outer, n, inner;
    split3(o->rank, o->shape, axis, &outer, &n, &inner);
    if (tensor_numel(o) == 0) return 0;
    bool prod = c->op == OP_CUMPROD, rev = c->at->ints[0] != 0;
    void *d = tensor_data(o);
    if (o->dtype == TFE_FLOAT32) scan_f(d, outer, n, inner, prod, rev);
    else if (o->dtype == TFE_FLOAT64) scan_d(d, outer, n, inner, prod, rev);
    else scan_l(d, outer, n, inner, prod, rev);
    return kn_poll();
}

/* ---- sorting ---------------------------------------------------------------------- */

/* a before b in ascending order; NaN after everything (floats only) */
#define LESS_F(a, b) ((a) < (b) || ((b) != (b) && (a) == (a)))
#define LESS_I(a, b) ((a) < (b))

/* Sorting one line: (value, index) pairs, so comparisons read contiguous
 * memory; insertion sort of runs of SORT_RUN, then a bottom-up merge. Both
 * are stable: an element moves before another only when it is strictly
 * before it (descending: strictly after), so equal ones keep their order.
 * sort_line_SUF fills ws (2n pairs) from the n values at src (step bytes
 * apart), sorts, and writes the order to idx and/or the sorted values to
 * vals (either may be NULL). */
#define SORT_RUN 32
#define SORT_FNS(SUF, T, LESS)                                                                     \
    typedef struct { T v; int64_t i; } pair_##SUF;                                                 \
    static void sort_line_##SUF(const char *src, int64_t step, int64_t n, void *ws, bool desc,     \
                                int64_t *idx, T *vals) {                                           \
        pair_##SUF *a = ws, *b = a + n;                                                            \
        for (int64_t i = 0; i < n; i++) {                                                          \
            a[i].v = *(const T *)(src + i * step);                                                 \
            a[i].i = i;                                                                            \
        }                                                                                          \
        for (int64_t lo = 0; lo < n; lo += SORT_RUN) {                                             \
            int64_t hi = lo + SORT_RUN < n ? lo + SORT_RUN : n;                                    \
            for (int64_t i = lo + 1; i < hi; i++) {                                                \
                pair_##SUF t = a[i];                                                               \
                int64_t j = i;                                                                     \
                while (j > lo && (desc ? LESS(a[j - 1].v, t.v) : LESS(t.v, a[j - 1].v))) {          \
                    a[j] = a[j - 1];                                                               \
                    j--;                                                                           \
                }                                                                                  \
                a[j] = t;                                                                          \
            }                                                                                      \
        }                                                                                          \
        for (int64_t w = SORT_RUN; w < n; w *= 2) {                                                \
            for (int64_t lo = 0; lo < n; lo += 2 * w) {                                            \
                int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;       \
                int64_t i = lo, j = mid, k = lo;                                                   \
                while (i < mid && j < hi) {                                                        \
                    bool right = desc ? LESS(a[i].v, a[j].v) : LESS(a[j].v, a[i].v);               \
                    b[k++] = right ? a[j++] : a[i++];                                              \
                }                                                                                  \
                while (i < mid) b[k++] = a[i++];                                                   \
                while (j < hi) b[k++] = a[j++];                                                    \
            }                                                                                      \
            pair_##SUF *t = a;                                                                     \
            a = b;                                                                                 \
            b = t;                                                                                 \
        }                                                                                          \
        for (int64_t i = 0; i < n; i++) {                                                          \
            if (idx) idx[i] = a[i].i;                                                              \
            if (vals) vals[i] = a[i].v;                                                            \
        }                                                                                          \
    }
SORT_FNS(b, tbool, LESS_I)
SORT_FNS(i, int32_t, LESS_I)
SORT_FNS(l, int64_t, LESS_I)
SORT_FNS(f, float, LESS_F)
SORT_FNS(d, double, LESS_F)

/* bytes of sort_line's workspace for n elements (pairs are at most 16 bytes) */
static size_t sort_ws_bytes(int64_t n) { return (size_t)(n > 0 ? n : 1) * 2 * 16; }

/* Sorts the n values at src (of dtype dt, step bytes apart): the order into
 * idx, the sorted values into vals (contiguous, dtype dt); either may be NULL. */
static void sort_line(tfe_dtype dt, const char *src, int64_t step, int64_t n, void *ws, bool desc,
                      int64_t *idx, void *vals) {
    switch (dt) {
    case TFE_BOOL: sort_line_b(src, step, n, ws, desc, idx, vals); break;
    case TFE_INT32: sort_line_i(src, step, n, ws, desc, idx, vals); break;
    case TFE_INT64: sort_line_l(src, step, n, ws, desc, idx, vals); break;
    case TFE_FLOAT32: sort_line_f(src, step, n, ws, desc, idx, vals); break;
    case TFE_FLOAT64: sort_line_d(src, step, n, ws, desc, idx, vals); break;
    case TFE_FLOAT16:
    case TFE_BFLOAT16:
    case TFE_NDTYPES: break; /* refused by the infer rules */
    }
}

static int cpu_dtype(const tfe_opcall *c, const tfe_tensor *t) {
    if (t->dtype >= TFE_FLOAT16) {
        tfe_error_set("%s: dtype %s is not supported", NAME, dtype_name(t->dtype));
        return -1;
    }
    return 0;
}

int infer_argsort(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    int axis;
    if (one_axis(c, x->rank, &axis) || cpu_dtype(c, x)) return -1;
    kn_meta_set(m, TFE_INT64, false, x->rank, x->shape);
    if (c->at->nints >= 2) {
        int64_t k = c->at->ints[1], n = x->shape[axis];
        if (k < 0 || (n >= 0 && k > n)) {
            tfe_error_set("%s: k = %lld is out of range for an axis of size %lld", NAME, (long long)k,
                          (long long)n);
            return -1;
        }
        m->shape[axis] = k;
    }
    return 0;
}

/* argsort's lines in parallel: the lines are cut into nparts parts, part p
 * sorting with workspace p (allocated before: no allocation in the body) */
typedef struct argsort_ctx {
    tfe_dtype dt;
    const char *x;
    int64_t *o, *idx;
    char *ws;
    size_t ws_bytes;
    int64_t n, inner, k, lines, nparts;
    bool desc;
} argsort_ctx;

static void argsort_range(int64_t pb, int64_t pe, void *vctx) {
    const argsort_ctx *a = vctx;
    size_t es = kn_esz(a->dt);
    for (int64_t part = pb; part < pe; part++) {
        int64_t *idx = a->idx + part * a->n;
        void *ws = a->ws + (size_t)part * a->ws_bytes;
        for (int64_t l = part * a->lines / a->nparts; l < (part + 1) * a->lines / a->nparts; l++) {
            int64_t b = l / a->inner, i = l % a->inner;
            const char *src = a->x + (size_t)(b * a->n * a->inner + i) * es;
            sort_line(a->dt, src, (int64_t)es * a->inner, a->n, ws, a->desc, idx, NULL);
            for (int64_t j = 0; j < a->k; j++) a->o[(b * a->k + j) * a->inner + i] = idx[j];
        }
    }
}

int k_argsort(const tfe_opcall *c) {
    tfe_tensor *o = c->out[0];
    int axis;
    if (one_axis(c, o->rank, &axis)) return -1;
    tfe_tensor *x = kn_contig_as(c->in[0], c->in[0]->dtype);
    if (!x) return -1;
    int64_t outer, n, inner;
    split3(x->rank, x->shape, axis, &outer, &n, &inner);
    argsort_ctx a = {.dt = x->dtype, .x = tensor_data(x), .o = (int64_t *)tensor_data(o), .n = n,
                     .inner = inner, .k = o->shape[axis], .lines = outer * inner,
                     .desc = c->at->ints[0] != 0, .ws_bytes = sort_ws_bytes(n)};
    /* parts: one per thread when there is enough work, with at most 256 MiB
     * of workspace in all */
    int64_t parts = n * a.lines >= 2 * KN_GRAIN ? tfe_num_threads() : 1;
    int64_t cap = (int64_t)(((size_t)256 << 20) / (a.ws_bytes + sizeof(int64_t) * (size_t)(n ? n : 1)));
    if (parts > cap) parts = cap;
    if (parts > a.lines) parts = a.lines;
    if (parts < 1) parts = 1;
    a.nparts = parts;
    a.ws = scratch(NAME, a.ws_bytes * (size_t)parts);
    a.idx = scratch(NAME, sizeof(int64_t) * (size_t)(n ? n : 1) * (size_t)parts);
    int rc = -1;
    if (a.ws && a.idx && a.lines) {
        tfe_parallel_for(parts, 1, argsort_range, &a);
        rc = kn_poll();
    } else if (a.ws && a.idx) {
        rc = 0;
    }
    free(a.ws);
    free(a.idx);
    tensor_decref(x);
    return rc;
}

/* ---- take_along_axis, put_along_axis_add ------------------------------------------- */

/* idx: ints of x's rank whose other axes match x's */
static int along_check(const tfe_opcall *c, const tfe_tensor *x, const tfe_tensor *idx, int *axis) {
    char b1[200], b2[200];
    if (one_axis(c, x->rank, axis)) return -1;
    if (!dtype_is_int(idx->dtype)) {
        tfe_error_set("%s: indices must be int32 or int64, got %s", NAME, dtype_name(idx->dtype));
        return -1;
    }
    bool ok = idx->rank == x->rank;
    for (int d = 0; ok && d < x->rank; d++)
        if (d != *axis && idx->shape[d] != x->shape[d] && idx->shape[d] >= 0 && x->shape[d] >= 0) ok = false;
    if (!ok) {
        tfe_error_set("%s: indices of shape %s do not fit x of shape %s along axis %d (same rank, "
                      "same sizes but on the axis)",
                      NAME, shape_str(idx->rank, idx->shape, b1), shape_str(x->rank, x->shape, b2), *axis);
        return -1;
    }
    return 0;
}

int infer_take_along_axis(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0], *idx = c->in[1];
    int axis;
    if (along_check(c, x, idx, &axis)) return -1;
    kn_meta_set(m, x->dtype, x->weak, idx->rank, idx->shape);
    return 0;
}

int infer_put_along_axis_add(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0], *idx = c->in[1], *v = c->in[2];
    int axis;
    char b1[200], b2[200];
    if (along_check(c, x, idx, &axis)) return -1;
    bool ok = v->rank == idx->rank;
    for (int d = 0; ok && d < v->rank; d++) ok = v->shape[d] == idx->shape[d];
    if (!ok) {
        tfe_error_set("%s: values of shape %s do not match indices of shape %s", NAME,
                      shape_str(v->rank, v->shape, b1), shape_str(idx->rank, idx->shape, b2));
        return -1;
    }
    kn_meta_set(m, x->dtype, x->weak, x->rank, x->shape);
    return 0;
}

/* The indices (contiguous, int64), wrapped; an error at the first out of range. */
static int64_t *along_indices(const tfe_opcall *c, const tfe_tensor *idx, int axis, int64_t size) {
    int64_t n = tensor_numel(idx);
    int64_t *v = scratch(NAME, sizeof *v * (size_t)n);
    for (int64_t i = 0; v && i < n; i++) {
        int64_t j = tensor_load_i64(idx, i), w = j < 0 ? j + size : j;
        if (w < 0 || w >= size) {
            tfe_error_set("%s: index %lld is out of range for axis %d with size %lld", NAME, (long long)j, axis,
                          (long long)size);
            free(v);
            return NULL;
        }
        v[i] = w;
    }
    return v;
}

int k_take_along_axis(const tfe_opcall *c) {
    tfe_tensor *o = c->out[0], *idx = c->in[1];
    int axis;
    if (one_axis(c, o->rank, &axis)) return -1;
    tfe_tensor *x = kn_contig_as(c->in[0], c->in[0]->dtype);
    if (!x) return -1;
    int64_t outer, n, inner, nj = idx->shape[axis];
    split3(x->rank, x->shape, axis, &outer, &n, &inner);
    int64_t *iv = along_indices(c, idx, axis, n);
    if (!iv) {
        tensor_decref(x);
        return -1;
    }
    size_t es = kn_esz(x->dtype);
    const char *xd = tensor_data(x);
    char *od = tensor_data(o);
    for (int64_t b = 0; b < outer; b++)
        for (int64_t j = 0; j < nj; j++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t p = (b * nj + j) * inner + i;
                memcpy(od + (size_t)p * es, xd + (size_t)((b * n + iv[p]) * inner + i) * es, es);
            }
    free(iv);
    tensor_decref(x);
    return 0;
}

int k_put_along_axis_add(const tfe_opcall *c) {
    tfe_tensor *o = c->out[0], *idx = c->in[1];
    int axis;
    if (one_axis(c, o->rank, &axis) || kn_copy_into(o, c->in[0])) return -1;
    tfe_tensor *v = kn_contig_as(c->in[2], o->dtype);
    if (!v) return -1;
    int64_t outer, n, inner, nj = idx->shape[axis];
    split3(o->rank, o->shape, axis, &outer, &n, &inner);
    int64_t *iv = along_indices(c, idx, axis, n);
    if (!iv) {
        tensor_decref(v);
        return -1;
    }
    char *od = tensor_data(o);
    const char *vd = tensor_data(v);
    for (int64_t b = 0; b < outer; b++)
        for (int64_t j = 0; j < nj; j++)
            for (int64_t i = 0; i < inner; i++) {
                int64_t p = (b * nj + j) * inner + i, q = (b * n + iv[p]) * inner + i;
                switch (o->dtype) {
                case TFE_FLOAT32: ((float *)od)[q] += ((const float *)vd)[p]; break;
                case TFE_FLOAT64: ((double *)od)[q] += ((const double *)vd)[p]; break;
                case TFE_INT32:
                    ((int32_t *)od)[q] = (int32_t)((uint32_t)((int32_t *)od)[q] + (uint32_t)((const int32_t *)vd)[p]);
                    break;
                case TFE_INT64:
                    ((int64_t *)od)[q] = (int64_t)((uint64_t)((int64_t *)od)[q] + (uint64_t)((const int64_t *)vd)[p]);
                    break;
                case TFE_BOOL: ((tbool *)od)[q] |= ((const tbool *)vd)[p]; break;
                case TFE_FLOAT16:
                case TFE_BFLOAT16:
                case TFE_NDTYPES: break; /* refused by dispatch */
                }
            }
    free(iv);
    tensor_decref(v);
    return 0;
}

/* ---- unique ------------------------------------------------------------------------ */

int infer_unique(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    if (cpu_dtype(c, x)) return -1;
    int64_t n = x->rank ? -1 : 1;
    if (x->storage) n = tensor_numel(x); /* at most this many: the kernel decides */
    kn_meta_set(m, x->dtype, false, 1, &n);
    return 0;
}

/* a and b the same value; NaNs are one value (NumPy's equal_nan=True) */
static bool same_value(tfe_dtype dt, const char *a, const char *b) {
    if (dt == TFE_FLOAT32) {
        float x = *(const float *)a, y = *(const float *)b;
        return x == y || (x != x && y != y);
    }
    if (dt == TFE_FLOAT64) {
        double x = *(const double *)a, y = *(const double *)b;
        return x == y || (x != x && y != y);
    }
    return memcmp(a, b, kn_esz(dt)) == 0;
}

int k_unique(const tfe_opcall *c) {
    tfe_tensor *x = kn_contig_as(c->in[0], c->in[0]->dtype);
    if (!x) return -1;
    int64_t n = tensor_numel(x), nu = 0;
    size_t es = kn_esz(x->dtype);
    void *ws = scratch(NAME, sort_ws_bytes(n));
    char *sorted = scratch(NAME, es * (size_t)n);
    int64_t *first = scratch(NAME, sizeof *first * (size_t)n);
    int rc = -1;
    if (ws && sorted && first) {
        sort_line(x->dtype, tensor_data(x), (int64_t)es, n, ws, false, NULL, sorted);
        /* first[u] = the sorted position of the u-th distinct value */
        for (int64_t i = 0; i < n; i++)
            if (i == 0 || !same_value(x->dtype, sorted + (size_t)i * es, sorted + (size_t)(i - 1) * es))
                first[nu++] = i;
        c->out[0] = tensor_new(x->dtype, 1, &nu);
        c->out[1] = tensor_new(TFE_INT64, 1, &nu);
        if (c->out[0] && c->out[1]) {
            char *vd = tensor_data(c->out[0]);
            int64_t *cd = (int64_t *)tensor_data(c->out[1]);
            for (int64_t u = 0; u < nu; u++) {
                memcpy(vd + (size_t)u * es, sorted + (size_t)first[u] * es, es);
                cd[u] = (u + 1 < nu ? first[u + 1] : n) - first[u];
            }
            rc = 0;
        }
    }
    free(ws);
    free(sorted);
    free(first);
    tensor_decref(x);
    return rc;
}

/* ---- bincount ------------------------------------------------------------------------ */

int infer_bincount(const tfe_opcall *c, tfe_meta *m) {
    char b1[200], b2[200];
    if (c->nin < 1 || c->nin > 2) {
        tfe_error_set("%s: expected 1 or 2 tensor arguments, got %d", NAME, c->nin);
        return -1;
    }
    const tfe_tensor *x = c->in[0], *w = c->nin == 2 ? c->in[1] : NULL;
    if (x->rank != 1 || !(dtype_is_int(x->dtype) || x->dtype == TFE_BOOL)) {
        tfe_error_set("%s: x must be a 1-D tensor of ints, got %s of shape %s", NAME, dtype_name(x->dtype),
                      shape_str(x->rank, x->shape, b1));
        return -1;
    }
    if (w && (w->rank != 1 || w->shape[0] != x->shape[0] || w->dtype >= TFE_FLOAT16)) {
        tfe_error_set("%s: weights must have x's shape %s, got %s of shape %s", NAME, shape_str(1, x->shape, b1),
                      dtype_name(w->dtype), shape_str(w->rank, w->shape, b2));
        return -1;
    }
    if (c->at->ints[0] < 0) {
        tfe_error_set("%s: minlength must be non-negative, got %lld", NAME, (long long)c->at->ints[0]);
        return -1;
    }
    int64_t len = -1; /* known to the kernel only */
    kn_meta_set(m, !w ? TFE_INT64 : dtype_is_float(w->dtype) ? w->dtype : TFE_FLOAT64, false, 1, &len);
    return 0;
}

int k_bincount(const tfe_opcall *c) {
    const tfe_tensor *x = c->in[0], *w = c->nin == 2 ? c->in[1] : NULL;
    int64_t n = tensor_numel(x), len = c->at->ints[0];
    for (int64_t i = 0; i < n; i++) {
        int64_t v = tensor_load_i64(x, i);
        if (v < 0) {
            tfe_error_set("%s: x must be non-negative, got %lld at index %lld", NAME, (long long)v, (long long)i);
            return -1;
        }
        if (v == INT64_MAX) { /* v + 1 would wrap to a negative length (and a write out of bounds) */
            tfe_error_set("%s: x holds %lld, and a result of %lld + 1 elements is too large", NAME, (long long)v,
                          (long long)v);
            return -1;
        }
        if (v >= len) len = v + 1;
    }
    tfe_dtype dt = !w ? TFE_INT64 : dtype_is_float(w->dtype) ? w->dtype : TFE_FLOAT64;
    tfe_tensor *o = tensor_new(dt, 1, &len);
    if (!o) return -1;
    char *od = tensor_data(o);
    if (!w) {
        int64_t *cnt = (int64_t *)od;
        memset(cnt, 0, sizeof *cnt * (size_t)len);
        for (int64_t i = 0; i < n; i++) cnt[tensor_load_i64(x, i)]++;
    } else {
        /* sums in double, in index order (NumPy's), then rounded once */
        double *acc = scratch(NAME, sizeof *acc * (size_t)len);
        if (!acc) {
            tensor_decref(o);
            return -1;
        }
        memset(acc, 0, sizeof *acc * (size_t)len);
        for (int64_t i = 0; i < n; i++) acc[tensor_load_i64(x, i)] += tensor_load_f64(w, i);
        for (int64_t j = 0; j < len; j++) kn_store_f64(od + (size_t)j * kn_esz(dt), dt, acc[j]);
        free(acc);
    }
    c->out[0] = o;
    return 0;
}

/* ---- searchsorted -------------------------------------------------------------------- */

int infer_searchsorted(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *a = c->in[0], *v = c->in[1];
    char b[200];
    if (a->rank != 1) {
        tfe_error_set("%s: sorted must be 1-D, got shape %s", NAME, shape_str(a->rank, a->shape, b));
        return -1;
    }
    if (cpu_dtype(c, a) || cpu_dtype(c, v)) return -1;
    kn_meta_set(m, TFE_INT64, false, v->rank, v->shape);
    return 0;
}

/* the first i in [0, n) with !(a[i] < x) (left) or x < a[i] (right), else n */
#define BSEARCH_FN(name, T, LESS)                                                   \
    static int64_t name(const T *a, int64_t n, T x, bool right) {                   \
        int64_t lo = 0, hi = n;                                                     \
        while (lo < hi) {                                                           \
            int64_t mid = lo + (hi - lo) / 2;                                       \
            bool go_right = right ? !LESS(x, a[mid]) : LESS(a[mid], x);             \
            if (go_right) lo = mid + 1;                                             \
            else hi = mid;                                                          \
        }                                                                           \
        return lo;                                                                  \
    }
BSEARCH_FN(bsearch_l, int64_t, LESS_I)
BSEARCH_FN(bsearch_d, double, LESS_F)

int k_searchsorted(const tfe_opcall *c) {
    /* compared as int64 when both are ints/bools (exact), else as float64 */
    bool ints = !dtype_is_float(c->in[0]->dtype) && !dtype_is_float(c->in[1]->dtype);
    tfe_dtype dt = ints ? TFE_INT64 : TFE_FLOAT64;
    tfe_tensor *a = kn_contig_as(c->in[0], dt), *v = a ? kn_contig_as(c->in[1], dt) : NULL;
    if (!v) {
        tensor_decref(a);
        return -1;
    }
    int64_t n = a->shape[0], nv = tensor_numel(v), *od = (int64_t *)tensor_data(c->out[0]);
    bool right = c->at->ints[0] != 0;
    for (int64_t i = 0; i < nv; i++)
        od[i] = ints ? bsearch_l((const int64_t *)tensor_data(a), n, ((const int64_t *)tensor_data(v))[i], right)
                     : bsearch_d((const double *)tensor_data(a), n, ((const double *)tensor_data(v))[i], right);
    tensor_decref(a);
    tensor_decref(v);
    return 0;
}

/* ---- isclose ----------------------------------------------------------------------------- */

int infer_isclose(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *a = c->in[0], *b = c->in[1];
    if (cpu_dtype(c, a) || cpu_dtype(c, b)) return -1;
    if (broadcast_shapes(NAME, a->rank, a->shape, b->rank, b->shape, &m->rank, m->shape)) return -1;
    m->dtype = TFE_BOOL;
    m->weak = false;
    return 0;
}

/* NumPy's isclose: |a - b| <= atol + rtol |b| where both are finite, a == b
 * where either is not (infinities of one sign), and NaN == NaN with
 * equal_nan; in the operands' float dtype (float64 for ints) */
#define CLOSE_FN(name, T, ABS)                                                                   \
    static void name(tbool *o, const T *a, const T *b, int64_t n, double rtol, double atol,  \
                     bool equal_nan) {                                                        \
        for (int64_t i = 0; i < n; i++) {                                                     \
            T x = a[i], y = b[i];                                                             \
            bool r;                                                                           \
            if (isfinite(x) && isfinite(y)) r = ABS(x - y) <= (T)atol + (T)rtol * ABS(y);     \
            else r = x == y || (equal_nan && x != x && y != y);                               \
            o[i] = r;                                                                         \
        }                                                                                     \
    }
CLOSE_FN(close_f, float, fabsf)
CLOSE_FN(close_d, double, fabs)

int k_isclose(const tfe_opcall *c) {
    tfe_tensor *o = c->out[0], *a = c->in[0], *b = c->in[1];
    bool w;
    tfe_dtype dt = dtype_promote(a->dtype, a->weak, b->dtype, b->weak, &w) == TFE_FLOAT32 ? TFE_FLOAT32 : TFE_FLOAT64;
    tfe_tensor *ab = tensor_new(dt, o->rank, o->shape), *bb = tensor_new(dt, o->rank, o->shape);
    int rc = -1;
    if (ab && bb && !kn_copy_into(ab, a) && !kn_copy_into(bb, b)) {
        int64_t n = tensor_numel(o);
        double rtol = c->at->f[0], atol = c->at->f[1];
        if (dt == TFE_FLOAT32)
            close_f((tbool *)tensor_data(o), (const float *)tensor_data(ab), (const float *)tensor_data(bb), n, rtol, atol, c->at->ints[0]);
        else
            close_d((tbool *)tensor_data(o), (const double *)tensor_data(ab), (const double *)tensor_data(bb), n, rtol, atol, c->at->ints[0]);
        rc = 0;
    }
    tensor_decref(ab);
    tensor_decref(bb);
    return rc;
}
