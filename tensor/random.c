/* random.c — the random stream (Philox 4x32-10, counter based) and the random
 * ops randn, rand, randint, dropout, randperm and choice. Every value depends
 * only on the key and its counter block, so results never depend on thread
 * count or chunking. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/kernels.h"
#include "tensor/ops.h"

/* The global stream: a Philox key and the next free counter block. Without a
 * seed() call the key is 0, so a program that never calls seed() still draws
 * the same numbers on every run (a documented choice: ask for variety with
 * seed(time()-derived n)). seed(n) sets the key to n and the counter to 0. */
static uint64_t stream_key = 0;
static uint64_t stream_counter = 0;

void tfe_random_seed(uint64_t seed) {
    stream_key = seed;
    stream_counter = 0;
}

/* Reserves nvalues counter blocks for one random op (no kernel uses more than
 * one 128-bit block per element; most use less). The op's values depend only
 * on (at->seed, at->counter + element index / values per block), so a replay
 * with the same attrs (e.g. dropout's gradient) gives the same numbers. */
void tfe_random_state(uint64_t *key, uint64_t *counter) {
    *key = stream_key;
    *counter = stream_counter;
}

void tfe_random_restore(uint64_t key, uint64_t counter) {
    stream_key = key;
    stream_counter = counter;
}

void tfe_random_next(tfe_attrs *at, uint64_t nvalues) {
    at->seed = stream_key;
    at->counter = stream_counter;
    at->from_stream = true;
    stream_counter += nvalues ? nvalues : 1;
}

/* Philox 4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
 * 3", SC'11). The 128-bit counter is (block, 0) with a 64-bit block index. */
