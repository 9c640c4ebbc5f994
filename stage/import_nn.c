/* import_nn.c — ONNX's neural-net and variadic ops as tfe ops (import_nn.h),
 * so an imported model is differentiable where those ops are. ONNX images are
 * NCHW with OIHW filters; tfe's conv2d and pools are NHWC with HWIO filters,
 * so Conv and the pools transpose in, run the tfe op and transpose back
 * (exact: a transpose moves values). Pads tfe's "valid" and "same" cannot
 * express are made by concatenating constant borders (zeros; -inf for
 * MaxPool) and running "valid". */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "stage/import_nn.h"
#include "tensor/ops.h"

static const char *NN_OPS[] = {"Gemm", "Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
                               "Flatten", "BatchNormalization", "Dropout", "Max", "Min", "Sum", "Mean"};

bool import_nn_handles(const char *op)
{
    for (size_t i = 0; i < sizeof NN_OPS / sizeof *NN_OPS; i++)
        if (!strcmp(NN_OPS[i], op)) return true;
    return false;
}

#define ERR(...) do { snprintf(err, cap, __VA_ARGS__); return -1; } while (0)

/* the ints of an attribute that must have n of them, or the default d */
static int ints_attr(const OxNode *n, const char *name, int want, int64_t d, int64_t *v, char *err, size_t cap)
{
    const OxAttr *a = ox_attr(n, name);
    for (int i = 0; i < want; i++) v[i] = d;
    if (!a) return 0;
    if (a->nints != want)
        ERR("%s's %s has %d values, not %d (tfe imports 2-D %s only)", n->op, name, a->nints, want,
            strcmp(n->op, "Conv") ? "pooling" : "convolutions");
    memcpy(v, a->ints, sizeof *v * (size_t)want);
    return 0;
}

static bool is_pool(const char *op) { return !strcmp(op, "MaxPool") || !strcmp(op, "AveragePool"); }

int import_nn_check(const OxNode *n, char *err, size_t cap)
{
    const OxAttr *a;
    int64_t v[4];
    if (!strcmp(n->op, "Conv") || is_pool(n->op)) {
        bool conv = n->op[0] == 'C';
        if ((a = ox_attr(n, "auto_pad")) && a->s && strcmp(a->s, "NOTSET") && strcmp(a->s, "VALID") &&
            strcmp(a->s, "SAME_UPPER") && strcmp(a->s, "SAME_LOWER"))
            ERR("%s's auto_pad '%.40s' is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER", n->op, a->s);
        if (ints_attr(n, "kernel_shape", 2, 1, v, err, cap) || ints_attr(n, "strides", 2, 1, v, err, cap) ||
            ints_attr(n, "pads", 4, 0, v, err, cap))
            return -1;
        if (!conv && !ox_attr(n, "kernel_shape")) ERR("%s without kernel_shape", n->op);
        ints_attr(n, "kernel_shape", 2, 1, v, err, cap);
        if (v[0] < 1 || v[1] < 1) ERR("%s's kernel_shape %lld, %lld", n->op, (long long)v[0], (long long)v[1]);
        if (ints_attr(n, "dilations", 2, 1, v, err, cap)) return -1;
        if (!conv && (v[0] != 1 || v[1] != 1))
            ERR("%s's dilations %lld, %lld: tfe's pools are not dilated", n->op, (long long)v[0], (long long)v[1]);
        if (conv && (v[0] < 1 || v[1] < 1)) ERR("Conv's dilations %lld, %lld", (long long)v[0], (long long)v[1]);
        ints_attr(n, "strides", 2, 1, v, err, cap);
        if (v[0] < 1 || v[1] < 1) ERR("%s's strides %lld, %lld", n->op, (long long)v[0], (long long)v[1]);
        ints_attr(n, "pads", 4, 0, v, err, cap);
        for (int i = 0; i < 4; i++) /* (a border is made of them: a size from the file, bounded) */
            if (v[i] < 0 || v[i] > 1 << 16) ERR("%s's pads has %lld", n->op, (long long)v[i]);
        if (conv && (a = ox_attr(n, "group")) && a->i < 1) ERR("Conv's group %lld", (long long)a->i);
        if (!strcmp(n->op, "MaxPool") && (a = ox_attr(n, "storage_order")) && a->i)
            ERR("MaxPool's storage_order %lld (tfe has no Indices output)", (long long)a->i);
        if (!conv && (a = ox_attr(n, "ceil_mode")) && a->i != 0 && a->i != 1)
            ERR("%s's ceil_mode %lld", n->op, (long long)a->i);
    } else if (!strcmp(n->op, "BatchNormalization")) {
        if ((a = ox_attr(n, "training_mode")) && a->i)
            ERR("BatchNormalization's training_mode %lld (tfe imports the inference form)", (long long)a->i);
        if (n->nin != 5) ERR("BatchNormalization takes 5 inputs, not %d", n->nin);
    } else if (!strcmp(n->op, "Gemm")) {
        if (n->nin < 2) ERR("Gemm takes 2 or 3 inputs, not %d", n->nin);
        if ((a = ox_attr(n, "transA")) && a->i != 0 && a->i != 1) ERR("Gemm's transA %lld", (long long)a->i);
        if ((a = ox_attr(n, "transB")) && a->i != 0 && a->i != 1) ERR("Gemm's transB %lld", (long long)a->i);
    }
    return 0;
}

