/* test_elem_avx_bits.c — float32 add, sub, mul, relu and relu_grad, byte for
 * byte against a scalar reference of the loops they had before their
 * contiguous runs of 16 elements or more got AVX-512 loops
 * (tensor/kernels_elem.c, issue 19): x + y, x - y, x * y with x the first
 * operand, so that where both are NaN the result is x's NaN, quieted (x86's
 * rule for SSE and AVX; the old vector loop and its tail had x first), and
 * relu and relu_grad selecting x or +0.0 as tensor/elem.def's formulas. The
 * inputs hold NaN of both signs with random payloads (quiet and signalling),
 * infinities, signed zeros, subnormals and values that overflow or
 * underflow, for every tail length of the 16-wide loop (n = 16 .. 95), long
 * runs, and a broadcast (the periodic runs' tiles). Swapping the asm's
 * operands of the add or of the multiply makes it fail. Skipped (77) without
 * AVX-512, where the old loops run, and in the sanitizer build, whose code
 * generation may order the old loops' operands otherwise. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "tensor/ops.h"
#include "tensor/sgemm_small.h"
#include "tensor/tensor.h"
#include "tests/unit/check.h"

static uint32_t rng = 1919;
static uint32_t next(void) {
    rng = rng * 1103515245u + 12345u;
    return rng >> 8;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static uint32_t bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* one value: 16% NaN (either sign, random payload, quiet or signalling), 4%
 * infinities, 4% zeros of either sign, 8% subnormals, 8% near the largest
 * float, 4% near the smallest normal, the rest in [-4, 4) */
static float spiced(void) {
    uint32_t r = next() % 100, sign = (next() & 1) << 31;
    if (r < 16) {
        uint32_t payload = (next() | (next() << 16)) & 0x7FFFFF;
        if (!payload) payload = 1;
        return from_bits(sign | 0x7F800000u | payload);
    }
    if (r < 20) return from_bits(sign | 0x7F800000u);
    if (r < 24) return from_bits(sign);
    if (r < 32) return from_bits(sign | (((next() | (next() << 16)) & 0x7FFFFF) | 1));
    if (r < 40) return from_bits(sign | (0xFEu << 23) | ((next() | (next() << 16)) & 0x7FFFFF));
    if (r < 44) return from_bits(sign | (1u << 23) | ((next() | (next() << 16)) & 0x7FFFFF));
    return (float)(next() & 0xFFFF) / 8192.0f - 4.0f;
}

static tfe_tensor *filled(int rank, const int64_t *shape) {
    tfe_tensor *t = tensor_new(TFE_FLOAT32, rank, shape);
    REQUIRE(t, "out of memory");
    float *p = (float *)tensor_data(t);
    for (int64_t i = 0; i < tensor_numel(t); i++) p[i] = spiced();
    return t;
}

/* x86's result where an operand is NaN: the first NaN operand, quieted */
static uint32_t quiet(float v) { return bits(v) | 0x400000u; }

static uint32_t ref(tfe_op op, float x, float y) {
    if (op == OP_RELU) return x > 0 || x != x ? bits(x) : bits(0.0f);
    if (op == OP_RELU_GRAD) return y > 0 ? bits(x) : bits(0.0f);
    if (isnan(x)) return quiet(x);
    if (isnan(y)) return quiet(y);
    return bits(op == OP_ADD ? x + y : op == OP_SUB ? x - y : x * y);
}

static const struct { tfe_op op; const char *name; } ops[] = {
    {OP_ADD, "add"}, {OP_SUB, "sub"}, {OP_MUL, "mul"}, {OP_RELU_GRAD, "relu_grad"}, {OP_RELU, "relu"},
};

/* op over a (n) and b (n, or period P of a's trailing axis: broadcast) */
static void check_case(int k, int rank_a, const int64_t *shape_a, int rank_b, const int64_t *shape_b) {
    tfe_op op = ops[k].op;
    int nin = op == OP_RELU ? 1 : 2;
    tfe_tensor *in[2] = {filled(rank_a, shape_a), filled(rank_b, shape_b)};
    tfe_attrs at;
    tfe_attrs_init(&at);
    tfe_tensor *o = tfe_call1(op, nin, in, &at);
    REQUIRE(o, "%s: %s", ops[k].name, tfe_error_msg());
    const float *a = (const float *)tensor_data(in[0]), *b = (const float *)tensor_data(in[1]);
    const uint32_t *got = (const uint32_t *)tensor_data(o);
    int64_t n = tensor_numel(o), P = tensor_numel(in[1]), bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (got[i] != ref(op, a[i], b[i % P]) && !bad++) first = i;
    CHECK(!bad, "%s, n = %lld, b %lld elements: %lld of %lld differ, the first at %lld: %g (0x%08x), %g (0x%08x) -> "
          "0x%08x, want 0x%08x", ops[k].name, (long long)n, (long long)P, (long long)bad, (long long)n,
          (long long)first, a[first], bits(a[first]), b[first % P], bits(b[first % P]), got[first],
          ref(op, a[first], b[first % P]));
    tensor_decref(o);
    tensor_decref(in[0]);
    tensor_decref(in[1]);
}

int main(void) {
#if defined(__SANITIZE_ADDRESS__)
    return 77; /* (above) */
#endif
    if (!tfe_sgemm_small_ok()) return 77; /* no AVX-512: the old loops run */
    for (int k = 0; k < (int)(sizeof ops / sizeof ops[0]); k++) {
        for (int64_t n = 16; n < 96; n++) check_case(k, 1, &n, 1, &n);
        static const int64_t longs[] = {1000, 4099, 65537, 300001};
        for (size_t j = 0; j < sizeof longs / sizeof longs[0]; j++) check_case(k, 1, &longs[j], 1, &longs[j]);
        if (ops[k].op != OP_RELU) {
            int64_t sa[2] = {257, 24}, sb = 24; /* a bias: runs of 2040 elements of a tile */
            check_case(k, 2, sa, 1, &sb);
        }
    }
    return check_done("test_elem_avx_bits");
}
