/* internal.h — the interpreter's private structures: environments, closures,
 * call frames, the error state and the resolver's scopes.
 * Ownership as in value.h: slots own their values; Env and Closure are Objs. */
#ifndef TFE_INTERP_INTERNAL_H
#define TFE_INTERP_INTERNAL_H

#include "interp/interp.h"
#include "tensor/grad.h"
#include "parser/ast.h"

#define TFE_MAX_CALL_DEPTH 1000

/* What executing a statement did. */
enum { XS_OK = 0, XS_ERR = -1, XS_BREAK = 1, XS_CONTINUE = 2, XS_RETURN = 3, XS_DONE = 4 };

/* Objects whose contents can form reference cycles (environments, closures,
 * lists, records) are kept on one intrusive list, so interp_free can break
 * every cycle at exit (the documented rule: cyclic garbage lives until exit). */

/* A function activation's bindings (or a module's globals): a flat array of
 * slots; blocks inside the function get distinct slots from the resolver. */
typedef struct Env {
    Obj h;
    TrackLink link;
    struct Env *parent;   /* lexically enclosing function's Env (owned ref) */
    int nslots;
    Value *slots;
    Value inline_slots[8];
    uint32_t trace_id;    /* the trace that made it (0: none; stage/trace.h) */
    uint64_t born;        /* env_new's count when it was made: a traced if or loop
                             tells the Envs that were there before it (stage/trace_cf.c) */
} Env;

/* The count env_new gives the next Env (Env.born). */
uint64_t env_next_born(void);

/* Resolver facts about one function literal (Node.info of an N_FN). */
typedef struct FnInfo {
    int nparams;
    int nslots;            /* slots of its Env: params first */
    char **param_names;    /* borrowed from the AST */
    Node **defaults;       /* default expressions or NULL */
    bool is_staged, is_host;
    bool stage_implicit;   /* staged only because of --stage-all */
    bool stage_failed;     /* --stage-all found it cannot be staged: runs eagerly */
    bool makes_closures;   /* its body contains a fn: its Env may be captured */
    /* an anonymous fn bound by `let name = fn ...`, `name = fn ...` or
     * `let name = varargs(fn ...)` (staged, host too): the name tracebacks
     * and notes give it (borrowed from the AST); NULL otherwise */
    const char *bound_name;
} FnInfo;

typedef struct Closure {
    Obj h;
    TrackLink link;
    Node *fn;              /* N_FN: the AST stays alive with its Program */
    Env *env;              /* defining environment (owned ref) */
    struct Program *prog;  /* keeps the AST alive (owned ref) */
    const char *name;
    struct StageCache *stage; /* traces of a staged function (stage/staged.c) */
    bool stage_forced;     /* staged: @staged, --stage-all, or made by staged(f) */
    bool stage_by_call;    /* made by staged(f): staged even where --stage-all gave up */
    bool host_forced;      /* host(f) made it a host function */
} Closure;

/* A parsed program (one file, -e text, or REPL entry): the AST lives as long
 * as any closure made from it. */
typedef struct Program {
    int refcount;
    Source *src;
    Node *root;
    struct Program *next_all;
} Program;

typedef struct Frame {
    const char *fname;
    Loc call_loc;           /* where it was called from */
} Frame;

/* Lexical scope during resolution. */
typedef struct Scope {
    struct Scope *parent;
    bool is_function;       /* a function body (new Env) vs a block */
    struct ScopeFn *fn;     /* the function scope this block belongs to */
    int n, cap;
    char **names;
    int *slots;
} Scope;

typedef struct ScopeFn {
    int nslots;
} ScopeFn;

struct Interp {
    InterpOptions opt;
    tfe_tape_stack tapes;   /* the active tapes (tensor/grad.h): every op records onto them */
    Env *globals;
    Scope *global_scope;    /* persists across REPL entries; ->fn counts its slots */
    char **builtin_names;   /* built-ins: resolved as N_NAME with op 2 */
    Value *builtin_vals;
    int nbuiltins, cap_builtins;
    Program *programs;      /* every program run (kept for closures) */
    Record *modules;        /* cache: resolved path -> V_MODULE */
    Record *module_stamps;  /* resolved path -> "mtime size" of the file imported:
                               the REPL imports a changed file again (eval.c) */
    char *script_dir;       /* folder of the main script (imports) */
    TrackLink tracked;      /* sentinel of the cycle list */

