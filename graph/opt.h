/* opt.h — the graph optimizer: passes over a finished trace, each in a file
 * of its own (graph/opt_*.c), run in order by graph_optimize (graph/opt.c).
 *
 * Every pass keeps what a graph run does: the same values out (bitwise, except
 * fusion, whose float math may round differently), the same effects in the
 * same order. A pass rewrites uses and leaves unused nodes in place; dce
 * removes them and graph_compact renumbers. */
#ifndef TFE_GRAPH_OPT_H
#define TFE_GRAPH_OPT_H

#include "graph/graph.h"

enum { OPT_MAX_PASSES = 8 };

/* What graph_optimize did: nodes before and after each pass, and the text
 * IR before the first pass and after each (for dumps). */
typedef struct OptReport {
    int npasses;
    const char *names[OPT_MAX_PASSES];
    int before[OPT_MAX_PASSES], after[OPT_MAX_PASSES];
    char *text[OPT_MAX_PASSES + 1];   /* text[0]: the traced graph; text[i + 1]: after pass i */
    int fused_groups, fused_ops;      /* elementwise fusion */
    size_t arena_bytes, planned_bytes; /* the memory plan (graph/plan.h): the arena, and the
                                         intermediates it holds taken one by one */
    int in_place;                     /* planned values that took a dead input's place */
    int overlapped;                   /* allreduces split into a start and a wait (graph/overlap.h) */
    int updates;                      /* variable updates fused with their operand (graph/plan.h) */
} OptReport;

/* The passes, in the order they run. */
extern const char *const opt_pass_names[];
int opt_pass_index(const char *name);     /* -1 when there is none */

/* Optimize g in place (it must be compact: graph_compact). keep_text: fill
 * report->text. Returns 0, or -1 with the tensor error set (the graph is
 * then the traced one, unchanged in meaning). */
int graph_optimize(Graph *g, OptReport *report, bool keep_text);
void opt_report_free(OptReport *r);
/* "fold 14 -> 12, algebra 12 -> 11, ...": a malloc'd line. */
char *opt_report_line(const OptReport *r);


/* --- for the passes ----------------------------------------------------------------- */

/* Uses of old (node inputs, region results) now read new: a pass over the
 * graph, so a pass replacing many values collects them in a redirect map
 * instead (opt_redirect_new: one entry per value, node -1 where it stays;
 * opt_redirect_get follows it; opt_redirect_node updates one node's inputs;
 * opt_redirect_apply updates every use, then frees the map). */
void opt_replace_uses(Graph *g, GRef old, GRef now);
GRef *opt_redirect_new(const Graph *g);
GRef opt_redirect_get(const Graph *g, const GRef *map, GRef r);
void opt_redirect_node(Graph *g, const GRef *map, int id);
void opt_redirect_apply(Graph *g, GRef *map);
/* The values that a branch or a loop body ends on, or a loop starts from
 * (pinned: a run hands them on, as the if's or loop's results, as the
 * tensors they are; a pass that made one another node's value would make
 * two results one tensor where eager code has two). Indexed by vbase + out;
 * owned by the caller. */
bool *opt_pinned_values(const Graph *g);
/* Does running node id do something besides computing its outputs (a host
 * call, a random draw, a variable read, or a cond/while with one inside)? */
bool opt_has_effect(const Graph *g, int id);
/* Can running node id (an op or a fused group) stop the run with an error
 * that depends on the values or sizes it gets at run time (ops marked
 * F_MAYFAIL unless their constant operands rule it out, and, in a relaxed
 * trace, ops whose shape checks read an unknown dim)? Such a node is never
 * dropped: an eager run would stop there. unc: opt_uncertain_dims(g), made
 * once per pass. */
bool opt_may_fail(const Graph *g, int id, const bool *unc);
/* Is g a relaxed trace (an input with an unknown dim)? */
bool opt_graph_relaxed(const Graph *g);
/* In a relaxed trace: per value, may its dims differ at run time from the
 * known ones the graph records (a malloc'd array)? NULL: g is not relaxed. */
bool *opt_uncertain_dims(const Graph *g);
/* The value of a constant node's output, or NULL. */
static inline tfe_tensor *opt_const(const Graph *g, GRef r) {
    const GNode *n = &g->nodes[r.node];
    return n->kind == G_CONST ? n->value : NULL;
}
static inline bool opt_same_meta(const tfe_meta *a, const tfe_meta *b) {
    if (a->dtype != b->dtype || a->weak != b->weak || a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->shape[i] != b->shape[i] || a->shape[i] < 0) return false;
    return true;
}
/* Turn node id into a constant with value t (takes t). */
void opt_make_const(Graph *g, int id, tfe_tensor *t);

int opt_fold(Graph *g);       /* each returns the number of rewrites, or -1 */
int opt_algebra(Graph *g);
int opt_cse(Graph *g);
int opt_dce(Graph *g);
int opt_fuse(Graph *g, OptReport *r);
/* The op of the op table a fused instruction stands for (graph/opt_fuse.c). */
tfe_op opt_op_of_fop(int fop);
/* conv2d + bias (+ relu) -> conv2d_bias(_relu) (graph/opt_conv.c). */
int opt_conv(Graph *g);
/* A backward's relu mask a > 0 (relu_grad(dy, a), greater(a, 0)) reads
 * relu(a) instead, where that is computed before it: the same bools, and
 * then only relu reads a (graph/opt_fuse.c). Returns the rewrites. */
int opt_relu_masks(Graph *g);

#endif
