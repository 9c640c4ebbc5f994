/* kernels_lapack.c — matrices over the last two axes (leading axes a batch):
 * tril/triu, and inv, solve, det and cholesky through LAPACK's LU (getrf,
 * getrs) and Cholesky (potrf) for float32/float64. LAPACK is column-major:
 * a row-major matrix handed over as it is reads as its transpose, which the
 * kernels use instead of copying in transposed order (comments say how). */
#include <stdlib.h>

#include "tensor/blas.h"
#include "tensor/kernels.h"

#define SHP(t, buf) shape_str((t)->rank, (t)->shape, buf)

/* ---- infer --------------------------------------------------------------------- */

static int need_matrix(const char *op, const tfe_tensor *x) {
    char b[200];
    if (x->rank < 2) {
        tfe_error_set("%s: expected a matrix (a tensor of rank >= 2), got shape %s", op, SHP(x, b));
        return -1;
    }
    return 0;
}

/* (.., n, n) of float32/float64; an unknown dim (-1, a relaxed trace) passes */
static int need_square(const char *op, const char *what, const tfe_tensor *x) {
    char b[200];
    if (need_matrix(op, x)) return -1;
    int64_t n = x->shape[x->rank - 2], m = x->shape[x->rank - 1];
    if (n != m && n >= 0 && m >= 0) {
        tfe_error_set("%s: %s must be square (.., n, n), got shape %s", op, what, SHP(x, b));
        return -1;
    }
    if (!dtype_is_float(x->dtype) || x->dtype >= TFE_FLOAT16) {
        tfe_error_set("%s: expected float32 or float64, got %s", op, dtype_name(x->dtype));
        return -1;
    }
    return 0;
}

int infer_tri(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    if (need_matrix(kn_opname(c), x)) return -1;
    kn_meta_set(m, x->dtype, false, x->rank, x->shape);
    return 0;
}

int infer_square(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    if (need_square(kn_opname(c), "the matrix", x)) return -1;
    kn_meta_set(m, x->dtype, false, x->rank, x->shape);
    return 0;
}

int infer_det(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *x = c->in[0];
    if (need_square("det", "the matrix", x)) return -1;
    kn_meta_set(m, x->dtype, false, x->rank - 2, x->shape);
    return 0;
}

/* solve(a, b): a (.., n, n); b (n,) one right-hand side (NumPy 2's rule: only
 * a 1-D b is a vector), else (.., n, k); batch axes broadcast. */
int infer_solve(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *a = c->in[0], *b = c->in[1];
    char b1[200], b2[200];
    if (need_square("solve", "a", a)) return -1;
    if (!dtype_is_float(b->dtype) || b->dtype >= TFE_FLOAT16) {
        tfe_error_set("solve: expected float32 or float64, got %s", dtype_name(b->dtype));
        return -1;
    }
    bool weak;
    tfe_dtype dt = dtype_promote(a->dtype, false, b->dtype, false, &weak);
    int64_t n = a->shape[a->rank - 2];
    int64_t bn = b->rank == 1 ? b->shape[0] : b->rank >= 2 ? b->shape[b->rank - 2] : 0;
    if (b->rank == 0 || (bn != n && bn >= 0 && n >= 0)) {
        tfe_error_set("solve: b has shape %s; for a of shape %s it must be (%lld,) or (.., %lld, k)",
                      SHP(b, b1), SHP(a, b2), (long long)n, (long long)n);
        return -1;
    }
    int r = 0;
    if (b->rank == 1) {
        r = a->rank - 2;
        memcpy(m->shape, a->shape, sizeof(int64_t) * (size_t)r);
        m->shape[r++] = n;
    } else {
        if (broadcast_shapes("solve", a->rank - 2, a->shape, b->rank - 2, b->shape, &r, m->shape)) {
            tfe_error_set("solve: batch dimensions of shapes %s and %s cannot be broadcast", SHP(a, b1),
                          SHP(b, b2));
            return -1;
        }
        m->shape[r++] = n;
        m->shape[r++] = b->shape[b->rank - 1];
    }
    m->rank = r;
    m->dtype = dt;
    m->weak = false;
    return 0;
}

