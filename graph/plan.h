/* plan.h — the plan of a graph (graph/plan.c): its top region compiled once
 * into a flat instruction list with kernels resolved and static shapes fixed,
 * and its intermediates placed in one arena by liveness, so a cached call
 * allocates its outputs and little else and interprets no node it need not. */
#ifndef TFE_GRAPH_PLAN_H
#define TFE_GRAPH_PLAN_H

#include "graph/graph.h"
#include "tensor/fused_axpy.h"

/* How an instruction runs (graph/exec.c, grun_plan):
 *  PI_KERNEL: an op whose inputs have static shapes: its kernel is called
 *             directly on an output of the traced type and shape (the arena
 *             view, or a new tensor) — no infer, no dispatch;
 *  PI_FUSED:  the same for a fused group (tensor/fused.c);
 *  PI_NODE:   anything else (host calls, variable reads, random draws, views,
 *             conds, whiles, ops on values whose shape can change): the node
 *             as the graph walker runs it;
 *  PI_UPDATE: a variable update v.assign_sub(x) (assign, assign_add, ...)
 *             whose x the instruction just before it makes (an elementwise
 *             kernel or fused group that only the update reads: `defer`):
 *             one fused program computes x and the update and writes the
 *             variable's value in place (graph/exec_update.c); when that is
 *             not safe, the two instructions run as they would unfused. */
enum { PI_KERNEL, PI_FUSED, PI_NODE, PI_UPDATE };

typedef struct PInstr {
    uint8_t kind;
    int node;             /* the graph node */
    int nin;
    int *in;              /* value slots of the inputs (PI_KERNEL, PI_FUSED) */
    int out;              /* value slot of the output */
    tfe_kernel_fn kernel; /* PI_KERNEL */
    int nout;             /* outputs (PI_KERNEL, PI_FUSED): slots out, out + 1, ... */
    tfe_tensor **view;    /* by output: its place in the arena, made at the first
                             run and kept (owned), or NULL: a new tensor per run
                             (output 0) or one the kernel makes (the others) */
    int pair;             /* 1 + the index of the instruction this one runs at the
                             same time as (graph/sched.c), or 0; the earlier of
                             the two is delayed to the later's place */
    bool defer;           /* makes a PI_UPDATE's operand: runs with it, not here */
    int prod;             /* PI_UPDATE: the index of the instruction making its operand */
    int mode;             /* PI_UPDATE: GVAR_ASSIGN .. GVAR_DIV (graph/host.h) */
    struct tfe_fkernel *upd; /* PI_UPDATE: inputs (the variable's value, the operand's
                             inputs), the operand's program then the update (owned) */
    tfe_axpy_prog upd_axpy; /* PI_UPDATE: upd is w op (p * q), one pass (fused_axpy.h) */
    bool skip;            /* fused into its neighbour (bn_epilogues in graph/plan.c):
                             runs nothing, only releases its drops */
    int epi;              /* 1 + the index of the skipped relu whose output this
                             instruction writes as its output 0 (batch_norm_train
                             with relu), or 0 */
    tfe_attrs *at;        /* the kernel's attributes when not the node's (a conv
                             with its batch norm: the conv's, f[0] the eps), owned */
    const char *name;     /* its name in profiles when not the node's (static) */
    int *drop;            /* value slots read here for the last time, released after
                             it (not results, not read by a region) */
    int ndrop;
} PInstr;

typedef struct ExecPlan {
    PInstr *code;         /* the top region, in order */
    int ncode;
    int nkernel, nfused;  /* instructions that bypass the node walker */
    int64_t *offset;      /* by value slot: byte offset in the arena, or -1 (allocated as usual) */
    int nslots;
    size_t arena_bytes;   /* the arena's size: the most bytes live at once */
    size_t sum_bytes;     /* what the planned values would take one by one */
    int nplanned;
    int ninplace;         /* planned values that took the place of a dead input */
    int npairs;           /* concurrent pairs (graph/sched.c) */
    int nupdates;         /* PI_UPDATE instructions */
    int nbnrelu;          /* relu / relu_grad run inside a batch-norm kernel */
    int nconvbn;          /* convs run with their batch_norm_infer (and relu) */
    tfe_tensor *arena;    /* made at the first run, kept for the next (owned) */
    bool busy;            /* a run uses it (a run inside a run allocates as usual) */
} ExecPlan;

/* The plan of g's top region, or NULL when g is relaxed (inputs with unknown
 * dims: shapes change from call to call). */
ExecPlan *exec_plan_build(const Graph *g);
void exec_plan_free(ExecPlan *p);
/* A tensor of the node's output meta placed at the plan's offset for slot,
 * or NULL (not planned, or the arena cannot be made). */
tfe_tensor *exec_plan_tensor(ExecPlan *p, int slot, const tfe_meta *m);

/* TFE_DEBUG=3: the plan as text, one instruction a line (its output's
 * arena offset, "in place of" the input whose block it took, or "new").
 * TFE_DEBUG=4: each fused group's register program. Both malloc'd. */
char *exec_plan_to_text(const Graph *g, const ExecPlan *p);
char *graph_fused_programs_text(const Graph *g);

#endif
