/* fused.c — the register VM behind tfe_fused_run (fused.h): a fused
 * elementwise program evaluated TFE_FUSED_CHUNK elements at a time, each
 * instruction a tight loop over the chunk, large tensors split over threads.
 * The per-op formulas are tensor/elem.def's, the text kernels_elem.c's loops
 * are made from, so fused and unfused results are bitwise equal. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3") /* as kernels_elem.c: the chunk loops must vectorise */
#endif
#include "tensor/fused.h"

#include <stdlib.h>

#include "tensor/kernels.h"
#include "util/xalloc.h"

#define CHUNK TFE_FUSED_CHUNK
/* Registers (and their pointers) live on the stack up to this size: 32
 * float32 / 16 float64 registers; bigger programs malloc per thread range. */
#define STACK_REG_BYTES 32768
/* Validation scratch (code copy, input plans, register flags) on the stack up
 * to this size, so small programs do not malloc at all. */
#define STACK_PLAN_BYTES 8192

/* ---- op table ------------------------------------------------------------------- */
/* Per op with an elem.def float formula: operands (0: none, not fusable)
 * and rough per-element work in units of one add (sets the thread grain). */
static const struct {
    int8_t nargs, cost;
} fops[TFE_NOPS] = {
#define ELEM_UNARY(ID, COST, EXPR) [OP_##ID] = {1, COST},
#define ELEM_BINARY(ID, COST, EXPR) [OP_##ID] = {2, COST},
#include "tensor/elem.def"
};

int tfe_fop_nargs(int fop) {
    if (fop == FOP_LOAD || fop == FOP_CONST) return 0;
    return fop >= 0 && fop < TFE_NOPS && fops[fop].nargs ? fops[fop].nargs : -1;
}

const char *tfe_fop_name(int fop) {
    if (fop == FOP_LOAD) return "load";
    if (fop == FOP_CONST) return "const";
    return tfe_fop_nargs(fop) > 0 ? tfe_ops[fop].name : "?";
}

int tfe_fop_of_op(tfe_op op) { return tfe_fop_nargs((int)op) > 0 ? (int)op : -1; }

/* ---- the plan: a validated copy of the program plus how to read each input ---- */
/* IN_ROW: a contiguous row broadcast over leading axes (a bias (C,) against
 * (N, C)): a chunk inside one row is read in place, one that crosses rows
 * is gathered. */
enum { IN_SCALAR, IN_CONTIG, IN_STRIDED, IN_ROW };

typedef struct fin {
    int kind;
    const char *base;                 /* element 0 (IN_CONTIG: of out's flat order) */
    const char *tile;                 /* IN_ROW, rows shorter than a chunk: the row repeated
                                         over CHUNK + row length elements, so that every
                                         chunk is read in place (tile + b % row) */
    int rank;                         /* IN_STRIDED: collapsed geometry over out's shape */
    int64_t shape[TFE_MAX_RANK], strides[TFE_MAX_RANK];
} fin;

typedef struct finst {
    uint16_t op;
    uint8_t single;                   /* the only write of dst: if uniform (a constant or a
                                         broadcast scalar) it runs once per thread range */
    int16_t dst, a, b, input;         /* a, b are 0 when unused: always safe to index */
    double imm;
} finst;

typedef struct fplan {
    tfe_dtype dt;
    int nregs, ninstr, result;
    const finst *code;
    const fin *in;
    int last_out;                     /* instruction writing straight into out, or -1 */
    char *out;                        /* elementwise: the output; reductions: one per row */
    int err;                          /* set by a range body that could not allocate */
    /* reductions (tfe_fprog.red): rows of `red` elements of the program's
     * domain, each summed pairwise; or one long row in the parts of `tree`
     * summed into `partial` (what k_reduce does, so results are bitwise its) */
    int64_t red;
    const kn_psum_tree *tree;
    char *partial;
    int64_t row;                      /* the row the parts belong to */
} fplan;

