/* kernels_reduce.c — reductions (sum, mean, prod, max, min, any, all,
 * logsumexp, var, std), argmax/argmin and softmax/log_softmax. Data is seen
 * as (outer, reduced, inner): rows when inner == 1 (pairwise float sums),
 * column accumulation otherwise; other layouts are permuted into rows. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#include "tensor/kernels.h"

typedef uint8_t tbool;

/* ---- pairwise sums (NumPy's scheme: 8 accumulators per block of 128) ---- */
#define PAIRWISE(name, T)                                                        \
    T name(const T *x, int64_t n) {                                              \
        if (n < 8) {                                                             \
            T s = 0;                                                             \
            for (int64_t i = 0; i < n; i++) s += x[i];                           \
            return s;                                                            \
        }                                                                        \
        if (n <= 128) {                                                          \
            T r[8];                                                              \
            for (int k = 0; k < 8; k++) r[k] = x[k];                             \
            int64_t i;                                                           \
            for (i = 8; i + 8 <= n; i += 8)                                      \
                for (int k = 0; k < 8; k++) r[k] += x[i + k];                    \
            T s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7])); \
            for (; i < n; i++) s += x[i];                                        \
            return s;                                                            \
        }                                                                        \
        int64_t h = (n / 2) & ~(int64_t)7;                                       \
        return name(x, h) + name(x + h, n - h);                                  \
    }
PAIRWISE(kn_sum_f32, float)
PAIRWISE(kn_sum_f64, double)

/* ---- typed reducers ------------------------------------------------------
 * row(x, n, out): *out = reduction of x[0..n); col(acc, x, rows, ld, n):
 * acc[j] = combine(acc[j], x[r ld + j]) for r = 0, 1, .. rows-1 in order
 * (one call for a block of rows: short rows of C channels cost no call
 * each); init(acc, n): acc[j] = identity. */
typedef void (*row_fn)(const char *x, int64_t n, char *out);
typedef void (*col_fn)(char *acc, const char *x, int64_t rows, int64_t ld, int64_t n);
typedef void (*init_fn)(char *acc, int64_t n);
typedef struct reducer { row_fn row; col_fn col; init_fn init; } reducer;

#define FMAX(a, b) ((b) > (a) || (b) != (b) ? (b) : (a))
#define FMIN(a, b) ((b) < (a) || (b) != (b) ? (b) : (a))
#define ADD(a, b) ((a) + (b))
#define MUL(a, b) ((a) * (b))
#define OR(a, b) ((a) | (b))
#define AND(a, b) ((a) & (b))

#define RED_FNS(name, T, INIT, COMBINE)                                          \
    __attribute__((unused)) static void row_##name(const char *xp, int64_t n, char *op) { \
        const T *restrict x = (const T *)xp;                                     \
        T acc = INIT;                                                            \
        for (int64_t i = 0; i < n; i++) acc = COMBINE(acc, x[i]);                \
        *(T *)op = acc;                                                          \
    }                                                                            \
    static void col_##name(char *ap, const char *xp, int64_t rows, int64_t ld, int64_t n) { \
        T *restrict a = (T *)ap;                                                 \
        for (int64_t r = 0; r < rows; r++) {                                     \
            const T *restrict x = (const T *)xp + r * ld;                        \
            for (int64_t i = 0; i < n; i++) a[i] = COMBINE(a[i], x[i]);          \
        }                                                                        \
    }                                                                            \
    static void init_##name(char *ap, int64_t n) {                               \
        T *a = (T *)ap;                                                          \
        for (int64_t i = 0; i < n; i++) a[i] = INIT;                             \
    }