    /* the call stack (tracebacks) */
    Frame *frames;
    int nframes, cap_frames;
    /* names given to functions stored in records (eval.c, name_stored):
     * frames and graphs point at them, so they live as long as I */
    char **fn_names;
    int n_fn_names;

    /* the error being raised */
    bool has_error;
    char *err_msg;
    Loc err_loc;
    Frame *err_frames;
    int err_nframes;

    Loc cur_loc;            /* location blamed by interp_raise (builtin calls) */
    Program *cur_prog;      /* the Program whose AST is running, so that the closures
                               made in it keep it alive (interp/eval.c) */
    Value retval;           /* the value of a `return` in flight */
    bool repl;
    uint64_t poll;          /* counts back-edges between interrupt polls */

    /* the staging state (stage/), kept here as Lua keeps its in lua_State */
    bool run_eagerly;       /* run_eagerly(true): staged functions run as plain ones */
    const Value *stage_call_args; /* the arguments of the staged call whose graph is running
                               (a @host call gets a list or record argument of it as that
                               very object), or NULL */
    int check_staged;       /* -1 until read: then 1 (--check-staged, or TFE_CHECK_STAGED
                               set and not "0") or 0 (stage/check.h) */
    struct Check *check_eager; /* the check whose eager run is running, or NULL (stage/check.c) */
    bool check_recording;   /* a check's eager run is recording host calls (stage/check.h) */
    bool formatting;        /* an f-string field is being formatted (trace.c's error then says so) */
    bool indexing;          /* an int index is being read (trace.c's error then says to use gather) */
    struct Check *check_replay; /* a check's staged run replays them (stage/check.h) */
    bool stage_limit;       /* a graph run stopped at a limit of staging (stage/check.h) */
    struct Tracer *tracer;  /* the trace being recorded, or NULL (stage/trace.h) */
    uint32_t trace_id;      /* its id (0: none); Env/Seq/Record made during it carry it */
    /* a cached call whose @host call returned another kind (nil, a tensor) than
     * when it was traced, before any other effect: the call runs another trace
     * of that kind, or traces again, with that result (stage/staged.c) */
    struct HostRedo {
        bool ok;            /* the graph running may stop for it (a cached call's) */
        bool pending;       /* it stopped: f returned result */
        bool armed;         /* the next call of f (traced, or a host node) returns result */
        Value f, result;    /* owned while pending or armed */
    } host_redo;
    /* a staged call running its body eagerly again after its trace stopped
     * past some effects (stage/trace.c, trace_redo_replaying): the @host
     * calls and built-in effects the trace made, in order, which call_value
     * hands back (result and random state after) instead of making them
     * twice (stage/staged.c, stage_effect_replay); NULL: none */
    struct EffectReplay *effect_replay;
    /* a @host call of a cached graph running under a tape (stage/host_reads.c):
     * what it reads that its node does not take as an input (an outside
     * binding it did not read when traced, one too big to flatten, a variable
     * it did not read then) is noted into host_unlinked, the extra sources of
     * the call's tape entry, whose gradient the graph cannot give; NULL: none */
    struct HostReads *host_reads;
    struct HostUnlinked *host_unlinked;
    /* a cached call's backward running: what its @host calls read that
     * way, with the values each call read (HostSnap.call), which the
     * backward's run of each function again sees (stage/grad.c) */
    struct HostSnap *host_snaps;
    int host_nsnaps;
    /* a cached call's graph run noting its host nodes, for a run again
     * eagerly if the graph fails (stage/staged.c, stage_error_redo):
     * print and assert calls in order in graph_log; graph_log_bad when
     * another host node (a @host call, an assign: state a run again would
     * read changed) ran; graph_log_on: noting */
    struct EffectReplay *graph_log;
    bool graph_log_on, graph_log_bad;
};

/* value.c */
void track(TrackLink *l, Obj *o);   /* on the current interpreter's list */
void untrack(TrackLink *l);
void tracked_clear_all(Interp *I);  /* break every cycle (interp_free) */
extern Interp *tfe_current_interp; /* the last interp_new'd, until it is freed */
/* The interpreter running, for the code that is handed no Interp and cannot
 * be: the tensor layer's hooks (tfe_trace_hook, tfe_value_read_hook) are
 * called with no context, a class's to_tensor callback gets only the object,
 * and seq_new/record_new/track are called from everywhere. Its state (the
 * staging state included) lives in the Interp; this is the one way to it
 * without one. NULL when there is none (a unit test's bare values). */
