/* test_sgemm_small.c — tfe_sgemm_small and tfe_sgemm_small_seg
 * (tensor/sgemm_small.c) against a scalar reference, bit for bit: blocks of
 * 64 (or the given) k, restarting at each segment, summed from zero in k order with fused
 * multiply-adds, the block sums added in order to C or to the first; both
 * strides of A, every tile remainder, and nothing written past n columns.
 * Skipped without AVX-512. */
#include <math.h>
#include <string.h>

#include "tensor/sgemm_small.h"
#include "tests/unit/check.h"

static unsigned rng = 12345;
static unsigned next(void) {
    rng = rng * 1103515245u + 12345u;
    return rng >> 8;
}
static float rnd(void) { return (float)(next() & 0xFFFF) / 65536.0f - 0.5f; }

static float ref(const float *a, int64_t ars, int64_t aks, int nseg, int seglen, int64_t segstride,
                 int kb, const float *b, int ldb, int r, int j, float c0, int acc) {
    float tot = c0;
    int have = acc;
    for (int sg = 0; sg < nseg; sg++)
        for (int k0 = 0; k0 < seglen; k0 += kb) {
            float s = 0;
            for (int kk = k0; kk < seglen && kk < k0 + kb; kk++)
                s = fmaf(a[r * ars + sg * segstride + kk * aks], b[(sg * seglen + kk) * ldb + j], s);
            tot = have ? tot + s : s;
            have = 1;
        }
    return have ? tot : 0;
}

int main(void) {
    if (!tfe_sgemm_small_ok()) return 77;
    for (int it = 0; it < 400; it++) {
        int m = 1 + (int)(next() % 40), n = 1 + (int)(next() % 150), seglen = (int)(next() % 150);
        int seg = it % 4 == 3, nseg = seg ? 1 + (int)(next() % 3) : 1;
        int tr = seg ? 0 : it & 1, acc = (it >> 1) & 1, kb = seg ? 1 + (int)(next() % 80) : 64;
        /* A: rows (tr: columns) of lda; segments segstride apart */
        int lda = (tr ? m : seglen) + it % 3, ldb = n + it % 2, ldc = n + 1 + it % 3;
        int64_t segstride = seg ? (int64_t)m * lda + 5 : 0;
        int64_t ars = tr ? 1 : lda, aks = tr ? lda : 1;
        size_t na = (size_t)(tr ? seglen : m) * lda + (size_t)segstride * nseg + 1;
        size_t nb = (size_t)nseg * seglen * ldb + 1, nc = (size_t)m * ldc;
        float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b);
        float *c = malloc(nc * sizeof *c), *c0 = malloc(nc * sizeof *c0);
        REQUIRE(a && b && c && c0, "out of memory");
        for (size_t i = 0; i < na; i++) a[i] = rnd();
        for (size_t i = 0; i < nb; i++) b[i] = rnd();
        for (size_t i = 0; i < nc; i++) c[i] = c0[i] = rnd();
        if (seg)
            tfe_sgemm_small_seg(m, n, nseg, seglen, segstride, kb, a, ars, aks, b, ldb, c, ldc, acc);
        else
            tfe_sgemm_small(m, n, seglen, a, ars, aks, b, ldb, c, ldc, acc);
        int bad = 0;
        for (int r = 0; r < m; r++)
            for (int j = 0; j < ldc; j++) {
                float want = c0[r * ldc + j];
                if (j < n)
                    want = ref(a, ars, aks, nseg, seglen, segstride, kb, b, ldb, r, j, want, acc);
                if (memcmp(&c[r * ldc + j], &want, sizeof want) != 0) bad++;
            }
        CHECK(bad == 0, "m %d n %d nseg %d seglen %d trans %d acc %d: %d elements differ", m, n,
              nseg, seglen, tr, acc, bad);
        free(a);
        free(b);
        free(c);
        free(c0);
    }
    return check_done("test_sgemm_small");
}
