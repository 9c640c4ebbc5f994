/* graph.h — the dataflow graph of a staged function: nodes, regions, values.
 *
 * A Graph is a flat array of nodes. Every node belongs to one region: the top
 * region (the function body) or a region of a control-flow node (the two
 * branches of a cond; the condition and body of a while). A region lists its
 * nodes in execution order (the order the tracer met them, which is program
 * order, so effects are ordered by construction) and names its outputs. A
 * node in a region may read any value defined earlier in an enclosing region
 * (lexical scoping, as in MLIR regions), so branches need no capture lists.
 *
 * Ownership: the Graph owns its nodes, their attrs, constants (tensor refs)
 * and the payloads of host/variable nodes (GNode.host, through graph/host.h).
 *
 * The graph core (graph/: this IR, its printing, the optimizer, the planner
 * and the executor) knows tensors but not the interpreter: what a host node
 * calls and a variable node reads is the host's (stage/host_node.h), reached
 * through the functions it registers (graph/host.h). */
#ifndef TFE_GRAPH_GRAPH_H
#define TFE_GRAPH_GRAPH_H

#include <string.h>
#include "tensor/ops.h"
#include "util/loc.h"

typedef enum GKind {
    G_INPUT,     /* an argument leaf or an outside binding read by the body */
    G_CONST,     /* a tensor made at trace time (a literal, zeros(3), ...) */
    G_OP,        /* an op of the op table */
    G_VAR_READ,  /* the current value of a variable (effect-ordered) */
    G_HOST,      /* a call back into the interpreter at run time: print,
                    variable updates, @host functions (effect-ordered) */
    G_COND,      /* regions[0] if in[0] is true else regions[1] */
    G_WHILE,     /* regions[0]: condition of the carried values,
                    regions[1]: the body; in[] are the initial carried values */
    G_PARAM,     /* a carried value inside a while region */
    G_FUSED,     /* elementwise ops run as one loop (graph/opt_fuse.c): prog's
                    inputs are in[], ops[] the op each instruction stands for */
} GKind;

/* A value: output `out` of node `node`. */
typedef struct GRef { int node, out; } GRef;

typedef struct GRegion {
    int *nodes;
    int n, cap;
    GRef *outs;          /* the region's results */
    int nouts;
    int *params;         /* G_PARAM nodes (while regions) */
    int nparams;
    int parent;          /* the enclosing region (-1 for the top) */
} GRegion;

/* The call frames between the staged function and the node's expression
 * (calls inlined into the graph), so run-time errors print the traceback
 * an eager run would. Shared by nodes; never freed before the graph. The
 * frames are the host's (struct Frame, interp/internal.h; opaque here): the
 * host fills them in and releases what they hold (GHost.frames_release). */
typedef struct GFrames { int n; struct Frame *f; struct GFrames *next_all; } GFrames;

/* One backward graph of a graph (stage/grad.c), for the dtypes and shapes
 * of the backward's inputs it was traced with: a relaxed graph runs with
 * other sizes, and a backward traced for one size is not one for another. */
typedef struct GBwd {
    struct Graph *g;
    bool *has;           /* per source: does it get a gradient (g's outputs are those);
                            has[n + i], n sources: and a flag after them, true when none
                            (a loop ran zero times: stage/grad.c) */
    tfe_meta *key;       /* per input of g: the dtype, weakness and shape it was traced for;
                            then the shapes the forward's data-shaped values (x[mask]) had
                            (stage/grad.c, data_shapes) */
    int nkey;
    bool *acc;           /* per source: was its gradient so far an input (after the others) */
    int nsrc;
    int *same;           /* per source: the first one that was the same tensor (its
                            gradient is that one's: stage/grad.c, same_sources), or -1;
                            NULL: none */
    int *held, nheld;    /* the slots whose tensors it reads from the forward call's tape
                            entry, in input order, after a flag (1: a call that hands them
                            out for a higher order): stage/grad.c, GCallGrad.xslot */
    struct GBwd *next;
} GBwd;

