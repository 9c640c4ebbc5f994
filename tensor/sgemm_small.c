/* sgemm_small.c — float32 GEMM with AVX-512 register tiles that reads A and
 * B where they lie (sgemm_small.h).
 * Why: conv2d's products are tall and narrow (32768 x 144 by 144 x 16 for a
 * 3x3x16 conv over a CIFAR batch). OpenBLAS packs both operands before its
 * kernel runs, and with 16 output columns the packing copies (and the beta
 * pass over C) cost about as much as the arithmetic. Here a tile of R rows of
 * C by V vectors of 16 columns stays in registers while k runs: each step
 * loads V vectors of B's row k and broadcasts R elements of A, so nothing is
 * copied, and the narrow side (n, up to 64) fits one tile. The file is
 * compiled for baseline x86-64; only these functions use AVX-512, and
 * callers check tfe_sgemm_small_ok() first. */
#include "tensor/sgemm_small.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

bool tfe_sgemm_small_ok(void) {
    static int ok = -1;
    if (ok < 0) {
        __builtin_cpu_init();
        ok = __builtin_cpu_supports("avx512f") ? 1 : 0;
    }
    return ok;
}

#define AVX512 __attribute__((target("avx512f")))
#define SUM_BLOCK 64

/* store()'s form for a batch norm's epilogue: ((t - m) * rs) * g + b, each
 * op with t first and pinned by asm, as norm16_f (tensor/kernels_bn.c) has
 * them (x86 returns the first operand's NaN when both are NaN, and the
 * compiler may swap a commutative op's operands), then t + h or h + t (the
 * residual, in the add's operand order: k_add returns the first one's NaN),
 * then relu. Inlined as
 * store() is: a call taking s's address would keep the whole tile in
 * memory (the conv ran 2.4x slower). */
static inline __attribute__((always_inline)) AVX512 void bn_store(const int R, const int V, float *c, int64_t ldc,
                                                      const __mmask16 *mk, __m512 s[12][4], bool add,
                                                      const tfe_sgemm_ep *ep) {
    __m512 zero = _mm512_setzero_ps();
#pragma GCC unroll 4
    for (int v = 0; v < V; v++) {
        __m512 m = _mm512_maskz_loadu_ps(mk[v], ep->bn_m + 16 * v),
               rs = _mm512_maskz_loadu_ps(mk[v], ep->bn_rs + 16 * v),
               g = _mm512_maskz_loadu_ps(mk[v], ep->bn_g + 16 * v),
               b = _mm512_maskz_loadu_ps(mk[v], ep->bn_b + 16 * v);
#pragma GCC unroll 12
        for (int r = 0; r < R; r++) {
            __m512 t = s[r][v];
            if (add) t = _mm512_add_ps(_mm512_maskz_loadu_ps(mk[v], c + r * ldc + 16 * v), t);
            __asm__("vsubps %2, %1, %0" : "=v"(t) : "v"(t), "v"(m));
            __asm__("vmulps %2, %1, %0" : "=v"(t) : "v"(t), "v"(rs));
            __asm__("vmulps %2, %1, %0" : "=v"(t) : "v"(t), "v"(g));
            __asm__("vaddps %2, %1, %0" : "=v"(t) : "v"(t), "v"(b));
            if (ep->res) {
                __m512 h = _mm512_maskz_loadu_ps(
                    mk[v], (const float *)((const char *)(c + r * ldc + 16 * v) + ep->res_off));
                if (ep->res_first) __asm__("vaddps %2, %1, %0" : "=v"(t) : "v"(h), "v"(t));
                else __asm__("vaddps %2, %1, %0" : "=v"(t) : "v"(t), "v"(h));
            }
            if (ep->relu) {
                /* x > 0 || x != x ? x : 0 */
                __mmask16 keep = _mm512_cmp_ps_mask(t, zero, _CMP_GT_OQ) |
                                 _mm512_cmp_ps_mask(t, t, _CMP_UNORD_Q);
                t = _mm512_maskz_mov_ps(keep, t);
            }
            _mm512_mask_storeu_ps(c + r * ldc + 16 * v, mk[v], t);
        }
    }
}

/* C = s, or C + s when add (R x V vectors, masks mk). With an epilogue ep
 * (the last store of a tile), that sum then gets the bias and the relu, in
 * registers, with the formulas of k_add and k_relu (tensor/elem.def): the
 * same float ops on the same values as storing the sum and running the two
 * ops after. */
