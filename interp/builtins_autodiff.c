/* builtins_autodiff.c — the language side of autodiff: variable(), tape() as a
 * `with` context (watch, gradient over any structure of sources), params(),
 * and the functional forms grad() and value_and_grad() built on tapes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "interp/builtins_args.h"
#include "interp/internal.h"
#include "interp/tape_view.h"
#include "tensor/device.h"
#include "tensor/grad.h"
#include "stage/host_reads.h"
#include "stage/trace.h"
#include "util/xalloc.h"

/* --- variables ---------------------------------------------------------------------- */

typedef struct Variable {
    Object o;
    tfe_tensor *value;  /* owned; replaced (never changed in place) by assign */
    char *name;         /* NULL when unnamed */
    bool trainable;
    uint64_t prov;      /* the set of it alone (tfe_tensor.prov, held; 0: none, not trainable) */
    uint32_t prov_id;   /* its id in provenance sets (never reused; 0: not trainable) */
    uint16_t grad_id;   /* what its gradients carry (tfe_tensor.grad_for): 1 .. 0xfffe, wrapping */
} Variable;

/* --- provenance ----------------------------------------------------------------------
 * Each trainable variable gets an id of its own (never reused) and holds the
 * provenance set of it alone; its value and every read of it carry that
 * set, and each op's result the union of its inputs' (tensor/dispatch.c,
 * tfe_prov_propagate; tensor/prov.c), so a tensor knows exactly which
 * variables it was computed from, wherever that ran: before a tape, under
 * an earlier one, in a graph (graph/exec.c, prov_set). early_read checks it
 * at t.gradient, for any number of variables. */
static uint32_t prov_last_id;

static const ObjectClass variable_class;

static bool is_variable(Value v) { return v.kind == V_OBJECT && ((Object *)v.u.o)->cls == &variable_class; }

/* --- tapes ---------------------------------------------------------------------------
 * A Tape object wraps a tfe_tape and remembers which tensor each variable held
 * when it was read while the tape was active: a variable given as a source
 * means the gradient w.r.t. those tensors (summed if it was read with several
 * values, i.e. assigned in between). */

/* A read of a variable (var and t owned). A tape made inside a staged
 * function notes the reads a traced if or loop makes when its branches are
 * traced, which serve every later call; on a call that skips them eager code
 * reads nothing there. So a read noted only in such branches or loop bodies
 * keeps their regions (regs, nregs > 0): its gradient is added to the
 * variable's only where one of them ran (unflatten). nregs 0: always read. */
typedef struct VarRead {
    Variable *var;
    tfe_tensor *t;
    int *regs, nregs;
    int fresh; /* first noted by the run of a traced if (again): 1, then 2 once
                  tapes_read_in_region set where it is (0: settled) */
    bool after; /* in a branch, after an assign of the variable there (not its value when the if started) */
    bool at_end; /* ... and its value is the one after the if (no assign follows it there) */
    bool zeros;  /* read only in bodies of loops that assign the variable, and its tensor read
                    again after them: its part is zeros (what reaches such a read is refused) */
} VarRead;

typedef struct Tape {
    Object o;
    tfe_tape *tape;
    bool persistent;
    bool entered;       /* inside its with block */
    bool autowatch;     /* user tapes watch trainable variables that are read; grad()'s do not */
    bool spent;         /* not persistent and its gradient was taken: watches nothing more */
    bool draw;          /* tape(draw=true): its gradient call keeps the recording, the reads
                           and every gradient, for t.graph() (interp/tape_view.c) */
    bool symbolic;      /* started inside a branch or loop body a trace records symbolically */
    uint32_t trace;     /* the trace recording when it started (I->trace_id; 0: none) */
    int region;         /* ... and the trace's region it started in */
    uint32_t made;      /* the trace recording when tape() made it (0: none) */
    int *once_regions;  /* not persistent, made at the top of trace `made`, and its one gradient
                           call made in these branches of traced ifs at the top (owned): used up
                           on the calls that run one, which a later call checks at run time */
    int nonce;
    VarRead *reads;
    int nreads, capreads;
    struct LoopNote *loops; /* the traced loops that read and assign a variable (tapes_loop_count) */
    int nloops;
    tfe_tensor **wt;    /* the tensors t.watch was called on (borrowed: the tape keeps them) ... */
    uint64_t *wt_at;    /* ... and tfe_tensor_serial_now then, at the first watch */
    int nwt;
    bool wt_top;        /* one of them watched outside any branch or loop body traced symbolically */
    int *wt_regs;       /* ... and the trace's regions of such bodies the others were watched in
                           (nothing_read: a watch counts only where it ran) */
    int nwt_regs;
    uint64_t *wins;     /* its with blocks, as pairs of tensor serials (tfe_tensor_serial_now at
                           the start and the end; UINT64_MAX while it runs): a target made
                           outside all of them was never seen by the tape (target_recorded) */
    int nwins;
} Tape;

/* A traced loop, met while a tape made in this trace was active, that reads
 * a variable and assigns it (var and count owned). */
struct LoopNote {
    Variable *var;
    tfe_tensor *count; /* how many times its body ran, traced */
    int id, kinds;     /* its node; TL_* (stage/trace.h) */
    bool *reach;       /* TL_REACH: by output of its node, a value it carries that a read of var
                          reaches (owned) */
    int nreach;
};

static const ObjectClass tape_class;

/* The user tapes whose with block is running, innermost last (variables
 * read while they are active are watched on each). */
static Tape **watching;
static int nwatching, capwatching;

static void read_add_region(VarRead *r, int region)
{
    for (int k = 0; k < r->nregs; k++)
        if (r->regs[k] == region) return;
    r->regs = xrealloc(r->regs, sizeof *r->regs * (size_t)(r->nregs + 1));
    r->regs[r->nregs++] = region;
}

/* region: the trace's region of a branch or loop body traced symbolically
 * that the read is in (0: none, an unconditional read); again: a read that
 * the run of such a traced if or loop makes, at trace time, as one tape
 * entry (stage/trace_cf.c), which was noted where it is when traced, or,
 * for a tensor the branch assigned to the variable, is noted now with the
 * region the run went through. */
static void tape_note_read_after(Tape *T, Variable *v, tfe_tensor *t, int region, bool again, bool after,
                                 bool at_end);

static void tape_note_read(Tape *T, Variable *v, tfe_tensor *t, int region, bool again)
{
    tape_note_read_after(T, v, t, region, again, false, false);
}

static void tape_note_read_after(Tape *T, Variable *v, tfe_tensor *t, int region, bool again, bool after,
                                 bool at_end)
{
    if (T->spent) return;
    if (tfe_tape_is_watched(T->tape, t)) {
        for (int i = 0; i < T->nreads; i++) {
            VarRead *r = &T->reads[i];
            if (r->var != v || r->t != t) continue;
            if (again || !r->nregs) return;
            /* read in loops that assign the variable (their gradient is
             * zeros), then again after one of them may have assigned it:
             * one tensor in the call that traced, not on every call; a
             * read of its own, which the chain of reads places */
            Tracer *tr = region ? trace_current() : NULL;
            if (tr && trace_read_split(tr, &v->o.h, r->regs, r->nregs)) {
                r->zeros = true; /* (the tensor's gradient is the later read's) */
                continue;
            }
            if (region) {
                read_add_region(r, region);
            } else { /* read unconditionally too */
                free(r->regs);
                r->regs = NULL;
                r->nregs = 0;
            }
            return;
        }
    } else {
        tfe_tape_watch(T->tape, t);
    }
    if (T->nreads == T->capreads) {
        T->capreads = T->capreads ? T->capreads * 2 : 8;
        T->reads = xrealloc(T->reads, sizeof *T->reads * (size_t)T->capreads);
    }
    v->o.h.refcount++;
    tensor_incref(t);
    T->reads[T->nreads] = (VarRead){v, t, NULL, 0, again, after, at_end, false};
    if (region) read_add_region(&T->reads[T->nreads], region);
    T->nreads++;
}

static void tape_clear_reads(Tape *T)
{
    for (int i = 0; i < T->nreads; i++) {
        tensor_decref(T->reads[i].t);
        value_decref(v_obj(V_OBJECT, T->reads[i].var));
        free(T->reads[i].regs);
    }
    free(T->reads);
    T->reads = NULL;
    T->nreads = T->capreads = 0;
    for (int i = 0; i < T->nloops; i++) {
        tensor_decref(T->loops[i].count);
        free(T->loops[i].reach);
        value_decref(v_obj(V_OBJECT, T->loops[i].var));
    }
    free(T->loops);
    T->loops = NULL;
    T->nloops = 0;
}

/* The value of a variable as an op input: a new reference, watched by every
 * active tape when the variable is trainable (automatic watching). While a
 * trace records, the read is a graph node first, and the tapes watch the
 * tensor that stands for it: in a loop body traced symbolically every read
 * is a tensor of its own (stage/trace.c, trace_var_read), and a tape that
 * watched the variable's stored value would see no path to the loss (a zero
 * gradient). */
static tfe_tensor *var_read(Tracer *tr, Variable *v) /* tr: the trace being recorded, or NULL */
{
    tfe_tensor *t = v->value, *stored = t;
    tensor_incref(t);
    if (tr) trace_note_host_var(tr, v_obj(V_OBJECT, v), t); /* (a @host function's read) */
    if (tr) t = trace_var_read(tr, v_obj(V_OBJECT, v), t);
    if (t && v->prov) tfe_prov_assign(&t->prov, tfe_prov_union(t->prov, v->prov));
    bool sym = tr && tr->symbolic;
    if (t && v->trainable && nwatching)
        for (int i = 0; i < nwatching; i++) {
            /* a tensor of the trace's that a tape has as a copy of the
             * stored one (a read the trace makes again after a traced if
             * or loop) is, to that tape, a read of the stored one, as in
             * eager code: its gradient already reaches it */
            tfe_tape *tp = watching[i]->tape;
            bool copy = t != stored && tfe_tape_is_watched(tp, t) && !tfe_tape_watches(tp, t);
            /* A read in a branch or loop body traced symbolically is, to a
             * tape started before it, no read: that tape sees the branch or
             * body run as one entry (stage/trace_cf.c), and that run notes
             * the reads it makes, of the stored tensors; the symbolic one
             * would get no gradient, and its zeros would be added to the
             * variable's (-0.0 + 0.0 is 0.0), as would a read in a branch
             * not taken. A tape made inside this trace (not in the branch)
             * takes the stored tensor: what it records serves later calls,
             * which may take the branch (or not: the region says where). */
            int region = 0;
            if (sym && !watching[i]->symbolic) {
                if (watching[i]->trace != tr->id) continue;
                /* after the branch assigned v, the read is not of the
                 * stored tensor but of the one the assign makes: the if
                 * hands it on as an output, and the run notes it
                 * (stage/trace_cf.c, export_reads) */
                if (trace_branch_assigned(tr, v_obj(V_OBJECT, v))) continue;
                copy = true;
                region = tr->region;
            }
            bool again = tr && tr->cf_running && watching[i]->trace == tr->id && !watching[i]->symbolic;
            if (again && trace_loop_fresh(tr, &v->o.h, stored)) continue; /* (a tensor the loop made) */
            if (again) region = tr->cf_region;
            /* (the run of a traced if read what a branch assigned) */
            const tfe_tensor *s0 = again ? trace_cf_start(tr, &v->o.h) : NULL;
            tape_note_read_after(watching[i], v, copy ? stored : t, region, again, s0 && s0 != stored, false);
        }
    /* (a cached graph's @host call under a tape: a read its node does not
     * take, once the tapes watch it; stage/host_reads.c) */
    Interp *I = interp_current();
    if (t && !tr && I && I->host_reads) host_reads_var(I, v_obj(V_OBJECT, v), v->name, v->trainable, t);
    return t;
}

/* a class callback, handed only the object: the trace comes from trace_current() */
static tfe_tensor *variable_to_tensor(Obj *o) { return var_read(trace_current(), (Variable *)o); }

static void variable_free(Obj *o)
{
    Variable *v = (Variable *)o;
    tfe_prov_release(v->prov);
    tensor_decref(v->value);
    free(v->name);
    free(v);
}

static char *variable_repr(Obj *o)
{
    Variable *v = (Variable *)o;
    char sh[200];
    shape_str(v->value->rank, v->value->shape, sh);
    const char *name = v->name ? v->name : "";
    size_t n = strlen(name) + strlen(sh) + 32;
    char *s = xmalloc(n);
    snprintf(s, n, "<variable %s%s%s %s>", name, *name ? " " : "", dtype_name(v->value->dtype), sh);
    return s;
}

/* An op that must not be recorded (a variable's update is not differentiable,
 * and recording it would keep the old value alive on the tape). */
static tfe_tensor *unrecorded(tfe_op op, tfe_tensor *a, tfe_tensor *b, const tfe_attrs *at)
{
    int saved = tfe_tapes_active;
    tfe_tapes_active = 0;
    tfe_tensor *in[2] = {a, b};
    tfe_tensor *r = tfe_call1(op, b ? 2 : 1, in, at);
    tfe_tapes_active = saved;
    return r;
}

static const char *const assign_names[] = {"assign", "assign_add", "assign_sub"};

/* The compound assignments on a variable (`v += x`, `v -= x`, `v *= x`,
 * `v /= x`) update it in place: modes 1 to 4, named by their operator in
 * errors (COMPOUND is or'ed into the data). */
#define COMPOUND 8
static const char *const compound_names[] = {"=", "+=", "-=", "*=", "/="};
static const tfe_op compound_ops[] = {OP_ADD, OP_ADD, OP_SUB, OP_MUL, OP_DIV};

/* v.assign(x), v.assign_add(x), v.assign_sub(x): data is 0, 1, 2 (3 and 4,
 * *= and /=, only as compound assignments). The new value must have the
 * variable's dtype and shape (a weak literal takes the variable's dtype
 * unless that would truncate a float; the others broadcast x to it). */
BUILTIN(bi_var_assign)
{
    int mode = (int)(intptr_t)data & (COMPOUND - 1);
    const char *fn = (int)(intptr_t)data & COMPOUND ? compound_names[mode] : assign_names[mode];
    if (nkw || argc != 2) return interp_raise(I, "%s() takes 1 argument", fn);
    Variable *v = (Variable *)argv[0].u.o;
    char who[300], s1[200], s2[200];
    if (v->name) snprintf(who, sizeof who, "variable '%s'", v->name);
    else snprintf(who, sizeof who, "the variable");
    tfe_tensor *x = value_to_tensor_for(argv[1], v->value->dtype); /* a float literal: exact in float64 */
    if (!x) return interp_raise(I, "%s: %s needs a tensor, got %s", fn, who, value_kind_name(argv[1]));
    if (mode == 4 && !dtype_is_float(v->value->dtype)) {
        tensor_decref(x);
        return interp_raise(I, "/=: %s has dtype %s, and dividing it in place would truncate "
                               "(make it a float variable)", who, dtype_name(v->value->dtype));
    }
    /* a float literal into an int variable would truncate silently (0.5 -> 0) */
    bool truncates = dtype_is_float(x->dtype) && !dtype_is_float(v->value->dtype);
    if (x->dtype != v->value->dtype && x->weak && !truncates) {
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.dtype = v->value->dtype;
        tfe_tensor *c = unrecorded(OP_CAST, x, NULL, &at);
        tensor_decref(x);
        if (!c) return interp_raise_tensor_error(I);
        x = c;
    }
    if (x->dtype != v->value->dtype) {
        /* say how to write it: NumPy and PyTorch cast an int update into a
         * float array in place, which tfe does only for a bare number */
        const char *vd = dtype_name(v->value->dtype);
        char how[200];
        if (dtype_is_float(v->value->dtype) && !dtype_is_float(x->dtype))
            snprintf(how, sizeof how, " (write a float value, [1.0, 2.0] rather than [1, 2], or cast(x, %s))", vd);
        else if (dtype_is_float(v->value->dtype))
            snprintf(how, sizeof how, " (cast(x, %s), or make the variable %s)", vd, dtype_name(x->dtype));
        else
            snprintf(how, sizeof how, " (it would be truncated to %s: make the variable a float one, "
                     "variable(3.0) rather than variable(3))", vd);
        int rc = interp_raise(I, "%s: %s has dtype %s, got %s%s", fn, who, vd, dtype_name(x->dtype), how);
        tensor_decref(x);
        return rc;
    }
    /* assign needs the variable's shape; the in-place updates take that
     * shape or a single number (v -= 0.1 * g, v *= 0.5): a (1,) update of a
     * (2, 1) variable would change every row alike, a (1,) gradient being
     * the likely slip */
    const tfe_tensor *w = v->value;
    bool fits = x->rank == w->rank || (mode != 0 && x->rank == 0);
    for (int i = 0; fits && i < x->rank; i++) fits = x->shape[i] == w->shape[i];
    if (!fits) {
        int rc = interp_raise(I, "%s: %s has shape %s, got %s%s", fn, who, shape_str(w->rank, w->shape, s1),
                              shape_str(x->rank, x->shape, s2),
                              mode ? " (an in-place update takes the variable's shape or a single number)" : "");
        tensor_decref(x);
        return rc;
    }
    tfe_tensor *nv = mode == 0 ? tensor_copy(x) : unrecorded(compound_ops[mode], v->value, x, NULL);
    if (!nv) { /* out of memory, interrupted */
        tensor_decref(x);
        return interp_raise_tensor_error(I);
    }
    tensor_decref(x);
    nv->weak = false;
    tfe_prov_assign(&nv->prov, v->prov); /* the variable's value is the variable, whatever it was computed from */
    tensor_decref(v->value);
    v->value = nv;
    *out = v_nil();
    return 0;
}

