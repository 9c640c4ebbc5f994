/* fused_axpy.c — the fused program out = w op (p * q) in one AVX-512 pass
 * (fused_axpy.h).
 * Why: the chunked VM (fused.c) runs it as two loops over a chunk, a
 * multiply into a register buffer and the op from it, compiled for baseline
 * x86-64 (4 floats a vector). A planned SGD update of an MLP's 784x256
 * weight took 50-100 us that way against ~17 us for one pass of 16-float
 * vectors (benchmarks.md, "The SGD update in one pass"). The AVX-512 build
 * of the whole VM was tried and was slower on other programs (ibid.,
 * "Register totals..."), so only this shape gets its own loop. */
#if defined(__GNUC__) && !defined(__clang__)
/* the multiply and the op are two roundings, as in the VM and eager code:
 * never one fused multiply-add */
#pragma GCC optimize("O3", "fp-contract=off")
#endif
#include "tensor/fused_axpy.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

bool tfe_axpy_ok(void) {
    static int ok = -1;
    if (ok < 0) {
        __builtin_cpu_init();
        ok = __builtin_cpu_supports("avx512f") ? 1 : 0;
    }
    return ok;
}

#define AVX512 __attribute__((target("avx512f")))

/* One vector (mask m: the tail) of elements [i, i + 16). */
static inline __attribute__((always_inline)) AVX512 void one(const tfe_axpy *a, float *out, int64_t i,
                                                            __mmask16 m, __m512 pv, __m512 qv) {
    __m512 p = a->ps ? pv : _mm512_maskz_loadu_ps(m, a->p + i);
    __m512 q = a->qs ? qv : _mm512_maskz_loadu_ps(m, a->q + i);
    __m512 t = _mm512_mul_ps(p, q); /* k_mul: x * y */
    __m512 w = _mm512_maskz_loadu_ps(m, a->w + i);
    __m512 x = a->wfirst ? w : t, y = a->wfirst ? t : w;
    __m512 r = a->sub ? _mm512_sub_ps(x, y) : _mm512_add_ps(x, y); /* k_sub / k_add */
    _mm512_mask_storeu_ps(out + i, m, r);
}

AVX512 void tfe_axpy_f32(const tfe_axpy *a, float *out, int64_t begin, int64_t end) {
    __m512 pv = _mm512_set1_ps(a->ps ? a->p[0] : 0.0f), qv = _mm512_set1_ps(a->qs ? a->q[0] : 0.0f);
    int64_t i = begin;
    for (; i + 16 <= end; i += 16) one(a, out, i, (__mmask16)0xFFFF, pv, qv);
    if (i < end) one(a, out, i, (__mmask16)((1u << (end - i)) - 1), pv, qv);
}

#else

bool tfe_axpy_ok(void) { return false; }

void tfe_axpy_f32(const tfe_axpy *a, float *out, int64_t begin, int64_t end) {
    (void)a, (void)out, (void)begin, (void)end;
}

#endif