/* int64 sums and products wrap like NumPy's (uint64 math: no signed-overflow UB) */
#define IADD(a, b) ((int64_t)((uint64_t)(a) + (uint64_t)(b)))
#define IMUL(a, b) ((int64_t)((uint64_t)(a) * (uint64_t)(b)))
RED_FNS(sum_l, int64_t, 0, IADD)
RED_FNS(sum_f, float, 0, ADD)
RED_FNS(sum_d, double, 0, ADD)
RED_FNS(prod_l, int64_t, 1, IMUL)
RED_FNS(prod_f, float, 1, MUL)
RED_FNS(prod_d, double, 1, MUL)
RED_FNS(max_b, tbool, 0, OR)
RED_FNS(max_i, int32_t, INT32_MIN, FMAX)
RED_FNS(max_l, int64_t, INT64_MIN, FMAX)
RED_FNS(max_f, float, -INFINITY, FMAX)
RED_FNS(max_d, double, -INFINITY, FMAX)
RED_FNS(min_b, tbool, 1, AND)
RED_FNS(min_i, int32_t, INT32_MAX, FMIN)
RED_FNS(min_l, int64_t, INT64_MAX, FMIN)
RED_FNS(min_f, float, INFINITY, FMIN)
RED_FNS(min_d, double, INFINITY, FMIN)
RED_FNS(any_b, tbool, 0, OR)
RED_FNS(all_b, tbool, 1, AND)

static void row_psum_f(const char *x, int64_t n, char *o) { *(float *)o = kn_sum_f32((const float *)x, n); }
static void row_psum_d(const char *x, int64_t n, char *o) { *(double *)o = kn_sum_f64((const double *)x, n); }

#define R(name) ((reducer){row_##name, col_##name, init_##name})

static reducer get_reducer(tfe_op op, tfe_dtype dt) {
    /* an if chain: seven ops of the 90 (a switch over the op enum lists them all) */
    if (op == OP_SUM || op == OP_MEAN) {
        if (dt == TFE_FLOAT32) return (reducer){row_psum_f, col_sum_f, init_sum_f};
        if (dt == TFE_FLOAT64) return (reducer){row_psum_d, col_sum_d, init_sum_d};
        return R(sum_l);
    }
    if (op == OP_PROD) return dt == TFE_FLOAT32 ? R(prod_f) : dt == TFE_FLOAT64 ? R(prod_d) : R(prod_l);
    if (op == OP_MAX)
        return dt == TFE_BOOL ? R(max_b) : dt == TFE_INT32 ? R(max_i) : dt == TFE_INT64 ? R(max_l)
               : dt == TFE_FLOAT32 ? R(max_f) : R(max_d);
    if (op == OP_MIN)
        return dt == TFE_BOOL ? R(min_b) : dt == TFE_INT32 ? R(min_i) : dt == TFE_INT64 ? R(min_l)
               : dt == TFE_FLOAT32 ? R(min_f) : R(min_d);
    if (op == OP_ANY) return R(any_b);
    return R(all_b); /* OP_ALL: k_reduce's callers pass no other op here */
}

/* ---- row-only statistics (computed in double) ------------------------------ */
#define STATS(SUF, T)                                                            \
    static void row_lse_##SUF(const char *xp, int64_t n, char *op, int64_t ddof) { \
        (void)ddof;                                                              \
        const T *x = (const T *)xp;                                              \
        double m = -INFINITY;                                                    \
        for (int64_t i = 0; i < n; i++) m = FMAX(m, (double)x[i]);              \
        if (isinf(m) || m != m) { *(T *)op = (T)m; return; }                     \
        double s = 0;                                                            \
        for (int64_t i = 0; i < n; i++) s += exp((double)x[i] - m);              \
        *(T *)op = (T)(m + log(s));                                              \
    }                                                                            \
    static double var_##SUF(const T *x, int64_t n, int64_t ddof) {              \
        double s = 0, ss = 0;                                                    \
        for (int64_t i = 0; i < n; i++) s += x[i];                               \
        double mean = s / (double)n;                                             \
        for (int64_t i = 0; i < n; i++) {                                        \
            double d = x[i] - mean;                                              \
            ss += d * d;                                                         \
        }                                                                        \
        int64_t dof = n - ddof > 0 ? n - ddof : 0;                               \
        return ss / (double)dof;                                                 \
    }                                                                            \
    static void row_var_##SUF(const char *xp, int64_t n, char *op, int64_t ddof) { \
        *(T *)op = (T)var_##SUF((const T *)xp, n, ddof);                         \
    }                                                                            \
    static void row_std_##SUF(const char *xp, int64_t n, char *op, int64_t ddof) { \
        *(T *)op = (T)sqrt(var_##SUF((const T *)xp, n, ddof));                   \
    }
