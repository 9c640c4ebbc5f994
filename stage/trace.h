/* trace.h — the tracer: what the interpreter and the tensor library tell a
 * trace in progress, and the structures a finished trace leaves behind.
 *
 * How tracing works (docs/staging.md): the first call with a new signature
 * runs the body with the ordinary interpreter, eagerly, and records every
 * op on a traced tensor as a graph node at the same time ("trace by
 * running"). So that call prints, fails and returns exactly what an eager
 * call would. Conditions and loops on traced tensors are the exception:
 * both branches (and the loop body) are traced symbolically — shapes and
 * dtypes from the infer rules, no kernels — into regions of a cond/while
 * node, which then runs on the values of that call. Later calls with the
 * same signature run the graph (graph/exec.c) and never touch the body. */
#ifndef TFE_STAGE_TRACE_H
#define TFE_STAGE_TRACE_H

#include "graph/graph.h"
#include "stage/host_node.h"

/* A traced tensor's t->node points to one of these (owned by the tracer,
 * which also holds a reference to t, and clears t->node when it ends). */
typedef struct TNote {
    tfe_tensor *t;
    GRef ref;
    bool number;   /* eager code would hold it unboxed: a number passed in, or
                      arithmetic on such numbers (interp/eval.c's fast path) */
    bool unboxed;  /* a 0-d result made while no tape was active, which eager code
                      holds as a number too (value_from_tensor_take), though
                      arithmetic on it is a tensor op as any (trace_watch_box) */
    bool boxed;    /* a tensor in eager code (a watch's box of a number, a 0-d
                      result made while a tape of the body records), which the
                      call's result and write-back keep (trace_unbox_numbers) */
    bool input;    /* the tensor a graph input was made for (trace_input): it stands
                      for it, so a result that is it is the input (Trace.same_out) */
    int passed;    /* a cond's or loop's output that is, at trace time, graph input
                      `passed` handed on unchanged (the branch that ran ends on it,
                      the loop ran zero times): eager code's result is the input
                      itself (Trace.pass_ok); -1: none */
    GRef handed;   /* ... and, at trace time, any value it is handed on unchanged (the
                      run gave that value's very tensor), which eager code holds as
                      one tensor with it (stage/trace_alias.c); node -1: none, -2: not
                      known (a constant made in its branch or body) */
    /* An output of a cond or loop whose kind (TK_*) eager code gives by
     * the way it went: run_kind[0] where its first branch ran (a loop: ran
     * zero times, the kind it started with), run_kind[1] the other branch
     * (the loop ran: the kind its body leaves); TK_FOLLOW: that way's
     * value is an output of another such cond or loop (sub[b]'s note),
     * whose own way decides; TK_PARAM (a loop's body that ends it on a
     * carried value: run_kind[1]): that value's kind where the last
     * iteration began, sub[1] being the loop's output for it; TK_OP in
     * run_kind[0]: arithmetic (+ - * / // %, unary minus) on such values
     * and numbers, a number where every one of them (sub[0], sub[1]; NULL:
     * a number) is one on the way the call went, as eager code's fast path,
     * and run_kind[1] otherwise. TK_NONE in both where the kind does not
     * depend on it. ran_rec, ran_ref: the record of the run that computed it at
     * trace time (Tracer.rans), and its value there; -1: none. */
    signed char run_kind[2];
    const struct TNote *sub[2];
    int ran_rec;
    GRef ran_ref;
} TNote;

/* What eager code holds a 0-d value as: a number, a tensor (a watch's box,
 * one made while a tape of the body records), or what an op's result is
 * (a number where no tape is active, a tensor under one). */
enum { TK_NONE, TK_DEFAULT, TK_NUMBER, TK_BOXED, TK_FOLLOW, TK_PARAM, TK_OP };

/* The ways the ifs and loops of a run at trace time went (GRun.ran) in g
 * (owned: the trace's graph, or a cond's or loop's own graph that ran
 * under a tape). */
struct RanRec { Graph *g; const Graph *rg; signed char *ran; };

/* A binding outside the trace (a free variable of the body or of a function
 * it calls) that the body read or assigned. Its leaves are graph inputs. */
typedef struct Outside {
    Env *env;            /* owned ref */
    int slot;
    Value traced;        /* what the body sees now (owned) */
    Value orig;          /* its value when first read (owned): the signature */
    int first_input, ninputs;
    bool written;
    bool dirty;          /* assigned since the last @host call (which stored it first) */
    int synced;          /* traced is its value after this many @host calls */
    const char *name;
} Outside;