/* Gathers n elements of a strided input, starting at flat index b of out's
 * shape, into dst. Elements are copied as bits (uint32/uint64), so one copy
 * serves both float dtypes. The multi-index is recomputed per chunk: rank
 * divisions per CHUNK elements are noise. */
#define GATHER(NAME, U)                                                              \
    static void NAME(const fin *in, int64_t b, int64_t n, void *vdst) {              \
        U *dst = vdst;                                                               \
        int r = in->rank;                                                            \
        int64_t idx[TFE_MAX_RANK], off = 0, flat = b;                                \
        for (int i = r - 1; i >= 0; i--) {                                           \
            idx[i] = flat % in->shape[i];                                            \
            flat /= in->shape[i];                                                    \
            off += idx[i] * in->strides[i];                                          \
        }                                                                            \
        const int64_t s = in->strides[r - 1], len = in->shape[r - 1];               \
        for (int64_t done = 0;;) {                                                   \
            int64_t run = len - idx[r - 1];                                          \
            if (run > n - done) run = n - done;                                      \
            const char *src = in->base + off;                                        \
            for (int64_t j = 0; j < run; j++) dst[done + j] = *(const U *)(src + j * s); \
            done += run;                                                             \
            if (done == n) break;                                                    \
            /* the inner run ended at the end of its axis: carry outward */          \
            off += run * s - len * s;                                                \
            idx[r - 1] = 0;                                                          \
            for (int i = r - 2; i >= 0; i--) {                                       \
                off += in->strides[i];                                               \
                if (++idx[i] < in->shape[i]) break;                                  \
                off -= idx[i] * in->strides[i];                                      \
                idx[i] = 0;                                                          \
            }                                                                        \
        }                                                                            \
    }
GATHER(gather4, uint32_t)
GATHER(gather8, uint64_t)

/* ---- the per-dtype executors -------------------------------------------------------
 * The ops: elem.def's formulas as loops over a chunk, one switch per dtype
 * (T the element type, F(exp) its libm function). dst may be an operand (in
 * place), so no restrict. A switch inlined into the chunk loop, not calls
 * through a table: ew_chain runs 200 short instructions per call. The cases
 * are elem.def's rows; compile_into lets no other opcode through. */
#define FUSED_UNARY(ID, COST, EXPR)                                                 \
    case OP_##ID:                                                                   \
        for (int64_t i = 0; i < n; i++) {                                           \
            T x = A[i];                                                             \
            d[i] = (EXPR);                                                          \
        }                                                                           \
        break;
#define FUSED_BINARY(ID, COST, EXPR)                                                \
    case OP_##ID:                                                                   \
        for (int64_t i = 0; i < n; i++) {                                           \
            T x = A[i], y = B[i];                                                   \
            d[i] = (EXPR);                                                          \
        }                                                                           \
        break;
#define T float
#define F(fn) fn##f
#define ELEM_HELPER(NAME, PARAMS, ...) static inline T F(NAME) PARAMS __VA_ARGS__
#include "tensor/elem.def" /* the helpers: tfe_sigmoidf, ... */
static inline __attribute__((always_inline)) void apply_f(int op, int64_t n, T *d, const T *A, const T *B) {
    switch (op) {
#define ELEM_UNARY FUSED_UNARY
#define ELEM_BINARY FUSED_BINARY
#include "tensor/elem.def"
    default: break;
    }
}
#undef T
#undef F
#define T double
#define F(fn) fn
#define ELEM_HELPER(NAME, PARAMS, ...) static inline T F(NAME) PARAMS __VA_ARGS__
#include "tensor/elem.def" /* the helpers: tfe_sigmoid, ... */
static inline __attribute__((always_inline)) void apply_d(int op, int64_t n, T *d, const T *A, const T *B) {
    switch (op) {
#define ELEM_UNARY FUSED_UNARY
#define ELEM_BINARY FUSED_BINARY
#include "tensor/elem.def"
    default: break;
    }
}
#undef T
#undef F

