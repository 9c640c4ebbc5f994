/* base.h — the helpers of tensor/'s base layer (tensor, dtype, alloc,
 * device, print), shared with the CPU kernels (tensor/kernels.h) and the
 * device backends (gpu/): element sizes and access, dtype conversions, op
 * names, axes, convolution geometry, the interrupt poll. It names no
 * kernel, so a backend includes it instead of the CPU kernels' private
 * header. */
#ifndef TFE_BASE_H
#define TFE_BASE_H

#include <stdbool.h>
#include <stdint.h>

#include "tensor/ops.h"
#include "tensor/tensor.h"

/* -1 with "interrupted" set when Ctrl-C was pressed; poll between chunks. */
int kn_poll(void);

/* dtype_size without a call (hot paths) */
static inline size_t kn_esz(tfe_dtype dt) {
    static const uint8_t sizes[TFE_NDTYPES] = {1, 4, 8, 4, 8, 2, 2};
    return sizes[dt];
}

static inline const char *kn_opname(const tfe_opcall *c) { return tfe_ops[c->op].name; }

/* Normalise a possibly negative axis for a tensor of rank `rank`.
 * Error: "sum: axis 2 is out of range for rank 2". */
int kn_axis(const char *op, int64_t axis, int rank, int *out);
/* The reduced axes of a reduction call as a bit mask (naxes -1: all axes);
 * a repeated axis is an error. */
int kn_axes_mask(const char *op, const tfe_attrs *at, int rank, unsigned *mask);

/* TensorFlow's output size and leading pad of one spatial axis: input size
 * in, kernel k, dilation d, stride s, "same" or "valid"; false when a
 * "valid" window does not fit. */
bool kn_conv_out_size(int64_t in, int64_t k, int64_t d, int64_t s, bool same, int64_t *out,
                      int64_t *pad);

/* ---- element access ----------------------------------------------------- */
/* Conversions follow tfe's cast rules (see k_cast in kernels_elem.c):
 * float -> int truncates toward zero, NaN -> 0, out of range saturates;
 * anything -> bool is "!= 0" (NaN -> true). float16/bfloat16 are read/written
 * as their bit patterns converted (round to nearest even). */
double kn_half_to_f64(uint16_t h);
double kn_bf16_to_f64(uint16_t h);
uint16_t kn_f64_to_half(double v);
uint16_t kn_f64_to_bf16(double v);

static inline int64_t kn_f64_to_i64(double v) {
    if (v != v) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)v;
}
static inline int32_t kn_f64_to_i32(double v) {
    if (v != v) return 0;
    if (v >= 2147483647.0) return INT32_MAX;
    if (v <= -2147483648.0) return INT32_MIN;
    return (int32_t)v;
}

static inline double kn_load_f64(const char *p, tfe_dtype dt) {
    switch (dt) {
    case TFE_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
    case TFE_INT32: return *(const int32_t *)p;
    case TFE_INT64: return (double)*(const int64_t *)p;
    case TFE_FLOAT32: return *(const float *)p;
    case TFE_FLOAT64: return *(const double *)p;
    case TFE_FLOAT16: return kn_half_to_f64(*(const uint16_t *)p);
    case TFE_BFLOAT16: return kn_bf16_to_f64(*(const uint16_t *)p);
    case TFE_NDTYPES:
    default: return 0;
    }
}
static inline int64_t kn_load_i64(const char *p, tfe_dtype dt) {
    switch (dt) {
    case TFE_BOOL: return *(const uint8_t *)p ? 1 : 0;
    case TFE_INT32: return *(const int32_t *)p;
    case TFE_INT64: return *(const int64_t *)p;
    case TFE_FLOAT32: case TFE_FLOAT64: case TFE_FLOAT16: case TFE_BFLOAT16: case TFE_NDTYPES:
    default: return kn_f64_to_i64(kn_load_f64(p, dt));
    }
}
static inline void kn_store_f64(char *p, tfe_dtype dt, double v) {
    switch (dt) {
    case TFE_BOOL: *(uint8_t *)p = v != 0; break;
    case TFE_INT32: *(int32_t *)p = kn_f64_to_i32(v); break;
    case TFE_INT64: *(int64_t *)p = kn_f64_to_i64(v); break;
    case TFE_FLOAT32: *(float *)p = (float)v; break;
    case TFE_FLOAT64: *(double *)p = v; break;
    case TFE_FLOAT16: *(uint16_t *)p = kn_f64_to_half(v); break;
    case TFE_BFLOAT16: *(uint16_t *)p = kn_f64_to_bf16(v); break;
    case TFE_NDTYPES:
    default: break;
    }
}
static inline void kn_store_i64(char *p, tfe_dtype dt, int64_t v) {
    switch (dt) {
    case TFE_BOOL: *(uint8_t *)p = v != 0; break;
    case TFE_INT32: *(int32_t *)p = (int32_t)v; break;
    case TFE_INT64: *(int64_t *)p = v; break;
    case TFE_FLOAT32: case TFE_FLOAT64: case TFE_FLOAT16: case TFE_BFLOAT16: case TFE_NDTYPES:
    default: kn_store_f64(p, dt, (double)v); break;
    }
}