STATS(f, float)
STATS(d, double)
typedef void (*stat_fn)(const char *x, int64_t n, char *out, int64_t ddof);

/* var/std of columns: out[j] over x[r ld + j], r < rows, with the row
 * version's arithmetic in the same order (each column is one row of the
 * permuted layout), so the results are bit for bit those of var_SUF; the
 * layout is not permuted (a copy) and the loops run across the columns. */
#define COL_STATS(SUF, T)                                                        \
    static void col_var_##SUF(const T *x, int64_t rows, int64_t ld, int64_t n, T *out, int64_t ddof, \
                              bool root, double *s, double *ss) {                \
        for (int64_t j = 0; j < n; j++) s[j] = ss[j] = 0;                        \
        for (int64_t r = 0; r < rows; r++)                                       \
            for (int64_t j = 0; j < n; j++) s[j] += x[r * ld + j];               \
        for (int64_t j = 0; j < n; j++) s[j] = s[j] / (double)rows;              \
        for (int64_t r = 0; r < rows; r++)                                       \
            for (int64_t j = 0; j < n; j++) {                                    \
                double d = x[r * ld + j] - s[j];                                 \
                ss[j] += d * d;                                                  \
            }                                                                    \
        int64_t dof = rows - ddof > 0 ? rows - ddof : 0;                         \
        for (int64_t j = 0; j < n; j++)                                          \
            out[j] = root ? (T)sqrt(ss[j] / (double)dof) : (T)(ss[j] / (double)dof); \
    }
COL_STATS(f, float)
COL_STATS(d, double)

/* ---- drivers ------------------------------------------------------------------ */
typedef struct red_ctx {
    const char *x;
    char *o;
    int64_t red, inner;        /* reduced count, inner (column) count */
    size_t esz;
    reducer r;
    stat_fn stat;
    int64_t ddof;
    char *partial;             /* single-row parallel partial results */
    int64_t chunk;
    bool colstat, root;        /* var/std over columns (inner > 1) */
} red_ctx;

static void rows_range(int64_t b, int64_t e, void *vctx) {
    red_ctx *c = vctx;
    for (int64_t i = b; i < e; i++) {
        const char *row = c->x + i * c->red * (int64_t)c->esz;
        if (c->stat) c->stat(row, c->red, c->o + i * (int64_t)c->esz, c->ddof);
        else c->r.row(row, c->red, c->o + i * (int64_t)c->esz);
    }
}

/* partial results of one long row: chunk k -> partial[k] */
static void partial_range(int64_t b, int64_t e, void *vctx) {
    red_ctx *c = vctx;
    for (int64_t k = b; k < e; k++) {
        int64_t s = k * c->chunk, n = s + c->chunk < c->red ? c->chunk : c->red - s;
        c->r.row(c->x + s * (int64_t)c->esz, n, c->partial + k * (int64_t)c->esz);
    }
}

/* (outer, red, inner) with inner > 1: over flat output index (o, j). Each
 * output is reduced over its column in order, whoever computes it. */