#define DEFINE_EXEC(SUF, T, GATHER_FN)                                                   \
    static void fill_##SUF(T *d, int64_t n, T v) {                                            \
        for (int64_t i = 0; i < n; i++) d[i] = v;                                             \
    }                                                                                         \
    /* One chunk: elements [b, b+n) of out. ptr[r] is where register r's value  \
     * for this chunk lives: its buffer, a contiguous input read in place, or   \
     * out itself (the last write of the result register goes straight there). */ \
    /* always inlined: as a call, the chunk loop ran up to 2x slower (ew_chain) */            \
    static inline __attribute__((always_inline)) void                                         \
    exec_##SUF(const fplan *pl, int64_t b, int64_t n, T *buf, const T **ptr, T *outp) {       \
        for (int k = 0; k < pl->ninstr; k++) {                                                \
            const finst *ins = &pl->code[k];                                                  \
            if (ins->op == FOP_CONST && ins->single) continue; /* hoisted */                 \
            T *d = k == pl->last_out ? outp : buf + (size_t)ins->dst * CHUNK;                 \
            const T *A = ptr[ins->a], *B = ptr[ins->b];                                       \
            if (ins->op == FOP_LOAD) {                                                        \
                const fin *in = &pl->in[ins->input];                                          \
                if (in->kind == IN_CONTIG) { /* no copy: read it where it is */               \
                    ptr[ins->dst] = (const T *)in->base + b;                                  \
                    continue;                                                                 \
                }                                                                             \
                if (in->kind == IN_ROW && in->tile) {                                         \
                    ptr[ins->dst] = (const T *)in->tile + b % in->shape[1];                   \
                    continue;                                                                 \
                }                                                                             \
                if (in->kind == IN_ROW && b % in->shape[1] + n <= in->shape[1]) {             \
                    ptr[ins->dst] = (const T *)in->base + b % in->shape[1];                   \
                    continue;                                                                 \
                }                                                                             \
                if (in->kind == IN_SCALAR) {                                                  \
                    if (ins->single) continue; /* hoisted */                                  \
                    fill_##SUF(d, n, *(const T *)in->base);                                   \
                }                                                                             \
                else GATHER_FN(in, b, n, d);                                                  \
            } else if (ins->op == FOP_CONST) fill_##SUF(d, n, (T)ins->imm);                   \
            else apply_##SUF(ins->op, n, d, A, B);                                            \
            ptr[ins->dst] = d;                                                                \
        }                                                                                     \
        if (ptr[pl->result] != outp) memcpy(outp, ptr[pl->result], (size_t)n * sizeof(T));   \
    }                                                                                         \
    /* A thread's range: hoisted registers (constants, broadcast scalars) are  \
     * filled once, then the chunks run. */                                     \
    static void setup_##SUF(const fplan *pl, T *buf, const T **ptr) {                          \
        for (int r = 0; r < pl->nregs; r++) ptr[r] = buf + (size_t)r * CHUNK;                 \
        for (int k = 0; k < pl->ninstr; k++) {                                                \
            const finst *ins = &pl->code[k];                                                  \
            if (!ins->single) continue;                                                       \
            T v;                                                                              \
            if (ins->op == FOP_CONST) v = (T)ins->imm;                                        \
            else if (ins->op == FOP_LOAD && pl->in[ins->input].kind == IN_SCALAR)             \
                v = *(const T *)pl->in[ins->input].base;                                      \
            else continue;                                                                    \
            fill_##SUF(buf + (size_t)ins->dst * CHUNK, CHUNK, v);                             \
        }                                                                                     \
    }                                                                                         \
    static void range_##SUF(const fplan *pl, int64_t begin, int64_t end, T *buf, const T **ptr) { \
        setup_##SUF(pl, buf, ptr);                                                            \
        for (int64_t b = begin; b < end; b += CHUNK)                                          \
            exec_##SUF(pl, b, end - b < CHUNK ? end - b : CHUNK, buf, ptr, (T *)pl->out + b); \
    }                                                                                         \
    /* The pairwise sum of elements [b, b+n) of the domain: kn_sum's recursion, \
     * its leaves (at most 128 elements) computed by the program. */            \
    static T psum_##SUF(const fplan *pl, int64_t b, int64_t n, T *buf, const T **ptr) {      \
        if (n == 0) return 0; /* an empty row (the gather must not see a 0 dim) */            \
        if (n <= 128) {                                                                       \
            T leaf[128];                                                                      \
            exec_##SUF(pl, b, n, buf, ptr, leaf);                                             \
            return KSUM(leaf, n);                                                             \
        }                                                                                     \
        int64_t h = (n / 2) & ~(int64_t)7;                                                    \
        return psum_##SUF(pl, b, h, buf, ptr) + psum_##SUF(pl, b + h, n - h, buf, ptr);       \
    }                                                                                         \
    static void rows_##SUF(const fplan *pl, int64_t begin, int64_t end, T *buf, const T **ptr) { \
        setup_##SUF(pl, buf, ptr);                                                            \
        for (int64_t r = begin; r < end; r++)                                                 \
            ((T *)pl->out)[r] = psum_##SUF(pl, r * pl->red, pl->red, buf, ptr);               \
    }                                                                                         \
    static void parts_##SUF(const fplan *pl, int64_t begin, int64_t end, T *buf, const T **ptr) { \
        setup_##SUF(pl, buf, ptr);                                                            \
        for (int64_t k = begin; k < end; k++)                                                 \
            ((T *)pl->partial)[k] = psum_##SUF(pl, pl->row * pl->red + pl->tree->off[k],       \
                                               pl->tree->len[k], buf, ptr);                   \
    }