typedef struct Tracer {
    Interp *I;
    Graph *g;
    uint32_t id;
    int region;           /* where nodes go */
    bool symbolic;        /* inside a traced branch or loop body: no values */
    int if_regions[2];    /* the branches of the if whose branch is being traced
                             symbolically (trace_cond; 0: none): a non-persistent
                             tape's gradient call there (interp/builtins_autodiff.c) */
    bool implicit;        /* --stage-all: a failure falls back to eager */
    bool failed;          /* implicit and failed: recording stopped */
    char *fail_msg;
    Loc fail_loc;
    /* Why the if or loop about to run at trace time could not be a node
     * (the error its attempt gave, and where): a read of its own condition's
     * or bounds' value that cannot be made at trace time says so
     * (trace_value_read); set by give_up, dropped by trace_fallback_done. */
    char *fallback_why;
    int fallback_line;
    /* trace_fail raised its error (a failure only a trace meets, not one
     * eager code raises too): trace_cond does not run such a branch at
     * trace time to meet an eager error there (run_failed_branch) */
    bool fail_raised;
    /* The while loop whose body failed while traced with an error eager
     * code raises too (loop_attempt): the body_err of its last attempt;
     * pending_loop: the loop whose first iteration runs at trace time to
     * meet that error, its condition peeked (interp/eval.c,
     * while_cond_traced), with the reason kept for the error about the
     * condition that follows where it does not fail */
    bool loop_body_err;
    const void *pending_loop;
    char *pending_why;
    Loc pending_loc;
    /* A read of a value that cannot be made at trace time (trace_value_read
     * refused it: a variable, a random draw, a host call), until the error
     * it raised is handed up or an if or loop that catches it runs at trace
     * time instead (give_up). Still set when the body returns without an
     * error, the site that read it went on with the value: the trace fails
     * there (refusal_pending), never a graph with that value baked in. */
    bool refused;
    char *refused_msg;
    Loc refused_loc;
    const char *fallback_file; /* its file where not the error's (a module), else NULL; borrowed */
    int last_effect;      /* last effect node of the current region */
    int last_cf;          /* the newest cond or while node (-1: none): a read
                             of a variable before it may be stale after it */
    int tapes_at_begin;   /* tfe_tapes_active when the trace began */
    struct TraceAlias *alias; /* the tapes begun in it and what they touched (trace_alias.c) */
    int eager_redo;       /* stopped where its tapes' gradients could not be eager's
                             (trace_redo_eagerly), with nothing done yet: the call
                             runs eagerly instead, as do later ones under this many
                             recording tapes less one (1: all; stage/staged.c); 0: not
                             stopped */
    uint64_t rkey, rcounter; /* the random state when the trace began (for that run) */
    /* the effects made at trace time so far, in order (a @host call, a
     * built-in effect: print, v.assign): a call that stops where an `if`
     * on a varying condition meets three tapes (trace_cf.c) runs eagerly
     * again with these replayed, not made twice (Interp.effect_replay) */
    struct EffectReplay *done;
    int frame_base;       /* I->nframes when the body started */
    GFrames *last_frames;
    TNote **notes;
    int nnotes, capnotes;
    tfe_tensor **concrete; /* by value slot (GNode.vbase + out): borrowed */
    int capconcrete;
    Outside *outs;
    int nouts, capouts;
    bool *static_in;      /* inputs whose value the trace depends on */
    int cap_static;
    bool shape_read;      /* a shape was read as a value: no relaxation */
    bool read_not_clamp;  /* ... other than by a slice's bound clamped to the size */
    Loc clamp_loc;        /* the first slice whose bound clamped (line 0: none): export's error names it */
    bool host_size_used;  /* a built-in made something of the size of a value
                             computed from a @host result (zeros_like): the
                             host calls' dims are part of their results' kind */
    bool data_shaped;     /* it has an op whose result's shape depends on the data
                             (x[mask]): a shape read may be a value read */
    uint32_t *dyn;        /* by value slot: its dims whose size depends on the data
                             (a bit per dim; trace_dyn_dims), for nodes < ndyn */
    int ndyn, capdyn;
    bool *walked;         /* by node: its ancestors were checked by a value read
                             (stage/trace.c; node ids are never reused) */
    int capwalked;
    int suspended;        /* >0: a host call is running; nothing is recorded */
    const Value *args;    /* the staged function's arguments as called (borrowed) */
    Env *call_env;        /* the body's Env (borrowed): its parents hold the outside bindings */
    struct StartSlot { Env *env; int slot; Value v; } *start; /* before the first @host call:
                             every outside binding's value (containers copied; owned) */
    int nstart;
    struct StartSlot *pre; /* the same, before the @host call being traced (owned) */
    int npre;
    int host_reading;     /* >0: a @host function runs at trace time (its reads are noted) */
    Env *host_env;        /* ... made inside the staged body: the Env it closes over (borrowed) */
    uint64_t host_born;   /* ... and env_next_born() when it started: the body's Envs are older */
    int cf_running;       /* >0: a traced cond or loop runs as one tape entry, or its reads
                             are made again after it (trace_node_outputs): a tape made in
                             this trace noted those reads when it traced them */
    int cf_region;        /* ... and a read it had not (a variable the branch assigns, read
                             again) is in this region: the branch taken, the loop's body */
    struct CfStart { const Obj *var; tfe_tensor *t, *own; } *cf_start; /* ... and the variables'
                             values when it started, for reads it hands on (mark_exported; owned),
                             with the header of its own its reads of t that ran have (own: owned,
                             NULL until one ran; stage/grad.c, ran_read_own) */
    int ncf_start;
    struct Kept { int id, first, n; } *kept; /* conds whose outputs first.. first+n-1 are kept
                             branch values (keep_branch_values), for trace_prune_kept */
    int nkept;
    struct LoopFresh { const Obj *var; tfe_tensor *start; int kinds; } *loop_fresh; /* a loop that
                             runs as one tape entry, reading and assigning these variables: their
                             values when it started (owned), how it reads them (TL_*; loop_core) */
    int nloop_fresh;
    struct RanRec *rans;  /* TNote.ran_rec (freed by trace_end) */
    int nrans;
    struct HostRead { Env *env; int slot; const char *name; } *hreads; /* what it read */
    int nhreads;
    struct HostVar { Value var; tfe_tensor *t; } *hvars; /* the variables it read, and the
                             value each had at its first read (owned) */
    int nhvars;
    int nargs;
    int nhost;            /* @host calls recorded so far (outside bindings read before
                             one may have changed in it) */
    bool made_vars;       /* variable() ran while it recorded: eager code makes new ones at
                             every call, so the trace's later calls run eagerly (staged.c) */
    Loc made_var_loc;     /* where the first one was made (TFE_DEBUG=1's note) */
    /* Every assignment to a binding of the trace made while tracing symbolically
     * (a branch, a loop's condition or body, and the functions they call), in
     * order, with the value it replaced: a traced if or loop finds there the
     * bindings it changes that its own statements do not name (a closure's
     * `c += 1`, an enclosing function's binding), and undoes them (owned) */
    struct SymWrite { Env *env; int slot; Node *at; Value old; } *writes;
    int nwrites, capwrites;
    Node **sym_fns;       /* functions entered in symbolic mode (recursion) */
    const char **sym_names; /* their names, for the message (borrowed: the callees live on) */
    int nsym_fns, capsym_fns;
} Tracer;

