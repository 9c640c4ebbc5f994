/* export.h — a staged function's graph as an ONNX model (stage/export.c). */
#ifndef TFE_STAGE_EXPORT_H
#define TFE_STAGE_EXPORT_H

#include "graph/graph.h"
#include "interp/interp.h"
#include "util/buf.h"

/* What export_graph needs beyond the graph: per graph input, its name, the
 * value it has now (written as an initializer when it is not an input of
 * the model: an outside binding, or an argument the trace used the value
 * of) and the names of its symbolic dims; the results' names. */
typedef struct ExportSpec {
    int nargs;             /* inputs 0 .. nargs-1 are the arguments' leaves */
    const char **in_names; /* per argument leaf */
    char ***dims;          /* per argument leaf: per dim a dim_param name or NULL; or NULL */
    bool *baked;           /* per input: its value is part of the graph (an initializer) */
    tfe_tensor **values;   /* per input: its value now */
    const char **out_names;/* per output of the top region */
    int64_t **slice_se;    /* per node: a dynamic slice's ONNX starts and ends, or NULL (export.c) */
} ExportSpec;

/* The ModelProto of g into model; -1 with a located error ("not exportable:
 * print at line 12 (...)") at the first node with no ONNX form. */
int export_graph(Interp *I, Graph *g, const ExportSpec *sp, Buf *model);

/* Why op has no ONNX form, or NULL; and whether export writes one. Every op
 * is one or the other (tests/onnx_export.py checks). */
const char *export_refusal(tfe_op op);
bool export_op_mapped(tfe_op op);

void stage_export_builtins_register(Interp *I);
/* import_onnx(path): an ONNX model as a callable (stage/import.c) */
void stage_import_builtins_register(Interp *I);

#endif
