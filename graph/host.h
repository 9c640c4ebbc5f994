/* host.h — what the graph core asks of the language above it: G_HOST and
 * G_VAR_READ nodes carry a payload only the host understands (GNode.host),
 * and a run's errors are raised in the host's terms (its call frames, its
 * locations). The host registers these functions once (graph_set_host;
 * stage/graph_host.c does, for the interpreter), as the tensor layer takes
 * tfe_trace_hook. A graph without host or variable nodes (tests/unit) needs
 * none: every hook may then be NULL. */
#ifndef TFE_GRAPH_HOST_H
#define TFE_GRAPH_HOST_H

#include "graph/graph.h"
#include "util/buf.h"

struct GRun;

typedef struct GHost {
    /* a node's payload: made when graph_add makes a G_HOST or G_VAR_READ
     * node, copied with the node (graph_clone, graph_extract), freed with it */
    struct HostNode *(*node_new)(void);
    struct HostNode *(*node_copy)(const struct HostNode *h);
    void (*node_free)(struct HostNode *h);
    /* graph_same_but_dims: do two nodes call (read) the same thing the same way? */
    bool (*node_same)(const GNode *a, const GNode *b);
    /* release what a frames list (GFrames.f[0 .. n-1]) holds; the core frees the array */
    void (*frames_release)(GFrames *f);
    /* the innermost frame's function name, or NULL (graph_to_text: "line 3 in f") */
    const char *(*frames_name)(const GFrames *f);

    /* graph_to_text: "var_read x" / "host f(%1, 2)" (brief: the node's dot
     * label, "host f"); put_types: a host node's result types, when they are
     * not just its outputs' (false: the core prints them) */
    void (*put_operation)(Buf *b, const Graph *g, const GNode *n, bool brief);
    bool (*put_types)(Buf *b, const GNode *n);

    /* running: a G_HOST node (its outputs set with grun_set), a G_VAR_READ
     * node's value (a new reference, or NULL with the tensor error set) */
    int (*run_host)(struct GRun *x, GNode *n);
    tfe_tensor *(*var_read)(struct GRun *x, GNode *n);
    /* a G_HOST node that replaces a variable's value by an update of it
     * with the node's one input (graph/exec_update.c): GVAR_ASSIGN .. GVAR_DIV,
     * and, when slot is not NULL, where the variable keeps its value (its
     * tensor, which the update may then replace or write in place); 0 for
     * any other node, or when host (not NULL) is running in a mode where
     * the call itself must run. May be NULL. */
    int (*var_update)(void *host, const GNode *n, tfe_tensor ***slot);
    /* after an update wrote the variable's value in place (the node's call
     * did not run): the host's bookkeeping of that call (the differential
     * check compares the value with its eager run's); 0, or -1 with the
     * error raised. May be NULL. */
    int (*var_updated)(struct GRun *x, const GNode *n, const tfe_tensor *w);
    /* the host's call depth when a run starts (GRun.frame_base) */
    int (*frame_depth)(void *host);
    /* raise msg at node n: as an eager run would, with the call frames of
     * the run's caller (up to frame_base) and the node's own; returns -1 */
    int (*node_error)(struct GRun *x, const GNode *n, const char *msg);
} GHost;

/* var_update's kinds: v.assign(x), v.assign_add(x), v.assign_sub(x), v *= x, v /= x */
enum { GVAR_ASSIGN = 1, GVAR_ADD, GVAR_SUB, GVAR_MUL, GVAR_DIV };

/* The registered host (all NULL until graph_set_host). */
extern GHost graph_host;
void graph_set_host(const GHost *h);

/* For the host's put_operation: a value reference ("%3", "%3.1") and a
 * comma-separated list of them, and one output's type ("f32[3] weak"). */
void graph_put_ref(Buf *b, const Graph *g, GRef r);
void graph_put_refs(Buf *b, const Graph *g, const GRef *r, int n);
void graph_put_meta(Buf *b, const tfe_meta *m);

#endif