static void cols_range(int64_t b, int64_t e, void *vctx) {
    red_ctx *c = vctx;
    int64_t esz = (int64_t)c->esz;
    double sbuf[2 * 256], *s = sbuf;
    while (b < e) {
        int64_t o = b / c->inner, j0 = b % c->inner;
        int64_t j1 = c->inner < j0 + (e - b) ? c->inner : j0 + (e - b);
        if (c->colstat && j1 - j0 > 256) j1 = j0 + 256; /* sbuf's columns */
        char *acc = c->o + (o * c->inner + j0) * esz;
        const char *base = c->x + (o * c->red * c->inner + j0) * esz;
        if (c->colstat) {
            if (esz == 4) col_var_f((const float *)base, c->red, c->inner, j1 - j0, (float *)acc, c->ddof, c->root, s, s + 256);
            else col_var_d((const double *)base, c->red, c->inner, j1 - j0, (double *)acc, c->ddof, c->root, s, s + 256);
        } else {
            c->r.init(acc, j1 - j0);
            c->r.col(acc, base, c->red, c->inner, j1 - j0);
        }
        b += j1 - j0;
    }
}

/* outer == 1, inner > 1: part k accumulates rows [k*chunk, ...) into its own
 * inner-sized partial, streaming whole rows (prefetch-friendly) */
static void colparts_range(int64_t b, int64_t e, void *vctx) {
    red_ctx *c = vctx;
    int64_t esz = (int64_t)c->esz;
    for (int64_t k = b; k < e; k++) {
        char *acc = c->partial + k * c->inner * esz;
        int64_t r0 = k * c->chunk, r1 = r0 + c->chunk < c->red ? r0 + c->chunk : c->red;
        c->r.init(acc, c->inner);
        c->r.col(acc, c->x + r0 * c->inner * esz, r1 - r0, c->inner, c->inner);
    }
}

/* The parts are a function of the size only, never of the thread count, so
 * the summation order (and the result) is the same with any number of
 * threads: one part (the rows in order) below 2 KN_GRAIN elements, else
 * parts of about KN_GRAIN elements (at most 64), combined in order. */
static int run_colparts(red_ctx *c) {
    int64_t total = c->red * c->inner;
    int64_t nparts = total < 2 * KN_GRAIN ? 1 : total / KN_GRAIN;
    if (nparts > 64) nparts = 64;
    if (nparts > c->red) nparts = c->red;
    if (nparts <= 1) {
        c->partial = c->o;
        c->chunk = c->red;
        colparts_range(0, 1, c);
        return 0;
    }
    c->chunk = (c->red + nparts - 1) / nparts;
    nparts = (c->red + c->chunk - 1) / c->chunk;
    size_t bytes = (size_t)(nparts * c->inner) * c->esz;
    c->partial = tfe_alloc(bytes);
    if (!c->partial) return -1;
    /* the same parts either way; threads only from 4 KN_GRAIN elements (a
     * column sum is memory-bound: below that a worker's wake-up costs more) */
    if (total < 4 * KN_GRAIN) colparts_range(0, nparts, c);
    else tfe_parallel_for(nparts, 1, colparts_range, c);
    c->r.init(c->o, c->inner);
    c->r.col(c->o, c->partial, nparts, c->inner, c->inner);
    tfe_free(c->partial, bytes);
    return kn_poll();
}

/* ---- long pairwise rows in parallel (kernels.h: kn_psum_tree) ---- */
static void psum_leaves(kn_psum_tree *t, int64_t off, int64_t n) {
    if (n <= t->leaf) {
        t->off[t->nleaves] = off;
        t->len[t->nleaves++] = n;
        return;
    }
    int64_t h = (n / 2) & ~(int64_t)7; /* kn_sum's split (n > leaf > 128) */
    psum_leaves(t, off, h);
    psum_leaves(t, off + h, n - h);
}

void kn_psum_tree_init(kn_psum_tree *t, int64_t n) {
    t->n = n;
    t->leaf = n / 32 + 1 > KN_GRAIN ? n / 32 + 1 : KN_GRAIN;
    t->nleaves = 0;
    psum_leaves(t, 0, n);
}

