/* tensor.h — dtypes, storage, tensors (views by byte strides), the error slot.
 * Ownership: every function returning tfe_tensor* returns a new reference
 * (release it with tensor_decref); tensor arguments are borrowed. */
#ifndef TFE_TENSOR_H
#define TFE_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TFE_MAX_RANK 8

typedef enum tfe_dtype {
    TFE_BOOL, TFE_INT32, TFE_INT64, TFE_FLOAT32, TFE_FLOAT64,
    TFE_FLOAT16, TFE_BFLOAT16, /* conversions, views and matmul on the CPU; math on a GPU */
    TFE_NDTYPES
} tfe_dtype;

size_t dtype_size(tfe_dtype dt);
const char *dtype_name(tfe_dtype dt);         /* "float32" */
int dtype_from_name(const char *name);         /* -1 if unknown */
static inline bool dtype_is_float(tfe_dtype dt) { return dt >= TFE_FLOAT32; }
static inline bool dtype_is_int(tfe_dtype dt) { return dt == TFE_INT32 || dt == TFE_INT64; }

/* Promotion (docs/language.md "Values"): bool < int32 < int64 < float32 < float64.
 * A weak operand (a bare literal, or a result of weak operands only) takes
 * the other's dtype within its kind; a weak float against an int/bool gives
 * float32. *weak_out is true only when both are weak. */
tfe_dtype dtype_promote(tfe_dtype a, bool weak_a, tfe_dtype b, bool weak_b, bool *weak_out);

/* Devices: 0 is cpu:0; GPUs are 1.. (tensor/device.h). */
typedef struct tfe_storage {
    int refcount;
    int device;
    size_t nbytes;
    void *data;          /* from the caching allocator (tensor/alloc.c) */
    bool exact;          /* from tfe_alloc_exact (a plan's arena), not a size class */
} tfe_storage;

typedef struct tfe_tensor {
    int refcount;
    tfe_dtype dtype;
    bool weak;                        /* 0-d weak scalar (bare literal) */
    bool softmax_out;                 /* made by the softmax op itself (eager, traced or a graph's
                                         node): a loss from logits refuses it (check_logits in
                                         interp/builtins.c); a view, a copy or any other op's
                                         result is a new tensor without it */
    bool sigmoid_out;                 /* the same for the sigmoid op: the binary loss from logits
                                         refuses it (check_logits(..., binary=true)) */
    uint16_t grad_for;                /* a tape's gradient: the id of the variable it is the gradient
                                         of (interp/builtins_autodiff.c, variable ids wrap: equal ids
                                         may be two variables, different ids never one); 0 none,
                                         TFE_GRAD_FOR_MANY when one tensor is several's; an
                                         optimizer's step refuses another variable's (check_grads) */
    int rank;
    int64_t shape[TFE_MAX_RANK];
    int64_t strides[TFE_MAX_RANK];    /* in bytes; may be 0 (broadcast) or negative */
    int64_t offset;                   /* in bytes from storage->data */
    tfe_storage *storage;
    void *node;                       /* while tracing: the tracer's TNote (stage/trace.c); else NULL */
    uint64_t serial;                  /* when it was made: tfe_tensor_serial_now() then (a tape's
                                         gradient tells a target made outside its with block) */
    uint64_t prov;                    /* provenance: a handle of the exact set of trainable variables
                                         it was computed from (tensor/prov.c; 0: none); an op's output
                                         gets the union of its inputs' unless the op has no gradient,
                                         so a tape's gradient can tell a target that depends on a
                                         source through a tensor made before the tape recorded
                                         (interp/builtins_autodiff.c, early_read). Written only by
                                         tfe_prov_assign (it holds a reference) */
} tfe_tensor;

enum { TFE_GRAD_FOR_MANY = 0xffff };

