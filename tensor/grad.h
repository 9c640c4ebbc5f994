/* grad.h — gradient rules (the eighth column of the op table) and the tape.
 * Ownership: rules and tape functions borrow their tensor arguments and store
 * new references in their output arrays (NULL where there is no gradient). */
#ifndef TFE_GRAD_H
#define TFE_GRAD_H

#include "tensor/ops.h"

/* The gradient rule of one op. c is the forward call exactly as it ran
 * (inputs and attrs), y its outputs, dy the gradient of each output (never
 * NULL: the tape passes zeros for an output nobody used). The rule sets dx[i]
 * to the gradient of input i, with input i's shape (broadcasting undone by
 * summing), or NULL when input i gets none (an int/bool input, an index).
 * Rules are written ONLY with tfe_execute and its wrappers, never with kernels,
 * so that a gradient computed under an outer tape is itself recorded (higher
 * order) and a gradient computed while tracing is staged.
 * On entry each dx[i] is NULL (wanted) or TFE_GRAD_SKIP (no source depends
 * on input i: the rule may leave it unset, saving e.g. the data gradient of
 * x @ w); the caller treats a remaining TFE_GRAD_SKIP as NULL.
 * Returns 0, or -1 with the error set (messages name the op). */
#define TFE_GRAD_SKIP ((tfe_tensor *)1)
typedef int (*tfe_grad_fn)(const tfe_opcall *c, tfe_tensor *const *y, tfe_tensor *const *dy, tfe_tensor **dx);

#define OP(id, name, nin, nout, flags, infer, kernel, grad) \
    int grad(const tfe_opcall *c, tfe_tensor *const *y, tfe_tensor *const *dy, tfe_tensor **dx);
#include "tensor/ops.def"
#undef OP

extern const tfe_grad_fn tfe_grads[TFE_NOPS];

/* Sum g over the axes that broadcasting added or stretched, so that the
 * result has shape (rank, shape) — the adjoint of broadcast_to. A float16 or
 * bfloat16 g is summed in float32, and the result stays float32. */
tfe_tensor *tfe_unbroadcast(tfe_tensor *g, int rank, const int64_t *shape);
/* A tensor of like's dtype and shape (an unknown dim of a traced one as 0)
 * filled with v, on like's device: the zeros and ones gradients start from. */
tfe_tensor *tfe_filled_like(const tfe_tensor *like, double v);

/* --- one step of a reverse sweep (tensor/grad_step.c) ------------------------------
 * The tape's sweep and a staged backward's (stage/grad.c) both take an op's
 * step with tfe_grad_step and add with tfe_grad_add, so they cannot drift.
 * None flags: inside a trace a gradient may be none in eager terms only on
 * some runs (which path a staged if or loop takes); it is then -0.0s (adding
 * them changes nothing) with a traced bool flag, true where it is none. */

/* One op's backward. c is the forward call as it ran (c->out its outputs);
 * dy[j] output j's gradient (NULL: none) and dyflag[j] its flag (NULL array
 * or entry: real); skip[i] (NULL: none skipped): no source depends on input
 * i. An output with no gradient gets zeros (so does a flagged one beside a
 * real one, where the flag is true), the op's rule runs, and where every
 * output's gradient is none (*none: that flag, a new ref, or NULL) what it
 * made is -0.0s. dx[i]: a new ref or NULL, on input i's device (when no tape
 * or trace records). An op with no rule (or F_NODIFF) gives no dx.
 * Returns 0, or -1 with the error set and every dx[i] NULL. */
int tfe_grad_step(const tfe_opcall *c, tfe_tensor *const *dy, tfe_tensor *const *dyflag,
                  const bool *skip, tfe_tensor **dx, tfe_tensor **none);
/* A gradient lives where its tensor x does: *d moved to x's device (when no
 * tape or trace records). Returns 0, or -1 with the error set (*d NULL). */
int tfe_grad_place(tfe_tensor **d, const tfe_tensor *x);
/* *g += d (takes d; *g NULL: *g = d). Returns 0, or -1 with the error set. */
int tfe_grad_add(tfe_tensor **g, tfe_tensor *d);
/* Flags: a AND b (borrowed; NULL is real: new ref or NULL); flag ? v : d
 * (borrowed, new ref); where every output's gradient dy[j] (not NULL) is
 * none (new ref; NULL: somewhere real). */
tfe_tensor *tfe_grad_flag_and(tfe_tensor *a, tfe_tensor *b);
tfe_tensor *tfe_grad_flag_fill(tfe_tensor *flag, tfe_tensor *d, double v);
tfe_tensor *tfe_grad_none_all(int nout, tfe_tensor *const *dy, tfe_tensor *const *flag);

/* --- the tape (tensor/tape.c) ---------------------------------------------------
 * Tapes form a stack of active tapes. While any is active, tfe_execute calls
 * tfe_tape_record after each op: every active tape that tracks one of the
 * op's inputs (watched, or made by an op it recorded) records the op and then
 * tracks its outputs. A tape does not record the ops of its own gradient
 * computation, but every other active tape does (nested tapes: higher order). */
