/* test_fused_axpy.c — the fused program out = w op (p * q) (op add or sub),
 * which a planned update runs as one AVX-512 pass (tensor/fused_axpy.c), bit
 * for bit against the same program run by the chunked VM (tfe_fused_run)
 * and against the scalar formulas:
 * both ops, w first or second, p or q a scalar or both tensors, every
 * length of tail, NaN, infinities, signed zeros and subnormals, and the
 * update in place (out is w). Skipped without AVX-512. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/fused.h"
#include "tensor/fused_axpy.h"
#include "tests/unit/check.h"

static unsigned rng = 12345;
static unsigned next(void) {
    rng = rng * 1103515245u + 12345u;
    return rng >> 8;
}
static float rnd(void) {
    static const float odd[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1e-40f, -1e-41f, 3e38f};
    unsigned r = next();
    if (r % 17 == 0) return odd[(r >> 5) % 8];
    return ((float)(next() & 0xFFFF) / 65536.0f - 0.5f) * (float)(1 + r % 7);
}

static tfe_tensor *vec(int64_t n) {
    tfe_tensor *t = tensor_new(TFE_FLOAT32, 1, &n);
    REQUIRE(t, "out of memory");
    for (int64_t i = 0; i < n; i++) ((float *)tensor_data(t))[i] = rnd();
    return t;
}

int main(void) {
    if (!tfe_axpy_ok()) return 77;
    for (int it = 0; it < 600; it++) {
        int64_t n = it < 40 ? it + 1 : 1 + (int64_t)(next() % 5000);
        int sub = it & 1, wfirst = (it >> 1) & 1, shape = (it >> 2) % 3; /* 0: p scalar, 1: q, 2: neither */
        int inplace = (it >> 3) & 1;
        /* inputs: 0 w, 1 p, 2 q; loads in a varying order */
        tfe_tensor *w = vec(n), *p = shape == 0 ? tensor_from_f64(rnd(), TFE_FLOAT32) : vec(n);
        tfe_tensor *q = shape == 1 ? tensor_from_f64(rnd(), TFE_FLOAT32) : vec(n);
        tfe_finstr code[6];
        int o = it % 3; /* where w's load goes */
        int k = 0;
        if (o == 0) code[k++] = (tfe_finstr){.op = FOP_LOAD, .dst = 3, .input = 0};
        code[k++] = (tfe_finstr){.op = FOP_LOAD, .dst = 0, .input = 1};
        code[k++] = (tfe_finstr){.op = FOP_LOAD, .dst = 1, .input = 2};
        if (o == 1) code[k++] = (tfe_finstr){.op = FOP_LOAD, .dst = 3, .input = 0};
        code[k++] = (tfe_finstr){.op = OP_MUL, .dst = 2, .a = 0, .b = 1};
        if (o == 2) code[k++] = (tfe_finstr){.op = FOP_LOAD, .dst = 3, .input = 0};
        code[k++] = (tfe_finstr){.op = sub ? OP_SUB : OP_ADD, .dst = 3, .a = wfirst ? 3 : 2, .b = wfirst ? 2 : 3};
        tfe_fprog prog = {.dtype = TFE_FLOAT32, .ninputs = 3, .nregs = 5, .ninstr = 5, .code = code, .result = 3};
        tfe_axpy_prog m;
        tfe_axpy_match(&prog, &m);
        CHECK(m.ok && m.w == 0 && m.p == 1 && m.q == 2 && m.sub == sub && m.wfirst == wfirst,
              "program %d not matched", it);
        /* not matched: the same with a dead constant (six instructions) */
        tfe_finstr more[6] = {{.op = FOP_CONST, .dst = 4, .imm = 1.0}};
        memcpy(more + 1, code, sizeof code[0] * 5);
        tfe_fprog moreprog = prog;
        moreprog.ninstr = 6;
        moreprog.code = more;
        tfe_axpy_prog no;
        tfe_axpy_match(&moreprog, &no);
        CHECK(!no.ok, "a six-instruction program matched");
        tfe_tensor *in[3] = {w, p, q};
        tfe_tensor *vm = tensor_new(TFE_FLOAT32, 1, &n), *fast = inplace ? w : tensor_new(TFE_FLOAT32, 1, &n);
        REQUIRE(vm && fast, "out of memory");
        float *want = malloc((size_t)n * sizeof *want);
        REQUIRE(want, "out of memory");
        const float *wd = (const float *)tensor_data(w), *pd = (const float *)tensor_data(p), *qd = (const float *)tensor_data(q);
        for (int64_t i = 0; i < n; i++) {
            volatile float t = pd[shape == 0 ? 0 : i] * qd[shape == 1 ? 0 : i]; /* one rounding */
            float x = wfirst ? wd[i] : t, y = wfirst ? t : wd[i];
            want[i] = sub ? x - y : x + y;
        }
        REQUIRE(tfe_fused_run(&prog, in, vm) == 0, "vm: %s", tfe_error_msg());
        int rc = -1;
        REQUIRE(tfe_axpy_exec(&m, in, 3, fast, &rc) == 1 && rc == 0, "the one pass did not run");
        const float *vd = (const float *)tensor_data(vm), *fd = (const float *)tensor_data(fast);
        int bad_vm = 0, bad_ref = 0;
        for (int64_t i = 0; i < n; i++) {
            bad_vm += memcmp(&fd[i], &vd[i], sizeof(float)) != 0;
            bad_ref += memcmp(&fd[i], &want[i], sizeof(float)) != 0 && !(isnan(fd[i]) && isnan(want[i]));
        }
        CHECK(bad_vm == 0 && bad_ref == 0,
              "n %lld sub %d wfirst %d shape %d in place %d: %d differ from the VM, %d from the formula",
              (long long)n, sub, wfirst, shape, inplace, bad_vm, bad_ref);
        free(want);
        tensor_decref(vm);
        if (!inplace) tensor_decref(fast);
        tensor_decref(w);
        tensor_decref(p);
        tensor_decref(q);
    }
    /* a strided operand (a transposed view) goes to the VM */
    {
        int64_t s22[2] = {2, 2};
        tfe_tensor *w = tensor_new(TFE_FLOAT32, 2, s22), *g = tensor_new(TFE_FLOAT32, 2, s22);
        tfe_tensor *lr = tensor_from_f64(0.5, TFE_FLOAT32);
        for (int i = 0; i < 4; i++) ((float *)tensor_data(w))[i] = ((float *)tensor_data(g))[i] = (float)i;
        int64_t t = g->strides[0];
        g->strides[0] = g->strides[1];
        g->strides[1] = t;
        tfe_finstr code[5] = {{.op = FOP_LOAD, .dst = 0, .input = 1}, {.op = FOP_LOAD, .dst = 1, .input = 2},
                              {.op = OP_MUL, .dst = 2, .a = 0, .b = 1}, {.op = FOP_LOAD, .dst = 3, .input = 0},
                              {.op = OP_SUB, .dst = 3, .a = 3, .b = 2}};
        tfe_fprog prog = {.dtype = TFE_FLOAT32, .ninputs = 3, .nregs = 4, .ninstr = 5, .code = code, .result = 3};
        tfe_axpy_prog m;
        tfe_axpy_match(&prog, &m);
        tfe_tensor *in[3] = {w, lr, g};
        int rc = 0;
        CHECK(m.ok && tfe_axpy_exec(&m, in, 3, w, &rc) == 0, "a transposed operand was run in one pass");
        tensor_decref(w);
        tensor_decref(g);
        tensor_decref(lr);
    }
    return check_done("test_fused_axpy");
}