static inline void philox4x32(uint64_t key, uint64_t block, uint32_t r[4]) {
    uint32_t c0 = (uint32_t)block, c1 = (uint32_t)(block >> 32), c2 = 0, c3 = 0;
    uint32_t k0 = (uint32_t)key, k1 = (uint32_t)(key >> 32);
    for (int i = 0; i < 10; i++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    r[0] = c0; r[1] = c1; r[2] = c2; r[3] = c3;
}

/* [0, 1) from 24 or 53 random bits; (0, 1] variants for log() in Box-Muller. */
static inline float u01_f32(uint32_t a) { return (float)(a >> 8) * 0x1p-24f; }
static inline float u01_f32_open0(uint32_t a) { return (float)((a >> 8) + 1) * 0x1p-24f; }
static inline double u01_f64(uint32_t a, uint32_t b) {
    return (double)(((uint64_t)a << 21) | (b >> 11)) * 0x1p-53;
}
static inline double u01_f64_open0(uint32_t a, uint32_t b) {
    return (double)((((uint64_t)a << 21) | (b >> 11)) + 1) * 0x1p-53;
}

/* A generator fills elements [4*b .. ) of block b; how many values one block
 * yields depends on the op and dtype (per_block). */
typedef struct gen_ctx {
    const tfe_opcall *c;
    char *out;
    const char *in;     /* dropout: contiguous input */
    int64_t n;
    int per_block;
    double lo;          /* randint */
    uint64_t urange;
    double rate, scale; /* dropout */
} gen_ctx;

#define TWO_PI 6.283185307179586

static void gen_range(int64_t b0, int64_t b1, void *vctx) {
    gen_ctx *g = vctx;
    const tfe_attrs *at = g->c->at;
    tfe_op op = g->c->op;
    tfe_dtype dt = g->c->out[0]->dtype;
    for (int64_t b = b0; b < b1; b++) {
        uint32_t r[4];
        philox4x32(at->seed, at->counter + (uint64_t)b, r);
        int64_t i0 = b * g->per_block;
        int k = g->n - i0 < g->per_block ? (int)(g->n - i0) : g->per_block;
        /* if, not switch: four ops of the 90 (the op enum's switches list them all) */
        if (op == OP_RAND) {
            if (dt == TFE_FLOAT32) {
                float *o = (float *)g->out + i0;
                for (int j = 0; j < k; j++) o[j] = u01_f32(r[j]);
            } else {
                double *o = (double *)g->out + i0;
                for (int j = 0; j < k; j++) o[j] = u01_f64(r[2 * j], r[2 * j + 1]);
            }
        } else if (op == OP_RANDN) {
            if (dt == TFE_FLOAT32) {
                float v[4];
                for (int j = 0; j < 4; j += 2) {
                    float rad = sqrtf(-2.0f * logf(u01_f32_open0(r[j])));
                    float th = (float)TWO_PI * u01_f32(r[j + 1]);
                    v[j] = rad * cosf(th);
                    v[j + 1] = rad * sinf(th);
                }
                memcpy((float *)g->out + i0, v, (size_t)k * sizeof(float));
            } else {
                double rad = sqrt(-2.0 * log(u01_f64_open0(r[0], r[1])));
                double th = TWO_PI * u01_f64(r[2], r[3]);
                double v[2] = {rad * cos(th), rad * sin(th)};
                memcpy((double *)g->out + i0, v, (size_t)k * sizeof(double));
            }
        } else if (op == OP_RANDINT) {
            for (int j = 0; j < k; j++) {
                /* Lemire's multiply-shift: bias at most range/2^64. */
                uint64_t u = ((uint64_t)r[2 * j] << 32) | r[2 * j + 1];
                uint64_t off = (uint64_t)(((unsigned __int128)u * g->urange) >> 64);
                int64_t v = (int64_t)((uint64_t)(int64_t)g->lo + off);
                if (dt == TFE_INT64) ((int64_t *)g->out)[i0 + j] = v;
                else ((int32_t *)g->out)[i0 + j] = (int32_t)v;
            }
        } else if (op == OP_DROPOUT) {
            /* keep when u >= rate, i.e. with probability 1 - rate */
            for (int j = 0; j < k; j++) {
                bool keep = (double)r[j] * 0x1p-32 >= g->rate;
                if (dt == TFE_FLOAT32) {
                    float x = ((const float *)g->in)[i0 + j];
                    ((float *)g->out)[i0 + j] = keep ? x * (float)g->scale : 0.0f;
                } else {
                    double x = ((const double *)g->in)[i0 + j];
                    ((double *)g->out)[i0 + j] = keep ? x * g->scale : 0.0;
                }
            }
        }
    }
}

static int generate(const tfe_opcall *c, gen_ctx *g) {
    g->c = c;
    g->out = tensor_data(c->out[0]);
    g->n = tensor_numel(c->out[0]);
    if (g->n == 0) return 0;
    int64_t nblocks = (g->n + g->per_block - 1) / g->per_block;
    tfe_parallel_for(nblocks, 4096, gen_range, g);
    return 0;
}

static int need_float_out(const tfe_opcall *c, const char *name) {
    tfe_dtype dt = c->out[0]->dtype;
    if (dt != TFE_FLOAT32 && dt != TFE_FLOAT64) {
        tfe_error_set("%s: dtype must be float32 or float64, got %s", name, dtype_name(dt));
        return -1;
    }
    return 0;
}

int k_randn(const tfe_opcall *c) {
    if (need_float_out(c, "randn") < 0) return -1;
    gen_ctx g = {.per_block = c->out[0]->dtype == TFE_FLOAT32 ? 4 : 2};
    return generate(c, &g);
}

int k_rand(const tfe_opcall *c) {
    if (need_float_out(c, "rand") < 0) return -1;
    gen_ctx g = {.per_block = c->out[0]->dtype == TFE_FLOAT32 ? 4 : 2};
    return generate(c, &g);
}

int k_randint(const tfe_opcall *c) {
    tfe_dtype dt = c->out[0]->dtype;
    double lo = c->at->f[0], hi = c->at->f[1];
    if (dt != TFE_INT64 && dt != TFE_INT32) {
        tfe_error_set("randint: dtype must be int32 or int64, got %s", dtype_name(dt));
        return -1;
    }
    if (!(lo < hi)) {
        tfe_error_set("randint: low (%.17g) must be less than high (%.17g)", lo, hi);
        return -1;
    }
    /* f[] carries the bounds as doubles, exact up to 2^53 */
    double lim = dt == TFE_INT64 ? 0x1p53 : 0x1p31;
    if (lo < -lim || hi > lim || lo != floor(lo) || hi != floor(hi)) {
        tfe_error_set("randint: bounds [%.17g, %.17g) must be integers within [%.17g, %.17g] for %s",
                      lo, hi, -lim, lim, dtype_name(dt));
        return -1;
    }
    gen_ctx g = {.per_block = 2, .lo = lo};
    g.urange = (uint64_t)((int64_t)hi - (int64_t)lo);
    return generate(c, &g);
}

int k_dropout(const tfe_opcall *c) {
    tfe_tensor *x = c->in[0];
    double rate = c->at->f[0];
    if (x->dtype != TFE_FLOAT32 && x->dtype != TFE_FLOAT64) {
        tfe_error_set("dropout: expected a float32 or float64 tensor, got %s", dtype_name(x->dtype));
        return -1;
    }
    if (!(rate >= 0.0 && rate < 1.0)) {
        tfe_error_set("dropout: rate must be in [0, 1), got %g", rate);
        return -1;
    }
    tfe_tensor *xc = tensor_contiguous(x);
    if (!xc) return -1;
    int64_t n = tensor_numel(x);
    if (rate == 0.0) {
        if (n) memcpy(tensor_data(c->out[0]), tensor_data(xc), (size_t)n * dtype_size(x->dtype));
        tensor_decref(xc);
        return 0;
    }
    gen_ctx g = {.per_block = 4, .in = tensor_data(xc), .rate = rate, .scale = 1.0 / (1.0 - rate)};
    int rc = generate(c, &g);
    tensor_decref(xc);
    return rc;
}

/* A uniform int in [0, range) from counter block b (Lemire's multiply-shift on
 * 64 bits: bias at most range/2^64). */
static inline uint64_t block_below(const tfe_attrs *at, uint64_t b, uint64_t range) {
    uint32_t r[4];
    philox4x32(at->seed, at->counter + b, r);
    uint64_t u = ((uint64_t)r[0] << 32) | r[1];
    return (uint64_t)(((unsigned __int128)u * range) >> 64);
}

/* randperm: Fisher-Yates from the last place down; place i takes counter
 * block i, so the op uses exactly n blocks (block 0 unused) as the stream
 * reserved for it. Sequential: each swap depends on the ones before. */
int k_randperm(const tfe_opcall *c) {
    tfe_tensor *o = c->out[0];
    if (o->dtype != TFE_INT64 || o->rank != 1) {
        tfe_error_set("randperm: expected an int64 vector, got %s of rank %d", dtype_name(o->dtype), o->rank);
        return -1;
    }
    int64_t n = o->shape[0];
    int64_t *v = (int64_t *)tensor_data(o);
    for (int64_t i = 0; i < n; i++) v[i] = i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)block_below(c->at, (uint64_t)i, (uint64_t)i + 1);
        int64_t t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
    return 0;
}