typedef struct GNode {
    GKind kind;
    tfe_op op;           /* G_OP */
    tfe_attrs *at;       /* G_OP (owned) */
    int nin;
    GRef *in;
    int nout;
    tfe_meta *meta;      /* per output: dtype, weak, rank, shape (-1: unknown) */
    int region;          /* -1: top; otherwise the index of the owning region */
    int effect_dep;      /* the previous effect node (a control edge), or -1 */
    Loc loc;             /* the expression that made the node */
    GFrames *frames;
    tfe_tensor *value;   /* G_CONST (owned) */
    struct HostNode *host; /* G_VAR_READ, G_HOST: what the host keeps for the node (the
                            variable; the callable, its arguments, HostSync), opaque here:
                            made, copied, compared and freed through graph_host (graph/host.h) */
    bool host_nil;       /* G_HOST: the call returned nil (no result output) */
    int input_index;     /* G_INPUT: position in Graph.inputs */
    int at_from;         /* G_OP random: a replay of node at_from's draw (a gradient
                            rule's, e.g. dropout's mask): its seed and counter are
                            those node's at this run; -1 otherwise */
    int outer_out;       /* G_VAR_READ in a cond run as one tape entry while tracing (stage/
                            trace_cf.c): 1 + the output of that cond in the trace's graph that
                            hands on this read's value (node outer_node), or 0 */
    int outer_node;
    int fresh_region;    /* such a read (not its stand-in): the trace's region of its branch
                            (stage/trace_cf.c, mark_exported), or 0 */
    bool after_assign;   /* ... which follows an assign of its variable in its branch */
    bool at_end;         /* ... and no assign follows it there: its value is the one after the if */
    bool stand_in;       /* G_VAR_READ: the stand-in for such a read in the other branch, which
                            no tape notes as a read */
    char *label;         /* G_INPUT: what it is ("x", "x[1]", "lr (outside)"); owned, may be NULL */
    int vbase;           /* its outputs are values vbase .. vbase+nout-1 */
    int regions[2];      /* G_COND, G_WHILE: indices into Graph.regions */
    int cf_id;           /* G_COND, G_WHILE: its id in the graph as traced, kept through the
                            optimizer and copies (a number-or-tensor rule finds it by it:
                            stage/staged.c, KRule.anchor); -1 otherwise */
    struct tfe_fprog *prog; /* G_FUSED: the program (owned, with its code) */
    struct tfe_fkernel *fkernel; /* G_FUSED: prog checked once, at its first run (owned) */
    uint64_t prov_reach; /* G_FUSED, once prov_known: the inputs (bit i) its result is computed
                            from through instructions with a gradient (graph/exec.c) */
    bool prov_known;
    bool sig_known, sig_result; /* G_FUSED: once known, whether the result is a sigmoid's (graph/exec.c) */
    int *fused_lines;    /* G_FUSED: per instruction of prog, the source line of the op it
                            computes (0: a load or a constant), for graph_to_dot (owned) */
    uint8_t half;        /* G_OP allreduce split by graph/overlap.c: GH_START or GH_WAIT; else GH_WHOLE */
    bool start_blocks;   /* GH_START whose wait follows it with no op between (nothing to
                            overlap): it makes the blocking call, which costs less than a
                            nonblocking one waited for at once */
} GNode;

/* The halves of a collective that overlaps what runs between them
 * (graph/overlap.c): the start sends, the wait finishes (graph/exec.c). */
enum { GH_WHOLE, GH_START, GH_WAIT };