/* The temporaries of one node, dropped at its end. */
typedef struct Keep { tfe_tensor *t[400]; int n; bool full; } Keep;
static tfe_tensor *keep(Keep *k, tfe_tensor *t)
{
    if (!t) return NULL;
    if (k->n == (int)(sizeof k->t / sizeof *k->t)) {
        tensor_decref(t);
        k->full = true;
        return NULL;
    }
    return k->t[k->n++] = t;
}

static tfe_tensor *op1(Keep *k, tfe_op op, tfe_tensor *a, const tfe_attrs *at)
{
    return a ? keep(k, tfe_call1(op, 1, &a, at)) : NULL;
}
static tfe_tensor *op2(Keep *k, tfe_op op, tfe_tensor *a, tfe_tensor *b)
{
    if (!a || !b) return NULL;
    tfe_attrs at;
    tfe_attrs_init(&at);
    tfe_tensor *in[2] = {a, b};
    return keep(k, tfe_call1(op, 2, in, &at));
}
static tfe_tensor *transpose(Keep *k, tfe_tensor *x, const int64_t *perm, int n)
{
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = n;
    memcpy(at.ints, perm, sizeof *perm * (size_t)n);
    return op1(k, OP_TRANSPOSE, x, &at);
}
static tfe_tensor *reshape(Keep *k, tfe_tensor *x, const int64_t *shape, int n)
{
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = n;
    memcpy(at.ints, shape, sizeof *shape * (size_t)n);
    return op1(k, OP_RESHAPE, x, &at);
}
/* a scalar of x's dtype */
static tfe_tensor *scalar(Keep *k, double v, tfe_dtype dt) { return keep(k, tensor_from_f64(v, dt)); }
/* a constant of one value */
static tfe_tensor *filled(Keep *k, tfe_dtype dt, int rank, const int64_t *shape, double v)
{
    tfe_tensor *t = keep(k, tensor_zeros(dt, rank, shape));
    if (!t || v == 0) return t;
    int64_t n = tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        if (dt == TFE_FLOAT64) ((double *)tensor_data(t))[i] = v;
        else ((float *)tensor_data(t))[i] = (float)v;
    }
    return t;
}
static tfe_tensor *concat(Keep *k, tfe_tensor **ts, int n, int axis)
{
    for (int i = 0; i < n; i++)
        if (!ts[i]) return NULL;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.naxes = 1;
    at.axes[0] = axis;
    return keep(k, tfe_call1(OP_CONCAT, n, ts, &at));
}
/* x[..., lo:hi] of an NHWC tensor */
static tfe_tensor *slice_last(Keep *k, tfe_tensor *x, int64_t lo, int64_t hi)
{
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = 3 * x->rank;
    for (int d = 0; d < x->rank; d++) {
        at.ints[3 * d] = d == x->rank - 1 ? lo : 0;
        at.ints[3 * d + 1] = d == x->rank - 1 ? hi : x->shape[d];
        at.ints[3 * d + 2] = 1;
    }
    return op1(k, OP_SLICE, x, &at);
}

/* NHWC x with (top, left, bottom, right) borders of the value v */
static tfe_tensor *pad_hw(Keep *k, tfe_tensor *x, const int64_t *p, double v)
{
    for (int ax = 1; ax <= 2 && x; ax++) {
        int64_t lo = p[ax - 1], hi = p[ax + 1];
        if (!lo && !hi) continue;
        tfe_tensor *parts[3];
        int np = 0;
        int64_t s[4];
        memcpy(s, x->shape, sizeof s);
        if (lo) s[ax] = lo, parts[np++] = filled(k, x->dtype, 4, s, v);
        parts[np++] = x;
        if (hi) s[ax] = hi, parts[np++] = filled(k, x->dtype, 4, s, v);
        x = concat(k, parts, np, ax);
    }
    return x;
}