static inline __attribute__((always_inline)) AVX512 void store(const int R, const int V, float *c,
                                                              int64_t ldc, const __mmask16 *mk,
                                                              __m512 s[12][4], bool add,
                                                              const tfe_sgemm_ep *ep) {
    __m512 zero = _mm512_setzero_ps(), bias[4] = {zero, zero, zero, zero};
    if (ep && ep->bn_m) {
        bn_store(R, V, c, ldc, mk, s, add, ep);
        return;
    }
    if (ep)
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) bias[v] = _mm512_maskz_loadu_ps(mk[v], ep->bias + 16 * v);
#pragma GCC unroll 12
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < V; v++) {
            __m512 t = s[r][v];
            if (add) t = _mm512_add_ps(_mm512_maskz_loadu_ps(mk[v], c + r * ldc + 16 * v), t);
            if (ep) {
                t = ep->bias_first ? _mm512_add_ps(bias[v], t) : _mm512_add_ps(t, bias[v]);
                if (ep->relu) {
                    /* x > 0 || x != x ? x : 0 */
                    __mmask16 keep = _mm512_cmp_ps_mask(t, zero, _CMP_GT_OQ) |
                                     _mm512_cmp_ps_mask(t, t, _CMP_UNORD_Q);
                    t = _mm512_maskz_mov_ps(keep, t);
                }
            }
            _mm512_mask_storeu_ps(c + r * ldc + 16 * v, mk[v], t);
        }
}

/* One R x V tile: C rows [0, R), vectors [0, V) (mask mk[v] for vector v).
 * T (a constant where inlined): the running total of the block sums stays
 * in registers (tot), and C is read once (acc) and written once at the end,
 * instead of loaded, added and stored after every block. The adds are the
 * same (total + block sum, in block order), so the bits are too; it needs
 * twice the accumulators, so T tiles have fewer rows (ROWS_T below). Worth
 * it where blocks are short: d/dw's blocks are an output row (8 to 32
 * terms), the 16-channel passes' a filter row (48). */
static inline __attribute__((always_inline)) AVX512 void tile(const int R, const int V, int64_t k,
                                                             const float *a, int64_t ars, int64_t aks,
                                                             const float *b, int64_t ldb, float *c,
                                                             int64_t ldc, bool acc, const __mmask16 *mk,
                                                             int64_t nseg, int64_t segstride,
                                                             int64_t kb, const bool E, const bool T,
                                                             const tfe_sgemm_ep *ep) {
    /* E (a constant where inlined): an epilogue; without one the tile is
     * compiled as if none existed */
    __m512 s[12][4], tot[12][4];
    bool have = acc;     /* C (T: tot) holds the running sum */
    bool summed = false; /* T: a block was added to tot (else C stays as it is) */
    if (T)
#pragma GCC unroll 12
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int v = 0; v < V; v++) tot[r][v] = _mm512_setzero_ps(); /* never read unset */
    if (T && acc)
#pragma GCC unroll 12
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int v = 0; v < V; v++) tot[r][v] = _mm512_maskz_loadu_ps(mk[v], c + r * ldc + 16 * v);
    for (int64_t sg = 0; sg < nseg; sg++) {
        /* row r's element is p[r / 3][(r % 3) * ars]: one base pointer per
         * 3 rows, the rest an index register scaled by 4 or 8, so the
         * 12-row tile needs 4 pointers, not 12 row offsets (those spilled
         * to the stack, reloaded at every k) */
        const float *p[4];
#pragma GCC unroll 4
        for (int i = 0; i < (R + 2) / 3; i++) p[i] = a + sg * segstride + 3 * i * ars;
        for (int64_t k0 = 0; k0 < k; k0 += kb) {
            bool last = E && sg == nseg - 1 && k0 + kb >= k;
            int64_t k1 = k - k0 < kb ? k - k0 : kb;
#pragma GCC unroll 12
            for (int r = 0; r < R; r++)
#pragma GCC unroll 4
                for (int v = 0; v < V; v++) s[r][v] = _mm512_setzero_ps();
            for (int64_t kk = 0; kk < k1; kk++, b += ldb) {
                __m512 bv[4];
#pragma GCC unroll 4
                for (int v = 0; v < V; v++) bv[v] = _mm512_maskz_loadu_ps(mk[v], b + 16 * v);
#pragma GCC unroll 12
                for (int r = 0; r < R; r++) {
                    __m512 av = _mm512_set1_ps(p[r / 3][(r % 3) * ars]);
#pragma GCC unroll 4
                    for (int v = 0; v < V; v++) s[r][v] = _mm512_fmadd_ps(av, bv[v], s[r][v]);
                }
#pragma GCC unroll 4
                for (int i = 0; i < (R + 2) / 3; i++) p[i] += aks; /* only the tile's rows */
            }
            if (T) {
                /* store()'s add: C (here the total) + the block sum */
                summed = true;
#pragma GCC unroll 12
                for (int r = 0; r < R; r++)
#pragma GCC unroll 4
                    for (int v = 0; v < V; v++)
                        tot[r][v] = have ? _mm512_add_ps(tot[r][v], s[r][v]) : s[r][v];
            } else
                store(R, V, c, ldc, mk, s, have, E && last ? ep : NULL);
            have = true;
        }
    }
    if (T && summed) {
        store(R, V, c, ldc, mk, tot, false, E ? ep : NULL);
        return;
    }
    if (!have) {
#pragma GCC unroll 12
        for (int r = 0; r < R; r++)
#pragma GCC unroll 4
            for (int v = 0; v < V; v++) s[r][v] = _mm512_setzero_ps();
        store(R, V, c, ldc, mk, s, false, E ? ep : NULL);
    }
}

