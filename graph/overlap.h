/* overlap.h — splitting a staged graph's allreduces into a start and a wait,
 * scheduled so that the reduction overlaps the rest of the backward pass
 * (graph/overlap.c; docs/distributed.md, "Gradient buckets and overlap"). */
#ifndef TFE_GRAPH_OVERLAP_H
#define TFE_GRAPH_OVERLAP_H

#include "graph/graph.h"

/* Every allreduce of g's top region becomes a start (GNode.half GH_START: it
 * sends its input, its output is the buffer in flight) and a wait (GH_WAIT:
 * in[0] is the start's output, its output the reduced tensor). The start is
 * moved up to just after what its input needs (the pure ops computing it
 * move up with it), but never above an earlier effect that could talk to
 * the other ranks or stop the run (another collective, a host call, an op
 * that can fail, a cond or while with an effect inside), so every rank
 * issues its collectives in the same order and an error stops the run
 * where it did. The wait is moved down to just before the first node that
 * reads the result. The graph is renumbered in the new order. Run after the
 * optimizer passes (they know nothing of halves). Returns the number of
 * allreduces split. */
int graph_overlap_collectives(Graph *g);

#endif
