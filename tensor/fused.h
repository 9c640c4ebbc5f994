/* fused.h — run a fused elementwise program: one pass over the data.
 *
 * The staged-graph optimizer (graph/opt_fuse.c) turns a chain or tree of elementwise
 * ops into a small register program; tfe_fused_run evaluates it chunk by
 * chunk (TFE_FUSED_CHUNK elements at a time), so no intermediate tensor is
 * materialised and the interpretation overhead is paid per chunk, not per
 * element. Registers are arrays of one chunk; each instruction is a tight
 * loop over the chunk.
 *
 * Numerics: every op is computed in the program's dtype with exactly the
 * formula of the unfused kernel: both are made from the op's one line in
 * tensor/elem.def (float32: single precision with expf, tanhf, ...). So a
 * fused program gives
 * results bitwise equal to running the same ops one by one, provided the
 * caller emits the same op sequence the unfused graph would run, in the same
 * dtype. Results may differ only where the program is not that sequence:
 *  - constants: FOP_CONST rounds imm to the program dtype (as the unfused
 *    path converts a weak literal); a constant the unfused graph would have
 *    kept in float64 (a strong float64 scalar promoting the op) is the
 *    caller's typing decision, not this VM's;
 *  - rewrites the optimizer may do (e.g. x/c -> x*(1/c), a-b -> a+(-b),
 *    re-association) change rounding; the VM itself never rewrites;
 *  - clip(x, lo, hi) is exactly OP_MAXIMUM(x, lo) then OP_MINIMUM(., hi),
 *    the same two steps k_clip does, so it is bitwise equal too.
 * where, comparisons, casts and integer/bool dtypes are not supported.
 */
#ifndef TFE_FUSED_H
#define TFE_FUSED_H

#include <stdint.h>

#include "tensor/ops.h"
#include "tensor/tensor.h"

/* Elements per chunk (register length). 256 keeps a register at 1 KiB
 * (float32) / 2 KiB (float64): a few dozen registers stay in L1. */
#define TFE_FUSED_CHUNK 256

/* The instruction set: an op of ops.def with a float formula in
 * tensor/elem.def (ELEM_UNARY: dst <- f(a); ELEM_BINARY: dst <- f(a, b)),
 * named by its tfe_op itself (OP_EXP), or one of two opcodes past the op
 * enum. Those two are not ops: they read no register but an input or an
 * immediate, and no op of the table means "this input" or "this literal". */
enum {
    FOP_LOAD = TFE_NOPS, /* dst <- inputs[input] at element i (broadcast per NumPy rules) */
    FOP_CONST,           /* dst <- (dtype)imm */
    FOP_END              /* opcodes are < FOP_END */
};

/* One instruction. dst/a/b are register indices in [0, nregs); a and b are
 * read only by unary (a) and binary (a, b) ops, ignore them otherwise.
 * dst may equal a or b (in place). input: FOP_LOAD only; imm: FOP_CONST only. */
typedef struct tfe_finstr {
    uint16_t op;           /* a tfe_op with an elem.def formula, FOP_LOAD or FOP_CONST */
    int16_t dst, a, b;
    int16_t input;
    double imm;
} tfe_finstr;

/* A program: code[0..ninstr) runs in order for every element; the value of
 * register `result` after the last instruction is the output element.
 * Every register an instruction reads must have been written by an earlier
 * instruction (checked: an error otherwise). */
/* A final reduction of the program's values (tfe_fprog.red). */
enum { TFE_FRED_NONE, TFE_FRED_SUM, TFE_FRED_MEAN };

typedef struct tfe_fprog {
    tfe_dtype dtype;       /* TFE_FLOAT32 or TFE_FLOAT64 */
    /* red: TFE_FRED_NONE, or the values over the program's domain (its
     * inputs broadcast over `rank` axes) summed (or averaged) over the last
     * red_axes axes: out has one element per row of the leading axes, summed
     * exactly as k_reduce sums a contiguous tensor (pairwise, the same parts),
     * so results are bitwise those of the unfused ops. */
    int red, red_axes, rank;
    int ninputs, nregs, ninstr;
    const tfe_finstr *code;
    int result;
} tfe_fprog;

/* out: a fresh contiguous tensor of dtype p->dtype (already allocated), N
 * elements; it must not overlap any input.
 * inputs[0..p->ninputs): each of dtype p->dtype, with any strides (views,
 * transposes, negative or zero strides), and a shape that broadcasts to out's
 * shape by NumPy rules: out's exact shape, one element (a scalar), or e.g. a
 * bias of shape (C,) against out (N, C).
 * Computes out[i] = program(inputs at i) for every i. Large N runs on all
 * cores (tfe_parallel_for, grain scaled by the program's cost); small N runs
 * inline on the calling thread. Must be called on the dispatching thread.
 * Returns 0, or -1 with tfe_error_set (bad program, dtype or shape mismatch,
 * out of memory, "interrupted"). */
int tfe_fused_run(const tfe_fprog *p, tfe_tensor *const *inputs, tfe_tensor *out);

/* The same in two steps, for a program run many times (a staged graph): the
 * program is validated once by tfe_fused_compile (NULL + error if invalid;
 * the kernel keeps its own copy of the code, p may be freed after), then
 * tfe_fused_exec runs it with the contract of tfe_fused_run. Validation costs
 * ~10 ns per instruction, comparable to running a short chunk. */
typedef struct tfe_fkernel tfe_fkernel;
tfe_fkernel *tfe_fused_compile(const tfe_fprog *p);
int tfe_fused_exec(const tfe_fkernel *k, tfe_tensor *const *inputs, tfe_tensor *out);
void tfe_fused_free(tfe_fkernel *k);

/* Number of register operands of an opcode: 0 (FOP_LOAD, FOP_CONST), 1 or
 * 2; -1 if it is neither of those nor an op with an elem.def formula. */
int tfe_fop_nargs(int fop);

/* The opcode computing ops.def op `op`: op itself when elem.def has its float
 * formula (ELEM_UNARY, ELEM_BINARY), else -1 (not elementwise, comparison,
 * where, cast, ...). clip is -1 too: emit OP_MAXIMUM then OP_MINIMUM. Float
 * dtypes only. */
int tfe_fop_of_op(tfe_op op);

/* The op's name ("exp"), "load" or "const", for dumps and errors; "?" when
 * not an opcode. */
const char *tfe_fop_name(int fop);

#endif