/* The trace being recorded is the interpreter's (I->tracer, its id
 * I->trace_id), set by trace_begin and cleared by trace_end. */

/* The trace the running interpreter records, or NULL, for the code that is
 * handed no Interp (interp_current, interp/internal.h, says which). */
static inline Tracer *trace_current(void)
{
    Interp *I = interp_current();
    return I ? I->tracer : NULL;
}

/* Start and end a trace of the body of the staged function `name`. */
Tracer *trace_begin(Interp *I, const char *name, bool implicit);
void trace_end(Tracer *T);      /* clears every t->node, frees the tracer (not the graph) */
/* Code that runs as at the top of the program while a trace records (an
 * import's module, run once per process: eagerly its effects happen once,
 * so they are no part of any graph): the trace is set aside, so nothing
 * is recorded, the Envs, lists and records the code makes belong to no
 * trace, and a staged function it calls runs as from the top; then put
 * back. Nests (a module importing another). */
typedef struct TraceAside {
    struct Tracer *tracer;
    uint32_t trace_id;
    int (*exec_hook)(tfe_op op, int nin, tfe_tensor *const *in, const tfe_attrs *at, tfe_tensor **out);
    bool (*read_hook)(const tfe_tensor *t);
    uint32_t (*dyn_hook)(const tfe_tensor *t);
} TraceAside;
void trace_set_aside(Interp *I, TraceAside *a);
void trace_put_back(Interp *I, const TraceAside *a);
/* A finished trace (its results set, before trace_end): drops the kept
 * branch values of its conds that nothing in the graph reads. */
void trace_prune_kept(Tracer *T);

/* A staging failure at loc: an implicit trace stops recording and the
 * program goes on eagerly (returns 0); an explicit one raises (returns -1). */
