/* onnx_model.h — an ONNX model read from its bytes (stage/onnx_model.c) with
 * the bounds-checked reader util/pbr.h: the top graph's nodes, initializers,
 * inputs and outputs; a GRAPH attribute (If's branches, Loop's body) is
 * read the same way into a model of its own (OxAttr.g), nested at most
 * OX_MAX_DEPTH deep. */
#ifndef TFE_STAGE_ONNX_MODEL_H
#define TFE_STAGE_ONNX_MODEL_H

#include "tensor/tensor.h"

typedef struct OxAttr {
    char *name;
    int type;            /* AttributeProto.AttributeType */
    int64_t i;
    float f;
    char *s;
    int64_t *ints;
    int nints;
    tfe_tensor *t;       /* owned, or NULL */
    struct OxModel *g;   /* a GRAPH attribute's graph (owned), or NULL */
} OxAttr;

/* how deep subgraphs may nest (a malformed file could nest without end) */
#define OX_MAX_DEPTH 16

typedef struct OxNode {
    char *op;
    char **in, **out;
    int nin, nout;
    OxAttr *at;
    int nat;
} OxNode;

/* the one opset of the standard domain that import reads, as export writes */
#define OX_OPSET 17

/* An input's declared type: ONNX elem_type (0: not given), rank (-1: no
 * shape given), each dim's size (-1: unknown) and name (dim_param, or NULL). */
typedef struct OxType {
    int64_t elem;
    int rank;
    int64_t dims[TFE_MAX_RANK];
    char *dnames[TFE_MAX_RANK];
} OxType;

typedef struct OxModel {
    OxNode *nodes;
    int nnodes;
    char **init_names;
    tfe_tensor **inits;  /* owned */
    int ninits;
    char **inputs, **outputs; /* inputs: those that are not initializers */
    int ninputs, noutputs;
    OxType *in_types;    /* one per input */
} OxModel;

/* The model, or NULL with a message in err (malformed or unsupported bytes). */
OxModel *ox_model_read(const void *p, size_t n, char *err, size_t errcap);
/* The tfe dtype of an ONNX TensorProto data type; *ok false for one tfe
 * does not read (float, double, int32, int64 and bool it does). */
tfe_dtype ox_dtype_of(int64_t onnx, bool *ok);
/* An ONNX TensorProto.DataType's name ("uint8", "float16", ...). */
const char *ox_dtype_name(int64_t onnx);
void ox_model_free(OxModel *m);
const OxAttr *ox_attr(const OxNode *n, const char *name);

#endif
