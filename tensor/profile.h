/* profile.h — the tensor layer's side of the profiler (util/profile.h):
 * timing each eager op at the dispatch entry (with its input shapes, device
 * and bytes allocated) and printing TFE_DEBUG=2 lines. */
#ifndef TFE_TENSOR_PROFILE_H
#define TFE_TENSOR_PROFILE_H

#include "tensor/ops.h"
#include "util/profile.h"

/* tfe_execute_eager when prof_hooked: the op timed and recorded. */
int tfe_prof_execute(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out);
/* "float32[2,3] int64[]" into buf (never longer than cap). */
void tfe_prof_shapes(char *buf, size_t cap, int nin, tfe_tensor *const *in);
/* The device of the first input with storage (0: cpu:0). */
int tfe_prof_device(int nin, tfe_tensor *const *in);
/* "backward matmul", interned once per op. */
const char *tfe_prof_bwd_name(tfe_op op);
/* Bytes the allocator handed out so far (for "bytes allocated"). */
int64_t tfe_prof_alloc_total(void);
/* The TFE_DEBUG=2 line of a kernel run: "tfe debug: WHAT NAME inputs ->
 * outputs device time" (what: op, kernel, fused). */
void tfe_prof_debug_op(const char *what, const char *name, int nin, tfe_tensor *const *in, int nout,
                       tfe_tensor *const *out, int64_t ns);
/* A live-bytes counter sample. */
void tfe_prof_live_bytes(void);

#endif