int trace_fail(Interp *I, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The backstop for a site that reads a value trace_value_read refused and
 * goes on with it: with the body run without an error (rc 0), a refusal
 * still pending raises it at the read; returns rc, or -1 so. */
int trace_refusal_pending(Interp *I, int rc);
/* Has the trace done nothing that a run of the body again would do twice
 * (no effect, no outside binding written; a draw is drawn again from the
 * same random state)? */
bool trace_nothing_done(const Tracer *T);
/* The call being traced cannot give eager's gradients to the tapes that
 * record it (a higher order): where the trace has done nothing a run again
 * would do twice (no effect, no outside binding written; a draw is drawn
 * again from the same state), an error that makes the call run eagerly
 * (stage/staged.c), and later ones under ntapes recording tapes or more
 * outside; else the located error fmt (trace_fail: under --stage-all, 0,
 * and the function goes on eagerly from here). */
int trace_redo_eagerly(Interp *I, Loc loc, int ntapes, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* The effects a trace made (Tracer.done), replayed by a run of its body
 * again: each call's callable, result and the random state after it. The
 * result is a copy no tape tracks, or, for a @host call on a value the
 * tapes outside the trace track, the result itself: the function ran
 * under those tapes at trace time, as eager code runs it, and its ops'
 * entries lead the run again's gradients through it. replayable: what
 * the call did reaches the body only through its result (no list or
 * record argument, no variable or outside tensor it read, no argument a
 * tape made in the trace tracks, not a method such as v.assign). A run
 * again that meets the list used up goes on to the one it interrupted
 * (prev). */
/* tracked: a @host call whose result a tape outside the trace tracks (the
 * result itself is kept, with the entries its ops recorded) */
/* The state a failed cached call's run again (stage/staged.c,
 * stage_error_redo) starts from and meets after each @host call it
 * replays: the outside bindings (env set) and the variables of its graph
 * (var set), with their values. */
typedef struct EffectSlot { Env *env; int slot; Value var; Value v; } EffectSlot;
typedef struct EffectState { EffectSlot *s; int n; } EffectState;
/* rerun: made for real again by the run again (a variable's assign: the
 * run again starts from the variables' values before the call); post: a
 * @host call's, the state right after it, which the run again takes on
 * when it replays the call (what the function assigned) */
typedef struct EffectDone {
    Value f, result;
    uint64_t rkey, rcounter;
    bool replayable, tracked, rerun;
    EffectState post;
} EffectDone;
typedef struct EffectReplay {
    EffectDone *e;
    int n, cap, next;
    struct EffectReplay *prev;
    /* a failed cached call's log (stage/staged.c): the Env whose chain holds
     * the outside bindings (borrowed while the call runs) and the graph
     * whose variables count, the state before the call (its run again
     * starts from it), and whether @host calls may be noted (replayed, not
     * made again: the body read no outside list or record, which a
     * function may have changed in place) */
    Env *outer;
    const Graph *g;
    EffectState pre;
    bool host_ok;
} EffectReplay;
void effect_replay_free(EffectReplay *r);
/* The values now of the outside bindings of r->outer's chain and of r->g's
 * variables; set them (effect_state_put) or free the state. */
void effect_state_take(const EffectReplay *r, EffectState *st);
void effect_state_put(const EffectState *st);
void effect_state_free(EffectState *st);
/* Appends f's call that returned result to *r (made on first use), with the
 * random state now. */
void effect_replay_note(EffectReplay **r, Value f, Value result);
/* In call_value (interp/eval.c), while Interp.effect_replay is set: f's
 * call, a @host call or a built-in effect, is the next one replayed: its
 * result in *out and the random state after it (1), or not (0: none left),
 * or -1 (raised: the run again made another call than the trace, which
 * cannot be). */
int effect_replay_call(Interp *I, Value f, Value *out);
/* Can a run of the body again replay what the trace has done so far (its
 * effects are only @host calls and built-in effects made at trace time, in
 * its top region, each replayable: see trace.c), so that the run sees what
 * the trace saw? Then trace_redo_eagerly's run again replays them. */
bool trace_effects_replayable(const Tracer *T);
/* Did an effect done so far give a result a tape outside tracks? Its
 * replay hands that result on with the entries its ops recorded when the
 * trace made it, which a tape adds in another order than a run again that
 * makes them anew (stage/trace.c). */
bool trace_done_tracked(const Tracer *T);
/* trace_redo_eagerly where the trace's effects so far are replayable: the
 * call runs eagerly again and gets each of them back (stage/staged.c). */
int trace_redo_replaying(Interp *I, Loc loc, int ntapes);

/* Late aliases (stage/trace_alias.c): a tape begun in the trace
 * (trace_alias_tape_start) notes each float value it touches (a watch, a
 * gradient's source or target, an op's input while it records:
 * trace_alias_touch_ins for those of the active tapes). trace_alias_check:
 * where two it touched can be one tensor at run time (a0 = y in a traced
 * if's branch, then t.watch(a0) and a0 * y), the call runs eagerly instead
 * (an error that stage/staged.c catches, as trace_redo_eagerly), or a
 * located error where its effects cannot be made again; else 0. */
typedef struct TraceAlias TraceAlias;
void trace_alias_tape_start(Tracer *T, const struct tfe_tape *tape, bool first); /* first: its first with block */
void trace_alias_touch(Tracer *T, const struct tfe_tape *tape, const tfe_tensor *x);
void trace_alias_touch_ins(Tracer *T, int nin, tfe_tensor *const *in);
int trace_alias_check(Interp *I, Tracer *T);
/* The same for one tape, where it takes a gradient now: in a branch or
 * loop body traced without values, a conflict of it begun there fails the
 * attempt (trace_fail: the if or loop runs at trace time). */
int trace_alias_now(Interp *I, Tracer *T, const struct tfe_tape *tape);
/* The same for the tapes begun in a loop's body (or condition), just traced
 * (regions rcond, rbody; its n carried values start as init[]), before its
 * node is made: true where the loop must run at trace time instead. */
bool trace_alias_loop(Tracer *T, int rcond, int rbody, int n, tfe_tensor *const *init);
/* The same for the tapes begun in an if's branches (regions r0, r1). */
bool trace_alias_branches(Tracer *T, int r0, int r1);
/* A failed attempt at an if or loop from graph size nodes on: what its
 * tapes and values touched goes. */
void trace_alias_roll_back(Tracer *T, int nodes);
void trace_alias_free(Tracer *T);
/* The trace holds this call's tensors where eager code's differ from call
 * to call (a tape began after effects that cannot be made again, and the
 * bindings it could see were made eager's: stage/trace_alias.c): it serves
 * this call only, and later calls run eagerly. */
int trace_alias_specialized(const Tracer *T); /* 0: no; else StageCache.eager_under_tapes */
/* The same, decided where an if or loop whose branch or body has such a
 * tape must run at trace time on a condition that varies from call to
 * call (a variable, a draw, a host call), or inside a branch traced
 * without values: the trace may then read any value (trace_value_read). */
void trace_alias_one_shot(Tracer *T);
/* The same where only calls under a tape outside must run eagerly (an if
 * or loop that holds another, on a varying value, run at trace time for a
 * tape outside: outer_tape_meets_nesting in stage/trace_cf.c). */
void trace_alias_one_shot_under_tapes(Tracer *T);
static inline bool trace_recording(const Interp *I)
{
    const Tracer *T = I->tracer;
    return T && !T->failed && !T->suspended;
}

/* Nodes. */
GRef trace_ref(Tracer *T, tfe_tensor *t);          /* t's node, or a new G_CONST node */
int trace_input(Tracer *T, tfe_tensor *t);           /* new G_INPUT, t stands for it */
void trace_note(Tracer *T, tfe_tensor *t, GRef ref); /* t now stands for ref */
/* The value the body sees for an input value v (an argument or an outside
 * binding): v itself, its tensors now graph inputs [*first, *first + *n);
 * a number becomes a boxed tensor. New reference. */
Value trace_value_leaves(Tracer *T, Value v, int *first, int *n);
/* Eager numbers: v is one (a number, or a 0-d traced tensor that stands for
 * one) and *as is a number of its dtype; mark the traced result of eager's
 * number arithmetic as one; and, at the trace's end, put numbers in place of
 * the marked tensors of v (top level or in lists, tuples and records the
 * body made), so the call's results are boxed as eagerly. */
bool trace_eager_number(Value v, Value *as);
void trace_mark_number(Value out);
/* trace_eager_number, or a traced 0-d value whose kind a rule gives
 * (TNote.run_kind), which eager code may hold as a number: *as stands for
 * it as trace_eager_number says */
bool trace_kind_number(Value v, Value *as);
/* out is arithmetic on a and b (b nil: unary) where one is such a value
 * and eager code's fast path takes numbers: its kind by theirs (TK_OP) */
void trace_note_op_kind(Value out, Value a, Value b);
void trace_unmark_number(Value v);    /* a watched one is boxed */
/* t.watch(name) of a traced 0-d tensor that eager code holds as a number
 * (a number argument, arithmetic on numbers, a 0-d result made with no tape
 * active): eager code boxes the name's number into a tensor of its own, so
 * the tape tracks that name only, not the other names that hold the number
 * (let k = y) nor its uses before the watch. trace_watch_box makes such a
 * tensor of the trace, the same graph value (new ref); with unboxed, one
 * that stands for a number itself (a variable's 0-d value read with no tape
 * active, which eager code unboxes at every read). */
bool trace_watch_unboxed(const tfe_tensor *t);
tfe_tensor *trace_watch_box(Tracer *T, tfe_tensor *t, bool unboxed);
/* t, a watch's box of a number that was no traced tensor (a literal such
 * as 0.1, which a signature holds by value): a constant of the trace that
 * stays a tensor in the call's result and write-back, as the box it is. */
void trace_box_constant(Tracer *T, tfe_tensor *t);
Value trace_unbox_numbers(Value v);   /* takes v */

/* The interpreter's hooks (interp/eval.c, value.c, builtins). */
int trace_read_outside(Interp *I, Env *e, int slot, const char *name, Value *out);
/* A @host function made inside the staged body reads e's binding (a body's
 * Env): a traced value there is an error (the function keeps this call's). */
int trace_host_reads_body(Interp *I, Env *e, Value v, const char *name, Loc loc);
/* A @host function running at trace time assigns name, a binding of the
 * body (slot of e): a located error (-1), else 0. */
int trace_host_writes_body(Interp *I, Env *e, const char *name, Loc loc);
int trace_write_outside(Interp *I, Env *e, int slot, const char *name, Value v); /* takes v */
/* While tracing symbolically: target (an N_NAME) is about to assign slot of
 * e, a binding of the trace (Tracer.writes). */
void trace_note_write(Tracer *T, Env *e, int slot, Node *target);
/* Undo (newest first) and forget the writes noted since the first `from`. */
void trace_writes_undo(Tracer *T, int from);
void trace_writes_drop(Tracer *T, int from);
int trace_check_mutation(Interp *I, uint32_t stamp, Loc loc);
/* if on a traced tensor (cond is traced and has one element): 0 with *xs
 * set, or -1. rest[k..]: the statements after it when it is in the body
 * of the function being traced (an early return folds them into the
 * branch that does not return), else NULL. */
int trace_cond(Interp *I, Node *n, Env *env, Value cond, NodeList *rest, int k, int *xs);
/* The condition c of an if, a while or `a if c else b` while tracing: its
 * value, where an `and` or `or` on a tensor whose value varies from call to
 * call (a variable's, a host call's, a draw's) is a traced logical_and or
 * logical_or rather than a value read at trace time (stage/trace_cf.c). */
int trace_cond_value(Interp *I, Node *c, Env *env, Value *out);
/* Does t's value come from a variable, a host call or a random draw (it
 * can change between calls with one signature)? Marks nothing. */
bool trace_value_varies(Interp *I, const tfe_tensor *t);
/* A while loop on a value that varies from call to call (a variable, a
 * draw, a @host call's result), whose body failed while traced with an
 * error eager code raises too, about to run at trace time (cond: its
 * condition): where this call enters it, eager code runs the body and may
 * meet that error there, so the first iteration runs, its condition's
 * value peeked (0, *t true); else 1 (read the condition as before), or -1.
 * The error about the condition that the read raised waits, for the loop's
 * next condition (trace_loop_pending: -1, or 1 when n is not that loop) or
 * the trace's end (trace_refusal_pending), where the body did not fail. */
int trace_loop_peek(Interp *I, Node *n, Value cond, bool *t);
int trace_loop_pending(Interp *I, Node *n);
int trace_loop(Interp *I, Node *n, Env *env, Value cond, int *xs);
/* for over range(...) with a traced bound: 0 (done, *xs set), -1, or 2 (the
 * caller runs the loop eagerly: the trace then depends on the bounds). */
int trace_for_range(Interp *I, Node *n, Env *env, int nargs, const Value *args, int *xs);
/* After an if or loop that could not be a node has read its condition's or
 * bounds' value at trace time: a later read's error no longer gives its
 * reason (Tracer.fallback_why). */
void trace_fallback_done(Interp *I);
/* A cond (while) node for code without an AST (import_onnx's If, Loop):
 * run(ctx, part, in, outs) traces, symbolically, a cond's branch part (0
 * then, 1 else; in NULL) into its nout outputs, or a loop's condition (part
 * 0: one bool into outs[0]) or body (part 1: nc next values) from the
 * carried values in; new refs, 0 or -1 with an error raised. Returns 0
 * with outs (new refs, traced), -1, or 1 when it cannot be a node and the
 * caller runs it at trace time, reading the condition's value (tensor_get_f64:
 * the trace then depends on it), as for tfe's own if and while. */
typedef int (*TraceRunFn)(void *ctx, int part, tfe_tensor *const *in, tfe_tensor **outs);
int trace_cond_fn(Interp *I, Loc loc, tfe_tensor *pred, int nout, TraceRunFn run, void *ctx, tfe_tensor **outs);
int trace_while_fn(Interp *I, Loc loc, int nc, tfe_tensor *const *init, TraceRunFn run, void *ctx, tfe_tensor **outs);
tfe_tensor *trace_var_read(Tracer *T, Value var, tfe_tensor *value); /* takes value; new ref */
/* var (its value now: value, borrowed) is read by a @host function running
 * at trace time: its node gets the variable's read as an input (its gradient) */
void trace_note_host_var(Tracer *T, Value var, const tfe_tensor *value);
void trace_var_reread(Tracer *T, Value var, tfe_tensor *value);      /* value: var's tensor now */
void trace_share_reads(Tracer *T, int id); /* cond or while id, just traced: reads of a variable read before it */
/* A call of an effect builtin or a @host function: records a G_HOST node
 * and (outside branches) runs it. Returns 0/-1 like call_value. */
int trace_host_call(Interp *I, Value f, int argc, const Value *argv, int nkw,
                    Str *const *kwnames, const Value *kwvals, Value *out);
/* The outputs of node id (a cond or while just built) as traced tensors:
 * computed now when the trace has values, symbolic otherwise. */
int trace_node_outputs(Tracer *T, int id, tfe_tensor **outs);
/* A gradient taken inside a trace with respect to t, an output of a traced
 * cond that ran under a tape: in eager code the name holds the tensor the
 * taken branch made, or the very tensor it handed on unchanged (pass), or
 * one this tape does not track (untracked); for a traced loop's output,
 * branch 0 is "it ran", branch 1 "it ran zero times" (the value it started
 * from). 1 and *cs filled, 0 when t is no such output (or nothing needs
 * picking), 2 when whether the loop ran cannot be traced. */
enum { CS_COMPUTED, CS_PASS, CS_UNTRACKED };
typedef struct tfe_tape tfe_tape;
typedef struct CondSource {
    tfe_tensor *pred;    /* the cond's predicate (traced, borrowed) */
    int taken;           /* the branch this call took: 0 then, 1 else */
    int kind[2];         /* by branch: CS_* */
    tfe_tensor *pass[2]; /* CS_PASS: the tensor handed on (traced, borrowed) */
} CondSource;
int trace_cond_source(Tracer *T, const tfe_tape *tape, const tfe_tensor *target, const tfe_tensor *t, CondSource *cs);
/* Whether region (where a tape made in this trace noted a variable read
 * while it was traced symbolically) runs in this call: 1 always (the top,
 * a loop's condition; also a region nested deeper, which a tape made in
 * the trace never sees: stage/trace_cf.c refuses it, and the body of a
 * loop whose condition stage_loop_runs cannot evaluate again: a host call
 * or a random draw, which under a tape run the loop at trace time anyway),
 * 0 never (an attempt that was rolled back: the statement then ran at
 * trace time), 2 with *runs a traced bool scalar (new ref) that says it: a
 * branch's predicate, or whether a loop runs at least once. -1 on a
 * tensor error. */
int trace_region_runs(Tracer *T, int region, tfe_tensor **runs);
/* Whether the branch or loop body being traced symbolically (or one it is
 * in) assigned var before this point. */
bool trace_branch_assigned(Tracer *T, Value var);
/* Whether traced tensor t was made in the region being traced (so it
 * exists only where that region runs). */
bool trace_made_in_region(const Tracer *T, const tfe_tensor *t);
/* pred ? (b ? a + b : a) : e as a traced cond (new ref; NULL on error). */
tfe_tensor *trace_pick(Tracer *T, tfe_tensor *pred, tfe_tensor *a, tfe_tensor *b, tfe_tensor *e);
/* Host node x cannot assign var: a built-in effect that returns nil and
 * changes no variable (print, save_npy, seed, the argument checks), or a
 * method bound to another variable. */
bool trace_host_harmless(const GNode *x, const Obj *var);
/* The value var had when the traced cond now running as one tape entry
 * started (borrowed), or NULL: a read it hands on that no assign precedes
 * in its branch reads it (stage/grad.c), and a read its run makes of another
 * tensor follows an assign there (interp/builtins_autodiff.c). */
tfe_tensor *trace_cf_start(const Tracer *T, const Obj *var);
/* Its entry for var, or NULL. */
struct CfStart *trace_cf_entry(Tracer *T, const Obj *var);
/* Where a read of var a tape made in this trace noted sits among the nodes
 * at the top of the trace (positions in its list): what can assign var
 * between two reads is at positions [the first's lo, the second's hi); hi
 * -1: none is the same tensor as an earlier read. key orders the reads. */
typedef struct TReadPoint { int lo, hi, key; } TReadPoint;
/* t: the read's tensor; regs: the branches it is in (none: at the top);
 * after: it follows an assign in its branch, at_end: and no assign follows
 * it there. 0, or -1 when it cannot be placed (a read in the body of a loop
 * that may assign var other than before an assign at the body's top, or
 * deeper, or between two assigns). */
int trace_read_point(Tracer *T, const Obj *var, const tfe_tensor *t, const int *regs, int nregs, bool after,
                     bool at_end, TReadPoint *pt);
/* Reads at [lo and hi) (above) are one tensor on the calls where nothing
 * between them assigned var, and a tape then sums their gradients in one
 * running sum: 0 nothing there can assign var; 1 something surely does; 2
 * a traced if or loop may: *assigned a traced bool (new ref), true on the
 * calls where it did; -1 something may in a way the graph cannot tell (a
 * host call, an assign in a nested if or loop); -2 a tensor error. *where:
 * the node (if, loop or host call) for 2 and -1. */
int trace_assigned_between(Tracer *T, const Obj *var, int lo, int hi, tfe_tensor **assigned, int *where);
/* How a traced loop reads a variable its body assigns (stage/trace_cf.c,
 * tapes_loop_count): before the body's first assign, between two, after
 * the last, in its condition; TL_UNKNOWN: something in it may assign the
 * variable, or read it, where the graph cannot tell how often (a host
 * call, a nested if or loop). */
/* TL_APART: no read of the tape's stands for its first reads (TL_FIRST,
 * TL_COND), of the tensor the variable held when it started (stage/
 * trace_cf.c, reread_loop_start). TL_REACH: a read of it reaches a
 * value the loop carries. */
enum { TL_FIRST = 1, TL_MID = 2, TL_END = 4, TL_COND = 8, TL_UNKNOWN = 16, TL_APART = 32, TL_REACH = 64 };
/* Are regs (where a tape made in this trace noted a read of var) all the
 * bodies of loops at the top that assign var, and may var hold another tensor now
 * than when the first of them started? Then a read of the same tensor
 * now is a read of its own (no nodes are made). */
bool trace_read_split(Tracer *T, const Obj *var, const int *regs, int nregs);
/* Is t, read of var by a loop running as one tape entry, a tensor the loop
 * made (not the value var had when it started)? Those reads are not noted:
 * the loop's count adds what eager code adds for them (tapes_loop_count). */
bool trace_loop_fresh(const Tracer *T, const Obj *var, const tfe_tensor *t);
/* Does traced tensor t depend on an output k of node id with outs[k] (true
 * when the graph cannot tell)? */
bool trace_uses_output(Tracer *T, const tfe_tensor *t, int id, const bool *outs);
/* The position of node id among the nodes at the top of the trace, or -1. */
int trace_top_pos(Tracer *T, int id);
/* The first position at the top of the trace of the ifs or loops that hold
 * regions regs (-1: one of them is nowhere), and in *only_in whether they
 * are all in node id. */
int trace_regions_pos(Tracer *T, const int *regs, int nregs, int id, bool *only_in);
/* Whether traced loop id runs at least once, as a traced tensor (new ref),
 * or NULL (stage/grad.c). reads: a variable read in its condition may be
 * an earlier read with the value the variable had when the loop started
 * (trace_read_at_start); else (and where there is none) a new read after
 * the loop, where nothing from it on can assign the variable
 * (trace_read_after), or NULL. */
tfe_tensor *stage_loop_runs(Tracer *T, int id, bool reads);
/* A traced tensor (borrowed) with the value var had when node id started:
 * a read of it just before the node, or just after it, with nothing that
 * could assign var between (the node included, for a read after it). NULL
 * when there is none. */
tfe_tensor *trace_read_at_start(Tracer *T, int id, const Obj *var);
/* A traced tensor (new ref) with the value var had when node id (at the
 * top of the region being traced) started, where no read of it serves
 * (trace_read_at_start): a new read of var at the end of the region, when
 * nothing from the node on may assign var. NULL otherwise. */
tfe_tensor *trace_read_after(Tracer *T, int id, Value var);
int trace_enter_fn(Interp *I, Node *fn, const char *name, Loc loc);

/* Gradients through host calls (stage/host_grad.c). */
bool host_node_differentiable(const GNode *n);   /* a @host call with outputs (or a vjp) */
bool host_is_differentiable(Value f);            /* a @host function, or a vjp */
/* A call that computes a gradient in a graph: a vjp, or the check that a
 * gradient is zero (not an effect of the program: stage/check.c runs it). */
bool host_is_gradient_call(Value f);
/* The gradient of host node n's outputs (out[], their gradients dy[], NULL
 * for none), with respect to each of its inputs in[] (dx[i] NULL or
 * TFE_GRAD_SKIP on entry; new refs): the function called again under a
 * tape of its own, as a host node of the trace being recorded, if any. */
/* call: n's number among its graph run's host calls (HostSnap.call), whose
 * reads the function's run again sees, or -1. */
int host_node_vjp(Interp *I, const GNode *n, int call, tfe_tensor *const *in, tfe_tensor *const *out,
                  tfe_tensor *const *dy, tfe_tensor **dx);
/* A tape entry for a host call made while tracing (its ops not taped): the
 * backward is the function's gradient, as host_node_vjp. rng: the random
 * state (key, counter) the call began with, or NULL (its gradient's run of
 * the function then must not draw); rng_trace: the id of the trace whose
 * tape inside records it (the state holds only while it records), or 0. */
void host_record_tape_entry(Interp *I, const GNode *n, Loc loc, int nleaves, tfe_tensor *const *leaves, int nout,
                            tfe_tensor *const *outs, const uint64_t *rng, uint32_t rng_trace);
/* An error (at loc, naming the binding) when g, the gradient of a binding a
 * @host call changed, is not all zeros: checked at every run when recorded. */
int host_check_no_gradient(Interp *I, Loc loc, const char *name, tfe_tensor *g);
/* A tape entry that passes to's gradient on to from. */
void host_record_identity(tfe_tensor *from, tfe_tensor *to);
void trace_leave_fn(Interp *I, Node *fn);

/* A shape of a tensor computed from x[mask] read as a value: a value of the
 * data read at trace time, like int(x) (stage/trace.c). */
void trace_data_shape_read(Interp *I, const tfe_tensor *t);

/* A shape read as a value: the trace is for these dims only (no relaxation). */
static inline void trace_shape_read(Interp *I, const tfe_tensor *t)
{
    if (I->tracer && t && t->node) {
        I->tracer->shape_read = true;
        I->tracer->read_not_clamp = true;
        if (I->tracer->data_shaped) trace_data_shape_read(I, t);
    }
}
/* A slice's bound clamped to t's size (x[:100] of 4 rows is 0:4): the trace
 * is for these dims only, as a shape read; export names the slice at loc
 * (its bounds in the trace are the clamped ones, not the program's). */
static inline void trace_clamp_read(Interp *I, const tfe_tensor *t, Loc loc)
{
    if (I->tracer && t && t->node) {
        I->tracer->shape_read = true;
        if (!I->tracer->clamp_loc.line) I->tracer->clamp_loc = loc;
        if (I->tracer->data_shaped) trace_data_shape_read(I, t);
    }
}
/* A built-in makes a constant of t's shape (zeros_like): where t comes from
 * a @host result, the trace is for that result's sizes (stage/trace.c). */
void trace_size_used(Interp *I, const tfe_tensor *t);
/* A gradient taken while tracing: its ops (the sums that undo a broadcast,
 * the seed) are made for the sizes of this call, so the @host calls made so
 * far are traced for their results' sizes. */
static inline void trace_gradient_taken(Interp *I)
{
    if (I->tracer && I->tracer->nhost) I->tracer->host_size_used = true;
}

#endif