/* ---- tril / triu ------------------------------------------------------------------ */

int k_tri(const tfe_opcall *c) {
    tfe_tensor *o = c->out[0];
    if (kn_copy_into(o, c->in[0])) return -1;
    int64_t rows = o->shape[o->rank - 2], cols = o->shape[o->rank - 1], k = c->at->ints[0];
    int64_t nb = shape_numel(o->rank - 2, o->shape);
    /* past rows + cols every k gives the same result: clamped, i + k cannot wrap */
    if (k > rows + cols) k = rows + cols + 1;
    if (k < -(rows + cols)) k = -(rows + cols) - 1;
    size_t esz = kn_esz(o->dtype);
    bool lower = c->op == OP_TRIL;
    char *p = tensor_data(o);
    for (int64_t t = 0; t < nb; t++) {
        for (int64_t i = 0; i < rows; i++) {
            char *row = p + (size_t)((t * rows + i) * cols) * esz;
            /* tril keeps j <= i + k: zero [i + k + 1, cols); triu keeps
             * j >= i + k: zero [0, i + k) */
            int64_t lo = lower ? i + k + 1 : 0, hi = lower ? cols : i + k;
            if (lo < 0) lo = 0;
            if (hi > cols) hi = cols;
            if (hi > lo) memset(row + (size_t)lo * esz, 0, (size_t)(hi - lo) * esz);
        }
        if ((t & 255) == 255 && kn_poll()) return -1;
    }
    return 0;
}

/* ---- LAPACK ----------------------------------------------------------------------- */

/* The element offset, in a contiguous (batch.., rows, cols) tensor of batch
 * shape (ri, si), of the matrix that batch index t of the batch shape
 * (br, bs) reads (NumPy broadcasting: size-1 or missing axes repeat). */
static int64_t bcast_offset(int64_t t, int br, const int64_t *bs, int ri, const int64_t *si, int64_t msz) {
    int64_t off = 0, stride = msz;
    for (int d = br - 1; d >= 0; d--) {
        int64_t idx = t % bs[d];
        t /= bs[d];
        int id = d - (br - ri);
        if (id < 0) continue;
        if (si[id] != 1) off += idx * stride;
        stride *= si[id];
    }
    return off;
}

/* " (batch element t)" when the op runs on a batch, else "" */
static const char *which(char *buf, size_t size, int batch_rank, int64_t t) {
    if (!batch_rank) return "";
    snprintf(buf, size, " (batch element %lld)", (long long)t);
    return buf;
}

/* LAPACK counts in 32-bit ints (OpenBLAS without INTERFACE64) */
static int lapack_fits(const char *op, int64_t n, int64_t k) {
    if (n * (n > k ? n : k) <= INT32_MAX) return 0;
    tfe_error_set("%s: matrices of %lld x %lld are too large for LAPACK's 32-bit sizes", op, (long long)n,
                  (long long)(n > k ? n : k));
    return -1;
}

/* The LU factors of every matrix of a: getrf of the row-major data, i.e. of
 * a^T (det(a^T) = det(a); inv and solve solve with the transpose). Results
 * in lu (nb * n * n elements) and piv (nb * n); *singular_at = the first
 * singular batch element or -1. */