/* A method bound to self; flags as at registration (BF_*, interp/interp.h). */
static Value bound(const char *name, BuiltinFn fn, void *data, Obj *self, bool box_names, int flags)
{
    Value b = builtin_new(name, fn, data);
    Builtin *bb = (Builtin *)b.u.o;
    bb->effect = (uint8_t)(flags & (BF_EFFECT | BF_EFFECT_VALUE));
    self->refcount++;
    bb->self = v_obj(V_OBJECT, self);
    bb->box_names = box_names;
    return b;
}

static int variable_getattr(Interp *I, Obj *o, const char *name, Value *out)
{
    Variable *v = (Variable *)o;
    if (!strcmp(name, "value")) {
        tfe_tensor *t = var_read(I->tracer, v);
        /* a 0-d value read with no tape active is a number of its own in
         * eager code (value_from_tensor_take), not the tensor other reads
         * share: so in a trace too, for a watch of it (trace.h) */
        if (t && t->node && t->rank == 0 && !tfe_tapes_active && I->tracer) {
            tfe_tensor *own = trace_watch_box(I->tracer, t, true);
            tensor_decref(t);
            if (!own) return interp_raise_tensor_error(I);
            t = own;
        }
        *out = value_from_tensor_take(t);
        return 0;
    }
    if (!strcmp(name, "name")) {
        *out = v->name ? v_cstr(v->name) : v_nil();
        return 0;
    }
    if (!strcmp(name, "trainable")) {
        *out = v_bool(v->trainable);
        return 0;
    }
    for (int m = 0; m < 3; m++)
        if (!strcmp(name, assign_names[m])) {
            /* an effect: staged code updates it at every call */
            *out = bound(assign_names[m], bi_var_assign, (void *)(intptr_t)m, o, false, BF_EFFECT);
            return 0;
        }
    /* tensor methods (w.sum()) take the variable itself, as sum(w) does */
    if (!tensor_method(I, v_obj(V_OBJECT, o), name, out)) return 0;
    /* shape, dtype, ndim, size, device, T: those of the value */
    Value t = v_tensor_take(var_read(I->tracer, v));
    int rc = tensor_getattr(I, t, name, out);
    value_decref(t);
    return rc;
}

static const ObjectClass variable_class = {
    .name = "variable", .free = variable_free, .repr = variable_repr,
    .getattr = variable_getattr, .to_tensor = variable_to_tensor,
};

