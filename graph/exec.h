/* exec.h — the graph executor: the node walker (grun_region) and the
 * planned run of a cached call (grun_plan, graph/plan.h). */
#ifndef TFE_GRAPH_EXEC_H
#define TFE_GRAPH_EXEC_H

#include "graph/graph.h"

struct PInstr;

typedef struct GRun {
    void *host;          /* the host (the interpreter) this run calls back into (graph/host.h) */
    Graph *g;
    tfe_tensor **v;      /* every value of the graph (owned refs; NULL: not computed) */
    int frame_base;      /* run-time errors push the node's frames above this */
    tfe_attrs *draws;    /* by node: the seed and counter each random op drew in this run
                            (NULL until the first draw; owned) */
    struct ExecPlan *plan; /* the graph's memory plan while this run uses its arena, or NULL */
    struct GColl *coll;  /* the run's collectives: requests in flight, statistics (graph/
                            exec_dist.c); NULL until it meets one */
    long nops;           /* op and fused nodes run (for those statistics) */
    signed char *ran;    /* by node: 1 + the way a cond (0: regions[0] ran, 1: regions[1]) or a
                            loop (how many times it ran, capped as run_while says: 0 is zero
                            times, more is the way it ran) went in its last run; 0:
                            not run. NULL until one runs (owned). A staged call's result
                            is a number or a tensor by it (stage/staged.c, Trace.krules) */
    bool keep;           /* keep every value to the end of a planned run (the caller
                            reads some afterwards): no early release, no update in place */
    /* logreads: every run of a variable read inside a branch or loop body
     * is logged, in run order (stage/grad.c: a loop that assigns what it
     * reads reads a new tensor at every iteration, and its backward needs
     * each): log[i] (owned) was read by node lognode[i] */
    bool logreads;
    tfe_tensor **log;
    int *lognode, nlog, caplog;
} GRun;

/* Use g's memory plan for this run (a cached call; not a run inside a run). */
void grun_use_plan(GRun *x);

/* A run with inputs and constants in place (inputs: borrowed, g->ninputs). */
void grun_init(GRun *x, void *host, Graph *g, tfe_tensor *const *inputs);
void grun_release(GRun *x);
int grun_region(GRun *x, int r);
/* Run the top region by g's plan (grun_use_plan first; g->plan not NULL). */
int grun_plan(GRun *x);
int grun_node(GRun *x, int id);
/* A PI_KERNEL or PI_FUSED instruction of the run's plan (graph/plan.h). */
int grun_plan_instr(GRun *x, struct PInstr *c);
/* A PI_UPDATE instruction (graph/exec_update.c): 0 done, -1 error. */
int grun_update(GRun *x, struct PInstr *c);
/* Value slot := t (takes t; drops what was there). */
void grun_set(GRun *x, int slot, tfe_tensor *t);
static inline tfe_tensor *grun_value(GRun *x, GRef r) { return x->v[x->g->nodes[r.node].vbase + r.out]; }

#endif