/* choice: p a 1-D float tensor of probabilities; out int64 of shape ints. */
int infer_choice(const tfe_opcall *c, tfe_meta *m) {
    const tfe_tensor *p = c->in[0];
    if (p->rank != 1 || (p->dtype != TFE_FLOAT32 && p->dtype != TFE_FLOAT64)) {
        tfe_error_set("choice: p must be a 1-D float32 or float64 tensor, got %s of rank %d", dtype_name(p->dtype),
                      p->rank);
        return -1;
    }
    if (c->at->nints > TFE_MAX_RANK) {
        tfe_error_set("choice: size has %d dimensions; at most %d are supported", c->at->nints, TFE_MAX_RANK);
        return -1;
    }
    int64_t k = shape_numel(c->at->nints, c->at->ints);
    if (k > 0 && p->shape[0] == 0) {
        tfe_error_set("choice: cannot draw from an empty population");
        return -1;
    }
    if (c->at->f[0] == 0 && k > p->shape[0]) {
        tfe_error_set("choice: cannot take %lld samples from a population of %lld without replacement",
                      (long long)k, (long long)p->shape[0]);
        return -1;
    }
    kn_meta_set(m, TFE_INT64, false, c->at->nints, c->at->ints);
    return 0;
}

/* The first index whose running sum passes target in a Fenwick tree of n
 * weights (tree[1..n]), or n when none does. */