#define KSUM kn_sum_f32
DEFINE_EXEC(f, float, gather4)
#undef KSUM
#define KSUM kn_sum_f64
DEFINE_EXEC(d, double, gather8)
#undef KSUM

/* A thread's share of the work: elements (range), rows (rows) or parts of
 * one row (parts), with registers on the stack or, when big, malloc'd. */
enum { RUN_RANGE, RUN_ROWS, RUN_PARTS };

static void run_share(fplan *pl, int what, int64_t begin, int64_t end) {
    size_t regbytes = (size_t)pl->nregs * CHUNK * kn_esz(pl->dt);
    size_t total = regbytes + (size_t)pl->nregs * sizeof(void *);
    _Alignas(64) char stackbuf[STACK_REG_BYTES];
    char *mem = stackbuf;
    if (total > sizeof stackbuf) {
        /* plain malloc: thread-safe, unlike tfe_alloc (see kernels.h) */
        mem = aligned_alloc(64, (total + 63) & ~(size_t)63);
        if (!mem) {
            __atomic_store_n(&pl->err, 1, __ATOMIC_RELAXED);
            return;
        }
    }
    float *bf = (float *)mem;
    double *bd = (double *)mem;
    const void **ptr = (const void **)(mem + regbytes);
    bool f = pl->dt == TFE_FLOAT32;
    switch (what) {
    case RUN_RANGE:
        if (f) range_f(pl, begin, end, bf, (const float **)ptr);
        else range_d(pl, begin, end, bd, (const double **)ptr);
        break;
    case RUN_ROWS:
        if (f) rows_f(pl, begin, end, bf, (const float **)ptr);
        else rows_d(pl, begin, end, bd, (const double **)ptr);
        break;
    default:
        if (f) parts_f(pl, begin, end, bf, (const float **)ptr);
        else parts_d(pl, begin, end, bd, (const double **)ptr);
        break;
    }
    if (mem != stackbuf) free(mem);
}

