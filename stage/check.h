/* check.h — the differential check (TFE_CHECK_STAGED=1 or --check-staged):
 * every cached call of a staged function also runs its body eagerly, and the
 * first value that differs is a located error (docs/staging.md, section 12). */
#ifndef TFE_STAGE_CHECK_H
#define TFE_STAGE_CHECK_H

#include "stage/staged.h"

/* Is the check on (--check-staged, or TFE_CHECK_STAGED set and not "0";
 * Interp.check_staged)? */
bool stage_check_on(Interp *I);

/* While a check's eager run runs the body (Interp.check_recording): its host
 * calls and effects are made for real and recorded (call_value in
 * interp/eval.c sends them here). */
int check_host_eager(Interp *I, Value f, int argc, const Value *argv, int nkw,
                     Str *const *kwnames, const Value *kwvals, Value *out);

/* While a check's staged run runs the graph (Interp.check_replay): host
 * nodes (stage/graph_host.c) do not call out; they get the eager run's
 * result and effects. */
int check_host_replay(Interp *I, Value f, int argc, const Value *argv, int nkw,
                      Str *const *kwnames, const Value *kwvals, Value *out);

/* Under the replay, a variable update that the graph ran in place
 * (graph/exec_update.c) instead of calling f (a bound v.assign*): may it
 * (the variable is one the check restores before the graph's run)? And
 * after it: the eager call it stands for, checked by the value w it left. */
bool check_update_tracked(Interp *I, Value f);
int check_update_replay(Interp *I, Value f, const tfe_tensor *w);

/* Interp.stage_limit is set when a graph run stops at a documented limit of
 * staging (docs/staging.md, section 14: a @host call changed the structure
 * of what the graph reads back, a gradient through a binding it changed):
 * under the check that located error is the outcome, not a difference. */

/* A cached call under check (stage/staged.c): the eager run, then the graph
 * (run_graph: the ordinary cached run), then the comparison. */
typedef int (*CheckRunFn)(Interp *I, Trace *t, Leaves *lv, Value *out);
int stage_check_call(Interp *I, Closure *c, Env *e, Trace *t, Leaves *lv, Loc call_loc,
                     CheckRunFn run_graph, Value *out);

#endif
