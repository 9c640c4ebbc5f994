/* staged.h — the trace cache of a staged function (stage/staged.c), graph
 * calls as single tape entries (stage/grad.c), and the stage builtins. */
#ifndef TFE_STAGE_STAGED_H
#define TFE_STAGE_STAGED_H

#include "graph/graph.h"
#include "stage/sig.h"

/* An outside binding a trace reads or assigns: its signature part, and for
 * an assigned one the template its outputs are rebuilt into. */
typedef struct OutsideSig {
    Env *env;            /* owned ref */
    int slot;
    SigBuf sig;          /* of its value when the trace read it */
    int ninputs;
    bool written;        /* the graph writes it back after the call */
    bool assigned;       /* the body assigned it (written, or stored before a @host call) */
    Value tmpl;          /* written: the value's structure (owned) */
} OutsideSig;

/* A number-or-tensor rule (Trace.krules): by the way a cond or loop went
 * (0, 1: TNote.run_kind), the kind (TK_*, stage/trace.h) or, TK_FOLLOW,
 * the rule sub[way] of the cond or loop whose output that way's value is,
 * or, TK_PARAM (a loop's body), the rule sub[1] of the loop's output whose
 * kind where the last iteration began it is. anchor, out: the cond or
 * loop (GNode.cf_id) and its output. k[0] TK_OP: an op's result, a number
 * where the rules sub[0] and sub[1] (-1: a number) give numbers, else
 * k[1]; anchor -1. */
typedef struct KRule { signed char k[2]; int sub[2]; int anchor, out; } KRule;

/* One cached trace: the graph and what a call must match to run it. */
typedef struct Trace {
    Graph *g;
    SigBuf sig;          /* the arguments */
    bool *relaxed;       /* per dim of sig: unknown (any size matches); NULL: none */
    bool shape_specialised; /* the body read a shape: no relaxation from this trace */
    bool shape_read;     /* the body read a shape itself (export: no dynamic dims) */
    Loc clamp_loc;       /* shape_read by slices' clamped bounds only: the first's location (export's
                            error names it); line 0: not so */
    int nkeep;           /* the length of same_out: the outputs */
    int *same_out;       /* per output: the earlier output j that is the same tensor at trace
                            time, or -2 - i for graph input i passed straight through (one
                            object in every place, as eagerly), or -1; NULL: none */
    uint16_t *grad_for;  /* per output (as same_out): the tfe_tensor.grad_for it had at trace time
                            (a tape's gradient of a variable), given to each call's; NULL: none */
    bool *pass_ok;       /* per output (as same_out): a run whose if or loop hands an input on
                            unchanged as it (stage_graph_call_same) hands out that input's
                            own tensor, as eagerly (mark_pass_ok); NULL: none */
    struct KRule *krules; /* the rules of kroot: an if's or loop's 0-d result that eager code
                            holds as a number after one way and a tensor after the other
                            (TNote.run_kind), by the way the run went (stage_graph_call_ran) */
    int nkrules;
    int *kroot;          /* per output (as same_out): its rule in krules, or -1; NULL: none */
    OutsideSig *outs;
    int nouts;
    int g_ninputs;
    tfe_tensor **static_val; /* per input: the value it must have (its value was used at trace time), or NULL */
    Value ret_tmpl;      /* the result's structure; its leaves are outputs 0 .. nret-1 */
    Value *arg_objs;     /* for each list, tuple or record of the arguments (pre-order), its
                            copy in the templates, or nil (owned): stands for the call's own */
    int narg_objs;
    int nparams;
    int nret;
    char *desc;          /* "x: float32 (3,)" for the retrace warning */
    Value *held;         /* objects the signature names by identity (owned) */
    int nheld;
    int64_t *fit_dims;   /* a relaxed trace: the dims of the last call its slices fitted
                            (stage_relaxed_fits, not asked again for them), or NULL */
    int nfit_dims;
    /* 1 or 0: whether tapes recorded when it traced, where that decides
     * what eager code would hand back (a 0-d result of ops on constants is
     * a number with no tape recording, a tensor under one: the trace saw
     * one of the two, so a call in the other state traces again); -1: it
     * does not decide */
    int tapes_key;
    /* The trace made variables (variable() ran while it recorded, in the
     * body or a function it called: an optimizer, a layer). The graph holds
     * the ones made then; eager code makes new ones at every call, so a
     * call that finds this trace runs eagerly instead (stage_call). */
    bool makes_vars;
    /* may a call whose graph failed run again eagerly (staged.c,
     * stage_error_redo_ok): 0 not asked yet, 1 yes, 2 yes and its graph has
     * @host calls or variable assigns (the run logs the state), -1 no */
    signed char error_redo;
    Loc made_var_loc;
} Trace;

