/* copy.c — broadcast strided iteration and dtype-converting copies: the
 * base layer's (tensor/base.h), which contiguous(), device copies and the
 * CPU kernels all use. Conversions follow the cast rules (base.h); the typed
 * loops are vectorised at -O3. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include <string.h>

#include "tensor/base.h"

typedef uint8_t tbool;

/* ---- iteration ------------------------------------------------------------- */
void kn_bcast_strides(const tfe_tensor *t, int rank, const int64_t *shape, int64_t *strides) {
    int d = rank - t->rank;
    for (int i = 0; i < rank; i++) {
        int j = i - d;
        strides[i] = j < 0 || t->shape[j] == 1 ? 0 : t->strides[j];
    }
}

void kn_iter_init(kn_iter *it, int nops, char *const *base, int64_t (*strides)[KN_MAXDIM], int rank,
                  const int64_t *shape) {
    int r = 0;
    it->nops = nops;
    for (int k = 0; k < nops; k++) it->base[k] = base[k];
    for (int i = 0; i < rank; i++) {
        if (shape[i] == 1) continue;
        /* merge axis i into the previous kept axis when contiguous for all */
        bool merge = r > 0;
        for (int k = 0; merge && k < nops; k++)
            merge = strides[k][i] * shape[i] == it->strides[k][r - 1];
        if (merge) {
            it->shape[r - 1] *= shape[i];
            for (int k = 0; k < nops; k++) it->strides[k][r - 1] = strides[k][i];
        } else {
            it->shape[r] = shape[i];
            for (int k = 0; k < nops; k++) it->strides[k][r] = strides[k][i];
            r++;
        }
    }
    if (r == 0) {
        it->shape[0] = 1;
        for (int k = 0; k < nops; k++) it->strides[k][0] = 0;
        r = 1;
    }
    it->rank = r;
    for (int k = 0; k < nops; k++) it->inner[k] = it->strides[k][r - 1];
    kn_iter_seek(it, 0);
}

void kn_iter_seek(kn_iter *it, int64_t flat) {
    for (int k = 0; k < it->nops; k++) it->ptr[k] = it->base[k];
    for (int i = it->rank - 1; i >= 0; i--) {
        int64_t d = it->shape[i], q = d ? flat % d : 0;
        it->idx[i] = q;
        flat = d ? flat / d : 0;
        for (int k = 0; k < it->nops; k++) it->ptr[k] += q * it->strides[k][i];
    }
}

void kn_iter_advance(kn_iter *it, int64_t n) {
    int i = it->rank - 1;
    it->idx[i] += n;
    for (int k = 0; k < it->nops; k++) it->ptr[k] += n * it->strides[k][i];
    while (it->idx[i] >= it->shape[i] && i > 0) {
        for (int k = 0; k < it->nops; k++) it->ptr[k] -= it->idx[i] * it->strides[k][i];
        it->idx[i] = 0;
        i--;
        it->idx[i]++;
        for (int k = 0; k < it->nops; k++) it->ptr[k] += it->strides[k][i];
    }
}

typedef struct foreach_ctx {
    const kn_iter *it;
    kn_loop_fn fn;
    void *ctx;
} foreach_ctx;

static void foreach_range(int64_t begin, int64_t end, void *vctx) {
    foreach_ctx *fc = vctx;
    kn_iter it = *fc->it;
    kn_iter_seek(&it, begin);
    int r = it.rank;
    for (int64_t pos = begin; pos < end;) {
        /* at the start of an inner run with whole runs ahead along the
         * next axis: those runs without the iterator's carry between them
         * (the same calls in the same order; the per-run carry cost more
         * than short runs' work, e.g. a concat along 8 or 16 channels) */
        if (r >= 2 && it.idx[r - 1] == 0) {
            int64_t inner = it.shape[r - 1], rows = it.shape[r - 2] - it.idx[r - 2];
            if (rows > (end - pos) / inner) rows = (end - pos) / inner;
            if (rows > 1) {
                char *p[KN_MAXOPS], *q[KN_MAXOPS];
                for (int k = 0; k < it.nops; k++) p[k] = it.ptr[k];
                for (int64_t j = 0; j < rows; j++) {
                    for (int k = 0; k < it.nops; k++) q[k] = p[k] + j * it.strides[k][r - 2];
                    fc->fn(inner, q, it.inner, fc->ctx);
                }
                pos += rows * inner;
                if (pos < end) kn_iter_seek(&it, pos);
                continue;
            }
        }
        int64_t n = kn_iter_run(&it, end - pos);
        fc->fn(n, it.ptr, it.inner, fc->ctx);
        kn_iter_advance(&it, n);
        pos += n;
    }
}

int kn_foreach_raw(int nops, char *const *base, int64_t (*strides)[KN_MAXDIM], int rank,
                   const int64_t *shape, kn_loop_fn fn, void *ctx) {
    int64_t total = 1;
    for (int i = 0; i < rank; i++) total *= shape[i];
    if (total == 0) return 0;
    kn_iter it;
    kn_iter_init(&it, nops, base, strides, rank, shape);
    if (it.rank == 1 && total < 2 * KN_GRAIN) {
        fn(total, it.ptr, it.inner, ctx);
        return 0;
    }
    foreach_ctx fc = {&it, fn, ctx};
    tfe_parallel_for(total, KN_GRAIN, foreach_range, &fc);
    return kn_poll();
}

