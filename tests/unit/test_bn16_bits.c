/* test_bn16_bits.c — float32 batch norm over 16 channels, byte for byte as
 * the build before its statistics pass (sum16_f) and its normalising pass
 * (norm16_f, not in place) got AVX-512 loops of their own in
 * tensor/kernels_bn.c: hashes of batch_norm_train's y, mean and variance and
 * of batch_norm_infer's y, for 1 part and 16 parts of rows, with x, gamma and
 * beta holding NaN of both signs, infinities and signed zeros. Where both
 * operands of an add or multiply are NaN, x86 returns the first one's, so
 * an operand order other than the old loops' changes the bytes (not the
 * values): each of the six orders (the float and the double sums, x - m,
 * t * rs, t * g, t + b) was swapped in turn and made a hash fail. The
 * expected hashes were taken from the build before (main at a60fbb1), with
 * the default flags (-O2); skipped in the sanitizer build, whose code
 * generation may order the old loops' operands otherwise. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tensor/ops.h"
#include "tensor/tensor.h"
#include "tests/unit/check.h"

static uint32_t rng = 4242;
static uint32_t next(void) {
    rng = rng * 1103515245u + 12345u;
    return rng >> 8;
}

/* random values in [-4, 4); per 100,000: `nan` NaN and as many -NaN, `inf`
 * +infinity and as many -infinity, 500 -0.0 */
static tfe_tensor *spiced(int rank, const int64_t *shape, int nan, int inf) {
    tfe_tensor *t = tensor_new(TFE_FLOAT32, rank, shape);
    REQUIRE(t, "out of memory");
    float *p = (float *)tensor_data(t);
    int64_t n = tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        int r = (int)(next() % 100000);
        float v = (float)(next() & 0xFFFF) / 8192.0f - 4.0f;
        if (r < nan) v = NAN;
        else if (r < 2 * nan) v = -NAN;
        else if (r < 2 * nan + inf) v = INFINITY;
        else if (r < 2 * nan + 2 * inf) v = -INFINITY;
        else if (r < 2 * nan + 2 * inf + 500) v = -0.0f;
        p[i] = v;
    }
    return t;
}

static uint64_t fnv1a(uint64_t h, const tfe_tensor *t) {
    return check_fnv1a(h, tensor_data((tfe_tensor *)t), (size_t)tensor_numel(t) * sizeof(float));
}

int main(void) {
#if defined(__SANITIZE_ADDRESS__)
    return 77; /* (the hashes are the default build's: above) */
#endif
    static const struct {
        int64_t n, h, w;
        int xnan, xinf, gnan; /* per 100,000 in x; NaN per 100,000 in gamma and beta */
        uint64_t hash;
    } cases[] = {
        {32, 32, 32, 0, 0, 0, 0x23a47a8434ea1a83ull},      /* 16 parts, finite */
        {32, 32, 32, 3, 0, 20000, 0xf18552e6f31d0d8aull},  /* 16 parts, NaN of both signs in most channels */
        {32, 32, 32, 0, 2, 0, 0x8408cb82773fe135ull},      /* infinities of both signs */
        {3, 5, 7, 3000, 0, 20000, 0x24054131f9ea78ceull},   /* one part */
        {2, 9, 33, 100, 100, 20000, 0xd6bafbf2e2582e70ull}, /* one part, 594 rows */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t xs[4] = {cases[i].n, cases[i].h, cases[i].w, 16}, cs = 16;
        tfe_tensor *in[5] = {spiced(4, xs, cases[i].xnan, cases[i].xinf), spiced(1, &cs, cases[i].gnan, 0),
                             spiced(1, &cs, cases[i].gnan, 0)};
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.f[0] = 1e-5;
        tfe_tensor *out[3] = {0};
        REQUIRE(!tfe_execute(OP_BATCH_NORM_TRAIN, 3, in, &at, out), "batch_norm_train: %s", tfe_error_msg());
        uint64_t h = CHECK_FNV1A_START;
        for (int k = 0; k < 3; k++) h = fnv1a(h, out[k]);
        /* the inference form with the batch's statistics, and with finite
         * ones (where x and gamma or beta are both NaN, the operand order of
         * t * g and t + b decides the bytes) */
        tfe_tensor *m = spiced(1, &cs, 0, 0), *v = spiced(1, &cs, 0, 0);
        float *vp = (float *)tensor_data(v);
        for (int j = 0; j < 16; j++) vp[j] = fabsf(vp[j]) + 0.5f;
        for (int k = 0; k < 2; k++) {
            in[3] = k ? m : out[1];
            in[4] = k ? v : out[2];
            tfe_tensor *y = tfe_call1(OP_BATCH_NORM_INFER, 5, in, &at);
            REQUIRE(y, "batch_norm_infer: %s", tfe_error_msg());
            h = fnv1a(h, y);
            tensor_decref(y);
        }
        tensor_decref(m);
        tensor_decref(v);
        printf("case %zu: 0x%016llx\n", i, (unsigned long long)h);
        CHECK(h == cases[i].hash, "case %zu (%lldx%lldx%lldx16): hash 0x%016llx, want 0x%016llx", i,
              (long long)cases[i].n, (long long)cases[i].h, (long long)cases[i].w, (unsigned long long)h,
              (unsigned long long)cases[i].hash);
        for (int k = 0; k < 3; k++) tensor_decref(out[k]), tensor_decref(in[k]);
    }
    return check_done("test_bn16_bits");
}