#define PSUM_JOIN(name, T)                                                       \
    static T name##_at(const kn_psum_tree *t, const T *sums, int64_t n, int *k) { \
        if (n <= t->leaf) return sums[(*k)++];                                   \
        int64_t h = (n / 2) & ~(int64_t)7;                                       \
        T a = name##_at(t, sums, h, k);                                          \
        return a + name##_at(t, sums, n - h, k);                                 \
    }                                                                            \
    T name(const kn_psum_tree *t, const T *sums) {                               \
        int k = 0;                                                               \
        return name##_at(t, sums, t->n, &k);                                     \
    }
PSUM_JOIN(kn_psum_join_f32, float)
PSUM_JOIN(kn_psum_join_f64, double)

typedef struct psum_ctx { const kn_psum_tree *t; const char *x; size_t esz; char *out; } psum_ctx;

static void psum_range(int64_t b, int64_t e, void *vctx) {
    psum_ctx *p = vctx;
    for (int64_t k = b; k < e; k++) {
        if (p->esz == 4) ((float *)p->out)[k] = kn_sum_f32((const float *)p->x + p->t->off[k], p->t->len[k]);
        else ((double *)p->out)[k] = kn_sum_f64((const double *)p->x + p->t->off[k], p->t->len[k]);
    }
}

static int run_psum_row(red_ctx *c, const char *x, char *o) {
    kn_psum_tree t;
    kn_psum_tree_init(&t, c->red);
    double buf[64];
    psum_ctx p = {&t, x, c->esz, (char *)buf};
    tfe_parallel_for(t.nleaves, 1, psum_range, &p);
    if (c->esz == 4) *(float *)o = kn_psum_join_f32(&t, (const float *)buf);
    else *(double *)o = kn_psum_join_f64(&t, buf);
    return kn_poll();
}

static int run_rows(red_ctx *c, int64_t outer) {
    int64_t grain = KN_GRAIN / (c->red ? c->red : 1);
    if (grain < 1) grain = 1;
    bool psum = c->r.row == row_psum_f || c->r.row == row_psum_d;
    if (!c->stat && psum && outer == 1 && c->red >= 4 * KN_GRAIN) /* bitwise kn_sum's, in parallel */
        return run_psum_row(c, c->x, c->o);
    /* other long single rows: chunks of a size set by the row alone (not
     * the thread count), combined in order */
    if (!c->stat && !psum && outer == 1 && c->red >= 2 * KN_GRAIN) {
        char buf[64 * 8];
        c->partial = buf;
        int64_t nchunks = c->red / KN_GRAIN < 64 ? c->red / KN_GRAIN : 64;
        c->chunk = (c->red + nchunks - 1) / nchunks;
        nchunks = (c->red + c->chunk - 1) / c->chunk;
        for (int64_t i = 0; i < outer; i++) {
            red_ctx ci = *c;
            ci.x = c->x + i * c->red * (int64_t)c->esz;
            tfe_parallel_for(nchunks, 1, partial_range, &ci);
            c->r.row(buf, nchunks, c->o + i * (int64_t)c->esz);
        }
        return kn_poll();
    }
    tfe_parallel_for(outer, grain, rows_range, c);
    return kn_poll();
}

static int empty_axis_error(const tfe_opcall *c) {
    char b[200];
    const tfe_tensor *x = c->in[0];
    tfe_error_set("%s: cannot reduce over an empty axis (shape %s)", kn_opname(c),
                  shape_str(x->rank, x->shape, b));
    return -1;
}

/* Makes x a contiguous tensor of dtype dt with the axes in mask moved last
 * (or keeps the layout when the reduced axes already form one contiguous
 * block and `blocks` is set); sets outer/red/inner. */