/* The pads of a Conv or pool on an NCHW input of spatial size in[2]:
 * (top, left, bottom, right) from auto_pad or pads; *mode 0 when they are
 * tfe's "valid" (none), 1 tfe's "same", 2 other (padded by hand). */
static void onnx_pads(const OxNode *n, const int64_t *in, const int64_t *kern, const int64_t *st, const int64_t *dil,
                      int64_t *p, int *mode)
{
    const OxAttr *a = ox_attr(n, "auto_pad");
    const char *ap = a && a->s ? a->s : "NOTSET";
    int64_t tf[4] = {0, 0, 0, 0}; /* TensorFlow's "same": the extra cell at the end */
    bool tf_ok = true;
    for (int d = 0; d < 2; d++) {
        int64_t keff = (kern[d] - 1) * dil[d] + 1, out = (in[d] + st[d] - 1) / st[d];
        int64_t total = (out - 1) * st[d] + keff - in[d];
        if (total < 0) tf_ok = false, total = 0;
        tf[d] = total / 2;
        tf[d + 2] = total - total / 2;
    }
    if (!strcmp(ap, "VALID")) memset(p, 0, 4 * sizeof *p);
    else if (!strncmp(ap, "SAME_", 5)) {
        memcpy(p, tf, sizeof tf);
        if (!strcmp(ap, "SAME_LOWER")) /* the extra cell at the start */
            for (int d = 0; d < 2; d++) p[d] = tf[d + 2], p[d + 2] = tf[d];
    } else {
        int64_t z[4] = {0, 0, 0, 0};
        a = ox_attr(n, "pads");
        memcpy(p, a && a->nints == 4 ? a->ints : z, 4 * sizeof *p);
    }
    *mode = !p[0] && !p[1] && !p[2] && !p[3] ? 0 : tf_ok && !memcmp(p, tf, sizeof tf) ? 1 : 2;
}

static const int64_t TO_NHWC[4] = {0, 2, 3, 1}, TO_NCHW[4] = {0, 3, 1, 2}, OIHW_HWIO[4] = {2, 3, 1, 0};

static tfe_tensor *conv(Keep *k, const OxNode *n, tfe_tensor *const *in, char *err, size_t cap)
{
    tfe_tensor *x = in[0], *w = in[1];
    if (x->rank != 4 || w->rank != 4) {
        snprintf(err, cap, "Conv of a rank-%d input and a rank-%d filter (tfe imports 2-D convolutions: NCHW, OIHW)",
                 x->rank, w->rank);
        return NULL;
    }
    const OxAttr *a = ox_attr(n, "group");
    int64_t g = a ? a->i : 1, c = x->shape[1], m = w->shape[0];
    if (g > c || w->shape[1] * g != c || m % g) {
        snprintf(err, cap, "Conv of %lld channels with a filter of %lld x %lld channels in %lld groups", (long long)c,
                 (long long)m, (long long)w->shape[1], (long long)g);
        return NULL;
    }
    int64_t kern[2] = {w->shape[2], w->shape[3]}, st[2], dil[2], p[4];
    const OxAttr *ks = ox_attr(n, "kernel_shape");
    if (ks && (ks->ints[0] != kern[0] || ks->ints[1] != kern[1])) {
        snprintf(err, cap, "Conv's kernel_shape %lld x %lld, but its filter is %lld x %lld", (long long)ks->ints[0],
                 (long long)ks->ints[1], (long long)kern[0], (long long)kern[1]);
        return NULL;
    }
    ints_attr(n, "strides", 2, 1, st, err, cap);
    ints_attr(n, "dilations", 2, 1, dil, err, cap);
    int mode;
    onnx_pads(n, &x->shape[2], kern, st, dil, p, &mode);
    tfe_tensor *xt = transpose(k, x, TO_NHWC, 4), *wt = transpose(k, w, OIHW_HWIO, 4);
    if (mode == 2) xt = pad_hw(k, xt, p, 0.0);
    if (!xt || !wt) return NULL;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = 5;
    at.ints[0] = st[0], at.ints[1] = st[1], at.ints[2] = dil[0], at.ints[3] = dil[1], at.ints[4] = mode == 1;
    tfe_tensor *y;
    if (g == 1) {
        tfe_tensor *pin[2] = {xt, wt};
        y = keep(k, tfe_call1(OP_CONV2D, 2, pin, &at));
    } else {
        /* grouped (depthwise when g == c): one conv2d per group, concatenated */
        tfe_tensor *parts[256];
        if (g > 256) {
            snprintf(err, cap, "Conv in %lld groups (tfe imports at most 256)", (long long)g);
            return NULL;
        }
        for (int64_t i = 0; i < g; i++) {
            tfe_tensor *xs = slice_last(k, xt, i * (c / g), (i + 1) * (c / g));
            tfe_tensor *ws = slice_last(k, wt, i * (m / g), (i + 1) * (m / g));
            tfe_tensor *pin[2] = {xs, ws};
            parts[i] = xs && ws ? keep(k, tfe_call1(OP_CONV2D, 2, pin, &at)) : NULL;
            if (!parts[i]) return NULL;
        }
        y = concat(k, parts, (int)g, 3);
    }
    if (in[2]) y = op2(k, OP_ADD, y, in[2]); /* the bias, one per output channel: NHWC's last axis */
    return transpose(k, y, TO_NCHW, 4);
}