/* The rows of one column block of V vectors, R at a time (RMAX a tile). */
#define ROWS(V, RMAX, E, T, SUF, ...)                                                        \
    AVX512 static void rows_v##V##SUF(int64_t m, int64_t k, const float *a, int64_t ars,     \
                                 int64_t aks, const float *b, int64_t ldb, float *c,         \
                                 int64_t ldc, bool acc, const __mmask16 *mk, int64_t nseg,   \
                                 int64_t segstride, int64_t kb, const tfe_sgemm_ep *ep) {    \
        int64_t r0 = 0, mf = m;                                                              \
        /* m = 8q + 6 rows of 2 vectors end in two tiles of 7 rows, not 8 and 6: a          \
         * 6 x 2 tile ran at ~89 GFLOP/s, 7 x 2 at ~97, 8 x 2 at ~100, so rows of         \
         * 14, 22, 30 ran 3-4% faster (benchmarks.md). As many tiles, and no                \
         * element's sum depends on the tiling. */                                           \
        bool split7 = V == 2 && RMAX == 8 && m >= 14 && m % 8 == 6;                          \
        if (split7) mf = m - 14;                                                             \
        for (; r0 + RMAX <= mf; r0 += RMAX)                                                  \
            tile(RMAX, V, k, a + r0 * ars, ars, aks, b, ldb, c + r0 * ldc, ldc, acc, mk,     \
                 nseg, segstride, kb, E, T, ep);                                             \
        if (split7) {                                                                        \
            for (int h = 0; h < 2; h++, r0 += 7)                                             \
                tile(V == 2 ? 7 : 1, V, k, a + r0 * ars, ars, aks, b, ldb, c + r0 * ldc,     \
                     ldc, acc, mk, nseg, segstride, kb, E, T, ep);                           \
            return;                                                                          \
        }                                                                                    \
        const float *ar = a + r0 * ars;                                                      \
        float *cr = c + r0 * ldc;                                                            \
        switch (m - r0) {                                                                    \
            __VA_ARGS__                                                                      \
        default: break;                                                                      \
        }                                                                                    \
    }
#define REM(R, V, E, T) \
    case R: tile(R, V, k, ar, ars, aks, b, ldb, cr, ldc, acc, mk, nseg, segstride, kb, E, T, ep); break;

/* each twice: without an epilogue, and with one (_ep); and again with the
 * totals in registers (_t, _t_ep), in tiles of at most 12 x 1, 7 x 2, 4 x 3
 * and 3 x 4 vectors: s, tot and B's row take 25 to 30 of the 32 registers */
