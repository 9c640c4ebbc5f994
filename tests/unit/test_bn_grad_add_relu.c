/* test_bn_grad_add_relu.c — batch_norm_grad with the fused group
 * relu_grad(u + v, a) before it run inside (k_batch_norm_grad_add_relu,
 * graph/plan.c) against the unfused path a staged step ran before: the
 * group by the fused VM (tfe_fused_run), then k_batch_norm_grad on its
 * output. Byte for byte: dx, dgamma, dbeta and the group's output the
 * kernel writes; float32 and float64; 16, 32 and 64 channels (the unrolled
 * loops) and odd ones (the generic loop); rows from one to several parts
 * and threads; NaN of both signs in u and v at the same places (the add's
 * operand order decides which one comes out), infinities, signed zeros,
 * subnormals; the output in place of u, v or a (the arena may put it
 * there), and dx in place of the group's output. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/fused.h"
#include "tensor/kernels.h"
#include "tensor/ops.h"
#include "tests/unit/check.h"

static unsigned rng = 4242;
static unsigned next(void) {
    rng = rng * 1103515245u + 12345u;
    return rng >> 8;
}

/* an odd value now and then: the NaNs differ in sign and payload */
static double odd(unsigned r, bool f32) {
    switch (r % 9) {
    case 0: return 0.0;
    case 1: return -0.0;
    case 2: return INFINITY;
    case 3: return -INFINITY;
    case 4: return f32 ? 1e-40 : 1e-310;
    default: return 0.0; /* NaNs: set by bits below */
    }
}

static void fill(tfe_tensor *t, int64_t n, int rate, unsigned salt) {
    bool f32 = t->dtype == TFE_FLOAT32;
    for (int64_t i = 0; i < n; i++) {
        unsigned r = next();
        double v = ((double)(next() & 0xFFFF) / 65536.0 - 0.5) * (double)(1 + r % 5);
        bool special = rate && r % (unsigned)rate == 0;
        unsigned k = (r >> 7) % 9;
        if (f32) {
            float f = (float)(special ? odd(k, true) : v);
            if (special && k >= 5) { /* NaN: sign and payload from k, salt */
                uint32_t b = 0x7FC00000u | ((salt + k) & 0xFF);
                if (k & 1) b |= 0x80000000u;
                memcpy(&f, &b, 4);
            }
            ((float *)tensor_data(t))[i] = f;
        } else {
            double d = special ? odd(k, false) : v;
            if (special && k >= 5) {
                uint64_t b = 0x7FF8000000000000ull | ((salt + k) & 0xFF);
                if (k & 1) b |= 0x8000000000000000ull;
                memcpy(&d, &b, 8);
            }
            ((double *)tensor_data(t))[i] = d;
        }
    }
}

static tfe_tensor *mk(tfe_dtype dt, int rank, const int64_t *shape) {
    tfe_tensor *t = tensor_new(dt, rank, shape);
    REQUIRE(t, "out of memory");
    return t;
}

static tfe_tensor *copy_of(const tfe_tensor *t, int64_t bytes) {
    tfe_tensor *c = mk(t->dtype, t->rank, t->shape);
    memcpy(tensor_data(c), tensor_data((tfe_tensor *)t), (size_t)bytes);
    return c;
}

/* byte for byte; the first difference reported (as 32-bit words) */
static bool same(const tfe_tensor *a, const tfe_tensor *b, int64_t bytes) {
    const uint32_t *p = (const uint32_t *)tensor_data((tfe_tensor *)a), *q = (const uint32_t *)tensor_data((tfe_tensor *)b);
    for (int64_t i = 0; i < bytes / 4; i++)
        if (p[i] != q[i]) {
            fprintf(stderr, "word %lld: %08x, want %08x\n", (long long)i, p[i], q[i]);
            return false;
        }
    return true;
}

/* place: 0 a new output, 1 in place of u, 2 of v, 3 of a; dxin: dx in place
 * of the group's output (its block when nothing reads it after) */