/* Work below KN_GRAIN*2 elements runs inline on the calling thread. */
#define KN_GRAIN 32768
/* Iterators work on up to this many (collapsed) dimensions: tile views an
 * output of rank r as 2r dimensions. */
#define KN_MAXDIM (2 * TFE_MAX_RANK)
#define KN_MAXOPS 4

/* ---- broadcast strided iteration ------------------------------------------
 * Operands are (base pointer, byte strides over the iteration shape). The
 * iterator collapses dimensions that are contiguous for every operand and
 * yields inner runs: n elements, operand k at it->ptr[k] with byte step
 * it->inner[k]. Typical use (operand 0 is the fresh contiguous output):
 *
 *     kn_iter it;
 *     kn_iter_init(&it, 3, base, strides, rank, shape);
 *     kn_iter_seek(&it, begin);
 *     for (int64_t pos = begin; pos < end;) {
 *         int64_t n = kn_iter_run(&it, end - pos);
 *         ... loop over it.ptr[k] + i * it.inner[k], i < n ...
 *         kn_iter_advance(&it, n); pos += n;
 *     }
 */
typedef struct kn_iter {
    int nops, rank;                        /* rank >= 1 after collapsing */
    int64_t shape[KN_MAXDIM];
    int64_t strides[KN_MAXOPS][KN_MAXDIM];
    char *base[KN_MAXOPS];
    int64_t idx[KN_MAXDIM];
    char *ptr[KN_MAXOPS];
    int64_t inner[KN_MAXOPS];              /* == strides[k][rank-1] */
} kn_iter;

/* Strides of t broadcast (right-aligned, NumPy rules) to shape: 0 on the
 * broadcast axes. The caller has checked that t broadcasts to shape. */
void kn_bcast_strides(const tfe_tensor *t, int rank, const int64_t *shape, int64_t *strides);
void kn_iter_init(kn_iter *it, int nops, char *const *base, int64_t (*strides)[KN_MAXDIM],
                  int rank, const int64_t *shape);
void kn_iter_seek(kn_iter *it, int64_t flat);
static inline int64_t kn_iter_run(const kn_iter *it, int64_t remaining) {
    int64_t n = it->shape[it->rank - 1] - it->idx[it->rank - 1];
    return n < remaining ? n : remaining;
}
void kn_iter_advance(kn_iter *it, int64_t n);

/* Convenience: call fn over all elements of shape in row-major order, in
 * inner runs (p[k]: operand pointers, s[k]: their byte steps). Operand k is
 * ts[k] broadcast to shape (ts[0] is usually the output). Runs in parallel
 * chunks when the element count is large (fn must then be thread-safe and
 * must not allocate). Returns 0, or -1 if interrupted. */
typedef void (*kn_loop_fn)(int64_t n, char **p, const int64_t *s, void *ctx);
int kn_foreach(int nops, tfe_tensor *const *ts, int rank, const int64_t *shape, kn_loop_fn fn,
               void *ctx);
/* The same over raw operands (strides[k] given over `shape`). */
int kn_foreach_raw(int nops, char *const *base, int64_t (*strides)[KN_MAXDIM], int rank,
                   const int64_t *shape, kn_loop_fn fn, void *ctx);

/* ---- copies --------------------------------------------------------------- */
/* dst[...] = src broadcast to dst's shape, converting dtype by the cast rules.
 * dst may be any strided view (e.g. a slice of a fresh output); it must not
 * overlap src. Returns 0 or -1 (interrupted). */
int kn_copy_into(tfe_tensor *dst, const tfe_tensor *src);
/* Same-dtype strided copy over raw operands: base[0]/strides[0] destination,
 * base[1]/strides[1] source (stride 0 repeats). */
int kn_copy_raw(tfe_dtype dt, char *const *base, int64_t (*strides)[KN_MAXDIM], int rank,
                const int64_t *shape);
/* t itself (incref'd) when it already is contiguous of dtype dt, else a new
 * contiguous converted copy. NULL + error on failure. */
tfe_tensor *kn_contig_as(tfe_tensor *t, tfe_dtype dt);
#endif