static tfe_tensor *arrange(tfe_tensor *x, tfe_dtype dt, unsigned mask, bool blocks, int64_t *outer,
                           int64_t *red, int64_t *inner) {
    int lo = -1, hi = -1;
    for (int i = 0; i < x->rank; i++)
        if (mask & (1u << i)) {
            if (lo < 0) lo = i;
            hi = i + 1;
        }
    bool block = lo < 0 || (unsigned)(((1u << hi) - 1) & ~((1u << lo) - 1)) == mask;
    if (lo < 0) lo = hi = x->rank;
    if (block && (blocks || hi == x->rank) && tensor_is_contiguous(x)) {
        tfe_tensor *xc = kn_contig_as(x, dt);
        *outer = *red = *inner = 1;
        for (int i = 0; i < x->rank; i++)
            *(i < lo ? outer : i < hi ? red : inner) *= x->shape[i];
        return xc;
    }
    int perm[TFE_MAX_RANK], k = 0;
    *outer = *red = 1;
    *inner = 1;
    for (int i = 0; i < x->rank; i++)
        if (!(mask & (1u << i))) {
            perm[k++] = i;
            *outer *= x->shape[i];
        }
    for (int i = 0; i < x->rank; i++)
        if (mask & (1u << i)) {
            perm[k++] = i;
            *red *= x->shape[i];
        }
    tfe_tensor *pv = kn_permute(x, perm);
    if (!pv) return NULL;
    tfe_tensor *xc = tensor_new(dt, pv->rank, pv->shape);
    if (xc && kn_copy_into(xc, pv)) {
        tensor_decref(xc);
        xc = NULL;
    }
    tensor_decref(pv);
    return xc;
}

int k_reduce(const tfe_opcall *c) {
    tfe_tensor *x = c->in[0], *o = c->out[0];
    tfe_op op = c->op;
    unsigned mask;
    if (kn_axes_mask(kn_opname(c), c->at, x->rank, &mask)) return -1;
    int64_t nred = 1;
    for (int i = 0; i < x->rank; i++)
        if (mask & (1u << i)) nred *= x->shape[i];
    if (nred == 0 && (op == OP_MAX || op == OP_MIN) && tensor_numel(o) > 0) return empty_axis_error(c);

    bool stat = op == OP_LOGSUMEXP || op == OP_VAR || op == OP_STD;
    tfe_dtype ct;
    if (op == OP_SUM || op == OP_PROD) ct = o->dtype;
    else if (op == OP_MAX || op == OP_MIN) ct = x->dtype;
    else if (op == OP_ANY || op == OP_ALL) ct = TFE_BOOL;
    else ct = dtype_is_float(x->dtype) ? x->dtype : TFE_FLOAT64; /* mean and the statistics */
    int64_t outer, red, inner;
    /* logsumexp needs rows; var/std have a column version (cols_range) */
    tfe_tensor *xc = arrange(x, ct, mask, op != OP_LOGSUMEXP, &outer, &red, &inner);
    if (!xc) return -1;
    tfe_tensor *oc = o->dtype == ct ? o : tensor_new(ct, o->rank, o->shape);
    int rc = -1;
    if (!oc) goto done;
    red_ctx rc_ = {.x = tensor_data(xc), .o = tensor_data(oc), .red = red, .inner = inner,
                   .esz = dtype_size(ct), .ddof = c->at->ints[0]};
    if (stat) {
        bool f = ct == TFE_FLOAT32;
        rc_.stat = op == OP_LOGSUMEXP ? (f ? row_lse_f : row_lse_d)
                   : op == OP_VAR     ? (f ? row_var_f : row_var_d)
                                      : (f ? row_std_f : row_std_d);
    } else rc_.r = get_reducer(op, ct);
    rc_.colstat = stat && inner > 1;
    rc_.root = op == OP_STD;
    if (outer * inner == 0) rc = 0;
    else if (inner == 1) rc = run_rows(&rc_, outer);
    else if (outer == 1 && !stat) rc = run_colparts(&rc_);
    else {
        /* a task takes whole cache lines of a row (64 bytes) at least: a
         * thread reading a few columns of each row would read every line */
        int64_t grain = KN_GRAIN / (red ? red : 1), line = 64 / (int64_t)rc_.esz;
        if (grain < line) grain = line;
        tfe_parallel_for(outer * inner, grain, cols_range, &rc_);
        rc = kn_poll();
    }
    if (rc == 0 && op == OP_MEAN) {
        int64_t n = tensor_numel(oc);
        if (ct == TFE_FLOAT32) {
            float *p = (float *)tensor_data(oc);
            for (int64_t i = 0; i < n; i++) p[i] /= (float)nred;
        } else {
            double *p = (double *)tensor_data(oc);
            for (int64_t i = 0; i < n; i++) p[i] /= (double)nred;
        }
    }
    if (rc == 0 && oc != o) rc = kn_copy_into(o, oc);
done:
    if (oc && oc != o) tensor_decref(oc);
    tensor_decref(xc);
    return rc;
}

