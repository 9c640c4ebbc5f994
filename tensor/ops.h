/* ops.h — the op table (generated from ops.def) and the one dispatch entry.
 * Ownership: tfe_execute borrows its inputs and stores new references in out[]. */
#ifndef TFE_OPS_H
#define TFE_OPS_H

#include "tensor/tensor.h"

/* Op flags (the fourth column of ops.def). */
enum {
    F_ELEMWISE    = 1 << 0,  /* output[i] depends on inputs[i] (after broadcasting) */
    F_UNARY       = 1 << 1,  /* one tensor in, same shape out; bound as name(x) */
    F_BINARY      = 1 << 2,  /* two tensors in, broadcast; bound as name(a, b) */
    F_COMMUTATIVE = 1 << 3,
    F_REDUCTION   = 1 << 4,  /* takes axis/keepdims attrs */
    F_COMPARISON  = 1 << 5,  /* bool output */
    F_VIEW        = 1 << 6,  /* output may share the input's storage; kernel makes out[] */
    F_RANDOM      = 1 << 7,  /* consumes the random stream (stateful) */
    F_NODIFF      = 1 << 8,  /* no gradient (int/bool results, argmax, comparisons) */
    F_CREATE      = 1 << 9,  /* no tensor inputs */
    F_SELFOUT     = 1 << 10, /* kernel allocates out[] itself (shape depends on data);
                                an op of several outputs with neither F_VIEW nor this
                                gets out[0] made and out[1..] NULL (it makes them) or
                                given (graph/plan.c's arena: it writes into them) */
    F_GPU         = 1 << 11, /* has a GPU kernel (gpu/) */
    F_HALF        = 1 << 12, /* the CPU kernel takes float16/bfloat16 (conversions, views, matmul) */
    F_MAYFAIL     = 1 << 13, /* can fail on its inputs' values (not only their shapes or
                                dtypes): an integer division by zero, an index out of
                                range; the optimizer never drops one (graph/opt.c) */
    F_COLLECTIVE  = 1 << 14, /* talks to the other ranks (tensor/ops_dist.def): an ordered
                                effect, never folded, merged, fused or dropped; moved only by
                                graph/overlap.c (an allreduce split into a start and a wait) */
};

typedef enum tfe_op {
#define OP(id, name, nin, nout, flags, infer, kernel, grad) OP_##id,
#include "tensor/ops.def"
#undef OP
    TFE_NOPS
} tfe_op;

/* Attributes: the non-tensor arguments of an op. One struct for every op so
 * that a tracer and a tape can record any call by value. */
typedef struct tfe_attrs {
    int naxes;                  /* reductions etc.: -1 = all axes */
    int64_t axes[TFE_MAX_RANK];
    bool keepdims;
    tfe_dtype dtype;            /* cast target, creation dtype, result dtype */
    int nints;
    int64_t ints[32];           /* shapes, permutations, slices (start,stop,step per axis),
                                   conv stride/padding/dilation: documented per op in ops.def */
    double f[4];                /* fill value, dropout rate, ... */
    uint64_t seed, counter;     /* random ops: Philox key and starting counter */
    bool from_stream;           /* seed/counter came from the random stream (tfe_random_next),
                                   not an explicit seed: a graph draws afresh at every run */
} tfe_attrs;

/* One call of an op: what the infer rule and kernel see. */
typedef struct tfe_opcall {
    tfe_op op;
    int nin, nout;
    tfe_tensor *const *in;
    const tfe_attrs *at;
    tfe_tensor **out;
} tfe_opcall;

/* Result metadata computed by an infer rule before any kernel runs. */
typedef struct tfe_meta {
    tfe_dtype dtype;
    bool weak;
    int rank;
    int64_t shape[TFE_MAX_RANK];
} tfe_meta;

typedef int (*tfe_infer_fn)(const tfe_opcall *c, tfe_meta *out_meta); /* 0 or -1 + error */
typedef int (*tfe_kernel_fn)(const tfe_opcall *c);                     /* 0 or -1 + error */