typedef struct Graph {
    int refcount;
    char *name;          /* the staged function's name */
    GNode *nodes;
    int n, cap;
    GRegion *regions;    /* regions[0] is the top region */
    int nregions, capregions;
    int *inputs;         /* G_INPUT nodes in input order */
    int ninputs;
    int nvals;           /* values in all: the executor's array size */
    GFrames *frames_all;
    GBwd *bwd;           /* its backward graphs, once built, newest first (stage/grad.c) */
    struct Graph *raw;   /* the graph as traced, before the optimizer: what backwards are
                            derived from, so their sums run in the order an eager tape's do */
    struct OptReport *opt; /* what the optimizer did (graph/opt.h), or NULL */
    struct ExecPlan *plan; /* its memory plan (graph/plan.h), or NULL */
    tfe_tensor **scratch; /* a value array kept for the next run (graph/exec.c) */
    int scratch_cap;
    bool busy;           /* scratch is in use (a run inside a run takes its own) */
    bool *keep_use;      /* by slot: a value a backward graph read where a call under a
                            tape kept it (stage/grad.c, keep_graph), or NULL: none built */
    int inner_tapes;     /* the most tapes made inside the trace active at once while it
                            recorded a node: a tape outside a call of the graph takes a
                            gradient of that order plus one (stage/grad.c) */
    bool noted_loops;    /* a cond or loop of a trace in progress, run as one tape entry: a
                            tape made in that trace notes its loops (stage/trace_cf.c) */
} Graph;

/* memcpy/memcmp/memmove that accept NULL pointers with a zero length (empty
 * arrays here are often NULL, which the C library functions do not allow). */
static inline void mem_copy(void *d, const void *s, size_t n) { if (n) memcpy(d, s, n); }
static inline void mem_move(void *d, const void *s, size_t n) { if (n) memmove(d, s, n); }
static inline int mem_cmp(const void *a, const void *b, size_t n) { return n ? memcmp(a, b, n) : 0; }

/* Same dtype, rank and dims (weakness aside): can a tensor of meta a stand
 * where one of meta b was planned (graph/plan.c, graph/exec.c)? */
static inline bool meta_same_shape(const tfe_meta *a, const tfe_meta *b)
{
    if (a->dtype != b->dtype || a->rank != b->rank) return false;
    for (int d = 0; d < a->rank; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

Graph *graph_new(const char *name);
void graph_decref(Graph *g);
/* Append a node of kind k with nin inputs and nout outputs to region r;
 * returns its index (in[] and meta[] zeroed for the caller to fill). */
int graph_add(Graph *g, int r, GKind k, int nin, int nout);
int graph_add_region(Graph *g, int parent);
/* Is a value of region `def` visible from region `use` (def encloses use)? */
bool graph_region_visible(const Graph *g, int def, int use);
static inline GNode *gnode(Graph *g, int i) { return &g->nodes[i]; }

/* A graph that computes just node id (a cond or while) of g: its inputs are
 * the values of g the node reads from outside (*caps, malloc'd, in input
 * order). Used to make such a node one tape entry while tracing. */
Graph *graph_extract(const Graph *g, int id, GRef **caps, int *ncaps);

/* A deep copy (sharing g's frames: keep g alive as long as the copy). */
Graph *graph_clone(const Graph *g);

/* Drop the nodes and regions no live region reaches (what failed attempts at
 * conds and loops left) and number the rest densely, in order. Only on a
 * finished graph: node ids change. */
void graph_compact(Graph *g);

/* Are a and b the same graph but for the sizes of dims (node by node: kinds,
 * ops, attributes, inputs, constants' values, effects, regions)? Two traces
 * of one function for different sizes are, unless the body made something
 * of a size (a constant of x's shape, a reshape to x's size, a gradient's
 * seed): then a trace with that dim unknown would be wrong (stage/staged.c). */
bool graph_same_but_dims(const Graph *a, const Graph *b);

/* Same dtype, shape and bits (NaNs equal to themselves; -0.0 not 0.0), with
 * at most max_elems elements (-1: any number); false for symbolic tensors. */
bool graph_tensor_equal(const tfe_tensor *a, const tfe_tensor *b, int64_t max_elems);

/* Text IR (graph/graph_print.c): one line per node, regions indented.
 * Returns a malloc'd string. dot: Graphviz. */
char *graph_to_text(const Graph *g);
char *graph_to_dot(const Graph *g);

#endif