typedef struct tfe_tape tfe_tape;

tfe_tape *tfe_tape_new(bool persistent);
void tfe_tape_free(tfe_tape *t);
void tfe_tape_push(tfe_tape *t);     /* make active (entering `with tape()`) */
void tfe_tape_pop(tfe_tape *t);      /* leaving the with block */
void tfe_tape_watch(tfe_tape *t, tfe_tensor *x);
bool tfe_tape_is_watched(const tfe_tape *t, const tfe_tensor *x);
bool tfe_tape_watches(const tfe_tape *t, const tfe_tensor *x); /* watched by t.watch, not as an op output */
/* how many recorded ops read x whose outputs the target depends on */
int tfe_tape_uses(const tfe_tape *t, const tfe_tensor *x, const tfe_tensor *target);
bool tfe_tape_made(const tfe_tape *t, const tfe_tensor *x);     /* x is a recorded op's output */
/* x, the output of a recorded op with conditional aliases (a traced if or
 * loop, tfe_tape_cond_alias): up to max pairs of the input x is at run time
 * (ins) and the traced bool that says where (flags; borrowed). */
int tfe_tape_cond_aliases(const tfe_tape *t, const tfe_tensor *x, int max, tfe_tensor **ins, tfe_tensor **flags);
/* How many entries t holds; in entry k, the inputs from the from-th on
 * that are old become new (a tensor of the same value that stands for
 * another read of it: stage/trace_cf.c, reread_vars). Returns how many. */
int tfe_tape_nentries(const tfe_tape *t);
int tfe_tape_entry_swap_in(tfe_tape *t, int k, int from, const tfe_tensor *old, tfe_tensor *new_in);
/* Drawing a tape (t.graph(), interp/tape_view.c). keep_view: the gradient
 * call keeps the entries (a non-persistent tape too) and each tensor's final
 * gradient. tfe_tape_entry: entry k's op (custom: a staged call's entry),
 * and its nin inputs then nout outputs (borrowed); false when there is none.
 * tfe_tape_view_grad: x's gradient in the last call (borrowed), or NULL. */
void tfe_tape_keep_view(tfe_tape *t, bool on);
bool tfe_tape_entry(const tfe_tape *t, int k, tfe_op *op, bool *custom, int *nin, int *nout,
                    tfe_tensor *const **ts);
tfe_tensor *tfe_tape_view_grad(const tfe_tape *t, const tfe_tensor *x);
extern int tfe_tapes_active;         /* number of active tapes (0: no recording cost) */
/* The stack of active tapes is state of whoever runs the program: the
 * interpreter holds one (Interp.tapes) and makes it the one every op records
 * onto with tfe_tape_stack_use (NULL: the tensor layer's own, for a program
 * without an interpreter, such as a unit test). */
typedef struct tfe_tape_stack { tfe_tape **active; int n, cap; } tfe_tape_stack;
void tfe_tape_stack_use(tfe_tape_stack *s);
void tfe_tape_record(const tfe_opcall *c);
/* How many distinct active tapes can record now (tracking something, not
 * computing their own gradient, not spent): two or more can record a
 * backward computed under them (a higher order). */
int tfe_tapes_recording(void);
/* The same, counting also the tapes also[] (nalso) that track nothing yet
 * but will (a user tape watches a variable a staged call reads). */
int tfe_tapes_recording_or(tfe_tape *const *also, int nalso);
/* The same among the active tapes 0..upto-1 only (the outermost first: a
 * trace's outer tapes are those active when it began). */
int tfe_tapes_recording_below(int upto, tfe_tape *const *also, int nalso);
/* t takes one first-order gradient of what it records, right after, and
 * that gradient is no part of the program's (--check-staged's tape, which
 * compares a staged call's gradient with the eager run's: stage/check.c):
 * tfe_tapes_recording does not count it, so the program's tapes decide
 * how a staged call under them records itself, as without the check. */
void tfe_tape_set_aside(tfe_tape *t);
/* A recording tape tracks one of in[] but none of out[]: it began after
 * the op that made out ran (tensor/tape.c). */
bool tfe_tapes_late(int nin, tfe_tensor *const *in, int nout, tfe_tensor *const *out);
/* How many distinct recording tapes among the active ones from..to-1 (the
 * outermost first) track one of in[] (a trace's outer tapes: 0 to the
 * count it began under; those made in it: from there on)? */
int tfe_tapes_tracking(int from, int to, int nin, tfe_tensor *const *in);
/* The same, on the n outermost active tapes only (those a trace began under). */
void tfe_tape_record_outer(const tfe_opcall *c, int n);
/* A tape entry whose backward is not an op's rule: a staged call records
 * one such entry for its whole graph (stage/grad.c). backward gets the
 * entry's inputs, outputs and output gradients and sets dx[i] (NULL or
 * TFE_GRAD_SKIP on entry, as for rules). With `totals` set, dy[j] is NULL
 * for an output no gradient reached (an eager tape would not visit what
 * made it; without, zeros), and at an input's first place among in[] dx[i]
 * is instead its gradient so far
 * on entry (borrowed; NULL: none yet): the backward adds its contributions
 * to that one by one, in the order an eager tape would (so the sums are bit
 * for bit eager's), and sets dx[i] to the total (a new reference; NULL:
 * nothing, the tape keeps what it had). The tape holds one reference. */
