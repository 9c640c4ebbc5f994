/* export_dyn.h — export's dynamic= dims (stage/export_dyn.c). Private to stage/export*.c. */
#ifndef TFE_STAGE_EXPORT_DYN_H
#define TFE_STAGE_EXPORT_DYN_H

#include "graph/graph.h"
#include "interp/interp.h"

/* dynamic= ("batch", or a record of parameter name -> spec) into dims: per
 * argument leaf (sig_flatten's order), per dim a name or NULL (dims[leaf]
 * NULL: none). A located error when a spec does not fit its argument. */
int ex_parse_dynamic(Interp *I, Value dyn, const FnInfo *info, int argc, const Value *argv, char ***dims);

/* Call f with every leaf doubled along its named dims; dargs (argc values,
 * the caller decrefs them) are the arguments it was called with. */
int ex_retrace_doubled(Interp *I, Value f, int argc, const Value *argv, char ***dims, Value *dargs);

/* g1 and g2, two traces of one function for other sizes, as one graph whose
 * dims that differ are unknown, when they are the same but for dims and
 * slices' bounds (graph_same_but_dims). Each slice of a dim that differs gets
 * ONNX starts and ends in *slice_se (per node: rank starts at [d], ends at
 * [TFE_MAX_RANK + d]) that pick what tfe does at both sizes: x[1:] ends at
 * INT64_MAX, x[:-1] at -1. NULL when they differ otherwise; *bad is then the
 * slice whose bounds no constant gives (computed from the size), or -1. */
Graph *ex_merge_traces(const Graph *g1, Graph *g2, int64_t ***slice_se, int *bad);
void ex_free_slices(int64_t **se, int n);

/* The sizes the model declares, in g's top region (a copy export owns):
 * from inputs with unknown dims, each op's by its infer rule, a slice's dim
 * unknown where its input's is (its bounds clamp to the run's size), the
 * later outputs of an op of several outputs (split, batch_norm_train) by
 * their own rule; with dynamic, the results of an if or while unknown. */
void ex_dyn_metas(Graph *g, bool dynamic);

#endif