/* ---- argmax / argmin -------------------------------------------------------------- */
#define ARG_ROW(name, T, CMP)                                                    \
    static int64_t name(const char *xp, int64_t n) {                             \
        const T *x = (const T *)xp;                                              \
        T best = x[0];                                                           \
        int64_t bi = 0;                                                          \
        if (best != best) return 0;                                              \
        for (int64_t i = 1; i < n; i++) {                                        \
            T v = x[i];                                                          \
            if (v != v) return i;                                                \
            if (v CMP best) { best = v; bi = i; }                                \
        }                                                                        \
        return bi;                                                               \
    }
ARG_ROW(argmax_b, tbool, >)
ARG_ROW(argmax_i, int32_t, >)
ARG_ROW(argmax_l, int64_t, >)
ARG_ROW(argmax_f, float, >)
ARG_ROW(argmax_d, double, >)
ARG_ROW(argmin_b, tbool, <)
ARG_ROW(argmin_i, int32_t, <)
ARG_ROW(argmin_l, int64_t, <)
ARG_ROW(argmin_f, float, <)
ARG_ROW(argmin_d, double, <)

typedef int64_t (*arg_fn)(const char *x, int64_t n);
typedef struct arg_ctx { const char *x; int64_t *o; int64_t red; size_t esz; arg_fn fn; } arg_ctx;

static void arg_range(int64_t b, int64_t e, void *vctx) {
    arg_ctx *c = vctx;
    for (int64_t i = b; i < e; i++) c->o[i] = c->fn(c->x + i * c->red * (int64_t)c->esz, c->red);
}

int k_argreduce(const tfe_opcall *c) {
    tfe_tensor *x = c->in[0], *o = c->out[0];
    unsigned mask;
    if (c->at->naxes <= 0) mask = x->rank ? (1u << x->rank) - 1 : 0;
    else if (kn_axes_mask(kn_opname(c), c->at, x->rank, &mask)) return -1;
    int64_t nred = 1;
    for (int i = 0; i < x->rank; i++)
        if (mask & (1u << i)) nred *= x->shape[i];
    if (nred == 0) {
        if (tensor_numel(o) == 0) return 0;
        return empty_axis_error(c);
    }
    int64_t outer, red, inner;
    tfe_tensor *xc = arrange(x, x->dtype, mask, false, &outer, &red, &inner);
    if (!xc) return -1;
    bool mx = c->op == OP_ARGMAX;
    arg_fn fn;
    switch (x->dtype) {
    case TFE_BOOL: fn = mx ? argmax_b : argmin_b; break;
    case TFE_INT32: fn = mx ? argmax_i : argmin_i; break;
    case TFE_INT64: fn = mx ? argmax_l : argmin_l; break;
    case TFE_FLOAT32: fn = mx ? argmax_f : argmin_f; break;
    case TFE_FLOAT64: case TFE_FLOAT16: case TFE_BFLOAT16: case TFE_NDTYPES:
    default: fn = mx ? argmax_d : argmin_d; break;
    }
    arg_ctx ac = {tensor_data(xc), (int64_t *)tensor_data(o), red, dtype_size(x->dtype), fn};
    int64_t grain = KN_GRAIN / red;
    tfe_parallel_for(outer, grain < 1 ? 1 : grain, arg_range, &ac);
    tensor_decref(xc);
    return kn_poll();
}