typedef struct tfe_custom_grad {
    int refcount;
    bool totals;
    int (*backward)(struct tfe_custom_grad *self, int nin, tfe_tensor *const *in, int nout,
                    tfe_tensor *const *out, tfe_tensor *const *dy, tfe_tensor **dx);
    void (*release)(struct tfe_custom_grad *self);  /* refcount reached 0 */
    /* None flags, set by the tape around a call of backward (NULL arrays
     * when the tape has none): traced bools, only inside a trace, true
     * where a gradient is none in eager terms (nothing reached it on the
     * path a traced if or loop takes when the graph runs; the gradient is
     * -0.0s there). dy_none[j] is dy[j]'s, dx_none_in[i] that of a total's
     * gradient so far (borrowed; NULL: real); the backward may set
     * dx_none[i] (a new reference; NULL on entry) to say where its dx[i]
     * is none. */
    tfe_tensor *const *dy_none;
    tfe_tensor *const *dx_none_in;
    tfe_tensor **dx_none;
    /* Set by the tape around a call of backward (inside a trace): inputs
     * that are one tensor (the same header twice) are that one tensor at
     * every call of the graph, which the tape picks by a traced bool
     * (tfe_tape_cond_alias), so the backward sums their uses as one. */
    bool one_inputs;
    /* Its backward may run twice for one entry with nothing seen of the
     * second run but its results (no host code in it): set by its maker. */
    bool rerun;
    /* Its outputs are values of ops eager code would have recorded one by
     * one (a staged call's graph, a traced if or loop): a source among them
     * whose gradient would also flow through another of them inside it is
     * an error (the backward gives gradients of its inputs only), never the
     * direct uses alone. Set by its maker. */
    bool composite;
} tfe_custom_grad;
/* Record a custom entry on every active tape that tracks one of in[]. */
void tfe_tape_record_custom(tfe_custom_grad *g, int nin, tfe_tensor *const *in, int nout,
                            tfe_tensor *const *out);

/* The same, where out[j] is at run time the very tensor in[same[j]] (same[j]
 * >= 0; -1: not; nin + k, k < j: out[k], one tensor twice among them), which the entry gave a header of its own: to the first
 * nsame active tapes (those outside any trace in progress, whose gradients
 * are of this call's values) the two are one tensor, as to eager code, so
 * the uses of both add to one running sum in tape order (and the entry gets
 * no gradient for out[j]). */
void tfe_tape_record_custom_same(tfe_custom_grad *g, int nin, tfe_tensor *const *in, int nout,
                                 tfe_tensor *const *out, const int *same, int nsame);
/* An identity entry on the first n active tapes: out is a header of in
 * (a variable's tensor read again), one tensor to those tapes. */
void tfe_tape_record_same_outer(tfe_tensor *in, tfe_tensor *out, int n);
/* On the active tapes from index from on (those made in a trace in
 * progress), the entry just recorded with outputs out: its out[j] is in[csame[j]]
 * (-1: never) where the traced bool ccond[j] is true (a traced loop that ran
 * zero times), so what reaches out[j] is added there to that input's
 * running sum as it comes, as eager code's one tensor. */
void tfe_tape_cond_same(int from, int nout, tfe_tensor *const *out, const int *csame, tfe_tensor *const *ccond);
/* The same, any number of them: out[outk[i]] is, where the traced bool
 * cond[i] is true, the entry's input to[i] (a traced if's result, where the
 * branch that ran ends it on a value from outside it); one output may have
 * several, under exclusive bools. */
void tfe_tape_cond_alias(int from, int nout, tfe_tensor *const *out, int n, const int *outk, const int *to,
                         tfe_tensor *const *cond);

/* Gradient of target (summed if not scalar) w.r.t. each source; a source the
 * target does not depend on gets zeros of its shape and dtype. A tape that is
 * not persistent answers one call; a second is an error. 0 or -1 + error. */
int tfe_tape_gradient(tfe_tape *t, tfe_tensor *target, int n, tfe_tensor *const *sources, tfe_tensor **grads);
/* The same, each source's gradient starting from init[i] (borrowed; NULL:
 * from nothing) rather than from nothing: what reaches it is added to that
 * one by one, as an eager tape adds to a gradient so far. */
int tfe_tape_gradient_from(tfe_tape *t, tfe_tensor *target, int n, tfe_tensor *const *sources,
                           tfe_tensor *const *init, tfe_tensor **grads);
/* The same, where alias[i] (NULL: none) is another source whose gradient
 * sources[i]'s adds to, as if they were one tensor (what an eager tape sums
 * in one running sum); keep: the tape keeps its entries for another call. */
int tfe_tape_gradient_alias(tfe_tape *t, tfe_tensor *target, int n, tfe_tensor *const *sources,
                            tfe_tensor *const *alias, bool keep, tfe_tensor **grads);

#endif