static void one(tfe_dtype dt, int64_t R, int64_t C, int place, bool dxin, int rate) {
    int64_t shape[2] = {R, C}, n = R * C, es = dt == TFE_FLOAT32 ? 4 : 8, bytes = n * es;
    tfe_tensor *u = mk(dt, 2, shape), *v = mk(dt, 2, shape), *a = mk(dt, 2, shape), *x = mk(dt, 2, shape);
    unsigned salt = next();
    fill(u, n, rate, salt);
    fill(v, n, rate, salt + 3);
    fill(a, n, rate, salt);
    fill(x, n, rate ? rate * 4 : 0, salt);
    /* NaN of the other sign in v wherever u holds a NaN, now and then */
    for (int64_t i = 0; rate && i < n; i += 1 + (int64_t)(next() % 5)) {
        if (dt == TFE_FLOAT32) {
            uint32_t b;
            memcpy(&b, (float *)tensor_data(u) + i, 4);
            if ((b & 0x7F800000u) == 0x7F800000u && (b & 0x7FFFFFu)) {
                b ^= 0x80000001u;
                memcpy((float *)tensor_data(v) + i, &b, 4);
            }
        } else {
            uint64_t b;
            memcpy(&b, (double *)tensor_data(u) + i, 8);
            if ((b & 0x7FF0000000000000ull) == 0x7FF0000000000000ull && (b & 0xFFFFFFFFFFFFFull)) {
                b ^= 0x8000000000000001ull;
                memcpy((double *)tensor_data(v) + i, &b, 8);
            }
        }
    }
    tfe_tensor *vec[5];
    for (int k = 0; k < 5; k++) {
        vec[k] = mk(dt, 1, &C);
        fill(vec[k], C, k == 3 || k == 4 ? 0 : rate, salt + (unsigned)k); /* mean, var: ordinary */
    }
    if (dt == TFE_FLOAT32)
        for (int64_t j = 0; j < C; j++) ((float *)tensor_data(vec[4]))[j] = fabsf(((float *)tensor_data(vec[4]))[j]);
    else
        for (int64_t j = 0; j < C; j++) ((double *)tensor_data(vec[4]))[j] = fabs(((double *)tensor_data(vec[4]))[j]);
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.f[0] = 1e-5;

    /* the unfused path: the group by the VM (load u, load v, add, load a,
     * relu_grad: the ResNet step's register order), then batch_norm_grad */
    tfe_finstr code[5] = {
        {.op = FOP_LOAD, .dst = 0, .input = 0},
        {.op = FOP_LOAD, .dst = 1, .input = 1},
        {.op = OP_ADD, .dst = 1, .a = 0, .b = 1},
        {.op = FOP_LOAD, .dst = 0, .input = 2},
        {.op = OP_RELU_GRAD, .dst = 0, .a = 1, .b = 0},
    };
    tfe_fprog prog = {.dtype = dt, .ninputs = 3, .nregs = 2, .ninstr = 5, .code = code, .result = 0};
    tfe_tensor *gin[3] = {u, v, a}, *w_ref = mk(dt, 2, shape);
    REQUIRE(tfe_fused_run(&prog, gin, w_ref) == 0, "vm: %s", tfe_error_msg());
    tfe_tensor *dx_ref = mk(dt, 2, shape), *out_ref[3] = {dx_ref, NULL, NULL};
    tfe_tensor *in_ref[7] = {w_ref, vec[0], vec[1], x, vec[2], vec[3], vec[4]};
    tfe_opcall cr = {.op = OP_BATCH_NORM_GRAD, .nin = 7, .nout = 3, .in = in_ref, .at = &at, .out = out_ref};
    REQUIRE(k_batch_norm_grad(&cr) == 0, "batch_norm_grad: %s", tfe_error_msg());

    /* the fused path, the output where the arena may put it */
    tfe_tensor *u2 = copy_of(u, bytes), *v2 = copy_of(v, bytes), *a2 = copy_of(a, bytes);
    tfe_tensor *w = place == 1 ? u2 : place == 2 ? v2 : place == 3 ? a2 : mk(dt, 2, shape);
    tfe_tensor *dx = dxin ? w : mk(dt, 2, shape), *out[4] = {dx, NULL, NULL, w};
    tfe_tensor *in[9] = {u2, vec[0], vec[1], x, vec[2], vec[3], vec[4], v2, a2};
    tfe_opcall cf = {.op = OP_BATCH_NORM_GRAD, .nin = 9, .nout = 4, .in = in, .at = &at, .out = out};
    tfe_tensor *w_copy = NULL;
    if (dxin) { /* w is overwritten by dx: compare the group's output first */
        REQUIRE(k_batch_norm_grad_add_relu(&cf) == 0, "fused: %s", tfe_error_msg());
    } else {
        REQUIRE(k_batch_norm_grad_add_relu(&cf) == 0, "fused: %s", tfe_error_msg());
        w_copy = w;
    }
    const char *dn = dt == TFE_FLOAT32 ? "float32" : "float64";
    CHECK(same(dx, dx_ref, bytes), "dx differs: %s R %lld C %lld place %d dxin %d", dn, (long long)R, (long long)C,
          place, dxin);
    if (w_copy) CHECK(same(w_copy, w_ref, bytes), "dy' differs: %s R %lld C %lld place %d", dn, (long long)R, (long long)C, place);
    CHECK(same(out[1], out_ref[1], C * es), "dgamma differs: %s R %lld C %lld place %d dxin %d", dn, (long long)R,
          (long long)C, place, dxin);
    CHECK(same(out[2], out_ref[2], C * es), "dbeta differs: %s R %lld C %lld place %d dxin %d", dn, (long long)R,
          (long long)C, place, dxin);
    tfe_tensor *all[] = {u, v, a, x, w_ref, dx_ref, out_ref[1], out_ref[2], u2, v2, a2, out[1], out[2]};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) tensor_decref(all[k]);
    if (place == 0) tensor_decref(w);
    if (!dxin) tensor_decref(dx);
    for (int k = 0; k < 5; k++) tensor_decref(vec[k]);
}

int main(void) {
    /* rows: one part, several parts, several parts on threads (>= 8 KN_GRAIN
     * elements) with a short last part */
    static const int64_t rows[] = {1, 7, 100, 4099, 32 * 16 * 16 + 3, 32 * 32 * 32};
    static const int64_t chans[] = {16, 32, 64, 1, 3, 7, 100};
    for (int d = 0; d < 2; d++)
        for (size_t ri = 0; ri < sizeof rows / sizeof *rows; ri++)
            for (size_t ci = 0; ci < sizeof chans / sizeof *chans; ci++) {
                int64_t R = rows[ri], C = chans[ci];
                if (R * C > 600000) continue;
                for (int place = 0; place < 4; place++)
                    for (int rate = 0; rate <= 13; rate += 13)
                        one(d ? TFE_FLOAT64 : TFE_FLOAT32, R, C, place, place == 0 && rate, rate);
            }
    return check_done("test_bn_grad_add_relu");
}