/* The provenance of an op's outputs (tfe_tensor.prov): or'ed from its inputs
 * when the op has a gradient and an output is a float; nothing otherwise (a
 * comparison, argmax, stop_gradient, an int result carry no gradient). */
void tfe_prov_propagate(int op, int nin, tfe_tensor *const *in, int nout, tfe_tensor *const *out);

/* Provenance sets (tensor/prov.c): handles of refcounted sets of variable
 * ids. singleton: a new set of one id, held once by the caller. union: a
 * handle of a | b, not held (keep it by tfe_prov_assign before the next
 * tfe_prov_collect). assign: *field = h, holding h, releasing the old.
 * collect: frees the sets nobody holds once there are many; call it only
 * where no unheld handle is in hand. has: whether id is in the set. */
uint64_t tfe_prov_singleton(uint32_t id);
void tfe_prov_retain(uint64_t h);
void tfe_prov_release(uint64_t h);
void tfe_prov_assign_slow(uint64_t *field, uint64_t h);
static inline void tfe_prov_assign(uint64_t *field, uint64_t h) {
    if (*field != h) tfe_prov_assign_slow(field, h); /* (most often 0 and 0) */
}
void tfe_prov_collect(void);
uint64_t tfe_prov_union_slow(uint64_t a, uint64_t b);
static inline uint64_t tfe_prov_union(uint64_t a, uint64_t b) {
    return a == b || !b ? a : !a ? b : tfe_prov_union_slow(a, b);
}
bool tfe_prov_has(uint64_t h, uint32_t id);

/* Marks out as the output of softmax or sigmoid (tfe_tensor.softmax_out,
 * sigmoid_out); op is one of them. */
void tfe_mark_prob_out(int op, tfe_tensor *out);

/* The serial of the latest tensor made (each new tensor gets the next). */
uint64_t tfe_tensor_serial_now(void);

/* The error slot: a failing tensor function sets the message (which names the
 * op and the shapes/dtypes) and returns NULL / -1. The interpreter adds the
 * source location. Messages never end with a newline or period. */
void tfe_error_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *tfe_error_msg(void);
void tfe_error_clear(void);

/* Ctrl-C: set asynchronously by the REPL's SIGINT handler; long kernels poll
 * it between chunks and fail with "interrupted". */
extern volatile int tfe_interrupted;

/* Caching allocator (sized free lists; 64-byte aligned). */
void *tfe_alloc(size_t nbytes);     /* NULL + error set on failure */
void tfe_free(void *p, size_t nbytes);
/* A block of nbytes rounded up to 64 only, not to a size class (which can
 * add a quarter): for a long-lived block made once, a plan's arena
 * (graph/plan.c); it is never cached, tfe_free_exact returns it. */
void *tfe_alloc_exact(size_t nbytes);
void tfe_free_exact(void *p, size_t nbytes);
void tfe_alloc_trim(void);          /* return cached blocks to the system */
/* total_bytes: every block handed out so far, rounded (the profiler's "bytes allocated") */
typedef struct tfe_alloc_stats { size_t live_bytes, cached_bytes, peak_bytes, n_malloc, n_hits, total_bytes; } tfe_alloc_stats;
tfe_alloc_stats tfe_alloc_get_stats(void);
void tfe_alloc_reset_peak(void);   /* the peak starts again from what is live now */
/* Cap on live tensor bytes (0: no cap); past it tfe_alloc fails with an
 * error. Defaults to $TFE_MAX_ALLOC_BYTES (read on first use). */
void tfe_alloc_set_limit(size_t nbytes);
size_t tfe_alloc_get_limit(void);

