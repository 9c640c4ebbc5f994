/* import_nn.h — the neural-net and variadic ops of import_onnx
 * (stage/import_nn.c): Gemm, Conv, pools, Flatten, BatchNormalization,
 * Dropout, Max/Min/Sum/Mean, as tfe ops. */
#ifndef TFE_STAGE_IMPORT_NN_H
#define TFE_STAGE_IMPORT_NN_H

#include "stage/onnx_model.h"

/* Whether the op is one of import_nn.c's. */
bool import_nn_handles(const char *op);
/* The attributes' values checked when the model is read: 0, or -1 with a
 * message naming the op, the attribute and its value in err. */
int import_nn_check(const OxNode *n, char *err, size_t cap);
/* One node run on its inputs (in[i] NULL for an optional input left out):
 * 0 with *out, or -1 with a message in err (empty: a tensor error is set). */
int import_nn_run(const OxNode *n, tfe_tensor *const *in, tfe_tensor **out, char *err, size_t cap);

#endif