static tfe_tensor *pool(Keep *k, const OxNode *n, tfe_tensor *x, char *err, size_t cap)
{
    bool max = n->op[0] == 'M';
    if (x->rank != 4) {
        snprintf(err, cap, "%s of a rank-%d input (tfe imports 2-D pooling: NCHW)", n->op, x->rank);
        return NULL;
    }
    int64_t kern[2], st[2], dil[2] = {1, 1}, p[4];
    ints_attr(n, "kernel_shape", 2, 1, kern, err, cap);
    ints_attr(n, "strides", 2, 1, st, err, cap);
    int mode;
    onnx_pads(n, &x->shape[2], kern, st, dil, p, &mode);
    const OxAttr *a = ox_attr(n, "ceil_mode");
    if (a && a->i) {
        /* the same windows as floor's when the division is exact */
        for (int d = 0; d < 2; d++)
            if ((x->shape[2 + d] + p[d] + p[d + 2] - kern[d]) % st[d]) {
                snprintf(err, cap, "%s's ceil_mode 1 where it adds a window (tfe's pools round down)", n->op);
                return NULL;
            }
    }
    a = ox_attr(n, "count_include_pad");
    bool incl = !max && a && a->i;
    tfe_tensor *xt = transpose(k, x, TO_NHWC, 4), *mask = NULL;
    if (mode == 1 && incl) mode = 2; /* tfe's "same" averages over the cells inside only */
    if (mode == 2) {
        if (!max && !incl) {
            /* the average over the cells inside: the padded sums over the
             * padded counts */
            int64_t s1[4] = {1, x->shape[2], x->shape[3], 1};
            mask = pad_hw(k, filled(k, x->dtype, 4, s1, 1.0), p, 0.0);
        }
        xt = pad_hw(k, xt, p, max ? -INFINITY : 0.0);
    }
    if (!xt) return NULL;
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = 5;
    at.ints[0] = kern[0], at.ints[1] = kern[1], at.ints[2] = st[0], at.ints[3] = st[1], at.ints[4] = mode == 1;
    tfe_tensor *y = op1(k, max ? OP_MAX_POOL2D : OP_AVG_POOL2D, xt, &at);
    if (mask) y = op2(k, OP_DIV, y, op1(k, OP_AVG_POOL2D, mask, &at));
    return transpose(k, y, TO_NCHW, 4);
}

static tfe_tensor *gemm(Keep *k, const OxNode *n, tfe_tensor *const *in, char *err, size_t cap)
{
    tfe_tensor *a = in[0], *b = in[1];
    if (a->rank != 2 || b->rank != 2) {
        snprintf(err, cap, "Gemm of rank-%d and rank-%d inputs (it takes matrices)", a->rank, b->rank);
        return NULL;
    }
    static const int64_t T[2] = {1, 0};
    const OxAttr *at;
    if ((at = ox_attr(n, "transA")) && at->i) a = transpose(k, a, T, 2);
    if ((at = ox_attr(n, "transB")) && at->i) b = transpose(k, b, T, 2);
    tfe_tensor *y = op2(k, OP_MATMUL, a, b);
    at = ox_attr(n, "alpha");
    if (at && at->f != 1.0f) y = op2(k, OP_MUL, y, scalar(k, at->f, in[0]->dtype));
    if (n->nin > 2 && in[2]) {
        tfe_tensor *c = in[2];
        at = ox_attr(n, "beta");
        if (at && at->f != 1.0f) c = op2(k, OP_MUL, c, scalar(k, at->f, c->dtype));
        y = op2(k, OP_ADD, y, c);
    }
    return y;
}

