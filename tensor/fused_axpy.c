/* fused_axpy.c — the fused program out = w op (p * q) in one AVX-512 pass
 * (fused_axpy.h).
 * Why: the chunked VM (fused.c) runs it as two loops over each chunk, a
 * multiply into a register buffer and the op from it, compiled for baseline
 * x86-64 (4 floats a vector). A planned SGD update of an MLP's 784x256
 * weight took 50-100 us that way against 20-30 us for one pass of 16-float
 * vectors (benchmarks.md, "The staged MLP step against eager"). An AVX-512
 * build of the whole VM was tried before and was slower on other programs,
 * and even a branch added to the VM's chunk loop changed how GCC compiled it
 * (ew_chain's 200-op program ran up to 2x slower), so this pass lives apart
 * and the planner calls it for updates (graph/exec_update.c). */
#if defined(__GNUC__) && !defined(__clang__)
/* the multiply and the op are two roundings, as in the VM and eager code:
 * never one fused multiply-add */
#pragma GCC optimize("O3", "fp-contract=off")
#endif
#include "tensor/fused_axpy.h"

#include "tensor/kernels.h"

/* The input loaded into register r by an instruction before `before`, or -1. */
static int load_of(const tfe_fprog *p, int r, int before) {
    for (int i = 0; i < before; i++)
        if (p->code[i].op == FOP_LOAD && p->code[i].dst == r) return p->code[i].input;
    return -1;
}

void tfe_axpy_match(const tfe_fprog *p, tfe_axpy_prog *m) {
    *m = (tfe_axpy_prog){.ok = false};
    if (p->dtype != TFE_FLOAT32 || p->red || p->ninstr != 5 || !p->code) return;
    const tfe_finstr *c = p->code, *last = &c[4];
    if ((last->op != OP_ADD && last->op != OP_SUB) || last->dst != p->result) return;
    int mul = -1, nload = 0;
    for (int i = 0; i < 4; i++) {
        if (c[i].op == FOP_LOAD) nload++;
        else if (c[i].op == OP_MUL && mul < 0) mul = i;
        else return;
        for (int j = 0; j < i; j++)
            if (c[j].dst == c[i].dst) return;
    }
    if (nload != 3 || mul < 0) return;
    int a = load_of(p, c[mul].a, mul), b = load_of(p, c[mul].b, mul), t = c[mul].dst, wr;
    if (a < 0 || b < 0) return;
    if (last->b == t && last->a != t) wr = last->a;
    else if (last->a == t && last->b != t) wr = last->b;
    else return;
    int w = load_of(p, wr, 4);
    if (w < 0) return;
    *m = (tfe_axpy_prog){.ok = true, .sub = last->op == OP_SUB, .wfirst = last->a == wr, .w = w, .p = a, .q = b};
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#include "tensor/sgemm_small.h"

/* the same run-time AVX-512F check as the register-tile GEMM's */
bool tfe_axpy_ok(void) { return tfe_sgemm_small_ok(); }

typedef struct job {
    const float *w, *p, *q;
    float *out;
    bool ps, qs, sub, wfirst; /* p (q) one element; the op; w its first operand */
} job;

#define AVX512 __attribute__((target("avx512f")))

/* One vector (mask m: the tail) of elements [i, i + 16). */
static inline __attribute__((always_inline)) AVX512 void one(const job *j, int64_t i, __mmask16 m, __m512 pv,
                                                            __m512 qv) {
    __m512 p = j->ps ? pv : _mm512_maskz_loadu_ps(m, j->p + i);
    __m512 q = j->qs ? qv : _mm512_maskz_loadu_ps(m, j->q + i);
    __m512 t = _mm512_mul_ps(p, q); /* k_mul: x * y */
    __m512 w = _mm512_maskz_loadu_ps(m, j->w + i);
    __m512 x = j->wfirst ? w : t, y = j->wfirst ? t : w;
    _mm512_mask_storeu_ps(j->out + i, m, j->sub ? _mm512_sub_ps(x, y) : _mm512_add_ps(x, y)); /* k_sub / k_add */
}

AVX512 static void range(int64_t begin, int64_t end, void *ctx) {
    const job *j = ctx;
    __m512 pv = _mm512_set1_ps(j->ps ? j->p[0] : 0.0f), qv = _mm512_set1_ps(j->qs ? j->q[0] : 0.0f);
    int64_t i = begin;
    for (; i + 16 <= end; i += 16) one(j, i, (__mmask16)0xFFFF, pv, qv);
    if (i < end) one(j, i, (__mmask16)((1u << (end - i)) - 1), pv, qv);
}

/* t is float32, contiguous, and of out's shape (whole: true) or one element */
static bool operand(const tfe_tensor *t, const tfe_tensor *out, bool whole_only, bool *one) {
    if (t->dtype != TFE_FLOAT32 || !t->storage || t->storage->device != 0) return false;
    *one = false;
    if (t->rank == out->rank) {
        bool same = true;
        for (int d = 0; d < t->rank; d++) same &= t->shape[d] == out->shape[d];
        if (same && tensor_is_contiguous(t)) return true;
    }
    if (whole_only || t->rank > out->rank || tensor_numel(t) != 1) return false;
    *one = true;
    return true;
}

int tfe_axpy_exec(const tfe_axpy_prog *m, tfe_tensor *const *inputs, int ninputs, tfe_tensor *out, int *rc) {
    if (!m->ok || !tfe_axpy_ok() || m->w >= ninputs || m->p >= ninputs || m->q >= ninputs) return 0;
    if (out->dtype != TFE_FLOAT32 || !out->storage || out->storage->device != 0 || !tensor_is_contiguous(out)) return 0;
    const tfe_tensor *w = inputs[m->w], *p = inputs[m->p], *q = inputs[m->q];
    bool wone, ps, qs;
    if (!operand(w, out, true, &wone) || !operand(p, out, false, &ps) || !operand(q, out, false, &qs)) return 0;
    job j = {.w = (const float *)tensor_data(w), .p = (const float *)tensor_data(p),
             .q = (const float *)tensor_data(q), .out = (float *)tensor_data(out),
             .ps = ps, .qs = qs, .sub = m->sub, .wfirst = m->wfirst};
    int64_t n = tensor_numel(out);
    /* the VM's grain for this program (cost 3: two ops and the store) */
    int64_t grain = (int64_t)KN_GRAIN * 2 / 3;
    tfe_parallel_for(n, grain, range, &j);
    /* tfe_parallel_for skips the remaining ranges once Ctrl-C is pressed */
    *rc = n >= 2 * grain ? kn_poll() : 0;
    return 1;
}

#else

bool tfe_axpy_ok(void) { return false; }

int tfe_axpy_exec(const tfe_axpy_prog *m, tfe_tensor *const *inputs, int ninputs, tfe_tensor *out, int *rc) {
    (void)m, (void)inputs, (void)ninputs, (void)out, (void)rc;
    return 0;
}

#endif