static void fused_range(int64_t begin, int64_t end, void *pl) { run_share(pl, RUN_RANGE, begin, end); }
static void fused_rows(int64_t begin, int64_t end, void *pl) { run_share(pl, RUN_ROWS, begin, end); }
static void fused_parts(int64_t begin, int64_t end, void *pl) { run_share(pl, RUN_PARTS, begin, end); }

/* ---- validation and planning ---------------------------------------------------------- */

/* How to read input t over out's shape: broadcast strides (kn_bcast_strides),
 * then size-1 axes dropped and axes merged where contiguous, so a contiguous
 * input becomes one axis of step esz (read in place) and a broadcast scalar
 * one axis of step 0. */
static int plan_input(fin *f, int k, const tfe_tensor *t, const tfe_tensor *out, tfe_dtype dt) {
    /* out: only its rank and shape (a reduction's domain is a shape, not a tensor) */
    char b1[200], b2[200];
    if (t->dtype != dt) {
        tfe_error_set("fused: input %d is %s, the program is %s", k, dtype_name(t->dtype), dtype_name(dt));
        return -1;
    }
    bool ok = t->rank <= out->rank;
    for (int i = 0; ok && i < t->rank; i++) {
        int64_t d = t->shape[i], o = out->shape[out->rank - t->rank + i];
        ok = d == o || d == 1;
    }
    if (!ok || !t->storage) {
        tfe_error_set("fused: input %d of shape %s does not broadcast to %s", k,
                      shape_str(t->rank, t->shape, b1), shape_str(out->rank, out->shape, b2));
        return -1;
    }
    int64_t st[TFE_MAX_RANK];
    kn_bcast_strides(t, out->rank, out->shape, st);
    int r = 0;
    for (int i = 0; i < out->rank; i++) {
        if (out->shape[i] == 1) continue;
        if (r > 0 && f->strides[r - 1] == st[i] * out->shape[i]) {
            f->shape[r - 1] *= out->shape[i];
            f->strides[r - 1] = st[i];
        } else {
            f->shape[r] = out->shape[i];
            f->strides[r] = st[i];
            r++;
        }
    }
    if (r == 0) { /* out has one element */
        f->shape[0] = 1;
        f->strides[0] = 0;
        r = 1;
    }
    f->rank = r;
    f->base = tensor_data(t);
    f->tile = NULL;
    if (r == 1 && f->strides[0] == 0) f->kind = IN_SCALAR;
    else if (r == 1 && f->strides[0] == (int64_t)kn_esz(dt)) f->kind = IN_CONTIG;
    else if (r == 2 && f->strides[0] == 0 && f->strides[1] == (int64_t)kn_esz(dt)) f->kind = IN_ROW;
    else f->kind = IN_STRIDED;
    return 0;
}

/* ---- compile: validate once, then run many times ---------------------------------- */
struct tfe_fkernel {
    tfe_dtype dtype;
    int red, red_axes, rank;          /* a final reduction (tfe_fprog) */
    int ninputs, nregs, ninstr, result;
    int last_out;                     /* the last write of result, unless a hoisted constant */
    int cost;                         /* per element, gathers of strided inputs excluded */
    int *loads;                       /* per input: how many FOP_LOADs read it */
    finst code[];
};

static size_t kernel_size(const tfe_fprog *p) {
    /* before validation: negative counts are rejected by compile_into */
    size_t ni = p->ninstr > 0 ? (size_t)p->ninstr : 0, nin = p->ninputs > 0 ? (size_t)p->ninputs : 0;
    size_t nr = p->nregs > 0 ? (size_t)p->nregs : 0;
    return sizeof(tfe_fkernel) + ni * sizeof(finst) + nin * sizeof(int) + nr * 2;
}

/* Validates p into k (kernel_size(p) bytes): operands in range, every read
 * register written earlier, unused operand fields zeroed (so the executor can
 * index ptr[a], ptr[b] unconditionally). The loop avoids read-modify-write
 * chains on the flag arrays: a 200-op chain rewriting one register would
 * otherwise stall on store forwarding. */