static tfe_tensor *batchnorm(Keep *k, const OxNode *n, tfe_tensor *const *in, char *err, size_t cap)
{
    tfe_tensor *x = in[0];
    if (x->rank < 2) {
        snprintf(err, cap, "BatchNormalization of a rank-%d input (it takes N, C, ...)", x->rank);
        return NULL;
    }
    /* the per-channel values shaped (C, 1, ..., 1): they broadcast along axis 1 */
    int64_t s[TFE_MAX_RANK];
    s[0] = -1;
    for (int d = 2; d < x->rank; d++) s[d - 1] = 1;
    tfe_tensor *v[4];
    for (int i = 0; i < 4; i++) v[i] = reshape(k, in[1 + i], s, x->rank - 1);
    const OxAttr *a = ox_attr(n, "epsilon");
    double eps = a ? a->f : 1e-5f;
    /* (x - mean) * (scale / sqrt(var + eps)) + B */
    tfe_tensor *sd = op1(k, OP_SQRT, op2(k, OP_ADD, v[3], scalar(k, eps, v[3] ? v[3]->dtype : x->dtype)), NULL);
    return op2(k, OP_ADD, op2(k, OP_MUL, op2(k, OP_SUB, x, v[2]), op2(k, OP_DIV, v[0], sd)), v[1]);
}

static tfe_tensor *flatten(Keep *k, const OxNode *n, tfe_tensor *x, char *err, size_t cap)
{
    const OxAttr *a = ox_attr(n, "axis");
    int64_t axis = a ? a->i : 1;
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis > x->rank) {
        snprintf(err, cap, "Flatten's axis %lld of a rank-%d input", a ? (long long)a->i : 1LL, x->rank);
        return NULL;
    }
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < x->rank; d++) *(d < axis ? &outer : &inner) *= x->shape[d];
    /* -1 for the outer part: the attributes hold no batch size */
    int64_t s[2] = {inner ? -1 : outer, inner};
    return reshape(k, x, s, 2);
}

static tfe_tensor *variadic(Keep *k, const OxNode *n, tfe_tensor *const *in)
{
    tfe_op op = !strcmp(n->op, "Max") ? OP_MAXIMUM : !strcmp(n->op, "Min") ? OP_MINIMUM : OP_ADD;
    tfe_tensor *y = in[0];
    for (int i = 1; i < n->nin; i++) y = op2(k, op, y, in[i]);
    if (!strcmp(n->op, "Mean") && n->nin > 1 && y) y = op2(k, OP_DIV, y, scalar(k, n->nin, y->dtype));
    return y;
}

int import_nn_run(const OxNode *n, tfe_tensor *const *in, tfe_tensor **out, char *err, size_t cap)
{
    Keep k = {.n = 0};
    tfe_tensor *y = NULL;
    err[0] = 0;
    const char *op = n->op;
    if (!strcmp(op, "Gemm")) y = gemm(&k, n, in, err, cap);
    else if (!strcmp(op, "Conv")) y = n->nin < 2 ? (snprintf(err, cap, "Conv takes 2 or 3 inputs, not %d", n->nin), NULL)
                                                 : conv(&k, n, in, err, cap);
    else if (is_pool(op)) y = pool(&k, n, in[0], err, cap);
    else if (!strncmp(op, "Global", 6)) {
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.keepdims = true;
        at.naxes = in[0]->rank - 2;
        for (int d = 2; d < in[0]->rank; d++) at.axes[d - 2] = d;
        if (at.naxes < 1) snprintf(err, cap, "%s of a rank-%d input (it takes N, C, ...)", op, in[0]->rank);
        else y = op1(&k, op[6] == 'A' ? OP_MEAN : OP_MAX, in[0], &at);
    } else if (!strcmp(op, "Flatten")) y = flatten(&k, n, in[0], err, cap);
    else if (!strcmp(op, "BatchNormalization")) y = batchnorm(&k, n, in, err, cap);
    else if (!strcmp(op, "Dropout")) {
        /* inference: the identity; training_mode, when given, must be a constant false */
        tfe_tensor *tm = n->nin > 2 ? in[2] : NULL;
        bool train = tm && (!tm->storage || tensor_numel(tm) != 1 || *(const uint8_t *)tensor_data(tm));
        if (train) snprintf(err, cap, "Dropout with training_mode not a constant false (tfe imports inference)");
        else y = in[0];
    } else y = variadic(&k, n, in);
    if (y) tensor_incref(y);
    for (int i = 0; i < k.n; i++) tensor_decref(k.t[i]);
    if (!y && k.full) snprintf(err, cap, "%s makes too many values", op);
    *out = y;
    return y ? 0 : -1;
}