/* variable(init, name=nil, trainable=true) */
BUILTIN(bi_variable)
{
    Value a[3];
    bool p[3];
    if (args_parse(I, "variable", "init, name=, trainable=", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    const char *name;
    if (arg_opt_string(I, "variable", "name", a[1], &name)) return -1;
    bool trainable = true;
    if (p[2] && arg_bool(I, "variable", "trainable", a[2], &trainable)) return -1;
    /* --stage-all: eager code makes a new variable at every call, a graph
     * holds the one its trace made; so a function that makes variables is
     * not staged implicitly (it runs eagerly, named once on stderr). Not a
     * registration flag (BF_NOT_STAGEABLE): @staged code may make variables
     * as it traces (its later calls of that trace then run eagerly), so the
     * answer depends on the kind of trace. */
    if (trace_recording(I) && I->tracer->implicit &&
        trace_fail(I, I->cur_loc, "it creates variables, and eager code creates new ones at every call"))
        return -1;
    tfe_tensor *t = value_to_tensor(a[0]);
    if (!t) return arg_error(I, "variable", "init", "a tensor", a[0]);
    /* Inside a conditional or loop on a traced tensor, traced without
     * values, an initial value computed there has none yet (a draw, x * 2):
     * the error makes that conditional or loop run at trace time instead
     * (stage/trace_cf.c, give_up), where it has, as eagerly. */
    if (!t->storage && I->tracer && I->tracer->symbolic) {
        tensor_decref(t);
        return raise_at(I, I->cur_loc, "variable() inside a staged conditional or loop on a traced tensor needs its "
                        "initial value here, which is not known until the graph runs (create the "
                        "variable outside the staged function, or before the conditional or loop)");
    }
    /* the trace's graph holds this variable, where eager code makes a new
     * one at every call: the calls that later find this trace run eagerly
     * (stage/staged.c, stage_call), so each makes its own, as eagerly */
    if (trace_recording(I) && !I->tracer->made_vars) {
        I->tracer->made_vars = true;
        I->tracer->made_var_loc = I->cur_loc;
    }
    /* a copy: the variable's value is its own, whatever happens to init */
    tfe_tensor *c = tensor_copy(t);
    tensor_decref(t);
    if (!c) return interp_raise_tensor_error(I);
    c->weak = false;
    Variable *v = object_new(sizeof *v, &variable_class);
    v->value = c;
    v->name = name ? xstrdup(name) : NULL;
    v->trainable = trainable;
    v->prov_id = trainable ? ++prov_last_id : 0;
    v->prov = trainable ? tfe_prov_singleton(v->prov_id) : 0;
    tfe_prov_assign(&c->prov, v->prov);
    static uint16_t last_grad_id;
    last_grad_id = last_grad_id >= TFE_GRAD_FOR_MANY - 1 ? 1 : last_grad_id + 1;
    v->grad_id = last_grad_id;
    *out = v_obj(V_OBJECT, v);
    return 0;
}

/* --- tape objects --------------------------------------------------------------------- */

static Tape *tape_alloc(bool persistent, bool autowatch)
{
    tfe_tape *tt = tfe_tape_new(persistent);
    Tape *T = object_new(sizeof *T, &tape_class);
    T->tape = tt;
    T->persistent = persistent;
    T->autowatch = autowatch;
    return T;
}

static void tape_start(Interp *I, Tape *T)
{
    tfe_tape_push(T->tape);
    T->entered = true;
    if (I->tracer) trace_alias_tape_start(I->tracer, T->tape, T->nwins == 0); /* (late aliases) */
    T->wins = xrealloc(T->wins, sizeof *T->wins * (size_t)(2 * T->nwins + 2));
    T->wins[2 * T->nwins] = tfe_tensor_serial_now();
    T->wins[2 * T->nwins + 1] = UINT64_MAX;
    T->nwins++;
    T->symbolic = I->tracer && I->tracer->symbolic;
    T->trace = I->trace_id;
    T->region = I->tracer ? I->tracer->region : 0;
    if (!T->autowatch) return;
    if (nwatching == capwatching) {
        capwatching = capwatching ? capwatching * 2 : 8;
        watching = xrealloc(watching, sizeof *watching * (size_t)capwatching);
    }
    watching[nwatching++] = T;
}

/* The tapes of the user tapes whose with block runs, not spent, that watch
 * a variable when it is read (a staged call that reads one is recorded by
 * them though they track nothing yet): up to cap into out; how many. */
int tapes_watching_vars(tfe_tape **out, int cap)
{
    int n = 0;
    for (int i = 0; i < nwatching && n < cap; i++)
        if (!watching[i]->spent) out[n++] = watching[i]->tape;
    return n;
}

static void tape_stop(Tape *T)
{
    if (!T->entered) return;
    T->entered = false;
    tfe_tape_pop(T->tape);
    T->wins[2 * T->nwins - 1] = tfe_tensor_serial_now();
    for (int i = nwatching - 1; i >= 0; i--)
        if (watching[i] == T) {
            memmove(watching + i, watching + i + 1, sizeof *watching * (size_t)(nwatching - i - 1));
            nwatching--;
            break;
        }
    if (!nwatching) {
        free(watching);
        watching = NULL;
        capwatching = 0;
    }
}

static void once_clear(Tape *T);

static void tape_free(Obj *o)
{
    Tape *T = (Tape *)o;
    tape_stop(T);
    tfe_tape_free(T->tape);
    tape_clear_reads(T);
    once_clear(T);
    free(T->wins);
    free(T->wt);
    free(T->wt_at);
    free(T->wt_regs);
    free(T);
}

static char *tape_repr(Obj *o)
{
    return xstrdup(((Tape *)o)->persistent ? "<tape persistent>" : "<tape>");
}

static int tape_enter(Interp *I, Obj *o, Value *as)
{
    Tape *T = (Tape *)o;
    if (T->entered) return interp_raise(I, "tape: this tape is already active");
    tape_start(I, T);
    o->refcount++;
    *as = v_obj(V_OBJECT, o);
    return 0;
}

static int tape_exit(Interp *I, Obj *o, bool failed)
{
    (void)I, (void)failed;
    tape_stop((Tape *)o);
    return 0;
}

/* Is the trace recording a branch or loop body symbolically that tape T
 * was not started in? What T does there (a watch, a gradient call) happens
 * in eager code only on the calls that run it. */
static bool tape_in_branch(Interp *I, const Tape *T)
{
    const Tracer *tr = I->tracer;
    return tr && tr->symbolic && (T->trace != tr->id || !T->symbolic || T->region != tr->region);
}

/* Such a branch or loop body watching a tensor or variable: eager code
 * watches it only on the calls that run it, and a gradient with respect to
 * it is "never watched" on the others, which a graph cannot raise. So the
 * attempt fails, and the if or loop runs at trace time (on this call's
 * condition: staging.md section 7), as eagerly. */
static int watch_in_branch(Interp *I, const char *what)
{
    return trace_fail(I, I->cur_loc, "watch: %s is watched inside a staged conditional or loop, so eager code "
                                     "watches it only on the calls that run it (a gradient with respect to it is "
                                     "an error on the others, which a graph cannot raise); watch it before the if "
                                     "or loop", what) ? -1 : 0;
}

/* watch one value: tensors, variables, and tuples/lists/records of them */
static int watch_value(Interp *I, Tape *T, Value v, int depth)
{
    if (depth > 100) return interp_raise(I, "watch: the structure is nested too deeply");
    switch ((ValueKind)v.kind) {
    case V_TENSOR:
        /* an int tensor's gradient would be zeros: say so where it is watched */
        if (!dtype_is_float(v.u.t->dtype))
            return interp_raise(I, "watch: cannot watch a tensor of dtype %s; gradients are taken with respect to "
                                   "floats (watch a float: 3.0 rather than 3, or float(x))",
                                dtype_name(v.u.t->dtype));
        /* (a tensor the branch made itself exists only where it runs) */
        if (tape_in_branch(I, T) && !tfe_tape_watches(T->tape, v.u.t) && !trace_made_in_region(I->tracer, v.u.t))
            return watch_in_branch(I, "a tensor made outside the branch or loop body");
        if (!T->spent && !tfe_tape_watches(T->tape, v.u.t)) { /* (for watched_late) */
            T->wt = xrealloc(T->wt, sizeof *T->wt * (size_t)(T->nwt + 1));
            T->wt_at = xrealloc(T->wt_at, sizeof *T->wt_at * (size_t)(T->nwt + 1));
            T->wt[T->nwt] = v.u.t;
            T->wt_at[T->nwt++] = tfe_tensor_serial_now();
            Tracer *tr = I->tracer; /* (where it is watched, as var_read's region) */
            int region = tr && tr->symbolic && !T->symbolic && T->trace == tr->id ? tr->region : 0;
            if (!region) {
                T->wt_top = true;
            } else {
                T->wt_regs = xrealloc(T->wt_regs, sizeof *T->wt_regs * (size_t)(T->nwt_regs + 1));
                T->wt_regs[T->nwt_regs++] = region;
            }
        }
        tfe_tape_watch(T->tape, v.u.t);
        if (I->tracer) trace_alias_touch(I->tracer, T->tape, v.u.t);
        /* a traced number: eager code boxes the binding it watches, and
         * arithmetic on it then stays boxed (trace.h) */
        if (I->tracer) trace_unmark_number(v);
        return 0;
    case V_TUPLE: case V_LIST: {
        Seq *s = (Seq *)v.u.o;
        for (int i = 0; i < s->n; i++)
            if (watch_value(I, T, s->items[i], depth + 1)) return -1;
        return 0;
    }
    case V_RECORD: {
        Record *r = (Record *)v.u.o;
        for (int i = 0; i < r->n; i++)
            if (watch_value(I, T, r->vals[i], depth + 1)) return -1;
        return 0;
    }
    case V_SCALAR:
        return interp_raise(I, "watch: a number can be watched only through a name bound to it "
                               "(let x = 2.0; t.watch(x))");
    default:
        if (is_variable(v)) {
            tfe_dtype dt = ((Variable *)v.u.o)->value->dtype;
            if (!dtype_is_float(dt))
                return interp_raise(I, "watch: cannot watch a variable of dtype %s; gradients are taken with respect "
                                       "to floats (make it a float variable)", dtype_name(dt));
            /* a trainable one is a source watched or not (zeros where it is
             * not read: the regions below); a non-trainable one only once
             * watched */
            if (!((Variable *)v.u.o)->trainable && tape_in_branch(I, T))
                return watch_in_branch(I, "a non-trainable variable");
            Tracer *tr = I->tracer; /* watched in a branch traced symbolically: as var_read */
            int region = tr && tr->symbolic && !T->symbolic && T->trace == tr->id ? tr->region : 0;
            tape_note_read(T, (Variable *)v.u.o, ((Variable *)v.u.o)->value, region, false);
            return 0;
        }
        return interp_raise(I, "watch: cannot watch a value of type %s (expected a tensor or variable, "
                               "or a tuple, list or record of them)", value_kind_name(v));
    }
}

/* t.watch(x, ...) */
BUILTIN(bi_tape_watch)
{
    if (nkw) return interp_raise(I, "watch() takes no keyword arguments");
    if (argc < 2) return interp_raise(I, "watch() missing argument 'x'");
    Tape *T = (Tape *)argv[0].u.o;
    for (int i = 1; i < argc; i++)
        if (watch_value(I, T, argv[i], 0)) return -1;
    *out = v_nil();
    return 0;
}

/* Sources flattened: the tensors handed to tfe_tape_gradient, and for each
 * leaf of the structure where its tensors start and how many there are. */
typedef struct Flat {
    tfe_tensor **ts;
    tfe_tensor **ran; /* by tensor: a traced bool, whether a variable's read ran (owned; NULL: it did) */
    int n, cap;
    struct Leaf { int start, count; Value v; } *leaves;
    int nleaves, capleaves;
    struct Pick { int i; CondSource cs; int pass[2]; } *picks; /* sources a traced cond rebinds */
    int npicks;
    tfe_tensor **extra;  /* the tensors they may stand for (owned until pushed) */
    int nextra;
    const tfe_tensor *target; /* of the gradient (borrowed), or NULL */
    /* a variable's reads that are one tensor on some calls (merge_reads) */
    struct ReadAt { int *regs, nregs; bool after, at_end, is_read, zeros; } *at; /* by tensor: a variable's read's place */
    int capat;
    struct Chain *chains;  /* by leaf: its reads in the order they ran, and what is between */
    struct Bound { int leaf; tfe_tensor *assigned; } *bounds; /* the ifs or loops that may assign (owned) */
    int nbounds;
    struct Variant *vars;  /* by mask of merged bounds: the gradients (1 << nbounds of them) */
    Tape *tape;            /* whose gradient this is */
} Flat;

/* A leaf's reads that merge_reads could place, in the order they ran: for
 * each after the first, 0 one tensor with the one before, 1 another, 2 + b
 * bound b (one tensor where it did not assign the variable). */
struct Chain {
    int *ix, *rel, n;
    int *lfrom, *lto, nl; /* a read after an assign in a branch (lfrom), one tensor with the read at
                             position lto of the chain where that branch ran */
};
/* One gradient call: the sources some reads are aliases of, and by tensor
 * the gradients, which reads' parts are in an earlier one's (skip), and
 * where a read that has others' parts ran (NULL: always). */
struct Variant { tfe_tensor **g, **ran; bool *skip; };

static void flat_push_ran(Flat *f, tfe_tensor *t, tfe_tensor *ran)
{
    if (f->n == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 8;
        f->ts = xrealloc(f->ts, sizeof *f->ts * (size_t)f->cap);
        f->ran = xrealloc(f->ran, sizeof *f->ran * (size_t)f->cap);
    }
    f->ran[f->n] = ran;
    f->ts[f->n++] = t;
}

static void flat_push(Flat *f, tfe_tensor *t) { flat_push_ran(f, t, NULL); }

static void flat_free(Flat *f)
{
    for (int i = 0; i < f->n; i++) {
        tensor_decref(f->ts[i]);
        if (f->ran[i]) tensor_decref(f->ran[i]);
    }
    free(f->ts);
    free(f->ran);
    free(f->leaves);
    free(f->picks);
    for (int i = 0; i < f->nextra; i++) tensor_decref(f->extra[i]);
    free(f->extra);
    for (int i = 0; f->at && i < f->capat; i++) free(f->at[i].regs);
    free(f->at);
    for (int li = 0; f->chains && li < f->nleaves; li++) {
        free(f->chains[li].ix);
        free(f->chains[li].rel);
        free(f->chains[li].lfrom);
        free(f->chains[li].lto);
    }
    free(f->chains);
    for (int m = 0; f->vars && m < 1 << f->nbounds; m++) {
        for (int i = 0; i < f->n; i++) {
            if (f->vars[m].g && f->vars[m].g[i]) tensor_decref(f->vars[m].g[i]);
            if (f->vars[m].ran && f->vars[m].ran[i]) tensor_decref(f->vars[m].ran[i]);
        }
        free(f->vars[m].g);
        free(f->vars[m].ran);
        free(f->vars[m].skip);
    }
    free(f->vars);
    for (int b = 0; b < f->nbounds; b++) tensor_decref(f->bounds[b].assigned);
    free(f->bounds);
}

/* A source's path inside the structure of sources, as the indexing that
 * reaches it ("[1]", "[\"w\"]"), for errors that name the source. */
typedef struct SrcPath { char s[400]; size_t len; } SrcPath;

static size_t path_push(SrcPath *p, bool key, const char *k, int i)
{
    size_t was = p->len;
    int n = key ? snprintf(p->s + was, sizeof p->s - was, "[\"%s\"]", k)
                : snprintf(p->s + was, sizeof p->s - was, "[%d]", i);
    if (n > 0) p->len = was + (size_t)n < sizeof p->s ? was + (size_t)n : sizeof p->s - 1;
    return was;
}

/* "the source" or "source [1]" (the path is relative to the sources) */
static const char *source_name(const SrcPath *p, const char *whole, char *buf, size_t cap)
{
    if (!p->len) return whole;
    snprintf(buf, cap, "source %s", p->s);
    return buf;
}

/* Gradients are taken with respect to floats: an int or bool source would
 * silently get zeros (as in JAX, an error that says to pass a float). */
static int check_float_source(Interp *I, const char *fn, const SrcPath *p, const char *whole, tfe_dtype dt)
{
    if (dtype_is_float(dt)) return 0;
    char buf[480];
    return interp_raise(I, "%s: %s is %s; gradients are taken with respect to floats "
                           "(pass a float: 3.0 rather than 3, or float(x))",
                        fn, source_name(p, whole, buf, sizeof buf), dtype_name(dt));
}

/* Inside a trace, a source that a traced cond rebinds is one tensor of the
 * graph whichever branch ran; in eager code it is the tensor the branch
 * taken made, or the very tensor it handed on unchanged (whose gradient
 * counts its uses before the cond too; that tensor may come from another
 * cond), or one the tape does not track (an error). The first two are
 * picked at run time (pick_cond_sources); the last cannot be raised by a
 * graph on a later call: refused here, unless it is what the name holds on
 * this call (then it is eager's error). at: where t's gradient will be
 * (a leaf's index, or -1 - k for the k-th handed-on tensor); live: t is
 * what the name holds on this call. */
static int cond_source(Interp *I, const char *fn, Tape *T, tfe_tensor *t, Flat *f, const SrcPath *path, int at,
                       bool live, int depth)
{
    CondSource cs;
    int found = depth > 16 || !I->tracer || T->spent || !f->target
                    ? 0 : trace_cond_source(I->tracer, T->tape, f->target, t, &cs);
    if (!found) return 0;
    char buf[480];
    const char *name = source_name(path, "the source", buf, sizeof buf);
    if (found == 2)
        return trace_fail(I, I->cur_loc, "%s: %s is a name that a staged loop rebinds, and whether the loop ran "
                                         "(it is the value the loop started from when it ran zero times) "
                                         "depends on a variable, host call or random draw in its condition; "
                                         "take the gradient with respect to the tensor you watched, or bind "
                                         "the loop's result to a new name (let b = a * 1.0)", fn, name) ? -1 : 0;
    if (live && cs.kind[cs.taken] == CS_UNTRACKED)
        return interp_raise(I, "%s: %s is a tensor this tape never watched, so its gradient would be "
                               "zeros; watch it inside the with block (t.watch(x)), or make it a variable (and update a "
                               "variable in place, v -= x, rather than v = v - x)", fn, name);
    /* (under --stage-all the function runs eagerly from here on, and this
     * call still needs its pick) */
    if ((cs.kind[0] == CS_UNTRACKED || cs.kind[1] == CS_UNTRACKED) && trace_recording(I) &&
        trace_fail(I, I->cur_loc, "%s: %s is a name that a staged conditional or loop rebinds, and on a "
                                  "path not taken now to a tensor this tape does not track (so a gradient with "
                                  "respect to it would be an error there, which a staged call cannot "
                                  "raise); watch the value after it, or take the gradient "
                                  "with respect to the tensor you watched", fn, name))
        return -1;
    if (cs.kind[0] != CS_PASS && cs.kind[1] != CS_PASS) return 0;
    int p = f->npicks++;
    f->picks = xrealloc(f->picks, sizeof *f->picks * (size_t)f->npicks);
    f->picks[p] = (struct Pick){at, cs, {0, 0}};
    for (int br = 0; br < 2; br++) {
        if (cs.kind[br] != CS_PASS) continue;
        f->extra = xrealloc(f->extra, sizeof *f->extra * (size_t)(f->nextra + 1));
        tensor_incref(cs.pass[br]);
        f->extra[f->nextra] = cs.pass[br];
        f->picks[p].pass[br] = f->nextra++;
        if (cond_source(I, fn, T, cs.pass[br], f, path, -1 - f->picks[p].pass[br], live && br == cs.taken,
                        depth + 1))
            return -1;
    }
    return 0;
}

/* The handed-on tensors, as more sources (after the leaves' ones:
 * unflatten never sees them). */
static void push_pass_sources(Flat *f)
{
    for (int k = 0; k < f->nextra; k++) flat_push(f, f->extra[k]);
    free(f->extra);
    f->extra = NULL;
    f->nextra = 0;
}

/* A picked source's gradient: the handed-on tensor's on a branch that
 * hands one on, its own on the other, chosen by the cond's predicate
 * (recorded into the trace, so later calls choose by theirs). g has the
 * gradients of the nbase leaf tensors, then of the handed-on ones. A pick
 * made later (for a handed-on tensor) is done first. */
static int pick_cond_sources(Flat *f, int nbase, tfe_tensor **g)
{
    for (int p = f->npicks - 1; p >= 0; p--) {
        const CondSource *cs = &f->picks[p].cs;
        int i = f->picks[p].i < 0 ? nbase - 1 - f->picks[p].i : f->picks[p].i;
        tfe_tensor *br[2] = {g[i], g[i]};
        for (int b = 0; b < 2; b++)
            if (cs->kind[b] == CS_PASS) br[b] = g[nbase + f->picks[p].pass[b]];
        if (!br[0] || !br[1]) continue;
        tfe_tensor *pred = cs->pred;
        tensor_incref(pred);
        if (pred->dtype != TFE_BOOL || pred->rank != 0) { /* a one-element tensor taken as a bool */
            tfe_tensor *zero = tensor_from_f64(0.0, pred->dtype), *ne = zero ? tfe_binary(OP_NE, pred, zero) : NULL;
            if (zero) tensor_decref(zero);
            tensor_decref(pred);
            tfe_attrs at;
            tfe_attrs_init(&at);
            at.nints = 0;
            pred = ne ? tfe_call1(OP_RESHAPE, 1, &ne, &at) : NULL;
            if (ne) tensor_decref(ne);
            if (!pred) return -1;
        }
        tfe_tensor *in[3] = {pred, br[0], br[1]};
        tfe_tensor *r = tfe_call1(OP_WHERE, 3, in, NULL);
        tensor_decref(pred);
        if (!r) return -1;
        tensor_decref(g[i]);
        g[i] = r;
    }
    return 0;
}

/* Whether read r (noted in regions of trace tr) ran in this call: 1
 * always, 0 never, 2 with *ran a traced bool (new ref) that says it, -1
 * on a tensor error. */
static int read_runs(Tracer *tr, const VarRead *r, tfe_tensor **ran)
{
    tfe_tensor *any = NULL;
    *ran = NULL;
    for (int k = 0; k < r->nregs; k++) {
        tfe_tensor *x = NULL;
        int st = trace_region_runs(tr, r->regs[k], &x);
        if (st == 2 && any) {
            tfe_tensor *o = tfe_binary(OP_LOGICAL_OR, any, x);
            tensor_decref(x);
            tensor_decref(any);
            if (!(any = o)) return -1;
        } else if (st == 2) {
            any = x;
        } else if (st != 0) { /* always (1), or an error */
            if (any) tensor_decref(any);
            return st;
        }
    }
    *ran = any;
    return any ? 2 : 0;
}

static int flatten_sources(Interp *I, const char *fn, Tape *T, Value v, Flat *f, int depth, SrcPath *path)
{
    if (depth > 100) return interp_raise(I, "%s: the sources are nested too deeply", fn);
    if (v.kind == V_TUPLE || v.kind == V_LIST) {
        Seq *s = (Seq *)v.u.o;
        for (int i = 0; i < s->n; i++) {
            size_t was = path_push(path, false, NULL, i);
            if (flatten_sources(I, fn, T, s->items[i], f, depth + 1, path)) return -1;
            path->len = was;
            path->s[was] = 0;
        }
        return 0;
    }
    if (v.kind == V_RECORD) {
        Record *r = (Record *)v.u.o;
        for (int i = 0; i < r->n; i++) {
            size_t was = path_push(path, true, r->keys[i]->s, 0);
            if (flatten_sources(I, fn, T, r->vals[i], f, depth + 1, path)) return -1;
            path->len = was;
            path->s[was] = 0;
        }
        return 0;
    }
    if (f->nleaves == f->capleaves) {
        f->capleaves = f->capleaves ? f->capleaves * 2 : 8;
        f->leaves = xrealloc(f->leaves, sizeof *f->leaves * (size_t)f->capleaves);
    }
    struct Leaf *L = &f->leaves[f->nleaves];
    L->start = f->n;
    L->v = v;
    char buf[480];
    if (v.kind == V_TENSOR || v.kind == V_SCALAR) {
        tfe_tensor *t = value_to_tensor(v);
        flat_push(f, t);
        if (check_float_source(I, fn, path, "the source", t->dtype)) return -1;
        /* A tensor the tape never watched would get zeros whatever the
         * target: that is a mistake, not a zero gradient (a spent tape
         * watches nothing: tfe_tape_gradient says so). */
        if (!T->spent && !tfe_tape_is_watched(T->tape, t))
            return interp_raise(I, "%s: %s is a tensor this tape never watched, so its gradient would be "
                                   "zeros; watch it inside the with block (t.watch(x)), or make it a variable (and update a "
                                   "variable in place, v -= x, rather than v = v - x)",
                                fn, source_name(path, "the source", buf, sizeof buf));
        if (cond_source(I, fn, T, t, f, path, f->n - 1, true, 0)) return -1;
    } else if (is_variable(v)) {
        Variable *var = (Variable *)v.u.o;
        if (check_float_source(I, fn, path, "the source", var->value->dtype)) return -1;
        int before = f->n;
        /* reads noted in branches or loop bodies of this trace (VarRead) */
        Tracer *tr = I->tracer && I->tracer->id == T->trace && !T->symbolic ? I->tracer : NULL;
        for (int i = 0; i < T->nreads; i++)
            if (T->reads[i].var == var) {
                tfe_tensor *ran = NULL;
                int st = tr && T->reads[i].nregs ? read_runs(tr, &T->reads[i], &ran) : 1;
                if (st < 0) return interp_raise_tensor_error(I);
                if (st == 0) continue; /* an attempt rolled back: no read */
                tensor_incref(T->reads[i].t);
                flat_push_ran(f, T->reads[i].t, ran);
                if (f->capat < f->cap) {
                    f->at = xrealloc(f->at, sizeof *f->at * (size_t)f->cap);
                    memset(f->at + f->capat, 0, sizeof *f->at * (size_t)(f->cap - f->capat));
                    f->capat = f->cap;
                }
                struct ReadAt *ra = &f->at[f->n - 1];
                ra->is_read = true;
                ra->after = T->reads[i].after;
                ra->at_end = T->reads[i].at_end;
                ra->zeros = T->reads[i].zeros;
                ra->nregs = T->reads[i].nregs;
                ra->regs = ra->nregs ? xmalloc(sizeof *ra->regs * (size_t)ra->nregs) : NULL;
                if (ra->nregs) memcpy(ra->regs, T->reads[i].regs, sizeof *ra->regs * (size_t)ra->nregs);
            }
        /* a trainable variable never read gets zeros; a non-trainable one
         * is a source only when watched */
        if (f->n == before && !var->trainable && !T->spent) {
            char who[300];
            if (var->name) snprintf(who, sizeof who, " '%s'", var->name);
            else who[0] = 0;
            return interp_raise(I, "%s: %s is a non-trainable variable%s this tape never watched, so its "
                                   "gradient would be zeros; watch it inside the with block (t.watch(v))",
                                fn, source_name(path, "the source", buf, sizeof buf), who);
        }
    } else if (path->len) { /* a model passed whole: name the field, say what to pass */
        return interp_raise(I, "%s: %s is a %s; sources must be tensors or variables (or tuples, lists, records of "
                               "them): for a model's parameters pass params(model), as in t.gradient(loss, params(model))",
                            fn, source_name(path, "the source", buf, sizeof buf), value_kind_name(v));
    } else {
        return interp_raise(I, "%s: sources must be tensors or variables (or tuples, lists, records of them), got %s",
                            fn, value_kind_name(v));
    }
    L->count = f->n - L->start;
    f->nleaves++;
    return 0;
}

static tfe_tensor *zeros_op(const tfe_tensor *like)
{
    tfe_attrs at;
    tfe_attrs_init(&at);
    at.dtype = like->dtype;
    at.nints = like->rank;
    memcpy(at.ints, like->shape, sizeof(int64_t) * (size_t)like->rank);
    return tfe_call1(OP_FULL, 0, NULL, &at);
}

/* The sum of leaf L's gradients g (a variable's reads; skip: reads whose
 * part is in an earlier one's), new ref or NULL on a tensor error. */
static tfe_tensor *leaf_sum(Interp *I, Flat *f, tfe_tensor **g, const struct Leaf *L, const bool *skip,
                            tfe_tensor *const *rans)
{
    /* the reads' gradients added in tape order; one that may not have
     * run (f->ran) is added where it ran (a traced cond: stage/trace_cf.c,
     * trace_pick), and a sum with nothing in it yet is -0.0s (which
     * adding the first gradient leaves as it is: -0.0 + x is x); where no
     * read ran, zeros, as for a variable not read (eager code reads
     * nothing there) */
    tfe_tensor *any = NULL, *r = NULL;
    bool always = false;
    for (int i = 0; i < L->count; i++) {
        if (skip && skip[L->start + i]) continue; /* its part is in an earlier read's */
        tfe_tensor *gi = g[L->start + i], *ran = (rans ? rans : f->ran)[L->start + i], *s = NULL, *z = NULL;
        if (f->at && L->start + i < f->capat && f->at[L->start + i].zeros) { /* (VarRead.zeros) */
            if (!(z = tfe_filled_like(gi, 0.0))) {
                if (r) tensor_decref(r);
                r = NULL;
                break;
            }
            gi = z;
        }
        if (!ran) {
            s = r ? tfe_binary(OP_ADD, r, gi) : (tensor_incref(gi), gi);
        } else if (r) {
            s = trace_pick(I->tracer, ran, r, gi, r);
        } else {
            tfe_tensor *neg = tfe_filled_like(gi, -0.0);
            s = neg ? trace_pick(I->tracer, ran, gi, NULL, neg) : NULL;
            if (neg) tensor_decref(neg);
        }
        if (r) tensor_decref(r);
        if (z) tensor_decref(z);
        r = s;
        if (!r) break;
        if (!ran) always = true;
        else if (!always) {
            tfe_tensor *o = any ? tfe_binary(OP_LOGICAL_OR, any, ran) : (tensor_incref(ran), ran);
            if (any) tensor_decref(any);
            if (!(any = o)) {
                tensor_decref(r);
                r = NULL;
                break;
            }
        }
    }
    if (r && any && !always) {
        tfe_tensor *z = tfe_filled_like(r, 0.0), *w = z ? trace_pick(I->tracer, any, r, NULL, z) : NULL;
        if (z) tensor_decref(z);
        tensor_decref(r);
        r = w;
    }
    if (any) tensor_decref(any);
    return r;
}

/* Leaf li's gradient, picked among the variants (merge_reads) by its
 * bounds from the b-th on: where bound b assigned the variable, the one
 * with that bound's reads apart (mask as it is), else merged (new ref). */
static tfe_tensor *leaf_pick(Interp *I, Flat *f, const struct Leaf *L, int li, int b, int mask)
{
    while (b < f->nbounds && f->bounds[b].leaf != li) b++;
    if (b == f->nbounds) return leaf_sum(I, f, f->vars[mask].g, L, f->vars[mask].skip, f->vars[mask].ran);
    tfe_tensor *apart = leaf_pick(I, f, L, li, b + 1, mask);
    tfe_tensor *one = apart ? leaf_pick(I, f, L, li, b + 1, mask | 1 << b) : NULL;
    tfe_tensor *r = one ? trace_pick(I->tracer, f->bounds[b].assigned, apart, NULL, one) : NULL;
    if (apart) tensor_decref(apart);
    if (one) tensor_decref(one);
    return r;
}

/* a || b for traced bools that may be NULL (false); takes both (new ref, or
 * NULL with *err set on a tensor error) */
static tfe_tensor *or_take(tfe_tensor *a, tfe_tensor *b, bool *err)
{
    if (!a || !b) return a ? a : b;
    tfe_tensor *o = tfe_binary(OP_LOGICAL_OR, a, b);
    tensor_decref(a);
    tensor_decref(b);
    if (!o) *err = true;
    return o;
}

/* a && !b, or a when b is NULL (new ref; a borrowed) */
static tfe_tensor *and_not(tfe_tensor *a, tfe_tensor *b)
{
    if (!b) return (tensor_incref(a), a);
    tfe_tensor *nb = tfe_call1(OP_LOGICAL_NOT, 1, &b, NULL);
    tfe_tensor *r = nb ? tfe_binary(OP_LOGICAL_AND, a, nb) : NULL;
    if (nb) tensor_decref(nb);
    return r;
}

/* count >= k, a traced bool (new ref) */
static tfe_tensor *count_at_least(tfe_tensor *count, double k)
{
    tfe_tensor *c = tensor_from_f64(k, count->dtype);
    if (!c) return NULL;
    c->weak = false;
    tfe_tensor *r = tfe_binary(OP_GE, count, c);
    tensor_decref(c);
    return r;
}

/* Two reads of var, where what can assign it between them is at top
 * positions [lo, hi) of the trace, one of them where ran says (a traced
 * bool; NULL: always), are one tensor where it ran and nothing between
 * assigned var: that condition or'ed into *acc (or *always set). 0, 1 when
 * the graph cannot tell, -1 on a tensor error. */
static int between_term(Tracer *tr, Variable *var, int lo, int hi, tfe_tensor *ran, tfe_tensor **acc,
                        bool *always);

/* One read at the top position hi of the trace (in a branch or loop body
 * there when ran is not NULL: where it runs) reads the tensor loop note n
 * (at top position ql) ended with where nothing between them assigned the
 * variable: that condition or'ed into *later (or *always set). 0, 1 when
 * the graph cannot tell, -1 on a tensor error. */
static int later_term(Tracer *tr, const struct LoopNote *n, int ql, int hi, tfe_tensor *ran, tfe_tensor **later,
                      bool *always)
{
    return between_term(tr, n->var, ql + 1, hi, ran, later, always);
}

static int between_term(Tracer *tr, Variable *var, int lo, int hi, tfe_tensor *ran, tfe_tensor **later,
                        bool *always)
{
    tfe_tensor *as = NULL, *term = NULL;
    int where = -1;
    int st = trace_assigned_between(tr, &var->o.h, lo, hi, &as, &where);
    if (st == -2 || st == -1) {
        if (as) tensor_decref(as);
        return st == -2 ? -1 : 1;
    }
    if (st == 1) return 0; /* surely assigned between */
    bool err = false;
    if (!ran && !as) {
        *always = true;
        return 0;
    }
    if (!ran) {
        if (!(term = tfe_call1(OP_LOGICAL_NOT, 1, &as, NULL))) err = true;
    } else if (!(term = and_not(ran, as))) {
        err = true;
    }
    if (as) tensor_decref(as);
    if (term) *later = or_take(*later, term, &err);
    return err ? -1 : 0;
}

/* Whether a read of var that the tape made after loop note n reads the
 * tensor the loop ended with (the one its last iteration read after its
 * last assign, or its condition read last): 0 with *later a traced bool
 * (NULL: never, *always: on every call), 1 when the graph cannot tell (a
 * read it cannot place, or something between that may assign var in a way
 * it cannot tell), -1 on a tensor error. A read noted in several branches
 * or loop bodies (one tensor when the call traced) is a read in each. */
static int loop_read_later(Tracer *tr, Flat *f, const struct Leaf *L, const struct LoopNote *n,
                           tfe_tensor **later, bool *always)
{
    *later = NULL;
    *always = false;
    int ql = trace_top_pos(tr, n->id), st = ql < 0 ? 1 : 0;
    Tape *T = f->tape;
    for (int i = L->start; i < L->start + L->count && !*always && !st; i++) {
        const struct ReadAt *ra = f->at && i < f->capat ? &f->at[i] : NULL;
        if (!ra || !ra->is_read || ra->after) continue; /* (after an assign in a branch: not the loop's tensor) */
        TReadPoint p;
        if (!ra->nregs) {
            if (trace_read_point(tr, &n->var->o.h, f->ts[i], NULL, 0, false, false, &p)) st = 1;
            else if (p.hi > ql) st = later_term(tr, n, ql, p.hi, NULL, later, always);
            continue;
        }
        for (int k = 0; k < ra->nregs && !*always && !st; k++) {
            bool only_in = false;
            int q = trace_regions_pos(tr, &ra->regs[k], 1, n->id, &only_in);
            if (q < 0) { /* (an attempt rolled back: no read) */
                tfe_tensor *x = NULL;
                if (trace_region_runs(tr, ra->regs[k], &x) == 0) continue;
                if (x) tensor_decref(x);
                st = 1;
                break;
            }
            if (only_in || q < ql) continue; /* the loop's own read, or one before it */
            /* in another loop that reads and assigns the variable: it reads
             * the tensor it started with before its first assign, where it
             * runs, and in its condition */
            const struct LoopNote *n2 = NULL;
            for (int j = 0; j < T->nloops && !n2; j++) {
                bool in2 = false;
                if (T->loops[j].var == n->var && &T->loops[j] != n &&
                    trace_regions_pos(tr, &ra->regs[k], 1, T->loops[j].id, &in2) >= 0 && in2)
                    n2 = &T->loops[j];
            }
            if (n2) {
                if (n2->kinds & TL_COND) {
                    st = later_term(tr, n, ql, q, NULL, later, always);
                } else if (n2->kinds & TL_FIRST) {
                    tfe_tensor *c1 = count_at_least(n2->count, 1.0);
                    st = c1 ? later_term(tr, n, ql, q, c1, later, always) : -1;
                    if (c1) tensor_decref(c1);
                }
                continue;
            }
            tfe_tensor *ran = NULL;
            int rs = trace_region_runs(tr, ra->regs[k], &ran);
            if (rs < 0) {
                st = -1;
            } else if (rs > 0) {
                if (trace_read_point(tr, &n->var->o.h, f->ts[i], &ra->regs[k], 1, false, ra->at_end, &p) || p.hi < 0)
                    st = 1;
                else if (p.hi > ql)
                    st = later_term(tr, n, ql, p.hi, ran, later, always);
            }
            if (ran) tensor_decref(ran);
        }
    }
    if (st || *always) {
        if (*later) tensor_decref(*later);
        *later = NULL;
    }
    return st;
}

/* Whether a read of the tape's reads the tensor var held when loop note n
 * started, whose first reads no read of the tape's stands for (TL_APART):
 * 0 with *same a traced bool (NULL: never, *always: on every call), 1 when
 * the graph cannot tell, -1 on a tensor error. A read before the loop does
 * where it ran and nothing between assigned var; a read after it, for a
 * loop whose condition reads var (which runs when the loop runs zero
 * times), where nothing between assigned var, the loop included. A read the
 * graph cannot place is apart, as merge_reads takes it. */
static int loop_read_start(Tracer *tr, Flat *f, const struct Leaf *L, const struct LoopNote *n, tfe_tensor **same,
                           bool *always)
{
    *same = NULL;
    *always = false;
    int ql = trace_top_pos(tr, n->id), st = ql < 0 ? 1 : 0;
    for (int i = L->start; i < L->start + L->count && !*always && !st; i++) {
        const struct ReadAt *ra = f->at && i < f->capat ? &f->at[i] : NULL;
        if (!ra || !ra->is_read || ra->zeros) continue; /* (a zeros read adds zeros itself) */
        for (int k = 0; k < (ra->nregs ? ra->nregs : 1) && !*always && !st; k++) {
            tfe_tensor *ran = NULL;
            if (ra->nregs) {
                bool only_in = false;
                int q = trace_regions_pos(tr, &ra->regs[k], 1, n->id, &only_in);
                if (q < 0 || only_in) continue; /* (an attempt rolled back, or the loop's own) */
                int rs = trace_region_runs(tr, ra->regs[k], &ran);
                if (rs < 0) st = -1;
                if (rs <= 0) continue;
            }
            TReadPoint p;
            if (!trace_read_point(tr, &n->var->o.h, f->ts[i], ra->nregs ? &ra->regs[k] : NULL, ra->nregs ? 1 : 0,
                                  ra->after, ra->at_end, &p)) {
                if (p.key < 2 * ql)
                    st = between_term(tr, n->var, p.lo, ql, ran, same, always);
                else if (p.key > 2 * ql && (n->kinds & TL_COND) && p.hi >= 0)
                    st = between_term(tr, n->var, ql, p.hi, ran, same, always);
            }
            if (ran) tensor_decref(ran);
        }
    }
    if (st || *always) {
        if (*same) tensor_decref(*same);
        *same = NULL;
    }
    return st;
}

/* The variable's gradient r (taken) with the zeros eager code adds for the
 * new tensors of it that a traced loop which reads and assigns it reads
 * (tapes_loop_count): from its second iteration on, at every read (the
 * first iteration's reads before an assign are the tensor the variable
 * held when the loop started, counted as such where the loop runs); from
 * the first on, for a read between two assigns, or of the tensor it ends
 * with when no later read of the tape's reads that tensor. Adding 0.0 once
 * or many times is the same (it changes only a -0.0), so one pick does it.
 * New ref, or NULL after raising. */
static tfe_tensor *loop_zeros(Interp *I, Flat *f, const struct Leaf *L, tfe_tensor *r)
{
    Tape *T = f->tape;
    Tracer *tr = I->tracer && T && I->tracer->id == T->trace && !T->symbolic ? I->tracer : NULL;
    if (!tr || !is_variable(L->v) || !T->nloops) return r;
    Variable *var = (Variable *)L->v.u.o;
    tfe_tensor *any = NULL;
    bool err = false;
    char name[300];
    if (var->name) snprintf(name, sizeof name, "'%s'", var->name);
    else snprintf(name, sizeof name, "this variable");
    for (int k = 0; k < T->nloops && !err; k++) {
        const struct LoopNote *n = &T->loops[k];
        if (n->var != var) continue;
        if (n->kinds & TL_UNKNOWN) {
            if (any) tensor_decref(any);
            /* (under --stage-all the call goes on eagerly from here) */
            if (!trace_fail(I, gnode(tr->g, n->id)->loc,
                            "this loop reads and may assign %s in a way the graph cannot tell (a host call, "
                            "or an if or loop inside it), so the gradient with respect to %s, with a tape made "
                            "inside this staged function, cannot add what eager code adds for each tensor of "
                            "it that the loop reads; read %s once into a name before the loop and use that, or "
                            "assign %s after the with tape() block", name, name, name, name))
                return r;
            tensor_decref(r);
            return NULL;
        }
        /* (a carried value a read reaches, which the target uses) */
        if ((n->kinds & TL_REACH) && (!f->target || trace_uses_output(tr, f->target, n->id, n->reach))) {
            /* what the loop reads of the variable reaches what it carries,
             * which the target uses: the gradient would need every tensor
             * of the variable the loop read */
            if (any) tensor_decref(any);
            if (!trace_fail(I, gnode(tr->g, n->id)->loc,
                            "gradients through a staged loop that assigns a variable it reads are not supported "
                            "(keep the value in a loop variable and assign the variable after the loop, or take "
                            "the gradient eagerly: run_eagerly(true))"))
                return r;
            tensor_decref(r);
            return NULL;
        }
        tfe_tensor *z = count_at_least(n->count, 2.0);
        if (!z) { err = true; break; }
        if (n->kinds & TL_APART) {
            /* its first reads, where they run (its condition's always) and
             * no read of the tape's is of that tensor */
            tfe_tensor *same = NULL;
            bool always = false;
            int st = loop_read_start(tr, f, L, n, &same, &always);
            if (st > 0) {
                tensor_decref(z);
                if (any) tensor_decref(any);
                if (!trace_fail(I, gnode(tr->g, n->id)->loc,
                                "this loop reads %s, which an earlier read read in the call that traced, and the "
                                "gradient with respect to %s, with a tape made inside this staged function, cannot "
                                "tell whether a read of the tape's is of the tensor the loop starts with on another "
                                "call (eager code adds zeros for that tensor when none is); read %s once into a "
                                "name before the loop and use that, or assign %s after the with tape() block",
                                name, name, name, name))
                    return r;
                tensor_decref(r);
                return NULL;
            }
            if (st < 0) { tensor_decref(z); err = true; break; }
            if (!always) {
                tfe_tensor *c = count_at_least(n->count, (n->kinds & TL_COND) ? 0.0 : 1.0);
                tfe_tensor *t = c ? and_not(c, same) : NULL;
                if (c) tensor_decref(c);
                if (same) tensor_decref(same);
                if (!t) { tensor_decref(z); err = true; break; }
                z = or_take(z, t, &err);
            }
        }
        if (n->kinds & (TL_MID | TL_END | TL_COND)) {
            tfe_tensor *later = NULL;
            bool always = false;
            int st = (n->kinds & TL_MID) ? 0 : loop_read_later(tr, f, L, n, &later, &always);
            if (st > 0) {
                tensor_decref(z);
                if (any) tensor_decref(any);
                if (!trace_fail(I, gnode(tr->g, n->id)->loc,
                                "this loop reads %s after it assigns it, and the gradient with respect to %s, "
                                "with a tape made inside this staged function, cannot tell whether a later read "
                                "of it is of the tensor the loop ends with (eager code adds zeros for that "
                                "tensor when none is); read %s once into a name after the loop and use that, or "
                                "assign %s after the with tape() block", name, name, name, name))
                    return r;
                tensor_decref(r);
                return NULL;
            }
            if (st < 0) { tensor_decref(z); err = true; break; }
            if (!always) {
                tfe_tensor *c1 = count_at_least(n->count, 1.0);
                tfe_tensor *t = c1 ? and_not(c1, later) : NULL;
                if (c1) tensor_decref(c1);
                if (later) tensor_decref(later);
                if (!t) { tensor_decref(z); err = true; break; }
                z = or_take(z, t, &err);
            }
        }
        any = or_take(any, z, &err);
    }
    if (err) {
        if (any) tensor_decref(any);
        tensor_decref(r);
        interp_raise_tensor_error(I);
        return NULL;
    }
    if (!any) return r;
    tfe_tensor *zeros = tfe_filled_like(r, 0.0), *out = zeros ? trace_pick(tr, any, r, zeros, r) : NULL;
    if (zeros) tensor_decref(zeros);
    tensor_decref(any);
    tensor_decref(r);
    if (!out) interp_raise_tensor_error(I);
    return out;
}

/* Rebuild the structure of v with each leaf replaced by its gradient. */
static int unflatten(Interp *I, Value v, Flat *f, tfe_tensor **g, int *leaf, Value *out)
{
    if (v.kind == V_TUPLE || v.kind == V_LIST) {
        Seq *s = (Seq *)v.u.o, *r = seq_new(s->n);
        r->h.kind = v.kind;
        Value res = v_obj((ValueKind)v.kind, r);
        for (int i = 0; i < s->n; i++) {
            Value x;
            if (unflatten(I, s->items[i], f, g, leaf, &x)) { value_decref(res); return -1; }
            seq_push_take(r, x);
        }
        *out = res;
        return 0;
    }
    if (v.kind == V_RECORD) {
        Record *s = (Record *)v.u.o, *r = record_new();
        Value res = v_obj(V_RECORD, r);
        for (int i = 0; i < s->n; i++) {
            Value x;
            if (unflatten(I, s->vals[i], f, g, leaf, &x)) { value_decref(res); return -1; }
            record_set_take(r, s->keys[i]->s, s->keys[i]->len, x);
        }
        *out = res;
        return 0;
    }
    int li = (*leaf)++;
    struct Leaf *L = &f->leaves[li];
    tfe_tensor *r = NULL;
    if (L->count == 0) {
        /* a variable not read while the tape was active: zeros like its value
         * (a traced loop's reads that no read of the tape's stands for too) */
        r = zeros_op(((Variable *)L->v.u.o)->value);
        if (r && !(r = loop_zeros(I, f, L, r))) return -1;
    } else {
        r = f->vars ? leaf_pick(I, f, L, li, 0, 0) : leaf_sum(I, f, g, L, NULL, NULL);
        if (r && !(r = loop_zeros(I, f, L, r))) return -1;
    }
    if (!r) return interp_raise_tensor_error(I);
    /* which variable it is the gradient of (tfe_tensor.grad_for): one
     * tensor may be the gradient of several (loss = sum(a) + sum(b) can
     * give both one tensor), and then it names none */
    if (is_variable(L->v)) {
        uint16_t id = ((Variable *)L->v.u.o)->grad_id;
        r->grad_for = !r->grad_for || r->grad_for == id ? id : TFE_GRAD_FOR_MANY;
    }
    *out = value_from_tensor_take(r);
    return 0;
}

/* The target as a tensor (new ref), or NULL after raising. */
static tfe_tensor *target_tensor(Interp *I, const char *fn, Value y)
{
    if (y.kind == V_TENSOR || y.kind == V_SCALAR) return value_to_tensor(y);
    if (is_variable(y)) {
        tensor_incref(((Variable *)y.u.o)->value);
        return ((Variable *)y.u.o)->value;
    }
    arg_error(I, fn, "the target", "a tensor", y);
    return NULL;
}

/* ran[root] covers ran[i] too: where either ran (NULL: always). 0, or -1
 * on a tensor error. */
static int ran_join(tfe_tensor **ran, int root, int i)
{
    if (!ran[root]) return 0;
    if (!ran[i]) {
        tensor_decref(ran[root]);
        ran[root] = NULL;
        return 0;
    }
    tfe_tensor *o = tfe_binary(OP_LOGICAL_OR, ran[root], ran[i]);
    if (!o) return -1;
    tensor_decref(ran[root]);
    ran[root] = o;
    return 0;
}

/* At most this many ifs or loops that may assign a variable between its
 * reads: the gradient is taken once for each way they can go (2^n). */
enum { MAX_BOUNDS = 3 };

/* A tape made inside a staged function notes a variable's reads as the
 * trace makes them: a read after a traced if or loop (or host call) that
 * may assign the variable is a tensor of its own (stage/trace.c,
 * trace_var_read), and so is a read a traced if hands on (stage/trace_cf.c,
 * export_reads), where eager code, on the calls that do not assign it
 * between, reads one tensor and sums the gradients of all its uses in one
 * running sum (two tensors: two partial sums, which can differ in the last
 * bit, or add a 0.0 to a -0.0). So the reads that are one tensor on every
 * call are aliases of the earlier one, and an if or loop between two reads
 * that may assign the variable is a bound (f->bounds): the gradient is
 * taken with its reads apart and merged, and picked by whether it assigned
 * the variable (leaf_pick). More than MAX_BOUNDS bounds, or an if, loop or
 * host call whose assigning the graph cannot tell, is a located error.
 * Returns 1 when f->chains says what to merge, 0 when nothing, -1 after
 * raising. */
static int merge_reads(Interp *I, Tape *T, Flat *f, int nbase)
{
    Tracer *tr = I->tracer && I->tracer->id == T->trace && !T->symbolic ? I->tracer : NULL;
    if (!tr || !f->at) return 0;
    int any = 0;
    f->chains = xcalloc((size_t)f->nleaves + 1, sizeof *f->chains);
    for (int li = 0; li < f->nleaves; li++) {
        const struct Leaf *L = &f->leaves[li];
        if (!is_variable(L->v) || L->count < 2 || L->start + L->count > nbase) continue;
        Variable *var = (Variable *)L->v.u.o;
        /* the reads this can place, in the order they ran */
        struct Chain *c = &f->chains[li];
        c->ix = xmalloc(sizeof *c->ix * (size_t)L->count);
        c->rel = xcalloc((size_t)L->count, sizeof *c->rel);
        TReadPoint *pt = xmalloc(sizeof *pt * (size_t)L->count);
        for (int i = L->start; i < L->start + L->count; i++) {
            const struct ReadAt *ra = i < f->capat ? &f->at[i] : NULL;
            TReadPoint p;
            /* (a read split off with its part zeros is no tensor another read is) */
            if (!ra || !ra->is_read || ra->zeros ||
                trace_read_point(tr, &var->o.h, f->ts[i], ra->regs, ra->nregs, ra->after, ra->at_end, &p))
                continue;
            int k = c->n++;
            while (k > 0 && pt[k - 1].key > p.key) {
                pt[k] = pt[k - 1];
                c->ix[k] = c->ix[k - 1];
                k--;
            }
            pt[k] = p;
            c->ix[k] = i;
        }
        /* a read after an assign in a branch (hi -1) is no tensor an
         * earlier read is; the chain goes on past it, and it is linked to
         * the next read when that is one tensor with it where it ran */
        int m = 0, na = 0;
        int *aix = xmalloc(sizeof *aix * (size_t)(c->n + 1)), *anext = xmalloc(sizeof *anext * (size_t)(c->n + 1));
        TReadPoint *apt = xmalloc(sizeof *apt * (size_t)(c->n + 1));
        for (int k = 0; k < c->n; k++) {
            if (pt[k].hi == -1) {
                aix[na] = c->ix[k];
                apt[na] = pt[k];
                anext[na++] = m;
            } else {
                c->ix[m] = c->ix[k];
                pt[m++] = pt[k];
            }
        }
        c->n = m;
        int rc = 0;
        c->lfrom = xmalloc(sizeof *c->lfrom * (size_t)(na + 1));
        c->lto = xmalloc(sizeof *c->lto * (size_t)(na + 1));
        for (int a = 0; a < na && !rc; a++) {
            if (anext[a] >= m) continue;
            tfe_tensor *as = NULL;
            int where = -1;
            int st = trace_assigned_between(tr, &var->o.h, apt[a].lo, pt[anext[a]].hi, &as, &where);
            if (as) tensor_decref(as);
            if (st == -2) rc = interp_raise_tensor_error(I);
            if (st != 0) continue;
            c->lfrom[c->nl] = aix[a];
            c->lto[c->nl++] = anext[a];
            any = 1;
        }
        free(aix);
        free(anext);
        free(apt);
        for (int k = 1; k < c->n && !rc; k++) {
            tfe_tensor *as = NULL;
            int where = -1;
            int st = trace_assigned_between(tr, &var->o.h, pt[k - 1].lo, pt[k].hi, &as, &where);
            if (st == -2) {
                rc = interp_raise_tensor_error(I);
            } else if (st == 0 || st == 1) {
                c->rel[k] = st;
                any |= st == 0;
            } else if (st == -1 || f->nbounds == MAX_BOUNDS) {
                if (as) tensor_decref(as);
                const GNode *x = gnode(tr->g, where);
                const char *what = x->kind == G_COND ? "if" : x->kind == G_WHILE ? "loop" : "host call";
                char name[300];
                if (var->name) snprintf(name, sizeof name, "'%s'", var->name);
                else snprintf(name, sizeof name, "this variable");
                rc = trace_fail(I, x->loc,
                                "this %s may assign %s, which the tape made inside this staged function reads "
                                "before it and after it, %s: on the calls where it does not, the gradient with "
                                "respect to %s cannot add the parts of those reads in one sum as eager code does; "
                                "read %s once into a name before the %s and use that, or assign %s after the "
                                "with tape() block",
                                what, name,
                                st == -1 ? "and the graph cannot tell when it does (an assign inside a nested if "
                                           "or loop, or a host call)"
                                         : "as may three other ifs or loops between its reads, the most "
                                           "the graph can pick among",
                                name, name, what, name);
            } else {
                f->bounds = xrealloc(f->bounds, sizeof *f->bounds * (size_t)(f->nbounds + 1));
                f->bounds[f->nbounds] = (struct Bound){li, as};
                c->rel[k] = 2 + f->nbounds++;
                any = 1;
            }
        }
        free(pt);
        if (rc) return -1;
    }
    return any;
}

/* Variant mask (merge_reads): the aliases of the sources (alias[i]: the
 * read whose part read i's adds to), which reads are skipped in the
 * variable's sum, and where the read that has the others' parts ran. 0, or
 * -1 on a tensor error. */
static int variant_build(Flat *f, int mask, tfe_tensor **alias, struct Variant *v)
{
    size_t nb = (size_t)(f->n ? f->n : 1);
    v->skip = xcalloc(nb, sizeof *v->skip);
    v->ran = xcalloc(nb, sizeof *v->ran);
    for (int i = 0; i < f->n; i++)
        if ((v->ran[i] = f->ran[i])) tensor_incref(v->ran[i]);
    for (int li = 0; li < f->nleaves; li++) {
        const struct Chain *c = &f->chains[li];
        int root = -1;
        for (int k = 0; k < c->n; k++) {
            int i = c->ix[k], rel = c->rel[k];
            bool one = k > 0 && (rel == 0 || (rel >= 2 && (mask >> (rel - 2) & 1)));
            if (!one) {
                /* another tensor than the read before: the one a branch
                 * that ran read after its assign, if one is linked here
                 * (those of both branches: only one runs) */
                root = i;
                for (int l = 0; l < c->nl; l++) {
                    if (c->lto[l] != k) continue;
                    int a = c->lfrom[l];
                    if (root == i) {
                        alias[i] = f->ts[a];
                        v->skip[i] = true;
                        if (ran_join(v->ran, a, i)) return -1;
                    } else {
                        alias[a] = f->ts[root];
                        v->skip[a] = true;
                        if (ran_join(v->ran, root, a)) return -1;
                    }
                    if (root == i) root = a;
                }
                continue;
            }
            alias[i] = f->ts[root];
            v->skip[i] = true;
            if (ran_join(v->ran, root, i)) return -1;
        }
    }
    return 0;
}

/* A run-time check traced as an effect that returns nil (stage/trace.c)
 * and only checks values: --check-staged runs it in the staged run too
 * (eager code checks inline). argv: bool scalars, one per condition;
 * data: the error raised where one holds. */
static int any_flag_check(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwnames,
                          const Value *kwvals, Value *out, void *data)
{
    (void)nkw, (void)kwnames, (void)kwvals;
    *out = v_nil();
    for (int i = 0; i < argc; i++) {
        bool holds = false;
        if (value_truth(I, argv[i], I->cur_loc, &holds)) return -1;
        if (holds) return interp_raise(I, (const char *)data);
    }
    return 0;
}

/* Traces fn (named name, data its message) as such a check on args. */
static int trace_check(Interp *I, const char *name, BuiltinFn fn, const char *msg, int nargs, Value *args)
{
    Value chk = builtin_new(name, fn, (void *)msg), res = v_nil();
    ((Builtin *)chk.u.o)->effect = 1;
    ((Builtin *)chk.u.o)->value_check = true;
    int rc = trace_host_call(I, chk, nargs, args, 0, NULL, NULL, &res);
    value_decref(chk);
    value_decref(res);
    return rc;
}

/* The check a later gradient call of a tape used up in a branch makes at
 * every call (a host call, an effect): eager's error where one of those
 * branches ran. argv: by branch, whether it ran in this call. */
#define TAPE_USED_TWICE "gradient: a non-persistent tape can be used for only one gradient call " \
                        "(use tape(persistent=true))"

static void once_clear(Tape *T)
{
    free(T->once_regions);
    T->once_regions = NULL;
    T->nonce = 0;
}

/* A non-persistent tape's gradient call inside a traced if: eager code
 * uses the tape up only on the calls that take the branch. For a tape made
 * at the top of this trace and an if at the top, the call is made there as
 * a persistent one's (the recording kept), the branch noted
 * (once_regions), and a later gradient call of the tape checks at run time
 * whether one of those branches ran (once_later: eager's error at that
 * call). Elsewhere (a loop body, an if nested in a branch, a tape made
 * outside the staged function or in a branch, a second call in the same
 * branch) the attempt fails as before. */
static bool once_branch(Interp *I, const Tape *T)
{
    Tracer *tr = I->tracer;
    if (!tr || !tr->symbolic || !tape_in_branch(I, T)) return false;
    if (T->made != tr->id || T->trace != tr->id || T->symbolic || T->region != 0) return false;
    if (tr->region <= 0 || (tr->region != tr->if_regions[0] && tr->region != tr->if_regions[1])) return false;
    if (tr->g->regions[tr->region].parent != 0) return false;
    for (int k = 0; k < T->nonce; k++)
        if (T->once_regions[k] == tr->region) return false;
    return true;
}

/* A gradient call of a tape whose one call was made in traced branches
 * (once_regions): where one of them ran, eager's error at this call,
 * checked at run time by a host call (in a branch too: it runs where the
 * branch does). 0: the call goes on, -1: an error, 1: the attempt failed
 * (trace_fail). */
static int once_later(Interp *I, Tape *T)
{
    Tracer *tr = I->tracer;
    if (!tr || tr->id != T->made) {
        /* (the tape left its trace: what it did there was that call's) */
        once_clear(T);
        T->spent = true;
        return 0;
    }
    Value *args = xcalloc((size_t)T->nonce, sizeof *args);
    int nargs = 0, rc = 0;
    bool always = false;
    for (int k = 0; k < T->nonce && !rc && !always; k++) {
        int r = T->once_regions[k];
        /* (the other branch of the if being traced: only one of them runs) */
        if (tr->symbolic && r != tr->region && (r == tr->if_regions[0] || r == tr->if_regions[1])) continue;
        tfe_tensor *runs = NULL;
        int st = trace_region_runs(tr, r, &runs);
        if (st < 0) rc = interp_raise_tensor_error(I);
        else if (st == 1) always = true;
        else if (st == 2) args[nargs++] = v_tensor_take(runs);
        /* (0: an attempt rolled back, whose if then ran at trace time) */
    }
    if (!rc && always)
        rc = trace_fail(I, I->cur_loc, "gradient: this non-persistent tape's one gradient call was made in a "
                                       "staged conditional, and whether its branch ran cannot be told here; use "
                                       "tape(persistent=true)") ? -1 : 1;
    if (!rc && nargs) {
        rc = trace_check(I, "tape_once_check", any_flag_check, TAPE_USED_TWICE, nargs, args);
    }
    for (int k = 0; k < nargs; k++) value_decref(args[k]);
    free(args);
    return rc;
}

/* A user tape's target must be one it could have recorded: a tensor it
 * tracks (a watched one, an output of an op it recorded), or one made
 * while its with block ran (a constant there: its gradients are zeros, as
 * for any source it does not depend on). A number, or a tensor made before
 * the block began or after it ended (`let loss = sum(p * p)` after the
 * block), was never seen by the tape, and every gradient would be zeros:
 * an error that says where to compute it. A variable target is its value
 * as read (not checked); grad()'s tape runs the whole function, so it has
 * no such mistake to catch. Eager and traced code decide alike: a traced
 * number (trace_eager_number) is one, and a traced tensor's serial is
 * when the trace made it, in the program's order. */
#define TARGET_NOT_RECORDED \
    "gradient: this tape did not record the target: it was computed after the tape stopped recording (after its " \
    "with block ended) or before it started, or it is a number no tape records (a literal, arithmetic on numbers, " \
    "float(x)), so every gradient would be zeros; compute the target inside the with tape() block, from what the " \
    "tape watches"

/* Would target_recorded refuse x, a float tensor, statically? */
static bool target_refused(const Tape *T, tfe_tensor *x)
{
    Value as, v = {.kind = V_TENSOR};
    v.u.t = x;
    if (trace_eager_number(v, &as)) return true;
    if (tfe_tape_is_watched(T->tape, x)) return false;
    for (int k = 0; k < T->nwins; k++)
        if (x->serial > T->wins[2 * k] && x->serial <= T->wins[2 * k + 1]) return false;
    return true;
}

/* In a trace, a tracked target may be a traced if's or loop's output that
 * is at run time a value from before it (an if with no else, a loop that
 * ran zero times), which eager code would refuse: the flags where it is
 * one, joined into *any (a new reference, or NULL), nested ones too. */
static int target_refused_where(const Tape *T, tfe_tensor *x, tfe_tensor *cond, tfe_tensor **any, int depth)
{
    tfe_tensor *ins[16], *flags[16];
    int n = depth > 32 ? 0 : tfe_tape_cond_aliases(T->tape, x, 16, ins, flags);
    for (int i = 0; i < n; i++) {
        tfe_tensor *f = cond ? tfe_binary(OP_LOGICAL_AND, cond, flags[i]) : (tensor_incref(flags[i]), flags[i]);
        if (!f) return -1;
        int rc = 0;
        /* (a weak 0-d tensor there is a literal the trace boxed for the if
         * or loop, which eager code holds as a number: `let loss = 0.0`) */
        bool literal = ins[i]->rank == 0 && ins[i]->weak && !tfe_tape_is_watched(T->tape, ins[i]);
        if (literal || target_refused(T, ins[i])) {
            tfe_tensor *o = *any ? tfe_binary(OP_LOGICAL_OR, *any, f) : (tensor_incref(f), f);
            if (!o) rc = -1;
            else {
                tensor_decref(*any);
                *any = o;
            }
        } else if (tfe_tape_is_watched(T->tape, ins[i]) && ins[i] != x) {
            rc = target_refused_where(T, ins[i], f, any, depth + 1);
        }
        tensor_decref(f);
        if (rc) return rc;
    }
    return 0;
}


static int target_recorded(Interp *I, const Tape *T, Value y)
{
    if (T->spent || is_variable(y)) return 0;
    Value as;
    bool number = y.kind == V_SCALAR || trace_eager_number(y, &as);
    if (number) {
        if (y.kind == V_SCALAR ? y.dtype == TFE_BOOL || !dtype_is_float(y.dtype) : !dtype_is_float(y.u.t->dtype))
            return 0; /* (tape_gradient's own error) */
    } else {
        if (y.kind != V_TENSOR || !dtype_is_float(y.u.t->dtype)) return 0;
        if (!target_refused(T, y.u.t)) {
            if (!I->tracer || !tfe_tape_is_watched(T->tape, y.u.t)) return 0;
            tfe_tensor *any = NULL;
            if (target_refused_where(T, y.u.t, NULL, &any, 0)) {
                tensor_decref(any);
                return interp_raise_tensor_error(I);
            }
            if (!any) return 0;
            /* (the run-time check of target_refused_where's flag) */
            Value arg = v_tensor_take(any);
            int rc = trace_check(I, "target_recorded_check", any_flag_check, TARGET_NOT_RECORDED, 1, &arg);
            value_decref(arg);
            return rc < 0 ? -1 : 0;
        }
    }
    /* one message for all three: eager code holds a 0-d result made after
     * the block as a number, a trace as a tensor made then */
    return interp_raise(I, TARGET_NOT_RECORDED);
}

/* A target the tape does not track (it depends on nothing watched), made
 * before one of the sources was watched (`let y = sum(x * x)` then
 * `t.watch(x)`): the tape never saw how it depends on that source, and its
 * gradient would be zeros. (A target made after every watch that still
 * depends on none is a constant: zeros, as the contract says.) */
static int watched_late(Interp *I, const Tape *T, Value y, int n, tfe_tensor *const *ts)
{
    if (T->spent || y.kind != V_TENSOR || tfe_tape_is_watched(T->tape, y.u.t)) return 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < T->nwt; k++)
            if (T->wt[k] == ts[i] && T->wt_at[k] >= y.u.t->serial)
                return interp_raise(I, "gradient: the target was computed before t.watch of the source, so the "
                                       "tape never saw how it depends on it and its gradient would be zeros; "
                                       "call t.watch(x) before computing with x");
    return 0;
}

#define NOTHING_READ "gradient: the target does not depend on the sources: none of the variables was read, and " \
    "nothing was watched, while this tape was recording (a forward pass run before the with block, such as " \
    "pred = model(x) before it and the loss from pred inside it, or under an earlier tape, is not recorded), so " \
    "every gradient would be zeros; call the model inside the with tape() block"

/* the run-time check of nothing_read: argv[0] is whether a read ran */
static int nothing_read_check(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwnames,
                              const Value *kwvals, Value *out, void *data)
{
    (void)nkw, (void)kwnames, (void)kwvals;
    *out = v_nil();
    bool ran = true;
    if (argc > 0 && value_truth(I, argv[0], I->cur_loc, &ran)) return -1;
    return ran ? 0 : interp_raise(I, (const char *)data);
}

/* Sources that are all variables, on a tape that watched no tensor and read
 * no variable while it recorded: the target depends on nothing the tape
 * watched, and every gradient is zeros. That is a forward pass run before
 * the block (pred = model(x) outside, the loss inside) or under an earlier
 * tape: refused rather than zeros. Decided on what the call ran, so that
 * eager code, graphs and --stage-all agree: a read that a traced if or loop
 * makes counts only on the calls that run it (read_runs), and where one may
 * be the only read the graph checks it when it runs, as target_recorded.
 * (A tape that watched a tensor or read any variable keeps its zeros: a
 * source it did not use is simply unconnected.) */
static int nothing_read(Interp *I, const Tape *T, Value y, const Flat *f)
{
    if (T->spent || T->wt_top || is_variable(y) || !f->nleaves) return 0;
    for (int i = 0; i < f->nleaves; i++)
        if (!is_variable(f->leaves[i].v)) return 0;
    Tracer *tr = I->tracer && I->tracer->id == T->trace && !T->symbolic ? I->tracer : NULL;
    tfe_tensor *any = NULL;
    for (int i = 0; i < T->nreads; i++) {
        tfe_tensor *ran = NULL;
        int st = tr && T->reads[i].nregs ? read_runs(tr, &T->reads[i], &ran) : 1;
        if (st < 0) {
            if (any) tensor_decref(any);
            return interp_raise_tensor_error(I);
        }
        if (st == 1) {
            if (any) tensor_decref(any);
            return 0;
        }
        if (st == 2 && any) {
            tfe_tensor *o = tfe_binary(OP_LOGICAL_OR, any, ran);
            tensor_decref(ran);
            tensor_decref(any);
            if (!(any = o)) return interp_raise_tensor_error(I);
        } else if (st == 2) {
            any = ran;
        }
    }
    /* tensors watched in a branch or loop body traced symbolically: where
     * it ran */
    for (int i = 0; i < T->nwt_regs; i++) {
        tfe_tensor *ran = NULL;
        int st = tr ? trace_region_runs(tr, T->wt_regs[i], &ran) : 1;
        if (st == 1 || st < 0) {
            if (any) tensor_decref(any);
            return st < 0 ? interp_raise_tensor_error(I) : 0;
        }
        if (st == 0) continue;
        tfe_tensor *o = any ? tfe_binary(OP_LOGICAL_OR, any, ran) : ran;
        if (any) {
            tensor_decref(ran);
            tensor_decref(any);
        }
        if (!(any = o)) return interp_raise_tensor_error(I);
    }
    /* the traced loops that read and assign a variable: their reads ran
     * where the body did (or the condition, which reads it too) */
    for (int i = 0; i < T->nloops; i++) {
        if (!tr) { /* (not in the trace that noted them: taken as read) */
            if (any) tensor_decref(any);
            return 0;
        }
        tfe_tensor *ran = count_at_least(T->loops[i].count, (T->loops[i].kinds & TL_COND) ? 0.0 : 1.0);
        tfe_tensor *o = ran && any ? tfe_binary(OP_LOGICAL_OR, any, ran) : ran;
        if (ran && any) tensor_decref(ran);
        if (any) tensor_decref(any);
        if (!(any = o)) return interp_raise_tensor_error(I);
    }
    if (!any) return interp_raise(I, NOTHING_READ);
    Value arg = v_tensor_take(any);
    int rc = trace_check(I, "nothing_read_check", nothing_read_check, NOTHING_READ, 1, &arg);
    value_decref(arg);
    return rc < 0 ? -1 : 0;
}

/* The path of the first leaf of the sources xs that is variable v. */
static bool variable_path(Value xs, const Obj *v, SrcPath *path, int depth)
{
    if (depth > 100) return false;
    if (xs.kind == V_TUPLE || xs.kind == V_LIST) {
        Seq *s = (Seq *)xs.u.o;
        for (int i = 0; i < s->n; i++) {
            size_t was = path_push(path, false, NULL, i);
            if (variable_path(s->items[i], v, path, depth + 1)) return true;
            path->len = was;
            path->s[was] = 0;
        }
        return false;
    }
    if (xs.kind == V_RECORD) {
        Record *r = (Record *)xs.u.o;
        for (int i = 0; i < r->n; i++) {
            size_t was = path_push(path, true, r->keys[i]->s, 0);
            if (variable_path(r->vals[i], v, path, depth + 1)) return true;
            path->len = was;
            path->s[was] = 0;
        }
        return false;
    }
    return is_variable(xs) && xs.u.o == v;
}

/* A variable source that gets no gradient (no entry this tape recorded on
 * the way to the target reads it) while the target was computed from it
 * (its id is in the provenance set of tfe_tensor.prov): the target
 * depends on it through a tensor made outside the tape's recording, a
 * forward pass run before the with block (pred =
 * model(x) outside it, the loss inside) or under an earlier tape, and its
 * gradient would be zeros. The tape read another variable (else
 * nothing_read said so). Not an error: a source the target does not depend
 * on at all (unused in this step), a constant target from other variables
 * (a frozen teacher, a DQN target network), a tensor the tape watched that
 * carries its id (the user cut the path there), and stop_gradient or any
 * op without a gradient (their results carry no provenance). Decided on
 * what ran: eagerly, and in a trace on the values it runs with (a staged
 * call's outputs carry the sets of what it read, graph/exec.c). */
/* The run-time check of early_read in a graph: the sources that were not
 * read on every call when it was traced, their names and, for one read
 * only in traced branches or loop bodies, which argument says whether
 * one ran (-1: none was noted); owned by early_checks, which keeps them
 * while any graph may run them. */
typedef struct EarlyCheck {
    struct EarlyCheck *next;
    int n;
    uint32_t *ids; /* (Variable.prov_id) */
    char **names;
    int *ran;
} EarlyCheck;
static EarlyCheck *early_checks;

static void early_free(EarlyCheck *c)
{
    if (!c) return;
    for (int j = 0; j < c->n; j++) free(c->names[j]);
    free(c->names);
    free(c->ids);
    free(c->ran);
    free(c);
}

static int early_raise(Interp *I, const char *name)
{
    return interp_raise(I, "gradient: %s gets no gradient from this tape, but the target was computed from "
                           "it through a tensor made outside the tape's recording (a forward pass run before "
                           "the with block, such as pred = model(x) before it and the loss from pred inside "
                           "it, or under an earlier tape), so its gradient would be zeros; compute the "
                           "prediction inside the with tape() block (or stop_gradient(x) a tensor meant "
                           "as a constant)",
                        name);
}

/* argv[0]: the target, as this call computed it (graph/exec.c marks what
 * a graph computes as eager ops do); then the flags of the reads made only
 * in traced branches or loop bodies: whether one ran in this call */
static int early_read_check(Interp *I, int argc, const Value *argv, int nkw, Str *const *kwnames,
                            const Value *kwvals, Value *out, void *data)
{
    (void)nkw, (void)kwnames, (void)kwvals;
    *out = v_nil();
    const EarlyCheck *c = data;
    uint64_t m = argc > 0 && argv[0].kind == V_TENSOR ? argv[0].u.t->prov : 0;
    for (int j = 0; j < c->n && m; j++) {
        if (!tfe_prov_has(m, c->ids[j])) continue;
        bool ran = false;
        if (c->ran[j] >= 0 && 1 + c->ran[j] < argc && value_truth(I, argv[1 + c->ran[j]], I->cur_loc, &ran))
            return -1;
        if (!ran) return early_raise(I, c->names[j]);
    }
    return 0;
}

/* Whether the tape read var while it recorded: 1 on every call, 0 not at
 * all, 2 only in traced branches or loop bodies of this trace, with *ran
 * (a new ref) the traced bool of whether one ran; -1 on a tensor error. */
static int early_var_read(const Tape *T, Tracer *tr, const Variable *var, tfe_tensor **ran)
{
    *ran = NULL;
    for (int k = 0; k < T->nloops; k++)
        if (T->loops[k].var == var) return 1;
    int st = 0;
    for (int k = 0; k < T->nreads; k++) {
        if (T->reads[k].var != var) continue;
        tfe_tensor *r1 = NULL;
        int s1 = tr && T->reads[k].nregs ? read_runs(tr, &T->reads[k], &r1) : 1;
        if (s1 == 1 || s1 < 0) {
            tensor_decref(*ran);
            *ran = NULL;
            return s1;
        }
        if (s1 == 0) continue;
        if (*ran) {
            tfe_tensor *o = tfe_binary(OP_LOGICAL_OR, *ran, r1);
            tensor_decref(r1);
            tensor_decref(*ran);
            if (!(*ran = o)) return -1;
        } else {
            *ran = r1;
        }
        st = 2;
    }
    return st;
}

static int early_read(Interp *I, const Tape *T, Value y, Value xs, const Flat *f)
{
    const tfe_tensor *target = f->target;
    if (T->spent || is_variable(y) || !target) return 0;
    Tracer *tr = I->tracer && !I->tracer->symbolic ? I->tracer : NULL;
    /* (reads noted in regions of this trace: counted where they ran) */
    Tracer *rtr = tr && tr->id == T->trace && !T->symbolic ? tr : NULL;
    EarlyCheck *later = xcalloc(1, sizeof *later); /* the sources a later call may catch */
    Value args[65];
    int nargs = 1, rc = 0;
    for (int i = 0; i < f->nleaves && !rc; i++) {
        Value v = f->leaves[i].v;
        if (!is_variable(v)) continue;
        Variable *var = (Variable *)v.u.o;
        uint32_t id = var->prov_id;
        if (!id) continue;
        /* a tensor the tape watched that carries its id: the path was cut
         * there on purpose */
        bool cut = false;
        for (int k = 0; k < T->nwt && !cut; k++) cut = tfe_prov_has(T->wt[k]->prov, id);
        if (cut) continue;
        /* a variable read while the tape recorded is not checked: its
         * gradient is what those reads give (a semi-gradient target made
         * before the tape from the same network among them) */
        tfe_tensor *ran = NULL;
        int st = early_var_read(T, rtr, var, &ran);
        if (st < 0) {
            rc = interp_raise_tensor_error(I);
            break;
        }
        if (st == 1 || (st == 2 && nargs == 65)) {
            tensor_decref(ran);
            continue;
        }
        SrcPath path = {.len = 0};
        path.s[0] = 0;
        char buf[480], who[800];
        if (!variable_path(xs, &var->o.h, &path, 0)) path.len = 0, path.s[0] = 0;
        snprintf(who, sizeof who, "%s%s%s%s", source_name(&path, "the source", buf, sizeof buf),
                 var->name ? " (variable '" : "", var->name ? var->name : "", var->name ? "')" : "");
        if (!ran && tfe_prov_has(target->prov, id)) {
            rc = early_raise(I, who);
            break;
        }
        later->ids = xrealloc(later->ids, sizeof *later->ids * (size_t)(later->n + 1));
        later->names = xrealloc(later->names, sizeof *later->names * (size_t)(later->n + 1));
        later->ran = xrealloc(later->ran, sizeof *later->ran * (size_t)(later->n + 1));
        later->ids[later->n] = id;
        later->ran[later->n] = ran ? nargs - 1 : -1;
        later->names[later->n++] = xstrdup(who);
        if (ran) args[nargs++] = v_tensor_take(ran);
    }
    /* In a trace, a later call of the graph may have inputs computed from a
     * source where this one's were not (a prediction passed in), or skip
     * the branch that read it: the graph checks its target when it runs
     * (and this call now, as eager code does). */
    if (!rc && later->n && tr && y.kind == V_TENSOR) {
        /* (as a 1-d tensor: a 0-d one reaches a host call as a number) */
        tfe_attrs at;
        tfe_attrs_init(&at);
        at.nints = 1;
        at.ints[0] = -1;
        tfe_tensor *flat = unrecorded(OP_RESHAPE, y.u.t, NULL, &at);
        if (!flat) {
            rc = interp_raise_tensor_error(I);
        } else {
            args[0] = v_tensor_take(flat);
            later->next = early_checks;
            early_checks = later;
            later = NULL;
            rc = trace_check(I, "early_read_check", early_read_check, (const char *)early_checks, nargs, args) < 0
                     ? -1 : 0;
            value_decref(args[0]);
        }
    }
    for (int k = 1; k < nargs; k++) value_decref(args[k]);
    early_free(later);
    return rc;
}

/* The tensors of a gradient's sources, as touched by the tape (late aliases). */
static void alias_touch_sources(Tracer *tr, const tfe_tape *tape, Value v, int depth)
{
    if (depth > 100) return;
    if (v.kind == V_TENSOR) {
        trace_alias_touch(tr, tape, v.u.t);
    } else if (v.kind == V_TUPLE || v.kind == V_LIST) {
        Seq *s = seq_as(v);
        for (int i = 0; s && i < s->n; i++) alias_touch_sources(tr, tape, s->items[i], depth + 1);
    } else if (v.kind == V_RECORD) {
        Record *r = (Record *)v.u.o;
        for (int i = 0; i < r->n; i++) alias_touch_sources(tr, tape, r->vals[i], depth + 1);
    }
}

static int tape_gradient(Interp *I, const char *fn, Tape *T, Value y, Value xs, Value *out)
{
    tfe_tensor *target = target_tensor(I, fn, y);
    if (!target) return -1;
    /* An int or bool target (a loss through cast(..., int64), argmax or a
     * comparison) has no gradient: every one would be zeros (PyTorch and
     * TensorFlow refuse it too). */
    if (!dtype_is_float(target->dtype)) {
        const char *dn = dtype_name(target->dtype);
        tensor_decref(target);
        return interp_raise(I, "%s: the target is %s; gradients are taken of a float target (cast, argmax and "
                               "comparisons give ints or bools, which carry no gradient: compute the loss from "
                               "floats)", fn, dn);
    }
    /* A non-persistent tape's one gradient call, made inside a staged
     * conditional or loop body: eager code uses the tape up only on the
     * calls that run it, and a graph cannot tell the code after it. The
     * attempt fails before the tape is used (its if or loop runs at trace
     * time, as eagerly; staging.md section 7). */
    if (T->nonce) {
        int lr = once_later(I, T);
        if (lr) {
            tensor_decref(target);
            return lr < 0 ? -1 : 0;
        }
    }
    /* the gradient call of a branch that may not run (once_branch) */
    bool once = !T->persistent && !T->spent && once_branch(I, T);
    if (!T->persistent && tape_in_branch(I, T) && !once) {
        tensor_decref(target);
        return trace_fail(I, I->cur_loc, "gradient: a non-persistent tape's one gradient call is made inside a "
                                         "staged conditional or loop, which eager code makes only on the calls "
                                         "that run it (the tape is used up there, and not on the others); use "
                                         "tape(persistent=true), or take the gradient after the if or loop")
                   ? -1 : 0;
    }
    trace_gradient_taken(I);
    Flat f = {0};
    int rc = -1;
    bool called = false; /* the tape's one call is used only if it was made */
    tfe_tensor **g = NULL;
    SrcPath path = {.len = 0};
    path.s[0] = 0;
    f.target = target;
    f.tape = T;
    /* a target or source that can be one tensor at run time with another
     * value this tape touched: the call runs eagerly (stage/trace_alias.c) */
    if (I->tracer && !T->spent) {
        trace_alias_touch(I->tracer, T->tape, target);
        alias_touch_sources(I->tracer, T->tape, xs, 0);
        if (trace_alias_now(I, I->tracer, T->tape)) goto done;
    }
    if (flatten_sources(I, fn, T, xs, &f, 0, &path)) goto done;
    /* (grad()'s tape, which watches no variable read, ran the function) */
    if (T->autowatch && (target_recorded(I, T, y) || watched_late(I, T, y, f.n, f.ts) || nothing_read(I, T, y, &f) ||
                         early_read(I, T, y, xs, &f)))
        goto done;
    int nbase = f.n;
    push_pass_sources(&f);
    g = xcalloc((size_t)(f.n ? f.n : 1), sizeof *g);
    size_t nb = (size_t)(f.n ? f.n : 1);
    int merge = merge_reads(I, T, &f, nbase);
    if (merge < 0) goto done;
    called = true;
    if (merge) {
        /* one gradient call for each way the bounds can go, the tape kept
         * for the next (the last one spends it, as a call without any) */
        int nv = 1 << f.nbounds;
        f.vars = xcalloc((size_t)nv, sizeof *f.vars);
        for (int m = 0; m < nv; m++) {
            tfe_tensor **alias = xcalloc(nb, sizeof *alias);
            f.vars[m].g = xcalloc(nb, sizeof *f.vars[m].g);
            int vrc = variant_build(&f, m, alias, &f.vars[m]);
            if (!vrc) vrc = tfe_tape_gradient_alias(T->tape, target, f.n, f.ts, alias, m + 1 < nv || once, f.vars[m].g);
            free(alias);
            if (vrc || pick_cond_sources(&f, nbase, f.vars[m].g)) {
                rc = interp_raise_tensor_error(I);
                goto done;
            }
        }
        /* the other leaves' gradients are the same in every variant */
        for (int i = 0; i < f.n; i++) {
            g[i] = f.vars[0].g[i];
            if (g[i]) tensor_incref(g[i]);
        }
    } else if (tfe_tape_gradient_alias(T->tape, target, f.n, f.ts, NULL, once, g) || pick_cond_sources(&f, nbase, g)) {
        rc = interp_raise_tensor_error(I);
        goto done;
    }
    int leaf = 0;
    rc = unflatten(I, xs, &f, g, &leaf, out);
done:
    if (g)
        for (int i = 0; i < f.n; i++)
            if (g[i]) tensor_decref(g[i]);
    free(g);
    flat_free(&f);
    tensor_decref(target);
    if (once && called) { /* (kept: a later call checks at run time) */
        T->once_regions = xrealloc(T->once_regions, sizeof *T->once_regions * (size_t)(T->nonce + 1));
        T->once_regions[T->nonce++] = I->tracer->region;
    } else if (!T->persistent && called) {
        once_clear(T);
        T->spent = true;
        if (!T->draw) tape_clear_reads(T);
    }
    return rc;
}

/* t.gradient(y, xs) */
BUILTIN(bi_tape_gradient)
{
    Value a[2];
    bool p[2];
    if (args_parse(I, "gradient", "y, xs", argc - 1, argv + 1, nkw, kwnames, kwvals, a, p)) return -1;
    return tape_gradient(I, "gradient", (Tape *)argv[0].u.o, a[0], a[1], out);
}

/* t.graph(): the picture of what the tape recorded (interp/tape_view.c),
 * its variables' values named; after a gradient call of a tape(draw=true),
 * with the gradients. A tape made in a staged function records the trace,
 * whose values are not the calls', so it is drawn only eagerly. */
BUILTIN(bi_tape_graph)
{
    (void)data;
    Value self[1];
    bool has[1];
    if (args_parse(I, "graph", "self", argc, argv, nkw, kwnames, kwvals, self, has)) return -1;
    Tape *T = (Tape *)argv[0].u.o;
    if (T->trace || I->tracer)
        return interp_raise(I, "graph(): a tape is drawn outside staged functions (its values there are a trace's)");
    if (T->spent && !T->draw)
        return interp_raise(I, "graph(): the gradient call freed what this tape recorded; "
                               "make it with tape(draw=true) to draw it after gradient()");
    const tfe_tensor **named = xmalloc(sizeof *named * (size_t)(T->nreads + 1));
    const char **names = xmalloc(sizeof *names * (size_t)(T->nreads + 1));
    for (int i = 0; i < T->nreads; i++) {
        named[i] = T->reads[i].t;
        names[i] = T->reads[i].var->name;
    }
    char *dot = tape_to_dot(T->tape, T->nreads, named, names);
    free(named);
    free(names);
    *out = dot_picture_new(dot);
    return 0;
}

static int tape_getattr(Interp *I, Obj *o, const char *name, Value *out)
{
    (void)I;
    if (!strcmp(name, "watch")) { *out = bound("watch", bi_tape_watch, NULL, o, true, 0); return 0; }
    if (!strcmp(name, "gradient")) { *out = bound("gradient", bi_tape_gradient, NULL, o, false, 0); return 0; }
    if (!strcmp(name, "persistent")) { *out = v_bool(((Tape *)o)->persistent); return 0; }
    if (!strcmp(name, "graph")) { *out = bound("graph", bi_tape_graph, NULL, o, false, 0); return 0; }
    return 1;
}

static const ObjectClass tape_class = {
    .name = "tape", .free = tape_free, .repr = tape_repr, .getattr = tape_getattr,
    .enter = tape_enter, .exit = tape_exit,
};

/* tape(persistent=false, draw=false) */
BUILTIN(bi_tape)
{
    Value a[2];
    bool p[2];
    if (args_parse(I, "tape", "persistent=, draw=", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    bool persistent = false, draw = false;
    if (p[0] && arg_bool(I, "tape", "persistent", a[0], &persistent)) return -1;
    if (p[1] && arg_bool(I, "tape", "draw", a[1], &draw)) return -1;
    Tape *T = tape_alloc(persistent, true);
    if (!T) return interp_raise_tensor_error(I);
    T->made = I->tracer ? I->trace_id : 0;
    T->draw = draw;
    tfe_tape_keep_view(T->tape, draw);
    *out = v_obj(V_OBJECT, T);
    return 0;
}

/* --- walking objects for their state: params(obj), save, restore ----------------------- */

typedef struct Walk {
    int flags;           /* WALK_TENSORS, WALK_UNTRAINABLE (internal.h) */
    StateVisit visit;
    void *ctx;
    int rc;              /* the first nonzero visit result stops the walk */
    const void **seen;   /* containers, variables and tensors already visited */
    int nseen, capseen;
} Walk;

static bool walk_seen(Walk *w, const void *p)
{
    for (int i = 0; i < w->nseen; i++)
        if (w->seen[i] == p) return true;
    if (w->nseen == w->capseen) {
        w->capseen = w->capseen ? w->capseen * 2 : 16;
        w->seen = xrealloc(w->seen, sizeof *w->seen * (size_t)w->capseen);
    }
    w->seen[w->nseen++] = p;
    return false;
}

static void walk_state(Walk *w, Value v, char *path, size_t len, size_t cap)
{
    if (w->rc) return;
    bool tensor = v.kind == V_TENSOR && (w->flags & WALK_TENSORS);
    if (!tensor && (!v_is_obj(v) || v.kind == V_STR)) return;
    if (walk_seen(w, tensor ? (const void *)v.u.t : (const void *)v.u.o)) return;
    if (tensor || is_variable(v)) {
        Variable *var = tensor ? NULL : (Variable *)v.u.o;
        if (var && !var->trainable && !(w->flags & WALK_UNTRAINABLE)) return;
        const char *key = len ? path : (var && var->name ? var->name : "value");
        w->rc = w->visit(w->ctx, key, v);
        return;
    }
    int n = 0;
    Seq *s = NULL;
    Record *r = NULL;
    if (v.kind == V_TUPLE || v.kind == V_LIST) { s = (Seq *)v.u.o; n = s->n; }
    else if (v.kind == V_RECORD || v.kind == V_MODULE) { r = (Record *)v.u.o; n = r->n; }
    else return;
    for (int i = 0; i < n && !w->rc; i++) {
        char idx[32];
        const char *k = idx;
        size_t klen;
        if (s) klen = (size_t)snprintf(idx, sizeof idx, "%d", i);
        else { k = r->keys[i]->s; klen = r->keys[i]->len; }
        size_t nl = len + (len ? 1 : 0) + klen;
        if (nl + 1 > cap) continue; /* absurdly deep: skip rather than truncate a path */
        if (len) path[len] = '.';
        memcpy(path + len + (len ? 1 : 0), k, klen);
        path[nl] = 0;
        walk_state(w, s ? s->items[i] : r->vals[i], path, nl, cap);
        path[len] = 0;
    }
}

int state_walk(Value obj, int flags, StateVisit visit, void *ctx)
{
    Walk w = {.flags = flags, .visit = visit, .ctx = ctx};
    char path[4096] = "";
    walk_state(&w, obj, path, 0, sizeof path);
    free(w.seen);
    return w.rc;
}

bool value_is_variable(Value v) { return is_variable(v); }

/* The backward hands the gradient of what the if hands on to the read the
 * run made there (in the branch taken, the read or its stand-in): that read
 * counts where the branch of the read handed on runs too. A read first
 * noted by this run had where the run went as a guess: replaced once. (t
 * may be a header of its own for the tensor read: the same data.) */
void tapes_read_in_region(uint32_t trace_id, Value var, const tfe_tensor *t, int region)
{
    for (int i = 0; i < nwatching; i++) {
        Tape *T = watching[i];
        if (T->trace != trace_id || T->symbolic) continue;
        /* (not a read source_value made a header of its own for) */
        for (int k = 0; k < T->nreads; k++) {
            VarRead *r = &T->reads[k];
            const tfe_tensor *u = r->t;
            if ((!r->fresh && !r->nregs) || (r->after && !r->fresh) || (Obj *)r->var != var.u.o || u->storage != t->storage || u->offset != t->offset ||
                u->dtype != t->dtype || u->rank != t->rank ||
                memcmp(u->shape, t->shape, sizeof *u->shape * (size_t)u->rank) ||
                memcmp(u->strides, t->strides, sizeof *u->strides * (size_t)u->rank))
                continue;
            if (r->fresh == 1) { /* where the run was is no longer the guess */
                free(r->regs);
                r->regs = NULL;
                r->nregs = 0;
                r->fresh = 2;
            }
            read_add_region(r, region);
        }
    }
}

void tapes_read_fresh(uint32_t trace_id, Value var, tfe_tensor *t, int region, bool after, bool at_end)
{
    for (int i = 0; i < nwatching; i++) {
        Tape *T = watching[i];
        if (T->trace == trace_id && !T->symbolic && is_variable(var))
            tape_note_read_after(T, (Variable *)var.u.o, t, region, false, after, at_end);
    }
}

void tapes_read_unnote(uint32_t trace_id, Value var, const tfe_tensor *t, int r0, int r1)
{
    for (int i = 0; i < nwatching; i++) {
        Tape *T = watching[i];
        if (T->trace != trace_id || T->symbolic) continue;
        for (int k = 0; k < T->nreads; k++) {
            VarRead *r = &T->reads[k];
            if ((Obj *)r->var != var.u.o || r->t != t || !r->nregs) continue;
            int m = 0;
            for (int j = 0; j < r->nregs; j++)
                if (r->regs[j] != r0 && r->regs[j] != r1) r->regs[m++] = r->regs[j];
            if (m == r->nregs) continue;
            r->nregs = m;
            if (m) continue;
            /* read only there: no read at all */
            tensor_decref(r->t);
            value_decref(v_obj(V_OBJECT, r->var));
            free(r->regs);
            memmove(r, r + 1, sizeof *r * (size_t)(T->nreads - k - 1));
            T->nreads--;
            k--;
        }
        /* a read split off from this one (VarRead.zeros) is the tensor's
         * only read again: its part is the tensor's gradient */
        bool other = false;
        for (int k = 0; k < T->nreads && !other; k++)
            other = (Obj *)T->reads[k].var == var.u.o && T->reads[k].t == t && !T->reads[k].zeros;
        for (int k = 0; k < T->nreads && !other; k++)
            if ((Obj *)T->reads[k].var == var.u.o && T->reads[k].t == t) T->reads[k].zeros = false;
    }
}

void tapes_read_outer(uint32_t trace_id, Value var, tfe_tensor *t)
{
    if (!is_variable(var) || !((Variable *)var.u.o)->trainable) return; /* (read: no tape notes it) */
    for (int i = 0; i < nwatching; i++) {
        Tape *T = watching[i];
        if (T->trace != trace_id && !T->symbolic && !tfe_tape_is_watched(T->tape, t))
            tape_note_read(T, (Variable *)var.u.o, t, 0, false);
    }
}

void tapes_loop_count(uint32_t trace_id, Value var, int kinds, int id, tfe_tensor *count, const bool *reach,
                      int nreach)
{
    if (!is_variable(var) || !((Variable *)var.u.o)->trainable) return; /* (read: no tape notes it) */
    for (int i = 0; i < nwatching; i++) {
        Tape *T = watching[i];
        if (T->trace != trace_id || T->symbolic || T->spent) continue;
        T->loops = xrealloc(T->loops, sizeof *T->loops * (size_t)(T->nloops + 1));
        ((Variable *)var.u.o)->o.h.refcount++;
        tensor_incref(count);
        bool *rt = xcalloc((size_t)nreach + 1, 1);
        for (int k = 0; k < nreach; k++) rt[k] = reach[k];
        T->loops[T->nloops++] = (struct LoopNote){(Variable *)var.u.o, count, id, kinds, rt, nreach};
    }
}

void tapes_reads_settle(uint32_t trace_id)
{
    for (int i = 0; i < nwatching; i++)
        if (watching[i]->trace == trace_id)
            for (int k = 0; k < watching[i]->nreads; k++) {
                VarRead *r = &watching[i]->reads[k];
                /* a read the run made after an assign: the value after the
                 * if when the variable still holds it */
                if (r->fresh && r->after) r->at_end = r->t == r->var->value;
                r->fresh = 0;
            }
}

/* `var op= x` (op an AOP_ADD..AOP_DIV): the variable is updated in place, as
 * PyTorch updates a parameter, so the name stays bound to the variable and
 * later tapes keep watching it. It is a call of a bound builtin that is an
 * effect, so staged code records it like v.assign_sub(x). */
int variable_update(Interp *I, Value var, int aop, Value x)
{
    int mode = aop == AOP_ADD ? 1 : aop == AOP_SUB ? 2 : aop == AOP_MUL ? 3 : 4;
    Value m = bound(compound_names[mode], bi_var_assign, (void *)(intptr_t)(mode | COMPOUND), var.u.o, false,
                    BF_EFFECT);
    Value out = v_nil();
    int rc = call_value(I, m, 1, &x, 0, NULL, NULL, &out);
    value_decref(out);
    value_decref(m);
    return rc;
}

tfe_tensor *variable_peek(Value var) { return ((Variable *)var.u.o)->value; }


unsigned variable_grad_id(Value var) { return is_variable(var) ? ((Variable *)var.u.o)->grad_id : 0; }

/* Staged code's fused variable updates (graph/exec_update.c): the mode of a
 * bound v.assign(x) / assign_add / assign_sub / `v op= x` (1 + its mode: 1
 * assign, 2 add, 3 sub, 4 mul, 5 div), and where the variable keeps its
 * value; 0 for any other callable. */
int variable_assign_target(Value callable, tfe_tensor ***slot)
{
    if (callable.kind != V_BUILTIN) return 0;
    const Builtin *b = (const Builtin *)callable.u.o;
    if (b->fn != bi_var_assign || !is_variable(b->self)) return 0;
    if (slot) *slot = &((Variable *)b->self.u.o)->value;
    return ((int)(intptr_t)b->data & (COMPOUND - 1)) + 1;
}

void variable_replace_take(Value var, tfe_tensor *t)
{
    Variable *v = (Variable *)var.u.o;
    t->weak = false;
    tfe_prov_assign(&t->prov, v->prov);
    tensor_decref(v->value);
    v->value = t;
}

static int params_visit(void *ctx, const char *path, Value leaf)
{
    value_incref(leaf);
    record_set_take(ctx, path, strlen(path), leaf);
    return 0;
}

/* params(obj, all=false): a record path -> variable of every trainable
 * variable (every variable with all=true) reachable from obj, in traversal
 * order, each once (at its first path). */
BUILTIN(bi_params)
{
    Value a[2];
    bool p[2];
    if (args_parse(I, "params", "obj, all=", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    /* all=true: the non-trainable variables too (batch norm's moving
     * averages), as Keras' model.weights beside trainable_weights */
    bool all = false;
    if (p[1] && arg_opt_bool(I, "params()", "all", a[1], false, &all)) return -1;
    Record *r = record_new();
    state_walk(a[0], all ? WALK_UNTRAINABLE : 0, params_visit, r);
    *out = v_obj(V_RECORD, r);
    return 0;
}

/* --- grad(f, argnums=0), value_and_grad(f, argnums=0) -------------------------------
 * The returned function is a Builtin whose self is the tuple (f, argnums):
 * self is released with the Builtin, so nothing else needs freeing. */

static const char *const grad_names[] = {"grad", "value_and_grad"};

/* The argnums as a list of indices; *multi when a tuple was given. */
static int parse_argnums(Interp *I, const char *fn, Value a, int *idx, int *n, bool *multi)
{
    Seq *s = seq_as(a);
    *multi = s != NULL;
    int cnt = s ? s->n : 1;
    if (a.kind == V_LIST) return arg_error(I, fn, "argnums", "an int or a tuple of ints", a);
    if (cnt > 64) return interp_raise(I, "%s: at most 64 argnums", fn);
    for (int i = 0; i < cnt; i++) {
        Value x = s ? s->items[i] : a;
        if (x.kind != V_SCALAR || !dtype_is_int((tfe_dtype)x.dtype))
            return arg_error(I, fn, "argnums", "an int or a tuple of ints", x);
        if (x.u.i < 0) return interp_raise(I, "%s: argnums must be non-negative, got %lld", fn, (long long)x.u.i);
        idx[i] = (int)x.u.i;
    }
    *n = cnt;
    return 0;
}

/* The argument as the function will see it, with everything differentiable
 * watched on T: tensors as they are, scalars boxed (a fresh tensor that then
 * has an identity), containers rebuilt only when something inside was boxed. */
static int watch_arg(Interp *I, const char *fn, Tape *T, Value v, Value *out, int depth, SrcPath *path)
{
    if (depth > 100) return interp_raise(I, "%s: the argument is nested too deeply", fn);
    if (v.kind == V_SCALAR || v.kind == V_TENSOR || is_variable(v)) {
        tfe_dtype dt = v.kind == V_SCALAR ? (tfe_dtype)v.dtype : v.kind == V_TENSOR ? v.u.t->dtype
                                                                : ((Variable *)v.u.o)->value->dtype;
        if (!dtype_is_float(dt))
            return interp_raise(I, "%s: argument %s is %s; gradients are taken with respect to floats "
                                   "(pass a float: 3.0 rather than 3, or float(x))", fn, path->s, dtype_name(dt));
    }
    if (v.kind == V_SCALAR) {
        tfe_tensor *t = value_to_tensor(v);
        tfe_tape_watch(T->tape, t);
        *out = v_tensor_take(t);
        return 0;
    }
    if (v.kind == V_TENSOR && I->tracer && trace_watch_unboxed(v.u.t)) {
        /* a traced tensor that stands for a number: boxed as eagerly (a
         * tensor of its own, which the function's ops keep a tensor and a
         * result made from it stays one: trace.h, TNote.boxed) */
        tfe_tensor *box = trace_watch_box(I->tracer, v.u.t, false);
        if (!box) return interp_raise_tensor_error(I);
        tfe_tape_watch(T->tape, box);
        *out = v_tensor_take(box);
        return 0;
    }
    if (v.kind == V_TENSOR) {
        /* A tensor of its own, as each argument of JAX's grad is: the one
         * passed may also be another argument, a value the function closes
         * over, or a variable's value, and watching it would add the
         * gradient through those uses too (grad(f)(x, x) of sum(a * a * b)
         * gave 3x^2 for a). A view, recorded by any outer tape, so a
         * gradient of this gradient still reaches the tensor passed. */
        tfe_attrs at;
        tfe_attrs_init(&at);
        for (int i = 0; i < v.u.t->rank; i++) at.ints[at.nints++] = v.u.t->shape[i];
        /* on the tensor's own device: a host tensor would otherwise go to
         * the default device first (a copy, and another staged signature) */
        int dev = tfe_device_default(), here = v.u.t->storage ? v.u.t->storage->device : 0;
        if (dev != here) tfe_device_set_default(here);
        tfe_tensor *own = tfe_call1(OP_RESHAPE, 1, &v.u.t, &at);
        if (dev != here) tfe_device_set_default(dev);
        if (!own) return interp_raise_tensor_error(I);
        tfe_tape_watch(T->tape, own);
        if (I->tracer) trace_alias_touch(I->tracer, T->tape, own);
        *out = v_tensor_take(own);
        return 0;
    } else if (is_variable(v)) {
        tape_note_read(T, (Variable *)v.u.o, ((Variable *)v.u.o)->value, 0, false);
    } else if (v.kind == V_TUPLE || v.kind == V_LIST || v.kind == V_RECORD) {
        Seq *s = seq_as(v);
        Record *r = s ? NULL : (Record *)v.u.o;
        int n = s ? s->n : r->n;
        Value *items = xmalloc(sizeof(Value) * (size_t)(n ? n : 1));
        bool changed = false;
        for (int i = 0; i < n; i++) {
            Value x = s ? s->items[i] : r->vals[i];
            size_t was = path_push(path, !s, s ? NULL : r->keys[i]->s, i);
            if (watch_arg(I, fn, T, x, &items[i], depth + 1, path)) {
                for (int j = 0; j < i; j++) value_decref(items[j]);
                free(items);
                return -1;
            }
            path->len = was;
            path->s[was] = 0;
            changed |= items[i].kind != x.kind || (v_is_obj(x) && items[i].u.o != x.u.o) ||
                       (x.kind == V_TENSOR && items[i].u.t != x.u.t);
        }
        if (!changed) {
            for (int i = 0; i < n; i++) value_decref(items[i]);
            free(items);
        } else if (s) {
            Seq *c = seq_new(n);
            c->h.kind = v.kind;
            for (int i = 0; i < n; i++) seq_push_take(c, items[i]);
            free(items);
            *out = v_obj((ValueKind)v.kind, c);
            return 0;
        } else {
            Record *c = record_new();
            for (int i = 0; i < n; i++) record_set_take(c, r->keys[i]->s, r->keys[i]->len, items[i]);
            free(items);
            *out = v_obj(V_RECORD, c);
            return 0;
        }
    } else {
        return interp_raise(I, "%s: cannot differentiate with respect to a value of type %s", fn,
                            value_kind_name(v));
    }
    value_incref(v);
    *out = v;
    return 0;
}

/* g(*args): argv[0] is self = (f, argnums). */
BUILTIN(bi_grad_call)
{
    int mode = (int)(intptr_t)data;
    const char *fn = grad_names[mode];
    Seq *self = (Seq *)argv[0].u.o;
    Value f = self->items[0];
    int idx[64], nidx;
    bool multi;
    if (parse_argnums(I, fn, self->items[1], idx, &nidx, &multi)) return -1;
    argc--, argv++;
    for (int i = 0; i < nidx; i++)
        if (idx[i] >= argc)
            return interp_raise(I, "%s: argnums %d is out of range: the function was called with %d positional argument%s",
                                fn, idx[i], argc, argc == 1 ? "" : "s");
    Tape *T = tape_alloc(false, false);
    if (!T) return interp_raise_tensor_error(I);
    Value *args = xmalloc(sizeof(Value) * (size_t)(argc ? argc : 1));
    for (int i = 0; i < argc; i++) { args[i] = argv[i]; value_incref(args[i]); }
    int rc = -1;
    Value y = v_nil(), srcs = v_nil(), grads = v_nil();
    tape_start(I, T);
    for (int k = 0; k < nidx; k++) {
        int i = idx[k];
        bool again = false;
        for (int j = 0; j < k; j++) again |= idx[j] == i;
        if (again) continue;
        Value w;
        SrcPath path;
        path.len = (size_t)snprintf(path.s, sizeof path.s, "%d", i);
        if (watch_arg(I, fn, T, args[i], &w, 0, &path)) { tape_stop(T); goto done; }
        value_decref(args[i]);
        args[i] = w;
    }
    Loc here = I->cur_loc;
    rc = call_value(I, f, argc, args, nkw, kwnames, kwvals, &y);
    I->cur_loc = here; /* errors below are about this call, not about f's last line */
    tape_stop(T);
    if (rc) goto done;
    rc = -1;
    if (y.kind != V_TENSOR && y.kind != V_SCALAR && !is_variable(y)) {
        interp_raise(I, "%s: the function must return a tensor, got %s", fn, value_kind_name(y));
        goto done;
    }
    /* the sources, in the shape of the result: one value or a tuple */
    if (multi) {
        Value items[64];
        for (int k = 0; k < nidx; k++) items[k] = args[idx[k]];
        srcs = value_seq_tuple(nidx, items);
    } else {
        srcs = args[idx[0]];
        value_incref(srcs);
    }
    if (tape_gradient(I, fn, T, y, srcs, &grads)) goto done;
    if (mode == 1) {
        Value pair[2] = {y, grads};
        *out = value_seq_tuple(2, pair);
        value_decref(grads);
    } else {
        *out = grads;
    }
    rc = 0;
done:
    value_decref(y);
    value_decref(srcs);
    for (int i = 0; i < argc; i++) value_decref(args[i]);
    free(args);
    value_decref(v_obj(V_OBJECT, T));
    return rc;
}

/* grad(f, argnums=0) and value_and_grad(f, argnums=0): data 0 or 1 */
BUILTIN(bi_grad)
{
    int mode = (int)(intptr_t)data;
    const char *fn = grad_names[mode];
    Value a[2];
    bool p[2];
    if (args_parse(I, fn, "f, argnums=", argc, argv, nkw, kwnames, kwvals, a, p)) return -1;
    if (a[0].kind != V_FN && a[0].kind != V_BUILTIN)
        return arg_error(I, fn, "f", "a function", a[0]);
    Value argnums = p[1] ? a[1] : v_int(0);
    /* JAX takes any sequence of ints: list(0, 1) and the bracket literal
     * [0, 1] (a 1-d int tensor) are the tuple (0, 1), and the gradients a
     * tuple as for it */
    Value seq = v_nil();
    if (argnums.kind == V_LIST) {
        Seq *l = (Seq *)argnums.u.o;
        seq = value_seq_tuple(l->n, l->items);
    } else if (argnums.kind == V_TENSOR && argnums.u.t->rank == 1 && dtype_is_int(argnums.u.t->dtype) &&
               argnums.u.t->storage && argnums.u.t->shape[0] <= 64) {
        Value items[64];
        for (int64_t i = 0; i < argnums.u.t->shape[0]; i++) items[i] = v_int(tensor_get_i64(argnums.u.t, i));
        seq = value_seq_tuple((int)argnums.u.t->shape[0], items);
    }
    if (seq.kind != V_NIL) argnums = seq;
    int idx[64], n;
    bool multi;
    if (parse_argnums(I, fn, argnums, idx, &n, &multi) || (multi && n == 0)) {
        if (!I->has_error) interp_raise(I, "%s: argnums must not be empty", fn);
        value_decref(seq);
        return -1;
    }
    Value pair[2] = {a[0], argnums};
    Value self = value_seq_tuple(2, pair);
    value_decref(seq);
    Value g = builtin_new(fn, bi_grad_call, (void *)(intptr_t)mode);
    ((Builtin *)g.u.o)->self = self;
    *out = g;
    return 0;
}

void builtins_autodiff_register(Interp *I)
{
    interp_define_builtin(I, "variable", bi_variable, NULL);
    interp_define_builtin(I, "tape", bi_tape, NULL);
    interp_define_builtin(I, "params", bi_params, NULL);
    interp_define_builtin(I, "grad", bi_grad, (void *)(intptr_t)0);
    interp_define_builtin(I, "value_and_grad", bi_grad, (void *)(intptr_t)1);
}