static int lu_all(const char *op, tfe_tensor *a, tfe_dtype dt, char **lu, int32_t **piv, int64_t *singular_at) {
    int64_t n = a->shape[a->rank - 1], nb = shape_numel(a->rank - 2, a->shape);
    size_t esz = kn_esz(dt);
    if (lapack_fits(op, n, n)) return -1;
    tfe_tensor *ac = kn_contig_as(a, dt);
    if (!ac) return -1;
    *lu = malloc((size_t)(nb * n * n) * esz + 1);
    *piv = malloc(sizeof(int32_t) * (size_t)(nb * n) + 1);
    *singular_at = -1;
    if (!*lu || !*piv) {
        tensor_decref(ac);
        free(*lu);
        free(*piv);
        *lu = NULL;
        *piv = NULL;
        tfe_error_set("%s: out of memory", op);
        return -1;
    }
    memcpy(*lu, tensor_data(ac), (size_t)(nb * n * n) * esz);
    tensor_decref(ac);
    for (int64_t t = 0; t < nb; t++) {
        int info = 0;
        if (tfe_lapack_getrf(op, dt, n, *lu + (size_t)(t * n * n) * esz, *piv + t * n, &info)) goto fail;
        if (info > 0 && *singular_at < 0) *singular_at = t;
        if ((t & 63) == 63 && kn_poll()) goto fail;
    }
    return 0;
fail:
    free(*lu);
    free(*piv);
    *lu = NULL;
    *piv = NULL;
    return -1;
}

/* inv: getrs of a^T's factors with the identity solves a^T X = I, so the
 * column-major X is a^-T, whose row-major reading is a^-1. */
int k_inv(const tfe_opcall *c) {
    tfe_tensor *a = c->in[0], *o = c->out[0];
    tfe_dtype dt = o->dtype;
    int64_t n = a->shape[a->rank - 1], nb = shape_numel(a->rank - 2, a->shape);
    size_t esz = kn_esz(dt);
    if (nb * n == 0) return 0;
    char *lu;
    int32_t *piv;
    int64_t bad;
    if (lu_all("inv", a, dt, &lu, &piv, &bad)) return -1;
    int rc = -1;
    char wb[64];
    if (bad >= 0) {
        tfe_error_set("inv: matrix is singular%s", which(wb, sizeof wb, a->rank - 2, bad));
        goto done;
    }
    char *po = tensor_data(o);
    for (int64_t t = 0; t < nb; t++) {
        char *x = po + (size_t)(t * n * n) * esz;
        memset(x, 0, (size_t)(n * n) * esz);
        for (int64_t i = 0; i < n; i++) kn_store_f64(x + (size_t)(i * n + i) * esz, dt, 1.0);
        int info = 0;
        if (tfe_lapack_getrs("inv", dt, 'N', n, n, lu + (size_t)(t * n * n) * esz, piv + t * n, x, &info))
            goto done;
        if ((t & 63) == 63 && kn_poll()) goto done;
    }
    rc = 0;
done:
    free(lu);
    free(piv);
    return rc;
}

/* solve: with a^T's factors, getrs with 'T' solves (a^T)^T X = a X = B. B
 * goes in column-major (n x k): each right-hand side contiguous. */
int k_solve(const tfe_opcall *c) {
    tfe_tensor *a = c->in[0], *b = c->in[1], *o = c->out[0];
    tfe_dtype dt = o->dtype;
    int64_t n = a->shape[a->rank - 1];
    bool vec = b->rank == 1;
    int64_t k = vec ? 1 : b->shape[b->rank - 1];
    int br = vec ? o->rank - 1 : o->rank - 2;
    int64_t nb = shape_numel(br, o->shape);
    size_t esz = kn_esz(dt);
    if (nb * n * k == 0) return 0;
    if (lapack_fits("solve", n, k)) return -1;
    char *lu;
    int32_t *piv;
    int64_t bad;
    if (lu_all("solve", a, dt, &lu, &piv, &bad)) return -1;
    int rc = -1;
    char wb[64];
    tfe_tensor *bc = NULL;
    char *col = NULL;
    if (bad >= 0) {
        tfe_error_set("solve: matrix is singular%s", which(wb, sizeof wb, a->rank - 2, bad));
        goto done;
    }
    if (!(bc = kn_contig_as(b, dt))) goto done;
    if (!(col = malloc((size_t)(n * k) * esz))) {
        tfe_error_set("solve: out of memory");
        goto done;
    }
    char *pb = tensor_data(bc), *po = tensor_data(o);
    for (int64_t t = 0; t < nb; t++) {
        int64_t oa = bcast_offset(t, br, o->shape, a->rank - 2, a->shape, 1); /* a matrix index */
        const char *bt = vec ? pb : pb + (size_t)bcast_offset(t, br, o->shape, b->rank - 2, b->shape, n * k) * esz;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < k; j++)
                memcpy(col + (size_t)(j * n + i) * esz, bt + (size_t)(i * k + j) * esz, esz);
        int info = 0;
        if (tfe_lapack_getrs("solve", dt, 'T', n, k, lu + (size_t)(oa * n * n) * esz, piv + oa * n, col, &info))
            goto done;
        char *ot = po + (size_t)(t * n * k) * esz;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < k; j++)
                memcpy(ot + (size_t)(i * k + j) * esz, col + (size_t)(j * n + i) * esz, esz);
        if ((t & 63) == 63 && kn_poll()) goto done;
    }
    rc = 0;