static int64_t fenwick_find(const double *tree, int64_t n, double target) {
    int64_t pos = 0, step = 1;
    while (step * 2 <= n) step *= 2;
    for (; step > 0; step /= 2)
        if (pos + step <= n && tree[pos + step] <= target) {
            pos += step;
            target -= tree[pos];
        }
    return pos;
}

static void fenwick_add(double *tree, int64_t n, int64_t i, double d) {
    for (i++; i <= n; i += i & -i) tree[i] += d;
}

/* With replacement: sample k takes block k and inverts the CDF. Without:
 * the samples are drawn one after another from what is left (NumPy's
 * definition), sample k with block k, the left weights in a Fenwick tree.
 * Either way the op uses as many blocks as it returns samples. p is checked
 * as NumPy checks it: non-negative, finite, summing to 1 within sqrt(eps)
 * of its dtype; it is then normalised by its sum. */
int k_choice(const tfe_opcall *c) {
    tfe_tensor *pt = c->in[0], *o = c->out[0];
    int64_t n = pt->shape[0], k = tensor_numel(o);
    bool replace = c->at->f[0] != 0;
    int64_t *out = (int64_t *)tensor_data(o);
    if (k == 0) return 0;
    double *w = malloc((size_t)(2 * n + 1) * sizeof(double));
    if (!w) {
        tfe_error_set("choice: out of memory");
        return -1;
    }
    double *tree = w + n, total = 0;
    int64_t nonzero = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = tensor_get_f64(pt, i);
        if (!(x >= 0) || isinf(x)) {
            tfe_error_set("choice: probabilities must be non-negative and finite, got p[%lld] = %g", (long long)i, x);
            free(w);
            return -1;
        }
        w[i] = x;
        total += x;
        nonzero += x > 0;
    }
    double tol = pt->dtype == TFE_FLOAT32 ? 3.4526698300124393e-04 : 1.4901161193847656e-08;
    if (!(fabs(total - 1.0) <= tol)) {
        tfe_error_set("choice: probabilities do not sum to 1 (they sum to %.9g)", total);
        free(w);
        return -1;
    }
    if (!replace && nonzero < k) {
        tfe_error_set("choice: p has %lld non-zero entries, fewer than the %lld samples asked for without replacement",
                      (long long)nonzero, (long long)k);
        free(w);
        return -1;
    }
    int64_t last = n - 1; /* the last index that can be drawn */
    while (last > 0 && w[last] == 0) last--;
    if (replace) {
        double acc = 0; /* the cumulative sums, normalised, in tree[0..n) */
        for (int64_t i = 0; i < n; i++) tree[i] = (acc += w[i] / total);
        for (int64_t s = 0; s < k; s++) {
            uint32_t r[4];
            philox4x32(c->at->seed, c->at->counter + (uint64_t)s, r);
            double u = u01_f64(r[0], r[1]);
            int64_t lo = 0, hi = n; /* the first i with tree[i] > u */
            while (lo < hi) {
                int64_t mid = lo + (hi - lo) / 2;
                if (tree[mid] > u) hi = mid;
                else lo = mid + 1;
            }
            out[s] = lo < n ? lo : last;
        }
    } else {
        memset(tree, 0, (size_t)(n + 1) * sizeof(double));
        for (int64_t i = 0; i < n; i++) fenwick_add(tree, n, i, w[i]);
        for (int64_t s = 0; s < k; s++) {
            uint32_t r[4];
            philox4x32(c->at->seed, c->at->counter + (uint64_t)s, r);
            double left = 0;
            for (int64_t i = n; i > 0; i -= i & -i) left += tree[i];
            int64_t i = fenwick_find(tree, n, u01_f64(r[0], r[1]) * left);
            /* rounding can land on a weight already taken (or zero): the
             * nearest one still there, after it, else before it */
            int64_t j = i;
            while (j < n && w[j] == 0) j++;
            if (j == n)
                for (j = i < n ? i : n - 1; j > 0 && w[j] == 0; j--) {}
            out[s] = j;
            fenwick_add(tree, n, j, -w[j]);
            w[j] = 0;
        }
    }
    free(w);
    return 0;
}
