/* test_alloc.c — the caching allocator: alignment, reuse of freed blocks of
 * the same size class, statistics, trimming; and tensor storage reuse. */
#include <stdint.h>

#include "tensor/tensor.h"
#include "tests/unit/check.h"

int main(void) {
    tfe_alloc_stats s0 = tfe_alloc_get_stats();

    /* alignment over a range of sizes, including 0 */
    size_t sizes[] = {0, 1, 7, 64, 65, 255, 256, 257, 1000, 4096, 100000, 3 << 20};
    void *ps[12];
    for (int i = 0; i < 12; i++) {
        ps[i] = tfe_alloc(sizes[i]);
        REQUIRE(ps[i] != NULL, "alloc of %zu bytes failed", sizes[i]);
        CHECK(((uintptr_t)ps[i] & 63) == 0, "block of %zu bytes not 64-byte aligned", sizes[i]);
        /* the whole requested range must be writable */
        for (size_t k = 0; k < sizes[i]; k++) ((char *)ps[i])[k] = (char)k;
    }
    tfe_alloc_stats s1 = tfe_alloc_get_stats();
    CHECK(s1.live_bytes > s0.live_bytes, "live bytes did not grow");
    CHECK(s1.peak_bytes >= s1.live_bytes, "peak below live");
    for (int i = 0; i < 12; i++) tfe_free(ps[i], sizes[i]);
    tfe_alloc_stats s2 = tfe_alloc_get_stats();
    CHECK(s2.live_bytes == s0.live_bytes, "live bytes %zu after freeing all, expected %zu",
          s2.live_bytes, s0.live_bytes);
    CHECK(s2.cached_bytes > 0, "freed blocks were not cached");

    /* reuse: the same size class comes back without a new malloc */
    void *a = tfe_alloc(1000);
    tfe_free(a, 1000);
    size_t mallocs = tfe_alloc_get_stats().n_malloc, hits = tfe_alloc_get_stats().n_hits;
    void *b = tfe_alloc(990); /* same class as 1000 (1024) */
    CHECK(b == a, "a freed block of the same class was not reused");
    CHECK(tfe_alloc_get_stats().n_malloc == mallocs, "reuse called malloc");
    CHECK(tfe_alloc_get_stats().n_hits == hits + 1, "cache hit not counted");
    tfe_free(b, 990);

    /* tensors: a loop of create/release does not grow memory */
    int64_t shape[2] = {16, 16};
    tfe_tensor *t = tensor_zeros(TFE_FLOAT32, 2, shape);
    tensor_decref(t);
    mallocs = tfe_alloc_get_stats().n_malloc;
    for (int i = 0; i < 1000; i++) {
        t = tensor_new(TFE_FLOAT32, 2, shape);
        REQUIRE(t, "tensor_new failed: %s", tfe_error_msg());
        tensor_decref(t);
    }
    CHECK(tfe_alloc_get_stats().n_malloc == mallocs, "tensor loop called malloc %zu times",
          tfe_alloc_get_stats().n_malloc - mallocs);
    t = tensor_zeros(TFE_INT64, 2, shape);
    for (int i = 0; i < 256; i++) CHECK(tensor_get_i64(t, i) == 0, "zeros not zero at %d", i);
    tensor_decref(t);

    /* trim returns the cache */
    tfe_alloc_trim();
    CHECK(tfe_alloc_get_stats().cached_bytes == 0, "trim left %zu cached bytes",
          tfe_alloc_get_stats().cached_bytes);
    CHECK(tfe_alloc_get_stats().live_bytes == s0.live_bytes, "trim changed live bytes");
    return check_done("test_alloc");
}