typedef struct tfe_opinfo {
    const char *name;
    int nin, nout;              /* nin -1: variadic (concat, stack) */
    unsigned flags;
    tfe_infer_fn infer;
    tfe_kernel_fn cpu_kernel;
} tfe_opinfo;

extern const tfe_opinfo tfe_ops[TFE_NOPS];
int tfe_op_lookup(const char *name); /* -1 if none */

static inline void tfe_attrs_init(tfe_attrs *a) {
    *a = (tfe_attrs){0};
    a->naxes = -1;
    a->dtype = TFE_FLOAT32;
}

/* The one dispatch entry. Every op, eager or (later) traced or taped, goes
 * through here: infer the result, allocate outputs (unless F_VIEW/F_SELFOUT),
 * run the kernel of the inputs' device. Returns 0, or -1 with the error set. */
int tfe_execute(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out);

/* The same without the staging hook: always runs the kernel (the tracer and
 * the graph executor call it). */
int tfe_execute_eager(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out);
/* The same untimed (the profiler's own call, tensor/profile.c). */
int tfe_execute_eager_unprofiled(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out);
/* Set by stage/trace.c while a trace records; NULL otherwise. */
extern int (*tfe_trace_hook)(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out);

/* Convenience wrappers for one-output ops: return the result or NULL. */
tfe_tensor *tfe_unary(tfe_op op, tfe_tensor *x);
tfe_tensor *tfe_binary(tfe_op op, tfe_tensor *a, tfe_tensor *b);
tfe_tensor *tfe_call1(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at);

/* Output k > 0 of batch_norm_train / batch_norm_grad has shape (C,), not
 * output 0's (the infer rule's): the tracer's symbolic outputs ask here. */
void tfe_batch_norm_out_meta(const tfe_opcall *c, int k, tfe_meta *m);
/* Epilogues a plan fuses into the batch-norm kernels (graph/plan.c), no ops
 * of their own: batch_norm_train whose y only relu reads, writing relu(y)
 * as it writes y; batch_norm_grad whose dy is relu_grad(dy', a), called
 * with dy' as input 0 and a as an 8th input, computing relu_grad's value
 * where it reads dy. The same float operations as the two ops. */
int k_batch_norm_train_relu(const tfe_opcall *c);
/* batch_norm_train whose y only a fused {add relu} reads (a residual
 * block's end): input 3 is the other operand h, the output relu(y + h)
 * (radd: relu(h + y)), of y's dtype and shape */
int k_batch_norm_train_add_relu(const tfe_opcall *c);
int k_batch_norm_train_radd_relu(const tfe_opcall *c);
int k_batch_norm_grad_relu(const tfe_opcall *c);
/* conv2d whose output only a batch_norm_infer reads (and that one's only a
 * relu): inputs x, w, gamma, beta, mean, var, the conv's attributes with
 * f[0] the batch norm's eps; the output is the batch norm's (the relu's),
 * with the bits of the ops one after the other (tensor/kernels_nn.c) */
int k_conv2d_bn_infer(const tfe_opcall *c);
int k_conv2d_bn_infer_relu(const tfe_opcall *c);
/* the same whose batch norm's output only a fused {add relu} reads (a
 * residual block's end): input 6 is the other operand h, of the output's
 * dtype and shape; the output relu(y + h) (radd: relu(h + y)) */
int k_conv2d_bn_infer_add_relu(const tfe_opcall *c);
int k_conv2d_bn_infer_radd_relu(const tfe_opcall *c);

/* Broadcasting helper shared by infer rules: NumPy's rules; error names op. */
int broadcast_shapes(const char *opname, int ra, const int64_t *sa, int rb, const int64_t *sb,
                     int *rank_out, int64_t *shape_out);

/* The random stream: seed(n) resets it; each random op takes the next
 * counter block, so results do not depend on thread count. */
void tfe_random_seed(uint64_t seed);
void tfe_random_next(tfe_attrs *at, uint64_t nvalues); /* fills at->seed/counter */
/* The stream's place, and going back to it (a staged branch traced without
 * running draws nothing: stage/trace_cf.c). */
void tfe_random_state(uint64_t *key, uint64_t *counter);
void tfe_random_restore(uint64_t key, uint64_t counter);

#endif
