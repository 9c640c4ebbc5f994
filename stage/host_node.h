/* host_node.h — what a G_HOST or G_VAR_READ node of a graph holds for the
 * interpreter (GNode.host, opaque to the graph core): the variable read, or
 * the callable, its arguments and the bindings kept in step with it. Made,
 * copied, compared, printed, run and freed by stage/graph_host.c, which
 * registers those functions with the core (graph/host.h). */
#ifndef TFE_STAGE_HOST_NODE_H
#define TFE_STAGE_HOST_NODE_H

#include "graph/graph.h"
#include "interp/internal.h"

/* One argument of a host call: its value at trace time as a template
 * (stage/sig.h) whose nleaves number/tensor leaves are the node's next
 * inputs; nleaves 0: the Value itself. */
typedef struct HostArg { Value v; int nleaves; } HostArg;

/* A G_HOST node that keeps the interpreter's state and the graph in step
 * (stage/trace.c, "host calls and the state around them"):
 * - env set: a binding outside the staged function. write: store the
 *   node's inputs there, rebuilt from tmpl (the body's value of it, before
 *   a @host call that may read it); else read it (after a @host call that
 *   may have changed it): its leaves are the outputs, and its structure
 *   must be sig, as traced.
 * - env NULL: a @host call's list/record arguments, after the call: each
 *   one's leaves are outputs (after the result), its structure must be sig
 *   as traced; one made outside the staged function (outside) gets a copy
 *   and must come back unchanged. */
typedef struct HostAfter {
    int arg;
    bool outside;
    char *sig;
    size_t nsig;
    int nleaves;
    /* one made outside that is the staged function's argument `param`, or
     * the value of the binding (env, slot): the call gets that very object
     * (param -1, env NULL: a checked copy) */
    int param;
    Env *env;            /* owned ref, or NULL */
    int slot;
} HostAfter;
/* Are h's leaves after the call outputs of the host node? For a list or
 * record the body made (a copy at every call), and for the staged call's
 * own argument (the call gets that object, and the body may read what the
 * function put in it); a binding's value is read back by `host load`. */
static inline bool host_after_reads(const HostAfter *h) { return !h->outside || h->param >= 0; }

typedef struct HostSync {
    Env *env;            /* owned ref, or NULL */
    int slot;
    const char *name;    /* the binding's name (the program's, lives as long as it) */
    bool write;
    bool changed;        /* read: a @host call had changed it when traced (its gradient
                            would go through the function's ops: not supported) */
    Value tmpl;          /* write: the value's structure (owned) */
    char *sig;           /* read: the structure as traced (owned) */
    size_t nsig;
    HostAfter *after;    /* env NULL: the checked arguments (owned) */
    int nafter;
    /* env NULL: outside bindings the body assigned before the call, which the
     * function may read: their leaves are the node's last inputs (after the
     * arguments'), so its gradient reaches them (stage/host_grad.c); then
     * the variables it read (env NULL, tmpl the variable, one leaf: its
     * value at the call) */
    struct HostCtx { Env *env; int slot; Value tmpl; int nleaves; } *ctx;
    int nctx;
} HostSync;

/* The global random state a G_HOST node's function began with the last
 * time it ran (at trace time or in a graph run), shared by the node's
 * copies in the graphs made from the trace: a gradient node of the same
 * run (a tape made inside the staged function, stage/host_grad.c) runs
 * the function again from it, so it draws what the forward drew. */
typedef struct HostRng { int refs; bool valid; uint64_t key, counter; } HostRng;

void host_rng_note(HostRng *r);
void host_rng_decref(HostRng *r);

typedef struct HostNode {
    Value obj;           /* G_VAR_READ: the variable; G_HOST: the callable */
    HostArg *hargs;      /* G_HOST: positional args then keyword args */
    int nhargs, nhkw;
    Str **hkwnames;      /* owned refs */
    HostSync *sync;      /* G_HOST: see HostSync (owned), or NULL */
    bool dims_fixed;     /* G_HOST: the trace read a shape as a value, so the result's
                            dims are part of its kind (host_kind_same) */
    HostRng *rng;        /* G_HOST (shared with the copies) */
} HostNode;

HostSync *host_sync_copy(const HostSync *s);
void host_sync_free(HostSync *s);
bool host_sync_same(const HostSync *a, const HostSync *b);

/* The first node of g's top region that is an effect a run cannot undo
 * (a host call, a random draw, a collective, a cond or while holding one;
 * a variable read is none), or -1: a call whose graph stops there may be
 * traced again from its start (Interp.host_redo, stage/staged.c). */
int stage_first_effect(const Graph *g);

/* Is r, what a @host call (node n) returned, of the kind the graph was made
 * for: nil where n returned nil when traced, else a tensor of the traced
 * dtype, weakness and rank, and of its dims where n->host->dims_fixed? The
 * graph's ops, constants and promotions were made for those; the sizes of
 * dims are computed when the graph runs. */
bool host_kind_same(const GNode *n, Value r);

/* Register the interpreter as the graph core's host (graph_set_host); once,
 * before any graph is made (stage_builtins_register). */
void stage_graph_host_register(void);

#endif
