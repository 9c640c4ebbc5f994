/* test_conv_dw_bits.c — the float32 d/dw of conv2d, byte for byte as the
 * build before the chunk sums were added 16 floats a step (chunk_add_f32 in
 * tensor/kernels_nn.c): a hash of dw for direct (rows of 16+) and im2col
 * (8-wide rows) shapes, stride 1 and 2, odd K x Cout (the 2- and 1-element
 * tails), with x and dy holding NaN of both signs, infinities and signed
 * zeros. Where both addends of a chunk sum are NaN, x86 returns the first
 * operand's, so a swapped operand order changes the bytes of dw (and not its
 * values): the hashes pin the order the old loops had. The expected hashes
 * were taken from the build before that change (main at eb4eef6), with
 * the default flags (-O2): a build with other code generation (CI's
 * ASan+UBSan build at -O1) computes the GEMM's sums with other bits, so
 * there the test is skipped. Only where the float32 path runs (AVX-512). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tensor/nn_grad.h"
#include "tensor/sgemm_small.h"
#include "tensor/tensor.h"
#include "tests/unit/check.h"

static uint32_t rng = 12345;
static uint32_t next(void) {
    rng = rng * 1103515245u + 12345u;
    return rng >> 8;
}

/* random values; about 2% NaN, 2% -NaN, 0.5% each infinity, 0.5% -0.0 */
static tfe_tensor *spiced(const int64_t shape[4]) {
    tfe_tensor *t = tensor_new(TFE_FLOAT32, 4, shape);
    REQUIRE(t, "out of memory");
    float *p = (float *)tensor_data(t);
    int64_t n = tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        uint32_t r = next() % 1000;
        float v = (float)(next() & 0xFFFF) / 32768.0f - 1.0f;
        if (r < 20) v = NAN;
        else if (r < 40) v = -NAN;
        else if (r < 45) v = INFINITY;
        else if (r < 50) v = -INFINITY;
        else if (r < 55) v = -0.0f;
        p[i] = v;
    }
    return t;
}

int main(void) {
#if defined(__SANITIZE_ADDRESS__)
    return 77; /* (the hashes are the default build's: above) */
#endif
    if (!tfe_sgemm_small_ok()) return 77;
    static const struct {
        int64_t n, h, w, c, co, s;
        uint64_t hash;
    } cases[] = {
        {32, 32, 32, 16, 16, 1, 0x1ce04c7a58c85303ull},  /* direct d/dw, many chunks a group */
        {32, 16, 16, 32, 32, 1, 0x5d9ab1837710ea03ull},  /* direct */
        {32, 8, 8, 64, 64, 1, 0x7650a47a49e8ab83ull},    /* im2col chunks (rows of 8) */
        {32, 32, 32, 16, 32, 2, 0x921ec4fa27bf0a83ull},  /* stride 2, direct */
        {32, 16, 16, 32, 64, 2, 0xe1a04757c8fab683ull},  /* stride 2, im2col */
        {32, 20, 20, 5, 9, 1, 0xe0c6f5315533d1baull},    /* K x Cout = 405: the 1-element tail */
        {32, 8, 8, 5, 9, 1, 0xc90b529a9c1265baull},      /* the same through im2col */
        {32, 10, 10, 7, 10, 1, 0xfa19210013b7a5b3ull},   /* 630: the 2-element tail */
        {32, 18, 18, 3, 11, 1, 0xd42805523dc2249aull},   /* 297: both tails */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t xs[4] = {cases[i].n, cases[i].h, cases[i].w, cases[i].c};
        int64_t oh = (cases[i].h + cases[i].s - 1) / cases[i].s;
        int64_t ow = (cases[i].w + cases[i].s - 1) / cases[i].s;
        int64_t ys[4] = {cases[i].n, oh, ow, cases[i].co};
        int64_t ws[4] = {3, 3, cases[i].c, cases[i].co};
        tfe_tensor *x = spiced(xs), *dy = spiced(ys);
        tfe_attrs at;
        memset(&at, 0, sizeof at);
        at.nints = 5;
        at.ints[0] = at.ints[1] = cases[i].s; /* strides */
        at.ints[2] = at.ints[3] = 1;          /* dilation */
        at.ints[4] = 1;                       /* "same" */
        tfe_tensor *dw = tfe_conv2d_grad_filter(x, dy, ws, &at);
        REQUIRE(dw, "conv2d_backprop_filter failed: %s", tfe_error_msg());
        uint64_t h = check_fnv1a(CHECK_FNV1A_START, tensor_data(dw), (size_t)tensor_numel(dw) * sizeof(float));
        printf("case %zu: 0x%016llx\n", i, (unsigned long long)h);
        CHECK(h == cases[i].hash, "case %zu (%lldx%lldx%lldx%lld -> %lld, stride %lld): dw hash 0x%016llx, "
              "want 0x%016llx", i, (long long)cases[i].n, (long long)cases[i].h,
              (long long)cases[i].w, (long long)cases[i].c, (long long)cases[i].co,
              (long long)cases[i].s, (unsigned long long)h, (unsigned long long)cases[i].hash);
        tensor_decref(dw);
        tensor_decref(dy);
        tensor_decref(x);
    }
    return check_done("test_conv_dw_bits");
}
