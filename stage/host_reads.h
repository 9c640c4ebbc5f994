/* host_reads.h — what a @host call of a cached graph reads, under a tape,
 * that its node does not take as an input: an outside binding the function
 * did not read in the call that traced (or one holding more than 64
 * tensors, which the node does not flatten), a variable it did not read
 * then. Eager code would differentiate through those reads; the graph's
 * backward cannot, so the tensors a tape tracks become extra sources of the
 * call's tape entry, and a gradient that reaches one is a located error
 * (stage/grad.c, gcall_backward), never a silent zero. */
#ifndef TFE_STAGE_HOST_READS_H
#define TFE_STAGE_HOST_READS_H

#include "graph/graph.h"
#include "interp/internal.h"

/* A binding (env set) or variable (var set) that host call number `call`
 * of the graph run (HostUnlinked.ncalls) read, and the value it held at
 * that call's first read of it (owned refs; but not the program's global
 * Env, weak: a tape entry holding it, kept by a tape in a global, would be
 * a cycle, and the globals outlive every entry). A list or record in it is
 * a copy (orig: the value read, kept for identity): the program may change
 * the object in place before the gradient, where eager code differentiated
 * the ops as they ran. */
typedef struct HostSnap { Env *env; int slot; Value var; Value v; Value orig; bool weak; int call;
    /* or (rng) the global random state when that call began: its run again
     * draws what it drew (env NULL, var nil) */
    bool rng; uint64_t key, counter; } HostSnap;

/* The tensors noted during one graph call (owned), and for each the error
 * a gradient that reaches it raises; and every binding and variable its
 * @host calls read that their nodes do not take, with its value then: the
 * call's backward runs the functions again with those values, as it does
 * with the ones its nodes take (host_snaps_swap), not with the values at
 * gradient time. */
typedef struct HostUnlinked {
    tfe_tensor **t;
    char **what;
    int n, cap;
    HostSnap *snap;
    int nsnap, capsnap;
    int ncalls;          /* the watched kind of host calls run so far (host_call_counts) */
} HostUnlinked;

void host_unlinked_free(HostUnlinked *u);
/* Swap the values of the bindings and variables of snap[] that host call
 * number `call` read with those held there (twice: back as they were). */
void host_snaps_swap(HostSnap *snap, int n, int call);
/* The random state host call number `call` began with, if noted. */
bool host_snaps_rng(const HostSnap *snap, int n, int call, uint64_t *key, uint64_t *counter);
/* Is n a host call of the kind a graph run numbers (HostSnap.call): a
 * @host function's call with outputs? They run in the effect chain's
 * order, which every graph made from a trace keeps, so the k-th such node
 * of the backward's graph is the k-th that ran. */
bool host_call_counts(const GNode *n);
void host_snaps_free(HostSnap *snap, int n);

/* An outside binding (env, slot), or a variable (var), whose tensor a tape
 * made inside a staged function may differentiate with respect to. */
typedef struct HostSuspect { Env *env; int slot; Obj *var; } HostSuspect;

/* One @host call being watched (Interp.host_reads while it runs). */
typedef struct HostReads {
    uint64_t born;       /* Envs made before the call are outside the function */
    const char *fname;
    const struct HostCtx *ctx; /* the inputs its node takes (HostSync.ctx) */
    int nctx;
    /* NULL: the tensors a tape tracks are noted into Interp.host_unlinked;
     * else (the function run again for its gradient, a vjp node of a graph:
     * stage/host_grad.c) only reads of these count, the first kept in hit */
    const HostSuspect *sus;
    int nsus;
    char *hit;           /* the error's end (owned), or NULL */
    int call;            /* its number in the graph run (HostSnap.call) */
    struct HostReads *prev;
} HostReads;

/* Before host node n runs its function: watch it when the graph call notes
 * (Interp.host_unlinked set: a cached call under a tape) and n has a
 * gradient. Returns whether it watches (then host_reads_end after). */
bool host_reads_begin(Interp *I, HostReads *w, const GNode *n);
void host_reads_end(Interp *I, HostReads *w);
/* Watch a run of f again for its gradient in a graph (a vjp host node,
 * stage/host_grad.c) for reads of sus[] outside ctx; then w->hit says the
 * first such read (free it). */
void host_reads_begin_suspects(Interp *I, HostReads *w, const char *fname, const struct HostCtx *ctx, int nctx,
                               const HostSuspect *sus, int nsus);

/* The function read outside binding (e, slot) (interp/eval.c), or variable
 * var as tensor t (interp/builtins_autodiff.c). */
void host_reads_binding(Interp *I, Env *e, int slot, const char *name);
void host_reads_var(Interp *I, Value var, const char *var_name, bool trainable, tfe_tensor *t);

#endif
