/* alloc.c — the caching device allocator: blocks are rounded up to a size
 * class (quarter steps between powers of two: at most 25% waste) and kept on
 * a free list per device and class when released, so the eager hot path
 * calls CUDA's allocator only while the working set grows. When CUDA runs out
 * of memory, the cache is returned and the allocation tried once more.
 *
 * Blocks are CUDA managed memory, prefetched to their device: kernels see
 * device memory, and host code that reads a tensor outside the dispatcher
 * (printing, item(), staged plans' CPU kernels) still reads the right bytes,
 * since every GPU op finishes before it returns (gpu/backend.c). */
#include <stdio.h>
#include <stdlib.h>

#include "gpu/gpu.h"
#include "util/xalloc.h"

enum { NCLASSES = 4 * 48, MAXDEV = 16 };

typedef struct block { void *p; struct block *next; } block;
static block *free_lists[MAXDEV][NCLASSES];
static size_t cached_bytes[MAXDEV];

/* class of n bytes and its size: 256 B minimum, then 2^k * (4+q)/4 */
static int size_class(size_t n, size_t *size) {
    if (n <= 256) {
        *size = 256;
        return 0;
    }
    int k = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* 2^k < n <= 2^(k+1) */
    size_t base = (size_t)1 << k;
    int q = (int)((n - base + (base / 4) - 1) / (base / 4)); /* 1..4 */
    *size = base + (size_t)q * (base / 4);
    return (k - 8) * 4 + q;
}

void *gpu_alloc(int dev, size_t nbytes) {
    size_t sz;
    int cls = size_class(nbytes, &sz);
    if (dev >= MAXDEV || cls >= NCLASSES) {
        tfe_error_set("gpu:%d: cannot allocate %zu bytes", dev - 1, nbytes);
        return NULL;
    }
    block *b = free_lists[dev][cls];
    if (b) {
        free_lists[dev][cls] = b->next;
        cached_bytes[dev] -= sz;
        void *p = b->p;
        free(b);
        return p;
    }
    gpu_state *g = gpu_use(dev);
    if (!g) return NULL;
    void *p = NULL;
    cudaError_t e = cudaMallocManaged(&p, sz, cudaMemAttachGlobal);
    if (e == cudaErrorMemoryAllocation && cached_bytes[dev]) {
        cudaGetLastError();
        gpu_alloc_trim(dev);
        e = cudaMallocManaged(&p, sz, cudaMemAttachGlobal);
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        char what[64];
        snprintf(what, sizeof what, "allocating %zu bytes", sz);
        gpu_check(e, what, "cudaMallocManaged", dev);
        return NULL;
    }
    /* first touch on the device, not by page faults; a hint only */
#if CUDART_VERSION >= 13000
    struct cudaMemLocation loc = {.type = cudaMemLocationTypeDevice, .id = g->ordinal};
    if (cudaMemPrefetchAsync(p, sz, loc, 0, g->stream) != cudaSuccess) cudaGetLastError();
#else
    if (cudaMemPrefetchAsync(p, sz, g->ordinal, g->stream) != cudaSuccess) cudaGetLastError();
#endif
    return p;
}

void gpu_free(int dev, void *p, size_t nbytes) {
    size_t sz;
    int cls = size_class(nbytes, &sz);
    block *b = try_malloc(sizeof *b);
    if (!b || dev >= MAXDEV) { /* no room to remember it: give it back */
        free(b);
        cudaFree(p);
        return;
    }
    b->p = p;
    b->next = free_lists[dev][cls];
    free_lists[dev][cls] = b;
    cached_bytes[dev] += sz;
}

void gpu_alloc_trim(int dev) {
    if (dev >= MAXDEV || !gpu_use(dev)) return;
    for (int c = 0; c < NCLASSES; c++) {
        while (free_lists[dev][c]) {
            block *b = free_lists[dev][c];
            free_lists[dev][c] = b->next;
            cudaFree(b->p);
            free(b);
        }
    }
    cached_bytes[dev] = 0;
}