/* ---- softmax / log_softmax (rows; stable: the row max is subtracted) --------------- */
#define SOFTMAX_ROW(SUF, T, EXP, LOG)                                            \
    static void softmax_row_##SUF(const T *x, T *o, int64_t n, bool logsm) {     \
        T m = -INFINITY;                                                         \
        for (int64_t i = 0; i < n; i++) m = FMAX(m, x[i]);                       \
        double s = 0;                                                            \
        for (int64_t i = 0; i < n; i++) {                                        \
            T e = EXP(x[i] - m);                                                 \
            if (!logsm) o[i] = e;                                                \
            s += e;                                                              \
        }                                                                        \
        if (logsm) {                                                             \
            T ls = (T)log(s);                                                    \
            for (int64_t i = 0; i < n; i++) o[i] = x[i] - m - ls;                \
        } else {                                                                 \
            T inv = (T)(1.0 / s);                                                \
            for (int64_t i = 0; i < n; i++) o[i] *= inv;                         \
        }                                                                        \
    }
SOFTMAX_ROW(f, float, expf, logf)
SOFTMAX_ROW(d, double, exp, log)

typedef struct sm_ctx { char *x, *o; int64_t n; bool f32, logsm; } sm_ctx;

static void softmax_range(int64_t b, int64_t e, void *vctx) {
    sm_ctx *c = vctx;
    for (int64_t i = b; i < e; i++) {
        if (c->f32) softmax_row_f((float *)c->x + i * c->n, (float *)c->o + i * c->n, c->n, c->logsm);
        else softmax_row_d((double *)c->x + i * c->n, (double *)c->o + i * c->n, c->n, c->logsm);
    }
}

int k_softmax(const tfe_opcall *c) {
    tfe_tensor *x = c->in[0], *o = c->out[0];
    int axis;
    if (kn_axis(kn_opname(c), c->at->naxes > 0 ? c->at->axes[0] : -1, x->rank, &axis)) return -1;
    int64_t outer, red, inner;
    tfe_tensor *xc = arrange(x, o->dtype, 1u << axis, false, &outer, &red, &inner);
    if (!xc) return -1;
    bool direct = axis == x->rank - 1; /* arrange kept the layout: rows are o's */
    tfe_tensor *tmp = direct ? o : tensor_new(o->dtype, xc->rank, xc->shape);
    int rc = -1;
    if (tmp) {
        sm_ctx sc = {tensor_data(xc), tensor_data(tmp), red, o->dtype == TFE_FLOAT32,
                     c->op == OP_LOG_SOFTMAX};
        int64_t grain = KN_GRAIN / (red ? red : 1);
        if (red > 0) tfe_parallel_for(outer, grain < 1 ? 1 : grain, softmax_range, &sc);
        rc = kn_poll();
        if (rc == 0 && !direct) {
            /* tmp holds x with `axis` moved last: write it back through the
             * inverse permutation, as a permuted view of o */
            int perm[TFE_MAX_RANK], k = 0;
            for (int i = 0; i < x->rank; i++)
                if (i != axis) perm[k++] = i;
            perm[k] = axis;
            tfe_tensor *ov = kn_permute(o, perm);
            rc = ov ? kn_copy_into(ov, tmp) : -1;
            tensor_decref(ov);
        }
        if (!direct) tensor_decref(tmp);
    }
    tensor_decref(xc);
    return rc;
}