#define ALL_ROWS(E, SUF)                                                                     \
    ROWS(1, 12, E, false, SUF, REM(1, 1, E, false) REM(2, 1, E, false) REM(3, 1, E, false)  \
         REM(4, 1, E, false) REM(5, 1, E, false) REM(6, 1, E, false) REM(7, 1, E, false)     \
         REM(8, 1, E, false) REM(9, 1, E, false) REM(10, 1, E, false) REM(11, 1, E, false))  \
    ROWS(2, 8, E, false, SUF, REM(1, 2, E, false) REM(2, 2, E, false) REM(3, 2, E, false)   \
         REM(4, 2, E, false) REM(5, 2, E, false) REM(6, 2, E, false) REM(7, 2, E, false))    \
    ROWS(3, 6, E, false, SUF, REM(1, 3, E, false) REM(2, 3, E, false) REM(3, 3, E, false)   \
         REM(4, 3, E, false) REM(5, 3, E, false))                                            \
    ROWS(4, 6, E, false, SUF, REM(1, 4, E, false) REM(2, 4, E, false) REM(3, 4, E, false)   \
         REM(4, 4, E, false) REM(5, 4, E, false))
#define ALL_ROWS_T(E, SUF)                                                                   \
    ROWS(1, 12, E, true, SUF, REM(1, 1, E, true) REM(2, 1, E, true) REM(3, 1, E, true)      \
         REM(4, 1, E, true) REM(5, 1, E, true) REM(6, 1, E, true) REM(7, 1, E, true)         \
         REM(8, 1, E, true) REM(9, 1, E, true) REM(10, 1, E, true) REM(11, 1, E, true))      \
    ROWS(2, 7, E, true, SUF, REM(1, 2, E, true) REM(2, 2, E, true) REM(3, 2, E, true)       \
         REM(4, 2, E, true) REM(5, 2, E, true) REM(6, 2, E, true))                           \
    ROWS(3, 4, E, true, SUF, REM(1, 3, E, true) REM(2, 3, E, true) REM(3, 3, E, true))      \
    ROWS(4, 3, E, true, SUF, REM(1, 4, E, true) REM(2, 4, E, true))
ALL_ROWS(false, )
ALL_ROWS(true, _ep)
ALL_ROWS_T(false, _t)
ALL_ROWS_T(true, _t_ep)

/* the rows functions by [totals in registers][epilogue][V - 1] */
typedef void rows_fn(int64_t m, int64_t k, const float *a, int64_t ars, int64_t aks,
                     const float *b, int64_t ldb, float *c, int64_t ldc, bool acc,
                     const __mmask16 *mk, int64_t nseg, int64_t segstride, int64_t kb,
                     const tfe_sgemm_ep *ep);
static rows_fn *const rows_fns[2][2][4] = {
    {{rows_v1, rows_v2, rows_v3, rows_v4}, {rows_v1_ep, rows_v2_ep, rows_v3_ep, rows_v4_ep}},
    {{rows_v1_t, rows_v2_t, rows_v3_t, rows_v4_t},
     {rows_v1_t_ep, rows_v2_t_ep, rows_v3_t_ep, rows_v4_t_ep}},
};

AVX512 void tfe_sgemm_small(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars,
                            int64_t aks, const float *b, int64_t ldb, float *c, int64_t ldc,
                            bool acc) {
    tfe_sgemm_small_seg_ep(m, n, 1, k, 0, SUM_BLOCK, a, ars, aks, b, ldb, c, ldc, acc, NULL);
}

AVX512 void tfe_sgemm_small_ep(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars,
                               int64_t aks, const float *b, int64_t ldb, float *c, int64_t ldc,
                               const tfe_sgemm_ep *ep) {
    tfe_sgemm_small_seg_ep(m, n, 1, k, 0, SUM_BLOCK, a, ars, aks, b, ldb, c, ldc, false, ep);
}

AVX512 void tfe_sgemm_small_seg(int64_t m, int64_t n, int64_t nseg, int64_t seglen,
                                int64_t segstride, int64_t kb, const float *a, int64_t ars,
                                int64_t aks, const float *b, int64_t ldb, float *c, int64_t ldc,
                                bool acc) {
    tfe_sgemm_small_seg_ep(m, n, nseg, seglen, segstride, kb, a, ars, aks, b, ldb, c, ldc, acc,
                           NULL);
}