int kn_foreach(int nops, tfe_tensor *const *ts, int rank, const int64_t *shape, kn_loop_fn fn,
               void *ctx) {
    char *base[KN_MAXOPS];
    int64_t strides[KN_MAXOPS][KN_MAXDIM];
    for (int k = 0; k < nops; k++) {
        base[k] = tensor_data(ts[k]);
        kn_bcast_strides(ts[k], rank, shape, strides[k]);
    }
    return kn_foreach_raw(nops, base, strides, rank, shape, fn, ctx);
}

/* ---- converting copies ----------------------------------------------------------
 * conv_F_T: p[0] destination of type T, p[1] source of type F, any strides. */
#define CONV_LOOP(F, FT, T, TT, EXPR)                                                         \
    static void conv_##F##_##T(int64_t n, char **p, const int64_t *s, void *ctx) {           \
        (void)ctx;                                                                            \
        if (s[0] == sizeof(TT) && s[1] == sizeof(FT)) {                                       \
            TT *restrict o = (TT *)p[0];                                                      \
            const FT *restrict a = (const FT *)p[1];                                          \
            for (int64_t i = 0; i < n; i++) {                                                 \
                FT x = a[i];                                                                  \
                o[i] = (EXPR);                                                                \
            }                                                                                 \
        } else {                                                                              \
            char *o = p[0];                                                                   \
            const char *a = p[1];                                                             \
            for (int64_t i = 0; i < n; i++) {                                                 \
                FT x = *(const FT *)(a + i * s[1]);                                           \
                *(TT *)(o + i * s[0]) = (EXPR);                                               \
            }                                                                                 \
        }                                                                                     \
    }
#define CONV_FROM(F, FT)                                     \
    CONV_LOOP(F, FT, b, tbool, x != 0)                       \
    CONV_LOOP(F, FT, i, int32_t, CONV_TO_I32(x))             \
    CONV_LOOP(F, FT, l, int64_t, CONV_TO_I64(x))             \
    CONV_LOOP(F, FT, f, float, (float)x)                     \
    CONV_LOOP(F, FT, d, double, (double)x)
/* float sources saturate (kn_f64_to_*); integer sources wrap like C */
#define CONV_TO_I32(x) (_Generic((x), float: kn_f64_to_i32(x), double: kn_f64_to_i32(x), default: (int32_t)(x)))
#define CONV_TO_I64(x) (_Generic((x), float: kn_f64_to_i64(x), double: kn_f64_to_i64(x), default: (int64_t)(x)))
CONV_FROM(b, tbool)
CONV_FROM(i, int32_t)
CONV_FROM(l, int64_t)
CONV_FROM(f, float)
CONV_FROM(d, double)

static const kn_loop_fn conv_table[5][5] = {
    {conv_b_b, conv_b_i, conv_b_l, conv_b_f, conv_b_d},
    {conv_i_b, conv_i_i, conv_i_l, conv_i_f, conv_i_d},
    {conv_l_b, conv_l_i, conv_l_l, conv_l_f, conv_l_d},
    {conv_f_b, conv_f_i, conv_f_l, conv_f_f, conv_f_d},
    {conv_d_b, conv_d_i, conv_d_l, conv_d_f, conv_d_d},
};

/* half/bfloat16 (never computed on, but copies of them must work) */
static void conv_slow(int64_t n, char **p, const int64_t *s, void *ctx) {
    const tfe_dtype *dts = ctx; /* [dst, src] */
    for (int64_t i = 0; i < n; i++)
        kn_store_f64(p[0] + i * s[0], dts[0], kn_load_f64(p[1] + i * s[1], dts[1]));
}

int kn_copy_into(tfe_tensor *dst, const tfe_tensor *src) {
    int64_t n = tensor_numel(dst);
    if (n == 0) return 0;
    if (dst->dtype == src->dtype && tensor_is_contiguous(dst) && tensor_is_contiguous(src) &&
        tensor_numel(src) == n) {
        memcpy(tensor_data(dst), tensor_data(src), (size_t)n * kn_esz(dst->dtype));
        return 0;
    }
    char *base[2] = {tensor_data(dst), tensor_data(src)};
    int64_t strides[2][KN_MAXDIM];
    kn_bcast_strides(dst, dst->rank, dst->shape, strides[0]);
    for (int i = 0; i < dst->rank; i++) strides[0][i] = dst->strides[i];
    kn_bcast_strides(src, dst->rank, dst->shape, strides[1]);
    tfe_dtype dts[2] = {dst->dtype, src->dtype};
    if (dst->dtype < TFE_FLOAT16 && src->dtype < TFE_FLOAT16)
        return kn_foreach_raw(2, base, strides, dst->rank, dst->shape,
                              conv_table[src->dtype][dst->dtype], NULL);
    return kn_foreach_raw(2, base, strides, dst->rank, dst->shape, conv_slow, dts);
}

int kn_copy_raw(tfe_dtype dt, char *const *base, int64_t (*strides)[KN_MAXDIM], int rank,
                const int64_t *shape) {
    tfe_dtype dts[2] = {dt, dt};
    if (dt < TFE_FLOAT16) return kn_foreach_raw(2, base, strides, rank, shape, conv_table[dt][dt], NULL);
    return kn_foreach_raw(2, base, strides, rank, shape, conv_slow, dts);
}

tfe_tensor *kn_contig_as(tfe_tensor *t, tfe_dtype dt) {
    if (t->dtype == dt && tensor_is_contiguous(t)) {
        tensor_incref(t);
        return t;
    }
    tfe_tensor *o = tensor_new(dt, t->rank, t->shape);
    if (!o) return NULL;
    if (kn_copy_into(o, t)) {
        tensor_decref(o);
        return NULL;
    }
    return o;
}