static int compile_into(tfe_fkernel *k, const tfe_fprog *p) {
    if (p->dtype != TFE_FLOAT32 && p->dtype != TFE_FLOAT64) {
        tfe_error_set("fused: dtype %s is not supported (float32, float64)", dtype_name(p->dtype));
        return -1;
    }
    if (p->nregs < 1 || p->nregs > INT16_MAX || p->ninstr < 1 || p->ninputs < 0 || !p->code) {
        tfe_error_set("fused: bad program (%d registers, %d instructions, %d inputs)", p->nregs,
                      p->ninstr, p->ninputs);
        return -1;
    }
    if (p->red < TFE_FRED_NONE || p->red > TFE_FRED_MEAN ||
        (p->red && (p->rank < 0 || p->rank > TFE_MAX_RANK || p->red_axes < 0 || p->red_axes > p->rank))) {
        tfe_error_set("fused: bad reduction (%d over %d of %d axes)", p->red, p->red_axes, p->rank);
        return -1;
    }
    *k = (tfe_fkernel){.dtype = p->dtype, .red = p->red, .red_axes = p->red_axes, .rank = p->rank,
                       .ninputs = p->ninputs, .nregs = p->nregs,
                       .ninstr = p->ninstr, .result = p->result, .cost = 1 /* the store */};
    k->loads = (int *)(k->code + p->ninstr);
    uint8_t *written = (uint8_t *)(k->loads + p->ninputs), *multi = written + p->nregs;
    memset(k->loads, 0, (size_t)p->ninputs * sizeof(int));
    memset(written, 0, (size_t)p->nregs);
    for (int i = 0; i < p->ninstr; i++) {
        const tfe_finstr *s = &p->code[i];
        finst *c = &k->code[i];
        unsigned op = s->op;
        int na = tfe_fop_nargs((int)op);
        int a = na >= 1 ? s->a : 0, b = na == 2 ? s->b : 0;
        bool bad = na < 0 || s->dst < 0 || s->dst >= p->nregs || a < 0 || a >= p->nregs || b < 0 ||
                   b >= p->nregs || (na >= 1 && !written[a]) || (na == 2 && !written[b]) ||
                   (op == FOP_LOAD && (s->input < 0 || s->input >= p->ninputs));
        if (bad) {
            if (na < 0) tfe_error_set("fused: instruction %d: unknown op %u", i, op);
            else if (s->dst < 0 || s->dst >= p->nregs)
                tfe_error_set("fused: instruction %d (%s): register r%d out of range (%d registers)", i,
                              tfe_fop_name((int)op), s->dst, p->nregs);
            else if (op == FOP_LOAD)
                tfe_error_set("fused: instruction %d (load): input %d out of range (%d inputs)", i,
                              s->input, p->ninputs);
            else
                tfe_error_set("fused: instruction %d (%s): register r%d is read before it is written",
                              i, tfe_fop_name((int)op), a < 0 || a >= p->nregs || !written[a] ? a : b);
            return -1;
        }
        c->op = (uint16_t)op;
        c->dst = s->dst;
        c->a = (int16_t)a;
        c->b = (int16_t)b;
        c->input = op == FOP_LOAD ? s->input : 0;
        c->imm = s->imm;
        if (op == FOP_LOAD) k->loads[s->input]++;
        else if (op != FOP_CONST) k->cost += fops[op].cost;
        multi[s->dst] = written[s->dst];
        written[s->dst] = 1;
    }
    if (p->result < 0 || p->result >= p->nregs || !written[p->result]) {
        tfe_error_set("fused: result register r%d is never written", p->result);
        return -1;
    }
    /* A constant or broadcast scalar is the same in every chunk: when nothing
     * else writes its register, it is filled once per thread range (all reads
     * come after that single write, checked above). Whether a load is of a
     * broadcast scalar is known only at run time; `single` allows it. */
    k->last_out = -1;
    for (int i = 0; i < p->ninstr; i++) {
        finst *c = &k->code[i];
        c->single = !multi[c->dst];
        if (c->dst == p->result) k->last_out = c->op == FOP_CONST && c->single ? -1 : i;
    }
    return 0;
}

