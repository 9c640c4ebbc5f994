/* alloc.c — the CPU caching allocator: size classes (four per power of two
 * above 256 bytes), 64-byte aligned blocks, per-class free lists.
 * Not thread-safe: only the dispatching thread allocates (see kernels.h). */
#include <stdlib.h>

#include "tensor/tensor.h"
#include "util/xalloc.h"

#define NCLASSES 192
/* Cached blocks beyond this are returned to the system on free. */
#define CACHE_LIMIT ((size_t)2 << 30)

typedef struct block { struct block *next; } block;

static block *free_lists[NCLASSES];
static tfe_alloc_stats st;

/* Size class of n and its rounded size: 64, 128, 192, 256, then four
 * classes per doubling (320, 384, 448, 512, 640, ...). */
static inline int size_class(size_t n, size_t *rounded) {
    if (n <= 256) {
        size_t c = n ? (n + 63) >> 6 : 1;
        *rounded = c << 6;
        return (int)c - 1;
    }
    int e = 63 - __builtin_clzll((unsigned long long)(n - 1)); /* 2^e < n <= 2^(e+1) */
    size_t step = (size_t)1 << (e - 2);
    size_t q = (n + step - 1) / step; /* 5..8 */
    *rounded = q * step;
    return 4 + (e - 8) * 4 + (int)(q - 5);
}

/* Optional cap on live tensor bytes (0: none). The fuzzers set it so that a
 * program asking for a huge tensor gets an error instead of taking the
 * machine's memory; TFE_MAX_ALLOC_BYTES sets it for the tfe command. */
static size_t alloc_limit;
static int alloc_limit_read;

void tfe_alloc_set_limit(size_t nbytes) {
    alloc_limit = nbytes;
    alloc_limit_read = 1;
}

size_t tfe_alloc_get_limit(void) {
    if (!alloc_limit_read) {
        const char *e = getenv("TFE_MAX_ALLOC_BYTES");
        alloc_limit = e ? (size_t)strtoull(e, NULL, 10) : 0;
        alloc_limit_read = 1;
    }
    return alloc_limit;
}

/* The system has no memory for a tensor's data. A large tensor is an error
 * the program survives (the REPL keeps its bindings); a small one (a scalar,
 * a short vector) is treated like the interpreter's own bookkeeping: when
 * 4 KiB cannot be found, nothing can be reported reliably, so tfe exits
 * (xalloc.h). This keeps the error paths where they matter: the ops whose
 * outputs are big. */
#define SMALL_TENSOR_BYTES 4096

static void *no_memory(size_t nbytes) {
    if (nbytes <= SMALL_TENSOR_BYTES) xalloc_die();
    tfe_error_set("out of memory allocating %zu bytes", nbytes);
    return NULL;
}

/* The checks before any allocation: the TFE_MAX_ALLOC_BYTES cap (on
 * `counted`, what the block will count as live), a size no system has, and
 * injected faults. true: refused, the error set. */
static bool alloc_refused(size_t nbytes, size_t counted) {
    size_t limit = tfe_alloc_get_limit();
    if (limit && (counted > limit || st.live_bytes > limit - counted)) {
        tfe_error_set("out of memory allocating %zu bytes (TFE_MAX_ALLOC_BYTES is %zu)", nbytes, limit);
        return true;
    }
    if (nbytes > ((size_t)1 << 62)) { /* size_class would overflow; no system has this */
        tfe_error_set("out of memory allocating %zu bytes", nbytes);
        return true;
    }
    if (alloc_fault() || (nbytes > SMALL_TENSOR_BYTES && alloc_fault_large())) return !no_memory(nbytes);
    return false;
}

/* A block of `rounded` bytes is live now. */
static void count_live(size_t rounded) {
    st.live_bytes += rounded;
    st.total_bytes += rounded;
    if (st.live_bytes > st.peak_bytes) st.peak_bytes = st.live_bytes;
}

void *tfe_alloc(size_t nbytes) {
    if (alloc_refused(nbytes, nbytes)) return NULL;
    size_t rounded;
    int c = size_class(nbytes, &rounded);
    block *b = c < NCLASSES ? free_lists[c] : NULL;
    if (b) {
        free_lists[c] = b->next;
        st.cached_bytes -= rounded;
        st.n_hits++;
    } else {
        b = aligned_alloc(64, rounded);
        if (!b) {
            tfe_alloc_trim();
            b = aligned_alloc(64, rounded);
            if (!b) return no_memory(nbytes);
        }
        st.n_malloc++;
    }
    count_live(rounded);
    return b;
}

void tfe_free(void *p, size_t nbytes) {
    if (!p) return;
    size_t rounded;
    int c = size_class(nbytes, &rounded);
    st.live_bytes -= rounded;
    if (c >= NCLASSES || st.cached_bytes + rounded > CACHE_LIMIT) {
        free(p);
        return;
    }
    block *b = p;
    b->next = free_lists[c];
    free_lists[c] = b;
    st.cached_bytes += rounded;
}

void *tfe_alloc_exact(size_t nbytes) {
    /* (a size past 2^62 is refused before its rounding could wrap) */
    size_t rounded = nbytes > ((size_t)1 << 62) ? nbytes : nbytes ? (nbytes + 63) & ~(size_t)63 : 64;
    if (alloc_refused(nbytes, rounded)) return NULL;
    void *b = aligned_alloc(64, rounded);
    if (!b) {
        tfe_alloc_trim();
        if (!(b = aligned_alloc(64, rounded))) return no_memory(nbytes);
    }
    st.n_malloc++;
    count_live(rounded);
    return b;
}

void tfe_free_exact(void *p, size_t nbytes) {
    if (!p) return;
    st.live_bytes -= nbytes ? (nbytes + 63) & ~(size_t)63 : 64;
    free(p);
}

void tfe_alloc_trim(void) {
    for (int c = 0; c < NCLASSES; c++) {
        block *b = free_lists[c];
        while (b) {
            block *n = b->next;
            free(b);
            b = n;
        }
        free_lists[c] = NULL;
    }
    st.cached_bytes = 0;
}

tfe_alloc_stats tfe_alloc_get_stats(void) { return st; }

void tfe_alloc_reset_peak(void) { st.peak_bytes = st.live_bytes; }