done:
    tensor_decref(bc);
    free(col);
    free(lu);
    free(piv);
    return rc;
}

/* det: the product of U's diagonal, negated once per row interchange (ipiv
 * 1-based); a singular matrix (an exact zero pivot) gives 0. The product is
 * taken in float64, so float32 loses nothing to it. */
int k_det(const tfe_opcall *c) {
    tfe_tensor *a = c->in[0], *o = c->out[0];
    tfe_dtype dt = o->dtype;
    int64_t n = a->shape[a->rank - 1], nb = shape_numel(a->rank - 2, a->shape);
    size_t esz = kn_esz(dt);
    char *po = tensor_data(o);
    if (nb == 0) return 0;
    if (n == 0) { /* the empty product */
        for (int64_t t = 0; t < nb; t++) kn_store_f64(po + (size_t)t * esz, dt, 1.0);
        return 0;
    }
    char *lu;
    int32_t *piv;
    int64_t bad;
    if (lu_all("det", a, dt, &lu, &piv, &bad)) return -1;
    for (int64_t t = 0; t < nb; t++) {
        const char *m = lu + (size_t)(t * n * n) * esz;
        double d = 1.0;
        bool zero = false;
        for (int64_t i = 0; i < n; i++) {
            double u = kn_load_f64(m + (size_t)(i * n + i) * esz, dt);
            zero |= u == 0;
            d *= piv[t * n + i] != i + 1 ? -u : u;
        }
        kn_store_f64(po + (size_t)t * esz, dt, zero ? 0.0 : d);
    }
    free(lu);
    free(piv);
    return 0;
}

/* cholesky: the row-major a reads as a^T in column-major, whose upper
 * triangle is a's lower one; potrf('U') factors it as U^T U, and U read
 * back row-major is U^T = L with a = L L^T. potrf leaves the other triangle
 * as it was: zeroed here. */
int k_cholesky(const tfe_opcall *c) {
    tfe_tensor *a = c->in[0], *o = c->out[0];
    tfe_dtype dt = o->dtype;
    int64_t n = a->shape[a->rank - 1], nb = shape_numel(a->rank - 2, a->shape);
    size_t esz = kn_esz(dt);
    if (nb * n == 0) return 0;
    if (lapack_fits("cholesky", n, n) || kn_copy_into(o, a)) return -1;
    char *po = tensor_data(o), wb[64];
    for (int64_t t = 0; t < nb; t++) {
        char *m = po + (size_t)(t * n * n) * esz;
        int info = 0;
        if (tfe_lapack_potrf("cholesky", dt, 'U', n, m, &info)) return -1;
        if (info > 0) {
            tfe_error_set("cholesky: matrix is not positive definite%s", which(wb, sizeof wb, a->rank - 2, t));
            return -1;
        }
        for (int64_t i = 0; i < n; i++)
            memset(m + (size_t)(i * n + i + 1) * esz, 0, (size_t)(n - i - 1) * esz);
        if ((t & 63) == 63 && kn_poll()) return -1;
    }
    return 0;
}
