/* exec_dist.h — the executor's side of an overlapped allreduce (graph/
 * overlap.c splits it): running the start and the wait, letting Open MPI
 * move the data between the other nodes, and the overlap statistics
 * ($TFE_DIST_STATS; docs/distributed.md, "Gradient buckets and overlap"). */
#ifndef TFE_GRAPH_EXEC_DIST_H
#define TFE_GRAPH_EXEC_DIST_H

#include "graph/exec.h"

/* A start half: agree with the other ranks, copy the input into a new
 * tensor (the node's output) and start the allreduce on it. */
int grun_coll_start(GRun *x, GNode *n);
/* A wait half: wait for its start's request, finish a mean, and hand the
 * buffer on as the result. */
int grun_coll_wait(GRun *x, GNode *n);
/* A whole collective (not split), timed for the statistics. */
int grun_coll_whole(GRun *x, GNode *n, int (*run)(GRun *, GNode *));
/* Between two nodes: progress outstanding requests; count the node run. */
void grun_coll_step(GRun *x, const GNode *n);
/* At the end of a run: wait for what an error left in flight (its buffer
 * must outlive MPI's use of it) and print the run's statistics. */
void grun_coll_end(GRun *x);

#endif