static inline Interp *interp_current(void) { return tfe_current_interp; }
#define OBJ_ENV 200                 /* Obj.kind of an Env (not a Value kind) */
void env_decref(Env *e);
Env *env_new(Interp *I, int nslots, Env *parent);
Closure *closure_new(Interp *I, Node *fn, Env *env, Program *prog);
bool value_equal(Value a, Value b, int *err); /* structural ==; err set on tensor failure */
Value value_seq_tuple(int n, const Value *items);  /* increfs items */
Seq *seq_as(Value v);
void program_decref(Program *p);

/* error.c */
int raise_at(Interp *I, Loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int raise_msg_at(Interp *I, Loc loc, const char *msg);
/* The call stack cut to depth base, then f[0 .. n-1] pushed (a staged graph
 * node's inlined calls, so its error prints an eager run's traceback);
 * returns the depth before, for frames_pop_to. */
int frames_push_at(Interp *I, int base, const Frame *f, int n);
void frames_pop_to(Interp *I, int depth);
void error_report(Interp *I, FILE *f);
void error_clear(Interp *I);
void diag_print(FILE *f, Loc loc, const char *msg);
/* "[rank N] " in a job of several ranks (docs/distributed.md), else "": the
 * start of every error message a rank prints. */
const char *diag_rank_tag(void);

/* resolve.c: binds names to (depth, slot); reports undefined names. */
int resolve_program(Interp *I, Node *prog, bool repl);
int global_slot(Interp *I, const char *name, bool create);
/* The Env of the globals made as big as the global scope (new slots undefined). */
void interp_globals_grow(Interp *I);
int builtin_index(Interp *I, const char *name); /* -1 if none */
Scope *global_scope_new(void);
/* "undefined name 'x'" with a hint for Python's spellings (True, None) or
 * the nearest name in scope (a Scope *, NULL: the globals) or builtin. */
int raise_undefined(Interp *I, Loc loc, const char *name, void *scope);
/* "did you mean": the nearest candidate by edit distance, if near enough */
typedef struct Suggest { const char *name, *best; int dist, max; } Suggest;
void suggest_init(Suggest *sg, const char *name);
void suggest_add(Suggest *sg, const char *cand);
void suggest_builtins(Interp *I, Suggest *sg);
const char *suggest_text(const Suggest *sg, char *buf, size_t n);
const char *kwarg_hint(const char *kw, const char *const *params, int n, char *buf, size_t bufn);
void global_scope_free(Scope *s);

/* eval.c */
int eval_program(Interp *I, Program *p, bool echo);
int call_value(Interp *I, Value f, int argc, const Value *argv, int nkw,
               Str *const *kwnames, const Value *kwvals, Value *out);
int value_truth(Interp *I, Value v, Loc loc, bool *out);
/* value_truth for an operand of and, or, not (word): a tensor of several
 * elements (a mask) says logical_and / logical_or / logical_not. */
int value_truth_op(Interp *I, Value v, Loc loc, bool *out, const char *word);
int import_module(Interp *I, Node *n, Value *out);
int module_search_dirs(Interp *I, char **dirs, int cap); /* import's folders, in order */
/* The i-th item of an iterable as 'for' walks it (tensors along axis 0,
 * tuples, lists, ranges, record keys, one-byte strings): 0 with *x set,
 * 1 past the end, -1 after an error located at loc. */
int iter_item(Interp *I, Value it, int64_t i, Loc loc, Value *x);
/* for the tracer (stage/trace.c, stage/trace_cf.c, stage/staged.c): a
 * closure's body in its Env (arguments in place, frame pushed); a block or an
 * elif N_IF; statements l[k..]; an expression */
int interp_run_body(Interp *I, Closure *c, Env *e, Value *out);
int interp_exec_branch(Interp *I, Node *n, Env *env);
int interp_exec_rest(Interp *I, NodeList *l, int k, Env *env);
int interp_eval_expr(Interp *I, Node *n, Env *env, Value *out);


/* builtins.c */
void builtins_register(Interp *I);
Value builtin_new(const char *name, BuiltinFn fn, void *data);

/* builtins_progress.c: `for x in progress(it)` walks it (exec_for asks
 * progress_iterable for the inner value: borrowed, nil when v is no progress
 * value) and reports to the bar; begin fails (-1, raised) inside a trace. */
void builtins_progress_register(Interp *I);
Value progress_iterable(Value v);
int progress_begin(Interp *I, Value bar, int64_t total, Loc loc);
void progress_step(Value bar, int64_t done, bool finished);
/* print() around its output: clears the line of a bar being redrawn on the
 * terminal, then draws the bar again below the printed line */
void progress_print_begin(void);
void progress_print_end(void);

/* builtins_plot.c: plot(), scatter(), hist() (SVG or PNG charts) and
 * sparkline(); builtins_imshow.c: imshow() (images) */
void builtins_plot_register(Interp *I);
void builtins_imshow_register(Interp *I);
void builtins_lib_register(Interp *I);  /* interp/builtins_lib.c */

/* write_file_atomic: util/atomic_file.h */
#include "util/atomic_file.h"

/* builtins_autodiff.c: variables, and walking an object for its state (params,
 * save, restore). state_walk visits every variable (trainable only unless
 * WALK_UNTRAINABLE) and, with WALK_TENSORS, every tensor reachable from obj
 * through records, modules, lists and tuples, each once at its first dotted
 * path ("layers.0.w"); a bare variable is named by its name or "value", a bare
 * tensor "value". Numbers, strings and functions are not state. A nonzero
 * result of visit stops the walk and is returned. */
enum { WALK_TENSORS = 1, WALK_UNTRAINABLE = 2 };
typedef int (*StateVisit)(void *ctx, const char *path, Value leaf);
int state_walk(Value obj, int flags, StateVisit visit, void *ctx);
bool value_is_variable(Value v);
int variable_update(Interp *I, Value var, int aop, Value x); /* var op= x in place; x borrowed */
tfe_tensor *variable_peek(Value var);               /* its value, borrowed; no tape sees it */
unsigned variable_grad_id(Value var);               /* what its gradients carry (tfe_tensor.grad_for), or 0 */
/* The user tapes in their with blocks that watch variables as they are
 * read (not spent): their tensor-layer tapes, up to cap into out; how many. */
int tapes_watching_vars(tfe_tape **out, int cap);
int variable_assign_target(Value callable, tfe_tensor ***slot); /* graph/exec_update.c: see there */
/* The tapes made in trace trace_id (stage/trace_cf.c, export_reads): their
 * read of var as t, which the run of a traced if made as a value it hands
 * on, is a read where region (the branch of that read) runs too;
 * tapes_reads_settle ends that run. */
void tapes_read_in_region(uint32_t trace_id, Value var, const tfe_tensor *t, int region);
void tapes_reads_settle(uint32_t trace_id);
/* Tensor t is, to the tapes made in trace trace_id, a read of var in
 * region (a branch not run now; after: one after an assign there, at_end:
 * with none after it): stage/grad.c. */
void tapes_read_fresh(uint32_t trace_id, Value var, tfe_tensor *t, int region, bool after, bool at_end);
/* To the tapes made in trace trace_id: traced loop id reads and assigns
 * var (kinds: TL_*, stage/trace.h), and count (a traced int64 scalar,
 * borrowed) is how many times its body ran. */
/* To the tapes made in trace trace_id: their read of var as t noted in
 * regions r0 or r1 (a cond's branches, a loop's condition and body) is no
 * read there (stage/trace_cf.c, reread_vars: another tensor stands for it). */
void tapes_read_unnote(uint32_t trace_id, Value var, const tfe_tensor *t, int r0, int r1);
/* To the tapes made outside trace trace_id (before it began), which record
 * the call: a read of var as t (its stored tensor) at this point, as eager
 * code reads it (stage/trace.c, trace_var_read: a header the trace makes
 * for a second read is then, to them, a copy of t). */
void tapes_read_outer(uint32_t trace_id, Value var, tfe_tensor *t);
void tapes_loop_count(uint32_t trace_id, Value var, int kinds, int id, tfe_tensor *count, const bool *reach,
                      int nreach);
void variable_replace_take(Value var, tfe_tensor *t); /* no checks: the caller made t fit */

/* builtins_ckpt.c: save, restore, load (safetensors checkpoints) */
void builtins_ckpt_register(Interp *I);

#endif