typedef struct StageCache {
    Trace **traces;      /* newest first */
    int n, cap;
    int ntraced;         /* traces made (trace_count) */
    long hits;
    bool warned;
    bool noted_vars;     /* TFE_DEBUG=1 said its calls run eagerly for the variables a trace made */
    Trace *last;         /* the trace the last call ran (graph()) */
    Loc *sites;          /* call sites that traced */
    int nsites;
    int eager_under_tapes; /* a trace stopped where the gradients of the tapes recording
                              the call could not be eager's (Tracer.eager_redo): calls
                              under this many recording tapes less one or more run eagerly
                              (1: every call); 0: none */
} StageCache;

/* Calls of staged functions (interp/eval.c calls a closure marked staged
 * through it), and freeing a closure's trace cache. */
int stage_call(Interp *I, Closure *c, Env *e, Loc call_loc, Value *out);
void stage_cache_free(Closure *c);

/* A cached call of t whose graph stopped at its first effect, a @host call
 * that returned another kind of value than traced (Interp.host_redo
 * pending): the call goes on with another trace of its signature made for
 * that kind, or traces again (stage/staged.c). Under the check
 * (Interp.check_replay) the host calls are the eager run's, from its first. */
int stage_host_redo(Interp *I, Closure *c, Env *e, Trace *tried, Loc call_loc, Value *out);
/* A relaxed trace t failed at the call's sizes with no effect run yet
 * (stage_relaxed_redo_ok): the call traces for its own sizes instead, as
 * eager would run it (a slice bound past the end clamps, docs/staging.md). */
bool stage_relaxed_redo_ok(const Trace *t);
/* Do a relaxed trace's slices fit the sizes of these inputs (t's graph's,
 * borrowed)? A call at whose sizes one does not traces for them instead,
 * before anything runs (stage/relax_fit.c). */
bool stage_relaxed_fits(const Trace *t, tfe_tensor *const *inputs);
int stage_relaxed_redo(Interp *I, Closure *c, Env *e, Loc call_loc, Value *out);
/* ... and one that could not trace again (an effect ran): the slice's error
 * says so, a located limit (I->stage_limit). */
void stage_relaxed_slice_limit(Interp *I);

Trace *stage_last_trace(Closure *c);
/* The trace a call with these positional arguments would run, or NULL. */
Trace *stage_find(Closure *c, int argc, const Value *argv);

/* Run t's graph on inputs (borrowed) into outs (new refs). Under a tape it
 * is one entry, whose backward is a graph too (stage/grad.c). */
int stage_graph_call(Interp *I, Graph *g, tfe_tensor *const *inputs, tfe_tensor **outs);
/* The same, and per output k, same_in[k]: the input this run passed through
 * unchanged as output k (a branch that ran ends on it, a loop that ran zero
 * times), which outs[k] is a tensor of its own for, or -1 */
int stage_graph_call_same(Interp *I, Graph *g, tfe_tensor *const *inputs, tfe_tensor **outs, int *same_in);
/* The same, and *ran (owned; NULL where no if or loop ran): by node of
 * *ran_g (g, or the graph as traced that ran instead: borrowed, as long
 * as g), the way each if and loop went in its last run (GRun.ran). ran
 * may be NULL. */
int stage_graph_call_ran(Interp *I, Graph *g, tfe_tensor *const *inputs, tfe_tensor **outs, int *same_in,
                         signed char **ran, const Graph **ran_g);

/* A cached call of g that runs its body eagerly instead: under two
 * recording tapes or more, a graph whose backward would replay values eager
 * code shares between the forward and a higher order (stage/grad.c). */
bool stage_grad_runs_eagerly(Interp *I, Graph *g);

void stage_builtins_register(Interp *I);
void stage_optimize(Graph *g); /* the optimizer over a finished graph (graph/opt.h) */
void stage_graph_builtins_register(Interp *I); /* graph(f, args...) (stage/graph_value.c) */

#endif
