/* test_set_slice.c — set_slice into a broadcast zero (slice's gradient: one
 * 0-d zero broadcast to x's shape), which k_set_slice clears with memset
 * instead of copying, byte for byte against the same call on a zero tensor
 * materialised in memory (the copying path): float32, float64, int64 and
 * bool, slices with steps, reversed axes and dropped axes, values with NaN,
 * infinities, signed zeros and subnormals, a value broadcast into the slice;
 * and a broadcast -0.0 or 1.0 (not all-zero bytes) still copied. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/ops.h"
#include "tests/unit/check.h"

static unsigned rng = 2024;
static unsigned next(void) {
    rng = rng * 1103515245u + 12345u;
    return rng >> 8;
}
static double rnd(void) {
    static const double odd[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-40, -1e-41, 3e38};
    unsigned r = next();
    if (r % 7 == 0) return odd[(r >> 5) % 8];
    return ((double)(next() & 0xFFFF) / 65536.0 - 0.5) * (double)(1 + r % 9);
}

static tfe_tensor *call(tfe_op op, int nin, tfe_tensor **in, const tfe_attrs *at) {
    tfe_tensor *r = tfe_call1(op, nin, in, at);
    REQUIRE(r, "%s failed: %s", tfe_ops[op].name, tfe_error_msg());
    return r;
}

/* a tensor of shape filled with random values (a -NaN payload in floats too) */
static tfe_tensor *random_of(tfe_dtype dt, int rank, const int64_t *shape) {
    tfe_tensor *t = tensor_new(dt, rank, shape);
    REQUIRE(t, "out of memory");
    int64_t n = tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double v = rnd();
        switch (dt) {
        case TFE_FLOAT32: ((float *)tensor_data(t))[i] = (float)v; break;
        case TFE_FLOAT64: ((double *)tensor_data(t))[i] = v; break;
        case TFE_INT64: ((int64_t *)tensor_data(t))[i] = isfinite(v) ? (int64_t)(v * 1000) : -7; break;
        default: ((uint8_t *)tensor_data(t))[i] = v > 0; break;
        }
    }
    if (dt == TFE_FLOAT32 && n > 2) {
        uint32_t nan = 0xFFC00123u; /* a negative NaN with a payload */
        memcpy((float *)tensor_data(t) + n / 2, &nan, 4);
    }
    return t;
}

/* v broadcast to (rank, shape): a view, every stride 0 */
static tfe_tensor *broadcast(double v, tfe_dtype dt, int rank, const int64_t *shape) {
    tfe_tensor *s = tensor_from_f64(v, dt);
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.nints = rank;
    for (int i = 0; i < rank; i++) at.ints[i] = shape[i];
    tfe_tensor *b = call(OP_BROADCAST_TO, 1, &s, &at);
    tensor_decref(s);
    return b;
}

static bool same_bytes(const tfe_tensor *a, const tfe_tensor *b) {
    if (a->dtype != b->dtype || a->rank != b->rank || !tensor_is_contiguous(a) || !tensor_is_contiguous(b))
        return false;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i]) return false;
    size_t esz = a->dtype == TFE_FLOAT64 || a->dtype == TFE_INT64 ? 8 : a->dtype == TFE_FLOAT32 ? 4 : 1;
    return memcmp(tensor_data(a), tensor_data(b), (size_t)tensor_numel(a) * esz) == 0;
}

int main(void) {
    const tfe_dtype dts[] = {TFE_FLOAT32, TFE_FLOAT64, TFE_INT64, TFE_BOOL};
    for (int it = 0; it < 400; it++) {
        tfe_dtype dt = dts[it % 4];
        int rank = 1 + (int)(next() % 4);
        int64_t shape[4], vshape[4];
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.nints = 3 * rank;
        int vr = 0;
        for (int k = 0; k < rank; k++) {
            shape[k] = 1 + (int64_t)(next() % 9);
            int64_t step = 1 + (int64_t)(next() % 3), start = (int64_t)(next() % (uint64_t)shape[k]);
            int64_t stop = start + 1 + (int64_t)(next() % (uint64_t)shape[k]);
            if (stop > shape[k]) stop = shape[k];
            if (next() % 5 == 0) { /* reversed: from the end back to start */
                int64_t hi = shape[k] - 1;
                at.ints[3 * k] = hi, at.ints[3 * k + 1] = start - 1, at.ints[3 * k + 2] = -step;
                vshape[vr++] = (hi - (start - 1) + step - 1) / step;
            } else if (k == 0 && next() % 4 == 0) { /* one index, the axis dropped */
                at.ints[0] = start, at.ints[1] = start + 1, at.ints[2] = 1;
                at.naxes = 1; /* (tfe_attrs_init's -1 is "no axes") */
                at.axes[0] = 0;
            } else {
                at.ints[3 * k] = start, at.ints[3 * k + 1] = stop, at.ints[3 * k + 2] = step;
                vshape[vr++] = (stop - start + step - 1) / step;
            }
        }
        /* the value: the slice's shape, or broadcast into it (a trailing 1) */
        bool bval = vr > 0 && next() % 4 == 0;
        if (bval) vshape[vr - 1] = 1;
        tfe_tensor *v = random_of(dt, vr, vshape);
        tfe_tensor *zb = broadcast(0.0, dt, rank, shape);
        tfe_tensor *zm = tensor_new(dt, rank, shape);
        REQUIRE(zm, "out of memory");
        memset(tensor_data(zm), 0, (size_t)tensor_numel(zm) * (dt == TFE_FLOAT32 ? 4 : dt == TFE_BOOL ? 1 : 8));
        tfe_tensor *in1[2] = {zb, v}, *in2[2] = {zm, v};
        tfe_tensor *a = call(OP_SET_SLICE, 2, in1, &at), *b = call(OP_SET_SLICE, 2, in2, &at);
        CHECK(same_bytes(a, b), "iteration %d (dtype %d, rank %d): broadcast zero differs from zeros", it, dt,
              rank);
        tensor_decref(a), tensor_decref(b), tensor_decref(zb), tensor_decref(zm);
        /* a broadcast fill whose bytes are not all zero: copied, not cleared */
        if (dt == TFE_FLOAT32 || dt == TFE_FLOAT64) {
            double fill = it & 4 ? -0.0 : 1.0;
            tfe_tensor *fb = broadcast(fill, dt, rank, shape), *fm = tensor_new(dt, rank, shape);
            for (int64_t i = 0; i < tensor_numel(fm); i++) {
                if (dt == TFE_FLOAT32) ((float *)tensor_data(fm))[i] = (float)fill;
                else ((double *)tensor_data(fm))[i] = fill;
            }
            tfe_tensor *i3[2] = {fb, v}, *i4[2] = {fm, v};
            a = call(OP_SET_SLICE, 2, i3, &at), b = call(OP_SET_SLICE, 2, i4, &at);
            CHECK(same_bytes(a, b), "iteration %d: a broadcast %g differs from a filled tensor", it, fill);
            tensor_decref(a), tensor_decref(b), tensor_decref(fb), tensor_decref(fm);
        }
        tensor_decref(v);
    }
    return check_done("test_set_slice");
}
