/* plan.h — the memory plan of a graph: intermediates of the top region
 * placed in one arena by liveness (stage/plan.c), so a cached call allocates
 * its outputs and little else. */
#ifndef TFE_STAGE_PLAN_H
#define TFE_STAGE_PLAN_H

#include "stage/graph.h"

typedef struct ExecPlan {
    int64_t *offset;      /* by value slot: byte offset in the arena, or -1 (allocated as usual) */
    int nslots;
    size_t arena_bytes;   /* the arena's size: the most bytes live at once */
    size_t sum_bytes;     /* what the planned values would take one by one */
    int nplanned;
    tfe_tensor *arena;    /* made at the first run, kept for the next (owned) */
    bool busy;            /* a run uses it (a run inside a run allocates as usual) */
} ExecPlan;

/* The plan of g's top region, or NULL when nothing can be planned (unknown
 * dims, or no intermediate that only ops read). */
ExecPlan *exec_plan_build(const Graph *g);
void exec_plan_free(ExecPlan *p);
/* A tensor of the node's output meta placed at the plan's offset for slot,
 * or NULL (not planned, or the arena cannot be made). */
tfe_tensor *exec_plan_tensor(ExecPlan *p, int slot, const tfe_meta *m);

#endif