tfe_fkernel *tfe_fused_compile(const tfe_fprog *p) {
    tfe_fkernel *k = xmalloc(kernel_size(p));
    if (compile_into(k, p)) {
        free(k);
        return NULL;
    }
    return k;
}

void tfe_fused_free(tfe_fkernel *k) { free(k); }

/* The domain of a reduction: the broadcast of its inputs over k->rank axes
 * (what the elementwise ops before the reduction made), as a shape-only
 * tensor for plan_input; its rows are the leading axes. */
static int reduce_domain(const tfe_fkernel *k, tfe_tensor *const *inputs, const tfe_tensor *out, tfe_tensor *dom,
                         int64_t *rows, int64_t *red) {
    dom->rank = k->rank;
    for (int d = 0; d < k->rank; d++) dom->shape[d] = 1;
    for (int i = 0; i < k->ninputs; i++) {
        const tfe_tensor *t = inputs[i];
        for (int j = 0; j < t->rank; j++) {
            int d = k->rank - t->rank + j;
            if (d < 0 || (t->shape[j] != 1 && dom->shape[d] != 1 && dom->shape[d] != t->shape[j])) {
                tfe_error_set("fused: the inputs do not broadcast together");
                return -1;
            }
            if (t->shape[j] != 1) dom->shape[d] = t->shape[j];
        }
    }
    *rows = *red = 1;
    for (int d = 0; d < k->rank; d++) *(d < k->rank - k->red_axes ? rows : red) *= dom->shape[d];
    if (tensor_numel(out) != *rows) {
        tfe_error_set("fused: the reduction's output has %lld elements, not %lld", (long long)tensor_numel(out),
                      (long long)*rows);
        return -1;
    }
    return 0;
}

/* Rows of the domain summed as k_reduce sums them: pairwise per row, one
 * long row in the parts of kn_psum_tree (the same parts, joined the same
 * way: bitwise kn_sum's with any thread count), then divided by the count
 * for a mean. */
static int exec_reduce(const tfe_fkernel *k, fplan *pl, int64_t rows, int64_t red) {
    pl->red = red;
    if (rows == 1 && red >= 2 * KN_GRAIN) {
        kn_psum_tree t;
        kn_psum_tree_init(&t, red);
        double buf[64];
        pl->tree = &t;
        pl->partial = (char *)buf;
        pl->row = 0;
        tfe_parallel_for(t.nleaves, 1, fused_parts, pl);
        if (k->dtype == TFE_FLOAT32) *(float *)pl->out = kn_psum_join_f32(&t, (const float *)buf);
        else *(double *)pl->out = kn_psum_join_f64(&t, buf);
    } else {
        int64_t grain = KN_GRAIN / (red ? red : 1);
        tfe_parallel_for(rows, grain < 1 ? 1 : grain, fused_rows, pl);
    }
    if (pl->err) {
        tfe_error_set("fused: out of memory");
        return -1;
    }
    if (k->red == TFE_FRED_MEAN) {
        if (k->dtype == TFE_FLOAT32)
            for (int64_t r = 0; r < rows; r++) ((float *)pl->out)[r] /= (float)red;
        else
            for (int64_t r = 0; r < rows; r++) ((double *)pl->out)[r] /= (double)red;
    }
    return kn_poll();
}

