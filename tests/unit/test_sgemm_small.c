/* test_sgemm_small.c — tfe_sgemm_small (tensor/sgemm_small.c) against a
 * scalar reference, bit for bit: each element is the k-ordered fused sum from
 * zero, added to C when accumulating; both strides of A, every tile
 * remainder, and nothing written past n columns. Skipped without AVX-512. */
#include <math.h>
#include <string.h>

#include "tensor/sgemm_small.h"
#include "tests/unit/check.h"

static unsigned rng = 12345;
static float rnd(void) {
    rng = rng * 1103515245u + 12345u;
    return (float)((rng >> 8) & 0xFFFF) / 65536.0f - 0.5f;
}

int main(void) {
    if (!tfe_sgemm_small_ok()) return 77;
    for (int it = 0; it < 400; it++) {
        int m = 1 + (int)(rng % 40), n = 1 + (int)((rng >> 7) % 150), k = (int)((rng >> 3) % 40);
        rnd();
        int tr = it & 1, acc = (it >> 1) & 1;
        int lda = (tr ? m : k) + it % 3, ldb = n + it % 2, ldc = n + 1 + it % 3;
        size_t na = (size_t)(tr ? k : m) * lda + 1, nb = (size_t)k * ldb + 1, nc = (size_t)m * ldc;
        float *a = malloc(na * sizeof *a), *b = malloc(nb * sizeof *b);
        float *c = malloc(nc * sizeof *c), *c0 = malloc(nc * sizeof *c0);
        REQUIRE(a && b && c && c0, "out of memory");
        for (size_t i = 0; i < na; i++) a[i] = rnd();
        for (size_t i = 0; i < nb; i++) b[i] = rnd();
        for (size_t i = 0; i < nc; i++) c[i] = c0[i] = rnd();
        tfe_sgemm_small(m, n, k, a, tr ? 1 : lda, tr ? lda : 1, b, ldb, c, ldc, acc);
        int bad = 0;
        for (int r = 0; r < m; r++)
            for (int j = 0; j < ldc; j++) {
                float want = c0[r * ldc + j];
                if (j < n) {
                    float s = 0;
                    for (int q = 0; q < k; q++)
                        s = fmaf(tr ? a[q * lda + r] : a[r * lda + q], b[q * ldb + j], s);
                    want = acc ? want + s : s;
                }
                if (memcmp(&c[r * ldc + j], &want, sizeof want) != 0) bad++;
            }
        CHECK(bad == 0, "m %d n %d k %d trans %d acc %d: %d elements differ", m, n, k, tr, acc, bad);
        free(a);
        free(b);
        free(c);
        free(c0);
    }
    return check_done("test_sgemm_small");
}