/* Construction. New tensors are contiguous (row-major) on the CPU. */
tfe_tensor *tensor_new(tfe_dtype dt, int rank, const int64_t *shape);      /* uninitialised */
tfe_tensor *tensor_new_exact(int64_t nbytes); /* bool[nbytes], uninitialised, from tfe_alloc_exact */
tfe_tensor *tensor_zeros(tfe_dtype dt, int rank, const int64_t *shape);
tfe_tensor *tensor_from_f64(double v, tfe_dtype dt);                        /* 0-d */
tfe_tensor *tensor_from_i64(int64_t v, tfe_dtype dt);                       /* 0-d */
tfe_tensor *tensor_view(tfe_tensor *base, int rank, const int64_t *shape,
                        const int64_t *strides, int64_t offset);            /* shares storage */
tfe_tensor *tensor_contiguous(tfe_tensor *t);  /* t itself (incref'd) if already contiguous */
tfe_tensor *tensor_copy(tfe_tensor *t);        /* always a fresh contiguous copy */

/* Staging (stage/trace.c): a symbolic tensor has a dtype and shape but no
 * storage (storage == NULL); an alias is a second header over t's storage. */
tfe_tensor *tensor_symbolic(tfe_dtype dt, bool weak, int rank, const int64_t *shape);
tfe_tensor *tensor_alias(tfe_tensor *t);
/* Called (while a trace records) when the host reads the value of a tensor
 * whose node is set; returns true when there is no value to read. */
extern bool (*tfe_value_read_hook)(const tfe_tensor *t);
/* While a trace records: the dims of traced tensor t whose size depends on
 * the data (the rows x[mask] selects, and what is computed from them), a bit
 * per dim; a gradient rule reads those at run time rather than making a
 * shape of their traced sizes (stage/trace.c). NULL when no trace records. */
extern uint32_t (*tfe_dyn_dims_hook)(const tfe_tensor *t);
static inline uint32_t tfe_dyn_dims(const tfe_tensor *t)
{
    return t && t->node && tfe_dyn_dims_hook ? tfe_dyn_dims_hook(t) : 0;
}

static inline void tensor_incref(tfe_tensor *t) { t->refcount++; }
void tensor_decref(tfe_tensor *t);

int64_t tensor_numel(const tfe_tensor *t);
int64_t shape_numel(int rank, const int64_t *shape); /* -1 on overflow */
bool tensor_is_contiguous(const tfe_tensor *t);
static inline char *tensor_data(const tfe_tensor *t) { return (char *)t->storage->data + t->offset; }

/* Element access by flat row-major index (slow path: tests, printing). */
double tensor_get_f64(const tfe_tensor *t, int64_t flat);
int64_t tensor_get_i64(const tfe_tensor *t, int64_t flat);
/* The same without telling a trace: for kernels, which read their own inputs
 * while computing an op (a traced gather's indices are data of the graph,
 * not a value the trace depends on, as they are for int(x) or printing). */
int64_t tensor_load_i64(const tfe_tensor *t, int64_t flat);
double tensor_load_f64(const tfe_tensor *t, int64_t flat); /* (no trace is told of the read) */

/* "(2, 3)", "()" and "(5,)"; buf of at least 200 bytes; returns buf. */
char *shape_str(int rank, const int64_t *shape, char *buf);

/* Printing (docs/language.md "Values"). Returns a malloc'd string. */
char *tensor_to_string(const tfe_tensor *t);
/* Shortest decimal that reads back to v in dtype dt (float32/float64),
 * always with '.' or an exponent: "1.0", "0.1", "1e-05", "inf", "nan". */
void format_float_shortest(double v, tfe_dtype dt, char *buf, size_t n);

/* Threads: run fn over [0, n) in chunks on all cores when n >= grain*2,
 * inline otherwise (so tiny work never pays threading costs). */
typedef void (*tfe_range_fn)(int64_t begin, int64_t end, void *ctx);
void tfe_parallel_for(int64_t n, int64_t grain, tfe_range_fn fn, void *ctx);
int tfe_num_threads(void);
/* Is this thread running a chunk of a tfe_parallel_for (a pool worker, or
 * the caller inside one)? Nested calls then run inline. */
int tfe_in_parallel(void);

#endif