int tfe_fused_exec(const tfe_fkernel *k, tfe_tensor *const *inputs, tfe_tensor *out) {
    if (out->dtype != k->dtype || !out->storage || !tensor_is_contiguous(out)) {
        tfe_error_set("fused: the output must be a contiguous %s tensor", dtype_name(k->dtype));
        return -1;
    }
    fin stack_in[16], *in = stack_in;
    _Alignas(64) char stack_tiles[4 * (CHUNK + CHUNK) * sizeof(double)];
    char *tiles = NULL;
    if (k->ninputs > 16) in = xmalloc((size_t)k->ninputs * sizeof(fin));
    int r = -1, cost = k->cost;
    tfe_tensor dom = {0};
    int64_t rows = 0, red = 0;
    if (k->red && reduce_domain(k, inputs, out, &dom, &rows, &red)) goto done;
    size_t tile_bytes = 0, esz = kn_esz(k->dtype);
    for (int i = 0; i < k->ninputs; i++) {
        if (plan_input(&in[i], i, inputs[i], k->red ? &dom : out, k->dtype)) goto done;
        if (in[i].kind == IN_ROW && in[i].shape[1] < CHUNK) tile_bytes += (size_t)(CHUNK + in[i].shape[1]) * esz;
        else if (in[i].kind == IN_STRIDED || in[i].kind == IN_ROW) cost += 2 * k->loads[i];
    }
    /* Rows shorter than a chunk (a bias of 6 or 64 channels): every chunk
     * would cross rows and be gathered element by element, slower than the
     * unfused broadcast add; a tile of the row repeated is read in place
     * instead, filled once per call (the same values, so the same bits). */
    if (tile_bytes) {
        tiles = tile_bytes <= sizeof stack_tiles ? stack_tiles : xmalloc(tile_bytes);
        char *t = tiles;
        for (int i = 0; i < k->ninputs; i++) {
            if (in[i].kind != IN_ROW || in[i].shape[1] >= CHUNK) continue;
            int64_t len = in[i].shape[1], nt = CHUNK + len;
            for (int64_t j = 0; j < nt; j++) memcpy(t + j * (int64_t)esz, in[i].base + (j % len) * (int64_t)esz, esz);
            in[i].tile = t;
            t += nt * (int64_t)esz;
        }
    }
    fplan pl = {.dt = k->dtype, .nregs = k->nregs, .ninstr = k->ninstr, .result = k->result,
                .code = k->code, .in = in, .last_out = k->last_out, .out = tensor_data(out)};
    if (k->red) {
        r = rows ? exec_reduce(k, &pl, rows, red) : 0;
        goto done;
    }
    int64_t n = tensor_numel(out);
    r = 0;
    if (n == 0) goto done;

    /* KN_GRAIN is sized for one binary op (cost ~2 with its store); a fused
     * program does `cost` times the work per element, so it pays to thread
     * proportionally sooner. Never below 16 chunks per range: waking the
     * pool costs tens of microseconds on a busy machine. */
    int64_t grain = (int64_t)KN_GRAIN * 2 / cost;
    if (grain < 16 * CHUNK) grain = 16 * CHUNK;
    if (grain > KN_GRAIN) grain = KN_GRAIN;
    tfe_parallel_for(n, grain, fused_range, &pl);
    if (pl.err) {
        tfe_error_set("fused: out of memory");
        r = -1;
    } else if (n >= 2 * grain) {
        /* tfe_parallel_for skips the remaining chunks once Ctrl-C is pressed:
         * report it rather than return a partly written output */
        r = kn_poll();
    }
done:
    if (in != stack_in) free(in);
    if (tiles != stack_tiles) free(tiles);
    return r;
}

int tfe_fused_run(const tfe_fprog *p, tfe_tensor *const *inputs, tfe_tensor *out) {
    /* small programs compile on the stack: no malloc per call */
    _Alignas(16) char stackbuf[STACK_PLAN_BYTES];
    size_t size = kernel_size(p);
    tfe_fkernel *k = size <= sizeof stackbuf ? (tfe_fkernel *)stackbuf : xmalloc(size);
    int r = compile_into(k, p);
    if (!r) r = tfe_fused_exec(k, inputs, out);
    if ((char *)k != stackbuf) free(k);
    return r;
}