AVX512 void tfe_sgemm_small_seg_ep(int64_t m, int64_t n, int64_t nseg, int64_t seglen,
                                   int64_t segstride, int64_t kb, const float *a, int64_t ars,
                                   int64_t aks, const float *b, int64_t ldb, float *c,
                                   int64_t ldc, bool acc, const tfe_sgemm_ep *ep) {
    int64_t k = seglen;
    if (kb < 1) kb = 1;
    if (m <= 0 || n <= 0) return;
    /* column blocks of up to 64; B's block stays in cache over all rows */
    for (int64_t j0 = 0; j0 < n; j0 += 64) {
        int64_t w = n - j0 < 64 ? n - j0 : 64;
        int V = (int)((w + 15) / 16);
        __mmask16 mk[4];
        for (int v = 0; v < 4; v++) {
            int64_t left = w - 16 * v;
            mk[v] = left >= 16 ? (__mmask16)0xFFFF : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
        }
        const float *bj = b + j0;
        float *cj = c + j0;
        /* the epilogue's per-column vectors for this column block */
        tfe_sgemm_ep epj, *e = NULL;
        if (ep) {
            epj = *ep;
            const float **vs[5] = {&epj.bias, &epj.bn_m, &epj.bn_rs, &epj.bn_g, &epj.bn_b};
            for (int i = 0; i < 5; i++)
                if (*vs[i]) *vs[i] += j0;
            e = &epj;
        }
        /* the totals in registers where a tile's blocks are short (at
         * most 48 terms: the stores of C cost more than the smaller tile)
         * and the smaller tile does not leave a short one over m (a
         * 16-row C in tiles of 7, 7 and 2 ran 1.8x slower) */
        int64_t kbe = kb < k ? kb : k;
        bool t = kbe <= 48 && (nseg > 1 || k > kb) && (V == 1 || m >= 48);
        rows_fns[t][e != NULL][V - 1](m, k, a, ars, aks, bj, ldb, cj, ldc, acc, mk, nseg,
                                      segstride, kb, e);
    }
}

/* The register tiles a tfe_sgemm_small_seg call runs (the choice above). */
int64_t tfe_sgemm_small_tiles(int64_t m, int64_t n, int64_t nseg, int64_t seglen, int64_t kb) {
    static const int64_t rmax[2][4] = {{12, 8, 6, 6}, {12, 7, 4, 3}}; /* ALL_ROWS(_T) */
    int64_t tiles = 0, k = seglen;
    if (kb < 1) kb = 1;
    if (m <= 0 || n <= 0) return 0;
    for (int64_t j0 = 0; j0 < n; j0 += 64) {
        int64_t w = n - j0 < 64 ? n - j0 : 64, V = (w + 15) / 16, kbe = kb < k ? kb : k;
        bool t = kbe <= 48 && (nseg > 1 || k > kb) && (V == 1 || m >= 48);
        tiles += (m + rmax[t][V - 1] - 1) / rmax[t][V - 1];
    }
    return tiles;
}

#else

bool tfe_sgemm_small_ok(void) { return false; }

void tfe_sgemm_small(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars, int64_t aks,
                     const float *b, int64_t ldb, float *c, int64_t ldc, bool acc) {
    (void)m, (void)n, (void)k, (void)a, (void)ars, (void)aks, (void)b, (void)ldb, (void)c,
        (void)ldc, (void)acc;
}

void tfe_sgemm_small_seg(int64_t m, int64_t n, int64_t nseg, int64_t seglen, int64_t segstride,
                         int64_t kb, const float *a, int64_t ars, int64_t aks, const float *b,
                         int64_t ldb, float *c, int64_t ldc, bool acc) {
    (void)m, (void)n, (void)nseg, (void)seglen, (void)segstride, (void)kb, (void)a, (void)ars, (void)aks,
        (void)b, (void)ldb, (void)c, (void)ldc, (void)acc;
}

void tfe_sgemm_small_ep(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars, int64_t aks,
                        const float *b, int64_t ldb, float *c, int64_t ldc, const tfe_sgemm_ep *ep) {
    (void)m, (void)n, (void)k, (void)a, (void)ars, (void)aks, (void)b, (void)ldb, (void)c,
        (void)ldc, (void)ep;
}

int64_t tfe_sgemm_small_tiles(int64_t m, int64_t n, int64_t nseg, int64_t seglen, int64_t kb) {
    (void)m, (void)n, (void)nseg, (void)seglen, (void)kb;
    return 0;
}

void tfe_sgemm_small_seg_ep(int64_t m, int64_t n, int64_t nseg, int64_t seglen, int64_t segstride,
                            int64_t kb, const float *a, int64_t ars, int64_t aks, const float *b,
                            int64_t ldb, float *c, int64_t ldc, bool acc, const tfe_sgemm_ep *ep) {
    (void)m, (void)n, (void)nseg, (void)seglen, (void)segstride, (void)kb, (void)a, (void)ars,
        (void)aks, (void)b, (void)ldb, (void)c, (void)ldc, (void)acc, (void)ep;
}

#endif
