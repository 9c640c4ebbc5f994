/* sched.h — concurrent pairs in a plan (graph/sched.c): two independent
 * GEMMs that a run on two or more threads does at the same time, one
 * OpenBLAS thread each, instead of one after the other. */
#ifndef TFE_GRAPH_SCHED_H
#define TFE_GRAPH_SCHED_H

#include "graph/plan.h"

/* Marks the pairs of p (PInstr.pair), after its arena is placed; none when
 * tfe runs on one thread. */
void sched_pairs(ExecPlan *p, const Graph *g);

#endif
